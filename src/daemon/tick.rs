//! The loop's tick (every [`TICK`](super::TICK)): what happens in
//! processing time, between the shards and the publisher. It applies
//! pending rebalances, closes lists whose gap elapsed, refreshes health,
//! prunes old buckets, commits what became safe (`commit`) and hands the
//! publisher (`publisher`) a view or a checkpoint, never waiting on I/O.

use super::publisher::{Job, JobOutcome, View};
use super::{Daemon, DaemonError, wall_ms};
use crate::http::Published;
use crate::kafka::Consumer;
use crate::state::Checkpoint;
use rankpulse_core::pipeline::OpsCounters;
use rdkafka::consumer::Consumer as _;
use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

/// Ticks to prune every series once (see
/// [`rankpulse_core::accumulate::Accumulators::prune_part`]):
/// 4 s at the 500 ms tick, well within a bucket width of 10 s, so a bucket
/// leaves at most one sweep after its time.
const PRUNE_PARTS: usize = 8;

impl Daemon {
    /// What the loop does when the tick fires (after handling a message it
    /// held from a partition queue, which belongs before any rebalance):
    /// everything driven by processing time rather than by messages. Its
    /// duration is counted (`DaemonHealth::ticks`): no message is read meanwhile.
    pub(super) fn on_tick(&mut self, consumer: &Arc<Consumer>, published: &Published) -> Result<(), DaemonError> {
        let started = std::time::Instant::now();
        let result = self.tick_work(consumer, published);
        self.health.ticks.observe_seconds(started.elapsed().as_secs_f64());
        result
    }

    fn tick_work(&mut self, consumer: &Arc<Consumer>, published: &Published) -> Result<(), DaemonError> {
        // Another process writes this instance's checkpoints: stop before
        // committing anything more (see `state::kafka`).
        if let Some(store) = &self.store {
            store.still_ours()?;
        }
        self.apply_rebalances()?;
        self.check_alignment(wall_ms());
        self.finalize_expired();
        // Copied out at once: a partition list kept alive would block
        // the consumer's destruction at shutdown.
        self.assigned = consumer
            .assignment()
            .map(|tpl| tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect())
            .unwrap_or_default();
        self.update_health();
        published.set_ready(!self.assigned.is_empty() && self.health.kafka_connected);
        self.prune();
        self.walk_open_lists();
        self.ticks += 1;
        if let Some(done) = self.publisher.poll() {
            self.settle(done)?;
        }
        // Before the commit: it may settle the checkpoint in flight, whose
        // offsets the commit then releases.
        self.retry_hand_over()?;
        self.retry_restore()?;
        self.sync_consumer(consumer);
        self.commit(consumer);
        self.retire_handed_over(consumer);
        if self.store.is_some() {
            // One checkpoint in flight at a time; each is published
            // once durable, and its offsets then committed.
            if self.checkpoint_due() && !self.publisher.busy() {
                self.last_checkpoint = Some(tokio::time::Instant::now());
                self.request_checkpoint();
            }
        } else {
            self.publish();
        }
        Ok(())
    }

    /// Closes lists past their gap in event time, and, on idle partitions
    /// while the broker is reachable, in processing time.
    pub(super) fn finalize_expired(&mut self) {
        let now = wall_ms();
        let connected = self.signals.connected.load(Ordering::Relaxed);
        // Nothing arriving means idle only as far as the brokers are known
        // to have answered: a frozen one is an outage only after
        // session.timeout.ms, and a list closed on processing time before
        // then would miss what it still holds.
        let answered = self.signals.answered_at_ms(now).map(|t| t.min(now));
        // A shard not owned is frozen: if its partition comes back (a
        // stall, a session timeout) its lists continue exactly; if it went
        // to another instance, they are that instance's now.
        for shard in self.shards.values_mut().filter(|s| s.owned) {
            let processing_time = answered.filter(|_| connected && shard.idle);
            shard.pipeline.finalize_expired(processing_time);
        }
    }

    pub(super) fn finalize_all(&mut self) {
        for shard in self.shards.values_mut() {
            shard.pipeline.finalize_all();
        }
    }

    /// Hands a checkpoint of every shard to the publisher, which makes it
    /// durable (after the dead-letter copies it covers) and publishes it;
    /// its offsets are committed when it reports so ([`Self::note_done`]).
    pub(super) fn request_checkpoint(&mut self) {
        let Some(store) = &self.store else { return };
        if !self.restore_pending.is_empty() {
            // Their shards are ahead of anything durable: written, a
            // restart or a hand-over would take them as covered.
            self.unhandled_done = None;
            self.pending_commit = None;
            let view = self.view();
            self.publisher.send(Job::Unwritable { view });
            return;
        }
        let checkpoint = Checkpoint {
            fingerprint: store.fingerprint().to_string(),
            instance: store.instance().to_string(),
            written_ms: wall_ms(),
            budget: self.budget.lock().map(|b| b.clone()).unwrap_or_default(),
            shards: Vec::new(),
        };
        let shards = self.shards.iter().map(|(p, s)| s.snapshot(*p)).collect();
        let barrier = self.dead_letters.as_ref().map(|dl| (dl.tracker.clone(), dl.barrier()));
        // A job's result not yet acted on belongs to the offsets replaced
        // here: it must not release this checkpoint's, before it is written.
        self.unhandled_done = None;
        self.pending_commit = self.commit_points(false).map(|(tpl, moved)| (tpl, moved, None));
        let view = self.view();
        self.publisher.send(Job::Checkpoint { checkpoint: Box::new(checkpoint), shards, barrier, view });
    }

    /// Acts on what a publisher job reported ([`Self::note_done`]: a
    /// durable checkpoint releases its offsets for commit, a failed one
    /// drops them), then gives up the partitions found fenced.
    pub(super) fn settle(&mut self, done: JobOutcome) -> Result<(), DaemonError> {
        self.note_done(done);
        if !self.fenced.is_empty() {
            // Given up as revoked ones are (held again if still assigned).
            self.revoke(BTreeSet::new())?;
        }
        Ok(())
    }

    pub(super) fn note_done(&mut self, done: JobOutcome) {
        match done {
            JobOutcome::Published => {}
            JobOutcome::Written { written_ms } => {
                self.health.checkpoints += 1;
                self.health.last_checkpoint_seconds = Some(written_ms as f64 / 1000.0);
            }
            JobOutcome::NotWritten => {
                self.health.checkpoint_failures += 1;
                self.pending_commit = None;
            }
            // Given up like a revoked partition, by the caller
            // ([`Self::revoke`]).
            JobOutcome::Fenced { ref partitions } => {
                self.health.state_fenced += partitions.len() as u64;
                self.pending_commit = None;
                self.fenced.extend(partitions.iter().copied());
            }
        }
        self.unhandled_done = Some(done);
    }

    pub(super) fn update_health(&mut self) {
        let now = wall_ms();
        let connected = self.signals.connected.load(Ordering::Relaxed);
        let observed = self.signals.observed.load(Ordering::Relaxed);
        if self.outages.update(connected, observed, now) {
            tracing::warn!(
                brokers = %self.config.kafka.brokers,
                "no Kafka broker reachable; consumption resumes when one is"
            );
        }
        if let Some(seconds) = self.outages.reminder(now) {
            // What an operator who started it without a broker needs: what
            // it waits for, and how to see the state without the log.
            tracing::warn!(
                "still waiting for a Kafka broker at {} after {seconds} s: check kafka.brokers and that one is up; \
                 http://{}/readyz answers 503 until partitions are assigned (`rankpulse demo` runs with a broker of its own)",
                self.config.kafka.brokers,
                self.config.http.listen
            );
        }
        self.health.kafka_connected = connected;
        self.health.partitions_held = self.taking_over.len();
        self.health.kafka_outages = self.outages.total;
        self.health.kafka_outage_seconds = self.outages.seconds(now);
        if let Some(dl) = &self.dead_letters {
            self.health.dead_letters = dl.delivered.load(Ordering::Relaxed);
            self.health.dead_letter_failures = dl.failures.load(Ordering::Relaxed);
        }
    }

    /// What an exposition shows besides the accumulators.
    pub(super) fn view(&self) -> View {
        let mut counters = OpsCounters::default();
        for shard in self.shards.values() {
            counters.merge(shard.pipeline.counters());
        }
        let mut partitions = self.sources.partition_states(&self.signals.lag);
        partitions.retain(|tp, _| self.assigned.contains(tp));
        let mut health = self.health.clone();
        health.loop_gaps = self.loop_gaps.coarse();
        View { now_ms: wall_ms(), counters, open_lists: self.open_lists(), partitions, health }
    }

    /// Hands the publisher what the shards accumulated since the last job
    /// (no `state.dir`), unless it is still busy with that one: then the
    /// shards keep accumulating for the next. With `state.dir` only
    /// checkpoints are published; this publishes the restored state once,
    /// at start.
    pub(super) fn publish(&mut self) {
        if self.publisher.busy() {
            return;
        }
        let taken = if self.store.is_some() {
            self.shards.values().map(|s| s.pipeline.accumulators().clone()).collect()
        } else {
            self.shards.values_mut().map(|s| s.pipeline.take_accumulated()).collect()
        };
        let view = self.view();
        self.publisher.send(Job::Publish { taken, view });
    }

    /// Retires time buckets no window can reach.
    pub(super) fn prune(&mut self) {
        let now = wall_ms();
        let part = self.ticks as usize % PRUNE_PARTS;
        for shard in self.shards.values_mut() {
            shard.pipeline.prune_part(now, part, PRUNE_PARTS);
        }
    }

    pub(super) fn lists_finalized(&self) -> i64 {
        self.shards.values().flat_map(|s| s.pipeline.accumulators().series.values()).map(|s| s.lists()).sum()
    }

    pub(super) fn open_lists(&self) -> usize {
        self.shards.values().filter(|s| s.owned || self.store.is_none()).map(|s| s.pipeline.open_lists()).sum()
    }

    pub(super) fn checkpoint_due(&self) -> bool {
        self.last_checkpoint.is_none_or(|t| t.elapsed() >= self.config.state.interval.duration)
    }
}

#[cfg(test)]
mod tests {
    use super::super::publisher::Publisher;
    use super::super::testing::{IMPRESSIONS, JUDGMENTS, NOW_MS, impression, judgment, message};
    use super::*;
    use crate::config::Config;
    use rdkafka::TopicPartitionList;
    use std::collections::BTreeSet;
    use std::time::Duration;

    /// A checkpoint that could not be made durable must not release its
    /// offsets: the pending commit goes and the failure is counted. A
    /// durable one is counted and dated, and its commit stays pending.
    #[test]
    fn note_done_drops_the_pending_commit_of_a_checkpoint_not_written() {
        let mut d = Daemon::for_tests(Config::default());
        d.pending_commit = Some((TopicPartitionList::new(), Vec::new(), None));
        d.note_done(JobOutcome::NotWritten);
        assert!(d.pending_commit.is_none());
        assert_eq!(d.health.checkpoint_failures, 1);
        assert_eq!(d.unhandled_done, Some(JobOutcome::NotWritten));
        d.pending_commit = Some((TopicPartitionList::new(), Vec::new(), None));
        d.note_done(JobOutcome::Written { written_ms: 1_500 });
        assert!(d.pending_commit.is_some());
        assert_eq!((d.health.checkpoints, d.health.checkpoint_failures), (1, 1));
        assert_eq!(d.health.last_checkpoint_seconds, Some(1.5));
    }

    #[test]
    fn a_checkpoint_is_due_first_and_then_every_state_interval() {
        let mut config = Config::default();
        config.state.interval.duration = Duration::from_secs(10);
        let mut d = Daemon::for_tests(config);
        assert!(d.checkpoint_due());
        let now = tokio::time::Instant::now();
        d.last_checkpoint = Some(now);
        assert!(!d.checkpoint_due());
        d.last_checkpoint = Some(now - Duration::from_secs(10));
        assert!(d.checkpoint_due());
    }

    /// Without `state.dir`, publishing hands the shards' accumulations to
    /// the publisher; while it is busy the shards keep them for the next
    /// job, so nothing is lost or counted twice.
    #[test]
    fn publish_hands_over_the_accumulations_only_when_the_publisher_is_free() {
        let mut d = Daemon::for_tests(Config::default());
        let list = |d: &mut Daemon, offset: i64, session: &str| {
            d.handle(&message(IMPRESSIONS, 0, offset, &impression(session)), None, NOW_MS);
            d.handle(&message(JUDGMENTS, 0, offset, &judgment(session, "d1", 2)), None, NOW_MS);
            d.finalize_all();
        };
        list(&mut d, 0, "s1");
        let one = d.lists_finalized();
        assert!(one > 0);
        d.publish();
        assert!(d.publisher.busy());
        assert_eq!(d.lists_finalized(), 0, "taken by the publisher");
        list(&mut d, 1, "s2");
        d.publish();
        assert_eq!(d.lists_finalized(), one, "kept while the publisher is busy");
        assert_eq!(d.publisher.wait(), Some(JobOutcome::Published));
        d.publish();
        assert_eq!(d.publisher.wait(), Some(JobOutcome::Published));
        let total = std::mem::replace(&mut d.publisher, Publisher::stopped()).finish();
        assert_eq!(total.series.values().map(|s| s.lists()).sum::<i64>(), 2 * one);
    }

    /// Lag and freshness gauges are for assigned partitions only: a
    /// revoked one is another instance's now.
    #[test]
    fn the_view_shows_only_assigned_partitions() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 1, 0, &impression("s2")), None, NOW_MS);
        d.assigned = BTreeSet::from([(IMPRESSIONS.to_string(), 1)]);
        let view = d.view();
        assert_eq!(view.partitions.keys().cloned().collect::<Vec<_>>(), [(IMPRESSIONS.to_string(), 1)]);
        assert_eq!(view.open_lists, 2);
        assert_eq!(view.counters.events.values().sum::<u64>(), 2);
    }
}
