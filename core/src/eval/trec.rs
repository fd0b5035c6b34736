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
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::Hasher;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum TrecError {
    #[error("cannot read {path}: {cause}")]
    Io { path: PathBuf, cause: std::io::Error },
    #[error("{path}:{line}: {message}")]
    Line { path: PathBuf, line: u32, message: String },
}

impl TrecError {
    fn line(path: &Path, line: u32, message: String) -> TrecError {
        TrecError::Line { path: path.to_path_buf(), line, message }
    }
}

/// A whole input file: memory-mapped when it is a regular file (no copy of
/// tens of megabytes), read into memory for standard input.
pub enum Input {
    Mapped(memmap2::Mmap),
    Owned(Vec<u8>),
}

impl Deref for Input {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Input::Mapped(m) => m,
            Input::Owned(v) => v,
        }
    }
}

/// Opens a file, or standard input for `-`.
pub fn read_input(path: &Path) -> Result<Input, TrecError> {
    let io_err = |cause| TrecError::Io { path: path.to_path_buf(), cause };
    if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut buf).map_err(io_err)?;
        return Ok(Input::Owned(buf));
    }
    let file = std::fs::File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if !meta.is_file() || meta.len() == 0 {
        // Pipes, devices and empty files: plain reads (mapping needs a length).
        let mut buf = Vec::new();
        std::io::Read::read_to_end(&mut &file, &mut buf).map_err(io_err)?;
        return Ok(Input::Owned(buf));
    }
    // SAFETY: the map is read-only and lives only while this command runs;
    // as with every tool that maps its input (ripgrep, trec_eval itself),
    // a file truncated by another process meanwhile is not supported.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(&file) }.map_err(io_err)?;
    Ok(Input::Mapped(map))
}

/// `buf` without a UTF-8 byte order mark at its start. trec_eval reads the
/// mark as part of the first topic id, which then matches nothing and its
/// topic drops out of every mean without a word (docs/metrics.md).
pub fn without_bom(buf: &[u8]) -> &[u8] {
    buf.strip_prefix(b"\xef\xbb\xbf").unwrap_or(buf)
}

/// One judged document. (Line numbers are not stored: error paths recover
/// them from the position of `doc` in the file, see [`line_of`].)
#[derive(Debug, Clone, Copy)]
pub struct Judgment<'a> {
    pub doc: &'a [u8],
    /// Hash of `doc`: sorting and searching compare it before the bytes.
    pub key: u64,
    pub grade: Grade,
}

/// One retrieved document.
#[derive(Debug, Clone, Copy)]
pub struct Retrieved<'a> {
    pub doc: &'a [u8],
    pub key: u64,
    pub score: f64,
}

/// The 1-based line of `buf` on which the slice `field` (borrowed from `buf`)
/// starts. Only used to report errors, so a scan is fine.
pub fn line_of(buf: &[u8], field: &[u8]) -> u32 {
    let offset = (field.as_ptr() as usize).saturating_sub(buf.as_ptr() as usize).min(buf.len());
    memchr::memchr_iter(b'\n', &buf[..offset]).count() as u32 + 1
}

/// Lines of one file grouped by topic: `items[offsets[t]..offsets[t + 1]]`
/// belong to topic `t`, whose id is `names[t]`.
#[derive(Debug)]
pub struct Grouped<'a, T> {
    pub names: Vec<&'a [u8]>,
    pub offsets: Vec<usize>,
    pub items: Vec<T>,
}

impl<'a, T: Copy> Grouped<'a, T> {
    pub fn topic(&self, t: usize) -> &[T] {
        &self.items[self.offsets[t]..self.offsets[t + 1]]
    }

    pub fn topic_mut(&mut self, t: usize) -> &mut [T] {
        &mut self.items[self.offsets[t]..self.offsets[t + 1]]
    }

    /// Groups items by topic. `topics.runs` lists the blocks of consecutive
    /// lines sharing a topic. Files almost always list a topic's lines
    /// together, and then the items are already in place; otherwise one
    /// counting-sort pass moves the blocks, keeping file order within a topic.
    pub(crate) fn new(topics: Interner<'a>, items: Vec<T>) -> Self {
        let names = topics.names;
        let runs = topics.runs;
        let block = |i: usize| -> (usize, usize, usize) {
            let (t, start) = runs[i];
            let end = runs.get(i + 1).map_or(items.len(), |r| r.1);
            (t as usize, start, end)
        };
        let mut offsets = vec![0usize; names.len() + 1];
        for i in 0..runs.len() {
            let (t, start, end) = block(i);
            offsets[t + 1] += end - start;
        }
        for t in 0..names.len() {
            offsets[t + 1] += offsets[t];
        }
        if runs.len() == names.len() || items.is_empty() {
            return Grouped { names, offsets, items };
        }
        let mut next = offsets.clone();
        let mut grouped = vec![items[0]; items.len()];
        for i in 0..runs.len() {
            let (t, start, end) = block(i);
            let at = next[t];
            grouped[at..at + (end - start)].copy_from_slice(&items[start..end]);
            next[t] += end - start;
        }
        Grouped { names, offsets, items: grouped }
    }
}

/// Parsed qrels: per topic, judgments sorted by (`key`, `doc`).
pub type Qrels<'a> = Grouped<'a, Judgment<'a>>;

impl Qrels<'_> {
    /// The judgment of `doc` in topic `t`, if any.
    #[inline]
    pub fn find(judged: &[Judgment], key: u64, doc: &[u8]) -> Option<Grade> {
        judged.binary_search_by(|j| j.key.cmp(&key).then_with(|| j.doc.cmp(doc))).ok().map(|i| judged[i].grade)
    }
}

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
    /// The first occurrence and the repeat, as slices of the run file.
    pub first: &'a [u8],
    pub repeat: &'a [u8],
}

impl Duplicate<'_> {
    pub fn to_error(&self, path: &Path, buf: &[u8], topic_name: &[u8]) -> TrecError {
        TrecError::line(
            path,
            line_of(buf, self.repeat),
            format!(
                "document {:?} retrieved twice for topic {:?} (first on line {})",
                show(self.repeat),
                show(topic_name),
                line_of(buf, self.first)
            ),
        )
    }
}

/// Orders two occurrences of the same document by their place in the file.
pub(crate) fn in_file_order<'a>(a: &'a [u8], b: &'a [u8]) -> (&'a [u8], &'a [u8]) {
    if a.as_ptr() <= b.as_ptr() { (a, b) } else { (b, a) }
}

#[inline]
pub fn doc_key(doc: &[u8]) -> u64 {
    let mut h = FxHasher::default();
    h.write(doc);
    h.finish()
}

/// C's `isspace`, the separators trec_eval accepts, as a lookup table.
static SPACE: [bool; 256] = {
    let mut table = [false; 256];
    table[b' ' as usize] = true;
    table[b'\t' as usize] = true;
    table[b'\n' as usize] = true;
    table[b'\r' as usize] = true;
    table[0x0b] = true;
    table[0x0c] = true;
    table
};

#[inline(always)]
pub(crate) fn is_space(b: u8) -> bool {
    SPACE[b as usize]
}

/// Splits a line on whitespace into at most `N` fields; returns how many it
/// found (`N + 1` when there are more).
#[inline]
fn split_fields<'a, const N: usize>(line: &'a [u8], fields: &mut [&'a [u8]; N]) -> usize {
    let mut n = 0;
    let mut i = 0;
    let len = line.len();
    loop {
        while i < len && is_space(line[i]) {
            i += 1;
        }
        if i == len {
            return n;
        }
        if n == N {
            return N + 1;
        }
        let start = i;
        while i < len && !is_space(line[i]) {
            i += 1;
        }
        fields[n] = &line[start..i];
        n += 1;
    }
}

/// Calls `f(line_number, fields, count)` for every line that is neither
/// blank nor a `#` comment.
#[inline]
pub(crate) fn for_each_line<'a, const N: usize>(
    buf: &'a [u8],
    mut f: impl FnMut(u32, &[&'a [u8]; N], usize) -> Result<(), TrecError>,
) -> Result<(), TrecError> {
    let mut line_no = 0u32;
    let mut pos = 0usize;
    let mut fields: [&'a [u8]; N] = [&[]; N];
    while pos < buf.len() {
        let end = memchr::memchr(b'\n', &buf[pos..]).map_or(buf.len(), |i| pos + i);
        let line = &buf[pos..end];
        pos = end + 1;
        line_no += 1;
        let n = split_fields(line, &mut fields);
        if n == 0 || fields[0].first() == Some(&b'#') {
            continue;
        }
        f(line_no, &fields, n)?;
    }
    Ok(())
}

/// Interns topic ids into dense indices in order of first appearance, and
/// records the blocks of consecutive lines that share a topic.
pub(crate) struct Interner<'a> {
    ids: FxHashMap<&'a [u8], u32>,
    names: Vec<&'a [u8]>,
    /// The previous line's topic: consecutive lines nearly always share it.
    last: Option<(&'a [u8], u32)>,
    /// (topic, index of the block's first item), one entry per block.
    runs: Vec<(u32, usize)>,
}

impl<'a> Interner<'a> {
    pub(crate) fn new() -> Self {
        Interner { ids: FxHashMap::default(), names: Vec::new(), last: None, runs: Vec::new() }
    }

    /// Notes that item number `index` belongs to topic `name`.
    #[inline]
    pub(crate) fn intern(&mut self, name: &'a [u8], index: usize) {
        if let Some((last, _)) = self.last
            && short_eq(last, name)
        {
            return;
        }
        let id = match self.ids.get(name) {
            Some(&id) => id,
            None => {
                let id = self.names.len() as u32;
                self.ids.insert(name, id);
                self.names.push(name);
                id
            }
        };
        self.last = Some((name, id));
        self.runs.push((id, index));
    }
}

/// Equality for short ids (topic ids are a few bytes): word-sized compares
/// inline instead of a `memcmp` call on every line.
#[inline(always)]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut a_words = a.chunks_exact(8);
    let mut b_words = b.chunks_exact(8);
    for (x, y) in (&mut a_words).zip(&mut b_words) {
        let x = u64::from_ne_bytes([x[0], x[1], x[2], x[3], x[4], x[5], x[6], x[7]]);
        let y = u64::from_ne_bytes([y[0], y[1], y[2], y[3], y[4], y[5], y[6], y[7]]);
        if x != y {
            return false;
        }
    }
    let mut diff = 0u8;
    for (x, y) in a_words.remainder().iter().zip(b_words.remainder()) {
        diff |= x ^ y;
    }
    diff == 0
}

pub(crate) fn show(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Parses a decimal integer grade: optional sign, then digits only, any
/// number of them (`00000000001` is 1, as trec_eval's `atol` reads it).
/// Past the grade's range a value saturates: every negative grade means
/// "judged, not relevant" however low it is, and a positive one that
/// large is refused by the caller as above the highest grade.
#[inline]
pub(crate) fn parse_grade(field: &[u8]) -> Option<Grade> {
    let (negative, digits) = match field.first()? {
        b'-' => (true, &field[1..]),
        b'+' => (false, &field[1..]),
        _ => (false, field),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().fold(0i64, |v, &b| v.saturating_mul(10).saturating_add(i64::from(b - b'0')));
    let value = if negative { -value } else { value };
    Some(value.clamp(i64::from(Grade::MIN), i64::from(Grade::MAX)) as Grade)
}

/// Powers of ten that are exact in f64.
const EXACT_POWERS_OF_TEN: [f64; 16] =
    [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15];

/// Parses a score like `strtod` (correctly rounded). Plain decimals of at
/// most 15 significant digits, the shape of nearly every run file, take a
/// fast path that is still exact: the digits form an integer below 2^53 and
/// the divisor 10^d is exact, so one IEEE division rounds correctly (Clinger's
/// fast path). Anything else goes to the standard parser.
#[inline]
pub(crate) fn parse_score(field: &[u8]) -> Option<f64> {
    let (negative, rest) = match field.first()? {
        b'-' => (true, &field[1..]),
        b'+' => (false, &field[1..]),
        _ => (false, field),
    };
    let mut mantissa: u64 = 0;
    let mut digits = 0usize;
    let mut decimals = 0usize;
    let mut seen_point = false;
    let mut simple = !rest.is_empty() && rest.len() <= 17;
    if simple {
        for &b in rest {
            match b {
                b'0'..=b'9' => {
                    mantissa = mantissa * 10 + u64::from(b - b'0');
                    digits += 1;
                    decimals += usize::from(seen_point);
                }
                b'.' if !seen_point => seen_point = true,
                _ => {
                    simple = false;
                    break;
                }
            }
        }
    }
    if simple && digits > 0 && digits <= 15 && decimals < EXACT_POWERS_OF_TEN.len() {
        let magnitude = mantissa as f64 / EXACT_POWERS_OF_TEN[decimals];
        return Some(if negative { -magnitude } else { magnitude });
    }
    std::str::from_utf8(field).ok()?.parse::<f64>().ok()
}

/// The highest grade a qrels line may carry. Per-grade counts are arrays
/// indexed by grade and the ideal rankings walk them grade by grade, so a
/// topic costs time and memory in its highest grade; this bound keeps a
/// hostile file from asking for gigabytes (trec_eval allocates whatever the
/// grade says).
pub const MAX_QRELS_GRADE: Grade = 65_535;

/// Parses a qrels file held in `buf`.
pub fn parse_qrels<'a>(path: &Path, buf: &'a [u8]) -> Result<Qrels<'a>, TrecError> {
    let mut topics = Interner::new();
    let mut items = Vec::with_capacity(buf.len() / 18);
    for_each_line::<4>(buf, |line_no, f, n| {
        if n != 4 {
            let found = if n > 4 { "more".to_string() } else { n.to_string() };
            return Err(TrecError::line(
                path,
                line_no,
                format!("expected 4 columns \"qid iter docno rel\", found {found}"),
            ));
        }
        let grade = parse_grade(f[3])
            .ok_or_else(|| TrecError::line(path, line_no, format!("relevance {:?} is not an integer", show(f[3]))))?;
        if grade > MAX_QRELS_GRADE {
            return Err(TrecError::line(
                path,
                line_no,
                format!("relevance {} is above {MAX_QRELS_GRADE} (trec_eval documents grades below 128)", show(f[3])),
            ));
        }
        topics.intern(f[0], items.len());
        items.push(Judgment { doc: f[2], key: doc_key(f[2]), grade });
        Ok(())
    })?;
    let mut qrels = Grouped::new(topics, items);
    for t in 0..qrels.names.len() {
        let judged = qrels.topic_mut(t);
        judged.sort_unstable_by(|a, b| a.key.cmp(&b.key).then_with(|| a.doc.cmp(b.doc)));
        if let Some(w) = judged.windows(2).find(|w| w[0].key == w[1].key && w[0].doc == w[1].doc) {
            let (first, repeat) = in_file_order(w[0].doc, w[1].doc);
            return Err(TrecError::line(
                path,
                line_of(buf, repeat),
                format!(
                    "document {:?} judged twice for topic {:?} (first on line {})",
                    show(repeat),
                    show(qrels.names[t]),
                    line_of(buf, first)
                ),
            ));
        }
    }
    Ok(qrels)
}

/// Parses a run file held in `buf`.
pub fn parse_run<'a>(path: &Path, buf: &'a [u8]) -> Result<Run<'a>, TrecError> {
    let mut topics = Interner::new();
    let mut items = Vec::with_capacity(buf.len() / 30);
    let mut run_id: &[u8] = b"";
    for_each_line::<6>(buf, |line_no, f, n| {
        if n < 6 {
            return Err(TrecError::line(
                path,
                line_no,
                format!("expected 6 columns \"qid iter docno rank score run_id\", found {n}"),
            ));
        }
        let score = parse_score(f[4])
            .filter(|s| s.is_finite())
            .ok_or_else(|| TrecError::line(path, line_no, format!("score {:?} is not a finite number", show(f[4]))))?;
        // trec_eval compares scores with `<` and `>`, for which -0 equals 0;
        // adding +0.0 turns -0.0 into 0.0 so the total order used below agrees.
        let score = score + 0.0;
        topics.intern(f[0], items.len());
        items.push(Retrieved { doc: f[2], key: doc_key(f[2]), score });
        run_id = f[5];
        Ok(())
    })?;
    let mut grouped = Grouped::new(topics, items);
    let mut duplicates = Vec::new();
    for t in 0..grouped.names.len() {
        let results = grouped.topic_mut(t);
        // Duplicates make the ranking ambiguous; trec_eval refuses them too.
        results.sort_unstable_by(|a, b| a.key.cmp(&b.key).then_with(|| a.doc.cmp(b.doc)));
        for w in results.windows(2).filter(|w| w[0].key == w[1].key && w[0].doc == w[1].doc) {
            let (first, repeat) = in_file_order(w[0].doc, w[1].doc);
            duplicates.push(Duplicate { topic: t, first, repeat });
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
    fn short_eq_is_equality() {
        let ids: [&[u8]; 7] = [b"", b"1", b"12", b"123456789", b"123456780", b"12345678", b"abcdefghijklmnopq"];
        for a in ids {
            for b in ids {
                assert_eq!(short_eq(a, b), a == b, "{a:?} {b:?}");
            }
        }
    }

    #[test]
    fn fast_score_parse_agrees_with_std() {
        let cases = [
            "0",
            "1",
            "-1",
            "+2.5",
            "0.1",
            "0.30",
            "1.98",
            "-0.00",
            "123456789012345",
            "1234567890.12345",
            "0.000000000000001",
            "1e-3",
            "1.5E+0",
            "10e-1",
            "1.",
            ".5",
            "-.5",
            "12345678901234567",
            "inf",
        ];
        for c in cases {
            let ours = parse_score(c.as_bytes());
            let std = c.parse::<f64>().ok();
            assert_eq!(ours.map(f64::to_bits), std.map(f64::to_bits), "{c}");
        }
        assert_eq!(parse_score(b"1.2.3"), None);
        assert_eq!(parse_score(b"-"), None);
        assert_eq!(parse_score(b"."), None);
    }

    #[test]
    fn qrels_group_and_sort() {
        let buf = b"2 0 b 1\n1 0 z -1\n2\t0  a 3\n";
        let q = parse_qrels(p(), buf).unwrap();
        assert_eq!(q.names, [&b"2"[..], b"1"]);
        assert_eq!(Qrels::find(q.topic(0), doc_key(b"a"), b"a"), Some(3));
        assert_eq!(Qrels::find(q.topic(0), doc_key(b"b"), b"b"), Some(1));
        assert_eq!(Qrels::find(q.topic(0), doc_key(b"c"), b"c"), None);
        assert_eq!(q.topic(0).len(), 2);
        assert_eq!(q.topic(1)[0].grade, -1);
    }

    #[test]
    fn errors_name_the_line() {
        let err = parse_qrels(p(), b"1 0 a 1\n1 0 b\n").unwrap_err().to_string();
        assert_eq!(err, "x:2: expected 4 columns \"qid iter docno rel\", found 3");
        let err = parse_qrels(p(), b"1 0 a 1\n\n1 0 a 2\n").unwrap_err().to_string();
        assert!(err.starts_with("x:3: document \"a\" judged twice"), "{err}");
        let err = parse_qrels(p(), b"1 0 a 65536\n").unwrap_err().to_string();
        assert!(err.contains("x:1: relevance 65536 is above 65535"), "{err}");
        assert!(parse_qrels(p(), b"1 0 a 65535\n").is_ok());
        let err = parse_qrels(p(), b"1 0 a 99999999999999999999999\n").unwrap_err().to_string();
        assert!(err.contains("x:1: relevance 99999999999999999999999 is above 65535"), "{err}");
        // Read as trec_eval's atol reads them: any number of digits, and
        // a negative grade below i32 is as negative as any.
        for (text, grade) in [("00000000001", 1), ("-00000000000", 0), ("-99999999999", Grade::MIN)] {
            let line = format!("1 0 a {text}\n");
            let qrels = parse_qrels(p(), line.as_bytes()).unwrap();
            assert_eq!(qrels.items[0].grade, grade, "{text}");
        }
        for bad in ["1x", "-", "+", "1.0", "--1"] {
            assert!(parse_qrels(p(), format!("1 0 a {bad}\n").as_bytes()).is_err(), "{bad}");
        }
        let err = parse_qrels(p(), b"1 0 a high\n").unwrap_err().to_string();
        assert!(err.contains("x:1: relevance \"high\""), "{err}");
        let err = parse_run(p(), b"1 Q0 a 1 nan r\n").unwrap_err().to_string();
        assert!(err.contains("x:1: score \"nan\""), "{err}");
        let buf = b"1 Q0 a 1 2 r\n1 Q0 a 2 1 r\n";
        let run = parse_run(p(), buf).unwrap();
        let err = run.duplicates[0].to_error(p(), buf, b"1").to_string();
        assert!(err.starts_with("x:2: document \"a\" retrieved twice"), "{err}");
        let err = parse_run(p(), b"1 Q0 a 1 2\n").unwrap_err().to_string();
        assert!(err.contains("found 5"), "{err}");
    }
}
