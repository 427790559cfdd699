//! Transcript formats -> turns: what Claude Code, Codex and pi wrote, read
//! line by line into user / assistant / tool / summary turns with their
//! source line ranges, plus facts about the run (model, ids, files, tools).
//! Never fails: unknown or malformed lines are counted and skipped.

mod claude;
mod codex;
mod pi;

use std::collections::BTreeSet;

use serde_json::Value;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    ClaudeCode,
    Codex,
    Pi,
    /// Generic JSONL: string fields `text`, `content` or `message`.
    Other,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    User,
    Assistant,
    /// A tool call and/or its result.
    Tool,
    /// A compaction summary: written by the agent, not the user.
    Summary,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
            Role::Summary => "summary",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub role: Role,
    pub text: String,
    /// 1-based, inclusive lines of the parsed bytes.
    pub line_start: u64,
    pub line_end: u64,
    pub timestamp: Option<String>,
    pub tool_names: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct Transcript {
    pub turns: Vec<Turn>,
    pub model: Option<String>,
    pub session_id: Option<String>,
    pub parent_session_id: Option<String>,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    pub agent_version: Option<String>,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// First real user message, at most 500 characters.
    pub intent: Option<String>,
    pub files_touched: Vec<String>,
    pub tools_used: Vec<String>,
    pub tool_call_count: u64,
    pub n_lines: u64,
    pub n_skipped_lines: u64,
}

/// Tool output is capped before indexing: it dominates transcripts by size
/// and matters far less for recall than what the people and models said.
pub const MAX_TOOL_TEXT: usize = 8000;
const MAX_INTENT: usize = 500;

/// Accumulates a transcript while a format walks the records.
#[derive(Default)]
pub(crate) struct Builder {
    t: Transcript,
    files: BTreeSet<String>,
    tools: BTreeSet<String>,
}

impl Builder {
    pub(crate) fn push(
        &mut self,
        role: Role,
        text: String,
        line: u64,
        ts: Option<&str>,
        tools: Vec<String>,
    ) {
        let text = if role == Role::Tool {
            truncate_chars(&text, MAX_TOOL_TEXT)
        } else {
            text
        };
        if text.trim().is_empty() {
            return;
        }
        if role == Role::User && self.t.intent.is_none() {
            self.t.intent = Some(truncate_chars(text.trim(), MAX_INTENT));
        }
        self.t.turns.push(Turn {
            role,
            text,
            line_start: line,
            line_end: line,
            timestamp: ts.map(str::to_owned),
            tool_names: tools,
        });
    }

    /// Appends to the last turn when it has this role (a message split over lines).
    pub(crate) fn extend_last(&mut self, role: Role, text: &str, line: u64) -> bool {
        match self.t.turns.last_mut() {
            Some(last) if last.role == role => {
                if !text.trim().is_empty() {
                    last.text.push('\n');
                    last.text.push_str(text);
                }
                last.line_end = line;
                true
            }
            _ => false,
        }
    }

    pub(crate) fn tool(&mut self, name: &str) {
        self.t.tool_call_count += 1;
        self.tools.insert(name.to_owned());
    }

    pub(crate) fn file(&mut self, path: &str) {
        if !path.is_empty() {
            self.files.insert(path.to_owned());
        }
    }

    pub(crate) fn time(&mut self, ts: Option<&str>) {
        let Some(ts) = ts.and_then(crate::timestamp::normalize) else {
            return;
        };
        if self.t.started_at.as_ref().is_none_or(|s| ts < *s) {
            self.t.started_at = Some(ts.clone());
        }
        if self.t.ended_at.as_ref().is_none_or(|e| ts > *e) {
            self.t.ended_at = Some(ts);
        }
    }

    pub(crate) fn set(field: &mut Option<String>, v: Option<&str>) {
        if field.is_none() {
            if let Some(v) = v.filter(|v| !v.is_empty()) {
                *field = Some(v.to_owned());
            }
        }
    }

    pub(crate) fn meta(&mut self) -> &mut Transcript {
        &mut self.t
    }

    fn finish(mut self) -> Transcript {
        self.t.files_touched = self.files.into_iter().collect();
        self.t.tools_used = self.tools.into_iter().collect();
        self.t
    }
}

pub(crate) fn truncate_chars(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => s[..i].to_owned(),
        None => s.to_owned(),
    }
}

/// Text of a content value: a string, or an array of `{type:"text", text}` blocks.
pub(crate) fn text_of(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b {
                Value::String(s) => Some(s.as_str()),
                _ => b.get("text").and_then(Value::as_str),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

pub fn parse(format: Format, bytes: &[u8]) -> Transcript {
    let mut b = Builder::default();
    // A trailing newline ends the last line; it does not start another.
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    if !body.is_empty() {
        b.t.n_lines = body.split(|&c| c == b'\n').count() as u64;
    }
    for (idx, line) in body.split(|&c| c == b'\n').enumerate() {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line_no = idx as u64 + 1;
        let mut any = false;
        for record in serde_json::Deserializer::from_slice(line).into_iter::<Value>() {
            match record {
                Ok(v) => {
                    any = true;
                    let known = match format {
                        Format::ClaudeCode => claude::record(&mut b, &v, line_no),
                        Format::Codex => codex::record(&mut b, &v, line_no),
                        Format::Pi => pi::record(&mut b, &v, line_no),
                        Format::Other => other(&mut b, &v, line_no),
                    };
                    if !known {
                        b.t.n_skipped_lines += 1;
                    }
                }
                Err(_) => {
                    if !any {
                        b.t.n_skipped_lines += 1;
                    }
                    break;
                }
            }
        }
    }
    b.finish()
}

fn other(b: &mut Builder, v: &Value, line: u64) -> bool {
    let ts = v.get("timestamp").and_then(Value::as_str);
    b.time(ts);
    for key in ["text", "content", "message"] {
        if let Some(s) = v.get(key).and_then(Value::as_str) {
            b.push(Role::User, s.to_owned(), line, ts, vec![]);
            return true;
        }
    }
    false
}
