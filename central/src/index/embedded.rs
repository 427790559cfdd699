//! The embedded backend: a tantivy index under `<data>/index/`, in process, no
//! server. BM25 over English-stemmed chunk text; filters and readability
//! (owner, or a grant's owner + ancestry/tag) as exact-match terms applied
//! inside the engine.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use kith_proto::AgentRuntime;
use kith_shared::chunk::Chunk;
use tantivy::collector::{Collector, DocSetCollector, SegmentCollector};
use tantivy::directory::MmapDirectory;
use tantivy::query::{
    AllQuery, BooleanQuery, EmptyQuery, EnableScoring, Occur, PhraseQuery, Query, RangeQuery,
    TermQuery,
};
use tantivy::schema::{
    Field, IndexRecordOption, Schema, TextFieldIndexing, TextOptions, Value, FAST, INDEXED, STORED,
    STRING,
};
use tantivy::{
    DocAddress, DocId, DocSet, Index, IndexReader, IndexSettings, IndexWriter, ReloadPolicy, Score,
    SegmentOrdinal, SegmentReader, TantivyDocument, Term, TERMINATED,
};

mod allowed;
mod stats;

use self::allowed::{AllowedCache, AllowedTopDocs};
use self::stats::ReadableStats;
use super::vectors::{self, chunk_key, KeyMap, Unsynced, VectorStore};
use super::words::{self, text_start};
use super::{
    chunk_id, normalize_prefix, path_prefixes, split_chunk_id, ChunkVector, Filters, IndexHit,
    SearchIndex, Standing,
};
use crate::error::{Code, Error, Result};
use crate::index::fusion;
use crate::privacy::{self, Readability, Rule};
use crate::run::Run;
use crate::sync::{lock, read, write};

/// Memory budget of the tantivy writer (split across its threads).
const WRITER_HEAP_BYTES: usize = 64 * 1024 * 1024;
/// Vectors the ANN index proposes per semantic query (at least), before
/// the viewer's readability and filters: a margin for what they remove.
const ANN_CANDIDATES: usize = 200;

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
    /// 1 for a chunk of a superseded chain (`Filters::include_superseded`).
    superseded: Field,
    /// `None` in an index an older kith-central built (`outdated`).
    standing: Option<StandingFields>,
}

/// What a grantee's readability reads beyond owner and scope.
#[derive(Clone, Copy)]
struct StandingFields {
    /// 1 for a chunk of a quarantined run.
    quarantined: Field,
    /// `Standing::captured_ms`.
    captured_ms: Field,
}

pub(crate) struct EmbeddedIndex {
    index: Index,
    fields: Fields,
    reader: IndexReader,
    /// tantivy allows one writer per index, across processes; it is created
    /// on first write so read-only users (`doctor`) can open a live index.
    writer: Mutex<Option<IndexWriter>>,
    /// Chunk vectors of the configured embedder, once one is attached.
    vectors: Arc<RwLock<Option<VectorStore>>>,
    /// Chunks whose vectors `put_run` dropped since the last commit: their
    /// committed text is the old one until then, so a vector arriving
    /// meanwhile (made from it) is not kept.
    rewritten: Mutex<std::collections::HashSet<u64>>,
    /// Set while a thread trains the vectors' ANN index.
    ann_training: Arc<AtomicBool>,
    /// What each recent viewer + filters may see, per segment.
    allowed: AllowedCache,
    /// Runs a hybrid search's two sides at once. Its threads start with the
    /// index, at the opening thread's priority, and wait for work.
    sides: rayon::ThreadPool,
    dir: PathBuf,
}

/// The analyzer of chunk text, indexed and searched: words lowercased, an
/// irregular form as its base form ("won" as "win", `base_form`), then
/// the English (Snowball) stem.
const WORDS: &str = "en_base_stem";

/// The analyzer of an index an older kith-central built: tantivy's own
/// English stemmer, without base forms. Such an index opens and searches
/// as it was built; `reindex` rebuilds it with `WORDS`.
const STEMS: &str = "en_stem";

/// The schema of an index whose text is read by the analyzer `words`; with
/// `standing`, the fields of a run's quarantine and capture time too (an
/// index an older kith-central built has neither).
fn schema(words: &str, standing: bool) -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text_opts = TextOptions::default()
        .set_indexing_options(
            TextFieldIndexing::default()
                .set_tokenizer(words)
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
        superseded: b.add_u64_field("superseded", INDEXED),
        standing: standing.then(|| StandingFields {
            quarantined: b.add_u64_field("quarantined", INDEXED),
            captured_ms: b.add_i64_field("captured_ms", INDEXED | FAST),
        }),
    };
    (b.build(), fields)
}

impl EmbeddedIndex {
    /// Opens the index in `dir`, creating it if needed. A directory holding
    /// something that is not a compatible index is an error naming `reindex`.
    pub(crate) fn open(dir: &Path) -> Result<Self> {
        crate::private::create_dir_all(dir)?;
        let corrupt = |e: tantivy::TantivyError| {
            Error::unavailable(
                Code::IndexUnavailable,
                format!(
                    "the search index in {} cannot be opened ({e}); run `kith-central reindex` to rebuild it",
                    dir.display()
                ),
            )
        };
        let directory = MmapDirectory::open(dir).map_err(|e| corrupt(e.into()))?;
        let (index, fields) = if Index::exists(&directory).map_err(|e| corrupt(e.into()))? {
            let index = Index::open(directory).map_err(corrupt)?;
            // This kith-central's schema, or one an older one built, which
            // opens and searches as it was built until `reindex`.
            let fields = [(WORDS, true), (WORDS, false), (STEMS, true), (STEMS, false)]
                .into_iter()
                .map(|(words, standing)| schema(words, standing))
                .find_map(|(s, f)| (index.schema() == s).then_some(f))
                .ok_or_else(|| {
                    corrupt(tantivy::TantivyError::SchemaError(
                        "its schema is not this kith-central's".into(),
                    ))
                })?;
            (index, fields)
        } else {
            let (schema, fields) = schema(WORDS, true);
            let index =
                Index::create(directory, schema, IndexSettings::default()).map_err(corrupt)?;
            (index, fields)
        };
        index.tokenizers().register(WORDS, words::analyzer());
        let reader = index
            .reader_builder()
            .reload_policy(ReloadPolicy::Manual)
            .try_into()
            .map_err(corrupt)?;
        let sides = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .thread_name(|i| format!("kith-search-{i}"))
            .build()
            .map_err(|e| Error::Internal(format!("starting the search threads: {e}")))?;
        Ok(Self {
            index,
            fields,
            reader,
            writer: Mutex::new(None),
            vectors: Arc::default(),
            rewritten: Mutex::default(),
            ann_training: Arc::default(),
            allowed: AllowedCache::default(),
            sides,
            dir: dir.to_owned(),
        })
    }

    /// Before `run` is put again with `chunks`: drops the vectors of its
    /// indexed chunks whose text the new chunks change or no longer have (a
    /// folded chain's later delta rewrote or removed a turn, and the chunks
    /// after it moved up), durably, so that the vectorizer embeds them
    /// again: a vector always belongs to its chunk's text. A chunk put with
    /// the same text keeps its vector.
    fn invalidate_rewritten(&self, run_id: &str, chunks: &[Chunk]) -> Result<()> {
        if read(&self.vectors).is_none() {
            return Ok(());
        }
        let searcher = self.reader.searcher();
        let run = TermQuery::new(
            Term::from_field_text(self.fields.run_id, run_id),
            IndexRecordOption::Basic,
        );
        let indexed = searcher.search(&run, &DocSetCollector).map_err(index_err)?;
        if indexed.is_empty() {
            return Ok(());
        }
        let new: HashMap<u64, &str> = chunks
            .iter()
            .map(|c| (chunk_key(&chunk_id(run_id, c.chunk_idx)), c.text.as_str()))
            .collect();
        let mut stale = Vec::new();
        for addr in indexed {
            let doc: TantivyDocument = searcher.doc(addr).map_err(index_err)?;
            let key = doc
                .get_first(self.fields.chunk_key)
                .and_then(|v| v.as_u64());
            let text = doc.get_first(self.fields.text).and_then(|v| v.as_str());
            if let Some(key) = key {
                if new.get(&key).copied() != text {
                    stale.push(key);
                }
            }
        }
        // `rewritten` before the vectors, as `put_vectors` takes them.
        let mut rewritten = lock(&self.rewritten);
        let mut guard = write(&self.vectors);
        let Some(store) = guard.as_mut() else {
            return Ok(());
        };
        rewritten.extend(&stale);
        let vector_err = |e: vectors::VectorError| Error::Internal(e.to_string());
        if store.invalidate(&stale).map_err(vector_err)? > 0 {
            store.flush().map_err(vector_err)?;
        }
        Ok(())
    }

    /// The committed text of the chunk `chunk_id`, if it is indexed.
    fn indexed_text(&self, searcher: &tantivy::Searcher, chunk_id: &str) -> Result<Option<String>> {
        let query = TermQuery::new(
            Term::from_field_text(self.fields.chunk_id, chunk_id),
            IndexRecordOption::Basic,
        );
        let Some(addr) = searcher
            .search(&query, &DocSetCollector)
            .map_err(index_err)?
            .into_iter()
            .next()
        else {
            return Ok(None);
        };
        let doc: TantivyDocument = searcher.doc(addr).map_err(index_err)?;
        Ok(doc
            .get_first(self.fields.text)
            .and_then(|v| v.as_str())
            .map(str::to_owned))
    }

    /// Runs `f` with the index writer, creating it on first use.
    /// Runs `f` with the index writer, opened first if it is not. A writer
    /// that failed (a full disk kills it, and it refuses everything after)
    /// is dropped, and the next write opens a new one from the last commit:
    /// once space returns, indexing goes on by itself. Its failure is the
    /// index's, not the run's: `IndexUnavailable`.
    fn with_writer<T>(&self, f: impl FnOnce(&mut IndexWriter) -> Result<T>) -> Result<T> {
        let mut guard = lock(&self.writer);
        let writer = match guard.as_mut() {
            Some(w) => w,
            None => guard.insert(self.index.writer_with_num_threads(1, WRITER_HEAP_BYTES).map_err(|e| {
                Error::unavailable(
                    Code::IndexBusy,
                    format!("cannot write the search index ({e}); is another kith-central using this data directory?"),
                )
            })?),
        };
        f(writer).map_err(|e| {
            *guard = None;
            match e {
                Error::Unavailable { .. } => e,
                other => Error::unavailable(Code::IndexUnavailable, other.to_string()),
            }
        })
    }

    /// The hit of the document at `addr`, with the start of its text as
    /// snippet (`highlight` marks the matches of the hits a search returns).
    fn hit_at(
        &self,
        searcher: &tantivy::Searcher,
        addr: DocAddress,
        score: f32,
    ) -> Result<IndexHit> {
        let doc: TantivyDocument = searcher.doc(addr).map_err(index_err)?;
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
        Ok(IndexHit {
            run_id: text_of(f.run_id),
            chunk_id: text_of(f.chunk_id),
            score,
            role: text_of(f.role),
            snippet: text_start(&text),
            text,
            line_start: u64_of(f.line_start),
            line_end: u64_of(f.line_end),
            started_at: text_of(f.started_at),
            intent: Some(text_of(f.intent)).filter(|s| !s.is_empty()),
            machine: text_of(f.machine),
            agent_runtime: AgentRuntime::parse(&text_of(f.runtime)).unwrap_or(AgentRuntime::Other),
        })
    }

    /// Starts training the vectors' ANN index on a thread of its own when
    /// one is due and none is training.
    fn train_ann_when_due(&self) {
        let due = read(&self.vectors)
            .as_ref()
            .is_some_and(VectorStore::ann_due);
        if !due || self.ann_training.swap(true, Ordering::AcqRel) {
            return;
        }
        let vectors = Arc::clone(&self.vectors);
        let training = Arc::clone(&self.ann_training);
        let spawned = std::thread::Builder::new()
            .name("kith-ann".into())
            .spawn(move || {
                // Training takes minutes of CPU at a million vectors:
                // searches go first.
                crate::priority::lower(crate::priority::MODEL);
                let started = std::time::Instant::now();
                if let Some(n) = vectors::train_ann(&vectors) {
                    tracing::info!(
                        vectors = n,
                        seconds = started.elapsed().as_secs_f64(),
                        "ANN index trained"
                    );
                }
                training.store(false, Ordering::Release);
            });
        if let Err(e) = spawned {
            tracing::warn!("cannot start ANN training: {e}");
            self.ann_training.store(false, Ordering::Release);
        }
    }

    /// The first `limit` of the ranked chunk keys that the viewer may read
    /// and that pass the filters, with their addresses. Each key is looked
    /// up in the segments' term dictionaries, largest segment first, until
    /// its live copy is found (a re-indexed run leaves deleted copies), then
    /// checked against the viewer's bit set; keys after the `limit`-th
    /// readable one are never looked up. (A `TermSetQuery` over the keys
    /// walks the whole term dictionary: a quarter of a semantic search's
    /// time at 1M chunks.)
    fn first_readable(
        &self,
        searcher: &tantivy::Searcher,
        viewer: &Readability,
        filters: &Filters,
        ranked: &[(u64, f32)],
        limit: usize,
    ) -> Result<Vec<(DocAddress, f32)>> {
        let allowed = self.allowed_docs(searcher, viewer, filters)?;
        let mut segments = Vec::new();
        for (ord, segment) in searcher.segment_readers().iter().enumerate() {
            let inverted = segment
                .inverted_index(self.fields.chunk_key)
                .map_err(index_err)?;
            segments.push((ord as SegmentOrdinal, segment, inverted, &allowed[ord]));
        }
        segments.sort_by_key(|(_, segment, ..)| std::cmp::Reverse(segment.num_docs()));
        let mut out = Vec::with_capacity(limit);
        'keys: for &(key, score) in ranked {
            if out.len() == limit {
                break;
            }
            let term = Term::from_field_u64(self.fields.chunk_key, key);
            for (ord, segment, inverted, allowed) in &segments {
                let postings = inverted
                    .read_postings(&term, IndexRecordOption::Basic)
                    .map_err(|e| index_err(e.into()))?;
                let Some(mut postings) = postings else {
                    continue;
                };
                let mut doc = postings.doc();
                while doc != TERMINATED && segment.is_deleted(doc) {
                    doc = postings.advance();
                }
                if doc != TERMINATED {
                    // The live copy: readable or not, there is no other.
                    if allowed.contains(doc) {
                        out.push((DocAddress::new(*ord, doc), score));
                    }
                    continue 'keys;
                }
            }
        }
        Ok(out)
    }

    /// What a person typed, as a text query: every word is searched for,
    /// OR-ed (BM25 ranks chunks that match more of them first), and a
    /// "quoted phrase" as a phrase. Nothing else is syntax: `-rf`,
    /// `--force`, `a:b`, `AND`, `(` and `*` are words or nothing, as in a
    /// shell's history search (tantivy's own query language read `-force`
    /// as "without force", and a lone `'` as the start of a phrase).
    fn text_query(&self, query: &str) -> Box<dyn Query> {
        let Ok(mut analyzer) = self.index.tokenizer_for_field(self.fields.text) else {
            return Box::new(EmptyQuery);
        };
        let mut terms_of = |text: &str| {
            let mut stream = analyzer.token_stream(text);
            let mut terms = Vec::new();
            while stream.advance() {
                terms.push(Term::from_field_text(
                    self.fields.text,
                    &stream.token().text,
                ));
            }
            terms
        };
        let mut single = Vec::new();
        let mut clauses: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        for (piece, quoted) in words::pieces(query) {
            let terms = terms_of(piece);
            // A phrase, or a word the tokenizer splits (`src/main.rs`,
            // `node_modules`, `git-lfs`), which also ranks its pieces side
            // by side first.
            if terms.len() > 1 {
                clauses.push((Occur::Should, Box::new(PhraseQuery::new(terms.clone()))));
                if quoted {
                    continue;
                }
            }
            single.extend(terms);
        }
        let mut seen = std::collections::HashSet::new();
        single.retain(|t| seen.insert(t.clone()));
        clauses.extend(single.into_iter().map(|t| {
            let q: Box<dyn Query> = Box::new(TermQuery::new(t, IndexRecordOption::WithFreqs));
            (Occur::Should, q)
        }));
        Box::new(BooleanQuery::new(clauses))
    }

    /// The hits of ranked documents, in order.
    fn hits_of(
        &self,
        searcher: &tantivy::Searcher,
        ranked: Vec<(DocAddress, f32)>,
    ) -> Result<Vec<IndexHit>> {
        ranked
            .into_iter()
            .map(|(addr, score)| self.hit_at(searcher, addr, score))
            .collect()
    }

    /// The best `limit` chunks for `query` by BM25, among those the viewer
    /// may read that pass the filters, scored with statistics of those
    /// chunks alone (`stats`): nothing else moves a score.
    fn keyword_ranked(
        &self,
        searcher: &tantivy::Searcher,
        viewer: &Readability,
        query: &str,
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<(DocAddress, f32)>> {
        let allowed = self.allowed_docs(searcher, viewer, filters)?;
        let stats = ReadableStats::new(searcher, &allowed, self.fields.text);
        if stats.n_docs().map_err(index_err)? == 0 {
            return Ok(Vec::new());
        }
        let collector = AllowedTopDocs {
            limit,
            allowed: allowed.clone(),
        };
        let hits = searcher
            .search_with_statistics_provider(&*self.text_query(query), &collector, &stats)
            .map_err(index_err)?;
        Ok(hits
            .into_iter()
            .map(|(score, addr)| (addr, score))
            .collect())
    }

    /// The `limit` chunks nearest to `vector`, among those the viewer may
    /// read that pass the filters.
    fn semantic_ranked(
        &self,
        searcher: &tantivy::Searcher,
        viewer: &Readability,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<(DocAddress, f32)>> {
        let no_vectors = || {
            Error::unavailable(
                Code::EmbedderUnavailable,
                "no vectors: no embedder is attached",
            )
        };
        let candidates = {
            let guard = read(&self.vectors);
            let store = guard.as_ref().ok_or_else(no_vectors)?;
            store.ann_candidates(vector, (4 * limit).max(ANN_CANDIDATES))
        };
        // Large store: the nearest vectors by the ANN index, of which the
        // viewer keeps those it may read that pass the filters. When too few
        // are left (a narrow filter, or little of the store readable), the
        // exact search below ranks just what the viewer may read.
        if let Some(candidates) = candidates {
            let best = self.first_readable(searcher, viewer, filters, &candidates, limit)?;
            if best.len() == limit {
                return Ok(best);
            }
        }
        // Exact: filter first, so only chunks this viewer may read (and that
        // pass the filters) are ranked at all.
        let readable: KeyMap<DocAddress> = searcher
            .search(
                &BooleanQuery::new(self.filter_queries(viewer, filters)),
                &KeyCollector,
            )
            .map_err(index_err)?
            .into_iter()
            .collect();
        let best = read(&self.vectors).as_ref().ok_or_else(no_vectors)?.top_k(
            vector,
            limit,
            readable.keys().copied(),
        );
        Ok(best
            .into_iter()
            .filter_map(|(key, score)| Some((*readable.get(&key)?, score)))
            .collect())
    }

    /// The documents the viewer may read that pass the filters, one bit set
    /// per segment of `searcher` (cached while the segment lives).
    fn allowed_docs(
        &self,
        searcher: &tantivy::Searcher,
        viewer: &Readability,
        filters: &Filters,
    ) -> Result<Vec<Arc<allowed::Allowed>>> {
        // Everything `filter_queries` reads.
        let key = format!("{viewer:?} {filters:?}");
        self.allowed
            .get(key, searcher.segment_readers(), || {
                BooleanQuery::new(self.filter_queries(viewer, filters))
                    .weight(EnableScoring::disabled_from_searcher(searcher))
            })
            .map_err(index_err)
    }

    /// `privacy::Rule` as a tantivy query; `None` admits every document (a
    /// condition on a field an index built by an older kith-central lacks:
    /// such an index counts it until `reindex`, and the registry re-checks
    /// every hit).
    fn render(&self, rule: &Rule) -> Option<Box<dyn Query>> {
        let f = &self.fields;
        let exact = |field: Field, value: &str| -> Option<Box<dyn Query>> {
            Some(Box::new(TermQuery::new(
                Term::from_field_text(field, value),
                IndexRecordOption::Basic,
            )))
        };
        match rule {
            Rule::Any(rules) => {
                let any: Option<Vec<_>> = rules
                    .iter()
                    .map(|r| Some((Occur::Should, self.render(r)?)))
                    .collect();
                Some(Box::new(BooleanQuery::new(any?)))
            }
            Rule::All(rules) => {
                let mut all: Vec<(Occur, Box<dyn Query>)> = Vec::new();
                for rule in rules {
                    if let Rule::NotQuarantined = rule {
                        if let Some(sf) = f.standing {
                            let quarantined = Term::from_field_u64(sf.quarantined, 1);
                            all.push((
                                Occur::MustNot,
                                Box::new(TermQuery::new(quarantined, IndexRecordOption::Basic)),
                            ));
                        }
                    } else if let Some(q) = self.render(rule) {
                        all.push((Occur::Must, q));
                    }
                }
                if all.iter().all(|(occur, _)| *occur == Occur::MustNot) {
                    if all.is_empty() {
                        return None;
                    }
                    // A boolean query of exclusions alone matches nothing.
                    all.push((Occur::Must, Box::new(AllQuery)));
                }
                Some(Box::new(BooleanQuery::new(all)))
            }
            Rule::NotQuarantined => self.render(&Rule::All(vec![Rule::NotQuarantined])),
            Rule::Owner(user) => exact(f.owner, user),
            Rule::InSubtree(run) => exact(f.ancestry, run),
            Rule::Tagged(tag) => exact(f.tags, tag),
            Rule::CapturedBy(at) => f.standing.map(|sf| {
                let until = Term::from_field_i64(sf.captured_ms, privacy::epoch_ms_or_max(at));
                Box::new(RangeQuery::new(Bound::Unbounded, Bound::Included(until)))
                    as Box<dyn Query>
            }),
        }
    }

    fn filter_queries(
        &self,
        viewer: &Readability,
        filters: &Filters,
    ) -> Vec<(Occur, Box<dyn Query>)> {
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
        let mut out: Vec<(Occur, Box<dyn Query>)> = Vec::new();
        if let Some(readable) = self.render(&viewer.rule()) {
            out.push((Occur::Must, readable));
        }
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
        if let Some(roots) = &filters.roots {
            let any: Vec<(Occur, Box<dyn Query>)> = roots
                .iter()
                .map(|r| (Occur::Should, term(f.root_run_id, r).1))
                .collect();
            out.push((Occur::Must, Box::new(BooleanQuery::new(any))));
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
        if !filters.include_superseded {
            out.push((
                Occur::MustNot,
                Box::new(TermQuery::new(
                    Term::from_field_u64(f.superseded, 1),
                    IndexRecordOption::Basic,
                )),
            ));
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

    fn put_run(&self, run: &Run, standing: &Standing, chunks: &[Chunk]) -> Result<()> {
        let f = &self.fields;
        self.invalidate_rewritten(&run.id, chunks)?;
        let started_ms = kith_shared::timestamp::parse(&run.started_at)
            .map_or(0, kith_shared::timestamp::epoch_ms);
        self.with_writer(|writer| {
            writer.delete_term(Term::from_field_text(f.run_id, &run.id));
            for chunk in chunks {
                let mut doc = TantivyDocument::default();
                let id = chunk_id(&run.id, chunk.chunk_idx);
                doc.add_u64(f.chunk_key, chunk_key(&id));
                doc.add_text(f.chunk_id, id);
                doc.add_text(f.run_id, &run.id);
                doc.add_text(f.owner, &run.user_id);
                for id in standing.ancestry.split('|').filter(|s| !s.is_empty()) {
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
                doc.add_u64(f.superseded, u64::from(standing.superseded));
                if let Some(sf) = f.standing {
                    doc.add_u64(sf.quarantined, u64::from(standing.quarantined));
                    doc.add_i64(sf.captured_ms, standing.captured_ms);
                }
                writer.add_document(doc).map_err(index_err)?;
            }
            Ok(())
        })
    }

    fn commit(&self) -> Result<()> {
        self.with_writer(|w| w.commit().map(drop).map_err(index_err))?;
        self.reader.reload().map_err(index_err)?;
        // The texts read from now on are those put: `put_vectors` checks a
        // vector against them (it holds this lock while it reads them and
        // stores the vectors).
        lock(&self.rewritten).clear();
        Ok(())
    }

    fn clear(&self) -> Result<()> {
        if let Some(store) = write(&self.vectors).as_mut() {
            store.clear().map_err(|e| Error::Internal(e.to_string()))?;
        }
        self.with_writer(|w| {
            w.delete_all_documents().map_err(index_err)?;
            w.commit().map(drop).map_err(index_err)
        })?;
        self.reader.reload().map_err(index_err)
    }

    fn drop_vectors(&self) -> Result<()> {
        let mut guard = write(&self.vectors);
        let attached = guard.take().map(|s| (s.model_id().to_owned(), s.dim()));
        remove_where(&self.dir, is_vectors)?;
        if let Some((model_id, dim)) = attached {
            let store = VectorStore::open(&self.dir, &model_id, dim)
                .map_err(|e| Error::Internal(e.to_string()))?;
            *guard = Some(store);
        }
        Ok(())
    }

    /// The runs' documents go in one commit; then the vector file keeps
    /// only the vectors of chunks still indexed, which also sweeps out any
    /// left by a forget that stopped between the two.
    fn delete_runs(&self, run_ids: &[String]) -> Result<()> {
        let f = &self.fields;
        self.with_writer(|w| {
            for id in run_ids {
                w.delete_term(Term::from_field_text(f.run_id, id));
            }
            w.commit().map_err(index_err)?;
            // A deleted document stays in its segment's files until the
            // segment is rewritten: rewrite each that holds one, so the
            // forgotten text is in no file of the index.
            let holding: Vec<_> = self
                .index
                .searchable_segment_metas()
                .map_err(index_err)?
                .iter()
                .filter(|m| m.has_deletes())
                .map(|m| m.id())
                .collect();
            if !holding.is_empty() {
                w.merge(&holding).wait().map_err(index_err)?;
            }
            w.garbage_collect_files()
                .wait()
                .map(drop)
                .map_err(index_err)
        })?;
        self.reader.reload().map_err(index_err)?;
        let live: std::collections::HashSet<u64> = self
            .reader
            .searcher()
            .search(&AllQuery, &KeyCollector)
            .map_err(index_err)?
            .into_iter()
            .map(|(key, _)| key)
            .collect();
        if let Some(store) = write(&self.vectors).as_mut() {
            store
                .retain(|key| live.contains(&key))
                .map_err(|e| Error::Internal(e.to_string()))?;
        }
        Ok(())
    }

    /// Hits with the start of their text as snippet: the search highlights
    /// the ones it returns (`highlight`).
    fn keyword(
        &self,
        viewer: &Readability,
        query: &str,
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        let searcher = self.reader.searcher();
        let best = self.keyword_ranked(&searcher, viewer, query, filters, limit)?;
        self.hits_of(&searcher, best)
    }

    /// Every query word weighs the same in choosing a snippet: tantivy's
    /// own weights count the word in the whole index, others' private runs
    /// included, which would let them move a viewer's snippet.
    fn highlight(&self, query: &str, hits: &mut [IndexHit]) -> Result<()> {
        let tokenizer = self
            .index
            .tokenizer_for_field(self.fields.text)
            .map_err(index_err)?;
        let snippets = words::Snippets::new(query, tokenizer);
        for hit in hits {
            hit.snippet = snippets.of(&hit.text);
        }
        Ok(())
    }

    fn semantic(
        &self,
        viewer: &Readability,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
    ) -> Result<Vec<IndexHit>> {
        let searcher = self.reader.searcher();
        let best = self.semantic_ranked(&searcher, viewer, vector, filters, limit)?;
        self.hits_of(&searcher, best)
    }

    /// Both sides (in parallel: the query is already embedded) fused by
    /// chunk, then lifted by neighbours (`search::fusion`). Documents are
    /// read only for the candidates the lift has to place and the hits
    /// returned: reading all of both pools' was a sixth of a hybrid search
    /// at 1M chunks.
    fn hybrid(
        &self,
        viewer: &Readability,
        query: &str,
        vector: &[f32],
        filters: &Filters,
        limit: usize,
        semantic_ratio: f32,
    ) -> Result<Vec<IndexHit>> {
        let searcher = self.reader.searcher();
        let pool = limit.max(fusion::POOL);
        // Both sides at once, on threads that are up already: a thread
        // spawned per search started 1.5 ms late at the median (BENCHMARKS.md,
        // "Hybrid's two sides").
        let (keyword, semantic) = self.sides.join(
            || self.keyword_ranked(&searcher, viewer, query, filters, pool),
            || self.semantic_ranked(&searcher, viewer, vector, filters, pool),
        );
        let mut docs = Docs::new(&searcher);
        let keyword = docs.keyed(keyword?)?;
        let semantic = docs.keyed(semantic?)?;
        let fused = fusion::fuse(&keyword, &semantic, semantic_ratio);
        let best = fusion::lift_by_neighbours(&fused, limit, |key| {
            let hit = docs.hit(self, key)?;
            let (run, idx) = split_chunk_id(&hit.chunk_id).ok_or_else(|| {
                Error::Internal(format!("chunk id {:?} is not <run>-<index>", hit.chunk_id))
            })?;
            let key_of = |i: u32| chunk_key(&chunk_id(run, i));
            Ok::<_, Error>((
                idx.checked_sub(1).map(key_of),
                idx.checked_add(1).map(key_of),
            ))
        })?;
        best.into_iter()
            .map(|(key, score)| {
                let mut hit = docs.hit(self, key)?.clone();
                hit.score = score;
                Ok(hit)
            })
            .collect()
    }

    fn attach_vectors(&self, model_id: &str, dim: usize) -> Result<()> {
        let store = VectorStore::open(&self.dir, model_id, dim)
            .map_err(|e| Error::unavailable(Code::IndexUnavailable, e.to_string()))?;
        *write(&self.vectors) = Some(store);
        self.train_ann_when_due();
        Ok(())
    }

    fn put_vectors(&self, items: &[ChunkVector]) -> Result<()> {
        let unsynced = {
            // A vector made from a text that a run put again since replaced
            // is not kept: the vectorizer embeds the new text. Holding
            // `rewritten` until the vectors are stored keeps `put_run` from
            // dropping them in between; searches only wait for the store.
            let rewritten = lock(&self.rewritten);
            let searcher = self.reader.searcher();
            let mut keyed = Vec::with_capacity(items.len());
            for item in items {
                let key = chunk_key(&item.chunk_id);
                if !rewritten.contains(&key)
                    && self.indexed_text(&searcher, &item.chunk_id)?.as_deref()
                        == Some(item.text.as_str())
                {
                    keyed.push((key, item.vector.clone()));
                }
            }
            let mut guard = write(&self.vectors);
            let store = guard
                .as_mut()
                .ok_or_else(|| Error::Internal("put_vectors before attach_vectors".into()))?;
            store.put(&keyed).and_then(|()| store.write_out())
        };
        // The fsync waits for the disk; searches need not wait with it.
        unsynced
            .and_then(|u| u.map_or(Ok(()), Unsynced::sync))
            .map_err(|e| Error::Internal(e.to_string()))?;
        self.train_ann_when_due();
        // Between trainings the index is saved again as the store grows,
        // so a restart need not train.
        vectors::resave_ann(&self.vectors);
        Ok(())
    }

    fn chunks_to_embed(&self, run_id: &str) -> Result<Vec<(String, String)>> {
        let searcher = self.reader.searcher();
        let run = TermQuery::new(
            Term::from_field_text(self.fields.run_id, run_id),
            IndexRecordOption::Basic,
        );
        let mut docs: Vec<DocAddress> = searcher
            .search(&run, &DocSetCollector)
            .map_err(index_err)?
            .into_iter()
            .collect();
        // In the order they were indexed (the run's chunks are one batch).
        docs.sort_unstable();
        let vectors = read(&self.vectors);
        let mut out = Vec::with_capacity(docs.len());
        for addr in docs {
            let doc: TantivyDocument = searcher.doc(addr).map_err(index_err)?;
            let text_of = |field: Field| {
                doc.get_first(field)
                    .and_then(|v| v.as_str())
                    .unwrap_or_default()
                    .to_owned()
            };
            let id = text_of(self.fields.chunk_id);
            if !vectors.as_ref().is_some_and(|s| s.contains(chunk_key(&id))) {
                out.push((id, text_of(self.fields.text)));
            }
        }
        Ok(out)
    }

    fn n_chunks(&self) -> Result<u64> {
        Ok(self.reader.searcher().num_docs())
    }

    fn similarity(&self, vector: &[f32], chunk_ids: &[String]) -> Result<Vec<Option<f32>>> {
        let guard = read(&self.vectors);
        let Some(store) = guard.as_ref() else {
            return Ok(vec![None; chunk_ids.len()]);
        };
        let keys: Vec<u64> = chunk_ids.iter().map(|id| chunk_key(id)).collect();
        let found: KeyMap<f32> = store
            .top_k(vector, keys.len(), keys.iter().copied())
            .into_iter()
            .collect();
        Ok(keys.iter().map(|k| found.get(k).copied()).collect())
    }

    fn n_chunks_of_run(&self, run_id: &str) -> Result<u64> {
        // Counted over live documents: `doc_freq` still counts the chunks a
        // run put again (a Gemini chain) replaced, until segments merge.
        let term = Term::from_field_text(self.fields.run_id, run_id);
        let query = TermQuery::new(term, IndexRecordOption::Basic);
        let n = self
            .reader
            .searcher()
            .search(&query, &tantivy::collector::Count)
            .map_err(index_err)?;
        Ok(n as u64)
    }

    fn outdated(&self) -> Option<String> {
        let words = match self
            .index
            .schema()
            .get_field_entry(self.fields.text)
            .field_type()
        {
            tantivy::schema::FieldType::Str(opts) => opts
                .get_indexing_options()
                .map(|o| o.tokenizer().to_owned()),
            _ => None,
        };
        if words.as_deref() == Some(STEMS) {
            return Some(
                "the search index matches words by their stem only, as an older kith-central \
                 built it (\"win\" does not find \"won\")"
                    .to_owned(),
            );
        }
        self.fields.standing.is_none().then(|| {
            "the search index does not know which runs are quarantined or when each was \
             captured, as an older kith-central built it (such runs count in the keyword \
             scores of those they are shared with, though never shown)"
                .to_owned()
        })
    }
}

/// Removes the keyword index in `dir` and keeps the vectors (`vectors-*`),
/// so `reindex` builds the index anew without embedding every chunk again:
/// the chunks it puts again have the same ids and texts.
pub(crate) fn remove_keeping_vectors(dir: &Path) -> std::io::Result<()> {
    remove_where(dir, |name| !is_vectors(name))
}

/// Whether a file of the index folder is a model's vectors (or their ANN
/// index).
fn is_vectors(name: &str) -> bool {
    name.starts_with("vectors-")
}

/// Removes each entry of `dir` whose name `gone` accepts.
fn remove_where(dir: &Path, gone: impl Fn(&str) -> bool) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if !gone(&entry.file_name().to_string_lossy()) {
            continue;
        }
        if entry.file_type()?.is_dir() {
            std::fs::remove_dir_all(entry.path())?;
        } else {
            std::fs::remove_file(entry.path())?;
        }
    }
    Ok(())
}

/// The candidates of one hybrid search by chunk key, and the hits of those
/// whose documents were read.
struct Docs<'a> {
    searcher: &'a tantivy::Searcher,
    /// Each segment's chunk keys, opened once per search.
    keys: HashMap<SegmentOrdinal, tantivy::columnar::Column<u64>>,
    address: HashMap<u64, DocAddress>,
    hits: HashMap<u64, IndexHit>,
}

impl<'a> Docs<'a> {
    fn new(searcher: &'a tantivy::Searcher) -> Self {
        Self {
            searcher,
            keys: HashMap::new(),
            address: HashMap::new(),
            hits: HashMap::new(),
        }
    }

    /// Ranked documents as ranked chunk keys (from the `chunk_key` column;
    /// no document is read).
    fn keyed(&mut self, ranked: Vec<(DocAddress, f32)>) -> Result<Vec<(u64, f32)>> {
        let mut out = Vec::with_capacity(ranked.len());
        for (addr, score) in ranked {
            let column = match self.keys.entry(addr.segment_ord) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(
                    chunk_keys(self.searcher.segment_reader(addr.segment_ord))
                        .map_err(index_err)?,
                ),
            };
            if let Some(key) = column.first(addr.doc_id) {
                self.address.insert(key, addr);
                out.push((key, score));
            }
        }
        Ok(out)
    }

    /// The hit of a candidate, its document read the first time.
    fn hit(&mut self, index: &EmbeddedIndex, key: u64) -> Result<&IndexHit> {
        match self.hits.entry(key) {
            Entry::Occupied(e) => Ok(e.into_mut()),
            Entry::Vacant(e) => {
                let addr = self
                    .address
                    .get(&key)
                    .ok_or_else(|| Error::Internal(format!("no document for chunk key {key}")))?;
                Ok(e.insert(index.hit_at(self.searcher, *addr, 0.0)?))
            }
        }
    }
}

/// A segment's `chunk_key` column (a fast field: no document is read).
fn chunk_keys(segment: &SegmentReader) -> tantivy::Result<tantivy::columnar::Column<u64>> {
    segment.fast_fields().u64("chunk_key")
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
            column: chunk_keys(segment)?,
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    use kith_shared::transcript::Role;

    fn placed(ancestry: &str) -> Standing {
        Standing {
            ancestry: ancestry.to_owned(),
            ..Standing::default()
        }
    }

    fn run(id: &str, owner: &str) -> Run {
        Run::for_tests(id, owner)
    }

    fn viewer(user: &str) -> Readability {
        Readability::for_tests(user, Vec::new())
    }

    fn chunks(n: usize, suffix: &str) -> Vec<Chunk> {
        (0..n)
            .map(|i| Chunk {
                chunk_idx: i as u32,
                role: Role::User,
                text: format!("chunk {i}{suffix}"),
                line_start: i as u64,
                line_end: i as u64,
                timestamp: None,
            })
            .collect()
    }

    /// Puts one single-chunk run per (id, text), owned by "u1", and commits.
    fn put_texts(index: &EmbeddedIndex, texts: &[(&str, &str)]) -> Result<()> {
        for (id, text) in texts {
            let chunk = Chunk {
                chunk_idx: 0,
                role: Role::User,
                text: (*text).to_owned(),
                line_start: 0,
                line_end: 0,
                timestamp: None,
            };
            index.put_run(&run(id, "u1"), &placed(&format!("|{id}|")), &[chunk])?;
        }
        index.commit()
    }

    /// The runs a keyword search of `query` finds, sorted.
    fn found(index: &EmbeddedIndex, query: &str) -> Result<Vec<String>> {
        let mut got: Vec<String> = index
            .keyword(&viewer("u1"), query, &Filters::default(), 10)?
            .into_iter()
            .map(|h| h.run_id)
            .collect();
        got.sort();
        Ok(got)
    }

    /// What a person types is words and "phrases", never query syntax.
    #[test]
    fn typed_queries_are_words_and_phrases_not_syntax() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let index = EmbeddedIndex::open(dir.path())?;
        put_texts(
            &index,
            &[
                ("force", "git push --force to the release branch"),
                ("modules", "rm -rf node_modules then reinstall"),
                ("release", "the branch release was pushed by force"),
            ],
        )?;
        let check = |query: &str, want: &[&str]| -> Result<()> {
            assert_eq!(found(&index, query)?, want, "{query:?}");
            Ok(())
        };
        check("--force", &["force", "release"])?;
        check("-rf", &["modules"])?;
        check("node_modules AND (", &["modules"])?;
        check("+release^2 -nothing*", &["force", "release"])?;
        check("title:reinstall", &["modules"])?;
        check("NOT reinstall", &["modules"])?;
        check("Caroline's reinstall?", &["modules"])?;
        check("\"push --force\"", &["force"])?;
        check("\"pushed by\" reinstall", &["modules", "release"])?;
        check("\"unclosed reinstall", &["modules"])?;
        // A split word matches its pieces anywhere, side by side first.
        let ranked: Vec<String> = index
            .keyword(&viewer("u1"), "branch-release", &Filters::default(), 10)?
            .into_iter()
            .map(|h| h.run_id)
            .collect();
        assert_eq!(
            ranked,
            ["release", "force"],
            "\"branch release\" side by side first"
        );
        check("-- ( ) * :", &[])?;
        check("", &[])?;
        Ok(())
    }

    /// An irregular form and its base form are one word, both ways; a word
    /// that only starts like one is not.
    #[test]
    fn irregular_forms_match_their_base_form() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let index = EmbeddedIndex::open(dir.path())?;
        assert_eq!(index.outdated(), None);
        put_texts(
            &index,
            &[
                ("won", "Nate won the regional tournament last week"),
                ("window", "the window manager crashed on resize"),
                ("built", "we built the release and wrote the notes"),
                ("left", "a left join dropped the rows"),
            ],
        )?;
        assert_eq!(found(&index, "When did Nate win?")?, ["won"]);
        assert_eq!(found(&index, "winning")?, ["won"]);
        assert_eq!(found(&index, "window")?, ["window"]);
        assert_eq!(found(&index, "build release")?, ["built"]);
        assert_eq!(found(&index, "who writes notes")?, ["built"]);
        assert_eq!(found(&index, "leave")?, Vec::<String>::new());
        assert_eq!(found(&index, "left")?, ["left"]);
        Ok(())
    }

    /// An index an older kith-central built (stems only, or without the
    /// runs' standing) opens and searches as it was built, says it is
    /// outdated, and is built anew from an empty folder that kept its
    /// vectors.
    #[test]
    fn an_older_index_keeps_working_until_built_anew() -> Result<()> {
        for (words, why_outdated) in [(STEMS, "stem only"), (WORDS, "quarantined")] {
            let dir = tempfile::tempdir()?;
            Index::create_in_dir(dir.path(), schema(words, false).0).map_err(index_err)?;
            std::fs::write(dir.path().join("vectors-m.bin"), b"kept")?;
            let texts = [("won", "Nate won the regional tournament")];
            {
                let index = EmbeddedIndex::open(dir.path())?;
                let why = index.outdated().unwrap_or_default();
                assert!(why.contains(why_outdated), "{why}");
                put_texts(&index, &texts)?;
                assert_eq!(found(&index, "won")?, ["won"]);
                // As built: stems alone do not read "won" as "win".
                let win: &[&str] = if words == STEMS { &[] } else { &["won"] };
                assert_eq!(found(&index, "win")?, win, "{words}");
            }
            remove_keeping_vectors(dir.path())?;
            let left: Vec<String> = std::fs::read_dir(dir.path())?
                .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
                .collect::<std::io::Result<_>>()?;
            assert_eq!(left, ["vectors-m.bin"]);
            let index = EmbeddedIndex::open(dir.path())?;
            assert_eq!(index.outdated(), None);
            put_texts(&index, &texts)?;
            assert_eq!(found(&index, "win")?, ["won"]);
        }
        Ok(())
    }

    /// Another schema altogether is not opened: it names `reindex`.
    #[test]
    fn an_index_of_another_schema_is_not_opened() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let mut b = Schema::builder();
        b.add_text_field("text", STRING);
        Index::create_in_dir(dir.path(), b.build()).map_err(index_err)?;
        let err = EmbeddedIndex::open(dir.path()).err().map(|e| e.to_string());
        assert!(err.unwrap_or_default().contains("reindex"));
        Ok(())
    }

    /// The vectorizer embeds the texts the index holds: a run's chunks in
    /// order until each has a vector of the attached model, none of another
    /// run's.
    #[test]
    fn chunks_to_embed_are_the_indexed_texts_without_a_vector() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let index = EmbeddedIndex::open(dir.path())?;
        index.put_run(&run("r1", "u1"), &placed("|r1|"), &chunks(3, " of r1"))?;
        index.put_run(&run("r2", "u1"), &placed("|r2|"), &chunks(2, " of r2"))?;
        index.commit()?;
        let r1 = |idx: &[u32]| -> Vec<(String, String)> {
            idx.iter()
                .map(|&i| (chunk_id("r1", i), format!("chunk {i} of r1")))
                .collect()
        };
        assert_eq!(index.chunks_to_embed("r1")?, r1(&[0, 1, 2]), "no model yet");
        index.attach_vectors("m", 4)?;
        index.put_vectors(&[vector("r1", 1, "chunk 1 of r1", [1.0, 0.0, 0.0, 0.0])])?;
        assert_eq!(index.chunks_to_embed("r1")?, r1(&[0, 2]));
        index.attach_vectors("another-model", 4)?;
        assert_eq!(index.chunks_to_embed("r1")?, r1(&[0, 1, 2]));
        assert!(index.chunks_to_embed("r3")?.is_empty());
        Ok(())
    }

    /// Dropping the vectors leaves every chunk to embed, removes other
    /// models' files, and keeps the attached model usable.
    #[test]
    fn dropped_vectors_are_embedded_again() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let index = EmbeddedIndex::open(dir.path())?;
        index.attach_vectors("m", 4)?;
        index.put_run(&run("r1", "u1"), &placed("|r1|"), &chunks(2, ""))?;
        index.commit()?;
        let v = vector("r1", 0, "chunk 0", [1.0, 0.0, 0.0, 0.0]);
        index.put_vectors(std::slice::from_ref(&v))?;
        std::fs::write(dir.path().join("vectors-other.bin"), b"x")?;
        index.drop_vectors()?;
        assert!(!dir.path().join("vectors-other.bin").exists());
        assert_eq!(index.chunks_to_embed("r1")?.len(), 2);
        index.put_vectors(&[v])?;
        assert_eq!(index.chunks_to_embed("r1")?.len(), 1);
        Ok(())
    }

    /// The vector `v` of chunk `idx` of `run`, made from `text`.
    fn vector(run: &str, idx: u32, text: &str, v: [f32; 4]) -> ChunkVector {
        ChunkVector {
            chunk_id: chunk_id(run, idx),
            text: text.to_owned(),
            vector: v.to_vec(),
        }
    }

    /// A run put again with a chunk whose text changed (a folded chain's
    /// later delta rewrote a turn) has that chunk embedded again; the
    /// chunks whose text is the same keep their vectors. A vector made
    /// from the old text and arriving late is not kept.
    #[test]
    fn a_chunk_put_again_with_other_text_is_embedded_again() -> Result<()> {
        let dir = tempfile::tempdir()?;
        let index = EmbeddedIndex::open(dir.path())?;
        index.attach_vectors("m", 4)?;
        index.put_run(&run("r1", "u1"), &placed("|r1|"), &chunks(2, " draft"))?;
        index.commit()?;
        let old = |i: u32| vector("r1", i, &format!("chunk {i} draft"), [1.0, 0.0, 0.0, 0.0]);
        index.put_vectors(&[old(0), old(1)])?;
        assert!(index.chunks_to_embed("r1")?.is_empty());
        let mut again = chunks(2, " draft");
        again[1].text = "chunk 1 rewritten".into();
        index.put_run(&run("r1", "u1"), &placed("|r1|"), &again)?;
        // Embedded from the old text before the put, arriving before and
        // after its commit.
        index.put_vectors(&[old(1)])?;
        index.commit()?;
        index.put_vectors(&[old(1)])?;
        let rewritten = [(chunk_id("r1", 1), "chunk 1 rewritten".to_owned())];
        assert_eq!(index.chunks_to_embed("r1")?, rewritten);
        // Durably: a restart does not bring the old vector back.
        drop(index);
        let index = EmbeddedIndex::open(dir.path())?;
        index.attach_vectors("m", 4)?;
        assert_eq!(index.chunks_to_embed("r1")?, rewritten);
        // A chunk the run no longer has loses its vector too, so the run
        // growing back to it later embeds the new text.
        index.put_run(&run("r1", "u1"), &placed("|r1|"), &again[..1])?;
        index.commit()?;
        index.put_run(&run("r1", "u1"), &placed("|r1|"), &again)?;
        index.commit()?;
        assert_eq!(index.chunks_to_embed("r1")?, rewritten);
        index.put_vectors(&[vector("r1", 1, "chunk 1 rewritten", [0.0, 1.0, 0.0, 0.0])])?;
        assert!(index.chunks_to_embed("r1")?.is_empty());
        Ok(())
    }

    /// Past `ANN_MIN` vectors, semantic search goes through the ANN index:
    /// a viewer still sees only their own chunks and those granted to them,
    /// close to the exact answer; a viewer who can read little gets the
    /// exact answer.
    #[test]
    fn ann_semantic_search_keeps_to_what_the_viewer_may_read() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let index = EmbeddedIndex::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let (dim, per_run, n_runs) = (16, 1000, vectors::ANN_MIN / 1000 + 10);
        let all = vectors::tests::corpus(per_run * n_runs, dim, 30, 11);
        index
            .attach_vectors("test-model", dim)
            .unwrap_or_else(|e| panic!("{e}"));
        let mut keys_of: HashMap<&str, Vec<u64>> = HashMap::new();
        let mut owner_of: HashMap<String, &str> = HashMap::new();
        // The vectors of run `r`'s first `n` chunks, of their `suffix`ed
        // texts, once those are committed (as the vectorizer embeds them).
        let embed = |r: usize, n: usize, suffix: &str| {
            let items: Vec<ChunkVector> = (0..n)
                .map(|i| ChunkVector {
                    chunk_id: chunk_id(&format!("r{r}"), i as u32),
                    text: format!("chunk {i}{suffix}"),
                    vector: all[r * per_run + i].clone(),
                })
                .collect();
            index.put_vectors(&items).unwrap_or_else(|e| panic!("{e}"));
        };
        for r in 0..n_runs {
            // alice owns one run (2% of the chunks); bob owns the rest.
            let owner = if r == 0 { "ualice" } else { "ubob" };
            let run_id = format!("r{r}");
            index
                .put_run(
                    &run(&run_id, owner),
                    &placed(&format!("|{run_id}|")),
                    &chunks(per_run, ""),
                )
                .unwrap_or_else(|e| panic!("{e}"));
            keys_of
                .entry(owner)
                .or_default()
                .extend((0..per_run).map(|i| chunk_key(&chunk_id(&run_id, i as u32))));
            owner_of.insert(run_id, owner);
        }
        index.commit().unwrap_or_else(|e| panic!("{e}"));
        for r in 0..n_runs {
            embed(r, per_run, "");
        }
        // Re-indexing runs, here with half their chunks and new texts,
        // leaves deleted copies of their chunks behind and drops their
        // vectors; the new texts are embedded again.
        let again = chunks(per_run / 2, " again");
        for r in 2..12 {
            let run_id = format!("r{r}");
            index
                .put_run(
                    &run(&run_id, "ubob"),
                    &placed(&format!("|{run_id}|")),
                    &again,
                )
                .unwrap_or_else(|e| panic!("{e}"));
        }
        index.commit().unwrap_or_else(|e| panic!("{e}"));
        for r in 2..12 {
            embed(r, per_run / 2, " again");
        }
        while index.ann_training.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        let queries = vectors::tests::corpus(20, dim, 30, 5);
        assert!(
            read(&index.vectors)
                .as_ref()
                .and_then(|s| s.ann_candidates(&queries[0], 1))
                .is_some(),
            "the ANN index was trained"
        );

        // Chunks cut by the re-indexing are nobody's any more.
        let cut: Vec<u64> = (2..12)
            .flat_map(|r| {
                (per_run / 2..per_run)
                    .map(move |i| chunk_key(&chunk_id(&format!("r{r}"), i as u32)))
            })
            .collect();
        keys_of
            .entry("ubob")
            .or_default()
            .retain(|k| !cut.contains(k));
        // carol reads bob's re-indexed runs through grants, nothing else.
        let shared_with_carol = |run_id: &str| (2..12).any(|r| run_id == format!("r{r}"));
        let carol = Readability::for_tests(
            "ucarol",
            (2..12)
                .map(|r| crate::privacy::Grant {
                    grantor: "ubob".into(),
                    scope: crate::privacy::GrantScope::Run(format!("r{r}")),
                    captured_until: None,
                })
                .collect(),
        );
        let carol_keys: Vec<u64> = (2..12)
            .flat_map(|r| {
                (0..per_run / 2).map(move |i| chunk_key(&chunk_id(&format!("r{r}"), i as u32)))
            })
            .collect();

        let (mut found, mut n_reindexed) = (0, 0);
        for q in &queries {
            for (who, reader, readable) in [
                ("ualice", viewer("ualice"), keys_of["ualice"].clone()),
                ("ubob", viewer("ubob"), keys_of["ubob"].clone()),
                ("ucarol", carol.clone(), carol_keys.clone()),
            ] {
                let hits = index
                    .semantic(&reader, q, &Filters::default(), 10)
                    .unwrap_or_else(|e| panic!("{e}"));
                assert_eq!(hits.len(), 10);
                let mut ids: Vec<&str> = hits.iter().map(|h| h.chunk_id.as_str()).collect();
                ids.sort_unstable();
                ids.dedup();
                assert_eq!(ids.len(), 10, "each chunk once, never a deleted copy");
                for h in hits.iter().filter(|h| shared_with_carol(&h.run_id)) {
                    assert!(h.text.ends_with("again"), "a deleted copy: {}", h.text);
                    assert!(h.line_start < per_run as u64 / 2, "a deleted chunk");
                    n_reindexed += 1;
                }
                for h in &hits {
                    let may = match who {
                        "ucarol" => shared_with_carol(&h.run_id),
                        _ => owner_of[&h.run_id] == who,
                    };
                    assert!(may, "{who} got {}", h.chunk_id);
                }
                let exact: Vec<u64> = read(&index.vectors)
                    .as_ref()
                    .map(|s| s.top_k(q, 10, readable))
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, _)| k)
                    .collect();
                let got: Vec<u64> = hits.iter().map(|h| chunk_key(&h.chunk_id)).collect();
                if who == "ualice" {
                    assert_eq!(got, exact, "little readable: the exact answer");
                } else {
                    found += got.iter().filter(|k| exact.contains(k)).count();
                }
            }
        }
        let recall = found as f64 / (2 * 10 * queries.len()) as f64;
        assert!(recall >= 0.8, "ANN recall@10 against exact: {recall}");
        assert!(n_reindexed > 0, "some hits come from re-indexed runs");
    }

    /// Keyword search prunes the text query (block-max WAND) and checks the
    /// viewer's bit sets on the side: its hits are exactly the best-scoring
    /// chunks the viewer may read, in order, across segments, after deletes,
    /// and a viewer never sees a better match they may not read.
    #[test]
    fn keyword_search_returns_the_best_readable_chunks_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let index = EmbeddedIndex::open(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        let words = [
            "alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta",
        ];
        let mut seed = 7u64;
        let mut text = |n_words: usize| {
            (0..n_words)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    words[(seed >> 33) as usize % words.len()]
                })
                .collect::<Vec<_>>()
                .join(" ")
        };
        let mut owner_of: HashMap<String, &str> = HashMap::new();
        let mut put = |run_id: &str, owner: &'static str, n: usize| {
            let chunks: Vec<Chunk> = (0..n)
                .map(|i| Chunk {
                    chunk_idx: i as u32,
                    role: Role::User,
                    text: text(3 + i % 17),
                    line_start: i as u64,
                    line_end: i as u64,
                    timestamp: None,
                })
                .collect();
            index
                .put_run(
                    &run(run_id, owner),
                    &placed(&format!("|{run_id}|")),
                    &chunks,
                )
                .unwrap_or_else(|e| panic!("{e}"));
            owner_of.insert(run_id.to_owned(), owner);
        };
        // Two commits, so two segments; bob's runs are most of the index.
        put("ra1", "ualice", 300);
        for r in 0..4 {
            put(&format!("rb{r}"), "ubob", 600);
        }
        index.commit().unwrap_or_else(|e| panic!("{e}"));
        let alice = viewer("ualice");
        let query = "alpha beta";
        let before = index
            .keyword(&alice, query, &Filters::default(), 10)
            .unwrap_or_else(|e| panic!("{e}"));
        put("ra2", "ualice", 300);
        // Re-indexed: its first copies are deleted.
        put("ra1", "ualice", 200);
        index.commit().unwrap_or_else(|e| panic!("{e}"));

        let carol = Readability::for_tests(
            "ucarol",
            vec![crate::privacy::Grant {
                grantor: "ubob".into(),
                scope: crate::privacy::GrantScope::Run("rb2".into()),
                captured_until: None,
            }],
        );
        let may_read = |who: &str, run_id: &str| match who {
            "ucarol" => run_id == "rb2",
            _ => owner_of[run_id] == who,
        };
        // The reference: every chunk the text query matches, scored alone
        // with the reader's statistics, then filtered and ordered by score
        // (ties: earlier document first).
        let searcher = index.reader.searcher();
        let text_query = index.text_query(query);
        let hit_at = |addr: DocAddress| {
            index
                .hit_at(&searcher, addr, 0.0)
                .unwrap_or_else(|e| panic!("{e}"))
        };
        for (who, reader) in [
            ("ualice", alice.clone()),
            ("ubob", viewer("ubob")),
            ("ucarol", carol),
        ] {
            let allowed = index
                .allowed_docs(&searcher, &reader, &Filters::default())
                .unwrap_or_else(|e| panic!("{e}"));
            let stats = ReadableStats::new(&searcher, &allowed, index.fields.text);
            let mut all = searcher
                .search_with_statistics_provider(
                    &*text_query,
                    &tantivy::collector::TopDocs::with_limit(100_000).order_by_score(),
                    &stats,
                )
                .unwrap_or_else(|e| panic!("{e}"));
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for limit in [1, 10, 50] {
                let hits = index
                    .keyword(&reader, query, &Filters::default(), limit)
                    .unwrap_or_else(|e| panic!("{e}"));
                let want: Vec<String> = all
                    .iter()
                    .map(|&(_, addr)| hit_at(addr))
                    .filter(|h| may_read(who, &h.run_id))
                    .take(limit)
                    .map(|h| h.chunk_id)
                    .collect();
                let got: Vec<String> = hits.iter().map(|h| h.chunk_id.clone()).collect();
                assert_eq!(got, want, "{who}, limit {limit}");
                assert!(
                    hits.iter().all(|h| may_read(who, &h.run_id)),
                    "{who} read another's chunk"
                );
            }
        }
        // carol's grant is revoked: what it covered is gone from her next
        // search, though her earlier searches filled the cache.
        let revoked = index
            .keyword(&viewer("ucarol"), query, &Filters::default(), 50)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            revoked.is_empty(),
            "a revoked grant still reads: {revoked:?}"
        );
        let after = index
            .keyword(&alice, query, &Filters::default(), 300)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(
            after.iter().any(|h| h.run_id == "ra2"),
            "the new segment is searched"
        );
        assert!(
            after
                .iter()
                .all(|h| h.run_id != "ra1" || h.line_start < 200),
            "a deleted copy came back"
        );
        assert_eq!(before.len(), 10);
    }

    /// Issue #22: bob's BM25 scores moved when alice privately ingested runs
    /// holding his words. A viewer's keyword scores are those of an index
    /// holding only what it may read, deleted copies and others' runs in
    /// other segments included.
    #[test]
    fn keyword_scores_are_those_of_the_viewers_runs_alone() {
        let texts = |run: &str| -> Vec<Chunk> {
            [
                "quokka lantern cache on staging",
                "the lantern step failed on a long build with many words in it",
                "quokka quokka parser",
            ]
            .iter()
            .enumerate()
            .map(|(i, t)| Chunk {
                chunk_idx: i as u32,
                role: Role::User,
                // Runs of different lengths: no two scores tie.
                text: format!("{t} {run}{}", if run == "rb2" { " and more" } else { "" }),
                line_start: i as u64,
                line_end: i as u64,
                timestamp: None,
            })
            .collect()
        };
        let scores = |index: &EmbeddedIndex| -> Vec<(String, f32)> {
            index
                .keyword(&viewer("ubob"), "quokka lantern", &Filters::default(), 20)
                .unwrap_or_else(|e| panic!("{e}"))
                .into_iter()
                .map(|h| (h.chunk_id, h.score))
                .collect()
        };
        let put = |index: &EmbeddedIndex, id: &str, owner: &str| {
            index
                .put_run(&run(id, owner), &placed(&format!("|{id}|")), &texts(id))
                .unwrap_or_else(|e| panic!("{e}"));
            index.commit().unwrap_or_else(|e| panic!("{e}"));
        };
        let alone_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let alone = EmbeddedIndex::open(alone_dir.path()).unwrap_or_else(|e| panic!("{e}"));
        put(&alone, "rb1", "ubob");
        put(&alone, "rb2", "ubob");

        let shared_dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let shared = EmbeddedIndex::open(shared_dir.path()).unwrap_or_else(|e| panic!("{e}"));
        put(&shared, "rb1", "ubob");
        for i in 0..20 {
            put(&shared, &format!("ra{i}"), "ualice");
        }
        put(&shared, "rb2", "ubob");
        // Re-indexed: its first copies stay in their segment, deleted.
        put(&shared, "rb1", "ubob");

        let want = scores(&alone);
        assert_eq!(want.len(), 6, "{want:?}");
        assert_eq!(scores(&shared), want);
        assert!(
            scores(&shared).iter().all(|(id, _)| id.starts_with("rb")),
            "bob reads only his own"
        );
        let nothing = shared
            .keyword(&viewer("ucarol"), "quokka", &Filters::default(), 20)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(nothing.is_empty(), "carol may read nothing: {nothing:?}");
    }
}
