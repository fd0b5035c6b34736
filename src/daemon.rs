//! `rankpulse run`: the daemon. Wires Kafka → pipeline shards → publish →
//! HTTP, and owns the one ordered shutdown:
//! stop fetching → finalize (or checkpoint) every open list → publish →
//! commit → stop HTTP.
//!
//! One task consumes and owns every pipeline shard (one per partition
//! number, see `kafka`), so the hot path takes no lock. Lists whose gap
//! elapsed in event time close as the messages move the watermark on
//! (`assemble`). A tick (every [`TICK`]) closes the rest whose gap elapsed
//! and idle ones (processing time), commits offsets that became safe and
//! hands the publisher (`publisher`, a thread of its own) what it needs for
//! a fresh `/metrics`: the tick itself never renders, merges shards,
//! encodes, writes or waits on I/O, so the loop goes straight back to the
//! stream (`loop_gaps` measures how long it kept messages waiting).
//!
//! With `state.dir` set (see `state`), the tick also snapshots every shard
//! every `state.interval`; the publisher makes the checkpoint durable, and
//! only then are offsets committed and `/metrics` republished, so what
//! Prometheus has seen is always restorable and counters never go back
//! after a crash. A revoked partition's shard is rolled back to its last
//! checkpoint (the next owner continues from there) and an assigned one
//! takes its open lists from the checkpoint that got furthest in it.
//! Without `state.dir`, offsets are committed at-least-once (never past an
//! open list, and once the dead-letter copies they cover are acknowledged)
//! and everything open is finalized at shutdown.

use crate::align::Alignment;
use crate::assemble::store::fold_source;
use crate::assemble::{DimensionBudget, Source};
use crate::config::Config;
use crate::event::{Event, RejectReason};
use crate::http::{self, Published};
use crate::kafka::{self, Consumer, DeadLetters, KafkaSignals, Outages, RankpulseContext, RebalanceEvent, Sources};
use crate::pipeline::{Clock, OpsCounters, PREFETCH_BATCH, Pipeline};
use crate::state::{Checkpoint, ShardCheckpoint, StateError, StateStore};
use futures_util::StreamExt;
pub use health::{DELAY_BUCKETS, DaemonHealth, DelayHistogram};
use lanes::Lanes;
pub use loop_gaps::LoopGaps;
use publisher::{Done, Job, Publisher, ShardSnapshot, View};
use rdkafka::consumer::stream_consumer::MessageStream;
use rdkafka::consumer::{CommitMode, Consumer as _};
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::message::{BorrowedMessage, Message};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

mod health;
mod lanes;
mod loop_gaps;
mod publisher;

/// Publish / finalize / commit period.
pub const TICK: Duration = Duration::from_millis(500);
/// Longest a final synchronous commit may take at shutdown.
const FINAL_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest closing the consumer (leaving the group) may take at shutdown.
pub const CONSUMER_CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Most messages handled in one turn of the loop before the tick and
/// shutdown get a look again.
const DRAIN_BATCH: usize = 1024;

/// Without checkpoints, how often offsets are committed: finding the commit
/// point reads every open list, and once per two seconds is as good for
/// at-least-once as every tick (a restart re-reads at most that much more).
const COMMIT_INTERVAL: Duration = Duration::from_secs(2);

/// Ticks a walk of the open lists for the commit point takes (see
/// [`Daemon::walk_open_lists`]): 8 s at the 500 ms tick, so the commit
/// point trails the oldest open list by up to that much more. Walked at
/// once, 157k open lists held the consumer for 25 to 46 ms every
/// [`COMMIT_INTERVAL`] (S3 of `rankpulse-bench shapes`), most of a tick's
/// time and about an eighth of the daemon's CPU on that shape.
const COMMIT_WALK_TICKS: usize = 16;
/// Fewest lists a shard walks per tick: a small shard's walk ends in a
/// tick or two.
const MIN_COMMIT_WALK_SLICE: usize = 1024;

/// The output of `future` if it is ready without waiting.
fn ready_now<F: Future>(future: F) -> Option<F::Output> {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut cx) {
        std::task::Poll::Ready(v) => Some(v),
        std::task::Poll::Pending => None,
    }
}

/// Longest the dead-letter copies may take to be acknowledged at shutdown.
const DEAD_LETTER_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Debug, Error)]
pub enum DaemonError {
    // Each message names its cause once and carries no `source()`: `main`
    // prints the whole chain, which would say the cause twice.
    #[error("cannot listen on {addr}: {cause}")]
    Listen { addr: String, cause: std::io::Error },
    #[error("cannot create the Kafka consumer: {}", kafka::error_text(.0))]
    Consumer(KafkaError),
    #[error("cannot create the dead-letter producer: {}", kafka::error_text(.0))]
    DeadLetters(KafkaError),
    #[error("cannot subscribe to {topics:?}: {}", kafka::error_text(.cause))]
    Subscribe { topics: Vec<String>, cause: KafkaError },
    #[error(transparent)]
    State(#[from] StateError),
    #[error("checkpoint {path}: {reason}")]
    Restore { path: String, reason: String },
    #[error("cannot start the publishing thread: {0}")]
    Publisher(std::io::Error),
}

/// What a run did, for logs and tests.
#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    pub messages: u64,
    pub lists_finalized: i64,
    /// Lists still open at the end: 0 without checkpoints (all finalized),
    /// else the ones the last checkpoint carries over.
    pub open_lists_at_shutdown: usize,
    pub committed: BTreeMap<(String, i32), i64>,
    /// The last exposition published (after every list was finalized or checkpointed).
    pub final_exposition: String,
    /// When the first and the last message arrived (throughput measurements).
    pub first_message_at: Option<std::time::Instant>,
    pub last_message_at: Option<std::time::Instant>,
    /// Gaps between two messages handled while more were waiting (see
    /// [`LoopGaps`]): how long the loop kept the stream waiting.
    pub loop_gaps: LoopGaps,
}

/// "topic[0,1] topic2[0,1]" for logs.
fn describe(tps: &[(String, i32)]) -> String {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in tps {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic.iter().map(|(t, ps)| format!("{t}{ps:?}")).collect::<Vec<_>>().join(" ")
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A (topic, partition) and the offset committed for it.
type CommitPoint = ((String, i32), i64);

/// The key of the shard that holds what dropped shards accumulated: their
/// counters were published and must never go back. It has no partition,
/// lists or offsets; it is published and checkpointed like any shard.
const RETIRED: i32 = -1;

/// Ticks to prune every series once (see
/// [`crate::accumulate::Accumulators::prune_part`]):
/// 4 s at the 500 ms tick, well within a bucket width of 10 s, so a bucket
/// leaves at most one sweep after its time.
const PRUNE_PARTS: usize = 8;

/// Committed offsets of the group, asked for off the consumer task.
type HandOverQuery = tokio::task::JoinHandle<Vec<((String, i32), i64)>>;

/// One partition number's pipeline and the input positions it covers.
struct Shard {
    pipeline: Pipeline,
    /// Next offset per topic: every message before it is in this shard's
    /// state, so one below it (re-delivered after a restart or rebalance)
    /// is skipped.
    next_offsets: BTreeMap<String, i64>,
    /// Assigned to this instance now. A shard that is not keeps its
    /// counters (they were published) but its open lists are frozen: the
    /// partition's new owner continues them.
    owned: bool,
    /// The partition's end was reached and nothing came since: only then
    /// may its lists close on processing time. A backlog or a broker outage
    /// is not idleness.
    idle: bool,
    /// Which of the partition's topics are held back for running ahead in
    /// event time (`kafka.max_topic_drift`).
    alignment: Alignment,
    /// Without `state.dir`: the lowest offset per source that the last
    /// complete walk of the open lists found, with the positions at the
    /// walk's end folded in (see [`Daemon::walk_open_lists`]). Commits use
    /// it; `None` until a walk ends after the last rebalance, and then a
    /// commit walks the lists at once.
    commit_floor: Option<Vec<Source>>,
}

impl Shard {
    fn new(config: &Config, budget: &Arc<Mutex<DimensionBudget>>) -> Shard {
        Shard {
            pipeline: Pipeline::with_budget(&config.pipeline_settings(), budget.clone()),
            next_offsets: BTreeMap::new(),
            owned: true,
            idle: false,
            alignment: Alignment::default(),
            commit_floor: None,
        }
    }

    fn restore(&mut self, c: ShardCheckpoint, whole: bool) -> Result<(), String> {
        let sums = match whole {
            true => Some((c.accumulators.into_accumulators()?, c.counters.into_counters()?)),
            false => None,
        };
        self.pipeline.restore(c.assembler, sums);
        self.next_offsets = c.offsets;
        Ok(())
    }

    /// Holds back or releases this partition's topics (see
    /// [`Alignment::check`]), counting the holds onto `holds`.
    fn align(&mut self, drift_ms: i64, now_ms: i64, holds: &mut u64) {
        self.alignment.check(self.pipeline.assembler().lanes(), drift_ms, now_ms, &mut |_, hold| {
            *holds += u64::from(hold);
        });
    }

    /// What a checkpoint of this shard holds, taken on the consumer task
    /// and encoded by the publisher. The accumulators are shared, not
    /// copied (see [`crate::accumulate::Accumulators::series`]).
    fn snapshot(&self, partition: i32) -> ShardSnapshot {
        ShardSnapshot {
            partition,
            owned: self.owned,
            offsets: self.next_offsets.clone(),
            assembler: self.pipeline.assembler().snapshot(),
            accumulators: self.pipeline.accumulators().clone(),
            counters: self.pipeline.counters().clone(),
        }
    }
}

/// The daemon's mutable state, owned by the consuming task.
struct Daemon {
    config: Config,
    shards: BTreeMap<i32, Shard>,
    sources: Sources,
    signals: Arc<KafkaSignals>,
    messages: u64,
    /// Topic-partitions currently assigned: only these get lag and
    /// freshness gauges (a revoked partition is another instance's now).
    assigned: BTreeSet<(String, i32)>,
    /// Dimension values admitted, shared by all shards.
    budget: Arc<Mutex<DimensionBudget>>,
    store: Option<Arc<StateStore>>,
    health: DaemonHealth,
    outages: Outages,
    dead_letters: Option<DeadLetters>,
    last_checkpoint: Option<tokio::time::Instant>,
    /// Last commit attempt without checkpoints (see [`COMMIT_INTERVAL`]).
    last_commit: Option<tokio::time::Instant>,
    /// Offsets committed from checkpoints (state.dir set).
    committed: BTreeMap<(String, i32), i64>,
    /// Ticks so far: which part of the series the tick prunes.
    ticks: u64,
    /// Renders `/metrics` and writes checkpoints off the consumer task.
    publisher: Publisher,
    /// Offsets to commit once the dead-letter copies below the barrier
    /// settle (no `state.dir`), or once the checkpoint in flight is
    /// durable (`state.dir`; no barrier: the publisher waits for it).
    /// Dropped on a revoke: they may name partitions no longer ours.
    pending_commit: Option<(TopicPartitionList, Vec<CommitPoint>, Option<u64>)>,
    /// With `state.dir`: the group's committed offsets of the partitions
    /// whose shards this instance keeps without owning them, being asked
    /// for (see [`Self::retire_handed_over`]).
    hand_over: Option<HandOverQuery>,
    /// A job's result taken while waiting for it outside the tick.
    unhandled_done: Option<Done>,
    loop_gaps: LoopGaps,
    first_message_at: Option<std::time::Instant>,
    /// `kafka.max_topic_drift` in ms; 0: topics are never held back.
    max_topic_drift_ms: i64,
    /// Assignment changes applied to the shards but not yet to the
    /// partition queues, which the loop owns (see `lanes`).
    lane_events: Vec<RebalanceEvent>,
}

impl Daemon {
    /// One consumed message, at wall-clock time `now` (ms), decoded ahead
    /// by [`Self::prepare_batch`] (`None`: decoded here).
    fn handle(&mut self, m: &impl Message, decoded: Option<&Result<Event<'_>, RejectReason>>, now: i64) {
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
    fn lane_time(&self, topic: &str, partition: i32) -> i64 {
        self.shards
            .get(&partition)
            .and_then(|s| s.pipeline.assembler().lanes().iter().find(|(l, _)| l == topic))
            .map_or(i64::MIN, |(_, t)| *t)
    }

    /// Whether the partition queue of (`topic`, `partition`) is held back
    /// for running ahead in event time (`kafka.max_topic_drift`).
    fn held(&self, topic: &str, partition: i32) -> bool {
        self.shards.get(&partition).is_some_and(|s| s.alignment.is_held(topic))
    }

    /// Decodes a batch of messages and prefetches their lists
    /// ([`Pipeline::prepare`]) before any of them is applied. `None`: not a
    /// message, no payload, or a partition without a shard yet; such a
    /// message is decoded when it is handled.
    fn prepare_batch<'m>(
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
    fn check_alignment(&mut self, now: i64) {
        if self.max_topic_drift_ms == 0 {
            return;
        }
        for shard in self.shards.values_mut() {
            if shard.alignment.any_held() {
                shard.align(self.max_topic_drift_ms, now, &mut self.health.topic_pauses);
            }
        }
    }

    /// `session.max_open_lists` is per instance: each shard gets an equal
    /// share (rounded up).
    fn share_open_list_cap(&mut self) {
        // Frozen shards hold no more lists than when they were frozen (and
        // without checkpoints lose them at the next assignment): the cap is
        // shared by the shards that can grow.
        let owned = self.shards.values().filter(|s| s.owned).count();
        let share = self.config.session.max_open_lists.div_ceil(owned.max(1)).max(1);
        for shard in self.shards.values_mut() {
            shard.pipeline.set_max_open_lists(share);
        }
    }

    /// A partition reached its end: input is live, restored lists may
    /// expire on processing time again.
    fn partition_eof(&mut self, partition: i32) {
        if let Some(shard) = self.shards.get_mut(&partition) {
            shard.idle = true;
            shard.pipeline.resume_clock(wall_ms());
        }
    }

    /// Acts on the rebalances librdkafka reported since the last call.
    fn apply_rebalances(&mut self) -> Result<(), DaemonError> {
        // The flag is set after the event is queued: a rebalance queued
        // after this check is seen by the next one.
        // Checked before every message: a plain load first, the swap (a
        // locked instruction) only when a rebalance is pending.
        if !self.signals.rebalance_pending.load(Ordering::Relaxed)
            || !self.signals.rebalance_pending.swap(false, Ordering::Acquire)
        {
            return Ok(());
        }
        let events = match self.signals.rebalances.lock() {
            Ok(mut q) => std::mem::take(&mut *q),
            Err(_) => return Ok(()),
        };
        // Offsets may go back (the group's committed ones): a floor found
        // before is no longer known to hold.
        for shard in self.shards.values_mut() {
            shard.commit_floor = None;
        }
        for event in events {
            match &event {
                RebalanceEvent::Revoked(tps) => {
                    tracing::info!("partitions revoked: {}", describe(tps));
                    self.revoke(tps.iter().map(|(_, p)| *p).collect())?
                }
                RebalanceEvent::Assigned(tps) => {
                    tracing::info!("partitions assigned: {}", describe(tps));
                    self.assign(tps)
                }
            }
            self.lane_events.push(event);
        }
        Ok(())
    }

    /// With checkpoints, revoked shards go back to their last checkpoint:
    /// what they did since was never published nor committed, and the new
    /// owner redoes it from there.
    fn revoke(&mut self, partitions: BTreeSet<i32>) -> Result<(), DaemonError> {
        // Offsets noted for a later commit may be the revoked partitions':
        // committed after the new owner's, they would move it back.
        self.pending_commit = None;
        // The checkpoint read below must not be one being written: a
        // rebalance waits for the publisher's write in flight.
        if self.store.is_some()
            && let Some(done) = self.publisher.wait()
        {
            self.note_done(done);
        }
        let mut own: BTreeMap<i32, ShardCheckpoint> = match &self.store {
            Some(store) => match store.load_own()? {
                Some(c) => c.shards.into_iter().map(|s| (s.partition, s)).collect(),
                None => BTreeMap::new(),
            },
            None => BTreeMap::new(),
        };
        for p in partitions {
            if self.store.is_some() {
                let mut shard = Shard::new(&self.config, &self.budget);
                if let Some(c) = own.remove(&p) {
                    shard.restore(c, true).map_err(|reason| self.restore_error(reason))?;
                }
                self.shards.insert(p, shard);
            }
            if let Some(shard) = self.shards.get_mut(&p) {
                shard.owned = false;
                shard.idle = false;
                shard.alignment.reset();
            }
        }
        self.share_open_list_cap();
        Ok(())
    }

    /// Assigned shards take their open lists from the checkpoint, among all
    /// instances' in `state.dir`, that got furthest in the partition.
    fn assign(&mut self, tps: &[(String, i32)]) {
        let partitions: BTreeSet<i32> = tps.iter().map(|(_, p)| *p).collect();
        let mut candidates: BTreeMap<i32, ShardCheckpoint> = BTreeMap::new();
        if let Some(store) = &self.store {
            for c in store.load_all() {
                for s in c.shards {
                    if partitions.contains(&s.partition)
                        && candidates.get(&s.partition).is_none_or(|best| s.progress() > best.progress())
                    {
                        candidates.insert(s.partition, s);
                    }
                }
            }
        }
        if self.store.is_none() {
            // Without checkpoints, a partition revoked and not given back
            // went to another instance, which reads it again from the
            // committed offset (at most the oldest open list's first event):
            // its open lists are that instance's to finish, not this one's.
            // The counters of the lists finished here stay.
            for (p, shard) in self.shards.iter_mut().filter(|(p, s)| !s.owned && !partitions.contains(p)) {
                if shard.pipeline.open_lists() > 0 || !shard.next_offsets.is_empty() {
                    tracing::info!(
                        "partition {p} went to another instance: its {} open list(s) are left to it",
                        shard.pipeline.open_lists()
                    );
                }
                shard.pipeline.drop_lists();
                shard.next_offsets.clear();
            }
            let gone: Vec<i32> = self
                .shards
                .iter()
                .filter(|(p, s)| **p != RETIRED && !s.owned && !partitions.contains(p))
                .map(|(p, _)| *p)
                .collect();
            for p in gone {
                self.retire(p);
            }
        }
        for p in partitions {
            let (config, budget) = (&self.config, &self.budget);
            let shard = self.shards.entry(p).or_insert_with(|| Shard::new(config, budget));
            if let Some(c) = candidates.remove(&p)
                && c.progress() >= shard.next_offsets.values().sum::<i64>()
                && let Err(reason) = shard.restore(c, false)
            {
                tracing::warn!("cannot take over partition {p} from a checkpoint: {reason}");
            }
            // Every topic of the partition is a lane: event time closes
            // lists only once each has delivered.
            let topics = tps.iter().filter(|(_, tp)| *tp == p).map(|(t, _)| t.as_str());
            shard.pipeline.expect_lanes(topics);
            shard.owned = true;
            // Its end was reached before, perhaps; since this assignment
            // the messages from the committed offset on are a backlog
            // until the partition's end is reported again. Idle now, the
            // next tick would close its lists on processing time before
            // what the broker kept during an outage arrives.
            shard.idle = false;
            shard.alignment.reset();
        }
        self.share_open_list_cap();
    }

    /// Drops the shard of `p`, keeping what it accumulated in the
    /// [`RETIRED`] shard: a partition that went to another instance leaves
    /// no state behind here, nor a share of `session.max_open_lists`.
    fn retire(&mut self, p: i32) {
        let Some(shard) = self.shards.remove(&p) else { return };
        let (config, budget) = (&self.config, &self.budget);
        let retired = self.shards.entry(RETIRED).or_insert_with(|| Shard::new(config, budget));
        retired.owned = false;
        retired.pipeline.merge_sums(&shard.pipeline);
    }

    /// With `state.dir`, a revoked partition's shard keeps its last
    /// checkpoint's open lists: the partition may come back, or its new
    /// owner may read them from a shared `state.dir`. Once the group's
    /// committed offsets reach the shard's on every topic and pass it on
    /// one, the new owner has made its own state durable past it (it
    /// commits only what a checkpoint of its covers), and the shard is
    /// dropped.
    /// The committed offsets are asked of the broker off the consumer task
    /// (every `state.interval` while such shards exist); their answer is
    /// acted on at a later tick.
    fn retire_handed_over(&mut self, consumer: &Arc<Consumer>) {
        if self.store.is_none() {
            return;
        }
        if let Some(query) = self.hand_over.take_if(|q| q.is_finished()) {
            let committed: BTreeMap<(String, i32), i64> =
                ready_now(query).and_then(Result::ok).unwrap_or_default().into_iter().collect();
            let handed_over: Vec<i32> = self
                .shards
                .iter()
                .filter(|(p, s)| **p != RETIRED && !s.owned)
                .filter(|(p, s)| {
                    let c = |t: &String| committed.get(&(t.clone(), **p)).copied().unwrap_or(-1);
                    // Past this shard on one topic at least: committed by
                    // the new owner, not what this instance committed
                    // before the partition was revoked.
                    s.next_offsets.iter().all(|(t, next)| c(t) >= *next)
                        && s.next_offsets.iter().any(|(t, next)| c(t) > *next)
                })
                .map(|(p, _)| *p)
                .collect();
            for p in handed_over {
                tracing::info!("partition {p} is durably handed over: its shard is dropped");
                self.retire(p);
            }
            self.share_open_list_cap();
        }
        if self.hand_over.is_some() || !self.checkpoint_due() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, shard) in self.shards.iter().filter(|(p, s)| **p != RETIRED && !s.owned) {
            for topic in shard.next_offsets.keys() {
                tpl.add_partition(topic, *p);
            }
        }
        if tpl.count() == 0 {
            return;
        }
        let consumer = consumer.clone();
        self.hand_over = Some(tokio::task::spawn_blocking(move || {
            let Ok(committed) = consumer.committed_offsets(tpl, Duration::from_secs(10)) else { return Vec::new() };
            committed
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                    _ => None,
                })
                .collect()
        }));
    }

    fn restore_error(&self, reason: String) -> DaemonError {
        DaemonError::Restore {
            path: self.store.as_ref().map(|s| s.path().display().to_string()).unwrap_or_default(),
            reason,
        }
    }

    /// Loads this instance's last checkpoint: counters continue from it;
    /// open lists wait until their partition is assigned again.
    fn restore_own(&mut self) -> Result<(), DaemonError> {
        let Some(store) = &self.store else { return Ok(()) };
        let Some(checkpoint) = store.load_own()? else { return Ok(()) };
        if let Ok(mut b) = self.budget.lock() {
            *b = checkpoint.budget;
            // The bounds are this configuration's, whatever the checkpoint's were.
            b.max_values = self.config.dimensions.max_values;
            b.max_combinations = self.config.dimensions.max_combinations;
        }
        for c in checkpoint.shards {
            let mut shard = Shard::new(&self.config, &self.budget);
            let p = c.partition;
            shard.restore(c, true).map_err(|reason| self.restore_error(reason))?;
            shard.owned = false;
            self.shards.insert(p, shard);
        }
        tracing::info!("restored {} partition shard(s) from {}", self.shards.len(), store.path().display());
        self.share_open_list_cap();
        Ok(())
    }

    /// Closes lists past their gap in event time, and, on idle partitions
    /// while the broker is reachable, in processing time.
    fn finalize_expired(&mut self) {
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

    fn finalize_all(&mut self) {
        for shard in self.shards.values_mut() {
            shard.pipeline.finalize_all();
        }
    }

    /// Hands a checkpoint of every shard to the publisher, which makes it
    /// durable (after the dead-letter copies it covers) and publishes it;
    /// its offsets are committed when it reports so ([`Self::note_done`]).
    fn request_checkpoint(&mut self) {
        let Some(store) = &self.store else { return };
        let checkpoint = Checkpoint {
            fingerprint: store.fingerprint().to_string(),
            instance: store.instance.clone(),
            written_ms: wall_ms(),
            budget: self.budget.lock().map(|b| b.clone()).unwrap_or_default(),
            shards: Vec::new(),
        };
        let shards = self.shards.iter().map(|(p, s)| s.snapshot(*p)).collect();
        let barrier = self.dead_letters.as_ref().map(|dl| (dl.tracker.clone(), dl.barrier()));
        self.pending_commit = self.commit_points(false).map(|(tpl, moved)| (tpl, moved, None));
        let view = self.view();
        self.publisher.send(Job::Checkpoint { checkpoint: Box::new(checkpoint), shards, barrier, view });
    }

    /// What a publisher job reported. With `state.dir`, a durable
    /// checkpoint releases its offsets for commit; a failed one drops them
    /// (the next checkpoint covers them again).
    fn note_done(&mut self, done: Done) {
        match done {
            Done::Published => {}
            Done::Written { written_ms } => {
                self.health.checkpoints += 1;
                self.health.last_checkpoint_seconds = Some(written_ms as f64 / 1000.0);
            }
            Done::NotWritten => {
                self.health.checkpoint_failures += 1;
                self.pending_commit = None;
            }
        }
        self.unhandled_done = Some(done);
    }

    /// Commits what became committable: with `state.dir` the offsets of
    /// the last durable checkpoint, without it those noted at an earlier
    /// tick once the dead-letter copies they cover settled, then notes the
    /// current point (every [`COMMIT_INTERVAL`]). Never waits.
    fn commit(&mut self, consumer: &Consumer) {
        let written = matches!(self.unhandled_done.take(), Some(Done::Written { .. }));
        let tracker = self.dead_letters.as_ref().map(|dl| dl.tracker.clone());
        let settled = |barrier: &Option<u64>| match (barrier, &tracker) {
            (Some(b), Some(t)) => t.settled_before(*b),
            _ => true,
        };
        let ready = match &self.pending_commit {
            Some((_, _, barrier)) => {
                if self.store.is_some() {
                    written
                } else {
                    settled(barrier)
                }
            }
            None => false,
        };
        if ready && let Some((tpl, moved, _)) = self.pending_commit.take() {
            // Async: a failed commit is retried with a later point.
            if consumer.commit(&tpl, CommitMode::Async).is_ok() {
                self.mark_committed(&moved);
            }
        }
        if self.store.is_none()
            && self.pending_commit.is_none()
            && self.last_commit.is_none_or(|t| t.elapsed() >= COMMIT_INTERVAL)
        {
            self.last_commit = Some(tokio::time::Instant::now());
            let barrier = self.dead_letters.as_ref().map(|dl| dl.barrier());
            if let Some((tpl, moved)) = self.commit_points(false) {
                if settled(&barrier) {
                    if consumer.commit(&tpl, CommitMode::Async).is_ok() {
                        self.mark_committed(&moved);
                    }
                } else {
                    self.pending_commit = Some((tpl, moved, barrier));
                }
            }
        }
    }

    /// Offsets that became safe to commit (`all`: every point, not only
    /// those that moved). With checkpoints: the checkpointed next offsets of
    /// owned shards. Without: min(next offset, first offset of an open list).
    fn commit_points(&self, all: bool) -> Option<(TopicPartitionList, Vec<CommitPoint>)> {
        // Before the first tick the assignment is not known yet: nothing is
        // committed then.
        let owned = |topic: &str, partition: i32| self.assigned.contains(&(topic.to_string(), partition));
        if self.store.is_some() {
            let mut tpl = TopicPartitionList::new();
            let mut moved = Vec::new();
            for (p, shard) in &self.shards {
                for (topic, next) in &shard.next_offsets {
                    let tp = (topic.clone(), *p);
                    if shard.owned
                        && owned(topic, *p)
                        && (all || self.committed.get(&tp).is_none_or(|c| next > c))
                        && tpl.add_partition_offset(topic, *p, Offset::Offset(*next)).is_ok()
                    {
                        moved.push((tp, *next));
                    }
                }
            }
            return (!moved.is_empty()).then_some((tpl, moved));
        }
        let mut held: BTreeMap<u32, i64> = BTreeMap::new();
        for shard in self.shards.values() {
            let walked;
            let floor: &[Source] = match &shard.commit_floor {
                Some(floor) if !all => floor,
                _ => {
                    walked = shard.pipeline.assembler().min_open_offsets();
                    &walked
                }
            };
            for &Source { id, offset } in floor {
                let e = held.entry(id).or_insert(offset);
                *e = (*e).min(offset);
            }
        }
        let (tpl, moved) = self.sources.commit_list(&|id| held.get(&id).copied(), &owned, all)?;
        let moved = moved
            .into_iter()
            .filter_map(|(id, point)| {
                self.sources.entries.get(id as usize).map(|s| ((s.topic.clone(), s.partition), point))
            })
            .collect();
        Some((tpl, moved))
    }

    fn mark_committed(&mut self, moved: &[CommitPoint]) {
        for (tp, point) in moved {
            self.committed.insert(tp.clone(), *point);
            if let Some(s) = self.sources.entries.iter_mut().find(|s| s.topic == tp.0 && s.partition == tp.1) {
                s.committed = Some(*point);
            }
        }
    }

    /// Dead-letter copies must be acknowledged before the offsets of their
    /// messages are committed.
    fn dead_letters_flushed(&self) -> bool {
        match &self.dead_letters {
            Some(dl) => dl.flush(DEAD_LETTER_FLUSH_TIMEOUT).is_ok(),
            None => true,
        }
    }

    fn update_health(&mut self) {
        let now = wall_ms();
        let connected = self.signals.connected.load(Ordering::Relaxed);
        let observed = self.signals.observed.load(Ordering::Relaxed);
        if self.outages.update(connected, observed, now) {
            tracing::warn!("no Kafka broker reachable; consumption resumes when one is");
        }
        self.health.kafka_connected = connected;
        self.health.kafka_outages = self.outages.total;
        self.health.kafka_outage_seconds = self.outages.seconds(now);
        if let Some(dl) = &self.dead_letters {
            self.health.dead_letters = dl.sent;
            self.health.dead_letter_failures = dl.failures.load(Ordering::Relaxed);
        }
    }

    /// What an exposition shows besides the accumulators.
    fn view(&self) -> View {
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
    fn publish(&mut self) {
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

    /// Walks a slice of each owned shard's open lists for the commit point
    /// (no `state.dir`): about a sixteenth per tick, so that a full walk
    /// takes [`COMMIT_WALK_TICKS`] ticks and no tick holds the stream for
    /// all of them. A walk's result is never above the open lists' lowest
    /// offsets at its end; the positions then are folded in, since lists
    /// opened later start at or after them.
    fn walk_open_lists(&mut self) {
        if self.store.is_some() {
            return;
        }
        for (p, shard) in self.shards.iter_mut().filter(|(_, s)| s.owned) {
            let slice = (shard.pipeline.open_lists() / COMMIT_WALK_TICKS).max(MIN_COMMIT_WALK_SLICE);
            if let Some(mut floor) = shard.pipeline.scan_min_open_offsets(slice) {
                for (id, source) in self.sources.entries.iter().enumerate() {
                    if source.partition == *p
                        && let Some(next) = source.next_offset
                    {
                        fold_source(&mut floor, Source { id: id as u32, offset: next });
                    }
                }
                shard.commit_floor = Some(floor);
            }
        }
    }

    /// Retires time buckets no window can reach.
    fn prune(&mut self) {
        let now = wall_ms();
        let part = self.ticks as usize % PRUNE_PARTS;
        for shard in self.shards.values_mut() {
            shard.pipeline.prune_part(now, part, PRUNE_PARTS);
        }
    }

    fn lists_finalized(&self) -> i64 {
        self.shards.values().flat_map(|s| s.pipeline.accumulators().series.values()).map(|s| s.lists()).sum()
    }

    fn open_lists(&self) -> usize {
        self.shards.values().filter(|s| s.owned || self.store.is_none()).map(|s| s.pipeline.open_lists()).sum()
    }

    fn checkpoint_due(&self) -> bool {
        self.last_checkpoint.is_none_or(|t| t.elapsed() >= self.config.state.interval.duration)
    }
}

/// Handles a batch of messages, read from the consumer queue or the
/// partition queues, in order, and empties it; `more`: others are waiting
/// (see [`LoopGaps`]).
fn handle_batch<M: Message>(
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
fn fill_from_lanes<'a>(
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
fn poll_lanes<'a>(
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

/// Runs the daemon until `shutdown` resolves, then shuts down in order.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<RunSummary, DaemonError> {
    let listener = tokio::net::TcpListener::bind(&config.http.listen)
        .await
        .map_err(|cause| DaemonError::Listen { addr: config.http.listen.clone(), cause })?;
    run_on(config, listener, shutdown).await
}

/// As [`run`], serving HTTP on an already bound listener (tests bind port 0).
pub async fn run_on(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
) -> Result<RunSummary, DaemonError> {
    let published = Arc::new(Published::new(&config));
    run_with(config, listener, shutdown, published).await
}

/// As [`run_on`], publishing into `published` (the demo reads it to print summaries).
pub async fn run_with(
    config: Config,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()>,
    published: Arc<Published>,
) -> Result<RunSummary, DaemonError> {
    let store = if config.state.dir.is_empty() { None } else { Some(Arc::new(StateStore::open(&config)?)) };
    let publisher =
        Publisher::start(config.clone(), published.clone(), store.clone()).map_err(DaemonError::Publisher)?;
    let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(http::serve(listener, published.clone(), async move {
        let _ = http_stopped.await;
    }));

    let signals: Arc<KafkaSignals> = Arc::default();
    let consumer: Arc<Consumer> =
        Arc::new(kafka::create_consumer(&config, signals.clone()).map_err(DaemonError::Consumer)?);
    let dead_letters = DeadLetters::create(&config).map_err(DaemonError::DeadLetters)?;
    let budget = Arc::new(Mutex::new(config.pipeline_settings().dimension_budget()));
    let max_topic_drift_ms = config.kafka.max_topic_drift.ms();
    let mut daemon = Daemon {
        config,
        shards: BTreeMap::new(),
        sources: Sources::default(),
        signals,
        messages: 0,
        assigned: BTreeSet::new(),
        budget,
        store,
        health: DaemonHealth::default(),
        outages: Outages::starting(wall_ms()),
        dead_letters,
        last_checkpoint: None,
        last_commit: None,
        committed: BTreeMap::new(),
        publisher,
        pending_commit: None,
        ticks: 0,
        hand_over: None,
        unhandled_done: None,
        loop_gaps: LoopGaps::default(),
        first_message_at: None,
        max_topic_drift_ms,
        lane_events: Vec::new(),
    };
    // Before subscribing: the restored counters are what /metrics shows first.
    daemon.restore_own()?;
    let config = &daemon.config;
    let topics: Vec<&str> = config.kafka.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|cause| DaemonError::Subscribe { topics: config.kafka.topics.clone(), cause })?;
    tracing::info!("{} with {}", env!("CARGO_PKG_VERSION"), kafka::librdkafka_build());
    tracing::info!(
        "consuming {:?} from {} as group {:?}{}{}; /metrics on http://{}",
        config.kafka.topics,
        config.kafka.brokers,
        config.kafka.group_id,
        match kafka::describe_properties(config) {
            p if p.is_empty() => String::new(),
            p => format!(" ({p})"),
        },
        match &daemon.store {
            Some(s) => format!("; checkpoints in {} every {}", s.path().display(), config.state.interval.text),
            None => String::new(),
        },
        config.http.listen
    );

    daemon.update_health();
    daemon.publish();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    let mut last_message_at = None;
    // One stream for the whole run: `recv()` builds one per message, which
    // registers and unregisters a waker under a lock each time.
    let mut messages = consumer.stream();
    // Errors the stream delivers repeat at every retry of a failing
    // connection, like those of the client context: collapsed the same way.
    let mut stream_errors = kafka::RepeatedErrors::default();
    // A message of the consumer queue read while a rebalance was pending,
    // or to learn whether more were waiting when a turn ended at its
    // limit (see `LoopGaps`): the next turn starts with it.
    let mut carried = None;
    let mut lanes = Lanes::default();
    // One pass per assignment: the partition queues change only between
    // two passes, when no message read from them is in hand.
    'run: loop {
        for event in std::mem::take(&mut daemon.lane_events) {
            for (topic, partition) in lanes.apply(&consumer, &event) {
                tracing::warn!(
                    "{topic}[{partition}] cannot be read from a queue of its own: it is not held back when it runs ahead"
                );
            }
        }
        let mut streams = lanes.streams();
        let mut batch = Vec::with_capacity(PREFETCH_BATCH);
        // As `carried`, from a partition queue.
        let mut carried_lane = None;
        // Which lanes are held back, refreshed before each wait.
        let mut held = vec![false; lanes.len()];
        // Lanes found empty while a batch is filled.
        let mut tried = vec![false; lanes.len()];
        while daemon.lane_events.is_empty() {
            // A rebalance is applied between two batches; a message read
            // from a partition queue before it belongs to the assignment
            // before it, and is handled first.
            if daemon.signals.rebalance_pending.load(Ordering::Relaxed) {
                if let Some(m) = carried_lane.take() {
                    batch.push(m);
                    handle_batch(&mut daemon, &mut batch, &mut stream_errors, false);
                }
                daemon.apply_rebalances()?;
                continue;
            }
            for (h, lane) in held.iter_mut().zip(lanes.iter()) {
                *h = daemon.held(&lane.topic, lane.partition);
            }
            let woken = tokio::select! {
                biased;
                _ = &mut shutdown => break 'run,
                _ = tick.tick() => None,
                Some(message) = async {
                    match carried.take() {
                        Some(m) => Some(m),
                        None => messages.next().await,
                    }
                } => {
                    // Its poll ran a rebalance callback: the message may
                    // belong to a partition assigned by it, and is handled
                    // once that is applied.
                    if daemon.signals.rebalance_pending.load(Ordering::Relaxed) {
                        carried = Some(message);
                        continue;
                    }
                    Some(message)
                }
                message = async {
                    match carried_lane.take() {
                        Some(m) => m,
                        None => std::future::poll_fn(|cx| poll_lanes(&mut streams, &held, cx)).await,
                    }
                } => Some(message),
            };
            let Some(first) = woken else {
                if let Some(m) = carried_lane.take() {
                    batch.push(m);
                    handle_batch(&mut daemon, &mut batch, &mut stream_errors, false);
                }
                daemon.apply_rebalances()?;
                daemon.check_alignment(wall_ms());
                daemon.finalize_expired();
                // Copied out at once: a partition list kept alive would block
                // the consumer's destruction at shutdown.
                daemon.assigned = consumer
                    .assignment()
                    .map(|tpl| tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect())
                    .unwrap_or_default();
                daemon.update_health();
                published.set_ready(!daemon.assigned.is_empty() && daemon.health.kafka_connected);
                daemon.prune();
                daemon.walk_open_lists();
                daemon.ticks += 1;
                if let Some(done) = daemon.publisher.poll() {
                    daemon.note_done(done);
                }
                daemon.commit(&consumer);
                daemon.retire_handed_over(&consumer);
                if daemon.store.is_some() {
                    // One checkpoint in flight at a time; each is published
                    // once durable, and its offsets then committed.
                    if daemon.checkpoint_due() && !daemon.publisher.busy() {
                        daemon.last_checkpoint = Some(tokio::time::Instant::now());
                        daemon.request_checkpoint();
                    }
                } else {
                    daemon.publish();
                }
                continue;
            };
            // Messages already fetched are drained without going back
            // through select! (and the scheduler) for each one, a batch at
            // a time: each batch is decoded, its lists' memory is requested
            // all at once (so that their cache misses overlap), then its
            // messages are applied in order.
            let mut first = Some(first);
            let mut drained = 0;
            loop {
                batch.extend(first.take());
                // The consumer queue first: what it holds of a partition was
                // fetched before the partition's queue was split (`lanes`).
                let mut consumer_queue_empty = false;
                while batch.len() < PREFETCH_BATCH {
                    match ready_now(messages.next()).flatten() {
                        // Its poll ran a rebalance callback: the message
                        // may concern the new assignment, and is handled
                        // once that is applied.
                        Some(m) if daemon.signals.rebalance_pending.load(Ordering::Relaxed) => {
                            carried = Some(m);
                            break;
                        }
                        Some(m) => batch.push(m),
                        None => {
                            consumer_queue_empty = true;
                            break;
                        }
                    }
                }
                if consumer_queue_empty {
                    fill_from_lanes(&daemon, &lanes, &mut streams, &mut tried, &mut batch, PREFETCH_BATCH);
                }
                if batch.is_empty() {
                    daemon.loop_gaps.batch_ended(std::time::Instant::now(), false);
                    break;
                }
                drained += batch.len();
                handle_batch(&mut daemon, &mut batch, &mut stream_errors, true);
                if carried.is_some() || daemon.signals.rebalance_pending.load(Ordering::Relaxed) {
                    daemon.loop_gaps.batch_ended(std::time::Instant::now(), carried.is_some());
                    break;
                }
                if drained >= DRAIN_BATCH {
                    carried = ready_now(messages.next()).flatten();
                    if carried.is_none() && !daemon.signals.rebalance_pending.load(Ordering::Relaxed) {
                        fill_from_lanes(&daemon, &lanes, &mut streams, &mut tried, &mut batch, 1);
                        carried_lane = batch.pop();
                    }
                    let more = carried.is_some() || carried_lane.is_some();
                    daemon.loop_gaps.batch_ended(std::time::Instant::now(), more);
                    break;
                }
            }
            last_message_at = Some(std::time::Instant::now());
        }
    }

    // Ordered shutdown. 1. Stop fetching: the loop above no longer polls.
    drop(carried);
    drop(messages);
    lanes.clear();
    published.set_ready(false);
    daemon.apply_rebalances()?;
    // The job in flight first: its checkpoint is superseded by the last.
    if let Some(done) = daemon.publisher.wait() {
        daemon.note_done(done);
    }
    daemon.pending_commit = None;
    // 2. Finalize every open list, or checkpoint it to continue after a
    // restart; 3. publish the result.
    daemon.update_health();
    let durable = if daemon.store.is_some() {
        daemon.request_checkpoint();
        let done = daemon.publisher.wait();
        if let Some(done) = done {
            daemon.note_done(done);
        }
        matches!(done, Some(Done::Written { .. }))
    } else {
        daemon.finalize_all();
        daemon.publish();
        daemon.publisher.wait();
        daemon.dead_letters_flushed()
    };
    // 4. Commit what is safe: everything consumed, now that nothing is open
    // (or everything open is checkpointed).
    let open_lists_at_shutdown = daemon.open_lists();
    let finalized_here = daemon.lists_finalized();
    let publisher = std::mem::replace(&mut daemon.publisher, Publisher::stopped());
    let published_total = publisher.finish();
    let mut summary = RunSummary {
        messages: daemon.messages,
        // Without state.dir the shards hand their accumulations to the
        // publisher, which holds the total.
        lists_finalized: if daemon.store.is_some() {
            finalized_here
        } else {
            published_total.series.values().map(|s| s.lists()).sum()
        },
        open_lists_at_shutdown,
        committed: BTreeMap::new(),
        final_exposition: String::new(),
        first_message_at: daemon.first_message_at,
        last_message_at,
        loop_gaps: daemon.loop_gaps.clone(),
    };
    if durable && let Some((tpl, moved)) = daemon.commit_points(true) {
        let c = consumer.clone();
        let commit = tokio::task::spawn_blocking(move || c.commit(&tpl, CommitMode::Sync));
        match tokio::time::timeout(FINAL_COMMIT_TIMEOUT, commit).await {
            Ok(Ok(Ok(()))) => daemon.mark_committed(&moved),
            Ok(Ok(Err(e))) => tracing::error!("final commit failed: {e}"),
            _ => tracing::error!("final commit timed out"),
        }
    }
    for s in &daemon.sources.entries {
        if let Some(c) = s.committed {
            summary.committed.insert((s.topic.clone(), s.partition), c);
        }
    }
    for (tp, c) in &daemon.committed {
        summary.committed.insert(tp.clone(), *c);
    }
    summary.final_exposition = published.exposition().as_str().to_owned();
    // 5. Stop HTTP.
    let _ = http_stop.send(());
    let _ = http.await;
    // Closing the consumer leaves the group; with the broker unreachable
    // librdkafka can block on it, so it gets a bounded time off the runtime.
    drop(daemon);
    let close = tokio::task::spawn_blocking(move || drop(consumer));
    if tokio::time::timeout(CONSUMER_CLOSE_TIMEOUT, close).await.is_err() {
        tracing::warn!("the Kafka consumer did not close in {CONSUMER_CLOSE_TIMEOUT:?}; exiting anyway");
    }
    Ok(summary)
}
