//! What Cursor's transcripts do not say, read from around them: the folder
//! the agent worked in, which the transcript's project folder names as a
//! slug (`~/.cursor/projects/home-me-src-app/agent-transcripts/<id>.jsonl`
//! for `/home/me/src/app`), and when the chat began, which cursor-agent
//! keeps in its chat store (`~/.cursor/chats/<hash>/<id>/store.db`, the
//! `createdAt` of its `meta` row) and the file's own times tell otherwise.

use std::path::{Path, PathBuf};

use time::OffsetDateTime;

/// Deepest folder a slug is followed to.
const MAX_DEPTH: usize = 32;

/// The folder `slug` stands for under `root` (`/` in use), found on disk:
/// a slug is the path with every character but letters and digits written
/// `-`, so each folder is matched by its name written the same way. `None`
/// when no folder on disk fits.
pub(crate) fn project_of_slug(root: &Path, slug: &str) -> Option<PathBuf> {
    fn find(dir: &Path, rest: &str, depth: usize) -> Option<PathBuf> {
        if depth > MAX_DEPTH {
            return None;
        }
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        // The longest name first: `my-app` before `my`.
        names.sort_by_key(|n| std::cmp::Reverse(n.len()));
        for name in names {
            let written = slugged(&name);
            if rest == written {
                return Some(dir.join(name));
            }
            if let Some(deeper) = rest
                .strip_prefix(&written)
                .and_then(|r| r.strip_prefix('-'))
            {
                if let Some(found) = find(&dir.join(&name), deeper, depth + 1) {
                    return Some(found);
                }
            }
        }
        None
    }
    let slug = slug.trim_matches('-');
    (!slug.is_empty()).then_some(())?;
    find(root, slug, 0)
}

fn slugged(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_alphanumeric() { c } else { '-' })
        .collect()
}

/// The project folder of the Cursor transcript at `path`
/// (`projects/<slug>/agent-transcripts/...`).
pub(crate) fn project(path: &Path) -> Option<String> {
    let mut dir = path.parent();
    while let Some(d) = dir {
        if d.file_name().is_some_and(|n| n == "agent-transcripts") {
            let slug = d.parent()?.file_name()?.to_str()?;
            return project_of_slug(Path::new("/"), slug).map(|p| p.display().to_string());
        }
        dir = d.parent();
    }
    None
}

/// When the chat of the transcript at `path` began: cursor-agent's chat
/// store under `cursor_dir` when it has the chat, else the file's birth
/// (or, where the file system keeps none, its last change).
pub(crate) fn started(cursor_dir: &Path, path: &Path) -> Option<OffsetDateTime> {
    let id = path.file_stem()?.to_str()?;
    let stored = std::fs::read_dir(cursor_dir.join("chats"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|hash| hash.path().join(id).join("store.db"))
        .find(|db| db.is_file())
        .and_then(|db| created_at(&db));
    stored.or_else(|| {
        let meta = std::fs::metadata(path).ok()?;
        Some(meta.created().or_else(|_| meta.modified()).ok()?.into())
    })
}

/// `createdAt` (ms since the epoch) of a chat store's `meta` row, whose
/// value is hex-encoded JSON.
fn created_at(db: &Path) -> Option<OffsetDateTime> {
    let conn = rusqlite::Connection::open_with_flags(
        db,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .ok()?;
    let mut stmt = conn.prepare("SELECT value FROM meta").ok()?;
    let values: Vec<String> = stmt
        .query_map([], |r| r.get(0))
        .ok()?
        .filter_map(Result::ok)
        .collect();
    values.iter().find_map(|hex| {
        let json: serde_json::Value = serde_json::from_slice(&hex::decode(hex).ok()?).ok()?;
        let ms = json.get("createdAt")?.as_i64()?;
        OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slug_is_the_folder_on_disk_that_writes_the_same() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let root = tmp.path();
        for dir in [
            "home/me/src/my.app",
            "home/me/src/my",
            "home/me-too/x",
            "srv/a_b",
        ] {
            std::fs::create_dir_all(root.join(dir))?;
        }
        let found = |slug: &str| project_of_slug(root, slug);
        assert_eq!(
            found("home-me-src-my-app"),
            Some(root.join("home/me/src/my.app"))
        );
        assert_eq!(found("home-me-src-my"), Some(root.join("home/me/src/my")));
        assert_eq!(found("home-me-too-x"), Some(root.join("home/me-too/x")));
        assert_eq!(found("-srv-a-b"), Some(root.join("srv/a_b")));
        assert_eq!(found("home-me-src-gone"), None);
        assert_eq!(found(""), None);
        assert_eq!(found("---"), None);
        Ok(())
    }

    #[test]
    fn a_chat_began_when_its_store_says() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let id = "a1b2c3d4-e5f6-7890-abcd-ef1234567890";
        let chat = tmp
            .path()
            .join("chats/0cc175b9c0f1b6a831c399e269772661")
            .join(id);
        std::fs::create_dir_all(&chat)?;
        let conn = rusqlite::Connection::open(chat.join("store.db"))?;
        conn.execute_batch("CREATE TABLE meta (key TEXT, value TEXT)")?;
        let value = hex::encode(br#"{"agentId":"a1b2","createdAt":1775522590321}"#);
        conn.execute("INSERT INTO meta VALUES ('0', ?1)", [value])?;
        let transcript = tmp
            .path()
            .join(format!("projects/x/agent-transcripts/{id}.jsonl"));
        std::fs::create_dir_all(transcript.parent().unwrap_or(tmp.path()))?;
        std::fs::write(&transcript, "{}\n")?;
        let at = started(tmp.path(), &transcript).map(OffsetDateTime::unix_timestamp);
        assert_eq!(at, Some(1_775_522_590));
        // Without a store: the file's own time, now-ish here.
        let other = transcript.with_file_name("other.jsonl");
        std::fs::write(&other, "{}\n")?;
        let at = started(tmp.path(), &other).map(OffsetDateTime::unix_timestamp);
        let now = OffsetDateTime::now_utc().unix_timestamp();
        assert!(at.is_some_and(|t| (now - t).abs() < 600), "{at:?}");
        Ok(())
    }
}
