//! Compact storage of the assembler's lists.
//!
//! Inside the assembly stage: where open lists (and final lists kept for
//! late judgments) live between events. A production search system keeps
//! millions of lists open at once, so each is one run of 64-bit words in a
//! per-shard arena, found through a hash table of run starts: no per-list
//! heap allocation, no `Vec` headers, no allocator rounding. The assembler
//! edits a list in its working form ([`OpenList`]), loaded into reusable
//! buffers and stored back; only the resting form is compact.
//!
//! A list past [`BIG_RUN_WORDS`] (a hot key: thousands of results or
//! judgments) would make every event scan and shift thousands of words;
//! it becomes a [`BigList`] instead, with hashed indexes so that an event
//! costs O(1), and its run keeps only the header (counts all zero: a
//! compact list always has an event id), so that expiry, scans and
//! compaction treat it like any other.
//!
//! For the production shape (10 results with scores, one source) a run is
//! 29 words, 232 bytes; the hash table adds about 10 bytes per list, and the
//! expiry slots (which let a tick find the lists due without walking them
//! all) about 4 to 8.
//!
//! # What moves together
//!
//! A run is accounted for in several places at once, each kept by one part
//! of the store, and whatever writes, moves, compacts, expires or removes a
//! run keeps all of them in step ([`ListStore::store_at`] for every write
//! of a list, [`ListStore::judge_at`] for a judgment applied in place,
//! [`ListStore::take`] and [`ListStore::remove`]):
//!
//! - `layout`: the run's words (the table there), encoded and decoded;
//! - `arena`: run sizes and their spare words, free runs reused by size,
//!   and compaction, which moves every run;
//! - the index, here: the hash table of run starts by key, and the
//!   [`FrozenLists`] copy a checkpoint decodes;
//! - `expiry`: the expiry slots, which file each list by its newest event;
//! - `big`: the [`BigList`]s, whose runs are header only;
//! - `sources`: the walk for the lowest offset per source, into which a
//!   write behind its cursor folds the sources of the run it wrote;
//! - `edit`: edits made to a run where it rests (a judgment, an
//!   impression's rank), instead of decoding it and storing it back.

mod arena;
mod big;
mod edit;
mod expiry;
mod layout;
mod sources;
#[cfg(test)]
mod testing;

pub use big::{BigList, ListBounds};
pub use edit::JudgmentEdit;
pub(super) use expiry::EXPIRY_SLOT_MS;
pub use sources::fold_source;

use super::{ListKey, OpenList};
use arena::{grown_size, holds, size_class, slack_of};
use big::BIG_RUN_WORDS;
use hashbrown::HashTable;
use layout::{Counts, decode, encode, key_at};
use rustc_hash::FxHashMap;
use sources::SourceScan;
use std::collections::BTreeMap;

/// A list does not fit its compact form (more than
/// [`MAX_ITEMS`](layout::MAX_ITEMS) of something, or the arena's 2^32-word
/// address space is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// What every scan needs of a list, without decoding it.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub key: ListKey,
    pub last_event_ms: i64,
    pub last_arrival_ms: i64,
}

/// The lists of a [`ListStore`] at one moment (see [`ListStore::freeze`]):
/// only their arena, readable in arena order, not searchable by key.
#[derive(Debug)]
pub struct FrozenLists(ListStore);

impl FrozenLists {
    /// Every list, in the arena order [`ListStore::keys`] gives.
    pub fn lists(&self) -> Vec<(ListKey, OpenList)> {
        let store = &self.0;
        store
            .live_runs()
            .map(|start| {
                let mut list = OpenList::default();
                store.decode_at(start, &mut list);
                (key_at(&store.words, start), list)
            })
            .collect()
    }
}

/// Lists keyed by [`ListKey`], stored compactly.
#[derive(Debug, Default)]
pub struct ListStore {
    /// Start (word index into `words`) of each list's run, hashed by key.
    index: HashTable<u32>,
    /// The arena: every run, and the free ones between them.
    words: Vec<u64>,
    /// Free runs by size, reused before the arena grows.
    free: FxHashMap<u32, Vec<u32>>,
    /// Words in free runs: past half the arena, it is compacted.
    free_words: usize,
    /// Lists by the expiry slot of their newest event time, as the low 32
    /// bits of their key, so that each tick finds the lists due without
    /// walking all of them (millions of lists, every 500 ms). A list is
    /// filed when it is created, at or before its slot (its newest event
    /// only moves later); one not yet due is filed again where it is now,
    /// and an entry whose list is gone is dropped when its slot comes.
    expiry: BTreeMap<i64, Vec<u32>>,
    /// Entries in `expiry`: past twice the lists (gone lists' entries whose
    /// slot has not come, when event time stands still) it is rebuilt.
    expiry_entries: usize,
    /// The expiry entries [`Self::due`] is looking at (reused).
    due_lows: Vec<u32>,
    /// The content of the lists whose runs are header only ([`BigList`]).
    big: FxHashMap<ListKey, BigList>,
    /// The walk for the lowest offset per source in progress, if any (see
    /// [`Self::scan_sources`]).
    scan: Option<SourceScan>,
}

/// Asks the CPU to start loading the cache line at `words[at]` (no effect
/// past the end; a hint only, it never faults).
#[inline]
fn prefetch(words: &[u64], at: usize) {
    #[cfg(target_arch = "x86_64")]
    if let Some(w) = words.get(at) {
        // SAFETY: `_mm_prefetch` only hints the cache; the address is a
        // valid element of `words`.
        unsafe { std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>((w as *const u64).cast()) }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (words, at);
}

/// The hash table's hash: from the low 32 bits of the key only (keys are
/// already uniform hashes), so that an expiry entry of 32 bits finds its
/// list; keys sharing them are told apart by the full key.
fn hash_of(key: ListKey) -> u64 {
    hash_of_low(key as u32)
}

fn hash_of_low(low: u32) -> u64 {
    // The table takes its 7-bit tags from the top bits: spread the 32 bits
    // over all 64.
    u64::from(low).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

impl ListStore {
    pub fn len(&self) -> usize {
        self.index.len()
    }

    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    fn find(&self, key: ListKey) -> Option<u32> {
        self.index.find(hash_of(key), |&s| key_at(&self.words, s) == key).copied()
    }

    pub fn contains(&self, key: ListKey) -> bool {
        self.find(key).is_some()
    }

    pub fn header(&self, key: ListKey) -> Option<Header> {
        self.find(key).map(|s| self.header_at(s))
    }

    fn header_at(&self, start: u32) -> Header {
        let w = &self.words[start as usize..];
        Header { key: key_at(&self.words, start), last_event_ms: w[2] as i64, last_arrival_ms: w[3] as i64 }
    }

    /// Every list's header.
    pub fn headers(&self) -> impl Iterator<Item = Header> + '_ {
        self.live_runs().map(|s| self.header_at(s))
    }

    /// Decodes the list at `start` into `into`.
    fn decode_at(&self, start: u32, into: &mut OpenList) {
        let run = &self.words[start as usize..];
        decode(run, into);
        if self.is_big(start)
            && let Some(big) = self.big.get(&key_at(&self.words, start))
        {
            big.fill(into);
        }
    }

    /// Asks the CPU to start loading the run of `key`'s list, if there is
    /// one, so that the miss overlaps other work of the event before
    /// [`Self::locate`] needs it: the runs of a million lists are far out
    /// of cache, and in a profile the store's lookups were mostly stalls.
    #[inline]
    pub fn prefetch(&self, key: ListKey) {
        for &start in self.index.iter_hash(hash_of(key)) {
            for line in 0..4 {
                prefetch(&self.words, start as usize + 8 * line);
            }
        }
    }

    /// Where the list of `key` is, for [`Self::load_at`] and
    /// [`Self::store_at`]: valid until the next store or removal.
    pub fn locate(&self, key: ListKey) -> Option<u32> {
        self.find(key)
    }

    /// The newest event time of the list at `start` (from [`Self::locate`]).
    pub fn last_event_at(&self, start: u32) -> i64 {
        self.words[start as usize + 2] as i64
    }

    /// Decodes the list at `start` (from [`Self::locate`]) into `into`.
    pub fn load_at(&self, start: u32, into: &mut OpenList) {
        self.decode_at(start, into);
    }

    /// Decodes the list of `key` into `into` (its buffers are reused).
    pub fn load(&self, key: ListKey, into: &mut OpenList) -> bool {
        match self.find(key) {
            Some(s) => {
                self.decode_at(s, into);
                true
            }
            None => false,
        }
    }

    /// Decodes and removes the list of `key`.
    pub fn take(&mut self, key: ListKey, into: &mut OpenList) -> bool {
        match self.index.find_entry(hash_of(key), |&s| key_at(&self.words, s) == key) {
            Ok(entry) => {
                let (start, _) = entry.remove();
                self.decode_at(start, into);
                self.big.remove(&key);
                self.release(start);
                self.maybe_compact();
                true
            }
            Err(_) => false,
        }
    }

    pub fn remove(&mut self, key: ListKey) -> bool {
        match self.index.find_entry(hash_of(key), |&s| key_at(&self.words, s) == key) {
            Ok(entry) => {
                let (start, _) = entry.remove();
                self.big.remove(&key);
                self.release(start);
                self.maybe_compact();
                true
            }
            Err(_) => false,
        }
    }

    /// Stores `list` as the list of `key`, replacing the one there. The
    /// shown results are put in position order (nothing depends on their
    /// arrival order).
    pub fn store(&mut self, key: ListKey, list: &mut OpenList) -> Result<(), TooLarge> {
        let at = self.find(key);
        self.store_at(key, at, list)
    }

    /// [`Self::store`] where `at` is what [`Self::locate`] said of `key`,
    /// with nothing stored or removed since: the assembler's one hash lookup
    /// per event serves the load and the store.
    pub fn store_at(&mut self, key: ListKey, at: Option<u32>, list: &mut OpenList) -> Result<(), TooLarge> {
        list.shown.sort_unstable_by_key(|s| s.position);
        let mut counts = Counts::of(list);
        let big = counts.words() > BIG_RUN_WORDS || at.is_some_and(|s| self.is_big(s));
        if big {
            // Its run is the header alone; its content is indexed.
            self.big.insert(key, BigList::of(list));
            counts = Counts { shown: 0, judged: 0, events: 0, sources: 0, ..counts };
            counts.scores = false;
            counts.explicit_positions = false;
            counts.wide_sources = false;
            counts.teams = false;
        } else if !counts.fits() {
            return Err(TooLarge);
        }
        let needed = counts.words();
        let mut size = size_class(needed);
        let start = match at.map(|s| (s, self.run_size(s))) {
            Some((s, old_size)) if holds(old_size, needed) => {
                size = old_size;
                s
            }
            Some((old, old_size)) => {
                size = grown_size(old_size, needed);
                let start = self.allocate(size)?;
                if let Some(slot) = self.index.find_mut(hash_of(key), |&s| s == old) {
                    *slot = start;
                }
                self.release(old);
                start
            }
            None => {
                let start = self.allocate(size)?;
                let words = &self.words;
                self.index.insert_unique(hash_of(key), start, |&s| hash_of(key_at(words, s)));
                start
            }
        };
        let slack = slack_of(size, needed);
        encode(key, list, counts, slack, big, &mut self.words[start as usize..start as usize + size]);
        if let Some(scan) = &mut self.scan {
            // A big list's sources are not in its run: all of them count
            // at the walk's end.
            for &src in &list.offsets {
                scan.fold(src);
            }
        }
        if at.is_none() {
            // After the encoding: filing may walk every run.
            self.file(key as u32, list.last_event_ms);
        }
        self.maybe_compact();
        Ok(())
    }

    /// Sets every list's newest arrival to `now_ms`.
    pub fn set_arrivals(&mut self, now_ms: i64) {
        let starts: Vec<u32> = self.live_runs().collect();
        for s in starts {
            self.words[s as usize + 3] = now_ms as u64;
        }
    }

    /// Keeps the lists whose header `keep` accepts.
    pub fn retain(&mut self, mut keep: impl FnMut(&Header) -> bool) {
        let dropped: Vec<Header> = self.headers().filter(|h| !keep(h)).collect();
        for h in dropped {
            self.remove(h.key);
        }
    }

    /// A copy of every list as it rests, for a checkpoint: the arena and
    /// the big lists copied as they are (a memory copy, milliseconds for a
    /// million lists), to be decoded on another thread by
    /// [`FrozenLists::lists`]. Decoding each list here instead held the
    /// consumer task for tens of milliseconds at every checkpoint.
    pub fn freeze(&self) -> FrozenLists {
        FrozenLists(ListStore { words: self.words.clone(), big: self.big.clone(), ..ListStore::default() })
    }

    /// Every key.
    pub fn keys(&self) -> Vec<ListKey> {
        self.live_runs().map(|s| key_at(&self.words, s)).collect()
    }
}
