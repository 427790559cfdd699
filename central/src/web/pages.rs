//! The pages (`GET`): search, recent conversations, the conversation
//! reader and its raw bytes, shares, the read audit, what my agents cost,
//! machines, and the admin's view. Each reads through the same functions as the JSON API.

use axum::extract::{Path, Query, State};
use kith_proto::{
    AgentRuntime, GroupBy, SearchFilters, SearchMode, SearchRequest, UsageBy, UsageQuery,
    UsageReport,
};
use serde::Deserialize;

use super::chart::{stacked, Measure};
use super::session::WebSession;
use super::view::{
    AuditPage, Chrome, ConversationPage, ConversationView, Filter, GroupView, InlineSubagentView,
    ListPage, MachinesPage, Paging, SearchPage, ShareView, SharesPage, TurnView, UsagePage,
    UsageRowView,
};
use super::{render, PageResult};
use crate::error::{Code, Error};
use crate::registry::ConversationFilter;
use crate::state::AppState;

/// Turns shown on one page of the reader.
const TURNS_PER_PAGE: usize = 500;

/// Conversations shown on one page of search results.
const RESULTS_PER_PAGE: u32 = 20;

impl WebSession {
    fn chrome(&self) -> Option<Chrome> {
        Some(Chrome {
            handle: self.viewer.handle().to_owned(),
            csrf: self.csrf(),
            is_admin: self.viewer.is_admin(),
        })
    }
}

/// The search form's fields (every one optional: an empty form is the
/// start page).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct SearchForm {
    #[serde(default)]
    q: String,
    #[serde(default)]
    mode: String,
    #[serde(default)]
    owner: String,
    #[serde(default)]
    machine: String,
    #[serde(default)]
    project: String,
    #[serde(default)]
    branch: String,
    #[serde(default)]
    file: String,
    #[serde(default)]
    tool: String,
    #[serde(default)]
    command: String,
    #[serde(default)]
    runtime: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    tag: String,
    /// Also what is below the relevance floor.
    #[serde(default)]
    weak: String,
    /// Conversations before this page's first.
    #[serde(default)]
    offset: u32,
}

/// A filled-in field, trimmed.
fn given(v: &str) -> Option<String> {
    Some(v.trim().to_owned()).filter(|v| !v.is_empty())
}

/// A date from the form (`2026-05-01` or RFC 3339) as RFC 3339: a day's
/// start, or with `through` its end (the next day's start, which the
/// filter leaves out), so that "until 1 May" holds 1 May.
fn date(name: &str, v: &str, through: bool) -> Result<Option<String>, Error> {
    let Some(v) = given(v) else { return Ok(None) };
    let day = time::Date::parse(
        &v,
        time::macros::format_description!("[year]-[month]-[day]"),
    );
    let full = match day {
        Ok(d) => {
            let d = if through {
                d.next_day().unwrap_or(d)
            } else {
                d
            };
            format!("{d}T00:00:00Z")
        }
        Err(_) => v,
    };
    kith_shared::timestamp::normalize(&full)
        .map(Some)
        .ok_or_else(|| {
            Error::invalid(
                Code::InvalidQuery,
                format!("{name} must be a date like 2026-05-01 or an RFC 3339 time"),
            )
        })
}

pub(crate) async fn search(
    State(state): State<AppState>,
    session: WebSession,
    axum::extract::RawQuery(raw): axum::extract::RawQuery,
    Query(form): Query<SearchForm>,
) -> PageResult {
    let mode = match form.mode.as_str() {
        "keyword" => SearchMode::Keyword,
        "semantic" => SearchMode::Semantic,
        _ => SearchMode::Hybrid,
    };
    let runtime = match given(&form.runtime) {
        Some(r) => Some(AgentRuntime::parse(&r).ok_or_else(|| {
            let known = AgentRuntime::ALL.map(AgentRuntime::as_str).join(", ");
            Error::invalid(
                Code::InvalidQuery,
                format!("runtime must be one of {known}"),
            )
        })?),
        None => None,
    };
    let filters = SearchFilters {
        runtime,
        machine: given(&form.machine),
        cwd_prefix: given(&form.project),
        since: date("since", &form.since, false)?,
        until: date("until", &form.until, true)?,
        file: given(&form.file),
        tool: given(&form.tool),
        command: given(&form.command),
        branch: given(&form.branch),
        owner: given(&form.owner),
        tags: given(&form.tag).into_iter().collect(),
        ..SearchFilters::default()
    };
    let filters_open = filters != SearchFilters::default();
    let q = form.q.trim().to_owned();
    let show_weak = !form.weak.is_empty();
    let offset = form.offset;
    let (mut groups, degraded, nothing_relevant) = if q.is_empty() {
        (Vec::new(), None, false)
    } else {
        let req = SearchRequest {
            query: q.clone(),
            mode,
            filters,
            // One more than a page: whether there is a next one.
            limit: Some(RESULTS_PER_PAGE + 1),
            offset,
            group: GroupBy::Conversation,
            ..SearchRequest::default()
        };
        let res = crate::search::search(&state, &session.viewer, req).await?;
        // Weak hits only: say so, and offer them; no hit at all is "no results".
        let nothing_relevant = res.nothing_relevant && !show_weak && !res.groups.is_empty();
        let groups = if nothing_relevant {
            Vec::new()
        } else {
            res.groups.into_iter().map(GroupView::from).collect()
        };
        (groups, res.degraded, nothing_relevant)
    };
    let more = groups.len() > RESULTS_PER_PAGE as usize;
    groups.truncate(RESULTS_PER_PAGE as usize);
    let raw = raw.unwrap_or_default();
    let at = |offset: u32| {
        let rest: Vec<&str> = raw
            .split('&')
            .filter(|p| !p.is_empty() && !p.starts_with("offset="))
            .collect();
        format!("/?{}&offset={offset}", rest.join("&"))
    };
    let pages = Paging {
        first: offset as usize + 1,
        last: offset as usize + groups.len(),
        prev: (offset > 0).then(|| at(offset.saturating_sub(RESULTS_PER_PAGE))),
        next: more.then(|| at(offset + RESULTS_PER_PAGE)),
    };
    let values = {
        let (s, v) = (state.clone(), session.viewer.clone());
        tokio::task::spawn_blocking(move || s.registry().filter_values(&v)).await??
    };
    let field = |name, label, value: &str, list: &[String]| Filter {
        name,
        label,
        value: value.to_owned(),
        kind: "text",
        values: list.to_vec(),
    };
    let day = |name, label, value: &str| Filter {
        name,
        label,
        value: value.to_owned(),
        kind: "date",
        values: Vec::new(),
    };
    let agents: Vec<String> = AgentRuntime::ALL
        .iter()
        .map(|a| a.as_str().to_owned())
        .collect();
    Ok(render(&SearchPage {
        chrome: session.chrome(),
        modes: [
            ("hybrid", "Hybrid", SearchMode::Hybrid),
            ("keyword", "Keyword", SearchMode::Keyword),
            ("semantic", "Semantic", SearchMode::Semantic),
        ]
        .into_iter()
        .map(|(v, l, m)| (v, l, m == mode))
        .collect(),
        filters: vec![
            field("owner", "Owner (handle)", &form.owner, &values.owners),
            field("machine", "Machine", &form.machine, &values.machines),
            field("project", "Project folder", &form.project, &values.projects),
            field("branch", "Git branch", &form.branch, &values.branches),
            field("tag", "Tag", &form.tag, &values.tags),
            field("file", "File touched", &form.file, &[]),
            field("tool", "Tool used", &form.tool, &values.tools),
            field("command", "Command run", &form.command, &[]),
            field("runtime", "Agent", &form.runtime, &agents),
            day("since", "Since", &form.since),
            day("until", "Until", &form.until),
        ],
        filters_open,
        degraded,
        nothing_relevant,
        weak_href: format!("/?{raw}&weak=1"),
        pages,
        groups,
        q,
    }))
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct PageQuery {
    cursor: Option<String>,
    offset: Option<u64>,
    /// A search hit's place (`run`, `line`): the page holding it.
    run: Option<String>,
    line: Option<u64>,
}

/// Recent conversations, subagents under them.
pub(crate) async fn recent(
    State(state): State<AppState>,
    session: WebSession,
    Query(page): Query<PageQuery>,
) -> PageResult {
    let filter = ConversationFilter {
        after: page
            .cursor
            .as_deref()
            .map(crate::tree::parse_cursor)
            .transpose()?,
        limit: 50,
        ..ConversationFilter::default()
    };
    let viewer = session.viewer.clone();
    let res = tokio::task::spawn_blocking(move || {
        crate::tree::conversations(state.registry(), &viewer, &filter)
    })
    .await??;
    Ok(render(&ListPage {
        chrome: session.chrome(),
        heading: "Recent conversations",
        empty: "No conversations you may read yet.",
        rows: res
            .conversations
            .into_iter()
            .map(ConversationView::from)
            .collect(),
        next: res
            .next_cursor
            .map(|c| format!("/recent?cursor={}", urlencode(&c))),
    }))
}

/// One conversation: its turns in order across its deltas, and its
/// subagents.
pub(crate) async fn conversation(
    State(state): State<AppState>,
    session: WebSession,
    Path(id): Path<String>,
    Query(page): Query<PageQuery>,
) -> PageResult {
    let viewer = session.viewer.clone();
    let (c, turns, total, first, next_offset) = tokio::task::spawn_blocking(move || {
        let c = crate::tree::conversation(state.registry(), &viewer, &id)?;
        let start = match (&page.run, page.line, page.offset) {
            (Some(run), Some(line), None) => crate::tree::PageStart::Holding { run, line },
            (_, _, offset) => crate::tree::PageStart::Offset(offset.unwrap_or(0)),
        };
        let turns = crate::tree::turns(
            state.registry(),
            state.store(),
            state.turns_cache(),
            &viewer,
            &c.conversation.id,
            start,
            TURNS_PER_PAGE,
        )?;
        // The page's first turn, 0-based in the conversation.
        let first = turns.next_offset.unwrap_or(turns.total) - turns.turns.len() as u64;
        // Markdown is rendered here, off the async workers.
        let mut views: Vec<TurnView> = turns
            .turns
            .into_iter()
            .zip(first + 1..)
            .map(|(t, number)| TurnView::new(t, number, &c.conversation.inline_subagents))
            .collect();
        let mut before: Option<String> = None;
        for view in &mut views {
            if let Some(machine) = &view.machine {
                if before.as_ref().is_some_and(|b| b != machine) {
                    view.moved_to = Some(machine.clone());
                }
                before = Some(machine.clone());
            }
        }
        Ok::<_, Error>((c, views, turns.total, first, turns.next_offset))
    })
    .await??;
    let own = c.conversation.owner == session.viewer.handle();
    let id = c.conversation.id.clone();
    let inline = c
        .conversation
        .inline_subagents
        .iter()
        .map(InlineSubagentView::from)
        .collect();
    // The one command that continues it on any of the owner's machines.
    let resume = (own && c.conversation.session_id.is_some()).then(|| format!("kith resume {id}"));
    Ok(render(&ConversationPage {
        chrome: session.chrome(),
        csrf: session.csrf(),
        own,
        resume,
        total,
        prev: (first > 0).then(|| {
            let o = first.saturating_sub(TURNS_PER_PAGE as u64);
            format!("/c/{id}?offset={o}")
        }),
        next: next_offset.map(|o| format!("/c/{id}?offset={o}")),
        turns,
        subagents: c
            .subagents
            .into_iter()
            .map(ConversationView::from)
            .collect(),
        inline,
        c: c.conversation.into(),
    }))
}

/// The conversation's exact bytes, as `GET /api/conversations/{id}/jsonl`.
pub(crate) async fn raw(
    State(state): State<AppState>,
    session: WebSession,
    Path(id): Path<String>,
) -> PageResult {
    Ok(crate::handlers::conversations::conversation_bytes(&state, session.viewer, id).await?)
}

/// Shared with me, and my shares (with revoke).
pub(crate) async fn shares(State(state): State<AppState>, session: WebSession) -> PageResult {
    let viewer = session.viewer.clone();
    let res = tokio::task::spawn_blocking(move || crate::sharing::list(state.registry(), &viewer))
        .await??;
    Ok(render(&SharesPage {
        chrome: session.chrome(),
        csrf: session.csrf(),
        given: res.given.into_iter().map(ShareView::from).collect(),
        received: res.received.into_iter().map(ShareView::from).collect(),
    }))
}

/// Who read my runs, each reading named by its conversation's title.
pub(crate) async fn audit(
    State(state): State<AppState>,
    session: WebSession,
    Query(query): Query<kith_proto::AuditQuery>,
) -> PageResult {
    let viewer = session.viewer.clone();
    let res = tokio::task::spawn_blocking(move || {
        crate::sharing::audit(state.registry(), &viewer, &query)
    })
    .await??;
    let next = res.next_cursor.clone();
    let rows = res
        .entries
        .into_iter()
        .map(|e| {
            let what = match e.what.as_str() {
                "search_hit" => "found in a search",
                "forget" => "forgot",
                _ => "read",
            };
            let title = e
                .title
                .unwrap_or_else(|| "an untitled conversation".to_owned());
            let target = e.conversation_id.unwrap_or(e.run_id);
            (
                super::view::when(&e.at),
                e.reader,
                what.to_owned(),
                target,
                title,
            )
        })
        .collect();
    Ok(render(&AuditPage {
        chrome: session.chrome(),
        rows,
        next,
    }))
}

/// The usage form's fields (every one optional: an empty form is every
/// day's usage in UTC, unsplit).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct UsageForm {
    #[serde(default)]
    report: String,
    #[serde(default)]
    by: String,
    #[serde(default)]
    agent: String,
    #[serde(default)]
    since: String,
    #[serde(default)]
    until: String,
    #[serde(default)]
    timezone: String,
}

const REPORTS: [(&str, &str, UsageReport); 5] = [
    ("daily", "By day", UsageReport::Daily),
    ("weekly", "By week", UsageReport::Weekly),
    ("monthly", "By month", UsageReport::Monthly),
    ("session", "By conversation", UsageReport::Session),
    ("blocks", "By 5-hour block", UsageReport::Blocks),
];

/// The splits; `person` (every member's usage) is offered to admins.
const BYS: [(&str, &str, UsageBy); 5] = [
    ("model", "Model", UsageBy::Model),
    ("agent", "Agent", UsageBy::Agent),
    ("machine", "Machine", UsageBy::Machine),
    ("project", "Project", UsageBy::Project),
    ("person", "Member", UsageBy::Person),
];

impl UsageForm {
    /// The query the form asks for; a value no choice has is refused.
    fn query(&self) -> Result<UsageQuery, Error> {
        let bad = |field: &str, names: Vec<&str>| {
            Error::invalid(
                Code::InvalidQuery,
                format!("{field} must be one of {}", names.join(", ")),
            )
        };
        let report = match given(&self.report) {
            None => None,
            Some(r) => Some(
                REPORTS
                    .iter()
                    .find(|(v, ..)| *v == r)
                    .map(|(.., k)| *k)
                    .ok_or_else(|| bad("report", REPORTS.iter().map(|c| c.0).collect()))?,
            ),
        };
        let by = match given(&self.by) {
            None => None,
            Some(b) => Some(
                BYS.iter()
                    .find(|(v, ..)| *v == b)
                    .map(|(.., k)| *k)
                    .ok_or_else(|| bad("by", BYS.iter().map(|c| c.0).collect()))?,
            ),
        };
        let agent = match given(&self.agent) {
            None => None,
            Some(a) => Some(AgentRuntime::parse(&a).ok_or_else(|| {
                bad(
                    "agent",
                    AgentRuntime::ALL.iter().map(|r| r.as_str()).collect(),
                )
            })?),
        };
        Ok(UsageQuery {
            report,
            by,
            agent,
            since: given(&self.since),
            until: given(&self.until),
            timezone: given(&self.timezone),
            family: None,
        })
    }
}

/// What my agents cost: the report the form asks for, and charts of its
/// range's tokens and dollars per day by model. Only the viewer's own
/// usage, as `GET /api/usage` reads it.
pub(crate) async fn usage(
    State(state): State<AppState>,
    session: WebSession,
    Query(form): Query<UsageForm>,
) -> PageResult {
    let q = form.query()?;
    let viewer = session.viewer.clone();
    let asked = q.clone();
    let (res, days) = tokio::task::spawn_blocking(move || {
        let res = crate::usage::usage(&state, &viewer, &asked)?;
        // The family's days are stacked by member, one's own by model.
        let stack = if asked.by == Some(UsageBy::Person) {
            UsageBy::Person
        } else {
            UsageBy::Model
        };
        let days = UsageQuery {
            report: Some(UsageReport::Daily),
            by: Some(stack),
            ..asked
        };
        let days = crate::usage::usage(&state, &viewer, &days)?;
        Ok::<_, Error>((res, days))
    })
    .await??;
    let report = q.report.unwrap_or_default();
    let mut bys = vec![("", "Nothing", q.by.is_none())];
    bys.extend(
        BYS.iter()
            .filter(|(.., b)| *b != UsageBy::Person || session.viewer.is_admin())
            .map(|(v, l, b)| (*v, *l, q.by == Some(*b))),
    );
    let stacked_by = if q.by == Some(UsageBy::Person) {
        "member"
    } else {
        "model"
    };
    let mut agents = vec![("", "Every agent", q.agent.is_none())];
    agents.extend(
        AgentRuntime::ALL
            .iter()
            .map(|a| (a.as_str(), a.as_str(), q.agent == Some(*a))),
    );
    Ok(render(&UsagePage {
        chrome: session.chrome(),
        reports: REPORTS
            .iter()
            .map(|(v, l, r)| (*v, *l, *r == report))
            .collect(),
        bys,
        agents,
        since: form.since.trim().to_owned(),
        until: form.until.trim().to_owned(),
        timezone: form.timezone.trim().to_owned(),
        group_heading: q
            .by
            .and_then(|b| BYS.iter().find(|c| c.2 == b))
            .map(|c| c.1),
        key_heading: match report {
            UsageReport::Daily => "Day",
            UsageReport::Weekly => "Week of",
            UsageReport::Monthly => "Month",
            UsageReport::Session => "Conversation",
            UsageReport::Blocks => "Block from",
        },
        rows: res
            .rows
            .iter()
            .map(|r| UsageRowView::new(r.key.clone(), r.group.clone(), &r.totals))
            .collect(),
        totals: UsageRowView::new("Total".to_owned(), None, &res.totals),
        charts: vec![
            stacked("usage-tokens", "Tokens", &days.rows, Measure::Tokens),
            stacked("usage-cost", "Cost", &days.rows, Measure::Cost),
        ],
        stacked_by,
        zone: res.timezone,
        price_table: res.price_table,
        price_overrides: res.price_overrides,
        unpriced: res.totals.unpriced_models,
        n_refused: res.n_refused,
    }))
}

/// My machines, with revoke.
pub(crate) async fn machines(State(state): State<AppState>, session: WebSession) -> PageResult {
    let me = session.viewer.user_id().clone();
    let mine = me.clone();
    let machines = tokio::task::spawn_blocking(move || state.registry().list_machines())
        .await??
        .into_iter()
        .filter(|m| m.user_id == mine)
        .collect();
    Ok(render(&MachinesPage {
        chrome: session.chrome(),
        csrf: session.csrf(),
        heading: "My machines",
        users: Vec::new(),
        machines,
        me,
        health: Vec::new(),
    }))
}

/// Every user and machine, for an admin; "not found" for anyone else.
pub(crate) async fn admin(State(state): State<AppState>, session: WebSession) -> PageResult {
    if !session.viewer.is_admin() {
        return Err(Error::not_found("page").into());
    }
    let (users, machines, health) = tokio::task::spawn_blocking(move || {
        let registry = state.registry();
        let model = state.embed().map(|q| q.model_id().to_owned());
        let all = registry.holdings(None, model.as_deref())?;
        let health = vec![
            ("Conversations' deltas", all.runs.to_string()),
            (
                "Chunks embedded",
                format!("{} of {}", all.chunks_embedded, all.chunks),
            ),
            (
                "Waiting to be indexed",
                format!(
                    "{} now, {} in the background",
                    all.realtime_jobs, all.bulk_jobs
                ),
            ),
            (
                "Last indexed",
                all.last_indexed_at
                    .as_deref()
                    .map_or("never".to_owned(), super::view::when),
            ),
            ("Archive", bytes(registry.archive_bytes()?)),
            ("Search", state.index().name().to_owned()),
            ("Embedder", state.embedder_name()),
        ];
        Ok::<_, Error>((registry.list_users()?, registry.list_machines()?, health))
    })
    .await??;
    Ok(render(&MachinesPage {
        chrome: session.chrome(),
        csrf: session.csrf(),
        heading: "Family",
        users,
        machines,
        me: session.viewer.user_id().clone(),
        health,
    }))
}

/// A size as people read it: `512 B`, `3.4 MB`, `1.2 GB`.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if n < 1000 {
        return format!("{n} B");
    }
    let mut size = n as f64 / 1000.0;
    let mut unit = 0;
    while size >= 1000.0 && unit < UNITS.len() - 1 {
        size /= 1000.0;
        unit += 1;
    }
    format!("{size:.1} {}", UNITS[unit])
}

/// A query-string value, percent-encoded.
fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_a_day_holds_that_day() {
        let day = |v: &str, through: bool| date("d", v, through).ok().flatten();
        let at = |t: &str| kith_shared::timestamp::normalize(t);
        assert_eq!(day("2026-05-01", false), at("2026-05-01T00:00:00Z"));
        assert_eq!(day("2026-05-01", true), at("2026-05-02T00:00:00Z"));
        assert_eq!(day("2026-12-31", true), at("2027-01-01T00:00:00Z"));
        // A time is taken as given; an empty field is no filter; anything
        // else is refused.
        assert_eq!(
            day("2026-05-01T12:30:00Z", true),
            at("2026-05-01T12:30:00Z")
        );
        assert_eq!(day("  ", true), None);
        assert!(date("until", "2026-02-30", true).is_err());
        assert!(date("until", "May 1", true).is_err());
    }
}
