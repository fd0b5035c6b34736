//! The arena: run sizes, spare words for lists that grow, free runs reused
//! by size, and compaction.
//!
//! In the store: every write asks here for a run of the size its list
//! needs ([`ListStore::store_at`], and [`ListStore::judge_at`] when a
//! judgment does not fit where the list rests); every removal frees its
//! run; once half the arena is free, compaction slides every run down,
//! moving the index's starts and the walk's cursor (`sources`) with them.
//! Scans walk the arena in order, run after run (`live_runs`).

use super::layout::{Counts, FREE_RUN, SLACK_MASK, SLACK_SHIFT, key_at};
use super::{ListStore, TooLarge, hash_of};

/// Spare words given to a small run that has to move because it grew.
/// A list grows as its judgments come (a judged document, half a grade
/// word and an event id each, and a source word for the judgments' topic):
/// without room, every judgment moved the list to a new run (a free-list
/// pop, an index update, a release, and writes to cold memory), three moves
/// for three judgments in `bench kafka`. With room for two more judgments
/// it moves once. Lists that never grow (impressions alone) get none, so
/// the resident size per open list is unchanged for them.
const GROWTH_SLACK: usize = 6;
/// Largest run that gets spare words: past it runs use the size classes'
/// own rounding.
const SLACK_MAX_RUN: usize = 64;

/// The spare words a run of `size` words holding `needed` records (only
/// small runs have any; larger ones are their size class).
pub(super) fn slack_of(size: usize, needed: usize) -> usize {
    if needed <= SLACK_MAX_RUN { size - needed } else { 0 }
}

/// The run size (words) that holds `needed` words. Small runs fit exactly
/// (a list that grows moves to a run of its new size: a copy of a few
/// hundred bytes, cheaper than the memory rounding would hold for its whole
/// life); larger ones are sized to a sixteenth of their power of two,
/// bounding the waste to 12.5%.
pub(super) fn size_class(needed: usize) -> usize {
    if needed <= 64 { needed } else { needed.next_multiple_of(needed.next_power_of_two() / 16) }
}

/// Whether a run of `size` words can hold `needed` words of content, its
/// spare words absorbing the list's growth: it is their size class, or
/// small and larger by at most [`SLACK_MASK`] words.
pub(super) fn holds(size: usize, needed: usize) -> bool {
    size == size_class(needed) || (needed <= SLACK_MAX_RUN && (needed..=needed + SLACK_MASK as usize).contains(&size))
}

/// The size (words) of the run a list of `needed` words moves to from a
/// run of `old_size` words that does not hold it: its size class, with
/// [`GROWTH_SLACK`] spare words when it grew and is small.
pub(super) fn grown_size(old_size: usize, needed: usize) -> usize {
    let size = size_class(needed);
    if size > old_size && needed + GROWTH_SLACK <= SLACK_MAX_RUN { needed + GROWTH_SLACK } else { size }
}

/// The size (words) of the run that starts `run`: its content's size class,
/// or its content and its spare words.
pub(super) fn run_words(run: &[u64]) -> usize {
    let needed = Counts::read(run).words();
    match ((run[6] >> SLACK_SHIFT) & SLACK_MASK) as usize {
        0 => size_class(needed),
        slack => needed + slack,
    }
}

impl ListStore {
    /// The start of every list's run, in arena order (sequential reads,
    /// which the scans of every tick depend on).
    pub(super) fn live_runs(&self) -> impl Iterator<Item = u32> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            while at < self.words.len() {
                let start = at;
                let w = self.words[at + 6];
                if w & FREE_RUN != 0 {
                    at += (w & 0xffff_ffff) as usize;
                    continue;
                }
                at += run_words(&self.words[at..]);
                return Some(start as u32);
            }
            None
        })
    }

    /// Copies the run at `start` (`size` words) to a new run sized for
    /// `needed` words as [`Self::store_at`] sizes a list that grew, and
    /// points the index at it: the new start and size. `None`: the arena
    /// is full; nothing changed.
    pub(super) fn relocate(&mut self, start: u32, size: usize, needed: usize) -> Option<(usize, usize)> {
        let new_size = grown_size(size, needed);
        let to = self.allocate(new_size).ok()?;
        let from = start as usize;
        let used = Counts::read(&self.words[from..]).words();
        self.words.copy_within(from..from + used, to as usize);
        let key = key_at(&self.words, start);
        if let Some(slot) = self.index.find_mut(hash_of(key), |&s| s == start) {
            *slot = to;
        }
        self.release(start);
        Some((to as usize, new_size))
    }

    pub(super) fn run_size(&self, start: u32) -> usize {
        run_words(&self.words[start as usize..])
    }

    pub(super) fn allocate(&mut self, size: usize) -> Result<u32, TooLarge> {
        if let Some(start) = self.free.get_mut(&(size as u32)).and_then(Vec::pop) {
            self.free_words -= size;
            return Ok(start);
        }
        let start = self.words.len();
        if start + size > u32::MAX as usize {
            return Err(TooLarge);
        }
        self.words.resize(start + size, 0);
        Ok(start as u32)
    }

    pub(super) fn release(&mut self, start: u32) {
        let size = self.run_size(start);
        self.words[start as usize + 6] = FREE_RUN | size as u64;
        self.free.entry(size as u32).or_default().push(start);
        self.free_words += size;
    }

    /// Compacts once half the arena is free (after the caller is done with
    /// run starts: compaction moves every run).
    pub(super) fn maybe_compact(&mut self) {
        if self.free_words > self.words.len() / 2 && self.words.len() >= 1 << 16 {
            self.compact();
        }
    }

    /// Slides every run down to the front of the arena, in arena order.
    /// Amortized: it runs only once half the arena is free. The arena
    /// keeps its allocation: compacting into a new, smaller one made the
    /// lists that came next grow it again (a copy of every run, and fresh
    /// pages for the kernel to zero) once per compaction. Only an arena
    /// left more than four times larger than its lists is shrunk.
    fn compact(&mut self) {
        let ListStore { index, words, scan, .. } = self;
        let mut starts: Vec<&mut u32> = index.iter_mut().collect();
        starts.sort_unstable_by_key(|s| **s);
        let mut to = 0;
        // The walk in progress goes on from where its next run lands.
        let mut cursor = scan.as_ref().map(|s| s.cursor);
        for start in starts {
            let s = *start as usize;
            if cursor.is_some_and(|c| c <= s) {
                if let Some(scan) = scan.as_mut() {
                    scan.cursor = to;
                }
                cursor = None;
            }
            let size = run_words(&words[s..]);
            // Runs are visited in arena order, so `to <= s`: the run moves
            // down over free space or over itself.
            words.copy_within(s..s + size, to);
            *start = to as u32;
            to += size;
        }
        if cursor.is_some()
            && let Some(scan) = scan.as_mut()
        {
            scan.cursor = to;
        }
        words.truncate(to);
        if words.capacity() > 4 * to {
            words.shrink_to(2 * to);
        }
        self.free.clear();
        self.free_words = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{list, same};
    use super::*;
    use crate::assemble::{ListKey, OpenList, ShownDoc, Source};
    use rustc_hash::FxHashMap;

    #[test]
    fn growing_moving_removing_and_compacting_keep_every_list() {
        let mut store = ListStore::default();
        let mut rng = rankpulse_testkit::Rng::new(99);
        let mut model: FxHashMap<ListKey, OpenList> = FxHashMap::default();
        let mut out = OpenList::default();
        for step in 0..60_000u64 {
            let key = u128::from(rng.below(3_000)) * 0x1_0000_0001;
            match rng.below(5) {
                0 => {
                    assert_eq!(store.remove(key), model.remove(&key).is_some());
                }
                // Shrinking, by a little (into its spare words) or a lot.
                1 => {
                    if let Some(mut l) = model.remove(&key) {
                        let keep = if rng.below(2) == 0 { l.judged.len().saturating_sub(1) } else { 0 };
                        l.judged.truncate(keep);
                        l.event_ids.truncate(keep);
                        store.store(key, &mut l).unwrap();
                        model.insert(key, l);
                    }
                }
                _ => {
                    let mut l = model.remove(&key).unwrap_or_default();
                    let position = l.shown.len() as u32 + 1;
                    l.shown.push(ShownDoc { doc: step, position, score: step as f64, team: (step % 3) as u8 });
                    l.judged.push((step, 1));
                    l.event_ids.push(step);
                    l.last_event_ms = step as i64;
                    store.store(key, &mut l).unwrap();
                    model.insert(key, l);
                }
            }
        }
        assert_eq!(store.len(), model.len());
        for (key, l) in &model {
            assert!(store.take(*key, &mut out));
            assert!(same(&out, l));
        }
        assert!(store.is_empty());
        assert!(store.words.len() < 1 << 17, "compacted: {} words", store.words.len());
    }

    /// A list that grows as its judgments come moves to a run with spare
    /// words once, not once per judgment; a list that never grows has none.
    #[test]
    fn a_growing_list_moves_once_for_its_judgments() {
        let mut store = ListStore::default();
        let mut l = list(1, 10, |i| i as u32 + 1, true, 0);
        l.offsets = vec![Source { id: 0, offset: 5 }];
        store.store(7, &mut l).unwrap();
        let first = store.locate(7);
        assert_eq!(store.run_size(first.unwrap()), Counts::of(&l).words(), "no spare words before growing");
        let mut starts = Vec::new();
        for j in 0..3u64 {
            l.judged.push((j, 2));
            l.event_ids.push(100 + j);
            if j == 0 {
                l.offsets.push(Source { id: 1, offset: 9 });
            }
            store.store(7, &mut l).unwrap();
            starts.push(store.locate(7));
            let mut out = OpenList::default();
            assert!(store.load(7, &mut out));
            assert!(same(&out, &l));
        }
        assert_ne!(starts[0], first, "the first judgment moves the list");
        assert_eq!(starts[1], starts[0], "the second fits the spare words");
        assert_eq!(starts[2], starts[0], "so does the third");
        // Scans step over the spare words to the next run.
        let mut other = list(2, 3, |i| i as u32 + 1, false, 1);
        store.store(8, &mut other).unwrap();
        let mut keys = store.keys();
        keys.sort_unstable();
        assert_eq!(keys, vec![7, 8]);
    }
}
