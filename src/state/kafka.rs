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
//! the partition's latest owner, never a zombie's: see below).
//!
//! The topic (`state.topic`) has one partition and `cleanup.policy=compact`:
//! one ordered log per group, which every instance reads whole at a
//! hand-over (it needs every instance's checkpoint to pick the furthest),
//! so more partitions would buy nothing; compaction keeps the newest value
//! of each key. An instance's checkpoint — the same bytes as a checkpoint
//! file: header, postcard payload, checksum — goes in as records keyed
//! (`/` cannot occur in an instance name):
//!
//! - `<instance>/<slot>/<i>`: chunk `i` of the checkpoint, at most
//!   [`MAX_CHUNK_BYTES`] (less if the topic's `max.message.bytes` is
//!   smaller), value `RPSTCK01`, writer id, sequence number, chunk index
//!   (u64, u64, u32 LE), then the bytes;
//! - `<instance>/<slot>`: the slot's manifest, written only after every
//!   chunk is acknowledged, value `RPSTMF02` then postcard [`Manifest`]:
//!   group, instance, writer id, sequence number, slot, chunk count, length
//!   and xxh3 checksum of the whole checkpoint, and each partition shard's
//!   epoch (see below; an `RPSTMF01` manifest, of before, has none: 0);
//! - `/claim/<partition>`: a claim, value `RPSTCL01` then postcard
//!   [`Claim`]: group, instance, writer id, partition.
//!
//! Writes alternate between two slots, A and B: a write overwrites the
//! chunks of the slot that does not hold the newest complete checkpoint,
//! and that slot's manifest last. A crash between chunks and manifest, or
//! a reader arriving mid-write, finds the other slot's manifest and chunks
//! intact; compaction (newest value per key) never removes a record the
//! newest manifest of a slot needs, since those are the newest values of
//! their keys. A reader takes, per instance, the slot whose manifest is
//! later in the log and whose chunks all carry that manifest's writer and
//! sequence number and add up to its length and checksum, else the other
//! slot; the bytes are then checked as a file's are (header, checksum,
//! decode, metric settings). When a checkpoint needs fewer chunks than its
//! slot held, the leftover chunk keys get tombstones.
//!
//! Two processes with one `state.instance` would overwrite each other:
//! each process draws a random writer id, and before every write it reads
//! what the topic got since its own last manifest (nothing but its own
//! records in a one-instance group; other instances' writes otherwise). A
//! manifest of its instance by another writer there means another process
//! took the name over: it stops writing ([`StateError::Displaced`]) and
//! the daemon exits. The process whose manifest is later in the log wins;
//! until the loser's next write, their checkpoints may overwrite each
//! other, so a hand-over in that window may restore the other process's
//! state. It is a tripwire for a misconfiguration, not a lock: a process
//! restarted after `kill -9` takes its name over at once, which a lease
//! would delay.
//!
//! A former owner of a partition that still writes it after the group gave
//! it away (a zombie: cut off from the coordinator, not from the partition
//! leaders) must never win, or its counters would overlap the new owner's.
//! The broker's own fencing (group generations, transactions) cannot be
//! relied on — Tansu accepts a stale generation's offset commit and shows
//! aborted records to `read_committed` readers (docs/operations.md) — so
//! ownership is ordered in this topic, the one log every instance reads:
//!
//! - [`KafkaStore::hand_over`] appends a claim per assigned partition
//!   (acks=all), then reads the topic up to its claims. A claim's offset is
//!   the claimer's *epoch* for the partition, unique and ordered with every
//!   manifest without any counter to agree on; each manifest records the
//!   epoch under which its writer holds (or last held) each shard.
//! - A shard is a zombie's (`is_zombie`) when its writer owned it and
//!   its manifest comes after a claim of the partition by another writer
//!   newer than the shard's epoch: it went on past the point the claimer
//!   restored from. Readers never take it: a hand-over takes, among the
//!   other shards, one of the highest epoch (the latest owner's), the
//!   furthest of those; the instance's own restore (its revoke, a restart)
//!   takes the partition from its other slot, the checkpoint before the
//!   claim — the one the claimer restored from. Its counters thus stop
//!   exactly where the new owner's start.
//! - The writer checks what the topic got before writing and again once
//!   its manifest is acknowledged, up to that manifest: a partition it
//!   owns that another writer claimed since its own claim is fenced
//!   ([`StateError::Fenced`]); the daemon publishes and commits nothing of
//!   that checkpoint and gives the partitions up as at a revoke. After a
//!   write fenced that way the next write overwrites it, so the other slot
//!   (the checkpoint before the claim) stays until a checkpoint with the
//!   partitions given up replaces the fenced one. A fence found only by
//!   the check before a write (the check after the last one could not
//!   read) does the same when the newest checkpoint came after the claim.
//!   A fenced checkpoint is not withdrawn (tombstoned): its other shards
//!   may be what another instance restored from, and the instance's own
//!   revert of them must agree.
//!
//! Compaction keeps only the newest claim of a partition: a zombie's
//! manifest between an older claim and the newest is then excluded by the
//! epoch preference alone (the latest owner's shard wins once written),
//! and not at all by its own instance's restore; docs/operations.md states
//! this window. A
//! simpler rule — take the furthest shard written before one's claim —
//! would not do: the zombie's own revert, and any later reader, must agree
//! on where the new owner started, after the writes that followed.

use super::{Checkpoint, Origin, ShardCheckpoint, StateError, encode, fingerprint, instance_name, parse};
use crate::config::Config;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{Offset, TopicPartitionList};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake};
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

/// Largest chunk of a checkpoint in one record: well under the 1 MB that
/// brokers and clients accept by default (`max.message.bytes`,
/// `message.max.bytes`), header and batch overhead included.
pub const MAX_CHUNK_BYTES: usize = 512 * 1024;
/// What a record needs besides its value, kept free below the topic's
/// `max.message.bytes` (batch header, record header, key).
const RECORD_OVERHEAD: usize = 1024;
const MANIFEST_MAGIC: &[u8; 8] = b"RPSTMF02";
/// Manifests of before fencing: no epochs (read as epoch 0).
const MANIFEST_MAGIC_V1: &[u8; 8] = b"RPSTMF01";
const CHUNK_MAGIC: &[u8; 8] = b"RPSTCK01";
const CLAIM_MAGIC: &[u8; 8] = b"RPSTCL01";
/// Claim keys start with `/`, which no instance name holds.
const CLAIM_PREFIX: &str = "/claim/";
/// Chunk value header: magic, writer, sequence number, index.
const CHUNK_HEADER: usize = 8 + 8 + 8 + 4;
/// How long a write waits for its acknowledgements, and a read for the
/// broker, before giving up (the next checkpoint tries again).
const TIMEOUT: Duration = Duration::from_secs(30);
/// Settings of a state topic rankpulse creates, besides compaction: its
/// active segment (never compacted) rolls at 64 MiB or after 10 minutes,
/// so what a restore reads beyond the live checkpoints stays bounded.
const CREATE_CONFIG: &[(&str, &str)] =
    &[("cleanup.policy", "compact"), ("segment.bytes", "67108864"), ("segment.ms", "600000")];

/// One of the two places an instance's checkpoint alternates between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    fn name(self) -> &'static str {
        match self {
            Slot::A => "A",
            Slot::B => "B",
        }
    }

    fn parse(s: &str) -> Option<Slot> {
        match s {
            "A" => Some(Slot::A),
            "B" => Some(Slot::B),
            _ => None,
        }
    }
}

/// What a slot's manifest record says about the checkpoint in its chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The consumer group (`kafka.group_id`) of the writer: another group's
    /// checkpoints are never restored.
    pub group: String,
    pub instance: String,
    /// The writing process's random id.
    pub writer: u64,
    /// The writer's write count; every chunk carries it too.
    pub seq: u64,
    pub slot: Slot,
    pub chunks: u32,
    /// Length and xxh3-64 of the whole checkpoint (header included).
    pub len: u64,
    pub checksum: u64,
    /// Per partition shard of the checkpoint, the epoch under which the
    /// writer holds (or last held) it: the offset of the claim it restored
    /// the partition after; 0 without one.
    pub epochs: BTreeMap<i32, i64>,
}

impl Manifest {
    fn epoch(&self, partition: i32) -> i64 {
        self.epochs.get(&partition).copied().unwrap_or(0)
    }
}

/// A manifest as written before fencing (`RPSTMF01`).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct ManifestV1 {
    group: String,
    instance: String,
    writer: u64,
    seq: u64,
    slot: Slot,
    chunks: u32,
    len: u64,
    checksum: u64,
}

/// A claim record's value: who took a partition over. Its offset in the
/// topic is the epoch of the partition's new owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub group: String,
    pub instance: String,
    pub writer: u64,
    pub partition: i32,
}

/// A claim as a read found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClaimSeen {
    offset: i64,
    writer: u64,
}

/// Every claim a read found, per partition, oldest first.
type Claims = BTreeMap<i32, Vec<ClaimSeen>>;
/// Per partition shard of a checkpoint, its epoch.
type Epochs = BTreeMap<i32, i64>;
/// A slot's checkpoint bytes, with its manifest and the manifest's offset.
type Complete<'a> = (Vec<u8>, &'a Manifest, i64);

fn claim_key(partition: i32) -> String {
    format!("{CLAIM_PREFIX}{partition}")
}

fn claim_value(c: &Claim) -> Result<Vec<u8>, StateError> {
    let mut v = CLAIM_MAGIC.to_vec();
    postcard::to_io(c, &mut v).map_err(|e| StateError::Encode(e.to_string()))?;
    Ok(v)
}

fn parse_claim(value: &[u8]) -> Option<Claim> {
    postcard::from_bytes(value.strip_prefix(CLAIM_MAGIC)?).ok()
}

/// Whether a shard is a zombie's: owned by its writer under `epoch`, in a
/// checkpoint whose manifest (at `manifest`) comes after a claim of its
/// partition by another writer that is newer than that epoch. Such a
/// shard went on past the point the claimer restored from.
fn is_zombie(owned: bool, epoch: i64, writer: u64, manifest: i64, claims: &[ClaimSeen]) -> bool {
    owned && claims.iter().any(|c| c.writer != writer && c.offset > epoch && c.offset < manifest)
}

fn manifest_key(instance: &str, slot: Slot) -> String {
    format!("{instance}/{}", slot.name())
}

fn chunk_key(instance: &str, slot: Slot, index: u32) -> String {
    format!("{instance}/{}/{index}", slot.name())
}

/// What a key names: a slot's manifest or one of its chunks, or a
/// partition's claim.
#[derive(Debug, PartialEq, Eq)]
enum Key<'a> {
    Manifest { instance: &'a str, slot: Slot },
    Chunk { instance: &'a str, slot: Slot, index: u32 },
    Claim { partition: i32 },
}

fn parse_key(key: &[u8]) -> Option<Key<'_>> {
    let key = std::str::from_utf8(key).ok()?;
    if let Some(p) = key.strip_prefix(CLAIM_PREFIX) {
        return p.parse().ok().filter(|p| *p >= 0).map(|partition| Key::Claim { partition });
    }
    let mut parts = key.split('/');
    let instance = parts.next().filter(|i| !i.is_empty())?;
    let slot = Slot::parse(parts.next()?)?;
    let key = match parts.next() {
        None => Key::Manifest { instance, slot },
        Some(i) => Key::Chunk { instance, slot, index: i.parse().ok()? },
    };
    parts.next().is_none().then_some(key)
}

fn manifest_value(m: &Manifest) -> Result<Vec<u8>, StateError> {
    let mut v = MANIFEST_MAGIC.to_vec();
    postcard::to_io(m, &mut v).map_err(|e| StateError::Encode(e.to_string()))?;
    Ok(v)
}

fn parse_manifest(value: &[u8]) -> Option<Manifest> {
    if let Some(body) = value.strip_prefix(MANIFEST_MAGIC) {
        return postcard::from_bytes(body).ok();
    }
    let v1: ManifestV1 = postcard::from_bytes(value.strip_prefix(MANIFEST_MAGIC_V1)?).ok()?;
    Some(Manifest {
        group: v1.group,
        instance: v1.instance,
        writer: v1.writer,
        seq: v1.seq,
        slot: v1.slot,
        chunks: v1.chunks,
        len: v1.len,
        checksum: v1.checksum,
        epochs: BTreeMap::new(),
    })
}

fn chunk_value(writer: u64, seq: u64, index: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(CHUNK_HEADER + data.len());
    v.extend_from_slice(CHUNK_MAGIC);
    v.extend_from_slice(&writer.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// A chunk record's value: (writer, seq, index, bytes).
fn parse_chunk(value: &[u8]) -> Option<(u64, u64, u32, &[u8])> {
    let body = value.strip_prefix(CHUNK_MAGIC)?;
    let writer = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let seq = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
    let index = u32::from_le_bytes(body.get(16..20)?.try_into().ok()?);
    Some((writer, seq, index, body.get(20..)?))
}

#[derive(Debug)]
struct Chunk {
    writer: u64,
    seq: u64,
    data: Vec<u8>,
}

/// One instance's records as a scan left them: the newest value of each
/// manifest and chunk key (a tombstone removes it), manifests with their
/// offsets.
#[derive(Debug, Default)]
struct Slots {
    manifests: [Option<(i64, Manifest)>; 2],
    chunks: [BTreeMap<u32, Chunk>; 2],
}

impl Slots {
    /// The newest checkpoint whose chunks are all there and add up, with
    /// its manifest; `Ok(None)` without any manifest; `Err` with why each
    /// slot failed when none is whole.
    fn newest_complete(&self) -> Result<Option<Complete<'_>>, String> {
        let mut candidates: Vec<&(i64, Manifest)> = self.manifests.iter().flatten().collect();
        candidates.sort_by_key(|(offset, _)| std::cmp::Reverse(*offset));
        let mut why = Vec::new();
        for (offset, m) in candidates.iter().copied() {
            match self.assemble(m) {
                Ok(bytes) => return Ok(Some((bytes, m, *offset))),
                Err(e) => why.push(format!("slot {} (write {}): {e}", m.slot.name(), m.seq)),
            }
        }
        if why.is_empty() { Ok(None) } else { Err(why.join("; ")) }
    }

    fn assemble(&self, m: &Manifest) -> Result<Vec<u8>, String> {
        let chunks = &self.chunks[m.slot.index()];
        let mut total = 0u64;
        for i in 0..m.chunks {
            let c = chunks.get(&i).ok_or_else(|| format!("chunk {i} of {} is missing", m.chunks))?;
            if (c.writer, c.seq) != (m.writer, m.seq) {
                return Err(format!("chunk {i} is of another write (being overwritten?)"));
            }
            total += c.data.len() as u64;
        }
        if total != m.len {
            return Err(format!("its chunks hold {total} bytes, the manifest says {}", m.len));
        }
        // `total` is what the chunks hold, already in memory: no allocation
        // a crafted manifest could inflate.
        let mut bytes = Vec::with_capacity(total as usize);
        for i in 0..m.chunks {
            if let Some(c) = chunks.get(&i) {
                bytes.extend_from_slice(&c.data);
            }
        }
        if xxh3_64(&bytes) != m.checksum {
            return Err("checksum mismatch".into());
        }
        Ok(bytes)
    }

    /// One past the highest chunk index of `slot` that holds a value.
    fn extent(&self, slot: Slot) -> u32 {
        self.chunks[slot.index()].keys().next_back().map_or(0, |i| i.saturating_add(1))
    }
}

/// The topic read up to its end.
#[derive(Debug, Default)]
struct SlotScan {
    /// The group whose claims count (others' are skipped).
    group: String,
    instances: BTreeMap<String, Slots>,
    /// Every claim found per partition, oldest first (compaction keeps the
    /// newest only).
    claims: Claims,
    /// Records that are no checkpoint record (another format, or another
    /// program's): skipped.
    foreign: u64,
}

impl SlotScan {
    /// Takes one record into the scan; records of instances other than
    /// `only` (when given) are passed over without keeping their bytes.
    fn add(&mut self, key: Option<&[u8]>, value: Option<&[u8]>, offset: i64, only: Option<&str>) {
        let Some(key) = key.and_then(parse_key) else {
            self.foreign += 1;
            return;
        };
        let instance = match key {
            Key::Manifest { instance, .. } | Key::Chunk { instance, .. } => instance,
            Key::Claim { partition } => {
                match value.and_then(parse_claim) {
                    Some(c) if c.partition == partition && c.group == self.group => {
                        self.claims.entry(partition).or_default().push(ClaimSeen { offset, writer: c.writer });
                    }
                    Some(_) => {}
                    None => self.foreign += u64::from(value.is_some()),
                }
                return;
            }
        };
        if only.is_some_and(|o| o != instance) {
            return;
        }
        // The newest value of a key replaces what it held, as compaction
        // will: a tombstone or a value of no known shape leaves it empty.
        let slots = self.instances.entry(instance.to_string()).or_default();
        match key {
            Key::Manifest { instance, slot } => {
                let m = value.and_then(parse_manifest).filter(|m| m.slot == slot && m.instance == instance);
                self.foreign += u64::from(value.is_some() && m.is_none());
                slots.manifests[slot.index()] = m.map(|m| (offset, m));
            }
            Key::Claim { .. } => {}
            Key::Chunk { slot, index, .. } => {
                let chunk = value.and_then(parse_chunk).filter(|(_, _, i, _)| *i == index);
                self.foreign += u64::from(value.is_some() && chunk.is_none());
                match chunk {
                    Some((writer, seq, _, data)) => {
                        slots.chunks[slot.index()].insert(index, Chunk { writer, seq, data: data.to_vec() });
                    }
                    None => {
                        slots.chunks[slot.index()].remove(&index);
                    }
                }
            }
        }
    }
}

/// What the state clients' librdkafka last reported going wrong with the
/// brokers: a refused login, a failed TLS handshake, a broker down.
/// librdkafka retries these on its own, so the request that waited on the
/// connection only times out; its error then adds why. (The consumer's
/// errors are logged by its own context; these clients log none.)
#[derive(Debug, Default)]
pub struct BrokerErrors {
    last: Mutex<Option<(Instant, String)>>,
}

impl BrokerErrors {
    fn note(&self, error: &KafkaError, reason: &str) {
        // The end of the topic reached while reading it: not an error.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        let Ok(mut last) = self.last.lock() else { return };
        // "All brokers are down" follows every failed connection; it must
        // not hide what made it fail.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown)
            && last.as_ref().is_some_and(|(at, _)| at.elapsed() < RECENT)
        {
            return;
        }
        *last = Some((Instant::now(), format!("{error}: {reason}")));
    }

    /// `cause`, with the brokers' last error if one came within [`RECENT`]
    /// (while the failed request could have been waiting on it).
    fn explain(&self, cause: String) -> String {
        let last = self.last.lock().ok().and_then(|l| l.clone());
        match last {
            Some((at, text)) if at.elapsed() < RECENT && !cause.contains(&text) => {
                format!("{cause} (last error from the brokers: {text})")
            }
            _ => cause,
        }
    }
}

/// How long a broker error explains a failed request: the longest a
/// request waits ([`TIMEOUT`], plus the acknowledgements' 5 s).
const RECENT: Duration = Duration::from_secs(TIMEOUT.as_secs() + 5);

/// The readers' context: notes the broker errors their polls serve.
#[derive(Clone, Default)]
pub struct StateContext(Arc<BrokerErrors>);

impl ClientContext for StateContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.note(&error, reason);
    }
}

impl ConsumerContext for StateContext {}

/// Where the state producer's acknowledgements go: per record number, its
/// offset or its error; its broker errors are noted as the other clients'.
#[derive(Default)]
pub struct Acks {
    results: Mutex<BTreeMap<usize, Result<i64, String>>>,
    errors: Arc<BrokerErrors>,
}

impl ClientContext for Acks {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.note(&error, reason);
    }
}

impl ProducerContext for Acks {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, n: usize) {
        let r = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.to_string()),
        };
        if let Ok(mut results) = self.results.lock() {
            results.insert(n, r);
        }
    }
}

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

/// This instance's checkpoints in the state topic (see the module's
/// documentation for the records).
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

    /// The state topic of `config`, as `rankpulse state` reads it: under
    /// an instance name of its own (it must not take any instance's
    /// records for its own), never creating the topic.
    pub fn inspect(config: &Config) -> Result<KafkaStore, StateError> {
        // A topic that does not exist: said so, not as the reader's
        // "Unknown partition".
        let topic = &config.state.topic;
        let metadata = Probe::new(&client_config(config), topic)?.metadata()?;
        if let Some(e) = metadata.topics().iter().find(|t| t.name() == topic).and_then(|t| t.error()) {
            let cause = match RDKafkaErrorCode::from(e) {
                RDKafkaErrorCode::UnknownTopicOrPartition => {
                    "no such topic (`rankpulse run` with state.backend = \"kafka\" creates it)".to_string()
                }
                code => code.to_string(),
            };
            return Err(StateError::Kafka { topic: topic.clone(), cause });
        }
        let mut config = config.clone();
        config.state.instance = format!("rankpulse-state-cli-{}", std::process::id());
        KafkaStore::connect(&config, MAX_CHUNK_BYTES)
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

    /// This instance's newest complete checkpoint, if it has one, each
    /// shard a zombie's (see [`is_zombie`]) taken from the other slot's
    /// checkpoint instead: the one preceding the claim that fenced it.
    /// Corrupt (no slot whole), another group's, or of other metric
    /// settings: an error, as a file's would be.
    pub fn load_own(&self) -> Result<Option<Checkpoint>, StateError> {
        let opened = self.opened.lock().map_err(|_| poisoned(&self.topic))?.take();
        let (slots, claims) = match opened {
            Some(opened) => opened,
            None => {
                let mut scan = self.scan(Some(&self.instance), None)?.0;
                (scan.instances.remove(&self.instance).unwrap_or_default(), scan.claims)
            }
        };
        Ok(self.checkpoint_of(&self.instance, &slots, &claims)?.map(|(c, _)| c))
    }

    /// Decodes the checkpoint a slot's manifest describes, checking group
    /// and metric settings.
    fn decode(&self, instance: &str, bytes: &[u8], manifest: &Manifest) -> Result<Checkpoint, StateError> {
        let at = self.origin(instance);
        if manifest.group != self.group {
            return Err(StateError::ForeignGroup { at, group: manifest.group.clone() });
        }
        let c = parse(bytes, &at)?;
        if c.fingerprint != self.fingerprint {
            return Err(StateError::Incompatible { at, theirs: c.fingerprint, ours: self.fingerprint.clone() });
        }
        Ok(c)
    }

    /// `instance`'s newest complete checkpoint with its shards' epochs; a
    /// zombie's shard is replaced by the other slot's shard of the
    /// partition when that one is no zombie's, else left out.
    fn checkpoint_of(
        &self,
        instance: &str,
        slots: &Slots,
        claims: &Claims,
    ) -> Result<Option<(Checkpoint, Epochs)>, StateError> {
        let (bytes, manifest, offset) = match slots.newest_complete() {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(reason) => return Err(StateError::Corrupt { at: self.origin(instance), reason }),
        };
        let mut c = self.decode(instance, &bytes, manifest)?;
        let zombie = |s: &ShardCheckpoint, m: &Manifest, at: i64| {
            is_zombie(s.owned, m.epoch(s.partition), m.writer, at, claims.get(&s.partition).map_or(&[], |c| c))
        };
        let mut epochs = BTreeMap::new();
        if !c.shards.iter().any(|s| zombie(s, manifest, offset)) {
            epochs.extend(c.shards.iter().map(|s| (s.partition, manifest.epoch(s.partition))));
            return Ok(Some((c, epochs)));
        }
        // The other slot holds the write before: the last one that
        // preceded the claim (the writer finds the claim when its next
        // write is acknowledged, and then overwrites the fenced one).
        let mut before: BTreeMap<i32, (ShardCheckpoint, i64)> = BTreeMap::new();
        if let Some((o, m)) = &slots.manifests[manifest.slot.other().index()]
            && *o < offset
            && let Ok(bytes) = slots.assemble(m)
            && let Ok(older) = self.decode(instance, &bytes, m)
        {
            for s in older.shards {
                if !zombie(&s, m, *o) {
                    let e = m.epoch(s.partition);
                    before.insert(s.partition, (s, e));
                }
            }
        }
        let shards = std::mem::take(&mut c.shards);
        for s in shards {
            let p = s.partition;
            if !zombie(&s, manifest, offset) {
                epochs.insert(p, manifest.epoch(p));
                c.shards.push(s);
            } else if let Some((s, e)) = before.remove(&p) {
                tracing::info!(
                    "partition {p} of instance {instance:?}: fenced; its checkpoint before the claim counts"
                );
                epochs.insert(p, e);
                c.shards.push(s);
            } else {
                tracing::warn!("partition {p} of instance {instance:?}: fenced, and no checkpoint before the claim");
            }
        }
        Ok(Some((c, epochs)))
    }

    /// Every instance's checkpoint of this group and these metric settings
    /// as [`Self::checkpoint_of`] makes it; the others are reported and
    /// skipped. A topic that cannot be read is reported too: the
    /// partitions then start from the group's committed offsets, as without
    /// checkpoints.
    pub fn load_all(&self) -> Vec<Checkpoint> {
        match self.scan(None, None) {
            Ok((scan, _)) => self.checkpoints(&scan).into_iter().map(|(c, _)| c).collect(),
            Err(e) => {
                tracing::error!("cannot read the checkpoints to hand partitions over: {e}");
                Vec::new()
            }
        }
    }

    fn checkpoints(&self, scan: &SlotScan) -> Vec<(Checkpoint, Epochs)> {
        let mut out = Vec::new();
        for (instance, slots) in &scan.instances {
            match self.checkpoint_of(instance, slots, &scan.claims) {
                Ok(Some(c)) => out.push(c),
                Ok(None) => {}
                Err(e) => tracing::warn!("ignoring checkpoint: {e}"),
            }
        }
        out
    }

    /// Every instance's checkpoint in the topic, as `rankpulse state list`
    /// shows them: what a hand-over reads, and which of them are still
    /// the latest owner's of a partition.
    pub fn instances(&self) -> Result<Vec<InstanceSummary>, StateError> {
        let (scan, _) = self.scan(None, None)?;
        let latest = latest_claims(&scan.claims);
        let mut out = Vec::new();
        for (instance, slots) in &scan.instances {
            let mut summary = InstanceSummary {
                instance: instance.clone(),
                records: slots.manifests.iter().flatten().count() as u64
                    + slots.chunks.iter().map(|c| c.len() as u64).sum::<u64>(),
                ..InstanceSummary::default()
            };
            // Only tombstones left: forgotten.
            if summary.records == 0 {
                continue;
            }
            match self.checkpoint_of(instance, slots, &scan.claims) {
                Ok(Some((c, epochs))) => {
                    summary.written_ms = Some(c.written_ms);
                    for s in &c.shards {
                        let epoch = epochs.get(&s.partition).copied().unwrap_or(0);
                        summary.shards.push(ShardSummary {
                            partition: s.partition,
                            owned: s.owned,
                            latest_owner: s.owned && latest.get(&s.partition).is_none_or(|c| *c <= epoch),
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => summary.error = Some(e.to_string()),
            }
            out.push(summary);
        }
        Ok(out)
    }

    /// Tombstones every record of `instance` (an instance that left the
    /// group for good), so that compaction removes its checkpoint and
    /// hand-overs stop reading it. Refused for this store's own instance,
    /// for an instance with nothing in the topic, and, unless `force`, for
    /// one still the latest owner on record of a partition (its checkpoint
    /// is where that partition would resume). The records tombstoned.
    pub fn forget(&self, instance: &str, force: bool) -> Result<usize, StateError> {
        let refuse =
            |why: String| StateError::Forget { instance: instance.to_string(), topic: self.topic.clone(), why };
        if instance == self.instance {
            return Err(refuse("it is this process's own instance".into()));
        }
        let summary = self.instances()?.into_iter().find(|s| s.instance == instance);
        let Some(summary) = summary else {
            return Err(refuse("it has no records there".into()));
        };
        let latest: Vec<i32> = summary.shards.iter().filter(|s| s.latest_owner).map(|s| s.partition).collect();
        if !latest.is_empty() && !force {
            return Err(refuse(format!(
                "it is the latest owner on record of partitions {latest:?} (they would resume from the committed offsets instead of its checkpoint); --force forgets it anyway"
            )));
        }
        let (scan, _) = self.scan(Some(instance), None)?;
        let slots = scan.instances.get(instance).map(|s| [s.extent(Slot::A), s.extent(Slot::B)]).unwrap_or([0, 0]);
        let mut records = Vec::new();
        for slot in [Slot::A, Slot::B] {
            records.push((manifest_key(instance, slot), None));
            records.extend((0..slots[slot.index()]).map(|i| (chunk_key(instance, slot, i), None)));
        }
        let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
        self.produce(&mut w, records).map(|r| r.len())
    }

    /// Takes `partitions` over: appends a claim of each (acks=all), reads
    /// the topic up to the claims, and returns per partition the shard to
    /// restore: among the shards no zombie wrote, one of the highest
    /// epoch (the latest owner's), the furthest of those. A claim not
    /// written, or the topic not read: an error (the daemon holds the
    /// partitions and tries again).
    pub fn hand_over(&self, partitions: &BTreeSet<i32>) -> Result<BTreeMap<i32, ShardCheckpoint>, StateError> {
        #[cfg(test)]
        if self.failing_hand_overs.load(Ordering::Relaxed) > 0 {
            self.failing_hand_overs.fetch_sub(1, Ordering::Relaxed);
            return Err(self.kafka_error("a hand-over failed (test)"));
        }
        let (end, before) = {
            let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
            let before: Vec<(i32, Option<i64>)> = partitions.iter().map(|p| (*p, w.epochs.get(p).copied())).collect();
            (self.claim(&mut w, partitions)?, before)
        };
        // Unread, the checkpoints could not say where the partitions stand:
        // an error, not an empty hand-over (which would start them from
        // the committed offsets). Their shards stay as they were, under
        // their earlier epochs: written under the new claim's, a stale or
        // empty shard would outrank the latest owner's at the next
        // hand-over.
        match self.scan(None, end.map(|e| e + 1)) {
            Ok((scan, _)) => Ok(restore_points(self.checkpoints(&scan), partitions)),
            Err(e) => {
                let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
                for (p, epoch) in before {
                    match epoch {
                        Some(epoch) => w.epochs.insert(p, epoch),
                        None => w.epochs.remove(&p),
                    };
                }
                Err(e)
            }
        }
    }

    /// Makes the next `n` hand-overs fail, as with the state topic
    /// unreachable (tests).
    #[cfg(test)]
    pub(crate) fn fail_hand_overs(&self, n: u64) {
        self.failing_hand_overs.store(n, Ordering::Relaxed);
    }

    /// Makes the next `n` reads of the whole topic fail (tests: a
    /// hand-over whose claim is written and whose read fails).
    #[cfg(test)]
    pub(crate) fn fail_scans(&self, n: u64) {
        self.failing_scans.store(n, Ordering::Relaxed);
    }

    /// Appends a claim of each of `partitions` and waits for them: this
    /// process holds them from then on, under those offsets as epochs. The
    /// last claim's offset.
    fn claim(&self, w: &mut Writer, partitions: &BTreeSet<i32>) -> Result<Option<i64>, StateError> {
        let mut records = Vec::new();
        for p in partitions {
            let claim = Claim {
                group: self.group.clone(),
                instance: self.instance.clone(),
                writer: self.writer_id,
                partition: *p,
            };
            records.push((claim_key(*p), Some(claim_value(&claim)?)));
            // A claim of an earlier tenure must not stand in for this one:
            // if this one fails, the partition counts as unclaimed (claimed
            // at the next write) rather than held under the old epoch,
            // which a claim by another writer since would fence.
            w.claims.remove(p);
        }
        let offsets = self.produce(w, records)?;
        let mut known = self.known.lock().map_err(|_| poisoned(&self.topic))?;
        for (p, o) in partitions.iter().zip(&offsets) {
            w.claims.insert(*p, *o);
            w.epochs.insert(*p, *o);
            note_claim(&mut known, *p, ClaimSeen { offset: *o, writer: self.writer_id });
        }
        Ok(offsets.iter().max().copied())
    }

    /// Reads the topic from its start to `to` (exclusive), else to its end
    /// (the high watermark when the read starts): the scan, and that end.
    fn scan(&self, only: Option<&str>, to: Option<i64>) -> Result<(SlotScan, i64), StateError> {
        #[cfg(test)]
        if self.failing_scans.load(Ordering::Relaxed) > 0 {
            self.failing_scans.fetch_sub(1, Ordering::Relaxed);
            return Err(self.kafka_error("a read failed (test)"));
        }
        let consumer: BaseConsumer<StateContext> = self
            .reader
            .create_with_context(self.context.clone())
            .map_err(|e| self.kafka_error(crate::kafka::error_text(&e)))?;
        let mut scan = SlotScan { group: self.group.clone(), ..SlotScan::default() };
        let (low, high) =
            consumer.fetch_watermarks(&self.topic, 0, TIMEOUT).map_err(|e| self.reader_error(&consumer, &e))?;
        let high = to.map_or(high, |to| to.min(high));
        read_range(&consumer, &self.topic, low, high, |m| {
            scan.add(m.key(), m.payload(), m.offset(), only);
            true
        })
        .map_err(|e| self.kafka_error(e))?;
        if scan.foreign > 0 {
            tracing::warn!(
                "state.topic {}: skipped {} records that are no checkpoint records",
                self.topic,
                scan.foreign
            );
        }
        if let Ok(mut known) = self.known.lock() {
            for (p, claims) in &scan.claims {
                for c in claims {
                    note_claim(&mut known, *p, *c);
                }
            }
        }
        Ok((scan, high))
    }

    /// Whether another process has taken this instance over (see the
    /// module's documentation): then this one must stop.
    pub fn still_ours(&self) -> Result<(), StateError> {
        match self.displaced_by.load(Ordering::Relaxed) {
            0 => Ok(()),
            writer => Err(self.displaced(writer)),
        }
    }

    fn displaced(&self, writer: u64) -> StateError {
        StateError::Displaced { instance: self.instance.clone(), topic: self.topic.clone(), writer }
    }

    /// Writes `checkpoint` into the slot not holding the newest complete
    /// one, then that slot's manifest; returns once every record is
    /// acknowledged (acks=all), with the checkpoint's size.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<usize, StateError> {
        self.write_upto(checkpoint, None)
    }

    /// As [`Self::write`]; with `crash_after` set, stops after that many
    /// chunks and writes no manifest, as a process killed mid-write would.
    fn write_upto(&self, checkpoint: &Checkpoint, crash_after: Option<usize>) -> Result<usize, StateError> {
        let bytes = encode(checkpoint)?;
        let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
        self.still_ours()?;
        self.check_tail(&mut w, None)?;
        // Owned partitions without a claim of this process (the one at
        // their hand-over could not be written) are claimed now.
        let unclaimed: BTreeSet<i32> = checkpoint
            .shards
            .iter()
            .filter(|s| s.owned && !w.claims.contains_key(&s.partition))
            .map(|s| s.partition)
            .collect();
        if !unclaimed.is_empty() {
            self.claim(&mut w, &unclaimed)?;
        }
        // Fenced before writing: claimed by another writer since.
        let known = self.known.lock().map_err(|_| poisoned(&self.topic))?.clone();
        let lost = fenced(&w, checkpoint, self.writer_id, |p| known.get(&p).copied().into_iter().collect());
        if !lost.is_empty() {
            // The newest checkpoint came after the claim (its own check
            // could not read the topic, or its acknowledgement was lost):
            // a zombie's, so the next write overwrites it and spares the
            // one before the claim, which a crash mid-write would need.
            let claimed = lost.iter().filter_map(|p| known.get(p).map(|c| c.offset)).min();
            if let (Some(claimed), Some(at)) = (claimed, w.current_at)
                && claimed < at
            {
                w.current = w.current.map(Slot::other);
                w.current_at = None;
            }
            return Err(self.fenced(lost));
        }
        #[cfg(test)]
        if let Some(hook) = self.before_chunks.lock().ok().and_then(|mut h| h.take()) {
            hook();
        }
        if let Ok(mut opened) = self.opened.lock() {
            *opened = None;
        }
        let slot = w.current.map_or(Slot::A, Slot::other);
        // A number per attempt: chunks of an attempt that failed never
        // pass for this one's.
        w.seq += 1;
        let seq = w.seq;
        let count = bytes.len().div_ceil(self.chunk_bytes);
        let chunks = u32::try_from(count).map_err(|_| StateError::Encode(format!("{count} chunks")))?;
        let records: Vec<(String, Option<Vec<u8>>)> = bytes
            .chunks(self.chunk_bytes)
            .enumerate()
            .take(crash_after.unwrap_or(usize::MAX))
            .map(|(i, data)| {
                let i = i as u32;
                (chunk_key(&self.instance, slot, i), Some(chunk_value(self.writer_id, seq, i, data)))
            })
            .collect();
        // Chunks written (or half written) now: whatever becomes of this
        // write, the slot's extent covers them.
        w.extent[slot.index()] = w.extent[slot.index()].max(records.len() as u32);
        self.produce(&mut w, records)?;
        if crash_after.is_some() {
            return Ok(0);
        }
        let manifest = Manifest {
            group: self.group.clone(),
            instance: self.instance.clone(),
            writer: self.writer_id,
            seq,
            slot,
            chunks,
            len: bytes.len() as u64,
            checksum: xxh3_64(&bytes),
            epochs: checkpoint
                .shards
                .iter()
                .map(|s| (s.partition, w.epochs.get(&s.partition).copied().unwrap_or(0)))
                .collect(),
        };
        let offsets =
            self.produce(&mut w, vec![(manifest_key(&self.instance, slot), Some(manifest_value(&manifest)?))])?;
        w.current = Some(slot);
        w.current_at = offsets.last().copied();
        let manifest_at = offsets.last().copied().unwrap_or(w.tail_from);
        // Chunks of a larger checkpoint before: tombstones, so that
        // compaction frees them (best effort: they are never read).
        let extent = w.extent[slot.index()];
        if extent > chunks {
            let tombstones = (chunks..extent).map(|i| (chunk_key(&self.instance, slot, i), None)).collect();
            match self.produce(&mut w, tombstones) {
                Ok(_) => w.extent[slot.index()] = chunks,
                Err(e) => tracing::warn!("leftover chunks of slot {} stay: {e}", slot.name()),
            }
        }
        // Fenced while writing: a claim between the check above and the
        // manifest. The claimer restored from this instance's checkpoint
        // before (the other slot, which readers now take for those
        // partitions); the next write overwrites this one.
        #[cfg(test)]
        if self.skip_post_check.load(Ordering::Relaxed) {
            return Err(self.kafka_error("the check after the manifest failed (test)"));
        }
        let seen = self.check_tail(&mut w, Some(manifest_at + 1))?;
        let fenced =
            fenced(&w, checkpoint, self.writer_id, |p| seen.iter().filter(|(q, _)| *q == p).map(|(_, c)| *c).collect());
        if !fenced.is_empty() {
            w.current = Some(slot.other());
            w.current_at = None;
            return Err(self.fenced(fenced));
        }
        Ok(bytes.len())
    }

    fn fenced(&self, partitions: Vec<i32>) -> StateError {
        let e = StateError::Fenced { instance: self.instance.clone(), topic: self.topic.clone(), partitions };
        tracing::error!("{e}");
        e
    }

    /// Reads what the topic got since the last read, up to `to` (else its
    /// end): a manifest of this instance by another writer, not followed by
    /// one of its own, displaces this one; one of its own (a write whose
    /// acknowledgement was lost) is taken as the newest. The claims found,
    /// which are also noted.
    fn check_tail(&self, w: &mut Writer, to: Option<i64>) -> Result<Vec<(i32, ClaimSeen)>, StateError> {
        let (_, high) = w.tail.fetch_watermarks(&self.topic, 0, TIMEOUT).map_err(|e| self.reader_error(&w.tail, &e))?;
        let high = to.map_or(high, |to| to.min(high));
        if w.tail_from >= high {
            return Ok(Vec::new());
        }
        let mut seen: Option<(Manifest, i64)> = None;
        let mut other: Option<u64> = None;
        let mut claims = Vec::new();
        read_range(&w.tail, &self.topic, w.tail_from, high, |m| {
            if let Some(Key::Claim { partition }) = m.key().and_then(parse_key)
                && let Some(c) = m.payload().and_then(parse_claim)
                && c.group == self.group
                && c.partition == partition
            {
                claims.push((partition, ClaimSeen { offset: m.offset(), writer: c.writer }));
            }
            if let Some(Key::Manifest { instance, .. }) = m.key().and_then(parse_key)
                && instance == self.instance
                && let Some(manifest) = m.payload().and_then(parse_manifest)
            {
                // The later manifest wins: another writer's before this
                // one's own (read back after a write) displaces nothing.
                if manifest.writer != self.writer_id {
                    other = Some(manifest.writer);
                } else {
                    other = None;
                    seen = Some((manifest, m.offset()));
                }
            }
            true
        })
        .map_err(|e| self.kafka_error(e))?;
        if let Some(writer) = other {
            self.displaced_by.store(writer.max(1), Ordering::Relaxed);
            tracing::error!("{}", self.displaced(writer));
            return Err(self.displaced(writer));
        }
        if let Some((m, at)) = seen {
            w.seq = w.seq.max(m.seq);
            w.current = Some(m.slot);
            w.current_at = Some(at);
        }
        w.tail_from = high;
        let mut known = self.known.lock().map_err(|_| poisoned(&self.topic))?;
        for (p, c) in &claims {
            note_claim(&mut known, *p, *c);
        }
        Ok(claims)
    }

    /// Produces `records` (key, value or tombstone) to the topic's
    /// partition and waits until each is acknowledged: their offsets.
    fn produce(&self, w: &mut Writer, records: Vec<(String, Option<Vec<u8>>)>) -> Result<Vec<i64>, StateError> {
        let first = w.next_record;
        w.next_record += records.len();
        if let Ok(mut results) = self.producer.context().results.lock() {
            // Acknowledgements of records an earlier write gave up on.
            results.clear();
        }
        for (n, (key, value)) in records.iter().enumerate() {
            let mut record =
                BaseRecord::<str, [u8], usize>::with_opaque_to(&self.topic, first + n).partition(0).key(key.as_str());
            if let Some(v) = value {
                record = record.payload(v.as_slice());
            }
            let started = Instant::now();
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                        if started.elapsed() < TIMEOUT =>
                    {
                        record = r;
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(self.kafka_error(crate::kafka::error_text(&e))),
                }
            }
        }
        // Not `flush`: it polls in steps of 100 ms, which was most of a
        // small checkpoint's write. The acknowledgements are served here.
        let deadline = Instant::now() + TIMEOUT + Duration::from_secs(5);
        let acknowledged = || {
            let results = self.producer.context().results.lock();
            results.is_ok_and(|r| r.range(first..first + records.len()).count() == records.len())
        };
        while !acknowledged() {
            if Instant::now() > deadline {
                return Err(self.kafka_error(format!("not acknowledged within {} s", TIMEOUT.as_secs() + 5)));
            }
            self.producer.poll(Duration::from_millis(1));
        }
        let results = self.producer.context().results.lock().map_err(|_| poisoned(&self.topic))?;
        (first..first + records.len())
            .map(|n| match results.get(&n) {
                Some(Ok(offset)) => Ok(*offset),
                Some(Err(e)) => Err(self.kafka_error(format!("a record was not written: {e}"))),
                None => Err(self.kafka_error("a record was not acknowledged")),
            })
            .collect()
    }
}

/// The newest claim's offset per partition.
fn latest_claims(claims: &Claims) -> BTreeMap<i32, i64> {
    claims.iter().filter_map(|(p, cs)| cs.iter().map(|c| c.offset).max().map(|o| (*p, o))).collect()
}

/// One instance's checkpoint as `rankpulse state list` shows it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstanceSummary {
    pub instance: String,
    /// Its manifest and chunk records, as compaction will leave them.
    pub records: u64,
    /// When the checkpoint a restore would take was written (none: no
    /// complete checkpoint).
    pub written_ms: Option<i64>,
    pub shards: Vec<ShardSummary>,
    /// Why no checkpoint of it can be restored (corrupt, other settings).
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSummary {
    pub partition: i32,
    pub owned: bool,
    /// No claim of the partition is newer than this shard's: a hand-over
    /// would resume the partition from it.
    pub latest_owner: bool,
}

/// Keeps the newer of two claims of a partition.
fn note_claim(known: &mut BTreeMap<i32, ClaimSeen>, partition: i32, claim: ClaimSeen) {
    let newest = known.entry(partition).or_insert(claim);
    if claim.offset > newest.offset {
        *newest = claim;
    }
}

/// The partitions of `checkpoint` its writer owns but must not write: a
/// claim among `claims_of` them, by another writer, is newer than this
/// writer's.
fn fenced(w: &Writer, checkpoint: &Checkpoint, writer: u64, claims_of: impl Fn(i32) -> Vec<ClaimSeen>) -> Vec<i32> {
    let epoch = |p: i32| w.claims.get(&p).copied().unwrap_or(0);
    checkpoint
        .shards
        .iter()
        .filter(|s| is_zombie(s.owned, epoch(s.partition), writer, i64::MAX, &claims_of(s.partition)))
        .map(|s| s.partition)
        .collect()
}

/// Per partition of `partitions`, the shard to restore among the
/// checkpoints' (their zombie shards already left out): the highest epoch
/// (the latest owner's), then the furthest. A former owner's shard never
/// passes the point the latest owner restored from, unless a zombie's.
fn restore_points(
    checkpoints: Vec<(Checkpoint, Epochs)>,
    partitions: &BTreeSet<i32>,
) -> BTreeMap<i32, ShardCheckpoint> {
    let mut best: BTreeMap<i32, (i64, ShardCheckpoint)> = BTreeMap::new();
    for (c, epochs) in checkpoints {
        for s in c.shards {
            let e = epochs.get(&s.partition).copied().unwrap_or(0);
            if partitions.contains(&s.partition)
                && best.get(&s.partition).is_none_or(|(be, b)| (e, s.progress()) > (*be, b.progress()))
            {
                best.insert(s.partition, (e, s));
            }
        }
    }
    best.into_iter().map(|(p, (_, s))| (p, s)).collect()
}

fn poisoned(topic: &str) -> StateError {
    StateError::Kafka { topic: topic.to_string(), cause: "a writer panicked".into() }
}

/// The state clients' common settings: the consumer's connection and
/// security settings (`kafka.properties`), and never a topic created by
/// asking for it (it would get the broker's default policy, not compact).
fn client_config(config: &Config) -> ClientConfig {
    let mut cc = crate::kafka::connection_config(config, "rankpulse-state");
    cc.set("allow.auto.create.topics", "false");
    cc
}

/// Reads `topic`'s partition 0 from `from` until `to` (exclusive, a high
/// watermark read before), handing each record to `each` until it says
/// stop. Gives up when the broker sends nothing for [`TIMEOUT`].
fn read_range(
    consumer: &BaseConsumer<StateContext>,
    topic: &str,
    from: i64,
    to: i64,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> bool,
) -> Result<(), String> {
    if from >= to {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(from)).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut last_progress = Instant::now();
    let position = || {
        let tpl = consumer.position().ok()?;
        tpl.find_partition(topic, 0).and_then(|e| e.offset().to_raw())
    };
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            None => {
                if last_progress.elapsed() > TIMEOUT {
                    return Err(format!("nothing read for {} s (at offset {from} of {to})", TIMEOUT.as_secs()));
                }
            }
            // The end as the broker saw it when answering: done once the
            // position is at `to` (the end of an earlier read may still
            // be reported as the read starts).
            Some(Err(KafkaError::PartitionEOF(_))) => {
                if position().is_some_and(|p| p >= to) {
                    return Ok(());
                }
            }
            // A connection dropped or a leader moving: librdkafka
            // reconnects and fetches again by itself; only a read that
            // stays without progress for TIMEOUT fails.
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable,
            ))) => {
                if last_progress.elapsed() > TIMEOUT {
                    return Err(format!("nothing read for {} s (at offset {from} of {to})", TIMEOUT.as_secs()));
                }
            }
            Some(Err(e)) => return Err(crate::kafka::error_text(&e)),
            Some(Ok(m)) => {
                last_progress = Instant::now();
                if !each(&m) || m.offset() + 1 >= to {
                    return Ok(());
                }
            }
        }
    }
}

/// Creates the state topic if missing (1 partition, compacted, the
/// configured replication), then checks it whether created or found:
/// compacted and one partition, else a typed error naming the topic. The
/// topic's `max.message.bytes` when the broker reports it. A request that
/// fails says what the brokers reported last.
fn ensure_topic(base: &ClientConfig, topic: &str, replication: i32) -> Result<Option<usize>, StateError> {
    // The admin client serves none of librdkafka's events (its errors stay
    // queued): a consumer with the same settings reaches the brokers
    // first, and the events it serves say why it cannot.
    let probe = Probe::new(base, topic)?;
    let kafka = |cause: String| probe.error(cause);
    probe.metadata()?;
    let admin: AdminClient<DefaultClientContext> = base.create().map_err(|e| kafka(crate::kafka::error_text(&e)))?;
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT)).operation_timeout(Some(TIMEOUT));
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication));
    for (key, value) in CREATE_CONFIG {
        new = new.set(key, value);
    }
    match block_on(admin.create_topics([&new], &opts)) {
        Ok(results) => match results.into_iter().next() {
            Some(Ok(_)) => tracing::info!("created state.topic {topic} (1 partition, compacted)"),
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {}
            // Not allowed to create topics: it may exist, which is checked next.
            Some(Err((
                _,
                RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::ClusterAuthorizationFailed,
            ))) => {}
            Some(Err((_, code))) => return Err(kafka(format!("cannot create it: {code}"))),
            None => {}
        },
        Err(e) => return Err(kafka(format!("cannot create it: {}", crate::kafka::error_text(&e)))),
    }
    let metadata =
        admin.inner().fetch_metadata(Some(topic), TIMEOUT).map_err(|e| kafka(crate::kafka::error_text(&e)))?;
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(kafka("the broker does not list it".into()));
    };
    if let Some(e) = t.error() {
        return Err(kafka(format!("it does not exist and could not be created: {}", RDKafkaErrorCode::from(e))));
    }
    if t.partitions().len() != 1 {
        return Err(StateError::Partitions { topic: topic.to_string(), partitions: t.partitions().len() });
    }
    let resource = ResourceSpecifier::Topic(topic);
    let described = block_on(admin.describe_configs([&resource], &opts))
        .map_err(|e| kafka(format!("cannot read its configuration: {}", crate::kafka::error_text(&e))))?;
    let configs = match described.into_iter().next() {
        Some(Ok(c)) => c,
        Some(Err(code)) => return Err(kafka(format!("cannot read its configuration: {code}"))),
        None => return Err(kafka("cannot read its configuration: no answer".into())),
    };
    let value = |name: &str| configs.get(name).and_then(|e| e.value.clone());
    let policy = value("cleanup.policy");
    match policy.as_deref() {
        Some(p) if p.split(',').any(|p| p.trim() == "compact") => {
            if p.contains("delete") {
                tracing::warn!(
                    "state.topic {topic} has cleanup.policy={p}: a checkpoint older than its retention.ms is \
                     deleted (an instance stopped that long restarts from the committed offsets)"
                );
            }
        }
        _ => {
            return Err(StateError::NotCompacted {
                topic: topic.to_string(),
                policy: policy.unwrap_or_else(|| "(not reported: the broker's default)".into()),
            });
        }
    }
    Ok(value("max.message.bytes").and_then(|v| v.parse().ok()))
}

/// A consumer that asks the brokers about `topic` before anything else
/// does: the events it serves say why they cannot answer.
struct Probe {
    consumer: BaseConsumer<StateContext>,
    context: StateContext,
    topic: String,
}

impl Probe {
    fn new(base: &ClientConfig, topic: &str) -> Result<Probe, StateError> {
        let context = StateContext::default();
        let consumer = base
            .create_with_context(context.clone())
            .map_err(|e| StateError::Kafka { topic: topic.to_string(), cause: crate::kafka::error_text(&e) })?;
        Ok(Probe { consumer, context, topic: topic.to_string() })
    }

    /// `cause`, with what the brokers reported last.
    fn error(&self, cause: String) -> StateError {
        serve_events(&self.consumer);
        StateError::Kafka { topic: self.topic.clone(), cause: self.context.0.explain(cause) }
    }

    /// The brokers' metadata of the topic (its error, if it has none).
    fn metadata(&self) -> Result<rdkafka::metadata::Metadata, StateError> {
        self.consumer
            .fetch_metadata(Some(&self.topic), TIMEOUT)
            .map_err(|e| self.error(format!("cannot reach the brokers: {}", crate::kafka::error_text(&e))))
    }
}

/// Serves what librdkafka queued for `consumer` (errors, log lines), so
/// that its context has noted the errors. A poll without waiting serves
/// at most one event: a bounded number of them, more than 30 s of
/// reconnection attempts queue.
fn serve_events(consumer: &BaseConsumer<StateContext>) {
    for _ in 0..10_000 {
        let _ = consumer.poll(Duration::ZERO);
    }
}

/// Waits for an admin request's answer on this thread: librdkafka's own
/// thread completes the future, which needs no runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
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

#[cfg(test)]
mod tests {
    //! Against librdkafka's in-process mock cluster, which has no admin
    //! API: the topic is made by the cluster, the store opened past
    //! [`ensure_topic`] (checked against a real broker by
    //! `tests/it/broker_e2e.rs`).
    use super::*;
    use crate::config::StateBackend;
    use rankpulse_core::pipeline::{Clock, Pipeline};
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::DefaultProducerContext;

    const TOPIC: &str = "rankpulse-state-test";

    /// A request that timed out says what the brokers reported, and the
    /// "all brokers are down" that follows a refused login does not hide
    /// it (the message librdkafka gives for a wrong SCRAM password, as
    /// `tests/it/secure_broker.rs` gets it from its gateway).
    #[test]
    fn a_failed_request_says_what_the_brokers_reported() {
        let errors = BrokerErrors::default();
        assert_eq!(errors.explain("timed out".into()), "timed out");
        let refused = "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed \
                       during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
        errors.note(&KafkaError::Global(RDKafkaErrorCode::Authentication), refused);
        errors.note(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        let text = errors.explain("timed out".into());
        assert!(text.starts_with("timed out (last error from the brokers: "), "{text}");
        assert!(text.ends_with(&format!("{refused})")), "{text}");
        // A cause that already says it is left as it is.
        assert_eq!(errors.explain(text.clone()), text);
        // Without an earlier error, "all brokers are down" is the news.
        let errors = BrokerErrors::default();
        errors.note(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        assert!(errors.explain("timed out".into()).ends_with("1/1 brokers are down)"));
    }

    fn cluster() -> (MockCluster<'static, DefaultProducerContext>, String) {
        let cluster = MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(TOPIC, 1, 1).unwrap();
        let bootstrap = cluster.bootstrap_servers();
        (cluster, bootstrap)
    }

    fn config(bootstrap: &str, instance: &str) -> Config {
        let mut c = Config::default();
        c.kafka.brokers = bootstrap.to_string();
        c.state.backend = StateBackend::Kafka;
        c.state.topic = TOPIC.to_string();
        c.state.instance = instance.to_string();
        c
    }

    /// A checkpoint of one shard holding `lists` open lists of 10 results
    /// each, its offset `lists` and its time `written_ms`.
    fn checkpoint(config: &Config, lists: usize, written_ms: i64) -> Checkpoint {
        let mut p = Pipeline::new(&config.pipeline_settings());
        let results: Vec<String> =
            (1..=10).map(|r| format!(r#"{{"doc_id":"doc-{r}","position":{r},"score":{}}}"#, 20 - r)).collect();
        let results = results.join(",");
        for i in 0..lists {
            let e = format!(
                r#"{{"type":"impression","event_id":"i{i}","session_id":"session-{i}","timestamp":{},"results":[{results}],"dimensions":{{"ranker":"r{}"}}}}"#,
                1_700_000_000_000i64 + i as i64,
                i % 3
            );
            let _ = p.ingest("t", e.as_bytes(), Clock::replay(), None);
        }
        let budget = std::mem::take(&mut *p.budget().lock().unwrap());
        Checkpoint {
            fingerprint: fingerprint(config),
            instance: instance_name(config),
            written_ms,
            budget,
            shards: vec![super::super::ShardCheckpoint {
                partition: 0,
                owned: true,
                offsets: BTreeMap::from([("t".to_string(), lists as i64)]),
                assembler: p.assembler().state(),
                sessions: p.sessions().clone(),
                accumulators: p.accumulators().clone(),
                counters: p.counters().clone(),
            }],
        }
    }

    /// The instance's records as a fresh reader finds them.
    fn slots(store: &KafkaStore, instance: &str) -> Slots {
        store.scan(Some(instance), None).unwrap().0.instances.remove(instance).unwrap_or_default()
    }

    /// The bytes a reader would restore for `instance`.
    fn restorable(store: &KafkaStore, instance: &str) -> Vec<u8> {
        slots(store, instance).newest_complete().unwrap().expect("a complete checkpoint").0
    }

    /// A checkpoint of many chunks reads back byte for byte; a write that
    /// dies between its chunks and its manifest (after some chunks, or
    /// after all) leaves the previous checkpoint readable, and the next
    /// process writes into the other slot.
    #[test]
    fn chunks_reassemble_and_a_write_cut_before_its_manifest_leaves_the_last_checkpoint() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "a");
        let first = checkpoint(&cfg, 300, 1);
        let first_bytes = encode(&first).unwrap();
        let chunk = 4096;
        assert!(first_bytes.len() > 5 * chunk, "{} bytes", first_bytes.len());
        let store = KafkaStore::connect(&cfg, chunk).unwrap();
        assert!(store.load_own().unwrap().is_none(), "an empty topic has no checkpoint");
        assert_eq!(store.write(&first).unwrap(), first_bytes.len());
        assert_eq!(restorable(&store, "a"), first_bytes);
        let loaded = store.load_own().unwrap().unwrap();
        assert_eq!((loaded.written_ms, loaded.shards[0].offsets["t"]), (1, 300));

        let second = checkpoint(&cfg, 400, 2);
        let second_bytes = encode(&second).unwrap();
        let chunks = second_bytes.len().div_ceil(chunk);
        for cut in [2, chunks] {
            store.write_upto(&second, Some(cut)).unwrap();
            let s = slots(&store, "a");
            assert_eq!(s.chunks[Slot::B.index()].len(), cut, "the cut write's chunks are in slot B");
            assert_eq!(restorable(&store, "a"), first_bytes, "cut after {cut} of {chunks} chunks");
            let restarted = KafkaStore::connect(&cfg, chunk).unwrap();
            assert_eq!(restarted.load_own().unwrap().unwrap().written_ms, 1);
        }
        // A restarted process finishes the job: slot B, then A again.
        let restarted = KafkaStore::connect(&cfg, chunk).unwrap();
        restarted.write(&second).unwrap();
        let s = slots(&restarted, "a");
        assert_eq!(s.manifests.iter().flatten().map(|(_, m)| m.slot).collect::<Vec<_>>(), [Slot::A, Slot::B]);
        assert_eq!(restorable(&restarted, "a"), second_bytes);
        assert_eq!(restarted.load_own().unwrap().unwrap().written_ms, 2);
        let third = checkpoint(&cfg, 10, 3);
        restarted.write(&third).unwrap();
        assert_eq!(restarted.load_own().unwrap().unwrap().written_ms, 3);
        assert_eq!(slots(&restarted, "a").newest_complete().unwrap().unwrap().1.slot, Slot::A);
        // A smaller checkpoint leaves no stale chunks behind in its slot.
        assert_eq!(slots(&restarted, "a").extent(Slot::A), encode(&third).unwrap().len().div_ceil(chunk) as u32);
    }

    /// At the default chunk size, a checkpoint several chunks long.
    #[test]
    fn a_checkpoint_several_times_a_chunk_round_trips() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "big");
        let big = checkpoint(&cfg, 12_000, 7);
        let bytes = encode(&big).unwrap();
        assert!(bytes.len() > 3 * MAX_CHUNK_BYTES, "{} bytes", bytes.len());
        let store = KafkaStore::connect(&cfg, MAX_CHUNK_BYTES).unwrap();
        store.write(&big).unwrap();
        store.write(&big).unwrap();
        assert_eq!(restorable(&store, "big"), bytes);
        let loaded = KafkaStore::connect(&cfg, MAX_CHUNK_BYTES).unwrap().load_own().unwrap().unwrap();
        assert_eq!(loaded.shards[0].assembler.open_lists.len(), big.shards[0].assembler.open_lists.len());
        assert_eq!(loaded.shards[0].offsets["t"], 12_000);
    }

    /// Every instance's checkpoint is found; one of other metric settings
    /// or of another group is skipped by load_all and refused as one's own,
    /// as is an instance none of whose slots is whole; records of any other
    /// shape are skipped without a panic.
    #[test]
    fn load_all_skips_what_load_own_refuses() {
        let (_cluster, bootstrap) = cluster();
        for instance in ["a", "b"] {
            let cfg = config(&bootstrap, instance);
            KafkaStore::connect(&cfg, 2048).unwrap().write(&checkpoint(&cfg, 50, 1)).unwrap();
        }
        let mut other_settings = config(&bootstrap, "c");
        other_settings.metrics.cutoffs = vec![1, 2];
        KafkaStore::connect(&other_settings, 2048).unwrap().write(&checkpoint(&other_settings, 5, 1)).unwrap();
        let mut other_group = config(&bootstrap, "d");
        other_group.kafka.group_id = "elsewhere".into();
        KafkaStore::connect(&other_group, 2048).unwrap().write(&checkpoint(&other_group, 5, 1)).unwrap();

        // Garbage: unknown keys, bad values, a manifest without chunks.
        let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
        let mut rng = rankpulse_testkit::Rng::new(5);
        let mut junk: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"e/A".to_vec(), b"RPSTMF01".to_vec()),
            (b"e/A/0".to_vec(), b"RPSTCK01\x01".to_vec()),
            (b"/A".to_vec(), b"x".to_vec()),
            (b"e/C/0".to_vec(), b"x".to_vec()),
            (b"e/A/-1".to_vec(), b"x".to_vec()),
            (b"e/A/0/1".to_vec(), b"x".to_vec()),
            (vec![0xff, 0xfe], b"x".to_vec()),
        ];
        let missing = Manifest {
            group: cfg_group(&bootstrap),
            instance: "e".into(),
            writer: 9,
            seq: 1,
            slot: Slot::A,
            chunks: 3,
            len: 10,
            checksum: 0,
            epochs: BTreeMap::new(),
        };
        junk.push((b"e/A".to_vec(), manifest_value(&missing).unwrap()));
        for _ in 0..200 {
            let key: Vec<u8> = (0..rng.below(12)).map(|_| b"xy/AB01\xff"[rng.below(8) as usize]).collect();
            let mut value: Vec<u8> = if rng.below(2) == 0 { b"RPSTMF01".to_vec() } else { b"RPSTCK01".to_vec() };
            value.extend((0..rng.below(40)).map(|_| rng.below(256) as u8));
            junk.push((key, value));
        }
        for (k, v) in &junk {
            producer.send(BaseRecord::<[u8], [u8]>::to(TOPIC).partition(0).key(k).payload(v)).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();

        let reader = KafkaStore::connect(&config(&bootstrap, "a"), 2048).unwrap();
        let mut found: Vec<String> = reader.load_all().into_iter().map(|c| c.instance).collect();
        found.sort();
        assert_eq!(found, ["a", "b"]);
        let incompatible = KafkaStore::connect(&config(&bootstrap, "c"), 2048).unwrap().load_own().unwrap_err();
        assert!(matches!(incompatible, StateError::Incompatible { .. }), "{incompatible}");
        let foreign = KafkaStore::connect(&config(&bootstrap, "d"), 2048).unwrap().load_own().unwrap_err();
        assert!(matches!(foreign, StateError::ForeignGroup { .. }), "{foreign}");
        let corrupt = KafkaStore::connect(&config(&bootstrap, "e"), 2048).unwrap().load_own().unwrap_err();
        assert!(
            matches!(&corrupt, StateError::Corrupt { reason, .. } if reason.contains("chunk 0 of 3 is missing")),
            "{corrupt}"
        );
    }

    fn cfg_group(bootstrap: &str) -> String {
        config(bootstrap, "x").kafka.group_id
    }

    /// A second process with the same instance name takes it over; the
    /// first finds that out before its next write and stops.
    #[test]
    fn a_second_process_with_the_same_instance_displaces_the_first() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "same");
        let first = KafkaStore::connect(&cfg, 2048).unwrap();
        first.write(&checkpoint(&cfg, 20, 1)).unwrap();
        first.write(&checkpoint(&cfg, 20, 2)).unwrap();
        let second = KafkaStore::connect(&cfg, 2048).unwrap();
        assert_eq!(second.load_own().unwrap().unwrap().written_ms, 2, "it takes over the last checkpoint");
        second.write(&checkpoint(&cfg, 20, 3)).unwrap();
        assert!(first.still_ours().is_ok(), "not known before the first's next write");
        let e = first.write(&checkpoint(&cfg, 20, 4)).unwrap_err();
        assert!(matches!(&e, StateError::Displaced { instance, .. } if instance == "same"), "{e}");
        assert!(first.still_ours().is_err());
        assert!(first.write(&checkpoint(&cfg, 20, 5)).is_err(), "it stays stopped");
        second.write(&checkpoint(&cfg, 20, 6)).unwrap();
        assert!(second.still_ours().is_ok());
        let reader = KafkaStore::connect(&cfg, 2048).unwrap();
        assert_eq!(reader.load_own().unwrap().unwrap().written_ms, 6);
    }

    /// Partition 0's restore point (its offset on topic "t") as a reader
    /// that claims nothing picks it; `compacted`: as it would from the
    /// topic compacted (the newest claim of each partition only: manifests
    /// and chunks already count by their newest value).
    fn restore_point(store: &KafkaStore, compacted: bool) -> Option<i64> {
        let (mut scan, _) = store.scan(None, None).unwrap();
        if compacted {
            for claims in scan.claims.values_mut() {
                claims.drain(..claims.len() - 1);
            }
        }
        restore_points(store.checkpoints(&scan), &BTreeSet::from([0])).get(&0).map(|s| s.offsets["t"])
    }

    /// Partition 0 of `instance`'s own checkpoint, as a revoke or a restart
    /// restores it (counters included), from the topic as is or compacted.
    fn own_point(store: &KafkaStore, instance: &str, compacted: bool) -> Option<i64> {
        let (mut scan, _) = store.scan(None, None).unwrap();
        if compacted {
            for claims in scan.claims.values_mut() {
                claims.drain(..claims.len() - 1);
            }
        }
        let slots = scan.instances.remove(instance).unwrap();
        let (c, _) = store.checkpoint_of(instance, &slots, &scan.claims).unwrap().unwrap();
        c.shards.iter().find(|s| s.partition == 0).map(|s| s.offsets["t"])
    }

    fn unowned(mut c: Checkpoint) -> Checkpoint {
        c.shards[0].owned = false;
        c
    }

    fn fenced_partitions(e: &StateError) -> Vec<i32> {
        match e {
            StateError::Fenced { partitions, .. } => partitions.clone(),
            e => panic!("not fenced: {e}"),
        }
    }

    /// Issue #27: a former owner that still writes after losing the
    /// partition (a zombie) never wins. A owns partition 0 and checkpoints
    /// it at X = 20; B takes it over (claims it) while A, cut off from the
    /// group, writes it further to Y = 30. A's write reports the partition
    /// fenced; a reader choosing the restore point takes X (then B's own),
    /// never Y; A's own checkpoint, which its counters come back from at
    /// the revoke or a restart, has the partition at X: A counts up to X,
    /// B from X. The same holds on the topic as compaction leaves it
    /// (only the newest claim), and when A tries again before writing.
    #[test]
    fn a_zombie_never_wins_a_partition_claimed_by_its_new_owner() {
        let (_cluster, bootstrap) = cluster();
        let (ca, cb) = (config(&bootstrap, "a"), config(&bootstrap, "b"));
        let a = Arc::new(KafkaStore::connect(&ca, 2048).unwrap());
        let b = Arc::new(KafkaStore::connect(&cb, 2048).unwrap());
        let p0 = BTreeSet::from([0]);
        assert!(a.hand_over(&p0).unwrap().is_empty(), "nothing to restore in an empty topic");
        a.write(&checkpoint(&ca, 20, 1)).unwrap();
        assert_eq!(restore_point(&a, false), Some(20));

        // B claims partition 0 while A's next write is under way: after
        // A's check, before its chunks and manifest.
        let b_restored = Arc::new(Mutex::new(None));
        let (claimer, seen) = (b.clone(), b_restored.clone());
        *a.before_chunks.lock().unwrap() = Some(Box::new(move || {
            let found = claimer.hand_over(&BTreeSet::from([0])).unwrap();
            *seen.lock().unwrap() = found.get(&0).map(|s| s.offsets["t"]);
        }));
        let e = a.write(&checkpoint(&ca, 30, 2)).unwrap_err();
        assert_eq!(fenced_partitions(&e), [0], "the zombie's write reports the partition fenced");
        assert_eq!(*b_restored.lock().unwrap(), Some(20), "B took it over at X");
        // Y is in the topic (A's newest manifest), and never taken.
        assert_eq!(slots(&a, "a").newest_complete().unwrap().unwrap().1.seq, 2);
        for compacted in [false, true] {
            assert_eq!(restore_point(&a, compacted), Some(20), "compacted: {compacted}");
            assert_eq!(own_point(&a, "a", compacted), Some(20), "compacted: {compacted}");
        }
        assert_eq!(a.load_own().unwrap().unwrap().shards[0].offsets["t"], 20);
        let restarted = KafkaStore::connect(&ca, 2048).unwrap();
        assert_eq!(restarted.load_own().unwrap().unwrap().shards[0].offsets["t"], 20, "a restart of A too");

        // A gives the partition up at X (not owned); its writes go on,
        // overwriting Y first, then X's slot: X stays what counts.
        for written_ms in [3, 4] {
            a.write(&unowned(checkpoint(&ca, 20, written_ms))).unwrap();
            for compacted in [false, true] {
                assert_eq!(restore_point(&a, compacted), Some(20));
                assert_eq!(own_point(&a, "a", compacted), Some(20));
            }
        }
        // B's own checkpoint, of the newest epoch, is the restore point
        // from then on.
        b.write(&checkpoint(&cb, 25, 5)).unwrap();
        // A zombie again, its claim older than B's: fenced before writing.
        let e = a.write(&checkpoint(&ca, 40, 6)).unwrap_err();
        assert_eq!(fenced_partitions(&e), [0]);
        for compacted in [false, true] {
            assert_eq!(restore_point(&a, compacted), Some(25), "compacted: {compacted}");
            assert_eq!(own_point(&a, "a", compacted), Some(20));
        }
        assert_eq!(a.load_own().unwrap().unwrap().written_ms, 4, "nothing written");
        // Taking it back: A's new claim is the newest, B is fenced.
        assert_eq!(a.hand_over(&p0).unwrap()[&0].offsets["t"], 25);
        a.write(&checkpoint(&ca, 35, 7)).unwrap();
        assert_eq!(fenced_partitions(&b.write(&checkpoint(&cb, 45, 8)).unwrap_err()), [0]);
        assert_eq!(restore_point(&a, false), Some(35));
    }

    /// A zombie whose check after its manifest failed (Y, written after
    /// B's claim, stays its newest) learns of the fence at its next
    /// write's check: that write is refused and the one after goes to Y's
    /// slot, so a crash in the middle of it leaves X, the checkpoint before
    /// the claim, whole. Overwriting X instead would leave only Y, whose
    /// partition 0 no restore takes: A's counters of it would be lost.
    #[test]
    fn after_a_fence_found_late_the_next_write_spares_the_checkpoint_before_the_claim() {
        let (_cluster, bootstrap) = cluster();
        let (ca, cb) = (config(&bootstrap, "a"), config(&bootstrap, "b"));
        let a = Arc::new(KafkaStore::connect(&ca, 2048).unwrap());
        let b = Arc::new(KafkaStore::connect(&cb, 2048).unwrap());
        a.hand_over(&BTreeSet::from([0])).unwrap();
        a.write(&checkpoint(&ca, 20, 1)).unwrap();
        let claimer = b.clone();
        *a.before_chunks.lock().unwrap() = Some(Box::new(move || {
            claimer.hand_over(&BTreeSet::from([0])).unwrap();
        }));
        a.skip_post_check.store(true, Ordering::Relaxed);
        assert!(a.write(&checkpoint(&ca, 30, 2)).is_err(), "its check failed");
        a.skip_post_check.store(false, Ordering::Relaxed);
        assert_eq!(fenced_partitions(&a.write(&checkpoint(&ca, 35, 3)).unwrap_err()), [0]);
        // A gives partition 0 up at X and writes, killed mid-chunks.
        a.write_upto(&unowned(checkpoint(&ca, 20, 4)), Some(1)).unwrap();
        assert_eq!(own_point(&a, "a", false), Some(20), "X is whole");
        let restarted = KafkaStore::connect(&ca, 2048).unwrap();
        assert_eq!(restarted.load_own().unwrap().unwrap().shards[0].offsets["t"], 20);
    }

    /// An instance gone for good is forgotten: its records are tombstoned
    /// and hand-overs no longer read it. Refused for the store's own
    /// instance, an unknown one, and (without force) one that is still the
    /// latest owner on record of a partition.
    #[test]
    fn a_departed_instance_is_forgotten_unless_it_is_the_latest_owner() {
        let (_cluster, bootstrap) = cluster();
        let (ca, cb, cc) = (config(&bootstrap, "a"), config(&bootstrap, "b"), config(&bootstrap, "ops"));
        let a = KafkaStore::connect(&ca, 2048).unwrap();
        let b = KafkaStore::connect(&cb, 2048).unwrap();
        a.hand_over(&BTreeSet::from([0])).unwrap();
        a.write(&checkpoint(&ca, 300, 1)).unwrap();
        a.write(&unowned(checkpoint(&ca, 300, 2))).unwrap();
        b.hand_over(&BTreeSet::from([0])).unwrap();
        b.write(&checkpoint(&cb, 310, 3)).unwrap();
        let ops = KafkaStore::connect(&cc, 2048).unwrap();
        let listed = ops.instances().unwrap();
        let names: Vec<&str> = listed.iter().map(|s| s.instance.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(listed[0].records > 2, "a's chunks of both slots, and its manifests");
        assert_eq!(listed[0].written_ms, Some(2));
        assert_eq!(listed[1].shards, [ShardSummary { partition: 0, owned: true, latest_owner: true }]);
        assert!(!listed[0].shards[0].latest_owner);

        let refused = |e: StateError| match e {
            StateError::Forget { why, .. } => why,
            e => panic!("not refused: {e}"),
        };
        assert!(refused(ops.forget("ops", false).unwrap_err()).contains("own instance"));
        assert!(refused(ops.forget("nobody", false).unwrap_err()).contains("no records"));
        assert!(refused(ops.forget("b", false).unwrap_err()).contains("latest owner on record of partitions [0]"));
        assert!(ops.forget("a", false).unwrap() > 2);
        assert_eq!(ops.instances().unwrap().len(), 1, "a is gone");
        assert!(slots(&ops, "a").manifests.iter().all(Option::is_none));
        assert_eq!(ops.load_all().len(), 1);
        assert_eq!(b.hand_over(&BTreeSet::from([0])).unwrap()[&0].offsets["t"], 310);
        assert!(ops.forget("b", true).unwrap() > 0, "forced");
        assert!(ops.instances().unwrap().is_empty());
    }

    /// Manifests written before fencing (`RPSTMF01`) still read, their
    /// shards of epoch 0; an unknown claim value is no claim.
    #[test]
    fn manifests_of_before_fencing_read_with_epoch_zero() {
        let v1 = ManifestV1 {
            group: "g".into(),
            instance: "i".into(),
            writer: 3,
            seq: 4,
            slot: Slot::B,
            chunks: 2,
            len: 5,
            checksum: 6,
        };
        let mut value = MANIFEST_MAGIC_V1.to_vec();
        value.extend(postcard::to_stdvec(&v1).unwrap());
        let m = parse_manifest(&value).unwrap();
        assert_eq!((m.writer, m.seq, m.slot, m.chunks, m.len, m.checksum), (3, 4, Slot::B, 2, 5, 6));
        assert!(m.epochs.is_empty());
        assert_eq!(m.epoch(7), 0);
        assert_eq!(parse_manifest(&manifest_value(&m).unwrap()), Some(m));
        let claim = Claim { group: "g".into(), instance: "i".into(), writer: 1, partition: 2 };
        assert_eq!(parse_claim(&claim_value(&claim).unwrap()), Some(claim));
        assert_eq!(parse_claim(b"RPSTCL01"), None);
        assert_eq!(parse_key(b"/claim/12"), Some(Key::Claim { partition: 12 }));
        for bad in [&b"/claim/"[..], b"/claim/-1", b"/claim/x", b"/claims/1"] {
            assert_eq!(parse_key(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    /// Two processes of one name writing at once: the one whose manifest is
    /// later in the log keeps the name, even though it reads the other's
    /// manifest back when checking after its own write; the other stops.
    #[test]
    fn of_two_interleaved_writes_under_one_name_the_later_manifest_wins() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "same");
        // Of no partition it owns: no claim, no fencing, only the name.
        let first = KafkaStore::connect(&cfg, 2048).unwrap();
        let second = Arc::new(KafkaStore::connect(&cfg, 2048).unwrap());
        let (writer, c) = (second.clone(), cfg.clone());
        // The second's write lands between the first's check and its chunks.
        *first.before_chunks.lock().unwrap() = Some(Box::new(move || {
            writer.write(&unowned(checkpoint(&c, 20, 1))).unwrap();
        }));
        first.write(&unowned(checkpoint(&cfg, 20, 2))).unwrap();
        assert!(first.still_ours().is_ok());
        let e = second.write(&unowned(checkpoint(&cfg, 20, 3))).unwrap_err();
        assert!(matches!(e, StateError::Displaced { .. }), "{e}");
        first.write(&unowned(checkpoint(&cfg, 20, 4))).unwrap();
        assert_eq!(first.load_own().unwrap().unwrap().written_ms, 4);
    }

    #[test]
    fn keys_name_a_slot_and_a_chunk_or_nothing() {
        assert_eq!(parse_key(b"pod-1/A"), Some(Key::Manifest { instance: "pod-1", slot: Slot::A }));
        assert_eq!(parse_key(b"pod-1/B/12"), Some(Key::Chunk { instance: "pod-1", slot: Slot::B, index: 12 }));
        for bad in [&b""[..], b"pod", b"pod/C", b"/A", b"pod/A/x", b"pod/A/1/2", b"pod/A/99999999999"] {
            assert_eq!(parse_key(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_chunk(&chunk_value(7, 8, 9, b"data")), Some((7, 8, 9, &b"data"[..])));
        assert_eq!(parse_chunk(b"RPSTCK01short"), None);
    }
}
