//! `kith mcp`: a Model Context Protocol server over stdio (the official SDK,
//! `rmcp`) that lets a coding agent read the family archive as its owner
//! may (and, with `usage`, what its owner's agents cost): every tool is a
//! request to central with this machine's token, so central decides what
//! is visible, as for `kith search`. A failed call is
//! a tool error carrying the API's error code; the server keeps serving.
//! Every answer fits the caller's token budget (default 4,000).

use std::borrow::Cow;
use std::path::Path;

use anyhow::{Context as _, Result};
use kith_proto::{
    AgentRuntime, ContextRequest, ContextResponse, Conversation, ConversationResponse,
    ConversationTurn, ConversationsResponse, GroupBy, SearchFilters, SearchMode, SearchRequest,
    SearchResponse, StatusResponse, TurnsResponse, UsageBy, UsageQuery, UsageReport, UsageResponse,
};
use kith_shared::tokens;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::schemars::{self, JsonSchema, Schema, SchemaGenerator};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};
use serde::Deserialize;
use time::OffsetDateTime;

use crate::client::{path_part, Central};
use crate::config::{Auth, Paths};
use crate::render::plain::{self, Citation};
use crate::render::term::{one_line, Style};
use crate::settings::Settings;
use crate::when::{parse_since, WHEN_HINT};

/// Tokens an answer may hold when the caller does not say.
pub(crate) const DEFAULT_MAX_TOKENS: u32 = 4000;
/// The largest budget a caller may ask for (central's context pack limit).
pub(crate) const MAX_TOKENS: u32 = 32_000;
/// The smallest: room for the note that says an answer was cut.
const MIN_TOKENS: u32 = 20;

/// Serves MCP on stdin/stdout until the client closes them. The agents
/// start it with pipes, which `stdio_pipes` reads on the IO driver rather
/// than handing each message to a blocking thread.
pub(crate) fn run(paths: &Paths, settings: &Settings) -> Result<()> {
    let auth = settings.auth(paths)?;
    let server = Kith::new(paths.clone(), settings.clone(), &auth)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the MCP runtime")?;
    runtime.block_on(async {
        let running = server
            .serve(rmcp::transport::stdio_pipes())
            .await
            .context("MCP start-up failed")?;
        running.waiting().await.context("MCP session failed")?;
        Ok(())
    })
}

/// A tool call that failed: the API's error code (or kith's own for bad
/// arguments) and a message the agent can act on.
#[derive(Debug)]
struct Failure {
    code: String,
    message: String,
}

impl Failure {
    fn new(code: &str, message: impl Into<String>) -> Self {
        Self {
            code: code.to_owned(),
            message: message.into(),
        }
    }
}

/// A request to central that failed, as `kith` words it.
impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Self {
        match e {
            crate::Error::Answered { code, message, .. } => Self { code, message },
            other => Self::new(other.code(), other.to_string()),
        }
    }
}

type ToolResult = std::result::Result<CallToolResult, rmcp::ErrorData>;

/// A tool's text, or its failure as an MCP tool error within the budget
/// the caller asked for (`max_tokens`; the default when it asked for none,
/// or for one out of bounds).
fn answer(result: std::result::Result<String, Failure>, max_tokens: Option<u32>) -> ToolResult {
    Ok(match result {
        Ok(text) => CallToolResult::success(vec![ContentBlock::text(text)]),
        Err(f) => {
            let max = budget(max_tokens).unwrap_or(DEFAULT_MAX_TOKENS);
            let text = format!("{} ({})", f.message, f.code);
            CallToolResult::error(vec![ContentBlock::text(plain::bounded(&text, max))])
        }
    })
}

#[derive(Clone)]
pub(crate) struct Kith {
    central: Central,
    /// The owner's handle, asked once: what is not theirs is quoted.
    me: tokio::sync::OnceCell<String>,
    paths: Paths,
    /// For the local half of `status` (exclusions, the first line).
    settings: Settings,
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Mode {
    Hybrid,
    Keyword,
    Semantic,
}

/// The schema of `search`'s `runtime`: the names of `AgentRuntime::ALL`
/// (the argument itself deserializes as an `AgentRuntime`).
struct RuntimeName;

impl JsonSchema for RuntimeName {
    fn schema_name() -> Cow<'static, str> {
        "Runtime".into()
    }

    fn json_schema(_: &mut SchemaGenerator) -> Schema {
        schemars::json_schema!({
            "type": "string",
            "enum": AgentRuntime::ALL.map(AgentRuntime::as_str),
        })
    }
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// What to look for, in plain words ("why did the migration fail"; at
    /// most 4096 bytes). A
    /// time in the words ("on 7 March, 2024", "yesterday", "last week",
    /// "in June") ranks what happened then first; `since`/`until` keep only
    /// that time.
    query: String,
    /// hybrid (default: words and meaning), keyword (exact words) or semantic.
    mode: Option<Mode>,
    /// Only conversations in this folder or below it (an absolute path, or
    /// relative to where kith mcp runs), or in a folder of this name (no /).
    project: Option<String>,
    /// Only conversations whose tools touched this file (a path or its last
    /// components), or a file under this folder (ending in /).
    file: Option<String>,
    /// Only conversations that used this tool or skill (Bash, Edit, exec_command, ...).
    tool: Option<String>,
    /// Only conversations that ran a shell command containing this.
    command: Option<String>,
    /// Only conversations on this git branch.
    branch: Option<String>,
    /// Only conversations of this family member (a handle).
    owner: Option<String>,
    /// Only conversations with every one of these tags.
    tags: Option<Vec<String>>,
    /// Only since then: 30m, 12h, 7d, 2w (ago) or an RFC 3339 time.
    since: Option<String>,
    /// Only before then: 30m, 12h, 7d, 2w (ago) or an RFC 3339 time.
    until: Option<String>,
    /// Only this agent: claude-code, codex, pi, gemini, copilot, cursor, aider, opencode or other.
    #[schemars(with = "Option<RuntimeName>")]
    runtime: Option<AgentRuntime>,
    /// Only this machine (its name).
    machine: Option<String>,
    /// How many conversations, 1 to 100 (default 10).
    limit: Option<u32>,
    /// How many of the best conversations to skip: the next page starts at
    /// offset + limit (at most 1000).
    offset: Option<u32>,
    /// Most tokens the answer may hold (default 4000; 20 to 32000).
    max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// A citation from search or context (kith://<conversation>/<run>#L<start>-L<end>): reads those lines' turns.
    citation: Option<String>,
    /// Or a conversation id, one of its run ids, or a unique prefix: reads the conversation.
    id: Option<String>,
    /// Only these lines of the cited run, like "12-40" (overrides the citation's lines).
    lines: Option<String>,
    /// Only these turns, 1-based, like "1-20": of the conversation, or with
    /// a citation of the turns it cites. An answer cut to max_tokens says
    /// which turns to ask for next.
    turns: Option<String>,
    /// Tool calls with their input and output instead of one line each.
    tools: Option<bool>,
    /// Most tokens the answer may hold (default 4000; 20 to 32000).
    max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RecentArgs {
    /// The project folder (default: the folder kith mcp runs in).
    project: Option<String>,
    /// Only conversations active since then: 30m, 12h, 7d, 2w or RFC 3339.
    since: Option<String>,
    /// How many conversations, 1 to 200 (default 10), each with the number
    /// of its subagents.
    limit: Option<u32>,
    /// Most tokens the answer may hold (default 4000; 20 to 32000).
    max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ContextArgs {
    /// The task at hand, in plain words (at most 4096 bytes).
    task: String,
    /// Most tokens the pack may hold (default 4000, at most 32000).
    budget_tokens: Option<u32>,
    /// Only conversations in this folder or below it (absolute, or relative to where kith mcp runs).
    project: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct StatusArgs {}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Period {
    Daily,
    Weekly,
    Monthly,
    Session,
    Blocks,
}

#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
enum Split {
    Model,
    Agent,
    Machine,
    Project,
    Person,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct UsageArgs {
    /// A row per day (default), week (from Monday), month, session
    /// (conversation) or 5-hour billing block (starting at the hour of its
    /// first response).
    period: Option<Period>,
    /// Split each row by model, agent, machine or project; person (every
    /// member's usage) for an admin.
    by: Option<Split>,
    /// Only this agent's usage.
    #[schemars(with = "Option<RuntimeName>")]
    agent: Option<AgentRuntime>,
    /// From then: a day (2026-05-01, in timezone), 30m, 12h, 7d, 2w (ago) or RFC 3339.
    since: Option<String>,
    /// Until then: a day (through its end, in timezone) or RFC 3339.
    until: Option<String>,
    /// The zone days are cut in: UTC (default), a fixed offset like +02:00,
    /// or a zone name like Europe/Berlin.
    timezone: Option<String>,
    /// Most tokens the answer may hold (default 4000; 20 to 32000).
    max_tokens: Option<u32>,
}

#[tool_router]
impl Kith {
    pub(crate) fn new(paths: Paths, settings: Settings, auth: &Auth) -> Result<Self> {
        Ok(Self {
            central: Central::new(auth)?,
            me: tokio::sync::OnceCell::new(),
            paths,
            settings,
            tool_router: Self::tool_router(),
        })
    }

    #[tool(
        description = "Search the coding-agent conversations you may read (yours and those shared with you), across machines. Hits are grouped by conversation; each hit has a citation kith://<conversation>/<run>#L<start>-L<end> to pass to `read`, and a snippet with matches in «»."
    )]
    async fn search(&self, Parameters(a): Parameters<SearchArgs>) -> ToolResult {
        let max = a.max_tokens;
        answer(self.search_text(a).await, max)
    }

    #[tool(
        description = "Read the turns of a conversation: give a citation from `search` or `context` for the cited lines, or a conversation id with an optional turn range. Tool calls are one line each unless tools is true."
    )]
    async fn read(&self, Parameters(a): Parameters<ReadArgs>) -> ToolResult {
        let max = a.max_tokens;
        answer(self.read_text(a).await, max)
    }

    #[tool(
        description = "Recent conversations in a project folder, newest first, with their titles and the files they touched."
    )]
    async fn recent(&self, Parameters(a): Parameters<RecentArgs>) -> ToolResult {
        let max = a.max_tokens;
        answer(self.recent_text(a).await, max)
    }

    #[tool(
        description = "A context pack for a task: the most relevant passages from past conversations, near-copies removed, each with its citation, conversation title, who and when, fitted to a token budget."
    )]
    async fn context(&self, Parameters(a): Parameters<ContextArgs>) -> ToolResult {
        let max = a.budget_tokens;
        answer(self.context_text(a).await, max)
    }

    #[tool(
        description = "What kith has captured from this machine's agents and what still waits to be sent, and what central holds."
    )]
    async fn status(&self, Parameters(_): Parameters<StatusArgs>) -> ToolResult {
        answer(Ok(self.status_text().await), None)
    }

    #[tool(
        description = "What your owner's agents cost (their own usage only, never another member's): tokens by kind (input, output, cache write, cache read) and dollars per day, week, month or session, optionally split by model, agent, machine or project, with the time zone, the price table's date and the models without a price."
    )]
    async fn usage(&self, Parameters(a): Parameters<UsageArgs>) -> ToolResult {
        let max = a.max_tokens;
        answer(self.usage_text(a).await, max)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Kith {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("kith", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "kith is the memory of your owner's coding agents: every Claude Code, Codex, pi, \
                 Gemini CLI, Copilot CLI, Cursor, OpenCode and Aider conversation on their machines \
                 and those shared with them. Use `context` with the task at the start of work, \
                 `search` to find what was done before (filters: runtime, the agent; project, a \
                 folder or a folder's name; file; tool; command; branch; owner; tags; machine; \
                 since and until), `read` with a citation to see the exact turns, and `usage` \
                 for what the owner's agents cost.",
            )
    }
}

impl Kith {
    /// The owner's handle; on failure none, so that everything reads as
    /// another's and is quoted.
    async fn me(&self) -> &str {
        self.me
            .get_or_init(|| async {
                let status: std::result::Result<kith_proto::StatusResponse, _> =
                    self.central.json(self.central.get("/api/status")).await;
                status.map(|s| s.user).unwrap_or_default()
            })
            .await
    }

    async fn search_text(&self, a: SearchArgs) -> std::result::Result<String, Failure> {
        let max = budget(a.max_tokens)?;
        let now = OffsetDateTime::now_utc();
        let req = SearchRequest {
            query: a.query,
            mode: match a.mode.unwrap_or(Mode::Hybrid) {
                Mode::Hybrid => SearchMode::Hybrid,
                Mode::Keyword => SearchMode::Keyword,
                Mode::Semantic => SearchMode::Semantic,
            },
            filters: SearchFilters {
                runtime: a.runtime,
                machine: a.machine,
                since: when("since", a.since, now)?,
                until: when("until", a.until, now)?,
                cwd_prefix: a.project.as_deref().map(project).transpose()?,
                file: a.file,
                tool: a.tool,
                command: a.command,
                branch: a.branch,
                owner: a.owner,
                tags: a.tags.unwrap_or_default(),
                ..SearchFilters::default()
            },
            limit: a.limit,
            offset: a.offset.unwrap_or(0),
            group: GroupBy::Conversation,
            ..SearchRequest::default()
        };
        let res: SearchResponse = self
            .central
            .json(self.central.post("/api/search").json(&req))
            .await?;
        Ok(plain::bounded(&plain::search(&res, self.me().await), max))
    }

    async fn read_text(&self, a: ReadArgs) -> std::result::Result<String, Failure> {
        let max = budget(a.max_tokens)?;
        let (id, cited) = match (a.citation.as_deref(), a.id) {
            (Some(c), None) => {
                let cited = citation(c)?;
                (cited.conversation.clone(), Some(cited))
            }
            (None, Some(id)) => (id, None),
            _ => {
                return Err(Failure::new(
                    "invalid_arguments",
                    "give either citation or id",
                ))
            }
        };
        let lines = match (a.lines.as_deref(), &cited) {
            (Some(l), Some(_)) => Some(range("lines", l)?),
            (Some(_), None) => {
                return Err(Failure::new(
                    "invalid_arguments",
                    "lines are lines of one run: give a citation with them",
                ))
            }
            (None, c) => c.as_ref().map(|c| c.lines),
        };
        let turns_range = a.turns.as_deref().map(|t| range("turns", t)).transpose()?;
        let found: ConversationResponse = self
            .central
            .json(
                self.central
                    .get(&format!("/api/conversations/{}", path_part(&id))),
            )
            .await?;
        let tools = a.tools.unwrap_or(false);
        let conversation = &found.conversation;
        // A range alone starts at its first turn; a citation's lines are
        // found among the turns from the start.
        let start = match (&cited, turns_range) {
            (None, Some((from, _))) => from - 1,
            _ => 0,
        };
        let (mut turns, total) = self
            .turns_until(&conversation.id, start, |turns| {
                match (&cited, turns_range) {
                    (Some(c), _) => past_run(turns, &c.run),
                    (None, Some((from, to))) => {
                        turns.len() as u64 > to - from
                            || tokens::approx(&plain::read(
                                conversation,
                                &found.subagents,
                                turns,
                                tools,
                            )) > max
                    }
                    (None, None) => {
                        tokens::approx(&plain::read(conversation, &found.subagents, turns, tools))
                            > max
                    }
                }
            })
            .await?;
        if let Some(c) = &cited {
            if let Some((from, to)) = lines {
                turns.retain(|t| t.run_id == c.run && t.line_start <= to && from <= t.line_end);
            }
            if let Some((from, to)) = turns_range {
                let skip = usize::try_from(from - 1).unwrap_or(usize::MAX);
                let take = usize::try_from(to - from + 1).unwrap_or(usize::MAX);
                turns = turns.into_iter().skip(skip).take(take).collect();
            }
            let text = plain::read(conversation, &found.subagents, &turns, tools);
            return Ok(self
                .theirs_marked(conversation, plain::bounded(&text, max))
                .await);
        }
        // Whole turns within the budget, and where to read on.
        let (from, to) = turns_range.unwrap_or((1, total.max(1)));
        turns.truncate(usize::try_from(to - from + 1).unwrap_or(usize::MAX));
        let page = plain::read_page(
            conversation,
            &found.subagents,
            &turns,
            plain::Page { from, to, total },
            tools,
            max,
        );
        Ok(self.theirs_marked(conversation, page).await)
    }

    /// `text` read from `conversation`, marked first as its owner's words
    /// when the owner is someone else.
    async fn theirs_marked(&self, conversation: &Conversation, text: String) -> String {
        if conversation.owner == self.me().await {
            return text;
        }
        format!("{}\n{text}", plain::quoted(&conversation.owner))
    }

    /// A conversation's turns from `offset`, a page at a time, until the
    /// conversation ends or `enough` says the turns read suffice (a long
    /// conversation is not read whole for a few of its turns); and how many
    /// turns it has.
    async fn turns_until(
        &self,
        id: &str,
        mut offset: u64,
        enough: impl Fn(&[ConversationTurn]) -> bool,
    ) -> std::result::Result<(Vec<ConversationTurn>, u64), Failure> {
        let mut turns = Vec::new();
        loop {
            let page: TurnsResponse = self
                .central
                .json(
                    self.central
                        .get(&format!("/api/conversations/{}/turns", path_part(id)))
                        .query(&[("offset", offset.to_string()), ("limit", "1000".into())]),
                )
                .await?;
            turns.extend(page.turns);
            match page.next_offset {
                Some(next) if next > offset && !enough(&turns) => offset = next,
                _ => return Ok((turns, page.total)),
            }
        }
    }

    async fn recent_text(&self, a: RecentArgs) -> std::result::Result<String, Failure> {
        let max = budget(a.max_tokens)?;
        let now = OffsetDateTime::now_utc();
        let mut query = vec![
            ("project", project(a.project.as_deref().unwrap_or("."))?),
            ("limit", a.limit.unwrap_or(10).to_string()),
        ];
        if let Some(since) = when("since", a.since, now)? {
            query.push(("since", since));
        }
        let res: ConversationsResponse = self
            .central
            .json(self.central.get("/api/conversations").query(&query))
            .await?;
        Ok(plain::bounded(&plain::recent(&res, self.me().await), max))
    }

    async fn context_text(&self, a: ContextArgs) -> std::result::Result<String, Failure> {
        let req = ContextRequest {
            task: a.task,
            budget_tokens: a.budget_tokens,
            filters: SearchFilters {
                cwd_prefix: a.project.as_deref().map(project).transpose()?,
                ..SearchFilters::default()
            },
        };
        let res: ContextResponse = self
            .central
            .json(self.central.post("/api/context").json(&req))
            .await?;
        Ok(plain::pack(&res))
    }

    async fn usage_text(&self, a: UsageArgs) -> std::result::Result<String, Failure> {
        let max = budget(a.max_tokens)?;
        let now = OffsetDateTime::now_utc();
        let day_or_time = |name: &str, v: Option<String>| {
            v.map(|s| {
                crate::commands::usage::when(name, &s, now)
                    .map_err(|e| Failure::new("invalid_arguments", e.to_string()))
            })
            .transpose()
        };
        let query = UsageQuery {
            report: a.period.map(|p| match p {
                Period::Daily => UsageReport::Daily,
                Period::Weekly => UsageReport::Weekly,
                Period::Monthly => UsageReport::Monthly,
                Period::Session => UsageReport::Session,
                Period::Blocks => UsageReport::Blocks,
            }),
            by: a.by.map(|b| match b {
                Split::Model => UsageBy::Model,
                Split::Agent => UsageBy::Agent,
                Split::Machine => UsageBy::Machine,
                Split::Project => UsageBy::Project,
                Split::Person => UsageBy::Person,
            }),
            agent: a.agent,
            since: day_or_time("since", a.since)?,
            until: day_or_time("until", a.until)?,
            timezone: a.timezone,
            family: None,
        };
        let res: UsageResponse = self
            .central
            .json(self.central.get("/api/usage").query(&query))
            .await?;
        let table = crate::commands::usage::render(&res, &query, Style { color: false });
        Ok(plain::bounded(&table, max))
    }

    async fn status_text(&self) -> String {
        let (paths, settings) = (self.paths.clone(), self.settings.clone());
        let local = tokio::task::spawn_blocking(move || {
            crate::status::report(&paths, &settings).to_string()
        })
        .await
        .unwrap_or_else(|_| "local status unavailable\n".to_owned());
        let central = match self
            .central
            .json::<StatusResponse>(self.central.get("/api/status"))
            .await
            .map_err(Failure::from)
        {
            Ok(s) => format!(
                "central {}: {} as {} on machine {}; {} runs, {} chunks, {} waiting to be indexed\n",
                self.central.url(),
                s.version,
                s.user,
                s.machine,
                s.counts.runs,
                s.counts.chunks,
                s.counts.pending_index_jobs
            ),
            Err(f) => format!("central: {} ({})\n", f.message, f.code),
        };
        plain::bounded(&format!("{local}{central}"), DEFAULT_MAX_TOKENS)
    }
}

/// A caller's budget, `MIN_TOKENS` to `MAX_TOKENS`.
fn budget(asked: Option<u32>) -> std::result::Result<u32, Failure> {
    let max = asked.unwrap_or(DEFAULT_MAX_TOKENS);
    if (MIN_TOKENS..=MAX_TOKENS).contains(&max) {
        Ok(max)
    } else {
        Err(Failure::new(
            "invalid_budget",
            format!("max_tokens must be {MIN_TOKENS} to {MAX_TOKENS}, not {max}"),
        ))
    }
}

/// A caller's argument as an error quotes it: on one line, shortened.
fn quoted(arg: &str) -> String {
    format!("{:?}", one_line(arg, 80))
}

/// `c` as the citation it should be.
fn citation(c: &str) -> std::result::Result<Citation, Failure> {
    Citation::parse(c).ok_or_else(|| {
        Failure::new(
            "invalid_citation",
            format!(
                "{} is not a citation like kith://<conversation>/<run>#L12-L20",
                quoted(c)
            ),
        )
    })
}

/// "12-40" or "12" as an inclusive 1-based range.
fn range(name: &str, s: &str) -> std::result::Result<(u64, u64), Failure> {
    let (a, b) = s.split_once('-').unwrap_or((s, s));
    match (a.trim().parse::<u64>(), b.trim().parse::<u64>()) {
        (Ok(a), Ok(b)) if a >= 1 && a <= b => Ok((a, b)),
        _ => Err(Failure::new(
            "invalid_arguments",
            format!("{name} {}: use a range like 12-40", quoted(s)),
        )),
    }
}

fn when(
    name: &str,
    v: Option<String>,
    now: OffsetDateTime,
) -> std::result::Result<Option<String>, Failure> {
    v.map(|s| {
        parse_since(&s, now).ok_or_else(|| {
            Failure::new(
                "invalid_arguments",
                format!("{name} {}: {}", quoted(&s), WHEN_HINT),
            )
        })
    })
    .transpose()
}

/// A project folder as central compares it: absolute.
/// `project`: a folder's name (no `/`) as given, else its absolute path.
fn project(p: &str) -> std::result::Result<String, Failure> {
    if !p.contains('/') && p != "." && p != ".." {
        return Ok(p.to_owned());
    }
    std::path::absolute(Path::new(p))
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| Failure::new("invalid_arguments", format!("project {}: {e}", quoted(p))))
}

/// Whether `turns` (in the conversation's order) hold turns of `run` and
/// have gone past them: a run's turns are contiguous.
fn past_run(turns: &[ConversationTurn], run: &str) -> bool {
    turns.last().is_some_and(|t| t.run_id != run) && turns.iter().any(|t| t.run_id == run)
}

#[cfg(test)]
mod tests {
    use time::macros::datetime;

    use super::*;

    const NOW: OffsetDateTime = datetime!(2026-05-11 12:00:00 UTC);

    /// The text of a tool's answer, and whether it is an error.
    fn said(result: ToolResult) -> (String, bool) {
        let result = result.unwrap_or_else(|e| panic!("a protocol error: {e:?}"));
        let text = result
            .content
            .iter()
            .filter_map(|c| c.as_text())
            .map(|t| t.text.as_str())
            .collect();
        (text, result.is_error == Some(true))
    }

    /// Regression: an error quoted the caller's argument whole, so a 5 MB
    /// argument came back as a 5 MB error, past any token budget.
    #[test]
    fn an_error_quotes_a_long_argument_shortened_within_the_budget() {
        let huge = "9".repeat(5_000_000);
        let failures = [
            citation(&huge).map(|_| ()),
            range("lines", &huge).map(|_| ()),
            when("since", Some(format!("{huge}d")), NOW).map(|_| ()),
        ];
        for failure in failures {
            let Err(f) = failure else {
                panic!("{huge:.20}… was taken");
            };
            assert!(f.code.starts_with("invalid_"), "{f:?}");
            assert!(f.message.len() < 300, "{}", f.message.len());
            assert!(
                f.message.contains(&format!("\"{}…\"", "9".repeat(79))),
                "the argument's start, shortened: {}",
                f.message
            );
        }
        let short = range("turns", "x").map(|_| ()).map_err(|f| f.message);
        assert_eq!(short, Err("turns \"x\": use a range like 12-40".into()));

        // An error is cut to the caller's budget like every other answer.
        let long = || Err(Failure::new("central_error", "why\n".repeat(1_000_000)));
        for (asked, max) in [
            (Some(100), 100),
            (None, DEFAULT_MAX_TOKENS),
            (Some(0), DEFAULT_MAX_TOKENS),
        ] {
            let (text, is_error) = said(answer(long(), asked));
            assert!(is_error, "{text:.80}");
            assert!(
                tokens::approx(&text) <= max,
                "{asked:?}: {}",
                tokens::approx(&text)
            );
            assert!(text.starts_with("why\nwhy\n") && text.ends_with("a larger max_tokens]"));
        }
        let (text, is_error) = said(answer(
            Err(Failure::new("not_found", "no such run")),
            Some(100),
        ));
        assert_eq!((text.as_str(), is_error), ("no such run (not_found)", true));
    }

    /// Regression: `max_tokens: 1` was taken, and the note saying the answer
    /// was cut (15 tokens) was past it. The smallest budget holds the note.
    #[test]
    fn the_smallest_budget_holds_the_cut_note() {
        assert_eq!(
            budget(Some(MIN_TOKENS - 1)).map_err(|f| f.code),
            Err("invalid_budget".to_owned())
        );
        let text = "a line of an answer\n".repeat(1000);
        let cut = plain::bounded(&text, MIN_TOKENS);
        assert!(tokens::approx(&cut) <= MIN_TOKENS, "{cut}");
        assert!(cut.ends_with("a larger max_tokens]"), "{cut}");
    }

    /// Regression: `since: "5000000d"` panicked the request's task (a date
    /// before the year -9999), so the agent never had an answer.
    #[test]
    fn a_time_past_the_calendar_is_an_invalid_argument() {
        for huge in ["5000000d", "999999999999999d", "1000000d"] {
            let got = when("since", Some(huge.into()), NOW);
            let Err(f) = got else {
                panic!("{huge}: {got:?}");
            };
            assert_eq!(f.code, "invalid_arguments");
            assert_eq!(f.message, format!("since \"{huge}\": {}", WHEN_HINT));
        }
        let week = when("until", Some("7d".into()), NOW).map_err(|f| f.message);
        assert_eq!(week, Ok(Some("2026-05-04T12:00:00.000Z".into())));
    }

    /// `runtime` offers every agent kith knows by the name central takes
    /// (`AgentRuntime` is the one list of agents), and its words name each.
    #[test]
    fn search_offers_every_runtime() -> anyhow::Result<()> {
        let schema = rmcp::handler::server::common::schema_for_type::<SearchArgs>();
        let schema = serde_json::Value::Object((*schema).clone());
        let names = AgentRuntime::ALL.map(AgentRuntime::as_str);
        assert_eq!(
            schema["$defs"]["Runtime"]["enum"],
            serde_json::json!(names),
            "{schema}"
        );
        let said = schema["properties"]["runtime"]["description"]
            .as_str()
            .unwrap_or_default();
        for name in names {
            assert!(said.contains(name), "{name} is not in {said:?}");
        }
        let args: SearchArgs =
            serde_json::from_value(serde_json::json!({"query": "q", "runtime": "opencode"}))?;
        assert_eq!(args.runtime, Some(AgentRuntime::OpenCode));
        Ok(())
    }

    #[test]
    fn a_cited_run_is_read_until_the_turns_go_past_it() {
        let turns: Vec<ConversationTurn> = ["r1", "r2", "r2", "r3"]
            .iter()
            .map(|run| ConversationTurn {
                run_id: (*run).into(),
                line_start: 1,
                line_end: 1,
                role: "user".into(),
                text: String::new(),
                timestamp: None,
                tool: None,
                subagent: None,
                machine: None,
            })
            .collect();
        // Not yet at r2, within it, past it.
        assert!(!past_run(&turns[..1], "r2"));
        assert!(!past_run(&turns[..3], "r2"));
        assert!(past_run(&turns, "r2"));
        // A run not among the turns is never passed: read on to the end.
        assert!(!past_run(&turns, "r9"));
    }
}
