//! Checking a backup, or a live data directory, for damage: every file
//! read and hashed against what names it, the registry checked by SQLite
//! and against its files and its own chains. Nothing is changed; each
//! damaged file is named, relative to the folder checked.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::path::Path;

use kith_shared::hash::sha256_hex;

use super::chains::breaks;
use super::manifest::{self, Kind, Manifest, REGISTRY};
use super::objects::Found;
use super::{human, sha256_file, Dest};
use crate::error::Result;
use crate::privacy::Operator;
use crate::registry::RegistryFile;
use crate::store::{BlobStore, RunRecord};

/// What a check found.
#[derive(Debug, Default)]
pub(crate) struct Verified {
    /// What was checked and found sound, a line each.
    pub checked: Vec<String>,
    /// What is damaged.
    pub damage: Vec<Damage>,
    /// What is worth knowing but harms nothing.
    pub notes: Vec<String>,
}

/// A damaged file: its path (relative to the folder checked) and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Damage {
    pub path: String,
    pub what: String,
}

impl Verified {
    fn damaged(&mut self, path: impl Into<String>, what: impl Into<String>) {
        self.damage.push(Damage {
            path: path.into(),
            what: what.into(),
        });
    }
}

/// Objects checked so far, by sha256 and size: each is read once, however
/// many snapshots list it, and its damage reported once.
#[derive(Default)]
pub(super) struct Seen {
    found: HashMap<(String, u64), Found>,
    reported: HashSet<String>,
}

/// Checks every whole snapshot of the backup in `dest`, and the objects
/// they list.
pub(crate) fn verify_backup(dest: &Path, operator: &Operator) -> Result<Verified> {
    let backup = Dest::new(dest);
    let (names, partials) = backup.snapshot_names()?;
    let mut out = Verified::default();
    for name in &partials {
        out.notes.push(format!(
            "snapshots/{name}: an interrupted backup, not a snapshot (the next backup removes it)"
        ));
    }
    if names.is_empty() {
        out.damaged("snapshots", "no whole snapshot");
    }
    let forgotten: HashSet<String> = match super::tombstones::read(dest) {
        Ok(t) => {
            if !t.is_empty() {
                out.checked
                    .push(format!("tombstones/: {} forgotten runs", t.len()));
            }
            t.into_iter().map(|t| t.run_id).collect()
        }
        Err(e) => {
            out.damaged("tombstones", e.to_string());
            HashSet::new()
        }
    };
    let mut seen = Seen::default();
    let mut listed = HashSet::new();
    for name in &names {
        if let Some(manifest) =
            verify_snapshot(&backup, name, &forgotten, operator, &mut seen, &mut out)?
        {
            listed.extend(manifest.files.into_iter().map(|e| e.sha256));
        }
    }
    let (objects, temps) = backup.objects().list()?;
    let n_unlisted = objects.iter().filter(|o| !listed.contains(*o)).count();
    if n_unlisted > 0 {
        out.notes.push(format!(
            "{n_unlisted} objects in blobs/ no snapshot lists (of snapshots removed)"
        ));
    }
    if !temps.is_empty() {
        out.notes.push(format!(
            "{} temp files in blobs/ of interrupted copies (e.g. {})",
            temps.len(),
            temps[0]
        ));
    }
    if out.damage.iter().any(|d| d.path.starts_with("blobs/")) {
        out.notes.push(
            "a damaged object is copied anew by the next backup once it is removed, while \
             the data directory still holds its bytes"
                .into(),
        );
    }
    Ok(out)
}

/// Checks one snapshot: its manifest, its registry's copy (bytes, SQLite's
/// own check, its runs against the manifest, its chains) and the objects
/// it lists. The manifest, when it could be read.
pub(super) fn verify_snapshot(
    backup: &Dest,
    name: &str,
    forgotten: &HashSet<String>,
    operator: &Operator,
    seen: &mut Seen,
    out: &mut Verified,
) -> Result<Option<Manifest>> {
    let folder = format!("snapshots/{name}");
    let manifest = match backup.read_manifest(name) {
        Ok(m) => m,
        Err(e) => {
            out.damaged(format!("{folder}/manifest.json"), e.to_string());
            return Ok(None);
        }
    };
    let n_damaged = out.damage.len();
    let n_runs = verify_registry_copy(backup, name, &manifest, forgotten, operator, out)?;
    let objects = backup.objects();
    let mut n_forgotten = 0;
    for entry in &manifest.files {
        if entry.object.is_none() {
            continue;
        }
        let run_forgotten = match manifest::kind_of(&entry.path) {
            Some(Kind::Blob { run } | Kind::Record { run }) => forgotten.contains(&run),
            _ => false,
        };
        let key = (entry.sha256.clone(), entry.size);
        let found = match seen.found.get(&key) {
            Some(f) => f.clone(),
            None => {
                let f = objects.check(&entry.sha256, entry.size)?;
                seen.found.insert(key, f.clone());
                f
            }
        };
        let object = manifest::address(&entry.sha256).unwrap_or_default();
        let what = match found {
            Found::Sound => continue,
            // Removed by a forget whose rewrite of this snapshot did not
            // finish: not damage, the run is to stay away.
            _ if run_forgotten => {
                n_forgotten += 1;
                continue;
            }
            Found::Missing => "missing".to_owned(),
            Found::Size(n) => format!("{n} bytes, not {} (cut short?)", entry.size),
            Found::Changed => "its bytes do not hash to its address (a changed byte)".to_owned(),
        };
        if seen.reported.insert(object.clone()) {
            out.damaged(object, format!("{what}: {} in {folder}", entry.path));
        }
    }
    verify_pairs(backup, &folder, &manifest, seen, out)?;
    if n_forgotten > 0 {
        out.notes.push(format!(
            "{folder}: {n_forgotten} files of forgotten runs are gone (forgotten, as their \
             tombstones say; restore leaves them out)"
        ));
    }
    if out.damage.len() == n_damaged {
        out.checked.push(format!(
            "{folder}: {n_runs} runs, {} files, every one sound",
            manifest.files.len()
        ));
    }
    Ok(Some(manifest))
}

/// The registry's copy: its bytes against the manifest, SQLite's
/// integrity check, a blob and a record in the manifest for every run it
/// lists (forgotten ones aside), and its chains. How many runs it lists.
fn verify_registry_copy(
    backup: &Dest,
    name: &str,
    manifest: &Manifest,
    tombstoned: &HashSet<String>,
    operator: &Operator,
    out: &mut Verified,
) -> Result<usize> {
    let folder = format!("snapshots/{name}");
    let at = format!("{folder}/{REGISTRY}");
    let Some(entry) = manifest.entry(REGISTRY) else {
        out.damaged(format!("{folder}/manifest.json"), "lists no registry");
        return Ok(0);
    };
    let path = backup.snapshot(name).join(REGISTRY);
    match sha256_file(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            out.damaged(at, "missing");
            return Ok(0);
        }
        Err(e) => {
            out.damaged(at, e.to_string());
            return Ok(0);
        }
        Ok((_, size)) if size != entry.size => out.damaged(
            &at,
            format!(
                "{size} bytes, the manifest says {} (cut short?)",
                entry.size
            ),
        ),
        Ok((sha, _)) if sha != entry.sha256 => {
            out.damaged(&at, "its sha256 is not the manifest's (a changed byte)")
        }
        Ok(_) => {}
    }
    let registry = match RegistryFile::open_copy(&path) {
        Ok(r) => r,
        Err(e) => {
            out.damaged(at, e.to_string());
            return Ok(0);
        }
    };
    let problems = registry.problems();
    if !problems.is_empty() {
        let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
        out.damaged(
            at,
            format!("SQLite's integrity check fails: {}", shown.join("; ")),
        );
        return Ok(0);
    }
    let (runs, tombstones) = match registry
        .runs(operator)
        .and_then(|r| Ok((r, registry.tombstones()?)))
    {
        Ok(both) => both,
        Err(e) => {
            out.damaged(at, e.to_string());
            return Ok(0);
        }
    };
    let forgotten: HashSet<&str> = tombstones
        .iter()
        .map(|t| t.run_id.as_str())
        .chain(tombstoned.iter().map(String::as_str))
        .collect();
    let listed: HashSet<&str> = manifest.files.iter().map(|e| e.path.as_str()).collect();
    for run in runs.iter().filter(|r| !forgotten.contains(r.id.as_str())) {
        let record = manifest::record_path(&run.blob_path).unwrap_or_default();
        for (what, path) in [("blob", &run.blob_path), ("record", &record)] {
            if !listed.contains(path.as_str()) {
                out.damaged(
                    format!("{folder}/manifest.json"),
                    format!(
                        "run {} of the registry: its {what} {path} is not listed",
                        run.id
                    ),
                );
            }
        }
    }
    for b in breaks(&runs, &tombstones) {
        out.damaged(&at, format!("run {}: {}", b.run, b.what));
    }
    Ok(runs.len()
        - runs
            .iter()
            .filter(|r| forgotten.contains(r.id.as_str()))
            .count())
}

/// Every blob with its record and every record with its blob, and each
/// (sound) record's `jsonl_sha256` the blob's.
fn verify_pairs(
    backup: &Dest,
    folder: &str,
    manifest: &Manifest,
    seen: &Seen,
    out: &mut Verified,
) -> Result<()> {
    let objects = backup.objects();
    for entry in &manifest.files {
        match manifest::kind_of(&entry.path) {
            Some(Kind::Blob { .. }) => {
                let record = manifest::record_path(&entry.path).unwrap_or_default();
                let Some(record) = manifest.entry(&record) else {
                    out.damaged(
                        format!("{folder}/manifest.json"),
                        format!("{} is listed without its record", entry.path),
                    );
                    continue;
                };
                let sound =
                    seen.found.get(&(record.sha256.clone(), record.size)) == Some(&Found::Sound);
                if !sound {
                    continue;
                }
                let says = objects
                    .read(&record.sha256, record.size)
                    .and_then(|b| RunRecord::read(&b));
                match says {
                    Ok(r) if r.run.jsonl_sha256 == entry.sha256 => {}
                    Ok(r) => out.damaged(
                        manifest::address(&record.sha256).unwrap_or_default(),
                        format!(
                            "{} says jsonl_sha256 {}, its blob's is {}",
                            record.path, r.run.jsonl_sha256, entry.sha256
                        ),
                    ),
                    Err(e) => out.damaged(
                        manifest::address(&record.sha256).unwrap_or_default(),
                        format!("{}: unreadable record: {e}", record.path),
                    ),
                }
            }
            Some(Kind::Record { .. }) => {
                let blob = format!("{}.jsonl", entry.path.trim_end_matches(".metadata.json"));
                if manifest.entry(&blob).is_none() {
                    out.damaged(
                        format!("{folder}/manifest.json"),
                        format!("{} is listed without its blob", entry.path),
                    );
                }
            }
            Some(Kind::Registry) | None => {}
        }
    }
    Ok(())
}

/// Checks a data directory, which a server may be serving: the registry
/// (SQLite's check, its chains), every blob against its record's
/// `jsonl_sha256`, and a blob and a record for every run the registry
/// lists.
pub(crate) fn verify_data_dir(data_dir: &Path, operator: &Operator) -> Result<Verified> {
    let mut out = Verified::default();
    let registry = RegistryFile::open_live(&data_dir.join(REGISTRY))?;
    let problems = registry.problems();
    if !problems.is_empty() {
        let shown: Vec<&str> = problems.iter().take(3).map(String::as_str).collect();
        out.damaged(
            REGISTRY,
            format!("SQLite's integrity check fails: {}", shown.join("; ")),
        );
    }
    let runs = registry.runs(operator)?;
    let tombstones = registry.tombstones()?;
    let forgotten: HashSet<&str> = tombstones.iter().map(|t| t.run_id.as_str()).collect();
    let store = BlobStore::new(data_dir);
    let (mut n_blobs, mut n_bytes) = (0usize, 0u64);
    let mut on_disk = HashSet::new();
    for metadata in store.metadata_files(operator)? {
        let Some(blob) = store.jsonl_for_metadata(&metadata) else {
            continue;
        };
        let record = manifest::record_path(&blob).unwrap_or_default();
        on_disk.insert(blob.clone());
        let said = match store.read_metadata(&metadata) {
            Ok(r) => r.run.jsonl_sha256,
            Err(e) => {
                out.damaged(record, format!("unreadable record: {e}"));
                continue;
            }
        };
        match store.read_jsonl(&blob) {
            Ok(bytes) => {
                n_blobs += 1;
                n_bytes += bytes.len() as u64;
                if sha256_hex(&bytes) != said {
                    out.damaged(
                        blob,
                        "its sha256 is not its record's jsonl_sha256 (a changed byte?)",
                    );
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                out.damaged(blob, "missing (its record is there)");
            }
            Err(e) => out.damaged(blob, e.to_string()),
        }
    }
    let mut n_unfinished = 0;
    for run in &runs {
        let record = manifest::record_path(&run.blob_path).unwrap_or_default();
        if forgotten.contains(run.id.as_str()) {
            n_unfinished += 1;
            continue;
        }
        if !on_disk.contains(&run.blob_path) {
            let which = if store.absolute(&run.blob_path).is_file() {
                record
            } else {
                run.blob_path.clone()
            };
            out.damaged(which, format!("missing: run {} is in the registry", run.id));
        }
    }
    for b in breaks(&runs, &tombstones) {
        out.damaged(REGISTRY, format!("run {}: {}", b.run, b.what));
    }
    let listed: HashSet<&str> = runs.iter().map(|r| r.blob_path.as_str()).collect();
    let n_unlisted = on_disk
        .iter()
        .filter(|b| !listed.contains(b.as_str()))
        .count();
    if out.damage.is_empty() {
        out.checked.push(format!(
            "{REGISTRY}: sound, {} runs in chains without holes, {} tombstones",
            runs.len(),
            tombstones.len()
        ));
        out.checked.push(format!(
            "runs/: {n_blobs} blobs ({}) match their records",
            human(n_bytes)
        ));
    }
    if n_unfinished > 0 {
        out.notes.push(format!(
            "{n_unfinished} runs forgotten but still in the registry: a forget that stopped \
             midway (forget the conversation again)"
        ));
    }
    if n_unlisted > 0 {
        out.notes.push(format!(
            "{n_unlisted} blobs the registry does not list (`kith-central doctor` names them)"
        ));
    }
    let temps = store.leftover_temps()?;
    if !temps.is_empty() {
        out.notes.push(format!(
            "{} temp files of cut-short writes (removed when serve starts)",
            temps.len()
        ));
    }
    Ok(out)
}

impl fmt::Display for Verified {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for line in &self.checked {
            writeln!(f, "checked {line}")?;
        }
        for line in &self.notes {
            writeln!(f, "note: {line}")?;
        }
        for d in &self.damage {
            writeln!(f, "damaged: {}: {}", d.path, d.what)?;
        }
        Ok(())
    }
}
