//! The hot path: messages from the consumer queue and the partition
//! queues (`lanes`) into the pipeline shards, between `kafka` (input) and
//! `assemble` (via [`Pipeline`](crate::pipeline::Pipeline)). A batch is decoded and its lists
//! prefetched before any message of it is applied; each message is then
//! checked against its shard's position (re-deliveries are skipped),
//! counted for freshness and ingested. Topics that run ahead of their
//! partition in event time are held back here (`align`).

use super::lanes::Lanes;
use super::shard::Shard;
use super::{Daemon, wall_ms};
use crate::assemble::Source;
use crate::event::{Event, RejectReason};
use crate::kafka::{self, RankpulseContext};
use crate::pipeline::Clock;
use futures_util::StreamExt;
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
            self.shards.insert(partition, Shard::new(&self.config, &self.budget));
            self.share_open_list_cap();
        }
        let Some(shard) = self.shards.get_mut(&partition) else { return };
        // A message fetched before its partition was revoked: the new owner
        // counts it (from the state this instance handed over, or from the
        // committed offset), or, back here, it comes again.
        if !shard.owned {
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
        if let Some(s) = self.sources.entries.get_mut(id as usize) {
            s.next_offset = Some(offset + 1);
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
    /// ([`Pipeline::prepare`](crate::pipeline::Pipeline::prepare)) before any of them is applied. `None`: not a
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
                Some(shard.pipeline.prepare(m.payload()?))
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
