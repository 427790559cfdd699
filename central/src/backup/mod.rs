//! Backups of a data directory: what cannot be rebuilt (the registry, the
//! blobs and their records) copied while `serve` runs, checked, and put
//! back. The index is not copied: `reindex` rebuilds it, and `restore`
//! runs it.
//!
//! A backup folder (`DEST`) holds:
//! - `blobs/ab/abcdef…`: every blob and record by the sha256 of its bytes
//!   (`objects`), shared by the snapshots, so a backup copies only bytes
//!   no earlier one copied;
//! - `snapshots/<UTC time>/`: one per backup, with the registry's copy
//!   (`registry.sqlite`, taken with `VACUUM INTO`) and `manifest.json`
//!   (`manifest`: every file it covers, with size, sha256 and content
//!   address). It is written as `<time>.partial` and renamed once whole,
//!   so an interrupted backup is never taken for a snapshot;
//! - `tombstones/<run>.json`: every run forgotten, no text (`tombstones`),
//!   so no snapshot brings one back;
//! - `lock`: held by the backup writing.
//!
//! A snapshot's registry copy is written with `secure_delete`, so a row
//! deleted from it later leaves no bytes; the blobs and records copied are
//! those of the runs it lists, forgotten ones left out. `verify` hashes
//! every object and registry copy against the manifests, runs SQLite's
//! integrity check, and checks that every run of a copy has its blob and
//! record and that its chains have no holes (a live data folder: blobs
//! against their records' `jsonl_sha256`); damage exits 1 naming the file,
//! and a file of a tombstoned run that is gone is forgotten, not damage.
//! `restore` writes into an empty folder only, checks the snapshot first,
//! and takes the tombstones of every snapshot and of `tombstones/`.
//!
//! `schedule` takes a backup every `every` after the last good one, one at
//! a time on a thread of its own at the lowest priority; a failure is
//! logged and noted in the registry's `backups` table (each folder's last
//! good snapshot and last failure), never stops `serve`. `prune` keeps the
//! newest `keep` snapshots and removes every object no kept snapshot
//! lists, under the folder's `lock` (a snapshot is renamed `.partial`
//! before it goes). `tombstones` carries a forget to every folder the table
//! names: the runs' tombstones (no text) into `tombstones/<run>.json`, then,
//! under the lock, every snapshot holding them rewritten without them (the
//! registry copy's rows deleted and compacted, the manifest without their
//! files) and the objects no snapshot lists removed; content another kept
//! run holds stays. A folder not reached is named in the forget's answer
//! and catches up at its next backup. `health` is the last good backup's age
//! for `doctor` and an admin's `/api/status`.
//!
//! `take` makes a snapshot (and `prune` keeps the newest), `verify` checks a backup or a live data
//! directory (`chains`: the registry's chains have no holes), `restore`
//! puts a snapshot into an empty data directory. Folders are 0700 and files
//! 0600: a backup holds the family's private text.

mod chains;
mod health;
mod manifest;
mod objects;
mod prune;
mod restore;
mod schedule;
mod take;
mod tombstones;
mod verify;

pub(crate) use health::health;
pub(crate) use restore::restore;
pub(crate) use schedule::{dest_name, run as run_scheduled, take_noted};
pub(crate) use take::{refuse_inside, take};
pub(crate) use verify::{verify_backup, verify_data_dir};

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};
use manifest::{Manifest, PARTIAL};
use objects::Objects;

/// How a forget found a backup folder.
#[derive(Debug)]
pub(crate) enum Reached {
    /// Its snapshots hold the runs no more.
    Cleared(tombstones::Applied),
    /// A backup was writing there: the tombstones are in the folder, and
    /// that backup (or the next) applies them.
    Busy,
}

/// Takes the tombstones `records` into the backup folder `dest` and, once
/// no backup writes there (waiting at most `wait`), forgets their runs in
/// every snapshot. An error says why the folder was not reached: it may
/// still hold the runs.
pub(crate) fn forget_in(
    dest: &Path,
    records: &[crate::registry::TombstoneRecord],
    wait: Duration,
) -> Result<Reached> {
    let backup = Dest::new(dest);
    if !backup.snapshots().is_dir() {
        return Err(Error::Internal(format!(
            "{} holds no backup (absent, or a disk not mounted)",
            dest.display()
        )));
    }
    tombstones::write(dest, records)?;
    let Ok(_lock) = take::lock_waiting(dest, wait) else {
        return Ok(Reached::Busy);
    };
    Ok(Reached::Cleared(tombstones::apply(&backup)?))
}

/// A backup folder.
struct Dest {
    root: PathBuf,
}

impl Dest {
    fn new(root: &Path) -> Self {
        Self {
            root: root.to_owned(),
        }
    }

    fn snapshots(&self) -> PathBuf {
        self.root.join("snapshots")
    }

    fn snapshot(&self, name: &str) -> PathBuf {
        self.snapshots().join(name)
    }

    fn objects(&self) -> Objects {
        Objects::new(&self.root)
    }

    /// The whole snapshots' names, oldest first, and the interrupted ones'.
    /// A folder without `snapshots/` is no backup.
    fn snapshot_names(&self) -> Result<(Vec<String>, Vec<String>)> {
        let dir = self.snapshots();
        let entries = match fs::read_dir(&dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(Error::Internal(format!(
                    "no backup in {}: it has no snapshots/ folder",
                    self.root.display()
                )))
            }
            Err(e) => return Err(io_at(&dir)(e)),
        };
        let (mut whole, mut partial) = (Vec::new(), Vec::new());
        for entry in entries {
            let entry = entry.map_err(io_at(&dir))?;
            if !entry.path().is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(PARTIAL) {
                partial.push(name);
            } else if manifest::is_snapshot_name(&name) {
                whole.push(name);
            }
        }
        whole.sort();
        partial.sort();
        Ok((whole, partial))
    }

    fn read_manifest(&self, name: &str) -> Result<Manifest> {
        let path = self.snapshot(name).join("manifest.json");
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        Manifest::read(&bytes).map_err(|e| Error::Internal(format!("{}: {e}", path.display())))
    }
}

/// An IO error that names its file.
fn io_at(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |e| Error::Internal(format!("{}: {e}", path.display()))
}

/// The sha256 (hex) and size of a file, read whole.
fn sha256_file(path: &Path) -> io::Result<(String, u64)> {
    let mut hasher = Sha256::new();
    let n = io::copy(&mut File::open(path)?, &mut hasher)?;
    Ok((hex::encode(hasher.finalize()), n))
}

/// Makes a folder's entries (a rename, a new file) durable.
fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io_at(dir))
}

/// A byte count as people read it.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut n = bytes as f64 / 1024.0;
    let mut unit = 0;
    while n >= 1024.0 && unit + 1 < UNITS.len() {
        n /= 1024.0;
        unit += 1;
    }
    format!("{n:.1} {}", UNITS[unit])
}
