//! `kith-eval`: the LoCoMo dev retrieval evaluation, one command.
//!
//! Starts a real kith-central on loopback (with the embedded model when
//! `KITH_MODEL_DIR` points at it), ingests every LoCoMo dev session through
//! `POST /api/runs`, asks the questions of a split through `POST
//! /api/search` and prints, per split, mode and question category, evidence
//! Recall@5/10/20 over chunks and session-level hit@k and Recall@k from the
//! ranked chunks and from a search grouped by conversation, as tables and
//! as JSON.
//!
//! `--split tune|report|all` (default all): the first three conversations
//! in id order are for tuning, the other two are held out and reported on
//! (`locomo::Split`). Every conversation is ingested whichever is asked.
//!
//! `--dump FILE`: also writes each question's 50 ranked hits per mode
//! (`locomo::pool_hits`), one JSON object per line, for re-ranking
//! offline: what BENCHMARKS.md calls offline figures are computed from it.
//!
//! `--pack`: hybrid only, and beside its recall the context pack's
//! (`POST /api/context`): evidence recall within a 1,000 / 2,000 / 4,000
//! token pack (`locomo::pack_score`); then each question of the split once
//! more as a `kith mcp` search (hybrid) from the Python MCP SDK client
//! over stdio (tests/mcp/client.py, in the venv tests/run.sh makes),
//! timed per call, beside the same search straight to `POST /api/search`.
//!
//! `--floor FILE`: the relevance floor instead: each answerable question
//! of the split, its adversarial ones (LoCoMo category 5) and the
//! `locomo::NONSENSE` and `locomo::ABSENT` queries asked in each of its
//! conversations, hybrid, top 10; one JSON line per query to FILE
//! (`locomo::floor_hits`: each hit's coverage, similarity, weak and the
//! evidence it holds, for tuning the floor offline) and the figures per
//! split (`locomo::floor_summary`).
//!
//! `--meilisearch`: the same, with central on the Meilisearch backend (a
//! server of its own, started as the conformance tests start one), whose
//! engine ranks keyword and hybrid searches itself.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use kith_tests::locomo::{self, Scores, Split};
use kith_tests::meili::Meili;
use kith_tests::{reference_dir, Central};
use serde_json::{json, Value};

const MODES: [&str; 3] = ["keyword", "semantic", "hybrid"];

struct Args {
    split: Split,
    pack: bool,
    floor: Option<std::path::PathBuf>,
    dump: Option<std::path::PathBuf>,
    meilisearch: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        split: Split::All,
        pack: false,
        floor: None,
        dump: None,
        meilisearch: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--split" => {
                args.split = Split::parse(&it.next().context("--split needs a value")?)?;
            }
            "--pack" => args.pack = true,
            "--floor" => args.floor = Some(it.next().context("--floor needs a file")?.into()),
            "--dump" => args.dump = Some(it.next().context("--dump needs a file")?.into()),
            "--meilisearch" => args.meilisearch = true,
            "-h" | "--help" => {
                println!(
                    "usage: kith-eval [--split tune|report|all] [--pack] [--dump FILE] [--floor FILE] [--meilisearch]\n\
                     tune: the first {} LoCoMo dev conversations in id order; report: the rest",
                    locomo::TUNE_CONVERSATIONS
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(args)
}

fn main() -> Result<()> {
    let Args {
        split,
        pack,
        floor,
        dump,
        meilisearch,
    } = parse_args()?;
    let mut dump = match &dump {
        Some(path) => Some(std::io::BufWriter::new(
            std::fs::File::create(path).with_context(|| path.display().to_string())?,
        )),
        None => None,
    };
    let (sessions, mut questions) = locomo::load(&reference_dir().join("data/locomo-dev"))?;
    let asked = split.conversations(&sessions);
    questions.retain(|q| asked.contains(&q.conversation));
    let meili = meilisearch.then(Meili::start).transpose()?;
    let central = match &meili {
        Some(m) => Central::start_with(&m.central_env("kith-eval"))?,
        None => Central::start()?,
    };
    let token = central.register("locomo.test", "eval")?;
    let api = central.client(&token);
    eprintln!(
        "ingesting {} sessions into central on the {} backend, then asking {} questions ({} split) per mode",
        sessions.len(),
        if meilisearch { "Meilisearch" } else { "embedded" },
        questions.len(),
        split.name()
    );
    let runs = locomo::ingest(&api, &sessions)?;
    if kith_tests::model_dir()?.is_some() {
        for id in runs.keys() {
            api.wait_embedded(id, std::time::Duration::from_secs(1800))?;
        }
    }
    if let Some(path) = floor {
        return relevance_floor(&api, &sessions, &runs, &questions, split, &path);
    }
    let mut scores: BTreeMap<&str, Vec<Scores>> = BTreeMap::new();
    let modes: &[&str] = if pack { &["hybrid"] } else { &MODES };
    for &mode in modes {
        match locomo::evaluate(&api, &sessions, &runs, &questions, mode, &[5, 10, 20]) {
            Ok(mut r) => {
                if let Some(out) = dump.as_mut() {
                    use std::io::Write;
                    for q in &questions {
                        let line = locomo::pool_hits(&api, &sessions, &runs, q, mode)?;
                        writeln!(out, "{line}")?;
                    }
                    out.flush()?;
                }
                if pack {
                    for (q, s) in questions.iter().zip(&mut r) {
                        s.extend(locomo::pack_score(&api, &sessions, &runs, q)?);
                    }
                }
                scores.insert(mode, r);
            }
            Err(e) => println!("{mode:<10} unavailable: {e}"),
        }
    }

    let shown = match split {
        Split::All => vec![Split::All, Split::Tune, Split::Report],
        one => vec![one],
    };
    let mut all = serde_json::Map::new();
    for part in shown {
        let convs = part.conversations(&sessions);
        let picked: Vec<usize> = (0..questions.len())
            .filter(|&i| convs.contains(&questions[i].conversation))
            .collect();
        println!(
            "\n{} split: {} ({} questions; tune = the first {} conversations in id order, \
             report = the rest, held out)",
            part.name(),
            convs.join(", "),
            picked.len(),
            locomo::TUNE_CONVERSATIONS
        );
        let mut by_mode = serde_json::Map::new();
        for (&mode, per_q) in &scores {
            let mut by_cat = serde_json::Map::new();
            let mut cats: Vec<(String, Vec<usize>)> = vec![("all".into(), picked.clone())];
            for c in 1..=4 {
                let of: Vec<usize> = picked
                    .iter()
                    .copied()
                    .filter(|&i| questions[i].category == c)
                    .collect();
                if !of.is_empty() {
                    cats.push((locomo::category_name(c).into(), of));
                }
            }
            for (cat, of) in cats {
                let mut m = locomo::mean(of.iter().map(|&i| &per_q[i]));
                m.insert("questions".into(), of.len() as f64);
                by_cat.insert(cat, json!(m));
            }
            by_mode.insert(mode.into(), Value::Object(by_cat));
        }
        print_tables(&by_mode);
        if pack {
            print_pack(&by_mode);
        }
        all.insert(part.name().into(), Value::Object(by_mode));
    }
    if pack {
        latency(&central.url, &token, &api, &questions)?;
    }
    let doc = json!({
        "split": split.name(),
        "tune": Split::Tune.conversations(&sessions),
        "report": Split::Report.conversations(&sessions),
        "results": all,
    });
    println!("{doc}");
    Ok(())
}

/// The relevance floor's figures (`--floor`), per split.
fn relevance_floor(
    api: &kith_tests::Api,
    sessions: &[locomo::Session],
    runs: &std::collections::HashMap<String, usize>,
    questions: &[locomo::Question],
    split: Split,
    path: &std::path::Path,
) -> Result<()> {
    use std::io::Write;
    let convs = split.conversations(sessions);
    let mut asked: Vec<(&str, locomo::Question)> = questions
        .iter()
        .map(|q| ("answerable", q.clone()))
        .collect();
    for q in locomo::adversarial(&reference_dir().join("data/locomo-dev"))? {
        if convs.contains(&q.conversation) {
            asked.push(("adversarial", q));
        }
    }
    for conv in &convs {
        for (kind, list) in [("nonsense", locomo::NONSENSE), ("absent", locomo::ABSENT)] {
            for text in list {
                asked.push((
                    kind,
                    locomo::Question {
                        conversation: conv.clone(),
                        category: 0,
                        text: (*text).to_owned(),
                        evidence: Vec::new(),
                    },
                ));
            }
        }
    }
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(path).with_context(|| path.display().to_string())?,
    );
    let mut rows = Vec::new();
    for (kind, q) in &asked {
        let row = locomo::floor_hits(api, sessions, runs, q, kind)?;
        writeln!(out, "{row}")?;
        rows.push(row);
    }
    out.flush()?;
    let shown = match split {
        Split::All => vec![Split::All, Split::Tune, Split::Report],
        one => vec![one],
    };
    let mut all = serde_json::Map::new();
    for part in shown {
        let convs = part.conversations(sessions);
        let of: Vec<Value> = rows
            .iter()
            .filter(|r| convs.iter().any(|c| r["conv"] == c.as_str()))
            .cloned()
            .collect();
        let summary = locomo::floor_summary(&of);
        println!(
            "{} split: {}",
            part.name(),
            serde_json::to_string_pretty(&summary)?
        );
        all.insert(part.name().into(), summary);
    }
    println!("{}", Value::Object(all));
    Ok(())
}

/// Chunk recall, then session-level hit@k and R@k: from the ranked chunks
/// (the same 20 hits), from a search grouped by conversation (10 groups),
/// and from 50 ranked chunks (the grouped search's pool).
fn print_tables(by_mode: &serde_json::Map<String, Value>) {
    let rows = |f: &dyn Fn(&str, &str, &Value)| {
        for (mode, by_cat) in by_mode {
            for (cat, m) in by_cat.as_object().into_iter().flatten() {
                f(mode, cat, m);
            }
        }
    };
    let at = |m: &Value, key: &str| m[key].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<9} {:<12} {:>4} {:>6} {:>6} {:>6} {:>8} {:>9} {:>9}",
        "mode", "category", "n", "R@5", "R@10", "R@20", "20 turns", "turns/hit", "sessions"
    );
    rows(&|mode, cat, m| {
        println!(
            "{mode:<9} {cat:<12} {:>4} {:>6.3} {:>6.3} {:>6.3} {:>8.3} {:>9.2} {:>9.2}",
            at(m, "questions"),
            at(m, "recall@5"),
            at(m, "recall@10"),
            at(m, "recall@20"),
            at(m, "recall@20turns"),
            at(m, "turns_per_hit@10"),
            at(m, "sessions_in_hits"),
        );
    });
    println!(
        "sessions, hit@1/5/10 and R@1/5/10: from the 20 ranked hits | grouped by conversation \
         (10 groups) | from 50 ranked hits (the grouped search's pool)"
    );
    let block = |m: &Value, prefix: &str| {
        let mut s = String::new();
        for kind in ["hit", "recall"] {
            for k in locomo::SESSION_KS {
                s.push_str(&format!(
                    " {:>5.3}",
                    at(m, &format!("{prefix}session_{kind}@{k}"))
                ));
            }
        }
        s
    };
    rows(&|mode, cat, m| {
        println!(
            "{mode:<9} {cat:<12}{} |{} |{}",
            block(m, ""),
            block(m, "grouped_"),
            block(m, "pool_"),
        );
    });
}

/// The context pack's evidence recall per budget, beside plain hybrid
/// search's R@10.
fn print_pack(by_mode: &serde_json::Map<String, Value>) {
    let at = |m: &Value, key: &str| m[key].as_f64().unwrap_or(f64::NAN);
    println!(
        "{:<12} {:>4} {:>6} {}",
        "category",
        "n",
        "R@10",
        locomo::PACK_BUDGETS
            .map(|b| format!("{:>8} {:>5} {:>6}", format!("pack{b}"), "psg", "tokens"))
            .join(" ")
    );
    let hybrid = by_mode.get("hybrid").and_then(Value::as_object);
    for (cat, m) in hybrid.into_iter().flatten() {
        let per_budget = locomo::PACK_BUDGETS.map(|b| {
            format!(
                "{:>8.3} {:>5.1} {:>6.0}",
                at(m, &format!("pack_recall@{b}")),
                at(m, &format!("pack_passages@{b}")),
                at(m, &format!("pack_tokens@{b}"))
            )
        });
        println!(
            "{cat:<12} {:>4} {:>6.3} {}",
            at(m, "questions"),
            at(m, "recall@10"),
            per_budget.join(" ")
        );
    }
}

/// p50 and p99 of a hybrid search per question, through `kith mcp` and
/// straight to the API.
fn latency(
    central: &str,
    token: &str,
    api: &kith_tests::Api,
    questions: &[locomo::Question],
) -> Result<()> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("../target/mcp-venv/bin/python");
    if !python.exists() {
        bail!("{} is missing: run tests/run.sh", python.display());
    }
    let home = tempfile::tempdir()?;
    let steps: Vec<Value> = questions
        .iter()
        .map(|q| json!({"op": "call", "tool": "search", "args": {"query": q.text, "mode": "hybrid"}}))
        .collect();
    let plan = json!({
        "command": kith_tests::bin("kith"),
        "args": ["mcp"],
        "env": {"HOME": home.path(), "PATH": std::env::var("PATH").unwrap_or_default(),
                "KITH_CENTRAL_URL": central, "KITH_TOKEN": token},
        "steps": steps,
    });
    let mut child = std::process::Command::new(python)
        .arg(root.join("mcp/client.py"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    std::io::Write::write_all(
        &mut child.stdin.take().context("no stdin")?,
        plan.to_string().as_bytes(),
    )?;
    let out = child.wait_with_output()?;
    anyhow::ensure!(out.status.success(), "the MCP client failed");
    let results: Vec<Value> = serde_json::from_slice(&out.stdout)?;
    let mut mcp: Vec<f64> = Vec::new();
    for r in &results {
        anyhow::ensure!(r["is_error"] == false, "a search failed: {r}");
        mcp.push(r["ms"].as_f64().unwrap_or(f64::NAN));
    }
    anyhow::ensure!(!mcp.is_empty(), "no questions to time");
    let mut direct = Vec::new();
    for q in questions {
        let started = std::time::Instant::now();
        let r = api.post(
            "/api/search",
            &json!({"query": q.text, "mode": "hybrid", "group": "conversation"}),
        )?;
        anyhow::ensure!(r.status == 200, "search failed: {:?}", r.body);
        direct.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() as f64 - 1.0) * p).round() as usize]
    };
    println!(
        "hybrid search, {} questions: kith mcp (stdio round trip) p50 {:.1} ms p99 {:.1} ms; \
         POST /api/search p50 {:.1} ms p99 {:.1} ms",
        mcp.len(),
        pct(&mut mcp, 0.5),
        pct(&mut mcp, 0.99),
        pct(&mut direct, 0.5),
        pct(&mut direct, 0.99)
    );
    Ok(())
}
