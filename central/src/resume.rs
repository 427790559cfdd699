//! Continuing a conversation on another machine (`kith resume`): the
//! machine writes the conversation into its agent's store with the working
//! folder rewritten, and records here where that copy ends in the file
//! (`registry::Resume`). What the agent adds after the copy is captured as
//! the next deltas of the same conversation (`ingest`), so the conversation
//! reads as one across machines and the copy is never stored again.
//!
//! The copy's rows stay when the conversation is forgotten (they name no
//! text): a delta after the copy then starts a conversation of its own, so
//! the copy is never sent under another name. `reindex` rebuilds a
//! continued conversation from its runs' records, which carry their
//! conversation and parent; a delta sent after a reindex still finds its
//! resume.
//!
//! Only the owner resumes: a conversation shared with someone is theirs to
//! read, not to continue. They fork it (`fork`): the machine writes what
//! they may read of it under a new session id and sends it whole, as their
//! own conversation, which names the one it came from. Nothing the owner
//! adds later reaches it.

use kith_proto::{ForkOrigin, ForkRequest, ResumeRequest, ResumeResponse};
use kith_shared::hash::chain_next;

use crate::conversation;
use crate::error::{Code, Error, Result};
use crate::registry::{NewResume, Registry, Resume, Viewer};

const MAX_SOURCE_IDENTITY: usize = 1024;

/// Records that the viewer's machine wrote the file `req.source_identity`
/// as a fork of conversation `name`, which the viewer may read.
pub(crate) fn fork(
    registry: &Registry,
    viewer: &Viewer,
    name: &str,
    req: &ForkRequest,
) -> Result<ForkOrigin> {
    if viewer.machine_id().is_none() {
        return Err(Error::Unauthenticated);
    }
    check_source(&req.source_identity)?;
    let id = registry.resolve_conversation(viewer, name)?;
    let runs = registry.conversation_runs(viewer, &id)?;
    let first = runs.first().ok_or_else(Error::conversation_not_found)?;
    let owner = registry
        .handles()?
        .remove(&first.run.user_id)
        .unwrap_or_default();
    registry.record_fork(
        viewer,
        &req.source_identity,
        &ForkOrigin {
            conversation_id: id.to_string(),
            owner,
        },
    )
}

fn check_source(source: &str) -> Result<()> {
    if source.is_empty() || source.len() > MAX_SOURCE_IDENTITY {
        return Err(Error::invalid(
            Code::InvalidSourceIdentity,
            format!("source_identity must be 1-{MAX_SOURCE_IDENTITY} bytes"),
        ));
    }
    Ok(())
}

/// Records that the viewer's machine holds a copy of conversation `name`
/// ending at `req.at_offset` of the file `req.source_identity`.
pub(crate) fn record(
    registry: &Registry,
    viewer: &Viewer,
    name: &str,
    req: &ResumeRequest,
) -> Result<ResumeResponse> {
    if viewer.machine_id().is_none() {
        return Err(Error::Unauthenticated);
    }
    check_source(&req.source_identity)?;
    if req.at_offset == 0 {
        return Err(Error::invalid(
            Code::InvalidOffset,
            "at_offset is the copy's length: more than 0",
        ));
    }
    let is_sha256 = req.prefix_sha256.len() == 64
        && req
            .prefix_sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    if !is_sha256 {
        return Err(Error::invalid(
            Code::InvalidJson,
            "prefix_sha256 must be 64 lowercase hex digits",
        ));
    }
    let id = registry.resolve_conversation(viewer, name)?;
    let mut runs = registry.conversation_runs(viewer, &id)?;
    if runs
        .iter()
        .any(|r| r.run.user_id != viewer.user_id().as_str())
    {
        return Err(Error::invalid(
            Code::NotOwner,
            "this conversation was shared with you: only its owner continues it (fork it)",
        ));
    }
    conversation::in_order(&mut runs, |r| &r.run);
    let last = runs.last().ok_or_else(Error::conversation_not_found)?;
    let resume = Resume {
        conversation: id.to_string(),
        parent_run_id: last.run.id.clone(),
        chain_sha256: chain_next(None, &req.prefix_sha256),
    };
    let recorded = registry.record_resume(
        viewer,
        &NewResume {
            source_identity: &req.source_identity,
            at_offset: req.at_offset,
            resume: &resume,
        },
    )?;
    Ok(ResumeResponse {
        conversation_id: recorded.conversation,
        parent_run_id: recorded.parent_run_id,
        chain_sha256: recorded.chain_sha256,
    })
}
