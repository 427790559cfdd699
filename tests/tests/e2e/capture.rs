//! Capture end to end: the real `kith` binary on real transcripts against a
//! real `kith-central`, through outages, restarts and rewritten files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use kith_shared::fixtures::{self, Fixture};
use kith_tests::{
    bin, chain_of, json_response, run_with_input, stop_payload, Api, Background, Central, Home,
    StandIn,
};

/// The repository's transcripts these tests write (`kith_shared::fixtures`).
const SHORT: &str = "claude-code/-home-sam-src-tally/3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90.jsonl";
const WORK: &str = "claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl";
const AGENT: &str = "claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-a6c41f0.jsonl";
const COMPACT_AGENT: &str = "claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-acompact-7d20b9.jsonl";
const CODEX: &str =
    "codex/2026/05/11/rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl";
const PI: &str = "pi/--home-sam-src-notes-site--/2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl";

/// A family machine: a HOME with agent folders, and kith's own dirs.
struct Device {
    home: Home,
}

impl Device {
    fn new() -> Result<Self> {
        Ok(Self { home: Home::new()? })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.path(rel)
    }

    fn kith(&self, central: &str, token: &str, args: &[&str], stdin: &[u8]) -> Result<Output> {
        run_with_input(self.home.kith_at(central, token, args), stdin)
    }

    /// Lays out every fixture of both sets as the agents would have written
    /// them: (fixture, where it went).
    fn with_all_fixtures(&self) -> Result<Vec<(PathBuf, PathBuf)>> {
        let mut placed = Vec::new();
        for fixture in fixtures::all() {
            let dest = self.place(&fixture)?;
            std::fs::copy(&fixture.path, &dest)?;
            placed.push((fixture.path, dest));
        }
        Ok(placed)
    }

    /// Where the agent would have written `fixture`; its folder is created.
    fn place(&self, fixture: &Fixture) -> Result<PathBuf> {
        let folder = fixtures::sessions_folder(fixture.runtime);
        let dest = self.path(folder).join(&fixture.layout);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        Ok(dest)
    }

    /// `kith watch` for this device, SIGKILLed (a crash) when dropped.
    fn watch(&self, central: &str, token: &str) -> Result<Background> {
        Background::spawn(self.home.kith_at(central, token, &["watch"]))
    }
}

/// Equal except where redaction masked a secret with `*`.
fn same_but_masked(got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || *g == b'*')
}

/// What central does not hold yet: (file, its chains' lengths, the length
/// wanted) for each file whose bytes are not one chain equal to `want`.
type Missing = Vec<(PathBuf, Vec<usize>, usize)>;

/// Polls central until it holds each file's `want` as one gapless chain
/// (redaction masks aside) or `within` has passed; what is still missing.
fn wait_for_chains(api: &Api, want: &[(&Path, &[u8])], within: Duration) -> Result<Missing> {
    let deadline = Instant::now() + within;
    loop {
        let chains = api.chains()?;
        let mut missing = Vec::new();
        for (file, want) in want {
            let got = chain_of(&chains, file);
            if got.len() != 1 || !same_but_masked(got[0], want) {
                let lens = got.iter().map(|g| g.len()).collect();
                missing.push((file.to_path_buf(), lens, want.len()));
            }
        }
        if missing.is_empty() || Instant::now() > deadline {
            return Ok(missing);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn every_fixture_is_captured_byte_identical() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("me.test", "laptop")?;
    let api = central.client(&token);
    let device = Device::new()?;
    let placed = device.with_all_fixtures()?;
    let out = device.kith(&central.url, &token, &["backfill"], b"")?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let chains = api.chains()?;
    let mut exact = 0;
    for (src, dest) in &placed {
        let want = std::fs::read(src)?;
        let complete = &want[..want.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
        let got = chain_of(&chains, dest);
        assert_eq!(got.len(), 1, "{}: one chain", dest.display());
        assert!(
            same_but_masked(got[0], complete),
            "{}: bytes differ",
            src.display()
        );
        exact += usize::from(got[0].as_slice() == complete);
    }
    assert!(
        exact + 1 >= placed.len(),
        "no false positives in the fixtures: {exact}/{} exact",
        placed.len()
    );

    // A second backfill sends nothing new.
    let again = device.kith(&central.url, &token, &["backfill"], b"")?;
    assert!(String::from_utf8_lossy(&again.stdout).contains("captured 0 new bytes"));
    // Nothing is left waiting.
    let status = device.kith(&central.url, &token, &["status"], b"")?;
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("outbox: 0 deltas waiting"), "{status}");
    Ok(())
}

#[test]
fn appends_through_outages_and_rewrites_lose_nothing_and_store_nothing_twice() -> Result<()> {
    let Outage {
        _tmp,
        data,
        mut central,
        token,
        device,
        source,
        file,
    } = outage(1)?;
    let cut = |frac: usize| source[..source.len() * frac / 10].to_vec();
    let payload =
        serde_json::json!({"session_id": "s", "transcript_path": file, "hook_event_name": "Stop"})
            .to_string();

    // Part 1 with central up, ending mid-line: the partial line waits.
    std::fs::write(&file, cut(3))?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0));

    // Central goes down; the agent keeps writing; hooks spool and exit 0.
    central.kill()?;
    std::fs::write(&file, cut(6))?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0), "hooks never fail the agent");
    let status = device.kith(&central.url, &token, &["status"], b"")?;
    assert!(String::from_utf8_lossy(&status.stdout).contains("outbox: 1 deltas waiting"));

    // Central is back; the rest arrives; the next call replays oldest first.
    let central = Central::start_on(&data, &[])?;
    std::fs::write(&file, &source)?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0));
    let api = central.client(&token);
    let chains = api.chains()?;
    let got = chain_of(&chains, &file);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].as_slice() == source.as_slice(),
        "every byte exactly once ({} vs {} bytes)",
        got[0].len(),
        source.len()
    );

    // The file is replaced by another transcript at the same path: a new
    // chain from byte 0, the old one kept.
    let other = fixtures::read(SHORT);
    std::fs::remove_file(&file)?;
    std::fs::write(&file, &other)?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0));
    let chains = api.chains()?;
    let mut got: Vec<Vec<u8>> = chain_of(&chains, &file).into_iter().cloned().collect();
    got.sort_by_key(Vec::len);
    assert!(
        got == vec![other.clone(), source.clone()],
        "two chains: the old file and the new one"
    );

    // Truncated to zero and regrown with other content: also a new chain.
    std::fs::write(&file, b"")?;
    device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    let regrown = cut(2);
    let regrown = &regrown[..regrown
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)];
    std::fs::write(&file, regrown)?;
    device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    let chains = api.chains()?;
    assert_eq!(chain_of(&chains, &file).len(), 3);
    Ok(())
}

#[test]
fn hook_always_exits_zero() -> Result<()> {
    let device = Device::new()?;
    let cases: &[&[u8]] = &[
        b"",
        b"not json",
        b"{\"transcript_path\": \"/nonexistent/x.jsonl\"}",
        b"{\"transcript_path\": 42}",
        &[0xff, 0xfe, 0x00],
    ];
    for stdin in cases {
        let out = device.kith("http://127.0.0.1:9", "kith_bogus", &["hook"], stdin)?;
        assert_eq!(out.status.code(), Some(0), "{stdin:?}");
    }
    let out = device.kith(
        "http://127.0.0.1:9",
        "kith_bogus",
        &[
            "hook",
            "{\"type\":\"agent-turn-complete\",\"thread-id\":\"zz\"}",
        ],
        b"",
    )?;
    assert_eq!(out.status.code(), Some(0));

    // Folders given before `hook` and a flag this kith does not know: still
    // exit 0, and the Stop payload on stdin is captured into that state dir
    // (by the first; the others find nothing new).
    let file = device.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000005.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    std::fs::copy(fixtures::path(SHORT), &file)?;
    let payload = stop_payload(&file);
    let state = device.path("elsewhere");
    let state = state.to_str().unwrap_or_default();
    for args in [
        &["--state-dir", state, "hook", "--bogus"][..],
        &[
            "--state-dir",
            state,
            "--config-dir",
            state,
            "hook",
            "--bogus=1",
            "x",
        ],
        &["--bogus", "hook"],
    ] {
        let out = device.kith("http://127.0.0.1:9", "kith_bogus", args, payload.as_bytes())?;
        assert_eq!(out.status.code(), Some(0), "{args:?}");
    }
    let status = device.kith(
        "http://127.0.0.1:9",
        "kith_bogus",
        &["--state-dir", state, "status"],
        b"",
    )?;
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.contains("outbox: 1 deltas waiting"),
        "the hook used --state-dir: {status}"
    );
    Ok(())
}

/// A Claude Code `Stop` hook payload naming `file`.
/// Where the outage tests start: central on a data directory of its own,
/// me.test's token on a device, and the path of a Claude Code transcript
/// (`session` names it) to be written from the working session's bytes.
struct Outage {
    _tmp: tempfile::TempDir,
    data: PathBuf,
    central: Central,
    token: String,
    device: Device,
    source: Vec<u8>,
    file: PathBuf,
}

fn outage(session: u32) -> Result<Outage> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let central = Central::start_on(&data, &[])?;
    let token = central.register("me.test", "laptop")?;
    let device = Device::new()?;
    let source = fixtures::read(WORK);
    let file = device.path(&format!(
        ".claude/projects/-p/0b0e1d7a-0000-4000-8000-{session:012}.jsonl"
    ));
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    Ok(Outage {
        _tmp: tmp,
        data,
        central,
        token,
        device,
        source,
        file,
    })
}

/// The bytes `kith status` counts as accepted by central for `runtime`.
fn accepted_bytes(status: &str, runtime: &str) -> Option<u64> {
    let row: Vec<&str> = status
        .lines()
        .find(|l| l.split_whitespace().next() == Some(runtime))?
        .split_whitespace()
        .collect();
    row.get(3)?.parse().ok()
}

/// A central that answers every request with `status` and its error body.
fn central_answering(status: &str, code: &str, message: &str) -> Result<StandIn> {
    let response = json_response(
        status,
        &serde_json::json!({"error": {"code": code, "message": message}}),
    );
    StandIn::start(std::net::TcpListener::bind("127.0.0.1:0")?, move |_| {
        Some(response.clone())
    })
}

/// A central that takes the connection and never answers: the hook gives up
/// within its budget, exits 0, and the delta waits in the outbox until a
/// working central takes it.
#[test]
fn a_central_that_never_answers_leaves_the_delta_in_the_outbox() -> Result<()> {
    let device = Device::new()?;
    let source = fixtures::read(SHORT);
    let file = device.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000006.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    std::fs::write(&file, &source)?;

    let silent = StandIn::start(std::net::TcpListener::bind("127.0.0.1:0")?, |_| None)?;
    let out = device.kith(
        &silent.url,
        "kith_x",
        &["hook"],
        stop_payload(&file).as_bytes(),
    )?;
    assert_eq!(out.status.code(), Some(0), "hooks never fail the agent");
    assert!(silent.connections() > 0, "the hook did try central");
    let status = device.kith(&silent.url, "kith_x", &["status"], b"")?;
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("outbox: 1 deltas waiting"), "{status}");
    assert!(status.contains("no answer in time"), "says why: {status}");
    assert_eq!(accepted_bytes(&status, "claude-code"), Some(0), "{status}");
    drop(silent);

    let central = Central::start()?;
    let token = central.register("me.test", "laptop")?;
    let out = device.kith(&central.url, &token, &["backfill"], b"")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(
        stdout.contains("captured 0 new bytes") && stdout.contains("central accepted 1 deltas"),
        "the spooled delta is what arrives: {stdout}"
    );
    let chains = central.client(&token).chains()?;
    let got = chain_of(&chains, &file);
    assert_eq!(got.len(), 1);
    assert!(got[0] == &source, "central holds the file's bytes");
    Ok(())
}

/// A central that answers 500 to everything: the hook exits 0, the delta
/// stays in the outbox, the cursor stays where central's last 202 left it,
/// and once central works again every byte arrives once.
#[test]
fn a_central_answering_500_moves_no_cursor_and_loses_nothing() -> Result<()> {
    let Outage {
        _tmp,
        data,
        mut central,
        token,
        device,
        source,
        file,
    } = outage(7)?;
    let payload = stop_payload(&file);

    // The first part (ending mid-line) reaches central.
    let cut = source.len() / 3;
    let first = source[..cut]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1) as u64;
    std::fs::write(&file, &source[..cut])?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0));
    let status = device.kith(&central.url, &token, &["status"], b"")?;
    let status = String::from_utf8_lossy(&status.stdout);
    assert_eq!(
        accepted_bytes(&status, "claude-code"),
        Some(first),
        "{status}"
    );
    central.kill()?;

    // The rest meets a broken central, twice.
    let failing = central_answering("500 Internal Server Error", "internal", "disk on fire")?;
    std::fs::write(&file, &source)?;
    for _ in 0..2 {
        let out = device.kith(&failing.url, &token, &["hook"], payload.as_bytes())?;
        assert_eq!(out.status.code(), Some(0), "hooks never fail the agent");
    }
    assert!(failing.connections() >= 2, "both hooks tried central");
    let status = device.kith(&failing.url, &token, &["status"], b"")?;
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("outbox: 1 deltas waiting"), "{status}");
    assert!(
        status.contains("500") && status.contains("disk on fire"),
        "says what central answered: {status}"
    );
    assert_eq!(
        accepted_bytes(&status, "claude-code"),
        Some(first),
        "the cursor stays at central's last 202: {status}"
    );
    drop(failing);

    // Central works again: the next hook delivers what waited, once.
    let central = Central::start_on(&data, &[])?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0));
    let status = device.kith(&central.url, &token, &["status"], b"")?;
    let status = String::from_utf8_lossy(&status.stdout);
    assert!(status.contains("outbox: 0 deltas waiting"), "{status}");
    assert_eq!(
        accepted_bytes(&status, "claude-code"),
        Some(source.len() as u64),
        "{status}"
    );
    let chains = central.client(&token).chains()?;
    let got = chain_of(&chains, &file);
    assert_eq!(got.len(), 1, "one chain: the 500s broke nothing");
    assert!(got[0] == &source, "every byte exactly once");
    Ok(())
}

#[test]
fn family_cli_shares_a_run_and_the_owner_sees_who_read_it() -> Result<()> {
    let central = Central::start()?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let alice = Device::new()?;
    let bob = Device::new()?;
    let source = fixtures::read(SHORT);
    let file = alice.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000002.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    std::fs::write(&file, &source)?;
    let run = |d: &Device, token: &str, args: &[&str]| d.kith(&central.url, token, args, b"");
    assert!(run(&alice, &alice_token, &["backfill"])?.status.success());
    let tree: serde_json::Value =
        serde_json::from_slice(&run(&alice, &alice_token, &["tree", "--json"])?.stdout)?;
    let id = tree["conversations"][0]["run_ids"][0]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let denied = run(&bob, &bob_token, &["show", &id, "--raw"])?;
    assert_eq!(denied.status.code(), Some(1), "private by default");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("conversation_not_found"));

    let shared = run(
        &alice,
        &alice_token,
        &["share", "run", &id, "--with", "bob.test", "--expires", "7d"],
    )?;
    assert!(
        shared.status.success(),
        "{}",
        String::from_utf8_lossy(&shared.stderr)
    );
    let raw = run(&bob, &bob_token, &["show", &id, "--raw"])?;
    assert!(
        raw.stdout == source,
        "bob reads the exact bytes once shared"
    );
    central
        .client(&alice_token)
        .wait_indexed(&id, Duration::from_secs(30))?;
    let found = run(
        &bob,
        &bob_token,
        &["search", "importer", "--mode", "keyword", "--json"],
    )?;
    let found: serde_json::Value = serde_json::from_slice(&found.stdout)?;
    assert_eq!(found["hits"][0]["run_id"], id.as_str());
    let search = |extra: &[&str]| {
        let args = [
            &["search", "importer", "--mode", "keyword", "--json"],
            extra,
        ]
        .concat();
        run(&bob, &bob_token, &args)
    };
    let reranked = search(&["--half-life", "30", "--diversity", "0.5"])?;
    let reranked: serde_json::Value = serde_json::from_slice(&reranked.stdout)?;
    assert_eq!(reranked["hits"][0]["run_id"], id.as_str());
    let refused = search(&["--diversity", "2"])?;
    assert_eq!(refused.status.code(), Some(2), "a command line at fault");
    assert!(String::from_utf8_lossy(&refused.stderr).contains("invalid_diversity"));

    // The audit names the conversation by its title and id, a reading a
    // line: bob's one `show --raw` is one "read", his searches "found".
    let conversation = tree["conversations"][0]["id"].as_str().unwrap_or_default();
    let title = tree["conversations"][0]["title"]
        .as_str()
        .unwrap_or_default();
    assert!(!conversation.is_empty() && !title.is_empty(), "{tree:#}");
    // Lines cut a long title.
    let title: &str = &title.chars().take(40).collect::<String>();
    let audit = String::from_utf8(run(&alice, &alice_token, &["audit"])?.stdout)?;
    let lines: Vec<&str> = audit.lines().collect();
    let reads = lines.iter().filter(|l| l.contains(" read ")).count();
    assert_eq!(reads, 1, "one reading, one line: {audit}");
    assert!(lines.iter().any(|l| l.contains(" found ")), "{audit}");
    for line in &lines {
        assert!(
            line.contains("bob.test") && line.contains(&conversation[..9]),
            "{audit}"
        );
        assert!(line.contains(title) && !line.contains(&id), "{audit}");
    }

    // `share list` names what a grant covers; a grant is revoked by the
    // short id the list shows, or by its conversation.
    let list = String::from_utf8(run(&alice, &alice_token, &["share", "list"])?.stdout)?;
    assert!(list.contains(title) && !list.contains("run:"), "{list}");
    let grant = list
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(grant.starts_with('s') && grant.len() < 33, "{list}");
    let revoked = run(&alice, &alice_token, &["share", "revoke", &grant])?;
    let said = String::from_utf8_lossy(&revoked.stdout);
    assert!(revoked.status.success() && said.contains(title), "{said}");
    assert_eq!(
        run(&bob, &bob_token, &["show", &id])?.status.code(),
        Some(1),
        "revoked: gone at once"
    );
    let again = &[
        "share",
        "conversation",
        &conversation[..9],
        "--with",
        "bob.test",
    ];
    assert!(run(&alice, &alice_token, again)?.status.success());
    assert!(run(&bob, &bob_token, &["show", &id])?.status.success());
    let revoked = run(
        &alice,
        &alice_token,
        &["share", "revoke", &conversation[..9]],
    )?;
    let said = String::from_utf8_lossy(&revoked.stdout);
    assert!(said.contains(title) && said.contains("bob.test"), "{said}");
    assert_eq!(said.lines().count(), 1, "the one live grant: {said}");
    assert_eq!(
        run(&bob, &bob_token, &["show", &id])?.status.code(),
        Some(1)
    );
    Ok(())
}

/// The capture issue's "done when": a transcript of each agent is written
/// in pieces that end mid-line, while central is SIGKILLed and started again
/// on its data, and `kith watch` is SIGKILLed and started again, in turn.
/// Central ends up with every byte of each exactly once, in one chain.
#[test]
fn appends_through_central_and_watch_restarts_lose_and_duplicate_nothing() -> Result<()> {
    use std::io::Write;
    const PIECES: usize = 7;

    let tmp = tempfile::tempdir()?;
    let mut central = Central::start_on(&tmp.path().join("data"), &[])?;
    let token = central.register("me.test", "laptop")?;
    let api = central.client(&token);
    // A restarted central listens on the same address.
    let url = central.url.clone();
    let device = Device::new()?;
    let mut files = Vec::new();
    for rel in [WORK, CODEX, PI] {
        files.push((fixtures::read(rel), device.place(&fixtures::get(rel))?));
    }
    // Piece k ends at `end(src, k)`, mid-line except for the last.
    let end = |src: &[u8], k: usize| {
        let at = src.len() * k / PIECES;
        if k < PIECES && src[at - 1] == b'\n' {
            at + 1
        } else {
            at
        }
    };
    let append = |k: usize| -> Result<()> {
        for (src, dest) in &files {
            let from = if k == 1 { 0 } else { end(src, k - 1) };
            let mut file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(dest)?;
            file.write_all(&src[from..end(src, k)])?;
        }
        Ok(())
    };
    // Central holds every complete line of the first k pieces.
    let delivered = |k: usize| -> Result<()> {
        let want: Vec<(&Path, &[u8])> = files
            .iter()
            .map(|(src, dest)| {
                let upto = &src[..end(src, k)];
                let lines = upto.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                (dest.as_path(), &upto[..lines])
            })
            .collect();
        let missing = wait_for_chains(&api, &want, Duration::from_secs(30))?;
        assert!(
            missing.is_empty(),
            "after piece {k}: (file, chain lengths, length wanted) {missing:?}"
        );
        Ok(())
    };
    // `kith watch` spooled a delta that central could not take.
    let spooled = || -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = device.kith(&url, &token, &["status"], b"")?;
            let status = String::from_utf8_lossy(&status.stdout).into_owned();
            let waiting = status
                .split("outbox: ")
                .nth(1)
                .and_then(|rest| rest.split_whitespace().next()?.parse::<usize>().ok());
            if waiting.is_some_and(|n| n > 0) {
                return Ok(());
            }
            assert!(Instant::now() < deadline, "nothing spooled: {status}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };

    let watch = device.watch(&url, &token)?;
    append(1)?;
    delivered(1)?;
    // Central dies; watch spools what follows; then watch dies too.
    central.kill()?;
    append(2)?;
    spooled()?;
    drop(watch);
    append(3)?;
    // Central comes back while watch is still down; more is written.
    central.restart()?;
    append(4)?;
    let watch = device.watch(&url, &token)?;
    delivered(4)?;
    // Watch dies, then central; watch comes back to a central still down.
    append(5)?;
    drop(watch);
    central.kill()?;
    append(6)?;
    let _watch = device.watch(&url, &token)?;
    spooled()?;
    central.restart()?;
    append(7)?;
    delivered(PIECES)?;

    let chains = api.chains()?;
    for (src, dest) in &files {
        assert!(
            chain_of(&chains, dest) == [src],
            "{}: one chain, byte-identical",
            dest.display()
        );
    }
    Ok(())
}

/// 20 transcripts grow at once, lines sometimes written in two halves (an
/// agent mid-write), while central is SIGKILLed and restarted three times
/// under a running `kith watch`. Afterwards central holds every byte of every
/// transcript exactly once: one gapless chain per file, equal to the file.
#[test]
fn soak_twenty_growing_transcripts_through_central_crashes_lose_and_duplicate_nothing() -> Result<()>
{
    use std::io::Write;

    let tmp = tempfile::tempdir()?;
    let mut central = Central::start_on(&tmp.path().join("data"), &[])?;
    let token = central.register("me.test", "laptop")?;
    let device = Device::new()?;
    let project = device.path(".claude/projects/-soak");
    std::fs::create_dir_all(&project)?;
    let mut watch = device.watch(&central.url, &token)?;
    watch.wait_watching(&project)?;

    let sources = [WORK, AGENT, COMPACT_AGENT, SHORT];
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..20u64 {
        let lines: Vec<Vec<u8>> = fixtures::read(sources[i as usize % sources.len()])
            .split_inclusive(|&b| b == b'\n')
            .map(<[u8]>::to_vec)
            .collect();
        let path = project.join(format!("0b0e1d7a-0000-4000-8000-{i:012}.jsonl"));
        let stop = stop.clone();
        writers.push(std::thread::spawn(move || -> std::io::Result<PathBuf> {
            let mut file = std::fs::File::create(&path)?;
            let mut rng = i
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            for line in lines.iter().cycle() {
                if stop.load(Ordering::SeqCst) {
                    break;
                }
                rng = rng.wrapping_mul(6364136223846793005).wrapping_add(1);
                let split = (rng >> 33) as usize % (line.len() + 1);
                // An agent's pace: part of a line, a pause, the rest, a
                // longer pause.
                file.write_all(&line[..split])?;
                std::thread::sleep(Duration::from_millis(5 + (rng >> 60)));
                file.write_all(&line[split..])?;
                std::thread::sleep(Duration::from_millis(10 + (rng >> 58) % 40));
            }
            Ok(path)
        }));
    }

    // Three crashes while the transcripts grow, at 2, 5 and 8 s, each an
    // outage of 0.8 s; the writers stop at 11 s, central up.
    let started = Instant::now();
    for crash_at in [2, 5, 8] {
        std::thread::sleep(Duration::from_secs(crash_at).saturating_sub(started.elapsed()));
        central.kill()?;
        std::thread::sleep(Duration::from_millis(800));
        central.restart()?;
    }
    std::thread::sleep(Duration::from_secs(11).saturating_sub(started.elapsed()));
    stop.store(true, Ordering::SeqCst);
    let mut files = Vec::new();
    for w in writers {
        files.push(w.join().map_err(|_| anyhow::anyhow!("writer panicked"))??);
    }

    // Wait for the watcher to deliver the last lines.
    let api = central.client(&token);
    let mut want = Vec::new();
    for f in &files {
        want.push((f.as_path(), std::fs::read(f)?));
    }
    let want: Vec<(&Path, &[u8])> = want.iter().map(|(f, b)| (*f, b.as_slice())).collect();
    let waited = Instant::now();
    let missing = wait_for_chains(&api, &want, Duration::from_secs(90))?;
    drop(watch);
    eprintln!(
        "soak: delivered {:.1} s after the writers stopped",
        waited.elapsed().as_secs_f64()
    );
    assert!(
        missing.is_empty(),
        "every transcript once, in one chain: (file, chain lengths, file length) {missing:?}"
    );
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).map_or(0, |m| m.len()))
        .sum();
    assert!(total > 20 * 4096, "the writers wrote ({total} bytes)");
    Ok(())
}

/// The outbox's disk is full (a real 256 KiB tmpfs in a private mount
/// namespace): `kith backfill` fails with the system's own words and moves no
/// cursor; once there is space, every byte arrives exactly once.
#[test]
fn a_full_disk_under_the_outbox_is_a_clear_error_and_loses_nothing() -> Result<()> {
    let namespaces = Command::new("unshare")
        .args(["-rm", "true"])
        .stderr(Stdio::null())
        .status();
    if !namespaces.is_ok_and(|s| s.success()) {
        eprintln!("unshare -rm is not available: the full-disk test did not run");
        return Ok(());
    }
    let central = Central::start()?;
    let token = central.register("me.test", "laptop")?;
    let device = Device::new()?;
    let source = fixtures::read(WORK);
    let file = device.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000003.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    std::fs::write(&file, &source)?;
    let state = device.path("state");
    std::fs::create_dir_all(&state)?;

    let script = r#"
        mount -t tmpfs -o size=256k tmpfs "$KITH_STATE_DIR" || exit 90
        cat /dev/zero > "$KITH_STATE_DIR/filler" 2>/dev/null
        "$KITH" backfill
        echo "first=$?"
        rm "$KITH_STATE_DIR/filler"
        "$KITH" backfill
        echo "second=$?"
    "#;
    let out = device
        .home
        .command("unshare")
        .args(["-rm", "sh", "-c", script])
        .env("KITH", bin("kith"))
        .env("KITH_CENTRAL_URL", &central.url)
        .env("KITH_TOKEN", &token)
        .env("KITH_STATE_DIR", &state)
        .stdin(Stdio::null())
        .output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(90), "tmpfs mount: {stderr}");
    assert!(
        stdout.contains("first=1"),
        "a full disk fails the backfill: {stdout}"
    );
    assert!(
        stderr.contains("No space left on device"),
        "the error says why: {stderr}"
    );
    assert!(stdout.contains("second=0"), "{stdout}\n{stderr}");

    let chains = central.client(&token).chains()?;
    let got = chain_of(&chains, &file);
    assert_eq!(got.len(), 1, "one chain: the failed attempt left no trace");
    assert!(same_but_masked(got[0], &source), "every byte exactly once");
    Ok(())
}

/// CPU seconds a process has used so far (user + system).
fn cpu_seconds(pid: u32) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // Fields after the command name, which is in parentheses.
    let rest = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>()? + fields[12].parse::<f64>()?;
    Ok(ticks / 100.0)
}

/// `kith watch` sleeps when nothing changes: its own reads (opening the
/// transcripts it captures, listing folders) must not wake it again.
#[test]
fn watch_is_idle_when_nothing_changes() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("me.test", "laptop")?;
    let device = Device::new()?;
    let file = device.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000004.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    std::fs::copy(fixtures::path(SHORT), &file)?;
    let watch = device.watch(&central.url, &token)?;
    let api = central.client(&token);
    let bytes = std::fs::read(&file)?;
    // Measured from when central holds the whole file: watch's one capture
    // is done, and nothing changes from then on.
    let missing = wait_for_chains(&api, &[(&file, &bytes)], Duration::from_secs(30))?;
    let before = cpu_seconds(watch.pid())?;
    // The window measured.
    std::thread::sleep(Duration::from_secs(3));
    let used = cpu_seconds(watch.pid())? - before;
    drop(watch);
    assert!(
        missing.is_empty(),
        "watch captured the transcript: {missing:?}"
    );
    assert!(used < 1.0, "an idle watch used {used} CPU seconds in 3 s");
    Ok(())
}
