//! Expiry slots: lists filed by the slot of their newest event time, so
//! that a tick finds the lists due without walking them all.
//!
//! In the store: a new list is filed when it is stored
//! ([`ListStore::store_at`]); [`ListStore::due`], called by the assembler
//! for event-time expiry of open lists and for the end of final lists'
//! horizon, takes the slots up to a time, files again the lists whose
//! newest event has moved on, and drops the entries of lists gone.

use super::layout::key_at;
use super::{ListStore, hash_of_low, prefetch};
use crate::assemble::ListKey;
use std::collections::BTreeMap;

/// Width of an expiry slot, in event-time milliseconds: lists are filed
/// by the slot of their newest event (see [`ListStore::due`]).
pub(in crate::assemble) const EXPIRY_SLOT_MS: i64 = 1_000;

fn slot_of(ms: i64) -> i64 {
    ms.div_euclid(EXPIRY_SLOT_MS)
}

impl ListStore {
    pub(super) fn file(&mut self, key_low: u32, last_event_ms: i64) {
        let slot = slot_of(last_event_ms);
        // New lists nearly always belong to the newest slot: its entry is
        // at the end of the map, reached without comparing keys.
        match self.expiry.last_entry() {
            Some(mut newest) if *newest.key() == slot => newest.get_mut().push(key_low),
            _ => self.expiry.entry(slot).or_default().push(key_low),
        }
        self.expiry_entries += 1;
        if self.expiry_entries > 2 * self.index.len() + 1024 {
            self.refile_all();
        }
    }

    /// Files every list once, dropping the entries of lists that are gone.
    fn refile_all(&mut self) {
        let mut expiry: BTreeMap<i64, Vec<u32>> = BTreeMap::new();
        for start in self.live_runs() {
            let s = start as usize;
            expiry.entry(slot_of(self.words[s + 2] as i64)).or_default().push(self.words[s] as u32);
        }
        self.expiry_entries = self.index.len();
        self.expiry = expiry;
    }

    /// The keys of the lists whose newest event is at or before
    /// `through_ms`, found through the expiry slots up to its slot rather
    /// than by a walk of every list. The lists stay stored.
    pub fn due(&mut self, through_ms: i64) -> Vec<ListKey> {
        let last_slot = slot_of(through_ms);
        let mut refile: Vec<(i64, u32)> = Vec::new();
        let mut lows = std::mem::take(&mut self.due_lows);
        lows.clear();
        while let Some(entry) = self.expiry.first_entry() {
            if *entry.key() > last_slot {
                break;
            }
            lows.extend(entry.remove());
        }
        self.expiry_entries -= lows.len();
        // Nearly every entry is a due list: sized once rather than grown.
        let mut due = Vec::with_capacity(lows.len());
        // The lists' runs are cold (their last event was a gap ago): their
        // first lines are requested all at once, so that the misses overlap
        // instead of stalling one after another in the loop below (about
        // two thirds of this function's time in a profile), and the list's
        // next lines too, for the `take` that follows.
        for &low in &lows {
            for &start in self.index.iter_hash(hash_of_low(low)) {
                for line in 0..4 {
                    prefetch(&self.words, start as usize + 8 * line);
                }
            }
        }
        for &low in &lows {
            for &start in self.index.iter_hash(hash_of_low(low)) {
                let s = start as usize;
                if self.words[s] as u32 != low {
                    continue;
                }
                let last_event_ms = self.words[s + 2] as i64;
                if last_event_ms <= through_ms {
                    due.push(key_at(&self.words, start));
                } else {
                    refile.push((slot_of(last_event_ms), low));
                }
            }
        }
        self.due_lows = lows;
        // A list filed twice (its key's low bits shared, or its key reused
        // after the gap) is reported and refiled once.
        due.sort_unstable();
        due.dedup();
        refile.sort_unstable();
        refile.dedup();
        self.expiry_entries += refile.len();
        for (slot, low) in refile {
            self.expiry.entry(slot).or_default().push(low);
        }
        due
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::OpenList;
    use rustc_hash::FxHashMap;

    /// `due` against a model: lists created, updated to later event times,
    /// removed, their keys reused and sharing their low 32 bits (one expiry
    /// entry finds several lists); due lists are removed, as the assembler
    /// does. And the entries of removed lists do not pile up.
    #[test]
    fn due_finds_exactly_the_lists_at_or_before_a_time() {
        let mut store = ListStore::default();
        let mut rng = rankpulse_testkit::Rng::new(7);
        let mut model: FxHashMap<ListKey, i64> = FxHashMap::default();
        let mut clock = 0i64;
        for step in 0..200_000u64 {
            // 40 low halves × 100 high halves: keys share their low bits.
            let key = (u128::from(rng.below(100)) << 64) | u128::from(rng.below(40) as u32 | 0xabcd_0000);
            match rng.below(10) {
                0..=5 => {
                    let mut l = OpenList::default();
                    store.load(key, &mut l);
                    // Event times a little out of order, as in a stream.
                    let t = clock + rng.below(5_000) as i64 - 2_000;
                    l.last_event_ms = l.last_event_ms.max(t);
                    if !model.contains_key(&key) {
                        l = OpenList { last_event_ms: t, ..OpenList::default() };
                    }
                    store.store(key, &mut l).unwrap();
                    model.insert(key, l.last_event_ms);
                }
                6 => {
                    assert_eq!(store.remove(key), model.remove(&key).is_some());
                }
                _ => {
                    clock += rng.below(700) as i64;
                    let through = clock - 3_000;
                    let mut want: Vec<ListKey> =
                        model.iter().filter(|(_, t)| **t <= through).map(|(k, _)| *k).collect();
                    want.sort_unstable();
                    assert_eq!(store.due(through), want, "step {step}");
                    for k in want {
                        assert!(store.remove(k));
                        model.remove(&k);
                    }
                }
            }
            assert!(
                store.expiry_entries <= 2 * store.len() + 1024 + 40,
                "step {step}: {} entries",
                store.expiry_entries
            );
        }
        // Event time standing still while lists come and go: still bounded.
        for i in 0..100_000u64 {
            let key = u128::from(i) << 64 | u128::from(i as u32);
            store.store(key, &mut OpenList { last_event_ms: clock, ..OpenList::default() }).unwrap();
            store.remove(key);
        }
        assert!(store.expiry_entries <= 2 * store.len() + 1024 + 40);
    }
}
