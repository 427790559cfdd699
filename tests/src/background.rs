//! A program running beside a test (a `kith watch`, a server that is
//! expected to refuse or to listen): what it says on stderr, line by line
//! as it comes, and the signals that it is ready, with deadlines. It is
//! SIGKILLed with the test, as a crash would end it.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long a background program may take to say what a test waits for.
pub const SAYS_WITHIN: Duration = Duration::from_secs(30);

/// A running program, its stderr read as it comes; killed when dropped.
pub struct Background {
    child: Child,
    /// Its stderr, line by line; closed when the program ends.
    pub said: Receiver<String>,
}

impl Background {
    /// Starts `cmd` with stdin empty, stdout discarded and stderr read.
    pub fn spawn(mut cmd: Command) -> Result<Self> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .with_context(|| format!("cannot start {:?}", cmd.get_program()))?;
        let said = lines_of(child.stderr.take().context("no stderr")?);
        Ok(Self { child, said })
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> Result<bool> {
        Ok(self.child.try_wait()?.is_none())
    }

    /// The next line it says holding `want`, within `SAYS_WITHIN`; the
    /// lines before it are passed over.
    pub fn next(&self, want: &str) -> Result<String> {
        let deadline = Instant::now() + SAYS_WITHIN;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.said.recv_timeout(left) {
                Ok(line) if line.contains(want) => return Ok(line),
                Ok(_) => {}
                Err(RecvTimeoutError::Timeout) => {
                    bail!("{want:?} was not said within {SAYS_WITHIN:?}")
                }
                Err(RecvTimeoutError::Disconnected) => {
                    bail!("the program ended without saying {want:?}")
                }
            }
        }
    }

    /// Waits until the program watches the folder `dir` for changes (holds
    /// an inotify watch on it): what `kith watch` does once it has looked
    /// at its roots, after it said "watching". A file made in `dir` from
    /// then on is an event it sees, not something its first pass finds.
    pub fn wait_watching(&mut self, dir: &Path) -> Result<()> {
        let deadline = Instant::now() + SAYS_WITHIN;
        while !watches(self.pid(), dir)? {
            if !self.running()? {
                bail!("it ended before it watched {}", dir.display());
            }
            if Instant::now() > deadline {
                bail!("{} was not watched within {SAYS_WITHIN:?}", dir.display());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What `pipe` says, line by line as it comes (read on a thread of its
/// own, so the program never blocks on a full pipe).
pub fn lines_of(pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Whether process `pid` holds an inotify watch on `dir`, from the watches
/// Linux lists in `/proc/<pid>/fdinfo` (`inotify wd:N ino:<hex> ...`). By
/// inode number: the folders a test watches are in one temporary folder,
/// on one file system.
fn watches(pid: u32, dir: &Path) -> Result<bool> {
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(dir)
        .with_context(|| format!("{} is not there to watch", dir.display()))?
        .ino();
    let want = format!(" ino:{ino:x} ");
    let fds = std::fs::read_dir(format!("/proc/{pid}/fdinfo"))?;
    for fd in fds.flatten() {
        // An fd closed since it was listed has no info: not a watch.
        let Ok(info) = std::fs::read_to_string(fd.path()) else {
            continue;
        };
        if info
            .lines()
            .any(|l| l.starts_with("inotify ") && l.contains(&want))
        {
            return Ok(true);
        }
    }
    Ok(false)
}
