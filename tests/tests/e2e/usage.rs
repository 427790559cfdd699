//! What the agents cost, end to end: the repository's Claude Code, Codex
//! and pi transcripts (and the usage edge cases: a streamed response,
//! negative and absurd counts, an unknown model, a restarted Codex series)
//! posted to a real central one line per delta, and `GET /api/usage`
//! checked to the token against ground truth this file computes from the
//! same bytes with serde_json alone: a Claude message once (by message and
//! request id) with its last figures, Codex's running totals as
//! differences, pi's messages each with its recorded cost. A member's
//! report holds only their own usage, also once another member shared a
//! conversation with them; forgetting a conversation takes its usage out;
//! `reindex` rebuilds the same report; `kith usage` prints it.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use anyhow::{ensure, Context, Result};
use kith_shared::fixtures;
use kith_tests::{run_central, Api, Central, Home};
use serde_json::{json, Value};

/// A fact as the ground truth counts it: model, [input, output, 5-minute
/// writes, 1-hour writes, cache reads], the requests it sums when known,
/// and the cost its agent recorded.
#[derive(Debug, Clone)]
struct Fact {
    model: Option<String>,
    tokens: [u64; 5],
    n_requests: Option<u64>,
    usd: Option<f64>,
}

/// What a report should say of some facts.
#[derive(Debug, Default, Clone)]
struct Expected {
    /// input, output, cache writes, cache reads.
    tokens: [u64; 4],
    cost_usd: f64,
    unpriced: BTreeSet<String>,
}

/// The same tokens and unpriced models, and dollars within a micro-dollar
/// (sums of floats in another order).
impl PartialEq for Expected {
    fn eq(&self, other: &Self) -> bool {
        self.tokens == other.tokens
            && self.unpriced == other.unpriced
            && (self.cost_usd - other.cost_usd).abs() < 1e-6
    }
}

impl Expected {
    fn add(mut self, other: Expected) -> Expected {
        for (a, b) in self.tokens.iter_mut().zip(other.tokens) {
            *a += b;
        }
        self.cost_usd += other.cost_usd;
        self.unpriced.extend(other.unpriced);
        self
    }
}

fn expected(facts: &[Fact]) -> Expected {
    let mut e = Expected::default();
    for f in facts {
        let t = f.tokens;
        for (sum, n) in e.tokens.iter_mut().zip([t[0], t[1], t[2] + t[3], t[4]]) {
            *sum += n;
        }
        match priced(f) {
            Some(x) => e.cost_usd += x,
            None => {
                e.unpriced
                    .insert(f.model.clone().unwrap_or_else(|| "unknown".into()));
            }
        }
    }
    e
}

/// The fact's cost: what its agent recorded, else its tokens at the
/// built-in table's list rates (per million), else none.
fn priced(f: &Fact) -> Option<f64> {
    if let Some(usd) = f.usd {
        return Some(usd);
    }
    let t = f.tokens;
    if t == [0; 5] {
        return Some(0.0);
    }
    let price = kith_shared::usage::price_of(f.model.as_deref()?)?;
    let prompt = t[0] + t[2] + t[3] + t[4];
    let rates = match price.long_above {
        Some(above) if prompt > above => match f.n_requests {
            Some(1) => price.long_rates?,
            _ => return None,
        },
        _ => price.rates,
    };
    let part = |n: u64, rate: Option<f64>| {
        if n == 0 {
            Some(0.0)
        } else {
            rate.map(|r| n as f64 * r)
        }
    };
    let sum = part(t[0], Some(rates.input))?
        + part(t[1], Some(rates.output))?
        + part(t[2], rates.cache_write_5m)?
        + part(t[3], rates.cache_write_1h)?
        + part(t[4], rates.cache_read)?;
    Some(sum / 1e6)
}

/// What a report row or its totals says, in `Expected`'s terms.
fn said(v: &Value) -> Expected {
    let n = |k: &str| v[k].as_u64().unwrap_or(u64::MAX);
    Expected {
        tokens: [
            n("input_tokens"),
            n("output_tokens"),
            n("cache_write_tokens"),
            n("cache_read_tokens"),
        ],
        cost_usd: v["cost_usd"].as_f64().unwrap_or(f64::NAN),
        unpriced: v["unpriced_models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|m| m.as_str().map(str::to_owned))
            .collect(),
    }
}

/// A count as the agents write them: missing or null is 0; anything but a
/// non-negative integer up to `max` is no count.
fn n(v: &Value, max: u64) -> Option<u64> {
    if v.is_null() {
        return Some(0);
    }
    v.as_u64().filter(|&n| n <= max)
}

const RESPONSE: u64 = 1_000_000_000;
const RUNNING: u64 = 1_000_000_000_000;

/// Every JSON value of `bytes`, line by line (an agent may write two
/// records on one line).
fn records(bytes: &[u8]) -> impl Iterator<Item = Value> + '_ {
    bytes.split(|&c| c == b'\n').flat_map(|line| {
        serde_json::Deserializer::from_slice(line)
            .into_iter::<Value>()
            .map_while(Result::ok)
    })
}

/// Claude Code's responses across `files`, in order: each message and
/// request id once, with its last countable figures; and the usage
/// records that could not be counted.
fn claude_truth(files: &[&[u8]]) -> (Vec<Fact>, u64) {
    let mut order: Vec<String> = Vec::new();
    let mut last: HashMap<String, Fact> = HashMap::new();
    let mut refused = 0;
    for v in files.iter().flat_map(|b| records(b)) {
        let (m, u) = (&v["message"], &v["message"]["usage"]);
        if v["type"] != "assistant" || u.is_null() || m["model"] == "<synthetic>" {
            continue;
        }
        let cc = &u["cache_creation"];
        let split = cc.get("ephemeral_5m_input_tokens").is_some()
            || cc.get("ephemeral_1h_input_tokens").is_some();
        let (w5, w1) = if split {
            (
                n(&cc["ephemeral_5m_input_tokens"], RESPONSE),
                n(&cc["ephemeral_1h_input_tokens"], RESPONSE),
            )
        } else {
            (n(&u["cache_creation_input_tokens"], RESPONSE), Some(0))
        };
        let counts = [
            n(&u["input_tokens"], RESPONSE),
            n(&u["output_tokens"], RESPONSE),
            w5,
            w1,
            n(&u["cache_read_input_tokens"], RESPONSE),
        ];
        let (Some(id), true, [Some(i), Some(o), Some(w5), Some(w1), Some(r)]) =
            (m["id"].as_str(), u.is_object(), counts)
        else {
            refused += 1;
            continue;
        };
        let key = format!("{id}\n{}", v["requestId"].as_str().unwrap_or_default());
        if !last.contains_key(&key) {
            order.push(key.clone());
        }
        last.insert(
            key,
            Fact {
                model: m["model"].as_str().map(str::to_owned),
                tokens: [i, o, w5, w1, r],
                n_requests: Some(1),
                usd: None,
            },
        );
    }
    let facts = order.iter().map(|k| last[k].clone()).collect();
    (facts, refused)
}

/// Codex's token counts of one rollout: each running total less the one
/// before it, a total that went down in any count starting over.
fn codex_truth(bytes: &[u8]) -> (Vec<Fact>, u64) {
    let (mut facts, mut refused) = (Vec::new(), 0);
    let (mut model, mut before): (Option<String>, Option<[u64; 3]>) = (None, None);
    for v in records(bytes) {
        let p = &v["payload"];
        if v["type"] == "turn_context" {
            if let Some(m) = p["model"].as_str() {
                model = Some(m.to_owned());
            }
            continue;
        }
        let t = &p["info"]["total_token_usage"];
        if v["type"] != "event_msg" || p["type"] != "token_count" || t.is_null() {
            continue;
        }
        let counts = (
            n(&t["input_tokens"], RUNNING),
            n(&t["cached_input_tokens"], RUNNING),
            n(&t["output_tokens"], RUNNING),
        );
        let (Some(i), Some(c), Some(o), true) = (counts.0, counts.1, counts.2, t.is_object())
        else {
            refused += 1;
            continue;
        };
        let Some(fresh) = i.checked_sub(c) else {
            refused += 1;
            continue;
        };
        let now = [fresh, o, c];
        let (added, n_requests) = match before {
            Some(b) if now.iter().zip(b).all(|(x, y)| *x >= y) => {
                ([now[0] - b[0], now[1] - b[1], now[2] - b[2]], Some(1))
            }
            _ => (now, None),
        };
        before = Some(now);
        if added != [0; 3] {
            facts.push(Fact {
                model: model.clone(),
                tokens: [added[0], added[1], 0, 0, added[2]],
                n_requests,
                usd: None,
            });
        }
    }
    (facts, refused)
}

/// pi's assistant messages of one session, each with the cost it recorded
/// (none when it recorded 0 for tokens: it knew no price).
fn pi_truth(bytes: &[u8]) -> (Vec<Fact>, u64) {
    let (mut facts, mut refused) = (Vec::new(), 0);
    for v in records(bytes) {
        let (m, u) = (&v["message"], &v["message"]["usage"]);
        if v["type"] != "message" || m["role"] != "assistant" || u.is_null() {
            continue;
        }
        let counts = ["input", "output", "cacheWrite", "cacheRead"].map(|k| n(&u[k], RESPONSE));
        let cost = u["cost"]["total"].as_f64();
        if cost.is_some_and(|x| !(0.0..=1000.0).contains(&x)) {
            refused += 1;
            continue;
        }
        let [Some(i), Some(o), Some(w), Some(r)] = counts else {
            refused += 1;
            continue;
        };
        let tokens = [i, o, w, 0, r];
        facts.push(Fact {
            model: m["model"].as_str().map(str::to_owned),
            tokens,
            n_requests: Some(1),
            usd: cost.filter(|&x| x > 0.0 || tokens == [0; 5]),
        });
    }
    (facts, refused)
}

/// Posts `bytes` of `runtime` as `source`, one line per delta (a streamed
/// response's lines land in different deltas).
fn post_by_line(api: &Api, runtime: &str, source: &str, bytes: &[u8]) -> Result<Vec<String>> {
    let text = std::str::from_utf8(bytes)?;
    let mut from = 0u64;
    let mut ids = Vec::new();
    for line in text.split_inclusive('\n') {
        ids.push(api.ingest(&json!({
            "jsonl": line, "agent_runtime": runtime, "source_identity": source,
            "from_offset": from, "to_offset": from + line.len() as u64,
        }))?);
        from += line.len() as u64;
    }
    Ok(ids)
}

/// `GET /api/usage?query`, which must answer 200.
fn usage(api: &Api, query: &str) -> Result<Value> {
    let res = api.get(&format!("/api/usage?{query}"))?;
    ensure!(res.status == 200, "{query}: {res:?}");
    Ok(res.body)
}

/// The rows of `report` whose group is `group`, summed (an undated fact
/// is dated when central took it, which may be another month).
fn group(report: &Value, group: &str) -> Result<Expected> {
    let rows: Vec<&Value> = report["rows"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["group"] == group)
        .collect();
    ensure!(!rows.is_empty(), "no row of {group}: {report}");
    Ok(rows
        .into_iter()
        .fold(Expected::default(), |sum, r| sum.add(said(r))))
}

/// A fixture's complete lines: what an agent sends of it (a transcript
/// cut mid-line waits for the rest).
fn read(path: &std::path::Path) -> Result<Vec<u8>> {
    let mut bytes = std::fs::read(path)?;
    let whole = bytes
        .iter()
        .rposition(|&c| c == b'\n')
        .map_or(0, |at| at + 1);
    bytes.truncate(whole);
    Ok(bytes)
}

/// One fixture file's bytes.
fn fixture(runtime: &str, name_part: &str) -> Result<Vec<u8>> {
    let f = fixtures::own()
        .into_iter()
        .find(|f| f.runtime == runtime && f.name.contains(name_part))
        .with_context(|| format!("fixture {runtime} {name_part}"))?;
    read(&f.path)
}

#[test]
fn usage_counts_each_response_once_to_the_token_and_only_the_owners() -> Result<()> {
    let mut central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    let bob = central.client(&central.register("bob.test", "desk")?);

    // Alice's agents: every Claude Code, Codex and pi transcript of the
    // repository, and the usage edge cases.
    let mut claude: Vec<Vec<u8>> = Vec::new();
    let (mut codex, mut pi) = (Vec::new(), Vec::new());
    let mut refused = 0;
    for (i, f) in fixtures::own().iter().enumerate() {
        let bytes = read(&f.path)?;
        let source = format!("/home/alice/{}#1:{i}:0", f.layout.display());
        match f.runtime {
            "claude-code" => claude.push(bytes.clone()),
            "codex" => codex.push(codex_truth(&bytes)),
            "pi" => pi.push(pi_truth(&bytes)),
            _ => continue,
        }
        post_by_line(&alice, f.runtime, &source, &bytes)?;
    }
    for (name, runtime) in [
        ("claude-code-edge.jsonl", "claude-code"),
        ("codex-restart.jsonl", "codex"),
    ] {
        let bytes = fixtures::read(&format!("usage/{name}"));
        post_by_line(
            &alice,
            runtime,
            &format!("/home/alice/{name}#9:9:0"),
            &bytes,
        )?;
        match runtime {
            "claude-code" => claude.push(bytes),
            _ => codex.push(codex_truth(&bytes)),
        }
    }
    let claude_files: Vec<&[u8]> = claude.iter().map(Vec::as_slice).collect();
    let (claude_facts, claude_refused) = claude_truth(&claude_files);
    refused += claude_refused;
    let codex_facts: Vec<Fact> = codex.iter().flat_map(|(f, _)| f.clone()).collect();
    let pi_facts: Vec<Fact> = pi.iter().flat_map(|(f, _)| f.clone()).collect();
    refused += codex.iter().chain(&pi).map(|(_, r)| r).sum::<u64>();
    let all: Vec<Fact> = [&claude_facts, &codex_facts, &pi_facts]
        .into_iter()
        .flatten()
        .cloned()
        .collect();
    ensure!(
        claude_refused > 0,
        "the edge fixture has counts that cannot be counted"
    );
    ensure!(
        !pi_facts.iter().all(|f| f.usd.is_none()),
        "pi records costs"
    );

    // Bob's session, shared with alice: she may read it, it is not her usage.
    let bobs = fixture("claude-code", "c71e93d0")?;
    let (bob_facts, _) = claude_truth(&[&bobs]);
    let bob_run = post_by_line(&bob, "claude-code", "/home/bob/s.jsonl#1:1:0", &bobs)?;
    let share = bob.post(
        "/api/shares",
        &json!({"scope": format!("run:{}", bob_run[0]), "with": "alice.test", "follow": true}),
    )?;
    ensure!(share.status == 201 || share.status == 200, "{share:?}");
    ensure!(alice.get(&format!("/api/runs/{}", bob_run[0]))?.status == 200);

    let report = usage(&alice, "report=monthly&by=agent")?;
    for (agent, facts) in [
        ("claude-code", &claude_facts),
        ("codex", &codex_facts),
        ("pi", &pi_facts),
    ] {
        assert_eq!(group(&report, agent)?, expected(facts), "{agent}: {report}");
    }
    assert_eq!(said(&report["totals"]), expected(&all), "{report}");
    assert!(expected(&all).unpriced.contains("qwen3.7-plus"));
    assert_eq!(report["n_refused"], refused, "{report}");
    let table = kith_shared::usage::PriceTable::builtin().as_of().to_owned();
    assert_eq!(report["price_table"], table.as_str());
    assert_eq!(report["timezone"], "UTC");
    // Bob's report is his session alone.
    let bobs_report = usage(&bob, "")?;
    assert_eq!(said(&bobs_report["totals"]), expected(&bob_facts));
    ensure!(
        expected(&bob_facts).tokens[1] > 0,
        "bob's session has usage"
    );

    // Days cut in another zone move rows, never tokens; a zone the tz
    // database does not have is refused, saying what is read.
    let east = usage(&alice, "report=daily&timezone=%2B14:00")?;
    assert_eq!(said(&east["totals"]), said(&report["totals"]));
    assert_eq!(east["timezone"], "+14:00");
    let daily = usage(&alice, "")?;
    ensure!(daily["rows"] != east["rows"], "{daily}\n{east}");
    let named = alice.get("/api/usage?timezone=Mars/Olympus")?;
    assert_eq!((named.status, named.code()), (400, "invalid_timezone"));
    for bad in [
        "report=hourly",
        "by=colour",
        "agent=nobody",
        "since=last%20week",
        "extra=1",
    ] {
        assert_eq!(
            alice.get(&format!("/api/usage?{bad}"))?.status,
            400,
            "{bad}"
        );
    }
    // A range of days: pi's first session alone (May 7th); its second is
    // of May 12th.
    let day = usage(&alice, "since=2026-05-07&until=2026-05-07&by=agent")?;
    let first = pi.first().map(|(f, _)| f.clone()).unwrap_or_default();
    assert_eq!(group(&day, "pi")?, expected(&first), "{day}");
    ensure!(usage(&alice, "since=2026-05-08&until=2026-05-08")?["rows"] == json!([]));

    // The session report: a row per conversation, summing to the totals.
    let sessions = usage(&alice, "report=session")?;
    let rows = sessions["rows"].as_array().cloned().unwrap_or_default();
    let summed: u64 = rows
        .iter()
        .map(|r| r["output_tokens"].as_u64().unwrap_or(0))
        .sum();
    assert_eq!(summed, expected(&all).tokens[1]);
    ensure!(rows
        .iter()
        .all(|r| r["key"].as_str().is_some_and(|k| k.starts_with('c'))));

    // `kith usage` prints the same answer, and a table naming its zone and
    // prices.
    let home = Home::new()?;
    let out = home
        .kith_at(
            &central.url,
            &alice.token,
            &["usage", "monthly", "--by", "agent", "--json"],
        )
        .output()?;
    ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(printed, report);
    let out = home
        .kith_at(
            &central.url,
            &alice.token,
            &["usage", "--timezone", "+02:00"],
        )
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    ensure!(
        text.contains(&format!("time zone +02:00, prices as of {table}"))
            && text.contains("qwen3.7-plus"),
        "{text}"
    );
    let out = home
        .kith_at(
            &central.url,
            &alice.token,
            &["usage", "--timezone", "Mars/Olympus"],
        )
        .output()?;
    assert_eq!(
        out.status.code(),
        Some(2),
        "central's 400 is the command line's fault"
    );

    // A reindex from the blobs finds the same usage.
    central.kill()?;
    let reindexed = run_central(&central.data_dir, &["reindex"])?;
    ensure!(
        reindexed.status.success(),
        "{}",
        String::from_utf8_lossy(&reindexed.stderr)
    );
    central.restart()?;
    assert_eq!(usage(&alice, "report=monthly&by=agent")?, report);
    assert_eq!(usage(&alice, "report=session")?, sessions);

    // Forgetting bob's session takes its usage out of his report.
    let forgot = bob.send(
        bob.http
            .delete(bob.url(&format!("/api/conversations/{}", bob_run[0]))),
    )?;
    ensure!(forgot.status == 200, "{forgot:?}");
    assert_eq!(said(&usage(&bob, "")?["totals"]), expected(&[]));
    assert_eq!(said(&usage(&alice, "")?["totals"]), expected(&all));
    Ok(())
}

#[test]
fn a_conversation_is_counted_once_whatever_its_deltas() -> Result<()> {
    // The same transcripts sent whole, or a line at a time, count alike,
    // whether central counts the lines' deltas many at a time (as they
    // come) or each before the next comes (a report asked after each).
    let central = Central::start()?;
    let whole = central.client(&central.register("alice.test", "laptop")?);
    let lines = central.client(&central.register("bob.test", "desk")?);
    let each = central.client(&central.register("carol.test", "tablet")?);
    let mut per_agent: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, f) in fixtures::own().iter().enumerate() {
        if !matches!(f.runtime, "claude-code" | "codex" | "pi" | "gemini") {
            continue;
        }
        let bytes = read(&f.path)?;
        let source = format!("/home/me/{}#1:{i}:0", f.layout.display());
        whole.ingest(&json!({
            "jsonl": std::str::from_utf8(&bytes)?, "agent_runtime": f.runtime,
            "source_identity": source, "from_offset": 0, "to_offset": bytes.len(),
        }))?;
        post_by_line(&lines, f.runtime, &source, &bytes)?;
        let mut from = 0;
        for line in bytes.split_inclusive(|b| *b == b'\n') {
            each.ingest(&json!({
                "jsonl": std::str::from_utf8(line)?, "agent_runtime": f.runtime,
                "source_identity": source, "from_offset": from, "to_offset": from + line.len(),
            }))?;
            usage(&each, "report=daily")?;
            from += line.len();
        }
        *per_agent.entry(f.runtime).or_default() += 1;
    }
    ensure!(per_agent.len() == 4, "{per_agent:?}");
    let a = usage(&whole, "report=daily&by=model")?;
    let b = usage(&lines, "report=daily&by=model")?;
    let c = usage(&each, "report=daily&by=model")?;
    assert_eq!(a["rows"], b["rows"]);
    assert_eq!(a["totals"], b["totals"]);
    assert_eq!(a["rows"], c["rows"]);
    assert_eq!(a["totals"], c["totals"]);
    ensure!(a["totals"]["output_tokens"].as_u64() > Some(0));
    Ok(())
}

/// An admin's family report: each member's tokens and dollars, by person
/// (`kith usage --by person` prints them), and nothing that names the work
/// of a run the admin may not read; a member is refused it; with
/// `[usage] admin_sees_members = false` the admin is refused it too and
/// keeps their own report.
#[test]
fn an_admin_sees_each_members_figures_never_their_work_unless_central_says_no() -> Result<()> {
    use kith_tests::{claude_response_line, claude_user_line, delta};
    let cfg = tempfile::tempdir()?;
    for admin_sees_members in [true, false] {
        let file = cfg
            .path()
            .join(format!("central-{admin_sees_members}.toml"));
        std::fs::write(
            &file,
            format!("[usage]\nadmin_sees_members = {admin_sees_members}\n"),
        )?;
        let central = Central::start_with(&[("KITH_CENTRAL_CONFIG", &file.to_string_lossy())])?;
        let ada = central.client(&central.register_admin("ada.test", "laptop")?);
        let bob = central.client(&central.register("bob.test", "bobs-secret-box")?);
        ada.ingest(&delta(
            "/home/ada/a.jsonl",
            0,
            &[
                claude_user_line("ada's", "2026-05-01T09:00:00Z"),
                claude_response_line("a1", "claude-opus-4-6", "2026-05-01T09:00:05Z", 1_000, 10),
            ]
            .concat(),
        ))?;
        let bobs = [
            claude_user_line("the divorce lawyer's letter", "2026-05-01T09:00:00Z"),
            claude_response_line("b1", "claude-haiku-4-5", "2026-05-01T10:00:00Z", 4_321, 9),
        ]
        .concat();
        let bob_run = bob.ingest(&delta("/home/bob/private/b.jsonl", 0, &bobs))?;
        let bob_conversation = bob.get(&format!("/api/runs/{bob_run}"))?.body["conversation"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        ensure!(!bob_conversation.is_empty());

        let refused = bob.get("/api/usage?by=person")?;
        assert_eq!((refused.status, refused.code()), (403, "admin_only"));
        ensure!(bob.get("/api/usage?family=true")?.status == 403);
        let own = usage(&ada, "")?;
        assert_eq!(own["totals"]["input_tokens"], 1_000, "{own}");

        let people = ada.get("/api/usage?by=person&report=monthly")?;
        if !admin_sees_members {
            assert_eq!((people.status, people.code()), (403, "members_usage_off"));
            ensure!(ada.get("/api/usage?report=session&family=true")?.status == 403);
            continue;
        }
        ensure!(people.status == 200, "{people:?}");
        let of = |who: &str| {
            people.body["rows"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["group"] == who)
                .map(|r| r["input_tokens"].clone())
        };
        assert_eq!(of("ada.test"), Some(json!(1_000)), "{}", people.body);
        assert_eq!(of("bob.test"), Some(json!(4_321)), "{}", people.body);
        // Per member and model, and per session: bob's figures under his
        // name, his model, never his conversation, machine or project.
        for query in [
            "report=daily&family=true&by=model",
            "report=session&family=true&by=machine",
            "report=session&family=true&by=project",
        ] {
            let res = usage(&ada, query)?;
            let text = res.to_string();
            assert_eq!(res["totals"]["input_tokens"], 5_321, "{query}: {text}");
            for secret in [
                bob_conversation.as_str(),
                "bobs-secret-box",
                "/home/bob",
                "divorce",
            ] {
                ensure!(!text.contains(secret), "{query}: bob's {secret}: {text}");
            }
            ensure!(text.contains("\"person\":\"bob.test\""), "{query}: {text}");
        }
        let by_model = usage(&ada, "family=true&by=model")?;
        ensure!(
            by_model.to_string().contains("claude-haiku-4-5"),
            "{by_model}"
        );
        // Shared with her, bob's conversation is named in her report.
        let shared = bob.post(
            "/api/shares",
            &json!({"scope": format!("run:{bob_run}"), "with": "ada.test", "follow": true}),
        )?;
        ensure!(shared.status == 201, "{shared:?}");
        let sessions = usage(&ada, "report=session&family=true&by=machine")?.to_string();
        ensure!(
            sessions.contains(&bob_conversation) && sessions.contains("bobs-secret-box"),
            "{sessions}"
        );
        // The command line prints each member's line.
        let home = Home::new()?;
        let out = home
            .kith_at(
                &central.url,
                &ada.token,
                &["usage", "monthly", "--by", "person"],
            )
            .output()?;
        let text = String::from_utf8(out.stdout)?;
        ensure!(
            out.status.success() && text.contains("bob.test") && text.contains("4,321"),
            "{text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Days in the person's time zone: a zone by name cuts days by its rules
/// (a response at 23:30 UTC on 28 March is Berlin's 29th, the day clocks
/// go forward), and `kith usage` cuts them in the machine's zone unless
/// told otherwise, saying which in its header; a zone central's database
/// lacks is refused when asked for, and falls back to UTC, said, when it
/// is only the machine's.
#[test]
fn days_are_cut_in_a_named_zone_and_kith_usage_defaults_to_the_machines() -> Result<()> {
    use kith_tests::{claude_response_line, claude_user_line, delta};
    let central = Central::start()?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    alice.ingest(&delta(
        "/home/alice/a.jsonl",
        0,
        &[
            claude_user_line("late", "2026-03-28T23:00:00Z"),
            claude_response_line("a1", "claude-opus-4-6", "2026-03-28T23:30:00Z", 1_234, 5),
        ]
        .concat(),
    ))?;
    let keys = |res: &Value| -> Vec<String> {
        res["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["key"].as_str().map(str::to_owned))
            .collect()
    };
    let berlin = usage(&alice, "timezone=Europe/Berlin")?;
    assert_eq!(berlin["timezone"], "Europe/Berlin");
    assert_eq!(keys(&berlin), ["2026-03-29"], "{berlin}");
    assert_eq!(keys(&usage(&alice, "")?), ["2026-03-28"]);
    // The 29th in Berlin is 23 hours long, from 23:00 UTC on the 28th.
    let day = usage(
        &alice,
        "timezone=Europe/Berlin&since=2026-03-29&until=2026-03-29",
    )?;
    assert_eq!(day["totals"]["input_tokens"], 1_234, "{day}");
    let before = usage(&alice, "timezone=Europe/Berlin&until=2026-03-28")?;
    assert_eq!(before["totals"]["input_tokens"], 0, "{before}");

    let home = Home::new()?;
    let kith = |tz: &str, args: &[&str]| -> Result<std::process::Output> {
        let mut all = vec!["usage"];
        all.extend_from_slice(args);
        Ok(home
            .kith_at(&central.url, &alice.token, &all)
            .env("TZ", tz)
            .output()?)
    };
    for (tz, args, zone, day) in [
        ("Europe/Berlin", &[][..], "Europe/Berlin", "2026-03-29"),
        (":Europe/Berlin", &[][..], "Europe/Berlin", "2026-03-29"),
        ("UTC", &[][..], "UTC", "2026-03-28"),
        (
            "Europe/Berlin",
            &["--timezone", "-05:00"][..],
            "-05:00",
            "2026-03-28",
        ),
        (
            "America/Los_Angeles",
            &[][..],
            "America/Los_Angeles",
            "2026-03-28",
        ),
    ] {
        let out = kith(tz, args)?;
        let text = String::from_utf8(out.stdout)?;
        ensure!(
            out.status.success()
                && text.contains(&format!("time zone {zone},"))
                && text.contains(day),
            "TZ={tz} {args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = kith("Mars/Olympus", &[])?;
    let (text, err) = (
        String::from_utf8(out.stdout)?,
        String::from_utf8(out.stderr)?,
    );
    ensure!(
        out.status.success()
            && text.contains("time zone UTC,")
            && err.contains("\"Mars/Olympus\"")
            && err.contains("UTC"),
        "{text}{err}"
    );
    let out = kith("UTC", &["--timezone", "Mars/Olympus"])?;
    assert_eq!(out.status.code(), Some(2), "asked for: refused");
    Ok(())
}

/// Prices in central's config take the table's place: a listed model at
/// the config's rates, a model the table lacks priced (no longer unpriced),
/// the report naming both beside the table's date; a config with an absurd
/// price stops central at start, saying which.
#[test]
fn prices_in_centrals_config_price_the_report_and_it_says_so() -> Result<()> {
    use kith_tests::{bin, claude_response_line, claude_user_line, delta};
    let cfg = tempfile::tempdir()?;
    let file = cfg.path().join("central.toml");
    std::fs::write(
        &file,
        "[prices.\"claude-opus-4-6\"]\ninput = 1.0\noutput = 2.0\n\n\
         [prices.\"my-local-model\"]\ninput = 0.5\noutput = 0.25\n",
    )?;
    let central = Central::start_with(&[("KITH_CENTRAL_CONFIG", &file.to_string_lossy())])?;
    let alice = central.client(&central.register("alice.test", "laptop")?);
    alice.ingest(&delta(
        "/home/alice/a.jsonl",
        0,
        &[
            claude_user_line("go", "2026-05-01T09:00:00Z"),
            claude_response_line(
                "a1",
                "claude-opus-4-6",
                "2026-05-01T09:00:05Z",
                1_000_000,
                1_000_000,
            ),
            claude_response_line(
                "a2",
                "my-local-model",
                "2026-05-01T09:10:00Z",
                2_000_000,
                4_000_000,
            ),
            claude_response_line("a3", "mystery-model-9", "2026-05-01T09:20:00Z", 7, 7),
        ]
        .concat(),
    ))?;
    let res = usage(&alice, "by=model")?;
    let table = kith_shared::usage::PriceTable::builtin().as_of().to_owned();
    assert_eq!(res["price_table"], table.as_str());
    assert_eq!(
        res["price_overrides"],
        json!(["claude-opus-4-6", "my-local-model"])
    );
    let cost = |model: &str| -> Result<f64> {
        res["rows"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["group"] == model)
            .and_then(|r| r["cost_usd"].as_f64())
            .with_context(|| format!("{model}: {res}"))
    };
    // 1M in at $1 and 1M out at $2; 2M in at $0.50 and 4M out at $0.25.
    ensure!((cost("claude-opus-4-6")? - 3.0).abs() < 1e-9, "{res}");
    ensure!((cost("my-local-model")? - 2.0).abs() < 1e-9, "{res}");
    assert_eq!(res["totals"]["unpriced_models"], json!(["mystery-model-9"]));
    let home = Home::new()?;
    let out = home
        .kith_at(&central.url, &alice.token, &["usage", "--timezone", "UTC"])
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    ensure!(
        text.contains(&format!(
            "prices as of {table} (central's own for claude-opus-4-6, my-local-model)"
        )),
        "{text}"
    );
    // Without a config, the table's own price of opus (not $3).
    let plain = Central::start()?;
    let bob = plain.client(&plain.register("bob.test", "desk")?);
    bob.ingest(&delta(
        "/home/bob/b.jsonl",
        0,
        &[
            claude_user_line("go", "2026-05-01T09:00:00Z"),
            claude_response_line(
                "b1",
                "claude-opus-4-6",
                "2026-05-01T09:00:05Z",
                1_000_000,
                1_000_000,
            ),
        ]
        .concat(),
    ))?;
    let res = usage(&bob, "")?;
    ensure!(res.get("price_overrides").is_none(), "{res}");
    ensure!(res["totals"]["cost_usd"].as_f64() != Some(3.0), "{res}");

    let bad = cfg.path().join("bad.toml");
    std::fs::write(
        &bad,
        "[prices.\"claude-opus-4-6\"]\ninput = 1.0\noutput = 1e15\n",
    )?;
    let data = cfg.path().join("data");
    let out = std::process::Command::new(bin("kith-central"))
        .arg("--config")
        .arg(&bad)
        .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&data)
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    ensure!(
        !out.status.success()
            && err.contains("[prices]: price of claude-opus-4-6: output of 1000000000000000"),
        "{err}"
    );
    Ok(())
}

/// OpenCode's journal, whose message's tokens sit in its step parts,
/// perhaps in other deltas than its row, and whose rows are written again
/// as they change: counted the same sent whole, a line at a time (each
/// read after what central carried of the lines before, not every delta
/// again), and after a reindex.
#[test]
fn an_opencode_journal_counts_the_same_sent_whole_or_a_line_at_a_time() -> Result<()> {
    let central = Central::start()?;
    let whole = central.client(&central.register("alice.test", "laptop")?);
    let lines = central.client(&central.register("bob.test", "desk")?);
    let message = |tokens: Value| {
        json!({"kind": "message", "id": "msg_1", "session_id": "ses_1", "data": {
            "id": "msg_1", "role": "assistant", "modelID": "claude-sonnet-4-5",
            "time": {"created": 1_767_000_000_000_i64}, "tokens": tokens}})
    };
    let step = |id: &str, input: u64, output: u64| {
        json!({"kind": "part", "id": id, "message_id": "msg_1", "session_id": "ses_1",
            "data": {"type": "step-finish", "tokens": {"input": input, "output": output}}})
    };
    let mut journal = String::new();
    for v in [
        json!({"kind": "message", "id": "msg_0", "session_id": "ses_1", "data": {
            "id": "msg_0", "role": "user", "time": {"created": 1_766_999_999_000_i64}}}),
        message(json!({"input": 1, "output": 1})),
        json!({"kind": "part", "id": "prt_t", "message_id": "msg_1", "session_id": "ses_1",
            "data": {"type": "text", "text": "the long answer ".repeat(200)}}),
        step("prt_s1", 100, 10),
        step("prt_s2", 200, 20),
        message(json!({"input": 200, "output": 20})),
        // The first step written again with its final figures.
        step("prt_s1", 150, 15),
    ] {
        journal.push_str(&format!("{v}\n"));
    }
    let source = "/home/me/.local/share/opencode/opencode.db#ses_1#1:1:0";
    whole.ingest(&json!({
        "jsonl": journal, "agent_runtime": "opencode",
        "source_identity": source, "from_offset": 0, "to_offset": journal.len(),
    }))?;
    post_by_line(&lines, "opencode", source, journal.as_bytes())?;
    let a = usage(&whole, "by=model")?;
    let b = usage(&lines, "by=model")?;
    // Its steps' sum: 150 + 200 in, 15 + 20 out.
    assert_eq!(a["totals"]["input_tokens"], 350, "{a}");
    assert_eq!(a["totals"]["output_tokens"], 35, "{a}");
    assert_eq!(a["rows"], b["rows"]);
    assert_eq!(a["totals"], b["totals"]);
    let mut central = central;
    central.kill()?;
    let reindexed = run_central(&central.data_dir, &["reindex"])?;
    ensure!(
        reindexed.status.success(),
        "{}",
        String::from_utf8_lossy(&reindexed.stderr)
    );
    central.restart()?;
    assert_eq!(usage(&lines, "by=model")?, b);
    // After the reindex, the next line still counts from what was carried.
    let more = format!("{}\n", step("prt_s2", 300, 30));
    lines.ingest(&json!({
        "jsonl": more, "agent_runtime": "opencode", "source_identity": source,
        "from_offset": journal.len(), "to_offset": journal.len() + more.len(),
    }))?;
    let after = usage(&lines, "")?;
    assert_eq!(after["totals"]["input_tokens"], 450, "{after}");
    Ok(())
}
