//! Every fixture's usage against ground truth this file computes on its
//! own from the same bytes (serde_json and string splitting, none of the
//! readers' code), and the same facts whether a transcript is read whole or
//! one line at a time and folded.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use serde_json::Value;

use super::{cost, facts, Fold, PriceTable, Reading};
use crate::fixtures;
use crate::transcript::Format;

/// One model's facts: how many, their [input, output, 5m writes, 1h
/// writes, cache reads], and the recorded cost in nano-dollars.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Sum {
    n_facts: u64,
    tokens: [u64; 5],
    nano_usd: i64,
}

/// Per model ("" for none), and the records refused.
type Totals = (BTreeMap<String, Sum>, u64);

fn nano(usd: f64) -> i64 {
    (usd * 1e9).round() as i64
}

fn add(
    totals: &mut BTreeMap<String, Sum>,
    model: Option<&str>,
    tokens: [u64; 5],
    usd: Option<f64>,
) {
    let sum = totals
        .entry(model.unwrap_or_default().to_owned())
        .or_default();
    sum.n_facts += 1;
    for (t, n) in sum.tokens.iter_mut().zip(tokens) {
        *t += n;
    }
    sum.nano_usd += usd.map_or(0, nano);
}

fn totals_of(r: &Reading) -> Totals {
    let mut totals = BTreeMap::new();
    for f in &r.facts {
        add(
            &mut totals,
            f.model.as_deref(),
            f.tokens.counts(),
            f.cost_usd,
        );
    }
    (totals, r.n_refused)
}

/// A count as the agents write them: missing or null is 0, anything but a
/// non-negative integer up to `max` is no count.
fn n(v: &Value, max: u64) -> Option<u64> {
    if v.is_null() {
        return Some(0);
    }
    v.as_u64().filter(|&n| n <= max)
}

const RESPONSE: u64 = 1_000_000_000;
const RUNNING: u64 = 1_000_000_000_000;

/// Every JSON value of `bytes`, line by line, several on a line too.
fn records(bytes: &[u8]) -> Vec<Value> {
    bytes
        .split(|&c| c == b'\n')
        .flat_map(|line| {
            serde_json::Deserializer::from_slice(line)
                .into_iter::<Value>()
                .map_while(Result::ok)
        })
        .collect()
}

/// A recorded cost as the module documentation says it is read: 0 for a
/// fact with tokens is no cost.
fn usd(v: &Value, tokens: [u64; 5]) -> Option<f64> {
    v.as_f64().filter(|&x| x > 0.0 || tokens == [0; 5])
}

fn claude_truth(bytes: &[u8]) -> Totals {
    let mut order = Vec::new();
    let mut last: HashMap<String, (Option<String>, [u64; 5])> = HashMap::new();
    let mut refused = 0;
    for v in records(bytes) {
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
        let (Some(id), true, Some(counts)) = (
            m["id"].as_str(),
            u.is_object(),
            counts.into_iter().collect::<Option<Vec<u64>>>(),
        ) else {
            refused += 1;
            continue;
        };
        let key = format!("{id}\n{}", v["requestId"].as_str().unwrap_or_default());
        if !last.contains_key(&key) {
            order.push(key.clone());
        }
        let counts: [u64; 5] = counts.try_into().unwrap_or_default();
        last.insert(key, (m["model"].as_str().map(str::to_owned), counts));
    }
    let mut totals = BTreeMap::new();
    for key in order {
        let (model, counts) = &last[&key];
        add(&mut totals, model.as_deref(), *counts, None);
    }
    (totals, refused)
}

fn codex_truth(bytes: &[u8]) -> Totals {
    let mut totals = BTreeMap::new();
    let (mut model, mut before): (Option<String>, Option<[u64; 3]>) = (None, None);
    let mut refused = 0;
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
        let (i, c, o) = (
            n(&t["input_tokens"], RUNNING),
            n(&t["cached_input_tokens"], RUNNING),
            n(&t["output_tokens"], RUNNING),
        );
        let (Some(i), Some(c), Some(o), true) = (i, c, o, t.is_object()) else {
            refused += 1;
            continue;
        };
        let Some(fresh) = i.checked_sub(c) else {
            refused += 1;
            continue;
        };
        let now = [fresh, o, c];
        let added = match before {
            Some(b) if now.iter().zip(b).all(|(x, y)| *x >= y) => {
                [now[0] - b[0], now[1] - b[1], now[2] - b[2]]
            }
            _ => now,
        };
        before = Some(now);
        if added != [0; 3] {
            add(
                &mut totals,
                model.as_deref(),
                [added[0], added[1], 0, 0, added[2]],
                None,
            );
        }
    }
    (totals, refused)
}

fn gemini_truth(messages: &[Value]) -> Totals {
    let mut order = Vec::new();
    let mut last: HashMap<&str, &Value> = HashMap::new();
    let mut refused = 0;
    for m in messages {
        if m["type"] != "gemini" || m["tokens"].is_null() {
            continue;
        }
        let Some(id) = m["id"].as_str() else {
            refused += 1;
            continue;
        };
        if last.insert(id, m).is_none() {
            order.push(id);
        }
    }
    let mut totals = BTreeMap::new();
    for id in order {
        let m = last[id];
        let t = &m["tokens"];
        let [i, o, c, th, tool] =
            ["input", "output", "cached", "thoughts", "tool"].map(|k| n(&t[k], RESPONSE));
        match (i, o, c, th, tool) {
            (Some(i), Some(o), Some(c), Some(th), Some(tool)) if c <= i => {
                add(
                    &mut totals,
                    m["model"].as_str(),
                    [i - c + tool, o + th, 0, 0, c],
                    None,
                );
            }
            _ => refused += 1,
        }
    }
    (totals, refused)
}

/// The messages of a Gemini CLI JSONL session, every copy, in order.
fn gemini_messages(bytes: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    for v in records(bytes) {
        match v["$set"]["messages"].as_array() {
            Some(listed) => out.extend(listed.iter().cloned()),
            None => out.push(v),
        }
    }
    out
}

fn pi_truth(bytes: &[u8]) -> Totals {
    let mut totals = BTreeMap::new();
    let mut refused = 0;
    for v in records(bytes) {
        let (m, u) = (&v["message"], &v["message"]["usage"]);
        if v["type"] != "message" || m["role"] != "assistant" || u.is_null() {
            continue;
        }
        let counts = ["input", "output", "cacheWrite", "cacheRead"].map(|k| n(&u[k], RESPONSE));
        let cost = &u["cost"]["total"];
        let bad_cost = cost.as_f64().is_some_and(|x| !(0.0..=1000.0).contains(&x));
        match counts {
            [Some(i), Some(o), Some(w), Some(r)] if !bad_cost => {
                let tokens = [i, o, w, 0, r];
                add(&mut totals, m["model"].as_str(), tokens, usd(cost, tokens));
            }
            _ => refused += 1,
        }
    }
    (totals, refused)
}

fn copilot_truth(bytes: &[u8]) -> Totals {
    let mut totals = BTreeMap::new();
    for v in records(bytes) {
        if v["type"] != "session.shutdown" {
            continue;
        }
        let d = &v["data"];
        let details = |t: &Value| {
            ["input", "output", "cache_write", "cache_read"]
                .map(|k| t[k]["tokenCount"].as_u64().unwrap_or_default())
        };
        let mut any = false;
        for (model, m) in d["modelMetrics"].as_object().into_iter().flatten() {
            let [i, o, w, r] = if m["tokenDetails"].is_object() {
                details(&m["tokenDetails"])
            } else if m["usage"].is_object() {
                let u = &m["usage"];
                let [i, o, r, w] = [
                    "inputTokens",
                    "outputTokens",
                    "cacheReadTokens",
                    "cacheWriteTokens",
                ]
                .map(|k| u[k].as_u64().unwrap_or_default());
                [i - r - w, o, w, r]
            } else {
                continue;
            };
            any = true;
            add(&mut totals, Some(model), [i, o, w, 0, r], None);
        }
        if !any && d["tokenDetails"].is_object() {
            let [i, o, w, r] = details(&d["tokenDetails"]);
            add(
                &mut totals,
                d["currentModel"].as_str(),
                [i, o, w, 0, r],
                None,
            );
        }
    }
    (totals, 0)
}

/// OpenCode's storage folder (before v1.2) as the journal kith's agent
/// writes of it: session, message and part rows, one line each.
fn opencode_journal(storage: &Path) -> String {
    let json = |p: &Path| -> Value {
        std::fs::read(p)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or(Value::Null)
    };
    let files = |dir: &str| -> Vec<PathBuf> {
        let mut all = Vec::new();
        for sub in std::fs::read_dir(storage.join(dir))
            .into_iter()
            .flatten()
            .flatten()
        {
            for f in std::fs::read_dir(sub.path())
                .into_iter()
                .flatten()
                .flatten()
            {
                all.push(f.path());
            }
        }
        all.sort();
        all
    };
    let mut out = String::new();
    for path in files("message") {
        let m = json(&path);
        let line = serde_json::json!({"kind": "message", "id": m["id"], "session_id": m["sessionID"], "data": m});
        out.push_str(&format!("{line}\n"));
    }
    for path in files("part") {
        let p = json(&path);
        let line = serde_json::json!({"kind": "part", "id": p["id"], "message_id": p["messageID"], "session_id": p["sessionID"], "data": p});
        out.push_str(&format!("{line}\n"));
    }
    out
}

fn opencode_truth(storage: &Path) -> Totals {
    let mut totals = BTreeMap::new();
    let journal = opencode_journal(storage);
    let rows = records(journal.as_bytes());
    for m in rows.iter().filter(|r| r["kind"] == "message") {
        let d = &m["data"];
        if d["role"] != "assistant" {
            continue;
        }
        let steps: Vec<&Value> = rows
            .iter()
            .filter(|r| {
                r["kind"] == "part"
                    && r["message_id"] == m["id"]
                    && r["data"]["type"] == "step-finish"
            })
            .map(|r| &r["data"])
            .collect();
        let of = |t: &Value| {
            let g = |k: &Value| k.as_u64().unwrap_or_default();
            [
                g(&t["input"]),
                g(&t["output"]) + g(&t["reasoning"]),
                g(&t["cache"]["write"]),
                0,
                g(&t["cache"]["read"]),
            ]
        };
        let tokens = if steps.is_empty() {
            if d["tokens"].is_null() {
                continue;
            }
            of(&d["tokens"])
        } else {
            steps.iter().fold([0; 5], |s, step| {
                let t = of(&step["tokens"]);
                [s[0] + t[0], s[1] + t[1], s[2] + t[2], 0, s[4] + t[4]]
            })
        };
        let step_sum: Option<f64> = steps.iter().map(|s| s["cost"].as_f64()).sum();
        let cost =
            usd(&d["cost"], tokens).or(step_sum.filter(|_| !steps.is_empty()).filter(|&x| x > 0.0));
        let model = d["modelID"].as_str().or(d["model"]["modelID"].as_str());
        add(&mut totals, model, tokens, cost);
    }
    (totals, 0)
}

fn aider_truth(bytes: &[u8]) -> Totals {
    let text = String::from_utf8_lossy(bytes);
    let lines: Vec<&str> = text.lines().collect();
    let mut totals = BTreeMap::new();
    let mut refused = 0;
    let mut model: Option<String> = None;
    let amount = |s: &str| -> Option<u64> {
        let (num, mult) = if let Some(k) = s.strip_suffix('k') {
            (k, 1000.0)
        } else if let Some(m) = s.strip_suffix('M') {
            (m, 1_000_000.0)
        } else {
            (s, 1.0)
        };
        if num.starts_with('-') {
            return None;
        }
        num.parse::<f64>().ok().map(|x| (x * mult).round() as u64)
    };
    for (at, line) in lines.iter().enumerate() {
        if line.starts_with("# aider chat started at ") {
            model = None;
        }
        if let Some(m) = line
            .strip_prefix("> Main model: ")
            .or(line.strip_prefix("> Model: "))
        {
            model = m.split(" with ").next().map(str::to_owned);
        }
        let Some(report) = line.strip_prefix("> Tokens: ") else {
            continue;
        };
        let (counts, cost) = match report.split_once(" Cost: $") {
            Some((c, k)) => (c, Some(k)),
            None => (
                report,
                lines.get(at + 1).and_then(|l| l.strip_prefix("Cost: $")),
            ),
        };
        let mut got: HashMap<&str, Option<u64>> = HashMap::new();
        for item in counts.trim_end().trim_end_matches('.').split(", ") {
            if let Some((num, label)) = item.split_once(' ') {
                got.insert(label, amount(num));
            }
        }
        let get = |k: &str| got.get(k).copied().unwrap_or(Some(0));
        let (Some(sent), Some(write), Some(hit), Some(received)) = (
            get("sent"),
            get("cache write"),
            get("cache hit"),
            get("received"),
        ) else {
            refused += 1;
            continue;
        };
        let usd = cost
            .and_then(|c| c.split(" message").next())
            .and_then(|c| c.parse::<f64>().ok())
            .filter(|&c| c > 0.0);
        let tokens = [sent.saturating_sub(write + hit), received, write, 0, hit];
        add(&mut totals, model.as_deref(), tokens, usd);
    }
    (totals, refused)
}

/// `dir`'s files (not folders) ending in `suffix`, sorted.
fn files_in(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.to_string_lossy().ends_with(suffix))
        .collect();
    out.sort();
    out
}

fn usage_fixture(name: &str) -> (String, Vec<u8>) {
    let rel = format!("usage/{name}");
    (format!("repo:{rel}"), fixtures::read(&rel))
}

/// Checks one transcript against its ground truth; returns its facts.
fn check(name: &str, format: Format, bytes: &[u8], truth: Totals) -> Reading {
    let r = facts(format, bytes);
    assert_eq!(totals_of(&r), truth, "{name}");
    r
}

#[test]
fn what_opencode_carries_between_deltas_is_bounded_by_its_responses() {
    let journal = opencode_journal(&fixtures::repo_dir().join("opencode/storage"));
    let carried = crate::usage::carry(Format::OpenCode, journal.as_bytes());
    let text = String::from_utf8_lossy(&carried);
    assert!(carried.len() < journal.len(), "{text}");
    assert!(
        !text.contains("\"type\":\"text\""),
        "text parts are not carried: {text}"
    );
    assert_eq!(
        facts(Format::OpenCode, &carried),
        facts(Format::OpenCode, journal.as_bytes())
    );
    // A message written again a thousand times, its step once: carried,
    // its last version alone.
    let mut long = String::new();
    for i in 0..1000 {
        let line = serde_json::json!({"kind": "message", "id": "m1", "data": {"role": "assistant",
            "modelID": "claude-sonnet-4-5", "time": {"created": 1_767_000_000_000_i64},
            "tokens": {"input": i, "output": 1}}});
        long.push_str(&format!("{line}\n"));
    }
    let carried = crate::usage::carry(Format::OpenCode, long.as_bytes());
    assert_eq!(carried.iter().filter(|b| **b == b'\n').count(), 1);
    let r = facts(Format::OpenCode, &carried);
    assert_eq!(r.facts.len(), 1);
    assert_eq!(r.facts[0].tokens.input, 999);
    assert_eq!(r, facts(Format::OpenCode, long.as_bytes()));
    // The other formats read each delta alone and carry nothing.
    assert!(crate::usage::carry(Format::Gemini, long.as_bytes()).is_empty());
}

/// OpenCode's journal a line a delta, each read after what was carried of
/// the lines before (as central reads it), against the whole journal.
#[test]
fn opencode_read_after_what_it_carried_counts_as_read_whole() {
    let mut storages = vec![fixtures::repo_dir().join("opencode/storage")];
    if let Some(dir) = fixtures::third_party_dir() {
        storages.push(dir.join("opencode/jazzyalex__agent-sessions__storage_v2"));
    }
    let mut n_facts = 0;
    for storage in storages {
        let journal = opencode_journal(&storage);
        let whole = facts(Format::OpenCode, journal.as_bytes());
        // Steps first, then their messages: the order that needs the carry.
        let mut lines: Vec<&str> = journal.lines().collect();
        lines.reverse();
        for order in [journal.lines().collect::<Vec<_>>(), lines] {
            let mut carried = Vec::new();
            let mut all = Vec::new();
            let mut last = Reading::default();
            for line in order {
                let delta = format!("{line}\n");
                all.extend_from_slice(delta.as_bytes());
                let with = [carried.as_slice(), delta.as_bytes()].concat();
                last = facts(Format::OpenCode, &with);
                carried = crate::usage::carry(Format::OpenCode, &with);
                assert_eq!(last, facts(Format::OpenCode, &all), "{}", storage.display());
            }
            assert_eq!(last.facts.len(), whole.facts.len(), "{}", storage.display());
        }
        n_facts += whole.facts.len();
    }
    assert!(n_facts > 0);
}

#[test]
fn every_fixture_counts_what_the_ground_truth_counts() {
    let mut n_facts: BTreeMap<&str, usize> = BTreeMap::new();
    let mut seen =
        |agent: &'static str, r: &Reading| *n_facts.entry(agent).or_default() += r.facts.len();

    for f in fixtures::all() {
        let bytes = std::fs::read(&f.path).unwrap_or_else(|e| panic!("{}: {e}", f.name));
        let (format, truth) = match f.runtime {
            "claude-code" => (Format::ClaudeCode, claude_truth(&bytes)),
            "codex" => (Format::Codex, codex_truth(&bytes)),
            "gemini" => (Format::Gemini, gemini_truth(&gemini_messages(&bytes))),
            "pi" => (Format::Pi, pi_truth(&bytes)),
            "copilot" => (Format::Copilot, copilot_truth(&bytes)),
            // Cursor's transcripts hold no counts.
            _ => (Format::Cursor, Totals::default()),
        };
        let r = check(&f.name, format, &bytes, truth);
        seen(f.runtime, &r);
    }

    let (name, bytes) = usage_fixture("claude-code-edge.jsonl");
    let r = check(&name, Format::ClaudeCode, &bytes, claude_truth(&bytes));
    assert_eq!((r.facts.len(), r.n_refused), (3, 2), "{name}");
    let (name, bytes) = usage_fixture("codex-restart.jsonl");
    let r = check(&name, Format::Codex, &bytes, codex_truth(&bytes));
    assert_eq!((r.facts.len(), r.n_refused), (6, 2), "{name}");

    let mut aider = vec![usage_fixture("aider-suffixes.aider.chat.history.md")];
    aider.push((
        "repo:aider/tally".into(),
        fixtures::read("aider/tally/.aider.chat.history.md"),
    ));
    let mut opencode = vec![(
        "repo:opencode".to_owned(),
        fixtures::repo_dir().join("opencode/storage"),
    )];
    if let Some(dir) = fixtures::third_party_dir() {
        for path in files_in(&dir.join("aider"), ".md") {
            let bytes = std::fs::read(&path).unwrap_or_default();
            aider.push((path.display().to_string(), bytes));
        }
        opencode.push((
            "third-party:opencode/storage_v2".into(),
            dir.join("opencode/jazzyalex__agent-sessions__storage_v2"),
        ));
        // Gemini CLI's sessions before v0.39, as the agent journals them:
        // the metadata, then each message on a line.
        for path in files_in(&dir.join("gemini"), ".json") {
            let session: Value = serde_json::from_slice(&std::fs::read(&path).unwrap_or_default())
                .unwrap_or_default();
            let messages = session["messages"].as_array().cloned().unwrap_or_default();
            let mut journal = format!(
                "{}\n",
                serde_json::json!({"sessionId": session["sessionId"]})
            );
            for m in &messages {
                journal.push_str(&format!("{m}\n"));
            }
            let r = check(
                &path.display().to_string(),
                Format::Gemini,
                journal.as_bytes(),
                gemini_truth(&messages),
            );
            seen("gemini", &r);
        }
    }
    for (name, bytes) in &aider {
        let r = check(name, Format::Aider, bytes, aider_truth(bytes));
        seen("aider", &r);
    }
    for (name, storage) in &opencode {
        let journal = opencode_journal(storage);
        let r = check(
            name,
            Format::OpenCode,
            journal.as_bytes(),
            opencode_truth(storage),
        );
        seen("opencode", &r);
    }

    // The fixtures are not all empty: every agent that records usage has
    // some in the repository's own set.
    for agent in ["claude-code", "codex", "pi", "aider", "opencode"] {
        assert!(
            n_facts.get(agent).copied().unwrap_or_default() > 0,
            "{agent}: {n_facts:?}"
        );
    }
    if fixtures::third_party_dir().is_some() {
        for agent in ["gemini", "copilot"] {
            assert!(
                n_facts.get(agent).copied().unwrap_or_default() > 0,
                "{agent}: {n_facts:?}"
            );
        }
    }
}

/// The reason for [`super::Merge::Last`]: Claude Code's first line of a
/// response holds a fraction of its output.
#[test]
fn claude_responses_count_their_last_lines_output_not_their_first() {
    let mut n_pairs_differ = 0;
    let mut first_output = 0;
    let mut last_output = 0;
    for f in fixtures::all()
        .iter()
        .filter(|f| f.runtime == "claude-code")
    {
        let bytes = std::fs::read(&f.path).unwrap_or_default();
        let mut first: HashMap<String, u64> = HashMap::new();
        let mut lines_of: HashMap<String, Vec<Value>> = HashMap::new();
        for v in records(&bytes) {
            let m = &v["message"];
            if v["type"] != "assistant" || m["usage"].is_null() {
                continue;
            }
            let key = format!("{}\n{}", m["id"], v["requestId"]);
            first
                .entry(key.clone())
                .or_insert(m["usage"]["output_tokens"].as_u64().unwrap_or_default());
            lines_of.entry(key).or_default().push(m["usage"].clone());
        }
        n_pairs_differ += lines_of
            .values()
            .filter(|copies| copies.iter().any(|c| *c != copies[0]))
            .count();
        first_output += first.values().sum::<u64>();
        last_output += facts(Format::ClaudeCode, &bytes)
            .facts
            .iter()
            .map(|f| f.tokens.output)
            .sum::<u64>();
    }
    assert!(n_pairs_differ > 0);
    assert!(
        last_output > first_output,
        "{last_output} <= {first_output}"
    );
}

/// Each line a delta, folded in order, against the whole file read once.
/// (Aider's cost line after a report stays with it: Aider writes both at
/// once.)
fn line_by_line(format: Format, bytes: &[u8]) -> Reading {
    let mut deltas: Vec<&[u8]> = Vec::new();
    let mut start = 0;
    for (at, _) in bytes.iter().enumerate().filter(|(_, &c)| c == b'\n') {
        let next = &bytes[at + 1..];
        if format == Format::Aider && next.starts_with(b"Cost: $") {
            continue;
        }
        deltas.push(&bytes[start..=at]);
        start = at + 1;
    }
    deltas.push(&bytes[start..]);
    let mut fold = Fold::default();
    for delta in deltas.into_iter().filter(|d| !d.is_empty()) {
        fold.add(facts(format, delta));
    }
    fold.into_reading()
}

#[test]
fn reading_line_by_line_and_folding_gives_what_reading_whole_gives() {
    let mut files: Vec<(String, Format, Vec<u8>)> = Vec::new();
    for f in fixtures::all() {
        let format = match f.runtime {
            "claude-code" => Format::ClaudeCode,
            "codex" => Format::Codex,
            "gemini" => Format::Gemini,
            "pi" => Format::Pi,
            "copilot" => Format::Copilot,
            _ => continue,
        };
        files.push((f.name, format, std::fs::read(&f.path).unwrap_or_default()));
    }
    for (name, format) in [
        ("claude-code-edge.jsonl", Format::ClaudeCode),
        ("codex-restart.jsonl", Format::Codex),
        ("aider-suffixes.aider.chat.history.md", Format::Aider),
    ] {
        let (name, bytes) = usage_fixture(name);
        files.push((name, format, bytes));
    }
    files.push((
        "repo:aider/tally".into(),
        Format::Aider,
        fixtures::read("aider/tally/.aider.chat.history.md"),
    ));
    let mut n_facts = 0;
    for (name, format, bytes) in &files {
        let whole = facts(*format, bytes);
        n_facts += whole.facts.len();
        assert_eq!(line_by_line(*format, bytes), whole, "{name}");
        // And a fold's own output, added again, continues it unchanged.
        let mut again = Fold::default();
        again.add(whole.clone());
        assert_eq!(again.into_reading(), whole, "{name}");
    }
    assert!(n_facts > 0);
}

#[test]
fn the_edge_fixtures_price_what_is_known_and_nothing_else() {
    let table = PriceTable::builtin();
    let (_, bytes) = usage_fixture("claude-code-edge.jsonl");
    let r = facts(Format::ClaudeCode, &bytes);
    let priced: Vec<(Option<&str>, Option<f64>, Option<&str>)> = r
        .facts
        .iter()
        .map(|f| {
            (
                f.model.as_deref(),
                cost(f, table).map(|c| (c * 1e6).round() / 1e6),
                f.time.as_deref(),
            )
        })
        .collect();
    // Opus 4.6: 6 x $5 + 418 x $25 + 1000 x $6.25 + 2120 x $10 + 21040 x $0.50
    // per million; Sonnet 4.5 (dated): 4 x $3 + 57 x $15 + 512 x $3.75 +
    // 24160 x $0.30; the proxy's model has no price.
    assert_eq!(
        priced,
        [
            (
                Some("claude-opus-4-6"),
                Some(0.04845),
                Some("2026-05-20T09:00:05.000Z")
            ),
            (Some("claude-sonnet-4-5-20250929"), Some(0.010035), None),
            (Some("qwen3.7-plus"), None, Some("2026-05-20T09:01:00.000Z")),
        ]
    );
}
