//! `rankpulse-bench bare`: the baseline a user would write, a process of its
//! own: rdkafka reading both topics (same settings as `rankpulse run`: its
//! defaults and the `[kafka.properties]` of the RANKPULSE__* environment)
//! and serde_json decoding every message into a typed struct, nothing more
//! (`--decode native`, rankpulse's events; `ubi`, OpenSearch UBI queries and
//! events), or not decoding at all (`none`: the client library's own cost,
//! the floor under any reader of the same messages).
//! It prints one JSON line: when its first and last message came (Unix ms),
//! how many, and the p99 delay from their Kafka timestamps.

use rankpulse::config::Config;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// An event as a user's consumer would type it (both kinds in one struct).
#[derive(Deserialize)]
#[allow(dead_code)]
struct Event<'a> {
    #[serde(rename = "type")]
    kind: &'a str,
    event_id: &'a str,
    session_id: &'a str,
    query_id: &'a str,
    timestamp: i64,
    #[serde(default, borrow)]
    results: Vec<Shown<'a>>,
    #[serde(default, borrow)]
    dimensions: BTreeMap<&'a str, &'a str>,
    doc_id: Option<&'a str>,
    action: Option<&'a str>,
    grade: Option<f64>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct Shown<'a> {
    doc_id: &'a str,
    position: u32,
    score: Option<f64>,
}

/// A UBI query or event as a user's consumer would type it (both kinds in
/// one struct; ids and times are text or numbers in the wild).
#[derive(Deserialize)]
#[allow(dead_code)]
struct UbiEvent<'a> {
    action_name: Option<&'a str>,
    application: Option<&'a str>,
    query_id: Option<&'a str>,
    client_id: Option<&'a str>,
    session_id: Option<&'a str>,
    user_query: Option<&'a str>,
    timestamp: UbiScalar<'a>,
    #[serde(default, borrow)]
    query_attributes: Option<BTreeMap<&'a str, serde::de::IgnoredAny>>,
    #[serde(default, borrow)]
    query_response_hit_ids: Option<Vec<UbiScalar<'a>>>,
    #[serde(default, borrow)]
    event_attributes: Option<UbiAttributes<'a>>,
}

#[derive(Deserialize)]
#[serde(untagged)]
#[allow(dead_code)]
enum UbiScalar<'a> {
    Text(&'a str),
    Number(i64),
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct UbiAttributes<'a> {
    #[serde(default, borrow)]
    object: Option<UbiObject<'a>>,
    #[serde(default)]
    position: Option<UbiPosition>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct UbiObject<'a> {
    #[serde(borrow)]
    object_id: UbiScalar<'a>,
}

#[derive(Deserialize)]
#[allow(dead_code)]
struct UbiPosition {
    ordinal: Option<i64>,
}

/// What the bare consumer does with each message it reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Decode {
    /// Into [`Event`], rankpulse's own events typed.
    Native,
    /// Into [`UbiEvent`].
    Ubi,
    /// Nothing: only the payload's length is read.
    None,
}

/// Consumes `messages` messages, then reports. After the last one it waits
/// a moment before exiting, so that a sampler of its CPU reads it past
/// its last message.
pub fn run(messages: u64, delays: bool, decode: Decode) -> anyhow::Result<()> {
    let config = Config::load(None)?;
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &config.kafka.brokers)
        .set("group.id", &config.kafka.group_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    for (key, value) in rankpulse::kafka::CONSUMER_DEFAULTS {
        cc.set(*key, *value);
    }
    for (key, value) in &config.kafka.properties {
        cc.set(key, value);
    }
    let consumer: BaseConsumer = cc.create()?;
    let topics: Vec<&str> = config.kafka.topics.iter().map(String::as_str).collect();
    consumer.subscribe(&topics)?;
    let deadline = Instant::now() + Duration::from_secs(900);
    let (mut seen, mut decoded) = (0u64, 0u64);
    let mut first_ms = None;
    let record_delays = delays;
    let mut delays: Vec<i64> = Vec::new();
    while seen < messages {
        let Some(polled) = consumer.poll(Duration::from_millis(100)) else {
            anyhow::ensure!(Instant::now() < deadline, "only {seen} of {messages} messages in 900 s");
            continue;
        };
        let m = polled?;
        // The clock is read per message only where delays are asked for.
        if first_ms.is_none() {
            first_ms = Some(crate::process::unix_ms());
        }
        seen += 1;
        if record_delays && let Some(ts) = m.timestamp().to_millis() {
            delays.push(crate::process::unix_ms() - ts);
        }
        let payload = m.payload().unwrap_or(b"");
        let ok = match decode {
            Decode::Native => serde_json::from_slice::<Event>(payload).is_ok(),
            Decode::Ubi => serde_json::from_slice::<UbiEvent>(payload).is_ok(),
            Decode::None => std::hint::black_box(payload.len()) > 0,
        };
        decoded += u64::from(ok);
    }
    let last_ms = crate::process::unix_ms();
    delays.sort_unstable();
    let p99 = delays.get((delays.len() * 99 / 100).min(delays.len().saturating_sub(1))).copied();
    // The daemon's p99 is read from its histogram (`DELAY_BUCKETS`,
    // interpolated within a bucket): the bare consumer's is also given
    // that way, so that the two compare like with like.
    let mut buckets: Vec<(f64, f64)> =
        rankpulse::health::DELAY_BUCKETS.iter().map(|&le| (le, 0.0)).chain([(f64::INFINITY, 0.0)]).collect();
    for d in &delays {
        let s = *d as f64 / 1000.0;
        for (le, count) in buckets.iter_mut() {
            if s <= *le {
                *count += 1.0;
            }
        }
    }
    let p99_bucketed =
        (!delays.is_empty()).then(|| crate::shapes::quantile_of_buckets(&buckets, 0.99).map(|s| s * 1000.0)).flatten();
    println!(
        "{}",
        serde_json::json!({
            "first_ms": first_ms,
            "last_ms": last_ms,
            "messages": seen,
            "decoded": decoded,
            "p99_delay_ms": p99,
            "p99_delay_ms_bucketed": p99_bucketed,
        })
    );
    std::thread::sleep(Duration::from_millis(100));
    Ok(())
}
