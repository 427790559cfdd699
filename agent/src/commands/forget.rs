//! `kith forget ID`: asks central to forget one of your conversations (and
//! the subagents under it) for good. Like git's destructive commands it
//! asks first on a terminal, and without one it wants `--yes`.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::{bail, Result};
use kith_proto::{ConversationResponse, ForgetResponse};

use crate::client::{path_part, Client};

pub(crate) fn run(client: &Client, id: &str, yes: bool) -> Result<()> {
    let found: ConversationResponse =
        client.json(client.get(&format!("/api/conversations/{}", path_part(id))))?;
    let c = &found.conversation;
    if !yes {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            bail!(
                "not forgetting {}: stdin is not a terminal; pass --yes to confirm",
                c.id
            );
        }
        let subagents = match found.subagents.len() {
            0 => String::new(),
            n => format!(" and its {n} subagent conversations"),
        };
        eprint!(
            "forget conversation {} ({}, {} turns){subagents}? central deletes it for good [y/N] ",
            c.id,
            c.title.as_deref().unwrap_or("untitled"),
            c.turn_count
        );
        std::io::stderr().flush()?;
        let mut answer = String::new();
        stdin.lock().read_line(&mut answer)?;
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            bail!("not forgotten");
        }
    }
    let res: ForgetResponse =
        client.json(client.delete(&format!("/api/conversations/{}", path_part(&c.id))))?;
    writeln!(
        std::io::stdout(),
        "forgot conversation {} ({} conversations, {} runs); central will not take its bytes again",
        res.conversation,
        res.n_conversations,
        res.n_runs
    )?;
    for line in &res.backups_not_cleared {
        writeln!(
            std::io::stderr(),
            "not yet forgotten in the backup folder {line}"
        )?;
    }
    Ok(())
}
