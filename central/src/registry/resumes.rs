//! Where a conversation continues on another machine. `kith resume` writes
//! a conversation into another machine's agent store with its working
//! folder rewritten, so the file there begins with a copy of bytes central
//! already holds. The machine records that copy here before the agent runs:
//! the file (its source identity), where the copy ends, and the
//! conversation it copies. The copy is never sent; the first delta after it
//! continues the conversation from its last run (`ingest`).
//!
//! A resume belongs to its owner alone: only the owner of every run of the
//! conversation records one, and a delta finds only its own sender's.
//!
//! A fork is a conversation someone may read (shared with them) written on
//! their machine under a new session id: the file is theirs and is sent
//! whole; its chain's first run names the conversation it came from.

use kith_proto::ForkOrigin;
use rusqlite::{params, OptionalExtension};

use super::{to_i64, Registry, Viewer};
use crate::error::{Code, Error, Result};

pub(super) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS resumes (
    user_id TEXT NOT NULL,
    machine_id TEXT NOT NULL,
    -- The file on the resuming machine, as its deltas will name it.
    source_identity TEXT NOT NULL,
    -- Where the copy ends in that file: its first delta starts here.
    at_offset INTEGER NOT NULL,
    conversation TEXT NOT NULL,
    -- The conversation's last run when it was resumed: the parent of the
    -- first delta after the copy.
    parent_run_id TEXT NOT NULL,
    -- The chain hash the machine continues from (`chain_next` over the
    -- copy's sha256).
    chain_sha256 TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (user_id, source_identity, at_offset)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS forks (
    user_id TEXT NOT NULL,
    -- The file on the forking machine, as its deltas will name it.
    source_identity TEXT NOT NULL,
    conversation TEXT NOT NULL,
    -- The handle of the member who wrote it.
    owner TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (user_id, source_identity)
) WITHOUT ROWID;
";

/// A recorded resume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resume {
    pub conversation: String,
    pub parent_run_id: String,
    pub chain_sha256: String,
}

/// A resume to record: the file on the caller's machine and where its copy
/// of the conversation ends.
pub struct NewResume<'a> {
    pub source_identity: &'a str,
    pub at_offset: u64,
    pub resume: &'a Resume,
}

impl Registry {
    /// Records the viewer's machine's resume; the same one again is the one
    /// recorded, another at the same place is a conflict.
    pub fn record_resume(&self, viewer: &Viewer, new: &NewResume<'_>) -> Result<Resume> {
        let machine = viewer.machine_id().ok_or(Error::Unauthenticated)?;
        let r = new.resume;
        self.conn().execute(
            "INSERT OR IGNORE INTO resumes (user_id, machine_id, source_identity, at_offset,
                 conversation, parent_run_id, chain_sha256, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![
                viewer.user_id().as_str(),
                machine.as_str(),
                new.source_identity,
                to_i64(new.at_offset),
                r.conversation,
                r.parent_run_id,
                r.chain_sha256,
                kith_shared::timestamp::now(),
            ],
        )?;
        match self.resume_at(viewer, new.source_identity, new.at_offset)? {
            Some(found) if found.conversation == r.conversation => Ok(found),
            Some(_) => Err(Error::conflict(
                Code::ResumeConflict,
                "this file already continues another conversation",
            )),
            None => Err(Error::Internal("a recorded resume was not found".into())),
        }
    }

    /// Records that the viewer's file `source` is a fork of `origin`; the
    /// same file again names the fork first recorded.
    pub fn record_fork(
        &self,
        viewer: &Viewer,
        source: &str,
        origin: &ForkOrigin,
    ) -> Result<ForkOrigin> {
        self.conn().execute(
            "INSERT OR IGNORE INTO forks (user_id, source_identity, conversation, owner, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![
                viewer.user_id().as_str(),
                source,
                origin.conversation_id,
                origin.owner,
                kith_shared::timestamp::now(),
            ],
        )?;
        self.fork_of(viewer, source)?
            .ok_or_else(|| Error::Internal("a recorded fork was not found".into()))
    }

    /// What the viewer's file `source` was forked from, if it was.
    pub fn fork_of(&self, viewer: &Viewer, source: &str) -> Result<Option<ForkOrigin>> {
        Ok(self
            .reader()
            .prepare_cached(
                "SELECT conversation, owner FROM forks WHERE user_id = ?1 AND source_identity = ?2",
            )?
            .query_row(params![viewer.user_id().as_str(), source], |r| {
                Ok(ForkOrigin {
                    conversation_id: r.get(0)?,
                    owner: r.get(1)?,
                })
            })
            .optional()?)
    }

    /// The viewer's resume whose copy ends at `offset` of `source`.
    pub fn resume_at(&self, viewer: &Viewer, source: &str, offset: u64) -> Result<Option<Resume>> {
        Ok(self
            .reader()
            .prepare_cached(
                "SELECT conversation, parent_run_id, chain_sha256 FROM resumes
                 WHERE user_id = ?1 AND source_identity = ?2 AND at_offset = ?3",
            )?
            .query_row(
                params![viewer.user_id().as_str(), source, to_i64(offset)],
                |r| {
                    Ok(Resume {
                        conversation: r.get(0)?,
                        parent_run_id: r.get(1)?,
                        chain_sha256: r.get(2)?,
                    })
                },
            )
            .optional()?)
    }
}
