//! What a search request asks, decided before anything is read: the
//! request validated and bounded, the time its words name, what the
//! keyword side searches for, how many hits to rank for the page. Pure
//! (`plan`), tested from a table of requests; `search` then executes it.

use kith_proto::{GroupBy, SearchMode, SearchRequest};

use super::{rerank, when};
use crate::error::{Code, Error, Result};
use crate::index::{fusion, Filters, MAX_GROUP_POOL};
use crate::registry::Facets;

pub(super) const DEFAULT_LIMIT: u32 = 10;
/// Larger limits are clamped to this, not refused.
pub(crate) const MAX_LIMIT: u32 = 100;
pub(crate) const MAX_OFFSET: u32 = 1000;
pub(super) const MAX_QUERY_BYTES: usize = 4096;
/// Hits fetched per conversation asked for, to fill groups; doubled while
/// the hits fall in fewer conversations than the page reaches.
const GROUP_POOL_FACTOR: usize = 5;
const _: () = assert!((MAX_OFFSET + MAX_LIMIT) as usize <= MAX_GROUP_POOL);

/// A search, planned.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Plan {
    pub mode: SearchMode,
    pub group: GroupBy,
    /// The query as typed, trimmed.
    pub typed: String,
    /// What is searched: the query without the words of a date it names
    /// (searched within that date's window).
    pub query: String,
    /// The time the query names, unless the request chose a range.
    pub timed: Option<when::Named>,
    /// What the keyword side searches for: the query without question
    /// words in a hybrid search; none in a semantic one.
    pub keyword: Option<String>,
    /// The keyword side outside a date's window: the query as typed (the
    /// words may be what the text says, "our trip last year").
    pub keyword_typed: Option<String>,
    pub filters: Filters,
    pub facets: Facets,
    pub rerank: Option<rerank::Rerank>,
    /// Grouped conversations are ordered by their hits' scores, unless a
    /// re-rank ordered hits by something else (diversity).
    pub by_score: bool,
    pub offset: usize,
    pub limit: usize,
    /// Hits (or conversations, grouped) the page reaches: offset + limit.
    pub reach: usize,
    /// Hits ranked first: the reach, or for groups a pool of them (doubled
    /// while the hits hold fewer conversations than the page reaches).
    pub want: usize,
}

/// The plan of `req`, with `today` for the times its words name.
pub(crate) fn plan(req: &SearchRequest, today: time::Date) -> Result<Plan> {
    let typed = req.query.trim().to_owned();
    if typed.is_empty() {
        return Err(Error::invalid(Code::EmptyQuery, "query must not be empty"));
    }
    if typed.len() > MAX_QUERY_BYTES {
        return Err(Error::invalid(
            Code::QueryTooLong,
            format!(
                "query is {} bytes; the limit is {MAX_QUERY_BYTES}",
                typed.len()
            ),
        ));
    }
    if req.offset > MAX_OFFSET {
        return Err(Error::invalid(
            Code::InvalidOffset,
            format!("offset must be at most {MAX_OFFSET}"),
        ));
    }
    if req.limit == Some(0) {
        return Err(Error::invalid(
            Code::InvalidLimit,
            format!("limit must be 1 to {MAX_LIMIT}"),
        ));
    }
    let limit = req.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_LIMIT) as usize;
    let offset = req.offset as usize;
    let mut filters = resolve_filters(&req.filters)?;
    // A project named without a slash ("kith") is a folder of that name
    // anywhere in the working folder's path, a facet; a path is a prefix
    // the index filters on.
    let project_name = filters.cwd_prefix.take_if(|p| !p.contains('/'));
    let facets = Facets::checked(
        [
            &req.filters.file,
            &req.filters.tool,
            &req.filters.command,
            &project_name,
            &req.filters.branch,
            &req.filters.owner,
        ],
        &req.filters.machine,
    )?;
    let rerank = rerank::Rerank::of(req)?;
    let reach = limit + offset;
    let want = match req.group {
        GroupBy::None => reach,
        GroupBy::Conversation => (reach * GROUP_POOL_FACTOR).min(MAX_GROUP_POOL),
    };
    // A time the query names ranks what happened then first (see `when`),
    // unless the caller chose a time range: a date's runs (its words are
    // not searched within its window), or a month's hits, any year.
    let timed = when::named_at(&typed, today)
        .filter(|_| filters.since_ms.is_none() && filters.until_ms.is_none());
    let query = match &timed {
        Some(when::Named::Window(d)) => d.rest.clone(),
        _ => typed.clone(),
    };
    let keyword_of = |q: &str| match req.mode {
        SearchMode::Keyword => Some(q.to_owned()),
        SearchMode::Hybrid => Some(fusion::without_question_words(q)),
        SearchMode::Semantic => None,
    };
    Ok(Plan {
        mode: req.mode,
        group: req.group,
        keyword: keyword_of(&query),
        keyword_typed: keyword_of(&typed),
        typed,
        query,
        timed,
        filters,
        facets,
        by_score: rerank.is_none_or(|r| r.keeps_score_order()),
        rerank,
        offset,
        limit,
        reach,
        want,
    })
}

fn resolve_filters(f: &kith_proto::SearchFilters) -> Result<Filters> {
    let max = crate::registry::MAX_FILTER_BYTES;
    for v in [&f.conversation_id, &f.root_run_id, &f.cwd_prefix]
        .into_iter()
        .flatten()
        .chain(&f.tags)
    {
        if v.len() > max {
            return Err(Error::invalid(
                Code::FilterTooLong,
                format!("a filter value is at most {max} bytes"),
            ));
        }
    }
    if !kith_shared::tags::valid(&f.tags) {
        return Err(Error::invalid(
            Code::InvalidFilter,
            format!("filters.tags: {}", kith_shared::tags::rule()),
        ));
    }
    let time = |name: &str, v: &Option<String>| -> Result<Option<i64>> {
        v.as_deref()
            .map(|s| {
                kith_shared::timestamp::parse(s)
                    .map(kith_shared::timestamp::epoch_ms)
                    .ok_or_else(|| {
                        Error::invalid(
                            Code::InvalidFilter,
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
        roots: None,
        include_superseded: f.include_superseded,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_proto::SearchFilters;

    fn today() -> time::Date {
        time::macros::date!(2026 - 05 - 20)
    }

    fn request(query: &str) -> SearchRequest {
        serde_json::from_value(serde_json::json!({ "query": query }))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// Requests refused before anything is read, each with its code.
    #[test]
    fn bad_requests_are_refused_with_their_code() {
        let long = "x".repeat(MAX_QUERY_BYTES + 1);
        let cases: Vec<(Code, SearchRequest)> = vec![
            (Code::EmptyQuery, request("   ")),
            (Code::QueryTooLong, request(&long)),
            (
                Code::InvalidOffset,
                SearchRequest {
                    offset: MAX_OFFSET + 1,
                    ..request("x")
                },
            ),
            (
                Code::InvalidFilter,
                SearchRequest {
                    filters: SearchFilters {
                        since: Some("yesterday".into()),
                        ..SearchFilters::default()
                    },
                    ..request("x")
                },
            ),
            (
                Code::FilterTooLong,
                SearchRequest {
                    filters: SearchFilters {
                        file: Some("f".repeat(5000)),
                        ..SearchFilters::default()
                    },
                    ..request("x")
                },
            ),
        ];
        for (code, req) in cases {
            match plan(&req, today()) {
                Err(Error::Invalid { code: got, .. }) => assert_eq!(got, code),
                other => panic!("{code:?}: {other:?}"),
            }
        }
    }

    /// What is searched, and how many hits are ranked for the page.
    #[test]
    fn a_plan_says_what_is_searched_and_how_many_hits_to_rank() {
        struct Case {
            what: &'static str,
            req: SearchRequest,
            query: &'static str,
            keyword: Option<&'static str>,
            dated: bool,
            limit: usize,
            want: usize,
        }
        let with = |query: &str, f: &dyn Fn(&mut SearchRequest)| {
            let mut req = request(query);
            f(&mut req);
            req
        };
        let cases = [
            Case {
                what: "hybrid: question words leave the keyword side",
                req: request("why did the cluster fail"),
                query: "why did the cluster fail",
                keyword: Some("the cluster fail"),
                dated: false,
                limit: DEFAULT_LIMIT as usize,
                want: DEFAULT_LIMIT as usize,
            },
            Case {
                what: "keyword: searched as typed",
                req: with("why did the cluster fail", &|r| {
                    r.mode = SearchMode::Keyword
                }),
                query: "why did the cluster fail",
                keyword: Some("why did the cluster fail"),
                dated: false,
                limit: DEFAULT_LIMIT as usize,
                want: DEFAULT_LIMIT as usize,
            },
            Case {
                what: "semantic: no keyword side",
                req: with("cluster", &|r| r.mode = SearchMode::Semantic),
                query: "cluster",
                keyword: None,
                dated: false,
                limit: DEFAULT_LIMIT as usize,
                want: DEFAULT_LIMIT as usize,
            },
            Case {
                what: "a date's words are searched within its window",
                req: with("rollback on 7 March, 2024", &|r| {
                    r.mode = SearchMode::Keyword
                }),
                query: "rollback",
                keyword: Some("rollback"),
                dated: true,
                limit: DEFAULT_LIMIT as usize,
                want: DEFAULT_LIMIT as usize,
            },
            Case {
                what: "a range the request chose wins over the words",
                req: with("rollback on 7 March, 2024", &|r| {
                    r.mode = SearchMode::Keyword;
                    r.filters.since = Some("2024-01-01T00:00:00Z".into());
                }),
                query: "rollback on 7 March, 2024",
                keyword: Some("rollback on 7 March, 2024"),
                dated: false,
                limit: DEFAULT_LIMIT as usize,
                want: DEFAULT_LIMIT as usize,
            },
            Case {
                what: "a limit past the most is clamped; ungrouped ranks the reach",
                req: with("x", &|r| {
                    r.limit = Some(10_000);
                    r.offset = 20;
                }),
                query: "x",
                keyword: Some("x"),
                dated: false,
                limit: MAX_LIMIT as usize,
                want: MAX_LIMIT as usize + 20,
            },
            Case {
                what: "grouped, a pool of hits per conversation",
                req: with("x", &|r| {
                    r.limit = Some(4);
                    r.group = GroupBy::Conversation;
                }),
                query: "x",
                keyword: Some("x"),
                dated: false,
                limit: 4,
                want: 4 * GROUP_POOL_FACTOR,
            },
            Case {
                what: "grouped, the pool stops at the most an index is asked",
                req: with("x", &|r| {
                    r.limit = Some(MAX_LIMIT);
                    r.offset = MAX_OFFSET;
                    r.group = GroupBy::Conversation;
                }),
                query: "x",
                keyword: Some("x"),
                dated: false,
                limit: MAX_LIMIT as usize,
                want: MAX_GROUP_POOL,
            },
        ];
        for case in cases {
            let plan = plan(&case.req, today()).unwrap_or_else(|e| panic!("{}: {e}", case.what));
            assert_eq!(plan.query, case.query, "{}", case.what);
            assert_eq!(plan.keyword.as_deref(), case.keyword, "{}", case.what);
            assert_eq!(
                matches!(plan.timed, Some(when::Named::Window(_))),
                case.dated,
                "{}",
                case.what
            );
            assert_eq!(plan.limit, case.limit, "{}", case.what);
            assert_eq!(plan.want, case.want, "{}", case.what);
            assert_eq!(plan.typed, case.req.query.trim(), "{}", case.what);
        }
        // A page of nothing is a mistake, not a request.
        let zero = plan(&with("x", &|r| r.limit = Some(0)), today()).err();
        assert!(zero.is_some_and(|e| e.code() == Code::InvalidLimit));
    }
}
