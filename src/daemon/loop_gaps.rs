//! How long the consumer loop keeps the stream waiting: the gap between
//! two messages it handles while more were already fetched. A gap after
//! the loop found nothing left to read is idleness, not a stall, and is
//! not counted. The tick, rebalances and everything else the loop does
//! between two batches show up here; the `bench loop-gap` benchmark reads
//! the quantiles, `/metrics` the coarse histogram.

use crate::health::DelayHistogram;
use std::time::{Duration, Instant};

/// Resolution and range of the fine histogram: 0.1 ms up to 2 s, beyond
/// which gaps are only counted (the maximum stays exact).
const STEP_US: u64 = 100;
const STEPS: usize = 20_000;

#[derive(Debug, Clone)]
pub struct LoopGaps {
    /// Gaps by 0.1 ms step (`counts[i]`: at most (i + 1) × 0.1 ms).
    counts: Vec<u32>,
    beyond: u64,
    count: u64,
    max: Duration,
    coarse: DelayHistogram,
    /// When the loop last handled a message with more already waiting.
    ready_since: Option<Instant>,
}

impl Default for LoopGaps {
    fn default() -> Self {
        LoopGaps {
            counts: vec![0; STEPS],
            beyond: 0,
            count: 0,
            max: Duration::ZERO,
            coarse: DelayHistogram::default(),
            ready_since: None,
        }
    }
}

impl LoopGaps {
    /// A batch is about to be handled, at `now`.
    pub fn batch_starts(&mut self, now: Instant) {
        if let Some(since) = self.ready_since.take() {
            self.observe(now.saturating_duration_since(since));
        }
    }

    /// A batch was handled, at `now`; `more`: messages were left waiting.
    pub fn batch_ended(&mut self, now: Instant, more: bool) {
        self.ready_since = more.then_some(now);
    }

    pub fn observe(&mut self, gap: Duration) {
        self.count += 1;
        self.max = self.max.max(gap);
        self.coarse.observe_seconds(gap.as_secs_f64());
        let step = (gap.as_micros() as u64).div_ceil(STEP_US).saturating_sub(1) as usize;
        match self.counts.get_mut(step) {
            Some(n) => *n = n.saturating_add(1),
            None => self.beyond += 1,
        }
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Gaps longer than `limit` (to the 0.1 ms step at or above it).
    pub fn count_over(&self, limit: Duration) -> u64 {
        let first = (limit.as_micros() as u64).div_ceil(STEP_US) as usize;
        self.counts.iter().skip(first).map(|n| u64::from(*n)).sum::<u64>() + self.beyond
    }

    pub fn max(&self) -> Duration {
        self.max
    }

    /// The q-quantile (0..1), as the upper edge of its 0.1 ms step (the
    /// maximum when it lies beyond 2 s); `None` when nothing was observed.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0u64;
        for (i, n) in self.counts.iter().enumerate() {
            seen += u64::from(*n);
            if seen >= rank {
                return Some(Duration::from_micros((i as u64 + 1) * STEP_US).min(self.max));
            }
        }
        Some(self.max)
    }

    /// The `/metrics` histogram.
    pub fn coarse(&self) -> DelayHistogram {
        self.coarse.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idleness_is_not_a_gap_and_quantiles_are_exact_to_a_step() {
        let mut g = LoopGaps::default();
        let t0 = Instant::now();
        // Nothing was waiting: the next batch after a long wait is no gap.
        g.batch_ended(t0, false);
        g.batch_starts(t0 + Duration::from_secs(10));
        assert_eq!(g.count(), 0);
        for ms in 1..=1_000u64 {
            g.batch_ended(t0, true);
            g.batch_starts(t0 + Duration::from_micros(ms * 50));
        }
        g.observe(Duration::from_secs(3));
        assert_eq!(g.count(), 1_001);
        // The median, the 501st of 1,001, is 501 × 50 µs = 25.05 ms: the
        // step up to 25.1 ms.
        assert_eq!(g.quantile(0.5), Some(Duration::from_micros(25_100)));
        assert_eq!(g.quantile(0.999), Some(Duration::from_micros(50_000)));
        assert_eq!(g.quantile(1.0), Some(Duration::from_secs(3)));
        assert_eq!(g.max(), Duration::from_secs(3));
        // 50 µs × 1..=1000: 500 of them above 25 ms, and the 3 s one.
        assert_eq!(g.count_over(Duration::from_millis(25)), 501);
    }
}
