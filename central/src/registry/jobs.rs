//! The `index_jobs` table and the vector state of runs: what still needs
//! indexing, which runs wait for vectors on which lane, and in what order
//! (members in turn, `take_turns`).

use rusqlite::{params, OptionalExtension};

use super::{epoch_ms_or, parse_id, to_i64, Registry};
use crate::error::Result;
use crate::index::Standing;
use kith_shared::ids::{RunId, UserId};

/// A run as the index now holds it: its chunks, and (for a run of a chain
/// that `indexer::worker::index_chain` reads whole) their digest.
#[derive(Debug, Clone)]
pub struct Indexed {
    pub run: RunId,
    pub n_chunks: u64,
    /// Chunks past `indexer::cap::MAX_CHUNKS_PER_RUN`, left out of the index.
    pub n_cut: u64,
    pub digest: Option<String>,
}

/// A run waiting to be indexed.
#[derive(Debug, Clone)]
pub struct PendingJob {
    pub run_id: RunId,
    pub blob_path: String,
    /// The run's row as the index filters on it.
    pub standing: Standing,
    /// Counts the job's enqueues: one enqueued again while a batch indexes
    /// it is left for the next batch (`finish_jobs`).
    pub version: i64,
}

/// Over a transaction: `run` waits for indexing on `lane`, from `at`. A job
/// already waiting for it takes the new lane and time, starts its attempts
/// over, and counts one more version.
pub(super) fn enqueue(
    tx: &rusqlite::Transaction<'_>,
    run: &str,
    lane: Lane,
    at: &str,
) -> rusqlite::Result<()> {
    tx.prepare_cached(
        "INSERT INTO index_jobs (run_id, user_id, lane, enqueued_at)
         VALUES (?1, (SELECT user_id FROM runs WHERE id = ?1), ?2, ?3)
         ON CONFLICT (run_id) DO UPDATE SET lane = excluded.lane,
             enqueued_at = excluded.enqueued_at, attempts = 0, last_error = NULL,
             version = version + 1",
    )?
    .execute(params![run, lane.as_str(), at])?;
    Ok(())
}

/// Lanes of the durable indexing jobs and of the runs waiting for vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    Realtime,
    Bulk,
}

impl Lane {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Lane::Realtime => "ingest-realtime",
            Lane::Bulk => "ingest-bulk",
        }
    }
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

/// Up to `limit` items of `queues` (each one member's, in its own order,
/// each item with its sort key): every queue's first, then every queue's
/// second, ..., each round in key order.
fn take_turns<K: Ord, T>(queues: Vec<Vec<(K, T)>>, limit: usize) -> Vec<T> {
    let mut queues: Vec<_> = queues.into_iter().map(Vec::into_iter).collect();
    let mut out = Vec::new();
    while out.len() < limit {
        let mut round: Vec<(K, T)> = queues.iter_mut().filter_map(Iterator::next).collect();
        if round.is_empty() {
            break;
        }
        round.sort_by(|a, b| a.0.cmp(&b.0));
        out.extend(round.into_iter().map(|(_, item)| item));
    }
    out.truncate(limit);
    out
}

impl Registry {
    /// Pending jobs that failed fewer than `max_attempts` times, realtime
    /// lane first; within a lane, members take turns (`take_turns`), so a
    /// member's backlog of a thousand jobs takes one place per round of a
    /// batch, not the batch. A few indexed reads per member with jobs,
    /// however many wait (`index_jobs_turns`).
    pub fn pending_jobs_below(&self, limit: u32, max_attempts: i64) -> Result<Vec<PendingJob>> {
        let conn = self.reader();
        let members = conn
            .prepare_cached("SELECT DISTINCT user_id FROM index_jobs")?
            .query_map([], |r| r.get::<_, Option<String>>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let mut stmt = conn.prepare_cached(
            "SELECT j.run_id, r.blob_path, r.ancestry, r.superseded, r.quarantined, r.captured_at,
                    j.version, j.enqueued_at
             FROM index_jobs j JOIN runs r ON r.id = j.run_id
             WHERE j.user_id IS ?1 AND j.lane = ?2 AND j.attempts < ?3
             ORDER BY j.enqueued_at, j.run_id
             LIMIT ?4",
        )?;
        let mut picked = Vec::new();
        for lane in [Lane::Realtime, Lane::Bulk] {
            let room = (limit as usize).saturating_sub(picked.len());
            if room == 0 {
                break;
            }
            let mut queues = Vec::with_capacity(members.len());
            for member in &members {
                let jobs = stmt
                    .query_map(params![member, lane.as_str(), max_attempts, room], |r| {
                        let (id, enqueued_at) = (r.get::<_, String>(0)?, r.get::<_, String>(7)?);
                        let captured_at = r.get::<_, String>(5)?;
                        let job = (
                            id,
                            r.get::<_, String>(1)?,
                            Standing {
                                ancestry: r.get(2)?,
                                superseded: r.get(3)?,
                                quarantined: r.get(4)?,
                                captured_ms: epoch_ms_or(&captured_at, 0),
                            },
                            r.get::<_, i64>(6)?,
                        );
                        Ok(((enqueued_at, job.0.clone()), job))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                queues.push(jobs);
            }
            picked.extend(take_turns(queues, room));
        }
        picked
            .into_iter()
            .map(|(id, blob_path, standing, version)| {
                Ok(PendingJob {
                    run_id: parse_id(RunId::parse(&id))?,
                    blob_path,
                    standing,
                    version,
                })
            })
            .collect()
    }

    /// These jobs are done (each with the version it was read at,
    /// `PendingJob::version`): their runs are searchable, with `n_chunks`
    /// chunks each; a job enqueued again meanwhile stays. One transaction (one sync of the log) for a whole
    /// indexing batch. A run indexed again (a superseded chain, a tag edit)
    /// waits for vectors again: both backends keep the vectors of the chunks
    /// whose text stayed, and the vectorizer embeds the rest.
    ///
    /// `chain` are the other runs of re-indexed chains (`indexer::worker::index_chain`)
    /// whose chunks changed: indexed again as well (a vectorizer still
    /// embedding their old chunks must not record them as embedded, see
    /// `set_embedded`), with their counts and digests, and their vectors to
    /// be made again; they keep their own jobs, if any.
    pub fn finish_jobs(
        &self,
        jobs: &[(Indexed, i64)],
        chain: &[Indexed],
        indexed_at: &str,
    ) -> Result<()> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for done in jobs.iter().map(|(done, _)| done).chain(chain) {
            tx.prepare_cached(
                "UPDATE runs SET indexed_at = ?2, n_chunks = ?3, chunks_digest = ?4,
                 chunks_cut = ?5, embedded_model = NULL, embedded_at = NULL WHERE id = ?1",
            )?
            .execute(params![
                done.run.as_str(),
                indexed_at,
                to_i64(done.n_chunks),
                done.digest,
                to_i64(done.n_cut),
            ])?;
        }
        for (done, version) in jobs {
            tx.prepare_cached("DELETE FROM index_jobs WHERE run_id = ?1 AND version = ?2")?
                .execute(params![done.run.as_str(), version])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Indexed runs of `lane` whose vectors are not from `model`, with when
    /// they were indexed; `realtime_since` as in `REALTIME`. Members take
    /// turns (`take_turns`: each one's newest run, then each one's second
    /// newest, ...), newest first within a turn, so one member's backlog
    /// never fills a round.
    pub fn runs_to_embed(
        &self,
        model: &str,
        lane: Lane,
        realtime_since: &str,
        limit: u32,
    ) -> Result<Vec<(RunId, String)>> {
        let conn = self.reader();
        let members = conn
            .prepare_cached("SELECT DISTINCT user_id FROM runs")?
            .query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        let negate = if lane == Lane::Bulk { "NOT" } else { "" };
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT id, indexed_at, captured_at FROM runs
             WHERE user_id = ?4 AND {AWAITING_VECTORS} AND {negate} {REALTIME}
             ORDER BY captured_at DESC, id LIMIT ?3"
        ))?;
        let mut queues = Vec::with_capacity(members.len());
        for member in &members {
            let runs = stmt
                .query_map(params![model, realtime_since, limit, member], |r| {
                    let (id, indexed_at) = (r.get::<_, String>(0)?, r.get::<_, String>(1)?);
                    let newest_first = (std::cmp::Reverse(r.get::<_, String>(2)?), id.clone());
                    Ok((newest_first, (id, indexed_at)))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            queues.push(runs);
        }
        take_turns(queues, limit as usize)
            .into_iter()
            .map(|(id, at)| Ok((parse_id(RunId::parse(&id))?, at)))
            .collect()
    }

    /// How many runs of `user` (everyone's with `None`) wait for vectors
    /// of `model`, as (realtime, bulk).
    pub fn runs_awaiting_vectors(
        &self,
        model: &str,
        realtime_since: &str,
        user: Option<&UserId>,
    ) -> Result<(u64, u64)> {
        let (realtime, all) = self
            .reader()
            .prepare_cached(&format!(
                "SELECT COALESCE(SUM({REALTIME}), 0), COUNT(*) FROM runs
                 WHERE {AWAITING_VECTORS} AND (?3 IS NULL OR user_id = ?3)"
            ))?
            .query_row(
                params![model, realtime_since, user.map(UserId::as_str)],
                |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?)),
            )?;
        Ok((realtime.max(0) as u64, (all - realtime).max(0) as u64))
    }

    /// Records the run's vectors, unless it was indexed again since
    /// `indexed_at` (its documents, and a server's vectors with them, were
    /// replaced meanwhile: it is embedded again).
    pub fn set_embedded(&self, run: &RunId, indexed_at: &str, model: &str, at: &str) -> Result<()> {
        self.conn()
            .prepare_cached(
                "UPDATE runs SET embedded_model = ?2, embedded_at = ?3
                 WHERE id = ?1 AND indexed_at = ?4",
            )?
            .execute(params![run.as_str(), model, at, indexed_at])?;
        Ok(())
    }

    /// What `index_chain` last put for `run`: the digest of its chunks.
    pub fn chunks_digest(&self, run: &RunId) -> Result<Option<String>> {
        Ok(self
            .reader()
            .prepare_cached("SELECT chunks_digest FROM runs WHERE id = ?1")?
            .query_row([run.as_str()], |r| r.get(0))
            .optional()?
            .flatten())
    }

    pub fn fail_job(&self, run: &RunId, error: &str) -> Result<()> {
        self.conn().execute(
            "UPDATE index_jobs SET attempts = attempts + 1, last_error = ?2, lane = 'ingest-bulk',
                 enqueued_at = ?3 WHERE run_id = ?1",
            params![run.as_str(), error, kith_shared::timestamp::now()],
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_enqueued_again_while_it_is_indexed_stays_for_the_next_batch() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let registry = Registry::open(&dir.path().join("registry.sqlite"))?;
        let run = parse_id(RunId::parse("r0123456789abcdef0123456789abcdef"))?;
        let enqueue_now = || -> Result<i64> {
            let mut conn = registry.conn();
            let tx = conn.transaction()?;
            enqueue(
                &tx,
                run.as_str(),
                Lane::Bulk,
                &kith_shared::timestamp::now(),
            )?;
            tx.commit()?;
            Ok(conn.query_row("SELECT version FROM index_jobs", [], |r| r.get(0))?)
        };
        let jobs = |registry: &Registry| -> Result<i64> {
            Ok(registry
                .conn()
                .query_row("SELECT COUNT(*) FROM index_jobs", [], |r| r.get(0))?)
        };
        let read = enqueue_now()?;
        // A tag edit or a superseding chain enqueues it again meanwhile.
        let again = enqueue_now()?;
        assert_eq!((read, again), (0, 1));
        let done = |version| {
            let indexed = Indexed {
                run: run.clone(),
                n_chunks: 1,
                n_cut: 0,
                digest: None,
            };
            registry.finish_jobs(&[(indexed, version)], &[], &kith_shared::timestamp::now())
        };
        done(read)?;
        assert_eq!(jobs(&registry)?, 1, "the newer job is left");
        done(again)?;
        assert_eq!(jobs(&registry)?, 0);
        Ok(())
    }

    /// Runs of `owner` numbered `from..to`, ids in that order.
    fn runs(owner: &str, from: u32, to: u32) -> Vec<crate::run::Run> {
        (from..to)
            .map(|i| crate::run::Run::for_tests(&format!("r{i:032x}"), owner))
            .collect()
    }

    /// Makes the catalog `runs` in one transaction, each with a bulk
    /// indexing job (a backfill's history); runs it held keep their capture
    /// time. Their ids.
    fn backlog(registry: &Registry, runs: &[crate::run::Run]) -> Result<Vec<RunId>> {
        let ancestries: Vec<String> = runs.iter().map(|r| format!("|{}|", r.id)).collect();
        let new: Vec<super::super::NewRun<'_>> = runs
            .iter()
            .zip(&ancestries)
            .map(|(run, ancestry)| super::super::NewRun {
                run,
                ancestry,
                blob_path: "b",
                idempotency_key: None,
                lane: Lane::Bulk,
            })
            .collect();
        registry.replace_runs(&new, &[])?;
        runs.iter().map(|r| parse_id(RunId::parse(&r.id))).collect()
    }

    /// Issue #45: one member's backlog of a thousand bulk jobs held every
    /// other member's newer job until all of it was indexed.
    #[test]
    fn a_members_newer_bulk_job_is_in_the_first_batch_beside_anothers_backlog() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let registry = Registry::open(&dir.path().join("registry.sqlite"))?;
        let alice = backlog(&registry, &runs("ualice", 0, 1000))?;
        // Bob's one job, enqueued after all of Alice's (and ordered after
        // them by id, should the clock give both the same millisecond).
        let bob_run = &runs("ubob", 1000, 1001)[0];
        registry.insert_run(&super::super::NewRun {
            run: bob_run,
            ancestry: &format!("|{}|", bob_run.id),
            blob_path: "b",
            idempotency_key: None,
            lane: Lane::Bulk,
        })?;
        let bob = parse_id(RunId::parse(&bob_run.id))?;
        let batch: Vec<RunId> = registry
            .pending_jobs_below(32, 5)?
            .into_iter()
            .map(|j| j.run_id)
            .collect();
        assert_eq!(batch.len(), 32);
        assert!(batch.contains(&bob), "bob's job waits behind alice's");
        // Alice's backlog still moves, oldest first.
        assert_eq!(&batch[..1], &alice[..1]);
        assert_eq!(batch.iter().filter(|r| alice.contains(r)).count(), 31);
        assert!(
            !batch.contains(&alice[999]),
            "alice's newest waits its turn"
        );
        Ok(())
    }

    /// Issue #45: one member's backfill, embedded newest first, held every
    /// other member's runs behind all of it.
    #[test]
    fn runs_to_embed_take_each_members_newest_before_anyones_second() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let registry = Registry::open(&dir.path().join("registry.sqlite"))?;
        // Bob's run, captured before Alice's backfill of a thousand (or in
        // the same millisecond, ordered after them by id).
        let bob_run = runs("ubob", 1000, 1001);
        let bob = backlog(&registry, &bob_run)?;
        let all: Vec<crate::run::Run> =
            bob_run.into_iter().chain(runs("ualice", 0, 1000)).collect();
        let alice = backlog(&registry, &all)?.split_off(1);
        let indexed: Vec<(Indexed, i64)> = bob
            .iter()
            .chain(&alice)
            .map(|run| {
                let done = Indexed {
                    run: run.clone(),
                    n_chunks: 1,
                    n_cut: 0,
                    digest: None,
                };
                (done, 0)
            })
            .collect();
        registry.finish_jobs(&indexed, &[], &kith_shared::timestamp::now())?;
        let since = "2000-01-01T00:00:00.000Z";
        let round: Vec<RunId> = registry
            .runs_to_embed("m", Lane::Bulk, since, 16)?
            .into_iter()
            .map(|(run, _)| run)
            .collect();
        assert_eq!(round.len(), 16);
        assert!(round.contains(&bob[0]), "bob's run waits behind alice's");
        assert_eq!(round.iter().filter(|r| alice.contains(r)).count(), 15);
        assert!(
            registry
                .runs_to_embed("m", Lane::Realtime, since, 16)?
                .is_empty(),
            "history is bulk work"
        );
        Ok(())
    }

    /// Each member's queue, as (enqueued, item).
    type Queues = Vec<Vec<(u32, &'static str)>>;

    #[test]
    fn members_take_turns_each_round_oldest_first() {
        let queue = |items: &[(u32, &'static str)]| items.to_vec();
        // (queues, limit) -> what is taken, in order
        let cases: [(Queues, usize, Vec<&str>); 5] = [
            (vec![], 4, vec![]),
            (
                vec![
                    queue(&[(1, "a1"), (2, "a2"), (3, "a3")]),
                    queue(&[(9, "b1")]),
                ],
                3,
                vec!["a1", "b1", "a2"],
            ),
            // Within a round, the oldest first.
            (
                vec![
                    queue(&[(5, "a1"), (6, "a2")]),
                    queue(&[(4, "b1"), (7, "b2")]),
                ],
                4,
                vec!["b1", "a1", "a2", "b2"],
            ),
            (vec![queue(&[(1, "a1"), (2, "a2")])], 5, vec!["a1", "a2"]),
            (
                vec![
                    queue(&[(1, "a1")]),
                    queue(&[(2, "b1")]),
                    queue(&[(3, "c1")]),
                ],
                2,
                vec!["a1", "b1"],
            ),
        ];
        for (queues, limit, expected) in cases {
            assert_eq!(take_turns(queues.clone(), limit), expected, "{queues:?}");
        }
    }

    #[test]
    fn a_capped_run_is_counted_for_its_owner_and_the_family_only() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let registry = Registry::open(&dir.path().join("registry.sqlite"))?;
        let all: Vec<crate::run::Run> = runs("ualice", 0, 2)
            .into_iter()
            .chain(runs("ubob", 2, 3))
            .collect();
        let ids = backlog(&registry, &all)?;
        let done: Vec<(Indexed, i64)> = ids
            .iter()
            .enumerate()
            .map(|(i, run)| {
                // Alice's first run made 8,007 chunks.
                let (n_chunks, n_cut) = if i == 0 { (8_000, 7) } else { (3, 0) };
                let indexed = Indexed {
                    run: run.clone(),
                    n_chunks,
                    n_cut,
                    digest: None,
                };
                (indexed, 0)
            })
            .collect();
        registry.finish_jobs(&done, &[], &kith_shared::timestamp::now())?;
        let capped = |user: Option<&str>| -> Result<(u64, u64, u64)> {
            let user = user.map(|u| parse_id(UserId::parse(u))).transpose()?;
            let h = registry.holdings(user.as_ref(), None)?;
            Ok((h.runs_capped, h.chunks_cut, h.chunks))
        };
        assert_eq!(capped(Some("ualice"))?, (1, 7, 8_003));
        assert_eq!(capped(Some("ubob"))?, (0, 0, 3));
        assert_eq!(capped(None)?, (1, 7, 8_006));
        // Indexed again whole (a reindex after the cap was raised): no cut.
        let again = Indexed {
            run: ids[0].clone(),
            n_chunks: 8_007,
            n_cut: 0,
            digest: None,
        };
        registry.finish_jobs(&[(again, 0)], &[], &kith_shared::timestamp::now())?;
        assert_eq!(capped(None)?, (0, 0, 8_013));
        Ok(())
    }
}
