//! `-R qrels_jg`: qrels with judgment groups, and the three measures that
//! average over them (`map_avgjg`, `P_avgjg`, `Rprec_mult_avgjg`, together
//! trec_eval's `-m qrels_jg`).
//!
//! A judgment group ("jg") is one user's (or one assessor's) set of
//! judgments for a topic. A qrels_jg line is `qid jg docno rel`, the second
//! column naming the group instead of trec_eval's unused `iter`. Each
//! measure is computed per group exactly as its plain counterpart (`map`,
//! `P`, `Rprec_mult`), and the group values of a topic are averaged.
//!
//! A port of trec_eval 10.0: get_qrels_jg.c (reading), form_res_rels_jg.c
//! (relevance of the ranking per group), m_map_avgjg.c, m_P_avgjg.c and
//! m_Rprec_mult_avgjg.c. Floating-point operations happen in the same order
//! as there, so values agree to the last bit, not just to `%6.4f`.
//!
//! Reading follows trec_eval where trec_eval succeeds: exactly 4 columns
//! separated by any C `isspace` run, leading and trailing whitespace, a
//! missing final newline; topics are ordered by qid as bytes (`strcmp`),
//! groups within a topic by jg name as bytes, and a document judged twice by
//! the same group of a topic is an error (trec_eval: `get_qrels: duplicate
//! docs`, exit 2); the same document in two groups is fine. Like
//! [`super::trec`], and unlike trec_eval, blank lines and every line whose
//! first field starts with `#` are skipped: trec_eval skips a `#` line only
//! when `#` is its first byte and the previous line was not also skipped
//! (otherwise it parses the line as data, usually failing), fails on blank
//! lines, and reads past its buffer when the last line is a comment. Grades
//! must be integers (trec_eval's `atol` reads `2x` as 2).
//!
//! Evaluation per topic ([`Scratch::rank`]) follows form_res_rels_jg.c: the
//! ranking is the caller's (score descending, docno descending, see
//! [`super::trec::Run`]), cut to [`JgOptions::max_docs`] (`-M`). Per group, a
//! retrieved document has its group's grade, [`NONPOOL`] if the group did not
//! judge it, [`UNJUDGED`] if the group's grade is negative. `num_rel` counts
//! the group's judgments with grade ≥ max(0, `-l`), retrieved or not;
//! `num_rel_ret` counts retrieved documents with grade ≥ 0 and ≥ `-l`. With
//! `-J` the documents the group did not judge (grade < 0 or absent) are
//! dropped from its ranking before ranks are counted.

use super::trec::{
    Grouped, Interner, Judgment, Qrels, Retrieved, TrecError, doc_key, for_each_line, in_file_order, line_of,
    parse_grade, show,
};
use crate::metrics::Grade;
use std::path::{Path, PathBuf};
use thiserror::Error;

/// The measure names, in trec_eval's print order.
pub const MAP_AVGJG: &str = "map_avgjg";
pub const P_AVGJG: &str = "P_avgjg";
pub const RPREC_MULT_AVGJG: &str = "Rprec_mult_avgjg";

/// `P_avgjg`'s default cutoffs (m_P_avgjg.c).
pub const P_AVGJG_CUTOFFS: [usize; 9] = [5, 10, 15, 20, 30, 100, 200, 500, 1000];

/// `Rprec_mult_avgjg`'s default multiples of `num_rel` (m_Rprec_mult_avgjg.c),
/// printed `Rprec_mult_avgjg_0.20` … `Rprec_mult_avgjg_2.00`.
pub const RPREC_MULT_AVGJG_MULTS: [f64; 10] = [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6, 1.8, 2.0];

/// Relevance of a retrieved document its group did not judge
/// (trec_eval's `RELVALUE_NONPOOL`).
pub const NONPOOL: Grade = -1;
/// Relevance of a retrieved document its group judged with a negative grade,
/// "in the pool but unjudged" (trec_eval's `RELVALUE_UNJUDGED`).
pub const UNJUDGED: Grade = -2;

/// The docno of trec_eval's placeholder ranking for `-c` topics that are
/// judged but not in the run (one document, score 1.0).
pub const PLACEHOLDER_DOC: &[u8] = b"ceci_nest_pas_un_docno";

/// trec_eval's `-M` default, `MAXLONG` (2^31 − 1 in common.h).
pub const DEFAULT_MAX_DOCS: usize = 2_147_483_647;

/// The one result trec_eval evaluates, under `-c`, for a judged topic that
/// has no results.
pub fn placeholder_result() -> Retrieved<'static> {
    Retrieved { doc: PLACEHOLDER_DOC, key: doc_key(PLACEHOLDER_DOC), score: 1.0 }
}

/// The printed name of one value of a measure with integer cutoffs, as
/// meas_init.c's `append_long` (`"%s_%ld"`): `P_avgjg_10`.
pub fn cutoff_name(measure: &str, cutoff: usize) -> String {
    format!("{measure}_{cutoff}")
}

/// The printed name of one value of a measure with floating-point cutoffs,
/// as meas_init.c's `append_double`: `snprintf(buf, strlen(name) + 10,
/// "%s_%3.2f", name, value)`, so the number is cut to 8 characters:
/// `Rprec_mult_avgjg_0.20`, and 123456.789 gives `…_123456.7`.
/// (Also the naming of plain `Rprec_mult`.)
pub fn double_param_name(measure: &str, value: f64) -> String {
    let number = if value.is_nan() {
        if value.is_sign_negative() { "-nan".to_string() } else { "nan".to_string() }
    } else if value.is_infinite() {
        if value < 0.0 { "-inf".to_string() } else { "inf".to_string() }
    } else {
        // Rust, like glibc, rounds the exact binary value half to even.
        format!("{value:.2}")
    };
    let mut name = format!("{measure}_{number}");
    name.truncate(measure.len() + 9);
    name
}

#[derive(Debug, Error)]
pub enum JgError {
    #[error("{path}:{line}: expected 4 columns \"qid jg docno rel\", found {}", found_columns(*.found))]
    Columns { path: PathBuf, line: u32, found: usize },
    #[error("{path}:{line}: relevance {value:?} is not an integer")]
    Grade { path: PathBuf, line: u32, value: String },
    #[error(
        "{path}:{line}: document {doc:?} judged twice for topic {topic:?} by judgment group {jg:?} (first on line {first})"
    )]
    Duplicate { path: PathBuf, line: u32, first: u32, topic: String, jg: String, doc: String },
    /// trec_eval refuses an empty file ("Cannot read qrels file").
    #[error("{path}: no judgments")]
    Empty { path: PathBuf },
}

fn found_columns(found: usize) -> String {
    if found > 4 { "more".to_string() } else { found.to_string() }
}

/// One qrels_jg line while reading.
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    jg: &'a [u8],
    judgment: Judgment<'a>,
}

#[derive(Debug, Clone, Copy)]
struct Group<'a> {
    name: &'a [u8],
    start: usize,
    end: usize,
}

/// A parsed qrels_jg file. Topics are numbered in trec_eval's order (qid as
/// bytes, ascending).
#[derive(Debug)]
pub struct JgQrels<'a> {
    qids: Vec<&'a [u8]>,
    /// Topic `t`'s groups are `groups[topic_groups[t]..topic_groups[t + 1]]`.
    topic_groups: Vec<usize>,
    /// In jg-name order within a topic.
    groups: Vec<Group<'a>>,
    /// Per group, sorted by (`key`, `doc`) for [`Qrels::find`].
    judgments: Vec<Judgment<'a>>,
}

/// One topic of a [`JgQrels`].
#[derive(Debug, Clone, Copy)]
pub struct JgTopic<'q, 'a> {
    pub qid: &'a [u8],
    groups: &'q [Group<'a>],
    judgments: &'q [Judgment<'a>],
}

/// One judgment group of a topic.
#[derive(Debug, Clone, Copy)]
pub struct JgGroup<'q, 'a> {
    pub name: &'a [u8],
    /// Sorted by (`key`, `doc`), not in file order.
    pub judgments: &'q [Judgment<'a>],
}

impl<'a> JgQrels<'a> {
    /// Number of topics.
    pub fn len(&self) -> usize {
        self.qids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.qids.is_empty()
    }

    /// Topic ids in trec_eval's order.
    pub fn qids(&self) -> &[&'a [u8]] {
        &self.qids
    }

    /// Topic number `t` in trec_eval's order.
    pub fn topic(&self, t: usize) -> JgTopic<'_, 'a> {
        JgTopic {
            qid: self.qids[t],
            groups: &self.groups[self.topic_groups[t]..self.topic_groups[t + 1]],
            judgments: &self.judgments,
        }
    }

    /// The number of the topic `qid`, if judged.
    pub fn find(&self, qid: &[u8]) -> Option<usize> {
        self.qids.binary_search_by(|q| (*q).cmp(qid)).ok()
    }
}

impl<'q, 'a> JgTopic<'q, 'a> {
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// The groups in trec_eval's order (jg name as bytes, ascending).
    pub fn groups(&self) -> impl ExactSizeIterator<Item = JgGroup<'q, 'a>> + '_ {
        let judgments = self.judgments;
        self.groups.iter().map(move |g| JgGroup { name: g.name, judgments: &judgments[g.start..g.end] })
    }
}

/// Parses a qrels_jg file held in `buf` (see the module documentation).
pub fn parse_qrels_jg<'a>(path: &Path, buf: &'a [u8]) -> Result<JgQrels<'a>, JgError> {
    let mut topics = Interner::new();
    let mut lines: Vec<Line<'a>> = Vec::with_capacity(buf.len() / 18);
    // `for_each_line` stops on a `TrecError`; the typed error travels beside it.
    let mut failure = None;
    let read = for_each_line::<4>(buf, |line, f, n| {
        let grade = if n == 4 { parse_grade(f[3]) } else { None };
        let Some(grade) = grade else {
            failure = Some(if n == 4 {
                JgError::Grade { path: path.to_path_buf(), line, value: show(f[3]) }
            } else {
                JgError::Columns { path: path.to_path_buf(), line, found: n }
            });
            return Err(TrecError::Line { path: PathBuf::new(), line, message: String::new() });
        };
        topics.intern(f[0], lines.len());
        lines.push(Line { jg: f[1], judgment: Judgment { doc: f[2], key: doc_key(f[2]), grade } });
        Ok(())
    });
    if read.is_err() {
        return Err(failure.expect("set before every early return"));
    }
    if lines.is_empty() {
        return Err(JgError::Empty { path: path.to_path_buf() });
    }
    let total = lines.len();
    let mut grouped = Grouped::new(topics, lines);
    let mut order: Vec<usize> = (0..grouped.names.len()).collect();
    order.sort_unstable_by(|&a, &b| grouped.names[a].cmp(grouped.names[b]));

    let mut qrels = JgQrels {
        qids: Vec::with_capacity(order.len()),
        topic_groups: Vec::with_capacity(order.len() + 1),
        groups: Vec::new(),
        judgments: Vec::with_capacity(total),
    };
    qrels.topic_groups.push(0);
    for t in order {
        let qid = grouped.names[t];
        let lines = grouped.topic_mut(t);
        lines.sort_unstable_by(|a, b| {
            a.jg.cmp(b.jg).then(a.judgment.key.cmp(&b.judgment.key)).then_with(|| a.judgment.doc.cmp(b.judgment.doc))
        });
        if let Some(w) = lines.windows(2).find(|w| w[0].jg == w[1].jg && w[0].judgment.doc == w[1].judgment.doc) {
            let (first, repeat) = in_file_order(w[0].judgment.doc, w[1].judgment.doc);
            return Err(JgError::Duplicate {
                path: path.to_path_buf(),
                line: line_of(buf, repeat),
                first: line_of(buf, first),
                topic: show(qid),
                jg: show(w[0].jg),
                doc: show(repeat),
            });
        }
        for (i, l) in lines.iter().enumerate() {
            if i == 0 || l.jg != lines[i - 1].jg {
                let start = qrels.judgments.len();
                qrels.groups.push(Group { name: l.jg, start, end: start });
            }
            qrels.judgments.push(l.judgment);
            qrels.groups.last_mut().expect("pushed above").end += 1;
        }
        qrels.qids.push(qid);
        qrels.topic_groups.push(qrels.groups.len());
    }
    Ok(qrels)
}

/// trec_eval's `-l`, `-J` and `-M`.
#[derive(Debug, Clone, Copy)]
pub struct JgOptions {
    /// `-l`: the minimum grade that counts as relevant (default 1).
    pub relevance_level: i64,
    /// `-J`: drop the documents a group did not judge from its ranking.
    pub judged_docs_only: bool,
    /// `-M`: evaluate only this many top results (default [`DEFAULT_MAX_DOCS`]).
    pub max_docs: usize,
}

impl Default for JgOptions {
    fn default() -> Self {
        JgOptions { relevance_level: 1, judged_docs_only: false, max_docs: DEFAULT_MAX_DOCS }
    }
}

/// Counts for one group of one topic (trec_eval's `RES_RELS`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupCounts {
    /// Length of the group's ranking (fewer than the results under `-J`).
    pub num_ret: usize,
    /// The group's judgments with grade ≥ max(0, `-l`).
    pub num_rel: usize,
    /// Retrieved documents with grade ≥ 0 and ≥ `-l`.
    pub num_rel_ret: usize,
}

/// Buffers reused from topic to topic: after the largest topic, ranking
/// another one allocates nothing.
#[derive(Debug, Default)]
pub struct Scratch {
    rels: Vec<Grade>,
    groups: Vec<(usize, GroupCounts)>,
}

/// The ranking of one topic as seen by each of its groups.
#[derive(Debug, Clone, Copy)]
pub struct JgRanking<'s> {
    rels: &'s [Grade],
    /// Per group: start in `rels`, and its counts.
    groups: &'s [(usize, GroupCounts)],
    relevance_level: i64,
}

impl JgRanking<'_> {
    pub fn num_groups(&self) -> usize {
        self.groups.len()
    }

    /// Group `g`'s relevance value at each rank (a grade ≥ 0, [`NONPOOL`] or
    /// [`UNJUDGED`]), and its counts.
    pub fn group(&self, g: usize) -> (&[Grade], GroupCounts) {
        let (start, counts) = self.groups[g];
        (&self.rels[start..start + counts.num_ret], counts)
    }

    #[inline]
    fn is_relevant(&self, rel: Grade) -> bool {
        i64::from(rel) >= self.relevance_level
    }

    /// The values of a measure for one topic are summed over its groups,
    /// then divided by their number when there is more than one.
    fn average(&self, out: &mut [f64]) {
        if self.groups.len() > 1 {
            let n = self.groups.len() as f64;
            for v in out {
                *v /= n;
            }
        }
    }
}

impl Scratch {
    pub fn new() -> Self {
        Scratch::default()
    }

    /// Relevance of `results` for each group of `topic` (form_res_rels_jg.c).
    /// `results` must be in trec_eval's order (score descending, then docno
    /// descending) and hold no document twice: trec_eval refuses duplicates
    /// among the first `-M` results, which is the caller's check (see
    /// [`super::trec::Run::duplicates`]). For a `-c` topic without results,
    /// pass `&[placeholder_result()]`.
    pub fn rank<'s>(
        &'s mut self,
        topic: &JgTopic<'_, '_>,
        results: &[Retrieved<'_>],
        opts: &JgOptions,
    ) -> JgRanking<'s> {
        let results = &results[..results.len().min(opts.max_docs)];
        let level = opts.relevance_level;
        let relevant = |g: Grade| g >= 0 && i64::from(g) >= level;
        self.rels.clear();
        self.groups.clear();
        for group in topic.groups() {
            let start = self.rels.len();
            let mut num_rel_ret = 0;
            for r in results {
                let rel = match Qrels::find(group.judgments, r.key, r.doc) {
                    None => NONPOOL,
                    Some(g) if g < 0 => UNJUDGED,
                    Some(g) => g,
                };
                if rel < 0 && opts.judged_docs_only {
                    continue;
                }
                num_rel_ret += usize::from(relevant(rel));
                self.rels.push(rel);
            }
            let num_rel = group.judgments.iter().filter(|j| relevant(j.grade)).count();
            let num_ret = self.rels.len() - start;
            self.groups.push((start, GroupCounts { num_ret, num_rel, num_rel_ret }));
        }
        JgRanking { rels: &self.rels, groups: &self.groups, relevance_level: level }
    }
}

/// `map_avgjg` (m_map_avgjg.c): average precision per group, averaged over
/// the groups. A group with no relevant document retrieved scores 0.
pub fn map_avgjg(ranking: &JgRanking<'_>) -> f64 {
    let mut value = 0.0;
    for g in 0..ranking.num_groups() {
        let (rels, counts) = ranking.group(g);
        let mut rel_so_far: u64 = 0;
        let mut sum = 0.0;
        for (i, &rel) in rels.iter().enumerate() {
            if ranking.is_relevant(rel) {
                rel_so_far += 1;
                sum += rel_so_far as f64 / (i + 1) as f64;
            }
        }
        if rel_so_far != 0 {
            value += sum / counts.num_rel as f64;
        }
    }
    let mut out = [value];
    ranking.average(&mut out);
    out[0]
}

/// `P_avgjg` (m_P_avgjg.c): precision at each cutoff per group (missing
/// ranks count as non-relevant), averaged over the groups. `cutoffs` must be
/// positive and strictly ascending (trec_eval sorts them and refuses zero,
/// negative and duplicate ones); `out[i]` receives cutoff `i`'s value.
pub fn p_avgjg(ranking: &JgRanking<'_>, cutoffs: &[usize], out: &mut [f64]) {
    debug_assert!(cutoffs.first().is_none_or(|&c| c > 0) && cutoffs.windows(2).all(|w| w[0] < w[1]));
    let out = &mut out[..cutoffs.len()];
    out.fill(0.0);
    if cutoffs.is_empty() {
        return;
    }
    for g in 0..ranking.num_groups() {
        let (rels, _) = ranking.group(g);
        let mut cut = 0;
        let mut rel_so_far: u64 = 0;
        for (i, &rel) in rels.iter().enumerate() {
            if i == cutoffs[cut] {
                out[cut] += rel_so_far as f64 / i as f64;
                cut += 1;
                if cut == cutoffs.len() {
                    break;
                }
            }
            if ranking.is_relevant(rel) {
                rel_so_far += 1;
            }
        }
        while cut < cutoffs.len() {
            out[cut] += rel_so_far as f64 / cutoffs[cut] as f64;
            cut += 1;
        }
    }
    ranking.average(out);
}

/// `Rprec_mult_avgjg` (m_Rprec_mult_avgjg.c): precision at rank
/// `(long)(mult × num_rel + 0.9)` per group, averaged over the groups. Past
/// the end of the ranking it is `num_rel_ret / rank` (missing ranks are
/// non-relevant); a rank ≤ 0 (`num_rel` 0, or a negative multiple) gives 0.
/// `mults` must be strictly ascending (trec_eval sorts them and refuses
/// duplicates; it accepts negative ones); `out[i]` receives `mults[i]`'s value.
pub fn rprec_mult_avgjg(ranking: &JgRanking<'_>, mults: &[f64], out: &mut [f64]) {
    debug_assert!(mults.windows(2).all(|w| w[0] < w[1]));
    let out = &mut out[..mults.len()];
    out.fill(0.0);
    for g in 0..ranking.num_groups() {
        let (rels, counts) = ranking.group(g);
        let num_rel = counts.num_rel as f64;
        // C: cutoffs[i] = (long) (cutoff_percents[i] * num_rel + 0.9)
        let cutoff = |i: usize| (mults[i] * num_rel + 0.9) as i64;
        let num_ret = counts.num_ret as i64;
        let num_rel_ret = counts.num_rel_ret as i64;
        // Cutoffs beyond the ranking: the missing ranks are non-relevant.
        let mut cut = mults.len();
        while cut > 0 && cutoff(cut - 1) > num_ret {
            out[cut - 1] += num_rel_ret as f64 / cutoff(cut - 1) as f64;
            cut -= 1;
        }
        // Walk the ranking backwards; cutoffs reached once every relevant
        // document is behind (and cutoffs ≤ 0) keep 0.
        let mut rel_so_far = num_rel_ret;
        let mut i = num_ret;
        while i > 0 && rel_so_far > 0 {
            let precis = rel_so_far as f64 / i as f64;
            while cut > 0 && i == cutoff(cut - 1) {
                out[cut - 1] += precis;
                cut -= 1;
            }
            if ranking.is_relevant(rels[(i - 1) as usize]) {
                rel_so_far -= 1;
            }
            i -= 1;
        }
    }
    ranking.average(out);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("q")
    }

    fn results<'a>(docs: &[&'a str]) -> Vec<Retrieved<'a>> {
        // Already in trec_eval order: strictly decreasing scores.
        docs.iter()
            .enumerate()
            .map(|(i, d)| Retrieved { doc: d.as_bytes(), key: doc_key(d.as_bytes()), score: 100.0 - i as f64 })
            .collect()
    }

    /// Topic 1, judged by groups `a` and `b`; worked by hand below.
    const QRELS: &[u8] =
        b"# two judgment groups\n1 b d2 1\n1 a d1 2\n1 a d2 1\n1 a d3 0\n1 a d4 -1\n1 b d6 3\n1 a d5 1\n1 b d3 1\n";
    /// Retrieved, in rank order.
    const RUN: [&str; 6] = ["d1", "d4", "d2", "d9", "d3", "d6"];

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-12
    }

    fn eval(opts: JgOptions) -> (f64, [f64; 4], [f64; 3]) {
        let q = parse_qrels_jg(p(), QRELS).unwrap();
        let run = results(&RUN);
        let mut scratch = Scratch::new();
        let r = scratch.rank(&q.topic(0), &run, &opts);
        let mut prec = [0.0; 4];
        p_avgjg(&r, &[1, 3, 5, 10], &mut prec);
        let mut rprec = [0.0; 3];
        rprec_mult_avgjg(&r, &[0.5, 1.0, 2.0], &mut rprec);
        (map_avgjg(&r), prec, rprec)
    }

    #[test]
    fn relevance_per_group() {
        let q = parse_qrels_jg(p(), QRELS).unwrap();
        let run = results(&RUN);
        let mut scratch = Scratch::new();
        let r = scratch.rank(&q.topic(0), &run, &JgOptions::default());
        // a: d1 2, d4 judged -1 → UNJUDGED, d2 1, d9 unknown → NONPOOL, d3 0, d6 not a's.
        assert_eq!(
            r.group(0),
            (&[2, UNJUDGED, 1, NONPOOL, 0, NONPOOL][..], GroupCounts { num_ret: 6, num_rel: 3, num_rel_ret: 2 })
        );
        assert_eq!(
            r.group(1),
            (&[NONPOOL, NONPOOL, 1, NONPOOL, 1, 3][..], GroupCounts { num_ret: 6, num_rel: 3, num_rel_ret: 3 })
        );
        let opts = JgOptions { judged_docs_only: true, ..JgOptions::default() };
        let r = scratch.rank(&q.topic(0), &run, &opts);
        assert_eq!(r.group(0), (&[2, 1, 0][..], GroupCounts { num_ret: 3, num_rel: 3, num_rel_ret: 2 }));
        assert_eq!(r.group(1).0, &[1, 1, 3]);
        // -l 0: grade-0 docs are relevant, negative grades still are not.
        let opts = JgOptions { relevance_level: 0, ..JgOptions::default() };
        let r = scratch.rank(&q.topic(0), &run, &opts);
        assert_eq!(r.group(0).1, GroupCounts { num_ret: 6, num_rel: 4, num_rel_ret: 3 });
    }

    #[test]
    fn measures_worked_by_hand() {
        let (map, prec, rprec) = eval(JgOptions::default());
        // AP a: relevant at ranks 1 and 3, num_rel 3: (1/1 + 2/3) / 3 = 5/9.
        // AP b: ranks 3, 5, 6: (1/3 + 2/5 + 3/6) / 3 = 37/90.
        assert!(close(map, (5.0 / 9.0 + 37.0 / 90.0) / 2.0), "{map}");
        assert!(close(map, 87.0 / 180.0));
        // P@1: a 1, b 0. P@3: a 2/3, b 1/3. P@5: 2/5 both. P@10: a 2/10, b 3/10.
        assert_eq!(prec.map(|v| (v * 1e12).round() / 1e12), [0.5, 0.5, 0.4, 0.25]);
        // num_rel 3 in both groups: ranks (long)(1.5 + .9) = 2, 3, (long)6.9 = 6.
        // a: P@2 = 1/2, P@3 = 2/3, P@6 = 2/6. b: P@2 is below its last
        // relevant-so-far step (the backward walk stops once the 3 relevant
        // docs at 6, 5, 3 are passed) → 0, P@3 = 1/3, P@6 = 3/6.
        assert!(close(rprec[0], 0.25), "{rprec:?}");
        assert!(close(rprec[1], 0.5), "{rprec:?}");
        assert!(close(rprec[2], (1.0 / 3.0 + 0.5) / 2.0), "{rprec:?}");
    }

    #[test]
    fn options_change_the_rankings() {
        // -J: a ranks [2, 1, 0] → (1 + 1) / 3; b ranks [1, 1, 3] → 1.
        let (map, prec, _) = eval(JgOptions { judged_docs_only: true, ..JgOptions::default() });
        assert!(close(map, (2.0 / 3.0 + 1.0) / 2.0), "{map}");
        // P@3: a 2/3, b 3/3.
        assert!(close(prec[1], (2.0 / 3.0 + 1.0) / 2.0), "{prec:?}");
        // -M 2: a ranks [2, UNJUDGED] → 1/3; b nothing relevant → 0.
        let (map, prec, rprec) = eval(JgOptions { max_docs: 2, ..JgOptions::default() });
        assert!(close(map, 1.0 / 6.0), "{map}");
        assert!(close(prec[3], (1.0 / 10.0) / 2.0), "{prec:?}");
        // Rprec at rank 6 > num_ret 2: num_rel_ret / 6 → a 1/6, b 0.
        assert!(close(rprec[2], 1.0 / 12.0), "{rprec:?}");
        // -l 2: a's only relevant doc d1 is at rank 1 → 1; b's d6 at rank 6 → 1/6.
        let (map, _, _) = eval(JgOptions { relevance_level: 2, ..JgOptions::default() });
        assert!(close(map, (1.0 + 1.0 / 6.0) / 2.0), "{map}");
    }

    #[test]
    fn single_group_is_not_divided_and_placeholder_finds_nothing() {
        let q = parse_qrels_jg(p(), b"7 0 x 1\n7 0 y 0\n").unwrap();
        let mut scratch = Scratch::new();
        let r = scratch.rank(&q.topic(0), &results(&["y", "x"]), &JgOptions::default());
        assert_eq!(map_avgjg(&r), 0.5);
        let mut out = [0.0; 2];
        p_avgjg(&r, &[1, 2], &mut out);
        assert_eq!(out, [0.0, 0.5]);
        // num_rel 1: ranks (long)(0.2 + .9) = 1 and (long)(2 + .9) = 2.
        rprec_mult_avgjg(&r, &[0.2, 2.0], &mut out);
        assert_eq!(out, [0.0, 0.5]);
        let r = scratch.rank(&q.topic(0), &[placeholder_result()], &JgOptions::default());
        assert_eq!(map_avgjg(&r), 0.0);
        rprec_mult_avgjg(&r, &[0.2, 2.0], &mut out);
        // rank 2 > num_ret 1: num_rel_ret (0) / 2.
        assert_eq!(out, [0.0, 0.0]);
    }

    #[test]
    fn topics_and_groups_in_strcmp_order() {
        let q =
            parse_qrels_jg(p(), b"2 u1 a 1\n10 z a 1\n2 u10 a 0\n  1\t0 b 1  \r\n2 u2 a 1\n2 U a 1\n2 u1 b 1").unwrap();
        assert_eq!(q.qids(), [&b"1"[..], b"10", b"2"]);
        let names: Vec<&[u8]> = q.topic(2).groups().map(|g| g.name).collect();
        assert_eq!(names, [&b"U"[..], b"u1", b"u10", b"u2"]);
        assert_eq!(q.topic(2).groups().nth(1).unwrap().judgments.len(), 2);
        assert_eq!(q.find(b"10"), Some(1));
        assert_eq!(q.find(b"3"), None);
    }

    #[test]
    fn errors_name_file_and_line() {
        let err = parse_qrels_jg(p(), b"1 0 a 1\n1 0 b\n").unwrap_err().to_string();
        assert_eq!(err, "q:2: expected 4 columns \"qid jg docno rel\", found 3");
        let err = parse_qrels_jg(p(), b"1 0 a 1 x\n").unwrap_err().to_string();
        assert_eq!(err, "q:1: expected 4 columns \"qid jg docno rel\", found more");
        let err = parse_qrels_jg(p(), b"1 0 a 1\n\n1 0 a 2\n").unwrap_err().to_string();
        assert_eq!(err, "q:3: document \"a\" judged twice for topic \"1\" by judgment group \"0\" (first on line 1)");
        let err = parse_qrels_jg(p(), b"1 0 a x1\n").unwrap_err().to_string();
        assert_eq!(err, "q:1: relevance \"x1\" is not an integer");
        assert!(matches!(parse_qrels_jg(p(), b"# nothing\n"), Err(JgError::Empty { .. })));
        // The same document in two groups is fine.
        assert!(parse_qrels_jg(p(), b"1 0 a 1\n1 1 a 2\n").is_ok());
    }

    #[test]
    fn names_as_meas_init() {
        assert_eq!(cutoff_name(P_AVGJG, 5), "P_avgjg_5");
        let names: Vec<String> =
            RPREC_MULT_AVGJG_MULTS.iter().map(|&m| double_param_name(RPREC_MULT_AVGJG, m)).collect();
        assert_eq!(names[0], "Rprec_mult_avgjg_0.20");
        assert_eq!(names[9], "Rprec_mult_avgjg_2.00");
        // "%3.2f" then cut to 8 characters.
        assert_eq!(double_param_name("R", 123456.789), "R_123456.7");
        assert_eq!(double_param_name("R", -0.5), "R_-0.50");
        assert_eq!(double_param_name("R", 0.125), "R_0.12");
        assert_eq!(double_param_name("R", 0.375), "R_0.38");
        assert_eq!(double_param_name("R", 1e300), "R_10000000");
    }
}
