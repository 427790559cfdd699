//! The `backups` table: every backup folder a backup of this data
//! directory was written to (by `serve`'s schedule or by `kith-central
//! backup`), with its last good snapshot and its last failure. A forget
//! reaches each of them; `doctor` and `/api/status` tell the last good
//! backup's age.

use rusqlite::params;

use super::Registry;
use crate::error::Result;

/// A backup folder this data directory was backed up to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupRow {
    /// Absolute.
    pub dest: String,
    /// When the last whole snapshot's registry was copied (its point in
    /// time), and its name.
    pub last_good_at: Option<String>,
    pub last_snapshot: Option<String>,
    /// The last failure (a backup, or a forget that could not reach the
    /// folder), and when; cleared by the next success.
    pub last_error: Option<String>,
    pub last_error_at: Option<String>,
}

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS backups (
    dest TEXT PRIMARY KEY,
    last_good_at TEXT,
    last_snapshot TEXT,
    last_error TEXT,
    last_error_at TEXT
);
";

impl Registry {
    /// Notes a whole snapshot written to `dest`.
    pub fn backup_taken(&self, dest: &str, snapshot: &str, taken_at: &str) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO backups (dest, last_good_at, last_snapshot) VALUES (?1, ?2, ?3)
                 ON CONFLICT (dest) DO UPDATE SET last_good_at = ?2, last_snapshot = ?3,
                     last_error = NULL, last_error_at = NULL",
            )?
            .execute(params![dest, taken_at, snapshot])?;
        Ok(())
    }

    /// Notes a failure at `dest`: a backup that did not finish, or a
    /// forget that could not reach it.
    pub fn backup_failed(&self, dest: &str, error: &str, at: &str) -> Result<()> {
        self.conn()
            .prepare_cached(
                "INSERT INTO backups (dest, last_error, last_error_at) VALUES (?1, ?2, ?3)
                 ON CONFLICT (dest) DO UPDATE SET last_error = ?2, last_error_at = ?3",
            )?
            .execute(params![dest, error, at])?;
        Ok(())
    }

    /// Notes that `dest` was reached (a forget applied there): an earlier
    /// failure to reach it no longer stands.
    pub fn backup_reached(&self, dest: &str) -> Result<()> {
        self.conn()
            .prepare_cached(
                "UPDATE backups SET last_error = NULL, last_error_at = NULL WHERE dest = ?1",
            )?
            .execute([dest])?;
        Ok(())
    }

    /// Every backup folder noted, by path.
    pub fn backups(&self) -> Result<Vec<BackupRow>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT dest, last_good_at, last_snapshot, last_error, last_error_at
             FROM backups ORDER BY dest",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(BackupRow {
                    dest: r.get(0)?,
                    last_good_at: r.get(1)?,
                    last_snapshot: r.get(2)?,
                    last_error: r.get(3)?,
                    last_error_at: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_clears_the_failure_before_it_and_a_failure_keeps_the_last_success() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let registry = Registry::open(&tmp.path().join("registry.sqlite"))?;
        registry.backup_failed("/b", "disk full", "2026-05-11T01:00:00.000Z")?;
        registry.backup_taken("/b", "s1", "2026-05-11T02:00:00.000Z")?;
        registry.backup_failed("/b", "gone", "2026-05-11T03:00:00.000Z")?;
        registry.backup_taken("/c", "s2", "2026-05-11T04:00:00.000Z")?;
        let rows = registry.backups()?;
        assert_eq!(
            rows[0],
            BackupRow {
                dest: "/b".into(),
                last_good_at: Some("2026-05-11T02:00:00.000Z".into()),
                last_snapshot: Some("s1".into()),
                last_error: Some("gone".into()),
                last_error_at: Some("2026-05-11T03:00:00.000Z".into()),
            }
        );
        assert_eq!(
            (rows[1].dest.as_str(), rows[1].last_error.as_deref()),
            ("/c", None)
        );
        registry.backup_reached("/b")?;
        assert_eq!(registry.backups()?[0].last_error, None);
        Ok(())
    }
}
