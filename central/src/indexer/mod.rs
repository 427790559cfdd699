//! The indexer's handle: what ingest, forget, tag edits and the vectorizer
//! hold of the indexing worker (`worker`). Ingest hands it the chunks it
//! parsed (so a delta is parsed once) and wakes it; a forget holds it off
//! the index while runs leave; the vectorizer watches its commits. The
//! handle knows nothing of the service's state, so everything can hold it.
//! `cap` decides how much of a run the index holds.

pub mod cap;
pub mod worker;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use kith_shared::chunk::Chunk;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;

use crate::sync::{lock, read, write};

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
    /// Set when central shuts down: the worker finishes its batch and ends,
    /// before the runtime its timers run on goes.
    stopping: Arc<std::sync::atomic::AtomicBool>,
    /// Why indexing fails, and since when, while it does (`/api/status`).
    failing: Arc<Mutex<Option<(String, String)>>>,
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
            stopping: Arc::default(),
            failing: Arc::default(),
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
        read(&self.writes)
    }

    /// A forget's hold on the index: no worker writes meanwhile.
    pub fn forgetting(&self) -> RwLockWriteGuard<'_, ()> {
        write(&self.writes)
    }

    /// A run was accepted: index it soon.
    pub fn wake(&self) {
        *lock(&self.last_accepted) = Some(Instant::now());
        self.wake.notify_one();
    }

    /// Waits until no run has been accepted for `QUIET`, at most
    /// `MAX_QUIET_WAIT`.
    pub(crate) async fn quiet(&self) {
        let deadline = Instant::now() + MAX_QUIET_WAIT;
        loop {
            let last = *lock(&self.last_accepted);
            match last.map(|t| (t + QUIET).min(deadline)) {
                Some(until) if until > Instant::now() => tokio::time::sleep_until(until).await,
                _ => return,
            }
        }
    }

    /// A wake, or `timeout`, whichever comes first (the worker also polls:
    /// a job written by another process, the CLI's reindex, has no wake).
    pub(crate) async fn woken_or(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.wake.notified()).await;
    }

    /// Central is shutting down: the worker ends after its batch.
    pub(crate) fn stop(&self) {
        self.stopping
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.wake.notify_one();
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stopping.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The worker committed runs to the index.
    pub(crate) fn committed(&self) {
        self.indexed.send_modify(|n| *n += 1);
    }

    /// A batch failed with `e`: said in `/api/status` until one succeeds,
    /// with the time of the first failure.
    pub(crate) fn failing(&self, e: &crate::error::Error) {
        let mut failing = lock(&self.failing);
        let since = failing
            .take()
            .map_or_else(kith_shared::timestamp::now, |(_, since)| since);
        *failing = Some((e.to_string(), since));
    }

    /// A batch succeeded (or found nothing to do): indexing works.
    pub(crate) fn recovered(&self) {
        if let Some((why, since)) = lock(&self.failing).take() {
            tracing::info!(failing_since = %since, was = %why, "indexing works again");
        }
    }

    /// Why indexing fails and since when, while it does.
    pub fn failure(&self) -> Option<(String, String)> {
        lock(&self.failing).clone()
    }

    /// Index commits that added runs: `changed()` resolves after the next
    /// (or at once, for one not yet seen).
    pub fn commits(&self) -> watch::Receiver<u64> {
        self.indexed.subscribe()
    }
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
