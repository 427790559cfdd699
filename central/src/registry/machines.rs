//! The `machines` table: each machine's token hash, and the `Viewer` a
//! token resolves to.

use rusqlite::{params, OptionalExtension};

use super::{parse_id, Registry, Viewer};
use crate::error::{Code, Error, Result};
use kith_shared::ids::{MachineId, UserId};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineRow {
    pub id: MachineId,
    pub user_id: UserId,
    pub handle: String,
    pub name: String,
    pub created_at: String,
    pub last_seen_at: Option<String>,
    pub revoked_at: Option<String>,
}

/// The identity side of one machine, for `machine register` and `revoke`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineAuth {
    /// The app password's name on the user's PDS; `None` for a local token.
    pub app_password_name: Option<String>,
    pub revoked_at: Option<String>,
}

impl Registry {
    pub fn add_machine(
        &self,
        id: &MachineId,
        user_id: &UserId,
        name: &str,
        app_password_name: Option<&str>,
        token_sha256: &str,
        created_at: &str,
    ) -> Result<()> {
        let res = self.conn().execute(
            "INSERT INTO machines (id, user_id, name, app_password_name, token_sha256, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![
                id.as_str(),
                user_id.as_str(),
                name,
                app_password_name,
                token_sha256,
                created_at
            ],
        );
        match res {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Err(Error::conflict(
                    Code::MachineExists,
                    format!("this user already has a machine named {name:?}; revoke it or pick another name"),
                ))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The viewer behind a token hash, unless the machine is unknown or revoked.
    pub fn viewer_by_token(&self, token_sha256: &str) -> Result<Option<Viewer>> {
        let row = self
            .reader()
            .prepare_cached(
                "SELECT m.id, m.name, u.id, u.handle, u.is_admin FROM machines m
                 JOIN users u ON u.id = m.user_id
                 WHERE m.token_sha256 = ?1 AND m.revoked_at IS NULL",
            )?
            .query_row([token_sha256], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, bool>(4)?,
                ))
            })
            .optional()?;
        let Some((machine_id, machine_name, user_id, handle, is_admin)) = row else {
            return Ok(None);
        };
        let mut viewer = Viewer::new(
            parse_id(UserId::parse(&user_id))?,
            Some((parse_id(MachineId::parse(&machine_id))?, machine_name)),
            handle,
            is_admin,
        );
        let grants = self.grants_to(&viewer)?;
        viewer.set_grants(grants);
        Ok(Some(viewer))
    }

    /// The machine of `user_id` whose token's sha256 is `token_sha256`
    /// (revoked or not), and whether it is revoked.
    pub fn machine_of_token(
        &self,
        user_id: &UserId,
        token_sha256: &str,
    ) -> Result<Option<(MachineId, bool)>> {
        let row: Option<(String, bool)> = self
            .reader()
            .query_row(
                "SELECT id, revoked_at IS NOT NULL FROM machines
                 WHERE user_id = ?1 AND token_sha256 = ?2",
                params![user_id.as_str(), token_sha256],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .optional()?;
        row.map(|(id, revoked)| Ok((parse_id(MachineId::parse(&id))?, revoked)))
            .transpose()
    }

    /// Marks a machine revoked; returns false when no live machine matched.
    pub fn revoke_machine(&self, user_id: &UserId, name: &str, at: &str) -> Result<bool> {
        let n = self.conn().execute(
            "UPDATE machines SET revoked_at = ?3 WHERE user_id = ?1 AND name = ?2 AND revoked_at IS NULL",
            params![user_id.as_str(), name, at],
        )?;
        Ok(n == 1)
    }

    /// How the machine `name` of a user authenticates, revoked or not (a
    /// name stays taken after revoke): `None` when there is no such machine.
    pub fn machine_auth(&self, user_id: &UserId, name: &str) -> Result<Option<MachineAuth>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT app_password_name, revoked_at FROM machines WHERE user_id = ?1 AND name = ?2",
                params![user_id.as_str(), name],
                |r| {
                    Ok(MachineAuth {
                        app_password_name: r.get(0)?,
                        revoked_at: r.get(1)?,
                    })
                },
            )
            .optional()?)
    }

    pub fn list_machines(&self) -> Result<Vec<MachineRow>> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT m.id, m.user_id, u.handle, m.name, m.created_at, m.last_seen_at, m.revoked_at
             FROM machines m JOIN users u ON u.id = m.user_id ORDER BY u.handle, m.name",
        )?;
        let rows = stmt
            .query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get(2)?,
                    r.get(3)?,
                    r.get(4)?,
                    r.get(5)?,
                    r.get(6)?,
                ))
            })?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(
                |(id, user_id, handle, name, created_at, last_seen_at, revoked_at)| {
                    Ok(MachineRow {
                        id: parse_id(MachineId::parse(&id))?,
                        user_id: parse_id(UserId::parse(&user_id))?,
                        handle,
                        name,
                        created_at,
                        last_seen_at,
                        revoked_at,
                    })
                },
            )
            .collect()
    }

    /// Records when machines were last seen (batched by the caller).
    pub fn touch_machines(
        &self,
        seen: &std::collections::HashMap<MachineId, String>,
    ) -> Result<()> {
        if seen.is_empty() {
            return Ok(());
        }
        let mut conn = self.conn();
        let tx = conn.transaction()?;
        for (id, at) in seen {
            tx.prepare_cached("UPDATE machines SET last_seen_at = ?2 WHERE id = ?1")?
                .execute(params![id.as_str(), at])?;
        }
        tx.commit()?;
        Ok(())
    }
}
