//! What the assembler reports: a [`Notice`] to its sink for each list that
//! closes (or leaves and re-enters the windows) and for each thing worth
//! counting, and an [`Applied`] for each event.
//!
//! In the assembly flow: the last step of every rule. The pipeline passes
//! the final lists on to the metric engine and turns the rest into the
//! counters of `/metrics`.

use super::finalize::FinalList;

/// What the assembler hands to the metric engine and the counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Notice<'a> {
    /// A list became final (its gap elapsed, or shutdown).
    Final(FinalList<'a>),
    /// Finalized before its gap because `session.max_open_lists` was reached.
    Evicted(FinalList<'a>),
    /// Only judgments arrived: nothing was shown, nothing to score.
    Orphan,
    /// A final list is about to take late judgments (`late.policy =
    /// "amend"`): take its values out of the windows. It comes back as
    /// [`Notice::Reinstated`] at the next sweep, with every late judgment
    /// that came meanwhile: a burst of them on one list costs two scorings,
    /// not two per judgment.
    Withdrawn(FinalList<'a>),
    /// A withdrawn list, with its late judgments: put its values back.
    Reinstated(FinalList<'a>),
    /// A late judgment was applied to a final list (`late.policy = "amend"`).
    LateAmended,
    /// A late judgment was ignored (`late.policy = "drop"`).
    LateDropped,
    /// The value of the dimension label at this index was replaced by
    /// `__other__` (`dimensions.max_values`).
    DimensionOverflow(usize),
    /// A new combination of dimension values past
    /// `dimensions.max_combinations`: every label became `__other__`.
    CombinationOverflow,
    /// A result was dropped: its list already shows another document at
    /// its position. Two searches under one key (a producer that sends no
    /// `query_id`, or reuses one) merge into one list; this says so.
    PositionTaken,
    /// An impression that defines its list disagrees on a label with the
    /// impression the list holds, both having sent it (a ranker or market
    /// changed mid-list, or two searches under one key; see
    /// [`Dimensions::disagree`](super::Dimensions::disagree)); the earliest
    /// impression's values are kept.
    DimensionConflict,
    /// A final list was forgotten before `late.horizon` to keep final lists
    /// within `session.max_open_lists`: a late judgment of it will start a
    /// list of its own (an orphan).
    Forgotten,
}

/// What the assembler reports about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Added to its list (a new list, or one still open).
    Added,
    /// Same event id already applied to this list.
    Duplicate,
    /// A judgment for a final list, handled by the late policy.
    Late,
    /// The list already holds `input.max_events_per_list` events: rejected.
    TooLarge,
}
