//! Capture on real transcripts laid out as the agents write them, checked
//! through what lands in the outbox.

use super::*;
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;

use kith_shared::fixtures::{self, Fixture};
use kith_shared::hash::chain_next;

/// The repository's Claude Code sessions, in their project folder.
const SHORT: &str = "claude-code/-home-sam-src-tally/3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90.jsonl";
const WORK: &str = "claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl";
const PI_V1: &str = "pi/--home-sam-src-notes-site--/2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl";
const PI_V3: &str = "pi/--home-sam-src-notes-site--/2026-05-12T07-45-31-902Z_0c7d1e9a-36f2-4b58-a1c4-9e2b5f7d8a63.jsonl";

/// A device: a home with agent folders and kith's state, all in a tempdir.
struct Device {
    tmp: tempfile::TempDir,
    paths: Paths,
    capture: Capture,
}

impl Device {
    fn new() -> anyhow::Result<Self> {
        let tmp = tempfile::tempdir()?;
        let paths = Paths::under(tmp.path());
        let capture = Capture::new(&paths, Duration::from_secs(5));
        Ok(Self {
            tmp,
            paths,
            capture,
        })
    }

    /// Copies `fixture` to where its agent would have written it.
    fn place(&self, fixture: &Fixture) -> anyhow::Result<Source> {
        let path = self
            .tmp
            .path()
            .join(fixtures::sessions_folder(fixture.runtime))
            .join(&fixture.layout);
        fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
        fs::copy(&fixture.path, &path)?;
        Ok(self.file(&path))
    }

    /// Places the repository fixture `rel` (`claude-code/...`).
    fn place_own(&self, rel: &str) -> anyhow::Result<Source> {
        self.place(&fixtures::get(rel))
    }

    fn file(&self, path: &Path) -> Source {
        Source {
            runtime: discover::runtime_of(&self.paths, path),
            path: path.to_owned(),
        }
    }

    /// Every spooled delta, oldest first.
    fn spooled(&self) -> anyhow::Result<Vec<(Header, IngestRequest)>> {
        let outbox = self.capture.outbox();
        let mut out = Vec::new();
        for entry in outbox.entries() {
            let (header, _) = outbox.read(&entry)?;
            out.push((header, outbox.request(&entry)?));
        }
        Ok(out)
    }

    /// The spooled deltas of each chain, in order.
    fn chains(&self) -> anyhow::Result<BTreeMap<String, Vec<IngestRequest>>> {
        let mut chains: BTreeMap<String, Vec<IngestRequest>> = BTreeMap::new();
        for (_, req) in self.spooled()? {
            chains
                .entry(req.source_identity.clone())
                .or_default()
                .push(req);
        }
        Ok(chains)
    }

    /// The chains of `path`, each checked the way central checks it, as the
    /// bytes they carry.
    fn bytes_of(&self, path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
        let prefix = format!("{}#", path.display());
        let mut out = Vec::new();
        for (identity, deltas) in self.chains()? {
            if !identity.starts_with(&prefix) {
                continue;
            }
            out.push(check_chain(&deltas));
        }
        Ok(out)
    }
}

/// Asserts what central will require of a chain and returns its bytes.
fn check_chain(deltas: &[IngestRequest]) -> Vec<u8> {
    let mut bytes = Vec::new();
    let mut chain: Option<String> = None;
    let mut previous_run: Option<String> = None;
    for d in deltas {
        assert_eq!(d.from_offset, bytes.len() as u64, "contiguous");
        assert_eq!(d.to_offset - d.from_offset, d.jsonl.len() as u64);
        assert_eq!(d.prev_sha256, chain, "prev_sha256 is the chain so far");
        assert!(
            kith_shared::jsonl::check(d.jsonl.as_bytes(), kith_shared::jsonl::Lines::Json).is_ok()
        );
        let run = d.run_id.clone().unwrap_or_default();
        assert!(kith_shared::ids::RunId::parse(&run).is_ok(), "{run}");
        if previous_run.is_some() {
            assert_eq!(
                d.parent_run_id, previous_run,
                "deltas chain through parents"
            );
        }
        chain = Some(chain_next(
            chain.as_deref(),
            &sha256_hex(d.jsonl.as_bytes()),
        ));
        previous_run = Some(run);
        bytes.extend_from_slice(d.jsonl.as_bytes());
    }
    bytes
}

fn complete_lines(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)]
}

#[test]
fn every_fixture_is_spooled_byte_exact_with_its_lineage() -> anyhow::Result<()> {
    let device = Device::new()?;
    let mut placed = Vec::new();
    for fixture in fixtures::all() {
        let source = device.place(&fixture)?;
        placed.push((fixture, source));
    }
    assert!(placed.len() >= 9);
    let mut total = Captured::default();
    for source in discover::all(&device.paths, &[]) {
        total += device.capture.file(&source)?;
    }
    for (fixture, source) in &placed {
        let want = fs::read(&fixture.path)?;
        let got = device.bytes_of(&source.path)?;
        assert_eq!(got.len(), 1, "{}: one chain", fixture.name);
        assert!(
            got[0] == complete_lines(&want),
            "{}: the spooled bytes are the file's",
            fixture.name
        );
    }
    let on_disk: u64 = placed
        .iter()
        .map(|(_, s)| fs::metadata(&s.path).map_or(0, |m| m.len()))
        .sum();
    assert!(total.bytes <= on_disk && total.bytes > on_disk / 2);

    // Nothing new: nothing spooled.
    for source in discover::all(&device.paths, &[]) {
        assert_eq!(device.capture.file(&source)?, Captured::default());
    }

    let first = |path: &Path| -> anyhow::Result<IngestRequest> {
        let prefix = format!("{}#", path.display());
        device
            .spooled()?
            .into_iter()
            .map(|(_, r)| r)
            .find(|r| r.source_identity.starts_with(&prefix) && r.from_offset == 0)
            .ok_or_else(|| anyhow::anyhow!("no first delta for {}", path.display()))
    };
    let latest_run = |path: &Path| -> anyhow::Result<Option<String>> {
        Ok(device.capture.cursor(path)?.and_then(|c| c.spooled.run_id))
    };
    // The placed file whose fixture path ends with `tail`.
    let find = |tail: &str| {
        placed
            .iter()
            .find(|(f, _)| f.path.ends_with(tail))
            .map(|(_, s)| s.path.clone())
            .ok_or_else(|| anyhow::anyhow!("{tail} not placed"))
    };
    let third_party = fixtures::third_party_dir().is_some();
    // Subagents hang under their session's latest run: Claude Code's in the
    // session's folder (and, in older builds, beside it), Codex's by the
    // parent thread its rollout names.
    let mut children = vec![
        (
            "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl",
            "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-a6c41f0.jsonl",
            true,
        ),
        (
            "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl",
            "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-acompact-7d20b9.jsonl",
            true,
        ),
        (
            "rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl",
            "rollout-2026-05-11T14-04-51-019e17a5-0f61-7b2a-8c44-e91d06a7b2f5.jsonl",
            false,
        ),
    ];
    if third_party {
        children.extend([
            (
                "marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
                "marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569__subagents__agent-a2898e3.jsonl",
                true,
            ),
            (
                "codemie-ai__codemie-code__incremental-subagents__turn-2.jsonl",
                "codemie-ai__codemie-code__incremental-subagents__turn-2__subagents__agent-a485154.jsonl",
                true,
            ),
            (
                "codemie-ai__codemie-code__4c2ddfdc-b619-4525-8d03-1950fb1b0257.jsonl",
                "codemie-ai__codemie-code__agent-36541525.jsonl",
                true,
            ),
        ]);
    }
    for (session, agent, same_conversation) in children {
        let (session, agent) = (find(session)?, find(agent)?);
        let child = first(&agent)?;
        assert!(child.parent_run_id.is_some(), "{}", agent.display());
        assert_eq!(
            child.parent_run_id,
            latest_run(&session)?,
            "{}",
            agent.display()
        );
        // A Claude Code subagent is part of its session's conversation; a
        // Codex subagent is a thread of its own.
        assert_eq!(
            child.conversation_id == first(&session)?.conversation_id,
            same_conversation,
            "{}",
            agent.display()
        );
    }
    // Conversation ids are the agents' own.
    let mut roots = vec![
        (
            "3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90.jsonl",
            "3f1c2a4e-8b7d-4e21-9c55-0a6b1d2e7f90",
        ),
        (
            "rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl",
            "019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4",
        ),
        (
            "2026-05-07T19-20-07-530Z_e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e.jsonl",
            "e5b2c8d1-7a44-4f0e-b96a-3d1f28c07a9e",
        ),
    ];
    if third_party {
        roots.extend([
            (
                "marot__spotter__short.jsonl",
                "55604662-cf2a-4331-851a-ec234028f8ca",
            ),
            (
                "codemie-ai__codemie-code__session-9eda1058.jsonl",
                "9eda1058-9706-484a-b992-d03f9cfa2546",
            ),
            (
                "madshn__localpush__rollout-2026-02-23T12-41-04-019c8a4d-8f45-7010-8b5d-7fad920aa6f9.jsonl",
                "019c8a4d-8f45-7010-8b5d-7fad920aa6f9",
            ),
            (
                "badlogic__pi-mono__compact.jsonl",
                "2638daee-0588-4baa-bd33-68b4c002818e",
            ),
        ]);
    }
    for (name, id) in roots {
        assert_eq!(
            first(&find(name)?)?.conversation_id.as_deref(),
            Some(id),
            "{name}"
        );
        assert_eq!(first(&find(name)?)?.parent_run_id, None, "{name} is a root");
    }
    Ok(())
}

#[test]
fn a_codex_subagent_rollout_hangs_under_its_parent_thread() -> anyhow::Result<()> {
    let device = Device::new()?;
    let day = device.paths.codex_dir.join("sessions/2026/05/12");
    fs::create_dir_all(&day)?;
    let parent_id = "019e0000-0000-7000-8000-000000000001";
    let child_id = "019e0000-0000-7000-8000-000000000002";
    let parent = day.join(format!("rollout-2026-05-12T10-00-00-{parent_id}.jsonl"));
    let child = day.join(format!("rollout-2026-05-12T10-00-05-{child_id}.jsonl"));
    fs::write(
        &parent,
        format!("{{\"timestamp\":\"2026-05-12T08:00:00Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"{parent_id}\",\"source\":\"cli\"}}}}\n"),
    )?;
    fs::write(
        &child,
        format!("{{\"timestamp\":\"2026-05-12T08:00:05Z\",\"type\":\"session_meta\",\"payload\":{{\"id\":\"{child_id}\",\"source\":{{\"subagent\":{{\"thread_spawn\":{{\"parent_thread_id\":\"{parent_id}\",\"depth\":1}}}}}}}}}}\n"),
    )?;
    // The child first: its parent is captured on the way.
    device.capture.file(&device.file(&child))?;
    let spooled = device.spooled()?;
    assert_eq!(spooled.len(), 2, "parent then child");
    assert!(
        spooled[0].0.file == parent && spooled[1].0.file == child,
        "oldest first: parent"
    );
    assert_eq!(spooled[1].1.parent_run_id, spooled[0].1.run_id);
    assert_eq!(spooled[1].1.conversation_id.as_deref(), Some(child_id));
    Ok(())
}

#[test]
fn appends_in_steps_send_only_complete_new_lines() -> anyhow::Result<()> {
    let device = Device::new()?;
    let source = device.place_own(WORK)?;
    let full = fs::read(&source.path)?;
    let mut f = fs::File::create(&source.path)?;
    let mut written = 0;
    let mut ends = std::collections::BTreeSet::new();
    // Cuts that fall mid-line: the partial line waits for its newline (one
    // added byte completes nothing, so that step sends nothing).
    for cut in [
        full.len() / 7,
        full.len() / 3,
        full.len() / 3 + 1,
        full.len() / 2,
        full.len(),
    ] {
        ends.insert(complete_lines(&full[..cut]).len());
        f.write_all(&full[written..cut])?;
        f.flush()?;
        written = cut;
        device.capture.file(&source)?;
        let got = device.bytes_of(&source.path)?;
        let got = got.first().cloned().unwrap_or_default();
        assert!(got == complete_lines(&full[..cut]), "after {cut} bytes");
        let cursor = device.capture.cursor(&source.path)?;
        assert_eq!(cursor.map(|c| c.size), Some(cut as u64));
    }
    let deltas = device.chains()?.into_values().next().unwrap_or_default();
    assert_eq!(
        deltas.len(),
        ends.len(),
        "one delta per step that completed a line"
    );
    assert_eq!(deltas.len(), 4);
    Ok(())
}

#[test]
fn a_partial_last_line_waits_for_its_newline() -> anyhow::Result<()> {
    // (the whole file, the bytes written when the hook runs): the repository's
    // short session cut inside its answer, and the third-party one cut by
    // its publisher.
    let full = fixtures::read(SHORT);
    let at = full.windows(8).position(|w| w == b"Found it");
    let mut cases = vec![(full.clone(), full[..at.unwrap_or_default()].to_vec())];
    if let (Some(full), Some(cut)) = (
        fixtures::third_party("claude-code/marot__spotter__short.jsonl"),
        fixtures::third_party("derived/marot__spotter__short.TRUNCATED-MIDLINE-DERIVED.jsonl"),
    ) {
        cases.push((full, cut));
    }
    for (full, truncated) in cases {
        let device = Device::new()?;
        let source = device.place_own(SHORT)?;
        assert!(full.starts_with(&truncated) && !truncated.ends_with(b"\n"));
        fs::write(&source.path, &truncated)?;
        device.capture.file(&source)?;
        assert!(device.bytes_of(&source.path)?[0] == complete_lines(&truncated));
        // The writer finishes the line.
        fs::OpenOptions::new()
            .append(true)
            .open(&source.path)?
            .write_all(&full[truncated.len()..])?;
        device.capture.file(&source)?;
        let chains = device.bytes_of(&source.path)?;
        assert_eq!(chains.len(), 1);
        assert!(chains[0] == complete_lines(&full));
    }
    Ok(())
}

#[test]
fn truncation_replacement_and_rewrite_each_start_a_new_chain() -> anyhow::Result<()> {
    let device = Device::new()?;
    let source = device.place_own(PI_V1)?;
    let original = fs::read(&source.path)?;
    device.capture.file(&source)?;

    // Truncated to zero, then regrown with other content.
    fs::write(&source.path, b"")?;
    assert_eq!(device.capture.file(&source)?, Captured::default());
    let regrown = complete_lines(&original[..original.len() / 3]).to_vec();
    fs::write(&source.path, &regrown)?;
    device.capture.file(&source)?;
    assert_eq!(device.bytes_of(&source.path)?.len(), 2, "truncate + regrow");

    // Replaced by another file at the same path (a new inode).
    let other = fixtures::read(PI_V3);
    let tmp = source.path.with_extension("tmp");
    fs::write(&tmp, &other)?;
    fs::rename(&tmp, &source.path)?;
    device.capture.file(&source)?;

    // Rewritten in place, longer, same inode (pi's v1 -> v3 migration).
    // A letter changed near the end (inside the tail window) and a line added.
    let mut rewritten = other.clone();
    let at = (rewritten.len() - 2000..rewritten.len())
        .find(|&i| rewritten[i].is_ascii_lowercase())
        .unwrap_or(rewritten.len() - 2000);
    rewritten[at] = if rewritten[at] == b'x' { b'y' } else { b'x' };
    rewritten.extend_from_slice(b"{\"type\":\"label\"}\n");
    fs::OpenOptions::new()
        .write(true)
        .open(&source.path)?
        .write_all(&rewritten)?;
    device.capture.file(&source)?;

    let mut chains = device.bytes_of(&source.path)?;
    chains.sort();
    let mut want = vec![
        complete_lines(&original).to_vec(),
        regrown,
        complete_lines(&other).to_vec(),
        complete_lines(&rewritten).to_vec(),
    ];
    want.sort();
    assert!(
        chains == want,
        "four chains, each the whole file of its time"
    );
    let epochs: Vec<u64> = device
        .capture
        .cursors()
        .load(&source.path)?
        .map(|c| vec![c.epoch])
        .unwrap_or_default();
    assert_eq!(epochs, vec![3]);
    Ok(())
}

#[test]
fn a_50_mb_line_travels_alone_and_deltas_stay_bounded() -> anyhow::Result<()> {
    let device = Device::new()?;
    let path = device.paths.claude_dir.join("projects/-p/big.jsonl");
    fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
    let mut f = fs::File::create(&path)?;
    f.write_all(b"{\"type\":\"user\",\"n\":1}\n")?;
    let big = "a".repeat(50 << 20);
    writeln!(f, "{{\"type\":\"user\",\"text\":\"{big}\"}}")?;
    let small: Vec<u8> = (0..20_000)
        .flat_map(|i| {
            format!(
                "{{\"type\":\"assistant\",\"i\":{i},\"pad\":\"{}\"}}\n",
                "b".repeat(500)
            )
            .into_bytes()
        })
        .collect();
    f.write_all(&small)?;
    drop(f);
    let want = fs::read(&path)?;
    device.capture.file(&device.file(&path))?;
    let deltas = device.chains()?.into_values().next().unwrap_or_default();
    let bytes = check_chain(&deltas);
    assert!(bytes == want);
    let sizes: Vec<usize> = deltas.iter().map(|d| d.jsonl.len()).collect();
    assert!(
        sizes.iter().any(|&s| s > 50 << 20),
        "the long line alone: {sizes:?}"
    );
    assert!(
        sizes
            .iter()
            .filter(|&&s| s < 50 << 20)
            .all(|&s| s <= MAX_DELTA),
        "{sizes:?}"
    );
    assert!(sizes.len() >= 3, "the 10 MB after it is split: {sizes:?}");
    Ok(())
}

#[test]
fn secrets_are_masked_but_offsets_describe_the_original_file() -> anyhow::Result<()> {
    let device = Device::new()?;
    let path = device.paths.claude_dir.join("projects/-p/s.jsonl");
    fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
    let line = "{\"type\":\"user\",\"message\":{\"content\":\"my key is AKIAIOSFODNN7EXAMPLE\"}}\n";
    fs::write(&path, line)?;
    device.capture.file(&device.file(&path))?;
    let spooled = device.spooled()?;
    let req = &spooled[0].1;
    assert!(!req.jsonl.contains("AKIAIOSFODNN7EXAMPLE"));
    assert!(req.jsonl.contains("[REDACTED:aws_key]"));
    assert_eq!((req.from_offset, req.to_offset), (0, line.len() as u64));
    assert_eq!(req.redactions.get("aws_key"), Some(&1));
    // The original bytes are what the rewrite check knows: an append continues.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)?
        .write_all(b"{\"type\":\"user\"}\n")?;
    device.capture.file(&device.file(&path))?;
    assert_eq!(device.chains()?.len(), 1, "still one chain");
    Ok(())
}

/// What capture spools is what leaves the device: planted in each agent's
/// transcript (a Codex command's JSON-encoded arguments, its output, a
/// Claude Code tool result, a pi tool result), no secret reaches the outbox,
/// and the redacted lines keep the original's lengths.
#[test]
fn no_planted_secret_reaches_the_outbox() -> anyhow::Result<()> {
    let secrets = [
        "AKIAIOSFODNN7EXAMPLE",
        "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "p4ssw0rdRedis",
        "hunter2yaml",
        "dXNlcjpodW50ZXIy",
        "tok-9a8b7c6d5e",
        "k3Lm9Qr2St5Uv8Wx1Yz4Ab7Cd0Ef3Gh6Ij9Kl2Mn5Op8Qr1St4Uv7Wx0Yz3Ab6Cd",
    ];
    let text = format!(
        "export AWS_ACCESS_KEY_ID={} API_TOKEN=\"{}\"\naws_secret_access_key = {}\n\
         git push https://{}@github.com/o/r\nREDIS_URL=redis://:{}@cache:6379\n\
         db:\n  password: {}\ncurl -H 'Authorization: Basic {}'\n{}\n-----END PRIVATE KEY-----",
        secrets[0],
        secrets[6],
        secrets[1],
        secrets[2],
        secrets[3],
        secrets[4],
        secrets[5],
        secrets[7],
    );
    let claude = serde_json::json!({"type": "user", "message": {"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_01", "content": text}]}});
    let codex = [
        serde_json::json!({"type": "response_item", "payload": {"type": "function_call",
            "name": "exec_command", "call_id": "call_1",
            "arguments": serde_json::json!({"cmd": text, "workdir": "/home/me"}).to_string()}}),
        serde_json::json!({"type": "response_item", "payload": {"type": "function_call_output",
            "call_id": "call_1", "output": text}}),
    ];
    let pi = serde_json::json!({"type": "message", "message": {"role": "toolResult",
        "toolName": "bash", "content": [{"type": "text", "text": text}]}});

    let device = Device::new()?;
    let files = [
        (
            device.paths.claude_dir.join("projects/-p/s.jsonl"),
            vec![claude],
        ),
        (
            device
                .paths
                .codex_dir
                .join("sessions/2026/05/12/rollout-2026-05-12T10-00-00-s.jsonl"),
            codex.to_vec(),
        ),
        (device.paths.pi_dir.join("sessions/--p--/s.jsonl"), vec![pi]),
    ];
    for (path, lines) in &files {
        fs::create_dir_all(path.parent().unwrap_or(Path::new("/")))?;
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        assert!(secrets.iter().all(|s| body.contains(s)), "planted as is");
        fs::write(path, &body)?;
        device.capture.file(&device.file(path))?;
    }
    let spooled = device.spooled()?;
    assert_eq!(spooled.len(), files.len(), "one delta per transcript");
    for (_, req) in spooled {
        let sent = serde_json::to_string(&req)?;
        for secret in secrets {
            assert!(
                !sent.contains(secret),
                "{secret} would be sent: {}",
                req.jsonl
            );
        }
        assert_eq!(req.jsonl.len() as u64, req.to_offset - req.from_offset);
        for line in req.jsonl.lines() {
            serde_json::from_str::<serde_json::Value>(line)?;
        }
        let found: u64 = req.redactions.values().sum();
        assert!(found >= 8, "{:?}", req.redactions);
    }
    Ok(())
}

#[test]
fn a_full_outbox_leaves_the_cursor_where_it_was() -> anyhow::Result<()> {
    let device = Device::new()?;
    let source = device.place_own(SHORT)?;
    // The outbox cannot be written (as on a full disk).
    fs::create_dir_all(&device.paths.state_dir)?;
    fs::write(device.paths.state_dir.join("outbox"), b"not a folder")?;
    let failed = device.capture.file(&source);
    assert!(matches!(failed, Err(Error::Io { .. })), "{failed:?}");
    let cursor = device.capture.cursor(&source.path)?;
    assert_eq!(cursor.map(|c| c.spooled.offset), Some(0), "not advanced");
    // Space again: the same bytes are captured, nothing skipped.
    fs::remove_file(device.paths.state_dir.join("outbox"))?;
    device.capture.file(&source)?;
    let full = fs::read(&source.path)?;
    assert!(device.bytes_of(&source.path)?[0] == complete_lines(&full));
    Ok(())
}

#[test]
fn parallel_hooks_on_one_file_spool_each_byte_once() -> anyhow::Result<()> {
    let device = Device::new()?;
    let source = device.place_own(WORK)?;
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| device.capture.file(&source));
        }
    });
    let full = fs::read(&source.path)?;
    let chains = device.bytes_of(&source.path)?;
    assert_eq!(chains.len(), 1);
    assert!(chains[0] == complete_lines(&full));
    Ok(())
}

#[test]
fn the_outbox_carries_the_spooled_mark_and_a_lost_entry_is_captured_again() -> anyhow::Result<()> {
    let device = Device::new()?;
    let source = device.place_own(SHORT)?;
    let full = fs::read(&source.path)?;
    let lines: Vec<&[u8]> = full.split_inclusive(|&b| b == b'\n').collect();
    assert!(lines.len() >= 4, "the fixture has a few lines");
    let quarter = lines.len() / 4;
    let upto = |n: usize| lines[..n].concat();
    fs::write(&source.path, upto(quarter))?;
    device.capture.file(&source)?;
    // Appends are spooled without rewriting the cursor file: its mark stays
    // at the chain's start, and the outbox holds the rest.
    for n in [2 * quarter, 3 * quarter] {
        fs::write(&source.path, upto(n))?;
        device.capture.file(&source)?;
    }
    let on_disk = device.capture.cursors().load(&source.path)?;
    assert_eq!(on_disk.map(|c| c.spooled.offset), Some(0));
    let caught_up = device.capture.cursor(&source.path)?;
    assert_eq!(
        caught_up.map(|c| c.spooled.offset),
        Some(upto(3 * quarter).len() as u64)
    );
    // A crash leaves the newest entry short (it was not fsynced): the cursor
    // falls back to the entry before; a replay sets the torn entry aside, and
    // the next capture (another process) sends those bytes again, on the
    // same chain.
    let entries = device.capture.outbox().entries();
    assert_eq!(entries.len(), 3);
    let torn = fs::read(&entries[2])?;
    fs::write(&entries[2], &torn[..torn.len() - 1])?;
    assert!(device.capture.outbox().read(&entries[2]).is_err());
    let fallen_back = device.capture.cursor(&source.path)?;
    assert_eq!(
        fallen_back.map(|c| c.spooled.offset),
        Some(upto(2 * quarter).len() as u64)
    );
    fs::remove_file(&entries[2])?;
    fs::write(&source.path, &full)?;
    Capture::new(&device.paths, Duration::from_secs(5)).file(&source)?;
    let chains = device.bytes_of(&source.path)?;
    assert!(chains.len() == 1 && chains[0] == full, "every byte, once");
    Ok(())
}

/// Rules for a device whose home is /home/sam (the fixtures' agents worked there).
fn rules(config: &str) -> anyhow::Result<crate::settings::Rules> {
    let tmp = tempfile::tempdir()?;
    let paths = Paths::under(tmp.path());
    fs::create_dir_all(&paths.config_dir)?;
    fs::write(paths.config_dir.join("config.toml"), config)?;
    Ok(crate::settings::Settings::load(&paths, &crate::settings::Flags::default())?.rules)
}

#[test]
fn an_excluded_project_is_never_spooled_and_tag_rules_tag_the_rest() -> anyhow::Result<()> {
    let device = Device::new()?;
    let tally = device.place_own(SHORT)?;
    let notes = device.place_own(PI_V3)?;
    let capture = Capture::new(&device.paths, Duration::from_secs(5)).with_rules(rules(
        r#"
        exclude = ["/home/sam/src/tally/**"]
        [[tag]]
        project = "/home/sam/src/**"
        tags = ["src"]
        [[tag]]
        project = "/home/sam/src/notes-site"
        tags = ["notes"]
        "#,
    )?);
    assert_eq!(capture.file(&tally)?, Captured::default());
    assert!(capture.cursor(&tally.path)?.is_none(), "not even a cursor");
    assert!(capture.file(&notes)?.deltas > 0);
    let spooled = device.spooled()?;
    assert!(!spooled.is_empty());
    for (header, req) in &spooled {
        assert_eq!(header.file, notes.path, "only the notes project is spooled");
        assert_eq!(req.tags, ["notes", "src"]);
    }

    // An exclusion by the transcript's own path, added later, stops a
    // chain already under way.
    let by_path = Capture::new(&device.paths, Duration::from_secs(5)).with_rules(rules(&format!(
        "exclude = [{:?}]",
        notes.path.display().to_string()
    ))?);
    fs::OpenOptions::new()
        .append(true)
        .open(&notes.path)?
        .write_all(b"{\"type\":\"custom\",\"note\":\"later\"}\n")?;
    assert_eq!(by_path.file(&notes)?, Captured::default());
    assert_eq!(device.spooled()?.len(), spooled.len());
    // What was spooled before the exclusion is discarded, never sent.
    assert_eq!(
        capture.discard_excluded()?,
        0,
        "not excluded by those rules"
    );
    assert_eq!(by_path.discard_excluded()?, spooled.len());
    assert!(device.spooled()?.is_empty());
    Ok(())
}

/// Regression: `exclude` was decided on the folder the first 64 lines or
/// first MiB named, so a transcript of the excluded project went out when
/// seventy summary lines came first, or when its first line was over 1 MiB.
/// The folder is found wherever the transcript first names it, and a
/// transcript that names none yet is held back (no cursor, nothing
/// spooled) until it does; `kith status` counts it.
#[test]
fn exclusions_read_the_folder_wherever_it_is_and_hold_back_until_then() -> anyhow::Result<()> {
    let device = Device::new()?;
    let folder = device
        .tmp
        .path()
        .join(".claude/projects/-home-sam-src-tally");
    fs::create_dir_all(&folder)?;
    let session = fs::read_to_string(fixtures::path(SHORT))?;
    assert!(session.contains("\"cwd\":\"/home/sam/src/tally\""));
    let summary = |i: usize| {
        format!("{{\"type\":\"summary\",\"summary\":\"part {i}\",\"leafUuid\":\"l-{i}\"}}\n")
    };
    let late = folder.join("late.jsonl");
    fs::write(&late, (0..70).map(summary).collect::<String>() + &session)?;
    let long = folder.join("long.jsonl");
    let first = serde_json::json!({
        "type": "user", "uuid": "u-long", "sessionId": "s-long", "cwd": "/home/sam/src/tally",
        "timestamp": "2026-05-11T10:00:00Z",
        "message": {"role": "user", "content": "x".repeat(1_200_000)}
    });
    fs::write(&long, format!("{first}\n{session}"))?;
    let unknown = folder.join("unknown.jsonl");
    fs::write(&unknown, (0..3).map(summary).collect::<String>())?;

    let config = "exclude = [\"/home/sam/src/tally/**\"]\n";
    let capture = Capture::new(&device.paths, Duration::from_secs(5)).with_rules(rules(config)?);
    for path in [&late, &long, &unknown] {
        assert_eq!(
            capture.file(&device.file(path))?,
            Captured::default(),
            "{path:?}"
        );
        assert!(
            capture.cursor(path)?.is_none(),
            "not even a cursor: {path:?}"
        );
    }
    assert!(device.spooled()?.is_empty());
    fs::create_dir_all(&device.paths.config_dir)?;
    fs::write(device.paths.config_dir.join("config.toml"), config)?;
    let settings =
        crate::settings::Settings::load(&device.paths, &crate::settings::Flags::default())?;
    let report = crate::status::report(&device.paths, &settings);
    assert_eq!(report.held_back, 1, "{report}");
    assert!(
        report.to_string().contains("held back: 1 transcripts"),
        "{report}"
    );

    // Once it names a folder outside the exclusion, it goes, whole.
    let mut line = serde_json::json!({
        "type": "user", "uuid": "u-1", "sessionId": "s-unknown", "cwd": "/home/sam/src/notes-site",
        "timestamp": "2026-05-11T10:00:00Z", "message": {"role": "user", "content": "hello"}
    })
    .to_string();
    line.push('\n');
    fs::OpenOptions::new()
        .append(true)
        .open(&unknown)?
        .write_all(line.as_bytes())?;
    assert!(capture.file(&device.file(&unknown))?.deltas > 0);
    let spooled = device.spooled()?;
    assert!(
        spooled.iter().all(|(h, _)| h.file == unknown),
        "only that one"
    );
    let report = crate::status::report(&device.paths, &settings);
    assert_eq!(report.held_back, 0, "{report}");
    Ok(())
}

#[test]
fn the_persons_own_redact_patterns_are_masked_before_spooling() -> anyhow::Result<()> {
    let device = Device::new()?;
    let notes = device.place_own(PI_V3)?;
    assert!(fs::read_to_string(&notes.path)?.contains("notes-site"));
    let capture = Capture::new(&device.paths, Duration::from_secs(5))
        .with_rules(rules(r#"redact = ["notes-s[a-z]+"]"#)?);
    assert!(capture.file(&notes)?.deltas > 0);
    for (_, req) in device.spooled()? {
        assert!(!req.jsonl.contains("notes-site"), "{}", req.jsonl);
        assert!(req.redactions.get("custom").is_some_and(|n| *n > 0));
    }
    Ok(())
}

/// An Aider history is markdown: it is spooled as the text it is (not made
/// JSON), secrets masked in it, with the project folder as its `cwd`.
#[test]
fn an_aider_history_is_spooled_as_text_with_its_secrets_masked() -> anyhow::Result<()> {
    let device = Device::new()?;
    let project = device.tmp.path().join("src/tally");
    fs::create_dir_all(&project)?;
    let history = project.join(discover::AIDER_HISTORY);
    let secret = "ghp_abcdefghijklmnopqrstuvwxyz0123456789";
    let first = "\n# aider chat started at 2026-05-14 10:02:11\n\n#### hi  \n\nHello.\n\n";
    fs::write(&history, first)?;
    let source = device.file(&history);
    assert_eq!(source.runtime, AgentRuntime::Aider);
    assert!(device.capture.file(&source)?.deltas > 0);
    let mut file = fs::OpenOptions::new().append(true).open(&history)?;
    file.write_all(format!("#### push with GITHUB_TOKEN={secret}  \n").as_bytes())?;
    assert!(device.capture.file(&source)?.deltas > 0);

    let spooled = device.spooled()?;
    let text: String = spooled.iter().map(|(_, r)| r.jsonl.as_str()).collect();
    assert!(text.starts_with(first), "kept as written: {text}");
    assert!(text.contains("#### push with GITHUB_TOKEN="), "{text}");
    assert!(!text.contains(secret), "{text}");
    assert_eq!(text.len() as u64, fs::metadata(&history)?.len());
    for (_, req) in &spooled {
        assert_eq!(req.agent_runtime, AgentRuntime::Aider);
        assert_eq!(
            req.cwd.as_deref(),
            Some(project.to_str().unwrap_or_default())
        );
        assert!(
            !req.redactions.contains_key("invalid_json_lines"),
            "{req:?}"
        );
        let lines = kith_shared::transcript::Format::Aider.lines();
        assert!(kith_shared::jsonl::check(req.jsonl.as_bytes(), lines).is_ok());
    }
    assert!(spooled.iter().any(|(_, r)| !r.redactions.is_empty()));
    Ok(())
}

/// A repository can commit its Aider history as a link to any file: kith
/// captures a history that is a file of its own, never what a link names.
#[test]
fn an_aider_history_that_is_a_link_is_not_followed() -> anyhow::Result<()> {
    let device = Device::new()?;
    let secret = device.tmp.path().join("notes.txt");
    fs::write(&secret, "password s3cr3tPw\n")?;
    let project = device.tmp.path().join("src/cloned");
    fs::create_dir_all(&project)?;
    let history = project.join(discover::AIDER_HISTORY);
    std::os::unix::fs::symlink(&secret, &history)?;
    let source = device.file(&history);
    assert_eq!(source.runtime, AgentRuntime::Aider);
    assert_eq!(device.capture.file(&source)?.deltas, 0);
    assert!(device.spooled()?.is_empty(), "nothing of the linked file");
    assert!(discover::aider_dirs(std::slice::from_ref(&project)).contains(&project));
    let found = discover::all(&device.paths, &[project]);
    assert!(!found.iter().any(|s| s.path == history), "{found:?}");
    Ok(())
}

/// A transcript whose last line never ends (a file without line ends) is
/// read up to `MAX_LINE`, not whole: the lines before it are captured, the
/// rest is an error naming the line, and the file waits (shown by `kith
/// status`) until it is replaced, instead of being read again at every
/// capture.
#[test]
fn a_line_past_the_longest_kith_sends_parks_the_file_not_a_whole_file_in_memory(
) -> anyhow::Result<()> {
    let device = Device::new()?;
    let dir = device.paths.claude_dir.join("projects/-p");
    fs::create_dir_all(&dir)?;
    let path = dir.join("endless.jsonl");
    let first = "{\"type\":\"user\",\"message\":{\"content\":\"hello\"}}\n";
    let mut file = fs::File::create(&path)?;
    file.write_all(first.as_bytes())?;
    let block = vec![b'a'; 1 << 20];
    for _ in 0..(MAX_LINE >> 20) + 2 {
        file.write_all(&block)?;
    }
    drop(file);
    let source = device.file(&path);
    let said = match device.capture.file(&source) {
        Ok(c) => format!("captured {c:?}"),
        Err(e) => e.to_string(),
    };
    let why = format!("a line at byte {} runs past 64 MiB", first.len());
    assert!(said.contains(&why), "{said}");
    let spooled = device.spooled()?;
    let text: String = spooled.iter().map(|(_, r)| r.jsonl.as_str()).collect();
    assert_eq!(text, first);

    // Parked: the next capture reads nothing, however the file grows.
    fs::OpenOptions::new()
        .append(true)
        .open(&path)?
        .write_all(b"\n{\"type\":\"user\"}\n")?;
    assert_eq!(device.capture.file(&source)?, Captured::default());
    assert_eq!(device.spooled()?.len(), spooled.len());
    let settings = crate::settings::Settings {
        file: device.paths.config_dir.join("config.toml"),
        central_url: None,
        rules: Rules::default(),
        aider_roots: Vec::new(),
        path_map: Vec::new(),
    };
    let status = crate::status::report(&device.paths, &settings).to_string();
    assert!(
        status.contains(&format!("waiting until it changes: {}", path.display()))
            && status.contains(&why),
        "{status}"
    );

    // Replaced by another file: captured again, from its start.
    let tmp = dir.join("endless.new");
    fs::write(&tmp, first)?;
    fs::rename(&tmp, &path)?;
    assert_eq!(device.capture.file(&source)?.deltas, 1);
    let status = crate::status::report(&device.paths, &settings).to_string();
    assert!(!status.contains("waiting until it changes"), "{status}");
    Ok(())
}
