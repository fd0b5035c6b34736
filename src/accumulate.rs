//! Mergeable accumulators: the stage after the metric engine.
//!
//! Per-list metric values are folded into [`Moments`] (sum, weight, count,
//! sum of squares, plus the sum of squared weights for the standard error of
//! a weighted mean). Shards, time buckets and instances combine by adding
//! Moments, and a late update retracts an old contribution by subtracting it.
//!
//! Why fixed point: with `f64` sums, `(a + b) + c != a + (b + c)` in general,
//! so two shards merged in different orders, or a retraction, would leave
//! last-bit residue, and a restarted or rebalanced daemon would report
//! numbers that differ from an uninterrupted one. Values are metric values in
//! [0, 1]; each is quantized once to an integer multiple of 2^-52 and all sums
//! are integers, so merging is exactly associative and commutative and
//! retraction restores the previous state bit for bit. The quantization error
//! (≤ 1.1e-16 per value) is far below anything a dashboard shows.

use serde::{Deserialize, Serialize};

/// Fixed-point scale: a value v is stored as round(v · 2^52).
const SCALE_BITS: i32 = 52;
const SCALE: f64 = (1u64 << SCALE_BITS) as f64;

/// Largest magnitude accepted; metric values live in [0, 1] and anything
/// outside that is a bug upstream, clamped so the sums stay meaningful.
const MAX_VALUE: f64 = 1.0;

/// Quantizes a metric value (clamped to [0, 1]; NaN counts as 0).
#[inline]
fn quantize(value: f64) -> i64 {
    let v = if value.is_nan() { 0.0 } else { value.clamp(-MAX_VALUE, MAX_VALUE) };
    (v * SCALE).round() as i64
}

/// The sufficient statistics of a weighted mean, exactly mergeable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Moments {
    /// Σ w·v, in units of 2^-52.
    pub sum: i128,
    /// Σ w·v², in units of 2^-52 (each v² quantized on its own).
    pub sum_sq: i128,
    /// Σ w: the denominator of the mean.
    pub weight: i64,
    /// Σ w²: gives the effective sample size of a weighted mean.
    pub weight_sq: i128,
    /// Number of contributions (lists), whatever their weight.
    pub count: i64,
}

impl Moments {
    /// Adds one list's value with integer weight `weight` (1 for plain means).
    #[inline]
    pub fn add(&mut self, value: f64, weight: u32) {
        self.apply(value, weight, 1);
    }

    /// Removes a contribution previously made with [`Moments::add`] with the
    /// same arguments; the state becomes exactly what it was without it.
    #[inline]
    pub fn retract(&mut self, value: f64, weight: u32) {
        self.apply(value, weight, -1);
    }

    #[inline]
    fn apply(&mut self, value: f64, weight: u32, sign: i64) {
        let w = i64::from(weight) * sign;
        let q = i128::from(quantize(value));
        let q_sq = i128::from(quantize(value * value));
        let w128 = i128::from(w);
        self.sum += w128 * q;
        self.sum_sq += w128 * q_sq;
        self.weight += w;
        self.weight_sq += i128::from(weight) * i128::from(weight) * i128::from(sign);
        self.count += sign;
    }

    /// Folds another accumulator in (shards, buckets, instances).
    #[inline]
    pub fn merge(&mut self, other: &Moments) {
        self.sum += other.sum;
        self.sum_sq += other.sum_sq;
        self.weight += other.weight;
        self.weight_sq += other.weight_sq;
        self.count += other.count;
    }

    /// Subtracts another accumulator (a bucket leaving a window).
    #[inline]
    pub fn unmerge(&mut self, other: &Moments) {
        self.sum -= other.sum;
        self.sum_sq -= other.sum_sq;
        self.weight -= other.weight;
        self.weight_sq -= other.weight_sq;
        self.count -= other.count;
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.weight == 0
    }

    /// Σ w·v as a float (the `_sum` counters).
    pub fn weighted_sum(&self) -> f64 {
        self.sum as f64 / SCALE
    }

    /// The weighted mean, or `None` when nothing (or zero weight) was added.
    pub fn mean(&self) -> Option<f64> {
        (self.weight > 0).then(|| self.sum as f64 / SCALE / self.weight as f64)
    }

    /// Standard error of the weighted mean: sqrt(V / (n_eff − 1)), where V is
    /// the weighted (population) variance and n_eff = (Σw)² / Σw² the
    /// effective number of lists (Kish). With unit weights this is the usual
    /// s/√n. `None` when n_eff ≤ 1.
    pub fn stderr(&self) -> Option<f64> {
        if self.weight <= 0 || self.weight_sq <= 0 {
            return None;
        }
        let w = self.weight as f64;
        let n_eff = w * w / self.weight_sq as f64;
        if n_eff <= 1.0 {
            return None;
        }
        let mean = self.sum as f64 / SCALE / w;
        let mean_sq = self.sum_sq as f64 / SCALE / w;
        let variance = (mean_sq - mean * mean).max(0.0);
        Some((variance / (n_eff - 1.0)).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_weight_mean_and_stderr() {
        let mut m = Moments::default();
        for v in [0.2, 0.4, 0.6, 0.8] {
            m.add(v, 1);
        }
        assert!((m.mean().unwrap() - 0.5).abs() < 1e-15);
        // Sample sd of {.2,.4,.6,.8} = sqrt(0.2/3); stderr = sd / 2.
        let expected = (0.2f64 / 3.0).sqrt() / 2.0;
        assert!((m.stderr().unwrap() - expected).abs() < 1e-12);
        assert_eq!(m.count, 4);
    }

    #[test]
    fn empty_and_single() {
        let mut m = Moments::default();
        assert_eq!(m.mean(), None);
        assert_eq!(m.stderr(), None);
        m.add(0.7, 3);
        assert_eq!(m.stderr(), None);
        assert!((m.mean().unwrap() - 0.7).abs() < 1e-15);
    }

    #[test]
    fn retract_restores_exactly() {
        let mut m = Moments::default();
        m.add(0.1, 1);
        let before = m;
        m.add(1.0 / 3.0, 7);
        m.retract(1.0 / 3.0, 7);
        assert_eq!(m, before);
    }

    #[test]
    fn weighted_mean() {
        let mut m = Moments::default();
        m.add(1.0, 3);
        m.add(0.0, 1);
        assert_eq!(m.mean(), Some(0.75));
        assert_eq!(m.weight, 4);
        assert_eq!(m.count, 2);
    }
}
