//! How the family's backups stand, for `doctor` and admins' `/api/status`:
//! the last good backup (when, how old, where) and a warning when there is
//! none configured, none yet, or the last good one is older than twice the
//! schedule's period. A pure function of the configuration, the registry's
//! `backups` rows and the time.

use std::fmt;
use std::time::Duration;

use time::OffsetDateTime;

use super::schedule::dest_name;
use crate::config::BackupConfig;
use crate::registry::BackupRow;

/// What `doctor` and `/api/status` say of the backups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Health {
    /// The configured folder and period, if any.
    pub dest: Option<String>,
    pub every: Option<Duration>,
    /// The last good backup: its point in time, its age and its folder
    /// (the configured one's, or without a configuration the newest noted).
    pub last_good_at: Option<String>,
    pub age: Option<Duration>,
    pub last_good_dest: Option<String>,
    /// The folder's last failure, when it came after that backup.
    pub last_error: Option<String>,
    pub warning: Option<String>,
}

/// How the backups stand at `now`.
pub(crate) fn health(
    config: Option<&BackupConfig>,
    rows: &[BackupRow],
    now: OffsetDateTime,
) -> Health {
    let age_of = |at: &str| {
        kith_shared::timestamp::parse(at)
            .map(|t| Duration::try_from(now - t).unwrap_or(Duration::ZERO))
    };
    let Some(config) = config else {
        let newest = rows
            .iter()
            .filter(|r| r.last_good_at.is_some())
            .max_by(|a, b| a.last_good_at.cmp(&b.last_good_at));
        return Health {
            dest: None,
            every: None,
            last_good_at: newest.and_then(|r| r.last_good_at.clone()),
            age: newest.and_then(|r| r.last_good_at.as_deref().and_then(age_of)),
            last_good_dest: newest.map(|r| r.dest.clone()),
            last_error: None,
            warning: Some(
                "no backup configured: add a [backup] section (dest, every, keep) to central's \
                 configuration"
                    .into(),
            ),
        };
    };
    let dest = dest_name(&config.dest);
    let every = config.every.0;
    let row = rows.iter().find(|r| r.dest == dest);
    let last_good_at = row.and_then(|r| r.last_good_at.clone());
    let age = last_good_at.as_deref().and_then(age_of);
    let last_error = row.and_then(|r| r.last_error.clone());
    let failing = last_error
        .as_deref()
        .map(|e| format!(" (the last attempt failed: {e})"))
        .unwrap_or_default();
    let warning = match age {
        None => Some(format!("no good backup to {dest} yet{failing}")),
        Some(age) if age > every * 2 => Some(format!(
            "the last good backup to {dest} is {} old, more than twice every {}{failing}",
            human_age(age),
            human_age(every)
        )),
        Some(_) => None,
    };
    Health {
        dest: Some(dest.clone()),
        every: Some(every),
        last_good_dest: last_good_at.as_ref().map(|_| dest),
        last_good_at,
        age,
        last_error,
        warning,
    }
}

/// A period as people say it: the largest whole unit.
pub(crate) fn human_age(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86_400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

impl fmt::Display for Health {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.last_good_at, &self.age, &self.last_good_dest) {
            (Some(at), Some(age), Some(dest)) => write!(
                f,
                "last good backup {at} ({} ago) to {dest}",
                human_age(*age)
            )?,
            _ => write!(f, "no good backup yet")?,
        }
        if let Some(w) = &self.warning {
            write!(f, "; warning: {w}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Every;

    const NOW: &str = "2026-05-11T12:00:00.000Z";

    fn row(dest: &str, good: Option<&str>, error: Option<&str>) -> BackupRow {
        BackupRow {
            dest: dest.into(),
            last_good_at: good.map(Into::into),
            last_snapshot: good.map(|_| "s".into()),
            last_error: error.map(Into::into),
            last_error_at: error.map(|_| NOW.into()),
        }
    }

    #[test]
    fn a_warning_when_none_is_configured_none_is_taken_or_the_last_is_twice_late() {
        let now = kith_shared::timestamp::parse(NOW).unwrap_or(OffsetDateTime::UNIX_EPOCH);
        let config = BackupConfig {
            dest: "/b".into(),
            every: Every(Duration::from_secs(6 * 3600)),
            keep: std::num::NonZeroUsize::MIN,
        };
        /// What, the configuration, the rows, the warning wanted.
        type Case<'a> = (
            &'a str,
            Option<&'a BackupConfig>,
            Vec<BackupRow>,
            Option<&'a str>,
        );
        let cases: [Case; 6] = [
            (
                "none configured, a backup by hand",
                None,
                vec![row("/hand", Some("2026-05-11T11:00:00.000Z"), None)],
                Some(
                    "no backup configured: add a [backup] section (dest, every, keep) to \
                     central's configuration",
                ),
            ),
            (
                "configured, none yet",
                Some(&config),
                vec![],
                Some("no good backup to /b yet"),
            ),
            (
                "configured, failing, none yet",
                Some(&config),
                vec![row("/b", None, Some("disk full"))],
                Some("no good backup to /b yet (the last attempt failed: disk full)"),
            ),
            (
                "within twice the period",
                Some(&config),
                vec![row("/b", Some("2026-05-11T00:00:01.000Z"), None)],
                None,
            ),
            (
                "older than twice the period",
                Some(&config),
                vec![row("/b", Some("2026-05-10T23:59:00.000Z"), None)],
                Some("the last good backup to /b is 12h old, more than twice every 6h"),
            ),
            (
                "another folder's backup does not count",
                Some(&config),
                vec![row("/hand", Some("2026-05-11T11:00:00.000Z"), None)],
                Some("no good backup to /b yet"),
            ),
        ];
        for (what, config, rows, want) in cases {
            let h = health(config, &rows, now);
            assert_eq!(h.warning.as_deref(), want, "{what}: {h:?}");
        }
        let hand = health(
            None,
            &[row("/hand", Some("2026-05-11T11:00:00.000Z"), None)],
            now,
        );
        assert_eq!(
            hand.to_string(),
            "last good backup 2026-05-11T11:00:00.000Z (1h ago) to /hand; warning: no backup \
             configured: add a [backup] section (dest, every, keep) to central's configuration"
        );
    }
}
