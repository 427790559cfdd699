//! Hybrid ranking: fuse keyword (BM25) and semantic (cosine) result lists.
//!
//! Min-max score fusion: each list's scores are scaled to [0, 1] over that
//! list, a chunk's fused score is `w * dense + (1 - w) * keyword` (0 for a
//! list it is missing from). Reciprocal rank fusion throws away how far ahead
//! the best matches are; on the LoCoMo dev set min-max fusion did better
//! (notes/embeddings.md, and BENCHMARKS.md for kith's own runs). The fused
//! candidates are then lifted by their neighbours in the transcript
//! (`lift_by_neighbours`). Both work on chunk keys and scores: documents
//! are read only for the chunks the lift has to place and those returned.

use std::collections::HashMap;
use std::hash::Hash;

/// Weight of the semantic list, tuned on the LoCoMo dev half only
/// (Recall@10 with kith's chunks: 0.15 -> 0.744, 0.22 -> 0.747,
/// 0.3 -> 0.750, 0.55 -> 0.735, 0.7 -> 0.670; with question words dropped
/// from the keyword side: 0.3 -> 0.763, 0.4 -> 0.760). Greedy diversity by
/// line overlap (MMR-like) lowered it (0.745-0.748) and was left out.
pub(crate) const DENSE_WEIGHT: f32 = 0.3;

/// Candidates taken from each side before fusion (at least).
pub(crate) const POOL: usize = 50;

fn min_max<K>(ranked: &[(K, f32)]) -> impl Fn(f32) -> f32 {
    let lo = ranked.iter().map(|r| r.1).fold(f32::INFINITY, f32::min);
    let hi = ranked.iter().map(|r| r.1).fold(f32::NEG_INFINITY, f32::max);
    move |s| if hi > lo { (s - lo) / (hi - lo) } else { 1.0 }
}

/// Fuses two ranked lists of chunks (by key) into one, best first (equal
/// scores by key).
pub(crate) fn fuse<K: Copy + Eq + Hash + Ord>(
    keyword: &[(K, f32)],
    semantic: &[(K, f32)],
    dense_weight: f32,
) -> Vec<(K, f32)> {
    let (kw_norm, sem_norm) = (min_max(keyword), min_max(semantic));
    let mut fused: HashMap<K, f32> = HashMap::new();
    for &(key, score) in semantic {
        *fused.entry(key).or_default() += dense_weight * sem_norm(score);
    }
    for &(key, score) in keyword {
        *fused.entry(key).or_default() += (1.0 - dense_weight) * kw_norm(score);
    }
    let mut out: Vec<(K, f32)> = fused.into_iter().collect();
    out.sort_by(best_first);
    out
}

fn best_first<K: Ord>(a: &(K, f32), b: &(K, f32)) -> std::cmp::Ordering {
    b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0))
}

/// Weight of the chunk before's fused score in a chunk's score (see
/// `lift_by_neighbours`).
pub(crate) const PREVIOUS_NEIGHBOUR: f32 = 0.8;
/// Weight of the chunk after's fused score in a chunk's score.
pub(crate) const NEXT_NEIGHBOUR: f32 = 0.5;

/// Neighbour lift: a chunk scores at least `PREVIOUS_NEIGHBOUR` times the
/// fused score of the chunk just before it in the same run, and
/// `NEXT_NEIGHBOUR` times the one just after (both among the fused
/// candidates). The turn that answers a matching question, or the tool
/// output after a matching call, often shares few words with the query;
/// its neighbour's match lifts it. Returns the best `limit`, best first.
///
/// `fused` is best first, as `fuse` returns it. `neighbours(key)` names the
/// chunks just before and after a candidate (the caller reads its document
/// to know). It is asked of candidates best first, and only while one could
/// still lift another into the best `limit`: once `PREVIOUS_NEIGHBOUR`
/// times a candidate's score is below the `limit`-th best score so far, no
/// candidate after it can. So only the documents of the first few
/// candidates are read, and the result is the same as lifting every
/// candidate.
///
/// On the LoCoMo dev half (hybrid Recall@10, min-max fusion at 0.3):
/// without 0.763; max(prev 0.6) 0.779; max(prev 0.8, next 0.5) 0.782;
/// max(prev 0.7, next 0.3) 0.778; additive (+0.5 prev) 0.777, (+0.3 next
/// alone) 0.761. Single-hop questions gain most (0.866 -> 0.899).
pub(crate) fn lift_by_neighbours<K: Copy + Eq + Hash + Ord, E>(
    fused: &[(K, f32)],
    limit: usize,
    mut neighbours: impl FnMut(K) -> Result<(Option<K>, Option<K>), E>,
) -> Result<Vec<(K, f32)>, E> {
    let at: HashMap<K, usize> = fused.iter().enumerate().map(|(i, r)| (r.0, i)).collect();
    let mut lifted = fused.to_vec();
    let mut scores = Vec::with_capacity(fused.len());
    for &(key, score) in fused {
        if lifted.len() > limit && limit > 0 {
            scores.clear();
            scores.extend(lifted.iter().map(|r| r.1));
            let (_, kth, _) = scores.select_nth_unstable_by(limit - 1, |a, b| b.total_cmp(a));
            if PREVIOUS_NEIGHBOUR.max(NEXT_NEIGHBOUR) * score < *kth {
                break;
            }
        }
        let (previous, next) = neighbours(key)?;
        for (neighbour, weight) in [(next, PREVIOUS_NEIGHBOUR), (previous, NEXT_NEIGHBOUR)] {
            if let Some(&i) = neighbour.and_then(|k| at.get(&k)) {
                lifted[i].1 = lifted[i].1.max(weight * score);
            }
        }
    }
    lifted.sort_by(best_first);
    lifted.truncate(limit);
    Ok(lifted)
}

/// Question words and auxiliaries: they say how a question is phrased, not
/// what it is about, yet BM25 scores them wherever a transcript uses them.
const QUESTION_WORDS: &[&str] = &[
    "what", "when", "where", "who", "whom", "which", "why", "how", "did", "does", "do", "is",
    "are", "was", "were", "has", "have", "had", "would", "could", "should", "can", "will", "might",
    "likely", "kind", "some", "any", "ever", "been",
];

/// The keyword side of a hybrid query: the question without its question
/// words (the whole query when nothing else is left). On the LoCoMo dev half
/// this lifts hybrid Recall@10 from 0.750 to 0.763.
pub(crate) fn without_question_words(query: &str) -> String {
    without(query, &[QUESTION_WORDS])
}

/// Words too common to point at anything: a hit's highlights skip them
/// (they still rank, as BM25 weighs them).
const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "but", "of", "to", "in", "on", "at", "for", "with", "by",
    "from", "as", "it", "its", "this", "that", "these", "those", "be", "i", "you", "we", "they",
    "he", "she", "my", "our", "your", "me", "us", "not", "no", "so", "if", "then", "than", "there",
    "about", "into", "out", "up", "all", "just",
];

/// The query without question words and stopwords (the whole query when
/// nothing else is left): what a hit's highlights mark, and the words a
/// long query keeps first on Meilisearch (`index::meili::bm25::terms`).
pub(crate) fn content_words(query: &str) -> String {
    without(query, &[QUESTION_WORDS, STOPWORDS])
}

/// `query` without the words of `lists` (compared lowercase, letters and
/// digits only), or the whole query when nothing else is left.
fn without(query: &str, lists: &[&[&str]]) -> String {
    let kept: Vec<&str> = query
        .split_whitespace()
        .filter(|w| {
            let word: String = w
                .chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect();
            !lists.iter().any(|list| list.contains(&word.as_str()))
        })
        .collect();
    if kept.is_empty() {
        query.to_owned()
    } else {
        kept.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn question_words_leave_the_keyword_side_but_never_empty_it() {
        assert_eq!(
            without_question_words("When did Caroline go to the LGBTQ support group?"),
            "Caroline go to the LGBTQ support group?"
        );
        assert_eq!(without_question_words("what is"), "what is");
        assert_eq!(without_question_words("why did cargo fail"), "cargo fail");
    }

    fn keys(ranked: &[(&'static str, f32)]) -> Vec<&'static str> {
        ranked.iter().map(|r| r.0).collect()
    }

    #[test]
    fn agreement_wins() {
        let kw = [("a", 9.0), ("b", 5.0), ("c", 1.0)];
        let sem = [("b", 0.9), ("d", 0.8), ("a", 0.1)];
        let out = fuse(&kw, &sem, 0.55);
        assert_eq!(keys(&out), vec!["b", "d", "a", "c"]);
        assert!(out.windows(2).all(|w| w[0].1 >= w[1].1));
    }

    /// Chunks named `<run>-<index>`, as `index::chunk_id` names them.
    fn by_name(key: &'static str) -> Result<(Option<&'static str>, Option<&'static str>), ()> {
        let name = |run: &str, i: u64| -> &'static str { format!("{run}-{i}").leak() };
        let (run, i) = key.rsplit_once('-').ok_or(())?;
        let i: u64 = i.parse().map_err(drop)?;
        Ok((
            i.checked_sub(1).map(|p| name(run, p)),
            Some(name(run, i + 1)),
        ))
    }

    #[test]
    fn a_chunk_is_lifted_by_its_neighbours_in_the_same_run_only() {
        let fused = [
            ("r-3", 1.0),
            ("r-9", 0.5),
            ("r-8", 0.3),
            ("q-4", 0.2),
            ("r-4", 0.1),
        ];
        let out = lift_by_neighbours(&fused, 10, by_name).unwrap_or_default();
        // r-4 follows r-3 (1.0 * 0.8); r-8 precedes r-9 (0.5 * 0.5 < 0.3
        // stays 0.3); q-4 is in another run.
        assert_eq!(keys(&out), vec!["r-3", "r-4", "r-9", "r-8", "q-4"]);
        assert!((out[1].1 - PREVIOUS_NEIGHBOUR).abs() < 1e-6);
        assert!((out[3].1 - 0.3).abs() < 1e-6);
        let top2 = lift_by_neighbours(&fused, 2, by_name).unwrap_or_default();
        assert_eq!(keys(&top2), vec!["r-3", "r-4"]);
    }

    #[test]
    fn only_candidates_that_can_still_lift_one_into_the_limit_are_resolved() {
        // Once r-3 has lifted r-4 to 0.8, the second best, no later
        // candidate can reach it (0.8 * 0.5 = 0.4): only r-3 is resolved.
        let fused = [
            ("r-3", 1.0),
            ("s-9", 0.5),
            ("t-8", 0.3),
            ("u-4", 0.2),
            ("r-4", 0.1),
        ];
        let mut asked = Vec::new();
        let out = lift_by_neighbours(&fused, 2, |k| {
            asked.push(k);
            by_name(k)
        })
        .unwrap_or_default();
        assert_eq!(keys(&out), vec!["r-3", "r-4"]);
        assert_eq!(asked, vec!["r-3"]);
        // Without a limit every candidate is resolved.
        asked.clear();
        let all = lift_by_neighbours(&fused, 10, |k| {
            asked.push(k);
            by_name(k)
        })
        .unwrap_or_default();
        assert_eq!(all.len(), 5);
        assert_eq!(asked.len(), 5);
    }

    #[test]
    fn one_empty_list_keeps_the_other_order() {
        let kw = [("a", 3.0), ("b", 2.0), ("c", 1.0)];
        assert_eq!(keys(&fuse(&kw, &[], 0.55)), vec!["a", "b", "c"]);
        assert_eq!(keys(&fuse(&[], &kw, 0.55)), vec!["a", "b", "c"]);
        assert!(fuse::<&str>(&[], &[], 0.55).is_empty());
    }

    #[test]
    fn highlights_skip_stopwords_unless_nothing_else_is_left() {
        assert_eq!(
            content_words("how did the parser fail on a file"),
            "parser fail file"
        );
        assert_eq!(
            content_words("the \"src/main.rs\" of it"),
            "\"src/main.rs\""
        );
        assert_eq!(content_words("to be or not to be"), "to be or not to be");
    }
}
