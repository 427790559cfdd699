//! `kith status`: this machine's capture coverage per source, the outbox, the
//! last errors, and a warning when Claude Code's cleanup would delete
//! transcripts that central does not have yet.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use kith_proto::AgentRuntime;

use crate::capture::Capture;
use crate::config::Paths;
use crate::discover;

#[derive(Debug, Default, Clone)]
pub struct Coverage {
    pub files: u64,
    pub bytes_on_disk: u64,
    pub bytes_accepted: u64,
    pub bytes_pending: u64,
    pub last_error: Option<String>,
    /// Files older than the cleanup horizon with bytes central lacks.
    pub at_risk: Vec<String>,
}

/// Claude Code's `cleanupPeriodDays` (default 30).
pub fn cleanup_days(paths: &Paths) -> u64 {
    std::fs::read(paths.claude_dir.join("settings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| {
            v.get("cleanupPeriodDays")
                .and_then(serde_json::Value::as_u64)
        })
        .unwrap_or(30)
}

pub fn coverage(paths: &Paths) -> Vec<(AgentRuntime, Coverage)> {
    let capture = Capture {
        paths: paths.clone(),
    };
    let horizon = Duration::from_secs(cleanup_days(paths).saturating_sub(3) * 86_400);
    let mut out: Vec<(AgentRuntime, Coverage)> = [
        AgentRuntime::ClaudeCode,
        AgentRuntime::Codex,
        AgentRuntime::Pi,
    ]
    .map(|r| (r, Coverage::default()))
    .to_vec();
    for (runtime, file) in discover::all(paths) {
        let Ok(meta) = std::fs::metadata(&file) else {
            continue;
        };
        let Some((_, cov)) = out.iter_mut().find(|(r, _)| *r == runtime) else {
            continue;
        };
        let accepted = capture.load_cursor(&file).map_or(0, |c| {
            if c.last_error.is_some() {
                cov.last_error = c.last_error.clone();
            }
            c.accepted_offset.min(meta.len())
        });
        cov.files += 1;
        cov.bytes_on_disk += meta.len();
        cov.bytes_accepted += accepted;
        cov.bytes_pending += meta.len() - accepted;
        let old = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > horizon);
        if runtime == AgentRuntime::ClaudeCode && old && accepted < meta.len() {
            cov.at_risk.push(file.display().to_string());
        }
    }
    out
}

pub fn render(paths: &Paths) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<12} {:>6} {:>12} {:>12} {:>12}",
        "source", "files", "on disk", "accepted", "pending"
    );
    let mut risky = Vec::new();
    for (runtime, c) in coverage(paths) {
        let _ = writeln!(
            s,
            "{:<12} {:>6} {:>12} {:>12} {:>12}",
            runtime.as_str(),
            c.files,
            c.bytes_on_disk,
            c.bytes_accepted,
            c.bytes_pending
        );
        if let Some(e) = c.last_error {
            let _ = writeln!(s, "  last error: {e}");
        }
        risky.extend(c.at_risk);
    }
    let capture = Capture {
        paths: paths.clone(),
    };
    let _ = writeln!(s, "outbox: {} deltas waiting", capture.pending().len());
    if !risky.is_empty() {
        let _ = writeln!(
            s,
            "warning: Claude Code deletes transcripts after {} days (cleanupPeriodDays); {} of them are not fully captured yet, e.g. {}. Run `kith backfill` while central is reachable.",
            cleanup_days(paths),
            risky.len(),
            risky[0]
        );
    }
    s
}
