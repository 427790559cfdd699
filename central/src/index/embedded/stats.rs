//! BM25's corpus statistics counted over what one viewer may read.
//!
//! BM25 weighs a word by how many documents hold it (idf) and a document by
//! its length against the average. tantivy counts both over the whole
//! index, so a viewer's scores moved when someone else ingested private
//! text with the same words: a side channel on others' runs. These
//! statistics count only the live documents of the viewer's bit sets
//! (`allowed`: readability and the search's filters), so a viewer's scores
//! and order depend on nothing it may not read.

use std::sync::{Arc, OnceLock};

use tantivy::query::Bm25StatisticsProvider;
use tantivy::schema::{Field, IndexRecordOption};
use tantivy::{DocSet, Searcher, Term, TERMINATED};

use super::allowed::Allowed;

/// Statistics of one search: made per query, each figure computed once.
pub(super) struct ReadableStats<'a> {
    searcher: &'a Searcher,
    /// By segment ordinal, as `AllowedCache::get` answers.
    allowed: &'a [Arc<Allowed>],
    /// The one scored field; its token total is all a text query asks.
    text: Field,
    /// Readable live documents and their tokens in `text` (each segment's
    /// share is cached with its bit set).
    totals: OnceLock<(u64, u64)>,
}

impl<'a> ReadableStats<'a> {
    pub(super) fn new(searcher: &'a Searcher, allowed: &'a [Arc<Allowed>], text: Field) -> Self {
        Self {
            searcher,
            allowed,
            text,
            totals: OnceLock::new(),
        }
    }

    /// How many live documents the viewer may read (0: nothing to score).
    pub(super) fn n_docs(&self) -> tantivy::Result<u64> {
        Ok(self.totals()?.0)
    }

    fn totals(&self) -> tantivy::Result<(u64, u64)> {
        if let Some(totals) = self.totals.get() {
            return Ok(*totals);
        }
        let (mut n_docs, mut n_tokens) = (0u64, 0u64);
        for (segment, allowed) in self.searcher.segment_readers().iter().zip(self.allowed) {
            let (docs, tokens) = allowed.totals(segment, self.text)?;
            n_docs += docs;
            n_tokens += tokens;
        }
        Ok(*self.totals.get_or_init(|| (n_docs, n_tokens)))
    }
}

impl Bm25StatisticsProvider for ReadableStats<'_> {
    fn total_num_tokens(&self, field: Field) -> tantivy::Result<u64> {
        if field != self.text {
            return Err(tantivy::TantivyError::InvalidArgument(format!(
                "only the text field is scored, not {field:?}"
            )));
        }
        Ok(self.totals()?.1)
    }

    fn total_num_docs(&self) -> tantivy::Result<u64> {
        self.n_docs()
    }

    fn doc_freq(&self, term: &Term) -> tantivy::Result<u64> {
        let mut n = 0u64;
        for (segment, allowed) in self.searcher.segment_readers().iter().zip(self.allowed) {
            let inverted = segment.inverted_index(term.field())?;
            let Some(mut postings) = inverted.read_postings(term, IndexRecordOption::Basic)? else {
                continue;
            };
            let mut doc = postings.doc();
            while doc != TERMINATED {
                if allowed.contains(doc) && !segment.is_deleted(doc) {
                    n += 1;
                }
                doc = postings.advance();
            }
        }
        Ok(n)
    }
}
