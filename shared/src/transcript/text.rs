//! Readable text out of the JSON the agents write: content blocks, tool
//! inputs, and the injected reminder markup that is nobody's words.

use serde_json::Value;

/// The string at `key` of a JSON object, if it is one.
pub(super) fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The text of a message `content`: a string, or the text blocks of an array.
///
/// Only text is read: thinking, images, signatures and tool blocks are not
/// what a person searching their history typed or read.
pub(super) fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks_text(blocks),
        _ => String::new(),
    }
}

/// The text blocks among `blocks`, one paragraph each.
pub(super) fn blocks_text<'a>(blocks: impl IntoIterator<Item = &'a Value>) -> String {
    let mut out = String::new();
    for block in blocks {
        let text = match block {
            Value::String(s) => Some(s.as_str()),
            _ => match str_at(block, "type") {
                Some("text" | "input_text" | "output_text") => str_at(block, "text"),
                _ => None,
            },
        };
        if let Some(text) = text {
            push_paragraph(&mut out, text);
        }
    }
    out
}

/// Whether an assistant message has any content: an aborted request names a
/// model that never answered.
pub(super) fn said_something(content: &Value) -> bool {
    match content {
        Value::String(s) => !s.trim().is_empty(),
        Value::Array(blocks) => !blocks.is_empty(),
        _ => false,
    }
}

/// Appends `text` as a new paragraph, leaving out empty pieces so that the
/// separators never pile up.
pub(super) fn push_paragraph(out: &mut String, text: &str) {
    if text.trim().is_empty() {
        return;
    }
    if !out.trim().is_empty() {
        out.push_str("\n\n");
    }
    out.push_str(text);
}

/// `text` without its `<system-reminder>` spans: the agent injects them into
/// user and tool text for the model, and they would drown what was said.
pub(super) fn strip_reminders(text: &str) -> String {
    const OPEN: &str = "<system-reminder>";
    const CLOSE: &str = "</system-reminder>";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        out.push_str(&rest[..start]);
        let after = &rest[start + OPEN.len()..];
        // An unclosed reminder runs to the end of the text.
        rest = match after.find(CLOSE) {
            Some(end) => &after[end + CLOSE.len()..],
            None => "",
        };
    }
    out.push_str(rest);
    out
}

/// The inner text of the first `<tag>…</tag>` in `text`.
pub(super) fn tag<'a>(text: &'a str, name: &str) -> Option<&'a str> {
    let open = format!("<{name}>");
    let close = format!("</{name}>");
    let start = text.find(&open)? + open.len();
    let len = text[start..].find(&close)?;
    Some(&text[start..start + len])
}

/// Keys whose values say most about a tool call, shown first.
const LEAD_KEYS: [&str; 12] = [
    "command",
    "cmd",
    "file_path",
    "notebook_path",
    "pattern",
    "query",
    "url",
    "path",
    "skill",
    "subagent_type",
    "description",
    "prompt",
];

/// A tool input as one readable line: its strings, the telling keys first.
///
/// Numbers and booleans (timeouts, limits, flags) are left out: they are
/// noise to someone searching for what the agent did.
pub(super) fn input_summary(input: &Value) -> String {
    let mut parts = Vec::new();
    match input {
        Value::Object(map) => {
            for key in LEAD_KEYS {
                if let Some(v) = map.get(key) {
                    strings(v, &mut parts);
                }
            }
            for (key, v) in map {
                if !LEAD_KEYS.contains(&key.as_str()) {
                    strings(v, &mut parts);
                }
            }
        }
        other => strings(other, &mut parts),
    }
    parts.join(" ")
}

fn strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) if !s.trim().is_empty() => out.push(s),
        Value::Array(items) => items.iter().for_each(|item| strings(item, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// A tool call as the first line of its turn: `name: input`.
pub(super) fn call_line(name: &str, input: &str) -> String {
    if input.trim().is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {input}")
    }
}

/// The first `max` characters of `s`, cut on a char boundary.
pub(crate) fn truncate_chars(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn content_text_reads_text_blocks_only() {
        let cases = [
            (json!("plain"), "plain"),
            (
                json!([{"type":"text","text":"a"},{"type":"thinking","thinking":"secret"},
                       {"type":"image","source":{}},{"type":"output_text","text":"b"}]),
                "a\n\nb",
            ),
            (
                json!([{"type":"text","text":"  "},{"type":"text","text":"x"}]),
                "x",
            ),
            (json!(null), ""),
            (json!(42), ""),
        ];
        for (input, want) in cases {
            assert_eq!(content_text(&input), want, "{input}");
        }
    }

    #[test]
    fn strip_reminders_removes_every_span() {
        let cases = [
            ("hi", "hi"),
            ("<system-reminder>x</system-reminder>", ""),
            (
                "a<system-reminder>x</system-reminder>b<system-reminder>y</system-reminder>c",
                "abc",
            ),
            ("keep<system-reminder>never closed", "keep"),
        ];
        for (input, want) in cases {
            assert_eq!(strip_reminders(input), want, "{input}");
        }
    }

    #[test]
    fn input_summary_leads_with_telling_keys() {
        let cases = [
            (
                json!({"timeout": 30000, "description": "list", "command": "ls -la"}),
                "ls -la list",
            ),
            (
                json!({"questions": [{"question": "Which?", "options": [{"label": "A"}]}]}),
                "A Which?",
            ),
            (json!("*** Begin Patch"), "*** Begin Patch"),
            (json!({"session_id": 4, "chars": ""}), ""),
        ];
        for (input, want) in cases {
            assert_eq!(input_summary(&input), want, "{input}");
        }
    }

    #[test]
    fn truncate_chars_never_splits_a_char() {
        assert_eq!(truncate_chars("héllo", 2), "hé");
        assert_eq!(truncate_chars("日本語", 5), "日本語");
        assert_eq!(truncate_chars("", 3), "");
    }
}
