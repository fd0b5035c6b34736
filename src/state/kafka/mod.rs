//! Checkpoints in Kafka: `state.backend = "kafka"`, the store that needs no
//! volume shared by the group's instances.
//!
//! In the data flow: the publisher thread (`daemon::publisher`) hands
//! [`KafkaStore::write`] each checkpoint the tick snapshotted; only once it
//! returns, every record acknowledged by all in-sync replicas, are the
//! offsets the checkpoint covers committed to the consumer group. At start
//! and at every rebalance the consumer task reads the topic back
//! ([`KafkaStore::load_own`], [`KafkaStore::hand_over`]) to take over
//! partitions exactly where the checkpoint that got furthest left them (of
//! the partition's latest owner, never a zombie's: see `fencing`).
//!
//! The topic (`state.topic`) has one partition and `cleanup.policy=compact`:
//! one ordered log per group, which every instance reads whole at a
//! hand-over (it needs every instance's checkpoint to pick the furthest),
//! so more partitions would buy nothing; compaction keeps the newest value
//! of each key. An instance's checkpoint goes in as chunk records and a
//! manifest per slot (see `record`).
//!
//! Writes alternate between two slots, A and B: a write overwrites the
//! chunks of the slot that does not hold the newest complete checkpoint,
//! and that slot's manifest last. A crash between chunks and manifest, or
//! a reader arriving mid-write, finds the other slot's manifest and chunks
//! intact; compaction (newest value per key) never removes a record the
//! newest manifest of a slot needs, since those are the newest values of
//! their keys.
//!
//! This module owns the store itself ([`KafkaStore`]: its clients and
//! what its writer keeps between writes); the rest of the protocol is
//! split by concern:
//!
//! - `record`: the records' keys and values, the on-topic format;
//! - `scan`: reading the topic back into each instance's two slots, and
//!   the checkpoints they hold;
//! - `fencing`: claims and epochs, so a zombie never wins a partition;
//! - `write`: the write protocol, and the tripwire for two processes
//!   with one instance name;
//! - `admin`: the topic's creation and checks, and `rankpulse state`'s
//!   listing and forgetting of instances;
//! - `clients`: the librdkafka clients' settings and contexts.

use crate::config::Config;
use crate::state::{Origin, StateError, fingerprint, instance_name};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;
use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use xxhash_rust::xxh3::xxh3_64;

mod admin;
mod clients;
mod fencing;
mod record;
mod scan;
#[cfg(test)]
mod testing;
mod write;

pub use admin::{InstanceSummary, ShardSummary};
pub use clients::{Acks, BrokerErrors, StateContext};
pub use record::{Claim, MAX_CHUNK_BYTES, Manifest, Slot};

use admin::ensure_topic;
use clients::{client_config, serve_events};
use fencing::{ClaimSeen, Claims};
use record::{CHUNK_HEADER, RECORD_OVERHEAD};
use scan::Slots;

/// How long a write waits for its acknowledgements, and a read for the
/// broker, before giving up (the next checkpoint tries again).
const TIMEOUT: Duration = Duration::from_secs(30);

/// What the writer keeps between writes.
struct Writer {
    /// The last sequence number written or seen for this instance.
    seq: u64,
    /// The slot of the newest complete checkpoint: the next write goes to
    /// the other.
    current: Option<Slot>,
    /// The offset of that checkpoint's manifest, when known.
    current_at: Option<i64>,
    /// One past the highest chunk index each slot may hold a value at.
    extent: [u32; 2],
    /// Where the check for another writer reads from: one past this
    /// process's last manifest (or the end of the scan at open).
    tail_from: i64,
    /// Reads the tail for that check; kept open between writes.
    tail: BaseConsumer<StateContext>,
    /// Record numbers for the producer's acknowledgements.
    next_record: usize,
    /// This process's claims: partition → the claim's offset (its epoch).
    claims: BTreeMap<i32, i64>,
    /// The epoch each partition's shard is written with: this process's
    /// claim, else the one its restored checkpoint had.
    epochs: BTreeMap<i32, i64>,
}

/// This instance's checkpoints in the state topic (see `record` for the
/// records).
pub struct KafkaStore {
    topic: String,
    group: String,
    instance: String,
    fingerprint: String,
    /// This process's random id, in every record it writes.
    writer_id: u64,
    chunk_bytes: usize,
    /// The readers' configuration (connection settings of `kafka.properties`).
    reader: ClientConfig,
    /// The clients' context: the readers note their broker errors in it
    /// (the producer's `Acks` shares its [`BrokerErrors`]).
    context: StateContext,
    producer: BaseProducer<Acks>,
    writer: Mutex<Writer>,
    /// The writer id of the process that took this instance over, once
    /// seen (0: none); read at every tick, so not behind the writer's lock.
    displaced_by: AtomicU64,
    /// This instance's records as read at open, for the first
    /// [`Self::load_own`] (the restore at start), unless a write came first.
    opened: Mutex<Option<(Slots, Claims)>>,
    /// The newest claim seen per partition (any read): a newer one than
    /// this process's by another writer fences its shard.
    known: Mutex<BTreeMap<i32, ClaimSeen>>,
    /// Run by the next write between its check and its chunks (tests: a
    /// claim arriving while a zombie writes).
    #[cfg(test)]
    before_chunks: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Hand-overs still to fail (tests: the state topic unreachable).
    #[cfg(test)]
    failing_hand_overs: AtomicU64,
    /// Writes return before their check after the manifest (tests: that
    /// check's read failing).
    #[cfg(test)]
    skip_post_check: std::sync::atomic::AtomicBool,
    /// Reads of the whole topic still to fail (tests).
    #[cfg(test)]
    failing_scans: AtomicU64,
}

impl std::fmt::Debug for KafkaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaStore")
            .field("topic", &self.topic)
            .field("instance", &self.instance)
            .field("writer_id", &format_args!("{:016x}", self.writer_id))
            .field("chunk_bytes", &self.chunk_bytes)
            .finish_non_exhaustive()
    }
}

impl KafkaStore {
    /// Creates the state topic if it is missing, or checks it (compacted,
    /// one partition), then reads this instance's records.
    pub fn open(config: &Config) -> Result<KafkaStore, StateError> {
        let topic = &config.state.topic;
        let base = client_config(config);
        let max_message_bytes = ensure_topic(&base, topic, config.state.replication)?;
        let chunk_bytes = match max_message_bytes {
            Some(max) => max.saturating_sub(CHUNK_HEADER + RECORD_OVERHEAD).clamp(1024, MAX_CHUNK_BYTES),
            None => MAX_CHUNK_BYTES,
        };
        KafkaStore::connect(config, chunk_bytes)
    }

    /// As [`Self::open`] on a topic known to exist (librdkafka's mock
    /// cluster has no admin API), with chunks of at most `chunk_bytes`.
    pub(crate) fn connect(config: &Config, chunk_bytes: usize) -> Result<KafkaStore, StateError> {
        let topic = config.state.topic.clone();
        let kafka = |e: KafkaError| StateError::Kafka { topic: topic.clone(), cause: crate::kafka::error_text(&e) };
        let base = client_config(config);
        let mut reader = base.clone();
        reader
            // Assigning a partition needs a group; this consumer never
            // joins it nor commits, so the group's own id needs no further
            // permission.
            .set("group.id", &config.kafka.group_id)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // Brokers that hold a fetch until this long (Tansu, the mock)
            // would hold every read of the tail as long.
            .set("fetch.wait.max.ms", "10");
        let mut producer_config = base;
        producer_config
            .set("enable.idempotence", "true")
            .set("acks", "all")
            .set("linger.ms", "1")
            .set("message.timeout.ms", TIMEOUT.as_millis().to_string());
        let context = StateContext::default();
        let acks = Acks { results: Mutex::default(), errors: context.0.clone() };
        let producer: BaseProducer<Acks> = producer_config.create_with_context(acks).map_err(kafka)?;
        let tail: BaseConsumer<StateContext> = reader.create_with_context(context.clone()).map_err(kafka)?;
        let mut store = KafkaStore {
            topic: topic.clone(),
            group: config.kafka.group_id.clone(),
            instance: instance_name(config),
            fingerprint: fingerprint(config),
            writer_id: random_id(),
            chunk_bytes: chunk_bytes.max(1),
            reader,
            context,
            producer,
            writer: Mutex::new(Writer {
                seq: 0,
                current: None,
                current_at: None,
                extent: [0, 0],
                tail_from: 0,
                tail,
                next_record: 0,
                claims: BTreeMap::new(),
                epochs: BTreeMap::new(),
            }),
            displaced_by: AtomicU64::new(0),
            opened: Mutex::new(None),
            known: Mutex::new(BTreeMap::new()),
            #[cfg(test)]
            before_chunks: Mutex::new(None),
            #[cfg(test)]
            failing_hand_overs: AtomicU64::new(0),
            #[cfg(test)]
            skip_post_check: std::sync::atomic::AtomicBool::new(false),
            #[cfg(test)]
            failing_scans: AtomicU64::new(0),
        };
        let (mut scan, end) = store.scan(Some(&store.instance.clone()), None)?;
        let own = scan.instances.remove(&store.instance).unwrap_or_default();
        {
            let w = store.writer.get_mut().map_err(|_| poisoned(&topic))?;
            w.tail_from = end;
            w.seq = own.manifests.iter().flatten().map(|(_, m)| m.seq).max().unwrap_or(0);
            w.extent = [own.extent(Slot::A), own.extent(Slot::B)];
            // The next write must spare the slot a reader would take now.
            (w.current, w.current_at) = match own.newest_complete() {
                Ok(Some((_, m, at))) => (Some(m.slot), Some(at)),
                _ => (own.manifests.iter().flatten().max_by_key(|(o, _)| *o).map(|(_, m)| m.slot), None),
            };
            // The epochs of the shards a restore at start brings back: the
            // newest manifest's, the other's where it has none.
            let mut manifests: Vec<&(i64, Manifest)> = own.manifests.iter().flatten().collect();
            manifests.sort_by_key(|(o, _)| *o);
            for (_, m) in manifests {
                w.epochs.extend(m.epochs.iter().map(|(p, e)| (*p, *e)));
            }
        }
        tracing::info!(
            "state.topic {topic}: instance {:?} writes as {:016x} in chunks of up to {} bytes",
            store.instance,
            store.writer_id,
            store.chunk_bytes
        );
        *store.opened.get_mut().map_err(|_| poisoned(&topic))? = Some((own, std::mem::take(&mut scan.claims)));
        Ok(store)
    }

    pub fn instance(&self) -> &str {
        &self.instance
    }

    pub fn topic(&self) -> &str {
        &self.topic
    }

    pub fn fingerprint(&self) -> &str {
        &self.fingerprint
    }

    fn origin(&self, instance: &str) -> Origin {
        Origin::Topic { topic: self.topic.clone(), instance: instance.to_string() }
    }

    fn kafka_error(&self, cause: impl Into<String>) -> StateError {
        StateError::Kafka { topic: self.topic.clone(), cause: self.context.0.explain(cause.into()) }
    }

    /// A reader's request failed: its error, with what the events it has
    /// not served yet said about the brokers.
    fn reader_error(&self, consumer: &BaseConsumer<StateContext>, e: &KafkaError) -> StateError {
        serve_events(consumer);
        self.kafka_error(crate::kafka::error_text(e))
    }
}

fn poisoned(topic: &str) -> StateError {
    StateError::Kafka { topic: topic.to_string(), cause: "a writer panicked".into() }
}

/// A writer id no other process draws: 8 bytes of the system's randomness,
/// else the time, process id and a stack address hashed.
fn random_id() -> u64 {
    use std::io::Read;
    let mut bytes = [0u8; 8];
    let random = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_ok();
    let id = if random {
        u64::from_le_bytes(bytes)
    } else {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let seed = format!("{nanos} {} {:p}", std::process::id(), &bytes);
        xxh3_64(seed.as_bytes())
    };
    id.max(1)
}
