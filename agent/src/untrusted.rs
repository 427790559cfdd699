//! Reading what the agents wrote, which kith does not control: a file is
//! opened only when it is a regular one and never waited on (a FIFO where a
//! transcript should be), read only up to a bound, and an id taken from it
//! goes into a path only when it is plain (no `..`, no `/`). Capture,
//! discovery and the mirrors read through these.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The longest line kith reads: past it, no central (64 MiB bodies by
/// default, the line JSON-escaped in it) would take the line anyway.
pub(crate) const MAX_LINE: usize = 64 << 20;

/// Agent ids, session ids and thread ids end up in paths: only plain ones.
pub(crate) fn plain_id(s: &str) -> bool {
    (1..=128).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// Opens a transcript for reading if it is a regular file (symlinks
/// followed); `Ok(None)` for anything else. A FIFO, socket or device can sit
/// where a transcript is expected: opening a FIFO waits for a writer, which
/// would hang a hook and stall `kith watch` holding the state lock, so the
/// open never blocks and the file type is checked on what was opened.
pub(crate) fn open_regular(path: &Path) -> std::io::Result<Option<File>> {
    if !std::fs::metadata(path)?.is_file() {
        return Ok(None);
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    Ok(file.metadata()?.is_file().then_some(file))
}

/// The bytes of the regular file at `path`, at most `limit` of them (an
/// error past that); `None` when it is not a regular file (a FIFO, a
/// device, a folder), which is never waited on.
pub(crate) fn read_regular(path: &Path, limit: u64) -> std::io::Result<Option<Vec<u8>>> {
    open_regular(path)?
        .map(|file| read_bounded(file, limit))
        .transpose()
}

/// All of `file` from where it stands, or an error once past `limit` bytes
/// (bounded by what is read, not by a stat: the file may grow meanwhile).
pub(crate) fn read_bounded(file: impl Read, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(limit + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::other(format!("larger than {limit} bytes")));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_that_could_leave_a_folder_are_refused() {
        for bad in ["", "..", "a/b", "../x", "a b", "a.jsonl"] {
            assert!(!plain_id(bad), "{bad}");
        }
        assert!(plain_id("019e1625-789d-76c0-80ab-3724b5ddb799"));
    }
}
