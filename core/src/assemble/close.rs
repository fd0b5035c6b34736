//! Closing lists: when an open list becomes final, and what becomes of it.
//!
//! In the assembly flow: after each event, and at each tick. A list closes
//! when the watermark passes its last event plus the gap (found by expiry
//! slot, [`ListStore::due`]), when its partition has been idle for a gap of
//! processing time (a walk of every list, at most every
//! `processing_scan_interval`), when `session.max_open_lists` lists are open
//! and it is among the oldest (evicted), when an event of its key comes
//! more than a gap after it (`ingest`), and at shutdown or the end of a
//! replay. `close` finalizes it (`finalize`), reports it, and keeps it for
//! late events (`late`) within the same bound; the kept lists are forgotten
//! once `late.horizon` has passed.

use super::Assembler;
use super::finalize::finalize;
use super::list::{ListKey, OpenList};
use super::notice::Notice;
use super::store::{self, ListStore};

/// Event time between two finalizations from [`Assembler::ingest`]: the
/// width of an expiry slot, so that each sweep finds new lists due.
const SWEEP_EVERY_MS: i64 = store::EXPIRY_SLOT_MS;

/// How often lists of an idle partition are checked against processing
/// time: an eighth of the gap, at most 5 s. Event-time expiry needs no walk
/// (see [`ListStore::due`]); this one walks every list, so it is not done
/// every tick for millions of lists, and an idle list closes at most this
/// much later than a gap after its last arrival.
fn processing_scan_interval(gap_ms: i64) -> i64 {
    (gap_ms / 8).clamp(0, 5_000)
}

impl Assembler {
    /// Input flows again after a restore: processing-time expiry restarts
    /// from `now_ms` for every restored list.
    pub fn resume_clock(&mut self, now_ms: i64) {
        if self.clock_paused {
            self.clock_paused = false;
            self.open_lists.set_arrivals(now_ms);
            self.closed_lists.set_arrivals(now_ms);
        }
    }

    /// Finalizes the lists with the oldest last event, a batch at a time so
    /// that the scan is amortized over many insertions.
    pub(super) fn evict_oldest(&mut self, sink: &mut impl FnMut(Notice)) {
        let mut list = self.scratch.take().unwrap_or_default();
        for (key, _) in oldest(&self.open_lists) {
            if self.open_lists.take(key, &mut list) {
                self.close(key, &mut list, true, sink);
            }
        }
        self.scratch = Some(list);
    }

    /// Finalizes lists whose last event is a gap older than the watermark
    /// (event time), or, when `now_ms` is given, whose last arrival is a gap
    /// older than that processing time (idle partitions; checked at most
    /// every eighth of the gap, at most 5 s). Final lists past the late
    /// horizon are forgotten.
    pub fn finalize_expired(&mut self, now_ms: Option<i64>, sink: &mut impl FnMut(Notice)) {
        // Before any final list is forgotten below.
        self.reinstate_withdrawn(sink);
        let gap = self.limits.gap_ms;
        let horizon = self.limits.late_horizon_ms;
        let watermark = self.watermark_ms;
        self.next_sweep_ms = watermark.saturating_add(SWEEP_EVERY_MS);
        let interval = processing_scan_interval(gap);
        let scan_at = now_ms
            .filter(|_| !self.clock_paused)
            .filter(|&now| self.last_scan_ms.is_none_or(|last| now >= last.saturating_add(interval) || now < last));
        // Event time: last event + gap ≤ watermark.
        let mut expired = match watermark {
            i64::MIN => Vec::new(),
            w => self.open_lists.due(w.saturating_sub(gap)),
        };
        if let Some(now) = scan_at {
            self.last_scan_ms = Some(now);
            expired.extend(
                self.open_lists.headers().filter(|l| l.last_arrival_ms.saturating_add(gap) <= now).map(|l| l.key),
            );
        }
        let mut list = self.scratch.take().unwrap_or_default();
        for key in expired {
            if self.open_lists.take(key, &mut list) {
                self.close(key, &mut list, false, sink);
            }
        }
        self.scratch = Some(list);
        // Final lists are forgotten once the horizon has passed too.
        if watermark > i64::MIN {
            for key in self.closed_lists.due(watermark.saturating_sub(gap).saturating_sub(horizon).saturating_sub(1)) {
                self.closed_lists.remove(key);
            }
        }
        if let Some(now) = scan_at {
            self.closed_lists.retain(|l| l.last_arrival_ms.saturating_add(gap).saturating_add(horizon) > now);
        }
    }

    /// Finalizes every open list (shutdown without checkpoints, end of replay).
    pub fn finalize_all(&mut self, sink: &mut impl FnMut(Notice)) {
        self.reinstate_withdrawn(sink);
        let mut list = self.scratch.take().unwrap_or_default();
        for key in self.open_lists.keys() {
            if self.open_lists.take(key, &mut list) {
                self.close(key, &mut list, false, sink);
            }
        }
        self.scratch = Some(list);
    }

    /// Finalizes `list`, just taken out of the open lists, and reports it
    /// ([`Notice::Evicted`] when it closed early; an orphan when nothing
    /// was shown); then keeps it for late events while `late.horizon`
    /// lasts, forgetting the oldest kept lists past `session.max_open_lists`.
    pub(super) fn close(&mut self, key: ListKey, list: &mut OpenList, evicted: bool, sink: &mut impl FnMut(Notice)) {
        let buffers = &mut self.finals[0];
        match finalize(list, buffers).then(|| buffers.view(&self.dimensions, key)).flatten() {
            Some(f) => {
                sink(if evicted { Notice::Evicted(f) } else { Notice::Final(f) });
                if self.limits.late_horizon_ms > 0 {
                    if self.closed_lists.len() >= self.limits.max_open_lists {
                        // Bounded like the open lists: forget the oldest.
                        for (k, _) in oldest(&self.closed_lists) {
                            self.forget_closed(k, sink);
                            sink(Notice::Forgotten);
                        }
                    }
                    list.offsets.clear();
                    // A list too large to keep takes no late judgments.
                    let _ = self.closed_lists.store(key, list);
                }
            }
            None => sink(Notice::Orphan),
        }
    }
}

/// The keys of the 1/64 of `lists` with the oldest last event (at least
/// one): evicting a batch at a time amortizes the scan.
fn oldest(lists: &ListStore) -> Vec<(ListKey, i64)> {
    let batch = (lists.len() / 64).max(1);
    let mut ages: Vec<(i64, ListKey)> = lists.headers().map(|l| (l.last_event_ms, l.key)).collect();
    if batch < ages.len() {
        ages.select_nth_unstable(batch);
        ages.truncate(batch);
    }
    ages.sort_unstable();
    ages.into_iter().map(|(t, k)| (k, t)).collect()
}

#[cfg(test)]
mod tests {
    use crate::assemble::testing::{Got, ev, imp, judg, limits};
    use crate::assemble::{Applied, Assembler, LatePolicy, Source};

    #[test]
    fn lists_close_as_the_watermark_passes_them_without_a_tick() {
        let mut asm = Assembler::new(10_000, vec![]);
        let mut out: Vec<Got> = Vec::new();
        asm.ingest_t(&ev(&imp("i1", "a", 0, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        asm.ingest_t(&ev(&imp("i2", "b", 5_000, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        assert!(out.is_empty());
        // The watermark reaches 10 s: list a's gap has elapsed, and the
        // event that moved it closes a, with no finalize_expired call.
        asm.ingest_t(&ev(&imp("i3", "c", 10_000, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 1, "list a closed by ingest");
        assert_eq!(asm.open_lists(), 2);
        // A backlog read fast (event time far ahead of the clock) keeps
        // only about a gap of lists open, not everything read since a tick.
        for i in 0..1_000i64 {
            let session = format!("s{i}");
            asm.ingest_t(&ev(&imp(&format!("j{i}"), &session, 11_000 + i * 100, &[("d", 1)])), 100, None, &mut |c| {
                out.push(c.into())
            });
        }
        assert_eq!(out.len(), 1 + 2 + 1_000 - asm.open_lists());
        assert!((100..=111).contains(&asm.open_lists()), "{} open", asm.open_lists());
    }

    #[test]
    fn expiry_by_watermark_and_by_processing_time() {
        let mut asm = Assembler::new(10_000, vec![]);
        let mut out: Vec<Got> = Vec::new();
        asm.ingest_t(&ev(&imp("i1", "a", 0, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        asm.ingest_t(&ev(&imp("i2", "b", 9_999, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 0);
        asm.ingest_t(&ev(&imp("i3", "c", 10_000, &[("d", 1)])), 100, Some(Source { id: 7, offset: 42 }), &mut |c| {
            out.push(c.into())
        });
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 1, "list a closed by the watermark");
        assert_eq!(asm.open_lists(), 2);
        assert_eq!(asm.min_open_offsets(), [Source { id: 7, offset: 42 }]);
        asm.finalize_expired(Some(10_100), &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 3, "idle: processing time closes the rest");
    }

    #[test]
    fn a_flood_of_sessions_evicts_the_oldest_lists() {
        let mut l = limits(LatePolicy::Drop);
        l.max_open_lists = 4;
        l.late_horizon_ms = 0;
        let mut asm = Assembler::with_limits(l, vec![], None);
        let mut out = Vec::new();
        for n in 0..10 {
            asm.ingest_t(&ev(&imp(&format!("i{n}"), &format!("s{n}"), n, &[("d", 1)])), 0, None, &mut |c| {
                out.push(c.into())
            });
            assert!(asm.open_lists() <= 4);
        }
        let evicted: Vec<i64> = out
            .iter()
            .filter_map(|c| match c {
                Got::Evicted(f) => Some(f.impression_ms),
                _ => None,
            })
            .collect();
        assert_eq!(evicted, [0, 1, 2, 3, 4, 5], "oldest first");
        assert_eq!(asm.closed_lists(), 0, "no late horizon: nothing remembered");
    }

    /// Lists kept for late judgments are bounded by `session.max_open_lists`
    /// as the open ones are: a flood of lists evicted within the horizon
    /// keeps at most that many, the oldest forgotten (a late judgment for
    /// one of them starts a list of its own), the newest still amended.
    #[test]
    fn lists_kept_for_late_judgments_are_capped_like_open_ones() {
        let mut l = limits(LatePolicy::Amend);
        l.max_open_lists = 4;
        let mut asm = Assembler::with_limits(l, vec![], None);
        let mut out = Vec::new();
        for n in 0..10 {
            asm.ingest_t(&ev(&imp(&format!("i{n}"), &format!("s{n}"), n, &[("d", 1)])), 0, None, &mut |c| {
                out.push(c.into())
            });
            assert!(asm.closed_lists() <= 4, "{} lists kept after {n}", asm.closed_lists());
        }
        assert_eq!(asm.closed_lists(), 4, "s2 to s5 kept, s0 and s1 forgotten");
        assert_eq!(out.iter().filter(|c| **c == Got::Forgotten).count(), 2, "each forgotten list is reported");
        let amended = |out: &[Got]| out.iter().filter(|c| **c == Got::LateAmended).count();
        let kept = asm.ingest_t(&ev(&judg("j5", "s5", 5, "d", 2)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!((kept, amended(&out)), (Applied::Late, 1));
        let forgotten = asm.ingest_t(&ev(&judg("j0", "s0", 0, "d", 2)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!((forgotten, amended(&out)), (Applied::Added, 1), "s0 was forgotten: a list of its own");
    }
}
