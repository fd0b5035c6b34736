//! Kafka input: the consumer, its context, and offset bookkeeping.
//!
//! First stage of the daemon. One consumer in group `kafka.group_id` reads
//! every topic in `kafka.topics`. Both topics must be keyed by session id
//! and have the same partition count: then partition p of every topic holds
//! the same sessions, all events of a list reach the instance that owns p,
//! and each partition number is assembled by its own pipeline shard without
//! locks or cross-instance coordination.
//!
//! Offsets are committed by rankpulse, never automatically: for each
//! topic-partition the commit point is the smaller of the next offset to
//! consume and the first offset of any list still open, so a restart never
//! skips an event whose list was not yet folded into the accumulators
//! (at-least-once).

use crate::config::{Config, is_secret_property};
use crate::publish::PartitionState;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{ConsumerContext, StreamConsumer};
use rdkafka::error::KafkaError;
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Consumer lag per (topic, partition), as librdkafka's statistics report it.
pub type LagTable = Arc<Mutex<BTreeMap<(String, i32), i64>>>;

/// The consumer's context: receives statistics on librdkafka's thread and
/// only copies the lag out (callbacks stay short).
pub struct RankpulseContext {
    pub lag: LagTable,
}

impl ClientContext for RankpulseContext {
    fn stats(&self, statistics: Statistics) {
        let Ok(mut lag) = self.lag.lock() else { return };
        for (topic, t) in statistics.topics {
            for (partition, p) in t.partitions {
                // Partition -1 is librdkafka's internal UA partition; a
                // negative lag means "unknown".
                if partition >= 0 && p.consumer_lag >= 0 {
                    lag.insert((topic.clone(), partition), p.consumer_lag);
                }
            }
        }
    }
}

impl ConsumerContext for RankpulseContext {}

pub type Consumer = StreamConsumer<RankpulseContext>;

/// How often librdkafka reports statistics (lag), in milliseconds.
const STATISTICS_INTERVAL_MS: &str = "1000";

/// Creates the group consumer for `config` (not yet subscribed).
pub fn create_consumer(config: &Config, lag: LagTable) -> Result<Consumer, KafkaError> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &config.kafka.brokers)
        .set("group.id", &config.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("statistics.interval.ms", STATISTICS_INTERVAL_MS)
        // librdkafka waits session.timeout.ms / 2 before forming a group on some
        // brokers and as long to notice a dead member: 45 s by default is slow
        // for failover. Overridable in [kafka.properties].
        .set("session.timeout.ms", "10000")
        .set("client.id", "rankpulse");
    for (key, value) in &config.kafka.properties {
        cc.set(key, value);
    }
    cc.create_with_context(RankpulseContext { lag })
}

/// The librdkafka properties rankpulse will use, secrets redacted (for logs).
pub fn describe_properties(config: &Config) -> String {
    config
        .kafka
        .properties
        .iter()
        .map(|(k, v)| format!("{k}={}", if is_secret_property(k) { "<redacted>" } else { v }))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Numbers topic-partitions densely (the assembler's source ids) and keeps,
/// per topic-partition, the next offset to consume and the last commit.
#[derive(Debug, Default)]
pub struct Sources {
    ids: BTreeMap<(String, i32), u32>,
    pub entries: Vec<SourceState>,
}

#[derive(Debug, Clone)]
pub struct SourceState {
    pub topic: String,
    pub partition: i32,
    /// One past the newest offset consumed.
    pub next_offset: Option<i64>,
    /// Offset last committed (the next one a restart will read).
    pub committed: Option<i64>,
    /// Event time of the newest event from this topic-partition (ms).
    pub last_event_ms: Option<i64>,
}

impl Sources {
    pub fn id(&mut self, topic: &str, partition: i32) -> u32 {
        if let Some(&id) = self.ids.get(&(topic.to_string(), partition)) {
            return id;
        }
        let id = self.entries.len() as u32;
        self.ids.insert((topic.to_string(), partition), id);
        self.entries.push(SourceState {
            topic: topic.to_string(),
            partition,
            next_offset: None,
            committed: None,
            last_event_ms: None,
        });
        id
    }

    /// Commit points: for each source, min(next offset, first offset still
    /// held by an open list); only those that moved past the last commit
    /// unless `all` (the final commit repeats every point, in case an
    /// earlier asynchronous commit failed).
    /// Only partitions for which `owned` holds are committed: after a
    /// rebalance another member owns the rest, and a late commit from here
    /// would move its offsets.
    pub fn commit_list(
        &self,
        held: &dyn Fn(u32) -> Option<i64>,
        owned: &dyn Fn(&str, i32) -> bool,
        all: bool,
    ) -> Option<(TopicPartitionList, Vec<(u32, i64)>)> {
        let mut tpl = TopicPartitionList::new();
        let mut moved = Vec::new();
        for (id, s) in self.entries.iter().enumerate() {
            let Some(next) = s.next_offset else { continue };
            if !owned(&s.topic, s.partition) {
                continue;
            }
            let point = held(id as u32).map_or(next, |h| h.min(next));
            if (all || s.committed.is_none_or(|c| point > c))
                && tpl.add_partition_offset(&s.topic, s.partition, Offset::Offset(point)).is_ok()
            {
                moved.push((id as u32, point));
            }
        }
        (!moved.is_empty()).then_some((tpl, moved))
    }

    pub fn mark_committed(&mut self, moved: &[(u32, i64)]) {
        for &(id, point) in moved {
            if let Some(s) = self.entries.get_mut(id as usize) {
                s.committed = Some(point);
            }
        }
    }

    /// Per (topic, partition) state for the exposition.
    pub fn partition_states(&self, lag: &LagTable) -> BTreeMap<(String, i32), PartitionState> {
        let lag = lag.lock().map(|l| l.clone()).unwrap_or_default();
        let mut out: BTreeMap<(String, i32), PartitionState> = BTreeMap::new();
        for s in &self.entries {
            let e = out.entry((s.topic.clone(), s.partition)).or_default();
            e.last_event_seconds = s.last_event_ms.map(|ms| ms as f64 / 1000.0);
        }
        for ((topic, partition), l) in lag {
            out.entry((topic, partition)).or_default().lag = Some(l);
        }
        out
    }
}
