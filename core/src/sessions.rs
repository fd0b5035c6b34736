//! Sessions as the unit of analysis: the running sums of each session.
//!
//! Place in the flow: between finalize and accumulate, inside a shard
//! ([`crate::pipeline::Pipeline`]). A final list's primary-metric value
//! (`compare.primary`) joins its session's running sums S and N here, and
//! the change of S², S·N and N² goes into its series'
//! [`Clusters`](crate::accumulate::Clusters), from which
//! [`crate::sequential`] estimates a variance with sessions as clusters.
//! Events are keyed by `session_id`, so all of a session's lists meet in
//! one shard.
//!
//! A session is keyed by the hash of its `session_id` and its dimension
//! values (a session that changes arm is two clusters, one per series).
//! Bounded two ways, both counted:
//! - idle time: a session with no list for `compare.session_timeout` (event
//!   time) is over; a later list of the same id starts a new cluster. Two
//!   generations of maps rotate every half timeout (what a cache with
//!   generational expiry does: O(1) per list, no scan), so a session is
//!   forgotten between one half and one whole timeout after its last list.
//! - size: past `compare.max_sessions` (this shard's share) the older
//!   generation is dropped early, and its sessions counted as
//!   [`SessionLedger::evicted`].
//!
//! Either way a session cut in two counts as two clusters: its lists'
//! correlation is then partly ignored, the variance slightly too small.
//! Checkpoints hold the ledger, so a restart or a hand-over changes
//! nothing.

use crate::accumulate::{Clusters, SessionSums};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Serialize};

/// A session: the hash of its id and the id of its dimension values in
/// the shard's assembler.
type SessionKey = (u64, u32);

/// The open sessions of one shard.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SessionLedger {
    /// Sessions with a list since the last rotation.
    current: FxHashMap<SessionKey, SessionSums>,
    /// Sessions of the generation before; a list moves its session back to
    /// `current`.
    previous: FxHashMap<SessionKey, SessionSums>,
    /// Event time of the last rotation (`i64::MIN`: none yet).
    rotated_ms: i64,
    /// Sessions dropped early for `compare.max_sessions` by this ledger;
    /// the pipeline adds each change to its counters
    /// (`OpsCounters::sessions_evicted`), which checkpoints and merges keep.
    #[serde(skip)]
    pub evicted: u64,
    /// `compare.session_timeout` (ms) and this shard's share of
    /// `compare.max_sessions`: settings, set again after a restore.
    #[serde(skip)]
    timeout_ms: i64,
    #[serde(skip)]
    max_sessions: usize,
}

impl SessionLedger {
    pub fn new(timeout_ms: i64, max_sessions: usize) -> SessionLedger {
        SessionLedger { rotated_ms: i64::MIN, timeout_ms: timeout_ms.max(2), max_sessions, ..Default::default() }
    }

    /// Takes the sessions of a checkpoint, keeping this ledger's settings
    /// and eviction count.
    pub fn restore(&mut self, from: SessionLedger) {
        let (timeout_ms, max_sessions, evicted) = (self.timeout_ms, self.max_sessions, self.evicted);
        *self = SessionLedger { timeout_ms, max_sessions, evicted, ..from };
    }

    /// This shard's share of `compare.max_sessions`.
    pub fn set_max_sessions(&mut self, max: usize) {
        self.max_sessions = max;
    }

    /// Sessions held.
    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds one final list's `value` at event time `now_ms` to its session
    /// `(session, dims)`, and the change of the session sums to `into`.
    pub fn add(&mut self, session: u64, dims: u32, value: f64, now_ms: i64, into: &mut Clusters) {
        self.rotate(now_ms);
        let key = (session, dims);
        let sums = match self.current.get_mut(&key) {
            Some(sums) => sums,
            None => {
                let held = self.previous.remove(&key).unwrap_or_default();
                if self.len() >= self.max_sessions {
                    // Full: the older generation goes now rather than at
                    // its time (twice if the current one alone fills it).
                    self.evicted += self.previous.len() as u64;
                    self.previous = std::mem::take(&mut self.current);
                    if self.len() >= self.max_sessions {
                        self.evicted += self.previous.len() as u64;
                        self.previous.clear();
                    }
                }
                self.current.entry(key).or_insert(held)
            }
        };
        into.add(sums, value);
    }

    /// Rotates the generations when event time has moved half a timeout
    /// past the last rotation; a jump of a whole timeout forgets both.
    fn rotate(&mut self, now_ms: i64) {
        let half = self.timeout_ms / 2;
        if self.rotated_ms == i64::MIN {
            self.rotated_ms = now_ms;
            return;
        }
        if now_ms < self.rotated_ms.saturating_add(half) {
            return;
        }
        if now_ms >= self.rotated_ms.saturating_add(self.timeout_ms) {
            self.current.clear();
        }
        self.previous = std::mem::take(&mut self.current);
        self.rotated_ms = now_ms;
    }

    /// Forgets every session (their partition went to another instance,
    /// whose checkpoint carries them).
    pub fn clear(&mut self) {
        self.current.clear();
        self.previous.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: i64 = 60_000;

    #[test]
    fn a_session_accumulates_until_its_timeout() {
        let mut ledger = SessionLedger::new(30 * MIN, 1_000);
        let mut c = Clusters::default();
        // Session 1: 0.5 at 0, 0.5 at 10 min (S = 1, N = 2): one cluster.
        ledger.add(1, 0, 0.5, 0, &mut c);
        ledger.add(1, 0, 0.5, 10 * MIN, &mut c);
        assert_eq!(c.sessions, 1);
        let (s_sq, cross, n_sq) = c.sums();
        assert_eq!((s_sq, cross, n_sq), (1.0, 2.0, 4.0));
        // Past the timeout the same id is a new session: S = 0.5, N = 1.
        ledger.add(1, 0, 0.5, 45 * MIN, &mut c);
        assert_eq!(c.sessions, 2);
        assert_eq!(c.sums(), (1.25, 2.5, 5.0));
        // Another arm of the same id is another cluster.
        ledger.add(1, 7, 0.5, 45 * MIN, &mut c);
        assert_eq!(c.sessions, 3);
        assert_eq!(ledger.evicted, 0);
    }

    /// A session idle for less than half the timeout is always kept,
    /// whatever the rotations in between.
    #[test]
    fn kept_within_half_a_timeout() {
        let mut ledger = SessionLedger::new(30 * MIN, 1_000_000);
        let mut c = Clusters::default();
        for t in 0..600 {
            // Session 1 comes back every 14 minutes; other sessions move time.
            ledger.add(1_000 + t as u64, 0, 0.0, t * MIN, &mut c);
            if t % 14 == 0 {
                ledger.add(1, 0, 1.0, t * MIN, &mut c);
            }
        }
        assert_eq!(c.sessions, 601, "600 one-list sessions and session 1 once");
        // Time that jumps a whole timeout forgets everything.
        ledger.add(1, 0, 1.0, 10_000 * MIN, &mut c);
        assert_eq!(c.sessions, 602);
        assert!(ledger.len() <= 2);
    }

    /// The size bound bites and is counted; sums stay consistent.
    #[test]
    fn bounded_by_max_sessions() {
        let mut ledger = SessionLedger::new(30 * MIN, 100);
        let mut c = Clusters::default();
        for i in 0..1_000u64 {
            ledger.add(i, 0, 1.0, 0, &mut c);
            assert!(ledger.len() <= 100);
        }
        assert_eq!(c.sessions, 1_000);
        assert!(ledger.evicted >= 800, "{}", ledger.evicted);
        // An evicted session comes back as a new cluster.
        ledger.add(0, 0, 1.0, 0, &mut c);
        assert_eq!(c.sessions, 1_001);
    }
}
