//! `kith tag add | remove | list`: tags on every run of one of your
//! conversations (`POST /api/conversations/{id}/tags`), and the tags on
//! what you may read (`GET /api/tags`).

use std::io::Write as _;

use anyhow::Result;
use kith_proto::{TagsRequest, TagsResponse};

use crate::client::{path_part, Client};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum TagCommand {
    /// Tag every run of one of your conversations.
    Add {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// Tags: 1-100 bytes each, without '|' or ':'.
        #[arg(required = true)]
        tags: Vec<String>,
    },
    /// Take tags off every run of one of your conversations.
    Remove {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// The tags to take off.
        #[arg(required = true)]
        tags: Vec<String>,
    },
    /// Every tag on a conversation you may read, with how many carry it.
    List {
        /// One JSON document ({"tags": [{"tag", "conversations"}]}).
        #[arg(long)]
        json: bool,
    },
}

pub(crate) fn run(cmd: TagCommand, client: &Client) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let (id, req) = match cmd {
        TagCommand::List { json } => {
            let res: kith_proto::TagList = client.json(client.get("/api/tags"))?;
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
            } else if res.tags.is_empty() {
                writeln!(
                    stdout,
                    "no tags yet: `kith tag add ID TAG` tags a conversation"
                )?;
            }
            for t in &res.tags {
                let n = t.conversations;
                let line = format!(
                    "{}  {n} conversation{}",
                    t.tag,
                    if n == 1 { "" } else { "s" }
                );
                writeln!(stdout, "{}", crate::render::term::printable(&line))?;
            }
            return Ok(());
        }
        TagCommand::Add { id, tags } => (
            id,
            TagsRequest {
                add: tags,
                remove: Vec::new(),
            },
        ),
        TagCommand::Remove { id, tags } => (
            id,
            TagsRequest {
                add: Vec::new(),
                remove: tags,
            },
        ),
    };
    let path = format!("/api/conversations/{}/tags", path_part(&id));
    let res: TagsResponse = client.json(client.post(&path).json(&req))?;
    let tags = if res.tags.is_empty() {
        "no tags".to_owned()
    } else {
        format!("tags {}", res.tags.join(", "))
    };
    writeln!(
        stdout,
        "conversation {} ({} runs) has {tags}",
        res.conversation_id, res.n_runs
    )?;
    Ok(())
}
