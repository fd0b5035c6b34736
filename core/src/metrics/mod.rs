//! The metric engine: per-list ranking metrics as pure functions.
//!
//! Place in the data flow: `finalize` (stream) or the TREC reader (`eval`)
//! hands over one ranked list at a time as plain grade slices; these
//! functions turn it into per-list values, which `accumulate` then folds into
//! mergeable sums. Nothing here allocates on the hot path: callers own the
//! buffers ([`Scratch`]) and reuse them across lists.
//!
//! Every convention on which tools disagree is an explicit, typed setting in
//! [`Conventions`]; see `docs/metrics.md` for the formulas and their sources.
//!
//! Cutoffs are passed as ascending slices and results are written to an
//! output slice of the same length, so one pass over a list serves every
//! cutoff (as trec_eval does). The cutoff [`NO_CUTOFF`] means "the whole list".

pub mod auc;
pub mod dcg;
pub mod err;
pub mod list;
pub mod precision;
pub mod rr;

use serde::{Deserialize, Serialize};
use std::str::FromStr;
use strum::{Display, EnumString, IntoStaticStr, VariantArray, VariantNames};

/// A relevance grade. Negative values are allowed (TREC qrels use them for
/// "judged unusable"); they never contribute gain and are never relevant.
pub type Grade = i32;

/// Cutoff meaning "no cutoff": the whole list (trec_eval's `ndcg`, `map`).
pub const NO_CUTOFF: usize = usize::MAX;

/// How a grade becomes gain in DCG.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    EnumString,
    Display,
    IntoStaticStr,
    VariantNames,
    VariantArray,
)]
// One rule for both names: serde's (config files) and strum's (CLI, reports).
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum Gain {
    /// `2^g − 1` (Burges et al.; the industry form, stresses highly relevant results).
    #[default]
    Exp2,
    /// `g` (Järvelin & Kekäläinen; what trec_eval's `ndcg` uses).
    Linear,
}

/// Which documents form the ideal ranking that normalizes DCG.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    EnumString,
    Display,
    IntoStaticStr,
    VariantNames,
    VariantArray,
)]
// One rule for both names: serde's (config files) and strum's (CLI, reports).
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum IdealScope {
    /// Every judged document of the list, shown or not, best first, cut at k.
    /// This is trec_eval's choice and the only one that penalizes a short
    /// list that left relevant documents out.
    #[default]
    Judged,
    /// The shown results re-sorted by grade (what many ML libraries do; it
    /// cannot see relevant documents the ranker failed to show).
    Shown,
}

/// What a list contributes when it has nothing relevant to find.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    EnumString,
    Display,
    IntoStaticStr,
    VariantNames,
    VariantArray,
)]
// One rule for both names: serde's (config files) and strum's (CLI, reports).
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum NoRelevant {
    /// The list counts, with value 0 (trec_eval; the seed's first option).
    #[default]
    Zero,
    /// The list is excluded from the mean (TF-Ranking; the seed's second option).
    Skip,
}

/// How lists are weighted when per-list AUCs are averaged into GAUC.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    Default,
    EnumString,
    Display,
    IntoStaticStr,
    VariantNames,
    VariantArray,
)]
// One rule for both names: serde's (config files) and strum's (CLI, reports).
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum GaucWeight {
    /// Weight = number of shown documents (the DIN paper's impression weight).
    #[default]
    Impressions,
    /// Every list weighs 1.
    Uniform,
    /// Weight = number of positive (relevant) shown documents.
    Positives,
}

/// Parses a setting by its name, naming the accepted ones on failure
/// (strum's own error says only that nothing matched).
pub fn parse_setting<T: FromStr + VariantNames>(s: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("unknown value {s:?}, expected one of {}", T::VARIANTS.join(", ")))
}

/// The canonical name of a setting (`Gain::Exp2` → `"exp2"`).
pub fn setting_name<T: Into<&'static str>>(setting: T) -> &'static str {
    setting.into()
}

/// Every convention the engine needs, with the documented defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conventions {
    pub gain: Gain,
    pub ideal: IdealScope,
    pub no_relevant: NoRelevant,
    /// Minimum grade for a document to count as relevant in the binary
    /// metrics (RR, P, R, AP) and as a positive for AUC.
    pub relevance_threshold: Grade,
    /// ERR's top grade: R(g) = (2^g − 1) / 2^max_grade.
    pub max_grade: Grade,
    pub gauc_weight: GaucWeight,
}

impl Default for Conventions {
    fn default() -> Self {
        Conventions {
            gain: Gain::Exp2,
            ideal: IdealScope::Judged,
            no_relevant: NoRelevant::Zero,
            relevance_threshold: 1,
            max_grade: 4,
            gauc_weight: GaucWeight::Impressions,
        }
    }
}

/// Whether `grade` is relevant at `threshold`. Negative grades never are,
/// whatever the threshold (trec_eval counts only levels ≥ 0).
#[inline]
pub fn is_relevant(grade: Grade, threshold: Grade) -> bool {
    grade >= threshold && grade >= 0
}

/// Number of relevant documents among `judged` (the denominator of R@k and AP).
#[inline]
pub fn count_relevant(judged: &[Grade], threshold: Grade) -> u32 {
    judged.iter().filter(|&&g| is_relevant(g, threshold)).count() as u32
}

/// Reusable buffers so that scoring a list allocates nothing once warm.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Ideal ordering (grades sorted descending).
    pub(crate) ideal: Vec<Grade>,
    /// (score, is_positive) pairs for AUC.
    pub(crate) auc: Vec<(f64, bool)>,
}

impl Scratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// The ideal ranking for a list under `scope`: grades sorted best first.
    /// Only positive grades matter to DCG, so the rest are dropped early.
    pub fn ideal<'s>(&'s mut self, scope: IdealScope, shown: &[Grade], judged: &[Grade]) -> &'s [Grade] {
        let source = match scope {
            IdealScope::Judged => judged,
            IdealScope::Shown => shown,
        };
        self.ideal.clear();
        self.ideal.extend(source.iter().copied().filter(|&g| g > 0));
        self.ideal.sort_unstable_by(|a, b| b.cmp(a));
        &self.ideal
    }
}

/// Validates that cutoffs are non-empty-safe: ascending, positive, distinct.
/// Returns the offending cutoff on failure.
pub fn check_cutoffs(cutoffs: &[usize]) -> Result<(), usize> {
    let mut prev = 0usize;
    for &k in cutoffs {
        if k == 0 || k <= prev {
            return Err(k);
        }
        prev = k;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// serde (config files) and strum (CLI, reports) spell every setting
    /// the same: a name written in one would otherwise drift from the other.
    fn names_agree<T>()
    where
        T: VariantArray + VariantNames + Serialize + Copy + Into<&'static str> + FromStr + PartialEq + std::fmt::Debug,
    {
        assert_eq!(<T as VariantArray>::VARIANTS.len(), <T as VariantNames>::VARIANTS.len());
        for (v, name) in <T as VariantArray>::VARIANTS.iter().zip(<T as VariantNames>::VARIANTS) {
            assert_eq!(setting_name(*v), *name);
            assert_eq!(serde_json::to_value(v).unwrap(), serde_json::Value::from(*name));
            assert_eq!(parse_setting::<T>(name), Ok(*v));
        }
    }

    #[test]
    fn names_round_trip() {
        names_agree::<Gain>();
        names_agree::<IdealScope>();
        names_agree::<NoRelevant>();
        names_agree::<GaucWeight>();
        assert_eq!(setting_name(Gain::Exp2), "exp2");
        assert_eq!(GaucWeight::Positives.to_string(), "positives");
        assert_eq!(parse_setting::<Gain>("exp").unwrap_err(), "unknown value \"exp\", expected one of exp2, linear");
    }

    #[test]
    fn cutoffs_must_ascend() {
        assert_eq!(check_cutoffs(&[1, 3, 10]), Ok(()));
        assert_eq!(check_cutoffs(&[3, 3]), Err(3));
        assert_eq!(check_cutoffs(&[0]), Err(0));
        assert_eq!(check_cutoffs(&[5, 1]), Err(1));
    }

    #[test]
    fn ideal_scopes() {
        let mut s = Scratch::new();
        let shown = [0, 2, 1];
        let judged = [3, 0, 2, 1, -1];
        assert_eq!(s.ideal(IdealScope::Judged, &shown, &judged), &[3, 2, 1]);
        assert_eq!(s.ideal(IdealScope::Shown, &shown, &judged), &[2, 1]);
    }

    #[test]
    fn relevance_ignores_negative_grades() {
        assert!(is_relevant(1, 1));
        assert!(!is_relevant(0, 1));
        assert!(!is_relevant(-1, -5));
        assert_eq!(count_relevant(&[3, 0, 1, -2, 2], 2), 2);
    }
}
