//! `kith hook`: what Claude Code, Codex, pi, Gemini CLI, Cursor and Copilot
//! CLI run when a turn ends. It finds the transcripts the payload names
//! (Claude Code / Codex / Gemini / Cursor / Copilot hook JSON on stdin, a
//! Codex `notify` JSON as the last argument, or `--pi FILE`), captures
//! them, and gives central about 1.5 s; whatever is not delivered stays in
//! the outbox. It never fails the agent: exit 0 whatever happens (2 would
//! block Claude's Stop), errors go to `<state>/hook.log`.

use std::io::{IsTerminal, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::OpenOptionsExt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kith_proto::AgentRuntime;
use rustix::event::{poll, PollFd, PollFlags, Timespec};
use rustix::io::Errno;
use serde_json::Value;

use crate::capture::Capture;
use crate::client::{Budget, Client};
use crate::config::Paths;
use crate::discover::{self, Source};
use crate::error::{Error, Result};
use crate::mirror;
use crate::settings::{Flags, Settings};

/// All the time a hook gives central, over every delivery.
pub(crate) const NETWORK_BUDGET: Duration = Duration::from_millis(1500);
/// How long a hook waits for another kith holding the state lock.
const LOCK_WAIT: Duration = Duration::from_millis(1000);
/// How long a hook waits for its payload on stdin.
const STDIN_WAIT: Duration = Duration::from_secs(2);
/// Larger stdin is not a hook payload.
const MAX_PAYLOAD: usize = 1 << 20;
/// `hook.log` is rotated to `hook.log.1` past this size.
const MAX_LOG: u64 = 1 << 20;

/// Runs the hook. Never panics out and never returns an error.
pub(crate) fn run(
    paths: &Paths,
    flags: &Flags,
    pi_file: Option<PathBuf>,
    argument: Option<String>,
) {
    let outcome = catch_unwind(AssertUnwindSafe(|| {
        let stdin = if pi_file.is_none() && argument.is_none() {
            read_payload()
        } else {
            Vec::new()
        };
        let targets = targets(paths, pi_file.as_deref(), argument.as_deref(), &stdin);
        // A configuration that does not parse stops capture (its exclusions
        // are unknown); the transcripts wait on disk until it is mended.
        let settings = Settings::load(paths, flags)?;
        capture_and_send(paths, &settings, &targets)
    }));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => log(paths, &e.to_string()),
        Err(_) => log(
            paths,
            "kith hook panicked; the outbox and cursors are intact",
        ),
    }
}

/// The payload on stdin (nothing from a terminal).
pub(crate) fn read_payload() -> Vec<u8> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() {
        return Vec::new();
    }
    read_within(&stdin, STDIN_WAIT, MAX_PAYLOAD)
}

/// At most `max` bytes of `input`, read up to its end, or what came within
/// `wait` (a writer that sent its payload and never closed the pipe: the
/// parser decides whether it is whole). Read on
/// this thread, polling before each read: a reader thread would first have to
/// be scheduled, and on a busy machine the hook waited for that.
fn read_within(input: impl AsFd, wait: Duration, max: usize) -> Vec<u8> {
    let until = Instant::now() + wait;
    let mut buf = Vec::new();
    while buf.len() < max {
        let left = until.saturating_duration_since(Instant::now());
        let Ok(left) = Timespec::try_from(left) else {
            return buf;
        };
        match poll(&mut [PollFd::new(&input, PollFlags::IN)], Some(&left)) {
            Ok(0) => return buf,
            Ok(_) | Err(Errno::INTR) => {}
            Err(_) => return buf,
        }
        let mut chunk = [0; 8192];
        let want = chunk.len().min(max - buf.len());
        match rustix::io::read(&input, &mut chunk[..want]) {
            Ok(0) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(Errno::INTR | Errno::AGAIN) => {}
            Err(_) => break,
        }
    }
    buf
}

/// The transcripts a hook call names, each session before its subagent.
pub(crate) fn targets(
    paths: &Paths,
    pi_file: Option<&Path>,
    argument: Option<&str>,
    stdin: &[u8],
) -> Vec<Source> {
    let mut out = Vec::new();
    if let Some(path) = pi_file {
        out.push(Source {
            runtime: AgentRuntime::Pi,
            path: path.to_owned(),
        });
    }
    // Codex `notify`: {"type":"agent-turn-complete","thread-id":...}.
    if let Some(v) = argument.and_then(|a| serde_json::from_str::<Value>(a).ok()) {
        if let Some(path) = str_of(&v, "thread-id").and_then(|t| discover::find_rollout(paths, t)) {
            out.push(Source {
                runtime: AgentRuntime::Codex,
                path,
            });
        }
    }
    if let Ok(v) = serde_json::from_slice::<Value>(stdin) {
        out.extend(from_hook_payload(paths, &v));
    }
    out.retain(|s| {
        s.path.extension().is_some_and(|e| e == "jsonl") || mirror::is_source(paths, &s.path)
    });
    out.dedup();
    out
}

/// Claude Code hooks (Stop, SubagentStop, PreCompact, SessionEnd), Codex,
/// Gemini CLI and Cursor hooks share `transcript_path`; Codex's has a
/// `turn_id` and may have a null `transcript_path`, Cursor's names its
/// session by `conversation_id` (and may leave the path null too). Older
/// Claude SubagentStop payloads carry only `session_id` and `agent_id`.
/// Copilot CLI's are camelCase: `agentStop` names `sessionId` and
/// `transcriptPath` (github/docs PR 43876), and its session's
/// `session-state/<id>/events.jsonl` is taken first; the docs give
/// `sessionEnd` only `timestamp`, `cwd` and `reason`, so either spelling of
/// the session id is looked up there too.
/// A Gemini or Cursor session comes with the subagent transcripts beside it.
fn from_hook_payload(paths: &Paths, v: &Value) -> Vec<Source> {
    let mut out = Vec::new();
    let session = str_of(v, "session_id");
    let main = match str_of(v, "transcript_path") {
        Some(p) => Some(PathBuf::from(p)),
        None if v.get("turn_id").is_some() => {
            session.and_then(|s| discover::find_rollout(paths, s))
        }
        None => str_of(v, "conversation_id")
            .and_then(|c| discover::find_cursor_session(paths, c))
            .or_else(|| {
                str_of(v, "sessionId").and_then(|s| discover::find_copilot_session(paths, s))
            })
            .or_else(|| str_of(v, "transcriptPath").map(PathBuf::from))
            .or_else(|| {
                session.and_then(|s| {
                    discover::find_claude_session(paths, s)
                        .or_else(|| discover::find_copilot_session(paths, s))
                })
            }),
    };
    if let Some(path) = &main {
        let runtime = discover::runtime_of(paths, path);
        out.push(Source {
            runtime,
            path: path.clone(),
        });
        out.extend(
            discover::subagents_of(runtime, path)
                .into_iter()
                .map(|path| Source { runtime, path }),
        );
    }
    let subagent = match (
        str_of(v, "agent_transcript_path"),
        str_of(v, "agent_id"),
        &main,
    ) {
        (Some(p), _, _) => Some(PathBuf::from(p)),
        (None, Some(agent), Some(main)) if crate::untrusted::plain_id(agent) => {
            let guess = main
                .with_extension("")
                .join("subagents")
                .join(format!("agent-{agent}.jsonl"));
            guess.is_file().then_some(guess)
        }
        _ => None,
    };
    if let Some(path) = subagent {
        out.push(Source {
            runtime: AgentRuntime::ClaudeCode,
            path,
        });
    }
    out
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

fn capture_and_send(paths: &Paths, settings: &Settings, targets: &[Source]) -> Result<()> {
    let capture = Capture::new(paths, LOCK_WAIT).with_rules(settings.rules.clone());
    for source in targets {
        let resolved = match mirror::resolve(paths, source.clone()) {
            Ok(resolved) => resolved,
            Err(e) => {
                log(paths, &format!("mirror: {e}"));
                continue;
            }
        };
        for source in &resolved {
            match capture.file(source) {
                Ok(_) => {}
                // Another kith (a backfill, `kith watch`) holds the state:
                // each further capture (and the exclusions' sweep) would
                // wait as long again, and the agent waits on this hook. The
                // holder, the next hook or the watch captures and sends
                // what is left.
                Err(e @ Error::Busy { .. }) => {
                    log(paths, &format!("capture {}: {e}", source.path.display()));
                    return Ok(());
                }
                Err(e) => log(paths, &format!("capture {}: {e}", source.path.display())),
            }
        }
    }
    capture.discard_excluded()?;
    if capture.outbox().is_empty() {
        return Ok(());
    }
    let auth = settings.auth(paths)?;
    let replayed = Client::new(&auth)?.flush(
        &paths.state_dir,
        Budget::new(NETWORK_BUDGET, NETWORK_BUDGET),
        LOCK_WAIT,
    )?;
    if replayed.rejected > 0 {
        log(
            paths,
            &format!(
                "central refused {} deltas; kept in {}, see `kith status`",
                replayed.rejected,
                paths.state_dir.join("rejected").display()
            ),
        );
    }
    match replayed.stopped {
        Some(why) => Err(Error::Refused(why)),
        None => Ok(()),
    }
}

/// The hook's log; `kith status` names it.
pub(crate) fn log_path(paths: &Paths) -> PathBuf {
    paths.state_dir.join("hook.log")
}

fn log(paths: &Paths, line: &str) {
    let path = log_path(paths);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_LOG) {
        let _ = std::fs::rename(&path, path.with_extension("log.1"));
    }
    let _ = crate::config::private_dir(&paths.state_dir);
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&path)
    {
        let _ = writeln!(f, "{} {line}", kith_shared::timestamp::now());
    }
}

#[cfg(test)]
mod tests;
