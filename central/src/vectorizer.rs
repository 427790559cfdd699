//! Embedding indexed runs: after a run's text is searchable, its chunks go
//! through the embed queue (runs captured in the last minutes on the realtime
//! lane; older runs and re-embeds after a model change on the bulk lane) and their vectors into the index. Which runs still need it is
//! durable state in the registry (`embedded_model` differs from the current
//! model), so a crash or a model change simply means more work here.

use std::time::Duration;

use kith_proto::RunMeta;
use kith_shared::chunk::{chunk_turns, ChunkConfig};
use kith_shared::transcript;

use crate::embed::{EmbedQueue, Lane, MAX_BATCH};
use crate::error::{Error, Result};
use crate::index::chunk_id;
use crate::ingest::format_of;
use crate::registry::ToEmbed;
use crate::state::AppState;

/// Runs fetched per registry query.
const RUNS_PER_ROUND: u32 = 16;
/// Runs captured this recently ride the realtime lane.
const REALTIME_WINDOW_MINUTES: i64 = 10;

/// Runs until the process ends.
pub async fn run(state: AppState, queue: EmbedQueue) {
    let mut backoff = Duration::from_secs(1);
    loop {
        match round(&state, &queue).await {
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
async fn round(state: &AppState, queue: &EmbedQueue) -> Result<usize> {
    let model = queue.model_id().to_owned();
    let s = state.clone();
    let m = model.clone();
    let runs = tokio::task::spawn_blocking(move || s.registry().runs_to_embed(&m, RUNS_PER_ROUND))
        .await??;
    let recent = kith_shared::timestamp::render(
        time::OffsetDateTime::now_utc() - time::Duration::minutes(REALTIME_WINDOW_MINUTES),
    );
    let n = runs.len();
    for run in runs {
        let lane = if run.captured_at >= recent && !run.reembed {
            Lane::IngestRealtime
        } else {
            Lane::IngestBulk
        };
        let s = state.clone();
        let r = run.clone();
        let chunks = tokio::task::spawn_blocking(move || pending_chunks(&s, &r)).await??;
        for batch in chunks.chunks(MAX_BATCH) {
            let texts: Vec<String> = batch.iter().map(|(_, t)| t.clone()).collect();
            let vectors = queue
                .embed(lane, texts)
                .await
                .map_err(|e| Error::Unavailable {
                    code: "embedder_unavailable",
                    message: e.to_string(),
                })?;
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

/// The run's chunks that have no vector yet, as (chunk id, text).
fn pending_chunks(state: &AppState, run: &ToEmbed) -> Result<Vec<(String, String)>> {
    let meta_path = state
        .store()
        .absolute(&run.blob_path)
        .with_extension("metadata.json");
    let meta: RunMeta = serde_json::from_slice(&std::fs::read(meta_path)?)?;
    let bytes = state.store().read_jsonl(&run.blob_path)?;
    let parsed = transcript::parse(format_of(meta.agent_runtime), &bytes);
    Ok(chunk_turns(&parsed.turns, &ChunkConfig::default())
        .into_iter()
        .map(|c| (chunk_id(&meta.id, c.chunk_idx), c.text))
        .filter(|(id, _)| !state.index().has_vector(id))
        .collect())
}
