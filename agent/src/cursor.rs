//! Per-transcript capture cursors: how far a file was spooled and how far
//! central accepted, the hash chain at both points, the file's identity and a
//! hash of the bytes just before the spooled offset. One file per transcript
//! under `<state>/cursors/`, holding two copies of the cursor (`slots`).

use std::fs::{self, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use kith_proto::AgentRuntime;
use kith_shared::hash::sha256_hex;
use serde::{Deserialize, Serialize};

use crate::config::{write_file, Durability};
use crate::error::{Error, IoContext, Result};

/// A point in a source's chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Mark {
    /// Byte offset in the source file (original bytes, before redaction).
    pub(crate) offset: u64,
    /// `kith_shared::hash` chain over the deltas up to `offset`; `None` at 0.
    pub(crate) chain_sha256: Option<String>,
    /// The run that ends at `offset`: the next delta's parent.
    pub(crate) run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Cursor {
    pub(crate) path: PathBuf,
    pub(crate) runtime: AgentRuntime,
    /// File identity when this chain started; another inode is another file.
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    /// Size when last looked at: a smaller file was truncated or rewritten.
    pub(crate) size: u64,
    /// Chain generation; every new chain of this path bumps it, so each chain
    /// has its own `source_identity`.
    pub(crate) epoch: u64,
    /// End of the bytes written to the outbox. The cursor file is written
    /// when a chain starts and when central accepts a delta, so its copy can
    /// lag behind deltas still in the outbox; `Capture::cursor` catches it up.
    pub(crate) spooled: Mark,
    /// End of the bytes central acknowledged (202) on this chain.
    pub(crate) accepted: Mark,
    /// sha256 of the up to `plan::TAIL_WINDOW` bytes before `spooled.offset`:
    /// one small read detects a rewrite, whatever the file's size.
    pub(crate) tail_sha256: Option<String>,
    /// The agent's own session / thread id, peeked when the chain started.
    pub(crate) conversation_id: Option<String>,
    /// The transcript this one hangs under (a subagent's session, a Codex
    /// child's parent rollout), found when the chain started.
    pub(crate) parent_path: Option<PathBuf>,
    /// The folder the agent worked in, peeked once it is on a line: what
    /// `exclude` and the tag rules match.
    pub(crate) cwd: Option<String>,
    /// Central refused this chain (409): the next capture starts a new one.
    pub(crate) restart: Option<String>,
    /// Central can never take this chain's next bytes (400, 413): capture
    /// waits until the file is replaced or rewritten. Shown by `kith status`.
    pub(crate) parked: Option<String>,
    /// The last thing that went wrong for this file, for `kith status`.
    pub(crate) last_error: Option<String>,
}

impl Cursor {
    /// A chain that starts at byte 0 of the file as it is now.
    pub(crate) fn start(
        path: &Path,
        runtime: AgentRuntime,
        (dev, ino): (u64, u64),
        epoch: u64,
    ) -> Self {
        Self {
            path: path.to_owned(),
            runtime,
            dev,
            ino,
            size: 0,
            epoch,
            spooled: Mark::default(),
            accepted: Mark::default(),
            tail_sha256: None,
            conversation_id: None,
            parent_path: None,
            cwd: None,
            restart: None,
            parked: None,
            last_error: None,
        }
    }

    /// Path + file identity + epoch: what central chains deltas by.
    pub(crate) fn source_identity(&self) -> String {
        format!(
            "{}#{}:{}:{}",
            self.path.display(),
            self.dev,
            self.ino,
            self.epoch
        )
    }
}

/// A transcript's short name in kith's state: its cursor file's stem, also
/// part of its outbox entries' names.
pub(crate) fn key(transcript: &Path) -> String {
    let mut key = sha256_hex(transcript.as_os_str().as_encoded_bytes());
    key.truncate(32);
    key
}

/// The cursors folder.
#[derive(Debug, Clone)]
pub(crate) struct Cursors {
    dir: PathBuf,
}

impl Cursors {
    pub(crate) fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("cursors"),
        }
    }

    fn file_of(&self, transcript: &Path) -> PathBuf {
        self.dir.join(format!("{}.json", key(transcript)))
    }

    /// The cursor of `transcript`, by its real path (as capture keys every
    /// cursor: a symlinked agent folder names the file another way).
    pub(crate) fn load(&self, transcript: &Path) -> Result<Option<Cursor>> {
        let real = std::fs::canonicalize(transcript);
        let file = self.file_of(real.as_deref().unwrap_or(transcript));
        self.read(&file)?
            .map(|bytes| newest(&file, &bytes))
            .transpose()
    }

    /// Saves durably.
    pub(crate) fn save(&self, cursor: &Cursor) -> Result<()> {
        let file = self.file_of(&cursor.path);
        let existing = self.read(&file)?;
        write(&file, existing.as_deref(), cursor, Durability::Durable)
    }

    /// Loads, changes and saves one cursor, reading its file once (callers
    /// hold the state lock).
    pub(crate) fn update(
        &self,
        transcript: &Path,
        durability: Durability,
        change: impl FnOnce(&mut Cursor),
    ) -> Result<()> {
        let file = self.file_of(transcript);
        let Some(bytes) = self.read(&file)? else {
            return Ok(());
        };
        let mut c = newest(&file, &bytes)?;
        change(&mut c);
        write(&file, Some(&bytes), &c, durability)
    }

    /// The cursor file's bytes; `None` when there is none.
    fn read(&self, file: &Path) -> Result<Option<Vec<u8>>> {
        match fs::read(file) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at("read", file),
        }
    }

    /// Every cursor; unreadable ones are skipped.
    #[cfg(test)]
    pub(crate) fn all(&self) -> Vec<Cursor> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| fs::read(e.path()).ok())
            .filter_map(|b| slots::newest(&b).ok())
            .collect()
    }
}

/// The newest whole copy in a cursor file's bytes.
fn newest(file: &Path, bytes: &[u8]) -> Result<Cursor> {
    slots::newest(bytes).map_err(|reason| Error::Invalid {
        what: "cursor file",
        path: file.to_owned(),
        reason,
    })
}

/// Saves `cursor` to `file`, whose bytes are `existing`: overwrites the
/// older of the two copies in place and syncs its data (one flush, where a
/// new file takes two, file and folder, and a rename). A save cut short by
/// a crash leaves a copy whose checksum fails, and the other copy is the
/// cursor as it was. A new file, a cursor grown too big for its slot, or a
/// file of the older format is written whole, atomically.
fn write(
    file: &Path,
    existing: Option<&[u8]>,
    cursor: &Cursor,
    durability: Durability,
) -> Result<()> {
    let json = serde_json::to_vec(cursor).map_err(|e| Error::Invalid {
        what: "cursor JSON",
        path: file.to_owned(),
        reason: e.to_string(),
    })?;
    if let Some(w) = existing.and_then(|bytes| slots::overwrite(bytes, &json)) {
        return OpenOptions::new()
            .write(true)
            .open(file)
            .and_then(|f| {
                f.write_all_at(&w.slot, w.offset)?;
                if durability != Durability::Advisory {
                    f.sync_data()?;
                }
                Ok(())
            })
            .at("write", file);
    }
    write_file(file, &slots::new_file(&json), 0o600, durability)
}

/// The cursor file: two slots of equal size, each `sha256 of the rest of
/// the header and the JSON (64 hex digits) | sequence (u64 LE) | JSON length
/// (u32 LE) | JSON | zeros`. The valid slot with the higher sequence is the
/// cursor. A file that starts with `{` is a single JSON cursor (the format
/// before slots).
mod slots {
    use kith_shared::hash::sha256_hex;

    use super::Cursor;

    /// The smallest slot; cursors are ~1 KB, more with long paths or errors.
    const MIN_SLOT: usize = 4096;
    const SUM: usize = 64;
    const HEADER: usize = SUM + 8 + 4;

    pub(crate) struct Overwrite {
        pub(crate) offset: u64,
        pub(crate) slot: Vec<u8>,
    }

    /// The newest valid copy.
    pub(crate) fn newest(file: &[u8]) -> Result<Cursor, String> {
        if file.first() == Some(&b'{') {
            return serde_json::from_slice(file).map_err(|e| e.to_string());
        }
        halves(file)
            .into_iter()
            .flatten()
            .filter_map(read_slot)
            .max_by_key(|(seq, _)| *seq)
            .map(|(_, cursor)| cursor)
            .ok_or_else(|| format!("no whole copy of the cursor in {} bytes", file.len()))
    }

    /// Where and what to write to save `json` over the older copy of `file`,
    /// or `None` when the file must be written whole (older format, no
    /// whole copy, or too small a slot).
    pub(crate) fn overwrite(file: &[u8], json: &[u8]) -> Option<Overwrite> {
        let [first, second] = halves(file)?;
        let seq = |half: &[u8]| checked(half).map(|(seq, _)| seq);
        let (a, b) = (seq(first), seq(second));
        let newest = a.max(b)?;
        let size = first.len();
        if HEADER + json.len() > size {
            return None;
        }
        // The older copy, or one that does not read.
        let older = if a < b { 0 } else { 1 };
        Some(Overwrite {
            offset: (older * size) as u64,
            slot: slot(newest + 1, json),
        })
    }

    /// A new file holding `json` in its first slot.
    pub(crate) fn new_file(json: &[u8]) -> Vec<u8> {
        let size = (HEADER + json.len()).next_power_of_two().max(MIN_SLOT);
        let mut file = slot(1, json);
        file.resize(2 * size, 0);
        file
    }

    fn halves(file: &[u8]) -> Option<[&[u8]; 2]> {
        let size = file.len() / 2;
        (size >= HEADER && file.len().is_multiple_of(2)).then(|| [&file[..size], &file[size..]])
    }

    fn slot(seq: u64, json: &[u8]) -> Vec<u8> {
        let mut body = Vec::with_capacity(12 + json.len());
        body.extend_from_slice(&seq.to_le_bytes());
        body.extend_from_slice(&(json.len() as u32).to_le_bytes());
        body.extend_from_slice(json);
        let mut out = sha256_hex(&body).into_bytes();
        out.extend_from_slice(&body);
        out
    }

    /// A slot's sequence and JSON, if its checksum holds.
    fn checked(half: &[u8]) -> Option<(u64, &[u8])> {
        let (sum, body) = half.split_at_checked(SUM)?;
        let seq = u64::from_le_bytes(body.get(..8)?.try_into().ok()?);
        let len = u32::from_le_bytes(body.get(8..12)?.try_into().ok()?) as usize;
        let body = body.get(..12usize.checked_add(len)?)?;
        (seq != 0 && sha256_hex(body).as_bytes() == sum).then(|| (seq, &body[12..]))
    }

    fn read_slot(half: &[u8]) -> Option<(u64, Cursor)> {
        let (seq, json) = checked(half)?;
        serde_json::from_slice(json).ok().map(|c| (seq, c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cursor_survives_a_round_trip_and_each_epoch_is_its_own_source() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let cursors = Cursors::new(tmp.path());
        let path = Path::new("/home/me/.claude/projects/p/s.jsonl");
        assert_eq!(cursors.load(path)?, None);
        let mut c = Cursor::start(path, AgentRuntime::ClaudeCode, (1, 2), 0);
        c.spooled.offset = 10;
        cursors.save(&c)?;
        assert_eq!(cursors.load(path)?, Some(c.clone()));
        let next = Cursor::start(path, AgentRuntime::ClaudeCode, (1, 2), 1);
        assert_ne!(c.source_identity(), next.source_identity());
        assert!(c
            .source_identity()
            .starts_with("/home/me/.claude/projects/p/s.jsonl#"));
        Ok(())
    }

    /// A save overwrites the older copy in place; a copy torn by a crash
    /// mid-save leaves the cursor as it was before that save, never an
    /// error and never a mix.
    #[test]
    fn a_save_torn_by_a_crash_leaves_the_previous_cursor() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let cursors = Cursors::new(tmp.path());
        let path = Path::new("/home/me/.codex/sessions/r.jsonl");
        let mut c = Cursor::start(path, AgentRuntime::Codex, (1, 2), 0);
        let file = cursors.file_of(path);
        let mut saved = Vec::new();
        for offset in [10, 20, 30] {
            c.accepted.offset = offset;
            cursors.save(&c)?;
            saved.push(c.clone());
            assert_eq!(cursors.load(path)?, Some(c.clone()));
        }
        let bytes = fs::read(&file)?;
        assert_eq!(bytes.len(), 8192, "saves after the first write in place");
        // The newest copy (offset 30) is the first slot again: tear it.
        for torn_at in [1, 64, 70, 80, 200] {
            let mut torn = bytes.clone();
            torn[torn_at] ^= 0xff;
            fs::write(&file, &torn)?;
            assert_eq!(
                cursors.load(path)?,
                Some(saved[1].clone()),
                "torn at {torn_at}"
            );
        }
        // The next save goes over the torn copy and is the newest.
        c.accepted.offset = 40;
        cursors.save(&c)?;
        assert_eq!(cursors.load(path)?, Some(c.clone()));
        assert_eq!(cursors.all(), vec![c.clone()]);
        // Both copies torn: a clear error naming the file.
        fs::write(&file, vec![7u8; 8192])?;
        let err = cursors.load(path).expect_err("no whole copy");
        assert!(
            err.to_string().contains(&file.display().to_string()),
            "{err}"
        );
        Ok(())
    }

    /// A cursor file of the single-JSON format still loads, and the next
    /// save rewrites it in slots; a cursor too big for its slot (a long
    /// error) grows the file instead of failing.
    #[test]
    fn older_cursor_files_load_and_big_cursors_grow_the_file() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let cursors = Cursors::new(tmp.path());
        let path = Path::new("/home/me/.pi/agent/sessions/s.jsonl");
        let mut c = Cursor::start(path, AgentRuntime::Pi, (3, 4), 2);
        c.spooled.offset = 99;
        let file = cursors.file_of(path);
        fs::create_dir_all(file.parent().unwrap_or(tmp.path()))?;
        fs::write(&file, serde_json::to_vec_pretty(&c)?)?;
        assert_eq!(cursors.load(path)?, Some(c.clone()));
        c.spooled.offset = 120;
        cursors.save(&c)?;
        assert_ne!(fs::read(&file)?.first(), Some(&b'{'), "rewritten in slots");
        assert_eq!(cursors.load(path)?, Some(c.clone()));

        c.last_error = Some("x".repeat(10_000));
        cursors.save(&c)?;
        assert_eq!(cursors.load(path)?, Some(c.clone()));
        assert!(fs::read(&file)?.len() >= 2 * 10_000);
        c.last_error = None;
        cursors.save(&c)?;
        assert_eq!(cursors.load(path)?, Some(c));
        Ok(())
    }
}
