//! Finding transcripts and what they belong to: Claude Code
//! (`projects/**/*.jsonl`, subagents in `<session>/subagents/` or, in older
//! builds, `agent-*.jsonl` beside the session), Codex
//! (`sessions/YYYY/MM/DD/rollout-*.jsonl`), pi (`sessions/**/*.jsonl`),
//! Gemini CLI (`tmp/<project>/chats/*.jsonl`, subagents in
//! `chats/<parent session id>/`), Copilot CLI
//! (`session-state/<id>/events.jsonl`) and Cursor
//! (`projects/<slug>/agent-transcripts/**/*.jsonl`, subagents in
//! `<session>/subagents/`), Aider (`.aider.chat.history.md` in a configured
//! project folder, or in the folders one level under a configured root),
//! and the journals kith keeps of the transcripts `mirror` copies (under
//! `<state>/journals/<runtime>/`: where they are is decided here, what is
//! in them there); and, from a peek at a file's first lines, its
//! conversation id and the transcript it hangs under. No full parse: only
//! the few keys needed. Files are read through `untrusted`.

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use kith_proto::AgentRuntime;
use serde_json::Value;

use crate::config::Paths;
use crate::untrusted::{open_regular, plain_id};

/// A transcript on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) runtime: AgentRuntime,
    pub(crate) path: PathBuf,
}

/// The file aider appends a project's chat to, in the project's folder
/// (aider's `--chat-history-file` can name another; kith looks for this one).
pub(crate) const AIDER_HISTORY: &str = ".aider.chat.history.md";

/// Where each agent keeps its transcripts, and where kith keeps the journals
/// of those it mirrors (`mirror`), each runtime's roots together (Aider's
/// histories are in the projects: [`aider_dirs`]).
pub(crate) fn roots(paths: &Paths) -> Vec<(AgentRuntime, PathBuf)> {
    vec![
        (AgentRuntime::ClaudeCode, paths.claude_dir.join("projects")),
        (AgentRuntime::Codex, paths.codex_dir.join("sessions")),
        (AgentRuntime::Pi, paths.pi_dir.join("sessions")),
        (AgentRuntime::Gemini, paths.gemini_dir.join("tmp")),
        (
            AgentRuntime::Gemini,
            journals_root(paths, AgentRuntime::Gemini),
        ),
        (
            AgentRuntime::Copilot,
            paths.copilot_dir.join("session-state"),
        ),
        (AgentRuntime::Cursor, paths.cursor_dir.join("projects")),
        (
            AgentRuntime::OpenCode,
            journals_root(paths, AgentRuntime::OpenCode),
        ),
    ]
}

/// Where the journals of `runtime` live (`mirror` writes them).
pub(crate) fn journals_root(paths: &Paths, runtime: AgentRuntime) -> PathBuf {
    paths.state_dir.join("journals").join(runtime.as_str())
}

/// The runtime whose journals hold `path`, if it is in a journal folder.
pub(crate) fn runtime_of_journal(paths: &Paths, path: &Path) -> Option<AgentRuntime> {
    let rest = path.strip_prefix(paths.state_dir.join("journals")).ok()?;
    let slug = rest.components().next()?.as_os_str().to_str()?;
    AgentRuntime::parse(slug)
}

/// The folders that may hold an Aider history: each configured root that is
/// a folder (a project) and the folders directly under it (a folder of
/// projects), hidden ones left out. Never deeper: a folder of big
/// repositories is not walked.
pub(crate) fn aider_dirs(aider_roots: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for root in aider_roots.iter().filter(|r| r.is_dir()) {
        out.push(root.clone());
        let mut subdirs: Vec<PathBuf> = std::fs::read_dir(root)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
            .map(|e| e.path())
            .collect();
        subdirs.sort();
        out.extend(subdirs);
    }
    // A root named twice, or a project that is also under another root, is
    // one folder.
    let mut seen = std::collections::HashSet::new();
    out.retain(|dir| seen.insert(dir.clone()));
    out
}

/// Every transcript under the roots; within a root, sessions before their
/// subagents (capture also fetches a missing parent itself); then the Aider
/// histories in `aider_dirs(aider_roots)`.
pub(crate) fn all(paths: &Paths, aider_roots: &[PathBuf]) -> Vec<Source> {
    found(paths, aider_roots).sources
}

/// What discovery found: every transcript ([`all`]), and those of them it
/// reached through a symbolic link (a session or project folder that is a
/// link, as people keep them on another disk or in a synced folder).
#[derive(Debug, Default)]
pub(crate) struct Found {
    pub(crate) sources: Vec<Source>,
    pub(crate) linked: HashSet<PathBuf>,
}

/// [`all`], and which transcripts were reached through a link.
pub(crate) fn found(paths: &Paths, aider_roots: &[PathBuf]) -> Found {
    let mut out = Found::default();
    for (runtime, root) in roots(paths) {
        let mut walk = Walk::default();
        walk.dir(&root, false);
        let mut files = walk.files();
        files.retain(|(p, _)| is_transcript_of(runtime, p));
        // Cached: telling a subagent may read the file's first lines.
        files.sort_by_cached_key(|(p, _)| (is_subagent(runtime, p), p.clone()));
        for (path, linked) in files {
            if linked {
                out.linked.insert(path.clone());
            }
            out.sources.push(Source { runtime, path });
        }
    }
    out.sources.extend(
        aider_dirs(aider_roots)
            .into_iter()
            .map(|dir| dir.join(AIDER_HISTORY))
            // A file of its own, not a link a repository could point
            // anywhere (`capture` refuses one too).
            .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.file_type().is_file()))
            .map(|path| Source {
                runtime: AgentRuntime::Aider,
                path,
            }),
    );
    out
}

/// Which agent wrote the transcript at `path`, from where it lives.
pub(crate) fn runtime_of(paths: &Paths, path: &Path) -> AgentRuntime {
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    if name == AIDER_HISTORY {
        AgentRuntime::Aider
    } else if let Some(runtime) = runtime_of_journal(paths, path) {
        runtime
    } else if path.starts_with(&paths.gemini_dir) {
        AgentRuntime::Gemini
    } else if path.starts_with(&paths.copilot_dir) {
        AgentRuntime::Copilot
    } else if path.starts_with(&paths.cursor_dir) {
        AgentRuntime::Cursor
    } else if path.starts_with(&paths.codex_dir) || name.starts_with("rollout-") {
        AgentRuntime::Codex
    } else if path.starts_with(&paths.pi_dir) || path.to_string_lossy().contains("/.pi/") {
        AgentRuntime::Pi
    } else {
        AgentRuntime::ClaudeCode
    }
}

/// Whether `path` is a transcript kith captures: a `.jsonl` file where its
/// agent keeps sessions (the agents' homes also hold logs and caches), or an
/// Aider history.
pub(crate) fn is_transcript(paths: &Paths, path: &Path) -> bool {
    is_transcript_of(runtime_of(paths, path), path)
}

fn is_transcript_of(runtime: AgentRuntime, path: &Path) -> bool {
    let has_dir = |name: &str| path.components().any(|c| c.as_os_str() == name);
    if runtime == AgentRuntime::Aider {
        return path.file_name().is_some_and(|n| n == AIDER_HISTORY);
    }
    path.extension().is_some_and(|e| e == "jsonl")
        && match runtime {
            AgentRuntime::Gemini => has_dir("chats"),
            AgentRuntime::Copilot => path.file_name().is_some_and(|n| n == "events.jsonl"),
            AgentRuntime::Cursor => has_dir("agent-transcripts"),
            _ => true,
        }
}

/// A walk of a root's `.jsonl` files that follows symbolic links to
/// folders and files: each real folder is entered once (a link back up to
/// an ancestor ends there) and each real file is found once, by its own
/// path when the walk meets it there, else through the first link met.
#[derive(Default)]
struct Walk {
    /// (device, inode) of each folder entered.
    dirs: HashSet<(u64, u64)>,
    /// Each real file: its path and whether a link led to it.
    files: HashMap<(u64, u64), (PathBuf, bool)>,
}

impl Walk {
    fn dir(&mut self, dir: &Path, through_link: bool) {
        let Ok(meta) = std::fs::metadata(dir) else {
            return;
        };
        if !self.dirs.insert((meta.dev(), meta.ino())) {
            return;
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let linked = through_link || kind.is_symlink();
            // A dangling link has no target: nothing to find.
            let Ok(target) = std::fs::metadata(&path) else {
                continue;
            };
            if target.is_dir() {
                self.dir(&path, linked);
            } else if target.is_file() && path.extension().is_some_and(|e| e == "jsonl") {
                let found = self
                    .files
                    .entry((target.dev(), target.ino()))
                    .or_insert_with(|| (path.clone(), linked));
                if found.1 && !linked {
                    *found = (path, false);
                }
            }
        }
    }

    /// The files found, each with whether a link led to it.
    fn files(self) -> Vec<(PathBuf, bool)> {
        self.files.into_values().collect()
    }
}

fn is_subagent(runtime: AgentRuntime, path: &Path) -> bool {
    match runtime {
        AgentRuntime::ClaudeCode => is_claude_subagent(path),
        AgentRuntime::Gemini => gemini_parent_id(path).is_some(),
        AgentRuntime::Cursor => in_subagents(path),
        AgentRuntime::OpenCode => opencode_parent(path).is_some(),
        _ => false,
    }
}

fn in_subagents(path: &Path) -> bool {
    path.parent()
        .and_then(Path::file_name)
        .is_some_and(|n| n == "subagents")
}

fn is_claude_subagent(path: &Path) -> bool {
    let side_by_side = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(|n| n.starts_with("agent-"));
    in_subagents(path) || side_by_side
}

/// The Codex rollout of a thread (`rollout-<time>-<thread id>.jsonl`),
/// newest day folders first.
pub(crate) fn find_rollout(paths: &Paths, thread_id: &str) -> Option<PathBuf> {
    if !plain_id(thread_id) {
        return None;
    }
    let suffix = format!("-{thread_id}.jsonl");
    let mut days = Vec::new();
    collect_dirs(&paths.codex_dir.join("sessions"), 3, &mut days);
    days.sort();
    days.into_iter().rev().find_map(|day| {
        std::fs::read_dir(day)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with("rollout-") && n.ends_with(&suffix))
            })
    })
}

fn collect_dirs(dir: &Path, depth: u32, out: &mut Vec<PathBuf>) {
    if depth == 0 {
        out.push(dir.to_owned());
        return;
    }
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            collect_dirs(&entry.path(), depth - 1, out);
        }
    }
}

/// Copilot CLI's `session-state/<session id>/events.jsonl`, when it is there.
pub(crate) fn find_copilot_session(paths: &Paths, session_id: &str) -> Option<PathBuf> {
    if !plain_id(session_id) {
        return None;
    }
    let path = paths
        .copilot_dir
        .join("session-state")
        .join(session_id)
        .join("events.jsonl");
    path.is_file().then_some(path)
}

/// The Claude Code session file `<session id>.jsonl` in any project folder.
pub(crate) fn find_claude_session(paths: &Paths, session_id: &str) -> Option<PathBuf> {
    if !plain_id(session_id) {
        return None;
    }
    let name = format!("{session_id}.jsonl");
    std::fs::read_dir(paths.claude_dir.join("projects"))
        .ok()?
        .flatten()
        .map(|project| project.path().join(&name))
        .find(|p| p.is_file())
}

/// What a transcript's first lines say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Peek {
    /// Claude `sessionId`, Codex `session_meta.payload.id`, pi header `id`.
    pub(crate) conversation_id: Option<String>,
    /// The transcript this one hangs under.
    pub(crate) parent: Option<PathBuf>,
    /// The folder the agent worked in: Claude's `cwd` on its lines, Codex's
    /// `session_meta.payload.cwd`, pi's header `cwd`, the folder holding an
    /// Aider history.
    pub(crate) cwd: Option<String>,
}

/// Lines and bytes a peek reads at most (Codex's first line carries the base
/// instructions, tens of KiB; Claude may start with many `summary` lines).
const PEEK_LINES: usize = 64;
const PEEK_BYTES: u64 = 1 << 20;

/// Reads the first lines of `path` for its conversation id, parent and
/// working folder.
pub(crate) fn peek(paths: &Paths, runtime: AgentRuntime, path: &Path) -> Peek {
    let lines = first_lines(path);
    let first_str = |key: &str| {
        lines
            .iter()
            .find_map(|v| v.get(key).and_then(Value::as_str).map(str::to_owned))
    };
    let fallback = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default();
    match runtime {
        AgentRuntime::ClaudeCode => {
            let session = first_str("sessionId");
            let parent = claude_parent(path, session.as_deref());
            Peek {
                conversation_id: session
                    .or_else(|| (!is_claude_subagent(path)).then(|| fallback.to_owned())),
                parent,
                cwd: first_str("cwd"),
            }
        }
        AgentRuntime::Codex => {
            let meta = first_of_type(&lines, "session_meta").and_then(|v| v.get("payload"));
            let id = string_at(meta, "/id").or_else(|| {
                fallback
                    .get(fallback.len().checked_sub(36)?..)
                    .map(str::to_owned)
            });
            let parent_thread = meta
                .and_then(|m| m.pointer("/source/subagent/thread_spawn/parent_thread_id"))
                .and_then(Value::as_str);
            Peek {
                conversation_id: id,
                parent: parent_thread.and_then(|t| find_rollout(paths, t)),
                cwd: string_at(meta, "/cwd"),
            }
        }
        AgentRuntime::Pi => {
            let header = first_of_type(&lines, "session");
            Peek {
                conversation_id: string_at(header, "/id")
                    .or_else(|| fallback.rsplit_once('_').map(|(_, id)| id.to_owned())),
                parent: None,
                cwd: string_at(header, "/cwd"),
            }
        }
        AgentRuntime::Gemini => Peek {
            conversation_id: lines.first().and_then(|v| str_of(v, "sessionId")),
            parent: gemini_parent_id(path).and_then(|id| find_gemini_session(path, id)),
            cwd: None,
        },
        AgentRuntime::Copilot => {
            let start = first_of_type(&lines, "session.start");
            Peek {
                conversation_id: string_at(start, "/data/sessionId").or_else(|| {
                    let dir = path.parent()?.file_name()?.to_str()?;
                    Some(dir.to_owned())
                }),
                parent: None,
                cwd: string_at(start, "/data/context/cwd"),
            }
        }
        AgentRuntime::Cursor => Peek {
            conversation_id: Some(fallback.to_owned()),
            parent: cursor_parent(path),
            cwd: crate::cursor_agent::project(path),
        },
        AgentRuntime::Aider => Peek {
            conversation_id: None,
            parent: None,
            cwd: path.parent().map(|dir| dir.to_string_lossy().into_owned()),
        },
        AgentRuntime::OpenCode => Peek {
            conversation_id: Some(fallback.to_owned()),
            parent: opencode_parent(path),
            // The session row, the journal's first line (`mirror::opencode`).
            cwd: string_at(lines.first(), "/data/directory"),
        },
        AgentRuntime::Other => Peek::default(),
    }
}

/// An OpenCode subagent is a child session: its journal's first line (the
/// session row, `mirror::opencode`) names the parent, whose journal is
/// beside it.
fn opencode_parent(path: &Path) -> Option<PathBuf> {
    let first = first_lines(path).into_iter().next()?;
    let parent = first.get("parent_id")?.as_str()?;
    plain_id(parent).then(|| path.with_file_name(format!("{parent}.jsonl")))
}

/// The first record whose `type` is `kind`.
fn first_of_type<'a>(lines: &'a [Value], kind: &str) -> Option<&'a Value> {
    lines
        .iter()
        .find(|v| v.get("type").and_then(Value::as_str) == Some(kind))
}

/// The string at `pointer` in `record`, if both are there.
fn string_at(record: Option<&Value>, pointer: &str) -> Option<String> {
    record?.pointer(pointer)?.as_str().map(str::to_owned)
}

fn str_of(v: &Value, key: &str) -> Option<String> {
    v.get(key).and_then(Value::as_str).map(str::to_owned)
}

/// A Gemini subagent lives in `chats/<parent session id>/`: that id.
fn gemini_parent_id(path: &Path) -> Option<&str> {
    let dir = path.parent()?;
    let in_chats = dir.parent()?.file_name()? == "chats";
    let id = dir.file_name()?.to_str()?;
    (in_chats && plain_id(id)).then_some(id)
}

/// The session file in `chats/` whose metadata line names `session_id`:
/// `session-<time>-<first 8 characters of the id>.jsonl`.
fn find_gemini_session(subagent: &Path, session_id: &str) -> Option<PathBuf> {
    let chats = subagent.parent()?.parent()?;
    let suffix = format!("-{}.jsonl", session_id.get(..8).unwrap_or(session_id));
    std::fs::read_dir(chats)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("session-") && n.ends_with(&suffix))
        })
        .find(|p| {
            first_lines(p)
                .first()
                .and_then(|v| str_of(v, "sessionId"))
                .is_some_and(|id| id == session_id)
        })
}

/// The subagent transcripts of the session at `main`, sorted: a Gemini
/// session's `chats/<session id>/*.jsonl`, a Cursor session's
/// `<session>/subagents/*.jsonl` (beside the session's file, or around it
/// in the layout that keeps each session in a folder). A hook names only
/// the session; its subagents wrote beside it.
pub(crate) fn subagents_of(runtime: AgentRuntime, main: &Path) -> Vec<PathBuf> {
    let dirs = match runtime {
        AgentRuntime::Gemini => first_lines(main)
            .first()
            .and_then(|v| str_of(v, "sessionId"))
            .filter(|id| plain_id(id))
            .and_then(|id| Some(vec![main.parent()?.join(id)]))
            .unwrap_or_default(),
        AgentRuntime::Cursor => {
            let mut dirs = vec![main.with_extension("").join("subagents")];
            if let Some(own) = main.parent().filter(|d| d.file_name() == main.file_stem()) {
                dirs.push(own.join("subagents"));
            }
            dirs
        }
        _ => Vec::new(),
    };
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        out.extend(
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "jsonl") && p.is_file()),
        );
    }
    out.sort();
    out
}

/// A Cursor session's transcript by its conversation id, in any project:
/// `agent-transcripts/<id>.jsonl` or `agent-transcripts/<id>/<id>.jsonl`.
pub(crate) fn find_cursor_session(paths: &Paths, conversation_id: &str) -> Option<PathBuf> {
    if !plain_id(conversation_id) {
        return None;
    }
    let projects = std::fs::read_dir(paths.cursor_dir.join("projects")).ok()?;
    let name = format!("{conversation_id}.jsonl");
    projects
        .flatten()
        .map(|e| e.path().join("agent-transcripts"))
        .flat_map(|dir| [dir.join(&name), dir.join(conversation_id).join(&name)])
        .find(|p| p.is_file())
}

/// A Cursor subagent's transcript: `<session>/subagents/<id>.jsonl` hangs
/// under `<session>.jsonl` beside its folder, or `<session>/<session>.jsonl`
/// in the layout that keeps each session in a folder.
fn cursor_parent(path: &Path) -> Option<PathBuf> {
    if !in_subagents(path) {
        return None;
    }
    let session_dir = path.parent()?.parent()?;
    let beside = session_dir.with_extension("jsonl");
    if beside.is_file() {
        return Some(beside);
    }
    let name = session_dir.file_name()?;
    Some(session_dir.join(name).with_extension("jsonl"))
}

/// A Claude subagent's session file: `<session>/subagents/agent-*.jsonl`
/// hangs under `<session>.jsonl`; an older `agent-*.jsonl` beside the
/// session names it by the `sessionId` on its lines.
fn claude_parent(path: &Path, session_id: Option<&str>) -> Option<PathBuf> {
    let dir = path.parent()?;
    if dir.file_name()? == "subagents" {
        let session_dir = dir.parent()?;
        return Some(session_dir.with_extension("jsonl"));
    }
    let name = path.file_name()?.to_str()?;
    if !name.starts_with("agent-") {
        return None;
    }
    let session = session_id.filter(|s| plain_id(s))?;
    let parent = dir.join(format!("{session}.jsonl"));
    (parent != path).then_some(parent)
}

/// The longest line `folder_anywhere` reads (a delta's own limit); a longer
/// one is passed over.
const MAX_SCAN_LINE: u64 = 64 << 20;

/// Whether `runtime`'s transcripts name their working folder in their own
/// lines (the others take it from where they live or a database: `peek`).
pub(crate) fn names_folder_in_lines(runtime: AgentRuntime) -> bool {
    matches!(
        runtime,
        AgentRuntime::ClaudeCode | AgentRuntime::Codex | AgentRuntime::Pi | AgentRuntime::Copilot
    )
}

/// The working folder one record names, as `runtime` writes it.
fn folder_in(runtime: AgentRuntime, v: &Value) -> Option<String> {
    let kind = v.get("type").and_then(Value::as_str);
    let at = |pointer: &str| string_at(Some(v), pointer).filter(|s| !s.is_empty());
    match (runtime, kind) {
        (AgentRuntime::ClaudeCode, _) => at("/cwd"),
        (AgentRuntime::Codex, Some("session_meta" | "turn_context")) => at("/payload/cwd"),
        (AgentRuntime::Pi, Some("session")) => at("/cwd"),
        (AgentRuntime::Copilot, Some("session.start")) => at("/data/context/cwd"),
        _ => None,
    }
}

/// The working folder a transcript names, wherever it first does: past the
/// lines `peek` reads (seventy summaries first), or in a first line too
/// long to peek at. Every line is read, one at a time, each up to
/// `MAX_SCAN_LINE`; `None` when no line names one (yet).
pub(crate) fn folder_anywhere(runtime: AgentRuntime, path: &Path) -> Option<String> {
    let file = open_regular(path).ok()??;
    let mut reader = BufReader::new(file);
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = (&mut reader)
            .take(MAX_SCAN_LINE)
            .read_until(b'\n', &mut line)
            .ok()?;
        if n == 0 {
            return None;
        }
        if !line.ends_with(b"\n") && n as u64 == MAX_SCAN_LINE {
            // Too long to read whole: pass over the rest of it.
            let mut rest = Vec::new();
            loop {
                rest.clear();
                let m = (&mut reader)
                    .take(MAX_SCAN_LINE)
                    .read_until(b'\n', &mut rest)
                    .ok()?;
                if m == 0 || rest.ends_with(b"\n") {
                    break;
                }
            }
            continue;
        }
        if let Ok(v) = serde_json::from_slice::<Value>(&line) {
            if let Some(folder) = folder_in(runtime, &v) {
                return Some(folder);
            }
        }
    }
}

/// Up to `PEEK_LINES` complete first lines that parse as JSON objects.
fn first_lines(path: &Path) -> Vec<Value> {
    let Ok(Some(file)) = open_regular(path) else {
        return Vec::new();
    };
    BufReader::new(file.take(PEEK_BYTES))
        .split(b'\n')
        .take(PEEK_LINES)
        .map_while(|l| l.ok())
        .filter_map(|l| serde_json::from_slice::<Value>(&l).ok())
        .filter(Value::is_object)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_opencode_journal_hangs_under_the_session_its_first_line_names() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let paths = Paths::under(dir.path());
        let root = journals_root(&paths, AgentRuntime::OpenCode);
        std::fs::create_dir_all(&root).expect("the journals");
        let cases = [
            (
                "ses_child",
                r#"{"kind":"session","id":"ses_child","parent_id":"ses_root","data":{}}"#,
                Some("ses_root.jsonl"),
            ),
            (
                "ses_root",
                r#"{"kind":"session","id":"ses_root","data":{}}"#,
                None,
            ),
            (
                "ses_odd",
                r#"{"kind":"session","id":"ses_odd","parent_id":"../x","data":{}}"#,
                None,
            ),
        ];
        for (id, first, parent) in cases {
            let path = root.join(format!("{id}.jsonl"));
            std::fs::write(&path, format!("{first}\n")).expect("a journal");
            assert!(is_transcript(&paths, &path), "{id}");
            let peek = peek(&paths, runtime_of(&paths, &path), &path);
            assert_eq!(peek.conversation_id.as_deref(), Some(id));
            assert_eq!(peek.parent, parent.map(|p| root.join(p)), "{id}");
        }
        let found: Vec<String> = all(&paths, &[])
            .into_iter()
            .map(|s| {
                s.path
                    .file_name()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(
            found,
            ["ses_odd.jsonl", "ses_root.jsonl", "ses_child.jsonl"],
            "sessions before subagents"
        );
    }

    #[test]
    fn aider_histories_in_a_project_or_one_level_under_a_root() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        let src = tmp.path().join("src");
        let lone = tmp.path().join("lone");
        for dir in ["src/a", "src/b", "src/c/deep", "src/.hidden", "lone"] {
            std::fs::create_dir_all(tmp.path().join(dir))?;
        }
        for dir in ["src/a", "src/c/deep", "src/.hidden", "lone", "src"] {
            std::fs::write(tmp.path().join(dir).join(AIDER_HISTORY), "#### hi  \n")?;
        }
        std::fs::write(src.join("b/notes.md"), "#### not aider's  \n")?;
        let roots = [
            src.clone(),
            lone.clone(),
            tmp.path().join("gone"),
            src.join("a"),
            src.clone(),
        ];
        let found: Vec<PathBuf> = all(&paths, &roots)
            .into_iter()
            .map(|s| {
                assert_eq!(s.runtime, AgentRuntime::Aider);
                assert_eq!(runtime_of(&paths, &s.path), AgentRuntime::Aider);
                assert!(is_transcript(&paths, &s.path));
                s.path
            })
            .collect();
        assert_eq!(
            found,
            [
                src.join(AIDER_HISTORY),
                src.join("a").join(AIDER_HISTORY),
                lone.join(AIDER_HISTORY)
            ],
            "each once; deeper and hidden folders are not looked in"
        );
        assert!(!is_transcript(&paths, &src.join("b/notes.md")));
        let peek = peek(
            &paths,
            AgentRuntime::Aider,
            &src.join("a").join(AIDER_HISTORY),
        );
        assert_eq!(peek.cwd, Some(src.join("a").display().to_string()));
        Ok(())
    }

    /// Copilot CLI and OpenCode name their working folder too, so an
    /// exclusion by folder holds for them as for the others.
    /// Copies the repository fixture folder `rel` to `to`.
    fn copy_fixture(rel: &str, to: &Path) -> anyhow::Result<()> {
        let from = kith_shared::fixtures::path(rel);
        let mut stack = vec![(from, to.to_path_buf())];
        while let Some((from, to)) = stack.pop() {
            std::fs::create_dir_all(&to)?;
            for entry in std::fs::read_dir(&from)? {
                let entry = entry?;
                let target = to.join(entry.file_name());
                if entry.file_type()?.is_dir() {
                    stack.push((entry.path(), target));
                } else {
                    std::fs::copy(entry.path(), target)?;
                }
            }
        }
        Ok(())
    }

    /// Regression: a Copilot CLI session folder and a Cursor project folder
    /// kept elsewhere behind a symbolic link were never found (`kith
    /// status` said "found 0"). They are found, once per real file though a
    /// link and the real path both lead to it; a link back up to an
    /// ancestor and a dangling link end the walk there.
    #[test]
    fn linked_session_and_project_folders_are_found_once() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let paths = Paths::under(&dir.path().join("home"));
        let elsewhere = dir.path().join("elsewhere");
        let session = "3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30";
        copy_fixture(&format!("copilot/{session}"), &elsewhere.join(session))?;
        copy_fixture("cursor/home-sam-src-tally", &elsewhere.join("tally"))?;
        let state = paths.copilot_dir.join("session-state");
        let projects = paths.cursor_dir.join("projects");
        std::fs::create_dir_all(&state)?;
        std::fs::create_dir_all(&projects)?;
        std::os::unix::fs::symlink(elsewhere.join(session), state.join(session))?;
        std::os::unix::fs::symlink(elsewhere.join("tally"), projects.join("home-sam-src-tally"))?;
        // A loop, and a link to nothing.
        std::os::unix::fs::symlink(&projects, elsewhere.join("tally").join("loop"))?;
        std::os::unix::fs::symlink(dir.path().join("gone"), state.join("dangling"))?;

        let found = found(&paths, &[]);
        let mut got: Vec<(&str, PathBuf)> = found
            .sources
            .iter()
            .map(|s| (s.runtime.as_str(), s.path.clone()))
            .collect();
        got.sort();
        let events = state.join(session).join("events.jsonl");
        let transcripts = projects
            .join("home-sam-src-tally")
            .join("agent-transcripts");
        let main = transcripts.join("5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73.jsonl");
        let sub = transcripts
            .join("5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73")
            .join("subagents")
            .join("9c4f1a7e-3b2d-4c85-a0e6-7d1f2b9c3e58.jsonl");
        let mut want = vec![
            ("copilot", events.clone()),
            ("cursor", main.clone()),
            ("cursor", sub.clone()),
        ];
        want.sort();
        assert_eq!(got, want);
        assert_eq!(found.linked, [events, main, sub].into_iter().collect());

        // The same file by its real path under the root too: found once, by
        // that path, not through the link.
        let real = state.join("real-copy");
        std::fs::create_dir_all(&real)?;
        let real_events = real.join("events.jsonl");
        std::fs::hard_link(elsewhere.join(session).join("events.jsonl"), &real_events)?;
        let copilot: Vec<PathBuf> = all(&paths, &[])
            .into_iter()
            .filter(|s| s.runtime == AgentRuntime::Copilot)
            .map(|s| s.path)
            .collect();
        assert_eq!(copilot, [real_events]);
        Ok(())
    }

    #[test]
    fn copilot_and_opencode_transcripts_name_their_folder() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let paths = Paths::under(dir.path());
        let copilot = dir.path().join("events.jsonl");
        std::fs::write(
            &copilot,
            concat!(
                r#"{"type":"session.start","data":{"sessionId":"s1","context":{"cwd":"/home/sam/secret-project","branch":"main"}}}"#,
                "\n"
            ),
        )?;
        let peeked = peek(&paths, AgentRuntime::Copilot, &copilot);
        assert_eq!(peeked.cwd.as_deref(), Some("/home/sam/secret-project"));
        assert_eq!(peeked.conversation_id.as_deref(), Some("s1"));
        let opencode = dir.path().join("ses_1.jsonl");
        std::fs::write(
            &opencode,
            concat!(
                r#"{"kind":"session","id":"ses_1","data":{"id":"ses_1","directory":"/home/sam/secret-project"}}"#,
                "\n"
            ),
        )?;
        let peeked = peek(&paths, AgentRuntime::OpenCode, &opencode);
        assert_eq!(peeked.cwd.as_deref(), Some("/home/sam/secret-project"));
        // A line without one names none.
        std::fs::write(
            &opencode,
            "{\"kind\":\"session\",\"id\":\"ses_1\",\"data\":{}}\n",
        )?;
        assert_eq!(peek(&paths, AgentRuntime::OpenCode, &opencode).cwd, None);
        Ok(())
    }
}
