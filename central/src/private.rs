//! Files only central's own user may read: the data directory and its
//! folders 0700, blobs and registry files 0600, set explicitly so a
//! permissive umask (022 makes 0755 and 0644) never opens them to the
//! machine's other users.

use std::fs::{self, OpenOptions, Permissions};
use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub(crate) const DIR_MODE: u32 = 0o700;
pub(crate) const FILE_MODE: u32 = 0o600;

/// Creates `dir` and any missing parents as 0700, and makes `dir` itself
/// 0700 if it already existed (a data directory made by hand, say).
pub(crate) fn create_dir_all(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    restrict(dir, DIR_MODE)
}

/// A new file, 0600, that must not exist yet.
pub(crate) fn create_new(path: &Path) -> io::Result<fs::File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .open(path)?;
    // The umask can only take bits away; this puts back none it took but
    // makes the mode exact whatever it was.
    file.set_permissions(Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Makes an existing file or folder `mode`; a missing one is left missing.
pub(crate) fn restrict(path: &Path, mode: u32) -> io::Result<()> {
    match fs::set_permissions(path, Permissions::from_mode(mode)) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}
