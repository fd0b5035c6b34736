//! Reading preference judgments: a `-R prefs` or `-R qrels_prefs` file
//! into checked [`PrefsQrels`], its judgments refused where they contradict
//! themselves.
//!
//! In the prefs flow: first. Lines are sorted by topic, JG, JSG and level;
//! each JG becomes either equivalence classes (one JSG) or the levels of a
//! partial order (several), whose preferences `order` checks for cycles.
//! Nothing quadratic is kept: `evaluate` rebuilds a partial order's
//! preferences when it needs them.

use super::order::Order;
use super::{JgSpan, PrefJudgment, PrefsError, PrefsQrels, TopicSpan, run_end};
use crate::eval::trec::{self, TrecError, line_of};
use std::ops::Range;
use std::path::Path;

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

#[cfg(test)]
mod tests {
    use super::super::p;
    use super::*;

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
}
