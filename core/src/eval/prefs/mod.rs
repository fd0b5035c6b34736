//! trec_eval's preference measures (`-R prefs` / `-R qrels_prefs`,
//! `-m all_prefs`): judgments that say which document a user prefers to
//! which, and how many of those preferences a ranking fulfils.
//!
//! One module per step: `parse` reads and checks a judgments file into
//! [`PrefsQrels`]; `evaluate` counts, topic by topic, the preferences a
//! ranking fulfils and derives the measures ([`evaluate_topic`]); `summary`
//! sums the topics and prints the values as trec_eval does. `order` is the
//! preference graph of a JG with several JSGs, which `parse` checks for
//! contradictions and `evaluate` closes under transitivity.
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

mod evaluate;
mod order;
mod parse;
mod summary;

pub use evaluate::{Scratch, evaluate_topic};
pub use parse::{parse_prefs, parse_qrels_prefs};
pub use summary::{accumulate, format_value, is_count, summarize};

use super::trec::TrecError;
use std::ops::Range;
use std::path::PathBuf;
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
/// file buffer, so [`line_of`](super::trec::line_of) finds the line again.
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
    /// lines, from which [`Order`](order::Order) rebuilds its preferences), `levels` the
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

/// The end of the run of items from `start` on that satisfy `same`.
fn run_end<T>(items: &[T], start: usize, same: impl Fn(&T) -> bool) -> usize {
    items[start..].iter().position(|x| !same(x)).map_or(items.len(), |n| start + n)
}

/// The path the tests' judgments are read from: it only names them in errors.
#[cfg(test)]
fn p() -> &'static std::path::Path {
    std::path::Path::new("x")
}
