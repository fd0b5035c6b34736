//! Property tests of the metric engine and the accumulators: value ranges,
//! the ideal ranking scoring 1, agreement of the one-pass cutoff functions
//! with direct transcriptions of the seed formulas, and exact merging.

use proptest::prelude::*;
use rankpulse_core::accumulate::Moments;
use rankpulse_core::metrics::{
    Gain, Grade, IdealScope, NO_CUTOFF, Scratch,
    auc::{auc_by_position, auc_by_score},
    count_relevant, dcg, err, precision, rr,
};

fn grades() -> impl Strategy<Value = Vec<Grade>> {
    prop::collection::vec(-1i32..=4, 0..40)
}

fn cutoffs() -> impl Strategy<Value = Vec<usize>> {
    prop::collection::btree_set(1usize..50, 1..6).prop_map(|s| {
        let mut v: Vec<usize> = s.into_iter().collect();
        v.push(NO_CUTOFF);
        v
    })
}

/// Seed formula, computed directly at one cutoff: Σ_{i≤k} gain(rel_i) / log2(i + 1).
fn dcg_direct(grades: &[Grade], gain: Gain, k: usize) -> f64 {
    grades.iter().take(k).enumerate().map(|(i, &g)| dcg::gain(g, gain) / ((i + 2) as f64).log2()).sum()
}

fn err_direct(grades: &[Grade], max_grade: Grade, k: usize) -> f64 {
    let r = |g: Grade| if g <= 0 { 0.0 } else { ((g.min(max_grade)) as f64).exp2() - 1.0 } / (max_grade as f64).exp2();
    (0..grades.len().min(k))
        .map(|i| (0..i).map(|j| 1.0 - r(grades[j])).product::<f64>() * r(grades[i]) / (i + 1) as f64)
        .sum()
}

fn ap_direct(grades: &[Grade], threshold: Grade, num_rel: u32, k: usize) -> Option<f64> {
    if num_rel == 0 {
        return None;
    }
    let rel = |g: Grade| g >= threshold && g >= 0;
    let mut sum = 0.0;
    for i in 0..grades.len().min(k) {
        if rel(grades[i]) {
            let p_at_i = grades[..=i].iter().filter(|&&g| rel(g)).count() as f64 / (i + 1) as f64;
            sum += p_at_i;
        }
    }
    Some(sum / num_rel as f64)
}

fn auc_pairs(labels: &[bool], scores: &[f64]) -> Option<f64> {
    let (mut num, mut pairs) = (0.0, 0.0);
    for (i, &li) in labels.iter().enumerate() {
        for (j, &lj) in labels.iter().enumerate() {
            if li && !lj {
                pairs += 1.0;
                num += if scores[i] > scores[j] {
                    1.0
                } else if scores[i] == scores[j] {
                    0.5
                } else {
                    0.0
                };
            }
        }
    }
    (pairs > 0.0).then(|| num / pairs)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn values_stay_in_range(shown in grades(), extra in grades(), cut in cutoffs(), threshold in 1i32..=3, gain_exp in any::<bool>()) {
        let gain = if gain_exp { Gain::Exp2 } else { Gain::Linear };
        // The judged set always contains the shown judged documents.
        let judged: Vec<Grade> = shown.iter().chain(&extra).copied().collect();
        let mut scratch = Scratch::new();
        let ideal = scratch.ideal(IdealScope::Judged, &shown, &judged).to_vec();
        let n = cut.len();
        let mut opt = vec![None; n];
        let mut val = vec![0.0; n];
        dcg::ndcg_at(&shown, &ideal, gain, &cut, &mut opt);
        for v in opt.iter().flatten() { prop_assert!((0.0..=1.0 + 1e-12).contains(v), "ndcg {v}"); }
        err::err_at(&shown, 4, &cut, &mut val);
        for v in &val { prop_assert!((0.0..=1.0).contains(v), "err {v}"); }
        rr::reciprocal_rank_at(&shown, threshold, &cut, &mut val);
        for v in &val { prop_assert!((0.0..=1.0).contains(v)); }
        precision::precision_at(&shown, threshold, &cut, &mut val);
        for v in &val { prop_assert!((0.0..=1.0).contains(v)); }
        let num_rel = count_relevant(&judged, threshold);
        precision::recall_at(&shown, threshold, num_rel, &cut, &mut opt);
        for v in opt.iter().flatten() { prop_assert!((0.0..=1.0).contains(v)); }
        precision::average_precision_at(&shown, threshold, num_rel, &cut, &mut opt);
        for v in opt.iter().flatten() { prop_assert!((0.0..=1.0 + 1e-12).contains(v)); }
        if let Some(a) = auc_by_position(&shown, threshold) { prop_assert!((0.0..=1.0).contains(&a.auc)); }
    }

    #[test]
    fn ideal_order_scores_one(judged in grades(), cut in cutoffs(), gain_exp in any::<bool>()) {
        let gain = if gain_exp { Gain::Exp2 } else { Gain::Linear };
        let mut shown = judged.clone();
        shown.sort_unstable_by(|a, b| b.cmp(a));
        let mut scratch = Scratch::new();
        let ideal = scratch.ideal(IdealScope::Judged, &shown, &judged).to_vec();
        let mut out = vec![None; cut.len()];
        dcg::ndcg_at(&shown, &ideal, gain, &cut, &mut out);
        let has_gain = judged.iter().any(|&g| g > 0);
        for v in out {
            if has_gain { prop_assert_eq!(v, Some(1.0)); } else { prop_assert_eq!(v, None); }
        }
    }

    #[test]
    fn one_pass_cutoffs_match_direct_formulas(shown in grades(), extra in grades(), cut in cutoffs(), threshold in 1i32..=3, max_grade in 1i32..=4) {
        let judged: Vec<Grade> = shown.iter().chain(&extra).copied().collect();
        let num_rel = count_relevant(&judged, threshold);
        let n = cut.len();
        let (mut val, mut opt) = (vec![0.0; n], vec![None; n]);
        for gain in [Gain::Exp2, Gain::Linear] {
            dcg::dcg_at(&shown, gain, &cut, &mut val);
            for (i, &k) in cut.iter().enumerate() {
                prop_assert!((val[i] - dcg_direct(&shown, gain, k)).abs() < 1e-9);
            }
        }
        err::err_at(&shown, max_grade, &cut, &mut val);
        for (i, &k) in cut.iter().enumerate() {
            prop_assert!((val[i] - err_direct(&shown, max_grade, k)).abs() < 1e-12, "k={} {} vs {}", k, val[i], err_direct(&shown, max_grade, k));
        }
        precision::average_precision_at(&shown, threshold, num_rel, &cut, &mut opt);
        for (i, &k) in cut.iter().enumerate() {
            let direct = ap_direct(&shown, threshold, num_rel, k);
            prop_assert_eq!(opt[i].is_some(), direct.is_some());
            if let (Some(a), Some(b)) = (opt[i], direct) { prop_assert!((a - b).abs() < 1e-12); }
        }
    }

    #[test]
    fn auc_matches_pair_counting(labels in prop::collection::vec(0i32..=1, 0..30), raw_scores in prop::collection::vec(0u8..6, 30)) {
        let scores: Vec<f64> = raw_scores[..labels.len()].iter().map(|&s| f64::from(s) / 2.0).collect();
        let positive: Vec<bool> = labels.iter().map(|&g| g >= 1).collect();
        let expected = auc_pairs(&positive, &scores);
        let got = auc_by_score(&labels, &scores, 1, &mut Vec::new()).map(|a| a.auc);
        prop_assert_eq!(got.is_some(), expected.is_some());
        if let (Some(a), Some(b)) = (got, expected) { prop_assert!((a - b).abs() < 1e-12); }
        // Position scoring equals scores that strictly decrease down the list.
        let by_rank: Vec<f64> = (0..labels.len()).map(|i| -(i as f64)).collect();
        prop_assert_eq!(auc_by_position(&labels, 1).map(|a| a.auc), auc_pairs(&positive, &by_rank));
    }

    #[test]
    fn merging_is_order_and_grouping_free(
        (items, shuffled) in prop::collection::vec((0.0f64..=1.0, 1u32..50), 0..60)
            .prop_flat_map(|items| (Just(items.clone()), Just(items).prop_shuffle())),
        groups in 1usize..6,
    ) {
        let mut sequential = Moments::default();
        for &(v, w) in &items { sequential.add(v, w); }
        // The same items in another order, split into groups, merged in reverse.
        let mut shards = vec![Moments::default(); groups];
        for (i, &(v, w)) in shuffled.iter().enumerate() { shards[i % groups].add(v, w); }
        let mut merged = Moments::default();
        for s in shards.iter().rev() { merged.merge(s); }
        prop_assert_eq!(merged, sequential);
        // Grouping: ((a + b) + c) == (a + (b + c)).
        if groups >= 3 {
            let mut left = shards[0]; left.merge(&shards[1]); left.merge(&shards[2]);
            let mut right = shards[1]; right.merge(&shards[2]);
            let mut right_total = shards[0]; right_total.merge(&right);
            prop_assert_eq!(left, right_total);
        }
    }

    #[test]
    fn retracting_restores_state(
        base in prop::collection::vec((0.0f64..=1.0, 1u32..50), 0..30),
        added in prop::collection::vec((0.0f64..=1.0, 1u32..50), 0..30),
    ) {
        let mut m = Moments::default();
        for &(v, w) in &base { m.add(v, w); }
        let before = m;
        for &(v, w) in &added { m.add(v, w); }
        for &(v, w) in added.iter().rev() { m.retract(v, w); }
        prop_assert_eq!(m, before);
        // Unmerging a shard is the same as never having merged it.
        let mut shard = Moments::default();
        for &(v, w) in &added { shard.add(v, w); }
        m.merge(&shard);
        m.unmerge(&shard);
        prop_assert_eq!(m, before);
    }
}
