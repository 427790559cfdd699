//! Codex rollouts: `{timestamp, type, payload}` lines. User text comes from
//! `event_msg.user_message`, assistant text and tool calls from
//! `response_item` (the same text appears in both streams; one is enough).

use serde_json::Value;

use super::claude::summarize_input;
use super::{Builder, Role};

pub(super) fn record(b: &mut Builder, v: &Value, line: u64) -> bool {
    let ts = v.get("timestamp").and_then(Value::as_str);
    let p = v.get("payload").unwrap_or(&Value::Null);
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    b.time(ts);
    match kind {
        "session_meta" => {
            let m = b.meta();
            Builder::set(&mut m.session_id, p.get("id").and_then(Value::as_str));
            Builder::set(&mut m.cwd, p.get("cwd").and_then(Value::as_str));
            Builder::set(
                &mut m.agent_version,
                p.get("cli_version").and_then(Value::as_str),
            );
            Builder::set(
                &mut m.git_branch,
                p.pointer("/git/branch").and_then(Value::as_str),
            );
            let parent = p
                .pointer("/source/subagent/thread_spawn/parent_thread_id")
                .or_else(|| v.get("parent_thread_id"))
                .and_then(Value::as_str);
            Builder::set(&mut m.parent_session_id, parent);
        }
        "turn_context" => {
            let m = b.meta();
            Builder::set(&mut m.model, p.get("model").and_then(Value::as_str));
            Builder::set(&mut m.cwd, p.get("cwd").and_then(Value::as_str));
        }
        "event_msg" => match p.get("type").and_then(Value::as_str) {
            Some("user_message") => {
                if let Some(text) = str_of(p, "message") {
                    b.push(Role::User, text, line, ts, vec![]);
                }
            }
            Some("patch_apply_end") => {
                for path in p
                    .get("changes")
                    .and_then(Value::as_object)
                    .into_iter()
                    .flat_map(|c| c.keys())
                {
                    b.file(path);
                }
            }
            _ => {}
        },
        "response_item" => response_item(b, p, line, ts),
        "compacted" => {
            if let Some(text) = str_of(p, "message") {
                b.push(Role::Summary, text, line, ts, vec![]);
            }
        }
        _ => return false,
    }
    true
}

fn response_item(b: &mut Builder, p: &Value, line: u64, ts: Option<&str>) {
    match p.get("type").and_then(Value::as_str) {
        Some("message") if p.get("role").and_then(Value::as_str) == Some("assistant") => {
            let text = super::text_of(p.get("content").unwrap_or(&Value::Null));
            b.push(Role::Assistant, text, line, ts, vec![]);
        }
        Some("function_call" | "custom_tool_call" | "local_shell_call") => {
            let name = p
                .get("name")
                .and_then(Value::as_str)
                .unwrap_or("shell")
                .to_owned();
            let input = match p.get("arguments").or_else(|| p.get("input")) {
                Some(Value::String(s)) => serde_json::from_str::<Value>(s)
                    .map(|v| summarize_input(&v))
                    .unwrap_or_else(|_| s.clone()),
                Some(other) => summarize_input(other),
                None => summarize_input(p.get("action").unwrap_or(&Value::Null)),
            };
            for l in input.lines() {
                for prefix in ["*** Update File: ", "*** Add File: ", "*** Delete File: "] {
                    if let Some(path) = l.strip_prefix(prefix) {
                        b.file(path.trim());
                    }
                }
            }
            b.tool(&name);
            b.push(Role::Tool, format!("{name}: {input}"), line, ts, vec![name]);
        }
        Some("function_call_output" | "custom_tool_call_output") => {
            let out = match p.get("output") {
                Some(Value::String(s)) => s.clone(),
                Some(other) => other.to_string(),
                None => String::new(),
            };
            if !b.extend_last(Role::Tool, &out, line) {
                b.push(Role::Tool, out, line, ts, vec![]);
            }
        }
        _ => {}
    }
}
