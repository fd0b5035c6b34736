//! Event handling: one event onto its open list.
//!
//! In the assembly flow: the entry point. [`Assembler::ingest`] finds the
//! event's list; closes it first when the event comes more than a gap after
//! it (`close`); hands an event whose list is final to the late policy
//! (`late`); otherwise applies the event to its open list: where the list
//! rests in the store when it can (a judgment, any event of a big list),
//! else in its working form (`list`), stored back; an impression's
//! dimensions are interned (`dimensions`). Then the event's lane moves the
//! watermark (`watermark`), which may close other lists.

use super::Assembler;
use super::list::{
    ListKey, OpenList, Source, apply_impression, apply_judgment, doc_hash, impression_rank, list_key, team_code,
};
use super::notice::{Applied, Notice};
use super::store::{JudgmentEdit, ListBounds};
use crate::event::Event;
use xxhash_rust::xxh3::xxh3_64;

impl Assembler {
    /// Asks the CPU for the memory [`Self::ingest`] will read for `event`'s
    /// list, ahead of it: a consumer that prefetches the lists of a batch
    /// of decoded events before applying them overlaps their cache misses
    /// instead of stalling on each in turn.
    pub fn prefetch(&self, event: &Event) {
        let (session, query) = match event {
            Event::Impression(i) => (&i.session_id, &i.query_id),
            Event::Judgment(j) => (&j.session_id, &j.query_id),
            Event::Ignored(_) => return,
        };
        self.open_lists.prefetch(list_key(session, query.as_deref()));
    }

    /// Applies one event that came in on `lane` (its topic). Lists that it
    /// closes (same key, more than a gap later, unless it repeats one of
    /// the list's events; or evicted to make room) go
    /// to `sink` first; then, each time the watermark has moved on by an
    /// expiry slot (`SWEEP_EVERY_MS`), the lists whose gap has elapsed in
    /// event time.
    pub fn ingest(
        &mut self,
        event: &Event,
        lane: &str,
        arrival_ms: i64,
        source: Option<Source>,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        self.resume_clock(arrival_ms);
        let (session, query, ts, event_id) = match event {
            Event::Impression(i) => (&i.session_id, &i.query_id, i.timestamp_ms, &i.event_id),
            Event::Judgment(j) => (&j.session_id, &j.query_id, j.timestamp_ms, &j.event_id),
            // The pipeline counts these; they belong to no list.
            Event::Ignored(_) => return Applied::Added,
        };
        let key = list_key(session, query.as_deref());
        let event_hash = xxh3_64(event_id.as_bytes());
        let gap = self.limits.gap_ms;
        // The one hash lookup of the event: `at` stays valid until the
        // open lists change, and is cleared whenever they do before `apply`.
        let mut at = self.open_lists.locate(key);
        if let Some(start) = at
            && ts > self.open_lists.last_event_at(start).saturating_add(gap)
        {
            let mut old = self.scratch.take().unwrap_or_default();
            // A re-delivery of one of the list's events stamped anew (a
            // producer's retry that takes the time again) leaves the list
            // open: `apply` finds it a duplicate. Closing it would make
            // late the list's events still to come on a lane that is
            // behind (catching up, judgments trail impressions), which
            // the batch engine, reading in time order, applies to it.
            self.open_lists.load_at(start, &mut old);
            if !old.event_ids.contains(&event_hash) {
                // Decoded above: removed without decoding it again.
                self.open_lists.remove(key);
                self.close(key, &mut old, false, sink);
                at = None;
            }
            self.scratch = Some(old);
        }
        let late = match event {
            // Within a gap of its final list's last event, an impression
            // belongs to that list as a late judgment does, whether a UBI
            // `impression` event (one shown result) or a page of a native
            // list: read in time order, it would have been in the list.
            // A list of its own would count one search twice, a UBI one
            // with no query (`ranker="unknown"`), and take the clicks that
            // follow it.
            Event::Judgment(_) | Event::Impression(_) if at.is_none() => {
                self.late_event(key, event, ts, event_hash, arrival_ms, sink)
            }
            _ => None,
        };
        let applied = match late {
            Some(applied) => applied,
            // A re-delivery stamped anew (a producer's retry that takes the
            // time again), more than a gap after its list: the final list
            // counted it already. Judgments are asked in `late_event`.
            None if at.is_none() && matches!(event, Event::Impression(_)) && self.seen_in_final(key, event_hash) => {
                Applied::Duplicate
            }
            None => {
                if at.is_none() && self.open_lists.len() >= self.limits.max_open_lists {
                    self.evict_oldest(sink);
                }
                let mut list = self.scratch.take().unwrap_or_default();
                let applied = self.apply(key, &mut list, at, event, event_hash, ts, arrival_ms, source, sink);
                self.scratch = Some(list);
                applied
            }
        };
        // Only an event taken moves its lane's time: a re-delivery stamped
        // anew, or an event its list refuses, is discarded, and moving the
        // watermark on it would finalize other lists early. Nothing above
        // reads this event's own lane time (a late event's time is within
        // its list's gap, below any watermark that would make it too late).
        if !matches!(applied, Applied::Duplicate | Applied::TooLarge) {
            self.advance_lane(lane, ts);
        }
        if self.watermark_ms > i64::MIN && self.watermark_ms >= self.next_sweep_ms {
            self.finalize_expired(None, sink);
        }
        applied
    }

    /// Applies an event to the open list of `key` (at `at`, from
    /// [`ListStore::locate`](super::store::ListStore::locate); a new list
    /// when `None`), edited in `list`, and stores it back.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        key: ListKey,
        list: &mut OpenList,
        at: Option<u32>,
        event: &Event,
        event_hash: u64,
        ts: i64,
        arrival_ms: i64,
        source: Option<Source>,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let max_events = self.limits.max_events_per_list;
        if let (Some(start), Event::Judgment(j)) = (at, event) {
            let edit = JudgmentEdit {
                doc: doc_hash(&j.doc_id),
                grade: j.grade,
                event: event_hash,
                max_events,
                ts_ms: ts,
                arrival_ms,
                source,
            };
            if let Some(applied) = self.open_lists.judge_at(start, &edit) {
                return applied;
            }
        }
        if let (Some(start), Event::Impression(i)) = (at, event) {
            let bounds = ListBounds { events: max_events, results: self.limits.max_results_per_list };
            match self.open_lists.big_event(start, event_hash, ts, arrival_ms, source, bounds) {
                Some(Err(refused)) => return refused,
                Some(Ok(_)) => {
                    let dims = self.dimensions.intern(i, &mut |overflow| sink(overflow));
                    let held = self.open_lists.note_impression(start, impression_rank(i), dims, i.randomized);
                    if self.dimensions.disagree(held, i, dims) {
                        sink(Notice::DimensionConflict);
                    }
                    if let Some(big) = self.open_lists.big_mut(key) {
                        for r in &i.results {
                            if !big.show(
                                doc_hash(&r.doc_id),
                                r.position,
                                r.score.unwrap_or(f64::NAN),
                                team_code(r.team),
                            ) {
                                sink(Notice::PositionTaken);
                            }
                        }
                    }
                    return Applied::Added;
                }
                None => {}
            }
        }
        // Nothing below stores or removes a list before it is stored back.
        if let Some(start) = at {
            self.open_lists.load_at(start, list);
        } else {
            list.last_event_ms = ts;
            list.last_arrival_ms = arrival_ms;
            list.impression = None;
            list.randomized = false;
            list.shown.clear();
            list.judged.clear();
            list.event_ids.clear();
            list.offsets.clear();
        }
        if list.event_ids.contains(&event_hash) {
            return Applied::Duplicate;
        }
        if list.event_ids.len() >= max_events {
            return Applied::TooLarge;
        }
        if let Some(src) = source {
            match list.offsets.iter_mut().find(|o| o.id == src.id) {
                Some(o) => o.offset = o.offset.min(src.offset),
                None => list.offsets.push(src),
            }
        }
        list.event_ids.push(event_hash);
        list.last_event_ms = list.last_event_ms.max(ts);
        list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
        match event {
            Event::Impression(i) => {
                let dims = self.dimensions.intern(i, &mut |overflow| sink(overflow));
                if self.dimensions.disagree(list.impression, i, dims) {
                    sink(Notice::DimensionConflict);
                }
                for _ in 0..apply_impression(list, i, dims) {
                    sink(Notice::PositionTaken);
                }
            }
            Event::Judgment(j) => apply_judgment(list, j),
            Event::Ignored(_) => {}
        }
        if self.open_lists.store_at(key, at, list).is_err() {
            // The arena's 2^32 words are full, or the list has more sources
            // than a run records (see `store::MAX_SOURCES`): final now, like
            // an evicted list; later events of the key start a new one.
            self.open_lists.remove(key);
            self.close(key, list, true, sink);
        }
        Applied::Added
    }
}

#[cfg(test)]
mod tests {
    use crate::assemble::testing::{Fin, Got, collect, ev, final_of, imp, judg, limits};
    use crate::assemble::{Applied, Assembler, AssemblyLimits, LatePolicy, MISSING_DIMENSION};
    use crate::metrics::Grade;
    use rustc_hash::FxHashMap;

    #[test]
    fn judgments_before_impression_pages_merge_duplicates_once() {
        let mut asm = Assembler::new(30_000, vec!["ranker".into(), "market".into()]);
        let events = vec![
            judg("j1", "s", 1_000, "d2", 1),
            imp("i2", "s", 2_000, &[("d3", 3)]),
            imp("i1", "s", 1_500, &[("d1", 1), ("d2", 2)]),
            judg("j2", "s", 3_000, "d2", 3),
            judg("j2", "s", 3_000, "d2", 3),
            judg("j3", "s", 3_100, "d1", 0),
            judg("j4", "s", 3_200, "d9", 2),
        ];
        let out = collect(&mut asm, &events);
        assert_eq!(out.len(), 1);
        let f = final_of(&out[0]).unwrap().clone();
        assert_eq!(f.impression_ms, 1_500);
        assert_eq!(f.shown, [0, 3, 0]);
        assert_eq!(f.scores, Some(vec![9.0, 8.0, 7.0]));
        let mut judged = f.judged.clone();
        judged.sort();
        assert_eq!(judged, [0, 2, 3]);
        assert_eq!(&*f.dims, ["a", MISSING_DIMENSION]);
    }

    /// An event delivered again with a new time more than a gap after its
    /// list (a producer's retry that stamps the time anew) counts once
    /// while the final list is remembered (`late.horizon`): it is a
    /// duplicate of the final list's, not a list of its own (an
    /// impression) or an orphan (a judgment).
    #[test]
    fn a_redelivery_stamped_anew_after_the_gap_is_a_duplicate() {
        // Final lists are remembered for the late horizon (1m) only.
        let mut asm = Assembler::with_limits(AssemblyLimits::default(), vec!["ranker".into()], None);
        let mut out = Vec::new();
        let mut ingest = |asm: &mut Assembler, e: &str| asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(ingest(&mut asm, &imp("i1", "s", 1_000, &[("d1", 1), ("d2", 2)])), Applied::Added);
        assert_eq!(ingest(&mut asm, &judg("j1", "s", 3_000, "d2", 2)), Applied::Added);
        assert_eq!(ingest(&mut asm, &imp("i1", "s", 61_000, &[("d1", 1), ("d2", 2)])), Applied::Duplicate);
        assert_eq!(ingest(&mut asm, &judg("j1", "s", 62_000, "d2", 2)), Applied::Duplicate);
        // Another event of the key that late: a list of its own, as before.
        assert_eq!(ingest(&mut asm, &imp("i2", "s", 63_000, &[("d3", 1)])), Applied::Added);
        asm.finalize_all(&mut |c| out.push(c.into()));
        let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
        assert_eq!(finals.len(), 2, "{out:?}");
        assert_eq!(finals[0].shown.len(), 2);
        assert_eq!(finals[1].shown.len(), 1);
    }

    #[test]
    fn another_document_at_a_taken_position_is_dropped_and_counted() {
        // Compact lists, and lists past BIG_RUN_WORDS (250 results), which
        // index positions in a hash map: the same rule, the same count.
        for size in [2u32, 250] {
            let mut asm = Assembler::new(30_000, vec![]);
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            // Pages of at most 200 results (the decoder's limit).
            let (first, rest) = docs.split_at(docs.len().min(200));
            let events = vec![
                imp("i1", "s", 1_000, first),
                imp("i1b", "s", 1_000, rest),
                // A page sent again under a new event id: the same
                // documents at the same positions, nothing to count.
                imp("i2", "s", 1_100, first),
                // A second search of the session under the same key: two
                // positions taken by other documents, one new position.
                imp("i3", "s", 1_200, &[("x1", 1), ("x2", 2), ("x3", size + 1)]),
            ];
            let out = collect(&mut asm, &events);
            let taken = out.iter().filter(|c| **c == Got::PositionTaken).count();
            assert_eq!(taken, 2, "size {size}");
            let f = out.iter().find_map(final_of).unwrap();
            assert_eq!(f.shown.len(), size as usize + 1, "size {size}: the first document keeps each position");
        }
    }

    #[test]
    fn a_gap_splits_lists_and_orphans_are_reported() {
        let mut asm = Assembler::new(10_000, vec!["ranker".into()]);
        let events = vec![
            imp("i1", "s", 0, &[("d1", 1)]),
            judg("j1", "s", 5_000, "d1", 1),
            // 10.001 s after the last event: a new list.
            imp("i2", "s", 15_001, &[("d1", 1)]),
            judg("j9", "other", 0, "d1", 1),
        ];
        let out = collect(&mut asm, &events);
        let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
        assert_eq!(finals.len(), 2);
        assert_eq!(finals[0].shown, [1]);
        assert_eq!(out.iter().filter(|c| **c == Got::Orphan).count(), 1);
    }

    /// A hot key (10,000 results over 50 pages, 10,000 judgments, then
    /// 1,000 late judgments with re-deliveries) gives the same lists and
    /// values as the same events spread so that no list grows large.
    #[test]
    fn a_hot_key_is_assembled_like_any_list() {
        let mut asm = Assembler::with_limits(limits(LatePolicy::Amend), vec![], None);
        let mut out: Vec<Got> = Vec::new();
        let page = |n: u32| -> String {
            let docs: Vec<(String, u32)> =
                (0..200).map(|i| (format!("d{}", (n * 200 + i) % 9_000), n * 200 + i + 1)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            imp(&format!("p{n}"), "hot", n as i64, &docs)
        };
        for n in 0..50 {
            asm.ingest_t(&ev(&page(n)), 0, None, &mut |c| out.push(c.into()));
        }
        // A re-delivered page changes nothing.
        assert_eq!(asm.ingest_t(&ev(&page(7)), 0, None, &mut |c| out.push(c.into())), Applied::Duplicate);
        for n in 0..10_000 {
            let e = judg(&format!("j{n}"), "hot", 100, &format!("d{}", (n * 7) % 12_000), n % 5);
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.ingest_t(&ev(&imp("x", "other", 20_000, &[("d", 1)])), 0, None, &mut |c| out.push(c.into()));
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        let first = out.iter().filter_map(final_of).find(|f| f.shown.len() > 1).unwrap().clone();
        assert_eq!(first.shown.len(), 9_000, "documents repeat after 9,000 positions: first one counts");
        for n in 0..1_000 {
            let e = judg(&format!("late{}", n % 900), "hot", 200, &format!("d{}", n * 9), 4);
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.finalize_all(&mut |c| out.push(c.into()));
        let amended = out.iter().filter(|c| **c == Got::LateAmended).count();
        assert_eq!(amended, 900, "100 re-deliveries");
        let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
        let [Got::Withdrawn(old), Got::Reinstated(new)] = moved[..] else { panic!("{} moves", moved.len()) };
        assert_eq!(*old, first);
        // The reference: the grades by hand, from the events' definitions.
        let mut grade: FxHashMap<String, i32> = FxHashMap::default();
        for n in 0..10_000 {
            let g = grade.entry(format!("d{}", (n * 7) % 12_000)).or_default();
            *g = (*g).max(n % 5);
        }
        for n in 0..900 {
            grade.insert(format!("d{}", n * 9), 4);
        }
        let shown: Vec<Grade> = (0..9_000).map(|p| grade.get(&format!("d{p}")).copied().unwrap_or(0)).collect();
        assert_eq!(new.shown, shown);
        let mut judged = new.judged.clone();
        judged.sort_unstable();
        let mut want: Vec<Grade> = grade.values().copied().collect();
        want.sort_unstable();
        assert_eq!(judged, want);
    }
}
