//! What the family's agents cost, as central keeps and reports it: each
//! delta's usage facts (`kith_shared::usage`: tokens per model response,
//! and the cost its agent recorded) folded into its conversation's after
//! the delta is stored, many deltas at a time, and before any report reads
//! them ([`settle`], `fold`); rebuilt from the blobs by `reindex`
//! ([`rebuild`]); reported by day, week, month or conversation,
//! in UTC, a fixed offset or a named zone, priced from the dated table
//! compiled in with central's config's prices in its place (`report`).
//!
//! A member's report holds the usage of their own runs, never another
//! member's, shared with them or not: what someone spends is not in what a
//! grant shares. An admin may ask for the family's (`privacy::UsageReach`,
//! unless central's config keeps it off): every member's figures, and of a
//! run the admin may not read nothing that names its work.

mod fold;
mod report;

use std::collections::HashMap;
use std::time::Duration;

use kith_proto::{UsageBy, UsageQuery, UsageReport, UsageResponse};
use kith_shared::usage::{cost, facts, reads_whole, PriceTable, Reading};

use crate::error::{Error, Result};
use crate::privacy::{FamilyUsageRefused, UsageReach};
use crate::registry::{ConversationUsage, PendingUsage, SettledUsage, UsageFilter, Viewer};
use crate::run::Run;
use crate::state::AppState;
use crate::usage_turns::Counting;

/// Runs whose deltas' usage one settle reads at a time.
const SETTLE_BATCH: u32 = 64;
/// Facts written in one transaction, at most about: enough to sum each
/// hour once for a few deltas, few enough that a delta arriving meanwhile
/// (the registry has one writer) waits little.
const SETTLE_ROWS: usize = 128;
/// How long counting in the background waits for a moment with no delta
/// being stored before it writes anyway (a steady stream of deltas).
const GIVE_WAY_AT_MOST: Duration = Duration::from_millis(50);

/// Counts the usage of every delta stored and not counted yet, batch by
/// batch, each conversation's deltas in the order they came; returns how
/// many. The indexing worker calls it after each burst of deltas, and a
/// report before it reads, so a report always counts every stored delta;
/// the worker's writes give way to deltas being stored, a report's do not
/// (`usage_turns`).
/// Derived, as the catalog is (`reindex` rebuilds it): a conversation
/// whose bytes cannot be read is logged and its deltas counted as having
/// no usage, never retried for ever.
pub(crate) fn settle(state: &AppState, counting: Counting) -> Result<usize> {
    let turn = state.usage_turns().count(counting);
    let write = |settled: &[SettledUsage]| {
        turn.before_write(GIVE_WAY_AT_MOST);
        state.registry().settle_usage(settled)
    };
    let mut n = 0;
    loop {
        let pending = state.registry().pending_usage(SETTLE_BATCH)?;
        if pending.is_empty() {
            return Ok(n);
        }
        n += pending.len();
        let full = pending.len() >= SETTLE_BATCH as usize;
        let mut settled: Vec<SettledUsage> = Vec::new();
        // Each conversation's deltas, in the order they came.
        let mut groups: Vec<(String, Vec<PendingUsage>)> = Vec::new();
        for (id, run) in pending {
            let Some(conversation) = run.as_ref().and_then(|p| p.run.run.conversation.clone())
            else {
                settled.push(SettledUsage {
                    runs: vec![id],
                    usage: None,
                });
                continue;
            };
            match groups.iter_mut().find(|(c, _)| *c == conversation) {
                Some((_, runs)) => runs.extend(run),
                None => groups.push((conversation, run.into_iter().collect())),
            }
        }
        // Written as the folds come, a transaction per so many facts: the
        // writer is free for ingest while the next ones are folded.
        let mut rows = 0;
        for (conversation, runs) in groups {
            let usage = fold_deltas(state, &conversation, &runs).unwrap_or_else(|e| {
                tracing::warn!(%conversation, error = %e, "counting the deltas' usage failed");
                None
            });
            rows += usage.as_ref().map_or(0, |u| u.rows.len());
            settled.push(SettledUsage {
                runs: runs.into_iter().map(|p| p.run.run.id).collect(),
                usage,
            });
            if rows >= SETTLE_ROWS {
                write(&settled)?;
                settled.clear();
                rows = 0;
            }
        }
        if !settled.is_empty() {
            write(&settled)?;
        }
        if !full {
            return Ok(n);
        }
    }
}

/// The usage of `conversation` once the deltas of `runs` (its pending
/// ones, in the order they came, all of one owner) are folded into what
/// is counted of it; `None` when they change nothing.
fn fold_deltas(
    state: &AppState,
    conversation: &str,
    runs: &[PendingUsage],
) -> Result<Option<ConversationUsage>> {
    let Some(first) = runs.first() else {
        return Ok(None);
    };
    let (owner, format) = (&first.owner, first.run.run.format());
    let transcript = |run: &Run| {
        crate::registry::transcript_of(&run.source_identity)
            .unwrap_or(&run.source_identity)
            .to_owned()
    };
    let deltas = runs
        .iter()
        .map(|p| Ok((&p.run.run, state.store().read_jsonl(&p.run.blob_path)?)))
        .collect::<Result<Vec<_>>>()?;
    let registry = state.registry();
    if reads_whole(format) {
        let prior =
            registry.conversation_usage(owner, conversation, &transcript(&first.run.run), &[])?;
        // What the deltas before carried for these; read from their blobs
        // once when no fold kept it (a registry of an older kith).
        let mut whole = match prior.and_then(|p| p.carried) {
            Some(carried) => carried,
            None => {
                let mut earlier = Vec::new();
                for run in registry
                    .owned_conversation_runs(owner, conversation)?
                    .into_iter()
                    .take_while(|r| r.run.id != first.run.run.id)
                {
                    earlier.extend(state.store().read_jsonl(&run.blob_path)?);
                }
                earlier
            }
        };
        for (_, bytes) in &deltas {
            whole.extend_from_slice(bytes);
        }
        let last = &runs[runs.len() - 1].run.run;
        return Ok(fold::read_whole(format, &whole, last).map(|u| priced(u, state.prices())));
    }
    let readings: Vec<Reading> = deltas.iter().map(|(_, b)| facts(format, b)).collect();
    if readings
        .iter()
        .all(|r| r.facts.is_empty() && r.n_refused == 0 && r.context.is_none())
    {
        return Ok(None);
    }
    let prior =
        registry.conversation_usage(owner, conversation, &transcript(&first.run.run), &readings)?;
    let deltas = deltas.iter().map(|(run, _)| *run).zip(readings);
    Ok(fold::chain(prior, deltas).map(|u| priced(u, state.prices())))
}

/// `usage` with each fact's cost at `table` (`UsageRow::priced_usd`).
fn priced(mut usage: ConversationUsage, table: &PriceTable) -> ConversationUsage {
    for row in &mut usage.rows {
        row.priced_usd = cost(&row.fact, table);
    }
    usage
}

/// The usage of every conversation of `runs` (each with its blob's bytes
/// read by `read`), folded as ingest folds it, by conversation.
pub(crate) fn rebuild(
    runs: &[&Run],
    read: impl Fn(&Run) -> Result<Vec<u8>>,
    table: &PriceTable,
) -> Result<HashMap<String, ConversationUsage>> {
    let mut chains: HashMap<&str, Vec<&Run>> = HashMap::new();
    for run in runs {
        if let Some(c) = run.conversation.as_deref() {
            chains.entry(c).or_default().push(run);
        }
    }
    let mut out = HashMap::new();
    for (conversation, mut chain) in chains {
        chain.sort_by_key(|r| r.from_offset);
        let Some(format) = chain.first().map(|r| r.format()) else {
            continue;
        };
        let usage = if reads_whole(format) {
            let mut whole = Vec::new();
            for run in &chain {
                whole.extend(read(run)?);
            }
            chain
                .last()
                .and_then(|last| fold::read_whole(format, &whole, last))
        } else {
            let deltas = chain
                .iter()
                .map(|run| Ok((*run, facts(format, &read(run)?))))
                .collect::<Result<Vec<_>>>()?;
            fold::chain(None, deltas)
        };
        if let Some(usage) = usage {
            out.insert(conversation.to_owned(), priced(usage, table));
        }
    }
    Ok(out)
}

/// `GET /api/usage`: the usage `q` asks for, as the viewer may count it
/// (`privacy::UsageReach`): its own, or an admin's family report.
pub(crate) fn usage(state: &AppState, viewer: &Viewer, q: &UsageQuery) -> Result<UsageResponse> {
    let family = q.family.unwrap_or(false) || q.by == Some(UsageBy::Person);
    let reach = UsageReach::decide(
        family,
        viewer.is_admin(),
        state.config().usage.admin_sees_members,
    )
    .map_err(|refused| match refused {
        FamilyUsageRefused::NotAdmin => Error::AdminOnly {
            what: "every member's usage",
        },
        FamilyUsageRefused::Off => Error::MembersUsageOff,
    })?;
    let zone = match &q.timezone {
        Some(tz) => report::Zone::parse(tz)?,
        None => report::Zone::UTC,
    };
    let at = |s: &Option<String>, edge| {
        s.as_deref()
            .map(|s| report::instant(s, &zone, edge))
            .transpose()
    };
    let kind = q.report.unwrap_or_default();
    let filter = UsageFilter {
        agent: q.agent,
        since_ms: at(&q.since, report::Edge::Since)?,
        until_ms: at(&q.until, report::Edge::Until)?,
        work: kind == UsageReport::Session
            || matches!(q.by, Some(UsageBy::Machine | UsageBy::Project)),
        work_place: matches!(q.by, Some(UsageBy::Machine | UsageBy::Project)),
        whole_hours: report::takes_hours_whole(kind),
    };
    settle(state, Counting::ForReport)?;
    let registry = state.registry();
    let facts = registry.usage(viewer, reach, &filter)?;
    let n_refused = registry.usage_refused(viewer, reach, q.agent)?;
    let shape = report::Shape {
        report: kind,
        by: q.by,
        zone,
        family,
    };
    Ok(report::report(&facts, &shape, state.prices(), n_refused))
}
