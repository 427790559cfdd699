//! The indexing worker: drains the durable `index_jobs` table (realtime lane
//! first, members in turn: `Registry::pending_jobs_below`), turning each
//! stored run into chunks in the search index, at most
//! `cap::MAX_CHUNKS_PER_RUN` of them (the cut recorded on the run), and
//! after each batch counts the stored deltas' usage (`crate::usage::settle`). Jobs are
//! deleted only after the index commit, so a crash at any point redoes, never
//! loses, work; on start the worker resumes whatever is pending.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use kith_shared::chunk::{chunk_turns, Chunk, ChunkConfig};
use kith_shared::ids::{RunId, UserId};
use kith_shared::transcript::{self, Format};
use sha2::{Digest, Sha256};

use crate::error::{Code, Error, Result};
use crate::index::Standing;
use crate::indexer::cap::{cap, Capped};
use crate::privacy::Operator;
use crate::registry::{Indexed, LiveFacts, PendingJob, StoredRun};
use crate::run::Run;
use crate::state::AppState;
use crate::store::RunRecord;
use crate::usage_turns::Counting;

/// Runs indexed per index commit: large enough to amortise the commit's
/// fsync, small enough that a new realtime run waits for little.
const BATCH: u32 = 32;
/// Jobs that failed this often stay in the table for `doctor` to report.
const MAX_ATTEMPTS: i64 = 5;
/// Longest wait between retries of a failing batch (index server down).
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// Indexes up to one batch of pending jobs; returns how many were done.
pub fn index_batch(state: &AppState) -> Result<usize> {
    let _writing = state.indexer().writing();
    let jobs = state.registry().pending_jobs_below(BATCH, MAX_ATTEMPTS)?;
    if jobs.is_empty() {
        return Ok(0);
    }
    let mut done: Vec<(Indexed, i64)> = Vec::with_capacity(jobs.len());
    let mut chains = Chains::default();
    for job in &jobs {
        match index_one(state, job, &mut chains) {
            Ok(indexed) => done.push((indexed, job.version)),
            // The index cannot be written (a full disk, a search server
            // down): no run is at fault, and every job stays pending for
            // the batch's retry.
            Err(e) if e.code() == Code::IndexUnavailable => return Err(e),
            Err(e) => {
                tracing::warn!(run_id = %job.run_id, error = %e, "indexing a run failed");
                state.registry().fail_job(&job.run_id, &e.to_string())?;
            }
        }
    }
    state.index().commit()?;
    // Recorded once the index committed: a digest of an uncommitted put
    // would skip that run for good.
    state
        .registry()
        .finish_jobs(&done, &chains.others, &kith_shared::timestamp::now())?;
    tracing::debug!(n_runs = done.len(), "indexed batch");
    Ok(jobs.len())
}

/// A source chain read whole (`chain_chunks`).
pub struct ChainChunks {
    /// Each run, in byte order, with its chunks as the index holds them.
    pub runs: Vec<(StoredRun, Capped)>,
    /// The facts the chain's live messages give its runs.
    pub live: LiveFacts,
}

/// The chains of folding formats one batch read: each read and parsed once
/// however many of its runs the batch indexes (a backlog, a reindex), and
/// each run put once.
#[derive(Default)]
struct Chains {
    /// By owner and source identity, as `chain_chunks` read them.
    read: HashMap<(String, String), ChainChunks>,
    /// Runs put in this batch.
    put: HashSet<String>,
    /// The runs put beside the jobs' own, for `finish_jobs`.
    others: Vec<Indexed>,
}

/// Puts one run's chunks in the index (and, for a format that folds, the
/// other runs of its chain whose chunks changed, into `chains`).
fn index_one(state: &AppState, job: &PendingJob, chains: &mut Chains) -> Result<Indexed> {
    let meta = run_meta(state, &job.blob_path)?;
    if meta.id != job.run_id.as_str() {
        return Err(Error::Internal(format!(
            "metadata of {} names run {}",
            job.run_id, meta.id
        )));
    }
    let handed_over = state.indexer().take_chunks(&meta.id);
    let format = meta.format();
    if format.folds() {
        return index_chain(state, format, &meta, &job.standing, chains);
    }
    let chunks = match handed_over {
        Some(chunks) => chunks,
        None => {
            let bytes = state.store().read_jsonl(&job.blob_path)?;
            let parsed = transcript::parse(format, &bytes);
            chunk_turns(&parsed.turns, &ChunkConfig::default())
        }
    };
    let capped = cap(chunks);
    state
        .index()
        .put_run(&meta, &job.standing, &capped.chunks)?;
    warn_if_cut(&meta, &capped);
    Ok(Indexed {
        run: job.run_id.clone(),
        n_chunks: capped.chunks.len() as u64,
        n_cut: capped.n_cut,
        digest: None,
    })
}

/// Tells the operator of a run too long to index whole (counts only, never
/// its text).
fn warn_if_cut(meta: &Run, capped: &Capped) {
    if capped.n_cut > 0 {
        tracing::warn!(
            run_id = %meta.id,
            user_id = %meta.user_id,
            n_chunks = capped.chunks.len(),
            n_cut = capped.n_cut,
            bytes_cut = capped.bytes_cut,
            "run too long to index whole: its later chunks are left out of search, its blob keeps them"
        );
    }
}

/// The metadata stored beside the blob at `blob_path`.
fn run_meta(state: &AppState, blob_path: &str) -> Result<Run> {
    let meta_path = state
        .store()
        .absolute(blob_path)
        .with_extension("metadata.json");
    Ok(RunRecord::read(&std::fs::read(&meta_path)?)?.run)
}

/// A format whose later records rewrite what earlier deltas said (Gemini:
/// a message appended again, `$set`, `$rewindTo`; OpenCode: a changed or
/// removed row): every delta of the source chain is read again with only
/// the turns live in the whole chain, so search never finds a turn the
/// transcript no longer holds. The whole
/// chain, whatever order its jobs run in, so the last indexing is always of
/// the latest state. A run whose chunks come out as they were last put
/// (their digest) is left as it is, vectors included: a long session
/// appended to costs its changed runs, not all of them (a run whose standing
/// changed has a job of its own). A chain is read once a batch: a later job
/// of it puts only its own run, if not put yet. Answers `meta`'s own run as
/// indexed (a chain is superseded, or not, as a whole).
fn index_chain(
    state: &AppState,
    format: Format,
    meta: &Run,
    standing: &Standing,
    chains: &mut Chains,
) -> Result<Indexed> {
    let Chains { read, put, others } = chains;
    let indexed = |run: &StoredRun, capped: &Capped| -> Result<Indexed> {
        Ok(Indexed {
            run: RunId::parse(&run.run.id).map_err(|e| Error::Internal(e.to_string()))?,
            n_chunks: capped.chunks.len() as u64,
            n_cut: capped.n_cut,
            digest: Some(chunks_digest(standing.superseded, &capped.chunks)),
        })
    };
    let not_in_chain = || Error::Internal(format!("run {} is not in its own chain", meta.id));
    let key = (meta.user_id.clone(), meta.source_identity.clone());
    if let Some(chain) = read.get(&key) {
        // An earlier job of this batch read it and put its changed runs.
        let (run, capped) = chain
            .runs
            .iter()
            .find(|(run, _)| run.run.id == meta.id)
            .ok_or_else(not_in_chain)?;
        if put.insert(meta.id.clone()) {
            state.index().put_run(meta, standing, &capped.chunks)?;
            warn_if_cut(meta, capped);
        }
        return indexed(run, capped);
    }
    let chain = chain_chunks(state, format, meta)?;
    state.registry().set_live_facts(&chain.live)?;
    let mut own = None;
    let mut theirs_put = Vec::new();
    for (run, capped) in &chain.runs {
        let this = indexed(run, capped)?;
        if run.run.id == meta.id {
            state.index().put_run(meta, standing, &capped.chunks)?;
            warn_if_cut(meta, capped);
            own = Some(this);
        } else if state.registry().chunks_digest(&this.run)? != this.digest {
            let theirs = Standing {
                ancestry: run.ancestry.clone(),
                superseded: standing.superseded,
                quarantined: run.quarantined,
                captured_ms: run.captured_ms,
            };
            let theirs_meta = run_meta(state, &run.blob_path)?;
            state
                .index()
                .put_run(&theirs_meta, &theirs, &capped.chunks)?;
            warn_if_cut(&theirs_meta, capped);
            theirs_put.push(run.run.id.clone());
            others.push(this);
        }
    }
    let own = own.ok_or_else(not_in_chain)?;
    // Kept for the batch's later jobs only once all of it was put: after a
    // failure, the next job of the chain reads and puts it again.
    put.insert(meta.id.clone());
    put.extend(theirs_put);
    read.insert(key, chain);
    Ok(own)
}

/// sha256 over what a run's index entry is made of.
fn chunks_digest(superseded: bool, chunks: &[Chunk]) -> String {
    let mut h = Sha256::new();
    h.update([u8::from(superseded)]);
    for c in chunks {
        for part in [
            c.chunk_idx.to_string().as_str(),
            c.role.as_str(),
            &c.line_start.to_string(),
            &c.line_end.to_string(),
            c.timestamp.as_deref().unwrap_or(""),
            &c.text,
        ] {
            // Length-prefixed: no two chunk lists hash the same bytes.
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
    }
    hex::encode(h.finalize())
}

/// The chunks of every run of `meta`'s source chain, read as one
/// transcript (`transcript::read_chain`), in byte order, and the facts its
/// live messages give.
pub fn chain_chunks(state: &AppState, format: Format, meta: &Run) -> Result<ChainChunks> {
    let user = UserId::parse(&meta.user_id).map_err(|e| Error::Internal(e.to_string()))?;
    // The indexer reads the chain it indexes and hands no run to anyone.
    let indexer = Operator::for_operator_commands();
    let runs = state
        .registry()
        .chain_runs(&indexer, &user, &meta.source_identity)?;
    let blobs = runs
        .iter()
        .map(|run| state.store().read_jsonl(&run.blob_path))
        .collect::<std::io::Result<Vec<_>>>()?;
    let deltas: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    let chain = transcript::read_chain(format, &deltas);
    let live = LiveFacts {
        head: runs
            .iter()
            .find(|r| r.run.from_offset == 0)
            .map(|r| r.run.id.clone()),
        title: chain.title,
        intent: chain.intent,
        turn_counts: runs
            .iter()
            .zip(&chain.deltas)
            .map(|(run, turns)| (run.run.id.clone(), turns.len() as u64))
            .collect(),
    };
    let runs = runs
        .into_iter()
        .zip(chain.deltas)
        .map(|(run, turns)| (run, cap(chunk_turns(&turns, &ChunkConfig::default()))))
        .collect();
    Ok(ChainChunks { runs, live })
}

/// Starts the worker on a thread of its own, at background priority; it
/// runs until `Indexer::stop`, which must come before the runtime ends
/// (its timers run on it). Call from inside the runtime.
pub fn spawn(state: AppState) -> std::io::Result<std::thread::JoinHandle<()>> {
    let runtime = tokio::runtime::Handle::current();
    std::thread::Builder::new()
        .name("kith-index".into())
        .spawn(move || {
            crate::priority::lower(crate::priority::INDEX);
            runtime.block_on(run(state));
        })
}

/// Indexes batch after batch on the calling thread (not a runtime
/// worker: `index_batch` blocks).
async fn run(state: AppState) {
    let indexer = state.indexer().clone();
    let mut backoff = Duration::from_secs(1);
    // The last batch was full: more are waiting, and their commits
    // follow one another whatever arrives, so a backlog does not wait.
    let mut backlog = false;
    while !indexer.stopping() {
        if !backlog {
            indexer.quiet().await;
        }
        let batch = std::panic::catch_unwind(AssertUnwindSafe(|| index_batch(&state)));
        backlog = matches!(batch, Ok(Ok(n)) if n >= BATCH as usize);
        // The usage of the deltas stored meanwhile, counted at the same
        // quiet moment, many at a time, off the ingest requests' path.
        match std::panic::catch_unwind(AssertUnwindSafe(|| {
            crate::usage::settle(&state, Counting::InBackground)
        })) {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "counting the deltas' usage failed"),
            Err(_) => tracing::error!("counting the deltas' usage panicked"),
        }
        match batch {
            Ok(Ok(0)) => {
                indexer.recovered();
                backoff = Duration::from_secs(1);
                // Also poll now and then, so a job written by another
                // process (the CLI's reindex) is picked up.
                indexer.woken_or(Duration::from_secs(5)).await;
            }
            Ok(Ok(_)) => {
                indexer.recovered();
                backoff = Duration::from_secs(1);
                indexer.committed();
            }
            Ok(Err(e)) => {
                indexer.failing(&e);
                // The batch's jobs stay in the registry (a failed commit
                // finishes none of them), so this retries the same work:
                // a search server that is down is caught up with once it
                // is back.
                tracing::error!(error = %e, retry_in_s = backoff.as_secs(), "indexing batch failed");
                indexer.woken_or(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
            Err(_) => {
                tracing::error!("indexing a batch panicked");
                indexer.woken_or(Duration::from_secs(1)).await;
            }
        }
    }
}
