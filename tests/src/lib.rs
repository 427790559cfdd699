//! Harness for kith's end-to-end tests: runs the real `kith-central` and
//! `kith` binaries (built by `cargo build --workspace` before the tests) on
//! loopback, in temporary directories, and talks to them over real HTTP.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub mod browser;
pub mod locomo;
pub mod meili;
pub mod pds;

/// Directory holding the workspace's built binaries: next to this
/// executable (`target/<profile>/kith-bench`), or one up from a test's
/// (`target/<profile>/deps/<test>`).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap_or_default();
    let dir = exe.parent().map(Path::to_path_buf).unwrap_or_default();
    if dir.ends_with("deps") {
        dir.parent().map(Path::to_path_buf).unwrap_or(dir)
    } else {
        dir
    }
}

pub fn bin(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// A machine's HOME in a temporary folder, and `kith` commands that see
/// only it: none of the variables of the test's own environment that would
/// point kith elsewhere (its folders, its central, XDG, CLAUDE_CONFIG_DIR,
/// CODEX_HOME, COPILOT_HOME, TLS trust) is passed on.
pub struct Home(tempfile::TempDir);

/// What the environment may set that moves kith; a `Home`'s commands clear it.
const KITH_ENVIRONMENT: &[&str] = &[
    "KITH_CONFIG_DIR",
    "KITH_STATE_DIR",
    "KITH_CLAUDE_DIR",
    "KITH_CODEX_DIR",
    "KITH_PI_DIR",
    "KITH_GEMINI_DIR",
    "KITH_COPILOT_DIR",
    "KITH_CURSOR_DIR",
    "KITH_OPENCODE_DIR",
    "KITH_CENTRAL_URL",
    "KITH_TOKEN",
    "KITH_EXCLUDE",
    "KITH_AIDER_ROOTS",
    "XDG_CONFIG_HOME",
    "XDG_STATE_HOME",
    "CLAUDE_CONFIG_DIR",
    "CODEX_HOME",
    "COPILOT_HOME",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
];

impl Home {
    pub fn new() -> Result<Self> {
        Ok(Self(tempfile::tempdir()?))
    }

    pub fn root(&self) -> &Path {
        self.0.path()
    }

    /// `rel` under the HOME.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.path().join(rel)
    }

    /// `kith ARGS` on this machine: stdin empty, stdout and stderr piped.
    pub fn kith(&self, args: &[&str]) -> Command {
        self.kith_from(&bin("kith"), args)
    }

    /// `kith ARGS` as `kith`, run from the file `program` (a copy).
    pub fn kith_from(&self, program: &Path, args: &[&str]) -> Command {
        let mut cmd = Command::new(program);
        cmd.args(args).env("HOME", self.root());
        for var in KITH_ENVIRONMENT {
            cmd.env_remove(var);
        }
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        cmd
    }

    /// `kith ARGS` logged in to `central` with `token` (through the
    /// environment, as a script would).
    pub fn kith_at(&self, central: &str, token: &str, args: &[&str]) -> Command {
        let mut cmd = self.kith(args);
        cmd.env("KITH_CENTRAL_URL", central)
            .env("KITH_TOKEN", token);
        cmd
    }
}

/// Runs `cmd` to the end with `stdin` as its input.
pub fn run_with_input(mut cmd: Command, stdin: &[u8]) -> Result<Output> {
    let mut child = cmd.stdin(Stdio::piped()).spawn()?;
    if let Some(mut input) = child.stdin.take() {
        input.write_all(stdin)?;
    }
    Ok(child.wait_with_output()?)
}

/// The shared reference folder beside a development checkout (`../shared`),
/// with the LoCoMo evaluation data; a user's clone does not have it.
pub fn reference_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared")
}

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
        let mut cmd = central_command();
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
        let stderr = child.stderr.take().context("no stderr")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
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

/// A caller of central's HTTP API with one machine's token.
pub struct Api {
    pub base: String,
    pub token: String,
    pub http: reqwest::blocking::Client,
}

/// Status and parsed JSON body of a response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: serde_json::Value,
}

impl Reply {
    pub fn code(&self) -> &str {
        self.body["error"]["code"].as_str().unwrap_or_default()
    }
}

impl Api {
    pub fn post(&self, path: &str, body: &serde_json::Value) -> Result<Reply> {
        self.send(self.http.post(self.url(path)).json(body))
    }

    pub fn post_with(&self, path: &str, body: &serde_json::Value, key: &str) -> Result<Reply> {
        self.send(
            self.http
                .post(self.url(path))
                .header("Idempotency-Key", key)
                .json(body),
        )
    }

    pub fn get(&self, path: &str) -> Result<Reply> {
        self.send(self.http.get(self.url(path)))
    }

    pub fn get_bytes(&self, path: &str) -> Result<(u16, Vec<u8>)> {
        let res = self
            .http
            .get(self.url(path))
            .bearer_auth(&self.token)
            .send()?;
        Ok((res.status().as_u16(), res.bytes()?.to_vec()))
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends with this caller's bearer token.
    pub fn send(&self, req: reqwest::blocking::RequestBuilder) -> Result<Reply> {
        Self::send_raw(req.bearer_auth(&self.token))
    }

    /// Sends exactly the request given (no token added).
    pub fn send_raw(req: reqwest::blocking::RequestBuilder) -> Result<Reply> {
        let res = req.send()?;
        let status = res.status().as_u16();
        let text = res.text()?;
        let body = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
        Ok(Reply { status, body })
    }

    /// Polls `GET /api/runs/{id}` until the run is indexed.
    pub fn wait_indexed(&self, run_id: &str, within: Duration) -> Result<serde_json::Value> {
        let deadline = Instant::now() + within;
        loop {
            let r = self.get(&format!("/api/runs/{run_id}"))?;
            if r.status == 200 && r.body["indexed_at"].is_string() {
                return Ok(r.body);
            }
            if Instant::now() > deadline {
                bail!("run {run_id} not indexed within {within:?}: {r:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// `Some(dir)` when the embedded model is installed (tests/run.sh installs
/// it); semantic tests say they did not run and return when it is not.
pub fn model_dir() -> Option<String> {
    let dir = std::env::var("KITH_MODEL_DIR")
        .ok()
        .filter(|d| !d.is_empty());
    if dir.is_none() {
        eprintln!("KITH_MODEL_DIR is not set: semantic search tests did not run (tests/run.sh installs the model)");
    }
    dir
}

impl Api {
    /// Polls until the run has vectors.
    pub fn wait_embedded(&self, run_id: &str, within: Duration) -> Result<serde_json::Value> {
        let deadline = Instant::now() + within;
        loop {
            let r = self.get(&format!("/api/runs/{run_id}"))?;
            if r.status == 200 && r.body["embedded_at"].is_string() {
                return Ok(r.body);
            }
            if Instant::now() > deadline {
                bail!("run {run_id} not embedded within {within:?}: {r:?}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// An ingest body for `jsonl` at `from` of `source`.
pub fn delta(source: &str, from: u64, jsonl: &str) -> serde_json::Value {
    serde_json::json!({
        "jsonl": jsonl,
        "agent_runtime": "claude-code",
        "source_identity": source,
        "from_offset": from,
        "to_offset": from + jsonl.len() as u64,
    })
}

/// A Claude Code user line with `text`.
pub fn claude_user_line(text: &str, ts: &str) -> String {
    let line = serde_json::json!({
        "type": "user", "uuid": format!("u-{ts}"), "parentUuid": null, "sessionId": "s1",
        "timestamp": ts, "cwd": "/home/alice/proj",
        "message": {"role": "user", "content": text}
    });
    format!("{line}\n")
}

/// An HTTP/1.1 stand-in on loopback, for a server that cannot run here (an
/// embedding server) or a central that misbehaves on purpose: each
/// request's body goes to its answer function, and what that returns
/// (status line, headers and body) is written back; `None` holds the
/// connection without an answer until the client gives up. Stops taking
/// connections when dropped.
pub struct StandIn {
    pub url: String,
    /// Connections taken, so a test knows the client did reach it.
    connections: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// What a stand-in answers to a request's body.
type Answer = dyn Fn(&[u8]) -> Option<String> + Send + Sync;

impl StandIn {
    pub fn start(
        listener: TcpListener,
        answer: impl Fn(&[u8]) -> Option<String> + Send + Sync + 'static,
    ) -> Result<Self> {
        listener.set_nonblocking(true)?;
        let url = format!("http://{}", listener.local_addr()?);
        let connections = Arc::<AtomicUsize>::default();
        let stop = Arc::<AtomicBool>::default();
        let answer: Arc<Answer> = Arc::new(answer);
        let (taken, stopped) = (connections.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !stopped.load(Ordering::SeqCst) {
                let Ok((stream, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                taken.fetch_add(1, Ordering::SeqCst);
                let answer = answer.clone();
                std::thread::spawn(move || serve_connection(&stream, &*answer));
            }
        });
        Ok(Self {
            url,
            connections,
            stop,
            thread: Some(thread),
        })
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Answers one connection's requests in turn (clients keep connections
/// alive). The whole request is read before answering, so the client reads
/// the answer rather than a reset of a body it was still sending.
fn serve_connection(stream: &TcpStream, answer: &Answer) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut reader = BufReader::new(stream);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut length = 0;
        loop {
            line.clear();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line.trim().is_empty() {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                if name.eq_ignore_ascii_case("content-length") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body)?;
        match answer(&body) {
            Some(response) => (&*stream).write_all(response.as_bytes())?,
            // Held: wait for the client to hang up.
            None => {
                std::io::copy(&mut reader, &mut std::io::sink())?;
                return Ok(());
            }
        }
    }
}

/// An HTTP response with a JSON body.
pub fn json_response(status: &str, body: &serde_json::Value) -> String {
    let body = body.to_string();
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}
