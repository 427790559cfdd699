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
/// The shell command a tool call's input runs: `command` or `cmd`, as a
/// string or an argv (`["bash", "-lc", "ls"]` is `ls`).
pub(super) fn shell_command(input: &Value) -> Option<String> {
    let value = input.get("command").or_else(|| input.get("cmd"))?;
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Array(argv) => {
            let argv: Vec<&str> = argv.iter().filter_map(Value::as_str).collect();
            match argv.as_slice() {
                [shell, flag, script] if shell.ends_with("sh") && flag.starts_with('-') => {
                    Some((*script).to_owned())
                }
                [] => None,
                words => Some(words.join(" ")),
            }
        }
        _ => None,
    }
}

pub(super) fn call_line(name: &str, input: &str) -> String {
    if input.trim().is_empty() {
        name.to_owned()
    } else {
        format!("{name}: {input}")
    }
}

/// The first `max` characters of `s`, cut on a char boundary.
/// Longest title, in characters, before the cut.
const MAX_TITLE_CHARS: usize = 80;

/// A person's prompt as a title: its first line that says something, cut
/// at a word boundary; `None` for a slash or shell command, injected markup
/// or a prompt that is only a redaction.
pub(super) fn title_of(prompt: &str) -> Option<String> {
    // Direction overrides would make a title read as other text than it is.
    let prompt: String = prompt
        .chars()
        .filter(|c| !super::is_bidi_control(*c))
        .collect();
    let prompt = prompt.trim();
    if prompt.starts_with(['/', '!', '<']) {
        return None;
    }
    let line = prompt.lines().map(str::trim).find(|line| {
        let without_marks = line
            .split("[REDACTED:")
            .map(|part| part.split_once(']').map_or(part, |(_, rest)| rest))
            .collect::<String>();
        without_marks
            .chars()
            .any(|c| c.is_alphanumeric() && c != '*')
    })?;
    if line.chars().count() <= MAX_TITLE_CHARS {
        return Some(line.to_owned());
    }
    let cut = truncate_chars(line, MAX_TITLE_CHARS);
    let cut = match cut.rfind(char::is_whitespace) {
        Some(i) if i > MAX_TITLE_CHARS / 2 => &cut[..i],
        _ => cut,
    };
    Some(format!(
        "{}…",
        cut.trim_end_matches(|c: char| !c.is_alphanumeric())
    ))
}

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

    #[test]
    fn titles_are_what_a_person_asked() {
        let long = "Please look at the failing integration test in the capture module and tell me why it hangs";
        let cases: &[(&str, Option<&str>)] = &[
            ("fix the login bug", Some("fix the login bug")),
            ("  \n\nwhy is CI red?\nmore detail", Some("why is CI red?")),
            ("/review the parser", None),
            ("!ls -la", None),
            ("<command-name>/clear</command-name>", None),
            ("[REDACTED:aws_key]***", None),
            ("[REDACTED:token]\nnow deploy it", Some("now deploy it")),
            ("", None),
            ("fix \u{202e}gnp.exe\u{202c} now", Some("fix gnp.exe now")),
            (long, Some("Please look at the failing integration test in the capture module and tell me…")),
        ];
        for (prompt, want) in cases {
            assert_eq!(title_of(prompt).as_deref(), *want, "{prompt:?}");
        }
        assert!(title_of(long).is_some_and(|t| t.chars().count() <= MAX_TITLE_CHARS + 1));
    }
}
