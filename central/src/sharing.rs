//! Granting another family member read access: validate the scope (a run
//! must be the grantor's own; a tag may be anything), resolve the grantee,
//! record the grant. Reads pick it up at once through `readable`.

use kith_proto::ShareRequest;
use kith_shared::ids::RunId;

use crate::error::{Error, Result};
use crate::registry::Viewer;
use crate::registry::{GrantScope, ShareRow};
use crate::state::AppState;

pub fn grant(state: &AppState, viewer: &Viewer, req: &ShareRequest) -> Result<ShareRow> {
    let registry = state.registry();
    let scope = GrantScope::parse(&req.scope).ok_or_else(|| {
        Error::bad_request("invalid_scope", "scope must be run:<run id> or tag:<tag>")
    })?;
    if let GrantScope::Run(id) = &scope {
        let id = RunId::parse(id).map_err(|e| Error::bad_request("invalid_id", e.to_string()))?;
        registry
            .run(viewer, &id)?
            .filter(|r| r.meta.user_id == viewer.user_id().as_str())
            .ok_or_else(Error::run_not_found)?;
    }
    let grantee = registry
        .user_id_by_handle(&req.with)?
        .ok_or(Error::NotFound { what: "user" })?;
    if &grantee == viewer.user_id() {
        return Err(Error::bad_request(
            "invalid_grantee",
            "you can already read your own runs",
        ));
    }
    let expires_at = match &req.expires_at {
        Some(t) => Some(kith_shared::timestamp::normalize(t).ok_or_else(|| {
            Error::bad_request("invalid_timestamp", "expires_at must be RFC 3339")
        })?),
        None => None,
    };
    let id = format!("s{}", hex::encode(uuid::Uuid::now_v7().into_bytes()));
    registry.add_share(
        &id,
        viewer.user_id(),
        &grantee,
        &scope,
        expires_at.as_deref(),
    )?;
    registry
        .list_shares(viewer, true)?
        .into_iter()
        .find(|s| s.id == id)
        .ok_or_else(|| Error::Internal("a share vanished after insert".into()))
}
