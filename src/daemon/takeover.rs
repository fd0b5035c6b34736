//! Partitions assigned to this instance that it cannot take over yet,
//! between `rebalance` (which finds them) and the consumer (which must not
//! deliver them): with the Kafka state backend, a partition is started
//! only from what its hand-over (`state::kafka`: the claim, then the read
//! of every instance's checkpoints) returned.
//!
//! Two cases hold a partition here:
//! - its hand-over failed (the state topic could not be written or read):
//!   started from the group's committed offsets instead, it would count
//!   again what its former owner counted after them, and leave that
//!   owner's open lists unfinished;
//! - a checkpoint found it claimed by another instance (fenced) while the
//!   group still assigns it here: the claim was late (an evicted member's),
//!   or this instance is the zombie and its own rebalance is on its way.
//!   Left frozen, it would stop until the next rebalance; claimed again
//!   after `state.interval`, it goes on from the newest owner's checkpoint
//!   (if this instance is the zombie, the claims alternate, each exact,
//!   until its rebalance arrives).
//!
//! A held partition's shard is frozen (not owned) and its topic-partitions
//! are paused at the consumer, which drops what it had prefetched of them
//! (a split queue left unread would not stop a message already handed to
//! the loop). The hand-over is retried, each partition on its own time,
//! with a doubling delay (from 1 s, at most `state.interval`); once it
//! succeeds the partition is resumed and each of its topics sought: to the
//! offset its restored shard covers; for a topic the shard has no position
//! on, to the first offset this instance handled of it (what it read since
//! went back with a fence), else to the lowest one skipped while held
//! (a message delivered before the pause took effect).

use super::{Daemon, DaemonError};
use crate::kafka::Consumer;
use rdkafka::Offset;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer as _;
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

/// First delay before a failed hand-over is retried.
pub(super) const FIRST_RETRY: Duration = Duration::from_secs(1);
/// Longest a seek of a resumed partition may wait for librdkafka.
const SEEK_TIMEOUT: Duration = Duration::from_secs(5);

/// The held partitions and what the consumer must be told of them.
#[derive(Debug, Default)]
pub(super) struct TakingOver {
    /// Held partition → its topics (every topic-partition is paused), and
    /// when its hand-over is tried next.
    held: BTreeMap<i32, (Vec<String>, Instant)>,
    /// The delay after the next failure.
    backoff: Duration,
    /// Lowest offset per topic-partition of a message that reached the
    /// loop while its partition was held (delivered before the pause took
    /// effect): where it resumes when its shard covers no offset there.
    rewind: BTreeMap<(String, i32), i64>,
    /// The first offset handled per topic-partition whose shard had no
    /// position on that topic yet: where a partition fenced while still
    /// assigned resumes a topic its restored shard has no position on
    /// (what this instance read of it since then went back with the
    /// fence, and was never skipped while held).
    first: BTreeMap<(String, i32), i64>,
    /// Topic-partitions paused at the consumer and not resumed yet.
    paused: BTreeSet<(String, i32)>,
    /// Topic-partitions to seek once resumed, and where.
    seeks: Vec<(String, i32, i64)>,
}

impl TakingOver {
    pub(super) fn len(&self) -> usize {
        self.held.len()
    }

    pub(super) fn contains(&self, partition: i32) -> bool {
        self.held.contains_key(&partition)
    }

    /// Holds `partition` (of `topics`), trying its hand-over again after
    /// `delay` at the latest.
    pub(super) fn hold(&mut self, partition: i32, topics: Vec<String>, delay: Duration, now: Instant) {
        let at = now + delay;
        let at = self.held.get(&partition).map_or(at, |(_, r)| (*r).min(at));
        self.held.insert(partition, (topics, at));
        if self.backoff.is_zero() {
            self.backoff = FIRST_RETRY;
        }
    }

    /// A topic's first message handled by a shard without a position on
    /// it (see `first`).
    pub(super) fn note_first(&mut self, topic: &str, partition: i32, offset: i64) {
        let e = self.first.entry((topic.to_string(), partition)).or_insert(offset);
        *e = (*e).min(offset);
    }

    /// A message of a held partition reached the loop: it must come again.
    pub(super) fn note_skipped(&mut self, topic: &str, partition: i32, offset: i64) {
        let e = self.rewind.entry((topic.to_string(), partition)).or_insert(offset);
        *e = (*e).min(offset);
    }

    /// The partitions whose hand-over is due at `now`.
    pub(super) fn due(&self, now: Instant) -> BTreeSet<i32> {
        self.held.iter().filter(|(_, (_, at))| now >= *at).map(|(p, _)| *p).collect()
    }

    /// Makes the held partitions due now (tests).
    #[cfg(test)]
    pub(super) fn retry_now(&mut self) {
        let now = Instant::now();
        for (_, at) in self.held.values_mut() {
            *at = now;
        }
    }

    /// The retry of `partitions` failed: the next one after twice the
    /// delay, at most `max`.
    pub(super) fn failed(&mut self, partitions: &BTreeSet<i32>, now: Instant, max: Duration) {
        for p in partitions {
            if let Some((_, at)) = self.held.get_mut(p) {
                *at = now + self.backoff;
            }
        }
        self.backoff = (self.backoff * 2).min(max.max(FIRST_RETRY));
    }

    /// `partition` is no longer held: taken over, with `offsets` the next
    /// offset per topic its shard covers (the consumer seeks there), or
    /// revoked (`None`: its pause is lifted, nothing sought).
    pub(super) fn release(&mut self, partition: i32, offsets: Option<&BTreeMap<String, i64>>) {
        let Some((topics, _)) = self.held.remove(&partition) else { return };
        for topic in topics {
            let tp = (topic.clone(), partition);
            let rewind = self.rewind.remove(&tp);
            let first = self.first.get(&tp).copied();
            if let Some(offsets) = offsets
                && let Some(at) = offsets.get(&topic).copied().or(first).or(rewind)
            {
                self.seeks.push((topic, partition, at));
            }
        }
        if self.held.is_empty() {
            self.backoff = Duration::ZERO;
        }
    }

    /// What the consumer must be told now: topic-partitions to pause, to
    /// resume, and to seek (after resuming). Marks them done.
    pub(super) fn consumer_ops(&mut self) -> ConsumerOps {
        // Every tick asks: nothing held nor paused is the usual answer.
        if self.held.is_empty() && self.paused.is_empty() && self.seeks.is_empty() {
            return ConsumerOps::default();
        }
        let wanted: BTreeSet<(String, i32)> =
            self.held.iter().flat_map(|(p, (ts, _))| ts.iter().map(move |t| (t.clone(), *p))).collect();
        let pause: Vec<_> = wanted.difference(&self.paused).cloned().collect();
        let resume: Vec<_> = self.paused.difference(&wanted).cloned().collect();
        self.paused = wanted;
        ConsumerOps { pause, resume, seek: std::mem::take(&mut self.seeks) }
    }
}

/// Pauses, resumes and seeks for the consumer (see [`TakingOver::consumer_ops`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct ConsumerOps {
    pub(super) pause: Vec<(String, i32)>,
    pub(super) resume: Vec<(String, i32)>,
    pub(super) seek: Vec<(String, i32, i64)>,
}

impl ConsumerOps {
    fn is_empty(&self) -> bool {
        self.pause.is_empty() && self.resume.is_empty() && self.seek.is_empty()
    }
}

fn list(tps: &[(String, i32)]) -> TopicPartitionList {
    let mut tpl = TopicPartitionList::new();
    for (t, p) in tps {
        tpl.add_partition(t, *p);
    }
    tpl
}

impl Daemon {
    /// Holds `partitions` (see the module's documentation), with their
    /// topics from `tps`, retrying after `delay`.
    pub(super) fn hold(&mut self, partitions: &BTreeSet<i32>, tps: &[(String, i32)], delay: Duration) {
        let now = Instant::now();
        for &p in partitions {
            let topics = tps.iter().filter(|(_, tp)| *tp == p).map(|(t, _)| t.clone()).collect();
            let (config, budget) = (&self.config, &self.budget);
            let shard = self.shards.entry(p).or_insert_with(|| super::Shard::new(config, budget));
            shard.owned = false;
            shard.idle = false;
            shard.alignment.reset();
            self.taking_over.hold(p, topics, delay, now);
        }
        self.share_open_list_cap();
    }

    /// Tries the hand-over of the held partitions that are due; those it
    /// takes over are released.
    pub(super) fn retry_hand_over(&mut self) -> Result<(), DaemonError> {
        let now = Instant::now();
        let due = self.taking_over.due(now);
        if due.is_empty() {
            return Ok(());
        }
        let Some(store) = self.store.clone() else { return Ok(()) };
        // A checkpoint in flight carries these shards as held: written after
        // the claims below, it would carry their new epoch.
        if let Some(done) = self.publisher.wait() {
            self.settle(done)?;
        }
        // Shards waiting for the last checkpoint come first; its read is
        // retried on a thread of its own (`retry_restore`), not here on
        // the consumer task, where it would wait up to 30 s every tick.
        if !self.restore_pending.is_empty() {
            self.taking_over.failed(&due, now, self.config.state.interval.duration);
            return Ok(());
        }
        match store.hand_over(&due) {
            Ok(mut found) => {
                let tps: Vec<(String, i32)> = due
                    .iter()
                    .flat_map(|p| {
                        self.taking_over.held.get(p).into_iter().flat_map(|(ts, _)| ts).map(|t| (t.clone(), *p))
                    })
                    .collect();
                for p in &due {
                    self.take(*p, found.remove(p), &tps);
                    let offsets = self.shards.get(p).map(|s| s.next_offsets.clone()).unwrap_or_default();
                    self.taking_over.release(*p, Some(&offsets));
                }
                tracing::info!("partitions {due:?} taken over after all");
                self.share_open_list_cap();
            }
            Err(e) => {
                tracing::error!("cannot take partitions {due:?} over yet (they stay held): {e}");
                self.taking_over.failed(&due, now, self.config.state.interval.duration);
            }
        }
        Ok(())
    }

    /// Tells the consumer what the held partitions need (pause, resume,
    /// seek). Failures are logged: a pause that failed lets messages
    /// through, which the frozen shard skips and the seek brings back.
    pub(super) fn sync_consumer(&mut self, consumer: &Consumer) {
        apply(consumer, self.taking_over.consumer_ops());
    }
}

/// Carries `ops` out at `consumer`.
fn apply(consumer: &Consumer, ops: ConsumerOps) {
    if ops.is_empty() {
        return;
    }
    if !ops.pause.is_empty()
        && let Err(e) = consumer.pause(&list(&ops.pause))
    {
        tracing::warn!("cannot pause {:?}: {e}", ops.pause);
    }
    if !ops.resume.is_empty()
        && let Err(e) = consumer.resume(&list(&ops.resume))
    {
        tracing::warn!("cannot resume {:?}: {e}", ops.resume);
    }
    for (topic, p, offset) in ops.seek {
        if let Err(e) = consumer.seek(&topic, p, Offset::Offset(offset), SEEK_TIMEOUT) {
            tracing::warn!("cannot seek {topic}[{p}] to {offset}: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use rdkafka::Message;

    /// What the daemon relies on from librdkafka: a paused partition
    /// delivers nothing, not even what was prefetched before the pause,
    /// and once resumed and sought it delivers from the offset sought.
    async fn next(stream: &mut rdkafka::consumer::MessageStream<'_, crate::kafka::RankpulseContext>) -> i64 {
        loop {
            let m = tokio::time::timeout(Duration::from_secs(10), stream.next()).await.expect("a message");
            if let Some(Ok(m)) = m {
                return m.offset();
            }
        }
    }

    #[tokio::test]
    async fn librdkafka_delivers_nothing_of_a_paused_partition_and_resumes_where_sought() {
        let (_cluster, config) = super::super::testing::mock_topic("held", 50);
        let consumer = crate::kafka::create_consumer(&config, Default::default()).unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset("held", 0, Offset::Beginning).unwrap();
        consumer.assign(&tpl).unwrap();
        let mut stream = consumer.stream();
        assert_eq!(next(&mut stream).await, 0);
        assert_eq!(next(&mut stream).await, 1);
        let tp = vec![("held".to_string(), 0)];
        apply(&consumer, ConsumerOps { pause: tp.clone(), ..ConsumerOps::default() });
        let during = tokio::time::timeout(Duration::from_millis(500), stream.next()).await;
        assert!(
            !matches!(during, Ok(Some(Ok(_)))),
            "a paused partition delivered {:?}",
            during.map(|m| m.map(|m| m.map(|m| m.offset())))
        );
        apply(&consumer, ConsumerOps { resume: tp, seek: vec![("held".to_string(), 0, 1)], ..ConsumerOps::default() });
        assert_eq!(next(&mut stream).await, 1, "resumed where sought");
        assert_eq!(next(&mut stream).await, 2);
    }

    fn topics() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    /// Held partitions are paused once, resumed and sought once released;
    /// the seek goes to the shard's offsets, else to the first message of a
    /// topic new to the shard, else to the lowest skipped one; a revoked
    /// one is resumed without a seek.
    #[test]
    fn held_partitions_are_paused_then_resumed_where_their_shard_starts() {
        let now = Instant::now();
        let mut t = TakingOver::default();
        t.hold(0, topics(), Duration::ZERO, now);
        t.hold(1, topics(), Duration::ZERO, now);
        let ops = t.consumer_ops();
        assert_eq!(ops.pause.len(), 4);
        assert!(ops.resume.is_empty() && ops.seek.is_empty());
        assert_eq!(t.consumer_ops(), ConsumerOps::default(), "paused once");
        t.note_skipped("b", 0, 9);
        t.note_skipped("b", 0, 7);
        t.note_first("b", 1, 3);
        t.note_skipped("b", 1, 8);
        t.release(0, Some(&BTreeMap::from([("a".to_string(), 5)])));
        t.release(1, Some(&BTreeMap::new()));
        let ops = t.consumer_ops();
        assert!(ops.pause.is_empty());
        assert_eq!(ops.resume.len(), 4);
        assert_eq!(ops.seek, [("a".to_string(), 0, 5), ("b".to_string(), 0, 7), ("b".to_string(), 1, 3)]);
        t.hold(1, topics(), Duration::ZERO, now);
        t.release(1, None);
        assert!(t.consumer_ops().seek.is_empty(), "revoked: nothing sought");
        assert_eq!(t.len(), 0);
    }

    /// Retries double their delay up to the cap; each held partition is
    /// tried on its own time, a new hold after its own delay.
    #[test]
    fn retries_back_off_up_to_the_interval() {
        let now = Instant::now();
        let mut t = TakingOver::default();
        t.hold(0, topics(), Duration::ZERO, now);
        assert_eq!(t.due(now), BTreeSet::from([0]));
        let max = Duration::from_secs(3);
        let p0 = BTreeSet::from([0]);
        t.failed(&p0, now, max);
        assert!(t.due(now).is_empty());
        assert_eq!(t.due(now + Duration::from_secs(1)), p0);
        t.failed(&p0, now, max);
        assert!(t.due(now + Duration::from_secs(1)).is_empty());
        assert_eq!(t.due(now + Duration::from_secs(2)).len(), 1);
        t.failed(&p0, now, max);
        t.failed(&p0, now, max);
        assert!(t.due(now + Duration::from_millis(2999)).is_empty(), "capped at 3 s");
        assert_eq!(t.due(now + max).len(), 1);
        t.hold(1, topics(), Duration::ZERO, now);
        assert_eq!(t.due(now), BTreeSet::from([1]), "each partition on its own time");
        t.hold(2, topics(), max, now);
        assert_eq!(t.due(now + max), BTreeSet::from([0, 1, 2]));
    }
}
