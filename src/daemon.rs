//! `rankpulse run`: the daemon. Wires Kafka → pipeline shards → publish →
//! HTTP, and owns the one ordered shutdown:
//! stop fetching → finalize every open list → publish → commit → stop HTTP.
//!
//! One task consumes and owns every pipeline shard (one per partition
//! number, see `kafka`), so the hot path takes no lock. A tick (every
//! [`TICK`]) closes lists whose gap elapsed, commits offsets that became
//! safe and publishes a fresh exposition for `/metrics`, which is thus at
//! most one tick behind a list's finalization.

use crate::accumulate::Accumulators;
use crate::assemble::Source;
use crate::config::Config;
use crate::http::{self, Published};
use crate::kafka::{self, Consumer, LagTable, Sources};
use crate::pipeline::{OpsCounters, Pipeline};
use crate::publish::{Snapshot, render};
use rdkafka::consumer::{CommitMode, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

/// Publish / finalize / commit period.
pub const TICK: Duration = Duration::from_millis(500);
/// Longest a final synchronous commit may take at shutdown.
const FINAL_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);
/// Longest closing the consumer (leaving the group) may take at shutdown.
pub const CONSUMER_CLOSE_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, Error)]
pub enum DaemonError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create the Kafka consumer: {0}")]
    Consumer(#[source] KafkaError),
    #[error("cannot subscribe to {topics:?}: {source}")]
    Subscribe {
        topics: Vec<String>,
        #[source]
        source: KafkaError,
    },
}

/// What a run did, for logs and tests.
#[derive(Debug, Default, Clone)]
pub struct RunSummary {
    pub messages: u64,
    pub lists_finalized: i64,
    pub open_lists_at_shutdown: usize,
    pub committed: BTreeMap<(String, i32), i64>,
    /// The last exposition published (after every list was finalized).
    pub final_exposition: String,
}

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The daemon's mutable state, owned by the consuming task.
struct Daemon {
    config: Config,
    shards: BTreeMap<i32, Pipeline>,
    sources: Sources,
    lag: LagTable,
    published: Arc<Published>,
    messages: u64,
    /// Topic-partitions currently assigned: only these get lag and
    /// freshness gauges (a revoked partition is another instance's now).
    assigned: std::collections::BTreeSet<(String, i32)>,
}

impl Daemon {
    fn shard(&mut self, partition: i32) -> &mut Pipeline {
        let config = &self.config;
        self.shards.entry(partition).or_insert_with(|| Pipeline::new(config))
    }

    fn handle(&mut self, topic: &str, partition: i32, offset: i64, payload: Option<&[u8]>) {
        self.messages += 1;
        let id = self.sources.id(topic, partition);
        let now = wall_ms();
        let shard = self.shard(partition);
        // A message without payload (tombstone) is an empty, invalid event.
        let result = shard.ingest(topic, payload.unwrap_or(b""), now, Some(Source { id, offset }));
        let watermark = shard.assembler.watermark_ms();
        if let Some(s) = self.sources.entries.get_mut(id as usize) {
            s.next_offset = Some(offset + 1);
            if result.is_ok() {
                s.last_event_ms = Some(s.last_event_ms.map_or(watermark, |t| t.max(watermark)));
            }
        }
    }

    /// Closes lists past their gap (event or processing time).
    fn finalize_expired(&mut self) {
        let now = wall_ms();
        for shard in self.shards.values_mut() {
            shard.finalize_expired(Some(now));
        }
    }

    fn finalize_all(&mut self) {
        for shard in self.shards.values_mut() {
            shard.finalize_all();
        }
    }

    /// Offsets that became safe to commit (`all`: every point, not only those that moved).
    fn commit_points(&self, all: bool) -> Option<(rdkafka::TopicPartitionList, Vec<(u32, i64)>)> {
        let mut held: BTreeMap<u32, i64> = BTreeMap::new();
        for shard in self.shards.values() {
            for (id, offset) in shard.assembler.min_open_offsets() {
                let e = held.entry(id).or_insert(offset);
                *e = (*e).min(offset);
            }
        }
        // Before the first tick the assignment is not known yet: nothing is
        // committed then.
        let owned = |topic: &str, partition: i32| self.assigned.contains(&(topic.to_string(), partition));
        self.sources.commit_list(&|id| held.get(&id).copied(), &owned, all)
    }

    fn publish(&self) {
        let mut accumulators = Accumulators::new(self.config.metrics.cutoffs.len(), self.config.windows.bucket.ms());
        let mut counters = OpsCounters::default();
        let mut open = 0;
        for shard in self.shards.values() {
            accumulators.merge(&shard.accumulators);
            counters.merge(&shard.counters);
            open += shard.open_lists();
        }
        let mut partitions = self.sources.partition_states(&self.lag);
        partitions.retain(|tp, _| self.assigned.contains(tp));
        let text = render(&Snapshot {
            config: &self.config,
            now_ms: wall_ms(),
            accumulators: &accumulators,
            counters: &counters,
            open_lists: open,
            partitions: &partitions,
        });
        self.published.set_exposition(text);
        self.published.with_history(|h| h.sample(&self.config, &accumulators, wall_ms()));
    }

    /// Drops time buckets no window can reach.
    fn prune(&mut self) {
        let keep =
            self.config.windows.spans.iter().map(|s| s.ms()).max().unwrap_or(0) + self.config.windows.bucket.ms();
        let now = wall_ms();
        for shard in self.shards.values_mut() {
            shard.accumulators.prune(now, keep);
        }
    }

    fn lists_finalized(&self) -> i64 {
        self.shards.values().flat_map(|s| s.accumulators.series.values()).map(|s| s.total.lists).sum()
    }
}

/// Runs the daemon until `shutdown` resolves, then shuts down in order.
pub async fn run(config: Config, shutdown: impl Future<Output = ()>) -> Result<RunSummary, DaemonError> {
    let listener = tokio::net::TcpListener::bind(&config.http.listen)
        .await
        .map_err(|source| DaemonError::Listen { addr: config.http.listen.clone(), source })?;
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
    let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(http::serve(listener, published.clone(), async move {
        let _ = http_stopped.await;
    }));

    let lag: LagTable = Arc::default();
    let consumer: Arc<Consumer> =
        Arc::new(kafka::create_consumer(&config, lag.clone()).map_err(DaemonError::Consumer)?);
    let topics: Vec<&str> = config.kafka.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|source| DaemonError::Subscribe { topics: config.kafka.topics.clone(), source })?;
    eprintln!(
        "rankpulse: consuming {:?} from {} as group {:?}{}; /metrics on http://{}",
        config.kafka.topics,
        config.kafka.brokers,
        config.kafka.group_id,
        match kafka::describe_properties(&config) {
            p if p.is_empty() => String::new(),
            p => format!(" ({p})"),
        },
        config.http.listen
    );

    let mut daemon = Daemon {
        config,
        shards: BTreeMap::new(),
        sources: Sources::default(),
        lag,
        published: published.clone(),
        messages: 0,
        assigned: Default::default(),
    };
    daemon.publish();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => break,
            _ = tick.tick() => {
                daemon.finalize_expired();
                if let Some((tpl, moved)) = daemon.commit_points(false) {
                    // Async: a failed commit is retried with a later point on the next tick.
                    if consumer.commit(&tpl, CommitMode::Async).is_ok() {
                        daemon.sources.mark_committed(&moved);
                    }
                }
                // Copied out at once: a partition list kept alive would block
                // the consumer's destruction at shutdown.
                daemon.assigned = consumer
                    .assignment()
                    .map(|tpl| tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect())
                    .unwrap_or_default();
                published.set_ready(!daemon.assigned.is_empty());
                daemon.prune();
                daemon.publish();
            }
            message = consumer.recv() => match message {
                Ok(m) => daemon.handle(m.topic(), m.partition(), m.offset(), m.payload()),
                Err(e) => eprintln!("rankpulse: kafka: {e}"),
            },
        }
    }

    // Ordered shutdown. 1. Stop fetching: the loop above no longer polls.
    published.set_ready(false);
    // 2. Finalize every open list and 3. publish the result.
    daemon.finalize_all();
    daemon.publish();
    // 4. Commit: nothing is open any more, so every consumed offset is safe.
    let mut summary = RunSummary {
        messages: daemon.messages,
        lists_finalized: daemon.lists_finalized(),
        open_lists_at_shutdown: daemon.shards.values().map(Pipeline::open_lists).sum(),
        committed: BTreeMap::new(),
        final_exposition: String::new(),
    };
    if let Some((tpl, moved)) = daemon.commit_points(true) {
        let c = consumer.clone();
        let commit = tokio::task::spawn_blocking(move || c.commit(&tpl, CommitMode::Sync));
        match tokio::time::timeout(FINAL_COMMIT_TIMEOUT, commit).await {
            Ok(Ok(Ok(()))) => daemon.sources.mark_committed(&moved),
            Ok(Ok(Err(e))) => eprintln!("rankpulse: final commit failed: {e}"),
            _ => eprintln!("rankpulse: final commit timed out"),
        }
    }
    for s in &daemon.sources.entries {
        if let Some(c) = s.committed {
            summary.committed.insert((s.topic.clone(), s.partition), c);
        }
    }
    summary.final_exposition = published.exposition().as_str().to_owned();
    // 5. Stop HTTP.
    let _ = http_stop.send(());
    let _ = http.await;
    // Closing the consumer leaves the group; with the broker unreachable
    // librdkafka can block on it, so it gets a bounded time off the runtime.
    let close = tokio::task::spawn_blocking(move || drop(consumer));
    if tokio::time::timeout(CONSUMER_CLOSE_TIMEOUT, close).await.is_err() {
        eprintln!("rankpulse: the Kafka consumer did not close in {CONSUMER_CLOSE_TIMEOUT:?}; exiting anyway");
    }
    Ok(summary)
}
