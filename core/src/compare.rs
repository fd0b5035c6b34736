//! Comparing arms: the statistics read out of [`crate::accumulate`] sums.
//!
//! Place in the flow: after `window` and before `publish`. A window (or a
//! total) of one arm is a [`Moments`]: exact sums, counts and sums of squares
//! of per-list values. Everything here is a pure function of two such
//! Moments or of outcome counts, computed at read time, so instances and
//! shards merge their sums first and the tests below are exact on the
//! merged state; nothing is done per event.
//!
//! - [`welch`]: candidate minus baseline, its standard error and a two-sided
//!   p-value, Welch's unequal-variance t-test (Welch 1947; what
//!   `scipy.stats.ttest_ind(..., equal_var=False)` computes).
//! - [`lists_needed`]: lists per arm for a two-sided test at level α to
//!   detect an absolute difference δ with the given power, from the arms'
//!   current per-list variances (normal approximation).
//! - [`sign_test`]: the exact two-sided binomial (sign) test of
//!   interleaving wins against losses, ties left out (what
//!   `scipy.stats.binomtest(wins, wins + losses, 0.5)` computes).
//!
//! The distributions come from `statrs` (Student's t through the regularized
//! incomplete beta function, the normal quantile, the binomial CDF); the
//! committed cases in `core/tests/core_it/compare_scipy.rs` hold them to scipy.

use crate::accumulate::Moments;
use statrs::distribution::{Binomial, ContinuousCDF, DiscreteCDF, Normal, StudentsT};

/// Candidate minus baseline for one metric.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    /// mean(candidate) − mean(baseline).
    pub difference: f64,
    /// sqrt(se_candidate² + se_baseline²): the arms are independent lists.
    pub stderr: f64,
    /// Welch–Satterthwaite degrees of freedom.
    pub degrees_of_freedom: f64,
    /// Two-sided p-value of the difference under Student's t with
    /// `degrees_of_freedom`; `None` when both arms have zero variance
    /// (the difference is then exact, not a sample).
    pub p_value: Option<f64>,
}

/// The per-arm inputs of Welch's test: mean, squared standard error of the
/// mean, and the (effective) number of lists.
fn arm(m: &Moments) -> Option<(f64, f64, f64)> {
    let mean = m.mean()?;
    let se = m.stderr()?;
    let n = m.effective_count()?;
    Some((mean, se * se, n))
}

/// Welch's t-test of `candidate` against `baseline`; `None` until both arms
/// have a standard error (two or more lists, or an effective count above 1
/// for a weighted mean like GAUC).
pub fn welch(candidate: &Moments, baseline: &Moments) -> Option<Comparison> {
    let (mean_c, v_c, n_c) = arm(candidate)?;
    let (mean_b, v_b, n_b) = arm(baseline)?;
    let difference = mean_c - mean_b;
    let variance = v_c + v_b;
    let stderr = variance.sqrt();
    // A zero-variance arm contributes nothing to the denominator; both
    // zero leaves the degrees of freedom at the smaller arm's.
    let denominator = v_c * v_c / (n_c - 1.0) + v_b * v_b / (n_b - 1.0);
    let degrees_of_freedom =
        if denominator > 0.0 { variance * variance / denominator } else { (n_c.min(n_b) - 1.0).max(1.0) };
    let p_value = if stderr > 0.0 && degrees_of_freedom.is_finite() {
        StudentsT::new(0.0, 1.0, degrees_of_freedom).ok().map(|t| (2.0 * t.sf((difference / stderr).abs())).min(1.0))
    } else {
        None
    };
    Some(Comparison { difference, stderr, degrees_of_freedom, p_value })
}

/// Lists each arm needs for a two-sided test at level `alpha` to detect an
/// absolute difference `effect` with probability `power`, given the arms'
/// per-list variances now: n = (z₁₋α/₂ + z_power)² · (σ²_c + σ²_b) / δ²,
/// rounded up. `None` without a variance estimate, for settings outside
/// (0, 1) (config validation refuses those), or when n is past what an
/// f64 holds (an effect of 1e-200).
pub fn lists_needed(candidate: &Moments, baseline: &Moments, effect: f64, alpha: f64, power: f64) -> Option<f64> {
    if !(effect > 0.0 && alpha > 0.0 && alpha < 1.0 && power > 0.0 && power < 1.0) {
        return None;
    }
    let (_, v_c, n_c) = arm(candidate)?;
    let (_, v_b, n_b) = arm(baseline)?;
    // se² · n is the per-list variance (exactly s² for unit weights; for a
    // weighted mean like GAUC, n is the effective count and so is the
    // result: effective lists).
    let list_variance = v_c * n_c + v_b * n_b;
    if list_variance <= 0.0 {
        return None;
    }
    let normal = Normal::standard();
    // The upper quantile as the lower one negated: 1 − α/2 rounds to 1 (and
    // z to ∞) for α below about 2e-16, and loses digits long before.
    let z = -normal.inverse_cdf(alpha / 2.0) + normal.inverse_cdf(power);
    // z / effect first: effect² underflows to 0 for an effect below 1e-154.
    let needed = ((z / effect).powi(2) * list_variance).ceil();
    needed.is_finite().then_some(needed)
}

/// Exact two-sided sign test: p-value of `wins` against `losses` under
/// "each is equally likely" (ties are not counted). `None` with no wins
/// and no losses.
pub fn sign_test(wins: u64, losses: u64) -> Option<f64> {
    let n = wins.checked_add(losses)?;
    if n == 0 {
        return None;
    }
    let binomial = Binomial::new(0.5, n).ok()?;
    // Symmetric under p = 1/2: twice the smaller tail, capped at 1.
    Some((2.0 * binomial.cdf(wins.min(losses))).min(1.0))
}

/// Δ of interleaving (Chapelle et al., TOIS 2012):
/// (wins + ties / 2) / (wins + losses + ties) − 1/2, of the team whose
/// `wins` are given; `None` with no outcome.
pub fn interleaving_delta(wins: u64, losses: u64, ties: u64) -> Option<f64> {
    let n = wins as f64 + losses as f64 + ties as f64;
    (n > 0.0).then(|| (wins as f64 + ties as f64 / 2.0) / n - 0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moments(values: &[f64]) -> Moments {
        let mut m = Moments::default();
        for &v in values {
            m.add(v, 1);
        }
        m
    }

    /// Hand-derived: candidate {0.2, 0.4, 0.6} (mean 0.4, s² = 0.04,
    /// se² = 0.04/3), baseline {0.5, 0.7} (mean 0.6, s² = 0.02, se² = 0.01).
    /// difference −0.2; se = sqrt(0.04/3 + 0.01) = sqrt(0.07/3);
    /// df = (0.07/3)² / ((0.04/3)²/2 + 0.01²/1) = 0.000544… / 0.000188… = 2.8823529…
    #[test]
    fn welch_by_hand() {
        let c = welch(&moments(&[0.2, 0.4, 0.6]), &moments(&[0.5, 0.7])).unwrap();
        assert!((c.difference + 0.2).abs() < 1e-12, "{c:?}");
        assert!((c.stderr - (0.07f64 / 3.0).sqrt()).abs() < 1e-12, "{c:?}");
        let v = 0.07f64 / 3.0;
        let df = v * v / ((0.04f64 / 3.0).powi(2) / 2.0 + 0.0001);
        assert!((c.degrees_of_freedom - df).abs() < 1e-9, "{c:?}");
        assert!((df - 2.882_352_941).abs() < 1e-6);
    }

    #[test]
    fn undefined_until_both_arms_have_a_spread() {
        assert_eq!(welch(&moments(&[0.5]), &moments(&[0.1, 0.2])), None);
        assert_eq!(welch(&moments(&[0.1, 0.2]), &Moments::default()), None);
        // Both constant: the difference is exact and has no p-value.
        let c = welch(&moments(&[0.5, 0.5]), &moments(&[0.25, 0.25, 0.25])).unwrap();
        assert_eq!(c.p_value, None);
        assert_eq!(c.difference, 0.25);
        // Also for values whose squares are not multiples of 2^-52 (P@3 of
        // 1/3 and 2/3 in every list: the review's case, p = 2.9e-31 and one
        // list needed before), and for any constant: no spread, no test.
        let c = welch(&moments(&[2.0 / 3.0; 5]), &moments(&[1.0 / 3.0; 5])).unwrap();
        assert_eq!((c.stderr, c.p_value), (0.0, None), "{c:?}");
        assert_eq!(lists_needed(&moments(&[2.0 / 3.0; 5]), &moments(&[1.0 / 3.0; 5]), 0.1, 0.05, 0.8), None);
        let mut rng = rankpulse_testkit::Rng::new(31);
        for _ in 0..2_000 {
            // Metric values are in [0, 1] (the accumulators clamp them).
            let (a, b) = (rng.unit(), rng.unit());
            let n = 2 + rng.below(60) as usize;
            let c = welch(&moments(&vec![a; n]), &moments(&vec![b; n + 1])).unwrap();
            assert_eq!(c.p_value, None, "constants {a} and {b}, {n} lists: {c:?}");
        }
        // A real spread far below any metric's still counts: 1e-6 apart.
        let c = welch(&moments(&[0.5, 0.500_001, 0.5]), &moments(&[0.25, 0.250_001])).unwrap();
        assert!(c.p_value.is_some_and(|p| p < 1e-6), "{c:?}");
        // Identical arms: p = 1.
        let same = [0.1, 0.5, 0.9];
        assert_eq!(welch(&moments(&same), &moments(&same)).unwrap().p_value, Some(1.0));
    }

    /// n = (1.959964 + 0.841621)² · (0.04 + 0.02) / 0.1² = 7.8489 · 6
    /// = 47.09… → 48, with s² = 0.04 and 0.02 as in `welch_by_hand`
    /// (se² · n = s²).
    #[test]
    fn lists_needed_by_hand() {
        let n = lists_needed(&moments(&[0.2, 0.4, 0.6]), &moments(&[0.5, 0.7]), 0.1, 0.05, 0.8).unwrap();
        let z = 1.959_963_984_540_054 + 0.841_621_233_572_914_3;
        assert_eq!(n, (z * z * 0.06f64 / 0.01).ceil());
        assert_eq!(n, 48.0);
        assert_eq!(lists_needed(&moments(&[0.2, 0.4]), &moments(&[0.5, 0.7]), 0.0, 0.05, 0.8), None);
    }

    /// A tiny α keeps its quantile: scipy.stats.norm.isf(5e-17) is
    /// 8.304785425194112, so α = 1e-16 needs ⌈(8.3048 + 0.8416)² · 0.06 / 0.01⌉
    /// = 502 lists (it was ∞). An effect whose square underflows gives no
    /// figure rather than ∞.
    #[test]
    fn lists_needed_at_extreme_settings() {
        let (c, b) = (moments(&[0.2, 0.4, 0.6]), moments(&[0.5, 0.7]));
        assert_eq!(lists_needed(&c, &b, 0.1, 1e-16, 0.8), Some(502.0));
        assert_eq!(lists_needed(&c, &b, 1e-200, 0.05, 0.8), None);
        assert!(lists_needed(&c, &b, 1e-100, 0.05, 0.8).is_some_and(f64::is_finite));
    }

    /// Small exact cases: P(X ≤ k) for Binomial(n, 1/2) is C(n,0..k)/2ⁿ.
    /// 8 wins, 2 losses: 2 · (1 + 10 + 45) / 1024 = 0.109375.
    /// 5 and 5: 1. 10 and 0: 2 / 1024.
    #[test]
    fn sign_test_by_hand() {
        assert!((sign_test(8, 2).unwrap() - 0.109_375).abs() < 1e-12);
        assert!((sign_test(2, 8).unwrap() - 0.109_375).abs() < 1e-12);
        assert_eq!(sign_test(5, 5), Some(1.0));
        assert!((sign_test(10, 0).unwrap() - 2.0 / 1024.0).abs() < 1e-15);
        assert_eq!(sign_test(0, 0), None);
        // More outcomes than a u64 holds: refused, not wrapped.
        assert_eq!(sign_test(u64::MAX, 1), None);
    }

    #[test]
    fn delta_by_hand() {
        assert!((interleaving_delta(6, 2, 2).unwrap() - 0.2).abs() < 1e-15);
        assert_eq!(interleaving_delta(0, 0, 4), Some(0.0));
        assert_eq!(interleaving_delta(0, 0, 0), None);
    }
}
