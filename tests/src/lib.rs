//! Harness for kith's end-to-end tests (`tests/e2e`): runs the real
//! `kith-central` and `kith` binaries (built by `cargo build --workspace`
//! before the tests) on loopback, in temporary directories, and talks to
//! them over real HTTP. A `Home` is a machine's HOME, a `Machine` one
//! logged in to a `Central`, which an `Api` calls; a `Background` is a
//! program running beside a test, waited on by what it says or does, never
//! by a fixed sleep; `needs` says what a test lacks. The other real servers:
//! `meili`, `pds`, `browser` (Chromium); a `StandIn` for one that cannot
//! run here.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::Result;

pub mod api;
pub mod background;
pub mod browser;
pub mod central;
pub mod locomo;
pub mod machine;
pub mod meili;
pub mod needs;
pub mod pds;
pub mod stand_in;

pub use api::{chain_of, hit_run_ids, str_of, Api, Reply};
pub use background::Background;
pub use central::{
    central_command, one_indexed_run, register_local, run_central, Central, PrivateCa,
};
pub use machine::{described, stop_payload, Machine};
pub use needs::model_dir;
pub use stand_in::{json_response, StandIn};

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

/// The target folder the binaries were built in (`$CARGO_TARGET_DIR`, else
/// `target/`), where tests/run.sh makes the tests' Python venvs.
pub fn target_dir() -> PathBuf {
    let bins = bin_dir();
    bins.parent().map(Path::to_path_buf).unwrap_or(bins)
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
        let mut cmd = self.command(program);
        cmd.args(args);
        cmd
    }

    /// `program` (kith, or a wrapper that runs it) on this machine: stdin
    /// empty, stdout and stderr piped.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut cmd = Command::new(program);
        cmd.env("HOME", self.root());
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

/// A Claude Code response of `model` at `ts` with `input` and `output`
/// tokens, as its transcript records it (`id` makes its message and
/// request ids).
pub fn claude_response_line(id: &str, model: &str, ts: &str, input: u64, output: u64) -> String {
    let line = serde_json::json!({
        "type": "assistant", "uuid": format!("a-{id}"), "parentUuid": null, "sessionId": "s1",
        "timestamp": ts, "cwd": "/home/me/proj", "requestId": format!("req-{id}"),
        "message": {"id": format!("msg-{id}"), "role": "assistant", "model": model,
            "content": [{"type": "text", "text": "done"}],
            "usage": {"input_tokens": input, "output_tokens": output}}
    });
    format!("{line}\n")
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Result<Vec<PathBuf>> {
    let mut hits = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)?
                .windows(needle.len())
                .any(|w| w == needle.as_bytes())
            {
                hits.push(path);
            }
        }
    }
    Ok(hits)
}
