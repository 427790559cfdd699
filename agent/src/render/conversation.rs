//! Conversations in a terminal: `kith show` (one conversation, its turns in
//! order across every delta, subagents inline and indented), `kith tree`
//! (one line per conversation, subagents under it) and `kith search`'s
//! hits by conversation. Pure renderers over central's answers.

use std::fmt::Write as _;

use anyhow::{bail, Result};
use kith_proto::{
    Conversation, ConversationTurn, ConversationsResponse, InlineSubagent, SearchResponse,
};
use kith_shared::transcript::DiffLineKind;
use time::OffsetDateTime;

use super::term::{age, one_line, printable, Style};

/// Characters of an id shown where a person can copy it (git's short ids).
pub(crate) const SHORT_ID: usize = 12;

pub(crate) fn short(id: &str) -> &str {
    id.get(..SHORT_ID).unwrap_or(id)
}

/// One conversation of a `kith show`, with the turns central gave for it.
pub(crate) struct Read<'a> {
    pub(crate) conversation: &'a Conversation,
    pub(crate) turns: &'a [ConversationTurn],
    /// The run its first delta hangs under (a subagent's place in its parent).
    pub(crate) parent_run: Option<&'a str>,
}

/// How much of each turn `kith show` prints.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ShowOptions {
    /// Tool calls with their output, not one line each.
    pub(crate) tools: bool,
}

/// A whole conversation: a header, then its turns in order; each subagent
/// conversation indented right after the turns of the delta that spawned it.
pub(crate) fn render_show(
    main: &Read<'_>,
    subagents: &[Read<'_>],
    options: ShowOptions,
    style: Style,
    now: OffsetDateTime,
) -> String {
    let mut out = String::new();
    header(&mut out, main.conversation, style, now);
    let mut placed = vec![false; subagents.len()];
    let mut turns = main.turns.iter().zip(1..).peekable();
    let mut inside = None;
    let mut machine = main.turns.first().and_then(|t| t.machine.as_deref());
    while let Some((turn, number)) = turns.next() {
        moved(&mut out, turn, &mut machine, style);
        let depth = enter(
            &mut out,
            turn,
            &mut inside,
            &main.conversation.inline_subagents,
            style,
        );
        render_turn(&mut out, turn, Some(number), options, style, depth);
        let last_of_run = turns
            .peek()
            .is_none_or(|(next, _)| next.run_id != turn.run_id);
        if !last_of_run {
            continue;
        }
        for (i, sub) in subagents.iter().enumerate() {
            if !placed[i] && sub.parent_run == Some(turn.run_id.as_str()) {
                placed[i] = true;
                render_subagent(&mut out, sub, options, style, now);
            }
        }
    }
    // Subagents whose parent delta is not among the turns shown.
    for (i, sub) in subagents.iter().enumerate() {
        if !placed[i] {
            render_subagent(&mut out, sub, options, style, now);
        }
    }
    out
}

/// Turns alone, uncoloured, as `kith show` prints them (for `kith mcp`);
/// `inline` names the conversation's inline subagents.
pub(crate) fn render_turns(
    turns: &[ConversationTurn],
    inline: &[InlineSubagent],
    options: ShowOptions,
) -> String {
    let mut out = String::new();
    let style = Style { color: false };
    let mut inside = None;
    let mut machine = turns.first().and_then(|t| t.machine.as_deref());
    for turn in turns {
        moved(&mut out, turn, &mut machine, style);
        let depth = enter(&mut out, turn, &mut inside, inline, style);
        render_turn(&mut out, turn, None, options, style, depth);
    }
    out
}

/// Before `turn`: a line saying the conversation moved to another machine
/// (`kith resume`) when its machine is not the last turn's.
fn moved<'a>(
    out: &mut String,
    turn: &'a ConversationTurn,
    machine: &mut Option<&'a str>,
    style: Style,
) {
    let Some(now) = turn.machine.as_deref() else {
        return;
    };
    if machine.is_some_and(|m| m != now) {
        let _ = writeln!(out, "\n{}", style.bold(&format!("⇢ continued on {now}")));
    }
    *machine = Some(now);
}

/// Before `turn`: a line naming the inline subagent whose turns start
/// here, or saying they ended (`inside` is the one the last turn was in).
/// Returns the turn's depth: a subagent's turns are indented once.
fn enter<'a>(
    out: &mut String,
    turn: &'a ConversationTurn,
    inside: &mut Option<&'a str>,
    inline: &[InlineSubagent],
    style: Style,
) -> usize {
    let agent = turn.subagent.as_deref();
    if let Some(id) = agent.filter(|_| agent != *inside) {
        let s = inline.iter().find(|s| s.id == id);
        let _ = writeln!(
            out,
            "\n  {} {}",
            style.bold(&format!("▸ subagent {}", inline_name(s, id))),
            style.dim(s.and_then(|s| s.description.as_deref()).unwrap_or(""))
        );
    } else if agent.is_none() && inside.is_some() {
        let _ = writeln!(out, "\n  {}", style.dim("◂ back in the session"));
    }
    *inside = agent;
    usize::from(agent.is_some())
}

fn render_subagent(
    out: &mut String,
    sub: &Read<'_>,
    options: ShowOptions,
    style: Style,
    now: OffsetDateTime,
) {
    let depth = sub.conversation.depth.max(1) as usize;
    let pad = "  ".repeat(depth);
    let _ = writeln!(
        out,
        "\n{pad}{} {}  {}",
        style.bold("▸ subagent"),
        style.bold(&title_of(sub.conversation)),
        style.dim(&format!(
            "{} · {} turns · {}",
            age(&sub.conversation.started_at, now),
            sub.conversation.turn_count,
            short(&sub.conversation.id)
        ))
    );
    for (turn, number) in sub.turns.iter().zip(1..) {
        render_turn(out, turn, Some(number), options, style, depth);
    }
}

fn header(out: &mut String, c: &Conversation, style: Style, now: OffsetDateTime) {
    let _ = writeln!(out, "{}", style.bold(&title_of(c)));
    let agent = match &c.model {
        Some(model) => format!("{} {model}", c.agent_runtime.as_str()),
        None => c.agent_runtime.as_str().to_owned(),
    };
    let mut facts = vec![
        format!("[{}] {agent}", c.machines_shown()),
        c.owner.clone(),
        format!(
            "{} turns in {} deltas · started {} · last {}",
            c.turn_count,
            c.delta_count,
            age(&c.started_at, now),
            age(&c.last_activity_at, now)
        ),
    ];
    if let Some(cwd) = &c.cwd {
        facts.push(match &c.git_branch {
            Some(b) => format!("{cwd} ({b})"),
            None => cwd.clone(),
        });
    }
    if !c.tags.is_empty() {
        facts.push(hashtags(&c.tags));
    }
    if let Some(f) = &c.forked_from {
        facts.push(format!(
            "forked from {}'s {}",
            f.owner,
            short(&f.conversation_id)
        ));
    }
    let _ = writeln!(out, "{}", style.dim(&facts.join(" · ")));
    let _ = writeln!(
        out,
        "{}",
        style.dim(&format!(
            "conversation {}{}",
            c.id,
            c.session_id
                .as_deref()
                .map(|s| format!(
                    " · resume: {} (on another machine: kith resume {})",
                    resume_hint(c, s),
                    short(&c.id)
                ))
                .unwrap_or_default()
        ))
    );
}

/// What continues this session in its own agent.
pub(crate) fn resume_hint(c: &Conversation, session: &str) -> String {
    match c.agent_runtime {
        kith_proto::AgentRuntime::ClaudeCode => format!("claude --resume {session}"),
        kith_proto::AgentRuntime::Codex => format!("codex resume {session}"),
        kith_proto::AgentRuntime::Pi => format!("pi --session {session}"),
        kith_proto::AgentRuntime::Gemini => format!("gemini --resume {session}"),
        kith_proto::AgentRuntime::Copilot => format!("copilot --resume {session}"),
        kith_proto::AgentRuntime::Cursor => format!("cursor-agent --resume {session}"),
        kith_proto::AgentRuntime::OpenCode => format!("opencode --session {session}"),
        kith_proto::AgentRuntime::Aider | kith_proto::AgentRuntime::Other => session.to_owned(),
    }
}

/// One turn, labelled with its `number` in the conversation (a person's
/// reference, the same across deltas) or, without one, with its delta and
/// lines (what `kith mcp` cites).
fn render_turn(
    out: &mut String,
    turn: &ConversationTurn,
    number: Option<u64>,
    options: ShowOptions,
    style: Style,
    depth: usize,
) {
    let pad = "  ".repeat(depth);
    match (&turn.tool, turn.role.as_str()) {
        (_, "gap") => {
            let _ = writeln!(out, "\n{pad}{}", style.dim(&format!("… {} …", turn.text)));
        }
        (Some(tool), _) if !options.tools => {
            let _ = writeln!(
                out,
                "{pad}{}",
                style.dim(&format!(
                    "  ⚙ {}: {}{}",
                    tool.name,
                    one_line(&tool.input, 100),
                    tool.diff.as_deref().map(diff_stat).unwrap_or_default()
                ))
            );
        }
        _ => {
            let label = match number {
                Some(n) => format!("#{n}"),
                None => format!(
                    "{} L{}-{}",
                    short_run(&turn.run_id),
                    turn.line_start,
                    turn.line_end
                ),
            };
            let _ = writeln!(
                out,
                "\n{pad}{} {}",
                style.bold(&turn.role),
                style.dim(&label)
            );
            match turn
                .tool
                .as_ref()
                .and_then(|t| Some((t, t.diff.as_deref()?)))
            {
                // A change to files reads as its diff, then what the tool said.
                Some((tool, diff)) => {
                    let call = turn.text.lines().next().unwrap_or_default();
                    let _ = writeln!(out, "{pad}{}", printable(call));
                    for line in diff.lines() {
                        let line = match DiffLineKind::of(line) {
                            DiffLineKind::File => style.bold(line),
                            DiffLineKind::Added => style.added(line),
                            DiffLineKind::Removed => style.removed(line),
                            DiffLineKind::Hunk | DiffLineKind::Same => printable(line).into_owned(),
                        };
                        let _ = writeln!(out, "{pad}{line}");
                    }
                    for line in printable(tool.output.trim_end()).lines() {
                        let _ = writeln!(out, "{pad}{line}");
                    }
                }
                None => {
                    for line in printable(turn.text.trim_end()).lines() {
                        let _ = writeln!(out, "{pad}{line}");
                    }
                }
            }
        }
    }
}

/// ` (+3 −1)`: the lines a diff adds and removes.
fn diff_stat(diff: &str) -> String {
    let count = |kind| diff.lines().filter(|l| DiffLineKind::of(l) == kind).count();
    format!(
        " (+{} −{})",
        count(DiffLineKind::Added),
        count(DiffLineKind::Removed)
    )
}

fn short_run(run_id: &str) -> String {
    // Run ids begin with their time: the end tells them apart.
    let tail = run_id
        .get(run_id.len().saturating_sub(8)..)
        .unwrap_or(run_id);
    format!("…{tail}")
}

/// A subagent inside a conversation's transcript as a person names it.
fn inline_name(s: Option<&InlineSubagent>, id: &str) -> String {
    s.and_then(|s| s.name.clone())
        .unwrap_or_else(|| short(id).to_owned())
}

/// The id of the inline subagent of `c` that `name` names: its id, a prefix
/// of its id, or its name when only one has that name.
pub(crate) fn find_inline(c: &Conversation, name: &str) -> Result<String> {
    let all = &c.inline_subagents;
    let by_id: Vec<&InlineSubagent> = all.iter().filter(|s| s.id.starts_with(name)).collect();
    let by_name: Vec<&InlineSubagent> = all
        .iter()
        .filter(|s| s.name.as_deref() == Some(name))
        .collect();
    match (&by_id[..], &by_name[..]) {
        ([s], _) | ([], [s]) => Ok(s.id.clone()),
        _ if all.is_empty() => bail!("conversation {} has no subagents inside it", c.id),
        _ => bail!(
            "{name:?} names no single subagent of conversation {}; its subagents: {}",
            c.id,
            all.iter()
                .map(|s| format!("{} ({})", inline_name(Some(s), &s.id), s.id))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn title_of(c: &Conversation) -> String {
    c.title
        .as_deref()
        .map(|t| one_line(t, 80))
        .unwrap_or_else(|| "(no prompt)".to_owned())
}

/// `kith tree`: one line per conversation, its subagents indented under it.
pub(crate) fn render_tree(
    res: &ConversationsResponse,
    style: Style,
    now: OffsetDateTime,
) -> String {
    let mut out = String::new();
    if res.conversations.is_empty() {
        let _ = writeln!(out, "no conversations yet");
    }
    for (i, c) in res.conversations.iter().enumerate() {
        if c.depth == 0 && i > 0 {
            out.push('\n');
        }
        let indent = "  ".repeat(c.depth as usize);
        let mark = if c.depth == 0 { "●" } else { "└" };
        let _ = writeln!(
            out,
            "{indent}{mark} {} {}  {}",
            style.bold(&format!("[{}]", c.machines_shown())),
            style.bold(&title_of(c)),
            style.dim(&format!(
                "{}{}{} · {} turns · {} · {}{}",
                c.agent_runtime.as_str(),
                c.model
                    .as_deref()
                    .map(|m| format!(" {m}"))
                    .unwrap_or_default(),
                c.git_branch
                    .as_deref()
                    .map(|b| format!(" ({b})"))
                    .unwrap_or_default(),
                c.turn_count,
                span(&c.started_at, &c.last_activity_at, now),
                short(&c.id),
                tags_suffix(&c.tags)
            ))
        );
        for s in &c.inline_subagents {
            let start = s.started_at.as_deref().unwrap_or(&c.started_at);
            let _ = writeln!(
                out,
                "{indent}  └ {} {}  {}",
                style.bold(&format!("▸ {}", inline_name(Some(s), &s.id))),
                one_line(s.description.as_deref().unwrap_or(""), 80),
                style.dim(&format!(
                    "subagent · {} turns · {} · --subagent {}",
                    s.turn_count,
                    span(start, s.ended_at.as_deref().unwrap_or(start), now),
                    short(&s.id)
                ))
            );
        }
    }
    if let Some(cursor) = &res.next_cursor {
        let _ = writeln!(out, "\n{}", style.dim(&format!("more: --cursor {cursor}")));
    }
    out
}

/// Tags as a person reads them: `#work #acme`.
fn hashtags(tags: &[String]) -> String {
    tags.iter()
        .map(|t| format!("#{t}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// ` · #work #acme`, or nothing without tags.
fn tags_suffix(tags: &[String]) -> String {
    if tags.is_empty() {
        String::new()
    } else {
        format!(" · {}", hashtags(tags))
    }
}

fn span(start: &str, end: &str, now: OffsetDateTime) -> String {
    let (a, b) = (age(start, now), age(end, now));
    if a == b {
        a
    } else {
        format!("{} → {b}", a.trim_end_matches(" ago"))
    }
}

/// `kith search` by conversation: title, owner when not you, where and when,
/// the best hits with their lines, and the command that reads it.
pub(crate) fn render_groups(
    res: &SearchResponse,
    me: Option<&str>,
    style: Style,
    now: OffsetDateTime,
) -> String {
    let mut out = String::new();
    if let Some(why) = &res.degraded {
        let _ = writeln!(out, "{}", style.dim(&format!("note: {why}")));
    }
    if res.groups.is_empty() {
        let _ = writeln!(out, "no matches");
        return out;
    }
    for g in &res.groups {
        let title = g
            .title
            .as_deref()
            .map(|t| one_line(t, 70))
            .unwrap_or_else(|| "(no prompt)".into());
        let owner = if me == Some(g.owner.as_str()) {
            String::new()
        } else {
            format!("{} · ", g.owner)
        };
        let place = match (&g.cwd, &g.git_branch) {
            (Some(cwd), Some(branch)) => format!(" · {cwd} ({branch})"),
            (Some(cwd), None) => format!(" · {cwd}"),
            (None, Some(branch)) => format!(" · ({branch})"),
            (None, None) => String::new(),
        };
        let model = g
            .model
            .as_deref()
            .map(|m| format!(" {m}"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "{} {}  {}",
            style.bold(&format!("[{}]", g.machine)),
            style.bold(&title),
            style.dim(&format!(
                "{owner}{}{model} · {}{place}{}{}",
                g.agent_runtime.as_str(),
                age(&g.last_activity_at, now),
                tags_suffix(&g.tags),
                if g.weak { " · weak" } else { "" }
            )),
        );
        for hit in &g.hits {
            let within = hit
                .subagent
                .as_ref()
                .map(|s| {
                    let name = s.name.clone().unwrap_or_else(|| short(&s.id).to_owned());
                    style.dim(&format!("[subagent {name}] "))
                })
                .unwrap_or_default();
            let _ = writeln!(
                out,
                "  {} {within}{}",
                style.dim(&format!("{:>9}:", hit.role)),
                style.highlight(&one_line(&hit.snippet, 200)),
            );
        }
        let resume = g
            .session_id
            .as_deref()
            .map(|s| format!("  ({s})"))
            .unwrap_or_default();
        let _ = writeln!(
            out,
            "  {}\n",
            style.dim(&format!("kith show {}{resume}", short(&g.conversation_id)))
        );
    }
    let _ = writeln!(
        out,
        "{}",
        style.dim(&format!(
            "{} conversation{} in {:.0} ms ({})",
            res.groups.len(),
            if res.groups.len() == 1 { "" } else { "s" },
            res.timing.total_ms,
            res.backend
        ))
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_proto::{AgentRuntime, ToolCall};
    use time::macros::datetime;

    const NOW: OffsetDateTime = datetime!(2026-03-01 12:00 UTC);

    fn conversation(id: &str, title: &str, depth: u32) -> Conversation {
        Conversation {
            id: id.into(),
            title: Some(title.into()),
            owner: "alice.test".into(),
            machine: "laptop".into(),
            machines: vec!["laptop".into()],
            forked_from: None,
            agent_runtime: AgentRuntime::ClaudeCode,
            session_id: Some("s-1".into()),
            cwd: Some("/home/alice/proj".into()),
            git_branch: Some("main".into()),
            model: None,
            started_at: "2026-03-01T10:00:00.000Z".into(),
            last_activity_at: "2026-03-01T11:00:00.000Z".into(),
            turn_count: 3,
            delta_count: 2,
            parent_id: None,
            depth,
            files_touched: vec![],
            tools_used: vec![],
            commands: vec![],
            tags: vec![],
            run_ids: vec![],
            inline_subagents: vec![],
        }
    }

    fn turn(run: &str, role: &str, text: &str) -> ConversationTurn {
        ConversationTurn {
            run_id: run.into(),
            line_start: 1,
            line_end: 1,
            role: role.into(),
            text: text.into(),
            timestamp: None,
            tool: (role == "tool").then(|| ToolCall {
                name: "Bash".into(),
                input: "cargo test".into(),
                output: "test result: ok".into(),
                diff: None,
            }),
            subagent: None,
            machine: None,
        }
    }

    #[test]
    fn show_reads_every_turn_with_tools_on_one_line_and_subagents_in_place() {
        let main = conversation("c0123456789abcdef", "fix the parser", 0);
        let sub = conversation("c9999", "look for callers", 1);
        let main_turns = [
            turn("r1", "user", "fix the parser"),
            turn("r1", "tool", "Bash: cargo test\ntest result: ok"),
            turn("r2", "assistant", "the last turn: done"),
        ];
        let sub_turns = [turn("s1", "assistant", "three callers found")];
        let text = render_show(
            &Read {
                conversation: &main,
                turns: &main_turns,
                parent_run: None,
            },
            &[Read {
                conversation: &sub,
                turns: &sub_turns,
                parent_run: Some("r1"),
            }],
            ShowOptions::default(),
            Style { color: false },
            NOW,
        );
        assert!(text.starts_with("fix the parser\n"), "{text}");
        assert!(text.contains("claude --resume s-1"), "{text}");
        assert!(text.contains("⚙ Bash: cargo test"), "{text}");
        assert!(
            !text.contains("test result: ok"),
            "tool output collapsed: {text}"
        );
        // The subagent sits after r1's turns, before r2's, indented.
        let sub_at = text.find("  ▸ subagent look for callers");
        let last_at = text.find("the last turn: done");
        assert!(sub_at.is_some() && sub_at < last_at, "{text}");
        assert!(text.contains("  three callers found"), "{text}");
        // Turns are numbered through the conversation, not by delta lines.
        assert!(text.contains("assistant #3\nthe last turn: done"), "{text}");
        assert!(
            text.contains("user #1\n") && !text.contains("L1-1"),
            "{text}"
        );

        let expanded = render_show(
            &Read {
                conversation: &main,
                turns: &main_turns,
                parent_run: None,
            },
            &[],
            ShowOptions { tools: true },
            Style { color: false },
            NOW,
        );
        assert!(expanded.contains("test result: ok"), "{expanded}");
    }

    /// An edit reads as its diff, coloured on a terminal, then the tool's
    /// answer once.
    #[test]
    fn show_with_tools_prints_an_edit_as_its_diff() {
        let main = conversation("c0123456789abcdef", "fix the parser", 0);
        let mut edit = turn("r1", "tool", "Edit: src/a.rs\napplied once");
        edit.tool = Some(ToolCall {
            name: "Edit".into(),
            input: "src/a.rs".into(),
            output: "applied once".into(),
            diff: Some("--- a/src/a.rs\n+++ b/src/a.rs\n-let n = 1;\n+let n = 2;\n keep".into()),
        });
        let read = Read {
            conversation: &main,
            turns: std::slice::from_ref(&edit),
            parent_run: None,
        };
        let tools = ShowOptions { tools: true };
        let text = render_show(&read, &[], tools, Style { color: false }, NOW);
        assert!(
            text.contains("Edit: src/a.rs\n--- a/src/a.rs\n+++ b/src/a.rs\n-let n = 1;\n+let n = 2;\n keep\napplied once\n"),
            "{text}"
        );
        assert_eq!(text.matches("applied once").count(), 1, "{text}");
        let colored = render_show(&read, &[], tools, Style { color: true }, NOW);
        assert!(colored.contains("\x1b[31m-let n = 1;\x1b[0m"), "{colored}");
        assert!(colored.contains("\x1b[32m+let n = 2;\x1b[0m"), "{colored}");
        crate::render::term::tests::assert_only_own_styling(&colored);
        let folded = render_show(
            &read,
            &[],
            ShowOptions::default(),
            Style { color: false },
            NOW,
        );
        assert!(!folded.contains("let n"), "{folded}");
        assert!(folded.contains("⚙ Edit: src/a.rs (+1 −1)"), "{folded}");
    }

    #[test]
    fn tree_is_one_line_per_conversation_with_subagents_under_it() {
        let res = ConversationsResponse {
            conversations: vec![
                conversation("c0123456789abcdef", "fix the parser", 0),
                conversation("c1111111111111111", "look for callers", 1),
                conversation("c2222222222222222", "write docs", 0),
            ],
            next_cursor: None,
        };
        let text = render_tree(&res, Style { color: false }, NOW);
        let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("● [laptop] fix the parser"), "{text}");
        assert!(
            lines[1].starts_with("  └ [laptop] look for callers"),
            "{text}"
        );
        assert!(lines[0].contains("c0123456789a") && !lines[0].contains("c0123456789ab"));
        assert!(lines[0].contains("2h → 1h ago"), "{text}");
        // The agent's model and branch, when known.
        assert!(lines[0].contains("claude-code (main) · 3 turns"), "{text}");
        let mut c = conversation("c0123456789abcdef", "fix the parser", 0);
        (c.model, c.git_branch) = (Some("claude-x".into()), None);
        let one = ConversationsResponse {
            conversations: vec![c],
            next_cursor: None,
        };
        let text = render_tree(&one, Style { color: false }, NOW);
        assert!(text.contains("claude-code claude-x · "), "{text}");
        assert!(!text.contains("(main)"), "{text}");
    }

    fn inline(id: &str, name: Option<&str>) -> InlineSubagent {
        InlineSubagent {
            id: id.into(),
            name: name.map(Into::into),
            description: Some("list the callers".into()),
            turn_count: 4,
            started_at: Some("2026-03-01T10:30:00.000Z".into()),
            ended_at: Some("2026-03-01T11:00:00.000Z".into()),
        }
    }

    /// A subagent inside its session's transcript is a node under it, and
    /// `--subagent` names it by name, id or id prefix.
    #[test]
    fn inline_subagents_are_nodes_under_their_conversation() {
        let mut main = conversation("c0123456789abcdef", "fix the parser", 0);
        main.inline_subagents = vec![
            inline("toolu_01abc", Some("explore")),
            inline("toolu_02def", None),
        ];
        let res = ConversationsResponse {
            conversations: vec![main.clone()],
            next_cursor: None,
        };
        let text = render_tree(&res, Style { color: false }, NOW);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(lines[0].starts_with("● [laptop] fix the parser"), "{text}");
        assert_eq!(
            lines[1],
            "  └ ▸ explore list the callers  subagent · 4 turns · 1h ago · --subagent toolu_01abc"
        );
        assert!(lines[2].starts_with("  └ ▸ toolu_02def "), "{text}");
        for (name, id) in [
            ("explore", "toolu_01abc"),
            ("toolu_01", "toolu_01abc"),
            ("toolu_02def", "toolu_02def"),
        ] {
            assert_eq!(find_inline(&main, name).ok().as_deref(), Some(id), "{name}");
        }
        let unknown = find_inline(&main, "toolu_0").map_err(|e| e.to_string());
        assert!(
            unknown
                .as_ref()
                .is_err_and(|e| e.contains("explore (toolu_01abc)")),
            "{unknown:?}"
        );
        let none = conversation("c9", "plain", 0);
        assert!(find_inline(&none, "explore").is_err());
    }

    /// An inline subagent's turns read under a line naming it, indented,
    /// and the session's own turns after them say so.
    #[test]
    fn inline_subagent_turns_are_marked_where_they_run() {
        let mut mine = turn("r1", "assistant", "looking");
        mine.subagent = Some("toolu_01abc".into());
        let turns = [
            turn("r1", "user", "why twice?"),
            mine.clone(),
            mine,
            turn("r1", "assistant", "fixed"),
        ];
        let text = render_turns(
            &turns,
            &[inline("toolu_01abc", Some("explore"))],
            ShowOptions::default(),
        );
        assert_eq!(
            text,
            "\nuser …r1 L1-1\nwhy twice?\n\
             \n  ▸ subagent explore list the callers\n\
             \n  assistant …r1 L1-1\n  looking\n\
             \n  assistant …r1 L1-1\n  looking\n\
             \n  ◂ back in the session\n\
             \nassistant …r1 L1-1\nfixed\n"
        );
    }

    /// Regression: `kith show` and `kith tree` printed a transcript's text,
    /// titles, machine names and folders raw, so the terminal obeyed the
    /// escapes in them (`ESC ] 52` sets the clipboard).
    #[test]
    fn show_and_tree_print_control_characters_as_text() {
        let clip = "\x1b]52;c;aGk=\x07";
        let shown = "\\u{1b}]52;c;aGk=\\u{7}";
        let mut main = conversation("c0123456789abcdef", &format!("fix {clip}"), 0);
        main.machine = format!("lap{clip}");
        main.cwd = Some(format!("/home/{clip}"));
        main.tags = vec![format!("t{clip}")];
        let mut sub = inline("toolu_01abc", Some("explore"));
        sub.description = Some(format!("list {clip}"));
        main.inline_subagents = vec![sub];
        let mut inside = turn("r1", "assistant", "found");
        inside.subagent = Some("toolu_01abc".into());
        let turns = [
            turn(
                "r1",
                "user",
                &format!("first line\r\nsecond \x1b[2J line{clip}"),
            ),
            turn("r1", "tool", "ran"),
            inside,
        ];
        let style = Style { color: true };
        let text = render_show(
            &Read {
                conversation: &main,
                turns: &turns,
                parent_run: None,
            },
            &[],
            ShowOptions::default(),
            style,
            NOW,
        );
        let tree = render_tree(
            &ConversationsResponse {
                conversations: vec![main],
                next_cursor: None,
            },
            style,
            NOW,
        );
        for out in [&text, &tree] {
            let plain = ["\x1b[0m", "\x1b[1m", "\x1b[2m"]
                .iter()
                .fold(out.to_string(), |o, code| o.replace(code, ""));
            assert!(
                !plain.chars().any(|c| c.is_control() && c != '\n'),
                "only kith's own styling is obeyed: {plain:?}"
            );
            assert!(out.contains("\x1b[1m"), "kith's styling stays: {out:?}");
        }
        assert!(
            text.starts_with(&format!("\x1b[1mfix {shown}\x1b[0m\n")),
            "{text:?}"
        );
        for fact in [
            format!("[lap{shown}]"),
            format!("/home/{shown} (main)"),
            format!("#t{shown}"),
            format!("list {shown}"),
            format!("\nfirst line\nsecond \\u{{1b}}[2J line{shown}\n"),
        ] {
            assert!(text.contains(&fact), "{fact:?} in {text:?}");
        }
        assert!(tree.contains(&format!("list {shown}")), "{tree:?}");
    }

    #[test]
    fn search_groups_name_the_owner_only_when_it_is_someone_else() {
        let hit = |run: &str, owner: &str| kith_proto::SearchHit {
            run_id: run.into(),
            chunk_id: format!("{run}-0"),
            score: 1.0,
            role: "user".into(),
            text: "the printer".into(),
            snippet: "set up «printer»".into(),
            line_start: 1,
            line_end: 2,
            started_at: "2026-03-01T10:00:00.000Z".into(),
            intent: None,
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::ClaudeCode,
            conversation_id: None,
            owner: owner.into(),
            subagent: None,
            weak: false,
            coverage: 1.0,
            similarity: None,
            _links: kith_proto::RunLinks::for_run(run),
        };
        let group = |id: &str, owner: &str| kith_proto::SearchGroup {
            conversation_id: id.into(),
            title: Some(format!("{owner}'s session")),
            owner: owner.into(),
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::ClaudeCode,
            model: None,
            cwd: Some("/home/x".into()),
            git_branch: None,
            session_id: Some("sess-9".into()),
            started_at: "2026-03-01T10:00:00.000Z".into(),
            last_activity_at: "2026-03-01T11:00:00.000Z".into(),
            tags: vec![],
            score: 1.0,
            weak: false,
            hits: vec![hit("r1", owner)],
        };
        let res = SearchResponse {
            hits: vec![],
            groups: vec![
                group("c0123456789abcdef", "alice.test"),
                group("c9876543210fedcba", "bob.test"),
            ],
            timing: Default::default(),
            backend: "embedded".into(),
            embedder: "none".into(),
            degraded: None,
            nothing_relevant: false,
        };
        let text = render_groups(&res, Some("alice.test"), Style { color: false }, NOW);
        let alice = text
            .lines()
            .find(|l| l.contains("alice.test's session"))
            .unwrap_or_default();
        let bob = text
            .lines()
            .find(|l| l.contains("bob.test's session"))
            .unwrap_or_default();
        assert!(
            !alice.contains("· alice.test ·") && !alice.starts_with("alice.test"),
            "{text}"
        );
        assert!(bob.contains("bob.test · claude-code"), "{text}");
        assert!(text.contains("kith show c0123456789a  (sess-9)"), "{text}");
        assert!(text.contains("set up «printer»"), "{text}");
        assert!(text.contains("2 conversations"), "{text}");

        let none = SearchResponse {
            groups: vec![],
            ..res
        };
        assert!(render_groups(&none, None, Style { color: false }, NOW).contains("no matches"));
    }

    #[test]
    fn a_search_group_names_its_model_and_branch_when_known() {
        let mut g = kith_proto::SearchGroup {
            conversation_id: "c0123456789abcdef".into(),
            title: Some("fix the importer".into()),
            owner: "alice.test".into(),
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::Codex,
            model: Some("gpt-5-codex".into()),
            cwd: Some("/home/alice/importer".into()),
            git_branch: Some("retry-429".into()),
            session_id: None,
            started_at: "2026-01-01T10:00:00.000Z".into(),
            last_activity_at: "2026-01-02T11:00:00.000Z".into(),
            tags: vec![],
            score: 1.0,
            weak: false,
            hits: vec![],
        };
        let res = |g: &kith_proto::SearchGroup| SearchResponse {
            hits: vec![],
            groups: vec![g.clone()],
            timing: Default::default(),
            backend: "embedded".into(),
            embedder: "none".into(),
            degraded: None,
            nothing_relevant: false,
        };
        let text = render_groups(&res(&g), None, Style { color: false }, NOW);
        assert!(
            text.contains("codex gpt-5-codex · 2026-01-02 · /home/alice/importer (retry-429)"),
            "{text}"
        );
        (g.model, g.git_branch) = (None, None);
        let text = render_groups(&res(&g), None, Style { color: false }, NOW);
        assert!(
            text.contains("codex · 2026-01-02 · /home/alice/importer\n"),
            "{text}"
        );
        assert!(
            !text.contains("gpt-5") && !text.contains("retry-429"),
            "{text}"
        );
    }
}
