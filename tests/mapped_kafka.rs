//! `mapped` input over a real Kafka protocol path, differentially: the
//! same generated lists produced by a real client once rewritten in an
//! invented schema into two mapped topics (`hits`, `clicks`, read by
//! testkit's `MAPPING_TOML`), once as rankpulse's own impressions and
//! judgments, each consumed by its own daemon on librdkafka's in-process
//! mock cluster. The since-start counters and the 1h window gauges (every
//! list is 20 to 40 minutes old, so no window edge moves during the test)
//! must be identical.

mod common;

use common::{counter_lines, http_get, now_ms, sum_of};
use rankpulse::config::{Config, TopicFormat};
use rankpulse_testkit::MixMessage;
use rankpulse_testkit::mapped::{MAPPING_TOML, mapped_twin};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::{Duration, Instant};

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
const HITS: &str = "hits";
const CLICKS: &str = "clicks";
const PARTITIONS: i32 = 4;

async fn send_all(producer: &FutureProducer, messages: &[MixMessage], topics: [&str; 2]) -> usize {
    let mut deliveries = Vec::new();
    for m in messages {
        let topic = if m.judgment { topics[1] } else { topics[0] };
        let mut record = FutureRecord::to(topic).key(&m.key).payload(&m.payload);
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

/// Runs a daemon on `config` until it has seen `total` messages, stops it,
/// and returns its final exposition.
async fn consume(mut config: Config, bootstrap: &str, total: f64) -> String {
    config.kafka.brokers = bootstrap.to_string();
    config.kafka.group_id = format!("rankpulse-mapped-{}-{}", std::process::id(), config.kafka.topics[0]);
    config.kafka.properties.insert("fetch.wait.max.ms".into(), "10".into());
    config.validate().unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    config.http.listen = addr.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(rankpulse::daemon::run_on(config, listener, async move {
        let _ = stopped.await;
    }));
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
    let native_total = send_all(&producer, &t.native, [IMPRESSIONS, JUDGMENTS]).await as f64;
    let mapped_total = send_all(&producer, &t.mapped, [HITS, CLICKS]).await as f64;

    let twin = consume(Config::default(), &bootstrap, native_total).await;
    let got = consume(mapped_config(), &bootstrap, mapped_total).await;

    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h""#) > 200.0, "the lists are there to compare:\n{twin}");
    assert!(sum_of(&twin, r#"rankpulse_lists{window="1h",ranker="unknown""#) > 0.0, "lists without dimensions");
    let (want, have) = (compared(&twin), compared(&got));
    let diff: Vec<_> = want.iter().zip(&have).filter(|(a, b)| a != b).take(5).collect();
    assert!(want == have, "{} vs {} lines; first differences {diff:#?}", want.len(), have.len());
    assert_eq!(sum_of(&got, r#"rankpulse_events_ignored_total{reason="unmapped_action"}"#), t.ignored as f64);
    assert!(t.ignored > 0);
    assert_eq!(sum_of(&got, "rankpulse_events_rejected_total"), 0.0);
    drop(cluster);
}
