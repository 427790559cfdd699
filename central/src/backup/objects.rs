//! The backup's content-addressed files under `blobs/`: each is named by
//! the sha256 of its bytes (`blobs/ab/abcdef…`), written once (temp file,
//! fsync, rename, folder fsync) and shared by every snapshot holding those
//! bytes, so a second backup copies only what is new, and an object that
//! is there is whole.

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::io_at;
use super::manifest::address;
use crate::error::{Error, Result};

/// How the names of objects being written start: one left behind is a
/// copy an interrupted backup cut short.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

/// The objects of the backup in `dest`.
pub(crate) struct Objects {
    dest: PathBuf,
}

/// An object put in: its sha256 and size, and whether its bytes were
/// copied now (else they were there already).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Put {
    pub sha256: String,
    pub size: u64,
    pub copied: bool,
}

/// What an object's file holds, against its address and expected size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Found {
    Sound,
    Missing,
    /// Of another size (a truncated copy).
    Size(u64),
    /// Its bytes hash to something else (a changed byte).
    Changed,
}

impl Objects {
    pub(crate) fn new(dest: &Path) -> Self {
        Self {
            dest: dest.to_owned(),
        }
    }

    /// Where the object of `sha256` is.
    pub(crate) fn path(&self, sha256: &str) -> Result<PathBuf> {
        let rel = address(sha256)
            .ok_or_else(|| Error::Internal(format!("{sha256:?} is not a sha256")))?;
        Ok(self.dest.join(rel))
    }

    /// Copies the file at `src` in, hashing what it reads: unless an object
    /// of `expected` and of the file's size is there already, and then
    /// nothing is read. Bytes that do not hash to `expected` are kept at
    /// their own address (the caller says the source is damaged).
    pub(crate) fn put_file(&self, src: &Path, expected: &str) -> Result<Put> {
        let size = fs::metadata(src).map_err(io_at(src))?.len();
        if self.has(expected, size) {
            return Ok(Put {
                sha256: expected.to_owned(),
                size,
                copied: false,
            });
        }
        let mut input = File::open(src).map_err(io_at(src))?;
        let (tmp, mut out) = self.temp()?;
        let mut hasher = Sha256::new();
        let mut buf = vec![0u8; 64 * 1024];
        let mut read = 0u64;
        let copied = (|| -> io::Result<()> {
            loop {
                let n = input.read(&mut buf)?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
                out.write_all(&buf[..n])?;
                read += n as u64;
            }
            out.sync_all()
        })();
        if let Err(e) = copied {
            let _ = fs::remove_file(&tmp);
            return Err(io_at(src)(e));
        }
        let sha256 = hex::encode(hasher.finalize());
        let copied = self.settle(&tmp, &sha256, read)?;
        Ok(Put {
            sha256,
            size: read,
            copied,
        })
    }

    /// Puts `bytes` in, unless they are there already.
    pub(crate) fn put_bytes(&self, bytes: &[u8]) -> Result<Put> {
        let sha256 = kith_shared::hash::sha256_hex(bytes);
        let size = bytes.len() as u64;
        if self.has(&sha256, size) {
            return Ok(Put {
                sha256,
                size,
                copied: false,
            });
        }
        let (tmp, mut out) = self.temp()?;
        if let Err(e) = out.write_all(bytes).and_then(|()| out.sync_all()) {
            let _ = fs::remove_file(&tmp);
            return Err(io_at(&tmp)(e));
        }
        let copied = self.settle(&tmp, &sha256, size)?;
        Ok(Put {
            sha256,
            size,
            copied,
        })
    }

    /// The object's bytes, refused unless they are `size` bytes that hash
    /// to its address.
    pub(crate) fn read(&self, sha256: &str, size: u64) -> Result<Vec<u8>> {
        let path = self.path(sha256)?;
        let bytes = fs::read(&path).map_err(io_at(&path))?;
        if bytes.len() as u64 != size || kith_shared::hash::sha256_hex(&bytes) != sha256 {
            return Err(Error::Internal(format!(
                "{}: damaged (its bytes are not those of its address)",
                path.display()
            )));
        }
        Ok(bytes)
    }

    /// Whether the object is there, whole and unchanged (read and hashed).
    pub(crate) fn check(&self, sha256: &str, size: u64) -> Result<Found> {
        let path = self.path(sha256)?;
        let mut file = match File::open(&path) {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(io_at(&path)(e)),
        };
        let mut hasher = Sha256::new();
        let n = io::copy(&mut file, &mut hasher).map_err(io_at(&path))?;
        Ok(if n != size {
            Found::Size(n)
        } else if hex::encode(hasher.finalize()) != sha256 {
            Found::Changed
        } else {
            Found::Sound
        })
    }

    /// Every object's name (its sha256), and the temp files interrupted
    /// copies left, relative to the backup.
    pub(crate) fn list(&self) -> Result<(Vec<String>, Vec<String>)> {
        let (mut names, mut temps) = (Vec::new(), Vec::new());
        let root = self.dest.join("blobs");
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let entries = match fs::read_dir(&dir) {
                Ok(e) => e,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_at(&dir)(e)),
            };
            for entry in entries {
                let path = entry.map_err(io_at(&dir))?.path();
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                if path.is_dir() {
                    stack.push(path);
                } else if name.starts_with(TEMP_PREFIX) {
                    temps.push(rel(&self.dest, &path));
                } else {
                    names.push(name);
                }
            }
        }
        names.sort();
        temps.sort();
        Ok((names, temps))
    }

    /// Removes an object (one no snapshot lists).
    pub(crate) fn remove(&self, sha256: &str) -> Result<()> {
        let path = self.path(sha256)?;
        match fs::remove_file(&path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(io_at(&path)(e)),
            _ => Ok(()),
        }
    }

    /// Whether an object of `sha256` and `size` is there (not read).
    fn has(&self, sha256: &str, size: u64) -> bool {
        self.path(sha256)
            .ok()
            .and_then(|p| fs::metadata(p).ok())
            .is_some_and(|m| m.is_file() && m.len() == size)
    }

    /// A new temp file (0600) in `blobs/`.
    fn temp(&self) -> Result<(PathBuf, File)> {
        let dir = self.dest.join("blobs");
        crate::private::create_dir_all(&dir).map_err(io_at(&dir))?;
        let mut rnd = [0u8; 8];
        getrandom::fill(&mut rnd).map_err(|e| Error::Internal(format!("no randomness: {e}")))?;
        let path = dir.join(format!("{TEMP_PREFIX}{}", hex::encode(rnd)));
        let file = crate::private::create_new(&path).map_err(io_at(&path))?;
        Ok((path, file))
    }

    /// Moves a synced temp file to the address of `sha256`; false (and the
    /// temp file gone) when a whole object was there already.
    fn settle(&self, tmp: &Path, sha256: &str, size: u64) -> Result<bool> {
        let target = self.path(sha256)?;
        let dir = target.parent().unwrap_or(&self.dest).to_owned();
        if self.has(sha256, size) {
            fs::remove_file(tmp).map_err(io_at(tmp))?;
            return Ok(false);
        }
        crate::private::create_dir_all(&dir).map_err(io_at(&dir))?;
        if let Err(e) = fs::rename(tmp, &target) {
            let _ = fs::remove_file(tmp);
            return Err(io_at(&target)(e));
        }
        File::open(&dir)
            .and_then(|d| d.sync_all())
            .map_err(io_at(&dir))?;
        Ok(true)
    }
}

/// `path` relative to `root`, as text.
fn rel(root: &Path, path: &Path) -> String {
    path.strip_prefix(root)
        .unwrap_or(path)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_shared::hash::sha256_hex;

    #[test]
    fn a_file_is_copied_once_to_its_address_and_found_there_after() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let src = tmp.path().join("r1.jsonl");
        fs::write(&src, b"{\"a\":1}\n")?;
        let sha = sha256_hex(b"{\"a\":1}\n");
        let objects = Objects::new(&tmp.path().join("dest"));
        let first = objects.put_file(&src, &sha)?;
        assert_eq!(
            first,
            Put {
                sha256: sha.clone(),
                size: 8,
                copied: true
            }
        );
        let at = objects.path(&sha)?;
        assert!(
            at.ends_with(format!("blobs/{}/{sha}", &sha[..2])),
            "{}",
            at.display()
        );
        assert_eq!(fs::read(&at)?, b"{\"a\":1}\n");
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&at)?.permissions().mode() & 0o777, 0o600);
        // The source gone: a second put finds the object by its address and
        // reads nothing.
        let second = objects.put_file(&src, &sha)?;
        assert!(!second.copied);
        assert!(!objects.put_bytes(b"{\"a\":1}\n")?.copied);
        assert_eq!(objects.check(&sha, 8)?, Found::Sound);
        let (names, temps) = objects.list()?;
        assert_eq!((names, temps), (vec![sha], Vec::<String>::new()));
        Ok(())
    }

    #[test]
    fn bytes_that_are_not_what_their_record_says_keep_their_own_address() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let src = tmp.path().join("r1.jsonl");
        fs::write(&src, b"{\"b\":2}\n")?;
        let claimed = sha256_hex(b"{\"a\":1}\n");
        let objects = Objects::new(&tmp.path().join("dest"));
        let put = objects.put_file(&src, &claimed)?;
        assert_eq!(put.sha256, sha256_hex(b"{\"b\":2}\n"));
        assert!(put.copied);
        assert_eq!(objects.check(&claimed, 8)?, Found::Missing);
        Ok(())
    }

    #[test]
    fn a_changed_byte_a_cut_file_and_a_missing_one_are_each_found() -> Result<()> {
        let tmp = tempfile::tempdir()?;
        let objects = Objects::new(tmp.path());
        let put = objects.put_bytes(b"hello world\n")?;
        let at = objects.path(&put.sha256)?;
        let mut bytes = fs::read(&at)?;
        bytes[0] ^= 1;
        fs::write(&at, &bytes)?;
        assert_eq!(objects.check(&put.sha256, put.size)?, Found::Changed);
        assert!(objects.read(&put.sha256, put.size).is_err());
        fs::write(&at, b"hello")?;
        assert_eq!(objects.check(&put.sha256, put.size)?, Found::Size(5));
        objects.remove(&put.sha256)?;
        assert_eq!(objects.check(&put.sha256, put.size)?, Found::Missing);
        // Whole again by the next put.
        assert!(objects.put_bytes(b"hello world\n")?.copied);
        assert_eq!(objects.read(&put.sha256, put.size)?, b"hello world\n");
        Ok(())
    }
}
