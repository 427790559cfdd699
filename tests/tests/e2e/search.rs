//! Search end to end: keyword at once, semantic once embedded, hybrid, and
//! what bad queries and a missing embedder get.

use std::time::Duration;

use anyhow::{ensure, Context, Result};
use kith_tests::{
    claude_user_line, delta, hit_run_ids, json_response, model_dir, one_indexed_run, run_central,
    Central, StandIn,
};
use serde_json::json;

fn post_run(api: &kith_tests::Api, source: &str, text: &str) -> Result<String> {
    post_run_at(api, source, text, "2026-05-11T08:00:00Z")
}

fn post_run_at(api: &kith_tests::Api, source: &str, text: &str, ts: &str) -> Result<String> {
    api.ingest(&delta(source, 0, &claude_user_line(text, ts)))
}

/// The runs of `api`'s keyword search for `query` within `filters`, in
/// rank order.
fn keyword_runs(
    api: &kith_tests::Api,
    query: &str,
    filters: serde_json::Value,
) -> Result<Vec<String>> {
    let r = api.post(
        "/api/search",
        &json!({"query": query, "mode": "keyword", "filters": filters}),
    )?;
    assert_eq!(r.status, 200, "{query}: {r:?}");
    Ok(hit_run_ids(&r.body))
}

#[test]
fn semantic_and_hybrid_find_meaning_not_just_words() -> Result<()> {
    if model_dir()?.is_none() {
        return Ok(());
    }
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desktop")?);
    let ci = post_run(
        &alice,
        "a",
        "The CI pipeline is red again: the build breaks on the linker step",
    )?;
    let pasta = post_run(
        &alice,
        "b",
        "My favourite pasta recipe needs fresh basil and garlic",
    )?;
    let bobs = post_run(
        &bob,
        "c",
        "The continuous integration build broke, the compiler crashed",
    )?;
    for id in [&ci, &pasta] {
        alice.wait_embedded(id, Duration::from_secs(60))?;
    }
    bob.wait_embedded(&bobs, Duration::from_secs(60))?;

    // No word in common with the CI run, but the same meaning.
    let q = "how do I fix the failing compilation";
    let sem = alice.post("/api/search", &json!({"query": q, "mode": "semantic"}))?;
    assert_eq!(sem.status, 200, "{sem:?}");
    assert_eq!(hit_run_ids(&sem.body).first(), Some(&ci), "{sem:?}");
    assert!(
        !hit_run_ids(&sem.body).contains(&bobs),
        "bob's run never appears for alice"
    );
    assert_eq!(sem.body["embedder"], "all-minilm-l6-v2-int8");
    assert!(sem.body["timing"]["embed_ms"].as_f64().unwrap_or(0.0) > 0.0);

    let hybrid = alice.post(
        "/api/search",
        &json!({"query": "pasta basil", "mode": "hybrid"}),
    )?;
    assert_eq!(
        hit_run_ids(&hybrid.body).first(),
        Some(&pasta),
        "{hybrid:?}"
    );
    assert!(hybrid.body["degraded"].is_null());
    assert!(!hit_run_ids(&hybrid.body).contains(&bobs));
    // The fused hits are highlighted after fusion: the matching words of the
    // top hit, the start of the text of a hit no word matched.
    let snippet = |i: usize| {
        hybrid.body["hits"][i]["snippet"]
            .as_str()
            .unwrap_or_default()
    };
    assert!(
        snippet(0).contains("«pasta»") && snippet(0).contains("«basil»"),
        "{hybrid:?}"
    );
    // alice has two runs: the semantic side brings the CI run in too.
    let i = hit_run_ids(&hybrid.body)
        .iter()
        .position(|r| *r == ci)
        .ok_or_else(|| anyhow::anyhow!("the CI run is missing: {hybrid:?}"))?;
    assert!(snippet(i).contains("The CI pipeline"), "{hybrid:?}");
    assert!(!snippet(i).contains('«'), "{hybrid:?}");
    Ok(())
}

#[test]
fn keyword_is_immediate_and_bad_queries_get_clear_errors() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let id = post_run(
        &alice,
        "a",
        "deploy the frobnicator to staging (with --force)",
    )?;
    alice.wait_indexed(&id, Duration::from_secs(10))?;
    let search = |body: serde_json::Value| alice.post("/api/search", &body);

    let ok = search(json!({"query": "frobnicator", "mode": "keyword"}))?;
    assert_eq!(hit_run_ids(&ok.body), vec![id.clone()]);
    for (what, body, status, code) in [
        ("empty", json!({"query": "   "}), 400, "empty_query"),
        (
            "100 KB",
            json!({"query": "x".repeat(100_000)}),
            400,
            "query_too_long",
        ),
        (
            "unknown runtime",
            json!({"query": "a", "filters": {"runtime": "emacs"}}),
            400,
            "invalid_json",
        ),
        (
            "bad since",
            json!({"query": "a", "filters": {"since": "last week"}}),
            400,
            "invalid_filter",
        ),
        (
            "unknown field",
            json!({"query": "a", "readable_by": ["u1"]}),
            400,
            "invalid_json",
        ),
    ] {
        let r = search(body)?;
        assert_eq!((r.status, r.code()), (status, code), "{what}: {r:?}");
    }
    // Query syntax is words, never an error, and never takes a word away
    // (tantivy's own syntax read `-frobnicator` as "without frobnicator").
    for q in [
        "frobnicator AND (",
        "\"unclosed frobnicator",
        "--frobnicator",
        "-frobnicator",
        "title:frobnicator",
        "frobnicator* NOT",
    ] {
        let r = search(json!({"query": q, "mode": "keyword"}))?;
        assert_eq!(r.status, 200, "{q}: {r:?}");
        assert_eq!(hit_run_ids(&r.body), vec![id.clone()], "{q}");
    }
    let r = search(json!({"query": "* ( :", "mode": "keyword"}))?;
    assert_eq!((r.status, hit_run_ids(&r.body).len()), (200, 0), "{r:?}");
    // Limits are 1..=100, larger ones clamped, 0 refused everywhere a page
    // is asked for: one run of 120 long turns holds 120 chunks that match.
    let turns: String = (0..120)
        .map(|i| {
            let text = format!("frobnicator step {i}: {}", "more words here ".repeat(15));
            claude_user_line(
                &text,
                &format!("2026-05-11T09:{:02}:{:02}Z", i / 60, i % 60),
            )
        })
        .collect();
    let many = alice.post("/api/runs", &delta("many", 0, &turns))?;
    assert_eq!(many.status, 202, "{many:?}");
    let many = many.body["run_id"].as_str().unwrap_or_default().to_owned();
    alice.wait_indexed(&many, Duration::from_secs(30))?;
    let zero = search(json!({"query": "frobnicator", "mode": "keyword", "limit": 0}))?;
    assert_eq!(
        (zero.status, zero.code()),
        (400, "invalid_limit"),
        "{zero:?}"
    );
    for path in ["/api/conversations?limit=0", "/api/runs/forest?limit=0"] {
        let r = alice.get(path)?;
        assert_eq!(
            (r.status, r.code()),
            (400, "invalid_limit"),
            "{path}: {r:?}"
        );
    }
    for (limit, n) in [(1, 1), (7, 7), (100, 100), (10_000, 100)] {
        let r = search(json!({"query": "frobnicator", "mode": "keyword", "limit": limit}))?;
        assert_eq!(
            (r.status, hit_run_ids(&r.body).len()),
            (200, n),
            "limit {limit}"
        );
    }
    // Filters with values nothing has match nothing.
    let none =
        search(json!({"query": "frobnicator", "mode": "keyword", "filters": {"machine": "nope"}}))?;
    assert_eq!(hit_run_ids(&none.body).len(), 0);
    let mine = search(
        json!({"query": "frobnicator", "mode": "keyword", "limit": 100, "filters": {"machine": "laptop", "runtime": "claude-code"}}),
    )?;
    assert_eq!(hit_run_ids(&mine.body).len(), 100);
    let codex = search(
        json!({"query": "frobnicator", "mode": "keyword", "filters": {"runtime": "codex"}}),
    )?;
    assert_eq!(hit_run_ids(&codex.body).len(), 0);
    Ok(())
}

#[test]
fn a_date_in_the_query_ranks_that_time_first() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let march = post_run_at(
        &alice,
        "march",
        "rolled back the payments deploy after the cache fell over",
        "2024-03-07T16:00:00Z",
    )?;
    let january = post_run_at(
        &alice,
        "january",
        "payments deploy failed, payments deploy rolled back, payments deploy again",
        "2025-01-15T09:00:00Z",
    )?;
    let lunch = post_run_at(
        &alice,
        "lunch",
        "lunch order for the team",
        "2024-03-07T12:00:00Z",
    )?;
    // Bob's run of the same day, private to him.
    let bob = central.client(&central.register("bob.test", "desk")?);
    let bobs = post_run_at(
        &bob,
        "bob",
        "payments deploy rolled back",
        "2024-03-07T10:00:00Z",
    )?;
    for id in [&march, &january, &lunch] {
        alice.wait_indexed(id, Duration::from_secs(10))?;
    }
    bob.wait_indexed(&bobs, Duration::from_secs(10))?;
    let ask = |query: &str, filters| keyword_runs(&alice, query, filters);
    // Without a date the stronger match leads; with one, that day's run
    // leads and the rest still follow. What merely happened that day and
    // does not match stays out, and so does bob's run of that day.
    let (m, j) = (march.clone(), january.clone());
    assert_eq!(ask("payments deploy", json!({}))?, [j.clone(), m.clone()]);
    for query in [
        "payments deploy on 7 March, 2024",
        "payments deploy March 2024",
        "payments deploy 2024-03-06",
    ] {
        assert_eq!(ask(query, json!({}))?, [m.clone(), j.clone()], "{query}");
    }
    // A month without a year: the runs started in it, any year, lead.
    assert_eq!(
        ask("payments deploy in March", json!({}))?,
        [m.clone(), j.clone()]
    );
    assert_eq!(
        ask("payments deploy in January", json!({}))?,
        [j.clone(), m.clone()]
    );
    // A time range the caller chose wins over a date in the words.
    assert_eq!(
        ask(
            "payments deploy on 7 March, 2024",
            json!({"since": "2025-01-01T00:00:00Z"})
        )?,
        [j]
    );
    // The other way: bob's dated search finds his run and none of alice's.
    let r = bob.post(
        "/api/search",
        &json!({"query": "payments deploy on 7 March, 2024", "mode": "keyword"}),
    )?;
    assert_eq!(hit_run_ids(&r.body), [bobs], "{r:?}");
    Ok(())
}

#[test]
fn a_time_relative_to_today_ranks_that_time_first() -> Result<()> {
    use kith_shared::timestamp::{now, parse, render};
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let today = parse(&now()).context("now")?;
    let days_ago = |n: u64| render(today - Duration::from_secs(n * 86_400));
    let recent = post_run_at(
        &alice,
        "recent",
        "rolled back the payments deploy",
        &days_ago(1),
    )?;
    let old = post_run_at(
        &alice,
        "old",
        "payments deploy failed, payments deploy rolled back, payments deploy again",
        &days_ago(40),
    )?;
    for id in [&recent, &old] {
        alice.wait_indexed(id, Duration::from_secs(10))?;
    }
    let ask = |query: &str| keyword_runs(&alice, query, json!({}));
    let (r, o) = (recent.clone(), old.clone());
    assert_eq!(ask("payments deploy")?, [o.clone(), r.clone()]);
    for query in [
        "payments deploy yesterday",
        "payments deploy in the last 7 days",
        "payments deploy this week or yesterday",
    ] {
        assert_eq!(ask(query)?, [r.clone(), o.clone()], "{query}");
    }
    Ok(())
}

#[test]
fn a_question_asking_when_ranks_the_hits_that_say_when_first() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let plain = post_run(&alice, "plain", "we moved the payments service to tokio")?;
    let dated = post_run(
        &alice,
        "dated",
        "we moved the payments service to tokio two weeks ago, after the old runtime kept stalling",
    )?;
    for id in [&plain, &dated] {
        alice.wait_indexed(id, Duration::from_secs(10))?;
    }
    let ask = |query: &str| keyword_runs(&alice, query, json!({}));
    // The shorter passage matches best, unless the question asks when:
    // then the passage that says when leads.
    let (p, d) = (plain.clone(), dated.clone());
    for query in [
        "payments service tokio",
        "Why did we move the payments service to tokio?",
    ] {
        assert_eq!(ask(query)?, [p.clone(), d.clone()], "{query}");
    }
    for query in [
        "When did we move the payments service to tokio?",
        "how long ago did we move the payments service to tokio",
    ] {
        assert_eq!(ask(query)?, [d.clone(), p.clone()], "{query}");
    }
    Ok(())
}

/// `words` words: "flamingo" once, then filler that no query asks for.
fn turn_of(words: usize) -> String {
    let filler = [
        "the", "keeper", "cleaned", "pond", "before", "feeding", "time",
    ];
    let rest = (1..words).map(|i| filler[i % filler.len()]);
    std::iter::once("flamingo")
        .chain(rest)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn grouped_conversations_rank_by_several_matches_not_one_stray_chunk() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    // One short chunk that names the flamingo once: the best single hit.
    let stray = post_run_at(&alice, "stray", &turn_of(45), "2026-03-07T09:00:00Z")?;
    // Three longer turns (each its own chunk) that all name it.
    let lines: String = (0..3)
        .map(|i| claude_user_line(&turn_of(55), &format!("2026-05-11T08:0{i}:00Z")))
        .collect();
    let r = alice.post("/api/runs", &delta("several", 0, &lines))?;
    assert_eq!(r.status, 202, "{r:?}");
    let several = r.body["run_id"].as_str().unwrap_or_default().to_owned();
    for id in [&stray, &several] {
        alice.wait_indexed(id, Duration::from_secs(10))?;
    }
    let search = |query: &str, group: &str| -> Result<serde_json::Value> {
        let r = alice.post(
            "/api/search",
            &json!({"query": query, "mode": "keyword", "group": group}),
        )?;
        assert_eq!(r.status, 200, "{query}: {r:?}");
        Ok(r.body)
    };
    // The stray chunk is the best hit on its own...
    let hits = hit_run_ids(&search("flamingo", "none")?);
    assert_eq!(hits.len(), 4, "{hits:?}");
    assert_eq!(hits[0], stray);
    // ...but grouped, the conversation that matches three times leads.
    let firsts = |body: &serde_json::Value| -> Vec<String> {
        body["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["hits"][0]["run_id"].as_str().map(str::to_owned))
            .collect()
    };
    let grouped = search("flamingo", "conversation")?;
    assert_eq!(firsts(&grouped), [several.clone(), stray.clone()]);
    // A date the query names still puts that day's conversation first.
    let dated = search("flamingo on 7 March, 2026", "conversation")?;
    assert_eq!(firsts(&dated), [stray, several]);
    Ok(())
}

#[test]
fn recency_and_diversity_rerank_only_when_asked() -> Result<()> {
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let paste = "the ingress pod is in CrashLoopBackOff after the payments deploy";
    let old = post_run_at(
        &alice,
        "old",
        &format!("{paste}. {paste}."),
        "2024-01-10T09:00:00Z",
    )?;
    let copy = post_run_at(&alice, "copy", paste, "2024-01-11T09:00:00Z")?;
    let now = kith_shared::timestamp::now();
    let other = post_run_at(
        &alice,
        "other",
        "payments deploy done; the node ran out of disk",
        &now,
    )?;
    // Bob's run says it all, today; it is his alone.
    let bob = central.client(&central.register("bob.test", "desk")?);
    let bobs = post_run_at(&bob, "bob", &format!("{paste}. {paste}. {paste}."), &now)?;
    for id in [&old, &copy, &other] {
        alice.wait_indexed(id, Duration::from_secs(10))?;
    }
    bob.wait_indexed(&bobs, Duration::from_secs(10))?;
    // Alice's keyword search, with `extra` fields in the request.
    let search = |extra: serde_json::Value| {
        let mut body = json!({"query": "payments deploy crashloopbackoff", "mode": "keyword"});
        for (k, v) in extra.as_object().into_iter().flatten() {
            body[k] = v.clone();
        }
        alice.post("/api/search", &body)
    };
    let ask = |extra: serde_json::Value| -> Result<Vec<String>> {
        let r = search(extra)?;
        assert_eq!(r.status, 200, "{r:?}");
        Ok(hit_run_ids(&r.body))
    };
    let (old, copy, other) = (old.as_str(), copy.as_str(), other.as_str());
    // By relevance alone, the two old pastes lead.
    assert_eq!(ask(json!({}))?, [old, copy, other]);
    // Recent first: the old runs are ~3 years (dozens of half-lives) old.
    assert_eq!(
        ask(json!({"recency_half_life_days": 30}))?,
        [other, old, copy]
    );
    // Diverse: the near copy of the first hit goes last, not away...
    assert_eq!(ask(json!({"diversity": 0.7}))?, [old, other, copy]);
    // ...and out of a shorter page.
    assert_eq!(ask(json!({"diversity": 0.7, "limit": 2}))?, [old, other]);
    for (extra, code) in [
        (json!({"diversity": 2}), "invalid_diversity"),
        (json!({"recency_half_life_days": 0}), "invalid_recency"),
        (json!({"recency_half_life_days": -7}), "invalid_recency"),
    ] {
        let r = search(extra)?;
        assert_eq!(
            (r.status, r.body["error"]["code"].as_str()),
            (400, Some(code)),
            "{r:?}"
        );
    }
    // Bob, re-ranking too, finds his own run and none of alice's.
    let r = bob.post(
        "/api/search",
        &json!({"query": "payments deploy crashloopbackoff", "mode": "keyword",
                "recency_half_life_days": 30, "diversity": 0.7}),
    )?;
    assert_eq!(hit_run_ids(&r.body), [bobs], "{r:?}");
    Ok(())
}

/// `kith_embedded_texts_total` per lane from `/metrics`: (realtime, bulk).
fn embedded_per_lane(api: &kith_tests::Api) -> Result<(u64, u64)> {
    let (_, metrics) = api.get_bytes("/metrics")?;
    let metrics = String::from_utf8(metrics)?;
    let count = |lane: &str| -> Result<u64> {
        let prefix = format!("kith_embedded_texts_total{{lane=\"{lane}\"}} ");
        let line = metrics
            .lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .ok_or_else(|| anyhow::anyhow!("no {prefix} in /metrics"))?;
        Ok(line.trim().parse()?)
    };
    Ok((count("ingest-realtime")?, count("ingest-bulk")?))
}

/// A turn written just now is embedded on the realtime lane and history on
/// the bulk lane; the lane depths count runs waiting for vectors: none once
/// embedded, and after a model change every run waits on the bulk lane (not
/// the realtime one) until it is embedded again.
#[test]
fn live_turns_ride_the_realtime_lane_history_the_bulk_lane_and_status_counts_what_waits(
) -> Result<()> {
    if model_dir()?.is_none() {
        return Ok(());
    }
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let mut central = Central::start_on(&data, &[])?;
    let token = central.register_admin("alice.test", "laptop")?;
    let alice = central.client(&token);
    // One chunk each: history (a backfill of May's sessions) and a turn
    // written just now.
    let words = "the deploy failed because the migration locked the table ".repeat(20);
    let mut ids = (0..60)
        .map(|i| post_run(&alice, &format!("s{i}"), &format!("{words} run {i}")))
        .collect::<Result<Vec<_>>>()?;
    let now = kith_shared::timestamp::now();
    ids.push(post_run_at(&alice, "live", &format!("{words} live"), &now)?);
    for id in &ids {
        alice.wait_embedded(id, Duration::from_secs(120))?;
    }
    assert_eq!(
        embedded_per_lane(&alice)?,
        (1, 60),
        "the live turn on the realtime lane, the history on the bulk lane"
    );
    let depths = |api: &kith_tests::Api| -> Result<(u64, u64)> {
        let q = &api.get("/api/status")?.body["queue"];
        Ok((
            q["ingest_realtime"].as_u64().unwrap_or(u64::MAX),
            q["ingest_bulk"].as_u64().unwrap_or(u64::MAX),
        ))
    };
    assert_eq!(depths(&alice)?, (0, 0), "all embedded: nothing waits");
    central.kill()?;

    // Matryoshka truncation is another model: every run is embedded again,
    // on the bulk lane.
    let central = Central::start_on(&data, &[("KITH_EMBED_TRUNCATE_DIM", "256")])?;
    let alice = central.client(&token);
    let (realtime, bulk) = depths(&alice)?;
    assert_eq!(realtime, 0, "re-embedding is bulk work");
    assert!(
        (1..=61).contains(&bulk),
        "the re-embed backlog is on the bulk lane: {bulk}"
    );
    let (_, metrics) = alice.get_bytes("/metrics")?;
    let metrics = String::from_utf8(metrics)?;
    let shown = metrics
        .lines()
        .find_map(|l| l.strip_prefix("kith_queue_depth{lane=\"ingest-bulk\"} "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    assert!(
        shown.is_some_and(|n| (1..=bulk).contains(&n)),
        "metrics show the backlog too: {shown:?}"
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while depths(&alice)? != (0, 0) {
        anyhow::ensure!(
            std::time::Instant::now() < deadline,
            "the re-embed did not finish: {:?}",
            depths(&alice)?
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        embedded_per_lane(&alice)?,
        (0, 61),
        "re-embeds are bulk work"
    );
    Ok(())
}

/// Ollama cannot run here: a stand-in for its `POST /api/embed` on
/// `listener`, one fixed vector per input text.
fn ollama_stand_in(listener: std::net::TcpListener) -> Result<StandIn> {
    StandIn::start(listener, |body| {
        let request: serde_json::Value = serde_json::from_slice(body).ok()?;
        let n = request["input"].as_array().map_or(0, Vec::len);
        let vectors = vec![json!([1.0, 0.5, 0.25, 0.125]); n];
        Some(json_response(
            "200 OK",
            &json!({"model": request["model"], "embeddings": vectors}),
        ))
    })
}

#[test]
fn embedder_down_keyword_still_answers_semantic_says_why_and_recovers() -> Result<()> {
    // A port nothing listens on (yet): the embedding server is down.
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let tmp = tempfile::tempdir()?;
    let central = Central::start_on(
        &tmp.path().join("data"),
        &[
            ("KITH_EMBED_PROVIDER", "ollama"),
            ("KITH_EMBED_URL", url.as_str()),
        ],
    )?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let id = post_run(&alice, "a", "zanzibar release notes")?;
    alice.wait_indexed(&id, Duration::from_secs(10))?;
    let kw = alice.post(
        "/api/search",
        &json!({"query": "zanzibar", "mode": "keyword"}),
    )?;
    assert_eq!(hit_run_ids(&kw.body), vec![id.clone()]);
    let semantic = json!({"query": "zanzibar", "mode": "semantic"});
    let sem = alice.post("/api/search", &semantic)?;
    assert_eq!(
        (sem.status, sem.code()),
        (503, "embedder_unavailable"),
        "{sem:?}"
    );
    assert!(sem.body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .contains(&format!("127.0.0.1:{port}")));
    let hybrid = alice.post(
        "/api/search",
        &json!({"query": "zanzibar", "mode": "hybrid"}),
    )?;
    assert_eq!(hybrid.status, 200);
    assert_eq!(hit_run_ids(&hybrid.body), vec![id.clone()]);
    assert!(hybrid.body["hits"][0]["snippet"]
        .as_str()
        .unwrap_or_default()
        .contains("«zanzibar»"));
    assert!(hybrid.body["degraded"]
        .as_str()
        .unwrap_or_default()
        .contains("keyword results only"));
    assert_eq!(alice.get("/api/status")?.body["embedder"], "none");

    // Regression: a server down at start was never asked again. Once it
    // answers, central connects and embeds what was indexed meanwhile.
    let _ollama = ollama_stand_in(std::net::TcpListener::bind(("127.0.0.1", port))?)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let found = loop {
        let sem = alice.post("/api/search", &semantic)?;
        if sem.status == 200 && !hit_run_ids(&sem.body).is_empty() {
            break sem;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "semantic search never recovered: {sem:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(hit_run_ids(&found.body), vec![id]);
    assert!(found.body["degraded"].is_null(), "{found:?}");
    let status = alice.get("/api/status")?;
    assert!(
        status.body["embedder"]
            .as_str()
            .is_some_and(|e| e.starts_with("ollama:")),
        "{status:?}"
    );
    Ok(())
}

/// A run whose text the embedding server refuses (a chunk over its token
/// limit) is passed by: the runs behind it get their vectors, and it gets
/// none.
#[test]
fn a_run_the_embedder_refuses_does_not_hold_up_the_others() -> Result<()> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let url = format!("http://{}", listener.local_addr()?);
    let _ollama = StandIn::start(listener, |body| {
        let request: serde_json::Value = serde_json::from_slice(body).ok()?;
        let inputs = request["input"].as_array().cloned().unwrap_or_default();
        if inputs
            .iter()
            .any(|t| t.as_str().unwrap_or_default().contains("oversized"))
        {
            return Some(json_response(
                "400 Bad Request",
                &json!({"error": "input length exceeds the context length"}),
            ));
        }
        let vectors = vec![json!([1.0, 0.5, 0.25, 0.125]); inputs.len()];
        Some(json_response(
            "200 OK",
            &json!({"model": request["model"], "embeddings": vectors}),
        ))
    })?;
    let central = Central::start_with(&[
        ("KITH_EMBED_PROVIDER", "ollama"),
        ("KITH_EMBED_URL", url.as_str()),
    ])?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    // The refused run is the newest: each round of its lane starts with it.
    let earlier = post_run(&alice, "a", "the walrus deploy checklist")?;
    let refused = post_run(&alice, "b", "an oversized tool output")?;
    alice.wait_embedded(&earlier, Duration::from_secs(60))?;
    let later = post_run(&alice, "c", "the pelican cache warmup")?;
    alice.wait_embedded(&later, Duration::from_secs(60))?;
    let run = alice.get(&format!("/api/runs/{refused}"))?.body;
    assert!(run["embedded_at"].is_null(), "{run}");
    // Its text is still found by keyword.
    let kw = alice.post(
        "/api/search",
        &json!({"query": "oversized", "mode": "keyword"}),
    )?;
    assert_eq!(hit_run_ids(&kw.body), vec![refused]);
    Ok(())
}

/// `reindex` succeeds, and a central started after it finds the run again.
fn reindex_finds(data: &std::path::Path, token: &str, id: &str) -> Result<()> {
    let re = run_central(data, &["reindex"])?;
    assert!(
        re.status.success(),
        "{}",
        String::from_utf8_lossy(&re.stderr)
    );
    let fixed = Central::start_on(data, &[])?;
    let r = fixed.client(token).post(
        "/api/search",
        &json!({"query": "quokka", "mode": "keyword"}),
    )?;
    assert_eq!(hit_run_ids(&r.body), vec![id.to_owned()]);
    Ok(())
}

#[test]
fn an_index_chunked_by_an_older_kith_is_served_and_doctor_names_reindex() -> Result<()> {
    let (central, alice, id) = one_indexed_run("quokka onboarding checklist")?;
    let token = alice.token;
    let data = &central.data_dir;
    // What an index built before chunking version 2 looks like: its runs
    // keep their chunks, and central serves them as they are.
    std::fs::remove_file(data.join("chunking"))?;
    let older = Central::start_on(data, &[])?;
    let r = older.client(&token).post(
        "/api/search",
        &json!({"query": "quokka", "mode": "keyword"}),
    )?;
    assert_eq!(hit_run_ids(&r.body), vec![id.clone()]);
    drop(older);
    let doctor = run_central(data, &["doctor"])?;
    let out = String::from_utf8_lossy(&doctor.stdout);
    assert_eq!(doctor.status.code(), Some(1), "{out}");
    assert!(
        out.contains("chunking 1,") && out.contains("kith-central reindex"),
        "{out}"
    );
    assert!(!out.contains("index_chunks_differ"), "{out}");
    reindex_finds(data, &token, &id)?;
    let doctor = run_central(data, &["doctor"])?;
    assert!(
        doctor.status.success(),
        "{}",
        String::from_utf8_lossy(&doctor.stdout)
    );
    Ok(())
}

#[test]
fn a_corrupt_or_missing_index_is_named_and_reindex_fixes_it() -> Result<()> {
    let corrupt = |data: &std::path::Path| {
        std::fs::write(data.join("index/meta.json"), b"{ this is not an index")
    };
    // Regression: a lost index was created again empty, and every search
    // answered nothing without saying why.
    let missing = |data: &std::path::Path| std::fs::remove_dir_all(data.join("index"));
    for (case, break_it) in [
        (
            "corrupt",
            &corrupt as &dyn Fn(&std::path::Path) -> std::io::Result<()>,
        ),
        ("missing", &missing),
    ] {
        let (central, alice, id) = one_indexed_run("quokka onboarding checklist")?;
        let token = alice.token;
        let data = &central.data_dir;
        break_it(data)?;
        let err = Central::start_on(data, &[])
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(
            err.contains("exited before it was ready") && err.contains("kith-central reindex"),
            "{case} index: central must refuse to start and name the repair: {err}"
        );
        reindex_finds(data, &token, &id)?;
    }
    Ok(())
}

/// `kith search` says when nothing is about the question instead of
/// listing the nearest conversations; `--weak` lists them, labelled; a
/// question about what a conversation says lists it, not labelled.
#[test]
fn kith_search_says_nothing_relevant_and_shows_weak_matches_only_when_asked() -> Result<()> {
    if model_dir()?.is_none() {
        return Ok(());
    }
    let central = Central::start()?;
    let token = central.register("alice.test", "laptop")?;
    let alice = central.client(&token);
    let run = post_run(
        &alice,
        "a",
        "The importer retries after a 429 with exponential backoff",
    )?;
    alice.wait_embedded(&run, Duration::from_secs(60))?;
    let laptop = kith_tests::Machine::new(&central, &token)?;

    let nothing = laptop.text(&["search", "xyzzyqwerty"])?;
    ensure!(nothing.starts_with("nothing relevant\n"), "{nothing}");
    ensure!(nothing.contains("--weak shows"), "{nothing}");
    ensure!(!nothing.contains("importer"), "no hit listed: {nothing}");
    let weak = laptop.text(&["search", "xyzzyqwerty", "--weak"])?;
    ensure!(weak.contains("importer") && weak.contains("weak"), "{weak}");
    let json = laptop.json(&["search", "xyzzyqwerty", "--json"])?;
    ensure!(json["nothing_relevant"] == true, "{json}");

    let found = laptop.text(&["search", "make the importer retry on 429"])?;
    ensure!(found.contains("importer"), "{found}");
    ensure!(
        !found.contains("nothing relevant") && !found.contains(" · weak"),
        "{found}"
    );
    Ok(())
}
