//! The Kafka input's per-partition queues, between `kafka` and the
//! daemon's loop: every assigned topic-partition (a lane, as in `align`)
//! is read from a queue of its own, split off librdkafka's consumer queue.
//!
//! Why: to keep open lists bounded while catching up on a backlog, the
//! daemon must stop reading a topic that runs ahead of its partition's
//! other topics in event time (`align`). Pausing it in librdkafka throws
//! away what was prefetched and fetches it again on resume, which tripled
//! librdkafka's CPU on a judgment-heavy backlog (`docs/performance.md`). A
//! split queue that is simply not read keeps its prefetch, and librdkafka
//! stops fetching it once `queued.max.messages.kbytes` (per partition with
//! split queues) is reached: holding a lane back costs nothing.
//!
//! What stays on the consumer queue: rebalances, errors, statistics, and
//! the messages of a partition fetched before its queue was split. Those
//! come first: a turn of the loop reads lanes only after the consumer queue
//! was found empty, and a queue is split (when its assignment is applied)
//! before anything of it can be fetched into its own queue, so a
//! partition's messages are handled in offset order either way.
//!
//! librdkafka keeps a split queue split across reassignments (the queue is
//! marked forwarded by the application), but a handle must be taken again
//! after every assignment (`StreamPartitionQueue`'s documentation). Dropping
//! a handle disables the queue's wake-up callback, so the old handle of a
//! topic-partition is dropped before the new one is taken.

use crate::kafka::{Consumer, RankpulseContext, RebalanceEvent};
use rdkafka::consumer::stream_consumer::{MessageStream, StreamPartitionQueue};
use std::sync::Arc;

/// One assigned topic-partition and its queue.
pub struct Lane {
    pub topic: String,
    pub partition: i32,
    queue: StreamPartitionQueue<RankpulseContext>,
}

/// The split queues of the current assignment, in assignment order.
#[derive(Default)]
pub struct Lanes {
    lanes: Vec<Lane>,
}

impl Lanes {
    /// Follows an assignment change: revoked topic-partitions' queues are
    /// dropped, assigned ones split. Returns the topic-partitions whose
    /// queue could not be split (their messages keep coming on the
    /// consumer queue, unaligned).
    pub fn apply(&mut self, consumer: &Arc<Consumer>, event: &RebalanceEvent) -> Vec<(String, i32)> {
        let mut unsplit = Vec::new();
        match event {
            RebalanceEvent::Revoked(tps) => {
                self.lanes.retain(|l| !tps.iter().any(|(t, p)| *t == l.topic && *p == l.partition));
            }
            RebalanceEvent::Assigned(tps) => {
                for (topic, partition) in tps {
                    self.lanes.retain(|l| !(l.topic == *topic && l.partition == *partition));
                    match consumer.split_partition_queue(topic, *partition) {
                        Some(queue) => self.lanes.push(Lane { topic: topic.clone(), partition: *partition, queue }),
                        None => unsplit.push((topic.clone(), *partition)),
                    }
                }
            }
        }
        unsplit
    }

    pub fn iter(&self) -> impl Iterator<Item = &Lane> {
        self.lanes.iter()
    }

    pub fn len(&self) -> usize {
        self.lanes.len()
    }

    /// A message stream per lane, in the order of [`Self::iter`]. A stream
    /// registers its waker with the queue: streams live as long as the
    /// assignment, not one per read.
    pub fn streams(&self) -> Vec<MessageStream<'_, RankpulseContext>> {
        self.lanes.iter().map(|l| l.queue.stream()).collect()
    }

    /// Drops every queue (before the consumer closes: each holds it).
    pub fn clear(&mut self) {
        self.lanes.clear();
    }
}
