//! The `usage` table: one row per usage fact (the tokens and recorded cost
//! of a model response, `kith_shared::usage`), as folded across its
//! conversation's deltas by `crate::usage::settle` (a delta's run is
//! stored with a `usage_pending` row; a settle takes many, in the order
//! they came, and writes many deltas' facts to a transaction) and rebuilt
//! by `reindex`; and
//! `usage_folds`, what each conversation's fold carries to its next delta
//! (the model and time its bytes left in effect, records refused, the last
//! running total, and for a format whose usage is read whole what of its
//! bytes the next delta's reading needs: `kith_shared::usage::carry`). A
//! delta's fold reads back only the facts it may change
//! (`Registry::conversation_usage`), not all of its conversation's.
//!
//! A row is counted for its owner, and for an admin's family report
//! (`privacy::UsageReach`): reads join `runs` and render the rule's
//! `usage_counted`; of a row whose run the reader may not read (the rule),
//! the conversation, project and machine are left out here, before any
//! report sees them. Usage shared with a member stays its owner's. Rows go
//! with their runs (`finish_forget`, `replace_runs`).
//!
//! The same response captured in two conversations (a Claude Code
//! subagent's file repeating its parent's message, a transcript rewritten
//! and captured again as a new chain) counts once, as its newest copy: a
//! row is left out of a report when a row of another of its owner's
//! conversations with the same `dedupe` comes from a later run. `dedupe` is
//! the fact's key for facts keyed by the agent's message ids
//! (`Merge::Last`), and the key within its transcript for the others
//! (whose keys are a time, or Aider's line).

use std::collections::HashMap;
use std::sync::Arc;

use kith_proto::AgentRuntime;
use kith_shared::ids::UserId;
use kith_shared::usage::{cost, Context, Merge, PriceTable, Reading, Tokens, UsageFact};
use rusqlite::{params, OptionalExtension, Row, Transaction};

use super::usage_hours::{
    count, decode, get_tokens, hour_of, put_tokens, tokens_at, Figures, Touched, HOUR_MS, LAYOUT,
};
use super::{to_i64, Registry, Sql, StoredRun, Viewer};
use crate::error::Result;
use crate::privacy::{Rule, UsageReach};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS usage (
    -- Fold order within a conversation.
    id INTEGER PRIMARY KEY,
    -- The run whose delta last changed the fact.
    run_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    machine TEXT NOT NULL,
    agent_runtime TEXT NOT NULL,
    conversation TEXT NOT NULL,
    project TEXT,
    model TEXT,
    -- The time the agent wrote, if any; `at` is it, else the run's start.
    time TEXT,
    at TEXT NOT NULL,
    at_ms INTEGER NOT NULL,
    input_tokens INTEGER NOT NULL,
    output_tokens INTEGER NOT NULL,
    cache_write_5m_tokens INTEGER NOT NULL,
    cache_write_1h_tokens INTEGER NOT NULL,
    cache_read_tokens INTEGER NOT NULL,
    -- The cost the agent recorded, in USD.
    cost_usd REAL,
    n_requests INTEGER,
    fact_key TEXT NOT NULL,
    -- `last`, `each` or `running` (`kith_shared::usage::Merge`); a running
    -- total's counts in total_*.
    merge TEXT NOT NULL,
    total_input INTEGER,
    total_output INTEGER,
    total_cache_write_5m INTEGER,
    total_cache_write_1h INTEGER,
    total_cache_read INTEGER,
    dedupe TEXT NOT NULL,
    -- 0 when another conversation of its owner holds the same response
    -- from a later run (`usage_hours`).
    counted INTEGER NOT NULL DEFAULT 1,
    -- What it costs at the price table in effect (`usage_prices`): the
    -- recorded cost, else its tokens at list prices; NULL: no price.
    price_usd REAL
);
-- Three indexes, each fact's writing paying for all: a conversation's
-- facts (its fold, an hour's sum, a forget), a member's by time (a range's
-- edges), the copies of one response.
CREATE INDEX IF NOT EXISTS usage_conversation_at ON usage (conversation, at_ms);
CREATE INDEX IF NOT EXISTS usage_user_at ON usage (user_id, at_ms);
CREATE INDEX IF NOT EXISTS usage_dedupe ON usage (user_id, dedupe, run_id);
DROP INDEX IF EXISTS usage_conversation;
DROP INDEX IF EXISTS usage_run;
CREATE TABLE IF NOT EXISTS usage_folds (
    conversation TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    agent_runtime TEXT NOT NULL,
    model TEXT,
    time TEXT,
    n_refused INTEGER NOT NULL,
    carry BLOB,
    -- `ConversationUsage::running` (`usage_hours::put_tokens`).
    running BLOB
);
-- Runs whose deltas' usage is not counted yet, in the order they came
-- (`Registry::pending_usage`, `Registry::settle_usage`).
CREATE TABLE IF NOT EXISTS usage_pending (
    seq INTEGER PRIMARY KEY,
    run_id TEXT NOT NULL
);
";

/// A usage fact as the registry keeps it: the fact as folded, and what a
/// report counts it under.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// Its row in the registry; `None` for a fact not stored yet.
    pub id: Option<i64>,
    pub fact: UsageFact,
    /// The run whose delta last changed the fact.
    pub run_id: String,
    /// The machine's name when that run was captured.
    pub machine: String,
    /// That run's working directory.
    pub project: Option<String>,
    /// When: the fact's time, else that run's start (RFC 3339).
    pub at: String,
    /// What it costs at the price table in effect (`crate::usage` prices
    /// it): its recorded cost, else its tokens at list prices; `None`
    /// when it has no price.
    pub priced_usd: Option<f64>,
}

impl UsageRow {
    /// Whether `other` says what this row does, whichever row of the
    /// registry each is (every field but the id: a field added is compared
    /// too, or this does not compile).
    fn says_as(&self, other: &UsageRow) -> bool {
        let UsageRow {
            id: _,
            fact,
            run_id,
            machine,
            project,
            at,
            priced_usd,
        } = self;
        *fact == other.fact
            && *run_id == other.run_id
            && *machine == other.machine
            && *project == other.project
            && *at == other.at
            && *priced_usd == other.priced_usd
    }
}

/// A conversation's usage, folded across its deltas (`crate::usage`).
#[derive(Debug, Clone, PartialEq)]
pub struct ConversationUsage {
    pub conversation: String,
    pub user_id: String,
    pub agent_runtime: AgentRuntime,
    /// The transcript its deltas come from: its source identity without
    /// the chain's suffix (`path#`), which scopes `dedupe`.
    pub transcript: String,
    /// In fold order: every fact of the conversation when `complete`,
    /// else those of its facts a delta wrote or may change (a fold's
    /// earlier facts are not read again at each delta: `kith_shared::
    /// usage::Fold::resume`).
    pub rows: Vec<UsageRow>,
    /// Whether `rows` are all of the conversation's facts (stored rows
    /// past them go).
    pub complete: bool,
    pub n_refused: u64,
    /// The total of its last running-total fact (Codex's), which the next
    /// delta's totals are counted from.
    pub running: Option<Tokens>,
    /// What its bytes leave in effect for the next delta's facts.
    pub context: Option<Context>,
    /// For a format whose usage is read whole, what of its bytes the next
    /// delta is read after (`kith_shared::usage::carry`); `None` for the
    /// others, and for a fold written before it was kept.
    pub carried: Option<Vec<u8>>,
}

/// Which of the viewer's usage a report reads.
#[derive(Debug, Clone, Default)]
pub struct UsageFilter {
    pub agent: Option<AgentRuntime>,
    /// Milliseconds since the epoch: at or after.
    pub since_ms: Option<i64>,
    /// Milliseconds since the epoch: before.
    pub until_ms: Option<i64>,
    /// Whether to read what names each run's work (`CountedUsage::work`):
    /// for a report by conversation, machine or project.
    pub work: bool,
    /// Whether that work's machine and project too, for a report by
    /// either: else the sums' are left empty.
    pub work_place: bool,
    /// Whether the report takes each hour whole (by conversation or 5-hour
    /// block: `usage::report::takes_hours_whole`): the sums' quarter hours
    /// are then not read.
    pub whole_hours: bool,
}

/// Usage a report counts: one fact, or the facts of one hour of a
/// conversation summed (`usage_hours`), with what it can be grouped by.
#[derive(Debug, Clone, PartialEq)]
pub struct CountedUsage {
    pub model: Option<Arc<str>>,
    pub figures: Figures,
    /// The first and the last fact's time, in ms (the same for one fact).
    pub first_ms: i64,
    pub last_ms: i64,
    /// Each quarter hour's start and figures, when the facts fall in more
    /// than one.
    pub quarters: Vec<(i64, Figures)>,
    pub agent_runtime: Arc<str>,
    /// The handle of the member whose run it is.
    pub person: Arc<str>,
    /// What names the run's work: `None` when the reader may not read the
    /// run (another member's, in an admin's family report), and when the
    /// filter did not ask for it.
    pub work: Option<Work>,
}

/// One copy of each name a report's rows repeat (models, agents,
/// conversations, machines, projects), found by its hash; and the members'
/// handles by their user id, a few, found by a scan.
#[derive(Default)]
struct Names {
    names: foldhash::HashSet<Arc<str>>,
    handles: Vec<(String, Arc<str>)>,
}

impl Names {
    fn of(&mut self, name: &str) -> Arc<str> {
        if let Some(known) = self.names.get(name) {
            return known.clone();
        }
        let new: Arc<str> = Arc::from(name);
        self.names.insert(new.clone());
        new
    }

    /// The handle of the member `user_id`, else the id.
    fn person(&mut self, user_id: &str) -> Arc<str> {
        match self.handles.iter().find(|(id, _)| id == user_id) {
            Some((_, handle)) => handle.clone(),
            None => self.of(user_id),
        }
    }

    /// The name at column `i`.
    fn column(&mut self, r: &Row<'_>, i: usize) -> rusqlite::Result<Arc<str>> {
        Ok(self.of(r.get_ref(i)?.as_str()?))
    }

    fn optional(&mut self, r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Arc<str>>> {
        match r.get_ref(i)? {
            rusqlite::types::ValueRef::Null => Ok(None),
            _ => self.column(r, i).map(Some),
        }
    }

    /// The conversation, machine and project at `first` and the two after.
    fn work(&mut self, r: &Row<'_>, first: usize) -> rusqlite::Result<Work> {
        Ok(Work {
            conversation: self.column(r, first)?,
            machine: self.column(r, first + 1)?,
            project: self.optional(r, first + 2)?,
        })
    }
}

/// Which of the usage a report reads: of one member's (with `None`
/// every member's but `except`), those before `before` and from `from`.
#[derive(Debug, Clone, Default)]
struct Pieces {
    owner: Option<String>,
    except: Vec<String>,
    before: Option<i64>,
    from: Option<i64>,
}

/// Where a counted fact's run was: its conversation, machine and project
/// (of summed hours, empty unless `UsageFilter::work_place`).
#[derive(Debug, Clone, PartialEq)]
pub struct Work {
    pub conversation: Arc<str>,
    pub machine: Arc<str>,
    pub project: Option<Arc<str>>,
}

/// What tells two conversations' copies of one response apart from two
/// responses (see the module documentation).
fn dedupe(u: &ConversationUsage, fact: &UsageFact) -> String {
    let runtime = u.agent_runtime.as_str();
    match fact.merge {
        Merge::Last => format!("{runtime}\n{}", fact.key),
        Merge::Each | Merge::RunningTotal(_) => {
            format!("{runtime}\n{}\n{}", u.transcript, fact.key)
        }
    }
}

fn merge_name(merge: &Merge) -> (&'static str, Option<Tokens>) {
    match merge {
        Merge::Last => ("last", None),
        Merge::Each => ("each", None),
        Merge::RunningTotal(total) => ("running", Some(*total)),
    }
}

fn epoch_ms(at: &str) -> i64 {
    kith_shared::timestamp::parse(at).map_or(0, kith_shared::timestamp::epoch_ms)
}

/// Writes `row` of `u`: `INSERT`, or with `id` `UPDATE ... WHERE id = ?27`.
fn put(
    tx: &Transaction<'_>,
    sql: &str,
    u: &ConversationUsage,
    row: &UsageRow,
    id: Option<i64>,
) -> Result<()> {
    let f = &row.fact;
    let (merge, total) = merge_name(&f.merge);
    let total = |pick: fn(&Tokens) -> u64| total.as_ref().map(|t| to_i64(pick(t)));
    let t = &f.tokens;
    let mut stmt = tx.prepare_cached(sql)?;
    let values: [&dyn rusqlite::ToSql; 26] = [
        &row.run_id,
        &u.user_id,
        &row.machine,
        &u.agent_runtime.as_str(),
        &u.conversation,
        &row.project,
        &f.model,
        &f.time,
        &row.at,
        &epoch_ms(&row.at),
        &to_i64(t.input),
        &to_i64(t.output),
        &to_i64(t.cache_write_5m),
        &to_i64(t.cache_write_1h),
        &to_i64(t.cache_read),
        &f.cost_usd,
        &f.n_requests.map(to_i64),
        &f.key,
        &merge,
        &total(|t| t.input),
        &total(|t| t.output),
        &total(|t| t.cache_write_5m),
        &total(|t| t.cache_write_1h),
        &total(|t| t.cache_read),
        &dedupe(u, f),
        &row.priced_usd,
    ];
    match id {
        Some(id) => {
            let mut all: Vec<&dyn rusqlite::ToSql> = values.to_vec();
            all.push(&id);
            stmt.execute(all.as_slice())?
        }
        None => stmt.execute(values.as_slice())?,
    };
    Ok(())
}

const INSERT: &str = "INSERT INTO usage (run_id, user_id, machine, agent_runtime, conversation,
    project, model, time, at, at_ms, input_tokens, output_tokens, cache_write_5m_tokens,
    cache_write_1h_tokens, cache_read_tokens, cost_usd, n_requests, fact_key, merge, total_input,
    total_output, total_cache_write_5m, total_cache_write_1h, total_cache_read, dedupe, price_usd)
    VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18,
            ?19, ?20, ?21, ?22, ?23, ?24, ?25, ?26)";

const UPDATE: &str = "UPDATE usage SET run_id = ?1, user_id = ?2, machine = ?3,
    agent_runtime = ?4, conversation = ?5, project = ?6, model = ?7, time = ?8, at = ?9,
    at_ms = ?10, input_tokens = ?11, output_tokens = ?12, cache_write_5m_tokens = ?13,
    cache_write_1h_tokens = ?14, cache_read_tokens = ?15, cost_usd = ?16, n_requests = ?17,
    fact_key = ?18, merge = ?19, total_input = ?20, total_output = ?21,
    total_cache_write_5m = ?22, total_cache_write_1h = ?23, total_cache_read = ?24,
    dedupe = ?25, price_usd = ?26 WHERE id = ?27";

/// The columns `row_of` reads, after the row's id.
const READ: &str = "usage.id, usage.run_id, usage.machine, usage.project, usage.model,
    usage.time, usage.at, usage.input_tokens, usage.output_tokens,
    usage.cache_write_5m_tokens, usage.cache_write_1h_tokens, usage.cache_read_tokens,
    usage.cost_usd, usage.n_requests, usage.fact_key, usage.merge, usage.total_input,
    usage.total_output, usage.total_cache_write_5m, usage.total_cache_write_1h,
    usage.total_cache_read, usage.price_usd";

/// A row of `READ`.
fn row_of(r: &Row<'_>) -> rusqlite::Result<UsageRow> {
    let merge = match r.get::<_, String>(15)?.as_str() {
        "last" => Merge::Last,
        "running" => Merge::RunningTotal(Tokens {
            input: count(r.get::<_, Option<i64>>(16)?.unwrap_or(0)),
            output: count(r.get::<_, Option<i64>>(17)?.unwrap_or(0)),
            cache_write_5m: count(r.get::<_, Option<i64>>(18)?.unwrap_or(0)),
            cache_write_1h: count(r.get::<_, Option<i64>>(19)?.unwrap_or(0)),
            cache_read: count(r.get::<_, Option<i64>>(20)?.unwrap_or(0)),
        }),
        _ => Merge::Each,
    };
    Ok(UsageRow {
        id: Some(r.get(0)?),
        run_id: r.get(1)?,
        machine: r.get(2)?,
        project: r.get(3)?,
        at: r.get(6)?,
        priced_usd: r.get(21)?,
        fact: UsageFact {
            key: r.get(14)?,
            merge,
            model: r.get(4)?,
            time: r.get(5)?,
            tokens: tokens_at(r, 7)?,
            n_requests: r.get::<_, Option<i64>>(13)?.map(count),
            cost_usd: r.get(12)?,
        },
    })
}

/// The rows of `conversation`, in fold order.
fn stored_rows(tx: &Transaction<'_>, conversation: &str) -> Result<Vec<UsageRow>> {
    let rows = tx
        .prepare_cached(&format!(
            "SELECT {READ} FROM usage WHERE conversation = ?1 ORDER BY usage.id"
        ))?
        .query_map([conversation], row_of)?
        .collect::<rusqlite::Result<_>>()?;
    Ok(rows)
}

/// The rows `ids`, by id.
fn rows_by_id(tx: &Transaction<'_>, ids: &[i64]) -> Result<HashMap<i64, UsageRow>> {
    let mut out = HashMap::new();
    if ids.is_empty() {
        return Ok(out);
    }
    let mut stmt = tx.prepare_cached(&format!(
        "SELECT {READ} FROM usage WHERE id IN (SELECT value FROM json_each(?1))"
    ))?;
    for row in stmt.query_map([serde_json::to_string(ids)?], row_of)? {
        let row = row?;
        if let Some(id) = row.id {
            out.insert(id, row);
        }
    }
    Ok(out)
}

/// Writes `u`'s rows: a stored row that changed is updated, a new one
/// inserted, and when `u` is complete its stored rows past them deleted (a
/// fold keeps its earlier facts in their places, changing some, and adds
/// new ones after them). What changed is noted in `touched`, whose
/// `settle` brings the hours and counts along (`usage_hours`).
pub(super) fn write(
    tx: &Transaction<'_>,
    u: &ConversationUsage,
    touched: &mut Touched,
) -> Result<()> {
    let mut touch = |row: &UsageRow| {
        touched.fact(
            &u.user_id,
            &u.conversation,
            epoch_ms(&row.at),
            &dedupe(u, &row.fact),
        );
    };
    if u.complete {
        let stored = stored_rows(tx, &u.conversation)?;
        let mut kept = 0;
        for (old, new) in stored.iter().zip(&u.rows) {
            if old.fact.key != new.fact.key {
                break;
            }
            if !old.says_as(new) {
                put(tx, UPDATE, u, new, old.id)?;
                touch(old);
                touch(new);
            }
            kept += 1;
        }
        for old in &stored[kept..] {
            tx.prepare_cached("DELETE FROM usage WHERE id = ?1")?
                .execute([old.id])?;
            touch(old);
        }
        for new in &u.rows[kept..] {
            put(tx, INSERT, u, new, None)?;
            touch(new);
        }
    } else {
        let ids: Vec<i64> = u.rows.iter().filter_map(|r| r.id).collect();
        let stored = rows_by_id(tx, &ids)?;
        for new in &u.rows {
            match new.id.and_then(|id| stored.get(&id)) {
                Some(old) => {
                    if !old.says_as(new) {
                        put(tx, UPDATE, u, new, old.id)?;
                        touch(old);
                        touch(new);
                    }
                }
                None => {
                    put(tx, INSERT, u, new, None)?;
                    touch(new);
                }
            }
        }
    }
    let context = u.context.clone().unwrap_or_default();
    tx.prepare_cached(
        "INSERT INTO usage_folds (conversation, user_id, agent_runtime, model, time, n_refused,
             carry, running)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
         ON CONFLICT (conversation) DO UPDATE SET model = excluded.model,
             time = excluded.time, n_refused = excluded.n_refused, carry = excluded.carry,
             running = excluded.running",
    )?
    .execute(params![
        u.conversation,
        u.user_id,
        u.agent_runtime.as_str(),
        context.model,
        context.time,
        to_i64(u.n_refused),
        u.carried,
        u.running.as_ref().map(|t| {
            let mut bytes = Vec::with_capacity(40);
            put_tokens(&mut bytes, t);
            bytes
        }),
    ])?;
    Ok(())
}

/// Empties the tables (`replace_runs` writes them again).
pub(super) fn clear(tx: &Transaction<'_>) -> Result<()> {
    tx.execute("DELETE FROM usage", [])?;
    tx.execute("DELETE FROM usage_folds", [])?;
    tx.execute("DELETE FROM usage_hour_sums", [])?;
    tx.execute("DELETE FROM usage_pending", [])?;
    Ok(())
}

/// Notes run `run_id`'s delta as not counted yet (`Registry::settle_usage`
/// counts it).
pub(super) fn pend(tx: &Transaction<'_>, run_id: &str) -> Result<()> {
    tx.prepare_cached("INSERT INTO usage_pending (run_id) VALUES (?1)")?
        .execute([run_id])?;
    Ok(())
}

/// Deletes the usage of run `id` and its conversation's fold (all of a
/// conversation's runs go together: `finish_forget`). Before the run's row.
pub(super) fn forget_run(tx: &Transaction<'_>, id: &str) -> Result<()> {
    tx.prepare_cached(
        "DELETE FROM usage_folds WHERE conversation = (SELECT conversation FROM runs WHERE id = ?1)",
    )?
    .execute([id])?;
    tx.prepare_cached("DELETE FROM usage_pending WHERE run_id = ?1")?
        .execute([id])?;
    let mut touched = Touched::default();
    // A run's facts are its conversation's.
    const OF_RUN: &str =
        "FROM usage WHERE conversation = (SELECT conversation FROM runs WHERE id = ?1)
         AND run_id = ?1";
    let gone: Vec<(String, String, i64, String)> = tx
        .prepare_cached(&format!(
            "SELECT user_id, conversation, at_ms, dedupe {OF_RUN}"
        ))?
        .query_map([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    for (user, conversation, at_ms, dedupe) in &gone {
        touched.fact(user, conversation, *at_ms, dedupe);
    }
    tx.prepare_cached(&format!("DELETE {OF_RUN}"))?
        .execute([id])?;
    touched.settle(tx)
}

/// A run whose delta's usage is not counted yet, with its owner, for whom
/// `crate::usage::settle` reads the conversation's usage so far.
pub struct PendingUsage {
    pub owner: Viewer,
    pub run: StoredRun,
}

/// A conversation's usage with the deltas of `runs` (pending, in the order
/// they came) folded in; `None` when they change nothing of it.
pub struct SettledUsage {
    pub runs: Vec<String>,
    pub usage: Option<ConversationUsage>,
}

impl Registry {
    /// Up to `limit` runs whose deltas' usage is not counted yet, in the
    /// order they came, each with its owner as a viewer (the registry's
    /// own, as for a web session); a run no longer in the catalog, or whose
    /// owner is gone, is `None`.
    pub fn pending_usage(&self, limit: u32) -> Result<Vec<(String, Option<PendingUsage>)>> {
        let ids: Vec<String> = self
            .reader()
            .prepare_cached("SELECT run_id FROM usage_pending ORDER BY seq LIMIT ?1")?
            .query_map([limit], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = Sql::new("WHERE id IN (SELECT value FROM json_each(");
        sql.bind(serde_json::to_string(&ids)?).push("))");
        let mut runs: HashMap<String, StoredRun> = self
            .query_runs_lean(&sql)?
            .into_iter()
            .map(|r| (r.run.id.clone(), r))
            .collect();
        let mut owners: HashMap<String, Option<Viewer>> = HashMap::new();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let pending = match runs.remove(&id) {
                Some(run) => {
                    let user = run.run.user_id.clone();
                    let owner = match owners.get(&user) {
                        Some(owner) => owner.clone(),
                        None => {
                            let owner = match UserId::parse(&user) {
                                Ok(user) => self.viewer_of_user(&user)?,
                                Err(_) => None,
                            };
                            owners.insert(user, owner.clone());
                            owner
                        }
                    };
                    owner.map(|owner| PendingUsage { owner, run })
                }
                None => None,
            };
            out.push((id, pending));
        }
        Ok(out)
    }

    /// Writes each conversation's usage of `settled` and takes its runs off
    /// the pending list, in one transaction. A conversation some of whose
    /// runs are no longer pending (forgotten, reindexed or counted by
    /// another settle since they were read) is left: its usage was folded
    /// from what has changed since, and what is still pending is read again.
    ///
    /// Committed without an fsync of its own (`synchronous = NORMAL` for
    /// this transaction): what it writes is derived, and taken off the
    /// pending list in the same transaction, so a crash that loses it
    /// leaves those deltas pending, to be counted again; the next commit
    /// of ingest makes it durable with its own.
    pub fn settle_usage(&self, settled: &[SettledUsage]) -> Result<()> {
        let mut conn = self.conn();
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        let written = Self::write_settled(&mut conn, settled);
        conn.pragma_update(None, "synchronous", "FULL")?;
        written
    }

    fn write_settled(conn: &mut rusqlite::Connection, settled: &[SettledUsage]) -> Result<()> {
        let tx = conn.transaction()?;
        let mut touched = Touched::default();
        for s in settled {
            let ids = serde_json::to_string(&s.runs)?;
            const OF: &str = "FROM usage_pending WHERE run_id IN (SELECT value FROM json_each(?1))";
            let pending: usize = tx
                .prepare_cached(&format!("SELECT count(*) {OF}"))?
                .query_row([&ids], |r| r.get(0))?;
            if pending != s.runs.len() {
                continue;
            }
            tx.prepare_cached(&format!("DELETE {OF}"))?
                .execute([&ids])?;
            if let Some(u) = &s.usage {
                write(&tx, u, &mut touched)?;
            }
        }
        touched.settle(&tx)?;
        tx.commit()?;
        Ok(())
    }

    /// The viewer's own conversation's usage as folded so far, as much of
    /// it as `deltas` (the facts of its next deltas) may change: the facts
    /// of their [`Merge::Last`] keys, and the running total their running
    /// totals count from (`ConversationUsage::complete` is false). `None`
    /// before its first fact or context.
    pub fn conversation_usage(
        &self,
        viewer: &Viewer,
        conversation: &str,
        transcript: &str,
        deltas: &[Reading],
    ) -> Result<Option<ConversationUsage>> {
        let conn = self.reader();
        let mut sql = Sql::new(
            "SELECT f.agent_runtime, f.model, f.time, f.n_refused, f.carry, f.running
             FROM usage_folds f JOIN runs ON runs.conversation = f.conversation
             WHERE f.conversation = ",
        );
        sql.bind(conversation.to_owned())
            .push(" AND ")
            .owned_by(viewer)
            .push(" LIMIT 1");
        let fold = conn
            .prepare_cached(sql.text())?
            .query_map(sql.params(), |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, Option<String>>(1)?,
                    r.get::<_, Option<String>>(2)?,
                    r.get::<_, i64>(3)?,
                    r.get::<_, Option<Vec<u8>>>(4)?,
                    r.get::<_, Option<Vec<u8>>>(5)?,
                ))
            })?
            .next()
            .transpose()?;
        let Some((runtime, model, time, n_refused, carried, running)) = fold else {
            return Ok(None);
        };
        let Some(agent_runtime) = AgentRuntime::parse(&runtime) else {
            return Ok(None);
        };
        let mut usage = ConversationUsage {
            conversation: conversation.to_owned(),
            user_id: viewer.user_id().to_string(),
            agent_runtime,
            transcript: transcript.to_owned(),
            rows: Vec::new(),
            complete: false,
            n_refused: count(n_refused),
            running: running.as_deref().and_then(get_tokens),
            context: (model.is_some() || time.is_some()).then_some(Context { model, time }),
            carried,
        };
        let keys: Vec<String> = deltas
            .iter()
            .flat_map(|d| &d.facts)
            .filter(|f| matches!(f.merge, Merge::Last))
            .map(|f| dedupe(&usage, f))
            .collect();
        if !keys.is_empty() {
            let mut sql = Sql::new(&format!(
                "SELECT {READ} FROM usage INDEXED BY usage_dedupe
                 JOIN runs ON runs.id = usage.run_id
                 WHERE usage.dedupe IN (SELECT value FROM json_each("
            ));
            sql.bind(serde_json::to_string(&keys)?)
                .push("))")
                .and("usage.user_id = ?1", viewer.user_id().to_string())
                .and("usage.conversation = ?1", conversation.to_owned())
                .push(" AND ")
                .owned_by(viewer)
                .push(" ORDER BY usage.id");
            usage.rows = conn
                .prepare_cached(sql.text())?
                .query_map(sql.params(), row_of)?
                .collect::<rusqlite::Result<_>>()?;
        }
        // A fold of an older kith kept no running total: its last fact's.
        let counts_on = deltas
            .iter()
            .flat_map(|d| &d.facts)
            .any(|f| matches!(f.merge, Merge::RunningTotal(_)));
        if usage.running.is_none() && counts_on {
            usage.running = conn
                .prepare_cached(
                    "SELECT total_input, total_output, total_cache_write_5m,
                         total_cache_write_1h, total_cache_read FROM usage
                     WHERE conversation = ?1 AND merge = 'running' ORDER BY id DESC LIMIT 1",
                )?
                .query_map([conversation], |r| tokens_at(r, 0))?
                .next()
                .transpose()?;
        }
        Ok(Some(usage))
    }

    /// The usage `filter` selects that a report of `reach` counts for
    /// `viewer`, each response once (see the module documentation).
    ///
    /// Whole hours come summed (`usage_hours`) for the members the rule
    /// lets the report count as a whole: the viewer (whose every run it
    /// reads) and, in a family report, each member none of whose runs it
    /// can read (`Readability::read_through_grants`). The facts of a member
    /// whose grant the viewer holds come one by one, each run's work named
    /// where the rule admits it; so do the facts of an hour the range cuts.
    pub fn usage(
        &self,
        viewer: &Viewer,
        reach: UsageReach,
        filter: &UsageFilter,
    ) -> Result<Vec<CountedUsage>> {
        let readability = viewer.readability();
        let counted = readability.usage_counted(reach);
        let mut names = Names {
            handles: self
                .reader()
                .prepare_cached("SELECT id, handle FROM users")?
                .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?
                .map(|r| r.map(|(id, handle)| (id, Arc::from(handle))))
                .collect::<rusqlite::Result<_>>()?,
            ..Names::default()
        };
        let mut out = Vec::new();
        // Whose facts are summed: one member (the rule's owner) or every
        // member but those read through grants; `None`: a rule the sums
        // cannot render, every fact one by one.
        let (summed, one_by_one) = match &counted {
            Some(Rule::Owner(user)) => (Some(Some(user.clone())), Vec::new()),
            None => (Some(None), readability.read_through_grants()),
            Some(_) => (None, Vec::new()),
        };
        let Some(owner) = summed else {
            let all = Pieces::default();
            self.usage_facts(viewer, reach, filter, &all, &mut names, &mut out)?;
            return Ok(out);
        };
        // Hours wholly in the range: [lo, hi).
        let lo = filter
            .since_ms
            .map(|s| hour_of(s.saturating_add(HOUR_MS - 1)));
        let hi = filter.until_ms.map(hour_of);
        let any_whole_hour = match (lo, hi) {
            (Some(lo), Some(hi)) => lo < hi,
            _ => true,
        };
        let mut pieces = Vec::new();
        let summed_members = Pieces {
            owner: owner.clone(),
            except: one_by_one.clone(),
            ..Pieces::default()
        };
        if any_whole_hour {
            self.usage_hours(
                viewer,
                &summed_members,
                filter,
                lo,
                hi,
                &mut names,
                &mut out,
            )?;
            // The hours the range cuts.
            if let Some(lo) = lo {
                pieces.push(Pieces {
                    before: Some(lo),
                    ..summed_members.clone()
                });
            }
            if let Some(hi) = hi {
                pieces.push(Pieces {
                    from: Some(hi),
                    ..summed_members.clone()
                });
            }
        } else {
            pieces.push(summed_members);
        }
        for user in one_by_one {
            pieces.push(Pieces {
                owner: Some(user),
                ..Pieces::default()
            });
        }
        for piece in &pieces {
            self.usage_facts(viewer, reach, filter, piece, &mut names, &mut out)?;
        }
        Ok(out)
    }

    /// The sums of whole hours in [`lo`, `hi`) of `members`.
    #[allow(clippy::too_many_arguments)]
    fn usage_hours(
        &self,
        viewer: &Viewer,
        members: &Pieces,
        filter: &UsageFilter,
        lo: Option<i64>,
        hi: Option<i64>,
        names: &mut Names,
        out: &mut Vec<CountedUsage>,
    ) -> Result<()> {
        let mut sql = Sql::new("SELECT h.model, h.sums, h.agent_runtime, h.user_id");
        match (filter.work, filter.work_place) {
            (true, true) => sql.push(", h.conversation, h.machine, h.project"),
            // A session report names no machine or project: two columns
            // fewer to read of every row.
            (true, false) => sql.push(", h.conversation, '', NULL"),
            (false, _) => &mut sql,
        };
        sql.push(" FROM usage_hour_sums h WHERE 1");
        if let Some(user) = &members.owner {
            sql.and("h.user_id = ?1", user.clone());
        }
        for user in &members.except {
            sql.and("h.user_id != ?1", user.clone());
        }
        if let Some(agent) = filter.agent {
            sql.and("h.agent_runtime = ?1", agent.as_str().to_owned());
        }
        if let Some(lo) = lo {
            sql.and("h.hour_ms >= ?1", lo);
        }
        if let Some(hi) = hi {
            sql.and("h.hour_ms < ?1", hi);
        }
        let viewer_id = viewer.user_id().to_string();
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(sql.text())?;
        let mut rows = stmt.query(sql.params())?;
        while let Some(r) = rows.next()? {
            let user = r.get_ref(3)?.as_str().map_err(rusqlite::Error::from)?;
            // The viewer's own hours are all its to read; another member's
            // here none (they gave the viewer no grant).
            let readable = user == viewer_id;
            let person = names.person(user);
            let blob = r.get_ref(1)?.as_blob().map_err(rusqlite::Error::from)?;
            let sums = decode(blob, !filter.whole_hours)
                .ok_or_else(|| crate::error::Error::Internal("usage sums cut short".into()))?;
            out.push(CountedUsage {
                model: names.optional(r, 0)?,
                figures: sums.figures,
                first_ms: sums.first_ms,
                last_ms: sums.last_ms,
                quarters: sums.quarters,
                agent_runtime: names.column(r, 2)?,
                person,
                work: (readable && filter.work)
                    .then(|| names.work(r, 4))
                    .transpose()?,
            });
        }
        Ok(())
    }

    /// The counted facts `filter` selects of `piece`, one by one.
    #[allow(clippy::too_many_arguments)]
    fn usage_facts(
        &self,
        viewer: &Viewer,
        reach: UsageReach,
        filter: &UsageFilter,
        piece: &Pieces,
        names: &mut Names,
        out: &mut Vec<CountedUsage>,
    ) -> Result<()> {
        let mut sql = Sql::new(
            "SELECT u.model, u.input_tokens, u.output_tokens, u.cache_write_5m_tokens,
                    u.cache_write_1h_tokens, u.cache_read_tokens, u.price_usd, u.at_ms,
                    u.agent_runtime, u.user_id, u.conversation, u.machine, u.project, CASE WHEN ",
        );
        sql.readable_by(viewer);
        sql.push(
            " THEN 1 ELSE 0 END
             FROM usage u JOIN runs ON runs.id = u.run_id WHERE u.counted = 1 AND ",
        );
        match viewer.readability().usage_counted(reach) {
            Some(rule) => sql.rule(&rule),
            None => sql.push("1"),
        };
        // A fact's owner is its run's (what lets the index find a member's).
        if let Some(user) = &piece.owner {
            sql.and("u.user_id = ?1", user.clone());
        }
        for user in &piece.except {
            sql.and("u.user_id != ?1", user.clone());
        }
        if let Some(agent) = filter.agent {
            sql.and("u.agent_runtime = ?1", agent.as_str().to_owned());
        }
        // One bound each way, so that the index range is the narrowest
        // (SQLite takes one of two lower bounds for the range, and filters
        // by the other).
        if let Some(from) = [filter.since_ms, piece.from].into_iter().flatten().max() {
            sql.and("u.at_ms >= ?1", from);
        }
        if let Some(before) = [filter.until_ms, piece.before].into_iter().flatten().min() {
            sql.and("u.at_ms < ?1", before);
        }
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(sql.text())?;
        let mut rows = stmt.query(sql.params())?;
        while let Some(r) = rows.next()? {
            let readable: bool = r.get(13)?;
            let at_ms = r.get(7)?;
            let user = r.get_ref(9)?.as_str().map_err(rusqlite::Error::from)?;
            let person = names.person(user);
            out.push(CountedUsage {
                model: names.optional(r, 0)?,
                figures: Figures::of(tokens_at(r, 1)?, r.get(6)?),
                first_ms: at_ms,
                last_ms: at_ms,
                quarters: Vec::new(),
                agent_runtime: names.column(r, 8)?,
                person,
                work: (readable && filter.work)
                    .then(|| names.work(r, 10))
                    .transpose()?,
            });
        }
        Ok(())
    }

    /// Prices every fact at `table` again when they were priced at another
    /// (a price given in central's config changed, a kith with a newer
    /// table, a registry of a kith that priced none), and sums the reports'
    /// hours again (then, and when their layout changed): once, at start.
    pub fn keep_priced(&self, table: &PriceTable) -> Result<()> {
        // Summed again too when the sums' layout changed.
        let fingerprint = format!("{} {LAYOUT}", table.fingerprint());
        if self.usage_prices()?.as_deref() != Some(fingerprint.as_str()) {
            tracing::info!(
                "pricing usage at the price table of {} and summing its hours",
                table.as_of()
            );
            self.reprice_usage(&fingerprint, |fact| cost(fact, table))?;
        }
        Ok(())
    }

    /// The fingerprint of the price table the facts' `price_usd` was
    /// priced at, `None` before any (a registry of an older kith).
    fn usage_prices(&self) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT fingerprint FROM usage_prices WHERE id = 1",
                [],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Prices every fact again by `price` (the table whose fingerprint is
    /// `fingerprint`), counts each again and sums every hour again, in one
    /// transaction.
    fn reprice_usage(
        &self,
        fingerprint: &str,
        price: impl Fn(&UsageFact) -> Option<f64>,
    ) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        {
            let facts: Vec<UsageRow> = tx
                .prepare(&format!("SELECT {READ} FROM usage"))?
                .query_map([], row_of)?
                .collect::<rusqlite::Result<_>>()?;
            let mut update = tx.prepare("UPDATE usage SET price_usd = ?2 WHERE id = ?1")?;
            for row in facts {
                let now = price(&row.fact);
                if now != row.priced_usd {
                    update.execute(params![row.id, now])?;
                }
            }
        }
        super::usage_hours::rebuild(&tx)?;
        tx.execute(
            "INSERT INTO usage_prices (id, fingerprint) VALUES (1, ?1)
             ON CONFLICT (id) DO UPDATE SET fingerprint = excluded.fingerprint",
            [fingerprint],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Usage records refused in the conversations a report of `reach`
    /// counts (of one agent's, with `agent`).
    pub fn usage_refused(
        &self,
        viewer: &Viewer,
        reach: UsageReach,
        agent: Option<AgentRuntime>,
    ) -> Result<u64> {
        let mut sql = Sql::new("SELECT COALESCE(SUM(f.n_refused), 0) FROM usage_folds f WHERE ");
        match viewer.readability().usage_counted(reach) {
            // A fold's owner is its runs' (what spares a lookup of a run
            // for each of a year's conversations).
            Some(Rule::Owner(user)) => sql.push("f.user_id = ").bind(user),
            Some(rule) => sql
                .push("EXISTS (SELECT 1 FROM runs WHERE runs.conversation = f.conversation AND ")
                .rule(&rule)
                .push(")"),
            None => sql.push("1"),
        };
        if let Some(agent) = agent {
            sql.and("f.agent_runtime = ?1", agent.as_str().to_owned());
        }
        let n: i64 = self
            .reader()
            .prepare_cached(sql.text())?
            .query_row(sql.params(), |r| r.get(0))?;
        Ok(count(n))
    }
}

#[cfg(test)]
mod tests {
    use kith_shared::ids::UserId;

    use super::*;
    use crate::registry::{Lane, NewRun};
    use crate::run::Run;

    fn registry() -> (tempfile::TempDir, Registry) {
        let tmp = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let registry =
            Registry::open(&tmp.path().join("registry.sqlite")).unwrap_or_else(|e| panic!("{e}"));
        (tmp, registry)
    }

    fn viewer(user: &str) -> Viewer {
        let id = UserId::parse(user).unwrap_or_else(|e| panic!("{e}"));
        Viewer::new(id, None, user.to_owned(), false)
    }

    fn run(id: &str, owner: &str, conversation: &str, source: &str) -> Run {
        let mut run = Run::for_tests(id, owner);
        run.conversation = Some(conversation.to_owned());
        run.source_identity = source.to_owned();
        run
    }

    fn fact(key: &str, merge: Merge, output: u64) -> UsageFact {
        UsageFact {
            key: key.to_owned(),
            merge,
            model: Some("claude-opus-4-6".to_owned()),
            time: Some("2026-05-01T10:00:00.000Z".to_owned()),
            tokens: Tokens {
                input: 1,
                output,
                ..Tokens::default()
            },
            n_requests: Some(1),
            cost_usd: None,
        }
    }

    fn usage_of(run: &Run, facts: &[(UsageFact, &str)]) -> ConversationUsage {
        ConversationUsage {
            conversation: run.conversation.clone().unwrap_or_default(),
            user_id: run.user_id.clone(),
            agent_runtime: run.agent_runtime,
            transcript: crate::registry::transcript_of(&run.source_identity)
                .unwrap_or_default()
                .to_owned(),
            rows: facts
                .iter()
                .map(|(fact, run_id)| UsageRow {
                    id: None,
                    fact: fact.clone(),
                    run_id: (*run_id).to_owned(),
                    machine: "box".to_owned(),
                    project: None,
                    at: "2026-05-01T10:00:00.000Z".to_owned(),
                    priced_usd: Some(0.5),
                })
                .collect(),
            complete: true,
            n_refused: 1,
            running: None,
            context: None,
            carried: None,
        }
    }

    /// Stores `run` and counts its delta as `usage`, as a settle does.
    fn insert(registry: &Registry, run: &Run, usage: &ConversationUsage) {
        registry
            .insert_run(&NewRun {
                run,
                ancestry: &format!("|{}|", run.id),
                blob_path: "b",
                idempotency_key: None,
                lane: Lane::Realtime,
            })
            .unwrap_or_else(|e| panic!("{e}"));
        registry
            .settle_usage(&[SettledUsage {
                runs: vec![run.id.clone()],
                usage: Some(usage.clone()),
            }])
            .unwrap_or_else(|e| panic!("{e}"));
    }

    /// Output tokens counted for `who`, by conversation.
    fn outputs(registry: &Registry, who: &Viewer) -> Vec<(String, u64)> {
        outputs_in(
            registry,
            who,
            &UsageFilter {
                work: true,
                ..UsageFilter::default()
            },
        )
    }

    fn outputs_in(registry: &Registry, who: &Viewer, filter: &UsageFilter) -> Vec<(String, u64)> {
        let mut by = std::collections::BTreeMap::new();
        for u in registry
            .usage(who, UsageReach::Own, filter)
            .unwrap_or_else(|e| panic!("{e}"))
        {
            let c = u
                .work
                .map(|w| w.conversation.to_string())
                .unwrap_or_default();
            *by.entry(c).or_default() += u.figures.tokens.output;
        }
        by.into_iter().collect()
    }

    fn c(conversation: &str, output: u64) -> (String, u64) {
        (conversation.to_owned(), output)
    }

    #[test]
    fn a_conversations_rows_follow_its_fold_and_only_their_owner_reads_them() {
        let (_tmp, registry) = registry();
        let (alice, bob) = (viewer("ualice"), viewer("ubob"));
        let r1 = run("r1", "ualice", "c1", "s#1");
        insert(
            &registry,
            &r1,
            &usage_of(&r1, &[(fact("m1", Merge::Last, 5), "r1")]),
        );
        // The next delta streams m1 on (its last figures) and adds m2.
        let r2 = run("r2", "ualice", "c1", "s#1");
        let after = usage_of(
            &r2,
            &[
                (fact("m1", Merge::Last, 9), "r2"),
                (fact("m2", Merge::Last, 3), "r2"),
            ],
        );
        insert(&registry, &r2, &after);
        // m1 once, with its last figures: 9 + 3.
        assert_eq!(outputs(&registry, &alice), [c("c1", 12)]);
        // What a next delta repeating m2 may change: m2's row, not m1's.
        let next = Reading {
            facts: vec![fact("m2", Merge::Last, 4)],
            ..Reading::default()
        };
        let read = registry
            .conversation_usage(&alice, "c1", "s#", std::slice::from_ref(&next))
            .unwrap_or_else(|e| panic!("{e}"))
            .unwrap_or_else(|| panic!("alice's fold"));
        assert!(!read.complete);
        assert_eq!(read.n_refused, 1);
        let facts: Vec<&UsageFact> = read.rows.iter().map(|r| &r.fact).collect();
        assert_eq!(facts, [&after.rows[1].fact]);
        assert_eq!(
            registry.usage_refused(&alice, UsageReach::Own, None).ok(),
            Some(1)
        );
        // Never another member's.
        assert!(outputs(&registry, &bob).is_empty());
        assert_eq!(
            registry
                .conversation_usage(&bob, "c1", "s#1", std::slice::from_ref(&next))
                .ok(),
            Some(None)
        );
        assert_eq!(
            registry.usage_refused(&bob, UsageReach::Own, None).ok(),
            Some(0)
        );
        // Forgotten with its runs.
        registry
            .finish_forget(&["r1".to_owned(), "r2".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(outputs(&registry, &alice).is_empty());
        assert_eq!(
            registry.usage_refused(&alice, UsageReach::Own, None).ok(),
            Some(0)
        );
    }

    #[test]
    fn a_delta_is_counted_once_for_its_owner_and_not_once_its_run_is_gone() {
        let (_tmp, registry) = registry();
        for (id, handle) in [("ualice", "alice.test"), ("ubob", "bob.test")] {
            registry
                .add_user(&super::super::UserRow {
                    id: UserId::parse(id).unwrap_or_else(|e| panic!("{e}")),
                    handle: handle.to_owned(),
                    did: None,
                    pds_url: None,
                    is_admin: false,
                    created_at: kith_shared::timestamp::now(),
                })
                .unwrap_or_else(|e| panic!("{e}"));
        }
        let (alice, bob) = (viewer("ualice"), viewer("ubob"));
        let r1 = run("r1", "ualice", "c1", "/s.jsonl#1:1:0");
        let r2 = run("r2", "ualice", "c2", "/t.jsonl#1:1:0");
        let r3 = run("r3", "ubob", "c3", "/u.jsonl#1:1:0");
        // A run whose owner is no member (any more).
        let r4 = run("r4", "ucarol", "c4", "/v.jsonl#1:1:0");
        for r in [&r1, &r2, &r3, &r4] {
            registry
                .insert_run(&NewRun {
                    run: r,
                    ancestry: &format!("|{}|", r.id),
                    blob_path: "b",
                    idempotency_key: None,
                    lane: Lane::Realtime,
                })
                .unwrap_or_else(|e| panic!("{e}"));
        }
        // Each pending run with its own owner, in the order they came.
        let pending = |limit| -> Vec<(String, Option<String>)> {
            registry
                .pending_usage(limit)
                .unwrap_or_else(|e| panic!("{e}"))
                .into_iter()
                .map(|(id, p)| (id, p.map(|p| p.owner.handle().to_owned())))
                .collect()
        };
        let of = |id: &str, owner: Option<&str>| (id.to_owned(), owner.map(str::to_owned));
        assert_eq!(
            pending(10),
            [
                of("r1", Some("alice.test")),
                of("r2", Some("alice.test")),
                of("r3", Some("bob.test")),
                of("r4", None),
            ]
        );
        assert_eq!(pending(1), [of("r1", Some("alice.test"))]);
        assert!(outputs(&registry, &alice).is_empty(), "nothing counted yet");
        // Two settles that read the same pending delta: the second, whose
        // fold is of what is counted no more, writes nothing. Counted for
        // its owner, never for another member.
        let first = [SettledUsage {
            runs: vec!["r1".to_owned()],
            usage: Some(usage_of(&r1, &[(fact("m1", Merge::Last, 10), "r1")])),
        }];
        for _ in 0..2 {
            registry
                .settle_usage(&first)
                .unwrap_or_else(|e| panic!("{e}"));
        }
        registry
            .settle_usage(&[
                SettledUsage {
                    runs: vec!["r3".to_owned()],
                    usage: Some(usage_of(&r3, &[(fact("m3", Merge::Last, 5), "r3")])),
                },
                // What `settle` makes of a run with no owner: nothing counted.
                SettledUsage {
                    runs: vec!["r4".to_owned()],
                    usage: None,
                },
            ])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outputs(&registry, &alice), [c("c1", 10)]);
        assert_eq!(outputs(&registry, &bob), [c("c3", 5)]);
        assert_eq!(pending(10), [of("r2", Some("alice.test"))]);
        // A delta forgotten between its reading and its writing is not
        // counted: its conversation's usage stays gone.
        registry
            .finish_forget(&["r2".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(pending(10).is_empty());
        registry
            .settle_usage(&[SettledUsage {
                runs: vec!["r2".to_owned()],
                usage: Some(usage_of(&r2, &[(fact("m2", Merge::Last, 7), "r2")])),
            }])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outputs(&registry, &alice), [c("c1", 10)]);
    }

    #[test]
    fn a_response_in_two_conversations_counts_once_as_its_newest_copy() {
        let (_tmp, registry) = registry();
        let alice = viewer("ualice");
        // A Claude message repeated in a subagent's transcript, and an
        // Each fact of a transcript captured again as a new chain.
        let r1 = run("r1", "ualice", "c1", "/p/a.jsonl#1:1:0");
        insert(
            &registry,
            &r1,
            &usage_of(
                &r1,
                &[
                    (fact("msg", Merge::Last, 5), "r1"),
                    (fact("e1", Merge::Each, 7), "r1"),
                    (fact("e2", Merge::Each, 11), "r1"),
                ],
            ),
        );
        let r2 = run("r2", "ualice", "c2", "/p/a.jsonl#1:1:1");
        insert(
            &registry,
            &r2,
            &usage_of(&r2, &[(fact("e1", Merge::Each, 7), "r2")]),
        );
        let r3 = run("r3", "ualice", "c3", "/p/sub.jsonl#1:2:0");
        insert(
            &registry,
            &r3,
            &usage_of(
                &r3,
                &[
                    (fact("msg", Merge::Last, 6), "r3"),
                    // Another transcript's `e2` is another response.
                    (fact("e2", Merge::Each, 11), "r3"),
                ],
            ),
        );
        // msg counts in c3 (6), e1 in c2 (7), each e2 in its own.
        assert_eq!(
            outputs(&registry, &alice),
            [c("c1", 11), c("c2", 7), c("c3", 17)]
        );
        // Its newest copy forgotten, a response counts as the copy left.
        registry
            .finish_forget(&["r3".to_owned()])
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(outputs(&registry, &alice), [c("c1", 16), c("c2", 7)]);
    }

    #[test]
    fn summed_hours_count_what_the_facts_count_in_any_range() {
        let (_tmp, registry) = registry();
        let alice = viewer("ualice");
        let r1 = run("r1", "ualice", "c1", "s#1");
        // Facts across three hours: at an hour's first millisecond, in
        // several quarters of one hour, and a millisecond before the next.
        let times = [
            "2026-05-01T10:00:00.000Z",
            "2026-05-01T10:00:00.001Z",
            "2026-05-01T10:14:59.999Z",
            "2026-05-01T10:15:00.000Z",
            "2026-05-01T10:44:00.000Z",
            "2026-05-01T10:59:59.999Z",
            "2026-05-01T11:00:00.000Z",
            "2026-05-01T12:30:00.000Z",
        ];
        let mut usage = usage_of(&r1, &[]);
        for (i, at) in times.iter().enumerate() {
            usage.rows.push(UsageRow {
                id: None,
                fact: fact(&format!("m{i}"), Merge::Last, 1 << i),
                run_id: "r1".to_owned(),
                machine: "box".to_owned(),
                project: None,
                at: (*at).to_owned(),
                priced_usd: Some(1.0),
            });
        }
        insert(&registry, &r1, &usage);
        let ms: Vec<i64> = times.iter().map(|t| epoch_ms(t)).collect();
        let sum_between = |since: Option<i64>, until: Option<i64>| -> u64 {
            ms.iter()
                .enumerate()
                .filter(|(_, at)| since.is_none_or(|s| **at >= s) && until.is_none_or(|u| **at < u))
                .map(|(i, _)| 1u64 << i)
                .sum()
        };
        let mut bounds: Vec<Option<i64>> = vec![None];
        for at in &ms {
            bounds.extend([Some(at - 1), Some(*at), Some(at + 1)]);
        }
        for since in &bounds {
            for until in &bounds {
                let filter = UsageFilter {
                    since_ms: *since,
                    until_ms: *until,
                    work: true,
                    ..UsageFilter::default()
                };
                let want = sum_between(*since, *until);
                let got: u64 = outputs_in(&registry, &alice, &filter)
                    .iter()
                    .map(|(_, n)| n)
                    .sum();
                assert_eq!(got, want, "since {since:?} until {until:?}");
            }
        }
        // The 10:00 hour: its first millisecond apart, the rest with each
        // quarter's figures.
        let counted = registry
            .usage(&alice, UsageReach::Own, &UsageFilter::default())
            .unwrap_or_else(|e| panic!("{e}"));
        let ten: Vec<&CountedUsage> = counted
            .iter()
            .filter(|u| hour_of(u.first_ms) == hour_of(ms[0]))
            .collect();
        assert_eq!(ten.len(), 2);
        let edge = ten.iter().find(|u| u.first_ms == ms[0]);
        assert_eq!(
            edge.map(|u| (u.last_ms, u.figures.tokens.output)),
            Some((ms[0], 1))
        );
        let rest = ten.iter().find(|u| u.first_ms != ms[0]);
        assert_eq!(rest.map(|u| (u.first_ms, u.last_ms)), Some((ms[1], ms[5])));
        let quarters: Vec<(i64, u64)> = rest
            .map(|u| {
                u.quarters
                    .iter()
                    .map(|(q, f)| (*q, f.tokens.output))
                    .collect()
            })
            .unwrap_or_default();
        assert_eq!(
            quarters,
            [
                (ms[0], 2 | 4),
                (ms[3], 8),
                (ms[3] + 900_000, 16),
                (ms[3] + 1_800_000, 32)
            ]
        );
        assert!(rest.is_some_and(|u| u.figures.cost_usd == 5.0 && u.figures.n_unpriced == 0));
    }

    #[test]
    fn repricing_changes_every_fact_and_sum_and_is_recorded() {
        let (_tmp, registry) = registry();
        let alice = viewer("ualice");
        let r1 = run("r1", "ualice", "c1", "s#1");
        insert(
            &registry,
            &r1,
            &usage_of(
                &r1,
                &[
                    (fact("m1", Merge::Last, 5), "r1"),
                    (fact("m2", Merge::Last, 7), "r1"),
                ],
            ),
        );
        let cost = |r: &Registry| -> (f64, u64) {
            let all = r
                .usage(&alice, UsageReach::Own, &UsageFilter::default())
                .unwrap_or_else(|e| panic!("{e}"));
            (
                all.iter().map(|u| u.figures.cost_usd).sum(),
                all.iter().map(|u| u.figures.n_unpriced).sum(),
            )
        };
        assert_eq!(cost(&registry), (1.0, 0));
        assert_eq!(registry.usage_prices().ok(), Some(None));
        registry
            .reprice_usage("table-b", |f| (f.tokens.output == 5).then_some(2.0))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cost(&registry), (2.0, 1));
        assert_eq!(
            registry.usage_prices().ok(),
            Some(Some("table-b".to_owned()))
        );
    }
}
