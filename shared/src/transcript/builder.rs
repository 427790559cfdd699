//! The accumulator every format parser feeds: turns in order of their first
//! line, the joins the formats need (one message written over several lines,
//! a tool call and its result), and the facts about the run.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::text::{
    call_line, input_summary, push_paragraph, shell_command, str_at, title_of, truncate_chars,
};
use super::{diff, Role, SubagentSpan, Transcript, Turn};

const MAX_INTENT_CHARS: usize = 500;

#[derive(Default)]
pub(super) struct Builder {
    turns: Vec<Turn>,
    /// Turn of each assistant message id: Claude Code writes one API message
    /// as several lines, and they must read as one turn.
    messages: HashMap<String, usize>,
    /// Turn of each tool call id, so that the result lands in its call's turn
    /// even when other lines come between them.
    calls: HashMap<String, usize>,
    files: BTreeSet<String>,
    tools: BTreeSet<String>,
    commands: Vec<String>,
    /// The model a session header announced; a model named by a message wins.
    header_model: Option<String>,
    /// The inline subagent the record being read belongs to: the turns it
    /// starts are that subagent's (`Turn::subagent`).
    pub(super) subagent: Option<String>,
    /// Run facts; `turns`, `files_touched`, `tools_used` and the counts of
    /// lines are filled in by `finish`.
    pub(super) facts: Transcript,
}

/// Sets `field` from `value` unless it is already set: the first mention wins.
pub(super) fn fill(field: &mut Option<String>, value: Option<&str>) {
    if field.is_none() {
        if let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) {
            *field = Some(v.to_owned());
        }
    }
}

impl Builder {
    /// Starts a new turn. Turns left empty are dropped by `finish`.
    pub(super) fn turn(&mut self, role: Role, text: &str, line: u64, ts: Option<&str>) -> usize {
        self.turns.push(Turn {
            role,
            text: text.to_owned(),
            line_start: line,
            line_end: line,
            timestamp: ts.map(str::to_owned),
            tool_names: Vec::new(),
            subagent: self.subagent.clone(),
            diff: None,
        });
        self.turns.len() - 1
    }

    /// A turn read from the lines `first..=last` at once (a markdown block).
    pub(super) fn block(
        &mut self,
        role: Role,
        text: &str,
        first: u64,
        last: u64,
        ts: Option<&str>,
    ) {
        let idx = self.turn(role, text, first, ts);
        self.turns[idx].line_end = last;
    }

    /// Adds one line's worth of an assistant message. Lines that share a
    /// message id become one turn spanning all of them, whatever came between.
    pub(super) fn message(&mut self, id: Option<&str>, text: &str, line: u64, ts: Option<&str>) {
        if let Some(&idx) = id.and_then(|id| self.messages.get(id)) {
            self.extend(idx, text, line);
            return;
        }
        let idx = self.turn(Role::Assistant, text, line, ts);
        if let Some(id) = id {
            self.messages.insert(id.to_owned(), idx);
        }
    }

    /// A tool call: its own turn, which its result will join, with the
    /// `diff` of the files it edits ([`Turn::diff`]).
    pub(super) fn call(
        &mut self,
        id: Option<&str>,
        name: &str,
        text: &str,
        diff: Option<String>,
        line: u64,
        ts: Option<&str>,
    ) {
        self.used(name);
        self.facts.tool_call_count += 1;
        let idx = self.turn(Role::Tool, text, line, ts);
        self.turns[idx].tool_names.push(name.to_owned());
        self.turns[idx].diff = diff;
        if let Some(id) = id {
            self.calls.insert(id.to_owned(), idx);
        }
    }

    /// A tool call from its JSON input, in the shape most agents write
    /// (a name and an object of arguments): the files its `file_keys`
    /// name, its command when `shell` (a shell tool), and its call turn
    /// with the diff its input makes, if it edits files.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn tool_use(
        &mut self,
        id: Option<&str>,
        name: &str,
        input: &Value,
        file_keys: &[&str],
        shell: bool,
        line: u64,
        ts: Option<&str>,
    ) {
        for key in file_keys {
            if let Some(path) = str_at(input, key) {
                self.file(path);
            }
        }
        if shell {
            if let Some(command) = shell_command(input) {
                self.command(&command);
            }
        }
        let text = call_line(name, &input_summary(input));
        self.call(id, name, &text, diff::of_input(input), line, ts);
    }

    /// A tool result: appended to its call's turn when the call is in the
    /// parsed bytes, else a turn of its own (the call was in an earlier delta).
    pub(super) fn result(
        &mut self,
        id: Option<&str>,
        name: Option<&str>,
        text: &str,
        line: u64,
        ts: Option<&str>,
    ) {
        if let Some(&idx) = id.and_then(|id| self.calls.get(id)) {
            let turn = &mut self.turns[idx];
            if !text.trim().is_empty() {
                if !turn.text.is_empty() {
                    turn.text.push('\n');
                }
                turn.text.push_str(text);
            }
            turn.line_end = turn.line_end.max(line);
            return;
        }
        let idx = self.turn(Role::Tool, text, line, ts);
        if let Some(name) = name.filter(|n| !n.is_empty()) {
            self.turns[idx].tool_names.push(name.to_owned());
        }
    }

    fn extend(&mut self, idx: usize, text: &str, line: u64) {
        let turn = &mut self.turns[idx];
        push_paragraph(&mut turn.text, text);
        turn.line_end = turn.line_end.max(line);
    }

    /// A tool or skill the run used, without counting a call.
    pub(super) fn used(&mut self, name: &str) {
        if !name.is_empty() && !self.tools.contains(name) {
            self.tools.insert(name.to_owned());
        }
    }

    /// A shell command run through a tool call.
    pub(super) fn command(&mut self, command: &str) {
        const MAX_COMMAND_CHARS: usize = 1000;
        const MAX_COMMANDS: usize = 1000;
        let command = truncate_chars(command.trim(), MAX_COMMAND_CHARS);
        if !command.is_empty()
            && self.commands.len() < MAX_COMMANDS
            && !self.commands.iter().any(|c| c == command)
        {
            self.commands.push(command.to_owned());
        }
    }

    pub(super) fn file(&mut self, path: &str) {
        let path = path.trim();
        if !path.is_empty() && !self.files.contains(path) {
            self.files.insert(path.to_owned());
        }
    }

    /// The span of inline subagent `id`, widened to hold `line` and `ts`.
    pub(super) fn subagent_span(
        &mut self,
        id: &str,
        line: u64,
        ts: Option<&str>,
    ) -> &mut SubagentSpan {
        let spans = &mut self.facts.subagents;
        let at = match spans.iter().position(|s| s.id == id) {
            Some(at) => at,
            None => {
                spans.push(SubagentSpan {
                    id: id.to_owned(),
                    name: None,
                    description: None,
                    line_start: line,
                    line_end: line,
                    started_at: None,
                    ended_at: None,
                    turn_count: 0,
                });
                spans.len() - 1
            }
        };
        let span = &mut spans[at];
        span.line_end = span.line_end.max(line);
        if let Some(ts) = ts.and_then(crate::timestamp::normalize) {
            if span.started_at.as_ref().is_none_or(|s| ts < *s) {
                span.started_at = Some(ts.clone());
            }
            if span.ended_at.as_ref().is_none_or(|e| ts > *e) {
                span.ended_at = Some(ts);
            }
        }
        span
    }

    pub(super) fn header_model(&mut self, model: Option<&str>) {
        fill(&mut self.header_model, model);
    }

    /// Widens the run's time span. Times are compared in canonical form, since
    /// the agents write different precisions and offsets.
    pub(super) fn time(&mut self, ts: Option<&str>) {
        let Some(ts) = ts.and_then(crate::timestamp::normalize) else {
            return;
        };
        let f = &mut self.facts;
        if f.started_at.as_ref().is_none_or(|s| ts < *s) {
            f.started_at = Some(ts.clone());
        }
        if f.ended_at.as_ref().is_none_or(|e| ts > *e) {
            f.ended_at = Some(ts);
        }
    }

    pub(super) fn finish(self, n_lines: u64, n_skipped_lines: u64) -> Transcript {
        let mut t = self.facts;
        let mut turns: Vec<Turn> = self
            .turns
            .into_iter()
            .filter_map(|mut turn| {
                let trimmed = turn.text.trim();
                if trimmed.is_empty() {
                    return None;
                }
                if trimmed.len() != turn.text.len() {
                    turn.text = trimmed.to_owned();
                }
                Some(turn)
            })
            .collect();
        // Formats that add turns after the fact (Codex's fallback user text)
        // rely on this; for the others the order is already by first line.
        turns.sort_by_key(|turn| turn.line_start);
        t.intent = turns
            .iter()
            .find(|turn| turn.role == Role::User)
            .map(|turn| truncate_chars(&turn.text, MAX_INTENT_CHARS).to_owned());
        t.title = turns
            .iter()
            .filter(|turn| turn.role == Role::User)
            .find_map(|turn| title_of(&turn.text));
        for span in &mut t.subagents {
            span.turn_count = turns
                .iter()
                .filter(|turn| turn.subagent.as_deref() == Some(span.id.as_str()))
                .count() as u64;
        }
        t.turns = turns;
        if t.model.is_none() {
            t.model = self.header_model;
        }
        // Relative paths (Claude's file-history keys, Codex patch headers) are
        // relative to the session's directory; resolving them lets the same
        // file named both ways count once.
        let cwd = t.cwd.as_deref().map(|c| c.trim_end_matches('/'));
        let files: BTreeSet<String> = self
            .files
            .into_iter()
            .map(|path| match cwd {
                Some(cwd) if is_relative(&path) => {
                    format!("{cwd}/{}", path.trim_start_matches("./"))
                }
                _ => path,
            })
            .collect();
        t.files_touched = files.into_iter().collect();
        t.tools_used = self.tools.into_iter().collect();
        t.commands = self.commands;
        t.n_lines = n_lines;
        t.n_skipped_lines = n_skipped_lines;
        t
    }
}

fn is_relative(path: &str) -> bool {
    let windows_drive = path.as_bytes().get(1) == Some(&b':');
    !(path.starts_with('/') || path.starts_with('~') || path.starts_with('\\') || windows_drive)
}
