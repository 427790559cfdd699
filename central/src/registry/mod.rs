//! The SQLite registry in `<data>/registry.sqlite`: users and machines (the
//! identity of record), and the run catalog, usage facts and indexing jobs
//! (derived from the blob store; `reindex` rebuilds them). `file` reads a
//! registry file whole without changing it (a backup's copy, or the live
//! one).
//!
//! Every method is synchronous and holds the connection lock only for its own
//! statements; async callers run them on the blocking pool. Reads of runs take
//! a `&Viewer` and filter in SQL by its `privacy::Rule` (`Sql::readable_by`);
//! the few that must see every member's runs take a `privacy::Operator`.

use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use kith_shared::ids::UserId;
use rusqlite::types::Value;
use rusqlite::{params, Connection};

use crate::error::{Error, Result};
use crate::privacy::{Operator, Rule};

mod backups;
mod conversations;
mod file;
mod forgotten;
mod jobs;
mod machines;
mod resumes;
mod runs;
mod sessions;
mod shares;
mod tags;
mod usage;
mod usage_hours;
mod users;
mod values;
mod viewer;

pub use backups::BackupRow;
pub use conversations::{ConversationFilter, Facets, MAX_FILTER_BYTES};
pub use file::{copy_into, CatalogRun, RegistryFile, TombstoneRecord, TombstoneRow};
pub use forgotten::{line_hashes, ForgetSet, Forgetter, Tombstone};
pub use jobs::{Indexed, Lane, PendingJob};
pub use machines::{MachineAuth, MachineRow};
pub use resumes::{NewResume, Resume};
pub use runs::{ancestry_of, transcript_of, ForestFilter, LiveFacts, NewRun, StoredRun};
pub use sessions::{SignedIn, SESSION_MAX_DAYS};
pub use shares::{AuditFilter, AuditRow, Revoked, ShareRow};
pub use usage::{
    ConversationUsage, CountedUsage, PendingUsage, SettledUsage, UsageFilter, UsageRow, Work,
};
pub use usage_hours::Figures;
pub use users::UserRow;
pub use values::FilterValues;
pub use viewer::Viewer;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS users (
    id TEXT PRIMARY KEY,
    handle TEXT NOT NULL UNIQUE,
    did TEXT,
    pds_url TEXT,
    is_admin INTEGER NOT NULL DEFAULT 0,
    created_at TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS machines (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    name TEXT NOT NULL,
    app_password_name TEXT,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at TEXT NOT NULL,
    last_seen_at TEXT,
    revoked_at TEXT,
    UNIQUE (user_id, name)
);
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    machine_id TEXT NOT NULL,
    agent_runtime TEXT NOT NULL,
    root_run_id TEXT NOT NULL,
    parent_run_id TEXT,
    -- The agent's session id (`RunMeta::conversation_id`).
    conversation_id TEXT,
    source_identity TEXT NOT NULL,
    from_offset INTEGER NOT NULL,
    to_offset INTEGER NOT NULL,
    jsonl_sha256 TEXT NOT NULL,
    chain_sha256 TEXT NOT NULL,
    idempotency_key TEXT,
    started_at TEXT NOT NULL,
    blob_path TEXT NOT NULL,
    meta_json TEXT NOT NULL,
    -- `|t1|t2|` and `|root|...|parent|self|`: grant scopes match with instr().
    tags_key TEXT NOT NULL DEFAULT '|',
    ancestry TEXT NOT NULL DEFAULT '|',
    -- Hidden from everyone but the owner (machine revoked with --quarantine-since).
    quarantined INTEGER NOT NULL DEFAULT 0,
    captured_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
    indexed_at TEXT,
    embedded_at TEXT,
    -- The embedding model of this run's vectors; differs from the current
    -- model (or is NULL) while the run waits for (re-)embedding.
    embedded_model TEXT,
    -- The conversation (`conversation::ConversationId`) the run belongs to.
    conversation TEXT,
    -- Chunks the index holds of the run, once indexed (`/api/status`).
    n_chunks INTEGER,
    -- A later chain of the same transcript replaced this run's chain (a
    -- rewrite or truncation captured again): left out of search by default.
    superseded INTEGER NOT NULL DEFAULT 0,
    -- sha256 of the chunks a re-indexed chain last gave this run
    -- (`indexer::worker::index_chain`): unchanged, the run is not indexed again.
    chunks_digest TEXT,
    -- Chunks past `indexer::cap::MAX_CHUNKS_PER_RUN` left out of the index when
    -- the run was last indexed (its blob keeps every byte).
    chunks_cut INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS runs_source ON runs (user_id, source_identity, from_offset);
CREATE INDEX IF NOT EXISTS runs_root ON runs (root_run_id, started_at);
CREATE INDEX IF NOT EXISTS runs_user_started ON runs (user_id, started_at);
CREATE UNIQUE INDEX IF NOT EXISTS runs_idempotency ON runs (user_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS shares (
    id TEXT PRIMARY KEY,
    grantor TEXT NOT NULL REFERENCES users(id),
    grantee TEXT NOT NULL REFERENCES users(id),
    scope_kind TEXT NOT NULL CHECK (scope_kind IN ('run', 'tag')),
    scope_value TEXT NOT NULL,
    created_at TEXT NOT NULL,
    expires_at TEXT,
    revoked_at TEXT,
    -- A run grant covers later deltas too (else: those captured by created_at).
    follow INTEGER NOT NULL DEFAULT 1
);
CREATE INDEX IF NOT EXISTS shares_grantee ON shares (grantee);
CREATE TABLE IF NOT EXISTS audit (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    owner TEXT NOT NULL,
    reader TEXT NOT NULL,
    run_id TEXT NOT NULL,
    what TEXT NOT NULL,
    at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS audit_owner ON audit (owner, at);
CREATE TABLE IF NOT EXISTS forgotten (
    run_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    source_identity TEXT NOT NULL,
    from_offset INTEGER NOT NULL,
    to_offset INTEGER NOT NULL,
    chain_sha256 TEXT NOT NULL,
    conversation TEXT,
    forgotten_at TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS forgotten_source ON forgotten (user_id, source_identity, to_offset);
-- sha256 of each line of a forgotten run: a resend under any chain is known.
CREATE TABLE IF NOT EXISTS forgotten_lines (
    user_id TEXT NOT NULL,
    line_sha256 TEXT NOT NULL,
    run_id TEXT NOT NULL,
    PRIMARY KEY (user_id, line_sha256)
) WITHOUT ROWID;
-- Web sign-ins: only the sha256 of a session's cookie value is kept.
-- A session made with a machine's link (`kith web`) names the machine: it
-- ends when the machine is revoked.
CREATE TABLE IF NOT EXISTS web_sessions (
    id_sha256 TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    created_at TEXT NOT NULL,
    last_seen_at TEXT NOT NULL,
    machine_id TEXT
);
CREATE INDEX IF NOT EXISTS web_sessions_user ON web_sessions (user_id);
-- One-time sign-in links (`kith web`): sha256 of the token, used once.
CREATE TABLE IF NOT EXISTS web_links (
    token_sha256 TEXT PRIMARY KEY,
    user_id TEXT NOT NULL REFERENCES users(id),
    expires_at TEXT NOT NULL,
    used_at TEXT,
    machine_id TEXT
);
CREATE TABLE IF NOT EXISTS index_jobs (
    run_id TEXT PRIMARY KEY,
    lane TEXT NOT NULL,
    enqueued_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT,
    version INTEGER NOT NULL DEFAULT 0,
    -- The run's owner: members take turns (`Registry::pending_jobs_below`).
    user_id TEXT
);
";

#[derive(Debug, Clone, Copy, Default)]
pub struct RegistryCounts {
    pub users: u64,
    pub machines: u64,
    pub runs: u64,
    pub pending_jobs: u64,
    pub realtime_jobs: u64,
    pub bulk_jobs: u64,
}

/// A user's (or the family's) share of what central holds.
pub struct Holdings {
    pub machines: u64,
    pub runs: u64,
    pub chunks: u64,
    pub chunks_embedded: u64,
    /// Runs waiting for the indexer, by lane.
    pub realtime_jobs: u64,
    pub bulk_jobs: u64,
    pub last_indexed_at: Option<String>,
    /// Runs too long to index whole (`indexer::cap::MAX_CHUNKS_PER_RUN`), and
    /// the chunks left out of them.
    pub runs_capped: u64,
    pub chunks_cut: u64,
}

/// Two connections to one SQLite file in WAL mode: writes go one at a time
/// through `conn`, each commit synced to disk (`synchronous = FULL`: a 202
/// is a promise); reads go through `reader`, which sees the last commit and
/// never waits for a writer's sync (a search re-checks its hits' runs, and
/// every request authenticates, while ingest, indexing and embedding
/// commit).
pub struct Registry {
    conn: Mutex<Connection>,
    reader: Mutex<Connection>,
}

impl Registry {
    pub fn open(path: &Path) -> Result<Self> {
        let conn = Connection::open(path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.pragma_update(None, "foreign_keys", "ON")?;
        // What is deleted (a forgotten conversation's title and prompt) is
        // overwritten, not left in free pages.
        conn.pragma_update(None, "secure_delete", "ON")?;
        conn.execute_batch(SCHEMA)?;
        conn.execute_batch(backups::SCHEMA)?;
        conn.execute_batch(usage::SCHEMA)?;
        conn.execute_batch(usage_hours::SCHEMA)?;
        conn.execute_batch(resumes::SCHEMA)?;
        migrate(&conn)?;
        let reader = Connection::open(path)?;
        reader.pragma_update(None, "query_only", "ON")?;
        for c in [&conn, &reader] {
            c.busy_timeout(std::time::Duration::from_secs(5))?;
            // Every request authenticates and most read runs: their
            // statements stay prepared (parsing cost more than running),
            // every one central runs, so that none is prepared again after
            // others pushed it out.
            c.set_prepared_statement_cache_capacity(256);
        }
        // Up to 32 MiB of pages for the writer (SQLite's default is 2 MiB):
        // the indexes each delta's run and usage facts go into stay in
        // memory. The reader keeps the default: its cache is emptied
        // whenever a write committed since its last read, at a cost that
        // grows with the pages it holds.
        conn.pragma_update(None, "cache_size", -32_768)?;
        let registry = Self {
            conn: Mutex::new(conn),
            reader: Mutex::new(reader),
        };
        registry.backfill_conversations()?;
        Ok(registry)
    }

    /// The connection for writes (and reads that must see a transaction's
    /// own writes).
    fn conn(&self) -> MutexGuard<'_, Connection> {
        crate::sync::lock(&self.conn)
    }

    /// The connection for reads.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        crate::sync::lock(&self.reader)
    }

    pub fn counts(&self) -> Result<RegistryCounts> {
        let conn = self.reader();
        let one = |sql: &str| {
            conn.prepare_cached(sql)?
                .query_row([], |r| r.get::<_, i64>(0))
                .map(|n| n.max(0) as u64)
        };
        Ok(RegistryCounts {
            users: one("SELECT COUNT(*) FROM users")?,
            machines: one("SELECT COUNT(*) FROM machines WHERE revoked_at IS NULL")?,
            runs: one("SELECT COUNT(*) FROM runs")?,
            pending_jobs: one("SELECT COUNT(*) FROM index_jobs")?,
            realtime_jobs: one("SELECT COUNT(*) FROM index_jobs WHERE lane = 'ingest-realtime'")?,
            bulk_jobs: one("SELECT COUNT(*) FROM index_jobs WHERE lane = 'ingest-bulk'")?,
        })
    }

    /// What `user` holds (the whole family's with `None`): machines, runs,
    /// indexed chunks, chunks with vectors of `model`, runs waiting for the
    /// indexer by lane, and when one of them was last indexed.
    /// The bytes of every transcript central keeps, as captured.
    pub fn archive_bytes(&self) -> Result<u64> {
        let total: i64 = self.reader().query_row(
            "SELECT COALESCE(SUM(json_extract(meta_json, '$.jsonl_bytes')), 0) FROM runs",
            [],
            |r| r.get(0),
        )?;
        Ok(total.max(0) as u64)
    }

    pub fn holdings(&self, user: Option<&UserId>, model: Option<&str>) -> Result<Holdings> {
        let user = user.map(UserId::as_str);
        let conn = self.reader();
        let n = |v: i64| v.max(0) as u64;
        let (runs, chunks, chunks_embedded, last_indexed_at, runs_capped, chunks_cut) = conn
            .prepare_cached(
                "SELECT COUNT(*), COALESCE(SUM(n_chunks), 0),
                        COALESCE(SUM(CASE WHEN embedded_model = ?2 THEN n_chunks END), 0),
                        MAX(indexed_at), COALESCE(SUM(chunks_cut > 0), 0),
                        COALESCE(SUM(chunks_cut), 0)
                 FROM runs WHERE ?1 IS NULL OR user_id = ?1",
            )?
            .query_row(params![user, model], |r| {
                Ok((
                    n(r.get(0)?),
                    n(r.get(1)?),
                    n(r.get(2)?),
                    r.get(3)?,
                    n(r.get(4)?),
                    n(r.get(5)?),
                ))
            })?;
        let machines = conn
            .prepare_cached(
                "SELECT COUNT(*) FROM machines WHERE revoked_at IS NULL AND (?1 IS NULL OR user_id = ?1)",
            )?
            .query_row(params![user], |r| r.get(0).map(n))?;
        let (realtime_jobs, bulk_jobs) = conn
            .prepare_cached(
                "SELECT COALESCE(SUM(j.lane = 'ingest-realtime'), 0),
                        COALESCE(SUM(j.lane = 'ingest-bulk'), 0)
                 FROM index_jobs j JOIN runs ON runs.id = j.run_id
                 WHERE ?1 IS NULL OR runs.user_id = ?1",
            )?
            .query_row(params![user], |r| Ok((n(r.get(0)?), n(r.get(1)?))))?;
        Ok(Holdings {
            machines,
            runs,
            chunks,
            chunks_embedded,
            realtime_jobs,
            bulk_jobs,
            last_indexed_at,
            runs_capped,
            chunks_cut,
        })
    }

    pub fn last_indexed_at(&self) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row("SELECT MAX(indexed_at) FROM runs", [], |r| r.get(0))?)
    }

    /// Every run's id and blob path, for `doctor`.
    pub fn all_blob_paths(&self, _: &Operator) -> Result<Vec<(String, String)>> {
        let conn = self.reader();
        let mut stmt = conn.prepare("SELECT id, blob_path FROM runs ORDER BY id")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

/// Brings a registry made by an older kith to this schema: columns added
/// since (with the value older rows take), and their indexes (created here,
/// after the columns exist).
fn migrate(conn: &Connection) -> Result<()> {
    const ADDED: &[(&str, &str, &str)] = &[
        ("runs", "conversation", "TEXT"),
        // Counted from the next `reindex`; until then those runs count 0.
        ("runs", "n_chunks", "INTEGER"),
        ("runs", "superseded", "INTEGER NOT NULL DEFAULT 0"),
        // Unknown: the next indexing of the chain puts the run again.
        ("runs", "chunks_digest", "TEXT"),
        // Counted from the run's next indexing; until then none cut.
        ("runs", "chunks_cut", "INTEGER NOT NULL DEFAULT 0"),
        // Grants given before snapshots existed kept following their runs.
        ("shares", "follow", "INTEGER NOT NULL DEFAULT 1"),
        // Sessions and links made before kept no machine: they end as a
        // password sign-in's do.
        ("web_sessions", "machine_id", "TEXT"),
        ("web_links", "machine_id", "TEXT"),
        ("index_jobs", "version", "INTEGER NOT NULL DEFAULT 0"),
        // Filled in below from the jobs' runs.
        ("index_jobs", "user_id", "TEXT"),
        // None kept: the next delta of such a conversation reads its
        // earlier deltas once, as before.
        ("usage_folds", "carry", "BLOB"),
        // None kept: a delta with running totals reads its conversation's
        // last one from its facts.
        ("usage_folds", "running", "BLOB"),
        // Counted and priced again at the next start, when central finds
        // no price table recorded (`Registry::keep_priced`).
        ("usage", "counted", "INTEGER NOT NULL DEFAULT 1"),
        ("usage", "price_usd", "REAL"),
    ];
    for (table, column, decl) in ADDED {
        let present: bool = conn.query_row(
            "SELECT COUNT(*) FROM pragma_table_info(?1) WHERE name = ?2",
            [table, column],
            |r| r.get::<_, i64>(0).map(|n| n > 0),
        )?;
        if !present {
            conn.execute(
                &format!("ALTER TABLE {table} ADD COLUMN {column} {decl}"),
                [],
            )?;
        }
    }
    conn.execute(
        "CREATE INDEX IF NOT EXISTS runs_conversation ON runs (conversation, started_at)",
        [],
    )?;
    conn.execute(
        "CREATE INDEX IF NOT EXISTS index_jobs_turns
         ON index_jobs (user_id, lane, enqueued_at, run_id)",
        [],
    )?;
    conn.execute(
        "UPDATE index_jobs SET user_id = (SELECT user_id FROM runs WHERE runs.id = index_jobs.run_id)
         WHERE user_id IS NULL",
        [],
    )?;
    Ok(())
}

/// A statement under construction: its text, and the values it binds,
/// numbered `?1`, `?2`, ... in the order they were bound. Reads of runs
/// put the privacy rule in it with `readable_by` (or `owned_by`); its text
/// depends only on the shape of the viewer's grants, so statements stay
/// prepared across requests (preparing cost more than running).
pub(super) struct Sql {
    text: String,
    args: Vec<Value>,
}

impl Sql {
    pub(super) fn new(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            args: Vec::new(),
        }
    }

    /// `SELECT ... FROM runs WHERE <what the viewer may read>`.
    pub(super) fn readable_runs(select: &str, viewer: &Viewer) -> Self {
        let mut sql = Self::new(select);
        sql.push(" WHERE ");
        sql.readable_by(viewer);
        sql
    }

    pub(super) fn push(&mut self, text: &str) -> &mut Self {
        self.text.push_str(text);
        self
    }

    /// Binds `value` and writes its `?n`.
    pub(super) fn bind(&mut self, value: impl Into<Value>) -> &mut Self {
        self.args.push(value.into());
        let n = self.args.len();
        self.text.push_str(&format!("?{n}"));
        self
    }

    /// ` AND clause`, where `?1` in `clause` stands for `value`.
    pub(super) fn and(&mut self, clause: &str, value: impl Into<Value>) -> &mut Self {
        self.args.push(value.into());
        let n = self.args.len();
        self.text.push_str(" AND ");
        self.text.push_str(&clause.replace("?1", &format!("?{n}")));
        self
    }

    /// What `viewer` may read (`privacy::Rule`), over the `runs` table.
    pub(super) fn readable_by(&mut self, viewer: &Viewer) -> &mut Self {
        self.rule(&viewer.readability().rule())
    }

    /// What `viewer` owns, over the `runs` table.
    pub(super) fn owned_by(&mut self, viewer: &Viewer) -> &mut Self {
        self.rule(&viewer.readability().owned())
    }

    pub(super) fn rule(&mut self, rule: &Rule) -> &mut Self {
        match rule {
            Rule::Any(rules) => self.join(rules, " OR "),
            Rule::All(rules) => self.join(rules, " AND "),
            Rule::Owner(user) => self.push("runs.user_id = ").bind(user.clone()),
            Rule::InSubtree(run) => self
                .push("instr(runs.ancestry, ")
                .bind(format!("|{run}|"))
                .push(") > 0"),
            Rule::Tagged(tag) => self
                .push("instr(runs.tags_key, ")
                .bind(format!("|{tag}|"))
                .push(") > 0"),
            Rule::NotQuarantined => self.push("runs.quarantined = 0"),
            Rule::CapturedBy(at) => self.push("runs.captured_at <= ").bind(at.clone()),
        }
    }

    fn join(&mut self, rules: &[Rule], op: &str) -> &mut Self {
        self.push("(");
        for (i, rule) in rules.iter().enumerate() {
            if i > 0 {
                self.push(op);
            }
            self.rule(rule);
        }
        self.push(")")
    }

    pub(super) fn text(&self) -> &str {
        &self.text
    }

    pub(super) fn params(&self) -> impl rusqlite::Params + '_ {
        rusqlite::params_from_iter(self.args.iter())
    }
}

/// Now, in kith's canonical timestamp form, computed by SQLite.
const NOW_SQL: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

fn parse_id<T>(r: std::result::Result<T, kith_shared::ids::IdError>) -> Result<T> {
    r.map_err(|e| Error::Internal(format!("registry holds an {e}")))
}

/// A timestamp the registry wrote, in milliseconds since the epoch, for the
/// index's filter (which may admit more than `readable`, never less): a
/// time that does not parse reads as `or`.
fn epoch_ms_or(at: &str, or: i64) -> i64 {
    kith_shared::timestamp::parse(at).map_or(or, kith_shared::timestamp::epoch_ms)
}

/// SQLite integers are i64; offsets beyond i64::MAX cannot occur (files are
/// far smaller), so saturate rather than wrap.
fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn columns(conn: &Connection, table: &str) -> Vec<String> {
        let mut stmt = conn
            .prepare("SELECT name FROM pragma_table_info(?1)")
            .unwrap_or_else(|e| panic!("{e}"));
        stmt.query_map([table], |r| r.get(0))
            .and_then(|rows| rows.collect())
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_registry_from_before_the_added_columns_gets_them_once() {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let path = tmp.path().join("registry.sqlite");
        let registry = Registry::open(&path).unwrap_or_else(|e| panic!("{e}"));
        // A run waiting to be indexed.
        let run = crate::run::Run::for_tests("r0123456789abcdef0123456789abcdef", "ualice");
        registry
            .insert_run(&NewRun {
                run: &run,
                ancestry: "|r0123456789abcdef0123456789abcdef|",
                blob_path: "b",
                idempotency_key: None,
                lane: Lane::Bulk,
            })
            .unwrap_or_else(|e| panic!("{e}"));
        drop(registry);
        // The registry as an older kith left it.
        let conn = Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
        conn.execute_batch(
            "DROP INDEX runs_conversation;
             DROP INDEX index_jobs_turns;
             ALTER TABLE index_jobs DROP COLUMN user_id;
             ALTER TABLE runs DROP COLUMN conversation;
             ALTER TABLE runs DROP COLUMN n_chunks;
             ALTER TABLE runs DROP COLUMN superseded;
             ALTER TABLE runs DROP COLUMN chunks_cut;
             ALTER TABLE shares DROP COLUMN follow;",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(!columns(&conn, "runs").contains(&"superseded".to_owned()));
        drop(conn);
        // Opened twice: the second open finds every column there.
        for _ in 0..2 {
            drop(Registry::open(&path).unwrap_or_else(|e| panic!("{e}")));
        }
        let conn = Connection::open(&path).unwrap_or_else(|e| panic!("{e}"));
        let runs = columns(&conn, "runs");
        for column in ["conversation", "n_chunks", "superseded", "chunks_cut"] {
            assert!(runs.contains(&column.to_owned()), "runs.{column}: {runs:?}");
        }
        assert!(columns(&conn, "shares").contains(&"follow".to_owned()));
        // The waiting job knows its member.
        let owner: Option<String> = conn
            .query_row("SELECT user_id FROM index_jobs", [], |r| r.get(0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(owner.as_deref(), Some("ualice"));
    }
}
