//! Journals: append-only JSONL copies of transcripts their agents rewrite.
//!
//! Capture ships a transcript by byte offset, which needs a file that only
//! grows. Some agents rewrite theirs instead (Gemini CLI before v0.39 writes
//! one JSON object whole on every update). For those, a mirror compares
//! what the source holds now with what its journal already says and
//! appends only the difference; the journal, under
//! `<state>/journals/<runtime>/`, is then found and captured like any other
//! transcript, so cursors, the outbox and exactly-once apply unchanged.
//! Nothing in a journal is ever rewritten: a record that changed is
//! appended again, a record that went away gets a removal line, and
//! central's fold of the lines keeps only the live ones.
//!
//! A journal is its own state: after a crash, reading it back says what
//! was mirrored (a torn last line is cut), so a refresh appends each change
//! exactly once.

mod gemini;
mod opencode;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kith_proto::AgentRuntime;

use crate::config::{private_dir, Lock, Paths};
use crate::discover::{self, Source};
use crate::error::{IoContext, Result};

/// How long a refresh waits for another kith process's capture.
const LOCK_WAIT: Duration = Duration::from_secs(10);

/// One record of a rewritten source: a stable key and its current line (one
/// JSON object, no newline).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) key: String,
    pub(crate) line: String,
}

/// What a journal line says about a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    Put(String),
    Removed(String),
    Other,
}

/// An append-only JSONL journal and the lines it holds.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    lines: Vec<String>,
}

impl Journal {
    /// Reads the journal at `path` (none yet: empty). A last line without
    /// its newline is a crash mid-append: it is cut, on disk too, and the
    /// next refresh appends it again whole.
    pub(crate) fn open(path: &Path) -> Result<Journal> {
        let mut bytes = Vec::new();
        match File::open(path) {
            Ok(mut f) => {
                f.read_to_end(&mut bytes).at("read", path)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).at("open", path),
        }
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        if whole < bytes.len() {
            OpenOptions::new()
                .write(true)
                .open(path)
                .and_then(|f| f.set_len(whole as u64))
                .at("repair", path)?;
            bytes.truncate(whole);
        }
        let lines = String::from_utf8_lossy(&bytes)
            .lines()
            .map(str::to_owned)
            .collect();
        Ok(Journal {
            path: path.to_owned(),
            lines,
        })
    }

    pub(crate) fn lines(&self) -> &[String] {
        &self.lines
    }

    /// Appends `lines` in one write and syncs it; creates the folder (0700)
    /// and the file (0600) if needed.
    pub(crate) fn append(&mut self, lines: &[String]) -> Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        if let Some(dir) = self.path.parent() {
            private_dir(dir)?;
        }
        let mut buf = String::new();
        for line in lines {
            debug_assert!(!line.contains('\n'), "a journal line holds no newline");
            buf.push_str(line);
            buf.push('\n');
        }
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .and_then(|mut f| {
                f.write_all(buf.as_bytes())?;
                f.sync_data()
            })
            .at("append to", &self.path)?;
        self.lines.extend(lines.iter().cloned());
        Ok(())
    }
}

/// Appends each record whose line differs from its key's last line in the
/// journal, then `removal(key)` for each key the journal holds that
/// `records` no longer has (in the order the journal first saw them).
/// `read` tells what a journal line says. Returns how many lines were
/// appended.
pub(crate) fn sync(
    journal: &mut Journal,
    records: &[Record],
    read: impl Fn(&str) -> Seen,
    removal: impl Fn(&str) -> String,
) -> Result<usize> {
    let mut last: HashMap<String, Option<&str>> = HashMap::new();
    let mut order: Vec<String> = Vec::new();
    for line in journal.lines() {
        match read(line) {
            Seen::Put(key) => {
                if last.insert(key.clone(), Some(line)).is_none() {
                    order.push(key);
                }
            }
            Seen::Removed(key) => {
                last.insert(key, None);
            }
            Seen::Other => {}
        }
    }
    // A key given twice (two files claiming one id) is one record: its
    // first place, its last line (both, appended at each refresh, would
    // grow the journal for ever).
    let mut latest: HashMap<&str, &str> = records
        .iter()
        .map(|r| (r.key.as_str(), r.line.as_str()))
        .collect();
    let mut new: Vec<String> = Vec::new();
    for r in records {
        let Some(line) = latest.remove(r.key.as_str()) else {
            continue;
        };
        if last.get(&r.key).copied().flatten() != Some(line) {
            new.push(line.to_owned());
        }
    }
    let present: std::collections::HashSet<&str> = records.iter().map(|r| r.key.as_str()).collect();
    new.extend(
        order
            .iter()
            .filter(|k| last[*k].is_some() && !present.contains(k.as_str()))
            .map(|k| removal(k)),
    );
    journal.append(&new)?;
    Ok(new.len())
}

/// `<state>/journals/<runtime slug>/<rel>`.
pub(crate) fn journal_path(paths: &Paths, runtime: AgentRuntime, rel: &Path) -> PathBuf {
    discover::journals_root(paths, runtime).join(rel)
}

/// Whether a change to `path` is one a mirror reads.
pub(crate) fn is_source(paths: &Paths, path: &Path) -> bool {
    gemini::is_source(paths, path) || opencode::is_source(paths, path)
}

/// Refreshes the journals fed by a changed source file and returns them
/// (grown or not: one a crash left uncaptured is captured with them).
pub(crate) fn refresh(paths: &Paths, source: &Path) -> Result<Vec<PathBuf>> {
    let gemini = gemini::is_source(paths, source);
    if !gemini && !opencode::is_source(paths, source) {
        return Ok(Vec::new());
    }
    // One writer per journal: hooks and `kith watch` refresh side by side.
    let _lock = Lock::state(&paths.state_dir, LOCK_WAIT)?;
    match gemini {
        true => Ok(gemini::refresh(paths, source)?.into_iter().collect()),
        false => opencode::refresh(paths, source),
    }
}

/// Every mirrored source on this machine.
pub(crate) fn sources(paths: &Paths) -> Vec<PathBuf> {
    let mut out = gemini::sources(paths);
    out.extend(opencode::sources(paths));
    out
}

/// Folders holding mirrored sources outside the transcript roots, for
/// `kith watch`, each with whether its subfolders are watched too.
pub(crate) fn source_folders(paths: &Paths) -> Vec<(PathBuf, notify::RecursiveMode)> {
    opencode::folders(paths)
}

/// Whether `dir` is one a mirror makes for every message (OpenCode's old
/// storage tree keeps each message's parts in a folder of its own): a new
/// one starts no rescan, since its message's file changing refreshes the
/// whole session (and the periodic rescan catches the rest).
pub(crate) fn holds_sources(paths: &Paths, dir: &Path) -> bool {
    opencode::holds(paths, dir)
}

/// Refreshes every mirrored source (`kith capture`); the sources whose
/// refresh failed, with why.
pub(crate) fn refresh_all(paths: &Paths) -> Vec<(PathBuf, crate::Error)> {
    sources(paths)
        .into_iter()
        .filter_map(|source| refresh(paths, &source).err().map(|e| (source, e)))
        .collect()
}

/// The transcripts to capture for `source`: itself, or the journals it
/// feeds once refreshed.
pub(crate) fn resolve(paths: &Paths, source: Source) -> Result<Vec<Source>> {
    if !is_source(paths, &source.path) {
        return Ok(vec![source]);
    }
    Ok(refresh(paths, &source.path)?
        .into_iter()
        .map(|path| Source {
            runtime: discover::runtime_of_journal(paths, &path).unwrap_or(source.runtime),
            path,
        })
        .collect())
}

/// What a source looked like when its journal was last brought up to it:
/// size, modification time and inode, kept beside the journal
/// (`<journal>.seen`). A rescan reads and parses only sources that differ;
/// a crash before the stamp is written costs one more read, which appends
/// nothing. A file changed within the last second is not stamped: two
/// rewrites of the same size inside one tick of the file system's clock
/// would look alike.
pub(crate) struct Stamp {
    path: PathBuf,
    journal: PathBuf,
    now: String,
    settled: bool,
}

impl Stamp {
    /// The stamp of `source` as it is now, for the journal at `journal`.
    pub(crate) fn of(source: &std::fs::Metadata, journal: &Path) -> Stamp {
        use std::os::unix::fs::MetadataExt;
        let mut path = journal.as_os_str().to_owned();
        path.push(".seen");
        Stamp {
            path: PathBuf::from(path),
            journal: journal.to_owned(),
            now: format!(
                "{} {}.{} {}",
                source.len(),
                source.mtime(),
                source.mtime_nsec(),
                source.ino()
            ),
            settled: crate::config::left_alone_for(source, Duration::from_secs(1)),
        }
    }

    /// Whether the journal is there, brought up to the source as it is now
    /// (a journal removed meanwhile is written again).
    pub(crate) fn unchanged(&self) -> bool {
        self.journal.is_file()
            && std::fs::read_to_string(&self.path).is_ok_and(|was| was == self.now)
    }

    /// Records that the journal is up to the source as it is now.
    pub(crate) fn record(&self) -> Result<()> {
        if !self.settled {
            return Ok(());
        }
        crate::config::write_file(
            &self.path,
            self.now.as_bytes(),
            0o600,
            crate::config::Durability::Advisory,
        )
    }
}

/// `json` on one line: whitespace outside strings dropped, everything else
/// (key order, number spelling, escapes) byte for byte. A JSON string
/// cannot hold a raw newline, so the result has none.
pub(crate) fn compact(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in json.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !c.is_ascii_whitespace() {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests;
