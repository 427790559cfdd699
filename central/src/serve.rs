//! Running the service: open the data directory, start the indexer, the
//! `last_seen_at` flusher and the scheduled backups, and serve HTTP or HTTPS until `shutdown` resolves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use crate::config::SearchBackend;
use crate::config::{Config, PlainHttp, TlsConfig};
use crate::embed::{EmbedError, EmbedQueue};
use crate::error::{Code, Error, Result};
use crate::privacy::Operator;
use crate::state::AppState;

/// Failpoint: when set, `serve` does not start the indexer, so accepted runs
/// stay queued (what a crash right after the 202 looks like).
pub(crate) const FAILPOINT_INDEXER_PAUSED: &str = "KITH_FAILPOINT_INDEXER_PAUSED";

/// What `main` and the tests both call.
pub async fn serve(
    config: Config,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let addr = listener.local_addr()?;
    match config.check_plain_http(addr) {
        Ok(PlainHttp::Safe) => {}
        Ok(PlainHttp::Exposed) => tracing::warn!(
            "INSECURE: serving plain HTTP on {addr} (--insecure-http): machine tokens and transcripts cross the network unencrypted; configure [tls] or listen on 127.0.0.1 behind a TLS proxy"
        ),
        Err(why) => return Err(Error::Internal(why)),
    }
    let tls = config.tls.clone();
    let (state, ask_again) = {
        let config = config.clone();
        tokio::task::spawn_blocking(move || {
            refuse_a_lost_index(&config)?;
            let embedder = start_embedder(&config);
            let ask_again = matches!(&embedder, Err(e) if e.ask_again);
            let state = AppState::open_with(config.clone(), embedder.map_err(|e| e.why))?;
            if let Some(backup) = &config.backup {
                crate::backup::refuse_inside(&backup.dest, &config.data_dir)?;
            }
            // Mending after a crash reads every member's runs.
            let operator = Operator::for_operator_commands();
            let recovered = crate::maintenance::recover(&state, &operator)?;
            if recovered.temps_removed > 0 || !recovered.adopted.is_empty() {
                tracing::warn!(
                    temps_removed = recovered.temps_removed,
                    adopted = ?recovered.adopted,
                    "mended what a crash mid-ingest left: temp files removed, blobs without a registry row adopted"
                );
            }
            match crate::maintenance::older_chunking(&state) {
                Ok(Some(older)) => tracing::info!(
                    "runs indexed by an older kith-central keep their chunks (chunking {older}, this one {}); `kith-central reindex` chunks them again",
                    kith_shared::chunk::CHUNKING_VERSION
                ),
                Ok(None) => {}
                // A search server that is down is not a reason to stop
                // taking runs: they wait in the durable jobs, and the
                // indexer catches up once the server answers.
                Err(e @ Error::Unavailable { .. }) => tracing::warn!(
                    error = %e,
                    "search backend unavailable at start; runs are accepted and indexed once it answers"
                ),
                Err(e) => return Err(e),
            }
            Ok::<_, crate::error::Error>((state, ask_again))
        })
        .await??
    };
    if let Some(queue) = state.embed() {
        tokio::spawn(crate::vectorizer::run(state.clone(), queue.clone()));
    } else if ask_again {
        tokio::spawn(connect_embedder_later(state.clone()));
    }
    let worker = if std::env::var_os(FAILPOINT_INDEXER_PAUSED).is_some() {
        // Crash tests use this to hold work in the durable queue.
        tracing::warn!("{FAILPOINT_INDEXER_PAUSED} is set: the indexer does not run");
        None
    } else {
        Some(crate::indexer::worker::spawn(state.clone())?)
    };
    tokio::spawn(flush_seen_forever(state.clone()));
    if let Some(backup) = config.backup.clone() {
        tracing::info!(
            dest = %backup.dest.display(),
            every_secs = backup.every.0.as_secs(),
            keep = backup.keep,
            "backups scheduled"
        );
        // Backups copy every member's runs.
        let operator = Operator::for_operator_commands();
        tokio::spawn(crate::backup::run_scheduled(
            state.clone(),
            backup,
            operator,
        ));
    }
    let app = crate::routes::app(state.clone());
    let (scheme, tls) = match tls {
        None => ("http", None),
        Some(tls) => ("https", Some(tls_acceptor(&tls)?)),
    };
    tracing::info!(%addr, data_dir = %config.data_dir.display(), "kith-central listening on {scheme}://{addr}");
    crate::accept::serve(listener, tls, app, shutdown).await;
    state.flush_seen()?;
    // The worker ends its batch while the runtime it waits on still runs.
    state.indexer().stop();
    if let Some(worker) = worker {
        let ended = tokio::task::spawn_blocking(move || worker.join());
        if tokio::time::timeout(WORKER_GRACE, ended).await.is_err() {
            tracing::warn!("the indexer did not end its batch in time; its jobs stay queued");
        }
    }
    Ok(())
}

/// How long shutting down waits for the indexer's batch.
const WORKER_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// An embedded index that is gone while the registry records indexed runs
/// would be created again empty, and every search would answer nothing
/// without saying why: refuse to start and name the repair instead.
fn refuse_a_lost_index(config: &Config) -> Result<()> {
    let dir = config.index_dir();
    if config.search.backend != SearchBackend::Embedded
        || dir.join("meta.json").exists()
        || !config.data_dir.join("registry.sqlite").exists()
    {
        return Ok(());
    }
    if crate::state::open_registry(&config.data_dir)?
        .last_indexed_at()?
        .is_none()
    {
        return Ok(());
    }
    Err(Error::unavailable(
        Code::IndexUnavailable,
        format!(
            "the search index in {} is missing, though runs were indexed; run `kith-central reindex` to rebuild it",
            dir.display()
        ),
    ))
}

/// Why central has no embedder (it then serves keyword search only).
struct NoEmbedder {
    why: String,
    /// An embedding server that did not answer, or not yet usefully (still
    /// loading its model), may later; a configuration that cannot work
    /// (no embedder, a missing key file or model) will not.
    ask_again: bool,
}

/// Loads the configured embedder and starts its queue.
fn start_embedder(config: &Config) -> std::result::Result<EmbedQueue, NoEmbedder> {
    let no = |e: EmbedError| NoEmbedder {
        ask_again: matches!(
            e,
            EmbedError::Unavailable { .. }
                | EmbedError::BadResponse { .. }
                | EmbedError::Refused { .. }
        ),
        why: e.to_string(),
    };
    let embedder = match crate::embed::build(&config.embed) {
        Ok(Some(e)) => e,
        Ok(None) => {
            return Err(NoEmbedder {
                why: "no embedder is configured (provider = none)".into(),
                ask_again: false,
            })
        }
        Err(e) => {
            tracing::warn!(error = %e, "no semantic search: the embedder did not load");
            return Err(no(e));
        }
    };
    let queue = EmbedQueue::start(embedder).map_err(no)?;
    tracing::info!(
        model = queue.model_id(),
        dim = queue.dim(),
        "embedder ready"
    );
    Ok(queue)
}

/// An embedding server that was down at start is asked again, every 2 s
/// doubling to every minute, until it answers (or says what will never
/// work); searches are keyword-only (and say why) until then, and the runs
/// indexed meanwhile are embedded after.
async fn connect_embedder_later(state: AppState) {
    let mut wait = Duration::from_secs(2);
    loop {
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_secs(60));
        let s = state.clone();
        let connected = tokio::task::spawn_blocking(move || {
            let queue = start_embedder(s.config())?;
            // Vectors the index cannot keep (a disk error): try again later.
            s.set_embedder(queue.clone()).map_err(|e| NoEmbedder {
                why: e.to_string(),
                ask_again: true,
            })?;
            Ok::<_, NoEmbedder>(queue)
        })
        .await;
        match connected {
            Ok(Ok(queue)) => {
                tokio::spawn(crate::vectorizer::run(state, queue));
                return;
            }
            Ok(Err(no)) => {
                state.set_embed_missing(no.why);
                if !no.ask_again {
                    return;
                }
            }
            Err(e) => tracing::warn!(error = %e, "connecting the embedder panicked"),
        }
    }
}

async fn flush_seen_forever(state: AppState) {
    let mut tick = tokio::time::interval(Duration::from_secs(30));
    loop {
        tick.tick().await;
        let s = state.clone();
        if let Ok(Err(e)) = tokio::task::spawn_blocking(move || s.flush_seen()).await {
            tracing::warn!(error = %e, "could not record last_seen_at");
        }
    }
}

fn tls_acceptor(tls: &TlsConfig) -> Result<tokio_rustls::TlsAcceptor> {
    let read = |path: &std::path::Path| {
        std::fs::read(path)
            .map_err(|e| Error::Internal(format!("cannot read {}: {e}", path.display())))
    };
    let certs = rustls_pemfile::certs(&mut read(&tls.cert)?.as_slice())
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| {
            Error::Internal(format!("bad certificate file {}: {e}", tls.cert.display()))
        })?;
    let key = rustls_pemfile::private_key(&mut read(&tls.key)?.as_slice())
        .map_err(|e| Error::Internal(format!("bad key file {}: {e}", tls.key.display())))?
        .ok_or_else(|| Error::Internal(format!("no private key in {}", tls.key.display())))?;
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| Error::Internal(format!("tls: {e}")))?
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .map_err(|e| Error::Internal(format!("tls: {e}")))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}
