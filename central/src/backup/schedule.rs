//! Backups `serve` takes on its own (`[backup]` in the configuration):
//! one every `every`, one at a time on the blocking pool (ingest and search
//! go on meanwhile), each followed by keeping the newest `keep`. Every
//! backup, scheduled or by hand, is noted in the registry's `backups`
//! table: its last good snapshot, or why it failed.

use std::path::Path;
use std::time::{Duration, Instant};

use super::take::{take, Taken};
use crate::config::BackupConfig;
use crate::error::Result;
use crate::privacy::Operator;
use crate::registry::Registry;
use crate::state::AppState;

/// Takes a snapshot of `data_dir` into `dest` (then keeps the newest
/// `keep`) and notes in `registry` how it went.
pub(crate) fn take_noted(
    registry: &Registry,
    data_dir: &Path,
    dest: &Path,
    keep: Option<std::num::NonZeroUsize>,
    operator: &Operator,
) -> Result<Taken> {
    let taken = take(data_dir, dest, keep, operator);
    let name = dest_name(dest);
    let noted = match &taken {
        Ok(t) => registry
            .backup_taken(&name, &t.snapshot, &t.taken_at)
            .and_then(|()| match t.damage.len() {
                0 => Ok(()),
                n => registry.backup_failed(
                    &name,
                    &format!(
                        "snapshot {} lacks {n} damaged files of the data directory",
                        t.snapshot
                    ),
                    &t.taken_at,
                ),
            }),
        Err(e) => registry.backup_failed(&name, &e.to_string(), &kith_shared::timestamp::now()),
    };
    if let Err(e) = noted {
        tracing::warn!(error = %e, dest = %name, "cannot note the backup in the registry");
    }
    taken
}

/// How the registry names a backup folder: its absolute path.
pub(crate) fn dest_name(dest: &Path) -> String {
    std::fs::canonicalize(dest)
        .or_else(|_| std::path::absolute(dest))
        .unwrap_or_else(|_| dest.to_owned())
        .display()
        .to_string()
}

/// Takes a backup every `config.every`, the first when the last good one
/// noted is that old (at once if none is), until the runtime ends. A
/// failure is logged and noted, and the next is taken as scheduled.
pub(crate) async fn run(state: AppState, config: BackupConfig, operator: Operator) {
    let operator = std::sync::Arc::new(operator);
    let every = config.every.0;
    let mut wait = first_wait(&state, &config).unwrap_or(Duration::ZERO);
    loop {
        tokio::time::sleep(wait).await;
        let started = Instant::now();
        let (s, c, operator) = (state.clone(), config.clone(), operator.clone());
        // On a thread of its own at the lowest priority (niceness is per
        // thread on Linux): searches and ingest come before the copy.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let spawned = std::thread::Builder::new()
            .name("kith-backup".into())
            .spawn(move || {
                let _ = rustix::process::nice(19);
                let _ = tx.send(take_noted(
                    s.registry(),
                    &s.config().data_dir,
                    &c.dest,
                    Some(c.keep),
                    &operator,
                ));
            });
        let taken = match spawned {
            Ok(_) => rx
                .await
                .map_err(|_| "the backup thread ended without an answer".to_owned()),
            Err(e) => Err(format!("cannot start the backup thread: {e}")),
        };
        match taken {
            Ok(Ok(t)) => tracing::info!(
                dest = %t.dest.display(),
                snapshot = %t.snapshot,
                n_runs = t.n_runs,
                blobs_copied = t.blobs.n_copied,
                snapshots_removed = t.pruned.as_ref().map_or(0, |(_, p)| p.snapshots.len()),
                n_damaged = t.damage.len(),
                "backup taken"
            ),
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                dest = %config.dest.display(),
                "scheduled backup failed; the next is taken as scheduled"
            ),
            Err(e) => tracing::warn!(error = %e, "scheduled backup failed"),
        }
        wait = every.saturating_sub(started.elapsed());
    }
}

/// How long until the next backup is due: `every` after the last good one.
fn first_wait(state: &AppState, config: &BackupConfig) -> Option<Duration> {
    let name = dest_name(&config.dest);
    let rows = state.registry().backups().ok()?;
    let last = rows
        .iter()
        .find(|r| r.dest == name)?
        .last_good_at
        .as_deref()?;
    let last = kith_shared::timestamp::parse(last)?;
    let age = time::OffsetDateTime::now_utc() - last;
    let age = Duration::try_from(age).unwrap_or(Duration::ZERO);
    Some(config.every.0.saturating_sub(age))
}
