//! A run's record on disk (`<run_id>.metadata.json`) and in the registry's
//! `meta_json` column: the run, and the `Idempotency-Key` it was sent with
//! (a blob whose registry row was never written, after a crash between the
//! two writes, is adopted with its key, and a retry finds it).
//!
//! The record is the archive's format, owned here and versioned, apart from
//! the API's `RunMeta`:
//! - version 1 (no `version` field): the API's `RunMeta` of its time, with
//!   `idempotency_key` beside it, and fields that belong to a reader's
//!   request (`_links`, `readable_by`, `indexed_at`, `embedded_at`), which
//!   are read past;
//! - version 2: the run's facts alone, under the same names, and
//!   `"version": 2`.
//!
//! Every version is read (`reindex` reads the archive as any kith-central
//! left it); only the newest is written. A record of a newer version is
//! refused with a clear error, never half read.

use std::collections::BTreeMap;

use kith_proto::{AgentRuntime, SubagentSpan};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::run::Run;

/// The version `write` writes.
pub(crate) const VERSION: u32 = 2;

/// A run as its record holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    pub run: Run,
    pub idempotency_key: Option<String>,
}

impl RunRecord {
    /// The record's JSON, at `VERSION`.
    pub fn write(&self) -> Result<Vec<u8>> {
        Ok(serde_json::to_vec_pretty(&Fields::from(self))?)
    }

    /// The record of `run` without a key, on one line: the registry's
    /// `meta_json` (the key has a column of its own).
    pub fn catalog_json(run: &Run) -> Result<String> {
        let record = Self {
            run: run.clone(),
            idempotency_key: None,
        };
        Ok(serde_json::to_string(&Fields::from(&record))?)
    }

    /// A record of any version up to `VERSION`.
    pub fn read(bytes: &[u8]) -> Result<Self> {
        let fields: Fields = serde_json::from_slice(bytes)?;
        if fields.version > VERSION {
            return Err(Error::Internal(format!(
                "a run record of version {} (this kith-central reads up to {VERSION}): \
                 a newer kith-central wrote it",
                fields.version
            )));
        }
        Ok(fields.into())
    }
}

/// The fields of every version; a field a version lacks takes its default,
/// and a field no version here knows is read past.
#[derive(Serialize, Deserialize)]
struct Fields {
    /// Absent in version 1.
    #[serde(default = "version_one")]
    version: u32,
    id: String,
    user_id: String,
    machine_id: String,
    machine: String,
    /// An agent's slug; one this kith-central does not know reads as
    /// `other`.
    agent_runtime: String,
    agent_version: Option<String>,
    model: Option<String>,
    conversation_id: Option<String>,
    parent_run_id: Option<String>,
    root_run_id: String,
    cwd: Option<String>,
    git_branch: Option<String>,
    intent: Option<String>,
    tags: Vec<String>,
    started_at: String,
    ended_at: Option<String>,
    turn_count: u64,
    tool_call_count: u64,
    files_touched: Vec<String>,
    tools_used: Vec<String>,
    #[serde(default)]
    commands: Vec<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    conversation: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    subagent_spans: Vec<Span>,
    jsonl_bytes: u64,
    jsonl_sha256: String,
    chain_sha256: String,
    source_identity: String,
    from_offset: u64,
    to_offset: u64,
    redactions: BTreeMap<String, u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    idempotency_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    forked_from: Option<Fork>,
}

/// The conversation a chain was forked from, as records keep it.
#[derive(Serialize, Deserialize)]
struct Fork {
    conversation: String,
    owner: String,
}

fn version_one() -> u32 {
    1
}

/// An inline subagent's span, as records keep it.
#[derive(Serialize, Deserialize)]
struct Span {
    id: String,
    name: Option<String>,
    description: Option<String>,
    line_start: u64,
    line_end: u64,
    started_at: Option<String>,
    ended_at: Option<String>,
    turn_count: u64,
}

impl From<&RunRecord> for Fields {
    fn from(record: &RunRecord) -> Self {
        let r = record.run.clone();
        Self {
            version: VERSION,
            id: r.id,
            user_id: r.user_id,
            machine_id: r.machine_id,
            machine: r.machine,
            agent_runtime: r.agent_runtime.as_str().to_owned(),
            agent_version: r.agent_version,
            model: r.model,
            conversation_id: r.conversation_id,
            parent_run_id: r.parent_run_id,
            root_run_id: r.root_run_id,
            cwd: r.cwd,
            git_branch: r.git_branch,
            intent: r.intent,
            tags: r.tags,
            started_at: r.started_at,
            ended_at: r.ended_at,
            turn_count: r.turn_count,
            tool_call_count: r.tool_call_count,
            files_touched: r.files_touched,
            tools_used: r.tools_used,
            commands: r.commands,
            title: r.title,
            conversation: r.conversation,
            subagent_spans: r
                .subagent_spans
                .into_iter()
                .map(|s| Span {
                    id: s.id,
                    name: s.name,
                    description: s.description,
                    line_start: s.line_start,
                    line_end: s.line_end,
                    started_at: s.started_at,
                    ended_at: s.ended_at,
                    turn_count: s.turn_count,
                })
                .collect(),
            jsonl_bytes: r.jsonl_bytes,
            jsonl_sha256: r.jsonl_sha256,
            chain_sha256: r.chain_sha256,
            source_identity: r.source_identity,
            from_offset: r.from_offset,
            to_offset: r.to_offset,
            redactions: r.redactions,
            idempotency_key: record.idempotency_key.clone(),
            forked_from: r.forked_from.map(|f| Fork {
                conversation: f.conversation_id,
                owner: f.owner,
            }),
        }
    }
}

impl From<Fields> for RunRecord {
    fn from(f: Fields) -> Self {
        let agent_runtime = AgentRuntime::ALL
            .into_iter()
            .find(|r| r.as_str() == f.agent_runtime)
            .unwrap_or(AgentRuntime::Other);
        Self {
            run: Run {
                id: f.id,
                user_id: f.user_id,
                machine_id: f.machine_id,
                machine: f.machine,
                agent_runtime,
                agent_version: f.agent_version,
                model: f.model,
                conversation_id: f.conversation_id,
                parent_run_id: f.parent_run_id,
                root_run_id: f.root_run_id,
                cwd: f.cwd,
                git_branch: f.git_branch,
                intent: f.intent,
                tags: f.tags,
                started_at: f.started_at,
                ended_at: f.ended_at,
                turn_count: f.turn_count,
                tool_call_count: f.tool_call_count,
                files_touched: f.files_touched,
                tools_used: f.tools_used,
                commands: f.commands,
                title: f.title,
                conversation: f.conversation,
                subagent_spans: f
                    .subagent_spans
                    .into_iter()
                    .map(|s| SubagentSpan {
                        id: s.id,
                        name: s.name,
                        description: s.description,
                        line_start: s.line_start,
                        line_end: s.line_end,
                        started_at: s.started_at,
                        ended_at: s.ended_at,
                        turn_count: s.turn_count,
                    })
                    .collect(),
                jsonl_bytes: f.jsonl_bytes,
                jsonl_sha256: f.jsonl_sha256,
                chain_sha256: f.chain_sha256,
                source_identity: f.source_identity,
                from_offset: f.from_offset,
                to_offset: f.to_offset,
                redactions: f.redactions,
                forked_from: f.forked_from.map(|f| kith_proto::ForkOrigin {
                    conversation_id: f.conversation,
                    owner: f.owner,
                }),
            },
            idempotency_key: f.idempotency_key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.metadata.json` as kith-central wrote it before records had a
    /// version (the API's `RunMeta` then, with the key beside it).
    const VERSION_1: &str = r#"{
  "id": "r019e0000000070008000000000000001",
  "user_id": "u0001",
  "machine_id": "m0001",
  "machine": "laptop",
  "agent_runtime": "claude-code",
  "agent_version": "2.1.0",
  "model": "claude-opus",
  "conversation_id": "3f2a",
  "parent_run_id": null,
  "root_run_id": "r019e0000000070008000000000000001",
  "cwd": "/home/alice/src/kith",
  "git_branch": "main",
  "intent": "fix the flaky test",
  "tags": ["family"],
  "readable_by": ["u0001", "u0002"],
  "started_at": "2026-05-11T08:26:55.123Z",
  "ended_at": "2026-05-11T08:30:00.000Z",
  "turn_count": 4,
  "tool_call_count": 2,
  "files_touched": ["src/lib.rs"],
  "tools_used": ["Bash"],
  "commands": ["cargo test"],
  "title": "fix the flaky test",
  "conversation": "c0123456789abcdef0123456789abcdef",
  "subagent_spans": [{"id": "t1", "name": "explore", "description": "look", "line_start": 2,
    "line_end": 3, "started_at": null, "ended_at": null, "turn_count": 1}],
  "jsonl_bytes": 120,
  "jsonl_sha256": "aa",
  "chain_sha256": "bb",
  "source_identity": "/home/alice/.claude/projects/x/3f2a.jsonl#1:2:3",
  "from_offset": 0,
  "to_offset": 120,
  "redactions": {"aws_key": 1},
  "indexed_at": "2026-05-11T08:31:00.000Z",
  "embedded_at": null,
  "_links": {"self": "/api/runs/r1", "jsonl": "/api/runs/r1/jsonl", "descendants": "/d"},
  "idempotency_key": "k-1"
}"#;

    #[test]
    fn a_version_1_record_reads_and_is_written_again_as_version_2() {
        let record = RunRecord::read(VERSION_1.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(record.idempotency_key.as_deref(), Some("k-1"));
        let run = &record.run;
        assert_eq!(run.agent_runtime, AgentRuntime::ClaudeCode);
        assert_eq!(run.cwd.as_deref(), Some("/home/alice/src/kith"));
        assert_eq!(run.tags, ["family"]);
        assert_eq!(run.subagent_spans[0].name.as_deref(), Some("explore"));
        assert_eq!(run.redactions.get("aws_key"), Some(&1));

        let written = record.write().unwrap_or_else(|e| panic!("{e}"));
        let json: serde_json::Value =
            serde_json::from_slice(&written).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["version"], 2);
        // What belongs to a reader's request is not the archive's.
        for gone in ["readable_by", "indexed_at", "embedded_at", "_links"] {
            assert!(json.get(gone).is_none(), "{gone} written: {json}");
        }
        let again = RunRecord::read(&written).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(again, record);
    }

    #[test]
    fn a_record_of_a_newer_version_is_refused() {
        let newer = VERSION_1.replacen('{', "{\"version\": 3,", 1);
        let err = RunRecord::read(newer.as_bytes()).map(|_| ());
        assert!(
            matches!(&err, Err(Error::Internal(m)) if m.contains("version 3")),
            "{err:?}"
        );
    }

    #[test]
    fn an_unknown_agent_reads_as_other() {
        let future = VERSION_1.replace("\"claude-code\"", "\"some-new-agent\"");
        let record = RunRecord::read(future.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(record.run.agent_runtime, AgentRuntime::Other);
    }
}
