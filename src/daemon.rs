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
//! With checkpoints (`state.dir`, or `state.backend = "kafka"`; see
//! `state`), the tick also snapshots every shard
//! every `state.interval`; the publisher makes the checkpoint durable, and
//! only then are offsets committed and `/metrics` republished, so what
//! Prometheus has seen is always restorable and counters never go back
//! after a crash. A revoked partition's shard is rolled back to its last
//! checkpoint (the next owner continues from there) and an assigned one
//! takes its open lists from the checkpoint that got furthest in it.
//! Without checkpoints, offsets are committed at-least-once (never past an
//! open list, and once the dead-letter copies they cover are acknowledged)
//! and everything open is finalized at shutdown.
//!
//! This file keeps the daemon's state ([`Daemon`]) and the loop that
//! drives it; the rest is split by what happens to the state, in flow
//! order: `consume` (messages into `shard`s), `rebalance` (assignment
//! changes), `tick` (processing time), `commit` (offsets back to Kafka),
//! `takeover` (partitions held until their hand-over succeeds),
//! `publisher` (rendering and checkpoints, on its own thread), `shutdown`;
//! `lanes` and `loop_gaps` serve the loop; what it counts of its own health is `crate::health`.

use crate::config::Config;
use crate::health::DaemonHealth;
use crate::http::{self, Published};
use crate::kafka::{self, Consumer, DeadLetters, KafkaSignals, Outages, RebalanceEvent, Sources};
use crate::state::{StateError, StateStore};
use commit::CommitPoint;
use consume::{fill_from_lanes, handle_batch, poll_lanes, ready_now};
use futures_util::StreamExt;
use lanes::Lanes;
pub use loop_gaps::LoopGaps;
use publisher::{JobOutcome, Publisher};
use rankpulse_core::assemble::DimensionBudget;
use rankpulse_core::pipeline::PREFETCH_BATCH;
use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer as _;
use rdkafka::error::KafkaError;
use rebalance::HandOverQuery;
use shard::Shard;
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use thiserror::Error;

mod commit;
mod consume;
mod lanes;
mod loop_gaps;
mod publisher;
mod rebalance;
mod shard;
mod shutdown;
mod takeover;
#[cfg(test)]
mod testing;
mod tick;

/// Publish / finalize / commit period.
pub const TICK: Duration = Duration::from_millis(500);
/// Longest closing the consumer (leaving the group) may take at shutdown.
pub const CONSUMER_CLOSE_TIMEOUT: Duration = Duration::from_secs(3);
/// Most messages handled in one turn of the loop before the tick and
/// shutdown get a look again.
const DRAIN_BATCH: usize = 1024;

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
    #[error("cannot start the publishing thread: {0}")]
    Publisher(std::io::Error),
    #[error("http.web_config: {0}")]
    WebConfig(#[from] http::web_config::WebConfigError),
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

fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The daemon's mutable state, owned by the consuming task.
struct Daemon {
    /// The whole configuration: shards are made from it as partitions come.
    config: Config,
    /// One per partition number, plus the [`RETIRED`](shard::RETIRED) one;
    /// kept across rebalances so that published counters never go back.
    shards: BTreeMap<i32, Shard>,
    /// Per topic-partition positions and commits, and the dense ids open
    /// lists hold offsets by.
    sources: Sources,
    /// What librdkafka's callbacks report (rebalances, connectivity, lag),
    /// shared with the consumer's context.
    signals: Arc<KafkaSignals>,
    /// Messages received, skipped ones included (the run's summary).
    messages: u64,
    /// Topic-partitions currently assigned: only these get lag and
    /// freshness gauges (a revoked partition is another instance's now).
    assigned: BTreeSet<(String, i32)>,
    /// Dimension values admitted, shared by all shards.
    budget: Arc<Mutex<DimensionBudget>>,
    /// Where checkpoints go (`state.backend`); `None`: commits are at-least-once and
    /// everything open is finalized at shutdown.
    store: Option<Arc<StateStore>>,
    /// Counted on this task, handed to the publisher with every view.
    health: DaemonHealth,
    /// Broker outages, from the connectivity signals at each tick.
    outages: Outages,
    /// Where invalid messages are copied (`kafka.dead_letter_topic`);
    /// their acknowledgements hold commits back.
    dead_letters: Option<DeadLetters>,
    /// When the last checkpoint was requested (`state.interval`).
    last_checkpoint: Option<tokio::time::Instant>,
    /// Last commit attempt without checkpoints (see
    /// [`COMMIT_INTERVAL`](commit::COMMIT_INTERVAL)).
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
    unhandled_done: Option<JobOutcome>,
    /// Partitions a checkpoint found taken over by another instance (the
    /// Kafka store's fencing), to give up as if revoked.
    fenced: BTreeSet<i32>,
    /// Partitions assigned here that cannot be taken over yet (a failed
    /// hand-over, or fenced while still assigned): held, paused at the
    /// consumer, until a retried hand-over succeeds.
    taking_over: takeover::TakingOver,
    /// Revoked (or fenced) partitions whose shards could not be put back
    /// to the last checkpoint (it could not be read: the state topic
    /// unreachable). Frozen as they were, they hold what nothing durable
    /// covers, so no checkpoint is written while any waits.
    restore_pending: BTreeSet<i32>,
    /// When the checkpoint is read again for them, and the delay after.
    restore_retry: Option<(std::time::Instant, std::time::Duration)>,
    /// That read, in flight.
    restore_read: Option<std::thread::JoinHandle<Result<Option<crate::state::Checkpoint>, crate::state::StateError>>>,
    /// How long the loop kept fetched messages waiting.
    loop_gaps: LoopGaps,
    /// For the run's summary (throughput measurements).
    first_message_at: Option<std::time::Instant>,
    /// `kafka.max_topic_drift` in ms; 0: topics are never held back.
    max_topic_drift_ms: i64,
    /// Assignment changes applied to the shards but not yet to the
    /// partition queues, which the loop owns (see `lanes`).
    lane_events: Vec<RebalanceEvent>,
}

impl Daemon {
    /// Nothing consumed, nothing assigned: `run_with` restores the last
    /// checkpoint into it before subscribing.
    fn new(
        config: Config,
        store: Option<Arc<StateStore>>,
        publisher: Publisher,
        signals: Arc<KafkaSignals>,
        dead_letters: Option<DeadLetters>,
    ) -> Daemon {
        let budget = Arc::new(Mutex::new(config.pipeline_settings().dimension_budget()));
        let max_topic_drift_ms = config.kafka.max_topic_drift.ms();
        Daemon {
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
            fenced: BTreeSet::new(),
            taking_over: takeover::TakingOver::default(),
            restore_pending: BTreeSet::new(),
            restore_retry: None,
            restore_read: None,
            loop_gaps: LoopGaps::default(),
            first_message_at: None,
            max_topic_drift_ms,
            lane_events: Vec::new(),
        }
    }
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
    let store = if config.state.enabled() { Some(Arc::new(StateStore::open(&config)?)) } else { None };
    let publisher =
        Publisher::start(config.clone(), published.clone(), store.clone()).map_err(DaemonError::Publisher)?;
    let web_config = match &config.http.web_config {
        Some(path) => Some(http::web_config::WebConfig::watch(path)?),
        None => None,
    };
    let scheme = match web_config.as_ref().map(|w| w.current()) {
        Some(loaded) if loaded.tls.is_some() => "https",
        _ => "http",
    };
    let access = http::Access {
        web_config,
        open_probes: config.http.open_probes,
        max_password_checks: config.http.max_password_checks,
    };
    let probes = match &config.http.probe_listen {
        Some(addr) => Some(
            tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|cause| DaemonError::Listen { addr: addr.clone(), cause })?,
        ),
        None => None,
    };
    let (http_stop, http_stopped) = tokio::sync::oneshot::channel::<()>();
    let http = tokio::spawn(http::serve_with_probes(listener, probes, published.clone(), access, http_stopped));

    let signals: Arc<KafkaSignals> = Arc::default();
    let consumer: Arc<Consumer> =
        Arc::new(kafka::create_consumer(&config, signals.clone()).map_err(DaemonError::Consumer)?);
    let dead_letters = DeadLetters::create(&config).map_err(DaemonError::DeadLetters)?;
    let mut daemon = Daemon::new(config, store, publisher, signals, dead_letters);
    // Before subscribing: the restored counters are what /metrics shows first.
    daemon.restore_own()?;
    let config = &daemon.config;
    let topics: Vec<&str> = config.kafka.topics.iter().map(String::as_str).collect();
    consumer
        .subscribe(&topics)
        .map_err(|cause| DaemonError::Subscribe { topics: config.kafka.topics.clone(), cause })?;
    tracing::info!("{} with {}", env!("CARGO_PKG_VERSION"), kafka::librdkafka_build());
    tracing::info!(
        "consuming {:?} from {} as group {:?}{}{}; /metrics on {scheme}://{}",
        config.kafka.topics,
        config.kafka.brokers,
        config.kafka.group_id,
        match kafka::describe_properties(config) {
            p if p.is_empty() => String::new(),
            p => format!(" ({p})"),
        },
        match &daemon.store {
            Some(s) => format!("; checkpoints in {} every {}", s.location(), config.state.interval.text),
            None => String::new(),
        },
        config.http.listen
    );

    for unused in config.unused_sections() {
        tracing::warn!("{unused}");
    }
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
        daemon.sync_consumer(&consumer);
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
            if daemon.signals.rebalance_pending() {
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
                    // belong to a partition it changed (revoked, or
                    // assigned without a queue of its own), and is handled
                    // once that is applied.
                    if daemon.signals.rebalance_pending() {
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
                daemon.on_tick(&consumer, &published)?;
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
                // The consumer queue first: rebalances and errors, and the
                // messages of a partition whose queue could not be split
                // (`lanes`).
                let mut consumer_queue_empty = false;
                while batch.len() < PREFETCH_BATCH {
                    match ready_now(messages.next()).flatten() {
                        // Its poll ran a rebalance callback: the message
                        // may concern the new assignment, and is handled
                        // once that is applied.
                        Some(m) if daemon.signals.rebalance_pending() => {
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
                if carried.is_some() || daemon.signals.rebalance_pending() {
                    daemon.loop_gaps.batch_ended(std::time::Instant::now(), carried.is_some());
                    break;
                }
                if drained >= DRAIN_BATCH {
                    carried = ready_now(messages.next()).flatten();
                    if carried.is_none() && !daemon.signals.rebalance_pending() {
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
    shutdown::shut_down(daemon, consumer, &published, http_stop, http, last_message_at).await
}
