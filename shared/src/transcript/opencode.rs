//! OpenCode (sst) sessions, read from the journal kith keeps of them.
//!
//! OpenCode rewrites what it stores (rows of `opencode.db` updated in
//! place; before v1.2, JSON files under `storage/` rewritten whole), so the
//! agent appends one line per row each time the row changes, and one
//! removal line when it disappears:
//!
//! ```text
//! {"kind":"session","id":"ses_1","parent_id":null,"data":{…}}
//! {"kind":"message","id":"msg_1","session_id":"ses_1","time_updated":…,"data":{…}}
//! {"kind":"part","id":"prt_1","message_id":"msg_1","session_id":"ses_1","time_updated":…,"data":{…}}
//! {"kind":"removed","key":"part:prt_1"}
//! ```
//!
//! `data` is the row's JSON as OpenCode stored it. The lines fold to the
//! last version of each row; a removed row (a reverted message and its
//! parts) is gone. Each live part is a turn, in conversation order (the
//! order rows first appeared), at the line of its first copy, with what
//! its last copy says.

use std::collections::HashMap;

use serde_json::Value;

use super::builder::{fill, Builder};
use super::text::str_at;
use super::{Records, Role};

#[derive(Default)]
pub(super) struct OpenCode {
    messages: HashMap<String, Row>,
    parts: HashMap<String, Row>,
}

/// The live version of one message or part row.
struct Row {
    data: Value,
    /// The message a part belongs to.
    message_id: Option<String>,
    /// The line where the row first appeared (since it was last removed):
    /// its place in the conversation.
    first_line: u64,
}

impl OpenCode {
    fn put(&mut self, kind: &str, v: &Value, line: u64) -> bool {
        let (Some(id), Some(data)) = (str_at(v, "id"), v.get("data")) else {
            return false;
        };
        let rows = if kind == "message" {
            &mut self.messages
        } else {
            &mut self.parts
        };
        let first_line = rows.get(id).map_or(line, |r| r.first_line);
        rows.insert(
            id.to_owned(),
            Row {
                data: data.clone(),
                message_id: str_at(v, "message_id").map(str::to_owned),
                first_line,
            },
        );
        true
    }
}

impl Records for OpenCode {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        match str_at(v, "kind") {
            Some("session") => {
                session(b, v);
                true
            }
            Some(kind @ ("message" | "part")) => self.put(kind, v, line),
            Some("removed") => {
                match str_at(v, "key").and_then(|k| k.split_once(':')) {
                    Some(("message", id)) => self.messages.remove(id),
                    Some(("part", id)) => self.parts.remove(id),
                    _ => None,
                };
                true
            }
            _ => false,
        }
    }

    fn finish(self, b: &mut Builder) {
        let mut parts: HashMap<&str, Vec<&Row>> = HashMap::new();
        for part in self.parts.values() {
            if let Some(message) = &part.message_id {
                parts.entry(message).or_default().push(part);
            }
        }
        let mut messages: Vec<(&String, &Row)> = self.messages.iter().collect();
        messages.sort_by_key(|(_, r)| r.first_line);
        for (id, m) in messages {
            let role = message(b, &m.data);
            let mut mine = parts.remove(id.as_str()).unwrap_or_default();
            mine.sort_by_key(|r| r.first_line);
            for row in mine {
                part(b, role, &m.data, row);
            }
        }
    }
}

/// The session row: its ids, folder, version and times.
fn session(b: &mut Builder, v: &Value) {
    let data = v.get("data").unwrap_or(&Value::Null);
    fill(&mut b.facts.session_id, str_at(v, "id"));
    fill(&mut b.facts.parent_session_id, str_at(v, "parent_id"));
    fill(&mut b.facts.cwd, str_at(data, "directory"));
    fill(&mut b.facts.agent_version, str_at(data, "version"));
    // A database row has its times as columns, a storage file under `time`.
    for time in [
        data.get("time_created"),
        data.get("time_updated"),
        data.pointer("/time/created"),
        data.pointer("/time/updated"),
    ] {
        b.time(millis(time).as_deref());
    }
}

/// A message's facts (model, folder, times); answers its role.
fn message(b: &mut Builder, data: &Value) -> Role {
    let model =
        str_at(data, "modelID").or_else(|| data.pointer("/model/modelID").and_then(Value::as_str));
    fill(&mut b.facts.model, model);
    fill(
        &mut b.facts.cwd,
        data.pointer("/path/cwd").and_then(Value::as_str),
    );
    for key in ["created", "completed"] {
        b.time(millis(data.pointer(&format!("/time/{key}"))).as_deref());
    }
    match str_at(data, "role") {
        Some("user") => Role::User,
        _ => Role::Assistant,
    }
}

/// One part of a message: text said, a tool call with its result, or the
/// files a patch changed. Reasoning, step markers and snapshots are not
/// read; neither is text OpenCode itself injected (`synthetic`).
fn part(b: &mut Builder, role: Role, message: &Value, row: &Row) {
    let p = &row.data;
    let line = row.first_line;
    let ts = millis(p.pointer("/time/start")).or_else(|| millis(message.pointer("/time/created")));
    b.time(ts.as_deref());
    b.time(millis(p.pointer("/time/end")).as_deref());
    match str_at(p, "type") {
        Some("text") if !is_true(p, "synthetic") && !is_true(p, "ignored") => {
            let text = str_at(p, "text").unwrap_or_default();
            b.turn(role, text, line, ts.as_deref());
        }
        Some("tool") => tool(b, p, line, ts.as_deref()),
        Some("patch") => {
            for file in p
                .get("files")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                b.file(file);
            }
        }
        _ => {}
    }
}

/// A tool part holds its call and, once finished, its output or error.
fn tool(b: &mut Builder, p: &Value, line: u64, ts: Option<&str>) {
    let name = str_at(p, "tool").unwrap_or("tool");
    let state = p.get("state").unwrap_or(&Value::Null);
    let input = state.get("input").unwrap_or(&Value::Null);
    let id = str_at(p, "callID");
    let keys = ["filePath", "file_path", "path"];
    b.tool_use(id, name, input, &keys, name == "bash", line, ts);
    let output = str_at(state, "output")
        .or_else(|| str_at(state, "error"))
        .unwrap_or_default();
    b.result(id, Some(name), output, line, ts);
}

fn is_true(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool) == Some(true)
}

/// OpenCode's times are milliseconds since the epoch.
fn millis(v: Option<&Value>) -> Option<String> {
    let ms = v?.as_i64()?;
    let t = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000).ok()?;
    Some(crate::timestamp::render(t))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{check, read_chain};
    use super::super::{parse, Format};

    const SESSION: &str = r#"{"kind":"session","id":"ses_1","parent_id":"ses_0","data":{"id":"ses_1","directory":"/home/sam/src/tally","version":"1.2.4","time_created":1767261600000,"time_updated":1767261660000}}"#;

    fn message(id: &str, role: &str) -> String {
        format!(
            r#"{{"kind":"message","id":"{id}","session_id":"ses_1","data":{{"role":"{role}","modelID":"claude-sonnet-4","time":{{"created":1767261601000}}}}}}"#
        )
    }

    fn part(id: &str, message: &str, data: &str) -> String {
        format!(
            r#"{{"kind":"part","id":"{id}","message_id":"{message}","session_id":"ses_1","data":{data}}}"#
        )
    }

    fn text(s: &str) -> String {
        format!(r#"{{"type":"text","text":"{s}","time":{{"start":1767261602000}}}}"#)
    }

    fn lines(lines: &[String]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn rows_fold_to_their_last_version_in_conversation_order() {
        let input = lines(&[
            SESSION.to_owned(),
            message("msg_1", "user"),
            part(
                "prt_1",
                "msg_1",
                &text("Why does parse_amount reject 1,200?"),
            ),
            message("msg_2", "assistant"),
            part("prt_2", "msg_2", &text("Look")),
            part(
                "prt_3",
                "msg_2",
                r#"{"type":"tool","tool":"bash","callID":"c1","state":{"status":"running","input":{"command":"cargo test parse"}}}"#,
            ),
            part("prt_2", "msg_2", &text("Looking at the parser.")),
            part(
                "prt_3",
                "msg_2",
                r#"{"type":"tool","tool":"bash","callID":"c1","state":{"status":"completed","input":{"command":"cargo test parse"},"output":"1 failed"}}"#,
            ),
            part("prt_4", "msg_2", r#"{"type":"reasoning","text":"hidden"}"#),
            part(
                "prt_5",
                "msg_2",
                r#"{"type":"patch","hash":"h","files":["src/parse.rs"]}"#,
            ),
            part("prt_6", "msg_2", &text("The comma is never stripped.")),
        ]);
        let t = check(
            Format::OpenCode,
            &input,
            "user 3-3: Why does parse_amount reject 1,200?
             assistant 5-5: Looking at the parser.
             tool 6-6 [bash]: bash: cargo test parse⏎1 failed
             assistant 11-11: The comma is never stripped.",
        );
        assert!(!t.turns.iter().any(|x| x.text.contains("hidden")));
        assert_eq!(t.session_id.as_deref(), Some("ses_1"));
        assert_eq!(t.parent_session_id.as_deref(), Some("ses_0"));
        assert_eq!(t.model.as_deref(), Some("claude-sonnet-4"));
        assert_eq!(t.agent_version.as_deref(), Some("1.2.4"));
        assert_eq!(t.files_touched, ["/home/sam/src/tally/src/parse.rs"]);
        assert_eq!(t.commands, ["cargo test parse"]);
        assert_eq!(t.tool_call_count, 1);
        assert_eq!(t.started_at.as_deref(), Some("2026-01-01T10:00:00.000Z"));
        assert_eq!(t.ended_at.as_deref(), Some("2026-01-01T10:01:00.000Z"));
        assert_eq!((t.n_lines, t.n_skipped_lines), (11, 0));
    }

    #[test]
    fn a_removed_message_or_part_leaves_no_turn() {
        let input = lines(&[
            SESSION.to_owned(),
            message("msg_1", "user"),
            part("prt_1", "msg_1", &text("first question")),
            message("msg_2", "assistant"),
            part("prt_2", "msg_2", &text("zeppelin answer")),
            part("prt_3", "msg_2", &text("kept answer")),
            r#"{"kind":"removed","key":"part:prt_2"}"#.to_owned(),
            message("msg_3", "user"),
            part("prt_4", "msg_3", &text("reverted question")),
            r#"{"kind":"removed","key":"message:msg_3"}"#.to_owned(),
            part("prt_5", "msg_3", &text("orphan of a removed message")),
            r#"{"kind":"removed","key":"part:nobody"}"#.to_owned(),
        ]);
        check(
            Format::OpenCode,
            &input,
            "user 3-3: first question
             assistant 6-6: kept answer",
        );
    }

    #[test]
    fn synthetic_text_and_unknown_lines_are_not_turns() {
        let input = lines(&[
            message("msg_1", "user"),
            part(
                "prt_1",
                "msg_1",
                r#"{"type":"text","text":"Called the Read tool","synthetic":true}"#,
            ),
            part("prt_2", "msg_1", &text("the real prompt")),
            r#"{"kind":"from-the-future"}"#.to_owned(),
            r#"{"kind":"part","id":"prt_9"}"#.to_owned(),
            "not json".to_owned(),
        ]);
        let t = check(Format::OpenCode, &input, "user 3-3: the real prompt");
        assert_eq!((t.n_lines, t.n_skipped_lines), (6, 3));
    }

    /// A part changed in a later delta stays where it first appeared, with
    /// its new text; a removal in a later delta drops a turn an earlier
    /// delta holds.
    #[test]
    fn a_chain_of_deltas_folds_as_one_journal() {
        let one = lines(&[
            message("msg_1", "user"),
            part("prt_1", "msg_1", &text("question")),
            message("msg_2", "assistant"),
            part("prt_2", "msg_2", &text("draft")),
            part("prt_3", "msg_2", &text("rewound")),
        ]);
        let two = lines(&[
            part("prt_2", "msg_2", &text("final")),
            r#"{"kind":"removed","key":"part:prt_3"}"#.to_owned(),
            part("prt_4", "msg_2", &text("after")),
        ]);
        let read = read_chain(Format::OpenCode, &[&one, &two]);
        assert_eq!(read, [vec!["2: question", "4: final"], vec!["3: after"]]);
    }

    /// The database OpenCode v1.2 writes, as its rows become journal lines.
    #[test]
    fn rows_as_stored_in_opencode_db_read_as_turns() {
        let input = lines(&[
            r#"{"kind":"message","id":"msg-user-sql-001","session_id":"test-session-123","time_updated":1706459830000,"data":{"role":"user","time":{"created":1706459830000},"agent":"coder","model":{"providerID":"openai","modelID":"gpt-5"}}}"#.to_owned(),
            r#"{"kind":"part","id":"prt-sql-001","message_id":"msg-user-sql-001","session_id":"test-session-123","time_updated":1706459830001,"data":{"type":"text","text":"Please update index.ts"}}"#.to_owned(),
            r#"{"kind":"message","id":"msg-assistant-sql-001","session_id":"test-session-123","time_updated":1706459835000,"data":{"role":"assistant","time":{"created":1706459831000,"completed":1706459835000},"modelID":"gpt-5","path":{"cwd":"/Users/test/project"}}}"#.to_owned(),
            r#"{"kind":"part","id":"prt-sql-003","message_id":"msg-assistant-sql-001","session_id":"test-session-123","time_updated":1706459833000,"data":{"type":"tool","tool":"edit","callID":"call-sql-001","state":{"status":"completed","input":{"filePath":"/Users/test/project/index.ts"},"output":"Edit applied"}}}"#.to_owned(),
        ]);
        let t = parse(Format::OpenCode, input.as_bytes());
        let said: Vec<&str> = t.turns.iter().map(|x| x.text.as_str()).collect();
        assert_eq!(
            said,
            [
                "Please update index.ts",
                "edit: /Users/test/project/index.ts\nEdit applied"
            ]
        );
        assert_eq!(t.model.as_deref(), Some("gpt-5"));
        assert_eq!(t.files_touched, ["/Users/test/project/index.ts"]);
        assert_eq!(t.started_at.as_deref(), Some("2024-01-28T16:37:10.000Z"));
    }
}
