//! AUC of one list, the building block of GAUC (seed 004: AUC is the
//! probability that a random positive outscores a random negative; GAUC
//! averages per-session AUCs).
//!
//! Positives are shown documents with grade ≥ the relevance threshold,
//! negatives all other shown documents (unjudged included). The ranking
//! score is the model score when every result carries one, otherwise the
//! displayed position (a higher position means a lower score, so there are
//! no ties). Tied scores give half credit. A list with only positives or only
//! negatives has no AUC: it is excluded from GAUC and counted.

use super::{GaucWeight, Grade, is_relevant};

/// The AUC of one list and what GAUC needs to weight it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ListAuc {
    pub auc: f64,
    pub positives: u32,
    pub negatives: u32,
}

impl ListAuc {
    /// This list's weight in GAUC under `scheme`.
    pub fn weight(&self, scheme: GaucWeight) -> u32 {
        match scheme {
            GaucWeight::Impressions => self.positives + self.negatives,
            GaucWeight::Uniform => 1,
            GaucWeight::Positives => self.positives,
        }
    }
}

/// AUC of a list whose order is its score (display order): counts, for each
/// negative, the positives shown above it. O(n), no buffer.
pub fn auc_by_position(shown: &[Grade], threshold: Grade) -> Option<ListAuc> {
    let mut positives = 0u32;
    let mut negatives = 0u32;
    let mut correct_pairs = 0u64;
    for &g in shown {
        if is_relevant(g, threshold) {
            positives += 1;
        } else {
            negatives += 1;
            correct_pairs += u64::from(positives);
        }
    }
    finish(correct_pairs as f64, positives, negatives)
}

/// AUC of a list ranked by `scores` (aligned with `shown`; finite values).
/// Mann–Whitney with half credit for ties, in O(n log n) using `scratch`.
pub fn auc_by_score(
    shown: &[Grade],
    scores: &[f64],
    threshold: Grade,
    scratch: &mut Vec<(f64, bool)>,
) -> Option<ListAuc> {
    debug_assert_eq!(shown.len(), scores.len());
    // Rankers show results by descending score: read backwards, that is
    // the ascending order the count needs, without a copy or a sort
    // (sorting it was insertion sort's worst case, half of this function's
    // instructions). Elements the sort could order differently are equal
    // scores, which only count as a group.
    if scores.windows(2).all(|w| w[0].total_cmp(&w[1]).is_ge()) {
        return count_ascending(scores.iter().zip(shown).rev().map(|(&s, &g)| (s, is_relevant(g, threshold))));
    }
    scratch.clear();
    scratch.extend(scores.iter().zip(shown).map(|(&s, &g)| (s, is_relevant(g, threshold))));
    scratch.sort_unstable_by(|a, b| a.0.total_cmp(&b.0));
    count_ascending(scratch.iter().copied())
}

/// Mann–Whitney over (score, positive) in ascending score order.
fn count_ascending(sorted: impl Iterator<Item = (f64, bool)>) -> Option<ListAuc> {
    let mut below = Tally::default();
    let (mut group, mut in_group) = (None, Tally::default());
    for (score, positive) in sorted {
        if group != Some(score) {
            below.add_group(&in_group);
            (group, in_group) = (Some(score), Tally::default());
        }
        if positive {
            in_group.positives += 1;
        } else {
            in_group.negatives += 1;
        }
    }
    below.add_group(&in_group);
    finish(below.twice_correct as f64 / 2.0, below.positives, below.negatives)
}

/// Positives and negatives counted so far, and twice the correctly
/// ordered pairs among them (so that ties stay integral).
#[derive(Default)]
struct Tally {
    positives: u32,
    negatives: u32,
    twice_correct: u64,
}

impl Tally {
    /// A group of equal scores above everything counted: each of its
    /// positives beats every negative below and ties with those beside it.
    fn add_group(&mut self, group: &Tally) {
        self.twice_correct += 2 * u64::from(group.positives) * u64::from(self.negatives)
            + u64::from(group.positives) * u64::from(group.negatives);
        self.positives += group.positives;
        self.negatives += group.negatives;
    }
}

fn finish(correct_pairs: f64, positives: u32, negatives: u32) -> Option<ListAuc> {
    if positives == 0 || negatives == 0 {
        return None;
    }
    let auc = correct_pairs / (f64::from(positives) * f64::from(negatives));
    Some(ListAuc { auc, positives, negatives })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::Moments;

    fn gauc(scheme: GaucWeight) -> f64 {
        // The issue's worked example: two sessions with explicit scores.
        let lists: [(&[Grade], &[f64]); 2] =
            [(&[1, 0, 1, 1, 0], &[0.9, 0.8, 0.7, 0.6, 0.5]), (&[1, 0, 0, 1], &[0.9, 0.8, 0.7, 0.6])];
        let mut scratch = Vec::new();
        let mut acc = Moments::default();
        for (labels, scores) in lists {
            let a = auc_by_score(labels, scores, 1, &mut scratch).unwrap();
            acc.add(a.auc, a.weight(scheme));
        }
        (acc.mean().unwrap() * 10_000.0).round() / 10_000.0
    }

    /// List 1 has 4 of 6 pairs right (AUC 2/3, 5 shown, 3 positives), list 2
    /// 2 of 4 (AUC 1/2, 4 shown, 2 positives):
    /// uniform (2/3 + 1/2)/2 = 0.5833; impressions (5·2/3 + 4·1/2)/9 = 0.5926;
    /// positives (3·2/3 + 2·1/2)/5 = 0.6.
    #[test]
    fn issue_gauc_example() {
        assert_eq!(gauc(GaucWeight::Uniform), 0.5833);
        assert_eq!(gauc(GaucWeight::Impressions), 0.5926);
        assert_eq!(gauc(GaucWeight::Positives), 0.6);
    }

    #[test]
    fn position_and_descending_scores_agree() {
        let labels = [1, 0, 1, 1, 0];
        let by_pos = auc_by_position(&labels, 1).unwrap();
        let by_score = auc_by_score(&labels, &[5.0, 4.0, 3.0, 2.0, 1.0], 1, &mut Vec::new()).unwrap();
        assert_eq!(by_pos, by_score);
        assert_eq!(by_pos.auc, 4.0 / 6.0);
    }

    /// Scores in display order (descending, the common case, taken
    /// without sorting), ascending and shuffled, with ties, give the AUC of
    /// counting every (positive, negative) pair directly.
    #[test]
    fn every_score_order_matches_counting_pairs() {
        let mut rng = rankpulse_testkit::Rng::new(11);
        let mut scratch = Vec::new();
        for case in 0..3_000u64 {
            let n = 1 + rng.below(12) as usize;
            let labels: Vec<Grade> = (0..n).map(|_| rng.below(3) as Grade).collect();
            // Few distinct values: ties are common.
            let mut scores: Vec<f64> = (0..n).map(|_| rng.below(6) as f64 - 2.0).collect();
            match case % 3 {
                0 => scores.sort_by(|a, b| b.total_cmp(a)),
                1 => scores.sort_by(|a, b| a.total_cmp(b)),
                _ => {}
            }
            let (mut twice, mut pos, mut neg) = (0u64, 0u32, 0u32);
            for (i, (&gi, &si)) in labels.iter().zip(&scores).enumerate() {
                if is_relevant(gi, 1) {
                    pos += 1;
                } else {
                    neg += 1;
                }
                for (&gj, &sj) in labels.iter().zip(&scores).skip(i + 1) {
                    let (p, q) = match (is_relevant(gi, 1), is_relevant(gj, 1)) {
                        (true, false) => (si, sj),
                        (false, true) => (sj, si),
                        _ => continue,
                    };
                    twice += if p > q {
                        2
                    } else if p == q {
                        1
                    } else {
                        0
                    };
                }
            }
            let want = finish(twice as f64 / 2.0, pos, neg);
            assert_eq!(auc_by_score(&labels, &scores, 1, &mut scratch), want, "{labels:?} {scores:?}");
        }
    }

    #[test]
    fn ties_get_half_credit_and_single_class_is_none() {
        let a = auc_by_score(&[1, 0], &[1.0, 1.0], 1, &mut Vec::new()).unwrap();
        assert_eq!(a.auc, 0.5);
        assert_eq!(auc_by_position(&[1, 1], 1), None);
        assert_eq!(auc_by_position(&[0, 0], 1), None);
        assert_eq!(auc_by_position(&[], 1), None);
    }
}
