//! Checkpoints: the daemon's state and the Kafka offsets it covers.
//!
//! Beside the stream, not in it: every `state.interval` the daemon writes
//! one checkpoint per instance, holding for each partition shard its open
//! (and recently final) lists, its accumulators, its counters and the next
//! offset of every topic it has consumed. Offsets are committed to Kafka
//! only after the checkpoint that covers them is durable.
//!
//! Restoring: an instance reads its own checkpoint at start (its counters
//! go on from there), and when a partition is assigned it takes that
//! partition's open lists from whichever instance's checkpoint got furthest
//! in it — its own after a restart, another instance's after a rebalance.
//! A message below a shard's checkpointed offset is already accounted for
//! and is skipped, so nothing is counted twice and nothing is lost.
//!
//! Where a checkpoint goes is the backend's (`state.backend`): a file per
//! instance in a directory all instances share ([`dir`]), or records in a
//! compacted Kafka topic ([`kafka`]); [`StateStore`] is either, so the
//! daemon's checkpoint and hand-over logic is the same for both. This file
//! holds what they share: the format (header, encoder, reader) and the
//! checks a checkpoint must pass before anything restores from it.

use crate::config::{Config, StateBackend};
use rankpulse_core::accumulate::Accumulators;
use rankpulse_core::assemble::{AssemblerState, DimensionBudget};
use rankpulse_core::pipeline::OpsCounters;
use rankpulse_core::sessions::SessionLedger;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};
use thiserror::Error;
use xxhash_rust::xxh3::xxh3_64;

pub mod dir;
pub mod kafka;

pub use dir::DirStore;
pub use kafka::{InstanceSummary, KafkaStore, ShardSummary};

/// First bytes of a checkpoint; the trailing digits are the format version.
const MAGIC: &[u8; 8] = b"RPCKPT06";
/// Header: magic, payload length (u64 LE), payload checksum (xxh3-64, LE).
const HEADER_LEN: usize = 8 + 8 + 8;
pub const EXTENSION: &str = "ckpt";

/// Where a checkpoint was read from, for errors and logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    File(PathBuf),
    /// An instance's records in the state topic.
    Topic {
        topic: String,
        instance: String,
    },
}

impl StateError {
    /// A failure to reach the store (the state topic's brokers, the
    /// directory's file system) rather than something wrong in it: worth
    /// retrying, not a reason to stop.
    pub fn is_transient(&self) -> bool {
        matches!(self, StateError::Kafka { .. } | StateError::Io { .. })
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Topic { topic, instance } => write!(f, "of instance {instance:?} in state.topic {topic}"),
        }
    }
}

#[derive(Debug, Error)]
pub enum StateError {
    #[error("state.dir {dir}: {cause}")]
    Io { dir: PathBuf, cause: std::io::Error },
    #[error("checkpoint {at} is corrupt: {reason}")]
    Corrupt { at: Origin, reason: String },
    #[error(
        "checkpoint {at} was written with other metric settings ({theirs}; now {ours}); \
         move it away to start from empty state"
    )]
    Incompatible { at: Origin, theirs: String, ours: String },
    #[error("state.instance {instance:?} is already running with state.dir {dir} (lock {lock} is held)")]
    Locked { instance: String, dir: PathBuf, lock: PathBuf },
    #[error("cannot encode checkpoint: {0}")]
    Encode(String),
    /// A client or broker error on the state topic.
    #[error("state.topic {topic}: {cause}")]
    Kafka { topic: String, cause: String },
    #[error(
        "state.topic {topic} has cleanup.policy={policy}: checkpoints need a compacted topic \
         (cleanup.policy=compact), else the broker deletes them by age; name another topic, \
         or alter this one's policy"
    )]
    NotCompacted { topic: String, policy: String },
    #[error(
        "state.topic {topic} has {partitions} partitions: rankpulse keeps a group's checkpoints in one \
         ordered log (1 partition); name another topic"
    )]
    Partitions { topic: String, partitions: usize },
    #[error(
        "checkpoint {at} belongs to consumer group {group:?}, not this one's: give each group \
         its own state.topic"
    )]
    ForeignGroup { at: Origin, group: String },
    #[error(
        "state.instance {instance:?}: another process (writer {writer:016x}) wrote a newer \
         checkpoint to state.topic {topic} under this name; this one stops writing: give each \
         process its own state.instance"
    )]
    Displaced { instance: String, topic: String, writer: u64 },
    /// Partitions this instance still owned in its checkpoint were claimed
    /// in the state topic by a newer owner (see [`kafka`]).
    #[error(
        "state.instance {instance:?}: partitions {partitions:?} were taken over by another instance \
         (a claim in state.topic {topic}); this one has lost them (a zombie): they go back to their \
         checkpoint before the claim, and nothing of them is published or committed"
    )]
    Fenced { instance: String, topic: String, partitions: Vec<i32> },
    #[error("state.topic {topic}: instance {instance:?} is not forgotten: {why}")]
    Forget { instance: String, topic: String, why: String },
}

/// One partition shard as checkpointed.
#[derive(Debug, Serialize, Deserialize)]
pub struct ShardCheckpoint {
    pub partition: i32,
    /// Whether the writer owned the partition when writing.
    pub owned: bool,
    /// Next offset to consume, per topic: everything before is in this state.
    pub offsets: BTreeMap<String, i64>,
    pub assembler: AssemblerState,
    /// The running sums of the sessions whose lists may still come: they
    /// go with the lists (and keys name the assembler's dimension ids).
    pub sessions: SessionLedger,
    /// The core's own types, serialized as they are (their enum keys by
    /// name, see `serde_by_name!`).
    pub accumulators: Accumulators,
    pub counters: OpsCounters,
}

impl ShardCheckpoint {
    /// How far the shard got: a hand-over takes the state that got furthest.
    pub fn progress(&self) -> i64 {
        self.offsets.values().sum()
    }
}

/// A whole instance's checkpoint.
#[derive(Debug, Serialize, Deserialize)]
pub struct Checkpoint {
    /// The settings that shape the state (see [`fingerprint`]).
    pub fingerprint: String,
    pub instance: String,
    pub written_ms: i64,
    pub budget: DimensionBudget,
    pub shards: Vec<ShardCheckpoint>,
}

/// The settings a checkpoint's numbers depend on: restoring under other
/// settings would mix incomparable values, so it is refused.
pub fn fingerprint(config: &Config) -> String {
    format!(
        "cutoffs={:?} labels={:?} bucket_ms={} conventions={:?}",
        config.sorted_cutoffs(),
        config.dimensions.labels,
        config.windows.bucket.ms(),
        config.conventions()
    )
}

/// The largest count a checkpoint may hold: 2^48 (2.8·10^14, nine years of
/// a million events a second). Counts are added to with `+=` and summed over
/// shards and instances, so anything larger can only come from a corrupt or
/// crafted file, and taking it would let a later addition overflow.
pub const MAX_COUNT: u64 = 1 << 48;

fn plausible(n: i64, what: &str) -> Result<(), String> {
    if n.unsigned_abs() > MAX_COUNT {
        return Err(format!("{what} of {n} is beyond any real stream (at most 2^48)"));
    }
    Ok(())
}

fn plausible_unsigned(n: u64, what: &str) -> Result<(), String> {
    if n > MAX_COUNT {
        return Err(format!("{what} of {n} is beyond any real stream (at most 2^48)"));
    }
    Ok(())
}

/// Refuses a shard whose plain counts no stream can reach. The moments
/// themselves wrap (see [`rankpulse_core::accumulate::Moments`]) and need no check.
fn check_counts(shard: &ShardCheckpoint) -> Result<(), String> {
    for series in shard.accumulators.series.values() {
        for n in series.excluded.values() {
            plausible(*n, "an exclusion count")?;
        }
        for n in series.no_relevant.values() {
            plausible(*n, "a no-relevant count")?;
        }
    }
    let c = &shard.counters;
    let keyed = c.events.values().chain(c.rejected.values()).chain(c.ignored.values());
    let keyed = keyed.chain(c.duplicates.values()).chain(c.dimension_overflow.values());
    let single = [c.orphans, c.evicted, c.late_amended, c.late_dropped, c.combination_overflow, c.sessions_evicted];
    for n in keyed.copied().chain(single) {
        plausible_unsigned(n, "a counter")?;
    }
    Ok(())
}

/// Where this process keeps its checkpoints: `state.backend`'s store.
/// Both take the same calls, so the daemon's checkpoint and hand-over
/// logic does not know which it has.
#[derive(Debug)]
pub enum StateStore {
    Dir(DirStore),
    Kafka(Box<KafkaStore>),
}

impl StateStore {
    /// Opens the configured backend's store (the caller checks that
    /// checkpoints are on, [`crate::config::StateConfig::enabled`]): takes
    /// this instance's lock in `state.dir`, or creates (or checks) the
    /// state topic and reads this instance's records.
    pub fn open(config: &Config) -> Result<StateStore, StateError> {
        Ok(match config.state.backend {
            StateBackend::Dir => StateStore::Dir(DirStore::open(config)?),
            StateBackend::Kafka => StateStore::Kafka(Box::new(KafkaStore::open(config)?)),
        })
    }

    pub fn instance(&self) -> &str {
        match self {
            StateStore::Dir(s) => &s.instance,
            StateStore::Kafka(s) => s.instance(),
        }
    }

    pub fn fingerprint(&self) -> &str {
        match self {
            StateStore::Dir(s) => s.fingerprint(),
            StateStore::Kafka(s) => s.fingerprint(),
        }
    }

    /// Where this instance's checkpoint goes, for logs.
    pub fn location(&self) -> String {
        match self {
            StateStore::Dir(s) => s.path().display().to_string(),
            StateStore::Kafka(s) => format!("state.topic {} (instance {:?})", s.topic(), s.instance()),
        }
    }

    /// This instance's last checkpoint, if any.
    pub fn load_own(&self) -> Result<Option<Checkpoint>, StateError> {
        match self {
            StateStore::Dir(s) => s.load_own(),
            StateStore::Kafka(s) => s.load_own(),
        }
    }

    /// Every compatible checkpoint of the group (this instance's included);
    /// unreadable or incompatible ones are reported and skipped.
    pub fn load_all(&self) -> Vec<Checkpoint> {
        match self {
            StateStore::Dir(s) => s.load_all(),
            StateStore::Kafka(s) => s.load_all(),
        }
    }

    /// Takes `partitions` over (the Kafka store claims them first, which
    /// fences their former owners): per partition, the shard to restore,
    /// the one that got furthest (with the Kafka store: of the latest
    /// owner's, no zombie's). A claim that could not be written: an error.
    pub fn hand_over(&self, partitions: &BTreeSet<i32>) -> Result<BTreeMap<i32, ShardCheckpoint>, StateError> {
        match self {
            StateStore::Dir(s) => {
                let mut best: BTreeMap<i32, ShardCheckpoint> = BTreeMap::new();
                for c in s.load_all() {
                    for s in c.shards {
                        if partitions.contains(&s.partition)
                            && best.get(&s.partition).is_none_or(|b| s.progress() > b.progress())
                        {
                            best.insert(s.partition, s);
                        }
                    }
                }
                Ok(best)
            }
            StateStore::Kafka(s) => s.hand_over(partitions),
        }
    }

    /// Makes `checkpoint` durable; returns its encoded size. Only once it
    /// returns may the offsets it covers be committed.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<usize, StateError> {
        match self {
            StateStore::Dir(s) => s.write(checkpoint),
            StateStore::Kafka(s) => s.write(checkpoint),
        }
    }

    /// Whether this process may still write as its instance: the Kafka
    /// store stops once another process wrote under the same name (the dir
    /// store's lock refuses the second process at start instead).
    pub fn still_ours(&self) -> Result<(), StateError> {
        match self {
            StateStore::Dir(_) => Ok(()),
            StateStore::Kafka(s) => s.still_ours(),
        }
    }
}

/// A checkpoint as stored: header (magic, payload length, payload
/// checksum), then the postcard payload. A file holds exactly this; the
/// state topic holds it in chunks.
pub fn encode(checkpoint: &Checkpoint) -> Result<Vec<u8>, StateError> {
    let payload = postcard::to_stdvec(checkpoint).map_err(|e| StateError::Encode(e.to_string()))?;
    let mut bytes = Vec::with_capacity(HEADER_LEN + payload.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&xxh3_64(&payload).to_le_bytes());
    bytes.extend_from_slice(&payload);
    Ok(bytes)
}

/// Verifies and decodes what [`encode`] made, read from `at`.
pub fn parse(bytes: &[u8], at: &Origin) -> Result<Checkpoint, StateError> {
    let corrupt = |reason: &str| StateError::Corrupt { at: at.clone(), reason: reason.to_string() };
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return Err(corrupt("not a rankpulse checkpoint (or another format version)"));
    }
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[8..16]);
    let mut sum = [0u8; 8];
    sum.copy_from_slice(&bytes[16..24]);
    let payload = &bytes[HEADER_LEN..];
    if u64::from_le_bytes(len) != payload.len() as u64 {
        return Err(corrupt("truncated"));
    }
    if u64::from_le_bytes(sum) != xxh3_64(payload) {
        return Err(corrupt("checksum mismatch"));
    }
    decode(payload).map_err(|e| corrupt(&e))
}

/// Reads and verifies one checkpoint file.
pub fn read(path: &Path) -> Result<Checkpoint, StateError> {
    let bytes = std::fs::read(path).map_err(|cause| StateError::Io { dir: path.to_path_buf(), cause })?;
    parse(&bytes, &Origin::File(path.to_path_buf()))
}

/// Decodes a checkpoint's payload (what follows the header). Public for the
/// `checkpoint` fuzz target: no bytes on disk may panic the process.
pub fn decode(payload: &[u8]) -> Result<Checkpoint, String> {
    let checkpoint: Checkpoint = postcard::from_bytes(payload).map_err(|e| e.to_string())?;
    for shard in &checkpoint.shards {
        check_counts(shard).map_err(|e| format!("partition {}: {e}", shard.partition))?;
    }
    Ok(checkpoint)
}

/// `state.instance`, else the host name, else "rankpulse".
pub fn instance_name(config: &Config) -> String {
    if !config.state.instance.is_empty() {
        return config.state.instance.clone();
    }
    // The kernel's host name first: `HOSTNAME` is a shell variable that
    // many environments do not export, and a minimal container may have no
    // /etc/hostname; two instances both named "rankpulse" would fence each
    // other.
    first_host_name([host_name(), std::env::var("HOSTNAME").ok(), std::fs::read_to_string("/etc/hostname").ok()])
}

/// The first of `candidates` (in order of trust) that can name a file,
/// else "rankpulse".
fn first_host_name(candidates: [Option<String>; 3]) -> String {
    candidates
        .into_iter()
        .flatten()
        .map(|h| h.trim().to_string())
        .find(|h| !h.is_empty() && !h.contains('/') && !h.starts_with('.'))
        .unwrap_or_else(|| "rankpulse".to_string())
}

/// gethostname(2), when it answers with UTF-8.
fn host_name() -> Option<String> {
    let mut buf = [0u8; 256];
    // SAFETY: the buffer is writable for its whole length, which is what
    // gethostname is told; it writes at most that many bytes.
    let rc = unsafe { libc::gethostname(buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..end].to_vec()).ok()
}

#[cfg(test)]
mod tests {
    /// An empty `state.instance` is the kernel's host name (what `uname
    /// -n` prints), whether or not `HOSTNAME` is exported.
    #[test]
    fn an_empty_instance_is_the_host_name() {
        let mut config = crate::config::Config::default();
        config.state.instance = "a".into();
        assert_eq!(super::instance_name(&config), "a");
        config.state.instance = String::new();
        let kernel = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        assert_eq!(super::instance_name(&config), kernel.trim());
        // The kernel's name before HOSTNAME and /etc/hostname; each skipped
        // when it cannot name a file; "rankpulse" only when none can.
        let some = |s: &str| Some(s.to_string());
        assert_eq!(super::first_host_name([some("k"), some("env"), some("file\n")]), "k");
        assert_eq!(super::first_host_name([None, some("env"), some("file\n")]), "env");
        assert_eq!(super::first_host_name([some(""), some("a/b"), some("file\n")]), "file");
        assert_eq!(super::first_host_name([None, some(".x"), None]), "rankpulse");
    }

    /// A list goes into its time bucket only; the totals, derived from the
    /// buckets, must still be what folding every list into a total cell
    /// gives: first values only (late amendments change the buckets, not
    /// the totals), through pruning, merging shards and a checkpoint's
    /// round trip. The reference applies every list to cells directly.
    #[test]
    fn totals_keep_first_values_through_amendments_pruning_merging_and_restoring() {
        use rankpulse_core::accumulate::{Accumulators, BucketRange, Cell};
        use rankpulse_core::metrics::list::ListScore;
        use std::collections::BTreeMap;
        use std::sync::Arc;
        let cutoffs = 2;
        let bucket_ms = 10_000;
        let dims: Arc<[String]> = vec!["control".to_string()].into();
        let mut rng = rankpulse_testkit::Rng::new(9);
        let score = |rng: &mut rankpulse_testkit::Rng| {
            let mut s = ListScore::new(cutoffs);
            for v in s.values.iter_mut() {
                *v = (rng.below(5) > 0).then(|| (rng.below(1_000_001) as f64) / 1e6 / 3.0);
            }
            s.gauc = (rng.below(3) > 0).then(|| (rng.below(1001) as f64 / 1000.0, 1 + rng.below(20) as u32));
            s
        };
        // Two shards, merged at the end; one goes through a checkpoint midway.
        let (mut now, keep) = (0i64, 50_000);
        let mut shards = [Accumulators::new(cutoffs, bucket_ms), Accumulators::new(cutoffs, bucket_ms)];
        for acc in shards.iter_mut() {
            acc.range = BucketRange::new(keep, 0);
            acc.set_now(now);
        }
        let mut total = Cell::new(cutoffs);
        let mut buckets: BTreeMap<i64, Cell> = BTreeMap::new();
        let mut amended_after_pruning = 0;
        let mut restored = false;
        let mut folded: Vec<(usize, i64, ListScore)> = Vec::new();
        for step in 0..3_000 {
            let shard = rng.below(2) as usize;
            match rng.below(10) {
                0..=6 => {
                    let t = now - rng.below(40_000) as i64;
                    let s = score(&mut rng);
                    shards[shard].fold(&dims, t, &s);
                    total.apply(&s, 1);
                    buckets.entry(t.div_euclid(bucket_ms)).or_insert_with(|| Cell::new(cutoffs)).apply(&s, 1);
                    folded.push((shard, t, s));
                }
                7 | 8 if !folded.is_empty() => {
                    // A late judgment: the list's old values out, new ones in.
                    let i = rng.below(folded.len() as u64) as usize;
                    let (shard, t, old) = folded[i].clone();
                    let new = score(&mut rng);
                    shards[shard].amend_window(&dims, t, &old, -1);
                    shards[shard].amend_window(&dims, t, &new, 1);
                    if t.div_euclid(bucket_ms) < shards[shard].bucket_of(now - keep) - 1 {
                        // No window holds the list any more: the amendment
                        // changes nothing, and no bucket comes back.
                        amended_after_pruning += 1;
                    } else {
                        let cell = buckets.entry(t.div_euclid(bucket_ms)).or_insert_with(|| Cell::new(cutoffs));
                        cell.apply(&old, -1);
                        cell.apply(&new, 1);
                    }
                    folded[i].2 = new;
                }
                _ => {
                    now += rng.below(20_000) as i64;
                    for acc in shards.iter_mut() {
                        acc.prune(now);
                    }
                    buckets = buckets.split_off(&(shards[0].bucket_of(now - keep) - 1));
                }
            }
            // Midway, with amendments in live buckets (what the
            // checkpoint does not keep apart from the totals).
            if !restored && step >= 1_500 && shards[0].series.get(&dims).is_some_and(|s| !s.amended.is_empty()) {
                restored = true;
                let bytes = postcard::to_stdvec(&shards[0]).unwrap();
                let mut restored: Accumulators = postcard::from_bytes(&bytes).unwrap();
                restored.range = shards[0].range;
                assert_eq!(restored, shards[0]);
                shards[0] = restored;
            }
        }
        let mut merged = Accumulators::new(cutoffs, bucket_ms);
        for acc in &shards {
            merged.merge(acc);
        }
        let series = &merged.series[&dims];
        assert_eq!(series.total(), total);
        assert_eq!(series.lists(), total.lists);
        assert_eq!(series.buckets, buckets.into_iter().map(|(b, c)| (b, Arc::new(c))).collect());
        assert!(amended_after_pruning > 10 && restored, "{amended_after_pruning} {restored}");
    }
    use super::*;
    use rankpulse_core::pipeline::Pipeline;

    fn config(dir: &Path, instance: &str) -> Config {
        let mut c = Config::default();
        c.state.dir = dir.display().to_string();
        c.state.instance = instance.to_string();
        c
    }

    fn events() -> Vec<String> {
        let mut out = Vec::new();
        for s in 0..40 {
            out.push(format!(
                r#"{{"type":"impression","event_id":"i{s}","session_id":"s{s}","timestamp":{},"results":[{{"doc_id":"a","position":1,"score":2}},{{"doc_id":"b","position":2,"score":1}}],"dimensions":{{"ranker":"r{}"}}}}"#,
                1_000 * s,
                s % 3
            ));
            out.push(format!(
                r#"{{"type":"judgment","event_id":"j{s}","session_id":"s{s}","doc_id":"{}","grade":{},"timestamp":{}}}"#,
                if s % 2 == 0 { "a" } else { "b" },
                s % 4,
                1_000 * s + 500
            ));
        }
        out
    }

    fn shard_checkpoint(p: &Pipeline) -> ShardCheckpoint {
        ShardCheckpoint {
            partition: 0,
            owned: true,
            offsets: BTreeMap::from([("t".to_string(), 7)]),
            assembler: p.assembler().state(),
            sessions: p.sessions().clone(),
            accumulators: p.accumulators().clone(),
            counters: p.counters().clone(),
        }
    }

    /// A pipeline checkpointed half way and restored gives exactly the
    /// result of one that never stopped.
    #[test]
    fn restore_midway_equals_uninterrupted() {
        let dir = std::env::temp_dir().join(format!("rankpulse-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = config(&dir, "a");
        let evs = events();
        let mut whole = Pipeline::new(&cfg.pipeline_settings());
        for e in &evs {
            let _ = whole.ingest("t", e.as_bytes(), rankpulse_core::pipeline::Clock::replay(), None);
        }
        whole.finalize_all();

        let store = DirStore::open(&cfg).unwrap();
        let mut first = Pipeline::new(&cfg.pipeline_settings());
        for e in &evs[..37] {
            let _ = first.ingest("t", e.as_bytes(), rankpulse_core::pipeline::Clock::replay(), None);
        }
        let budget = std::mem::take(&mut *first.budget().lock().unwrap());
        let written = Checkpoint {
            fingerprint: fingerprint(&cfg),
            instance: "a".into(),
            written_ms: 1,
            budget,
            shards: vec![shard_checkpoint(&first)],
        };
        store.write(&written).unwrap();
        drop(first);

        let restored = store.load_own().unwrap().unwrap();
        assert_eq!(restored.shards[0].offsets["t"], 7);
        let mut second = Pipeline::new(&cfg.pipeline_settings());
        let shard = restored.shards.into_iter().next().unwrap();
        let sums = (shard.accumulators, shard.counters);
        second.restore(shard.assembler, shard.sessions, Some(sums));
        for e in &evs[37..] {
            let _ = second.ingest("t", e.as_bytes(), rankpulse_core::pipeline::Clock::replay(), None);
        }
        second.finalize_all();
        assert_eq!(second.accumulators(), whole.accumulators());
        assert_eq!(second.counters(), whole.counters());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn corrupt_locked_and_incompatible_checkpoints_are_refused() {
        let dir = std::env::temp_dir().join(format!("rankpulse-state-bad-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = config(&dir, "b");
        let store = DirStore::open(&cfg).unwrap();
        assert!(matches!(DirStore::open(&cfg), Err(StateError::Locked { .. })));
        let c = Checkpoint {
            fingerprint: fingerprint(&cfg),
            instance: "b".into(),
            written_ms: 0,
            budget: DimensionBudget::default(),
            shards: vec![],
        };
        store.write(&c).unwrap();
        let mut bytes = std::fs::read(store.path()).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(store.path(), &bytes).unwrap();
        assert!(matches!(store.load_own(), Err(StateError::Corrupt { .. })));
        let mut other = cfg.clone();
        other.metrics.cutoffs = vec![1, 2];
        store.write(&Checkpoint { fingerprint: fingerprint(&other), ..c }).unwrap();
        let err = store.load_own().unwrap_err();
        assert!(matches!(err, StateError::Incompatible { .. }), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Numbers no stream can produce, as a corrupt or crafted checkpoint may
    /// hold them: a counter or an exclusion count past 2^48 is refused, and
    /// moments whose totals overflow decode and add up without panicking
    /// (found by the `checkpoint` fuzz target; that half can only fail
    /// where overflow checks are on: `cargo test` without `--release`, and
    /// the fuzz build).
    #[test]
    fn absurd_numbers_are_refused_or_wrap() {
        use rankpulse_core::accumulate::{Cell, Exclusion, Mean, Series};
        use rankpulse_core::metrics::list::Family;
        use std::sync::Arc;
        let shard = |accumulators: Accumulators, counters: OpsCounters| ShardCheckpoint {
            partition: 3,
            owned: true,
            offsets: BTreeMap::new(),
            assembler: Pipeline::new(&Config::default().pipeline_settings()).assembler().state(),
            sessions: SessionLedger::default(),
            accumulators,
            counters,
        };
        let round_trip = |shard: ShardCheckpoint| {
            let c = Checkpoint {
                fingerprint: String::new(),
                instance: "x".into(),
                written_ms: 0,
                budget: DimensionBudget::default(),
                shards: vec![shard],
            };
            decode(&postcard::to_stdvec(&c).unwrap())
        };
        let counters = OpsCounters { orphans: MAX_COUNT + 1, ..OpsCounters::default() };
        let e = round_trip(shard(Accumulators::new(1, 10_000), counters)).unwrap_err();
        assert!(e.contains("partition 3: a counter of 281474976710657 is beyond any real stream"), "{e}");

        let mut excluded = Series::default();
        excluded.excluded.insert((Mean::Family(Family::Ndcg), Exclusion::NoRelevant), -(1 << 50));
        let mut acc = Accumulators::new(1, 10_000);
        acc.series.insert(Arc::from(Vec::new()), Arc::new(excluded));
        let e = round_trip(shard(acc, OpsCounters::default())).unwrap_err();
        assert!(e.contains("an exclusion count"), "{e}");

        let mut total = Cell::new(1);
        total.metrics[0].sum = i128::MIN;
        let mut bucket = Cell::new(1);
        bucket.metrics[0].sum = 1;
        let mut acc = Accumulators::new(1, 10_000);
        let series = Series::restored(total.clone(), BTreeMap::from([(0, Arc::new(bucket))]));
        acc.series.insert(Arc::from(Vec::new()), Arc::new(series));
        let restored = round_trip(shard(acc, OpsCounters::default())).unwrap();
        assert_eq!(restored.shards[0].accumulators.series.values().next().unwrap().total(), total);
    }
}
