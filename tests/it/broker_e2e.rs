//! End to end against a standalone Kafka-compatible broker (Tansu), with the
//! real `rankpulse run` binary: events produced by a real client are counted
//! once, `/metrics` is scraped over HTTP, SIGTERM stops the daemon with exit
//! 0 within 10 s, and a restarted daemon resumes from the committed offsets
//! (it re-reads nothing).
//!
//! The standalone-broker tier: ignored by a plain `cargo test`; with
//! `--ignored` it needs `RANKPULSE_TANSU=/path/to/tansu` (`.ci/run` installs
//! it, see docs/testing.md) and fails without it.

use crate::common::{
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
    // What bounds a restore's read beyond the live checkpoints (docs/operations.md).
    assert_eq!(described.get("segment.bytes").and_then(|e| e.value.as_deref()), Some("67108864"));
    assert_eq!(described.get("segment.ms").and_then(|e| e.value.as_deref()), Some("600000"));

    config.state.instance = "two".into();
    StateStore::open(&config).expect("an existing compacted topic is taken as it is");
    config.state.topic = "deleting".into();
    let e = StateStore::open(&config).unwrap_err();
    assert!(matches!(&e, StateError::NotCompacted { topic, .. } if topic == "deleting"), "{e}");
    assert!(e.to_string().starts_with("state.topic deleting has cleanup.policy="), "{e}");
    config.state.topic = "two-partitions".into();
    let e = StateStore::open(&config).unwrap_err();
    assert!(matches!(e, StateError::Partitions { partitions: 2, .. }), "{e}");
    // Compacted and deleting: taken (with a warning that old checkpoints go).
    use rdkafka::admin::{NewTopic, TopicReplication};
    let both =
        NewTopic::new("compacted-and-deleting", 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact,delete");
    let created = futures_block_on(admin.create_topics([&both], &AdminOptions::new())).unwrap();
    assert!(created.iter().all(|r| r.is_ok()), "{created:?}");
    let topic = ResourceSpecifier::Topic("compacted-and-deleting");
    let described = futures_block_on(admin.describe_configs([&topic], &AdminOptions::new()));
    let described = described.unwrap().into_iter().next().unwrap().unwrap();
    assert_eq!(described.get("cleanup.policy").and_then(|e| e.value.as_deref()), Some("compact,delete"));
    config.state.topic = "compacted-and-deleting".into();
    StateStore::open(&config).expect("a compacted and deleting topic is taken");
}

/// `rankpulse state list` and `forget` on the state topic two daemons
/// wrote: a checkpoints and stops, b takes every partition over. The list
/// shows both, b the latest owner of every partition; forgetting b is
/// refused (exit 2, naming them), forgetting a tombstones its records, and
/// the list then shows b alone. A state.topic that does not exist is
/// named as missing.
#[test]
#[ignore = "standalone-broker tier: needs RANKPULSE_TANSU, run with --ignored (.ci/run does)"]
fn state_list_and_forget_show_and_clean_a_departed_instance() {
    let tansu = tansu_binary();
    let port = free_port();
    let broker = format!("127.0.0.1:{port}");
    let _tansu = start_tansu(&tansu, port, port, &[IMPRESSIONS, JUDGMENTS], PARTITIONS);
    let group = format!("state-cli-{}", std::process::id());
    let daemon = |instance: &str, http: &str| {
        let env = [
            ("RANKPULSE__STATE__BACKEND", "kafka"),
            ("RANKPULSE__STATE__INSTANCE", instance),
            ("RANKPULSE__STATE__INTERVAL", "300ms"),
        ];
        spawn_daemon(&broker, http, &group, "3s", &env)
    };
    let checkpointed = |http: &str| {
        wait_until("checkpoints after the assignment", Duration::from_secs(90), || {
            let m = metrics(http);
            !m.is_empty()
                && sum_of(&m, "rankpulse_checkpoints_total") >= 3.0
                && http_get(http, "/readyz").is_ok_and(|(s, _)| s == 200)
        });
    };
    let (http_a, http_b) = (format!("127.0.0.1:{}", free_port()), format!("127.0.0.1:{}", free_port()));
    let mut a = daemon("a", &http_a);
    checkpointed(&http_a);
    assert!(terminate(&mut a).success());
    let mut b = daemon("b", &http_b);
    checkpointed(&http_b);
    let state = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .arg("state")
            .args(args)
            .env("RANKPULSE__KAFKA__BROKERS", &broker)
            .env("RANKPULSE__KAFKA__GROUP_ID", &group)
            .env("RANKPULSE__STATE__BACKEND", "kafka")
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, list, err) = state(&["list"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(list.contains("2 instance(s)"), "{list}");
    // A state.topic that does not exist is said to be missing, not an
    // "Unknown partition".
    let missing = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["state", "list"])
        .env("RANKPULSE__KAFKA__BROKERS", &broker)
        .env("RANKPULSE__KAFKA__GROUP_ID", &group)
        .env("RANKPULSE__STATE__BACKEND", "kafka")
        .env("RANKPULSE__STATE__TOPIC", "rankpulse-state-never-created")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&missing.stderr);
    assert_eq!(missing.status.code(), Some(2), "{err}");
    assert!(err.contains("state.topic rankpulse-state-never-created: no such topic"), "{err}");
    let line = |name: &str| list.lines().find(|l| l.starts_with(&format!("{name}: "))).unwrap_or_default().to_string();
    assert!(line("a").contains("latest owner of []"), "{list}");
    assert!(line("b").contains("latest owner of [0, 1, 2, 3]"), "{list}");
    let (code, _, err) = state(&["forget", "b"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("latest owner on record of partitions [0, 1, 2, 3]"), "{err}");
    let (code, out, err) = state(&["forget", "a"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("records tombstoned"), "{out}");
    // On Tansu a read right after the forget missed its tombstones in 1
    // run of 4: its high watermark leaves out the last batch until the
    // next write (b's next checkpoint here; see the forced forget below).
    // The list is read again until it shows them, for a few seconds at
    // most, and the reads it took are printed.
    let mut list = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut reads = 0;
    while Instant::now() < deadline && !list.contains("1 instance(s)") {
        list = state(&["list"]).1;
        reads += 1;
    }
    eprintln!("the list showed the tombstones at read {reads}");
    assert!(list.contains("1 instance(s)") && list.contains("\nb: "), "{out}\n{list}");
    assert!(terminate(&mut b).success());
    // b is gone for good but still the latest owner on record: --force
    // tombstones it anyway. Configured by a file (-C) this time.
    let config = std::env::temp_dir().join(format!("rankpulse-state-cli-{}.toml", std::process::id()));
    std::fs::write(
        &config,
        format!("[kafka]\nbrokers = \"{broker}\"\ngroup_id = \"{group}\"\n\n[state]\nbackend = \"kafka\"\n"),
    )
    .unwrap();
    let by_file = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .arg("state")
            .args(args)
            .args(["-C", config.to_str().unwrap()])
            .output()
            .unwrap();
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        (out.status.code(), text(&out.stdout), text(&out.stderr))
    };
    let (code, _, err) = by_file(&["forget", "b"]);
    assert_eq!(code, Some(2), "{err}");
    let (code, out, err) = by_file(&["forget", "b", "--force"]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("records tombstoned"), "{out}");
    // Tansu answers the topic's high watermark without its last batch
    // until another write comes (here, with no daemon left writing, the
    // list kept showing b for seconds; after one more record at once it
    // did not). A record that is no checkpoint's, which readers skip,
    // stands in for the next write a live group would make.
    let producer: FutureProducer = ClientConfig::new().set("bootstrap.servers", &broker).create().unwrap();
    let marker = FutureRecord::to("rankpulse-state").key("not-a-checkpoint").payload("x").partition(0);
    futures_block_on(producer.send(marker, Duration::from_secs(10))).unwrap();
    let mut list = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline && !list.contains("0 instance(s)") {
        list = by_file(&["list"]).1;
    }
    let _ = std::fs::remove_file(&config);
    assert!(list.contains("0 instance(s)"), "{out}\n{list}");
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

/// rankpulse started before its topics exist (deployed before the
/// producers created them), and seen them missing: once they are created,
/// it is assigned them and consumes within seconds (librdkafka refreshes
/// the metadata of a missing subscribed topic quickly; measured here about
/// 7 s, the group's join included).
#[test]
#[ignore = "standalone-broker tier: needs RANKPULSE_TANSU, run with --ignored (.ci/run does)"]
fn topics_created_after_the_start_are_consumed_within_seconds() {
    let tansu = tansu_binary();
    let port = free_port();
    let broker = format!("127.0.0.1:{port}");
    let _tansu = start_tansu(&tansu, port, port, &[], PARTITIONS);
    let http = format!("127.0.0.1:{}", free_port());
    let group = format!("rankpulse-late-topics-{}", std::process::id());
    let mut daemon = Guard(
        Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .arg("run")
            .env("RANKPULSE__KAFKA__BROKERS", &broker)
            .env("RANKPULSE__KAFKA__GROUP_ID", &group)
            .env("RANKPULSE__HTTP__LISTEN", &http)
            .env("RANKPULSE__KAFKA__PROPERTIES__FETCH_WAIT_MAX_MS", "10")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start rankpulse"),
    );
    // Until librdkafka has seen the topics missing: created before its
    // first metadata answer, they would be found at once.
    let stderr = daemon.0.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("{line}");
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !rx
        .recv_timeout(deadline.saturating_duration_since(Instant::now()))
        .expect("a log line")
        .contains("not available")
    {}
    assert_eq!(http_get(&http, "/readyz").unwrap().0, 503, "nothing to consume yet");
    for topic in [IMPRESSIONS, JUDGMENTS] {
        let listen = format!("tcp://{broker}");
        let status = Command::new(&tansu)
            .args(["topic", "create", topic, "--partitions", &PARTITIONS.to_string(), "--broker", &listen])
            .stdout(std::process::Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "tansu topic create {topic}");
    }
    let created = Instant::now();
    // A metadata refresh, then the group's join on this broker build
    // (up to about 20 s).
    wait_until("the new topics to be assigned", Duration::from_secs(75), || {
        http_get(&http, "/readyz").is_ok_and(|(s, _)| s == 200)
    });
    eprintln!("assigned {:.1} s after the topics were created", created.elapsed().as_secs_f64());
    let producer: rdkafka::producer::BaseProducer =
        ClientConfig::new().set("bootstrap.servers", &broker).create().unwrap();
    let evs = events(20, now_ms() - 60_000, 5);
    for (session, json) in &evs {
        let topic = if json.contains(r#""type":"impression""#) { IMPRESSIONS } else { JUDGMENTS };
        producer.send(rdkafka::producer::BaseRecord::to(topic).key(session).payload(json)).unwrap();
    }
    rdkafka::producer::Producer::flush(&producer, Duration::from_secs(10)).unwrap();
    wait_until("the events to be consumed", Duration::from_secs(30), || consumed(&metrics(&http)) >= evs.len() as f64);
    assert!(terminate(&mut daemon).success());
}
