//! `kith audit`: who read your runs, newest first (`GET /api/audit`).

use std::io::Write as _;

use anyhow::Result;

use crate::client::Client;
use crate::render::term::printable;

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
        let line = format!("{}  {:<24} {:<10} {}", e.at, e.reader, e.what, e.run_id);
        writeln!(stdout, "{}", printable(&line))?;
    }
    Ok(())
}
