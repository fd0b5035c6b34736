//! Sources: the lowest input offset each source (topic-partition) still
//! has in a list, which bounds the offsets the daemon may commit when it
//! runs without checkpoints.
//!
//! In the store: [`ListStore::sources`] reads them all at once;
//! [`ListStore::scan_sources`] walks the arena a slice at a time, so that
//! a million lists do not hold the consumer, and every write behind the
//! walk's cursor ([`ListStore::store_at`], [`ListStore::judge_at`]) folds
//! the sources of the run it wrote into the walk instead.

use super::ListStore;
use super::arena::run_words;
use super::layout::{Counts, FREE_RUN, source_at};
use crate::assemble::Source;

/// A walk of the arena in slices, for the lowest offset each source still
/// has in a list (the commit point without checkpoints): walked at once,
/// every list's run is read while the consumer waits. In slices, a list
/// the walk could miss is one written (created, grown, moved, given a
/// source) while it is under way, and every such write folds its sources
/// in here instead.
#[derive(Debug, Default)]
pub(super) struct SourceScan {
    /// The start of the next run to walk: always a run boundary (free runs
    /// are reused whole, and compaction maps it along with the runs).
    pub(super) cursor: usize,
    pub(super) min: Vec<Source>,
}

impl SourceScan {
    /// A shard's lists come from a handful of sources (its partition of
    /// each topic): a linear search beats hashing.
    pub(super) fn fold(&mut self, src: Source) {
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

impl ListStore {
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
    pub(super) fn scanned_write(&mut self, start: usize) {
        if let Some(scan) = &mut self.scan {
            let run = &self.words[start..];
            let counts = Counts::read(run);
            let at = counts.sections().sources;
            for i in 0..counts.sources {
                scan.fold(source_at(run, at, i, counts.wide_sources));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::JudgmentEdit;
    use super::super::testing::judge_by_decoding;
    use super::*;
    use crate::assemble::{ListKey, OpenList, ShownDoc};

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
