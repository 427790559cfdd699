//! `kith-eval`: the LoCoMo dev retrieval evaluation, one command.
//!
//! Starts a real kith-central on loopback (with the embedded model when
//! `KITH_MODEL_DIR` points at it), ingests every LoCoMo dev session through
//! `POST /api/runs`, asks every question through `POST /api/search` and
//! prints evidence Recall@5/10/20 per mode, as a table and as JSON.

use std::collections::BTreeMap;

use anyhow::Result;
use kith_tests::{locomo, reference_dir, Central};

fn main() -> Result<()> {
    let central = Central::start()?;
    let api = central.client(&central.register("locomo.test", "eval")?);
    let (sessions, questions) = locomo::load(&reference_dir().join("data/locomo-dev"))?;
    eprintln!(
        "ingesting {} sessions, then asking {} questions per mode",
        sessions.len(),
        questions.len()
    );
    let runs = locomo::ingest(&api, &sessions)?;
    for id in runs.keys() {
        if kith_tests::model_dir().is_some() {
            api.wait_embedded(id, std::time::Duration::from_secs(1800))?;
        }
    }
    let mut all = BTreeMap::new();
    println!(
        "{:<10} {:>9} {:>9} {:>9} {:>9} {:>14}",
        "mode", "R@5", "R@10", "R@20", "20 turns", "turns per hit"
    );
    for mode in ["keyword", "semantic", "hybrid"] {
        match locomo::evaluate(&api, &sessions, &runs, &questions, mode, &[5, 10, 20]) {
            Ok(r) => {
                let at = |key: &str| r.get(key).copied().unwrap_or(f64::NAN);
                println!(
                    "{mode:<10} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>14.2}",
                    at("recall@5"),
                    at("recall@10"),
                    at("recall@20"),
                    at("recall@20turns"),
                    at("turns_per_hit@10")
                );
                all.insert(mode, r);
            }
            Err(e) => println!("{mode:<10} unavailable: {e}"),
        }
    }
    println!("{}", serde_json::to_string(&all)?);
    Ok(())
}
