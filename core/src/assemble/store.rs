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
//! A run (in words):
//!
//! | words | content |
//! |---|---|
//! | 0–1 | list key (128-bit hash) |
//! | 2 | newest event time (ms) |
//! | 3 | newest arrival, processing time (ms) |
//! | 4 | rank of the impression that decides the list's time (its time, ms, and whether it defines the list) |
//! | 5 | dimension tuple id (u32), first position (u32; 0: positions stored) |
//! | 6 | shown (u16), judged (u16), event ids (u16), sources (6 bits), randomized flag (1 bit), teams flag (1 bit), flags (3 bits), spare words (4 bits) |
//! | … | shown document hashes in position order; their scores (f64 bits) when any result has one; their positions, two per word, unless they run on from the first; their interleaving teams, 2 bits each, 32 per word, when any result has one |
//! | … | judged document hashes; their grades, two per word |
//! | … | event id hashes; sources, one word each (16-bit id, 48-bit offset) or two when one does not fit |
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
//! Why one file (about 1,170 lines before its tests): [`ListStore`] is one
//! arena, and its methods share invariants no single method shows: the run
//! layout above, free runs and their slack, the hash table of run starts,
//! the expiry slots and the big-list indexes all move together when a run
//! grows, shrinks, is compacted or expires. Split by method, each file
//! would restate them; the tests below exercise them as a whole.

use super::{Applied, ListKey, OpenList, ShownDoc, Source};
use crate::metrics::Grade;
use hashbrown::HashTable;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;

const HEADER_WORDS: usize = 7;
/// Interleaving teams (2 bits each) per word of the teams section.
const TEAMS_PER_WORD: usize = 32;
const FLAG_SCORES: u64 = 1;
const FLAG_IMPRESSION: u64 = 2;
/// Sources take two words each (else one: a 16-bit id and a 48-bit offset).
const FLAG_WIDE_SOURCES: u64 = 4;
/// In word 6 (the top bit of the sources count): the run holds a teams
/// section (some result came from a team-draft interleaving).
const TEAMS_BIT: u64 = 1 << 55;
/// In word 6: an impression of the list was randomized (see `OpenList`).
const RANDOMIZED_BIT: u64 = 1 << 54;
/// The flags, in word 6 from bit 56.
const FLAG_BITS: u64 = FLAG_SCORES | FLAG_IMPRESSION | FLAG_WIDE_SOURCES;
/// In word 6 of a free run, whose low 32 bits hold its size: scans walk the
/// arena in order, run after run, rather than hopping through the index.
const FREE_RUN: u64 = 1 << 63;
/// Word 6, bits 59–62: the run's spare words past its content (see
/// [`GROWTH_SLACK`]). Zero: the run is exactly its size class.
const SLACK_SHIFT: u32 = 59;
const SLACK_MASK: u64 = 0xf;
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

/// The largest count of shown results, judged documents or event ids of a
/// compact run (16-bit counts); a list never gets near it, as it becomes a
/// [`BigList`] past [`BIG_RUN_WORDS`].
const MAX_ITEMS: usize = u16::MAX as usize;

/// Runs larger than this (2 KiB) become [`BigList`]s: below it, the linear
/// scans of a run cost less than hashing would.
const BIG_RUN_WORDS: usize = 256;

/// A list too large for a compact run, indexed so that an event costs O(1)
/// in its size: positions, judged documents and event ids are hashed.
/// What a big list takes no more of: events (`input.max_events_per_list`)
/// and, for an impression, results held (`input.max_results_per_list`).
#[derive(Debug, Clone, Copy)]
pub struct ListBounds {
    pub events: usize,
    pub results: usize,
}

#[derive(Debug, Clone, Default)]
pub struct BigList {
    shown: Vec<ShownDoc>,
    /// Index into `shown` by position.
    positions: FxHashMap<u32, u32>,
    judged: Vec<(u64, Grade)>,
    /// Index into `judged` by document.
    judged_at: FxHashMap<u64, u32>,
    event_ids: FxHashSet<u64>,
    offsets: Vec<Source>,
}

impl BigList {
    fn of(list: &OpenList) -> BigList {
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

    fn fill(&self, into: &mut OpenList) {
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
/// The largest count of sources (topic-partitions) of one list: six bits
/// of header word 6 (its top two bits flag teams and randomized lists).
/// Events keyed by session reach a list from one partition per topic, so a
/// list has as many sources as topics; one past this is refused like a list
/// past `MAX_ITEMS` (`store_at` says `TooLarge`: the list is closed early).
const MAX_SOURCES: usize = 63;

/// Width of an expiry slot, in event-time milliseconds: lists are filed
/// by the slot of their newest event (see [`ListStore::due`]).
pub(super) const EXPIRY_SLOT_MS: i64 = 1_000;

/// A list does not fit its compact form (more than [`MAX_ITEMS`] of
/// something, or the arena's 2^32-word address space is full).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLarge;

/// A judgment for [`ListStore::judge_at`]: what the assembler would apply
/// to the list's working form.
#[derive(Debug, Clone, Copy)]
pub struct JudgmentEdit {
    /// The judged document's hash.
    pub doc: u64,
    pub grade: Grade,
    /// The judgment's event id hash (a re-delivery is a duplicate).
    pub event: u64,
    /// Events the list may hold (`input.max_events_per_list`).
    pub max_events: usize,
    pub ts_ms: i64,
    pub arrival_ms: i64,
    pub source: Option<Source>,
}

/// What every scan needs of a list, without decoding it.
#[derive(Debug, Clone, Copy)]
pub struct Header {
    pub key: ListKey,
    pub last_event_ms: i64,
    pub last_arrival_ms: i64,
}

#[derive(Debug, Clone, Copy)]
struct Counts {
    shown: usize,
    judged: usize,
    events: usize,
    sources: usize,
    scores: bool,
    explicit_positions: bool,
    wide_sources: bool,
    teams: bool,
    /// A list property kept in the header (also of a big list's run).
    randomized: bool,
}

impl Counts {
    fn of(list: &OpenList) -> Counts {
        // Position 0 cannot be stored as the first of a run (0 in the header
        // means "positions stored"); events never carry it (positions are
        // 1-based), a damaged checkpoint might.
        let contiguous = list.shown.first().is_none_or(|f| f.position > 0)
            && list.shown.iter().enumerate().all(|(i, s)| s.position as usize == list.shown[0].position as usize + i);
        Counts {
            shown: list.shown.len(),
            judged: list.judged.len(),
            events: list.event_ids.len(),
            sources: list.offsets.len(),
            scores: list.shown.iter().any(|s| !s.score.is_nan()),
            explicit_positions: !contiguous,
            wide_sources: list.offsets.iter().any(|&s| needs_wide(s)),
            teams: list.shown.iter().any(|s| s.team != 0),
            randomized: list.randomized,
        }
    }

    fn read(words: &[u64]) -> Counts {
        let w = words[6];
        Counts {
            shown: (w & 0xffff) as usize,
            judged: ((w >> 16) & 0xffff) as usize,
            events: ((w >> 32) & 0xffff) as usize,
            sources: ((w >> 48) & 0x3f) as usize,
            scores: (w >> 56) & FLAG_SCORES != 0,
            explicit_positions: words[5] >> 32 == 0,
            wide_sources: (w >> 56) & FLAG_WIDE_SOURCES != 0,
            teams: w & TEAMS_BIT != 0,
            randomized: w & RANDOMIZED_BIT != 0,
        }
    }

    fn fits(&self) -> bool {
        self.shown <= MAX_ITEMS && self.judged <= MAX_ITEMS && self.events <= MAX_ITEMS && self.sources <= MAX_SOURCES
    }

    fn words(&self) -> usize {
        self.sections().sources + self.source_words() * self.sources
    }

    fn source_words(&self) -> usize {
        if self.wide_sources { 2 } else { 1 }
    }

    /// Where the sections after the shown results start (words).
    fn sections(&self) -> Sections {
        let judged = HEADER_WORDS
            + self.shown * (1 + usize::from(self.scores))
            + if self.explicit_positions { self.shown.div_ceil(2) } else { 0 }
            + if self.teams { self.shown.div_ceil(TEAMS_PER_WORD) } else { 0 };
        let grades = judged + self.judged;
        let events = grades + self.judged.div_ceil(2);
        Sections { judged, grades, events, sources: events + self.events }
    }

    /// Header word 6 for these counts, `flags` and `slack` spare words.
    fn header_word(&self, flags: u64, slack: usize) -> u64 {
        self.shown as u64
            | (self.judged as u64) << 16
            | (self.events as u64) << 32
            | (self.sources as u64) << 48
            | if self.teams { TEAMS_BIT } else { 0 }
            | if self.randomized { RANDOMIZED_BIT } else { 0 }
            | flags << 56
            | (slack as u64 & SLACK_MASK) << SLACK_SHIFT
    }
}

/// Start of each section of a run (see the module's table).
#[derive(Debug, Clone, Copy)]
struct Sections {
    judged: usize,
    grades: usize,
    events: usize,
    sources: usize,
}

/// A source that does not fit one word (16-bit id, 48-bit offset).
fn needs_wide(s: Source) -> bool {
    s.id >= 1 << 16 || !(0..1 << 48).contains(&s.offset)
}

/// Writes `source` at `run[at..]`, in one word or (`wide`) two.
fn put_source(run: &mut [u64], at: usize, source: Source, wide: bool) {
    if wide {
        run[at] = u64::from(source.id);
        run[at + 1] = source.offset as u64;
    } else {
        run[at] = u64::from(source.id) << 48 | source.offset as u64;
    }
}

/// The spare words a run of `size` words holding `needed` records (only
/// small runs have any; larger ones are their size class).
fn slack_of(size: usize, needed: usize) -> usize {
    if needed <= SLACK_MAX_RUN { size - needed } else { 0 }
}

/// The run size (words) that holds `needed` words. Small runs fit exactly
/// (a list that grows moves to a run of its new size: a copy of a few
/// hundred bytes, cheaper than the memory rounding would hold for its whole
/// life); larger ones are sized to a sixteenth of their power of two,
/// bounding the waste to 12.5%.
fn size_class(needed: usize) -> usize {
    if needed <= 64 { needed } else { needed.next_multiple_of(needed.next_power_of_two() / 16) }
}

/// Whether a run of `size` words can hold `needed` words of content, its
/// spare words absorbing the list's growth: it is their size class, or
/// small and larger by at most [`SLACK_MASK`] words.
fn holds(size: usize, needed: usize) -> bool {
    size == size_class(needed) || (needed <= SLACK_MAX_RUN && (needed..=needed + SLACK_MASK as usize).contains(&size))
}

/// The size (words) of the run a list of `needed` words moves to from a
/// run of `old_size` words that does not hold it: its size class, with
/// [`GROWTH_SLACK`] spare words when it grew and is small.
fn grown_size(old_size: usize, needed: usize) -> usize {
    let size = size_class(needed);
    if size > old_size && needed + GROWTH_SLACK <= SLACK_MAX_RUN { needed + GROWTH_SLACK } else { size }
}

/// The size (words) of the run that starts `run`: its content's size class,
/// or its content and its spare words.
fn run_words(run: &[u64]) -> usize {
    let needed = Counts::read(run).words();
    match ((run[6] >> SLACK_SHIFT) & SLACK_MASK) as usize {
        0 => size_class(needed),
        slack => needed + slack,
    }
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

/// A walk of the arena in slices, for the lowest offset each source still
/// has in a list (the commit point without checkpoints): walked at once,
/// every list's run is read while the consumer waits. In slices, a list
/// the walk could miss is one written (created, grown, moved, given a
/// source) while it is under way, and every such write folds its sources
/// in here instead.
#[derive(Debug, Default)]
struct SourceScan {
    /// The start of the next run to walk: always a run boundary (free runs
    /// are reused whole, and compaction maps it along with the runs).
    cursor: usize,
    min: Vec<Source>,
}

impl SourceScan {
    /// A shard's lists come from a handful of sources (its partition of
    /// each topic): a linear search beats hashing.
    fn fold(&mut self, src: Source) {
        fold_source(&mut self.min, src);
    }
}

/// Lowers `min`'s offset of `src`'s source to `src`'s, or adds it.
pub fn fold_source(min: &mut Vec<Source>, src: Source) {
    match min.iter_mut().find(|m| m.id == src.id) {
        Some(m) => m.offset = m.offset.min(src.offset),
        None => min.push(src),
    }
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

fn slot_of(ms: i64) -> i64 {
    ms.div_euclid(EXPIRY_SLOT_MS)
}

fn key_at(words: &[u64], start: u32) -> ListKey {
    let s = start as usize;
    u128::from(words[s]) | (u128::from(words[s + 1]) << 64)
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

    /// The start of every list's run, in arena order (sequential reads,
    /// which the scans of every tick depend on).
    fn live_runs(&self) -> impl Iterator<Item = u32> + '_ {
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

    /// Every list's header.
    pub fn headers(&self) -> impl Iterator<Item = Header> + '_ {
        self.live_runs().map(|s| self.header_at(s))
    }

    /// Every list's sources.
    pub fn sources(&self) -> impl Iterator<Item = Source> + '_ {
        self.live_runs()
            .flat_map(move |s| {
                let run = &self.words[s as usize..];
                let counts = Counts::read(run);
                let at = counts.sections().sources;
                (0..counts.sources).map(move |i| source_at(run, at, i, counts.wide_sources))
            })
            .chain(self.big.values().flat_map(|b| b.offsets.iter().copied()))
    }

    /// Walks the next `runs` lists for the lowest offset of each source;
    /// at the end of the arena, the lowest offset each source has in a list
    /// anywhere in it, as at this moment: a list written while the walk was
    /// under way counts for what it held then, and a list removed since may
    /// still count (the result is never above the truth, as a commit point
    /// needs). `None`: not at the end yet.
    pub fn scan_sources(&mut self, runs: usize) -> Option<Vec<Source>> {
        let mut scan = self.scan.take().unwrap_or_default();
        let mut walked = 0;
        while scan.cursor < self.words.len() {
            if walked == runs {
                self.scan = Some(scan);
                return None;
            }
            let start = scan.cursor;
            let w = self.words[start + 6];
            if w & FREE_RUN != 0 {
                scan.cursor += (w & 0xffff_ffff) as usize;
                continue;
            }
            let run = &self.words[start..];
            let counts = Counts::read(run);
            let at = counts.sections().sources;
            for i in 0..counts.sources {
                scan.fold(source_at(run, at, i, counts.wide_sources));
            }
            scan.cursor += run_words(run);
            walked += 1;
        }
        for src in self.big.values().flat_map(|b| b.offsets.iter().copied()) {
            scan.fold(src);
        }
        Some(scan.min)
    }

    /// The walk of [`Self::scan_sources`] misses a run written behind its
    /// cursor: the run's sources, after the write, count for it.
    fn scanned_write(&mut self, start: usize) {
        if let Some(scan) = &mut self.scan {
            let run = &self.words[start..];
            let counts = Counts::read(run);
            let at = counts.sections().sources;
            for i in 0..counts.sources {
                scan.fold(source_at(run, at, i, counts.wide_sources));
            }
        }
    }

    /// Whether the run at `start` is a [`BigList`]'s header: no counts (a
    /// list the assembler made has an event id at least), and listed.
    fn is_big(&self, start: u32) -> bool {
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

    /// What the list at `start` (from [`Self::locate`]) answers an event
    /// `event` without taking it: a duplicate, one too many, or `None` (it
    /// would take it). Only the event ids are read: refusing a re-delivery
    /// by decoding the list first cost a big list's whole size per event.
    pub fn refusal(&self, start: u32, event: u64, max_events: usize) -> Option<Applied> {
        let (seen, events) = match self.big.get(&key_at(&self.words, start)).filter(|_| self.is_big(start)) {
            Some(big) => (big.event_ids.contains(&event), big.event_ids.len()),
            None => {
                let s = start as usize;
                let run = &self.words[s..s + self.run_size(start)];
                let counts = Counts::read(run);
                let Sections { events: events_at, sources: sources_at, .. } = counts.sections();
                (run[events_at..sources_at].contains(&event), counts.events)
            }
        };
        if seen { Some(Applied::Duplicate) } else { (events >= max_events).then_some(Applied::TooLarge) }
    }

    /// The [`BigList`] of `key`, if it is one.
    pub fn big_mut(&mut self, key: ListKey) -> Option<&mut BigList> {
        self.big.get_mut(&key)
    }

    /// Records an impression's rank (its time, and whether it defines the
    /// list) and dimensions on the list at `start` unless one of a lower
    /// rank did (the earliest that defines the list decides).
    /// Returns the rank (see `assemble::impression_rank`) and dimensions
    /// the list held before, if it had an impression: the caller tells
    /// impressions that disagree apart.
    pub fn note_impression(
        &mut self,
        start: u32,
        impression_ms: i64,
        dims: u32,
        randomized: bool,
    ) -> Option<(i64, u32)> {
        let s = start as usize;
        if randomized {
            self.words[s + 6] |= RANDOMIZED_BIT;
        }
        let has = (self.words[s + 6] >> 56) & FLAG_IMPRESSION != 0;
        let held = has.then(|| (self.words[s + 4] as i64, self.words[s + 5] as u32));
        if !has || impression_ms < self.words[s + 4] as i64 {
            self.words[s + 4] = impression_ms as u64;
            self.words[s + 5] = (self.words[s + 5] & !0xffff_ffff) | u64::from(dims);
            self.words[s + 6] |= FLAG_IMPRESSION << 56;
        }
        held
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

    /// Applies a judgment to the list at `start` (from [`Self::locate`])
    /// where it rests, leaving the run exactly as [`Self::load_at`], the
    /// assembler's edit of the working form and [`Self::store_at`] would
    /// (see the test): three judgments come for every impression, and
    /// decoding and re-encoding the whole list for each was a fifth of
    /// the assembler's instructions. A list whose run has no room left is
    /// copied to a larger one first. `None`: the list must widen its
    /// sources or be refused; nothing was changed, and the caller takes
    /// the general way.
    pub fn judge_at(&mut self, start: u32, edit: &JudgmentEdit) -> Option<Applied> {
        let bounds = ListBounds { events: edit.max_events, results: usize::MAX };
        if let Some(big) = self.big_event(start, edit.event, edit.ts_ms, edit.arrival_ms, edit.source, bounds) {
            return Some(match big {
                Ok(big) => {
                    big.judge(edit.doc, edit.grade);
                    Applied::Added
                }
                Err(refused) => refused,
            });
        }
        let s = start as usize;
        let size = self.run_size(start);
        let run = &self.words[s..s + size];
        let counts = Counts::read(run);
        let Sections { judged: judged_at, grades: grades_at, events: events_at, sources: sources_at } =
            counts.sections();
        if run[events_at..sources_at].contains(&edit.event) {
            return Some(Applied::Duplicate);
        }
        if counts.events >= edit.max_events {
            return Some(Applied::TooLarge);
        }
        let judged = run[judged_at..grades_at].iter().position(|&d| d == edit.doc);
        // Some(None): a source this list has not had yet.
        let source = edit.source.map(|src| {
            (src, (0..counts.sources).find(|&i| source_at(run, sources_at, i, counts.wide_sources).id == src.id))
        });
        let mut new = counts;
        new.events += 1;
        new.judged += usize::from(judged.is_none());
        new.sources += usize::from(matches!(source, Some((_, None))));
        if !new.fits() || new.words() > BIG_RUN_WORDS {
            // It becomes a big list: the general way converts it.
            return None;
        }
        let new_offset = source.map(|(src, i)| match i {
            Some(i) => source_at(run, sources_at, i, counts.wide_sources).offset.min(src.offset),
            None => src.offset,
        });
        if let (Some((src, _)), Some(offset)) = (source, new_offset)
            && !counts.wide_sources
            && needs_wide(Source { id: src.id, offset })
        {
            return None;
        }
        let needed = new.words();
        let moved = !holds(size, needed);
        let (s, size) = if moved { self.relocate(start, size, needed)? } else { (s, size) };
        let slack = slack_of(size, needed);
        let run = &mut self.words[s..s + size];
        let Sections { grades: new_grades_at, events: new_events_at, sources: new_sources_at, .. } = new.sections();
        // Back to front: each section moves right (or stays) into room the
        // sections after it have already left.
        let sw = counts.source_words();
        run.copy_within(sources_at..sources_at + counts.sources * sw, new_sources_at);
        if let (Some((src, i)), Some(offset)) = (source, new_offset) {
            put_source(
                run,
                new_sources_at + i.unwrap_or(counts.sources) * sw,
                Source { id: src.id, offset },
                counts.wide_sources,
            );
        }
        run.copy_within(events_at..sources_at, new_events_at);
        run[new_events_at + counts.events] = edit.event;
        let i = match judged {
            Some(i) => i,
            None => {
                run.copy_within(grades_at..events_at, new_grades_at);
                run[judged_at + counts.judged] = edit.doc;
                // A new grade word starts empty (as encoded: no second half).
                if counts.judged.is_multiple_of(2) {
                    run[new_grades_at + counts.judged / 2] = 0;
                }
                counts.judged
            }
        };
        let word = &mut run[new_grades_at + i / 2];
        let shift = 32 * (i % 2);
        let old = if judged.is_some() { (*word >> shift) as u32 as i32 } else { edit.grade };
        let grade = old.max(edit.grade);
        *word = (*word & !(0xffff_ffff << shift)) | u64::from(grade as u32) << shift;
        run[2] = (run[2] as i64).max(edit.ts_ms) as u64;
        run[3] = (run[3] as i64).max(edit.arrival_ms) as u64;
        run[6] = new.header_word((run[6] >> 56) & FLAG_BITS, slack);
        self.scanned_write(s);
        if moved {
            self.maybe_compact();
        }
        Some(Applied::Added)
    }

    /// Copies the run at `start` (`size` words) to a new run sized for
    /// `needed` words as [`Self::store_at`] sizes a list that grew, and
    /// points the index at it: the new start and size. `None`: the arena
    /// is full; nothing changed.
    fn relocate(&mut self, start: u32, size: usize, needed: usize) -> Option<(usize, usize)> {
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

    fn file(&mut self, key_low: u32, last_event_ms: i64) {
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

    fn run_size(&self, start: u32) -> usize {
        run_words(&self.words[start as usize..])
    }

    fn allocate(&mut self, size: usize) -> Result<u32, TooLarge> {
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

    fn release(&mut self, start: u32) {
        let size = self.run_size(start);
        self.words[start as usize + 6] = FREE_RUN | size as u64;
        self.free.entry(size as u32).or_default().push(start);
        self.free_words += size;
    }

    /// Compacts once half the arena is free (after the caller is done with
    /// run starts: compaction moves every run).
    fn maybe_compact(&mut self) {
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

/// `slack`: the run's spare words past the content (at most [`SLACK_MASK`]).
fn encode(key: ListKey, list: &OpenList, counts: Counts, slack: usize, big: bool, run: &mut [u64]) {
    run[0] = key as u64;
    run[1] = (key >> 64) as u64;
    run[2] = list.last_event_ms as u64;
    run[3] = list.last_arrival_ms as u64;
    let (impression_ms, dims) = list.impression.unwrap_or((0, 0));
    run[4] = impression_ms as u64;
    let first_position = if counts.explicit_positions { 0 } else { list.shown.first().map_or(0, |s| s.position) };
    run[5] = u64::from(dims) | (u64::from(first_position) << 32);
    let flags = if counts.scores { FLAG_SCORES } else { 0 }
        | if list.impression.is_some() { FLAG_IMPRESSION } else { 0 }
        | if counts.wide_sources { FLAG_WIDE_SOURCES } else { 0 };
    run[6] = counts.header_word(flags, slack);
    if big {
        // A big list's header: its content is a [`BigList`].
        run[5] &= 0xffff_ffff;
        return;
    }
    let mut at = HEADER_WORDS;
    for s in &list.shown {
        run[at] = s.doc;
        at += 1;
    }
    if counts.scores {
        for s in &list.shown {
            run[at] = s.score.to_bits();
            at += 1;
        }
    }
    if counts.explicit_positions {
        for pair in list.shown.chunks(2) {
            run[at] = u64::from(pair[0].position) | pair.get(1).map_or(0, |s| u64::from(s.position) << 32);
            at += 1;
        }
    }
    if counts.teams {
        for chunk in list.shown.chunks(TEAMS_PER_WORD) {
            run[at] = chunk.iter().enumerate().fold(0, |w, (i, s)| w | u64::from(s.team & 3) << (2 * i));
            at += 1;
        }
    }
    for (doc, _) in &list.judged {
        run[at] = *doc;
        at += 1;
    }
    for pair in list.judged.chunks(2) {
        run[at] = u64::from(pair[0].1 as u32) | pair.get(1).map_or(0, |(_, g)| u64::from(*g as u32) << 32);
        at += 1;
    }
    for id in &list.event_ids {
        run[at] = *id;
        at += 1;
    }
    for &source in &list.offsets {
        put_source(run, at, source, counts.wide_sources);
        at += counts.source_words();
    }
}

fn source_at(run: &[u64], at: usize, i: usize, wide: bool) -> Source {
    if wide {
        Source { id: run[at + 2 * i] as u32, offset: run[at + 2 * i + 1] as i64 }
    } else {
        Source { id: (run[at + i] >> 48) as u32, offset: (run[at + i] & ((1 << 48) - 1)) as i64 }
    }
}

fn decode(run: &[u64], list: &mut OpenList) {
    let counts = Counts::read(run);
    list.last_event_ms = run[2] as i64;
    list.last_arrival_ms = run[3] as i64;
    list.randomized = counts.randomized;
    list.impression = ((run[6] >> 56) & FLAG_IMPRESSION != 0).then_some((run[4] as i64, run[5] as u32));
    let first_position = (run[5] >> 32) as u32;
    let mut at = HEADER_WORDS;
    let docs = &run[at..at + counts.shown];
    at += counts.shown;
    let scores = if counts.scores {
        at += counts.shown;
        Some(&run[at - counts.shown..at])
    } else {
        None
    };
    let positions = if counts.explicit_positions {
        at += counts.shown.div_ceil(2);
        Some(&run[at - counts.shown.div_ceil(2)..at])
    } else {
        None
    };
    let teams = if counts.teams {
        at += counts.shown.div_ceil(TEAMS_PER_WORD);
        Some(&run[at - counts.shown.div_ceil(TEAMS_PER_WORD)..at])
    } else {
        None
    };
    list.shown.clear();
    list.shown.extend(docs.iter().enumerate().map(|(i, &doc)| ShownDoc {
        doc,
        position: match positions {
            Some(p) => (p[i / 2] >> (32 * (i % 2))) as u32,
            None => first_position + i as u32,
        },
        score: scores.map_or(f64::NAN, |s| f64::from_bits(s[i])),
        team: teams.map_or(0, |t| ((t[i / TEAMS_PER_WORD] >> (2 * (i % TEAMS_PER_WORD))) & 3) as u8),
    }));
    let judged_docs = &run[at..at + counts.judged];
    at += counts.judged;
    let grades = &run[at..at + counts.judged.div_ceil(2)];
    at += counts.judged.div_ceil(2);
    list.judged.clear();
    list.judged
        .extend(judged_docs.iter().enumerate().map(|(i, &doc)| (doc, (grades[i / 2] >> (32 * (i % 2))) as u32 as i32)));
    list.event_ids.clear();
    list.event_ids.extend_from_slice(&run[at..at + counts.events]);
    at += counts.events;
    list.offsets.clear();
    list.offsets.extend((0..counts.sources).map(|i| source_at(run, at, i, counts.wide_sources)));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(seed: u64, shown: usize, positions: impl Fn(usize) -> u32, scores: bool, judged: usize) -> OpenList {
        let mut rng = rankpulse_testkit::Rng::new(seed);
        OpenList {
            last_event_ms: rng.next() as i64,
            last_arrival_ms: -(rng.below(1 << 40) as i64),
            impression: (!seed.is_multiple_of(3)).then(|| (rng.next() as i64, rng.below(1000) as u32)),
            shown: (0..shown)
                .map(|i| ShownDoc {
                    doc: rng.next(),
                    position: positions(i),
                    score: if scores && i % 4 != 3 { rng.next() as f64 / 7.0 } else { f64::NAN },
                    // Seeds ≡ 1 (mod 4): an interleaved list (teams 0 to 2).
                    team: if seed % 4 == 1 { rng.below(3) as u8 } else { 0 },
                })
                .collect(),
            randomized: seed % 7 == 3,
            judged: (0..judged).map(|_| (rng.next(), rng.below(31) as i32 - 1)).collect(),
            event_ids: (0..judged + 1).map(|_| rng.next()).collect(),
            // Seeds ≡ 2 (mod 3): sources whose offsets need two words.
            offsets: (0..(seed % 3) as usize)
                .map(|i| Source { id: i as u32 * 7, offset: (rng.next() >> (16 * (seed % 3 == 1) as u32)) as i64 })
                .collect(),
        }
    }

    fn sorted(ids: &[u64]) -> Vec<u64> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids
    }

    /// Equal lists (event ids in any order: a big list keeps them hashed).
    fn same(a: &OpenList, b: &OpenList) -> bool {
        let bits = |l: &OpenList| -> Vec<(u64, u32, u64, u8)> {
            l.shown.iter().map(|s| (s.doc, s.position, s.score.to_bits(), s.team)).collect()
        };
        a.last_event_ms == b.last_event_ms
            && a.last_arrival_ms == b.last_arrival_ms
            && a.impression == b.impression
            && a.randomized == b.randomized
            && bits(a) == bits(b)
            && a.judged == b.judged
            && sorted(&a.event_ids) == sorted(&b.event_ids)
            && a.offsets == b.offsets
    }

    #[test]
    fn lists_round_trip_through_every_layout() {
        let mut store = ListStore::default();
        let mut expected = Vec::new();
        for seed in 0..200u64 {
            let shape = seed % 5;
            let mut l = match shape {
                0 => list(seed, 10, |i| i as u32 + 1, true, 3),
                1 => list(seed, 7, |i| (7 - i) as u32 * 3, true, 0),
                2 => list(seed, 0, |_| 0, false, 5),
                3 => list(seed, 3, |i| i as u32 + 11, false, 1),
                _ => list(seed, 130, |i| i as u32 * 2 + 1, true, 40),
            };
            let key = (u128::from(seed) << 64) | u128::from(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
            store.store(key, &mut l).unwrap();
            expected.push((key, l));
        }
        assert_eq!(store.len(), 200);
        let mut out = OpenList::default();
        for (key, l) in &expected {
            assert!(store.load(*key, &mut out));
            assert!(same(&out, l), "{key:x}");
            assert_eq!(store.header(*key).map(|h| h.last_event_ms), Some(l.last_event_ms));
        }
        let sources: usize = expected.iter().map(|(_, l)| l.offsets.len()).sum();
        assert_eq!(store.sources().count(), sources);
    }

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

    /// The general way of applying a judgment, as the assembler does it
    /// when [`ListStore::judge_at`] declines: load, edit, store back.
    fn judge_by_decoding(store: &mut ListStore, key: ListKey, e: &JudgmentEdit) -> Applied {
        let mut l = OpenList::default();
        let at = store.locate(key);
        store.load_at(at.unwrap(), &mut l);
        if l.event_ids.contains(&e.event) {
            return Applied::Duplicate;
        }
        if let Some(src) = e.source {
            match l.offsets.iter_mut().find(|o| o.id == src.id) {
                Some(o) => o.offset = o.offset.min(src.offset),
                None => l.offsets.push(src),
            }
        }
        l.event_ids.push(e.event);
        l.last_event_ms = l.last_event_ms.max(e.ts_ms);
        l.last_arrival_ms = l.last_arrival_ms.max(e.arrival_ms);
        match l.judged.iter_mut().find(|(d, _)| *d == e.doc) {
            Some((_, g)) => *g = (*g).max(e.grade),
            None => l.judged.push((e.doc, e.grade)),
        }
        store.store_at(key, at, &mut l).unwrap();
        Applied::Added
    }

    /// Judgments applied in place leave every run word for word as the
    /// general way does, over every layout (scores or not, positions
    /// stored or not, one- and two-word sources), existing and new judged
    /// documents, sources and event ids, and runs with and without spare
    /// words; and the in-place way declines only what needs a move or
    /// wider sources. Lists are removed and stored again on the way, so
    /// that runs move and the arena is compacted.
    #[test]
    fn judgments_in_place_match_decoding_and_storing_back() {
        let mut rng = rankpulse_testkit::Rng::new(2024);
        let (mut in_place, mut general) = (ListStore::default(), ListStore::default());
        let mut keys = Vec::new();
        for seed in 0..2_000u64 {
            let mut l = match seed % 5 {
                0 => list(seed, 10, |i| i as u32 + 1, true, 0),
                1 => list(seed, 7, |i| (7 - i) as u32 * 3, true, 2),
                2 => list(seed, 0, |_| 0, false, 1),
                3 => list(seed, 3, |i| i as u32 + 11, false, 1),
                _ => list(seed, 60, |i| i as u32 * 2 + 1, true, 9),
            };
            let key = u128::from(seed) << 64 | u128::from(seed * 77 + 1);
            in_place.store(key, &mut l.clone()).unwrap();
            general.store(key, &mut l).unwrap();
            keys.push((key, l));
        }
        let (mut applied_in_place, mut moved, mut declined, mut compacted) = (0, 0, 0, 0);
        for step in 0..60_000u64 {
            let (key, l) = keys[rng.below(keys.len() as u64) as usize].clone();
            let (key, l) = (&key, &l);
            let mut now = OpenList::default();
            assert!(general.load(*key, &mut now));
            let pick = |rng: &mut rankpulse_testkit::Rng, known: &[u64]| match known {
                [] => rng.next(),
                _ if rng.below(2) == 0 => known[rng.below(known.len() as u64) as usize],
                _ => rng.next(),
            };
            let docs: Vec<u64> = now.judged.iter().map(|(d, _)| *d).collect();
            let doc = pick(&mut rng, &docs);
            let event = pick(&mut rng, &now.event_ids[..now.event_ids.len().min(3)]);
            let source = match rng.below(4) {
                0 => None,
                1 => l.offsets.first().map(|s| Source { id: s.id, offset: s.offset - 1 + rng.below(3) as i64 }),
                2 => Some(Source { id: 9 + rng.below(3) as u32, offset: rng.below(1 << 40) as i64 }),
                // Would need two words where the list has one-word sources.
                _ => Some(Source { id: 70_000, offset: 3 }),
            };
            let e = JudgmentEdit {
                max_events: usize::MAX,
                doc,
                grade: rng.below(5) as i32 - 1,
                event,
                ts_ms: rng.next() as i64 >> 1,
                arrival_ms: rng.below(1 << 40) as i64,
                source,
            };
            if step == 30_000 {
                // Two lists in three go: the arena is compacted under the rest.
                let arena = in_place.words.len();
                let mut kept = Vec::new();
                for (i, (key, l)) in keys.drain(..).enumerate() {
                    if i % 3 == 0 {
                        kept.push((key, l));
                    } else {
                        assert!(in_place.remove(key) && general.remove(key));
                    }
                }
                keys = kept;
                compacted += usize::from(in_place.words.len() < arena);
                continue;
            }
            if step % 10 == 0 {
                // Back to its first form: no spare words, the next judgment moves it.
                for store in [&mut in_place, &mut general] {
                    assert!(store.remove(*key));
                    store.store(*key, &mut l.clone()).unwrap();
                }
            }
            let arena = in_place.words.len();
            let start = in_place.locate(*key).unwrap();
            let want = judge_by_decoding(&mut general, *key, &e);
            let got = match in_place.judge_at(start, &e) {
                Some(got) => {
                    applied_in_place += 1;
                    if in_place.locate(*key) != Some(start) {
                        moved += 1;
                    }
                    got
                }
                None => {
                    declined += 1;
                    judge_by_decoding(&mut in_place, *key, &e)
                }
            };
            assert_eq!(got, want, "step {step}");
            compacted += usize::from(in_place.words.len() < arena);
            let (a, b) = (in_place.locate(*key).unwrap() as usize, general.locate(*key).unwrap() as usize);
            let size = in_place.run_size(a as u32);
            assert_eq!(size, general.run_size(b as u32), "step {step}");
            let needed = Counts::read(&in_place.words[a..]).words();
            assert_eq!(in_place.words[a..a + needed], general.words[b..b + needed], "step {step}");
        }
        assert!(
            applied_in_place > 10_000 && moved > 500 && declined > 500 && compacted > 0,
            "{applied_in_place} in place ({moved} moved), {declined} declined, {compacted} compactions"
        );
    }

    /// Position 0 (never in an event, possible in a damaged checkpoint) is
    /// stored explicitly: found by the `checkpoint` fuzz target, where a run
    /// "contiguous from 0" decoded past its end.
    #[test]
    fn a_list_from_position_zero_round_trips() {
        let mut store = ListStore::default();
        let mut l = list(5, 3, |i| i as u32, true, 1);
        store.store(1, &mut l).unwrap();
        let mut out = OpenList::default();
        assert!(store.load(1, &mut out) && same(&out, &l));
    }

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

    /// What a walk of [`ListStore::scan_sources`] may be asked to do next.
    #[derive(Debug, Clone)]
    enum WalkOp {
        /// Creates or replaces a list (a big one past 256 words). Few keys:
        /// lists are judged again and again, in place once they have room.
        Store {
            key: u8,
            shown: usize,
            judged: usize,
            sources: Vec<(u32, i64)>,
        },
        /// A judgment applied in place (or declined, then stored back).
        Judge {
            key: u8,
            doc: u64,
            source: Option<(u32, i64)>,
        },
        Remove {
            key: u8,
        },
        /// Many lists at once, then two in three removed: the arena grows
        /// past the size at which it compacts, and compacts under the walk.
        Churn {
            base: u16,
        },
        Walk {
            runs: usize,
        },
    }

    fn walk_op() -> impl proptest::strategy::Strategy<Value = WalkOp> {
        use proptest::prelude::*;
        // Offsets past 48 bits and ids past 16 need two words a source.
        let source = (prop_oneof![0..4u32, Just(70_000u32)], prop_oneof![0..1_000i64, (1i64 << 48)..(1i64 << 50)]);
        prop_oneof![
            4 => (0..24u8, prop_oneof![0..12usize, 200..400usize], 0..6usize, proptest::collection::vec(source.clone(), 0..3))
                .prop_map(|(key, shown, judged, sources)| WalkOp::Store { key, shown, judged, sources }),
            6 => (0..24u8, 0..8u64, proptest::option::of(source)).prop_map(|(key, doc, source)| WalkOp::Judge { key, doc, source }),
            1 => (0..24u8).prop_map(|key| WalkOp::Remove { key }),
            1 => any::<u16>().prop_map(|base| WalkOp::Churn { base }),
            3 => (1..300usize).prop_map(|runs| WalkOp::Walk { runs }),
        ]
    }

    fn walked_list(shown: usize, judged: usize, sources: &[(u32, i64)]) -> OpenList {
        OpenList {
            shown: (0..shown)
                .map(|i| ShownDoc { doc: i as u64, position: i as u32 + 1, score: f64::NAN, team: 0 })
                .collect(),
            judged: (0..judged).map(|i| (i as u64 + 100, 1)).collect(),
            event_ids: (0..judged as u64 + 1).collect(),
            offsets: sources.iter().map(|&(id, offset)| Source { id, offset }).collect(),
            ..OpenList::default()
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(48))]

        /// A walk in slices, with lists created, grown, moved, given new
        /// sources, removed and compacted under it, never ends above the
        /// lowest offset a list still holds (a commit point past it would
        /// lose that list at a restart); with nothing written during the
        /// walk it ends exactly there.
        #[test]
        fn a_walk_in_slices_never_ends_above_the_lowest_offset_held(
            ops in proptest::collection::vec(walk_op(), 1..400)
        ) {
            let mut store = ListStore::default();
            let mut next_event = 1_000u64;
            let mut written_during_walk = false;
            for op in ops {
                let walking = store.scan.is_some();
                match op {
                    WalkOp::Store { key, shown, judged, sources } => {
                        let _ = store.store(u128::from(key) + 1, &mut walked_list(shown, judged, &sources));
                        written_during_walk |= walking;
                    }
                    WalkOp::Judge { key, doc, source } => {
                        let key = u128::from(key) + 1;
                        next_event += 1;
                        let e = JudgmentEdit {
                            doc,
                            grade: 2,
                            event: next_event,
                            max_events: usize::MAX,
                            ts_ms: 5,
                            arrival_ms: 5,
                            source: source.map(|(id, offset)| Source { id, offset }),
                        };
                        if let Some(start) = store.locate(key) {
                            if store.judge_at(start, &e).is_none() {
                                judge_by_decoding(&mut store, key, &e);
                            }
                            written_during_walk |= walking;
                        }
                    }
                    WalkOp::Remove { key } => {
                        // What the walk found of it may stay below the rest.
                        written_during_walk |= store.remove(u128::from(key) + 1) && walking;
                    }
                    WalkOp::Churn { base } => {
                        let keys: Vec<ListKey> = (0..3_000u128).map(|i| (u128::from(base) + 1) << 32 | i).collect();
                        for (i, &key) in keys.iter().enumerate() {
                            let _ = store.store(key, &mut walked_list(4 + i % 9, i % 4, &[(1, 500 + i as i64)]));
                        }
                        for (i, &key) in keys.iter().enumerate() {
                            if i % 3 != 0 {
                                store.remove(key);
                            }
                        }
                        written_during_walk |= walking;
                    }
                    WalkOp::Walk { runs } => {
                        if let Some(found) = store.scan_sources(runs) {
                            let mut truth = Vec::new();
                            for s in store.sources() {
                                fold_source(&mut truth, s);
                            }
                            for t in &truth {
                                let f = found.iter().find(|f| f.id == t.id);
                                proptest::prop_assert!(
                                    f.is_some_and(|f| f.offset <= t.offset),
                                    "source {} holds {} but the walk found {:?}", t.id, t.offset, f
                                );
                            }
                            if !written_during_walk {
                                let (mut found, mut truth) = (found, truth);
                                found.sort_by_key(|s| s.id);
                                truth.sort_by_key(|s| s.id);
                                proptest::prop_assert_eq!(found, truth);
                            }
                            written_during_walk = false;
                        }
                    }
                }
            }
        }
    }
}
