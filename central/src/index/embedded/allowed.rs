//! What a viewer may see, as one bit set per index segment, and the keyword
//! top-k that checks it.
//!
//! tantivy prunes a disjunction of terms with block-max WAND (it skips
//! blocks of documents that cannot reach the current top k), but not once a
//! filter clause is intersected with it: then every matching document is
//! scored, which was most of a keyword search at a million chunks. So the
//! filter (readability + search filters) is evaluated on its own into a bit
//! set per segment, kept while the segment lives (segments never change;
//! deletions are checked separately), and the pruned text query asks it
//! about each document it proposes. Beside each bit set, BM25's totals over
//! it (`stats`), counted once per state of the segment's deletions.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::{Arc, Mutex};

use tantivy::collector::{Collector, SegmentCollector};
use tantivy::index::SegmentId;
use tantivy::query::Weight;
use tantivy::schema::Field;
use tantivy::{BitSet, DocAddress, DocId, Score, SegmentOrdinal, SegmentReader, TantivyError};

/// Distinct filters kept; past this the cache starts over. Each costs one
/// bit per chunk (125 KB at a million).
const MAX_FILTERS: usize = 32;

/// Per filter (a viewer's readability and the search filters, as a key),
/// the documents it allows in each live segment.
#[derive(Default)]
pub(super) struct AllowedCache(Mutex<HashMap<String, HashMap<SegmentId, Arc<Allowed>>>>);

/// The documents a filter allows in one segment (deleted ones included).
pub(super) struct Allowed {
    docs: BitSet,
    /// Live allowed documents and their tokens in the text field, with the
    /// segment's deleted count when they were counted (deletes only grow).
    totals: Mutex<Option<Totals>>,
}

#[derive(Clone, Copy)]
struct Totals {
    n_deleted: u32,
    n_docs: u64,
    n_tokens: u64,
}

impl Allowed {
    pub(super) fn contains(&self, doc: DocId) -> bool {
        self.docs.contains(doc)
    }

    /// Live allowed documents of `segment` and their tokens in `text` (the
    /// field norms: token counts, exact up to 40 and rounded above, the
    /// lengths BM25 scores by); counted again only after new deletes.
    pub(super) fn totals(
        &self,
        segment: &SegmentReader,
        text: Field,
    ) -> tantivy::Result<(u64, u64)> {
        let n_deleted = segment.num_deleted_docs();
        let mut cached = self.totals.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(t) = *cached {
            if t.n_deleted == n_deleted {
                return Ok((t.n_docs, t.n_tokens));
            }
        }
        let norms = segment.get_fieldnorms_reader(text)?;
        let (mut n_docs, mut n_tokens) = (0u64, 0u64);
        for doc in 0..segment.max_doc() {
            if self.docs.contains(doc) && !segment.is_deleted(doc) {
                n_docs += 1;
                n_tokens += u64::from(norms.fieldnorm(doc));
            }
        }
        *cached = Some(Totals {
            n_deleted,
            n_docs,
            n_tokens,
        });
        Ok((n_docs, n_tokens))
    }
}

impl AllowedCache {
    /// The bit sets of `filter` for the searcher's segments, by segment
    /// ordinal, computed for the segments not seen before with this key.
    pub(super) fn get(
        &self,
        key: String,
        segments: &[SegmentReader],
        filter: impl Fn() -> tantivy::Result<Box<dyn Weight>>,
    ) -> tantivy::Result<Vec<Arc<Allowed>>> {
        // Copied, not taken: concurrent searches of the same viewer all hit.
        let known = self.lock().get(&key).cloned().unwrap_or_default();
        let mut weight: Option<Box<dyn Weight>> = None;
        let mut out = Vec::with_capacity(segments.len());
        let mut live = HashMap::with_capacity(segments.len());
        for segment in segments {
            let bits = match known.get(&segment.segment_id()) {
                Some(bits) => Arc::clone(bits),
                None => {
                    let weight = match &mut weight {
                        Some(w) => w,
                        slot @ None => slot.insert(filter()?),
                    };
                    Arc::new(Allowed {
                        docs: allowed_in(weight.as_ref(), segment)?,
                        totals: Mutex::default(),
                    })
                }
            };
            live.insert(segment.segment_id(), Arc::clone(&bits));
            out.push(bits);
        }
        // Segments merged away since are dropped.
        let mut cache = self.lock();
        if cache.len() >= MAX_FILTERS && !cache.contains_key(&key) {
            cache.clear();
        }
        cache.insert(key, live);
        Ok(out)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<SegmentId, Arc<Allowed>>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The documents of `segment` that `filter` matches.
fn allowed_in(filter: &dyn Weight, segment: &SegmentReader) -> tantivy::Result<BitSet> {
    let mut bits = BitSet::with_max_value(segment.max_doc());
    filter.for_each_no_score(segment, &mut |docs| {
        for &doc in docs {
            bits.insert(doc);
        }
    })?;
    Ok(bits)
}

/// The `limit` best-scoring live documents among those allowed, pruned with
/// block-max WAND where the query allows it.
pub(super) struct AllowedTopDocs {
    pub limit: usize,
    /// By segment ordinal (`AllowedCache::get`).
    pub allowed: Vec<Arc<Allowed>>,
}

pub(super) struct AllowedTopSegment {
    segment_ord: SegmentOrdinal,
    allowed: Arc<Allowed>,
    limit: usize,
    /// A min-heap: the worst of the best is on top.
    top: BinaryHeap<Reverse<Scored>>,
}

impl AllowedTopSegment {
    /// The score a document must beat to enter (WAND skips what cannot).
    fn threshold(&self) -> Score {
        match self.top.peek() {
            Some(Reverse(worst)) if self.top.len() >= self.limit => worst.score,
            _ => Score::MIN,
        }
    }
}

impl Collector for AllowedTopDocs {
    type Fruit = Vec<(Score, DocAddress)>;
    type Child = AllowedTopSegment;

    fn for_segment(
        &self,
        segment_ord: SegmentOrdinal,
        _segment: &SegmentReader,
    ) -> tantivy::Result<AllowedTopSegment> {
        let allowed = self.allowed.get(segment_ord as usize).ok_or_else(|| {
            TantivyError::InternalError(format!("no filter for segment {segment_ord}"))
        })?;
        Ok(AllowedTopSegment {
            segment_ord,
            allowed: Arc::clone(allowed),
            limit: self.limit.max(1),
            top: BinaryHeap::with_capacity(self.limit.max(1) + 1),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn collect_segment(
        &self,
        weight: &dyn Weight,
        segment_ord: u32,
        reader: &SegmentReader,
    ) -> tantivy::Result<Vec<(Score, DocAddress)>> {
        let mut top = self.for_segment(segment_ord, reader)?;
        weight.for_each_pruning(Score::MIN, reader, &mut |doc, score| {
            if !reader.is_deleted(doc) {
                top.collect(doc, score);
            }
            top.threshold()
        })?;
        Ok(top.harvest())
    }

    fn merge_fruits(
        &self,
        fruits: Vec<Vec<(Score, DocAddress)>>,
    ) -> tantivy::Result<Vec<(Score, DocAddress)>> {
        let mut all = fruits.concat();
        all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        all.truncate(self.limit.max(1));
        Ok(all)
    }
}

impl SegmentCollector for AllowedTopSegment {
    type Fruit = Vec<(Score, DocAddress)>;

    /// Documents arrive in increasing order, so on equal scores the earlier
    /// one stays (the order of tantivy's own `TopDocs`).
    fn collect(&mut self, doc: DocId, score: Score) {
        if !self.allowed.contains(doc) || score <= self.threshold() {
            return;
        }
        if self.top.len() >= self.limit {
            self.top.pop();
        }
        self.top.push(Reverse(Scored { score, doc }));
    }

    fn harvest(self) -> Vec<(Score, DocAddress)> {
        let ord = self.segment_ord;
        self.top
            .into_sorted_vec()
            .into_iter()
            .map(|Reverse(s)| (s.score, DocAddress::new(ord, s.doc)))
            .collect()
    }
}

/// A document and its score, ordered by score, then earlier document first.
#[derive(PartialEq)]
struct Scored {
    score: Score,
    doc: DocId,
}

impl Eq for Scored {}

impl Ord for Scored {
    fn cmp(&self, other: &Self) -> Ordering {
        self.score
            .total_cmp(&other.score)
            .then_with(|| other.doc.cmp(&self.doc))
    }
}

impl PartialOrd for Scored {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
