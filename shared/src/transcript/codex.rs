//! Codex rollouts (`$CODEX_HOME/sessions/…/rollout-*.jsonl`, lines of
//! `{timestamp, type, payload}`): Codex writes most text twice, once as a UI
//! event and once as model history, and this module reads each kind once.

use serde_json::Value;

use super::builder::{fill, Builder};
use super::text::{call_line, content_text, input_summary, shell_command, str_at};
use super::{diff, Records, Role};

#[derive(Default)]
pub(super) struct Codex {
    saw_user_event: bool,
    /// User messages of the model history, used only when the rollout has no
    /// `event_msg.user_message` at all (versions differ in what they persist).
    history_users: Vec<(u64, Option<String>, String)>,
}

/// Text Codex puts into the model history as user messages: instructions and
/// context it injects, not what the person typed.
const INJECTED: [&str; 8] = [
    "# AGENTS.md instructions",
    "<environment_context>",
    "<user_instructions>",
    "<INSTRUCTIONS>",
    "<permissions instructions>",
    "<turn_aborted>",
    "<subagent_notification>",
    "<user_shell_command>",
];

fn injected(text: &str) -> bool {
    let text = text.trim_start();
    INJECTED.iter().any(|p| text.starts_with(p))
}

impl Records for Codex {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        let ts = str_at(v, "timestamp");
        let p = v.get("payload").unwrap_or(&Value::Null);
        match str_at(v, "type").unwrap_or_default() {
            "session_meta" => session_meta(b, v, p),
            "turn_context" => {
                fill(&mut b.facts.model, str_at(p, "model"));
                fill(&mut b.facts.cwd, str_at(p, "cwd"));
            }
            "event_msg" => self.event(b, p, line, ts),
            "response_item" => self.response_item(b, p, line, ts),
            "compacted" => {
                b.turn(
                    Role::Summary,
                    str_at(p, "message").unwrap_or_default(),
                    line,
                    ts,
                );
            }
            _ => return false,
        }
        b.time(ts);
        true
    }

    fn finish(self, b: &mut Builder) {
        if self.saw_user_event {
            return;
        }
        for (line, ts, text) in self.history_users {
            b.turn(Role::User, &text, line, ts.as_deref());
        }
    }
}

fn session_meta(b: &mut Builder, v: &Value, p: &Value) {
    let f = &mut b.facts;
    fill(&mut f.session_id, str_at(p, "id"));
    fill(&mut f.cwd, str_at(p, "cwd"));
    fill(&mut f.agent_version, str_at(p, "cli_version"));
    fill(
        &mut f.git_branch,
        p.pointer("/git/branch").and_then(Value::as_str),
    );
    let parent = p
        .pointer("/source/subagent/thread_spawn/parent_thread_id")
        .and_then(Value::as_str)
        .or_else(|| str_at(p, "parent_thread_id"))
        .or_else(|| str_at(v, "parent_thread_id"));
    fill(&mut f.parent_session_id, parent);
}

impl Codex {
    /// UI events: the person's words, and the files a patch or command touched.
    fn event(&mut self, b: &mut Builder, p: &Value, line: u64, ts: Option<&str>) {
        match str_at(p, "type") {
            Some("user_message") => {
                self.saw_user_event = true;
                let text = str_at(p, "message").unwrap_or_default();
                if !injected(text) {
                    b.turn(Role::User, text, line, ts);
                }
            }
            Some("patch_apply_end") => {
                let changes = p.get("changes").and_then(Value::as_object);
                for path in changes.into_iter().flat_map(|c| c.keys()) {
                    b.file(path);
                }
            }
            Some("exec_command_end") => {
                // Only reads: `search` and `list_files` name directories,
                // which are places looked in, not files touched.
                let cmds = p.get("parsed_cmd").and_then(Value::as_array);
                for cmd in cmds.into_iter().flatten() {
                    if str_at(cmd, "type") == Some("read") {
                        b.file(str_at(cmd, "path").unwrap_or_default());
                    }
                }
            }
            // Assistant text and reasoning come from the model history;
            // the rest is counters and lifecycle.
            _ => {}
        }
    }

    /// Model history: assistant text, tool calls and their outputs.
    fn response_item(&mut self, b: &mut Builder, p: &Value, line: u64, ts: Option<&str>) {
        let call_id = str_at(p, "call_id");
        match str_at(p, "type") {
            Some("message") => {
                let text = content_text(p.get("content").unwrap_or(&Value::Null));
                match str_at(p, "role") {
                    Some("assistant") => {
                        b.turn(Role::Assistant, &text, line, ts);
                    }
                    Some("user") if !injected(&text) => {
                        self.history_users.push((line, ts.map(str::to_owned), text));
                    }
                    // Developer messages are Codex's own instructions.
                    _ => {}
                }
            }
            Some("function_call") => {
                let name = str_at(p, "name").unwrap_or("function");
                let args = match p.get("arguments") {
                    Some(Value::String(s)) => serde_json::from_str::<Value>(s).ok(),
                    args => args.cloned(),
                };
                if let Some(command) = args
                    .as_ref()
                    .filter(|_| SHELL_TOOLS.contains(&name))
                    .and_then(shell_command)
                {
                    b.command(&command);
                }
                let input = match (args, p.get("arguments")) {
                    (Some(args), _) => input_summary(&args),
                    (None, Some(Value::String(s))) => s.clone(),
                    (None, _) => String::new(),
                };
                call(b, call_id, name, &input, line, ts);
            }
            Some("custom_tool_call") => {
                let name = str_at(p, "name").unwrap_or("custom_tool");
                let input = match p.get("input") {
                    Some(Value::String(s)) => s.clone(),
                    Some(input) => input_summary(input),
                    None => String::new(),
                };
                call(b, call_id, name, &input, line, ts);
            }
            Some("local_shell_call") => {
                let action = p.get("action").unwrap_or(&Value::Null);
                if let Some(command) = shell_command(action) {
                    b.command(&command);
                }
                let input = input_summary(action.get("command").unwrap_or(action));
                call(b, call_id, "local_shell", &input, line, ts);
            }
            Some("web_search_call") => {
                let action = p.get("action").unwrap_or(&Value::Null);
                let input =
                    str_at(action, "query").map_or_else(|| input_summary(action), str::to_owned);
                call(b, call_id, "web_search", &input, line, ts);
            }
            Some("tool_search_call") => {
                let input = input_summary(
                    p.get("arguments")
                        .or_else(|| p.get("action"))
                        .unwrap_or(&Value::Null),
                );
                call(b, call_id, "tool_search", &input, line, ts);
            }
            Some("function_call_output" | "custom_tool_call_output" | "tool_search_output") => {
                let output = output_text(p.get("output").unwrap_or(&Value::Null));
                b.result(call_id, None, &output, line, ts);
            }
            // Reasoning is the model's thinking: not indexed.
            _ => {}
        }
    }
}

/// Codex's tools that run a shell command.
const SHELL_TOOLS: [&str; 3] = ["shell", "exec_command", "container.exec"];

fn call(b: &mut Builder, id: Option<&str>, name: &str, input: &str, line: u64, ts: Option<&str>) {
    let diff = if input.contains("*** Begin Patch") {
        patch_files(b, input);
        diff::of_patch(input)
    } else {
        None
    };
    b.call(id, name, &call_line(name, input), diff, line, ts);
}

/// The files an `apply_patch` input names (relative to the session's cwd).
fn patch_files(b: &mut Builder, patch: &str) {
    const HEADERS: [&str; 4] = [
        "*** Update File: ",
        "*** Add File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    for line in patch.lines() {
        if let Some(path) = HEADERS.iter().find_map(|h| line.strip_prefix(h)) {
            b.file(path);
        }
    }
}

/// A tool output: a string, often itself JSON `{"output": …, "metadata": …}`,
/// or content items.
fn output_text(output: &Value) -> String {
    match output {
        Value::String(s) => {
            if s.trim_start().starts_with('{') {
                if let Ok(inner) = serde_json::from_str::<Value>(s) {
                    if let Some(text) = str_at(&inner, "output") {
                        return text.to_owned();
                    }
                }
            }
            s.clone()
        }
        Value::Array(_) => content_text(output),
        Value::Object(_) => output
            .get("output")
            .or_else(|| output.get("content"))
            .map(output_text)
            .unwrap_or_default(),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, own, render, third_party};
    use super::super::{parse, Format, Role, Transcript};

    /// The repository's rollout `name` (in its day folder).
    fn codex(name: &str) -> Transcript {
        own(&format!("codex/2026/05/11/{name}"))
    }

    const PARENT: &str = "rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl";
    const CHILD: &str = "rollout-2026-05-11T14-04-51-019e17a5-0f61-7b2a-8c44-e91d06a7b2f5.jsonl";

    const CODEMIE: &str = "codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl";

    fn item(payload: &str) -> String {
        format!("{{\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"response_item\",\"payload\":{payload}}}\n")
    }

    fn event(payload: &str) -> String {
        format!("{{\"timestamp\":\"2026-01-01T00:00:01Z\",\"type\":\"event_msg\",\"payload\":{payload}}}\n")
    }

    #[test]
    fn lines_table() {
        let user_item = item("{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"fix it\"}]}");
        let agents = item("{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"# AGENTS.md instructions for /r\"}]}");
        let user_event = event("{\"type\":\"user_message\",\"message\":\"fix it\"}");
        let cases: &[(String, &str)] = &[
            // The same words in both streams are read once, from the event.
            ([agents.clone(), user_item.clone(), user_event].concat(), "user 3-3: fix it"),
            // Without any user event (older versions), the history is the source.
            ([agents, user_item].concat(), "user 2-2: fix it"),
            (
                item("{\"type\":\"message\",\"role\":\"developer\",\"content\":[{\"type\":\"input_text\",\"text\":\"rules\"}]}"),
                "",
            ),
            (
                [
                    item("{\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"ls\\\",\\\"yield_time_ms\\\":10}\",\"call_id\":\"c1\"}"),
                    event("{\"type\":\"token_count\",\"info\":null}"),
                    item("{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"Listing.\"}]}"),
                    item("{\"type\":\"function_call_output\",\"call_id\":\"c1\",\"output\":\"{\\\"output\\\":\\\"a.rs\\\",\\\"metadata\\\":{}}\"}"),
                ]
                .concat(),
                "tool 1-4 [exec_command]: exec_command: ls⏎a.rs
                 assistant 3-3: Listing.",
            ),
            (
                item("{\"type\":\"custom_tool_call\",\"name\":\"apply_patch\",\"call_id\":\"p\",\"input\":\"*** Begin Patch\\n*** Add File: x.rs\\n+fn x() {}\\n*** End Patch\"}"),
                "tool 1-1 [apply_patch]: apply_patch: *** Begin Patch⏎*** Add File: x.rs⏎+fn x() {}⏎*",
            ),
            (
                item("{\"type\":\"reasoning\",\"summary\":[{\"type\":\"summary_text\",\"text\":\"thinking\"}]}"),
                "",
            ),
            (
                "{\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"compacted\",\"payload\":{\"message\":\"what happened so far\",\"replacement_history\":[]}}\n".to_owned(),
                "summary 1-1: what happened so far",
            ),
        ];
        for (input, expect) in cases {
            let t = check(Format::Codex, input, expect);
            assert_eq!(t.n_skipped_lines, 0, "{input}");
        }
    }

    #[test]
    fn subagent_rollout_names_its_parent() {
        let input = "{\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"session_meta\",\"payload\":{\"id\":\"child\",\"source\":{\"subagent\":{\"thread_spawn\":{\"parent_thread_id\":\"parent\",\"depth\":1}}}}}\n";
        let t = parse(Format::Codex, input.as_bytes());
        assert_eq!(t.session_id.as_deref(), Some("child"));
        assert_eq!(t.parent_session_id.as_deref(), Some("parent"));

        let t = codex(CHILD);
        assert_eq!(
            t.session_id.as_deref(),
            Some("019e17a5-0f61-7b2a-8c44-e91d06a7b2f5")
        );
        assert_eq!(
            t.parent_session_id.as_deref(),
            Some("019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4")
        );
        assert_eq!(t.model.as_deref(), Some("gpt-5.5-mini"));
        // The task the parent gave it is what it was asked to do.
        assert!(t
            .intent
            .as_deref()
            .is_some_and(|i| i.starts_with("Write an integration test in tests/report_json.rs")));
        assert_eq!(
            t.files_touched,
            ["/home/sam/src/tally/tests/report_json.rs"]
        );
    }

    #[test]
    fn rollout_reads_each_text_once_with_its_facts() {
        let t = codex(PARENT);
        let users: Vec<_> = t
            .turns
            .iter()
            .filter(|x| x.role == Role::User)
            .map(|x| (x.line_start, x.text.as_str()))
            .collect();
        assert_eq!(
            users,
            [
                (
                    8,
                    "add a --json flag to `tally report` that prints the weekly totals as JSON"
                ),
                (49, "make the minutes a float with one decimal place")
            ]
        );
        // Each assistant message is written twice (event and history): read once.
        assert_eq!(
            t.turns
                .iter()
                .filter(|x| x.text.contains("I'll find where `report` is defined"))
                .count(),
            1
        );
        for injected in [
            "AGENTS.md instructions",
            "<environment_context>",
            "<permissions instructions>",
            "Locating the report command",
        ] {
            assert!(
                t.turns.iter().all(|x| !x.text.contains(injected)),
                "{injected}"
            );
        }
        assert_eq!(
            t.turns.iter().filter(|x| x.role == Role::Assistant).count(),
            4
        );
        // The compaction's message is the summary of what came before.
        let summary = t.turns.iter().find(|x| x.role == Role::Summary);
        assert_eq!(summary.map(|x| x.line_start), Some(45));
        assert_eq!(
            t.intent.as_deref(),
            Some("add a --json flag to `tally report` that prints the weekly totals as JSON")
        );
        assert_eq!(t.model.as_deref(), Some("gpt-5.5"));
        assert_eq!(
            t.session_id.as_deref(),
            Some("019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4")
        );
        assert_eq!(t.cwd.as_deref(), Some("/home/sam/src/tally"));
        assert_eq!(t.git_branch.as_deref(), Some("report-json"));
        assert_eq!(t.agent_version.as_deref(), Some("0.128.0"));
        assert_eq!(t.parent_session_id, None);
        assert_eq!(
            t.tools_used,
            [
                "apply_patch",
                "exec_command",
                "spawn_agent",
                "update_plan",
                "wait_agent"
            ]
        );
        assert_eq!(t.tool_call_count, 9);
        assert_eq!(t.started_at.as_deref(), Some("2026-05-11T12:02:09.800Z"));
        // Patches name files relative to cwd, their events absolutely: one
        // entry each. `rg … src` searched a folder, `sed -n … report.rs` read
        // a file.
        assert_eq!(
            t.files_touched,
            [
                "/home/sam/src/tally/src/cli.rs",
                "/home/sam/src/tally/src/main.rs",
                "/home/sam/src/tally/src/report.rs"
            ]
        );

        let Some(t) = third_party(&format!("codex/{CODEMIE}")) else {
            return;
        };
        let users: Vec<_> = t
            .turns
            .iter()
            .filter(|x| x.role == Role::User)
            .map(|x| (x.line_start, x.text.as_str()))
            .collect();
        assert_eq!(
            users,
            [
                (7, "show tools"),
                (
                    23,
                    "let's update the defailt context compart to 90 in env var"
                )
            ]
        );
        assert_eq!(
            t.turns
                .iter()
                .filter(|x| x.text.contains("show tools"))
                .count(),
            1
        );
        assert!(t
            .turns
            .iter()
            .all(|x| !x.text.contains("Filesystem sandboxing defines")));
        assert_eq!(
            t.turns.iter().filter(|x| x.role == Role::Assistant).count(),
            13
        );
        assert_eq!(t.model.as_deref(), Some("gpt-5.5"));
        assert_eq!(t.git_branch.as_deref(), Some("feat/codex-agent-plugin"));
        assert_eq!(t.agent_version.as_deref(), Some("0.125.0"));
        assert_eq!(
            t.tools_used,
            [
                "apply_patch",
                "exec_command",
                "update_plan",
                "web_search",
                "write_stdin"
            ]
        );
        assert_eq!(t.tool_call_count, 99 + 3 + 3);
        assert_eq!(t.started_at.as_deref(), Some("2026-05-11T08:27:17.490Z"));
        let patched = "/Users/Sample_User/repos/codemie-ai/codemie-code/src/agents/plugins/__tests__/codemie-code-reasoning.test.ts";
        assert_eq!(t.files_touched.iter().filter(|f| *f == patched).count(), 1);
        let cwd = "/Users/Sample_User/repos/codemie-ai/codemie-code";
        assert!(!t.files_touched.contains(&format!("{cwd}/src")));
        assert!(t
            .files_touched
            .contains(&format!("{cwd}/src/utils/config.ts")));
        assert_eq!(t.files_touched.len(), 12, "{:#?}", t.files_touched);
    }

    #[test]
    fn call_and_output_join_across_other_lines() {
        // The call (14), a token count (15), the command's end event (16)
        // and the output (17).
        let t = codex(PARENT);
        let first_call = t.turns.iter().find(|x| x.role == Role::Tool);
        let first_call = first_call.map(|x| (x.line_start, x.line_end, x.tool_names.clone()));
        assert_eq!(first_call, Some((14, 17, vec!["exec_command".to_owned()])));
        assert!(
            render(&t).contains("tool 14-17 [exec_command]: exec_command: rg -n \"Report\" src")
        );
        assert!(render(&t).contains(
            "tool 26-28 [apply_patch]: apply_patch: *** Begin Patch⏎*** Update File: src/cli.rs"
        ));

        let Some(t) = third_party(&format!("codex/{CODEMIE}")) else {
            return;
        };
        let first_call = t.turns.iter().find(|x| x.role == Role::Tool);
        let first_call = first_call.map(|x| (x.line_start, x.line_end, x.tool_names.clone()));
        assert_eq!(first_call, Some((9, 11, vec!["exec_command".to_owned()])));
        assert!(render(&t).contains("tool 9-11 [exec_command]: exec_command: sed -n '1,180p'"));
    }

    #[test]
    fn sanitised_rollouts_keep_their_facts() {
        // Some published rollouts replace every text with a placeholder:
        // the facts and the shape still read.
        let input = [
            "{\"timestamp\":\"2026-01-01T00:00:00Z\",\"type\":\"turn_context\",\"payload\":{\"model\":\"gpt-x\"}}\n".to_owned(),
            event("{\"type\":\"user_message\",\"message\":\"[REDACTED_MESSAGE len=9 sha=00]\"}"),
            item("{\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"[REDACTED_ARGUMENTS len=3 sha=01]\",\"call_id\":\"c\"}"),
        ]
        .concat();
        let t = check(
            Format::Codex,
            &input,
            "user 2-2: [REDACTED_MESSAGE len=9 sha=00]
             tool 3-3 [exec_command]: exec_command: [REDACTED_ARGUMENTS len=3 sha=01]",
        );
        assert_eq!(t.model.as_deref(), Some("gpt-x"));
        assert_eq!(t.intent.as_deref(), Some("[REDACTED_MESSAGE len=9 sha=00]"));
        let Some(t) = third_party(
            "codex/madshn__localpush__rollout-2026-02-23T12-41-04-019c8a4d-8f45-7010-8b5d-7fad920aa6f9.jsonl",
        ) else {
            return;
        };
        assert_eq!(t.model.as_deref(), Some("gpt-5.3-codex"));
        assert_eq!(t.agent_version.as_deref(), Some("0.104.0-alpha.1"));
        assert_eq!(
            t.intent.as_deref(),
            Some("[REDACTED_MESSAGE len=115 sha=a83ebe6f]")
        );
        assert_eq!(t.turns.iter().filter(|x| x.role == Role::User).count(), 1);
        assert_eq!(t.tool_call_count, 118);
    }

    #[test]
    fn shell_commands_are_facets() {
        let t = crate::transcript::parse(
            crate::transcript::Format::Codex,
            [
                item("{\"type\":\"function_call\",\"name\":\"exec_command\",\"arguments\":\"{\\\"cmd\\\":\\\"cargo test\\\"}\",\"call_id\":\"c1\"}"),
                item("{\"type\":\"function_call\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":[\\\"bash\\\",\\\"-lc\\\",\\\"git status\\\"]}\",\"call_id\":\"c2\"}"),
                item("{\"type\":\"function_call\",\"name\":\"shell\",\"arguments\":\"{\\\"command\\\":[\\\"ls\\\",\\\"-la\\\"]}\",\"call_id\":\"c3\"}"),
                item("{\"type\":\"function_call\",\"name\":\"view_image\",\"arguments\":\"{\\\"cmd\\\":\\\"not a shell\\\"}\",\"call_id\":\"c4\"}"),
            ]
            .concat()
            .as_bytes(),
        );
        assert_eq!(t.commands, ["cargo test", "git status", "ls -la"]);
    }
}
