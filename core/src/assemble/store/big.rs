//! Big lists: a list too large for a compact run (a hot key, thousands of
//! results or judgments), kept indexed beside the arena.
//!
//! In the store: past [`BIG_RUN_WORDS`], scanning and shifting a run would
//! cost every event its whole size. A big list's run keeps only the header
//! (expiry, scans and compaction treat it like any other), its content is a
//! [`BigList`] with hashed indexes, and an event costs O(1)
//! ([`ListStore::big_event`], then the assembler's own edit).

use super::ListStore;
use super::layout::{RANDOMIZED_BIT, key_at};
use crate::assemble::{Applied, ListKey, OpenList, ShownDoc, Source};
use crate::metrics::Grade;
use rustc_hash::{FxHashMap, FxHashSet};

/// Runs larger than this (2 KiB) become [`BigList`]s: below it, the linear
/// scans of a run cost less than hashing would.
pub(super) const BIG_RUN_WORDS: usize = 256;

/// What a big list takes no more of: events (`input.max_events_per_list`)
/// and, for an impression, results held (`input.max_results_per_list`).
#[derive(Debug, Clone, Copy)]
pub struct ListBounds {
    pub events: usize,
    pub results: usize,
}

/// A list too large for a compact run, indexed so that an event costs O(1)
/// in its size: positions, judged documents and event ids are hashed.
#[derive(Debug, Clone, Default)]
pub struct BigList {
    shown: Vec<ShownDoc>,
    /// Index into `shown` by position.
    positions: FxHashMap<u32, u32>,
    judged: Vec<(u64, Grade)>,
    /// Index into `judged` by document.
    judged_at: FxHashMap<u64, u32>,
    pub(super) event_ids: FxHashSet<u64>,
    pub(super) offsets: Vec<Source>,
}

impl BigList {
    pub(super) fn of(list: &OpenList) -> BigList {
        let mut big = BigList {
            shown: Vec::with_capacity(list.shown.len()),
            judged: Vec::with_capacity(list.judged.len()),
            offsets: list.offsets.clone(),
            ..BigList::default()
        };
        big.event_ids.extend(&list.event_ids);
        for s in &list.shown {
            // A list's own results hold distinct positions.
            big.show(s.doc, s.position, s.score, s.team);
        }
        for &(doc, grade) in &list.judged {
            big.judge(doc, grade);
        }
        big
    }

    pub(super) fn fill(&self, into: &mut OpenList) {
        into.shown.clear();
        into.shown.extend_from_slice(&self.shown);
        into.judged.clear();
        into.judged.extend_from_slice(&self.judged);
        into.event_ids.clear();
        into.event_ids.extend(&self.event_ids);
        // The set's order depends on its history: sorted, a checkpoint of
        // the same list is the same bytes.
        into.event_ids.sort_unstable();
        into.offsets.clear();
        into.offsets.extend_from_slice(&self.offsets);
    }

    /// A result at a position not taken yet (the first document seen at a
    /// position keeps it). False when another document holds the position.
    pub fn show(&mut self, doc: u64, position: u32, score: f64, team: u8) -> bool {
        match self.positions.entry(position) {
            std::collections::hash_map::Entry::Occupied(at) => self.shown[*at.get() as usize].doc == doc,
            std::collections::hash_map::Entry::Vacant(slot) => {
                slot.insert(self.shown.len() as u32);
                self.shown.push(ShownDoc { doc, position, score, team });
                true
            }
        }
    }

    /// The highest grade per document.
    pub fn judge(&mut self, doc: u64, grade: Grade) {
        match self.judged_at.get(&doc) {
            Some(&i) => {
                let g = &mut self.judged[i as usize].1;
                *g = (*g).max(grade);
            }
            None => {
                self.judged_at.insert(doc, self.judged.len() as u32);
                self.judged.push((doc, grade));
            }
        }
    }

    fn add_source(&mut self, src: Source) {
        match self.offsets.iter_mut().find(|o| o.id == src.id) {
            Some(o) => o.offset = o.offset.min(src.offset),
            None => self.offsets.push(src),
        }
    }
}

impl ListStore {
    /// Whether the run at `start` is a [`BigList`]'s header: no counts (a
    /// list the assembler made has an event id at least), and listed.
    pub(super) fn is_big(&self, start: u32) -> bool {
        // Counts all zero; the randomized flag is the list's, big or not.
        self.words[start as usize + 6] & 0x00ff_ffff_ffff_ffff & !RANDOMIZED_BIT == 0
            && !self.big.is_empty()
            && self.big.contains_key(&key_at(&self.words, start))
    }

    /// Bookkeeping of one event for the [`BigList`] at `start` (from
    /// [`Self::locate`]): a duplicate or one too many changes nothing;
    /// otherwise the event id, source and times are recorded and the list
    /// is handed back for the event's own edit. `None`: not a big list.
    pub fn big_event(
        &mut self,
        start: u32,
        event: u64,
        ts_ms: i64,
        arrival_ms: i64,
        source: Option<Source>,
        bounds: ListBounds,
    ) -> Option<Result<&mut BigList, Applied>> {
        if !self.is_big(start) {
            return None;
        }
        let s = start as usize;
        let key = key_at(&self.words, start);
        let big = self.big.get_mut(&key)?;
        if big.event_ids.contains(&event) {
            return Some(Err(Applied::Duplicate));
        }
        // An impression finding the list holding `max_shown` results
        // already is refused whole: a list ends with fewer than
        // `max_shown + input.max_results` of them.
        if big.event_ids.len() >= bounds.events || big.shown.len() >= bounds.results {
            return Some(Err(Applied::TooLarge));
        }
        big.event_ids.insert(event);
        if let Some(src) = source {
            big.add_source(src);
        }
        self.words[s + 2] = (self.words[s + 2] as i64).max(ts_ms) as u64;
        self.words[s + 3] = (self.words[s + 3] as i64).max(arrival_ms) as u64;
        Some(Ok(big))
    }

    /// The [`BigList`] of `key`, if it is one.
    pub fn big_mut(&mut self, key: ListKey) -> Option<&mut BigList> {
        self.big.get_mut(&key)
    }
}

#[cfg(test)]
mod tests {
    use super::super::layout::HEADER_WORDS;
    use super::super::testing::{list, same};
    use super::*;
    use crate::assemble::store::JudgmentEdit;

    /// Past the compact form's size, a list is a [`BigList`]: stored,
    /// loaded, judged in place and removed like any other, whatever its size.
    #[test]
    fn a_large_list_becomes_a_big_list_and_round_trips() {
        let mut store = ListStore::default();
        let mut l = list(3, 2_000, |i| i as u32 * 2 + 1, true, 70_000);
        l.offsets = vec![Source { id: 4, offset: 77 }];
        store.store(9, &mut l).unwrap();
        let mut small = list(4, 3, |i| i as u32 + 1, false, 1);
        store.store(10, &mut small).unwrap();
        let start = store.locate(9).unwrap();
        assert!(store.is_big(start) && !store.is_big(store.locate(10).unwrap()));
        assert_eq!(store.run_size(start), HEADER_WORDS);
        let mut out = OpenList::default();
        assert!(store.load(9, &mut out));
        assert!(same(&out, &l));
        let e = JudgmentEdit {
            doc: l.judged[5].0,
            grade: 30,
            event: 12345,
            max_events: usize::MAX,
            ts_ms: l.last_event_ms + 1,
            arrival_ms: 0,
            source: Some(Source { id: 4, offset: 3 }),
        };
        assert_eq!(store.refusal(start, e.event, usize::MAX), None);
        assert_eq!(store.judge_at(start, &e), Some(Applied::Added));
        assert_eq!(store.refusal(start, e.event, usize::MAX), Some(Applied::Duplicate));
        assert_eq!(store.refusal(start, l.event_ids[9], usize::MAX), Some(Applied::Duplicate));
        assert_eq!(store.judge_at(start, &e), Some(Applied::Duplicate));
        let full = JudgmentEdit { event: 999, max_events: l.event_ids.len() + 1, ..e };
        assert_eq!(store.refusal(start, 999, full.max_events), Some(Applied::TooLarge));
        assert_eq!(store.refusal(start, 999, full.max_events + 1), None);
        assert_eq!(store.judge_at(start, &full), Some(Applied::TooLarge));
        // A compact list answers the same from its run.
        let small_at = store.locate(10).unwrap();
        assert_eq!(store.refusal(small_at, small.event_ids[1], usize::MAX), Some(Applied::Duplicate));
        assert_eq!(store.refusal(small_at, 999, small.event_ids.len()), Some(Applied::TooLarge));
        assert_eq!(store.refusal(small_at, 999, small.event_ids.len() + 1), None);
        assert!(store.load(9, &mut out));
        assert_eq!(out.judged[5].1, 30);
        assert_eq!(out.last_event_ms, l.last_event_ms + 1);
        assert_eq!(out.offsets, [Source { id: 4, offset: 3 }]);
        assert_eq!(store.sources().count(), 1 + small.offsets.len());
        assert!(store.take(9, &mut out) && store.big.is_empty());
        assert!(store.load(10, &mut out) && same(&out, &small));
    }
}
