//! Claude Code: `~/.claude/projects/<cwd>/<session>.jsonl`. Tool results
//! arrive as `type:user` lines; one API message is split over several
//! `assistant` lines sharing `message.id`; meta lines are not text.

use serde_json::Value;

use super::{text_of, Builder, Role};

/// Returns false for records of a type this parser does not know.
pub(super) fn record(b: &mut Builder, v: &Value, line: u64) -> bool {
    let ts = v.get("timestamp").and_then(Value::as_str);
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    match kind {
        "user" | "assistant" => {}
        "system"
        | "summary"
        | "file-history-snapshot"
        | "progress"
        | "queue-operation"
        | "permission-mode"
        | "ai-title"
        | "last-prompt"
        | "attachment" => return true,
        _ => return false,
    }
    b.time(ts);
    let m = b.meta();
    Builder::set(
        &mut m.session_id,
        v.get("sessionId").and_then(Value::as_str),
    );
    Builder::set(&mut m.cwd, v.get("cwd").and_then(Value::as_str));
    Builder::set(
        &mut m.git_branch,
        v.get("gitBranch").and_then(Value::as_str),
    );
    Builder::set(
        &mut m.agent_version,
        v.get("version").and_then(Value::as_str),
    );
    let message = v.get("message").unwrap_or(&Value::Null);
    let content = message.get("content").unwrap_or(&Value::Null);
    if kind == "user" {
        user(b, v, content, line, ts);
    } else {
        assistant(b, message, content, line, ts);
    }
    true
}

fn user(b: &mut Builder, v: &Value, content: &Value, line: u64, ts: Option<&str>) {
    if v.get("isMeta").and_then(Value::as_bool) == Some(true) {
        return;
    }
    let results: Vec<&Value> = content
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter(|c| c.get("type").and_then(Value::as_str) == Some("tool_result"))
                .collect()
        })
        .unwrap_or_default();
    if !results.is_empty() {
        let text: Vec<String> = results
            .iter()
            .map(|r| text_of(r.get("content").unwrap_or(&Value::Null)))
            .collect();
        if let Some(path) = v
            .get("toolUseResult")
            .and_then(|r| {
                r.get("filePath")
                    .or_else(|| r.get("file").and_then(|f| f.get("filePath")))
            })
            .and_then(Value::as_str)
        {
            b.file(path);
        }
        if !b.extend_last(Role::Tool, &text.join("\n"), line) {
            b.push(Role::Tool, text.join("\n"), line, ts, vec![]);
        }
        return;
    }
    let text = text_of(content);
    let is_summary = v.get("isCompactSummary").and_then(Value::as_bool) == Some(true);
    if is_summary {
        b.push(Role::Summary, text, line, ts, vec![]);
    } else if !is_injected(&text) {
        b.push(Role::User, text, line, ts, vec![]);
    }
}

/// Text Claude Code writes into user lines that the person did not type.
fn is_injected(text: &str) -> bool {
    let t = text.trim_start();
    t.starts_with("<system-reminder>")
        || t.starts_with("<local-command-")
        || t.starts_with("<command-message>")
        || t.starts_with("Caveat: ")
        || t.starts_with("[Request interrupted")
}

fn assistant(b: &mut Builder, message: &Value, content: &Value, line: u64, ts: Option<&str>) {
    Builder::set(
        &mut b.meta().model,
        message
            .get("model")
            .and_then(Value::as_str)
            .filter(|m| *m != "<synthetic>"),
    );
    let mut texts = Vec::new();
    let mut tools = Vec::new();
    for block in content.as_array().into_iter().flatten() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
            ),
            Some("tool_use") => {
                let name = block.get("name").and_then(Value::as_str).unwrap_or("tool");
                let input = block.get("input").unwrap_or(&Value::Null);
                for key in ["file_path", "notebook_path", "path"] {
                    if let Some(p) = input.get(key).and_then(Value::as_str) {
                        b.file(p);
                    }
                }
                b.tool(name);
                tools.push((name.to_owned(), summarize_input(input)));
            }
            _ => {}
        }
    }
    if let Value::String(s) = content {
        texts.push(s.clone());
    }
    let text = texts.join("\n");
    if !text.trim().is_empty() && !b.extend_last(Role::Assistant, &text, line) {
        b.push(Role::Assistant, text, line, ts, vec![]);
    }
    for (name, input) in tools {
        b.push(Role::Tool, format!("{name}: {input}"), line, ts, vec![name]);
    }
}

/// A tool input as one readable line: its string values, not its JSON.
pub(super) fn summarize_input(input: &Value) -> String {
    match input {
        Value::Object(map) => map
            .values()
            .filter_map(|v| match v {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" "),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
