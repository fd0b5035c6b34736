//! End to end against a standalone Kafka-compatible broker (Tansu), with the
//! real `rankpulse run` binary: events produced by a real client are counted
//! once, `/metrics` is scraped over HTTP, SIGTERM stops the daemon with exit
//! 0 within 10 s, and a restarted daemon resumes from the committed offsets
//! (it re-reads nothing).
//!
//! The standalone-broker tier: ignored by a plain `cargo test`; with
//! `--ignored` it needs `RANKPULSE_TANSU=/path/to/tansu` (`.ci/run` installs
//! it, see docs/operations.md) and fails without it.

mod common;

use common::{
    Guard, IMPRESSIONS, JUDGMENTS, consumed, events, free_port, http_get, metrics, now_ms, spawn_daemon, start_tansu,
    sum_of, tansu_binary, wait_until,
};
use rdkafka::ClientConfig;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::process::Command;
use std::time::{Duration, Instant};

const PARTITIONS: i32 = 4;

/// SIGTERM, then the exit status within 10 s.
fn terminate(daemon: &mut Guard) -> std::process::ExitStatus {
    let started = Instant::now();
    let ok = Command::new("kill").args(["-TERM", &daemon.0.id().to_string()]).status().unwrap();
    assert!(ok.success());
    loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "rankpulse did not exit within 10 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "standalone-broker tier: needs RANKPULSE_TANSU, run with --ignored (.ci/run does)"]
async fn tansu_end_to_end_sigterm_and_resume() {
    let tansu = tansu_binary();
    let port = free_port();
    let broker = format!("127.0.0.1:{port}");
    let _tansu = start_tansu(&tansu, port, port, &[IMPRESSIONS, JUDGMENTS], PARTITIONS);

    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &broker).create().unwrap();
    let now_ms = now_ms();
    let evs = events(300, now_ms - 60_000, 11);
    for (session, json) in &evs {
        let topic = if json.contains(r#""type":"impression""#) { IMPRESSIONS } else { JUDGMENTS };
        producer.send(FutureRecord::to(topic).key(session).payload(json), Duration::from_secs(10)).await.unwrap();
    }
    producer.send(FutureRecord::to(IMPRESSIONS).key("bad").payload("\u{1}"), Duration::from_secs(10)).await.unwrap();
    let total = evs.len() as f64 + 1.0;

    let group = format!("rankpulse-e2e-{}", std::process::id());
    let http = format!("127.0.0.1:{}", free_port());
    let mut daemon = spawn_daemon(&broker, &http, &group, "2s", &[]);
    // A consumer group may take about 20 s to form on this broker build.
    tokio::task::block_in_place(|| {
        wait_until("every message to be consumed", Duration::from_secs(90), || consumed(&metrics(&http)) >= total)
    });
    let m = metrics(&http);
    assert_eq!(consumed(&metrics(&http)), total);
    assert_eq!(sum_of(&m, r#"rankpulse_events_rejected_total{reason="invalid_json"}"#), 1.0);
    assert_eq!(http_get(&http, "/readyz").unwrap().0, 200);
    // Windows: all 300 lists are within the last hour of wall-clock time
    // once their 2 s gap has passed.
    tokio::task::block_in_place(|| {
        wait_until("lists to finalize", Duration::from_secs(30), || {
            sum_of(&metrics(&http), r#"rankpulse_lists{window="1h""#) >= 300.0
        })
    });
    let status = tokio::task::block_in_place(|| terminate(&mut daemon));
    assert!(status.success(), "exit status {status:?}");

    // Restart with the same group: nothing old is read again. One marker per
    // partition of each topic must be the only thing consumed.
    let mut daemon = spawn_daemon(&broker, &http, &group, "2s", &[]);
    for topic in [IMPRESSIONS, JUDGMENTS] {
        for p in 0..PARTITIONS {
            let json = format!(
                r#"{{"type":"judgment","event_id":"m-{topic}-{p}","session_id":"m{p}","doc_id":"d","grade":1,"timestamp":{now_ms}}}"#
            );
            producer
                .send(FutureRecord::to(topic).partition(p).key("m").payload(&json), Duration::from_secs(10))
                .await
                .unwrap();
        }
    }
    let markers = 2.0 * f64::from(PARTITIONS);
    tokio::task::block_in_place(|| {
        wait_until("the markers after restart", Duration::from_secs(90), || consumed(&metrics(&http)) >= markers)
    });
    assert_eq!(consumed(&metrics(&http)), markers, "a restarted daemon re-read committed events");
    let status = tokio::task::block_in_place(|| terminate(&mut daemon));
    assert!(status.success());
}

/// `state.backend = "kafka"` creates its topic compacted with one
/// partition, takes it as it is on the next start, and refuses a topic
/// that deletes by age or has more partitions, naming it.
#[test]
#[ignore = "standalone-broker tier: needs RANKPULSE_TANSU, run with --ignored (.ci/run does)"]
fn the_state_topic_is_created_compacted_and_other_topics_are_refused() {
    use rankpulse::config::{Config, StateBackend};
    use rankpulse::state::{StateError, StateStore};
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let tansu = tansu_binary();
    let port = free_port();
    let broker = format!("127.0.0.1:{port}");
    let _tansu = start_tansu(&tansu, port, port, &["deleting"], 1);
    start_tansu_topic(&tansu, port, "two-partitions", 2);
    let mut config = Config::default();
    config.kafka.brokers = broker.clone();
    config.state.backend = StateBackend::Kafka;
    config.state.instance = "one".into();
    config.validate().unwrap();
    let store = StateStore::open(&config).expect("the state topic is created");
    assert!(store.load_own().unwrap().is_none());
    assert_eq!(store.location(), r#"state.topic rankpulse-state (instance "one")"#);

    let admin: AdminClient<_> = ClientConfig::new().set("bootstrap.servers", &broker).create().unwrap();
    let topic = ResourceSpecifier::Topic("rankpulse-state");
    let described = futures_block_on(admin.describe_configs([&topic], &AdminOptions::new()));
    let described = described.unwrap().into_iter().next().unwrap().unwrap();
    assert_eq!(described.get("cleanup.policy").and_then(|e| e.value.as_deref()), Some("compact"));

    config.state.instance = "two".into();
    StateStore::open(&config).expect("an existing compacted topic is taken as it is");
    config.state.topic = "deleting".into();
    let e = StateStore::open(&config).unwrap_err();
    assert!(matches!(&e, StateError::NotCompacted { topic, .. } if topic == "deleting"), "{e}");
    assert!(e.to_string().starts_with("state.topic deleting has cleanup.policy="), "{e}");
    config.state.topic = "two-partitions".into();
    let e = StateStore::open(&config).unwrap_err();
    assert!(matches!(e, StateError::Partitions { partitions: 2, .. }), "{e}");
}

/// Creates one more topic on a running Tansu.
fn start_tansu_topic(tansu: &str, port: u16, topic: &str, partitions: i32) {
    let status = Command::new(tansu)
        .args(["topic", "create", topic, "--partitions", &partitions.to_string()])
        .args(["--broker", &format!("tcp://127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "tansu topic create {topic}");
}

/// Waits for a future on this thread (an admin request, which librdkafka's
/// own thread completes).
fn futures_block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
}
