//! File edits as diffs: what a tool call that edits or writes a file
//! changed, read from its input and written as unified-diff-style text for
//! the reader to show ([`Turn::diff`](super::Turn::diff)).
//!
//! The text is, for each file, a header (`--- a/PATH` then `+++ b/PATH`,
//! PATH as the agent named it; `/dev/null` on the side of a file added or
//! deleted), then its hunks, each opened by an `@@` line (with the context
//! an `apply_patch` hunk names after it), whose lines start with `-`
//! (removed), `+` (added) or a space (context). The input carries no line
//! numbers, so the `@@` lines carry none either.
//!
//! Invariant: whatever the input (huge strings, no newlines, shapes no agent
//! writes, numbers where strings belong), these functions never panic and
//! their text is at most [`MAX_LINES`] lines, then one `… N more lines`
//! line, each line at most [`MAX_LINE_CHARS`] characters.

use std::collections::HashMap;

use serde_json::Value;

use super::text::{str_at, truncate_chars};

/// Lines of a diff before the rest is only counted.
pub(super) const MAX_LINES: usize = 400;
/// Characters of one line, its prefix included; a longer one ends in `…`.
pub(super) const MAX_LINE_CHARS: usize = 500;
/// Unchanged lines shown on each side of a change.
const CONTEXT: usize = 3;
/// The most lines either side of an edit's changed middle may have for a
/// line-by-line diff; past it the old lines are all removed and the new
/// ones all added, which costs nothing to compute.
const MAX_LCS_LINES: usize = 400;

/// Where an `apply_patch` patch starts and ends.
const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";

/// Keys that name the file a tool writes: Claude Code, Gemini CLI, pi,
/// OpenCode, Copilot CLI and Cursor spell it differently.
const PATH_KEYS: [&str; 5] = [
    "file_path",
    "filePath",
    "path",
    "absolute_path",
    "target_file",
];
/// The old and new text of an edit, in each agent's spelling: Claude Code
/// and Gemini CLI, OpenCode, pi, Copilot CLI.
const EDIT_KEYS: [(&str, &str); 4] = [
    ("old_string", "new_string"),
    ("oldString", "newString"),
    ("oldText", "newText"),
    ("old_str", "new_str"),
];
/// A whole file's new text: Claude Code, Gemini CLI, pi and OpenCode;
/// Cursor; Copilot CLI's `create`.
const CONTENT_KEYS: [&str; 3] = ["content", "contents", "file_text"];
/// An `apply_patch` patch given as an argument (Codex's function form,
/// OpenCode's `patchText`).
const PATCH_KEYS: [&str; 3] = ["patchText", "patch", "input"];

/// What one line of a diff (`Turn::diff`) says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// `--- a/PATH` or `+++ b/PATH`.
    File,
    /// `@@`, with Codex's context label when it gave one.
    Hunk,
    Added,
    Removed,
    Same,
}

impl LineKind {
    pub fn of(line: &str) -> Self {
        if line.starts_with("--- ") || line.starts_with("+++ ") {
            Self::File
        } else if line.starts_with("@@") {
            Self::Hunk
        } else if line.starts_with('+') {
            Self::Added
        } else if line.starts_with('-') {
            Self::Removed
        } else {
            Self::Same
        }
    }
}

/// The diff the tool call with `input` makes, recognised by the input's
/// keys rather than the tool's name: an edit as old and new text, a list of
/// such `edits`, a whole file written (every line added), or an
/// `apply_patch` patch (as the input or one of its strings). `None` for a
/// call that edits no file, or an edit that changes nothing.
pub(super) fn of_input(input: &Value) -> Option<String> {
    match input {
        Value::String(s) => of_patch(s),
        Value::Object(_) => {
            if let Some(patch) = PATCH_KEYS
                .iter()
                .filter_map(|key| str_at(input, key))
                .find(|s| s.contains(BEGIN_PATCH))
            {
                return of_patch(patch);
            }
            let mut out = Out::default();
            let path = path_of(input);
            if let Some(edits) = input.get("edits").and_then(Value::as_array) {
                let mut file: Option<&str> = None;
                for one in edits {
                    let (Some(path), Some((old, new))) = (path_of(one).or(path), old_new(one))
                    else {
                        continue;
                    };
                    if file != Some(path) {
                        out.file(Some(path), Some(path));
                        file = Some(path);
                    }
                    edit(&mut out, old, new);
                }
            } else if let Some((old, new)) = old_new(input) {
                out.file(Some(path?), path);
                edit(&mut out, old, new);
            } else if let Some(content) = CONTENT_KEYS.iter().find_map(|key| str_at(input, key)) {
                out.file(Some(path?), path);
                out.flush_header();
                for line in content.lines() {
                    out.line('+', line);
                }
            }
            out.finish()
        }
        _ => None,
    }
}

/// The diff of the `apply_patch` patches in `text`: a patch itself, or a
/// shell command that feeds one to `apply_patch` (an argument or a heredoc).
/// `*** Add File` is a new file whose lines are all added, `*** Delete File`
/// a header alone, `*** Update File` (with its `*** Move to`) its hunks as
/// the patch has them. `None` when `text` holds no patch that names a file.
pub(super) fn of_patch(text: &str) -> Option<String> {
    let mut out = Out::default();
    let mut rest = text;
    while let Some(at) = rest.find(BEGIN_PATCH) {
        let body = &rest[at + BEGIN_PATCH.len()..];
        let (body, after) = match body.find(END_PATCH) {
            Some(end) => (&body[..end], &body[end + END_PATCH.len()..]),
            None => (body, ""),
        };
        patch(&mut out, body);
        rest = after;
    }
    out.finish()
}

/// One patch's file sections, `Begin` and `End` cut off.
fn patch(out: &mut Out, body: &str) {
    #[derive(PartialEq)]
    enum Section {
        /// Before the first file, or after a deleted one: lines are ignored.
        Outside,
        Add,
        Update,
    }
    let mut section = Section::Outside;
    // An updated file's header waits for the line after it, which may move it.
    let mut updating: Option<&str> = None;
    for line in body.lines() {
        if let Some(from) = updating.take() {
            if let Some(to) = line.strip_prefix("*** Move to: ") {
                // A move is a change even with no hunk after it.
                out.file(Some(from), Some(to));
                out.flush_header();
                continue;
            }
            out.file(Some(from), Some(from));
        }
        if let Some(path) = line.strip_prefix("*** Add File: ") {
            out.file(None, Some(path));
            out.flush_header();
            section = Section::Add;
        } else if let Some(path) = line.strip_prefix("*** Delete File: ") {
            out.file(Some(path), None);
            out.flush_header();
            section = Section::Outside;
        } else if let Some(path) = line.strip_prefix("*** Update File: ") {
            updating = Some(path);
            section = Section::Update;
        } else if line.starts_with("***") {
            // `*** End of File`, or a marker this reading does not know.
        } else if section == Section::Add {
            if let Some(added) = line.strip_prefix('+') {
                out.line('+', added);
            }
        } else if section == Section::Update {
            if line.starts_with("@@") {
                out.hunk(line);
            } else if line.is_empty() {
                out.line(' ', "");
            } else if let Some(kind @ ('+' | '-' | ' ')) = line.chars().next() {
                out.line(kind, &line[1..]);
            }
        }
    }
}

/// The path a tool input names, as the first of [`PATH_KEYS`] it has.
fn path_of(input: &Value) -> Option<&str> {
    PATH_KEYS.iter().find_map(|key| str_at(input, key))
}

/// An edit's old and new text, when the input has both as strings.
fn old_new(input: &Value) -> Option<(&str, &str)> {
    EDIT_KEYS
        .iter()
        .find_map(|(old, new)| Some((str_at(input, old)?, str_at(input, new)?)))
}

/// One line of an edit's diff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op<'a> {
    Same(&'a str),
    Removed(&'a str),
    Added(&'a str),
}

/// The hunks that turn `old` into `new`, added to `out`: the lines both
/// start and end with are left out but for [`CONTEXT`] of them, and the
/// middle is diffed line by line when it is small, else removed whole then
/// added whole. Nothing when the two are the same lines.
fn edit(out: &mut Out, old: &str, new: &str) {
    let n_old = old.lines().count();
    let n_new = new.lines().count();
    let n_prefix = old
        .lines()
        .zip(new.lines())
        .take_while(|(a, b)| a == b)
        .count();
    if n_prefix == n_old && n_prefix == n_new {
        return;
    }
    let n_suffix = old
        .lines()
        .rev()
        .zip(new.lines().rev())
        .take(n_old.min(n_new) - n_prefix)
        .take_while(|(a, b)| a == b)
        .count();
    let (mid_old, mid_new) = (n_old - n_prefix - n_suffix, n_new - n_prefix - n_suffix);
    let before = old
        .lines()
        .skip(n_prefix.saturating_sub(CONTEXT))
        .take(n_prefix.min(CONTEXT))
        .map(Op::Same);
    let after = old
        .lines()
        .skip(n_old - n_suffix)
        .take(CONTEXT)
        .map(Op::Same);
    let middle_old = old.lines().skip(n_prefix).take(mid_old);
    let middle_new = new.lines().skip(n_prefix).take(mid_new);
    if mid_old <= MAX_LCS_LINES && mid_new <= MAX_LCS_LINES {
        let old: Vec<&str> = middle_old.collect();
        let new: Vec<&str> = middle_new.collect();
        let ops: Vec<Op> = before.chain(lcs(&old, &new)).chain(after).collect();
        hunks(out, &ops);
    } else {
        out.hunk("@@");
        let ops = before
            .chain(middle_old.map(Op::Removed))
            .chain(middle_new.map(Op::Added))
            .chain(after);
        ops.for_each(|op| out.op(op));
    }
}

/// `old` to `new` as a longest common subsequence of lines: kept lines,
/// and removed lines before added ones where they alternate.
fn lcs<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<Op<'a>> {
    // Lines as numbers, so that the table compares each pair of lines in
    // constant time however long the lines are.
    let mut ids: HashMap<&str, u32> = HashMap::new();
    let mut id = |line: &'a str| {
        let next = ids.len() as u32;
        *ids.entry(line).or_insert(next)
    };
    let a: Vec<u32> = old.iter().map(|l| id(l)).collect();
    let b: Vec<u32> = new.iter().map(|l| id(l)).collect();
    let width = b.len() + 1;
    // `common[i * width + j]`: the longest common run of `a[i..]` and `b[j..]`.
    let mut common = vec![0u16; (a.len() + 1) * width];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            common[i * width + j] = if a[i] == b[j] {
                common[(i + 1) * width + j + 1] + 1
            } else {
                common[(i + 1) * width + j].max(common[i * width + j + 1])
            };
        }
    }
    let mut ops = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        if a[i] == b[j] {
            ops.push(Op::Same(old[i]));
            i += 1;
            j += 1;
        } else if common[(i + 1) * width + j] >= common[i * width + j + 1] {
            ops.push(Op::Removed(old[i]));
            i += 1;
        } else {
            ops.push(Op::Added(new[j]));
            j += 1;
        }
    }
    ops.extend(old[i..].iter().map(|l| Op::Removed(l)));
    ops.extend(new[j..].iter().map(|l| Op::Added(l)));
    ops
}

/// `ops` as hunks: each run of changes with up to [`CONTEXT`] unchanged
/// lines around it; changes closer than twice that share a hunk.
fn hunks(out: &mut Out, ops: &[Op]) {
    let changes: Vec<usize> = ops
        .iter()
        .enumerate()
        .filter(|(_, op)| !matches!(op, Op::Same(_)))
        .map(|(i, _)| i)
        .collect();
    let mut k = 0;
    while k < changes.len() {
        let first = changes[k];
        let mut last = first;
        while k + 1 < changes.len() && changes[k + 1] - last <= 2 * CONTEXT + 1 {
            k += 1;
            last = changes[k];
        }
        out.hunk("@@");
        let end = (last + CONTEXT + 1).min(ops.len());
        for &op in &ops[first.saturating_sub(CONTEXT)..end] {
            out.op(op);
        }
        k += 1;
    }
}

/// The diff being written, bounded as it is written: past [`MAX_LINES`]
/// lines are only counted.
#[derive(Default)]
struct Out {
    text: String,
    n_lines: usize,
    n_omitted: usize,
    /// The next file's header lines, written before its first line so that
    /// an edit that changes nothing leaves no header.
    header: Option<[(&'static str, String); 2]>,
    /// Whether a hunk is open: a line outside one opens one.
    in_hunk: bool,
}

impl Out {
    /// Starts the file `old` becomes `new` (`None`: `/dev/null`).
    fn file(&mut self, old: Option<&str>, new: Option<&str>) {
        // A path is one line of the diff, however it was written.
        let side = |prefix: &'static str, path: Option<&str>| match path {
            Some(path) => (
                prefix,
                truncate_chars(path, MAX_LINE_CHARS).replace(['\n', '\r'], " "),
            ),
            None => ("", "/dev/null".to_owned()),
        };
        self.header = Some([side("a/", old), side("b/", new)]);
        self.in_hunk = false;
    }

    /// Writes the waiting header, for a file whose header is all there is
    /// (deleted) or which has lines however few (written whole).
    fn flush_header(&mut self) {
        if let Some([(old_prefix, old), (new_prefix, new)]) = self.header.take() {
            self.push("--- ", &format!("{old_prefix}{old}"));
            self.push("+++ ", &format!("{new_prefix}{new}"));
        }
    }

    /// Opens a hunk with `label` (`@@`, or a patch's `@@ fn context`).
    fn hunk(&mut self, label: &str) {
        self.flush_header();
        self.push("", label);
        self.in_hunk = true;
    }

    fn op(&mut self, op: Op) {
        match op {
            Op::Same(line) => self.line(' ', line),
            Op::Removed(line) => self.line('-', line),
            Op::Added(line) => self.line('+', line),
        }
    }

    /// One line of a hunk: `kind` is `-`, `+` or a space.
    fn line(&mut self, kind: char, text: &str) {
        if !self.in_hunk {
            self.hunk("@@");
        }
        let mut prefix = [0; 4];
        self.push(kind.encode_utf8(&mut prefix), text);
    }

    fn push(&mut self, prefix: &str, text: &str) {
        if self.n_lines >= MAX_LINES {
            self.n_omitted += 1;
            return;
        }
        self.n_lines += 1;
        if !self.text.is_empty() {
            self.text.push('\n');
        }
        self.text.push_str(prefix);
        let room = MAX_LINE_CHARS - prefix.chars().count();
        let kept = truncate_chars(text, room);
        if kept.len() == text.len() {
            self.text.push_str(text);
        } else {
            self.text.push_str(truncate_chars(kept, room - 1));
            self.text.push('…');
        }
    }

    /// The diff, or `None` when nothing was written.
    fn finish(mut self) -> Option<String> {
        if self.n_lines == 0 {
            return None;
        }
        match self.n_omitted {
            0 => {}
            1 => self.text.push_str("\n… 1 more line"),
            n => self.text.push_str(&format!("\n… {n} more lines")),
        }
        Some(self.text)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::tests::{own, third_party};
    use super::super::{parse, Format, Role, Transcript};
    use super::*;
    use crate::fixtures;

    /// Checks `diff` has each of `present` as a whole line and none of
    /// `absent` anywhere.
    fn check(what: &str, diff: Option<&str>, present: &[&str], absent: &[&str]) {
        let Some(diff) = diff else {
            assert!(present.is_empty(), "{what}: no diff, wanted {present:?}");
            return;
        };
        let lines: Vec<&str> = diff.lines().collect();
        for want in present {
            assert!(lines.contains(want), "{what}: no line {want:?} in\n{diff}");
        }
        for unwanted in absent {
            assert!(!diff.contains(unwanted), "{what}: {unwanted:?} in\n{diff}");
        }
    }

    /// `n` numbered lines: `line 1` to `line n`.
    fn numbered(n: usize) -> String {
        (1..=n).map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn edits_and_writes_by_their_keys() {
        let ten = numbered(10);
        let fifth_changed = ten.replace("line 5\n", "line five\n");
        let cases: &[(&str, Value, &[&str], &[&str])] = &[
            (
                "Claude Code Edit: three lines of context, far lines left out",
                json!({"file_path": "/w/a.rs", "old_string": ten, "new_string": fifth_changed, "replace_all": false}),
                &[
                    "--- a//w/a.rs",
                    "+++ b//w/a.rs",
                    "@@",
                    " line 2",
                    " line 4",
                    "-line 5",
                    "+line five",
                    " line 6",
                    " line 8",
                ],
                &["line 1\n", "line 9", "line 10"],
            ),
            (
                "Gemini CLI replace",
                json!({"file_path": "src/p.rs", "old_string": "a\nb\nc", "new_string": "a\nB\nc", "instruction": "caps"}),
                &["--- a/src/p.rs", " a", "-b", "+B", " c"],
                &["caps"],
            ),
            (
                "OpenCode edit",
                json!({"filePath": "/w/x.ts", "oldString": "let x = 1", "newString": "const x = 1"}),
                &["--- a//w/x.ts", "-let x = 1", "+const x = 1"],
                &[],
            ),
            (
                "pi edit",
                json!({"path": "/w/posts.ts", "oldText": "date: new Date(front.date)", "newText": "date: noon(front.date)"}),
                &[
                    "+++ b//w/posts.ts",
                    "-date: new Date(front.date)",
                    "+date: noon(front.date)",
                ],
                &[],
            ),
            (
                "Copilot CLI str_replace",
                json!({"command": "str_replace", "path": "/w/c.py", "old_str": "x = 1", "new_str": "x = 2"}),
                &["--- a//w/c.py", "-x = 1", "+x = 2"],
                &[],
            ),
            (
                "Cursor StrReplace adds lines after a kept one",
                json!({"path": "/w/cli.rs", "old_string": "Report {", "new_string": "Report {\n    since: Option<Date>,"}),
                &[" Report {", "+    since: Option<Date>,"],
                &["-Report {"],
            ),
            (
                "an edit that deletes text",
                json!({"file_path": "/w/r.rs", "old_string": "if x {\n    continue;\n}\n", "new_string": ""}),
                &["-if x {", "-    continue;", "-}"],
                &["+if", "+}"],
            ),
            (
                "Claude Code Write: every line added",
                json!({"file_path": "/w/new.rs", "content": "fn a() {}\n\nfn b() {}\n"}),
                &[
                    "--- a//w/new.rs",
                    "+++ b//w/new.rs",
                    "@@",
                    "+fn a() {}",
                    "+",
                    "+fn b() {}",
                ],
                &["\n ", "\n-"],
            ),
            (
                "Gemini CLI write_file",
                json!({"file_path": "/w/g.md", "content": "# Title"}),
                &["+# Title"],
                &[],
            ),
            (
                "Cursor Write",
                json!({"path": "/w/c.ts", "contents": "export {}"}),
                &["+export {}"],
                &[],
            ),
            (
                "Copilot CLI create",
                json!({"command": "create", "path": "/w/n.py", "file_text": "print(1)"}),
                &["+++ b//w/n.py", "+print(1)"],
                &[],
            ),
            (
                "Claude Code MultiEdit: one hunk per edit, one header",
                json!({"file_path": "/w/m.rs", "edits": [
                    {"old_string": "one", "new_string": "1"},
                    {"old_string": "same", "new_string": "same"},
                    {"old_string": "two", "new_string": "2", "replace_all": true},
                ]}),
                &["--- a//w/m.rs", "-one", "+1", "-two", "+2"],
                &["same", "\n--- "],
            ),
            (
                "OpenCode multiedit: each edit names its file",
                json!({"filePath": "/w/a.ts", "edits": [
                    {"filePath": "/w/a.ts", "oldString": "a", "newString": "A"},
                    {"filePath": "/w/b.ts", "oldString": "b", "newString": "B"},
                ]}),
                &["--- a//w/a.ts", "-a", "+A", "--- a//w/b.ts", "-b", "+B"],
                &[],
            ),
            (
                "OpenCode patch as patchText",
                json!({"patchText": "*** Begin Patch\n*** Update File: a.ts\n@@\n-a\n+A\n*** End Patch"}),
                &["--- a/a.ts", "+++ b/a.ts", "-a", "+A"],
                &[],
            ),
        ];
        for (what, input, present, absent) in cases {
            let diff = of_input(input);
            check(what, diff.as_deref(), present, absent);
            let n_hunks = diff
                .iter()
                .flat_map(|d| d.lines())
                .filter(|l| l.starts_with("@@"))
                .count();
            let want = if what.to_lowercase().contains("multiedit") {
                2
            } else {
                1
            };
            assert_eq!(n_hunks, want, "{what}: {diff:?}");
        }
    }

    #[test]
    fn calls_that_edit_nothing_have_no_diff() {
        let cases = [
            ("Read", json!({"file_path": "/w/a.rs", "limit": 5})),
            ("Bash", json!({"command": "ls -la", "description": "list"})),
            ("Grep", json!({"pattern": "fn", "path": "/w"})),
            (
                "an edit without its file",
                json!({"old_string": "a", "new_string": "b"}),
            ),
            ("a write without its file", json!({"content": "text"})),
            (
                "an edit without new text",
                json!({"path": "/w/a", "oldText": "a"}),
            ),
            (
                "an edit that changes nothing",
                json!({"file_path": "/w/a", "old_string": "same\nlines", "new_string": "same\nlines"}),
            ),
            (
                "numbers where strings belong",
                json!({"file_path": 7, "old_string": 1, "new_string": 2}),
            ),
            (
                "a path that is an object",
                json!({"file_path": {"x": 1}, "content": "a"}),
            ),
            (
                "edits that are not edits",
                json!({"file_path": "/w/a", "edits": [1, "x", null, {"old_string": 3}]}),
            ),
            (
                "edits that is not a list",
                json!({"file_path": "/w/a", "edits": "a"}),
            ),
            ("not an object", json!(null)),
            ("a number", json!(42)),
            ("a list", json!(["*** Begin Patch"])),
            ("a string that is no patch", json!("ls -la")),
            (
                "a patch that names no file",
                json!("*** Begin Patch\n*** End Patch"),
            ),
        ];
        for (what, input) in cases {
            assert_eq!(of_input(&input), None, "{what}");
        }
    }

    #[test]
    fn apply_patch_sections_as_unified_diffs() {
        let cases: &[(&str, &str, &[&str], &[&str])] = &[
            (
                "update with its hunks as they are",
                "*** Begin Patch\n*** Update File: src/a.rs\n@@ fn main\n ctx\n-old\n+new\n@@\n-x\n*** End Patch\n",
                &["--- a/src/a.rs", "+++ b/src/a.rs", "@@ fn main", " ctx", "-old", "+new", "@@", "-x"],
                &["Begin", "End"],
            ),
            (
                "a first hunk without its @@",
                "*** Begin Patch\n*** Update File: a\n-x\n+y\n*** End of File\n*** End Patch",
                &["+++ b/a", "@@", "-x", "+y"],
                &["End of File"],
            ),
            (
                "add: every line added, from nothing",
                "*** Begin Patch\n*** Add File: new.rs\n+fn a() {}\n+\n*** End Patch",
                &["--- /dev/null", "+++ b/new.rs", "@@", "+fn a() {}", "+"],
                &["a/new.rs"],
            ),
            (
                "delete: a header alone",
                "*** Begin Patch\n*** Delete File: old.rs\n*** End Patch",
                &["--- a/old.rs", "+++ /dev/null"],
                &["@@"],
            ),
            (
                "a move names both paths",
                "*** Begin Patch\n*** Update File: a.rs\n*** Move to: b.rs\n@@\n-x\n+y\n*** End Patch",
                &["--- a/a.rs", "+++ b/b.rs", "-x", "+y"],
                &["b/a.rs", "Move to"],
            ),
            (
                "a heredoc run by exec_command",
                "bash -lc apply_patch <<'EOF'\n*** Begin Patch\n*** Update File: x\n@@\n-a\n+b\n*** End Patch\nEOF /w",
                &["--- a/x", "-a", "+b"],
                &["EOF", "bash", "/w"],
            ),
            (
                "an argv joined by its summary",
                "apply_patch *** Begin Patch\n*** Add File: y\n+hi\n*** End Patch",
                &["+++ b/y", "+hi"],
                &["apply_patch"],
            ),
            (
                "several files, one header each",
                "*** Begin Patch\n*** Update File: a\n@@\n-1\n*** Add File: b\n+2\n*** Delete File: c\n*** End Patch",
                &["--- a/a", "-1", "+++ b/b", "+2", "--- a/c", "+++ /dev/null"],
                &[],
            ),
        ];
        for (what, patch, present, absent) in cases {
            check(what, of_patch(patch).as_deref(), present, absent);
        }
        assert_eq!(of_patch("cat notes.txt"), None);
        assert_eq!(
            of_patch("*** Begin Patch\n*** Update File: a\n*** End Patch"),
            None,
            "an update with no hunk changes nothing"
        );
        assert_eq!(
            of_patch("*** Begin Patch\n*** Update File: a\n*** Move to: b\n*** End Patch"),
            Some("--- a/a\n+++ b/b".to_owned()),
            "a move alone is a change"
        );
        assert_eq!(of_patch("*** Begin Patch\nno file\n*** End Patch"), None);
    }

    #[test]
    fn changes_far_apart_in_one_edit_are_two_hunks() {
        let old = numbered(30);
        let new = old
            .replace("line 3\n", "line three\n")
            .replace("line 27\n", "line twenty-seven\n");
        let diff = of_input(&json!({"file_path": "f", "old_string": old, "new_string": new}));
        check(
            "two hunks",
            diff.as_deref(),
            &[
                "-line 3",
                "+line three",
                " line 6",
                " line 24",
                "-line 27",
                "+line twenty-seven",
            ],
            &["\n line 7\n", "line 15", "\n line 23\n"],
        );
        let n_hunks = diff
            .iter()
            .flat_map(|d| d.lines())
            .filter(|l| *l == "@@")
            .count();
        assert_eq!(n_hunks, 2);
    }

    #[test]
    fn a_changed_line_between_kept_ones_is_removed_then_added() {
        let ops = lcs(&["a", "b", "c", "d"], &["a", "x", "c", "y", "d"]);
        assert_eq!(
            ops,
            [
                Op::Same("a"),
                Op::Removed("b"),
                Op::Added("x"),
                Op::Same("c"),
                Op::Added("y"),
                Op::Same("d"),
            ]
        );
    }

    #[test]
    fn a_large_middle_is_removed_whole_then_added_whole() {
        let old = numbered(500);
        let new: String = (1..=500).map(|i| format!("new {i}\n")).collect();
        let diff = of_input(&json!({"file_path": "f", "old_string": old, "new_string": new}))
            .unwrap_or_default();
        let lines: Vec<&str> = diff.lines().collect();
        assert_eq!(lines.len(), MAX_LINES + 1);
        assert_eq!(lines[..4], ["--- a/f", "+++ b/f", "@@", "-line 1"]);
        // 3 header lines and 397 removed shown; 103 removed and 500 added not.
        assert_eq!(lines[MAX_LINES - 1], "-line 397");
        assert_eq!(lines[MAX_LINES], "… 603 more lines");
    }

    #[test]
    fn hostile_input_is_bounded() {
        let long_line = "é".repeat(200_000);
        let many_lines = "x\n".repeat(100_000);
        let wide = |c: char| -> String {
            (0..MAX_LCS_LINES)
                .map(|i| format!("{i}{}\n", c.to_string().repeat(5_000)))
                .collect()
        };
        let cases = [
            json!({"file_path": "f", "content": long_line}),
            json!({"file_path": "f", "old_string": long_line, "new_string": format!("{long_line}!")}),
            json!({"file_path": long_line, "old_string": "a", "new_string": "b"}),
            json!({"file_path": "f", "content": many_lines}),
            json!({"file_path": "f", "old_string": many_lines, "new_string": ""}),
            json!({"file_path": "f", "old_string": many_lines, "new_string": format!("{many_lines}y")}),
            json!({"file_path": "a\nb", "content": "x"}),
            json!({"file_path": "f", "old_string": wide('a'), "new_string": wide('b')}),
            json!(format!(
                "*** Begin Patch\n*** Add File: {long_line}\n{}",
                "+y\n".repeat(100_000)
            )),
        ];
        for input in cases {
            let diff = of_input(&input).unwrap_or_default();
            let lines: Vec<&str> = diff.lines().collect();
            assert!(
                !lines.is_empty() && lines.len() <= MAX_LINES + 1,
                "{}",
                lines.len()
            );
            for line in &lines {
                assert!(
                    line.chars().count() <= MAX_LINE_CHARS,
                    "{}",
                    line.chars().count()
                );
            }
        }
    }

    #[test]
    fn a_cut_line_ends_in_an_ellipsis_on_a_char_boundary() {
        let diff =
            of_input(&json!({"file_path": "f", "content": "日".repeat(600)})).unwrap_or_default();
        let last = diff.lines().last().unwrap_or_default();
        assert_eq!(last.chars().count(), MAX_LINE_CHARS);
        assert_eq!(last, format!("+{}…", "日".repeat(MAX_LINE_CHARS - 2)));
    }

    #[test]
    fn a_path_with_a_newline_stays_one_header_line() {
        let diff = of_input(&json!({"file_path": "a\nb", "content": "x"}));
        assert_eq!(diff.as_deref(), Some("--- a/a b\n+++ b/a b\n@@\n+x"));
    }

    /// The diffs of a parsed transcript's turns: `(first line, tool, diff)`.
    fn diffs(t: &Transcript) -> Vec<(u64, &str, &str)> {
        t.turns
            .iter()
            .filter_map(|turn| {
                let tool = turn.tool_names.first().map_or("", String::as_str);
                Some((turn.line_start, tool, turn.diff.as_deref()?))
            })
            .collect()
    }

    /// Only the tools that edit have diffs, and some tools that do not
    /// edit were called in `t`.
    fn check_only_edits(what: &str, t: &Transcript, edits: &[&str]) {
        for turn in &t.turns {
            let edit = turn.tool_names.iter().any(|n| edits.contains(&n.as_str()));
            assert_eq!(turn.diff.is_some(), edit, "{what}: {}", turn.text);
        }
        assert!(
            t.turns
                .iter()
                .any(|x| x.role == Role::Tool && x.diff.is_none()),
            "{what}: no call without a diff"
        );
    }

    #[test]
    fn a_real_claude_code_session_shows_its_edits_and_write() {
        let t = own("claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl");
        check_only_edits("claude", &t, &["Edit", "Write"]);
        let found = diffs(&t);
        let tools: Vec<(u64, &str)> = found.iter().map(|&(line, tool, _)| (line, tool)).collect();
        assert_eq!(
            tools,
            [(11, "Edit"), (21, "Edit"), (23, "Write"), (42, "Edit")]
        );
        assert_eq!(
            found[0].2,
            "--- a//home/sam/src/tally/src/entry.rs
+++ b//home/sam/src/tally/src/entry.rs
@@
+    /// How long the entry lasted; an end before the start is on the next day.
     pub fn duration(&self) -> Duration {
-        self.end - self.start
+        let d = self.end - self.start;
+        if d.is_negative() {
+            d + Duration::hours(24)
+        } else {
+            d
+        }
     }"
        );
        assert_eq!(
            found[1].2,
            "--- a//home/sam/src/tally/src/report.rs
+++ b//home/sam/src/tally/src/report.rs
@@
-        if e.end < e.start {
-            continue;
-        }"
        );
        check(
            "a write",
            Some(found[2].2),
            &[
                "+++ b//home/sam/src/tally/tests/midnight.rs",
                "+use tally::entry::Entry;",
                "+}",
            ],
            &["\n ", "\n-"],
        );
    }

    #[test]
    fn a_real_codex_rollout_shows_its_patches() {
        let dir = "codex/2026/05/11";
        let t = own(&format!(
            "{dir}/rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl"
        ));
        check_only_edits("codex", &t, &["apply_patch"]);
        let found = diffs(&t);
        let lines: Vec<u64> = found.iter().map(|&(line, _, _)| line).collect();
        assert_eq!(lines, [26, 31, 52]);
        check(
            "two files in one patch",
            Some(found[0].2),
            &[
                "--- a/src/cli.rs",
                "+++ b/src/cli.rs",
                "     Report {",
                "+        json: bool,",
                "--- a/src/report.rs",
                "-pub fn print(entries: &[Entry], week: Option<u8>) {",
                "+pub fn print(entries: &[Entry], week: Option<u8>, json: bool) {",
            ],
            &["*** ", "Begin Patch", "End Patch"],
        );
        assert_eq!(
            found[1].2,
            "--- a/src/main.rs
+++ b/src/main.rs
@@
-        Command::Report { week } => report::print(&entries, week),
+        Command::Report { week, json } => report::print(&entries, week, json),"
        );
        let t = own(&format!(
            "{dir}/rollout-2026-05-11T14-04-51-019e17a5-0f61-7b2a-8c44-e91d06a7b2f5.jsonl"
        ));
        let found = diffs(&t);
        assert_eq!(found.len(), 1);
        check(
            "an added file",
            Some(found[0].2),
            &[
                "--- /dev/null",
                "+++ b/tests/report_json.rs",
                "+use std::process::Command;",
                "+}",
            ],
            &["\n ", "\n-"],
        );
    }

    #[test]
    fn a_codex_shell_call_that_runs_apply_patch_shows_it() {
        let item = |payload: &str| {
            format!("{{\"timestamp\":\"2026-05-11T12:00:00Z\",\"type\":\"response_item\",\"payload\":{payload}}}\n")
        };
        let input = [
            item(r#"{"type":"function_call","name":"exec_command","call_id":"a","arguments":"{\"cmd\":\"apply_patch <<'EOF'\\n*** Begin Patch\\n*** Update File: a.rs\\n@@\\n-x\\n+y\\n*** End Patch\\nEOF\\n\",\"workdir\":\"/w\"}"}"#),
            item(r#"{"type":"function_call","name":"shell","call_id":"b","arguments":"{\"command\":[\"apply_patch\",\"*** Begin Patch\\n*** Delete File: b.rs\\n*** End Patch\\n\"]}"}"#),
            item(r#"{"type":"function_call","name":"exec_command","call_id":"c","arguments":"{\"cmd\":\"cargo test\"}"}"#),
        ]
        .concat();
        let t = parse(Format::Codex, input.as_bytes());
        let found: Vec<(u64, &str)> = diffs(&t)
            .into_iter()
            .map(|(line, _, d)| (line, d))
            .collect();
        assert_eq!(
            found,
            [
                (1, "--- a/a.rs\n+++ b/a.rs\n@@\n-x\n+y"),
                (2, "--- a/b.rs\n+++ /dev/null"),
            ]
        );
    }

    #[test]
    fn real_pi_gemini_and_cursor_sessions_show_their_edits() {
        let cases: &[(&str, &[&str], u64, &[&str])] = &[
            (
                "pi/--home-sam-src-notes-site--/2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl",
                &["edit", "write"],
                23,
                &["--- a//home/sam/src/notes-site/README.md", " ## Dates", "+", "+A post's `date` is a day; the feed publishes it at noon Europe/Berlin (build/date.ts)."],
            ),
            (
                "gemini/tally/chats/session-2026-05-13T09-14-7c1e4a2b.jsonl",
                &["replace"],
                12,
                &["--- a//home/sam/src/tally/src/parse.rs", "-s.trim_start_matches('$')", "+s.trim_start_matches('$').replace(',', \"\")"],
            ),
            (
                "cursor/home-sam-src-tally/agent-transcripts/5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73.jsonl",
                &["StrReplace"],
                4,
                &[" Report {", "+    #[arg(long)]", "+    since: Option<Date>,"],
            ),
        ];
        for (rel, edits, line, present) in cases {
            let t = own(rel);
            for turn in &t.turns {
                let edit = turn.tool_names.iter().any(|n| edits.contains(&n.as_str()));
                assert_eq!(turn.diff.is_some(), edit, "{rel}: {}", turn.text);
            }
            let found = diffs(&t);
            let diff = found.iter().find(|d| d.0 == *line).map(|d| d.2);
            check(rel, diff, present, &["\n-Report {"]);
        }
    }

    #[test]
    fn an_opencode_edit_part_shows_its_diff() {
        let part = |id: &str, input: &str| {
            format!(
                r#"{{"kind":"part","id":"{id}","message_id":"m","session_id":"s","time_updated":1,"data":{{"type":"tool","tool":"edit","callID":"{id}","state":{{"status":"completed","input":{input},"output":"ok"}}}}}}"#
            )
        };
        let input = [
            r#"{"kind":"message","id":"m","session_id":"s","time_updated":1,"data":{"role":"assistant","time":{"created":1}}}"#.to_owned(),
            part("p1", r#"{"filePath":"/w/index.ts","oldString":"let a = 1;","newString":"const a = 1;"}"#),
            // As the OpenCode database fixture holds one: a whole file.
            part("p2", r#"{"filePath":"/w/b.ts","content":"// sqlite path\nconsole.log(\"sqlite\");"}"#),
            part("p3", r#"{"filePath":"/w/c.ts"}"#),
        ]
        .join("\n");
        let t = parse(Format::OpenCode, input.as_bytes());
        let found: Vec<&str> = diffs(&t).into_iter().map(|d| d.2).collect();
        assert_eq!(
            found,
            [
                "--- a//w/index.ts\n+++ b//w/index.ts\n@@\n-let a = 1;\n+const a = 1;",
                "--- a//w/b.ts\n+++ b//w/b.ts\n@@\n+// sqlite path\n+console.log(\"sqlite\");",
            ]
        );
    }

    /// The third-party sessions, where this checkout has them: an edit,
    /// writes and patches by agents other than the repository's own.
    #[test]
    fn third_party_sessions_show_their_edits() {
        let cases: &[(&str, &[&str], &[&str])] = &[
            (
                "claude-code/codemie-ai__codemie-code__4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
                &["Edit", "Write"],
                &[" #!/usr/bin/env python3", "+# Simple hello world program", " def main():"],
            ),
            (
                "codex/codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
                &["apply_patch"],
                &["--- a/src/agents/plugins/codemie-code.plugin.ts", "+    compaction: {", "     provider: {"],
            ),
            (
                "copilot/git-ai-project__git-ai__copilot_cli_session_events.jsonl",
                &["create", "edit", "str_replace_editor"],
                &["+++ b//Users/test/project/hello.py", "+print('hello world')"],
            ),
            (
                "cursor/git-ai-project__git-ai__cursor-session-simple.jsonl",
                &["Write", "StrReplace"],
                &["+HBO shows that aired during the 1990s (1990–1999)"],
            ),
            (
                "pi/badlogic__pi-mono__compact.jsonl",
                &["edit", "write"],
                &["-\tif (model && !model.reasoning) {", "+\tif (!model || !model.reasoning) {"],
            ),
        ];
        for (rel, edits, present) in cases {
            let Some(t) = third_party(rel) else { return };
            for turn in &t.turns {
                let edit = turn.tool_names.iter().any(|n| edits.contains(&n.as_str()));
                // An edit whose input was cut from the file has no diff.
                if !edit {
                    assert!(turn.diff.is_none(), "{rel}: {}", turn.text);
                }
            }
            let all: Vec<&str> = diffs(&t).into_iter().flat_map(|d| d.2.lines()).collect();
            for want in *present {
                assert!(all.contains(want), "{rel}: no line {want:?}");
            }
        }
    }

    /// Gemini CLI's whole-session JSON (which kith does not read as a
    /// transcript) holds `write_file` and `replace` calls in their real shape.
    #[test]
    fn gemini_cli_calls_in_their_real_shape() {
        let rels = [
            "gemini/codemie-ai__codemie-code__session-2026-01-16T11-01-file-ops-37b7abef.json",
            "gemini/git-ai-project__git-ai__gemini-session-simple.json",
        ];
        let mut found = Vec::new();
        for rel in rels {
            let Some(bytes) = fixtures::third_party(rel) else {
                return;
            };
            let session: Value = serde_json::from_slice(&bytes).unwrap_or_default();
            let calls = session["messages"]
                .as_array()
                .into_iter()
                .flatten()
                .flat_map(|m| m["toolCalls"].as_array().into_iter().flatten());
            for call in calls {
                let name = call["name"].as_str().unwrap_or_default();
                let diff = of_input(&call["args"]);
                assert_eq!(
                    diff.is_some(),
                    ["write_file", "replace"].contains(&name),
                    "{rel}: {name}"
                );
                found.extend(diff);
            }
        }
        let all: Vec<&str> = found.iter().flat_map(|d| d.lines()).collect();
        for want in [
            "+++ b/hello.md",
            "+# Hello World",
            "--- a//Users/svarlamov/projects/testing-git/index.ts",
            " console.log('hello world');",
            "+console.log('hello bob');",
        ] {
            assert!(all.contains(&want), "no line {want:?}");
        }
    }
}
