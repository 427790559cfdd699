//! Keeping a backup to its newest snapshots: older ones are removed, then
//! every object no remaining snapshot lists. Done while the backup folder's
//! lock is held (by the backup that has just written), so no backup can be
//! listing an object while it goes.

use std::collections::HashSet;
use std::fs;
use std::num::NonZeroUsize;

use super::manifest::PARTIAL;
use super::{io_at, sync_dir, Dest};
use crate::error::{Error, Result};

/// What pruning removed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Pruned {
    /// The snapshots removed, oldest first.
    pub snapshots: Vec<String>,
    /// Objects no kept snapshot lists, removed.
    pub n_objects: usize,
    pub n_temps: usize,
}

/// Removes every snapshot but the newest `keep`, then the objects none of
/// the kept ones lists. The caller holds the backup's lock. A kept
/// snapshot whose manifest cannot be read stops it before any object is
/// removed: what that snapshot lists is unknown.
pub(super) fn prune(backup: &Dest, keep: NonZeroUsize) -> Result<Pruned> {
    let (names, _) = backup.snapshot_names()?;
    let n_old = names.len().saturating_sub(keep.get());
    let (old, kept) = names.split_at(n_old);
    let mut listed = HashSet::new();
    for name in kept {
        let manifest = backup.read_manifest(name).map_err(|e| {
            Error::Internal(format!(
                "no blob removed: snapshot {name} is kept, and its manifest cannot be read ({e})"
            ))
        })?;
        listed.extend(manifest.files.into_iter().map(|e| e.sha256));
    }
    let mut out = Pruned::default();
    for name in old {
        // Renamed first: a removal cut short leaves an interrupted
        // snapshot (which the next backup removes), never a damaged one.
        let whole = backup.snapshot(name);
        let going = backup.snapshot(&format!("{name}{PARTIAL}"));
        fs::rename(&whole, &going).map_err(io_at(&whole))?;
        fs::remove_dir_all(&going).map_err(io_at(&going))?;
        out.snapshots.push(name.clone());
    }
    sync_dir(&backup.snapshots())?;
    let objects = backup.objects();
    let (names, temps) = objects.list()?;
    for sha in names.iter().filter(|s| !listed.contains(*s)) {
        objects.remove(sha)?;
        out.n_objects += 1;
    }
    for temp in &temps {
        let path = backup.root.join(temp);
        fs::remove_file(&path).map_err(io_at(&path))?;
        out.n_temps += 1;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::manifest::{self, Entry, Manifest, REGISTRY, VERSION};
    use super::super::verify::verify_backup;
    use super::*;
    use crate::privacy::Operator;

    /// A snapshot named `name` whose files (besides an empty registry's
    /// copy) are `blobs`: (run, bytes), each with its record.
    fn snapshot(backup: &Dest, name: &str, blobs: &[(&str, &[u8])]) -> Result<Vec<String>> {
        let dir = backup.snapshot(name);
        crate::private::create_dir_all(&dir)?;
        let registry = dir.join(REGISTRY);
        drop(crate::registry::Registry::open(&registry)?);
        let (sha256, size) = super::super::sha256_file(&registry)?;
        let mut files = vec![Entry {
            path: REGISTRY.into(),
            size,
            sha256,
            object: None,
        }];
        let objects = backup.objects();
        let mut shas = Vec::new();
        for (run, bytes) in blobs {
            let blob = format!("runs/u1/2026-05/{run}.jsonl");
            let put = objects.put_bytes(bytes)?;
            let jsonl_sha256 = put.sha256.clone();
            files.push(Entry {
                path: blob.clone(),
                size: put.size,
                sha256: put.sha256.clone(),
                object: manifest::address(&put.sha256),
            });
            shas.push(put.sha256);
            let record = record(run, &jsonl_sha256, put.size)?;
            let put = objects.put_bytes(&record)?;
            files.push(Entry {
                path: manifest::record_path(&blob).unwrap_or_default(),
                size: put.size,
                sha256: put.sha256.clone(),
                object: manifest::address(&put.sha256),
            });
        }
        let manifest = Manifest {
            version: VERSION,
            snapshot: name.into(),
            taken_at: "2026-05-11T08:00:00.000Z".into(),
            kith_central: "test".into(),
            files,
        };
        fs::write(dir.join("manifest.json"), manifest.write()?)?;
        Ok(shas)
    }

    /// A run's record saying its blob's sha256.
    fn record(run: &str, jsonl_sha256: &str, size: u64) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec(&serde_json::json!({
            "version": 2, "id": run, "user_id": "u1", "machine_id": "m1",
            "machine": "laptop", "agent_runtime": "claude-code", "agent_version": null,
            "model": null, "conversation_id": "s1", "parent_run_id": null,
            "root_run_id": run, "cwd": null, "git_branch": null, "intent": null,
            "tags": [], "readable_by": [], "started_at": "2026-05-11T08:00:00.000Z",
            "ended_at": null, "turn_count": 1, "tool_call_count": 0,
            "files_touched": [], "tools_used": [], "commands": [], "title": null,
            "conversation": null, "subagent_spans": [], "jsonl_bytes": size,
            "jsonl_sha256": jsonl_sha256, "chain_sha256": "c", "source_identity": "s",
            "from_offset": 0, "to_offset": size, "redactions": {},
            "indexed_at": null, "embedded_at": null, "idempotency_key": null,
        }))?)
    }

    #[test]
    fn the_newest_are_kept_whole_and_only_blobs_no_kept_one_lists_go() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let backup = Dest::new(tmp.path());
        let only_old = snapshot(&backup, "2026-05-11T01-00-00.000Z", &[("r1", b"old\n")])?;
        let shared = snapshot(
            &backup,
            "2026-05-11T02-00-00.000Z",
            &[("r1", b"old\n"), ("r2", b"shared\n")],
        )?;
        snapshot(
            &backup,
            "2026-05-11T03-00-00.000Z",
            &[("r2", b"shared\n"), ("r3", b"new\n")],
        )?;
        let newest = snapshot(&backup, "2026-05-11T04-00-00.000Z", &[("r3", b"new\n")])?;
        let objects = backup.objects();
        let path_of = |sha: &str| objects.path(sha);
        let pruned = prune(&backup, NonZeroUsize::new(2).unwrap_or(NonZeroUsize::MIN))?;
        assert_eq!(
            pruned.snapshots,
            ["2026-05-11T01-00-00.000Z", "2026-05-11T02-00-00.000Z"]
        );
        let (names, _) = backup.snapshot_names()?;
        assert_eq!(
            names,
            ["2026-05-11T03-00-00.000Z", "2026-05-11T04-00-00.000Z"]
        );
        assert!(
            !path_of(&only_old[0])?.exists(),
            "a blob only removed snapshots listed is gone"
        );
        assert!(
            path_of(&shared[1])?.exists(),
            "a blob a kept snapshot lists stays"
        );
        assert!(path_of(&newest[0])?.exists());
        let verified = verify_backup(tmp.path(), &Operator::for_operator_commands())?;
        assert!(verified.damage.is_empty(), "{verified}");
        assert_eq!(verified.checked.len(), 2, "{verified}");
        assert!(
            !verified.to_string().contains("no snapshot lists"),
            "no object is left over: {verified}"
        );
        // Nothing more to remove.
        let again = prune(&backup, NonZeroUsize::new(2).unwrap_or(NonZeroUsize::MIN))?;
        assert_eq!(again, Pruned::default());
        Ok(())
    }

    #[test]
    fn an_unreadable_kept_manifest_removes_no_blob() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let backup = Dest::new(tmp.path());
        let old = snapshot(&backup, "2026-05-11T01-00-00.000Z", &[("r1", b"old\n")])?;
        snapshot(&backup, "2026-05-11T02-00-00.000Z", &[("r2", b"new\n")])?;
        fs::write(
            backup
                .snapshot("2026-05-11T02-00-00.000Z")
                .join("manifest.json"),
            b"{",
        )?;
        let err = prune(&backup, NonZeroUsize::MIN);
        assert!(err.is_err_and(|e| e.to_string().contains("no blob removed")));
        assert!(backup.objects().path(&old[0])?.exists());
        assert_eq!(backup.snapshot_names()?.0.len(), 2, "no snapshot removed");
        Ok(())
    }
}
