//! The `forgotten` and `forgotten_lines` tables: tombstones of the runs
//! their owner forgot. A tombstone keeps no text: where the bytes came from
//! (source chain, byte range, the chain hash at their end), so the
//! transcript's later bytes start a conversation of their own, and the
//! sha256 of each line, so ingest drops those lines when an agent sends
//! them again, on this chain or on a new one (a lost cursor, a rewrite).
//! The runs' rows go last (`finish_forget`): until then a forget is
//! unfinished, which `doctor` reports and a second forget ends.

use rusqlite::{params, OptionalExtension};

use super::{to_i64, Registry, Sql, StoredRun, Viewer};
use crate::conversation::ConversationId;
use crate::error::{Error, Result};
use crate::privacy::Operator;

/// Who asks to forget: the owner through a token, or the operator on the
/// server (`kith-central forget`).
#[derive(Debug, Clone, Copy)]
pub enum Forgetter<'a> {
    Owner(&'a Viewer),
    Admin(&'a Operator),
}

impl Forgetter<'_> {
    /// Who the audit entry names: the owner's user id, or the server.
    pub fn audit_name(&self) -> String {
        match self {
            Forgetter::Owner(v) => v.user_id().to_string(),
            Forgetter::Admin(_) => "kith-central".to_owned(),
        }
    }
}

/// A conversation to forget and every run that goes with it: its own and
/// those of the subagents under it.
#[derive(Debug, Clone)]
pub struct ForgetSet {
    pub conversation: ConversationId,
    pub runs: Vec<StoredRun>,
}

impl ForgetSet {
    pub fn run_ids(&self) -> Vec<String> {
        self.runs.iter().map(|r| r.run.id.clone()).collect()
    }

    pub fn n_conversations(&self) -> usize {
        let mut ids: Vec<&str> = self
            .runs
            .iter()
            .filter_map(|r| r.run.conversation.as_deref())
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids.len()
    }
}

/// The sha256 of each line of a blob (with its newline) but the blank ones,
/// as `forgotten_lines` keeps them.
pub fn line_hashes(jsonl: &[u8]) -> Vec<String> {
    jsonl
        .split_inclusive(|&b| b == b'\n')
        .filter(|line| !line.trim_ascii().is_empty())
        .map(kith_shared::hash::sha256_hex)
        .collect()
}

/// A forgotten run's place in its source chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tombstone {
    pub run_id: String,
    /// The chain hash at the run's end: what the chain's next delta extends.
    pub chain_sha256: String,
}

impl Registry {
    /// The conversation `name` names and the runs forgetting it deletes.
    /// An owner names it as for reading (`resolve_conversation`) and must
    /// own it: another's conversation, shared or not, is not found, like an
    /// unknown one. The operator names it by a whole conversation or run id.
    pub fn forget_set(&self, who: Forgetter<'_>, name: &str) -> Result<ForgetSet> {
        let mut first = Sql::new("WHERE conversation = ");
        let conversation = match who {
            Forgetter::Owner(viewer) => {
                let id = self.resolve_conversation(viewer, name)?;
                first
                    .bind(id.as_str().to_owned())
                    .push(" AND ")
                    .owned_by(viewer);
                id
            }
            Forgetter::Admin(_) => {
                let found: Option<String> = self
                    .reader()
                    .prepare_cached(
                        "SELECT conversation FROM runs WHERE id = ?1 OR conversation = ?1 LIMIT 1",
                    )?
                    .query_row([name.trim()], |r| r.get(0))
                    .optional()?;
                let id = ConversationId::parse(&found.ok_or_else(Error::conversation_not_found)?)?;
                first.bind(id.as_str().to_owned());
                id
            }
        };
        // The conversation's first delta: every later delta and every
        // subagent descends from it.
        first.push(" ORDER BY from_offset LIMIT 1");
        let first = self
            .query_runs_lean(&first)?
            .into_iter()
            .next()
            .ok_or_else(Error::conversation_not_found)?;
        let mut runs = Sql::new("WHERE user_id = ");
        runs.bind(first.run.user_id.clone())
            .push(" AND instr(ancestry, ")
            .bind(format!("|{}|", first.run.id))
            .push(") > 0 ORDER BY started_at, id");
        let runs = self.query_runs_lean(&runs)?;
        Ok(ForgetSet { conversation, runs })
    }

    /// The first step of a forget, in one transaction: tombstones for the
    /// runs and the hashes of their lines (`lines`, by run, from the blobs
    /// still there), their indexing jobs dropped (the indexer must not put
    /// them back), and the audit entry (who, which conversation, when; no
    /// text).
    pub fn begin_forget(&self, set: &ForgetSet, lines: &[Vec<String>], by: &str) -> Result<()> {
        let now = kith_shared::timestamp::now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (run, hashes) in set.runs.iter().zip(lines) {
            let m = &run.run;
            for hash in hashes {
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO forgotten_lines (user_id, line_sha256, run_id)
                     VALUES (?1, ?2, ?3)",
                )?
                .execute(params![m.user_id, hash, m.id])?;
            }
            tx.prepare_cached(
                "INSERT OR IGNORE INTO forgotten (run_id, user_id, source_identity, from_offset,
                     to_offset, chain_sha256, conversation, forgotten_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?
            .execute(params![
                m.id,
                m.user_id,
                m.source_identity,
                to_i64(m.from_offset),
                to_i64(m.to_offset),
                m.chain_sha256,
                m.conversation,
                now
            ])?;
            tx.prepare_cached("DELETE FROM index_jobs WHERE run_id = ?1")?
                .execute([&m.id])?;
        }
        if let Some(owner) = set.runs.first().map(|r| r.run.user_id.as_str()) {
            tx.execute(
                "INSERT INTO audit (owner, reader, run_id, what, at) VALUES (?1, ?2, ?3, 'forget', ?4)",
                params![owner, by, set.conversation.as_str(), now],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// The last step of a forget: the runs' rows and the run grants on them.
    pub fn finish_forget(&self, run_ids: &[String]) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for id in run_ids {
            super::usage::forget_run(&tx, id)?;
            tx.prepare_cached("DELETE FROM runs WHERE id = ?1")?
                .execute([id])?;
            tx.prepare_cached("DELETE FROM shares WHERE scope_kind = 'run' AND scope_value = ?1")?
                .execute([id])?;
        }
        tx.commit()?;
        // The WAL still holds the pages as they were: copied back and
        // emptied now, the forgotten text is on no page of the registry.
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        Ok(())
    }

    /// Of these runs, those forgotten (a worker that put one in the index
    /// while it was being forgotten takes it out again).
    pub fn forgotten_among(&self, run_ids: &[String]) -> Result<Vec<String>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached("SELECT 1 FROM forgotten WHERE run_id = ?1")?;
        let mut out = Vec::new();
        for id in run_ids {
            if stmt.exists([id])? {
                out.push(id.clone());
            }
        }
        Ok(out)
    }

    /// Whether `user` forgot the run `run_id` (a delta naming it as parent
    /// starts a tree of its own).
    pub fn forgot(&self, user: &str, run_id: &str) -> Result<bool> {
        Ok(self
            .reader()
            .prepare_cached("SELECT 1 FROM forgotten WHERE run_id = ?1 AND user_id = ?2")?
            .exists(params![run_id, user])?)
    }

    /// The forgotten run of a source chain that ended at `offset`.
    pub fn tombstone_ending_at(
        &self,
        user: &str,
        source: &str,
        offset: u64,
    ) -> Result<Option<Tombstone>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT run_id, chain_sha256 FROM forgotten
             WHERE user_id = ?1 AND source_identity = ?2 AND to_offset = ?3",
        )?;
        let found = stmt
            .query_map(params![user, source, to_i64(offset)], |r| {
                Ok(Tombstone {
                    run_id: r.get(0)?,
                    chain_sha256: r.get(1)?,
                })
            })?
            .next()
            .transpose()?;
        Ok(found)
    }

    /// How many leading bytes of `jsonl` are lines `user` forgot, and the
    /// run the first of them was forgotten with. A blank line says nothing
    /// (every transcript has them): it joins the forgotten lines around it
    /// and is never one alone. Each line is hashed as it is reached.
    pub fn forgotten_prefix(&self, user: &str, jsonl: &[u8]) -> Result<(usize, Option<String>)> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT run_id FROM forgotten_lines WHERE user_id = ?1 AND line_sha256 = ?2",
        )?;
        // Bytes forgotten so far, and blank ones after them.
        let (mut at, mut blank, mut first) = (0, 0, None);
        for line in jsonl.split_inclusive(|&b| b == b'\n') {
            if line.trim_ascii().is_empty() {
                blank += line.len();
                continue;
            }
            let hash = kith_shared::hash::sha256_hex(line);
            let run: Option<String> = stmt
                .query_map(params![user, hash], |r| r.get(0))?
                .next()
                .transpose()?;
            let Some(run) = run else {
                return Ok((at, first));
            };
            first.get_or_insert(run);
            at += blank + line.len();
            blank = 0;
        }
        // Blank lines at the end follow forgotten ones, if any.
        if first.is_some() {
            at += blank;
        }
        Ok((at, first))
    }

    /// Takes the tombstones of another registry file (a backup's copy of
    /// this family's registry): what was forgotten there is forgotten here,
    /// its lines refused as they are there. How many were new here.
    pub fn adopt_tombstones(&self, other: &std::path::Path) -> Result<u64> {
        let conn = self.conn();
        conn.execute(
            "ATTACH DATABASE ?1 AS other",
            [super::file::immutable_uri(other)?],
        )?;
        let adopted = (|| -> Result<u64> {
            let n = conn.execute(
                "INSERT OR IGNORE INTO forgotten (run_id, user_id, source_identity, from_offset,
                     to_offset, chain_sha256, conversation, forgotten_at)
                 SELECT run_id, user_id, source_identity, from_offset, to_offset, chain_sha256,
                        conversation, forgotten_at
                 FROM other.forgotten",
                [],
            )?;
            conn.execute(
                "INSERT OR IGNORE INTO forgotten_lines (user_id, line_sha256, run_id)
                 SELECT user_id, line_sha256, run_id FROM other.forgotten_lines",
                [],
            )?;
            Ok(n as u64)
        })();
        conn.execute("DETACH DATABASE other", [])?;
        adopted
    }

    /// Takes whole tombstones (a backup folder's): their runs forgotten
    /// here, their lines refused. How many were new here.
    pub fn put_tombstones(&self, records: &[super::TombstoneRecord]) -> Result<u64> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let mut n = 0;
        for t in records {
            n += tx
                .prepare_cached(
                    "INSERT OR IGNORE INTO forgotten (run_id, user_id, source_identity,
                         from_offset, to_offset, chain_sha256, conversation, forgotten_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )?
                .execute(params![
                    t.run_id,
                    t.user_id,
                    t.source_identity,
                    to_i64(t.from_offset),
                    to_i64(t.to_offset),
                    t.chain_sha256,
                    t.conversation,
                    t.forgotten_at
                ])? as u64;
            for hash in &t.line_sha256 {
                tx.prepare_cached(
                    "INSERT OR IGNORE INTO forgotten_lines (user_id, line_sha256, run_id)
                     VALUES (?1, ?2, ?3)",
                )?
                .execute(params![t.user_id, hash, t.run_id])?;
            }
        }
        tx.commit()?;
        Ok(n)
    }

    /// Every forgotten run's id.
    pub fn forgotten_runs(&self, _: &Operator) -> Result<std::collections::HashSet<String>> {
        let conn = self.reader();
        let mut stmt = conn.prepare("SELECT run_id FROM forgotten")?;
        let ids = stmt
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(ids)
    }

    /// Runs forgotten but still in the catalog: a forget that stopped
    /// midway (for `doctor`; forgetting the conversation again ends it).
    pub fn unfinished_forgets(&self) -> Result<Vec<String>> {
        let conn = self.reader();
        let mut stmt = conn
            .prepare("SELECT r.id FROM runs r JOIN forgotten f ON f.run_id = r.id ORDER BY r.id")?;
        let rows = stmt
            .query_map([], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tombstones_of_another_copy_are_taken_once_with_their_lines() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let newer = dir.path().join("newer.sqlite");
        {
            let registry = Registry::open(&newer)?;
            registry.conn().execute_batch(
                "INSERT INTO forgotten (run_id, user_id, source_identity, from_offset, to_offset,
                     chain_sha256, conversation, forgotten_at)
                 VALUES ('r1', 'u1', 's', 0, 10, 'c1', 'c0', '2026-05-11T00:00:00.000Z');
                 INSERT INTO forgotten_lines (user_id, line_sha256, run_id)
                 VALUES ('u1', 'h1', 'r1');
                 PRAGMA wal_checkpoint(TRUNCATE);",
            )?;
        }
        let older = Registry::open(&dir.path().join("older.sqlite"))?;
        let operator = Operator::for_operator_commands();
        assert!(older.forgotten_runs(&operator)?.is_empty());
        assert_eq!(older.adopt_tombstones(&newer)?, 1);
        assert_eq!(older.adopt_tombstones(&newer)?, 0, "taken once");
        assert!(older.forgotten_runs(&operator)?.contains("r1"));
        assert!(older.forgot("u1", "r1")?);
        let line: Option<String> = older
            .reader()
            .query_row(
                "SELECT run_id FROM forgotten_lines WHERE user_id = 'u1' AND line_sha256 = 'h1'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        assert_eq!(
            line.as_deref(),
            Some("r1"),
            "its lines are refused here too"
        );
        Ok(())
    }
}
