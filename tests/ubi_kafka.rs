//! UBI input over a real Kafka protocol path, differentially: the same
//! generated lists produced by a real client once as OpenSearch UBI 1.3
//! queries and events into two UBI topics (`[kafka.formats]`), once as
//! rankpulse's own impressions and judgments, each consumed by its own
//! daemon. The since-start counters and the window gauges (1h: every list
//! is 20 to 40 minutes old, so no window edge moves during the test) of
//! the two must be identical. The UBI lists include lists built only from
//! impression events, 0- and 1-based ordinals (one run each), ISO and
//! epoch times, numeric object ids, null event_attributes, unmapped
//! actions, and events ahead of their query (see `rankpulse_testkit::ubi`).
//!
//! Two tiers: librdkafka's in-process mock cluster (always), and a
//! standalone broker (Tansu, `RANKPULSE_TANSU`, run with `--ignored`).

mod common;

use common::{counter_lines, free_port, http_get, now_ms, start_tansu, sum_of, tansu_binary};
use rankpulse::config::{Config, TopicFormat};
use rankpulse_testkit::ubi::{UbiTopic, UbiTraffic, ubi_mix};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::{Duration, Instant};

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
const QUERIES: &str = "ubi_queries";
const EVENTS: &str = "ubi_events";
const PARTITIONS: i32 = 4;

async fn send_all(producer: &FutureProducer, messages: impl Iterator<Item = (&'static str, String, Vec<u8>)>) -> usize {
    let mut deliveries = Vec::new();
    for (topic, key, payload) in messages {
        let mut record = FutureRecord::to(topic).key(&key).payload(&payload);
        loop {
            match producer.send_result(record) {
                Ok(delivery) => break deliveries.push(delivery),
                Err((_, r)) => {
                    record = r;
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
        }
    }
    let n = deliveries.len();
    for d in deliveries {
        d.await.expect("delivery").expect("produce");
    }
    n
}

/// Runs a daemon on `topics` until it has seen `total` messages, stops it,
/// and returns its final exposition.
async fn consume(bootstrap: &str, topics: &[&str], ordinal_base: u32, total: f64) -> String {
    let mut config = Config::default();
    config.kafka.brokers = bootstrap.to_string();
    config.kafka.group_id = format!("rankpulse-ubi-{}-{}-{ordinal_base}", std::process::id(), topics[0]);
    config.kafka.topics = topics.iter().map(|t| t.to_string()).collect();
    config.kafka.properties.insert("fetch.wait.max.ms".into(), "10".into());
    if topics.contains(&QUERIES) {
        config.kafka.formats.insert(QUERIES.into(), TopicFormat::UbiQueries);
        config.kafka.formats.insert(EVENTS.into(), TopicFormat::UbiEvents);
        config.ubi.ordinal_base = ordinal_base;
    }
    config.validate().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    config.http.listen = addr.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(rankpulse::daemon::run_on(config, listener, async move {
        let _ = stopped.await;
    }));
    // A consumer group may take about 20 s to form on a standalone broker.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let a = addr.clone();
        let body = tokio::task::spawn_blocking(move || http_get(&a, "/metrics")).await.unwrap().map(|r| r.1);
        let body = body.unwrap_or_default();
        let seen = sum_of(&body, "rankpulse_events_total")
            + sum_of(&body, "rankpulse_events_rejected_total")
            + sum_of(&body, "rankpulse_events_ignored_total");
        if seen >= total {
            break;
        }
        assert!(Instant::now() < deadline, "only {seen} of {total} messages consumed:\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stop.send(()).unwrap();
    let summary =
        tokio::time::timeout(Duration::from_secs(20), daemon).await.expect("shutdown within 20 s").unwrap().unwrap();
    assert_eq!(summary.messages as f64, total);
    summary.final_exposition
}

/// What both forms must agree on: the since-start counters of lists and
/// metrics, duplicates and rejects, and the 1h window gauges.
fn compared(exposition: &str) -> Vec<String> {
    let mut lines = counter_lines(exposition);
    lines.extend(
        exposition
            .lines()
            .filter(|l| {
                (l.contains(r#"window="1h""#) && !l.starts_with('#'))
                    || l.starts_with("rankpulse_events_duplicate_total")
                    || l.starts_with("rankpulse_events_rejected_total")
            })
            .map(str::to_string),
    );
    lines.sort();
    lines
}

async fn differential(bootstrap: &str, t: &UbiTraffic, ordinal_base: u32) {
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("linger.ms", "5").create().unwrap();
    let native =
        t.native.iter().map(|m| (if m.judgment { JUDGMENTS } else { IMPRESSIONS }, m.key.clone(), m.payload.clone()));
    let native_total = send_all(&producer, native).await as f64;
    let ubi = t
        .ubi
        .iter()
        .map(|m| (if m.topic == UbiTopic::Queries { QUERIES } else { EVENTS }, m.key.clone(), m.payload.clone()));
    let ubi_total = send_all(&producer, ubi).await as f64;

    let twin = consume(bootstrap, &[IMPRESSIONS, JUDGMENTS], 0, native_total).await;
    let got = consume(bootstrap, &[QUERIES, EVENTS], ordinal_base, ubi_total).await;

    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h""#) > 200.0, "the lists are there to compare:\n{twin}");
    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h",ranker="unknown""#) > 0.0, "lists without a query");
    let (want, have) = (compared(&twin), compared(&got));
    let diff: Vec<_> = want.iter().zip(&have).filter(|(a, b)| a != b).take(5).collect();
    assert!(want == have, "{} vs {} lines; first differences {diff:#?}", want.len(), have.len());
    assert_eq!(sum_of(&got, r#"rankpulse_events_ignored_total{reason="unmapped_action"}"#), t.ignored as f64);
    assert_eq!(sum_of(&got, "rankpulse_events_rejected_total"), 0.0);
}

/// 400 lists from 40 to 20 minutes ago.
fn traffic(seed: u64, ordinal_base: u32) -> UbiTraffic {
    ubi_mix(400, seed, now_ms() - 40 * 60_000, 3_000.0, ordinal_base)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ubi_topics_on_a_mock_cluster_equal_their_native_twin() {
    for ordinal_base in [0, 1] {
        let cluster = MockCluster::new(1).expect("mock cluster");
        for topic in [IMPRESSIONS, JUDGMENTS, QUERIES, EVENTS] {
            cluster.create_topic(topic, PARTITIONS, 1).unwrap();
        }
        differential(&cluster.bootstrap_servers(), &traffic(31 + u64::from(ordinal_base), ordinal_base), ordinal_base)
            .await;
        drop(cluster);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a standalone broker (RANKPULSE_TANSU)"]
async fn ubi_topics_on_a_standalone_broker_equal_their_native_twin() {
    let tansu = tansu_binary();
    let port = free_port();
    let broker = format!("127.0.0.1:{port}");
    let _tansu = start_tansu(&tansu, port, port, &[IMPRESSIONS, JUDGMENTS, QUERIES, EVENTS], PARTITIONS);
    differential(&broker, &traffic(41, 0), 0).await;
}
