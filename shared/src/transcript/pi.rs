//! pi sessions: a `session` header, then `message` entries (user, assistant,
//! toolResult) and `compaction` summaries; v2+ entries form a tree by id.

use serde_json::Value;

use super::claude::summarize_input;
use super::{text_of, Builder, Role};

pub(super) fn record(b: &mut Builder, v: &Value, line: u64) -> bool {
    let ts = v.get("timestamp").and_then(Value::as_str);
    b.time(ts);
    match v.get("type").and_then(Value::as_str).unwrap_or_default() {
        "session" => {
            let m = b.meta();
            Builder::set(&mut m.session_id, v.get("id").and_then(Value::as_str));
            Builder::set(&mut m.cwd, v.get("cwd").and_then(Value::as_str));
            Builder::set(&mut m.model, v.get("modelId").and_then(Value::as_str));
            Builder::set(
                &mut m.parent_session_id,
                v.get("parentSession").and_then(Value::as_str),
            );
        }
        "message" => message(b, v.get("message").unwrap_or(&Value::Null), line, ts),
        "compaction" | "branch_summary" => {
            let text = v
                .get("summary")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            b.push(Role::Summary, text, line, ts, vec![]);
            for key in ["readFiles", "modifiedFiles"] {
                for f in v
                    .pointer(&format!("/details/{key}"))
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    b.file(f.as_str().unwrap_or_default());
                }
            }
        }
        "model_change"
        | "thinking_level_change"
        | "custom"
        | "custom_message"
        | "label"
        | "session_info" => {}
        _ => return false,
    }
    true
}

fn message(b: &mut Builder, m: &Value, line: u64, ts: Option<&str>) {
    let content = m.get("content").unwrap_or(&Value::Null);
    match m.get("role").and_then(Value::as_str) {
        Some("user") => b.push(Role::User, text_of(content), line, ts, vec![]),
        Some("assistant") => {
            Builder::set(&mut b.meta().model, m.get("model").and_then(Value::as_str));
            let text = content
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|c| c.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n");
            b.push(Role::Assistant, text, line, ts, vec![]);
            for call in content.as_array().into_iter().flatten() {
                if call.get("type").and_then(Value::as_str) != Some("toolCall") {
                    continue;
                }
                let name = call
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or("tool")
                    .to_owned();
                let args = call.get("arguments").unwrap_or(&Value::Null);
                if let Some(p) = args.get("path").and_then(Value::as_str) {
                    b.file(p);
                }
                b.tool(&name);
                b.push(
                    Role::Tool,
                    format!("{name}: {}", summarize_input(args)),
                    line,
                    ts,
                    vec![name],
                );
            }
        }
        Some("toolResult") => {
            let text = text_of(content);
            if !b.extend_last(Role::Tool, &text, line) {
                b.push(Role::Tool, text, line, ts, vec![]);
            }
        }
        Some("bashExecution") => {
            let cmd = m.get("command").and_then(Value::as_str).unwrap_or_default();
            let out = m.get("output").and_then(Value::as_str).unwrap_or_default();
            b.push(
                Role::Tool,
                format!("bash: {cmd}\n{out}"),
                line,
                ts,
                vec!["bash".into()],
            );
        }
        _ => {}
    }
}
