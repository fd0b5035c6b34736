//! Event time: the lanes (input topics) of a shard and the watermark, the
//! oldest of their newest event times.
//!
//! In the assembly flow: each event [`Assembler::ingest`] takes moves its
//! lane's time ([`Assembler::advance_lane`]); the watermark that follows
//! decides which lists have closed in event time (`close`). A lane declared
//! but silent holds it back ([`Assembler::expect_lanes`]).

use super::Assembler;

impl Assembler {
    /// Declares the lanes this assembler's input has (the daemon: the
    /// topics assigned for its partition). A lane that has delivered
    /// nothing yet holds the watermark back: otherwise the first batch of
    /// impressions fetched before the first judgments of the same partition
    /// would close their lists, and the judgments would start lists of
    /// their own.
    pub fn expect_lanes<'a>(&mut self, lanes: impl IntoIterator<Item = &'a str>) {
        for lane in lanes {
            if !self.lanes.iter().any(|(name, _)| name == lane) {
                self.lanes.push((lane.to_string(), i64::MIN));
            }
        }
        self.update_watermark();
    }

    /// An event stamped `ts` was taken on `lane`: the lane's newest event
    /// time, and with it the watermark, move on (a lane not declared is
    /// added).
    pub(super) fn advance_lane(&mut self, lane: &str, ts: i64) {
        match self.lanes.iter_mut().find(|(name, _)| name == lane) {
            Some((_, newest)) => *newest = (*newest).max(ts),
            None => self.lanes.push((lane.to_string(), ts)),
        }
        self.update_watermark();
    }

    /// The watermark is the oldest of the lanes' newest event times.
    pub(super) fn update_watermark(&mut self) {
        self.watermark_ms = self.lanes.iter().map(|(_, t)| *t).min().unwrap_or(i64::MIN);
    }

    /// Each lane (input topic) with its newest event time (`i64::MIN`:
    /// declared, nothing delivered yet).
    pub fn lanes(&self) -> &[(String, i64)] {
        &self.lanes
    }

    pub fn watermark_ms(&self) -> i64 {
        self.watermark_ms
    }
}

#[cfg(test)]
mod tests {
    use crate::assemble::testing::{Got, ev, final_of, imp, judg};
    use crate::assemble::{Applied, Assembler};

    /// Catching up, the impressions topic runs ahead of the judgments
    /// topic: an impression re-sent with a new time more than a gap after
    /// its list comes before the list's judgments. It must not close the
    /// list, or those judgments become late amendments where the batch
    /// engine, in time order, applies them to the list.
    #[test]
    fn a_redelivery_stamped_anew_does_not_close_its_list_before_a_lane_behind() {
        let mut asm = Assembler::new(10_000, vec!["ranker".into()]);
        asm.expect_lanes(["impressions", "judgments"]);
        let mut out = Vec::new();
        let mut ingest =
            |asm: &mut Assembler, e: &str, lane: &str| asm.ingest(&ev(e), lane, 100, None, &mut |c| out.push(c.into()));
        let i1 = imp("i1", "s", 1_000, &[("d1", 1), ("d2", 2)]);
        assert_eq!(ingest(&mut asm, &i1, "impressions"), Applied::Added);
        let again = imp("i1", "s", 40_000, &[("d1", 1), ("d2", 2)]);
        assert_eq!(ingest(&mut asm, &again, "impressions"), Applied::Duplicate);
        assert_eq!(ingest(&mut asm, &judg("j1", "s", 2_000, "d2", 3), "judgments"), Applied::Added);
        asm.finalize_all(&mut |c| out.push(c.into()));
        assert_eq!(out.len(), 1, "one final list, nothing late: {out:?}");
        let f = final_of(&out[0]).unwrap();
        assert_eq!((f.shown.len(), f.judged.iter().filter(|&&g| g > 0).count()), (2, 1), "{f:?}");
    }

    /// The daemon's startup: one fetch brought a partition's impressions
    /// (spanning more than a gap) before any of its judgments.
    #[test]
    fn a_lane_that_has_not_delivered_yet_holds_event_time_closing_back() {
        for expected in [false, true] {
            let mut asm = Assembler::new(3_000, vec![]);
            if expected {
                asm.expect_lanes(["impressions", "judgments"]);
            }
            let mut out = Vec::new();
            for (i, ts) in [0, 2_000, 4_000, 6_000].into_iter().enumerate() {
                let e = imp(&format!("i{i}"), &format!("s{i}"), ts, &[("d1", 1)]);
                asm.ingest(&ev(&e), "impressions", 100, None, &mut |c| out.push(c.into()));
            }
            // A tick between the two batches.
            asm.finalize_expired(None, &mut |c| out.push(c.into()));
            asm.ingest(&ev(&judg("j0", "s0", 1, "d1", 2)), "judgments", 100, None, &mut |c| out.push(c.into()));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let orphans = out.iter().filter(|c| **c == Got::Orphan).count();
            let s0 = out.iter().filter_map(final_of).find(|f| f.impression_ms == 0).map(|f| f.shown.clone());
            if expected {
                assert_eq!((orphans, s0), (0, Some(vec![2])), "the judgment joins its list");
            } else {
                // What happened before the daemon declared its lanes: the
                // impressions alone moved the watermark past s0's gap.
                assert_eq!((orphans, s0), (1, Some(vec![0])));
            }
        }
    }
}
