//! The outbox's files, and what a replay does with each kind of answer.
//! The answers are central's documented ones, fed in directly: these tests
//! are about the outbox's decisions, not about HTTP (the end-to-end tests in
//! `tests/` run the real `kith` against the real `kith-central`).

use super::*;
use std::os::unix::fs::PermissionsExt;

use kith_proto::{AgentRuntime, IngestStatus, RunLinks};

use crate::capture::Capture;
use crate::config::Paths;
use crate::discover::Source;

struct Device {
    _tmp: tempfile::TempDir,
    paths: Paths,
    capture: Capture,
    a: Source,
    b: Source,
}

/// Two transcripts: `a` captured in two deltas, `b` in one.
fn device() -> anyhow::Result<Device> {
    let tmp = tempfile::tempdir()?;
    let paths = Paths::under(tmp.path());
    let capture = Capture::new(&paths, Duration::from_secs(5));
    let dir = paths.claude_dir.join("projects/-p");
    fs::create_dir_all(&dir)?;
    let a = Source {
        runtime: AgentRuntime::ClaudeCode,
        path: dir.join("a.jsonl"),
    };
    let b = Source {
        runtime: AgentRuntime::ClaudeCode,
        path: dir.join("b.jsonl"),
    };
    fs::write(&a.path, "{\"n\":1}\n")?;
    capture.file(&a)?;
    fs::write(&b.path, "{\"n\":2}\n")?;
    capture.file(&b)?;
    fs::write(&a.path, "{\"n\":1}\n{\"n\":3}\n")?;
    capture.file(&a)?;
    Ok(Device {
        _tmp: tmp,
        paths,
        capture,
        a,
        b,
    })
}

fn receipt(header: &Header) -> Delivery {
    Delivery::Accepted(IngestResponse {
        run_id: header.run_id.clone(),
        status: IngestStatus::Accepted,
        jsonl_bytes: header.to_offset - header.from_offset,
        jsonl_sha256: String::new(),
        chain_sha256: header.chain_sha256.clone(),
        _links: RunLinks::for_run(&header.run_id),
    })
}

fn refused(status: u16, code: &str) -> Delivery {
    Delivery::Refused {
        status,
        code: code.into(),
        message: "no".into(),
    }
}

impl Device {
    fn replay(
        &self,
        answer: impl Fn(&Header) -> Delivery,
    ) -> anyhow::Result<(Replayed, Vec<PathBuf>)> {
        let mut asked = Vec::new();
        let done = replay(&self.paths.state_dir, Duration::from_secs(5), |h, body| {
            asked.push(h.file.clone());
            assert!(!body.is_empty());
            answer(h)
        })?;
        Ok((done, asked))
    }

    /// The request of the oldest entry waiting in the outbox.
    fn oldest_request(&self) -> anyhow::Result<IngestRequest> {
        let outbox = self.capture.outbox();
        let oldest = outbox.entries().into_iter().next();
        Ok(outbox.request(&oldest.ok_or_else(|| anyhow::anyhow!("empty outbox"))?)?)
    }

    fn cursor(&self, s: &Source) -> anyhow::Result<crate::cursor::Cursor> {
        self.capture
            .cursor(&s.path)?
            .ok_or_else(|| anyhow::anyhow!("no cursor"))
    }
}

#[test]
fn entries_are_private_sorted_oldest_first_and_survive_a_restart() -> anyhow::Result<()> {
    let d = device()?;
    let entries = d.capture.outbox().entries();
    assert_eq!(entries.len(), 3);
    for e in &entries {
        assert_eq!(fs::metadata(e)?.permissions().mode() & 0o777, 0o600);
    }
    // A new process sees the same entries in the same order.
    let again = Outbox::new(&d.paths.state_dir);
    let files: Vec<PathBuf> = again
        .entries()
        .iter()
        .map(|e| again.read(e).map(|(h, _)| h.file))
        .collect::<Result<_>>()?;
    assert_eq!(
        files,
        vec![d.a.path.clone(), d.b.path.clone(), d.a.path.clone()]
    );
    let first = again.request(&again.entries()[0])?;
    assert_eq!(first.jsonl, "{\"n\":1}\n");
    assert_eq!(first.prev_sha256, None);
    Ok(())
}

#[test]
fn accepted_deltas_leave_the_outbox_and_advance_the_cursor() -> anyhow::Result<()> {
    let d = device()?;
    let (done, asked) = d.replay(receipt)?;
    assert_eq!(done.accepted, 3);
    assert_eq!(
        asked,
        vec![d.a.path.clone(), d.b.path.clone(), d.a.path.clone()]
    );
    assert!(d.capture.outbox().is_empty());
    let a = d.cursor(&d.a)?;
    assert_eq!(a.accepted, a.spooled);
    assert_eq!(a.accepted.offset, 16);
    assert_eq!(d.capture.outbox().last_error(), None);
    Ok(())
}

#[test]
fn central_away_stops_the_replay_and_keeps_everything_for_later() -> anyhow::Result<()> {
    let d = device()?;
    let (done, asked) = d.replay(|_| Delivery::NotNow("central is unreachable".into()))?;
    assert_eq!((done.accepted, asked.len()), (0, 1), "stops at the first");
    assert_eq!(d.capture.outbox().len(), 3);
    assert_eq!(d.cursor(&d.a)?.accepted.offset, 0);
    assert_eq!(
        d.capture.outbox().last_error().as_deref(),
        Some("central is unreachable")
    );
    // Later (another process), central is back: same order, all delivered.
    let (done, asked) = d.replay(receipt)?;
    assert_eq!(done.accepted, 3);
    assert_eq!(asked[0], d.a.path);
    assert_eq!(d.capture.outbox().last_error(), None);
    Ok(())
}

#[test]
fn a_delta_central_fails_on_holds_back_only_its_own_transcript() -> anyhow::Result<()> {
    let d = device()?;
    let a_path = d.a.path.clone();
    let failing = |h: &Header| {
        if h.file == a_path {
            Delivery::Failed("central answered 500 internal: disk".into())
        } else {
            receipt(h)
        }
    };
    let (done, asked) = d.replay(failing)?;
    assert_eq!(
        asked,
        vec![d.a.path.clone(), d.b.path.clone()],
        "b is delivered; a's second delta is not sent after its first failed"
    );
    assert_eq!((done.accepted, done.rejected), (1, 0));
    assert!(done.stopped.is_some_and(|why| why.contains("500")));
    assert_eq!(d.capture.outbox().len(), 2, "a's two deltas wait, in order");
    assert_eq!(d.cursor(&d.a)?.accepted.offset, 0);
    assert_eq!(d.cursor(&d.b)?.accepted.offset, 8);
    assert!(
        d.capture.outbox().last_error().is_some(),
        "a's failure shows"
    );
    // Central recovers: a's deltas follow, oldest first.
    let (done, asked) = d.replay(receipt)?;
    assert_eq!((done.accepted, asked), (2, vec![d.a.path.clone(); 2]));
    assert_eq!(d.cursor(&d.a)?.accepted.offset, 16);
    Ok(())
}

/// Regression: a subagent whose parent's delta was held back was refused
/// (`unknown_parent`), set aside and captured again from byte 0 at every
/// replay while the parent kept failing.
#[test]
fn a_subagent_of_a_held_transcript_waits_with_it() -> anyhow::Result<()> {
    let d = device()?;
    let a_path = d.a.path.clone();
    let (done, asked) = d.replay(|h| {
        if h.file == a_path {
            Delivery::Failed("central answered 500 internal: disk".into())
        } else {
            refused(400, "unknown_parent")
        }
    })?;
    assert_eq!(asked, vec![d.a.path.clone(), d.b.path.clone()]);
    assert_eq!((done.accepted, done.rejected), (0, 0));
    assert_eq!(d.capture.outbox().len(), 3, "nothing set aside");
    assert_eq!(d.capture.outbox().rejected(), 0);
    assert!(d.cursor(&d.b)?.restart.is_none(), "b is not captured again");
    let (done, _) = d.replay(receipt)?;
    assert_eq!(done.accepted, 3);
    Ok(())
}

#[test]
fn a_central_that_fails_on_every_transcript_stops_the_replay() -> anyhow::Result<()> {
    let d = device()?;
    let dir = d.paths.claude_dir.join("projects/-p");
    for name in ["c", "e", "f"] {
        let source = Source {
            runtime: AgentRuntime::ClaudeCode,
            path: dir.join(format!("{name}.jsonl")),
        };
        fs::write(&source.path, "{\"n\":9}\n")?;
        d.capture.file(&source)?;
    }
    let (done, asked) = d.replay(|_| Delivery::Failed("central answered 500".into()))?;
    assert_eq!(
        asked.len(),
        MAX_FAILED_IN_A_ROW,
        "three transcripts failed one after another: the rest is not asked"
    );
    assert_eq!((done.accepted, d.capture.outbox().len()), (0, 6));
    Ok(())
}

#[test]
fn a_refused_token_stops_the_replay() -> anyhow::Result<()> {
    let d = device()?;
    let (done, _) = d.replay(|_| Delivery::Unauthorized("token refused".into()))?;
    assert!(done.token_refused);
    assert_eq!(d.capture.outbox().len(), 3);
    Ok(())
}

#[test]
fn a_conflict_sets_the_chain_aside_and_recaptures_the_file_from_zero() -> anyhow::Result<()> {
    let d = device()?;
    let a_path = d.a.path.clone();
    let (done, asked) = d.replay(|h| {
        if h.file == a_path {
            refused(409, "chain_mismatch")
        } else {
            receipt(h)
        }
    })?;
    assert_eq!((done.accepted, done.rejected), (1, 2));
    assert_eq!(
        asked,
        vec![d.a.path.clone(), d.b.path.clone()],
        "a's second delta is not sent"
    );
    assert!(d.capture.outbox().is_empty());
    assert_eq!(d.capture.outbox().rejected(), 2);
    let reasons: Vec<String> = fs::read_dir(d.paths.state_dir.join("rejected"))?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x == "reason"))
        .filter_map(|e| fs::read_to_string(e.path()).ok())
        .collect();
    assert!(
        reasons.iter().any(|r| r.contains("chain_mismatch")),
        "{reasons:?}"
    );
    let a = d.cursor(&d.a)?;
    assert!(a.restart.is_some() && a.last_error.is_some());

    // The next capture starts a new chain with the whole file.
    d.capture.file(&d.a)?;
    let a = d.cursor(&d.a)?;
    assert_eq!(
        (a.epoch, a.spooled.offset, a.restart.clone()),
        (1, 16, None)
    );
    let entries = d.capture.outbox().entries();
    let again = d.capture.outbox().request(&entries[0])?;
    assert_eq!(
        (again.from_offset, again.jsonl.as_str()),
        (0, "{\"n\":1}\n{\"n\":3}\n")
    );
    assert_eq!(again.source_identity, a.source_identity());
    Ok(())
}

#[test]
fn bytes_central_can_never_take_park_the_file_until_it_changes() -> anyhow::Result<()> {
    let d = device()?;
    let b_path = d.b.path.clone();
    d.replay(|h| {
        if h.file == b_path {
            refused(413, "payload_too_large")
        } else {
            receipt(h)
        }
    })?;
    assert!(d.cursor(&d.b)?.parked.is_some());
    fs::write(&d.b.path, "{\"n\":2}\n{\"n\":4}\n")?;
    assert_eq!(d.capture.file(&d.b)?.deltas, 0, "parked: appends wait");
    // Replaced by a new file: captured again.
    let tmp = d.b.path.with_extension("new");
    fs::write(&tmp, "{\"n\":5}\n")?;
    fs::rename(&tmp, &d.b.path)?;
    assert_eq!(d.capture.file(&d.b)?.deltas, 1);
    Ok(())
}

#[test]
fn a_receipt_with_another_chain_restarts_the_source() -> anyhow::Result<()> {
    let d = device()?;
    d.replay(|h| {
        let mut other = h.clone();
        other.chain_sha256 = "0".repeat(64);
        receipt(&other)
    })?;
    assert!(d.cursor(&d.a)?.restart.is_some());
    assert_eq!(d.cursor(&d.a)?.accepted.offset, 0);
    Ok(())
}

#[test]
fn one_process_replays_at_a_time() -> anyhow::Result<()> {
    let d = device()?;
    let held = crate::config::Lock::sending(&d.paths.state_dir, Duration::ZERO)?;
    let (done, asked) = d.replay(receipt)?;
    assert!(done.busy && asked.is_empty());
    drop(held);
    let (done, _) = d.replay(receipt)?;
    assert_eq!((done.busy, done.accepted), (false, 3));
    Ok(())
}

#[test]
fn a_torn_entry_is_set_aside_and_its_bytes_are_captured_again() -> anyhow::Result<()> {
    let d = device()?;
    // A crash left a's second delta short (entries are not fsynced).
    let entries = d.capture.outbox().entries();
    let bytes = fs::read(&entries[2])?;
    fs::write(&entries[2], &bytes[..bytes.len() - 3])?;
    let (done, asked) = d.replay(receipt)?;
    assert_eq!((done.accepted, done.rejected), (2, 1));
    assert_eq!(asked, vec![d.a.path.clone(), d.b.path.clone()]);
    assert_eq!(d.cursor(&d.a)?.accepted.offset, 8);
    // The next capture sends those bytes again, on the same chain.
    d.capture.file(&d.a)?;
    let again = d.oldest_request()?;
    assert_eq!(
        (again.from_offset, again.jsonl.as_str()),
        (8, "{\"n\":3}\n")
    );
    let (done, _) = d.replay(receipt)?;
    assert_eq!(done.accepted, 1);
    let a = d.cursor(&d.a)?;
    assert_eq!((a.epoch, a.accepted.offset), (0, 16));
    Ok(())
}

#[test]
fn an_empty_entry_sets_aside_what_followed_it_and_the_chain_resumes_where_it_began(
) -> anyhow::Result<()> {
    let d = device()?;
    // A crash left a's first delta empty but its second whole (writeback
    // order is not write order).
    let entries = d.capture.outbox().entries();
    fs::write(&entries[0], b"")?;
    let (done, asked) = d.replay(receipt)?;
    assert_eq!(
        asked,
        vec![d.b.path.clone()],
        "a's second delta is not sent"
    );
    assert_eq!((done.accepted, done.rejected), (1, 2));
    assert!(d.capture.outbox().is_empty());
    // The next capture sends all of a again, on the same chain: nothing lost,
    // nothing twice.
    d.capture.file(&d.a)?;
    let again = d.oldest_request()?;
    assert_eq!(
        (
            again.from_offset,
            again.prev_sha256.as_deref(),
            again.jsonl.as_str()
        ),
        (0, None, "{\"n\":1}\n{\"n\":3}\n")
    );
    let (done, _) = d.replay(receipt)?;
    assert_eq!(done.accepted, 1);
    let a = d.cursor(&d.a)?;
    assert_eq!((a.epoch, a.accepted.offset), (0, 16));
    Ok(())
}

/// The clock stepped back (an NTP correction) while deltas waited: a new
/// entry still sorts after them, so the newest of a chain by name is the
/// one furthest along the file.
#[test]
fn a_clock_stepped_back_keeps_the_entries_in_file_order() -> anyhow::Result<()> {
    let d = device()?;
    let outbox = d.capture.outbox();
    // Spooled by a kith whose clock was a year ahead.
    let ahead = 365 * 86_400 * 1_000_000_000u64;
    for entry in outbox.entries() {
        let name = entry
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        let (stamp, rest) = name.split_once('-').unwrap_or_default();
        let later = stamp.parse::<u64>()? + ahead;
        fs::rename(&entry, entry.with_file_name(format!("{later:020}-{rest}")))?;
    }
    // The next hook, a process of its own, spools with the clock as it is.
    fs::write(&d.a.path, "{\"n\":1}\n{\"n\":3}\n{\"n\":4}\n")?;
    Capture::new(&d.paths, Duration::from_secs(5)).file(&d.a)?;
    let files: Vec<(PathBuf, u64)> = outbox
        .entries()
        .iter()
        .map(|e| outbox.read(e).map(|(h, _)| (h.file, h.to_offset)))
        .collect::<Result<_>>()?;
    assert_eq!(
        files,
        vec![
            (d.a.path.clone(), 8),
            (d.b.path.clone(), 8),
            (d.a.path.clone(), 16),
            (d.a.path.clone(), 24)
        ],
        "the new delta last, sent after the ones before it"
    );
    let newest = outbox.newest_of(&d.cursor(&d.a)?).map(|h| h.to_offset);
    assert_eq!(newest, Some(24));
    Ok(())
}

/// A long-running kith (`kith watch`) that spooled before another process
/// spooled the next delta of a transcript with a clock ahead of its own (or
/// before its own clock stepped back) still spools that transcript's next
/// delta after it: a chain is sent in file order.
#[test]
fn a_long_running_kith_spools_after_a_newer_entry_of_the_same_transcript() -> anyhow::Result<()> {
    let d = device()?;
    let outbox = d.capture.outbox();
    // A hook, a process of its own whose clock is a year ahead, spools a's
    // third delta.
    fs::write(&d.a.path, "{\"n\":1}\n{\"n\":3}\n{\"n\":4}\n")?;
    Capture::new(&d.paths, Duration::from_secs(5)).file(&d.a)?;
    let ahead = 365 * 86_400 * 1_000_000_000u64;
    let newest = outbox
        .entries()
        .pop()
        .ok_or_else(|| anyhow::anyhow!("no entry"))?;
    let name = newest
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or_default();
    let (stamp, rest) = name.split_once('-').unwrap_or_default();
    let later = stamp.parse::<u64>()? + ahead;
    fs::rename(
        &newest,
        newest.with_file_name(format!("{later:020}-{rest}")),
    )?;
    // The watch, whose outbox spooled before, spools the fourth.
    fs::write(&d.a.path, "{\"n\":1}\n{\"n\":3}\n{\"n\":4}\n{\"n\":5}\n")?;
    d.capture.file(&d.a)?;
    let of_a: Vec<u64> = outbox
        .entries()
        .iter()
        .map(|e| outbox.read(e).map(|(h, _)| (h.file, h.to_offset)))
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .filter(|(file, _)| *file == d.a.path)
        .map(|(_, to)| to)
        .collect();
    assert_eq!(of_a, [8, 16, 24, 32], "a's deltas in file order");
    Ok(())
}

/// A temp file a hook killed mid-write left in the outbox (a delta's bytes)
/// is removed at the next replay once it is old; one being written now is
/// not.
#[test]
fn a_replay_removes_the_temp_files_of_cut_short_writes() -> anyhow::Result<()> {
    let d = device()?;
    let dir = d.paths.state_dir.join("outbox");
    let old = dir.join(".tmp-4242-0123456789abcdef");
    let fresh = dir.join(".tmp-4243-0123456789abcdef");
    for path in [&old, &fresh] {
        fs::write(path, "{\"jsonl\":\"half a delta")?;
    }
    fs::File::options()
        .write(true)
        .open(&old)?
        .set_modified(std::time::SystemTime::now() - Duration::from_secs(3600))?;
    d.replay(receipt)?;
    assert!(!old.exists(), "an hour-old temp file stays");
    assert!(fresh.exists(), "a write under way lost its temp file");
    assert!(d.capture.outbox().is_empty(), "the deltas were sent");
    Ok(())
}
