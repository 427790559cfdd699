//! The LoCoMo dev retrieval evaluation: every session of every conversation
//! becomes a transcript ingested through the real API; every question (bar
//! the adversarial category 5) is asked through `POST /api/search`, and the
//! hits' line ranges are mapped back to evidence turns for Recall@k, and
//! their runs back to sessions for session-level hit@k and Recall@k, from
//! the ranked chunks and from a search grouped by conversation (one LoCoMo
//! session is one transcript, so one kith conversation).
//!
//! Held-out split: of the conversations in id order, the first
//! `TUNE_CONVERSATIONS` are for tuning and the rest are reported on
//! (`Split`). Every conversation is ingested whichever split is asked, so a
//! question is ranked against the same corpus in every split.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::Api;

/// One question with its evidence turn ids (`D<session>:<i>`).
#[derive(Debug, Clone)]
pub struct Question {
    pub conversation: String,
    /// LoCoMo's category: 1 multi-hop, 2 temporal, 3 open-domain, 4
    /// single-hop (5, adversarial, is left out).
    pub category: u64,
    pub text: String,
    pub evidence: Vec<String>,
}

/// A category's name, as the LoCoMo paper's tables have them.
pub fn category_name(category: u64) -> &'static str {
    match category {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        _ => "other",
    }
}

/// Conversations (in id order) the tuning split takes; the rest are held
/// out and reported on.
pub const TUNE_CONVERSATIONS: usize = 3;

/// Which questions are asked: the tuning conversations, the held-out ones,
/// or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Split {
    Tune,
    Report,
    All,
}

impl Split {
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "tune" => Ok(Split::Tune),
            "report" => Ok(Split::Report),
            "all" => Ok(Split::All),
            other => anyhow::bail!("unknown split {other:?}: tune, report or all"),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Split::Tune => "tune",
            Split::Report => "report",
            Split::All => "all",
        }
    }

    /// The split's conversations out of every one the sessions hold: the
    /// first `TUNE_CONVERSATIONS` ids in order are `Tune`, the rest `Report`.
    pub fn conversations(self, sessions: &[Session]) -> Vec<String> {
        let ids: std::collections::BTreeSet<&str> =
            sessions.iter().map(|s| s.conversation.as_str()).collect();
        let ids = ids.into_iter().map(str::to_owned);
        match self {
            Split::Tune => ids.take(TUNE_CONVERSATIONS).collect(),
            Split::Report => ids.skip(TUNE_CONVERSATIONS).collect(),
            Split::All => ids.collect(),
        }
    }
}

/// A LoCoMo session as kith stores it: the transcript and which dialogue
/// turn sits on which line.
#[derive(Debug, Clone)]
pub struct Session {
    pub conversation: String,
    /// LoCoMo's session number: turn `D<number>:<i>` is in this session.
    pub number: u32,
    pub jsonl: String,
    /// 1-based line -> dia_id.
    pub lines: Vec<String>,
    pub started_at: String,
}

/// Parses `conv-N.json` files into sessions and questions.
pub fn load(dir: &Path) -> Result<(Vec<Session>, Vec<Question>)> {
    let mut sessions = Vec::new();
    let mut questions = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    for file in files {
        let conv = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let doc: Value = serde_json::from_slice(&std::fs::read(&file)?)
            .with_context(|| file.display().to_string())?;
        let obj = doc.as_object().context("conversation is not an object")?;
        let mut keys: Vec<(u32, &str)> = obj
            .keys()
            .filter_map(|k| {
                k.strip_prefix("session_")
                    .and_then(|n| n.parse().ok())
                    .map(|n| (n, k.as_str()))
            })
            .collect();
        keys.sort();
        for (n, key) in keys {
            // "1:56 pm on 8 May, 2023": when the session took place.
            let started_at = obj
                .get(&format!("{key}_date_time"))
                .and_then(Value::as_str)
                .and_then(rfc3339)
                .with_context(|| format!("{conv} {key}: no readable date"))?;
            let mut jsonl = String::new();
            let mut lines = Vec::new();
            for (i, turn) in obj[key].as_array().into_iter().flatten().enumerate() {
                let speaker = turn["speaker"].as_str().unwrap_or_default();
                let mut text = turn["text"].as_str().unwrap_or_default().to_owned();
                if let Some(caption) = turn["blip_caption"].as_str() {
                    text.push_str(&format!(" [shares a photo: {caption}]"));
                }
                let line = json!({
                    "type": "user",
                    "uuid": format!("{conv}-{n}-{i}"),
                    "sessionId": conv,
                    "timestamp": started_at,
                    "message": {"role": "user", "content": format!("{speaker}: {text}")},
                });
                jsonl.push_str(&line.to_string());
                jsonl.push('\n');
                lines.push(turn["dia_id"].as_str().unwrap_or_default().to_owned());
            }
            if !lines.is_empty() {
                sessions.push(Session {
                    conversation: conv.clone(),
                    number: n,
                    jsonl,
                    lines,
                    started_at,
                });
            }
        }
        for qa in obj
            .get("qa")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if qa["category"].as_u64() == Some(5) {
                continue;
            }
            let evidence: Vec<String> = qa["evidence"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                // One entry of the data lists two turns: "D8:6; D9:17".
                .flat_map(|e| e.split(';'))
                .map(|e| e.trim().to_owned())
                .filter(|e| !e.is_empty())
                .collect();
            if evidence.is_empty() {
                continue;
            }
            questions.push(Question {
                conversation: conv.clone(),
                category: qa["category"].as_u64().unwrap_or(0),
                text: qa["question"].as_str().unwrap_or_default().to_owned(),
                evidence,
            });
        }
    }
    Ok((sessions, questions))
}

/// LoCoMo's session time, "1:56 pm on 8 May, 2023", as RFC 3339 (UTC).
fn rfc3339(text: &str) -> Option<String> {
    let (clock, date) = text.split_once(" on ")?;
    let (hm, half) = clock.trim().split_once(' ')?;
    let (h, m) = hm.split_once(':')?;
    let (h, m): (u32, u32) = (h.parse().ok()?, m.parse().ok()?);
    let h = match half.to_ascii_lowercase().as_str() {
        "am" => h % 12,
        "pm" => h % 12 + 12,
        _ => return None,
    };
    let mut parts = date.split([' ', ',']).filter(|p| !p.is_empty());
    let day: u32 = parts.next()?.parse().ok()?;
    let month = parts.next()?;
    let month = MONTHS.iter().position(|&name| name == month)? + 1;
    let year: u32 = parts.next()?.parse().ok()?;
    Some(format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:00.000Z"
    ))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Ingests every session; returns run id -> session index.
pub fn ingest(api: &Api, sessions: &[Session]) -> Result<HashMap<String, usize>> {
    let mut runs = HashMap::new();
    for (idx, s) in sessions.iter().enumerate() {
        let body = json!({
            "jsonl": s.jsonl,
            "agent_runtime": "claude-code",
            "source_identity": format!("locomo/{}/{idx}", s.conversation),
            "from_offset": 0,
            "to_offset": s.jsonl.len(),
            "conversation_id": s.conversation,
            "started_at": s.started_at,
        });
        let r = api.post("/api/runs", &body)?;
        anyhow::ensure!(r.status == 202, "ingest failed: {r:?}");
        runs.insert(
            r.body["run_id"].as_str().unwrap_or_default().to_owned(),
            idx,
        );
    }
    for id in runs.keys() {
        api.wait_indexed(id, Duration::from_secs(600))?;
    }
    Ok(runs)
}

/// Distinct turns the reference figures' R@10 reads: ten two-turn chunks.
pub const TURN_BUDGET: usize = 20;

/// Session-level cut-offs: the first k distinct sessions (or groups).
pub const SESSION_KS: [usize; 3] = [1, 5, 10];

/// Hits an ungrouped search is asked for when its first sessions are
/// counted: as many as central ranks for a grouped search of ten
/// conversations (five hits per conversation asked for).
pub const SESSION_POOL: usize = 50;

/// One question's figures, by name (see `score`).
pub type Scores = BTreeMap<String, f64>;

/// Every question's figures, in question order (see `score`).
pub fn evaluate(
    api: &Api,
    sessions: &[Session],
    runs: &HashMap<String, usize>,
    questions: &[Question],
    mode: &str,
    ks: &[usize],
) -> Result<Vec<Scores>> {
    questions
        .iter()
        .map(|q| score(api, sessions, runs, q, mode, ks))
        .collect()
}

/// The figures averaged over the questions given.
pub fn mean<'a>(scores: impl IntoIterator<Item = &'a Scores>) -> Scores {
    let mut sums = Scores::new();
    let mut n = 0usize;
    for s in scores {
        n += 1;
        for (k, v) in s {
            *sums.entry(k.clone()).or_default() += v;
        }
    }
    sums.into_iter()
        .map(|(k, s)| (k, s / n.max(1) as f64))
        .collect()
}

/// One question's figures, by name, from three searches in `mode` within
/// its conversation:
///
/// - chunks (`limit` the largest k, at least `TURN_BUDGET`): `recall@k` for
///   each k (evidence turns inside the line ranges of the first k hits),
///   `recall@20turns` (evidence among the first `TURN_BUDGET` distinct
///   turns the hits cover, in hit order: independent of how many turns one
///   hit spans, so comparable with the reference's two-turn chunks), and
///   `turns_per_hit@10` (the turns a hit among the first ten covers: the
///   reference's chunks cover two);
/// - sessions from the same hits: their runs in rank order, each the
///   LoCoMo session it was written from, the first k distinct ones kept:
///   `session_hit@k` (1 when an evidence session is among them) and
///   `session_recall@k` (the share of the question's evidence sessions
///   among them), for k in `SESSION_KS`; `sessions_in_hits` counts the
///   distinct sessions the hits hold;
/// - the same from a search grouped by conversation (`limit` the largest
///   k in `SESSION_KS`): the groups in order are the sessions in order,
///   `grouped_session_hit@k` and `grouped_session_recall@k`;
/// - the same from `SESSION_POOL` ranked chunks, as many as the grouped
///   search ranks: `pool_session_hit@k`, `pool_session_recall@k`.
pub fn score(
    api: &Api,
    sessions: &[Session],
    runs: &HashMap<String, usize>,
    q: &Question,
    mode: &str,
    ks: &[usize],
) -> Result<Scores> {
    let max_k = ks.iter().copied().max().unwrap_or(10).max(TURN_BUDGET);
    let search = |limit: usize, group: &str| search_conversation(api, q, mode, limit, group);
    let session_of = |hit: &Value| hit["run_id"].as_str().and_then(|id| runs.get(id)).copied();
    let mut out = Scores::new();

    let hits = search(max_k, "none")?["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let want: HashSet<&str> = q.evidence.iter().map(String::as_str).collect();
    // Each hit's turns, as (session, 1-based line).
    let turns: Vec<Vec<(usize, usize)>> = hits
        .iter()
        .map(|hit| {
            let Some(s) = session_of(hit) else {
                return Vec::new();
            };
            let a = hit["line_start"].as_u64().unwrap_or(0) as usize;
            let b = hit["line_end"].as_u64().unwrap_or(0) as usize;
            (a.max(1)..=b).map(|line| (s, line)).collect()
        })
        .collect();
    let is_evidence = |&(s, line): &(usize, usize)| {
        sessions[s]
            .lines
            .get(line - 1)
            .filter(|dia| want.contains(dia.as_str()))
    };
    let recall = |found: HashSet<&String>| found.len() as f64 / want.len() as f64;
    for &k in ks {
        let found = turns.iter().take(k).flatten().filter_map(is_evidence);
        out.insert(format!("recall@{k}"), recall(found.collect()));
    }
    let mut seen = HashSet::new();
    let first_turns = turns
        .iter()
        .flatten()
        .filter(|t| seen.insert(**t))
        .take(TURN_BUDGET);
    out.insert(
        format!("recall@{TURN_BUDGET}turns"),
        recall(first_turns.filter_map(is_evidence).collect()),
    );
    let top: Vec<_> = turns.iter().take(10).collect();
    out.insert(
        "turns_per_hit@10".into(),
        top.iter().map(|t| t.len()).sum::<usize>() as f64 / top.len().max(1) as f64,
    );

    // Sessions: "D8" for turn "D8:6" (a malformed id names no session).
    let want_sessions: HashSet<String> = q
        .evidence
        .iter()
        .map(|e| e.split(':').next().unwrap_or_default().to_owned())
        .collect();
    let key = |s: usize| format!("D{}", sessions[s].number);
    let max_s = SESSION_KS.iter().copied().max().unwrap_or(10);
    let session_figures = |out: &mut Scores, prefix: &str, ranked: Vec<usize>| {
        for k in SESSION_KS {
            let found = ranked
                .iter()
                .take(k)
                .filter(|&&s| sessions[s].conversation == q.conversation)
                .map(|&s| key(s))
                .filter(|s| want_sessions.contains(s))
                .count();
            out.insert(
                format!("{prefix}session_hit@{k}"),
                if found > 0 { 1.0 } else { 0.0 },
            );
            out.insert(
                format!("{prefix}session_recall@{k}"),
                found as f64 / want_sessions.len() as f64,
            );
        }
    };
    let first_sessions = |hits: &[Value]| {
        let mut seen = HashSet::new();
        let ranked: Vec<usize> = hits
            .iter()
            .filter_map(session_of)
            .filter(|&s| seen.insert(s))
            .collect();
        ranked
    };
    let ranked = first_sessions(&hits);
    out.insert("sessions_in_hits".into(), ranked.len() as f64);
    session_figures(&mut out, "", ranked);
    let pool = search(SESSION_POOL, "none")?["hits"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    session_figures(&mut out, "pool_", first_sessions(&pool));
    let groups = search(max_s, "conversation")?["groups"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut seen = HashSet::new();
    let ranked: Vec<usize> = groups
        .iter()
        .filter_map(|g| g["hits"].as_array()?.iter().find_map(session_of))
        .filter(|&s| seen.insert(s))
        .collect();
    session_figures(&mut out, "grouped_", ranked);
    Ok(out)
}

/// `q` searched in `mode` within its own conversation: `limit` hits, or
/// conversations when `group` is "conversation".
fn search_conversation(
    api: &Api,
    q: &Question,
    mode: &str,
    limit: usize,
    group: &str,
) -> Result<Value> {
    let r = api.post(
        "/api/search",
        &json!({
            "query": q.text,
            "mode": mode,
            "limit": limit,
            "group": group,
            "filters": {"conversation_id": q.conversation},
        }),
    )?;
    anyhow::ensure!(r.status == 200, "search failed: {r:?}");
    Ok(r.body)
}

/// One question's `SESSION_POOL` ranked hits in `mode`, within its
/// conversation, as one JSON object for offline re-ranking: the question
/// (`q`, `conv`, `cat`, `evidence`), `mode`, and per hit its LoCoMo
/// `session` number, its lines `a`..=`b`, their turn ids (`dias`) and its
/// `score`, in rank order.
pub fn pool_hits(
    api: &Api,
    sessions: &[Session],
    runs: &HashMap<String, usize>,
    q: &Question,
    mode: &str,
) -> Result<Value> {
    let body = search_conversation(api, q, mode, SESSION_POOL, "none")?;
    let hits: Vec<Value> = body["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|h| {
            let s = *runs.get(h["run_id"].as_str()?)?;
            let a = h["line_start"].as_u64()? as usize;
            let b = h["line_end"].as_u64()? as usize;
            let dias: Vec<&String> = (a.max(1)..=b)
                .filter_map(|line| sessions[s].lines.get(line - 1))
                .collect();
            Some(json!({
                "session": sessions[s].number, "a": a, "b": b, "dias": dias, "score": h["score"],
            }))
        })
        .collect();
    Ok(json!({
        "q": q.text, "conv": q.conversation, "cat": q.category, "evidence": q.evidence,
        "mode": mode, "hits": hits,
    }))
}

/// Token budgets the context pack is measured at.
pub const PACK_BUDGETS: [u32; 3] = [1000, 2000, 4000];

/// One question's context-pack figures: `pack_recall@B` (the share of its
/// evidence turns inside the line ranges of the passages of a `POST
/// /api/context` pack of B tokens, within its conversation; a passage cut
/// to fit counts only when it was not cut), `pack_passages@B` and
/// `pack_tokens@B`, for B in `PACK_BUDGETS`.
pub fn pack_score(
    api: &Api,
    sessions: &[Session],
    runs: &HashMap<String, usize>,
    q: &Question,
) -> Result<Scores> {
    let want: HashSet<&str> = q.evidence.iter().map(String::as_str).collect();
    let mut out = Scores::new();
    for budget in PACK_BUDGETS {
        let r = api.post(
            "/api/context",
            &json!({
                "task": q.text,
                "budget_tokens": budget,
                "filters": {"conversation_id": q.conversation},
            }),
        )?;
        anyhow::ensure!(r.status == 200, "context failed: {r:?}");
        let passages = r.body["passages"].as_array().cloned().unwrap_or_default();
        let mut found = HashSet::new();
        for p in passages
            .iter()
            .filter(|p| !p["text"].as_str().unwrap_or_default().ends_with('…'))
        {
            let Some(&s) = p["run_id"].as_str().and_then(|id| runs.get(id)) else {
                continue;
            };
            let a = p["line_start"].as_u64().unwrap_or(1).max(1) as usize;
            let b = p["line_end"].as_u64().unwrap_or(0) as usize;
            for line in a..=b {
                if let Some(dia) = sessions[s].lines.get(line - 1) {
                    if want.contains(dia.as_str()) {
                        found.insert(dia.clone());
                    }
                }
            }
        }
        out.insert(
            format!("pack_recall@{budget}"),
            found.len() as f64 / want.len().max(1) as f64,
        );
        out.insert(format!("pack_passages@{budget}"), passages.len() as f64);
        out.insert(
            format!("pack_tokens@{budget}"),
            r.body["used_tokens"].as_f64().unwrap_or(0.0),
        );
    }
    Ok(out)
}

/// Queries with no answer in any LoCoMo conversation, beside its own
/// adversarial questions (`adversarial`), for the relevance floor: words
/// that are no words, and topics the conversations (two friends' chats
/// about their lives) never touch.
pub const NONSENSE: &[&str] = &[
    "xyzzyqwerty",
    "florbnax quimble",
    "zzqx vrrmp",
    "blorptastic wug",
    "qwfp arst zxcv",
    "snarfle gronk",
    "plumbix trevvel",
    "oobleck quazzle mip",
    "vlargh",
    "kriznak dorpel",
    "mmbrlgh fnord",
    "tzzt pakwee",
];

/// Topics absent from every LoCoMo conversation.
pub const ABSENT: &[&str] = &[
    "make the importer retry on HTTP 429",
    "rust borrow checker lifetime error in the parser",
    "kubernetes ingress TLS certificate renewal",
    "postgres vacuum autovacuum tuning for large tables",
    "webpack build fails on a missing loader",
    "git rebase conflict in the lockfile",
    "configure the nginx reverse proxy for websockets",
    "tantivy segment merge policy",
    "the terraform state lock on S3",
    "compile the kernel module for the graphics driver",
    "the quarterly VAT return for the bakery",
    "replace the alternator on a diesel tractor",
];

/// The adversarial questions (LoCoMo's category 5) of `dir`'s
/// conversations: their premise is false (a thing one speaker did asked of
/// the other), so no turn answers them.
pub fn adversarial(dir: &Path) -> Result<Vec<Question>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let conv = path
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_owned();
        let obj: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        for qa in obj["qa"].as_array().into_iter().flatten() {
            if qa["category"].as_u64() == Some(5) {
                out.push(Question {
                    conversation: conv.clone(),
                    category: 5,
                    text: qa["question"].as_str().unwrap_or_default().to_owned(),
                    evidence: Vec::new(),
                });
            }
        }
    }
    out.sort_by(|a, b| (&a.conversation, &a.text).cmp(&(&b.conversation, &b.text)));
    Ok(out)
}

/// One query's top 10 hybrid hits within its conversation, as the
/// relevance floor sees them: one JSON object with the query (`kind`:
/// answerable, adversarial, nonsense, absent; `conv`, `q`), the answer's
/// `nothing_relevant`, the number of evidence turns, and per hit its
/// `coverage`, `similarity`, `weak` and the evidence turns it holds.
pub fn floor_hits(
    api: &Api,
    sessions: &[Session],
    runs: &HashMap<String, usize>,
    q: &Question,
    kind: &str,
) -> Result<Value> {
    let res = search_conversation(api, q, "hybrid", 10, "none")?;
    let want: HashSet<&str> = q.evidence.iter().map(String::as_str).collect();
    let hits: Vec<Value> = res["hits"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|hit| {
            let session = hit["run_id"].as_str().and_then(|id| runs.get(id)).copied();
            let a = hit["line_start"].as_u64().unwrap_or(0) as usize;
            let b = hit["line_end"].as_u64().unwrap_or(0) as usize;
            let evidence: Vec<&str> = session
                .into_iter()
                .flat_map(|s| {
                    (a.max(1)..=b).filter_map(move |line| sessions[s].lines.get(line - 1))
                })
                .map(String::as_str)
                .filter(|dia| want.contains(dia))
                .collect();
            json!({
                "coverage": hit["coverage"],
                "similarity": hit["similarity"],
                "weak": hit["weak"],
                "evidence": evidence,
            })
        })
        .collect();
    Ok(json!({
        "kind": kind,
        "conv": q.conversation,
        "q": q.text,
        "n_evidence": want.len(),
        "nothing_relevant": res["nothing_relevant"],
        "hits": hits,
    }))
}

/// The relevance floor's figures over `rows` (`floor_hits`): per kind of
/// no-answer query, the share answered "nothing relevant"; for answerable
/// questions, evidence recall@10 over every hit and over the hits above
/// the floor, and the share wrongly answered "nothing relevant".
pub fn floor_summary(rows: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    for kind in ["adversarial", "nonsense", "absent"] {
        let of: Vec<&Value> = rows.iter().filter(|r| r["kind"] == kind).collect();
        let empty = of.iter().filter(|r| r["nothing_relevant"] == true).count();
        out.insert(
            kind.into(),
            json!({"queries": of.len(), "nothing_relevant": ratio(empty, of.len())}),
        );
    }
    let no_answer: Vec<&Value> = rows.iter().filter(|r| r["kind"] != "answerable").collect();
    let empty = no_answer
        .iter()
        .filter(|r| r["nothing_relevant"] == true)
        .count();
    out.insert(
        "no_answer".into(),
        json!({"queries": no_answer.len(), "nothing_relevant": ratio(empty, no_answer.len())}),
    );
    let answerable: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "answerable").collect();
    let recall = |strong_only: bool| {
        let sum: f64 = answerable
            .iter()
            .map(|r| {
                let found: HashSet<&str> = r["hits"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|h| !strong_only || h["weak"] != true)
                    .flat_map(|h| h["evidence"].as_array().into_iter().flatten())
                    .filter_map(Value::as_str)
                    .collect();
                found.len() as f64 / r["n_evidence"].as_f64().unwrap_or(1.0).max(1.0)
            })
            .sum();
        sum / answerable.len().max(1) as f64
    };
    let wrongly = answerable
        .iter()
        .filter(|r| r["nothing_relevant"] == true)
        .count();
    out.insert(
        "answerable".into(),
        json!({
            "queries": answerable.len(),
            "recall@10": recall(false),
            "recall@10_above_floor": recall(true),
            "nothing_relevant": ratio(wrongly, answerable.len()),
        }),
    );
    Value::Object(out)
}

fn ratio(n: usize, of: usize) -> f64 {
    n as f64 / of.max(1) as f64
}

#[cfg(test)]
mod tests {
    #[test]
    fn session_times_read_as_rfc3339() {
        for (text, want) in [
            ("1:56 pm on 8 May, 2023", Some("2023-05-08T13:56:00.000Z")),
            (
                "12:48 am on 1 February, 2023",
                Some("2023-02-01T00:48:00.000Z"),
            ),
            (
                "12:05 pm on 31 December, 2022",
                Some("2022-12-31T12:05:00.000Z"),
            ),
            ("1:56 pm on 8 Mayo, 2023", None),
            ("yesterday", None),
        ] {
            assert_eq!(super::rfc3339(text).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn the_first_three_conversations_in_id_order_tune_the_rest_report() {
        use super::{Session, Split};
        let sessions: Vec<Session> = ["conv-43", "conv-26", "conv-42", "conv-30", "conv-41"]
            .into_iter()
            .flat_map(|c| [c, c])
            .map(|c| Session {
                conversation: c.to_owned(),
                number: 1,
                jsonl: String::new(),
                lines: Vec::new(),
                started_at: String::new(),
            })
            .collect();
        assert_eq!(
            Split::Tune.conversations(&sessions),
            ["conv-26", "conv-30", "conv-41"]
        );
        assert_eq!(
            Split::Report.conversations(&sessions),
            ["conv-42", "conv-43"]
        );
        assert_eq!(Split::All.conversations(&sessions).len(), 5);
        assert!(Split::parse("held-out").is_err());
    }
}
