//! Gemini CLI, Copilot CLI, Cursor, OpenCode and Aider end to end: each
//! session is written the way its agent writes it (appends; Gemini also
//! re-appends a message, `$set`s and `$rewindTo`s; OpenCode updates and
//! deletes SQLite rows from another process, or rewrites its JSON files),
//! captured by the real `kith` while the real `kith-central` is killed and
//! started again on its data, then read back and searched through the API.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kith_shared::fixtures;
use kith_shared::transcript::{self, Format};
use kith_tests::{run_central, str_of, Api, Background, Central};
use serde_json::{json, Value};

const GEMINI: &str = "gemini/tally/chats/session-2026-05-13T09-14-7c1e4a2b.jsonl";
const GEMINI_SUBAGENT: &str = "gemini/tally/chats/7c1e4a2b-5d3f-4e6a-9b80-2f4d6c8a1e35/b41d09e6-2c7a-4f53-8e1b-6a9d3c5e7f20.jsonl";
const COPILOT: &str = "copilot/3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30/events.jsonl";
const CURSOR: &str =
    "cursor/home-sam-src-tally/agent-transcripts/5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73.jsonl";
const CURSOR_SUBAGENT: &str = "cursor/home-sam-src-tally/agent-transcripts/5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73/subagents/9c4f1a7e-3b2d-4c85-a0e6-7d1f2b9c3e58.jsonl";
/// Aider's history of the project `tally`: two sessions.
const AIDER: &str = "aider/tally/.aider.chat.history.md";
/// Its second session's header is line 48.
const AIDER_SECOND_SESSION: usize = 47;

/// A machine with one agent's sessions and the real `kith`, sending to a
/// central that is killed and restarted while the session is written.
struct Machine {
    /// The machine, logged in to `central` (a restarted central listens on
    /// the same address).
    machine: kith_tests::Machine,
    _data: tempfile::TempDir,
    central: Central,
    api: Api,
}

impl Machine {
    fn new() -> Result<Self> {
        let data = tempfile::tempdir()?;
        let central = Central::start_on(&data.path().join("data"), &[])?;
        let token = central.register("me.test", "laptop")?;
        let api = central.client(&token);
        Ok(Self {
            machine: kith_tests::Machine::new(&central, &token)?,
            _data: data,
            central,
            api,
        })
    }

    fn kith(&self, args: &[&str]) -> Result<Output> {
        self.machine.kith(args, b"")
    }

    fn ok(&self, args: &[&str]) -> Result<Vec<u8>> {
        self.machine.ok(args)
    }

    /// Where the agent writes the repository fixture `rel` (Aider: in the
    /// project, `~/src/<project>/`).
    fn dest(&self, rel: &str) -> PathBuf {
        if let Some(project) = rel.strip_prefix("aider/") {
            return self.machine.home.path("src").join(project);
        }
        let f = fixtures::get(rel);
        self.machine
            .home
            .root()
            .join(fixtures::sessions_folder(f.runtime))
            .join(f.layout)
    }

    /// Appends lines `from..to` of the fixture `rel` to where its agent
    /// writes it, in one write, as an agent appends what it has to say
    /// (an Aider message spans lines: the tests cut its history between
    /// messages, and a capture never sees half of one).
    fn write(&self, rel: &str, from: usize, to: usize) -> Result<()> {
        let dest = self.dest(rel);
        std::fs::create_dir_all(dest.parent().context("a folder")?)?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&dest)?;
        let src = String::from_utf8(fixtures::read(rel))?;
        let lines: String = src
            .lines()
            .take(to)
            .skip(from)
            .map(|line| format!("{line}\n"))
            .collect();
        file.write_all(lines.as_bytes())?;
        Ok(())
    }

    /// `main`'s first `split` lines and all of `others` are captured; then
    /// central dies, the rest of `main` is written and spooled, central
    /// comes back and gets it. Returns the conversation of `main`.
    fn capture_across_a_restart(
        &mut self,
        main: &str,
        split: usize,
        others: &[&str],
    ) -> Result<Value> {
        self.write(main, 0, split)?;
        for other in others {
            self.write(other, 0, usize::MAX)?;
        }
        self.ok(&["backfill"])?;
        self.central.kill()?;
        self.write(main, split, usize::MAX)?;
        // Central is away: the rest waits in the outbox.
        let _ = self.kith(&["backfill"])?;
        self.central.restart()?;
        self.ok(&["backfill"])?;
        self.root_conversation()
    }

    /// The one conversation at depth 0 (the others are its subagents),
    /// once every run of it is indexed.
    fn root_conversation(&self) -> Result<Value> {
        let listed = self.api.get("/api/conversations?limit=100")?;
        let conversation = listed.body["conversations"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["depth"] == 0)
            .cloned()
            .with_context(|| format!("no conversation: {listed:?}"))?;
        for run in conversation["run_ids"].as_array().into_iter().flatten() {
            let run = run.as_str().unwrap_or_default();
            self.api.wait_indexed(run, Duration::from_secs(30))?;
        }
        Ok(conversation)
    }

    /// The conversation's turns as the API gives them: (role, text).
    fn turns(&self, conversation: &Value) -> Result<Vec<(String, String)>> {
        let id = conversation["id"].as_str().unwrap_or_default();
        let r = self
            .api
            .get(&format!("/api/conversations/{id}/turns?limit=1000"))?;
        ensure!(r.status == 200, "{r:?}");
        Ok(r.body["turns"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| (str_of(t, "role"), str_of(t, "text")))
            .collect())
    }

    /// Keyword search: the conversation of each hit.
    fn found(&self, word: &str) -> Result<Vec<String>> {
        let r = self
            .api
            .post("/api/search", &json!({"query": word, "mode": "keyword"}))?;
        ensure!(r.status == 200, "{r:?}");
        Ok(r.body["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| str_of(h, "conversation_id"))
            .collect())
    }

    /// `kith hook` with an agent's hook `payload` on stdin, as the agent
    /// runs it (exit 0, nothing on stdout).
    fn hook(&self, payload: &Value) -> Result<()> {
        self.machine.hook(&[], payload)
    }

    /// Waits (30 s at most) until a keyword search finds `word`.
    fn wait_found(&self, word: &str) -> Result<()> {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while self.found(word)?.is_empty() {
            let log = std::fs::read_to_string(self.machine.home.path(".local/state/kith/hook.log"));
            ensure!(
                std::time::Instant::now() < deadline,
                "{word} never found; hook log: {log:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        Ok(())
    }

    /// `kith status`'s row for `runtime`: (files, bytes on disk, accepted, pending).
    fn coverage(&self, runtime: &str) -> Result<[u64; 4]> {
        let status = String::from_utf8(self.ok(&["status"])?)?;
        let row = status
            .lines()
            .find(|l| l.split_whitespace().next() == Some(runtime))
            .with_context(|| format!("no {runtime} row: {status}"))?;
        // The `at risk` column after these is `-` for most agents.
        let n: Vec<u64> = row
            .split_whitespace()
            .skip(1)
            .take(4)
            .map(str::parse)
            .collect::<Result<_, _>>()?;
        n.try_into()
            .map_err(|n| anyhow::anyhow!("{runtime} row: {n:?}"))
    }

    /// Every file of `runtime` is covered: `files` of them, all accepted.
    fn assert_covered(&self, runtime: &str, files: u64) -> Result<()> {
        let [n, on_disk, accepted, pending] = self.coverage(runtime)?;
        assert_eq!((n, pending), (files, 0), "{runtime}");
        assert!(on_disk > 0 && accepted == on_disk, "{runtime}");
        Ok(())
    }

    /// `kith tree --json`: (conversation id, parent id) of each.
    fn tree(&self) -> Result<Vec<(String, String)>> {
        let tree: Value = serde_json::from_slice(&self.ok(&["tree", "--json"])?)?;
        Ok(tree["conversations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| (str_of(c, "id"), str_of(c, "parent_id")))
            .collect())
    }
}

fn format_of(rel: &str) -> Format {
    Format::of_runtime(rel.split('/').next().unwrap_or_default())
}

/// What the agent's final file says, read whole: (role, text) of each turn.
fn final_state(rel: &str) -> Vec<(String, String)> {
    transcript::parse(format_of(rel), &fixtures::read(rel))
        .turns
        .into_iter()
        .map(|t| (t.role.as_str().to_owned(), t.text))
        .collect()
}

/// The read-back equals the final state: every live turn once, in order,
/// nothing else (no gap, no stale or repeated turn).
fn assert_final_state(got: &[(String, String)], rel: &str) {
    let want = final_state(rel);
    assert!(want.len() >= 5, "{rel}: {want:#?}");
    assert_eq!(got, want, "{rel}");
    let distinct: BTreeSet<_> = got.iter().collect();
    assert_eq!(distinct.len(), got.len(), "{rel}: a turn twice");
}

#[test]
fn gemini_rewind_and_reappended_message_across_a_central_restart() -> Result<()> {
    let mut m = Machine::new()?;
    // Lines 1-8 hold the tool call before its result, and the prompt and
    // answer the rewind (line 9) drops: all captured before central dies.
    let conversation = m.capture_across_a_restart(GEMINI, 8, &[GEMINI_SUBAGENT])?;
    assert_eq!(conversation["agent_runtime"], "gemini");
    m.assert_covered("gemini", 2)?;
    assert_eq!(
        m.coverage("claude-code")?,
        [0; 4],
        "nothing else is counted"
    );
    assert_eq!(conversation["delta_count"].as_u64(), Some(2));
    let turns = m.turns(&conversation)?;
    assert_final_state(&turns, GEMINI);
    let said = format!("{turns:?}");
    assert!(!said.contains("zeppelin"), "a rewound turn: {said}");
    assert_eq!(
        said.matches("read_file: /home/sam/src/tally/src/parse.rs")
            .count(),
        1,
        "the re-appended message once, with its result: {said}"
    );
    assert!(said.contains("Read 42 lines from src/parse.rs"), "{said}");
    assert!(
        turns
            .last()
            .is_some_and(|(_, t)| t.ends_with("so both gain the fix.")),
        "{turns:?}"
    );

    let id = str_of(&conversation, "id");
    assert_eq!(m.found("gain")?, [id.as_str()], "the last turn is found");
    assert!(m.found("zeppelin")?.is_empty(), "a rewound turn is not");

    // The subagent in `chats/<session id>/` hangs under its session.
    let tree = m.tree()?;
    assert_eq!(tree.len(), 2, "{tree:?}");
    assert_eq!(tree[0], (id.clone(), String::new()));
    assert_eq!(tree[1].1, id, "{tree:?}");
    let subagent = tree[1].0.clone();
    // `kith tree <session>`: the session, and its subagent one level
    // under it; never the subagent as a conversation of its own.
    let one: Value = serde_json::from_slice(&m.ok(&["tree", &id[..8], "--json"])?)?;
    let shape: Vec<(String, String, u64)> = one["conversations"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            (
                str_of(c, "id"),
                str_of(c, "parent_id"),
                c["depth"].as_u64().unwrap_or(9),
            )
        })
        .collect();
    assert_eq!(
        shape,
        [
            (id.clone(), String::new(), 0),
            (subagent.clone(), id.clone(), 1)
        ]
    );
    let text = String::from_utf8(m.ok(&["tree", &id])?)?;
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("● ") && lines[0].contains("thousands separator"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("  └ ") && lines[1].contains("Find every caller of parse_amount"),
        "{text}"
    );
    let all = String::from_utf8(m.ok(&["tree"])?)?;
    assert_eq!(
        all.lines().filter(|l| l.starts_with('●')).count(),
        1,
        "one top-level conversation: {all}"
    );
    // Named by the subagent, the tree starts at the subagent.
    let below: Value = serde_json::from_slice(&m.ok(&["tree", &subagent, "--json"])?)?;
    assert_eq!(below["conversations"].as_array().map(Vec::len), Some(1));
    assert_eq!(below["conversations"][0]["parent_id"], json!(id));

    // Doctor counts the chunks a chain read whole gives, and so does a
    // rebuild from the blobs: the rewound turn stays out of search.
    m.central.kill()?;
    let data = m.central.data_dir.clone();
    for args in [&["doctor"][..], &["reindex"], &["doctor"]] {
        let out = run_central(&data, args)?;
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{args:?}: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    m.central.restart()?;
    assert!(m.found("zeppelin")?.is_empty(), "rewound, after a reindex");
    assert_eq!(m.found("gain")?, [id.as_str()]);
    Ok(())
}

/// A message of a Gemini CLI session.
fn gemini_message(id: &str, kind: &str, content: &str, minute: u32) -> Value {
    json!({
        "id": id,
        "timestamp": format!("2025-12-06T18:{minute:02}:00.000Z"),
        "type": kind,
        "content": content,
    })
}

/// A Gemini CLI session before v0.39: one object, pretty-printed, written
/// whole on every update.
fn gemini_legacy(messages: &[&Value]) -> Result<Vec<u8>> {
    Ok(serde_json::to_vec_pretty(&json!({
        "sessionId": "7c1e4a2b-0d6f-4a8e-b3c5-1e9f2a7d4c60",
        "projectHash": "28be4f5feb651b48879e1281570b925ec19d4e00cd5aa13d3b3f17fe9efd858d",
        "startTime": "2025-12-06T18:25:18.042Z",
        "lastUpdated": format!("2025-12-06T18:{:02}:00.000Z", 25 + messages.len()),
        "messages": messages,
    }))?)
}

#[test]
fn gemini_legacy_json_rewritten_whole_across_a_central_restart() -> Result<()> {
    let mut m = Machine::new()?;
    let chats = m.machine.home.path(".gemini/tmp/tally/chats");
    std::fs::create_dir_all(&chats)?;
    let file = chats.join("session-2025-12-06T18-25-7c1e4a2b.json");
    let ask = gemini_message("m1", "user", "Please add a parser for tally receipts", 25);
    let draft = gemini_message("m2", "gemini", "Here is a draft parser, untested.", 26);
    let answer = gemini_message(
        "m2",
        "gemini",
        "Here is the parser, with receipts validated.",
        26,
    );
    let aside = gemini_message("m3", "user", "Now explain the zeppelin cache.", 27);
    let aside_answer = gemini_message("m4", "gemini", "The zeppelin cache keeps receipts.", 28);
    let instead = gemini_message("m5", "user", "Instead, fix the tokenizer.", 29);
    let last = gemini_message(
        "m6",
        "gemini",
        "Fixed the tokenizer so both gain the fix.",
        30,
    );

    std::fs::write(&file, gemini_legacy(&[&ask, &draft])?)?;
    m.ok(&["backfill"])?;
    // Gemini CLI caught mid-rewrite: the torn file is refused with its
    // reason, and its whole successor is read.
    let second = gemini_legacy(&[&ask, &answer, &aside, &aside_answer])?;
    std::fs::write(&file, &second[..second.len() / 2])?;
    let torn = m.kith(&["backfill"])?;
    let said = String::from_utf8_lossy(&torn.stderr);
    assert!(said.contains("not valid Gemini CLI session JSON"), "{said}");
    std::fs::write(&file, &second)?;
    m.ok(&["backfill"])?;
    // Central dies; the session is rewound past m3 and goes on.
    m.central.kill()?;
    std::fs::write(&file, gemini_legacy(&[&ask, &answer, &instead, &last])?)?;
    let _ = m.kith(&["backfill"])?;
    m.central.restart()?;
    m.ok(&["backfill"])?;

    let listed = m.api.get("/api/conversations?limit=100")?;
    let conversations = listed.body["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conversations.len(), 1, "{listed:?}");
    let conversation = &conversations[0];
    assert_eq!(conversation["agent_runtime"], "gemini");
    for run in conversation["run_ids"].as_array().into_iter().flatten() {
        m.api
            .wait_indexed(run.as_str().unwrap_or_default(), Duration::from_secs(30))?;
    }
    let text = |v: &Value| str_of(v, "content");
    let want: Vec<(String, String)> = [
        ("user", text(&ask)),
        ("assistant", text(&answer)),
        ("user", text(&instead)),
        ("assistant", text(&last)),
    ]
    .into_iter()
    .map(|(role, t)| (role.to_owned(), t))
    .collect();
    assert_eq!(m.turns(conversation)?, want, "the file's final state, once");

    let id = str_of(conversation, "id");
    assert_eq!(m.found("gain")?, [id.as_str()], "the last turn is found");
    assert_eq!(m.found("validated")?, [id.as_str()], "the edited answer");
    assert_eq!(m.found("tally")?, [id.as_str()], "the first delta's turn");
    assert!(m.found("zeppelin")?.is_empty(), "a rewound turn is not");
    assert!(
        m.found("untested")?.is_empty(),
        "nor an answer's earlier text"
    );
    m.assert_covered("gemini", 1)?;

    // Nothing captured is lost: the journal kith sent holds every version.
    let journal = m.machine.home.path(
        ".local/state/kith/journals/gemini/tally/chats/session-2025-12-06T18-25-7c1e4a2b.jsonl",
    );
    let kept = std::fs::read_to_string(&journal)?;
    for word in ["untested", "zeppelin", "validated", "gain"] {
        assert!(kept.contains(word), "{word} in {kept}");
    }
    assert_eq!(kept.matches("untested").count(), 1, "each version once");

    // A published legacy session (../shared), when present, in addition:
    // every message with text becomes a turn, the first the user's.
    let rel = "gemini/git-ai-project__git-ai__gemini-session-simple.json";
    if let Some(bytes) = fixtures::third_party(rel) {
        let m = Machine::new()?;
        let chats = m.machine.home.path(".gemini/tmp/p/chats");
        std::fs::create_dir_all(&chats)?;
        std::fs::write(chats.join("session-2025-12-06T18-25-18f475c0.json"), &bytes)?;
        m.ok(&["backfill"])?;
        let listed = m.api.get("/api/conversations?limit=10")?;
        let conversation = listed.body["conversations"][0].clone();
        assert_eq!(conversation["agent_runtime"], "gemini", "{listed:?}");
        let turns = m.turns(&conversation)?;
        let source: Value = serde_json::from_slice(&bytes)?;
        let first = source["messages"][0]["content"]
            .as_str()
            .unwrap_or_default();
        assert_eq!(
            turns.first().map(|(r, t)| (r.as_str(), t.as_str())),
            Some(("user", first))
        );
        assert!(turns.len() >= 7, "{turns:?}");
    }
    Ok(())
}

/// Each delta of a Gemini session re-reads its whole chain, but only the
/// runs whose turns changed are indexed again: an earlier delta a later
/// one leaves alone keeps its vectors; one whose message was appended
/// again (and so moved) gets new ones.
#[test]
fn a_gemini_delta_reindexes_only_the_runs_it_changed() -> Result<()> {
    kith_tests::model_dir()?.context("needs the embedding model (tests/run.sh installs it)")?;
    let m = Machine::new()?;
    let file = m
        .machine
        .home
        .path(".gemini/tmp/tally/chats/session-2026-05-13T09-14-3d9e1b7a.jsonl");
    std::fs::create_dir_all(file.parent().context("a folder")?)?;
    let line = |v: Value| format!("{v}\n");
    let message = |id: &str, kind: &str, text: &str| {
        line(
            json!({"id": id, "timestamp": "2026-05-13T09:15:00.000Z", "type": kind, "content": text}),
        )
    };
    let append = |text: &str| -> Result<()> {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&file)?;
        f.write_all(text.as_bytes())?;
        Ok(())
    };
    let embedded_at = |run: &str| -> Result<String> {
        let body = m.api.wait_embedded(run, Duration::from_secs(60))?;
        Ok(str_of(&body, "embedded_at"))
    };
    let runs = |m: &Machine| -> Result<Vec<String>> {
        let c = m.root_conversation()?;
        Ok(c["run_ids"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|r| r.as_str().unwrap_or_default().to_owned())
            .collect())
    };
    append(&line(
        json!({"sessionId": "3d9e1b7a-4c2f-4e8a-9b61-0f5d2a7c8e14",
        "projectHash": "ab", "startTime": "2026-05-13T09:14:00.000Z", "kind": "main"}),
    ))?;
    append(&message(
        "m1",
        "user",
        "Where does the parser round amounts?",
    ))?;
    append(&message("m2", "gemini", "In parse_amount, to two places."))?;
    m.ok(&["backfill"])?;
    append(&message("m3", "user", "Add a test for negative amounts."))?;
    append(&message(
        "m4",
        "gemini",
        "Added a test for negative amounts.",
    ))?;
    m.ok(&["backfill"])?;
    let [first, second] =
        <[String; 2]>::try_from(runs(&m)?).map_err(|r| anyhow::anyhow!("{r:?}"))?;
    let (first_at, second_at) = (embedded_at(&first)?, embedded_at(&second)?);

    // A delta of new messages only: the earlier runs keep their vectors.
    append(&message("m5", "user", "Thanks."))?;
    m.ok(&["backfill"])?;
    let third = runs(&m)?.last().cloned().context("a third run")?;
    embedded_at(&third)?;
    assert_eq!(
        embedded_at(&first)?,
        first_at,
        "the first run was left alone"
    );
    assert_eq!(
        embedded_at(&second)?,
        second_at,
        "the second run was left alone"
    );

    // m2 appended again: it leaves the first run for the fourth.
    append(&message(
        "m2",
        "gemini",
        "In parse_amount, to two places (banker's rounding).",
    ))?;
    m.ok(&["backfill"])?;
    let fourth = runs(&m)?.last().cloned().context("a fourth run")?;
    embedded_at(&fourth)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while embedded_at(&first)? == first_at {
        ensure!(
            std::time::Instant::now() < deadline,
            "the changed first run kept its old vectors"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        embedded_at(&second)?,
        second_at,
        "the second run is unchanged"
    );
    Ok(())
}

#[test]
fn gemini_legacy_rewrites_reach_central_through_the_hook_and_watch() -> Result<()> {
    let m = Machine::new()?;
    let chats = m.machine.home.path(".gemini/tmp/tally/chats");
    std::fs::create_dir_all(&chats)?;
    let file = chats.join("session-2025-12-06T18-25-7c1e4a2b.json");
    let ask = gemini_message("m1", "user", "Please add a parser for tally receipts", 25);
    let answer = gemini_message("m2", "gemini", "Here is the quokka parser.", 26);
    std::fs::write(&file, gemini_legacy(&[&ask, &answer])?)?;
    // Gemini CLI's AfterAgent hook names the legacy file.
    let payload = json!({
        "session_id": "7c1e4a2b-0d6f-4a8e-b3c5-1e9f2a7d4c60",
        "transcript_path": file,
        "hook_event_name": "AfterAgent",
    });
    m.hook(&payload)?;
    m.wait_found("quokka")?;

    let watch = m.machine.watch()?;
    let edited = gemini_message("m2", "gemini", "Here is the wombat parser.", 26);
    std::fs::write(&file, gemini_legacy(&[&ask, &edited])?)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while m.found("wombat")?.is_empty() {
        ensure!(
            std::time::Instant::now() < deadline,
            "the rewrite never arrived"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    drop(watch);
    assert!(
        m.found("quokka")?.is_empty(),
        "the answer's old text is retired"
    );
    Ok(())
}

#[test]
fn copilot_events_across_a_central_restart() -> Result<()> {
    let mut m = Machine::new()?;
    // Split between two turns: a tool call whose result comes in a later
    // delta reads as two turns, as in every append-only format.
    let conversation = m.capture_across_a_restart(COPILOT, 9, &[])?;
    assert_eq!(conversation["agent_runtime"], "copilot");
    m.assert_covered("copilot", 1)?;
    assert_eq!(conversation["git_branch"], "fix-dates");
    let turns = m.turns(&conversation)?;
    assert_final_state(&turns, COPILOT);
    let said = format!("{turns:?}");
    assert!(
        said.contains("Only src/report.rs:31 uses ordinal()."),
        "the subagent's answer"
    );
    assert!(
        !said.contains("current_datetime"),
        "text the CLI injected: {said}"
    );
    let id = str_of(&conversation, "id");
    assert_eq!(m.found("April")?, [id.as_str()]);
    assert!(m.found("premium")?.is_empty(), "usage is not a turn");
    Ok(())
}

/// A Copilot CLI `task` subagent lives inside its session's
/// `events.jsonl`: it is a node under its session in `kith tree` (name,
/// what it was asked, turns, time span), its turns are marked in the
/// session's turns and readable alone, and a search hit inside it says so.
/// The first delta ends with the subagent's completion; the session's
/// result of the call that started it comes in the second.
#[test]
fn copilot_subagent_is_a_node_under_its_session() -> Result<()> {
    let mut m = Machine::new()?;
    let conversation = m.capture_across_a_restart(COPILOT, 16, &[])?;
    let id = str_of(&conversation, "id");
    assert_eq!(conversation["delta_count"].as_u64(), Some(2));

    // The session's turns: the subagent's marked, the session's own not.
    let r = m
        .api
        .get(&format!("/api/conversations/{id}/turns?limit=1000"))?;
    let marked: Vec<(String, String)> = r.body["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (str_of(t, "subagent"), str_of(t, "text")))
        .collect();
    let theirs: Vec<&str> = marked
        .iter()
        .filter(|(s, _)| s == "toolu_task_01")
        .map(|(_, t)| t.as_str())
        .collect();
    assert!(
        theirs.contains(&"Only src/report.rs:31 uses ordinal()."),
        "{marked:?}"
    );
    assert!(
        theirs.iter().any(|t| t.starts_with("grep: ")),
        "its tool call: {marked:?}"
    );
    assert!(
        marked
            .iter()
            .any(|(s, t)| s.is_empty() && t.starts_with("Dividing the day")),
        "the session's answer is its own: {marked:?}"
    );
    assert!(
        marked
            .iter()
            .all(|(s, _)| s.is_empty() || s == "toolu_task_01"),
        "{marked:?}"
    );

    // `kith tree`: one conversation, the subagent a node under it.
    let tree: Value = serde_json::from_slice(&m.ok(&["tree", "--json"])?)?;
    let conversations = tree["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conversations.len(), 1, "{tree}");
    assert_eq!(
        conversations[0]["inline_subagents"],
        json!([{
            "id": "toolu_task_01",
            "name": "explore",
            "description": "Check other ordinal uses",
            "turn_count": theirs.len(),
            "started_at": "2026-05-14T18:02:26.100Z",
            "ended_at": "2026-05-14T18:02:28.100Z",
        }])
    );
    let one: Value = serde_json::from_slice(&m.ok(&["tree", &id, "--json"])?)?;
    assert_eq!(one["conversations"], tree["conversations"]);
    let text = String::from_utf8(m.ok(&["tree", &id])?)?;
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("● "), "{text}");
    assert!(
        lines[1].starts_with("  └ ▸ explore Check other ordinal uses")
            && lines[1].contains(&format!("{} turns", theirs.len())),
        "{text}"
    );

    // `kith show --subagent`: its turns alone; `kith show` marks them.
    let show: Value =
        serde_json::from_slice(&m.ok(&["show", &id, "--subagent", "explore", "--json"])?)?;
    let shown: Vec<String> = show["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| str_of(t, "text"))
        .collect();
    assert_eq!(shown, theirs, "{show}");
    let out = m.kith(&["show", &id, "--subagent", "nobody"])?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("explore (toolu_task_01)"),
        "{out:?}"
    );
    let whole = String::from_utf8(m.ok(&["show", &id])?)?;
    let at = whole
        .find("▸ subagent explore Check other ordinal uses")
        .with_context(|| whole.clone())?;
    assert!(
        whole[at..].contains("\n  Only src/report.rs:31 uses ordinal()."),
        "its turns indented under it: {whole}"
    );
    assert!(whole[..at].contains("I'll look at how months"), "{whole}");

    // Search: a hit inside the subagent names it; the session's does not.
    let hits = |word: &str| -> Result<Vec<Value>> {
        let r = m
            .api
            .post("/api/search", &json!({"query": word, "mode": "keyword"}))?;
        ensure!(r.status == 200, "{r:?}");
        Ok(r.body["hits"].as_array().cloned().unwrap_or_default())
    };
    let inside = hits("uses")?;
    assert!(
        inside.iter().any(|h| h["subagent"]["name"] == "explore"
            && str_of(h, "text").contains("Only src/report.rs:31")),
        "{inside:?}"
    );
    let outside = hits("April")?;
    assert_eq!(outside.len(), 1, "{outside:?}");
    assert!(outside[0].get("subagent").is_none(), "{outside:?}");
    let grouped = String::from_utf8(m.ok(&["search", "uses", "--mode", "keyword"])?)?;
    assert!(grouped.contains("[subagent explore]"), "{grouped}");

    // A published session (when the third-party set is beside the
    // repository), in addition: its `task` subagent is a node too.
    if let Some(bytes) =
        fixtures::third_party("copilot/qiaolei81__copilot-session-viewer__events.jsonl")
    {
        let dest = m
            .machine
            .home
            .root()
            .join(".copilot/session-state/030f200c-c26f-4ef0-9099-6d1156c83631");
        std::fs::create_dir_all(&dest)?;
        std::fs::write(dest.join("events.jsonl"), bytes)?;
        m.ok(&["backfill"])?;
        let tree: Value = serde_json::from_slice(&m.ok(&["tree", "--json"])?)?;
        let real = tree["conversations"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["session_id"] == "030f200c-c26f-4ef0-9099-6d1156c83631")
            .with_context(|| format!("{tree}"))?;
        let subagents = real["inline_subagents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(subagents.len(), 1, "{real}");
        assert_eq!(subagents[0]["name"], "explore");
        assert_eq!(
            subagents[0]["description"],
            "Inspect hello.py and README.md"
        );
    }
    Ok(())
}

#[test]
fn cursor_transcript_and_its_subagent_across_a_central_restart() -> Result<()> {
    let mut m = Machine::new()?;
    let conversation = m.capture_across_a_restart(CURSOR, 3, &[CURSOR_SUBAGENT])?;
    assert_eq!(conversation["agent_runtime"], "cursor");
    m.assert_covered("cursor", 2)?;
    let turns = m.turns(&conversation)?;
    assert_final_state(&turns, CURSOR);
    assert!(!format!("{turns:?}").contains("REDACTED"));
    let id = str_of(&conversation, "id");
    assert_eq!(m.found("entries")?, [id.as_str()]);
    assert!(m.found("REDACTED")?.is_empty());
    let tree = m.tree()?;
    assert_eq!(tree.len(), 2, "{tree:?}");
    assert_eq!(tree[1].1, id, "the subagent under its session: {tree:?}");
    Ok(())
}

/// `kith install gemini` puts kith's hook in Gemini CLI's settings; the
/// payload Gemini sends after a turn (AfterAgent) names the transcript,
/// which the hook captures and sends, printing nothing on stdout (Gemini
/// reads a hook's stdout as JSON).
#[test]
fn gemini_after_agent_hook_captures_the_session_it_names() -> Result<()> {
    let m = Machine::new()?;
    m.ok(&["install", "gemini"])?;
    let settings: Value = serde_json::from_slice(&std::fs::read(
        m.machine.home.root().join(".gemini/settings.json"),
    )?)?;
    let command = settings["hooks"]["AfterAgent"][0]["hooks"][0]["command"].clone();
    assert!(
        command.as_str().is_some_and(|c| c.ends_with("kith hook")),
        "{settings}"
    );

    m.write(GEMINI, 0, usize::MAX)?;
    m.write(GEMINI_SUBAGENT, 0, usize::MAX)?;
    let payload = json!({
        "session_id": "7c1e4a2b-5d3f-4e6a-9b80-2f4d6c8a1e35",
        "transcript_path": m.dest(GEMINI),
        "cwd": "/home/sam/src/tally",
        "hook_event_name": "AfterAgent",
        "timestamp": "2026-05-13T09:16:04.000Z",
    });
    m.hook(&payload)?;

    // The session, and its subagent beside it, which the payload does not name.
    let listed = m.api.get("/api/conversations")?;
    let conversations = listed.body["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(conversations.len(), 2, "{listed:?}");
    assert_eq!(conversations[0]["agent_runtime"], "gemini");
    assert_final_state(&m.turns(&conversations[0])?, GEMINI);
    assert_eq!(conversations[1]["parent_id"], conversations[0]["id"]);
    assert_eq!(
        conversations[1]["title"],
        "Find every caller of parse_amount"
    );

    m.ok(&["uninstall", "gemini"])?;
    let settings = std::fs::read_to_string(m.machine.home.root().join(".gemini/settings.json"))?;
    assert!(!settings.contains("kith"), "{settings}");
    Ok(())
}

/// `kith install cursor` puts kith's command on Cursor's `stop` in
/// `~/.cursor/hooks.json`; the payload Cursor sends when the agent loop
/// ends (its transcript path null, as some versions send it) names the
/// conversation, which the hook finds, captures and sends with its
/// subagent, printing nothing (a `stop` hook's stdout could continue the
/// conversation). Uninstalling leaves no `hooks.json` behind.
#[test]
fn cursor_stop_hook_captures_the_conversation_and_its_subagent() -> Result<()> {
    let m = Machine::new()?;
    m.ok(&["install", "cursor"])?;
    let file = m.machine.home.root().join(".cursor/hooks.json");
    let hooks: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
    assert_eq!(hooks["version"], 1, "{hooks}");
    let command = hooks["hooks"]["stop"][0]["command"].clone();
    assert!(
        command.as_str().is_some_and(|c| c.ends_with("kith hook")),
        "{hooks}"
    );

    m.write(CURSOR, 0, usize::MAX)?;
    m.write(CURSOR_SUBAGENT, 0, usize::MAX)?;
    let payload = json!({
        "conversation_id": "5b8e2d14-7a3c-4e91-b6f0-2c9d4a1e8f73",
        "generation_id": "9f1d3c2a-0b4e-4c1d-8e2f-7a6b5c4d3e21",
        "hook_event_name": "stop",
        "status": "completed",
        "loop_count": 0,
        "workspace_roots": ["/home/sam/src/tally"],
        "transcript_path": null,
    });
    m.hook(&payload)?;

    let tree = m.tree()?;
    assert_eq!(tree.len(), 2, "{tree:?}");
    assert_eq!(tree[1].1, tree[0].0, "the subagent under its session");
    let listed = m.api.get("/api/conversations")?;
    let session = listed.body["conversations"][0].clone();
    assert_eq!(session["agent_runtime"], "cursor");
    assert_final_state(&m.turns(&session)?, CURSOR);

    m.ok(&["uninstall", "cursor"])?;
    assert!(!file.exists(), "kith's hooks alone: the file goes");
    Ok(())
}

/// `kith install copilot` writes kith's own `~/.copilot/hooks/kith.json`
/// running kith on `agentStop`; the payload Copilot CLI sends when the main
/// agent ends a turn names the session, whose `events.jsonl` the hook
/// captures and sends, printing nothing (an `agentStop` hook's stdout could
/// continue the conversation). Uninstalling removes the file; a `kith.json`
/// kith did not write is refused and left as it is; `COPILOT_HOME` moves
/// where kith's file goes, as it moves Copilot's home.
#[test]
fn copilot_agent_stop_hook_captures_the_session_it_names() -> Result<()> {
    let m = Machine::new()?;
    m.ok(&["install", "copilot"])?;
    let file = m.machine.home.root().join(".copilot/hooks/kith.json");
    let hooks: Value = serde_json::from_slice(&std::fs::read(&file)?)?;
    assert_eq!(hooks["version"], 1, "{hooks}");
    for event in ["agentStop", "sessionEnd"] {
        let handler = &hooks["hooks"][event][0];
        assert_eq!(handler["type"], "command", "{hooks}");
        assert!(
            handler["bash"]
                .as_str()
                .is_some_and(|c| c.ends_with("kith hook")),
            "{hooks}"
        );
    }

    m.write(COPILOT, 0, usize::MAX)?;
    let payload = json!({
        "timestamp": 1_778_663_764_000_u64,
        "cwd": "/home/sam/src/tally",
        "sessionId": "3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30",
        "transcriptPath": m.dest(COPILOT),
        "stopReason": "end_turn",
    });
    m.hook(&payload)?;

    let conversation = m.root_conversation()?;
    assert_eq!(conversation["agent_runtime"], "copilot");
    assert_final_state(&m.turns(&conversation)?, COPILOT);
    assert_eq!(m.found("April")?, [str_of(&conversation, "id")]);

    m.ok(&["uninstall", "copilot"])?;
    assert!(!file.exists(), "kith's own file goes");

    let theirs =
        r#"{"version": 1, "hooks": {"agentStop": [{"type": "command", "bash": "./notify.sh"}]}}"#;
    std::fs::write(&file, theirs)?;
    for verb in ["install", "uninstall"] {
        let out = m.kith(&[verb, "copilot"])?;
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{verb}: {err}");
        assert!(err.contains("kith did not write"), "{verb}: {err}");
        assert_eq!(std::fs::read_to_string(&file)?, theirs, "{verb}");
    }

    // Copilot's home moved by COPILOT_HOME: kith's file goes there.
    let moved = m.machine.home.path("copilot-home");
    let mut install = m.machine.home.kith(&["install", "copilot"]);
    install.env("COPILOT_HOME", &moved);
    let out = install.output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(moved.join("hooks/kith.json").is_file());
    assert_eq!(std::fs::read_to_string(&file)?, theirs);
    Ok(())
}

/// Copilot CLI's and Cursor's hooks are optional: `kith watch` captures
/// them as they are written, and only their transcripts (not other JSONL
/// files in the agents' folders).
#[test]
fn watch_captures_copilot_and_cursor_and_nothing_else_in_their_folders() -> Result<()> {
    let m = Machine::new()?;
    let watch = m.machine.watch()?;
    m.write(COPILOT, 0, 9)?;
    m.write(CURSOR, 0, 2)?;
    let decoys = [
        ".copilot/session-state/3e9a7c21-4b6d-4f08-a2c5-9d1e8b7f6a30/other.jsonl",
        ".cursor/projects/home-sam-src-tally/other.jsonl",
    ];
    for decoy in decoys {
        let line = "{\"role\":\"user\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"decoy\"}]}}\n";
        std::fs::write(m.machine.home.root().join(decoy), line)?;
    }
    m.write(COPILOT, 9, usize::MAX)?;
    m.write(CURSOR, 2, usize::MAX)?;
    m.write(CURSOR_SUBAGENT, 0, usize::MAX)?;

    // Every byte of the three transcripts arrives.
    let want: u64 = [COPILOT, CURSOR, CURSOR_SUBAGENT]
        .iter()
        .map(|rel| fixtures::read(rel).len() as u64)
        .sum();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let runtimes = loop {
        let listed = m.api.get("/api/conversations?limit=100")?;
        let conversations = listed.body["conversations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let mut got = 0;
        for c in &conversations {
            for run in c["run_ids"].as_array().into_iter().flatten() {
                let r = m
                    .api
                    .get(&format!("/api/runs/{}", run.as_str().unwrap_or_default()))?;
                got += r.body["to_offset"].as_u64().unwrap_or(0)
                    - r.body["from_offset"].as_u64().unwrap_or(0);
            }
        }
        if got >= want {
            let mut runtimes: Vec<String> = conversations
                .iter()
                .map(|c| str_of(c, "agent_runtime"))
                .collect();
            runtimes.sort();
            break runtimes;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{got} of {want} bytes: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(watch);
    assert_eq!(runtimes, ["copilot", "cursor", "cursor"]);
    assert!(
        m.found("decoy")?.is_empty(),
        "a file that is not a transcript"
    );
    Ok(())
}

/// Aider appends its chat to `.aider.chat.history.md` in the project
/// (`[aider] roots` names the folder of projects): two sessions, the second
/// written while central is down, read back as one conversation equal to
/// the file, each turn once, dated by its session's header, searchable to
/// its last turn.
#[test]
fn aider_history_of_two_sessions_across_a_central_restart() -> Result<()> {
    let mut m = Machine::new()?;
    std::fs::create_dir_all(m.machine.home.path(".config/kith"))?;
    std::fs::write(
        m.machine.home.path(".config/kith/config.toml"),
        "[aider]\nroots = [\"~/src\"]\n",
    )?;
    // Beside the history, in the same folder: not a transcript.
    std::fs::create_dir_all(m.dest(AIDER).parent().context("a folder")?)?;
    std::fs::write(
        m.machine.home.path("src/tally/NOTES.md"),
        "#### decoy heading  \n",
    )?;
    let conversation = m.capture_across_a_restart(AIDER, AIDER_SECOND_SESSION, &[])?;
    assert_eq!(conversation["agent_runtime"], "aider");
    assert_eq!(
        conversation["cwd"],
        m.machine.home.path("src/tally").display().to_string(),
        "the project folder: {conversation}"
    );
    assert_eq!(conversation["delta_count"].as_u64(), Some(2));
    assert_eq!(conversation["model"], "anthropic/claude-sonnet-4-5");
    assert_eq!(conversation["started_at"], "2026-05-14T10:02:11.000Z");
    assert_eq!(conversation["files_touched"], json!(["src/report.rs"]));
    m.assert_covered("aider", 1)?;
    assert_eq!(
        m.coverage("claude-code")?,
        [0; 4],
        "nothing else is counted"
    );

    let turns = m.turns(&conversation)?;
    assert_final_state(&turns, AIDER);
    assert_eq!(
        turns.first(),
        Some(&(
            "tool".to_owned(),
            "/home/sam/.local/bin/aider --model sonnet\nAider v0.86.1\n\
             Main model: anthropic/claude-sonnet-4-5 with diff edit format, infinite output\n\
             Git repo: .git with 24 files\nRepo-map: using 4096 tokens, auto refresh"
                .to_owned()
        ))
    );
    let id = str_of(&conversation, "id");
    let (status, stored) = m.api.get_bytes(&format!("/api/conversations/{id}/jsonl"))?;
    assert_eq!(status, 200);
    assert!(
        stored == fixtures::read(AIDER),
        "central holds the markdown byte for byte"
    );
    let r = m
        .api
        .get(&format!("/api/conversations/{id}/turns?limit=1000"))?;
    let times: BTreeSet<String> = r.body["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| str_of(t, "timestamp"))
        .collect();
    assert!(
        times.contains("2026-05-14T10:02:11.000Z"),
        "the first session's turns carry its header's time: {times:?}"
    );

    // `kith show` prints the last reply once, and no markdown of the
    // model's as a prompt.
    let shown = String::from_utf8(m.ok(&["show", &id])?)?;
    assert_eq!(
        shown
            .matches("seed the map with every known category")
            .count(),
        1,
        "{shown}"
    );
    assert_eq!(m.found("seed")?, [id.as_str()], "the last reply is found");
    assert!(m.found("decoy")?.is_empty(), "NOTES.md is not a transcript");
    Ok(())
}

/// `kith watch` finds an Aider project created under a root after it
/// started (`KITH_AIDER_ROOTS`, one level down), and captures what aider
/// appends there.
#[test]
fn watch_captures_an_aider_history_in_a_new_project() -> Result<()> {
    let m = Machine::new()?;
    std::fs::create_dir_all(m.machine.home.path("src"))?;
    let mut cmd = m.machine.command(&["watch"]);
    cmd.env("KITH_AIDER_ROOTS", m.machine.home.path("src"));
    let mut watch = Background::spawn(cmd)?;
    // The root is watched before the project appears in it.
    watch.wait_watching(&m.machine.home.path("src"))?;
    m.write(AIDER, 0, AIDER_SECOND_SESSION)?;
    m.write(AIDER, AIDER_SECOND_SESSION, usize::MAX)?;
    let want = fixtures::read(AIDER).len() as u64;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let conversation = loop {
        let listed = m.api.get("/api/conversations?limit=100")?;
        let conversation = listed.body["conversations"].get(0).cloned();
        let mut got = 0;
        for run in conversation
            .as_ref()
            .and_then(|c| c["run_ids"].as_array())
            .into_iter()
            .flatten()
        {
            let r = m
                .api
                .get(&format!("/api/runs/{}", run.as_str().unwrap_or_default()))?;
            got += r.body["to_offset"].as_u64().unwrap_or(0)
                - r.body["from_offset"].as_u64().unwrap_or(0);
        }
        if let Some(c) = conversation.filter(|_| got >= want) {
            break c;
        }
        ensure!(
            std::time::Instant::now() < deadline,
            "{got} of {want} bytes: {listed:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    drop(watch);
    assert_eq!(conversation["agent_runtime"], "aider");
    assert_final_state(&m.turns(&conversation)?, AIDER);
    Ok(())
}

/// OpenCode itself, as far as its database goes: a second process
/// (Python's `sqlite3`) that holds `opencode.db` open in WAL mode and runs
/// each step it is sent as one transaction, as OpenCode writes its rows.
struct OpenCode {
    child: std::process::Child,
    answers: std::io::BufReader<std::process::ChildStdout>,
}

const OPENCODE_WRITER: &str = r#"
import json, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA journal_mode=WAL")
for line in sys.stdin:
    step = json.loads(line)
    if step.get("rollback"):
        db.execute("ROLLBACK")
    else:
        db.execute("BEGIN IMMEDIATE")
        for sql, args in step["sql"]:
            db.execute(sql, args)
        if not step.get("hold"):
            db.execute("COMMIT")
    print("ok", flush=True)
"#;

/// The tables of OpenCode v1.2's `opencode.db` (packages/opencode/src/session/*.sql.ts).
const OPENCODE_SCHEMA: &[&str] = &[
    "CREATE TABLE session (id TEXT PRIMARY KEY, project_id TEXT NOT NULL, parent_id TEXT, slug TEXT NOT NULL, directory TEXT NOT NULL, title TEXT NOT NULL, version TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL)",
    "CREATE TABLE message (id TEXT PRIMARY KEY, session_id TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL)",
    "CREATE TABLE part (id TEXT PRIMARY KEY, message_id TEXT NOT NULL, session_id TEXT NOT NULL, time_created INTEGER NOT NULL, time_updated INTEGER NOT NULL, data TEXT NOT NULL)",
];

impl OpenCode {
    fn start(db: &std::path::Path) -> Result<Self> {
        std::fs::create_dir_all(db.parent().context("a folder")?)?;
        let mut child = std::process::Command::new("python3")
            .args(["-c", OPENCODE_WRITER])
            .arg(db)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .context("python3, to write OpenCode's database")?;
        let answers = std::io::BufReader::new(child.stdout.take().context("stdout")?);
        let mut oc = Self { child, answers };
        let schema: Vec<Value> = OPENCODE_SCHEMA.iter().map(|s| json!([s, []])).collect();
        oc.step(json!({ "sql": schema }))?;
        Ok(oc)
    }

    /// Runs one step and waits until the writer has done it.
    fn step(&mut self, step: Value) -> Result<()> {
        use std::io::BufRead;
        let stdin = self.child.stdin.as_mut().context("stdin")?;
        writeln!(stdin, "{step}")?;
        stdin.flush()?;
        let mut answer = String::new();
        self.answers.read_line(&mut answer)?;
        ensure!(answer.trim() == "ok", "the writer failed on {step}");
        Ok(())
    }

    fn write(&mut self, sql: Vec<Value>) -> Result<()> {
        self.step(json!({ "sql": sql }))
    }
}

impl Drop for OpenCode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn oc_session(id: &str, parent: Option<&str>) -> Value {
    json!([
        "INSERT INTO session VALUES (?, 'prj_tally', ?, 'tally', '/home/sam/src/tally', 'Amounts', '1.2.4', 1778490000000, 1778490000000)",
        [id, parent]
    ])
}

fn oc_message(id: &str, session: &str, role: &str, at: i64) -> Value {
    let data = json!({"role": role, "time": {"created": at}, "modelID": "claude-sonnet-4"});
    json!([
        "INSERT INTO message VALUES (?, ?, ?, ?, ?)",
        [id, session, at, at, data.to_string()]
    ])
}

/// A part written or updated in place, as OpenCode upserts it.
fn oc_part(id: &str, message: &str, session: &str, data: Value, at: i64) -> Value {
    json!([
        "INSERT INTO part VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(id) DO UPDATE SET data = excluded.data, time_updated = excluded.time_updated",
        [id, message, session, at, at, data.to_string()]
    ])
}

fn oc_text(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn oc_bash(status: &str, output: Option<&str>) -> Value {
    json!({"type": "tool", "tool": "bash", "callID": "toolu_1",
           "state": {"status": status, "input": {"command": "cargo test parse_amount"}, "output": output}})
}

fn pairs(turns: &[(&str, &str)]) -> Vec<(String, String)> {
    turns
        .iter()
        .map(|(r, t)| ((*r).to_owned(), (*t).to_owned()))
        .collect()
}

#[test]
fn opencode_db_rows_changed_by_another_process_across_a_central_restart() -> Result<()> {
    let mut m = Machine::new()?;
    let db = m
        .machine
        .home
        .root()
        .join(".local/share/opencode/opencode.db");
    let mut oc = OpenCode::start(&db)?;
    let at = 1778490001000;
    oc.write(vec![
        oc_session("ses_a", None),
        oc_message("msg_01", "ses_a", "user", at),
        oc_part(
            "prt_01",
            "msg_01",
            "ses_a",
            oc_text("Why does the importer reject 1,200?"),
            at,
        ),
        oc_message("msg_02", "ses_a", "assistant", at + 1000),
        oc_part(
            "prt_02",
            "msg_02",
            "ses_a",
            oc_text("Skimming the parser first."),
            at + 1000,
        ),
        oc_part(
            "prt_03",
            "msg_02",
            "ses_a",
            oc_bash("running", None),
            at + 2000,
        ),
    ])?;
    m.ok(&["backfill"])?;

    // Central is away while the answer streams on, a question and answer
    // are written that the person will revert, and a subagent runs.
    m.central.kill()?;
    oc.write(vec![
        oc_part(
            "prt_02",
            "msg_02",
            "ses_a",
            oc_text("Looking at parse_amount in src/parse.rs."),
            at + 3000,
        ),
        oc_part(
            "prt_03",
            "msg_02",
            "ses_a",
            oc_bash("completed", Some("1 failed: parse_amount(\"1,200\")")),
            at + 4000,
        ),
        oc_message("msg_03", "ses_a", "user", at + 5000),
        oc_part(
            "prt_04",
            "msg_03",
            "ses_a",
            oc_text("Would a zeppelin grammar help?"),
            at + 5000,
        ),
        oc_message("msg_04", "ses_a", "assistant", at + 6000),
        oc_part(
            "prt_05",
            "msg_04",
            "ses_a",
            oc_text("A zeppelin grammar is overkill here."),
            at + 6000,
        ),
        oc_session("ses_b", Some("ses_a")),
        oc_message("msg_b1", "ses_b", "user", at + 7000),
        oc_part(
            "prt_b1",
            "msg_b1",
            "ses_b",
            oc_text("Find every caller of parse_amount"),
            at + 7000,
        ),
        oc_message("msg_b2", "ses_b", "assistant", at + 8000),
        oc_part(
            "prt_b2",
            "msg_b2",
            "ses_b",
            oc_text("Two callers: the importer and the CLI."),
            at + 8000,
        ),
    ])?;
    let _ = m.kith(&["backfill"])?;
    m.central.restart()?;

    // OpenCode holds a write transaction open while kith reads: kith
    // neither waits for it nor sees what it has not committed.
    oc.step(json!({"hold": true, "sql": [oc_part("prt_05", "msg_04", "ses_a", oc_text("uncommitted words"), at + 9000)]}))?;
    m.ok(&["backfill"])?;
    oc.step(json!({"rollback": true}))?;

    // The person reverts to before the zeppelin question and asks again.
    oc.write(vec![
        json!([
            "DELETE FROM part WHERE message_id IN ('msg_03', 'msg_04')",
            []
        ]),
        json!(["DELETE FROM message WHERE id IN ('msg_03', 'msg_04')", []]),
        oc_message("msg_05", "ses_a", "user", at + 10000),
        oc_part(
            "prt_06",
            "msg_05",
            "ses_a",
            oc_text("Just strip the comma."),
            at + 10000,
        ),
        oc_message("msg_06", "ses_a", "assistant", at + 11000),
        oc_part(
            "prt_07",
            "msg_06",
            "ses_a",
            oc_text("Done: 1,200 now parses as twelve hundred."),
            at + 11000,
        ),
    ])?;
    m.ok(&["backfill"])?;

    let conversation = m.root_conversation()?;
    assert_eq!(conversation["agent_runtime"], "opencode");
    m.assert_covered("opencode", 2)?;
    let final_state = pairs(&[
        ("user", "Why does the importer reject 1,200?"),
        ("assistant", "Looking at parse_amount in src/parse.rs."),
        (
            "tool",
            "bash: cargo test parse_amount\n1 failed: parse_amount(\"1,200\")",
        ),
        ("user", "Just strip the comma."),
        ("assistant", "Done: 1,200 now parses as twelve hundred."),
    ]);
    assert_eq!(m.turns(&conversation)?, final_state);
    let id = str_of(&conversation, "id");
    let show: Value = serde_json::from_slice(&m.ok(&["show", &id, "--json"])?)?;
    let shown: Vec<(String, String)> = show["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| (str_of(t, "role"), str_of(t, "text")))
        .collect();
    assert_eq!(shown, final_state, "kith show");

    assert_eq!(m.found("twelve")?, [id.as_str()], "the last turn is found");
    for gone in ["zeppelin", "Skimming", "uncommitted"] {
        assert!(m.found(gone)?.is_empty(), "{gone}: not a live turn");
    }
    // The child session hangs under its parent.
    let tree = m.tree()?;
    assert_eq!(tree.len(), 2, "{tree:?}");
    assert_eq!(tree[0], (id.clone(), String::new()));
    assert_eq!(tree[1].1, id, "{tree:?}");

    // A rebuild from the stored journal gives the same search.
    m.central.kill()?;
    let data = m.central.data_dir.clone();
    for args in [&["doctor"][..], &["reindex"], &["doctor"]] {
        let out = run_central(&data, args)?;
        ensure!(
            out.status.success(),
            "{args:?}: {} {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    m.central.restart()?;
    assert!(m.found("zeppelin")?.is_empty(), "reverted, after a reindex");
    assert_eq!(m.found("twelve")?, [id.as_str()]);
    Ok(())
}

/// `kith watch` follows OpenCode's storage tree (before v1.2) as files are
/// rewritten whole and deleted, and its database as rows change.
#[test]
fn watch_follows_opencode_storage_files_and_database_rows() -> Result<()> {
    let m = Machine::new()?;
    let storage = m.machine.home.root().join(".local/share/opencode/storage");
    let fixture = fixtures::path("opencode/storage");
    let watch = m.machine.watch()?;
    // OpenCode writes a question before its answer; a copy file by file in
    // directory order need not (a refresh between could see the answer
    // first), so the tree appears whole.
    let staged = storage.with_extension("staged");
    copy_tree(&fixture, &staged)?;
    std::fs::rename(&staged, &storage)?;
    let first = wait_turns(&m, |turns| turns.len() == 3)?;
    assert!(
        first[1]
            .1
            .starts_with("read: /home/sam/src/tally/src/report.rs"),
        "{first:?}"
    );

    // OpenCode rewrites the answer's text part whole and drops the read.
    let parts = storage.join("part/msg_6b1f0e2b0002Mn9oPq1rSt3uVw");
    let text = parts.join("prt_6b1f0e2b2003Ef3gHi5jKl7mNo.json");
    let mut part: Value = serde_json::from_slice(&std::fs::read(&text)?)?;
    part["text"] = json!("Pad the month and day with {:02}; a quokka could do it.");
    std::fs::write(&text, serde_json::to_string_pretty(&part)?)?;
    std::fs::remove_file(parts.join("prt_6b1f0e2b2002Tu7vWx9yZa1bCd.json"))?;
    let last = wait_turns(&m, |turns| {
        turns.len() == 2 && turns[1].1.contains("quokka")
    })?;
    assert_eq!(last[0], first[0]);
    let conversation = m.root_conversation()?;
    let id = str_of(&conversation, "id");
    assert_eq!(m.found("quokka")?, [id.as_str()]);
    // The old text ("formats the month and day") and the dropped read
    // (`format!(...)`) are not found.
    assert!(m.found("formats")?.is_empty());

    // A database appearing beside the tree (OpenCode upgraded) is followed
    // through its WAL as well.
    let mut oc = OpenCode::start(&storage.with_file_name("opencode.db"))?;
    oc.write(vec![
        oc_session("ses_w", None),
        oc_message("msg_w1", "ses_w", "user", 1778490001000),
        oc_part(
            "prt_w1",
            "msg_w1",
            "ses_w",
            oc_text("Does a walrus read dates?"),
            1778490001000,
        ),
    ])?;
    wait_found(&m, "walrus", true)?;
    oc.write(vec![oc_part(
        "prt_w1",
        "msg_w1",
        "ses_w",
        oc_text("Does a narwhal read dates?"),
        1778490002000,
    )])?;
    wait_found(&m, "narwhal", true)?;
    wait_found(&m, "walrus", false)?;
    drop(watch);
    Ok(())
}

/// Waits until a search for `word` finds something (`found`) or nothing.
fn wait_found(m: &Machine, word: &str, found: bool) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while m.found(word)?.is_empty() == found {
        ensure!(
            std::time::Instant::now() < deadline,
            "{word}: found is not {found}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}

/// The root conversation's turns once `done` says they are what is wanted.
fn wait_turns(
    m: &Machine,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Result<Vec<(String, String)>> {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let listed = m.api.get("/api/conversations?limit=100")?;
        if let Some(c) = listed.body["conversations"]
            .as_array()
            .and_then(|a| a.first())
        {
            let turns = m.turns(c)?;
            if done(&turns) {
                return Ok(turns);
            }
            ensure!(std::time::Instant::now() < deadline, "{turns:#?}");
        }
        ensure!(std::time::Instant::now() < deadline, "{listed:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn copy_tree(from: &std::path::Path, to: &std::path::Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()))?;
        } else {
            std::fs::copy(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}
