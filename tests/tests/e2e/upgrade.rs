//! A data directory an earlier kith-central wrote keeps working: its
//! version-1 run records and registry rows read, search, tree, sharing and
//! a `reindex` answer as they did, and a record rewritten is written at the
//! current version (`tests/fixtures/central-data-v1.tar.gz`, described in
//! the fixtures' README).

use std::path::Path;

use anyhow::{ensure, Context, Result};
use kith_shared::fixtures;
use kith_tests::{register_local, run_central, Api, Central};
use serde_json::{json, Value};

/// The conversation alice shared with bob when the archive was made.
const SHARED: &str = "c725eab9e39b9c01f6fe9d682ece4bdbd";

/// What the two members read of the archive.
#[derive(Debug, PartialEq)]
struct Seen {
    /// Alice's conversations, id and title, most recent first.
    alice: Vec<(String, String)>,
    /// Bob's: what alice shared.
    bob: Vec<String>,
    /// The text of the shared conversation's turns, as bob reads it.
    bob_reads: Vec<String>,
    /// Alice's keyword hits for a word of her Codex session.
    hits: Vec<String>,
}

fn seen(alice: &Api, bob: &Api) -> Result<Seen> {
    let list = |api: &Api| -> Result<Value> {
        let reply = api.get("/api/conversations?limit=100")?;
        ensure!(reply.status == 200, "{reply:?}");
        Ok(reply.body)
    };
    let a = list(alice)?;
    let b = list(bob)?;
    let turns = bob.get(&format!("/api/conversations/{SHARED}/turns"))?;
    ensure!(turns.status == 200, "{turns:?}");
    let search = alice.post(
        "/api/search",
        &json!({"query": "export", "mode": "keyword", "limit": 50}),
    )?;
    ensure!(search.status == 200, "{search:?}");
    let strings = |v: &Value, key: &str| -> Vec<String> {
        v.as_array()
            .into_iter()
            .flatten()
            .map(|x| x[key].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    let mut hits = strings(&search.body["hits"], "run_id");
    hits.sort();
    Ok(Seen {
        alice: a["conversations"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|c| {
                (
                    c["id"].as_str().unwrap_or_default().to_owned(),
                    c["title"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
        bob: strings(&b["conversations"], "id"),
        bob_reads: strings(&turns.body["turns"], "text"),
        hits,
    })
}

fn unpack(into: &Path) -> Result<std::path::PathBuf> {
    let archive = fixtures::repo_dir().join("central-data-v1.tar.gz");
    let out = std::process::Command::new("tar")
        .arg("xzf")
        .arg(&archive)
        .arg("-C")
        .arg(into)
        .output()
        .context("tar")?;
    ensure!(
        out.status.success(),
        "tar: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(into.join("data"))
}

#[test]
fn a_data_directory_from_before_versioned_records_reads_and_reindexes_the_same() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = unpack(tmp.path())?;
    let alice_token = register_local(&data, "alice.local", "upgrade")?;
    let bob_token = register_local(&data, "bob.local", "upgrade")?;
    let mut central = Central::start_on(&data, &[])?;
    let (alice, bob) = (central.client(&alice_token), central.client(&bob_token));

    let before = seen(&alice, &bob)?;
    // Alice's backfill: three Claude Code sessions and two Codex ones (two
    // subagents hang under a session, listed with it).
    assert!(before.alice.len() >= 5, "{:?}", before.alice);
    assert!(before.alice.iter().any(|(id, _)| id == SHARED));
    assert!(
        before.alice.iter().all(|(_, title)| !title.is_empty()),
        "every conversation keeps its title: {:?}",
        before.alice
    );
    // Bob reads what was shared with him, and nothing else of alice's.
    assert_eq!(before.bob, [SHARED]);
    assert!(
        before
            .bob_reads
            .iter()
            .any(|t| t.contains("add a --since DATE option")),
        "{:?}",
        before.bob_reads
    );
    assert!(!before.hits.is_empty(), "the old index still answers");

    // Rebuilt from the blobs, the archive answers the same.
    central.kill()?;
    let out = run_central(&data, &["reindex"])?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    central.restart()?;
    let after = seen(&alice, &bob)?;
    assert_eq!(after, before);

    // A tag edit rewrites the conversation's records at the current
    // version; the records it did not touch stay as they were written.
    let other = before
        .alice
        .iter()
        .map(|(id, _)| id)
        .find(|id| *id != SHARED)
        .context("a second conversation")?;
    let tagged = alice.post(
        &format!("/api/conversations/{other}/tags"),
        &json!({"add": ["kept"]}),
    )?;
    ensure!(tagged.status == 200, "{tagged:?}");
    let mut versions = std::collections::BTreeMap::new();
    for entry in walk(&data.join("runs"))? {
        if entry.to_string_lossy().ends_with(".metadata.json") {
            let record: Value = serde_json::from_slice(&std::fs::read(&entry)?)?;
            let version = record["version"].as_u64().unwrap_or(1);
            *versions.entry(version).or_insert(0) += 1;
            if version == 2 {
                assert!(record["tags"]
                    .as_array()
                    .is_some_and(|t| t.contains(&json!("kept"))));
                for gone in ["readable_by", "indexed_at", "_links"] {
                    assert!(record.get(gone).is_none(), "{gone} in {record}");
                }
            }
        }
    }
    assert!(versions.get(&2).is_some_and(|n| *n >= 1), "{versions:?}");
    assert!(versions.get(&1).is_some_and(|n| *n >= 1), "{versions:?}");
    // And bob still reads only the shared conversation.
    assert_eq!(seen(&alice, &bob)?.bob, [SHARED]);
    Ok(())
}

fn walk(dir: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    Ok(out)
}
