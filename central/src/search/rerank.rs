//! Optional re-ranking of a search's hits, asked for per request: recency
//! decay (`recency_half_life_days`: a hit's relevance halves for every that
//! many days since its run started) and diversity (`diversity`, 0 to 1:
//! maximal marginal relevance, so that the same error pasted into five
//! sessions does not fill the first page). Neither is on by default: on the
//! LoCoMo dev set diversity raised hybrid Recall@10 by 0.017 at most and
//! not at all within 20 turns (BENCHMARKS.md), while a hybrid search that
//! re-ranks reads 50 documents instead of 10; and old answers are often the
//! ones wanted.
//!
//! Both work on the hits the index returns, whatever the backend, after it
//! has applied the viewer's filters: re-ranking never adds a hit.

use std::cmp::Ordering;
use std::hash::{DefaultHasher, Hash, Hasher};

use time::OffsetDateTime;

use kith_proto::SearchRequest;

use crate::error::{Code, Error, Result};
use crate::index::IndexHit;

/// Candidates asked of the index when re-ranking (at least the hits wanted):
/// a recent or different hit can only move up from among them.
const POOL: usize = 50;

/// Places chosen for diversity; deeper pages follow by relevance. Bounds
/// the work of a request for page 100 to one page's.
const MAX_DIVERSE: usize = 100;

/// The re-ranking a request asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rerank {
    half_life_days: Option<f64>,
    diversity: f32,
}

impl Rerank {
    /// The re-ranking a request asks for; `None` when it asks for none.
    pub(crate) fn of(req: &SearchRequest) -> Result<Option<Self>> {
        if let Some(days) = req.recency_half_life_days {
            if !(days.is_finite() && days > 0.0) {
                return Err(Error::invalid(
                    Code::InvalidRecency,
                    "recency_half_life_days must be a number of days above 0",
                ));
            }
        }
        let diversity = req.diversity.unwrap_or(0.0);
        if !(0.0..=1.0).contains(&diversity) {
            return Err(Error::invalid(
                Code::InvalidDiversity,
                "diversity must be between 0 (relevance alone) and 1",
            ));
        }
        let rerank = Self {
            half_life_days: req.recency_half_life_days,
            diversity,
        };
        Ok((rerank.half_life_days.is_some() || diversity > 0.0).then_some(rerank))
    }

    /// Whether the re-ranked hits are in order of their scores (recency
    /// only); diversity orders them by relevance and likeness together.
    pub(crate) fn keeps_score_order(&self) -> bool {
        self.diversity == 0.0
    }

    /// How many hits to ask the index for when `want` are returned.
    pub(crate) fn pool(&self, want: usize) -> usize {
        want.max(POOL)
    }

    /// The best `want` of `hits` (best first, as the index ranked them),
    /// re-ranked. A hit's score becomes its relevance, decayed by age: its
    /// score over the list's best, both measured from 0, or from the
    /// lowest score when that is below 0 (a cosine can be), so that every
    /// hit keeps its place against the others. With diversity, each next
    /// hit is the one with the best `(1 - diversity) * relevance -
    /// diversity * likeness` to the hits already chosen, so scores need not
    /// fall down the list.
    pub(crate) fn apply(
        &self,
        mut hits: Vec<IndexHit>,
        want: usize,
        now: OffsetDateTime,
    ) -> Vec<IndexHit> {
        let low = hits.iter().map(|h| h.score).fold(0.0f32, f32::min);
        let best = hits.iter().map(|h| h.score).fold(low, f32::max);
        for hit in &mut hits {
            let relevance = if best > low {
                (hit.score - low) / (best - low)
            } else {
                1.0
            };
            hit.score = relevance * self.decay(&hit.started_at, now);
        }
        // Stable: equal scores keep the index's order.
        hits.sort_by(|a, b| b.score.total_cmp(&a.score));
        if self.diversity == 0.0 {
            hits.truncate(want);
            return hits;
        }
        // Maximal marginal relevance for the first `MAX_DIVERSE` places (the
        // rest follow by relevance), each candidate's likeness to the hits
        // chosen kept up to date: one comparison per candidate per place.
        let words: Vec<Vec<u64>> = hits.iter().map(|h| words(&h.text)).collect();
        let mut likeness = vec![0.0f32; hits.len()];
        let mut left: Vec<usize> = (0..hits.len()).collect();
        let mut order: Vec<usize> = Vec::with_capacity(hits.len());
        while order.len() < want.min(MAX_DIVERSE) && !left.is_empty() {
            let value =
                |i: usize| (1.0 - self.diversity) * hits[i].score - self.diversity * likeness[i];
            // The first of equals: `left` keeps the relevance order.
            let (at, _) = left
                .iter()
                .enumerate()
                .map(|(at, &i)| (at, value(i)))
                .fold((0, f32::NEG_INFINITY), |b, c| if c.1 > b.1 { c } else { b });
            let chosen = left.remove(at);
            for &i in &left {
                likeness[i] = likeness[i].max(jaccard(&words[i], &words[chosen]));
            }
            order.push(chosen);
        }
        order.extend(left);
        order.truncate(want);
        let mut slots: Vec<Option<IndexHit>> = hits.into_iter().map(Some).collect();
        order.into_iter().filter_map(|i| slots[i].take()).collect()
    }

    /// 1 for a run started now, 0.5 one half-life ago; 1 without a half-life,
    /// for a start in the future, or one that does not parse.
    fn decay(&self, started_at: &str, now: OffsetDateTime) -> f32 {
        let (Some(half_life), Some(started)) = (
            self.half_life_days,
            kith_shared::timestamp::parse(started_at),
        ) else {
            return 1.0;
        };
        let age_days = ((now - started).as_seconds_f64() / 86_400.0).max(0.0);
        0.5f64.powf(age_days / half_life) as f32
    }
}

/// A text's lower-cased words (letters and digits, two or more), hashed,
/// sorted, each once.
fn words(text: &str) -> Vec<u64> {
    let mut out: Vec<u64> = text
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().nth(1).is_some())
        .map(|w| {
            let mut h = DefaultHasher::new();
            w.to_lowercase().hash(&mut h);
            h.finish()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Shared words over all words (both sorted): 1 for the same words, 0 for
/// none shared.
fn jaccard(a: &[u64], b: &[u64]) -> f32 {
    let (mut i, mut j, mut shared) = (0, 0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => i += 1,
            Ordering::Greater => j += 1,
            Ordering::Equal => {
                shared += 1;
                i += 1;
                j += 1;
            }
        }
    }
    let union = a.len() + b.len() - shared;
    if union == 0 {
        return 0.0;
    }
    shared as f32 / union as f32
}

#[cfg(test)]
pub(crate) mod tests {
    use kith_proto::AgentRuntime;
    use time::macros::datetime;

    use super::*;

    /// A hit of `run` (its only chunk) for tests.
    pub(crate) fn hit(run: &str, score: f32, text: &str, started_at: &str) -> IndexHit {
        IndexHit {
            run_id: run.into(),
            chunk_id: format!("{run}-0"),
            score,
            role: "user".into(),
            text: text.into(),
            snippet: String::new(),
            line_start: 1,
            line_end: 1,
            started_at: started_at.into(),
            intent: None,
            machine: "laptop".into(),
            agent_runtime: AgentRuntime::ClaudeCode,
        }
    }

    fn request(half_life: Option<f64>, diversity: Option<f32>) -> SearchRequest {
        SearchRequest {
            recency_half_life_days: half_life,
            diversity,
            ..SearchRequest::default()
        }
    }

    fn runs(hits: &[IndexHit]) -> Vec<&str> {
        hits.iter().map(|h| h.run_id.as_str()).collect()
    }

    const NOW: OffsetDateTime = datetime!(2026-11-23 12:00 UTC);

    #[test]
    fn nothing_asked_is_no_reranking_and_bad_values_are_refused() {
        assert_eq!(Rerank::of(&request(None, None)).ok(), Some(None));
        assert_eq!(Rerank::of(&request(None, Some(0.0))).ok(), Some(None));
        for (half_life, diversity) in [
            (Some(0.0), None),
            (Some(-3.0), None),
            (Some(f64::INFINITY), None),
            (None, Some(1.5)),
            (None, Some(-0.1)),
            (None, Some(f32::NAN)),
        ] {
            assert!(
                Rerank::of(&request(half_life, diversity)).is_err(),
                "{half_life:?} {diversity:?}"
            );
        }
    }

    #[test]
    fn recency_halves_relevance_per_half_life() -> Result<()> {
        let rerank =
            Rerank::of(&request(Some(30.0), None))?.ok_or(Error::Internal("none".into()))?;
        let hits = vec![
            hit("old", 10.0, "deploy failed", "2026-08-25T12:00:00Z"),
            hit("new", 6.0, "deploy failed", "2026-11-23T11:00:00Z"),
            hit("undated", 5.0, "deploy failed", "not a time"),
            hit("future", 4.0, "deploy failed", "2027-01-01T00:00:00Z"),
        ];
        let out = rerank.apply(hits, 10, NOW);
        // old: 1.0 after 90 days = 3 half-lives -> 0.125; new ~0.6.
        assert_eq!(runs(&out), ["new", "undated", "future", "old"]);
        assert!((out[3].score - 0.125).abs() < 1e-3, "{}", out[3].score);
        assert!((out[1].score - 0.5).abs() < 1e-6, "no decay without a time");
        Ok(())
    }

    #[test]
    fn scores_below_zero_keep_their_order() -> Result<()> {
        // Cosines of a semantic search, every one below 0.
        let at = "2026-11-20T00:00:00Z";
        let hits = vec![
            hit("a", -0.05, "the deploy", at),
            hit("b", -0.2, "a build", at),
            hit("c", -0.4, "lunch", at),
        ];
        let recency =
            Rerank::of(&request(Some(30.0), None))?.ok_or(Error::Internal("none".into()))?;
        let out = recency.apply(hits.clone(), 3, NOW);
        assert_eq!(runs(&out), ["a", "b", "c"]);
        assert!(out[0].score > out[1].score && out[1].score > out[2].score);
        // A hit a little less relevant passes one older by a half-life.
        let mut newer = hits;
        newer[1].started_at = "2026-11-23T00:00:00Z".into();
        newer[0].started_at = "2026-10-21T00:00:00Z".into();
        let out = recency.apply(newer, 3, NOW);
        assert_eq!(runs(&out), ["b", "a", "c"]);
        Ok(())
    }

    #[test]
    fn diversity_moves_a_different_hit_above_a_near_copy() -> Result<()> {
        let copy = "the ingress pod is in CrashLoopBackOff after the deploy";
        let hits = || {
            vec![
                hit("a", 10.0, copy, "2026-11-01T00:00:00Z"),
                hit("b", 9.5, copy, "2026-11-02T00:00:00Z"),
                hit("c", 6.0, "the node ran out of disk", "2026-11-03T00:00:00Z"),
            ]
        };
        let plain = Rerank::of(&request(Some(1e9), None))?.ok_or(Error::Internal("none".into()))?;
        assert_eq!(runs(&plain.apply(hits(), 3, NOW)), ["a", "b", "c"]);
        let diverse =
            Rerank::of(&request(None, Some(0.5)))?.ok_or(Error::Internal("none".into()))?;
        let out = diverse.apply(hits(), 3, NOW);
        assert_eq!(runs(&out), ["a", "c", "b"], "the copy goes last, not away");
        assert_eq!(runs(&diverse.apply(hits(), 2, NOW)), ["a", "c"]);
        Ok(())
    }

    #[test]
    fn places_past_the_first_hundred_follow_by_relevance() -> Result<()> {
        // Every text its own words, except the 101st: a copy of the first.
        let mut hits: Vec<IndexHit> = (0..102)
            .map(|i| {
                let text = format!("word{i} other{i}");
                hit(
                    &format!("r{i}"),
                    200.0 - i as f32,
                    &text,
                    "2026-11-01T00:00:00Z",
                )
            })
            .collect();
        hits[100].text = hits[0].text.clone();
        let diverse =
            Rerank::of(&request(None, Some(0.5)))?.ok_or(Error::Internal("none".into()))?;
        let out = diverse.apply(hits, 102, NOW);
        assert_eq!(out.len(), 102);
        // Diversity would put the copy last; past the first hundred places
        // relevance alone decides, so it stays 101st.
        assert_eq!(runs(&out)[100..], ["r100", "r101"]);
        Ok(())
    }

    #[test]
    fn likeness_is_shared_words_over_all_words() {
        let (a, b) = (
            words("Cargo build FAILED, cargo test ok"),
            words("cargo build ok"),
        );
        assert_eq!(a.len(), 5);
        assert!((jaccard(&a, &b) - 3.0 / 5.0).abs() < 1e-6);
        assert_eq!(
            jaccard(&words("a"), &words("b")),
            0.0,
            "no words, nothing alike"
        );
    }
}
