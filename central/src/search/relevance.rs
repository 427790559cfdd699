//! Whether a hit is about the query at all. Ranking always fills a page
//! (semantic search has a nearest chunk for any query, "xyzzyqwerty"
//! included), so each hit answered is also held to an absolute floor: it
//! is strong when its text holds enough of the query's content words
//! (`coverage`, stemmed as the index reads words) or its meaning is close
//! enough to the query's (`similarity`, the cosine of the two vectors of
//! the search's model); else it is weak. A search whose every hit is weak
//! has nothing relevant, and says so; the context pack leaves weak hits
//! out. The thresholds were tuned on the labelled set's tuning split and
//! are reported on the held-out one (BENCHMARKS.md, Relevance floor).

use std::collections::HashSet;

use crate::index::{fusion, words};

/// A hit holding at least this share of the query's content words is
/// strong, whatever its vector says.
pub(crate) const MIN_COVERAGE: f32 = 0.5;
/// A hit at least this similar to the query (cosine) is strong, whatever
/// words it holds.
pub(crate) const MIN_SIMILARITY: f32 = 0.26;

/// The query's content words, as the index reads words.
pub(crate) struct QueryWords(HashSet<String>);

impl QueryWords {
    pub(crate) fn of(query: &str) -> Self {
        let mut analyzer = words::analyzer();
        Self(
            words::tokens(&mut analyzer, &fusion::content_words(query))
                .into_iter()
                .collect(),
        )
    }

    /// The share of the query's content words `text` holds, 0 to 1 (1 for
    /// a query of none).
    pub(crate) fn coverage(&self, text: &str) -> f32 {
        if self.0.is_empty() {
            return 1.0;
        }
        let mut analyzer = words::analyzer();
        let held: HashSet<String> = words::tokens(&mut analyzer, text).into_iter().collect();
        self.0.iter().filter(|w| held.contains(*w)).count() as f32 / self.0.len() as f32
    }
}

/// Below the floor: few of the query's words, and a meaning far from it
/// (or no vector to tell).
pub(crate) fn weak(coverage: f32, similarity: Option<f32>) -> bool {
    coverage < MIN_COVERAGE && similarity.is_none_or(|s| s < MIN_SIMILARITY)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coverage_counts_the_querys_content_words_by_stem() {
        let q = QueryWords::of("why did the importer retry on 429?");
        // "importer", "retry", "429": question words and stopwords left out.
        assert_eq!(q.coverage("The importer retries after a 429."), 1.0);
        assert!((q.coverage("retrying the upload") - 1.0 / 3.0).abs() < 1e-6);
        assert_eq!(q.coverage("nothing of it here"), 0.0);
        assert_eq!(QueryWords::of("xyzzyqwerty").coverage("plain text"), 0.0);
    }

    #[test]
    fn a_hit_is_weak_only_when_neither_its_words_nor_its_meaning_clear_the_floor() {
        let cases = [
            (1.0, None, false),
            (MIN_COVERAGE, Some(0.0), false),
            (0.0, Some(MIN_SIMILARITY), false),
            (0.0, Some(MIN_SIMILARITY - 0.01), true),
            (MIN_COVERAGE - 0.01, None, true),
            (0.0, None, true),
        ];
        for (coverage, similarity, want) in cases {
            assert_eq!(
                weak(coverage, similarity),
                want,
                "{coverage} {similarity:?}"
            );
        }
    }
}
