//! `kith status`: this machine's capture coverage per source (files, bytes on
//! disk, accepted by central, pending), the outbox, the last errors, and a
//! warning when Claude Code's `cleanupPeriodDays` would delete a transcript
//! central does not fully have yet.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use kith_proto::AgentRuntime;

use crate::config::Paths;
use crate::cursor::Cursors;
use crate::discover;
use crate::outbox::Outbox;

/// Claude Code's default `cleanupPeriodDays`.
const DEFAULT_CLEANUP_DAYS: u64 = 30;
/// Warn this many days before the sweep would delete a transcript.
const WARN_DAYS_AHEAD: u64 = 3;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Coverage {
    pub files: u64,
    pub bytes_on_disk: u64,
    pub bytes_accepted: u64,
    pub bytes_pending: u64,
    pub last_error: Option<String>,
    /// Files whose capture waits until they change (central refused them).
    pub parked: Vec<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub sources: Vec<(AgentRuntime, Coverage)>,
    pub outbox: usize,
    pub rejected: usize,
    /// Why the last replay stopped (central down, token refused).
    pub last_error: Option<String>,
    pub cleanup_days: u64,
    /// Claude transcripts the cleanup sweep may delete soon, not all accepted.
    pub at_risk: Vec<PathBuf>,
    pub state_dir: PathBuf,
}

/// Claude Code's `cleanupPeriodDays` from `settings.json` (default 30).
pub fn cleanup_days(claude_dir: &Path) -> u64 {
    std::fs::read(claude_dir.join("settings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("cleanupPeriodDays")?.as_u64())
        .filter(|d| *d >= 1)
        .unwrap_or(DEFAULT_CLEANUP_DAYS)
}

pub fn report(paths: &Paths) -> Report {
    let cursors = Cursors::new(&paths.state_dir);
    let outbox = Outbox::new(&paths.state_dir);
    let cleanup_days = cleanup_days(&paths.claude_dir);
    let horizon = Duration::from_secs(cleanup_days.saturating_sub(WARN_DAYS_AHEAD) * 86_400);
    let mut sources: Vec<(AgentRuntime, Coverage)> = discover::roots(paths)
        .map(|(r, _)| (r, Coverage::default()))
        .to_vec();
    let mut at_risk = Vec::new();
    for source in discover::all(paths) {
        let Ok(meta) = std::fs::metadata(&source.path) else {
            continue;
        };
        let Some((_, cov)) = sources.iter_mut().find(|(r, _)| *r == source.runtime) else {
            continue;
        };
        let cursor = cursors.load(&source.path).ok().flatten();
        // Accepted bytes count only for the file that is there now.
        let accepted = cursor
            .as_ref()
            .filter(|c| (c.dev, c.ino) == (meta.dev(), meta.ino()))
            .map_or(0, |c| c.accepted.offset.min(meta.len()));
        if let Some(c) = &cursor {
            if let Some(e) = &c.last_error {
                cov.last_error = Some(format!("{}: {e}", source.path.display()));
            }
            if c.parked.is_some() {
                cov.parked.push(source.path.clone());
            }
        }
        cov.files += 1;
        cov.bytes_on_disk += meta.len();
        cov.bytes_accepted += accepted;
        cov.bytes_pending += meta.len() - accepted;
        let old = meta
            .modified()
            .ok()
            .and_then(|m| SystemTime::now().duration_since(m).ok())
            .is_some_and(|age| age > horizon);
        if source.runtime == AgentRuntime::ClaudeCode && old && accepted < meta.len() {
            at_risk.push(source.path);
        }
    }
    Report {
        sources,
        outbox: outbox.len(),
        rejected: outbox.rejected(),
        last_error: outbox.last_error(),
        cleanup_days,
        at_risk,
        state_dir: paths.state_dir.clone(),
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{:<12} {:>6} {:>14} {:>14} {:>14}",
            "source", "files", "on disk", "accepted", "pending"
        )?;
        for (runtime, c) in &self.sources {
            writeln!(
                f,
                "{:<12} {:>6} {:>14} {:>14} {:>14}",
                runtime.as_str(),
                c.files,
                c.bytes_on_disk,
                c.bytes_accepted,
                c.bytes_pending
            )?;
            if let Some(e) = &c.last_error {
                writeln!(f, "  last error: {e}")?;
            }
            for p in &c.parked {
                writeln!(
                    f,
                    "  waiting until it changes (central refused it): {}",
                    p.display()
                )?;
            }
        }
        write!(f, "outbox: {} deltas waiting", self.outbox)?;
        if self.rejected > 0 {
            write!(
                f,
                "; {} refused by central, kept in {}",
                self.rejected,
                self.state_dir.join("rejected").display()
            )?;
        }
        writeln!(f)?;
        if let Some(e) = &self.last_error {
            writeln!(f, "last error: {e}")?;
        }
        if let Some(first) = self.at_risk.first() {
            writeln!(
                f,
                "warning: Claude Code deletes transcripts after {} days (cleanupPeriodDays); {} not fully captured yet will go soon, e.g. {}. Run `kith backfill` while central is reachable.",
                self.cleanup_days,
                self.at_risk.len(),
                first.display()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleanup_period_comes_from_claude_settings() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        assert_eq!(cleanup_days(tmp.path()), 30);
        std::fs::write(
            tmp.path().join("settings.json"),
            r#"{"cleanupPeriodDays": 7}"#,
        )?;
        assert_eq!(cleanup_days(tmp.path()), 7);
        std::fs::write(
            tmp.path().join("settings.json"),
            r#"{"cleanupPeriodDays": 0}"#,
        )?;
        assert_eq!(cleanup_days(tmp.path()), 30, "0 is invalid for Claude");
        Ok(())
    }

    #[test]
    fn old_transcripts_central_lacks_are_flagged() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        let project = paths.claude_dir.join("projects/-p");
        std::fs::create_dir_all(&project)?;
        std::fs::write(
            paths.claude_dir.join("settings.json"),
            r#"{"cleanupPeriodDays": 5}"#,
        )?;
        let old = project.join("old.jsonl");
        let fresh = project.join("fresh.jsonl");
        std::fs::write(&old, "{}\n")?;
        std::fs::write(&fresh, "{}\n")?;
        let three_days_ago = SystemTime::now() - Duration::from_secs(3 * 86_400);
        std::fs::File::options()
            .write(true)
            .open(&old)?
            .set_modified(three_days_ago)?;
        let report = report(&paths);
        assert_eq!(report.at_risk, vec![old]);
        let shown = report.to_string();
        assert!(shown.contains("cleanupPeriodDays"), "{shown}");
        assert!(shown.contains("outbox: 0 deltas waiting"), "{shown}");
        assert_eq!(report.sources[0].1.files, 2);
        assert_eq!(report.sources[0].1.bytes_pending, 6);
        Ok(())
    }
}
