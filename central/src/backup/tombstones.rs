//! A forget reaching a backup folder. Its tombstones are written into
//! `tombstones/<run>.json` (no text: where the run's bytes sat in their
//! chain, and the sha256 of each line), so a restore from any snapshot,
//! or from an older copy of the folder, keeps the run forgotten. Then,
//! under the folder's lock, every snapshot holding a tombstoned run is
//! rewritten without it (`scrub`: its registry's copy with the run's row
//! deleted and the tombstone added, compacted with `VACUUM INTO`; its
//! manifest without the run's files), and every object no snapshot lists
//! any more is removed: the run's bytes are in no file of the folder, but
//! for content another kept run holds too.
//!
//! A forget applies them when it can take the lock; a backup applies them
//! (its registry's tombstones first) before it lets the lock go, so a
//! folder a forget could not reach catches up with its next backup.

use std::collections::HashSet;
use std::fs;
use std::io::{self, Write};
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::manifest::{self, Kind, REGISTRY};
use super::{io_at, sha256_file, sync_dir, Dest};
use crate::error::{Error, Result};
use crate::registry::{copy_into, Registry, RegistryFile, TombstoneRecord};

/// The folder of tombstones in a backup folder.
pub(crate) const TOMBSTONES: &str = "tombstones";

/// The version `write` writes.
const VERSION: u32 = 1;

/// A tombstone as a backup folder keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct TombstoneFile {
    version: u32,
    run_id: String,
    user_id: String,
    source_identity: String,
    from_offset: u64,
    to_offset: u64,
    chain_sha256: String,
    #[serde(default)]
    conversation: Option<String>,
    forgotten_at: String,
    line_sha256: Vec<String>,
}

impl From<&TombstoneRecord> for TombstoneFile {
    fn from(t: &TombstoneRecord) -> Self {
        Self {
            version: VERSION,
            run_id: t.run_id.clone(),
            user_id: t.user_id.clone(),
            source_identity: t.source_identity.clone(),
            from_offset: t.from_offset,
            to_offset: t.to_offset,
            chain_sha256: t.chain_sha256.clone(),
            conversation: t.conversation.clone(),
            forgotten_at: t.forgotten_at.clone(),
            line_sha256: t.line_sha256.clone(),
        }
    }
}

impl From<TombstoneFile> for TombstoneRecord {
    fn from(t: TombstoneFile) -> Self {
        Self {
            run_id: t.run_id,
            user_id: t.user_id,
            source_identity: t.source_identity,
            from_offset: t.from_offset,
            to_offset: t.to_offset,
            chain_sha256: t.chain_sha256,
            conversation: t.conversation,
            forgotten_at: t.forgotten_at,
            line_sha256: t.line_sha256,
        }
    }
}

/// The tombstones a backup folder keeps; none when it has no
/// `tombstones/`. A file that cannot be read is an error: a run it names
/// could come back.
pub(crate) fn read(dest: &Path) -> Result<Vec<TombstoneRecord>> {
    let dir = dest.join(TOMBSTONES);
    let entries = match fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_at(&dir)(e)),
    };
    let mut out = Vec::new();
    for entry in entries {
        let path = entry.map_err(io_at(&dir))?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        let file: TombstoneFile = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Internal(format!("{}: {e}", path.display())))?;
        if file.version > VERSION {
            return Err(Error::Internal(format!(
                "{}: a tombstone of version {} (a newer kith-central wrote it)",
                path.display(),
                file.version
            )));
        }
        out.push(file.into());
    }
    out.sort_by(|a: &TombstoneRecord, b| a.run_id.cmp(&b.run_id));
    Ok(out)
}

/// Writes the tombstones the folder lacks (0600, whole or not at all).
/// How many were new.
pub(crate) fn write(dest: &Path, records: &[TombstoneRecord]) -> Result<usize> {
    let dir = dest.join(TOMBSTONES);
    crate::private::create_dir_all(&dir).map_err(io_at(&dir))?;
    let mut n = 0;
    for t in records {
        // A run id is letters and digits: it names a file in the folder.
        if !t.run_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::Internal(format!("{:?} is not a run id", t.run_id)));
        }
        let path = dir.join(format!("{}.json", t.run_id));
        if path.exists() {
            continue;
        }
        let tmp = dir.join(format!(".{}.json.tmp", t.run_id));
        let _ = fs::remove_file(&tmp);
        let mut bytes = serde_json::to_vec_pretty(&TombstoneFile::from(t))?;
        bytes.push(b'\n');
        let mut file = crate::private::create_new(&tmp).map_err(io_at(&tmp))?;
        file.write_all(&bytes)
            .and_then(|()| file.sync_all())
            .map_err(io_at(&tmp))?;
        fs::rename(&tmp, &path).map_err(io_at(&path))?;
        n += 1;
    }
    if n > 0 {
        sync_dir(&dir)?;
    }
    Ok(n)
}

/// What applying the tombstones changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Applied {
    /// Snapshots rewritten without tombstoned runs.
    pub n_snapshots: usize,
    /// Objects removed: no snapshot lists them any more.
    pub n_objects: usize,
}

/// Rewrites every snapshot holding a tombstoned run without it, then
/// removes the objects no snapshot lists. The caller holds the lock.
pub(super) fn apply(backup: &Dest) -> Result<Applied> {
    let records = read(&backup.root)?;
    let mut out = Applied::default();
    if records.is_empty() {
        return Ok(out);
    }
    let forgotten: HashSet<&str> = records.iter().map(|t| t.run_id.as_str()).collect();
    let (names, _) = backup.snapshot_names()?;
    let mut listed = HashSet::new();
    let mut all_read = true;
    for name in &names {
        let Ok(mut manifest) = backup.read_manifest(name) else {
            // Damaged (verify names it): what it lists is unknown, so no
            // object unlisted elsewhere is taken for unneeded.
            all_read = false;
            continue;
        };
        let holds = |path: &str| match manifest::kind_of(path) {
            Some(Kind::Blob { run } | Kind::Record { run }) => forgotten.contains(run.as_str()),
            _ => false,
        };
        let registry = backup.snapshot(name).join(REGISTRY);
        let in_registry = RegistryFile::open_copy(&registry)
            .and_then(|r| r.lists_any(&forgotten))
            .unwrap_or(false);
        if in_registry || manifest.files.iter().any(|e| holds(&e.path)) {
            let run_ids: Vec<String> = forgotten.iter().map(|s| (*s).to_owned()).collect();
            let (sha256, size) = scrub_registry(&backup.snapshot(name), &records, &run_ids)?;
            manifest.files.retain(|e| !holds(&e.path));
            if let Some(entry) = manifest.files.iter_mut().find(|e| e.path == REGISTRY) {
                entry.sha256 = sha256;
                entry.size = size;
            }
            let path = backup.snapshot(name).join("manifest.json");
            let tmp = backup.snapshot(name).join(".manifest.json.tmp");
            let _ = fs::remove_file(&tmp);
            let mut file = crate::private::create_new(&tmp).map_err(io_at(&tmp))?;
            file.write_all(&manifest.write()?)
                .and_then(|()| file.sync_all())
                .map_err(io_at(&tmp))?;
            fs::rename(&tmp, &path).map_err(io_at(&path))?;
            sync_dir(&backup.snapshot(name))?;
            out.n_snapshots += 1;
        }
        listed.extend(manifest.files.into_iter().map(|e| e.sha256));
    }
    if all_read {
        let objects = backup.objects();
        let (shas, _) = objects.list()?;
        for sha in shas.iter().filter(|s| !listed.contains(*s)) {
            objects.remove(sha)?;
            out.n_objects += 1;
        }
    }
    Ok(out)
}

/// Writes the snapshot's registry copy again without the rows of
/// `run_ids` and with `records` as tombstones, compacted so no page holds
/// what was deleted. Its new sha256 and size.
fn scrub_registry(
    snapshot: &Path,
    records: &[TombstoneRecord],
    run_ids: &[String],
) -> Result<(String, u64)> {
    let copy = snapshot.join(REGISTRY);
    let work = snapshot.join(".registry.scrub.sqlite");
    let compact = snapshot.join(".registry.compact.sqlite");
    for leftover in [&compact, &work] {
        remove_sqlite(leftover)?;
    }
    {
        let mut src = fs::File::open(&copy).map_err(io_at(&copy))?;
        let mut dst = crate::private::create_new(&work).map_err(io_at(&work))?;
        io::copy(&mut src, &mut dst).map_err(io_at(&work))?;
        let registry = Registry::open(&work)?;
        registry.put_tombstones(records)?;
        registry.finish_forget(run_ids)?;
    }
    copy_into(&work, &compact)?;
    remove_sqlite(&work)?;
    let (sha256, size) = sha256_file(&compact).map_err(io_at(&compact))?;
    fs::rename(&compact, &copy).map_err(io_at(&copy))?;
    Ok((sha256, size))
}

/// Removes an SQLite file and its `-wal` and `-shm`, if there.
fn remove_sqlite(path: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        match fs::remove_file(&p) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(io_at(Path::new(&p))(e));
            }
            _ => {}
        }
    }
    Ok(())
}
