//! `kith context`: the passages of past conversations most useful for a
//! task (`POST /api/context`), fitted to a token budget. With `--hook` it is
//! Claude Code's SessionStart hook (installed by `kith install claude-code
//! --recall-on-start`): what it prints begins the new session's context, so
//! it is short (at most `HOOK_MAX_TOKENS`), names the recent conversations
//! in the session's folder, and is empty when central cannot say: a session
//! never waits long on kith or sees a kith error.

use std::io::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use kith_proto::{ConversationsResponse, SearchFilters};

use super::absolute;
use crate::client::Client;
use crate::config::Auth;
use crate::render::plain;
use crate::render::term::printable;

/// `kith context`'s task, budget and output.
#[derive(Debug, clap::Args)]
pub(crate) struct ContextArgs {
    /// The task, in your own words.
    #[arg(required_unless_present = "hook")]
    task: Option<String>,
    /// Most tokens the pack may hold (characters / 4), 1 to 32000.
    #[arg(long, default_value_t = 4000)]
    budget: u32,
    /// Only conversations in this folder or below it (e.g. `.`).
    #[arg(long)]
    project: Option<PathBuf>,
    /// Central's answer (the pack and its passages) as one JSON document.
    #[arg(long)]
    pub(crate) json: bool,
    /// As Claude Code's SessionStart hook: recent work in the session's
    /// folder (at most 800 tokens); always exits 0.
    #[arg(long, conflicts_with_all = ["task", "json"])]
    pub(crate) hook: bool,
}

pub(crate) fn run(args: ContextArgs, client: &Client) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let ContextArgs {
        task,
        budget,
        project,
        json,
        ..
    } = args;
    let req = kith_proto::ContextRequest {
        task: task.unwrap_or_default(),
        budget_tokens: Some(budget),
        filters: SearchFilters {
            cwd_prefix: project.map(|p| absolute(&p)).transpose()?,
            ..SearchFilters::default()
        },
    };
    let res: kith_proto::ContextResponse = client.json(client.post("/api/context").json(&req))?;
    if json {
        writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
    } else {
        write!(stdout, "{}", printable(&plain::pack(&res)))?;
    }
    Ok(())
}

/// Most tokens the block may cost a new session.
const HOOK_MAX_TOKENS: u32 = 800;
/// Conversations listed.
const RECENT: u32 = 8;

/// The block for the session whose hook payload is on stdin, or nothing.
pub(crate) fn session_start(auth: &Auth) -> String {
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

/// The person's own recent conversations in `project`: what others shared
/// never starts a session (a share cannot put words in the recipient's
/// agent's mouth).
fn recent(auth: &Auth, project: &str) -> crate::Result<String> {
    let client = Client::new(auth)?.within(Duration::from_secs(5));
    let me: kith_proto::StatusResponse = client.json(client.get("/api/status"))?;
    let res: ConversationsResponse = client.json(client.get("/api/conversations").query(&[
        ("project", project),
        ("owner", &me.user),
        ("limit", &RECENT.to_string()),
    ]))?;
    if res.conversations.is_empty() {
        return Ok(String::new());
    }
    let block = format!(
        "Recent work in this project (kith; `kith show ID` or the kith MCP tools read more):\n{}",
        plain::recent(&res, &me.user)
    );
    Ok(plain::bounded(&block, HOOK_MAX_TOKENS))
}
