//! The Meilisearch backend: every chunk is a document in one Meilisearch
//! index, written and searched through the official `meilisearch-sdk`.
//! Text goes in at `commit` (keyword search sees it at once); vectors come
//! later from kith's own embed queue as partial updates (a `userProvided`
//! embedder named `default`). A search asks Meilisearch a question per
//! word of the query and one for the chunks holding every word, whose
//! answers central ranks with BM25 (`bm25`: Meilisearch's own ranking of
//! several words finds little for a question typed as a sentence), and
//! the vector search beside them, and fuses the two with the embedded
//! index's fusion. Every search carries the viewer's readability clause
//! (`filter::readable_by`), built here and nowhere else.
//!
//! **Sync over async.** `SearchIndex` is synchronous: it is called from
//! `spawn_blocking` threads, from the indexer's thread (which is inside
//! central's runtime: it runs `Handle::block_on`) and from admin commands
//! that have no runtime. The SDK is async, so a `MeiliIndex` owns a small
//! tokio runtime (one worker thread, which also drives reqwest's connection
//! pool); every call spawns its future there and waits on a channel for the
//! result (`MeiliIndex::call`), never blocking on a runtime itself, so it
//! works from any thread. Every call is bounded by a timeout, so a slow
//! Meilisearch costs the calling thread seconds, never forever.
//!
//! **Availability.** Opening does not touch the network: the index and its
//! settings are made on first use, so central starts (and ingest keeps
//! answering 202) while Meilisearch is down. A failed commit leaves the
//! indexing jobs in the registry, so the work is redone when Meilisearch is
//! back; searches answer 503 `search_backend_unavailable` meanwhile.

mod bm25;
mod filter;
mod http;
mod schema;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, RwLock, TryLockError};
use std::time::Duration;

use kith_proto::AgentRuntime;
use kith_shared::chunk::Chunk;
use meilisearch_sdk::client::Client;
use meilisearch_sdk::documents::{DocumentDeletionQuery, DocumentsQuery, DocumentsResults};
use meilisearch_sdk::errors::{Error as SdkError, ErrorCode, ErrorType, MeilisearchError};
use meilisearch_sdk::request::{HttpClient, Method};
use meilisearch_sdk::search::{
    MatchingStrategies, MultiSearchQuery, SearchQuery, SearchResults, Selectors,
};
use meilisearch_sdk::task_info::TaskInfo;
use meilisearch_sdk::tasks::Task;
use serde::Deserialize;

use super::{
    chunk_id, split_chunk_id, words, ChunkVector, Filters, IndexHit, SearchIndex, Standing,
};
use crate::config::{MeiliKey, SearchConfig};
use crate::error::{Code, Error, Result};
use crate::index::fusion;
use crate::privacy::Readability;
use crate::run::Run;
use http::Http;
use schema::{ChunkDoc, HitDoc, VectorDoc, WithVector, EMBEDDER, PRIMARY_KEY};

/// The index, reached through kith's HTTP client (see `http`).
type Index = meilisearch_sdk::indexes::Index<Http>;

/// One HTTP call (search, document fetch, enqueueing a write).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Waiting for a document write to be processed.
const WRITE_TIMEOUT: Duration = Duration::from_secs(60);
/// Waiting for settings, index creation or deletion: a settings change
/// re-indexes every document.
const SETTINGS_TIMEOUT: Duration = Duration::from_secs(600);
/// How often a task's status is polled while waiting for it.
const POLL_INTERVAL: Duration = Duration::from_millis(25);
/// Documents per write request.
const DOCS_PER_REQUEST: usize = 1000;

pub(crate) struct MeiliIndex {
    /// Runs the SDK's futures (see the module doc). `None` only in `drop`.
    rt: Option<tokio::runtime::Runtime>,
    /// The index, and through its `client` the server.
    index: Index,
    /// The client the SDK uses, for the one route it does not cover
    /// (`similarity`).
    http: Http,
    /// The server's URL, for messages (the key is never in it).
    url: String,
    /// Chunks put since the last commit, and the runs they replace.
    pending: Mutex<Pending>,
    /// Whether the index exists with kith's settings in this process (read
    /// without a lock by every call), and the lock a set-up holds.
    ready: AtomicBool,
    setting_up: Mutex<()>,
    /// The attached model and its dimension: what `put_vectors` writes and
    /// what semantic search ranks.
    model: RwLock<Option<(String, usize)>>,
    /// Held by `commit` while it replaces runs' chunks, by `delete_runs`
    /// and `drop_all_vectors` while they delete or rewrite documents, and by
    /// `put_vectors` from reading the chunks' texts until its update is
    /// done: a vector made from a text a commit has since replaced (or
    /// deleted) is never written onto the new document, where its
    /// `vector_model` would say the new text has its vector (a partial
    /// update of a deleted document would even make one of the vector
    /// alone), and a document deleted is never written back. Taken after
    /// `setting_up`, never the other way round.
    vector_writes: Mutex<()>,
}

#[derive(Default)]
struct Pending {
    runs: Vec<String>,
    docs: Vec<ChunkDoc>,
}

impl MeiliIndex {
    /// A handle on the configured server and index. No network call: see
    /// the module doc.
    pub(crate) fn open(config: &SearchConfig) -> Result<Self> {
        let key = match (&config.api_key, &config.api_key_file) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(path)) => Some(MeiliKey::read(path)?),
            (None, None) => None,
        };
        let url = config.url.trim_end_matches('/').to_owned();
        let http = Http::new(key.as_ref())
            .map_err(|e| Error::Internal(format!("Meilisearch client for {url}: {e}")))?;
        let http_for_reads = http.clone();
        let client = Client::new_with_client(url.clone(), key.map(|k| k.expose().to_owned()), http);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("kith-meili")
            .enable_all()
            .build()?;
        Ok(Self {
            rt: Some(rt),
            index: client.index(&config.index),
            http: http_for_reads,
            url,
            pending: Mutex::new(Pending::default()),
            ready: AtomicBool::new(false),
            setting_up: Mutex::new(()),
            model: RwLock::new(None),
            vector_writes: Mutex::new(()),
        })
    }

    /// Runs one SDK call on the index's own runtime and waits at most
    /// `limit` for its result. `call` gets a handle on the index (its
    /// `client` reaches the server) and returns the future to run. The
    /// future is spawned, and this thread waits on a channel, so no runtime
    /// is ever blocked on from inside another (see the module doc).
    fn call<T, Fut>(
        &self,
        what: &str,
        limit: Duration,
        call: impl FnOnce(Index) -> Fut,
    ) -> Result<T>
    where
        T: Send + 'static,
        Fut: Future<Output = std::result::Result<T, SdkError>> + Send + 'static,
    {
        let rt = self
            .rt
            .as_ref()
            .ok_or_else(|| Error::Internal("Meilisearch runtime is gone".into()))?;
        let fut = call(self.index.clone());
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        rt.spawn(async move {
            let _ = tx.send(tokio::time::timeout(limit, fut).await);
        });
        match rx.recv() {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(self.sdk_error(what, e)),
            Ok(Err(_)) => Err(self.unavailable(format!(
                "did not finish {what} within {} s",
                limit.as_secs()
            ))),
            Err(_) => Err(Error::Internal(format!(
                "Meilisearch runtime stopped during {what}"
            ))),
        }
    }

    /// Waits until Meilisearch processed `task`; a failed task is an error
    /// (the HTTP call that enqueued it succeeded either way).
    fn wait(&self, what: &str, task: TaskInfo, limit: Duration) -> Result<()> {
        let task = self.call(what, limit + REQUEST_TIMEOUT, move |index| async move {
            task.wait_for_completion(&index.client, Some(POLL_INTERVAL), Some(limit))
                .await
        })?;
        match task {
            Task::Failed { content } if content.error.error_code == ErrorCode::IndexNotFound => {
                Err(self.index_lost(what))
            }
            Task::Failed { content } => Err(Error::Internal(format!(
                "Meilisearch at {} failed {what}: {}",
                self.url, content.error
            ))),
            _ => Ok(()),
        }
    }

    /// Enqueues a write (`call` as in `MeiliIndex::call`) and waits until
    /// Meilisearch processed it, at most `limit`.
    fn write<Fut>(&self, what: &str, limit: Duration, call: impl FnOnce(Index) -> Fut) -> Result<()>
    where
        Fut: Future<Output = std::result::Result<TaskInfo, SdkError>> + Send + 'static,
    {
        let task = self.call(what, REQUEST_TIMEOUT, call)?;
        self.wait(what, task, limit)
    }

    /// The texts of the chunks `ids` that are indexed, by id.
    fn texts_of(&self, ids: Vec<String>) -> Result<HashMap<String, String>> {
        let n = ids.len();
        let page = self.call(
            "reading chunks' texts",
            REQUEST_TIMEOUT,
            move |index| async move {
                let mut query = DocumentsQuery::new(&index);
                query
                    .with_ids(ids.iter().map(String::as_str))
                    .with_fields(["id", "text"])
                    .with_limit(n);
                query.execute::<ToEmbedDoc>().await
            },
        )?;
        Ok(page.results.into_iter().map(|d| (d.id, d.text)).collect())
    }

    /// The indexed chunks of `runs`, by id.
    fn chunks_of(&self, runs: &[String]) -> Result<HashMap<String, ToEmbedDoc>> {
        let mut out = HashMap::new();
        for ids in runs.chunks(DOCS_PER_REQUEST) {
            let docs = self.texts_where(filter::runs_filter(ids), "reading replaced chunks")?;
            out.extend(docs.into_iter().map(|d| (d.id.clone(), d)));
        }
        Ok(out)
    }

    /// Every chunk `filter` matches: its id, text and vector's model.
    fn texts_where(&self, filter: String, what: &str) -> Result<Vec<ToEmbedDoc>> {
        let mut out = Vec::new();
        self.each_page(
            what,
            Some(filter),
            Some(&["id", "text", "vector_model"]),
            |page| {
                out.extend(page);
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// Reads the documents `filter` matches (all of them without one), a
    /// page at a time, with only `fields` when given, handing each page to
    /// `each`.
    fn each_page<T>(
        &self,
        what: &str,
        filter: Option<String>,
        fields: Option<&'static [&'static str]>,
        mut each: impl FnMut(Vec<T>) -> Result<()>,
    ) -> Result<()>
    where
        T: serde::de::DeserializeOwned + Send + Sync + 'static,
    {
        let mut offset = 0;
        loop {
            let filter = filter.clone();
            let page = self.call(what, REQUEST_TIMEOUT, move |index| async move {
                let mut query = DocumentsQuery::new(&index);
                if let Some(filter) = &filter {
                    query.with_filter(filter);
                }
                if let Some(fields) = fields {
                    query.with_fields(fields.iter().copied());
                }
                query.with_offset(offset).with_limit(DOCS_PER_REQUEST);
                query.execute::<T>().await
            })?;
            let n = page.results.len();
            each(page.results)?;
            if n < DOCS_PER_REQUEST {
                return Ok(());
            }
            offset += n;
        }
    }

    /// Deletes every chunk of `runs` (forgotten), waiting for each task.
    fn delete_chunks_of(&self, runs: &[String]) -> Result<()> {
        for ids in runs.chunks(DOCS_PER_REQUEST) {
            let filter = filter::runs_filter(ids);
            self.write(
                "deleting forgotten chunks",
                WRITE_TIMEOUT,
                move |index| async move {
                    let mut query = DocumentDeletionQuery::new(&index);
                    query.with_filter(&filter);
                    index.delete_documents_with(&query).await
                },
            )?;
        }
        Ok(())
    }

    fn unavailable(&self, why: String) -> Error {
        Error::unavailable(
            Code::SearchBackendUnavailable,
            format!(
                "search backend unavailable: Meilisearch at {} {why}",
                self.url
            ),
        )
    }

    /// The index was deleted while central ran (another tool, a
    /// Meilisearch data folder made anew): every search and write fails
    /// until it is rebuilt, which is the operator's to start.
    fn index_lost(&self, what: &str) -> Error {
        self.unavailable(format!(
            "has no index {} ({what}): stop central and run `kith-central reindex`",
            self.index.uid
        ))
    }

    /// Down, slow, refusing the key or failing inside: unavailable (503).
    /// A request Meilisearch calls invalid is a bug in kith: internal.
    fn sdk_error(&self, what: &str, e: SdkError) -> Error {
        match &e {
            _ if is_index_not_found(&e) => self.index_lost(what),
            SdkError::Meilisearch(MeilisearchError {
                error_type: ErrorType::InvalidRequest,
                ..
            }) => Error::Internal(format!("Meilisearch at {} rejected {what}: {e}", self.url)),
            _ => self.unavailable(format!("failed {what}: {e}")),
        }
    }

    /// Makes sure the index exists with kith's settings and, once a model
    /// is attached, the embedder; at most once per process unless it fails.
    fn ensure_ready(&self) -> Result<()> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let _setting_up = self.setting_up.lock().unwrap_or_else(|p| p.into_inner());
        self.set_up_unless_ready()
    }

    /// `ensure_ready` for a search, which does not queue behind another
    /// call's set-up under way (settings on a large index, or a server that
    /// does not answer, can take minutes: each waiting search would hold a
    /// thread that long): it is answered unavailable at once, to retry.
    fn ready_to_search(&self) -> Result<()> {
        if self.ready.load(Ordering::Acquire) {
            return Ok(());
        }
        let _setting_up = match self.setting_up.try_lock() {
            Ok(guard) => guard,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                return Err(self.unavailable(
                    "is being set up for kith by another request (its settings, or a server \
                     that does not answer yet); search again in a moment"
                        .into(),
                ))
            }
        };
        self.set_up_unless_ready()
    }

    /// Sets the index up again (a model attached, the index deleted).
    fn set_up_anew(&self) -> Result<()> {
        let _setting_up = self.setting_up.lock().unwrap_or_else(|p| p.into_inner());
        self.ready.store(false, Ordering::Release);
        self.set_up_unless_ready()
    }

    /// With `setting_up` held: sets the index up unless another call did.
    fn set_up_unless_ready(&self) -> Result<()> {
        if !self.ready.load(Ordering::Acquire) {
            self.set_up()?;
            self.ready.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn set_up(&self) -> Result<()> {
        if !self.index_exists()? {
            self.write(
                "creating the index",
                SETTINGS_TIMEOUT,
                move |index| async move {
                    index
                        .client
                        .create_index(&index.uid, Some(PRIMARY_KEY))
                        .await
                },
            )?;
        }
        self.write(
            "applying settings",
            SETTINGS_TIMEOUT,
            move |index| async move { index.set_settings(&schema::base_settings()).await },
        )?;
        let existing = self
            .call(
                "reading embedders",
                REQUEST_TIMEOUT,
                move |index| async move { index.get_embedders().await },
            )?
            .get(EMBEDDER)
            .and_then(|e| e.dimensions);
        let attached = self.model.read().unwrap_or_else(|p| p.into_inner()).clone();
        match (attached, existing) {
            (Some((_, want)), Some(have)) if want != have => {
                // Another model's vectors cannot be ranked against this
                // model's queries, and Meilisearch refuses a dimension that
                // a stored vector does not have: drop them, then change it.
                tracing::warn!(
                    have,
                    want,
                    "embedding dimension changed: dropping old vectors"
                );
                self.drop_all_vectors()?;
                self.set_embedder(want)
            }
            // Every document opts out with `{"default": null}` until its
            // vector comes, so the embedder can be added at any time.
            (Some((_, want)), None) => self.set_embedder(want),
            _ => Ok(()),
        }
    }

    /// Whether the index exists (a 404 `index_not_found` says it does not).
    fn index_exists(&self) -> Result<bool> {
        // `index_not_found` is an answer, not a failure: it comes back as
        // `Ok(false)` from inside the call.
        self.call(
            "reading the index",
            REQUEST_TIMEOUT,
            move |index| async move {
                match index.client.get_raw_index(&index.uid).await {
                    Ok(_) => Ok(true),
                    Err(e) if is_index_not_found(&e) => Ok(false),
                    Err(e) => Err(e),
                }
            },
        )
    }

    fn set_embedder(&self, dim: usize) -> Result<()> {
        self.write(
            "configuring the embedder",
            SETTINGS_TIMEOUT,
            move |index| async move { index.set_embedders(&schema::embedders(dim)).await },
        )
    }

    /// Rewrites every document with `{"default": null}` vectors (a model
    /// with another dimension replaces them all). Holds `vector_writes`
    /// throughout, as `commit` and `delete_runs` do: a page read before a
    /// document was replaced or deleted must not be written back after.
    fn drop_all_vectors(&self) -> Result<()> {
        let _vectors = self.vector_writes.lock().unwrap_or_else(|p| p.into_inner());
        self.each_page(
            "reading documents",
            None,
            None,
            |page: Vec<serde_json::Map<String, serde_json::Value>>| {
                let docs: Vec<_> = page
                    .into_iter()
                    .map(|mut doc| {
                        doc.insert("_vectors".into(), serde_json::json!({ EMBEDDER: null }));
                        doc.insert("vector_model".into(), serde_json::Value::Null);
                        doc
                    })
                    .collect();
                if docs.is_empty() {
                    return Ok(());
                }
                self.write("dropping vectors", WRITE_TIMEOUT, move |index| async move {
                    index.add_or_replace(&docs, Some(PRIMARY_KEY)).await
                })
            },
        )
    }

    /// The searches of `asks`, each filtered by what the viewer may read
    /// and by `filters`; their results in order. Meilisearch answers a
    /// multi-search's queries one after another, so the slow ones (a vector
    /// search, the chunks holding every word) go in a multi-search of their
    /// own, sent beside the rest: the two run at once.
    fn multi_search(
        &self,
        viewer: &Readability,
        filters: &Filters,
        asks: Vec<Ask>,
    ) -> Result<Vec<SearchResults<HitDoc>>> {
        self.ready_to_search()?;
        // One filter for every ask without clauses of its own.
        let shared = filter::search_filter(viewer, filters, &[]);
        let asks: Vec<(Ask, String)> = asks
            .into_iter()
            .map(|ask| {
                let filter = if ask.extra.is_empty() {
                    shared.clone()
                } else {
                    filter::search_filter(viewer, filters, &ask.extra)
                };
                (ask, filter)
            })
            .collect();
        self.call("searching", REQUEST_TIMEOUT, move |index| async move {
            let (mut words, mut beside) =
                (index.client.multi_search(), index.client.multi_search());
            let slow: Vec<bool> = asks
                .iter()
                .map(|(ask, _)| ask.vector.is_some() || ask.every_word)
                .collect();
            for ((ask, filter), &slow) in asks.iter().zip(&slow) {
                let mut q = SearchQuery::new(&index);
                q.with_filter(filter)
                    .with_limit(ask.limit)
                    .with_show_ranking_score(true)
                    .with_attributes_to_retrieve(Selectors::Some(schema::RETRIEVED));
                if let Some(text) = &ask.text {
                    q.with_query(text);
                }
                if let Some(v) = &ask.vector {
                    q.with_vector(v).with_hybrid(EMBEDDER, 1.0);
                }
                if ask.every_word {
                    q.with_matching_strategy(MatchingStrategies::ALL);
                }
                if slow {
                    beside.with_search_query(q);
                } else {
                    words.with_search_query(q);
                }
            }
            let (words, beside) =
                futures_util::future::join(results_of(&words), results_of(&beside)).await;
            // Back in the order asked: each request keeps its own order.
            let (mut words, mut beside) = (words?.into_iter(), beside?.into_iter());
            Ok(slow
                .iter()
                .filter_map(|&slow| if slow { beside.next() } else { words.next() })
                .collect())
        })
    }

    /// The keyword side, ranked by central (`bm25`), and the vector side
    /// when `vector` is given, each best first and at most `limit`, from
    /// one `multi_search`: how many chunks the viewer may read, each term's
    /// matches (`limit` of them at most), the chunks holding every word
    /// (however deep in each word's own matches), and the vector search.
    fn sides(
        &self,
        viewer: &Readability,
        query: &str,
        vector: Option<&[f32]>,
        filters: &Filters,
        limit: usize,
    ) -> Result<(Vec<IndexHit>, Vec<IndexHit>)> {
        let terms = bm25::terms(query);
        let mut asks = Vec::with_capacity(terms.len() + 2);
        if !terms.is_empty() {
            asks.push(Ask::count());
            // A deep page's pool is shared among the words (each answer
            // carries its chunks' text), never fewer than a first page's.
            let per_word = (limit / terms.len()).max(limit.min(crate::index::fusion::POOL));
            asks.extend(terms.iter().map(|t| Ask::text(&t.ask, per_word)));
            if terms.len() > 1 {
                asks.push(Ask::every_word(&bm25::every_word_query(query), limit));
            }
        }
        if let Some(v) = vector {
            let model = self.attached_model()?;
            asks.push(Ask::vector(v, &model, limit));
        }
        if asks.is_empty() {
            return Ok(Default::default());
        }
        let mut results = self.multi_search(viewer, filters, asks)?;
        let semantic = match vector {
            Some(_) => results
                .pop()
                .map(|r| r.hits.into_iter().map(to_hit).map(with_cosine).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        let mut results = results.into_iter();
        let readable = results.next().map_or(0, |r| total(&r));
        let mut candidates = Candidates::default();
        let answers: Vec<bm25::Answer> = results
            .by_ref()
            .take(terms.len())
            .map(|r| bm25::Answer {
                total: total(&r),
                hits: r
                    .hits
                    .into_iter()
                    .map(|h| candidates.add(to_hit(h)))
                    .collect(),
            })
            .collect();
        for hit in results.flat_map(|r| r.hits) {
            candidates.add(to_hit(hit));
        }
        let texts: Vec<&str> = candidates.hits.iter().map(|h| h.text.as_str()).collect();
        let ranked = bm25::rank(&terms, &answers, readable, &texts);
        let keyword = candidates.scored(ranked.into_iter().take(limit));
        Ok((keyword, semantic))
    }

    /// The attached model, or why semantic search cannot run.
    fn attached_model(&self) -> Result<String> {
        self.model
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(m, _)| m.clone())
            .ok_or_else(|| {
                Error::unavailable(
                    Code::EmbedderUnavailable,
                    "no vectors: no embedder is attached",
                )
            })
    }

    /// Settings that differ from what kith applies, as readable lines
    /// (`doctor`). Reads only: running `doctor` never changes the index.
    fn settings_drift(&self) -> Result<Vec<String>> {
        if !self.index_exists()? {
            return Ok(vec![format!(
                "index {} does not exist on Meilisearch at {} (central creates it on first use)",
                self.index.uid, self.url
            )]);
        }
        let have = self.call(
            "reading settings",
            REQUEST_TIMEOUT,
            move |index| async move { index.get_settings().await },
        )?;
        let want = schema::base_settings();
        let mut drift = Vec::new();
        let sorted = |v: Option<Vec<String>>| {
            let mut v = v.unwrap_or_default();
            v.sort();
            v
        };
        let filterable = |s: &meilisearch_sdk::settings::Settings| {
            sorted(s.filterable_attributes.as_ref().map(|attrs| {
                attrs
                    .iter()
                    .map(|a| serde_json::to_string(a).unwrap_or_default())
                    .collect()
            }))
        };
        let checks = [
            (
                "searchableAttributes",
                sorted(have.searchable_attributes.clone()),
                sorted(want.searchable_attributes.clone()),
            ),
            ("filterableAttributes", filterable(&have), filterable(&want)),
            (
                "sortableAttributes",
                sorted(have.sortable_attributes.clone()),
                sorted(want.sortable_attributes.clone()),
            ),
        ];
        for (name, have, want) in checks {
            if have != want {
                drift.push(format!("{name} is {have:?}, kith applies {want:?}"));
            }
        }
        let min_sizes = |s: &meilisearch_sdk::settings::Settings| {
            s.typo_tolerance
                .as_ref()
                .and_then(|t| t.min_word_size_for_typos.clone())
        };
        if min_sizes(&have) != min_sizes(&want) {
            drift.push(format!(
                "typoTolerance.minWordSizeForTypos is {:?}, kith applies {:?}",
                min_sizes(&have),
                min_sizes(&want)
            ));
        }
        if have.pagination != want.pagination {
            drift.push(format!(
                "pagination is {:?}, kith applies {:?}",
                have.pagination, want.pagination
            ));
        }
        let synonyms = |s: &meilisearch_sdk::settings::Settings| {
            let mut all: Vec<(String, Vec<String>)> = s
                .synonyms
                .clone()
                .unwrap_or_default()
                .into_iter()
                .map(|(word, mut to)| {
                    to.sort();
                    (word, to)
                })
                .collect();
            all.sort();
            all
        };
        if synonyms(&have) != synonyms(&want) {
            drift.push(format!(
                "synonyms are {} words, kith applies {} (irregular forms and their base forms)",
                synonyms(&have).len(),
                synonyms(&want).len()
            ));
        }
        Ok(drift)
    }
}

impl Drop for MeiliIndex {
    fn drop(&mut self) {
        // Dropping a runtime blocks, which panics inside an async context
        // (the last `AppState` may be dropped there).
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

fn is_index_not_found(e: &SdkError) -> bool {
    matches!(
        e,
        SdkError::Meilisearch(MeilisearchError {
            error_code: ErrorCode::IndexNotFound,
            ..
        })
    )
}

/// A multi-search's results; none asked, none sent.
async fn results_of<'a>(
    multi: &'a MultiSearchQuery<'a, '_, Http>,
) -> std::result::Result<Vec<SearchResults<HitDoc>>, SdkError> {
    if multi.queries.is_empty() {
        return Ok(Vec::new());
    }
    multi.execute::<HitDoc>().await.map(|r| r.results)
}

/// One search of a multi-search: text, a vector, or neither (a count).
struct Ask {
    text: Option<String>,
    /// Only chunks holding every word of `text` (else Meilisearch drops
    /// words from the end until some chunk holds the rest).
    every_word: bool,
    vector: Option<Vec<f32>>,
    /// Filter clauses beside the viewer's and the search's.
    extra: Vec<String>,
    limit: usize,
}

impl Ask {
    /// How many chunks the viewer may read (within the search's filters).
    fn count() -> Self {
        Self {
            text: None,
            every_word: false,
            vector: None,
            extra: Vec::new(),
            limit: 0,
        }
    }

    fn text(text: &str, limit: usize) -> Self {
        Self {
            text: Some(text.to_owned()),
            ..Self::count()
        }
        .limit(limit)
    }

    /// The chunks holding every word of `text`.
    fn every_word(text: &str, limit: usize) -> Self {
        Self {
            every_word: true,
            ..Self::text(text, limit)
        }
    }

    /// Vector search over the chunks that hold `model`'s vectors.
    fn vector(vector: &[f32], model: &str, limit: usize) -> Self {
        Self {
            vector: Some(vector.to_vec()),
            extra: vec![filter::vector_model_is(model)],
            ..Self::count()
        }
        .limit(limit)
    }

    fn limit(self, limit: usize) -> Self {
        Self { limit, ..self }
    }
}

/// How many chunks matched a search: Meilisearch's `estimatedTotalHits`,
/// the size of the filtered set of matches it ranks from.
fn total(results: &SearchResults<HitDoc>) -> u64 {
    results.estimated_total_hits.unwrap_or(results.hits.len()) as u64
}

/// The hits of several searches, each chunk once, by position.
#[derive(Default)]
struct Candidates {
    hits: Vec<IndexHit>,
    at: HashMap<String, usize>,
}

impl Candidates {
    /// `hit`'s position (its first, if it was added before).
    fn add(&mut self, hit: IndexHit) -> usize {
        *self.at.entry(hit.chunk_id.clone()).or_insert_with(|| {
            self.hits.push(hit);
            self.hits.len() - 1
        })
    }

    fn position(&self, chunk_id: &str) -> Option<usize> {
        self.at.get(chunk_id).copied()
    }

    /// The hits at these positions, with these scores.
    fn scored(&self, ranked: impl IntoIterator<Item = (usize, f32)>) -> Vec<IndexHit> {
        ranked
            .into_iter()
            .map(|(i, score)| IndexHit {
                score,
                ..self.hits[i].clone()
            })
            .collect()
    }
}

/// A vector hit scored by its cosine, as on the embedded index:
/// Meilisearch scores it (1 + cosine) / 2, which squeezes the differences
/// between hits that grouping weighs against each other.
fn with_cosine(hit: IndexHit) -> IndexHit {
    IndexHit {
        score: 2.0 * hit.score - 1.0,
        ..hit
    }
}

/// A search result as the trait's hit; its snippet is the start of its
/// text until the search highlights it (`SearchIndex::highlight`).
fn to_hit(hit: meilisearch_sdk::search::SearchResult<HitDoc>) -> IndexHit {
    let doc = hit.result;
    IndexHit {
        snippet: words::text_start(&doc.text),
        score: hit.ranking_score.unwrap_or_default() as f32,
        run_id: doc.run_id,
        chunk_id: doc.id,
        role: doc.role,
        text: doc.text,
        line_start: doc.line_start,
        line_end: doc.line_end,
        started_at: doc.started_at,
        intent: doc.intent.filter(|s| !s.is_empty()),
        machine: doc.machine,
        agent_runtime: AgentRuntime::parse(&doc.runtime).unwrap_or(AgentRuntime::Other),
    }
}

/// What `chunks_to_embed` and `texts_of` read of a chunk.
#[derive(Deserialize)]
struct ToEmbedDoc {
    id: String,
    text: String,
    vector_model: Option<String>,
}

impl SearchIndex for MeiliIndex {
    fn name(&self) -> &'static str {
        "meilisearch"
    }

    fn put_run(&self, run: &Run, standing: &Standing, chunks: &[Chunk]) -> Result<()> {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        pending.runs.push(run.id.clone());
        // A run put twice before one commit keeps only its last chunks.
        pending.docs.retain(|d| d.run_id != run.id);
        pending
            .docs
            .extend(schema::chunk_docs(run, standing, chunks));
        Ok(())
    }

    fn commit(&self) -> Result<()> {
        // Taken, not copied: if Meilisearch fails, the indexer redoes the
        // batch from its durable jobs, which puts these runs again.
        let Pending { runs, docs } =
            std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        if runs.is_empty() {
            return Ok(());
        }
        self.ensure_ready()?;
        let _vectors = self.vector_writes.lock().unwrap_or_else(|p| p.into_inner());
        // A run is put again when its standing changes (a tag edit, a
        // quarantine) as well as its text: a chunk whose text stayed keeps
        // its vector (a partial update leaves `_vectors` as it is), the
        // others are replaced without one, and chunks the runs no longer
        // have go.
        let had = self.chunks_of(&runs)?;
        let new_ids: HashSet<&str> = docs.iter().map(|d| d.id.as_str()).collect();
        let gone: Vec<String> = had
            .keys()
            .filter(|id| !new_ids.contains(id.as_str()))
            .cloned()
            .collect();
        let (kept, replaced): (Vec<ChunkDoc>, Vec<ChunkDoc>) = docs.into_iter().partition(|d| {
            had.get(&d.id)
                .is_some_and(|old| old.vector_model.is_some() && old.text == d.text)
        });
        for batch in gone.chunks(DOCS_PER_REQUEST) {
            let batch = batch.to_vec();
            self.write(
                "deleting replaced chunks",
                WRITE_TIMEOUT,
                move |index| async move { index.delete_documents(&batch).await },
            )?;
        }
        for batch in replaced.chunks(DOCS_PER_REQUEST) {
            let batch = batch.to_vec();
            self.write("adding chunks", WRITE_TIMEOUT, move |index| async move {
                index.add_or_replace(&batch, Some(PRIMARY_KEY)).await
            })?;
        }
        for batch in kept.chunks(DOCS_PER_REQUEST) {
            let batch = batch
                .iter()
                .map(schema::without_vector)
                .collect::<Result<Vec<_>>>()?;
            self.write("updating chunks", WRITE_TIMEOUT, move |index| async move {
                index.add_or_update(&batch, Some(PRIMARY_KEY)).await
            })?;
        }
        Ok(())
    }

    /// Vectors live in the documents: deleting them deletes both.
    fn delete_runs(&self, run_ids: &[String]) -> Result<()> {
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.runs.retain(|r| !run_ids.contains(r));
            pending.docs.retain(|d| !run_ids.contains(&d.run_id));
        }
        if !self.index_exists()? {
            return Ok(());
        }
        self.ensure_ready()?;
        let _vectors = self.vector_writes.lock().unwrap_or_else(|p| p.into_inner());
        self.delete_chunks_of(run_ids)
    }

    fn clear(&self) -> Result<()> {
        // Deleting the index drops documents, vectors and the embedder, so
        // a rebuild can also change the embedding dimension.
        std::mem::take(&mut *self.pending.lock().unwrap_or_else(|p| p.into_inner()));
        if self.index_exists()? {
            self.write(
                "deleting the index",
                SETTINGS_TIMEOUT,
                move |index| async move { index.client.delete_index(&index.uid).await },
            )?;
        }
        self.set_up_anew()
    }

    /// Ranked by central over Meilisearch's matches for each word (see
    /// `bm25`), as many asked per word as a hybrid search asks per side.
    fn keyword(
        &self,
        viewer: &Readability,
        query: &str,
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        let (mut keyword, _) = self.sides(viewer, query, None, filters, limit.max(fusion::POOL))?;
        keyword.truncate(limit);
        Ok(keyword)
    }

    fn highlight(&self, query: &str, hits: &mut [IndexHit]) -> Result<()> {
        let snippets = words::Snippets::new(query, words::analyzer());
        for hit in hits {
            hit.snippet = snippets.of(&hit.text);
        }
        Ok(())
    }

    fn semantic(
        &self,
        viewer: &Readability,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        Ok(self.sides(viewer, "", Some(vector), filters, limit)?.1)
    }

    /// Both sides from one `multi_search`, fused and lifted by neighbours as
    /// the embedded index does (`search::fusion`).
    fn hybrid(
        &self,
        viewer: &Readability,
        query: &str,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
        semantic_ratio: f32,
    ) -> Result<Vec<IndexHit>> {
        let pool = limit.max(fusion::POOL);
        let (keyword, semantic) = self.sides(viewer, query, Some(vector), filters, pool)?;
        let mut candidates = Candidates::default();
        let mut keyed = |hits: Vec<IndexHit>| -> Vec<(usize, f32)> {
            hits.into_iter()
                .map(|hit| {
                    let score = hit.score;
                    (candidates.add(hit), score)
                })
                .collect()
        };
        let (keyword, semantic) = (keyed(keyword), keyed(semantic));
        let fused = fusion::fuse(&keyword, &semantic, semantic_ratio);
        let best = fusion::lift_by_neighbours(&fused, limit, |i| {
            let id = &candidates.hits[i].chunk_id;
            let (run, idx) = split_chunk_id(id)
                .ok_or_else(|| Error::Internal(format!("chunk id {id:?} is not <run>-<index>")))?;
            let at = |i: u32| candidates.position(&chunk_id(run, i));
            Ok::<_, Error>((
                idx.checked_sub(1).and_then(at),
                idx.checked_add(1).and_then(at),
            ))
        })?;
        Ok(candidates.scored(best))
    }

    fn attach_vectors(&self, model_id: &str, dim: usize) -> Result<()> {
        *self.model.write().unwrap_or_else(|p| p.into_inner()) = Some((model_id.to_owned(), dim));
        match self.set_up_anew() {
            Err(Error::Unavailable { message, .. }) => {
                // Central still starts; the embedder is set on first use.
                tracing::warn!(error = %message, "meilisearch is unavailable; indexing waits for it");
                Ok(())
            }
            other => other,
        }
    }

    fn put_vectors(&self, items: &[ChunkVector]) -> Result<()> {
        let model = self
            .attached_model()
            .map_err(|_| Error::Internal("put_vectors before attach_vectors".into()))?;
        self.ensure_ready()?;
        let _vectors = self.vector_writes.lock().unwrap_or_else(|p| p.into_inner());
        for batch in items.chunks(DOCS_PER_REQUEST) {
            let texts = self.texts_of(batch.iter().map(|item| item.chunk_id.clone()).collect())?;
            let docs: Vec<VectorDoc> = batch
                .iter()
                .filter(|item| texts.get(&item.chunk_id) == Some(&item.text))
                .map(|item| VectorDoc {
                    id: item.chunk_id.clone(),
                    vectors: WithVector {
                        default: item.vector.clone(),
                    },
                    vector_model: model.clone(),
                })
                .collect();
            if docs.is_empty() {
                continue;
            }
            // A partial update: the text fields stay as they are.
            self.write("adding vectors", WRITE_TIMEOUT, move |index| async move {
                index.add_or_update(&docs, Some(PRIMARY_KEY)).await
            })?;
        }
        Ok(())
    }

    fn chunks_to_embed(&self, run_id: &str) -> Result<Vec<(String, String)>> {
        let model = self.attached_model().ok();
        let filter = format!("run_id = {}", filter::quote(run_id));
        Ok(self
            .texts_where(filter, "reading a run's chunks")?
            .into_iter()
            .filter(|d| model.is_none() || d.vector_model != model)
            .map(|d| (d.id, d.text))
            .collect())
    }

    fn n_chunks(&self) -> Result<u64> {
        match self.call("reading stats", REQUEST_TIMEOUT, move |index| async move {
            index.get_stats().await
        }) {
            Ok(stats) => Ok(stats.number_of_documents as u64),
            Err(_) if !self.index_exists()? => Ok(0),
            Err(e) => Err(e),
        }
    }

    fn similarity(&self, vector: &[f32], chunk_ids: &[String]) -> Result<Vec<Option<f32>>> {
        let Ok(model) = self.attached_model() else {
            return Ok(vec![None; chunk_ids.len()]);
        };
        if chunk_ids.is_empty() {
            return Ok(Vec::new());
        }
        // The SDK's document reads cannot ask for vectors: the route itself.
        let url = format!("{}/indexes/{}/documents/fetch", self.url, self.index.uid);
        let body = serde_json::json!({
            "ids": chunk_ids,
            "fields": ["id", "vector_model"],
            "retrieveVectors": true,
            "limit": chunk_ids.len(),
        });
        let http = self.http.clone();
        let page: DocumentsResults<VectorsOf> = self.call(
            "reading hits' vectors",
            REQUEST_TIMEOUT,
            move |_| async move {
                http.request::<(), _, _>(&url, Method::Post { query: (), body }, 200)
                    .await
            },
        )?;
        // Only vectors of the attached model compare with the query's.
        let by_id: HashMap<String, Vec<f32>> = page
            .results
            .into_iter()
            .filter(|doc| doc.vector_model.as_deref() == Some(model.as_str()))
            .filter_map(|doc| Some((doc.id, doc.vectors?.embedding()?)))
            .collect();
        Ok(chunk_ids
            .iter()
            .map(|id| by_id.get(id).map(|v| cosine(vector, v)))
            .collect())
    }

    fn n_chunks_of_run(&self, run_id: &str) -> Result<u64> {
        let filter = format!("run_id = {}", filter::quote(run_id));
        match self.call(
            "counting a run's chunks",
            REQUEST_TIMEOUT,
            move |index| async move {
                let mut query = DocumentsQuery::new(&index);
                query.with_filter(&filter).with_fields(["id"]).with_limit(1);
                query.execute::<serde::de::IgnoredAny>().await
            },
        ) {
            Ok(page) => Ok(u64::from(page.total)),
            Err(_) if !self.index_exists()? => Ok(0),
            Err(e) => Err(e),
        }
    }

    fn check_settings(&self) -> Result<Vec<String>> {
        self.settings_drift()
    }

    fn outdated(&self) -> Option<String> {
        // A document an older kith-central put has no `captured_ms` or no
        // `machine_key` (its strings are then matched loosely, grants
        // included). Counted by the index's field distribution, which
        // (unlike a filter) needs no setting this kith-central may not have
        // applied yet.
        let stats = self
            .call(
                "reading the index's fields",
                REQUEST_TIMEOUT,
                |index| async move { index.get_stats().await },
            )
            .ok()?;
        let with = |field: &str| stats.field_distribution.get(field).copied().unwrap_or(0);
        (with("captured_ms").min(with("machine_key")) < stats.number_of_documents).then(|| {
            "the index holds chunks an older kith-central put: they do not say whether their \
             run is quarantined or when it was captured, or compare tags, machines and folders \
             loosely (such runs can count in the keyword scores of those they are shared with, \
             though never shown)"
                .to_owned()
        })
    }
}

/// A chunk with the vectors Meilisearch returns for it.
#[derive(serde::Deserialize)]
struct VectorsOf {
    id: String,
    vector_model: Option<String>,
    #[serde(rename = "_vectors")]
    vectors: Option<Embedders>,
}

/// `_vectors` as Meilisearch returns them: per embedder, the embeddings
/// (a list of vectors, or one vector) and whether it would regenerate them.
#[derive(serde::Deserialize)]
struct Embedders {
    default: Option<serde_json::Value>,
}

impl Embedders {
    /// kith's one vector of the chunk, in whichever shape it came.
    fn embedding(self) -> Option<Vec<f32>> {
        let value = self.default?;
        let embeddings = value.get("embeddings").unwrap_or(&value);
        let first = match embeddings.as_array()?.first()? {
            serde_json::Value::Array(inner) => inner.clone(),
            _ => embeddings.as_array()?.clone(),
        };
        first.iter().map(|x| x.as_f64().map(|f| f as f32)).collect()
    }
}

/// Cosine similarity of two vectors of the same model.
fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let norm = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    let n = norm(a) * norm(b);
    if n > 0.0 {
        dot / n
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn viewer() -> Readability {
        Readability::for_tests("ualice", Vec::new())
    }

    #[test]
    fn the_key_never_shows_in_debug() {
        let config = SearchConfig {
            api_key: Some(MeiliKey::new(" sekrit-key\n").unwrap_or_else(|e| panic!("{e}"))),
            ..SearchConfig::default()
        };
        assert!(!format!("{config:?}").contains("sekrit"));
        assert!(MeiliKey::new("two words").is_err());
        assert!(MeiliKey::new("").is_err());
    }

    /// Nothing listens on port 9: searches answer 503 with the reason, a
    /// failed commit keeps nothing half-written, and the key stays out of
    /// every message.
    #[test]
    fn an_unreachable_server_is_unavailable_not_a_panic() {
        let config = SearchConfig {
            backend: super::super::SearchBackend::Meilisearch,
            url: "http://127.0.0.1:9/".into(),
            api_key: Some(MeiliKey::new("sekrit-key").unwrap_or_else(|e| panic!("{e}"))),
            ..SearchConfig::default()
        };
        let index = MeiliIndex::open(&config).unwrap_or_else(|e| panic!("{e}"));
        let err = index
            .keyword(&viewer(), "anything", &Filters::default(), 10)
            .err()
            .unwrap_or_else(|| panic!("a search without a server succeeded"));
        assert_eq!(err.code(), Code::SearchBackendUnavailable);
        assert_eq!(
            crate::http_error::status(err.kind()),
            axum::http::StatusCode::SERVICE_UNAVAILABLE
        );
        let message = crate::http_error::body(&err).error.message;
        assert!(message.contains("http://127.0.0.1:9"), "{message}");
        assert!(!message.contains("sekrit"), "{message}");
        assert!(index.commit().is_ok(), "nothing pending: nothing to send");
        // Embedding waits for the server: no chunk is taken for unembedded.
        let err = index
            .chunks_to_embed("r1")
            .err()
            .unwrap_or_else(|| panic!("read a run's chunks without a server"));
        assert_eq!(err.code(), Code::SearchBackendUnavailable);
        // attach_vectors lets central start while the server is down.
        assert!(index.attach_vectors("m", 4).is_ok());
    }

    /// Regression: a search waited behind a set-up under way (settings on a
    /// large index can take minutes), each holding a thread meanwhile. It is
    /// answered unavailable at once instead.
    #[test]
    fn a_search_during_a_set_up_is_unavailable_at_once() {
        // A server that takes connections and never answers.
        let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap_or_else(|e| panic!("{e}"));
        let config = SearchConfig {
            backend: super::super::SearchBackend::Meilisearch,
            url: format!(
                "http://{}/",
                hung.local_addr().unwrap_or_else(|e| panic!("{e}"))
            ),
            api_key: Some(MeiliKey::new("sekrit-key").unwrap_or_else(|e| panic!("{e}"))),
            ..SearchConfig::default()
        };
        let index =
            std::sync::Arc::new(MeiliIndex::open(&config).unwrap_or_else(|e| panic!("{e}")));
        let setting_up = std::thread::spawn({
            let index = std::sync::Arc::clone(&index);
            move || index.ensure_ready()
        });
        while index.setting_up.try_lock().is_ok() {
            std::thread::yield_now();
        }
        let err = index
            .keyword(&viewer(), "anything", &Filters::default(), 10)
            .err()
            .unwrap_or_else(|| panic!("a search during the set-up succeeded"));
        assert_eq!(err.code(), Code::SearchBackendUnavailable);
        let message = crate::http_error::body(&err).error.message;
        assert!(message.contains("being set up"), "{message}");
        drop(hung);
        let set_up = setting_up
            .join()
            .unwrap_or_else(|_| panic!("set-up panicked"));
        assert!(set_up.is_err(), "no server answered");
        // Once set up, a search never waits for the lock, nor is refused
        // because another call holds it.
        index.ready.store(true, Ordering::Release);
        let _held = index.setting_up.lock();
        assert!(index.ready_to_search().is_ok());
    }

    /// Regression: the indexer calls the index from inside central's
    /// runtime (`Handle::block_on` on its own thread), and every call
    /// panicked with "Cannot start a runtime from within a runtime", so
    /// nothing was ever indexed. Calls from async code answer like any other.
    #[test]
    fn calls_from_inside_a_runtime_do_not_start_a_runtime() {
        let config = SearchConfig {
            backend: super::super::SearchBackend::Meilisearch,
            url: "http://127.0.0.1:9/".into(),
            ..SearchConfig::default()
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("{e}"));
        let err = rt.block_on(async {
            let index = MeiliIndex::open(&config).unwrap_or_else(|e| panic!("{e}"));
            let err = index
                .keyword(&viewer(), "anything", &Filters::default(), 10)
                .err();
            // Dropped inside the runtime too (the last `AppState` may be).
            drop(index);
            err
        });
        let err = err.unwrap_or_else(|| panic!("a search without a server succeeded"));
        assert_eq!(err.code(), Code::SearchBackendUnavailable);
    }
}
