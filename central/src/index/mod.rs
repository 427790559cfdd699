//! The search index: one `SearchIndex` trait that every backend implements.
//! Central feeds it chunks of runs and asks it for hits; the index is derived
//! state, rebuilt from the blob store by `reindex`.
//!
//! Privacy lives here too: every indexed chunk carries its run's owner, tags
//! and `Standing` (ancestry, quarantine, capture time), and every search
//! takes the `Viewer` (user and grants) and applies it inside the engine,
//! so no backend returns, or counts in a score, what the viewer may not
//! read.

pub(crate) mod base_form;
pub(crate) mod embedded;
pub(crate) mod fusion;
pub(crate) mod meili;
pub(crate) mod vectors;
pub(crate) mod words;

use std::path::Path;

use kith_proto::AgentRuntime;
use kith_shared::chunk::Chunk;

use crate::config::{SearchBackend, SearchConfig};
use crate::error::Result;
use crate::privacy::Readability;
use crate::run::Run;

/// Most hits a search asks an index for (a grouped search ranks this many
/// at most; within what Meilisearch lets a search page through,
/// `meili::schema`).
pub(crate) const MAX_GROUP_POOL: usize = 2000;

/// Opens the configured backend; `dir` is where the embedded one lives.
pub(crate) fn open(config: &SearchConfig, dir: &Path) -> Result<Box<dyn SearchIndex>> {
    Ok(match config.backend {
        SearchBackend::Embedded => Box::new(embedded::EmbeddedIndex::open(dir)?),
        SearchBackend::Meilisearch => Box::new(meili::MeiliIndex::open(config)?),
    })
}

/// Search filters after validation (timestamps parsed, values checked).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Filters {
    pub runtime: Option<AgentRuntime>,
    pub machine: Option<String>,
    pub conversation_id: Option<String>,
    pub root_run_id: Option<String>,
    pub tags: Vec<String>,
    /// Whole path components: `/home/a` matches `/home/a/x`, not `/home/ab`.
    pub cwd_prefix: Option<String>,
    /// Milliseconds since the epoch, inclusive.
    pub since_ms: Option<i64>,
    /// Milliseconds since the epoch, exclusive.
    pub until_ms: Option<i64>,
    /// Only these trees (root run ids): the conversations a facet filter
    /// matched. `None` is every tree.
    pub roots: Option<Vec<String>>,
    /// Also chunks of superseded chains (a transcript captured again after
    /// a rewrite or truncation); left out by default.
    pub include_superseded: bool,
}

/// Where a run stands in the registry, as the index's readability filter
/// reads it: copied from the run's row each time the run is indexed (a
/// quarantine queues its runs again).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Standing {
    /// `|root|...|self|`: a run grant on an ancestor covers the run.
    pub ancestry: String,
    /// A run of a chain a later capture of its transcript replaced
    /// (searched only when asked).
    pub superseded: bool,
    /// Readable by its owner alone: captured by a revoked machine, or
    /// quarantined by `machine revoke --quarantine-since`.
    pub quarantined: bool,
    /// When central stored it, in milliseconds since the epoch: a run grant
    /// that does not follow covers the runs captured by its own time.
    pub captured_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct IndexHit {
    pub run_id: String,
    pub chunk_id: String,
    /// Relevance; a search's hits come best first, their scores never
    /// rising down the list (grouping and re-ranking read them).
    pub score: f32,
    pub role: String,
    pub text: String,
    /// Text around the matches, matches wrapped in `«` and `»`.
    pub snippet: String,
    pub line_start: u64,
    pub line_end: u64,
    pub started_at: String,
    pub intent: Option<String>,
    pub machine: String,
    pub agent_runtime: AgentRuntime,
}

pub trait SearchIndex: Send + Sync {
    /// Backend name for `/api/status` and search responses.
    fn name(&self) -> &'static str;

    /// Replaces every chunk of `run` with `chunks`, standing as `standing`
    /// says (not visible before `commit`).
    fn put_run(&self, run: &Run, standing: &Standing, chunks: &[Chunk]) -> Result<()>;

    /// Makes all puts so far durable and searchable.
    fn commit(&self) -> Result<()>;

    /// Removes every chunk (before a full rebuild).
    fn clear(&self) -> Result<()>;

    /// Removes every vector, of every model, whether or not one is
    /// attached (a rebuild that cuts the chunks again: they were of other
    /// texts). A server backend drops a document's vectors when it is put
    /// again, so it has nothing to do.
    fn drop_vectors(&self) -> Result<()> {
        Ok(())
    }

    /// Removes every chunk of these runs and their vectors, durably and
    /// from search when it returns (a forget). Runs not indexed are no
    /// error, so a forget that stopped midway can run again.
    fn delete_runs(&self, run_ids: &[String]) -> Result<()>;

    /// Keyword (BM25) search over the chunks the viewer may read: its own,
    /// and those its grants cover. (Callers still re-check every hit against
    /// the registry, which also knows expiry and quarantine.)
    fn keyword(
        &self,
        viewer: &Readability,
        query: &str,
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>>;

    /// Sets each hit's snippet to its text around `query`'s matches. The
    /// search highlights only the hits it returns, after fusion and the
    /// registry re-check.
    fn highlight(&self, query: &str, hits: &mut [IndexHit]) -> Result<()>;

    /// Vector search over the chunks the viewer may read, filtered before
    /// ranking. Errors with `embedder_unavailable` before `attach_vectors`.
    fn semantic(
        &self,
        viewer: &Readability,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>>;

    /// Opens the vectors of one embedding model (another model's vectors
    /// are kept apart, so changing models re-embeds instead of mixing).
    fn attach_vectors(&self, model_id: &str, dim: usize) -> Result<()>;

    /// Adds chunk vectors, by chunk id; durable when it returns. Keeps only
    /// those whose chunk still holds the text they were made from (a run
    /// put again meanwhile changed or removed it), whatever the order of
    /// this call and a commit of that run.
    fn put_vectors(&self, items: &[ChunkVector]) -> Result<()>;

    /// The run's chunks with no vector from the attached model, as (chunk
    /// id, text): what the vectorizer embeds. Read from the index, never
    /// chunked again, so a vector always belongs to the text it was indexed
    /// with, whichever kith chunked it.
    fn chunks_to_embed(&self, run_id: &str) -> Result<Vec<(String, String)>>;

    /// Number of chunks indexed.
    fn n_chunks(&self) -> Result<u64>;

    /// Number of chunks indexed for one run (for `doctor`).
    fn n_chunks_of_run(&self, run_id: &str) -> Result<u64>;

    /// Keyword and vector search fused into one ranking, `semantic_ratio`
    /// weighing the vector side (0 keyword only, 1 vectors only), filtered
    /// like `keyword`. Both backends fuse with `search::fusion` (the
    /// embedded one reading documents only for what it returns).
    fn hybrid(
        &self,
        viewer: &Readability,
        query: &str,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
        semantic_ratio: f32,
    ) -> Result<Vec<IndexHit>>;

    /// The cosine similarity of each chunk of `chunk_ids` to `vector`, in
    /// order: `None` for a chunk without a vector of the attached model.
    /// For the relevance floor (`search::relevance`); the caller names only
    /// chunks its viewer may read (hits already returned).
    fn similarity(&self, vector: &[f32], chunk_ids: &[String]) -> Result<Vec<Option<f32>>>;

    /// Settings that differ from what kith applies, one line each (for
    /// `doctor`); only a server backend has settings to drift.
    fn check_settings(&self) -> Result<Vec<String>> {
        Ok(Vec::new())
    }

    /// Why `reindex` must build this index anew rather than refill it (it
    /// reads words as an older kith-central did, or its chunks lack their
    /// run's `Standing`), if it must.
    fn outdated(&self) -> Option<String> {
        None
    }
}

/// A chunk's vector and the text it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct ChunkVector {
    pub chunk_id: String,
    pub text: String,
    pub vector: Vec<f32>,
}

/// Chunk id: the run id and the chunk's index in the run.
pub(crate) fn chunk_id(run_id: &str, chunk_idx: u32) -> String {
    format!("{run_id}-{chunk_idx}")
}

/// The run id and index of a chunk id.
pub(crate) fn split_chunk_id(id: &str) -> Option<(&str, u32)> {
    let (run, idx) = id.rsplit_once('-')?;
    Some((run, idx.parse().ok()?))
}

/// Every ancestor of a path, itself included, without trailing slashes
/// (`/a/b` -> `/`, `/a`, `/a/b`), so a path-prefix filter is one term lookup.
pub(crate) fn path_prefixes(path: &str) -> Vec<String> {
    let trimmed = path.trim_end_matches('/');
    let mut out = Vec::new();
    if path.starts_with('/') {
        out.push("/".to_owned());
    }
    for (i, c) in trimmed.char_indices() {
        if c == '/' && i > 0 {
            out.push(trimmed[..i].to_owned());
        }
    }
    if !trimmed.is_empty() {
        out.push(trimmed.to_owned());
    }
    out
}

/// The form `path_prefixes` stores a filter value in.
pub(crate) fn normalize_prefix(prefix: &str) -> String {
    let t = prefix.trim_end_matches('/');
    if t.is_empty() && prefix.starts_with('/') {
        "/".to_owned()
    } else {
        t.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_prefixes_are_whole_components() {
        assert_eq!(
            path_prefixes("/home/a/proj/"),
            ["/", "/home", "/home/a", "/home/a/proj"]
        );
        assert_eq!(path_prefixes("rel/x"), ["rel", "rel/x"]);
        assert_eq!(normalize_prefix("/home/a/"), "/home/a");
        assert_eq!(normalize_prefix("/"), "/");
        assert!(!path_prefixes("/home/ab").contains(&normalize_prefix("/home/a")));
    }
}
