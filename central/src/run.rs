//! A run: one captured delta of one transcript, as central knows it. The
//! API shows it as `kith_proto::RunMeta` ([`Run::to_wire`], with what only
//! a reader's request knows: its readers, its index state and links), and
//! the blob store keeps it as a versioned record (`store::record`); neither
//! is this type, so an API field can be renamed without touching the
//! archive, and the archive's format changes only with its version.

use std::collections::BTreeMap;

use kith_proto::{AgentRuntime, ForkOrigin, RunLinks, RunMeta, SubagentSpan};
use kith_shared::transcript::Format;

/// A run's facts: where its bytes came from and what the parser read in
/// them (at ingest, once).
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub id: String,
    pub user_id: String,
    pub machine_id: String,
    /// The machine's name when the run was captured.
    pub machine: String,
    pub agent_runtime: AgentRuntime,
    pub agent_version: Option<String>,
    pub model: Option<String>,
    /// The agent's own session id.
    pub conversation_id: Option<String>,
    pub parent_run_id: Option<String>,
    pub root_run_id: String,
    pub cwd: Option<String>,
    pub git_branch: Option<String>,
    /// The delta's first user message, at most 500 characters.
    pub intent: Option<String>,
    pub tags: Vec<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub turn_count: u64,
    pub tool_call_count: u64,
    pub files_touched: Vec<String>,
    pub tools_used: Vec<String>,
    pub commands: Vec<String>,
    /// The first real user prompt, cut at a word boundary.
    pub title: Option<String>,
    /// Central's conversation (`conversation::ConversationId`).
    pub conversation: Option<String>,
    /// Subagents whose turns this delta holds in its own transcript.
    pub subagent_spans: Vec<SubagentSpan>,
    pub jsonl_bytes: u64,
    pub jsonl_sha256: String,
    pub chain_sha256: String,
    pub source_identity: String,
    pub from_offset: u64,
    pub to_offset: u64,
    /// Secrets the agent masked, by kind.
    pub redactions: BTreeMap<String, u64>,
    /// The conversation the run's chain was forked from (its first run
    /// says so; `kith resume` of a conversation shared with its owner).
    pub forked_from: Option<ForkOrigin>,
}

/// What a reader's request adds to a run to show it: who may read it now,
/// and how far indexing got.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shown {
    pub readable_by: Vec<String>,
    pub indexed_at: Option<String>,
    pub embedded_at: Option<String>,
}

impl Run {
    /// How the run's bytes read.
    pub fn format(&self) -> Format {
        format_of(self.agent_runtime)
    }

    /// The run as the API shows it.
    pub fn to_wire(&self, shown: Shown) -> RunMeta {
        let r = self.clone();
        RunMeta {
            _links: RunLinks::for_run(&r.id),
            id: r.id,
            user_id: r.user_id,
            machine_id: r.machine_id,
            machine: r.machine,
            agent_runtime: r.agent_runtime,
            agent_version: r.agent_version,
            model: r.model,
            conversation_id: r.conversation_id,
            parent_run_id: r.parent_run_id,
            root_run_id: r.root_run_id,
            cwd: r.cwd,
            git_branch: r.git_branch,
            intent: r.intent,
            tags: r.tags,
            readable_by: shown.readable_by,
            started_at: r.started_at,
            ended_at: r.ended_at,
            turn_count: r.turn_count,
            tool_call_count: r.tool_call_count,
            files_touched: r.files_touched,
            tools_used: r.tools_used,
            commands: r.commands,
            title: r.title,
            conversation: r.conversation,
            subagent_spans: r.subagent_spans,
            jsonl_bytes: r.jsonl_bytes,
            jsonl_sha256: r.jsonl_sha256,
            chain_sha256: r.chain_sha256,
            source_identity: r.source_identity,
            from_offset: r.from_offset,
            to_offset: r.to_offset,
            redactions: r.redactions,
            indexed_at: shown.indexed_at,
            embedded_at: shown.embedded_at,
        }
    }
}

/// How the bytes of an agent's runs read.
pub(crate) fn format_of(runtime: AgentRuntime) -> Format {
    Format::of_runtime(runtime.as_str())
}

#[cfg(test)]
impl Run {
    /// A Claude Code run of `owner`, one byte long and its own root: unit
    /// tests set what else they need.
    pub fn for_tests(id: &str, owner: &str) -> Self {
        Self {
            id: id.to_owned(),
            user_id: owner.to_owned(),
            machine_id: "m1".to_owned(),
            machine: "box".to_owned(),
            agent_runtime: AgentRuntime::ClaudeCode,
            agent_version: None,
            model: None,
            conversation_id: None,
            parent_run_id: None,
            root_run_id: id.to_owned(),
            cwd: None,
            git_branch: None,
            intent: None,
            tags: Vec::new(),
            started_at: "2026-05-11T08:00:00.000Z".to_owned(),
            ended_at: None,
            turn_count: 1,
            tool_call_count: 0,
            files_touched: Vec::new(),
            tools_used: Vec::new(),
            commands: Vec::new(),
            title: None,
            conversation: None,
            subagent_spans: Vec::new(),
            jsonl_bytes: 1,
            jsonl_sha256: "x".to_owned(),
            chain_sha256: "x".to_owned(),
            source_identity: id.to_owned(),
            from_offset: 0,
            to_offset: 1,
            redactions: BTreeMap::new(),
            forked_from: None,
        }
    }
}
