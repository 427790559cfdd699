//! Central's shared state: a cheap-to-clone handle over `Arc<Shared>`. Each
//! subsystem (registry, blob store, index, indexer, metrics) owns its own
//! short, private locks; nothing here is locked as a whole.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use kith_shared::ids::{MachineId, RunId};

use crate::config::Config;
use crate::embed::EmbedQueue;
use crate::error::{Error, Result};
use crate::index::SearchIndex;
use crate::indexer::Indexer;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::store::BlobStore;
use crate::sync::lock;
use crate::usage_turns::UsageTurns;
use crate::web::limits::SignInLimits;

#[derive(Clone)]
pub struct AppState {
    shared: Arc<Shared>,
}

struct Shared {
    config: Config,
    /// The built-in price table with the config's prices in its place.
    prices: kith_shared::usage::PriceTable,
    registry: Registry,
    store: BlobStore,
    index: Box<dyn SearchIndex>,
    indexer: Indexer,
    metrics: Metrics,
    /// The embed queue, once an embedder loaded (an embedding server that
    /// was down at start is connected later: `serve`).
    embed: OnceLock<EmbedQueue>,
    /// Why there is no embedder yet (shown in degraded searches).
    embed_missing: Mutex<Option<String>>,
    /// Serialises ingest decisions and forgets (see `ingest`).
    ingest_gate: Arc<tokio::sync::Mutex<()>>,
    /// Machines seen since the last flush, with when; written to the registry
    /// in batches so a request never pays for a write.
    seen: Mutex<HashMap<MachineId, String>>,
    /// Failed web sign-ins, by handle and by address.
    sign_in_limits: SignInLimits,
    /// The turns of the conversations read last.
    turns: crate::turns_cache::TurnsCache,
    /// Who counts the stored deltas' usage, and when.
    usage_turns: Arc<UsageTurns>,
}

impl AppState {
    /// Opens (creating if needed) the data directory's registry, store and
    /// index, without an embedder (admin commands).
    pub fn open(config: Config) -> Result<Self> {
        Self::open_with(config, Err("no embedder in this command".into()))
    }

    /// Opens the data directory with the embed queue (or why there is none).
    pub fn open_with(
        config: Config,
        embed: std::result::Result<EmbedQueue, String>,
    ) -> Result<Self> {
        let data = config.data_dir.clone();
        crate::private::create_dir_all(&data)?;
        let registry = open_registry(&data)?;
        let index = crate::index::open(&config.search, &config.index_dir())?;
        let prices = config
            .price_table()
            .map_err(|e| crate::error::Error::Internal(format!("[prices]: {e}")))?;
        registry.keep_priced(&prices)?;
        let state = Self {
            shared: Arc::new(Shared {
                store: BlobStore::new(&data),
                registry,
                index,
                indexer: Indexer::default(),
                embed: OnceLock::new(),
                embed_missing: Mutex::new(None),
                metrics: Metrics::default(),
                ingest_gate: Arc::default(),
                seen: Mutex::new(HashMap::new()),
                sign_in_limits: SignInLimits::default(),
                turns: crate::turns_cache::TurnsCache::default(),
                usage_turns: Arc::default(),
                prices,
                config,
            }),
        };
        match embed {
            Ok(queue) => state.set_embedder(queue)?,
            Err(why) => state.set_embed_missing(why),
        }
        Ok(state)
    }

    /// Takes the embedder (once): the index keeps vectors of its model.
    pub fn set_embedder(&self, queue: EmbedQueue) -> Result<()> {
        self.index().attach_vectors(queue.model_id(), queue.dim())?;
        let _ = self.shared.embed.set(queue);
        *lock(&self.shared.embed_missing) = None;
        Ok(())
    }

    pub fn set_embed_missing(&self, why: String) {
        *lock(&self.shared.embed_missing) = Some(why);
    }

    pub fn config(&self) -> &Config {
        &self.shared.config
    }

    /// What usage reports price tokens with.
    pub fn prices(&self) -> &kith_shared::usage::PriceTable {
        &self.shared.prices
    }

    pub fn registry(&self) -> &Registry {
        &self.shared.registry
    }

    pub fn store(&self) -> &BlobStore {
        &self.shared.store
    }

    pub fn index(&self) -> &dyn SearchIndex {
        self.shared.index.as_ref()
    }

    pub fn indexer(&self) -> &Indexer {
        &self.shared.indexer
    }

    pub fn embed(&self) -> Option<&EmbedQueue> {
        self.shared.embed.get()
    }

    /// Why semantic search is unavailable, if it is.
    pub fn embed_missing(&self) -> Option<String> {
        lock(&self.shared.embed_missing).clone()
    }

    /// The embedder's model id, or `none`.
    pub fn embedder_name(&self) -> String {
        self.embed()
            .map_or_else(|| "none".to_owned(), |q| q.model_id().to_owned())
    }

    pub fn metrics(&self) -> &Metrics {
        &self.shared.metrics
    }

    pub fn sign_in_limits(&self) -> &SignInLimits {
        &self.shared.sign_in_limits
    }

    /// Who counts the stored deltas' usage, and when (`usage::settle`,
    /// `ingest`).
    pub(crate) fn usage_turns(&self) -> &Arc<UsageTurns> {
        &self.shared.usage_turns
    }

    pub fn turns_cache(&self) -> &crate::turns_cache::TurnsCache {
        &self.shared.turns
    }

    /// The gate, held until the returned guard drops: move it into the
    /// blocking work it guards, which goes on when the request's future is
    /// dropped (its client gone).
    pub async fn ingest_gate(&self) -> tokio::sync::OwnedMutexGuard<()> {
        self.shared.ingest_gate.clone().lock_owned().await
    }

    pub fn new_run_id(&self) -> Result<RunId> {
        Ok(RunId::from_uuid_bytes(uuid::Uuid::now_v7().into_bytes()))
    }

    pub fn note_seen(&self, machine: &MachineId) {
        let mut seen = lock(&self.shared.seen);
        seen.insert(machine.clone(), kith_shared::timestamp::now());
    }

    /// Writes the batched `last_seen_at` values.
    pub fn flush_seen(&self) -> Result<()> {
        let batch = std::mem::take(&mut *lock(&self.shared.seen));
        self.registry().touch_machines(&batch)
    }
}

/// The registry file of a data directory, 0600 (SQLite gives its `-wal`
/// and `-shm` files the database file's mode).
pub fn open_registry(data: &Path) -> Result<Registry> {
    let path = data.join("registry.sqlite");
    match crate::private::create_new(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => return Err(e.into()),
        _ => {}
    }
    let registry = Registry::open(&path).map_err(|e| match e {
        Error::Registry(e) => Error::Internal(format!(
            "cannot open {}/registry.sqlite: {e}",
            data.display()
        )),
        other => other,
    })?;
    for suffix in ["", "-wal", "-shm"] {
        let file = data.join(format!("registry.sqlite{suffix}"));
        crate::private::restrict(&file, crate::private::FILE_MODE)?;
    }
    Ok(registry)
}
