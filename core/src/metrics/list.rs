//! Scoring one finalized list with every configured metric at every cutoff,
//! applying the conventions. This is what the stream calls per list; `eval`
//! calls the same pure functions measure by measure.

use super::{Conventions, Grade, NoRelevant, Scratch, auc, count_relevant, dcg, err, is_relevant, precision, rr};
use crate::interleave::{Outcome, Team, credit};

/// The metric families that have a cutoff, in exposition order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "lowercase")]
pub enum Family {
    Ndcg,
    Mrr,
    Err,
    Precision,
    Recall,
    Map,
}

impl Family {
    pub const ALL: &'static [Family] = <Family as strum::VariantArray>::VARIANTS;

    /// The metric name in `rankpulse_<name>`.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// nDCG and ERR are graded; the others use the relevance threshold.
    pub fn is_graded(self) -> bool {
        matches!(self, Family::Ndcg | Family::Err)
    }
}

/// One list's values. `values[family * cutoffs + i]` is the family's value
/// at the i-th cutoff; `None` means the list is excluded from that mean.
#[derive(Debug, Clone, PartialEq)]
pub struct ListScore {
    pub values: Vec<Option<f64>>,
    /// (AUC, GAUC weight), or `None` for a single-class list.
    pub gauc: Option<(f64, u32)>,
    /// No judged document has a positive grade (nDCG is 0/0).
    pub no_relevant_graded: bool,
    /// No judged document reaches the relevance threshold.
    pub no_relevant_binary: bool,
    /// Team-draft interleaving credit of the list, when it was interleaved
    /// and a result of either team was clicked.
    pub interleaving: Option<Outcome>,
    /// Ranks tracked for position-debiased click metrics (`debias.max_rank`;
    /// 0: off) and, within them, the clicked ranks (bit r − 1 for rank r).
    pub click_ranks: u8,
    pub clicks: u64,
    /// Results shown, for the propensity counts of a randomized list.
    pub shown: u32,
    /// The list's top results were shuffled (it estimates propensities).
    pub randomized: bool,
    /// What the list showed is not known (see `FinalList::results_unknown`):
    /// in no mean, counted as excluded.
    pub results_unknown: bool,
}

impl ListScore {
    pub fn new(cutoffs: usize) -> Self {
        ListScore {
            values: vec![None; Family::ALL.len() * cutoffs],
            gauc: None,
            no_relevant_graded: false,
            no_relevant_binary: false,
            interleaving: None,
            click_ranks: 0,
            clicks: 0,
            shown: 0,
            randomized: false,
            results_unknown: false,
        }
    }
}

/// Scores lists under fixed conventions and cutoffs, reusing its buffers.
#[derive(Debug)]
pub struct ListScorer {
    conventions: Conventions,
    cutoffs: Vec<usize>,
    scratch: Scratch,
    values: Vec<f64>,
    options: Vec<Option<f64>>,
    /// `debias.max_rank` (≤ 64).
    click_ranks: u8,
}

impl ListScorer {
    /// `cutoffs` must be ascending and distinct (validated with the config).
    pub fn new(conventions: Conventions, cutoffs: Vec<usize>) -> Self {
        let n = cutoffs.len();
        ListScorer {
            conventions,
            cutoffs,
            scratch: Scratch::new(),
            values: vec![0.0; n],
            options: vec![None; n],
            click_ranks: 0,
        }
    }

    /// Tracks the clicked ranks among the first `ranks` (at most 64; 0: off)
    /// for the position-debiased click metrics.
    pub fn with_click_ranks(mut self, ranks: usize) -> Self {
        self.click_ranks = ranks.min(crate::debias::MAX_RANK) as u8;
        self
    }

    /// The clicked ranks of a list among the tracked ones, as a mask (bit
    /// r − 1 for rank r): a result counts as clicked when its grade reaches
    /// the relevance threshold, as for interleaving.
    pub fn click_mask(&self, shown: &[Grade]) -> (u8, u64) {
        let threshold = self.conventions.relevance_threshold;
        let mask = shown
            .iter()
            .take(usize::from(self.click_ranks))
            .enumerate()
            .filter(|(_, g)| is_relevant(**g, threshold))
            .fold(0u64, |m, (i, _)| m | 1 << i);
        (self.click_ranks, mask)
    }

    pub fn cutoffs(&self) -> &[usize] {
        &self.cutoffs
    }

    pub fn conventions(&self) -> &Conventions {
        &self.conventions
    }

    /// The interleaving credit of a list whose shown results carry teams:
    /// a result counts as clicked when its grade reaches the relevance
    /// threshold (a click is grade 1 with the default actions).
    pub fn interleaving(&self, shown: &[Grade], teams: Option<&[Option<Team>]>) -> Option<Outcome> {
        let threshold = self.conventions.relevance_threshold;
        credit(teams?.iter().zip(shown).map(|(&team, &grade)| (team, is_relevant(grade, threshold))))
    }

    /// Scores a list: `shown` grades in display order (unjudged = 0),
    /// `scores` aligned with `shown` when every result has a model score,
    /// `judged` the grades of every judged document of the list.
    pub fn score(&mut self, shown: &[Grade], scores: Option<&[f64]>, judged: &[Grade], out: &mut ListScore) {
        let c = self.conventions;
        let n = self.cutoffs.len();
        let num_rel = count_relevant(judged, c.relevance_threshold);
        out.no_relevant_binary = num_rel == 0;
        out.no_relevant_graded = !judged.iter().any(|&g| g > 0);
        let skip_graded = c.no_relevant == NoRelevant::Skip && out.no_relevant_graded;
        let skip_binary = c.no_relevant == NoRelevant::Skip && out.no_relevant_binary;
        for &family in Family::ALL {
            let slot = family as usize * n;
            let skip = if family.is_graded() { skip_graded } else { skip_binary };
            let cut = &self.cutoffs;
            match family {
                Family::Ndcg => {
                    let ideal = self.scratch.ideal(c.ideal, shown, judged);
                    dcg::ndcg_at(shown, ideal, c.gain, cut, &mut self.options);
                }
                Family::Recall => precision::recall_at(shown, c.relevance_threshold, num_rel, cut, &mut self.options),
                Family::Map => {
                    precision::average_precision_at(shown, c.relevance_threshold, num_rel, cut, &mut self.options)
                }
                Family::Err | Family::Mrr | Family::Precision => {
                    match family {
                        Family::Err => err::err_at(shown, c.max_grade, cut, &mut self.values),
                        Family::Mrr => rr::reciprocal_rank_at(shown, c.relevance_threshold, cut, &mut self.values),
                        _ => precision::precision_at(shown, c.relevance_threshold, cut, &mut self.values),
                    }
                    for (o, &v) in self.options.iter_mut().zip(&self.values) {
                        *o = Some(v);
                    }
                }
            }
            for (dst, src) in out.values[slot..slot + n].iter_mut().zip(&self.options) {
                *dst = if skip { None } else { Some(src.unwrap_or(0.0)) };
            }
        }
        let list_auc = match scores {
            Some(s) => auc::auc_by_score(shown, s, c.relevance_threshold, &mut self.scratch.auc),
            None => auc::auc_by_position(shown, c.relevance_threshold),
        };
        out.gauc = list_auc.map(|a| (a.auc, a.weight(c.gauc_weight)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{Gain, GaucWeight};

    #[test]
    fn skip_excludes_and_zero_counts() {
        let mut conv = Conventions { gain: Gain::Linear, ..Conventions::default() };
        let mut scorer = ListScorer::new(conv, vec![1, 3]);
        let mut out = ListScore::new(2);
        scorer.score(&[0, 0], None, &[0, 0], &mut out);
        assert!(out.no_relevant_graded && out.no_relevant_binary);
        assert!(out.values.iter().all(|v| *v == Some(0.0)));
        assert_eq!(out.gauc, None, "single class");
        conv.no_relevant = NoRelevant::Skip;
        let mut scorer = ListScorer::new(conv, vec![1, 3]);
        scorer.score(&[0, 0], None, &[0, 0], &mut out);
        assert!(out.values.iter().all(|v| v.is_none()));
    }

    #[test]
    fn values_per_family_and_cutoff() {
        let conv = Conventions { gain: Gain::Linear, gauc_weight: GaucWeight::Uniform, ..Conventions::default() };
        let mut scorer = ListScorer::new(conv, vec![1, 3]);
        let mut out = ListScore::new(2);
        // Shown grades 0, 2, 1; one more relevant judged document not shown.
        scorer.score(&[0, 2, 1], None, &[0, 2, 1, 1], &mut out);
        let v = |f: Family, i: usize| out.values[f as usize * 2 + i].unwrap();
        assert_eq!(v(Family::Mrr, 0), 0.0);
        assert_eq!(v(Family::Mrr, 1), 0.5);
        assert_eq!(v(Family::Precision, 1), 2.0 / 3.0);
        assert_eq!(v(Family::Recall, 1), 2.0 / 3.0);
        assert_eq!(v(Family::Map, 1), (0.5 + 2.0 / 3.0) / 3.0);
        assert_eq!(v(Family::Ndcg, 0), 0.0);
        // AUC by position: negative first, then two positives → 0 of 2 pairs.
        assert_eq!(out.gauc, Some((0.0, 1)));
        assert!(!out.no_relevant_binary);
    }
}
