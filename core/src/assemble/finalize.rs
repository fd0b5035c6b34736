//! Finalizing: an open list's working form into the form it is scored in.
//!
//! In the assembly flow: when a list closes (`close`), or a final list
//! leaves and re-enters the windows for late events (`late`), `finalize`
//! fills the assembler's reused [`FinalBuffers`] from its [`OpenList`], and
//! the [`FinalList`] viewing them goes to the sink in a
//! [`Notice`](super::Notice), on to the metric engine.

use super::dimensions::{Dimensions, DimsId};
use super::list::{ListKey, OpenList, RESULTS_UNKNOWN, impression_time, session_of, team_of};
use crate::interleave::Team;
use crate::metrics::Grade;
use rustc_hash::{FxHashMap, FxHashSet};
use std::sync::Arc;

/// A list that will change no more, ready for the metric engine. It
/// borrows the assembler's buffers, reused for every list: finalizing
/// allocates nothing (three `Vec`s and a reference count per list were
/// 5% of the pipeline in a profile).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinalList<'a> {
    /// The list's configured dimension values, in `dimensions.labels` order.
    pub dims: &'a Arc<[String]>,
    /// Their id in this assembler, and the hash of the list's session: a
    /// session's lists are one cluster of the session-clustered statistics.
    pub dims_id: DimsId,
    pub session: u64,
    /// Impression event time (ms): decides the time bucket.
    pub impression_ms: i64,
    /// Grades of the shown results in position order (unjudged = 0).
    pub shown: &'a [Grade],
    /// Model scores aligned with `shown`, when every result has one.
    pub scores: Option<&'a [f64]>,
    /// Interleaving teams aligned with `shown`, when any result has one.
    pub teams: Option<&'a [Option<Team>]>,
    /// The top results were shown in a uniformly random order.
    pub randomized: bool,
    /// Decided by an impression that did not say what it showed, and no
    /// result reached it: not scored (`no_results_known`).
    pub results_unknown: bool,
    /// Grades of every judged document, shown or not.
    pub judged: &'a [Grade],
}

/// The buffers a [`FinalList`] borrows, filled by [`finalize`].
#[derive(Debug, Default)]
pub(super) struct FinalBuffers {
    dims: DimsId,
    impression_ms: i64,
    shown: Vec<Grade>,
    scores: Vec<f64>,
    /// Whether every shown result had a score.
    scored: bool,
    teams: Vec<Option<Team>>,
    /// Whether any shown result had a team.
    interleaved: bool,
    randomized: bool,
    results_unknown: bool,
    judged: Vec<Grade>,
    /// For lists past [`LINEAR_MAX`]: documents seen, grade per document.
    seen: FxHashSet<u64>,
    grades: FxHashMap<u64, Grade>,
}

/// Up to this many shown results or judged documents, finalizing looks
/// documents up by linear scans (quadratic, but faster than hashing for the
/// lists of a search page); past it, through hash tables, so that a list of
/// n results and judgments is finalized in O(n log n) (the sort by position).
const LINEAR_MAX: usize = 32;

impl FinalBuffers {
    pub(super) fn view<'a>(&'a self, dimensions: &'a Dimensions, key: ListKey) -> Option<FinalList<'a>> {
        Some(FinalList {
            dims: dimensions.values().get(self.dims as usize)?,
            dims_id: self.dims,
            session: session_of(key),
            impression_ms: self.impression_ms,
            shown: &self.shown,
            scores: self.scored.then_some(&self.scores[..]),
            teams: self.interleaved.then_some(&self.teams[..]),
            randomized: self.randomized,
            results_unknown: self.results_unknown,
            judged: &self.judged,
        })
    }
}

/// Fills `into` with what `list` is scored from; false when nothing was
/// shown (an orphan).
pub(super) fn finalize(list: &mut OpenList, into: &mut FinalBuffers) -> bool {
    let Some((rank, dims)) = list.impression else { return false };
    into.dims = dims;
    into.impression_ms = impression_time(rank);
    into.randomized = list.randomized;
    into.results_unknown = rank & RESULTS_UNKNOWN != 0 && list.shown.is_empty();
    // In place: the order of `shown` means nothing else, and a final list
    // kept for late judgments is finalized again from the same state.
    list.shown.sort_unstable_by_key(|s| s.position);
    into.shown.clear();
    into.scores.clear();
    into.scored = true;
    into.teams.clear();
    into.interleaved = false;
    let linear = list.shown.len() <= LINEAR_MAX && list.judged.len() <= LINEAR_MAX;
    if !linear {
        into.seen.clear();
        into.grades.clear();
        into.grades.extend(list.judged.iter().copied());
    }
    for (i, s) in list.shown.iter().enumerate() {
        // A document shown at two positions counts at its first.
        let (first, grade) = if linear {
            (
                !list.shown[..i].iter().any(|earlier| earlier.doc == s.doc),
                list.judged.iter().find(|(d, _)| *d == s.doc).map_or(0, |(_, g)| *g),
            )
        } else {
            (into.seen.insert(s.doc), into.grades.get(&s.doc).copied().unwrap_or(0))
        };
        if !first {
            continue;
        }
        into.shown.push(grade);
        into.scored &= !s.score.is_nan();
        into.scores.push(s.score);
        into.interleaved |= s.team != 0;
        into.teams.push(team_of(s.team));
    }
    into.judged.clear();
    into.judged.extend(list.judged.iter().map(|(_, g)| *g));
    true
}
