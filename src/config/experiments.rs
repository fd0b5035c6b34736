//! The sections that read the metric engine's output as an experiment:
//! `[compare]` (every arm against the baseline, and when a difference
//! counts) and `[debias]` (position-debiased click metrics).

use super::Span;
use super::values::span;
use serde::{Deserialize, Serialize};

/// Every arm against the baseline arm (`[compare]`, docs/metrics.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompareConfig {
    /// The dimension label whose values are the arms. Unset: `ranker` when
    /// that is one of `dimensions.labels`, else no comparison; `""`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// The arm every other arm is compared with.
    pub baseline: String,
    /// Values of the arm label that are not A/B arms: their lists are
    /// interleaved traffic (a mix of rankers), which a difference against
    /// the baseline would not describe. (Randomized lists enter no
    /// comparison whatever their arm.)
    pub exclude: Vec<String>,
    /// Significance level: the status page colours a difference only below
    /// it, and `rankpulse_compare_lists_needed` is for a test at this level.
    pub alpha: f64,
    /// Probability of detecting `effect` that `lists_needed` is sized for.
    pub power: f64,
    /// Smallest absolute difference of means worth detecting (metric units).
    pub effect: f64,
    /// Standard deviation of the normal mixture over differences of the
    /// anytime-valid test (metric units): it finds differences near this
    /// size soonest; smaller finds small ones sooner and large ones later.
    pub mixture_sd: f64,
    /// The metric and cutoff that decide (`"ndcg@10"`, `"mrr@5"`): the
    /// anytime-valid comparison, its alert and the status page's lead use
    /// it alone. Unset: nDCG at 10, or at the largest cutoff when 10 is not
    /// one; `""`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// A session with no list for this long (event time) is over: a later
    /// list of its id starts a new cluster (docs/metrics.md).
    pub session_timeout: Span,
    /// Most sessions held for their running sums (per instance); past it
    /// the oldest go early and are counted.
    pub max_sessions: usize,
    /// Interleaving: the scale of preference the anytime-valid test of the
    /// win rate is tuned for, in units of P(candidate wins) − P(it loses).
    pub interleaving_effect: f64,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            dimension: None,
            baseline: "control".into(),
            exclude: Vec::new(),
            alpha: 0.05,
            power: 0.8,
            effect: 0.01,
            mixture_sd: 0.02,
            primary: None,
            session_timeout: span("30m"),
            max_sessions: 1_000_000,
            interleaving_effect: 0.1,
        }
    }
}

impl CompareConfig {
    /// Whether `arm` is compared with the baseline. Lists that sent no arm
    /// label (`unknown`) and arms past `dimensions.max_values` merged into
    /// `__other__` are no arm of the experiment: a difference or p-value
    /// of such a mix would be read as one arm's.
    pub fn compares(&self, arm: &str) -> bool {
        arm != self.baseline
            && arm != rankpulse_core::assemble::MISSING_DIMENSION
            && arm != rankpulse_core::assemble::OTHER_DIMENSION
            && !self.exclude.iter().any(|x| x == arm)
    }

    /// The index in `dimensions.labels` of the arm label, when comparing.
    pub fn arm_index(&self, labels: &[String]) -> Option<usize> {
        let name = self.dimension.as_deref().unwrap_or("ranker");
        labels.iter().position(|l| l == name)
    }
}

/// Position-debiased click metrics (`[debias]`, docs/metrics.md).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DebiasConfig {
    /// Ranks tracked (at most 64); 0: off. Each time bucket of each series
    /// then holds (K + K(K+1)/2 + 2K) counters: about 700 bytes at K = 10.
    pub max_rank: usize,
    /// Examination propensities of ranks 1…K under the position-based
    /// model, read relative to rank 1 (divided by the first value, as
    /// estimates are); empty: estimated from randomized lists (θ₁ = 1).
    pub propensities: Vec<f64>,
    /// Weights are at most 1 / this (clipping trades bias for variance);
    /// 0: no clipping.
    pub min_propensity: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only arms of the experiment are compared: not the baseline, not
    /// `compare.exclude`, not lists without the label, not `__other__`.
    #[test]
    fn compares_only_arms_of_the_experiment() {
        let c = CompareConfig { exclude: vec!["tdi-v3".into()], ..CompareConfig::default() };
        let compared: Vec<&str> = ["candidate", "control", "tdi-v3", "unknown", "__other__", "v2"]
            .into_iter()
            .filter(|a| c.compares(a))
            .collect();
        assert_eq!(compared, ["candidate", "v2"]);
    }
}
