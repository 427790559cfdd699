//! `POST /api/search`: validate the request, resolve filters, hold ingest
//! embedding off while it runs (`EmbedQueue::hold`), take a named date out
//! of the query (`when`), embed the query on the query lane (semantic,
//! hybrid), ask the index as the viewer (it fuses hybrid search, with
//! `fusion` for the embedded backend), re-check every hit against the
//! registry, and shape hits; re-rank them first when the request asks for
//! recency or diversity (`rerank`), and order conversations by several of
//! their hits when grouping (`aggregate`). Without a working embedder,
//! semantic answers 503 and hybrid falls back to keyword, saying so in
//! `degraded`.

pub(crate) mod aggregate;
mod plan;
mod relevance;
pub(crate) mod rerank;
pub(crate) mod when;

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use kith_shared::ids::RunId;

use kith_proto::{
    GroupBy, RunLinks, SearchGroup, SearchHit, SearchMode, SearchRequest, SearchResponse,
    SearchTiming,
};

use crate::embed::Lane;
use crate::error::{Code, Error, Result};
use crate::index::{fusion, Filters, IndexHit, MAX_GROUP_POOL};
use crate::registry::Viewer;
use crate::run::Run;
use crate::state::AppState;

use plan::Plan;
pub(crate) use plan::MAX_LIMIT;

/// Hits shown per conversation when hits are grouped.
const HITS_PER_GROUP: usize = 3;

/// A search as `viewer`, its reads of others' runs audited: the runs of
/// the hits it answers (the page, or the groups' hits), each once.
pub(crate) async fn search(
    state: &AppState,
    viewer: &Viewer,
    req: SearchRequest,
) -> Result<SearchResponse> {
    let (found, runs) = search_unaudited(state, viewer, req).await?;
    let (s, v) = (state.clone(), viewer.clone());
    tokio::task::spawn_blocking(move || {
        audit_shown(&s, &v, &runs, found.hits.iter().map(|h| &h.run_id))?;
        Ok(found)
    })
    .await?
}

/// Records in their owners' audit that `viewer` was shown text of each of
/// the runs `shown` names (in `runs`), once per run.
pub(crate) fn audit_shown<'a>(
    state: &AppState,
    viewer: &Viewer,
    runs: &HitRuns,
    shown: impl Iterator<Item = &'a String>,
) -> Result<()> {
    let mut seen = HashSet::new();
    let reads: Vec<(&str, &str)> = shown
        .filter_map(|id| runs.get(id))
        .filter(|run| seen.insert(run.id.as_str()))
        .map(|run| (run.user_id.as_str(), run.id.as_str()))
        .collect();
    state.registry().audit_reads(viewer, &reads, "search_hit")
}

/// A search as `viewer`, nothing audited, with the runs of the hits it
/// kept (every one the viewer may read): for callers that show only part
/// of the answer and audit that part (`context`).
pub(crate) async fn search_unaudited(
    state: &AppState,
    viewer: &Viewer,
    req: SearchRequest,
) -> Result<(SearchResponse, HitRuns)> {
    let started = Instant::now();
    let Plan {
        mode,
        group,
        typed: _,
        query,
        timed,
        keyword: keyword_query,
        keyword_typed,
        filters,
        facets,
        rerank,
        by_score,
        offset,
        limit,
        reach,
        want,
    } = plan::plan(&req, time::OffsetDateTime::now_utc().date())?;
    state.metrics().searched();
    // Embedding for ingest waits until this search has answered.
    let _hold = state.embed().map(|queue| queue.hold());
    // The query vector, when the mode needs one and an embedder can give it.
    let mut timing = SearchTiming::default();
    let mut degraded = None;
    let vector = match (mode, state.embed()) {
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
    let (s, v, asked) = (state.clone(), viewer.clone(), query.clone());
    let floor_vector = vector.clone();
    let found = tokio::task::spawn_blocking(move || {
        let index = s.index();
        // Facets name conversations: the trees with a readable run that
        // matches them bound the search.
        let mut filters = filters;
        // A conversation as hits name it: its tree, and its session as the
        // index knows it.
        let named = filters.conversation_id.as_deref();
        if let Some(id) = named.and_then(|c| crate::conversation::ConversationId::parse(c).ok()) {
            let runs = s.registry().conversation_runs(&v, &id)?;
            let Some(first) = runs.first() else {
                return Ok((Vec::new(), HashMap::new(), 0));
            };
            filters.root_run_id = Some(first.run.root_run_id.clone());
            filters.conversation_id = first.run.conversation_id.clone();
        }
        if let Some(roots) = s.registry().facet_roots(&v, &facets)? {
            if roots.is_empty() {
                return Ok((Vec::new(), HashMap::new(), 0));
            }
            filters.roots = Some(roots);
        }
        let text = keyword_query.as_deref().unwrap_or_default();
        let typed_text = keyword_typed.as_deref().unwrap_or_default();
        let now = time::OffsetDateTime::now_utc();
        let ranked = |filters: &Filters, text: &str, want: usize| {
            let pool = rerank.map_or(want, |r| r.pool(want));
            let mut hits = match (mode, vector.as_deref()) {
                (SearchMode::Semantic, Some(vec)) => {
                    index.semantic(v.readability(), vec, filters, pool)
                }
                (SearchMode::Hybrid, Some(vec)) => index.hybrid(
                    v.readability(),
                    text,
                    vec,
                    filters,
                    pool,
                    fusion::DENSE_WEIGHT,
                ),
                // Keyword, and hybrid without a query vector (its keyword side).
                _ => index.keyword(v.readability(), text, filters, pool),
            }?;
            // A question asking when ranks the hits that say when first.
            when::lift_timed(&asked, &mut hits);
            Ok::<_, Error>(match rerank {
                Some(r) => r.apply(hits, want, now),
                None => hits,
            })
        };
        // The best `want` hits, and the ids of those of a date's (or a
        // month's) runs, which lead the rest.
        let gather = |want: usize| -> Result<(Vec<IndexHit>, HashSet<String>)> {
            Ok(match &timed {
                None => (ranked(&filters, text, want)?, HashSet::new()),
                Some(when::Named::Month(m)) => {
                    let (first, rest): (Vec<_>, Vec<_>) = ranked(&filters, text, want)?
                        .into_iter()
                        .partition(|h| when::in_month(&h.started_at, *m));
                    let dated = first.iter().map(|h| h.chunk_id.clone()).collect();
                    (first.into_iter().chain(rest).collect(), dated)
                }
                Some(when::Named::Window(d)) => {
                    let within = Filters {
                        since_ms: Some(d.since_ms),
                        until_ms: Some(d.until_ms),
                        ..filters.clone()
                    };
                    let mut hits = ranked(&within, text, want)?;
                    let dated: HashSet<String> = hits.iter().map(|h| h.chunk_id.clone()).collect();
                    hits.extend(
                        ranked(&filters, typed_text, want)?
                            .into_iter()
                            .filter(|h| !dated.contains(&h.chunk_id)),
                    );
                    hits.truncate(want);
                    (hits, dated)
                }
            })
        };
        // Grouped, the page needs `reach` conversations: while the hits
        // hold fewer and the index has more, rank twice as many.
        let mut want = want;
        let (mut hits, runs, dated_ids) = loop {
            let (hits, dated) = gather(want)?;
            let more = hits.len() == want && want < MAX_GROUP_POOL;
            let (hits, runs) = recheck(&s, &v, hits)?;
            if group == GroupBy::None || !more || trees(&hits, &runs) >= reach {
                break (hits, runs, dated);
            }
            want = (want * 2).min(MAX_GROUP_POOL);
        };
        let leading = hits
            .iter()
            .take_while(|h| dated_ids.contains(&h.chunk_id))
            .count();
        if let Some(q) = &keyword_query {
            index.highlight(&fusion::content_words(q), &mut hits)?;
        }
        Ok::<_, Error>((hits, runs, leading))
    })
    .await??;
    let (hits, runs, leading) = found;
    let search_ms = ms(search_started);
    let (s, v) = (state.clone(), viewer.clone());
    let (hits, groups, runs, nothing_relevant) = tokio::task::spawn_blocking(move || {
        let handles = s.registry().handles()?;
        let hits: Vec<SearchHit> = hits
            .into_iter()
            .map(|h| wire_hit(h, &runs, &handles))
            .collect();
        let (hits, groups) = match group {
            GroupBy::None => (hits.into_iter().skip(offset).collect(), Vec::new()),
            GroupBy::Conversation => {
                let by_score = by_score.then_some(leading);
                let page = offset..offset + limit;
                let groups = group_hits(&s, &v, hits, &runs, &handles, by_score, page)?;
                let hits = groups.iter().flat_map(|g| g.hits.clone()).collect();
                (hits, groups)
            }
        };
        let (hits, groups, nothing_relevant) =
            floor(&s, &query, floor_vector.as_deref(), hits, groups);
        Ok::<_, Error>((hits, groups, runs, nothing_relevant))
    })
    .await??;
    timing.search_ms = search_ms;
    timing.total_ms = ms(started);
    let found = SearchResponse {
        hits,
        groups,
        timing,
        backend: state.index().name().to_owned(),
        embedder: state.embedder_name(),
        degraded,
        nothing_relevant,
    };
    Ok((found, runs))
}

/// Holds the answered hits to the relevance floor (`relevance`): each
/// marked weak or not, a group weak when all its hits are; and whether
/// nothing clears it.
fn floor(
    state: &AppState,
    query: &str,
    vector: Option<&[f32]>,
    mut hits: Vec<SearchHit>,
    mut groups: Vec<SearchGroup>,
) -> (Vec<SearchHit>, Vec<SearchGroup>, bool) {
    let words = relevance::QueryWords::of(query);
    let chunk_ids: Vec<String> = hits.iter().map(|h| h.chunk_id.clone()).collect();
    let similarities = match vector {
        Some(vector) => state
            .index()
            .similarity(vector, &chunk_ids)
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "hits' similarity unread: the floor reads their words only");
                vec![None; chunk_ids.len()]
            }),
        None => vec![None; chunk_ids.len()],
    };
    let mut marks: HashMap<String, (f32, Option<f32>)> = HashMap::new();
    for (hit, similarity) in hits.iter_mut().zip(similarities) {
        hit.coverage = words.coverage(&hit.text);
        hit.similarity = similarity;
        hit.weak = relevance::weak(hit.coverage, similarity);
        marks.insert(hit.chunk_id.clone(), (hit.coverage, similarity));
    }
    for group in &mut groups {
        for hit in &mut group.hits {
            if let Some(&(coverage, similarity)) = marks.get(&hit.chunk_id) {
                hit.coverage = coverage;
                hit.similarity = similarity;
                hit.weak = relevance::weak(coverage, similarity);
            }
        }
        group.weak = group.hits.iter().all(|h| h.weak);
    }
    let nothing_relevant = hits.iter().all(|h| h.weak);
    (hits, groups, nothing_relevant)
}

/// How many conversation trees `hits` come from: no more than the groups
/// they make (a tree is one group, or several when its root is unreadable).
fn trees(hits: &[IndexHit], runs: &HitRuns) -> usize {
    hits.iter()
        .filter_map(|h| runs.get(&h.run_id))
        .map(|r| r.root_run_id.as_str())
        .collect::<HashSet<_>>()
        .len()
}

/// The runs of the hits, by id.
pub(crate) type HitRuns = HashMap<String, Run>;

/// Keeps only hits whose run the registry says the viewer may read now
/// (expiry and quarantine included); returns the kept hits and their runs.
fn recheck(
    state: &AppState,
    viewer: &Viewer,
    hits: Vec<IndexHit>,
) -> Result<(Vec<IndexHit>, HitRuns)> {
    let mut verdicts: HashMap<String, bool> = HashMap::new();
    let mut runs = HitRuns::new();
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
                verdicts.insert(hit.run_id.clone(), run.is_some());
                match run {
                    Some(run) => {
                        runs.insert(hit.run_id.clone(), run.run);
                        true
                    }
                    None => false,
                }
            }
        };
        if readable {
            out.push(hit);
        }
    }
    Ok((out, runs))
}

fn wire_hit(h: IndexHit, runs: &HitRuns, handles: &HashMap<String, String>) -> SearchHit {
    let run = runs.get(&h.run_id);
    SearchHit {
        _links: RunLinks::for_run(&h.run_id),
        conversation_id: run.and_then(|r| r.conversation.clone()),
        owner: run
            .and_then(|r| handles.get(&r.user_id))
            .cloned()
            .unwrap_or_default(),
        subagent: run.and_then(|r| {
            r.subagent_spans
                .iter()
                .find(|s| s.line_start <= h.line_start && h.line_end <= s.line_end)
                .cloned()
        }),
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
        weak: false,
        coverage: 0.0,
        similarity: None,
    }
}

/// Ranked hits as conversations, best first: a subagent's hits count for
/// the conversation that spawned it when the viewer may read that one.
/// The groups of `page` (places in that order), each with its best
/// `HITS_PER_GROUP`. With `by_score` (the number of leading hits that rank ahead of the rest,
/// see `aggregate::order`) conversations are ordered by the scores of all
/// their hits; without, by where their first hit stands.
fn group_hits(
    state: &AppState,
    viewer: &Viewer,
    hits: Vec<SearchHit>,
    runs: &HitRuns,
    handles: &HashMap<String, String>,
    by_score: Option<usize>,
    page: std::ops::Range<usize>,
) -> Result<Vec<SearchGroup>> {
    let registry = state.registry();
    let mut order: Vec<String> = Vec::new();
    let mut members: HashMap<String, Vec<SearchHit>> = HashMap::new();
    let mut scored: HashMap<String, aggregate::Group> = HashMap::new();
    let mut top_of: HashMap<String, String> = HashMap::new();
    for (at, hit) in hits.into_iter().enumerate() {
        let Some(run) = runs.get(&hit.run_id) else {
            continue;
        };
        let key = match top_of.get(&run.root_run_id) {
            Some(top) => top.clone(),
            None => {
                let root = RunId::parse(&run.root_run_id)
                    .ok()
                    .map(|id| registry.run(viewer, &id))
                    .transpose()?
                    .flatten();
                let top = root
                    .and_then(|r| r.run.conversation)
                    .or_else(|| run.conversation.clone())
                    .unwrap_or_else(|| run.id.clone());
                top_of.insert(run.root_run_id.clone(), top.clone());
                top
            }
        };
        let group = scored
            .entry(key.clone())
            .or_insert_with(|| aggregate::Group {
                first: at,
                scores: Vec::new(),
            });
        group.scores.push(hit.score);
        let list = members.entry(key.clone()).or_default();
        if list.is_empty() {
            order.push(key);
        }
        if list.len() < HITS_PER_GROUP {
            list.push(hit);
        }
    }
    if let Some(leading) = by_score {
        let groups: Vec<aggregate::Group> = order
            .iter()
            .map(|k| scored.remove(k).unwrap_or_default())
            .collect();
        let ranked = aggregate::order(&groups, leading);
        order = ranked.into_iter().map(|i| order[i].clone()).collect();
    }
    let mut groups = Vec::new();
    for key in order.into_iter().skip(page.start).take(page.len()) {
        let hits = members.remove(&key).unwrap_or_default();
        let Some(first) = hits.first() else { continue };
        groups.push(match conversation_facts(registry, viewer, &key, handles)? {
            Some(c) => SearchGroup {
                conversation_id: c.id,
                title: c.title,
                owner: c.owner,
                machine: c.machine,
                agent_runtime: c.agent_runtime,
                model: c.model,
                cwd: c.cwd,
                git_branch: c.git_branch,
                session_id: c.session_id,
                started_at: c.started_at,
                last_activity_at: c.last_activity_at,
                tags: c.tags,
                score: first.score,
                weak: false,
                hits,
            },
            None => SearchGroup {
                conversation_id: key,
                title: first.intent.clone(),
                owner: first.owner.clone(),
                machine: first.machine.clone(),
                agent_runtime: first.agent_runtime,
                model: None,
                cwd: None,
                git_branch: None,
                session_id: None,
                started_at: first.started_at.clone(),
                last_activity_at: first.started_at.clone(),
                tags: Vec::new(),
                score: first.score,
                weak: false,
                hits,
            },
        });
    }
    Ok(groups)
}

/// A conversation's facts as `viewer` sees them, folded from the runs it may
/// read; `None` when `id` is not a conversation id or nothing of it is
/// readable.
pub(crate) fn conversation_facts(
    registry: &crate::registry::Registry,
    viewer: &Viewer,
    id: &str,
    handles: &HashMap<String, String>,
) -> Result<Option<kith_proto::Conversation>> {
    let Ok(id) = crate::conversation::ConversationId::parse(id) else {
        return Ok(None);
    };
    let runs = registry.conversation_runs(viewer, &id)?;
    let metas: Vec<&Run> = runs.iter().map(|r| &r.run).collect();
    Ok(crate::conversation::fold(
        &crate::conversation::ConversationRuns {
            id: &id,
            owner: metas
                .first()
                .and_then(|r| handles.get(&r.user_id))
                .map_or("", String::as_str),
            runs: &metas,
            parent_id: None,
            depth: 0,
        },
    ))
}

fn unavailable(why: &str) -> Error {
    Error::unavailable(
        Code::EmbedderUnavailable,
        format!("semantic search is unavailable ({why}); keyword search still answers"),
    )
}

fn ms(since: Instant) -> f64 {
    since.elapsed().as_secs_f64() * 1000.0
}
