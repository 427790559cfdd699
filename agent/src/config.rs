//! Where the agent keeps things and how it reaches central: the folders (from
//! flags, `KITH_*` variables, `XDG_CONFIG_HOME`/`XDG_STATE_HOME` or the XDG
//! defaults), the login `kith login` stores (`auth.json`, mode 0600; which
//! URL and token apply is `settings`' to say), atomic private file writes,
//! and the locks between kith processes. Imports nothing of kith's but its
//! error.

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::{Error, IoContext, Result};

/// A token. `Debug` never shows it, and nothing formats it into a message.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub(crate) struct Secret(String);

impl Secret {
    pub(crate) fn new(s: String) -> Self {
        Self(s)
    }

    /// For the `Authorization` header only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// Every folder kith reads or writes, resolved once before any work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Paths {
    /// `config.toml`, `auth.json`.
    pub(crate) config_dir: PathBuf,
    /// Cursors, outbox, rejected deltas, the hook log, the lock.
    pub(crate) state_dir: PathBuf,
    /// Claude Code's home (`projects/` holds the transcripts).
    pub(crate) claude_dir: PathBuf,
    /// Codex's home (`sessions/YYYY/MM/DD/`).
    pub(crate) codex_dir: PathBuf,
    /// pi's agent folder (`sessions/`, `extensions/`).
    pub(crate) pi_dir: PathBuf,
    /// Gemini CLI's home (`tmp/<project>/chats/`) [env: KITH_GEMINI_DIR].
    pub(crate) gemini_dir: PathBuf,
    /// Copilot CLI's home (`session-state/<id>/events.jsonl`, `hooks/`)
    /// [env: KITH_COPILOT_DIR, COPILOT_HOME].
    pub(crate) copilot_dir: PathBuf,
    /// Cursor's home (`projects/<slug>/agent-transcripts/`) [env: KITH_CURSOR_DIR].
    pub(crate) cursor_dir: PathBuf,
    /// OpenCode's data folder (`opencode.db`, or `storage/` before v1.2)
    /// [env: KITH_OPENCODE_DIR].
    pub(crate) opencode_dir: PathBuf,
}

/// Explicit choices (flags); `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub(crate) struct PathOverrides {
    pub(crate) config_dir: Option<PathBuf>,
    pub(crate) state_dir: Option<PathBuf>,
    pub(crate) claude_dir: Option<PathBuf>,
    pub(crate) codex_dir: Option<PathBuf>,
    pub(crate) pi_dir: Option<PathBuf>,
}

fn env_path(name: &str) -> Option<PathBuf> {
    std::env::var_os(name)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// Where a setting's value came from, as `kith config` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Origin {
    Default,
    /// `config.toml`, or `auth.json` (written by `kith login`).
    File(PathBuf),
    Env(&'static str),
    Flag(&'static str),
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Default => f.write_str("default"),
            Self::File(path) => write!(f, "file {}", path.display()),
            Self::Env(var) => write!(f, "env {var}"),
            Self::Flag(flag) => write!(f, "flag {flag}"),
        }
    }
}

/// One folder: the flag, else the first variable set (each joined with its
/// suffix: `XDG_CONFIG_HOME` + `kith`), else `default` under the home.
fn pick(
    flag: Option<PathBuf>,
    flag_name: &'static str,
    vars: &[(&'static str, &str)],
    home: &Path,
    default: &str,
) -> (PathBuf, Origin) {
    if let Some(dir) = flag {
        return (dir, Origin::Flag(flag_name));
    }
    vars.iter()
        .find_map(|(var, suffix)| env_path(var).map(|dir| (dir.join(suffix), Origin::Env(var))))
        .unwrap_or_else(|| (home.join(default), Origin::Default))
}

/// Where each folder of `Paths` came from, by the folder's name.
pub(crate) type PathOrigins = [(&'static str, Origin); 9];

impl Paths {
    /// Flag > `KITH_*` > XDG base directory variable > default (Claude Code
    /// also honours `CLAUDE_CONFIG_DIR`, Codex `CODEX_HOME`, Copilot CLI
    /// `COPILOT_HOME`, each agent's own).
    pub(crate) fn resolve(o: PathOverrides) -> Self {
        Self::resolve_traced(o).0
    }

    /// `resolve`, also saying where each folder came from.
    pub(crate) fn resolve_traced(o: PathOverrides) -> (Self, PathOrigins) {
        let home = env_path("HOME").unwrap_or_else(|| PathBuf::from("."));
        let (config_dir, config_o) = pick(
            o.config_dir,
            "--config-dir",
            &[("KITH_CONFIG_DIR", ""), ("XDG_CONFIG_HOME", "kith")],
            &home,
            ".config/kith",
        );
        let (state_dir, state_o) = pick(
            o.state_dir,
            "--state-dir",
            &[("KITH_STATE_DIR", ""), ("XDG_STATE_HOME", "kith")],
            &home,
            ".local/state/kith",
        );
        let (claude_dir, claude_o) = pick(
            o.claude_dir,
            "--claude-dir",
            &[("KITH_CLAUDE_DIR", ""), ("CLAUDE_CONFIG_DIR", "")],
            &home,
            ".claude",
        );
        let (codex_dir, codex_o) = pick(
            o.codex_dir,
            "--codex-dir",
            &[("KITH_CODEX_DIR", ""), ("CODEX_HOME", "")],
            &home,
            ".codex",
        );
        let (pi_dir, pi_o) = pick(
            o.pi_dir,
            "--pi-dir",
            &[("KITH_PI_DIR", "")],
            &home,
            ".pi/agent",
        );
        // Only a variable moves these (no flags).
        let (gemini_dir, gemini_o) = pick(None, "", &[("KITH_GEMINI_DIR", "")], &home, ".gemini");
        let (copilot_dir, copilot_o) = pick(
            None,
            "",
            &[("KITH_COPILOT_DIR", ""), ("COPILOT_HOME", "")],
            &home,
            ".copilot",
        );
        let (cursor_dir, cursor_o) = pick(None, "", &[("KITH_CURSOR_DIR", "")], &home, ".cursor");
        let (opencode_dir, opencode_o) = pick(
            None,
            "",
            &[("KITH_OPENCODE_DIR", "")],
            &home,
            ".local/share/opencode",
        );
        let paths = Self {
            config_dir,
            state_dir,
            claude_dir,
            codex_dir,
            pi_dir,
            gemini_dir,
            copilot_dir,
            cursor_dir,
            opencode_dir,
        };
        let origins = [
            ("config_dir", config_o),
            ("state_dir", state_o),
            ("claude_dir", claude_o),
            ("codex_dir", codex_o),
            ("pi_dir", pi_o),
            ("gemini_dir", gemini_o),
            ("copilot_dir", copilot_o),
            ("cursor_dir", cursor_o),
            ("opencode_dir", opencode_o),
        ];
        (paths, origins)
    }

    /// Every folder, in `PathOrigins`' order: kith's own, then each
    /// agent's.
    pub(crate) fn dirs(&self) -> [&PathBuf; 9] {
        [
            &self.config_dir,
            &self.state_dir,
            &self.claude_dir,
            &self.codex_dir,
            &self.pi_dir,
            &self.gemini_dir,
            &self.copilot_dir,
            &self.cursor_dir,
            &self.opencode_dir,
        ]
    }

    /// Everything under one folder: a device of a test's own.
    #[cfg(test)]
    pub(crate) fn under(root: &Path) -> Self {
        Self {
            config_dir: root.join("config"),
            state_dir: root.join("state"),
            claude_dir: root.join(".claude"),
            codex_dir: root.join(".codex"),
            pi_dir: root.join(".pi/agent"),
            gemini_dir: root.join(".gemini"),
            copilot_dir: root.join(".copilot"),
            cursor_dir: root.join(".cursor"),
            opencode_dir: root.join(".local/share/opencode"),
        }
    }

    pub(crate) fn auth_file(&self) -> PathBuf {
        self.config_dir.join("auth.json")
    }
}

/// Central's URL and this machine's token.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Auth {
    pub(crate) central_url: String,
    pub(crate) token: Secret,
    /// PEM certificates of the private CA that signed central's certificate
    /// (`kith login --ca-cert`), trusted beside the system's store.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) ca_cert: Option<String>,
}

impl Auth {
    /// `auth.json` as `kith login` wrote it, if it exists.
    pub(crate) fn read(paths: &Paths) -> Result<Option<Self>> {
        let path = paths.auth_file();
        match fs::read(&path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
                Error::Invalid {
                    what: "auth JSON",
                    path: path.clone(),
                    reason: e.to_string(),
                }
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at("read", &path),
        }
    }

    /// Writes `auth.json` (0600), keeping the previous one as `auth.json.bak`.
    pub(crate) fn save(&self, paths: &Paths) -> Result<()> {
        let path = paths.auth_file();
        match fs::read(&path) {
            Ok(old) => write_private(&path.with_extension("json.bak"), &old)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).at("read", &path),
        }
        let json = serde_json::to_vec_pretty(self).map_err(|e| Error::Invalid {
            what: "auth JSON",
            path: path.clone(),
            reason: e.to_string(),
        })?;
        write_private(&path, &json)
    }
}

/// Creates `dir` (and parents) readable by the owner only.
pub(crate) fn private_dir(dir: &Path) -> Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .at("create", dir)
}

/// How much of a write must survive a crash. Each fsync costs a hook 0.2 to
/// 10 ms here, so each file gets only the guarantee it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Durability {
    /// File and folder synced: after a crash the new file is there.
    Durable,
    /// File synced, folder not: after a crash the file is the old one or the
    /// new one, never torn (for marks that are only informative).
    NotTorn,
    /// Nothing synced: after a crash the file may be missing, old, empty or
    /// new (advisory text such as the last error; outbox entries, whose loss
    /// `outbox` recovers from).
    Advisory,
}

/// What tells that a file changed (written in place or replaced, created or
/// removed): its inode, size and modification time; `None` when it is not
/// there.
pub(crate) fn file_stamp(path: &Path) -> Option<(u64, u64, Option<std::time::SystemTime>)> {
    use std::os::unix::fs::MetadataExt;
    let meta = fs::metadata(path).ok()?;
    Some((meta.ino(), meta.len(), meta.modified().ok()))
}

/// Whether the file `meta` describes was left alone for at least `d`: one
/// changed since (or dated in the future) may still be being written.
pub(crate) fn left_alone_for(meta: &fs::Metadata, d: std::time::Duration) -> bool {
    meta.modified()
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age >= d)
}

/// Writes `bytes` to `path` atomically with mode 0600 and `Durable`.
pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    write_file(path, bytes, 0o600, Durability::Durable)
}

/// Writes `bytes` to `path` atomically: a temp file in the same folder,
/// (fsync,) rename, (fsync of the folder). Readers see the old file or the
/// new one, never a torn one; a full disk leaves the old file in place.
pub(crate) fn write_file(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    private_dir(dir)?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        uuid::Uuid::now_v7().simple()
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            if durability != Durability::Advisory {
                f.sync_all()?;
            }
            Ok(())
        })
        .and_then(|()| fs::rename(&tmp, path));
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e).at("write", path);
    }
    if durability != Durability::Durable {
        return Ok(());
    }
    // The rename is durable once the folder is.
    File::open(dir).and_then(|d| d.sync_all()).at("sync", dir)
}

/// Writes `bytes` to the file `path` names, atomically as `write_file`
/// does: when `path` is a symlink (a dotfile kept by GNU stow or
/// home-manager), to the file it finally points to, beside that file, so the
/// link stays a link. For the user's own files (agent configs, the login
/// profile); kith's state files are never links and take `write_file`.
pub(crate) fn write_through(
    path: &Path,
    bytes: &[u8],
    mode: u32,
    durability: Durability,
) -> Result<()> {
    write_file(&link_target(path)?, bytes, mode, durability)
}

/// The file a write to `path` lands in: `path` itself unless it is a
/// symlink, else the file at the end of its links, which need not exist
/// yet (a dangling link is written through too, as `>` in a shell does).
fn link_target(path: &Path) -> Result<PathBuf> {
    // Linux's own limit on links followed while resolving one path.
    const MAX_LINKS: usize = 40;
    let mut path = path.to_owned();
    for _ in 0..MAX_LINKS {
        let is_link = fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
        if !is_link {
            return Ok(path);
        }
        match fs::canonicalize(&path) {
            Ok(target) => return Ok(target),
            // A link to a file that does not exist: follow it one step.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).at("resolve the link", &path),
        }
        let to = fs::read_link(&path).at("read the link", &path)?;
        path = path.parent().unwrap_or(Path::new(".")).join(to);
    }
    Err(Error::Refused(format!(
        "{}: more than {MAX_LINKS} symbolic links in a row",
        path.display()
    )))
}

/// Advisory locks between kith processes (hooks run in parallel; `watch`
/// and `backfill` run beside them). Released on drop, or when the process
/// dies.
///
/// - the state lock: held briefly, for one file's capture or one entry's
///   bookkeeping (cursor read-modify-write, outbox moves);
/// - the send lock: held by the one process replaying the outbox, so deltas
///   of a chain reach central in order. Never taken while holding the state
///   lock.
#[derive(Debug)]
pub(crate) struct Lock {
    _file: File,
}

impl Lock {
    pub(crate) fn state(state_dir: &Path, wait: Duration) -> Result<Self> {
        Self::acquire(&state_dir.join("lock"), wait)
    }

    pub(crate) fn sending(state_dir: &Path, wait: Duration) -> Result<Self> {
        Self::acquire(&state_dir.join("send.lock"), wait)
    }

    fn acquire(path: &Path, wait: Duration) -> Result<Self> {
        use fs4::fs_std::FileExt;
        private_dir(path.parent().unwrap_or(Path::new(".")))?;
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(path)
            .at("open", path)?;
        let until = Instant::now() + wait;
        loop {
            if file.try_lock_exclusive().at("lock", path)? {
                return Ok(Self { _file: file });
            }
            if Instant::now() >= until {
                return Err(Error::Busy {
                    path: path.to_owned(),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn secrets_never_show_in_debug_output() {
        let auth = Auth {
            central_url: "https://c".into(),
            token: Secret::new("kith_supersecret".into()),
            ca_cert: None,
        };
        let shown = format!("{auth:?}");
        assert!(!shown.contains("supersecret"), "{shown}");
        assert!(shown.contains("Secret(***)"));
    }

    #[test]
    fn auth_is_private_and_the_previous_file_is_kept() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        for token in ["first", "second"] {
            Auth {
                central_url: "http://c/".into(),
                token: Secret::new(token.into()),
                ca_cert: None,
            }
            .save(&paths)?;
        }
        let mode = fs::metadata(paths.auth_file())?.permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let bak = fs::read_to_string(paths.auth_file().with_extension("json.bak"))?;
        assert!(bak.contains("first"));
        Ok(())
    }

    /// Regression: a dotfile kept as a symlink (GNU stow, home-manager) was
    /// replaced by a regular file, cutting it off from where the user keeps it.
    #[test]
    fn a_write_through_a_symlink_keeps_the_link_and_changes_its_target() -> anyhow::Result<()> {
        use std::os::unix::fs::symlink;
        let tmp = tempfile::tempdir()?;
        let home = tmp.path().join("home");
        let dotfiles = tmp.path().join("dotfiles");
        fs::create_dir_all(&home)?;
        fs::create_dir_all(dotfiles.join("shell"))?;
        let real = dotfiles.join("shell/profile");
        fs::write(&real, "old\n")?;
        fs::set_permissions(&real, fs::Permissions::from_mode(0o640))?;
        // A relative link to a second link, as stow writes them.
        symlink("dotfiles/shell/profile", tmp.path().join("profile"))?;
        let link = home.join(".profile");
        symlink("../profile", &link)?;

        write_through(&link, b"new\n", 0o640, Durability::Durable)?;
        assert!(fs::symlink_metadata(&link)?.file_type().is_symlink());
        assert_eq!(fs::read_link(&link)?, Path::new("../profile"));
        assert_eq!(fs::read_to_string(&real)?, "new\n");
        assert_eq!(fs::metadata(&real)?.permissions().mode() & 0o777, 0o640);
        let strays: Vec<_> = fs::read_dir(&home)?.collect::<Result<_, _>>()?;
        assert_eq!(strays.len(), 1, "no temp file left beside the link");

        // A link to a file not written yet: the file is made where it points.
        let dangling = home.join(".zprofile");
        symlink(dotfiles.join("shell/zprofile"), &dangling)?;
        write_through(&dangling, b"z\n", 0o644, Durability::Durable)?;
        assert!(fs::symlink_metadata(&dangling)?.file_type().is_symlink());
        assert_eq!(fs::read_to_string(dotfiles.join("shell/zprofile"))?, "z\n");

        // A plain file is written in place, as write_file does.
        let plain = home.join(".bashrc");
        write_through(&plain, b"b\n", 0o600, Durability::Durable)?;
        assert!(fs::symlink_metadata(&plain)?.file_type().is_file());
        assert_eq!(fs::read_to_string(&plain)?, "b\n");

        // A loop of links is an error, not a hang, and writes nothing.
        let a = home.join("a");
        symlink("b", &a)?;
        symlink("a", home.join("b"))?;
        assert!(write_through(&a, b"x", 0o600, Durability::Durable).is_err());
        assert!(fs::symlink_metadata(&a)?.file_type().is_symlink());
        Ok(())
    }

    #[test]
    fn a_second_lock_waits_and_then_gives_up() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let held = Lock::state(tmp.path(), Duration::ZERO)?;
        let other = Lock::state(tmp.path(), Duration::from_millis(50));
        assert!(matches!(other, Err(Error::Busy { .. })));
        Lock::sending(tmp.path(), Duration::ZERO)?;
        drop(held);
        Lock::state(tmp.path(), Duration::ZERO)?;
        Ok(())
    }
}
