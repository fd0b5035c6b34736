//! A run: one list's words at rest, and the encoding and decoding between
//! them and the list's working form ([`OpenList`]).
//!
//! In the store: every other part reads a run through what is defined
//! here, its header word 6 above all (counts, flags, spare words, and the
//! mark of a free run).
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

use crate::assemble::{ListKey, OpenList, ShownDoc, Source};

pub(super) const HEADER_WORDS: usize = 7;
/// Interleaving teams (2 bits each) per word of the teams section.
const TEAMS_PER_WORD: usize = 32;
const FLAG_SCORES: u64 = 1;
pub(super) const FLAG_IMPRESSION: u64 = 2;
/// Sources take two words each (else one: a 16-bit id and a 48-bit offset).
const FLAG_WIDE_SOURCES: u64 = 4;
/// In word 6 (the top bit of the sources count): the run holds a teams
/// section (some result came from a team-draft interleaving).
const TEAMS_BIT: u64 = 1 << 55;
/// In word 6: an impression of the list was randomized (see `OpenList`).
pub(super) const RANDOMIZED_BIT: u64 = 1 << 54;
/// The flags, in word 6 from bit 56.
pub(super) const FLAG_BITS: u64 = FLAG_SCORES | FLAG_IMPRESSION | FLAG_WIDE_SOURCES;
/// In word 6 of a free run, whose low 32 bits hold its size: scans walk the
/// arena in order, run after run, rather than hopping through the index.
pub(super) const FREE_RUN: u64 = 1 << 63;
/// Word 6, bits 59–62: the run's spare words past its content (see
/// `GROWTH_SLACK` in `arena`). Zero: the run is exactly its size class.
pub(super) const SLACK_SHIFT: u32 = 59;
pub(super) const SLACK_MASK: u64 = 0xf;

/// The largest count of shown results, judged documents or event ids of a
/// compact run (16-bit counts); a list never gets near it, as it becomes a
/// [`BigList`](super::BigList) past
/// [`BIG_RUN_WORDS`](super::big::BIG_RUN_WORDS).
pub(super) const MAX_ITEMS: usize = u16::MAX as usize;

/// The largest count of sources (topic-partitions) of one list: six bits
/// of header word 6 (its top two bits flag teams and randomized lists).
/// Events keyed by session reach a list from one partition per topic, so a
/// list has as many sources as topics; one past this is refused like a list
/// past `MAX_ITEMS` (`store_at` says `TooLarge`: the list is closed early).
const MAX_SOURCES: usize = 63;

/// What a run holds, as its header says (word 6, and word 5 for whether
/// positions are stored): the sizes of its sections and its flags.
#[derive(Debug, Clone, Copy)]
pub(super) struct Counts {
    pub(super) shown: usize,
    pub(super) judged: usize,
    pub(super) events: usize,
    pub(super) sources: usize,
    pub(super) scores: bool,
    pub(super) explicit_positions: bool,
    pub(super) wide_sources: bool,
    pub(super) teams: bool,
    /// A list property kept in the header (also of a big list's run).
    pub(super) randomized: bool,
}

impl Counts {
    pub(super) fn of(list: &OpenList) -> Counts {
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

    pub(super) fn read(words: &[u64]) -> Counts {
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

    pub(super) fn fits(&self) -> bool {
        self.shown <= MAX_ITEMS && self.judged <= MAX_ITEMS && self.events <= MAX_ITEMS && self.sources <= MAX_SOURCES
    }

    pub(super) fn words(&self) -> usize {
        self.sections().sources + self.source_words() * self.sources
    }

    pub(super) fn source_words(&self) -> usize {
        if self.wide_sources { 2 } else { 1 }
    }

    /// Where the sections after the shown results start (words).
    pub(super) fn sections(&self) -> Sections {
        let judged = HEADER_WORDS
            + self.shown * (1 + usize::from(self.scores))
            + if self.explicit_positions { self.shown.div_ceil(2) } else { 0 }
            + if self.teams { self.shown.div_ceil(TEAMS_PER_WORD) } else { 0 };
        let grades = judged + self.judged;
        let events = grades + self.judged.div_ceil(2);
        Sections { judged, grades, events, sources: events + self.events }
    }

    /// Header word 6 for these counts, `flags` and `slack` spare words.
    pub(super) fn header_word(&self, flags: u64, slack: usize) -> u64 {
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
pub(super) struct Sections {
    pub(super) judged: usize,
    pub(super) grades: usize,
    pub(super) events: usize,
    pub(super) sources: usize,
}

/// A source that does not fit one word (16-bit id, 48-bit offset).
pub(super) fn needs_wide(s: Source) -> bool {
    s.id >= 1 << 16 || !(0..1 << 48).contains(&s.offset)
}

/// Writes `source` at `run[at..]`, in one word or (`wide`) two.
pub(super) fn put_source(run: &mut [u64], at: usize, source: Source, wide: bool) {
    if wide {
        run[at] = u64::from(source.id);
        run[at + 1] = source.offset as u64;
    } else {
        run[at] = u64::from(source.id) << 48 | source.offset as u64;
    }
}

pub(super) fn key_at(words: &[u64], start: u32) -> ListKey {
    let s = start as usize;
    u128::from(words[s]) | (u128::from(words[s + 1]) << 64)
}

/// `slack`: the run's spare words past the content (at most [`SLACK_MASK`]).
pub(super) fn encode(key: ListKey, list: &OpenList, counts: Counts, slack: usize, big: bool, run: &mut [u64]) {
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

pub(super) fn source_at(run: &[u64], at: usize, i: usize, wide: bool) -> Source {
    if wide {
        Source { id: run[at + 2 * i] as u32, offset: run[at + 2 * i + 1] as i64 }
    } else {
        Source { id: (run[at + i] >> 48) as u32, offset: (run[at + i] & ((1 << 48) - 1)) as i64 }
    }
}

pub(super) fn decode(run: &[u64], list: &mut OpenList) {
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
    use super::super::ListStore;
    use super::super::testing::{list, same};
    use crate::assemble::OpenList;

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
}
