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

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use kith_tests::locomo::{self, Scores, Split};
use kith_tests::{reference_dir, Central};
use serde_json::{json, Value};

const MODES: [&str; 3] = ["keyword", "semantic", "hybrid"];

fn parse_args() -> Result<Split> {
    let mut split = Split::All;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--split" => split = Split::parse(&it.next().context("--split needs a value")?)?,
            "-h" | "--help" => {
                println!(
                    "usage: kith-eval [--split tune|report|all]\n\
                     tune: the first {} LoCoMo dev conversations in id order; report: the rest",
                    locomo::TUNE_CONVERSATIONS
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(split)
}

fn main() -> Result<()> {
    let split = parse_args()?;
    let (sessions, mut questions) = locomo::load(&reference_dir().join("data/locomo-dev"))?;
    let asked = split.conversations(&sessions);
    questions.retain(|q| asked.contains(&q.conversation));
    let central = Central::start()?;
    let api = central.client(&central.register("locomo.test", "eval")?);
    eprintln!(
        "ingesting {} sessions, then asking {} questions ({} split) per mode",
        sessions.len(),
        questions.len(),
        split.name()
    );
    let runs = locomo::ingest(&api, &sessions)?;
    if kith_tests::model_dir().is_some() {
        for id in runs.keys() {
            api.wait_embedded(id, std::time::Duration::from_secs(1800))?;
        }
    }
    let mut scores: BTreeMap<&str, Vec<Scores>> = BTreeMap::new();
    for mode in MODES {
        match locomo::evaluate(&api, &sessions, &runs, &questions, mode, &[5, 10, 20]) {
            Ok(r) => {
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
        all.insert(part.name().into(), Value::Object(by_mode));
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
