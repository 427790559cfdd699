//! Embedding indexed runs: after a run's text is searchable, its chunks (as
//! the index holds them) go through the embed queue (runs captured in the
//! last minutes on the realtime lane; older runs and re-embeds after a model
//! change on the bulk lane) and their vectors into the index. Which runs
//! still need it is durable state in the registry (`embedded_model` differs
//! from the current model), so a crash or a model change simply means more
//! work here.

use std::time::Duration;

use crate::embed::{EmbedQueue, Lane, MAX_BATCH};
use crate::error::{Error, Result};
use crate::state::AppState;

/// Runs fetched per registry query.
const RUNS_PER_ROUND: u32 = 16;
/// Runs captured this recently ride the realtime lane.
const REALTIME_WINDOW_MINUTES: i64 = 10;

/// Benchmarks only: when set, document chunks get hashed stand-in vectors
/// (see `standin_vector`) instead of the model's, so a million-chunk corpus
/// builds in minutes; queries still go through the real model and the real
/// vector search. Search quality means nothing then; central says so.
pub const BENCH_STANDIN_VECTORS: &str = "KITH_BENCH_STANDIN_VECTORS";

/// Runs captured at or after this instant and never embedded ride the
/// realtime lane; the rest (re-embeds, a backlog) the bulk lane.
pub fn realtime_since() -> String {
    kith_shared::timestamp::render(
        time::OffsetDateTime::now_utc() - time::Duration::minutes(REALTIME_WINDOW_MINUTES),
    )
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
    let mut backoff = Duration::from_secs(1);
    loop {
        match round(&state, &queue, standin).await {
            Ok(0) => {
                let _ =
                    tokio::time::timeout(Duration::from_secs(5), state.indexer().newly_indexed())
                        .await;
                backoff = Duration::from_secs(1);
            }
            Ok(_) => backoff = Duration::from_secs(1),
            Err(e) => {
                tracing::warn!(error = %e, retry_in_s = backoff.as_secs(), "embedding paused");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(60));
            }
        }
    }
}

/// Embeds up to one round of runs; returns how many were finished.
async fn round(state: &AppState, queue: &EmbedQueue, standin: bool) -> Result<usize> {
    let model = queue.model_id().to_owned();
    let s = state.clone();
    let m = model.clone();
    let runs = tokio::task::spawn_blocking(move || s.registry().runs_to_embed(&m, RUNS_PER_ROUND))
        .await??;
    let recent = realtime_since();
    let n = runs.len();
    for run in runs {
        let lane = if run.captured_at >= recent && !run.reembed {
            Lane::IngestRealtime
        } else {
            Lane::IngestBulk
        };
        let s = state.clone();
        let id = run.run_id.clone();
        let chunks =
            tokio::task::spawn_blocking(move || s.index().chunks_to_embed(id.as_str())).await??;
        for batch in chunks.chunks(MAX_BATCH) {
            let texts: Vec<String> = batch.iter().map(|(_, t)| t.clone()).collect();
            let vectors = if standin {
                texts
                    .iter()
                    .map(|t| standin_vector(t, queue.dim()))
                    .collect()
            } else {
                queue
                    .embed(lane, texts)
                    .await
                    .map_err(|e| Error::Unavailable {
                        code: "embedder_unavailable",
                        message: e.to_string(),
                    })?
            };
            let items: Vec<(String, Vec<f32>)> = batch
                .iter()
                .map(|(id, _)| id.clone())
                .zip(vectors)
                .collect();
            let s = state.clone();
            tokio::task::spawn_blocking(move || s.index().put_vectors(&items)).await??;
        }
        let s = state.clone();
        let m = model.clone();
        tokio::task::spawn_blocking(move || {
            s.registry()
                .set_embedded(&run.run_id, &m, &kith_shared::timestamp::now())
        })
        .await??;
    }
    Ok(n)
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
