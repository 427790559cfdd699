//! A real `kith-central` on loopback for a test: started on a data
//! directory of its own (or one a test breaks and starts again), over HTTP
//! or HTTPS with a throwaway CA, its admin commands, and what it logs.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::api::Api;
use crate::background::lines_of;
use crate::{bin, claude_user_line, delta};

/// A throwaway certificate authority and a certificate for 127.0.0.1 signed
/// by it (made with the `openssl` command), for central's TLS listener.
pub struct PrivateCa {
    /// The CA's certificate: what a client must trust.
    pub ca: PathBuf,
    /// Central's certificate and key (`KITH_TLS_CERT`, `KITH_TLS_KEY`).
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl PrivateCa {
    pub fn make(dir: &Path) -> Result<Self> {
        std::fs::write(
            dir.join("leaf.ext"),
            "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n",
        )?;
        for args in [
            "req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=kith-test-ca -keyout ca.key -out ca.pem",
            "req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout key.pem -out leaf.csr",
            "x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 1 -extfile leaf.ext -out cert.pem",
        ] {
            let made = Command::new("openssl")
                .args(args.split(' '))
                .current_dir(dir)
                .output()
                .context("cannot run openssl")?;
            anyhow::ensure!(
                made.status.success(),
                "openssl {args}: {}",
                String::from_utf8_lossy(&made.stderr)
            );
        }
        Ok(Self {
            ca: dir.join("ca.pem"),
            cert: dir.join("cert.pem"),
            key: dir.join("key.pem"),
        })
    }

    /// Central's environment for serving HTTPS with this certificate.
    pub fn central_env(&self) -> [(&'static str, String); 2] {
        [
            ("KITH_TLS_CERT", self.cert.display().to_string()),
            ("KITH_TLS_KEY", self.key.display().to_string()),
        ]
    }
}

/// A running `kith-central` on 127.0.0.1 with its own data directory.
pub struct Central {
    pub data_dir: PathBuf,
    pub url: String,
    child: Child,
    /// Keeps the temp dir alive (and removes it) with the harness.
    _tmp: Option<tempfile::TempDir>,
    /// Lines the server logged, for failure messages.
    pub log: mpsc::Receiver<String>,
}

impl Central {
    /// Starts central on a fresh data directory.
    pub fn start() -> Result<Self> {
        Self::start_with(&[])
    }

    /// Starts central on a fresh data directory with extra environment
    /// variables.
    pub fn start_with(env: &[(&str, &str)]) -> Result<Self> {
        let tmp = tempfile::tempdir()?;
        let data_dir = tmp.path().join("data");
        let mut c = Self::start_on(&data_dir, env)?;
        c._tmp = Some(tmp);
        Ok(c)
    }

    /// Starts central on `data_dir` with extra environment variables, and
    /// waits until it logged its address and `/healthz` answers.
    pub fn start_on(data_dir: &Path, env: &[(&str, &str)]) -> Result<Self> {
        Self::start_at(data_dir, "127.0.0.1:0", env)
    }

    /// SIGKILLs central and starts it again on the same data directory and
    /// address, as a crash and a supervisor's restart would.
    pub fn crash_and_restart(&mut self) -> Result<()> {
        self.kill()?;
        self.restart()
    }

    /// Starts a killed central again on the same data directory and address.
    pub fn restart(&mut self) -> Result<()> {
        let addr = self
            .url
            .trim_start_matches("http://")
            .trim_start_matches("https://")
            .to_owned();
        let mut next = Self::start_at(&self.data_dir, &addr, &[])?;
        std::mem::swap(&mut self.child, &mut next.child);
        std::mem::swap(&mut self.log, &mut next.log);
        Ok(())
    }

    fn start_at(data_dir: &Path, listen: &str, env: &[(&str, &str)]) -> Result<Self> {
        Self::spawn(central_command(), data_dir, listen, env)
    }

    /// Central over `data_dir` with its index folder on a tmpfs of `mib`
    /// MiB, mounted in a user and mount namespace of its own (`unshare
    /// -rm`), and `env` set: a disk to fill ([`Central::inside`]).
    pub fn start_with_index_on_tmpfs(
        data_dir: &Path,
        mib: u32,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        let index = data_dir.join("index");
        std::fs::create_dir_all(&index)?;
        let mount = format!(
            "mount -t tmpfs -o size={mib}m tmpfs '{}' && exec \"$0\" \"$@\"",
            index.display()
        );
        let mut cmd = Command::new("unshare");
        cmd.args(["-rm", "sh", "-c", &mount])
            .arg(bin("kith-central"));
        Self::spawn(cmd, data_dir, "127.0.0.1:0", env)
            .context("central on a small tmpfs needs `unshare -rm` (user and mount namespaces)")
    }

    /// Runs the shell `script` in central's namespaces, where its index's
    /// tmpfs is mounted.
    pub fn inside(&self, script: &str) -> Result<()> {
        let pid = self.child.id().to_string();
        let out = Command::new("nsenter")
            .args(["-t", &pid, "-U", "-m", "--preserve-credentials", "sh", "-c"])
            .arg(script)
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "nsenter: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(())
    }

    fn spawn(
        mut cmd: Command,
        data_dir: &Path,
        listen: &str,
        env: &[(&str, &str)],
    ) -> Result<Self> {
        cmd.args(["serve", "--listen", listen, "--data-dir"])
            .arg(data_dir)
            .env_remove("KITH_LISTEN")
            .env_remove("KITH_DATA_DIR")
            .env("KITH_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .with_context(|| format!("cannot start {}", bin("kith-central").display()))?;
        let rx = lines_of(child.stderr.take().context("no stderr")?);
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut said = Vec::new();
        let url = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => {
                    if let Some(rest) = line.split("listening on ").nth(1) {
                        break rest
                            .split_whitespace()
                            .next()
                            .unwrap_or_default()
                            .to_owned();
                    }
                    said.push(line);
                }
                Err(e) => {
                    let _ = child.kill();
                    let why = match e {
                        mpsc::RecvTimeoutError::Timeout => "did not report its address within 30 s",
                        mpsc::RecvTimeoutError::Disconnected => "exited before it was ready",
                    };
                    bail!("kith-central {why}; it said:\n{}", said.join("\n"));
                }
            }
        };
        let central = Self {
            data_dir: data_dir.to_owned(),
            url,
            child,
            _tmp: None,
            log: rx,
        };
        // An HTTPS central is checked by its test, which knows the certificate.
        if central.url.starts_with("http://") {
            let health = reqwest::blocking::Client::new()
                .get(format!("{}/healthz", central.url))
                .send()?;
            if !health.status().is_success() {
                bail!("healthz answered {}", health.status());
            }
        }
        Ok(central)
    }

    /// The server's process id (for RSS readings).
    pub fn pid(&self) -> Option<u32> {
        Some(self.child.id())
    }

    /// Registers a machine with a local token; returns the token.
    pub fn register(&self, user: &str, machine: &str) -> Result<String> {
        register_local(&self.data_dir, user, machine)
    }

    /// Adds `user` as an admin (`user add --admin`) and registers a machine
    /// of theirs, returning its token: what `/metrics` and the family's
    /// counts in `/api/status` ask for.
    pub fn register_admin(&self, user: &str, machine: &str) -> Result<String> {
        let out = run_central(
            &self.data_dir,
            &["user", "add", "--handle", user, "--admin"],
        )?;
        if !out.status.success() {
            bail!("user add failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        register_local(&self.data_dir, user, machine)
    }

    /// SIGKILL: no shutdown code runs. The data directory stays.
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    pub fn client(&self, token: &str) -> Api {
        Api {
            base: self.url.clone(),
            token: token.to_owned(),
            http: reqwest::blocking::Client::new(),
        }
    }
}

impl Drop for Central {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `kith-central machine register --local`, returning the token printed on
/// the last line of stdout.
pub fn register_local(data_dir: &Path, user: &str, machine: &str) -> Result<String> {
    let out = run_central(
        data_dir,
        &[
            "machine", "register", "--local", "--user", user, "--name", machine,
        ],
    )?;
    if !out.status.success() {
        bail!("register failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let stdout = String::from_utf8(out.stdout)?;
    Ok(stdout.lines().last().unwrap_or_default().trim().to_owned())
}

/// `kith-central`, run under umask 022 (the usual default, which makes
/// files other users can read) whatever the test runner's: the tests see
/// the modes central sets itself.
pub fn central_command() -> Command {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "umask 022 && exec \"$0\" \"$@\""])
        .arg(bin("kith-central"));
    cmd
}

/// Runs an admin command of `kith-central` on a data directory.
pub fn run_central(data_dir: &Path, args: &[&str]) -> Result<Output> {
    Ok(central_command()
        .args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("KITH_DATA_DIR")
        .stdin(Stdio::null())
        .output()?)
}

/// A killed central whose data directory holds one run of alice's laptop
/// saying `text`, indexed: what the repair tests break. Central, alice's
/// caller and the run's id.
pub fn one_indexed_run(text: &str) -> Result<(Central, Api, String)> {
    let mut central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let line = claude_user_line(text, "2026-05-11T08:00:00.000Z");
    let id = alice.ingest(&delta("s", 0, &line))?;
    alice.wait_indexed(&id, Duration::from_secs(10))?;
    central.kill()?;
    Ok((central, alice, id))
}
