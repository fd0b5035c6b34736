//! Edits to a list where it rests: a judgment applied to its run, an
//! impression's rank noted in its header, an event refused from its event
//! ids, none of them decoding the list.
//!
//! In the store: the assembler's fast way. Three judgments come for every
//! impression, and decoding and re-encoding the whole list for each was a
//! fifth of the assembler's instructions; [`ListStore::judge_at`] leaves the
//! run word for word as the general way ([`ListStore::load_at`], the edit,
//! [`ListStore::store_at`]) would, and declines what needs the general way.

use super::ListStore;
use super::arena::{holds, slack_of};
use super::big::{BIG_RUN_WORDS, ListBounds};
use super::layout::{
    Counts, FLAG_BITS, FLAG_IMPRESSION, RANDOMIZED_BIT, Sections, key_at, needs_wide, put_source, source_at,
};
use crate::assemble::{Applied, Source};
use crate::metrics::Grade;

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

impl ListStore {
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

    /// Records an impression's rank (its time, and whether it defines the
    /// list) and dimensions on the list at `start` unless one of a lower
    /// rank did (the earliest that defines the list decides).
    /// Returns the rank (see `assemble::list::impression_rank`) and
    /// dimensions the list held before, if it had an impression: the caller
    /// tells impressions that disagree apart.
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
}

#[cfg(test)]
mod tests {
    use super::super::testing::{judge_by_decoding, list};
    use super::*;
    use crate::assemble::OpenList;

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
}
