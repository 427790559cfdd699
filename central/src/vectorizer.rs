//! Embedding indexed runs: after a run's text is searchable, its chunks (as
//! the index holds them) go through the embed queue and their vectors into
//! the index. Two loops, one per ingest lane, feed the queue at once, so
//! the queue's priority decides: a turn just captured is embedded before
//! the bulk work (a backfill's history, re-embeds after a model change)
//! waiting beside it. Inside a lane, members take turns
//! (`Registry::runs_to_embed`) and a run gets one slice of its chunks
//! (`VECTORS_PER_WRITE`) per round; a round ends early when the indexer
//! commits new runs. So a long run, or one member's backlog, delays another
//! member's new turn by about one slice, never by all of it. Which runs
//! still need it is durable state in the registry (`embedded_model`
//! differs from the current model) and which chunks the index (those
//! without a vector), so a crash or a model change simply means more work
//! here.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kith_shared::ids::RunId;

use crate::embed::{EmbedError, EmbedQueue, Lane};
use crate::error::{Code, Error, Result};
use crate::index::ChunkVector;
use crate::registry::Lane as RunLane;
use crate::state::AppState;
use crate::sync::lock;

/// Runs fetched per registry query.
const RUNS_PER_ROUND: u32 = 16;
/// Vectors stored per index write, and a run's slice of a round: its
/// chunks beyond it wait for the lane's next round, after every other
/// run's slice. The queue still embeds them a few at a time
/// (`embed::MAX_BATCH`, so a query never waits long); the write is what
/// costs per call: a Meilisearch task that updates its vector index, a
/// sync of the embedded index's vector file. About 4 s of the embedded
/// model on two cores.
const VECTORS_PER_WRITE: usize = 128;
/// Runs captured this recently (of a transcript being written) ride the
/// realtime lane.
const REALTIME_WINDOW_MINUTES: i64 = 10;
/// How long a run whose text the embedder refused waits before it is tried
/// again, while the runs behind it are embedded.
const SET_ASIDE: Duration = Duration::from_secs(10 * 60);

/// Benchmarks only: when set, document chunks get hashed stand-in vectors
/// (see `standin_vector`) instead of the model's, so a million-chunk corpus
/// builds in minutes; queries still go through the real model and the real
/// vector search. Search quality means nothing then; central says so.
pub const BENCH_STANDIN_VECTORS: &str = "KITH_BENCH_STANDIN_VECTORS";

/// The instant the registry's realtime rule (`registry::REALTIME`) counts
/// captures from.
pub fn realtime_since() -> String {
    kith_shared::timestamp::render(
        time::OffsetDateTime::now_utc() - time::Duration::minutes(REALTIME_WINDOW_MINUTES),
    )
}

/// Runs one lane's loop is embedding: the other skips them (a run waiting
/// on the realtime lane for ten minutes turns up in the bulk lane's query).
#[derive(Clone, Default)]
struct InFlight(Arc<Mutex<HashSet<RunId>>>);

/// Runs whose text the embedder refused (a chunk over a server's token
/// limit, a model that fails on it), with when: both loops pass them by
/// for `SET_ASIDE`, so one run never holds up its lane.
#[derive(Default)]
struct SetAside(Mutex<HashMap<RunId, Instant>>);

impl SetAside {
    fn put(&self, id: RunId) {
        lock(&self.0).insert(id, Instant::now());
    }

    /// Whether `id` still waits; forgets those whose wait is over.
    fn holds(&self, id: &RunId) -> bool {
        let mut aside = lock(&self.0);
        aside.retain(|_, since| since.elapsed() < SET_ASIDE);
        aside.contains_key(id)
    }

    fn len(&self) -> usize {
        lock(&self.0).len()
    }
}

impl InFlight {
    /// Takes `id` unless the other loop has it; released when dropped.
    fn claim(&self, id: &RunId) -> Option<Claim> {
        let fresh = lock(&self.0).insert(id.clone());
        fresh.then(|| Claim {
            set: self.clone(),
            id: id.clone(),
        })
    }
}

struct Claim {
    set: InFlight,
    id: RunId,
}

impl Drop for Claim {
    fn drop(&mut self) {
        lock(&self.set.0).remove(&self.id);
    }
}

/// Runs until the process ends.
pub async fn run(state: AppState, queue: EmbedQueue) {
    let standin = std::env::var_os(BENCH_STANDIN_VECTORS).is_some_and(|v| v == "1");
    if standin {
        tracing::warn!(
            "{BENCH_STANDIN_VECTORS}=1: documents get stand-in vectors, not {}'s; for benchmarks only",
            queue.model_id()
        );
    }
    let (in_flight, aside) = (InFlight::default(), SetAside::default());
    tokio::join!(
        lane_loop(
            &state,
            &queue,
            RunLane::Realtime,
            (&in_flight, &aside),
            standin
        ),
        lane_loop(&state, &queue, RunLane::Bulk, (&in_flight, &aside), standin),
    );
}

async fn lane_loop(
    state: &AppState,
    queue: &EmbedQueue,
    lane: RunLane,
    skip: (&InFlight, &SetAside),
    standin: bool,
) {
    let mut commits = state.indexer().commits();
    let mut backoff = Duration::from_secs(1);
    loop {
        match round(state, queue, lane, skip, standin, &mut commits).await {
            Ok(0) => {
                // Also poll now and then: runs age out of the realtime
                // lane, and the CLI's reindex writes from another process.
                let _ = tokio::time::timeout(Duration::from_secs(5), commits.changed()).await;
                backoff = Duration::from_secs(1);
            }
            Ok(_) => backoff = Duration::from_secs(1),
            Err(e) => {
                tracing::warn!(error = %e, ?lane, retry_in_s = backoff.as_secs(), "embedding paused");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// Embeds one slice of each run of a round of the lane's runs, members in
/// turn, and ends early once the indexer commits new runs (they may be
/// another member's turn); returns how many slices were embedded.
async fn round(
    state: &AppState,
    queue: &EmbedQueue,
    lane: RunLane,
    (in_flight, aside): (&InFlight, &SetAside),
    standin: bool,
    commits: &mut tokio::sync::watch::Receiver<u64>,
) -> Result<usize> {
    commits.borrow_and_update();
    let model = queue.model_id().to_owned();
    let s = state.clone();
    let m = model.clone();
    // Enough runs that those set aside leave a round's worth.
    let limit = RUNS_PER_ROUND.saturating_add(u32::try_from(aside.len()).unwrap_or(u32::MAX));
    let runs = tokio::task::spawn_blocking(move || {
        s.registry()
            .runs_to_embed(&m, lane, &realtime_since(), limit)
    })
    .await??;
    let mut n = 0;
    for (run_id, indexed_at) in runs.into_iter().filter(|(id, _)| !aside.holds(id)) {
        if n > 0 && commits.has_changed().unwrap_or(false) {
            break;
        }
        let Some(_claim) = in_flight.claim(&run_id) else {
            continue;
        };
        let s = state.clone();
        let id = run_id.clone();
        let chunks =
            tokio::task::spawn_blocking(move || s.index().chunks_to_embed(id.as_str())).await??;
        let slice = &chunks[..chunks.len().min(VECTORS_PER_WRITE)];
        n += 1;
        match store_vectors(state, queue, lane, &run_id, slice, standin).await? {
            Slice::Stored => {}
            Slice::Refused => {
                aside.put(run_id);
                continue;
            }
            Slice::Forgotten => continue,
        }
        // The rest of its chunks wait for the lane's next round.
        if slice.len() < chunks.len() {
            continue;
        }
        let s = state.clone();
        let m = model.clone();
        tokio::task::spawn_blocking(move || {
            s.registry()
                .set_embedded(&run_id, &indexed_at, &m, &kith_shared::timestamp::now())
        })
        .await??;
    }
    Ok(n)
}

/// What became of a slice of a run's chunks.
enum Slice {
    /// Its vectors are in the index.
    Stored,
    /// The embedder refused its text: the run is set aside.
    Refused,
    /// The run was forgotten meanwhile: it gets no vectors.
    Forgotten,
}

/// Embeds `slice` (chunk ids and texts of `run_id`) on `lane` and stores
/// the vectors in one index write.
async fn store_vectors(
    state: &AppState,
    queue: &EmbedQueue,
    lane: RunLane,
    run_id: &RunId,
    slice: &[(String, String)],
    standin: bool,
) -> Result<Slice> {
    if slice.is_empty() {
        return Ok(Slice::Stored);
    }
    let texts: Vec<String> = slice.iter().map(|(_, t)| t.clone()).collect();
    let vectors = if standin {
        texts
            .iter()
            .map(|t| standin_vector(t, queue.dim()))
            .collect()
    } else {
        let queue_lane = match lane {
            RunLane::Realtime => Lane::IngestRealtime,
            RunLane::Bulk => Lane::IngestBulk,
        };
        match queue.embed(queue_lane, texts).await {
            Ok(vectors) => vectors,
            // This run's text, not the embedder: the others go on. (A bad
            // key, a wrong model, a server down: the whole lane waits, in
            // `lane_loop`.)
            Err(e @ EmbedError::Refused { .. }) => {
                tracing::warn!(run_id = %run_id, error = %e, retry_in_s = SET_ASIDE.as_secs(),
                    "the embedder refused a chunk of this run; embedding the others");
                return Ok(Slice::Refused);
            }
            Err(e) => return Err(Error::unavailable(Code::EmbedderUnavailable, e.to_string())),
        }
    };
    let items: Vec<ChunkVector> = slice
        .iter()
        .zip(vectors)
        .map(|((chunk_id, text), vector)| ChunkVector {
            chunk_id: chunk_id.clone(),
            text: text.clone(),
            vector,
        })
        .collect();
    let s = state.clone();
    let id = run_id.to_string();
    let forgotten = tokio::task::spawn_blocking(move || {
        // A run forgotten while it was embedded gets no vectors.
        let _writing = s.indexer().writing();
        if !s.registry().forgotten_among(&[id])?.is_empty() {
            return Ok(true);
        }
        s.index().put_vectors(&items).map(|()| false)
    })
    .await??;
    Ok(if forgotten {
        Slice::Forgotten
    } else {
        Slice::Stored
    })
}

/// A unit vector from the text's words by feature hashing: words shared
/// between texts make them close, at microseconds per chunk.
fn standin_vector(text: &str, dim: usize) -> Vec<f32> {
    use sha2::{Digest, Sha256};
    let mut v = vec![0.0f32; dim.max(1)];
    for word in text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.len() > 2)
    {
        let h = Sha256::digest(word.to_lowercase().as_bytes());
        let slot = u32::from_le_bytes([h[0], h[1], h[2], h[3]]) as usize % v.len();
        v[slot] += if h[4] & 1 == 0 { 1.0 } else { -1.0 };
    }
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}
