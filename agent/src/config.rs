//! Where the agent keeps things and how it reaches central: paths from
//! `KITH_*` variables (or the XDG-style defaults), and the central URL and
//! token from `KITH_CENTRAL_URL`/`KITH_TOKEN` or `auth.json` (mode 0600).

use std::fs;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// A token; `Debug` never shows it.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: String) -> Self {
        Self(s)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug, Clone)]
pub struct Paths {
    pub config_dir: PathBuf,
    pub state_dir: PathBuf,
    pub claude_dir: PathBuf,
    pub codex_dir: PathBuf,
    pub pi_dir: PathBuf,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

impl Paths {
    pub fn from_env() -> Self {
        let home = env_path("HOME").unwrap_or_else(|| PathBuf::from("."));
        Self {
            config_dir: env_path("KITH_CONFIG_DIR").unwrap_or_else(|| home.join(".config/kith")),
            state_dir: env_path("KITH_STATE_DIR").unwrap_or_else(|| home.join(".local/state/kith")),
            claude_dir: env_path("KITH_CLAUDE_DIR").unwrap_or_else(|| home.join(".claude")),
            codex_dir: env_path("KITH_CODEX_DIR")
                .or_else(|| env_path("CODEX_HOME"))
                .unwrap_or_else(|| home.join(".codex")),
            pi_dir: env_path("KITH_PI_DIR").unwrap_or_else(|| home.join(".pi/agent")),
        }
    }

    pub fn auth_file(&self) -> PathBuf {
        self.config_dir.join("auth.json")
    }
}

/// The contents of `auth.json`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Auth {
    pub central_url: String,
    pub token: Secret,
}

impl Auth {
    /// Env overrides the file; either may provide both values.
    pub fn load(paths: &Paths) -> Result<Self> {
        let file: Option<Auth> = match fs::read(paths.auth_file()) {
            Ok(bytes) => Some(serde_json::from_slice(&bytes).with_context(|| {
                format!("{} is not valid auth JSON", paths.auth_file().display())
            })?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).context("cannot read auth.json"),
        };
        let url = std::env::var("KITH_CENTRAL_URL")
            .ok()
            .filter(|v| !v.is_empty());
        let token = std::env::var("KITH_TOKEN")
            .ok()
            .filter(|v| !v.is_empty())
            .map(Secret::new);
        match (url.or_else(|| file.as_ref().map(|f| f.central_url.clone())), token.or(file.map(|f| f.token))) {
            (Some(central_url), Some(token)) => Ok(Self { central_url, token }),
            _ => bail!("not logged in: run `kith login --central URL` (or set KITH_CENTRAL_URL and KITH_TOKEN)"),
        }
    }

    /// Writes `auth.json` with mode 0600, keeping a previous file as `.bak`.
    pub fn save(&self, paths: &Paths) -> Result<()> {
        fs::create_dir_all(&paths.config_dir)?;
        let path = paths.auth_file();
        if path.exists() {
            fs::rename(&path, path.with_extension("json.bak"))?;
        }
        write_private(&path, &serde_json::to_vec_pretty(self)?)
    }
}

/// Writes `bytes` to `path` atomically (temp + fsync + rename), mode 0600.
pub fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = path.parent().context("path has no parent")?;
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    let res = f.write_all(bytes).and_then(|()| f.sync_all());
    if let Err(e) = res {
        let _ = fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("cannot write {}", path.display()));
    }
    fs::set_permissions(&tmp, fs::Permissions::from_mode(0o600))?;
    fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))
}
