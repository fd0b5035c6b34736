//! Late events: judgments and impressions that arrive after their list is
//! final, handled by `late.policy` within `late.horizon`.
//!
//! In the assembly flow: [`Assembler::ingest`] hands here an event whose
//! key has no open list. If a final list of the key is still kept and the
//! event falls within a gap of its last event, it belongs to that list:
//! under `amend` the list leaves the windows ([`Notice::Withdrawn`]), takes
//! the event, and comes back at the next sweep with every late event since
//! ([`Notice::Reinstated`]); under `drop` the event is only remembered, so
//! that a re-delivery is a duplicate. Otherwise the event starts a list of
//! its own.

use super::Assembler;
use super::finalize::finalize;
use super::limits::LatePolicy;
use super::list::{ListKey, OpenList, apply_impression, apply_judgment, doc_hash, impression_rank, team_code};
use super::notice::{Applied, Notice};
use super::store::{JudgmentEdit, ListBounds};
use crate::event::{Event, Impression, Judgment};

impl Assembler {
    /// A judgment or an impression stamped `ts` whose list is final: within the horizon, the late policy decides; `None` when it
    /// is not late (it starts a new list).
    pub(super) fn late_event(
        &mut self,
        key: ListKey,
        event: &Event,
        ts: i64,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Option<Applied> {
        let (gap, horizon) = (self.limits.gap_ms, self.limits.late_horizon_ms);
        let watermark = self.watermark_ms;
        let header = self.closed_lists.header(key)?;
        // It belongs to the final list only if, in event time, it falls
        // within a gap of the list's last event; past that it starts a new
        // list. And the list takes it only within the horizon after it
        // became final.
        let closed_at = header.last_event_ms.saturating_add(gap);
        if ts > closed_at || watermark > closed_at.saturating_add(horizon) {
            if self.seen_in_final(key, event_hash) {
                return Some(Applied::Duplicate);
            }
            self.forget_closed(key, sink);
            return None;
        }
        let mut list = self.scratch.take().unwrap_or_default();
        let applied = self.late_event_to(key, &mut list, event, event_hash, arrival_ms, sink);
        self.scratch = Some(list);
        Some(applied)
    }

    fn late_event_to(
        &mut self,
        key: ListKey,
        list: &mut OpenList,
        event: &Event,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let Some(start) = self.closed_lists.locate(key) else { return Applied::Late };
        let max_events = self.limits.max_events_per_list;
        let amend = self.limits.late_policy == LatePolicy::Amend;
        if amend && !self.withdrawn.contains(&key) {
            // The first late judgment since the last sweep: the list's
            // values leave the windows until then. One it refuses leaves
            // the list as it is, and is refused before the list is decoded.
            if let Some(refused) = self.closed_lists.refusal(start, event_hash, max_events) {
                return refused;
            }
            self.closed_lists.load_at(start, list);
            let buffers = &mut self.finals[0];
            if finalize(list, buffers)
                && let Some(old) = buffers.view(&self.dimensions, key)
            {
                sink(Notice::Withdrawn(old));
            }
            self.withdrawn.insert(key);
        }
        let applied = match event {
            Event::Impression(shown) if amend => self.late_shown(key, start, list, shown, event_hash, arrival_ms, sink),
            Event::Judgment(judgment) if amend => {
                self.late_judged(key, start, list, judgment, event_hash, arrival_ms, sink)
            }
            _ => self.late_dropped(key, start, list, event_hash, arrival_ms),
        };
        match applied {
            Applied::Added => {
                sink(if amend { Notice::LateAmended } else { Notice::LateDropped });
                Applied::Late
            }
            other => other,
        }
    }

    /// A late judgment amends its final list.
    #[allow(clippy::too_many_arguments)]
    fn late_judged(
        &mut self,
        key: ListKey,
        start: u32,
        list: &mut OpenList,
        judgment: &Judgment,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let max_events = self.limits.max_events_per_list;
        let edit = JudgmentEdit {
            doc: doc_hash(&judgment.doc_id),
            grade: judgment.grade,
            event: event_hash,
            max_events,
            // A late judgment does not make the list younger: it is final,
            // and its expiry follows its own events.
            ts_ms: i64::MIN,
            arrival_ms,
            source: None,
        };
        match self.closed_lists.judge_at(start, &edit) {
            Some(applied) => applied,
            None => {
                self.closed_lists.load_at(start, list);
                let applied = if list.event_ids.contains(&event_hash) {
                    Applied::Duplicate
                } else if list.event_ids.len() >= max_events {
                    Applied::TooLarge
                } else {
                    list.event_ids.push(event_hash);
                    list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
                    apply_judgment(list, judgment);
                    Applied::Added
                };
                if applied == Applied::Added && self.closed_lists.store_at(key, Some(start), list).is_err() {
                    // The arena is full: the list takes no more.
                    self.forget_closed(key, sink);
                }
                applied
            }
        }
    }

    /// A late impression (a UBI impression event, a page of a native list)
    /// shows its results in its final list, as it would have in the open
    /// one (the same steps as `apply`).
    #[allow(clippy::too_many_arguments)]
    fn late_shown(
        &mut self,
        key: ListKey,
        start: u32,
        list: &mut OpenList,
        shown: &Impression,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let bounds = ListBounds { events: self.limits.max_events_per_list, results: self.limits.max_results_per_list };
        match self.closed_lists.big_event(start, event_hash, i64::MIN, arrival_ms, None, bounds) {
            Some(Err(refused)) => return refused,
            Some(Ok(_)) => {
                let dims = self.dimensions.intern(shown, &mut |overflow| sink(overflow));
                let held = self.closed_lists.note_impression(start, impression_rank(shown), dims, shown.randomized);
                if self.dimensions.disagree(held, shown, dims) {
                    sink(Notice::DimensionConflict);
                }
                if let Some(big) = self.closed_lists.big_mut(key) {
                    for r in &shown.results {
                        let score = r.score.unwrap_or(f64::NAN);
                        if !big.show(doc_hash(&r.doc_id), r.position, score, team_code(r.team)) {
                            sink(Notice::PositionTaken);
                        }
                    }
                }
                return Applied::Added;
            }
            None => {}
        }
        self.closed_lists.load_at(start, list);
        if list.event_ids.contains(&event_hash) {
            return Applied::Duplicate;
        }
        if list.event_ids.len() >= bounds.events {
            return Applied::TooLarge;
        }
        list.event_ids.push(event_hash);
        list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
        let dims = self.dimensions.intern(shown, &mut |overflow| sink(overflow));
        if self.dimensions.disagree(list.impression, shown, dims) {
            sink(Notice::DimensionConflict);
        }
        for _ in 0..apply_impression(list, shown, dims) {
            sink(Notice::PositionTaken);
        }
        if self.closed_lists.store_at(key, Some(start), list).is_err() {
            // The arena is full: the list takes no more.
            self.forget_closed(key, sink);
        }
        Applied::Added
    }

    /// A late event under `late.policy = "drop"`: not applied, but
    /// remembered, so that a re-delivery is a duplicate.
    fn late_dropped(
        &mut self,
        key: ListKey,
        start: u32,
        list: &mut OpenList,
        event_hash: u64,
        arrival_ms: i64,
    ) -> Applied {
        let max_events = self.limits.max_events_per_list;
        let bounds = ListBounds { events: max_events, results: usize::MAX };
        match self.closed_lists.big_event(start, event_hash, i64::MIN, arrival_ms, None, bounds) {
            Some(Ok(_)) => Applied::Added,
            Some(Err(refused)) => refused,
            None => {
                self.closed_lists.load_at(start, list);
                if list.event_ids.contains(&event_hash) {
                    Applied::Duplicate
                } else if list.event_ids.len() >= max_events {
                    Applied::TooLarge
                } else {
                    list.event_ids.push(event_hash);
                    if self.closed_lists.store_at(key, Some(start), list).is_err() {
                        self.closed_lists.remove(key);
                    }
                    Applied::Added
                }
            }
        }
    }

    /// Puts every withdrawn list back into the windows, with the late
    /// judgments it took (see [`Notice::Withdrawn`]): before the lists are
    /// dropped, or the windows would lack them for good.
    pub fn reinstate_withdrawn(&mut self, sink: &mut impl FnMut(Notice)) {
        if self.withdrawn.is_empty() {
            return;
        }
        let mut keys: Vec<ListKey> = self.withdrawn.drain().collect();
        keys.sort_unstable();
        for key in keys {
            self.reinstate(key, sink);
        }
    }

    fn reinstate(&mut self, key: ListKey, sink: &mut impl FnMut(Notice)) {
        let mut list = self.scratch.take().unwrap_or_default();
        if self.closed_lists.load(key, &mut list) {
            let buffers = &mut self.finals[0];
            if finalize(&mut list, buffers)
                && let Some(new) = buffers.view(&self.dimensions, key)
            {
                sink(Notice::Reinstated(new));
            }
        }
        self.scratch = Some(list);
    }

    /// Whether the final list of `key`, still remembered for late events,
    /// took the event `event_hash`.
    pub(super) fn seen_in_final(&self, key: ListKey, event_hash: u64) -> bool {
        self.closed_lists
            .locate(key)
            .is_some_and(|start| self.closed_lists.refusal(start, event_hash, usize::MAX) == Some(Applied::Duplicate))
    }

    /// Forgets a final list, putting it back into the windows first if it
    /// was withdrawn.
    pub(super) fn forget_closed(&mut self, key: ListKey, sink: &mut impl FnMut(Notice)) {
        if self.withdrawn.remove(&key) {
            self.reinstate(key, sink);
        }
        self.closed_lists.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use crate::assemble::testing::{Fin, Got, ev, final_of, imp, judg, limits, shown};
    use crate::assemble::{Assembler, LatePolicy};
    use crate::event::{DecodeLimits, Event};
    use crate::metrics::Grade;

    #[test]
    fn late_judgments_amend_or_drop_within_the_horizon() {
        for policy in [LatePolicy::Amend, LatePolicy::Drop] {
            let mut asm = Assembler::with_limits(limits(policy), vec![], None);
            let mut out = Vec::new();
            let mut feed = |asm: &mut Assembler, e: String| {
                asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
                asm.finalize_expired(None, &mut |c| out.push(c.into()));
            };
            feed(&mut asm, imp("i1", "s", 0, &[("d1", 1), ("d2", 2)]));
            feed(&mut asm, judg("j1", "s", 1_000, "d1", 1));
            // Another list moves the watermark past 1 s + gap: s is final.
            feed(&mut asm, imp("i2", "t", 20_000, &[("d1", 1)]));
            // Belongs to s in event time (within a gap of its last event), arrives late.
            feed(&mut asm, judg("j2", "s", 5_000, "d2", 3));
            // A re-delivery of it changes nothing.
            feed(&mut asm, judg("j2", "s", 5_000, "d2", 3));
            // More than a gap after s's last event: a new list (an orphan).
            feed(&mut asm, judg("j3", "s", 12_000, "d1", 1));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals[0].shown, [1, 0]);
            let amended = out.iter().filter(|c| **c == Got::LateAmended).count();
            let dropped = out.iter().filter(|c| **c == Got::LateDropped).count();
            let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
            match policy {
                LatePolicy::Amend => {
                    assert_eq!((amended, dropped), (1, 0));
                    let [Got::Withdrawn(old), Got::Reinstated(new)] = moved[..] else { panic!("{moved:?}") };
                    assert_eq!((old.shown.as_slice(), new.shown.as_slice()), ([1, 0].as_slice(), [1, 3].as_slice()));
                }
                LatePolicy::Drop => assert_eq!((amended, dropped, moved.len()), (0, 1, 0)),
            }
            assert_eq!(out.iter().filter(|c| **c == Got::Orphan).count(), 1, "{policy:?}");
        }
    }

    /// A page of a native list that arrives after its list is final, but
    /// stamped within a gap of the list's last event, belongs to that list
    /// as a late judgment does: amended into it (or dropped, by policy)
    /// exactly as the list would have been had it come in time order, not
    /// a second list of the same search. On a compact list and on a big
    /// one; a late page with other dimensions is a conflict, as in time.
    #[test]
    fn late_pages_of_a_native_list_amend_it_as_in_time_order() {
        let page = |id: &str, ts: i64, docs: &[(String, u32)], ranker: &str, randomized: bool| {
            let results: Vec<String> =
                docs.iter().map(|(d, p)| format!(r#"{{"doc_id":"{d}","position":{p},"score":1}}"#)).collect();
            format!(
                r#"{{"type":"impression","event_id":"{id}","session_id":"s","query_id":"q","timestamp":{ts},"results":[{}],"randomized":{randomized},"dimensions":{{"ranker":"{ranker}"}}}}"#,
                results.join(",")
            )
        };
        for (size, policy) in
            [(3u32, LatePolicy::Amend), (3, LatePolicy::Drop), (300, LatePolicy::Amend), (300, LatePolicy::Drop)]
        {
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            // Pages of at most 200 results (the decoder's limit); the late
            // one shows one more result, randomized, at 2 s.
            let mut pages = vec![page("p1", 0, &docs[..docs.len().min(200)], "a", false)];
            if size > 200 {
                pages.push(page("p1b", 0, &docs[200..], "a", false));
            }
            let late = page("p2", 2_000, &[(format!("d{}", size + 1), size + 1)], "a", true);
            let conflict = page("p3", 2_500, &[(format!("d{}", size + 2), size + 2)], "b", false);
            let click = judg("j1", "s", 1_000, "d1", 1);
            let other = imp("t1", "t", 20_000, &[("d1", 1)]);
            let run = |order: &[&String]| {
                let mut asm = Assembler::with_limits(limits(policy), vec!["ranker".into()], None);
                let mut out = Vec::new();
                for e in order {
                    asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
                    asm.finalize_expired(None, &mut |c| out.push(c.into()));
                }
                asm.finalize_all(&mut |c| out.push(c.into()));
                out
            };
            let mut arrived: Vec<&String> = pages.iter().collect();
            // `other` moves the watermark past 1 s + gap: s is final.
            arrived.extend([&click, &other, &late, &conflict, &late]);
            let out = run(&arrived);
            let mut in_time: Vec<&String> = pages.iter().collect();
            in_time.extend([&click, &late, &conflict, &other]);
            let expected = run(&in_time);
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals.len(), 2, "{size} {policy:?}: one list per search: {finals:?}");
            let count = |out: &[Got], g: Got| out.iter().filter(|c| **c == g).count();
            let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
            match policy {
                LatePolicy::Amend => {
                    // The two pages, not their re-delivery.
                    assert_eq!(count(&out, Got::LateAmended), 2, "{size}");
                    assert_eq!(count(&out, Got::DimensionConflict), 1, "{size}");
                    assert_eq!(count(&expected, Got::DimensionConflict), 1, "{size}");
                    let Some(Got::Reinstated(now)) = moved.last() else { panic!("{size}: {moved:?}") };
                    let in_order = expected.iter().filter_map(final_of).find(|f| f.shown.len() > 1).unwrap();
                    assert_eq!(now, in_order, "{size}: amended as in time order");
                    assert!(now.randomized && now.shown.len() == size as usize + 2, "{size}: {now:?}");
                }
                LatePolicy::Drop => {
                    assert_eq!((count(&out, Got::LateDropped), moved.len()), (2, 0), "{size}");
                    assert!(!finals[0].randomized && finals[0].shown.len() == size as usize, "{size}");
                }
            }
            assert_eq!(count(&out, Got::Orphan), 0, "{size} {policy:?}");
        }
    }

    /// A UBI impression event whose list is final belongs to it as a late
    /// judgment does: amended into it (or dropped, by policy), not a list
    /// of its own without a query that takes the clicks after it. On a
    /// compact list and on one past BIG_RUN_WORDS (250 results), which
    /// indexes its positions in a hash map.
    #[test]
    fn late_impression_events_amend_their_final_list() {
        for (size, policy) in
            [(2u32, LatePolicy::Amend), (2, LatePolicy::Drop), (300, LatePolicy::Amend), (300, LatePolicy::Drop)]
        {
            let mut asm = Assembler::with_limits(limits(policy), vec![], None);
            let mut out = Vec::new();
            let limits = DecodeLimits::default();
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            let extra = format!("d{}", size + 1);
            let mut feed = |asm: &mut Assembler, e: &Event| {
                asm.ingest_t(e, 0, None, &mut |c| out.push(c.into()));
                asm.finalize_expired(None, &mut |c| out.push(c.into()));
            };
            // Pages of at most 200 results (the decoder's limit).
            let (first, rest) = docs.split_at(docs.len().min(200));
            feed(&mut asm, &ev(&imp("i1", "s", 0, first)));
            if !rest.is_empty() {
                feed(&mut asm, &ev(&imp("i1b", "s", 0, rest)));
            }
            feed(&mut asm, &ev(&judg("j1", "s", 1_000, "d1", 1)));
            // Another list moves the watermark past 1 s + gap: s is final.
            feed(&mut asm, &ev(&imp("i2", "t", 20_000, &[("d1", 1)])));
            // One more result (0-based ordinal `size`), shown at 5 s, arrives
            // late; then a click on it.
            let late = shown("e1", 5_000, &extra, size);
            let late = crate::event::ubi::decode(crate::event::Format::UbiEvents, late.as_bytes(), &limits).unwrap();
            feed(&mut asm, &late);
            feed(&mut asm, &late);
            feed(&mut asm, &ev(&judg("j2", "s", 5_500, &extra, 3)));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals.len(), 2, "{size} {policy:?}: no list of its own: {finals:?}");
            let amended = out.iter().filter(|c| **c == Got::LateAmended).count();
            let dropped = out.iter().filter(|c| **c == Got::LateDropped).count();
            let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
            match policy {
                LatePolicy::Amend => {
                    // The re-delivery is a duplicate. The list leaves the
                    // windows and comes back at each sweep: with the extra
                    // result shown last, then with its grade.
                    assert_eq!((amended, dropped), (2, 0), "{size}");
                    let shown: Vec<&[Grade]> = moved
                        .iter()
                        .map(|g| match g {
                            Got::Withdrawn(f) | Got::Reinstated(f) => f.shown.as_slice(),
                            _ => unreachable!(),
                        })
                        .collect();
                    let grades = |n: usize, last: Grade| {
                        let mut g = vec![0; n];
                        g[0] = 1;
                        g[n - 1] = last.max(g[n - 1]);
                        g
                    };
                    let n = size as usize;
                    let expected = [grades(n, 0), grades(n + 1, 0), grades(n + 1, 0), grades(n + 1, 3)];
                    assert_eq!(shown, expected.iter().map(Vec::as_slice).collect::<Vec<_>>(), "{size}");
                }
                LatePolicy::Drop => assert_eq!((amended, dropped, moved.len()), (0, 2, 0), "{size}"),
            }
            assert_eq!(out.iter().filter(|c| **c == Got::Orphan).count(), 0, "{size} {policy:?}");
        }
    }
}
