//! A program running beside a test (a `kith watch`, a server that is
//! expected to refuse or to listen): what it says on stderr, line by line
//! as it comes. It is SIGKILLed with the test, as a crash would end it.

use std::io::{BufRead, BufReader, Read};
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
