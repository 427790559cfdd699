//! `kith status`: one line on where this machine sends (central, user,
//! machine, login state, last successful send, outbox depth, central's
//! embedding backlog), then its capture coverage per agent, every agent kith
//! reads listed even with nothing found (files found, bytes on disk,
//! captured by central, pending, and transcripts at risk where the agent
//! deletes its own: Claude Code's `cleanupPeriodDays`, Gemini CLI's
//! `general.sessionRetention`), what `exclude` keeps back, the last errors,
//! and a warning when an agent's cleanup would delete a transcript central
//! does not fully have yet.

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use kith_proto::{AgentRuntime, StatusResponse};
use serde_json::json;
use time::OffsetDateTime;

use crate::client::Client;
use crate::config::Paths;
use crate::cursor::Cursors;
use crate::discover;
use crate::outbox::Outbox;
use crate::settings::Settings;

/// Claude Code's default `cleanupPeriodDays`.
const DEFAULT_CLEANUP_DAYS: u64 = 30;
/// Gemini CLI's default `general.sessionRetention.maxAge` (on unless
/// `enabled` is false, in the versions that write the JSONL kith captures).
const DEFAULT_GEMINI_RETENTION: Duration = Duration::from_secs(30 * 86_400);
/// Warn this many days before the sweep would delete a transcript.
const WARN_DAYS_AHEAD: u64 = 3;
/// How long `kith status` waits for central before saying it is unreachable.
const CENTRAL_WAIT: Duration = Duration::from_secs(3);

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Coverage {
    /// Transcripts found (those `exclude` keeps back are not counted).
    pub(crate) files: u64,
    /// Of them, those found through a symbolic link (a linked session or
    /// project folder).
    pub(crate) links_followed: u64,
    pub(crate) bytes_on_disk: u64,
    pub(crate) bytes_accepted: u64,
    pub(crate) bytes_pending: u64,
    pub(crate) last_error: Option<String>,
    /// Files whose capture waits until they change, and why.
    pub(crate) parked: Vec<(PathBuf, String)>,
    /// How the agent deletes its own transcripts; `None` when it keeps them.
    pub(crate) cleanup: Option<Cleanup>,
    /// Transcripts the cleanup may delete soon that central lacks in part.
    pub(crate) at_risk: Vec<PathBuf>,
}

/// An agent's own deletion of old transcripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Cleanup {
    /// The agent, as its users name it.
    pub(crate) agent: &'static str,
    /// The setting that decides it.
    pub(crate) setting: &'static str,
    /// Age (since the last change) at which a transcript goes.
    pub(crate) after: Duration,
}

impl Cleanup {
    /// The agent's cleanup as this machine configures it.
    pub(crate) fn of(paths: &Paths, runtime: AgentRuntime) -> Option<Self> {
        match runtime {
            AgentRuntime::ClaudeCode => Some(Self {
                agent: "Claude Code",
                setting: "cleanupPeriodDays",
                after: Duration::from_secs(cleanup_days(&paths.claude_dir) * 86_400),
            }),
            AgentRuntime::Gemini => gemini_retention(&paths.gemini_dir).map(|after| Self {
                agent: "Gemini CLI",
                setting: "general.sessionRetention",
                after,
            }),
            _ => None,
        }
    }

    /// `30 days`, or hours below a day.
    fn age(&self) -> String {
        let hours = self.after.as_secs() / 3600;
        if hours.is_multiple_of(24) {
            format!("{} days", hours / 24)
        } else {
            format!("{hours} hours")
        }
    }
}

/// What central says about this machine, if it can be asked.
#[derive(Debug, Clone)]
pub(crate) enum Login {
    NotLoggedIn,
    /// A token is stored, but central did not answer (or refused it).
    Unreachable(String),
    LoggedIn(Box<StatusResponse>),
}

/// One exclusion and how many transcripts on disk it keeps back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Excluded {
    pub(crate) glob: String,
    pub(crate) origin: String,
    pub(crate) transcripts: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub(crate) central_url: Option<String>,
    pub(crate) login: Login,
    /// When central last accepted a delta from here (RFC 3339).
    pub(crate) last_sent: Option<String>,
    pub(crate) sources: Vec<(AgentRuntime, Coverage)>,
    /// Every exclusion, also those that match nothing yet.
    pub(crate) excluded: Vec<Excluded>,
    /// Transcripts held back while exclusions apply and they name no
    /// working folder yet (nothing of them is sent until one does).
    pub(crate) held_back: u64,
    pub(crate) outbox: usize,
    pub(crate) rejected: usize,
    /// Why the last replay stopped (central down, token refused).
    pub(crate) last_error: Option<String>,
    pub(crate) state_dir: PathBuf,
    /// Whether `[aider] roots` names any folder: Aider's histories are
    /// looked for only under them.
    pub(crate) aider_roots: bool,
}

/// Claude Code's `cleanupPeriodDays` from `settings.json` (default 30).
pub(crate) fn cleanup_days(claude_dir: &Path) -> u64 {
    std::fs::read(claude_dir.join("settings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
        .and_then(|v| v.get("cleanupPeriodDays")?.as_u64())
        .filter(|d| *d >= 1)
        .unwrap_or(DEFAULT_CLEANUP_DAYS)
}

/// Gemini CLI's `general.sessionRetention` from `settings.json`: `None` when
/// `enabled` is false, else `maxAge` (`<n>h`, `d`, `w` or `m`, a month being
/// 30 days; default 30 days). Its `maxCount` is not read.
pub(crate) fn gemini_retention(gemini_dir: &Path) -> Option<Duration> {
    let settings = std::fs::read(gemini_dir.join("settings.json"))
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    let retention = settings
        .as_ref()
        .and_then(|v| v.pointer("/general/sessionRetention"));
    if retention.and_then(|r| r.get("enabled")?.as_bool()) == Some(false) {
        return None;
    }
    let max_age = retention
        .and_then(|r| r.get("maxAge")?.as_str())
        .and_then(|age| {
            let unit = match age.chars().last()? {
                'h' => 3600,
                'd' => 86_400,
                'w' => 7 * 86_400,
                'm' => 30 * 86_400,
                _ => return None,
            };
            let n: u64 = age[..age.len() - 1].parse().ok().filter(|n| *n >= 1)?;
            Some(Duration::from_secs(n * unit))
        });
    Some(max_age.unwrap_or(DEFAULT_GEMINI_RETENTION))
}

/// What `kith status` lists: every agent kith captures, `Other` aside.
fn runtimes() -> impl Iterator<Item = AgentRuntime> {
    AgentRuntime::ALL
        .into_iter()
        .filter(|r| *r != AgentRuntime::Other)
}

/// Central's view of this machine, waiting at most `CENTRAL_WAIT`.
fn login(paths: &Paths, settings: &Settings) -> Login {
    let auth = match settings.auth(paths) {
        Ok(auth) => auth,
        Err(crate::Error::NotLoggedIn) => return Login::NotLoggedIn,
        Err(e) => return Login::Unreachable(e.to_string()),
    };
    match Client::new(&auth).and_then(|c| c.status(CENTRAL_WAIT)) {
        Ok(status) => Login::LoggedIn(Box::new(status)),
        Err(e) => Login::Unreachable(e.to_string()),
    }
}

pub(crate) fn report(paths: &Paths, settings: &Settings) -> Report {
    let cursors = Cursors::new(&paths.state_dir);
    let outbox = Outbox::new(&paths.state_dir);
    let mut sources: Vec<(AgentRuntime, Coverage)> = runtimes()
        .map(|r| {
            let cov = Coverage {
                cleanup: Cleanup::of(paths, r),
                ..Coverage::default()
            };
            (r, cov)
        })
        .collect();
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
    let mut held_back = 0;
    let found = discover::found(paths, &settings.aider_roots());
    for source in found.sources {
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
                .or_else(|| discover::peek(paths, source.runtime, &source.path).cwd)
                .or_else(|| {
                    discover::names_folder_in_lines(source.runtime)
                        .then(|| discover::folder_anywhere(source.runtime, &source.path))
                        .flatten()
                });
            if cwd.is_none() && discover::names_folder_in_lines(source.runtime) {
                held_back += 1;
                continue;
            }
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
            if let Some(why) = &c.parked {
                cov.parked.push((source.path.clone(), why.clone()));
            }
        }
        cov.files += 1;
        cov.links_followed += u64::from(found.linked.contains(&source.path));
        cov.bytes_on_disk += meta.len();
        cov.bytes_accepted += accepted;
        cov.bytes_pending += meta.len() - accepted;
        // A journal is kith's own copy: the agent's cleanup never deletes it.
        let journal = discover::runtime_of_journal(paths, &source.path).is_some();
        if let Some(cleanup) = cov.cleanup.filter(|_| !journal) {
            let horizon = cleanup
                .after
                .saturating_sub(Duration::from_secs(WARN_DAYS_AHEAD * 86_400));
            let old = meta
                .modified()
                .ok()
                .and_then(|m| SystemTime::now().duration_since(m).ok())
                .is_some_and(|age| age > horizon);
            if old && accepted < meta.len() {
                cov.at_risk.push(source.path);
            }
        }
    }
    Report {
        central_url: settings.central_url.as_ref().map(|u| u.value.clone()),
        login: login(paths, settings),
        last_sent: outbox.last_sent(),
        sources,
        excluded,
        held_back,
        outbox: outbox.len(),
        rejected: outbox.rejected(),
        last_error: outbox.last_error(),
        state_dir: paths.state_dir.clone(),
        aider_roots: !settings.aider_roots().is_empty(),
    }
}

impl Report {
    /// The line atuin users look for first: where this machine sends, as
    /// whom, whether that works, and what is still on its way.
    pub(crate) fn first_line(&self, now: OffsetDateTime) -> String {
        let url = self.central_url.as_deref().unwrap_or("(none)");
        let who = match &self.login {
            Login::NotLoggedIn => "not logged in".to_owned(),
            Login::Unreachable(why) => format!("logged in, central unreachable ({why})"),
            Login::LoggedIn(s) => format!("{} on {} · logged in", s.user, s.machine),
        };
        let sent = match &self.last_sent {
            Some(at) => crate::render::term::age(at, now),
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
            // An admin's status counts the family's runs.
            let capped = s.family.as_ref().unwrap_or(&s.counts);
            if capped.runs_capped > 0 {
                line += &format!(
                    " · {} delta(s) too long to search whole: {} chunks left out of search (kith show prints them)",
                    capped.runs_capped, capped.chunks_cut
                );
            }
            if let Some(since) = &s.indexing_failing_since {
                line += &format!(
                    " · central cannot index since {since}: what it accepted waits, and is searchable once it can"
                );
            }
            // Only an admin's status holds the family's backups.
            if let Some(b) = &s.backup {
                line += &match (&b.warning, &b.last_good_at) {
                    (Some(w), _) => format!(" · backups: {w}"),
                    (None, Some(at)) => format!(
                        " · last good backup {} to {}",
                        crate::render::term::age(at, now),
                        b.last_good_dest.as_deref().unwrap_or("?")
                    ),
                    (None, None) => String::new(),
                };
            }
        }
        line
    }

    pub(crate) fn to_json(&self) -> serde_json::Value {
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
                    "runs_capped": s.family.as_ref().unwrap_or(&s.counts).runs_capped,
                    "chunks_cut": s.family.as_ref().unwrap_or(&s.counts).chunks_cut,
                    "indexing_failing_since": s.indexing_failing_since,
                    "backup": s.backup,
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
                "links_followed": c.links_followed,
                "bytes_on_disk": c.bytes_on_disk,
                "bytes_accepted": c.bytes_accepted,
                "bytes_pending": c.bytes_pending,
                "last_error": c.last_error,
                "parked": c.parked.iter().map(|(p, _)| p).collect::<Vec<_>>(),
                "cleanup": c.cleanup.map(|k| json!({
                    "setting": k.setting, "after_hours": k.after.as_secs() / 3600,
                })),
                "at_risk": c.cleanup.map(|_| &c.at_risk),
            })).collect::<Vec<_>>(),
            "held_back": self.held_back,
            "excluded": self.excluded.iter().map(|e| json!({
                "glob": e.glob, "origin": e.origin, "transcripts": e.transcripts,
            })).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.first_line(OffsetDateTime::now_utc()))?;
        writeln!(
            f,
            "{:<12} {:>6} {:>14} {:>14} {:>14} {:>8}",
            "source", "found", "bytes on disk", "captured", "pending", "at risk"
        )?;
        for (runtime, c) in &self.sources {
            // `-`: the agent deletes nothing, so nothing is at risk.
            let at_risk = c
                .cleanup
                .map_or_else(|| "-".to_owned(), |_| c.at_risk.len().to_string());
            writeln!(
                f,
                "{:<12} {:>6} {:>14} {:>14} {:>14} {:>8}",
                runtime.as_str(),
                c.files,
                c.bytes_on_disk,
                c.bytes_accepted,
                c.bytes_pending,
                at_risk
            )?;
            if c.links_followed > 0 {
                writeln!(
                    f,
                    "  {} found through symbolic links (followed)",
                    c.links_followed
                )?;
            }
            if let Some(e) = &c.last_error {
                writeln!(f, "  last error: {e}")?;
            }
            for (p, why) in &c.parked {
                writeln!(f, "  waiting until it changes: {} ({why})", p.display())?;
            }
            if *runtime == AgentRuntime::Aider && !self.aider_roots {
                writeln!(
                    f,
                    "  not looked for: name the folders your projects are in as [aider] roots in config.toml (or KITH_AIDER_ROOTS)"
                )?;
            }
            // No hook of theirs runs kith: only `kith watch` (the service
            // `kith setup` installs) or a backfill captures them.
            let hookless = matches!(runtime, AgentRuntime::OpenCode | AgentRuntime::Aider);
            if hookless && c.bytes_pending > 0 {
                writeln!(
                    f,
                    "  captured only by `kith watch` (it has no hook): run `kith setup` for the service, or `kith backfill`"
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
        if self.held_back > 0 {
            writeln!(
                f,
                "held back: {} transcripts name no working folder yet; none is sent until it does (exclusions are decided on it)",
                self.held_back
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
        for (_, c) in &self.sources {
            if let (Some(cleanup), Some(first)) = (c.cleanup, c.at_risk.first()) {
                writeln!(
                    f,
                    "warning: {} deletes transcripts after {} ({}); {} not fully captured yet will go soon, e.g. {}. Run `kith backfill` while central is reachable.",
                    cleanup.agent,
                    cleanup.age(),
                    cleanup.setting,
                    c.at_risk.len(),
                    first.display()
                )?;
            }
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
        assert_eq!(report.sources[0].1.at_risk, vec![old]);
        let shown = report.to_string();
        assert!(
            shown.contains(
                "Claude Code deletes transcripts after 5 days (cleanupPeriodDays); 1 not"
            ),
            "{shown}"
        );
        assert!(shown.contains("outbox: 0 deltas waiting"), "{shown}");
        assert_eq!(report.sources[0].1.files, 2);
        assert_eq!(report.sources[0].1.bytes_pending, 6);
        Ok(())
    }

    #[test]
    fn gemini_retention_comes_from_its_settings() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let days = |n: u64| Some(Duration::from_secs(n * 86_400));
        assert_eq!(gemini_retention(tmp.path()), days(30), "on by default");
        let cases = [
            (
                r#"{"general":{"sessionRetention":{"maxAge":"7d"}}}"#,
                days(7),
            ),
            (
                r#"{"general":{"sessionRetention":{"maxAge":"2w"}}}"#,
                days(14),
            ),
            (
                r#"{"general":{"sessionRetention":{"maxAge":"1m"}}}"#,
                days(30),
            ),
            (
                r#"{"general":{"sessionRetention":{"maxAge":"36h"}}}"#,
                Some(Duration::from_secs(36 * 3600)),
            ),
            (
                r#"{"general":{"sessionRetention":{"maxAge":"soon"}}}"#,
                days(30),
            ),
            (
                r#"{"general":{"sessionRetention":{"enabled":false,"maxAge":"7d"}}}"#,
                None,
            ),
        ];
        for (settings, want) in cases {
            std::fs::write(tmp.path().join("settings.json"), settings)?;
            assert_eq!(gemini_retention(tmp.path()), want, "{settings}");
        }
        Ok(())
    }

    /// Every agent has a row, found files or not; `at risk` only where the
    /// agent deletes transcripts, and only unsent ones past its horizon.
    #[test]
    fn every_agent_is_listed_and_at_risk_only_where_it_cleans_up() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        let chats = paths.gemini_dir.join("tmp/p/chats");
        std::fs::create_dir_all(&chats)?;
        std::fs::write(
            paths.gemini_dir.join("settings.json"),
            r#"{"general":{"sessionRetention":{"maxAge":"4d"}}}"#,
        )?;
        let project = tmp.path().join("src/app");
        std::fs::create_dir_all(&project)?;
        let old = SystemTime::now() - Duration::from_secs(2 * 86_400);
        for file in [
            chats.join("session-1.jsonl"),
            project.join(discover::AIDER_HISTORY),
        ] {
            std::fs::write(&file, "{}\n")?;
            std::fs::File::options()
                .write(true)
                .open(&file)?
                .set_modified(old)?;
        }
        std::fs::create_dir_all(&paths.config_dir)?;
        std::fs::write(
            paths.config_dir.join("config.toml"),
            format!(
                "[aider]\nroots = [\"{}\"]\n",
                tmp.path().join("src").display()
            ),
        )?;
        let settings = Settings::load(&paths, &crate::settings::Flags::default())?;
        let report = report(&paths, &settings);
        let listed: Vec<&str> = report.sources.iter().map(|(r, _)| r.as_str()).collect();
        assert_eq!(
            listed,
            [
                "claude-code",
                "codex",
                "pi",
                "gemini",
                "copilot",
                "cursor",
                "aider",
                "opencode"
            ]
        );
        let row = |name: &str| -> Vec<String> {
            let shown = report.to_string();
            let line = shown
                .lines()
                .find(|l| l.split_whitespace().next() == Some(name))
                .unwrap_or_else(|| panic!("no {name} row: {shown}"))
                .to_owned();
            line.split_whitespace().map(str::to_owned).collect()
        };
        assert_eq!(row("gemini"), ["gemini", "1", "3", "0", "3", "1"]);
        assert_eq!(row("aider"), ["aider", "1", "3", "0", "3", "-"]);
        assert_eq!(row("codex"), ["codex", "0", "0", "0", "0", "-"]);
        assert_eq!(row("claude-code"), ["claude-code", "0", "0", "0", "0", "0"]);
        let shown = report.to_string();
        assert!(
            shown.contains(
                "Gemini CLI deletes transcripts after 4 days (general.sessionRetention); 1 not"
            ),
            "{shown}"
        );
        let json = report.to_json();
        let gemini = &json["sources"][3];
        assert_eq!(gemini["at_risk"], json!([chats.join("session-1.jsonl")]));
        assert_eq!(gemini["cleanup"]["after_hours"], 96);
        assert_eq!(json["sources"][6]["runtime"], "aider");
        assert_eq!(json["sources"][6]["at_risk"], serde_json::Value::Null);
        assert_eq!(json["sources"][6]["files"], 1);
        // Aider's history, found under its root and pending: watch captures
        // it; nothing asks for roots that are there.
        assert!(shown.contains("captured only by `kith watch`"), "{shown}");
        assert!(!shown.contains("[aider] roots"), "{shown}");
        Ok(())
    }

    /// A transcript found through a linked folder is counted as found and
    /// said to be followed; one in a real folder is not.
    #[test]
    fn status_says_which_transcripts_it_found_through_links() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(&tmp.path().join("home"));
        let state = paths.copilot_dir.join("session-state");
        std::fs::create_dir_all(state.join("s-real"))?;
        std::fs::write(state.join("s-real/events.jsonl"), "{}\n")?;
        let elsewhere = tmp.path().join("elsewhere/s-linked");
        std::fs::create_dir_all(&elsewhere)?;
        std::fs::write(elsewhere.join("events.jsonl"), "{}\n")?;
        std::os::unix::fs::symlink(&elsewhere, state.join("s-linked"))?;
        let settings = Settings::load(&paths, &crate::settings::Flags::default())?;
        let report = report(&paths, &settings);
        let json = report.to_json();
        let copilot = &json["sources"][4];
        assert_eq!(copilot["runtime"], "copilot");
        assert_eq!(
            (
                copilot["files"].as_u64(),
                copilot["links_followed"].as_u64()
            ),
            (Some(2), Some(1))
        );
        assert_eq!(json["sources"][0]["links_followed"], 0);
        let shown = report.to_string();
        assert!(
            shown.contains("  1 found through symbolic links (followed)"),
            "{shown}"
        );
        assert_eq!(
            shown.matches("through symbolic links").count(),
            1,
            "{shown}"
        );
        Ok(())
    }

    #[test]
    fn status_names_what_aider_needs() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        let settings = Settings::load(&paths, &crate::settings::Flags::default())?;
        let shown = report(&paths, &settings).to_string();
        let aider = shown
            .split("\naider ")
            .nth(1)
            .unwrap_or_else(|| panic!("no aider row: {shown}"));
        assert!(aider.contains("[aider] roots in config.toml"), "{shown}");
        assert!(
            !shown.contains("captured only by"),
            "nothing pending: {shown}"
        );
        Ok(())
    }

    /// A symlinked agent folder (`~/.claude` kept in a dotfiles repository):
    /// the transcript's cursor is found by its real path, as capture keys it.
    #[test]
    fn a_transcript_under_a_symlinked_folder_counts_what_was_accepted() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        let real = tmp.path().join("dotfiles/claude");
        std::fs::create_dir_all(real.join("projects/-p"))?;
        std::fs::create_dir_all(paths.claude_dir.parent().unwrap_or(tmp.path()))?;
        std::os::unix::fs::symlink(&real, &paths.claude_dir)?;
        let file = paths.claude_dir.join("projects/-p/s.jsonl");
        std::fs::write(&file, "{}\n{}\n")?;
        let canonical = std::fs::canonicalize(&file)?;
        let meta = std::fs::metadata(&canonical)?;
        let file_id = (meta.dev(), meta.ino());
        let mut cursor =
            crate::cursor::Cursor::start(&canonical, AgentRuntime::ClaudeCode, file_id, 0);
        cursor.size = 6;
        cursor.spooled.offset = 6;
        cursor.accepted.offset = 6;
        crate::cursor::Cursors::new(&paths.state_dir).save(&cursor)?;
        let settings = Settings::load(&paths, &crate::settings::Flags::default())?;
        let json = report(&paths, &settings).to_json();
        let claude = &json["sources"][0];
        assert_eq!(claude["runtime"], "claude-code");
        assert_eq!(claude["files"], 1);
        assert_eq!(claude["bytes_accepted"], 6, "{claude}");
        assert_eq!(claude["bytes_pending"], 0, "{claude}");
        Ok(())
    }
}
