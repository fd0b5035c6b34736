//! Event-time alignment of a partition's topics, on the consuming side of
//! the data flow: between the Kafka consumer and `assemble`, it decides
//! which topic of a partition to pause so that none runs far ahead of the
//! others in event time (`kafka.max_topic_drift`).
//!
//! Why: a list needs its impression (one topic) and its judgments (another).
//! librdkafka fetches each topic-partition by bytes, and a megabyte holds
//! about four times as many judgments as impressions, so a consumer catching
//! up on a backlog reads the judgments far ahead of their impressions. Every
//! such judgment waits in an open list until its impression comes, and the
//! lists cannot close on event time, which follows the slowest topic (the
//! watermark): `rankpulse bench kafka` had over 200,000 lists open where
//! the gap needs about 30,000. Pausing the topic that ran ahead keeps the
//! open lists near what the gap needs, and with them memory and the
//! assembler's cache misses. Flink calls this watermark alignment.
//!
//! A lane is one topic of a partition (as in `assemble`); its event time is
//! the newest event it delivered. The reference is the slowest lane that has
//! delivered anything: a topic that is empty or not yet fetched holds
//! nothing back. A lane is paused when it leads the reference by more than
//! the drift and resumed once its lead is at most half the drift. A lane
//! paused for [`MAX_PAUSE_MS`] is resumed whatever its lead (the slower
//! topic has stalled: its producer is down, or an event far in the future
//! made this lane look ahead) and is not paused again until the reference
//! reaches the event time it had then: a silent judgments feed must never
//! throttle impressions.
//!
//! This module only decides; the daemon pauses and resumes the consumer.

/// Longest a lane stays paused, processing time (ms).
pub const MAX_PAUSE_MS: i64 = 2_000;

/// A lane paused now.
#[derive(Debug, Clone)]
struct Paused {
    lane: String,
    /// Processing time of the pause, for [`MAX_PAUSE_MS`].
    since_ms: i64,
}

/// One partition's alignment state.
#[derive(Debug, Clone, Default)]
pub struct Alignment {
    paused: Vec<Paused>,
    /// Lanes whose pause timed out, with the reference event time that
    /// ends their exemption: until the slower lanes get there, they are
    /// not paused again.
    exempt: Vec<(String, i64)>,
}

impl Alignment {
    /// Whether any lane is paused now.
    pub fn any_paused(&self) -> bool {
        !self.paused.is_empty()
    }

    /// Whether `lane` is paused now.
    pub fn is_paused(&self, lane: &str) -> bool {
        self.paused.iter().any(|p| p.lane == lane)
    }

    /// Looks at the lanes (name, newest event time; `i64::MIN` for none yet)
    /// at processing time `now_ms` and calls `change(lane, pause)` for each
    /// pause (true) and resume (false) due. Cheap when nothing changes: a
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
            match self.paused.iter().position(|p| &p.lane == lane) {
                Some(i) => {
                    let timed_out = now_ms.saturating_sub(self.paused[i].since_ms) >= MAX_PAUSE_MS;
                    if lead <= drift_ms / 2 || timed_out {
                        self.paused.swap_remove(i);
                        if timed_out && lead > drift_ms / 2 {
                            self.exempt.push((lane.clone(), *newest));
                        }
                        change(lane, false);
                    }
                }
                None => {
                    if lead > drift_ms && !self.exempt.iter().any(|(l, _)| l == lane) {
                        self.paused.push(Paused { lane: lane.clone(), since_ms: now_ms });
                        change(lane, true);
                    }
                }
            }
        }
    }

    /// Forgets every pause and exemption (the partition was revoked or
    /// assigned anew; the daemon resumes it in the consumer), returning the
    /// lanes that were paused.
    pub fn reset(&mut self) -> Vec<String> {
        self.exempt.clear();
        self.paused.drain(..).map(|p| p.lane).collect()
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
        a.check(l, DRIFT, now, &mut |lane, pause| changes.push((lane.to_string(), pause)));
        changes
    }

    #[test]
    fn a_lane_ahead_by_more_than_the_drift_is_paused_until_within_half_of_it() {
        let mut a = Alignment::default();
        // Within the drift: nothing.
        assert!(check(&mut a, &lanes(100_000, 110_000), 0).is_empty());
        // Past it: the judgments pause, once.
        assert_eq!(check(&mut a, &lanes(100_000, 110_001), 1), vec![("jdg".to_string(), true)]);
        assert!(check(&mut a, &lanes(100_000, 110_001), 2).is_empty());
        assert!(a.is_paused("jdg") && !a.is_paused("imp"));
        // The impressions catch up to a lead of 6 s (> half): still paused.
        assert!(check(&mut a, &lanes(104_001, 110_001), 3).is_empty());
        // A lead of exactly half the drift: resumed.
        assert_eq!(check(&mut a, &lanes(105_001, 110_001), 4), vec![("jdg".to_string(), false)]);
        assert!(!a.any_paused());
    }

    #[test]
    fn a_lane_that_has_delivered_nothing_holds_nothing_back() {
        let mut a = Alignment::default();
        // Impressions only, far along: no reference but themselves.
        assert!(check(&mut a, &lanes(500_000, i64::MIN), 0).is_empty());
        // Nothing delivered at all.
        assert!(check(&mut a, &lanes(i64::MIN, i64::MIN), 0).is_empty());
        // The judgments' first event is far behind: the impressions pause.
        assert_eq!(check(&mut a, &lanes(500_000, 100_000), 1), vec![("imp".to_string(), true)]);
    }

    #[test]
    fn a_stalled_reference_ends_the_pause_and_exempts_the_lane_until_it_moves_on() {
        let mut a = Alignment::default();
        assert_eq!(check(&mut a, &lanes(100_000, 200_000), 0), vec![("jdg".to_string(), true)]);
        // The impressions deliver nothing for MAX_PAUSE_MS: resumed.
        assert!(check(&mut a, &lanes(100_000, 200_000), MAX_PAUSE_MS - 1).is_empty());
        assert_eq!(check(&mut a, &lanes(100_000, 200_000), MAX_PAUSE_MS), vec![("jdg".to_string(), false)]);
        // Judgments flow on, far ahead, and are not paused again...
        assert!(check(&mut a, &lanes(150_000, 400_000), MAX_PAUSE_MS + 1).is_empty());
        assert!(check(&mut a, &lanes(199_999, 400_000), MAX_PAUSE_MS + 2).is_empty());
        // ...until the impressions reach where the judgments were then.
        assert_eq!(check(&mut a, &lanes(200_000, 400_000), MAX_PAUSE_MS + 3), vec![("jdg".to_string(), true)]);
    }

    #[test]
    fn a_pause_that_times_out_within_half_the_drift_exempts_nothing() {
        let mut a = Alignment::default();
        assert_eq!(check(&mut a, &lanes(0, 20_000), 0), vec![("jdg".to_string(), true)]);
        assert_eq!(check(&mut a, &lanes(16_000, 20_000), MAX_PAUSE_MS), vec![("jdg".to_string(), false)]);
        // Not exempt: ahead again, paused again.
        assert_eq!(check(&mut a, &lanes(16_000, 26_001), MAX_PAUSE_MS + 1), vec![("jdg".to_string(), true)]);
    }

    #[test]
    fn reset_forgets_pauses_and_exemptions() {
        let mut a = Alignment::default();
        check(&mut a, &lanes(0, 20_000), 0);
        assert_eq!(a.reset(), vec!["jdg".to_string()]);
        assert!(!a.any_paused());
        assert_eq!(check(&mut a, &lanes(0, 20_000), 1), vec![("jdg".to_string(), true)]);
        check(&mut a, &lanes(0, 20_000), 1 + MAX_PAUSE_MS);
        a.reset();
        // The exemption went too.
        assert_eq!(check(&mut a, &lanes(0, 20_000), 2 + MAX_PAUSE_MS), vec![("jdg".to_string(), true)]);
    }
}
