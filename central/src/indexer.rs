//! The indexing worker: drains the durable `index_jobs` table (realtime lane
//! first), turning each stored run into chunks in the search index. Jobs are
//! deleted only after the index commit, so a crash at any point redoes, never
//! loses, work; on start the worker resumes whatever is pending.

use std::collections::{HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use kith_proto::RunMeta;
use kith_shared::chunk::{chunk_turns, Chunk, ChunkConfig};
use kith_shared::ids::{RunId, UserId};
use kith_shared::transcript::{self, Format};
use sha2::{Digest, Sha256};
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::index::Standing;
use crate::ingest::format_of;
use crate::registry::{Indexed, PendingJob, StoredRun};
use crate::state::{lock, AppState};

/// Runs indexed per index commit: large enough to amortise the commit's
/// fsync, small enough that a new realtime run waits for little.
const BATCH: u32 = 32;
/// Jobs that failed this often stay in the table for `doctor` to report.
const MAX_ATTEMPTS: i64 = 5;
/// Longest wait between retries of a failing batch (index server down).
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A batch starts once no run has been accepted for this long: an index
/// commit syncs a dozen files, and the syncs of a delta accepted meanwhile
/// queue behind them (ext4 commits one journal for all), so deltas that
/// arrive in a burst are indexed after it rather than between them.
const QUIET: Duration = Duration::from_millis(25);
/// ... but never waits longer than this for the burst to end (freshness).
const MAX_QUIET_WAIT: Duration = Duration::from_millis(250);

/// Wakes the worker. Cheap to clone.
#[derive(Clone)]
pub struct Indexer {
    wake: Arc<Notify>,
    /// When a run was last accepted.
    last_accepted: Arc<Mutex<Option<Instant>>>,
    /// Counts index commits that added runs: there may be runs to embed
    /// (each of the vectorizer's lanes watches it).
    indexed: Arc<watch::Sender<u64>>,
    /// Chunks ingest made from the transcript it parsed, by run id, so a
    /// delta is parsed once; a run not here (central restarted, reindex,
    /// too much waiting already) is read from its blob and parsed again.
    chunked: Arc<Mutex<HandedOver>>,
    /// Held shared while a worker writes runs' chunks or vectors into the
    /// index, exclusively while a forget takes runs out: a worker that read
    /// a run before it was forgotten cannot put it back after.
    writes: Arc<RwLock<()>>,
}

/// Most text of chunks that waits in memory for the indexer: a lagging
/// indexer (Meilisearch down, a backfill) holds at most this much of it.
const MAX_HANDED_OVER_BYTES: usize = 64 << 20;

/// The chunks waiting for the indexer, and the bytes of their text.
#[derive(Default)]
struct HandedOver {
    runs: HashMap<String, Vec<Chunk>>,
    bytes: usize,
}

fn text_bytes(chunks: &[Chunk]) -> usize {
    chunks.iter().map(|c| c.text.len()).sum()
}

impl Default for Indexer {
    fn default() -> Self {
        Self {
            wake: Arc::default(),
            last_accepted: Arc::default(),
            indexed: Arc::new(watch::Sender::new(0)),
            chunked: Arc::default(),
            writes: Arc::default(),
        }
    }
}

impl Indexer {
    /// Keeps the chunks ingest made of a run for its indexing (unless
    /// `MAX_HANDED_OVER_BYTES` wait already: the indexer then parses the
    /// blob).
    pub fn hand_over(&self, run_id: &str, chunks: Vec<Chunk>) {
        let mut waiting = lock(&self.chunked);
        let bytes = text_bytes(&chunks);
        if waiting.bytes + bytes <= MAX_HANDED_OVER_BYTES {
            waiting.bytes += bytes;
            if let Some(old) = waiting.runs.insert(run_id.to_owned(), chunks) {
                waiting.bytes -= text_bytes(&old);
            }
        }
    }

    /// The chunks handed over for `run_id`, no longer kept: to index them,
    /// or because the run will not be indexed (not stored, forgotten).
    pub fn take_chunks(&self, run_id: &str) -> Option<Vec<Chunk>> {
        let mut waiting = lock(&self.chunked);
        let chunks = waiting.runs.remove(run_id)?;
        waiting.bytes -= text_bytes(&chunks);
        Some(chunks)
    }

    /// A worker's hold on the index while it writes runs into it.
    pub fn writing(&self) -> RwLockReadGuard<'_, ()> {
        self.writes.read().unwrap_or_else(|p| p.into_inner())
    }

    /// A forget's hold on the index: no worker writes meanwhile.
    pub fn forgetting(&self) -> RwLockWriteGuard<'_, ()> {
        self.writes.write().unwrap_or_else(|p| p.into_inner())
    }

    /// A run was accepted: index it soon.
    pub fn wake(&self) {
        *self.last_accepted.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.wake.notify_one();
    }

    /// Waits until no run has been accepted for `QUIET`, at most
    /// `MAX_QUIET_WAIT`.
    async fn quiet(&self) {
        let deadline = Instant::now() + MAX_QUIET_WAIT;
        loop {
            let last = *self.last_accepted.lock().unwrap_or_else(|p| p.into_inner());
            match last.map(|t| (t + QUIET).min(deadline)) {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// Index commits that added runs: `changed()` resolves after the next
    /// (or at once, for one not yet seen).
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.indexed.subscribe()
    }

    /// Starts the worker on a thread of its own, at background priority;
    /// it runs until the process ends. Call from inside the runtime.
    pub fn spawn(self, state: AppState) -> std::io::Result<()> {
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("kith-index".into())
            .spawn(move || {
                crate::priority::lower(crate::priority::INDEX);
                runtime.block_on(self.run(state));
            })
            .map(drop)
    }

    /// Indexes batch after batch on the calling thread (not a runtime
    /// worker: `index_batch` blocks).
    async fn run(self, state: AppState) {
        let mut backoff = Duration::from_secs(1);
        // The last batch was full: more are waiting, and their commits
        // follow one another whatever arrives, so a backlog does not wait.
        let mut backlog = false;
        loop {
            if !backlog {
                self.quiet().await;
            }
            let batch = std::panic::catch_unwind(AssertUnwindSafe(|| index_batch(&state)));
            backlog = matches!(batch, Ok(Ok(n)) if n >= BATCH as usize);
            match batch {
                Ok(Ok(0)) => {
                    backoff = Duration::from_secs(1);
                    // Also poll now and then, so a job written by another
                    // process (the CLI's reindex) is picked up.
                    let _ =
                        tokio::time::timeout(Duration::from_secs(5), self.wake.notified()).await;
                }
                Ok(Ok(_)) => {
                    backoff = Duration::from_secs(1);
                    self.indexed.send_modify(|n| *n += 1);
                }
                Ok(Err(e)) => {
                    // The batch's jobs stay in the registry (a failed commit
                    // finishes none of them), so this retries the same work:
                    // a search server that is down is caught up with once it
                    // is back.
                    tracing::error!(error = %e, retry_in_s = backoff.as_secs(), "indexing batch failed");
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(_) => {
                    tracing::error!("indexing a batch panicked");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}

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

/// Each run of a chain and its chunks (`chain_chunks`).
pub type ChainChunks = Vec<(StoredRun, Vec<Chunk>)>;

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
    let format = format_of(meta.agent_runtime);
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
    state.index().put_run(&meta, &job.standing, &chunks)?;
    Ok(Indexed {
        run: job.run_id.clone(),
        n_chunks: chunks.len() as u64,
        digest: None,
    })
}

/// The metadata stored beside the blob at `blob_path`.
fn run_meta(state: &AppState, blob_path: &str) -> Result<RunMeta> {
    let meta_path = state
        .store()
        .absolute(blob_path)
        .with_extension("metadata.json");
    Ok(serde_json::from_slice(&std::fs::read(&meta_path)?)?)
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
    meta: &RunMeta,
    standing: &Standing,
    chains: &mut Chains,
) -> Result<Indexed> {
    let Chains { read, put, others } = chains;
    let indexed = |run: &StoredRun, chunks: &[Chunk]| -> Result<Indexed> {
        Ok(Indexed {
            run: RunId::parse(&run.meta.id).map_err(|e| Error::Internal(e.to_string()))?,
            n_chunks: chunks.len() as u64,
            digest: Some(chunks_digest(standing.superseded, chunks)),
        })
    };
    let not_in_chain = || Error::Internal(format!("run {} is not in its own chain", meta.id));
    let key = (meta.user_id.clone(), meta.source_identity.clone());
    if let Some(chain) = read.get(&key) {
        // An earlier job of this batch read it and put its changed runs.
        let (run, chunks) = chain
            .iter()
            .find(|(run, _)| run.meta.id == meta.id)
            .ok_or_else(not_in_chain)?;
        if put.insert(meta.id.clone()) {
            state.index().put_run(meta, standing, chunks)?;
        }
        return indexed(run, chunks);
    }
    let chain = chain_chunks(state, format, meta)?;
    let mut own = None;
    let mut theirs_put = Vec::new();
    for (run, chunks) in &chain {
        let this = indexed(run, chunks)?;
        if run.meta.id == meta.id {
            state.index().put_run(meta, standing, chunks)?;
            own = Some(this);
        } else if state.registry().chunks_digest(&this.run)? != this.digest {
            let theirs = Standing {
                ancestry: run.ancestry.clone(),
                superseded: standing.superseded,
                quarantined: run.quarantined,
                captured_ms: run.captured_ms,
            };
            state
                .index()
                .put_run(&run_meta(state, &run.blob_path)?, &theirs, chunks)?;
            theirs_put.push(run.meta.id.clone());
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
/// transcript (`transcript::parse_chain`), in byte order.
pub fn chain_chunks(state: &AppState, format: Format, meta: &RunMeta) -> Result<ChainChunks> {
    let user = UserId::parse(&meta.user_id).map_err(|e| Error::Internal(e.to_string()))?;
    let runs =
        state
            .registry()
            .source_runs_overlapping(&user, &meta.source_identity, 0, u64::MAX)?;
    let blobs = runs
        .iter()
        .map(|run| state.store().read_jsonl(&run.blob_path))
        .collect::<std::io::Result<Vec<_>>>()?;
    let deltas: Vec<&[u8]> = blobs.iter().map(Vec::as_slice).collect();
    let turns = transcript::parse_chain(format, &deltas);
    Ok(runs
        .into_iter()
        .zip(turns)
        .map(|(run, turns)| {
            let chunks = chunk_turns(&turns, &ChunkConfig::default());
            (run, chunks)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_batch_waits_for_a_burst_of_runs_to_end_but_not_for_ever() {
        let indexer = Indexer::default();
        let waited = |indexer: Indexer| async move {
            let started = Instant::now();
            indexer.quiet().await;
            started.elapsed()
        };
        assert_eq!(
            waited(indexer.clone()).await,
            Duration::ZERO,
            "nothing accepted"
        );
        indexer.wake();
        assert_eq!(waited(indexer.clone()).await, QUIET, "one run accepted");
        assert_eq!(waited(indexer.clone()).await, Duration::ZERO, "quiet since");
        // Runs accepted every 10 ms for a second: the batch starts anyway.
        let burst = indexer.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                burst.wake();
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
        tokio::task::yield_now().await;
        assert_eq!(waited(indexer).await, MAX_QUIET_WAIT, "a burst");
    }

    #[test]
    fn chunks_wait_in_memory_up_to_a_size_not_a_count() {
        let chunks = |mib: usize| {
            vec![Chunk {
                chunk_idx: 0,
                role: kith_shared::transcript::Role::User,
                text: "x".repeat(mib << 20),
                line_start: 1,
                line_end: 1,
                timestamp: None,
            }]
        };
        let indexer = Indexer::default();
        indexer.hand_over("r-big", chunks(40));
        indexer.hand_over("r-more", chunks(30));
        // Past 64 MiB the run is left to be parsed from its blob.
        assert!(indexer.take_chunks("r-more").is_none());
        assert!(indexer.take_chunks("r-big").is_some());
        assert!(indexer.take_chunks("r-big").is_none(), "taken once");
        // Taken, its bytes are free again.
        indexer.hand_over("r-more", chunks(30));
        assert!(indexer.take_chunks("r-more").is_some());
        // Many small runs all wait, past the old count of 1,024.
        for i in 0..2000 {
            indexer.hand_over(&format!("r{i}"), chunks(0));
        }
        assert!(indexer.take_chunks("r1999").is_some());
    }
}
