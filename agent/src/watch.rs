//! `kith watch`: capture continuously. inotify (via `notify`) on the agents'
//! transcript roots, and, not recursively, on the folders that may hold an
//! Aider history (a configured folder of big repositories must not cost a
//! watch per folder inside them); changed files are captured once they have
//! been quiet for ~300 ms, or after 2 s of continuous writing at the latest.
//! The outbox is replayed after each capture and periodically (central may
//! come back).
//! A root that appears later (an agent installed after `kith watch`
//! started) is picked up within seconds; a full rescan now and then catches
//! anything the watcher missed (queue overflow). Stops cleanly when `stop`
//! is set (SIGINT / SIGTERM), or, on Linux, when its own program file was
//! replaced (an upgrade), for the caller to run the new one.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use notify::{RecursiveMode, Watcher};

use crate::capture::Capture;
use crate::client::{Budget, Client};
use crate::config::Paths;
use crate::discover::{self, Source};
use crate::error::Result;
use crate::mirror;
use crate::settings::Settings;

#[derive(Debug, Clone, Copy)]
pub(crate) struct Timing {
    /// A file is captured once no event touched it for this long.
    pub(crate) debounce: Duration,
    /// ... or once it has waited this long, however busy it is.
    pub(crate) max_wait: Duration,
    /// How often the outbox is retried when nothing changes.
    pub(crate) replay_every: Duration,
    /// How often every transcript is looked at anyway.
    pub(crate) rescan_every: Duration,
    /// How often the agents' roots are checked for having appeared (or gone),
    /// and the program for having been replaced.
    pub(crate) roots_every: Duration,
    /// Whether a replaced program ends the run (`Ended::Replaced`).
    pub(crate) follow_upgrades: bool,
}

impl Default for Timing {
    fn default() -> Self {
        Self {
            debounce: Duration::from_millis(300),
            max_wait: Duration::from_secs(2),
            replay_every: Duration::from_secs(30),
            rescan_every: Duration::from_secs(600),
            roots_every: Duration::from_secs(2),
            follow_upgrades: true,
        }
    }
}

/// Why `run` returned.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// `stop` was set.
    Stopped,
    /// The program file at this path is no longer the one running: a
    /// package upgrade or `kith setup` put a new `kith` there.
    Replaced(PathBuf),
}

const LOCK_WAIT: Duration = Duration::from_secs(5);
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Runs until `stop` is set or the program is replaced. `report` receives
/// one line per notable event (errors, central's state changing).
/// `config.toml` is read by `load`, again whenever it changes: a new
/// exclusion or redaction applies from then on (what an exclusion now
/// covers is dropped from the outbox unsent), and while the file does not
/// parse nothing is captured or sent, as for a hook.
pub(crate) fn run(
    paths: &Paths,
    load: impl Fn() -> Result<Settings>,
    timing: Timing,
    stop: &AtomicBool,
    mut report: impl FnMut(&str),
) -> Result<Ended> {
    let mut settings = load()?;
    let mut config_seen = crate::config::file_stamp(&settings.file);
    let mut config_error: Option<String> = None;
    let mut capture = Capture::new(paths, LOCK_WAIT).with_rules(settings.rules.clone());
    let mut aider_roots = settings.aider_roots();
    capture.discard_excluded()?;
    let (tx, rx) = mpsc::channel();
    let mut watcher = notify::recommended_watcher(tx).map_err(|e| {
        crate::error::Error::Refused(format!("cannot watch the transcript folders: {e}"))
    })?;
    let mut watched: Vec<PathBuf> = Vec::new();
    // Path -> (first event not yet captured, latest event).
    let mut pending: BTreeMap<PathBuf, (Instant, Instant)> = BTreeMap::new();
    let mut last_said = String::new();
    let mut say = |line: String| {
        if line != last_said {
            report(&line);
            last_said = line;
        }
    };
    let mut next_rescan = Instant::now();
    let mut next_replay = Instant::now();
    let mut next_roots = Instant::now();
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= next_roots {
            if let Some(path) = replaced_program().filter(|_| timing.follow_upgrades) {
                return Ok(Ended::Replaced(path));
            }
            let seen = crate::config::file_stamp(&settings.file);
            // Read again once it stood still for a second: a save that
            // truncates first must not be read empty (no exclusions).
            let settled = std::fs::metadata(&settings.file).map_or(true, |m| {
                crate::config::left_alone_for(&m, Duration::from_secs(1))
            });
            if seen != config_seen && settled {
                config_seen = seen;
                match load() {
                    Ok(new) => {
                        settings = new;
                        capture = Capture::new(paths, LOCK_WAIT).with_rules(settings.rules.clone());
                        aider_roots = settings.aider_roots();
                        config_error = None;
                        say(format!(
                            "{} changed: its rules apply",
                            settings.file.display()
                        ));
                        if let Err(e) = capture.discard_excluded() {
                            say(format!("dropping what is now excluded: {e}"));
                        }
                        // What waited meanwhile, and what the rules now reach.
                        next_rescan = now;
                    }
                    Err(e) => {
                        say(format!(
                            "{e}; nothing is captured or sent until it is mended"
                        ));
                        config_error = Some(e.to_string());
                    }
                }
            }
            // A few stats: cheap enough to do every couple of seconds, and
            // inotify cannot watch a folder that does not exist yet.
            let agents = discover::roots(paths)
                .into_iter()
                .map(|(_, root)| (root, RecursiveMode::Recursive));
            let aider = discover::aider_dirs(&aider_roots)
                .into_iter()
                .map(|dir| (dir, RecursiveMode::NonRecursive));
            let wanted: Vec<(PathBuf, RecursiveMode)> = agents
                .chain(aider)
                .chain(mirror::source_folders(paths))
                .collect();
            for (dir, mode) in &wanted {
                if dir.is_dir() && !watched.contains(dir) && watcher.watch(dir, *mode).is_ok() {
                    watched.push(dir.clone());
                    // Its files may predate the watch.
                    next_rescan = now;
                }
            }
            // Gone (the watch went with it), or no longer under an Aider
            // root: watched again if it returns.
            watched.retain(|dir| {
                let keep = dir.is_dir() && wanted.iter().any(|(w, _)| w == dir);
                if !keep {
                    let _ = watcher.unwatch(dir);
                }
                keep
            });
            next_roots = now + timing.roots_every;
        }
        if now >= next_rescan {
            let due = now - timing.debounce;
            for path in discover::all(paths, &aider_roots)
                .into_iter()
                .map(|s| s.path)
                .chain(mirror::sources(paths))
            {
                pending.entry(path).or_insert((due, due));
            }
            next_rescan = now + timing.rescan_every;
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            // Reads (our own included: capture opens transcripts, a rescan
            // opens folders) are not changes; reacting to them would loop.
            Ok(Ok(event)) if event.kind.is_access() => {}
            Ok(Ok(event)) => {
                for path in event.paths {
                    if discover::is_transcript(paths, &path) || mirror::is_source(paths, &path) {
                        let now = Instant::now();
                        pending.entry(path).or_insert((now, now)).1 = now;
                    } else if path.is_dir() && !mirror::holds_sources(paths, &path) {
                        // A new folder (a day of Codex sessions, subagents/):
                        // its files may predate the watch on it.
                        next_rescan = Instant::now();
                    }
                }
            }
            Ok(Err(e)) => {
                say(format!("watch: {e}; rescanning"));
                next_rescan = Instant::now();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
        if config_error.is_some() {
            continue;
        }
        let quiet: Vec<PathBuf> = pending
            .iter()
            .filter(|(_, (first, last))| {
                last.elapsed() >= timing.debounce || first.elapsed() >= timing.max_wait
            })
            .map(|(p, _)| p.clone())
            .collect();
        let mut captured = false;
        for path in quiet {
            pending.remove(&path);
            if stop.load(Ordering::SeqCst) {
                break;
            }
            let source = Source {
                runtime: discover::runtime_of(paths, &path),
                path,
            };
            let targets = match mirror::resolve(paths, source) {
                Ok(targets) => targets,
                Err(e) => {
                    say(format!("mirror: {e}"));
                    continue;
                }
            };
            for source in targets {
                match capture.file(&source) {
                    Ok(c) => captured |= c.deltas > 0,
                    Err(e) => say(format!("capture {}: {e}", source.path.display())),
                }
            }
        }
        if (captured || Instant::now() >= next_replay) && !capture.outbox().is_empty() {
            if let Some(line) = replay(paths, &settings, stop) {
                say(line);
            }
            next_replay = Instant::now() + timing.replay_every;
        }
    }
    Ok(Ended::Stopped)
}

/// Where this program's file is, when another program is there now (it was
/// replaced, so the kernel names the running one deleted), complete (an
/// executable ELF file left alone for a second: not one still being
/// written); `None` otherwise, and off Linux.
fn replaced_program() -> Option<PathBuf> {
    use std::io::Read;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let exe = std::fs::read_link("/proc/self/exe").ok()?;
    let named = exe.as_os_str().as_bytes().strip_suffix(b" (deleted)")?;
    let path = PathBuf::from(std::ffi::OsStr::from_bytes(named));
    // Whatever its name, `/proc/self/exe` opens the running file.
    let running = std::fs::metadata("/proc/self/exe").ok()?;
    let mut file = std::fs::File::open(&path).ok()?;
    let there = file.metadata().ok()?;
    let settled = crate::config::left_alone_for(&there, Duration::from_secs(1));
    let mut magic = [0u8; 4];
    let elf = file.read_exact(&mut magic).is_ok() && magic == *b"\x7fELF";
    let other = (there.dev(), there.ino()) != (running.dev(), running.ino());
    (other && there.is_file() && there.permissions().mode() & 0o111 != 0 && settled && elf)
        .then_some(path)
}

/// Replays the outbox; a line when it could not finish.
fn replay(paths: &Paths, settings: &Settings, stop: &AtomicBool) -> Option<String> {
    let auth = match settings.auth(paths) {
        Ok(auth) => auth,
        Err(e) => return Some(e.to_string()),
    };
    let client = match Client::new(&auth) {
        Ok(c) => c,
        Err(e) => return Some(e.to_string()),
    };
    let budget = Budget::new(Duration::from_secs(3600), REQUEST_TIMEOUT);
    let replayed = crate::outbox::replay(&paths.state_dir, LOCK_WAIT, |header, body| {
        if stop.load(Ordering::SeqCst) {
            return crate::outbox::Delivery::NotNow("stopping".into());
        }
        client.deliver(header, body, budget.next())
    });
    match replayed {
        Ok(r) => r.stopped.filter(|why| why != "stopping"),
        Err(e) => Some(e.to_string()),
    }
}
