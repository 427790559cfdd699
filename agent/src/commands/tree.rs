//! `kith tree`: recent conversations with their subagents under them
//! (`GET /api/conversations`, paged by cursor), one conversation's
//! (`kith tree ID`), or every captured delta as its own node (`--deltas`,
//! `GET /api/runs/forest`, rendered here).

use std::fmt::Write as _;
use std::io::Write as _;

use anyhow::Result;
use kith_proto::{ConversationResponse, ConversationsResponse, ForestResponse, RunMeta};
use time::OffsetDateTime;

use crate::client::{path_part, Client};
use crate::render::conversation;
use crate::render::term::{age, one_line, Style};
use crate::when::{parse_since, WHEN_HINT};

/// `kith tree`'s flags.
#[derive(Debug, clap::Args)]
pub(crate) struct TreeArgs {
    /// Only this conversation and its subagents (a conversation id, one
    /// of its run ids, or a unique prefix).
    #[arg(conflicts_with_all = ["since", "cursor", "deltas"])]
    id: Option<String>,
    /// Only conversations active since then: 30m, 12h, 7d, 2w or RFC 3339.
    #[arg(long)]
    since: Option<String>,
    /// How many conversations.
    #[arg(long, default_value_t = 20)]
    limit: u32,
    /// The next page: what the previous page printed after "more:".
    #[arg(long)]
    cursor: Option<String>,
    /// Every captured delta as its own node (the storage view).
    #[arg(long)]
    deltas: bool,
    /// One JSON document, for scripts.
    #[arg(long)]
    pub(crate) json: bool,
}

pub(crate) fn run(args: TreeArgs, client: &Client) -> Result<()> {
    let now = OffsetDateTime::now_utc();
    let mut stdout = std::io::stdout().lock();
    let TreeArgs {
        id,
        since,
        limit,
        cursor,
        deltas,
        json,
    } = args;
    if let Some(id) = id {
        let found: ConversationResponse =
            client.json(client.get(&format!("/api/conversations/{}", path_part(&id))))?;
        // The listing's shape, so a script reads one kind of document.
        let res = ConversationsResponse {
            conversations: std::iter::once(found.conversation)
                .chain(found.subagents)
                .collect(),
            next_cursor: None,
        };
        print_tree(&mut stdout, &res, json, now)?;
        return Ok(());
    }
    let mut query = vec![("limit", limit.to_string())];
    if let Some(s) = since {
        query.push((
            "since",
            parse_since(&s, now)
                .ok_or_else(|| crate::Error::Usage(format!("--since {s:?}: {WHEN_HINT}")))?,
        ));
    }
    if deltas {
        let forest: ForestResponse = client.json(client.get("/api/runs/forest").query(&query))?;
        if json {
            writeln!(stdout, "{}", serde_json::to_string(&forest)?)?;
        } else {
            write!(stdout, "{}", render_tree(&forest, Style::detect(), now))?;
        }
        return Ok(());
    }
    if let Some(c) = cursor {
        query.push(("cursor", c));
    }
    let res: ConversationsResponse = client.json(client.get("/api/conversations").query(&query))?;
    print_tree(&mut stdout, &res, json, now)?;
    Ok(())
}

/// The forest as indented trees: machine badge, runtime, turns, age, first prompt.
pub(crate) fn render_tree(forest: &ForestResponse, style: Style, now: OffsetDateTime) -> String {
    let mut out = String::new();
    if forest.trees.is_empty() {
        let _ = writeln!(out, "no runs yet");
    }
    for tree in &forest.trees {
        for t in &tree.runs {
            let r: &RunMeta = &t.run;
            let indent = "  ".repeat(t.depth as usize);
            let branch = if t.depth == 0 { "●" } else { "└" };
            let title = r
                .intent
                .as_deref()
                .map(|i| format!("  {}", one_line(i, 60)))
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "{indent}{branch} {} {} {}{title}",
                style.bold(&format!("[{}]", r.machine)),
                r.agent_runtime.as_str(),
                style.dim(&format!(
                    "{} turns · {} · {}",
                    r.turn_count,
                    age(&r.started_at, now),
                    r.id
                )),
            );
        }
        out.push('\n');
    }
    out
}

/// `kith tree`'s conversations: the JSON document, or the tree as text.
fn print_tree(
    out: &mut impl std::io::Write,
    res: &ConversationsResponse,
    json: bool,
    now: OffsetDateTime,
) -> Result<()> {
    if json {
        writeln!(out, "{}", serde_json::to_string(res)?)?;
    } else {
        write!(
            out,
            "{}",
            conversation::render_tree(res, Style::detect(), now)
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::tests::{meta, NOW, PLAIN};
    use kith_proto::{AgentRuntime, Tree, TreeRun};

    #[test]
    fn tree_indents_each_run_under_its_parent() {
        let run = |depth, id, machine, runtime, turns, intent: Option<&str>| {
            let mut run = meta(id, machine, runtime, "2026-05-11T11:55:00Z");
            run.turn_count = turns;
            run.intent = intent.map(Into::into);
            TreeRun { depth, run }
        };
        let forest = ForestResponse {
            trees: vec![
                Tree {
                    root_run_id: "r1".into(),
                    last_activity_at: "2026-05-11T11:55:00Z".into(),
                    runs: vec![
                        run(
                            0,
                            "r1",
                            "laptop",
                            AgentRuntime::ClaudeCode,
                            12,
                            Some("deploy\nthe cluster"),
                        ),
                        run(1, "r2", "laptop", AgentRuntime::ClaudeCode, 3, None),
                        run(
                            2,
                            "r3",
                            "laptop",
                            AgentRuntime::ClaudeCode,
                            1,
                            Some("check pods"),
                        ),
                        run(1, "r4", "laptop", AgentRuntime::ClaudeCode, 2, None),
                    ],
                },
                Tree {
                    root_run_id: "p1".into(),
                    last_activity_at: "2026-05-11T11:55:00Z".into(),
                    runs: vec![run(
                        0,
                        "p1",
                        "desktop",
                        AgentRuntime::Pi,
                        5,
                        Some("tidy notes"),
                    )],
                },
            ],
        };
        let want = "\
● [laptop] claude-code 12 turns · 5m ago · r1  deploy the cluster
  └ [laptop] claude-code 3 turns · 5m ago · r2
    └ [laptop] claude-code 1 turns · 5m ago · r3  check pods
  └ [laptop] claude-code 2 turns · 5m ago · r4

● [desktop] pi 5 turns · 5m ago · p1  tidy notes

";
        assert_eq!(render_tree(&forest, PLAIN, NOW), want);
        assert_eq!(
            render_tree(&ForestResponse { trees: vec![] }, PLAIN, NOW),
            "no runs yet\n"
        );
    }
}
