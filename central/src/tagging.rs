//! Tagging a conversation: only its owner may (another's conversation is
//! not found, as for sharing), and every run of it changes in the three
//! places a tag is read: the blob's metadata (what `reindex` rebuilds
//! from), the registry (what a `tag:` grant covers) and the index (the runs
//! are queued for indexing again). A tag on a later delta comes from the
//! agent's tag rules, not from this edit.

use std::collections::BTreeSet;

use kith_proto::{TagsRequest, TagsResponse};

use crate::run::Run;

use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::state::AppState;

fn rule() -> Error {
    Error::invalid(Code::InvalidTags, kith_shared::tags::rule())
}

/// What needs no stored state: some tag named, each a valid one.
pub(crate) fn check(req: &TagsRequest) -> Result<()> {
    if req.add.is_empty() && req.remove.is_empty() {
        return Err(Error::invalid(
            Code::InvalidTags,
            "name a tag to add or remove",
        ));
    }
    if !kith_shared::tags::valid(&req.add) || !kith_shared::tags::valid(&req.remove) {
        return Err(rule());
    }
    Ok(())
}

/// Applies `req` (which passed `check`) to the conversation `name`.
pub(crate) fn edit(
    state: &AppState,
    viewer: &Viewer,
    name: &str,
    req: &TagsRequest,
) -> Result<TagsResponse> {
    let registry = state.registry();
    let id = registry.resolve_conversation(viewer, name)?;
    let runs: Vec<_> = registry
        .conversation_runs(viewer, &id)?
        .into_iter()
        .filter(|r| r.run.user_id == viewer.user_id().as_str())
        .collect();
    if runs.is_empty() {
        return Err(Error::conversation_not_found());
    }
    let mut metas = Vec::with_capacity(runs.len());
    for run in &runs {
        let mut blob = state.store().run_metadata(&run.blob_path)?;
        let mut tags: BTreeSet<String> = std::mem::take(&mut blob.run.tags).into_iter().collect();
        tags.extend(req.add.iter().cloned());
        tags.retain(|t| !req.remove.contains(t));
        blob.run.tags = tags.into_iter().collect();
        if !kith_shared::tags::valid(&blob.run.tags) {
            return Err(rule());
        }
        metas.push((run.blob_path.as_str(), blob));
    }
    // The blobs first: they are the record, and a crash before the registry
    // commit leaves them for `reindex` to carry over.
    for (blob_path, blob) in &metas {
        state.store().rewrite_metadata(blob_path, blob)?;
    }
    let metas: Vec<Run> = metas.into_iter().map(|(_, b)| b.run).collect();
    registry.retag(viewer, &metas)?;
    state.indexer().wake();
    let tags: BTreeSet<&String> = metas.iter().flat_map(|m| &m.tags).collect();
    Ok(TagsResponse {
        conversation_id: id.as_str().to_owned(),
        tags: tags.into_iter().cloned().collect(),
        n_runs: metas.len() as u64,
    })
}
