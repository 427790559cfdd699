//! GitHub Copilot CLI sessions (`~/.copilot/session-state/<id>/events.jsonl`):
//! one event per line, `{type, data, id, timestamp, parentId}`, appended.
//! A subagent's events sit in its parent's file, marked with `agentId` (the
//! tool call that started it) between `subagent.started` and
//! `subagent.completed`; they read as turns of the session marked with
//! that subagent (`Turn::subagent`), and each subagent as a
//! `SubagentSpan` with its name and what it was asked.

use std::collections::HashMap;

use serde_json::Value;

use super::builder::{fill, Builder};
use super::text::str_at;
use super::{Records, Role};

#[derive(Default)]
pub(super) struct Copilot {
    /// The `description` of each `task` call, by call id: what the
    /// subagent that call starts was asked to do.
    tasks: HashMap<String, String>,
}

impl Records for Copilot {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        let Some(kind) = str_at(v, "type") else {
            return false;
        };
        let ts = str_at(v, "timestamp");
        let data = v.get("data").unwrap_or(&Value::Null);
        b.time(ts);
        // Newer CLIs mark a subagent's events with `agentId`; its messages
        // and tool events also name the call that started it.
        let agent = str_at(v, "agentId")
            .or_else(|| str_at(data, "parentToolCallId"))
            .or_else(|| {
                kind.starts_with("subagent.")
                    .then(|| str_at(data, "toolCallId"))
                    .flatten()
            });
        b.subagent = agent.map(str::to_owned);
        if let Some(id) = agent {
            let asked = self.tasks.get(id).map(String::as_str);
            let span = b.subagent_span(id, line, ts);
            fill(&mut span.name, str_at(data, "agentName"));
            fill(&mut span.description, asked);
        }
        match kind {
            "session.start" | "session.resume" => {
                let f = &mut b.facts;
                fill(&mut f.session_id, str_at(data, "sessionId"));
                fill(&mut f.agent_version, str_at(data, "copilotVersion"));
                let context = data.get("context").unwrap_or(&Value::Null);
                fill(&mut f.cwd, str_at(context, "cwd"));
                fill(&mut f.git_branch, str_at(context, "branch"));
            }
            "session.model_change" => b.header_model(str_at(data, "newModel")),
            // `content` is what the person typed; `transformedContent` adds
            // what the CLI injected around it.
            "user.message" => {
                b.turn(
                    Role::User,
                    str_at(data, "content").unwrap_or_default(),
                    line,
                    ts,
                );
            }
            "assistant.message" => {
                fill(&mut b.facts.model, str_at(data, "model"));
                let text = str_at(data, "content").unwrap_or_default();
                b.message(str_at(data, "messageId"), text, line, ts);
                for request in data
                    .get("toolRequests")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    let args = arguments(request);
                    let call = str_at(request, "toolCallId");
                    if let (Some("task"), Some(id), Some(asked)) =
                        (str_at(request, "name"), call, str_at(&args, "description"))
                    {
                        self.tasks.insert(id.to_owned(), asked.to_owned());
                    }
                    tool_request(b, request, &args, line, ts);
                }
            }
            "tool.execution_complete" => {
                let result = data.get("result").unwrap_or(&Value::Null);
                let text = str_at(result, "content")
                    .or_else(|| str_at(result, "text_result_for_llm"))
                    .unwrap_or_default();
                b.result(str_at(data, "toolCallId"), None, text, line, ts);
            }
            // The rest (turn and hook boundaries, the system prompt, usage,
            // subagent start and end, tool starts that repeat the request)
            // carry nothing a person said or read.
            _ => {}
        }
        true
    }
}

/// A tool request's arguments, which come as an object or as a JSON string.
fn arguments(request: &Value) -> Value {
    match request.get("arguments") {
        Some(Value::String(s)) => {
            serde_json::from_str(s).unwrap_or_else(|_| Value::String(s.clone()))
        }
        Some(v) => v.clone(),
        None => Value::Null,
    }
}

/// A tool the assistant asked for, with its `arguments`.
fn tool_request(b: &mut Builder, request: &Value, args: &Value, line: u64, ts: Option<&str>) {
    let name = str_at(request, "name").unwrap_or("tool");
    let shell = matches!(name, "bash" | "shell" | "powershell");
    let id = str_at(request, "toolCallId");
    b.tool_use(id, name, args, &["path", "file_path"], shell, line, ts);
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, own, third_party};
    use super::super::{Format, SubagentSpan};

    #[test]
    fn events_read_as_turns_with_calls_joined_to_their_results() {
        let bytes = super::super::super::fixtures::read(
            "copilot/3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30/events.jsonl",
        );
        let t = check(
            Format::Copilot,
            &String::from_utf8(bytes).unwrap_or_default(),
            "user 3-3: The monthly report shows March twice. Find out why.
             assistant 5-5: I'll look at how months are bucketed.
             tool 5-7 [view]: view: /home/sam/src/tally/src/report.rs⏎31. let month = date
             tool 10-17 [task]: task: Check other ordinal uses List every use of date.ordina
             tool 13-14 [grep]: grep: ordinal\\(\\) /home/sam/src/tally/src⏎src/report.rs:31
             assistant 15-15: Only src/report.rs:31 uses ordinal().
             tool 18-19 [bash]: bash: cargo test report::months Run the report tests⏎test re
             assistant 20-20: Dividing the day of the year by 31 puts 31 March and 1 April",
        );
        assert_eq!(
            t.session_id.as_deref(),
            Some("3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30")
        );
        assert_eq!(t.cwd.as_deref(), Some("/home/sam/src/tally"));
        assert_eq!(t.git_branch.as_deref(), Some("fix-dates"));
        assert_eq!(t.agent_version.as_deref(), Some("1.0.52"));
        assert_eq!(t.model.as_deref(), Some("claude-sonnet-4.5"));
        assert_eq!(t.commands, ["cargo test report::months"]);
        assert_eq!(
            t.files_touched,
            [
                "/home/sam/src/tally/src",
                "/home/sam/src/tally/src/report.rs"
            ]
        );
        assert_eq!(t.tools_used, ["bash", "grep", "task", "view"]);
        assert!(!t.turns.iter().any(|x| x.text.contains("current_datetime")));
        // The `task` subagent: its own turns marked, the parent's call not.
        assert_eq!(
            t.subagents,
            [SubagentSpan {
                id: "toolu_task_01".into(),
                name: Some("explore".into()),
                description: Some("Check other ordinal uses".into()),
                line_start: 12,
                line_end: 16,
                started_at: Some("2026-05-14T18:02:26.100Z".into()),
                ended_at: Some("2026-05-14T18:02:28.100Z".into()),
                turn_count: 2,
            }]
        );
        let marked: Vec<(u64, Option<&str>)> = t
            .turns
            .iter()
            .map(|x| (x.line_start, x.subagent.as_deref()))
            .collect();
        assert_eq!(
            marked,
            [
                (3, None),
                (5, None),
                (5, None),
                (10, None),
                (13, Some("toolu_task_01")),
                (15, Some("toolu_task_01")),
                (18, None),
                (20, None),
            ]
        );
        assert_eq!(
            own("copilot/3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30/events.jsonl"),
            t
        );
        // A published session, when the third-party set is beside the
        // repository: arguments given as a JSON string read too.
        if let Some(t) =
            third_party("copilot/git-ai-project__git-ai__copilot_cli_session_events.jsonl")
        {
            assert_eq!(t.files_touched, ["/Users/test/project/hello.py"]);
            assert_eq!(t.model.as_deref(), Some("gpt-4.1"));
            let tool = t.turns.iter().find(|x| x.tool_names == ["create"]);
            assert!(
                tool.is_some_and(|x| x
                    .text
                    .ends_with("Created file /Users/test/project/hello.py")),
                "{:?}",
                t.turns
            );
            assert!(t.subagents.is_empty());
        }
        // A published session with a real `task` subagent.
        if let Some(t) = third_party("copilot/qiaolei81__copilot-session-viewer__events.jsonl") {
            let [span] = &t.subagents[..] else {
                panic!("{:?}", t.subagents)
            };
            assert_eq!(span.id, "toolu_vrtx_01TxUTxpA98CaQcbRogpf822");
            assert_eq!(span.name.as_deref(), Some("explore"));
            assert_eq!(
                span.description.as_deref(),
                Some("Inspect hello.py and README.md")
            );
            assert_eq!((span.line_start, span.line_end), (19, 26));
            let theirs: Vec<&str> = t
                .turns
                .iter()
                .filter(|x| x.subagent.is_some())
                .map(|x| x.text.as_str())
                .collect();
            assert_eq!(theirs.len() as u64, span.turn_count);
            assert!(
                theirs
                    .iter()
                    .any(|x| x.starts_with("- Lines in hello.py: 6")),
                "{theirs:?}"
            );
            assert!(
                !theirs.iter().any(|x| x.starts_with("Subagent findings")),
                "the parent's answer is its own: {theirs:?}"
            );
        }
    }
}
