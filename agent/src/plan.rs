//! What to send next, from a cursor and what the file looks like now. Pure:
//! `capture` does the stat and the reads, this module only decides.
//!
//! The rules: a new file starts a chain; another inode, a shrink, a changed
//! tail (pi rewrites files) or a refusal by central starts a NEW chain from
//! byte 0 (never a silent skip); appended bytes continue the chain from the
//! spooled offset; only complete lines are sent, a partial last line waits.

use crate::cursor::Cursor;

/// Bytes before the spooled offset whose hash detects a rewritten file.
pub(crate) const TAIL_WINDOW: u64 = 4096;

/// Deltas are cut at a line boundary once this long, so a backlog travels in
/// pieces central's body limit (64 MiB by default, JSON-escaped) takes; a
/// single longer line travels alone.
pub(crate) const MAX_DELTA: usize = 8 << 20;

/// The file as it is now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    pub(crate) dev: u64,
    pub(crate) ino: u64,
    pub(crate) size: u64,
    /// sha256 of the `TAIL_WINDOW` bytes before the cursor's spooled offset;
    /// `None` when there is no cursor or the file is shorter than that.
    pub(crate) tail_sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Nothing new, or only a partial line, or the chain is parked.
    Nothing,
    /// Continue the chain with the complete lines after `from`.
    Append { from: u64 },
    /// A new chain (new epoch, new source identity) from byte 0.
    Start { why: Why },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Why {
    /// No cursor yet.
    New,
    /// Another file now lives at the path (different dev/inode).
    Replaced,
    /// Smaller than last seen: truncated or rewritten.
    Shrank,
    /// The bytes before the spooled offset changed.
    Rewritten,
    /// Central refused the chain; the reason.
    Refused(String),
}

pub(crate) fn plan(cursor: Option<&Cursor>, now: &Observed) -> Plan {
    let Some(c) = cursor else {
        return if now.size > 0 {
            Plan::Start { why: Why::New }
        } else {
            Plan::Nothing
        };
    };
    let why = if (c.dev, c.ino) != (now.dev, now.ino) {
        Some(Why::Replaced)
    } else if now.size < c.size || now.size < c.spooled.offset {
        Some(Why::Shrank)
    } else if c.spooled.offset > 0 && now.tail_sha256 != c.tail_sha256 {
        Some(Why::Rewritten)
    } else {
        c.restart.clone().map(Why::Refused)
    };
    if let Some(why) = why {
        return Plan::Start { why };
    }
    if c.parked.is_some() || now.size == c.spooled.offset {
        return Plan::Nothing;
    }
    Plan::Append {
        from: c.spooled.offset,
    }
}

/// Where the next delta in `buf` (bytes from the delta's start) ends: after
/// the last `\n` within `max` bytes, else after the first `\n` beyond (a line
/// longer than `max` travels alone); `None` when no line is complete yet.
pub(crate) fn delta_end(buf: &[u8], max: usize) -> Option<usize> {
    let head = &buf[..buf.len().min(max)];
    if let Some(i) = head.iter().rposition(|&b| b == b'\n') {
        return Some(i + 1);
    }
    buf[head.len()..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|i| head.len() + i + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_proto::AgentRuntime;
    use std::path::Path;

    /// A cursor for inode 2 spooled to `offset`, last seen at `size` bytes.
    fn cursor(offset: u64, size: u64) -> Cursor {
        let mut c = Cursor::start(Path::new("/t.jsonl"), AgentRuntime::Pi, (1, 2), 0);
        c.spooled.offset = offset;
        c.size = size;
        c.tail_sha256 = (offset > 0).then(|| "tail".to_owned());
        c
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
        let refused = {
            let mut c = cursor(10, 10);
            c.restart = Some("chain_mismatch".into());
            c
        };
        let parked = {
            let mut c = cursor(10, 10);
            c.parked = Some("payload_too_large".into());
            c
        };
        let append = |from| Plan::Append { from };
        let start = |why| Plan::Start { why };
        let cases: Vec<(&str, Option<Cursor>, Observed, Plan)> = vec![
            ("new file", None, seen(2, 10, None), start(Why::New)),
            ("new empty file", None, seen(2, 0, None), Plan::Nothing),
            (
                "appended",
                Some(cursor(10, 10)),
                seen(2, 25, Some("tail")),
                append(10),
            ),
            (
                "unchanged",
                Some(cursor(10, 10)),
                seen(2, 10, Some("tail")),
                Plan::Nothing,
            ),
            (
                "partial line grew (cursor saw 14 bytes, 10 complete)",
                Some(cursor(10, 14)),
                seen(2, 20, Some("tail")),
                append(10),
            ),
            (
                "nothing spooled yet, lines arrive",
                Some(cursor(0, 5)),
                seen(2, 30, None),
                append(0),
            ),
            (
                "shrank below the offset",
                Some(cursor(10, 10)),
                seen(2, 4, None),
                start(Why::Shrank),
            ),
            (
                "truncated to zero",
                Some(cursor(10, 10)),
                seen(2, 0, None),
                start(Why::Shrank),
            ),
            (
                "shrank but kept the spooled bytes (a partial line vanished)",
                Some(cursor(10, 14)),
                seen(2, 12, Some("tail")),
                start(Why::Shrank),
            ),
            (
                "replaced by another file (new inode)",
                Some(cursor(10, 10)),
                seen(3, 30, Some("tail")),
                start(Why::Replaced),
            ),
            (
                "replaced by an empty file",
                Some(cursor(10, 10)),
                seen(3, 0, None),
                start(Why::Replaced),
            ),
            (
                "rewritten in place (pi migration)",
                Some(cursor(10, 10)),
                seen(2, 30, Some("other")),
                start(Why::Rewritten),
            ),
            (
                "refused by central",
                Some(refused),
                seen(2, 10, Some("tail")),
                start(Why::Refused("chain_mismatch".into())),
            ),
            (
                "parked: appends wait",
                Some(parked.clone()),
                seen(2, 50, Some("tail")),
                Plan::Nothing,
            ),
            (
                "parked, then replaced: a new chain",
                Some(parked),
                seen(3, 50, None),
                start(Why::Replaced),
            ),
        ];
        for (what, c, now, want) in cases {
            assert_eq!(plan(c.as_ref(), &now), want, "{what}");
        }
    }

    #[test]
    fn deltas_end_after_complete_lines() {
        let cases: &[(&[u8], usize, Option<usize>)] = &[
            (b"", 100, None),
            (b"{\"a\":1}", 100, None),
            (b"{}\n", 100, Some(3)),
            (b"{}\n{}\n{\"par", 100, Some(6)),
            (b"{}\n{}\n{}\n", 7, Some(6)),
            (b"{\"long\":1}\n{}\n", 4, Some(11)),
            (b"{\"long\":1}", 4, None),
        ];
        for (buf, max, want) in cases {
            assert_eq!(
                delta_end(buf, *max),
                *want,
                "{:?} max {max}",
                String::from_utf8_lossy(buf)
            );
        }
    }
}
