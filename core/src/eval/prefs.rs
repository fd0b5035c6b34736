//! trec_eval's preference measures (`-R prefs` / `-R qrels_prefs`,
//! `-m all_prefs`): judgments that say which document a user prefers to
//! which, and how many of those preferences a ranking fulfils.
//!
//! # Judgments
//!
//! A prefs file has lines `qid jg jsg docno rel`. Within one judgment
//! sub-group (JSG) of one judgment group (JG), a document is preferred to
//! every document with a lower `rel`. A JG with one JSG is a set of
//! equivalence classes (ECs, one per `rel` value, highest first); a JG with
//! several JSGs is a partial order, closed under transitivity. `rel > 0` is
//! relevant, `rel == 0` non-relevant (negative levels are neither in a
//! partial-order JG, and non-relevant in an EC JG, as in trec_eval). A
//! qrels file read with `-R qrels_prefs` is the same with `jg` = the iter
//! column and `jsg` = `0`.
//!
//! # Per topic
//!
//! Judged documents get an internal rank: the retrieved ones in retrieval
//! order, then the others in docno order. **The retrieval order here breaks
//! score ties by docno ascending** (trec_eval's `form_prefs_counts.c` does,
//! unlike every other measure, which breaks them descending), and `-M`
//! keeps the first `max_docs` of that order. A preference A > B is
//! fulfilled when A is ranked above B; among retrieved docs (`_ret`), with
//! one of them retrieved (implied, `_imp`), or neither (counted as possible
//! but never fulfilled). See [`MEASURES`] for each measure.
//!
//! # Summary (`all`) and printing
//!
//! Per topic, trec_eval prints the three counts (`is_count`) as `%ld` and
//! the others as `%6.4f`, in the order of [`MEASURES`]. The summary sums
//! every value over the evaluated topics in topic order (`te_acc_meas_s`);
//! the counts then stay sums (`te_calc_avg_meas_empty`) while every other
//! measure is divided by the number of topics (`te_calc_avg_meas_s`: the
//! topics evaluated, or with `-c` every topic of the judgments file). See
//! [`accumulate`], [`summarize`], [`format_value`].
//!
//! # Fidelity to trec_eval 10.0
//!
//! The arithmetic is trec_eval's, in its order: integer counts, then the same
//! divisions and the same left-to-right floating-point sums (over JGs in
//! `jg` byte order; over document pairs in internal-rank order), so printed
//! values match byte for byte. Kept on purpose:
//! * a document listed twice with the same level in one EC JG counts twice;
//! * the JG's level sentinel `-3.0`: when the highest level of an EC JG is
//!   exactly -3, trec_eval ignores its lowest EC;
//! * a JG whose `prefs_avgjg_Rnonrel[_ret]` term is 0/0 turns the topic's
//!   value into 0 (NaN swallowed by `sum > 0.0`);
//! * the `Rnonrel` recount of an EC JG pairs the lowest class with its own
//!   first R docs (a doc with itself included, as not fulfilled);
//!   `_Rnonrel_ret` adds `num_rel * (R - N)` possible preferences with the
//!   JG's total relevant count, and its recount of a partial-order JG keeps
//!   as many non-relevant docs as the JG has relevant ones, retrieved or not;
//! * the pair-count matrix is `unsigned short` (wraps at 65536).
//!
//! Deliberate differences, where trec_eval crashes or prints garbage:
//! * inconsistent judgments are refused when the file is read, naming the
//!   line: a doc with two levels in one EC JG, a doc judged both 0 and
//!   non-0 in a partial-order JG, contradictory preferences (trec_eval
//!   exits 4 when it reaches the topic, or calls `abort()` for the last);
//! * the `Rnonrel` recount keeps the first R docs of the lowest EC, and
//!   trec_eval reads past that class when it has fewer than R (possible
//!   only with negative levels: the value then depends on stale memory);
//!   here the class is used whole;
//! * lines are read like rankpulse's qrels: blank lines and `#` comments
//!   (after optional blanks) are skipped anywhere, where trec_eval refuses
//!   a blank line, reads the second of two comment lines as data and
//!   crashes on a final comment line. A relevance level must be a finite
//!   number (trec_eval's `atof` reads `abc` as 0).
//!
//! Duplicate documents in the run are the caller's business: trec_eval only
//! refuses those within the first `-M` documents of a topic; here a repeat
//! is ignored.

use super::trec::{self, Retrieved, TrecError, line_of};
use std::ops::Range;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The measures, in trec_eval's printing order (`te_trec_measures`).
pub const MEASURES: [&str; 14] = [
    // Number of preferences (A > B) in the judgments, retrieved or not.
    "prefs_num_prefs_poss",
    // Preferences fulfilled: A ranked above B, including A retrieved and B not.
    "prefs_num_prefs_ful",
    // Preferences fulfilled with both A and B retrieved.
    "prefs_num_prefs_ful_ret",
    // ful / poss over all preferences of the topic.
    "prefs_simp",
    // Per doc pair, the share of its preferences (over JGs) fulfilled, averaged over pairs.
    "prefs_pair",
    // ful / poss per JG, averaged over JGs.
    "prefs_avgjg",
    // As avgjg, with each JG's non-relevant docs resized to its relevant count R.
    "prefs_avgjg_Rnonrel",
    // The same four, counting only preferences between two retrieved docs.
    "prefs_simp_ret",
    "prefs_pair_ret",
    "prefs_avgjg_ret",
    "prefs_avgjg_Rnonrel_ret",
    // simp, pair and avgjg ignoring preferences between two unretrieved docs.
    "prefs_simp_imp",
    "prefs_pair_imp",
    "prefs_avgjg_imp",
];

/// Number of measures.
pub const N: usize = MEASURES.len();

const NUM_PREFS_POSS: usize = 0;
const NUM_PREFS_FUL: usize = 1;
const NUM_PREFS_FUL_RET: usize = 2;
const SIMP: usize = 3;
const PAIR: usize = 4;
const AVGJG: usize = 5;
const AVGJG_RNONREL: usize = 6;
const SIMP_RET: usize = 7;
const PAIR_RET: usize = 8;
const AVGJG_RET: usize = 9;
const AVGJG_RNONREL_RET: usize = 10;
const SIMP_IMP: usize = 11;
const PAIR_IMP: usize = 12;
const AVGJG_IMP: usize = 13;

/// Whether measure `i` is a count: printed as an integer (`%ld`) and summed,
/// not averaged, in the summary. The others print as `%6.4f` and average.
pub fn is_count(i: usize) -> bool {
    i <= NUM_PREFS_FUL_RET
}

/// Adds one topic's values to the running sums (`te_acc_meas_s`): call it
/// once per evaluated topic, in topic order.
pub fn accumulate(sums: &mut [f64; N], topic: &[f64; N]) {
    for (s, v) in sums.iter_mut().zip(topic) {
        *s += v;
    }
}

/// The summary values: counts stay sums; the others are divided by
/// `num_topics` (the number of topics evaluated, or with `-c` the number of
/// topics in the judgments), unless it is 0.
pub fn summarize(sums: &[f64; N], num_topics: usize) -> [f64; N] {
    let mut out = *sums;
    for (i, v) in out.iter_mut().enumerate() {
        if !is_count(i) && num_topics > 0 {
            *v /= num_topics as f64;
        }
    }
    out
}

/// Measure `i`'s value as trec_eval prints it, per topic and in the
/// summary: `%ld` of the value truncated for counts, `%6.4f` otherwise.
pub fn format_value(i: usize, value: f64) -> String {
    if is_count(i) { format!("{}", value as i64) } else { super::CFixed(value).to_string() }
}

/// Why a judgments file is refused.
#[derive(Debug, Error)]
pub enum PrefsError {
    /// A malformed line: wrong number of columns, a level that is not a number.
    #[error(transparent)]
    Line(#[from] TrecError),
    /// Judgments that contradict themselves (see the module documentation).
    #[error("{path}:{line}: {message}")]
    Inconsistent { path: PathBuf, line: u32, message: String },
    #[error("{0}: no judgment lines")]
    Empty(PathBuf),
}

/// One judgment line. `doc` (and `jg`, `jsg` for `-R prefs`) borrow the
/// file buffer, so [`line_of`] finds the line again.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PrefJudgment<'a> {
    pub jg: &'a [u8],
    pub jsg: &'a [u8],
    pub doc: &'a [u8],
    pub rel: f64,
}

/// Parsed and checked preference judgments, topics in trec_eval's order
/// (qids sorted as bytes, like its `strcmp`).
///
/// Everything here is linear in the judgment lines. The preferences of a
/// partial-order JG, quadratic in its documents once closed under
/// transitivity, are not kept: [`evaluate_topic`] rebuilds them for one JG
/// at a time in its [`Scratch`], so memory is bounded by the largest topic
/// (as in trec_eval), not by the sum over topics.
#[derive(Debug)]
pub struct PrefsQrels<'a> {
    pub names: Vec<&'a [u8]>,
    topics: Vec<TopicSpan>,
    /// Per topic, sorted by (jg, jsg, rel descending, doc).
    judgments: Vec<PrefJudgment<'a>>,
    /// Per judgment, its document's index in its topic's `docs`.
    doc_of: Vec<u32>,
    /// Per topic, its distinct documents sorted as bytes.
    docs: Vec<&'a [u8]>,
    jgs: Vec<JgSpan>,
    /// The ECs of the EC JGs, highest level first (only those trec_eval uses).
    ecs: Vec<Range<usize>>,
    /// Partial-order JGs: each document (index in its topic's `docs`) and
    /// its level, the last one in sort order (trec_eval's `rel_array`). A
    /// document's position in its JG's slice is its local index.
    levels: Vec<(u32, f64)>,
}

#[derive(Debug, Clone)]
struct TopicSpan {
    judgments: Range<usize>,
    docs: Range<usize>,
    jgs: Range<usize>,
    /// One JG in which no doc pair is judged twice: the pair measures are
    /// then ratios of the counts, and need no pair-count matrix.
    distinct_pairs: bool,
}

#[derive(Debug, Clone)]
enum JgSpan {
    /// One JSG: `ecs` indexes `PrefsQrels::ecs`.
    Classes { ecs: Range<usize> },
    /// Several JSGs: `lines` indexes `PrefsQrels::judgments` (the JG's
    /// lines, from which [`Order`] rebuilds its preferences), `levels` the
    /// table of that name.
    Order { lines: Range<usize>, levels: Range<usize> },
}

/// One topic of [`PrefsQrels`].
#[derive(Debug, Clone, Copy)]
pub struct Topic<'q, 'a> {
    qrels: &'q PrefsQrels<'a>,
    index: usize,
}

impl<'q, 'a> Topic<'q, 'a> {
    pub fn name(&self) -> &'a [u8] {
        self.qrels.names[self.index]
    }

    /// The topic's judgment lines, sorted by (jg, jsg, rel descending, doc).
    pub fn judgments(&self) -> &'q [PrefJudgment<'a>] {
        &self.qrels.judgments[self.span().judgments.clone()]
    }

    fn span(&self) -> &'q TopicSpan {
        &self.qrels.topics[self.index]
    }
}

impl<'a> PrefsQrels<'a> {
    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    pub fn topic(&self, t: usize) -> Topic<'_, 'a> {
        assert!(t < self.names.len(), "topic {t} out of range");
        Topic { qrels: self, index: t }
    }

    /// The topic named `name`, if any.
    pub fn find(&self, name: &[u8]) -> Option<usize> {
        self.names.binary_search(&name).ok()
    }

    /// The bytes allocated on the heap (capacities, not lengths).
    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        use std::mem::size_of;
        self.names.capacity() * size_of::<&[u8]>()
            + self.topics.capacity() * size_of::<TopicSpan>()
            + self.judgments.capacity() * size_of::<PrefJudgment>()
            + self.doc_of.capacity() * size_of::<u32>()
            + self.docs.capacity() * size_of::<&[u8]>()
            + self.jgs.capacity() * size_of::<JgSpan>()
            + self.ecs.capacity() * size_of::<Range<usize>>()
            + self.levels.capacity() * size_of::<(u32, f64)>()
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn column_error(path: &Path, line: u32, n: usize, columns: usize, shape: &str) -> TrecError {
    let found = if n > columns { "more".to_string() } else { n.to_string() };
    TrecError::Line {
        path: path.to_path_buf(),
        line,
        message: format!("expected {columns} columns \"{shape}\", found {found}"),
    }
}

fn parse_level(path: &Path, line: u32, field: &[u8]) -> Result<f64, TrecError> {
    match trec::parse_score(field) {
        // + 0.0 makes -0 into 0: trec_eval compares levels with `==`.
        Some(v) if v.is_finite() => Ok(v + 0.0),
        _ => Err(TrecError::Line {
            path: path.to_path_buf(),
            line,
            message: format!("relevance level {:?} is not a finite number", show(field)),
        }),
    }
}

/// Parses a `-R prefs` file (`qid jg jsg docno rel`) held in `buf`.
pub fn parse_prefs<'a>(path: &Path, buf: &'a [u8]) -> Result<PrefsQrels<'a>, PrefsError> {
    let mut lines = Vec::with_capacity(buf.len() / 24);
    trec::for_each_line::<5>(buf, |line_no, f, n| {
        if n != 5 {
            return Err(column_error(path, line_no, n, 5, "qid jg jsg docno rel"));
        }
        let rel = parse_level(path, line_no, f[4])?;
        lines.push((f[0], PrefJudgment { jg: f[1], jsg: f[2], doc: f[3], rel }));
        Ok(())
    })?;
    build(path, buf, lines)
}

/// Parses a standard qrels file (`qid iter docno rel`) as preferences, as
/// `-R qrels_prefs`: the iter column is the JG, every line is in JSG `0`,
/// and `rel` is read as a number (`1.5` is allowed).
pub fn parse_qrels_prefs<'a>(path: &Path, buf: &'a [u8]) -> Result<PrefsQrels<'a>, PrefsError> {
    let mut lines = Vec::with_capacity(buf.len() / 18);
    trec::for_each_line::<4>(buf, |line_no, f, n| {
        if n != 4 {
            return Err(column_error(path, line_no, n, 4, "qid iter docno rel"));
        }
        let rel = parse_level(path, line_no, f[3])?;
        lines.push((f[0], PrefJudgment { jg: f[1], jsg: b"0", doc: f[2], rel }));
        Ok(())
    })?;
    build(path, buf, lines)
}

/// Scratch space of [`build`].
#[derive(Default)]
struct Builder {
    /// Per topic document: (JG stamp, EC or local index, first judgment).
    seen: Vec<(u32, u32, u32)>,
    /// Partial-order JG, per local document: the judgment that set its level.
    level_line: Vec<usize>,
    /// Partial-order JG: its preference graph, to find contradictions.
    order: Order,
}

fn build<'a>(
    path: &Path,
    buf: &'a [u8],
    mut lines: Vec<(&'a [u8], PrefJudgment<'a>)>,
) -> Result<PrefsQrels<'a>, PrefsError> {
    if lines.is_empty() {
        return Err(PrefsError::Empty(path.to_path_buf()));
    }
    // trec_eval's final order within a JG is (jsg, rel descending, internal
    // rank). The rank depends on the run and only orders the docs of one
    // level, which no count depends on, so the docno stands in for it here
    // (the one place the rank order matters sorts again when evaluating).
    // Stable: equal lines keep their file order, for error messages.
    lines.sort_by(|(qa, a), (qb, b)| {
        qa.cmp(qb)
            .then_with(|| a.jg.cmp(b.jg))
            .then_with(|| a.jsg.cmp(b.jsg))
            .then_with(|| b.rel.total_cmp(&a.rel))
            .then_with(|| a.doc.cmp(b.doc))
    });
    let mut q = PrefsQrels {
        names: Vec::new(),
        topics: Vec::new(),
        judgments: lines.iter().map(|l| l.1).collect(),
        doc_of: Vec::with_capacity(lines.len()),
        docs: Vec::new(),
        jgs: Vec::new(),
        ecs: Vec::new(),
        levels: Vec::new(),
    };
    let mut b = Builder::default();
    let mut stamp = 0u32;
    let mut start = 0;
    while start < lines.len() {
        let name = lines[start].0;
        let end = run_end(&lines, start, |l| l.0 == name);
        let docs_start = q.docs.len();
        q.docs.extend(q.judgments[start..end].iter().map(|j| j.doc));
        q.docs[docs_start..].sort_unstable();
        let distinct = dedup_tail(&mut q.docs, docs_start);
        let docs = &q.docs[docs_start..];
        for j in &q.judgments[start..end] {
            let d = docs.binary_search(&j.doc).unwrap_or_else(|_| unreachable!("every doc is listed"));
            q.doc_of.push(d as u32);
        }
        b.seen.clear();
        b.seen.resize(distinct, (0, 0, 0));
        let jgs_start = q.jgs.len();
        let mut duplicated = false;
        let mut g = start;
        while g < end {
            let jg = q.judgments[g].jg;
            let g_end = run_end(&q.judgments[..end], g, |j| j.jg == jg);
            stamp += 1;
            let jsg = q.judgments[g].jsg;
            let span = if q.judgments[g..g_end].iter().all(|j| j.jsg == jsg) {
                let (ecs, dup) = classes(&mut q, &mut b, stamp, g..g_end).map_err(|c| c.error(&q, path, buf))?;
                duplicated |= dup;
                JgSpan::Classes { ecs }
            } else {
                order(&mut q, &mut b, stamp, g..g_end).map_err(|c| c.error(&q, path, buf))?
            };
            q.jgs.push(span);
            g = g_end;
        }
        let jgs = jgs_start..q.jgs.len();
        q.topics.push(TopicSpan {
            judgments: start..end,
            docs: docs_start..q.docs.len(),
            distinct_pairs: jgs.len() == 1 && !duplicated,
            jgs,
        });
        q.names.push(name);
        start = end;
    }
    Ok(q)
}

/// The end of the run of items from `start` on that satisfy `same`.
fn run_end<T>(items: &[T], start: usize, same: impl Fn(&T) -> bool) -> usize {
    items[start..].iter().position(|x| !same(x)).map_or(items.len(), |n| start + n)
}

/// Removes adjacent repeats from `v[from..]`; returns how many remain there.
fn dedup_tail<T: PartialEq + Copy>(v: &mut Vec<T>, from: usize) -> usize {
    let mut w = from;
    for r in from..v.len() {
        if w == from || v[r] != v[w - 1] {
            v[w] = v[r];
            w += 1;
        }
    }
    v.truncate(w);
    w - from
}

/// Judgments of one JG that trec_eval refuses, as two judgment indices.
enum Conflict {
    /// One doc at two levels in the single JSG of an EC JG.
    TwoLevels(usize, usize),
    /// One doc judged both 0 and non-0 in a partial-order JG.
    ZeroAndNonZero(usize, usize),
    /// Two docs each preferred to the other (after transitive closure).
    Cycle(usize, usize),
}

impl Conflict {
    fn error(&self, q: &PrefsQrels, path: &Path, buf: &[u8]) -> PrefsError {
        let (Conflict::TwoLevels(a, b) | Conflict::ZeroAndNonZero(a, b) | Conflict::Cycle(a, b)) = *self;
        let (ja, jb) = (&q.judgments[a], &q.judgments[b]);
        let (la, lb) = (line_of(buf, ja.doc), line_of(buf, jb.doc));
        // Report the later line, mention the other.
        let (line, other) = if la >= lb { (la, lb) } else { (lb, la) };
        let jg = show(ja.jg);
        let message = match self {
            Conflict::TwoLevels(..) => format!(
                "document {:?} has two relevance levels ({} and {}) in judgment sub-group {:?} of group {jg:?} \
                 (other line {other})",
                show(ja.doc),
                ja.rel,
                jb.rel,
                show(ja.jsg)
            ),
            Conflict::ZeroAndNonZero(..) => format!(
                "document {:?} is judged both 0 and non-0 ({} and {}) in judgment group {jg:?} (other line {other})",
                show(ja.doc),
                ja.rel,
                jb.rel
            ),
            Conflict::Cycle(..) => format!(
                "judgment group {jg:?} prefers {:?} to {:?} and {:?} to {:?}, directly or through other documents \
                 (other line {other})",
                show(ja.doc),
                show(jb.doc),
                show(jb.doc),
                show(ja.doc)
            ),
        };
        PrefsError::Inconsistent { path: path.to_path_buf(), line, message }
    }
}

/// Records the ECs of a one-JSG JG (`lines`, sorted by level descending);
/// returns them and whether some doc is listed twice in one of them.
fn classes(
    q: &mut PrefsQrels,
    b: &mut Builder,
    stamp: u32,
    lines: Range<usize>,
) -> Result<(Range<usize>, bool), Conflict> {
    let ecs_start = q.ecs.len();
    let mut s = lines.start;
    while s < lines.end {
        let rel = q.judgments[s].rel;
        let e = run_end(&q.judgments[..lines.end], s, |j| j.rel == rel);
        q.ecs.push(s..e);
        s = e;
    }
    // trec_eval counts a JG's levels by changes from a sentinel of -3.0:
    // when the highest level is exactly -3 it counts one EC less, and never
    // looks at the last (lowest) one.
    if q.judgments[lines.start].rel == -3.0 {
        q.ecs.pop();
    }
    let mut duplicated = false;
    for ec in ecs_start..q.ecs.len() {
        for k in q.ecs[ec].clone() {
            let d = q.doc_of[k] as usize;
            let (st, first_ec, first) = b.seen[d];
            if st != stamp {
                b.seen[d] = (stamp, ec as u32, k as u32);
            } else if first_ec as usize != ec {
                return Err(Conflict::TwoLevels(first as usize, k));
            } else {
                duplicated = true;
            }
        }
    }
    Ok((ecs_start..q.ecs.len(), duplicated))
}

/// Records each doc's level of a JG with several JSGs (`lines`, sorted by
/// jsg then level descending), as trec_eval's `rel_array`, and checks that
/// its preferences, closed under transitivity, do not contradict each other.
fn order(q: &mut PrefsQrels, b: &mut Builder, stamp: u32, lines: Range<usize>) -> Result<JgSpan, Conflict> {
    // Local indices in first-seen order; `levels` gets one row per doc.
    let levels_start = q.levels.len();
    b.level_line.clear();
    for k in lines.clone() {
        let d = q.doc_of[k] as usize;
        if b.seen[d].0 != stamp {
            b.seen[d] = (stamp, (q.levels.len() - levels_start) as u32, k as u32);
            q.levels.push((d as u32, -1.0));
            b.level_line.push(k);
        }
    }
    let n = q.levels.len() - levels_start;
    let local = |q: &PrefsQrels, b: &Builder, k: usize| b.seen[q.doc_of[k] as usize].1 as usize;
    // trec_eval's consistency check, line by line: a doc's level is the
    // last one seen, and may not go from > 0 to 0 or from 0 to > 0 (through
    // a negative level it may: trec_eval does not notice).
    for k in lines.clone() {
        let l = local(q, b, k);
        let rel = q.judgments[k].rel;
        let current = q.levels[levels_start + l].1;
        if (current > 0.0 && rel == 0.0) || (current == 0.0 && rel > 0.0) {
            return Err(Conflict::ZeroAndNonZero(b.level_line[l], k));
        }
        q.levels[levels_start + l].1 = rel;
        b.level_line[l] = k;
    }
    // Contradictions: two docs each preferred to the other, directly or
    // through others. Only the preference graph (linear in the lines) is
    // built; the closed preferences are rebuilt when evaluating.
    let judgments = &q.judgments[lines.clone()];
    b.order.build(judgments, |k| b.seen[q.doc_of[lines.start + k] as usize].1, n);
    b.order.components();
    if let Some((i, j)) = b.order.first_contradiction() {
        let first_line = |l: u32| b.seen[q.levels[levels_start + l as usize].0 as usize].2 as usize;
        return Err(Conflict::Cycle(first_line(i), first_line(j)));
    }
    Ok(JgSpan::Order { lines, levels: levels_start..q.levels.len() })
}

/// The preferences of one partial-order JG as a graph linear in its lines,
/// and their transitive closure: trec_eval's preference array, rebuilt for
/// one JG at a time in reusable buffers.
///
/// Nodes `0..docs` are the JG's documents (local indices). Within one JSG,
/// whose levels are `t = 0, 1, …` from the highest, a node `V_t` (`t >= 1`)
/// stands for "every document at level `t` or below": edges go from `V_t`
/// to each document at level `t` and to `V_{t+1}`, and from each document
/// at level `t - 1` to `V_t`. A document then reaches exactly the documents
/// it is preferred to, closed under transitivity (itself too when it is at
/// two levels of one JSG: trec_eval sets that bit and never reads it). Two
/// documents are each preferred to the other when they are in one strongly
/// connected component.
#[derive(Debug, Default)]
struct Order {
    /// The number of documents, the first nodes.
    docs: usize,
    /// (from, to), while building.
    edges: Vec<(u32, u32)>,
    /// The edges out of node `v`: `targets[start[v]..start[v + 1]]`.
    start: Vec<u32>,
    targets: Vec<u32>,
    /// Tarjan's algorithm: per node its visit number and low link; the
    /// nodes not yet in a component; the call stack (node, next edge).
    index: Vec<u32>,
    low: Vec<u32>,
    stack: Vec<u32>,
    calls: Vec<(u32, u32)>,
    /// Per node, its component. Components are numbered as found, which is
    /// reverse topological order: a component's successors come first.
    comp: Vec<u32>,
    /// The nodes of component `c`: `members[comp_start[c]..comp_start[c + 1]]`.
    members: Vec<u32>,
    comp_start: Vec<u32>,
    /// The closure: per component, `words` u64 of the documents it reaches.
    words: usize,
    reach: Vec<u64>,
}

impl Order {
    /// Builds the graph of a JG's `lines` (sorted by jsg, then level
    /// descending) holding `docs` documents; `local(k)` is the local index
    /// of the document of `lines[k]`.
    fn build(&mut self, lines: &[PrefJudgment], local: impl Fn(usize) -> u32, docs: usize) {
        self.docs = docs;
        self.edges.clear();
        let mut nodes = docs as u32;
        let mut s = 0;
        while s < lines.len() {
            let jsg = lines[s].jsg;
            let e = run_end(lines, s, |j| j.jsg == jsg);
            // Per level [lo, hi) after the highest, its node V.
            let (mut above, mut above_v) = (None::<Range<usize>>, None::<u32>);
            let mut lo = s;
            while lo < e {
                let rel = lines[lo].rel;
                let hi = run_end(&lines[..e], lo, |j| j.rel == rel);
                if let Some(above) = above {
                    let v = nodes;
                    nodes += 1;
                    if let Some(above_v) = above_v {
                        self.edges.push((above_v, v));
                    }
                    self.edges.extend(above.map(|k| (local(k), v)));
                    self.edges.extend((lo..hi).map(|k| (v, local(k))));
                    above_v = Some(v);
                }
                above = Some(lo..hi);
                lo = hi;
            }
            s = e;
        }
        // Adjacency lists, by counting sort of the edges on their origin.
        let nodes = nodes as usize;
        self.start.clear();
        self.start.resize(nodes + 1, 0);
        for &(u, _) in &self.edges {
            self.start[u as usize + 1] += 1;
        }
        for v in 0..nodes {
            self.start[v + 1] += self.start[v];
        }
        self.targets.clear();
        self.targets.resize(self.edges.len(), 0);
        for &(u, w) in &self.edges {
            let next = &mut self.start[u as usize];
            self.targets[*next as usize] = w;
            *next += 1;
        }
        // Each start[v] is now where v's edges end, i.e. v + 1's begin.
        self.start.copy_within(0..nodes, 1);
        self.start[0] = 0;
    }

    /// Finds the strongly connected components (Tarjan, without recursion).
    fn components(&mut self) {
        const NONE: u32 = u32::MAX;
        let nodes = self.start.len() - 1;
        self.index.clear();
        self.index.resize(nodes, NONE);
        self.low.clear();
        self.low.resize(nodes, 0);
        self.comp.clear();
        self.comp.resize(nodes, NONE);
        self.members.clear();
        self.comp_start.clear();
        self.comp_start.push(0);
        self.stack.clear();
        self.calls.clear();
        let mut visited = 0u32;
        let mut visit = |o: &mut Order, v: u32| {
            o.index[v as usize] = visited;
            o.low[v as usize] = visited;
            visited += 1;
            o.stack.push(v);
            o.calls.push((v, o.start[v as usize]));
        };
        for root in 0..nodes as u32 {
            if self.index[root as usize] != NONE {
                continue;
            }
            visit(self, root);
            while let Some(&(v, e)) = self.calls.last() {
                let v = v as usize;
                if e < self.start[v + 1] {
                    let top = self.calls.len() - 1;
                    self.calls[top].1 += 1;
                    let w = self.targets[e as usize];
                    if self.index[w as usize] == NONE {
                        visit(self, w);
                    } else if self.comp[w as usize] == NONE {
                        // On the stack: in the component being built.
                        self.low[v] = self.low[v].min(self.index[w as usize]);
                    }
                    continue;
                }
                self.calls.pop();
                if let Some(&(u, _)) = self.calls.last() {
                    self.low[u as usize] = self.low[u as usize].min(self.low[v]);
                }
                if self.low[v] == self.index[v] {
                    let c = (self.comp_start.len() - 1) as u32;
                    while let Some(w) = self.stack.pop() {
                        self.comp[w as usize] = c;
                        self.members.push(w);
                        if w as usize == v {
                            break;
                        }
                    }
                    self.comp_start.push(self.members.len() as u32);
                }
            }
        }
    }

    fn members(&self, c: usize) -> &[u32] {
        &self.members[self.comp_start[c] as usize..self.comp_start[c + 1] as usize]
    }

    /// After [`Order::components`]: the first pair (i, j), i < j, of
    /// documents each preferred to the other, in local index order (as a
    /// scan of the closed preference matrix row by row finds it).
    fn first_contradiction(&self) -> Option<(u32, u32)> {
        let mut first: Option<(u32, u32)> = None;
        for c in 0..self.comp_start.len() - 1 {
            let (mut a, mut b) = (u32::MAX, u32::MAX);
            for &m in self.members(c).iter().filter(|&&m| (m as usize) < self.docs) {
                if m < a {
                    (a, b) = (m, a);
                } else if m < b {
                    b = m;
                }
            }
            if b != u32::MAX && first.is_none_or(|(i, _)| a < i) {
                first = Some((a, b));
            }
        }
        first
    }

    /// After [`Order::components`]: the transitive closure, per component
    /// the documents it reaches, successors first.
    fn close(&mut self) {
        let words = self.docs.div_ceil(64);
        let comps = self.comp_start.len() - 1;
        self.words = words;
        self.reach.clear();
        self.reach.resize(comps * words, 0);
        for c in 0..comps {
            let (done, rest) = self.reach.split_at_mut(c * words);
            let row = &mut rest[..words];
            for &u in &self.members[self.comp_start[c] as usize..self.comp_start[c + 1] as usize] {
                let u = u as usize;
                for &w in &self.targets[self.start[u] as usize..self.start[u + 1] as usize] {
                    let w = w as usize;
                    if w < self.docs {
                        row[w / 64] |= 1 << (w % 64);
                    }
                    let cw = self.comp[w] as usize;
                    if cw != c {
                        for (x, y) in row.iter_mut().zip(&done[cw * words..][..words]) {
                            *x |= y;
                        }
                    }
                }
            }
        }
    }

    /// After [`Order::close`]: calls `f(i, j)` for each document `i`
    /// preferred to another `j`, by `i` then `j` (local indices).
    fn for_each_pair(&self, mut f: impl FnMut(u32, u32)) {
        for i in 0..self.docs {
            let row = &self.reach[self.comp[i] as usize * self.words..][..self.words];
            for (w, &bits) in row.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    let j = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if j != i {
                        f(i as u32, j as u32);
                    }
                }
            }
        }
    }

    #[cfg(test)]
    fn heap_bytes(&self) -> usize {
        8 * (self.edges.capacity() + self.calls.capacity())
            + 4 * (self.start.capacity()
                + self.targets.capacity()
                + self.index.capacity()
                + self.low.capacity()
                + self.stack.capacity()
                + self.comp.capacity()
                + self.members.capacity()
                + self.comp_start.capacity())
            + 8 * self.reach.capacity()
    }
}

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
/// order of [`MEASURES`].
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
    use super::*;

    fn p() -> &'static Path {
        Path::new("x")
    }

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

    #[test]
    fn measure_list_is_trec_evals() {
        assert_eq!(N, 14);
        assert_eq!(MEASURES[0], "prefs_num_prefs_poss");
        assert_eq!(MEASURES[13], "prefs_avgjg_imp");
        assert!((0..N).filter(|&i| is_count(i)).eq(0..3));
        assert_eq!(format_value(0, 66130.0), "66130");
        assert_eq!(format_value(3, 8.0 / 13.0), "0.6154");
        assert_eq!(format_value(4, 1.0), "1.0000");
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

    #[test]
    fn topics_sort_as_bytes_and_lines_are_read_leniently() {
        let buf = b"# header\n10 g s a 1\n\n  # indented comment\n9\tg s a 1\r\n10 g s b 0.5e1\n2 g s a -0\n";
        let q = parse_prefs(p(), buf).unwrap();
        assert_eq!(q.names, [&b"10"[..], b"2", b"9"]);
        assert_eq!(q.find(b"9"), Some(2));
        assert_eq!(q.find(b"1"), None);
        let rels: Vec<f64> = q.topic(0).judgments().iter().map(|j| j.rel).collect();
        assert_eq!(rels, [5.0, 1.0]);
        assert_eq!(q.topic(1).judgments()[0].rel.to_bits(), 0.0f64.to_bits());
        let q = parse_qrels_prefs(p(), b"1 0 a 1\n1 1 b 1.5\n").unwrap();
        let j = q.topic(0).judgments();
        assert_eq!((j[0].jg, j[0].jsg, j[1].jg, j[1].rel), (&b"0"[..], &b"0"[..], &b"1"[..], 1.5));
    }

    #[test]
    fn malformed_lines_are_refused() {
        let err = |r: Result<PrefsQrels, PrefsError>| r.unwrap_err().to_string();
        assert_eq!(
            err(parse_prefs(p(), b"1 g s a 1\n1 g s b\n")),
            "x:2: expected 5 columns \"qid jg jsg docno rel\", found 4"
        );
        assert_eq!(
            err(parse_prefs(p(), b"1 g s a 1 x\n")),
            "x:1: expected 5 columns \"qid jg jsg docno rel\", found more"
        );
        assert_eq!(err(parse_prefs(p(), b"1 g s a high\n")), "x:1: relevance level \"high\" is not a finite number");
        assert!(err(parse_prefs(p(), b"1 g s a nan\n")).starts_with("x:1: relevance level \"nan\""));
        assert_eq!(
            err(parse_qrels_prefs(p(), b"1 0 a 1 extra\n")),
            "x:1: expected 4 columns \"qid iter docno rel\", found more"
        );
        assert_eq!(err(parse_prefs(p(), b"# nothing\n\n")), "x: no judgment lines");
    }

    #[test]
    fn inconsistent_judgments_are_refused() {
        let err = |buf: &[u8]| match parse_prefs(p(), buf) {
            Err(e @ PrefsError::Inconsistent { .. }) => e.to_string(),
            other => panic!("{other:?}"),
        };
        let e = err(b"1 g s a 2\n1 g s b 0\n1 g s a 1\n");
        assert!(e.starts_with("x:3: document \"a\" has two relevance levels (2 and 1)"), "{e}");
        assert!(e.ends_with("(other line 1)"), "{e}");
        let e = err(b"1 g s a 2\n1 g s b 0\n1 g t a 0\n1 g t c 1\n");
        assert!(e.starts_with("x:3: document \"a\" is judged both 0 and non-0"), "{e}");
        let e = err(b"1 g s a 2\n1 g s b 1\n1 g t b 2\n1 g t c 1\n1 g u c 2\n1 g u a 1\n");
        assert!(e.contains("judgment group \"g\" prefers"), "{e}");
        // Accepted by trec_eval, so here too: a doc at two levels of one JSG
        // in a partial-order JG with nothing in between, a doc going from
        // > 0 to 0 through a negative level, a doc at two levels of two JGs.
        parse_prefs(p(), b"1 g s a 3\n1 g s a 1\n1 g s b 0.5\n1 g t b 2\n1 g t c 1\n").unwrap();
        parse_prefs(p(), b"1 g s a 2\n1 g s b 1\n1 g t a -1\n1 g t c 2\n1 g u a 0\n1 g u d 1\n").unwrap();
        parse_prefs(p(), b"1 g s a 2\n1 g s b 1\n1 h s a 1\n1 h s b 2\n").unwrap();
    }

    /// A small deterministic generator (xorshift64*), for the randomized tests.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
        }
    }

    /// The closed preference matrix of a partial-order JG the plain way:
    /// direct preferences within each JSG, then Warshall's closure.
    fn closed_matrix(lines: &[PrefJudgment], local: &[u32], n: usize) -> Vec<Vec<bool>> {
        let mut m = vec![vec![false; n]; n];
        for (a, ja) in lines.iter().enumerate() {
            for (b, jb) in lines.iter().enumerate() {
                if ja.jsg == jb.jsg && ja.rel > jb.rel {
                    m[local[a] as usize][local[b] as usize] = true;
                }
            }
        }
        for k in 0..n {
            let via = m[k].clone();
            for row in m.iter_mut().filter(|row| row[k]) {
                for (x, &y) in row.iter_mut().zip(&via) {
                    *x |= y;
                }
            }
        }
        m
    }

    /// The preference graph gives the same closed preferences and the same
    /// first contradiction as the closed matrix, on random JGs: few docs,
    /// few levels, docs at two levels of one JSG, repeated lines; half of
    /// them consistent (levels derived from one utility per doc).
    #[test]
    fn order_graph_equals_closed_matrix() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let jsgs: [&[u8]; 4] = [b"s1", b"s2", b"s3", b"s4"];
        let names: Vec<Vec<u8>> = (0..12).map(|d| format!("d{d}").into_bytes()).collect();
        let (mut contradictions, mut pairs_seen) = (0, 0);
        let mut order = Order::default();
        for _ in 0..4000 {
            let mut lines = Vec::new();
            let num_docs = 1 + rng.below(12) as usize;
            let consistent = rng.below(2) == 0;
            let utility: Vec<u64> = (0..num_docs).map(|_| rng.below(6)).collect();
            for jsg in &jsgs[..2 + rng.below(3) as usize] {
                let coarse = 1 + rng.below(3);
                for _ in 0..1 + rng.below(8) {
                    let d = rng.below(num_docs as u64) as usize;
                    let doc = &names[d];
                    let rel = if consistent { utility[d] / coarse } else { rng.below(5) } as f64 - 1.0;
                    lines.push(PrefJudgment { jg: b"g", jsg, doc, rel });
                }
            }
            lines.sort_by(|a, b| a.jsg.cmp(b.jsg).then_with(|| b.rel.total_cmp(&a.rel)).then_with(|| a.doc.cmp(b.doc)));
            // Local indices in first-seen order, as `order` numbers them.
            let mut seen: Vec<&[u8]> = Vec::new();
            let local: Vec<u32> = lines
                .iter()
                .map(|j| match seen.iter().position(|d| *d == j.doc) {
                    Some(l) => l as u32,
                    None => {
                        seen.push(j.doc);
                        seen.len() as u32 - 1
                    }
                })
                .collect();
            let n = seen.len();
            let m = closed_matrix(&lines, &local, n);
            order.build(&lines, |k| local[k], n);
            order.components();
            let first = (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))).find(|&(i, j)| m[i][j] && m[j][i]);
            let got = order.first_contradiction().map(|(i, j)| (i as usize, j as usize));
            assert_eq!(got, first, "{lines:?}");
            if first.is_some() {
                contradictions += 1;
                continue;
            }
            order.close();
            let mut pairs = Vec::new();
            order.for_each_pair(|i, j| pairs.push((i as usize, j as usize)));
            let want: Vec<(usize, usize)> =
                (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).filter(|&(i, j)| i != j && m[i][j]).collect();
            assert_eq!(pairs, want, "{lines:?}");
            pairs_seen += pairs.len();
        }
        assert!(contradictions > 1000 && contradictions < 3000, "{contradictions} of 4000 contradict");
        assert!(pairs_seen > 10_000, "{pairs_seen} pairs");
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
