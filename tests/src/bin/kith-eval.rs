//! `kith-eval`: the LoCoMo dev retrieval evaluation, one command.
//!
//! Starts a real kith-central on loopback (with the embedded model when
//! `KITH_MODEL_DIR` points at it), ingests every LoCoMo dev session through
//! `POST /api/runs`, asks every question through `POST /api/search` and
//! prints evidence Recall@5/10/20 per mode, as a table and as JSON.

use std::collections::{BTreeMap, HashMap};

use anyhow::Result;
use kith_tests::{locomo, reference_dir, Central};

fn main() -> Result<()> {
    let (sessions, questions) = locomo::load(&reference_dir().join("data/locomo-dev"))?;
    // TEMP (dev sweep): KITH_DEV_DATA keeps the ingested data directory.
    let keep = std::env::var("KITH_DEV_DATA").ok();
    let (central, api, runs) = match keep.as_deref() {
        Some(dir) if std::path::Path::new(dir).join("runs.json").exists() => {
            let dir = std::path::Path::new(dir);
            let central = Central::start_on(&dir.join("data"), &[])?;
            let token = std::fs::read_to_string(dir.join("token"))?;
            let runs: HashMap<String, usize> =
                serde_json::from_slice(&std::fs::read(dir.join("runs.json"))?)?;
            let api = central.client(token.trim());
            (central, api, runs)
        }
        _ => {
            let central = match keep.as_deref() {
                Some(dir) => Central::start_on(&std::path::Path::new(dir).join("data"), &[])?,
                None => Central::start()?,
            };
            let token = central.register("locomo.test", "eval")?;
            let api = central.client(&token);
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
            if let Some(dir) = keep.as_deref() {
                let dir = std::path::Path::new(dir);
                std::fs::write(dir.join("token"), &token)?;
                std::fs::write(dir.join("runs.json"), serde_json::to_vec(&runs)?)?;
            }
            (central, api, runs)
        }
    };
    if let Ok(sweep) = std::env::var("KITH_DEV_SWEEP") {
        let data_dir = central.data_dir.clone();
        drop(central);
        for config in sweep.split(';').filter(|s| !s.trim().is_empty()) {
            let env: Vec<(&str, &str)> = config
                .split(',')
                .filter_map(|kv| kv.trim().split_once('='))
                .collect();
            let c = Central::start_on(&data_dir, &env)?;
            let api = kith_tests::Api {
                base: c.url.clone(),
                token: api.token.clone(),
                http: reqwest::blocking::Client::new(),
            };
            let r = locomo::evaluate(&api, &sessions, &runs, &questions, "hybrid", &[5, 10, 20])?;
            println!(
                "{config:<60} {:>7.3} {:>7.3} {:>7.3}",
                r[&5], r[&10], r[&20]
            );
            drop(c);
        }
        return Ok(());
    }
    let mut all = BTreeMap::new();
    println!("{:<10} {:>9} {:>9} {:>9}", "mode", "R@5", "R@10", "R@20");
    for mode in ["keyword", "semantic", "hybrid"] {
        match locomo::evaluate(&api, &sessions, &runs, &questions, mode, &[5, 10, 20]) {
            Ok(r) => {
                println!("{mode:<10} {:>9.3} {:>9.3} {:>9.3}", r[&5], r[&10], r[&20]);
                all.insert(mode, r);
            }
            Err(e) => println!("{mode:<10} unavailable: {e}"),
        }
    }
    println!("{}", serde_json::to_string(&all)?);
    Ok(())
}
