//! A registry file read whole and never changed by the reading: a backup's
//! copy (taken with [`copy_into`] while a server writes) or the live file
//! beside a running server. What backups and `verify` need of it: whether
//! SQLite finds it sound, its runs' places in their chains and their blob
//! paths, and its tombstones.

use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::privacy::Operator;

/// What a registry says of one run: where its bytes sit in their source's
/// chain, and where its blob is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogRun {
    pub id: String,
    pub user_id: String,
    pub source_identity: String,
    pub from_offset: u64,
    pub to_offset: u64,
    pub jsonl_sha256: String,
    pub chain_sha256: String,
    /// Relative to the data directory.
    pub blob_path: String,
}

/// A forgotten run's place in its source's chain (no text: a tombstone
/// keeps none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TombstoneRow {
    pub run_id: String,
    pub user_id: String,
    pub source_identity: String,
    pub to_offset: u64,
    pub chain_sha256: String,
}

/// A tombstone whole, with the sha256 of each of its run's lines: what a
/// registry needs to keep the run forgotten (a backup folder keeps one per
/// forgotten run, so a restore from any snapshot takes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TombstoneRecord {
    pub run_id: String,
    pub user_id: String,
    pub source_identity: String,
    pub from_offset: u64,
    pub to_offset: u64,
    pub chain_sha256: String,
    pub conversation: Option<String>,
    pub forgotten_at: String,
    pub line_sha256: Vec<String>,
}

/// One registry file, opened read-only.
pub struct RegistryFile {
    conn: Connection,
}

impl RegistryFile {
    /// A copy nothing writes (a backup's): opened immutable, so reading it
    /// leaves no journal or lock file beside it.
    pub fn open_copy(path: &Path) -> Result<Self> {
        let conn = Connection::open_with_flags(
            immutable_uri(path)?,
            OpenFlags::SQLITE_OPEN_READ_ONLY
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| Error::Internal(format!("cannot open {}: {e}", path.display())))?;
        Ok(Self { conn })
    }

    /// The live registry, which a server may be writing: read-only, at its
    /// last commit.
    pub fn open_live(path: &Path) -> Result<Self> {
        if !path.is_file() {
            return Err(Error::Internal(format!(
                "no registry at {}: not a kith-central data directory",
                path.display()
            )));
        }
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| Error::Internal(format!("cannot open {}: {e}", path.display())))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(Self { conn })
    }

    /// What `PRAGMA integrity_check` finds wrong; empty when the file is
    /// sound. A file SQLite cannot read at all says so in the one line.
    pub fn problems(&self) -> Vec<String> {
        let found = self
            .conn
            .prepare("PRAGMA integrity_check")
            .and_then(|mut stmt| {
                stmt.query_map([], |r| r.get::<_, String>(0))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            });
        match found {
            Ok(lines) if lines == ["ok"] => Vec::new(),
            Ok(lines) => lines,
            Err(e) => vec![e.to_string()],
        }
    }

    /// Every member's runs, by id.
    pub fn runs(&self, _: &Operator) -> Result<Vec<CatalogRun>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, user_id, source_identity, from_offset, to_offset, jsonl_sha256,
                    chain_sha256, blob_path
             FROM runs ORDER BY id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(CatalogRun {
                    id: r.get(0)?,
                    user_id: r.get(1)?,
                    source_identity: r.get(2)?,
                    from_offset: r.get::<_, i64>(3)?.max(0) as u64,
                    to_offset: r.get::<_, i64>(4)?.max(0) as u64,
                    jsonl_sha256: r.get(5)?,
                    chain_sha256: r.get(6)?,
                    blob_path: r.get(7)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Whether any of `run_ids` has a row (says nothing of whose).
    pub fn lists_any(&self, run_ids: &std::collections::HashSet<&str>) -> Result<bool> {
        let mut stmt = self.conn.prepare("SELECT 1 FROM runs WHERE id = ?1")?;
        for id in run_ids {
            if stmt.exists([id])? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The whole tombstones of `run_ids` (every one with `None`), by run id.
    pub fn tombstone_records(&self, run_ids: Option<&[String]>) -> Result<Vec<TombstoneRecord>> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id, user_id, source_identity, from_offset, to_offset, chain_sha256,
                    conversation, forgotten_at
             FROM forgotten ORDER BY run_id",
        )?;
        let mut records: Vec<TombstoneRecord> = stmt
            .query_map([], |r| {
                Ok(TombstoneRecord {
                    run_id: r.get(0)?,
                    user_id: r.get(1)?,
                    source_identity: r.get(2)?,
                    from_offset: r.get::<_, i64>(3)?.max(0) as u64,
                    to_offset: r.get::<_, i64>(4)?.max(0) as u64,
                    chain_sha256: r.get(5)?,
                    conversation: r.get(6)?,
                    forgotten_at: r.get(7)?,
                    line_sha256: Vec::new(),
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        if let Some(ids) = run_ids {
            records.retain(|t| ids.contains(&t.run_id));
        }
        let mut lines = self.conn.prepare(
            "SELECT line_sha256 FROM forgotten_lines WHERE run_id = ?1 ORDER BY line_sha256",
        )?;
        for t in &mut records {
            t.line_sha256 = lines
                .query_map([&t.run_id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
        }
        Ok(records)
    }

    /// Every tombstone, by run id.
    pub fn tombstones(&self) -> Result<Vec<TombstoneRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT run_id, user_id, source_identity, to_offset, chain_sha256
             FROM forgotten ORDER BY run_id",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok(TombstoneRow {
                    run_id: r.get(0)?,
                    user_id: r.get(1)?,
                    source_identity: r.get(2)?,
                    to_offset: r.get::<_, i64>(3)?.max(0) as u64,
                    chain_sha256: r.get(4)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

/// Copies the registry at `live` into `into`, a new file (0600), as one
/// consistent point in time while a server may be writing: `VACUUM INTO`
/// reads the whole database in one read transaction, which in WAL mode
/// neither waits for the writer nor holds it up. The copy is written with
/// `secure_delete`, as the registry is: its free space holds no stale
/// bytes, so a row deleted from it later (a forget, once restored) leaves
/// no text behind. The copy is synced (SQLite does not sync what `VACUUM
/// INTO` writes).
pub fn copy_into(live: &Path, into: &Path) -> Result<()> {
    let source = RegistryFile::open_live(live)?;
    source.conn.pragma_update(None, "secure_delete", "ON")?;
    // `VACUUM INTO` takes an empty file: made here, with the mode it keeps.
    drop(crate::private::create_new(into)?);
    let target = into
        .to_str()
        .ok_or_else(|| Error::Internal(format!("{} is not UTF-8", into.display())))?;
    source
        .conn
        .execute("VACUUM INTO ?1", [target])
        .map_err(|e| {
            Error::Internal(format!(
                "cannot copy {} into {}: {e}",
                live.display(),
                into.display()
            ))
        })?;
    std::fs::File::open(into)?.sync_all()?;
    Ok(())
}

/// `file:<path>?immutable=1`, the path percent-encoded where a URI needs it.
pub(super) fn immutable_uri(path: &Path) -> Result<String> {
    let path = std::path::absolute(path)?;
    let text = path
        .to_str()
        .ok_or_else(|| Error::Internal(format!("{} is not UTF-8", path.display())))?;
    let mut uri = String::from("file:");
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"/-_.~".contains(&b) {
            uri.push(b as char);
        } else {
            uri.push_str(&format!("%{b:02X}"));
        }
    }
    uri.push_str("?immutable=1");
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::super::Registry;
    use super::*;

    fn add_user(registry: &Registry, id: &str) -> Result<()> {
        registry.conn().execute(
            "INSERT INTO users (id, handle, created_at) VALUES (?1, ?1, '2026-05-11T00:00:00.000Z')",
            [id],
        )?;
        Ok(())
    }

    fn handles(path: &Path) -> Result<Vec<String>> {
        let copy = RegistryFile::open_copy(path)?;
        let mut stmt = copy
            .conn
            .prepare("SELECT handle FROM users ORDER BY handle")?;
        let rows = stmt
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    #[test]
    fn a_copy_taken_while_a_transaction_is_open_holds_the_last_commit_only() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let live = dir.path().join("registry.sqlite");
        let registry = Registry::open(&live)?;
        add_user(&registry, "ualice")?;
        let mut conn = registry.conn();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT INTO users (id, handle, created_at) VALUES ('ubob', 'ubob', 'x')",
            [],
        )?;
        // The writer holds its transaction open while the copy is taken.
        let copy = dir.path().join("copy.sqlite");
        copy_into(&live, &copy)?;
        tx.commit()?;
        drop(conn);
        assert_eq!(handles(&copy)?, ["ualice"]);
        let again = dir.path().join("again.sqlite");
        copy_into(&live, &again)?;
        assert_eq!(handles(&again)?, ["ualice", "ubob"]);
        assert!(RegistryFile::open_copy(&again)?.problems().is_empty());
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&copy)?.permissions().mode() & 0o777,
            0o600
        );
        // Reading a copy leaves nothing beside it.
        let mut beside: Vec<_> = std::fs::read_dir(dir.path())?
            .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
            .filter(|n| n.starts_with("copy") || n.starts_with("again"))
            .collect();
        beside.sort();
        assert_eq!(beside, ["again.sqlite", "copy.sqlite"]);
        Ok(())
    }

    #[test]
    fn a_truncated_copy_is_found_unsound_and_a_missing_live_one_named() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let live = dir.path().join("registry.sqlite");
        let registry = Registry::open(&live)?;
        {
            let mut conn = registry.conn();
            let tx = conn.transaction()?;
            for i in 0..2000 {
                tx.execute(
                    "INSERT INTO users (id, handle, created_at) VALUES (?1, ?1, 'x')",
                    [format!("u{i:04}")],
                )?;
            }
            tx.commit()?;
        }
        let copy = dir.path().join("copy.sqlite");
        copy_into(&live, &copy)?;
        let len = std::fs::metadata(&copy)?.len();
        let file = std::fs::OpenOptions::new().write(true).open(&copy)?;
        file.set_len(len / 2)?;
        let problems =
            RegistryFile::open_copy(&copy).map_or_else(|e| vec![e.to_string()], |f| f.problems());
        assert!(!problems.is_empty(), "a truncated copy passed");
        let gone = RegistryFile::open_live(&dir.path().join("absent.sqlite"));
        assert!(
            gone.is_err_and(|e| e.to_string().contains("absent.sqlite")),
            "a missing registry is named"
        );
        Ok(())
    }

    /// Regression: a copy built without `secure_delete` kept stale bytes
    /// of its rows in free space, and a run forgotten in a central restored
    /// from it left its title in the registry file.
    #[test]
    fn a_row_deleted_from_a_copy_leaves_no_bytes_of_it() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let live = dir.path().join("registry.sqlite");
        let registry = Registry::open(&live)?;
        {
            let mut conn = registry.conn();
            let tx = conn.transaction()?;
            for i in 0..40 {
                tx.execute(
                    "INSERT INTO users (id, handle, created_at) VALUES (?1, ?2, 'x')",
                    [
                        format!("u{i:02}"),
                        format!("{i:02}-{}", "pangolin".repeat(40)),
                    ],
                )?;
            }
            tx.commit()?;
        }
        let copy = dir.path().join("copy.sqlite");
        copy_into(&live, &copy)?;
        let restored = Registry::open(&copy)?;
        restored
            .conn()
            .execute("DELETE FROM users WHERE id = 'u07'", [])?;
        restored
            .conn()
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        drop(restored);
        let bytes = std::fs::read(&copy)?;
        let gone = b"07-pangolin";
        assert!(
            !bytes.windows(gone.len()).any(|w| w == gone),
            "the deleted row's bytes stay"
        );
        let kept = b"08-pangolin";
        assert!(bytes.windows(kept.len()).any(|w| w == kept));
        Ok(())
    }

    #[test]
    fn an_odd_path_makes_a_uri_that_names_it() -> Result<()> {
        let uri = immutable_uri(Path::new("/b a/c?d#e%f"))?;
        assert_eq!(uri, "file:/b%20a/c%3Fd%23e%25f?immutable=1");
        Ok(())
    }
}
