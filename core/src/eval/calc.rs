//! Per-topic values of the qrels measures: one topic's judgments and ranked
//! results become a [`ResRels`] once (trec_eval's `te_form_res_rels`), and
//! every selected measure reads it, so no measure re-sorts or re-joins.
//!
//! Each function is trec_eval 10.0's `te_calc_*` for that measure, with the
//! same arithmetic in the same order, because the printed `%6.4f` must be
//! byte-identical. Where trec_eval divides 0 by 0 (an empty ranking under
//! `-J` or `-M`), the value is 0 instead of NaN; docs/metrics.md lists these.

use super::measures::{Id, Measure};
use super::trec::{Judgment, Qrels, Retrieved};
use crate::metrics::{self, Gain, GaucWeight, Grade, IdealScope};

/// A retrieved document not in the qrels (trec_eval's `RELVALUE_NONPOOL`).
pub const NONPOOL: i64 = -1;
/// A retrieved document judged with a negative grade: in the pool but not
/// judged (`RELVALUE_UNJUDGED`; infAP samples the pool this way).
pub const UNJUDGED: i64 = -2;

const MIN_GEO_MEAN: f64 = 0.00001;
const INFAP_EPSILON: f64 = 0.00001;

/// What the options say about forming a topic's ranking.
#[derive(Debug, Clone, Copy)]
pub struct Form {
    pub relevance_level: i64,
    pub max_docs: usize,
    pub judged_only: bool,
    pub ideal: IdealScope,
    pub num_docs_in_coll: i64,
    pub max_grade: Grade,
    pub gauc_weight: GaucWeight,
}

/// One topic's ranking joined with its judgments.
#[derive(Debug, Default)]
pub struct ResRels {
    /// Grade of each retrieved document in rank order; `NONPOOL` or
    /// `UNJUDGED` for documents without a usable judgment.
    pub rel_list: Vec<i64>,
    /// Scores in rank order, for gauc.
    pub scores: Vec<f64>,
    pub num_rel: i64,
    pub num_rel_ret: i64,
    pub num_nonpool: i64,
    pub num_unjudged_in_pool: i64,
    /// Number of judged documents (retrieved or not) at each grade ≥ 0.
    pub rel_levels: Vec<i64>,
    /// Index of the highest non-empty grade, plus one.
    pub num_rel_levels: usize,
    /// `rel_levels` as the ideal ranking sees it: all judged documents
    /// (trec_eval), or with `--ideal shown` only the retrieved ones.
    pub ideal_levels: Vec<i64>,
    pub num_ideal_levels: usize,
    /// Scratch for gauc and ndcg_exp_cut/err_cut (grades as `Grade`).
    grades: Vec<Grade>,
    ideal_grades: Vec<Grade>,
    options: Vec<Option<f64>>,
    auc: metrics::Scratch,
    /// Reused per topic by the measures that build tables.
    gains: Gains,
    cuts: Vec<i64>,
    ucuts: Vec<usize>,
}

impl ResRels {
    pub fn num_ret(&self) -> i64 {
        self.rel_list.len() as i64
    }

    /// Forms the topic: `results` are already in evaluation order (score
    /// descending, docno descending).
    pub fn load(&mut self, judged: &[Judgment], results: &[Retrieved], form: &Form) {
        let results = &results[..results.len().min(form.max_docs)];
        self.rel_list.clear();
        self.scores.clear();
        self.num_rel_ret = 0;
        self.num_nonpool = 0;
        self.num_unjudged_in_pool = 0;
        for r in results {
            let rel = match Qrels::find(judged, r.key, r.doc) {
                None => NONPOOL,
                Some(g) if g < 0 => UNJUDGED,
                Some(g) => i64::from(g),
            };
            if form.judged_only {
                if rel < 0 {
                    continue;
                }
            } else if rel == NONPOOL {
                self.num_nonpool += 1;
                self.rel_list.push(rel);
                self.scores.push(r.score);
                continue;
            } else if rel == UNJUDGED {
                self.num_unjudged_in_pool += 1;
                self.rel_list.push(rel);
                self.scores.push(r.score);
                continue;
            }
            if rel >= form.relevance_level {
                self.num_rel_ret += 1;
            }
            self.rel_list.push(rel);
            self.scores.push(r.score);
        }
        // Grades ≥ 0 of every judged document. A topic whose judgments are
        // all negative has no levels (trec_eval reads out of bounds there).
        let max_rel = judged.iter().map(|j| i64::from(j.grade)).max().unwrap_or(-1).max(-1);
        self.rel_levels.clear();
        self.rel_levels.resize((max_rel + 1) as usize, 0);
        for j in judged {
            if j.grade >= 0 {
                self.rel_levels[j.grade as usize] += 1;
            }
        }
        self.num_rel_levels = self.rel_levels.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
        self.num_rel = self
            .rel_levels
            .iter()
            .enumerate()
            .filter(|&(i, _)| i as i64 >= form.relevance_level)
            .map(|(_, &n)| n)
            .sum();
        self.ideal_levels.clear();
        match form.ideal {
            IdealScope::Judged => self.ideal_levels.extend_from_slice(&self.rel_levels),
            IdealScope::Shown => {
                self.ideal_levels.resize(self.rel_levels.len(), 0);
                for &r in &self.rel_list {
                    if r >= 0 {
                        self.ideal_levels[r as usize] += 1;
                    }
                }
            }
        }
        self.num_ideal_levels = self.ideal_levels.iter().rposition(|&n| n > 0).map_or(0, |i| i + 1);
    }
}

/// NaN (0/0 in trec_eval) becomes 0.
fn finite(x: f64) -> f64 {
    if x.is_nan() { 0.0 } else { x }
}

/// NaN and the infinities become 0.
fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

fn rel(rr: &ResRels, i: usize, level: i64) -> bool {
    rr.rel_list[i] >= level
}

/// Computes one qrels measure into `out` (zeroed by the caller). Returns
/// the weight of the topic for weighted measures (gauc), `None` when the
/// topic has no value for them.
pub fn calc(m: &Measure, rr: &mut ResRels, form: &Form, out: &mut [f64]) -> Option<f64> {
    let level = form.relevance_level;
    let num_ret = rr.num_ret();
    match m.id {
        Id::NumRet => out[0] = num_ret as f64,
        Id::NumRel => out[0] = rr.num_rel as f64,
        Id::NumRelRet => out[0] = rr.num_rel_ret as f64,
        Id::Map | Id::GmMap => {
            let (mut rel_so_far, mut sum) = (0i64, 0.0f64);
            for i in 0..rr.rel_list.len() {
                if rel(rr, i, level) {
                    rel_so_far += 1;
                    sum += rel_so_far as f64 / (i + 1) as f64;
                }
            }
            if m.id == Id::Map {
                if rel_so_far > 0 {
                    out[0] = sum / rr.num_rel as f64;
                }
            } else {
                if rel_so_far > 0 {
                    sum /= rr.num_rel as f64;
                }
                out[0] = sum.max(MIN_GEO_MEAN).ln();
            }
        }
        Id::Rprec => {
            let n = num_ret.min(rr.num_rel);
            if n > 0 {
                let hits = (0..n as usize).filter(|&i| rel(rr, i, level)).count();
                out[0] = hits as f64 / rr.num_rel as f64;
            }
        }
        Id::Bpref | Id::GmBpref => {
            let num_nonrel: i64 = rr.rel_levels.iter().take(level.max(0) as usize).sum();
            let (mut nonrel_so_far, mut bpref) = (0i64, 0.0f64);
            for &r in &rr.rel_list {
                if r == NONPOOL || r == UNJUDGED {
                    continue;
                }
                if r >= 0 && r < level {
                    nonrel_so_far += 1;
                } else if nonrel_so_far > 0 {
                    bpref += 1.0 - (nonrel_so_far.min(rr.num_rel) as f64 / num_nonrel.min(rr.num_rel) as f64);
                } else {
                    bpref += 1.0;
                }
            }
            if rr.num_rel > 0 {
                bpref /= rr.num_rel as f64;
            }
            out[0] = if m.id == Id::Bpref { bpref } else { bpref.max(MIN_GEO_MEAN).ln() };
        }
        Id::RecipRank => {
            if let Some(i) = (0..rr.rel_list.len()).find(|&i| rel(rr, i, level)) {
                out[0] = 1.0 / (i + 1) as f64;
            }
        }
        Id::IprecAtRecall | Id::ElevenPtAvg => {
            let points = m.params.doubles();
            if points.is_empty() {
                return None;
            }
            // Cutoffs in relevant documents; lround, as trec_eval 10.
            let mut cutoffs = std::mem::take(&mut rr.cuts);
            cutoffs.clear();
            cutoffs.extend(points.iter().map(|p| (p * rr.num_rel as f64).round() as i64));
            let mut cut = cutoffs.len() as i64 - 1;
            while cut >= 0 && cutoffs[cut as usize] > rr.num_rel_ret {
                cut -= 1;
            }
            let mut int_precis = finite(rr.num_rel_ret as f64 / num_ret as f64);
            let mut rel_so_far = rr.num_rel_ret;
            let mut sum = 0.0;
            let mut i = num_ret;
            while i > 0 && rel_so_far > 0 {
                let precis = rel_so_far as f64 / i as f64;
                if int_precis < precis {
                    int_precis = precis;
                }
                if rr.rel_list[(i - 1) as usize] >= level {
                    while cut >= 0 && rel_so_far == cutoffs[cut as usize] {
                        if m.id == Id::IprecAtRecall {
                            out[cut as usize] = int_precis;
                        } else {
                            sum += int_precis;
                        }
                        cut -= 1;
                    }
                    rel_so_far -= 1;
                }
                i -= 1;
            }
            while cut >= 0 {
                if m.id == Id::IprecAtRecall {
                    out[cut as usize] = int_precis;
                } else {
                    sum += int_precis;
                }
                cut -= 1;
            }
            if m.id == Id::ElevenPtAvg {
                out[0] = sum / points.len() as f64;
            }
            rr.cuts = cutoffs;
        }
        Id::P | Id::Recall | Id::RelativeP | Id::Success | Id::Unj | Id::MapCut => {
            let cutoffs = m.params.longs();
            if matches!(m.id, Id::Recall | Id::RelativeP | Id::MapCut) && rr.num_rel == 0 {
                return Some(1.0);
            }
            let value = |id: Id, count: i64, sum: f64, at: i64| -> f64 {
                match id {
                    Id::P | Id::Unj => count as f64 / at as f64,
                    Id::Recall => count as f64 / rr.num_rel as f64,
                    Id::RelativeP => count as f64 / at.min(rr.num_rel) as f64,
                    Id::Success => f64::from(u8::from(count > 0)),
                    _ => sum / rr.num_rel as f64,
                }
            };
            let (mut c, mut count, mut sum) = (0usize, 0i64, 0.0f64);
            for i in 0..rr.rel_list.len() {
                if i as i64 == cutoffs[c] {
                    out[c] = value(m.id, count, sum, i as i64);
                    c += 1;
                    if c == cutoffs.len() {
                        break;
                    }
                }
                let r = rr.rel_list[i];
                let hit = if m.id == Id::Unj { r == NONPOOL || r == UNJUDGED } else { r >= level };
                if hit {
                    count += 1;
                    sum += count as f64 / (i + 1) as f64;
                }
            }
            while c < cutoffs.len() {
                out[c] = value(m.id, count, sum, cutoffs[c]);
                c += 1;
            }
        }
        Id::Relstring => {}
        Id::InfAp => {
            let (mut rel_so_far, mut nonrel_so_far, mut unjudged_so_far) = (0i64, 0i64, 0i64);
            let mut inf_ap = 0.0f64;
            for (j, &r) in rr.rel_list.iter().enumerate() {
                if r == NONPOOL {
                    continue;
                }
                if r == UNJUDGED {
                    unjudged_so_far += 1;
                    continue;
                }
                if r >= 0 && r < level {
                    nonrel_so_far += 1;
                } else {
                    rel_so_far += 1;
                    if j == 0 {
                        inf_ap += 1.0;
                    } else {
                        let fj = j as f64;
                        inf_ap += 1.0 / (fj + 1.0)
                            + (fj / (fj + 1.0))
                                * ((rel_so_far - 1 + nonrel_so_far + unjudged_so_far) as f64 / fj)
                                * (((rel_so_far - 1) as f64 + INFAP_EPSILON)
                                    / ((rel_so_far - 1 + nonrel_so_far) as f64 + 2.0 * INFAP_EPSILON));
                    }
                }
            }
            if rr.num_rel > 0 {
                inf_ap /= rr.num_rel as f64;
            }
            out[0] = inf_ap;
        }
        Id::RprecMult => {
            let mults = m.params.doubles();
            let mut cutoffs = std::mem::take(&mut rr.cuts);
            cutoffs.clear();
            cutoffs.extend(mults.iter().map(|p| (p * rr.num_rel as f64 + 0.9) as i64));
            let mut cut = cutoffs.len() as i64 - 1;
            while cut >= 0 && cutoffs[cut as usize] > num_ret {
                out[cut as usize] = finite(rr.num_rel_ret as f64 / cutoffs[cut as usize] as f64);
                cut -= 1;
            }
            let mut rel_so_far = rr.num_rel_ret;
            let mut i = num_ret;
            while i > 0 && rel_so_far > 0 {
                let precis = rel_so_far as f64 / i as f64;
                while cut >= 0 && i == cutoffs[cut as usize] {
                    out[cut as usize] = precis;
                    cut -= 1;
                }
                if rr.rel_list[(i - 1) as usize] >= level {
                    rel_so_far -= 1;
                }
                i -= 1;
            }
            rr.cuts = cutoffs;
        }
        Id::Utility => {
            let p = m.params.doubles();
            out[0] = p[0] * rr.num_rel_ret as f64
                + p[1] * (num_ret - rr.num_rel_ret) as f64
                + p[2] * (rr.num_rel - rr.num_rel_ret) as f64
                + p[3] * (form.num_docs_in_coll + rr.num_rel_ret - num_ret - rr.num_rel) as f64;
        }
        Id::BinG => {
            let (mut rel_so_far, mut sum) = (0i64, 0.0f64);
            for i in 0..rr.rel_list.len() {
                if rel(rr, i, level) {
                    rel_so_far += 1;
                    sum += 1.0 / ((3 + i as i64 - rel_so_far) as f64).log2();
                }
            }
            if rel_so_far > 0 {
                out[0] = sum / rr.num_rel as f64;
            }
        }
        Id::G | Id::Dcg | Id::IdealDcg | Id::Ndcg | Id::NdcgRel | Id::Rndcg => {
            rr.gains.build(m.params.pairs(), &rr.ideal_levels[..rr.num_ideal_levels]);
            let gains = &rr.gains;
            // Gains given as parameters can make trec_eval's logs and
            // ratios undefined (`G.-1=5`: log2 of a negative); 0 there.
            out[0] = finite_or_zero(match m.id {
                Id::G => gains.g(&rr.rel_list),
                Id::NdcgRel => gains.ndcg_rel(&rr.rel_list),
                Id::Rndcg if rr.num_rel == 0 => 0.0,
                Id::Rndcg => gains.rndcg(&rr.rel_list),
                _ => {
                    let (dcg, ideal) = gains.dcg(&rr.rel_list);
                    match m.id {
                        Id::Dcg => dcg,
                        Id::IdealDcg => ideal,
                        _ if ideal > 0.0 => dcg / ideal,
                        _ => 0.0,
                    }
                }
            });
        }
        Id::NdcgCut => ndcg_cut(rr, m.params.longs(), out),
        Id::SetP if num_ret > 0 => out[0] = rr.num_rel_ret as f64 / num_ret as f64,
        Id::SetRelativeP if num_ret > 0 && rr.num_rel > 0 => {
            out[0] = rr.num_rel_ret as f64 / num_ret.min(rr.num_rel) as f64;
        }
        Id::SetRecall if rr.num_rel > 0 => out[0] = rr.num_rel_ret as f64 / rr.num_rel as f64,
        Id::SetMap if num_ret > 0 && rr.num_rel > 0 => {
            out[0] = (rr.num_rel_ret as f64 * rr.num_rel_ret as f64) / (num_ret as f64 * rr.num_rel as f64);
        }
        Id::SetF if rr.num_rel_ret > 0 => {
            let p = rr.num_rel_ret as f64 / num_ret as f64;
            let r = rr.num_rel_ret as f64 / rr.num_rel as f64;
            let x = m.params.doubles().first().copied().unwrap_or(1.0);
            out[0] = (x + 1.0) * p * r / (x * p + r);
        }
        Id::NumNonrelJudgedRet => {
            out[0] = (num_ret - rr.num_nonpool - rr.num_unjudged_in_pool - rr.num_rel_ret) as f64;
        }
        Id::Yaap => {
            let (mut rel_so_far, mut sum) = (0i64, 0.0f64);
            for i in 0..rr.rel_list.len() {
                if rel(rr, i, level) {
                    rel_so_far += 1;
                    sum += rel_so_far as f64 / (i + 1) as f64;
                }
            }
            out[0] = ((1.0 + sum) / (1.0 + rr.num_rel as f64 - sum)).ln();
        }
        Id::Rbp => {
            rr.gains.build(m.params.pairs(), &rr.ideal_levels[..rr.num_ideal_levels]);
            out[0] = finite_or_zero(rbp(&mut rr.gains, &rr.rel_list, m.params.pairs()));
        }
        Id::RbpResid => {
            let p = rbp_p(m.params.pairs());
            let (mut unj, mut sum, mut cur_p) = (0i64, 0.0f64, 1.0f64);
            for &r in &rr.rel_list {
                if r < 0 {
                    unj += 1;
                    sum += cur_p;
                }
                cur_p *= p;
            }
            if unj > 0 {
                out[0] = cur_p + (1.0 - p) * sum;
            }
        }
        Id::NdcgExpCut | Id::ErrCut => {
            let mut cutoffs = std::mem::take(&mut rr.ucuts);
            cutoffs.clear();
            cutoffs.extend(m.params.longs().iter().map(|&k| k as usize));
            rr.grades.clear();
            rr.grades.extend(rr.rel_list.iter().map(|&r| r.max(-1) as Grade));
            if m.id == Id::ErrCut {
                metrics::err::err_at(&rr.grades, form.max_grade, &cutoffs, out);
            } else {
                rr.ideal_grades.clear();
                for (g, &n) in rr.ideal_levels.iter().enumerate().rev() {
                    rr.ideal_grades.extend(std::iter::repeat_n(g as Grade, n as usize));
                }
                rr.options.clear();
                rr.options.resize(cutoffs.len(), None);
                metrics::dcg::ndcg_at(&rr.grades, &rr.ideal_grades, Gain::Exp2, &cutoffs, &mut rr.options);
                for (v, o) in out.iter_mut().zip(&rr.options) {
                    *v = o.unwrap_or(0.0);
                }
            }
            rr.ucuts = cutoffs;
        }
        Id::Gauc => {
            rr.grades.clear();
            rr.grades.extend(rr.rel_list.iter().map(|&r| r.max(-1) as Grade));
            let threshold = level.clamp(Grade::MIN as i64, Grade::MAX as i64) as Grade;
            return match metrics::auc::auc_by_score(&rr.grades, &rr.scores, threshold, &mut rr.auc.auc) {
                Some(a) => {
                    out[0] = a.auc;
                    Some(f64::from(a.weight(form.gauc_weight)))
                }
                None => None,
            };
        }
        // Handled by the caller (no judgments needed, or other formats).
        _ => {}
    }
    Some(1.0)
}

/// trec_eval's ndcg_cut: linear gain = grade, ideal from the grade counts
/// of every judged document, whatever `-l` says.
fn ndcg_cut(rr: &ResRels, cutoffs: &[i64], out: &mut [f64]) {
    let mut c = 0usize;
    let mut sum = 0.0f64;
    for (i, &r) in rr.rel_list.iter().enumerate() {
        if i as i64 == cutoffs[c] {
            out[c] = sum;
            c += 1;
            if c == cutoffs.len() {
                break;
            }
        }
        let gain = r as f64;
        if gain > 0.0 {
            sum += gain / ((i + 2) as f64).log2();
        }
    }
    while c < cutoffs.len() {
        out[c] = sum;
        c += 1;
    }
    let levels = &rr.ideal_levels[..rr.num_ideal_levels];
    let mut c = 0usize;
    let mut cur = levels.len() as i64 - 1;
    let mut count = 0i64;
    let mut ideal = 0.0f64;
    let mut i = 0i64;
    while cur > 0 || c < cutoffs.len() {
        count += 1;
        while cur > 0 && count > levels[cur as usize] {
            cur -= 1;
            count = 1;
        }
        if cur <= 0 {
            break;
        }
        if i == cutoffs[c] {
            if ideal > 0.0 {
                out[c] /= ideal;
            }
            c += 1;
            if c == cutoffs.len() {
                break;
            }
        }
        ideal += cur as f64 / ((i + 2) as f64).log2();
        i += 1;
    }
    while c < cutoffs.len() {
        if ideal > 0.0 {
            out[c] /= ideal;
        }
        c += 1;
    }
}

fn rbp_p(pairs: &[(String, f64)]) -> f64 {
    pairs.iter().rev().find(|(k, _)| k == "p").map_or(0.9, |&(_, v)| v)
}

fn rbp(gains: &mut Gains, rel_list: &[i64], pairs: &[(String, f64)]) -> f64 {
    let p = rbp_p(pairs);
    // Gains are normalised into [0, 1] when any lies outside (trec_eval
    // leaves min and max uninitialised; they start here from 0).
    let (mut min, mut max) = (0.0f64, 0.0f64);
    for g in &gains.levels {
        min = min.min(g.gain);
        max = max.max(g.gain);
    }
    if min < 0.0 || max > 1.0 {
        for g in &mut gains.levels {
            g.gain = (g.gain - min) / (max - min);
        }
        gains.index();
    }
    let (mut sum, mut cur_p) = (0.0f64, 1.0f64);
    for &r in rel_list {
        let gain = gains.gain(r);
        if gain != 0.0 {
            sum += gain * cur_p;
        }
        cur_p *= p;
    }
    (1.0 - p) * sum
}

#[derive(Debug, Clone, Copy)]
struct Level {
    rel: i64,
    gain: f64,
    count: i64,
}

/// Gain per grade (trec_eval's `setup_gains`): the grade itself unless a
/// `grade=gain` parameter says otherwise, ordered by increasing gain.
#[derive(Debug, Default)]
struct Gains {
    levels: Vec<Level>,
    /// (grade, gain) sorted by grade, for a binary search per document
    /// (trec_eval scans `levels` per document).
    by_grade: Vec<(i64, f64)>,
}

impl Gains {
    /// Fills the table for one topic (buffers reused across topics).
    fn build(&mut self, pairs: &[(String, f64)], rel_levels: &[i64]) {
        let levels = &mut self.levels;
        levels.clear();
        levels.extend(
            pairs
                .iter()
                .filter(|(k, _)| valid_int(k))
                .filter_map(|(k, v)| Some(Level { rel: k.parse().ok()?, gain: *v, count: 0 })),
        );
        // trec_eval compares gains as `(int)(a - b)` with glibc's merge sort:
        // gains less than 1 apart compare equal. With whole-number gains
        // that comparison is a true order, so any stable sort gives glibc's
        // result and grades nobody judged (count 0, gain = grade) can be
        // left out: they neither score a document nor enter the ideal
        // ranking. Otherwise every grade takes part and glibc's merge is
        // replayed.
        let whole = levels.iter().all(|l| l.gain.fract() == 0.0 && l.gain.abs() < 1e9);
        // Only the parameters can name a grade twice over; grades found in
        // the judgments are distinct.
        let given = levels.len();
        for (i, &n) in rel_levels.iter().enumerate() {
            match levels[..given].iter_mut().find(|l| l.rel == i as i64) {
                Some(l) => l.count = n,
                None if n > 0 || !whole => levels.push(Level { rel: i as i64, gain: i as f64, count: n }),
                None => {}
            }
        }
        let by_gain = |a: &Level, b: &Level| ((a.gain - b.gain) as i32).cmp(&0);
        if whole {
            levels.sort_by(by_gain);
        } else {
            merge_sort_by(levels, by_gain);
        }
        self.index();
    }

    /// Rebuilds `by_grade` from `levels`; for a grade listed twice the one
    /// first in gain order wins, as in trec_eval's scan.
    fn index(&mut self) {
        self.by_grade.clear();
        self.by_grade.extend(self.levels.iter().map(|l| (l.rel, l.gain)));
        // Stable: equal grades keep their gain order.
        self.by_grade.sort_by_key(|&(rel, _)| rel);
        self.by_grade.dedup_by_key(|&mut (rel, _)| rel);
    }

    fn gain(&self, rel: i64) -> f64 {
        match self.by_grade.binary_search_by_key(&rel, |&(r, _)| r) {
            Ok(i) => self.by_grade[i].1,
            Err(_) => 0.0,
        }
    }

    /// Walks the ideal ranking: calls `step(i, ideal_gain)` per rank while
    /// the ideal gain is positive, through `Ideal`.
    fn ideal(&self) -> Ideal<'_> {
        let cur = self.levels.len() as i64 - 1;
        let gain = if cur >= 0 { self.levels[cur as usize].gain } else { 0.0 };
        Ideal { levels: &self.levels, cur, count: 0, gain }
    }

    fn dcg(&self, rels: &[i64]) -> (f64, f64) {
        let (mut dcg, mut ideal_dcg) = (0.0f64, 0.0f64);
        let mut ideal = self.ideal();
        let mut i = 0usize;
        while i < rels.len() && ideal.gain > 0.0 {
            let g = self.gain(rels[i]);
            if g != 0.0 {
                dcg += g / ((i + 2) as f64).log2();
            }
            ideal.advance();
            if ideal.gain > 0.0 {
                ideal_dcg += ideal.gain / ((i + 2) as f64).log2();
            }
            i += 1;
        }
        while i < rels.len() {
            let g = self.gain(rels[i]);
            if g != 0.0 {
                dcg += g / ((i + 2) as f64).log2();
            }
            i += 1;
        }
        while ideal.gain > 0.0 {
            ideal.advance();
            if ideal.gain > 0.0 {
                ideal_dcg += ideal.gain / ((i + 2) as f64).log2();
            }
            i += 1;
        }
        (dcg, ideal_dcg)
    }

    fn ndcg_rel(&self, rels: &[i64]) -> f64 {
        let (mut dcg, mut ideal_dcg, mut sum) = (0.0f64, 0.0f64, 0.0f64);
        let (mut num_rel, mut num_rel_ret) = (0i64, 0i64);
        let mut ideal = self.ideal();
        let mut i = 0usize;
        while i < rels.len() && ideal.gain > 0.0 {
            let g = self.gain(rels[i]);
            if g != 0.0 {
                dcg += g / ((i + 2) as f64).log2();
            }
            ideal.advance();
            if ideal.gain > 0.0 {
                num_rel += 1;
                ideal_dcg += ideal.gain / ((i + 2) as f64).log2();
            }
            if g > 0.0 {
                sum += dcg / ideal_dcg;
                num_rel_ret += 1;
            }
            i += 1;
        }
        while i < rels.len() {
            let g = self.gain(rels[i]);
            if g != 0.0 {
                dcg += g / ((i + 2) as f64).log2();
            }
            if g > 0.0 {
                sum += dcg / ideal_dcg;
                num_rel_ret += 1;
            }
            i += 1;
        }
        while ideal.gain > 0.0 {
            ideal.advance();
            if ideal.gain > 0.0 {
                num_rel += 1;
                ideal_dcg += ideal.gain / ((i + 2) as f64).log2();
            }
            i += 1;
        }
        sum += (num_rel - num_rel_ret) as f64 * dcg / ideal_dcg;
        if sum > 0.0 { sum / num_rel as f64 } else { 0.0 }
    }

    fn rndcg(&self, rels: &[i64]) -> f64 {
        let (mut dcg, mut ideal_dcg, mut sum) = (0.0f64, 0.0f64, 0.0f64);
        let mut changes = 0i64;
        let mut ideal = self.ideal();
        let mut old_gain = ideal.gain;
        let mut i = 0usize;
        while i < rels.len() && ideal.gain > 0.0 {
            let g = self.gain(rels[i]);
            ideal.advance();
            if old_gain != ideal.gain {
                if ideal_dcg > 0.0 {
                    sum += dcg / ideal_dcg;
                    changes += 1;
                }
                old_gain = ideal.gain;
            }
            if g != 0.0 {
                dcg += g / ((i + 2) as f64).log2();
            }
            if ideal.gain > 0.0 {
                ideal_dcg += ideal.gain / ((i + 2) as f64).log2();
            }
            i += 1;
        }
        if i < rels.len() {
            while i < rels.len() {
                let g = self.gain(rels[i]);
                if g != 0.0 {
                    dcg += g / ((i + 2) as f64).log2();
                }
                i += 1;
            }
            if ideal_dcg > 0.0 {
                sum += dcg / ideal_dcg;
                changes += 1;
            }
        }
        while ideal.gain > 0.0 {
            ideal.advance();
            if old_gain != ideal.gain {
                if ideal_dcg > 0.0 {
                    sum += dcg / ideal_dcg;
                    changes += 1;
                }
                old_gain = ideal.gain;
            }
            if ideal.gain > 0.0 {
                ideal_dcg += ideal.gain / ((i + 2) as f64).log2();
            }
            i += 1;
        }
        finite(sum / changes as f64)
    }

    fn g(&self, rels: &[i64]) -> f64 {
        let (mut results_g, mut sum_results, mut sum_ideal, mut sum_cost) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        let min_cost = 1.0;
        let mut ideal = self.ideal();
        let mut i = 0usize;
        while i < rels.len() && ideal.gain > 0.0 {
            let g = self.gain(rels[i]);
            sum_results += g;
            ideal.advance();
            if ideal.gain > 0.0 {
                sum_ideal += ideal.gain;
            }
            sum_cost += if ideal.gain >= min_cost { ideal.gain } else { min_cost };
            if g != 0.0 {
                results_g += g / (2.0 + sum_cost - sum_results).log2();
            }
            i += 1;
        }
        while i < rels.len() {
            let g = self.gain(rels[i]);
            sum_results += g;
            sum_cost += min_cost;
            if g != 0.0 {
                results_g += g / (2.0 + sum_cost - sum_results).log2();
            }
            i += 1;
        }
        while ideal.gain > 0.0 {
            ideal.advance();
            if ideal.gain > 0.0 {
                sum_ideal += ideal.gain;
            }
        }
        if sum_ideal > 0.0 { results_g / sum_ideal } else { 0.0 }
    }
}

/// The ideal ranking's position among the gain levels, best first.
struct Ideal<'a> {
    levels: &'a [Level],
    cur: i64,
    count: i64,
    gain: f64,
}

impl Ideal<'_> {
    /// Moves to the next rank of the ideal ranking.
    fn advance(&mut self) {
        self.count += 1;
        while self.cur >= 0 && self.count > self.levels[self.cur as usize].count {
            self.count = 1;
            self.cur -= 1;
            self.gain = if self.cur >= 0 { self.levels[self.cur as usize].gain } else { 0.0 };
        }
    }
}

/// C's grade test in `setup_gains`: optional sign, then at least one digit.
fn valid_int(s: &str) -> bool {
    let digits = s.strip_prefix(['-', '+']).unwrap_or(s);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// glibc's `msort` (top-down merge, left first on ties), so that orders
/// from comparisons that are not a strict weak order come out the same.
fn merge_sort_by<T: Copy>(v: &mut [T], cmp: impl Fn(&T, &T) -> std::cmp::Ordering + Copy) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    merge_sort_by(&mut v[..n1], cmp);
    merge_sort_by(&mut v[n1..], cmp);
    let mut merged = Vec::with_capacity(n);
    let (mut a, mut b) = (0, n1);
    while a < n1 && b < n {
        if cmp(&v[a], &v[b]) != std::cmp::Ordering::Greater {
            merged.push(v[a]);
            a += 1;
        } else {
            merged.push(v[b]);
            b += 1;
        }
    }
    merged.extend_from_slice(&v[a..n1]);
    merged.extend_from_slice(&v[b..n]);
    v.copy_from_slice(&merged);
}

/// The relstring of a topic: one character per retrieved document up to
/// `len`: the grade 0–9, `>` above 9, `-` not in the pool, `.` unjudged.
pub fn relstring(rr: &ResRels, len: f64, out: &mut String) {
    out.clear();
    let n = (len as i64).min(rr.num_ret()).max(0) as usize;
    for &r in &rr.rel_list[..n] {
        out.push(match r {
            r if r > 9 => '>',
            r if r >= 0 => char::from(b'0' + r as u8),
            NONPOOL => '-',
            UNJUDGED => '.',
            _ => '<',
        });
    }
}
