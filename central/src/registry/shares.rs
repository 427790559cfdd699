//! Share grants, the read audit and quarantine: the registry tables that
//! widen or narrow who may read a run (the predicate itself is `readable`).

use rusqlite::{params, OptionalExtension};

use super::{Registry, Sql};
use crate::conversation::MIN_PREFIX;
use crate::error::{Code, Error, Result};
use crate::privacy::{Grant, GrantScope, LIVE_GRANT};
use crate::registry::Viewer;
use kith_shared::ids::UserId;

/// A grant as listed, with handles.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRow {
    pub id: String,
    pub grantor: String,
    pub grantee: String,
    pub scope: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    /// A run grant that covers deltas captured after it was given.
    pub follow: bool,
    /// A run grant's conversation and its title (the granted run's own).
    pub conversation: Option<String>,
    pub title: Option<String>,
}

/// Which audited requests to read.
#[derive(Debug, Clone)]
pub struct AuditFilter {
    pub reader: Option<String>,
    pub conversation: Option<crate::conversation::ConversationId>,
    /// Older than this row.
    pub before: Option<i64>,
    pub limit: u32,
}

/// One audited request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    /// Its place in the audit (newer is larger).
    pub id: i64,
    pub reader: String,
    pub run_id: String,
    pub what: String,
    pub at: String,
    pub conversation: Option<String>,
    pub title: Option<String>,
}

/// What revoking a grant found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Revoked {
    Now,
    Already,
    NoSuchGrant,
}

impl Registry {
    pub fn user_id_by_handle(&self, handle: &str) -> Result<Option<UserId>> {
        Ok(self.user_by_handle(handle)?.map(|u| u.id))
    }

    pub fn add_share(
        &self,
        id: &str,
        grantor: &UserId,
        grantee: &UserId,
        scope: &GrantScope,
        expires_at: Option<&str>,
        follow: bool,
    ) -> Result<()> {
        let (kind, value) = scope.parts();
        self.conn().execute(
            "INSERT INTO shares (id, grantor, grantee, scope_kind, scope_value, created_at, expires_at, follow)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![id, grantor.as_str(), grantee.as_str(), kind, value, kith_shared::timestamp::now(), expires_at, follow],
        )?;
        Ok(())
    }

    /// Whether one of the viewer's own runs carries `tag`.
    pub fn has_tag(&self, viewer: &Viewer, tag: &str) -> Result<bool> {
        Ok(self.reader().query_row(
            "SELECT EXISTS (SELECT 1 FROM runs WHERE user_id = ?1
               AND instr(tags_key, '|' || ?2 || '|') > 0)",
            params![viewer.user_id().as_str(), tag],
            |r| r.get(0),
        )?)
    }

    /// Revokes a grant the viewer gave, or declines one it received: either
    /// way it stops covering anything at once.
    pub fn revoke_share(&self, viewer: &Viewer, name: &str) -> Result<Revoked> {
        let ids = self.grants_named(viewer, name)?;
        if ids.is_empty() {
            return Ok(Revoked::NoSuchGrant);
        }
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let now = kith_shared::timestamp::now();
        let mut revoked = 0;
        for id in &ids {
            revoked += tx.execute(
                "UPDATE shares SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, now],
            )?;
        }
        tx.commit()?;
        Ok(if revoked > 0 {
            Revoked::Now
        } else {
            Revoked::Already
        })
    }

    /// The grants that `name` names: a grant the viewer gave or received,
    /// by its id or a unique prefix of it (at least `MIN_PREFIX`
    /// characters), or a conversation of the viewer's (as
    /// `resolve_conversation` names one: every grant it gave on one of its
    /// runs).
    fn grants_named(&self, viewer: &Viewer, name: &str) -> Result<Vec<String>> {
        let me = viewer.user_id().as_str();
        let grant_id = name.len() >= MIN_PREFIX
            && name.strip_prefix('s').is_some_and(|hex| {
                hex.bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
            });
        if grant_id {
            // Given, or received: a recipient declines a share by taking
            // it back as its giver would.
            let conn = self.reader();
            let mut stmt = conn.prepare_cached(
                "SELECT id FROM shares WHERE (grantor = ?1 OR grantee = ?1)
                   AND substr(id, 1, length(?2)) = ?2
                 ORDER BY id LIMIT 11",
            )?;
            let found: Vec<String> = stmt
                .query_map(params![me, name], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            match found.len() {
                0 => {}
                1 => return Ok(found),
                n => {
                    return Err(Error::conflict(
                        Code::AmbiguousId,
                        format!(
                            "{name} names {} grants: {}; give more characters",
                            if n > 10 {
                                "more than 10".to_owned()
                            } else {
                                n.to_string()
                            },
                            found[..n.min(10)].join(", ")
                        ),
                    ))
                }
            }
        }
        let conversation = match self.resolve_conversation(viewer, name) {
            Ok(id) => id,
            Err(Error::NotFound { .. }) if grant_id => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(
            "SELECT s.id FROM shares s JOIN runs r ON r.id = s.scope_value
             WHERE s.grantor = ?1 AND s.scope_kind = 'run' AND r.conversation = ?2 AND r.user_id = ?1",
        )?;
        let found = stmt
            .query_map(params![me, conversation.as_str()], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(found)
    }

    /// Grants the viewer gave (`given`) or received, newest first.
    pub fn list_shares(&self, viewer: &Viewer, given: bool) -> Result<Vec<ShareRow>> {
        let side = if given { "s.grantor" } else { "s.grantee" };
        let conn = self.reader();
        let mut stmt = conn.prepare(&format!(
            "SELECT s.id, g.handle, r.handle, s.scope_kind || ':' || s.scope_value, s.created_at,
                    s.expires_at, s.revoked_at, s.follow, x.conversation, json_extract(x.meta_json, '$.title')
             FROM shares s JOIN users g ON g.id = s.grantor JOIN users r ON r.id = s.grantee
             LEFT JOIN runs x ON s.scope_kind = 'run' AND x.id = s.scope_value
             WHERE {side} = ?1 ORDER BY s.created_at DESC, s.id"
        ))?;
        let rows = stmt
            .query_map([viewer.user_id().as_str()], |r| {
                Ok(ShareRow {
                    id: r.get(0)?,
                    grantor: r.get(1)?,
                    grantee: r.get(2)?,
                    scope: r.get(3)?,
                    created_at: r.get(4)?,
                    expires_at: r.get(5)?,
                    revoked_at: r.get(6)?,
                    follow: r.get(7)?,
                    conversation: r.get(8)?,
                    title: r.get(9)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Live grants the viewer received.
    pub fn grants_to(&self, viewer: &Viewer) -> Result<Vec<Grant>> {
        Ok(self
            .live_grants("s.grantee", viewer.user_id().as_str())?
            .into_iter()
            .map(|(_, grant)| grant)
            .collect())
    }

    /// Live grants `owner` gave, each with its grantee.
    pub(super) fn grants_from(&self, owner: &str) -> Result<Vec<(String, Grant)>> {
        self.live_grants("s.grantor", owner)
    }

    /// Live grants whose `side` (`s.grantor` or `s.grantee`) is `user`,
    /// each with its grantee.
    fn live_grants(&self, side: &str, user: &str) -> Result<Vec<(String, Grant)>> {
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT s.grantee, s.grantor, s.scope_kind, s.scope_value, s.follow, s.created_at
             FROM shares s WHERE {side} = ?1 AND {LIVE_GRANT}"
        ))?;
        let rows = stmt
            .query_map([user], |r| {
                let grantee: String = r.get(0)?;
                let grantor: String = r.get(1)?;
                let (kind, value): (String, String) = (r.get(2)?, r.get(3)?);
                let follow: bool = r.get(4)?;
                let created_at: String = r.get(5)?;
                let scope = if kind == "run" {
                    GrantScope::Run(value)
                } else {
                    GrantScope::Tag(value)
                };
                // A run grant that does not follow is a snapshot.
                let snapshot = matches!(scope, GrantScope::Run(_)) && !follow;
                Ok((
                    grantee,
                    Grant {
                        grantor,
                        scope,
                        captured_until: snapshot.then_some(created_at),
                    },
                ))
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Records that `viewer` read `run_id` of `owner` (no-op for one's own runs).
    pub fn audit_read(&self, viewer: &Viewer, owner: &str, run_id: &str, what: &str) -> Result<()> {
        self.audit_reads(viewer, &[(owner, run_id)], what)
    }

    /// Records that `viewer` read each `(owner, run_id)` of `reads`, in one
    /// transaction (one sync for a page of hits); one's own runs are not
    /// recorded.
    pub fn audit_reads(&self, viewer: &Viewer, reads: &[(&str, &str)], what: &str) -> Result<()> {
        let reader = viewer.user_id().as_str();
        if reads.iter().all(|(owner, _)| *owner == reader) {
            return Ok(());
        }
        let at = kith_shared::timestamp::now();
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (owner, run_id) in reads.iter().filter(|(owner, _)| *owner != reader) {
            tx.prepare_cached(
                "INSERT INTO audit (owner, reader, run_id, what, at) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![owner, reader, run_id, what, at])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Reads of the viewer's runs by others, and forgets of its
    /// conversations, newest first, with reader handles (`kith-central`
    /// for the operator), each run's conversation and title: at most
    /// `limit`, older than the row `before`, of `reader` and of
    /// `conversation` when given.
    pub fn audit_of(&self, viewer: &Viewer, filter: &AuditFilter) -> Result<Vec<AuditRow>> {
        let mut sql = Sql::new(
            "SELECT a.id, COALESCE(u.handle, a.reader), a.run_id, a.what, a.at, r.conversation,
                    json_extract(r.meta_json, '$.title')
             FROM audit a LEFT JOIN users u ON u.id = a.reader LEFT JOIN runs r ON r.id = a.run_id
             WHERE a.owner = ",
        );
        sql.bind(viewer.user_id().as_str().to_owned());
        if let Some(reader) = &filter.reader {
            sql.and("COALESCE(u.handle, a.reader) = ?1", reader.clone());
        }
        if let Some(conversation) = &filter.conversation {
            sql.and("r.conversation = ?1", conversation.as_str().to_owned());
        }
        if let Some(before) = filter.before {
            sql.and("a.id < ?1", before);
        }
        sql.push(" ORDER BY a.id DESC LIMIT ")
            .bind(i64::from(filter.limit));
        let conn = self.reader();
        let mut stmt = conn.prepare_cached(sql.text())?;
        let rows = stmt
            .query_map(sql.params(), |r| {
                Ok(AuditRow {
                    id: r.get(0)?,
                    reader: r.get(1)?,
                    run_id: r.get(2)?,
                    what: r.get(3)?,
                    at: r.get(4)?,
                    conversation: r.get(5)?,
                    title: r.get(6)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }

    /// Hides (or, with `on = false`, releases) a machine's runs captured at or
    /// after `since` from everyone but their owner; returns how many changed.
    /// Reads see the change at once; each changed run is queued for indexing
    /// again, so that the index's copy follows and the runs stop (or start)
    /// counting in grantees' keyword scores.
    pub fn quarantine(&self, machine_id: &str, since: &str, on: bool) -> Result<usize> {
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        let changed: Vec<String> = tx
            .prepare(
                "UPDATE runs SET quarantined = ?3
                 WHERE machine_id = ?1 AND captured_at >= ?2 AND quarantined != ?3 RETURNING id",
            )?
            .query_map(params![machine_id, since, on], |r| r.get(0))?
            .collect::<rusqlite::Result<_>>()?;
        let now = kith_shared::timestamp::now();
        for run in &changed {
            super::jobs::enqueue(&tx, run, super::Lane::Bulk, &now)?;
        }
        tx.commit()?;
        Ok(changed.len())
    }

    /// The id of a user's machine by name, revoked or not.
    pub fn machine_id(&self, user: &UserId, name: &str) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT id FROM machines WHERE user_id = ?1 AND name = ?2 ORDER BY created_at DESC",
                params![user.as_str(), name],
                |r| r.get(0),
            )
            .optional()?)
    }
}
