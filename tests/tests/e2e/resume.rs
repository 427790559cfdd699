//! `kith resume`: a conversation captured on one machine continued on
//! another by the real Claude Code (npm, pinned in tests/agents), and
//! captured there as the same conversation.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use kith_shared::fixtures;
use kith_tests::{run_central, Central, Machine};
use serde_json::Value;

const SESSION: &str = "9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55";
const MAIN: &str = "claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55.jsonl";
const SUBAGENT: &str = "claude-code/-home-sam-src-tally/9d0e4b7a-5c2f-4f18-a3e6-1b8c7d2f4a55/subagents/agent-a6c41f0.jsonl";
/// The folder the fixture's session worked in, on the laptop.
const THERE: &str = "/home/sam/src/tally";
/// What the person types on the desk.
const MARKER: &str = "now on the desk: quokkaresume";

/// A real agent's binary `tests/agents/install.sh` installs.
fn agent_binary(rel: &str) -> Result<PathBuf> {
    let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("agents/node_modules")
        .join(rel);
    ensure!(
        bin.is_file(),
        "{} is not installed: run tests/agents/install.sh (tests/run.sh does)",
        bin.display()
    );
    Ok(bin)
}

const CLAUDE: &str = "@anthropic-ai/claude-code-linux-x64/claude";
const CODEX: &str = "@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex";

/// The laptop's session, captured: (the machine, the conversation's id).
fn captured_on_the_laptop(central: &Central) -> Result<(Machine, String)> {
    let laptop = Machine::new(central, &central.register("sam.test", "laptop")?)?;
    for rel in [MAIN, SUBAGENT] {
        let dest = laptop
            .path(".claude/projects")
            .join(rel.trim_start_matches("claude-code/"));
        std::fs::create_dir_all(dest.parent().context("a folder")?)?;
        std::fs::write(&dest, fixtures::read(rel))?;
    }
    laptop.ok(&["backfill"])?;
    let c = laptop.json(&["show", SESSION, "--json"])?;
    let id = c["conversation"]["id"]
        .as_str()
        .context("an id")?
        .to_owned();
    Ok((laptop, id))
}

/// Runs a real agent resuming a session (`agent`, ready but for its
/// output): the session id its first line names (`started` reads it from
/// a line, `None` for other lines), once `file` holds a line that is the
/// prompt's turn (`the_prompt`; the agent writes bookkeeping lines naming
/// it first). The agent
/// cannot reach a model here (its API is an address where nothing
/// listens), so it is stopped then.
fn continue_with(
    mut agent: Command,
    started: impl Fn(&Value) -> Option<String>,
    file: &Path,
    the_prompt: impl Fn(&str) -> bool,
) -> Result<String> {
    let mut child = agent
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let result = (|| {
        let (tx, rx) = mpsc::channel();
        let stdout = child.stdout.take().context("stdout")?;
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(90);
        let mut lines = Vec::new();
        let session = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(line) = rx.recv_timeout(left) else {
                bail!("the agent never said it resumed: {lines:?}");
            };
            if let Some(id) = serde_json::from_str::<Value>(&line)
                .ok()
                .as_ref()
                .and_then(&started)
            {
                break id;
            }
            lines.push(line);
        };
        while !std::fs::read_to_string(file)?.lines().any(&the_prompt) {
            ensure!(
                Instant::now() < deadline,
                "the agent did not append the prompt to {}",
                file.display()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(session)
    })();
    stop(&mut child);
    result
}

/// `claude -p --resume SESSION MARKER` in `cwd`, with `home` as its HOME.
fn claude(home: &Path, cwd: &Path, session: &str) -> Result<Command> {
    let mut cmd = Command::new(agent_binary(CLAUDE)?);
    cmd.args([
        "-p",
        "--verbose",
        "--output-format",
        "stream-json",
        "--resume",
        session,
        MARKER,
    ])
    .current_dir(cwd)
    .env_clear()
    .env("HOME", home)
    .env("PATH", "/usr/bin:/bin")
    .env("ANTHROPIC_API_KEY", "sk-ant-dummy")
    .env("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")
    .env("DISABLE_AUTOUPDATER", "1")
    .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1");
    Ok(cmd)
}

/// Claude Code's `system`/`init` line names the session it resumed.
fn claude_started(line: &Value) -> Option<String> {
    (line["type"] == "system" && line["subtype"] == "init")
        .then(|| line["session_id"].as_str().unwrap_or_default().to_owned())
}

fn stop(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_conversation_continues_on_another_machine_with_the_real_claude_code() -> Result<()> {
    let mut central = Central::start()?;
    let (laptop, id) = captured_on_the_laptop(&central)?;
    let desk = Machine::new(&central, &central.register("sam.test", "desk")?)?;
    let checkout = desk.path("work/tally");
    std::fs::create_dir_all(checkout.join(".git"))?;
    let checkout = std::fs::canonicalize(&checkout)?;
    let here = checkout.to_string_lossy().into_owned();
    let slug: String = here
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = desk
        .path(".claude/projects")
        .join(&slug)
        .join(format!("{SESSION}.jsonl"));
    let sub_file = file
        .with_extension("")
        .join("subagents/agent-a6c41f0.jsonl");

    // A dry run says where and writes nothing.
    let dry = run_in(&desk, &checkout, &["resume", &id[..8], "--dry-run"])?;
    ensure!(
        dry.contains("would be written") && dry.contains(&format!("claude --resume {SESSION}")),
        "{dry}"
    );
    ensure!(
        !desk.path(".claude").exists(),
        "a dry run wrote {}",
        file.display()
    );

    // Resumed inside the desk's checkout of the same project.
    let report: Value =
        serde_json::from_str(&run_in(&desk, &checkout, &["resume", &id, "--json"])?)?;
    assert_eq!(report["cwd"], here.as_str());
    assert_eq!(
        report["command"],
        format!("cd {here} && claude --resume {SESSION}")
    );
    assert_eq!(report["files"][0]["path"], file.to_string_lossy().as_ref());
    assert_eq!(
        report["files"][1]["path"],
        sub_file.to_string_lossy().as_ref()
    );
    // Every byte is the laptop's but the working folder.
    let moved = |rel: &str| {
        String::from_utf8_lossy(&fixtures::read(rel)).replace(
            &format!("\"cwd\":\"{THERE}\""),
            &format!("\"cwd\":\"{here}\""),
        )
    };
    let copy = std::fs::read_to_string(&file)?;
    assert_eq!(copy, moved(MAIN));
    assert!(!copy.contains(&format!("\"cwd\":\"{THERE}\"")));
    assert_eq!(std::fs::read_to_string(&sub_file)?, moved(SUBAGENT));
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file)?.permissions().mode() & 0o777,
        0o600
    );
    // Again: nothing to do.
    let again = run_in(&desk, &checkout, &["resume", &id])?;
    ensure!(again.contains("already here"), "{again}");
    assert_eq!(std::fs::read_to_string(&file)?, copy);

    // The real Claude Code finds it and continues it; kith captures that.
    let resumed = continue_with(
        claude(desk.home.root(), &checkout, SESSION)?,
        claude_started,
        &file,
        |line| line.contains(r#""type":"user""#) && line.contains(MARKER),
    )?;
    assert_eq!(resumed, SESSION);
    desk.ok(&["backfill"])?;

    // One conversation: the laptop's turns, then the desk's.
    let api = central.client(&desk.token);
    let c = api.get(&format!("/api/conversations/{id}"))?;
    assert_eq!(c.status, 200, "{c:?}");
    assert_eq!(
        c.body["conversation"]["machines"],
        serde_json::json!(["laptop", "desk"])
    );
    let turns = api.get(&format!("/api/conversations/{id}/turns?limit=500"))?;
    let turns = turns.body["turns"].as_array().context("turns")?.clone();
    ensure!(turns.iter().all(|t| t["role"] != "gap"), "a gap: {turns:?}");
    assert_eq!(turns[0]["machine"], "laptop");
    let last_user = turns
        .iter()
        .rev()
        .find(|t| t["role"] == "user")
        .context("a user turn")?;
    assert_eq!(last_user["machine"], "desk");
    assert!(last_user["text"]
        .as_str()
        .unwrap_or_default()
        .contains(MARKER));
    assert_eq!(
        turns.iter().filter(|t| t["machine"] == "desk").count(),
        turns.iter().skip_while(|t| t["machine"] != "desk").count(),
        "the desk's turns come after every laptop turn"
    );
    // Its bytes: the laptop's, then only what Claude added on the desk.
    let now = std::fs::read(&file)?;
    let (status, bytes) = api.get_bytes(&format!("/api/conversations/{id}/jsonl"))?;
    assert_eq!(status, 200);
    let mut want = fixtures::read(MAIN);
    want.extend_from_slice(&now[copy.len()..]);
    assert!(
        bytes == want,
        "central holds the copy again, or not what the desk added"
    );
    // No second conversation for the session, on either machine's listing.
    let list = api.get("/api/conversations?limit=200")?;
    let same_session = list.body["conversations"]
        .as_array()
        .context("conversations")?
        .iter()
        .filter(|c| c["session_id"] == SESSION && c["depth"] == 0)
        .count();
    assert_eq!(same_session, 1, "{:?}", list.body);
    // Search finds the new prompt in the conversation, and the laptop's
    // words once.
    api.wait_settled(Duration::from_secs(60))?;
    for query in ["quokkaresume", "midnight"] {
        let r = api.post(
            "/api/search",
            &serde_json::json!({"query": query, "mode": "keyword", "group": "conversation"}),
        )?;
        let groups = r.body["groups"].as_array().context("groups")?;
        let ours: Vec<&Value> = groups
            .iter()
            .filter(|g| g["conversation_id"] == id.as_str())
            .collect();
        assert_eq!(ours.len(), 1, "{query}: {:?}", r.body);
    }
    let found = api.post(
        "/api/search",
        &serde_json::json!({"query": "quokkaresume", "mode": "keyword"}),
    )?;
    let hits = found.body["hits"].as_array().context("hits")?;
    assert_eq!(hits.len(), 1, "{:?}", found.body);
    // `kith show` names both machines, and where it moved.
    let shown = String::from_utf8(laptop.ok(&["show", &id])?)?;
    ensure!(
        shown.contains("[laptop → desk]") && shown.contains("continued on desk"),
        "{shown}"
    );

    // A rebuild from the blobs gives the same conversation.
    let before = api
        .get(&format!("/api/conversations/{id}/turns?limit=500"))?
        .body;
    central.kill()?;
    let out = run_central(&central.data_dir, &["reindex"])?;
    ensure!(
        out.status.success(),
        "reindex: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    central.restart()?;
    let after = api
        .get(&format!("/api/conversations/{id}/turns?limit=500"))?
        .body;
    assert_eq!(after, before);
    let c = api.get(&format!("/api/conversations/{id}"))?;
    assert_eq!(
        c.body["conversation"]["machines"],
        serde_json::json!(["laptop", "desk"])
    );
    Ok(())
}

#[test]
fn a_resume_that_cannot_be_done_writes_nothing() -> Result<()> {
    let central = Central::start()?;
    let (_laptop, id) = captured_on_the_laptop(&central)?;
    let desk = Machine::new(&central, &central.register("sam.test", "desk")?)?;
    let stranger = Machine::new(&central, &central.register("ivy.test", "den")?)?;
    let plain = desk.path("plain");
    std::fs::create_dir_all(&plain)?;

    // Another member's conversation is not there for them.
    let said = fails_in(&stranger, &plain, &["resume", &id])?;
    ensure!(said.contains("not found"), "{said}");
    // No folder here for it: the ways to say one.
    let said = fails_in(&desk, &plain, &["resume", &id])?;
    ensure!(
        said.contains("--cwd DIR") && said.contains("[paths]") && said.contains(THERE),
        "{said}"
    );
    let said = fails_in(&desk, &plain, &["resume", &id, "--cwd", "/nonexistent/x"])?;
    ensure!(said.contains("no such folder"), "{said}");
    // Central down: a clear error.
    let down = Machine::at("http://127.0.0.1:9", &desk.token)?;
    std::fs::create_dir_all(down.path("w"))?;
    let said = fails_in(&down, &down.path("w"), &["resume", &id, "--cwd", "."])?;
    ensure!(
        said.contains("127.0.0.1:9") || said.contains("reach"),
        "{said}"
    );
    for m in [&desk, &stranger, &down] {
        ensure!(
            !m.path(".claude").exists(),
            "something was written in {}",
            m.home.root().display()
        );
    }

    // A different file where the session goes is refused, then kept beside.
    let map = format!(
        "[paths]\n\"/home/sam/src\" = \"{}\"\n",
        desk.path("src").display()
    );
    std::fs::create_dir_all(desk.path(".config/kith"))?;
    std::fs::write(desk.path(".config/kith/config.toml"), map)?;
    std::fs::create_dir_all(desk.path("src/tally"))?;
    let here = std::fs::canonicalize(desk.path("src/tally"))?;
    let slug: String = here
        .to_string_lossy()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let file = desk
        .path(".claude/projects")
        .join(slug)
        .join(format!("{SESSION}.jsonl"));
    std::fs::create_dir_all(file.parent().context("a folder")?)?;
    std::fs::write(&file, "{\"mine\":true}\n")?;
    let said = fails_in(&desk, &plain, &["resume", &id])?;
    ensure!(
        said.contains("a different file") && said.contains("--force"),
        "{said}"
    );
    assert_eq!(std::fs::read_to_string(&file)?, "{\"mine\":true}\n");
    let forced = run_in(&desk, &plain, &["resume", &id, "--force"])?;
    ensure!(forced.contains("kept beside"), "{forced}");
    let beside: Vec<_> = std::fs::read_dir(file.parent().context("a folder")?)?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".kith-replaced-"))
        .collect();
    assert_eq!(beside.len(), 1);
    assert_eq!(
        std::fs::read_to_string(beside[0].path())?,
        "{\"mine\":true}\n"
    );
    ensure!(std::fs::read_to_string(&file)?.contains(&format!("\"cwd\":\"{}\"", here.display())));
    Ok(())
}

/// A conversation shared with someone is forked, not continued: what the
/// share covers, under a new session id the real Claude Code resumes, kept
/// as their own conversation naming the one it came from; nothing the
/// owner adds later reaches it, and the owner's conversation is unchanged.
#[test]
fn a_shared_conversation_is_forked_as_ones_own() -> Result<()> {
    let central = Central::start()?;
    let bob = Machine::new(&central, &central.register("bob.test", "laptop")?)?;
    let desk = Machine::new(&central, &central.register("sam.test", "desk")?)?;
    let dest = bob
        .path(".claude/projects")
        .join(MAIN.trim_start_matches("claude-code/"));
    std::fs::create_dir_all(dest.parent().context("a folder")?)?;
    std::fs::write(&dest, fixtures::read(MAIN))?;
    bob.ok(&["backfill"])?;
    let id = bob.json(&["show", SESSION, "--json"])?["conversation"]["id"]
        .as_str()
        .context("an id")?
        .to_owned();
    bob.ok(&["share", "conversation", &id, "--with", "sam.test"])?;
    // Bob goes on after sharing it as it was.
    let later =
        kith_tests::claude_user_line("bob later says wombatlater", "2026-05-10T09:00:00.000Z")
            .replace(
                "\"sessionId\":\"s1\"",
                &format!("\"sessionId\":\"{SESSION}\""),
            );
    std::fs::OpenOptions::new()
        .append(true)
        .open(&dest)
        .and_then(|mut f| std::io::Write::write_all(&mut f, later.as_bytes()))?;
    bob.ok(&["backfill"])?;

    let folder = std::fs::canonicalize({
        let f = desk.path("src/tally");
        std::fs::create_dir_all(&f)?;
        f
    })?;
    let cwd = folder.to_string_lossy().into_owned();
    let report: Value = serde_json::from_str(&run_in(
        &desk,
        &folder,
        &["resume", &id, "--cwd", &cwd, "--json"],
    )?)?;
    let session = report["session_id"]
        .as_str()
        .context("a session")?
        .to_owned();
    assert_ne!(session, SESSION);
    assert_eq!(report["forked_from_session"], SESSION);
    let file = PathBuf::from(report["files"][0]["path"].as_str().context("a path")?);
    assert_eq!(
        file.file_name().map(|n| n.to_string_lossy().into_owned()),
        Some(format!("{session}.jsonl"))
    );
    let copy = std::fs::read_to_string(&file)?;
    ensure!(
        copy.contains(&format!("\"sessionId\":\"{session}\"")),
        "the fork keeps the old id"
    );
    ensure!(
        !copy.contains(SESSION),
        "the fork names the original session"
    );
    ensure!(
        !copy.contains("wombatlater"),
        "the fork holds what the snapshot share does not cover"
    );

    let cmd = claude(desk.home.root(), &folder, &session)?;
    let resumed = continue_with(cmd, claude_started, &file, |line| {
        line.contains(r#""type":"user""#) && line.contains(MARKER)
    })?;
    assert_eq!(resumed, session);
    desk.ok(&["backfill"])?;

    // Sam's own conversation, naming bob's; bob's unchanged and never sam's.
    let sam = central.client(&desk.token);
    let continued = sam.post(
        &format!("/api/conversations/{id}/resume"),
        &serde_json::json!({"source_identity": "x#1:2:0", "at_offset": 10,
            "prefix_sha256": "0".repeat(64)}),
    )?;
    assert_eq!(
        (continued.status, continued.code()),
        (400, "not_owner"),
        "a grantee continues the owner's conversation: {continued:?}"
    );
    let owner_resumes = central.client(&bob.token).post(
        &format!("/api/conversations/{id}/resume"),
        &serde_json::json!({"source_identity": "y#1:2:0", "at_offset": 10,
            "prefix_sha256": "0".repeat(64)}),
    )?;
    assert_eq!(owner_resumes.status, 200, "{owner_resumes:?}");
    let fork = sam.get(&format!("/api/conversations/{session}"))?;
    assert_eq!(fork.status, 200, "{fork:?}");
    let fork = &fork.body["conversation"];
    assert_eq!(fork["owner"], "sam.test");
    assert_eq!(
        fork["forked_from"],
        serde_json::json!({"conversation_id": id, "owner": "bob.test"})
    );
    assert_ne!(fork["id"], id.as_str());
    let shown = String::from_utf8(desk.ok(&["show", &session])?)?;
    ensure!(shown.contains("forked from bob.test's"), "{shown}");
    let bobs = central.client(&bob.token);
    let original = bobs.get(&format!("/api/conversations/{id}"))?;
    assert_eq!(
        original.body["conversation"]["machines"],
        serde_json::json!(["laptop"])
    );
    assert_eq!(original.body["conversation"]["forked_from"], Value::Null);
    let (_, bytes) = bobs.get_bytes(&format!("/api/conversations/{id}/jsonl"))?;
    ensure!(
        !String::from_utf8_lossy(&bytes).contains("quokkaresume"),
        "sam's turn reached bob"
    );
    let not_bobs = bobs.get(&format!(
        "/api/conversations/{}",
        fork["id"].as_str().unwrap_or_default()
    ))?;
    assert_eq!(not_bobs.status, 404, "bob reads sam's fork: {not_bobs:?}");
    Ok(())
}

const CODEX_SESSION: &str = "019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4";
const CODEX_ROLLOUT: &str =
    "codex/2026/05/11/rollout-2026-05-11T14-02-09-019e17a2-4c3b-7d10-9a6e-52f0c8b1d3e4.jsonl";

/// The same with Codex: `codex exec resume` (Codex 0.171.0) finds the
/// rollout kith wrote in another folder and appends to it.
#[test]
fn a_codex_session_continues_on_another_machine_with_the_real_codex() -> Result<()> {
    let central = Central::start()?;
    let laptop = Machine::new(&central, &central.register("sam.test", "laptop")?)?;
    let there = laptop
        .path(".codex/sessions")
        .join(CODEX_ROLLOUT.trim_start_matches("codex/"));
    std::fs::create_dir_all(there.parent().context("a folder")?)?;
    std::fs::write(&there, fixtures::read(CODEX_ROLLOUT))?;
    laptop.ok(&["backfill"])?;
    let c = laptop.json(&["show", CODEX_SESSION, "--json"])?;
    let id = c["conversation"]["id"]
        .as_str()
        .context("an id")?
        .to_owned();

    let desk = Machine::new(&central, &central.register("sam.test", "desk")?)?;
    let folder = desk.path("code/tally");
    std::fs::create_dir_all(folder.join(".git"))?;
    let folder = std::fs::canonicalize(folder)?;
    let report: Value = serde_json::from_str(&run_in(
        &desk,
        &desk.path("."),
        &["resume", &id, "--cwd", &folder.to_string_lossy(), "--json"],
    )?)?;
    let file = PathBuf::from(report["files"][0]["path"].as_str().context("a path")?);
    // Codex finds a rollout anywhere under sessions/ by the id ending its name.
    let name = file
        .file_name()
        .context("a name")?
        .to_string_lossy()
        .into_owned();
    ensure!(
        file.starts_with(desk.path(".codex/sessions"))
            && name.starts_with("rollout-2026-05-11T")
            && name.ends_with(&format!("-{CODEX_SESSION}.jsonl")),
        "{}",
        file.display()
    );
    assert_eq!(
        report["command"],
        format!("cd {} && codex resume {CODEX_SESSION}", folder.display())
    );
    let copy = std::fs::read(&file)?;
    let want = String::from_utf8_lossy(&fixtures::read(CODEX_ROLLOUT)).replace(
        "\"cwd\":\"/home/sam/src/tally\"",
        &format!("\"cwd\":\"{}\"", folder.display()),
    );
    assert_eq!(String::from_utf8_lossy(&copy), want);

    std::fs::write(
        desk.path(".codex/config.toml"),
        "openai_base_url = \"http://127.0.0.1:9/v1\"\n",
    )?;
    let mut codex = Command::new(agent_binary(CODEX)?);
    codex
        .args([
            "exec",
            "resume",
            "--json",
            "--skip-git-repo-check",
            CODEX_SESSION,
            MARKER,
        ])
        .current_dir(&folder)
        .env_clear()
        .env("HOME", desk.home.root())
        .env("CODEX_HOME", desk.path(".codex"))
        .env("PATH", "/usr/bin:/bin")
        .env("OPENAI_API_KEY", "sk-dummy");
    let started = |line: &Value| {
        (line["type"] == "thread.started")
            .then(|| line["thread_id"].as_str().unwrap_or_default().to_owned())
    };
    assert_eq!(
        continue_with(codex, started, &file, |line| {
            line.contains(r#""type":"response_item""#)
                && line.contains(r#""role":"user""#)
                && line.contains(MARKER)
        })?,
        CODEX_SESSION
    );
    desk.ok(&["backfill"])?;

    let api = central.client(&desk.token);
    let c = api.get(&format!("/api/conversations/{id}"))?;
    assert_eq!(
        c.body["conversation"]["machines"],
        serde_json::json!(["laptop", "desk"])
    );
    let now = std::fs::read(&file)?;
    let (status, bytes) = api.get_bytes(&format!("/api/conversations/{id}/jsonl"))?;
    assert_eq!(status, 200);
    let mut want = fixtures::read(CODEX_ROLLOUT);
    want.extend_from_slice(&now[copy.len()..]);
    assert!(
        bytes == want,
        "central holds the copy again, or not what the desk added"
    );
    let turns = api
        .get(&format!("/api/conversations/{id}/turns?limit=500"))?
        .body;
    let turns = turns["turns"].as_array().context("turns")?;
    ensure!(turns.iter().all(|t| t["role"] != "gap"), "a gap: {turns:?}");
    let last_user = turns
        .iter()
        .rev()
        .find(|t| t["role"] == "user")
        .context("a user turn")?;
    assert_eq!(last_user["machine"], "desk");
    assert!(last_user["text"]
        .as_str()
        .unwrap_or_default()
        .contains(MARKER));
    Ok(())
}

/// `kith ARGS` run in `dir`, which must succeed: its stdout.
fn run_in(m: &Machine, dir: &Path, args: &[&str]) -> Result<String> {
    let out = m.command(args).current_dir(dir).output()?;
    ensure!(
        out.status.success(),
        "kith {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// `kith ARGS` run in `dir`, which must fail: its stderr.
fn fails_in(m: &Machine, dir: &Path, args: &[&str]) -> Result<String> {
    let out = m.command(args).current_dir(dir).output()?;
    ensure!(
        !out.status.success(),
        "kith {args:?} succeeded: {}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(String::from_utf8(out.stderr)?)
}
