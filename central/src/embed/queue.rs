//! The embed queue: three lanes (`query` > `ingest-realtime` > `ingest-bulk`)
//! feeding one worker thread, the only caller of the model, so a search never
//! waits behind a backlog of ingest, only behind the one batch in flight.
//!
//! Each lane is a bounded channel; the worker picks with a biased `select!`,
//! so a queued query always goes before queued ingest work. The worker runs
//! the model on its own thread, outside any async runtime: embedding is CPU
//! work (and the HTTP embedders use a blocking client). Requests are cut into
//! batches of at most the embedder's `max_batch` texts (one for the embedded
//! model). A query that arrives while an ingest batch is in the model
//! preempts it (`Embedder::preempt`): the batch gives way and runs again
//! after the query, so with the embedded model a query waits for almost
//! nothing; the batches of the same request done before it are kept. A
//! search of any mode holds ingest off for as long as it runs
//! (`EmbedQueue::hold`): the model leaves both cores and the cache to it.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot, Notify};

use super::{EmbedError, Embedder};

/// Most texts in one model call, unless the embedder asks for fewer
/// (`Embedder::max_batch`): an embedding server gets several texts per
/// request. A query waits at most for the one batch in flight to stop.
/// Longer requests are split into batches of this size.
pub(crate) const MAX_BATCH: usize = 4;

/// Jobs a lane holds before callers wait for room.
const LANE_CAPACITY: usize = 64;

/// Who is waiting for the vectors, in priority order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// A person's search: served before anything else.
    Query,
    /// Ingest of runs captured minutes ago: their vectors should follow soon.
    IngestRealtime,
    /// Backfill, reindex and re-embedding: whenever nothing else waits.
    IngestBulk,
}

impl Lane {
    fn idx(self) -> usize {
        match self {
            Lane::Query => 0,
            Lane::IngestRealtime => 1,
            Lane::IngestBulk => 2,
        }
    }
}

/// Jobs waiting per lane (not counting the one the model is working on).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LaneDepths {
    pub query: usize,
    pub ingest_realtime: usize,
    pub ingest_bulk: usize,
}

/// Vectors with where the time went, for search timings.
#[derive(Debug, Clone)]
pub struct Embedded {
    /// One per text, in order.
    pub vectors: Vec<Vec<f32>>,
    /// Time spent waiting in the lane (all batches of the request).
    pub queued: Duration,
    /// Time spent in the model.
    pub embedding: Duration,
}

/// A handle to the queue; clones share it. The worker stops when the last
/// handle is dropped.
#[derive(Clone)]
pub struct EmbedQueue {
    shared: Arc<Shared>,
}

struct Shared {
    /// One sender per lane, indexed by `Lane::idx`.
    lanes: [mpsc::Sender<Job>; 3],
    /// Pending jobs per lane; shared with the worker, which decrements.
    depths: Arc<[AtomicUsize; 3]>,
    /// Texts embedded per lane since start; the worker counts them.
    embedded: Arc<[AtomicU64; 3]>,
    /// What the model is working on (`Model`), so that a query or a search
    /// knows whether it may preempt it.
    model: Arc<AtomicU8>,
    searches: Arc<Searches>,
    /// The worker's embedder, shared only so a query can `preempt` it.
    embedder: Arc<dyn Embedder>,
    /// The embedder's id, width and batch size, readable without a trip to
    /// the worker.
    model_id: String,
    dim: usize,
    max_batch: usize,
}

/// One batch for the model.
struct Job {
    lane: Lane,
    texts: Vec<String>,
    submitted: Instant,
    reply: oneshot::Sender<Result<Batch, EmbedError>>,
}

/// The worker's answer to one job.
struct Batch {
    vectors: Vec<Vec<f32>>,
    queued: Duration,
    embedding: Duration,
}

impl Shared {
    /// A query's embedding stops any ingest batch in the model.
    fn preempt_for_query(&self) {
        if self.model.load(Ordering::SeqCst) != Model::Other as u8 {
            self.embedder.preempt();
        }
    }

    /// A search stops the ingest batch in the model, unless that batch has
    /// given way to searches too long already (`MAX_INGEST_WAIT`).
    fn preempt_for_search(&self) {
        if self.model.load(Ordering::SeqCst) == Model::Ingest as u8 {
            self.embedder.preempt();
        }
    }
}

/// What the model is working on.
#[repr(u8)]
enum Model {
    /// A query, or nothing.
    Other,
    /// Ingest work, which queries and searches preempt.
    Ingest,
    /// Ingest work that gave way to searches for `MAX_INGEST_WAIT`: only a
    /// query's embedding preempts it.
    IngestToTheEnd,
}

/// Ingest gives way to searches for at most this long at a time; then its
/// batches run beside them for `INGEST_TURN`, so that searches every few
/// hundred ms cannot starve it. A query's embedding still preempts them:
/// queries never wait behind ingest.
const MAX_INGEST_WAIT: Duration = Duration::from_secs(1);

/// How long ingest runs beside searches once it has given way for
/// `MAX_INGEST_WAIT`: about four texts with the embedded model (one batch of
/// four, before it embedded one text per call).
const INGEST_TURN: Duration = Duration::from_millis(400);

/// Searches in progress: while there is one, ingest work waits.
#[derive(Default)]
struct Searches {
    running: AtomicUsize,
    /// Searches started so far: tells a quiet moment from a busy one.
    started: AtomicU64,
    /// Told when the last search ends.
    ended: Notify,
}

/// Ingest resumes only after this long without a search: the next search
/// of a burst (a person paging, an agent's next question) then finds the
/// model idle instead of stopping a batch it has just restarted.
const QUIET_AFTER_SEARCH: Duration = Duration::from_millis(50);

/// Held by a search from start to answer (`EmbedQueue::hold`).
pub struct SearchHold {
    shared: Arc<Shared>,
}

impl Drop for SearchHold {
    fn drop(&mut self) {
        let searches = &self.shared.searches;
        if searches.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            searches.ended.notify_one();
        }
    }
}

/// The receiving ends, owned by the worker.
struct Lanes {
    query: mpsc::Receiver<Job>,
    realtime: mpsc::Receiver<Job>,
    bulk: mpsc::Receiver<Job>,
}

impl EmbedQueue {
    /// Starts the worker thread, which owns `embedder` from now on.
    pub fn start(embedder: Box<dyn Embedder>) -> Result<Self, EmbedError> {
        let embedder: Arc<dyn Embedder> = Arc::from(embedder);
        let model = Arc::new(AtomicU8::new(Model::Other as u8));
        let (query_tx, query) = mpsc::channel(LANE_CAPACITY);
        let (realtime_tx, realtime) = mpsc::channel(LANE_CAPACITY);
        let (bulk_tx, bulk) = mpsc::channel(LANE_CAPACITY);
        let depths: Arc<[AtomicUsize; 3]> = Arc::default();
        let embedded: Arc<[AtomicU64; 3]> = Arc::default();
        let searches: Arc<Searches> = Arc::default();
        let shared = Shared {
            lanes: [query_tx, realtime_tx, bulk_tx],
            depths: depths.clone(),
            embedded: embedded.clone(),
            model: model.clone(),
            searches: searches.clone(),
            embedder: embedder.clone(),
            model_id: embedder.model_id().to_owned(),
            dim: embedder.dim(),
            max_batch: embedder.max_batch().max(1),
        };
        // A runtime only to wait on the lanes (and a search's end); the model itself
        // runs outside it.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .map_err(|e| EmbedError::Config(format!("embed worker runtime: {e}")))?;
        let worker = Worker {
            embedder,
            lanes: Lanes {
                query,
                realtime,
                bulk,
            },
            depths,
            embedded,
            model,
            searches,
        };
        std::thread::Builder::new()
            .name("kith-embed".into())
            .spawn(move || {
                crate::priority::lower(crate::priority::MODEL);
                worker.run(runtime)
            })
            .map_err(|e| EmbedError::Config(format!("embed worker thread: {e}")))?;
        Ok(Self {
            shared: Arc::new(shared),
        })
    }

    /// One vector per text, embedded on `lane`'s priority.
    pub async fn embed(&self, lane: Lane, texts: Vec<String>) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(self.embed_timed(lane, texts).await?.vectors)
    }

    /// `embed`, with the time spent queued and in the model.
    pub async fn embed_timed(
        &self,
        lane: Lane,
        texts: Vec<String>,
    ) -> Result<Embedded, EmbedError> {
        let mut out = Embedded {
            vectors: Vec::with_capacity(texts.len()),
            queued: Duration::ZERO,
            embedding: Duration::ZERO,
        };
        let mut texts = texts.into_iter().peekable();
        while texts.peek().is_some() {
            let batch: Vec<String> = texts.by_ref().take(self.shared.max_batch).collect();
            let done = self.submit(lane, batch).await?;
            out.vectors.extend(done.vectors);
            out.queued += done.queued;
            out.embedding += done.embedding;
        }
        Ok(out)
    }

    async fn submit(&self, lane: Lane, texts: Vec<String>) -> Result<Batch, EmbedError> {
        let (reply, answer) = oneshot::channel();
        let job = Job {
            lane,
            texts,
            submitted: Instant::now(),
            reply,
        };
        let pending = Pending::enter(&self.shared.depths[lane.idx()]);
        self.shared.lanes[lane.idx()]
            .send(job)
            .await
            .map_err(|_| EmbedError::QueueClosed)?;
        // From here on the worker decrements when it takes the job.
        pending.handed_over();
        if lane == Lane::Query {
            // Do not wait for the ingest batch in flight: it gives way and
            // runs again after this query.
            self.shared.preempt_for_query();
        }
        answer.await.map_err(|_| EmbedError::QueueClosed)?
    }

    /// Holds ingest work off until the guard is dropped: the batch in the
    /// model gives way, and no other starts; queries still run. A search
    /// holds it from start to answer, whatever its mode: a keyword search
    /// beside a batch on both cores ran at twice its idle p99.
    pub fn hold(&self) -> SearchHold {
        self.shared.searches.started.fetch_add(1, Ordering::SeqCst);
        self.shared.searches.running.fetch_add(1, Ordering::SeqCst);
        // Counted before looking: an ingest batch that starts after this
        // sees the count and gives way itself (`Worker::embed`).
        self.shared.preempt_for_search();
        SearchHold {
            shared: self.shared.clone(),
        }
    }

    /// Jobs waiting in each lane right now.
    pub fn depths(&self) -> LaneDepths {
        let [query, realtime, bulk] = &*self.shared.depths;
        LaneDepths {
            query: query.load(Ordering::SeqCst),
            ingest_realtime: realtime.load(Ordering::SeqCst),
            ingest_bulk: bulk.load(Ordering::SeqCst),
        }
    }

    /// Texts embedded per lane since start (query, realtime, bulk), for
    /// throughput per lane.
    pub fn embedded_texts(&self) -> [u64; 3] {
        let [q, r, b] = &*self.shared.embedded;
        [q, r, b].map(|c| c.load(Ordering::Relaxed))
    }

    pub fn model_id(&self) -> &str {
        &self.shared.model_id
    }

    pub fn dim(&self) -> usize {
        self.shared.dim
    }
}

/// Counts a job as pending while its caller hands it to the lane, and
/// uncounts it if the caller gives up (cancelled, queue closed) before the
/// lane has it.
struct Pending<'a> {
    depth: &'a AtomicUsize,
    handed_over: bool,
}

impl<'a> Pending<'a> {
    fn enter(depth: &'a AtomicUsize) -> Self {
        depth.fetch_add(1, Ordering::SeqCst);
        Self {
            depth,
            handed_over: false,
        }
    }

    fn handed_over(mut self) {
        self.handed_over = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.handed_over {
            self.depth.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// The worker's side of the queue.
struct Worker {
    embedder: Arc<dyn Embedder>,
    lanes: Lanes,
    depths: Arc<[AtomicUsize; 3]>,
    embedded: Arc<[AtomicU64; 3]>,
    model: Arc<AtomicU8>,
    searches: Arc<Searches>,
}

/// A query preempted by mistake (its preemption raced the ingest batch's
/// end) is simply run again, this many times at most.
const QUERY_ATTEMPTS: u32 = 3;

impl Worker {
    /// Takes the most urgent job, runs the model, answers; until every
    /// handle is gone. Ingest work a query preempted runs again right after
    /// the queries waiting, before any other ingest work; while a search
    /// holds ingest off, only queries run (for `MAX_INGEST_WAIT` at most).
    fn run(mut self, runtime: tokio::runtime::Runtime) {
        let mut preempted: Option<Job> = None;
        let mut held_query: Option<Job> = None;
        // Since when ingest work has been giving way, without a batch done;
        // its turn beside searches follows `MAX_INGEST_WAIT` after.
        let mut waiting_since: Option<Instant> = None;
        loop {
            let job = match (held_query.take(), preempted.take()) {
                (Some(query), ingest) => {
                    preempted = ingest;
                    query
                }
                (None, Some(ingest)) => match self.lanes.query.try_recv() {
                    Ok(query) => {
                        preempted = Some(ingest);
                        self.taken(&query);
                        query
                    }
                    Err(_) => ingest,
                },
                (None, None) => match runtime.block_on(next_job(&mut self.lanes)) {
                    Some(job) => {
                        self.taken(&job);
                        job
                    }
                    None => break,
                },
            };
            if job.reply.is_closed() {
                // The caller stopped waiting (a search timed out): skip the work.
                continue;
            }
            let queued = job.submitted.elapsed();
            let started = Instant::now();
            let ingest = job.lane != Lane::Query;
            let to_the_end =
                ingest && waiting_since.is_some_and(|t| t.elapsed() >= MAX_INGEST_WAIT);
            let result = self.embed(&job, to_the_end);
            if matches!(result, Err(EmbedError::Preempted)) {
                preempted = Some(job);
                if to_the_end {
                    // A query stopped it: it waits its time again, rather
                    // than start beside the rest of that query's search.
                    waiting_since = None;
                }
                let since = *waiting_since.get_or_insert_with(Instant::now);
                held_query = runtime.block_on(self.while_searching(since + MAX_INGEST_WAIT));
                if let Some(query) = &held_query {
                    self.taken(query);
                }
                continue;
            }
            // Ingest done: it waits no more, unless this was its turn beside
            // searches and the turn goes on.
            let turn_goes_on = to_the_end
                && waiting_since.is_some_and(|t| t.elapsed() < MAX_INGEST_WAIT + INGEST_TURN);
            if ingest && !turn_goes_on {
                waiting_since = None;
            }
            if let Err(e) = &result {
                tracing::warn!(model = self.embedder.model_id(), lane = ?job.lane, error = %e, "embedding failed");
            } else {
                self.embedded[job.lane.idx()].fetch_add(job.texts.len() as u64, Ordering::Relaxed);
            }
            let _ = job.reply.send(result.map(|vectors| Batch {
                vectors,
                queued,
                embedding: started.elapsed(),
            }));
        }
        tracing::debug!("embed queue closed; worker stops");
    }

    /// Waits while a search holds ingest off and `QUIET_AFTER_SEARCH`
    /// after the last one, but not past `until`; or until a query comes
    /// (which it returns).
    async fn while_searching(&mut self, until: Instant) -> Option<Job> {
        let searches = &self.searches;
        loop {
            let started = searches.started.load(Ordering::SeqCst);
            let quiet = async {
                while searches.running.load(Ordering::SeqCst) > 0 {
                    searches.ended.notified().await;
                }
                tokio::time::sleep(QUIET_AFTER_SEARCH).await;
            };
            tokio::select! {
                biased;
                Some(query) = self.lanes.query.recv() => return Some(query),
                () = tokio::time::sleep_until(until.into()) => return None,
                () = quiet => {}
            }
            if searches.running.load(Ordering::SeqCst) == 0
                && searches.started.load(Ordering::SeqCst) == started
            {
                return None;
            }
        }
    }

    /// A job left its lane.
    fn taken(&self, job: &Job) {
        self.depths[job.lane.idx()].fetch_sub(1, Ordering::SeqCst);
    }

    /// Runs the model on one job; ingest jobs may come back `Preempted`
    /// (`to_the_end`: by queries only, not by searches).
    fn embed(&self, job: &Job, to_the_end: bool) -> Result<Vec<Vec<f32>>, EmbedError> {
        let texts: Vec<&str> = job.texts.iter().map(String::as_str).collect();
        let query = job.lane == Lane::Query;
        let model = match (job.lane, to_the_end) {
            (Lane::Query, _) => Model::Other,
            (_, false) => Model::Ingest,
            (_, true) => Model::IngestToTheEnd,
        };
        self.model.store(model as u8, Ordering::SeqCst);
        // Marked before looking: a search that starts after this sees the
        // mark and preempts (`EmbedQueue::hold`).
        if !query && !to_the_end && self.searches.running.load(Ordering::SeqCst) > 0 {
            self.model.store(Model::Other as u8, Ordering::SeqCst);
            return Err(EmbedError::Preempted);
        }
        let mut attempt = 0;
        let result = loop {
            attempt += 1;
            match self.embed_once(&texts) {
                Err(EmbedError::Preempted) if query && attempt < QUERY_ATTEMPTS => continue,
                other => break other,
            }
        };
        self.model.store(Model::Other as u8, Ordering::SeqCst);
        result
    }

    fn embed_once(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let model = self.embedder.model_id();
        match catch_unwind(AssertUnwindSafe(|| self.embedder.embed(texts))) {
            Ok(Ok(vectors)) if vectors.len() == texts.len() => Ok(vectors),
            Ok(Ok(vectors)) => Err(EmbedError::Inference(format!(
                "{model} returned {} vectors for {} texts",
                vectors.len(),
                texts.len()
            ))),
            Ok(Err(e)) => Err(e),
            Err(_) => {
                tracing::error!(model, "embedder panicked; the worker carries on");
                Err(EmbedError::Inference(format!("{model} panicked")))
            }
        }
    }
}

/// The next job, most urgent lane first; `None` once all lanes are closed
/// and empty.
async fn next_job(lanes: &mut Lanes) -> Option<Job> {
    tokio::select! {
        biased;
        Some(job) = lanes.query.recv() => Some(job),
        Some(job) = lanes.realtime.recv() => Some(job),
        Some(job) = lanes.bulk.recv() => Some(job),
        else => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicBool;
    use std::sync::Mutex;
    use std::time::Duration;

    use tokio::sync::mpsc::UnboundedReceiver;

    use super::*;

    /// A stand-in for the model: hashes words into 8 buckets, tells the test
    /// when each call starts (first text), and, when gated, waits for the
    /// test's permission before each call. Texts containing "boom" fail,
    /// "panic" panics.
    struct TestEmbedder {
        started: mpsc::UnboundedSender<String>,
        gate: Option<Mutex<std::sync::mpsc::Receiver<()>>>,
        batch_sizes: Arc<Mutex<Vec<usize>>>,
    }

    impl Embedder for TestEmbedder {
        fn model_id(&self) -> &str {
            "test-hash"
        }

        fn dim(&self) -> usize {
            8
        }

        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            let _ = self
                .started
                .send(texts.first().map(|t| t.to_string()).unwrap_or_default());
            if let Some(gate) = &self.gate {
                let released = gate.lock().map(|g| g.recv().is_ok()).unwrap_or(false);
                if !released {
                    return Err(EmbedError::Inference("test gate closed".into()));
                }
            }
            if let Ok(mut sizes) = self.batch_sizes.lock() {
                sizes.push(texts.len());
            }
            if texts.iter().any(|t| t.contains("panic")) {
                panic!("test embedder told to panic");
            }
            if texts.iter().any(|t| t.contains("boom")) {
                return Err(EmbedError::Inference("boom".into()));
            }
            Ok(texts.iter().map(|t| hash_vector(t)).collect())
        }
    }

    fn hash_vector(text: &str) -> Vec<f32> {
        let mut v = vec![0f32; 8];
        for word in text.split_whitespace() {
            let h = word.bytes().fold(17usize, |h, b| {
                h.wrapping_mul(31).wrapping_add(usize::from(b))
            });
            v[h % 8] += 1.0;
        }
        crate::embed::l2_normalise(&mut v);
        v
    }

    struct Harness {
        queue: EmbedQueue,
        started: UnboundedReceiver<String>,
        /// Present when gated: one `()` lets one model call proceed.
        release: Option<std::sync::mpsc::Sender<()>>,
        batch_sizes: Arc<Mutex<Vec<usize>>>,
    }

    fn harness(gated: bool) -> anyhow::Result<Harness> {
        let (started_tx, started) = mpsc::unbounded_channel();
        let (release, gate) = std::sync::mpsc::channel();
        let batch_sizes = Arc::default();
        let embedder = TestEmbedder {
            started: started_tx,
            gate: gated.then(|| Mutex::new(gate)),
            batch_sizes: Arc::clone(&batch_sizes),
        };
        let queue = EmbedQueue::start(Box::new(embedder))?;
        Ok(Harness {
            queue,
            started,
            release: gated.then_some(release),
            batch_sizes,
        })
    }

    impl Harness {
        fn spawn(
            &self,
            lane: Lane,
            text: &str,
        ) -> tokio::task::JoinHandle<Result<Vec<Vec<f32>>, EmbedError>> {
            let queue = self.queue.clone();
            let texts = vec![text.to_owned()];
            tokio::spawn(async move { queue.embed(lane, texts).await })
        }

        async fn next_started(&mut self) -> anyhow::Result<String> {
            let started =
                tokio::time::timeout(Duration::from_secs(10), self.started.recv()).await?;
            started.ok_or_else(|| anyhow::anyhow!("the worker is gone"))
        }

        fn release_one(&self) -> anyhow::Result<()> {
            match &self.release {
                Some(release) => Ok(release.send(())?),
                None => anyhow::bail!("not gated"),
            }
        }

        /// Waits (bounded) until the depths reach `want`: readiness, not sleep.
        async fn depths_become(&self, want: LaneDepths) -> anyhow::Result<()> {
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.queue.depths() != want {
                anyhow::ensure!(
                    Instant::now() < deadline,
                    "depths {:?}, wanted {want:?}",
                    self.queue.depths()
                );
                tokio::task::yield_now().await;
            }
            Ok(())
        }
    }

    #[tokio::test]
    async fn a_later_query_goes_before_queued_ingest() -> anyhow::Result<()> {
        let mut h = harness(true)?;
        let first = h.spawn(Lane::IngestBulk, "bulk 0");
        assert_eq!(
            h.next_started().await?,
            "bulk 0",
            "the model is busy with bulk 0"
        );

        let mut waiting = Vec::new();
        for i in 1..=3 {
            waiting.push(h.spawn(Lane::IngestBulk, &format!("bulk {i}")));
        }
        h.depths_become(LaneDepths {
            query: 0,
            ingest_realtime: 0,
            ingest_bulk: 3,
        })
        .await?;
        waiting.push(h.spawn(Lane::IngestRealtime, "realtime 1"));
        h.depths_become(LaneDepths {
            query: 0,
            ingest_realtime: 1,
            ingest_bulk: 3,
        })
        .await?;
        let query = h.spawn(Lane::Query, "how did we fix the build");
        h.depths_become(LaneDepths {
            query: 1,
            ingest_realtime: 1,
            ingest_bulk: 3,
        })
        .await?;

        let mut order = Vec::new();
        for _ in 0..5 {
            h.release_one()?;
            order.push(h.next_started().await?);
        }
        h.release_one()?;
        assert_eq!(
            order,
            [
                "how did we fix the build",
                "realtime 1",
                "bulk 1",
                "bulk 2",
                "bulk 3"
            ]
        );

        let vectors = query.await??;
        assert_eq!(vectors, vec![hash_vector("how did we fix the build")]);
        first.await??;
        for task in waiting {
            task.await??;
        }
        assert_eq!(h.queue.depths(), LaneDepths::default());
        Ok(())
    }

    #[tokio::test]
    async fn a_failing_embedder_answers_with_errors_and_the_worker_lives_on() -> anyhow::Result<()>
    {
        let h = harness(false)?;
        let err = h.queue.embed(Lane::Query, vec!["boom".into()]).await;
        assert!(
            matches!(err, Err(EmbedError::Inference(ref m)) if m == "boom"),
            "{err:?}"
        );
        let err = h
            .queue
            .embed(Lane::IngestBulk, vec!["panic now".into()])
            .await;
        assert!(
            matches!(err, Err(EmbedError::Inference(ref m)) if m.contains("panicked")),
            "{err:?}"
        );
        let ok = h
            .queue
            .embed(Lane::Query, vec!["still here".into()])
            .await?;
        assert_eq!(ok, vec![hash_vector("still here")]);
        Ok(())
    }

    #[tokio::test]
    async fn long_requests_are_cut_into_small_batches_in_order() -> anyhow::Result<()> {
        let h = harness(false)?;
        let texts: Vec<String> = (0..10).map(|i| format!("chunk {i} of the run")).collect();
        let timed = h.queue.embed_timed(Lane::IngestBulk, texts.clone()).await?;
        let want: Vec<Vec<f32>> = texts.iter().map(|t| hash_vector(t)).collect();
        assert_eq!(timed.vectors, want);
        assert_eq!(
            *h.batch_sizes.lock().map_err(|e| anyhow::anyhow!("{e}"))?,
            [4, 4, 2]
        );
        assert!(
            h.queue.embed(Lane::Query, Vec::new()).await?.is_empty(),
            "no texts, no model call"
        );
        assert_eq!(
            h.batch_sizes
                .lock()
                .map_err(|e| anyhow::anyhow!("{e}"))?
                .len(),
            3
        );
        Ok(())
    }

    /// Its ingest call number `blocking_call` (from 0) runs until
    /// preempted; everything else is instant. Records the order of calls.
    #[derive(Default)]
    struct Preemptible {
        stop: AtomicBool,
        ingest_calls: AtomicUsize,
        calls: Mutex<Vec<String>>,
        blocking_call: usize,
        /// `max_batch`, when not the default.
        batch: Option<usize>,
    }
    impl Embedder for Arc<Preemptible> {
        fn model_id(&self) -> &str {
            "test-preemptible"
        }
        fn dim(&self) -> usize {
            8
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbedError> {
            let first = texts.first().copied().unwrap_or_default();
            let mut outcome = "ok";
            if first.starts_with("ingest")
                && self.ingest_calls.fetch_add(1, Ordering::SeqCst) == self.blocking_call
            {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !self.stop.swap(false, Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(1));
                }
                outcome = "preempted";
            }
            if let Ok(mut calls) = self.calls.lock() {
                calls.push(format!("{first}: {outcome}"));
            }
            if outcome == "preempted" {
                return Err(EmbedError::Preempted);
            }
            Ok(texts.iter().map(|t| hash_vector(t)).collect())
        }
        fn preempt(&self) {
            self.stop.store(true, Ordering::SeqCst);
        }
        fn max_batch(&self) -> usize {
            self.batch.unwrap_or(MAX_BATCH)
        }
    }

    #[tokio::test]
    async fn a_query_preempts_the_ingest_batch_in_the_model() -> anyhow::Result<()> {
        let model = Arc::new(Preemptible::default());
        let queue = EmbedQueue::start(Box::new(model.clone()))?;
        let q = queue.clone();
        let ingest =
            tokio::spawn(async move { q.embed(Lane::IngestBulk, vec!["ingest a".into()]).await });
        while model.ingest_calls.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let query = queue.embed_timed(Lane::Query, vec!["query".into()]).await?;
        assert_eq!(query.vectors.len(), 1);
        assert_eq!(
            ingest.await??.len(),
            1,
            "the preempted batch still gets its vectors"
        );
        let calls = model.calls.lock().map(|c| c.clone()).unwrap_or_default();
        assert_eq!(calls, ["ingest a: preempted", "query: ok", "ingest a: ok"]);
        assert_eq!(queue.embedded_texts(), [1, 0, 1], "each text counted once");
        assert_eq!(queue.depths(), LaneDepths::default());
        Ok(())
    }

    #[tokio::test]
    async fn a_preempted_request_keeps_the_batches_done_before() -> anyhow::Result<()> {
        let model = Arc::new(Preemptible {
            blocking_call: 1,
            batch: Some(1),
            ..Preemptible::default()
        });
        let queue = EmbedQueue::start(Box::new(model.clone()))?;
        let q = queue.clone();
        let texts: Vec<String> = ["ingest a", "ingest b", "ingest c"]
            .map(String::from)
            .into();
        let want: Vec<Vec<f32>> = texts.iter().map(|t| hash_vector(t)).collect();
        let ingest = tokio::spawn(async move { q.embed(Lane::IngestBulk, texts).await });
        let second_call = async {
            while model.ingest_calls.load(Ordering::SeqCst) < 2 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        };
        tokio::time::timeout(Duration::from_secs(10), second_call)
            .await
            .map_err(|_| anyhow::anyhow!("the request was not cut into calls of one text"))?;
        queue.embed(Lane::Query, vec!["query".into()]).await?;
        assert_eq!(ingest.await??, want, "every vector, in order");
        let calls = model.calls.lock().map(|c| c.clone()).unwrap_or_default();
        assert_eq!(
            calls,
            [
                "ingest a: ok",
                "ingest b: preempted",
                "query: ok",
                "ingest b: ok",
                "ingest c: ok"
            ],
            "one text per call, and the one done before the query is not redone"
        );
        assert_eq!(queue.embedded_texts(), [1, 0, 3]);
        Ok(())
    }

    #[tokio::test]
    async fn a_search_holds_ingest_off_until_it_answers_and_queries_still_run() -> anyhow::Result<()>
    {
        let model = Arc::new(Preemptible::default());
        let queue = EmbedQueue::start(Box::new(model.clone()))?;
        let calls = || model.calls.lock().map(|c| c.clone()).unwrap_or_default();
        let q = queue.clone();
        let first =
            tokio::spawn(async move { q.embed(Lane::IngestBulk, vec!["ingest a".into()]).await });
        while model.ingest_calls.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        // A search starts: the batch in the model gives way and stays out,
        // and ingest submitted meanwhile does not start either.
        let hold = queue.hold();
        let q = queue.clone();
        let second =
            tokio::spawn(
                async move { q.embed(Lane::IngestRealtime, vec!["ingest b".into()]).await },
            );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(calls(), ["ingest a: preempted"]);
        // The search's own query embedding is not held.
        assert_eq!(
            queue.embed(Lane::Query, vec!["query".into()]).await?.len(),
            1
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(calls(), ["ingest a: preempted", "query: ok"]);
        drop(hold);
        assert_eq!(first.await??.len(), 1);
        assert_eq!(second.await??.len(), 1);
        assert_eq!(
            calls(),
            [
                "ingest a: preempted",
                "query: ok",
                "ingest a: ok",
                "ingest b: ok"
            ]
        );
        // Held while the model is idle: new ingest waits all the same.
        let hold = queue.hold();
        let q = queue.clone();
        let third =
            tokio::spawn(async move { q.embed(Lane::IngestBulk, vec!["ingest c".into()]).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(calls().len(), 4, "nothing ran while held");
        drop(hold);
        assert_eq!(third.await??.len(), 1);
        assert_eq!(calls().last().map(String::as_str), Some("ingest c: ok"));
        assert_eq!(queue.embedded_texts(), [1, 1, 2]);
        Ok(())
    }

    #[tokio::test]
    async fn searches_without_end_hold_ingest_off_for_a_bounded_time() -> anyhow::Result<()> {
        let h = harness(false)?;
        let _search = h.queue.hold();
        let started = Instant::now();
        let ingest = h.queue.embed(Lane::IngestBulk, vec!["bulk".into()]);
        let vectors = tokio::time::timeout(Duration::from_secs(30), ingest).await??;
        assert_eq!(vectors.len(), 1, "done while the search still holds");
        assert!(started.elapsed() >= MAX_INGEST_WAIT, "it gave way first");
        Ok(())
    }

    #[tokio::test]
    async fn ingest_that_has_given_way_runs_a_turn_of_batches_beside_searches() -> anyhow::Result<()>
    {
        let model = Arc::new(Preemptible {
            // No call blocks: every batch is instant.
            blocking_call: usize::MAX,
            batch: Some(1),
            ..Preemptible::default()
        });
        let queue = EmbedQueue::start(Box::new(model.clone()))?;
        let _search = queue.hold();
        let started = Instant::now();
        let texts: Vec<String> = (0..3).map(|i| format!("ingest {i}")).collect();
        let ingest = queue.embed(Lane::IngestBulk, texts);
        let vectors = tokio::time::timeout(Duration::from_secs(30), ingest).await??;
        assert_eq!(vectors.len(), 3, "done while the search still holds");
        let took = started.elapsed();
        assert!(took >= MAX_INGEST_WAIT, "it gave way first ({took:?})");
        // One wait, then all three in the turn (not a wait before each).
        assert!(took < 2 * MAX_INGEST_WAIT, "it waited again ({took:?})");
        Ok(())
    }

    #[tokio::test]
    async fn an_abandoned_job_is_skipped_and_uncounted() -> anyhow::Result<()> {
        let mut h = harness(true)?;
        let busy = h.spawn(Lane::IngestBulk, "bulk 0");
        assert_eq!(h.next_started().await?, "bulk 0");
        let gone = h.spawn(Lane::Query, "a search that times out");
        h.depths_become(LaneDepths {
            query: 1,
            ..LaneDepths::default()
        })
        .await?;
        gone.abort();
        let _ = gone.await;
        let kept = h.spawn(Lane::IngestBulk, "bulk 1");
        h.depths_become(LaneDepths {
            query: 1,
            ingest_bulk: 1,
            ..LaneDepths::default()
        })
        .await?;

        h.release_one()?;
        assert_eq!(
            h.next_started().await?,
            "bulk 1",
            "the abandoned query never reached the model"
        );
        h.release_one()?;
        busy.await??;
        kept.await??;
        assert_eq!(h.queue.depths(), LaneDepths::default());
        Ok(())
    }

    #[tokio::test]
    async fn the_queue_reports_its_model() -> anyhow::Result<()> {
        let h = harness(false)?;
        assert_eq!((h.queue.model_id(), h.queue.dim()), ("test-hash", 8));
        Ok(())
    }

    /// The real model behind the queue, when installed.
    #[tokio::test]
    async fn the_embedded_model_serves_queries_through_the_queue() -> anyhow::Result<()> {
        let Some(dir) = std::env::var_os("KITH_MODEL_DIR").filter(|d| !d.is_empty()) else {
            eprintln!("KITH_MODEL_DIR is unset: skipping the queue with the real model");
            return Ok(());
        };
        let dir = std::path::PathBuf::from(dir);
        let embedder =
            tokio::task::spawn_blocking(move || super::super::OnnxEmbedder::load(&dir)).await??;
        let queue = EmbedQueue::start(Box::new(embedder))?;
        let bulk: Vec<String> = (0..24)
            .map(|i| format!("chunk {i}: cargo test failed in the indexer"))
            .collect();
        let (bulk, query) = tokio::join!(
            queue.embed(Lane::IngestBulk, bulk),
            queue.embed(Lane::Query, vec!["why did the tests fail".into()])
        );
        assert_eq!(bulk?.len(), 24);
        let query = query?;
        assert_eq!((query.len(), query[0].len(), queue.dim()), (1, 384, 384));
        Ok(())
    }
}
