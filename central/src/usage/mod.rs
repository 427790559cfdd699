//! What the family's agents cost, as central keeps and reports it: each
//! delta's usage facts (`kith_shared::usage`: tokens per model response,
//! and the cost its agent recorded) folded into its conversation's at
//! ingest, in the run's own transaction (`fold`); rebuilt from the blobs by
//! `reindex` ([`rebuild`]); reported by day, week, month or conversation,
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

use kith_proto::{UsageBy, UsageQuery, UsageReport, UsageResponse};
use kith_shared::usage::{carry, cost, facts, reads_whole, PriceTable, Reading};

use crate::error::{Error, Result};
use crate::privacy::{FamilyUsageRefused, UsageReach};
use crate::registry::{ConversationUsage, UsageFilter, Viewer};
use crate::run::Run;
use crate::state::AppState;

/// The usage of `run`'s conversation once its delta `bytes` is added (the
/// run not stored yet), for `insert_run` to write with it; `None` when the
/// delta changes nothing of it.
pub(crate) fn after_delta(
    state: &AppState,
    viewer: &Viewer,
    run: &Run,
    bytes: &[u8],
) -> Result<Option<ConversationUsage>> {
    let Some(conversation) = run.conversation.as_deref() else {
        return Ok(None);
    };
    let format = run.format();
    let transcript =
        crate::registry::transcript_of(&run.source_identity).unwrap_or(&run.source_identity);
    if reads_whole(format) {
        let prior = state.registry().conversation_usage(
            viewer,
            conversation,
            transcript,
            &Reading::default(),
        )?;
        // What the deltas before carried for this one; read from their
        // blobs once when no fold kept it (a registry of an older kith).
        let mut whole = match prior.and_then(|p| p.carried) {
            Some(carried) => carried,
            None => {
                let mut earlier = Vec::new();
                for run in state
                    .registry()
                    .owned_conversation_runs(viewer, conversation)?
                {
                    earlier.extend(state.store().read_jsonl(&run.blob_path)?);
                }
                earlier
            }
        };
        whole.extend_from_slice(bytes);
        return Ok(
            fold::whole(facts(format, &whole), run).map(|u| ConversationUsage {
                carried: Some(carry(format, &whole)),
                ..priced(u, state.prices())
            }),
        );
    }
    let delta = facts(format, bytes);
    if delta.facts.is_empty() && delta.n_refused == 0 && delta.context.is_none() {
        return Ok(None);
    }
    let prior = state
        .registry()
        .conversation_usage(viewer, conversation, transcript, &delta)?;
    Ok(fold::next(prior.as_ref(), delta, run).map(|u| priced(u, state.prices())))
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
        let mut usage: Option<ConversationUsage> = None;
        if reads_whole(format) {
            let mut whole = Vec::new();
            for run in &chain {
                whole.extend(read(run)?);
            }
            if let Some(last) = chain.last() {
                usage = fold::whole(facts(format, &whole), last).map(|u| ConversationUsage {
                    carried: Some(carry(format, &whole)),
                    ..u
                });
            }
        } else {
            for run in &chain {
                if let Some(next) = fold::next(usage.as_ref(), facts(format, &read(run)?), run) {
                    usage = Some(next);
                }
            }
        }
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
    };
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
