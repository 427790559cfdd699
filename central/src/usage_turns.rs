//! Who counts the stored deltas' usage, and when (`usage::settle`): one
//! count at a time; a report, which someone waits for, before the indexing
//! worker's; and the worker's writes in moments when no delta is being
//! stored (`ingest`), so that a delta does not wait for the registry's one
//! writer behind facts derived from the deltas before it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use crate::sync::lock;

/// Who counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counting {
    /// A report, which someone waits for: it writes at once.
    ForReport,
    /// The indexing worker, after its batches: it gives way to deltas.
    InBackground,
}

#[derive(Default)]
pub(crate) struct UsageTurns {
    /// Held by whoever counts.
    counting: Mutex<()>,
    /// Reports waiting for their turn or counting.
    reports: AtomicUsize,
    /// Deltas being stored now, and a signal when none is.
    storing: Mutex<usize>,
    none_storing: Condvar,
}

impl UsageTurns {
    /// Notes a delta being stored, from its first byte read until the
    /// guard drops.
    pub(crate) fn storing(self: &Arc<Self>) -> Storing {
        *lock(&self.storing) += 1;
        Storing(Arc::clone(self))
    }

    /// Waits for a turn to count, which lasts until the guard drops; a
    /// report's ends the background's giving way at once.
    pub(crate) fn count(&self, counting: Counting) -> Turn<'_> {
        let report = (counting == Counting::ForReport).then(|| {
            self.reports.fetch_add(1, Ordering::SeqCst);
            // Taken and let go: a background count that found no report is
            // waiting now, and hears this.
            drop(lock(&self.storing));
            self.none_storing.notify_all();
            Asking(&self.reports)
        });
        Turn {
            _one_at_a_time: lock(&self.counting),
            report,
            turns: self,
        }
    }
}

/// A delta being stored ([`UsageTurns::storing`]).
pub(crate) struct Storing(Arc<UsageTurns>);

impl Drop for Storing {
    fn drop(&mut self) {
        let mut n = lock(&self.0.storing);
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.0.none_storing.notify_all();
        }
    }
}

/// A report waiting for its turn or counting.
struct Asking<'a>(&'a AtomicUsize);

impl Drop for Asking<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A turn to count ([`UsageTurns::count`]).
pub(crate) struct Turn<'a> {
    _one_at_a_time: MutexGuard<'a, ()>,
    /// `Some` for a report's turn: counted among the reports waiting or
    /// counting until the turn ends.
    report: Option<Asking<'a>>,
    turns: &'a UsageTurns,
}

impl Turn<'_> {
    /// Before each write of facts: in the background, waits until no delta
    /// is being stored, for at most `at_most` (a steady stream of deltas)
    /// and not while a report waits.
    pub(crate) fn before_write(&self, at_most: Duration) {
        if self.report.is_some() {
            return;
        }
        let turns = self.turns;
        let give_way = |n: &mut usize| *n > 0 && turns.reports.load(Ordering::SeqCst) == 0;
        drop(
            turns
                .none_storing
                .wait_timeout_while(lock(&turns.storing), at_most, give_way)
                .unwrap_or_else(|p| p.into_inner()),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::thread;

    use super::*;

    /// Long enough that a wait that ran into it would fail the test.
    const FOR_EVER: Duration = Duration::from_secs(3600);
    const SOON: Duration = Duration::from_secs(10);

    #[test]
    fn the_background_writes_once_no_delta_is_being_stored() {
        let turns = Arc::new(UsageTurns::default());
        let (first, second) = (turns.storing(), turns.storing());
        let (wrote, written) = mpsc::channel();
        let background = {
            let turns = Arc::clone(&turns);
            thread::spawn(move || {
                turns.count(Counting::InBackground).before_write(FOR_EVER);
                wrote.send(()).expect("the test listens");
            })
        };
        drop(first);
        assert!(
            written.recv_timeout(Duration::from_millis(300)).is_err(),
            "it wrote while a delta was being stored"
        );
        drop(second);
        written.recv_timeout(SOON).expect("it writes once none is");
        background.join().expect("the thread ends well");
        // With none being stored, at once.
        turns.count(Counting::InBackground).before_write(FOR_EVER);
    }

    #[test]
    fn a_report_writes_at_once_and_ends_the_backgrounds_waiting() {
        let turns = Arc::new(UsageTurns::default());
        let storing = turns.storing();
        let (in_turn, counting) = mpsc::channel();
        let (wrote, written) = mpsc::channel();
        let background = {
            let turns = Arc::clone(&turns);
            thread::spawn(move || {
                let turn = turns.count(Counting::InBackground);
                in_turn.send(()).expect("the test listens");
                turn.before_write(FOR_EVER);
                wrote.send(()).expect("the test listens");
            })
        };
        counting.recv_timeout(SOON).expect("the background counts");
        let (reported, report_counted) = mpsc::channel();
        let report = {
            let turns = Arc::clone(&turns);
            thread::spawn(move || {
                let turn = turns.count(Counting::ForReport);
                turn.before_write(FOR_EVER);
                reported.send(()).expect("the test listens");
            })
        };
        // The delta is still being stored: the report ended the waiting,
        // and wrote without waiting itself.
        written
            .recv_timeout(SOON)
            .expect("the background gave way to a report");
        report_counted.recv_timeout(SOON).expect("the report wrote");
        background.join().expect("the thread ends well");
        report.join().expect("the thread ends well");
        drop(storing);
    }
}
