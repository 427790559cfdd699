//! `kith hook`: what Claude Code, Codex and pi run when a turn ends. It finds
//! the transcript(s) named in the payload, captures them, and gives central
//! a short moment; anything not delivered stays in the outbox. It never
//! fails the agent: errors go to `<state>/hook.log` and the exit code is 0.

use std::io::Read;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use kith_proto::AgentRuntime;
use serde_json::Value;

use crate::capture::Capture;
use crate::config::{Auth, Paths};
use crate::discover;

/// How long a hook waits for central before leaving deltas in the outbox.
pub const HOOK_TIMEOUT: Duration = Duration::from_millis(1500);
/// Larger payloads are not hook payloads.
const MAX_PAYLOAD: u64 = 1 << 20;

/// What to capture, parent transcripts first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Targets {
    pub files: Vec<(AgentRuntime, PathBuf, Option<PathBuf>)>,
}

/// Reads the payload: `--pi PATH`, a Codex `notify` JSON as the last
/// argument, or a Claude Code / Codex hook JSON on stdin.
pub fn targets(
    paths: &Paths,
    pi_file: Option<PathBuf>,
    notify_arg: Option<&str>,
    stdin: &[u8],
) -> Targets {
    let mut files = Vec::new();
    if let Some(p) = pi_file {
        files.push((AgentRuntime::Pi, p, None));
    }
    if let Some(arg) = notify_arg.and_then(|a| serde_json::from_str::<Value>(a).ok()) {
        if let Some(thread) = arg.get("thread-id").and_then(Value::as_str) {
            if let Some(path) = find_rollout(paths, thread) {
                files.push((AgentRuntime::Codex, path, None));
            }
        }
    }
    if let Ok(v) = serde_json::from_slice::<Value>(stdin) {
        let main = v
            .get("transcript_path")
            .and_then(Value::as_str)
            .map(PathBuf::from);
        if let Some(main) = &main {
            files.push((discover::runtime_of(paths, main), main.clone(), None));
        }
        if let Some(sub) = v.get("agent_transcript_path").and_then(Value::as_str) {
            files.push((AgentRuntime::ClaudeCode, PathBuf::from(sub), main.clone()));
        }
    }
    Targets { files }
}

fn find_rollout(paths: &Paths, thread: &str) -> Option<PathBuf> {
    if thread.len() < 8 || !thread.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
        return None;
    }
    discover::all(paths)
        .into_iter()
        .find(|(rt, p)| *rt == AgentRuntime::Codex && p.to_string_lossy().contains(thread))
        .map(|(_, p)| p)
}

/// Runs the hook; never returns an error to the caller.
pub fn run(paths: &Paths, pi_file: Option<PathBuf>, notify_arg: Option<String>) {
    let mut stdin = Vec::new();
    if pi_file.is_none() && notify_arg.is_none() {
        let _ = std::io::stdin().take(MAX_PAYLOAD).read_to_end(&mut stdin);
    }
    if let Err(e) = capture_and_send(
        paths,
        targets(paths, pi_file, notify_arg.as_deref(), &stdin),
    ) {
        log(paths, &format!("{e:#}"));
    }
}

fn capture_and_send(paths: &Paths, targets: Targets) -> Result<()> {
    let capture = Capture {
        paths: paths.clone(),
    };
    for (runtime, file, parent) in &targets.files {
        if let Err(e) = capture.capture(*runtime, file, parent.as_deref()) {
            log(paths, &format!("capture {}: {e:#}", file.display()));
        }
    }
    let auth = Auth::load(paths)?;
    capture.flush(&auth, HOOK_TIMEOUT)?;
    Ok(())
}

fn log(paths: &Paths, line: &str) {
    use std::io::Write;
    let _ = std::fs::create_dir_all(&paths.state_dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(paths.state_dir.join("hook.log"))
    {
        let _ = writeln!(f, "{} {line}", kith_shared::timestamp::now());
    }
}

/// The hook log, for `kith status`.
pub fn log_path(paths: &Paths) -> PathBuf {
    paths.state_dir.join("hook.log")
}
