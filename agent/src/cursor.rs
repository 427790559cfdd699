//! Per-file capture cursors and the pure planner that decides, from a cursor
//! and what the file looks like now, what to send next.
//!
//! A cursor remembers how far the file was spooled (and how far central
//! accepted), the file's identity, and a hash of the bytes just before the
//! offset. Checking that hash costs one small read whatever the file's size;
//! hashing the whole prefix would make every hook slower as transcripts grow.

use serde::{Deserialize, Serialize};

/// Bytes before the offset whose hash detects a rewritten file.
pub const TAIL_WINDOW: u64 = 4096;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    /// Chain generation: a rewritten or replaced file starts a new chain.
    pub epoch: u64,
    /// End of the bytes written to the outbox.
    pub spooled_offset: u64,
    /// Hash chain (kith_shared::hash) at `spooled_offset`.
    pub spooled_chain: Option<String>,
    /// sha256 of the file's bytes in the window before `spooled_offset`.
    pub tail_sha256: String,
    /// End of the bytes central acknowledged.
    pub accepted_offset: u64,
    /// Run id of the last spooled delta (the next delta's parent).
    pub last_run_id: Option<String>,
    pub last_error: Option<String>,
}

impl Cursor {
    pub fn source_identity(&self) -> String {
        format!("{}#{}:{}:{}", self.path, self.dev, self.ino, self.epoch)
    }
}

/// The file as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observed {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    /// sha256 of the window before the cursor's offset, if the file is that long.
    pub tail_sha256: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Nothing new.
    Nothing,
    /// New bytes from this offset (complete lines only are sent).
    Append { from: u64 },
    /// The file was replaced, shrank or was rewritten: a new chain from 0.
    Restart,
}

pub fn plan(cursor: Option<&Cursor>, now: &Observed) -> Plan {
    let Some(c) = cursor else {
        return if now.size > 0 {
            Plan::Append { from: 0 }
        } else {
            Plan::Nothing
        };
    };
    if (c.dev, c.ino) != (now.dev, now.ino) || now.size < c.spooled_offset {
        return Plan::Restart;
    }
    if c.spooled_offset > 0 && now.tail_sha256.as_deref() != Some(c.tail_sha256.as_str()) {
        return Plan::Restart;
    }
    if now.size == c.spooled_offset {
        Plan::Nothing
    } else {
        Plan::Append {
            from: c.spooled_offset,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cursor(offset: u64, tail: &str) -> Cursor {
        Cursor {
            path: "/t.jsonl".into(),
            dev: 1,
            ino: 2,
            epoch: 0,
            spooled_offset: offset,
            spooled_chain: None,
            tail_sha256: tail.into(),
            accepted_offset: 0,
            last_run_id: None,
            last_error: None,
        }
    }

    fn seen(ino: u64, size: u64, tail: Option<&str>) -> Observed {
        Observed {
            dev: 1,
            ino,
            size,
            tail_sha256: tail.map(Into::into),
        }
    }

    #[test]
    fn table() {
        let cases: &[(&str, Option<Cursor>, Observed, Plan)] = &[
            (
                "new file",
                None,
                seen(2, 10, None),
                Plan::Append { from: 0 },
            ),
            ("new empty file", None, seen(2, 0, None), Plan::Nothing),
            (
                "appended",
                Some(cursor(10, "h")),
                seen(2, 25, Some("h")),
                Plan::Append { from: 10 },
            ),
            (
                "unchanged",
                Some(cursor(10, "h")),
                seen(2, 10, Some("h")),
                Plan::Nothing,
            ),
            (
                "shrank",
                Some(cursor(10, "h")),
                seen(2, 4, None),
                Plan::Restart,
            ),
            (
                "truncated to zero",
                Some(cursor(10, "h")),
                seen(2, 0, None),
                Plan::Restart,
            ),
            (
                "replaced (new inode)",
                Some(cursor(10, "h")),
                seen(3, 30, Some("h")),
                Plan::Restart,
            ),
            (
                "rewritten in place",
                Some(cursor(10, "h")),
                seen(2, 30, Some("other")),
                Plan::Restart,
            ),
        ];
        for (what, c, now, want) in cases {
            assert_eq!(plan(c.as_ref(), now), *want, "{what}");
        }
    }
}
