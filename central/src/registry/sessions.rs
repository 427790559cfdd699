//! The `web_sessions` and `web_links` tables: browser sign-ins and the
//! one-time links `kith web` asks for, and the `Viewer` a session resolves
//! to. Both keep only the sha256 of the secret the browser holds.

use rusqlite::{params, OptionalExtension};

use super::{parse_id, Registry, Viewer, NOW_SQL};
use crate::error::Result;
use kith_shared::ids::{MachineId, UserId};

/// A session unused this long is over (the next request signs in again).
pub(super) const SESSION_IDLE_DAYS: u32 = 14;
/// A session this old is over, however often it is used: a stolen cookie
/// does not last for ever.
pub const SESSION_MAX_DAYS: u32 = 90;

/// A one-time sign-in link is valid this long.
const LINK_TTL_SECONDS: u32 = 300;

/// Who a sign-in signs in: a user, and the machine whose link it used
/// (none for a password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedIn {
    pub user: UserId,
    pub machine: Option<MachineId>,
}

/// Over a row of `table` (`web_sessions` or `web_links`): it names no
/// machine, or one not revoked.
fn machine_live(table: &str) -> String {
    format!(
        "({table}.machine_id IS NULL OR EXISTS (
            SELECT 1 FROM machines m WHERE m.id = {table}.machine_id AND m.revoked_at IS NULL))"
    )
}

/// Over `web_links`: the link whose token's sha256 is `?1` exists, was
/// never used, has not expired, and its machine is not revoked.
fn link_live() -> String {
    format!(
        "web_links.token_sha256 = ?1 AND web_links.used_at IS NULL
           AND web_links.expires_at > {NOW_SQL} AND {}",
        machine_live("web_links")
    )
}

impl Registry {
    /// Records a new session by the sha256 of its cookie value, and forgets
    /// sessions idle past their expiry or older than `SESSION_MAX_DAYS`.
    pub fn start_session(&self, id_sha256: &str, who: &SignedIn) -> Result<()> {
        let conn = self.conn();
        conn.execute(
            &format!(
                "DELETE FROM web_sessions WHERE last_seen_at <= {} OR created_at <= {}",
                idle_cutoff(),
                days_ago(SESSION_MAX_DAYS)
            ),
            [],
        )?;
        conn.execute(
            &format!(
                "INSERT INTO web_sessions (id_sha256, user_id, created_at, last_seen_at, machine_id)
                 VALUES (?1, ?2, {NOW_SQL}, {NOW_SQL}, ?3)"
            ),
            params![
                id_sha256,
                who.user.as_str(),
                who.machine.as_ref().map(MachineId::as_str)
            ],
        )?;
        Ok(())
    }

    /// The viewer behind a live session (used within the idle expiry, and
    /// its machine, if it names one, not revoked), which this use keeps
    /// alive.
    pub fn viewer_by_session(&self, id_sha256: &str) -> Result<Option<Viewer>> {
        let user: Option<String> = self
            .conn()
            .query_row(
                &format!(
                    "UPDATE web_sessions SET last_seen_at = {NOW_SQL}
                     WHERE id_sha256 = ?1 AND last_seen_at > {} AND created_at > {} AND {}
                     RETURNING user_id",
                    idle_cutoff(),
                    days_ago(SESSION_MAX_DAYS),
                    machine_live("web_sessions")
                ),
                [id_sha256],
                |r| r.get(0),
            )
            .optional()?;
        match user {
            Some(user) => self.viewer_of_user(&parse_id(UserId::parse(&user))?),
            None => Ok(None),
        }
    }

    /// Ends one session (sign out on this browser).
    pub fn end_session(&self, id_sha256: &str) -> Result<()> {
        self.conn()
            .execute("DELETE FROM web_sessions WHERE id_sha256 = ?1", [id_sha256])?;
        Ok(())
    }

    /// Ends every session of a user (sign out everywhere); how many ended.
    pub fn end_sessions_of(&self, user: &UserId) -> Result<usize> {
        Ok(self.conn().execute(
            "DELETE FROM web_sessions WHERE user_id = ?1",
            [user.as_str()],
        )?)
    }

    /// Records a one-time sign-in link for the viewer (its user and
    /// machine) by the sha256 of its token; returns when it expires.
    pub fn add_sign_in_link(&self, token_sha256: &str, viewer: &Viewer) -> Result<String> {
        Ok(self.conn().query_row(
            &format!(
                "INSERT INTO web_links (token_sha256, user_id, expires_at, machine_id)
                 VALUES (?1, ?2, strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '+{LINK_TTL_SECONDS} seconds'), ?3)
                 RETURNING expires_at"
            ),
            params![
                token_sha256,
                viewer.user_id().as_str(),
                viewer.machine_id().map(MachineId::as_str)
            ],
            |r| r.get(0),
        )?)
    }

    /// The handle a sign-in link would sign in, if the link exists, has not
    /// expired, was never used and its machine is not revoked; the link
    /// stays unused (the page that asks to confirm).
    pub fn sign_in_link_handle(&self, token_sha256: &str) -> Result<Option<String>> {
        Ok(self
            .reader()
            .query_row(
                &format!(
                    "SELECT u.handle FROM web_links JOIN users u ON u.id = web_links.user_id
                     WHERE {}",
                    link_live()
                ),
                [token_sha256],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Uses a sign-in link: who it signs in, if the link exists, has not
    /// expired, was never used and its machine is not revoked; it is used
    /// from now on either way.
    pub fn redeem_sign_in_link(&self, token_sha256: &str) -> Result<Option<SignedIn>> {
        let row: Option<(String, Option<String>)> = self
            .conn()
            .query_row(
                &format!(
                    "UPDATE web_links SET used_at = {NOW_SQL} WHERE {}
                     RETURNING user_id, machine_id",
                    link_live()
                ),
                [token_sha256],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        row.map(|(user, machine)| {
            Ok(SignedIn {
                user: parse_id(UserId::parse(&user))?,
                machine: machine
                    .map(|m| parse_id(MachineId::parse(&m)))
                    .transpose()?,
            })
        })
        .transpose()
    }

    /// The viewer of a user without a machine (a web session), with the
    /// grants they hold now.
    pub(super) fn viewer_of_user(&self, user: &UserId) -> Result<Option<Viewer>> {
        let row = self
            .reader()
            .prepare_cached("SELECT handle, is_admin FROM users WHERE id = ?1")?
            .query_row([user.as_str()], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, bool>(1)?))
            })
            .optional()?;
        let Some((handle, is_admin)) = row else {
            return Ok(None);
        };
        let mut viewer = Viewer::new(user.clone(), None, handle, is_admin);
        let grants = self.grants_to(&viewer)?;
        viewer.set_grants(grants);
        Ok(Some(viewer))
    }
}

/// The `last_seen_at` at or before which a session is over.
fn idle_cutoff() -> String {
    days_ago(SESSION_IDLE_DAYS)
}

/// SQL for the instant `days` days ago.
fn days_ago(days: u32) -> String {
    format!("strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-{days} days')")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::UserRow;
    use kith_shared::ids::MachineId;

    fn registry() -> Result<(tempfile::TempDir, Registry, Viewer)> {
        let dir = tempfile::tempdir()?;
        let registry = Registry::open(&dir.path().join("registry.sqlite"))?;
        let user = UserId::from_uuid_bytes([1; 16]);
        registry.add_user(&UserRow {
            id: user.clone(),
            handle: "dave.local".into(),
            did: None,
            pds_url: None,
            is_admin: false,
            created_at: kith_shared::timestamp::now(),
        })?;
        let now = kith_shared::timestamp::now();
        let machine = MachineId::from_uuid_bytes([2; 16]);
        registry.add_machine(&machine, &user, "desk", None, "token-hash", &now)?;
        let viewer = registry
            .viewer_by_token("token-hash")?
            .ok_or_else(|| crate::error::Error::Internal("no viewer".into()))?;
        Ok((dir, registry, viewer))
    }

    #[test]
    fn a_sign_in_link_works_once_and_not_after_it_expires() -> Result<()> {
        let (_dir, registry, viewer) = registry()?;
        registry.add_sign_in_link("link-1", &viewer)?;
        assert_eq!(
            registry.redeem_sign_in_link("link-1")?,
            Some(SignedIn {
                user: viewer.user_id().clone(),
                machine: viewer.machine_id().cloned(),
            })
        );
        assert_eq!(registry.redeem_sign_in_link("link-1")?, None);
        assert_eq!(registry.redeem_sign_in_link("never-issued")?, None);
        registry.add_sign_in_link("link-2", &viewer)?;
        registry.conn().execute(
            "UPDATE web_links SET expires_at = '2020-01-01T00:00:00.000Z' WHERE token_sha256 = 'link-2'",
            [],
        )?;
        assert_eq!(registry.redeem_sign_in_link("link-2")?, None);
        Ok(())
    }

    fn by_password(viewer: &Viewer) -> SignedIn {
        SignedIn {
            user: viewer.user_id().clone(),
            machine: None,
        }
    }

    #[test]
    fn a_session_is_a_viewer_without_a_machine_until_it_ends_or_idles() -> Result<()> {
        let (_dir, registry, viewer) = registry()?;
        let viewer = &by_password(&viewer);
        registry.start_session("s-1", viewer)?;
        registry.start_session("s-2", viewer)?;
        let web = registry.viewer_by_session("s-1")?;
        assert_eq!(web.as_ref().map(Viewer::handle), Some("dave.local"));
        assert_eq!(web.as_ref().and_then(Viewer::machine_id), None);
        registry.end_session("s-1")?;
        assert_eq!(registry.viewer_by_session("s-1")?, None);
        assert!(registry.viewer_by_session("s-2")?.is_some());
        // Idle past the expiry: over.
        registry.conn().execute(
            "UPDATE web_sessions SET last_seen_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-15 days')",
            [],
        )?;
        assert_eq!(registry.viewer_by_session("s-2")?, None);
        // Used every day but started past the limit: over too.
        registry.start_session("s-old", viewer)?;
        registry.conn().execute(
            "UPDATE web_sessions SET created_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-91 days')
             WHERE id_sha256 = 's-old'",
            [],
        )?;
        assert_eq!(registry.viewer_by_session("s-old")?, None);
        registry.start_session("s-3", viewer)?;
        registry.start_session("s-4", viewer)?;
        assert_eq!(registry.end_sessions_of(&viewer.user)?, 2);
        assert_eq!(registry.viewer_by_session("s-4")?, None);
        Ok(())
    }

    #[test]
    fn revoking_a_machine_ends_the_sessions_and_links_made_with_it() -> Result<()> {
        let (_dir, registry, viewer) = registry()?;
        registry.add_sign_in_link("link-1", &viewer)?;
        registry.add_sign_in_link("link-2", &viewer)?;
        let linked = registry
            .redeem_sign_in_link("link-1")?
            .ok_or_else(|| crate::error::Error::Internal("no sign-in".into()))?;
        assert_eq!(linked.machine.as_ref(), viewer.machine_id());
        registry.start_session("by-link", &linked)?;
        registry.start_session("by-password", &by_password(&viewer))?;
        assert!(registry.viewer_by_session("by-link")?.is_some());
        let now = kith_shared::timestamp::now();
        assert!(registry.revoke_machine(viewer.user_id(), "desk", &now)?);
        // The machine's session and its unused link end; a password
        // session of the same member does not.
        assert_eq!(registry.viewer_by_session("by-link")?, None);
        assert_eq!(registry.redeem_sign_in_link("link-2")?, None);
        assert!(registry.viewer_by_session("by-password")?.is_some());
        Ok(())
    }
}
