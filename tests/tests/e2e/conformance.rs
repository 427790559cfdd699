//! One conformance suite for every search backend (SPEC "Search backends"):
//! the same requests, over real HTTP to a real kith-central, must give the
//! same outcomes on the embedded index and on Meilisearch.
//!
//! Every test runs against the embedded backend. When `KITH_TEST_MEILI_URL`
//! (and optionally `KITH_TEST_MEILI_KEY`) is set, it also runs against that
//! Meilisearch server, each run on its own index (deleted afterwards); an
//! unreachable server is then a failure, not a skip. (`tests/run.sh` starts
//! one and sets both.) The tests that stop and start the search server
//! under central start Meilisearch processes of their own
//! (`kith_tests::meili`); they say why when they cannot. With
//! `KITH_REQUIRE_MEILI=1` (tests/run.sh sets it when it found Meilisearch)
//! a missing server or binary fails the test instead.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use kith_tests::meili::{find_bin, Meili};
use kith_tests::needs::{missing, REQUIRE_MEILI};
use kith_tests::{
    bin, claude_user_line, delta, hit_run_ids, json_response, model_dir, Api, Central, StandIn,
};
use serde_json::{json, Value};

const INDEXED_WITHIN: Duration = Duration::from_secs(30);
const EMBEDDED_WITHIN: Duration = Duration::from_secs(120);

/// One backend the suite runs against: the environment that selects it.
struct Backend {
    name: &'static str,
    env: Vec<(String, String)>,
    /// Deletes the Meilisearch index of this run when dropped.
    _cleanup: Option<MeiliIndexGuard>,
}

/// Says, past the test harness's capture, that part of a test did not run.
fn skipped(test: &str, backend: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "{test}: skipped on {backend}: {why}");
}

/// The backends to run: embedded always, Meilisearch when configured.
fn backends() -> Result<Vec<Backend>> {
    let mut out = vec![Backend {
        name: "embedded",
        env: Vec::new(),
        _cleanup: None,
    }];
    let Some(url) = std::env::var("KITH_TEST_MEILI_URL")
        .ok()
        .filter(|u| !u.is_empty())
    else {
        missing(
            REQUIRE_MEILI,
            "the test on Meilisearch",
            "KITH_TEST_MEILI_URL is not set (tests/run.sh starts a Meilisearch when it finds one)",
        )?;
        return Ok(out);
    };
    let key = std::env::var("KITH_TEST_MEILI_KEY")
        .ok()
        .filter(|k| !k.is_empty());
    let health = reqwest::blocking::Client::new()
        .get(format!("{}/health", url.trim_end_matches('/')))
        .timeout(Duration::from_secs(5))
        .send()
        .with_context(|| format!("KITH_TEST_MEILI_URL={url} is set but unreachable"))?;
    if !health.status().is_success() {
        bail!(
            "Meilisearch at {url} answered /health with {}",
            health.status()
        );
    }
    let index = unique_index_name();
    let mut env = vec![
        ("KITH_SEARCH_BACKEND".to_owned(), "meilisearch".to_owned()),
        ("KITH_MEILI_URL".to_owned(), url.clone()),
        ("KITH_MEILI_INDEX".to_owned(), index.clone()),
    ];
    if let Some(k) = &key {
        env.push(("KITH_MEILI_KEY".to_owned(), k.clone()));
    }
    out.push(Backend {
        name: "meilisearch",
        env,
        _cleanup: Some(MeiliIndexGuard { url, key, index }),
    });
    Ok(out)
}

/// `kith-test-<pid>-<time>-<n>`: no two runs (or tests) share an index.
fn unique_index_name() -> String {
    static N: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!(
        "kith-test-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

struct MeiliIndexGuard {
    url: String,
    key: Option<String>,
    index: String,
}

impl MeiliIndexGuard {
    /// Deletes the index and waits until Meilisearch has.
    fn delete(&self) -> Result<()> {
        let base = self.url.trim_end_matches('/');
        let http = reqwest::blocking::Client::new();
        let auth = |req: reqwest::blocking::RequestBuilder| match &self.key {
            Some(k) => req.bearer_auth(k),
            None => req,
        };
        let task: Value = auth(http.delete(format!("{base}/indexes/{}", self.index)))
            .send()?
            .error_for_status()?
            .json()?;
        let uid = task["taskUid"].as_u64().context("no taskUid")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let task: Value = auth(http.get(format!("{base}/tasks/{uid}")))
                .send()?
                .json()?;
            match task["status"].as_str() {
                Some("succeeded") => return Ok(()),
                Some("failed" | "canceled") => bail!("deleting the index: {task}"),
                _ if std::time::Instant::now() > deadline => {
                    bail!("deleting the index did not finish: {task}")
                }
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
}

impl Drop for MeiliIndexGuard {
    fn drop(&mut self) {
        let _ = self.delete();
    }
}

/// A central on a fresh data directory with `backend` (plus `extra` env).
struct Setup {
    central: Central,
    _tmp: tempfile::TempDir,
}

impl Setup {
    /// An API client as a new machine `machine` of `user`.
    fn client(&self, user: &str, machine: &str) -> Result<Api> {
        Ok(self.central.client(&self.central.register(user, machine)?))
    }
}

impl Backend {
    fn start(&self, extra: &[(&str, &str)]) -> Result<Setup> {
        let tmp = tempfile::tempdir()?;
        let central = self.start_on(&tmp.path().join("data"), extra)?;
        Ok(Setup { central, _tmp: tmp })
    }

    fn start_on(&self, data: &Path, extra: &[(&str, &str)]) -> Result<Central> {
        let mut env: Vec<(&str, &str)> = self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        env.extend_from_slice(extra);
        Central::start_on(data, &env)
    }

    /// Deletes every chunk of this backend's index behind central's back
    /// (central must be stopped): the embedded index's folder, or the
    /// Meilisearch index.
    fn lose_index(&self, data: &Path) -> Result<()> {
        match &self._cleanup {
            None => Ok(std::fs::remove_dir_all(data.join("index"))?),
            Some(guard) => guard.delete(),
        }
    }

    /// An admin command of `kith-central` on `data`, on this backend.
    fn admin(&self, data: &Path, args: &[&str]) -> Result<Output> {
        let mut cmd = Command::new(bin("kith-central"));
        cmd.args(args)
            .arg("--data-dir")
            .arg(data)
            .env_remove("KITH_DATA_DIR")
            .env_remove("KITH_SEARCH_BACKEND")
            .stdin(Stdio::null());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        Ok(cmd.output()?)
    }
}

/// Ingests `text` as a Claude Code run with `fields` merged into the body.
fn ingest(api: &Api, source: &str, text: &str, fields: Value) -> Result<String> {
    let mut body = delta(source, 0, &claude_user_line(text, "2026-05-11T08:00:00Z"));
    merge(&mut body, fields);
    post_delta(api, &body)
}

/// A Codex run: one user message, then an `exec_command` call for each of
/// `commands`.
fn ingest_codex(api: &Api, source: &str, text: &str, commands: &[&str]) -> Result<String> {
    let mut lines = vec![json!({
        "timestamp": "2026-05-11T09:00:00Z", "type": "response_item",
        "payload": {"type": "message", "role": "user",
                    "content": [{"type": "input_text", "text": text}]}
    })];
    for (n, cmd) in commands.iter().enumerate() {
        lines.push(json!({
            "timestamp": "2026-05-11T09:00:01Z", "type": "response_item",
            "payload": {"type": "function_call", "name": "exec_command",
                        "arguments": json!({"cmd": cmd}).to_string(), "call_id": format!("c{n}")}
        }));
    }
    let jsonl: String = lines.iter().map(|l| format!("{l}\n")).collect();
    let mut body = delta(source, 0, &jsonl);
    body["agent_runtime"] = json!("codex");
    post_delta(api, &body)
}

/// Posts one delta and waits until central indexed it; returns its run id.
fn post_delta(api: &Api, body: &Value) -> Result<String> {
    let id = api.ingest(body)?;
    api.wait_indexed(&id, INDEXED_WITHIN)?;
    Ok(id)
}

/// A Claude Code transcript as Claude Code writes it (a person's words,
/// the assistant's tool calls, each line with the session's place and
/// branch), sent in deltas as the agent sends a growing file.
struct Session {
    source: String,
    cwd: String,
    branch: String,
    /// Lines written, for uuids and times.
    n: u32,
    /// Bytes sent: where the next delta starts.
    sent: u64,
    /// Lines written since the last delta.
    pending: String,
}

impl Session {
    fn new(source: &str, cwd: &str, branch: &str) -> Self {
        Self {
            source: source.to_owned(),
            cwd: cwd.to_owned(),
            branch: branch.to_owned(),
            n: 0,
            sent: 0,
            pending: String::new(),
        }
    }

    fn line(&mut self, kind: &str, message: Value) -> &mut Self {
        self.n += 1;
        let line = json!({
            "type": kind, "uuid": format!("{}-{:04}", self.source, self.n), "parentUuid": null,
            "sessionId": format!("session-{}", self.source), "version": "2.1.14",
            "timestamp": format!("2026-05-11T08:{:02}:{:02}Z", self.n / 60 % 60, self.n % 60),
            "cwd": self.cwd, "gitBranch": self.branch, "message": message,
        });
        self.pending.push_str(&format!("{line}\n"));
        self
    }

    fn user(&mut self, text: &str) -> &mut Self {
        self.line("user", json!({"role": "user", "content": text}))
    }

    /// An assistant message that calls `tool` with `input`.
    fn tool(&mut self, tool: &str, input: Value) -> &mut Self {
        let id = format!("{}-{}", self.source, self.n + 1);
        let call =
            json!({"type": "tool_use", "id": format!("toolu-{id}"), "name": tool, "input": input});
        self.line(
            "assistant",
            json!({"role": "assistant", "id": format!("msg-{id}"),
                   "model": "claude-sonnet-4-5", "content": [call]}),
        )
    }

    /// Sends the lines written since the last delta as one delta, with
    /// `fields` merged into the body, and waits until it is indexed.
    fn send(&mut self, api: &Api, fields: Value) -> Result<String> {
        let jsonl = std::mem::take(&mut self.pending);
        let mut body = delta(&self.source, self.sent, &jsonl);
        merge(&mut body, fields);
        self.sent += jsonl.len() as u64;
        post_delta(api, &body)
    }
}

fn merge(body: &mut Value, fields: Value) {
    if let (Some(b), Value::Object(f)) = (body.as_object_mut(), fields) {
        b.extend(f);
    }
}

/// Searches and returns the whole reply body; a non-200 is an error.
fn search(api: &Api, body: Value) -> Result<Value> {
    let r = api.post("/api/search", &body)?;
    if r.status != 200 {
        bail!("search {body} answered {r:?}");
    }
    Ok(r.body)
}

fn chunk_ids(body: &Value) -> Vec<String> {
    body["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| h["chunk_id"].as_str().map(str::to_owned))
        .collect()
}

/// Run ids of a keyword search for `query` with `filters`.
fn keyword(api: &Api, query: &str, filters: Value) -> Result<Vec<String>> {
    let mut ids = hit_run_ids(&search(
        api,
        json!({"query": query, "mode": "keyword", "filters": filters, "limit": 100}),
    )?);
    ids.sort();
    Ok(ids)
}

fn sorted(ids: &[&String]) -> Vec<String> {
    let mut v: Vec<String> = ids.iter().map(|s| (*s).clone()).collect();
    v.sort();
    v
}

/// The distinct runs, sorted, of the hits (up to 100) of a `mode` search
/// for `query` with `filters`.
fn found(api: &Api, mode: &str, query: &str, filters: &Value) -> Result<Vec<String>> {
    let body = search(
        api,
        json!({"query": query, "mode": mode, "filters": filters, "limit": 100}),
    )?;
    if !body["degraded"].is_null() {
        bail!("{mode} search {query:?} fell back: {body}");
    }
    let mut ids = hit_run_ids(&body);
    ids.sort();
    ids.dedup();
    Ok(ids)
}

/// The search modes a test can run: hybrid only with a model.
fn modes(models: &Option<String>) -> Vec<&'static str> {
    match models {
        Some(_) => vec!["keyword", "hybrid"],
        None => vec!["keyword"],
    }
}

/// `owner` shares `scope` (`run:<id>` or `tag:<tag>`) with `with`.
fn share(owner: &Api, scope: &str, with: &str) -> Result<()> {
    let r = owner.post("/api/shares", &json!({"scope": scope, "with": with}))?;
    if r.status != 201 {
        bail!("sharing {scope} with {with} answered {r:?}");
    }
    Ok(())
}

#[test]
fn conformance_ingest_keyword_and_hit_shape() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let id = ingest(
            &alice,
            "a",
            "deploy the frobnicator to staging before lunch",
            json!({}),
        )?;
        ingest(&alice, "b", "an unrelated note about gardening", json!({}))?;

        let body = search(&alice, json!({"query": "frobnicator", "mode": "keyword"}))?;
        assert_eq!(hit_run_ids(&body), vec![id.clone()], "{b}: {body}");
        assert_eq!(body["backend"], b, "{b}");
        let hit = &body["hits"][0];
        assert_eq!(hit["chunk_id"], format!("{id}-0"), "{b}: {hit}");
        assert_eq!(hit["role"], "user", "{b}");
        assert_eq!(hit["machine"], "laptop", "{b}");
        assert_eq!(hit["agent_runtime"], "claude-code", "{b}");
        assert_eq!(
            (hit["line_start"].as_u64(), hit["line_end"].as_u64()),
            (Some(1), Some(1)),
            "{b}"
        );
        assert!(
            hit["started_at"]
                .as_str()
                .unwrap_or_default()
                .starts_with("2026-05-11T08:00:00"),
            "{b}: {hit}"
        );
        assert!(
            hit["intent"]
                .as_str()
                .unwrap_or_default()
                .contains("frobnicator"),
            "{b}"
        );
        assert!(
            hit["text"]
                .as_str()
                .unwrap_or_default()
                .contains("deploy the frobnicator"),
            "{b}"
        );
        assert!(
            hit["snippet"]
                .as_str()
                .unwrap_or_default()
                .contains("«frobnicator»"),
            "{b}: the match is highlighted: {hit}"
        );
        assert!(hit["score"].as_f64().unwrap_or(0.0) > 0.0, "{b}");

        let none = search(&alice, json!({"query": "xylophone", "mode": "keyword"}))?;
        assert!(
            hit_run_ids(&none).is_empty(),
            "{b}: a word nobody wrote finds nothing: {none}"
        );
    }
    Ok(())
}

/// An irregular form and its base form find each other ("win" and "won";
/// "went", "go" and "gone") in both backends; other words do not.
#[test]
fn conformance_irregular_forms_find_their_base_form() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let won = ingest(&alice, "a", "Nate won the regional tournament", json!({}))?;
        let window = ingest(&alice, "b", "the window manager crashed", json!({}))?;
        let go = ingest(&alice, "c", "we go to the lake every summer", json!({}))?;
        let gone = ingest(&alice, "d", "the old build server is gone", json!({}))?;
        let found = |query: &str| keyword(&alice, query, json!({}));
        assert_eq!(found("win")?, [won.as_str()], "{b}");
        assert_eq!(found("won")?, [won.as_str()], "{b}");
        assert_eq!(found("went")?, sorted(&[&go, &gone]), "{b}");
        assert_eq!(found("gone")?, sorted(&[&go, &gone]), "{b}");
        assert_eq!(found("window")?, [window.as_str()], "{b}");
        assert_eq!(found("lake")?, [go.as_str()], "{b}");
    }
    Ok(())
}

/// A question typed as a sentence finds by keyword the turn that holds its
/// rarer words, though that turn has none of its first words: turns that
/// share only "when did" come after it, and a word that merely starts like
/// a query word ("campus" for "camping") matches nothing.
#[test]
fn conformance_a_question_finds_its_answer_by_keyword() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let answer = ingest(
            &alice,
            "a",
            "Melanie: we went camping by the lake with the kids",
            json!({}),
        )?;
        let mut asking = Vec::new();
        for (source, text) in [
            ("b", "When did the build break? When did it start?"),
            ("c", "When did you last rotate the keys?"),
            ("d", "When did the deploy go out?"),
        ] {
            asking.push(ingest(&alice, source, text, json!({}))?);
        }
        let campus = ingest(&alice, "e", "the campus tour was long", json!({}))?;
        let body = search(
            &alice,
            json!({"query": "When did Melanie go camping?", "mode": "keyword", "limit": 10}),
        )?;
        let ranked = hit_run_ids(&body);
        assert_eq!(ranked.first(), Some(&answer), "{b}: {ranked:?}");
        assert!(asking.iter().all(|r| ranked.contains(r)), "{b}: {ranked:?}");
        assert!(!ranked.contains(&campus), "{b}: {ranked:?}");
        let snippet = body["hits"][0]["snippet"].as_str().unwrap_or_default();
        assert!(
            snippet.contains("«Melanie»") && snippet.contains("«camping»"),
            "{b}: {snippet}"
        );
    }
    Ok(())
}

/// A task described in a paragraph, its subject named last, finds the turn
/// about that subject: past sixteen words a query's stopwords and question
/// words are what is left out.
#[test]
fn conformance_a_long_query_finds_its_last_words() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        // The answer holds none of the task's first sixteen words; the near
        // miss one of them.
        let answer = ingest(&alice, "a", "retry backoff doubles each attempt", json!({}))?;
        let near = ingest(&alice, "c", "chatted over lunch", json!({}))?;
        let other = ingest(&alice, "b", "lunch plans moved again", json!({}))?;
        let task = "I would like it if we could go over what it is that we did to \
                    the thing and then see what we can do with the retry backoff";
        let body = search(&alice, json!({"query": task, "mode": "keyword"}))?;
        let ranked = hit_run_ids(&body);
        assert_eq!(ranked.first(), Some(&answer), "{b}: {body}");
        assert!(ranked.contains(&near), "{b}: {body}");
        assert!(!ranked.contains(&other), "{b}: {body}");
    }
    Ok(())
}

/// The chunk holding every word of a query comes first, even where each of
/// its words alone has more matches than a search reads (each of those
/// saying its word earlier in its text).
#[test]
fn conformance_a_chunk_with_every_word_is_found_past_each_words_own_matches() -> Result<()> {
    let filler = "notes about the weekly schedule, the garden, the groceries and the long \
                  drive home to see the family over the holidays this year and next one too, \
                  with a stop at the lake";
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let mut turns: Vec<String> = Vec::new();
        // 150 turns a word: more chunks than a search reads for one word.
        for word in ["tokio", "runtime", "panic"] {
            turns.extend((0..150).map(|i| format!("{word} {i}: {filler}")));
        }
        turns.push(format!("{filler}, and then a tokio runtime panic"));
        let jsonl: String = turns
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let ts = format!("2026-05-11T08:{:02}:{:02}Z", i / 60, i % 60);
                claude_user_line(t, &ts)
            })
            .collect();
        post_delta(&alice, &delta("a", 0, &jsonl))?;
        // Bob's private chunk holds every word too, and is never a candidate.
        let bob = s.client("bob.test", "desktop")?;
        ingest(&bob, "b", "bob's tokio runtime panic, private", json!({}))?;
        let body = search(
            &alice,
            json!({"query": "tokio runtime panic", "mode": "keyword", "limit": 5}),
        )?;
        let snippets: Vec<&str> = body["hits"]
            .as_array()
            .map(|h| h.iter().filter_map(|h| h["snippet"].as_str()).collect())
            .unwrap_or_default();
        let every = |s: &str| {
            ["«tokio»", "«runtime»", "«panic»"]
                .iter()
                .all(|w| s.contains(w))
        };
        assert!(
            snippets.first().is_some_and(|s| every(s)),
            "{b}: {snippets:?}"
        );
        assert_eq!(
            snippets.iter().filter(|s| every(s)).count(),
            1,
            "{b}: {snippets:?}"
        );
        assert!(
            !snippets.iter().any(|s| s.contains("bob")),
            "{b}: {snippets:?}"
        );
        // Typed with a dash, as a flag is, a word is still that word.
        let dashed = search(
            &alice,
            json!({"query": "tokio -runtime panic", "mode": "keyword", "limit": 5}),
        )?;
        let first = dashed["hits"][0]["snippet"].as_str().unwrap_or_default();
        assert!(every(first), "{b}: {dashed}");
        // Bob, asking the same, finds his own and none of Alice's.
        let his = search(
            &bob,
            json!({"query": "tokio runtime panic", "mode": "keyword", "limit": 5}),
        )?;
        assert_eq!(his["hits"].as_array().map(Vec::len), Some(1), "{b}: {his}");
    }
    Ok(())
}

#[test]
fn conformance_every_filter_narrows_both_ways() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let desk = s.client("alice.test", "desktop")?;
        let w = "quasar";
        let root = ingest(
            &alice,
            "a",
            &format!("{w} root run"),
            json!({"tags": ["work", "infra"], "cwd": "/home/alice/proj",
                   "conversation_id": "conv-1", "started_at": "2026-01-10T00:00:00Z"}),
        )?;
        let child = ingest(
            &alice,
            "b",
            &format!("{w} child run"),
            json!({"parent_run_id": root, "cwd": "/home/alice/proj/sub",
                   "conversation_id": "conv-1", "started_at": "2026-02-10T00:00:00Z"}),
        )?;
        let other = ingest(
            &desk,
            "c",
            &format!("{w} desktop run"),
            json!({"tags": ["home"], "cwd": "/home/alice/projx",
                   "conversation_id": "conv-2", "started_at": "2026-03-10T00:00:00Z"}),
        )?;
        let codex = ingest_codex(&alice, "d", &format!("{w} codex run"), &[])?;

        let all = sorted(&[&root, &child, &other, &codex]);
        assert_eq!(keyword(&alice, w, json!({}))?, all, "{b}: no filter");
        for (filters, want) in [
            (json!({"machine": "desktop"}), vec![&other]),
            (json!({"machine": "laptop"}), vec![&root, &child, &codex]),
            (json!({"runtime": "codex"}), vec![&codex]),
            (
                json!({"runtime": "claude-code"}),
                vec![&root, &child, &other],
            ),
            (json!({"conversation_id": "conv-1"}), vec![&root, &child]),
            (json!({"root_run_id": root}), vec![&root, &child]),
            (json!({"tags": ["work"]}), vec![&root]),
            (json!({"tags": ["work", "home"]}), vec![]),
            (
                json!({"cwd_prefix": "/home/alice/proj"}),
                vec![&root, &child],
            ),
            (
                json!({"cwd_prefix": "/home/alice/proj/"}),
                vec![&root, &child],
            ),
            (json!({"cwd_prefix": "/home/alice/pro"}), vec![]),
            (json!({"cwd_prefix": "/home"}), vec![&root, &child, &other]),
            (
                json!({"since": "2026-02-10T00:00:00Z"}),
                vec![&child, &other, &codex],
            ),
            (json!({"until": "2026-02-10T00:00:00Z"}), vec![&root]),
            (
                json!({"since": "2026-02-01T00:00:00Z", "until": "2026-03-01T00:00:00Z"}),
                vec![&child],
            ),
            (
                json!({"machine": "laptop\" OR machine = \"desktop"}),
                vec![],
            ),
            (
                json!({"tags": ["x\\\" OR owner EXISTS OR tags = \\\"y"]}),
                vec![],
            ),
        ] {
            assert_eq!(
                keyword(&alice, w, filters.clone())?,
                sorted(&want),
                "{b}: {filters}"
            );
        }
    }
    Ok(())
}

#[test]
fn conformance_privacy_grants_and_revokes() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        let carol = s.client("carol.test", "tablet")?;
        let w = "marmalade";
        let mine = ingest(&alice, "a", &format!("{w} alice private"), json!({}))?;
        let bobs_root = ingest(&bob, "b", &format!("{w} bob root"), json!({}))?;
        let bobs_child = ingest(
            &bob,
            "c",
            &format!("{w} bob child"),
            json!({"parent_run_id": bobs_root}),
        )?;
        let bobs_tagged = ingest(
            &bob,
            "d",
            &format!("{w} bob tagged"),
            json!({"tags": ["family"]}),
        )?;

        assert_eq!(
            keyword(&alice, w, json!({}))?,
            vec![mine.clone()],
            "{b}: only her own"
        );
        // A hostile filter value cannot widen what she reads.
        let hostile = json!({"tags": ["family\") OR (owner EXISTS"]});
        assert!(keyword(&alice, w, hostile)?.is_empty(), "{b}");

        // A run grant covers the run and its descendants.
        let share = bob.post(
            "/api/shares",
            &json!({"scope": format!("run:{bobs_root}"), "with": "alice.test"}),
        )?;
        assert_eq!(share.status, 201, "{b}: {share:?}");
        let share_id = share.body["id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(
            keyword(&alice, w, json!({}))?,
            sorted(&[&mine, &bobs_root, &bobs_child]),
            "{b}: run grant"
        );
        assert_eq!(
            keyword(&carol, w, json!({}))?,
            Vec::<String>::new(),
            "{b}: carol has no grant"
        );

        // A tag grant covers the tagged run only.
        let tag = bob.post(
            "/api/shares",
            &json!({"scope": "tag:family", "with": "alice.test"}),
        )?;
        assert_eq!(tag.status, 201, "{b}: {tag:?}");
        assert_eq!(
            keyword(&alice, w, json!({}))?,
            sorted(&[&mine, &bobs_root, &bobs_child, &bobs_tagged]),
            "{b}: run and tag grants"
        );

        // Revoking hides again, at once.
        let gone = bob.send(bob.http.delete(bob.url(&format!("/api/shares/{share_id}"))))?;
        assert!(gone.status < 300, "{b}: {gone:?}");
        assert_eq!(
            keyword(&alice, w, json!({}))?,
            sorted(&[&mine, &bobs_tagged]),
            "{b}: run grant revoked"
        );
        assert_eq!(
            keyword(&bob, w, json!({}))?.len(),
            3,
            "{b}: bob reads his own, never alice's"
        );
    }
    Ok(())
}

/// Hits as (chunk id, score) in order: what a ranking shows.
fn ranking(body: &Value) -> Vec<(String, f64)> {
    body["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h["chunk_id"].as_str().unwrap_or_default().to_owned(),
                h["score"].as_f64().unwrap_or(f64::NAN),
            )
        })
        .collect()
}

/// Issue #22's side channel: bob's BM25 score for a word fell from 7.68 to
/// 2.99 when alice privately ingested 20 runs holding it. Another user's
/// private runs must move neither bob's scores nor his order, in any mode.
#[test]
fn conformance_others_private_runs_never_move_a_viewers_ranking() -> Result<()> {
    let models = model_dir()?;
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        let texts = [
            "the quokka migration broke the lantern cache on staging",
            "lantern cache warmed after the deploy, nothing about animals here at all",
            "quokka quokka: the parser of the quokka format rejects a trailing comma",
            "a long note on the build: the linker ran out of memory twice, we raised the limit, \
             then the lantern step failed on a missing quokka fixture and we added it back",
            "unrelated: the release notes for the spring version",
        ];
        for (i, text) in texts.iter().enumerate() {
            let id = ingest(&bob, &format!("b{i}"), text, json!({}))?;
            if models.is_some() {
                bob.wait_embedded(&id, EMBEDDED_WITHIN)?;
            }
        }
        let query = "quokka lantern";
        let rank = |mode: &str| -> Result<Vec<(String, f64)>> {
            let body = search(&bob, json!({"query": query, "mode": mode, "limit": 20}))?;
            if !body["degraded"].is_null() {
                bail!("{b}: {mode} search fell back: {body}");
            }
            Ok(ranking(&body))
        };
        let modes = modes(&models);
        let before: Vec<Vec<(String, f64)>> =
            modes.iter().map(|m| rank(m)).collect::<Result<_>>()?;
        assert!(
            before[0].len() >= 3,
            "{b}: bob's runs holding both words, or quokka: {before:?}"
        );

        let mut alices = Vec::new();
        for i in 0..20 {
            let text = format!("quokka notes {i}: the quokka parser and the quokka lantern again");
            alices.push(ingest(&alice, &format!("a{i}"), &text, json!({}))?);
        }
        assert_eq!(
            keyword(&alice, query, json!({}))?,
            sorted(&alices.iter().collect::<Vec<_>>()),
            "{b}: alice's runs are indexed and hers alone"
        );
        for (mode, before) in modes.iter().zip(&before) {
            let after = rank(mode)?;
            assert!(
                after
                    .iter()
                    .all(|(chunk, _)| before.iter().any(|(c, _)| c == chunk)),
                "{b} {mode}: bob sees one of alice's private chunks: {after:?}"
            );
            assert_eq!(
                &after, before,
                "{b} {mode}: alice's private runs moved bob's scores or order"
            );
        }
    }
    Ok(())
}

/// What a grant does not cover never moves the grantee's scores either: the
/// turns captured after a conversation was shared as it was (no `follow`),
/// and the runs of a quarantined machine, were hidden from every read but
/// counted in the grantee's BM25 statistics (both backends).
#[test]
fn conformance_what_a_grant_does_not_cover_never_moves_a_grantees_scores() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let bob = s.client("bob.test", "desktop")?;
        let alice = s.client("alice.test", "laptop")?;
        let query = "quokka lantern";
        let rank = || -> Result<Vec<(String, f64)>> {
            Ok(ranking(&search(
                &alice,
                json!({"query": query, "mode": "keyword", "limit": 20}),
            )?))
        };

        let one = claude_user_line(
            "the quokka migration broke the lantern cache",
            "2026-05-11T08:00:00Z",
        );
        let two = claude_user_line(
            "lantern cache warmed after the deploy",
            "2026-05-11T08:01:00Z",
        );
        let first = post_delta(&bob, &delta("bob-session", 0, &one))?;
        post_delta(&bob, &delta("bob-session", one.len() as u64, &two))?;
        let conversation = bob.get(&format!("/api/conversations/{first}"))?.body["conversation"]
            ["id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let res = bob.post(
            "/api/shares",
            &json!({"scope": format!("conversation:{conversation}"), "with": "alice.test"}),
        )?;
        ensure!(res.status == 201, "{b}: share: {res:?}");
        let shared = rank()?;
        ensure!(
            shared.len() == 2,
            "{b}: alice reads the two shared turns: {shared:?}"
        );

        // Captured after the grant: a clock that must pass, as its time is
        // kept to the millisecond.
        std::thread::sleep(Duration::from_millis(5));
        let later: String = (0..12)
            .map(|i| {
                claude_user_line(
                    &format!("quokka {i}: quokka quokka, private"),
                    "2026-05-11T08:02:00Z",
                )
            })
            .collect();
        post_delta(
            &bob,
            &delta("bob-session", (one.len() + two.len()) as u64, &later),
        )?;
        assert_eq!(
            rank()?,
            shared,
            "{b}: turns captured after a snapshot share moved alice's scores"
        );

        // Runs of bob's second machine shared by tag, then that machine
        // quarantined.
        let phone = s.client("bob.test", "phone")?;
        for i in 0..6 {
            let text = format!("quokka notes {i}: the quokka lantern again");
            ingest(&phone, &format!("p{i}"), &text, json!({"tags": ["family"]}))?;
        }
        let res = bob.post(
            "/api/shares",
            &json!({"scope": "tag:family", "with": "alice.test"}),
        )?;
        ensure!(res.status == 201, "{b}: share: {res:?}");
        let with_phone = rank()?;
        ensure!(
            with_phone.len() == shared.len() + 6,
            "{b}: alice reads the phone's runs while they are shared: {with_phone:?}"
        );
        let out = backend.admin(
            &s.central.data_dir,
            &[
                "machine",
                "revoke",
                "--user",
                "bob.test",
                "--name",
                "phone",
                "--quarantine-since",
                "2000-01-01T00:00:00Z",
            ],
        )?;
        ensure!(out.status.success(), "{b}: revoke: {out:?}");
        // The runs leave alice's reads at once; the index follows within a
        // few seconds (the indexer polls for jobs another process wrote).
        let mut now = rank()?;
        for _ in 0..100 {
            if now == shared {
                break;
            }
            ensure!(
                now.iter().all(|(c, _)| shared.iter().any(|(s, _)| s == c)),
                "{b}: alice reads a quarantined run: {now:?}"
            );
            std::thread::sleep(Duration::from_millis(200));
            now = rank()?;
        }
        assert_eq!(
            now, shared,
            "{b}: quarantined runs still count in alice's scores"
        );

        // Released, they are found again as before.
        let out = backend.admin(
            &s.central.data_dir,
            &[
                "machine", "release", "--user", "bob.test", "--name", "phone",
            ],
        )?;
        ensure!(out.status.success(), "{b}: release: {out:?}");
        // (Put again, equal scores may come in another order.)
        let by_chunk = |mut hits: Vec<(String, f64)>| {
            hits.sort_by(|a, b| a.0.cmp(&b.0));
            hits
        };
        let with_phone = by_chunk(with_phone);
        for _ in 0..100 {
            if by_chunk(now.clone()) == with_phone {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
            now = rank()?;
        }
        assert_eq!(
            by_chunk(now),
            with_phone,
            "{b}: released runs are not found again"
        );
    }
    Ok(())
}

/// A user's strings (tags, machine names, folders) are matched exactly on
/// both backends, in filters and in tag grants. Meilisearch compares
/// strings ignoring case and never matches one past ~468 bytes: a grant of
/// `family` counted bob's private `Family` runs in alice's scores, a
/// `--machine desktop` search found `Desktop`'s runs, and a deep folder
/// found nothing.
#[test]
fn conformance_strings_are_matched_exactly() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let bob = s.client("bob.test", "desktop")?;
        let alice = s.client("alice.test", "laptop")?;
        let deep = format!("/home/bob/{}", "nested-folder/".repeat(40));
        let family = ingest(
            &bob,
            "family",
            "the quokka lantern, family notes",
            json!({"tags": ["family"], "cwd": deep}),
        )?;
        let res = bob.post(
            "/api/shares",
            &json!({"scope": "tag:family", "with": "alice.test"}),
        )?;
        ensure!(res.status == 201, "{b}: share: {res:?}");
        let rank = || -> Result<Vec<(String, f64)>> {
            Ok(ranking(&search(
                &alice,
                json!({"query": "quokka lantern", "mode": "keyword", "limit": 20}),
            )?))
        };
        let shared = rank()?;
        ensure!(shared.len() == 1, "{b}: {shared:?}");

        let other = s.client("bob.test", "Desktop")?;
        let private = ingest(
            &other,
            "private",
            "quokka quokka lantern lantern, private notes",
            json!({"tags": ["Family"], "cwd": "/home/bob"}),
        )?;
        assert_eq!(rank()?, shared, "{b}: a `Family` run moved alice's scores");
        for (filters, want) in [
            (json!({"tags": ["family"]}), &family),
            (json!({"tags": ["Family"]}), &private),
            (json!({"machine": "desktop"}), &family),
            (json!({"machine": "Desktop"}), &private),
            (json!({"cwd_prefix": deep}), &family),
        ] {
            assert_eq!(
                keyword(&bob, "quokka", filters.clone())?,
                vec![want.clone()],
                "{b}: {filters}"
            );
        }
    }
    Ok(())
}

/// A search says when it has nothing: a word no run holds answers
/// "nothing relevant", its nearest hits all weak, on either side of hybrid
/// search, and its context pack is empty; a question about what a run
/// says finds that run above the floor, by its words and by its meaning.
#[test]
fn conformance_a_search_with_nothing_relevant_says_so() -> Result<()> {
    let Some(models) = model_dir()? else {
        return Ok(());
    };
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[("KITH_MODEL_DIR", &models)])?;
        let alice = s.client("alice.test", "laptop")?;
        let mut ids = Vec::new();
        for (source, text) in [
            (
                "a",
                "The importer retries after a 429 with exponential backoff",
            ),
            (
                "b",
                "My favourite pasta recipe needs fresh basil and garlic",
            ),
            ("c", "We went camping by the lake with the kids last summer"),
        ] {
            ids.push(ingest(&alice, source, text, json!({}))?);
        }
        for id in &ids {
            alice.wait_embedded(id, EMBEDDED_WITHIN)?;
        }
        for mode in ["hybrid", "semantic", "keyword"] {
            let nothing = search(&alice, json!({"query": "xyzzyqwerty", "mode": mode}))?;
            assert_eq!(nothing["nothing_relevant"], true, "{b} {mode}: {nothing}");
            let hits = nothing["hits"].as_array().cloned().unwrap_or_default();
            assert!(
                hits.iter().all(|h| h["weak"] == true),
                "{b} {mode}: {nothing}"
            );
            if mode != "keyword" {
                // Semantic search always has a nearest chunk: it is weak.
                assert!(!hits.is_empty(), "{b} {mode}: {nothing}");
            }
        }
        let found = search(
            &alice,
            json!({"query": "make the importer retry on 429", "mode": "hybrid"}),
        )?;
        assert_eq!(found["nothing_relevant"], false, "{b}: {found}");
        assert_eq!(hit_run_ids(&found).first(), Some(&ids[0]), "{b}: {found}");
        let best = &found["hits"][0];
        assert_eq!(best["weak"], false, "{b}: {best}");
        assert!(best["coverage"].as_f64() > Some(0.5), "{b}: {best}");
        assert!(best["similarity"].as_f64().is_some(), "{b}: {best}");
        // Meaning alone clears it too: none of the query's words are in the run.
        let meant = search(
            &alice,
            json!({"query": "a tent trip near the water with children", "mode": "hybrid"}),
        )?;
        let camping = meant["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|h| h["run_id"] == ids[2].as_str())
            .cloned()
            .unwrap_or_default();
        assert_eq!(camping["weak"], false, "{b}: {meant}");
        let pack = alice.post("/api/context", &json!({"task": "xyzzyqwerty"}))?;
        assert_eq!(pack.status, 200, "{b}: {pack:?}");
        assert_eq!(pack.body["nothing_relevant"], true, "{b}: {pack:?}");
        assert_eq!(pack.body["passages"], json!([]), "{b}: {pack:?}");
    }
    Ok(())
}

#[test]
fn conformance_semantic_and_hybrid_modes() -> Result<()> {
    let Some(models) = model_dir()? else {
        return Ok(());
    };
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[("KITH_MODEL_DIR", &models)])?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        let ci = ingest(
            &alice,
            "a",
            "The CI pipeline is red again: the build breaks on the linker step",
            json!({}),
        )?;
        let pasta = ingest(
            &alice,
            "b",
            "My favourite pasta recipe needs fresh basil and garlic",
            json!({}),
        )?;
        let bobs = ingest(
            &bob,
            "c",
            "The continuous integration build broke, the compiler crashed",
            json!({}),
        )?;
        for id in [&ci, &pasta] {
            alice.wait_embedded(id, EMBEDDED_WITHIN)?;
        }
        bob.wait_embedded(&bobs, EMBEDDED_WITHIN)?;

        let q = "how do I fix the failing compilation";
        let sem = search(&alice, json!({"query": q, "mode": "semantic"}))?;
        assert_eq!(hit_run_ids(&sem).first(), Some(&ci), "{b}: {sem}");
        // A semantic score is the cosine on both backends, so an unrelated
        // chunk scores near 0 (Meilisearch's own score is half a point up).
        let pasta_score = sem["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|h| h["run_id"] == json!(pasta))
            .and_then(|h| h["score"].as_f64());
        assert!(
            pasta_score.is_some_and(|s| s < 0.3),
            "{b}: {pasta_score:?} {sem}"
        );
        assert!(
            !hit_run_ids(&sem).contains(&bobs),
            "{b}: bob's run never appears for alice"
        );
        let kw = search(&alice, json!({"query": q, "mode": "keyword"}))?;
        assert!(
            !hit_run_ids(&kw).contains(&pasta),
            "{b}: keyword does not find meaning: {kw}"
        );

        let hybrid = search(&alice, json!({"query": "pasta basil", "mode": "hybrid"}))?;
        assert_eq!(hit_run_ids(&hybrid).first(), Some(&pasta), "{b}: {hybrid}");
        assert!(hybrid["degraded"].is_null(), "{b}");
        assert!(!hit_run_ids(&hybrid).contains(&bobs), "{b}");
        // And the other way: bob finds his run, and none of alice's.
        let bobs_hybrid = search(&bob, json!({"query": q, "mode": "hybrid"}))?;
        assert_eq!(
            hit_run_ids(&bobs_hybrid).first(),
            Some(&bobs),
            "{b}: {bobs_hybrid}"
        );
        assert!(
            !hit_run_ids(&bobs_hybrid).contains(&ci) && !hit_run_ids(&bobs_hybrid).contains(&pasta),
            "{b}: alice's runs never appear for bob: {bobs_hybrid}"
        );
        let filtered = search(
            &alice,
            json!({"query": q, "mode": "hybrid", "filters": {"machine": "nowhere"}}),
        )?;
        assert!(
            hit_run_ids(&filtered).is_empty(),
            "{b}: filters apply to hybrid: {filtered}"
        );
    }
    Ok(())
}

/// Forgetting a conversation takes its chunks and vectors, and its
/// subagent's, out of every search mode on both backends; a resend of its
/// bytes is acknowledged and stored nowhere; another's DELETE is a 404;
/// doctor finds nothing left.
#[test]
fn conformance_forget_leaves_nothing_searchable() -> Result<()> {
    let models = model_dir()?;
    let mut modes = modes(&models);
    if models.is_some() {
        modes.push("semantic");
    }
    for backend in backends()? {
        let b = backend.name;
        let tmp = tempfile::tempdir()?;
        let data = tmp.path().join("data");
        let extra: Vec<(&str, &str)> = models
            .as_deref()
            .map(|m| vec![("KITH_MODEL_DIR", m)])
            .unwrap_or_default();
        let mut central = backend.start_on(&data, &extra)?;
        let alice = central.client(&central.register("alice.test", "laptop")?);
        let bob = central.client(&central.register("bob.test", "desktop")?);
        let mut session = Session::new("f", "/home/alice/proj", "main");
        session.user("rotate the wombat deploy key before friday");
        let first_jsonl = session.pending.clone();
        let first = session.send(&alice, json!({}))?;
        let second = session
            .user("the wombat key rotation also needs the vault policy")
            .send(&alice, json!({}))?;
        let sub = ingest(
            &alice,
            "f-sub",
            "the wombat subagent checked the vault policy",
            json!({"parent_run_id": first}),
        )?;
        let kept = ingest(&alice, "g", "wombat staging notes for monday", json!({}))?;
        let bobs = ingest(&bob, "h", "bob keeps his own wombat notes", json!({}))?;
        if models.is_some() {
            for id in [&first, &second, &sub, &kept] {
                alice.wait_embedded(id, EMBEDDED_WITHIN)?;
            }
            bob.wait_embedded(&bobs, EMBEDDED_WITHIN)?;
        }
        for mode in &modes {
            let all = found(&alice, mode, "wombat key vault notes", &json!({}))?;
            assert_eq!(all, sorted(&[&first, &second, &sub, &kept]), "{b} {mode}");
        }

        let conversation = alice.get(&format!("/api/runs/{first}"))?.body["conversation"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let forget = |api: &Api, id: &str| {
            api.send(
                api.http
                    .delete(api.url(&format!("/api/conversations/{id}"))),
            )
        };
        let refused = forget(&bob, &conversation)?;
        assert_eq!(refused.status, 404, "{b}: {refused:?}");
        let gone = forget(&alice, &second)?;
        assert_eq!(gone.status, 200, "{b}: {gone:?}");
        assert_eq!(gone.body["conversation"], json!(conversation), "{b}");
        assert_eq!(gone.body["n_runs"], 3, "{b}: {gone:?}");
        assert_eq!(gone.body["n_conversations"], 2, "{b}: {gone:?}");
        assert_eq!(forget(&alice, &conversation)?.status, 404, "{b}: once");

        for mode in &modes {
            let left = found(&alice, mode, "wombat key vault notes", &json!({}))?;
            assert_eq!(
                left,
                vec![kept.clone()],
                "{b} {mode}: only the other conversation"
            );
            let bobs_left = found(&bob, mode, "wombat notes", &json!({}))?;
            assert_eq!(
                bobs_left,
                vec![bobs.clone()],
                "{b} {mode}: bob's own run stays"
            );
        }
        for id in [&first, &second, &sub] {
            assert_eq!(alice.get(&format!("/api/runs/{id}"))?.status, 404, "{b}");
        }
        // The agent sends the first delta again (a lost cursor): taken,
        // and dropped.
        let again = alice.post("/api/runs", &delta("f", 0, &first_jsonl))?;
        assert_eq!(again.status, 202, "{b}: {again:?}");
        assert_eq!(again.body["status"], "forgotten", "{b}: {again:?}");
        // Counts are the caller's own: alice keeps one conversation, bob his.
        for (who, api) in [("alice", &alice), ("bob", &bob)] {
            let status = api.get("/api/status")?;
            assert_eq!(status.body["counts"]["runs"], 1, "{b} {who}: {status:?}");
            assert_eq!(status.body["counts"]["chunks"], 1, "{b} {who}: {status:?}");
        }

        central.kill()?;
        let doctor = backend.admin(&data, &["doctor"])?;
        assert!(
            doctor.status.success(),
            "{b}: doctor after forget: {}{}",
            String::from_utf8_lossy(&doctor.stdout),
            String::from_utf8_lossy(&doctor.stderr)
        );
    }
    Ok(())
}

/// A transcript captured again from byte 0 on a new chain (the agent's
/// `path#dev:inode:epoch` identity, another inode or epoch) retires the
/// older chain from every mode unless `include_superseded`; another
/// transcript, and another person's same path, are untouched.
#[test]
fn conformance_superseded_chains_leave_search_unless_asked() -> Result<()> {
    let models = model_dir()?;
    let mut modes = modes(&models);
    if models.is_some() {
        modes.push("semantic");
    }
    for backend in backends()? {
        let b = backend.name;
        let extra: Vec<(&str, &str)> = models
            .as_deref()
            .map(|m| vec![("KITH_MODEL_DIR", m)])
            .unwrap_or_default();
        let s = backend.start(&extra)?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        let path = "/home/u/.claude/projects/p/s.jsonl";
        let old = ingest(
            &alice,
            &format!("{path}#1:7:0"),
            "the okapi ledger totals",
            json!({}),
        )?;
        let other = ingest(
            &alice,
            "/home/u/other.jsonl#1:9:0",
            "the other ledger totals",
            json!({}),
        )?;
        let bobs = ingest(
            &bob,
            &format!("{path}#1:7:0"),
            "bob's own ledger totals",
            json!({}),
        )?;
        let new = ingest(
            &alice,
            &format!("{path}#1:8:0"),
            "the gazelle ledger totals",
            json!({}),
        )?;
        alice
            .wait_settled(INDEXED_WITHIN)
            .with_context(|| b.to_string())?;
        if models.is_some() {
            for id in [&old, &other, &new] {
                alice.wait_embedded(id, EMBEDDED_WITHIN)?;
            }
            bob.wait_embedded(&bobs, EMBEDDED_WITHIN)?;
        }
        for mode in &modes {
            let by_default = found(&alice, mode, "ledger totals", &json!({}))?;
            assert_eq!(by_default, sorted(&[&other, &new]), "{b} {mode}");
            let all = found(
                &alice,
                mode,
                "ledger totals",
                &json!({"include_superseded": true}),
            )?;
            assert_eq!(all, sorted(&[&old, &other, &new]), "{b} {mode}: when asked");
            assert_eq!(
                found(&bob, mode, "ledger totals", &json!({}))?,
                vec![bobs.clone()],
                "{b} {mode}"
            );
        }
        let shown = alice.get(&format!("/api/runs/{old}/jsonl"))?;
        assert_eq!(shown.status, 200, "{b}: a superseded run is still read");
    }
    Ok(())
}

#[test]
fn conformance_replay_and_reindex_do_not_duplicate() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let tmp = tempfile::tempdir()?;
        let data = tmp.path().join("data");
        let mut central = backend.start_on(&data, &[])?;
        let token = central.register("alice.test", "laptop")?;
        let alice = central.client(&token);
        let body = delta(
            "a",
            0,
            &claude_user_line("the okapi migration plan", "2026-05-11T08:00:00Z"),
        );
        let first = alice.post_with("/api/runs", &body, "key-1")?;
        assert_eq!(first.status, 202, "{b}: {first:?}");
        let id = first.body["run_id"].as_str().unwrap_or_default().to_owned();
        alice.wait_indexed(&id, INDEXED_WITHIN)?;
        let replay = alice.post_with("/api/runs", &body, "key-1")?;
        assert_eq!(replay.body["run_id"], json!(id), "{b}: {replay:?}");
        let hits = search(&alice, json!({"query": "okapi", "mode": "keyword"}))?;
        assert_eq!(
            chunk_ids(&hits),
            vec![format!("{id}-0")],
            "{b}: one hit after a replay"
        );

        central.kill()?;
        for _ in 0..2 {
            let re = backend.admin(&data, &["reindex"])?;
            assert!(
                re.status.success(),
                "{b}: {}",
                String::from_utf8_lossy(&re.stderr)
            );
        }
        let doctor = backend.admin(&data, &["doctor"])?;
        assert!(
            doctor.status.success(),
            "{b}: doctor after reindex: {}{}",
            String::from_utf8_lossy(&doctor.stdout),
            String::from_utf8_lossy(&doctor.stderr)
        );
        let central = backend.start_on(&data, &[])?;
        let alice = central.client(&token);
        let hits = search(&alice, json!({"query": "okapi", "mode": "keyword"}))?;
        assert_eq!(
            chunk_ids(&hits),
            vec![format!("{id}-0")],
            "{b}: one hit after two reindexes"
        );
        let status = alice.get("/api/status")?;
        assert_eq!(status.body["counts"]["chunks"], 1, "{b}: {status:?}");
    }
    Ok(())
}

#[test]
fn conformance_reembed_after_a_model_change() -> Result<()> {
    let Some(models) = model_dir()? else {
        return Ok(());
    };
    for backend in backends()? {
        let b = backend.name;
        let tmp = tempfile::tempdir()?;
        let data = tmp.path().join("data");
        let mut central = backend.start_on(&data, &[("KITH_MODEL_DIR", &models)])?;
        let token = central.register("alice.test", "laptop")?;
        let alice = central.client(&token);
        let ci = ingest(
            &alice,
            "a",
            "The CI pipeline is red again: the build breaks on the linker step",
            json!({}),
        )?;
        let pasta = ingest(
            &alice,
            "b",
            "My favourite pasta recipe needs fresh basil and garlic",
            json!({}),
        )?;
        let mut before = std::collections::HashMap::new();
        for id in [&ci, &pasta] {
            before.insert(
                id.clone(),
                alice.wait_embedded(id, EMBEDDED_WITHIN)?["embedded_at"].clone(),
            );
        }
        central.kill()?;

        // Matryoshka truncation changes the model id and the dimension.
        let config = tmp.path().join("central.toml");
        std::fs::write(&config, "[embed]\ntruncate_dim = 128\n")?;
        let config = config.to_string_lossy().into_owned();
        let central = backend.start_on(
            &data,
            &[
                ("KITH_MODEL_DIR", &models),
                ("KITH_CENTRAL_CONFIG", &config),
            ],
        )?;
        let alice = central.client(&token);
        let deadline = std::time::Instant::now() + EMBEDDED_WITHIN;
        for id in [&ci, &pasta] {
            loop {
                let run = alice.get(&format!("/api/runs/{id}"))?;
                if run.body["embedded_at"].is_string()
                    && Some(&run.body["embedded_at"]) != before.get(id)
                {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    bail!("{b}: {id} was not embedded again: {run:?}");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let sem = search(
            &alice,
            json!({"query": "how do I fix the failing compilation", "mode": "semantic"}),
        )?;
        assert!(
            sem["embedder"]
                .as_str()
                .unwrap_or_default()
                .ends_with("@128"),
            "{b}: {sem}"
        );
        assert_eq!(hit_run_ids(&sem).first(), Some(&ci), "{b}: {sem}");
        let mut ids = chunk_ids(&sem);
        ids.sort();
        ids.dedup();
        assert_eq!(
            ids.len(),
            chunk_ids(&sem).len(),
            "{b}: no chunk twice: {sem}"
        );
        assert_eq!(ids.len(), 2, "{b}: both chunks have new vectors: {sem}");
    }
    Ok(())
}

/// A small labelled set: each query has one right answer among runs that
/// share some of its words.
#[test]
fn conformance_ranking_on_a_labelled_set() -> Result<()> {
    let docs = [
        ("pg", "the postgres connection pool is exhausted under load; raise max_connections or add pgbouncer"),
        ("rust", "rust borrow checker error: the lifetime of the reference does not live long enough"),
        ("docker", "the docker image build fails because the base image layer cache is stale"),
        ("css", "the flexbox layout breaks on narrow screens; the sidebar overlaps the content"),
        ("git", "git rebase stopped on a merge conflict in the lockfile; resolve and continue"),
    ];
    let queries = [
        ("postgres connection pool exhausted", "pg"),
        ("borrow checker lifetime error", "rust"),
        ("docker image build cache", "docker"),
        ("flexbox sidebar layout", "css"),
        ("rebase merge conflict", "git"),
    ];
    let paraphrases = [
        (
            "database runs out of connections when traffic is high",
            "pg",
        ),
        (
            "compiler complains a reference does not live long enough",
            "rust",
        ),
        (
            "rebasing stopped because two branches changed the same file",
            "git",
        ),
    ];
    let models = model_dir()?;
    for backend in backends()? {
        let b = backend.name;
        let extra: Vec<(&str, &str)> = models
            .iter()
            .map(|m| ("KITH_MODEL_DIR", m.as_str()))
            .collect();
        let s = backend.start(&extra)?;
        let alice = s.client("alice.test", "laptop")?;
        let mut id_of = std::collections::HashMap::new();
        for (label, text) in docs {
            id_of.insert(label, ingest(&alice, label, text, json!({}))?);
        }
        for (q, label) in queries {
            let body = search(&alice, json!({"query": q, "mode": "keyword"}))?;
            assert_eq!(
                hit_run_ids(&body).first(),
                id_of.get(label),
                "{b}: keyword {q:?}: {body}"
            );
        }
        if models.is_none() {
            continue;
        }
        for id in id_of.values() {
            alice.wait_embedded(id, EMBEDDED_WITHIN)?;
        }
        for (q, label) in paraphrases.iter().chain(queries.iter()) {
            for mode in ["semantic", "hybrid"] {
                let body = search(&alice, json!({"query": q, "mode": mode}))?;
                assert_eq!(
                    hit_run_ids(&body).first(),
                    id_of.get(label),
                    "{b}: {mode} {q:?}: {body}"
                );
            }
        }
    }
    Ok(())
}

/// The index is derived: emptied behind central's back, `doctor` names the
/// loss, `reindex` (which loads no model) fills it again from the blobs
/// alone, every run is found once, by its owner only, and a central with a
/// model then gives the rebuilt chunks their vectors.
#[test]
fn conformance_reindex_fills_an_empty_index() -> Result<()> {
    let models = model_dir()?;
    for backend in backends()? {
        let b = backend.name;
        let tmp = tempfile::tempdir()?;
        let data = tmp.path().join("data");
        let mut central = backend.start_on(&data, &[])?;
        let alice_token = central.register("alice.test", "laptop")?;
        let bob_token = central.register("bob.test", "desktop")?;
        let alice = central.client(&alice_token);
        let bob = central.client(&bob_token);
        let w = "wombat";
        let root = ingest(
            &alice,
            "a",
            &format!("{w} ledger reconciliation"),
            json!({}),
        )?;
        let child = ingest(
            &alice,
            "b",
            &format!("{w} ledger follow-up"),
            json!({"parent_run_id": root, "tags": ["books"]}),
        )?;
        let bobs = ingest(&bob, "c", &format!("{w} bob's own notes"), json!({}))?;
        central.kill()?;

        backend.lose_index(&data)?;
        let doctor = backend.admin(&data, &["doctor"])?;
        assert!(
            !doctor.status.success(),
            "{b}: doctor must name an emptied index: {}",
            String::from_utf8_lossy(&doctor.stdout)
        );
        let re = backend.admin(&data, &["reindex"])?;
        assert!(
            re.status.success(),
            "{b}: reindex: {}",
            String::from_utf8_lossy(&re.stderr)
        );
        let doctor = backend.admin(&data, &["doctor"])?;
        assert!(
            doctor.status.success(),
            "{b}: doctor after reindex: {}{}",
            String::from_utf8_lossy(&doctor.stdout),
            String::from_utf8_lossy(&doctor.stderr)
        );

        let with_model: Vec<(&str, &str)> = models
            .iter()
            .map(|m| ("KITH_MODEL_DIR", m.as_str()))
            .collect();
        let central = backend.start_on(&data, &with_model)?;
        let alice = central.client(&alice_token);
        let bob = central.client(&bob_token);
        assert_eq!(
            keyword(&alice, w, json!({}))?,
            sorted(&[&root, &child]),
            "{b}: alice finds her runs again, not bob's"
        );
        assert_eq!(keyword(&bob, w, json!({}))?, vec![bobs.clone()], "{b}");
        assert_eq!(
            keyword(&alice, w, json!({"tags": ["books"]}))?,
            vec![child.clone()],
            "{b}: filters work on the rebuilt index"
        );
        let hits = search(
            &alice,
            json!({"query": "reconciliation", "mode": "keyword"}),
        )?;
        assert_eq!(chunk_ids(&hits), vec![format!("{root}-0")], "{b}: {hits}");
        // Counts are the caller's own: alice's two runs, bob's one.
        let status = alice.get("/api/status")?;
        assert_eq!(status.body["counts"]["chunks"], 2, "{b}: {status:?}");
        let bobs_status = bob.get("/api/status")?;
        assert_eq!(
            bobs_status.body["counts"]["chunks"], 1,
            "{b}: {bobs_status:?}"
        );
        assert_eq!(
            status.body["counts"]["pending_index_jobs"], 0,
            "{b}: {status:?}"
        );
        if models.is_none() {
            continue;
        }
        for id in [&root, &child] {
            alice.wait_embedded(id, EMBEDDED_WITHIN)?;
        }
        bob.wait_embedded(&bobs, EMBEDDED_WITHIN)?;
        let sem = search(
            &alice,
            json!({"query": "balancing the accounts", "mode": "semantic"}),
        )?;
        assert_eq!(
            sorted(&hit_run_ids(&sem).iter().collect::<Vec<_>>()),
            sorted(&[&root, &child]),
            "{b}: vectors for the rebuilt chunks, never bob's: {sem}"
        );
    }
    Ok(())
}

/// A Meilisearch index deleted while central runs: a search answers 503
/// naming what to do (reindex), not a server error.
#[test]
fn conformance_a_lost_meilisearch_index_is_named() -> Result<()> {
    skipped(
        "conformance_a_lost_meilisearch_index_is_named",
        "embedded",
        "the embedded index is central's own files",
    );
    for backend in backends()? {
        let Some(guard) = &backend._cleanup else {
            continue;
        };
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let run = ingest(&alice, "a", "the walrus migration failed", json!({}))?;
        let query = json!({"query": "walrus", "mode": "keyword"});
        assert_eq!(hit_run_ids(&search(&alice, query.clone())?), [run], "{b}");
        guard.delete()?;
        let r = alice.post("/api/search", &query)?;
        assert_eq!(r.status, 503, "{b}: {r:?}");
        let said = r.body["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("kith-central reindex"), "{b}: {said}");
    }
    Ok(())
}

/// A Meilisearch server of this test's own, or none (said, or a failure
/// when `KITH_REQUIRE_MEILI=1`).
fn own_meili() -> Result<Option<Meili>> {
    match find_bin() {
        Ok(_) => Ok(Some(Meili::stopped()?)),
        Err(why) => {
            missing(REQUIRE_MEILI, "the test", &why)?;
            Ok(None)
        }
    }
}

/// Waits until central's search answers 200 for `body` (the search server
/// is back), returning that body.
fn search_when_back(api: &Api, body: Value, within: Duration) -> Result<Value> {
    let deadline = std::time::Instant::now() + within;
    loop {
        let r = api.post("/api/search", &body)?;
        if r.status == 200 {
            return Ok(r.body);
        }
        if std::time::Instant::now() > deadline {
            bail!("search {body} still answers {r:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Meilisearch down when central starts: central starts anyway, takes
/// runs (202, durable), answers searches with 503 saying why, and indexes
/// everything it took once Meilisearch is up.
#[test]
fn conformance_search_server_down_at_start() -> Result<()> {
    let test = "conformance_search_server_down_at_start";
    skipped(
        test,
        "embedded",
        "the embedded index lives in central's own process; it cannot be down while central runs",
    );
    let Some(mut meili) = own_meili()? else {
        return Ok(());
    };
    let index = unique_index_name();
    let central = Central::start_with(&meili.central_env(&index))?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);

    let mut posted = Vec::new();
    for (api, source, text) in [
        (&alice, "a", "the narwhal inventory for the aquarium"),
        (&alice, "b", "narwhal feeding schedule"),
        (&bob, "c", "narwhal notes bob keeps to himself"),
    ] {
        let body = delta(source, 0, &claude_user_line(text, "2026-05-11T08:00:00Z"));
        let r = api.post("/api/runs", &body)?;
        assert_eq!(r.status, 202, "ingest while Meilisearch is down: {r:?}");
        posted.push(r.body["run_id"].as_str().unwrap_or_default().to_owned());
    }
    let down = alice.post(
        "/api/search",
        &json!({"query": "narwhal", "mode": "keyword"}),
    )?;
    assert_eq!(down.status, 503, "{down:?}");
    assert_eq!(down.code(), "search_backend_unavailable", "{down:?}");
    let message = down.body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(&meili.url), "{message}");
    assert!(!message.contains(meili.key()), "the key never shows");
    let status = alice.get("/api/status")?;
    assert_eq!(status.status, 200, "{status:?}");
    // Alice's own waiting runs (bob's is his).
    assert_eq!(status.body["counts"]["pending_index_jobs"], 2, "{status:?}");
    let run = alice.get(&format!("/api/runs/{}", posted[0]))?;
    assert!(run.body["indexed_at"].is_null(), "not indexed yet: {run:?}");

    meili.run()?;
    for (api, id) in [
        (&alice, &posted[0]),
        (&alice, &posted[1]),
        (&bob, &posted[2]),
    ] {
        api.wait_indexed(id, Duration::from_secs(90))?;
    }
    search_when_back(
        &alice,
        json!({"query": "narwhal", "mode": "keyword"}),
        INDEXED_WITHIN,
    )?;
    assert_eq!(
        keyword(&alice, "narwhal", json!({}))?,
        sorted(&[&posted[0], &posted[1]]),
        "alice finds what central took while Meilisearch was down, not bob's"
    );
    assert_eq!(
        keyword(&bob, "narwhal", json!({}))?,
        vec![posted[2].clone()]
    );
    let status = alice.get("/api/status")?;
    assert_eq!(status.body["counts"]["chunks"], 2, "{status:?}");
    assert_eq!(status.body["counts"]["pending_index_jobs"], 0, "{status:?}");
    assert_eq!(bob.get("/api/status")?.body["counts"]["chunks"], 1);
    Ok(())
}

/// Meilisearch killed and started again while runs arrive: every run is
/// indexed once (none lost, none twice), and with a model every run gets
/// its vectors.
#[test]
fn conformance_search_server_restarted_mid_ingest() -> Result<()> {
    let test = "conformance_search_server_restarted_mid_ingest";
    skipped(
        test,
        "embedded",
        "the embedded index lives in central's own process; a crash of central mid-ingest is central::crash_after_202_loses_nothing_and_indexing_resumes",
    );
    let Some(mut meili) = own_meili()? else {
        return Ok(());
    };
    meili.run()?;
    let models = model_dir()?;
    let index = unique_index_name();
    let mut env = meili.central_env(&index).to_vec();
    if let Some(m) = &models {
        env.push(("KITH_MODEL_DIR", m.as_str()));
    }
    let central = Central::start_with(&env)?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let bobs = ingest(&bob, "bob", "pelican bob's private run", json!({}))?;

    let words = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
        "juliet", "kilo", "lima",
    ];
    let mut ids = Vec::new();
    for (n, word) in words.iter().enumerate() {
        if n == 4 {
            meili.kill()?;
        }
        if n == 8 {
            meili.run()?;
        }
        let text = format!("pelican migration log {word}{word}");
        let body = delta(word, 0, &claude_user_line(&text, "2026-05-11T08:00:00Z"));
        let r = alice.post("/api/runs", &body)?;
        assert_eq!(r.status, 202, "{word}: {r:?}");
        ids.push(r.body["run_id"].as_str().unwrap_or_default().to_owned());
        // An agent's pace: the runs arrive while Meilisearch is up, down
        // and starting again, not all before the indexer looks.
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in &ids {
        alice.wait_indexed(id, Duration::from_secs(90))?;
    }
    let mut want: Vec<String> = ids.clone();
    want.sort();
    assert_eq!(
        keyword(&alice, "pelican", json!({}))?,
        want,
        "every run, once; never bob's"
    );
    for (word, id) in words.iter().zip(&ids) {
        let hits = search(
            &alice,
            json!({"query": format!("{word}{word}"), "mode": "keyword"}),
        )?;
        assert_eq!(chunk_ids(&hits), vec![format!("{id}-0")], "{word}: {hits}");
    }
    assert_eq!(keyword(&bob, "pelican", json!({}))?, vec![bobs.clone()]);
    let status = alice.get("/api/status")?;
    assert_eq!(status.body["counts"]["chunks"], words.len(), "{status:?}");
    assert_eq!(bob.get("/api/status")?.body["counts"]["chunks"], 1);
    assert_eq!(status.body["counts"]["pending_index_jobs"], 0, "{status:?}");

    if models.is_some() {
        for id in &ids {
            alice.wait_embedded(id, EMBEDDED_WITHIN)?;
        }
        let sem = search(
            &alice,
            json!({"query": "pelican migration log", "mode": "semantic", "limit": 50}),
        )?;
        let mut got = hit_run_ids(&sem);
        got.sort();
        assert_eq!(got, want, "every run has its vector, once: {sem}");
    }
    Ok(())
}

/// Words no vector may ever be made for: the embedding stand-in fails every
/// request that holds them.
const NEVER_EMBEDDED: &str = "never gets its vector";

/// An embedding server (Ollama's `POST /api/embed`) on `listener`: one
/// fixed 4-dimensional vector per text, and a 500 for any request with a
/// text holding `NEVER_EMBEDDED`.
fn embedder_stand_in(listener: std::net::TcpListener) -> Result<StandIn> {
    StandIn::start(listener, |body| {
        if String::from_utf8_lossy(body).contains(NEVER_EMBEDDED) {
            return Some(json_response(
                "500 Internal Server Error",
                &json!({"error": "not this text"}),
            ));
        }
        let request: Value = serde_json::from_slice(body).ok()?;
        let n = request["input"].as_array().map_or(0, Vec::len);
        Some(json_response(
            "200 OK",
            &json!({"model": request["model"], "embeddings": vec![json!([1.0, 0.5, 0.25, 0.125]); n]}),
        ))
    })
}

/// Text is searchable as soon as it is indexed, before (here: without) its
/// vector: keyword and hybrid find it, semantic does not, and it stays
/// private. On Meilisearch the index has the embedder and the chunk opts
/// out of it until its vector comes.
#[test]
fn conformance_text_is_found_before_its_vector_exists() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let embedder = embedder_stand_in(listener)?;
        let s = backend.start(&[
            ("KITH_EMBED_PROVIDER", "ollama"),
            ("KITH_EMBED_URL", url.as_str()),
        ])?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        let with_vector = ingest(&alice, "a", "the wallaby roster for the zoo", json!({}))?;
        alice.wait_embedded(&with_vector, EMBEDDED_WITHIN)?;
        let without = ingest(
            &alice,
            "b",
            &format!("the quokka roster {NEVER_EMBEDDED}"),
            json!({}),
        )?;
        let bobs = ingest(
            &bob,
            "c",
            &format!("bob's quokka roster {NEVER_EMBEDDED}"),
            json!({}),
        )?;
        assert!(embedder.connections() > 0, "{b}: central used the stand-in");

        assert_eq!(
            keyword(&alice, "quokka", json!({}))?,
            vec![without.clone()],
            "{b}: keyword finds the text without a vector, never bob's"
        );
        let hybrid = search(&alice, json!({"query": "quokka roster", "mode": "hybrid"}))?;
        assert!(
            hybrid["degraded"].is_null(),
            "{b}: the query has its vector: {hybrid}"
        );
        assert!(
            hit_run_ids(&hybrid).contains(&without),
            "{b}: hybrid finds the text without a vector: {hybrid}"
        );
        assert!(!hit_run_ids(&hybrid).contains(&bobs), "{b}: {hybrid}");
        let sem = search(
            &alice,
            json!({"query": "quokka roster", "mode": "semantic"}),
        )?;
        assert_eq!(
            hit_run_ids(&sem),
            vec![with_vector.clone()],
            "{b}: semantic ranks only chunks with a vector: {sem}"
        );
        let run = alice.get(&format!("/api/runs/{without}"))?;
        assert!(
            run.body["embedded_at"].is_null(),
            "{b}: it really has no vector: {run:?}"
        );
    }
    Ok(())
}

/// An embedding server (Ollama's `POST /api/embed`, one fixed vector per
/// text) that holds every request with a text holding `held` until
/// `release`, and keeps every text it was asked for.
struct HeldEmbedder {
    url: String,
    held: Arc<AtomicUsize>,
    released: Arc<AtomicBool>,
    inputs: Arc<Mutex<Vec<String>>>,
    _server: StandIn,
}

impl HeldEmbedder {
    fn start(held_text: &'static str) -> Result<Self> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let url = format!("http://{}", listener.local_addr()?);
        let (held, released) = (Arc::<AtomicUsize>::default(), Arc::<AtomicBool>::default());
        let inputs = Arc::<Mutex<Vec<String>>>::default();
        let (h, r, i) = (held.clone(), released.clone(), inputs.clone());
        let server = StandIn::start(listener, move |body| {
            let request: Value = serde_json::from_slice(body).ok()?;
            let texts: Vec<String> = request["input"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|t| t.as_str().map(str::to_owned))
                .collect();
            if texts.iter().any(|t| t.contains(held_text)) {
                h.fetch_add(1, Ordering::SeqCst);
                while !r.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
            let n = texts.len();
            i.lock().unwrap_or_else(|p| p.into_inner()).extend(texts);
            Some(json_response(
                "200 OK",
                &json!({"model": request["model"], "embeddings": vec![json!([1.0, 0.5, 0.25, 0.125]); n]}),
            ))
        })?;
        Ok(Self {
            url,
            held,
            released,
            inputs,
            _server: server,
        })
    }

    /// Waits until central asked for the held text.
    fn wait_held(&self) -> Result<()> {
        let deadline = std::time::Instant::now() + EMBEDDED_WITHIN;
        while self.held.load(Ordering::SeqCst) == 0 {
            ensure!(
                std::time::Instant::now() < deadline,
                "the model was never asked for the held text"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    fn release(&self) {
        self.released.store(true, Ordering::SeqCst);
    }

    fn inputs(&self) -> Vec<String> {
        self.inputs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Drop for HeldEmbedder {
    /// A test that failed while a request was held lets it go.
    fn drop(&mut self) {
        self.release();
    }
}

/// A central of `backend` whose embedder is `embedder`, and the folder
/// that holds its data directory.
fn start_with(backend: &Backend, embedder: &HeldEmbedder) -> Result<(Central, tempfile::TempDir)> {
    let tmp = tempfile::tempdir()?;
    let central = backend.start_on(
        &tmp.path().join("data"),
        &[
            ("KITH_EMBED_PROVIDER", "ollama"),
            ("KITH_EMBED_URL", embedder.url.as_str()),
        ],
    )?;
    Ok((central, tmp))
}

/// `doctor` on a stopped central's `data` finds nothing wrong, and in
/// particular no chunk without a run.
fn assert_doctor_clean(backend: &Backend, data: &Path) -> Result<()> {
    let doctor = backend.admin(data, &["doctor"])?;
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&doctor.stdout),
        String::from_utf8_lossy(&doctor.stderr)
    );
    let b = backend.name;
    assert!(doctor.status.success(), "{b}: doctor: {said}");
    assert!(!said.contains("index_chunks_without_run"), "{b}: {said}");
    Ok(())
}

/// A vector the model was still making when its conversation was forgotten
/// is not kept: nothing finds the words, and `doctor` counts no chunk
/// without a run (on Meilisearch a late partial update would make a
/// document of the vector alone).
#[test]
fn conformance_a_vector_made_while_forgetting_is_dropped() -> Result<()> {
    const HELD: &str = "marmot ledger";
    for backend in backends()? {
        let b = backend.name;
        let embedder = HeldEmbedder::start(HELD)?;
        let (mut central, _tmp) = start_with(&backend, &embedder)?;
        let data = central.data_dir.clone();
        let alice = central.client(&central.register("alice.test", "laptop")?);
        let forgotten = ingest(&alice, "a", &format!("the {HELD} for the zoo"), json!({}))?;
        embedder.wait_held()?;
        let conversation = alice.get(&format!("/api/runs/{forgotten}"))?.body["conversation"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let gone = alice.send(
            alice
                .http
                .delete(alice.url(&format!("/api/conversations/{conversation}"))),
        )?;
        assert_eq!(gone.status, 200, "{b}: {gone:?}");
        embedder.release();
        // The vectorizer embeds one run after the other: once a later run
        // has its vector, the forgotten run's vector has been offered.
        let later = ingest(&alice, "b", "the wallaby roster for the zoo", json!({}))?;
        alice.wait_embedded(&later, EMBEDDED_WITHIN)?;

        // Both runs say "zoo"; every vector is the same, so semantic
        // search ranks every chunk that has one.
        for mode in ["keyword", "hybrid", "semantic"] {
            let hits = found(&alice, mode, "zoo", &json!({}))?;
            assert_eq!(hits, [later.as_str()], "{b} {mode}: only the run kept");
        }
        let status = alice.get("/api/status")?;
        assert_eq!(status.body["counts"]["chunks"], 1, "{b}: {status:?}");
        central.kill()?;
        assert_doctor_clean(&backend, &data)?;
    }
    Ok(())
}

/// A vector made from a text that a later delta rewrote meanwhile (Gemini
/// CLI appends a changed message again; its chain is read as one file) is
/// not kept: the chunk's new text is embedded in turn.
#[test]
fn conformance_a_vector_of_a_rewritten_text_is_made_again() -> Result<()> {
    const HELD: &str = "marmot ledger";
    let line = |v: Value| format!("{v}\n");
    let first = [
        json!({"sessionId": "s1", "startTime": "2026-05-11T08:00:00Z", "kind": "main"}),
        json!({"id": "a", "type": "user", "timestamp": "2026-05-11T08:00:01Z",
               "content": format!("check the {HELD} totals")}),
        json!({"id": "b", "type": "gemini", "timestamp": "2026-05-11T08:00:02Z",
               "content": "a draft of the quokka answer"}),
    ]
    .map(line)
    .concat();
    // The answer appended again, changed: it keeps its place in the first
    // delta with its new text, so that delta's chunk is rewritten.
    let second = line(json!({"id": "b", "type": "gemini",
        "timestamp": "2026-05-11T08:00:03Z", "content": "the final wombat answer"}));
    for backend in backends()? {
        let b = backend.name;
        let embedder = HeldEmbedder::start(HELD)?;
        let (mut central, _tmp) = start_with(&backend, &embedder)?;
        let data = central.data_dir.clone();
        let alice = central.client(&central.register("alice.test", "laptop")?);
        let gemini = |from: usize, jsonl: &str| {
            let mut body = delta("g", from as u64, jsonl);
            body["agent_runtime"] = json!("gemini");
            post_delta(&alice, &body)
        };
        let run = gemini(0, &first)?;
        embedder.wait_held()?;
        let later = gemini(first.len(), &second)?;
        embedder.release();
        alice.wait_embedded(&later, EMBEDDED_WITHIN)?;
        alice.wait_embedded(&run, EMBEDDED_WITHIN)?;

        let inputs = embedder.inputs();
        assert!(
            inputs
                .iter()
                .any(|t| t.contains(HELD) && t.contains("quokka")),
            "{b}: the first text was embedded: {inputs:?}"
        );
        assert!(
            inputs
                .iter()
                .any(|t| t.contains(HELD) && !t.contains("quokka")),
            "{b}: the rewritten chunk was embedded again: {inputs:?}"
        );
        assert!(keyword(&alice, "quokka", json!({}))?.is_empty(), "{b}");
        assert_eq!(keyword(&alice, "wombat", json!({}))?, [run.as_str()], "{b}");
        central.kill()?;
        assert_doctor_clean(&backend, &data)?;
    }
    Ok(())
}

/// A run put again for its standing alone (a tag edit) keeps its vectors:
/// the model is not asked for its text again, and a semantic search with
/// the new tag finds it. (A rewritten text is embedded again: above.)
#[test]
fn conformance_a_tag_edit_keeps_the_vectors() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let embedder = HeldEmbedder::start("no text holds this")?;
        let (central, _tmp) = start_with(&backend, &embedder)?;
        let alice = central.client(&central.register("alice.test", "laptop")?);
        let run = ingest(&alice, "a", "the pelican budget for the lake", json!({}))?;
        let before = alice.wait_embedded(&run, EMBEDDED_WITHIN)?;
        let asked = embedder.inputs();
        assert!(
            asked.iter().any(|t| t.contains("pelican budget")),
            "{b}: {asked:?}"
        );
        let conversation = before["conversation"].as_str().unwrap_or_default();
        let tagged = alice.post(
            &format!("/api/conversations/{conversation}/tags"),
            &json!({"add": ["birds"]}),
        )?;
        assert_eq!(tagged.status, 200, "{b}: {tagged:?}");
        // Indexed again (with the tag), then its vectors are accounted for.
        let deadline = std::time::Instant::now() + INDEXED_WITHIN;
        loop {
            let r = alice.get(&format!("/api/runs/{run}"))?;
            if r.body["indexed_at"] != before["indexed_at"] && r.body["embedded_at"].is_string() {
                break;
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "{b}: not indexed again: {r:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(embedder.inputs(), asked, "{b}: nothing embedded again");
        let sem = search(
            &alice,
            json!({"query": "pelican budget", "mode": "semantic",
                   "filters": {"tags": ["birds"]}}),
        )?;
        assert_eq!(hit_run_ids(&sem), vec![run], "{b}: {sem}");
        let untagged = search(
            &alice,
            json!({"query": "pelican budget", "mode": "semantic",
                   "filters": {"tags": ["fish"]}}),
        )?;
        assert!(hit_run_ids(&untagged).is_empty(), "{b}: {untagged}");
    }
    Ok(())
}

/// Facet filters keep exactly the conversations in which a run the viewer
/// may read did the thing (every run of such a conversation, none of any
/// other), in keyword and hybrid mode: a file by its whole path or a suffix
/// of whole components, never part of a name; a tool or skill by its whole
/// name; a command by any part of it; a branch by its whole name; an owner
/// by handle. Bob's private run does all of it and is never found.
#[test]
fn conformance_facet_filters_keep_exactly_the_matching_conversations() -> Result<()> {
    let models = model_dir()?;
    for backend in backends()? {
        let b = backend.name;
        let extra: Vec<(&str, &str)> = models
            .iter()
            .map(|m| ("KITH_MODEL_DIR", m.as_str()))
            .collect();
        let s = backend.start(&extra)?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        s.central.register("carol.test", "tablet")?;
        let w = "zeppelin";
        // One session in two deltas: only the second edits the parser.
        let mut a = Session::new("a", "/w", "feature/parse");
        let a1 = a
            .user(&format!("{w}: make the parser accept trailing commas"))
            .send(&alice, json!({}))?;
        let a2 = a
            .tool(
                "Edit",
                json!({"file_path": "/w/src/parser.rs", "old_string": "x", "new_string": "y"}),
            )
            .tool("Bash", json!({"command": "cargo test --workspace"}))
            .user(&format!("{w}: the parser takes them now"))
            .send(&alice, json!({}))?;
        let lexer = Session::new("b", "/w", "main")
            .user(&format!("{w}: review the lexer"))
            .tool("Read", json!({"file_path": "/w/src/lexer.rs"}))
            .tool("Bash", json!({"command": "git status"}))
            .send(&alice, json!({}))?;
        let notes = Session::new("c", "/w", "release")
            .user(&format!("{w}: write my parser notes"))
            .tool(
                "Write",
                json!({"file_path": "/w/lib/myparser.rs", "content": "fn main() {}"}),
            )
            .tool("Skill", json!({"skill": "pdf"}))
            .send(&alice, json!({}))?;
        let codex = ingest_codex(
            &alice,
            "d",
            &format!("{w}: build the release"),
            &["cargo build --release"],
        )?;
        let bobs_shared = Session::new("e", "/home/bob", "feature/parse")
            .user(&format!("{w}: bob's parser"))
            .tool(
                "Edit",
                json!({"file_path": "/home/bob/src/parser.rs", "old_string": "x", "new_string": "y"}),
            )
            .tool("Bash", json!({"command": "cargo test -p kith"}))
            .send(&bob, json!({}))?;
        share(&bob, &format!("run:{bobs_shared}"), "alice.test")?;
        // Matches every facet below; alice may never read it.
        let bobs_private = Session::new("f", "/w", "main")
            .user(&format!("{w}: bob's private parser"))
            .tool(
                "Edit",
                json!({"file_path": "/w/src/parser.rs", "old_string": "x", "new_string": "y"}),
            )
            .tool(
                "Write",
                json!({"file_path": "/w/lib/myparser.rs", "content": ""}),
            )
            .tool("Read", json!({"file_path": "/w/src/lexer.rs"}))
            .tool("Skill", json!({"skill": "pdf"}))
            .tool(
                "Bash",
                json!({"command": "cargo test --workspace && git status && cargo build --release"}),
            )
            .tool("exec_command", json!({}))
            .send(&bob, json!({}))?;
        if models.is_some() {
            for id in [&a1, &a2, &lexer, &notes, &codex] {
                alice.wait_embedded(id, EMBEDDED_WITHIN)?;
            }
            for id in [&bobs_shared, &bobs_private] {
                bob.wait_embedded(id, EMBEDDED_WITHIN)?;
            }
        }

        let parser = vec![&a1, &a2, &bobs_shared];
        let alices = vec![&a1, &a2, &lexer, &notes, &codex];
        let cases = [
            (json!({}), [alices.clone(), vec![&bobs_shared]].concat()),
            (json!({"file": "/w/src/parser.rs"}), vec![&a1, &a2]),
            (json!({"file": "src/parser.rs"}), parser.clone()),
            (json!({"file": "parser.rs"}), parser.clone()),
            (json!({"file": "rser.rs"}), vec![]),
            (json!({"file": "/src/parser.rs"}), vec![]),
            (json!({"file": "w/src"}), vec![]),
            (json!({"file": "/w/lib/myparser.rs"}), vec![&notes]),
            (json!({"file": "lib/myparser.rs"}), vec![&notes]),
            (json!({"tool": "Edit"}), parser.clone()),
            (json!({"tool": "Read"}), vec![&lexer]),
            (
                json!({"tool": "Bash"}),
                vec![&a1, &a2, &lexer, &bobs_shared],
            ),
            (json!({"tool": "pdf"}), vec![&notes]),
            (json!({"tool": "exec_command"}), vec![&codex]),
            (json!({"tool": "Edi"}), vec![]),
            (json!({"command": "cargo test"}), parser.clone()),
            (json!({"command": "cargo test --workspace"}), vec![&a1, &a2]),
            (json!({"command": "git status"}), vec![&lexer]),
            (json!({"command": "build --rel"}), vec![&codex]),
            (
                json!({"command": "cargo"}),
                vec![&a1, &a2, &codex, &bobs_shared],
            ),
            (json!({"command": "cargo testing"}), vec![]),
            (json!({"branch": "feature/parse"}), parser.clone()),
            (json!({"branch": "main"}), vec![&lexer]),
            (json!({"branch": "feature"}), vec![]),
            (json!({"owner": "alice.test"}), alices.clone()),
            (json!({"owner": "bob.test"}), vec![&bobs_shared]),
            (json!({"owner": "carol.test"}), vec![]),
            // A folder: the files under it, given whole or by its last
            // components.
            (
                json!({"file": "src/"}),
                vec![&a1, &a2, &lexer, &bobs_shared],
            ),
            (json!({"file": "/w/src/"}), vec![&a1, &a2, &lexer]),
            (json!({"file": "lib/"}), vec![&notes]),
            (json!({"file": "rc/"}), vec![]),
            // A project by its folder's name, anywhere in the path.
            (json!({"cwd_prefix": "bob"}), vec![&bobs_shared]),
            (json!({"cwd_prefix": "ob"}), vec![]),
            // Facets together, and with the other filters.
            (
                json!({"file": "parser.rs", "owner": "bob.test"}),
                vec![&bobs_shared],
            ),
            (json!({"tool": "Edit", "branch": "main"}), vec![]),
            (
                json!({"command": "cargo test", "branch": "feature/parse", "owner": "alice.test"}),
                vec![&a1, &a2],
            ),
            (
                json!({"file": "src/parser.rs", "machine": "laptop"}),
                vec![&a1, &a2],
            ),
            (json!({"tool": "Bash", "runtime": "codex"}), vec![]),
        ];
        for mode in modes(&models) {
            for (filters, want) in &cases {
                let got = found(&alice, mode, w, filters)?;
                assert_eq!(got, sorted(want), "{b}: {mode} {filters}");
                assert!(!got.contains(&bobs_private), "{b}: {mode} {filters}");
            }
        }
        // A handle no member has is refused, naming who was meant.
        let res = alice.post(
            "/api/search",
            &json!({"query": w, "mode": "keyword", "filters": {"owner": "bob"}}),
        )?;
        assert_eq!(
            (res.status, res.code()),
            (400, "unknown_member"),
            "{b}: {res:?}"
        );
        let said = res.body["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("did you mean bob.test?"), "{b}: {said}");
        let res = alice.post(
            "/api/search",
            &json!({"query": w, "mode": "keyword", "filters": {"owner": "nobody.test"}}),
        )?;
        assert_eq!(res.code(), "unknown_member", "{b}: {res:?}");
        assert!(
            !res.body.to_string().contains("did you mean"),
            "{b}: {res:?}"
        );
        // Bob's own view: his private run matches, alice's runs never do.
        for mode in modes(&models) {
            assert_eq!(
                found(&bob, mode, w, &json!({"file": "/w/src/parser.rs"}))?,
                vec![bobs_private.clone()],
                "{b}: {mode}"
            );
            assert_eq!(
                found(&bob, mode, w, &json!({"owner": "alice.test"}))?,
                Vec::<String>::new(),
                "{b}: {mode}"
            );
        }

        // Hits name their conversation and their owner's handle.
        let body = search(
            &alice,
            json!({"query": w, "mode": "keyword", "filters": {"file": "parser.rs"}}),
        )?;
        let hits = body["hits"].as_array().context("hits")?;
        let of = |id: &String| hits.iter().find(|h| h["run_id"] == json!(id));
        let (h1, h2, he) = (
            of(&a1).context("a1")?,
            of(&a2).context("a2")?,
            of(&bobs_shared).context("bob's")?,
        );
        assert!(
            h1["conversation_id"]
                .as_str()
                .is_some_and(|c| c.starts_with('c')),
            "{b}: {h1}"
        );
        assert_eq!(
            h1["conversation_id"], h2["conversation_id"],
            "{b}: two deltas, one conversation"
        );
        assert_ne!(h1["conversation_id"], he["conversation_id"], "{b}");
        assert_eq!(
            (&h1["owner"], &h2["owner"], &he["owner"]),
            (
                &json!("alice.test"),
                &json!("alice.test"),
                &json!("bob.test")
            ),
            "{b}: {body}"
        );
    }
    Ok(())
}

/// A facet never tells anyone what another person's private run did: for
/// bob, `file=plan.rs` finds his own run, not alice's private run that
/// edited `secret/plan.rs`, nor a run of hers he may read whose
/// conversation has a private run that edited it. Once she shares the run
/// that edited it, that run (and only it, not its private parent) is found.
#[test]
fn conformance_a_facet_never_reveals_a_private_run() -> Result<()> {
    let models = model_dir()?;
    for backend in backends()? {
        let b = backend.name;
        let extra: Vec<(&str, &str)> = models
            .iter()
            .map(|m| ("KITH_MODEL_DIR", m.as_str()))
            .collect();
        let s = backend.start(&extra)?;
        let alice = s.client("alice.test", "laptop")?;
        let bob = s.client("bob.test", "desktop")?;
        let w = "blueprint";
        let edit = |path: &str| json!({"file_path": path, "old_string": "a", "new_string": "b"});
        let secret = "/home/alice/secret/plan.rs";
        let private = Session::new("p", "/home/alice", "main")
            .user(&format!("{w} for the launch"))
            .tool("Edit", edit(secret))
            .send(&alice, json!({}))?;
        // A conversation whose subagent alone edited the file.
        let parent = Session::new("q", "/home/alice", "main")
            .user(&format!("{w} overview"))
            .send(&alice, json!({}))?;
        let subagent = Session::new("q-agent", "/home/alice", "main")
            .user(&format!("{w} details"))
            .tool("Edit", edit(secret))
            .send(&alice, json!({"parent_run_id": parent}))?;
        // A tagged run bob will read, whose private subagent edited the file.
        let tagged = Session::new("t", "/home/alice", "main")
            .user(&format!("{w} for the family"))
            .send(&alice, json!({"tags": ["family"]}))?;
        let tagged_child = Session::new("t-agent", "/home/alice", "main")
            .user(&format!("{w} family details"))
            .tool("Edit", edit(secret))
            .send(&alice, json!({"parent_run_id": tagged}))?;
        let bobs = Session::new("m", "/home/bob", "main")
            .user(&format!("{w} of bob's own"))
            .tool("Edit", edit("/home/bob/work/plan.rs"))
            .send(&bob, json!({}))?;
        if models.is_some() {
            for id in [&private, &parent, &subagent, &tagged, &tagged_child] {
                alice.wait_embedded(id, EMBEDDED_WITHIN)?;
            }
            bob.wait_embedded(&bobs, EMBEDDED_WITHIN)?;
        }
        let plan = json!({"file": "plan.rs"});
        let secret_plan = json!({"file": "secret/plan.rs"});
        let grouped = |api: &Api, mode: &str, filters: &Value| -> Result<Vec<String>> {
            let body = search(
                api,
                json!({"query": w, "mode": mode, "filters": filters,
                       "group": "conversation", "limit": 100}),
            )?;
            let mut ids = hit_run_ids(&body);
            ids.sort();
            ids.dedup();
            Ok(ids)
        };
        let check = |stage: &str, filters: &Value, want: Vec<&String>| -> Result<()> {
            for mode in modes(&models) {
                let want = sorted(&want);
                assert_eq!(
                    found(&bob, mode, w, filters)?,
                    want,
                    "{b}: {stage}: {mode} {filters}"
                );
                assert_eq!(
                    grouped(&bob, mode, filters)?,
                    want,
                    "{b}: {stage}: {mode} grouped {filters}"
                );
            }
            Ok(())
        };

        check("nothing shared", &json!({}), vec![&bobs])?;
        check("nothing shared", &plan, vec![&bobs])?;
        check("nothing shared", &secret_plan, vec![])?;

        share(&alice, "tag:family", "bob.test")?;
        check("tag shared", &json!({}), vec![&bobs, &tagged])?;
        check("tag shared", &plan, vec![&bobs])?;
        check("tag shared", &secret_plan, vec![])?;

        share(&alice, &format!("run:{subagent}"), "bob.test")?;
        check("subagent shared", &plan, vec![&bobs, &subagent])?;
        check("subagent shared", &secret_plan, vec![&subagent])?;

        share(&alice, &format!("run:{private}"), "bob.test")?;
        check("run shared", &plan, vec![&bobs, &private, &subagent])?;
        check("run shared", &secret_plan, vec![&private, &subagent])?;
        check(
            "run shared",
            &json!({"file": "plan.rs", "owner": "bob.test"}),
            vec![&bobs],
        )?;

        // And the other way: alice finds all of hers, never bob's.
        for mode in modes(&models) {
            assert_eq!(
                found(&alice, mode, w, &plan)?,
                sorted(&[&private, &parent, &subagent, &tagged, &tagged_child]),
                "{b}: {mode}"
            );
        }
    }
    Ok(())
}

/// `group: conversation` ranks conversations: `limit` of them, best first
/// (in the order their best hits rank), each with at most three of its
/// hits, all of its own, and no conversation or hit twice; a conversation
/// whose several deltas hold many matching chunks is still one group. The
/// default, `group: none`, returns ranked chunks up to `limit`.
#[test]
fn conformance_grouped_search_ranks_conversations() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let w = "heliotrope";
        // Long enough that every turn is a chunk of its own.
        let filler = "the gardener waters the beds along the south wall every morning, \
                      then sweeps the gravel paths and writes down which plants need \
                      pruning before the frost arrives, which seeds to order for spring, \
                      and when the compost heap behind the shed should be turned over again";
        assert!(filler.len() > 200);
        // Three deltas of one session, three matching turns each: the word
        // early and often, so its chunks rank first on every backend.
        let mut many = Session::new("x", "/w", "main");
        let mut deltas = Vec::new();
        for d in 0..3 {
            for t in 0..3 {
                many.user(&format!("{w} {w} {w} note {d}.{t}: {filler}"));
            }
            deltas.push(many.send(&alice, json!({}))?);
        }
        let second = Session::new("y", "/w", "main")
            .user(&format!("{filler}, and one {w}"))
            .send(&alice, json!({}))?;
        let third = Session::new("z", "/w", "main")
            .user(&format!("{filler}; {filler}; {filler}, and one {w}"))
            .send(&alice, json!({}))?;
        Session::new("n", "/w", "main")
            .user(filler)
            .send(&alice, json!({}))?;
        let conversation = |run: &String| -> Result<String> {
            let r = alice.get(&format!("/api/runs/{run}"))?;
            r.body["conversation"]
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("no conversation: {r:?}"))
        };
        let many_id = conversation(&deltas[0])?;
        for d in &deltas {
            assert_eq!(
                conversation(d)?,
                many_id,
                "{b}: one session, one conversation"
            );
        }
        let (second_id, third_id) = (conversation(&second)?, conversation(&third)?);

        // The ranked chunks: every matching one, nine of them in one conversation.
        let chunks = search(&alice, json!({"query": w, "mode": "keyword", "limit": 100}))?;
        let chunk_hits = chunks["hits"].as_array().context("hits")?;
        let convs: Vec<&str> = chunk_hits
            .iter()
            .map(|h| h["conversation_id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(convs.len(), 11, "{b}: {chunks}");
        assert_eq!(
            convs.iter().filter(|c| **c == many_id).count(),
            9,
            "{b}: {chunks}"
        );
        let mut best_first: Vec<&str> = Vec::new();
        for c in &convs {
            if !best_first.contains(c) {
                best_first.push(c);
            }
        }
        assert_eq!(
            best_first,
            [&many_id, &second_id, &third_id],
            "{b}: the word early and often ranks first: {chunks}"
        );
        assert!(
            chunks.get("groups").is_none_or(|g| g == &json!([])),
            "{b}: no groups unless asked: {chunks}"
        );
        for limit in [1, 4, 10] {
            let body = search(
                &alice,
                json!({"query": w, "mode": "keyword", "group": "none", "limit": limit}),
            )?;
            let ids = chunk_ids(&body);
            let mut distinct = ids.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(
                (ids.len(), distinct.len()),
                (limit, limit),
                "{b}: limit counts chunks: {body}"
            );
        }

        let grouped = |limit: u32, offset: u32| -> Result<Value> {
            search(
                &alice,
                json!({"query": w, "mode": "keyword", "group": "conversation",
                       "limit": limit, "offset": offset}),
            )
        };
        let body = grouped(2, 0)?;
        let groups = body["groups"].as_array().context("groups")?;
        let ids: Vec<&str> = groups
            .iter()
            .map(|g| g["conversation_id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            ids,
            [&many_id, &second_id],
            "{b}: limit counts conversations, best first: {body}"
        );
        let mut seen_chunks = Vec::new();
        let mut last_score = f64::INFINITY;
        for g in groups {
            let hits = g["hits"].as_array().context("group hits")?;
            assert!(
                !hits.is_empty() && hits.len() <= 3,
                "{b}: 1 to 3 hits a group: {g}"
            );
            let score = g["score"].as_f64().unwrap_or_default();
            assert!(score <= last_score, "{b}: best group first: {body}");
            assert_eq!(g["score"], hits[0]["score"], "{b}: {g}");
            last_score = score;
            for h in hits {
                assert_eq!(
                    h["conversation_id"], g["conversation_id"],
                    "{b}: a group holds its own hits: {g}"
                );
                seen_chunks.push(h["chunk_id"].as_str().unwrap_or_default().to_owned());
            }
            assert_eq!(g["owner"], "alice.test", "{b}: {g}");
        }
        assert_eq!(
            groups[0]["hits"].as_array().map(Vec::len),
            Some(3),
            "{b}: nine matching chunks show as three: {body}"
        );
        let mut distinct = seen_chunks.clone();
        distinct.sort();
        distinct.dedup();
        assert_eq!(
            distinct.len(),
            seen_chunks.len(),
            "{b}: no hit twice: {body}"
        );
        assert_eq!(
            chunk_ids(&body),
            seen_chunks,
            "{b}: `hits` is the groups' hits in order: {body}"
        );

        let next = grouped(2, 1)?;
        let ids: Vec<&str> = next["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|g| g["conversation_id"].as_str().unwrap_or_default())
            .collect();
        assert_eq!(
            ids,
            [&second_id, &third_id],
            "{b}: offset counts conversations: {next}"
        );
        let all = grouped(100, 0)?;
        assert_eq!(
            all["groups"].as_array().map(Vec::len),
            Some(3),
            "{b}: the conversation without the word is not a group: {all}"
        );
    }
    Ok(())
}

/// A grouped page reaches past a conversation that holds many of the best
/// hits: the hits are ranked deeper until they hold the page's
/// conversations, so a page is short only where the matches end.
#[test]
fn conformance_grouped_pages_reach_past_a_busy_conversation() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        let w = "heliotrope";
        // Long enough that every turn is a chunk of its own.
        let filler = "the gardener waters the beds along the south wall every morning, \
                      then sweeps the gravel paths and writes down which plants need \
                      pruning before the frost arrives";
        // Thirty turns that say the word three times: the best thirty hits
        // are of one conversation, more than a page of one asks for.
        let mut busy = Session::new("x", "/w", "main");
        for t in 0..30 {
            busy.user(&format!("{w} {w} {w} note {t}: {filler}"));
        }
        let busy = busy.send(&alice, json!({}))?;
        let second = Session::new("y", "/w", "main")
            .user(&format!("{filler}, and one {w}"))
            .send(&alice, json!({}))?;
        let third = Session::new("z", "/w", "main")
            .user(&format!("{filler}; {filler}; {filler}, and one {w}"))
            .send(&alice, json!({}))?;
        let conversation = |run: &String| -> Result<String> {
            let r = alice.get(&format!("/api/runs/{run}"))?;
            r.body["conversation"]
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("no conversation: {r:?}"))
        };
        let want = [
            conversation(&busy)?,
            conversation(&second)?,
            conversation(&third)?,
        ];
        let mut pages = Vec::new();
        for offset in 0..4 {
            let body = search(
                &alice,
                json!({"query": w, "mode": "keyword", "group": "conversation",
                       "limit": 1, "offset": offset}),
            )?;
            let ids: Vec<String> = body["groups"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|g| g["conversation_id"].as_str().unwrap_or_default().to_owned())
                .collect();
            pages.push(ids);
        }
        let [first, second, third] = want;
        assert_eq!(
            pages,
            [vec![first], vec![second], vec![third], vec![]],
            "{b}: one conversation a page, each once, then none"
        );
    }
    Ok(())
}

/// Filter values are bounded: one over 4096 bytes, or more than 64 tags,
/// is a 400 with the JSON error body; at the bounds the search answers.
#[test]
fn conformance_search_rejects_oversized_filters() -> Result<()> {
    for backend in backends()? {
        let b = backend.name;
        let s = backend.start(&[])?;
        let alice = s.client("alice.test", "laptop")?;
        ingest(&alice, "a", "the kestrel survey", json!({}))?;
        let keys = [
            "file",
            "tool",
            "command",
            "branch",
            "owner",
            "machine",
            "cwd_prefix",
            "conversation_id",
            "root_run_id",
        ];
        let with =
            |filters: Value| json!({"query": "kestrel", "mode": "keyword", "filters": filters});
        let rejected = |filters: Value, code: &str| -> Result<()> {
            let r = alice.post("/api/search", &with(filters.clone()))?;
            assert_eq!((r.status, r.code()), (400, code), "{b}: {r:?}");
            assert!(
                r.body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "{b}: {r:?}"
            );
            Ok(())
        };
        for key in keys {
            let mut over = serde_json::Map::new();
            over.insert(key.to_owned(), json!("x".repeat(4097)));
            rejected(Value::Object(over), "filter_too_long")?;
            let mut at = serde_json::Map::new();
            at.insert(key.to_owned(), json!("x".repeat(4096)));
            let r = alice.post("/api/search", &with(Value::Object(at)))?;
            if key == "owner" {
                // Read, and no member is called that: said, not echoed whole.
                assert_eq!(r.code(), "unknown_member", "{b}: {r:?}");
                let said = r.body["error"]["message"].as_str().unwrap_or_default();
                assert!(said.len() < 200, "{b}: {said}");
                continue;
            }
            assert_eq!(r.status, 200, "{b}: {key} of 4096 bytes: {r:?}");
            assert_eq!(r.body["hits"], json!([]), "{b}: {key}");
        }
        rejected(json!({"tags": ["x".repeat(4097)]}), "filter_too_long")?;
        let tags = |n: usize| -> Vec<String> { (0..n).map(|i| format!("t{i}")).collect() };
        rejected(json!({"tags": tags(65)}), "invalid_filter")?;
        let r = alice.post("/api/search", &with(json!({"tags": tags(64)})))?;
        assert_eq!(r.status, 200, "{b}: 64 tags: {r:?}");
        assert_eq!(
            keyword(&alice, "kestrel", json!({}))?.len(),
            1,
            "{b}: the search still answers"
        );
    }
    Ok(())
}
