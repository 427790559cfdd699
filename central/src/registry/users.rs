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

    /// The member whose handle is `handle`, or a refusal naming the
    /// members it may have meant ("no member bob; did you mean bob.local?").
    pub fn member(&self, handle: &str) -> Result<UserId> {
        if let Some(user) = self.user_by_handle(handle)? {
            return Ok(user.id);
        }
        let handles: Vec<String> = self.list_users()?.into_iter().map(|u| u.handle).collect();
        let near = near_handles(handle, &handles);
        // A handle as long as any filter would be echoed whole: cut it.
        let shown: String = handle.chars().take(64).collect();
        let shown = if shown.len() < handle.len() {
            format!("{shown}…")
        } else {
            shown
        };
        let message = if near.is_empty() {
            format!("no member {shown}")
        } else {
            format!("no member {shown}; did you mean {}?", near.join(" or "))
        };
        Err(Error::invalid(Code::UnknownMember, message))
    }

    /// Makes `user` an admin, or (`admin` false) a member only.
    pub fn set_admin(&self, user: &UserId, admin: bool) -> Result<()> {
        self.conn().execute(
            "UPDATE users SET is_admin = ?2 WHERE id = ?1",
            params![user.as_str(), admin],
        )?;
        Ok(())
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

/// The handles `given` may have meant: the same first label (`bob` for
/// `bob.local`), or one or two letters apart, case aside; at most three.
fn near_handles<'a>(given: &str, handles: &'a [String]) -> Vec<&'a str> {
    let given = given.trim().to_lowercase();
    let label = |h: &str| h.split('.').next().unwrap_or_default().to_owned();
    handles
        .iter()
        .filter(|h| {
            let h = h.to_lowercase();
            label(&h) == label(&given) || edits(&h, &given) <= 2
        })
        .take(3)
        .map(String::as_str)
        .collect()
}

/// Levenshtein distance between `a` and `b`, by characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diagonal + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diagonal = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrong_handle_names_the_members_it_may_mean() {
        let family = ["alice.local", "bob.local", "bobby.test", "carol.local"].map(String::from);
        assert_eq!(near_handles("bob", &family), ["bob.local"]);
        assert_eq!(
            near_handles("Bob.test", &family),
            ["bob.local", "bobby.test"]
        );
        assert_eq!(near_handles("alise.local", &family), ["alice.local"]);
        assert!(near_handles("dave", &family).is_empty());
        assert!(near_handles("", &family).is_empty());
    }
}
