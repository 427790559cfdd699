//! `kith share`: grants to another family member (a conversation, a run,
//! a tag), the list of grants given and received, and taking one back.

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Result;
use time::OffsetDateTime;

use crate::client::{path_part, Client};
use crate::render::term::{one_line, printable};
use crate::when::{parse_expires, WHEN_HINT};

#[derive(Debug, clap::Subcommand)]
pub(crate) enum ShareCommand {
    /// Let another family member read a conversation and its subagents, as
    /// it is now (later turns too with --follow).
    Conversation {
        /// A conversation id, one of its run ids, or a unique prefix.
        id: String,
        /// Their handle, e.g. bob.example.com.
        #[arg(long)]
        with: String,
        /// When the grant ends: 12h, 7d, 2w or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
        /// Also the turns captured after this grant.
        #[arg(long)]
        follow: bool,
    },
    /// Let another family member read a run and everything under it, as it
    /// is now (later deltas too with --follow).
    Run {
        /// A run id.
        run: String,
        /// Their handle, e.g. bob.example.com.
        #[arg(long)]
        with: String,
        /// When the grant ends: 12h, 7d, 2w or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
        /// Also the deltas captured after this grant.
        #[arg(long)]
        follow: bool,
    },
    /// Let another family member read every run with this tag.
    Tag {
        /// The tag (see `kith tag`).
        tag: String,
        /// Their handle.
        #[arg(long)]
        with: String,
        /// When the grant ends: 12h, 7d, 2w or an RFC 3339 time.
        #[arg(long)]
        expires: Option<String>,
    },
    /// Grants you gave and received, with their state.
    List {
        /// One JSON document ({"given": [...], "received": [...]}).
        #[arg(long)]
        json: bool,
    },
    /// Take a grant back, or decline one you received; it stops working
    /// at once.
    Revoke {
        /// The grant's id or a unique prefix (as `kith share list` shows
        /// it), or a conversation: every grant you gave on it.
        id: String,
    },
}

pub(crate) fn run(cmd: ShareCommand, client: &Client) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    match cmd {
        ShareCommand::Conversation {
            id,
            with,
            expires,
            follow,
        } => grant(client, format!("conversation:{id}"), with, expires, follow)?,
        ShareCommand::Run {
            run,
            with,
            expires,
            follow,
        } => grant(client, format!("run:{run}"), with, expires, follow)?,
        ShareCommand::Tag { tag, with, expires } => {
            grant(client, format!("tag:{tag}"), with, expires, true)?
        }
        ShareCommand::Revoke { id } => {
            let before: kith_proto::SharesResponse = client.json(client.get("/api/shares"))?;
            client.send(client.delete(&format!("/api/shares/{}", path_part(&id))))?;
            let after: kith_proto::SharesResponse = client.json(client.get("/api/shares"))?;
            let short = short_ids(&after);
            let ended = |now: &[kith_proto::Share], then: &[kith_proto::Share]| {
                now.iter()
                    .filter(|g| g.state == "revoked")
                    .filter(|g| then.iter().any(|b| b.id == g.id && b.state != "revoked"))
                    .cloned()
                    .collect::<Vec<_>>()
            };
            for g in ended(&after.given, &before.given) {
                let said = format!(
                    "revoked {} with {} (grant {})",
                    covers(&g),
                    g.grantee,
                    short(&g.id)
                );
                writeln!(stdout, "{}", printable(&said))?;
            }
            for g in ended(&after.received, &before.received) {
                let said = format!(
                    "declined {} from {} (grant {})",
                    covers(&g),
                    g.grantor,
                    short(&g.id)
                );
                writeln!(stdout, "{}", printable(&said))?;
            }
        }
        ShareCommand::List { json } => {
            let res: kith_proto::SharesResponse = client.json(client.get("/api/shares"))?;
            if json {
                writeln!(stdout, "{}", serde_json::to_string(&res)?)?;
            } else {
                write!(stdout, "{}", render_shares(&res))?;
            }
        }
    }
    Ok(())
}

/// Gives a grant on `scope` (`conversation:ID`, `run:ID`, `tag:TAG`).
fn grant(
    client: &Client,
    scope: String,
    with: String,
    expires: Option<String>,
    follow: bool,
) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let expires_at = expires
        .map(|e| {
            parse_expires(&e, now)
                .ok_or_else(|| crate::Error::Usage(format!("--expires {e:?}: {WHEN_HINT}")))
        })
        .transpose()?;
    let req = kith_proto::ShareRequest {
        scope,
        with,
        expires_at,
        follow,
    };
    let share: kith_proto::Share = client.json(client.post("/api/shares").json(&req))?;
    let reach = if share.follow {
        "and what comes after"
    } else {
        "as it is now"
    };
    let said = format!(
        "shared {} with {} {reach} (grant {})",
        covers(&share),
        share.grantee,
        share.id
    );
    writeln!(std::io::stdout(), "{}", printable(&said))?;
    Ok(())
}

/// What a grant covers, by name: a conversation's title and short id, or
/// a tag.
fn covers(g: &kith_proto::Share) -> String {
    match (g.scope.strip_prefix("tag:"), &g.conversation_id) {
        (Some(tag), _) => format!("everything tagged {tag}"),
        (None, Some(conversation)) => format!(
            "\"{}\" ({})",
            one_line(g.title.as_deref().unwrap_or("untitled"), 50),
            conversation.get(..9).unwrap_or(conversation)
        ),
        (None, None) => g.scope.clone(),
    }
}

/// The shortest prefix, at least 9 characters, that tells each of the
/// listed grants' ids from the others (grant ids begin with their time, so
/// grants given together share a long prefix).
fn short_ids(res: &kith_proto::SharesResponse) -> impl Fn(&str) -> String {
    let mut ids: Vec<&str> = res
        .given
        .iter()
        .chain(&res.received)
        .map(|g| g.id.as_str())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    let len = ids
        .windows(2)
        .map(|w| {
            w[0].bytes()
                .zip(w[1].bytes())
                .take_while(|(x, y)| x == y)
                .count()
                + 1
        })
        .max()
        .unwrap_or(0)
        .max(9);
    move |id: &str| id.get(..len).unwrap_or(id).to_owned()
}

/// Grants in aligned columns: direction, what it covers, who, state,
/// until, the grant's short id.
pub(crate) fn render_shares(res: &kith_proto::SharesResponse) -> String {
    let short = short_ids(res);
    let mut rows = vec![[
        "".to_owned(),
        "WHAT".to_owned(),
        "WHO".to_owned(),
        "STATE".to_owned(),
        "UNTIL".to_owned(),
        "GRANT".to_owned(),
    ]];
    for (dir, list) in [("gave", &res.given), ("received", &res.received)] {
        for g in list {
            let who = if dir == "gave" {
                &g.grantee
            } else {
                &g.grantor
            };
            let state = if g.follow && g.state == "active" {
                "active, follows".to_owned()
            } else {
                g.state.clone()
            };
            rows.push([
                dir.to_owned(),
                printable(&covers(g)).into_owned(),
                printable(who).into_owned(),
                state,
                g.expires_at.clone().unwrap_or_else(|| "-".to_owned()),
                short(&g.id),
            ]);
        }
    }
    if rows.len() == 1 {
        return "no grants given or received\n".to_owned();
    }
    let widths: Vec<usize> = (0..6)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}
