//! Assembly: typed events → open lists → finalized lists.
//!
//! Second stage of the stream. A list is keyed by (session_id, query_id);
//! its impressions (pages, re-deliveries) merge by position, its judgments
//! keep the highest grade per document, and an event id seen twice counts
//! once. Judgments may arrive before their impression and wait for it.
//!
//! A list is final when no event of it arrived for `session.gap` in event
//! time: when the watermark passes its last event plus the gap, when an event of the same key arrives more than a gap after
//! the list's last event (a new list starts), or, for idle partitions, when
//! no event of it arrived for a gap of processing time (checked every
//! eighth of a gap, at most every 5 s: that check walks every list, while
//! event-time expiry finds the lists due by their expiry slot). Everything open is
//! finalized at shutdown and at the end of a replay.
//!
//! The watermark is the oldest of the newest event times of the shard's
//! lanes (its input topics): impressions and judgments of one partition are
//! consumed at different speeds, above all when catching up after a
//! restart, and a list must not close because the impressions ran ahead of
//! the judgments that belong to it. The daemon declares its lanes (the
//! topics assigned for the partition) up front: until each has delivered an
//! event, nothing closes on event time.
//!
//! Open lists are compact: keys and document ids are 128- and 64-bit
//! hashes, never copies of the strings, dimension values are interned, and
//! a resting list is one run of words in a per-shard arena ([`store`]).
//!
//! # The rules, one module each, in the order they run per event
//!
//! Every rule reads and moves the same state, held by the [`Assembler`]
//! (one per shard): the open lists, the final lists kept for late events,
//! the lanes and the watermark. [`Assembler::ingest`] takes one event
//! through them in this order:
//!
//! 1. `ingest`: the event's list is located by its key (`list`: the key,
//!    the working form of a list and what an event does to it). An event
//!    more than a gap after its open list closes that list first
//!    (`close`), unless it repeats one of the list's events.
//! 2. `late`: an event whose key has no open list, within a gap of a final
//!    list still kept (and `late.horizon`), goes to that list under
//!    `late.policy`.
//! 3. `ingest` again: any other event goes to its open list, or starts
//!    one (unless it is a re-delivery the final list took), after evicting
//!    the oldest lists when `session.max_open_lists` are open (`close`);
//!    within the per-list bounds (`limits`); an impression's dimension
//!    values interned within the instance's budget (`dimensions`).
//! 4. `watermark`: an event taken moves its lane's time, and the watermark.
//! 5. `close`: each time the watermark has moved on by an expiry slot, the
//!    lists whose gap has elapsed close (`finalize` turns each into a
//!    [`FinalList`], reported as a [`Notice`] (`notice`) like everything
//!    else worth counting), and final lists past the horizon are
//!    forgotten. Ticks ([`Assembler::finalize_expired`] with the clock) add
//!    expiry by processing time.
//!
//! `checkpoint` takes and restores the whole state; the lists themselves
//! rest in [`store`].

mod checkpoint;
mod close;
mod dimensions;
mod finalize;
mod ingest;
mod late;
mod limits;
mod list;
mod notice;
pub mod store;
#[cfg(test)]
mod testing;
mod watermark;

pub use checkpoint::{AssemblerSnapshot, AssemblerState};
pub use dimensions::{DimensionBudget, Dimensions, DimsId, MISSING_DIMENSION, OTHER_DIMENSION};
pub use finalize::FinalList;
pub use limits::{AssemblyLimits, LatePolicy};
pub use list::{ListKey, OpenList, ShownDoc, Source, list_key, session_of};
pub use notice::{Applied, Notice};

use finalize::FinalBuffers;
use rustc_hash::FxHashSet;
use std::sync::{Arc, Mutex};
use store::ListStore;

/// The assembly stage for one shard of the key space.
#[derive(Debug)]
pub struct Assembler {
    pub limits: AssemblyLimits,
    pub dimensions: Dimensions,
    open_lists: ListStore,
    /// Final lists still inside the late horizon (for late judgments).
    closed_lists: ListStore,
    /// The list being edited: reused buffers, so that an event allocates
    /// nothing once they have grown to the usual list size.
    /// Boxed: handing it out and back moves a pointer, not the ~130-byte
    /// struct, several times per event.
    scratch: Option<Box<OpenList>>,
    /// What a final list is scored from, and for an amended list what it
    /// was scored from before (reused, like `scratch`).
    finals: Box<[FinalBuffers; 2]>,
    /// Newest event time per lane (input topic).
    lanes: Vec<(String, i64)>,
    /// The oldest of the lanes' newest event times.
    watermark_ms: i64,
    /// Set when restored from a checkpoint: processing-time expiry waits
    /// until input flows again, or restored lists would all expire while
    /// the consumer is still rejoining its group.
    clock_paused: bool,
    /// Processing time of the last walk of every list for processing-time
    /// expiry (idle partitions): it runs at most every
    /// `processing_scan_interval` (`close`), not every tick.
    last_scan_ms: Option<i64>,
    /// Watermark at which [`Assembler::ingest`] next finalizes the lists
    /// whose gap has elapsed in event time. Event time closes a list as
    /// soon as the watermark passes it, whoever calls and however fast the
    /// input is read: a consumer catching up on a backlog (event time far
    /// ahead of the clock) would otherwise hold every list it read between
    /// two ticks open, and the outcome would depend on the tick.
    next_sweep_ms: i64,
    /// Final lists withdrawn from the windows for late judgments, put back
    /// at the next sweep (see [`Notice::Withdrawn`]).
    withdrawn: FxHashSet<ListKey>,
}

impl Assembler {
    pub fn new(gap_ms: i64, dimension_labels: Vec<String>) -> Self {
        Self::with_limits(AssemblyLimits::gap_only(gap_ms), dimension_labels, None)
    }

    pub fn with_limits(
        limits: AssemblyLimits,
        dimension_labels: Vec<String>,
        budget: Option<Arc<Mutex<DimensionBudget>>>,
    ) -> Self {
        Assembler {
            limits,
            dimensions: Dimensions::new(dimension_labels).with_budget(budget),
            open_lists: ListStore::default(),
            closed_lists: ListStore::default(),
            scratch: Some(Box::default()),
            finals: Box::default(),
            lanes: Vec::new(),
            watermark_ms: i64::MIN,
            clock_paused: false,
            last_scan_ms: None,
            next_sweep_ms: i64::MIN,
            withdrawn: FxHashSet::default(),
        }
    }

    pub fn open_lists(&self) -> usize {
        self.open_lists.len()
    }

    pub fn closed_lists(&self) -> usize {
        self.closed_lists.len()
    }

    /// For each source, the smallest offset still held by an open list:
    /// the at-least-once commit point is the lesser of this and the next
    /// offset to consume.
    pub fn min_open_offsets(&self) -> Vec<Source> {
        let mut min = Vec::new();
        for o in self.open_lists.sources() {
            store::fold_source(&mut min, o);
        }
        min
    }

    /// [`Self::min_open_offsets`] a slice of `lists` at a time, so that a
    /// million open lists do not hold the consumer at once: `None` until
    /// the walk is through, then never above what `min_open_offsets` would
    /// say at that moment (see [`store::ListStore::scan_sources`]).
    pub fn scan_min_open_offsets(&mut self, lists: usize) -> Option<Vec<Source>> {
        self.open_lists.scan_sources(lists)
    }
}
