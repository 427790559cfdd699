//! Capture: from a transcript's cursor and a stat, read only the new bytes
//! (seek to the offset; cost independent of the file's size), cut them into
//! deltas of complete lines, redact each, spool it to the outbox and advance
//! the cursor's spooled offset (kept in the entry until central takes it;
//! see `outbox`). Nothing here talks to central.
//!
//! `config.toml`'s rules apply here: a transcript whose path, or whose
//! agent's working folder (peeked from its first lines), matches `exclude`
//! is never read further nor spooled (and deltas spooled before the
//! exclusion was added are discarded unsent); every delta carries the tags
//! of the tag rules whose project holds that folder; `redact`'s patterns
//! are masked after the built-in secret rules.
//!
//! Offsets and the rewrite check refer to the ORIGINAL file bytes; `jsonl`
//! carries the redacted bytes, which have the same length.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use kith_proto::{AgentRuntime, IngestRequest};
use kith_shared::hash::{chain_next, sha256_hex};
use kith_shared::ids::RunId;
use kith_shared::redact::redact_with;
use kith_shared::transcript::Format;

use crate::config::{Durability, Lock, Paths};
use crate::cursor::{Cursor, Cursors, Mark};
use crate::discover::{self, Source};
use crate::error::{Error, IoContext, Result};
use crate::outbox::{Header, Outbox};
use crate::plan::{delta_end, plan, Observed, Plan, MAX_DELTA, TAIL_WINDOW};
use crate::settings::Rules;
use crate::untrusted::{open_regular, MAX_LINE};

/// How deep a chain of parents (subagent -> session -> ...) is followed.
const MAX_PARENT_DEPTH: u32 = 4;

/// What one capture spooled.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Captured {
    pub(crate) deltas: u64,
    pub(crate) bytes: u64,
}

impl std::ops::AddAssign for Captured {
    fn add_assign(&mut self, other: Self) {
        self.deltas += other.deltas;
        self.bytes += other.bytes;
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Capture {
    paths: Paths,
    cursors: Cursors,
    outbox: Outbox,
    /// How long to wait for another kith process holding the state lock.
    lock_wait: Duration,
    /// `exclude` and tag rules (none unless `with_rules`).
    rules: Rules,
}

impl Capture {
    pub(crate) fn new(paths: &Paths, lock_wait: Duration) -> Self {
        Self {
            paths: paths.clone(),
            cursors: Cursors::new(&paths.state_dir),
            outbox: Outbox::new(&paths.state_dir),
            lock_wait,
            rules: Rules::default(),
        }
    }

    /// Applies `config.toml`'s exclusions and tag rules.
    pub(crate) fn with_rules(mut self, rules: Rules) -> Self {
        self.rules = rules;
        self
    }

    /// Spools the new complete lines of one transcript. At a chain start the
    /// transcript it hangs under is captured first, so the first delta can
    /// name that transcript's latest run as its parent.
    pub(crate) fn file(&self, source: &Source) -> Result<Captured> {
        let _lock = Lock::state(&self.paths.state_dir, self.lock_wait)?;
        self.file_locked(source.runtime, &source.path, 0)
    }

    fn file_locked(&self, runtime: AgentRuntime, path: &Path, depth: u32) -> Result<Captured> {
        // One transcript, one cursor, however it was reached: a watch that
        // follows a symlinked folder and a hook naming the real path must not
        // capture the same file twice.
        let given = path;
        // Aider writes its history into the project, which a cloned
        // repository controls: a link there could name any file this user
        // may read. Only a history that is a file of its own is captured.
        if runtime == AgentRuntime::Aider
            && std::fs::symlink_metadata(given).is_ok_and(|m| m.file_type().is_symlink())
        {
            return Ok(Captured::default());
        }
        let canonical = std::fs::canonicalize(path);
        let path = canonical.as_deref().unwrap_or(path);
        // An exclusion may name either path.
        if self.rules.excluded(given, None).is_some() || self.rules.excluded(path, None).is_some() {
            return Ok(Captured::default());
        }
        let old = self.cursor(path)?;
        // The working folder, peeked until a line names it.
        let known_cwd = old.as_ref().and_then(|c| c.cwd.clone());
        let peeked = known_cwd
            .is_none()
            .then(|| discover::peek(&self.paths, runtime, path));
        let mut cwd = known_cwd.or_else(|| peeked.as_ref().and_then(|p| p.cwd.clone()));
        if !self.rules.exclude.is_empty() && discover::names_folder_in_lines(runtime) {
            // An exclusion is decided on the folder wherever the transcript
            // names it; until it does, nothing of it leaves the machine.
            if cwd.is_none() {
                cwd = discover::folder_anywhere(runtime, path);
            }
            if cwd.is_none() {
                return Ok(Captured::default());
            }
        }
        if self
            .rules
            .excluded(path, cwd.as_deref().map(Path::new))
            .is_some()
        {
            return Ok(Captured::default());
        }
        let mut f = match open_regular(path) {
            Ok(Some(f)) => f,
            // Not a regular file (a FIFO, socket, device, folder): not a
            // transcript, whatever its name.
            Ok(None) => return Ok(Captured::default()),
            // Deleted since it was named: nothing to capture.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Captured::default()),
            Err(e) => return Err(e).at("open", path),
        };
        let meta = f.metadata().at("stat", path)?;
        let now = Observed {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.len(),
            tail_sha256: match &old {
                Some(c)
                    if c.spooled.offset > 0
                        && (c.dev, c.ino) == (meta.dev(), meta.ino())
                        && meta.len() >= c.spooled.offset =>
                {
                    Some(tail_hash(&mut f, path, c.spooled.offset)?)
                }
                _ => None,
            },
        };
        let mut cursor = match (plan(old.as_ref(), &now), old) {
            (Plan::Nothing, Some(c)) => {
                self.note_size(path, c.size, now.size)?;
                return Ok(Captured::default());
            }
            (Plan::Nothing, None) => return Ok(Captured::default()),
            (Plan::Append { .. }, Some(mut c)) => {
                if c.cwd.is_none() && cwd.is_some() {
                    self.cursors
                        .update(path, Durability::NotTorn, |c| c.cwd.clone_from(&cwd))?;
                    c.cwd = cwd;
                }
                c
            }
            (Plan::Append { .. } | Plan::Start { .. }, old) => {
                let epoch = old.as_ref().map_or(0, |c| c.epoch + 1);
                let mut c = Cursor::start(path, runtime, (now.dev, now.ino), epoch);
                let peek = peeked.unwrap_or_else(|| discover::peek(&self.paths, runtime, path));
                c.conversation_id = peek.conversation_id;
                c.parent_path = peek.parent.filter(|p| p != path);
                c.cwd = cwd;
                c.last_error = old.and_then(|o| o.last_error);
                c.size = now.size;
                // Durable before any delta of the chain is spooled: the
                // entries name the chain, and only this file says which
                // chain is current.
                self.cursors.save(&c)?;
                c
            }
        };
        let parent_run = match (&cursor.spooled.run_id, &cursor.parent_path) {
            (None, Some(parent)) if depth < MAX_PARENT_DEPTH => {
                // A parent we cannot capture still leaves the child capturable.
                let _ =
                    self.file_locked(discover::runtime_of(&self.paths, parent), parent, depth + 1);
                self.cursor(parent)
                    .ok()
                    .flatten()
                    .and_then(|p| p.spooled.run_id)
            }
            _ => None,
        };

        let seen_size = std::mem::replace(&mut cursor.size, now.size);
        let mut captured = Captured::default();
        let mut offset = cursor.spooled.offset;
        // Read at the first delta: what its entry must sort after.
        let mut spool_after = None;
        while offset < now.size {
            let delta = match next_delta(&mut f, path, offset, now.size)? {
                Next::Delta(delta) => delta,
                Next::Partial => break,
                Next::TooLong => {
                    // Central could never take this line, nor the chain past
                    // it: the file waits until it is replaced or rewritten,
                    // instead of reading the line again at every capture.
                    let why = format!(
                        "a line at byte {offset} runs past {} MiB; kith sends lines up to that",
                        MAX_LINE >> 20
                    );
                    self.cursors.update(path, Durability::Durable, |c| {
                        c.parked = Some(why.clone());
                        c.last_error = Some(why.clone());
                    })?;
                    return Err(Error::Invalid {
                        what: "transcript",
                        path: path.to_owned(),
                        reason: why,
                    });
                }
            };
            let len = delta.len() as u64;
            let after = *spool_after.get_or_insert_with(|| self.outbox.newest_stamp_of(path));
            self.spool(&mut cursor, &mut f, delta, parent_run.as_deref(), after)?;
            offset += len;
            captured += Captured {
                deltas: 1,
                bytes: len,
            };
        }
        if captured.deltas == 0 {
            self.note_size(path, seen_size, now.size)?;
        }
        Ok(captured)
    }

    /// Drops deltas spooled before an exclusion covering their transcript
    /// was added: nothing excluded is sent. The number dropped.
    pub(crate) fn discard_excluded(&self) -> Result<usize> {
        if self.rules.exclude.is_empty() {
            return Ok(0);
        }
        crate::outbox::discard(&self.paths.state_dir, self.lock_wait, |h| {
            let cwd = self
                .cursors
                .load(&h.file)
                .ok()
                .flatten()
                .and_then(|c| c.cwd);
            self.rules
                .excluded(&h.file, cwd.as_deref().map(Path::new))
                .is_some()
        })
    }

    /// A transcript's cursor: its file, caught up with the newest delta of
    /// its chain still waiting in the outbox.
    pub(crate) fn cursor(&self, transcript: &Path) -> Result<Option<Cursor>> {
        let mut cursor = self.cursors.load(transcript)?;
        if let Some(c) = &mut cursor {
            if let Some(newest) = self.outbox.newest_of(c) {
                newest.advance(c);
            }
        }
        Ok(cursor)
    }

    /// Records the size the file was seen at when nothing was spooled (a
    /// partial line came). Only the size changes in the cursor file: its
    /// spooled mark must not run ahead of the outbox.
    fn note_size(&self, transcript: &Path, was: u64, now: u64) -> Result<()> {
        if was == now {
            return Ok(());
        }
        self.cursors
            .update(transcript, Durability::NotTorn, |c| c.size = now)
    }

    /// Redacts one delta, spools it and advances the cursor (in memory; the
    /// entry carries the new mark). If the outbox cannot take it (a full
    /// disk), the cursor stays where it was.
    fn spool(
        &self,
        cursor: &mut Cursor,
        f: &mut File,
        original: Vec<u8>,
        lineage_parent: Option<&str>,
        after: u64,
    ) -> Result<()> {
        let from = cursor.spooled.offset;
        let to = from + original.len() as u64;
        let tail = if original.len() as u64 >= TAIL_WINDOW {
            sha256_hex(&original[original.len() - TAIL_WINDOW as usize..])
        } else {
            tail_hash(f, &cursor.path, to)?
        };
        let lines = Format::of(cursor.runtime).lines();
        let redacted = redact_with(original, lines, &self.rules.redact);
        let chain = chain_next(
            cursor.spooled.chain_sha256.as_deref(),
            &sha256_hex(redacted.text.as_bytes()),
        );
        let run_id = RunId::from_uuid_bytes(uuid::Uuid::now_v7().into_bytes()).to_string();
        let header = Header {
            file: cursor.path.clone(),
            source_identity: cursor.source_identity(),
            from_offset: from,
            to_offset: to,
            run_id: run_id.clone(),
            chain_sha256: chain.clone(),
            tail_sha256: Some(tail.clone()),
            size: cursor.size,
        };
        let request = IngestRequest {
            jsonl: redacted.text,
            agent_runtime: cursor.runtime,
            source_identity: header.source_identity.clone(),
            from_offset: from,
            to_offset: to,
            run_id: Some(run_id.clone()),
            conversation_id: cursor.conversation_id.clone(),
            parent_run_id: cursor
                .spooled
                .run_id
                .clone()
                .or_else(|| lineage_parent.map(str::to_owned)),
            prev_sha256: cursor.spooled.chain_sha256.clone(),
            // Aider's history names no folder (it is the one holding the
            // file), nor does Cursor's (its project folder's slug does).
            cwd: matches!(cursor.runtime, AgentRuntime::Aider | AgentRuntime::Cursor)
                .then(|| cursor.cwd.clone())
                .flatten(),
            git_branch: None,
            agent_version: None,
            tags: self.rules.tags_for(cursor.cwd.as_deref().map(Path::new)),
            // Cursor's lines carry no time: its chat's start, for the
            // delta that starts its transcript (a later one is now).
            started_at: (cursor.runtime == AgentRuntime::Cursor && from == 0)
                .then(|| crate::cursor_agent::started(&self.paths.cursor_dir, &cursor.path))
                .flatten()
                .and_then(|t| {
                    t.format(&time::format_description::well_known::Rfc3339)
                        .ok()
                }),
            redactions: redacted.counts,
        };
        self.outbox.push(&header, &request, after)?;
        cursor.spooled = Mark {
            offset: to,
            chain_sha256: Some(chain),
            run_id: Some(run_id),
        };
        cursor.tail_sha256 = Some(tail);
        Ok(())
    }

    #[cfg(test)]
    pub(crate) fn cursors(&self) -> &Cursors {
        &self.cursors
    }

    pub(crate) fn outbox(&self) -> &Outbox {
        &self.outbox
    }
}

/// What follows `offset` in a transcript.
enum Next {
    /// The next delta's original bytes: complete lines, at most `MAX_DELTA`
    /// unless one line alone is longer.
    Delta(Vec<u8>),
    /// Only a partial line, so far.
    Partial,
    /// A line past `MAX_LINE` (read no further: a file without line ends is
    /// not read whole into memory).
    TooLong,
}

fn next_delta(f: &mut File, path: &Path, offset: u64, size: u64) -> Result<Next> {
    let chunk = |at: u64| (size - at).min(MAX_DELTA as u64);
    let mut buf = read_at(f, path, offset, chunk(offset))?;
    let mut end = delta_end(&buf, MAX_DELTA);
    // One line longer than MAX_DELTA: read on until it ends.
    while end.is_none() && offset + (buf.len() as u64) < size {
        if buf.len() >= MAX_LINE {
            return Ok(Next::TooLong);
        }
        let at = offset + buf.len() as u64;
        let more = read_at(f, path, at, chunk(at))?;
        if more.is_empty() {
            break;
        }
        let had = buf.len();
        buf.extend_from_slice(&more);
        end = buf[had..]
            .iter()
            .position(|&b| b == b'\n')
            .map(|i| had + i + 1);
    }
    Ok(match end {
        Some(end) => {
            buf.truncate(end);
            Next::Delta(buf)
        }
        None => Next::Partial,
    })
}

fn read_at(f: &mut File, path: &Path, offset: u64, len: u64) -> Result<Vec<u8>> {
    f.seek(SeekFrom::Start(offset)).at("seek in", path)?;
    let mut buf = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    f.take(len).read_to_end(&mut buf).at("read", path)?;
    Ok(buf)
}

/// sha256 of the `TAIL_WINDOW` bytes (fewer near the start) before `offset`.
fn tail_hash(f: &mut File, path: &Path, offset: u64) -> Result<String> {
    let start = offset.saturating_sub(TAIL_WINDOW);
    let buf = read_at(f, path, start, offset - start)?;
    if (buf.len() as u64) < offset - start {
        return Err(Error::Invalid {
            what: "transcript",
            path: path.to_owned(),
            reason: "it shrank while being read".into(),
        });
    }
    Ok(sha256_hex(&buf))
}

#[cfg(test)]
mod tests;
