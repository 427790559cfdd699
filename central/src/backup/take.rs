//! Taking a snapshot while `serve` may run on the data directory. Its point
//! in time is the registry's copy: the runs that copy lists are the
//! snapshot's, with their blobs and records (written before their registry
//! row, and never changed after but for a tag edit, which replaces a
//! record whole); a delta stored meanwhile is in the next snapshot, and
//! forgotten runs' bytes are left out. A forget that deletes blobs the copy
//! still lists, while the backup runs, makes it copy the registry again.

use std::collections::HashSet;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::num::NonZeroUsize;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::manifest::{self, Entry, Kind, Manifest, PARTIAL, REGISTRY};
use super::objects::{Objects, Put};
use super::prune::{prune, Pruned};
use super::tombstones::{self, Applied};
use super::{human, io_at, sha256_file, sync_dir, Dest};
use crate::error::{Error, Result};
use crate::privacy::Operator;
use crate::registry::{copy_into, RegistryFile};
use crate::store::{BlobStore, RunRecord};

/// How many times a backup copies the registry again after forgets
/// deleted blobs its copy listed.
const ATTEMPTS: u32 = 3;

/// A snapshot taken.
#[derive(Debug)]
pub(crate) struct Taken {
    pub dest: PathBuf,
    pub snapshot: String,
    /// The snapshot's point in time (its registry's copy).
    pub taken_at: String,
    pub n_runs: usize,
    pub registry_bytes: u64,
    pub blobs: Tally,
    pub records: Tally,
    /// Blobs of the data directory the registry's copy does not list,
    /// left out (stored while it was copied, or `doctor`'s to name).
    pub n_unlisted: usize,
    /// Interrupted snapshots removed.
    pub n_partials_removed: usize,
    /// Files of runs the registry lists that could not be copied as it
    /// says: the path in the data directory and why. The snapshot holds
    /// the rest.
    pub damage: Vec<(String, String)>,
    /// What the folder's tombstones changed in its earlier snapshots.
    pub applied: Applied,
    /// What keeping the newest snapshots removed, when asked to.
    pub pruned: Option<(NonZeroUsize, Pruned)>,
    pub elapsed: Duration,
}

/// Files of one kind: copied now, or there from an earlier backup.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Tally {
    pub n_copied: usize,
    pub n_there: usize,
    pub bytes_copied: u64,
}

impl Tally {
    fn add(&mut self, put: &Put, new: bool) {
        if new {
            self.n_copied += 1;
            self.bytes_copied += put.size;
        } else {
            self.n_there += 1;
        }
    }
}

/// Takes a snapshot of `data_dir` into the backup folder `dest`, then,
/// with `keep`, removes all but the newest `keep` snapshots and the blobs
/// only they held (`prune`), the lock still held.
pub(crate) fn take(
    data_dir: &Path,
    dest: &Path,
    keep: Option<NonZeroUsize>,
    operator: &Operator,
) -> Result<Taken> {
    let started = Instant::now();
    let live = data_dir.join(REGISTRY);
    if !live.is_file() {
        return Err(Error::Internal(format!(
            "no registry in {}: not a kith-central data directory",
            data_dir.display()
        )));
    }
    refuse_inside(dest, data_dir)?;
    let backup = Dest::new(dest);
    for dir in [dest.to_owned(), dest.join("blobs"), backup.snapshots()] {
        crate::private::create_dir_all(&dir).map_err(io_at(&dir))?;
    }
    let _lock = lock(dest)?;
    let (_, partials) = backup.snapshot_names()?;
    for name in &partials {
        let dir = backup.snapshot(name);
        fs::remove_dir_all(&dir).map_err(io_at(&dir))?;
    }
    let objects = backup.objects();
    let mut created = HashSet::new();
    let mut attempt = 0;
    let taking = loop {
        attempt += 1;
        let taking = copy_once(data_dir, &backup, &objects, &mut created, operator)?;
        if taking.missing.is_empty() || attempt == ATTEMPTS {
            break taking;
        }
        let forgotten: HashSet<String> = RegistryFile::open_live(&live)?
            .tombstones()?
            .into_iter()
            .map(|t| t.run_id)
            .collect();
        if !taking.missing.iter().any(|id| forgotten.contains(id)) {
            break taking;
        }
        fs::remove_dir_all(&taking.partial).map_err(io_at(&taking.partial))?;
    };
    let manifest_path = taking.partial.join("manifest.json");
    let mut file = crate::private::create_new(&manifest_path).map_err(io_at(&manifest_path))?;
    io::Write::write_all(&mut file, &taking.manifest.write()?)
        .and_then(|()| file.sync_all())
        .map_err(io_at(&manifest_path))?;
    sync_dir(&taking.partial)?;
    let whole = backup.snapshot(&taking.manifest.snapshot);
    fs::rename(&taking.partial, &whole).map_err(io_at(&whole))?;
    sync_dir(&backup.snapshots())?;
    // Bytes copied before a forget made the registry be copied again.
    let listed: HashSet<&str> = taking
        .manifest
        .files
        .iter()
        .map(|e| e.sha256.as_str())
        .collect();
    for sha in created.iter().filter(|s| !listed.contains(s.as_str())) {
        objects.remove(sha)?;
    }
    // The registry's tombstones reach the folder (a forget that could not
    // reach it is applied now), then every snapshot holds none of them.
    let copy = RegistryFile::open_copy(&whole.join(REGISTRY))?;
    tombstones::write(dest, &copy.tombstone_records(None)?)?;
    drop(copy);
    let applied = tombstones::apply(&backup)?;
    let pruned = match keep {
        Some(keep) => Some((
            keep,
            prune(&backup, keep).map_err(|e| {
                Error::Internal(format!(
                    "snapshot {} is whole, but keeping the newest {keep} failed: {e}",
                    taking.manifest.snapshot
                ))
            })?,
        )),
        None => None,
    };
    let n_unlisted = unlisted(data_dir, &taking, operator)?;
    Ok(Taken {
        dest: dest.to_owned(),
        snapshot: taking.manifest.snapshot,
        taken_at: taking.manifest.taken_at,
        n_runs: taking.n_runs,
        registry_bytes: taking.registry_bytes,
        blobs: taking.blobs,
        records: taking.records,
        n_unlisted,
        n_partials_removed: partials.len(),
        damage: taking.damage,
        applied,
        pruned,
        elapsed: started.elapsed(),
    })
}

/// A snapshot being written.
struct Taking {
    partial: PathBuf,
    manifest: Manifest,
    n_runs: usize,
    registry_bytes: u64,
    blobs: Tally,
    records: Tally,
    /// Runs whose blob or record the data directory no longer holds.
    missing: Vec<String>,
    damage: Vec<(String, String)>,
    forgotten: HashSet<String>,
}

/// Copies the registry into a new partial snapshot, then the blobs and
/// records of its runs into the objects.
fn copy_once(
    data_dir: &Path,
    backup: &Dest,
    objects: &Objects,
    created: &mut HashSet<String>,
    operator: &Operator,
) -> Result<Taking> {
    let (taken_at, name) = loop {
        let at = kith_shared::timestamp::now();
        let name = manifest::snapshot_name(&at);
        if !backup.snapshot(&name).exists() {
            break (at, name);
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let partial = backup.snapshot(&format!("{name}{PARTIAL}"));
    crate::private::create_dir_all(&partial).map_err(io_at(&partial))?;
    let copy = partial.join(REGISTRY);
    copy_into(&data_dir.join(REGISTRY), &copy)?;
    let (sha256, registry_bytes) = sha256_file(&copy).map_err(io_at(&copy))?;
    let registry = RegistryFile::open_copy(&copy)?;
    let runs = registry.runs(operator)?;
    let forgotten: HashSet<String> = registry
        .tombstones()?
        .into_iter()
        .map(|t| t.run_id)
        .collect();
    let mut taking = Taking {
        partial,
        manifest: Manifest {
            version: manifest::VERSION,
            snapshot: name,
            taken_at,
            kith_central: env!("CARGO_PKG_VERSION").to_owned(),
            files: vec![Entry {
                path: REGISTRY.to_owned(),
                size: registry_bytes,
                sha256,
                object: None,
            }],
        },
        n_runs: 0,
        registry_bytes,
        blobs: Tally::default(),
        records: Tally::default(),
        missing: Vec::new(),
        damage: Vec::new(),
        forgotten,
    };
    for run in runs.iter().filter(|r| !taking.forgotten.contains(&r.id)) {
        let blob = &run.blob_path;
        let (true, Some(record)) = (
            manifest::kind_of(blob)
                == Some(Kind::Blob {
                    run: run.id.clone(),
                }),
            manifest::record_path(blob),
        ) else {
            taking.damage.push((
                blob.clone(),
                format!("run {}: not a blob store path", run.id),
            ));
            continue;
        };
        let record_bytes = match fs::read(data_dir.join(&record)) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                taking.missing.push(run.id.clone());
                taking.damage.push((record, "missing".into()));
                continue;
            }
            Err(e) => return Err(io_at(&data_dir.join(&record))(e)),
        };
        // The record says what the blob's bytes are (the registry's row
        // is derived from it).
        let expected = match RunRecord::read(&record_bytes) {
            Ok(r) => r.run.jsonl_sha256,
            Err(e) => {
                taking
                    .damage
                    .push((record.clone(), format!("unreadable record: {e}")));
                run.jsonl_sha256.clone()
            }
        };
        let put = objects.put_bytes(&record_bytes)?;
        let new = put.copied || created.contains(&put.sha256);
        taking.records.add(&put, new);
        taking.manifest.files.push(entry(&record, &put, created));
        let source = data_dir.join(blob);
        if !source.is_file() {
            taking.missing.push(run.id.clone());
            taking.damage.push((blob.clone(), "missing".into()));
            continue;
        }
        let put = objects.put_file(&source, &expected)?;
        if put.sha256 != expected {
            taking.damage.push((
                blob.clone(),
                format!("its sha256 is {}, its record says {expected}", put.sha256),
            ));
        }
        let new = put.copied || created.contains(&put.sha256);
        taking.blobs.add(&put, new);
        taking.manifest.files.push(entry(blob, &put, created));
        taking.n_runs += 1;
    }
    Ok(taking)
}

/// The manifest's entry of a file put in (and the object noted as this
/// backup's when it copied it).
fn entry(path: &str, put: &Put, created: &mut HashSet<String>) -> Entry {
    if put.copied {
        created.insert(put.sha256.clone());
    }
    Entry {
        path: path.to_owned(),
        size: put.size,
        sha256: put.sha256.clone(),
        object: manifest::address(&put.sha256),
    }
}

/// How many blobs of the data directory the snapshot's registry does not
/// list (forgotten ones aside).
fn unlisted(data_dir: &Path, taking: &Taking, operator: &Operator) -> Result<usize> {
    let store = BlobStore::new(data_dir);
    let listed: HashSet<&str> = taking
        .manifest
        .files
        .iter()
        .map(|e| e.path.as_str())
        .collect();
    let n = store
        .metadata_files(operator)?
        .iter()
        .filter_map(|m| store.jsonl_for_metadata(m))
        .filter(|blob| !listed.contains(blob.as_str()))
        .filter(|blob| match manifest::kind_of(blob) {
            Some(Kind::Blob { run }) => !taking.forgotten.contains(&run),
            _ => true,
        })
        .count();
    Ok(n)
}

/// Refuses a backup folder inside the data directory: lost with it.
pub(crate) fn refuse_inside(dest: &Path, data_dir: &Path) -> Result<()> {
    let data = fs::canonicalize(data_dir).map_err(io_at(data_dir))?;
    let mut probe = std::path::absolute(dest).map_err(io_at(dest))?;
    let mut rest = Vec::new();
    while !probe.exists() {
        let Some(name) = probe.file_name().map(ToOwned::to_owned) else {
            break;
        };
        rest.push(name);
        probe.pop();
    }
    let mut at = fs::canonicalize(&probe).map_err(io_at(&probe))?;
    at.extend(rest.iter().rev());
    if at.starts_with(&data) {
        return Err(Error::Internal(format!(
            "{} is inside the data directory {}: a backup there is lost with it",
            dest.display(),
            data.display()
        )));
    }
    Ok(())
}

/// Holds `dest/lock`, waiting at most `wait` for the backup writing
/// there to let it go.
pub(super) fn lock_waiting(dest: &Path, wait: Duration) -> Result<File> {
    let deadline = Instant::now() + wait;
    loop {
        match lock(dest) {
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            held => return held,
        }
    }
}

/// Holds `dest/lock` for the backup: a second backup to the same folder
/// is refused while one writes.
fn lock(dest: &Path) -> Result<File> {
    let path = dest.join("lock");
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(crate::private::FILE_MODE)
        .open(&path)
        .map_err(io_at(&path))?;
    rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).map_err(
        |_| {
            Error::Internal(format!(
                "another backup is writing to {} (it holds {})",
                dest.display(),
                path.display()
            ))
        },
    )?;
    Ok(file)
}

impl fmt::Display for Taken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "snapshot {} in {}",
            self.snapshot,
            self.dest.join("snapshots").display()
        )?;
        writeln!(
            f,
            "  registry: {} ({} runs)",
            human(self.registry_bytes),
            self.n_runs
        )?;
        for (what, t) in [("blobs", self.blobs), ("records", self.records)] {
            writeln!(
                f,
                "  {what}: {} copied ({}), {} already there",
                t.n_copied,
                human(t.bytes_copied),
                t.n_there
            )?;
        }
        writeln!(f, "  took {:.2} s", self.elapsed.as_secs_f64())?;
        if self.n_partials_removed > 0 {
            writeln!(
                f,
                "removed {} interrupted snapshots (*.partial)",
                self.n_partials_removed
            )?;
        }
        if self.applied.n_snapshots > 0 {
            writeln!(
                f,
                "forgot in {} earlier snapshots what was forgotten since (removed {} blobs)",
                self.applied.n_snapshots, self.applied.n_objects
            )?;
        }
        if let Some((keep, pruned)) = &self.pruned {
            writeln!(
                f,
                "kept the newest {keep} snapshots: removed {} older ones and {} blobs only they held",
                pruned.snapshots.len(),
                pruned.n_objects
            )?;
        }
        if self.n_unlisted > 0 {
            writeln!(
                f,
                "left out {} blobs the registry's copy does not list: stored while it was \
                 copied (in the next snapshot), or named by `kith-central doctor`",
                self.n_unlisted
            )?;
        }
        write!(f, "the index is not copied; `reindex` rebuilds it")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_backup_folder_inside_the_data_directory_is_refused() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let data = tmp.path().join("data");
        fs::create_dir_all(data.join("runs"))?;
        for inside in [data.join("backup"), data.join("runs/x/y"), data.clone()] {
            assert!(
                refuse_inside(&inside, &data).is_err(),
                "{}",
                inside.display()
            );
        }
        for outside in [tmp.path().join("backup"), tmp.path().join("data2/b")] {
            refuse_inside(&outside, &data)?;
        }
        // Through a link to the data directory too.
        std::os::unix::fs::symlink(&data, tmp.path().join("link"))?;
        assert!(refuse_inside(&tmp.path().join("link/b"), &data).is_err());
        Ok(())
    }

    #[test]
    fn a_second_backup_to_the_same_folder_waits_for_none_and_is_refused() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let held = lock(tmp.path())?;
        let second = lock(tmp.path());
        assert!(second.is_err_and(|e| e.to_string().contains("another backup")));
        drop(held);
        lock(tmp.path())?;
        Ok(())
    }
}
