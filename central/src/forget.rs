//! Forgetting a conversation: its runs, and those of the subagents under
//! it, leave the index (chunks and vectors), the blob store and the
//! registry, and tombstones keep their bytes from coming back.
//!
//! The order makes a stop at any point safe to resume: tombstones, the
//! audit entry and the end of their indexing jobs first (one transaction);
//! then the index; then the blobs; the registry rows last. Until then the
//! runs are still in the catalog, so `doctor` reports the forget as
//! unfinished and forgetting the conversation again ends it. Text is never
//! searchable without its registry row.

use kith_proto::ForgetResponse;

use crate::error::Result;
use crate::registry::{line_hashes, Forgetter};
use crate::state::AppState;

/// Forgets the conversation `name` names for `who`. Blocking: call from a
/// blocking thread, holding the ingest gate (a delta continuing the chain
/// meanwhile would hang under a run that is going).
pub(crate) fn forget(state: &AppState, who: Forgetter<'_>, name: &str) -> Result<ForgetResponse> {
    let registry = state.registry();
    let set = registry.forget_set(who, name)?;
    let run_ids = set.run_ids();
    // A blob gone already was hashed by the forget that deleted it.
    let lines: Vec<Vec<String>> = set
        .runs
        .iter()
        .map(|r| {
            state
                .store()
                .read_jsonl(&r.blob_path)
                .map(|b| line_hashes(&b))
                .unwrap_or_default()
        })
        .collect();
    registry.begin_forget(&set, &lines, &who.audit_name())?;
    {
        let _forgetting = state.indexer().forgetting();
        state.index().delete_runs(&run_ids)?;
    }
    for id in &run_ids {
        state.indexer().take_chunks(id);
    }
    for run in &set.runs {
        state.store().remove_run(&run.blob_path)?;
    }
    registry.finish_forget(&run_ids)?;
    // Nothing of them stays in memory: chunks waiting for the indexer (above)
    // and the turns of the conversation read last, dropped once the runs
    // can no longer be read (a read meanwhile could have kept them again).
    state.turns_cache().forget(&run_ids);
    tracing::info!(
        conversation = %set.conversation,
        n_runs = run_ids.len(),
        by = %who.audit_name(),
        "conversation forgotten"
    );
    Ok(ForgetResponse {
        conversation: set.conversation.to_string(),
        n_conversations: set.n_conversations() as u64,
        n_runs: run_ids.len() as u64,
    })
}
