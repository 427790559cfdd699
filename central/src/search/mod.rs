//! `POST /api/search`: validate the request, resolve filters, hold ingest
//! embedding off while it runs (`EmbedQueue::hold`), take a named date out
//! of the query (`when`), embed the query on the query lane (semantic,
//! hybrid), ask the index as the viewer (it fuses hybrid search, with
//! `fusion` for the embedded backend), re-check every hit against the
//! registry, and shape hits; re-rank them first when the request asks for
//! recency or diversity (`rerank`). Without a working embedder, semantic
//! answers 503 and hybrid falls back to keyword, saying so in `degraded`.

pub mod fusion;
pub mod rerank;
pub mod when;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use kith_shared::ids::RunId;

use kith_proto::{RunLinks, SearchHit, SearchMode, SearchRequest, SearchResponse, SearchTiming};

use crate::auth::Viewer;
use crate::embed::Lane;
use crate::error::{Error, Result};
use crate::index::{Filters, IndexHit};
use crate::state::AppState;

pub const DEFAULT_LIMIT: u32 = 10;
/// Larger limits are clamped to this, not refused.
pub const MAX_LIMIT: u32 = 100;
pub const MAX_OFFSET: u32 = 1000;
pub const MAX_QUERY_BYTES: usize = 4096;

pub async fn search(
    state: &AppState,
    viewer: &Viewer,
    req: SearchRequest,
) -> Result<SearchResponse> {
    let started = Instant::now();
    let query = req.query.trim().to_owned();
    if query.is_empty() {
        return Err(Error::bad_request("empty_query", "query must not be empty"));
    }
    if query.len() > MAX_QUERY_BYTES {
        return Err(Error::bad_request(
            "query_too_long",
            format!(
                "query is {} bytes; the limit is {MAX_QUERY_BYTES}",
                query.len()
            ),
        ));
    }
    if req.offset > MAX_OFFSET {
        return Err(Error::bad_request(
            "invalid_offset",
            format!("offset must be at most {MAX_OFFSET}"),
        ));
    }
    let limit = req.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let filters = resolve_filters(&req.filters)?;
    let rerank = rerank::Rerank::of(&req)?;
    state.metrics().searched();
    // Embedding for ingest waits until this search has answered.
    let _hold = state.embed().map(|queue| queue.hold());
    let want = (limit + req.offset) as usize;
    let pool = rerank.map_or(want, |r| r.pool(want));
    // A date in the query ranks the runs of that time first (see `when`),
    // unless the caller chose a time range; the date itself is not searched.
    let dated =
        when::find(&query).filter(|_| filters.since_ms.is_none() && filters.until_ms.is_none());
    let query = dated.as_ref().map_or(query, |d| d.rest.clone());

    // What the keyword side searches for, and what the hits returned are
    // highlighted with: the question words leave a hybrid query's keyword
    // side (see fusion); a semantic search has none.
    let keyword_query = match req.mode {
        SearchMode::Keyword => Some(query.clone()),
        SearchMode::Hybrid => Some(fusion::without_question_words(&query)),
        SearchMode::Semantic => None,
    };
    // The query vector, when the mode needs one and an embedder can give it.
    let mut timing = SearchTiming::default();
    let mut degraded = None;
    let vector = match (req.mode, state.embed()) {
        (SearchMode::Keyword, _) => None,
        (mode, None) => {
            let why = state
                .embed_missing()
                .unwrap_or_else(|| "no embedder".to_owned());
            if mode == SearchMode::Semantic {
                return Err(unavailable(&why));
            }
            degraded = Some(format!("keyword results only: {why}"));
            None
        }
        (mode, Some(queue)) => match queue.embed_timed(Lane::Query, vec![query.clone()]).await {
            Ok(e) => {
                timing.queued_ms = e.queued.as_secs_f64() * 1000.0;
                timing.embed_ms = e.embedding.as_secs_f64() * 1000.0;
                e.vectors.into_iter().next()
            }
            Err(e) if mode == SearchMode::Semantic => return Err(unavailable(&e.to_string())),
            Err(e) => {
                degraded = Some(format!("keyword results only: {e}"));
                None
            }
        },
    };

    // One blocking task searches, re-checks and highlights. The query was
    // embedded first: while the model has both cores, a search beside it
    // slows the embedding more than it saves.
    let search_started = Instant::now();
    let (s, v, mode) = (state.clone(), viewer.clone(), req.mode);
    let hits = tokio::task::spawn_blocking(move || {
        let index = s.index();
        let text = keyword_query.as_deref().unwrap_or_default();
        let now = time::OffsetDateTime::now_utc();
        let ranked = |filters: &Filters| {
            let hits = match (mode, vector.as_deref()) {
                (SearchMode::Semantic, Some(vec)) => index.semantic(&v, vec, filters, pool),
                (SearchMode::Hybrid, Some(vec)) => {
                    index.hybrid(&v, text, vec, filters, pool, fusion::DENSE_WEIGHT)
                }
                // Keyword, and hybrid without a query vector (its keyword side).
                _ => index.keyword(&v, text, filters, pool),
            }?;
            Ok::<_, Error>(match rerank {
                Some(r) => r.apply(hits, want, now),
                None => hits,
            })
        };
        let hits = match dated {
            None => ranked(&filters)?,
            Some(d) => {
                let within = Filters {
                    since_ms: Some(d.since_ms),
                    until_ms: Some(d.until_ms),
                    ..filters.clone()
                };
                let mut hits = ranked(&within)?;
                let seen: HashSet<String> = hits.iter().map(|h| h.chunk_id.clone()).collect();
                hits.extend(
                    ranked(&filters)?
                        .into_iter()
                        .filter(|h| !seen.contains(&h.chunk_id)),
                );
                hits.truncate(want);
                hits
            }
        };
        let mut hits = recheck(&s, &v, hits)?;
        if let Some(q) = &keyword_query {
            index.highlight(q, &mut hits)?;
        }
        Ok::<_, Error>(hits)
    })
    .await??;
    let search_ms = ms(search_started);
    let hits = hits
        .into_iter()
        .skip(req.offset as usize)
        .map(|h| SearchHit {
            _links: RunLinks::for_run(&h.run_id),
            run_id: h.run_id,
            chunk_id: h.chunk_id,
            score: h.score,
            role: h.role,
            text: h.text,
            snippet: h.snippet,
            line_start: h.line_start,
            line_end: h.line_end,
            started_at: h.started_at,
            intent: h.intent,
            machine: h.machine,
            agent_runtime: h.agent_runtime,
        })
        .collect();
    timing.search_ms = search_ms;
    timing.total_ms = ms(started);
    Ok(SearchResponse {
        hits,
        timing,
        backend: state.index().name().to_owned(),
        embedder: state.embedder_name(),
        degraded,
    })
}

/// Keeps only hits whose run the registry says the viewer may read now
/// (expiry and quarantine included), and audits reads of others' runs.
fn recheck(state: &AppState, viewer: &Viewer, hits: Vec<IndexHit>) -> Result<Vec<IndexHit>> {
    let mut verdicts: HashMap<String, bool> = HashMap::new();
    let mut out = Vec::with_capacity(hits.len());
    for hit in hits {
        let readable = match verdicts.get(&hit.run_id) {
            Some(&v) => v,
            None => {
                let run = RunId::parse(&hit.run_id)
                    .ok()
                    .map(|id| state.registry().run(viewer, &id))
                    .transpose()?
                    .flatten();
                if let Some(run) = &run {
                    state.registry().audit_read(
                        viewer,
                        &run.meta.user_id,
                        &run.meta.id,
                        "search_hit",
                    )?;
                }
                verdicts.insert(hit.run_id.clone(), run.is_some());
                run.is_some()
            }
        };
        if readable {
            out.push(hit);
        }
    }
    Ok(out)
}

fn resolve_filters(f: &kith_proto::SearchFilters) -> Result<Filters> {
    if !crate::ingest::tags_are_valid(&f.tags) {
        return Err(Error::bad_request(
            "invalid_filter",
            format!("filters.tags: {}", crate::ingest::tags_rule()),
        ));
    }
    let time = |name: &str, v: &Option<String>| -> Result<Option<i64>> {
        v.as_deref()
            .map(|s| {
                kith_shared::timestamp::parse(s)
                    .map(|t| (t.unix_timestamp_nanos() / 1_000_000) as i64)
                    .ok_or_else(|| {
                        Error::bad_request(
                            "invalid_filter",
                            format!("filters.{name} must be RFC 3339"),
                        )
                    })
            })
            .transpose()
    };
    Ok(Filters {
        runtime: f.runtime,
        machine: f.machine.clone(),
        conversation_id: f.conversation_id.clone(),
        root_run_id: f.root_run_id.clone(),
        tags: f.tags.clone(),
        cwd_prefix: f.cwd_prefix.clone(),
        since_ms: time("since", &f.since)?,
        until_ms: time("until", &f.until)?,
    })
}

fn unavailable(why: &str) -> Error {
    Error::Unavailable {
        code: "embedder_unavailable",
        message: format!("semantic search is unavailable ({why}); keyword search still answers"),
    }
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
