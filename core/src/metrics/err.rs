//! Expected reciprocal rank under the cascade model (seeds 000, 002, 004):
//! the user scans top down and stops at rank r with probability
//! R_r · Π_{i<r} (1 − R_i), where R(g) = (2^g − 1) / 2^max_grade;
//! ERR = Σ_r (1/r) · P(stop at r).

use super::Grade;

/// Probability that a document of grade `g` satisfies the user.
/// Grades ≤ 0 never do; grades above `max_grade` are treated as `max_grade`
/// (inputs are validated upstream, this only keeps R within [0, 1)).
#[inline]
pub fn satisfaction_probability(g: Grade, max_grade: Grade) -> f64 {
    if g <= 0 {
        return 0.0;
    }
    let max = max_grade.clamp(1, 1023);
    let g = g.min(max);
    if max < 63 {
        // Exact powers of two without libm calls (the hot path).
        ((1u64 << g) - 1) as f64 / (1u64 << max) as f64
    } else {
        (f64::from(g).exp2() - 1.0) / f64::from(max).exp2()
    }
}

/// ERR@k for each ascending cutoff.
pub fn err_at(shown: &[Grade], max_grade: Grade, cutoffs: &[usize], out: &mut [f64]) {
    debug_assert_eq!(cutoffs.len(), out.len());
    let mut err = 0.0;
    // Probability that the user is still scanning when reaching rank i + 1.
    let mut p_continue = 1.0;
    let mut i = 0usize;
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        while i < shown.len() && i < k {
            let r = satisfaction_probability(shown[i], max_grade);
            if r != 0.0 {
                err += p_continue * r / (i + 1) as f64;
                p_continue *= 1.0 - r;
            }
            i += 1;
        }
        *slot = err;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::NO_CUTOFF;

    #[test]
    fn satisfaction_follows_the_seed_formula() {
        assert_eq!(satisfaction_probability(0, 4), 0.0);
        assert_eq!(satisfaction_probability(4, 4), 15.0 / 16.0);
        assert_eq!(satisfaction_probability(1, 4), 1.0 / 16.0);
        assert_eq!(satisfaction_probability(9, 4), 15.0 / 16.0);
        assert_eq!(satisfaction_probability(-3, 4), 0.0);
        for max in 1..70 {
            for g in 1..=max {
                let libm = (f64::from(g).exp2() - 1.0) / f64::from(max).exp2();
                assert_eq!(satisfaction_probability(g, max), libm, "g={g} max={max}");
            }
        }
    }

    /// Hand computation with max grade 3 (R = 7/8, 3/8, 1/8 for grades 3, 2, 1):
    /// grades 2,0,3,1 → 3/8 + 0 + (5/8)(7/8)/3 + (5/8)(1/8)(1/8)/4.
    #[test]
    fn hand_computed_cascade() {
        let mut out = [0.0; 3];
        err_at(&[2, 0, 3, 1], 3, &[1, 3, NO_CUTOFF], &mut out);
        let r3 = 3.0 / 8.0;
        let at3 = r3 + (5.0 / 8.0) * (7.0 / 8.0) / 3.0;
        let at4 = at3 + (5.0 / 8.0) * (1.0 / 8.0) * (1.0 / 8.0) / 4.0;
        assert_eq!(out[0], r3);
        assert!((out[1] - at3).abs() < 1e-15);
        assert!((out[2] - at4).abs() < 1e-15);
    }

    /// With binary grades and max grade 1, R = 1/2: ERR of a single relevant
    /// result at rank r is 1/(2r).
    #[test]
    fn binary_single_relevant() {
        let mut out = [0.0];
        err_at(&[0, 0, 1], 1, &[NO_CUTOFF], &mut out);
        assert_eq!(out[0], 1.0 / 6.0);
    }
}
