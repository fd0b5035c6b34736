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
//!
//! Everything that speaks librdkafka's callbacks and bookkeeping is here
//! (the consumer context and its signals, outages, collapsed client errors,
//! the dead-letter producer, per-partition sources and their commit
//! points), so that the daemon's modules see plain types and the
//! client's threads meet the consumer task in one place; about 640 lines
//! before the tests.

use crate::config::{Config, is_secret_property};
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Consumer lag per (topic, partition), as librdkafka's statistics report it.
pub type LagTable = Arc<Mutex<BTreeMap<(String, i32), i64>>>;

/// A change of this consumer's assignment, as the rebalance callback saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebalanceEvent {
    Revoked(Vec<(String, i32)>),
    Assigned(Vec<(String, i32)>),
}

/// What librdkafka's callbacks tell the consuming task. The callbacks only
/// record; the task acts on it before it handles its next message.
#[derive(Debug, Default)]
pub struct KafkaSignals {
    pub lag: LagTable,
    /// Rebalances not yet handled by the consuming task. Private with
    /// `rebalance_pending`: the flag is set after each event is queued and
    /// cleared before the queue is taken, which only the methods below do.
    rebalances: Mutex<Vec<RebalanceEvent>>,
    /// Set after a rebalance is queued: the task checks this before every
    /// message instead of taking the lock.
    rebalance_pending: AtomicBool,
    /// Whether a broker connection is up (statistics, and the all-brokers-down error).
    pub connected: AtomicBool,
    /// Set by the first statistics report: before it, "not connected" is
    /// not an outage yet (see [`Outages`]).
    pub observed: AtomicBool,
    /// Until when every broker is known to have answered what it was
    /// asked (librdkafka's monotonic clock, µs; 0 before the first
    /// report): the time of the last statistics report less the silence of
    /// its most silent broker with requests in flight. A partition that
    /// delivers nothing is idle up to that moment only: what a frozen
    /// broker still holds cannot have been missed before it.
    pub answered_mono_us: AtomicI64,
}

impl KafkaSignals {
    /// Queues a rebalance for the consuming task (from librdkafka's
    /// callback: short, and a poisoned lock drops the event rather than
    /// panic in C's stack). False when it could not be queued.
    pub fn queue_rebalance(&self, event: RebalanceEvent) -> bool {
        let Ok(mut q) = self.rebalances.lock() else { return false };
        q.push(event);
        self.rebalance_pending.store(true, Ordering::Release);
        true
    }

    /// Whether a rebalance is queued: a plain load, cheap before every
    /// message.
    pub fn rebalance_pending(&self) -> bool {
        self.rebalance_pending.load(Ordering::Relaxed)
    }

    /// The queued rebalances, oldest first; `None` when none is pending.
    /// The flag is cleared before the queue is taken, so an event queued
    /// meanwhile is seen at the next call.
    pub fn take_rebalances(&self) -> Option<Vec<RebalanceEvent>> {
        if !self.rebalance_pending() || !self.rebalance_pending.swap(false, Ordering::Acquire) {
            return None;
        }
        self.rebalances.lock().ok().map(|mut q| std::mem::take(&mut *q))
    }

    /// Whether the rebalance queue can still take events (its lock is not
    /// poisoned).
    pub fn can_queue_rebalances(&self) -> bool {
        !self.rebalances.is_poisoned()
    }

    /// Whether an assignment is queued and not yet taken.
    #[cfg(test)]
    pub fn assignment_queued(&self) -> bool {
        self.rebalances.lock().is_ok_and(|q| q.iter().any(|e| matches!(e, RebalanceEvent::Assigned(_))))
    }
}

impl KafkaSignals {
    /// [`Self::answered_mono_us`] as wall-clock ms, given the wall clock
    /// `now_ms` read at about the same moment (`None` before any report).
    pub fn answered_at_ms(&self, now_ms: i64) -> Option<i64> {
        let answered = self.answered_mono_us.load(Ordering::Relaxed);
        (answered > 0).then(|| now_ms - (monotonic_us() - answered).max(0) / 1_000)
    }
}

/// Broker outages as `/metrics` counts them, decided at each tick from
/// [`KafkaSignals`].
///
/// Before the first connection the daemon is starting, not in an outage:
/// librdkafka needs a moment to connect. That wait becomes an outage, dated
/// from the start, as soon as librdkafka has reported (`observed`) that no
/// broker is up; a connection first ends it without one. A broker that
/// is down when the daemon starts is therefore an outage like any other,
/// counted once however long it lasts.
#[derive(Debug, Clone, PartialEq)]
pub struct Outages {
    /// Start of the current outage, or of the wait for the first
    /// connection (wall ms); `None` while connected.
    since_ms: Option<i64>,
    /// The time since `since_ms` is an outage (not only the start-up wait).
    counted: bool,
    /// Outages since start.
    pub total: u64,
    /// Reminders logged in the current outage (see [`Self::reminder`]).
    reminded: usize,
}

/// When a long outage is said again, in seconds since it began: an
/// operator who started rankpulse without a broker learns within seconds,
/// and again while it lasts, what it waits for; after a minute, every five.
const REMINDERS_S: [i64; 3] = [10, 30, 60];
const REMINDER_EVERY_S: i64 = 300;

impl Outages {
    /// Starting at `now_ms`, not yet connected.
    pub fn starting(now_ms: i64) -> Self {
        Outages { since_ms: Some(now_ms), counted: false, total: 0, reminded: 0 }
    }

    /// Notes what the signals say at `now_ms`; true when an outage has
    /// just begun (for the one log line about it).
    pub fn update(&mut self, connected: bool, observed: bool, now_ms: i64) -> bool {
        if connected {
            self.since_ms = None;
            self.counted = false;
            self.reminded = 0;
            return false;
        }
        match self.since_ms {
            None => self.since_ms = Some(now_ms),
            Some(_) if self.counted || !observed => return false,
            Some(_) => {}
        }
        self.counted = true;
        self.total += 1;
        true
    }

    /// The seconds the current outage has lasted, once per milestone of
    /// [`REMINDERS_S`] and then every [`REMINDER_EVERY_S`]: when to say it
    /// again. `None` between milestones, while connected or still starting.
    pub fn reminder(&mut self, now_ms: i64) -> Option<i64> {
        let lasted = match self.since_ms {
            Some(since) if self.counted => (now_ms - since).max(0) / 1000,
            _ => return None,
        };
        (lasted >= Self::due_after(self.reminded)).then(|| {
            // Past several milestones at once (a stalled loop): one line.
            while Self::due_after(self.reminded) <= lasted {
                self.reminded += 1;
            }
            lasted
        })
    }

    /// When reminder number `reminded` (0-based) is due, in seconds.
    fn due_after(reminded: usize) -> i64 {
        match REMINDERS_S.get(reminded) {
            Some(&at) => at,
            None => REMINDERS_S[REMINDERS_S.len() - 1] + REMINDER_EVERY_S * (reminded + 1 - REMINDERS_S.len()) as i64,
        }
    }

    /// How long the current outage has lasted at `now_ms`, in seconds (0
    /// when connected or still starting).
    pub fn seconds(&self, now_ms: i64) -> f64 {
        match self.since_ms {
            Some(since) if self.counted => (now_ms - since).max(0) as f64 / 1000.0,
            _ => 0.0,
        }
    }
}

/// Until when (µs, a statistics report's clock) every connected broker
/// has answered, given the report's time `ts` and each broker's state,
/// requests in flight and µs since it last sent anything. A broker with
/// nothing in flight has answered all it was asked; one that never sent
/// anything (`rxidle` -1) has answered nothing yet.
fn answered_until<'a>(ts: i64, brokers: impl Iterator<Item = (&'a str, i64, i64)>) -> Option<i64> {
    brokers
        .filter(|(state, waiting, _)| *state == "UP" && *waiting > 0)
        .map(|(_, _, rxidle)| (rxidle >= 0).then(|| ts - rxidle))
        .try_fold(ts, |earliest, t| t.map(|t| earliest.min(t)))
}

/// librdkafka's clock (`rd_clock`: `CLOCK_MONOTONIC` in µs), the clock of a
/// statistics report's `ts`. `std::time::Instant` reads the same clock but
/// does not expose its value.
fn monotonic_us() -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000
}

/// The consumer's context: receives statistics, errors and rebalances on
/// librdkafka's side and only records them (callbacks stay short).
pub struct RankpulseContext {
    pub signals: Arc<KafkaSignals>,
    /// librdkafka reports a failing connection again at every retry (a
    /// refused login or an untrusted certificate about 20 times a second):
    /// logged once, then with a count.
    errors: Mutex<RepeatedErrors>,
    /// A broker with requests in flight that has sent nothing for longer
    /// than this (µs; the consumer's `session.timeout.ms`) is not
    /// answering: an outage, though its connection is up.
    unresponsive_after_us: i64,
}

impl RankpulseContext {
    pub fn new(signals: Arc<KafkaSignals>, session_timeout_ms: i64) -> Self {
        RankpulseContext {
            signals,
            errors: Mutex::new(RepeatedErrors::default()),
            unresponsive_after_us: session_timeout_ms.saturating_mul(1_000),
        }
    }
}

/// How often a repeating error is logged again, with its count.
const REPEAT_LOG_INTERVAL: Duration = Duration::from_secs(60);

/// Collapses errors that repeat: each distinct error is logged when first
/// seen, then at most once a minute with the count of its repeats. An
/// unreachable broker alternates two errors ("Connection refused", "1/1
/// brokers are down"), so a few recent errors are tracked, not just the last.
#[derive(Debug, Default)]
pub struct RepeatedErrors {
    /// Error text without librdkafka's varying "(after N ms in state S)"
    /// suffix → (repeats since logged, when logged). At most
    /// `REPEATED_ERRORS_TRACKED` entries; the one logged longest ago goes first.
    recent: Vec<(String, u64, std::time::Instant)>,
}

/// Distinct errors tracked for collapsing.
const REPEATED_ERRORS_TRACKED: usize = 8;

impl RepeatedErrors {
    /// The line to log for `text` seen at `now`, if any.
    pub fn note(&mut self, text: &str, now: std::time::Instant) -> Option<String> {
        let key = text.split(" (after ").next().unwrap_or(text);
        if let Some((_, count, logged)) = self.recent.iter_mut().find(|(k, _, _)| k == key) {
            *count += 1;
            let since = now.saturating_duration_since(*logged);
            if since < REPEAT_LOG_INTERVAL {
                return None;
            }
            let line = format!("{text} (and {count} times more in the last {} s)", since.as_secs());
            *count = 0;
            *logged = now;
            return Some(line);
        }
        if self.recent.len() == REPEATED_ERRORS_TRACKED
            && let Some(oldest) = self.recent.iter().enumerate().min_by_key(|(_, e)| e.2).map(|(i, _)| i)
        {
            self.recent.swap_remove(oldest);
        }
        self.recent.push((key.to_string(), 0, now));
        Some(text.to_string())
    }
}

/// A librdkafka error as one sentence. A configuration error's description
/// already names the property and its value, which rdkafka's `Display`
/// appends again; a secret property's value is never repeated.
pub fn error_text(e: &KafkaError) -> String {
    match e {
        KafkaError::ClientConfig(_, desc, key, value) => {
            let desc = if desc.is_empty() { format!("invalid value for {key}") } else { desc.clone() };
            if is_secret_property(key) && !value.is_empty() { desc.replace(value.as_str(), "<redacted>") } else { desc }
        }
        other => other.to_string(),
    }
}

/// librdkafka's version and the features it was built with (TLS, SASL
/// mechanisms, compression codecs), as `rankpulse --version` and the
/// daemon's first line report them.
pub fn librdkafka_build() -> String {
    let (_, version) = rdkafka::util::get_rdkafka_version();
    let features = ClientConfig::new()
        .create_native_config()
        .and_then(|c| c.get("builtin.features"))
        .unwrap_or_else(|e| format!("unknown: {e}"));
    format!("librdkafka {version} (builtin.features: {features})")
}

fn partitions_of(tpl: &TopicPartitionList) -> Vec<(String, i32)> {
    tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition())).collect()
}

impl ClientContext for RankpulseContext {
    fn error(&self, error: KafkaError, reason: &str) {
        match error.rdkafka_error_code() {
            // Also delivered to the consuming task, which acts on it.
            Some(RDKafkaErrorCode::PartitionEOF) => return,
            Some(RDKafkaErrorCode::AllBrokersDown) => self.signals.connected.store(false, Ordering::Relaxed),
            _ => {}
        }
        let text = format!("{error}: {reason}");
        let line = match self.errors.lock() {
            Ok(mut errors) => errors.note(&text, std::time::Instant::now()),
            Err(_) => Some(text),
        };
        if let Some(line) = line {
            tracing::warn!("kafka: {line}");
        }
    }

    fn stats(&self, statistics: Statistics) {
        // A frozen broker (a stopped process, a hung disk) keeps its TCP
        // connections up: only the silence on them tells.
        let stalled = |b: &rdkafka::statistics::Broker| {
            b.state == "UP" && b.waitresp_cnt > 0 && b.rxidle > self.unresponsive_after_us
        };
        let up = statistics.brokers.values().any(|b| b.state == "UP") && !statistics.brokers.values().any(stalled);
        self.signals.connected.store(up, Ordering::Relaxed);
        let brokers = statistics.brokers.values().map(|b| (b.state.as_str(), b.waitresp_cnt, b.rxidle));
        let answered = answered_until(statistics.ts, brokers);
        if up && let Some(answered) = answered {
            self.signals.answered_mono_us.fetch_max(answered, Ordering::Relaxed);
        }
        self.signals.observed.store(true, Ordering::Relaxed);
        let Ok(mut lag) = self.signals.lag.lock() else { return };
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

impl ConsumerContext for RankpulseContext {
    // Called inside the consuming task's poll: the revocation is recorded
    // before librdkafka gives the partitions up, and handled before the
    // task's next message. Partitions about to be assigned are kept apart
    // from the consumer queue before librdkafka starts fetching them; not
    // if the rebalance record cannot be kept (a poisoned lock), since no
    // lane would then ever read them.
    fn pre_rebalance(&self, consumer: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(tpl) => {
                self.signals.queue_rebalance(RebalanceEvent::Revoked(partitions_of(tpl)));
            }
            Rebalance::Assign(tpl) if self.signals.can_queue_rebalances() => {
                for (topic, partition) in partitions_of(tpl) {
                    keep_apart(consumer, &topic, partition);
                }
            }
            _ => {}
        }
    }

    fn post_rebalance(&self, _consumer: &rdkafka::consumer::BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            self.signals.queue_rebalance(RebalanceEvent::Assigned(partitions_of(tpl)));
        }
    }
}

/// Stops librdkafka from forwarding the messages of a topic-partition
/// about to be assigned to the consumer queue: called before the
/// assignment, so before anything of it is fetched (librdkafka creates the
/// partition's queue on demand, and its fetch start leaves a queue the
/// application took apart as it is). Its messages wait in that queue until
/// the daemon takes a handle on it (`daemon::lanes`, which does the same
/// again and adds the wake-up). Without this, what was fetched between the
/// assignment and the daemon applying it (a hand-over of checkpoints takes
/// about a second) came on the consumer queue, where no topic can be held
/// back: in the judgment-heavy catch-up of `docs/performance.md` about
/// 26,000 messages, which kept up to 3.3 times the lists open that the gap
/// needs.
fn keep_apart(consumer: &rdkafka::consumer::BaseConsumer<RankpulseContext>, topic: &str, partition: i32) {
    use rdkafka::bindings as rd;
    use rdkafka::consumer::Consumer as _;
    let Ok(topic) = std::ffi::CString::new(topic) else { return };
    // SAFETY: the client pointer is the live consumer's (this runs inside
    // its rebalance callback, where librdkafka holds none of its locks);
    // `rd_kafka_queue_get_partition` returns a new reference or null, and
    // the reference is released once forwarding is off, as rdkafka's own
    // `split_partition_queue` does it.
    unsafe {
        let queue = rd::rd_kafka_queue_get_partition(consumer.client().native_ptr(), topic.as_ptr(), partition);
        if !queue.is_null() {
            rd::rd_kafka_queue_forward(queue, std::ptr::null_mut());
            rd::rd_kafka_queue_destroy(queue);
        }
    }
}

pub type Consumer = StreamConsumer<RankpulseContext>;

/// How often librdkafka reports statistics (lag), in milliseconds.
const STATISTICS_INTERVAL_MS: &str = "1000";

/// Defaults rankpulse sets unless `[kafka.properties]` says otherwise.
pub const CONSUMER_DEFAULTS: &[(&str, &str)] = &[
    // librdkafka waits session.timeout.ms / 2 before forming a group on some
    // brokers and as long to notice a dead member: 45 s by default is slow
    // for failover.
    ("session.timeout.ms", "10000"),
    // The prefetch queues are the consumer's largest buffer: 64 MiB by
    // default in librdkafka, per topic-partition once each is read from a
    // queue of its own (`daemon::lanes`). 4 MiB each keeps a backlog's
    // catch-up as fast as 16 MiB did and halved the peak RSS on the
    // judgment-heavy shape (docs/performance.md).
    ("queued.max.messages.kbytes", "4096"),
    // After an outage, reconnect within a second or two rather than
    // librdkafka's 10 s backoff ceiling.
    ("reconnect.backoff.max.ms", "2000"),
    // When a partition's prefetch queue is full (above), librdkafka waits
    // this long before fetching it again: 1 s by default, which throttled
    // a catching-up consumer to a third of its rate here (68,000 → 236,000
    // events/s, `rankpulse-bench kafka`, README).
    ("fetch.queue.backoff.ms", "10"),
    ("client.id", "rankpulse"),
];

/// Creates the group consumer for `config` (not yet subscribed).
pub fn create_consumer(config: &Config, signals: Arc<KafkaSignals>) -> Result<Consumer, KafkaError> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &config.kafka.brokers)
        .set("group.id", &config.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("statistics.interval.ms", STATISTICS_INTERVAL_MS)
        // End-of-partition events tell a shard restored from a checkpoint
        // that input is live again even when no new message comes.
        .set("enable.partition.eof", "true");
    for (key, value) in CONSUMER_DEFAULTS {
        cc.set(*key, *value);
    }
    for (key, value) in &config.kafka.properties {
        cc.set(key, value);
    }
    let session_timeout_ms = cc.get("session.timeout.ms").and_then(|v| v.parse().ok()).unwrap_or(10_000);
    cc.create_with_context(RankpulseContext::new(signals, session_timeout_ms))
}

/// The `kafka.properties` keys [`connection_config`] copies: by prefix,
/// every librdkafka property of TLS, SASL and the client's identity,
/// including the three that do not start with `ssl.` or `sasl.`
/// (`enable.ssl.certificate.verification`,
/// `enable.sasl.oauthbearer.unsecure.jwt`, and `https.ca.*` for an OIDC
/// token endpoint): without them the consumer would connect and the other
/// clients would not.
pub const CONNECTION_PREFIXES: &[&str] =
    &["security.", "ssl.", "sasl.", "client.", "enable.ssl.", "enable.sasl.", "https."];

/// A client configuration for the brokers of `config` with the same
/// security settings as the consumer (TLS, SASL, `client.*`): the
/// dead-letter producer's and the state topic's clients. Consumer-only keys
/// would make a producer warn, so only the connection ones are copied
/// ([`CONNECTION_PREFIXES`]); `client_id` applies unless `kafka.properties`
/// names one.
pub fn connection_config(config: &Config, client_id: &str) -> ClientConfig {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &config.kafka.brokers).set("client.id", client_id);
    for (key, value) in &config.kafka.properties {
        if CONNECTION_PREFIXES.iter().any(|p| key.starts_with(p)) {
            cc.set(key, value);
        }
    }
    cc
}

/// Counts the dead-letter copies as the broker settles them: acknowledged,
/// or failed after librdkafka's retries. A copy is counted once, when its
/// fate is known, never when it is queued (a queued copy that then fails
/// would count as both).
pub struct DeadLetterContext {
    pub delivered: Arc<AtomicU64>,
    pub failures: Arc<AtomicU64>,
    tracker: Arc<DeliveryTracker>,
}

impl ClientContext for DeadLetterContext {}

impl ProducerContext for DeadLetterContext {
    /// The copy's sequence number (see [`DeliveryTracker`]).
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        match result {
            Ok(_) => self.delivered.fetch_add(1, Ordering::Relaxed),
            Err(_) => self.failures.fetch_add(1, Ordering::Relaxed),
        };
        self.tracker.finished(seq as u64);
    }
}

/// Which dead-letter copies are still in flight, so that offsets covering
/// an invalid message are committed (or checkpointed) only once its copy is
/// delivered or has failed, without the consumer waiting for a flush: it
/// notes a barrier (the next sequence number) with the offsets and commits
/// them on a later tick once every copy before the barrier is settled. At
/// most librdkafka's queue (`queue.buffering.max.messages`) is in flight.
#[derive(Debug, Default)]
pub struct DeliveryTracker {
    pending: Mutex<BTreeSet<u64>>,
    settled: std::sync::Condvar,
}

impl DeliveryTracker {
    fn started(&self, seq: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.insert(seq);
        }
    }

    fn finished(&self, seq: u64) {
        if let Ok(mut p) = self.pending.lock() {
            p.remove(&seq);
        }
        self.settled.notify_all();
    }

    /// Every copy numbered below `barrier` is delivered or has failed.
    pub fn settled_before(&self, barrier: u64) -> bool {
        self.pending.lock().map_or(true, |p| p.first().is_none_or(|first| *first >= barrier))
    }

    /// Waits up to `timeout` for [`Self::settled_before`] (off the consumer task).
    pub fn wait_settled_before(&self, barrier: u64, timeout: Duration) -> bool {
        let Ok(pending) = self.pending.lock() else { return true };
        match self.settled.wait_timeout_while(pending, timeout, |p| p.first().is_some_and(|first| *first < barrier)) {
            Ok((_, result)) => !result.timed_out(),
            Err(_) => true,
        }
    }
}

/// Header names of a dead-letter copy.
pub const DLQ_REASON: &str = "rankpulse.reason";
pub const DLQ_TOPIC: &str = "rankpulse.topic";
pub const DLQ_PARTITION: &str = "rankpulse.partition";
pub const DLQ_OFFSET: &str = "rankpulse.offset";

/// Copies invalid messages to `kafka.dead_letter_topic`, with the reason and
/// the message's origin in headers.
pub struct DeadLetters {
    producer: ThreadedProducer<DeadLetterContext>,
    topic: String,
    /// Copies the broker acknowledged (`rankpulse_dead_letters_total{outcome="sent"}`).
    pub delivered: Arc<AtomicU64>,
    /// Copies that failed: refused at once, or after librdkafka's retries.
    pub failures: Arc<AtomicU64>,
    /// The next copy's sequence number.
    next_seq: u64,
    pub tracker: Arc<DeliveryTracker>,
}

impl DeadLetters {
    pub fn create(config: &Config) -> Result<Option<DeadLetters>, KafkaError> {
        if config.kafka.dead_letter_topic.is_empty() {
            return Ok(None);
        }
        let cc = connection_config(config, "rankpulse-dead-letters");
        let delivered = Arc::new(AtomicU64::new(0));
        let failures = Arc::new(AtomicU64::new(0));
        let tracker = Arc::new(DeliveryTracker::default());
        let producer = cc.create_with_context(DeadLetterContext {
            delivered: delivered.clone(),
            failures: failures.clone(),
            tracker: tracker.clone(),
        })?;
        let topic = config.kafka.dead_letter_topic.clone();
        Ok(Some(DeadLetters { producer, topic, delivered, failures, next_seq: 0, tracker }))
    }

    /// Queues one copy; the offsets covering it are committed only once it
    /// is settled (see [`DeliveryTracker`]).
    pub fn send(&mut self, key: Option<&[u8]>, payload: &[u8], reason: &str, topic: &str, partition: i32, offset: i64) {
        let partition = partition.to_string();
        let offset = offset.to_string();
        let headers = OwnedHeaders::new_with_capacity(4)
            .insert(Header { key: DLQ_REASON, value: Some(reason) })
            .insert(Header { key: DLQ_TOPIC, value: Some(topic) })
            .insert(Header { key: DLQ_PARTITION, value: Some(partition.as_str()) })
            .insert(Header { key: DLQ_OFFSET, value: Some(offset.as_str()) });
        let seq = self.next_seq;
        self.next_seq += 1;
        let mut record: BaseRecord<'_, [u8], [u8], usize> =
            BaseRecord::with_opaque_to(&self.topic, seq as usize).payload(payload).headers(headers);
        if let Some(k) = key {
            record = record.key(k);
        }
        self.tracker.started(seq);
        // A full queue waits for room rather than losing the copy: the
        // consumer slows to the dead-letter topic's pace (a flood of
        // invalid messages against a slow broker), and nothing is lost.
        loop {
            match self.producer.send(record) {
                Ok(()) => return,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    let _ = self.producer.flush(Duration::from_millis(100));
                }
                Err((e, _)) => {
                    tracing::error!("dead-letter copy failed: {e}");
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    self.tracker.finished(seq);
                    return;
                }
            }
        }
    }

    /// The sequence number below which copies must settle before offsets
    /// handled so far may be committed.
    pub fn barrier(&self) -> u64 {
        self.next_seq
    }

    /// Waits until every queued copy is delivered or has failed (shutdown).
    pub fn flush(&self, timeout: Duration) -> KafkaResult<()> {
        if self.producer.in_flight_count() == 0 {
            return Ok(());
        }
        self.producer.flush(timeout)
    }
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
    /// Topic → partition → id: looked up by `&str`, so that a message
    /// costs no allocation.
    ids: rustc_hash::FxHashMap<String, rustc_hash::FxHashMap<i32, u32>>,
    /// Indexed by id. Private with `ids`: an entry is only ever added with
    /// its id (never removed or reordered), which is what keeps the two
    /// in step; callers get the entries as a slice.
    entries: Vec<SourceState>,
    /// The id returned last: librdkafka hands out a fetched batch of one
    /// topic-partition at a time, so most messages are from the same one
    /// as the previous message (a comparison instead of two hash lookups).
    last: Option<u32>,
}

/// What the open lists say of a source's commit point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// No open list holds an event of it: up to the next offset.
    Free,
    /// Its oldest event in an open list is at this offset.
    From(i64),
    /// Not known (read only after the last walk of the open lists): not
    /// committed until a walk covers it.
    Unknown,
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
    /// Messages applied since the process started, whatever became of
    /// them (accepted, rejected, ignored, duplicate): the rate the lag
    /// alert weighs the lag against, since on a UBI topic most messages
    /// can be actions that score nothing.
    pub messages: u64,
}

/// Per-partition consumer state, as the exposition shows it: the input
/// knows its partitions, so the type is the input's, and `publish` reads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionState {
    /// High watermark minus the consumer's position.
    pub lag: Option<i64>,
    /// Event time of the newest event consumed, seconds.
    pub last_event_seconds: Option<f64>,
    /// Messages applied since the process started ([`SourceState::messages`]).
    pub messages: u64,
}

impl Sources {
    /// Every source's state, indexed by id.
    pub fn states(&self) -> &[SourceState] {
        &self.entries
    }

    /// The same, to update positions; adding a source goes through `id`.
    pub fn states_mut(&mut self) -> &mut [SourceState] {
        &mut self.entries
    }

    pub fn id(&mut self, topic: &str, partition: i32) -> u32 {
        if let Some(last) = self.last
            && let Some(s) = self.entries.get(last as usize)
            && s.partition == partition
            && s.topic == topic
        {
            return last;
        }
        if let Some(&id) = self.ids.get(topic).and_then(|p| p.get(&partition)) {
            self.last = Some(id);
            return id;
        }
        let id = self.entries.len() as u32;
        self.ids.entry(topic.to_string()).or_default().insert(partition, id);
        self.entries.push(SourceState {
            topic: topic.to_string(),
            partition,
            next_offset: None,
            committed: None,
            last_event_ms: None,
            messages: 0,
        });
        self.last = Some(id);
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
        held: &dyn Fn(u32) -> Hold,
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
            let point = match held(id as u32) {
                Hold::Free => next,
                Hold::From(h) => h.min(next),
                Hold::Unknown => continue,
            };
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
            e.messages = s.messages;
        }
        for ((topic, partition), l) in lag {
            out.entry((topic, partition)).or_default().lag = Some(l);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every TLS and SASL property librdkafka 2.12 lists (its
    /// CONFIGURATION.md, global properties) reaches the other clients;
    /// consumer-only keys do not.
    #[test]
    fn the_other_clients_get_every_tls_and_sasl_property() {
        let mut config = Config::default();
        let connection = [
            ("security.protocol", "SASL_SSL"),
            ("ssl.ca.location", "/ca.pem"),
            ("ssl.certificate.location", "/client.pem"),
            ("ssl.key.location", "/client.key"),
            ("ssl.endpoint.identification.algorithm", "none"),
            ("enable.ssl.certificate.verification", "false"),
            ("sasl.mechanism", "OAUTHBEARER"),
            ("sasl.oauthbearer.method", "oidc"),
            ("sasl.oauthbearer.token.endpoint.url", "https://idp/token"),
            ("https.ca.location", "/idp-ca.pem"),
            ("enable.sasl.oauthbearer.unsecure.jwt", "false"),
            ("client.dns.lookup", "use_all_dns_ips"),
        ];
        for (k, v) in connection.iter().chain(&[("fetch.wait.max.ms", "10"), ("session.timeout.ms", "6000")]) {
            config.kafka.properties.insert(k.to_string(), v.to_string());
        }
        let cc = connection_config(&config, "rankpulse-state");
        for (k, v) in connection {
            assert_eq!(cc.get(k), Some(v), "{k}");
        }
        assert_eq!(cc.get("fetch.wait.max.ms"), None);
        assert_eq!(cc.get("session.timeout.ms"), None);
        assert_eq!(cc.get("client.id"), Some("rankpulse-state"));
    }

    /// A partition is idle only up to the moment the most silent broker
    /// with requests in flight last answered.
    #[test]
    fn brokers_have_answered_until_the_most_silent_one_last_did() {
        let ts = 50_000_000;
        // Nothing in flight anywhere: everything asked was answered.
        assert_eq!(answered_until(ts, [("UP", 0, 9_000_000)].into_iter()), Some(ts));
        // A fetch in flight on a broker silent for 3 s, a quick coordinator.
        let brokers = [("UP", 1, 3_000_000), ("UP", 2, 20_000), ("INIT", 0, -1)];
        assert_eq!(answered_until(ts, brokers.into_iter()), Some(47_000_000));
        // A broker that is down is an outage of its own, not silence.
        assert_eq!(answered_until(ts, [("DOWN", 1, 40_000_000), ("UP", 1, 0)].into_iter()), Some(ts));
        // A connection that never received anything has answered nothing.
        assert_eq!(answered_until(ts, [("UP", 1, -1), ("UP", 1, 0)].into_iter()), None);
    }

    /// A broker down from the start: the wait for the first connection
    /// becomes an outage, dated from the start and counted once, as soon
    /// as librdkafka has reported no broker up; a later loss is another.
    #[test]
    fn an_outage_before_the_first_connection_counts_once() {
        let mut outages = Outages::starting(10_000);
        assert!(!outages.update(false, false, 10_500), "no report yet: still starting");
        assert!(outages.update(false, true, 11_000), "the first report says no broker is up");
        assert_eq!((outages.total, outages.seconds(11_000)), (1, 1.0));
        for now in [11_500, 20_000, 70_000] {
            assert!(!outages.update(false, true, now));
        }
        assert_eq!((outages.total, outages.seconds(70_000)), (1, 60.0));
        assert!(!outages.update(true, true, 71_000));
        assert_eq!((outages.total, outages.seconds(71_000)), (1, 0.0));
        assert!(outages.update(false, true, 80_000), "connected, then lost");
        assert_eq!((outages.total, outages.seconds(82_000)), (2, 2.0));
    }

    /// Connecting takes librdkafka a moment: no outage when the first
    /// report finds a broker up.
    #[test]
    fn a_long_outage_is_said_again_at_10_30_and_60_s_then_every_5_minutes() {
        let mut outages = Outages::starting(0);
        assert!(outages.update(false, true, 1_000));
        let said: Vec<i64> = (1..=1_000).filter_map(|s| outages.reminder(s * 1_000)).collect();
        assert_eq!(said, vec![10, 30, 60, 360, 660, 960]);
        // A loop stalled past two milestones says it once.
        let mut stalled = Outages::starting(0);
        stalled.update(false, true, 0);
        assert_eq!(stalled.reminder(45_000), Some(45));
        assert_eq!(stalled.reminder(50_000), None);
        assert_eq!(stalled.reminder(60_000), Some(60));
        // Connected again: the next outage starts its reminders over.
        outages.update(true, true, 1_000_000);
        assert_eq!(outages.reminder(1_100_000), None);
        outages.update(false, true, 1_100_000);
        assert_eq!(outages.reminder(1_110_000), Some(10));
        // Before the first connection is observed, nothing is an outage yet.
        assert_eq!(Outages::starting(0).reminder(100_000), None);
    }

    #[test]
    fn connecting_at_start_is_no_outage() {
        let mut outages = Outages::starting(0);
        assert!(!outages.update(false, false, 500));
        assert_eq!((outages.total, outages.seconds(500)), (0, 0.0), "starting is no outage yet");
        assert!(!outages.update(true, true, 1_000));
        assert_eq!((outages.total, outages.seconds(1_000)), (0, 0.0));
    }

    #[test]
    fn the_answered_moment_reads_as_wall_clock_time() {
        let signals = KafkaSignals::default();
        assert_eq!(signals.answered_at_ms(1_000_000), None);
        signals.answered_mono_us.store(monotonic_us() - 2_000_000, Ordering::Relaxed);
        let at = signals.answered_at_ms(1_000_000).unwrap();
        // Two seconds ago, give or take the time between the two reads.
        assert!((997_000..=998_000).contains(&at), "{at}");
    }

    /// Ids are dense and stable whichever order topic-partitions come in,
    /// the one-entry cache included (same partition of another topic, same
    /// topic of another partition).
    #[test]
    fn source_ids_are_dense_and_stable() {
        let mut sources = Sources::default();
        let order = [("a", 0), ("a", 0), ("b", 0), ("a", 1), ("a", 1), ("b", 0), ("a", 0), ("b", 1), ("a", 1)];
        let ids: Vec<u32> = order.iter().map(|(t, p)| sources.id(t, *p)).collect();
        assert_eq!(ids, vec![0, 0, 1, 2, 2, 1, 0, 3, 2]);
        let all: Vec<(String, i32)> = sources.entries.iter().map(|s| (s.topic.clone(), s.partition)).collect();
        for (id, (topic, partition)) in all.iter().enumerate() {
            assert_eq!(sources.id(topic, *partition), id as u32);
        }
    }

    /// Two alternating errors, 20 a second (10 each) for 150 s: each is
    /// logged when first seen and then once a minute with its count (600).
    #[test]
    fn repeated_errors_collapse_per_error_and_minute() {
        let mut errors = RepeatedErrors::default();
        let start = std::time::Instant::now();
        let refused = "Global error: BrokerTransportFailure: 127.0.0.1:9/bootstrap: Connect failed";
        let down = "Global error: AllBrokersDown: 1/1 brokers are down";
        let mut logged = Vec::new();
        for tick in 0..3000u64 {
            let now = start + Duration::from_millis(tick * 50);
            let text = if tick % 2 == 0 { format!("{refused} (after {tick}ms in state CONNECT)") } else { down.into() };
            logged.extend(errors.note(&text, now));
        }
        assert_eq!(logged.len(), 6, "{logged:#?}");
        assert!(logged[0].starts_with(refused) && logged[1] == down);
        assert!(logged[2].starts_with(refused) && logged[2].ends_with("(and 600 times more in the last 60 s)"));
        assert_eq!(logged[3], format!("{down} (and 600 times more in the last 60 s)"));
        // A new error is logged at once, whatever came before.
        assert_eq!(errors.note("other", start + Duration::from_secs(151)), Some("other".into()));
    }

    /// A configuration error is said once, and a secret's value not at all.
    #[test]
    fn config_errors_say_their_cause_once() {
        let mut cc = ClientConfig::new();
        cc.set("security.protocol", "SASL_SSLX");
        let e = cc.create::<rdkafka::consumer::BaseConsumer>().err().expect("an invalid protocol is refused");
        let text = error_text(&e);
        assert_eq!(text.matches("security.protocol").count(), 1, "{text}");
        assert_eq!(text.matches("SASL_SSLX").count(), 1, "{text}");
        let secret = KafkaError::ClientConfig(
            rdkafka::types::RDKafkaConfRes::RD_KAFKA_CONF_INVALID,
            "Invalid value \"hunter2\" for configuration property \"sasl.password\"".into(),
            "sasl.password".into(),
            "hunter2".into(),
        );
        assert!(!error_text(&secret).contains("hunter2"), "{}", error_text(&secret));
    }

    /// What production clusters need is compiled in: TLS, every SASL
    /// mechanism of the docs (OIDC for OAUTHBEARER), every codec.
    #[test]
    fn librdkafka_has_tls_sasl_and_every_codec() {
        let build = librdkafka_build();
        let features = build.split("builtin.features: ").nth(1).unwrap_or_default().trim_end_matches(')');
        let features: Vec<&str> = features.split(',').collect();
        for needed in ["ssl", "sasl_plain", "sasl_scram", "sasl_oauthbearer", "oidc", "gzip", "snappy", "lz4", "zstd"] {
            assert!(features.contains(&needed), "librdkafka lacks {needed}: {build}");
        }
    }
}
