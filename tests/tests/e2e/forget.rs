//! What leaves search, end to end: the real `kith` captures real Claude
//! Code transcripts into a real central. `kith forget` removes a
//! conversation from every read (search in each mode, show, tree, jsonl,
//! turns, runs) for its owner and for the person it was shared with, leaves
//! the other conversation alone, keeps its bytes out of central when the
//! agent captures the file again (cursor kept, and cursor lost), and is
//! refused (404) to anyone but the owner. A transcript rewritten or
//! truncated and captured again retires its older capture from search
//! (still shown, and found with `--include-superseded`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kith_tests::{model_dir, run_central, Api, Central, Machine};
use serde_json::{json, Value};

/// A Claude Code session file of `device`.
fn session(device: &Machine, n: u32) -> PathBuf {
    device.path(&format!(
        ".claude/projects/-home-alice-proj/5e551011-0000-4000-8000-{n:012}.jsonl"
    ))
}

/// Ids of the conversations `device`'s search for `word` in `mode` finds.
fn found(device: &Machine, word: &str, mode: &str) -> Result<Vec<String>> {
    let res = device.json(&["search", word, "--json", "--mode", mode])?;
    let groups = res["groups"].as_array().cloned().unwrap_or_default();
    Ok(groups
        .iter()
        .filter_map(|g| g["conversation_id"].as_str().map(str::to_owned))
        .collect())
}

/// Appends one turn (the person says `said`, the agent answers `answer`)
/// to session `n`'s file, as Claude Code writes it.
fn turn(file: &Path, n: u32, k: u32, said: &str, answer: &str) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(file.parent().context("a folder")?)?;
    let session = format!("5e551011-0000-4000-8000-{n:012}");
    let envelope = |kind: &str, i: u32, message: Value| {
        json!({"type": kind, "uuid": format!("{n}-{k}-{i}"), "parentUuid": null,
               "sessionId": session, "cwd": "/home/alice/proj", "version": "2.1.14",
               "timestamp": format!("2026-05-11T10:{:02}:{:02}.000Z", n, k * 2 + i),
               "message": message})
    };
    let user = envelope("user", 0, json!({"role": "user", "content": said}));
    let assistant = envelope(
        "assistant",
        1,
        json!({"id": format!("msg_{n}_{k}"), "type": "message", "role": "assistant",
               "model": "claude-opus-4-6", "content": [{"type": "text", "text": answer}]}),
    );
    let mut f = std::fs::File::options()
        .create(true)
        .append(true)
        .open(file)?;
    writeln!(f, "{user}\n{assistant}")?;
    Ok(())
}

/// The conversation `api` lists for session `n`, with its run ids.
fn conversation_of(api: &Api, n: u32) -> Result<(String, Vec<String>)> {
    let r = api.get("/api/conversations")?;
    let session = format!("5e551011-0000-4000-8000-{n:012}");
    let list = r.body["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let c = list
        .iter()
        .find(|c| c["session_id"] == session.as_str())
        .with_context(|| format!("no conversation of session {n}: {r:?}"))?;
    let runs = c["run_ids"].as_array().cloned().unwrap_or_default();
    Ok((
        c["id"].as_str().unwrap_or_default().to_owned(),
        runs.iter()
            .filter_map(|r| r.as_str().map(str::to_owned))
            .collect(),
    ))
}

/// Whether any file under central's `runs/` holds `word`.
fn stored(data: &Path, word: &str) -> Result<bool> {
    let mut stack = vec![data.join("runs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if String::from_utf8_lossy(&std::fs::read(&path)?).contains(word) {
                return Ok(true);
            }
        }
    }
    Ok(false)
}

/// The search modes this machine can run: semantic and hybrid need the
/// embedding model (without it, forget is checked by keyword search only,
/// and that is said).
fn modes() -> Result<Vec<&'static str>> {
    Ok(match model_dir()? {
        Some(_) => vec!["keyword", "semantic", "hybrid"],
        None => vec!["keyword"],
    })
}

#[test]
fn a_forgotten_conversation_is_gone_everywhere_and_its_bytes_never_come_back() -> Result<()> {
    let mut central = Central::start()?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let (alice_api, bob_api) = (central.client(&alice_token), central.client(&bob_token));
    let alice = Machine::new(&central, &alice_token)?;
    let bob = Machine::new(&central, &bob_token)?;
    let (secret, kept) = (session(&alice, 1), session(&alice, 2));
    turn(
        &secret,
        1,
        0,
        "why does the pangolin importer drop rows",
        "the pangolin importer skips rows whose checksum is empty",
    )?;
    turn(
        &secret,
        1,
        1,
        "fix the pangolin importer",
        "done: empty checksums are computed before the pangolin import",
    )?;
    turn(
        &kept,
        2,
        0,
        "plan the narwhal release",
        "the narwhal release ships on friday after the migration",
    )?;
    alice.text(&["backfill"])?;
    let (forgotten, runs) = conversation_of(&alice_api, 1)?;
    let (other, other_runs) = conversation_of(&alice_api, 2)?;
    let modes = modes()?;
    for id in runs.iter().chain(&other_runs) {
        if modes.len() > 1 {
            alice_api.wait_embedded(id, Duration::from_secs(120))?;
        } else {
            alice_api.wait_indexed(id, Duration::from_secs(60))?;
        }
    }
    alice.text(&["share", "conversation", &forgotten, "--with", "bob.test"])?;
    for mode in &modes {
        ensure!(
            found(&alice, "pangolin", mode)?.contains(&forgotten),
            "{mode}"
        );
    }
    ensure!(found(&bob, "pangolin", "keyword")? == vec![forgotten.clone()]);

    // Bob may read it, but it is not his to forget: 404, and it stays.
    let refused = bob.fails(&["forget", &forgotten, "--yes"])?;
    ensure!(refused.contains("not_found"), "{refused}");
    let r = bob_api.send(
        bob_api
            .http
            .delete(bob_api.url(&format!("/api/conversations/{forgotten}"))),
    )?;
    ensure!(r.status == 404, "{r:?}");
    let unknown = bob_api.send(
        bob_api
            .http
            .delete(bob_api.url("/api/conversations/c0000000000000000000000000000000")),
    )?;
    ensure!(
        unknown.status == 404 && unknown.body == r.body,
        "another's conversation answers like an unknown one: {r:?} {unknown:?}"
    );
    ensure!(found(&alice, "pangolin", "keyword")? == vec![forgotten.clone()]);
    // Without a terminal, kith wants --yes.
    let asked = alice.fails(&["forget", &forgotten])?;
    ensure!(asked.contains("--yes"), "{asked}");
    ensure!(
        alice_api
            .get(&format!("/api/conversations/{forgotten}"))?
            .status
            == 200
    );

    let said = alice.text(&["forget", &forgotten[..12], "--yes"])?;
    ensure!(said.contains(&forgotten), "{said}");

    for (who, device, api) in [("alice", &alice, &alice_api), ("bob", &bob, &bob_api)] {
        for mode in &modes {
            let found = found(device, "pangolin", mode)?;
            ensure!(!found.contains(&forgotten), "{who} {mode}: {found:?}");
        }
        let show = device.fails(&["show", &forgotten])?;
        ensure!(show.contains("not_found"), "{who}: {show}");
        for path in ["", "/jsonl", "/turns"] {
            let r = api.get(&format!("/api/conversations/{forgotten}{path}"))?;
            ensure!(r.status == 404, "{who} {path}: {r:?}");
        }
        for run in &runs {
            let r = api.get(&format!("/api/runs/{run}"))?;
            ensure!(r.status == 404, "{who} run {run}: {r:?}");
        }
        let tree = device.text(&["tree", "--json"])?;
        ensure!(!tree.contains(&forgotten), "{who}: {tree}");
    }
    // The other conversation is untouched.
    for mode in &modes {
        ensure!(
            found(&alice, "narwhal", mode)? == vec![other.clone()],
            "{mode}"
        );
    }
    ensure!(alice.text(&["show", &other])?.contains("narwhal release"));
    let audit = alice_api.get("/api/audit")?;
    let entries = audit.body["entries"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure!(
        entries.iter().any(|e| e["what"] == "forget"
            && e["run_id"] == forgotten.as_str()
            && e["reader"] == "alice.test"),
        "{audit:?}"
    );
    ensure!(!stored(&central.data_dir, "pangolin")?);

    // Capturing the file again sends nothing of it; a later turn is a
    // conversation of its own.
    alice.text(&["backfill"])?;
    turn(
        &secret,
        1,
        2,
        "and the quokka exporter?",
        "the quokka exporter was fine",
    )?;
    alice.text(&["backfill"])?;
    let (after, after_runs) = conversation_of(&alice_api, 1)?;
    ensure!(after != forgotten);
    for id in &after_runs {
        alice_api.wait_indexed(id, Duration::from_secs(60))?;
    }
    ensure!(found(&alice, "quokka", "keyword")? == vec![after.clone()]);
    ensure!(found(&alice, "pangolin", "keyword")?.is_empty());
    ensure!(!stored(&central.data_dir, "pangolin")?);
    let status = alice.text(&["status"])?;
    ensure!(!status.contains("refused"), "{status}");

    // A machine that lost its cursors sends the whole file again: the
    // forgotten lines are dropped, the rest is known.
    std::fs::remove_dir_all(alice.home.root().join(".local/state/kith"))?;
    alice.text(&["backfill"])?;
    ensure!(!stored(&central.data_dir, "pangolin")?);
    ensure!(found(&alice, "pangolin", "keyword")?.is_empty());

    central.kill()?;
    let doctor = run_central(&central.data_dir, &["doctor"])?;
    ensure!(
        doctor.status.success(),
        "doctor: {}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    Ok(())
}

#[test]
fn the_operator_forgets_any_conversation_and_doctor_finds_nothing_left() -> Result<()> {
    let mut central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let alice = Machine::new(&central, &token)?;
    turn(
        &session(&alice, 3),
        3,
        0,
        "where is the capybara cache",
        "the capybara cache lives in /var/cache",
    )?;
    alice.text(&["backfill"])?;
    let (id, runs) = conversation_of(&api, 3)?;
    for run in &runs {
        api.wait_indexed(run, Duration::from_secs(60))?;
    }
    central.kill()?;
    let data = central.data_dir.clone();
    let out = run_central(&data, &["forget", &runs[0]])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(String::from_utf8_lossy(&out.stdout).contains(&id));
    let again = run_central(&data, &["forget", &id])?;
    ensure!(
        !again.status.success(),
        "a forgotten conversation is unknown"
    );
    let doctor = run_central(&data, &["doctor"])?;
    ensure!(
        doctor.status.success(),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    ensure!(!stored(&data, "capybara")?);
    central.restart()?;
    let api = central.client(&token);
    let r = api.get(&format!("/api/conversations/{id}"))?;
    ensure!(r.status == 404, "{r:?}");
    ensure!(found(&alice, "capybara", "keyword")?.is_empty());
    let audit = api.get("/api/audit")?;
    ensure!(
        audit.body["entries"][0]["reader"] == "kith-central",
        "{audit:?}"
    );
    Ok(())
}

/// Writes session `n`'s file anew with one turn: through a new file
/// renamed over it (another inode, as an editor or a migration does), or
/// truncated in place.
fn rewrite(file: &Path, n: u32, said: &str, answer: &str, in_place: bool) -> Result<()> {
    if in_place {
        std::fs::File::options()
            .write(true)
            .open(file)?
            .set_len(0)?;
        return turn(file, n, 0, said, answer);
    }
    let fresh = file.with_extension("new");
    turn(&fresh, n, 0, said, answer)?;
    Ok(std::fs::rename(&fresh, file)?)
}

#[test]
fn a_rewritten_transcript_retires_its_older_capture_from_search() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let alice = Machine::new(&central, &token)?;
    let file = session(&alice, 5);
    let semantic = model_dir()?.is_some();
    let mut captures = Vec::new();
    for (word, in_place) in [("okapi", false), ("gazelle", false), ("ibex", true)] {
        let said = format!("total the {word} ledger for march");
        let answer = format!("the {word} ledger totals 4,210 for march");
        if captures.is_empty() {
            turn(&file, 5, 0, &said, &answer)?;
        } else {
            rewrite(&file, 5, &said, &answer, in_place)?;
        }
        alice.text(&["backfill"])?;
        api.wait_settled(Duration::from_secs(60))?;
        let now = api.get("/api/conversations")?.body["conversations"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let newest = now
            .iter()
            .map(|c| c["id"].as_str().unwrap_or_default().to_owned())
            .find(|id| !captures.iter().any(|(_, c)| c == id))
            .with_context(|| format!("no new conversation after the {word} rewrite: {now:?}"))?;
        for c in &now {
            for run in c["run_ids"].as_array().into_iter().flatten() {
                let run = run.as_str().unwrap_or_default();
                if semantic {
                    api.wait_embedded(run, Duration::from_secs(120))?;
                }
            }
        }
        captures.push((word, newest));
    }
    let (newest_word, newest) = captures.last().cloned().context("captures")?;
    for mode in modes()? {
        ensure!(
            found(&alice, "ledger", mode)? == vec![newest.clone()],
            "{mode}: only the newest capture by default"
        );
    }
    ensure!(found(&alice, newest_word, "keyword")? == vec![newest.clone()]);
    for (word, id) in &captures[..captures.len() - 1] {
        ensure!(
            found(&alice, word, "keyword")?.is_empty(),
            "{word} is retired"
        );
        let out = alice.text(&[
            "search",
            word,
            "--json",
            "--mode",
            "keyword",
            "--include-superseded",
        ])?;
        ensure!(
            out.contains(id.as_str()),
            "{word} with --include-superseded: {out}"
        );
        ensure!(alice
            .text(&["show", id])?
            .contains(&format!("{word} ledger")));
    }
    if semantic {
        let out = alice.text(&[
            "search",
            "ledger",
            "--json",
            "--mode",
            "semantic",
            "--include-superseded",
        ])?;
        for (_, id) in &captures {
            ensure!(
                out.contains(id.as_str()),
                "semantic --include-superseded finds {id}: {out}"
            );
        }
    }
    Ok(())
}

/// Lines a forgotten conversation held by chance, a line the same in
/// another transcript and blank lines, stay where they were not forgotten:
/// in a live conversation that goes on with them, and at the start of a new
/// one. Sent again where they were forgotten, they stay out.
#[test]
fn lines_a_forgotten_conversation_shared_by_chance_stay_in_the_others() -> Result<()> {
    use kith_tests::{claude_user_line, delta};
    let central = Central::start()?;
    let api = central.client(&central.register("alice.test", "laptop")?);
    let common = claude_user_line("yes", "2026-05-11T08:00:00Z");
    let secret = format!(
        "{}\n{common}",
        claude_user_line("the pangolin secret", "2026-05-11T08:01:00Z")
    );
    let post = |source: &str, from: usize, jsonl: &str| -> Result<Value> {
        let r = api.post("/api/runs", &delta(source, from as u64, jsonl))?;
        ensure!((200..300).contains(&r.status), "{:?}", r.body);
        Ok(r.body)
    };
    let stored = post("a", 0, &secret)?;
    let first = claude_user_line("plan the narwhal release", "2026-05-11T08:02:00Z");
    post("b", 0, &first)?;
    let run = stored["run_id"].as_str().context("run id")?;
    let conversation = api.get(&format!("/api/runs/{run}"))?.body["conversation"]
        .as_str()
        .context("conversation")?
        .to_owned();
    let gone = api.send(
        api.http
            .delete(api.url(&format!("/api/conversations/{conversation}")))
            .bearer_auth(&api.token),
    )?;
    ensure!(gone.status == 200, "{:?}", gone.body);

    // The live conversation goes on with the line the forgotten one held.
    let more = format!(
        "{common}{}",
        claude_user_line("the narwhal ships on friday", "2026-05-11T08:03:00Z")
    );
    let kept = post("b", first.len(), &more)?;
    assert_eq!(kept["status"], "accepted", "{kept}");
    let id = kept["run_id"].as_str().context("run id")?;
    let (_, bytes) = api.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
    assert_eq!(String::from_utf8(bytes)?, more);
    // A new transcript starting with blank lines keeps them.
    let fresh = format!(
        "\n\n{}",
        claude_user_line("an otter in the logs", "2026-05-11T08:04:00Z")
    );
    let new = post("c", 0, &fresh)?;
    assert_eq!(new["status"], "accepted", "{new}");
    let id = new["run_id"].as_str().context("run id")?;
    let (_, bytes) = api.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
    assert_eq!(String::from_utf8(bytes)?, fresh);
    // The forgotten transcript sent again, blank line and all: nothing kept.
    let again = post("a", 0, &secret)?;
    assert_eq!(again["status"], "forgotten", "{again}");
    // Sent again with a new turn: the new turn alone is kept, and the same
    // request retried (its Idempotency-Key) is that run again, not a clash.
    let grown = format!(
        "{secret}{}",
        claude_user_line("a new turn", "2026-05-11T08:05:00Z")
    );
    let send = || api.post_with("/api/runs", &delta("a", 0, &grown), "retry-1");
    let (kept, retried) = (send()?, send()?);
    assert_eq!(kept.body["status"], "accepted", "{:?}", kept.body);
    assert_eq!(
        retried.body["status"], "already_indexed",
        "{:?}",
        retried.body
    );
    assert_eq!(retried.body["run_id"], kept.body["run_id"]);
    let id = kept.body["run_id"].as_str().context("run id")?;
    let (_, bytes) = api.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
    assert!(!String::from_utf8(bytes)?.contains("pangolin"));
    Ok(())
}

/// Regression: a forgotten conversation's text stayed on disk in the
/// search index's segments (its documents only marked deleted) and the
/// registry's free pages and WAL, readable by anyone with the disk. After
/// a forget, no file of central's data folder holds its words; the
/// conversation kept is still found.
#[test]
fn a_forget_leaves_no_file_holding_the_forgotten_words() -> Result<()> {
    let central = Central::start()?;
    let token = kith_tests::register_local(&central.data_dir, "fern.local", "laptop")?;
    let api = central.client(&token);
    let post = |source: &str, text: &str| {
        let line = kith_tests::claude_user_line(text, "2026-05-11T10:00:00Z");
        api.ingest(&kith_tests::delta(source, 0, &line))
    };
    // Sent together, indexed together: one segment of the index holds both,
    // so the forgotten one's documents are not a segment of their own.
    let kept = post("fern-kept", "the kept marmosetplan for the garden")?;
    let gone = post(
        "fern-gone",
        "the secret quokkaflorin diary about the wombatgrail",
    )?;
    for run in [&kept, &gone] {
        api.wait_indexed(run, Duration::from_secs(60))?;
    }
    for word in ["quokkaflorin", "wombatgrail"] {
        ensure!(
            !kith_tests::files_containing(&central.data_dir, word)?.is_empty(),
            "the test's words are stored before the forget"
        );
    }
    // A conversation is named by any of its run ids.
    let res = api.send(
        api.http
            .delete(api.url(&format!("/api/conversations/{gone}"))),
    )?;
    ensure!(res.status == 200, "forget: {res:?}");
    for word in ["quokkaflorin", "wombatgrail"] {
        let left = kith_tests::files_containing(&central.data_dir, word)?;
        ensure!(left.is_empty(), "{word} is still in {left:?}");
    }
    let found = api.post(
        "/api/search",
        &json!({"query": "marmosetplan", "mode": "keyword"}),
    )?;
    ensure!(
        found.body["hits"].as_array().is_some_and(|h| !h.is_empty()),
        "{found:?}"
    );
    Ok(())
}
