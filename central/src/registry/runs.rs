//! The `runs` table: the run catalog (derived from the blobs; `reindex`
//! rebuilds it), read only through the `readable` predicate.

use std::sync::LazyLock;

use kith_proto::{AgentRuntime, RunMeta};
use kith_shared::ids::{RunId, UserId};
use rusqlite::{params, Connection};

use super::{epoch_ms_or, readable, to_i64, Lane, Registry, Viewer, GRANT_COVERS_RUN};
use crate::error::Result;

/// What the registry knows of one stored run beyond its metadata.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// With `readable_by` as of now: the owner and every live grantee.
    pub meta: RunMeta,
    pub ancestry: String,
    /// Blob path relative to the data directory.
    pub blob_path: String,
    pub idempotency_key: Option<String>,
    /// Readable by its owner alone.
    pub quarantined: bool,
    /// When central stored it, in milliseconds since the epoch.
    pub captured_ms: i64,
}

/// A run to insert, with the durable indexing job that goes with it.
pub struct NewRun<'a> {
    pub meta: &'a RunMeta,
    /// `|root|...|parent|self|`; see `ancestry_of`.
    pub ancestry: &'a str,
    pub blob_path: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub lane: Lane,
}

/// Filters of the forest view.
#[derive(Debug, Clone, Default)]
pub struct ForestFilter {
    pub since: Option<String>,
    pub runtime: Option<AgentRuntime>,
    pub machine: Option<String>,
    pub root: Option<RunId>,
    pub limit: u32,
}

/// The columns `write_run` fills, in the order of its parameters.
const RUN_COLUMNS: [&str; 19] = [
    "id",
    "user_id",
    "machine_id",
    "agent_runtime",
    "root_run_id",
    "parent_run_id",
    "conversation_id",
    "source_identity",
    "from_offset",
    "to_offset",
    "jsonl_sha256",
    "chain_sha256",
    "idempotency_key",
    "started_at",
    "blob_path",
    "meta_json",
    "tags_key",
    "ancestry",
    "conversation",
];

/// `INSERT INTO runs` of `RUN_COLUMNS`.
static INSERT_RUN: LazyLock<String> = LazyLock::new(|| {
    let placeholders: Vec<String> = (1..=RUN_COLUMNS.len()).map(|i| format!("?{i}")).collect();
    format!(
        "INSERT INTO runs ({}) VALUES ({})",
        RUN_COLUMNS.join(", "),
        placeholders.join(", ")
    )
});

/// `INSERT_RUN` for `replace_runs`: a run already known takes its blob's
/// columns again and keeps the rest (capture time, quarantine, idempotency
/// key); its index and vector state start over.
static REPLACE_RUN: LazyLock<String> = LazyLock::new(|| {
    let from_blob: Vec<String> = RUN_COLUMNS
        .iter()
        .filter(|c| !matches!(**c, "id" | "idempotency_key"))
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "{} ON CONFLICT (id) DO UPDATE SET {},
            indexed_at = NULL, embedded_at = NULL, embedded_model = NULL, chunks_digest = NULL",
        *INSERT_RUN,
        from_blob.join(", ")
    )
});

/// Quarantines a run new to the catalog whose machine is revoked (its
/// delta was on its way): only its owner reads it.
fn quarantine_if_revoked(tx: &rusqlite::Transaction<'_>, meta: &RunMeta) -> Result<()> {
    tx.prepare_cached(
        "UPDATE runs SET quarantined = 1 WHERE id = ?1 AND EXISTS (
             SELECT 1 FROM machines WHERE id = ?2 AND revoked_at IS NOT NULL)",
    )?
    .execute(params![meta.id, meta.machine_id])?;
    Ok(())
}

/// Runs `sql` (`INSERT_RUN` or `REPLACE_RUN`) for one run, and writes its
/// indexing job, inside the caller's transaction.
fn write_run(tx: &rusqlite::Transaction<'_>, new: &NewRun<'_>, sql: &str) -> Result<()> {
    let meta = new.meta;
    let meta_json = serde_json::to_string(meta)?;
    tx.prepare_cached(sql)?.execute(params![
        meta.id,
        meta.user_id,
        meta.machine_id,
        meta.agent_runtime.as_str(),
        meta.root_run_id,
        meta.parent_run_id,
        meta.conversation_id,
        meta.source_identity,
        to_i64(meta.from_offset),
        to_i64(meta.to_offset),
        meta.jsonl_sha256,
        meta.chain_sha256,
        new.idempotency_key,
        meta.started_at,
        new.blob_path,
        meta_json,
        format!("|{}|", meta.tags.join("|")),
        new.ancestry,
        meta.conversation,
    ])?;
    super::jobs::enqueue(tx, &meta.id, new.lane, &kith_shared::timestamp::now())?;
    Ok(())
}

/// The transcript a source identity names: what comes before its last
/// `#` (kith's agent sends `path#dev:inode:epoch`, a new epoch for each
/// new chain of the file); `None` for an identity without one.
fn transcript_of(source_identity: &str) -> Option<&str> {
    source_identity.rfind('#').map(|at| &source_identity[..=at])
}

/// Keeps search to the newest capture of each transcript. A chain that
/// starts (offset 0) supersedes every other chain of the same owner's
/// transcript; their runs are indexed again, marked. A run of a chain
/// superseded already is superseded too (a late delta of the old chain).
fn supersede(tx: &rusqlite::Transaction<'_>, meta: &RunMeta) -> Result<()> {
    tx.prepare_cached(
        "UPDATE runs SET superseded = 1 WHERE id = ?1 AND EXISTS (
            SELECT 1 FROM runs o WHERE o.user_id = ?2 AND o.source_identity = ?3
              AND o.superseded = 1)",
    )?
    .execute(params![meta.id, meta.user_id, meta.source_identity])?;
    let Some(transcript) = transcript_of(&meta.source_identity) else {
        return Ok(());
    };
    if meta.from_offset != 0 {
        return Ok(());
    }
    let older: Vec<String> = tx
        .prepare_cached(
            "SELECT id FROM runs WHERE user_id = ?1 AND superseded = 0
               AND source_identity != ?2 AND substr(source_identity, 1, length(?3)) = ?3",
        )?
        .query_map(
            params![meta.user_id, meta.source_identity, transcript],
            |r| r.get(0),
        )?
        .collect::<rusqlite::Result<_>>()?;
    let now = kith_shared::timestamp::now();
    for id in &older {
        tx.prepare_cached("UPDATE runs SET superseded = 1 WHERE id = ?1")?
            .execute([id])?;
        super::jobs::enqueue(tx, id, Lane::Bulk, &now)?;
    }
    if !older.is_empty() {
        tracing::info!(run_id = %meta.id, n_runs = older.len(), "a new chain supersedes older captures of its transcript");
    }
    Ok(())
}

/// The owner and the users a live grant lets read a run, by user id.
fn readers(conn: &Connection, run_id: &str, owner: &str) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT DISTINCT s.grantee FROM runs JOIN shares s ON s.grantor = runs.user_id
         WHERE runs.id = ?1 AND runs.quarantined = 0 AND {GRANT_COVERS_RUN}
         ORDER BY s.grantee"
    ))?;
    let mut out = vec![owner.to_owned()];
    for grantee in stmt.query_map(params![run_id], |r| r.get::<_, String>(0))? {
        out.push(grantee?);
    }
    Ok(out)
}

/// The ancestry string of a run: its parent's ancestry plus itself.
pub fn ancestry_of(parent_ancestry: Option<&str>, run_id: &str) -> String {
    format!("{}{run_id}|", parent_ancestry.unwrap_or("|"))
}

impl Registry {
    /// Any run with this id, whoever owns it (ingest must refuse to reuse it).
    pub fn run_by_id_any_owner(&self, id: &RunId) -> Result<Option<StoredRun>> {
        self.query_runs("WHERE id = ?1", params![id.as_str()])
            .map(|v| v.into_iter().next())
    }

    pub fn run_by_idempotency_key(&self, user: &UserId, key: &str) -> Result<Option<StoredRun>> {
        self.query_runs(
            "WHERE user_id = ?1 AND idempotency_key = ?2",
            params![user.as_str(), key],
        )
        .map(|v| v.into_iter().next())
    }

    /// Runs of one source chain whose byte range overlaps `[from, to)`, or
    /// that start at `from`, in offset order.
    pub fn source_runs_overlapping(
        &self,
        user: &UserId,
        source: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<StoredRun>> {
        self.query_runs(
            "WHERE user_id = ?1 AND source_identity = ?2
               AND ((from_offset < ?4 AND to_offset > ?3) OR from_offset = ?3)
             ORDER BY from_offset",
            params![user.as_str(), source, to_i64(from), to_i64(to)],
        )
    }

    /// The run of a source chain that ends exactly at `offset`.
    pub fn source_run_ending_at(
        &self,
        user: &UserId,
        source: &str,
        offset: u64,
    ) -> Result<Option<StoredRun>> {
        self.query_runs(
            "WHERE user_id = ?1 AND source_identity = ?2 AND to_offset = ?3",
            params![user.as_str(), source, to_i64(offset)],
        )
        .map(|v| v.into_iter().next())
    }

    /// Inserts the run and its indexing job in one transaction, and
    /// applies `supersede`. A run of a machine revoked by then (its delta
    /// was on its way) is quarantined: only its owner reads it.
    pub fn insert_run(&self, new: &NewRun<'_>) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        write_run(&tx, new, &INSERT_RUN)?;
        quarantine_if_revoked(&tx, new.meta)?;
        supersede(&tx, new.meta)?;
        tx.commit()?;
        Ok(())
    }

    /// Makes the run catalog exactly `runs` (read from the blobs by
    /// `reindex`), each with an indexing job, in one transaction. A run the
    /// catalog already holds keeps what its blob does not say: when central
    /// captured it, its quarantine and its idempotency key (a reindex must
    /// not show a quarantined run to others again); its index and vector
    /// state start over. A run it did not hold is quarantined when its
    /// machine is revoked, as if its delta arrived now.
    pub fn replace_runs(&self, runs: &[NewRun<'_>]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM index_jobs", [])?;
        let known: std::collections::HashSet<String> = tx
            .prepare("SELECT id FROM runs")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let kept: std::collections::HashSet<&str> =
            runs.iter().map(|r| r.meta.id.as_str()).collect();
        for id in known.iter().filter(|id| !kept.contains(id.as_str())) {
            tx.execute("DELETE FROM runs WHERE id = ?1", [id])?;
        }
        for new in runs {
            write_run(&tx, new, &REPLACE_RUN)?;
            if !known.contains(&new.meta.id) {
                quarantine_if_revoked(&tx, new.meta)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    pub fn run(&self, viewer: &Viewer, id: &RunId) -> Result<Option<StoredRun>> {
        self.query_runs(
            &format!("WHERE id = ?1 AND {}", readable(2)),
            params![id.as_str(), viewer.user_id().as_str()],
        )
        .map(|v| v.into_iter().next())
    }

    /// `tree_runs` without `readable_by` (see `query_runs_lean`).
    pub fn tree_runs_lean(&self, viewer: &Viewer, root: &str) -> Result<Vec<StoredRun>> {
        self.query_runs_lean(
            &format!(
                "WHERE root_run_id = ?1 AND {} ORDER BY started_at, id",
                readable(2)
            ),
            params![root, viewer.user_id().as_str()],
        )
    }

    /// Every run of one tree the viewer may read, by `started_at`.
    pub fn tree_runs(&self, viewer: &Viewer, root: &str) -> Result<Vec<StoredRun>> {
        self.query_runs(
            &format!(
                "WHERE root_run_id = ?1 AND {} ORDER BY started_at, id",
                readable(2)
            ),
            params![root, viewer.user_id().as_str()],
        )
    }

    /// Roots of the most recently active trees that match `filter`, with
    /// their last activity.
    pub fn forest_roots(
        &self,
        viewer: &Viewer,
        filter: &ForestFilter,
    ) -> Result<Vec<(String, String)>> {
        let mut sql = format!(
            "SELECT root_run_id, MAX(started_at) AS last FROM runs WHERE {}",
            readable(1)
        );
        let mut args: Vec<String> = vec![viewer.user_id().to_string()];
        let mut push = |sql: &mut String, clause: &str, value: String| {
            args.push(value);
            sql.push_str(&clause.replace('?', &format!("?{}", args.len())));
        };
        if let Some(since) = &filter.since {
            push(&mut sql, " AND started_at >= ?", since.clone());
        }
        if let Some(rt) = filter.runtime {
            push(&mut sql, " AND agent_runtime = ?", rt.as_str().to_owned());
        }
        if let Some(m) = &filter.machine {
            push(
                &mut sql,
                " AND machine_id IN (SELECT id FROM machines WHERE name = ?)",
                m.clone(),
            );
        }
        if let Some(root) = &filter.root {
            push(&mut sql, " AND root_run_id = ?", root.to_string());
        }
        sql.push_str(&format!(
            " GROUP BY root_run_id ORDER BY last DESC LIMIT {}",
            filter.limit
        ));
        let conn = self.reader();
        let mut stmt = conn.prepare(&sql)?;
        let rows = stmt
            .query_map(rusqlite::params_from_iter(args.iter()), |r| {
                Ok((r.get(0)?, r.get(1)?))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// `clause` is one of a few fixed strings (values go in `args`), so
    /// the prepared statements stay cached: preparing the readability
    /// clause cost more than running it (a search re-checks every hit's run).
    pub(super) fn query_runs(
        &self,
        clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<StoredRun>> {
        self.query(clause, args, true)
    }

    /// `query_runs` without each run's `readable_by` (left as stored: the
    /// owner), for reads that fold facts or read bytes: it costs a query a
    /// run, and a long conversation has hundreds.
    pub(super) fn query_runs_lean(
        &self,
        clause: &str,
        args: impl rusqlite::Params,
    ) -> Result<Vec<StoredRun>> {
        self.query(clause, args, false)
    }

    fn query(
        &self,
        clause: &str,
        args: impl rusqlite::Params,
        with_readers: bool,
    ) -> Result<Vec<StoredRun>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT meta_json, indexed_at, embedded_at, blob_path, idempotency_key, ancestry,
                    quarantined, captured_at
             FROM runs {clause}"
        ))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok((
                    (
                        r.get::<_, String>(0)?,
                        r.get::<_, Option<String>>(1)?,
                        r.get::<_, Option<String>>(2)?,
                    ),
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, String>(5)?,
                    r.get::<_, bool>(6)?,
                    r.get::<_, String>(7)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        drop(stmt);
        rows.into_iter()
            .map(
                |(
                    (meta_json, indexed_at, embedded_at),
                    blob_path,
                    idempotency_key,
                    ancestry,
                    quarantined,
                    captured_at,
                )| {
                    let mut meta: RunMeta = serde_json::from_str(&meta_json)?;
                    meta.indexed_at = indexed_at;
                    meta.embedded_at = embedded_at;
                    if with_readers {
                        meta.readable_by = readers(&conn, &meta.id, &meta.user_id)?;
                    }
                    Ok(StoredRun {
                        meta,
                        blob_path,
                        idempotency_key,
                        ancestry,
                        quarantined,
                        captured_ms: epoch_ms_or(&captured_at, 0),
                    })
                },
            )
            .collect()
    }
}
