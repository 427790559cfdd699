//! The embedded backend: a tantivy index under `<data>/index/`, in process, no
//! server. BM25 over English-stemmed chunk text; filters and readability
//! (owner, or a grant's owner + ancestry/tag) as exact-match terms applied
//! inside the engine.

use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, RwLock};

use kith_proto::{AgentRuntime, RunMeta};
use kith_shared::chunk::Chunk;
use tantivy::collector::{Collector, SegmentCollector, TopDocs};
use tantivy::directory::MmapDirectory;
use tantivy::query::{BooleanQuery, Occur, Query, QueryParser, RangeQuery, TermQuery};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, FAST, INDEXED, STORED,
    STRING,
};
use tantivy::snippet::SnippetGenerator;
use tantivy::{
    DocAddress, DocId, Index, IndexReader, IndexWriter, ReloadPolicy, Score, SegmentOrdinal,
    SegmentReader, TantivyDocument, Term,
};

use super::vectors::{chunk_key, VectorStore};
use super::{chunk_id, normalize_prefix, path_prefixes, Filters, IndexHit, SearchIndex};
use crate::auth::Viewer;
use crate::error::{Error, Result};
use crate::registry::GrantScope;

/// Memory budget of the tantivy writer (split across its threads).
const WRITER_HEAP_BYTES: usize = 64 * 1024 * 1024;
const SNIPPET_CHARS: usize = 240;

struct Fields {
    chunk_id: Field,
    /// `vectors::chunk_key(chunk_id)`: joins a doc to its vector.
    chunk_key: Field,
    run_id: Field,
    owner: Field,
    ancestry: Field,
    machine: Field,
    runtime: Field,
    conversation_id: Field,
    root_run_id: Field,
    tags: Field,
    cwd_prefixes: Field,
    started_ms: Field,
    started_at: Field,
    role: Field,
    text: Field,
    line_start: Field,
    line_end: Field,
    intent: Field,
}

pub struct EmbeddedIndex {
    index: Index,
    fields: Fields,
    reader: IndexReader,
    /// tantivy allows one writer per index, across processes; it is created
    /// on first write so read-only users (`doctor`) can open a live index.
    writer: Mutex<Option<IndexWriter>>,
    /// Chunk vectors of the configured embedder, once one is attached.
    vectors: RwLock<Option<VectorStore>>,
    dir: PathBuf,
}

fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text_opts = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer("en_stem")
                .set_index_option(IndexRecordOption::WithFreqsAndPositions),
        )
        .set_stored();
    let fields = Fields {
        chunk_id: b.add_text_field("chunk_id", STRING | STORED),
        chunk_key: b.add_u64_field("chunk_key", INDEXED | FAST | STORED),
        run_id: b.add_text_field("run_id", STRING | STORED),
        owner: b.add_text_field("owner", STRING),
        ancestry: b.add_text_field("ancestry", STRING),
        machine: b.add_text_field("machine", STRING | STORED),
        runtime: b.add_text_field("runtime", STRING | STORED),
        conversation_id: b.add_text_field("conversation_id", STRING),
        root_run_id: b.add_text_field("root_run_id", STRING),
        tags: b.add_text_field("tags", STRING),
        cwd_prefixes: b.add_text_field("cwd_prefixes", STRING),
        started_ms: b.add_i64_field("started_ms", INDEXED | FAST),
        started_at: b.add_text_field("started_at", STORED),
        role: b.add_text_field("role", STRING | STORED),
        text: b.add_text_field("text", text_opts),
        line_start: b.add_u64_field("line_start", STORED),
        line_end: b.add_u64_field("line_end", STORED),
        intent: b.add_text_field("intent", STORED),
    };
    (b.build(), fields)
}

impl EmbeddedIndex {
    /// Opens the index in `dir`, creating it if needed. A directory holding
    /// something that is not a compatible index is an error naming `reindex`.
    pub fn open(dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir)?;
        let (schema, fields) = schema();
        let corrupt = |e: tantivy::TantivyError| {
            Error::Unavailable {
            code: "index_unavailable",
            message: format!(
                "the search index in {} cannot be opened ({e}); run `kith-central reindex` to rebuild it",
                dir.display()
            ),
        }
        };
        let directory = MmapDirectory::open(dir).map_err(|e| corrupt(e.into()))?;
        let index = Index::open_or_create(directory, schema).map_err(corrupt)?;
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(corrupt)?;
        Ok(Self {
            index,
            fields,
            reader,
            writer: Mutex::new(None),
            vectors: RwLock::new(None),
            dir: dir.to_owned(),
        })
    }

    /// Runs `f` with the index writer, creating it on first use.
    fn with_writer<T>(&self, f: impl FnOnce(&mut IndexWriter) -> Result<T>) -> Result<T> {
        let mut guard: MutexGuard<'_, Option<IndexWriter>> =
            self.writer.lock().unwrap_or_else(|p| p.into_inner());
        let writer = match guard.as_mut() {
            Some(w) => w,
            None => guard.insert(self.index.writer_with_num_threads(1, WRITER_HEAP_BYTES).map_err(|e| {
                Error::Unavailable {
                    code: "index_busy",
                    message: format!("cannot write the search index ({e}); is another kith-central using this data directory?"),
                }
            })?),
        };
        f(writer)
    }

    fn hit_from_doc(
        &self,
        doc: &TantivyDocument,
        score: f32,
        snippet: Option<&tantivy::snippet::Snippet>,
    ) -> IndexHit {
        let f = &self.fields;
        let text_of = |field: Field| {
            doc.get_first(field)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        let u64_of = |field: Field| {
            doc.get_first(field)
                .and_then(|v| v.as_u64())
                .unwrap_or_default()
        };
        let text = text_of(f.text);
        IndexHit {
            run_id: text_of(f.run_id),
            chunk_id: text_of(f.chunk_id),
            score,
            role: text_of(f.role),
            snippet: highlight(snippet, &text),
            text,
            line_start: u64_of(f.line_start),
            line_end: u64_of(f.line_end),
            started_at: text_of(f.started_at),
            intent: Some(text_of(f.intent)).filter(|s| !s.is_empty()),
            machine: text_of(f.machine),
            agent_runtime: AgentRuntime::parse(&text_of(f.runtime)).unwrap_or(AgentRuntime::Other),
        }
    }

    fn filter_queries(&self, viewer: &Viewer, filters: &Filters) -> Vec<(Occur, Box<dyn Query>)> {
        let f = &self.fields;
        let term = |field: Field, value: &str| -> (Occur, Box<dyn Query>) {
            (
                Occur::Must,
                Box::new(TermQuery::new(
                    Term::from_field_text(field, value),
                    IndexRecordOption::Basic,
                )),
            )
        };
        let exact = |field: Field, value: &str| -> Box<dyn Query> {
            Box::new(TermQuery::new(
                Term::from_field_text(field, value),
                IndexRecordOption::Basic,
            ))
        };
        let mut readable: Vec<(Occur, Box<dyn Query>)> =
            vec![(Occur::Should, exact(f.owner, viewer.user_id.as_str()))];
        for grant in &viewer.grants {
            let scope = match &grant.scope {
                GrantScope::Run(id) => exact(f.ancestry, id),
                GrantScope::Tag(tag) => exact(f.tags, tag),
            };
            let both: Box<dyn Query> = Box::new(BooleanQuery::new(vec![
                (Occur::Must, exact(f.owner, &grant.grantor)),
                (Occur::Must, scope),
            ]));
            readable.push((Occur::Should, both));
        }
        let mut out: Vec<(Occur, Box<dyn Query>)> =
            vec![(Occur::Must, Box::new(BooleanQuery::new(readable)))];
        if let Some(rt) = filters.runtime {
            out.push(term(f.runtime, rt.as_str()));
        }
        if let Some(m) = &filters.machine {
            out.push(term(f.machine, m));
        }
        if let Some(c) = &filters.conversation_id {
            out.push(term(f.conversation_id, c));
        }
        if let Some(r) = &filters.root_run_id {
            out.push(term(f.root_run_id, r));
        }
        for t in &filters.tags {
            out.push(term(f.tags, t));
        }
        if let Some(p) = &filters.cwd_prefix {
            out.push(term(f.cwd_prefixes, &normalize_prefix(p)));
        }
        if filters.since_ms.is_some() || filters.until_ms.is_some() {
            let lower = filters.since_ms.map_or(Bound::Unbounded, |v| {
                Bound::Included(Term::from_field_i64(f.started_ms, v))
            });
            let upper = filters.until_ms.map_or(Bound::Unbounded, |v| {
                Bound::Excluded(Term::from_field_i64(f.started_ms, v))
            });
            out.push((Occur::Must, Box::new(RangeQuery::new(lower, upper))));
        }
        out
    }
}

fn index_err(e: tantivy::TantivyError) -> Error {
    Error::Internal(format!("search index: {e}"))
}

impl SearchIndex for EmbeddedIndex {
    fn name(&self) -> &'static str {
        "embedded"
    }

    fn put_run(&self, run: &RunMeta, ancestry: &str, chunks: &[Chunk]) -> Result<()> {
        let f = &self.fields;
        let started_ms = kith_shared::timestamp::parse(&run.started_at)
            .map_or(0, |t| (t.unix_timestamp_nanos() / 1_000_000) as i64);
        self.with_writer(|writer| {
            writer.delete_term(Term::from_field_text(f.run_id, &run.id));
            for chunk in chunks {
                let mut doc = TantivyDocument::default();
                let id = chunk_id(&run.id, chunk.chunk_idx);
                doc.add_u64(f.chunk_key, chunk_key(&id));
                doc.add_text(f.chunk_id, id);
                doc.add_text(f.run_id, &run.id);
                doc.add_text(f.owner, &run.user_id);
                for id in ancestry.split('|').filter(|s| !s.is_empty()) {
                    doc.add_text(f.ancestry, id);
                }
                doc.add_text(f.machine, &run.machine);
                doc.add_text(f.runtime, run.agent_runtime.as_str());
                if let Some(c) = &run.conversation_id {
                    doc.add_text(f.conversation_id, c);
                }
                doc.add_text(f.root_run_id, &run.root_run_id);
                for t in &run.tags {
                    doc.add_text(f.tags, t);
                }
                for p in run.cwd.as_deref().map(path_prefixes).unwrap_or_default() {
                    doc.add_text(f.cwd_prefixes, p);
                }
                doc.add_i64(f.started_ms, started_ms);
                doc.add_text(f.started_at, &run.started_at);
                doc.add_text(f.role, chunk.role.as_str());
                doc.add_text(f.text, &chunk.text);
                doc.add_u64(f.line_start, chunk.line_start);
                doc.add_u64(f.line_end, chunk.line_end);
                if let Some(i) = &run.intent {
                    doc.add_text(f.intent, i);
                }
                writer.add_document(doc).map_err(index_err)?;
            }
            Ok(())
        })
    }

    fn commit(&self) -> Result<()> {
        self.with_writer(|w| w.commit().map(drop).map_err(index_err))?;
        self.reader.reload().map_err(index_err)
    }

    fn clear(&self) -> Result<()> {
        if let Some(store) = self
            .vectors
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            store.clear().map_err(|e| Error::Internal(e.to_string()))?;
        }
        self.with_writer(|w| {
            w.delete_all_documents().map_err(index_err)?;
            w.commit().map(drop).map_err(index_err)
        })?;
        self.reader.reload().map_err(index_err)
    }

    fn keyword(
        &self,
        viewer: &Viewer,
        query: &str,
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        let f = &self.fields;
        // Lenient: characters of the query syntax in a user's query are
        // searched for or ignored, never an error. Terms are OR-ed; BM25 ranks
        // chunks that match more of them first.
        let (text_query, _errors) =
            QueryParser::for_index(&self.index, vec![f.text]).parse_query_lenient(query);
        let searcher = self.reader.searcher();
        let mut clauses = self.filter_queries(viewer, filters);
        clauses.push((Occur::Must, text_query.box_clone()));
        let hits = searcher
            .search(
                &BooleanQuery::new(clauses),
                &TopDocs::with_limit(limit.max(1)).order_by_score(),
            )
            .map_err(index_err)?;
        let mut snippets =
            SnippetGenerator::create(&searcher, &*text_query, f.text).map_err(index_err)?;
        snippets.set_max_num_chars(SNIPPET_CHARS);
        hits.into_iter()
            .map(|(score, addr)| {
                let doc: TantivyDocument = searcher.doc(addr).map_err(index_err)?;
                let snippet = snippets.snippet_from_doc(&doc);
                Ok(self.hit_from_doc(&doc, score, Some(&snippet)))
            })
            .collect()
    }

    fn semantic(
        &self,
        viewer: &Viewer,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        let searcher = self.reader.searcher();
        // Filter first: only chunks this viewer may read (and that pass the
        // filters) are ranked at all.
        let allowed: HashMap<u64, DocAddress> = searcher
            .search(
                &BooleanQuery::new(self.filter_queries(viewer, filters)),
                &KeyCollector,
            )
            .map_err(index_err)?
            .into_iter()
            .collect();
        let guard = self.vectors.read().unwrap_or_else(|p| p.into_inner());
        let Some(store) = guard.as_ref() else {
            return Err(Error::Unavailable {
                code: "embedder_unavailable",
                message: "no vectors: no embedder is attached".into(),
            });
        };
        let best = store.top_k(vector, limit, |k| allowed.contains_key(&k));
        drop(guard);
        let mut out = Vec::with_capacity(best.len());
        for (key, score) in best {
            if let Some(addr) = allowed.get(&key) {
                let doc: TantivyDocument = searcher.doc(*addr).map_err(index_err)?;
                out.push(self.hit_from_doc(&doc, score, None));
            }
        }
        Ok(out)
    }

    fn attach_vectors(&self, model_id: &str, dim: usize) -> Result<()> {
        let store =
            VectorStore::open(&self.dir, model_id, dim).map_err(|e| Error::Unavailable {
                code: "index_unavailable",
                message: e.to_string(),
            })?;
        *self.vectors.write().unwrap_or_else(|p| p.into_inner()) = Some(store);
        Ok(())
    }

    fn put_vectors(&self, items: &[(String, Vec<f32>)]) -> Result<()> {
        let mut guard = self.vectors.write().unwrap_or_else(|p| p.into_inner());
        let store = guard
            .as_mut()
            .ok_or_else(|| Error::Internal("put_vectors before attach_vectors".into()))?;
        let keyed: Vec<(u64, Vec<f32>)> = items
            .iter()
            .map(|(id, v)| (chunk_key(id), v.clone()))
            .collect();
        store
            .put(&keyed)
            .and_then(|()| store.flush())
            .map_err(|e| Error::Internal(e.to_string()))
    }

    fn has_vector(&self, chunk_id: &str) -> bool {
        let guard = self.vectors.read().unwrap_or_else(|p| p.into_inner());
        guard
            .as_ref()
            .is_some_and(|s| s.contains(chunk_key(chunk_id)))
    }

    fn n_chunks(&self) -> Result<u64> {
        Ok(self.reader.searcher().num_docs())
    }

    fn n_chunks_of_run(&self, run_id: &str) -> Result<u64> {
        let term = Term::from_field_text(self.fields.run_id, run_id);
        self.reader.searcher().doc_freq(&term).map_err(index_err)
    }
}

/// The snippet with matches wrapped in `«` and `»`; the start of the text
/// when nothing matched (a semantic hit, say).
fn highlight(snippet: Option<&tantivy::snippet::Snippet>, text: &str) -> String {
    let fragment = snippet.map_or("", |s| s.fragment());
    let Some(snippet) = snippet.filter(|_| !fragment.is_empty()) else {
        return text.chars().take(SNIPPET_CHARS).collect();
    };
    let mut out = String::with_capacity(fragment.len() + 16);
    let mut at = 0;
    for range in snippet.highlighted() {
        out.push_str(&fragment[at..range.start]);
        out.push('«');
        out.push_str(&fragment[range.clone()]);
        out.push('»');
        at = range.end;
    }
    out.push_str(&fragment[at..]);
    out
}

/// Collects the chunk key and address of every matching doc (no scoring),
/// so ranked vectors map straight back to their docs.
struct KeyCollector;

struct KeySegmentCollector {
    segment_ord: SegmentOrdinal,
    column: tantivy::columnar::Column<u64>,
    keys: Vec<(u64, DocAddress)>,
}

impl Collector for KeyCollector {
    type Fruit = Vec<(u64, DocAddress)>;
    type Child = KeySegmentCollector;

    fn for_segment(
        &self,
        segment_ord: SegmentOrdinal,
        segment: &SegmentReader,
    ) -> tantivy::Result<KeySegmentCollector> {
        Ok(KeySegmentCollector {
            segment_ord,
            column: segment.fast_fields().u64("chunk_key")?,
            keys: Vec::new(),
        })
    }

    fn requires_scoring(&self) -> bool {
        false
    }

    fn merge_fruits(
        &self,
        fruits: Vec<Vec<(u64, DocAddress)>>,
    ) -> tantivy::Result<Vec<(u64, DocAddress)>> {
        Ok(fruits.concat())
    }
}

impl SegmentCollector for KeySegmentCollector {
    type Fruit = Vec<(u64, DocAddress)>;

    fn collect(&mut self, doc: DocId, _score: Score) {
        if let Some(k) = self.column.first(doc) {
            self.keys.push((k, DocAddress::new(self.segment_ord, doc)));
        }
    }

    fn harvest(self) -> Vec<(u64, DocAddress)> {
        self.keys
    }
}
