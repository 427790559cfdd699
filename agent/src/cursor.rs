//! Per-transcript capture cursors: how far a file was spooled and how far
//! central accepted, the hash chain at both points, the file's identity and a
//! hash of the bytes just before the spooled offset. One JSON file per
//! transcript under `<state>/cursors/`, written atomically.

use std::fs;
use std::path::{Path, PathBuf};

use kith_proto::AgentRuntime;
use kith_shared::hash::sha256_hex;
use serde::{Deserialize, Serialize};

use crate::config::{write_file, Durability};
use crate::error::{Error, IoContext, Result};

/// A point in a source's chain.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mark {
    /// Byte offset in the source file (original bytes, before redaction).
    pub offset: u64,
    /// `kith_shared::hash` chain over the deltas up to `offset`; `None` at 0.
    pub chain_sha256: Option<String>,
    /// The run that ends at `offset`: the next delta's parent.
    pub run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub path: PathBuf,
    pub runtime: AgentRuntime,
    /// File identity when this chain started; another inode is another file.
    pub dev: u64,
    pub ino: u64,
    /// Size when last looked at: a smaller file was truncated or rewritten.
    pub size: u64,
    /// Chain generation; every new chain of this path bumps it, so each chain
    /// has its own `source_identity`.
    pub epoch: u64,
    /// End of the bytes written to the outbox. The cursor file is written
    /// when a chain starts and when central accepts a delta, so its copy can
    /// lag behind deltas still in the outbox; `Capture::cursor` catches it up.
    pub spooled: Mark,
    /// End of the bytes central acknowledged (202) on this chain.
    pub accepted: Mark,
    /// sha256 of the up to `plan::TAIL_WINDOW` bytes before `spooled.offset`:
    /// one small read detects a rewrite, whatever the file's size.
    pub tail_sha256: Option<String>,
    /// The agent's own session / thread id, peeked when the chain started.
    pub conversation_id: Option<String>,
    /// The transcript this one hangs under (a subagent's session, a Codex
    /// child's parent rollout), found when the chain started.
    pub parent_path: Option<PathBuf>,
    /// Central refused this chain (409): the next capture starts a new one.
    pub restart: Option<String>,
    /// Central can never take this chain's next bytes (400, 413): capture
    /// waits until the file is replaced or rewritten. Shown by `kith status`.
    pub parked: Option<String>,
    /// The last thing that went wrong for this file, for `kith status`.
    pub last_error: Option<String>,
}

impl Cursor {
    /// A chain that starts at byte 0 of the file as it is now.
    pub fn start(path: &Path, runtime: AgentRuntime, (dev, ino): (u64, u64), epoch: u64) -> Self {
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
            restart: None,
            parked: None,
            last_error: None,
        }
    }

    /// Path + file identity + epoch: what central chains deltas by.
    pub fn source_identity(&self) -> String {
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
pub fn key(transcript: &Path) -> String {
    let mut key = sha256_hex(transcript.as_os_str().as_encoded_bytes());
    key.truncate(32);
    key
}

/// The cursors folder.
#[derive(Debug, Clone)]
pub struct Cursors {
    dir: PathBuf,
}

impl Cursors {
    pub fn new(state_dir: &Path) -> Self {
        Self {
            dir: state_dir.join("cursors"),
        }
    }

    fn file_of(&self, transcript: &Path) -> PathBuf {
        self.dir.join(format!("{}.json", key(transcript)))
    }

    pub fn load(&self, transcript: &Path) -> Result<Option<Cursor>> {
        let file = self.file_of(transcript);
        match fs::read(&file) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| Error::Invalid {
                    what: "cursor JSON",
                    path: file,
                    reason: e.to_string(),
                }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at("read", &file),
        }
    }

    /// Saves durably.
    pub fn save(&self, cursor: &Cursor) -> Result<()> {
        self.save_with(cursor, Durability::Durable)
    }

    fn save_with(&self, cursor: &Cursor, durability: Durability) -> Result<()> {
        let file = self.file_of(&cursor.path);
        let json = serde_json::to_vec_pretty(cursor).map_err(|e| Error::Invalid {
            what: "cursor JSON",
            path: file.clone(),
            reason: e.to_string(),
        })?;
        write_file(&file, &json, 0o600, durability)
    }

    /// Loads, changes and saves one cursor (callers hold the state lock).
    pub fn update(
        &self,
        transcript: &Path,
        durability: Durability,
        change: impl FnOnce(&mut Cursor),
    ) -> Result<()> {
        if let Some(mut c) = self.load(transcript)? {
            change(&mut c);
            self.save_with(&c, durability)?;
        }
        Ok(())
    }

    /// Every cursor; unreadable ones are skipped.
    pub fn all(&self) -> Vec<Cursor> {
        let Ok(entries) = fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        entries
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| fs::read(e.path()).ok())
            .filter_map(|b| serde_json::from_slice(&b).ok())
            .collect()
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
}
