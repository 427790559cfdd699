//! The authoritative blob store: `<data>/runs/<user_id>/<yyyy-mm>/<run_id>.jsonl`
//! and `<run_id>.metadata.json`. Files are written to a temp file, fsynced and
//! renamed into place, then the directory is fsynced; nothing is ever
//! rewritten in place (a tag edit replaces the metadata file whole). The
//! metadata is a versioned record (`record`).

pub(crate) mod record;

pub(crate) use record::RunRecord;

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use kith_shared::ids::{RunId, UserId};

use crate::error::{Code, Error, Result};
use crate::privacy::Operator;

/// How the names of files being written start: one left behind is a write
/// a crash cut short (`serve` removes them at start, `doctor` names them).
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

#[derive(Debug, Clone)]
pub struct BlobStore {
    /// The data directory; blob paths in the registry are relative to it.
    data_dir: PathBuf,
}

impl BlobStore {
    pub fn new(data_dir: &Path) -> Self {
        Self {
            data_dir: data_dir.to_owned(),
        }
    }

    /// Relative path of a run's jsonl blob. Ids are validated newtypes, so
    /// the path cannot leave the store.
    pub fn jsonl_path(user: &UserId, month: &str, run: &RunId) -> String {
        format!("runs/{user}/{month}/{run}.jsonl")
    }

    pub fn absolute(&self, relative: &str) -> PathBuf {
        self.data_dir.join(relative)
    }

    /// Writes a run's jsonl and metadata. If the jsonl already exists (a
    /// retry after a crash between blob and registry), it must hold the same
    /// bytes; different bytes are a conflict and nothing is overwritten.
    pub fn write_run(&self, jsonl_rel: &str, jsonl: &[u8], metadata: &[u8]) -> Result<()> {
        let jsonl_path = self.absolute(jsonl_rel);
        let meta_path = metadata_path(&jsonl_path);
        let dir = jsonl_path
            .parent()
            .ok_or_else(|| Error::Internal("blob path has no parent".into()))?;
        crate::private::create_dir_all(dir)?;
        match fs::read(&jsonl_path) {
            Ok(existing) if existing == jsonl => {}
            Ok(_) => {
                return Err(Error::conflict(
                    Code::RunConflict,
                    "a run with this id is already stored with other bytes",
                ))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => write_atomic(&jsonl_path, jsonl)?,
            Err(e) => return Err(e.into()),
        }
        write_atomic(&meta_path, metadata)?;
        sync_dir(dir)?;
        Ok(())
    }

    /// Deletes a run's jsonl, then its metadata (a forget). Missing files
    /// are no error, so a forget that stopped midway can run again; while
    /// the metadata is left, `doctor` still sees the run.
    pub fn remove_run(&self, jsonl_rel: &str) -> Result<()> {
        let jsonl_path = self.absolute(jsonl_rel);
        for path in [jsonl_path.clone(), metadata_path(&jsonl_path)] {
            match fs::remove_file(&path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e.into()),
                _ => {}
            }
        }
        if let Some(dir) = jsonl_path.parent().filter(|d| d.exists()) {
            sync_dir(dir)?;
        }
        Ok(())
    }

    /// A run's record, by its jsonl's relative path.
    pub fn run_metadata(&self, jsonl_rel: &str) -> Result<RunRecord> {
        self.read_metadata(&metadata_path(&self.absolute(jsonl_rel)))
    }

    /// Replaces a run's metadata (a tag edit), atomically; the jsonl is
    /// never touched.
    pub fn rewrite_metadata(&self, jsonl_rel: &str, record: &RunRecord) -> Result<()> {
        let path = metadata_path(&self.absolute(jsonl_rel));
        write_atomic(&path, &record.write()?)?;
        sync_dir(path.parent().unwrap_or(Path::new(".")))?;
        Ok(())
    }

    pub fn open_jsonl(&self, relative: &str) -> io::Result<File> {
        File::open(self.absolute(relative))
    }

    pub fn read_jsonl(&self, relative: &str) -> io::Result<Vec<u8>> {
        fs::read(self.absolute(relative))
    }

    /// Every `*.metadata.json` under `runs/`, every member's, for
    /// `reindex`, `doctor` and the recovery at start.
    pub fn metadata_files(&self, _: &Operator) -> io::Result<Vec<PathBuf>> {
        self.files_named(|name| name.ends_with(".metadata.json"))
    }

    /// Temp files a cut-short write left under `runs/`.
    pub fn leftover_temps(&self) -> io::Result<Vec<PathBuf>> {
        self.files_named(|name| name.starts_with(TEMP_PREFIX))
    }

    /// A metadata file's record.
    pub fn read_metadata(&self, path: &Path) -> Result<RunRecord> {
        RunRecord::read(&fs::read(path)?)
    }

    /// Files under `runs/` whose name passes `wanted`, sorted.
    fn files_named(&self, wanted: impl Fn(&str) -> bool) -> io::Result<Vec<PathBuf>> {
        let mut out = Vec::new();
        let root = self.data_dir.join("runs");
        if !root.exists() {
            return Ok(out);
        }
        let mut stack = vec![root];
        while let Some(dir) = stack.pop() {
            for entry in fs::read_dir(&dir)? {
                let path = entry?.path();
                if path.is_dir() {
                    stack.push(path);
                } else if path
                    .file_name()
                    .is_some_and(|n| wanted(&n.to_string_lossy()))
                {
                    out.push(path);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// The jsonl path, relative to the data dir, that belongs to a metadata file.
    pub fn jsonl_for_metadata(&self, metadata: &Path) -> Option<String> {
        let s = metadata.strip_prefix(&self.data_dir).ok()?.to_str()?;
        Some(format!("{}.jsonl", s.strip_suffix(".metadata.json")?))
    }
}

fn metadata_path(jsonl: &Path) -> PathBuf {
    jsonl.with_extension("metadata.json")
}

/// Temp file in the same directory, fsync, rename: readers see the old state
/// or the whole new file, never a prefix.
fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp = tempfile_in(dir)?;
    tmp.1.write_all(bytes)?;
    tmp.1.sync_all()?;
    fs::rename(&tmp.0, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp.0);
    })
}

fn tempfile_in(dir: &Path) -> io::Result<(PathBuf, File)> {
    let mut rnd = [0u8; 8];
    getrandom::fill(&mut rnd).map_err(|e| io::Error::other(e.to_string()))?;
    let path = dir.join(format!("{TEMP_PREFIX}{}", hex::encode(rnd)));
    let file = crate::private::create_new(&path)?;
    Ok((path, file))
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_is_idempotent_for_same_bytes_and_refuses_other_bytes() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let store = BlobStore::new(dir.path());
        let user = UserId::parse("u1").unwrap_or_else(|e| panic!("{e}"));
        let run = RunId::parse("r1").unwrap_or_else(|e| panic!("{e}"));
        let rel = BlobStore::jsonl_path(&user, "2026-05", &run);
        assert_eq!(rel, "runs/u1/2026-05/r1.jsonl");
        store
            .write_run(&rel, b"{}\n", b"{\"id\":\"r1\"}")
            .unwrap_or_else(|e| panic!("{e}"));
        store
            .write_run(&rel, b"{}\n", b"{\"id\":\"r1\"}")
            .unwrap_or_else(|e| panic!("{e}"));
        let err = store.write_run(&rel, b"[]\n", b"{}");
        assert!(matches!(
            err,
            Err(Error::Conflict {
                code: Code::RunConflict,
                ..
            })
        ));
        assert_eq!(store.read_jsonl(&rel).unwrap_or_default(), b"{}\n");
        let metas = store
            .metadata_files(&Operator::for_operator_commands())
            .unwrap_or_default();
        assert_eq!(metas.len(), 1);
        assert_eq!(
            store.jsonl_for_metadata(&metas[0]).as_deref(),
            Some(rel.as_str())
        );
        let leftovers: Vec<_> = fs::read_dir(dir.path().join("runs/u1/2026-05"))
            .map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert_eq!(leftovers.len(), 2, "no temp files left: {leftovers:?}");
    }
}
