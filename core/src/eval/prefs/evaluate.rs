//! Evaluating one topic: the judged documents' internal ranks, the
//! preferences each JG holds and how many of them the ranking fulfils, and
//! from those counts the values of [`MEASURES`](super::MEASURES).
//!
//! In the prefs flow: after `parse`, once per topic, in reused buffers
//! ([`Scratch`]); a partial-order JG's preferences are rebuilt by `order`.
//! The values go on to `summary`.

use super::order::Order;
use super::{
    AVGJG, AVGJG_IMP, AVGJG_RET, AVGJG_RNONREL, AVGJG_RNONREL_RET, JgSpan, N, NUM_PREFS_FUL, NUM_PREFS_FUL_RET,
    NUM_PREFS_POSS, PAIR, PAIR_IMP, PAIR_RET, PrefsQrels, SIMP, SIMP_IMP, SIMP_RET, Topic, run_end,
};
use crate::eval::trec::Retrieved;
use std::ops::Range;

/// Reusable buffers of [`evaluate_topic`]: once they have grown to the
/// largest topic, evaluating allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    /// Per topic document: its internal rank.
    rank_of: Vec<u32>,
    /// Per judgment of the topic: its document's internal rank.
    ranks: Vec<u32>,
    /// `counts[i * judged + j]`: how many preferences of i over j the JGs
    /// hold (trec_eval's `unsigned short` counts array).
    counts: Vec<u16>,
    tmp: Vec<u32>,
    /// Per topic document: its local index in the current partial-order JG.
    local: Vec<u32>,
    /// The current partial-order JG's preferences.
    order: Order,
    /// Tests: use the pair-count matrix even where it is not needed.
    always_matrix: bool,
}

impl Scratch {
    pub fn new() -> Self {
        Self::default()
    }

    /// The bytes allocated on the heap (capacities, not lengths).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        4 * (self.rank_of.capacity() + self.ranks.capacity() + self.tmp.capacity() + self.local.capacity())
            + 2 * self.counts.capacity()
            + self.order.heap_bytes()
    }
}

/// Preference counts of one JG, as trec_eval's `JG` after counting:
/// `poss_*` include the fulfilled ones.
#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    ful_ret: i64,
    poss_ret: i64,
    ful_imp: i64,
    poss_imp: i64,
    notoccur: i64,
    rel: i64,
    rel_ret: i64,
    nonrel: i64,
    nonrel_ret: i64,
}

impl Counts {
    /// One preference of the doc at internal rank `r1` over the one at `r2`
    /// (ranks below `njr` are retrieved).
    #[inline]
    fn add(&mut self, r1: u32, r2: u32, njr: u32) {
        if r1 < r2 {
            if r2 < njr {
                self.ful_ret += 1;
            } else if r1 < njr {
                self.ful_imp += 1;
            } else {
                self.notoccur += 1;
            }
        } else if r1 < njr {
            self.poss_ret += 1;
        } else if r2 < njr {
            self.poss_imp += 1;
        } else {
            self.notoccur += 1;
        }
    }

    fn finish(&mut self) {
        self.poss_ret += self.ful_ret;
        self.poss_imp += self.ful_imp;
    }
}

/// Evaluates one topic: `results` are the topic's results in trec_eval's
/// evaluation order (score descending, then docno descending; as
/// `trec::parse_run` gives them), `max_docs` is `-M` (`usize::MAX` without
/// it). For `-c` topics without results, pass trec_eval's placeholder: one
/// result `ceci_nest_pas_un_docno` with score 1.0. Writes the values in the
/// order of [`MEASURES`](super::MEASURES).
pub fn evaluate_topic(topic: Topic, results: &[Retrieved], max_docs: usize, s: &mut Scratch, out: &mut [f64; N]) {
    const UNSET: u32 = u32::MAX;
    let q = topic.qrels;
    let span = topic.span();
    let docs = &q.docs[span.docs.clone()];
    let judged = docs.len();

    // Internal ranks: judged docs in retrieval order, ties by docno
    // ascending (so each block of equal scores backwards), within the first
    // `max_docs`; then the other judged docs in docno order.
    s.rank_of.clear();
    s.rank_of.resize(judged, UNSET);
    let mut left = results.len().min(max_docs);
    let mut njr = 0u32;
    let mut i = 0;
    while i < results.len() && left > 0 {
        let score = results[i].score;
        let e = run_end(results, i, |r| r.score == score);
        for r in results[i..e].iter().rev().take(left) {
            if let Ok(d) = docs.binary_search(&r.doc)
                && s.rank_of[d] == UNSET
            {
                s.rank_of[d] = njr;
                njr += 1;
            }
        }
        left -= (e - i).min(left);
        i = e;
    }
    for (next, r) in (njr..).zip(s.rank_of.iter_mut().filter(|r| **r == UNSET)) {
        *r = next;
    }
    s.ranks.clear();
    s.ranks.extend(q.doc_of[span.judgments.clone()].iter().map(|&d| s.rank_of[d as usize]));
    s.local.clear();
    s.local.resize(judged, 0);

    let matrix = s.always_matrix || !span.distinct_pairs;
    if matrix {
        s.counts.clear();
        s.counts.resize(judged * judged, 0);
    }
    let base = span.judgments.start;
    let mut total = Counts::default();
    let (mut avgjg, mut avgjg_ret, mut avgjg_imp) = (0.0f64, 0.0f64, 0.0f64);
    let (mut rnonrel, mut rnonrel_ret) = (0.0f64, 0.0f64);
    for jg in &q.jgs[span.jgs.clone()] {
        let mut c = Counts::default();
        match jg {
            JgSpan::Classes { ecs } => {
                let ecs = &q.ecs[ecs.clone()];
                for (x, ec1) in ecs.iter().enumerate() {
                    let r1s = &s.ranks[ec1.start - base..ec1.end - base];
                    let ret = r1s.iter().filter(|&&r| r < njr).count() as i64;
                    if q.judgments[ec1.start].rel > 0.0 {
                        c.rel_ret += ret;
                        c.rel += r1s.len() as i64;
                    } else {
                        c.nonrel_ret += ret;
                        c.nonrel += r1s.len() as i64;
                    }
                    for ec2 in &ecs[x + 1..] {
                        let r2s = &s.ranks[ec2.start - base..ec2.end - base];
                        for &r1 in r1s {
                            if matrix {
                                let row = &mut s.counts[r1 as usize * judged..][..judged];
                                for &r2 in r2s {
                                    row[r2 as usize] = row[r2 as usize].wrapping_add(1);
                                }
                            }
                            for &r2 in r2s {
                                c.add(r1, r2, njr);
                            }
                        }
                    }
                }
            }
            JgSpan::Order { lines, levels } => {
                let levels = &q.levels[levels.clone()];
                for (l, &(d, _)) in levels.iter().enumerate() {
                    s.local[d as usize] = l as u32;
                }
                let local = &s.local;
                s.order.build(&q.judgments[lines.clone()], |k| local[q.doc_of[lines.start + k] as usize], levels.len());
                s.order.components();
                s.order.close();
                for &(d, rel) in levels {
                    let retrieved = i64::from(s.rank_of[d as usize] < njr);
                    if rel > 0.0 {
                        c.rel += 1;
                        c.rel_ret += retrieved;
                    } else if rel == 0.0 {
                        c.nonrel += 1;
                        c.nonrel_ret += retrieved;
                    }
                }
                s.order.for_each_pair(|a, b| {
                    let r1 = s.rank_of[levels[a as usize].0 as usize];
                    let r2 = s.rank_of[levels[b as usize].0 as usize];
                    if matrix {
                        let cell = &mut s.counts[r1 as usize * judged + r2 as usize];
                        *cell = cell.wrapping_add(1);
                    }
                    c.add(r1, r2, njr);
                });
            }
        }
        c.finish();

        let ful = c.ful_ret + c.ful_imp;
        let poss = c.poss_ret + c.poss_imp + c.notoccur;
        let poss_imp = c.poss_ret + c.poss_imp;
        if poss != 0 {
            avgjg += ful as f64 / poss as f64;
        }
        if c.poss_ret != 0 {
            avgjg_ret += c.ful_ret as f64 / c.poss_ret as f64;
        }
        if poss_imp != 0 {
            avgjg_imp += ful as f64 / poss_imp as f64;
        }
        // Rnonrel: with fewer non-relevant docs N than relevant R, R - N
        // fulfilled non-relevant docs are added below each relevant one;
        // with more, only the first R non-relevant ones count (a recount).
        let (r, n) = (c.rel, c.nonrel);
        let (f, p) = if r >= n {
            (ful + c.rel_ret * (r - n), poss + c.rel * (r - n))
        } else {
            recount(q, jg, &s.order, &s.ranks, base, &s.rank_of, njr, &c, false, &mut s.tmp)
        };
        rnonrel += f as f64 / p as f64;
        let (r, n) = (c.rel_ret, c.nonrel_ret);
        let (f, p) = if r >= n {
            (c.ful_ret + c.rel_ret * (r - n), c.poss_ret + c.rel * (r - n))
        } else {
            recount(q, jg, &s.order, &s.ranks, base, &s.rank_of, njr, &c, true, &mut s.tmp)
        };
        rnonrel_ret += f as f64 / p as f64;

        total.ful_ret += c.ful_ret;
        total.ful_imp += c.ful_imp;
        total.poss_ret += c.poss_ret;
        total.poss_imp += c.poss_imp;
        total.notoccur += c.notoccur;
    }

    let num_jgs = span.jgs.len() as f64;
    let ful = total.ful_ret + total.ful_imp;
    let poss = total.poss_ret + total.poss_imp + total.notoccur;
    let poss_imp = total.poss_ret + total.poss_imp;
    let ratio = |f: i64, p: i64| if p != 0 { f as f64 / p as f64 } else { 0.0 };
    let mean = |sum: f64| if sum > 0.0 { sum / num_jgs } else { 0.0 };
    out[NUM_PREFS_POSS] = poss as f64;
    out[NUM_PREFS_FUL] = ful as f64;
    out[NUM_PREFS_FUL_RET] = total.ful_ret as f64;
    out[SIMP] = ratio(ful, poss);
    out[AVGJG] = mean(avgjg);
    out[AVGJG_RNONREL] = mean(rnonrel);
    out[SIMP_RET] = ratio(total.ful_ret, total.poss_ret);
    out[AVGJG_RET] = mean(avgjg_ret);
    out[AVGJG_RNONREL_RET] = mean(rnonrel_ret);
    out[SIMP_IMP] = ratio(ful, poss_imp);
    out[AVGJG_IMP] = mean(avgjg_imp);
    if matrix {
        let (ret, imp, all) = pair_sums(&s.counts, judged, njr as usize);
        out[PAIR_RET] = ret;
        out[PAIR_IMP] = imp;
        out[PAIR] = all;
    } else {
        // Every judged pair holds one preference, in one direction: each
        // pair's share is 1 or 0, and the sums are the counts (exact).
        out[PAIR_RET] = ratio(total.ful_ret, total.poss_ret);
        out[PAIR_IMP] = ratio(ful, poss_imp);
        out[PAIR] = ratio(ful, poss);
    }
}

/// prefs_pair_ret, prefs_pair_imp and prefs_pair from the counts matrix,
/// summing in trec_eval's order: pairs of retrieved docs, then a retrieved
/// doc with an unretrieved one (pairs of unretrieved docs only count).
fn pair_sums(counts: &[u16], judged: usize, njr: usize) -> (f64, f64, f64) {
    let mut sum = 0.0f64;
    let mut pairs = 0i64;
    let pair = |sum: &mut f64, pairs: &mut i64, i: usize, j: usize| {
        let (ij, ji) = (counts[i * judged + j], counts[j * judged + i]);
        if ij != 0 || ji != 0 {
            *pairs += 1;
            *sum += f64::from(ij) / f64::from(u32::from(ij) + u32::from(ji));
        }
    };
    for i in 0..njr {
        for j in i + 1..njr {
            pair(&mut sum, &mut pairs, i, j);
        }
    }
    let ratio = |sum: f64, pairs: i64| if pairs != 0 { sum / pairs as f64 } else { 0.0 };
    let ret = ratio(sum, pairs);
    for i in 0..njr {
        for j in njr..judged {
            pair(&mut sum, &mut pairs, i, j);
        }
    }
    let imp = ratio(sum, pairs);
    for i in njr..judged {
        for j in i + 1..judged {
            if counts[i * judged + j] != 0 || counts[j * judged + i] != 0 {
                pairs += 1;
            }
        }
    }
    (ret, imp, ratio(sum, pairs))
}

/// The `Rnonrel` recount of one JG with more non-relevant docs than
/// relevant ones (`retrieved` for the `_ret` measure): only the first R
/// non-relevant docs in rank order take part. `order` holds the JG's
/// preferences if it is a partial order.
/// Returns (fulfilled, possible); a preference A > B is fulfilled when A is
/// retrieved and ranked above B.
#[allow(clippy::too_many_arguments)]
fn recount(
    q: &PrefsQrels,
    jg: &JgSpan,
    order: &Order,
    ranks: &[u32],
    base: usize,
    rank_of: &[u32],
    njr: u32,
    c: &Counts,
    retrieved: bool,
    tmp: &mut Vec<u32>,
) -> (i64, i64) {
    let (mut ful, mut poss) = (0i64, 0i64);
    let mut count = |x: u32, y: u32| {
        if x < y && x < njr {
            ful += 1;
        } else {
            poss += 1;
        }
    };
    let keep = |n: i64| usize::try_from(n).unwrap_or(0);
    match jg {
        JgSpan::Classes { ecs } => {
            // trec_eval keeps R = num_rel docs here, num_rel_ret for `_ret`.
            let keep = keep(if retrieved { c.rel_ret } else { c.rel });
            let ecs = &q.ecs[ecs.clone()];
            let Some(last) = ecs.last() else { return (0, 0) };
            let class = |ec: &Range<usize>| ranks[ec.start - base..ec.end - base].iter().copied();
            let wanted = |r: &u32| !retrieved || *r < njr;
            // The lowest EC stands for the non-relevant docs: its first R
            // in rank order (trec_eval reads past the class when it holds
            // fewer than R; here it stops), for `_ret` those retrieved.
            tmp.clear();
            tmp.extend(class(last));
            tmp.sort_unstable();
            tmp.truncate(keep);
            tmp.retain(wanted);
            for (x, ec1) in ecs.iter().enumerate() {
                // Every class against every lower one but the last...
                for ec2 in ecs[..ecs.len() - 1].iter().skip(x + 1) {
                    for a in class(ec1).filter(wanted) {
                        for b in class(ec2).filter(wanted) {
                            count(a, b);
                        }
                    }
                }
            }
            for ec1 in ecs {
                // ...and every class, the last one included, against the kept
                // non-relevant docs.
                for a in class(ec1).filter(wanted) {
                    for &b in tmp.iter() {
                        count(a, b);
                    }
                }
            }
        }
        JgSpan::Order { levels, .. } => {
            // Here trec_eval takes R = num_rel for `_ret` too.
            let keep = keep(c.rel);
            let levels = &q.levels[levels.clone()];
            // Non-relevant docs after the R-th in rank order drop out (for
            // `_ret` counting only retrieved ones, still with the JG's R).
            tmp.clear();
            tmp.extend(
                levels.iter().filter(|l| l.1 == 0.0).map(|l| rank_of[l.0 as usize]).filter(|&r| !retrieved || r < njr),
            );
            tmp.sort_unstable();
            let first_dropped = tmp.get(keep).copied().unwrap_or(u32::MAX);
            let rank = |l: u32| {
                let (d, rel) = levels[l as usize];
                let r = rank_of[d as usize];
                (r, rel == 0.0 && r >= first_dropped)
            };
            order.for_each_pair(|a, b| {
                let ((ra, drop_a), (rb, drop_b)) = (rank(a), rank(b));
                if !(drop_a || drop_b || (retrieved && (ra >= njr || rb >= njr))) {
                    count(ra, rb);
                }
            });
        }
    }
    (ful, poss + ful)
}

#[cfg(test)]
mod tests {
    use super::super::{MEASURES, p, parse_prefs, parse_qrels_prefs};
    use super::*;
    use crate::eval::trec;
    use std::path::Path;

    /// A run topic in evaluation order (score descending, docno descending).
    fn ranking<'a>(docs: &[(&'a str, f64)]) -> Vec<Retrieved<'a>> {
        let mut r: Vec<Retrieved> =
            docs.iter().map(|&(d, score)| Retrieved { doc: d.as_bytes(), key: 0, score }).collect();
        r.sort_by(|a, b| b.score.total_cmp(&a.score).then_with(|| b.doc.cmp(a.doc)));
        r
    }

    fn eval_with(q: &PrefsQrels, t: usize, run: &[(&str, f64)], max_docs: usize, always_matrix: bool) -> [f64; N] {
        let mut s = Scratch { always_matrix, ..Scratch::default() };
        let mut out = [f64::NAN; N];
        evaluate_topic(q.topic(t), &ranking(run), max_docs, &mut s, &mut out);
        out
    }

    fn eval(prefs: &str, run: &[(&str, f64)]) -> [f64; N] {
        let q = parse_prefs(p(), prefs.as_bytes()).unwrap();
        assert_eq!(q.len(), 1);
        let fast = eval_with(&q, 0, run, usize::MAX, false);
        let slow = eval_with(&q, 0, run, usize::MAX, true);
        assert_eq!(fast.map(f64::to_bits), slow.map(f64::to_bits), "with and without the matrix");
        fast
    }

    fn value(out: &[f64; N], name: &str) -> f64 {
        out[MEASURES.iter().position(|m| *m == name).unwrap()]
    }

    #[track_caller]
    fn assert_values(out: &[f64; N], expected: &[(&str, f64)]) {
        for &(name, want) in expected {
            let got = value(out, name);
            assert!((got - want).abs() < 1e-12, "{name}: got {got}, want {want}");
        }
    }

    /// get_prefs.c's example of one JSG: docno4 6 > docno1 3 > docno2 =
    /// docno6 2 > docno3 = docno5 0, "a total of 13 preferences".
    #[test]
    fn classes_example_by_hand() {
        let prefs = "q u1 s1 docno1 3.0\nq u1 s1 docno2 2.0\nq u1 s1 docno3 0.0\n\
                     q u1 s1 docno4 6.0\nq u1 s1 docno5 0.0\nq u1 s1 docno6 2.0\n";
        // Internal ranks: docno4 0, docno3 1, docno1 2, docno5 3 (retrieved),
        // docno2 4, docno6 5 (not). Fulfilled among retrieved: 4>3, 4>1,
        // 4>5, 1>5 (1>3 is not: 4 of 5); implied: 4 and 1 over 2 and 6
        // (4 fulfilled), 2 and 6 over 3 and 5 (4 not).
        let out = eval(prefs, &[("docno4", 9.0), ("docno3", 8.0), ("docno1", 7.0), ("other", 6.0), ("docno5", 5.0)]);
        assert_values(
            &out,
            &[
                ("prefs_num_prefs_poss", 13.0),
                ("prefs_num_prefs_ful", 8.0),
                ("prefs_num_prefs_ful_ret", 4.0),
                ("prefs_simp", 8.0 / 13.0),
                ("prefs_pair", 8.0 / 13.0),
                ("prefs_avgjg", 8.0 / 13.0),
                ("prefs_simp_ret", 4.0 / 5.0),
                ("prefs_pair_ret", 4.0 / 5.0),
                ("prefs_avgjg_ret", 4.0 / 5.0),
                ("prefs_simp_imp", 8.0 / 13.0),
                ("prefs_pair_imp", 8.0 / 13.0),
                ("prefs_avgjg_imp", 8.0 / 13.0),
                // R = 4 relevant (2 retrieved) >= N = 2: (8 + 2*2) / (13 + 4*2).
                ("prefs_avgjg_Rnonrel", 12.0 / 21.0),
                // R = 2 retrieved relevant, N = 2: (4 + 0) / (5 + 0).
                ("prefs_avgjg_Rnonrel_ret", 4.0 / 5.0),
            ],
        );
    }

    /// get_prefs.c's transitivity example: 1>2, 1>3, 2>3 in one JSG, 2>4 in
    /// another, so 1>4 too: 5 preferences.
    #[test]
    fn transitive_example_by_hand() {
        let prefs = "q u1 sub1 docno1 3.0\nq u1 sub1 docno2 2.0\nq u1 sub1 docno3 1.0\n\
                     q u1 sub2 docno2 5.0\nq u1 sub2 docno4 4.0\n";
        // Ranks: docno4 0, docno3 1, docno1 2 retrieved; docno2 3 not.
        // 1>2 fulfilled (implied); 1>3, 1>4 not (retrieved); 2>3, 2>4 not
        // (implied).
        let out = eval(prefs, &[("docno4", 4.0), ("docno3", 3.0), ("docno1", 2.0)]);
        assert_values(
            &out,
            &[
                ("prefs_num_prefs_poss", 5.0),
                ("prefs_num_prefs_ful", 1.0),
                ("prefs_num_prefs_ful_ret", 0.0),
                ("prefs_simp", 0.2),
                ("prefs_simp_ret", 0.0),
                ("prefs_simp_imp", 0.2),
                // All 4 docs relevant (3 retrieved), none non-relevant:
                // (1 + 3*4) / (5 + 4*4).
                ("prefs_avgjg_Rnonrel", 13.0 / 21.0),
                // R = 3 retrieved: (0 + 3*3) / (2 + 4*3): trec_eval adds the
                // JG's total relevant count (4) to the possible ones.
                ("prefs_avgjg_Rnonrel_ret", 9.0 / 14.0),
            ],
        );
    }

    /// Three JGs (users) disagreeing on pairs: the pair measures average the
    /// per-pair shares, avgjg the per-JG ratios.
    #[test]
    fn several_groups_by_hand() {
        let prefs = "q u1 s1 docno1 3.0\nq u1 s1 docno2 2.0\n\
                     q u2 s1 docno1 0.0\nq u2 s1 docno3 6.0\nq u2 s1 docno4 2.0\n\
                     q u2 s2 docno1 0.0\nq u2 s2 docno2 8.0\n\
                     q u3 s docno2 1\nq u3 s docno1 0\nq u3 s docno3 0\n";
        // Ranks: docno2 0, docno1 1, docno3 2 retrieved; docno4 3 not.
        // u1: 1>2 not. u2: 3>4 implied yes, 3>1 no, 4>1 implied no, 2>1 yes.
        // u3: 2>1 yes, 2>3 yes.
        let out = eval(prefs, &[("docno2", 3.0), ("docno1", 2.0), ("docno3", 1.0)]);
        // Pairs of retrieved docs: {2,1} holds 2>1 twice and 1>2 once
        // (2/3), {2,3} 2>3 (1), {1,3} 3>1 (0); then {1,4} 4>1 (0), {3,4} 3>4 (1).
        let pair_ret = (2.0 / 3.0 + 1.0 + 0.0) / 3.0;
        let pair = (2.0 / 3.0 + 1.0 + 0.0 + 0.0 + 1.0) / 5.0;
        assert_values(
            &out,
            &[
                ("prefs_num_prefs_poss", 7.0),
                ("prefs_num_prefs_ful", 4.0),
                ("prefs_num_prefs_ful_ret", 3.0),
                ("prefs_simp", 4.0 / 7.0),
                ("prefs_simp_ret", 3.0 / 5.0),
                ("prefs_pair_ret", pair_ret),
                ("prefs_pair", pair),
                ("prefs_pair_imp", pair),
                ("prefs_avgjg", (0.0 + 2.0 / 4.0 + 2.0 / 2.0) / 3.0),
                ("prefs_avgjg_ret", (0.0 + 1.0 / 2.0 + 2.0 / 2.0) / 3.0),
                // u1: R 2 >= N 0: (0 + 2*2) / (1 + 2*2). u2: docno1 is the
                // one non-relevant doc, R = 3 (2 retrieved): (2 + 2*2) /
                // (4 + 3*2). u3: R 1 < N 2: recount with the first non-relevant
                // doc only (docno1): 2>1 yes, and trec_eval also pairs the
                // non-relevant class with itself (1 vs 1, 3 vs 1): 1 / 3.
                ("prefs_avgjg_Rnonrel", (4.0 / 5.0 + 6.0 / 10.0 + 1.0 / 3.0) / 3.0),
            ],
        );
    }

    #[test]
    fn score_ties_break_by_docno_ascending_and_max_docs_cuts_after() {
        let prefs = "q g s b 2\nq g s a 1\nq g s c 0\nq g s B 3\n";
        let run = [("c", 0.5), ("b", 0.5), ("a", 0.5), ("B", 0.5)];
        // Ranks B 0, a 1, b 2, c 3: every preference but b>a is fulfilled.
        let out = eval(prefs, &run);
        assert_values(&out, &[("prefs_num_prefs_ful_ret", 5.0), ("prefs_simp", 5.0 / 6.0)]);
        // -M 2 keeps B and a: B>a fulfilled (retrieved); B>b, B>c, a>c
        // fulfilled (implied); b>a not (implied); b>c neither retrieved.
        let q = parse_prefs(p(), prefs.as_bytes()).unwrap();
        let out = eval_with(&q, 0, &run, 2, false);
        assert_values(
            &out,
            &[
                ("prefs_num_prefs_poss", 6.0),
                ("prefs_num_prefs_ful", 4.0),
                ("prefs_num_prefs_ful_ret", 1.0),
                ("prefs_simp_ret", 1.0),
                ("prefs_simp_imp", 4.0 / 5.0),
            ],
        );
        let out = eval_with(&q, 0, &run, 0, false);
        assert_values(&out, &[("prefs_num_prefs_ful", 0.0), ("prefs_num_prefs_poss", 6.0)]);
    }

    #[test]
    fn placeholder_docno_is_an_ordinary_result() {
        let prefs = "q g s x 1\nq g s ceci_nest_pas_un_docno 2\nq g s y 0\n";
        let out = eval(prefs, &[("ceci_nest_pas_un_docno", 1.0)]);
        // Retrieved over x and y: 2 of 3 fulfilled, x>y neither retrieved.
        assert_values(&out, &[("prefs_num_prefs_ful", 2.0), ("prefs_simp", 2.0 / 3.0), ("prefs_simp_imp", 1.0)]);
    }

    #[test]
    fn trec_eval_quirks_are_kept() {
        // A JG whose highest level is -3 (trec_eval's sentinel) loses its
        // lowest class: only a > b counts.
        let out = eval("q g s a -3\nq g s b -4\nq g s c -5\n", &[("a", 3.0), ("b", 2.0), ("c", 1.0)]);
        assert_values(&out, &[("prefs_num_prefs_poss", 1.0), ("prefs_simp", 1.0)]);
        // A JG of non-relevant docs only makes its Rnonrel term 0/0, and the
        // topic's value 0, whatever the other JG.
        let out = eval("q g s a 0\nq g s b 0\nq h s a 1\nq h s b 0\n", &[("a", 2.0), ("b", 1.0)]);
        assert_values(&out, &[("prefs_avgjg", 0.5), ("prefs_avgjg_Rnonrel", 0.0), ("prefs_avgjg_Rnonrel_ret", 0.0)]);
        // A line repeated counts twice.
        let out = eval("q g s a 2\nq g s a 2\nq g s b 1\n", &[("a", 2.0), ("b", 1.0)]);
        assert_values(&out, &[("prefs_num_prefs_poss", 2.0), ("prefs_pair", 1.0)]);
        // 256 x 256 preferences of a over b: the unsigned short pair count
        // wraps to 0, so the pair {a, b} is not seen by prefs_pair.
        let mut prefs = String::new();
        for _ in 0..256 {
            prefs.push_str("q g s a 2\nq g s b 1\n");
        }
        prefs.push_str("q g s c 0\n");
        let out = eval(&prefs, &[("b", 2.0), ("a", 1.0)]);
        assert_values(&out, &[("prefs_num_prefs_poss", 66048.0), ("prefs_pair_ret", 0.0), ("prefs_pair_imp", 1.0)]);
    }

    /// Where trec_eval reads past the lowest class (here the class of -1
    /// has one doc and R = 2), the class is used whole.
    #[test]
    fn rnonrel_recount_stops_at_the_lowest_class() {
        let prefs = "q g s a 1\nq g s b 1\nq g s c 0\nq g s d 0\nq g s e -1\n";
        let out = eval(prefs, &[("a", 5.0), ("c", 4.0), ("e", 3.0), ("b", 2.0), ("d", 1.0)]);
        // Ranks a 0, c 1, e 2, b 3, d 4. {a,b} over {c,d}: 3 fulfilled, 1
        // not; every class against e: a, c fulfilled, b, d, e not.
        assert_values(&out, &[("prefs_avgjg_Rnonrel", 5.0 / 9.0), ("prefs_avgjg_Rnonrel_ret", 5.0 / 9.0)]);
    }

    /// `num_topics` topics, each one JG of two JSGs ranking the same `docs`
    /// docs in one total order (`docs * (docs - 1) / 2` preferences).
    fn total_orders(num_topics: usize, docs: usize) -> String {
        let mut prefs = String::new();
        for t in 0..num_topics {
            for jsg in ["s1", "s2"] {
                for d in 0..docs {
                    prefs.push_str(&format!("q{t:03} g {jsg} d{d} {}\n", docs - d));
                }
            }
        }
        prefs
    }

    /// Parsed judgments are linear in the lines, however many preferences
    /// the partial orders hold (they once kept every closed preference of
    /// every topic: 8 bytes per pair, quadratic per topic, summed over
    /// topics); evaluating rebuilds them per JG in the reused scratch.
    #[test]
    fn memory_is_linear_in_lines_and_bounded_by_one_topic() {
        const DOCS: usize = 600;
        let expected = (DOCS * (DOCS - 1) / 2) as f64;
        let mut per_line = Vec::new();
        for num_topics in [1, 4, 16] {
            let prefs = total_orders(num_topics, DOCS);
            let q = parse_prefs(p(), prefs.as_bytes()).unwrap();
            let lines = num_topics * 2 * DOCS;
            // The closed preferences alone would be 8 * 179,700 bytes per
            // topic, about 1,200 per line.
            per_line.push(q.heap_bytes() / lines);
            let run: Vec<(String, f64)> = (0..DOCS).map(|d| (format!("d{d}"), (DOCS - d) as f64)).collect();
            let run: Vec<(&str, f64)> = run.iter().map(|(d, s)| (d.as_str(), *s)).collect();
            let results = ranking(&run);
            let mut s = Scratch::default();
            let mut first = 0;
            for t in 0..q.len() {
                let mut out = [f64::NAN; N];
                evaluate_topic(q.topic(t), &results, usize::MAX, &mut s, &mut out);
                assert_values(&out, &[("prefs_num_prefs_poss", expected), ("prefs_num_prefs_ful", expected)]);
                let scratch = s.heap_bytes();
                if t == 0 {
                    first = scratch;
                }
                assert_eq!(scratch, first, "topic {t} grew the scratch");
            }
        }
        assert!(per_line.iter().all(|&b| b <= 200), "heap bytes per line for 1, 4, 16 topics: {per_line:?}");
    }

    fn fixture(name: &str) -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/trec/prefs").join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// On the generated fixtures: topics of one JG without repeated pairs
    /// give the same bits without the pair-count matrix, and evaluating
    /// again allocates nothing.
    #[test]
    fn shortcut_equals_matrix_and_scratch_is_reused() {
        for (judgments, run) in [("graded.qrels", "graded.run"), ("multi.prefs", "multi.run")] {
            let (jbuf, rbuf) = (fixture(judgments), fixture(run));
            let q = if judgments.ends_with(".qrels") {
                parse_qrels_prefs(p(), &jbuf).unwrap()
            } else {
                parse_prefs(p(), &jbuf).unwrap()
            };
            let run = trec::parse_run(p(), &rbuf).unwrap();
            let mut fast = Scratch::default();
            let mut slow = Scratch { always_matrix: true, ..Scratch::default() };
            let mut shortcuts = 0;
            for pass in 0..2 {
                let capacity = fast.heap_bytes();
                for t in 0..q.len() {
                    let topic = q.topic(t);
                    let r = run.topics.names.iter().position(|n| *n == topic.name()).unwrap();
                    let (mut a, mut b) = ([0.0; N], [0.0; N]);
                    for max_docs in [usize::MAX, 3] {
                        evaluate_topic(topic, run.topics.topic(r), max_docs, &mut fast, &mut a);
                        evaluate_topic(topic, run.topics.topic(r), max_docs, &mut slow, &mut b);
                        assert_eq!(a.map(f64::to_bits), b.map(f64::to_bits), "{judgments} topic {t}");
                    }
                    shortcuts += usize::from(topic.span().distinct_pairs);
                }
                if pass == 1 {
                    assert_eq!(capacity, fast.heap_bytes(), "{judgments}: the second pass grew a buffer");
                }
            }
            assert!(shortcuts > 10, "{judgments}: only {shortcuts} topics take the shortcut");
        }
    }
}
