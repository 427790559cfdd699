//! The benchmark harness's smoke run: `kith-bench --smoke` measures every
//! figure on a tiny corpus, so the harness cannot rot between full runs.
//! Nothing here asserts a timing; only that each figure was measured.

use std::io::Write as _;
use std::process::Command;

use anyhow::Result;
use kith_tests::bin;

#[test]
fn the_benchmark_smoke_run_measures_every_figure() -> Result<()> {
    let tmp = tempfile::tempdir()?;
    let out = tmp.path().join("bench.json");
    let run = Command::new(bin("kith-bench"))
        .args(["--smoke", "--out"])
        .arg(&out)
        .output()?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert!(stdout.contains("hook, central up"), "a table: {stdout}");

    let r: serde_json::Value = serde_json::from_slice(&std::fs::read(&out)?)?;
    assert_eq!(r["mode"], "smoke");
    for hook in [
        "hook_central_up",
        "hook_central_down",
        "hook_central_up_at_turn_end",
    ] {
        assert_eq!(r["capture"][hook]["n"], 3, "{hook}");
        assert!(r["capture"][hook]["p99_ms"]
            .as_f64()
            .is_some_and(|ms| ms > 0.0));
    }
    assert!(r["capture"]["backfill_mb_per_s_central_down"]
        .as_f64()
        .is_some_and(|x| x > 0.0));
    let corpus = &r["corpus"][0];
    assert!(
        corpus["chunks"].as_u64().is_some_and(|n| n > 20),
        "{corpus}"
    );
    assert_eq!(corpus["search_keyword"]["n"], 5);
    assert!(corpus["central_rss_bytes"].as_u64().is_some_and(|b| b > 0));
    assert_eq!(r["freshness_keyword_ms"]["n"], 3);
    // Quality is measured where the LoCoMo data is (beside a development
    // checkout); a clone says it is absent.
    if !kith_tests::reference_dir().join("data/locomo-dev").is_dir() {
        let absent = r["locomo_dev"]["absent"].as_str();
        assert!(absent.is_some(), "{}", r["locomo_dev"]);
        let _ = writeln!(
            std::io::stderr(),
            "no LoCoMo data at {}: the smoke run's retrieval quality was not checked",
            absent.unwrap_or_default()
        );
        return Ok(());
    }
    // Quality is measured, not timed: keyword search finds most evidence.
    let recall = r["locomo_dev"]["keyword"]["recall@20"]
        .as_f64()
        .unwrap_or(0.0);
    assert!(recall > 0.4, "LoCoMo keyword recall@20 {recall}");
    // The first twenty distinct turns all lie within the first twenty hits'
    // ranges (each hit covers a turn at least): that recall cannot be higher.
    let within = r["locomo_dev"]["keyword"]["recall@20turns"]
        .as_f64()
        .unwrap_or(f64::NAN);
    assert!(within > 0.2 && within <= recall, "within 20 turns {within}");
    // A hit covers its turn, and short turns packed together stay near the
    // reference's two-turn chunks.
    let per_hit = r["locomo_dev"]["keyword"]["turns_per_hit@10"]
        .as_f64()
        .unwrap_or(f64::NAN);
    assert!((1.0..3.0).contains(&per_hit), "turns per hit {per_hit}");
    assert!(r["locomo_dev"]["questions"]
        .as_u64()
        .is_some_and(|n| n > 10));
    Ok(())
}
