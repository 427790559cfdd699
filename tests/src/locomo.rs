//! The LoCoMo dev retrieval evaluation: every session of every conversation
//! becomes a transcript ingested through the real API; every question (bar
//! the adversarial category 5) is asked through `POST /api/search`, and the
//! hits' line ranges are mapped back to evidence turns for Recall@k.

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
    pub text: String,
    pub evidence: Vec<String>,
}

/// A LoCoMo session as kith stores it: the transcript and which dialogue
/// turn sits on which line.
#[derive(Debug, Clone)]
pub struct Session {
    pub conversation: String,
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

/// Recall averaged over questions, by name: `recall@k` for each k (evidence
/// turns inside the line ranges of the first k hits), and `recall@20turns`
/// (evidence among the first `TURN_BUDGET` distinct turns the hits cover, in
/// hit order: independent of how many turns one hit spans, so comparable
/// with the reference's two-turn chunks), and `turns_per_hit@10` (the turns
/// a hit among the first ten covers: the reference's chunks cover two).
pub fn evaluate(
    api: &Api,
    sessions: &[Session],
    runs: &HashMap<String, usize>,
    questions: &[Question],
    mode: &str,
    ks: &[usize],
) -> Result<BTreeMap<String, f64>> {
    let max_k = ks.iter().copied().max().unwrap_or(10).max(TURN_BUDGET);
    let budget_key = format!("recall@{TURN_BUDGET}turns");
    let mut sums: BTreeMap<String, f64> = BTreeMap::new();
    for q in questions {
        let r = api.post(
            "/api/search",
            &json!({"query": q.text, "mode": mode, "limit": max_k, "filters": {"conversation_id": q.conversation}}),
        )?;
        anyhow::ensure!(r.status == 200, "search failed: {r:?}");
        let hits = r.body["hits"].as_array().cloned().unwrap_or_default();
        let want: HashSet<&str> = q.evidence.iter().map(String::as_str).collect();
        // Each hit's turns, as (session, 1-based line).
        let turns: Vec<Vec<(usize, usize)>> = hits
            .iter()
            .map(|hit| {
                let Some(&s) = hit["run_id"].as_str().and_then(|id| runs.get(id)) else {
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
            *sums.entry(format!("recall@{k}")).or_default() += recall(found.collect());
        }
        let mut seen = HashSet::new();
        let first_turns = turns
            .iter()
            .flatten()
            .filter(|t| seen.insert(**t))
            .take(TURN_BUDGET);
        *sums.entry(budget_key.clone()).or_default() +=
            recall(first_turns.filter_map(is_evidence).collect());
        let top: Vec<_> = turns.iter().take(10).collect();
        *sums.entry("turns_per_hit@10".into()).or_default() +=
            top.iter().map(|t| t.len()).sum::<usize>() as f64 / top.len().max(1) as f64;
    }
    let n = questions.len().max(1) as f64;
    Ok(sums.into_iter().map(|(k, s)| (k, s / n)).collect())
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
}
