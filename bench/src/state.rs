//! What checkpoints cost (`rankpulse-bench state`): one checkpoint of
//! `--lists` open lists (an impression of 10 results and 3 judgments each,
//! the seeded mix, over 4 partition shards), written `--writes` times and
//! restored through `state.backend = "kafka"` on the broker at
//! `--brokers`, and through `state.dir` (a temporary directory) for
//! comparison. Restores are timed after two writes (both slots full: what a
//! compacted topic holds) and after all of them (what a topic that is not
//! compacted yet holds: Tansu never compacts).

use rankpulse::config::{Config, StateBackend};
use rankpulse::state::{Checkpoint, ShardCheckpoint, StateStore, encode, fingerprint};
use rankpulse_core::assemble::Source;
use rankpulse_core::pipeline::{Clock, Pipeline};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

const PARTITIONS: usize = 4;
const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";

pub struct Options {
    pub brokers: String,
    pub lists: usize,
    pub writes: usize,
    pub seed: u64,
}

/// The checkpoint: every list still open (a gap of an hour).
fn checkpoint(config: &Config, lists: usize, seed: u64) -> Checkpoint {
    let mut config = config.clone();
    config.session.gap = "1h".parse().unwrap_or(config.session.gap);
    let mut shards: Vec<Pipeline> = (0..PARTITIONS).map(|_| Pipeline::new(&config.pipeline_settings())).collect();
    let mut offsets = vec![[0i64; 2]; PARTITIONS];
    let chunk = 1_000;
    let mut done = 0;
    while done < lists {
        let n = chunk.min(lists - done);
        for m in rankpulse_testkit::mix(done, n, seed, 1_763_780_000_000, 0.01) {
            let p = (xxhash_rust::xxh3::xxh3_64(m.key.as_bytes()) % PARTITIONS as u64) as usize;
            let (topic, id) = if m.judgment { (JUDGMENTS, 1) } else { (IMPRESSIONS, 0) };
            let offset = offsets[p][id];
            offsets[p][id] += 1;
            let source = Source { id: id as u32, offset };
            let _ = shards[p].ingest(topic, &m.payload, Clock::replay(), Some(source));
        }
        done += n;
    }
    let budget = shards[0].budget().lock().map(|b| b.clone()).unwrap_or_default();
    Checkpoint {
        fingerprint: fingerprint(&config),
        instance: "bench".into(),
        written_ms: 1,
        budget,
        shards: shards
            .iter()
            .zip(&offsets)
            .enumerate()
            .map(|(p, (pipeline, o))| ShardCheckpoint {
                partition: p as i32,
                owned: true,
                offsets: BTreeMap::from([(IMPRESSIONS.to_string(), o[0]), (JUDGMENTS.to_string(), o[1])]),
                assembler: pipeline.assembler().state(),
                sessions: pipeline.sessions().clone(),
                accumulators: pipeline.accumulators().clone(),
                counters: pipeline.counters().clone(),
            })
            .collect(),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / 1_048_576.0
}

/// Median, min and max in ms.
fn spread(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    match (v.first(), v.last()) {
        (Some(min), Some(max)) => format!("median {:.0} ms (min {min:.0}, max {max:.0})", v[v.len() / 2]),
        _ => "none".into(),
    }
}

/// Records and bytes (keys and values) in `topic`'s partition 0.
fn topic_size(brokers: &str, topic: &str) -> anyhow::Result<(i64, u64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("group.id", "rankpulse-bench-state-size")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()?;
    let (low, high) = consumer.fetch_watermarks(topic, 0, Duration::from_secs(10))?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(low))?;
    consumer.assign(&tpl)?;
    let (mut records, mut bytes) = (0i64, 0u64);
    let deadline = Instant::now() + Duration::from_secs(120);
    while records < high - low && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            records += 1;
            bytes += (m.key().map_or(0, <[u8]>::len) + m.payload().map_or(0, <[u8]>::len)) as u64;
            if m.offset() + 1 >= high {
                break;
            }
        }
    }
    Ok((high - low, bytes))
}

/// Opens a store as a restarted process would and reads its checkpoint
/// back: (open ms, load_own ms, load_all ms).
fn restore(config: &Config) -> anyhow::Result<(f64, f64, f64)> {
    let started = Instant::now();
    let store = StateStore::open(config)?;
    let open = ms(started.elapsed());
    let started = Instant::now();
    let own = store.load_own()?.ok_or_else(|| anyhow::anyhow!("no checkpoint restored"))?;
    let load_own = ms(started.elapsed());
    let started = Instant::now();
    let all = store.load_all();
    let load_all = ms(started.elapsed());
    anyhow::ensure!(all.len() == 1 && own.shards.len() == PARTITIONS, "restored {} checkpoints", all.len());
    Ok((open, load_own, load_all))
}

pub fn run(config: &Config, opts: &Options) -> anyhow::Result<String> {
    let mut out = String::new();
    let started = Instant::now();
    let c = checkpoint(config, opts.lists, opts.seed);
    let open_lists: usize = c.shards.iter().map(|s| s.assembler.open_lists.len()).sum();
    eprintln!("built the checkpoint in {:.1} s", started.elapsed().as_secs_f64());
    let mut encodes = Vec::new();
    let mut size = 0;
    for _ in 0..3 {
        let started = Instant::now();
        size = encode(&c)?.len();
        encodes.push(ms(started.elapsed()));
    }
    writeln!(
        out,
        "checkpoint: {open_lists} open lists in {PARTITIONS} shards, {:.1} MiB encoded; encoding {}",
        mib(size as u64),
        spread(encodes)
    )?;

    let mut kafka = config.clone();
    kafka.kafka.brokers = opts.brokers.clone();
    kafka.state.backend = StateBackend::Kafka;
    kafka.state.topic = format!("rankpulse-state-bench-{}", std::process::id());
    kafka.state.instance = "bench".into();
    kafka.validate()?;
    let started = Instant::now();
    let store = StateStore::open(&kafka)?;
    writeln!(out, "kafka: topic {} created and opened in {:.0} ms", kafka.state.topic, ms(started.elapsed()))?;
    let mut writes = Vec::new();
    for n in 1..=opts.writes.max(2) {
        let started = Instant::now();
        store.write(&c)?;
        writes.push(ms(started.elapsed()));
        if n == 2 || n == opts.writes.max(2) {
            let (records, bytes) = topic_size(&opts.brokers, &kafka.state.topic)?;
            let (open, own, all) = restore(&kafka)?;
            writeln!(
                out,
                "kafka after {n} writes: topic {records} records, {:.1} MiB; restore: open (topic check, read \
                 to the end) {open:.0} ms + load_own {own:.0} ms; load_all (hand-over) {all:.0} ms",
                mib(bytes)
            )?;
        }
    }
    let mean: f64 = writes.iter().sum::<f64>() / writes.len() as f64;
    writeln!(
        out,
        "kafka write (encode, produce, every record acknowledged): {}, {:.0} MiB/s",
        spread(writes),
        mib(size as u64) / (mean / 1000.0)
    )?;
    drop(store);
    // Last: its claims fence the writer above.
    let mut peer = kafka.clone();
    peer.state.instance = "bench-peer".into();
    let store = StateStore::open(&peer)?;
    let started = Instant::now();
    let found = store.hand_over(&(0..PARTITIONS as i32).collect())?;
    let hand_over = ms(started.elapsed());
    anyhow::ensure!(found.len() == PARTITIONS, "handed over {} partitions", found.len());
    writeln!(
        out,
        "kafka hand-over of {PARTITIONS} partitions by another instance (claims acknowledged, topic read, \
         restore points picked) after {} writes: {hand_over:.0} ms",
        opts.writes.max(2)
    )?;
    drop(store);

    let dir = std::env::temp_dir().join(format!("rankpulse-bench-state-{}", std::process::id()));
    let mut files = config.clone();
    files.state.dir = dir.display().to_string();
    files.state.instance = "bench".into();
    let store = StateStore::open(&files)?;
    let mut writes = Vec::new();
    for _ in 0..opts.writes.max(2) {
        let started = Instant::now();
        store.write(&c)?;
        writes.push(ms(started.elapsed()));
    }
    drop(store);
    let (open, own, all) = restore(&files)?;
    writeln!(
        out,
        "dir write (encode, write, fsync, rename): {}; restore: open {open:.0} ms + load_own {own:.0} ms; \
         load_all {all:.0} ms",
        spread(writes)
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(out)
}
