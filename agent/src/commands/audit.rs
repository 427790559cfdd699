//! `kith audit`: who read your conversations, newest first, a reading a
//! line (`GET /api/audit`).

use std::io::Write as _;

use anyhow::Result;

use crate::client::Client;
use crate::render::term::{one_line, printable};

/// `kith audit`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct AuditArgs {
    /// One JSON document ({"entries": [...]}).
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(args: AuditArgs, client: &Client) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let res: kith_proto::AuditResponse = client.json(client.get("/api/audit"))?;
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
    Ok(())
}
