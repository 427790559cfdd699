//! Gemini CLI's legacy sessions (before v0.39): one pretty-printed JSON
//! object, `tmp/<project>/chats/session-<time>-<id8>.json`, rewritten whole
//! on every update. Its journal is written in Gemini CLI's own JSONL form
//! (v0.39 and later), which central already folds: the metadata line, each
//! message as a line when it first appears or changes, `{"$set":{...}}`
//! when the metadata changes, and `{"$rewindTo":"<id>"}` when messages went
//! away. Each message's line is its JSON exactly as written, on one line
//! (`compact`); the metadata line lists the top-level fields other than
//! `messages` by name. A message without an `id` cannot be followed
//! through rewrites and is left out.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

use kith_proto::AgentRuntime;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{compact, journal_path, Journal, Stamp};
use crate::config::Paths;
use crate::error::{Error, IoContext, Result};
use crate::untrusted::{open_regular, read_bounded};

/// Larger legacy files are refused (a session this size is far past what
/// Gemini CLI itself loads).
const MAX_SOURCE: u64 = 256 * 1024 * 1024;

fn root(paths: &Paths) -> PathBuf {
    paths.gemini_dir.join("tmp")
}

/// `tmp/<project>/chats/session-*.json`: exactly those three names under
/// `tmp`, none of them `..` (a path from a hook's payload must not place
/// a journal outside the journals folder).
pub(super) fn is_source(paths: &Paths, path: &Path) -> bool {
    let Ok(rel) = path.strip_prefix(root(paths)) else {
        return false;
    };
    let names: Vec<&str> = rel
        .components()
        .map(|c| match c {
            Component::Normal(name) => name.to_str().unwrap_or_default(),
            _ => "",
        })
        .collect();
    matches!(names.as_slice(), [project, "chats", name]
        if !project.is_empty() && name.starts_with("session-") && name.ends_with(".json"))
}

/// Every legacy session under Gemini CLI's home.
pub(super) fn sources(paths: &Paths) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(projects) = std::fs::read_dir(root(paths)) else {
        return out;
    };
    for project in projects.flatten() {
        let Ok(chats) = std::fs::read_dir(project.path().join("chats")) else {
            continue;
        };
        out.extend(
            chats
                .flatten()
                .map(|e| e.path())
                .filter(|p| is_source(paths, p) && p.is_file()),
        );
    }
    out.sort();
    out
}

/// The journal of `source`: the same place under the journals folder,
/// as `.jsonl`.
fn journal_of(paths: &Paths, source: &Path) -> Option<PathBuf> {
    let rel = source.strip_prefix(root(paths)).ok()?;
    Some(journal_path(
        paths,
        AgentRuntime::Gemini,
        &rel.with_extension("jsonl"),
    ))
}

/// Brings the journal of `source` up to the file's current content; the
/// journal's path.
pub(super) fn refresh(paths: &Paths, source: &Path) -> Result<Option<PathBuf>> {
    let Some(journal_path) = journal_of(paths, source) else {
        return Ok(None);
    };
    // Gone (what was mirrored stays), or not a regular file: nothing to read.
    let file = match open_regular(source) {
        Ok(Some(file)) => file,
        Ok(None) => return Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at("open", source),
    };
    let meta = file.metadata().at("stat", source)?;
    let stamp = Stamp::of(&meta, &journal_path);
    if stamp.unchanged() {
        return Ok(Some(journal_path));
    }
    if meta.len() > MAX_SOURCE {
        return Err(invalid(source, "larger than 256 MiB"));
    }
    let bytes = read_bounded(file, MAX_SOURCE).at("read", source)?;
    let text = String::from_utf8(bytes).map_err(|_| invalid(source, "not UTF-8"))?;
    let session = match Session::parse(&text) {
        Ok(s) => s,
        // Gemini CLI mid-rewrite, or a file it cannot read either: the next
        // change brings a whole one.
        Err(reason) => return Err(invalid(source, &reason)),
    };
    let mut journal = Journal::open(&journal_path)?;
    journal.append(&changes(&Folded::of(journal.lines()), &session))?;
    stamp.record()?;
    Ok(Some(journal_path))
}

fn invalid(path: &Path, reason: &str) -> Error {
    Error::Invalid {
        what: "Gemini CLI session JSON",
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

/// A legacy file, as journal lines would carry it.
#[derive(Debug, PartialEq)]
struct Session {
    /// The top-level fields but `messages`, as one line.
    metadata: String,
    /// `(id, line)` in conversation order.
    messages: Vec<(String, String)>,
}

#[derive(Deserialize)]
struct Id {
    id: Option<String>,
}

impl Session {
    fn parse(text: &str) -> std::result::Result<Session, String> {
        let mut top: BTreeMap<String, Box<RawValue>> =
            serde_json::from_str(text).map_err(|e| e.to_string())?;
        let messages: Vec<Box<RawValue>> = match top.remove("messages") {
            Some(raw) => serde_json::from_str(raw.get()).map_err(|e| format!("messages: {e}"))?,
            None => Vec::new(),
        };
        if !top.contains_key("sessionId") {
            return Err("no sessionId".into());
        }
        let metadata = compact(&serde_json::to_string(&top).map_err(|e| e.to_string())?);
        // An id listed twice is one message, as central folds a journal:
        // its first place, its last text (else each refresh would append
        // both again).
        let mut listed: Vec<(String, String)> = Vec::new();
        for raw in &messages {
            let Some(id) = serde_json::from_str::<Id>(raw.get())
                .ok()
                .and_then(|m| m.id)
            else {
                continue;
            };
            put(&mut listed, id, compact(raw.get()));
        }
        Ok(Session {
            metadata,
            messages: listed,
        })
    }
}

/// A message into `messages`: in the place of an earlier one of its id,
/// else last (Gemini CLI's fold: a message keeps its first place).
fn put(messages: &mut Vec<(String, String)>, id: String, line: String) {
    match messages.iter_mut().find(|(m, _)| *m == id) {
        Some(known) => known.1 = line,
        None => messages.push((id, line)),
    }
}

/// What the journal's lines say so far, folded the way central folds them.
#[derive(Debug, Default)]
struct Folded {
    /// The last metadata written (the first line, or a `$set`'s object).
    metadata: Option<String>,
    messages: Vec<(String, String)>,
}

/// The keys of a journal line that `Folded` reads. The rest is skipped
/// unread, so a line holding what no JSON string can (a lone surrogate
/// escape, half an emoji) folds like any other.
#[derive(Deserialize)]
struct Keys<'a> {
    #[serde(rename = "$set", borrow)]
    set: Option<&'a RawValue>,
    #[serde(rename = "$rewindTo")]
    rewind_to: Option<String>,
    id: Option<String>,
    #[serde(rename = "sessionId", borrow)]
    session_id: Option<&'a RawValue>,
}

impl Folded {
    fn of(lines: &[String]) -> Folded {
        let mut f = Folded::default();
        for line in lines {
            let Ok(keys) = serde_json::from_str::<Keys>(line) else {
                continue;
            };
            if let Some(set) = keys.set {
                f.metadata = Some(set.get().to_owned());
            } else if let Some(id) = keys.rewind_to {
                if let Some(i) = f.position(&id) {
                    f.messages.truncate(i);
                }
            } else if let Some(id) = keys.id {
                put(&mut f.messages, id, line.clone());
            } else if keys.session_id.is_some() {
                f.metadata = Some(line.clone());
            }
        }
        f
    }

    fn position(&self, id: &str) -> Option<usize> {
        self.messages.iter().position(|(m, _)| m == id)
    }
}

/// The lines that take the journal from `was` to `now`.
fn changes(was: &Folded, now: &Session) -> Vec<String> {
    let mut out = Vec::new();
    // Compared as parsed values where both parse (a journal written by an
    // older kith may hold the metadata re-serialised), else as written.
    let same_metadata = was.metadata.as_deref().is_some_and(|m| {
        let value = |text: &str| serde_json::from_str::<serde_json::Value>(text).ok();
        match (value(m), value(&now.metadata)) {
            (Some(a), Some(b)) => a == b,
            _ => m == now.metadata,
        }
    });
    match &was.metadata {
        None => out.push(now.metadata.clone()),
        Some(_) if !same_metadata => out.push(format!("{{\"$set\":{}}}", now.metadata)),
        Some(_) => {}
    }
    // The messages both lists hold in the same order stay; from the first
    // that differs in id, the journal rewinds and takes the rest.
    let kept = was
        .messages
        .iter()
        .zip(&now.messages)
        .take_while(|((a, _), (b, _))| a == b)
        .count();
    if let Some((id, _)) = was.messages.get(kept) {
        out.push(serde_json::json!({ "$rewindTo": id }).to_string());
    }
    for (i, (_, line)) in now.messages.iter().enumerate() {
        let unchanged = i < kept && was.messages[i].1 == *line;
        if !unchanged {
            out.push(line.clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(messages: &[(&str, &str)]) -> String {
        let list: Vec<String> = messages
            .iter()
            .map(|(id, text)| {
                format!(
                    "{{\n  \"id\": \"{id}\",\n  \"type\": \"user\",\n  \"content\": \"{text}\"\n}}"
                )
            })
            .collect();
        format!(
            "{{\n  \"sessionId\": \"s1\",\n  \"lastUpdated\": \"{}\",\n  \"messages\": [\n{}\n]\n}}",
            messages.len(),
            list.join(",\n")
        )
    }

    /// What a step does, the file's messages after it, the lines it appends.
    type Step = (
        &'static str,
        Vec<(&'static str, &'static str)>,
        Vec<&'static str>,
    );

    /// Each step's file, folded from the journal so far, gives the lines the
    /// step appends.
    #[test]
    fn each_rewrite_appends_only_its_difference() {
        let steps: Vec<Step> = vec![
            (
                "first write",
                vec![("a", "hi")],
                vec![
                    r#"{"lastUpdated":"1","sessionId":"s1"}"#,
                    r#"{"id":"a","type":"user","content":"hi"}"#,
                ],
            ),
            (
                "a message appended",
                vec![("a", "hi"), ("b", "more")],
                vec![
                    r#"{"$set":{"lastUpdated":"2","sessionId":"s1"}}"#,
                    r#"{"id":"b","type":"user","content":"more"}"#,
                ],
            ),
            (
                "a message changed in place",
                vec![("a", "hi"), ("b", "more, edited")],
                vec![r#"{"id":"b","type":"user","content":"more, edited"}"#],
            ),
            (
                "the same file again",
                vec![("a", "hi"), ("b", "more, edited")],
                vec![],
            ),
            (
                "rewound past b and a new message",
                vec![("a", "hi"), ("c", "instead")],
                vec![
                    r#"{"$rewindTo":"b"}"#,
                    r#"{"id":"c","type":"user","content":"instead"}"#,
                ],
            ),
            (
                "an id listed twice: one message, its last text",
                vec![("a", "hi"), ("c", "instead"), ("c", "instead, again")],
                vec![
                    r#"{"$set":{"lastUpdated":"3","sessionId":"s1"}}"#,
                    r#"{"id":"c","type":"user","content":"instead, again"}"#,
                ],
            ),
            (
                "the same file again",
                vec![("a", "hi"), ("c", "instead"), ("c", "instead, again")],
                vec![],
            ),
        ];
        let mut journal: Vec<String> = Vec::new();
        for (what, messages, want) in steps {
            let now = Session::parse(&session(&messages)).expect(what);
            let got = changes(&Folded::of(&journal), &now);
            assert_eq!(got, want, "{what}");
            journal.extend(got);
        }
        let folded = Folded::of(&journal);
        let ids: Vec<&str> = folded.messages.iter().map(|(id, _)| id.as_str()).collect();
        assert_eq!(ids, ["a", "c"]);
    }

    /// Half an emoji (a lone surrogate escape, as JavaScript writes one)
    /// in a message or the metadata: the journal takes it once, and the
    /// same file again appends nothing.
    #[test]
    fn a_lone_surrogate_is_journalled_once() {
        let file = r#"{"sessionId":"s1","summary":"cut \ud83d","messages":[{"id":"a","type":"user","content":"half \ud83d"},{"id":"b","type":"user","content":"next"}]}"#;
        let now = Session::parse(file).expect("a session");
        let first = changes(&Folded::of(&[]), &now);
        assert_eq!(first.len(), 3, "{first:?}");
        assert!(first[1].contains(r"half \ud83d"), "kept as written");
        assert_eq!(changes(&Folded::of(&first), &now), Vec::<String>::new());
        let edited = file.replace("summary\":\"cut", "summary\":\"now cut");
        let again = changes(
            &Folded::of(&first),
            &Session::parse(&edited).expect("a session"),
        );
        assert_eq!(again.len(), 1, "{again:?}");
        assert!(again[0].starts_with(r#"{"$set":"#), "{again:?}");
    }

    #[test]
    fn a_file_that_is_not_a_session_is_refused_with_its_reason() {
        for (text, reason) in [
            ("{\"sessionId\": \"s1\", \"messages\": [", "EOF"),
            ("[]", "invalid type"),
            ("{\"messages\": []}", "no sessionId"),
            ("{\"sessionId\": \"s1\", \"messages\": 3}", "messages"),
        ] {
            let err = Session::parse(text).expect_err(text);
            assert!(err.contains(reason), "{text}: {err}");
        }
    }

    #[test]
    fn only_a_session_file_in_a_projects_chats_is_a_source() {
        let paths = Paths::under(Path::new("/home/u"));
        let tmp = "/home/u/.gemini/tmp";
        assert!(is_source(
            &paths,
            Path::new(&format!("{tmp}/p1/chats/session-1.json"))
        ));
        for path in [
            // A hook payload naming a path that climbs out of Gemini's home:
            // its journal would be written outside the journals folder.
            format!("{tmp}/../../../x/chats/session-1.json"),
            format!("{tmp}/p1/../chats/session-1.json"),
            format!("{tmp}/p1/chats/../chats/session-1.json"),
            format!("{tmp}/chats/session-1.json"),
            format!("{tmp}/a/b/chats/session-1.json"),
            format!("{tmp}/p1/chats/session-1.jsonl"),
            format!("{tmp}/p1/chats/notes.json"),
            "/elsewhere/p1/chats/session-1.json".to_owned(),
        ] {
            assert!(!is_source(&paths, Path::new(&path)), "{path}");
        }
    }

    #[test]
    fn compact_keeps_strings_byte_for_byte() {
        let pretty = "{\n  \"a b\": \"x \\\" y\\n\",\n  \"n\": 1.50\n}";
        assert_eq!(compact(pretty), r#"{"a b":"x \" y\n","n":1.50}"#);
    }
}
