//! Anytime-valid comparison of arms: the decision a page is built on.
//!
//! Place in the flow: beside [`crate::compare`], after `accumulate` and
//! before `publish`: pure functions of since-start sums, computed at read
//! time. [`crate::compare`] answers "how different are the arms in this
//! window"; a p-value of a rolling window read every minute is not a
//! decision rule (read often enough, it crosses any threshold). Here the
//! evidence runs from an arm's first list and the error guarantee holds
//! however often and however long it is read.
//!
//! - [`clustered_mean`]: an arm's mean with sessions as the unit. Searches
//!   of one user share a session effect, so lists are not independent; the
//!   variance of the ratio mean ΣS/ΣN over sessions (S a session's sum of
//!   per-list values, N its lists) is the delta method's (Deng, Knoblich
//!   and Lu 2018): Σ(Sᵢ − μ·Nᵢ)² / (ΣN)² · n/(n − 1), from the mergeable
//!   sums ΣS², ΣS·N, ΣN² of [`crate::accumulate::Clusters`]. With one list
//!   per session it is the list-level squared standard error s²/n.
//! - [`mixture`]: the mixture sequential probability ratio test of the
//!   difference of two arms (Johari, Pekelis and Walsh 2017; Lindon and
//!   Malek 2022): with Δ̂ ~ N(Δ, v) and a N(0, τ²) mixture over Δ,
//!   Λ = sqrt(v / (v + τ²)) · exp(τ²Δ̂² / (2v(v + τ²))). Under Δ = 0 it is a
//!   martingale of mean 1, so by Ville's inequality P(Λ ever ≥ 1/α) ≤ α:
//!   the always-valid p-value is min(1, 1/Λ), and inverting the test gives
//!   the confidence sequence Δ̂ ± sqrt(v(v + τ²)/τ² · (2 ln(1/α) + ln((v +
//!   τ²)/v))), which covers the true difference at every time at once with
//!   probability 1 − α. With v estimated from the data the guarantee is
//!   asymptotic, as for every test of means; the simulation in
//!   `core/tests/core_it/sequential_calibration.rs` measures it on the traffic
//!   this product watches.
//! - [`sign_mixture`]: the same for interleaving. Each decided list is +1
//!   (the candidate won) or −1; under "neither is preferred" the sum is a
//!   martingale of bounded (1-sub-Gaussian) steps, so Robbins's normal
//!   mixture Λ = (1 + nτ²)^(−1/2) · exp(τ²S² / (2(1 + nτ²))) is a
//!   nonnegative supermartingale and the guarantee is exact, not asymptotic.
//!
//! τ is the scale of differences the test is tuned for (`compare.mixture_sd`,
//! `compare.interleaving_effect`): the boundary is tightest near the
//! sample size at which a difference of τ becomes detectable. Every
//! formula here is also written in PromQL in
//! `deploy/prometheus/rankpulse-rules.yml`, over the counters summed
//! across instances; the tests below hold both to the same figures.

use crate::accumulate::{Accumulators, Clusters, Moments};
use crate::metrics::list::Family;
use std::collections::BTreeMap;

/// Sessions each arm needs before a decision is drawn: the variance is
/// estimated, and the guarantee is asymptotic. The alert rules and the
/// status page use the same guard; the simulations measure with it.
pub const MIN_SESSIONS: f64 = 100.0;

/// Every arm's since-start moments of one metric (`family` at the
/// `k_index`-th cutoff) and its session sums: the series of `acc` grouped
/// by their value of the dimension `arm_index`, merged over the others.
pub fn arms(
    acc: &Accumulators,
    arm_index: usize,
    family: Family,
    k_index: usize,
) -> BTreeMap<String, (Moments, Clusters)> {
    let mut arms: BTreeMap<String, (Moments, Clusters)> = BTreeMap::new();
    for (dims, series) in &acc.series {
        let Some(arm) = dims.get(arm_index) else { continue };
        let total = series.total();
        let (m, c) = arms.entry(arm.clone()).or_default();
        m.merge(total.family(family, acc.cutoffs, k_index));
        c.merge(&series.clusters);
    }
    arms
}

/// An arm's mean with sessions as the unit of analysis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClusteredMean {
    /// ΣS / ΣN: the mean per list.
    pub mean: f64,
    /// Squared standard error of `mean`, sessions as clusters.
    pub variance: f64,
    /// Sessions (clusters) and lists behind it.
    pub sessions: f64,
    pub lists: f64,
}

impl ClusteredMean {
    /// The design effect: how much wider the session-clustered variance is
    /// than the one that takes every list as independent (s²/n). 1 when
    /// sessions carry no shared effect; `None` without a spread.
    pub fn design_effect(&self, moments: &Moments) -> Option<f64> {
        let se = moments.stderr()?;
        (se > 0.0).then(|| self.variance / (se * se))
    }
}

/// An arm's mean and its session-clustered variance, from the since-start
/// moments of one metric and its session sums; `None` until the arm has
/// two sessions (a variance needs two clusters) or when the sums disagree
/// (a weighted mean, or a corrupt checkpoint).
pub fn clustered_mean(moments: &Moments, clusters: &Clusters) -> Option<ClusteredMean> {
    let n = clusters.sessions as f64;
    let lists = moments.count as f64;
    if clusters.sessions < 2 || moments.count < clusters.sessions || moments.weight != moments.count {
        return None;
    }
    let mean = moments.weighted_sum() / lists;
    let (s_sq, cross, n_sq) = clusters.sums();
    // Σ(S − μN)², expanded. Below the sums' resolution (each S² rounded
    // to 2^-52, each term rounded to f64) it is rounding, not spread: arms
    // that score one constant must have no variance, as in
    // `Moments::stderr`.
    let residual = s_sq - 2.0 * mean * cross + mean * mean * n_sq;
    let resolution = f64::EPSILON * 4.0 * (s_sq.abs() + mean * mean * n_sq.abs() + n);
    let residual = if residual > resolution { residual } else { 0.0 };
    let variance = residual / (lists * lists) * n / (n - 1.0);
    variance.is_finite().then_some(ClusteredMean { mean, variance, sessions: n, lists })
}

/// The anytime-valid comparison of a candidate with the baseline.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sequential {
    /// mean(candidate) − mean(baseline).
    pub difference: f64,
    /// Its squared standard error: the arms' clustered variances added.
    pub variance: f64,
    /// The confidence sequence at level 1 − α: it holds the true
    /// difference at every moment at once with probability 1 − α.
    pub lower: f64,
    pub upper: f64,
    /// min(1, 1/Λ): below α exactly when the sequence excludes 0.
    pub p_value: f64,
}

/// The mixture SPRT of `candidate` − `baseline` with mixing scale `tau`, at
/// level `alpha`; `None` without a variance (an arm without two sessions,
/// or both arms constant) or for settings outside (0, 1) and (0, ∞).
pub fn mixture(candidate: &ClusteredMean, baseline: &ClusteredMean, tau: f64, alpha: f64) -> Option<Sequential> {
    if !(tau > 0.0 && tau.is_finite() && alpha > 0.0 && alpha < 1.0) {
        return None;
    }
    let difference = candidate.mean - baseline.mean;
    let variance = candidate.variance + baseline.variance;
    if !(variance > 0.0 && variance.is_finite()) {
        return None;
    }
    let t2 = tau * tau;
    let widened = variance + t2;
    let log_lr = 0.5 * (variance / widened).ln() + t2 * difference * difference / (2.0 * variance * widened);
    let p_value = (-log_lr).exp().min(1.0);
    let half = (variance * widened / t2 * (2.0 * (1.0 / alpha).ln() + (widened / variance).ln())).sqrt();
    Some(Sequential { difference, variance, lower: difference - half, upper: difference + half, p_value })
}

/// The anytime-valid test of interleaving: `wins` of the candidate
/// against `losses` (ties decide nothing), with mixing scale `tau` in
/// units of the mean step 2·P(win) − 1. Returns (always-valid p-value,
/// z = (wins − losses)/√(wins + losses)); `None` with nothing decided.
pub fn sign_mixture(wins: u64, losses: u64, tau: f64) -> Option<(f64, f64)> {
    let n = wins as f64 + losses as f64;
    if n == 0.0 || !(tau > 0.0 && tau.is_finite()) {
        return None;
    }
    let s = wins as f64 - losses as f64;
    let t2n = 1.0 + n * tau * tau;
    let log_lr = -0.5 * t2n.ln() + tau * tau * s * s / (2.0 * t2n);
    Some(((-log_lr).exp().min(1.0), s / n.sqrt()))
}

/// z of a change of one ranker's mean against its own past (the quality
/// drop rule: the last hours against the same hours of earlier weeks),
/// both with sessions as the unit; `None` without a variance.
pub fn change_z(now: &ClusteredMean, then: &ClusteredMean) -> Option<f64> {
    let variance = now.variance + then.variance;
    (variance > 0.0 && variance.is_finite()).then(|| (now.mean - then.mean) / variance.sqrt())
}

/// The wins (or losses) at which [`sign_mixture`]'s p-value first reaches
/// `alpha` after `n` decided lists: |S| ≥ sqrt(2(1 + nτ²)/τ² · (ln(1/α) +
/// ½ ln(1 + nτ²))). The boundary the alert rule draws.
pub fn sign_boundary(n: f64, tau: f64, alpha: f64) -> f64 {
    let t2n = 1.0 + n * tau * tau;
    (2.0 * t2n / (tau * tau) * ((1.0 / alpha).ln() + 0.5 * t2n.ln())).sqrt()
}

/// The Benjamini–Hochberg cut-off of `p_values` at false-discovery rate
/// `alpha`: the largest p(i) with p(i) ≤ i·α/m (sorted ascending, m of
/// them), or `None` when none is. Every p at or below it is a discovery.
/// What the status page colours: each test on it is valid however often
/// it is read, and this keeps the share of false colours among the
/// coloured at most α however many arms and series it shows.
pub fn benjamini_hochberg(p_values: &[f64], alpha: f64) -> Option<f64> {
    let mut sorted: Vec<f64> = p_values.iter().copied().filter(|p| !p.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    let m = sorted.len() as f64;
    sorted.iter().enumerate().rev().find(|&(i, &p)| p <= (i + 1) as f64 * alpha / m).map(|(_, &p)| p)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::SessionSums;

    /// Benjamini and Hochberg's (1995) procedure on their own example:
    /// 15 p-values at q = 0.05 reject the four smallest (the step-up cut
    /// is at the fourth, 0.0095 ≤ 4 · 0.05/15 = 0.0133).
    #[test]
    fn benjamini_hochberg_rejects_as_the_paper_does() {
        let p = [
            0.0001, 0.0004, 0.0019, 0.0095, 0.0201, 0.0278, 0.0298, 0.0344, 0.0459, 0.3240, 0.4262, 0.5719, 0.6528,
            0.7590, 1.0,
        ];
        assert_eq!(benjamini_hochberg(&p, 0.05), Some(0.0095));
        // One test: the cut-off is α itself.
        assert_eq!(benjamini_hochberg(&[0.04], 0.05), Some(0.04));
        assert_eq!(benjamini_hochberg(&[0.06], 0.05), None);
        // Step-up: a larger p can carry smaller ones that miss their own line.
        assert_eq!(benjamini_hochberg(&[0.03, 0.04], 0.05), Some(0.04));
        assert_eq!(benjamini_hochberg(&[], 0.05), None);
    }

    /// Sessions given as their lists' values.
    fn arm(sessions: &[&[f64]]) -> (Moments, Clusters) {
        let mut m = Moments::default();
        let mut c = Clusters::default();
        for s in sessions {
            let mut sums = SessionSums::default();
            for &v in *s {
                m.add(v, 1);
                c.add(&mut sums, v);
            }
        }
        (m, c)
    }

    /// Hand-derived. Sessions {0.2, 0.4} and {0.9}: ΣS = 1.5, ΣN = 3,
    /// μ = 0.5; residuals S − μN = 0.6 − 1.0 = −0.4 and 0.9 − 0.5 = 0.4;
    /// Σ = 0.32; variance = 0.32 / 9 · 2/1 = 0.0711….
    #[test]
    fn clustered_mean_by_hand() {
        let (m, c) = arm(&[&[0.2, 0.4], &[0.9]]);
        let x = clustered_mean(&m, &c).unwrap();
        assert!((x.mean - 0.5).abs() < 1e-15, "{x:?}");
        assert!((x.variance - 0.32 / 9.0 * 2.0).abs() < 1e-15, "{x:?}");
        assert_eq!((x.sessions, x.lists), (2.0, 3.0));
        // One session: no variance.
        let (m, c) = arm(&[&[0.2, 0.4, 0.9]]);
        assert_eq!(clustered_mean(&m, &c), None);
    }

    /// One list per session: the clustered variance is Welch's se² = s²/n.
    #[test]
    fn one_list_per_session_is_the_list_variance() {
        let values = [0.1, 0.5, 0.9, 0.0, 1.0, 0.25, 0.75];
        let sessions: Vec<&[f64]> = values.iter().map(std::slice::from_ref).collect();
        let (m, c) = arm(&sessions);
        let x = clustered_mean(&m, &c).unwrap();
        let se = m.stderr().unwrap();
        assert!((x.variance - se * se).abs() < 1e-15, "{x:?} against {}", se * se);
        assert!((x.design_effect(&m).unwrap() - 1.0).abs() < 1e-12);
        // Whole sessions of equal values are one value each, repeated: the
        // design effect is well above 1.
        let (m, c) = arm(&[&[0.0; 5], &[1.0; 5], &[0.0; 5], &[1.0; 5]]);
        let x = clustered_mean(&m, &c).unwrap();
        assert!(x.design_effect(&m).unwrap() > 4.0, "{x:?}");
    }

    /// Λ and the sequence by hand: Δ̂ = −0.03, v = 1e-4 (se 0.01), τ = 0.01:
    /// ln Λ = ½ ln(½) + 1e-4 · 9e-4 / (2 · 1e-4 · 2e-4) = −0.34657 + 2.25;
    /// p = exp(−1.90343) = 0.14906; half-width at α = 0.05:
    /// sqrt(1e-4 · 2e-4 / 1e-4 · (2 ln 20 + ln 2)) = sqrt(2e-4 · 6.68461) = 0.036564.
    #[test]
    fn mixture_by_hand() {
        let c = ClusteredMean { mean: 0.47, variance: 0.5e-4, sessions: 100.0, lists: 300.0 };
        let b = ClusteredMean { mean: 0.50, variance: 0.5e-4, sessions: 100.0, lists: 300.0 };
        let s = mixture(&c, &b, 0.01, 0.05).unwrap();
        let p = (-(0.5 * 0.5f64.ln() + 2.25)).exp();
        assert!((s.p_value - p).abs() < 1e-12, "{s:?}");
        assert!((p - 0.149_06).abs() < 1e-5);
        let half = (2e-4 * (2.0 * 20f64.ln() + 2f64.ln())).sqrt();
        assert!((s.upper - (-0.03 + half)).abs() < 1e-12 && (s.lower - (-0.03 - half)).abs() < 1e-12, "{s:?}");
        assert!((half - 0.036_564).abs() < 1e-6);
        // The sequence excludes 0 exactly when p < α.
        for d in [-0.02, -0.03, -0.035, -0.0366, -0.037, -0.05, 0.04] {
            let c = ClusteredMean { mean: 0.5 + d, ..b };
            let s = mixture(&c, &b, 0.01, 0.05).unwrap();
            assert_eq!(s.upper < 0.0 || s.lower > 0.0, s.p_value < 0.05, "{d}: {s:?}");
        }
        assert_eq!(mixture(&c, &b, 0.0, 0.05), None);
        assert_eq!(mixture(&c, &b, 0.01, 1.0), None);
        let flat = ClusteredMean { variance: 0.0, ..b };
        assert_eq!(mixture(&flat, &flat, 0.01, 0.05), None);
    }

    /// 60 wins, 40 losses, τ = 0.1: 1 + nτ² = 2, S = 20;
    /// ln Λ = −½ ln 2 + 0.01 · 400 / 4 = 0.65343; p = 0.52026. The boundary
    /// at n = 100, α = 0.05: sqrt(2 · 2 / 0.01 · (ln 20 + ½ ln 2)) = 36.56.
    #[test]
    fn sign_mixture_by_hand() {
        let (p, z) = sign_mixture(60, 40, 0.1).unwrap();
        assert!((p - (-(-0.5 * 2f64.ln() + 1.0)).exp()).abs() < 1e-12, "{p}");
        assert!((z - 2.0).abs() < 1e-12);
        let b = sign_boundary(100.0, 0.1, 0.05);
        assert!((b - (400.0 * (20f64.ln() + 0.5 * 2f64.ln())).sqrt()).abs() < 1e-12);
        assert!((b - 36.56).abs() < 0.01, "{b}");
        // At the boundary p = α: 100 decided lists, S just past ±36.56.
        let (p, _) = sign_mixture(69, 31, 0.1).unwrap(); // S = 38
        assert!(p < 0.05, "{p}");
        let (p, _) = sign_mixture(68, 32, 0.1).unwrap(); // S = 36
        assert!(p > 0.05, "{p}");
        assert_eq!(sign_mixture(0, 0, 0.1), None);
        // Tied: p = 1 (Λ < 1 always: capped).
        assert_eq!(sign_mixture(50, 50, 0.1).map(|x| x.0), Some(1.0));
    }

    /// The worked examples of `deploy/prometheus/rankpulse-rules.test.yml`,
    /// whose PromQL computes the same quantities from the same counter sums:
    /// the engine gives the figures promtool is held to there.
    #[test]
    fn the_rules_tests_worked_examples() {
        const UNIT: f64 = (1u64 << 52) as f64;
        let arm = |sessions: i64, lists: i64, sum: f64, s_sq: f64, cross: f64, n_sq: i64| {
            let m = Moments {
                sum: (sum * UNIT) as i128,
                weight: lists,
                count: lists,
                weight_sq: i128::from(lists),
                ..Moments::default()
            };
            let c = Clusters { sessions, sum_sq: (s_sq * UNIT) as i128, cross: (cross * UNIT) as i128, count_sq: n_sq };
            clustered_mean(&m, &c).unwrap()
        };
        let round4 = |x: f64| (x * 1e4).round() / 1e4;
        // RankpulseCandidateWorseThanControl fires (market de).
        let (c, b) = (arm(1000, 2000, 900.0, 910.0, 1800.0, 4000), arm(1000, 2000, 1000.0, 1100.0, 2000.0, 4000));
        assert_eq!(((c.variance * 1e9).round(), (b.variance * 1e9).round()), (25025.0, 25025.0));
        let s = mixture(&c, &b, 0.02, 0.05).unwrap();
        assert_eq!((round4(s.lower), round4(s.upper)), (-0.0715, -0.0285), "{s:?}");
        // It does not (de, nz).
        let c = arm(1000, 2000, 980.0, 1060.4, 1960.0, 4000);
        let s = mixture(&c, &b, 0.02, 0.05).unwrap();
        assert_eq!((round4(s.lower), round4(s.upper)), (-0.0315, 0.0115), "{s:?}");
        let s =
            mixture(&arm(50, 100, 20.0, 9.0, 40.0, 200), &arm(50, 100, 50.0, 51.0, 100.0, 200), 0.02, 0.05).unwrap();
        assert_eq!((round4(s.lower), round4(s.upper)), (-0.3467, -0.2533), "{s:?}");
        // RankpulseQualityDrop (us and nz): the last hour against the same
        // hour one and two weeks ago pooled.
        let now = arm(600, 3000, 1350.0, 3187.5, 6750.0, 15000);
        let then = arm(1200, 6000, 3000.0, 7800.0, 15000.0, 30000);
        assert_eq!(((now.variance * 1e9).round(), (then.variance * 1e9).round()), (16694.0, 8340.0));
        assert_eq!((change_z(&now, &then).unwrap() * 100.0).round(), -999.0);
        let (now, then) = (arm(60, 240, 108.0, 255.0, 540.0, 1200), arm(120, 480, 240.0, 624.0, 1200.0, 2400));
        assert_eq!((now.variance * 1e9).round(), 211_864.0);
        assert_eq!((change_z(&now, &then).unwrap() * 100.0).round(), -281.0);
        // RankpulseInterleavingCandidateLoses: the boundary at 10,000
        // decided lists, and the losses over it.
        assert_eq!((sign_boundary(10_000.0, 0.1, 0.05) * 100.0).round(), 32_730.0);
        assert_eq!((1_800.0 / sign_boundary(10_000.0, 0.1, 0.05) * 100.0).round(), 550.0);
        assert_eq!(((2_340.0 - 2_250.0) / sign_boundary(4_590.0, 0.1, 0.05) * 100.0).round(), 42.0);
        // Crossing exactly when the p-value reaches α.
        assert!(sign_mixture(4_100, 5_900, 0.1).unwrap().0 < 0.05);
        assert!(sign_mixture(2_250, 2_340, 0.1).unwrap().0 > 0.05);
    }

    /// Exact for interleaving: under "no preference" the chance that the
    /// p-value ever falls below α is at most α. Computed exactly by
    /// dynamic programming over the ±1 walk (no simulation): the mass of
    /// paths that have not yet crossed, 2,000 steps.
    #[test]
    fn sign_mixture_never_crosses_more_than_alpha() {
        for (tau, alpha) in [(0.1, 0.05), (0.05, 0.05), (0.2, 0.01)] {
            let steps = 2_000usize;
            // alive[s + steps]: probability of being at S = s without a crossing.
            let mut alive = vec![0.0f64; 2 * steps + 3];
            alive[steps] = 1.0;
            let mut crossed = 0.0;
            for n in 1..=steps {
                let mut next = vec![0.0f64; alive.len()];
                for (i, &p) in alive.iter().enumerate() {
                    if p == 0.0 {
                        continue;
                    }
                    next[i - 1] += p / 2.0;
                    next[i + 1] += p / 2.0;
                }
                let bound = sign_boundary(n as f64, tau, alpha);
                for (i, p) in next.iter_mut().enumerate() {
                    let s = i as f64 - steps as f64;
                    if s.abs() >= bound {
                        crossed += *p;
                        *p = 0.0;
                    }
                }
                alive = next;
            }
            assert!(crossed <= alpha, "τ {tau}, α {alpha}: crossed with probability {crossed}");
            // And not absurdly conservative: a test that never rejects would pass too.
            assert!(crossed > alpha / 20.0, "τ {tau}, α {alpha}: crossed with probability {crossed}");
        }
    }
}
