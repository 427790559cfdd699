//! Forgetting a conversation: its runs, and those of the subagents under
//! it, leave the index (chunks and vectors), the blob store and the
//! registry, and tombstones keep their bytes from coming back. Then every
//! backup folder central backed up to is reached: the tombstones are
//! written there and its snapshots rewritten without the runs
//! (`backup::forget_in`); a folder that cannot be reached is named in the
//! answer and noted, and its next backup forgets them there.
//!
//! The order makes a stop at any point safe to resume: tombstones, the
//! audit entry and the end of their indexing jobs first (one transaction);
//! then the index; then the blobs; the registry rows last. Until then the
//! runs are still in the catalog, so `doctor` reports the forget as
//! unfinished and forgetting the conversation again ends it. Text is never
//! searchable without its registry row.
//!
//! The text is then in no file of the data folder: the index's segments
//! that held a deleted document are rewritten, the registry overwrites
//! what it deletes (`secure_delete`) and empties its WAL. A Meilisearch
//! server keeps its own files.

use std::path::Path;
use std::time::Duration;

use kith_proto::ForgetResponse;

use crate::backup::{forget_in, Reached};
use crate::error::Result;
use crate::registry::{line_hashes, Forgetter, RegistryFile};
use crate::state::AppState;

/// How long a forget waits for a backup writing to a folder before it
/// leaves the tombstones for that backup to apply.
const BACKUP_WAIT: Duration = Duration::from_secs(10);

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
    let backups_not_cleared = forget_in_backups(state, &run_ids);
    Ok(ForgetResponse {
        conversation: set.conversation.to_string(),
        n_conversations: set.n_conversations() as u64,
        n_runs: run_ids.len() as u64,
        backups_not_cleared,
    })
}

/// Forgets the runs in every backup folder central noted (and the one
/// configured): each it could not clear, named with why.
fn forget_in_backups(state: &AppState, run_ids: &[String]) -> Vec<String> {
    let registry = state.registry();
    let mut dests: Vec<String> = match registry.backups() {
        Ok(rows) => rows.into_iter().map(|r| r.dest).collect(),
        Err(e) => return vec![format!("the registry's list of backup folders: {e}")],
    };
    if let Some(backup) = &state.config().backup {
        dests.push(crate::backup::dest_name(&backup.dest));
    }
    dests.sort();
    dests.dedup();
    if dests.is_empty() {
        return Vec::new();
    }
    let live = state.config().data_dir.join("registry.sqlite");
    let records =
        match RegistryFile::open_live(&live).and_then(|r| r.tombstone_records(Some(run_ids))) {
            Ok(r) => r,
            Err(e) => return vec![format!("the tombstones to take to the backups: {e}")],
        };
    let mut not_cleared = Vec::new();
    for dest in dests {
        let now = kith_shared::timestamp::now();
        match forget_in(Path::new(&dest), &records, BACKUP_WAIT) {
            Ok(Reached::Cleared(applied)) => {
                if let Err(e) = registry.backup_reached(&dest) {
                    tracing::warn!(error = %e, dest, "cannot note the backup folder reached");
                }
                tracing::info!(
                    dest,
                    n_snapshots = applied.n_snapshots,
                    n_blobs = applied.n_objects,
                    "forgotten in the backup folder"
                );
            }
            Ok(Reached::Busy) => {
                tracing::info!(
                    dest,
                    "a backup is writing to the folder; it forgets the runs there when done"
                );
                not_cleared.push(format!(
                    "{dest}: a backup was writing there; its tombstones are there, and that \
                     backup forgets the conversation there when done"
                ));
            }
            Err(e) => {
                let why = format!("a forget could not reach it: {e}");
                if let Err(e) = registry.backup_failed(&dest, &why, &now) {
                    tracing::warn!(error = %e, dest, "cannot note the backup folder");
                }
                tracing::warn!(
                    error = %e,
                    dest,
                    "a backup folder was not reached: it may still hold the forgotten conversation until its next backup"
                );
                not_cleared.push(format!(
                    "{dest}: not reached ({e}); it may hold the conversation until its next backup"
                ));
            }
        }
    }
    not_cleared
}
