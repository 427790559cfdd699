//! `kith context --hook`, Claude Code's SessionStart hook (installed by
//! `kith install claude-code --recall-on-start`): what it prints begins the
//! new session's context, so it is short (at most `MAX_TOKENS`), names the
//! recent conversations in the session's folder, and is empty when central
//! cannot say: a session never waits long on kith or sees a kith error.

use std::path::PathBuf;
use std::time::Duration;

use kith_proto::ConversationsResponse;

use crate::client::Client;
use crate::config::Auth;

/// Most tokens the block may cost a new session.
pub const MAX_TOKENS: u32 = 800;
/// Conversations listed.
const RECENT: u32 = 8;

/// The block for the session whose hook payload is on stdin, or nothing.
pub fn session_start(auth: &Auth) -> String {
    let payload = crate::hook::read_payload();
    let cwd = serde_json::from_slice::<serde_json::Value>(&payload)
        .ok()
        .and_then(|v| v.get("cwd")?.as_str().map(PathBuf::from))
        .or_else(|| std::env::current_dir().ok());
    let Some(cwd) = cwd else {
        return String::new();
    };
    recent(auth, &cwd.to_string_lossy()).unwrap_or_default()
}

fn recent(auth: &Auth, project: &str) -> crate::Result<String> {
    let client = Client::new(auth)?.within(Duration::from_secs(5));
    let res: ConversationsResponse = client.json(
        client
            .get("/api/conversations")
            .query(&[("project", project), ("limit", &RECENT.to_string())]),
    )?;
    if res.conversations.is_empty() {
        return Ok(String::new());
    }
    let block = format!(
        "Recent work in this project (kith; `kith show ID` or the kith MCP tools read more):\n{}",
        crate::render::plain::recent(&res)
    );
    Ok(crate::render::plain::bounded(&block, MAX_TOKENS))
}
