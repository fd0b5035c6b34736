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

use crate::common::{assert_same, consume_all, free_port, now_ms, send_all, start_tansu, sum_of, tansu_binary};
use rankpulse::config::{Config, TopicFormat};
use rankpulse_testkit::ubi::{UbiTopic, UbiTraffic, ubi_mix};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
const QUERIES: &str = "ubi_queries";
const EVENTS: &str = "ubi_events";
const PARTITIONS: i32 = 4;
/// UBI queries that no impression event completes, in market [`ORPHANED`].
const ORPHANS: u32 = 5;
const ORPHANED: &str = "orphaned";

/// The `"timestamp"` (epoch milliseconds) of a native event.
fn timestamp_of(payload: &[u8]) -> Option<i64> {
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    v.get("timestamp")?.as_i64()
}

/// A daemon reading `topics` on `bootstrap`, in its own consumer group.
async fn consume(bootstrap: &str, topics: &[&str], ordinal_base: u32, total: f64) -> String {
    let mut config = Config::default();
    config.kafka.brokers = bootstrap.to_string();
    config.kafka.group_id = format!("rankpulse-ubi-{}-{}-{ordinal_base}", std::process::id(), topics[0]);
    config.kafka.topics = topics.iter().map(|t| t.to_string()).collect();
    if topics.contains(&QUERIES) {
        config.kafka.formats.insert(QUERIES.into(), TopicFormat::UbiQueries);
        config.kafka.formats.insert(EVENTS.into(), TopicFormat::UbiEvents);
        config.ubi.ordinal_base = ordinal_base;
    }
    consume_all(config, total).await
}

async fn differential(bootstrap: &str, t: &UbiTraffic, ordinal_base: u32) {
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("linger.ms", "5").create().unwrap();
    let native =
        t.native.iter().map(|m| (if m.judgment { JUDGMENTS } else { IMPRESSIONS }, m.key.clone(), m.payload.clone()));
    let native_total = send_all(&producer, native).await as f64;
    // Queries without hit ids whose impression events never come: what
    // they showed is unknown, so they are counted, not scored, and the
    // native twin has no such list. Their own market keeps them apart.
    let first = t.native.iter().find_map(|m| timestamp_of(&m.payload)).expect("a timestamp");
    let orphans: Vec<(&str, String, Vec<u8>)> = (0..ORPHANS)
        .map(|i| {
            let payload = format!(
                r#"{{"application":"shop","query_id":"q-orphan-{i}","client_id":"orphan-{i}","user_query":"lost","query_attributes":{{"ranker":"control","market":"{ORPHANED}"}},"timestamp":{}}}"#,
                first + i64::from(i) * 1_000
            );
            (QUERIES, format!("orphan-{i}"), payload.into_bytes())
        })
        .collect();
    let ubi = t
        .ubi
        .iter()
        .map(|m| (if m.topic == UbiTopic::Queries { QUERIES } else { EVENTS }, m.key.clone(), m.payload.clone()))
        .chain(orphans);
    let ubi_total = send_all(&producer, ubi).await as f64;

    let twin = consume(bootstrap, &[IMPRESSIONS, JUDGMENTS], 0, native_total).await;
    let got = consume(bootstrap, &[QUERIES, EVENTS], ordinal_base, ubi_total).await;

    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h""#) > 200.0, "the lists are there to compare:\n{twin}");
    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h",ranker="unknown""#) > 0.0, "lists without a query");
    let orphaned = format!(r#"market="{ORPHANED}""#);
    let (apart, got): (Vec<&str>, Vec<&str>) = got.lines().partition(|l| l.contains(&orphaned));
    let apart = apart.join("\n");
    let got = got.join("\n");
    assert_eq!(sum_of(&apart, "rankpulse_lists_finalized_total"), f64::from(ORPHANS), "{apart}");
    assert_eq!(
        sum_of(&apart, r#"rankpulse_lists_excluded_total{metric="ndcg",reason="no_results_known""#),
        f64::from(ORPHANS),
        "{apart}"
    );
    assert!(!apart.contains("rankpulse_ndcg{"), "scored as if nothing was shown:\n{apart}");
    assert_same(&twin, &got);
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
#[ignore = "standalone-broker tier: needs RANKPULSE_TANSU, run with --ignored (.ci/run does)"]
async fn ubi_topics_on_a_standalone_broker_equal_their_native_twin() {
    let tansu = tansu_binary();
    let port = free_port();
    let broker = format!("127.0.0.1:{port}");
    let _tansu = start_tansu(&tansu, port, port, &[IMPRESSIONS, JUDGMENTS, QUERIES, EVENTS], PARTITIONS);
    differential(&broker, &traffic(41, 0), 0).await;
}
