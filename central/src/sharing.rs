//! Granting another family member read access: validate the scope (a
//! conversation or run must be the grantor's own; a tag must be on one of
//! their runs), resolve the grantee, record the grant with its cut-off (a
//! snapshot unless it follows). Reads pick it up at once through `readable`.

use kith_proto::{AuditEntry, AuditQuery, AuditResponse, Share, ShareRequest, SharesResponse};
use kith_shared::ids::RunId;

use crate::error::{Code, Error, Result};
use crate::privacy::GrantScope;
use crate::registry::Viewer;
use crate::registry::{AuditFilter, AuditRow, Registry, ShareRow};

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
    let grantee = registry.member(&req.with)?;
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

/// Reads of the viewer's runs by others, and forgets, newest first; the
/// requests of one reading (a conversation's page, its turns, its bytes,
/// within `READING` of each other) are one entry.
pub(crate) fn audit(
    registry: &Registry,
    viewer: &Viewer,
    query: &AuditQuery,
) -> Result<AuditResponse> {
    const MAX: u32 = 1000;
    let limit = match query.limit {
        Some(0) => {
            return Err(Error::invalid(
                Code::InvalidLimit,
                format!("limit must be 1 to {MAX}"),
            ))
        }
        given => given.unwrap_or(MAX).min(MAX),
    };
    let before = query
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<i64>()
                .map_err(|_| Error::invalid(Code::InvalidCursor, "cursor is not one this API gave"))
        })
        .transpose()?;
    let conversation = query
        .conversation
        .as_deref()
        .map(|name| registry.resolve_conversation(viewer, name))
        .transpose()?;
    let filter = AuditFilter {
        reader: query.reader.clone(),
        conversation,
        before,
        limit,
    };
    let rows = registry.audit_of(viewer, &filter)?;
    let next_cursor = (rows.len() == limit as usize)
        .then(|| rows.last().map(|r| r.id.to_string()))
        .flatten();
    Ok(AuditResponse {
        entries: fold_readings(rows),
        next_cursor,
    })
}

/// How far apart two requests of one reading may be.
const READING: time::Duration = time::Duration::minutes(10);

/// Folds audited requests, newest first, into readings: a request joins the
/// entry before it when the same reader read the same conversation (any
/// of `read`'s requests) within `READING` of that entry's newest request.
/// Search hits and forgets stay one entry each: each names what was shown.
fn fold_readings(rows: Vec<AuditRow>) -> Vec<AuditEntry> {
    let mut out: Vec<AuditEntry> = Vec::new();
    for row in rows {
        let what = match row.what.as_str() {
            "search_hit" | "forget" => row.what,
            _ => "read".to_owned(),
        };
        let conversation = row
            .conversation
            .clone()
            .unwrap_or_else(|| row.run_id.clone());
        if let Some(last) = out.last_mut() {
            let same = last.reader == row.reader
                && last.what == "read"
                && what == "read"
                && last.conversation_id.as_ref().unwrap_or(&last.run_id) == &conversation;
            let near = match (
                kith_shared::timestamp::parse(&last.at),
                kith_shared::timestamp::parse(&row.at),
            ) {
                (Some(newest), Some(at)) => newest - at <= READING,
                _ => false,
            };
            if same && near {
                last.requests += 1;
                // The reading's first request names its run.
                last.run_id = row.run_id;
                continue;
            }
        }
        out.push(AuditEntry {
            reader: row.reader,
            run_id: row.run_id,
            what,
            at: row.at,
            conversation_id: row.conversation,
            title: row.title,
            requests: 1,
        });
    }
    out
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
        conversation_id: s.conversation,
        title: s.title,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(reader: &str, what: &str, at: &str, conversation: &str) -> AuditRow {
        AuditRow {
            id: 0,
            reader: reader.into(),
            run_id: format!("r-{conversation}"),
            what: what.into(),
            at: format!("2026-05-01T{at}:00.000Z"),
            conversation: Some(conversation.into()),
            title: Some(format!("about {conversation}")),
        }
    }

    #[test]
    fn one_reading_is_one_entry_and_search_hits_and_forgets_stay_apart() {
        // Newest first, as the audit reads them.
        let rows = vec![
            row("bob", "jsonl", "10:09", "c1"),
            row("bob", "turns", "10:05", "c1"),
            row("bob", "conversation", "10:00", "c1"),
            row("bob", "conversation", "09:58", "c2"),
            row("carol", "conversation", "09:57", "c2"),
            row("bob", "search_hit", "09:56", "c2"),
            row("bob", "search_hit", "09:56", "c2"),
            row("bob", "conversation", "09:40", "c2"),
        ];
        let entries = fold_readings(rows);
        let seen: Vec<(&str, &str, &str, u64)> = entries
            .iter()
            .map(|e| {
                let c = e.conversation_id.as_deref().unwrap_or_default();
                (e.reader.as_str(), e.what.as_str(), c, e.requests)
            })
            .collect();
        assert_eq!(
            seen,
            [
                ("bob", "read", "c1", 3),
                ("bob", "read", "c2", 1),
                ("carol", "read", "c2", 1),
                ("bob", "search_hit", "c2", 1),
                ("bob", "search_hit", "c2", 1),
                // Eighteen minutes after: another reading.
                ("bob", "read", "c2", 1),
            ]
        );
        assert_eq!(entries[0].at, "2026-05-01T10:09:00.000Z", "the newest");
        assert_eq!(entries[0].title.as_deref(), Some("about c1"));
    }
}
