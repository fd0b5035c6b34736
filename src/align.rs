//! Event-time alignment of a partition's topics, on the consuming side of
//! the data flow: between the Kafka consumer and `assemble`, it decides
//! which topic of a partition to hold back so that none runs far ahead of
//! the others in event time (`kafka.max_topic_drift`).
//!
//! Why: a list needs its impression (one topic) and its judgments (another).
//! librdkafka fetches each topic-partition by bytes, and a megabyte holds
//! about four times as many judgments as impressions, so a consumer catching
//! up on a backlog would read the judgments far ahead of their impressions.
//! Every such judgment waits in an open list until its impression comes,
//! and the lists cannot close on event time, which follows the slowest
//! topic (the watermark). The daemon reads the lane furthest behind first,
//! which keeps the topics together while each has data fetched; holding a
//! lane back bounds the lead when the slower one has none yet. Flink calls
//! this watermark alignment.
//!
//! A lane is one topic of a partition (as in `assemble`); its event time is
//! the newest event it delivered. The reference is the slowest lane that has
//! delivered anything: a topic that is empty or not yet fetched holds
//! nothing back. A lane is held back when it leads the reference by more
//! than the drift and released once its lead is at most half the drift. A
//! lane held for [`MAX_HOLD_MS`] is released whatever its lead (the slower
//! topic has stalled: its producer is down, or an event far in the future
//! made this lane look ahead) and is not held again until the reference
//! reaches the event time it had then: a silent judgments feed must never
//! throttle impressions.
//!
//! This module only decides; the daemon stops reading a held lane's
//! partition queue (`daemon::lanes`), whose prefetch librdkafka keeps.

/// Longest a lane stays held back, processing time (ms).
pub const MAX_HOLD_MS: i64 = 2_000;

/// A lane held now.
#[derive(Debug, Clone)]
struct Held {
    lane: String,
    /// Processing time of the hold, for [`MAX_HOLD_MS`].
    since_ms: i64,
}

/// One partition's alignment state.
#[derive(Debug, Clone, Default)]
pub struct Alignment {
    held: Vec<Held>,
    /// Lanes whose hold timed out, with the reference event time that
    /// ends their exemption: until the slower lanes get there, they are
    /// not held again.
    exempt: Vec<(String, i64)>,
}

impl Alignment {
    /// Whether any lane is held now.
    pub fn any_held(&self) -> bool {
        !self.held.is_empty()
    }

    /// Whether `lane` is held now.
    pub fn is_held(&self, lane: &str) -> bool {
        self.held.iter().any(|p| p.lane == lane)
    }

    /// Looks at the lanes (name, newest event time; `i64::MIN` for none yet)
    /// at processing time `now_ms` and calls `change(lane, hold)` for each
    /// hold (true) and release (false) due. Cheap when nothing changes: a
    /// few comparisons per lane.
    pub fn check(&mut self, lanes: &[(String, i64)], drift_ms: i64, now_ms: i64, change: &mut impl FnMut(&str, bool)) {
        let Some(reference) = lanes.iter().map(|(_, t)| *t).filter(|&t| t != i64::MIN).min() else { return };
        if !self.exempt.is_empty() {
            self.exempt.retain(|(_, until)| reference < *until);
        }
        for (lane, newest) in lanes {
            if *newest == i64::MIN {
                continue;
            }
            let lead = newest.saturating_sub(reference);
            match self.held.iter().position(|p| &p.lane == lane) {
                Some(i) => {
                    let timed_out = now_ms.saturating_sub(self.held[i].since_ms) >= MAX_HOLD_MS;
                    if lead <= drift_ms / 2 || timed_out {
                        self.held.swap_remove(i);
                        if timed_out && lead > drift_ms / 2 {
                            self.exempt.push((lane.clone(), *newest));
                        }
                        change(lane, false);
                    }
                }
                None => {
                    if lead > drift_ms && !self.exempt.iter().any(|(l, _)| l == lane) {
                        self.held.push(Held { lane: lane.clone(), since_ms: now_ms });
                        change(lane, true);
                    }
                }
            }
        }
    }

    /// Forgets every hold and exemption (the partition was revoked or
    /// assigned anew), returning the lanes that were held.
    pub fn reset(&mut self) -> Vec<String> {
        self.exempt.clear();
        self.held.drain(..).map(|p| p.lane).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRIFT: i64 = 10_000;

    fn lanes(imp: i64, jdg: i64) -> Vec<(String, i64)> {
        vec![("imp".to_string(), imp), ("jdg".to_string(), jdg)]
    }

    fn check(a: &mut Alignment, l: &[(String, i64)], now: i64) -> Vec<(String, bool)> {
        let mut changes = Vec::new();
        a.check(l, DRIFT, now, &mut |lane, hold| changes.push((lane.to_string(), hold)));
        changes
    }

    #[test]
    fn a_lane_ahead_by_more_than_the_drift_is_held_until_within_half_of_it() {
        let mut a = Alignment::default();
        // Within the drift: nothing.
        assert!(check(&mut a, &lanes(100_000, 110_000), 0).is_empty());
        // Past it: the judgments are held, once.
        assert_eq!(check(&mut a, &lanes(100_000, 110_001), 1), vec![("jdg".to_string(), true)]);
        assert!(check(&mut a, &lanes(100_000, 110_001), 2).is_empty());
        assert!(a.is_held("jdg") && !a.is_held("imp"));
        // The impressions catch up to a lead of 6 s (> half): still held.
        assert!(check(&mut a, &lanes(104_001, 110_001), 3).is_empty());
        // A lead of exactly half the drift: released.
        assert_eq!(check(&mut a, &lanes(105_001, 110_001), 4), vec![("jdg".to_string(), false)]);
        assert!(!a.any_held());
    }

    #[test]
    fn a_lane_that_has_delivered_nothing_holds_nothing_back() {
        let mut a = Alignment::default();
        // Impressions only, far along: no reference but themselves.
        assert!(check(&mut a, &lanes(500_000, i64::MIN), 0).is_empty());
        // Nothing delivered at all.
        assert!(check(&mut a, &lanes(i64::MIN, i64::MIN), 0).is_empty());
        // The judgments' first event is far behind: the impressions are held.
        assert_eq!(check(&mut a, &lanes(500_000, 100_000), 1), vec![("imp".to_string(), true)]);
    }

    #[test]
    fn a_stalled_reference_ends_the_hold_and_exempts_the_lane_until_it_moves_on() {
        let mut a = Alignment::default();
        assert_eq!(check(&mut a, &lanes(100_000, 200_000), 0), vec![("jdg".to_string(), true)]);
        // The impressions deliver nothing for MAX_HOLD_MS: released.
        assert!(check(&mut a, &lanes(100_000, 200_000), MAX_HOLD_MS - 1).is_empty());
        assert_eq!(check(&mut a, &lanes(100_000, 200_000), MAX_HOLD_MS), vec![("jdg".to_string(), false)]);
        // Judgments flow on, far ahead, and are not held again...
        assert!(check(&mut a, &lanes(150_000, 400_000), MAX_HOLD_MS + 1).is_empty());
        assert!(check(&mut a, &lanes(199_999, 400_000), MAX_HOLD_MS + 2).is_empty());
        // ...until the impressions reach where the judgments were then.
        assert_eq!(check(&mut a, &lanes(200_000, 400_000), MAX_HOLD_MS + 3), vec![("jdg".to_string(), true)]);
    }

    #[test]
    fn a_hold_that_times_out_within_half_the_drift_exempts_nothing() {
        let mut a = Alignment::default();
        assert_eq!(check(&mut a, &lanes(0, 20_000), 0), vec![("jdg".to_string(), true)]);
        assert_eq!(check(&mut a, &lanes(16_000, 20_000), MAX_HOLD_MS), vec![("jdg".to_string(), false)]);
        // Not exempt: ahead again, held again.
        assert_eq!(check(&mut a, &lanes(16_000, 26_001), MAX_HOLD_MS + 1), vec![("jdg".to_string(), true)]);
    }

    #[test]
    fn reset_forgets_holds_and_exemptions() {
        let mut a = Alignment::default();
        check(&mut a, &lanes(0, 20_000), 0);
        assert_eq!(a.reset(), vec!["jdg".to_string()]);
        assert!(!a.any_held());
        assert_eq!(check(&mut a, &lanes(0, 20_000), 1), vec![("jdg".to_string(), true)]);
        check(&mut a, &lanes(0, 20_000), 1 + MAX_HOLD_MS);
        a.reset();
        // The exemption went too.
        assert_eq!(check(&mut a, &lanes(0, 20_000), 2 + MAX_HOLD_MS), vec![("jdg".to_string(), true)]);
    }
}
