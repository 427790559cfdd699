//! Capture end to end: the real `kith` binary on real transcripts against a
//! real `kith-central`, through outages, restarts and rewritten files.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use anyhow::Result;
use kith_tests::{bin, fixture, Api, Central};

/// A family machine: a HOME with agent folders, and kith's own dirs.
struct Device {
    home: tempfile::TempDir,
}

impl Device {
    fn new() -> Result<Self> {
        Ok(Self {
            home: tempfile::tempdir()?,
        })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.home.path().join(rel)
    }

    fn kith(&self, central: &str, token: &str, args: &[&str], stdin: &[u8]) -> Result<Output> {
        use std::io::Write;
        let mut child = Command::new(bin("kith"))
            .args(args)
            .env("HOME", self.home.path())
            .env("KITH_CENTRAL_URL", central)
            .env("KITH_TOKEN", token)
            .env_remove("KITH_CONFIG_DIR")
            .env_remove("KITH_STATE_DIR")
            .env_remove("CODEX_HOME")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        if let Some(mut i) = child.stdin.take() {
            i.write_all(stdin)?;
        }
        Ok(child.wait_with_output()?)
    }

    /// Lays out every fixture as the agents would have written it.
    fn with_all_fixtures(&self) -> Result<Vec<(PathBuf, PathBuf)>> {
        let mut placed = Vec::new();
        for (dir, runtime) in [("claude-code", "claude"), ("codex", "codex"), ("pi", "pi")] {
            for entry in std::fs::read_dir(kith_tests::reference_dir().join("fixtures").join(dir))?
            {
                let src = entry?.path();
                let name = src
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default()
                    .to_owned();
                let dest = match runtime {
                    "claude" => {
                        let rel = name.replace("__subagents__", "/subagents/");
                        let rel = rel
                            .split_once("__")
                            .map_or(rel.clone(), |(_, r)| r.to_owned());
                        self.path(".claude/projects/-home-me-proj")
                            .join(rel.replace("__", "-"))
                    }
                    "codex" => {
                        let file = name.rsplit("__").next().unwrap_or_default();
                        self.path(".codex/sessions/2026/05/11").join(file)
                    }
                    _ => self
                        .path(".pi/agent/sessions/--home-me-proj--")
                        .join(name.replace("__", "_")),
                };
                if let Some(parent) = dest.parent() {
                    std::fs::create_dir_all(parent)?;
                }
                std::fs::copy(&src, &dest)?;
                placed.push((src, dest));
            }
        }
        Ok(placed)
    }
}

/// Central's copy of every source chain: source_identity -> concatenated
/// run blobs in offset order, checked to chain without gaps.
fn fetch_chains(api: &Api) -> Result<BTreeMap<String, Vec<u8>>> {
    let forest = api.get("/api/runs/forest?limit=500")?;
    let mut runs: Vec<(String, u64, u64, String)> = Vec::new();
    for tree in forest.body["trees"].as_array().into_iter().flatten() {
        for r in tree["runs"].as_array().into_iter().flatten() {
            let run = &r["run"];
            runs.push((
                run["source_identity"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                run["from_offset"].as_u64().unwrap_or(0),
                run["to_offset"].as_u64().unwrap_or(0),
                run["id"].as_str().unwrap_or_default().to_owned(),
            ));
        }
    }
    runs.sort();
    let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (source, from, to, id) in runs {
        let (status, bytes) = api.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
        assert_eq!(status, 200);
        let chain = out.entry(source).or_default();
        assert_eq!(
            chain.len() as u64,
            from,
            "no gap and no overlap in the chain"
        );
        assert_eq!(bytes.len() as u64, to - from);
        chain.extend(bytes);
    }
    Ok(out)
}

/// The chain whose source identity names `path`.
fn chain_of<'a>(chains: &'a BTreeMap<String, Vec<u8>>, path: &Path) -> Vec<&'a Vec<u8>> {
    let prefix = format!("{}#", path.display());
    chains
        .iter()
        .filter(|(k, _)| k.starts_with(&prefix))
        .map(|(_, v)| v)
        .collect()
}

/// Equal except where redaction masked a secret with `*`.
fn same_but_masked(got: &[u8], want: &[u8]) -> bool {
    got.len() == want.len() && got.iter().zip(want).all(|(g, w)| g == w || *g == b'*')
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

    let chains = fetch_chains(&api)?;
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
    // Subagents hang under their session.
    let status = device.kith(&central.url, &token, &["status"], b"")?;
    let status = String::from_utf8_lossy(&status.stdout).into_owned();
    assert!(status.contains("outbox: 0 deltas waiting"), "{status}");
    Ok(())
}

#[test]
fn appends_through_outages_and_rewrites_lose_nothing_and_store_nothing_twice() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let mut central = Central::start_on(&data, &[])?;
    let token = central.register("me.test", "laptop")?;
    let device = Device::new()?;
    let source = std::fs::read(fixture("claude-code/marot__spotter__tool_heavy.jsonl"))?;
    let file = device.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000001.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
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
    let chains = fetch_chains(&api)?;
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
    let other = std::fs::read(fixture("claude-code/marot__spotter__short.jsonl"))?;
    std::fs::remove_file(&file)?;
    std::fs::write(&file, &other)?;
    let out = device.kith(&central.url, &token, &["hook"], payload.as_bytes())?;
    assert_eq!(out.status.code(), Some(0));
    let chains = fetch_chains(&api)?;
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
    let chains = fetch_chains(&api)?;
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
    Ok(())
}

#[test]
fn family_cli_shares_a_run_and_the_owner_sees_who_read_it() -> Result<()> {
    let central = Central::start()?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let alice = Device::new()?;
    let bob = Device::new()?;
    let source = std::fs::read(fixture("claude-code/marot__spotter__short.jsonl"))?;
    let file = alice.path(".claude/projects/-p/0b0e1d7a-0000-4000-8000-000000000002.jsonl");
    std::fs::create_dir_all(file.parent().unwrap_or(Path::new("/")))?;
    std::fs::write(&file, &source)?;
    let run = |d: &Device, token: &str, args: &[&str]| d.kith(&central.url, token, args, b"");
    assert!(run(&alice, &alice_token, &["backfill"])?.status.success());
    let tree: serde_json::Value =
        serde_json::from_slice(&run(&alice, &alice_token, &["tree", "--json"])?.stdout)?;
    let id = tree["trees"][0]["root_run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let denied = run(&bob, &bob_token, &["show", &id, "--raw"])?;
    assert_eq!(denied.status.code(), Some(1), "private by default");
    assert!(String::from_utf8_lossy(&denied.stderr).contains("run_not_found"));

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
        .wait_indexed(&id, std::time::Duration::from_secs(30))?;
    let found = run(
        &bob,
        &bob_token,
        &["search", "phx.server", "--mode", "keyword", "--json"],
    )?;
    let found: serde_json::Value = serde_json::from_slice(&found.stdout)?;
    assert_eq!(found["hits"][0]["run_id"], id.as_str());

    let audit = String::from_utf8(run(&alice, &alice_token, &["audit"])?.stdout)?;
    assert!(audit.contains("bob.test") && audit.contains(&id), "{audit}");
    let list = String::from_utf8(run(&alice, &alice_token, &["share", "list"])?.stdout)?;
    let grant = list
        .split_whitespace()
        .last()
        .unwrap_or_default()
        .to_owned();
    assert!(run(&alice, &alice_token, &["share", "revoke", &grant])?
        .status
        .success());
    assert_eq!(
        run(&bob, &bob_token, &["show", &id])?.status.code(),
        Some(1),
        "revoked: gone at once"
    );
    Ok(())
}
