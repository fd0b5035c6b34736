//! The hot path: messages from the consumer queue and the partition
//! queues (`lanes`) into the pipeline shards, between `kafka` (input) and
//! `assemble` (via [`Pipeline`](rankpulse_core::pipeline::Pipeline)). A batch is
//! decoded and its lists prefetched before any message of it is applied
//! (their cache misses overlap); each message is then
//! checked against its shard's position (re-deliveries are skipped),
//! counted for freshness and ingested. Topics that run ahead of their
//! partition in event time are held back here (`align`).

use super::lanes::Lanes;
use super::shard::Shard;
use super::{Daemon, wall_ms};
use crate::kafka::{self, RankpulseContext};
use futures_util::StreamExt;
use rankpulse_core::assemble::Source;
use rankpulse_core::event::{Event, RejectReason};
use rankpulse_core::pipeline::Clock;
use rdkafka::consumer::stream_consumer::MessageStream;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Message};
use std::future::Future;

/// The output of `future` if it is ready without waiting.
pub(super) fn ready_now<F: Future>(future: F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

impl Daemon {
    /// One consumed message, at wall-clock time `now` (ms), decoded ahead
    /// by [`Self::prepare_batch`] (`None`: decoded here).
    pub(super) fn handle(&mut self, m: &impl Message, decoded: Option<&Result<Event<'_>, RejectReason>>, now: i64) {
        let (topic, partition, offset, key, payload) = (m.topic(), m.partition(), m.offset(), m.key(), m.payload());
        let kafka_timestamp_ms = m.timestamp().to_millis();
        self.messages += 1;
        let id = self.sources.id(topic, partition);
        let checkpointing = self.store.is_some();
        if !self.shards.contains_key(&partition) {
            let mut shard = Shard::new(&self.config, &self.budget);
            // Every assigned partition has a shard: one arriving without is
            // a leftover of an assignment gone (its shard retired). With
            // checkpoints it must not be counted, nor claimed at the next
            // write, which would fence its owner.
            shard.owned = !checkpointing || self.assigned.iter().any(|(t, p)| *p == partition && t == topic);
            self.shards.insert(partition, shard);
            self.share_open_list_cap();
        }
        let Some(shard) = self.shards.get_mut(&partition) else { return };
        // A message fetched before its partition was revoked: the new owner
        // counts it (from the state this instance handed over, or from the
        // committed offset), or, back here, it comes again.
        if !shard.owned {
            // Held (`takeover`): delivered before its pause took effect,
            // it must come again when the partition is taken over.
            if self.taking_over.contains(partition) {
                self.taking_over.note_skipped(topic, partition, offset);
            }
            return;
        }
        shard.idle = false;
        match shard.next_offsets.get_mut(topic) {
            Some(next) if offset < *next => {
                self.health.skipped_covered += 1;
                return;
            }
            Some(next) => *next = offset + 1,
            None => {
                shard.next_offsets.insert(topic.to_string(), offset + 1);
                self.taking_over.note_first(topic, partition, offset);
            }
        }
        // Only messages applied: a re-delivery skipped above (after a
        // rebalance or restart) is not fresh data arriving late.
        if let Some(t) = kafka_timestamp_ms {
            self.health.ingest_delay.observe(now - t);
        }
        // With checkpoints open lists are durable: they need not hold offsets back.
        let source = (!checkpointing).then_some(Source { id, offset });
        // A message without payload (tombstone) is an empty, invalid event.
        let payload = payload.unwrap_or(b"");
        let clock = Clock::Live { now_ms: now, message_ms: kafka_timestamp_ms };
        let result = match decoded {
            Some(decoded) => shard.pipeline.ingest_decoded(topic, decoded, clock, source),
            None => shard.pipeline.ingest(topic, payload, clock, source),
        };
        let watermark = shard.pipeline.assembler().watermark_ms();
        if let (Err(reason), Some(dl)) = (result, self.dead_letters.as_mut()) {
            dl.send(key, payload, reason.as_str(), topic, partition, offset);
        }
        if let Some(s) = self.sources.states_mut().get_mut(id as usize) {
            s.next_offset = Some(offset + 1);
            s.messages += 1;
            if result.is_ok() {
                s.last_event_ms = Some(s.last_event_ms.map_or(watermark, |t| t.max(watermark)));
            }
        }
        if self.max_topic_drift_ms > 0 {
            shard.align(self.max_topic_drift_ms, now, &mut self.health.topic_pauses);
        }
    }

    /// The newest event time `topic` delivered to `partition`'s shard
    /// (`i64::MIN`: none yet).
    pub(super) fn lane_time(&self, topic: &str, partition: i32) -> i64 {
        self.shards
            .get(&partition)
            .and_then(|s| s.pipeline.assembler().lanes().iter().find(|(l, _)| l == topic))
            .map_or(i64::MIN, |(_, t)| *t)
    }

    /// Whether the partition queue of (`topic`, `partition`) is held back
    /// for running ahead in event time (`kafka.max_topic_drift`).
    pub(super) fn held(&self, topic: &str, partition: i32) -> bool {
        self.shards.get(&partition).is_some_and(|s| s.alignment.is_held(topic))
    }

    /// Decodes a batch of messages and prefetches their lists
    /// ([`Pipeline::prepare`](rankpulse_core::pipeline::Pipeline::prepare)) before any of them is applied. `None`: not a
    /// message, no payload, or a partition without a shard yet; such a
    /// message is decoded when it is handled.
    pub(super) fn prepare_batch<'m>(
        &self,
        batch: &'m [KafkaResult<impl Message>],
    ) -> Vec<Option<Result<Event<'m>, RejectReason>>> {
        batch
            .iter()
            .map(|message| {
                let m = message.as_ref().ok()?;
                let shard = self.shards.get(&m.partition())?;
                Some(shard.pipeline.prepare(m.topic(), m.payload()?))
            })
            .collect()
    }

    /// Holds ended by time (the slower topic stalled) are only noticed on
    /// the tick when no message of the partition comes.
    pub(super) fn check_alignment(&mut self, now: i64) {
        if self.max_topic_drift_ms == 0 {
            return;
        }
        for shard in self.shards.values_mut() {
            if shard.alignment.any_held() {
                shard.align(self.max_topic_drift_ms, now, &mut self.health.topic_pauses);
            }
        }
    }

    /// A partition reached its end: input is live, restored lists may
    /// expire on processing time again.
    pub(super) fn partition_eof(&mut self, partition: i32) {
        if let Some(shard) = self.shards.get_mut(&partition) {
            shard.idle = true;
            shard.pipeline.resume_clock(wall_ms());
        }
    }
}

/// Handles a batch of messages, read from the consumer queue or the
/// partition queues, in order, and empties it; `more`: others are waiting
/// (see [`LoopGaps`](super::LoopGaps)).
pub(super) fn handle_batch<M: Message>(
    daemon: &mut Daemon,
    batch: &mut Vec<KafkaResult<M>>,
    stream_errors: &mut kafka::RepeatedErrors,
    more: bool,
) {
    // The clock is read once per batch (handled in well under a millisecond).
    let now = wall_ms();
    daemon.loop_gaps.batch_starts(std::time::Instant::now());
    if daemon.first_message_at.is_none() && batch.iter().any(Result::is_ok) {
        daemon.first_message_at = Some(std::time::Instant::now());
    }
    let decoded = daemon.prepare_batch(batch);
    for (message, decoded) in batch.iter().zip(&decoded) {
        match message {
            Ok(m) => daemon.handle(m, decoded.as_ref(), now),
            Err(KafkaError::PartitionEOF(p)) => daemon.partition_eof(*p),
            Err(e) => {
                if let Some(line) = stream_errors.note(&e.to_string(), std::time::Instant::now()) {
                    tracing::warn!("kafka: {line}");
                }
            }
        }
    }
    drop(decoded);
    batch.clear();
    daemon.loop_gaps.batch_ended(std::time::Instant::now(), more);
}

/// Adds to `batch`, up to `limit` messages, what the partition queues hold
/// ready: the lane furthest behind in event time first, so that a
/// partition's topics advance together and open lists stay few; a lane
/// held back (`align`) is not read. `tried`: scratch, one per lane.
pub(super) fn fill_from_lanes<'a>(
    daemon: &Daemon,
    lanes: &Lanes,
    streams: &mut [MessageStream<'a, RankpulseContext>],
    tried: &mut [bool],
    batch: &mut Vec<KafkaResult<BorrowedMessage<'a>>>,
    limit: usize,
) {
    tried.fill(false);
    while batch.len() < limit {
        let behind = lanes
            .iter()
            .zip(streams.iter_mut())
            .zip(tried.iter_mut())
            .filter(|((lane, _), tried)| !**tried && !daemon.held(&lane.topic, lane.partition))
            .min_by_key(|((lane, _), _)| daemon.lane_time(&lane.topic, lane.partition));
        let Some(((_, stream), tried)) = behind else { break };
        *tried = true;
        while batch.len() < limit {
            match ready_now(stream.next()).flatten() {
                Some(m) => batch.push(m),
                None => break,
            }
        }
    }
}

/// The next message of any partition queue not held back; registers the
/// task's waker with each of them when none has one.
pub(super) fn poll_lanes<'a>(
    streams: &mut [MessageStream<'a, RankpulseContext>],
    held: &[bool],
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<KafkaResult<BorrowedMessage<'a>>> {
    for (stream, held) in streams.iter_mut().zip(held) {
        if !*held && let std::task::Poll::Ready(Some(m)) = stream.poll_next_unpin(cx) {
            return std::task::Poll::Ready(m);
        }
    }
    std::task::Poll::Pending
}

#[cfg(test)]
mod tests {
    use super::super::testing::{IMPRESSIONS, JUDGMENTS, NOW_MS, impression, judgment, message};
    use super::*;
    use crate::config::Config;
    use crate::health::DELAY_BUCKETS;
    use rdkafka::message::OwnedMessage;
    use std::collections::BTreeSet;

    fn events(d: &Daemon, partition: i32) -> u64 {
        d.shards[&partition].pipeline.counters().events.values().sum()
    }

    /// A re-delivery (after a restart or rebalance) below what the shard
    /// already holds is skipped and counted, and changes nothing else.
    #[test]
    fn a_message_below_the_next_offset_is_skipped_and_counted() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 5, &impression("s1")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 0, 3, &impression("s2")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 0, 5, &impression("s3")), None, NOW_MS);
        assert_eq!(d.health.skipped_covered, 2);
        assert_eq!(d.messages, 3, "skipped messages were still received");
        assert_eq!(d.shards[&0].next_offsets[IMPRESSIONS], 6);
        assert_eq!(d.shards[&0].pipeline.open_lists(), 1);
        assert_eq!(events(&d, 0), 1);
        // Positions are per topic: the same offset of another topic is new.
        d.handle(&message(JUDGMENTS, 0, 3, &judgment("s1", "d1", 2)), None, NOW_MS);
        assert_eq!(d.health.skipped_covered, 2);
        assert_eq!(events(&d, 0), 2);
    }

    /// `rankpulse_messages_total` counts every message applied, whatever
    /// became of it (the lag alert's rate on a topic whose messages mostly
    /// score nothing), and neither a covered re-delivery nor a message of
    /// a revoked partition.
    #[test]
    fn messages_applied_are_counted_per_topic_partition_whatever_their_fate() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 0, 1, b"{not json"), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 0, 2, &impression("s1")), None, NOW_MS); // duplicate event id
        d.handle(&message(IMPRESSIONS, 0, 1, &impression("s2")), None, NOW_MS); // covered
        d.handle(&message(JUDGMENTS, 1, 0, &judgment("s3", "d1", 1)), None, NOW_MS);
        d.revoke(BTreeSet::from([1])).unwrap();
        d.handle(&message(JUDGMENTS, 1, 1, &judgment("s3", "d2", 1)), None, NOW_MS);
        let counted: Vec<(&str, i32, u64)> =
            d.sources.states().iter().map(|s| (s.topic.as_str(), s.partition, s.messages)).collect();
        assert_eq!(counted, [(IMPRESSIONS, 0, 3), (JUDGMENTS, 1, 1)]);
        assert_eq!(d.health.skipped_covered, 1);
        let rejected: u64 = d.shards[&0].pipeline.counters().rejected.values().sum();
        let duplicates: u64 = d.shards[&0].pipeline.counters().duplicates.values().sum();
        // A duplicate is an accepted event too (rankpulse_events_total).
        assert_eq!((events(&d, 0), rejected, duplicates), (2, 1, 1));
    }

    /// A message fetched before its partition was revoked is the new
    /// owner's: not applied, not counted as covered, its position kept.
    #[test]
    fn messages_for_a_revoked_shard_are_ignored() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.revoke(BTreeSet::from([0])).unwrap();
        d.handle(&message(IMPRESSIONS, 0, 1, &impression("s2")), None, NOW_MS);
        let shard = &d.shards[&0];
        assert!(!shard.owned);
        assert_eq!(shard.next_offsets[IMPRESSIONS], 1);
        assert_eq!(shard.pipeline.open_lists(), 1);
        assert_eq!(events(&d, 0), 1);
        assert_eq!(d.health.skipped_covered, 0);
        assert_eq!(d.sources.states()[0].next_offset, Some(1), "the position to commit did not move");
    }

    /// Freshness is about data arriving: a skipped re-delivery or a
    /// message of a revoked partition is not fresh data arriving late.
    #[test]
    fn the_ingest_delay_observes_only_applied_messages() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.handle(&message(JUDGMENTS, 1, 0, &judgment("s2", "d1", 1)), None, NOW_MS);
        d.revoke(BTreeSet::from([1])).unwrap();
        d.handle(&message(JUDGMENTS, 1, 1, &judgment("s2", "d2", 1)), None, NOW_MS);
        let h = &d.health.ingest_delay;
        assert_eq!(h.count, 2);
        // Each applied message was 2 s old (testing::KAFKA_MS).
        assert_eq!(h.sum_seconds, 4.0);
        let bucket = DELAY_BUCKETS.iter().position(|b| *b >= 2.0).unwrap();
        assert_eq!(h.counts[bucket], 2);
    }

    /// A batch is applied in order (decoded ahead once its shard exists);
    /// the partition's end marks the shard idle, so that its lists may
    /// close on processing time, until a message comes again.
    #[test]
    fn a_batch_is_applied_in_order_and_a_partition_end_marks_its_shard_idle() {
        let mut d = Daemon::for_tests(Config::default());
        let mut errors = kafka::RepeatedErrors::default();
        let mut batch: Vec<KafkaResult<OwnedMessage>> = vec![
            Ok(message(IMPRESSIONS, 0, 0, &impression("s1"))),
            Ok(message(JUDGMENTS, 0, 0, &judgment("s1", "d1", 2))),
            Err(KafkaError::PartitionEOF(0)),
        ];
        handle_batch(&mut d, &mut batch, &mut errors, false);
        assert!(batch.is_empty(), "the batch is emptied for the next turn");
        assert!(d.first_message_at.is_some());
        assert!(d.shards[&0].idle);
        assert_eq!(events(&d, 0), 2);
        assert_eq!(d.shards[&0].pipeline.open_lists(), 1, "the judgment joined the impression's list");
        let mut batch = vec![Ok(message(IMPRESSIONS, 0, 1, &impression("s2")))];
        handle_batch(&mut d, &mut batch, &mut errors, false);
        assert!(!d.shards[&0].idle);
        assert_eq!(d.shards[&0].pipeline.open_lists(), 2);
        assert_eq!(d.messages, 3);
    }

    /// The loop drains what is already fetched without waiting: a ready
    /// future gives its output, a pending one gives nothing.
    #[test]
    fn ready_now_takes_what_is_ready_and_never_waits() {
        assert_eq!(ready_now(std::future::ready(7)), Some(7));
        assert_eq!(ready_now(async { 8 }), Some(8));
        assert_eq!(ready_now(std::future::pending::<u8>()), None);
    }
}
