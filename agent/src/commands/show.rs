//! `kith show`: a whole conversation with its subagents (`GET
//! /api/conversations/{id}` and its turns, page by page), through the pager
//! on a terminal; one run's lines (`--lines`, the run's JSONL read here); its
//! exact bytes (`--raw`); or one JSON document.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write as _};

use anyhow::{Context, Result};
use kith_proto::{ConversationResponse, ConversationTurn, RunMeta, TurnsResponse};
use time::OffsetDateTime;

use crate::client::{path_part, Client};
use crate::render::conversation;
use crate::render::term::{age, printable, Style};

/// `kith show`'s conversation and how to show it.
#[derive(Debug, clap::Args)]
pub(crate) struct ShowArgs {
    /// A conversation id, one of its run ids, or a unique prefix.
    id: String,
    /// The exact bytes of the conversation's transcript, as captured.
    #[arg(long)]
    raw: bool,
    /// Tool calls with their output, not one line each.
    #[arg(long)]
    tools: bool,
    /// Only these lines of one run's JSONL, like 12-20 (ID is a run id).
    #[arg(long)]
    lines: Option<String>,
    /// The conversation, its subagents and its turns as one JSON document.
    #[arg(long, conflicts_with_all = ["raw", "lines"])]
    pub(crate) json: bool,
    /// Only the turns of one subagent inside the conversation's own
    /// transcript (Copilot CLI): its name or id, as `kith tree` shows.
    #[arg(long, conflicts_with_all = ["raw", "lines"])]
    subagent: Option<String>,
}

pub(crate) fn run(args: ShowArgs, client: &Client) -> Result<()> {
    let ShowArgs {
        id,
        raw,
        tools,
        lines,
        json,
        subagent,
    } = args;
    match lines {
        Some(lines) => run_lines(client, &id, &lines, raw),
        None if raw => {
            let path = format!("/api/conversations/{}/jsonl", path_part(&id));
            std::io::copy(
                &mut client.body(client.get(&path))?,
                &mut std::io::stdout().lock(),
            )?;
            Ok(())
        }
        None => whole(client, &id, tools, json, subagent),
    }
}

/// `--lines`: those lines of one run, as turns or (`--raw`) as captured.
fn run_lines(client: &Client, id: &str, lines: &str, raw: bool) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    let (from, to) = parse_lines(lines)?;
    let bytes = client.bytes(client.get(&format!("/api/runs/{}/jsonl", path_part(id))))?;
    if raw {
        for (i, line) in bytes.split_inclusive(|&b| b == b'\n').enumerate() {
            let n = i as u64 + 1;
            if n >= from && n <= to {
                stdout.write_all(line)?;
            }
        }
        return Ok(());
    }
    let meta: RunMeta = client.json(client.get(&format!("/api/runs/{}", path_part(id))))?;
    let now = OffsetDateTime::now_utc();
    write!(
        stdout,
        "{}",
        render_run(&meta, &bytes, from, to, Style::detect(), now)
    )?;
    Ok(())
}

/// The whole conversation with its subagents (or one inline subagent's
/// turns), paged, or as one JSON document.
fn whole(
    client: &Client,
    id: &str,
    tools: bool,
    json: bool,
    subagent: Option<String>,
) -> Result<()> {
    let mut found: ConversationResponse =
        client.json(client.get(&format!("/api/conversations/{}", path_part(id))))?;
    let main_id = found.conversation.id.clone();
    let mut turns = all_turns(client, &main_id)?;
    if let Some(name) = subagent {
        let agent = conversation::find_inline(&found.conversation, &name)?;
        turns.retain(|t| t.subagent.as_deref() == Some(agent.as_str()));
        found.subagents.clear();
    }
    if json {
        let doc = serde_json::json!({
            "conversation": found.conversation,
            "subagents": found.subagents,
            "turns": turns,
        });
        writeln!(std::io::stdout().lock(), "{doc}")?;
        return Ok(());
    }
    let mut subs = Vec::new();
    for sub in &found.subagents {
        let parent_run = match sub.run_ids.first() {
            Some(run) => {
                client
                    .json::<RunMeta>(client.get(&format!("/api/runs/{run}")))?
                    .parent_run_id
            }
            None => None,
        };
        subs.push((sub, all_turns(client, &sub.id)?, parent_run));
    }
    let reads: Vec<conversation::Read<'_>> = subs
        .iter()
        .map(|(c, turns, parent)| conversation::Read {
            conversation: c,
            turns,
            parent_run: parent.as_deref(),
        })
        .collect();
    let text = conversation::render_show(
        &conversation::Read {
            conversation: &found.conversation,
            turns: &turns,
            parent_run: None,
        },
        &reads,
        conversation::ShowOptions { tools },
        Style::detect(),
        OffsetDateTime::now_utc(),
    );
    page(&text)
}

/// Every turn of one conversation, page by page.
fn all_turns(client: &Client, id: &str) -> Result<Vec<ConversationTurn>> {
    let mut turns = Vec::new();
    let mut offset = 0;
    loop {
        let page: TurnsResponse = client.json(
            client
                .get(&format!("/api/conversations/{}/turns", path_part(id)))
                .query(&[("offset", offset.to_string()), ("limit", "1000".to_owned())]),
        )?;
        turns.extend(page.turns);
        match page.next_offset {
            Some(next) if next > offset => offset = next,
            _ => return Ok(turns),
        }
    }
}

/// Long text through the pager when stdout is a terminal (`$PAGER`, else
/// `less -R`, as git does); straight to stdout otherwise.
fn page(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    if !stdout.is_terminal() {
        stdout.write_all(text.as_bytes())?;
        return Ok(());
    }
    let pager = std::env::var("PAGER")
        .ok()
        .filter(|p| !p.trim().is_empty())
        .unwrap_or_else(|| "less -R".to_owned());
    let mut words = pager.split_whitespace();
    let child = words.next().map(|program| {
        std::process::Command::new(program)
            .args(words)
            .env(
                "LESS",
                std::env::var("LESS").unwrap_or_else(|_| "FRX".to_owned()),
            )
            .stdin(std::process::Stdio::piped())
            .spawn()
    });
    match child {
        Some(Ok(mut child)) => {
            if let Some(mut input) = child.stdin.take() {
                // The person may quit the pager before the end: not an error.
                let _ = input.write_all(text.as_bytes());
            }
            child.wait()?;
        }
        _ => stdout.write_all(text.as_bytes())?,
    }
    Ok(())
}

/// `A-B` (1-based, inclusive) or a single line `A`.
fn parse_lines(s: &str) -> Result<(u64, u64)> {
    let parse = |v: &str| v.trim().parse::<u64>().ok().filter(|n| *n >= 1);
    let range = match s.split_once('-') {
        Some((a, b)) => parse(a).zip(parse(b)).filter(|(a, b)| a <= b),
        None => parse(s).map(|a| (a, a)),
    };
    range.with_context(|| format!("--lines {s:?}: use A-B with 1 <= A <= B"))
}

/// A run's turns, readable: a header, then each turn with its line range.
pub(crate) fn render_run(
    meta: &RunMeta,
    bytes: &[u8],
    from: u64,
    to: u64,
    style: Style,
    now: OffsetDateTime,
) -> String {
    let format = kith_shared::transcript::Format::of(meta.agent_runtime);
    let parsed = kith_shared::transcript::parse(format, bytes);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} {} {}",
        style.bold(&format!("[{}]", meta.machine)),
        meta.agent_runtime.as_str(),
        style.dim(&format!(
            "{} · {} · {} turns · {}",
            meta.model.as_deref().unwrap_or("model?"),
            age(&meta.started_at, now),
            meta.turn_count,
            meta.cwd.as_deref().unwrap_or("")
        ))
    );
    for turn in parsed
        .turns
        .iter()
        .filter(|t| t.line_end >= from && t.line_start <= to)
    {
        let _ = writeln!(
            out,
            "\n{} {}",
            style.bold(turn.role.as_str()),
            style.dim(&format!("L{}-{}", turn.line_start, turn.line_end))
        );
        let _ = writeln!(out, "{}", printable(turn.text.trim_end()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::tests::{meta, NOW, PLAIN};
    use crate::render::term::tests::assert_only_own_styling;
    use kith_proto::AgentRuntime;

    /// Regression: central's text reached the terminal raw (see
    /// `render::term`), here in `kith show --lines`: the turns of a
    /// transcript, and the run's facts.
    #[test]
    fn show_shows_control_characters_from_central_not_obeys_them() {
        let mut run = meta(
            "r1",
            "lap\x07top",
            AgentRuntime::ClaudeCode,
            "2026-05-11T11:00:00Z",
        );
        run.cwd = Some("/home/\x1b[2J".into());
        let bytes = format!(
            "{}\n",
            serde_json::json!({"type": "user", "timestamp": "2026-05-11T11:00:00Z",
                "message": {"role": "user", "content": "one\r\ntwo \u{1b}]52;c;aGk=\u{7}"}})
        );
        let out = render_run(&run, bytes.as_bytes(), 1, 1, Style { color: true }, NOW);
        assert!(out.contains("[lap\\u{7}top]"), "{out:?}");
        assert!(out.contains("/home/\\u{1b}[2J"), "{out:?}");
        assert!(
            out.ends_with("\none\ntwo \\u{1b}]52;c;aGk=\\u{7}\n"),
            "{out:?}"
        );
        assert_only_own_styling(&out);
    }

    /// A Claude Code transcript: a question, a two-line answer, a follow-up.
    fn claude_lines() -> Vec<u8> {
        let line = |v: serde_json::Value| format!("{v}\n");
        [
            line(
                serde_json::json!({"type": "user", "timestamp": "2026-05-11T11:00:00Z",
                "message": {"role": "user", "content": "why is the build red?"}}),
            ),
            line(
                serde_json::json!({"type": "assistant", "timestamp": "2026-05-11T11:00:05Z",
                "message": {"id": "m1", "role": "assistant", "model": "claude-x",
                    "content": [{"type": "text", "text": "A test times out."}]}}),
            ),
            line(
                serde_json::json!({"type": "user", "timestamp": "2026-05-11T11:01:00Z",
                "message": {"role": "user", "content": "fix it  \n"}}),
            ),
        ]
        .concat()
        .into_bytes()
    }

    #[test]
    fn show_renders_the_turns_in_the_asked_lines() {
        let mut run = meta(
            "r1",
            "laptop",
            AgentRuntime::ClaudeCode,
            "2026-05-11T11:00:00Z",
        );
        run.model = Some("claude-x".into());
        run.turn_count = 3;
        run.cwd = Some("/home/alice/proj".into());
        let bytes = claude_lines();
        let header = "[laptop] claude-code claude-x · 1h ago · 3 turns · /home/alice/proj\n";
        let cases: &[((u64, u64), &str)] = &[
            (
                (1, u64::MAX),
                "\nuser L1-1\nwhy is the build red?\n\nassistant L2-2\nA test times out.\n\nuser L3-3\nfix it\n",
            ),
            ((2, 2), "\nassistant L2-2\nA test times out.\n"),
            ((3, 9), "\nuser L3-3\nfix it\n"),
            ((4, 9), ""),
        ];
        for ((from, to), turns) in cases {
            let out = render_run(&run, &bytes, *from, *to, PLAIN, NOW);
            assert_eq!(out, format!("{header}{turns}"), "--lines {from}-{to}");
        }
        run.model = None;
        run.cwd = None;
        let out = render_run(&run, b"", 1, u64::MAX, PLAIN, NOW);
        assert_eq!(out, "[laptop] claude-code model? · 1h ago · 3 turns · \n");
    }

    #[test]
    fn lines_take_a_range_or_one_line_and_refuse_the_rest() {
        let cases: &[(&str, Option<(u64, u64)>)] = &[
            ("12-20", Some((12, 20))),
            ("7", Some((7, 7))),
            ("3-3", Some((3, 3))),
            (" 4 - 5 ", Some((4, 5))),
            ("1-18446744073709551615", Some((1, u64::MAX))),
            ("0", None),
            ("0-5", None),
            ("20-12", None),
            ("", None),
            ("-", None),
            ("-5", None),
            ("5-", None),
            ("1-2-3", None),
            ("a-b", None),
            ("twelve", None),
            ("18446744073709551616", None),
            ("1-99999999999999999999", None),
        ];
        for (input, want) in cases {
            match (parse_lines(input), want) {
                (Ok(got), Some(want)) => assert_eq!(got, *want, "{input:?}"),
                (Err(e), None) => assert!(
                    e.to_string().contains("use A-B with 1 <= A <= B"),
                    "{input:?}: {e}"
                ),
                (got, want) => panic!("{input:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
