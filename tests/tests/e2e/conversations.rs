//! Conversations end to end: the real `kith` is hooked after every turn of a
//! Claude Code session (with two subagents), a Codex rollout and a pi session,
//! against a real central. Proves that one session's many deltas read as one
//! conversation (`kith tree`, `kith show` by a run id or an id prefix, `--raw`
//! byte for byte), that facet filters keep exactly the conversations that did
//! the thing, and that another person's conversation is absent by every name.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kith_tests::{str_of, Api, Central, Machine};
use serde_json::{json, Value};

/// Sends what a hook left in the outbox (a hook gives central 1.5 s).
fn flush(device: &Machine) -> Result<()> {
    device.ok(&["backfill"]).map(drop)
}

/// Every conversation `kith tree --json` lists.
fn tree_of(device: &Machine) -> Result<Vec<Value>> {
    let tree = device.json(&["tree", "--json"])?;
    Ok(items(&tree["conversations"]))
}

fn append(file: &Path, lines: &[Value]) -> Result<()> {
    use std::io::Write;
    std::fs::create_dir_all(file.parent().context("a folder")?)?;
    let mut f = std::fs::File::options()
        .create(true)
        .append(true)
        .open(file)?;
    for line in lines {
        writeln!(f, "{line}")?;
    }
    Ok(())
}

/// `2026-05-11T10:mm:ss.000Z`, `n` seconds after ten.
fn time(n: u32) -> String {
    format!("2026-05-11T10:{:02}:{:02}.000Z", n / 60 % 60, n % 60)
}

/// A Claude Code transcript as Claude Code writes it: a session, or (with
/// `agent`) a subagent of it at `<session>/subagents/agent-<id>.jsonl`.
struct Claude {
    session: String,
    agent: Option<String>,
    cwd: String,
    file: PathBuf,
    /// Lines written, for uuids and parents.
    n: u32,
    /// The second of the first line: a subagent starts when its parent
    /// spawns it.
    start: u32,
}

impl Claude {
    /// Claude Code's Stop hook for this session on `device`, or
    /// SubagentStop when `agent` is given.
    fn stop(&self, device: &Machine, agent: Option<&Claude>) -> Result<()> {
        let mut payload = json!({"session_id": self.session, "transcript_path": self.file,
                                 "cwd": self.cwd, "hook_event_name": "Stop"});
        if let Some(a) = agent {
            payload["hook_event_name"] = json!("SubagentStop");
            payload["agent_id"] = json!(a.agent);
            payload["agent_transcript_path"] = json!(a.file);
        }
        device.hook(&[], &payload)
    }

    /// Session `n` of `device` in the project `cwd`.
    fn session(device: &Machine, n: u32, cwd: &str) -> Self {
        let session = format!("5e551011-0000-4000-8000-{n:012}");
        let file = format!(".claude/projects/{}/{session}.jsonl", cwd.replace('/', "-"));
        let (cwd, file) = (cwd.to_owned(), device.path(&file));
        let (agent, n, start) = (None, 0, 0);
        Self {
            session,
            agent,
            cwd,
            file,
            n,
            start,
        }
    }

    fn subagent(&self, id: &str) -> Self {
        let file = self
            .file
            .with_extension("")
            .join(format!("subagents/agent-{id}.jsonl"));
        let (session, cwd) = (self.session.clone(), self.cwd.clone());
        let (agent, n, start) = (Some(id.to_owned()), 0, self.start + self.n);
        Self {
            session,
            agent,
            cwd,
            file,
            n,
            start,
        }
    }

    /// A `user` or `assistant` line with the envelope Claude Code writes.
    fn line(&mut self, kind: &str, message: Value, extra: Value) -> Value {
        let tag = self.agent.clone().unwrap_or_else(|| "main".to_owned());
        let parent = (self.n > 0).then(|| format!("{tag}-{:04}", self.n));
        self.n += 1;
        let mut v = json!({
            "parentUuid": parent, "isSidechain": self.agent.is_some(), "userType": "external",
            "cwd": self.cwd, "sessionId": self.session, "version": "2.1.14",
            "gitBranch": "main", "type": kind, "message": message,
            "uuid": format!("{tag}-{:04}", self.n), "timestamp": time(self.start + self.n),
        });
        if let Some(agent) = &self.agent {
            v["agentId"] = json!(agent);
        }
        for (k, x) in extra.as_object().into_iter().flatten() {
            v[k] = x.clone();
        }
        v
    }

    fn assistant(&mut self, content: Value) -> Value {
        let (id, request) = (format!("msg_{:04}", self.n), format!("req_{:04}", self.n));
        let message = json!({"id": id, "type": "message", "role": "assistant",
            "model": "claude-opus-4-6", "content": content, "stop_reason": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}});
        self.line("assistant", message, json!({ "requestId": request }))
    }

    /// One turn: the person says `said`, the agent makes each tool call
    /// (name, input, result) and answers `answer`.
    fn turn(&mut self, said: &str, calls: &[(&str, Value, &str)], answer: &str) -> Result<()> {
        let said = json!({"role": "user", "content": said});
        let mut lines = vec![self.line("user", said, json!({}))];
        for (name, input, result) in calls {
            let id = format!("toolu_{:04}", self.n);
            let call = json!([{"type": "tool_use", "id": id, "name": name, "input": input}]);
            lines.push(self.assistant(call));
            let extra = match *name {
                "Task" => json!({"toolUseResult": {"status": "completed", "agentId": result}}),
                _ => json!({"toolUseResult": {"stdout": result, "stderr": ""}}),
            };
            let content = json!([{"type": "tool_result", "tool_use_id": id, "content": result}]);
            lines.push(self.line("user", json!({"role": "user", "content": content}), extra));
        }
        lines.push(self.assistant(json!([{"type": "text", "text": answer}])));
        append(&self.file, &lines)
    }
}

/// An `Edit` tool call on `path`, as a `Claude::turn` call.
fn edit(path: &str) -> (&'static str, Value, &'static str) {
    let input = json!({"file_path": path, "old_string": "a", "new_string": "b"});
    ("Edit", input, "ok")
}

/// The conversations of `list` whose agent session is `session`.
fn of_session<'a>(list: &'a [Value], session: &str) -> Vec<&'a Value> {
    list.iter().filter(|c| c["session_id"] == session).collect()
}

fn run_ids(c: &Value) -> Vec<String> {
    let ids = c["run_ids"].as_array().into_iter().flatten();
    ids.filter_map(|r| r.as_str().map(str::to_owned)).collect()
}

/// Fails unless `text` contains every word of `want`.
fn says_all(text: &str, want: &[String]) -> Result<()> {
    let missing: Vec<&String> = want.iter().filter(|w| !text.contains(w.as_str())).collect();
    ensure!(missing.is_empty(), "{missing:?} missing from {text}");
    Ok(())
}

fn says_not_found(err: &str) -> Result<()> {
    let found = err.contains("not_found") || err.contains("not found");
    ensure!(found, "not a not-found error: {err}");
    Ok(())
}

/// The elements of a JSON array (none for anything else).
fn items(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// The `key` of each of `list`.
fn keys(list: &[Value], key: &str) -> BTreeSet<String> {
    list.iter().map(|c| str_of(c, key)).collect()
}

fn set(ids: &[&str]) -> BTreeSet<String> {
    ids.iter().map(|s| (*s).to_owned()).collect()
}

/// Ids of the conversations `GET /api/conversations?{query}` lists.
fn listed(api: &Api, query: &str) -> Result<BTreeSet<String>> {
    let r = api.get(&format!("/api/conversations?{query}"))?;
    ensure!(r.status == 200, "{query}: {r:?}");
    Ok(keys(&items(&r.body["conversations"]), "id"))
}

/// Waits until every run of every conversation `api` lists is indexed.
fn wait_all_indexed(api: &Api) -> Result<()> {
    let r = api.get("/api/conversations?limit=200")?;
    for c in r.body["conversations"].as_array().into_iter().flatten() {
        for id in run_ids(c) {
            api.wait_indexed(&id, Duration::from_secs(60))?;
        }
    }
    Ok(())
}

/// `kith search WORD --json --mode keyword` with `extra` flags.
fn search(device: &Machine, word: &str, extra: &[&str]) -> Result<Value> {
    device.json(&[&["search", word, "--json", "--mode", "keyword"], extra].concat())
}

/// Conversation ids of the groups `search` returns, each with hits.
fn found(device: &Machine, word: &str, extra: &[&str]) -> Result<BTreeSet<String>> {
    let res = search(device, word, extra)?;
    let groups = items(&res["groups"]);
    let empty = groups.iter().any(|g| items(&g["hits"]).is_empty());
    ensure!(!empty, "{extra:?}: a group without hits: {res:#}");
    Ok(keys(&groups, "conversation_id"))
}

/// The two subagents of the Claude session, and what each finds.
const AGENTS: [&str; 2] = ["a1f00d", "b2f00d"];
const FOUND: [&str; 2] = ["sandpiper", "dunlin"];

#[test]
fn a_claude_session_hooked_every_turn_with_two_subagents_is_one_conversation() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let api = central.client(&token);
    let alice = Machine::new(&central, &token)?;
    let mut main = Claude::session(&alice, 1, "/home/alice/proj");
    let mut helpers = Vec::new();
    for k in 1..=6 {
        let mut calls = vec![("Bash", json!({"command": "cargo check"}), "Finished")];
        // Turns 3 and 4 each run a subagent to its end before answering;
        // Claude Code then fires SubagentStop, which captures both files.
        if let Some(i) = [3, 4].iter().position(|&t| t == k) {
            let mut helper = main.subagent(AGENTS[i]);
            let said = format!("look for {}", FOUND[i]);
            // Only the first subagent touches a file.
            let tools = [edit("/home/alice/proj/src/lexer.rs")];
            let tools = &tools[..usize::from(i == 0)];
            helper.turn(&said, tools, &format!("subagent found {}", FOUND[i]))?;
            let input = json!({"subagent_type": "Explore", "prompt": said});
            calls.push(("Task", input, AGENTS[i]));
            helpers.push(helper);
        }
        let said = format!("turn {k} asks about heron{k}");
        main.turn(&said, &calls, &format!("turn {k} answer names kestrel{k}"))?;
        let spawned = (k == 3 || k == 4).then(|| &helpers[k as usize - 3]);
        main.stop(&alice, spawned)?;
    }
    let mut other = Claude::session(&alice, 2, "/home/alice/other");
    other.turn("an unrelated session about zebras", &[], "zebras noted")?;
    other.stop(&alice, None)?;
    flush(&alice)?;

    // `kith tree`: one conversation for the session, right before its two
    // subagents; the other session beside it.
    let tree = tree_of(&alice)?;
    let roots = tree.iter().filter(|c| c["depth"] == 0).count();
    assert_eq!(roots, 2, "a conversation per session: {tree:#?}");
    let mine = of_session(&tree, &main.session);
    assert_eq!(mine.len(), 3, "the session and its subagents: {mine:#?}");
    let (conv, children) = (mine[0], &tree[1..3]);
    let (id, ids) = (str_of(conv, "id"), run_ids(conv));
    assert!(conv["depth"] == 0 && tree[0] == *conv, "{tree:#?}");
    assert!(
        conv["delta_count"].as_u64() >= Some(5),
        "a delta a turn: {conv:#}"
    );
    assert_eq!(conv["delta_count"].as_u64(), Some(ids.len() as u64));
    for child in children {
        let under = child["parent_id"] == id.as_str() && child["depth"] == 1;
        assert!(under, "subagents right after it: {tree:#?}");
    }
    let child_ids = keys(children, "id");

    // `kith show` by a run id or a prefix of the conversation id: every
    // turn, the last one too, and the subagents inline; nothing else.
    let turn = |k| [format!("heron{k}"), format!("kestrel{k}")];
    let mut words: Vec<String> = (1..=6).flat_map(turn).collect();
    words.extend(FOUND.map(str::to_owned));
    for name in [ids[0].as_str(), &id[..8]] {
        let shown = alice.text(&["show", name])?;
        says_all(&shown, &words)?;
        assert!(!shown.contains("zebras"), "another session: {shown}");
    }
    let doc = alice.json(&["show", ids[ids.len() - 1].as_str(), "--json"])?;
    assert_eq!(
        doc["conversation"]["id"],
        id.as_str(),
        "its last delta names it"
    );
    assert_eq!(keys(&items(&doc["subagents"]), "id"), child_ids);
    let turns = doc["turns"].to_string();
    assert!(!turns.contains("zebras"), "{turns}");
    says_all(&turns, &turn(6))?;

    // The turns, page by page, are the turns at once.
    let turns = format!("/api/conversations/{id}/turns");
    let all = api.get(&format!("{turns}?limit=1000"))?.body;
    let (mut paged, mut offset) = (Vec::new(), Some(0));
    while let Some(at) = offset {
        let page = api.get(&format!("{turns}?offset={at}&limit=3"))?.body;
        paged.extend(items(&page["turns"]));
        offset = page["next_offset"].as_u64();
    }
    assert_eq!(paged, items(&all["turns"]), "paged turns");
    assert_eq!(all["total"].as_u64(), Some(paged.len() as u64));
    says_all(&all["turns"].to_string(), &words[..12])?;

    // `--raw`: each conversation's own bytes exactly, without its subagents'.
    let want = std::fs::read(&main.file)?;
    assert!(alice.ok(&["show", &id[..8], "--raw"])? == want, "--raw");
    assert!(api.get_bytes(&format!("/api/conversations/{id}/jsonl"))? == (200, want));
    let mut raws = BTreeSet::new();
    for child in &child_ids {
        raws.insert(alice.ok(&["show", child, "--raw"])?);
    }
    let files = helpers.iter().map(|h| std::fs::read(&h.file));
    let files = files.collect::<Result<_, _>>()?;
    assert!(raws == files, "a subagent's --raw is its own transcript");

    // The agent's own session id names the session (its subagents carry
    // it too, and are not what it names); a prefix two sessions share is
    // ambiguous between those two, subagents not counted.
    let shown = alice.text(&["show", &main.session])?;
    says_all(&shown, &words)?;
    assert!(!shown.contains("zebras"), "another session: {shown}");
    let by_session = api.get(&format!("/api/conversations/{}", main.session))?;
    assert_eq!(by_session.body["conversation"]["id"], id.as_str());
    let zebras = alice.text(&["show", &other.session])?;
    assert!(
        zebras.contains("zebras") && !zebras.contains("heron1"),
        "{zebras}"
    );
    let shared = &main.session[..8];
    assert!(other.session.starts_with(shared));
    let err = alice.fails(&["show", shared])?;
    assert!(err.contains("names 2 conversations"), "{err}");

    // What a subagent did counts for the conversation that spawned it.
    wait_all_indexed(&api)?;
    let res = search(&alice, "sandpiper", &["--file", "src/lexer.rs"])?;
    let groups = items(&res["groups"]);
    assert_eq!(
        keys(&groups, "conversation_id"),
        set(&[&id]),
        "under its parent"
    );
    // The subagent's own hit is among them, under its parent's group.
    let mut tree_ids = child_ids.clone();
    tree_ids.insert(id.clone());
    let hit_convs = keys(&items(&groups[0]["hits"]), "conversation_id");
    let of_child = !hit_convs.is_disjoint(&child_ids);
    assert!(of_child && hit_convs.is_subset(&tree_ids), "{res:#}");
    let other = of_session(&tree, &other.session)[0];
    let by_file = listed(&api, "file=src/lexer.rs")?;
    assert!(by_file.contains(&id) && !by_file.contains(&str_of(other, "id")));

    // A run-id prefix several conversations share is refused; so is a
    // conversation nobody has.
    let (first, other_run) = (ids[0].as_bytes(), &run_ids(other)[0]);
    let shared = other_run
        .bytes()
        .zip(first)
        .take_while(|(a, b)| a == *b)
        .count();
    assert!(shared >= 4, "{} and {other_run} share a prefix", ids[0]);
    let prefix = &ids[0][..shared.min(8)];
    let err = alice.fails(&["show", prefix])?;
    assert!(err.contains("ambiguous"), "{err}");
    let conflict = api.get(&format!("/api/conversations/{prefix}"))?;
    assert_eq!(conflict.code(), "ambiguous_id");
    let nobody = format!("c{}", "0".repeat(32));
    says_not_found(&alice.fails(&["show", &nobody])?)?;
    let gone = api.get(&format!("/api/conversations/{nobody}"))?;
    assert_eq!(gone.status, 404);
    Ok(())
}

/// One Codex turn (after a `session_meta` line when `k` is 1): the person's
/// words, in both streams Codex writes them to, an `exec_command` call and
/// its output, the answer.
fn codex_turn(thread: &str, k: u32, said: &str, answer: &str) -> Vec<Value> {
    let cwd = "/home/alice/codex";
    let at = |kind: &str, p: Value| json!({"timestamp": time(k * 10), "type": kind, "payload": p});
    let item = |p: Value| at("response_item", p);
    let call = format!("call_{k}");
    let user = json!([{"type": "input_text", "text": said}]);
    let mut lines = vec![
        at(
            "turn_context",
            json!({"turn_id": format!("turn-{k}"), "cwd": cwd, "model": "gpt-5.1"}),
        ),
        item(json!({"type": "message", "role": "user", "content": user})),
        at(
            "event_msg",
            json!({"type": "user_message", "message": said, "images": []}),
        ),
        item(
            json!({"type": "function_call", "name": "exec_command", "call_id": call,
                    "arguments": json!({"cmd": "cargo build"}).to_string()}),
        ),
        item(json!({"type": "function_call_output", "call_id": call, "output": "Finished"})),
        item(
            json!({"type": "message", "role": "assistant", "phase": "final_answer",
                    "content": [{"type": "output_text", "text": answer}]}),
        ),
    ];
    if k == 1 {
        let meta = json!({"id": thread, "timestamp": time(0), "cwd": cwd, "source": "cli",
            "originator": "codex_cli_rs", "cli_version": "0.125.0", "git": {"branch": "main"}});
        lines.insert(0, at("session_meta", meta));
    }
    lines
}

/// One pi turn (v3 entries, after the `session` header when `k` is 1): the
/// person's words, a `bash` tool call and its result, the answer.
fn pi_turn(id: &str, k: u32, said: &str, answer: &str) -> Vec<Value> {
    let entry = |n: u32, message: Value| {
        let me = k * 10 + n;
        let parent = (me > 10).then(|| format!("{:08x}", me - 1));
        json!({"type": "message", "id": format!("{me:08x}"), "parentId": parent,
               "timestamp": time(me), "message": message})
    };
    let assistant = |content: Value, stop: &str| {
        json!({"role": "assistant", "content": content, "api": "anthropic-messages",
               "provider": "anthropic", "model": "claude-sonnet-4-5", "stopReason": stop,
               "usage": {"input": 10, "output": 5, "totalTokens": 15}})
    };
    let call = format!("call_{k}");
    let text = |t: &str| json!([{"type": "text", "text": t}]);
    let bash = json!([{"type": "toolCall", "id": call, "name": "bash",
                       "arguments": {"command": "ls"}}]);
    let result = json!({"role": "toolResult", "toolCallId": call, "toolName": "bash",
                        "content": text("main.rs"), "isError": false});
    let mut lines = vec![
        entry(0, json!({"role": "user", "content": text(said)})),
        entry(1, assistant(bash, "toolUse")),
        entry(2, result),
        entry(3, assistant(text(answer), "stop")),
    ];
    if k == 1 {
        let header = json!({"type": "session", "version": 3, "id": id, "timestamp": time(0),
                            "cwd": "/home/alice/pi"});
        lines.insert(0, header);
    }
    lines
}

#[test]
fn codex_and_pi_sessions_hooked_every_turn_are_one_conversation_each() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let alice = Machine::new(&central, &token)?;
    let thread = "019e1625-789d-76c0-80ab-3724b5ddb799";
    let rollout = format!(".codex/sessions/2026/05/11/rollout-2026-05-11T12-00-00-{thread}.jsonl");
    let rollout = alice.path(&rollout);
    let pi_id = "7c0ffee0-0000-4000-8000-000000000003";
    let pi = format!(".pi/agent/sessions/--home-alice-pi--/2026-05-11T10-00-00-000Z_{pi_id}.jsonl");
    let pi = alice.path(&pi);
    for k in 1..=5 {
        let said = format!("codex {k} asks puffin{k}");
        let answer = format!("codex {k} says gannet{k}");
        append(&rollout, &codex_turn(thread, k, &said, &answer))?;
        // Codex's `notify` passes its payload as the last argument.
        let notify = json!({"type": "agent-turn-complete", "thread-id": thread,
            "turn-id": format!("turn-{k}"), "cwd": "/home/alice/codex", "input-messages": [said],
            "last-assistant-message": answer});
        alice.hook(&[&notify.to_string()], &Value::Null)?;
        let (said, answer) = (format!("pi {k} ibis{k}"), format!("pi {k} egret{k}"));
        append(&pi, &pi_turn(pi_id, k, &said, &answer))?;
        alice.hook(&["--pi", &pi.to_string_lossy()], &Value::Null)?;
    }
    flush(&alice)?;

    let tree = tree_of(&alice)?;
    assert_eq!(tree.len(), 2, "one conversation per session: {tree:#?}");
    let cases = [
        (thread, &rollout, "codex", ["puffin", "gannet"], "ibis"),
        (pi_id, &pi, "pi", ["ibis", "egret"], "puffin"),
    ];
    for (session, file, runtime, words, elsewhere) in cases {
        let convs = of_session(&tree, session);
        assert_eq!(convs.len(), 1, "{runtime}: {tree:#?}");
        let c = convs[0];
        assert!(c["agent_runtime"] == runtime && c["depth"] == 0, "{c:#}");
        assert!(
            c["delta_count"].as_u64() >= Some(5),
            "a delta a turn: {c:#}"
        );
        let ids = run_ids(c);
        let shown = alice.text(&["show", &ids[0]])?;
        let turn = |k| words.map(|w| format!("{w}{k}"));
        says_all(&shown, &(1..=5).flat_map(turn).collect::<Vec<_>>())?;
        assert!(!shown.contains(elsewhere), "another session: {shown}");
        let raw = alice.ok(&["show", &ids[ids.len() - 1], "--raw"])?;
        assert!(raw == std::fs::read(file)?, "{runtime}: --raw");
    }
    Ok(())
}

#[test]
fn facet_filters_keep_exactly_the_conversations_that_did_the_thing() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    central.register("bob.test", "desktop")?;
    let api = central.client(&token);
    let alice = Machine::new(&central, &token)?;
    let mut parser = Claude::session(&alice, 3, "/home/alice/proj");
    let file = "/home/alice/proj/src/parser.rs";
    let test = json!({"command": "cargo test --release"});
    let tools = [
        ("Read", json!({ "file_path": file }), "fn parse"),
        edit(file),
        ("Bash", test, "ok"),
    ];
    parser.turn("the quokka parser drops a token", &tools, "fixed it")?;
    parser.stop(&alice, None)?;
    let mut docs = Claude::session(&alice, 4, "/home/alice/site");
    let file = "/home/alice/site/docs/readme.md";
    let write = json!({"file_path": file, "content": "# site"});
    let ls = json!({"command": "ls docs"});
    let tools = [
        ("Read", json!({ "file_path": file }), "# site"),
        ("Write", write, "ok"),
        ("Bash", ls, "readme.md"),
    ];
    docs.turn("the quokka readme is stale", &tools, "refreshed it")?;
    docs.stop(&alice, None)?;
    flush(&alice)?;
    wait_all_indexed(&api)?;
    let tree = tree_of(&alice)?;
    let a = str_of(of_session(&tree, &parser.session)[0], "id");
    let b = str_of(of_session(&tree, &docs.session)[0], "id");
    let (only_a, only_b, both, none) = (set(&[&a]), set(&[&b]), set(&[&a, &b]), set(&[]));

    let cases: [(&[&str], &BTreeSet<String>); 21] = [
        (&[], &both),
        (&["--file", "src/parser.rs"], &only_a),
        (&["--file", "/home/alice/proj/src/parser.rs"], &only_a),
        (&["--file", "parser.rs"], &only_a),
        (&["--file", "rser.rs"], &none),
        (&["--file", "docs/readme.md"], &only_b),
        (&["--tool", "Edit"], &only_a),
        (&["--tool", "Write"], &only_b),
        (&["--tool", "Bash"], &both),
        (&["--tool", "Edi"], &none),
        (&["--command", "cargo test"], &only_a),
        (&["--command", "ls docs"], &only_b),
        (&["--file", "src/parser.rs", "--command", "ls docs"], &none),
        (&["--project", "/home/alice/proj"], &only_a),
        (&["--project", "/home/alice/pro"], &none),
        (&["--branch", "main"], &both),
        (&["--since", "2026-05-01T00:00:00Z"], &both),
        (&["--until", "2026-05-01T00:00:00Z"], &none),
        (&["--owner", "alice.test"], &both),
        (&["--owner", "bob.test"], &none),
        (&["--group", "conversation", "--tool", "Write"], &only_b),
    ];
    for (flags, want) in cases {
        assert_eq!(&found(&alice, "quokka", flags)?, want, "{flags:?}");
    }
    let raw = search(
        &alice,
        "quokka",
        &["--group", "none", "--file", "parser.rs"],
    )?;
    let hits = items(&raw["hits"]);
    assert!(
        !hits.is_empty() && items(&raw["groups"]).is_empty(),
        "{raw:#}"
    );
    let hers = |h: &Value| h["conversation_id"] == a.as_str() && h["owner"] == "alice.test";
    assert!(hits.iter().all(hers), "{raw:#}");

    let listings = [
        ("file=src/parser.rs", &only_a),
        ("file=rser.rs", &none),
        ("tool=Write", &only_b),
        ("command=cargo%20test", &only_a),
        ("project=/home/alice/proj", &only_a),
        ("project=/home/alice/pro", &none),
        ("until=2026-05-01T00:00:00Z", &none),
        ("owner=alice.test", &both),
        ("owner=bob.test", &none),
    ];
    for (query, want) in listings {
        assert_eq!(&listed(&api, query)?, want, "{query}");
    }
    Ok(())
}

#[test]
fn another_persons_conversation_is_absent_by_every_name() -> Result<()> {
    let central = Central::start()?;
    let alice_token = central.register("alice.test", "laptop")?;
    let bob_token = central.register("bob.test", "desktop")?;
    let (alice_api, bob_api) = (central.client(&alice_token), central.client(&bob_token));
    let alice = Machine::new(&central, &alice_token)?;
    let bob = Machine::new(&central, &bob_token)?;
    let mut hers = Claude::session(&alice, 5, "/home/alice/proj");
    for k in 1..=2 {
        let tools = [edit("/home/alice/proj/src/parser.rs")];
        hers.turn(&format!("the quokka parser, part {k}"), &tools, "fixed it")?;
        hers.stop(&alice, None)?;
    }
    let mut his = Claude::session(&bob, 6, "/home/bob/proj");
    his.turn(
        "my quokka notes",
        &[edit("/home/bob/proj/notes.md")],
        "saved",
    )?;
    his.stop(&bob, None)?;
    flush(&alice)?;
    flush(&bob)?;
    wait_all_indexed(&alice_api)?;
    wait_all_indexed(&bob_api)?;
    let her_tree = tree_of(&alice)?;
    let her = of_session(&her_tree, &hers.session)[0];
    let (her_id, her_runs) = (str_of(her, "id"), run_ids(her));
    let his_tree = tree_of(&bob)?;
    let his_id = str_of(of_session(&his_tree, &his.session)[0], "id");

    assert_eq!(keys(&his_tree, "id"), set(&[&his_id]), "bob's own only");
    for name in [&her_runs[0], &her_runs[1], &her_id, &her_id[..8]] {
        let hers = alice_api.get(&format!("/api/conversations/{name}"))?;
        assert_eq!(hers.status, 200);
        for part in ["", "/turns", "/jsonl"] {
            let got = bob_api.get(&format!("/api/conversations/{name}{part}"))?;
            assert_eq!(got.status, 404, "bob reads {name}{part}: {got:?}");
        }
        for flag in [None, Some("--raw"), Some("--json")] {
            let args: Vec<&str> = ["show", name].into_iter().chain(flag).collect();
            says_not_found(&bob.fails(&args)?)?;
        }
    }

    let parser = ["--file", "src/parser.rs"];
    assert_eq!(found(&bob, "quokka", &[])?, set(&[&his_id]), "his own only");
    assert_eq!(found(&bob, "quokka", &parser)?, set(&[]));
    assert_eq!(found(&bob, "quokka", &["--owner", "alice.test"])?, set(&[]));
    assert_eq!(found(&alice, "quokka", &parser)?, set(&[&her_id]));
    let raw = search(&bob, "quokka", &["--group", "none"])?;
    let hits = items(&raw["hits"]);
    let his = hits.iter().all(|h| h["owner"] == "bob.test");
    assert!(!hits.is_empty() && his, "{raw:#}");
    assert_eq!(listed(&bob_api, "file=src/parser.rs")?, set(&[]));
    assert_eq!(listed(&bob_api, "owner=alice.test")?, set(&[]));
    assert_eq!(listed(&alice_api, "file=src/parser.rs")?, set(&[&her_id]));
    Ok(())
}

/// Gemini CLI keeps an edited message in its first place: `/turns`, the
/// title and the turn count follow the live version (a real session, then
/// a later delta that edits its first prompt), where central used to move
/// it to the end, keep the old text as the title and count both versions.
#[test]
fn an_edited_gemini_prompt_stays_first_and_names_the_conversation() -> Result<()> {
    let central = Central::start()?;
    let token = kith_tests::register_local(&central.data_dir, "gina.local", "laptop")?;
    let api = central.client(&token);
    let session =
        kith_shared::fixtures::read("gemini/tally/chats/session-2026-05-13T09-14-7c1e4a2b.jsonl");
    let edit = concat!(
        r#"{"id":"u-1","timestamp":"2026-05-13T09:14:11.204Z","type":"user","#,
        r#""content":[{"text":"Why does tally reject amounts like 1,200?"}]}"#,
        "\n"
    );
    let post = |from: usize, bytes: &[u8]| -> Result<String> {
        let text = String::from_utf8(bytes.to_vec())?;
        api.ingest(&json!({
            "jsonl": text,
            "agent_runtime": "gemini",
            "source_identity": "gemini-tally",
            "from_offset": from,
            "to_offset": from + bytes.len(),
        }))
    };
    post(0, &session)?;
    let last = post(session.len(), edit.as_bytes())?;
    api.wait_indexed(&last, Duration::from_secs(60))?;
    // The chain's second job may still be folding the first: wait for both.
    wait_all_indexed(&api)?;
    let list = api.get("/api/conversations?limit=10")?;
    let conversations = items(&list.body["conversations"]);
    ensure!(conversations.len() == 1, "{list:?}");
    let c = &conversations[0];
    ensure!(
        c["title"] == "Why does tally reject amounts like 1,200?",
        "{c}"
    );
    let id = str_of(c, "id");
    let turns = api.get(&format!("/api/conversations/{id}/turns"))?;
    let turns = items(&turns.body["turns"]);
    ensure!(
        turns.first().map(|t| t["text"].clone())
            == Some(json!("Why does tally reject amounts like 1,200?")),
        "{turns:?}"
    );
    ensure!(
        !turns
            .iter()
            .any(|t| str_of(t, "text").contains("thousands separator")),
        "the old version is gone: {turns:?}"
    );
    // Eight live turns (as the session alone reads), not nine versions.
    ensure!(
        c["turn_count"] == turns.len() && turns.len() == 8,
        "{c} {turns:?}"
    );
    Ok(())
}
