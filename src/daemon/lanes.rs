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
//! the messages of a partition whose queue could not be split. A queue is
//! kept apart from the consumer queue inside the rebalance callback, before
//! librdkafka assigns and fetches its partition (`kafka::keep_apart`); its
//! messages wait there until the daemon has applied the assignment and
//! takes the handle below, so each partition's messages come from one
//! queue, in offset order, and all of them can be held back.
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

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use rdkafka::Message;
    use rdkafka::consumer::Consumer as _;
    use std::time::{Duration, Instant};

    /// Messages waiting in a partition's own queue.
    fn queued(consumer: &Consumer, topic: &str, partition: i32) -> usize {
        use rdkafka::bindings as rd;
        let topic = std::ffi::CString::new(topic).unwrap();
        // SAFETY: as in `kafka::keep_apart`: a live client, a new reference
        // released after use.
        unsafe {
            let queue = rd::rd_kafka_queue_get_partition(consumer.client().native_ptr(), topic.as_ptr(), partition);
            assert!(!queue.is_null(), "a partition queue");
            let n = rd::rd_kafka_queue_length(queue);
            rd::rd_kafka_queue_destroy(queue);
            n
        }
    }

    /// What the lanes rely on: from the moment a partition is assigned,
    /// nothing of it comes on the consumer queue, however long the daemon
    /// takes to apply the assignment; its messages wait, from the first,
    /// in its own queue.
    #[tokio::test]
    async fn an_assigned_partition_delivers_nothing_on_the_consumer_queue_before_it_is_split() {
        let (_cluster, config) = super::super::testing::mock_topic("apart", 50);
        let signals = Arc::new(crate::kafka::KafkaSignals::default());
        let consumer = Arc::new(crate::kafka::create_consumer(&config, signals.clone()).unwrap());
        consumer.subscribe(&["apart"]).unwrap();
        let mut stream = consumer.stream();
        let assigned = || signals.assignment_queued();
        // The consumer queue is polled (which runs the rebalance callback)
        // as a daemon busy with a hand-over would leave it, until the
        // partition's own queue holds every message: fetched, and not
        // forwarded.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !assigned() || queued(&consumer, "apart", 0) < 50 {
            assert!(Instant::now() < deadline, "not assigned and fetched within 30 s");
            if let Ok(Some(Ok(m))) = tokio::time::timeout(Duration::from_millis(50), stream.next()).await {
                panic!("offset {} of an assigned partition came on the consumer queue", m.offset());
            }
        }
        let queue = consumer.split_partition_queue("apart", 0).expect("a partition queue");
        let mut lane = queue.stream();
        for expected in 0..50 {
            let m = tokio::time::timeout(Duration::from_secs(10), lane.next()).await.expect("a message");
            assert_eq!(m.expect("a message").expect("no error").offset(), expected);
        }
        drop(lane);
        drop(queue);
    }
}
