//! kith-central end to end: the real binary on loopback, driven over HTTP.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{ensure, Result};
use kith_shared::hash::{chain_next, sha256_hex};
use kith_tests::{claude_user_line, delta, one_indexed_run, run_central, Api, Central};
use serde_json::{json, Value};

const T0: &str = "2026-05-11T08:00:00.000Z";

fn line(text: &str, minute: u32) -> String {
    claude_user_line(text, &format!("2026-05-11T08:{minute:02}:00.000Z"))
}

/// `kith-central <args>` on `data`, which must succeed: what it printed on
/// stdout and stderr.
fn admin(data: &std::path::Path, args: &[&str]) -> Result<(String, String)> {
    let out = run_central(data, args)?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "kith-central {args:?}: {stdout}{stderr}"
    );
    Ok((stdout, stderr))
}

/// `kith-central machine revoke` of `user`'s machine `name`.
fn revoke(data: &std::path::Path, user: &str, name: &str) -> Result<()> {
    admin(data, &["machine", "revoke", "--user", user, "--name", name])?;
    Ok(())
}

/// Files under `<data>/runs`, to prove a rejected request left nothing behind.
fn stored_files(central: &Central) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![central.data_dir.join("runs")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let p = entry.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.display().to_string());
            }
        }
    }
    out.sort();
    out
}

/// An admin command on a data directory another user owns (the service's,
/// run by root) is refused before it writes there, and one about to start a
/// new registry says so.
#[test]
fn admin_commands_keep_to_the_data_directory_of_their_own_user() -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir()?;
    let me = std::fs::metadata(tmp.path())?.uid();
    // A folder of another user: the root folder, or as root one given away.
    let theirs = if me == 0 {
        let dir = tmp.path().join("theirs");
        std::fs::create_dir(&dir)?;
        std::os::unix::fs::chown(&dir, Some(65534), Some(65534))?;
        dir
    } else {
        std::path::PathBuf::from("/")
    };
    let before: Vec<_> = std::fs::read_dir(&theirs)?.collect();
    let out = run_central(&theirs, &["user", "add", "--handle", "carol.test"])?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("belongs to another user") && said.contains("sudo -u"),
        "{said}"
    );
    assert_eq!(
        std::fs::read_dir(&theirs)?.count(),
        before.len(),
        "nothing written"
    );

    let fresh = tmp.path().join("fresh");
    let (_, said) = admin(&fresh, &["user", "add", "--handle", "carol.test"])?;
    assert!(said.contains("starting a new registry"), "{said}");
    let (_, said) = admin(&fresh, &["user", "list"])?;
    assert!(!said.contains("starting a new registry"), "{said}");
    Ok(())
}

#[test]
fn ingest_then_read_back_search_and_nobody_else_sees_it() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let jsonl = line("why did the zeppelin cluster fail last spring", 0);

    let r = alice.post("/api/runs", &delta("src-a", 0, &jsonl))?;
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(r.body["status"], "accepted");
    assert_eq!(r.body["jsonl_bytes"], jsonl.len());
    assert_eq!(r.body["jsonl_sha256"], sha256_hex(jsonl.as_bytes()));
    let id = r.body["run_id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.body["_links"]["jsonl"], format!("/api/runs/{id}/jsonl"));

    let meta = alice.wait_indexed(&id, Duration::from_secs(10))?;
    assert_eq!(meta["machine"], "laptop");
    assert_eq!(meta["root_run_id"], id.as_str());
    assert_eq!(meta["readable_by"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        meta["intent"],
        "why did the zeppelin cluster fail last spring"
    );
    assert_eq!(meta["started_at"], T0);

    let (status, bytes) = alice.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
    assert_eq!((status, bytes), (200, jsonl.as_bytes().to_vec()));

    let hits = alice.post(
        "/api/search",
        &json!({"query": "zeppelin", "mode": "keyword"}),
    )?;
    assert_eq!(hits.status, 200, "{hits:?}");
    assert_eq!(hits.body["hits"][0]["run_id"], id.as_str());
    assert_eq!(hits.body["hits"][0]["line_start"], 1);
    assert!(hits.body["hits"][0]["snippet"]
        .as_str()
        .unwrap_or_default()
        .contains("«zeppelin»"));
    let none = alice.post(
        "/api/search",
        &json!({"query": "submarine", "mode": "keyword"}),
    )?;
    assert_eq!(none.body["hits"].as_array().map(Vec::len), Some(0));

    // Bob cannot tell the run exists: the same 404 as for a missing run.
    let missing = bob.get("/api/runs/rdoesnotexist")?;
    assert_eq!(missing.status, 404);
    for path in [
        format!("/api/runs/{id}"),
        format!("/api/runs/{id}/jsonl"),
        format!("/api/runs/{id}/descendants"),
    ] {
        let r = bob.get(&path)?;
        assert_eq!((r.status, &r.body), (404, &missing.body), "{path}");
    }
    let bob_hits = bob.post(
        "/api/search",
        &json!({"query": "zeppelin", "mode": "keyword"}),
    )?;
    assert_eq!(
        bob_hits.body["hits"].as_array().map(Vec::len),
        Some(0),
        "{bob_hits:?}"
    );
    let forest = bob.get("/api/runs/forest")?;
    assert_eq!(forest.body["trees"].as_array().map(Vec::len), Some(0));
    Ok(())
}

#[test]
fn dedupe_and_conflict_rules() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let a = line("first", 0);
    let b = line("second", 1);
    let ab = format!("{a}{b}");

    let first = alice.post("/api/runs", &delta("s", 0, &ab))?;
    assert_eq!(first.status, 202);
    let id = first.body["run_id"].as_str().unwrap_or_default().to_owned();
    let chain = first.body["chain_sha256"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert_eq!(chain, chain_next(None, &sha256_hex(ab.as_bytes())));

    // Same source and offset, identical bytes: deduped to the same run.
    let again = alice.post("/api/runs", &delta("s", 0, &ab))?;
    assert_eq!(
        (again.status, again.body["status"].as_str()),
        (202, Some("already_indexed"))
    );
    assert_eq!(again.body["run_id"], id.as_str());
    // A byte prefix of accepted bytes: deduped too.
    let prefix = alice.post("/api/runs", &delta("s", 0, &a))?;
    assert_eq!(
        (prefix.status, prefix.body["status"].as_str()),
        (202, Some("already_indexed"))
    );
    // Same offset, other bytes: conflict.
    let other = alice.post("/api/runs", &delta("s", 0, &line("different", 2)))?;
    assert_eq!((other.status, other.code()), (409, "range_overlap"));
    // Overlap from another offset: conflict, with the offset to resend from.
    let overlap = alice.post("/api/runs", &delta("s", a.len() as u64, &b))?;
    assert_eq!((overlap.status, overlap.code()), (409, "range_overlap"));
    assert!(overlap.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains(&ab.len().to_string()));
    // A gap: nothing accepted ends where this starts.
    let gap = alice.post(
        "/api/runs",
        &delta("s", ab.len() as u64 + 5, &line("later", 3)),
    )?;
    assert_eq!((gap.status, gap.code()), (409, "chain_gap"));

    // The next delta continues the chain; a wrong prev_sha256 is refused.
    let c = line("third", 4);
    let mut next = delta("s", ab.len() as u64, &c);
    next["prev_sha256"] = json!(sha256_hex(b"not the chain"));
    let wrong = alice.post("/api/runs", &next)?;
    assert_eq!((wrong.status, wrong.code()), (409, "chain_mismatch"));
    next["prev_sha256"] = json!(chain);
    let ok = alice.post("/api/runs", &next)?;
    assert_eq!(ok.status, 202, "{ok:?}");
    assert_eq!(
        ok.body["chain_sha256"],
        chain_next(Some(&chain), &sha256_hex(c.as_bytes()))
    );
    let meta = alice.get(&format!(
        "/api/runs/{}",
        ok.body["run_id"].as_str().unwrap_or_default()
    ))?;
    assert_eq!(
        meta.body["parent_run_id"],
        id.as_str(),
        "consecutive deltas chain"
    );
    assert_eq!(meta.body["root_run_id"], id.as_str());

    // An explicit run id: same bytes replay fine, other bytes conflict.
    let mut named = delta("t", 0, &a);
    named["run_id"] = json!("rnamed1");
    assert_eq!(alice.post("/api/runs", &named)?.body["status"], "accepted");
    assert_eq!(
        alice.post("/api/runs", &named)?.body["status"],
        "already_indexed"
    );
    let mut clash = delta("u", 0, &b);
    clash["run_id"] = json!("rnamed1");
    let clash = alice.post("/api/runs", &clash)?;
    assert_eq!((clash.status, clash.code()), (409, "run_conflict"));

    // Idempotency-Key: a replay answers with the first run.
    let k1 = alice.post_with("/api/runs", &delta("v", 0, &a), "key-1")?;
    let k2 = alice.post_with("/api/runs", &delta("v", 0, &a), "key-1")?;
    assert_eq!(k1.body["run_id"], k2.body["run_id"]);
    assert_eq!(k2.body["status"], "already_indexed");
    let k3 = alice.post_with("/api/runs", &delta("w", 0, &b), "key-1")?;
    assert_eq!((k3.status, k3.code()), (409, "run_conflict"));
    Ok(())
}

#[test]
fn bad_input_gets_a_clear_error_and_stores_nothing() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let central = Central::start_on(&data, &[("KITH_MAX_BODY_BYTES", "4096")])?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    let http = reqwest::blocking::Client::new();
    let url = alice.url("/api/runs");

    let cases: Vec<(&str, reqwest::blocking::RequestBuilder, u16, &str)> = vec![
        ("malformed json", http.post(&url).bearer_auth(&token).header("content-type", "application/json").body("{\"jsonl\":"), 400, "invalid_json"),
        ("invalid utf-8", http.post(&url).bearer_auth(&token).header("content-type", "application/json").body(b"{\"jsonl\":\"\xff\xfe\"}".to_vec()), 400, "invalid_json"),
        ("not json line", http.post(&url).bearer_auth(&token).json(&delta("s", 0, "{}\nnot json\n")), 400, "invalid_jsonl"),
        ("partial last line", http.post(&url).bearer_auth(&token).json(&delta("s", 0, "{}\n{\"a\"")), 400, "invalid_jsonl"),
        ("markdown for a JSONL agent", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"#### hi  \n","agent_runtime":"claude-code","source_identity":"s","from_offset":0,"to_offset":10})), 400, "invalid_jsonl"),
        ("aider partial last line", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"#### hi  \n####","agent_runtime":"aider","source_identity":"s","from_offset":0,"to_offset":14})), 400, "invalid_jsonl"),
        ("range mismatch", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":9})), 400, "invalid_range"),
        ("readable_by smuggled", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":3,"readable_by":["someone"]})), 400, "invalid_json"),
        ("traversal in run_id", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":3,"run_id":"../../etc"})), 400, "invalid_id"),
        ("unknown runtime", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"{}\n","agent_runtime":"vim","source_identity":"s","from_offset":0,"to_offset":3})), 400, "invalid_json"),
        ("over the limit", http.post(&url).bearer_auth(&token).json(&delta("s", 0, &format!("{{\"pad\":\"{}\"}}\n", "x".repeat(5000)))), 413, "payload_too_large"),
        ("missing bearer", http.post(&url).json(&delta("s", 0, "{}\n")), 401, "unauthorized"),
        ("unknown bearer", http.post(&url).bearer_auth("kith_0000").json(&delta("s", 0, "{}\n")), 401, "unauthorized"),
        ("traversal in path", http.get(alice.url("/api/runs/..%2F..%2Fetc%2Fpasswd")).bearer_auth(&token), 400, "invalid_id"),
        ("dots in path", http.get(alice.url("/api/runs/r1.jsonl/descendants")).bearer_auth(&token), 400, "invalid_id"),
        ("too many redaction kinds", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":3,"redactions":(0..65).map(|i| (format!("k{i}"), json!(1))).collect::<serde_json::Map<_, _>>()})), 400, "invalid_redactions"),
        ("unknown parent", http.post(&url).bearer_auth(&token).json(&json!({"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":3,"parent_run_id":"rnope"})), 400, "unknown_parent"),
    ];
    for (what, req, status, code) in cases {
        let r = Api::send_raw(req)?;
        assert_eq!((r.status, r.code()), (status, code), "{what}: {r:?}");
        assert!(
            !r.body["error"]["message"]
                .as_str()
                .unwrap_or_default()
                .is_empty(),
            "{what}"
        );
    }
    assert_eq!(
        stored_files(&central),
        Vec::<String>::new(),
        "rejected requests stored nothing"
    );
    let status = alice.get("/api/status")?;
    assert_eq!(status.body["counts"]["runs"], 0);

    // A zstd bomb: 1 MB of JSONL that compresses to a few hundred bytes.
    let big = delta(
        "s",
        0,
        &format!("{{\"pad\":\"{}\"}}\n", "x".repeat(1_000_000)),
    );
    let bomb = zstd::encode_all(serde_json::to_vec(&big)?.as_slice(), 19)?;
    assert!(bomb.len() < 4096);
    let r = alice.send(
        http.post(&url)
            .header("content-type", "application/json")
            .header("content-encoding", "zstd")
            .body(bomb),
    )?;
    assert_eq!((r.status, r.code()), (413, "payload_too_large"), "{r:?}");
    assert_eq!(stored_files(&central), Vec::<String>::new());
    Ok(())
}

/// Only a delta may be as large as the configured limit: any other body
/// (here a tag edit of a few million empty strings, which would take ten
/// times its size once parsed) is refused past 1 MiB.
#[test]
fn only_a_delta_may_be_larger_than_a_mebibyte() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let pad = "x".repeat(1_500_000);
    let run = alice.post("/api/runs", &delta("s", 0, &line(&pad, 0)))?;
    assert_eq!(run.status, 202, "a delta of 1.5 MB is taken");
    let id = run.body["run_id"].as_str().unwrap_or_default().to_owned();
    let conversation = alice.wait_indexed(&id, Duration::from_secs(10))?["conversation"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let tags = json!({"add": vec![""; 600_000]});
    let addr = central.url.trim_start_matches("http://");
    for (path, body) in [
        (format!("/api/conversations/{conversation}/tags"), tags),
        ("/api/search".to_owned(), json!({"query": pad})),
    ] {
        // Refused on its declared length. Asked as a client that waits for
        // `100 Continue` before it sends a body: one still writing 2 MB when
        // central answers and closes can lose the answer to a broken pipe.
        let head = format!(
            "POST {path} HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {}\r\n\
             content-type: application/json\r\ncontent-length: {}\r\n\
             expect: 100-continue\r\nconnection: close\r\n\r\n",
            alice.token,
            body.to_string().len()
        );
        let (status, answer) = raw_exchange(addr, &head, Duration::from_secs(30))?;
        assert_eq!(
            (status, answer["error"]["code"].as_str()),
            (413, Some("payload_too_large")),
            "{path}: {answer}"
        );
        let said = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(said.contains("1048576"), "{path}: {said}");
    }
    let tagged = alice.post(
        &format!("/api/conversations/{conversation}/tags"),
        &json!({"add": ["kept"]}),
    )?;
    assert_eq!(tagged.status, 200, "a small edit still goes: {tagged:?}");
    Ok(())
}

#[test]
fn gzip_and_zstd_bodies_are_accepted() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let http = reqwest::blocking::Client::new();
    let plain = line("compressed hello", 0);
    let body = serde_json::to_vec(&delta("gz", 0, &plain))?;
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&body)?;
    let gz = gz.finish()?;
    let r = alice.send(
        http.post(alice.url("/api/runs"))
            .header("content-type", "application/json")
            .header("content-encoding", "gzip")
            .body(gz),
    )?;
    assert_eq!(r.status, 202, "{r:?}");
    let (_, bytes) = alice.get_bytes(&format!(
        "/api/runs/{}/jsonl",
        r.body["run_id"].as_str().unwrap_or_default()
    ))?;
    assert_eq!(bytes, plain.as_bytes());

    let body = serde_json::to_vec(&delta("zs", 0, &plain))?;
    let r = alice.send(
        http.post(alice.url("/api/runs"))
            .header("content-type", "application/json")
            .header("content-encoding", "zstd")
            .body(zstd::encode_all(body.as_slice(), 3)?),
    )?;
    assert_eq!(r.status, 202, "{r:?}");
    Ok(())
}

#[test]
fn tree_descendants_and_forest_four_levels_deep() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    // a (session) -> b (next delta) -> c (subagent of b) -> d (its next delta); a -> e (another subagent)
    let post = |source: &str,
                from: u64,
                text: &str,
                minute: u32,
                parent: Option<&str>|
     -> Result<String> {
        let mut body = delta(source, from, &line(text, minute));
        if let Some(p) = parent {
            body["parent_run_id"] = json!(p);
        }
        let r = alice.post("/api/runs", &body)?;
        assert_eq!(r.status, 202, "{r:?}");
        Ok(r.body["run_id"].as_str().unwrap_or_default().to_owned())
    };
    let la = line("a", 0).len() as u64;
    let a = post("session", 0, "a", 0, None)?;
    let b = post("session", la, "b", 1, None)?;
    let c = post("sub1", 0, "c", 2, Some(&b))?;
    let e = post("sub2", 0, "e", 3, Some(&a))?;
    let d = post("sub1", line("c", 2).len() as u64, "d", 4, None)?;
    let other = post("elsewhere", 0, "x", 5, None)?;

    let meta_d = alice.get(&format!("/api/runs/{d}"))?;
    assert_eq!(
        meta_d.body["root_run_id"],
        a.as_str(),
        "root is the true root, three levels up"
    );
    assert_eq!(meta_d.body["parent_run_id"], c.as_str());

    let sub = alice.get(&format!("/api/runs/{b}/descendants"))?;
    let shape: Vec<(String, u64)> = sub.body["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["run"]["id"].as_str().unwrap_or_default().to_owned(),
                t["depth"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(shape, vec![(b.clone(), 0), (c.clone(), 1), (d.clone(), 2)]);

    let forest = alice.get("/api/runs/forest")?;
    let trees = forest.body["trees"].as_array().cloned().unwrap_or_default();
    assert_eq!(trees.len(), 2);
    assert_eq!(
        trees[0]["root_run_id"],
        other.as_str(),
        "most recently active tree first"
    );
    let shape: Vec<(String, u64)> = trees[1]["runs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            (
                t["run"]["id"].as_str().unwrap_or_default().to_owned(),
                t["depth"].as_u64().unwrap_or(99),
            )
        })
        .collect();
    assert_eq!(
        shape,
        vec![(a.clone(), 0), (b.clone(), 1), (c, 2), (d, 3), (e, 1)]
    );

    let only = alice.get(&format!("/api/runs/forest?root={a}&limit=5"))?;
    assert_eq!(only.body["trees"].as_array().map(Vec::len), Some(1));
    let since = alice.get("/api/runs/forest?since=2026-05-11T08:05:00Z")?;
    assert_eq!(since.body["trees"][0]["root_run_id"], other.as_str());
    assert_eq!(since.body["trees"].as_array().map(Vec::len), Some(1));
    let bad = alice.get("/api/runs/forest?since=yesterday")?;
    assert_eq!((bad.status, bad.code()), (400, "invalid_query"));
    let unknown = alice.get("/api/runs/forest?colour=red")?;
    assert_eq!(unknown.status, 400);
    assert_eq!(bob.get(&format!("/api/runs/{b}/descendants"))?.status, 404);
    Ok(())
}

#[test]
fn crash_after_202_loses_nothing_and_indexing_resumes() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let mut paused = Central::start_on(&data, &[("KITH_FAILPOINT_INDEXER_PAUSED", "1")])?;
    let token = paused.register("alice.test", "laptop")?;
    let alice = paused.client(&token);
    let jsonl = format!(
        "{}{}",
        line("the kraken deployment rolled back", 0),
        line("then it worked", 1)
    );
    let r = alice.post("/api/runs", &delta("s", 0, &jsonl))?;
    assert_eq!(r.status, 202);
    let id = r.body["run_id"].as_str().unwrap_or_default().to_owned();
    let status = alice.get("/api/status")?;
    assert_eq!(status.body["counts"]["pending_index_jobs"], 1, "{status:?}");
    let search = alice.post(
        "/api/search",
        &json!({"query": "kraken", "mode": "keyword"}),
    )?;
    assert_eq!(
        search.body["hits"].as_array().map(Vec::len),
        Some(0),
        "not indexed yet"
    );
    paused.kill()?;

    let central = Central::start_on(&data, &[])?;
    let alice = central.client(&token);
    let meta = alice.wait_indexed(&id, Duration::from_secs(10))?;
    assert_eq!(meta["jsonl_sha256"], sha256_hex(jsonl.as_bytes()));
    let (_, bytes) = alice.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
    assert_eq!(bytes, jsonl.as_bytes());
    let search = alice.post(
        "/api/search",
        &json!({"query": "kraken", "mode": "keyword"}),
    )?;
    assert_eq!(search.body["hits"][0]["run_id"], id.as_str(), "{search:?}");
    assert_eq!(
        alice.get("/api/status")?.body["counts"]["pending_index_jobs"],
        0
    );
    Ok(())
}

#[test]
fn revoked_token_is_refused_at_once() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    assert_eq!(alice.get("/api/status")?.status, 200);
    revoke(&central.data_dir, "alice.test", "laptop")?;
    let r = alice.get("/api/status")?;
    assert_eq!((r.status, r.code()), (401, "unauthorized"));
    // A second machine of the same name is refused while the first is live only.
    admin(
        &central.data_dir,
        &[
            "machine", "register", "--local", "--user", "bob.test", "--name", "pc",
        ],
    )?;
    let dup = run_central(
        &central.data_dir,
        &[
            "machine", "register", "--local", "--user", "bob.test", "--name", "pc",
        ],
    )?;
    assert_eq!(dup.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&dup.stderr).contains("already has a machine named"));
    Ok(())
}

/// A delta whose body was still on its way when its machine was revoked is
/// refused when it arrives, and nothing of it is stored.
#[test]
fn a_delta_in_flight_when_its_machine_is_revoked_is_refused() -> Result<()> {
    use std::io::{Read, Write};
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let body = delta("late", 0, &line("sent as the laptop was revoked", 0)).to_string();
    let (head, tail) = body.split_at(body.len() / 2);
    let addr = central.url.trim_start_matches("http://");
    let mut tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
    write!(
        tcp,
        "POST /api/runs HTTP/1.1\r\nhost: {addr}\r\nauthorization: Bearer {token}\r\n\
         content-type: application/json\r\ncontent-length: {}\r\nexpect: 100-continue\r\n\
         connection: close\r\n\r\n{head}",
        body.len()
    )?;
    tcp.flush()?;
    // The token was good when the request began: central took it and
    // asked for the body, which its HTTP server says with `100 Continue`
    // (sent when the handler first reads the body, after the token was
    // checked).
    let mut interim = [0u8; 25];
    tcp.read_exact(&mut interim)?;
    assert_eq!(
        String::from_utf8_lossy(&interim),
        "HTTP/1.1 100 Continue\r\n\r\n"
    );
    revoke(&central.data_dir, "alice.test", "laptop")?;
    tcp.write_all(tail.as_bytes())?;
    let mut answer = String::new();
    tcp.read_to_string(&mut answer)?;
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    // Nothing of it is stored: alice's other machine finds no conversation.
    let desk = central.client(&central.register("alice.test", "desk")?);
    let listed = desk.get("/api/conversations")?.body;
    assert_eq!(listed["conversations"], serde_json::json!([]), "{listed}");
    Ok(())
}

#[test]
fn service_endpoints_describe_themselves() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let api = alice.get("/api/openapi.json")?;
    assert_eq!(api.status, 200);
    for path in [
        "/api/runs",
        "/api/runs/{id}/jsonl",
        "/api/runs/forest",
        "/api/search",
        "/api/context",
        "/api/status",
    ] {
        assert!(api.body["paths"][path].is_object(), "openapi lacks {path}");
    }
    for schema in ["IngestRequest", "ContextRequest", "ContextResponse"] {
        assert!(
            api.body["components"]["schemas"][schema].is_object(),
            "openapi lacks {schema}"
        );
    }
    // /metrics is family-wide: an admin's token reads it, a member's and
    // none do not.
    let denied = alice.get("/metrics")?;
    assert_eq!(
        (denied.status, denied.code()),
        (403, "admin_only"),
        "{denied:?}"
    );
    let anonymous = reqwest::blocking::get(format!("{}/metrics", central.url))?;
    assert_eq!(anonymous.status(), 401);
    let admin = central.client(&central.register_admin("root.test", "server")?);
    let (status, metrics) = admin.get_bytes("/metrics")?;
    let metrics = String::from_utf8(metrics)?;
    assert_eq!(status, 200);
    assert!(
        metrics.contains("# TYPE kith_runs gauge\nkith_runs 0\n"),
        "{metrics}"
    );
    assert!(metrics.contains("kith_queue_depth{lane=\"ingest-bulk\"} 0"));
    let s = alice.get("/api/status")?;
    assert_eq!(
        (s.body["user"].as_str(), s.body["machine"].as_str()),
        (Some("alice.test"), Some("laptop"))
    );
    assert_eq!(s.body["search_backend"], "embedded");
    let nowhere = alice.get("/api/nowhere")?;
    assert_eq!((nowhere.status, nowhere.code()), (404, "not_found"));
    Ok(())
}

/// Issue #22: `/api/status` showed every member the family's counts (how
/// many runs and chunks the others hold, and when they last captured). A
/// member sees their own; an admin also sees the family's.
#[test]
fn status_counts_are_the_callers_own_and_the_family_is_for_admins() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let root = central.client(&central.register_admin("root.test", "server")?);
    let line = |text: &str| claude_user_line(text, "2026-05-11T08:00:00Z");
    for (i, text) in ["one", "two", "three"].iter().enumerate() {
        let r = alice.post("/api/runs", &delta(&format!("a{i}"), 0, &line(text)))?;
        assert_eq!(r.status, 202, "{r:?}");
        alice.wait_indexed(
            r.body["run_id"].as_str().unwrap_or_default(),
            Duration::from_secs(30),
        )?;
    }
    let r = bob.post("/api/runs", &delta("b", 0, &line("bob's only run")))?;
    assert_eq!(r.status, 202, "{r:?}");
    bob.wait_indexed(
        r.body["run_id"].as_str().unwrap_or_default(),
        Duration::from_secs(30),
    )?;

    let counts = |api: &Api| -> Result<Value> { Ok(api.get("/api/status")?.body) };
    let a = counts(&alice)?;
    assert_eq!(
        (
            &a["counts"]["users"],
            &a["counts"]["machines"],
            &a["counts"]["runs"],
            &a["counts"]["chunks"]
        ),
        (&json!(1), &json!(1), &json!(3), &json!(3)),
        "alice's own: {a}"
    );
    assert!(
        a.get("family").is_none(),
        "a member sees no family counts: {a}"
    );
    let b = counts(&bob)?;
    assert_eq!(
        (&b["counts"]["runs"], &b["counts"]["chunks"]),
        (&json!(1), &json!(1)),
        "{b}"
    );
    assert!(b.get("family").is_none(), "{b}");
    let r = counts(&root)?;
    assert_eq!(
        (&r["counts"]["runs"], &r["counts"]["chunks"]),
        (&json!(0), &json!(0)),
        "{r}"
    );
    assert_eq!(
        (
            &r["family"]["users"],
            &r["family"]["machines"],
            &r["family"]["runs"],
            &r["family"]["chunks"]
        ),
        (&json!(3), &json!(3), &json!(4), &json!(4)),
        "the admin sees the family: {r}"
    );
    assert_eq!(r["family"]["pending_index_jobs"], 0, "{r}");

    // Work waiting for the indexer is the owner's too: with the indexer
    // held, alice's two runs wait in her counts and lanes, not in bob's.
    let held = Central::start_with(&[("KITH_FAILPOINT_INDEXER_PAUSED", "1")])?;
    let alice = held.client(&held.register("alice.test", "laptop")?);
    let bob = held.client(&held.register("bob.test", "desktop")?);
    let root = held.client(&held.register_admin("root.test", "server")?);
    for source in ["a", "b"] {
        let r = alice.post("/api/runs", &delta(source, 0, &line("waiting")))?;
        assert_eq!(r.status, 202, "{r:?}");
    }
    let waiting = |api: &Api| -> Result<(Value, Value)> {
        let s = counts(api)?;
        let lanes = &s["queue"];
        Ok((
            s["counts"]["pending_index_jobs"].clone(),
            json!(
                lanes["ingest_realtime"].as_u64().unwrap_or(0)
                    + lanes["ingest_bulk"].as_u64().unwrap_or(0)
            ),
        ))
    };
    assert_eq!(waiting(&alice)?, (json!(2), json!(2)), "alice's own");
    assert_eq!(
        waiting(&bob)?,
        (json!(0), json!(0)),
        "nothing of alice's shows to bob"
    );
    assert_eq!(counts(&root)?["family"]["pending_index_jobs"], 2);
    Ok(())
}

/// Issue #22: ingest answered 409 `run_conflict` for a client-chosen
/// `run_id` another user held, and 202 for an unused one: an oracle telling
/// anyone who knew a member's run id whether that run still existed. Every
/// caller's id now names a run among its own, so a taken id and an unused
/// one answer alike, and the other run is untouched.
#[test]
fn another_users_run_id_answers_like_an_unused_one() -> Result<()> {
    use kith_central::ingest::own_run_id;
    use kith_shared::ids::{RunId, UserId};
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    // The user id `user list` prints beside a handle.
    let user_id = |handle: &str| -> Result<UserId> {
        let out = run_central(&central.data_dir, &["user", "list"])?;
        let listed = String::from_utf8(out.stdout)?;
        let id = listed
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{handle}\t")))
            .and_then(|rest| rest.split('\t').next())
            .ok_or_else(|| anyhow::anyhow!("{handle} not listed: {listed}"))?;
        Ok(UserId::parse(id)?)
    };
    let alices_client_id = "r019e0000000070008000000000000001";
    let mut body = delta("a", 0, &line("alice's private okapi plan", 0));
    body["run_id"] = json!(alices_client_id);
    let r = alice.post("/api/runs", &body)?;
    assert_eq!(r.status, 202, "{r:?}");
    let alices = r.body["run_id"].as_str().unwrap_or_default().to_owned();

    let bob_id = user_id("bob.test")?;
    let unused = "r019e0000000070008000000000000002";
    for (n, sent) in [alices.as_str(), alices_client_id, unused]
        .into_iter()
        .enumerate()
    {
        let mut body = delta(&format!("b{n}"), 0, &line("bob's own words", n as u32));
        body["run_id"] = json!(sent);
        let r = bob.post("/api/runs", &body)?;
        let own = own_run_id(&bob_id, &RunId::parse(sent)?)?;
        assert_eq!(
            (
                r.status,
                r.body["status"].as_str(),
                r.body["run_id"].as_str()
            ),
            (202, Some("accepted"), Some(own.as_str())),
            "{sent}: {r:?}"
        );
        // A replay, and other bytes under the same id, answer as for any
        // id of his.
        let again = bob.post("/api/runs", &body)?;
        assert_eq!(again.body["status"], "already_indexed", "{again:?}");
        let mut other = delta(&format!("c{n}"), 0, &line("other bytes", 9));
        other["run_id"] = json!(sent);
        let other = bob.post("/api/runs", &other)?;
        assert_eq!(
            (other.status, other.code()),
            (409, "run_conflict"),
            "{other:?}"
        );
    }
    // A later delta naming its parent by the client's id finds it.
    let mut child = delta("b9", 0, &line("bob's follow-up", 5));
    child["parent_run_id"] = json!(unused);
    let child = bob.post("/api/runs", &child)?;
    assert_eq!(child.status, 202, "{child:?}");
    let child_meta = bob.get(&format!(
        "/api/runs/{}",
        child.body["run_id"].as_str().unwrap_or_default()
    ))?;
    assert_eq!(
        child_meta.body["parent_run_id"],
        own_run_id(&bob_id, &RunId::parse(unused)?)?.as_str()
    );

    // Alice's run is hers, untouched; bob cannot read it.
    let (status, bytes) = alice.get_bytes(&format!("/api/runs/{alices}/jsonl"))?;
    assert_eq!(
        (status, String::from_utf8(bytes)?),
        (200, line("alice's private okapi plan", 0))
    );
    assert_eq!(bob.get(&format!("/api/runs/{alices}"))?.status, 404);
    Ok(())
}

/// The mode bits of a file or folder.
fn mode(path: &std::path::Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o777)
}

/// Issue #22: under the usual umask 022, central made its data directory
/// 0755 and its blobs and registry 0644, readable by every user of the
/// machine. Central runs under umask 022 here (`central_command`).
#[test]
fn the_data_directory_is_private_whatever_the_umask() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let r = alice.post_with(
        "/api/runs",
        &delta("s", 0, &line("private words", 0)),
        "key-1",
    )?;
    assert_eq!(r.status, 202, "{r:?}");
    let id = r.body["run_id"].as_str().unwrap_or_default().to_owned();
    alice.wait_indexed(&id, Duration::from_secs(10))?;
    let data = &central.data_dir;
    assert_eq!(mode(data)?, 0o700, "the data directory");
    for name in [
        "registry.sqlite",
        "registry.sqlite-wal",
        "registry.sqlite-shm",
    ] {
        assert_eq!(mode(&data.join(name))?, 0o600, "{name}");
    }
    let mut blobs = 0;
    let mut stack = vec![data.join("runs")];
    while let Some(dir) = stack.pop() {
        assert_eq!(mode(&dir)?, 0o700, "{}", dir.display());
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                assert_eq!(mode(&path)?, 0o600, "{}", path.display());
                blobs += 1;
            }
        }
    }
    assert_eq!(blobs, 2, "the run's jsonl and metadata");
    // The index holds the text too: none of its folders opens to others.
    let mut folders = 0;
    let mut stack = vec![data.join("index")];
    while let Some(dir) = stack.pop() {
        assert_eq!(mode(&dir)? & 0o077, 0, "{}", dir.display());
        folders += 1;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            }
        }
    }
    assert!(folders >= 1, "an index");
    Ok(())
}

/// Writes a blob as the store writes one, beside the first blob of `like`
/// (a run of the same owner and machine, whose metadata it copies), with no
/// registry row: what a crash between the two writes leaves. Its run id and
/// folder.
fn orphan_blob(
    data: &Path,
    like: &str,
    source: &str,
    jsonl: &str,
    key: &str,
) -> Result<(String, PathBuf)> {
    let first_meta = std::fs::read_dir(data.join("runs"))?
        .flatten()
        .flat_map(|user| {
            std::fs::read_dir(user.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .flat_map(|month| {
            std::fs::read_dir(month.path())
                .into_iter()
                .flatten()
                .flatten()
        })
        .map(|f| f.path())
        .find(|p| {
            p.to_string_lossy()
                .ends_with(&format!("{like}.metadata.json"))
        })
        .ok_or_else(|| anyhow::anyhow!("no metadata file"))?;
    let dir = first_meta
        .parent()
        .ok_or_else(|| anyhow::anyhow!("no folder"))?
        .to_owned();
    // Another id of the same shape (its last digit changed).
    let (stem, last) = like.split_at(like.len() - 1);
    let orphan_id = format!("{stem}{}", if last == "0" { "1" } else { "0" });
    let mut meta: Value = serde_json::from_slice(&std::fs::read(&first_meta)?)?;
    meta["id"] = json!(orphan_id);
    meta["root_run_id"] = json!(orphan_id);
    meta["source_identity"] = json!(source);
    meta["to_offset"] = json!(jsonl.len());
    meta["jsonl_bytes"] = json!(jsonl.len());
    meta["jsonl_sha256"] = json!(sha256_hex(jsonl.as_bytes()));
    meta["chain_sha256"] = json!(chain_next(None, &sha256_hex(jsonl.as_bytes())));
    meta["idempotency_key"] = json!(key);
    std::fs::write(dir.join(format!("{orphan_id}.jsonl")), jsonl)?;
    std::fs::write(
        dir.join(format!("{orphan_id}.metadata.json")),
        serde_json::to_vec(&meta)?,
    )?;
    Ok((orphan_id, dir))
}

/// Issue #22: a crash between writing a delta's blob and its registry row
/// left a blob no run pointed at; the client's retry (same Idempotency-Key,
/// no run id) was stored a second time, and `reindex` then held both. At
/// start central removes cut-short temp files and adopts the blob with its
/// key, so the retry is `already_indexed` with that run.
#[test]
fn a_blob_without_its_registry_row_is_adopted_by_its_key_never_doubled() -> Result<()> {
    let mut central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let first = alice.post_with(
        "/api/runs",
        &delta("s1", 0, &line("the okapi ledger", 0)),
        "key-1",
    )?;
    assert_eq!(first.status, 202, "{first:?}");
    let first_id = first.body["run_id"].as_str().unwrap_or_default().to_owned();
    alice.wait_indexed(&first_id, Duration::from_secs(10))?;
    central.kill()?;
    let data = central.data_dir.clone();

    // The crash: a second delta's blob written as the store writes one
    // (with its key), no registry row, and a temp file cut short.
    let jsonl = line("the okapi ledger, second part", 1);
    let (orphan_id, dir) = orphan_blob(&data, &first_id, "s2", &jsonl, "key-2")?;
    std::fs::write(dir.join(".tmp-0123456789abcdef"), "cut sh")?;
    let doctor = run_central(&data, &["doctor"])?;
    let said = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{said}");
    assert!(
        said.contains("leftover_temp_file") && said.contains("blob_not_in_registry"),
        "{said}"
    );

    central.restart()?;
    assert!(
        !dir.join(".tmp-0123456789abcdef").exists(),
        "the temp file is removed at start"
    );
    let retry = alice.post_with("/api/runs", &delta("s2", 0, &jsonl), "key-2")?;
    assert_eq!(
        (
            retry.status,
            retry.body["status"].as_str(),
            retry.body["run_id"].as_str()
        ),
        (202, Some("already_indexed"), Some(orphan_id.as_str())),
        "the retry finds the adopted run: {retry:?}"
    );
    alice.wait_indexed(&orphan_id, Duration::from_secs(10))?;
    let found = |api: &Api| -> Result<Vec<String>> {
        let r = api.post(
            "/api/search",
            &json!({"query": "okapi ledger", "mode": "keyword"}),
        )?;
        let mut ids: Vec<String> = r.body["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["run_id"].as_str().map(str::to_owned))
            .collect();
        ids.sort();
        Ok(ids)
    };
    let mut both = vec![first_id.clone(), orphan_id.clone()];
    both.sort();
    assert_eq!(found(&alice)?, both, "each delta once");
    central.kill()?;
    admin(&data, &["doctor"])?;
    let (said, _) = admin(&data, &["reindex"])?;
    assert!(said.contains("reindexed 2 runs"), "{said}");
    central.restart()?;
    assert_eq!(found(&alice)?, both, "a reindex doubles nothing");
    // The key came back with the blob: a retry after the reindex is still
    // the same run.
    let again = alice.post_with("/api/runs", &delta("s2", 0, &jsonl), "key-2")?;
    assert_eq!(again.body["run_id"], orphan_id.as_str(), "{again:?}");
    Ok(())
}

#[test]
fn reindex_rebuilds_from_blobs_and_doctor_sees_drift() -> Result<()> {
    let (central, alice, id) = one_indexed_run("the walrus migration plan")?;
    let data = central.data_dir.clone();
    admin(&data, &["doctor"])?;
    // Lose the whole index: doctor reports it, reindex rebuilds it.
    std::fs::remove_dir_all(data.join("index"))?;
    let drift = run_central(&data, &["doctor"])?;
    assert_eq!(drift.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&drift.stdout).contains("index_chunks_differ"));
    let (said, _) = admin(&data, &["reindex"])?;
    assert!(said.contains("reindexed 1 runs"), "{said}");
    admin(&data, &["doctor"])?;

    let restarted = Central::start_on(&data, &[])?;
    let alice = restarted.client(&alice.token);
    let hits = alice.post(
        "/api/search",
        &json!({"query": "walrus", "mode": "keyword"}),
    )?;
    assert_eq!(hits.body["hits"][0]["run_id"], id.as_str());
    Ok(())
}

/// An index an older kith-central built (its schema names tantivy's
/// `en_stem` analyzer) still serves; doctor names it and reindex builds it
/// anew, keeping the vector files while the chunking is the same and
/// dropping them when the runs are chunked again.
#[test]
fn reindex_builds_an_older_kith_centrals_index_anew() -> Result<()> {
    let (mut central, alice, id) = one_indexed_run("Nate won the walrus tournament")?;
    let data = central.data_dir.clone();
    let meta = data.join("index/meta.json");
    let current = std::fs::read_to_string(&meta)?;
    assert!(current.contains("\"en_base_stem\""), "{current}");
    std::fs::write(&meta, current.replace("\"en_base_stem\"", "\"en_stem\""))?;
    let vectors = data.join("index/vectors-kept.bin");
    std::fs::write(&vectors, b"kept")?;

    central.restart()?;
    let found = |query: &str| -> Result<serde_json::Value> {
        let r = alice.post("/api/search", &json!({"query": query, "mode": "keyword"}))?;
        Ok(r.body["hits"][0]["run_id"].clone())
    };
    assert_eq!(found("walrus")?, id.as_str(), "the older index serves");
    central.kill()?;
    let drift = run_central(&data, &["doctor"])?;
    assert_eq!(drift.status.code(), Some(1));
    let said = String::from_utf8_lossy(&drift.stdout);
    assert!(said.contains("index_outdated"), "{said}");
    let (said, told) = admin(&data, &["reindex"])?;
    assert!(told.contains("building it anew"), "{told}");
    assert!(said.contains("reindexed 1 runs"), "{said}");
    assert!(std::fs::read_to_string(&meta)?.contains("\"en_base_stem\""));
    assert_eq!(std::fs::read(&vectors)?, b"kept", "vectors kept");
    admin(&data, &["doctor"])?;
    central.restart()?;
    assert_eq!(found("who did win")?, id.as_str(), "win finds won");

    // Runs chunked by an older chunking are cut again: their vectors go.
    central.kill()?;
    std::fs::write(data.join("chunking"), "1\n")?;
    admin(&data, &["reindex"])?;
    assert!(!vectors.exists(), "vectors of other texts dropped");
    assert_ne!(std::fs::read_to_string(data.join("chunking"))?, "1\n");
    Ok(())
}

/// A run of `text` tagged `family` from `session`, indexed: its id.
fn family_run(owner: &Api, session: &str, text: &str) -> Result<String> {
    let mut body = delta(session, 0, &line(text, 0));
    body["tags"] = json!(["family"]);
    let id = owner.post("/api/runs", &body)?.body["run_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    owner.wait_indexed(&id, Duration::from_secs(10))?;
    Ok(id)
}

/// `owner` shares the tag `family` with `with`.
fn share_family(owner: &Api, with: &str) -> Result<()> {
    let share = owner.post("/api/shares", &json!({"scope": "tag:family", "with": with}))?;
    assert_eq!(share.status, 201, "{share:?}");
    Ok(())
}

#[test]
fn quarantine_hides_a_revoked_machines_runs_from_others_until_released() -> Result<()> {
    let mut central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let id = family_run(&alice, "s", "the octopus plan")?;
    share_family(&alice, "bob.test")?;
    assert_eq!(
        bob.get(&format!("/api/runs/{id}"))?.status,
        200,
        "shared by tag"
    );

    admin(
        &central.data_dir,
        &[
            "machine",
            "revoke",
            "--user",
            "alice.test",
            "--name",
            "laptop",
            "--quarantine-since",
            "2000-01-01T00:00:00Z",
        ],
    )?;
    assert_eq!(
        bob.get(&format!("/api/runs/{id}"))?.status,
        404,
        "quarantined: hidden from bob"
    );
    let hits = bob.post(
        "/api/search",
        &json!({"query": "octopus", "mode": "keyword"}),
    )?;
    assert_eq!(hits.body["hits"].as_array().map(Vec::len), Some(0));

    // Regression: reindex rebuilt the run catalog from the blobs and lost
    // the quarantine, which only the registry holds.
    central.kill()?;
    admin(&central.data_dir, &["reindex"])?;
    central.restart()?;
    assert_eq!(
        bob.get(&format!("/api/runs/{id}"))?.status,
        404,
        "still quarantined after reindex"
    );
    let hits = bob.post(
        "/api/search",
        &json!({"query": "octopus", "mode": "keyword"}),
    )?;
    assert_eq!(hits.body["hits"].as_array().map(Vec::len), Some(0));
    // The owner still sees it from another machine.
    let alice2 = central.client(&central.register("alice.test", "phone")?);
    assert_eq!(alice2.get(&format!("/api/runs/{id}"))?.status, 200);
    let hits = alice2.post(
        "/api/search",
        &json!({"query": "octopus", "mode": "keyword"}),
    )?;
    assert_eq!(
        hits.body["hits"][0]["run_id"],
        id.as_str(),
        "the owner finds it"
    );

    admin(
        &central.data_dir,
        &[
            "machine",
            "release",
            "--user",
            "alice.test",
            "--name",
            "laptop",
        ],
    )?;
    assert_eq!(bob.get(&format!("/api/runs/{id}"))?.status, 200, "released");
    let audit = alice2.get("/api/audit")?;
    assert!(audit.body["entries"]
        .as_array()
        .is_some_and(|e| e.iter().any(|x| x["reader"] == "bob.test")));
    Ok(())
}

/// A blob whose registry row a crash lost, of a machine revoked since,
/// comes back with `reindex` quarantined, as its delta would have been had
/// it arrived after the revocation: only its owner reads it.
#[test]
fn reindex_quarantines_a_revoked_machines_run_it_finds_only_in_the_blobs() -> Result<()> {
    let mut central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let first = family_run(&alice, "s", "the octopus plan")?;
    share_family(&alice, "bob.test")?;
    central.kill()?;
    let data = central.data_dir.clone();
    let (orphan, _) = orphan_blob(
        &data,
        &first,
        "s2",
        &line("the octopus plan, part two", 1),
        "k",
    )?;
    admin(
        &data,
        &[
            "machine",
            "revoke",
            "--user",
            "alice.test",
            "--name",
            "laptop",
        ],
    )?;
    admin(&data, &["reindex"])?;
    central.restart()?;
    assert_eq!(
        bob.get(&format!("/api/runs/{first}"))?.status,
        200,
        "a run captured before the revocation stays shared"
    );
    assert_eq!(
        bob.get(&format!("/api/runs/{orphan}"))?.status,
        404,
        "the adopted run is quarantined"
    );
    let alice2 = central.client(&central.register("alice.test", "phone")?);
    assert_eq!(alice2.get(&format!("/api/runs/{orphan}"))?.status, 200);
    Ok(())
}

/// A central serving HTTPS under `tmp` with a private CA's certificate.
fn tls_central(tmp: &Path) -> Result<(Central, kith_tests::PrivateCa)> {
    let ca = kith_tests::PrivateCa::make(tmp)?;
    let [(cert_var, cert), (key_var, key)] = ca.central_env();
    let central = Central::start_on(
        &tmp.join("data"),
        &[(cert_var, cert.as_str()), (key_var, key.as_str())],
    )?;
    Ok((central, ca))
}

#[test]
fn serves_https_with_the_configured_certificate() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let (central, ca) = tls_central(tmp.path())?;
    assert!(
        central.url.starts_with("https://127.0.0.1:"),
        "{}",
        central.url
    );
    let trusted = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&ca.ca)?)?)
        .build()?;
    let health = trusted.get(format!("{}/healthz", central.url)).send()?;
    assert_eq!(health.status().as_u16(), 200);
    let token = central.register("alice.test", "laptop")?;
    let status = trusted
        .get(format!("{}/api/status", central.url))
        .bearer_auth(&token)
        .send()?;
    assert_eq!(status.status().as_u16(), 200);
    // Plain HTTP on the TLS port, and a client that does not trust the certificate, both fail.
    let plain = central.url.replace("https://", "http://");
    let plain_ok =
        reqwest::blocking::get(format!("{plain}/healthz")).is_ok_and(|r| r.status().is_success());
    assert!(!plain_ok, "plain HTTP is not served on the TLS port");
    assert!(reqwest::blocking::get(format!("{}/healthz", central.url)).is_err());
    Ok(())
}

/// One raw HTTP/1.1 exchange (`Connection: close`): the status and the
/// body, parsed as JSON. Fails if no answer comes within `within`.
fn raw_exchange(addr: &str, head: &str, within: Duration) -> Result<(u16, serde_json::Value)> {
    use std::io::Read;
    let mut tcp = std::net::TcpStream::connect(addr)?;
    tcp.set_read_timeout(Some(within))?;
    tcp.write_all(head.as_bytes())?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer)?;
    let answer = String::from_utf8_lossy(&answer);
    let status = answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_default();
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
    Ok((status, serde_json::from_str(body).unwrap_or_default()))
}

/// Regression: past what hyper itself reads (a target over 64 KiB, over
/// 1,000 headers) hyper refused with an empty body; those refusals carry
/// kith's error body too.
#[test]
fn hypers_own_refusals_have_the_error_body() -> Result<()> {
    let central = Central::start()?;
    let addr = central.url.trim_start_matches("http://").to_owned();
    let long_target = format!(
        "GET /api/runs/forest?since={} HTTP/1.1\r\nHost: {addr}\r\n\r\n",
        "9".repeat(70_000)
    );
    let headers: String = (0..1_100).map(|i| format!("x-pad-{i}: a\r\n")).collect();
    let many_headers = format!("GET /api/status HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n");
    for (what, head, status, code) in [
        ("a 70,000-byte target", long_target, 414, "uri_too_long"),
        ("1,100 headers", many_headers, 431, "headers_too_large"),
    ] {
        let (got, body) = raw_exchange(&addr, &head, Duration::from_secs(10))?;
        assert_eq!(got, status, "{what}: {body}");
        assert_eq!(body["error"]["code"], code, "{what}: {body}");
        assert!(
            body["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("limit")),
            "{body}"
        );
    }
    // Central serves on.
    let health = reqwest::blocking::get(format!("{}/healthz", central.url))?;
    assert!(health.status().is_success());
    Ok(())
}

/// Issue #22: refusals made below the handlers (the method router, the
/// decompression layer, the limits on a request's head) came back with an
/// empty body, and 413 said "limit of 0 bytes".
#[test]
fn every_refusal_has_the_error_body() -> Result<()> {
    let central = Central::start_with(&[("KITH_MAX_BODY_BYTES", "4096")])?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    let http = reqwest::blocking::Client::new();
    let runs = alice.url("/api/runs");
    let small = serde_json::to_vec(&delta("s", 0, "{}\n"))?;
    let too_many_tags: Vec<String> = (0..65).map(|i| format!("t{i}")).collect();

    let cases: Vec<(&str, reqwest::blocking::RequestBuilder, u16, &str)> =
        vec![
        (
            "method on a public path",
            http.delete(alice.url("/healthz")),
            405,
            "method_not_allowed",
        ),
        (
            "method on an api path",
            http.put(&runs).bearer_auth(&token),
            405,
            "method_not_allowed",
        ),
        (
            "unknown encoding",
            http.post(&runs)
                .bearer_auth(&token)
                .header("content-type", "application/json")
                .header("content-encoding", "br")
                .body(small.clone()),
            415,
            "unsupported_media_type",
        ),
        (
            "no content type",
            http.post(&runs).bearer_auth(&token).body(small.clone()),
            415,
            "unsupported_media_type",
        ),
        (
            "long target",
            http.get(alice.url(&format!("/api/runs/forest?since={}", "9".repeat(10_000))))
                .bearer_auth(&token),
            414,
            "uri_too_long",
        ),
        (
            "large headers",
            http.get(alice.url("/api/status"))
                .bearer_auth(&token)
                .header("x-pad", "a".repeat(40_000)),
            431,
            "headers_too_large",
        ),
        (
            "over 100 headers",
            (0..150).fold(
                http.get(alice.url("/api/status")).bearer_auth(&token),
                |req, i| req.header(format!("x-pad-{i}"), "a"),
            ),
            431,
            "headers_too_large",
        ),
        (
            "body over the limit",
            http.post(&runs).bearer_auth(&token).json(&delta(
                "s",
                0,
                &format!("{{\"pad\":\"{}\"}}\n", "x".repeat(5000)),
            )),
            413,
            "payload_too_large",
        ),
        (
            "an id that is not text",
            http.get(alice.url("/api/conversations/%FF")).bearer_auth(&token),
            400,
            "invalid_id",
        ),
        (
            "a share id that is not text",
            http.delete(alice.url("/api/shares/%FF%FE")).bearer_auth(&token),
            400,
            "invalid_id",
        ),
        (
            "bad query",
            http.get(alice.url("/api/runs/forest?since=yesterday-ish"))
                .bearer_auth(&token),
            400,
            "invalid_query",
        ),
        (
            "too many tags in a search filter",
            http.post(alice.url("/api/search"))
                .bearer_auth(&token)
                .json(
                    &json!({"query": "x", "mode": "keyword", "filters": {"tags": too_many_tags}}),
                ),
            400,
            "invalid_filter",
        ),
        (
            "an empty tag in a search filter",
            http.post(alice.url("/api/search"))
                .bearer_auth(&token)
                .json(&json!({"query": "x", "mode": "keyword", "filters": {"tags": [""]}})),
            400,
            "invalid_filter",
        ),
    ];
    for (what, req, status, code) in cases {
        let res = req.send()?;
        let content_type = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        let allow = res.headers().get("allow").is_some();
        let got = res.status().as_u16();
        let body: serde_json::Value = serde_json::from_str(&res.text()?).unwrap_or_default();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{what}: {body}"
        );
        assert_eq!(content_type, "application/json", "{what}");
        assert!(!message.is_empty(), "{what}");
        if status == 405 {
            assert!(allow, "{what}: the 405 still says what is allowed");
        }
        if status == 413 {
            assert!(message.contains("4096 bytes"), "{what}: {message}");
        }
    }
    // A search with tags inside the bound is answered.
    let ok = alice.post(
        "/api/search",
        &json!({"query": "x", "mode": "keyword", "filters": {"tags": ["a", "b"]}}),
    )?;
    assert_eq!(ok.status, 200, "{ok:?}");

    // A declared length over the limit is refused at once, before any body
    // is sent and before the bearer is looked up.
    let addr = central.url.trim_start_matches("http://");
    let (status, body) = raw_exchange(
        addr,
        "POST /api/runs HTTP/1.1\r\nHost: kith\r\nContent-Type: application/json\r\n\
         Content-Length: 1000000000\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )?;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
    assert!(stored_files(&central).is_empty());
    Ok(())
}

/// The bearer scheme is case-insensitive (RFC 9110): `bearer` and `BEARER`
/// are accepted, other schemes are not.
#[test]
fn the_bearer_scheme_is_case_insensitive() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let http = reqwest::blocking::Client::new();
    let status = format!("{}/api/status", central.url);
    for (header, want) in [
        (format!("Bearer {token}"), 200),
        (format!("bearer {token}"), 200),
        (format!("BEARER {token}"), 200),
        (format!("Basic {token}"), 401),
        (format!("Bearer{token}"), 401),
        ("bearer ".to_owned(), 401),
    ] {
        let r = Api::send_raw(http.get(&status).header("authorization", &header))?;
        assert_eq!(
            r.status,
            want,
            "{}: {r:?}",
            header.split(' ').next().unwrap_or("")
        );
    }
    Ok(())
}

/// Sockets opened and never written (a slowloris client) neither starve
/// other clients nor stay open: `/healthz` answers at once beside 300 of
/// them, and each is closed when the header deadline passes.
#[test]
fn idle_connections_neither_starve_healthz_nor_stay_open() -> Result<()> {
    use std::io::Read;
    let central = Central::start()?;
    let addr = central.url.trim_start_matches("http://").to_owned();
    let idle = (0..300)
        .map(|_| std::net::TcpStream::connect(&addr))
        .collect::<std::io::Result<Vec<_>>>()?;
    // A fresh connection per request: central closes idle ones, this test's
    // own included, and a pooled one may be closed as it is reused.
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .pool_max_idle_per_host(0)
        .build()?;
    let started = std::time::Instant::now();
    let health = http.get(format!("{}/healthz", central.url)).send()?;
    assert!(health.status().is_success(), "{health:?}");
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // The header deadline is 10 s: by 20 s every one is closed (a read sees
    // the end, not the read timeout).
    let closed = |mut tcp: &std::net::TcpStream, within: u64| -> Result<bool> {
        tcp.set_read_timeout(Some(Duration::from_secs(within)))?;
        Ok(match tcp.read(&mut [0u8; 1]) {
            Ok(n) => n == 0,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        })
    };
    assert!(closed(&idle[0], 20)?, "an idle connection was not closed");
    for (i, tcp) in idle.iter().enumerate() {
        assert!(closed(tcp, 5)?, "idle connection {i} was not closed");
    }
    let health = http.get(format!("{}/healthz", central.url)).send()?;
    assert!(health.status().is_success());
    Ok(())
}

/// Regression: with every seat taken by connections that send nothing
/// (1,024, from many addresses, so no per-address cap stops them), a new
/// client waited in the listen backlog until the idle ones timed out (10 s),
/// and an attacker reopening them as they closed kept `/healthz` failing.
/// The connection idle longest makes room: `/healthz` answers at once.
#[test]
fn a_full_house_of_idle_connections_makes_room_for_a_request() -> Result<()> {
    let central = Central::start()?;
    let addr: std::net::SocketAddr = central.url.trim_start_matches("http://").parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let idle = runtime.block_on(async {
        let mut out = Vec::new();
        // 1,040 from 130 addresses (8 each, under the cap of 64).
        for i in 0..1_040u32 {
            let socket = tokio::net::TcpSocket::new_v4()?;
            let host = (2 + i % 130) as u8;
            socket.bind(std::net::SocketAddr::from(([127, 0, 1, host], 0)))?;
            out.push(socket.connect(addr).await?);
        }
        anyhow::Ok(out)
    })?;
    // Central has taken 1,024 of them.
    std::thread::sleep(Duration::from_millis(500));
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(3))
        .pool_max_idle_per_host(0)
        .build()?;
    for _ in 0..5 {
        let started = std::time::Instant::now();
        let health = http.get(format!("{}/healthz", central.url)).send()?;
        assert!(health.status().is_success(), "{health:?}");
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "waited {:?} behind idle connections",
            started.elapsed()
        );
    }
    drop(idle);
    Ok(())
}

/// A client that sends its headers and part of a body, then nothing (a
/// slow-body attack), gets an answer with kith's error body once the body
/// deadline passes, and central serves others meanwhile.
#[test]
fn a_body_that_stops_arriving_is_refused_and_the_connection_freed() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let addr = central.url.trim_start_matches("http://").to_owned();
    let head = format!(
        "POST /api/search HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{{\"query\": \"half"
    );
    let started = std::time::Instant::now();
    let (status, body) = raw_exchange(&addr, &head, Duration::from_secs(30))?;
    assert!(
        started.elapsed() >= Duration::from_secs(5),
        "answered before the body deadline: {status} {body}"
    );
    assert_eq!(status / 100, 4, "{status} {body}");
    assert!(
        body["error"]["code"].is_string(),
        "kith's error body: {body}"
    );
    let health = reqwest::blocking::get(format!("{}/healthz", central.url))?;
    assert!(health.status().is_success());
    Ok(())
}

/// Regression: a body fed one byte a second never met the pause limit, so
/// a sign-in form declaring 15,000 bytes held its connection for hours
/// (1,100 of them stalled central). The whole body has a deadline: the
/// trickle is refused with kith's error body once it passes, and central
/// answers others throughout.
#[test]
fn a_body_that_trickles_in_is_refused_at_its_whole_deadline() -> Result<()> {
    use std::io::Read;
    let central = Central::start()?;
    let addr = central.url.trim_start_matches("http://").to_owned();
    let mut tcp = std::net::TcpStream::connect(&addr)?;
    tcp.write_all(
        format!(
            "POST /signin HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: 15000\r\nConnection: close\r\n\r\nhandle="
        )
        .as_bytes(),
    )?;
    let mut feeder = tcp.try_clone()?;
    let feeding = std::thread::spawn(move || {
        // One byte a second, each pause far under the pause limit, until
        // central closes the connection (or a minute passes).
        for _ in 0..60 {
            std::thread::sleep(Duration::from_secs(1));
            if feeder.write_all(b"a").is_err() {
                return true;
            }
        }
        false
    });
    let started = std::time::Instant::now();
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    // Central answers others meanwhile.
    let health = http.get(format!("{}/healthz", central.url)).send()?;
    assert!(health.status().is_success());
    tcp.set_read_timeout(Some(Duration::from_secs(45)))?;
    let mut answer = Vec::new();
    let _ = tcp.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let waited = started.elapsed();
    assert!(
        answer.starts_with("HTTP/1.1 4"),
        "refused once the deadline passed ({waited:?}): {answer:?}"
    );
    assert!(answer.contains("did not arrive within 10 s"), "{answer}");
    assert!(waited < Duration::from_secs(40), "{waited:?}");
    drop(tcp);
    let _ = feeding.join();
    Ok(())
}

/// Regression: an HTTP/2 connection over TLS that sends its preface and
/// nothing more was never closed (HTTP/2 has no header deadline), so 1,024
/// of them made `/healthz` fail. A connection with no request in flight is
/// closed after the idle limit: `openssl s_client` negotiating h2 and
/// sending only the preface sees central hang up, and `/healthz` answers
/// meanwhile.
#[test]
fn an_idle_http2_connection_is_closed() -> Result<()> {
    use std::process::{Command, Stdio};
    let tmp = tempfile::tempdir()?;
    let (central, ca) = tls_central(tmp.path())?;
    let addr = central.url.trim_start_matches("https://").to_owned();
    let started = std::time::Instant::now();
    let mut client = Command::new("openssl")
        .args(["s_client", "-quiet", "-alpn", "h2", "-connect", &addr])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let mut stdin = client
        .stdin
        .take()
        .ok_or_else(|| anyhow::anyhow!("no stdin"))?;
    stdin.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")?;
    stdin.flush()?;
    let trusted = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(&ca.ca)?)?)
        .timeout(Duration::from_secs(5))
        .build()?;
    let health = trusted.get(format!("{}/healthz", central.url)).send()?;
    assert!(health.status().is_success());
    // s_client exits when central closes the connection (its stdin stays
    // open, so it would wait for ever otherwise).
    let mut closed = None;
    while started.elapsed() < Duration::from_secs(40) {
        if let Some(status) = client.try_wait()? {
            closed = Some(status);
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let waited = started.elapsed();
    if closed.is_none() {
        let _ = client.kill();
    }
    drop(stdin);
    let _ = client.wait();
    assert!(
        closed.is_some(),
        "the idle h2 connection was still open after {waited:?}"
    );
    assert!(
        waited >= Duration::from_secs(9),
        "closed before the idle limit: {waited:?}"
    );
    Ok(())
}

/// Regression: one address could hold every connection central serves
/// (1,100 slow sign-ins from one client stalled it). An address other than
/// the host's own gets 64 at once: the next ones are closed as they come,
/// and the host's clients are served beside them.
#[test]
fn one_address_cannot_take_every_connection() -> Result<()> {
    use std::io::Read;
    let central = Central::start()?;
    let addr: std::net::SocketAddr = central.url.trim_start_matches("http://").parse()?;
    // Another loopback address: another client, as far as central knows.
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let sockets = runtime.block_on(async {
        let mut out = Vec::new();
        for _ in 0..100 {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind("127.0.0.2:0".parse()?)?;
            out.push(socket.connect(addr).await?.into_std()?);
        }
        anyhow::Ok(out)
    })?;
    let health = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?
        .get(format!("{}/healthz", central.url))
        .send()?;
    assert!(health.status().is_success());
    // A second on, well inside the header deadline: closed (a read sees the
    // end) or still open (a read would wait).
    std::thread::sleep(Duration::from_secs(1));
    let closed = sockets
        .iter()
        .map(|mut tcp| {
            tcp.set_nonblocking(true)?;
            Ok(match tcp.read(&mut [0u8; 1]) {
                Ok(n) => n == 0,
                Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
            })
        })
        .collect::<Result<Vec<bool>>>()?;
    let n_closed = closed.iter().filter(|c| **c).count();
    assert_eq!(n_closed, 100 - 64, "{closed:?}");
    assert!(
        closed[..64].iter().all(|c| !c),
        "the first 64 are served: {closed:?}"
    );
    Ok(())
}

/// At debug, central logs one line per request (method, path, status) and
/// never the bearer token or the query string.
#[test]
fn a_debug_log_has_a_line_per_request_and_never_the_token() -> Result<()> {
    let mut central = Central::start_with(&[("KITH_LOG", "debug")])?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    assert_eq!(alice.get("/api/status?probe=q1")?.status, 200);
    assert_eq!(alice.get("/api/conversations/c0000")?.status, 404);
    central.kill()?;
    let log: Vec<String> = central.log.iter().collect();
    let done = |path: &str| -> Vec<&String> {
        log.iter()
            .filter(|l| {
                l.contains(&format!("path={path}")) && l.contains("finished processing request")
            })
            .collect()
    };
    let status = done("/api/status");
    assert_eq!(status.len(), 1, "one line for the request: {status:?}");
    assert!(status[0].contains("status=200"), "{status:?}");
    let missing = done("/api/conversations/c0000");
    assert_eq!(missing.len(), 1, "{missing:?}");
    assert!(
        missing[0].contains("status=404") && missing[0].contains("DEBUG"),
        "{missing:?}"
    );
    let text = log.join("\n");
    assert!(!text.contains(&token), "the token is never logged");
    assert!(!text.contains("probe=q1"), "nor the query string");
    Ok(())
}

/// Central's log as a supervisor reads it, from a pipe: no terminal colour
/// codes, and ONNX Runtime (when the embedder runs) says nothing below a
/// warning, so that the log is kith's own.
#[test]
fn the_log_read_from_a_pipe_has_no_colour_codes_and_no_onnx_info() -> Result<()> {
    let model = kith_tests::model_dir()?;
    let mut central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let r = alice.post(
        "/api/runs",
        &delta("src-log", 0, &line("the nightly backup job stopped", 0)),
    )?;
    assert_eq!(r.status, 202, "{r:?}");
    let id = r.body["run_id"].as_str().unwrap_or_default().to_owned();
    if model.is_some() {
        // The model has loaded and embedded: ONNX Runtime had its say.
        alice.wait_embedded(&id, Duration::from_secs(60))?;
        let sem = alice.post(
            "/api/search",
            &json!({"query": "backup stopped", "mode": "semantic"}),
        )?;
        assert_eq!(sem.status, 200, "{sem:?}");
    } else {
        alice.wait_indexed(&id, Duration::from_secs(10))?;
    }
    // Killed, central's stderr closes: the log is every line it wrote.
    central.kill()?;
    let log: Vec<String> = central.log.iter().collect();
    let text = log.join("\n");
    assert!(
        log.iter().any(|l| l.contains(" INFO ")),
        "central logged at info: {text}"
    );
    assert!(
        !text.contains("\x1b["),
        "colour codes in a piped log: {text}"
    );
    // ONNX Runtime's messages are events in the `ort` span (target
    // `ort::logging`); the ort crate's own are under `ort`.
    let onnx_info: Vec<&String> = log
        .iter()
        .filter(|l| {
            (l.contains(" INFO ") || l.contains(" DEBUG ") || l.contains(" TRACE "))
                && (l.contains("ort{") || l.contains(" ort:") || l.contains(" ort::"))
        })
        .collect();
    assert!(onnx_info.is_empty(), "ONNX info lines: {onnx_info:#?}");
    Ok(())
}

/// The owner's audit names the runs a reader was shown, not every run
/// that was a candidate: a search for one conversation audits that
/// conversation's run, a context pack the runs of its passages.
#[test]
fn the_audit_names_the_runs_a_reader_was_shown_and_no_others() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let mut ids = Vec::new();
    for (session, text) in [
        (
            "a",
            "the octopus plan: octopus tanks, octopus food, octopus care",
        ),
        ("b", "an octopus was mentioned once"),
        ("c", "one more octopus note, far down the list"),
    ] {
        ids.push(family_run(&alice, session, text)?);
    }
    share_family(&alice, "bob.test")?;
    let audited = || -> Result<Vec<String>> {
        let audit = alice.get("/api/audit")?;
        Ok(audit.body["entries"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reader"] == "bob.test" && e["what"] == "search_hit")
            .filter_map(|e| e["run_id"].as_str().map(str::to_owned))
            .collect())
    };

    let found = bob.post(
        "/api/search",
        &json!({"query": "octopus", "mode": "keyword", "limit": 1, "group": "conversation"}),
    )?;
    // One conversation asked for, from a pool of every matching run.
    assert_eq!(found.body["groups"].as_array().map(Vec::len), Some(1));
    let hits = found.body["hits"].as_array().cloned().unwrap_or_default();
    assert_eq!(hits.len(), 1, "{found:?}");
    let first = hits[0]["run_id"].as_str().unwrap_or_default().to_owned();
    assert!(ids.contains(&first), "{first}");
    assert_eq!(
        audited()?,
        std::slice::from_ref(&first),
        "the shown run, once"
    );

    let packed = bob.post(
        "/api/context",
        &json!({"task": "octopus", "budget_tokens": 100}),
    )?;
    assert_eq!(packed.status, 200, "{packed:?}");
    let mut shown: Vec<String> = packed.body["passages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["run_id"].as_str().map(str::to_owned))
        .collect();
    assert!(
        !shown.is_empty() && shown.len() < 3,
        "a pack of 100 tokens holds one or two passages: {packed:?}"
    );
    shown.sort();
    shown.dedup();
    let mut after = audited()?;
    after.remove(after.iter().rposition(|id| *id == first).unwrap_or(0));
    after.sort();
    assert_eq!(after, shown, "the packed runs, and only them");

    // Alice reading her own runs is never audited.
    alice.post(
        "/api/search",
        &json!({"query": "octopus", "mode": "keyword"}),
    )?;
    assert_eq!(audited()?.len(), 1 + shown.len());
    Ok(())
}

/// An existing member is made an admin, and back, while central serves:
/// `user add --admin` on them says so instead of "already exists" alone.
#[test]
fn an_existing_member_is_made_an_admin_and_back() -> Result<()> {
    let central = Central::start()?;
    let bob = central.client(&central.register("bob.test", "desk")?);
    let data = &central.data_dir;
    assert_eq!(bob.get("/metrics")?.status, 403, "a member");
    assert!(bob.get("/api/status")?.body["family"].is_null());

    let out = run_central(data, &["user", "add", "--handle", "bob.test", "--admin"])?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(
        said.contains("already exists") && said.contains("user admin bob.test"),
        "{said}"
    );

    let out = run_central(data, &["user", "admin", "bob.test"])?;
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("bob.test is now an admin"),
        "{said}"
    );
    assert_eq!(bob.get("/metrics")?.status, 200, "an admin at once");
    assert!(bob.get("/api/status")?.body["family"].is_object());
    let listed = run_central(data, &["user", "list"])?;
    assert!(String::from_utf8_lossy(&listed.stdout).contains(" admin"));

    let out = run_central(data, &["user", "admin", "bob.test", "--off"])?;
    assert!(String::from_utf8_lossy(&out.stdout).contains("bob.test is no longer an admin"));
    assert_eq!(bob.get("/metrics")?.status, 403, "a member again");
    let out = run_central(data, &["user", "admin", "nobody.test"])?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("no member nobody.test"),
        "{said}"
    );
    Ok(())
}

/// SIGTERM ends central quietly: the indexer finishes its batch before the
/// runtime it waits on goes (it printed a panic on every shutdown).
#[test]
fn sigterm_ends_central_without_a_panic() -> Result<()> {
    let data = tempfile::tempdir()?;
    let mut cmd = kith_tests::central_command();
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(data.path())
        .env_remove("KITH_DATA_DIR");
    let mut central = kith_tests::Background::spawn(cmd)?;
    central.next("listening")?;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &central.pid().to_string()])
        .status()?;
    assert!(term.success());
    let mut said = Vec::new();
    while let Ok(line) = central.said.recv_timeout(Duration::from_secs(30)) {
        said.push(line);
    }
    // Its stderr closes as it exits; the exit itself follows.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while central.running()? && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(!central.running()?, "central ended: {said:#?}");
    assert!(!said.iter().any(|l| l.contains("panicked")), "{said:#?}");
    Ok(())
}

/// The audit cannot be buried: it pages through every reading, oldest
/// included, and filters by reader and by conversation; one reading of a
/// conversation (its page, its turns, its bytes) is one entry.
#[test]
fn the_audit_pages_through_every_reading_and_filters_by_reader_and_conversation() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let carol = central.client(&central.register("carol.test", "tablet")?);
    let first = family_run(&alice, "a", "the first plan")?;
    let second = family_run(&alice, "b", "the second plan")?;
    share_family(&alice, "bob.test")?;
    share_family(&alice, "carol.test")?;
    let conversation = |run: &str| -> Result<String> {
        let c = alice.get(&format!("/api/runs/{run}"))?.body["conversation"].clone();
        Ok(c.as_str().unwrap_or_default().to_owned())
    };
    let (one, two) = (conversation(&first)?, conversation(&second)?);
    assert!(!one.is_empty() && !two.is_empty() && one != two);
    // Carol reads the first conversation once, before bob buries it.
    for path in ["", "/turns", "/jsonl"] {
        assert_eq!(
            carol
                .get(&format!("/api/conversations/{one}{path}"))?
                .status,
            200
        );
    }
    for round in 0..6 {
        let c = if round % 2 == 0 { &one } else { &two };
        // Bob's readings, apart from one another (reader, conversation).
        assert_eq!(bob.get(&format!("/api/conversations/{c}"))?.status, 200);
        assert_eq!(bob.get(&format!("/api/runs/{first}"))?.status, 200);
    }
    let entries = |query: &str| -> Result<(Vec<Value>, Option<String>)> {
        let r = alice.get(&format!("/api/audit{query}"))?;
        assert_eq!(r.status, 200, "{query}: {r:?}");
        let next = r.body["next_cursor"].as_str().map(str::to_owned);
        Ok((
            r.body["entries"].as_array().cloned().unwrap_or_default(),
            next,
        ))
    };
    let (all, next) = entries("")?;
    assert!(next.is_none(), "one page holds them");
    let carols: Vec<&Value> = all.iter().filter(|e| e["reader"] == "carol.test").collect();
    assert_eq!(carols.len(), 1, "one reading, one entry: {carols:#?}");
    assert_eq!(carols[0]["requests"], 3);
    assert_eq!(carols[0]["conversation_id"], one.as_str());

    // Pages of two requests: every reading, carol's oldest included.
    let (mut paged, mut cursor) = (Vec::new(), Some(String::new()));
    while let Some(c) = cursor {
        let query = if c.is_empty() {
            "?limit=2".to_owned()
        } else {
            format!("?limit=2&cursor={c}")
        };
        let (page, next) = entries(&query)?;
        assert!(!page.is_empty() && page.len() <= 2, "{page:#?}");
        paged.extend(page);
        cursor = next;
    }
    assert!(
        paged.iter().any(|e| e["reader"] == "carol.test"),
        "{paged:#?}"
    );
    let requests = |list: &[Value]| {
        list.iter()
            .map(|e| e["requests"].as_u64().unwrap_or(0))
            .sum::<u64>()
    };
    assert_eq!(requests(&paged), requests(&all));

    let (carol_only, _) = entries("?reader=carol.test")?;
    assert_eq!(carol_only.len(), 1);
    let (of_two, _) = entries(&format!("?conversation={}", &two[..10]))?;
    assert!(!of_two.is_empty());
    assert!(of_two
        .iter()
        .all(|e| e["conversation_id"] == two.as_str() && e["reader"] == "bob.test"));
    let zero = alice.get("/api/audit?limit=0")?;
    assert_eq!((zero.status, zero.code()), (400, "invalid_limit"));
    let bad = alice.get("/api/audit?cursor=later")?;
    assert_eq!((bad.status, bad.code()), (400, "invalid_cursor"));
    Ok(())
}

/// Regression: when the search index's disk filled, its writer died, each
/// run accepted afterwards failed its indexing five times and was dropped
/// (status said nothing pending), and none became searchable after space
/// returned, until a manual reindex. The index here sits on a 4 MiB tmpfs
/// in a private mount namespace: filled, a delta is still accepted and
/// waits, `/api/status` says indexing fails; freed, central recovers by
/// itself and the delta is found.
#[test]
fn a_full_index_disk_heals_and_every_accepted_delta_becomes_searchable() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data)?;
    let index = data.join("index");
    let token = kith_tests::register_local(&data, "fill.local", "laptop")?;
    let central = Central::start_with_index_on_tmpfs(&data, 4, &[])?;
    let inside = |script: &str| central.inside(script);
    let api = central.client(&token);
    let post = |source: &str, text: &str| {
        api.ingest(&delta(
            source,
            0,
            &claude_user_line(text, "2026-05-11T10:00:00Z"),
        ))
    };
    let found = |word: &str| -> Result<bool> { Ok(!api.keyword(word)?.is_empty()) };
    let before = post("fill-a", "the alphafill note before the disk filled")?;
    api.wait_indexed(&before, Duration::from_secs(60))?;
    ensure!(found("alphafill")?);

    let filler = index.join("filler");
    inside(&format!(
        "cat /dev/zero > '{}' 2>/dev/null; true",
        filler.display()
    ))?;
    let during = post("fill-b", "the bravofill note while the disk is full")?;
    // Accepted, waiting, and said so.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let status = loop {
        let status = api.get("/api/status")?;
        if status.body["indexing_failing_since"].is_string() || std::time::Instant::now() > deadline
        {
            break status;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    ensure!(
        status.body["indexing_failing_since"].is_string(),
        "status names the failure: {status:?}"
    );
    ensure!(
        !found("bravofill")?,
        "not searchable while the index cannot be written"
    );

    inside(&format!("rm -f '{}'", filler.display()))?;
    // The worker retries at most 30 s apart: the run is indexed by itself.
    api.wait_indexed(&during, Duration::from_secs(90))?;
    ensure!(found("bravofill")? && found("alphafill")?);
    let status = api.get("/api/status")?;
    ensure!(
        status.body["indexing_failing_since"].is_null(),
        "recovered: {status:?}"
    );
    // Accepted after it healed: indexed as usual.
    let after = post("fill-c", "the charliefill note after")?;
    api.wait_indexed(&after, Duration::from_secs(60))?;
    ensure!(found("charliefill")?);
    Ok(())
}

/// Regression: sign-ins, which take no credentials, had no budget of their
/// own: enough slow ones held every connection and central stopped
/// answering its members. 128 sign-ins trickling in (from four addresses,
/// within each one's connection cap) fill their budget: the next sign-in
/// page is answered 503 with kith's error body at once, while a member's
/// search answers as usual.
#[test]
fn slow_sign_ins_cannot_starve_a_members_search() -> Result<()> {
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    let addr: std::net::SocketAddr = central.url.trim_start_matches("http://").parse()?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let head = format!(
        "POST /signin HTTP/1.1\r\nHost: {addr}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\n\
         Content-Length: 15000\r\n\r\nhandle="
    );
    let slow = runtime.block_on(async {
        use tokio::io::AsyncWriteExt;
        let mut out = Vec::new();
        for i in 0..128u8 {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(std::net::SocketAddr::from(([127, 0, 0, 2 + i % 4], 0)))?;
            let mut tcp = socket.connect(addr).await?;
            tcp.write_all(head.as_bytes()).await?;
            out.push(tcp);
        }
        anyhow::Ok(out)
    })?;
    // Their handlers have the requests (they wait on the rest of the body).
    std::thread::sleep(Duration::from_secs(1));
    let http = reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let page = Api::send_raw(http.get(format!("{}/signin", central.url)))?;
    assert_eq!((page.status, page.code()), (503, "busy"), "{page:?}");
    let search = alice.post(
        "/api/search",
        &json!({"query": "anything", "mode": "keyword"}),
    )?;
    assert_eq!(search.status, 200, "{search:?}");
    let health = http.get(format!("{}/healthz", central.url)).send()?;
    assert!(health.status().is_success());
    drop(slow);
    // The budget is given back: the page answers once they are gone.
    let deadline = std::time::Instant::now() + Duration::from_secs(15);
    loop {
        let page = http.get(format!("{}/signin", central.url)).send()?;
        if page.status().is_success() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{}", page.status());
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(())
}
