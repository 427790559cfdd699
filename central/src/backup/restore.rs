//! Putting a snapshot back into an empty data directory: checked whole
//! first, then the registry's copy, every blob and record at its path
//! (through the blob store), and the index rebuilt as `reindex` does.
//! Every tombstone found comes along: the snapshot's own, those of the
//! backup's other snapshots and of its `tombstones/`, so a conversation forgotten in any of them
//! does not come back, and its lines are refused when sent again.

use std::collections::HashSet;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::manifest::{self, Kind, REGISTRY};
use super::verify::{verify_snapshot, Seen, Verified};
use super::{io_at, Dest};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::maintenance::{reindex, ReindexReport};
use crate::privacy::Operator;
use crate::state::{open_registry, AppState};
use crate::store::BlobStore;

/// A snapshot restored.
#[derive(Debug)]
pub(crate) struct Restored {
    pub snapshot: String,
    pub data_dir: PathBuf,
    /// Runs whose blob and record were written.
    pub n_runs: usize,
    /// Runs the snapshot holds that a tombstone names, left out.
    pub n_forgotten: usize,
    /// Tombstones taken from the backup's other snapshots and its
    /// `tombstones/`.
    pub n_tombstones_adopted: u64,
    /// Other snapshots whose tombstones could not be read, with why.
    pub unread: Vec<String>,
    pub reindex: ReindexReport,
}

/// Restores the snapshot `name` (the newest without one) of the backup in
/// `dest` into `config.data_dir`, which must be empty or absent.
pub(crate) fn restore(
    dest: &Path,
    name: Option<&str>,
    config: Config,
    operator: &Operator,
) -> Result<Restored> {
    let data = config.data_dir.clone();
    refuse_unless_empty(&data)?;
    let backup = Dest::new(dest);
    let (names, _) = backup.snapshot_names()?;
    let name = match name {
        Some(n) if manifest::is_snapshot_name(n) && names.iter().any(|m| m == n) => n.to_owned(),
        Some(n) => {
            return Err(Error::Internal(format!(
                "no snapshot {n:?} in {}; its snapshots: {}",
                dest.display(),
                listing(&names)
            )))
        }
        None => names
            .last()
            .cloned()
            .ok_or_else(|| Error::Internal(format!("no whole snapshot in {}", dest.display())))?,
    };
    let tombstones = super::tombstones::read(dest)?;
    let tombstoned: HashSet<String> = tombstones.iter().map(|t| t.run_id.clone()).collect();
    let mut checked = Verified::default();
    let manifest = verify_snapshot(
        &backup,
        &name,
        &tombstoned,
        operator,
        &mut Seen::default(),
        &mut checked,
    )?;
    let (Some(manifest), true) = (manifest, checked.damage.is_empty()) else {
        return Err(Error::Internal(format!(
            "snapshot {name} is damaged; nothing was restored:\n{checked}`kith-central verify {}` \
             checks every snapshot; --snapshot NAME restores another (its snapshots: {})",
            dest.display(),
            listing(&names)
        )));
    };
    crate::private::create_dir_all(&data).map_err(io_at(&data))?;
    copy_registry(&backup.snapshot(&name).join(REGISTRY), &data.join(REGISTRY))?;
    let registry = open_registry(&data)?;
    let (mut n_tombstones_adopted, mut unread) = (0, Vec::new());
    for other in names.iter().filter(|n| **n != name) {
        match registry.adopt_tombstones(&backup.snapshot(other).join(REGISTRY)) {
            Ok(n) => n_tombstones_adopted += n,
            Err(e) => unread.push(format!("snapshots/{other}: {e}")),
        }
    }
    n_tombstones_adopted += registry.put_tombstones(&tombstones)?;
    // Runs forgotten while their rows stayed (a forget cut short, or one a
    // newer snapshot holds): finished here, as a second forget would.
    let unfinished = registry.unfinished_forgets()?;
    if !unfinished.is_empty() {
        registry.finish_forget(&unfinished)?;
    }
    let forgotten: HashSet<String> = registry.forgotten_runs(operator)?;
    drop(registry);
    let store = BlobStore::new(&data);
    let objects = backup.objects();
    let (mut n_runs, mut n_forgotten) = (0, 0);
    for blob in &manifest.files {
        let Some(Kind::Blob { run }) = manifest::kind_of(&blob.path) else {
            continue;
        };
        if forgotten.contains(&run) {
            n_forgotten += 1;
            continue;
        }
        let record = manifest::record_path(&blob.path)
            .and_then(|r| manifest.entry(&r))
            .ok_or_else(|| Error::Internal(format!("{} has no record", blob.path)))?;
        let jsonl = objects.read(&blob.sha256, blob.size)?;
        let metadata = objects.read(&record.sha256, record.size)?;
        store.write_run(&blob.path, &jsonl, &metadata)?;
        n_runs += 1;
    }
    let state = AppState::open(config)?;
    let reindex = reindex(&state, operator)?;
    Ok(Restored {
        snapshot: name,
        data_dir: data,
        n_runs,
        n_forgotten,
        n_tombstones_adopted,
        unread,
        reindex,
    })
}

/// Refuses a data directory that holds anything: a restore never mixes a
/// snapshot with what is there.
fn refuse_unless_empty(data: &Path) -> Result<()> {
    let empty = match fs::read_dir(data) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => true,
        Err(e) => return Err(io_at(data)(e)),
        Ok(mut entries) => entries.next().is_none(),
    };
    if empty {
        Ok(())
    } else {
        Err(Error::Internal(format!(
            "{} is not empty: restore writes only into an empty or absent data directory \
             (--data-dir NEW)",
            data.display()
        )))
    }
}

/// Copies the snapshot's registry into the data directory (0600, synced).
fn copy_registry(from: &Path, to: &Path) -> Result<()> {
    let mut src = fs::File::open(from).map_err(io_at(from))?;
    let mut out = crate::private::create_new(to).map_err(io_at(to))?;
    io::copy(&mut src, &mut out)
        .and_then(|_| out.sync_all())
        .map_err(io_at(to))?;
    Ok(())
}

fn listing(names: &[String]) -> String {
    if names.is_empty() {
        "none".to_owned()
    } else {
        names.join(", ")
    }
}

impl fmt::Display for Restored {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "restored snapshot {} into {}: the registry (members, machines, grants, audit, \
             tombstones) and {} runs' blobs and records",
            self.snapshot,
            self.data_dir.display(),
            self.n_runs
        )?;
        if self.n_forgotten > 0 {
            writeln!(f, "left out {} forgotten runs", self.n_forgotten)?;
        }
        if self.n_tombstones_adopted > 0 {
            writeln!(
                f,
                "took {} tombstones from the backup's other snapshots and tombstones/",
                self.n_tombstones_adopted
            )?;
        }
        for line in &self.unread {
            writeln!(f, "could not read the tombstones of {line}")?;
        }
        for s in &self.reindex.skipped {
            writeln!(f, "skipped {s}")?;
        }
        write!(
            f,
            "reindexed {} runs into {} chunks",
            self.reindex.n_runs, self.reindex.n_chunks
        )
    }
}
