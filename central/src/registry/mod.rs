//! The SQLite registry in `<data>/registry.sqlite`: users and machines (the
//! identity of record), and the run catalog and indexing jobs (derived from
//! the blob store; `reindex` rebuilds them).
//!
//! Every method is synchronous and holds the connection lock only for its own
//! statements; async callers run them on the blocking pool. Reads of runs take
//! a `&Viewer` and filter in SQL: there is no unfiltered run read here.

use std::path::Path;
use std::sync::{LazyLock, Mutex, MutexGuard};

use kith_proto::{AgentRuntime, RunMeta};
use kith_shared::ids::{MachineId, RunId, UserId};
use rusqlite::{params, Connection, OptionalExtension};

use crate::auth::Viewer;
use crate::error::{Error, Result};

mod conversations;
mod shares;

pub use conversations::{ConversationFilter, Facets};
pub use shares::{Grant, GrantScope, ShareRow};

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
    conversation TEXT
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
    revoked_at TEXT
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
CREATE TABLE IF NOT EXISTS index_jobs (
    run_id TEXT PRIMARY KEY,
    lane TEXT NOT NULL,
    enqueued_at TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    last_error TEXT
);
";

/// What the registry knows of one stored run beyond its metadata.
#[derive(Debug, Clone)]
pub struct StoredRun {
    /// With `readable_by` as of now: the owner and every live grantee.
    pub meta: RunMeta,
    pub ancestry: String,
    /// Blob path relative to the data directory.
    pub blob_path: String,
    pub idempotency_key: Option<String>,
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

/// A run waiting to be indexed.
#[derive(Debug, Clone)]
pub struct PendingJob {
    pub run_id: RunId,
    pub blob_path: String,
    pub ancestry: String,
}

/// Lanes of the durable indexing jobs and of the runs waiting for vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Realtime,
    Bulk,
}

impl Lane {
    fn as_str(self) -> &'static str {
        match self {
            Lane::Realtime => "ingest-realtime",
            Lane::Bulk => "ingest-bulk",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub id: UserId,
    pub handle: String,
    pub did: Option<String>,
    pub pds_url: Option<String>,
    pub is_admin: bool,
    pub created_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineRow {
    pub id: MachineId,
    pub user_id: UserId,
    pub handle: String,
    pub name: String,
    pub created_at: String,
    pub last_seen_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// The identity side of one machine, for `machine register` and `revoke`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineAuth {
    /// The app password's name on the user's PDS; `None` for a local token.
    pub app_password_name: Option<String>,
    pub revoked_at: Option<String>,
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

#[derive(Debug, Clone, Copy, Default)]
pub struct RegistryCounts {
    pub users: u64,
    pub machines: u64,
    pub runs: u64,
    pub pending_jobs: u64,
    pub realtime_jobs: u64,
    pub bulk_jobs: u64,
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
        conn.execute_batch(SCHEMA)?;
        migrate(&conn)?;
        let reader = Connection::open(path)?;
        reader.pragma_update(None, "query_only", "ON")?;
        for c in [&conn, &reader] {
            c.busy_timeout(std::time::Duration::from_secs(5))?;
            // Every request authenticates and most read runs: their
            // statements stay prepared (parsing cost more than running).
            c.set_prepared_statement_cache_capacity(64);
        }
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
        lock(&self.conn)
    }

    /// The connection for reads.
    fn reader(&self) -> MutexGuard<'_, Connection> {
        lock(&self.reader)
    }

    pub fn add_user(&self, user: &UserRow) -> Result<()> {
        let n = self.conn().execute(
            "INSERT INTO users (id, handle, did, pds_url, is_admin, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (handle) DO NOTHING",
            params![
                user.id.as_str(),
                user.handle,
                user.did,
                user.pds_url,
                user.is_admin,
                user.created_at
            ],
        )?;
        if n == 0 {
            return Err(Error::conflict(
                "user_exists",
                format!("user {} already exists", user.handle),
            ));
        }
        Ok(())
    }

    pub fn user_by_handle(&self, handle: &str) -> Result<Option<UserRow>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT id, handle, did, pds_url, is_admin, created_at FROM users WHERE handle = ?1",
                [handle],
                user_row,
            )
            .optional()?)
    }

    pub fn list_users(&self) -> Result<Vec<UserRow>> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT id, handle, did, pds_url, is_admin, created_at FROM users ORDER BY handle",
        )?;
        let rows = stmt
            .query_map([], user_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    pub fn add_machine(
        &self,
        id: &MachineId,
        user_id: &UserId,
        name: &str,
        app_password_name: Option<&str>,
        token_sha256: &str,
        created_at: &str,
    ) -> Result<()> {
        let res = self.conn().execute(
            "INSERT INTO machines (id, user_id, name, app_password_name, token_sha256, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id.as_str(),
                user_id.as_str(),
                name,
                app_password_name,
                token_sha256,
                created_at
            ],
        );
        match res {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(Error::conflict(
                    "machine_exists",
                    format!("this user already has a machine named {name:?}; revoke it or pick another name"),
                ))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The viewer behind a token hash, unless the machine is unknown or revoked.
    pub fn viewer_by_token(&self, token_sha256: &str) -> Result<Option<Viewer>> {
        let row = self
            .reader()
            .prepare_cached(
                "SELECT m.id, m.name, u.id, u.handle, u.is_admin FROM machines m
                 JOIN users u ON u.id = m.user_id
                 WHERE m.token_sha256 = ?1 AND m.revoked_at IS NULL",
            )?
            .query_row([token_sha256], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, bool>(4)?,
                ))
            })
            .optional()?;
        let Some((machine_id, machine_name, user_id, handle, is_admin)) = row else {
            return Ok(None);
        };
        let mut viewer = Viewer {
            user_id: parse_id(UserId::parse(&user_id))?,
            machine_id: parse_id(MachineId::parse(&machine_id))?,
            machine_name,
            handle,
            is_admin,
            grants: Vec::new(),
        };
        viewer.grants = self.grants_to(&viewer)?;
        Ok(Some(viewer))
    }

    /// Marks a machine revoked; returns false when no live machine matched.
    pub fn revoke_machine(&self, user_id: &UserId, name: &str, at: &str) -> Result<bool> {
        let n = self.conn().execute(
            "UPDATE machines SET revoked_at = ?3 WHERE user_id = ?1 AND name = ?2 AND revoked_at IS NULL",
            params![user_id.as_str(), name, at],
        )?;
        Ok(n == 1)
    }

    /// How the machine `name` of a user authenticates, revoked or not (a
    /// name stays taken after revoke): `None` when there is no such machine.
    pub fn machine_auth(&self, user_id: &UserId, name: &str) -> Result<Option<MachineAuth>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT app_password_name, revoked_at FROM machines WHERE user_id = ?1 AND name = ?2",
                params![user_id.as_str(), name],
                |r| {
                    Ok(MachineAuth {
                        app_password_name: r.get(0)?,
                        revoked_at: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    pub fn list_machines(&self) -> Result<Vec<MachineRow>> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT m.id, m.user_id, u.handle, m.name, m.created_at, m.last_seen_at, m.revoked_at
             FROM machines m JOIN users u ON u.id = m.user_id ORDER BY u.handle, m.name",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(
                |(id, user_id, handle, name, created_at, last_seen_at, revoked_at)| {
                    Ok(MachineRow {
                        id: parse_id(MachineId::parse(&id))?,
                        user_id: parse_id(UserId::parse(&user_id))?,
                        handle,
                        name,
                        created_at,
                        last_seen_at,
                        revoked_at,
                    })
                },
            )
            .collect()
    }

    /// Records when machines were last seen (batched by the caller).
    pub fn touch_machines(
        &self,
        seen: &std::collections::HashMap<MachineId, String>,
    ) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (id, at) in seen {
            tx.prepare_cached("UPDATE machines SET last_seen_at = ?2 WHERE id = ?1")?
                .execute(params![id.as_str(), at])?;
        }
        tx.commit()?;
        Ok(())
    }

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

    /// Inserts the run and its indexing job in one transaction.
    pub fn insert_run(&self, new: &NewRun<'_>) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        write_run(&tx, new, &INSERT_RUN)?;
        tx.commit()?;
        Ok(())
    }

    /// Makes the run catalog exactly `runs` (read from the blobs by
    /// `reindex`), each with an indexing job, in one transaction. A run the
    /// catalog already holds keeps what its blob does not say: when central
    /// captured it, its quarantine and its idempotency key (a reindex must
    /// not show a quarantined run to others again); its index and vector
    /// state start over.
    pub fn replace_runs(&self, runs: &[NewRun<'_>]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        tx.execute("DELETE FROM index_jobs", [])?;
        let known: Vec<String> = tx
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
        }
        tx.commit()?;
        Ok(())
    }

    pub fn run(&self, viewer: &Viewer, id: &RunId) -> Result<Option<StoredRun>> {
        self.query_runs(
            &format!("WHERE id = ?1 AND {}", readable(2)),
            params![id.as_str(), viewer.user_id.as_str()],
        )
        .map(|v| v.into_iter().next())
    }

    /// Every run of one tree the viewer may read, by `started_at`.
    pub fn tree_runs(&self, viewer: &Viewer, root: &str) -> Result<Vec<StoredRun>> {
        self.query_runs(
            &format!(
                "WHERE root_run_id = ?1 AND {} ORDER BY started_at, id",
                readable(2)
            ),
            params![root, viewer.user_id.as_str()],
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
        let mut args: Vec<String> = vec![viewer.user_id.to_string()];
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
    fn query_runs(&self, clause: &str, args: impl rusqlite::Params) -> Result<Vec<StoredRun>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT meta_json, indexed_at, embedded_at, blob_path, idempotency_key, ancestry FROM runs {clause}"
        ))?;
        let rows = stmt
            .query_map(args, |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, String>(5)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        drop(stmt);
        rows.into_iter()
            .map(
                |(meta_json, indexed_at, embedded_at, blob_path, idempotency_key, ancestry)| {
                    let mut meta: RunMeta = serde_json::from_str(&meta_json)?;
                    meta.indexed_at = indexed_at;
                    meta.embedded_at = embedded_at;
                    meta.readable_by = readers(&conn, &meta.user_id, &ancestry, &meta.tags)?;
                    Ok(StoredRun {
                        meta,
                        blob_path,
                        idempotency_key,
                        ancestry,
                    })
                },
            )
            .collect()
    }

    /// Pending jobs that failed fewer than `max_attempts` times, realtime
    /// lane first, oldest first.
    pub fn pending_jobs_below(&self, limit: u32, max_attempts: i64) -> Result<Vec<PendingJob>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT j.run_id, r.blob_path, r.ancestry FROM index_jobs j JOIN runs r ON r.id = j.run_id
             WHERE j.attempts < ?2
             ORDER BY CASE j.lane WHEN 'ingest-realtime' THEN 0 ELSE 1 END, j.enqueued_at, j.run_id
             LIMIT ?1",
        )?;
        let rows = id_and_two(&mut stmt, params![limit, max_attempts])?;
        Ok(rows
            .into_iter()
            .map(|(run_id, blob_path, ancestry)| PendingJob {
                run_id,
                blob_path,
                ancestry,
            })
            .collect())
    }

    /// These jobs are done: their runs are searchable. One transaction (one
    /// sync of the log) for a whole indexing batch.
    pub fn finish_jobs(&self, runs: &[RunId], indexed_at: &str) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for run in runs {
            tx.prepare_cached("UPDATE runs SET indexed_at = ?2 WHERE id = ?1")?
                .execute(params![run.as_str(), indexed_at])?;
            tx.prepare_cached("DELETE FROM index_jobs WHERE run_id = ?1")?
                .execute([run.as_str()])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Indexed runs of `lane` whose vectors are not from `model`, newest
    /// first; `realtime_since` as in `REALTIME`.
    pub fn runs_to_embed(
        &self,
        model: &str,
        lane: Lane,
        realtime_since: &str,
        limit: u32,
    ) -> Result<Vec<RunId>> {
        let conn = self.reader();
        let negate = if lane == Lane::Bulk { "NOT" } else { "" };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT id FROM runs WHERE {AWAITING_VECTORS} AND {negate} {REALTIME}
             ORDER BY captured_at DESC, id LIMIT ?3"
        ))?;
        let ids = stmt
            .query_map(params![model, realtime_since, limit], |r| {
                r.get::<_, String>(0)
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        ids.iter().map(|id| parse_id(RunId::parse(id))).collect()
    }

    /// How many runs wait for vectors of `model`, as (realtime, bulk).
    pub fn runs_awaiting_vectors(&self, model: &str, realtime_since: &str) -> Result<(u64, u64)> {
        let (realtime, all) = self
            .reader()
            .prepare_cached(&format!(
                "SELECT COALESCE(SUM({REALTIME}), 0), COUNT(*) FROM runs WHERE {AWAITING_VECTORS}"
            ))?
            .query_row(params![model, realtime_since], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?;
        Ok((realtime.max(0) as u64, (all - realtime).max(0) as u64))
    }

    pub fn set_embedded(&self, run: &RunId, model: &str, at: &str) -> Result<()> {
        self.conn()
            .prepare_cached("UPDATE runs SET embedded_model = ?2, embedded_at = ?3 WHERE id = ?1")?
            .execute(params![run.as_str(), model, at])?;
        Ok(())
    }

    pub fn fail_job(&self, run: &RunId, error: &str) -> Result<()> {
        self.conn().execute(
            "UPDATE index_jobs SET attempts = attempts + 1, last_error = ?2, lane = 'ingest-bulk',
                 enqueued_at = ?3 WHERE run_id = ?1",
            params![run.as_str(), error, kith_shared::timestamp::now()],
        )?;
        Ok(())
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

    pub fn last_indexed_at(&self) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row("SELECT MAX(indexed_at) FROM runs", [], |r| r.get(0))?)
    }

    /// Every run's id and blob path, for `doctor`.
    pub fn all_blob_paths(&self) -> Result<Vec<(String, String)>> {
        let conn = self.reader();
        let mut stmt = conn.prepare("SELECT id, blob_path FROM runs ORDER BY id")?;
        let rows = stmt
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
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
            indexed_at = NULL, embedded_at = NULL, embedded_model = NULL",
        *INSERT_RUN,
        from_blob.join(", ")
    )
});

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
    tx.prepare_cached(
        "INSERT OR REPLACE INTO index_jobs (run_id, lane, enqueued_at) VALUES (?1, ?2, ?3)",
    )?
    .execute(params![
        meta.id,
        new.lane.as_str(),
        kith_shared::timestamp::now()
    ])?;
    Ok(())
}

/// Brings a registry made by an older kith to this schema: columns added
/// since, and their indexes (created here, after the columns exist).
fn migrate(conn: &Connection) -> Result<()> {
    let has_conversation: bool = conn.query_row(
        "SELECT COUNT(*) FROM pragma_table_info('runs') WHERE name = 'conversation'",
        [],
        |r| r.get::<_, i64>(0).map(|n| n > 0),
    )?;
    if !has_conversation {
        conn.execute("ALTER TABLE runs ADD COLUMN conversation TEXT", [])?;
    }
    conn.execute(
        "CREATE INDEX IF NOT EXISTS runs_conversation ON runs (conversation, started_at)",
        [],
    )?;
    Ok(())
}

fn lock(conn: &Mutex<Connection>) -> MutexGuard<'_, Connection> {
    // A panic while holding the lock cannot leave SQLite half-written
    // (statements are atomic), so a poisoned lock is still usable.
    conn.lock().unwrap_or_else(|p| p.into_inner())
}

/// Over `runs`, with the model as `?1`: the run is indexed and its vectors
/// are not of that model (none yet, or of a model central no longer uses).
const AWAITING_VECTORS: &str =
    "indexed_at IS NOT NULL AND (embedded_model IS NULL OR embedded_model != ?1)";

/// Over `runs`, with `?2` an instant minutes ago: the run rides the
/// realtime lane. It was never embedded (a model change's re-embeds are
/// bulk work), was captured since `?2`, and its transcript was being
/// written then: its last line at most an hour older than its capture. A
/// backfill of old sessions is captured now, but it is history: bulk work.
const REALTIME: &str = "(embedded_model IS NULL AND captured_at >= ?2
    AND COALESCE(json_extract(meta_json, '$.ended_at'), started_at)
        >= strftime('%Y-%m-%dT%H:%M:%fZ', captured_at, '-1 hour'))";

/// The SQL predicate "the viewer may read this run", over the `runs` table,
/// with the viewer's user id as parameter `?n`: the owner always; anyone
/// else through a live grant of the owner, unless the run is quarantined.
/// Every run read goes through it; nothing may bypass it.
fn readable(n: usize) -> String {
    format!(
        "(runs.user_id = ?{n} OR (runs.quarantined = 0 AND EXISTS (
            SELECT 1 FROM shares s WHERE s.grantee = ?{n} AND s.grantor = runs.user_id
              AND s.revoked_at IS NULL
              AND (s.expires_at IS NULL OR s.expires_at > {NOW_SQL})
              AND ((s.scope_kind = 'run' AND instr(runs.ancestry, '|' || s.scope_value || '|') > 0)
                OR (s.scope_kind = 'tag' AND instr(runs.tags_key, '|' || s.scope_value || '|') > 0)))))"
    )
}

/// Now, in kith's canonical timestamp form, computed by SQLite.
const NOW_SQL: &str = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

/// The owner and the users a live grant lets read a run, by user id.
fn readers(conn: &Connection, owner: &str, ancestry: &str, tags: &[String]) -> Result<Vec<String>> {
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT DISTINCT grantee FROM shares WHERE grantor = ?1 AND revoked_at IS NULL
           AND (expires_at IS NULL OR expires_at > {NOW_SQL})
           AND ((scope_kind = 'run' AND instr(?2, '|' || scope_value || '|') > 0)
             OR (scope_kind = 'tag' AND instr(?3, '|' || scope_value || '|') > 0))
         ORDER BY grantee"
    ))?;
    let tags_key = format!("|{}|", tags.join("|"));
    let mut out = vec![owner.to_owned()];
    for grantee in stmt.query_map(params![owner, ancestry, tags_key], |r| {
        r.get::<_, String>(0)
    })? {
        out.push(grantee?);
    }
    Ok(out)
}

/// The ancestry string of a run: its parent's ancestry plus itself.
pub fn ancestry_of(parent_ancestry: Option<&str>, run_id: &str) -> String {
    format!("{}{run_id}|", parent_ancestry.unwrap_or("|"))
}

fn user_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UserRow> {
    let id: String = r.get(0)?;
    Ok(UserRow {
        id: UserId::parse(&id).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
        handle: r.get(1)?,
        did: r.get(2)?,
        pds_url: r.get(3)?,
        is_admin: r.get(4)?,
        created_at: r.get(5)?,
    })
}

/// Rows of (run id, text, text).
fn id_and_two(
    stmt: &mut rusqlite::Statement<'_>,
    args: impl rusqlite::Params,
) -> Result<Vec<(RunId, String, String)>> {
    let rows = stmt
        .query_map(args, |r| {
            Ok((
                r.get::<_, String>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    rows.into_iter()
        .map(|(id, a, b)| Ok((parse_id(RunId::parse(&id))?, a, b)))
        .collect()
}

fn parse_id<T>(r: std::result::Result<T, kith_shared::ids::IdError>) -> Result<T> {
    r.map_err(|e| Error::Internal(format!("registry holds an {e}")))
}

/// SQLite integers are i64; offsets beyond i64::MAX cannot occur (files are
/// far smaller), so saturate rather than wrap.
fn to_i64(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}
