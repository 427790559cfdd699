//! One member's backlog and another's new turns: members take turns for
//! the indexer and the embedder, and a delta too long to search whole is
//! capped, the cut recorded and counted, its bytes all kept.

use std::time::{Duration, Instant};

use anyhow::{ensure, Context, Result};
use kith_tests::{claude_user_line, delta, hit_run_ids, Api, Central, Machine};
use serde_json::json;

/// `MAX_CHUNKS_PER_RUN` in central's `indexer::cap`.
const MAX_CHUNKS_PER_RUN: usize = 8_000;

/// A Claude Code transcript of `n` user turns, each one chunk of its own
/// (300 to 1,200 characters: neither packed with the next nor windowed),
/// timestamped from now on: a transcript being written.
fn transcript(n: usize, turn: impl Fn(usize) -> String) -> String {
    let start = time::OffsetDateTime::now_utc();
    (0..n)
        .map(|i| {
            let at = start + time::Duration::milliseconds(i as i64);
            claude_user_line(&turn(i), &kith_shared::timestamp::render(at))
        })
        .collect()
}

/// A turn of about 900 characters about the importer's retries, told
/// differently each time (`i` in its words), so the model embeds each.
fn retry_turn(i: usize) -> String {
    format!(
        "Step {i}: the importer retries after a 429 with exponential backoff, \
         and batch {i} waits {} seconds before its next attempt. ",
        i % 60
    )
    .repeat(7)
}

fn run_body(api: &Api, id: &str) -> Result<serde_json::Value> {
    let r = api.get(&format!("/api/runs/{id}"))?;
    ensure!(r.status == 200, "GET run {id}: {r:?}");
    Ok(r.body)
}

/// Issue #45: one member's run of thousands of chunks was embedded whole
/// before any other member's new turn. Bob's one turn, captured while
/// Alice's long run is being embedded, is searchable by its meaning long
/// before Alice's run has all its vectors.
#[test]
fn another_members_new_turn_is_embedded_while_a_long_run_still_is() -> Result<()> {
    let models =
        kith_tests::model_dir()?.context("needs the embedding model (tests/run.sh installs it)")?;
    let central = Central::start_with(&[("KITH_MODEL_DIR", &models)])?;
    let root = central.client(&central.register_admin("root.test", "server")?);
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    // 2,000 chunks: a minute or more of the model, past the wait below.
    let long = alice.ingest(&delta("a", 0, &transcript(2_000, retry_turn)))?;
    alice.wait_indexed(&long, Duration::from_secs(60))?;
    // The model is into Alice's run.
    wait_for_embedded_texts(&root, 1)?;
    let text = "We went camping by the lake with the kids last summer";
    let turn = bob.ingest(&delta("b", 0, &transcript(1, |_| text.to_owned())))?;
    bob.wait_embedded(&turn, Duration::from_secs(30))?;
    assert!(
        run_body(&alice, &long)?["embedded_at"].is_null(),
        "alice's run was embedded whole first"
    );
    let found = bob.post(
        "/api/search",
        &json!({"query": "a tent trip near the water with children", "mode": "semantic"}),
    )?;
    assert_eq!(found.status, 200, "{found:?}");
    assert_eq!(hit_run_ids(&found.body), vec![turn], "{found:?}");
    // Alice's run goes on being embedded after Bob's turn.
    let after_bob = embedded_texts(&root)?;
    wait_for_embedded_texts(&root, after_bob + 1)?;
    assert!(run_body(&alice, &long)?["embedded_at"].is_null());
    Ok(())
}

/// Chunks embedded on the realtime lane since central started (`/metrics`).
fn embedded_texts(admin: &Api) -> Result<u64> {
    let r = admin.get("/metrics")?;
    ensure!(r.status == 200, "{r:?}");
    let text = r.body.as_str().unwrap_or_default();
    let line = text
        .lines()
        .find(|l| l.starts_with("kith_embedded_texts_total{lane=\"ingest-realtime\"}"))
        .with_context(|| format!("no realtime count in {text}"))?;
    Ok(line.rsplit(' ').next().unwrap_or_default().parse()?)
}

/// Waits until at least `n` texts were embedded on the realtime lane.
fn wait_for_embedded_texts(admin: &Api, n: u64) -> Result<()> {
    let started = Instant::now();
    while embedded_texts(admin)? < n {
        ensure!(
            started.elapsed() < Duration::from_secs(60),
            "fewer than {n} texts embedded in a minute"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(())
}

/// A delta past the cap: its first `MAX_CHUNKS_PER_RUN` chunks are
/// searchable, the rest are not, the cut is counted in the owner's and the
/// admin's status (and logged without the text), and the run's bytes are
/// all kept.
#[test]
fn a_delta_too_long_to_search_whole_is_capped_and_its_cut_counted() -> Result<()> {
    let mut central = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
    let (root_token, alice_token) = (
        central.register_admin("root.test", "server")?,
        central.register("alice.test", "laptop")?,
    );
    let bob_token = central.register("bob.test", "desktop")?;
    let (root, alice) = (central.client(&root_token), central.client(&alice_token));
    let turn = |i: usize| format!("turn{i:05} {}", "of a very long pasted log ".repeat(12));
    let jsonl = transcript(MAX_CHUNKS_PER_RUN + 10, turn);
    let id = alice.ingest(&delta("a", 0, &jsonl))?;
    let run = alice.wait_indexed(&id, Duration::from_secs(120))?;
    let counts = alice.get("/api/status")?.body["counts"].clone();
    assert_eq!(counts["chunks"], MAX_CHUNKS_PER_RUN, "{counts}");
    assert_eq!(counts["runs_capped"], 1, "{counts}");
    assert_eq!(counts["chunks_cut"], 10, "{counts}");
    let family = root.get("/api/status")?.body["family"].clone();
    assert_eq!(family["runs_capped"], 1, "{family}");
    assert_eq!(family["chunks_cut"], 10, "{family}");
    let own = root.get("/api/status")?.body["counts"].clone();
    assert_eq!(own["runs_capped"], 0, "the admin's own runs: {own}");
    // The first turns are searchable, the last ten are not.
    assert_eq!(alice.keyword("turn00000")?, vec![id.clone()], "{run}");
    assert_eq!(
        alice.keyword(&format!("turn{:05}", MAX_CHUNKS_PER_RUN - 1))?,
        vec![id.clone()]
    );
    for i in MAX_CHUNKS_PER_RUN..MAX_CHUNKS_PER_RUN + 10 {
        assert_eq!(alice.keyword(&format!("turn{i:05}"))?, Vec::<String>::new());
    }
    // Every byte is kept.
    let (status, bytes) = alice.get_bytes(&format!("/api/runs/{id}/jsonl"))?;
    assert_eq!((status, bytes == jsonl.as_bytes()), (200, true));
    // `kith show` prints every turn, the cut ones too.
    let shown = Machine::new(&central, &alice_token)?.text(&["show", &id])?;
    let last = format!("turn{:05}", MAX_CHUNKS_PER_RUN + 9);
    assert!(shown.contains("turn00000") && shown.contains(&last));
    // `kith status` tells the owner and the admin, not another member.
    let said = "1 delta(s) too long to search whole: 10 chunks left out of search";
    for token in [&alice_token, &root_token] {
        let machine = Machine::new(&central, token)?;
        let line = machine.text(&["status"])?;
        assert!(line.contains(said), "{line}");
        let json = machine.json(&["status", "--json"])?;
        assert_eq!(json["central"]["runs_capped"], 1, "{json}");
        assert_eq!(json["central"]["chunks_cut"], 10, "{json}");
    }
    let line = Machine::new(&central, &bob_token)?.text(&["status"])?;
    assert!(!line.contains("too long"), "{line}");
    central.kill()?;
    let log: Vec<String> = central.log.iter().collect();
    let warned: Vec<&String> = log
        .iter()
        .filter(|l| l.contains("run too long to index whole"))
        .collect();
    assert_eq!(warned.len(), 1, "{log:#?}");
    assert!(warned[0].contains("n_cut=10"), "{}", warned[0]);
    assert!(warned[0].contains(&id), "{}", warned[0]);
    assert!(
        !log.iter()
            .any(|l| l.contains("turn0") || l.contains("pasted log")),
        "the log holds the transcript's text"
    );
    Ok(())
}
