//! Transcript formats -> turns: what Claude Code, Codex, pi, Gemini CLI,
//! Copilot CLI, Cursor, Aider and OpenCode wrote, read line by line into user / assistant / tool / summary turns with their
//! source line ranges, plus the facts about the run (model, ids, files, tools).
//!
//! Invariant: `parse` never fails and never panics. A line that is not JSON
//! (in a JSONL format), not UTF-8, or of a type no parser knows is counted
//! in `n_skipped_lines` and the rest of the input is still read.

mod aider;
mod builder;
mod claude;
mod codex;
mod copilot;
mod cursor;
mod diff;
mod gemini;
mod opencode;
mod pi;
pub(crate) mod text;

use kith_proto::AgentRuntime;
use serde_json::Value;

use builder::Builder;

pub use diff::LineKind as DiffLineKind;

/// Aider's session header time, which usage facts are dated by too.
pub(crate) use aider::session_start;

use crate::jsonl::Lines;

/// Which agent wrote the bytes: a parser for each `AgentRuntime` ([`Format::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    ClaudeCode,
    Codex,
    Pi,
    /// Gemini CLI JSONL: its appended records are folded into the live
    /// messages, so parse a session's bytes whole (see [`parse_chain`]).
    Gemini,
    Copilot,
    Cursor,
    /// Aider's `.aider.chat.history.md`: markdown, not JSON.
    Aider,
    /// The journal kith keeps of OpenCode's rows: folded like Gemini's
    /// records, so parse a session's bytes whole.
    OpenCode,
    /// Generic JSONL: the string field `text`, `content` or `message` of each
    /// record, if it has one; nothing else.
    Other,
}

impl Format {
    /// The format `runtime` writes. `AgentRuntime` is the one list of
    /// agents: a new one is a variant there, then its parser here.
    pub fn of(runtime: AgentRuntime) -> Self {
        match runtime {
            AgentRuntime::ClaudeCode => Self::ClaudeCode,
            AgentRuntime::Codex => Self::Codex,
            AgentRuntime::Pi => Self::Pi,
            AgentRuntime::Gemini => Self::Gemini,
            AgentRuntime::Copilot => Self::Copilot,
            AgentRuntime::Cursor => Self::Cursor,
            AgentRuntime::Aider => Self::Aider,
            AgentRuntime::OpenCode => Self::OpenCode,
            AgentRuntime::Other => Self::Other,
        }
    }

    /// The format of the runtime named `slug` (`AgentRuntime::as_str`);
    /// generic JSONL for a name no parser knows.
    pub fn of_runtime(slug: &str) -> Self {
        AgentRuntime::parse(slug).map_or(Self::Other, Self::of)
    }

    /// What its lines hold: the one place that decides how a delta is
    /// checked (`jsonl::check`) and redacted (`redact::redact_with`).
    pub fn lines(self) -> Lines {
        match self {
            Self::Aider => Lines::Text,
            _ => Lines::Json,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    User,
    Assistant,
    /// A tool call and its result text, in one turn when both are present.
    Tool,
    /// A compaction summary: the agent's condensed history, not user text.
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

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turn {
    pub role: Role,
    /// What was said, trimmed and never empty. A tool turn reads
    /// `name: input summary` then the result text on the following lines.
    pub text: String,
    /// First line of the turn, 1-based within the parsed bytes, so that a
    /// search hit can point at the authoritative JSONL.
    pub line_start: u64,
    /// Last line, inclusive: a streamed message or a call joined with its
    /// result spans several lines.
    pub line_end: u64,
    /// The timestamp of the turn's first line, as the agent wrote it.
    pub timestamp: Option<String>,
    /// The tool this turn called (empty for non-tool turns).
    pub tool_names: Vec<String>,
    /// The inline subagent ([`SubagentSpan::id`]) whose turn this is, when
    /// the parent's transcript holds it (Copilot CLI); `None` for the
    /// transcript's own agent.
    pub subagent: Option<String>,
    /// For a tool call that edits or writes files, what it changed as
    /// unified-diff-style text, at most 400 lines of 500 characters (the
    /// `diff` module says its form); `None` for any other turn.
    pub diff: Option<String>,
}

/// A subagent whose turns are in its parent's transcript: the wire type,
/// as run metadata keeps what the parser gives.
pub use kith_proto::SubagentSpan;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Transcript {
    /// In order of first line.
    pub turns: Vec<Turn>,
    /// The first model a message names, else the one the session header names.
    pub model: Option<String>,
    /// The agent's own session / thread id (Claude `sessionId`, Codex
    /// `session_meta.payload.id`, pi header `id`): the conversation id.
    pub session_id: Option<String>,
    /// The session that spawned this one (Codex subagent `parent_thread_id`,
    /// pi `parentSession`), to hang the run under its parent.
    pub parent_session_id: Option<String>,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    pub agent_version: Option<String>,
    /// Earliest timestamp of any record, in kith's canonical RFC 3339 form.
    pub started_at: Option<String>,
    /// Latest timestamp of any record, canonical like `started_at`.
    pub ended_at: Option<String>,
    /// The first user turn's text, at most 500 characters: what the run was for.
    pub intent: Option<String>,
    /// The first real user prompt (no slash command, no redaction marker, no
    /// text the agent injected), its first line cut at a word boundary.
    pub title: Option<String>,
    /// Files the run read or changed, sorted and deduplicated; relative paths
    /// are resolved against `cwd` when it is known.
    pub files_touched: Vec<String>,
    /// Tools called and skills or slash commands invoked, sorted, deduplicated.
    pub tools_used: Vec<String>,
    /// Shell commands the agent (or the person, through the agent) ran, in
    /// order of first appearance, deduplicated, each at most 1,000 characters.
    pub commands: Vec<String>,
    pub tool_call_count: u64,
    /// Subagents whose turns are among `turns`, in order of first line.
    pub subagents: Vec<SubagentSpan>,
    /// Lines in the parsed bytes, a partial last line included.
    pub n_lines: u64,
    /// Lines nothing was read from: not JSON, not UTF-8, or an unknown type.
    pub n_skipped_lines: u64,
}

/// Reads a transcript, or any run of complete lines cut from one.
pub fn parse(format: Format, bytes: &[u8]) -> Transcript {
    match format {
        Format::ClaudeCode => read(claude::Claude, bytes),
        Format::Codex => read(codex::Codex::default(), bytes),
        Format::Pi => read(pi::Pi, bytes),
        Format::Gemini => read(gemini::Gemini::default(), bytes),
        Format::Copilot => read(copilot::Copilot::default(), bytes),
        Format::Cursor => read(cursor::Cursor, bytes),
        Format::Aider => aider::read(bytes),
        Format::OpenCode => read(opencode::OpenCode::default(), bytes),
        Format::Other => read(Other, bytes),
    }
}

impl Format {
    /// Whether later records can replace or drop what earlier lines said
    /// (Gemini's `$set` and `$rewindTo`, a changed or removed OpenCode row),
    /// so that a transcript's deltas must be read as one.
    pub fn folds(self) -> bool {
        matches!(self, Format::Gemini | Format::OpenCode)
    }
}

/// One transcript read as a chain of deltas (`read_chain`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chain {
    /// The turns of each delta, deltas in byte order, each turn's lines
    /// numbered within its delta.
    pub deltas: Vec<Vec<Turn>>,
    /// The title and intent of the transcript's live messages: for a
    /// format that folds, of the latest version of its first prompt.
    pub title: Option<String>,
    pub intent: Option<String>,
}

/// The turns of each delta of one transcript (`read_chain`'s `deltas`).
pub fn parse_chain(format: Format, deltas: &[&[u8]]) -> Vec<Vec<Turn>> {
    read_chain(format, deltas).deltas
}

/// One transcript's deltas read together. An append-only format reads each
/// delta alone, as ingest did. A format that [folds](Format::folds) is read
/// as one: only the live turns come back, each in the delta that holds the
/// line it is placed at.
pub fn read_chain(format: Format, deltas: &[&[u8]]) -> Chain {
    if !format.folds() {
        let mut read = deltas.iter().map(|d| parse(format, d));
        let first = read.next().unwrap_or_default();
        let (title, intent) = (first.title, first.intent);
        let mut turns = vec![first.turns];
        turns.extend(read.map(|t| t.turns));
        turns.truncate(deltas.len());
        return Chain {
            deltas: turns,
            title,
            intent,
        };
    }
    let whole = parse(format, &deltas.concat());
    let mut turns = whole.turns.into_iter().peekable();
    let mut first_line = 0;
    let mut out = Vec::with_capacity(deltas.len());
    for delta in deltas {
        let n_lines = delta.iter().filter(|&&c| c == b'\n').count() as u64;
        let mut mine = Vec::new();
        while let Some(mut turn) = turns.next_if(|t| t.line_start <= first_line + n_lines) {
            turn.line_start -= first_line;
            turn.line_end -= first_line;
            mine.push(turn);
        }
        first_line += n_lines;
        out.push(mine);
    }
    Chain {
        deltas: out,
        title: whole.title,
        intent: whole.intent,
    }
}

/// One format's reading of decoded records.
trait Records {
    /// Feeds one record from `line`; false when the record is of a type this
    /// format does not know.
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool;

    /// Called once after the last record.
    fn finish(self, _b: &mut Builder)
    where
        Self: Sized,
    {
    }
}

/// The lines of `bytes`, without their `\n`: a trailing newline ends the
/// last line, it does not start another.
pub(crate) fn lines(bytes: &[u8]) -> impl Iterator<Item = &[u8]> {
    let body = bytes.strip_suffix(b"\n").unwrap_or(bytes);
    (!bytes.is_empty())
        .then(|| body.split(|&c| c == b'\n'))
        .into_iter()
        .flatten()
}

fn read(mut format: impl Records, bytes: &[u8]) -> Transcript {
    let mut b = Builder::default();
    let mut n_lines = 0;
    let mut n_skipped = 0;
    for line in lines(bytes) {
        n_lines += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let mut used = false;
        each_record(line, |v| used |= format.record(&mut b, &v, n_lines));
        if !used {
            n_skipped += 1;
        }
    }
    format.finish(&mut b);
    b.finish(n_lines, n_skipped)
}

/// Each JSON record of `line`: real pi files hold several on one line
/// (`}{`), and they all get its number. A decoding error ends the line but
/// keeps what came before it; one from half an emoji is read again from
/// that record on, mended (`mend_lone_surrogates`), so only such a line
/// is scanned for it.
pub(crate) fn each_record(line: &[u8], mut each: impl FnMut(Value)) {
    let mut read = 0;
    for record in serde_json::Deserializer::from_slice(line).into_iter::<Value>() {
        match record {
            Ok(v) => {
                each(v);
                read += 1;
            }
            Err(_) => {
                if let Some(mended) = mend_lone_surrogates(line) {
                    serde_json::Deserializer::from_slice(&mended)
                        .into_iter::<Value>()
                        .skip(read)
                        .map_while(Result::ok)
                        .for_each(each);
                }
                return;
            }
        }
    }
}

/// `line` with each `\uXXXX` escape of half a UTF-16 surrogate pair that
/// has no other half (`"\ud83d"`: an emoji cut in two, as JavaScript's
/// `JSON.stringify` writes one when a tool's output is cut mid-character)
/// written as `\ufffd`, or `None` when it has none. Such a line is valid
/// JSON to the agent and to central's check of a delta, but no JSON string
/// can hold it, so the line would not be read at all.
fn mend_lone_surrogates(line: &[u8]) -> Option<Vec<u8>> {
    let escape_at = |i: usize| -> Option<u16> {
        let hex = line.get(i..i + 6)?.strip_prefix(b"\\u")?;
        u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
    };
    let mut out: Option<Vec<u8>> = None;
    let mut i = 0;
    while i < line.len() {
        if line[i] != b'\\' {
            i += 1;
            continue;
        }
        let Some(unit) = escape_at(i) else {
            i += 2; // `\\`, `\"` and the other one-letter escapes
            continue;
        };
        let paired = (0xD800..0xDC00).contains(&unit)
            && escape_at(i + 6).is_some_and(|low| (0xDC00..0xE000).contains(&low));
        if paired {
            i += 12;
        } else if (0xD800..0xE000).contains(&unit) {
            let mended = out.get_or_insert_with(|| line.to_vec());
            // Same length: the offsets already found stay right.
            mended[i..i + 6].copy_from_slice(b"\\ufffd");
            i += 6;
        } else {
            i += 6;
        }
    }
    out
}

/// Generic JSONL: any JSON line is understood, the text fields are indexed.
struct Other;

impl Records for Other {
    fn record(&mut self, b: &mut Builder, v: &Value, line: u64) -> bool {
        let ts = text::str_at(v, "timestamp");
        b.time(ts);
        let role = match text::str_at(v, "role") {
            Some("assistant") => Role::Assistant,
            Some("tool") => Role::Tool,
            _ => Role::User,
        };
        if let Some(s) = ["text", "content", "message"]
            .iter()
            .find_map(|key| text::str_at(v, key))
        {
            b.turn(role, s, line, ts);
        }
        true
    }
}

/// Whether `c` changes the direction of the text around it (the bidi
/// embeddings, overrides and isolates, and the invisible direction marks):
/// "fix \u{202e}gnp.exe" shows as "fix exe.png". Titles leave them out and
/// terminals show them escaped.
pub fn is_bidi_control(c: char) -> bool {
    matches!(
        c,
        '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use std::fmt::Write as _;

    use super::*;
    use crate::fixtures;

    /// Each delta of a chain read as `parse_chain` reads it: its turns as
    /// `<first line>: <text>`.
    pub(crate) fn read_chain(format: Format, deltas: &[&str]) -> Vec<Vec<String>> {
        let bytes: Vec<&[u8]> = deltas.iter().map(|d| d.as_bytes()).collect();
        parse_chain(format, &bytes)
            .into_iter()
            .map(|turns| {
                turns
                    .into_iter()
                    .map(|t| format!("{}: {}", t.line_start, t.text))
                    .collect()
            })
            .collect()
    }

    /// Turns as `role start-end [tools]: text` lines, text cut at 60 chars and
    /// newlines shown as `⏎`, so that expectations read like the transcript.
    pub(crate) fn render(t: &Transcript) -> String {
        let mut out = String::new();
        for turn in &t.turns {
            let text: String = text::truncate_chars(&turn.text, 60).replace('\n', "⏎");
            let tools = if turn.tool_names.is_empty() {
                String::new()
            } else {
                format!(" [{}]", turn.tool_names.join(","))
            };
            let _ = writeln!(
                out,
                "{} {}-{}{tools}: {text}",
                turn.role.as_str(),
                turn.line_start,
                turn.line_end
            );
        }
        out
    }

    /// Parses `input` and compares its rendered turns with `expect` (leading
    /// indentation and blank lines of `expect` ignored).
    pub(crate) fn check(format: Format, input: &str, expect: &str) -> Transcript {
        let t = parse(format, input.as_bytes());
        let want: String = expect
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(render(&t), want, "input:\n{input}");
        t
    }

    /// Every agent has its format, and a name no agent has is generic JSONL.
    #[test]
    fn each_runtime_names_its_format() {
        for runtime in AgentRuntime::ALL {
            assert_eq!(
                Format::of_runtime(runtime.as_str()),
                Format::of(runtime),
                "{runtime:?}"
            );
        }
        assert_eq!(Format::of(AgentRuntime::OpenCode), Format::OpenCode);
        assert_eq!(Format::of_runtime("claude"), Format::Other);
    }

    pub(crate) fn format_of(runtime: &str) -> Format {
        match Format::of_runtime(runtime) {
            Format::Other => Format::ClaudeCode,
            format => format,
        }
    }

    /// The repository fixture `rel`, parsed in its folder's format.
    pub(crate) fn own(rel: &str) -> Transcript {
        let runtime = rel.split('/').next().unwrap_or_default();
        parse(format_of(runtime), &fixtures::read(rel))
    }

    /// The third-party fixture `rel`, parsed, if that set is present.
    pub(crate) fn third_party(rel: &str) -> Option<Transcript> {
        let runtime = rel.split('/').next().unwrap_or_default();
        let format = if runtime == "derived" {
            Format::ClaudeCode
        } else {
            format_of(runtime)
        };
        Some(parse(format, &fixtures::third_party(rel)?))
    }

    /// What every transcript must read as: turns inside the file, in order,
    /// with text; user turns that are the person's words; sorted facts.
    fn check_sane(name: &str, bytes: &[u8], format: Format, runtime: &str) {
        let t = parse(format, bytes);
        let newlines = bytes.iter().filter(|&&c| c == b'\n').count() as u64;
        let partial = u64::from(!bytes.is_empty() && !bytes.ends_with(b"\n"));
        assert_eq!(t.n_lines, newlines + partial, "{name}");
        // The hook log is hook payloads, not a transcript: nothing in it is a turn.
        if name.contains("hook_logs") {
            assert!(t.turns.is_empty(), "{name}");
            assert_eq!(t.n_skipped_lines, t.n_lines, "{name}");
            return;
        }
        assert!(
            t.turns.iter().any(|x| x.role == Role::User),
            "{name}: no user turn"
        );
        assert!(
            t.turns.iter().any(|x| x.role == Role::Assistant),
            "{name}: no assistant turn"
        );
        assert!(t.intent.is_some(), "{name}: no intent");
        // Cursor writes no times: its runs are dated when kith captures them.
        if runtime != "cursor" {
            assert!(
                t.started_at.is_some() && t.started_at <= t.ended_at,
                "{name}"
            );
        }
        for turn in &t.turns {
            let at = format!("{name} lines {}-{}", turn.line_start, turn.line_end);
            assert!(1 <= turn.line_start, "{at}");
            assert!(turn.line_start <= turn.line_end, "{at}");
            assert!(turn.line_end <= t.n_lines, "{at}");
            assert!(!turn.text.trim().is_empty(), "{at}");
            assert_eq!(turn.text, turn.text.trim(), "{at}");
            // A pi user once pasted raw JSON with tool calls; in Claude
            // files the same words would mean a misread tool result.
            if turn.role == Role::User && runtime != "pi" {
                for bad in [
                    "tool_result",
                    "<system-reminder>",
                    "tool_use_id",
                    "<local-command",
                ] {
                    assert!(!turn.text.contains(bad), "{at}: user text has {bad}");
                }
            }
        }
        assert!(
            t.turns
                .windows(2)
                .all(|w| w[0].line_start <= w[1].line_start),
            "{name}"
        );
        let sorted = |v: &[String]| v.windows(2).all(|w| w[0] < w[1]);
        assert!(sorted(&t.files_touched) && sorted(&t.tools_used), "{name}");
        // Only a file cut mid-line (an agent still writing it) has a line
        // that is not JSON: its last.
        assert_eq!(t.n_skipped_lines, partial, "{name}");
    }

    #[test]
    fn every_fixture_parses_into_sane_turns() {
        let all = fixtures::all();
        for f in &all {
            let bytes = std::fs::read(&f.path).unwrap_or_else(|e| panic!("{}: {e}", f.name));
            check_sane(&f.name, &bytes, format_of(f.runtime), f.runtime);
        }
        let own = all.iter().filter(|f| f.own).count();
        assert_eq!(own, 14, "a repository fixture went missing");
        let partial = all
            .iter()
            .filter(|f| f.own && std::fs::read(&f.path).is_ok_and(|b| !b.ends_with(b"\n")));
        assert_eq!(partial.count(), 1, "the repository has a file cut mid-line");
        if let Some(dir) = fixtures::third_party_dir() {
            assert_eq!(all.len() - own, 27, "a third-party fixture went missing");
            let name = "derived/marot__spotter__short.TRUNCATED-MIDLINE-DERIVED.jsonl";
            let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
            check_sane(name, &bytes, Format::ClaudeCode, "claude-code");
        }
    }

    #[test]
    fn garbage_gives_no_turns_and_counts_skipped_lines() {
        // (input, n_lines, n_skipped_lines), for every format.
        let cases: &[(&[u8], u64, u64)] = &[
            (b"", 0, 0),
            (b"\n", 1, 0),
            (b"not json\n", 1, 1),
            (b"not json", 1, 1),
            (b"\xff\xfe\x00garbage\n\x80\n", 2, 2),
            (
                b"{\"type\":\"user\",\"message\":{\"content\":\"\xff\"}}\n",
                1,
                1,
            ),
            (
                b"{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"\xc3\"}}\n",
                1,
                1,
            ),
            (b"{\"truncated\": \n", 1, 1),
            (b"]]]\n{{{\n\n", 3, 2),
        ];
        for format in [
            Format::ClaudeCode,
            Format::Codex,
            Format::Pi,
            Format::OpenCode,
            Format::Other,
        ] {
            for &(input, n_lines, n_skipped) in cases {
                let t = parse(format, input);
                let at = format!("{format:?} {:?}", String::from_utf8_lossy(input));
                assert!(t.turns.is_empty(), "{at}: {:?}", t.turns);
                assert_eq!((t.n_lines, t.n_skipped_lines), (n_lines, n_skipped), "{at}");
                assert_eq!(t.intent, None, "{at}");
            }
        }
    }

    #[test]
    fn a_line_with_half_an_emoji_is_read_with_a_replacement_character() {
        // JavaScript writes an emoji cut in two as a lone surrogate escape;
        // a whole one, an escaped backslash before "ud83d" and other
        // escapes stay as written.
        let line = concat!(
            r#"{"type":"message","message":{"role":"user","content":"#,
            r#""cut \ud83d here, lone low \ude00, whole \ud83d\ude00, "#,
            r#"not an escape \\ud83d, a quote \" and \u00e9"}}"#,
        );
        let t = parse(Format::Pi, line.as_bytes());
        assert_eq!(t.n_skipped_lines, 0);
        assert_eq!(
            t.turns.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(),
            ["cut \u{fffd} here, lone low \u{fffd}, whole 😀, not an escape \\ud83d, a quote \" and é"]
        );
        // On a line of several records, the ones before the half are read
        // once.
        let two = concat!(
            r#"{"type":"message","message":{"role":"user","content":"before"}}"#,
            r#"{"type":"message","message":{"role":"user","content":"half \ud83d"}}"#,
        );
        let t = parse(Format::Pi, two.as_bytes());
        assert_eq!(
            t.turns.iter().map(|t| t.text.as_str()).collect::<Vec<_>>(),
            ["before", "half \u{fffd}"]
        );
        assert_eq!(
            mend_lone_surrogates(br#"{"a":"\ud83d\ude00 \\ud800"}"#),
            None
        );
        assert_eq!(
            mend_lone_surrogates(br#"{"a":"\ud800\ud800\udc00"}"#).as_deref(),
            Some(&br#"{"a":"\ufffd\ud800\udc00"}"#[..])
        );
        assert_eq!(
            mend_lone_surrogates(br#"{"a":"end \udbff"}"#).as_deref(),
            Some(&br#"{"a":"end \ufffd"}"#[..])
        );
    }

    #[test]
    fn records_of_unknown_type_are_skipped_not_fatal() {
        let input = concat!(
            "{\"type\":\"from-the-future\",\"x\":1}\n",
            "[1,2,3]\n",
            "{\"type\":\"session\",\"id\":\"s1\",\"timestamp\":\"2025-01-01T00:00:00Z\"}\n",
            "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"still read\"}}\n",
        );
        let t = check(Format::Pi, input, "user 4-4: still read");
        assert_eq!((t.n_lines, t.n_skipped_lines), (4, 2));
        assert_eq!(t.session_id.as_deref(), Some("s1"));
    }

    #[test]
    fn concatenated_records_on_one_line_are_all_read() {
        let input = concat!(
            "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"first\"}}",
            "{\"type\":\"message\",\"message\":{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"second\"}]}}\n",
            "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"good\"}}{\"type\":\"mess\n",
        );
        let t = check(
            Format::Pi,
            input,
            "user 1-1: first
             assistant 1-1: second
             user 2-2: good",
        );
        assert_eq!(t.n_skipped_lines, 0);
    }

    #[test]
    fn partial_last_line_is_read_only_when_it_is_json() {
        let line = "{\"type\":\"message\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}";
        let t = check(Format::Pi, line, "user 1-1: hi");
        assert_eq!((t.n_lines, t.n_skipped_lines), (1, 0));
        let cut = &line[..line.len() - 3];
        let t = check(Format::Pi, &format!("{line}\n{cut}"), "user 1-1: hi");
        assert_eq!((t.n_lines, t.n_skipped_lines), (2, 1));
    }

    #[test]
    fn other_format_indexes_text_fields_only() {
        let input = concat!(
            "{\"text\":\"from text\",\"timestamp\":\"2025-01-02T00:00:00Z\"}\n",
            "{\"role\":\"assistant\",\"content\":\"from content\"}\n",
            "{\"message\":\"from message\",\"timestamp\":\"2025-01-01T00:00:00Z\"}\n",
            "{\"message\":{\"nested\":\"not a string field\"}}\n",
            "{\"other\":1}\n",
        );
        let t = check(
            Format::Other,
            input,
            "user 1-1: from text
             assistant 2-2: from content
             user 3-3: from message",
        );
        assert_eq!(t.n_skipped_lines, 0);
        assert_eq!(t.started_at.as_deref(), Some("2025-01-01T00:00:00.000Z"));
        assert_eq!(t.ended_at.as_deref(), Some("2025-01-02T00:00:00.000Z"));
        assert_eq!(t.intent.as_deref(), Some("from text"));
    }

    #[test]
    fn intent_is_cut_at_500_chars_on_a_char_boundary() {
        let long = "é".repeat(600);
        let line = format!("{{\"text\":\"{long}\"}}\n");
        let t = parse(Format::Other, line.as_bytes());
        let intent = t.intent.unwrap_or_default();
        assert_eq!(intent.chars().count(), 500);
        assert!(long.starts_with(&intent));
        assert_eq!(t.turns[0].text, long, "the turn itself is not cut");
    }

    /// Regression guard for quadratic behaviour: many lines of one streamed
    /// message and many joined tool calls must stay cheap to merge.
    #[test]
    fn large_input_with_many_merges_parses_whole() {
        let mut input = String::new();
        let n = 20_000;
        for i in 0..n {
            let _ = writeln!(
                input,
                "{{\"type\":\"assistant\",\"message\":{{\"id\":\"m1\",\"content\":[{{\"type\":\"text\",\"text\":\"part {i}\"}},{{\"type\":\"tool_use\",\"id\":\"t{i}\",\"name\":\"Bash\",\"input\":{{\"command\":\"echo {i}\"}}}}]}}}}"
            );
            let _ = writeln!(
                input,
                "{{\"type\":\"user\",\"message\":{{\"content\":[{{\"type\":\"tool_result\",\"tool_use_id\":\"t{i}\",\"content\":\"out {i}\"}}]}}}}"
            );
        }
        let t = parse(Format::ClaudeCode, input.as_bytes());
        assert_eq!(t.turns.len(), n + 1);
        assert_eq!(t.turns[0].role, Role::Assistant);
        assert_eq!(
            (t.turns[0].line_start, t.turns[0].line_end),
            (1, 2 * n as u64 - 1)
        );
        assert!(t.turns[0].text.ends_with(&format!("part {}", n - 1)));
        let last = &t.turns[n];
        assert_eq!(last.text, format!("Bash: echo {}\nout {}", n - 1, n - 1));
        assert_eq!(t.tool_call_count, n as u64);
    }
}
