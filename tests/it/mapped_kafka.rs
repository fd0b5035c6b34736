//! `mapped` input over a real Kafka protocol path, differentially: the
//! same generated lists produced by a real client once rewritten in an
//! invented schema into two mapped topics (`hits`, `clicks`, read by
//! testkit's `MAPPING_TOML`), once as rankpulse's own impressions and
//! judgments, each consumed by its own daemon on librdkafka's in-process
//! mock cluster. The since-start counters and the 1h window gauges (every
//! list is 20 to 40 minutes old, so no window edge moves during the test)
//! must be identical.

use crate::common::{assert_same, consume_all, now_ms, send_all, sum_of};
use rankpulse::config::{Config, TopicFormat};
use rankpulse_testkit::MixMessage;
use rankpulse_testkit::mapped::{MAPPING_TOML, mapped_twin};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::FutureProducer;

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
const HITS: &str = "hits";
const CLICKS: &str = "clicks";
const PARTITIONS: i32 = 4;

/// The configuration of the shipped example mapping, from its TOML.
fn mapped_config() -> Config {
    let path = std::env::temp_dir().join(format!("rankpulse-mapped-kafka-{}.toml", std::process::id()));
    std::fs::write(&path, MAPPING_TOML).unwrap();
    let config = Config::load_with_env(Some(&path), Vec::new());
    let _ = std::fs::remove_file(&path);
    let config = config.unwrap();
    assert_eq!(config.kafka.formats.get(HITS), Some(&TopicFormat::Mapped));
    assert_eq!(config.kafka.formats.get(CLICKS), Some(&TopicFormat::Mapped));
    config
}

/// The messages of `messages` as (topic, key, payload), impressions to
/// `topics[0]` and judgments to `topics[1]`.
fn routed<'a>(messages: &'a [MixMessage], topics: [&'a str; 2]) -> impl Iterator<Item = (&'a str, &'a str, &'a [u8])> {
    messages.iter().map(move |m| (if m.judgment { topics[1] } else { topics[0] }, m.key.as_str(), m.payload.as_slice()))
}

/// A daemon of `config` on `bootstrap`, in its own consumer group.
async fn consume(mut config: Config, bootstrap: &str, total: f64) -> String {
    config.kafka.brokers = bootstrap.to_string();
    config.kafka.group_id = format!("rankpulse-mapped-{}-{}", std::process::id(), config.kafka.topics[0]);
    consume_all(config, total).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mapped_topics_on_a_mock_cluster_equal_their_native_twin() {
    let cluster = MockCluster::new(1).expect("mock cluster");
    for topic in [IMPRESSIONS, JUDGMENTS, HITS, CLICKS] {
        cluster.create_topic(topic, PARTITIONS, 1).unwrap();
    }
    let bootstrap = cluster.bootstrap_servers();
    // 400 lists from 40 to 20 minutes ago.
    let native = rankpulse_testkit::ubi::ubi_mix(400, 51, now_ms() - 40 * 60_000, 3_000.0, 0).native;
    let t = mapped_twin(&native, 51);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    let native_total = send_all(&producer, routed(&t.native, [IMPRESSIONS, JUDGMENTS])).await as f64;
    let mapped_total = send_all(&producer, routed(&t.mapped, [HITS, CLICKS])).await as f64;

    let twin = consume(Config::default(), &bootstrap, native_total).await;
    let got = consume(mapped_config(), &bootstrap, mapped_total).await;

    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h""#) > 200.0, "the lists are there to compare:\n{twin}");
    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h",ranker="unknown""#) > 0.0, "lists without dimensions");
    assert_same(&twin, &got);
    assert_eq!(sum_of(&got, r#"rankpulse_events_ignored_total{reason="unmapped_action"}"#), t.ignored as f64);
    assert!(t.ignored > 0);
    assert_eq!(sum_of(&got, "rankpulse_events_rejected_total"), 0.0);
    drop(cluster);
}
