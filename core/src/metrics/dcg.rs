//! CG, DCG, IDCG and nDCG at cutoffs (seed 000/001/002/003: graded gain,
//! discount 1/log2(i+1) for 1-based rank i).
//!
//! Summation follows trec_eval term for term (`gain / log2(rank + 1)`, added
//! in rank order, zero gains skipped), so `eval` reproduces its figures to the
//! last printed digit.

use super::{Gain, Grade};
use std::sync::LazyLock;

/// Ranks whose `log2(rank + 1)` is precomputed; longer lists fall back to
/// computing it (same function, same value).
const LOG2_TABLE_LEN: usize = 4096;

static LOG2_RANK_PLUS_ONE: LazyLock<Box<[f64]>> =
    LazyLock::new(|| (0..LOG2_TABLE_LEN).map(|i| ((i + 2) as f64).log2()).collect());

/// `log2(rank + 1)` for the result at 0-based index `i` (rank `i + 1`).
#[inline]
pub fn discount_denominator(i: usize) -> f64 {
    match LOG2_RANK_PLUS_ONE.get(i) {
        Some(&d) => d,
        None => ((i + 2) as f64).log2(),
    }
}

/// The gain of one grade. Grades ≤ 0 (non-relevant, unjudged, or negative
/// "junk" judgments) have no gain under either convention.
#[inline]
pub fn gain(grade: Grade, kind: Gain) -> f64 {
    if grade <= 0 {
        return 0.0;
    }
    match kind {
        Gain::Linear => f64::from(grade),
        // 2^g as an integer shift is exact and avoids a libm call per
        // result; grades above 62 (far outside any judging scale) go
        // through exp2, saturating at 1023 rather than reaching infinity.
        Gain::Exp2 if grade < 63 => (1u64 << grade) as f64 - 1.0,
        Gain::Exp2 => (f64::from(grade.min(1023))).exp2() - 1.0,
    }
}

/// Cumulative gain (no discount) of the top k, for each cutoff.
pub fn cg_at(shown: &[Grade], kind: Gain, cutoffs: &[usize], out: &mut [f64]) {
    prefix_sums(shown, cutoffs, out, |_, g| gain(g, kind));
}

/// Discounted cumulative gain of the top k, for each cutoff.
pub fn dcg_at(shown: &[Grade], kind: Gain, cutoffs: &[usize], out: &mut [f64]) {
    prefix_sums(shown, cutoffs, out, |i, g| {
        let gain = gain(g, kind);
        if gain != 0.0 { gain / discount_denominator(i) } else { 0.0 }
    });
}

/// nDCG@k for each cutoff: DCG of `shown` over DCG of `ideal` (grades sorted
/// best first, see [`super::Scratch::ideal`]), both cut at k. `None` where the
/// ideal has no gain at all (nothing relevant was judged): 0/0 is undefined and
/// the caller's [`super::NoRelevant`] policy decides.
pub fn ndcg_at(shown: &[Grade], ideal: &[Grade], kind: Gain, cutoffs: &[usize], out: &mut [Option<f64>]) {
    debug_assert_eq!(cutoffs.len(), out.len());
    // The ideal's first entry decides whether any ideal gain exists.
    if ideal.first().is_none_or(|&g| gain(g, kind) == 0.0) {
        out.iter_mut().for_each(|o| *o = None);
        return;
    }
    // Two single passes without buffers: DCG then IDCG, merged per cutoff.
    let mut dcg = 0.0;
    let mut idcg = 0.0;
    let (mut i_dcg, mut i_ideal) = (0usize, 0usize);
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        while i_dcg < shown.len() && i_dcg < k {
            let g = gain(shown[i_dcg], kind);
            if g != 0.0 {
                dcg += g / discount_denominator(i_dcg);
            }
            i_dcg += 1;
        }
        while i_ideal < ideal.len() && i_ideal < k {
            let g = gain(ideal[i_ideal], kind);
            if g != 0.0 {
                idcg += g / discount_denominator(i_ideal);
            }
            i_ideal += 1;
        }
        *slot = Some(dcg / idcg);
    }
}

/// Runs `term(i, grade)` over the list once, recording the running sum at
/// each cutoff (cutoffs past the end see the whole list).
#[inline]
fn prefix_sums(shown: &[Grade], cutoffs: &[usize], out: &mut [f64], mut term: impl FnMut(usize, Grade) -> f64) {
    debug_assert_eq!(cutoffs.len(), out.len());
    let mut sum = 0.0;
    let mut i = 0usize;
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        while i < shown.len() && i < k {
            sum += term(i, shown[i]);
            i += 1;
        }
        *slot = sum;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::NO_CUTOFF;

    fn round(x: f64, digits: i32) -> f64 {
        let p = 10f64.powi(digits);
        (x * p).round() / p
    }

    /// Seed 000 and 001: grades 3,2,3,0,1,2 give CG_6 = 11 and, with gain
    /// rel_i (linear), DCG_6 = 3 + 1.262 + 1.5 + 0 + 0.387 + 0.712 = 6.861.
    #[test]
    fn seed_cg_and_dcg_linear() {
        let shown = [3, 2, 3, 0, 1, 2];
        let mut out = [0.0; 1];
        cg_at(&shown, Gain::Linear, &[6], &mut out);
        assert_eq!(out[0], 11.0);
        dcg_at(&shown, Gain::Linear, &[6], &mut out);
        assert_eq!(round(out[0], 3), 6.861);
    }

    /// Seed 000: IDCG_6 = 8.740 and nDCG_6 = 6.861 / 8.740 = 0.785. Which
    /// judged set gives 8.740? With judged grades {3,2,3,0,1,2} plus a 3 and a
    /// 2 (the reading), the ideal top 6 is 3,3,3,2,2,2:
    /// 3 + 1.893 + 1.5 + 0.861 + 0.774 + 0.712 = 8.740.
    #[test]
    fn seed_ndcg_linear_with_extra_judged() {
        let shown = [3, 2, 3, 0, 1, 2];
        let ideal = [3, 3, 3, 2, 2, 2, 1, 0];
        let mut idcg = [0.0];
        dcg_at(&ideal, Gain::Linear, &[6], &mut idcg);
        assert_eq!(round(idcg[0], 3), 8.740);
        let mut out = [None];
        ndcg_at(&shown, &ideal, Gain::Linear, &[6], &mut out);
        assert_eq!(round(out[0].unwrap(), 3), 0.785);
    }

    /// Seed 001: the 8 results add a 3 and a 0 to the six shown; the ideal top
    /// 6 is 3,3,3,2,2,1. The seed sums its rounded table to IDCG = 8.37 and
    /// prints nDCG = 81.96%; exactly, IDCG@6 = 8.3841 and nDCG@6 = 0.8184.
    #[test]
    fn seed_ndcg_linear_with_extra_three_and_zero() {
        let shown = [3, 2, 3, 0, 1, 2];
        let ideal = [3, 3, 3, 2, 2, 1, 0, 0];
        let mut idcg = [0.0];
        dcg_at(&ideal, Gain::Linear, &[6], &mut idcg);
        assert_eq!(round(idcg[0], 4), 8.3841);
        let mut out = [None];
        ndcg_at(&shown, &ideal, Gain::Linear, &[6], &mut out);
        assert_eq!(round(out[0].unwrap(), 4), 0.8184);
    }

    #[test]
    fn exp2_gain_and_cutoffs() {
        assert_eq!(gain(3, Gain::Exp2), 7.0);
        for g in 1..80 {
            assert_eq!(gain(g, Gain::Exp2), f64::from(g).exp2() - 1.0, "grade {g}");
        }
        assert_eq!(gain(0, Gain::Exp2), 0.0);
        assert_eq!(gain(-1, Gain::Linear), 0.0);
        // DCG with 2^g - 1: 7/1 + 3/log2(3) at k=2; whole list adds 7/2.
        let shown = [3, 2, 3];
        let mut out = [0.0; 3];
        dcg_at(&shown, Gain::Exp2, &[1, 2, NO_CUTOFF], &mut out);
        assert_eq!(out[0], 7.0);
        assert!((out[1] - (7.0 + 3.0 / 3f64.log2())).abs() < 1e-12);
        assert!((out[2] - (7.0 + 3.0 / 3f64.log2() + 3.5)).abs() < 1e-12);
    }

    #[test]
    fn ndcg_undefined_without_gain_and_one_for_ideal_order() {
        let mut out = [None, None];
        ndcg_at(&[0, 0], &[0], Gain::Exp2, &[1, 5], &mut out);
        assert_eq!(out, [None, None]);
        ndcg_at(&[2, 1, 0], &[2, 1], Gain::Exp2, &[1, 5], &mut out);
        assert_eq!(out, [Some(1.0), Some(1.0)]);
    }

    /// A short list is not flattered: the ideal is cut at k, not at the number
    /// of results returned (one relevant shown out of two judged).
    #[test]
    fn short_list_scores_below_one() {
        let mut out = [None];
        ndcg_at(&[1], &[1, 1], Gain::Linear, &[10], &mut out);
        let expected = 1.0 / (1.0 + 1.0 / 3f64.log2());
        assert_eq!(out[0], Some(expected));
    }
}
