//! A conversation's usage after more deltas. Pure: the registry gives the
//! conversation's usage so far, the caller the deltas' bytes or facts.
//!
//! Formats whose deltas read alone (Claude Code, Codex, pi, Gemini CLI,
//! Copilot CLI, Aider) continue their fold as `kith_shared::usage::Fold`
//! says: the conversation's folded facts the deltas may change added back,
//! then each delta's in turn ([`next`], [`chain`]); a fact a delta left as
//! it was keeps its row, one it changed or added is the delta's run's. A
//! format whose message's tokens may sit in another delta than its row
//! (`kith_shared::usage::reads_whole`: OpenCode) is read whole (what was
//! carried of the deltas before, then the deltas), and every fact is the
//! newest run's ([`read_whole`]). A settle and `reindex` fold through the
//! same functions, so reindex finds what ingest's counting wrote.

use kith_shared::transcript::Format;
use kith_shared::usage::{carry, facts, Fold, Reading, UsageFact};

use crate::registry::{transcript_of, ConversationUsage, UsageRow};
use crate::run::Run;

/// `prior` (the conversation's usage so far, if any) with `delta` (the
/// facts of `run`'s bytes) folded in; `None` when there is nothing to
/// keep or change.
pub(crate) fn next(
    prior: Option<&ConversationUsage>,
    delta: Reading,
    run: &Run,
) -> Option<ConversationUsage> {
    if delta.facts.is_empty() && delta.n_refused == 0 && delta.context.is_none() {
        return None;
    }
    let mut fold = match prior {
        Some(prior) => Fold::resume(
            Reading {
                facts: prior.rows.iter().map(|r| r.fact.clone()).collect(),
                n_refused: prior.n_refused,
                context: prior.context.clone(),
            },
            prior.running,
        ),
        None => Fold::default(),
    };
    fold.add(delta);
    let running = fold.running();
    let after = fold.into_reading();
    let before = prior.map_or(&[][..], |p| p.rows.as_slice());
    let rows = after
        .facts
        .into_iter()
        .enumerate()
        .map(|(i, fact)| match before.get(i) {
            Some(old) if old.fact == fact => old.clone(),
            Some(old) => UsageRow {
                id: old.id,
                ..row(fact, run)
            },
            None => row(fact, run),
        })
        .collect();
    let complete = prior.is_none_or(|p| p.complete);
    usage_of(run, rows, complete, after.n_refused, after.context)
        .map(|u| ConversationUsage { running, ..u })
}

/// `prior` with `deltas` (each run's facts, in the order they came) folded
/// in one after another, as a settle and `reindex` fold a conversation's
/// deltas; `None` when none of them changes anything.
pub(crate) fn chain<'a>(
    prior: Option<ConversationUsage>,
    deltas: impl IntoIterator<Item = (&'a Run, Reading)>,
) -> Option<ConversationUsage> {
    let mut usage = prior;
    let mut changed = false;
    for (run, reading) in deltas {
        if let Some(folded) = next(usage.as_ref(), reading, run) {
            usage = Some(folded);
            changed = true;
        }
    }
    usage.filter(|_| changed)
}

/// The usage of a conversation of `format` whose bytes up to and with
/// `last`'s are `whole` (a format read whole): every fact is `last`'s, and
/// what the next delta's reading needs of the bytes is carried.
pub(crate) fn read_whole(format: Format, whole: &[u8], last: &Run) -> Option<ConversationUsage> {
    let reading = facts(format, whole);
    let rows = reading
        .facts
        .into_iter()
        .map(|fact| row(fact, last))
        .collect();
    usage_of(last, rows, true, reading.n_refused, reading.context).map(|u| ConversationUsage {
        carried: Some(carry(format, whole)),
        ..u
    })
}

fn usage_of(
    run: &Run,
    rows: Vec<UsageRow>,
    complete: bool,
    n_refused: u64,
    context: Option<kith_shared::usage::Context>,
) -> Option<ConversationUsage> {
    Some(ConversationUsage {
        conversation: run.conversation.clone()?,
        user_id: run.user_id.clone(),
        agent_runtime: run.agent_runtime,
        transcript: transcript_of(&run.source_identity)
            .unwrap_or(&run.source_identity)
            .to_owned(),
        rows,
        complete,
        n_refused,
        running: None,
        context,
        carried: None,
    })
}

/// `fact` as `run`'s delta gave it; an undated fact is dated with the
/// run's start (the delta's first time, else when central took it).
fn row(fact: UsageFact, run: &Run) -> UsageRow {
    UsageRow {
        id: None,
        at: fact.time.clone().unwrap_or_else(|| run.started_at.clone()),
        fact,
        run_id: run.id.clone(),
        machine: run.machine.clone(),
        project: run.cwd.clone(),
        priced_usd: None,
    }
}

#[cfg(test)]
mod tests {
    use kith_proto::AgentRuntime;
    use kith_shared::transcript::Format;
    use kith_shared::usage::{facts, Merge, Tokens};

    use super::*;

    fn run(id: &str, runtime: AgentRuntime, started_at: &str) -> Run {
        let mut run = Run::for_tests(id, "ualice");
        run.agent_runtime = runtime;
        run.conversation = Some("c1".into());
        run.source_identity = "/home/a/s.jsonl#1:2:0".into();
        run.started_at = started_at.into();
        run
    }

    fn claude(id: &str, output: u64, ts: &str) -> String {
        let line = serde_json::json!({"type": "assistant", "timestamp": ts, "requestId": "req",
            "message": {"id": id, "model": "claude-opus-4-6", "role": "assistant",
                "usage": {"input_tokens": 3, "output_tokens": output}}});
        format!("{line}\n")
    }

    fn codex_total(input: u64, ts: &str) -> String {
        let line = serde_json::json!({"type": "event_msg", "timestamp": ts,
            "payload": {"type": "token_count", "info": {"total_token_usage":
                {"input_tokens": input, "cached_input_tokens": 0, "output_tokens": 1}}}});
        format!("{line}\n")
    }

    /// Folds `deltas` of one conversation as ingest does, delta by delta.
    fn fold_all(runtime: AgentRuntime, deltas: &[String]) -> Option<ConversationUsage> {
        let format = Format::of_runtime(runtime.as_str());
        let runs: Vec<Run> = (0..deltas.len())
            .map(|i| run(&format!("r{i}"), runtime, "2026-05-01T00:00:00.000Z"))
            .collect();
        let readings = deltas.iter().map(|d| facts(format, d.as_bytes()));
        chain(None, runs.iter().zip(readings))
    }

    /// Folds `deltas` as `settle` does, `batch` deltas at a time: each
    /// batch given only the stored facts of its deltas' `Merge::Last` keys
    /// and the running total before (what `Registry::conversation_usage`
    /// reads), folded delta by delta in memory, its rows written back by
    /// id.
    fn fold_resumed(runtime: AgentRuntime, deltas: &[String], batch: usize) -> Vec<UsageRow> {
        let format = Format::of_runtime(runtime.as_str());
        let mut stored: Vec<UsageRow> = Vec::new();
        let mut fold: Option<ConversationUsage> = None;
        for (b, chunk) in deltas.chunks(batch).enumerate() {
            let readings: Vec<_> = chunk.iter().map(|d| facts(format, d.as_bytes())).collect();
            let usage = fold.as_ref().map(|f| ConversationUsage {
                rows: stored
                    .iter()
                    .filter(|row| {
                        matches!(row.fact.merge, Merge::Last)
                            && readings
                                .iter()
                                .any(|r| r.facts.iter().any(|n| n.key == row.fact.key))
                    })
                    .cloned()
                    .collect(),
                complete: false,
                ..f.clone()
            });
            let runs: Vec<Run> = (0..readings.len())
                .map(|i| {
                    let id = format!("r{}", b * batch + i);
                    run(&id, runtime, "2026-05-01T00:00:00.000Z")
                })
                .collect();
            let Some(u) = chain(usage, runs.iter().zip(readings)) else {
                continue;
            };
            for row in &u.rows {
                match row.id {
                    Some(id) => stored[id as usize] = row.clone(),
                    None => stored.push(UsageRow {
                        id: Some(stored.len() as i64),
                        ..row.clone()
                    }),
                }
            }
            fold = Some(ConversationUsage {
                rows: Vec::new(),
                ..u
            });
        }
        stored
    }

    #[test]
    fn a_fold_resumed_from_the_facts_its_deltas_may_change_equals_a_fold_of_all() {
        let (t0, t1) = ("2026-05-01T10:00:00.000Z", "2026-05-01T10:05:00.000Z");
        let claude_deltas = [
            claude("msg_1", 1, t0) + &claude("msg_2", 7, t0),
            claude("msg_2", 40, t0) + &claude("msg_3", 2, t1),
            claude("msg_4", 5, t1),
            claude("msg_3", 9, t1) + &claude("msg_1", 1, t0),
        ];
        let codex_deltas = [
            codex_total(100, t0),
            codex_total(250, t0) + &codex_total(250, t1),
            // A restarted total, then on from it.
            codex_total(30, t1),
            codex_total(80, t1),
            codex_total(120, t1),
        ];
        for (runtime, deltas) in [
            (AgentRuntime::ClaudeCode, &claude_deltas[..]),
            (AgentRuntime::Codex, &codex_deltas[..]),
        ] {
            let all = fold_all(runtime, deltas).unwrap_or_else(|| panic!("usage"));
            let figures = |rows: &[UsageRow]| -> Vec<(String, Tokens, String)> {
                rows.iter()
                    .map(|r| (r.fact.key.clone(), r.fact.tokens, r.run_id.clone()))
                    .collect()
            };
            for batch in [1, 2, 3] {
                let resumed = fold_resumed(runtime, deltas, batch);
                assert_eq!(
                    figures(&resumed),
                    figures(&all.rows),
                    "{runtime:?} by {batch}"
                );
                assert!(resumed.len() >= 4, "{runtime:?}: {resumed:?}");
            }
        }
    }

    #[test]
    fn a_streamed_claude_message_counts_once_with_its_last_figures_and_its_last_run() {
        let ts = "2026-05-01T10:00:00.000Z";
        let u = fold_all(
            AgentRuntime::ClaudeCode,
            &[
                claude("msg_1", 1, ts) + &claude("msg_2", 7, ts),
                claude("msg_2", 40, ts),
                String::new(),
            ],
        )
        .unwrap_or_else(|| panic!("usage"));
        let got: Vec<(&str, u64, &str)> = u
            .rows
            .iter()
            .map(|r| (r.fact.key.as_str(), r.fact.tokens.output, r.run_id.as_str()))
            .collect();
        assert_eq!(got, [("msg_1/req", 1, "r0"), ("msg_2/req", 40, "r1")]);
    }

    #[test]
    fn codex_running_totals_count_their_differences_across_deltas() {
        let u = fold_all(
            AgentRuntime::Codex,
            &[
                codex_total(100, "2026-05-01T10:00:00.000Z"),
                codex_total(250, "2026-05-01T10:01:00.000Z"),
                codex_total(250, "2026-05-01T10:01:30.000Z")
                    + &codex_total(300, "2026-05-01T10:02:00.000Z"),
            ],
        )
        .unwrap_or_else(|| panic!("usage"));
        let inputs: Vec<u64> = u.rows.iter().map(|r| r.fact.tokens.input).collect();
        assert_eq!(inputs, [100, 150, 50]);
        let total: u64 = inputs.iter().sum();
        assert_eq!(total, 300, "the last running total, once");
    }

    #[test]
    fn an_undated_fact_takes_its_runs_start() {
        let line = serde_json::json!({"type": "assistant", "requestId": "q",
            "message": {"id": "m", "model": "claude-opus-4-6",
                "usage": {"input_tokens": 1, "output_tokens": 1}}});
        let r = run("r0", AgentRuntime::ClaudeCode, "2026-05-02T03:04:05.000Z");
        let reading = facts(Format::ClaudeCode, format!("{line}\n").as_bytes());
        let u = next(None, reading, &r).unwrap_or_else(|| panic!("usage"));
        assert_eq!(u.rows[0].at, "2026-05-02T03:04:05.000Z");
        assert_eq!(u.rows[0].fact.time, None);
    }

    #[test]
    fn a_delta_without_usage_changes_nothing() {
        let r = run("r0", AgentRuntime::ClaudeCode, "2026-05-01T00:00:00.000Z");
        let user = kith_shared::transcript::Format::ClaudeCode;
        let line = "{\"type\":\"user\",\"message\":{\"role\":\"user\",\"content\":\"hi\"}}\n";
        assert_eq!(next(None, facts(user, line.as_bytes()), &r), None);
    }
}
