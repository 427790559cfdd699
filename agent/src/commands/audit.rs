//! `kith audit`: who read your conversations, newest first, a reading a
//! line (`GET /api/audit`).

use std::io::Write as _;

use anyhow::Result;

use crate::client::Client;
use crate::render::term::{one_line, printable};

/// `kith audit`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// Only this reader's readings (a handle).
    #[arg(long)]
    reader: Option<String>,
    /// Only readings of this conversation (an id, prefix or session id).
    #[arg(long)]
    conversation: Option<String>,
    /// Every reading, not only the newest page.
    #[arg(long)]
    all: bool,
    /// One JSON document ({"entries": [...]}).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(args: AuditArgs, client: &Client) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let mut query = kith_proto::AuditQuery {
        reader: args.reader,
        conversation: args.conversation,
        ..Default::default()
    };
    let mut res: kith_proto::AuditResponse = client.json(client.get("/api/audit").query(&query))?;
    if args.all {
        while let Some(cursor) = res.next_cursor.take() {
            query.cursor = Some(cursor);
            let page: kith_proto::AuditResponse =
                client.json(client.get("/api/audit").query(&query))?;
            res.entries.extend(page.entries);
            res.next_cursor = page.next_cursor;
        }
    }
    if args.json {
        writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
        return Ok(());
    }
    if res.entries.is_empty() {
        writeln!(stdout, "nobody else has read your runs")?;
    }
    for e in res.entries {
        let what = match e.what.as_str() {
            "search_hit" => "found",
            "forget" => "forgot",
            _ => "read",
        };
        let at = e.at.get(..16).unwrap_or(&e.at).replacen('T', " ", 1);
        let title = one_line(e.title.as_deref().unwrap_or("untitled"), 60);
        let id = e.conversation_id.as_deref().unwrap_or(&e.run_id);
        let line = format!(
            "{at}  {:<24} {what:<6}  \"{title}\" ({})",
            e.reader,
            id.get(..9).unwrap_or(id)
        );
        writeln!(stdout, "{}", printable(&line))?;
    }
    if res.next_cursor.is_some() {
        writeln!(stdout, "(older readings: kith audit --all)")?;
    }
    Ok(())
}
