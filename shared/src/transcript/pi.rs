//! pi sessions (`~/.pi/agent/sessions/--<cwd>--/<ts>_<uuid>.jsonl`): a
//! `session` header, then `message` entries (user, assistant, toolResult,
//! bashExecution) and `compaction` summaries; v2+ entries form a tree by id,
//! which is read here in file order.

use serde_json::Value;

use super::builder::{fill, Builder};
use super::text::{content_text, said_something, str_at};
use super::{Records, Role};

pub(super) struct Pi;

impl Records for Pi {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        let ts = str_at(v, "timestamp");
        match str_at(v, "type").unwrap_or_default() {
            "session" => {
                let f = &mut b.facts;
                fill(&mut f.session_id, str_at(v, "id"));
                fill(&mut f.cwd, str_at(v, "cwd"));
                fill(&mut f.parent_session_id, str_at(v, "parentSession"));
                b.header_model(str_at(v, "modelId"));
            }
            "message" => message(b, v.get("message").unwrap_or(&Value::Null), line, ts),
            "compaction" => {
                b.turn(
                    Role::Summary,
                    str_at(v, "summary").unwrap_or_default(),
                    line,
                    ts,
                );
                let details = v.get("details").unwrap_or(&Value::Null);
                for key in ["readFiles", "modifiedFiles"] {
                    for path in details
                        .get(key)
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                    {
                        b.file(path.as_str().unwrap_or_default());
                    }
                }
            }
            "branch_summary" => {
                b.turn(
                    Role::Summary,
                    str_at(v, "summary").unwrap_or_default(),
                    line,
                    ts,
                );
            }
            "model_change" => b.header_model(str_at(v, "modelId")),
            // Settings, extension state and labels: nothing was said.
            "thinking_level_change" | "custom" | "custom_message" | "label" | "session_info" => {}
            _ => return false,
        }
        b.time(ts);
        true
    }
}

fn message(b: &mut Builder, m: &Value, line: u64, ts: Option<&str>) {
    let content = m.get("content").unwrap_or(&Value::Null);
    match str_at(m, "role") {
        Some("user") => {
            b.turn(Role::User, &content_text(content), line, ts);
        }
        Some("assistant") => {
            let model = str_at(m, "model").filter(|_| said_something(content));
            fill(&mut b.facts.model, model);
            b.turn(Role::Assistant, &content_text(content), line, ts);
            for block in content.as_array().into_iter().flatten() {
                if str_at(block, "type") != Some("toolCall") {
                    continue;
                }
                let name = str_at(block, "name").unwrap_or("tool");
                let args = block.get("arguments").unwrap_or(&Value::Null);
                let keys = ["path", "file_path"];
                b.tool_use(
                    str_at(block, "id"),
                    name,
                    args,
                    &keys,
                    name == "bash",
                    line,
                    ts,
                );
            }
        }
        Some("toolResult") => {
            let text = content_text(content);
            b.result(
                str_at(m, "toolCallId"),
                str_at(m, "toolName"),
                &text,
                line,
                ts,
            );
        }
        // A command the person ran with `!`: a tool run, typed by them.
        Some("bashExecution") => {
            let command = str_at(m, "command").unwrap_or_default();
            b.command(command);
            let output = str_at(m, "output").unwrap_or_default();
            b.call(
                None,
                "bash",
                &format!("bash: {command}\n{output}"),
                None,
                line,
                ts,
            );
        }
        Some("branchSummary" | "compactionSummary") => {
            b.turn(
                Role::Summary,
                str_at(m, "summary").unwrap_or_default(),
                line,
                ts,
            );
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, own, third_party};
    use super::super::{parse, Format, Role, Transcript};

    /// The repository's pi session `name` (in its project folder).
    fn pi(name: &str) -> Transcript {
        own(&format!("pi/--home-sam-src-notes-site--/{name}"))
    }

    const V1: &str = "2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl";
    const V3: &str = "2026-05-12T07-45-31-902Z_0c7d1e9a-36f2-4b58-a1c4-9e2b5f7d8a63.jsonl";

    fn entry(body: &str) -> String {
        format!(
            "{{\"type\":\"message\",\"timestamp\":\"2025-01-01T00:00:00Z\",\"message\":{body}}}\n"
        )
    }

    #[test]
    fn entries_table() {
        let call = entry("{\"role\":\"assistant\",\"model\":\"m\",\"content\":[{\"type\":\"thinking\",\"thinking\":\"hidden\"},{\"type\":\"text\",\"text\":\"Reading.\"},{\"type\":\"toolCall\",\"id\":\"c1\",\"name\":\"read\",\"arguments\":{\"path\":\"src/a.ts\"}}]}");
        let result = entry("{\"role\":\"toolResult\",\"toolCallId\":\"c1\",\"toolName\":\"read\",\"content\":[{\"type\":\"text\",\"text\":\"export {}\"},{\"type\":\"image\",\"data\":\"iVBOR\"}]}");
        let cases: &[(String, &str)] = &[
            (entry("{\"role\":\"user\",\"content\":\"hello\"}"), "user 1-1: hello"),
            (
                [call, result.clone()].concat(),
                "assistant 1-1: Reading.
                 tool 1-2 [read]: read: src/a.ts⏎export {}",
            ),
            (result, "tool 1-1 [read]: export {}"),
            (
                entry("{\"role\":\"bashExecution\",\"command\":\"ls\",\"output\":\"README.md\\n\",\"exitCode\":0}"),
                "tool 1-1 [bash]: bash: ls⏎README.md",
            ),
            (
                "{\"type\":\"compaction\",\"summary\":\"so far\",\"details\":{\"readFiles\":[\"/r\"],\"modifiedFiles\":[\"/m\"]}}\n".to_owned(),
                "summary 1-1: so far",
            ),
            (
                "{\"type\":\"thinking_level_change\",\"thinkingLevel\":\"high\"}\n".to_owned(),
                "",
            ),
        ];
        for (input, expect) in cases {
            let t = check(Format::Pi, input, expect);
            assert_eq!(t.n_skipped_lines, 0, "{input}");
        }
    }

    #[test]
    fn concatenated_line_keeps_its_second_record() {
        // Line 21 is `{…assistant message…}{…compaction…}` with no newline.
        let t = pi(V1);
        let on_21: Vec<_> = t.turns.iter().filter(|x| x.line_start == 21).collect();
        assert_eq!(on_21.len(), 2);
        assert_eq!(on_21[0].role, Role::Assistant);
        assert!(on_21[0]
            .text
            .starts_with("Done: posts.ts reads each front-matter day"));
        assert_eq!(on_21[1].role, Role::Summary);
        assert!(on_21[1].text.starts_with("## Goal\nFix RSS pubDate values"));
        assert_eq!(
            t.turns.iter().filter(|x| x.role == Role::Summary).count(),
            1
        );
        assert_eq!(t.n_skipped_lines, 0);

        let Some(t) = third_party("pi/badlogic__pi-mono__compact.jsonl") else {
            return;
        };
        let on_1013: Vec<_> = t.turns.iter().filter(|x| x.line_start == 1013).collect();
        assert_eq!(on_1013.len(), 2);
        assert_eq!(on_1013[0].role, Role::Assistant);
        assert!(on_1013[0]
            .text
            .starts_with("Done. Removed the \"Common patterns\" section"));
        assert_eq!(on_1013[1].role, Role::Summary);
        assert!(on_1013[1].text.starts_with(
            "# Conversation Summary: Agent Compaction & Hooks Documentation Refinement"
        ));
        assert_eq!(
            t.turns.iter().filter(|x| x.role == Role::Summary).count(),
            2
        );
        assert_eq!(t.n_skipped_lines, 0);
    }

    /// (line_start, line_end, first line of text) of the first tool turn.
    fn first_tool(t: &Transcript) -> Option<(u64, u64, &str)> {
        let first = t.turns.iter().find(|x| x.role == Role::Tool)?;
        Some((
            first.line_start,
            first.line_end,
            first.text.lines().next().unwrap_or_default(),
        ))
    }

    #[test]
    fn session_facts_and_joined_tool_turns() {
        let t = pi(V1);
        assert_eq!(
            t.session_id.as_deref(),
            Some("e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e")
        );
        assert_eq!(t.cwd.as_deref(), Some("/home/sam/src/notes-site"));
        // The first model that said something; a later model_change does not
        // rename the session.
        assert_eq!(t.model.as_deref(), Some("claude-sonnet-4-6"));
        assert!(t
            .intent
            .as_deref()
            .is_some_and(|i| i.starts_with("the RSS feed puts every post at midnight UTC")));
        assert_eq!(t.tools_used, ["bash", "edit", "read", "write"]);
        // 7 tool calls by the model, 1 command run by the person.
        assert_eq!(t.tool_call_count, 8);
        assert_eq!(
            first_tool(&t),
            Some((
                3,
                4,
                "bash: cd /home/sam/src/notes-site && grep -rn \"pubDate\" build/"
            ))
        );
        // The person's `!npm run build` is a tool run of its own line.
        assert!(t.turns.iter().any(|x| x.role == Role::Tool
            && (x.line_start, x.line_end) == (14, 14)
            && x.text.starts_with("bash: npm run build")));
        // Files from tool arguments and from the compaction's details.
        assert_eq!(
            t.files_touched,
            [
                "/home/sam/src/notes-site/README.md",
                "/home/sam/src/notes-site/build/date.ts",
                "/home/sam/src/notes-site/build/feed.ts",
                "/home/sam/src/notes-site/build/posts.ts"
            ]
        );

        let Some(t) = third_party("pi/badlogic__pi-mono__compact.jsonl") else {
            return;
        };
        assert_eq!(
            t.session_id.as_deref(),
            Some("2638daee-0588-4baa-bd33-68b4c002818e")
        );
        assert_eq!(t.cwd.as_deref(), Some("/Users/badlogic/workspaces/pi-mono"));
        assert_eq!(t.model.as_deref(), Some("claude-opus-4-5"));
        assert_eq!(
            t.intent.as_deref(),
            Some("https://github.com/badlogic/pi-mono/issues/288")
        );
        assert_eq!(t.tools_used, ["bash", "edit", "read", "write"]);
        // 432 tool calls by the model, 1 command run by the person.
        assert_eq!(t.tool_call_count, 433);
        assert_eq!(
            first_tool(&t),
            Some((
                3,
                4,
                "bash: cd /Users/badlogic/workspaces/pi-mono && gh issue view 288 --comments"
            ))
        );
        assert!(t.files_touched.contains(
            &"/Users/badlogic/workspaces/pi-mono/packages/coding-agent/src/core/sdk.ts".to_owned()
        ));
    }

    #[test]
    fn entries_older_than_the_header_widen_the_time_span() {
        // The header says 19:20:07.530; the first entries were written before.
        let t = pi(V1);
        assert_eq!(t.started_at.as_deref(), Some("2026-05-07T19:20:05.118Z"));

        let Some(t) = third_party("pi/badlogic__pi-mono__before-compaction.jsonl") else {
            return;
        };
        // The header says 2025-12-09T00:53:29.825Z; the entries began earlier.
        assert_eq!(t.started_at.as_deref(), Some("2025-12-08T22:41:05.306Z"));
        assert_eq!(t.model.as_deref(), Some("claude-opus-4-5"));
    }

    #[test]
    fn header_model_is_the_fallback() {
        let input = "{\"type\":\"session\",\"id\":\"s\",\"modelId\":\"from-header\"}\n";
        assert_eq!(
            parse(Format::Pi, input.as_bytes()).model.as_deref(),
            Some("from-header")
        );
        let Some(t) = third_party("pi/badlogic__pi-mono__large-session.jsonl") else {
            return;
        };
        assert_eq!(t.model.as_deref(), Some("claude-sonnet-4-5"));
    }

    #[test]
    fn a_v3_tree_reads_in_file_order_with_its_branch_summary() {
        // Entries have ids and parent ids; the person went back to line 4
        // and asked again, which pi records as a branch summary (line 8).
        let t = pi(V3);
        let turns: Vec<_> = t
            .turns
            .iter()
            .map(|x| (x.role, x.line_start, x.line_end))
            .collect();
        assert_eq!(
            turns,
            [
                (Role::User, 4, 4),
                (Role::Tool, 5, 6),
                (Role::Assistant, 7, 7),
                (Role::Summary, 8, 8),
                (Role::Assistant, 9, 9),
                (Role::Tool, 9, 10),
                (Role::Assistant, 11, 11),
            ]
        );
        assert_eq!(
            t.session_id.as_deref(),
            Some("0c7d1e9a-36f2-4b58-a1c4-9e2b5f7d8a63")
        );
        assert_eq!(t.model.as_deref(), Some("claude-sonnet-4-6"));
        assert_eq!(t.n_skipped_lines, 0, "session_info and settings are known");
    }
}
