//! Reading TREC files: qrels (`qid iter docno rel`) and runs
//! (`qid iter docno rank score run_id`), the offline input of the engine.
//!
//! Files are read whole and parsed in place: ids stay borrowed `&[u8]`
//! slices of the file buffer, topics are interned to dense `u32`s, and lines
//! are grouped per topic with a counting sort, so reading grows linearly with
//! the file (trec_eval's topic matching grows with the square of the topics).
//!
//! Accepted like trec_eval 10.0: any ASCII whitespace between columns, blank
//! lines, `#` comment lines, extra columns after a run's `run_id`. Refused
//! with the file and line: too few columns, a grade that is not an integer, a
//! score that is not a finite number, a document listed twice in one topic.

use crate::metrics::Grade;
use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TrecError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {message}")]
    Line { path: PathBuf, line: u32, message: String },
}

impl TrecError {
    fn line(path: &Path, line: u32, message: String) -> TrecError {
        TrecError::Line { path: path.to_path_buf(), line, message }
    }
}

/// Reads a file, or standard input for `-`.
pub fn read_input(path: &Path) -> Result<Vec<u8>, TrecError> {
    let io_err = |source| TrecError::Io { path: path.to_path_buf(), source };
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf).map_err(io_err)?;
        Ok(buf)
    } else {
        std::fs::read(path).map_err(io_err)
    }
}

/// One judged document.
#[derive(Debug, Clone, Copy)]
pub struct Judgment<'a> {
    pub doc: &'a [u8],
    pub grade: Grade,
    /// 1-based line in the qrels file, for error messages.
    pub line: u32,
}

/// One retrieved document.
#[derive(Debug, Clone, Copy)]
pub struct Retrieved<'a> {
    pub doc: &'a [u8],
    pub score: f64,
    pub line: u32,
}

/// Lines of one file grouped by topic: `items[offsets[t]..offsets[t + 1]]`
/// belong to topic `t`, whose id is `names[t]`.
#[derive(Debug)]
pub struct Grouped<'a, T> {
    pub names: Vec<&'a [u8]>,
    pub offsets: Vec<usize>,
    pub items: Vec<T>,
}

impl<'a, T> Grouped<'a, T> {
    pub fn topic(&self, t: usize) -> &[T] {
        &self.items[self.offsets[t]..self.offsets[t + 1]]
    }

    pub fn topic_mut(&mut self, t: usize) -> &mut [T] {
        &mut self.items[self.offsets[t]..self.offsets[t + 1]]
    }

    /// Groups `(topic, item)` pairs in one counting-sort pass, keeping file order within a topic.
    fn from_pairs(names: Vec<&'a [u8]>, pairs: Vec<(u32, T)>) -> Self
    where
        T: Copy,
    {
        let mut offsets = vec![0usize; names.len() + 1];
        for (t, _) in &pairs {
            offsets[*t as usize + 1] += 1;
        }
        for t in 0..names.len() {
            offsets[t + 1] += offsets[t];
        }
        let mut next = offsets.clone();
        let mut items: Vec<Option<T>> = vec![None; pairs.len()];
        for (t, item) in pairs {
            let slot = &mut next[t as usize];
            items[*slot] = Some(item);
            *slot += 1;
        }
        let items = items.into_iter().flatten().collect();
        Grouped { names, offsets, items }
    }
}

/// Parsed qrels: per topic, judgments sorted by docno.
pub type Qrels<'a> = Grouped<'a, Judgment<'a>>;

/// Parsed run: per topic, results in evaluation order (score descending,
/// then docno descending, as trec_eval; the rank column is ignored), plus
/// the run id of the last line (trec_eval's choice).
#[derive(Debug)]
pub struct Run<'a> {
    pub topics: Grouped<'a, Retrieved<'a>>,
    pub run_id: &'a [u8],
    /// Documents retrieved twice within a topic. Only an error for topics
    /// that get evaluated (trec_eval never looks at run-only topics), so the
    /// caller decides once it knows the qrels.
    pub duplicates: Vec<Duplicate<'a>>,
}

/// A document listed twice in one topic of a run.
#[derive(Debug, Clone, Copy)]
pub struct Duplicate<'a> {
    pub topic: usize,
    pub doc: &'a [u8],
    pub first_line: u32,
    pub line: u32,
}

impl Duplicate<'_> {
    pub fn to_error(&self, path: &Path, topic_name: &[u8]) -> TrecError {
        TrecError::line(
            path,
            self.line,
            format!(
                "document {:?} retrieved twice for topic {:?} (first on line {})",
                show(self.doc),
                show(topic_name),
                self.first_line
            ),
        )
    }
}

/// Splits a line on ASCII whitespace (C's `isspace`) into at most `N` fields,
/// returning how many it found (more than `N` counts as `N + 1`).
#[inline]
fn split_fields<'a, const N: usize>(line: &'a [u8], fields: &mut [&'a [u8]; N]) -> usize {
    let mut n = 0;
    let mut i = 0;
    let len = line.len();
    while i < len {
        while i < len && is_space(line[i]) {
            i += 1;
        }
        if i == len {
            break;
        }
        let start = i;
        while i < len && !is_space(line[i]) {
            i += 1;
        }
        if n == N {
            return N + 1;
        }
        fields[n] = &line[start..i];
        n += 1;
    }
    n
}

#[inline]
fn is_space(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0b' | b'\x0c')
}

/// Calls `f(line_number, line)` for every line that is neither blank nor a
/// `#` comment.
fn for_each_line<'a>(
    buf: &'a [u8],
    mut f: impl FnMut(u32, &'a [u8]) -> Result<(), TrecError>,
) -> Result<(), TrecError> {
    let mut line_no = 0u32;
    for line in buf.split(|&b| b == b'\n') {
        line_no += 1;
        let first = line.iter().position(|&b| !is_space(b));
        match first {
            None => continue,
            Some(i) if line[i] == b'#' => continue,
            Some(_) => f(line_no, line)?,
        }
    }
    Ok(())
}

/// Interns topic ids into dense indices in order of first appearance.
#[derive(Default)]
struct Interner<'a> {
    ids: FxHashMap<&'a [u8], u32>,
    names: Vec<&'a [u8]>,
}

impl<'a> Interner<'a> {
    #[inline]
    fn intern(&mut self, name: &'a [u8]) -> u32 {
        if let Some(&id) = self.ids.get(name) {
            return id;
        }
        let id = self.names.len() as u32;
        self.ids.insert(name, id);
        self.names.push(name);
        id
    }
}

fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses a qrels file held in `buf`.
pub fn parse_qrels<'a>(path: &Path, buf: &'a [u8]) -> Result<Qrels<'a>, TrecError> {
    let mut topics = Interner::default();
    let mut pairs = Vec::with_capacity(buf.len() / 24);
    for_each_line(buf, |line_no, line| {
        let mut f = [&[][..]; 4];
        let n = split_fields(line, &mut f);
        if n != 4 {
            let found = if n > 4 { "more".to_string() } else { n.to_string() };
            return Err(TrecError::line(
                path,
                line_no,
                format!("expected 4 columns \"qid iter docno rel\", found {found}"),
            ));
        }
        let grade = std::str::from_utf8(f[3])
            .ok()
            .and_then(|s| s.parse::<Grade>().ok())
            .ok_or_else(|| TrecError::line(path, line_no, format!("relevance {:?} is not an integer", show(f[3]))))?;
        let topic = topics.intern(f[0]);
        pairs.push((topic, Judgment { doc: f[2], grade, line: line_no }));
        Ok(())
    })?;
    let mut qrels = Grouped::from_pairs(topics.names, pairs);
    for t in 0..qrels.names.len() {
        let judged = qrels.topic_mut(t);
        judged.sort_unstable_by(|a, b| a.doc.cmp(b.doc).then(a.line.cmp(&b.line)));
        if let Some(w) = judged.windows(2).find(|w| w[0].doc == w[1].doc) {
            let (first, dup) = (w[0], w[1]);
            return Err(TrecError::line(
                path,
                dup.line,
                format!(
                    "document {:?} judged twice for topic {:?} (first on line {})",
                    show(dup.doc),
                    show(qrels.names[t]),
                    first.line
                ),
            ));
        }
    }
    Ok(qrels)
}

/// Parses a run file held in `buf`.
pub fn parse_run<'a>(path: &Path, buf: &'a [u8]) -> Result<Run<'a>, TrecError> {
    let mut topics = Interner::default();
    let mut pairs = Vec::with_capacity(buf.len() / 40);
    let mut run_id: &[u8] = b"";
    for_each_line(buf, |line_no, line| {
        let mut f = [&[][..]; 6];
        let n = split_fields(line, &mut f);
        if n < 6 {
            return Err(TrecError::line(
                path,
                line_no,
                format!("expected 6 columns \"qid iter docno rank score run_id\", found {n}"),
            ));
        }
        let score =
            std::str::from_utf8(f[4]).ok().and_then(|s| s.parse::<f64>().ok()).filter(|s| s.is_finite()).ok_or_else(
                || TrecError::line(path, line_no, format!("score {:?} is not a finite number", show(f[4]))),
            )?;
        // trec_eval compares scores with `<` and `>`, for which -0 equals 0;
        // adding +0.0 turns -0.0 into 0.0 so the total order used below agrees.
        let score = score + 0.0;
        let topic = topics.intern(f[0]);
        pairs.push((topic, Retrieved { doc: f[2], score, line: line_no }));
        run_id = f[5];
        Ok(())
    })?;
    let mut grouped = Grouped::from_pairs(topics.names, pairs);
    let mut by_doc: Vec<Retrieved<'a>> = Vec::new();
    let mut duplicates = Vec::new();
    for t in 0..grouped.names.len() {
        let results = grouped.topic_mut(t);
        // Duplicates make the ranking ambiguous; trec_eval refuses them too.
        by_doc.clear();
        by_doc.extend_from_slice(results);
        by_doc.sort_unstable_by(|a, b| a.doc.cmp(b.doc).then(a.line.cmp(&b.line)));
        if let Some(w) = by_doc.windows(2).find(|w| w[0].doc == w[1].doc) {
            duplicates.push(Duplicate { topic: t, doc: w[1].doc, first_line: w[0].line, line: w[1].line });
        }
        results.sort_unstable_by(|a, b| b.score.total_cmp(&a.score).then_with(|| b.doc.cmp(a.doc)));
    }
    Ok(Run { topics: grouped, run_id, duplicates })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("x")
    }

    #[test]
    fn run_order_is_score_then_docno_descending() {
        let buf = b"1 Q0 d1 1 1.5 r\n1 Q0 d2 2 1.5 r\n1 Q0 d10 3 2 r\n# note\n\n2 Q0 a 1 -1e-3 r2 extra\n";
        let run = parse_run(p(), buf).unwrap();
        let docs: Vec<&[u8]> = run.topics.topic(0).iter().map(|r| r.doc).collect();
        assert_eq!(docs, [&b"d10"[..], b"d2", b"d1"]);
        assert_eq!(run.run_id, b"r2");
        assert_eq!(run.topics.topic(1)[0].score, -0.001);
        // -0 ties with 0 and the docno decides, as in trec_eval.
        let run = parse_run(p(), b"1 Q0 a 1 0.00 r\n1 Q0 b 2 -0.00 r\n").unwrap();
        assert_eq!(run.topics.topic(0)[0].doc, b"b");
    }

    #[test]
    fn qrels_group_and_sort() {
        let buf = b"2 0 b 1\n1 0 z -1\n2\t0  a 3\n";
        let q = parse_qrels(p(), buf).unwrap();
        assert_eq!(q.names, [&b"2"[..], b"1"]);
        let t0: Vec<(&[u8], Grade)> = q.topic(0).iter().map(|j| (j.doc, j.grade)).collect();
        assert_eq!(t0, [(&b"a"[..], 3), (&b"b"[..], 1)]);
        assert_eq!(q.topic(1)[0].grade, -1);
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse_qrels(p(), b"1 0 a 1\n1 0 b\n").unwrap_err().to_string();
        assert_eq!(err, "x:2: expected 4 columns \"qid iter docno rel\", found 3");
        let err = parse_qrels(p(), b"1 0 a 1\n\n1 0 a 2\n").unwrap_err().to_string();
        assert!(err.starts_with("x:3: document \"a\" judged twice"), "{err}");
        let err = parse_qrels(p(), b"1 0 a high\n").unwrap_err().to_string();
        assert!(err.contains("x:1: relevance \"high\""), "{err}");
        let err = parse_run(p(), b"1 Q0 a 1 nan r\n").unwrap_err().to_string();
        assert!(err.contains("x:1: score \"nan\""), "{err}");
        let run = parse_run(p(), b"1 Q0 a 1 2 r\n1 Q0 a 2 1 r\n").unwrap();
        let err = run.duplicates[0].to_error(p(), b"1").to_string();
        assert!(err.starts_with("x:2: document \"a\" retrieved twice"), "{err}");
        let err = parse_run(p(), b"1 Q0 a 1 2\n").unwrap_err().to_string();
        assert!(err.contains("found 5"), "{err}");
    }
}
