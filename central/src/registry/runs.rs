//! The `runs` table: the run catalog (derived from the blobs; `reindex`
//! rebuilds it), read only through the privacy rule (`Sql::readable_by`,
//! `Sql::owned_by`) or with an `Operator`.

use std::collections::HashMap;
use std::sync::LazyLock;

use kith_proto::AgentRuntime;
use kith_shared::ids::{RunId, UserId};
use rusqlite::params;

use super::{epoch_ms_or, to_i64, ConversationUsage, Lane, Registry, Sql, Viewer};
use crate::error::Result;
use crate::privacy::{Grant, Operator, Readability, RunFacts};
use crate::run::{Run, Shown};
use crate::store::RunRecord;

/// A stored run, and what the registry knows of it beyond its record.
#[derive(Debug, Clone)]
pub struct StoredRun {
    pub run: Run,
    /// The owner and every live grantee, as of the read (the owner alone
    /// in a lean read: `query_runs_lean`).
    pub readable_by: Vec<String>,
    pub indexed_at: Option<String>,
    pub embedded_at: Option<String>,
    pub ancestry: String,
    /// Blob path relative to the data directory.
    pub blob_path: String,
    pub idempotency_key: Option<String>,
    /// Readable by its owner alone.
    pub quarantined: bool,
    /// When central stored it, in milliseconds since the epoch.
    pub captured_ms: i64,
}

impl StoredRun {
    /// The run as the API shows it.
    pub fn to_wire(&self) -> kith_proto::RunMeta {
        self.run.to_wire(Shown {
            readable_by: self.readable_by.clone(),
            indexed_at: self.indexed_at.clone(),
            embedded_at: self.embedded_at.clone(),
        })
    }
}

/// A run to insert, with the durable indexing job that goes with it.
pub struct NewRun<'a> {
    pub run: &'a Run,
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
            indexed_at = NULL, embedded_at = NULL, embedded_model = NULL, chunks_digest = NULL,
            chunks_cut = 0",
        *INSERT_RUN,
        from_blob.join(", ")
    )
});

/// Quarantines a run new to the catalog whose machine is revoked (its
/// delta was on its way): only its owner reads it.
fn quarantine_if_revoked(tx: &rusqlite::Transaction<'_>, meta: &Run) -> Result<()> {
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
    let meta = new.run;
    let meta_json = RunRecord::catalog_json(meta)?;
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
pub fn transcript_of(source_identity: &str) -> Option<&str> {
    source_identity.rfind('#').map(|at| &source_identity[..=at])
}

/// Keeps search to the newest capture of each transcript. A chain that
/// starts (offset 0) supersedes every other chain of the same owner's
/// transcript; their runs are indexed again, marked. A run of a chain
/// superseded already is superseded too (a late delta of the old chain).
fn supersede(tx: &rusqlite::Transaction<'_>, meta: &Run) -> Result<()> {
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

/// The owner and the users a live grant of the owner lets read the run
/// (`grants`: the owner's, with their grantees), by user id.
fn readers(run: &RunFacts<'_>, grants: &[(String, Grant)]) -> Vec<String> {
    let mut grantees: Vec<&str> = grants.iter().map(|(g, _)| g.as_str()).collect();
    grantees.sort_unstable();
    grantees.dedup();
    let mut out = vec![run.owner.to_owned()];
    for grantee in grantees {
        let Ok(id) = UserId::parse(grantee) else {
            continue;
        };
        let held = grants
            .iter()
            .filter(|(g, _)| g == grantee)
            .map(|(_, grant)| grant.clone())
            .collect();
        if Readability::new(id, held).rule().admits(run) {
            out.push(grantee.to_owned());
        }
    }
    out
}

/// The ancestry string of a run: its parent's ancestry plus itself.
pub fn ancestry_of(parent_ancestry: Option<&str>, run_id: &str) -> String {
    format!("{}{run_id}|", parent_ancestry.unwrap_or("|"))
}

impl Registry {
    /// Any run with this id, whoever owns it (a reindex adopting a blob).
    pub fn run_by_id_any_owner(&self, _: &Operator, id: &RunId) -> Result<Option<StoredRun>> {
        let mut sql = Sql::new("WHERE id = ");
        sql.bind(id.to_string());
        self.query_runs(&sql).map(|v| v.into_iter().next())
    }

    /// Every run of one owner's source chain, in offset order (the indexer
    /// reads a chain whole).
    pub fn chain_runs(&self, _: &Operator, owner: &UserId, source: &str) -> Result<Vec<StoredRun>> {
        let mut sql = Sql::new("WHERE user_id = ");
        sql.bind(owner.to_string())
            .and("source_identity = ?1", source.to_owned())
            .push(" ORDER BY from_offset");
        self.query_runs(&sql)
    }

    /// One of the viewer's own runs, by id.
    pub fn owned_run(&self, viewer: &Viewer, id: &RunId) -> Result<Option<StoredRun>> {
        let mut sql = Sql::new("WHERE id = ");
        sql.bind(id.to_string()).push(" AND ").owned_by(viewer);
        self.query_runs(&sql).map(|v| v.into_iter().next())
    }

    /// The viewer's run sent with this `Idempotency-Key`.
    pub fn run_by_idempotency_key(&self, viewer: &Viewer, key: &str) -> Result<Option<StoredRun>> {
        let mut sql = Sql::new("WHERE idempotency_key = ");
        sql.bind(key.to_owned()).push(" AND ").owned_by(viewer);
        self.query_runs(&sql).map(|v| v.into_iter().next())
    }

    /// The viewer's own runs of one conversation, in byte order (a format
    /// whose deltas read only together: `crate::usage`).
    pub fn owned_conversation_runs(
        &self,
        viewer: &Viewer,
        conversation: &str,
    ) -> Result<Vec<StoredRun>> {
        let mut sql = Sql::new("WHERE conversation = ");
        sql.bind(conversation.to_owned())
            .push(" AND ")
            .owned_by(viewer)
            .push(" ORDER BY from_offset");
        self.query_runs_lean(&sql)
    }

    /// The viewer's runs of one source chain whose byte range overlaps
    /// `[from, to)`, or that start at `from`, in offset order.
    pub fn source_runs_overlapping(
        &self,
        viewer: &Viewer,
        source: &str,
        from: u64,
        to: u64,
    ) -> Result<Vec<StoredRun>> {
        let mut sql = Sql::new("WHERE ");
        sql.owned_by(viewer)
            .and("source_identity = ?1", source.to_owned())
            .push(" AND ((from_offset < ")
            .bind(to_i64(to))
            .push(" AND to_offset > ")
            .bind(to_i64(from))
            .push(") OR from_offset = ")
            .bind(to_i64(from))
            .push(") ORDER BY from_offset");
        self.query_runs(&sql)
    }

    /// The viewer's run of a source chain that ends exactly at `offset`.
    pub fn source_run_ending_at(
        &self,
        viewer: &Viewer,
        source: &str,
        offset: u64,
    ) -> Result<Option<StoredRun>> {
        let mut sql = Sql::new("WHERE ");
        sql.owned_by(viewer)
            .and("source_identity = ?1", source.to_owned())
            .and("to_offset = ?1", to_i64(offset));
        self.query_runs(&sql).map(|v| v.into_iter().next())
    }

    /// Inserts the run and its indexing job in one transaction, notes its
    /// delta's usage as not counted yet (`crate::usage::settle` counts it),
    /// and applies `supersede`. A run of a machine revoked by then (its
    /// delta was on its way) is quarantined: only its owner reads it.
    pub fn insert_run(&self, new: &NewRun<'_>) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        write_run(&tx, new, &INSERT_RUN)?;
        quarantine_if_revoked(&tx, new.run)?;
        supersede(&tx, new.run)?;
        if new.run.conversation.is_some() {
            super::usage::pend(&tx, &new.run.id)?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Makes the run catalog exactly `runs` (read from the blobs by
    /// `reindex`), each with an indexing job, and the usage tables exactly
    /// `usage` (each conversation's, folded from its runs), in one
    /// transaction. A run the
    /// catalog already holds keeps what its blob does not say: when central
    /// captured it, its quarantine and its idempotency key (a reindex must
    /// not show a quarantined run to others again); its index and vector
    /// state start over. A run it did not hold is quarantined when its
    /// machine is revoked, as if its delta arrived now.
    pub fn replace_runs(&self, runs: &[NewRun<'_>], usage: &[&ConversationUsage]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM index_jobs", [])?;
        super::usage::clear(&tx)?;
        let known: std::collections::HashSet<String> = tx
            .prepare("SELECT id FROM runs")?
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let kept: std::collections::HashSet<&str> =
            runs.iter().map(|r| r.run.id.as_str()).collect();
        for id in known.iter().filter(|id| !kept.contains(id.as_str())) {
            tx.execute("DELETE FROM runs WHERE id = ?1", [id])?;
        }
        for new in runs {
            write_run(&tx, new, &REPLACE_RUN)?;
            if !known.contains(&new.run.id) {
                quarantine_if_revoked(&tx, new.run)?;
            }
        }
        // Every fact is new: counted and summed once, all together, not
        // by what each write touched.
        for u in usage {
            super::usage::write(&tx, u, &mut super::usage_hours::Touched::default())?;
        }
        super::usage_hours::rebuild(&tx)?;
        tx.commit()?;
        Ok(())
    }

    pub fn run(&self, viewer: &Viewer, id: &RunId) -> Result<Option<StoredRun>> {
        let mut sql = Sql::new("WHERE id = ");
        sql.bind(id.to_string()).push(" AND ").readable_by(viewer);
        self.query_runs(&sql).map(|v| v.into_iter().next())
    }

    /// `tree_runs` without `readable_by` (see `query_runs_lean`).
    pub fn tree_runs_lean(&self, viewer: &Viewer, root: &str) -> Result<Vec<StoredRun>> {
        self.query_runs_lean(&Self::tree_sql(viewer, root))
    }

    /// Every run of one tree the viewer may read, by `started_at`.
    pub fn tree_runs(&self, viewer: &Viewer, root: &str) -> Result<Vec<StoredRun>> {
        self.query_runs(&Self::tree_sql(viewer, root))
    }

    fn tree_sql(viewer: &Viewer, root: &str) -> Sql {
        let mut sql = Sql::new("WHERE root_run_id = ");
        sql.bind(root.to_owned())
            .push(" AND ")
            .readable_by(viewer)
            .push(" ORDER BY started_at, id");
        sql
    }

    /// Roots of the most recently active trees that match `filter`, with
    /// their last activity.
    pub fn forest_roots(
        &self,
        viewer: &Viewer,
        filter: &ForestFilter,
    ) -> Result<Vec<(String, String)>> {
        let mut sql = Sql::readable_runs(
            "SELECT root_run_id, MAX(started_at) AS last FROM runs",
            viewer,
        );
        if let Some(since) = &filter.since {
            sql.and("started_at >= ?1", since.clone());
        }
        if let Some(rt) = filter.runtime {
            sql.and("agent_runtime = ?1", rt.as_str().to_owned());
        }
        if let Some(m) = &filter.machine {
            sql.and(
                "machine_id IN (SELECT id FROM machines WHERE name = ?1)",
                m.clone(),
            );
        }
        if let Some(root) = &filter.root {
            sql.and("root_run_id = ?1", root.to_string());
        }
        sql.push(&format!(
            " GROUP BY root_run_id ORDER BY last DESC LIMIT {}",
            filter.limit
        ));
        let conn = self.reader();
        let mut stmt = conn.prepare(sql.text())?;
        let rows = stmt
            .query_map(sql.params(), |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// The runs `sql` (a `WHERE` clause and what follows) selects, each
    /// with `readable_by` as of now.
    pub(super) fn query_runs(&self, sql: &Sql) -> Result<Vec<StoredRun>> {
        self.query(sql, true)
    }

    /// `query_runs` without each run's `readable_by` (left as stored: the
    /// owner), for reads that fold facts or read bytes: it costs a query an
    /// owner, and a long conversation has hundreds of runs.
    pub(super) fn query_runs_lean(&self, sql: &Sql) -> Result<Vec<StoredRun>> {
        self.query(sql, false)
    }

    fn query(&self, sql: &Sql, with_readers: bool) -> Result<Vec<StoredRun>> {
        let rows = {
            let conn = self.reader();
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT meta_json, indexed_at, embedded_at, blob_path, idempotency_key, ancestry,
                        quarantined, captured_at
                 FROM runs {}",
                sql.text()
            ))?;
            let rows = stmt
                .query_map(sql.params(), |r| {
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
            rows
        };
        let mut grants_of: HashMap<String, Vec<(String, Grant)>> = HashMap::new();
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
                    let run = RunRecord::read(meta_json.as_bytes())?.run;
                    let readable_by = if with_readers {
                        if !grants_of.contains_key(&run.user_id) {
                            let grants = self.grants_from(&run.user_id)?;
                            grants_of.insert(run.user_id.clone(), grants);
                        }
                        let facts = RunFacts {
                            owner: &run.user_id,
                            ancestry: &ancestry,
                            tags: &run.tags,
                            quarantined,
                            captured_at: &captured_at,
                        };
                        readers(&facts, &grants_of[&run.user_id])
                    } else {
                        vec![run.user_id.clone()]
                    };
                    Ok(StoredRun {
                        run,
                        readable_by,
                        indexed_at,
                        embedded_at,
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

/// What a transcript whose later records rewrite earlier ones (Gemini CLI,
/// OpenCode) says once its chain is read whole: each run's live turns (not
/// every version of an edited message) and the head run's title and intent
/// (its first prompt as last edited). The catalog carries them; each run's
/// record keeps what its delta alone said, and indexing the chain again
/// sets them again.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LiveFacts {
    /// The chain's first run (from byte 0), when it is there.
    pub head: Option<String>,
    pub title: Option<String>,
    pub intent: Option<String>,
    /// (run id, live turns)
    pub turn_counts: Vec<(String, u64)>,
}

impl Registry {
    /// Writes a chain's live facts into its runs' catalog entries.
    pub fn set_live_facts(&self, live: &LiveFacts) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (run, turns) in &live.turn_counts {
            tx.prepare_cached(
                "UPDATE runs SET meta_json = json_set(meta_json, '$.turn_count', ?2) WHERE id = ?1",
            )?
            .execute(params![run, to_i64(*turns)])?;
        }
        if let Some(head) = &live.head {
            tx.prepare_cached(
                "UPDATE runs SET meta_json = json_set(meta_json, '$.title', ?2, '$.intent', ?3)
                 WHERE id = ?1",
            )?
            .execute(params![head, live.title, live.intent])?;
        }
        tx.commit()?;
        Ok(())
    }
}
