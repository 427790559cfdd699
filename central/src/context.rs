//! `POST /api/context`: the passages most useful for a task, fitted to a
//! token budget. A hybrid search as the viewer (so privacy is search's)
//! proposes the candidates; `pack` keeps the best of them that fit, each
//! with its citation, its conversation's title, who and when. No model
//! writes anything: the pack is what the agents wrote, cited.

pub(crate) mod pack;

use std::collections::HashMap;

use kith_proto::{ContextRequest, ContextResponse, GroupBy, SearchMode, SearchRequest};

use crate::error::{Code, Error, Result};
use crate::registry::Viewer;
use crate::state::AppState;

pub(crate) const DEFAULT_BUDGET: u32 = 4000;
pub(crate) const MAX_BUDGET: u32 = 32_000;
/// Hits a pack is chosen from: search's largest page. A 4,000-token pack
/// holds 15-40 passages; the rest make room for near-copies left out.
const CANDIDATES: u32 = crate::search::MAX_LIMIT;

pub(crate) async fn context(
    state: &AppState,
    viewer: &Viewer,
    req: ContextRequest,
) -> Result<ContextResponse> {
    let budget = req.budget_tokens.unwrap_or(DEFAULT_BUDGET);
    if !(1..=MAX_BUDGET).contains(&budget) {
        return Err(Error::invalid(
            Code::InvalidBudget,
            format!("budget_tokens must be 1 to {MAX_BUDGET}, not {budget}"),
        ));
    }
    // Audited below: the runs of the passages packed, not every candidate.
    let (found, runs) = crate::search::search_unaudited(
        state,
        viewer,
        SearchRequest {
            query: req.task,
            mode: SearchMode::Hybrid,
            filters: req.filters,
            limit: Some(CANDIDATES),
            group: GroupBy::None,
            ..SearchRequest::default()
        },
    )
    .await?;
    let (s, v) = (state.clone(), viewer.clone());
    let packed = tokio::task::spawn_blocking(move || {
        let registry = s.registry();
        let handles = registry.handles()?;
        let mut titles: HashMap<String, Option<String>> = HashMap::new();
        // Only what clears the relevance floor: a pack of what merely
        // ranks first would tell an agent something untrue.
        let strong: Vec<_> = found.hits.iter().filter(|h| !h.weak).cloned().collect();
        let packed = pack::pack(&strong, budget, v.handle(), |conversation| {
            if let Some(title) = titles.get(conversation) {
                return Ok(title.clone());
            }
            let title = crate::search::conversation_facts(registry, &v, conversation, &handles)?
                .and_then(|c| c.title);
            titles.insert(conversation.to_owned(), title.clone());
            Ok(title)
        })?;
        let shown = packed.passages.iter().map(|p| &p.run_id);
        crate::search::audit_shown(&s, &v, &runs, shown)?;
        Ok::<_, Error>(packed)
    })
    .await??;
    Ok(ContextResponse {
        pack: packed.text,
        used_tokens: packed.passages.iter().map(|p| p.tokens).sum(),
        passages: packed.passages,
        budget_tokens: budget,
        degraded: found.degraded,
        nothing_relevant: found.nothing_relevant,
    })
}
