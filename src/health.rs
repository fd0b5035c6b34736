//! The daemon's own health: broker outages, checkpoints, dead letters,
//! skipped re-deliveries and how fresh the consumed messages are. The
//! consumer task counts it (`daemon`, with `daemon::loop_gaps`), the
//! publisher hands a copy to `publish`, which renders it beside the
//! stream's metrics. The types are a snapshot both sides read, so they live
//! in neither: output never imports the daemon.

/// Upper bounds (seconds) of the ingest delay histogram's buckets.
pub const DELAY_BUCKETS: [f64; 14] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0];

/// Delay from a message's Kafka timestamp to the moment the pipeline applied
/// it: freshness. Counted per message in the consuming task, rendered at
/// publish time (never a Prometheus call per event).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DelayHistogram {
    /// Per bucket of [`DELAY_BUCKETS`] (not cumulative); longer delays are
    /// only in `count` and `sum_seconds` (the +Inf bucket).
    pub counts: [u64; DELAY_BUCKETS.len()],
    pub count: u64,
    pub sum_seconds: f64,
}

impl DelayHistogram {
    #[inline]
    pub fn observe(&mut self, delay_ms: i64) {
        self.observe_seconds(delay_ms.max(0) as f64 / 1000.0);
    }

    #[inline]
    pub fn observe_seconds(&mut self, seconds: f64) {
        self.count += 1;
        self.sum_seconds += seconds;
        // The first bound at or above the delay, by bisection: in a
        // backlog, where every delay is long, a walk from the smallest
        // bound took a dozen comparisons per message.
        let i = DELAY_BUCKETS.partition_point(|b| *b < seconds);
        if let Some(n) = self.counts.get_mut(i) {
            *n += 1;
        }
    }

    /// The q-quantile (0..1), interpolated within its bucket like
    /// Prometheus's histogram_quantile; None when empty or beyond the last bound.
    pub fn quantile(&self, q: f64) -> Option<f64> {
        let rank = q * self.count as f64;
        let mut seen = 0.0;
        let mut lower = 0.0;
        for (bound, n) in DELAY_BUCKETS.iter().zip(&self.counts) {
            let n = *n as f64;
            if n > 0.0 && seen + n >= rank {
                return Some(lower + (bound - lower) * ((rank - seen) / n));
            }
            seen += n;
            lower = *bound;
        }
        None
    }
}

/// The daemon's own health, beside the stream's counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DaemonHealth {
    /// Whether any broker connection is up (librdkafka's statistics).
    pub kafka_connected: bool,
    /// Seconds since the current broker outage began (0 when connected).
    pub kafka_outage_seconds: f64,
    /// Broker outages since start (connected, or starting, → no broker up).
    pub kafka_outages: u64,
    /// Checkpoints written and failed (state.dir set).
    pub checkpoints: u64,
    pub checkpoint_failures: u64,
    /// Wall time of the last checkpoint, seconds.
    pub last_checkpoint_seconds: Option<f64>,
    /// Invalid messages copied to kafka.dead_letter_topic, and copies that failed.
    pub dead_letters: u64,
    pub dead_letter_failures: u64,
    /// Partitions given up because another instance claimed them in the
    /// state topic while this one still wrote them (a zombie, fenced).
    pub state_fenced: u64,
    /// Partitions assigned here and held until their hand-over succeeds
    /// (`daemon::takeover`): nothing of them is counted meanwhile.
    pub partitions_held: usize,
    /// Messages skipped because a restored checkpoint already covers them.
    pub skipped_covered: u64,
    /// Topic-partitions assigned to and revoked from this instance by the
    /// group's rebalances (a session timed out during an outage revokes
    /// every one of them).
    pub partitions_assigned: u64,
    pub partitions_revoked: u64,
    /// Topic-partitions held back for running ahead of their partition's
    /// other topics in event time (`kafka.max_topic_drift`).
    pub topic_pauses: u64,
    /// Freshness of the consumed messages.
    pub ingest_delay: DelayHistogram,
    /// How long the consumer loop kept waiting messages waiting (see
    /// `daemon::loop_gaps`).
    pub loop_gaps: DelayHistogram,
    /// How long each tick took. The loop reads nothing meanwhile, so on a
    /// live tail, where the loop is mostly idle and `loop_gaps` does not
    /// count the wait, a long tick shows only here (and in the delay).
    pub ticks: DelayHistogram,
    /// HTTP connections closed for sending no request head in time, and
    /// times every connection slot was taken (`http`'s bounds).
    pub http_timed_out: u64,
    pub http_slots_full: u64,
    /// Clients refused under `http.web_config`, by reason label.
    pub http_refused: [(&'static str, u64); 5],
    /// Changes of the web configuration's files that were not taken.
    pub web_config_reload_failures: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each delay lands in the first bucket whose bound is at or above it
    /// (Prometheus's `le`), exact bounds included; past the last bound only
    /// the count and sum see it.
    #[test]
    fn delays_land_in_the_first_bucket_at_or_above_them() {
        let mut delays: Vec<i64> = vec![-5, 0, 1, 400_000, i64::MAX / 2];
        for b in DELAY_BUCKETS {
            let ms = (b * 1000.0).round() as i64;
            delays.extend([ms - 1, ms, ms + 1]);
        }
        for delay in delays {
            let mut h = DelayHistogram::default();
            h.observe(delay);
            let seconds = delay.max(0) as f64 / 1000.0;
            let expected = DELAY_BUCKETS.iter().position(|b| seconds <= *b);
            let got = h.counts.iter().position(|&n| n == 1);
            assert_eq!(got, expected, "{delay} ms");
            assert_eq!(h.counts.iter().sum::<u64>(), u64::from(expected.is_some()), "{delay} ms");
            assert_eq!(h.count, 1);
        }
    }
}
