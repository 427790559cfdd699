//! A family member's machine logged in to a central: the real `kith` run in
//! a HOME of its own, with central's address and the machine's token in its
//! environment as a script or a service has them, and what a test checks
//! of each command it runs (it succeeded and printed this; it failed and
//! said why; a hook exited 0 and printed nothing).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use anyhow::{ensure, Context, Result};
use serde_json::Value;

use crate::background::Background;
use crate::{run_with_input, Central, Home};

pub struct Machine {
    pub home: Home,
    /// Central's URL, as `KITH_CENTRAL_URL`.
    pub central: String,
    /// The machine's token, as `KITH_TOKEN`.
    pub token: String,
}

impl Machine {
    /// A fresh HOME logged in to `central` with `token`.
    pub fn new(central: &Central, token: &str) -> Result<Self> {
        Self::at(&central.url, token)
    }

    /// A fresh HOME logged in to the central at `url` (which may be down).
    pub fn at(url: &str, token: &str) -> Result<Self> {
        Ok(Self {
            home: Home::new()?,
            central: url.to_owned(),
            token: token.to_owned(),
        })
    }

    /// `rel` under the HOME.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.home.path(rel)
    }

    /// `kith ARGS` on this machine, not yet run.
    pub fn command(&self, args: &[&str]) -> Command {
        self.home.kith_at(&self.central, &self.token, args)
    }

    /// Runs `kith ARGS` to the end with `stdin` as its input.
    pub fn kith(&self, args: &[&str], stdin: &[u8]) -> Result<Output> {
        run_with_input(self.command(args), stdin)
    }

    /// The stdout of `kith ARGS`, which must succeed.
    pub fn ok(&self, args: &[&str]) -> Result<Vec<u8>> {
        let out = self.kith(args, b"")?;
        ensure!(
            out.status.success(),
            "kith {args:?} failed\n{}",
            described(&out)
        );
        Ok(out.stdout)
    }

    /// `ok`, as text.
    pub fn text(&self, args: &[&str]) -> Result<String> {
        Ok(String::from_utf8(self.ok(args)?)?)
    }

    /// `ok`, as JSON.
    pub fn json(&self, args: &[&str]) -> Result<Value> {
        let out = self.ok(args)?;
        serde_json::from_slice(&out)
            .with_context(|| format!("kith {args:?} printed {}", String::from_utf8_lossy(&out)))
    }

    /// The stderr of `kith ARGS`, which must fail and print nothing on
    /// stdout (a script reading it gets nothing).
    pub fn fails(&self, args: &[&str]) -> Result<String> {
        let out = self.kith(args, b"")?;
        ensure!(
            !out.status.success() && out.stdout.is_empty(),
            "kith {args:?} did not fail quietly\n{}",
            described(&out)
        );
        Ok(String::from_utf8_lossy(&out.stderr).into_owned())
    }

    /// `kith hook ARGS` with an agent's hook `payload` on stdin, as the
    /// agent runs it: exit 0 and nothing on stdout (a stop hook's stdout
    /// can continue the conversation).
    pub fn hook(&self, args: &[&str], payload: &Value) -> Result<()> {
        let args = [&["hook"], args].concat();
        let out = self.kith(&args, payload.to_string().as_bytes())?;
        ensure!(
            out.status.code() == Some(0) && out.stdout.is_empty(),
            "kith {args:?} did not exit 0 quietly\n{}",
            described(&out)
        );
        Ok(())
    }

    /// `kith watch` on this machine, killed with the test.
    pub fn watch(&self) -> Result<Background> {
        Background::spawn(self.command(&["watch"]))
    }
}

/// A finished program's exit status, stdout and stderr, for a failure
/// message.
pub fn described(out: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The payload of Claude Code's Stop hook naming `file` as the transcript.
pub fn stop_payload(file: &Path) -> String {
    serde_json::json!({"session_id": "s", "transcript_path": file, "hook_event_name": "Stop"})
        .to_string()
}
