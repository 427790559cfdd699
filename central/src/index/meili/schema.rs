//! What kith stores in Meilisearch: one document per chunk, the partial
//! update that later adds its vector, and the index settings. Pure values,
//! so their JSON is tested without a server.

use std::collections::HashMap;

use crate::run::Run;
use kith_shared::chunk::Chunk;
use meilisearch_sdk::settings::{
    Embedder, EmbedderSource, MinWordSizeForTypos, PaginationSetting, Settings,
    TypoToleranceSettings,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::index::{chunk_id, path_prefixes, Standing};

/// The one embedder kith configures: vectors come from kith's own embed
/// queue (`userProvided`), never from Meilisearch.
pub(super) const EMBEDDER: &str = "default";
pub(super) const PRIMARY_KEY: &str = "id";

/// Only the chunk text is searched. Ids, paths, machines and tags are
/// filter-only, so typo tolerance can never fuzz one id into another.
pub(super) const SEARCHABLE: &[&str] = &["text"];
pub(super) const FILTERABLE: &[&str] = &[
    "owner",
    "ancestry",
    "tags",
    "run_id",
    "machine",
    "runtime",
    "conversation_id",
    "root_run_id",
    "cwd_prefixes",
    "started_ms",
    "vector_model",
    "superseded",
    "quarantined",
    "captured_ms",
    "machine_key",
    "tag_keys",
    "cwd_keys",
];
pub(super) const SORTABLE: &[&str] = &["started_ms"];
/// The fields a hit needs (never `_vectors`: hundreds of floats per hit).
pub(super) const RETRIEVED: &[&str] = &[
    "id",
    "run_id",
    "role",
    "text",
    "line_start",
    "line_end",
    "started_at",
    "intent",
    "machine",
    "runtime",
];
/// Search asks for at most `index::MAX_GROUP_POOL` hits (a grouped
/// page's pool; a ranked page asks `offset + limit`, at most 1,100);
/// Meilisearch's default cap is 1,000. It caps the hits a search can page
/// through, not `estimatedTotalHits` (measured on Meilisearch 1.50: 30 of
/// 30 with a cap of 10), so the counts BM25 reads stay whole.
const MAX_TOTAL_HITS: usize = super::super::MAX_GROUP_POOL;

/// One chunk as a Meilisearch document. Field names match `FILTERABLE`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct ChunkDoc {
    pub id: String,
    pub run_id: String,
    /// The run's owner: readability starts here.
    pub owner: String,
    /// Every run from the root down to this one: a grant on any of them
    /// covers this chunk.
    pub ancestry: Vec<String>,
    pub machine: String,
    pub runtime: String,
    pub conversation_id: Option<String>,
    pub root_run_id: String,
    pub tags: Vec<String>,
    /// Every ancestor of the run's cwd, so a path-prefix filter is one
    /// equality on whole components.
    pub cwd_prefixes: Vec<String>,
    /// Milliseconds since the epoch, for since/until (a number filters by range).
    pub started_ms: i64,
    pub started_at: String,
    pub role: String,
    pub text: String,
    pub line_start: u64,
    pub line_end: u64,
    pub intent: Option<String>,
    /// A chunk of a superseded chain: searched only when asked.
    pub superseded: bool,
    /// A chunk of a quarantined run: readable by its owner alone.
    pub quarantined: bool,
    /// When central stored the run, in milliseconds since the epoch (a
    /// snapshot grant covers the runs captured by its time).
    pub captured_ms: i64,
    /// `key` of `machine`, of each tag and of each cwd prefix: what filters
    /// compare, as Meilisearch compares strings loosely (`filter::exactly`).
    pub machine_key: String,
    pub tag_keys: Vec<String>,
    pub cwd_keys: Vec<String>,
    /// Always `{"default": null}`: "no vector yet" (a document replaced
    /// with text only loses its old vector). Sent whether or not the index
    /// has the embedder yet: Meilisearch refuses to add a `userProvided`
    /// embedder while a document lacks this opt-out, and a `reindex` without
    /// a model writes documents before central adds the embedder.
    #[serde(rename = "_vectors")]
    pub vectors: NoVector,
    /// Which model's vector the chunk holds; null until `put_vectors`.
    pub vector_model: Option<String>,
}

/// `doc` as a partial update that leaves the chunk's vector, and the model
/// it came from, as they are.
pub(super) fn without_vector(
    doc: &ChunkDoc,
) -> crate::error::Result<serde_json::Map<String, Value>> {
    let Value::Object(mut fields) = serde_json::to_value(doc)? else {
        return Err(crate::error::Error::Internal(
            "a chunk document is not an object".into(),
        ));
    };
    fields.remove("_vectors");
    fields.remove("vector_model");
    Ok(fields)
}

/// `{"default": null}`. (`"_vectors": null` fails a whole batch.)
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct NoVector {
    default: Option<Vec<f32>>,
}

pub(super) const NO_VECTOR: NoVector = NoVector { default: None };

/// The partial update that gives a chunk its vector. Owned: it is sent
/// from the index's own runtime (`MeiliIndex::call`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct VectorDoc {
    pub id: String,
    #[serde(rename = "_vectors")]
    pub vectors: WithVector,
    pub vector_model: String,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub(super) struct WithVector {
    pub default: Vec<f32>,
}

/// What a hit brings back (`RETRIEVED`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub(super) struct HitDoc {
    pub id: String,
    pub run_id: String,
    pub role: String,
    pub text: String,
    pub line_start: u64,
    pub line_end: u64,
    pub started_at: String,
    pub intent: Option<String>,
    pub machine: String,
    pub runtime: String,
}

/// A filter value as the documents hold it for an exact match: its sha256,
/// in hex. Meilisearch compares filter strings ignoring case, Unicode form
/// and surrounding spaces, and a value past ~468 bytes never matches; two
/// different values have different keys, of 64 plain characters.
pub(super) fn key(value: &str) -> String {
    kith_shared::hash::sha256_hex(value.as_bytes())
}

/// The documents of one run's chunks.
pub(super) fn chunk_docs(run: &Run, standing: &Standing, chunks: &[Chunk]) -> Vec<ChunkDoc> {
    let started_ms =
        kith_shared::timestamp::parse(&run.started_at).map_or(0, kith_shared::timestamp::epoch_ms);
    let ancestry: Vec<String> = standing
        .ancestry
        .split('|')
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect();
    let cwd_prefixes = run.cwd.as_deref().map(path_prefixes).unwrap_or_default();
    let machine_key = key(&run.machine);
    let tag_keys: Vec<String> = run.tags.iter().map(|t| key(t)).collect();
    let cwd_keys: Vec<String> = cwd_prefixes.iter().map(|p| key(p)).collect();
    chunks
        .iter()
        .map(|chunk| ChunkDoc {
            id: chunk_id(&run.id, chunk.chunk_idx),
            run_id: run.id.clone(),
            owner: run.user_id.clone(),
            ancestry: ancestry.clone(),
            machine: run.machine.clone(),
            runtime: run.agent_runtime.as_str().to_owned(),
            conversation_id: run.conversation_id.clone(),
            root_run_id: run.root_run_id.clone(),
            tags: run.tags.clone(),
            cwd_prefixes: cwd_prefixes.clone(),
            started_ms,
            started_at: run.started_at.clone(),
            role: chunk.role.as_str().to_owned(),
            text: chunk.text.clone(),
            line_start: chunk.line_start,
            line_end: chunk.line_end,
            intent: run.intent.clone(),
            superseded: standing.superseded,
            quarantined: standing.quarantined,
            captured_ms: standing.captured_ms,
            machine_key: machine_key.clone(),
            tag_keys: tag_keys.clone(),
            cwd_keys: cwd_keys.clone(),
            vectors: NO_VECTOR,
            vector_model: None,
        })
        .collect()
}

/// The settings kith applies at start (the embedder comes separately, once
/// the model's dimension is known). Applying them again changes nothing.
pub(super) fn base_settings() -> Settings {
    Settings::new()
        .with_searchable_attributes(SEARCHABLE)
        .with_filterable_attributes(FILTERABLE)
        .with_sortable_attributes(SORTABLE)
        .with_typo_tolerance(typo_tolerance())
        .with_pagination(PaginationSetting {
            max_total_hits: MAX_TOTAL_HITS,
        })
        .with_synonyms(crate::index::base_form::synonyms())
}

/// Transcripts are full of identifiers, paths and hashes: a typo is only
/// allowed in longer words (6+ letters for one, 10+ for two, against
/// Meilisearch's 5 and 9), and never in numbers (line numbers, ports,
/// hashes), so `parse_args` does not match `parse_arg` and `8080` not `8081`.
fn typo_tolerance() -> TypoToleranceSettings {
    TypoToleranceSettings {
        enabled: Some(true),
        disable_on_attributes: Some(Vec::new()),
        disable_on_words: Some(Vec::new()),
        min_word_size_for_typos: Some(MinWordSizeForTypos {
            one_typo: Some(6),
            two_typos: Some(10),
        }),
        disable_on_numbers: Some(true),
    }
}

/// The `default` embedder with the model's dimension.
pub(super) fn embedders(dim: usize) -> HashMap<String, Embedder> {
    HashMap::from([(
        EMBEDDER.to_owned(),
        Embedder {
            source: EmbedderSource::UserProvided,
            dimensions: Some(dim),
            ..Embedder::default()
        },
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use kith_proto::AgentRuntime;
    use kith_shared::transcript::Role;
    use serde_json::json;

    fn run() -> Run {
        let mut run = Run::for_tests("r2", "ualice");
        run.machine = "laptop".into();
        run.conversation_id = Some("c1".into());
        run.parent_run_id = Some("r1".into());
        run.root_run_id = "r1".into();
        run.cwd = Some("/home/alice/proj".into());
        run.intent = Some("fix the build".into());
        run.tags = vec!["work".into()];
        run.source_identity = "s".into();
        run.agent_runtime = AgentRuntime::Codex;
        run
    }

    fn chunk(idx: u32, text: &str) -> Chunk {
        Chunk {
            chunk_idx: idx,
            role: Role::User,
            text: text.into(),
            line_start: 3,
            line_end: 4,
            timestamp: None,
        }
    }

    #[test]
    fn a_chunk_document_carries_every_filter_field() {
        let standing = Standing {
            ancestry: "|r1|r2|".into(),
            superseded: false,
            quarantined: true,
            captured_ms: 1_778_486_500_000,
        };
        let docs = chunk_docs(&run(), &standing, &[chunk(0, "hello"), chunk(1, "again")]);
        assert_eq!(docs.len(), 2);
        let v = serde_json::to_value(&docs[0]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            v,
            json!({
                "id": "r2-0", "run_id": "r2", "owner": "ualice", "ancestry": ["r1", "r2"],
                "machine": "laptop", "runtime": "codex", "conversation_id": "c1",
                "root_run_id": "r1", "tags": ["work"],
                "cwd_prefixes": ["/", "/home", "/home/alice", "/home/alice/proj"],
                "started_ms": 1_778_486_400_000_i64, "started_at": "2026-05-11T08:00:00.000Z",
                "role": "user", "text": "hello", "line_start": 3, "line_end": 4,
                "intent": "fix the build", "superseded": false,
                "quarantined": true, "captured_ms": 1_778_486_500_000_i64,
                "machine_key": key("laptop"), "tag_keys": [key("work")],
                "cwd_keys": (["/", "/home", "/home/alice", "/home/alice/proj"].map(key)),
                "_vectors": {"default": null}, "vector_model": null,
            })
        );
        let second = serde_json::to_value(&docs[1]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(second["id"], "r2-1");
        assert_eq!(second["_vectors"], json!({"default": null}));
        for field in FILTERABLE {
            assert!(
                v.get(*field).is_some(),
                "{field} is filterable but not stored"
            );
        }
    }

    #[test]
    fn a_vector_update_names_its_model() {
        let doc = VectorDoc {
            id: "r2-0".into(),
            vectors: WithVector {
                default: vec![0.5, -0.5],
            },
            vector_model: "m@2".into(),
        };
        assert_eq!(
            serde_json::to_value(&doc).unwrap_or_else(|e| panic!("{e}")),
            json!({"id": "r2-0", "_vectors": {"default": [0.5, -0.5]}, "vector_model": "m@2"})
        );
    }

    #[test]
    fn settings_json_is_what_the_readme_documents() {
        let v = serde_json::to_value(base_settings()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(v["searchableAttributes"], json!(["text"]));
        assert_eq!(v["filterableAttributes"], json!(FILTERABLE));
        assert_eq!(v["sortableAttributes"], json!(["started_ms"]));
        assert_eq!(
            v["typoTolerance"],
            json!({
                "enabled": true, "disableOnAttributes": [], "disableOnWords": [],
                "minWordSizeForTypos": {"oneTypo": 6, "twoTypos": 10},
                "disableOnNumbers": true,
            })
        );
        assert_eq!(v["pagination"], json!({"maxTotalHits": 2000}));
        assert_eq!(v["synonyms"]["won"], json!(["win"]));
        assert_eq!(v["synonyms"]["go"], json!(["gone", "went"]));
        assert!(v.get("embedders").is_none() || v["embedders"].is_null());
        let e = serde_json::to_value(embedders(384)).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            e,
            json!({"default": {"source": "userProvided", "dimensions": 384}})
        );
    }
}
