//! The outbox: every delta is spooled here before anything is sent (0600,
//! temp file then rename, names that sort oldest first), then replayed to
//! central oldest first with its run id as the `Idempotency-Key`. Only a 202
//! removes an entry and advances the cursor's accepted offset.
//!
//! An entry is also where its chain's spooled mark lives until central takes
//! it: capture does not rewrite the cursor file for each delta (`Header::
//! advance`), and the entry is not fsynced. A crash that loses an entry (or
//! leaves it empty) loses its spooled mark with it, so the cursor falls back
//! to the delta before and those bytes are captured again from the
//! transcript, which the agent did not fsync either: a crash can cost kith
//! nothing the transcript still holds. The cursor file is made durable when
//! a chain starts and before an accepted entry is removed. A hook spooling a
//! delta thus waits for no disk flush at all.
//!
//! An entry is one header line of JSON (which file, which chain, which range,
//! the local chain hash) followed by the zstd-compressed `IngestRequest` body,
//! sent as it is with `Content-Encoding: zstd`.
//!
//! What central answers decides what happens next:
//! - 202: remove, advance `accepted` (if the receipt's chain hash agrees);
//! - down, slow, 429, a proxy's answer: stop, keep everything, note the
//!   error;
//! - central's own 5xx: keep the entry and hold back the rest of its
//!   transcript (and subagents refused for want of its run), deliver the
//!   others; three such failures in a row stop the replay;
//! - 401: stop, note that the token was refused;
//! - 409 (and 400 `unknown_parent`): the chain cannot continue; move the entry
//!   and the rest of its chain to `rejected/` with the reason and let the next
//!   capture start a new chain from byte 0, so nothing is silently lost;
//! - other 4xx (400, 413): these bytes will never be taken; move them aside
//!   the same way and park the file until it is replaced or rewritten.

use std::fs;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

use kith_proto::{IngestRequest, IngestResponse};
use serde::{Deserialize, Serialize};

use crate::config::{private_dir, write_file, write_private, Durability, Lock};
use crate::cursor::{self, Cursor, Cursors, Mark};
use crate::error::{Error, IoContext, Result};

/// What an entry is about, readable without decompressing the body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Header {
    /// The transcript (its cursor's key).
    pub(crate) file: PathBuf,
    pub(crate) source_identity: String,
    pub(crate) from_offset: u64,
    pub(crate) to_offset: u64,
    /// Also the `Idempotency-Key`.
    pub(crate) run_id: String,
    /// The chain hash after this delta, as the agent computed it; central's
    /// receipt must say the same.
    pub(crate) chain_sha256: String,
    /// The cursor's `tail_sha256` and `size` after this delta (absent from
    /// entries of kith versions that wrote the cursor for every delta).
    #[serde(default)]
    pub(crate) tail_sha256: Option<String>,
    #[serde(default)]
    pub(crate) size: u64,
}

/// An entry's first line: its header and the length of the body after it,
/// so an entry a crash left short is recognised (entries are not fsynced).
#[derive(Serialize, Deserialize)]
struct HeaderLine {
    #[serde(flatten)]
    header: Header,
    /// 0 in entries of kith versions that fsynced them.
    #[serde(default)]
    body_bytes: u64,
}

impl Header {
    /// The chain's mark after this delta.
    fn mark(&self) -> Mark {
        Mark {
            offset: self.to_offset,
            chain_sha256: Some(self.chain_sha256.clone()),
            run_id: Some(self.run_id.clone()),
        }
    }

    /// Moves `c`'s spooled mark to the end of this delta, if the delta is on
    /// c's chain, ahead of the mark, and says what the cursor needs.
    pub(crate) fn advance(&self, c: &mut Cursor) {
        if self.source_identity == c.source_identity()
            && self.to_offset > c.spooled.offset
            && self.tail_sha256.is_some()
        {
            c.spooled = self.mark();
            c.tail_sha256.clone_from(&self.tail_sha256);
            c.size = c.size.max(self.size);
        }
    }
}

/// A header line is a path, an identity and a few hashes: far less.
const MAX_HEADER: u64 = 64 * 1024;

#[derive(Debug, Clone)]
pub(crate) struct Outbox {
    dir: PathBuf,
    rejected: PathBuf,
    last_error: PathBuf,
    /// When central last accepted a delta from this machine (`kith status`).
    last_sent: PathBuf,
    /// The latest time in the names of the entries waiting when this outbox
    /// first spooled: its entries sort after them (`push`).
    waiting: OnceLock<u64>,
}

impl Outbox {
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("outbox"),
            rejected: state_dir.join("rejected"),
            last_error: state_dir.join("last_error"),
            last_sent: state_dir.join("last_sent"),
            waiting: OnceLock::new(),
        }
    }

    /// Spools one delta, not fsynced (see the module notes). An error (a
    /// full disk) leaves no entry behind.
    /// The newest time in the names of `transcript`'s entries waiting now:
    /// what its next entry must sort after (`push`), read once each time
    /// capture takes the state lock (no other kith spools meanwhile).
    pub(crate) fn newest_stamp_of(&self, transcript: &Path) -> u64 {
        let tag = format!("-{}-", cursor::key(transcript));
        self.names()
            .iter()
            .filter(|n| n.to_string_lossy().contains(&tag))
            .filter_map(stamp)
            .max()
            .unwrap_or(0)
    }

    /// `after` is `newest_stamp_of` the transcript.
    pub(crate) fn push(
        &self,
        header: &Header,
        request: &IngestRequest,
        after: u64,
    ) -> Result<PathBuf> {
        // After every entry waiting when this outbox first spooled, and
        // every entry of this transcript another kith spooled since,
        // whatever the clock says now (it may have stepped back since);
        // `sortable_now` keeps order after that.
        let waiting = *self
            .waiting
            .get_or_init(|| self.names().iter().filter_map(stamp).max().unwrap_or(0));
        let path = self.dir.join(format!(
            "{:020}-{}-{}.delta",
            sortable_now(waiting.max(after)),
            cursor::key(&header.file),
            header.run_id
        ));
        // Serialized straight into the compressor: no copy of the JSON, which
        // is as big as the delta (up to `MAX_DELTA`), is ever held.
        let mut encoder = zstd::Encoder::new(Vec::new(), 1).at("compress", &path)?;
        {
            let mut json = BufWriter::with_capacity(1 << 16, &mut encoder);
            serde_json::to_writer(&mut json, request).map_err(|e| invalid(&path, &e))?;
            json.flush().at("compress", &path)?;
        }
        let body = encoder.finish().at("compress", &path)?;
        let line = HeaderLine {
            header: header.clone(),
            body_bytes: body.len() as u64,
        };
        let mut bytes = serde_json::to_vec(&line).map_err(|e| invalid(&path, &e))?;
        bytes.push(b'\n');
        bytes.extend_from_slice(&body);
        write_file(&path, &bytes, 0o600, Durability::Advisory)?;
        Ok(path)
    }

    /// The newest whole entry of `cursor`'s chain, if any is waiting.
    pub(crate) fn newest_of(&self, cursor: &Cursor) -> Option<Header> {
        let tag = format!("-{}-", cursor::key(&cursor.path));
        let identity = cursor.source_identity();
        let mut names = self.names();
        names.retain(|n| n.to_string_lossy().contains(&tag));
        names.sort_unstable();
        names
            .iter()
            .rev()
            .filter_map(|n| self.header(&self.dir.join(n)).ok())
            .find(|h| h.source_identity == identity)
    }

    /// The entries spooled after `entry` from the same transcript (its key
    /// is in their names), oldest first.
    fn later_of_same_transcript(&self, entry: &Path) -> Vec<PathBuf> {
        let Some(name) = entry.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            return Vec::new();
        };
        // `<time>-<key>-<run>.delta`; entries of older kith versions have
        // no key.
        let Some(key) = name.split('-').nth(1).filter(|k| k.len() == 32) else {
            return Vec::new();
        };
        let tag = format!("-{key}-");
        self.entries()
            .into_iter()
            .filter(|e| {
                e.file_name().is_some_and(|n| {
                    let n = n.to_string_lossy();
                    n.contains(&tag) && *n > *name
                })
            })
            .collect()
    }

    /// Entry files, oldest first.
    pub(crate) fn entries(&self) -> Vec<PathBuf> {
        let mut names = self.names();
        // By name: the same order as by path, without comparing every
        // component of two long paths (a deep outbox is sorted per hook).
        names.sort_unstable();
        names.into_iter().map(|n| self.dir.join(n)).collect()
    }

    /// Entry file names, unsorted.
    fn names(&self) -> Vec<std::ffi::OsString> {
        fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| Path::new(n).extension().is_some_and(|e| e == "delta"))
            .collect()
    }

    /// Removes the temp files of entries whose writing was cut short (a
    /// hook killed by its agent's timeout mid-write): a delta's bytes that
    /// would otherwise stay on disk for good. A temp file lives for the
    /// moment of one write, so one this old is no write's any more.
    fn remove_stale_temps(&self) {
        const STALE: Duration = Duration::from_secs(600);
        for entry in fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let stale = entry.file_name().to_string_lossy().starts_with(".tmp-")
                && entry
                    .metadata()
                    .is_ok_and(|m| crate::config::left_alone_for(&m, STALE));
            if stale {
                let _ = fs::remove_file(entry.path());
            }
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.names().len()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header alone (its line is read, not the body), if the entry is
    /// whole.
    fn header(&self, entry: &Path) -> Result<Header> {
        use std::io::{BufRead as _, Read as _};
        let file = fs::File::open(entry).at("read", entry)?;
        let len = file.metadata().at("stat", entry)?.len();
        let mut line = Vec::new();
        std::io::BufReader::new(file.take(MAX_HEADER))
            .read_until(b'\n', &mut line)
            .at("read", entry)?;
        parse_header(entry, &line, len.saturating_sub(line.len() as u64))
    }

    /// The header and the compressed body, if the entry is whole.
    pub(crate) fn read(&self, entry: &Path) -> Result<(Header, Vec<u8>)> {
        let bytes = fs::read(entry).at("read", entry)?;
        let split = bytes
            .iter()
            .position(|&b| b == b'\n')
            .ok_or_else(|| torn(entry, "no header line"))?;
        let body = bytes[split + 1..].to_vec();
        let header = parse_header(entry, &bytes[..=split], body.len() as u64)?;
        Ok((header, body))
    }

    /// The request as it will be sent.
    #[cfg(test)]
    pub(crate) fn request(&self, entry: &Path) -> Result<IngestRequest> {
        let (_, body) = self.read(entry)?;
        let json = zstd::decode_all(body.as_slice()).at("decompress", entry)?;
        serde_json::from_slice(&json).map_err(|e| invalid(entry, &e))
    }

    /// Moves an entry to `rejected/`, with `<name>.reason` beside it.
    pub(crate) fn reject(&self, entry: &Path, reason: &str) -> Result<()> {
        let name = entry.file_name().unwrap_or_default();
        let dest = self.rejected.join(name);
        private_dir(&self.rejected)?;
        fs::rename(entry, &dest).at("move aside", entry)?;
        write_private(&dest.with_extension("reason"), reason.as_bytes())
    }

    pub(crate) fn rejected(&self) -> usize {
        fs::read_dir(&self.rejected)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "delta"))
            .count()
    }

    /// Why the last replay stopped, if it did.
    pub(crate) fn last_error(&self) -> Option<String> {
        fs::read_to_string(&self.last_error).ok()
    }

    fn note_error(&self, why: &str) {
        let _ = write_file(
            &self.last_error,
            why.as_bytes(),
            0o600,
            Durability::Advisory,
        );
    }

    /// When central last accepted a delta (RFC 3339), if it ever did.
    pub(crate) fn last_sent(&self) -> Option<String> {
        fs::read_to_string(&self.last_sent)
            .ok()
            .map(|t| t.trim().to_owned())
    }

    fn note_sent(&self) {
        let now = kith_shared::timestamp::now();
        let _ = write_file(&self.last_sent, now.as_bytes(), 0o600, Durability::Advisory);
    }

    fn clear_error(&self) {
        let _ = fs::remove_file(&self.last_error);
    }
}

/// The header of an entry whose first line is `line` and whose body is
/// `body_bytes` long, if the entry is whole.
fn parse_header(entry: &Path, line: &[u8], body_bytes: u64) -> Result<Header> {
    if line.last() != Some(&b'\n') {
        return Err(torn(entry, "no header line"));
    }
    let parsed: HeaderLine = serde_json::from_slice(line).map_err(|e| invalid(entry, &e))?;
    if parsed.body_bytes != 0 && parsed.body_bytes != body_bytes {
        return Err(torn(
            entry,
            &format!(
                "{body_bytes} body bytes where {} were written",
                parsed.body_bytes
            ),
        ));
    }
    Ok(parsed.header)
}

fn torn(entry: &Path, reason: &str) -> Error {
    Error::Invalid {
        what: "outbox entry",
        path: entry.to_owned(),
        reason: reason.to_owned(),
    }
}

fn invalid(path: &Path, e: &serde_json::Error) -> Error {
    Error::Invalid {
        what: "outbox entry",
        path: path.to_owned(),
        reason: e.to_string(),
    }
}

/// The time an entry's name starts with.
fn stamp(name: &std::ffi::OsString) -> Option<u64> {
    name.to_str()?.split('-').next()?.parse().ok()
}

/// Nanoseconds since the epoch, strictly increasing within this process
/// (so a session's delta always sorts before its subagent's) and past
/// `after`.
fn sortable_now(after: u64) -> u64 {
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = time::OffsetDateTime::now_utc().unix_timestamp_nanos();
    let now = u64::try_from(now).unwrap_or(0);
    let mut last = LAST.load(Ordering::Relaxed);
    loop {
        let next = now.max(last + 1).max(after.saturating_add(1));
        match LAST.compare_exchange(last, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

/// Central's answer to one delivery, as the replay needs it.
#[derive(Debug, Clone)]
pub(crate) enum Delivery {
    Accepted(IngestResponse),
    /// Not reachable, too slow, 429, or not kith-central answering: try
    /// again later.
    NotNow(String),
    /// Central failed on this delta (a 5xx with its error body): try it
    /// again later, and meanwhile deliver other transcripts' deltas.
    Failed(String),
    /// 401: nothing gets through until `kith login`.
    Unauthorized(String),
    /// Central will never take this delta as it is.
    Refused {
        status: u16,
        code: String,
        message: String,
    },
}

/// What one replay did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Replayed {
    pub(crate) accepted: usize,
    pub(crate) rejected: usize,
    /// Why it stopped before the outbox was empty.
    pub(crate) stopped: Option<String>,
    /// It stopped because central refused the token (401).
    pub(crate) token_refused: bool,
    /// Another kith process is replaying; it will deliver these too.
    pub(crate) busy: bool,
}

/// Transcripts whose delta central failed on, one after another, before a
/// replay stops: central is failing on everything, not on one delta.
const MAX_FAILED_IN_A_ROW: usize = 3;

/// Replays the outbox oldest first through `deliver` (header, zstd body).
/// One process replays at a time (the send lock; if another holds it past
/// `lock_wait`, this returns at once with `busy`, and that process also picks
/// up what was spooled meanwhile: it lists the outbox again until it is empty
/// or it stops). A delta central fails on (a 5xx) holds back only its own
/// transcript's later deltas. The state lock is held only for each entry's
/// bookkeeping, never across a request.
pub(crate) fn replay(
    state_dir: &Path,
    lock_wait: Duration,
    mut deliver: impl FnMut(&Header, Vec<u8>) -> Delivery,
) -> Result<Replayed> {
    let _sending = match Lock::sending(state_dir, lock_wait) {
        Ok(lock) => lock,
        Err(Error::Busy { .. }) => {
            return Ok(Replayed {
                busy: true,
                ..Replayed::default()
            })
        }
        Err(e) => return Err(e),
    };
    let outbox = Outbox::new(state_dir);
    outbox.remove_stale_temps();
    let cursors = Cursors::new(state_dir);
    let mut done = Replayed::default();
    // Chains whose earlier delta was refused: their later deltas follow it.
    let mut broken: Vec<String> = Vec::new();
    // Chains whose delta central failed on: their later deltas wait too.
    let mut held: Vec<String> = Vec::new();
    let mut failed_in_a_row = 0;
    loop {
        let entries = outbox.entries();
        if entries.is_empty() {
            break;
        }
        for entry in entries {
            if !entry.is_file() {
                // Set aside below, after an unreadable delta before it.
                continue;
            }
            // A held transcript's later deltas are skipped on their header
            // line alone, not read whole (a backlog may hold thousands).
            if !held.is_empty()
                && outbox
                    .header(&entry)
                    .is_ok_and(|h| held.contains(&h.source_identity))
            {
                continue;
            }
            let (header, body) = match outbox.read(&entry) {
                Ok(read) => read,
                Err(e) => {
                    // Left short or empty by a crash (entries are not
                    // fsynced). What was spooled after it from the same
                    // transcript would not chain on what central holds, so
                    // it goes aside too, under one lock: the next capture
                    // sends those bytes again from the cursor file's mark,
                    // where this delta began (every earlier delta of its
                    // chain was accepted, and each accept saved the mark).
                    let _lock = Lock::state(state_dir, lock_wait)?;
                    let later = outbox.later_of_same_transcript(&entry);
                    outbox.reject(&entry, &format!("unreadable: {e}"))?;
                    for later in &later {
                        outbox.reject(later, "follows an unreadable delta")?;
                    }
                    done.rejected += 1 + later.len();
                    continue;
                }
            };
            if broken.contains(&header.source_identity) {
                let _lock = Lock::state(state_dir, lock_wait)?;
                outbox.reject(&entry, "follows a delta central refused")?;
                done.rejected += 1;
                continue;
            }
            let answer = deliver(&header, body);
            let _lock = Lock::state(state_dir, lock_wait)?;
            match answer {
                Delivery::Accepted(receipt) if receipt.chain_sha256 == header.chain_sha256 => {
                    // The entry may hold the chain's only spooled mark: the
                    // cursor file takes it, durably, before the entry goes.
                    cursors.update(&header.file, Durability::Durable, |c| {
                        header.advance(c);
                        if c.source_identity() == header.source_identity
                            && header.to_offset > c.accepted.offset
                        {
                            c.accepted = header.mark();
                            c.last_error = None;
                        }
                    })?;
                    fs::remove_file(&entry).at("remove", &entry)?;
                    if held.is_empty() {
                        outbox.clear_error();
                    }
                    if done.accepted == 0 {
                        outbox.note_sent();
                    }
                    done.accepted += 1;
                    failed_in_a_row = 0;
                }
                Delivery::Accepted(receipt) => {
                    let why = format!(
                        "central holds other bytes for {}..{} (run {}); capturing the file again as a new chain",
                        header.from_offset, header.to_offset, receipt.run_id
                    );
                    refuse(&outbox, &cursors, &entry, &header, &why, Then::Restart)?;
                    broken.push(header.source_identity);
                    done.rejected += 1;
                }
                Delivery::NotNow(why) => {
                    outbox.note_error(&why);
                    done.stopped = Some(why);
                    return Ok(done);
                }
                Delivery::Failed(why) => {
                    outbox.note_error(&why);
                    held.push(header.source_identity);
                    failed_in_a_row += 1;
                    done.stopped = Some(why);
                    if failed_in_a_row >= MAX_FAILED_IN_A_ROW {
                        // Central fails on everything, not on one delta.
                        return Ok(done);
                    }
                }
                Delivery::Unauthorized(why) => {
                    outbox.note_error(&why);
                    done.stopped = Some(why);
                    done.token_refused = true;
                    return Ok(done);
                }
                // A subagent whose parent's run is held back: it waits too.
                Delivery::Refused { code, .. } if code == "unknown_parent" && !held.is_empty() => {
                    held.push(header.source_identity);
                }
                Delivery::Refused {
                    status,
                    code,
                    message,
                } => {
                    let why = format!("central refused the delta ({status} {code}): {message}");
                    let then = if status == 409 || code == "unknown_parent" {
                        Then::Restart
                    } else {
                        Then::Park
                    };
                    refuse(&outbox, &cursors, &entry, &header, &why, then)?;
                    broken.push(header.source_identity);
                    done.rejected += 1;
                }
            }
        }
        if !held.is_empty() {
            // What is left waits for the next replay.
            return Ok(done);
        }
    }
    Ok(done)
}

/// Removes the entries `drop` picks (deltas of a transcript an exclusion
/// added since covers), so they are never sent. Holds the send lock, so no
/// replay is sending one meanwhile, and does nothing while another kith
/// replays (it discards them next time). The transcripts' cursors fall back
/// to their files' marks, as for a lost entry.
pub(crate) fn discard(
    state_dir: &Path,
    lock_wait: Duration,
    drop: impl Fn(&Header) -> bool,
) -> Result<usize> {
    let _sending = match Lock::sending(state_dir, lock_wait) {
        Ok(lock) => lock,
        Err(Error::Busy { .. }) => return Ok(0),
        Err(e) => return Err(e),
    };
    let _lock = Lock::state(state_dir, lock_wait)?;
    let outbox = Outbox::new(state_dir);
    let mut dropped = 0;
    for entry in outbox.entries() {
        if outbox.header(&entry).is_ok_and(|h| drop(&h)) {
            fs::remove_file(&entry).at("remove", &entry)?;
            dropped += 1;
        }
    }
    Ok(dropped)
}

enum Then {
    /// Capture the file again as a new chain.
    Restart,
    /// Stop capturing the file until it changes.
    Park,
}

fn refuse(
    outbox: &Outbox,
    cursors: &Cursors,
    entry: &Path,
    header: &Header,
    why: &str,
    then: Then,
) -> Result<()> {
    outbox.reject(entry, why)?;
    cursors.update(&header.file, Durability::Durable, |c| {
        if c.source_identity() == header.source_identity {
            match then {
                Then::Restart => c.restart = Some(why.to_owned()),
                Then::Park => c.parked = Some(why.to_owned()),
            }
        }
        c.last_error = Some(why.to_owned());
    })
}

#[cfg(test)]
mod tests;
