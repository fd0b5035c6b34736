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
//!
//! [`Accumulators`] holds one [`Cell`] of Moments per (dimension values ×
//! time bucket); the totals since start are the buckets' sum, kept up as
//! buckets are pruned (exact, being integers). `window` reads windows out
//! of it.
//!
//! One file for [`Moments`], [`Cell`], [`Series`] and [`Accumulators`]
//! (over 600 lines with the tests): each level's exactness (integer sums,
//! retraction bit for bit, totals that survive pruning) is argued from the
//! level below, and reads best beside it.

use crate::debias::{ClickMoments, PositionCounts};
use crate::interleave::Outcome;
use crate::metrics::list::{Family, ListScore};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::Arc;

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
    round_half_away(v * SCALE)
}

/// `x.round() as i64` for |x| ≤ 2^52, without the libm call `round`
/// becomes on baseline x86-64 (about 2% of the daemon's CPU in a profile):
/// truncation and the fraction are exact in that range.
#[inline]
fn round_half_away(x: f64) -> i64 {
    let t = x as i64;
    let frac = x - t as f64;
    t + i64::from(frac >= 0.5) - i64::from(frac <= -0.5)
}

/// A value and its square in fixed point, as [`Moments`] adds them.
#[derive(Debug, Clone, Copy)]
struct Quantized {
    q: i128,
    q_sq: i128,
}

impl Quantized {
    #[inline]
    fn of(value: f64) -> Quantized {
        // Most per-list values are exactly 0 or 1 (P@1, MRR, recall,
        // misses): their two roundings are skipped.
        if value == 0.0 {
            return Quantized { q: 0, q_sq: 0 };
        }
        if value == 1.0 {
            return Quantized { q: 1 << SCALE_BITS, q_sq: 1 << SCALE_BITS };
        }
        Quantized { q: i128::from(quantize(value)), q_sq: i128::from(quantize(value * value)) }
    }
}

/// The sufficient statistics of a weighted mean, exactly mergeable.
///
/// All arithmetic on them wraps: under wrapping addition the moments form a
/// group, so merge and unmerge stay exact inverses even through an
/// intermediate overflow, and a checkpoint holding absurd values (corrupt, or
/// crafted) gives absurd numbers rather than a panic. A real stream never
/// comes near the range: 2^127 units of 2^-52 is about 10^22 lists at value 1.
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
        self.apply_quantized(Quantized::of(value), weight, sign);
    }

    /// [`Self::apply`] with the value already quantized.
    #[inline]
    fn apply_quantized(&mut self, value: Quantized, weight: u32, sign: i64) {
        if weight == 1 && (sign == 1 || sign == -1) {
            // A plain mean's value (all but GAUC): additions, not the
            // 128-bit multiplications below (24 values per list).
            let (q, q_sq) = if sign == 1 { (value.q, value.q_sq) } else { (-value.q, -value.q_sq) };
            self.sum = self.sum.wrapping_add(q);
            self.sum_sq = self.sum_sq.wrapping_add(q_sq);
            self.weight = self.weight.wrapping_add(sign);
            self.weight_sq = self.weight_sq.wrapping_add(i128::from(sign));
            self.count = self.count.wrapping_add(sign);
            return;
        }
        self.apply_weighted(value, weight, sign);
    }

    /// The general form of [`Self::apply_quantized`].
    #[inline]
    fn apply_weighted(&mut self, value: Quantized, weight: u32, sign: i64) {
        let w = i64::from(weight) * sign;
        let (q, q_sq) = (value.q, value.q_sq);
        let w128 = i128::from(w);
        self.sum = self.sum.wrapping_add(w128 * q);
        self.sum_sq = self.sum_sq.wrapping_add(w128 * q_sq);
        self.weight = self.weight.wrapping_add(w);
        self.weight_sq = self.weight_sq.wrapping_add(i128::from(weight) * i128::from(weight) * i128::from(sign));
        self.count = self.count.wrapping_add(sign);
    }

    /// Folds another accumulator in (shards, buckets, instances).
    #[inline]
    pub fn merge(&mut self, other: &Moments) {
        self.sum = self.sum.wrapping_add(other.sum);
        self.sum_sq = self.sum_sq.wrapping_add(other.sum_sq);
        self.weight = self.weight.wrapping_add(other.weight);
        self.weight_sq = self.weight_sq.wrapping_add(other.weight_sq);
        self.count = self.count.wrapping_add(other.count);
    }

    /// Subtracts another accumulator (a bucket leaving a window).
    #[inline]
    pub fn unmerge(&mut self, other: &Moments) {
        self.sum = self.sum.wrapping_sub(other.sum);
        self.sum_sq = self.sum_sq.wrapping_sub(other.sum_sq);
        self.weight = self.weight.wrapping_sub(other.weight);
        self.weight_sq = self.weight_sq.wrapping_sub(other.weight_sq);
        self.count = self.count.wrapping_sub(other.count);
    }

    pub fn is_empty(&self) -> bool {
        self.count == 0 && self.weight == 0
    }

    /// Σ w·v as a float (the `_sum` counters).
    pub fn weighted_sum(&self) -> f64 {
        self.sum as f64 / SCALE
    }

    /// Σ w·v² as a float (the `_sum_squares` counters).
    pub fn weighted_sum_squares(&self) -> f64 {
        self.sum_sq as f64 / SCALE
    }

    /// The weighted mean, or `None` when nothing (or zero weight) was added.
    pub fn mean(&self) -> Option<f64> {
        (self.weight > 0).then(|| self.sum as f64 / SCALE / self.weight as f64)
    }

    /// The effective number of lists, n_eff = (Σw)² / Σw² (Kish): the
    /// count itself for unit weights. `None` when nothing was added.
    pub fn effective_count(&self) -> Option<f64> {
        (self.weight > 0 && self.weight_sq > 0).then(|| {
            let w = self.weight as f64;
            w * w / self.weight_sq as f64
        })
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
        // Below the resolution of these sums a variance is rounding, not
        // spread: each v² is quantized to 2^-52 on its own (at most 2^-53
        // off, as the square of the quantized mean is), and both terms are
        // rounded to f64 (2^-53 relative each). Lists that all scored 1/3
        // left about 1e-16 here: a standard error of 5e-9, and a p-value of
        // 1e-31 between two arms that each scored one constant.
        let resolution = f64::EPSILON * (1.0 + 4.0 * mean_sq.abs());
        let variance = mean_sq - mean * mean;
        let variance = if variance > resolution { variance } else { 0.0 };
        Some((variance / (n_eff - 1.0)).sqrt())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_matches_f64_round_in_the_quantized_range() {
        let mut rng = rankpulse_testkit::Rng::new(5);
        let mut cases: Vec<f64> = vec![0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, 0.49999999999999994, -0.49999999999999994];
        cases.extend([SCALE, -SCALE, SCALE - 0.5, 1e15 + 0.5, -(1e15 + 0.5)]);
        for _ in 0..200_000 {
            let v = (rng.next() as f64 / u64::MAX as f64) * 2.0 - 1.0;
            cases.push(v * SCALE);
            // Exact halves, where the two roundings could differ.
            cases.push((v * SCALE).trunc() + 0.5);
            cases.push((v * 1e6).trunc() / 1e6 * SCALE);
        }
        for x in cases {
            assert_eq!(round_half_away(x), x.round() as i64, "{x}");
        }
    }

    /// The shortcuts (values 0 and 1; weight 1) give exactly what the
    /// general form gives.
    #[test]
    fn shortcuts_match_the_general_form() {
        let mut rng = rankpulse_testkit::Rng::new(11);
        let (mut fast, mut general) = (Moments::default(), Moments::default());
        for i in 0..10_000 {
            let value = match i % 4 {
                0 => 0.0,
                1 => 1.0,
                _ => rng.below(1_000_001) as f64 / 1e6,
            };
            let q = Quantized::of(value);
            assert_eq!((q.q, q.q_sq), (i128::from(quantize(value)), i128::from(quantize(value * value))), "{value}");
            let sign = if i % 5 == 4 { -1 } else { 1 };
            fast.apply_quantized(q, 1, sign);
            general.apply_weighted(q, 1, sign);
            assert_eq!(fast, general, "after {i}");
        }
    }

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

/// What to count a list under when it is left out of a mean.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum Exclusion {
    /// `metrics.no_relevant = "skip"` and nothing relevant was judged.
    NoRelevant,
    /// Only positives or only negatives shown: no AUC.
    SingleClass,
    /// A randomized list: it feeds the position propensities alone.
    Randomized,
    /// A list whose results are not known (a UBI query without hit ids
    /// that no `impression` event completed).
    NoResultsKnown,
}

impl Exclusion {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A mean a list can be left out of: a cutoff family's, or GAUC's (the
/// `metric` label of `rankpulse_lists_excluded_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Mean {
    Family(Family),
    Gauc,
}

impl Mean {
    pub fn name(self) -> &'static str {
        match self {
            Mean::Family(f) => f.name(),
            Mean::Gauc => "gauc",
        }
    }
}

/// By name, like [`Exclusion`] (see `serde_by_name!`).
impl Serialize for Mean {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Mean {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Family::ALL
            .iter()
            .map(|&f| Mean::Family(f))
            .chain([Mean::Gauc])
            .find(|m| m.name() == name)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown metric {name:?}")))
    }
}

/// Which kind of relevance a list had none of (the `kind` label of
/// `rankpulse_lists_no_relevant_total`): no positive grade (graded), none
/// at the relevance threshold (binary).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum Relevance {
    Graded,
    Binary,
}

impl Relevance {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

serde_by_name!(Exclusion, Relevance);

/// Team-draft interleaving outcomes of the interleaved lists with a click
/// on a team's result (team A is the candidate): counts, so that they
/// merge and retract like everything else here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Interleaving {
    pub a_wins: i64,
    pub b_wins: i64,
    pub ties: i64,
}

impl Interleaving {
    fn apply(&mut self, outcome: Outcome, sign: i64) {
        let n = match outcome {
            Outcome::AWins => &mut self.a_wins,
            Outcome::BWins => &mut self.b_wins,
            Outcome::Tie => &mut self.ties,
        };
        *n = n.wrapping_add(sign);
    }

    fn merge(&mut self, other: &Interleaving, sign: i64) {
        self.a_wins = self.a_wins.wrapping_add(sign.wrapping_mul(other.a_wins));
        self.b_wins = self.b_wins.wrapping_add(sign.wrapping_mul(other.b_wins));
        self.ties = self.ties.wrapping_add(sign.wrapping_mul(other.ties));
    }

    /// Lists with an outcome.
    pub fn lists(&self) -> i64 {
        self.a_wins.wrapping_add(self.b_wins).wrapping_add(self.ties)
    }
}

/// Click moments and position counts of one slice (`debias.max_rank` > 0).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Clicks {
    /// Lists shown in production order: the IPS click metrics.
    pub moments: ClickMoments,
    /// Randomized lists: the position propensities.
    pub positions: PositionCounts,
}

impl Clicks {
    fn merge(&mut self, other: &Clicks, sign: i64) {
        if sign > 0 {
            self.moments.merge(&other.moments);
            self.positions.merge(&other.positions);
        } else {
            self.moments.unmerge(&other.moments);
            self.positions.unmerge(&other.positions);
        }
    }
}

/// Every metric of one slice of lists (a time bucket, a window, a total).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Cell {
    /// `metrics[family * cutoffs + i]` for the cutoff families, then GAUC last.
    pub metrics: Vec<Moments>,
    /// Lists folded in (scored lists, whatever their exclusions).
    pub lists: i64,
    pub interleaving: Interleaving,
    /// Boxed and absent unless `debias.max_rank` is set: about 700 bytes
    /// per cell with 10 ranks, which every bucket of every series would
    /// otherwise carry.
    pub clicks: Option<Box<Clicks>>,
}

impl Cell {
    pub fn new(cutoffs: usize) -> Cell {
        Cell {
            metrics: vec![Moments::default(); Family::ALL.len() * cutoffs + 1],
            lists: 0,
            interleaving: Interleaving::default(),
            clicks: None,
        }
    }

    pub fn merge(&mut self, other: &Cell) {
        if self.metrics.len() < other.metrics.len() {
            self.metrics.resize(other.metrics.len(), Moments::default());
        }
        for (a, b) in self.metrics.iter_mut().zip(&other.metrics) {
            a.merge(b);
        }
        self.lists = self.lists.wrapping_add(other.lists);
        self.interleaving.merge(&other.interleaving, 1);
        if let Some(c) = &other.clicks {
            self.clicks.get_or_insert_default().merge(c, 1);
        }
    }

    /// Takes out what [`Self::merge`] put in (exact).
    pub fn unmerge(&mut self, other: &Cell) {
        if self.metrics.len() < other.metrics.len() {
            self.metrics.resize(other.metrics.len(), Moments::default());
        }
        for (a, b) in self.metrics.iter_mut().zip(&other.metrics) {
            a.unmerge(b);
        }
        self.lists = self.lists.wrapping_sub(other.lists);
        self.interleaving.merge(&other.interleaving, -1);
        if let Some(c) = &other.clicks {
            self.clicks.get_or_insert_default().merge(c, -1);
        }
    }

    /// Adds (`sign` 1) or retracts (-1) one list's values.
    pub fn apply(&mut self, score: &ListScore, sign: i64) {
        // A randomized list (the top results shuffled, for propensities)
        // shows no ranker's order: its quality would be the shuffle's, in
        // its arm's means and in every comparison of that arm.
        // Nor is one whose results are not known: "showed nothing" would
        // score it 0.
        if !score.randomized && !score.results_unknown {
            for (m, v) in self.metrics.iter_mut().zip(&score.values) {
                if let Some(v) = *v {
                    if sign > 0 { m.add(v, 1) } else { m.retract(v, 1) }
                }
            }
            if let (Some((auc, weight)), Some(m)) = (score.gauc, self.metrics.last_mut()) {
                if sign > 0 { m.add(auc, weight) } else { m.retract(auc, weight) }
            }
            if let Some(outcome) = score.interleaving {
                self.interleaving.apply(outcome, sign);
            }
        }
        if score.click_ranks > 0 {
            let k = usize::from(score.click_ranks);
            let c = self.clicks.get_or_insert_with(|| {
                Box::new(Clicks { moments: ClickMoments::new(k), positions: PositionCounts::new(k) })
            });
            if score.randomized {
                c.positions.apply_mask(score.clicks, score.shown as usize, sign);
            } else {
                c.moments.apply_mask(score.clicks, sign);
            }
        }
        self.lists = self.lists.wrapping_add(sign);
    }

    /// The GAUC accumulator.
    pub fn gauc(&self) -> &Moments {
        self.metrics.last().unwrap_or(&EMPTY)
    }

    /// The accumulator of `family` at the i-th cutoff.
    pub fn family(&self, family: Family, cutoffs: usize, i: usize) -> &Moments {
        self.metrics.get(family as usize * cutoffs + i).unwrap_or(&EMPTY)
    }
}

static EMPTY: Moments = Moments { sum: 0, sum_sq: 0, weight: 0, weight_sq: 0, count: 0 };

/// One session's running sums of the primary metric, held by
/// [`crate::sessions::SessionLedger`] while the session may still finalize
/// lists.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionSums {
    /// S: the session's per-list values, in units of 2^-52.
    pub sum: i128,
    /// N: its lists.
    pub lists: u32,
}

/// The session sums of one series' primary metric since start: with the
/// metric's [`Moments`] (ΣS and ΣN), everything the session-clustered
/// variance needs ([`crate::sequential::clustered_mean`]).
///
/// A session's S and N grow list by list, so the sums of squares grow by
/// differences: (S + x)² − S², (S + x)(N + 1) − S·N, (N + 1)² − N². They
/// add up to Σ over sessions of S², S·N and N² exactly, whatever the order
/// and the split over shards and instances (integers, wrapping like
/// [`Moments`]), and they never decrease: Prometheus counters. Like the
/// other since-start totals they keep each list's value at its first
/// finalization (a late amendment changes windows only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Clusters {
    /// Sessions with at least one list of the metric.
    pub sessions: i64,
    /// Σ S², each S² rounded to a unit of 2^-52 ([`square`]).
    pub sum_sq: i128,
    /// Σ S·N, in units of 2^-52.
    pub cross: i128,
    /// Σ N².
    pub count_sq: i64,
}

impl Clusters {
    /// Adds one list's `value` to the session whose running sums are
    /// `session` (all zero for a session not seen before).
    #[inline]
    pub fn add(&mut self, session: &mut SessionSums, value: f64) {
        let q = Quantized::of(value).q;
        let (s0, n0) = (session.sum, i128::from(session.lists));
        let (s1, n1) = (s0.wrapping_add(q), n0 + 1);
        if n0 == 0 {
            self.sessions = self.sessions.wrapping_add(1);
        }
        self.sum_sq = self.sum_sq.wrapping_add(square(s1).wrapping_sub(square(s0)));
        self.cross = self.cross.wrapping_add(s1.wrapping_mul(n1).wrapping_sub(s0.wrapping_mul(n0)));
        self.count_sq = self.count_sq.wrapping_add((2 * n0 + 1) as i64);
        session.sum = s1;
        session.lists = session.lists.saturating_add(1);
    }

    pub fn merge(&mut self, other: &Clusters) {
        self.sessions = self.sessions.wrapping_add(other.sessions);
        self.sum_sq = self.sum_sq.wrapping_add(other.sum_sq);
        self.cross = self.cross.wrapping_add(other.cross);
        self.count_sq = self.count_sq.wrapping_add(other.count_sq);
    }

    /// Takes another's sums out (the sums of a window: the counters at its
    /// end less those at its start).
    pub fn unmerge(&mut self, other: &Clusters) {
        self.sessions = self.sessions.wrapping_sub(other.sessions);
        self.sum_sq = self.sum_sq.wrapping_sub(other.sum_sq);
        self.cross = self.cross.wrapping_sub(other.cross);
        self.count_sq = self.count_sq.wrapping_sub(other.count_sq);
    }

    pub fn is_empty(&self) -> bool {
        *self == Clusters::default()
    }

    /// (Σ S², Σ S·N, Σ N²) as floats: the exposed counters.
    pub fn sums(&self) -> (f64, f64, f64) {
        (self.sum_sq as f64 / SCALE, self.cross as f64 / SCALE, self.count_sq as f64)
    }
}

/// S² for S in units of 2^-52, in the same units, rounded half up: exact
/// integer arithmetic while |S| < 2^63 (a session summing to 2,048), a
/// deterministic float past it. Only ever applied to a session's whole S,
/// so Σ S² telescopes to the same integer in any order.
fn square(s: i128) -> i128 {
    let a = s.unsigned_abs();
    if a < 1 << 63 {
        ((a * a + (1 << (SCALE_BITS - 1))) >> SCALE_BITS) as i128
    } else {
        let f = a as f64 / SCALE;
        (f * f * SCALE) as i128
    }
}

/// Everything known about the lists of one combination of dimension values.
///
/// A list goes into one cell, its time bucket; the since-start totals are
/// the buckets' sum ([`Series::total`]), kept up as buckets are pruned.
/// Folding each list into a total cell as well was half of accumulating.
/// Checkpoints hold it as it is.
#[derive(Debug, Clone, Eq, Default, Serialize, Deserialize)]
pub struct Series {
    /// The buckets pruned away, less their late amendments.
    retired: Cell,
    /// By time bucket (index = impression time / bucket width): the windows.
    /// Shared with snapshots (see [`Accumulators`]): a cell is copied when
    /// it changes while a snapshot holds it.
    pub buckets: BTreeMap<i64, Arc<Cell>>,
    /// The late amendments inside each bucket (old values taken out, new
    /// ones put in), which the totals leave out: they are Prometheus
    /// counters, which must never decrease, so they keep each list's values
    /// at its first finalization.
    pub amended: BTreeMap<i64, Cell>,
    /// Lists left out of a mean, by (metric, reason).
    pub excluded: BTreeMap<(Mean, Exclusion), i64>,
    /// Lists with nothing relevant judged, by kind, counted under either
    /// `no_relevant` policy.
    pub no_relevant: BTreeMap<Relevance, i64>,
    /// Session sums of the primary metric (`compare.primary`) since start;
    /// empty when nothing names one.
    pub clusters: Clusters,
}

impl Series {
    /// A series restored with these totals and buckets: the totals beyond
    /// the buckets (pruned ones, less amendments) become `retired`.
    pub fn restored(total: Cell, buckets: BTreeMap<i64, Arc<Cell>>) -> Series {
        let mut retired = total;
        for cell in buckets.values() {
            retired.unmerge(cell);
        }
        Series { retired, buckets, ..Series::default() }
    }

    /// Since start: the `_sum` / `_count` counters.
    pub fn total(&self) -> Cell {
        let mut total = self.retired.clone();
        for cell in self.buckets.values() {
            total.merge(cell);
        }
        for cell in self.amended.values() {
            total.unmerge(cell);
        }
        total
    }

    /// Lists folded in since start (`total().lists`).
    pub fn lists(&self) -> i64 {
        let live = self.buckets.values().fold(self.retired.lists, |n, c| n.wrapping_add(c.lists));
        self.amended.values().fold(live, |n, c| n.wrapping_sub(c.lists))
    }
}

/// Equal when what they expose is: the same totals (however split between
/// retired and live buckets), buckets and counts.
impl PartialEq for Series {
    fn eq(&self, other: &Series) -> bool {
        self.total() == other.total()
            && self.buckets == other.buckets
            && self.excluded == other.excluded
            && self.no_relevant == other.no_relevant
            && self.clusters == other.clusters
    }
}

/// The time buckets a shard may hold: those a window can still reach,
/// from `keep_ms` before now (the longest window and one bucket) to
/// `ahead_ms` after it (`input.max_future_skew`). A list outside them
/// still counts in the since-start totals, but creates no bucket: events
/// of a broken clock or a long-gone day cannot make state grow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketRange {
    pub keep_ms: i64,
    pub ahead_ms: i64,
    /// The oldest and newest bucket allowed now (`i64::MIN..=i64::MAX`
    /// until [`Accumulators::set_now`] is first called).
    oldest: i64,
    newest: i64,
    /// The `now` they were computed for (recomputed only when it changes).
    now_ms: Option<i64>,
}

impl BucketRange {
    pub fn new(keep_ms: i64, ahead_ms: i64) -> Self {
        BucketRange { keep_ms, ahead_ms, oldest: i64::MIN, newest: i64::MAX, now_ms: None }
    }

    fn contains(&self, bucket: i64) -> bool {
        (self.oldest..=self.newest).contains(&bucket)
    }
}

impl Default for BucketRange {
    fn default() -> Self {
        BucketRange::new(i64::MAX, i64::MAX)
    }
}

/// The accumulators of one shard: dimension values × time bucket.
/// Checkpoints hold them as they are, but for `range`, which the
/// configuration sets again on restore.
#[derive(Debug, Clone, Eq, Serialize, Deserialize)]
pub struct Accumulators {
    pub cutoffs: usize,
    pub bucket_ms: i64,
    /// Series and their cells are reference-counted, copied on write: a
    /// snapshot (`clone`) costs a reference per series whatever their
    /// size, so the daemon's checkpoints can be encoded off the consumer
    /// task; afterwards only what changes is copied, once per snapshot.
    pub series: BTreeMap<Arc<[String]>, Arc<Series>>,
    /// Which buckets may exist (unbounded unless set).
    #[serde(skip)]
    pub range: BucketRange,
}

/// Equal when they hold the same values: where each stands in time is not
/// what they hold.
impl PartialEq for Accumulators {
    fn eq(&self, other: &Accumulators) -> bool {
        self.cutoffs == other.cutoffs && self.bucket_ms == other.bucket_ms && self.series == other.series
    }
}

impl Accumulators {
    /// The randomized lists' clicks per rank of every series since start,
    /// to rank `max_rank`: what the estimated propensities come from.
    pub fn randomized_positions(&self, max_rank: usize) -> PositionCounts {
        let mut counts = PositionCounts::new(max_rank);
        for series in self.series.values() {
            if let Some(c) = &series.total().clicks {
                counts.merge(&c.positions);
            }
        }
        counts
    }

    pub fn new(cutoffs: usize, bucket_ms: i64) -> Self {
        Accumulators { cutoffs, bucket_ms: bucket_ms.max(1), series: BTreeMap::new(), range: BucketRange::default() }
    }

    /// Moves the range of buckets that may exist to end at `now_ms` (see
    /// [`BucketRange`]); buckets already outside it go at the next prune.
    pub fn set_now(&mut self, now_ms: i64) {
        let r = &mut self.range;
        if r.now_ms == Some(now_ms) || r.keep_ms == i64::MAX {
            return;
        }
        r.now_ms = Some(now_ms);
        r.oldest = now_ms.saturating_sub(r.keep_ms).div_euclid(self.bucket_ms) - 1;
        r.newest = now_ms.saturating_add(r.ahead_ms).div_euclid(self.bucket_ms);
    }

    pub fn bucket_of(&self, ms: i64) -> i64 {
        ms.div_euclid(self.bucket_ms)
    }

    /// Folds one scored list in.
    /// Folds one scored list in. Returns its series' session sums, which
    /// the pipeline adds the list's session to (one lookup of the series).
    pub fn fold(&mut self, dims: &Arc<[String]>, impression_ms: i64, score: &ListScore) -> &mut Clusters {
        &mut self.apply(dims, impression_ms, score, 1).clusters
    }

    /// Takes a list's earlier contribution back out.
    pub fn retract(&mut self, dims: &Arc<[String]>, impression_ms: i64, score: &ListScore) {
        self.apply(dims, impression_ms, score, -1);
    }

    /// A late judgment changed a final list: its window contribution is
    /// taken out with `sign = -1` (old values) and put back with `sign = 1`
    /// (new values). Only the time buckets change: the since-start totals
    /// are Prometheus counters, which must never decrease, so they keep
    /// each list's value at its first finalization.
    pub fn amend_window(&mut self, dims: &Arc<[String]>, impression_ms: i64, score: &ListScore, sign: i64) {
        let cutoffs = self.cutoffs;
        let bucket = self.bucket_of(impression_ms);
        if !self.range.contains(bucket) {
            // No window holds the list: nothing to amend.
            return;
        }
        let series = self.series_mut(dims);
        Arc::make_mut(series.buckets.entry(bucket).or_insert_with(|| Arc::new(Cell::new(cutoffs)))).apply(score, sign);
        series.amended.entry(bucket).or_insert_with(|| Cell::new(cutoffs)).apply(score, sign);
    }

    /// The series of `dims`, created on first use (cloning the key is a
    /// reference count increment).
    fn series_mut(&mut self, dims: &Arc<[String]>) -> &mut Series {
        Arc::make_mut(self.series.entry(dims.clone()).or_default())
    }

    fn apply(&mut self, dims: &Arc<[String]>, impression_ms: i64, score: &ListScore, sign: i64) -> &mut Series {
        let cutoffs = self.cutoffs;
        let bucket = self.bucket_of(impression_ms);
        let in_range = self.range.contains(bucket);
        let series = self.series_mut(dims);
        if in_range {
            Arc::make_mut(series.buckets.entry(bucket).or_insert_with(|| Arc::new(Cell::new(cutoffs))))
                .apply(score, sign);
        } else {
            // Counted since start, in no window.
            if series.retired.metrics.is_empty() {
                series.retired = Cell::new(cutoffs);
            }
            series.retired.apply(score, sign);
        }
        // Nothing relevant among results not known is no finding.
        if score.no_relevant_graded && !score.results_unknown {
            *series.no_relevant.entry(Relevance::Graded).or_default() += sign;
        }
        if score.no_relevant_binary && !score.results_unknown {
            *series.no_relevant.entry(Relevance::Binary).or_default() += sign;
        }
        let excluded = match (score.randomized, score.results_unknown) {
            (true, _) => Some(Exclusion::Randomized),
            (false, true) => Some(Exclusion::NoResultsKnown),
            (false, false) => None,
        };
        if let Some(reason) = excluded {
            for mean in Family::ALL.iter().map(|&f| Mean::Family(f)).chain([Mean::Gauc]) {
                *series.excluded.entry((mean, reason)).or_default() += sign;
            }
            return series;
        }
        for &family in Family::ALL {
            let first = score.values.get(family as usize * cutoffs).copied().flatten();
            if first.is_none() && !score.values.is_empty() {
                *series.excluded.entry((Mean::Family(family), Exclusion::NoRelevant)).or_default() += sign;
            }
        }
        if score.gauc.is_none() {
            *series.excluded.entry((Mean::Gauc, Exclusion::SingleClass)).or_default() += sign;
        }
        series
    }

    /// Merges another shard's accumulators (exact, any order).
    pub fn merge(&mut self, other: &Accumulators) {
        for (dims, theirs) in &other.series {
            let ours = Arc::make_mut(self.series.entry(dims.clone()).or_default());
            ours.retired.merge(&theirs.retired);
            for (b, cell) in &theirs.buckets {
                Arc::make_mut(ours.buckets.entry(*b).or_default()).merge(cell);
            }
            for (b, cell) in &theirs.amended {
                ours.amended.entry(*b).or_default().merge(cell);
            }
            for (k, v) in &theirs.excluded {
                *ours.excluded.entry(*k).or_default() += v;
            }
            for (k, v) in &theirs.no_relevant {
                *ours.no_relevant.entry(*k).or_default() += v;
            }
            ours.clusters.merge(&theirs.clusters);
        }
    }

    /// Retires the buckets outside the range at `now_ms` (see
    /// [`BucketRange`]): older than any window reaches, or (from a
    /// checkpoint written before the range existed) further ahead than an
    /// event may claim. Their lists stay in the since-start totals.
    pub fn prune(&mut self, now_ms: i64) {
        self.prune_part(now_ms, 0, 1);
    }

    /// [`Self::prune`] for one of `parts` parts of the series (the `part`-th
    /// of every `parts`, in key order). Every series crosses a bucket edge
    /// at the same moment, and one shared with a snapshot is copied when
    /// pruned: the daemon prunes a part per tick so that the copies of all
    /// its series are not made in one tick. A bucket outside the range
    /// meanwhile is in no window (windows read only their buckets).
    pub fn prune_part(&mut self, now_ms: i64, part: usize, parts: usize) {
        self.set_now(now_ms);
        let BucketRange { oldest, newest, .. } = self.range;
        let outside = |first: Option<&i64>, last: Option<&i64>| {
            first.is_some_and(|b| *b < oldest) || last.is_some_and(|b| *b > newest)
        };
        let parts = parts.max(1);
        for (i, s) in self.series.values_mut().enumerate() {
            if i % parts != part {
                continue;
            }
            // A series shared with a snapshot is copied only if it changes.
            if !outside(s.buckets.keys().next(), s.buckets.keys().next_back())
                && !outside(s.amended.keys().next(), s.amended.keys().next_back())
            {
                continue;
            }
            let s = Arc::make_mut(s);
            let mut live = s.buckets.split_off(&oldest);
            let ahead = live.split_off(&newest.saturating_add(1));
            for cell in std::mem::replace(&mut s.buckets, live).values().chain(ahead.values()) {
                s.retired.merge(cell);
            }
            let mut live = s.amended.split_off(&oldest);
            let ahead = live.split_off(&newest.saturating_add(1));
            for cell in std::mem::replace(&mut s.amended, live).values().chain(ahead.values()) {
                s.retired.unmerge(cell);
            }
        }
    }
}
