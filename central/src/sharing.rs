//! Granting another family member read access: validate the scope (a
//! conversation or run must be the grantor's own; a tag must be on one of
//! their runs), resolve the grantee, record the grant with its cut-off (a
//! snapshot unless it follows). Reads pick it up at once through `readable`.

use kith_proto::{AuditEntry, AuditResponse, Share, ShareRequest, SharesResponse};
use kith_shared::ids::RunId;

use crate::error::{Code, Error, Result};
use crate::privacy::GrantScope;
use crate::registry::Viewer;
use crate::registry::{Registry, ShareRow};

pub(crate) fn grant(registry: &Registry, viewer: &Viewer, req: &ShareRequest) -> Result<ShareRow> {
    let scope = match req.scope.split_once(':') {
        Some(("conversation", name)) => GrantScope::Run(conversation_head(registry, viewer, name)?),
        _ => GrantScope::parse(&req.scope).ok_or_else(|| {
            Error::invalid(
                Code::InvalidScope,
                "scope must be conversation:<id>, run:<run id> or tag:<tag>",
            )
        })?,
    };
    match &scope {
        GrantScope::Run(id) => {
            let id =
                RunId::parse(id).map_err(|e| Error::invalid(Code::InvalidId, e.to_string()))?;
            registry
                .run(viewer, &id)?
                .filter(|r| r.run.user_id == viewer.user_id().as_str())
                .ok_or_else(Error::run_not_found)?;
        }
        GrantScope::Tag(tag) => {
            if !registry.has_tag(viewer, tag)? {
                return Err(Error::invalid(
                    Code::UnknownTag,
                    format!("none of your runs has the tag {tag:?}: nothing would be shared"),
                ));
            }
        }
    }
    let grantee = registry
        .user_id_by_handle(&req.with)?
        .ok_or(Error::not_found("user"))?;
    if &grantee == viewer.user_id() {
        return Err(Error::invalid(
            Code::InvalidGrantee,
            "you can already read your own runs",
        ));
    }
    let expires_at = match &req.expires_at {
        Some(t) => {
            let at = kith_shared::timestamp::normalize(t).ok_or_else(|| {
                Error::invalid(Code::InvalidTimestamp, "expires_at must be RFC 3339")
            })?;
            if at <= kith_shared::timestamp::now() {
                return Err(Error::invalid(
                    Code::InvalidExpiry,
                    format!("expires_at {at} is not in the future"),
                ));
            }
            Some(at)
        }
        None => None,
    };
    let id = format!("s{}", hex::encode(uuid::Uuid::now_v7().into_bytes()));
    registry.add_share(
        &id,
        viewer.user_id(),
        &grantee,
        &scope,
        expires_at.as_deref(),
        req.follow,
    )?;
    registry
        .list_shares(viewer, true)?
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| Error::Internal("a share vanished after insert".into()))
}

/// The first run of one of the viewer's own conversations: a grant on it
/// covers the conversation's later deltas and its subagents (they descend
/// from it).
fn conversation_head(registry: &Registry, viewer: &Viewer, name: &str) -> Result<String> {
    let id = registry.resolve_conversation(viewer, name)?;
    registry
        .conversation_runs(viewer, &id)?
        .into_iter()
        .filter(|r| r.run.user_id == viewer.user_id().as_str())
        .min_by_key(|r| r.run.from_offset)
        .map(|r| r.run.id)
        .ok_or_else(Error::conversation_not_found)
}

/// The grants the viewer gave and those it received, newest first.
pub(crate) fn list(registry: &Registry, viewer: &Viewer) -> Result<SharesResponse> {
    Ok(SharesResponse {
        given: registry
            .list_shares(viewer, true)?
            .into_iter()
            .map(to_wire)
            .collect(),
        received: registry
            .list_shares(viewer, false)?
            .into_iter()
            .map(to_wire)
            .collect(),
    })
}

/// Reads of the viewer's runs by others, and forgets, newest first.
pub(crate) fn audit(registry: &Registry, viewer: &Viewer) -> Result<AuditResponse> {
    Ok(AuditResponse {
        entries: registry
            .audit_of(viewer, 1000)?
            .into_iter()
            .map(|(reader, run_id, what, at)| AuditEntry {
                reader,
                run_id,
                what,
                at,
            })
            .collect(),
    })
}

/// A grant as the API shows it.
pub(crate) fn to_wire(s: ShareRow) -> Share {
    Share {
        id: s.id,
        grantor: s.grantor,
        grantee: s.grantee,
        scope: s.scope,
        state: match (&s.revoked_at, &s.expires_at) {
            (Some(_), _) => "revoked",
            (None, Some(at)) if *at <= kith_shared::timestamp::now() => "expired",
            _ => "active",
        }
        .to_owned(),
        created_at: s.created_at,
        expires_at: s.expires_at,
        revoked_at: s.revoked_at,
        follow: s.follow,
    }
}
