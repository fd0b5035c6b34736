//! The daemon over a real Kafka protocol path: librdkafka's in-process mock
//! cluster, a real producer, the daemon's consumer group, HTTP scrapes.
//! Proves: every produced event is consumed and counted once, the metrics
//! equal a replay of the same events, offsets are committed to the end at
//! shutdown, and the HTTP endpoints answer while running.

mod common;

use common::{counter_lines, events, http_get, sum_of};
use rankpulse::config::Config;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::time::{Duration, Instant};

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
const PARTITIONS: i32 = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_consumes_counts_commits_and_matches_replay() {
    // The mock cluster is !Send: it stays on this task.
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(IMPRESSIONS, PARTITIONS, 1).unwrap();
    cluster.create_topic(JUDGMENTS, PARTITIONS, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();

    // A bad message among the good ones: counted, never fatal.
    let base = 1_700_000_000_000;
    let evs = events(200, base, 7);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    for (session, json) in &evs {
        let topic = if json.contains(r#""type":"impression""#) { IMPRESSIONS } else { JUDGMENTS };
        producer
            .send(FutureRecord::to(topic).key(session).payload(json), Duration::from_secs(5))
            .await
            .expect("produce");
    }
    producer.send(FutureRecord::to(JUDGMENTS).key("x").payload("{not json"), Duration::from_secs(5)).await.unwrap();
    let total = evs.len() as f64 + 1.0;

    let mut config = Config::default();
    config.kafka.brokers = bootstrap.clone();
    config.kafka.group_id = format!("rankpulse-test-{}", std::process::id());
    config.kafka.topics = vec![IMPRESSIONS.into(), JUDGMENTS.into()];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    config.http.listen = addr.clone();

    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(rankpulse::daemon::run_on(config.clone(), listener, async move {
        let _ = stopped.await;
    }));

    // Wait (bounded) until every message shows in the counters.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut ready_seen = false;
    loop {
        let a = addr.clone();
        let (status, body) = tokio::task::spawn_blocking(move || http_get(&a, "/metrics")).await.unwrap().unwrap();
        assert_eq!(status, 200);
        let a = addr.clone();
        let (ready, _) = tokio::task::spawn_blocking(move || http_get(&a, "/readyz")).await.unwrap().unwrap();
        ready_seen |= ready == 200;
        let seen = sum_of(&body, "rankpulse_events_total") + sum_of(&body, "rankpulse_events_rejected_total");
        if seen >= total && ready_seen {
            break;
        }
        assert!(Instant::now() < deadline, "only {seen} of {total} messages consumed in 60 s:\n{body}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let a = addr.clone();
    let (health, _) = tokio::task::spawn_blocking(move || http_get(&a, "/healthz")).await.unwrap().unwrap();
    assert_eq!(health, 200);

    stop.send(()).unwrap();
    let summary =
        tokio::time::timeout(Duration::from_secs(10), daemon).await.expect("shutdown within 10 s").unwrap().unwrap();
    assert_eq!(summary.open_lists_at_shutdown, 0);
    assert_eq!(summary.messages as f64, total);
    // Every consumed offset is committed once nothing is open.
    let committed: i64 = summary.committed.values().sum();
    assert_eq!(committed as f64, total, "{:?}", summary.committed);

    // The same events through replay give the same counters.
    let lines: String = evs.iter().map(|(_, j)| format!("{j}\n")).collect::<String>() + "{not json\n";
    let replayed = rankpulse::replay::replay(&config, lines.as_bytes()).unwrap();
    assert_eq!(counter_lines(&summary.final_exposition), counter_lines(&replayed));
    assert_eq!(sum_of(&summary.final_exposition, "rankpulse_events_rejected_total"), 1.0);
    assert_eq!(sum_of(&summary.final_exposition, "rankpulse_lists_finalized_total"), 200.0);
    drop(cluster);
}
