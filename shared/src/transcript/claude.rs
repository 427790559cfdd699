//! Claude Code sessions (`~/.claude/projects/<cwd>/<session>.jsonl`): which
//! `user` lines are a person's words, which are tool results or injected
//! text, and how one assistant message written over several lines is joined.

use serde_json::Value;

use super::builder::{fill, Builder};
use super::text::{
    blocks_text, call_line, content_text, input_summary, said_something, shell_command, str_at,
    strip_reminders, tag,
};
use super::{diff, Records, Role};

pub(super) struct Claude;

impl Records for Claude {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        let ts = str_at(v, "timestamp");
        let kind = str_at(v, "type").unwrap_or_default();
        match kind {
            "user" | "assistant" => {}
            "file-history-snapshot" => {
                tracked_files(b, v);
                return true;
            }
            // Bookkeeping, never text: session titles that may name other
            // sessions, hook and tool progress, prompts queued while the agent
            // was busy (the real user line follows), compaction boundaries.
            "system" | "summary" | "progress" | "queue-operation" | "permission-mode"
            | "ai-title" | "last-prompt" | "attachment" => {
                b.time(ts);
                return true;
            }
            _ => return false,
        }
        b.time(ts);
        let f = &mut b.facts;
        fill(&mut f.session_id, str_at(v, "sessionId"));
        fill(&mut f.cwd, str_at(v, "cwd"));
        fill(&mut f.git_branch, str_at(v, "gitBranch"));
        fill(&mut f.agent_version, str_at(v, "version"));
        let message = v.get("message").unwrap_or(&Value::Null);
        if kind == "user" {
            user(b, v, message, line, ts);
        } else {
            assistant(b, message, line, ts);
        }
        true
    }
}

fn user(b: &mut Builder, v: &Value, message: &Value, line: u64, ts: Option<&str>) {
    // Meta lines are caveats, expanded skill prompts and reminders: written
    // for the model, not typed by the person.
    if v.get("isMeta").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let content = message.get("content").unwrap_or(&Value::Null);
    if let Some(blocks) = content.as_array() {
        let mut any_result = false;
        for block in blocks {
            if str_at(block, "type") != Some("tool_result") {
                continue;
            }
            any_result = true;
            let output = content_text(block.get("content").unwrap_or(&Value::Null));
            b.result(
                str_at(block, "tool_use_id"),
                None,
                &strip_reminders(&output),
                line,
                ts,
            );
        }
        if any_result {
            result_files(b, v.get("toolUseResult").unwrap_or(&Value::Null));
            let rest = blocks
                .iter()
                .filter(|block| str_at(block, "type") != Some("tool_result"));
            user_words(b, &blocks_text(rest), line, ts);
            return;
        }
    }
    let text = content_text(content);
    if v.get("isCompactSummary").and_then(Value::as_bool) == Some(true) {
        b.turn(Role::Summary, &text, line, ts);
        return;
    }
    user_words(b, &text, line, ts);
}

/// Text Claude Code writes into user lines itself: local command output,
/// background-task notices and interruption markers.
const INJECTED: [&str; 8] = [
    "<local-command-caveat>",
    "<local-command-stdout>",
    "<local-command-stderr>",
    "<bash-stdout>",
    "<bash-stderr>",
    "<task-notification>",
    "[Request interrupted",
    "Caveat: The messages below were generated",
];

/// A person's words, unless Claude Code wrote them; slash commands read as typed.
fn user_words(b: &mut Builder, text: &str, line: u64, ts: Option<&str>) {
    let text = strip_reminders(text);
    let trimmed = text.trim_start();
    if INJECTED.iter().any(|p| trimmed.starts_with(p)) {
        return;
    }
    if let Some(name) = tag(&text, "command-name") {
        let name = name.trim();
        let args = tag(&text, "command-args").unwrap_or_default().trim();
        b.used(name);
        let typed = if args.is_empty() {
            name.to_owned()
        } else {
            format!("{name} {args}")
        };
        b.turn(Role::User, &typed, line, ts);
        return;
    }
    b.turn(Role::User, &text, line, ts);
}

fn assistant(b: &mut Builder, message: &Value, line: u64, ts: Option<&str>) {
    let content = message.get("content").unwrap_or(&Value::Null);
    // `<synthetic>` marks messages Claude Code made up itself (API errors,
    // "no response requested"): their text is kept, their model is not one.
    let model = str_at(message, "model").filter(|m| *m != "<synthetic>");
    fill(
        &mut b.facts.model,
        model.filter(|_| said_something(content)),
    );
    // Claimed before the tool calls so the message's turn comes first, even
    // when this line holds only a tool call or a thinking block.
    b.message(str_at(message, "id"), &content_text(content), line, ts);
    for block in content.as_array().into_iter().flatten() {
        if str_at(block, "type") != Some("tool_use") {
            continue;
        }
        let name = str_at(block, "name").unwrap_or("tool");
        let input = block.get("input").unwrap_or(&Value::Null);
        // Search roots (Glob/Grep `path`) and patterns are not files touched.
        for key in ["file_path", "notebook_path"] {
            if let Some(path) = str_at(input, key) {
                b.file(path);
            }
        }
        if name == "Bash" {
            if let Some(command) = shell_command(input) {
                b.command(&command);
            }
        }
        if name == "Skill" {
            if let Some(skill) = str_at(input, "skill") {
                b.used(skill);
            }
        }
        let text = call_line(name, &input_summary(input));
        let diff = diff::of_input(input);
        b.call(str_at(block, "id"), name, &text, diff, line, ts);
    }
}

/// `toolUseResult` names the file a Read, Write or Edit worked on.
fn result_files(b: &mut Builder, result: &Value) {
    let path = str_at(result, "filePath")
        .or_else(|| result.get("file").and_then(|file| str_at(file, "filePath")));
    if let Some(path) = path {
        b.file(path);
    }
}

/// The files Claude Code backed up before editing (paths relative to cwd).
fn tracked_files(b: &mut Builder, v: &Value) {
    let backups = v
        .pointer("/snapshot/trackedFileBackups")
        .and_then(Value::as_object);
    for path in backups.into_iter().flat_map(|m| m.keys()) {
        b.file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, own, render, third_party};
    use super::super::{parse, Format, Role, Transcript};
    use crate::fixtures;

    /// The repository's Claude Code session `name` (in its project folder).
    fn claude(name: &str) -> Transcript {
        own(&format!("claude-code/-home-sam-src-tally/{name}"))
    }

    const SHORT: &str = "3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90.jsonl";
    const WORK: &str = "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl";
    const LIVE: &str = "c71e93d0-2a4b-4d6e-8f15-6b0a9e3c2d17.jsonl";
    const AGENT: &str = "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-a6c41f0.jsonl";
    const COMPACT_AGENT: &str =
        "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-acompact-7d20b9.jsonl";

    fn line(envelope: &str, body: &str) -> String {
        format!("{{{envelope}{body}}}\n")
    }

    #[test]
    fn user_lines_table() {
        let u = |content: &str| {
            line(
                "\"type\":\"user\",",
                &format!("\"message\":{{\"role\":\"user\",\"content\":{content}}}"),
            )
        };
        let cases: &[(String, &str)] = &[
            (u("\"plain words\""), "user 1-1: plain words"),
            (u("[{\"type\":\"text\",\"text\":\"blocks\"},{\"type\":\"image\"}]"), "user 1-1: blocks"),
            (
                u("\"before<system-reminder>noise</system-reminder> after\""),
                "user 1-1: before after",
            ),
            (u("\"<system-reminder>only noise</system-reminder>\""), ""),
            (u("\"[Request interrupted by user]\""), ""),
            (u("\"<local-command-stdout>ok</local-command-stdout>\""), ""),
            (u("\"<task-notification>done</task-notification>\""), ""),
            (
                u("\"<command-message>x</command-message>\\n<command-name>/review</command-name>\\n<command-args>the parser</command-args>\""),
                "user 1-1: /review the parser",
            ),
            (
                line("\"type\":\"user\",\"isMeta\":true,", "\"message\":{\"content\":\"skill prompt\"}"),
                "",
            ),
            (
                line("\"type\":\"user\",\"isCompactSummary\":true,", "\"message\":{\"content\":\"the summary\"}"),
                "summary 1-1: the summary",
            ),
            (
                u("[{\"type\":\"tool_result\",\"tool_use_id\":\"gone\",\"content\":[{\"type\":\"text\",\"text\":\"orphan output\"}]}]"),
                "tool 1-1: orphan output",
            ),
        ];
        for (input, expect) in cases {
            let t = check(Format::ClaudeCode, input, expect);
            assert_eq!(t.n_skipped_lines, 0, "{input}");
        }
    }

    #[test]
    fn streamed_message_and_tool_results_join() {
        let a = |id: &str, block: &str| {
            line(
                "\"type\":\"assistant\",",
                &format!("\"message\":{{\"id\":\"{id}\",\"model\":\"m\",\"content\":[{block}]}}"),
            )
        };
        let r = |id: &str, out: &str| {
            line("\"type\":\"user\",", &format!("\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"{id}\",\"content\":\"{out}\"}}]}}"))
        };
        let input = [
            a("m1", "{\"type\":\"thinking\",\"thinking\":\"hidden\"}"),
            a("m1", "{\"type\":\"text\",\"text\":\"Looking.\"}"),
            a("m1", "{\"type\":\"tool_use\",\"id\":\"t1\",\"name\":\"Read\",\"input\":{\"file_path\":\"/a.rs\",\"limit\":5}}"),
            r("t1", "fn main"),
            a("m1", "{\"type\":\"tool_use\",\"id\":\"t2\",\"name\":\"Bash\",\"input\":{\"command\":\"ls\"}}"),
            a("m1", "{\"type\":\"text\",\"text\":\"More.\"}"),
            r("t2", "a.rs"),
            a("m2", "{\"type\":\"text\",\"text\":\"Next message.\"}"),
        ]
        .concat();
        let t = check(
            Format::ClaudeCode,
            &input,
            "assistant 1-6: Looking.⏎⏎More.
             tool 3-4 [Read]: Read: /a.rs⏎fn main
             tool 5-7 [Bash]: Bash: ls⏎a.rs
             assistant 8-8: Next message.",
        );
        assert_eq!(t.tools_used, ["Bash", "Read"]);
        assert_eq!(t.commands, ["ls"]);
        assert_eq!(t.tool_call_count, 2);
        assert_eq!(t.files_touched, ["/a.rs"]);
        assert_eq!(t.model.as_deref(), Some("m"));
    }

    #[test]
    fn short_session_reads_like_the_conversation() {
        let t = claude(SHORT);
        assert_eq!(
            render(&t),
            "user 4-4: `tally import` stops at the first row with a comma inside qu\n\
             assistant 5-10: Let me look at how the importer splits rows.\n\
             tool 7-9 [Grep]: Grep: split\\(','\\) /home/sam/src/tally/src content⏎src/impor\n\
             tool 10-11 [Read]: Read: /home/sam/src/tally/src/import.rs⏎    20→/// Reads a b\n\
             assistant 12-12: Found it: `rows()` splits each line on every comma, so a quo\n"
        );
        assert_eq!(
            t.intent.as_deref(),
            Some("`tally import` stops at the first row with a comma inside quotes, the rest of bank.csv is dropped")
        );
        assert_eq!(t.model.as_deref(), Some("claude-opus-4-6"));
        assert_eq!(
            t.session_id.as_deref(),
            Some("3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90")
        );
        assert_eq!(t.cwd.as_deref(), Some("/home/sam/src/tally"));
        assert_eq!(t.git_branch.as_deref(), Some("main"));
        assert_eq!(t.agent_version.as_deref(), Some("2.1.42"));
        assert_eq!(t.parent_session_id, None);
        assert_eq!(t.tools_used, ["Grep", "Read"]);
        assert_eq!(t.tool_call_count, 2);
        assert_eq!(
            t.files_touched,
            ["/home/sam/src/tally/src/import.rs"],
            "a Grep search root is not a file"
        );
        assert_eq!((t.n_lines, t.n_skipped_lines), (15, 0));
        // The thinking block on line 5 is never indexed.
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("Quoted commas in CSV")));
        // The session-start hook ran (line 3) before the person typed (line 4);
        // the `/cost` output (lines 14-15) is the last thing written.
        assert_eq!(t.started_at.as_deref(), Some("2026-05-09T18:02:11.304Z"));
        assert_eq!(t.ended_at.as_deref(), Some("2026-05-09T18:02:25.934Z"));

        let Some(t) = third_party("claude-code/marot__spotter__short.jsonl") else {
            return;
        };
        assert_eq!(
            render(&t),
            "user 4-4: mix phx.server doesnt seem to start\n\
             assistant 5-10: Let me check the project structure and try running the serve\n\
             tool 8-11 [Bash]: Bash: mix phx.server 2>&1 | head -80⏎The user doesn't want t\n\
             tool 10-12 [Glob]: Glob: mix.exs /home/marco/projects/spotter⏎The user doesn't \n"
        );
        assert_eq!(t.model.as_deref(), Some("claude-opus-4-6"));
        assert_eq!(t.agent_version.as_deref(), Some("2.1.38"));
        assert_eq!(t.tools_used, ["Bash", "Glob"]);
        assert_eq!(t.files_touched, Vec::<String>::new());
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("having trouble starting their Phoenix")));
        assert_eq!(t.started_at.as_deref(), Some("2026-02-10T21:11:52.438Z"));
        assert_eq!(t.ended_at.as_deref(), Some("2026-02-10T21:16:12.381Z"));
    }

    /// A file the agent is still writing ends mid-line: its complete lines
    /// read as they will once the line is finished, the cut one is skipped.
    fn check_cut(cut: &[u8], full: &[u8]) -> Transcript {
        let t = parse(Format::ClaudeCode, cut);
        let complete = cut.iter().rposition(|&c| c == b'\n').map_or(0, |i| i + 1);
        assert!(complete < cut.len(), "the file ends mid-line");
        assert!(full.starts_with(&cut[..complete]));
        let n_complete = cut[..complete].iter().filter(|&&c| c == b'\n').count() as u64;
        assert_eq!((t.n_lines, t.n_skipped_lines), (n_complete + 1, 1));
        assert_eq!(t.turns, parse(Format::ClaudeCode, &cut[..complete]).turns);
        t
    }

    #[test]
    fn truncated_file_reads_its_complete_lines() {
        // The repository's session that Claude Code was writing when copied.
        let live = fixtures::read(&format!("claude-code/-home-sam-src-tally/{LIVE}"));
        let t = check_cut(&live, &live);
        assert_eq!(t.n_lines, 7);
        assert!(render(&t).ends_with(
            "assistant 6-6: `Export` takes only the output path. I will add `since: Opti\n"
        ));
        assert_eq!(t.tool_call_count, 1, "the Edit on the cut line is not read");
        // A finished session cut inside its last assistant line.
        let full = fixtures::read(&format!("claude-code/-home-sam-src-tally/{SHORT}"));
        let at = full.windows(8).position(|w| w == b"Found it");
        let t = check_cut(&full[..at.unwrap_or_default()], &full);
        assert_eq!(t.intent, claude(SHORT).intent);
        assert!(render(&t).contains("assistant 5-10: Let me look at how"));
        assert!(!render(&t).contains("Found it"), "line 12 is cut");

        let Some(t) = third_party("derived/marot__spotter__short.TRUNCATED-MIDLINE-DERIVED.jsonl")
        else {
            return;
        };
        assert_eq!((t.n_lines, t.n_skipped_lines), (10, 1));
        assert_eq!(
            t.intent.as_deref(),
            Some("mix phx.server doesnt seem to start")
        );
        assert!(render(&t).contains("assistant 5-8: Let me check"));
    }

    #[test]
    fn streamed_message_interleaved_with_results_is_one_turn() {
        // The subagent's first message is written over lines 2..=5, with its
        // tool results between them.
        let t = claude(AGENT);
        let first = t.turns.iter().find(|x| x.role == Role::Assistant);
        assert_eq!(first.map(|x| (x.line_start, x.line_end)), Some((2, 5)));
        assert_eq!(
            t.turns
                .iter()
                .filter(|x| x.role == Role::Assistant && x.line_start == 2)
                .count(),
            1
        );
        // A subagent's prompt, written by its parent, is what it was asked to do.
        assert!(t
            .intent
            .as_deref()
            .unwrap_or_default()
            .starts_with("Search /home/sam/src/tally for every place that subtracts"));
        // It carries its parent's session id, and no parent session of its own.
        assert_eq!(
            t.session_id.as_deref(),
            Some("9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55")
        );
        assert_eq!(t.model.as_deref(), Some("claude-haiku-4-5"));

        let Some(t) = third_party(
            "claude-code/marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569__subagents__agent-a2898e3.jsonl",
        ) else {
            return;
        };
        let first = t.turns.iter().find(|x| x.role == Role::Assistant);
        assert_eq!(first.map(|x| (x.line_start, x.line_end)), Some((2, 21)));
        assert!(t
            .intent
            .as_deref()
            .unwrap_or_default()
            .starts_with("Very thorough exploration."));
    }

    #[test]
    fn compaction_summary_is_a_summary_not_user_text() {
        let t = claude(WORK);
        let summaries: Vec<_> = t.turns.iter().filter(|x| x.role == Role::Summary).collect();
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].line_start, 39);
        assert!(summaries[0]
            .text
            .starts_with("This session is being continued"));
        let users: Vec<_> = t
            .turns
            .iter()
            .filter(|x| x.role == Role::User)
            .map(|x| x.line_start)
            .collect();
        // Line 40 is the `/compact` command's output, not the person.
        assert_eq!(users, [3, 33, 41]);
        assert!(t
            .intent
            .as_deref()
            .is_some_and(|i| i.starts_with("The weekly report shows negative durations")));

        let Some(t) =
            third_party("claude-code/marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl")
        else {
            return;
        };
        let summaries: Vec<_> = t.turns.iter().filter(|x| x.role == Role::Summary).collect();
        assert_eq!(summaries.len(), 1);
        assert_eq!(summaries[0].line_start, 755);
        let users: Vec<_> = t
            .turns
            .iter()
            .filter(|x| x.role == Role::User)
            .map(|x| x.line_start)
            .collect();
        // Line 1502 is a background-task notification, not the person.
        assert_eq!(users, [7, 280]);
        assert_eq!(
            t.intent
                .as_deref()
                .map(|i| i.starts_with("Work on bead spotter-dov.")),
            Some(true)
        );
        assert!(
            t.files_touched.iter().all(|f| f.starts_with('/')),
            "{:?}",
            t.files_touched
        );
        assert!(t.files_touched.contains(&"/home/USER/projects/spotter-worktrees/spotter-dov/lib/spotter_web/live/session_live.ex".to_owned()));
    }

    #[test]
    fn slash_command_is_user_text_and_its_expansion_is_not() {
        let t = claude(WORK);
        let review = t.turns.iter().find(|x| x.line_start == 33);
        assert_eq!(
            review.map(|x| (x.role, x.text.as_str())),
            Some((Role::User, "/review src/report.rs"))
        );
        assert!(t.tools_used.contains(&"/review".to_owned()));
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("List findings by severity")));

        let Some(t) = third_party("claude-code/marot__spotter__subagent.jsonl") else {
            return;
        };
        let first = &t.turns[0];
        assert_eq!((first.role, first.line_start), (Role::User, 4));
        assert!(first
            .text
            .starts_with("/handgemacht:create-beads websearch to learn"));
        assert!(t
            .tools_used
            .contains(&"/handgemacht:create-beads".to_owned()));
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("Follow these phases in strict order")));
        let users: Vec<_> = t
            .turns
            .iter()
            .filter(|x| x.role == Role::User)
            .map(|x| x.line_start)
            .collect();
        assert_eq!(users, [4, 71]);
    }

    #[test]
    fn local_command_noise_is_not_user_text() {
        // `/cost` and its output are system lines in the short session.
        let t = claude(SHORT);
        assert!(t.turns.iter().all(|x| !x.text.contains("Total cost")));
        assert_eq!(t.turns.iter().filter(|x| x.role == Role::User).count(), 1);

        let Some(t) = third_party("claude-code/marot__spotter__tool_heavy.jsonl") else {
            return;
        };
        let users: Vec<_> = t
            .turns
            .iter()
            .filter(|x| x.role == Role::User)
            .map(|x| (x.line_start, x.text.as_str()))
            .collect();
        assert_eq!(
            users[..2],
            [(4, "start phoenix in background"), (21, "/mcp")]
        );
        assert!(users[2].1.starts_with("scrolling back in xterm.js"));
        assert_eq!(users.len(), 3);
    }

    #[test]
    fn compaction_agent_prompt_is_intent_and_reminders_are_dropped() {
        let t = claude(COMPACT_AGENT);
        assert!(t
            .intent
            .as_deref()
            .unwrap_or_default()
            .starts_with("Your task is to write a summary of the conversation"));
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("PostToolUse:Edit hook additional context")));
        assert_eq!(
            t.turns.iter().map(|x| x.line_start).collect::<Vec<_>>(),
            [2, 3]
        );

        let Some(t) = third_party("claude-code/marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569__subagents__agent-acompact-e1f845.jsonl")
        else {
            return;
        };
        assert!(t
            .intent
            .as_deref()
            .unwrap_or_default()
            .starts_with("Your task is to create a detailed summary"));
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("PostToolUse:Edit hook additional context")));
    }

    #[test]
    fn files_from_tool_inputs_results_and_snapshots_are_absolute_and_deduplicated() {
        let t = claude(WORK);
        assert_eq!(
            t.files_touched,
            [
                "/home/sam/src/tally/src/entry.rs",
                "/home/sam/src/tally/src/report.rs",
                "/home/sam/src/tally/tests/midnight.rs"
            ]
        );
        assert_eq!(
            t.tools_used,
            ["/review", "Bash", "Edit", "Grep", "Read", "Task", "Write"]
        );
        assert_eq!(t.tool_call_count, 10);

        let Some(t) = third_party(
            "claude-code/codemie-ai__codemie-code__4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
        ) else {
            return;
        };
        assert_eq!(
            t.files_touched,
            [
                "/tmp/private/hello.js",
                "/tmp/private/hello.md",
                "/tmp/private/hello.py"
            ]
        );
        assert_eq!(t.tools_used, ["Bash", "Edit", "Read", "Write"]);
        assert_eq!(t.tool_call_count, 6);
        assert_eq!(t.intent.as_deref(), Some("create hello.py, md and js"));
        assert_eq!(t.turns.iter().filter(|x| x.role == Role::User).count(), 3);
    }

    /// `summary` lines among the first of a file title this and other sessions.
    fn check_titles(name: &str, bytes: &[u8], n_titles: usize) -> Transcript {
        let title_lines: Vec<u64> = bytes
            .split(|&c| c == b'\n')
            .zip(1..)
            .filter(|(l, _)| l.starts_with(b"{\"type\":\"summary\""))
            .map(|(_, n)| n)
            .collect();
        assert_eq!(title_lines.len(), n_titles, "{name}");
        let t = parse(Format::ClaudeCode, bytes);
        assert!(t.turns.iter().all(|x| !title_lines.contains(&x.line_start)));
        assert_eq!(t.n_skipped_lines, 0);
        t
    }

    #[test]
    fn session_titles_are_not_turns() {
        let short = fixtures::read(&format!("claude-code/-home-sam-src-tally/{SHORT}"));
        let t = check_titles(SHORT, &short, 1);
        assert!(t.turns.iter().all(|x| !x.text.contains("Fix tally import")));

        let name = "claude-code/codemie-ai__codemie-code__session-9eda1058.jsonl";
        let Some(bytes) = fixtures::third_party(name) else {
            return;
        };
        let t = check_titles(name, &bytes, 16);
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("Cleared conversation history")));
        assert_eq!(
            t.intent.as_deref(),
            Some("show tools and store response in file")
        );
    }

    #[test]
    fn hook_payloads_are_not_a_transcript() {
        // What a Stop hook gets on stdin, logged one per line.
        let payloads = "{\"session_id\":\"s\",\"transcript_path\":\"/p.jsonl\",\"cwd\":\"/r\",\"hook_event_name\":\"Stop\",\"stop_hook_active\":false,\"last_assistant_message\":\"done\"}\n\
                        {\"session_id\":\"s\",\"transcript_path\":\"/p.jsonl\",\"cwd\":\"/r\",\"hook_event_name\":\"SessionEnd\",\"reason\":\"other\"}\n";
        let t = parse(Format::ClaudeCode, payloads.as_bytes());
        assert!(t.turns.is_empty());
        assert_eq!((t.n_lines, t.n_skipped_lines), (2, 2));

        let Some(t) = third_party("claude-code/oneryalcin__fasthooks__sample_hook_logs.jsonl")
        else {
            return;
        };
        assert!(t.turns.is_empty());
        assert_eq!((t.n_lines, t.n_skipped_lines), (36, 36));
    }
}
