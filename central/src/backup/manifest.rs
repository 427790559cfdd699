//! A snapshot's `manifest.json`, and the names a backup gives things.
//!
//! The manifest lists every file of the data directory the snapshot holds:
//! its path there, its size and sha256, and where the backup keeps its
//! bytes: blobs and records at their content address
//! (`blobs/ab/abcdef…`, shared by every snapshot that holds the same
//! bytes), the registry's copy in the snapshot's own folder. A manifest is
//! checked when read: every path is one the data directory can hold (a
//! restore writes there) and every address is its sha256's.

use serde::{Deserialize, Serialize};

use kith_shared::ids::{RunId, UserId};

use crate::error::{Error, Result};

/// The version `write` writes; a newer one is refused when read.
pub(crate) const VERSION: u32 = 1;

/// The registry's path in the data directory, and its copy's in a snapshot.
pub(crate) const REGISTRY: &str = "registry.sqlite";

/// How the folder of a snapshot being written ends; renamed without it
/// once whole, so an interrupted backup is never taken for a snapshot.
pub(crate) const PARTIAL: &str = ".partial";

/// A snapshot's list of files.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Manifest {
    pub version: u32,
    /// The snapshot's folder name under `snapshots/`.
    pub snapshot: String,
    /// When the registry was copied: the snapshot's point in time.
    pub taken_at: String,
    /// The kith-central that took it (a restore by an older one may not
    /// read its records).
    pub kith_central: String,
    pub files: Vec<Entry>,
}

/// One file of the data directory, as the snapshot holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Entry {
    /// Relative to the data directory.
    pub path: String,
    pub size: u64,
    pub sha256: String,
    /// The content address holding its bytes, relative to the backup;
    /// none for the registry's copy, which is in the snapshot's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
}

/// What a path of the data directory is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Registry,
    /// A run's transcript bytes.
    Blob {
        run: String,
    },
    /// A run's `.metadata.json`.
    Record {
        run: String,
    },
}

impl Manifest {
    pub(crate) fn write(&self) -> Result<Vec<u8>> {
        let mut bytes = serde_json::to_vec_pretty(self)?;
        bytes.push(b'\n');
        Ok(bytes)
    }

    /// A manifest of any version up to `VERSION`, every entry checked.
    pub(crate) fn read(bytes: &[u8]) -> Result<Self> {
        #[derive(Deserialize)]
        struct Version {
            version: u32,
        }
        let Version { version } = serde_json::from_slice(bytes)?;
        if version > VERSION {
            return Err(Error::Internal(format!(
                "a manifest of version {version} (this kith-central reads up to {VERSION}): \
                 a newer kith-central wrote it"
            )));
        }
        let manifest: Self = serde_json::from_slice(bytes)?;
        for entry in &manifest.files {
            entry.check()?;
        }
        Ok(manifest)
    }

    /// The entry of the data directory's `path`.
    pub(crate) fn entry(&self, path: &str) -> Option<&Entry> {
        self.files.iter().find(|e| e.path == path)
    }
}

impl Entry {
    /// Whether the entry names a file a data directory holds, kept where
    /// its kind is kept.
    fn check(&self) -> Result<()> {
        let bad = |why: &str| {
            Err(Error::Internal(format!(
                "manifest entry {:?}: {why}",
                self.path
            )))
        };
        let Some(kind) = kind_of(&self.path) else {
            return bad("not a file of a data directory");
        };
        match (kind, &self.object) {
            (Kind::Registry, None) => Ok(()),
            (Kind::Registry, Some(_)) => bad("the registry's copy has no content address"),
            (_, Some(object)) if Some(object) == address(&self.sha256).as_ref() => Ok(()),
            (_, _) => bad("its object is not its sha256's content address"),
        }
    }
}

/// The content address of bytes whose sha256 (lower-case hex) is
/// `sha256`: `blobs/ab/abcdef…`. None for what is not a sha256.
pub(crate) fn address(sha256: &str) -> Option<String> {
    let hex = sha256.len() == 64
        && sha256
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    hex.then(|| format!("blobs/{}/{sha256}", &sha256[..2]))
}

/// What `path` (relative to the data directory) is, if a data directory
/// holds it: `registry.sqlite`, or `runs/<user>/<month>/<run>.jsonl` and
/// `.metadata.json`. Ids parse as ids, so no such path leaves the folder.
pub(crate) fn kind_of(path: &str) -> Option<Kind> {
    if path == REGISTRY {
        return Some(Kind::Registry);
    }
    let mut parts = path.split('/');
    let (Some("runs"), Some(user), Some(month), Some(file), None) = (
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
        parts.next(),
    ) else {
        return None;
    };
    let month_ok = (1..=16).contains(&month.len())
        && month
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-');
    if UserId::parse(user).is_err() || !month_ok {
        return None;
    }
    let (run, record) = match file.strip_suffix(".metadata.json") {
        Some(run) => (run, true),
        None => (file.strip_suffix(".jsonl")?, false),
    };
    let run = RunId::parse(run).ok()?.to_string();
    Some(if record {
        Kind::Record { run }
    } else {
        Kind::Blob { run }
    })
}

/// The record's path beside a blob's (`….jsonl` -> `….metadata.json`).
pub(crate) fn record_path(blob: &str) -> Option<String> {
    Some(format!("{}.metadata.json", blob.strip_suffix(".jsonl")?))
}

/// The folder name of a snapshot taken at `at` (kith's canonical time,
/// `2026-05-11T08:26:55.123Z`): the same time with `-` for `:`, so names
/// sort as times do and need no quoting.
pub(crate) fn snapshot_name(at: &str) -> String {
    at.replace(':', "-")
}

/// Whether `name` may name a snapshot's folder (a `--snapshot` given on
/// the command line never leaves `snapshots/`).
pub(crate) fn is_snapshot_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && !name.ends_with(PARTIAL)
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHA: &str = "ab00000000000000000000000000000000000000000000000000000000000001";

    #[test]
    fn a_sha256_has_one_address_and_anything_else_none() {
        assert_eq!(address(SHA).as_deref(), Some(&*format!("blobs/ab/{SHA}")));
        for bad in [
            "",
            "ab",
            &SHA.to_uppercase(),
            &SHA[..63],
            &format!("{SHA}0"),
            &SHA.replace('1', "/"),
            &SHA.replace('1', "g"),
        ] {
            assert_eq!(address(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_the_paths_a_data_directory_holds_are_taken() {
        let run = |r: &str| r.to_owned();
        let cases: &[(&str, Option<Kind>)] = &[
            ("registry.sqlite", Some(Kind::Registry)),
            (
                "runs/u1/2026-05/r1.jsonl",
                Some(Kind::Blob { run: run("r1") }),
            ),
            (
                "runs/u1/2026-05/r1.metadata.json",
                Some(Kind::Record { run: run("r1") }),
            ),
            ("runs/u1/2026-05/r1.txt", None),
            ("runs/u1/r1.jsonl", None),
            ("runs/u1/2026-05/x/r1.jsonl", None),
            ("runs/../2026-05/r1.jsonl", None),
            ("runs/u1/../r1.jsonl", None),
            ("runs/u1/2026-05/..jsonl", None),
            ("/runs/u1/2026-05/r1.jsonl", None),
            ("runs/u1/2026-05/r.1.jsonl", None),
            ("index/meta.json", None),
            ("chunking", None),
            ("registry.sqlite-wal", None),
        ];
        for (path, want) in cases {
            assert_eq!(&kind_of(path), want, "{path}");
        }
        assert_eq!(
            record_path("runs/u1/2026-05/r1.jsonl").as_deref(),
            Some("runs/u1/2026-05/r1.metadata.json")
        );
    }

    fn manifest(files: Vec<Entry>) -> Manifest {
        Manifest {
            version: VERSION,
            snapshot: snapshot_name("2026-05-11T08:26:55.123Z"),
            taken_at: "2026-05-11T08:26:55.123Z".into(),
            kith_central: "0.1.0".into(),
            files,
        }
    }

    fn blob(path: &str, sha: &str) -> Entry {
        Entry {
            path: path.into(),
            size: 3,
            sha256: sha.into(),
            object: address(sha),
        }
    }

    #[test]
    fn a_manifest_reads_back_as_written_and_a_bad_entry_is_refused() -> Result<()> {
        let good = manifest(vec![
            Entry {
                path: REGISTRY.into(),
                size: 4096,
                sha256: SHA.into(),
                object: None,
            },
            blob("runs/u1/2026-05/r1.jsonl", SHA),
        ]);
        let bytes = good.write()?;
        assert_eq!(Manifest::read(&bytes)?, good);
        assert!(!String::from_utf8_lossy(&bytes).contains("\"object\": null"));
        assert_eq!(
            good.entry("runs/u1/2026-05/r1.jsonl")
                .and_then(|e| e.object.clone()),
            address(SHA)
        );
        let other = SHA.replace("01", "02");
        let refused = [
            (
                "a path outside runs/",
                manifest(vec![blob("../etc/passwd", SHA)]),
            ),
            (
                "an object at another address",
                manifest(vec![Entry {
                    object: address(&other),
                    ..blob("runs/u1/2026-05/r1.jsonl", SHA)
                }]),
            ),
            (
                "a blob without an address",
                manifest(vec![Entry {
                    object: None,
                    ..blob("runs/u1/2026-05/r1.jsonl", SHA)
                }]),
            ),
            (
                "a newer version",
                Manifest {
                    version: VERSION + 1,
                    ..manifest(Vec::new())
                },
            ),
        ];
        for (what, m) in refused {
            assert!(Manifest::read(&m.write()?).is_err(), "{what} was taken");
        }
        Ok(())
    }

    #[test]
    fn snapshot_names_sort_as_their_times_and_stay_in_their_folder() {
        let times = [
            "2026-05-11T08:26:55.123Z",
            "2026-05-11T08:26:55.124Z",
            "2026-05-11T10:00:00.000Z",
            "2027-01-01T00:00:00.000Z",
        ];
        let names: Vec<String> = times.iter().map(|t| snapshot_name(t)).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(names, sorted);
        assert_eq!(names[0], "2026-05-11T08-26-55.123Z");
        assert!(names.iter().all(|n| is_snapshot_name(n)));
        for bad in [
            "",
            "..",
            ".",
            "../x",
            "a/b",
            ".hidden",
            "x y",
            "2026-05-11T08-26-55.123Z.partial",
        ] {
            assert!(!is_snapshot_name(bad), "{bad:?}");
        }
    }
}
