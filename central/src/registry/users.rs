//! The `users` table: family members, their handles and PDS.

use rusqlite::{params, OptionalExtension};

use super::Registry;
use crate::error::{Code, Error, Result};
use kith_shared::ids::UserId;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub id: UserId,
    pub handle: String,
    pub did: Option<String>,
    pub pds_url: Option<String>,
    pub is_admin: bool,
    pub created_at: String,
}

fn user_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<UserRow> {
    let id: String = r.get(0)?;
    Ok(UserRow {
        id: UserId::parse(&id).map_err(|e| rusqlite::Error::ToSqlConversionFailure(Box::new(e)))?,
        handle: r.get(1)?,
        did: r.get(2)?,
        pds_url: r.get(3)?,
        is_admin: r.get(4)?,
        created_at: r.get(5)?,
    })
}

impl Registry {
    pub fn add_user(&self, user: &UserRow) -> Result<()> {
        let n = self.conn().execute(
            "INSERT INTO users (id, handle, did, pds_url, is_admin, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (handle) DO NOTHING",
            params![
                user.id.as_str(),
                user.handle,
                user.did,
                user.pds_url,
                user.is_admin,
                user.created_at
            ],
        )?;
        if n == 0 {
            return Err(Error::conflict(
                Code::UserExists,
                format!("user {} already exists", user.handle),
            ));
        }
        Ok(())
    }

    pub fn user_by_handle(&self, handle: &str) -> Result<Option<UserRow>> {
        Ok(self
            .reader()
            .query_row(
                "SELECT id, handle, did, pds_url, is_admin, created_at FROM users WHERE handle = ?1",
                [handle],
                user_row,
            )
            .optional()?)
    }

    pub fn list_users(&self) -> Result<Vec<UserRow>> {
        let conn = self.reader();
        let mut stmt = conn.prepare(
            "SELECT id, handle, did, pds_url, is_admin, created_at FROM users ORDER BY handle",
        )?;
        let rows = stmt
            .query_map([], user_row)?
            .collect::<rusqlite::Result<_>>()?;
        Ok(rows)
    }
}
