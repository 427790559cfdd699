//! The order of conversations when hits are grouped: a conversation scores
//! its best hit plus a damped share of its other hits, so that one that
//! matches the query in several places can pass one that matches it in a
//! single stray chunk.
//!
//! On the LoCoMo dev tuning split (conv-26, conv-30, conv-41), against the
//! same 50 hits in order of first appearance, weight 0.1 and decay 0.5
//! raised session hit@5 from 0.922 to 0.932 and R@5 from 0.872 to 0.882,
//! hit@1 0.747 to 0.749, R@10 unchanged (0.945); larger weights or a plain
//! sum of the best hits lowered hit@1 (BENCHMARKS.md, "Tried and not
//! kept").

/// Weight of a conversation's other hits beside its best.
pub(crate) const OTHERS_WEIGHT: f32 = 0.1;
/// Each further hit counts this much of the one before it.
pub(crate) const OTHERS_DECAY: f32 = 0.5;

/// A conversation's score from its hits' scores, best first: the best, plus
/// `OTHERS_WEIGHT` times (second + `OTHERS_DECAY` × third + `OTHERS_DECAY`²
/// × fourth …).
pub(crate) fn conversation_score(scores: &[f32]) -> f32 {
    let Some((&best, others)) = scores.split_first() else {
        return 0.0;
    };
    let (mut sum, mut weight) = (0.0, 1.0);
    for &s in others {
        sum += weight * s.max(0.0);
        weight *= OTHERS_DECAY;
    }
    best + OTHERS_WEIGHT * sum
}

/// One conversation among the ranked hits: where its first hit stands, and
/// its hits' scores in rank order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Group {
    pub first: usize,
    pub scores: Vec<f32>,
}

/// The groups' order, best first, as indexes into `groups`. Hits before
/// `leading` form a tier of their own (the runs of a date the query names,
/// see `when`): a conversation whose first hit is among them stays ahead of
/// every other. Within a tier, `conversation_score` decides, then the first
/// hit's place.
pub(crate) fn order(groups: &[Group], leading: usize) -> Vec<usize> {
    let mut keyed: Vec<(bool, f32, usize, usize)> = groups
        .iter()
        .enumerate()
        .map(|(i, g)| {
            let mut scores = g.scores.clone();
            scores.sort_by(|a, b| b.total_cmp(a));
            (g.first >= leading, conversation_score(&scores), g.first, i)
        })
        .collect();
    keyed.sort_by(|a, b| {
        a.0.cmp(&b.0)
            .then_with(|| b.1.total_cmp(&a.1))
            .then_with(|| a.2.cmp(&b.2))
    });
    keyed.into_iter().map(|k| k.3).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(first: usize, scores: &[f32]) -> Group {
        Group {
            first,
            scores: scores.to_vec(),
        }
    }

    #[test]
    fn the_best_hit_counts_whole_and_the_others_damped() {
        assert_eq!(conversation_score(&[]), 0.0);
        assert!((conversation_score(&[0.8]) - 0.8).abs() < 1e-6);
        // 0.8 + 0.1 × (0.6 + 0.5 × 0.4 + 0.25 × 0.2)
        let s = conversation_score(&[0.8, 0.6, 0.4, 0.2]);
        assert!((s - 0.885).abs() < 1e-6, "{s}");
    }

    #[test]
    fn several_matches_pass_one_stray_chunk_but_not_a_clear_best() {
        // a: one chunk at 1.0; b: 0.97 and two more (0.97 + 0.1 × 0.9 + 0.05
        // × 0.8 = 1.1); c: 0.5 with many chunks stays behind both.
        let groups = [
            group(0, &[1.0]),
            group(1, &[0.97, 0.9, 0.8]),
            group(2, &[0.5, 0.5, 0.5, 0.5, 0.5, 0.5]),
        ];
        assert_eq!(order(&groups, 0), vec![1, 0, 2]);
        // A clear best is not passed: 0.8 + 0.1 × (0.79 + 0.5 × 0.78) < 1.0.
        let groups = [group(0, &[1.0]), group(1, &[0.8, 0.79, 0.78])];
        assert_eq!(order(&groups, 0), vec![0, 1]);
    }

    #[test]
    fn a_leading_tier_stays_ahead_whatever_the_scores() {
        // The first two hits came from a dated search: its groups lead.
        let groups = [
            group(0, &[0.3]),
            group(2, &[1.0, 1.0, 1.0]),
            group(1, &[0.2]),
        ];
        assert_eq!(order(&groups, 2), vec![0, 2, 1]);
        assert_eq!(order(&groups, 0), vec![1, 0, 2]);
    }
}
