//! Sharing as a family member means it, through the real central over HTTP:
//! a grant covers a conversation as it was when given (later turns stay
//! private unless it follows), a grantee sees the owner and never the other
//! grantees or the unshared runs above a shared one, and refusals say why.

use std::time::Duration;

use anyhow::Result;
use kith_tests::{claude_user_line, delta, Api, Central};
use serde_json::{json, Value};

/// Alice's session: two deltas of one transcript, as two hook turns ship it.
struct Session {
    first: String,
    second: String,
    source: &'static str,
    end: u64,
}

fn post(api: &Api, source: &str, from: u64, jsonl: &str, parent: Option<&str>) -> Result<String> {
    let mut body = delta(source, from, jsonl);
    if let Some(p) = parent {
        body["parent_run_id"] = json!(p);
    }
    api.ingest(&body)
}

fn session(alice: &Api) -> Result<Session> {
    let source = "alice-session";
    let one = claude_user_line("plan the walrus migration", "2026-05-01T10:00:00Z");
    let two = claude_user_line("walrus schema agreed", "2026-05-01T10:01:00Z");
    let first = post(alice, source, 0, &one, None)?;
    let second = post(alice, source, one.len() as u64, &two, None)?;
    alice.wait_indexed(&second, Duration::from_secs(30))?;
    Ok(Session {
        first,
        second,
        source,
        end: (one.len() + two.len()) as u64,
    })
}

fn turn_texts(api: &Api, id: &str) -> Result<Vec<String>> {
    let res = api.get(&format!("/api/conversations/{id}/turns"))?;
    Ok(res.body["turns"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["text"].as_str().map(str::to_owned))
        .collect())
}

fn share(alice: &Api, body: Value) -> Result<Value> {
    let res = alice.post("/api/shares", &body)?;
    anyhow::ensure!(res.status == 201, "share: {:?}", res.body);
    Ok(res.body)
}

/// Before, a shared run shared every later turn: a private note typed after
/// sharing was searchable by the grantee seconds later.
#[test]
fn a_conversation_is_shared_as_it_is_now_unless_the_grant_follows() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let carol = central.client(&central.register("carol.test", "tablet")?);
    let s = session(&alice)?;
    let conversation = alice.get(&format!("/api/conversations/{}", s.first))?.body["conversation"]
        ["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();

    let grant = share(
        &alice,
        json!({"scope": format!("conversation:{}", &conversation[..10]), "with": "bob.test"}),
    )?;
    assert_eq!(grant["follow"], false);
    assert_eq!(grant["state"], "active");
    // A clock that must pass: capture and grant times are kept to the
    // millisecond, and the note is captured after the grant.
    std::thread::sleep(Duration::from_millis(5));
    let note = claude_user_line("private walrus note for me only", "2026-05-01T10:02:00Z");
    let later = post(&alice, s.source, s.end, &note, None)?;
    alice.wait_indexed(&later, Duration::from_secs(30))?;

    let bobs = bob.keyword("walrus")?;
    assert!(
        bobs.contains(&s.first) && bobs.contains(&s.second),
        "{bobs:?}"
    );
    assert!(
        !bobs.contains(&later),
        "a later turn is not shared: {bobs:?}"
    );
    assert!(bob.keyword("private")?.is_empty());
    let texts = turn_texts(&bob, &conversation)?;
    assert!(
        texts.iter().any(|t| t.contains("walrus schema agreed")),
        "{texts:?}"
    );
    assert!(
        !texts.iter().any(|t| t.contains("private walrus note")),
        "{texts:?}"
    );
    assert_eq!(bob.get(&format!("/api/runs/{later}"))?.status, 404);
    // A search narrowed to the conversation, by the id hits carry.
    let within = |api: &Api, id: &str| -> Result<Vec<String>> {
        let res = api.post(
            "/api/search",
            &json!({"query": "walrus", "mode": "keyword", "filters": {"conversation_id": id}}),
        )?;
        Ok(res.body["hits"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|h| h["run_id"].as_str().map(str::to_owned))
            .collect())
    };
    let mut narrowed = within(&bob, &conversation)?;
    narrowed.sort();
    let mut want = vec![s.first.clone(), s.second.clone()];
    want.sort();
    assert_eq!(narrowed, want);
    assert!(within(&bob, &format!("c{}", "0".repeat(32)))?.is_empty());
    let (status, bytes) = bob.get_bytes(&format!("/api/conversations/{conversation}/jsonl"))?;
    assert_eq!(status, 200);
    assert!(!String::from_utf8_lossy(&bytes).contains("private walrus note"));

    // A grant that follows covers what comes after it; carol gets one.
    let grant = share(
        &alice,
        json!({"scope": format!("conversation:{conversation}"), "with": "carol.test", "follow": true}),
    )?;
    assert_eq!(grant["follow"], true);
    assert!(carol.keyword("private")?.contains(&later));
    assert!(
        !bob.keyword("private")?.contains(&later),
        "bob's grant is unchanged"
    );
    Ok(())
}

#[test]
fn a_grantee_sees_the_owner_but_not_the_other_grantees_or_unshared_runs_above() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    central.register("carol.test", "tablet")?;
    let s = session(&alice)?;
    let sub = claude_user_line("subagent reads the walrus docs", "2026-05-01T10:05:00Z");
    let child = post(&alice, "alice-subagent", 0, &sub, Some(&s.second))?;
    alice.wait_indexed(&child, Duration::from_secs(30))?;
    for who in ["bob.test", "carol.test"] {
        share(
            &alice,
            json!({"scope": format!("run:{child}"), "with": who}),
        )?;
    }

    let owner_view = alice.get(&format!("/api/runs/{child}"))?.body;
    assert_eq!(owner_view["readable_by"].as_array().map(Vec::len), Some(3));
    assert_eq!(owner_view["parent_run_id"], s.second.as_str());

    let seen = bob.get(&format!("/api/runs/{child}"))?;
    assert_eq!(seen.status, 200);
    let readers: Vec<&str> = seen.body["readable_by"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(readers.len(), 2, "the owner and bob: {readers:?}");
    assert!(readers.contains(&owner_view["user_id"].as_str().unwrap_or("?")));
    let text = seen.body.to_string();
    assert!(
        !text.contains(&s.first) && !text.contains(&s.second),
        "{text}"
    );
    assert_eq!(seen.body["root_run_id"], child.as_str());
    assert_eq!(seen.body["parent_run_id"], Value::Null);

    let forest = bob.get("/api/runs/forest")?.body.to_string();
    assert!(
        forest.contains(&child) && !forest.contains(&s.first),
        "{forest}"
    );
    let tree = bob
        .get(&format!("/api/runs/{child}/descendants"))?
        .body
        .to_string();
    assert!(
        !tree.contains(&s.first) && !tree.contains(&s.second),
        "{tree}"
    );
    let listed = bob.get("/api/conversations")?.body;
    assert!(!listed.to_string().contains(&s.first), "{listed}");
    assert_eq!(listed["conversations"][0]["owner"], "alice.test");
    let hits = bob.post(
        "/api/search",
        &json!({"query": "walrus", "mode": "keyword", "group": "conversation"}),
    )?;
    assert_eq!(hits.body["groups"][0]["owner"], "alice.test");
    assert_eq!(hits.body["hits"][0]["owner"], "alice.test");
    Ok(())
}

#[test]
fn refusals_say_why() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    central.register("bob.test", "desktop")?;
    let s = session(&alice)?;
    let past = alice.post(
        "/api/shares",
        &json!({"scope": format!("run:{}", s.first), "with": "bob.test", "expires_at": "2020-01-01T00:00:00Z"}),
    )?;
    assert_eq!((past.status, past.code()), (400, "invalid_expiry"));
    let no_tag = alice.post(
        "/api/shares",
        &json!({"scope": "tag:nothing-has-it", "with": "bob.test"}),
    )?;
    assert_eq!((no_tag.status, no_tag.code()), (400, "unknown_tag"));
    let grant = share(
        &alice,
        json!({"scope": format!("run:{}", s.first), "with": "bob.test", "expires_at": "2099-01-01T00:00:00Z"}),
    )?;
    let id = grant["id"].as_str().unwrap_or_default();
    let revoke = |api: &Api| api.send(api_delete(api, &format!("/api/shares/{id}")));
    assert_eq!(revoke(&alice)?.status, 204);
    let again = revoke(&alice)?;
    assert_eq!((again.status, again.code()), (409, "already_revoked"));
    let listed = alice.get("/api/shares")?.body;
    assert_eq!(listed["given"][0]["state"], "revoked");
    Ok(())
}

fn api_delete(api: &Api, path: &str) -> reqwest::blocking::RequestBuilder {
    reqwest::blocking::Client::new().delete(api.url(path))
}
