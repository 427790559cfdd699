//! Hybrid ranking: fuse keyword (BM25) and semantic (cosine) result lists.
//!
//! Min-max score fusion: each list's scores are scaled to [0, 1] over that
//! list, a chunk's fused score is `w * dense + (1 - w) * keyword` (0 for a
//! list it is missing from). Reciprocal rank fusion throws away how far ahead
//! the best matches are; on the LoCoMo dev set min-max fusion did better
//! (notes/embeddings.md, and BENCHMARKS.md for kith's own runs). The fused
//! candidates are then lifted by their neighbours in the transcript
//! (`lift_by_neighbours`).

use std::collections::HashMap;

use crate::index::IndexHit;

/// Weight of the semantic list, tuned on the LoCoMo dev half only
/// (Recall@10 with kith's chunks: 0.15 -> 0.744, 0.22 -> 0.747,
/// 0.3 -> 0.750, 0.55 -> 0.735, 0.7 -> 0.670; with question words dropped
/// from the keyword side: 0.3 -> 0.763, 0.4 -> 0.760). Greedy diversity by
/// line overlap (MMR-like) lowered it (0.745-0.748) and was left out.
pub const DENSE_WEIGHT: f32 = 0.3;

fn min_max(hits: &[IndexHit]) -> impl Fn(f32) -> f32 {
    let lo = hits.iter().map(|h| h.score).fold(f32::INFINITY, f32::min);
    let hi = hits
        .iter()
        .map(|h| h.score)
        .fold(f32::NEG_INFINITY, f32::max);
    move |s| if hi > lo { (s - lo) / (hi - lo) } else { 1.0 }
}

/// Fuses the two lists into one, best first, at most `limit` long. A hit
/// keeps the keyword list's snippet (with highlights) when it has one.
pub fn fuse(
    keyword: Vec<IndexHit>,
    semantic: Vec<IndexHit>,
    dense_weight: f32,
    limit: usize,
) -> Vec<IndexHit> {
    let kw_norm = min_max(&keyword);
    let sem_norm = min_max(&semantic);
    let mut fused: HashMap<String, (f32, IndexHit)> = HashMap::new();
    for hit in semantic {
        let s = dense_weight * sem_norm(hit.score);
        fused.insert(hit.chunk_id.clone(), (s, hit));
    }
    for hit in keyword {
        let s = (1.0 - dense_weight) * kw_norm(hit.score);
        match fused.get_mut(&hit.chunk_id) {
            Some((score, existing)) => {
                *score += s;
                existing.snippet = hit.snippet;
            }
            None => {
                fused.insert(hit.chunk_id.clone(), (s, hit));
            }
        }
    }
    let mut out: Vec<(f32, IndexHit)> = fused.into_values().collect();
    out.sort_by(|a, b| {
        b.0.total_cmp(&a.0)
            .then_with(|| a.1.chunk_id.cmp(&b.1.chunk_id))
    });
    out.truncate(limit);
    out.into_iter()
        .map(|(score, mut hit)| {
            hit.score = score;
            hit
        })
        .collect()
}

/// Weight of the chunk before's fused score in a chunk's score (see
/// `lift_by_neighbours`).
pub const PREVIOUS_NEIGHBOUR: f32 = 0.8;
/// Weight of the chunk after's fused score in a chunk's score.
pub const NEXT_NEIGHBOUR: f32 = 0.5;

/// Neighbour lift: a chunk scores at least `PREVIOUS_NEIGHBOUR` times the
/// fused score of the chunk just before it in the same run, and
/// `NEXT_NEIGHBOUR` times the one just after (both among the fused
/// candidates). The turn that answers a matching question, or the tool
/// output after a matching call, often shares few words with the query;
/// its neighbour's match lifts it. Hits keep their own text and line range.
/// Chunk ids are `<run>-<index>` (`index::chunk_id`). Returns the best
/// `limit`, best first.
///
/// On the LoCoMo dev half (hybrid Recall@10, min-max fusion at 0.3):
/// without 0.763; max(prev 0.6) 0.779; max(prev 0.8, next 0.5) 0.782;
/// max(prev 0.7, next 0.3) 0.778; additive (+0.5 prev) 0.777, (+0.3 next
/// alone) 0.761. Single-hop questions gain most (0.866 -> 0.899).
pub fn lift_by_neighbours(mut hits: Vec<IndexHit>, limit: usize) -> Vec<IndexHit> {
    fn split(id: &str) -> Option<(&str, u64)> {
        let (run, idx) = id.rsplit_once('-')?;
        Some((run, idx.parse().ok()?))
    }
    let fused: HashMap<(String, u64), f32> = hits
        .iter()
        .filter_map(|h| split(&h.chunk_id).map(|(r, i)| ((r.to_owned(), i), h.score)))
        .collect();
    for hit in &mut hits {
        let Some((run, idx)) = split(&hit.chunk_id) else {
            continue;
        };
        let score_of = |i: Option<u64>| {
            i.and_then(|i| fused.get(&(run.to_owned(), i)).copied())
                .unwrap_or(0.0)
        };
        let previous = score_of(idx.checked_sub(1));
        let next = score_of(idx.checked_add(1));
        hit.score = hit
            .score
            .max(PREVIOUS_NEIGHBOUR * previous)
            .max(NEXT_NEIGHBOUR * next);
    }
    hits.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.chunk_id.cmp(&b.chunk_id))
    });
    hits.truncate(limit);
    hits
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
pub fn without_question_words(query: &str) -> String {
    let kept: Vec<&str> = query
        .split_whitespace()
        .filter(|w| {
            let word: String = w
                .chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect();
            !QUESTION_WORDS.contains(&word.as_str())
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
    use kith_proto::AgentRuntime;

    fn hit(id: &str, score: f32, snippet: &str) -> IndexHit {
        IndexHit {
            run_id: "r".into(),
            chunk_id: id.into(),
            score,
            role: "user".into(),
            text: String::new(),
            snippet: snippet.into(),
            line_start: 1,
            line_end: 1,
            started_at: String::new(),
            intent: None,
            machine: String::new(),
            agent_runtime: AgentRuntime::Other,
        }
    }

    fn ids(hits: &[IndexHit]) -> Vec<&str> {
        hits.iter().map(|h| h.chunk_id.as_str()).collect()
    }

    #[test]
    fn agreement_wins_and_keyword_snippets_survive() {
        let kw = vec![
            hit("a", 9.0, "«a»"),
            hit("b", 5.0, "«b»"),
            hit("c", 1.0, "«c»"),
        ];
        let sem = vec![hit("b", 0.9, "b"), hit("d", 0.8, "d"), hit("a", 0.1, "a")];
        let out = fuse(kw, sem, 0.55, 10);
        assert_eq!(ids(&out), vec!["b", "d", "a", "c"]);
        assert_eq!(out[0].snippet, "«b»");
        assert_eq!(out[1].snippet, "d");
        assert!(out.windows(2).all(|w| w[0].score >= w[1].score));
    }

    #[test]
    fn a_chunk_is_lifted_by_its_neighbours_in_the_same_run_only() {
        let mut hits = vec![
            hit("r-3", 1.0, ""),
            hit("r-9", 0.5, ""),
            hit("r-4", 0.1, ""),
            hit("q-4", 0.2, ""),
            hit("r-8", 0.3, ""),
        ];
        hits[3].run_id = "q".into();
        let out = lift_by_neighbours(hits, 10);
        // r-4 follows r-3 (1.0 * 0.8); r-8 precedes r-9 (0.5 * 0.5 < 0.3
        // stays 0.3); q-4 is in another run.
        assert_eq!(ids(&out), vec!["r-3", "r-4", "r-9", "r-8", "q-4"]);
        assert!((out[1].score - PREVIOUS_NEIGHBOUR).abs() < 1e-6);
        assert!((out[3].score - 0.3).abs() < 1e-6);
        assert_eq!(ids(&lift_by_neighbours(out, 2)), vec!["r-3", "r-4"]);
    }

    #[test]
    fn one_empty_list_keeps_the_other_order_and_limit_applies() {
        let kw = vec![hit("a", 3.0, ""), hit("b", 2.0, ""), hit("c", 1.0, "")];
        assert_eq!(ids(&fuse(kw.clone(), vec![], 0.55, 2)), vec!["a", "b"]);
        assert_eq!(ids(&fuse(vec![], kw, 0.55, 10)), vec!["a", "b", "c"]);
        assert!(fuse(vec![], vec![], 0.55, 10).is_empty());
    }
}
