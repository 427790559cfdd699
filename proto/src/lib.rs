//! Wire types of kith's HTTP API: every request and response body, the error
//! body, and the OpenAPI document assembled from them.
//!
//! Only this crate derives `Serialize`/`Deserialize` for the wire; the agent and
//! central convert to and from their domain types at the edge.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// `{"error": {"code": "...", "message": "..."}}`, the body of every error.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ErrorDetail {
    /// Stable, machine-readable, snake_case (for example `run_not_found`).
    pub code: String,
    /// Human-readable reason; never contains internal error text for 5xx.
    pub message: String,
}

/// Which agent wrote a transcript.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AgentRuntime {
    ClaudeCode,
    Codex,
    Pi,
    /// Gemini CLI's JSONL sessions (v0.39 and later).
    Gemini,
    /// GitHub Copilot CLI's `events.jsonl`.
    Copilot,
    /// Cursor agent's `agent-transcripts/*.jsonl`.
    Cursor,
    /// Aider's `.aider.chat.history.md` (markdown lines, not JSON).
    Aider,
    /// OpenCode (sst), through the journal kith keeps of its SQLite rows or
    /// JSON storage files.
    #[serde(rename = "opencode")]
    OpenCode,
    Other,
}

impl AgentRuntime {
    pub const ALL: [AgentRuntime; 9] = [
        Self::ClaudeCode,
        Self::Codex,
        Self::Pi,
        Self::Gemini,
        Self::Copilot,
        Self::Cursor,
        Self::Aider,
        Self::OpenCode,
        Self::Other,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
            Self::Pi => "pi",
            Self::Gemini => "gemini",
            Self::Copilot => "copilot",
            Self::Cursor => "cursor",
            Self::Aider => "aider",
            Self::OpenCode => "opencode",
            Self::Other => "other",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

/// `POST /api/runs`: one delta of one transcript.
///
/// Unknown fields are rejected, so a body cannot smuggle in `readable_by`,
/// `user_id` or any other field central derives itself.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct IngestRequest {
    /// The delta's exact bytes: complete lines, each ending in `\n`; JSON
    /// lines, or for `aider` the markdown as written.
    pub jsonl: String,
    pub agent_runtime: AgentRuntime,
    /// Opaque identity of the source chain on the device (path + file identity + epoch).
    pub source_identity: String,
    /// Byte offset of `jsonl` in the source file.
    pub from_offset: u64,
    /// `from_offset + jsonl.len()`.
    pub to_offset: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_run_id: Option<String>,
    /// The chain hash central returned for the delta that ended at `from_offset`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prev_sha256: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git_branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<String>,
    /// Secrets redacted on the device, counted by kind.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub redactions: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum IngestStatus {
    /// Stored now; indexing is queued.
    Accepted,
    /// These bytes were stored before; nothing changed.
    AlreadyIndexed,
    /// These bytes belong to a conversation its owner forgot: central
    /// dropped them and stores nothing (the agent moves on, never resends).
    Forgotten,
}

/// Links to a run's resources.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RunLinks {
    #[serde(rename = "self")]
    pub self_: String,
    pub jsonl: String,
    pub descendants: String,
}

impl RunLinks {
    pub fn for_run(run_id: &str) -> Self {
        Self {
            self_: format!("/api/runs/{run_id}"),
            jsonl: format!("/api/runs/{run_id}/jsonl"),
            descendants: format!("/api/runs/{run_id}/descendants"),
        }
    }
}

/// 202 answer to `POST /api/runs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct IngestResponse {
    pub run_id: String,
    pub status: IngestStatus,
    pub jsonl_bytes: u64,
    pub jsonl_sha256: String,
    /// Hash chain over the source's accepted deltas up to `to_offset`; the next
    /// delta of the same source sends it as `prev_sha256`.
    pub chain_sha256: String,
    pub _links: RunLinks,
}

/// Run metadata, as `GET /api/runs/{id}` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RunMeta {
    pub id: String,
    pub user_id: String,
    pub machine_id: String,
    /// The machine's name, for badges.
    pub machine: String,
    pub agent_runtime: AgentRuntime,
    pub agent_version: Option<String>,
    pub model: Option<String>,
    pub conversation_id: Option<String>,
    pub parent_run_id: Option<String>,
    pub root_run_id: String,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    /// First user message of the run, at most 500 characters.
    pub intent: Option<String>,
    pub tags: Vec<String>,
    pub readable_by: Vec<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub turn_count: u64,
    pub tool_call_count: u64,
    pub files_touched: Vec<String>,
    pub tools_used: Vec<String>,
    /// Shell commands the run's tool calls ran.
    #[serde(default)]
    pub commands: Vec<String>,
    /// The run's first real user prompt, cut at a word boundary: what a
    /// person would call it.
    #[serde(default)]
    pub title: Option<String>,
    /// The conversation this delta belongs to (`GET /api/conversations/{id}`).
    #[serde(default)]
    pub conversation: Option<String>,
    /// Subagents whose turns this delta holds inside its own transcript
    /// (Copilot CLI), each with its lines here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subagent_spans: Vec<SubagentSpan>,
    pub jsonl_bytes: u64,
    pub jsonl_sha256: String,
    pub chain_sha256: String,
    pub source_identity: String,
    pub from_offset: u64,
    pub to_offset: u64,
    pub redactions: BTreeMap<String, u64>,
    pub indexed_at: Option<String>,
    pub embedded_at: Option<String>,
    pub _links: RunLinks,
}

/// A subagent's part of one delta, when its turns are written in its
/// parent's transcript (Copilot CLI's `task` agents: events marked with
/// `agentId`) rather than a transcript of its own. The transcript parser
/// gives them and run metadata keeps them as given; a subagent that runs
/// across two deltas has a span in each, with the same `id`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SubagentSpan {
    /// The agent's id in the transcript (the tool call that started it).
    pub id: String,
    /// The kind of agent (`explore`), as the start event names it.
    pub name: Option<String>,
    /// What it was asked to do: the starting call's `description`.
    pub description: Option<String>,
    /// 1-based, inclusive lines of the run's jsonl holding its events.
    pub line_start: u64,
    pub line_end: u64,
    /// Canonical times of its first and last event.
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
    /// Its turns among the transcript's turns.
    pub turn_count: u64,
}

/// A subagent inside a conversation's own transcript (Copilot CLI), folded
/// over the deltas the viewer may read: a child node of the conversation
/// in `kith tree`, its turns marked in the conversation's turns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct InlineSubagent {
    /// What `ConversationTurn::subagent` and `SearchHit::subagent` name.
    pub id: String,
    pub name: Option<String>,
    pub description: Option<String>,
    pub turn_count: u64,
    pub started_at: Option<String>,
    pub ended_at: Option<String>,
}

/// One run in a tree, with its depth below the tree's root (root = 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TreeRun {
    pub depth: u32,
    pub run: RunMeta,
}

/// `GET /api/runs/{id}/descendants`: the run and its subtree, ordered by
/// `started_at` (ties by id).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct DescendantsResponse {
    pub runs: Vec<TreeRun>,
}

/// One tree of the forest: its runs in depth-first order, children by `started_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Tree {
    pub root_run_id: String,
    /// Most recent `started_at` in the tree.
    pub last_activity_at: String,
    pub runs: Vec<TreeRun>,
}

/// `GET /api/runs/forest`: recent trees, most recently active first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ForestResponse {
    pub trees: Vec<Tree>,
}

/// Query string of `GET /api/runs/forest`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ForestQuery {
    /// RFC 3339; trees with activity at or after this time.
    pub since: Option<String>,
    pub runtime: Option<AgentRuntime>,
    /// Machine name.
    pub machine: Option<String>,
    /// One tree by its root run id.
    pub root: Option<String>,
    /// Number of trees, 1..=500, default 50.
    pub limit: Option<u32>,
}

/// One conversation: an agent session as people read it, made of the deltas
/// kith captured from its transcript (`delta_count`), with the subagent
/// conversations it spawned as children.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Conversation {
    /// 32 hex digits; any unique prefix (or any of its run ids) names it.
    pub id: String,
    /// The first real user prompt, cut at a word boundary.
    pub title: Option<String>,
    /// Handle of the person whose agent wrote it.
    pub owner: String,
    /// The machine it began on.
    pub machine: String,
    /// Every machine its turns were written on, in the order it moved
    /// between them (`kith resume`): more than one when it was continued
    /// on another machine.
    #[serde(default)]
    pub machines: Vec<String>,
    /// The conversation it was forked from: one shared with its owner,
    /// continued as a session of their own (`kith resume`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<ForkOrigin>,
    pub agent_runtime: AgentRuntime,
    /// The agent's own session id: what `claude --resume`, `codex resume` or
    /// pi take to continue it.
    pub session_id: Option<String>,
    /// The project: the session's working directory.
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    pub model: Option<String>,
    pub started_at: String,
    pub last_activity_at: String,
    pub turn_count: u64,
    pub delta_count: u64,
    /// The conversation that spawned this one (a subagent's parent).
    pub parent_id: Option<String>,
    /// 0 for a conversation of its own, 1 for its subagents, and so on.
    pub depth: u32,
    pub files_touched: Vec<String>,
    pub tools_used: Vec<String>,
    pub commands: Vec<String>,
    pub tags: Vec<String>,
    /// The deltas the viewer may read, in byte order.
    pub run_ids: Vec<String>,
    /// Subagents whose turns are in this conversation's own transcript
    /// (Copilot CLI), in order of start; subagents with transcripts of
    /// their own are conversations of their own (`parent_id`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inline_subagents: Vec<InlineSubagent>,
}

impl Conversation {
    /// The machines it was written on, as a person reads them: `laptop`, or
    /// `laptop → desk` for one continued on another machine.
    pub fn machines_shown(&self) -> String {
        if self.machines.len() > 1 {
            self.machines.join(" → ")
        } else {
            self.machine.clone()
        }
    }
}

/// `GET /api/conversations`: recent conversations, each followed by its
/// subagent conversations (depth-first, `depth` > 0).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConversationsResponse {
    pub conversations: Vec<Conversation>,
    /// Pass as `cursor` for the next page; absent on the last page.
    pub next_cursor: Option<String>,
}

/// `GET /api/conversations/{id}`: the conversation and its subagent
/// conversations (depth-first, depth relative to it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConversationResponse {
    pub conversation: Conversation,
    pub subagents: Vec<Conversation>,
}

/// Query string of `GET /api/conversations`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct ConversationsQuery {
    /// A file the conversation's tools touched: a whole path, or a suffix
    /// of whole components (`src/main.rs`).
    pub file: Option<String>,
    /// A tool or skill it used (exact name).
    pub tool: Option<String>,
    /// Part of a shell command it ran.
    pub command: Option<String>,
    /// Its working directory or a folder above it.
    pub project: Option<String>,
    pub branch: Option<String>,
    /// The owner's handle.
    pub owner: Option<String>,
    pub runtime: Option<AgentRuntime>,
    /// Machine name.
    pub machine: Option<String>,
    /// RFC 3339: activity at or after.
    pub since: Option<String>,
    /// RFC 3339: activity before.
    pub until: Option<String>,
    /// 1..=200, default 50.
    pub limit: Option<u32>,
    /// `next_cursor` of the previous page.
    pub cursor: Option<String>,
}

/// A tool call inside a turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ToolCall {
    pub name: String,
    /// The call's input, summarised on one line.
    pub input: String,
    /// What the tool answered (empty when the result was not captured).
    pub output: String,
    /// For a call that edits or writes files, the change as a unified diff:
    /// `--- a/PATH` and `+++ b/PATH`, then lines marked `-`, `+` or ` `.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
}

/// One turn of a conversation, located in the delta it came from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ConversationTurn {
    pub run_id: String,
    /// 1-based, inclusive lines of the run's jsonl.
    pub line_start: u64,
    pub line_end: u64,
    /// `user`, `assistant`, `tool`, `summary`, or `gap`: bytes of the
    /// transcript missing here (not captured, or not readable by you).
    pub role: String,
    pub text: String,
    pub timestamp: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<ToolCall>,
    /// The inline subagent whose turn this is (`InlineSubagent::id`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<String>,
    /// The machine the turn was written on (a conversation resumed on
    /// another machine spans two); absent on a gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<String>,
}

/// `GET /api/conversations/{id}/turns`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct TurnsResponse {
    pub conversation_id: String,
    /// Turns in byte order across every delta, from `offset`.
    pub turns: Vec<ConversationTurn>,
    /// Turns in the whole conversation.
    pub total: u64,
    /// Pass as `offset` for the next page; absent on the last page.
    pub next_offset: Option<u64>,
}

/// Query string of `GET /api/conversations/{id}/turns`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct TurnsQuery {
    pub offset: Option<u64>,
    /// 1..=1000, default 200.
    pub limit: Option<u32>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum SearchMode {
    #[default]
    Hybrid,
    Keyword,
    Semantic,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchFilters {
    pub runtime: Option<AgentRuntime>,
    /// Machine name.
    pub machine: Option<String>,
    /// A conversation id (`c…`, as hits carry it) or the agent's session id.
    pub conversation_id: Option<String>,
    pub root_run_id: Option<String>,
    /// Every listed tag must be on the run.
    #[serde(default)]
    pub tags: Vec<String>,
    pub cwd_prefix: Option<String>,
    /// RFC 3339, inclusive.
    pub since: Option<String>,
    /// RFC 3339, exclusive.
    pub until: Option<String>,
    /// Conversations whose tools touched this file (a whole path, or a
    /// suffix of whole components).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// Conversations that used this tool or skill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Conversations that ran a shell command containing this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// The owner's handle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// Also the text of superseded chains: a transcript captured again
    /// after a rewrite or truncation leaves its older capture out of
    /// search unless asked (it stays readable through show).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub include_superseded: bool,
}

/// How search hits are returned.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum GroupBy {
    /// `limit` conversations, each with its best hits (what kith's own
    /// clients ask for).
    Conversation,
    /// `limit` chunks, as ranked (the default, as scripts written against
    /// the chunk list expect).
    #[default]
    None,
}

/// `POST /api/search`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchRequest {
    pub query: String,
    #[serde(default)]
    pub mode: SearchMode,
    #[serde(default)]
    pub filters: SearchFilters,
    /// 1..=100, default 10; larger values are clamped to 100.
    pub limit: Option<u32>,
    #[serde(default)]
    pub offset: u32,
    /// Recency decay: a hit's score halves for every this many days since
    /// its run started. None by default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recency_half_life_days: Option<f64>,
    /// 0 to 1: how much the hits should differ from one another (maximal
    /// marginal relevance over their words). 0, the default, ranks by
    /// relevance alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diversity: Option<f32>,
    /// Hits as ranked chunks (the default) or grouped by conversation.
    #[serde(default)]
    pub group: GroupBy,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchHit {
    pub run_id: String,
    pub chunk_id: String,
    pub score: f32,
    /// `user`, `assistant`, `tool` or `summary`.
    pub role: String,
    pub text: String,
    /// Part of `text` around the matches, with matches wrapped in `«` and `»`.
    pub snippet: String,
    /// 1-based, inclusive line range in the run's jsonl.
    pub line_start: u64,
    pub line_end: u64,
    pub started_at: String,
    pub intent: Option<String>,
    pub machine: String,
    pub agent_runtime: AgentRuntime,
    /// The conversation of the hit's run. In a group, a subagent's hit keeps
    /// its own conversation while it counts for the group of the
    /// conversation that spawned it.
    #[serde(default)]
    pub conversation_id: Option<String>,
    /// Handle of the run's owner.
    #[serde(default)]
    pub owner: String,
    /// The inline subagent whose span of the run holds the hit's lines (a
    /// chunk that also holds its parent's turns names none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subagent: Option<SubagentSpan>,
    /// Below the relevance floor: the hit holds few of the query's words
    /// and its meaning is far from the query's (`coverage`, `similarity`).
    /// A hit ranks among the best there are, not among relevant ones.
    #[serde(default)]
    pub weak: bool,
    /// Share of the query's content words (stemmed) the hit's text holds,
    /// 0 to 1.
    #[serde(default)]
    pub coverage: f32,
    /// Cosine similarity of the hit's text to the query, when the search
    /// had a query vector and the hit a vector of the same model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub similarity: Option<f32>,
    pub _links: RunLinks,
}

/// The hits of one conversation and its subagent conversations, best first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchGroup {
    pub conversation_id: String,
    pub title: Option<String>,
    pub owner: String,
    pub machine: String,
    pub agent_runtime: AgentRuntime,
    /// The model its agent ran, as the conversation's first run names it.
    #[serde(default)]
    pub model: Option<String>,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    /// The agent's session id, to resume it.
    pub session_id: Option<String>,
    pub started_at: String,
    pub last_activity_at: String,
    /// Every tag on any of its runs, sorted.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The best score of its hits.
    pub score: f32,
    /// Every hit of the group is weak (`SearchHit::weak`).
    #[serde(default)]
    pub weak: bool,
    pub hits: Vec<SearchHit>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchTiming {
    pub embed_ms: f64,
    pub queued_ms: f64,
    pub search_ms: f64,
    pub total_ms: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SearchResponse {
    /// Every hit returned, in rank order (grouped: the groups' hits).
    pub hits: Vec<SearchHit>,
    /// With `group: conversation`, the hits by conversation, best first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<SearchGroup>,
    pub timing: SearchTiming,
    /// Search backend name, e.g. `embedded`.
    pub backend: String,
    /// Embedder name, or `none` when semantic search is unavailable.
    pub embedder: String,
    /// Set when the requested mode could not be fully served (for example the
    /// embedder is down and hybrid fell back to keyword).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// No hit clears the relevance floor: nothing the viewer may read is
    /// about the query, and every hit returned is `weak`.
    #[serde(default)]
    pub nothing_relevant: bool,
}

/// `POST /api/context`: the passages most useful for a task, fitted to a
/// token budget.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ContextRequest {
    /// The task, in the agent's or person's own words.
    pub task: String,
    /// 1..=32000, default 4000. Tokens are counted as characters / 4,
    /// rounded up (`kith_shared::tokens`).
    pub budget_tokens: Option<u32>,
    /// The search filters (`cwd_prefix` for a project).
    #[serde(default)]
    pub filters: SearchFilters,
}

/// One passage of a context pack.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContextPassage {
    /// `kith://<conversation>/<run>#L<start>-L<end>`.
    pub citation: String,
    pub conversation_id: String,
    pub run_id: String,
    pub line_start: u64,
    pub line_end: u64,
    pub title: Option<String>,
    /// Handle of the run's owner.
    pub owner: String,
    pub machine: String,
    pub started_at: String,
    pub role: String,
    /// The passage, cut at a word to fit when it was the last to go in.
    pub text: String,
    /// What this passage costs in `pack` (its heading line and text).
    pub tokens: u32,
}

/// A context pack: `pack` is the passages rendered as one text block,
/// `passages` the same as data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ContextResponse {
    pub pack: String,
    pub passages: Vec<ContextPassage>,
    pub budget_tokens: u32,
    /// Tokens `pack` holds; at most `budget_tokens`.
    pub used_tokens: u32,
    /// As in search: set when semantic search was unavailable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub degraded: Option<String>,
    /// Nothing the viewer may read clears the relevance floor: the pack is
    /// empty rather than filled with what merely ranks first.
    #[serde(default)]
    pub nothing_relevant: bool,
}

/// Work waiting on each lane of the pipeline.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LaneDepths {
    /// Queries waiting for the model.
    pub query: u64,
    /// Runs waiting to be indexed (every accepted delta), and turns written
    /// in the last minutes waiting for vectors.
    pub ingest_realtime: u64,
    /// Runs a reindex queued, and history (a backfill's old sessions) and
    /// re-embeds after a model change waiting for vectors.
    pub ingest_bulk: u64,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Counts {
    pub users: u64,
    pub machines: u64,
    pub runs: u64,
    pub chunks: u64,
    /// Chunks that have their vector from the current embedding model (0
    /// without an embedder): `kith status` shows `chunks_embedded/chunks`.
    #[serde(default)]
    pub chunks_embedded: u64,
    /// Runs stored but not yet indexed.
    pub pending_index_jobs: u64,
    /// Runs too long to index whole: the index holds their first chunks,
    /// their blobs all of them (`kith show`).
    #[serde(default)]
    pub runs_capped: u64,
    /// Chunks those runs' cap left out of search.
    #[serde(default)]
    pub chunks_cut: u64,
}

/// The family's backups, in `GET /api/status` (admins only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct BackupStatus {
    /// The backup folder `serve` backs up to (`[backup] dest`); absent when
    /// none is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dest: Option<String>,
    /// How often it does, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_secs: Option<u64>,
    /// The last good backup's point in time (RFC 3339), its age in seconds
    /// and its folder (the configured one's; without one, the newest
    /// backup taken by hand).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good_age_secs: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_good_dest: Option<String>,
    /// The folder's last failure, since that backup.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    /// What is wrong, if anything: no backup configured, none yet, or the
    /// last good one older than twice `every_secs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warning: Option<String>,
}

/// `GET /api/status`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StatusResponse {
    pub version: String,
    pub queue: LaneDepths,
    /// The caller's own: its user, its machines, its runs and their chunks.
    pub counts: Counts,
    /// The whole family's, for admins only (absent for everyone else).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub family: Option<Counts>,
    /// When the most recent run was indexed (RFC 3339).
    pub last_indexed_at: Option<String>,
    /// Since when indexing fails (a full disk, a search server down), while
    /// it does: what central accepted meanwhile waits in `queue`, and is
    /// indexed once it works again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexing_failing_since: Option<String>,
    /// Why, for admins only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub indexing_error: Option<String>,
    /// How the family's backups stand, for admins only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupStatus>,
    pub search_backend: String,
    pub embedder: String,
    /// The calling machine as central knows it.
    pub machine: String,
    pub user: String,
}

/// `POST /api/shares`: let another family member read a run (and its
/// descendants) or every run with a tag.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ShareRequest {
    /// `conversation:<id, run id or prefix>` (the conversation and its
    /// subagents), `run:<run id>` (the run and everything under it) or
    /// `tag:<tag>`.
    pub scope: String,
    /// The grantee's handle.
    pub with: String,
    /// RFC 3339, in the future; the grant stops matching at this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// A conversation or run grant covers what was captured by the time it
    /// is given; with `follow`, later turns too.
    #[serde(default)]
    pub follow: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Share {
    pub id: String,
    /// Handle of the owner who shared.
    pub grantor: String,
    /// Handle of the reader.
    pub grantee: String,
    pub scope: String,
    pub created_at: String,
    pub expires_at: Option<String>,
    pub revoked_at: Option<String>,
    /// Covers turns captured after the grant (else: up to `created_at`).
    #[serde(default)]
    pub follow: bool,
    /// `active`, `expired` or `revoked`.
    #[serde(default)]
    pub state: String,
    /// A run grant's conversation, and the title it had when granted (the
    /// granted run's own): what the grant covers, by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
}

/// `GET /api/shares`: grants I gave and grants I received.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SharesResponse {
    pub given: Vec<Share>,
    pub received: Vec<Share>,
}

/// `DELETE /api/conversations/{id}`: what was forgotten.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ForgetResponse {
    /// The conversation named.
    pub conversation: String,
    /// Conversations gone with it: itself and the subagents under it.
    pub n_conversations: u64,
    /// Runs (captured deltas) deleted.
    pub n_runs: u64,
    /// Backup folders central could not forget it in (each named, with
    /// why): they may still hold it until it reaches them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub backups_not_cleared: Vec<String>,
}

/// One read of my run by someone else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditEntry {
    /// Handle of the reader.
    pub reader: String,
    pub run_id: String,
    /// `read` (the conversation, its turns, its bytes or its runs),
    /// `search_hit` (shown in a search or a context pack), or `forget`
    /// (then `reader` is who forgot the conversation `run_id` names).
    pub what: String,
    /// The newest of the readings this entry stands for.
    pub at: String,
    /// The run's conversation and its title (absent once forgotten).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conversation_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Requests this entry stands for: one reading of a conversation (its
    /// page, its turns, its bytes) within ten minutes is one entry.
    #[serde(default = "one")]
    pub requests: u64,
}

fn one() -> u64 {
    1
}

/// `GET /api/audit`'s query: a page of the audit, and whose readings.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    /// Only this reader's (a handle).
    pub reader: Option<String>,
    /// Only readings of this conversation (as `kith show` names one).
    pub conversation: Option<String>,
    /// The page after the one that gave this `next_cursor`.
    pub cursor: Option<String>,
    /// Audited requests a page reads, 1..=1000, default 1000.
    pub limit: Option<u32>,
}

/// `GET /api/audit`: who read my runs, newest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditResponse {
    pub entries: Vec<AuditEntry>,
    /// More, older: ask again with `cursor` set to this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// How `GET /api/usage` buckets what the agents spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageReport {
    /// A row per day (`2026-05-01`) in the report's time zone.
    #[default]
    Daily,
    /// A row per week, keyed by its Monday (`2026-04-27`).
    Weekly,
    /// A row per month (`2026-05`).
    Monthly,
    /// A row per conversation, keyed by its id, in order of last activity.
    Session,
    /// A row per 5-hour billing block, keyed by its start (`2026-05-01
    /// 09:00` in the report's zone): a block starts at the hour of its
    /// first response (whole hours of UTC), lasts 5 hours, and a response
    /// past them, or more than 5 hours after the one before, starts the
    /// next. Each member's blocks are their own.
    Blocks,
}

/// What `GET /api/usage` splits each bucket by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum UsageBy {
    /// The model as the agent named it.
    Model,
    /// The agent (`claude-code`, `codex`, ...).
    Agent,
    /// The machine's name when the transcript was captured.
    Machine,
    /// The agent's working directory.
    Project,
    /// The member whose agents spent it: every member's usage, for an
    /// admin (as `family`).
    Person,
}

/// `GET /api/usage`'s query.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    /// Default `daily`.
    pub report: Option<UsageReport>,
    /// Split each row's bucket by this; none by default.
    pub by: Option<UsageBy>,
    /// Only this agent's usage.
    pub agent: Option<AgentRuntime>,
    /// From this RFC 3339 time, or from the start of this day
    /// (`YYYY-MM-DD`) in `timezone`.
    pub since: Option<String>,
    /// Before this RFC 3339 time, or through the end of this day
    /// (`YYYY-MM-DD`) in `timezone`.
    pub until: Option<String>,
    /// `UTC` (the default), a fixed offset (`+02:00`, `-0530`), or a
    /// zone of the tz database (`Europe/Paris`), whose days follow its
    /// daylight saving rules.
    pub timezone: Option<String>,
    /// Every member's usage, each row under its member (`person`): for an
    /// admin, unless central's config keeps members' usage from admins.
    /// Of a run the admin may not read, only its figures, agent, model and
    /// time: never its conversation, project or machine.
    pub family: Option<bool>,
}

/// Tokens and dollars of a usage row, or of the whole report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageTotals {
    /// Input read at full price.
    pub input_tokens: u64,
    /// Output, reasoning included.
    pub output_tokens: u64,
    /// Input written to a cache (5-minute and 1-hour writes).
    pub cache_write_tokens: u64,
    /// Input read from a cache.
    pub cache_read_tokens: u64,
    /// The cost the agents recorded, else the tokens at the price table's
    /// list prices; the tokens of `unpriced_models` are not in it.
    pub cost_usd: f64,
    /// Models whose tokens have no price (unknown to the table, or a kind
    /// of token the table has no rate for), as the agents named them;
    /// `unknown` for tokens no model was named for. Sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unpriced_models: Vec<String>,
}

/// One row of a usage report.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageRow {
    /// The bucket: a day, a week's Monday, a month, or a conversation id
    /// (`not shared` for the conversations of others' runs in a `family`
    /// report that the caller may not read).
    pub key: String,
    /// The value of `by` (`null` without `by`, or when the usage names none).
    pub group: Option<String>,
    /// The member (handle) of a `family` report's row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub person: Option<String>,
    #[serde(flatten)]
    pub totals: UsageTotals,
}

/// `GET /api/usage`: what the caller's own agents spent (never another
/// member's, shared or not), each model response counted once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageResponse {
    /// The day (`YYYY-MM-DD`) the price table's prices were read.
    pub price_table: String,
    /// Models priced by central's config in place of the table, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub price_overrides: Vec<String>,
    /// The time zone days, weeks and months are cut in (`UTC`, `+02:00`,
    /// `Europe/Paris`).
    pub timezone: String,
    pub totals: UsageTotals,
    /// By key, then group; sessions by last activity.
    pub rows: Vec<UsageRow>,
    /// Usage records in the caller's transcripts that could not be counted
    /// (negative, fractional or absurd figures): the totals leave them out.
    pub n_refused: u64,
}

/// `POST /api/conversations/{id}/tags`: put tags on every run of one of
/// the caller's conversations, or take them off.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TagsRequest {
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
}

/// `POST /api/conversations/{id}/resume`: the calling machine wrote a copy
/// of one of the caller's conversations into its agent's store (`kith
/// resume`), at the start of the file its deltas name `source_identity`;
/// the copy ends at `at_offset`. Central records it, so the bytes the agent
/// adds after the copy continue that conversation and the copy is never
/// sent.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResumeRequest {
    pub source_identity: String,
    /// The copy's length in bytes (greater than 0).
    pub at_offset: u64,
    /// sha256 (hex) of the copy's bytes.
    pub prefix_sha256: String,
}

/// A conversation another member shared, continued by the caller as a
/// session of their own: which, and whose.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ForkOrigin {
    pub conversation_id: String,
    /// The handle of the member who wrote it.
    pub owner: String,
}

/// `POST /api/conversations/{id}/fork`: the calling machine wrote a copy
/// of a conversation the caller may read, under a new session id, into the
/// file its deltas name `source_identity`. The copy is captured as the
/// caller's own conversation, which names the one it came from.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ForkRequest {
    pub source_identity: String,
}

/// What the machine continues from after the copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ResumeResponse {
    pub conversation_id: String,
    /// The conversation's last run: the parent of the first delta after
    /// the copy.
    pub parent_run_id: String,
    /// The chain hash the first delta after the copy names as
    /// `prev_sha256`.
    pub chain_sha256: String,
}

/// `GET /api/tags`: every tag on a conversation the caller may read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TagList {
    /// By name.
    pub tags: Vec<TagCount>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TagCount {
    pub tag: String,
    /// Conversations carrying it that the caller may read.
    pub conversations: u64,
}

/// The conversation's tags after the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TagsResponse {
    pub conversation_id: String,
    /// Every tag on any of its runs, sorted.
    pub tags: Vec<String>,
    /// Runs changed (all of the conversation's).
    pub n_runs: u64,
}

/// `POST /api/web/link`: a one-time sign-in link to the web page for the
/// calling machine's member (`kith web`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SignInLink {
    /// Path and query to open on central (`/signin/link?token=…`); the
    /// token works once.
    pub path: String,
    /// RFC 3339: the link stops working at this time (minutes from now).
    pub expires_at: String,
}

/// The OpenAPI document of the whole API, generated from these types.
#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "kith-central",
        description = "kith: a family memory network for AI coding-agent transcripts"
    ),
    components(schemas(
        BackupStatus,
        ErrorBody,
        ErrorDetail,
        AgentRuntime,
        IngestRequest,
        IngestStatus,
        IngestResponse,
        RunLinks,
        RunMeta,
        SubagentSpan,
        InlineSubagent,
        TreeRun,
        DescendantsResponse,
        Tree,
        ForestResponse,
        ForestQuery,
        Conversation,
        ConversationsResponse,
        ConversationResponse,
        ConversationsQuery,
        ToolCall,
        ConversationTurn,
        TurnsResponse,
        TurnsQuery,
        GroupBy,
        SearchGroup,
        SearchMode,
        SearchFilters,
        SearchRequest,
        SearchHit,
        SearchTiming,
        SearchResponse,
        ContextRequest,
        ContextPassage,
        ContextResponse,
        LaneDepths,
        Counts,
        StatusResponse,
        ShareRequest,
        Share,
        SharesResponse,
        AuditEntry,
        AuditResponse,
        AuditQuery,
        ForgetResponse,
        TagsRequest,
        TagsResponse,
        ResumeRequest,
        ResumeResponse,
        ForkRequest,
        ForkOrigin,
        TagList,
        TagCount,
        SignInLink,
        UsageReport,
        UsageBy,
        UsageQuery,
        UsageTotals,
        UsageRow,
        UsageResponse
    ))
)]
pub struct ApiDoc;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_names_round_trip() {
        for r in AgentRuntime::ALL {
            let json = serde_json::to_string(&r).unwrap_or_default();
            assert_eq!(json, format!("\"{}\"", r.as_str()));
            assert_eq!(AgentRuntime::parse(r.as_str()), Some(r));
        }
        assert_eq!(AgentRuntime::parse("claude"), None);
    }

    #[test]
    fn ingest_request_rejects_fields_central_derives() {
        let body = r#"{"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":3,"readable_by":["u2"]}"#;
        let err = serde_json::from_str::<IngestRequest>(body)
            .err()
            .map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.contains("readable_by")));
        let ok = r#"{"jsonl":"{}\n","agent_runtime":"pi","source_identity":"s","from_offset":0,"to_offset":3}"#;
        assert!(serde_json::from_str::<IngestRequest>(ok).is_ok_and(|r| r.tags.is_empty()));
    }
}
