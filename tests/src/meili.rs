//! A real Meilisearch server on loopback, for the tests that stop and start
//! the search server under a running central. The binary is found as
//! `tests/run.sh` finds it: `KITH_MEILI_BIN`, then `meilisearch` on `PATH`,
//! then `../shared/bin/meilisearch` beside the repository. Each server has
//! its own port, data directory and random master key (passed in the
//! environment, so it is in no process list and no log).

use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// The Meilisearch binary, or why there is none.
pub fn find_bin() -> std::result::Result<PathBuf, String> {
    if let Some(bin) = std::env::var_os("KITH_MEILI_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        return if bin.is_file() {
            Ok(bin)
        } else {
            Err(format!("KITH_MEILI_BIN={} is not a file", bin.display()))
        };
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|dir| dir.join("meilisearch"))
        .find(|bin| bin.is_file());
    if let Some(bin) = on_path {
        return Ok(bin);
    }
    let beside = crate::reference_dir().join("bin/meilisearch");
    if beside.is_file() {
        return Ok(beside);
    }
    Err(
        "no Meilisearch binary: KITH_MEILI_BIN is unset, none is on PATH and there is no ../shared/bin/meilisearch"
            .to_owned(),
    )
}

/// A Meilisearch process on `127.0.0.1:<port>` with its own data directory.
/// Dropping it kills the process and removes the data.
pub struct Meili {
    /// Like `http://127.0.0.1:PORT`.
    pub url: String,
    bin: PathBuf,
    port: u16,
    /// The master key; never printed (`Meili` has no `Debug`).
    key: String,
    child: Option<Child>,
    data: tempfile::TempDir,
}

impl Meili {
    /// Starts a fresh server and waits until `/health` answers.
    pub fn start() -> Result<Self> {
        let mut meili = Self::stopped()?;
        meili.run()?;
        Ok(meili)
    }

    /// A server with its port, key and data directory chosen, not started:
    /// a Meilisearch that is down (`run` starts it).
    pub fn stopped() -> Result<Self> {
        let bin = find_bin().map_err(anyhow::Error::msg)?;
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        Ok(Self {
            url: format!("http://127.0.0.1:{port}"),
            bin,
            port,
            key: random_key()?,
            child: None,
            data: tempfile::tempdir()?,
        })
    }

    /// The master key, for central's `KITH_MEILI_KEY`.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The environment that points central at this server, on `index`.
    pub fn central_env<'a>(&'a self, index: &'a str) -> [(&'static str, &'a str); 4] {
        [
            ("KITH_SEARCH_BACKEND", "meilisearch"),
            ("KITH_MEILI_URL", &self.url),
            ("KITH_MEILI_INDEX", index),
            ("KITH_MEILI_KEY", &self.key),
        ]
    }

    fn log_path(&self) -> PathBuf {
        self.data.path().join("meilisearch.log")
    }

    /// Starts the server (again) on the same port and data directory, and
    /// waits until `/health` answers.
    pub fn run(&mut self) -> Result<()> {
        if self.child.is_some() {
            bail!("Meilisearch is already running");
        }
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log_path())?;
        let child = Command::new(&self.bin)
            .arg("--http-addr")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--db-path")
            .arg(self.data.path().join("db"))
            .arg("--no-analytics")
            .current_dir(self.data.path())
            .env("MEILI_MASTER_KEY", &self.key)
            .env_remove("MEILI_HTTP_ADDR")
            .env_remove("MEILI_DB_PATH")
            .env_remove("MEILI_ENV")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", self.bin.display()))?;
        self.child = Some(child);
        self.wait_healthy(Duration::from_secs(60))
    }

    fn wait_healthy(&mut self, within: Duration) -> Result<()> {
        let http = reqwest::blocking::Client::new();
        let deadline = Instant::now() + within;
        loop {
            let healthy = http
                .get(format!("{}/health", self.url))
                .timeout(Duration::from_secs(2))
                .send()
                .is_ok_and(|r| r.status().is_success());
            if healthy {
                return Ok(());
            }
            let exited = match self.child.as_mut() {
                Some(child) => child.try_wait()?.is_some(),
                None => true,
            };
            if exited || Instant::now() > deadline {
                let _ = self.kill();
                bail!(
                    "Meilisearch on {} {}; its log ends:\n{}",
                    self.url,
                    if exited {
                        "exited before it was healthy"
                    } else {
                        "was not healthy in time"
                    },
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// SIGKILL, as a crash would: no shutdown code runs; the data stays.
    pub fn kill(&mut self) -> Result<()> {
        if let Some(mut child) = self.child.take() {
            child.kill()?;
            child.wait()?;
        }
        Ok(())
    }

    /// The last lines Meilisearch logged, for failure messages.
    pub fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = std::fs::File::open(self.log_path()) {
            let _ = f.read_to_string(&mut text);
        }
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Where the server keeps its data.
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }
}

impl Drop for Meili {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}

/// 32 hex digits from the kernel's random source.
fn random_key() -> Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}
