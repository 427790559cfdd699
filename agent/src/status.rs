//! `kith status`: one line on where this machine sends (central, user,
//! machine, login state, last successful send, outbox depth, central's
//! embedding backlog), then its capture coverage per source (files, bytes on
//! disk, accepted by central, pending), what `exclude` keeps back, the last
//! errors, and a warning when Claude Code's `cleanupPeriodDays` would delete
//! a transcript central does not fully have yet.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use kith_proto::{AgentRuntime, StatusResponse};
use serde_json::json;
use time::OffsetDateTime;

use crate::client::Client;
use crate::config::{Auth, Paths};
use crate::cursor::Cursors;
use crate::discover;
use crate::outbox::Outbox;
use crate::settings::Settings;

/// Claude Code's default `cleanupPeriodDays`.
const DEFAULT_CLEANUP_DAYS: u64 = 30;
/// Warn this many days before the sweep would delete a transcript.
const WARN_DAYS_AHEAD: u64 = 3;
/// How long `kith status` waits for central before saying it is unreachable.
const CENTRAL_WAIT: Duration = Duration::from_secs(3);

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

/// What central says about this machine, if it can be asked.
#[derive(Debug, Clone)]
pub enum Login {
    NotLoggedIn,
    /// A token is stored, but central did not answer (or refused it).
    Unreachable(String),
    LoggedIn(Box<StatusResponse>),
}

/// One exclusion and how many transcripts on disk it keeps back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub glob: String,
    pub origin: String,
    pub transcripts: u64,
}

#[derive(Debug, Clone)]
pub struct Report {
    pub central_url: Option<String>,
    pub login: Login,
    /// When central last accepted a delta from here (RFC 3339).
    pub last_sent: Option<String>,
    pub sources: Vec<(AgentRuntime, Coverage)>,
    /// Every exclusion, also those that match nothing yet.
    pub excluded: Vec<Excluded>,
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

/// Central's view of this machine, waiting at most `CENTRAL_WAIT`.
fn login(paths: &Paths, settings: &Settings) -> Login {
    let auth = match Auth::load(paths, settings) {
        Ok(auth) => auth,
        Err(crate::Error::NotLoggedIn) => return Login::NotLoggedIn,
        Err(e) => return Login::Unreachable(e.to_string()),
    };
    match Client::new(&auth).and_then(|c| c.status(CENTRAL_WAIT)) {
        Ok(status) => Login::LoggedIn(Box::new(status)),
        Err(e) => Login::Unreachable(e.to_string()),
    }
}

pub fn report(paths: &Paths, settings: &Settings) -> Report {
    let cursors = Cursors::new(&paths.state_dir);
    let outbox = Outbox::new(&paths.state_dir);
    let cleanup_days = cleanup_days(&paths.claude_dir);
    let horizon = Duration::from_secs(cleanup_days.saturating_sub(WARN_DAYS_AHEAD) * 86_400);
    let mut sources: Vec<(AgentRuntime, Coverage)> = discover::roots(paths)
        .into_iter()
        .map(|(r, _)| (r, Coverage::default()))
        .collect();
    sources.dedup_by_key(|(r, _)| *r);
    let rules = &settings.rules;
    let mut excluded: Vec<Excluded> = rules
        .exclude
        .iter()
        .map(|g| Excluded {
            glob: g.value.to_string(),
            origin: g.origin.to_string(),
            transcripts: 0,
        })
        .collect();
    let mut at_risk = Vec::new();
    for source in discover::all(paths) {
        let Ok(meta) = std::fs::metadata(&source.path) else {
            continue;
        };
        let Some((_, cov)) = sources.iter_mut().find(|(r, _)| *r == source.runtime) else {
            continue;
        };
        let cursor = cursors.load(&source.path).ok().flatten();
        if !rules.exclude.is_empty() {
            let cwd = cursor
                .as_ref()
                .and_then(|c| c.cwd.clone())
                .or_else(|| discover::peek(paths, source.runtime, &source.path).cwd);
            if let Some(glob) = rules.excluded(&source.path, cwd.as_deref().map(Path::new)) {
                if let Some(e) = excluded.iter_mut().find(|e| e.glob == glob.as_str()) {
                    e.transcripts += 1;
                }
                continue;
            }
        }
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
        central_url: settings.central_url.as_ref().map(|u| u.value.clone()),
        login: login(paths, settings),
        last_sent: outbox.last_sent(),
        sources,
        excluded,
        outbox: outbox.len(),
        rejected: outbox.rejected(),
        last_error: outbox.last_error(),
        cleanup_days,
        at_risk,
        state_dir: paths.state_dir.clone(),
    }
}

impl Report {
    /// The line atuin users look for first: where this machine sends, as
    /// whom, whether that works, and what is still on its way.
    pub fn first_line(&self, now: OffsetDateTime) -> String {
        let url = self.central_url.as_deref().unwrap_or("(none)");
        let who = match &self.login {
            Login::NotLoggedIn => "not logged in".to_owned(),
            Login::Unreachable(why) => format!("logged in, central unreachable ({why})"),
            Login::LoggedIn(s) => format!("{} on {} · logged in", s.user, s.machine),
        };
        let sent = match &self.last_sent {
            Some(at) => crate::family::age(at, now),
            None => "never".to_owned(),
        };
        let mut line = format!(
            "central {url} · {who} · last send {sent} · outbox {}",
            self.outbox
        );
        if let Login::LoggedIn(s) = &self.login {
            line += &format!(
                " · embedded {}/{} chunks",
                s.counts.chunks_embedded, s.counts.chunks
            );
        }
        line
    }

    pub fn to_json(&self) -> serde_json::Value {
        let (login, central) = match &self.login {
            Login::NotLoggedIn => ("not_logged_in", None),
            Login::Unreachable(why) => ("unreachable", Some(json!({"error": why}))),
            Login::LoggedIn(s) => (
                "logged_in",
                Some(json!({
                    "user": s.user,
                    "machine": s.machine,
                    "chunks": s.counts.chunks,
                    "chunks_embedded": s.counts.chunks_embedded,
                })),
            ),
        };
        json!({
            "central_url": self.central_url,
            "login": login,
            "central": central,
            "last_sent": self.last_sent,
            "outbox": self.outbox,
            "rejected": self.rejected,
            "last_error": self.last_error,
            "sources": self.sources.iter().map(|(runtime, c)| json!({
                "runtime": runtime.as_str(),
                "files": c.files,
                "bytes_on_disk": c.bytes_on_disk,
                "bytes_accepted": c.bytes_accepted,
                "bytes_pending": c.bytes_pending,
                "last_error": c.last_error,
                "parked": c.parked,
            })).collect::<Vec<_>>(),
            "excluded": self.excluded.iter().map(|e| json!({
                "glob": e.glob, "origin": e.origin, "transcripts": e.transcripts,
            })).collect::<Vec<_>>(),
            "cleanup_days": self.cleanup_days,
            "at_risk": self.at_risk,
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.first_line(OffsetDateTime::now_utc()))?;
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
        for e in &self.excluded {
            writeln!(
                f,
                "excluded: {} ({}): {} transcripts never read nor sent",
                e.glob, e.origin, e.transcripts
            )?;
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
        let settings = Settings::load(&paths, &crate::settings::Flags::default())?;
        let report = report(&paths, &settings);
        assert_eq!(report.at_risk, vec![old]);
        let shown = report.to_string();
        assert!(shown.contains("cleanupPeriodDays"), "{shown}");
        assert!(shown.contains("outbox: 0 deltas waiting"), "{shown}");
        assert_eq!(report.sources[0].1.files, 2);
        assert_eq!(report.sources[0].1.bytes_pending, 6);
        Ok(())
    }
}
