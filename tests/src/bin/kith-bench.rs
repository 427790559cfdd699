//! `kith-bench`: measures kith on this machine with the real binaries on
//! loopback, prints a table and writes every figure to a JSON file.
//!
//! `--smoke` checks the harness in seconds (the test suite runs it; its
//! numbers mean nothing), `--quick --out FILE.json` takes a few minutes,
//! `--full` grows a corpus to 10k, 100k and 1M chunks (`--chunks` other
//! sizes; document vectors from a stand-in, queries through the real model)
//! and takes under an hour.
//! `--backends [--chunks 10000,100000]` builds the same stand-in corpus in
//! two centrals, one on the embedded backend and one on a Meilisearch the
//! bench starts on loopback, and measures both at each size, interleaved.
//! Build the workspace in release mode first (`cargo build --release
//! --workspace`): the harness runs the binaries next to its own executable.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use kith_shared::fixtures;
use kith_tests::locomo::{self, Split};
use kith_tests::{reference_dir, Api, Central};

/// Mirrors `kith_central::vectorizer::BENCH_STANDIN_VECTORS`.
const BENCH_STANDIN_VECTORS: &str = "KITH_BENCH_STANDIN_VECTORS";
use serde_json::{json, Value};

/// How big a run is: `--smoke` checks the harness in seconds (the test
/// suite runs it), `--quick` takes a few minutes, `--full` under an hour.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Size {
    Smoke,
    Quick,
    Full,
}

impl Size {
    /// (small, quick, full)
    fn pick<T>(self, smoke: T, quick: T, full: T) -> T {
        match self {
            Size::Smoke => smoke,
            Size::Quick => quick,
            Size::Full => full,
        }
    }
}

struct Args {
    size: Size,
    /// Only the capture figures (hook and backfill), in seconds.
    capture_only: bool,
    /// After the corpus phase, keep its central searching in a loop (for a
    /// profiler) until a line arrives on stdin.
    hold: bool,
    out: Option<PathBuf>,
    /// `--backends`: the embedded backend and Meilisearch side by side.
    backends: bool,
    /// `--chunks`: the corpus sizes `--full` or `--backends` grows to.
    chunks: Option<Vec<u64>>,
    /// `--budget-min`: `--backends` stops growing after this long.
    budget_min: f64,
    /// `--usage`: `kith usage` side by side with ccusage (`--ccusage PATH`)
    /// and its report latency over `--messages N` responses.
    usage: bool,
    ccusage: Option<PathBuf>,
    messages: usize,
    /// `--backup`: backup, verify and restore of an archive of `--mb` MB.
    backup: bool,
    mb: u64,
    /// `--attacks`: `/healthz` and search latency under stall attacks, and
    /// the recovery time of a full index disk.
    attacks: bool,
}

fn parse_args() -> Result<Args> {
    let mut args = Args {
        size: Size::Quick,
        capture_only: false,
        hold: false,
        out: None,
        backends: false,
        chunks: None,
        budget_min: 60.0,
        usage: false,
        ccusage: None,
        messages: 1_000_000,
        backup: false,
        mb: 1024,
        attacks: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--smoke" => args.size = Size::Smoke,
            "--quick" => args.size = Size::Quick,
            "--full" => args.size = Size::Full,
            "--capture-only" => args.capture_only = true,
            "--hold" => args.hold = true,
            "--out" => args.out = Some(it.next().context("--out needs a file")?.into()),
            "--backends" => args.backends = true,
            "--usage" => args.usage = true,
            "--backup" => args.backup = true,
            "--attacks" => args.attacks = true,
            "--mb" => {
                args.mb = it
                    .next()
                    .context("--mb needs a size")?
                    .parse()
                    .context("bad --mb")?;
            }
            "--ccusage" => {
                args.ccusage = Some(it.next().context("--ccusage needs ccusage's path")?.into())
            }
            "--messages" => {
                args.messages = it
                    .next()
                    .context("--messages needs a count")?
                    .parse()
                    .context("bad --messages")?;
            }
            "--chunks" => {
                args.chunks = Some(
                    it.next()
                        .context("--chunks needs sizes, like 10000,100000")?
                        .split(',')
                        .map(|n| n.trim().parse().with_context(|| format!("bad size {n:?}")))
                        .collect::<Result<_>>()?,
                );
            }
            "--budget-min" => {
                args.budget_min = it
                    .next()
                    .context("--budget-min needs minutes")?
                    .parse()
                    .context("bad --budget-min")?;
            }
            "-h" | "--help" => {
                println!(
                    "usage: kith-bench [--smoke|--quick|--full [--chunks 10000,100000]] [--capture-only] [--hold] [--out FILE.json]\n       kith-bench --backends [--chunks 10000,100000] [--budget-min 60] [--out FILE.json]\n       kith-bench --usage [--ccusage PATH] [--messages 1000000] [--out FILE.json]\n       kith-bench --backup [--mb 1024] [--out FILE.json]\n       kith-bench --attacks [--out FILE.json]"
                );
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?} (try --help)"),
        }
    }
    Ok(args)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn summary(mut samples: Vec<f64>) -> Value {
    samples.sort_by(|a, b| a.total_cmp(b));
    json!({
        "n": samples.len(),
        "p50_ms": percentile(&samples, 0.50),
        "p95_ms": percentile(&samples, 0.95),
        "p99_ms": percentile(&samples, 0.99),
    })
}

/// Transcript lines from the fixtures, reused as the corpus's material: the
/// third-party sessions the published figures were measured on where they
/// are present, the repository's own otherwise.
fn corpus_lines() -> Result<Vec<String>> {
    let third_party = fixtures::third_party_dir().map(|dir| {
        [
            "claude-code/marot__spotter__4d5611e5-241a-462a-8d15-5122611a9569.jsonl",
            "claude-code/codemie-ai__codemie-code__incremental-subagents__turn-2.jsonl",
            "codex/codemie-ai__codemie-code__rollout-2026-05-11T11-26-55-019e1625-789d-76c0-80ab-3724b5ddb799.jsonl",
        ]
        .map(|rel| dir.join(rel))
        .to_vec()
    });
    let files =
        third_party.unwrap_or_else(|| fixtures::own().into_iter().map(|f| f.path).collect());
    let mut lines = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| file.display().to_string())?;
        lines.extend(
            text.lines()
                .filter(|l| l.contains("\"type\":\"user\"") || l.contains("\"type\":\"assistant\""))
                .map(str::to_owned),
        );
    }
    if lines.is_empty() {
        bail!("no corpus lines found in the fixtures");
    }
    Ok(lines)
}

/// Ingests `n_runs` runs of `lines_per_run` fixture lines; returns (seconds
/// until the last is keyword-searchable, bytes, run ids).
fn ingest_corpus(
    api: &Api,
    lines: &[String],
    runs: std::ops::Range<usize>,
    lines_per_run: usize,
) -> Result<(f64, u64, Vec<String>)> {
    let started = Instant::now();
    let mut bytes = 0u64;
    let mut ids = Vec::new();
    for r in runs {
        let mut jsonl = String::new();
        for l in 0..lines_per_run {
            jsonl.push_str(&lines[(r * lines_per_run + l) % lines.len()]);
            jsonl.push('\n');
        }
        bytes += jsonl.len() as u64;
        let res = api.post(
            "/api/runs",
            &json!({"jsonl": jsonl, "agent_runtime": "claude-code", "source_identity": format!("bench/{r}"),
                    "from_offset": 0, "to_offset": jsonl.len()}),
        )?;
        if res.status != 202 {
            bail!("ingest failed: {res:?}");
        }
        ids.push(res.body["run_id"].as_str().unwrap_or_default().to_owned());
    }
    if let Some(last) = ids.last() {
        api.wait_indexed(last, Duration::from_secs(3600))?;
    }
    Ok((started.elapsed().as_secs_f64(), bytes, ids))
}

/// Time from the 202 to the first keyword hit, for fresh unique words.
fn freshness(api: &Api, n: usize) -> Result<Value> {
    Ok(summary(freshness_samples(api, 0..n)?))
}

/// `freshness`' samples (ms) for the words numbered `words` (a central
/// must not see one twice).
fn freshness_samples(api: &Api, words: std::ops::Range<usize>) -> Result<Vec<f64>> {
    let mut samples = Vec::new();
    for i in words {
        let word = format!("freshword{i}x{}", std::process::id());
        let jsonl = kith_tests::claude_user_line(
            &format!("please remember {word}"),
            "2026-05-11T08:00:00Z",
        );
        let res = api.post(
            "/api/runs",
            &json!({"jsonl": jsonl, "agent_runtime": "claude-code", "source_identity": format!("fresh/{i}"),
                    "from_offset": 0, "to_offset": jsonl.len()}),
        )?;
        let t0 = Instant::now();
        if res.status != 202 {
            bail!("ingest failed: {res:?}");
        }
        // This run's hit: Meilisearch's typo tolerance also finds the
        // previous rounds' words.
        let run_id = res.body["run_id"].clone();
        loop {
            let r = api.post("/api/search", &json!({"query": word, "mode": "keyword"}))?;
            if r.body["hits"]
                .as_array()
                .is_some_and(|h| h.iter().any(|hit| hit["run_id"] == run_id))
            {
                break;
            }
            if t0.elapsed() > Duration::from_secs(30) {
                bail!("{word} not searchable after 30 s");
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(samples)
}

fn search_latency(api: &Api, mode: &str, n: usize) -> Result<Value> {
    search_latency_every(api, mode, n, Duration::ZERO)
}

/// `search_latency` with `gap` of idleness before each search.
fn search_latency_every(api: &Api, mode: &str, n: usize, gap: Duration) -> Result<Value> {
    Ok(search_samples(api, mode, "none", n, gap)?.summary())
}

/// Hybrid searches grouped by conversation, as `kith search` asks (50
/// hits ranked for 10 conversations, each ordered by several of its hits).
fn grouped_search_latency(api: &Api, n: usize) -> Result<Value> {
    Ok(search_samples(api, "hybrid", "conversation", n, Duration::ZERO)?.summary())
}

/// Search round trips (ms), the query embedding central reported (ms), and
/// the body of the first search that failed (the series stops there).
#[derive(Default)]
struct Searches {
    ms: Vec<f64>,
    embed_ms: Vec<f64>,
    error: Option<Value>,
}

impl Searches {
    /// Adds a later series of the same kind.
    fn extend(&mut self, more: Searches) {
        self.ms.extend(more.ms);
        self.embed_ms.extend(more.embed_ms);
        if self.error.is_none() {
            self.error = more.error;
        }
    }

    fn summary(self) -> Value {
        if let Some(body) = self.error {
            return json!({"error": body});
        }
        let mut out = summary(self.ms);
        if !self.embed_ms.is_empty() {
            out["query_embed"] = summary(self.embed_ms);
        }
        out
    }
}

fn search_samples(api: &Api, mode: &str, group: &str, n: usize, gap: Duration) -> Result<Searches> {
    let queries = [
        "failing test",
        "database migration",
        "read the config file",
        "error handling",
        "git branch",
    ];
    let mut out = Searches::default();
    for i in 0..n {
        std::thread::sleep(gap);
        let t0 = Instant::now();
        let r = api.post(
            "/api/search",
            &json!({"query": queries[i % queries.len()], "mode": mode, "group": group, "limit": 10}),
        )?;
        if r.status != 200 {
            out.error = Some(r.body);
            break;
        }
        out.ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        out.embed_ms
            .extend(r.body["timing"]["embed_ms"].as_f64().filter(|&ms| ms > 0.0));
    }
    Ok(out)
}

/// Texts embedded per lane so far, from `/metrics`.
fn embedded_per_lane(api: &Api) -> Result<BTreeMap<String, f64>> {
    let (status, body) = api.get_bytes("/metrics")?;
    if status != 200 {
        bail!("/metrics answered {status} (it wants an admin's token)");
    }
    let text = String::from_utf8(body)?;
    Ok(text
        .lines()
        .filter_map(|l| l.strip_prefix("kith_embedded_texts_total{lane=\""))
        .filter_map(|l| l.split_once("\"} "))
        .filter_map(|(lane, v)| Some((lane.to_owned(), v.trim().parse().ok()?)))
        .collect())
}

/// Query latency idle, then while central re-embeds every chunk on the bulk
/// lane at full speed (restarted with Matryoshka truncation to 256: a model
/// change), as p99 ratios from the same run; and the bulk lane's chunks/s
/// meanwhile. Two patterns, each against its own idle series: searches back
/// to back (each holds the bulk lane off, and the next follows at once), and
/// one at a time 100 ms apart (each meets a batch in the model; idle, each
/// meets cores gone quiet). Needs the embedded model, and a corpus whose
/// re-embed outlasts both series (`bulk_still_running_at_the_end`).
fn contention(central: &mut Central, token: &str, n: usize, spaced_n: usize) -> Result<Value> {
    let modes = ["keyword", "semantic", "hybrid"];
    let api = central.client(token);
    let gap = Duration::from_millis(100);
    let mut idle = BTreeMap::new();
    let mut idle_spaced = BTreeMap::new();
    for mode in modes {
        idle.insert(mode, search_latency(&api, mode, n)?);
        idle_spaced.insert(mode, search_latency_every(&api, mode, spaced_n, gap)?);
    }
    central.kill()?;
    let busy_central = Central::start_on(&central.data_dir, &[("KITH_EMBED_TRUNCATE_DIM", "256")])?;
    let api = busy_central.client(token);
    // Let the re-embed reach full speed.
    let deadline = Instant::now() + Duration::from_secs(60);
    while embedded_per_lane(&api)?
        .get("ingest-bulk")
        .copied()
        .unwrap_or(0.0)
        < 8.0
    {
        if Instant::now() > deadline {
            bail!("the bulk re-embed did not start within 60 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let before = embedded_per_lane(&api)?;
    let t0 = Instant::now();
    let mut busy = BTreeMap::new();
    for mode in modes {
        busy.insert(mode, search_latency(&api, mode, n)?);
    }
    let secs = t0.elapsed().as_secs_f64();
    let after = embedded_per_lane(&api)?;
    let mut spaced = BTreeMap::new();
    for mode in modes {
        spaced.insert(mode, search_latency_every(&api, mode, spaced_n, gap)?);
    }
    let spaced_secs = t0.elapsed().as_secs_f64() - secs;
    let end = embedded_per_lane(&api)?;
    let bulk = |m: &BTreeMap<String, f64>| m.get("ingest-bulk").copied().unwrap_or(0.0);
    let still_busy = api.get("/api/status")?.body["queue"]["ingest_bulk"]
        .as_u64()
        .unwrap_or(0)
        > 0;
    let p99 =
        |of: &BTreeMap<&str, Value>, mode: &str| of[mode]["p99_ms"].as_f64().unwrap_or(f64::NAN);
    let ratios = |busy: &BTreeMap<&str, Value>, idle: &BTreeMap<&str, Value>| {
        modes
            .iter()
            .map(|m| (*m, p99(busy, m) / p99(idle, m)))
            .collect::<BTreeMap<_, _>>()
    };
    Ok(json!({
        "idle": idle,
        "idle_spaced_100ms": idle_spaced,
        "during_bulk_reembed": busy,
        "spaced_100ms": spaced,
        "p99_ratio": ratios(&busy, &idle),
        "p99_ratio_spaced": ratios(&spaced, &idle_spaced),
        "p99_ratio_spaced_to_idle_back_to_back": ratios(&spaced, &idle),
        "bulk_lane_chunks_per_s_while_querying": (bulk(&after) - bulk(&before)) / secs,
        "bulk_lane_chunks_per_s_spaced": (bulk(&end) - bulk(&after)) / spaced_secs,
        "bulk_still_running_at_the_end": still_busy,
    }))
}

/// One `/proc/PID/status` memory field (`VmRSS`, `RssAnon`, `RssFile`), in
/// bytes.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    line.split_whitespace()
        .nth(1)?
        .parse::<u64>()
        .ok()
        .map(|kb| kb * 1024)
}

fn dir_size(path: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![path.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            match e.metadata() {
                Ok(m) if m.is_dir() => stack.push(e.path()),
                Ok(m) => total += m.len(),
                Err(_) => {}
            }
        }
    }
    total
}

/// `kith hook` wall time for a 100 KB delta on a large transcript, with
/// central up and down, back to back and at a turn's end (central idle);
/// and backfill throughput with central down (read, hash, redact, spool;
/// network excluded).
fn capture_bench(central: &Central, token: &str, transcript_mb: usize, n: usize) -> Result<Value> {
    use std::io::Write;
    let home = tempfile::tempdir()?;
    let dir = home.path().join(".claude/projects/-bench");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("00000000-0000-4000-8000-000000000000.jsonl");
    let lines = corpus_lines()?;
    let mut body = Vec::new();
    let mut i = 0;
    while body.len() < transcript_mb << 20 {
        body.extend_from_slice(lines[i % lines.len()].as_bytes());
        body.push(b'\n');
        i += 1;
    }
    std::fs::write(&file, &body)?;
    let payload =
        json!({"session_id": "s", "transcript_path": file, "hook_event_name": "Stop"}).to_string();
    let kith = |url: &str, args: &[&str]| -> Result<f64> {
        let t0 = Instant::now();
        let mut child = std::process::Command::new(kith_tests::bin("kith"))
            .args(args)
            .env("HOME", home.path())
            .env("KITH_CENTRAL_URL", url)
            .env("KITH_TOKEN", token)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin.write_all(payload.as_bytes())?;
        }
        child.wait()?;
        Ok(t0.elapsed().as_secs_f64() * 1000.0)
    };
    // Backfill: the whole file, central down (everything goes to the outbox).
    let backfill_ms = kith("http://127.0.0.1:9", &["backfill"])?;
    let backfill_mb_s = body.len() as f64 / 1e6 / (backfill_ms / 1000.0);
    // Drain the outbox into central so later hooks only carry their delta,
    // and let central index it before any hook is timed.
    kith(&central.url, &["backfill"])?;
    let api = central.client(token);
    // Until central has indexed every delta it accepted.
    let indexed = |within: Duration| -> Result<()> {
        let until = Instant::now() + within;
        while api.get("/api/status")?.body["counts"]["pending_index_jobs"] != 0 {
            anyhow::ensure!(
                Instant::now() < until,
                "central did not index the deltas within {within:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    };
    indexed(Duration::from_secs(600))?;
    let mut delta = Vec::new();
    while delta.len() < 100 * 1024 {
        delta.extend_from_slice(lines[delta.len() % lines.len()].as_bytes());
        delta.push(b'\n');
    }
    let append = || -> Result<()> {
        Ok(std::fs::OpenOptions::new()
            .append(true)
            .open(&file)?
            .write_all(&delta)?)
    };
    let mut up = Vec::new();
    let mut down = Vec::new();
    // Back to back: every timed hook starts with an empty outbox (the one
    // delta it spools is all it sends; a down hook's delta is drained,
    // untimed, after it), while central still indexes the deltas before.
    for _ in 0..n {
        for (url, samples) in [
            (central.url.as_str(), &mut up),
            ("http://127.0.0.1:9", &mut down),
        ] {
            append()?;
            samples.push(kith(url, &["hook"])?);
        }
        kith(&central.url, &["backfill"])?;
    }
    // At a turn's end: an agent's turns are seconds apart, so central has
    // indexed the previous delta (and rested 300 ms) before the next hook.
    // Down, nothing but the hook runs (a central that is down indexes
    // nothing); back to back, the central on this machine indexes the
    // previous delta beside it.
    let mut at_turn_end = Vec::new();
    let mut down_at_turn_end = Vec::new();
    for _ in 0..n {
        for (url, samples) in [
            (central.url.as_str(), &mut at_turn_end),
            ("http://127.0.0.1:9", &mut down_at_turn_end),
        ] {
            append()?;
            indexed(Duration::from_secs(60))?;
            std::thread::sleep(Duration::from_millis(300));
            samples.push(kith(url, &["hook"])?);
        }
        kith(&central.url, &["backfill"])?;
    }
    Ok(json!({
        "transcript_mb": transcript_mb,
        "delta_kb": delta.len() / 1024,
        "hook_central_up": summary(up),
        "hook_central_down": summary(down),
        "hook_central_up_at_turn_end": summary(at_turn_end),
        "hook_central_down_at_turn_end": summary(down_at_turn_end),
        "backfill_mb_per_s_central_down": backfill_mb_s,
    }))
}

fn main() -> Result<()> {
    let args = parse_args()?;
    if args.backends {
        return backends::run(&args);
    }
    if args.usage {
        return usage::run(&args);
    }
    if args.backup {
        return backup::run(&args);
    }
    if args.attacks {
        return attacks::run(&args);
    }
    let mut results: BTreeMap<&str, Value> = BTreeMap::new();
    let size = args.size;
    results.insert("mode", json!(format!("{size:?}").to_lowercase()));
    results.insert(
        "machine",
        json!({"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)}),
    );

    // Keyword-only: embedding the 50 MB backfill takes half an hour on 2
    // cores, and would run under every hook timed (contention is measured
    // on its own below).
    let central = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
    let token = central.register("bench.test", "bench")?;
    let lines = corpus_lines()?;
    results.insert(
        "capture",
        capture_bench(
            &central,
            &token,
            size.pick(1, 10, 50),
            size.pick(3, 20, 100),
        )?,
    );
    drop(central);
    save(&results, args.out.as_deref())?;
    if args.capture_only {
        print_table(&serde_json::to_value(&results)?);
        return Ok(());
    }

    // The corpus: a quick run embeds 200 runs with the real model; a full
    // run grows to 10k, 100k and 1M chunks with stand-in document vectors
    // (queries still use the real model), in its own central.
    let standin = size == Size::Full;
    let corpus_central = if standin {
        Central::start_with(&[(BENCH_STANDIN_VECTORS, "1")])?
    } else {
        Central::start()?
    };
    let corpus_token = corpus_central.register_admin("bench.test", "bench")?;
    let capi = corpus_central.client(&corpus_token);
    let full_targets = args
        .chunks
        .clone()
        .unwrap_or_else(|| vec![10_000, 100_000, 1_000_000]);
    let targets: &[u64] = size.pick(&[0], &[0], &full_targets);
    let lines_per_run = size.pick(10, 10, 50);
    let n_q = size.pick(5, 50, 200);
    let mut per_size = Vec::new();
    let mut next_run = 0;
    // The full run stops growing the corpus after this long, and says so.
    let growth_budget = Instant::now() + Duration::from_secs(30 * 60);
    for &target in targets {
        if Instant::now() > growth_budget {
            break;
        }
        let (mut secs, mut bytes, mut ids) = (0.0, 0, Vec::new());
        let first_run = next_run;
        let mut chunks;
        // One step of runs for the real-model corpus; steps up to the
        // target for the stand-in one.
        loop {
            let step = size.pick(20, 200, 200);
            let (s, b, i) = ingest_corpus(&capi, &lines, next_run..next_run + step, lines_per_run)?;
            next_run += step;
            secs += s;
            bytes += b;
            ids.extend(i);
            chunks = capi.get("/api/status")?.body["counts"]["chunks"]
                .as_u64()
                .unwrap_or(0);
            if !standin || chunks >= target || Instant::now() > growth_budget {
                break;
            }
        }
        // While the new runs are embedded (stand-in vectors need none; the
        // fixture lines keep their dates, so central takes them for
        // history, on the bulk lane)...
        let busy = if standin {
            Value::Null
        } else {
            json!({
                "search_keyword": search_latency(&capi, "keyword", n_q)?,
                "search_hybrid": search_latency(&capi, "hybrid", n_q)?,
                "search_semantic": search_latency(&capi, "semantic", n_q)?,
            })
        };
        // ...and once every vector is in (idle).
        let embed_started = Instant::now();
        let lanes_before = embedded_per_lane(&capi)?;
        if kith_tests::model_dir()?.is_some() {
            for id in &ids {
                capi.wait_embedded(id, Duration::from_secs(7200))?;
            }
        }
        let embed_secs = embed_started.elapsed().as_secs_f64();
        let lanes_after = embedded_per_lane(&capi)?;
        let ingest_chunks: f64 = ["ingest-realtime", "ingest-bulk"]
            .iter()
            .map(|lane| {
                lanes_after.get(*lane).unwrap_or(&0.0) - lanes_before.get(*lane).unwrap_or(&0.0)
            })
            .sum();
        let n_runs = next_run - first_run;
        let memory = |field| corpus_central.pid().and_then(|p| status_bytes(p, field));
        per_size.push(json!({
            "runs": next_run,
            "chunks": chunks,
            "target_chunks": if standin { json!(target) } else { Value::Null },
            "document_vectors": if standin { "stand-in (hashed words); queries embedded by the real model" } else { "real model" },
            "ingest": {"seconds": secs, "mb_per_s": bytes as f64 / secs / 1e6, "runs_per_s": n_runs as f64 / secs},
            "embedding_wait_after_ingest_s": embed_secs,
            "ingest_lanes_chunks_per_s": if standin { Value::Null } else { json!(ingest_chunks / embed_secs) },
            "while_embedding": busy,
            "search_keyword": search_latency(&capi, "keyword", n_q)?,
            "search_hybrid": search_latency(&capi, "hybrid", n_q)?,
            "search_hybrid_grouped": grouped_search_latency(&capi, n_q)?,
            "search_semantic": search_latency(&capi, "semantic", n_q)?,
            // RSS = anonymous memory + mapped file pages (the index and the
            // vectors are mmapped; those pages are the kernel's to drop).
            "central_rss_bytes": memory("VmRSS"),
            "central_rss_anon_bytes": memory("RssAnon"),
            "central_rss_file_bytes": memory("RssFile"),
            "data_dir_bytes": dir_size(&corpus_central.data_dir),
        }));
        results.insert("corpus", json!(per_size));
        save(&results, args.out.as_deref())?;
    }
    results.insert("corpus", Value::Array(per_size));
    save(&results, args.out.as_deref())?;
    if args.hold {
        eprintln!(
            "central pid {:?} holds the corpus and answers hybrid and semantic searches in a loop; press Enter to go on",
            corpus_central.pid(),
        );
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = std::io::stdin().read_line(&mut String::new());
            let _ = tx.send(());
        });
        while rx.try_recv().is_err() {
            for mode in ["hybrid", "semantic"] {
                eprintln!("{mode}: {}", search_latency(&capi, mode, 20)?);
            }
        }
    }
    results.insert(
        "freshness_keyword_ms",
        freshness(&capi, size.pick(3, 20, 100))?,
    );

    // Contention needs real vectors: the quick corpus has them; a full run
    // embeds a small corpus of its own first.
    if kith_tests::model_dir()?.is_some() && size != Size::Smoke {
        let (mut c, t) = if standin {
            let c = Central::start()?;
            let t = c.register_admin("bench.test", "bench")?;
            // ~3,400 chunks: the re-embed outlasts the series at full speed.
            let (_, _, ids) = ingest_corpus(&c.client(&t), &lines, 0..400, 10)?;
            for id in &ids {
                c.client(&t).wait_embedded(id, Duration::from_secs(3600))?;
            }
            (c, t)
        } else {
            (corpus_central, corpus_token)
        };
        // Back to back, p99 of 2,000 samples is the 20th worst: a hiccup of
        // the VM (here ~10 searches of 0.7 ms slowed to 2-3 ms in one
        // burst) no longer sets it alone, and a keyword series outlasts
        // the second ingest waits for searches (it then runs beside them).
        // Spaced 100 ms apart, 200 (20 s).
        results.insert(
            "contention",
            contention(&mut c, &t, size.pick(5, 2000, 2000), size.pick(2, 200, 200))?,
        );
        save(&results, args.out.as_deref())?;
    }

    // The LoCoMo data lives beside a development checkout, not in the
    // repository: a clone measures everything else and says so.
    let locomo_dir = reference_dir().join("data/locomo-dev");
    let quality = if locomo_dir.is_dir() {
        locomo_quality(&locomo_dir, size)?
    } else {
        eprintln!(
            "no LoCoMo data at {}: retrieval quality not measured",
            locomo_dir.display()
        );
        json!({"absent": locomo_dir.display().to_string()})
    };
    results.insert("locomo_dev", quality);

    let doc = serde_json::to_string_pretty(&results)?;
    print_table(&serde_json::to_value(&results)?);
    match &args.out {
        Some(out) => {
            std::fs::write(out, &doc).with_context(|| format!("cannot write {}", out.display()))?;
            eprintln!("wrote {}", out.display());
        }
        None => println!("{doc}"),
    }
    Ok(())
}

/// Retrieval quality on the LoCoMo dev half in `dir`, in its own central so
/// the corpus does not disturb it.
fn locomo_quality(dir: &std::path::Path, size: Size) -> Result<Value> {
    let eval = Central::start()?;
    let eval_api = eval.client(&eval.register("locomo.test", "eval")?);
    let (mut sessions, mut questions) = locomo::load(dir)?;
    let modes: &[&str] = if size == Size::Smoke {
        // One conversation, keyword only: the smoke checks the plumbing.
        let first = sessions.first().map(|s| s.conversation.clone());
        sessions.retain(|s| Some(&s.conversation) == first.as_ref());
        questions.retain(|q| Some(&q.conversation) == first.as_ref());
        &["keyword"]
    } else {
        &["keyword", "semantic", "hybrid"]
    };
    let runs = locomo::ingest(&eval_api, &sessions)?;
    if kith_tests::model_dir()?.is_some() && size != Size::Smoke {
        for id in runs.keys() {
            eval_api.wait_embedded(id, Duration::from_secs(1800))?;
        }
    }
    let mut quality = serde_json::Map::new();
    // The held-out conversations' questions (`locomo::Split::Report`).
    let held_out = Split::Report.conversations(&sessions);
    for &mode in modes {
        match locomo::evaluate(&eval_api, &sessions, &runs, &questions, mode, &[5, 10, 20]) {
            Ok(r) => {
                quality.insert(mode.into(), json!(locomo::mean(&r)));
                let of_held_out = questions
                    .iter()
                    .zip(&r)
                    .filter(|(q, _)| held_out.contains(&q.conversation))
                    .map(|(_, s)| s);
                quality.insert(format!("{mode}_held_out"), json!(locomo::mean(of_held_out)));
            }
            Err(e) => {
                quality.insert(mode.into(), json!({"error": e.to_string()}));
            }
        }
    }
    quality.insert("questions".into(), json!(questions.len()));
    quality.insert("held_out".into(), json!(held_out));
    Ok(Value::Object(quality))
}

/// The headline figures, one per line; the JSON has everything.
fn print_table(r: &Value) {
    let num = |v: &Value| match v.as_f64() {
        Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.2}"),
        None => "-".to_owned(),
    };
    let pct = |v: &Value| {
        format!(
            "{} / {} / {}",
            num(&v["p50_ms"]),
            num(&v["p95_ms"]),
            num(&v["p99_ms"])
        )
    };
    row("figure", "value");
    let c = &r["capture"];
    row(
        "hook, central up, p50/p95/p99 ms",
        pct(&c["hook_central_up"]),
    );
    row(
        "hook, central down, p50/p95/p99 ms",
        pct(&c["hook_central_down"]),
    );
    row(
        "hook at a turn's end (central idle), p50/p95/p99 ms",
        pct(&c["hook_central_up_at_turn_end"]),
    );
    row(
        "hook at a turn's end, central down, p50/p95/p99 ms",
        pct(&c["hook_central_down_at_turn_end"]),
    );
    row(
        "backfill MB/s (central down)",
        num(&c["backfill_mb_per_s_central_down"]),
    );
    for size in r["corpus"].as_array().into_iter().flatten() {
        let at = format!("{} chunks", size["chunks"]);
        row(
            format!("ingest MB/s, runs/s ({at})"),
            format!(
                "{}, {}",
                num(&size["ingest"]["mb_per_s"]),
                num(&size["ingest"]["runs_per_s"])
            ),
        );
        for mode in ["keyword", "semantic", "hybrid"] {
            let v = &size[format!("search_{mode}").as_str()];
            row(format!("{mode} search p50/p95/p99 ms ({at})"), pct(v));
            if mode == "semantic" {
                row(
                    format!("query embedding p50/p95/p99 ms ({at})"),
                    pct(&v["query_embed"]),
                );
            }
        }
        let mb = |k: &str| num(&json!(size[k].as_f64().map(|b| b / 1e6)));
        row(
            format!("central RSS MB, anonymous + mapped files ({at})"),
            format!(
                "{} = {} + {}",
                mb("central_rss_bytes"),
                mb("central_rss_anon_bytes"),
                mb("central_rss_file_bytes")
            ),
        );
        row(
            format!("data dir MB ({at})"),
            num(&json!(size["data_dir_bytes"].as_f64().map(|b| b / 1e6))),
        );
    }
    row(
        "freshness 202 -> keyword hit p50/p95/p99 ms",
        pct(&r["freshness_keyword_ms"]),
    );
    let k = &r["contention"];
    for mode in ["keyword", "semantic", "hybrid"] {
        row(
            format!("{mode} p99 during bulk re-embed / idle p99"),
            num(&k["p99_ratio"][mode]),
        );
    }
    for mode in ["keyword", "semantic", "hybrid"] {
        row(
            format!("{mode} p99 100 ms apart, during re-embed / idle 100 ms apart"),
            num(&k["p99_ratio_spaced"][mode]),
        );
    }
    row(
        "bulk lane chunks/s, searches back to back / 100 ms apart",
        format!(
            "{} / {}{}",
            num(&k["bulk_lane_chunks_per_s_while_querying"]),
            num(&k["bulk_lane_chunks_per_s_spaced"]),
            match k["bulk_still_running_at_the_end"].as_bool() {
                Some(false) => " (the re-embed ended before the series did)",
                _ => "",
            }
        ),
    );
    for mode in ["keyword", "semantic", "hybrid"] {
        let q = &r["locomo_dev"][mode];
        row(
            format!("LoCoMo dev {mode} R@5/R@10/R@20 (20 turns; turns per hit)"),
            format!(
                "{} / {} / {} ({}; {})",
                num(&q["recall@5"]),
                num(&q["recall@10"]),
                num(&q["recall@20"]),
                num(&q["recall@20turns"]),
                num(&q["turns_per_hit@10"])
            ),
        );
        let sessions = |prefix: &str| {
            let of = |kind: &str| {
                locomo::SESSION_KS
                    .iter()
                    .map(|k| num(&q[format!("{prefix}session_{kind}@{k}").as_str()]))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            format!("{}, {}", of("hit"), of("recall"))
        };
        row(
            format!("LoCoMo dev {mode} sessions hit@1/5/10, R@1/5/10"),
            sessions(""),
        );
        row(
            format!("LoCoMo dev {mode} grouped by conversation, same"),
            sessions("grouped_"),
        );
        let h = &r["locomo_dev"][format!("{mode}_held_out").as_str()];
        row(
            format!("LoCoMo dev {mode} held out: R@10, grouped hit@1/5"),
            format!(
                "{}, {} / {}",
                num(&h["recall@10"]),
                num(&h["grouped_session_hit@1"]),
                num(&h["grouped_session_hit@5"])
            ),
        );
    }
}

/// Writes what was measured so far (a long run that fails late keeps it).
fn save(results: &BTreeMap<&str, Value>, out: Option<&std::path::Path>) -> Result<()> {
    if let Some(out) = out {
        std::fs::write(out, serde_json::to_string_pretty(results)?)
            .with_context(|| format!("cannot write {}", out.display()))?;
    }
    Ok(())
}

fn row(label: impl AsRef<str>, value: impl AsRef<str>) {
    println!("{:<58} {}", label.as_ref(), value.as_ref());
}

/// `--backends`: the embedded backend and Meilisearch side by side, in one
/// run. Each has its own central (stand-in document vectors, queries through
/// the real model); Meilisearch is a real server this run starts on loopback
/// with a random key and kills at the end. Both get the same runs, step by
/// step, and every measurement alternates between them (A, B, A, B) so a
/// noisy neighbour slows both alike.
mod backends {
    use super::*;
    use kith_tests::meili::{self, Meili};

    /// Runs per growth step (at most), and fixture lines per run, as `--full`.
    const STEP: usize = 200;
    const LINES_PER_RUN: usize = 50;
    /// Each measurement is split into this many turns per backend.
    const ROUNDS: usize = 4;
    const SEARCHES: usize = 200;
    const FRESH: usize = 40;
    const MODES: [&str; 3] = ["keyword", "semantic", "hybrid"];

    struct Backend {
        name: &'static str,
        central: Central,
        api: Api,
        /// The Meilisearch process and its database directory.
        meili: Option<(Option<u32>, PathBuf)>,
        chunks: u64,
        ingest_s: f64,
        vectors_s: f64,
        /// Runs still without vectors when the budget ran out.
        runs_without_vectors: usize,
        bytes: u64,
    }

    impl Backend {
        fn start(name: &'static str, env: &[(&str, &str)], index: Option<&Meili>) -> Result<Self> {
            let central = Central::start_with(env)?;
            let token = central.register("bench.test", "bench")?;
            let api = central.client(&token);
            let meili = index.map(|m| {
                let db = m.data_dir().join("db");
                (pid_with_arg(&db), db)
            });
            Ok(Self {
                name,
                central,
                api,
                meili,
                chunks: 0,
                ingest_s: 0.0,
                vectors_s: 0.0,
                runs_without_vectors: 0,
                bytes: 0,
            })
        }

        /// Ingests `runs`; waits until they are keyword-searchable, then
        /// until they have (stand-in) vectors or `deadline` passed, timing
        /// both.
        fn grow(
            &mut self,
            lines: &[String],
            runs: std::ops::Range<usize>,
            deadline: Instant,
        ) -> Result<()> {
            let (secs, bytes, ids) = ingest_corpus(&self.api, lines, runs, LINES_PER_RUN)?;
            self.ingest_s += secs;
            self.bytes += bytes;
            let t0 = Instant::now();
            if kith_tests::model_dir()?.is_some() {
                for (i, id) in ids.iter().enumerate() {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if self.api.wait_embedded(id, left).is_err() {
                        self.runs_without_vectors = ids.len() - i;
                        break;
                    }
                }
            }
            self.vectors_s += t0.elapsed().as_secs_f64();
            self.chunks = self.api.get("/api/status")?.body["counts"]["chunks"]
                .as_u64()
                .unwrap_or(0);
            Ok(())
        }

        fn readings(&self, runs: usize) -> Value {
            let central = |field| self.central.pid().and_then(|p| status_bytes(p, field));
            let meili_rss = self
                .meili
                .as_ref()
                .and_then(|(pid, _)| pid.and_then(|p| status_bytes(p, "VmRSS")));
            let meili_db = self.meili.as_ref().map(|(_, db)| dir_size(db));
            let central_dir = dir_size(&self.central.data_dir);
            json!({
                "chunks": self.chunks,
                "runs": runs,
                "ingest_to_keyword_searchable_s": self.ingest_s,
                "ingest_mb_per_s": self.bytes as f64 / self.ingest_s / 1e6,
                "vectors_wait_after_ingest_s": self.vectors_s,
                "runs_without_vectors_when_measured": self.runs_without_vectors,
                "central_rss_bytes": central("VmRSS"),
                "central_rss_anon_bytes": central("RssAnon"),
                "central_rss_file_bytes": central("RssFile"),
                "meili_rss_bytes": meili_rss,
                "rss_total_bytes": central("VmRSS").map(|c| c + meili_rss.unwrap_or(0)),
                "central_data_dir_bytes": central_dir,
                "meili_db_bytes": meili_db,
                "disk_total_bytes": central_dir + meili_db.unwrap_or(0),
            })
        }
    }

    /// The process whose command line has `arg` as one argument.
    fn pid_with_arg(arg: &std::path::Path) -> Option<u32> {
        let want = arg.as_os_str().as_encoded_bytes();
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            cmdline.split(|&b| b == 0).any(|a| a == want).then_some(pid)
        })
    }

    pub(super) fn run(args: &Args) -> Result<()> {
        let started = Instant::now();
        let budget = Duration::from_secs_f64(args.budget_min * 60.0);
        let bin = meili::find_bin().map_err(anyhow::Error::msg)?;
        let version = std::process::Command::new(&bin)
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        let server = Meili::start()?;
        let standin = [(BENCH_STANDIN_VECTORS, "1")];
        let mut env = server.central_env("kith-bench").to_vec();
        env.extend(standin);
        let mut pair = [
            Backend::start("embedded", &standin, None)?,
            Backend::start("meilisearch", &env, Some(&server))?,
        ];
        if pair[1].meili.as_ref().is_some_and(|(pid, _)| pid.is_none()) {
            eprintln!("Meilisearch's process was not found in /proc: its RSS is not measured");
        }
        let lines = corpus_lines()?;
        let mut results: BTreeMap<&str, Value> = BTreeMap::new();
        results.insert("mode", json!("backends"));
        results.insert(
            "machine",
            json!({"cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)}),
        );
        results.insert("meilisearch_version", json!(version));
        results.insert(
            "document_vectors",
            json!("stand-in (hashed words); queries embedded by the real model"),
        );
        results.insert("budget_minutes", json!(args.budget_min));
        let targets = args.chunks.clone().unwrap_or_else(|| vec![10_000, 100_000]);
        results.insert("targets", json!(targets));
        let mut sizes = Vec::new();
        let mut next_run = 0;
        let mut fresh_next = 0;
        let mut stopped = None;
        for &target in &targets {
            // Grow both by the same runs, a step at a time, A then B.
            let before = pair[0].chunks;
            while pair[0].chunks < target {
                if started.elapsed() > budget {
                    stopped = Some(target);
                    break;
                }
                let per_run = (pair[0].chunks as f64 / next_run.max(1) as f64).max(1.0);
                let want = ((target - pair[0].chunks) as f64 / per_run).ceil() as usize;
                // A first step of 20 runs learns the chunks per run.
                let step = if next_run == 0 {
                    20
                } else {
                    want.clamp(1, STEP)
                };
                for b in pair.iter_mut() {
                    b.grow(&lines, next_run..next_run + step, started + budget)?;
                }
                if pair.iter().any(|b| b.runs_without_vectors > 0) {
                    stopped = Some(target);
                }
                next_run += step;
                eprintln!(
                    "{} runs: {} chunks (embedded), {} (Meilisearch); {:.0} s",
                    next_run,
                    pair[0].chunks,
                    pair[1].chunks,
                    started.elapsed().as_secs_f64()
                );
                if stopped.is_some() {
                    break;
                }
            }
            // Nothing new to measure (the budget ran out before a step).
            if pair[0].chunks == 0 || (stopped.is_some() && pair[0].chunks == before) {
                break;
            }
            // Measure, alternating backend by backend, round by round.
            let mut fresh: [Vec<f64>; 2] = Default::default();
            let mut searches: [BTreeMap<&str, Searches>; 2] = Default::default();
            for _ in 0..ROUNDS {
                let words = fresh_next..fresh_next + FRESH / ROUNDS;
                fresh_next = words.end;
                for (i, b) in pair.iter().enumerate() {
                    fresh[i].extend(freshness_samples(&b.api, words.clone())?);
                }
                for mode in MODES {
                    for (i, b) in pair.iter().enumerate() {
                        let s = search_samples(
                            &b.api,
                            mode,
                            "none",
                            SEARCHES / ROUNDS,
                            Duration::ZERO,
                        )?;
                        searches[i].entry(mode).or_default().extend(s);
                    }
                }
            }
            let mut at = serde_json::Map::new();
            at.insert("target_chunks".into(), json!(target));
            at.insert("target_reached".into(), json!(stopped.is_none()));
            for (i, b) in pair.iter().enumerate() {
                let mut r = b.readings(next_run);
                r["freshness_keyword_ms"] = summary(std::mem::take(&mut fresh[i]));
                for (mode, s) in std::mem::take(&mut searches[i]) {
                    r[format!("search_{mode}").as_str()] = s.summary();
                }
                at.insert(b.name.into(), r);
            }
            sizes.push(Value::Object(at));
            results.insert("sizes", json!(sizes));
            results.insert("wall_s", json!(started.elapsed().as_secs_f64()));
            super::save(&results, args.out.as_deref())?;
            if stopped.is_some() {
                break;
            }
        }
        if let Some(target) = stopped {
            let msg = format!(
                "the {} min budget ran out growing to {target} chunks: measured at {} chunks and stopped",
                args.budget_min, pair[0].chunks
            );
            eprintln!("{msg}");
            results.insert("stopped_by_budget", json!(msg));
        }
        results.insert("wall_s", json!(started.elapsed().as_secs_f64()));
        super::save(&results, args.out.as_deref())?;
        drop(pair);
        drop(server);
        print(&serde_json::to_value(&results)?);
        if let Some(out) = &args.out {
            eprintln!("wrote {}", out.display());
        }
        Ok(())
    }

    /// One table per size: metric, embedded, Meilisearch, ratio.
    fn print(r: &Value) {
        let fmt = |x: Option<f64>| match x {
            Some(x) if x.abs() >= 100.0 => format!("{x:.0}"),
            Some(x) => format!("{x:.2}"),
            None => "-".to_owned(),
        };
        for size in r["sizes"].as_array().into_iter().flatten() {
            let (a, b) = (&size["embedded"], &size["meilisearch"]);
            println!(
                "\n{} chunks (target {}{})",
                a["chunks"],
                size["target_chunks"],
                if size["target_reached"] == json!(false) {
                    ", not reached: budget"
                } else {
                    ""
                }
            );
            let missing = |v: &Value| {
                v["runs_without_vectors_when_measured"]
                    .as_u64()
                    .unwrap_or(0)
            };
            if missing(a) + missing(b) > 0 {
                println!(
                    "(runs still without vectors when measured: embedded {}, Meilisearch {})",
                    missing(a),
                    missing(b)
                );
            }
            println!("| metric | embedded | Meilisearch | Meilisearch / embedded |");
            println!("|---|---:|---:|---:|");
            let line = |label: &str, get: &dyn Fn(&Value) -> Option<f64>| {
                let (x, y) = (get(a), get(b));
                let ratio = x.zip(y).filter(|(x, _)| *x > 0.0).map(|(x, y)| y / x);
                println!("| {label} | {} | {} | {} |", fmt(x), fmt(y), fmt(ratio));
            };
            let mb = |k: &'static str| move |v: &Value| v[k].as_f64().map(|b| b / 1e6);
            line("ingest to keyword-searchable, s", &|v| {
                v["ingest_to_keyword_searchable_s"].as_f64()
            });
            line("then until every chunk has a vector, s", &|v| {
                v["vectors_wait_after_ingest_s"].as_f64()
            });
            for p in ["p50", "p99"] {
                let k = format!("{p}_ms");
                line(
                    &format!("ingest-to-searchable (202 -> keyword hit) {p}, ms"),
                    &|v| v["freshness_keyword_ms"][k.as_str()].as_f64(),
                );
            }
            for mode in MODES {
                for p in ["p50", "p99"] {
                    let k = format!("{p}_ms");
                    let s = format!("search_{mode}");
                    line(&format!("{mode} search {p}, ms"), &|v| {
                        v[s.as_str()][k.as_str()].as_f64()
                    });
                }
            }
            line("central RSS, MB", &mb("central_rss_bytes"));
            line("Meilisearch RSS, MB", &mb("meili_rss_bytes"));
            line("RSS total, MB", &mb("rss_total_bytes"));
            line("central data dir, MB", &mb("central_data_dir_bytes"));
            line("Meilisearch db dir, MB", &mb("meili_db_bytes"));
            line("disk total, MB", &mb("disk_total_bytes"));
        }
        if let Some(msg) = r["stopped_by_budget"].as_str() {
            println!("\n{msg}");
        }
    }
}

/// `kith-bench --usage`: what `kith usage` counts, side by side with
/// ccusage 17.2.1 (`--ccusage PATH`) on every Claude Code fixture, and how
/// fast a report answers over `--messages N` model responses of one person
/// (a year of them, in one central).
mod usage {
    use super::*;
    use kith_tests::Home;
    use std::process::Command;

    const KINDS: [(&str, &str); 4] = [
        ("inputTokens", "input_tokens"),
        ("outputTokens", "output_tokens"),
        ("cacheCreationTokens", "cache_write_tokens"),
        ("cacheReadTokens", "cache_read_tokens"),
    ];

    pub(super) fn run(args: &Args) -> Result<()> {
        let mut results: BTreeMap<&str, Value> = BTreeMap::new();
        if let Some(ccusage) = &args.ccusage {
            results.insert("ccusage_side_by_side", side_by_side(ccusage)?);
        }
        results.insert("report_latency", report_latency(args.messages)?);
        println!("{}", serde_json::to_string_pretty(&results)?);
        save(&results, args.out.as_deref())
    }

    /// Every Claude Code fixture (the repository's, and ../shared's when
    /// present) in one HOME: ccusage's daily report and kith's, in UTC.
    fn side_by_side(ccusage: &std::path::Path) -> Result<Value> {
        let home = Home::new()?;
        let mut files = 0;
        for f in fixtures::all()
            .into_iter()
            .filter(|f| f.runtime == "claude-code")
        {
            let dest = home.path(".claude/projects").join(&f.layout);
            std::fs::create_dir_all(dest.parent().context("a folder")?)?;
            std::fs::copy(&f.path, &dest)?;
            files += 1;
        }
        let out = Command::new(ccusage)
            .args(["daily", "--json", "--offline"])
            .env("CLAUDE_CONFIG_DIR", home.path(".claude"))
            .env("TZ", "UTC")
            .output()?;
        if !out.status.success() {
            bail!("ccusage failed: {}", String::from_utf8_lossy(&out.stderr));
        }
        let theirs: Value = serde_json::from_slice(&out.stdout)?;

        let central = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
        let token = central.register("bench.test", "bench")?;
        let backfill = home.kith_at(&central.url, &token, &["backfill"]).output()?;
        if !backfill.status.success() {
            bail!(
                "backfill failed: {}",
                String::from_utf8_lossy(&backfill.stderr)
            );
        }
        let report = home
            .kith_at(
                &central.url,
                &token,
                &["usage", "daily", "--json", "--timezone", "UTC"],
            )
            .output()?;
        if !report.status.success() {
            bail!(
                "kith usage failed: {}",
                String::from_utf8_lossy(&report.stderr)
            );
        }
        let ours: Value = serde_json::from_slice(&report.stdout)?;

        // Day -> kind -> (ccusage, kith).
        let mut days: BTreeMap<String, BTreeMap<&str, (u64, u64)>> = BTreeMap::new();
        for d in theirs["daily"].as_array().into_iter().flatten() {
            let day = d["date"].as_str().unwrap_or_default().to_owned();
            for (cc, _) in KINDS {
                days.entry(day.clone())
                    .or_default()
                    .entry(cc)
                    .or_default()
                    .0 += d[cc].as_u64().unwrap_or(0);
            }
        }
        for r in ours["rows"].as_array().into_iter().flatten() {
            let day = r["key"].as_str().unwrap_or_default().to_owned();
            for (cc, k) in KINDS {
                days.entry(day.clone())
                    .or_default()
                    .entry(cc)
                    .or_default()
                    .1 += r[k].as_u64().unwrap_or(0);
            }
        }
        let mut rows = Vec::new();
        let mut totals: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
        for (day, kinds) in &days {
            let mut row = json!({"day": day});
            for (kind, (cc, kith)) in kinds {
                row[*kind] = json!({"ccusage": cc, "kith": kith});
                let t = totals.entry(kind).or_default();
                t.0 += cc;
                t.1 += kith;
            }
            rows.push(row);
        }
        println!("ccusage 17.2.1 and kith on {files} Claude Code files (UTC days)");
        println!(
            "{:<12} {:>22} {:>22} {:>22} {:>22}",
            "day", "input", "output", "cache write", "cache read"
        );
        for (day, kinds) in &days {
            let cell = |k: &str| {
                let (cc, kith) = kinds.get(k).copied().unwrap_or_default();
                format!("{cc}/{kith}{}", if cc == kith { "" } else { " ≠" })
            };
            println!(
                "{day:<12} {:>22} {:>22} {:>22} {:>22}",
                cell("inputTokens"),
                cell("outputTokens"),
                cell("cacheCreationTokens"),
                cell("cacheReadTokens")
            );
        }
        Ok(json!({
            "files": files,
            "ccusage_version": "17.2.1",
            "days": rows,
            "totals": totals
                .iter()
                .map(|(k, (cc, kith))| (k.to_string(), json!({"ccusage": cc, "kith": kith})))
                .collect::<serde_json::Map<_, _>>(),
        }))
    }

    /// What ingesting a year of responses took two centrals, the first
    /// counting their usage, the second given the same bytes without it.
    struct Ingested {
        /// The first central and its member's token.
        central: Central,
        token: String,
        /// Time spent in ingest requests, in seconds.
        requests_s: [f64; 2],
        /// The first report after the last delta, which counts what the
        /// background had not yet, in seconds.
        first_report_s: [f64; 2],
        /// The central's CPU time (every thread, user and system) from its
        /// start to the end of that report, in seconds.
        cpu_s: [f64; 2],
    }

    impl Ingested {
        /// What usage adds to each figure, in percent.
        fn costs(&self) -> Value {
            let pct = |f: [f64; 2]| (f[0] / f[1] - 1.0) * 100.0;
            json!({
                "requests_s": self.requests_s,
                "requests_cost_pct": pct(self.requests_s),
                "first_report_s": self.first_report_s,
                "cpu_s": self.cpu_s,
                "cpu_cost_pct": pct(self.cpu_s),
            })
        }
    }

    /// A process's CPU time so far, every thread's, user and system, in
    /// seconds (`/proc/PID/stat` counts in USER_HZ, 100 on Linux).
    fn cpu_seconds(pid: u32) -> Result<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        // Fields after the command's closing parenthesis, from the state
        // (field 3): utime and stime are fields 14 and 15.
        let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or_default();
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| -> Result<f64> {
            Ok(fields
                .get(i - 3)
                .with_context(|| format!("/proc/{pid}/stat: {stat}"))?
                .parse::<f64>()?)
        };
        Ok((ticks(14)? + ticks(15)?) / 100.0)
    }

    /// Two centrals holding `n` responses of one person (see
    /// `report_latency`), sent `per_delta` responses to a delta (at most
    /// 4 MiB), each delta to one and then the other, so that both meet the
    /// same disk: the first with their usage, the second with it under
    /// another name (the same bytes, no facts); then a first report of
    /// each.
    fn year_of_responses(n: usize, per_delta: usize) -> Result<Ingested> {
        let with = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
        let without = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
        let token = with.register("bench.test", "bench")?;
        let apis = [
            with.client(&token),
            without.client(&without.register("bench.test", "bench")?),
        ];
        let mut took = [Duration::ZERO; 2];
        let models = [
            "claude-sonnet-4-5",
            "claude-opus-4-6",
            "claude-haiku-4-5",
            "claude-sonnet-4-6",
        ];
        let per_session = 100;
        let sessions = n.div_ceil(per_session);
        let mut delta = String::new();
        let mut sent = 0usize;
        let mut flush = |delta: &mut String, offset: &mut u64, session: usize| -> Result<()> {
            if delta.is_empty() {
                return Ok(());
            }
            let len = delta.len() as u64;
            let unnamed = delta.replace("\"usage\":", "\"usagx\":");
            for (i, jsonl) in [&*delta, &unnamed].into_iter().enumerate() {
                let t = Instant::now();
                apis[i].ingest(&json!({
                    "jsonl": jsonl, "agent_runtime": "claude-code",
                    "source_identity": format!("bench-usage/{session}"),
                    "from_offset": *offset, "to_offset": *offset + len,
                    "cwd": format!("/home/b/src/p{}", session % 3),
                }))?;
                took[i] += t.elapsed();
            }
            *offset += len;
            delta.clear();
            Ok(())
        };
        for s in 0..sessions {
            let mut offset = 0;
            // Sessions spread over a year, a few hours apart.
            let base = 1_767_225_600 + (s as i64 * 365 * 86_400 / sessions.max(1) as i64);
            for m in 0..per_session.min(n - sent) {
                let at = time::OffsetDateTime::from_unix_timestamp(base + m as i64 * 20)?
                    .format(&time::format_description::well_known::Rfc3339)?;
                let line = json!({
                    "type": "assistant", "uuid": format!("u{s}-{m}"), "sessionId": format!("s{s}"),
                    "timestamp": at, "requestId": format!("req{s}-{m}"), "cwd": format!("/home/b/src/p{}", s % 3),
                    "message": {"id": format!("msg{s}-{m}"), "role": "assistant", "model": models[(s + m) % 4],
                        "content": [],
                        "usage": {"input_tokens": 3 + m % 7, "output_tokens": 100 + m, "cache_creation_input_tokens": 1000,
                                  "cache_read_input_tokens": 20_000 + m}}
                });
                delta.push_str(&line.to_string());
                delta.push('\n');
                if delta.len() > 4 << 20 || (m + 1) % per_delta == 0 {
                    flush(&mut delta, &mut offset, s)?;
                }
            }
            flush(&mut delta, &mut offset, s)?;
            sent += per_session.min(n - sent);
        }
        let mut first_report_s = [0.0; 2];
        let mut cpu_s = [0.0; 2];
        for (i, (api, central)) in apis.iter().zip([&with, &without]).enumerate() {
            let t = Instant::now();
            let r = api.get("/api/usage?report=monthly")?;
            first_report_s[i] = t.elapsed().as_secs_f64();
            if r.status != 200 {
                bail!("/api/usage answered {r:?}");
            }
            let pid = central.pid().context("central has no pid")?;
            cpu_s[i] = cpu_seconds(pid)?;
        }
        Ok(Ingested {
            central: with,
            token,
            requests_s: took.map(|t| t.as_secs_f64()),
            first_report_s,
            cpu_s,
        })
    }

    /// `n` Claude Code responses of one person across a year (100 per
    /// session, 4 models, 3 projects), ingested through the API; then,
    /// once central has indexed them, each report asked for 100 times
    /// after one untimed request, timed to its answer's last byte. What
    /// counting usage adds to ingest: the same responses with their usage
    /// under another name (the same bytes, no facts) go to a second
    /// central alongside, a session to a delta as a backfill sends them;
    /// and the first 100,000 both ways as capture sends them, a delta per
    /// turn of 10 responses.
    fn report_latency(n: usize) -> Result<Value> {
        // As capture sends them: a delta per turn of 10 responses, for
        // the first 100,000.
        let turns = n.min(100_000);
        let in_turns = year_of_responses(turns, 10)?.costs();
        // As a backfill sends them: a session to a delta.
        let backfill = year_of_responses(n, usize::MAX)?;
        let api = backfill.central.client(&backfill.token);
        // Reports of a central at rest, not one still indexing the year
        // (its keyword index catches up after the last delta).
        let t = Instant::now();
        api.wait_settled(Duration::from_secs(3600))?;
        let indexing_after_s = t.elapsed().as_secs_f64();
        let mut reports = serde_json::Map::new();
        for query in [
            "report=daily",
            "report=weekly",
            "report=monthly",
            "report=session",
            "report=daily&by=model",
            "report=monthly&by=project",
            "report=daily&timezone=%2B02:00",
            "report=daily&timezone=Asia/Kolkata",
            "report=blocks",
            "report=daily&since=2026-03-01T10:07:00Z&until=2026-09-01",
        ] {
            let path = format!("/api/usage?{query}");
            api.get(&path)?;
            // Until the answer's last byte: what central takes, not what
            // this client takes to parse it after.
            let mut samples = Vec::new();
            let mut body = Vec::new();
            for _ in 0..100 {
                let t = Instant::now();
                let (status, bytes) = api.get_bytes(&path)?;
                samples.push(t.elapsed().as_secs_f64() * 1000.0);
                if status != 200 {
                    bail!(
                        "{path} answered {status}: {}",
                        String::from_utf8_lossy(&bytes)
                    );
                }
                body = bytes;
            }
            let t = Instant::now();
            serde_json::from_slice::<Value>(&body)?;
            let mut timed = summary(samples);
            timed["bytes"] = json!(body.len());
            timed["client_parse_ms"] = json!(t.elapsed().as_secs_f64() * 1000.0);
            reports.insert(query.to_owned(), timed);
        }
        let check = api.get("/api/usage?report=monthly")?;
        Ok(json!({
            "messages": n,
            "ingest": backfill.costs(),
            "turns": {"messages": turns, "ingest": in_turns},
            "output_tokens_counted": check.body["totals"]["output_tokens"],
            "indexing_after_s": indexing_after_s,
            "reports_ms": reports,
        }))
    }
}

/// `kith-bench --backup`: an archive of `--mb` MB of blobs in a serving
/// central; a full backup, an incremental one after 1 % new data, verify
/// and restore throughput, and keyword search latency idle and while a
/// backup runs.
mod backup {
    use super::*;
    use kith_tests::{central_command, run_central};

    pub(super) fn run(args: &Args) -> Result<()> {
        let central = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
        let token = central.register("bench.test", "bench")?;
        let api = central.client(&token);
        let blobs = central.data_dir.join("runs");
        let target = args.mb << 20;
        let started = Instant::now();
        let mut n = 0usize;
        while dir_size(&blobs) < target {
            ingest(&api, n)?;
            n += 1;
        }
        let ingest_s = started.elapsed().as_secs_f64();
        api.wait_settled(Duration::from_secs(3600))?;
        let archive = dir_size(&blobs);
        let tmp = tempfile::tempdir()?;
        let dest = tmp.path().join("backup");
        let dest_s = dest.to_string_lossy().into_owned();

        let idle = search_samples(&api, "keyword", "none", 200, Duration::ZERO)?;
        // A full backup, searched meanwhile.
        let (full_s, during) = std::thread::scope(|scope| -> Result<(f64, Vec<f64>)> {
            let data = central.data_dir.clone();
            let dest = dest_s.clone();
            let backup = scope.spawn(move || -> Result<f64> {
                let t = Instant::now();
                let out = run_central(&data, &["backup", &dest])?;
                if !out.status.success() {
                    bail!("backup: {}", String::from_utf8_lossy(&out.stderr));
                }
                Ok(t.elapsed().as_secs_f64())
            });
            let mut during = Vec::new();
            while !backup.is_finished() {
                let t = Instant::now();
                api.post(
                    "/api/search",
                    &json!({"query": "harbour lantern", "mode": "keyword"}),
                )?;
                during.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            let full_s = backup
                .join()
                .map_err(|_| anyhow::anyhow!("the backup thread panicked"))??;
            Ok((full_s, during))
        })?;
        // 1 % more, then an incremental backup.
        let more = (n / 100).max(1);
        for i in n..n + more {
            ingest(&api, i)?;
        }
        let t = Instant::now();
        let out = run_central(&central.data_dir, &["backup", &dest_s])?;
        if !out.status.success() {
            bail!("backup: {}", String::from_utf8_lossy(&out.stderr));
        }
        let incremental_s = t.elapsed().as_secs_f64();
        let backup_bytes = dir_size(&dest);

        let t = Instant::now();
        let out = central_command().args(["verify", &dest_s]).output()?;
        if !out.status.success() {
            bail!("verify: {}", String::from_utf8_lossy(&out.stdout));
        }
        let verify_s = t.elapsed().as_secs_f64();
        drop(central);
        let restored = tmp.path().join("restored");
        let t = Instant::now();
        let out = run_central(&restored, &["restore", &dest_s])?;
        if !out.status.success() {
            bail!("restore: {}", String::from_utf8_lossy(&out.stderr));
        }
        let restore_s = t.elapsed().as_secs_f64();

        let mb = |bytes: u64| bytes as f64 / (1 << 20) as f64;
        let result = json!({
            "archive_mb": mb(archive),
            "deltas": n + more,
            "ingest_s": ingest_s,
            "full_backup_s": full_s,
            "incremental_backup_s": incremental_s,
            "backup_folder_mb": mb(backup_bytes),
            "verify_s": verify_s,
            "verify_mb_per_s": mb(backup_bytes) / verify_s,
            "restore_s": restore_s,
            "restore_mb_per_s": mb(archive) / restore_s,
            "search_idle_ms": summary(idle.ms),
            "search_during_backup_ms": summary(during),
        });
        println!("{}", serde_json::to_string_pretty(&result)?);
        let mut results: BTreeMap<&str, Value> = BTreeMap::new();
        results.insert("backup", result);
        save(&results, args.out.as_deref())
    }

    /// One 4 MB delta of its own transcript: Claude Code lines of words
    /// drawn from a large vocabulary (so the blobs compress as prose does).
    fn ingest(api: &Api, i: usize) -> Result<()> {
        let mut jsonl = String::new();
        let mut x = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        let mut line = 0;
        while jsonl.len() < 4 << 20 {
            let mut text = String::new();
            for _ in 0..120 {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                text.push_str(&format!("w{:x} ", x % 50_000));
            }
            if line % 50 == 0 {
                text.push_str("harbour lantern");
            }
            jsonl.push_str(&kith_tests::claude_user_line(
                &text,
                &format!(
                    "2026-03-01T{:02}:{:02}:{:02}Z",
                    line / 3600 % 24,
                    line / 60 % 60,
                    line % 60
                ),
            ));
            line += 1;
        }
        api.ingest(&json!({
            "jsonl": jsonl, "agent_runtime": "claude-code",
            "source_identity": format!("bench-backup/{i}"),
            "from_offset": 0, "to_offset": jsonl.len(),
        }))?;
        Ok(())
    }
}

/// `--attacks`: `/healthz` and one member's keyword search, timed from the
/// client while central is under each stall attack, and how long a full
/// index disk takes to heal once space returns.
///
/// Each attack is a tokio task per connection, from the source addresses
/// 127.0.0.2 to 127.0.0.255 (so the per-address cap is not what stops
/// them), reopened as soon as central closes it (at most once a second per
/// connection), for the whole window: slowloris (half send nothing, half a
/// partial request head and a header line every 5 s), sign-in bodies of a
/// declared 15,000 bytes fed a byte every 5 s, and HTTP/2 over TLS (central
/// speaks HTTP/2 only where TLS negotiated it) sending only the preface and
/// an empty SETTINGS frame. Every probe opens a fresh connection from
/// 127.0.0.1 and gives up after `TIMEOUT`; a failure counts at the time it
/// took.
mod attacks {
    use super::*;
    use kith_tests::PrivateCa;
    use std::net::{Ipv4Addr, SocketAddr};
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
    use std::sync::Arc;
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

    /// The least time each phase samples for, with its attack held.
    const WINDOW: Duration = Duration::from_secs(30);
    /// A phase stops here even short of `SAMPLES`.
    const MAX_WINDOW: Duration = Duration::from_secs(120);
    /// The least samples of each probe a phase takes.
    const SAMPLES: usize = 100;
    /// The client's timeout for each probe.
    const TIMEOUT: Duration = Duration::from_secs(5);
    /// The pause between one probe's answer and the next.
    const GAP: Duration = Duration::from_millis(100);
    /// How often a trickling attack connection sends its next byte (or line).
    const DRIP: Duration = Duration::from_secs(5);
    /// How long the index disk stays full, in each disk-full round, once
    /// central reports indexing failing (its retries back off from 1 s to
    /// 30 s, so the wait after the space returns depends on it).
    const HELD_FULL_S: [u64; 4] = [5, 20, 45, 70];
    const QUERY: &str = "harbour lantern";

    #[derive(Clone, Copy, Debug)]
    enum Kind {
        Slowloris,
        TrickledSignIn,
        Http2Preface,
    }

    pub(super) fn run(args: &Args) -> Result<()> {
        raise_descriptor_limit(16_384)?;
        let mut results: BTreeMap<&str, Value> = BTreeMap::new();
        results.insert(
            "method",
            json!({
                "window_s": WINDOW.as_secs(), "samples_at_least": SAMPLES,
                "client_timeout_s": TIMEOUT.as_secs(), "gap_ms": GAP.as_millis() as u64,
                "drip_s": DRIP.as_secs(), "source_addresses": "127.0.0.2-127.0.0.255",
                "probe_source": "127.0.0.1, a fresh connection per probe",
            }),
        );
        let mut phases = Vec::new();

        let central = Central::start_with(&[("KITH_EMBED_PROVIDER", "none")])?;
        let token = central.register("bench.test", "bench")?;
        let target = Target::new(&central.url, &token, None)?;
        seed(&target)?;
        for (label, attack) in [
            ("baseline, HTTP/1.1", None),
            ("1,000 slowloris connections", Some((Kind::Slowloris, 1000))),
            (
                "1,100 trickled sign-ins",
                Some((Kind::TrickledSignIn, 1100)),
            ),
            // More than central serves at once (1,024), from 254 addresses.
            ("1,100 slowloris connections", Some((Kind::Slowloris, 1100))),
        ] {
            phases.push(phase(&target, label, attack)?);
            results.insert("stall", json!(phases));
            save(&results, args.out.as_deref())?;
        }
        drop(central);

        let tmp = tempfile::tempdir()?;
        let ca = PrivateCa::make(tmp.path())?;
        let [(cert_var, cert), (key_var, key)] = ca.central_env();
        let central = Central::start_on(
            &tmp.path().join("data"),
            &[
                (cert_var, cert.as_str()),
                (key_var, key.as_str()),
                ("KITH_EMBED_PROVIDER", "none"),
            ],
        )?;
        let token = central.register("bench.test", "bench")?;
        let target = Target::new(&central.url, &token, Some(&ca.ca))?;
        seed(&target)?;
        for (label, attack) in [
            ("baseline, TLS", None),
            (
                "1,024 idle HTTP/2 connections (TLS)",
                Some((Kind::Http2Preface, 1024)),
            ),
        ] {
            phases.push(phase(&target, label, attack)?);
            results.insert("stall", json!(phases));
            save(&results, args.out.as_deref())?;
        }
        drop(central);

        results.insert("disk_full", disk_full()?);
        save(&results, args.out.as_deref())?;
        print(&serde_json::to_value(&results)?);
        Ok(())
    }

    /// Thousands of sockets on each side: the soft limit raised to `want`
    /// (or the hard limit) before central starts, which inherits it.
    fn raise_descriptor_limit(want: u64) -> Result<()> {
        use rustix::process::{getrlimit, setrlimit, Resource};
        let mut limit = getrlimit(Resource::Nofile);
        let have = limit.current.unwrap_or(u64::MAX);
        if have >= want {
            return Ok(());
        }
        limit.current = Some(limit.maximum.map_or(want, |max| max.min(want)));
        setrlimit(Resource::Nofile, limit)?;
        let now = getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX);
        if now < 4096 {
            bail!("open files are limited to {now}: raise it (ulimit -n 16384)");
        }
        Ok(())
    }

    /// The central probed: its address, a member's token, and a client that
    /// opens a fresh connection per request.
    struct Target {
        url: String,
        addr: SocketAddr,
        api: Api,
        tls: Option<Arc<rustls::ClientConfig>>,
    }

    impl Target {
        fn new(url: &str, token: &str, ca: Option<&std::path::Path>) -> Result<Self> {
            let mut http = reqwest::blocking::Client::builder()
                .timeout(TIMEOUT)
                .pool_max_idle_per_host(0);
            let mut tls = None;
            if let Some(ca) = ca {
                http =
                    http.add_root_certificate(reqwest::Certificate::from_pem(&std::fs::read(ca)?)?);
                tls = Some(Arc::new(tls_config(ca)?));
            }
            let addr = url
                .trim_start_matches("http://")
                .trim_start_matches("https://")
                .parse()?;
            Ok(Self {
                url: url.to_owned(),
                addr,
                api: Api {
                    base: url.to_owned(),
                    token: token.to_owned(),
                    http: http.build()?,
                },
                tls,
            })
        }

        /// One probe: (milliseconds, answered 200).
        fn probe(&self, search: bool) -> (f64, bool) {
            let started = Instant::now();
            let req = if search {
                self.api
                    .http
                    .post(format!("{}/api/search", self.url))
                    .bearer_auth(&self.api.token)
                    .json(&json!({"query": QUERY, "mode": "keyword"}))
            } else {
                self.api.http.get(format!("{}/healthz", self.url))
            };
            let ok = req
                .send()
                .and_then(|r| {
                    let ok = r.status().as_u16() == 200;
                    r.bytes().map(|_| ok)
                })
                .unwrap_or(false);
            (started.elapsed().as_secs_f64() * 1000.0, ok)
        }
    }

    /// A client trusting only the bench's CA, offering h2 alone.
    fn tls_config(ca: &std::path::Path) -> Result<rustls::ClientConfig> {
        let mut roots = rustls::RootCertStore::empty();
        let pem = std::fs::read(ca)?;
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            roots.add(cert?)?;
        }
        let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(config)
    }

    /// A few conversations of the member, keyword-searchable for `QUERY`.
    fn seed(target: &Target) -> Result<()> {
        let mut last = String::new();
        for i in 0..5 {
            let text = format!(
                "conversation {i}: the harbour lantern was relit after the storm, note {i}"
            );
            let r = target.api.ingest(&kith_tests::delta(
                &format!("bench-attacks/{i}"),
                0,
                &kith_tests::claude_user_line(&text, "2026-05-11T10:00:00Z"),
            ))?;
            last = r;
        }
        target.api.wait_indexed(&last, Duration::from_secs(60))?;
        if target.api.keyword(QUERY)?.is_empty() {
            bail!("the seeded conversations are not found");
        }
        Ok(())
    }

    /// One phase: the attack (if any) opened and held, both probes sampled
    /// side by side for the window.
    fn phase(target: &Target, label: &str, attack: Option<(Kind, usize)>) -> Result<Value> {
        let attack = attack
            .map(|(kind, n)| Attack::start(kind, n, target.addr, target.tls.clone()))
            .transpose()?;
        if let Some(a) = &attack {
            // Every connection opened (or 20 s passed).
            let deadline = Instant::now() + Duration::from_secs(20);
            while a.stats.opened.load(Ordering::Relaxed) < a.n as u64 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        let stop = AtomicBool::new(false);
        let counts = [AtomicUsize::new(0), AtomicUsize::new(0)];
        let started = Instant::now();
        let mut open_seen = Vec::new();
        let (health, search) = std::thread::scope(|scope| {
            let sampler = |search: bool| {
                let (stop, counts) = (&stop, &counts);
                scope.spawn(move || {
                    let mut out = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        out.push(target.probe(search));
                        counts[usize::from(search)].fetch_add(1, Ordering::Relaxed);
                        std::thread::sleep(GAP);
                    }
                    out
                })
            };
            let health = sampler(false);
            let search = sampler(true);
            loop {
                std::thread::sleep(Duration::from_secs(1));
                if let Some(a) = &attack {
                    open_seen.push(a.stats.open.load(Ordering::Relaxed));
                }
                let enough = counts.iter().all(|c| c.load(Ordering::Relaxed) >= SAMPLES);
                let waited = started.elapsed();
                if (waited >= WINDOW && enough) || waited >= MAX_WINDOW {
                    break;
                }
            }
            stop.store(true, Ordering::Relaxed);
            (
                health.join().unwrap_or_default(),
                search.join().unwrap_or_default(),
            )
        });
        let window_s = started.elapsed().as_secs_f64();
        let mut out = json!({
            "phase": label,
            "window_s": window_s,
            "healthz": stats(&health),
            "search": stats(&search),
        });
        if let Some(a) = attack {
            let s = &a.stats;
            let closed = s.closed.load(Ordering::Relaxed);
            out["attack"] = json!({
                "kind": format!("{:?}", a.kind),
                "connections": a.n,
                "open_min": open_seen.iter().min(),
                "open_max": open_seen.iter().max(),
                "opened": s.opened.load(Ordering::Relaxed),
                "closed_by_central": closed,
                "answered_bytes": s.answered.load(Ordering::Relaxed),
                "connect_failures": s.failed.load(Ordering::Relaxed),
                "held_s_mean": s.held_ms.load(Ordering::Relaxed) as f64 / 1000.0 / closed.max(1) as f64,
            });
        }
        println!("{}", serde_json::to_string(&out)?);
        // Give central a moment to drop what the attack left behind.
        std::thread::sleep(Duration::from_secs(3));
        Ok(out)
    }

    fn stats(samples: &[(f64, bool)]) -> Value {
        let mut ms: Vec<f64> = samples.iter().map(|s| s.0).collect();
        ms.sort_by(|a, b| a.total_cmp(b));
        json!({
            "n": ms.len(),
            "p50_ms": percentile(&ms, 0.50),
            "p99_ms": percentile(&ms, 0.99),
            "max_ms": ms.last().copied().unwrap_or(f64::NAN),
            "failures": samples.iter().filter(|s| !s.1).count(),
            "over_1s": ms.iter().filter(|&&m| m > 1000.0).count(),
        })
    }

    #[derive(Default)]
    struct Stats {
        /// Attack connections connected now (as the client sees them: one
        /// central has not accepted yet, in its listen backlog, counts).
        open: AtomicUsize,
        opened: AtomicU64,
        /// Ended by central (its end of the connection closed or reset).
        closed: AtomicU64,
        /// Bytes central answered on them (a refusal, HTTP/2 frames).
        answered: AtomicU64,
        failed: AtomicU64,
        /// Summed lifetime of the closed ones.
        held_ms: AtomicU64,
    }

    /// An attack in progress: `n` connections, each reopened when central
    /// ends it, until dropped (the runtime and every socket with it).
    struct Attack {
        kind: Kind,
        n: usize,
        stats: Arc<Stats>,
        _runtime: tokio::runtime::Runtime,
    }

    impl Attack {
        fn start(
            kind: Kind,
            n: usize,
            addr: SocketAddr,
            tls: Option<Arc<rustls::ClientConfig>>,
        ) -> Result<Self> {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()?;
            let stats = Arc::new(Stats::default());
            if matches!(kind, Kind::Http2Preface) && tls.is_none() {
                bail!("the HTTP/2 attack needs a TLS central");
            }
            for i in 0..n {
                let (stats, tls) = (stats.clone(), tls.clone());
                runtime.spawn(async move {
                    let source = Ipv4Addr::new(127, 0, 0, 2 + (i % 254) as u8);
                    loop {
                        let began = Instant::now();
                        match connection(kind, i, source, addr, tls.clone(), &stats).await {
                            Ok(()) => {
                                stats.closed.fetch_add(1, Ordering::Relaxed);
                                stats.held_ms.fetch_add(
                                    began.elapsed().as_millis() as u64,
                                    Ordering::Relaxed,
                                );
                            }
                            Err(_) => {
                                stats.failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        let pause = Duration::from_secs(1).saturating_sub(began.elapsed());
                        tokio::time::sleep(pause).await;
                    }
                });
            }
            Ok(Self {
                kind,
                n,
                stats,
                _runtime: runtime,
            })
        }
    }

    /// Counts an open attack connection while it lives.
    struct Open(Arc<Stats>);

    impl Drop for Open {
        fn drop(&mut self) {
            self.0.open.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// One attack connection, until central ends it.
    async fn connection(
        kind: Kind,
        i: usize,
        source: Ipv4Addr,
        addr: SocketAddr,
        tls: Option<Arc<rustls::ClientConfig>>,
        stats: &Arc<Stats>,
    ) -> Result<()> {
        let socket = tokio::net::TcpSocket::new_v4()?;
        socket.bind(SocketAddr::from((source, 0)))?;
        let tcp = tokio::time::timeout(Duration::from_secs(10), socket.connect(addr)).await??;
        stats.opened.fetch_add(1, Ordering::Relaxed);
        stats.open.fetch_add(1, Ordering::Relaxed);
        let _open = Open(stats.clone());
        let host = addr.to_string();
        match kind {
            Kind::Slowloris if i.is_multiple_of(2) => hold(tcp, b"", None, stats).await,
            Kind::Slowloris => {
                let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n");
                hold(tcp, head.as_bytes(), Some(b"X-a: b\r\n"), stats).await
            }
            Kind::TrickledSignIn => {
                let head = format!(
                    "POST /signin HTTP/1.1\r\nHost: {host}\r\n\
                     Content-Type: application/x-www-form-urlencoded\r\n\
                     Content-Length: 15000\r\n\r\nhandle="
                );
                hold(tcp, head.as_bytes(), Some(b"a"), stats).await
            }
            Kind::Http2Preface => {
                let tls = tls.context("no TLS client")?;
                let name = rustls::pki_types::ServerName::IpAddress(addr.ip().into());
                let stream = tokio::time::timeout(
                    Duration::from_secs(10),
                    tokio_rustls::TlsConnector::from(tls).connect(name, tcp),
                )
                .await??;
                hold(
                    stream,
                    b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00",
                    None,
                    stats,
                )
                .await
            }
        }
    }

    /// Sends `first`, then `drip` every `DRIP`, reading (and never
    /// answering) whatever central sends, until central ends the
    /// connection.
    async fn hold<S: AsyncRead + AsyncWrite + Unpin>(
        mut stream: S,
        first: &[u8],
        drip: Option<&[u8]>,
        stats: &Stats,
    ) -> Result<()> {
        if !first.is_empty() && stream.write_all(first).await.is_err() {
            return Ok(());
        }
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + DRIP, DRIP);
        let mut buf = [0u8; 4096];
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return Ok(()),
                    Ok(n) => {
                        stats.answered.fetch_add(n as u64, Ordering::Relaxed);
                    }
                },
                _ = tick.tick() => {
                    if let Some(bytes) = drip {
                        if stream.write_all(bytes).await.is_err() {
                            return Ok(());
                        }
                    }
                }
            }
        }
    }

    /// The index on a 4 MiB tmpfs in a private mount namespace (`unshare
    /// -rm`): filled, a delta posted (accepted, waiting), the disk held full
    /// for a while after central reports indexing failing, then freed;
    /// the time from freeing the space to the delta being found, and to
    /// `/api/status` clearing `indexing_failing_since`.
    fn disk_full() -> Result<Value> {
        let tmp = tempfile::tempdir()?;
        let data = tmp.path().join("data");
        std::fs::create_dir_all(&data)?;
        let index = data.join("index");
        let token = kith_tests::register_local(&data, "fill.local", "laptop")?;
        let central =
            Central::start_with_index_on_tmpfs(&data, 4, &[("KITH_EMBED_PROVIDER", "none")])?;
        let inside = |script: &str| central.inside(script);
        let api = central.client(&token);
        let post = |source: &str, text: &str| {
            api.ingest(&kith_tests::delta(
                source,
                0,
                &kith_tests::claude_user_line(text, "2026-05-11T10:00:00Z"),
            ))
        };
        let first = post("fill-seed", "the seedfull note before the disk filled")?;
        api.wait_indexed(&first, Duration::from_secs(60))?;
        let failing = || -> Result<bool> {
            Ok(api.get("/api/status")?.body["indexing_failing_since"].is_string())
        };
        let filler = index.join("filler");
        let mut rounds = Vec::new();
        let words = ["alphafull", "bravofull", "charliefull", "deltafull"];
        for (round, (word, hold_s)) in words.into_iter().zip(HELD_FULL_S).enumerate() {
            inside(&format!(
                "cat /dev/zero > '{}' 2>/dev/null; true",
                filler.display()
            ))?;
            let posted = Instant::now();
            post(&format!("fill-{round}"), &format!("the {word} note"))?;
            while !failing()? {
                if posted.elapsed() > Duration::from_secs(60) {
                    bail!("round {round}: status never reported indexing failing");
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let reported_s = posted.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_secs(hold_s));
            if !api.keyword(word)?.is_empty() {
                bail!("round {round}: {word} found while the disk was full");
            }
            let held_s = posted.elapsed().as_secs_f64();
            inside(&format!("rm -f '{}'", filler.display()))?;
            let freed = Instant::now();
            let (mut found_s, mut cleared_s) = (None, None);
            while (found_s.is_none() || cleared_s.is_none())
                && freed.elapsed() < Duration::from_secs(120)
            {
                if found_s.is_none() && !api.keyword(word)?.is_empty() {
                    found_s = Some(freed.elapsed().as_secs_f64());
                }
                if cleared_s.is_none() && !failing()? {
                    cleared_s = Some(freed.elapsed().as_secs_f64());
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let r = json!({
                "round": round + 1,
                "failing_reported_after_s": reported_s,
                "full_for_s": held_s,
                "searchable_after_free_s": found_s,
                "status_cleared_after_free_s": cleared_s,
            });
            println!("{}", serde_json::to_string(&r)?);
            rounds.push(r);
        }
        Ok(json!({"tmpfs_mb": 4, "rounds": rounds}))
    }

    fn print(r: &Value) {
        let ms = |v: &Value| {
            v.as_f64()
                .map_or_else(|| "-".to_owned(), |x| format!("{x:.1}"))
        };
        println!(
            "\n{:<38} {:>30} {:>30}",
            "", "/healthz p50/p99/max ms", "search p50/p99/max ms"
        );
        for p in r["stall"].as_array().into_iter().flatten() {
            let cell = |s: &Value| {
                format!(
                    "{}/{}/{} ({}/{} failed)",
                    ms(&s["p50_ms"]),
                    ms(&s["p99_ms"]),
                    ms(&s["max_ms"]),
                    s["failures"],
                    s["n"]
                )
            };
            println!(
                "{:<38} {:>30} {:>30}",
                p["phase"].as_str().unwrap_or_default(),
                cell(&p["healthz"]),
                cell(&p["search"])
            );
        }
        println!();
        for round in r["disk_full"]["rounds"].as_array().into_iter().flatten() {
            row(
                format!(
                    "disk full {:.0} s: searchable / status clear after freeing",
                    round["full_for_s"].as_f64().unwrap_or(f64::NAN)
                ),
                format!(
                    "{} s / {} s",
                    ms(&round["searchable_after_free_s"]),
                    ms(&round["status_cleared_after_free_s"])
                ),
            );
        }
    }
}
