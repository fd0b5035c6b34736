//! The daemon over a real Kafka protocol path: librdkafka's in-process mock
//! cluster, a real producer, the daemon's consumer group, HTTP scrapes.
//! Proves: every produced event is consumed and counted once, the metrics
//! equal a replay of the same events, offsets are committed to the end at
//! shutdown, and the HTTP endpoints answer while running.

use crate::common::{counter_lines, events, http_get, sum_of};
use rankpulse::config::Config;
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{DefaultProducerContext, FutureProducer, FutureRecord};
use std::time::{Duration, Instant};

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
const PARTITIONS: i32 = 4;

/// A one-broker mock cluster holding both topics with `partitions` each,
/// and its bootstrap address. The cluster is !Send: it stays on the test's
/// task.
fn cluster(partitions: i32) -> (MockCluster<'static, DefaultProducerContext>, String) {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(IMPRESSIONS, partitions, 1).unwrap();
    cluster.create_topic(JUDGMENTS, partitions, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    (cluster, bootstrap)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemon_consumes_counts_commits_and_matches_replay() {
    let (cluster, bootstrap) = cluster(PARTITIONS);

    // A bad message among the good ones: counted, never fatal.
    let base = 1_700_000_000_000;
    let evs = events(200, base, 7);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    produce_by_type(&producer, &evs).await;
    producer.send(FutureRecord::to(JUDGMENTS).key("x").payload("{not json"), Duration::from_secs(5)).await.unwrap();
    let total = evs.len() as f64 + 1.0;

    let (config, addr, stop, daemon) = start(&bootstrap, "30s").await;

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
    // Every message, the rejected one included, in its topic's count.
    let judgments = evs.iter().filter(|(_, j)| j.contains(r#""type":"judgment""#)).count() as f64;
    let messages =
        |topic: &str| sum_of(&summary.final_exposition, &format!(r#"rankpulse_messages_total{{topic="{topic}"}}"#));
    assert_eq!(
        (messages(IMPRESSIONS), messages(JUDGMENTS)),
        (evs.len() as f64 - judgments, judgments + 1.0),
        "{}",
        summary.final_exposition
    );
    // The loop ticked (readiness is set on a tick) and counted each tick.
    assert!(sum_of(&summary.final_exposition, "rankpulse_consumer_tick_seconds_count") >= 1.0);
    // What the shipped RankpulseMetricsAbsent alert watches.
    let build = format!(r#"rankpulse_build_info{{version="{}"}} 1"#, env!("CARGO_PKG_VERSION"));
    assert!(summary.final_exposition.lines().any(|l| l == build), "{}", summary.final_exposition);
    drop(cluster);
}

/// Produces `(session, json)` events to their topic (by type), keyed by session.
/// Every send is queued before the first delivery is awaited: awaiting
/// each in turn takes a linger per message.
async fn produce_by_type(producer: &FutureProducer, evs: &[(String, String)]) {
    let routed = evs.iter().map(|(session, json)| {
        let topic = if json.contains(r#""type":"impression""#) { IMPRESSIONS } else { JUDGMENTS };
        (topic, session, json)
    });
    crate::common::send_all(producer, routed).await;
}

/// A daemon on `bootstrap` with `max_topic_drift`, its /metrics address,
/// the sender that stops it and its task.
async fn start(
    bootstrap: &str,
    drift: &str,
) -> (
    Config,
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<rankpulse::daemon::RunSummary, rankpulse::daemon::DaemonError>>,
) {
    let mut config = Config::default();
    config.kafka.brokers = bootstrap.to_string();
    config.kafka.group_id = format!("rankpulse-test-{}-{drift}", std::process::id());
    config.kafka.max_topic_drift = drift.parse().unwrap();
    start_with(config).await
}

/// A daemon running `config`, as [`start`] returns it.
async fn start_with(
    mut config: Config,
) -> (
    Config,
    String,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Result<rankpulse::daemon::RunSummary, rankpulse::daemon::DaemonError>>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    config.http.listen = addr.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(rankpulse::daemon::run_on(config.clone(), listener, async move {
        let _ = stopped.await;
    }));
    (config, addr, stop, daemon)
}

/// Waits (at most `secs`) until the daemon at `addr` has consumed `total`
/// messages; returns the last exposition.
async fn wait_consumed(addr: &str, total: f64, secs: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let a = addr.to_string();
        let (_, body) = tokio::task::spawn_blocking(move || http_get(&a, "/metrics")).await.unwrap().unwrap();
        let seen = sum_of(&body, "rankpulse_events_total") + sum_of(&body, "rankpulse_events_rejected_total");
        if seen >= total {
            return body;
        }
        assert!(Instant::now() < deadline, "only {seen} of {total} messages consumed in {secs} s:\n{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn replay_of(config: &Config, evs: &[(String, String)]) -> String {
    let lines: String = evs.iter().map(|(_, j)| format!("{j}\n")).collect();
    rankpulse::replay::replay(config, lines.as_bytes()).unwrap()
}

/// With a drift of 1 s and whole topics fetched at once, topics run ahead
/// of each other all the time: they are held back and released again and
/// again, their partition queues left unread meanwhile. Every message must
/// still be consumed exactly once, and the metrics equal a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_back_topics_lose_and_repeat_nothing() {
    let (cluster, bootstrap) = cluster(PARTITIONS);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    // 4,000 lists 10 ms apart: 40 s of event time in each partition (keys
    // spread the lists over the partitions).
    let evs = events(4000, 1_700_000_000_000, 11);
    produce_by_type(&producer, &evs).await;
    let total = evs.len() as f64;

    let (config, addr, stop, daemon) = start(&bootstrap, "1s").await;
    let body = wait_consumed(&addr, total, 120).await;
    stop.send(()).unwrap();
    let summary =
        tokio::time::timeout(Duration::from_secs(10), daemon).await.expect("shutdown within 10 s").unwrap().unwrap();
    assert!(sum_of(&body, "rankpulse_topic_pauses_total") > 0.0, "no topic was held back:\n{body}");
    assert_eq!(summary.messages as f64, total, "a message was consumed twice or lost");
    let committed: i64 = summary.committed.values().sum();
    assert_eq!(committed as f64, total, "{:?}", summary.committed);
    assert_eq!(counter_lines(&summary.final_exposition), counter_lines(&replay_of(&config, &evs)));
    drop(cluster);
}

type Events = Vec<(String, String)>;

/// `evs` in the order of a stalled impressions topic: the impressions of
/// the first 100 lists (1 s of event time), then every judgment, then the
/// other impressions.
fn stalled_impressions(evs: &[(String, String)]) -> (Events, Events, Events) {
    let mut list = 0;
    let (mut first, mut judgments, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for e in evs {
        if e.1.contains(r#""type":"impression""#) {
            list += 1;
            if list <= 100 { &mut first } else { &mut rest }.push(e.clone());
        } else {
            judgments.push(e.clone());
        }
    }
    (first, judgments, rest)
}

/// `kafka.max_topic_drift = "0s"` turns holding off: the judgments that
/// the default 30 s holds back in the test below (60 s of event time ahead
/// of the only impressions there are) flow at once, nothing is held, and
/// the metrics still equal a replay once the impressions come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drift_of_zero_holds_no_topic_back() {
    let (cluster, bootstrap) = cluster(1);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    let evs = events(6000, 1_700_000_000_000, 13);
    let (first, judgments, rest) = stalled_impressions(&evs);
    let (config, addr, stop, daemon) = start(&bootstrap, "0s").await;
    produce_by_type(&producer, &first).await;
    wait_consumed(&addr, first.len() as f64, 60).await;
    produce_by_type(&producer, &judgments).await;
    let body = wait_consumed(&addr, (first.len() + judgments.len()) as f64, 60).await;
    assert_eq!(sum_of(&body, "rankpulse_topic_pauses_total"), 0.0, "a topic was held back:\n{body}");
    assert!(body.contains("rankpulse_topic_pauses_total"), "the counter is exposed, at 0:\n{body}");
    produce_by_type(&producer, &rest).await;
    wait_consumed(&addr, evs.len() as f64, 60).await;
    stop.send(()).unwrap();
    let summary =
        tokio::time::timeout(Duration::from_secs(10), daemon).await.expect("shutdown within 10 s").unwrap().unwrap();
    assert_eq!(summary.messages as f64, evs.len() as f64);
    assert_eq!(counter_lines(&summary.final_exposition), counter_lines(&replay_of(&config, &evs)));
    drop(cluster);
}

/// Judgments run far ahead of the only impressions there are: they are
/// held back; the impressions deliver nothing more, and after
/// `align::MAX_HOLD_MS` the judgments flow again (a silent topic must not
/// hold the other back). The impressions produced later complete the
/// lists: nothing closed early, the metrics equal a replay.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_topic_does_not_hold_the_other_back() {
    let (cluster, bootstrap) = cluster(1);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    // 6,000 lists 10 ms apart: 60 s of event time, twice the drift.
    let evs = events(6000, 1_700_000_000_000, 13);
    let (first, judgments, rest) = stalled_impressions(&evs);

    let (config, addr, stop, daemon) = start(&bootstrap, "30s").await;
    produce_by_type(&producer, &first).await;
    wait_consumed(&addr, first.len() as f64, 60).await;
    // The judgments pass 31 s of event time halfway: held back there,
    // with the rest unconsumed until the hold times out.
    let produced = Instant::now();
    produce_by_type(&producer, &judgments).await;
    let body = wait_consumed(&addr, (first.len() + judgments.len()) as f64, 60).await;
    assert!(sum_of(&body, "rankpulse_topic_pauses_total") >= 1.0, "the judgments were not held back:\n{body}");
    let took = produced.elapsed();
    assert!(took >= Duration::from_millis(rankpulse::align::MAX_HOLD_MS as u64), "held back for only {took:?}");
    produce_by_type(&producer, &rest).await;
    wait_consumed(&addr, evs.len() as f64, 60).await;
    stop.send(()).unwrap();
    let summary =
        tokio::time::timeout(Duration::from_secs(10), daemon).await.expect("shutdown within 10 s").unwrap().unwrap();
    assert_eq!(summary.messages as f64, evs.len() as f64);
    assert_eq!(counter_lines(&summary.final_exposition), counter_lines(&replay_of(&config, &evs)));
    assert_eq!(sum_of(&summary.final_exposition, "rankpulse_orphan_lists_total"), 0.0);
    drop(cluster);
}

/// `rankpulse loadgen` (what deploy/docker-compose.yml runs) through the
/// binary against the mock cluster: it exits by itself after
/// `--duration`, every list it reports is one impression on the
/// impressions topic, keyed by its session, and every judgment is keyed by
/// a session shown; the `--invalid-share` it was asked for arrives as
/// messages the decoder rejects, on the judgments topic only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_produces_keyed_lists_and_the_invalid_share() {
    use rdkafka::Message;
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use std::collections::BTreeSet;
    let (cluster, bootstrap) = cluster(PARTITIONS);
    let out = tokio::task::spawn_blocking({
        let bootstrap = bootstrap.clone();
        move || {
            std::process::Command::new(env!("CARGO_BIN_EXE_rankpulse"))
                .args(["loadgen", "--brokers", &bootstrap, "--rate", "50", "--duration", "2", "--invalid-share", "0.2"])
                .env("RUST_LOG", "info")
                .output()
                .unwrap()
        }
    })
    .await
    .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let lists: usize = log
        .split("loadgen: produced ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no count of lists in\n{log}"));
    // 2 s at 50 lists/s, a tick of 100 ms either way.
    assert!((90..=110).contains(&lists), "{lists} lists");
    assert!(log.contains(" messages delivered, 0 failed, 0 undelivered"), "{log}");

    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "loadgen-check")
        .set("enable.partition.eof", "true")
        .create()
        .unwrap();
    // Assigned, not subscribed: no group to join or leave.
    let mut tpl = rdkafka::TopicPartitionList::new();
    for topic in [IMPRESSIONS, JUDGMENTS] {
        for p in 0..PARTITIONS {
            tpl.add_partition_offset(topic, p, rdkafka::Offset::Beginning).unwrap();
        }
    }
    consumer.assign(&tpl).unwrap();
    let limits = rankpulse_core::event::DecodeLimits::default();
    let (mut sessions, mut judged) = (BTreeSet::new(), BTreeSet::new());
    let (mut impressions, mut judgments, mut invalid, mut ends) = (0, 0, 0, 0);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ends < 2 * PARTITIONS {
        assert!(Instant::now() < deadline, "not every partition read to its end in 30 s");
        let m = match consumer.poll(Duration::from_millis(100)) {
            None => continue,
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => {
                ends += 1;
                continue;
            }
            Some(m) => m.unwrap(),
        };
        let key = std::str::from_utf8(m.key().unwrap()).unwrap().to_string();
        match (m.topic(), rankpulse_core::event::decode(m.payload().unwrap(), &limits)) {
            (IMPRESSIONS, Ok(rankpulse_core::event::Event::Impression(i))) => {
                assert_eq!(i.session_id, key);
                impressions += 1;
                sessions.insert(key);
            }
            (JUDGMENTS, Ok(rankpulse_core::event::Event::Judgment(j))) => {
                assert_eq!(j.session_id, key);
                judgments += 1;
                judged.insert(key);
            }
            (JUDGMENTS, Err(_)) => invalid += 1,
            (topic, other) => panic!("{topic}: {other:?}"),
        }
    }
    assert_eq!(impressions, lists);
    assert!(judgments > 0);
    assert!(judged.is_subset(&sessions), "judgments for sessions never shown");
    // 20% of about 100 lists; the seed is fixed, so this is one number.
    assert!((5..=40).contains(&invalid), "{invalid} invalid messages");
    // Closed while its broker is still up.
    drop(consumer);
    drop(cluster);
}

const DEAD_LETTERS: &str = "rankpulse-dead-letters";

/// Three invalid messages first in the judgments topic (offsets 0 to 2,
/// one partition), then `lists` lists: the daemon's config with
/// `kafka.dead_letter_topic`, the valid events and the message count.
async fn invalid_first(bootstrap: &str, lists: usize, group: &str) -> (Config, Vec<(String, String)>, f64) {
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("linger.ms", "5").create().unwrap();
    for i in 0..3 {
        let record = FutureRecord::to(JUDGMENTS).key("bad").payload("{not json").partition(0);
        producer.send(record, Duration::from_secs(5)).await.unwrap_or_else(|(e, _)| panic!("invalid message {i}: {e}"));
    }
    let evs = events(lists, 1_700_000_000_000, 17);
    produce_by_type(&producer, &evs).await;
    let mut config = Config::default();
    config.kafka.brokers = bootstrap.to_string();
    config.kafka.group_id = format!("{group}-{}", std::process::id());
    config.kafka.dead_letter_topic = DEAD_LETTERS.to_string();
    let total = evs.len() as f64 + 3.0;
    (config, evs, total)
}

/// The group's committed offset of `topic` partition 0, asked of the
/// broker as another client would (-1: none).
fn committed_offset(bootstrap: &str, group: &str, topic: &str) -> i64 {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let consumer: BaseConsumer =
        ClientConfig::new().set("bootstrap.servers", bootstrap).set("group.id", group).create().unwrap();
    let mut tpl = rdkafka::TopicPartitionList::new();
    tpl.add_partition(topic, 0);
    let committed = consumer.committed_offsets(tpl, Duration::from_secs(5)).unwrap();
    match committed.find_partition(topic, 0).map(|e| e.offset()) {
        Some(rdkafka::Offset::Offset(o)) => o,
        _ => -1,
    }
}

/// Stops the daemon and checks its last exposition's dead-letter copies
/// (`sent`, `failed`) and that every one of the `total` offsets was
/// committed; returns its summary.
async fn stopped_with_dead_letters(
    stop: tokio::sync::oneshot::Sender<()>,
    daemon: tokio::task::JoinHandle<Result<rankpulse::daemon::RunSummary, rankpulse::daemon::DaemonError>>,
    total: f64,
    sent: f64,
    failed: f64,
) -> rankpulse::daemon::RunSummary {
    stop.send(()).unwrap();
    let summary =
        tokio::time::timeout(Duration::from_secs(20), daemon).await.expect("shutdown within 20 s").unwrap().unwrap();
    let m = &summary.final_exposition;
    assert_eq!(sum_of(m, r#"rankpulse_dead_letters_total{outcome="sent"}"#), sent, "{m}");
    assert_eq!(sum_of(m, r#"rankpulse_dead_letters_total{outcome="failed"}"#), failed, "{m}");
    let committed: i64 = summary.committed.values().sum();
    assert_eq!(committed as f64, total, "{:?}", summary.committed);
    summary
}

/// A dead-letter topic that refuses every write (an ACL missing, here
/// `TOPIC_AUTHORIZATION_FAILED` on every produce request) never stops
/// consumption: each copy is counted as failed, none as sent, the offsets
/// covering them advance, and the metrics are a replay's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_letter_topic_refusing_writes_fails_its_copies_and_consumption_goes_on() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let (cluster, bootstrap) = cluster(1);
    cluster.create_topic(DEAD_LETTERS, 1, 1).unwrap();
    let (config, evs, total) = invalid_first(&bootstrap, 200, "dlq-refused").await;
    // From now on every produce request is refused (only the daemon's
    // dead-letter producer produces).
    cluster.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 64]);

    let (config, addr, stop, daemon) = start_with(config).await;
    wait_consumed(&addr, total, 60).await;
    let summary = stopped_with_dead_letters(stop, daemon, total, 0.0, 3.0).await;
    let m = &summary.final_exposition;
    let lines: String = evs.iter().map(|(_, j)| format!("{j}\n")).collect::<String>() + &"{not json\n".repeat(3);
    let replayed = rankpulse::replay::replay(&config, lines.as_bytes()).unwrap();
    assert_eq!(counter_lines(m), counter_lines(&replayed));
    drop(cluster);
}

/// While dead-letter copies are unacknowledged (the broker answers each
/// produce request with a retriable error, so librdkafka keeps retrying),
/// no offset from the invalid messages on is committed, though the lists
/// after them are consumed and commit ticks pass; once the broker takes
/// the copies they count as sent, the offsets past them are committed, and
/// at the stop every offset is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn offsets_wait_for_their_dead_letter_copies_to_be_acknowledged() {
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};
    let (cluster, bootstrap) = cluster(1);
    cluster.create_topic(DEAD_LETTERS, 1, 1).unwrap();
    let (config, _evs, total) = invalid_first(&bootstrap, 200, "dlq-pending").await;
    let group = config.kafka.group_id.clone();
    cluster.request_errors(RDKafkaApiKey::Produce, &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 100_000]);

    let (_, addr, stop, daemon) = start_with(config).await;
    let body = wait_consumed(&addr, total, 60).await;
    // Ten ticks (5 s, two commit intervals) after everything was read.
    let ticks = |body: &str| sum_of(body, "rankpulse_consumer_tick_seconds_count");
    let from = ticks(&body);
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let a = addr.clone();
        let (_, body) = tokio::task::spawn_blocking(move || http_get(&a, "/metrics")).await.unwrap().unwrap();
        if ticks(&body) >= from + 10.0 {
            break body;
        }
        assert!(Instant::now() < deadline, "ten ticks did not pass in 30 s:\n{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(sum_of(&body, r#"rankpulse_dead_letters_total{outcome="sent"}"#), 0.0, "{body}");
    assert_eq!(sum_of(&body, r#"rankpulse_dead_letters_total{outcome="failed"}"#), 0.0, "{body}");
    let (b, g) = (bootstrap.clone(), group.clone());
    let held = tokio::task::spawn_blocking(move || committed_offset(&b, &g, JUDGMENTS)).await.unwrap();
    assert!(held <= 0, "offset {held} of {JUDGMENTS} committed past unacknowledged dead-letter copies");

    cluster.clear_request_errors(RDKafkaApiKey::Produce);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (b, g) = (bootstrap.clone(), group.clone());
        let committed = tokio::task::spawn_blocking(move || committed_offset(&b, &g, JUDGMENTS)).await.unwrap();
        // 3: the next offset after the three invalid messages, so their
        // copies are accounted for. The lists after them stay open for the
        // session gap, and their offsets with them (the final commit below
        // covers every one).
        if committed >= 3 {
            break;
        }
        assert!(Instant::now() < deadline, "offsets still held 60 s after the copies could be written");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    stopped_with_dead_letters(stop, daemon, total, 3.0, 0.0).await;
    drop(cluster);
}

/// Without `state.dir`, no offset is committed past a list still open
/// (at-least-once, docs/operations.md), also while the lists of a burst
/// are walked: the walk of the open lists for the commit point takes 6
/// ticks for 6,000 lists (1,024 a tick: 3 s, past the 2 s between
/// commits), and the one before, on the empty shard, named no
/// topic-partition of it. Commits meanwhile took every offset read, open
/// lists and all, so a kill -9 lost them (found against a standalone
/// broker: 3,000 open lists, offsets 3,000 and 2,407 committed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_offset_is_committed_past_an_open_list_of_a_burst() {
    let (cluster, bootstrap) = cluster(1);
    let mut config = Config::default();
    config.kafka.brokers = bootstrap.clone();
    config.kafka.group_id = format!("rankpulse-test-{}-open-burst", std::process::id());
    // The lists span 60 s of event time: every one stays open.
    config.session.gap = "1h".parse().unwrap();
    let group = config.kafka.group_id.clone();
    let (_, addr, stop, daemon) = start_with(config).await;
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        crate::common::wait_until("/readyz 200 (partitions assigned)", Duration::from_secs(30), || {
            http_get(&a, "/readyz").is_ok_and(|(status, _)| status == 200)
        })
    })
    .await
    .unwrap();
    // 6,000 lists: about 4 MB a topic, within the 5 MB a mock partition
    // keeps (a consumer slowed by a busy machine must still find them).
    let evs = events(6_000, 1_700_000_000_000, 13);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    produce_by_type(&producer, &evs).await;
    let body = wait_consumed(&addr, evs.len() as f64, 120).await;
    // Twenty ticks (10 s: five commit intervals, past a whole walk) after
    // everything was read, each topic's committed offset checked
    // throughout: list s0 holds offset 0 of both.
    let ticks = |body: &str| sum_of(body, "rankpulse_consumer_tick_seconds_count");
    let from = ticks(&body);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        for topic in [IMPRESSIONS, JUDGMENTS] {
            let (b, g) = (bootstrap.clone(), group.clone());
            let committed = tokio::task::spawn_blocking(move || committed_offset(&b, &g, topic)).await.unwrap();
            assert!(committed <= 0, "offset {committed} of {topic} committed while its lists are open");
        }
        let a = addr.clone();
        let (_, body) = tokio::task::spawn_blocking(move || http_get(&a, "/metrics")).await.unwrap().unwrap();
        if ticks(&body) >= from + 20.0 {
            assert_eq!(sum_of(&body, "rankpulse_open_lists"), 6_000.0, "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "twenty ticks did not pass in 60 s:\n{body}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Commits went on meanwhile (-1 would be none at all): at list s0.
    for topic in [IMPRESSIONS, JUDGMENTS] {
        let (b, g) = (bootstrap.clone(), group.clone());
        let committed = tokio::task::spawn_blocking(move || committed_offset(&b, &g, topic)).await.unwrap();
        assert_eq!(committed, 0, "{topic}");
    }
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(10), daemon).await.expect("shutdown within 10 s").unwrap().unwrap();
    drop(cluster);
}

/// `/readyz` answers 503 from the moment shutdown begins while HTTP still
/// serves (README: "503 … during shutdown"), so that an orchestrator
/// draining the instance stops routing to it. The broker's round trip is
/// slowed to 3 s at the stop: the final commit then keeps the shutdown,
/// and HTTP, going that long, and the first 503 must come well before
/// that (within 1.5 s of the stop), not only once the commit is done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_turns_503_as_soon_as_shutdown_begins() {
    let (cluster, bootstrap) = cluster(PARTITIONS);
    let evs = events(50, 1_700_000_000_000, 11);
    let producer: FutureProducer =
        ClientConfig::new().set("bootstrap.servers", &bootstrap).set("linger.ms", "5").create().unwrap();
    produce_by_type(&producer, &evs).await;
    let (_config, addr, stop, daemon) = start(&bootstrap, "30s").await;
    wait_consumed(&addr, evs.len() as f64, 60).await;
    let a = addr.clone();
    tokio::task::spawn_blocking(move || {
        crate::common::wait_until("/readyz 200 while running", Duration::from_secs(30), || {
            matches!(http_get(&a, "/readyz"), Ok((200, _)))
        })
    })
    .await
    .unwrap();
    cluster.broker_round_trip_time(1, Duration::from_secs(3)).unwrap();
    let stopped = Instant::now();
    stop.send(()).unwrap();
    let a = addr.clone();
    // (status, time since the stop) of every answer until HTTP closes.
    let answers = tokio::task::spawn_blocking(move || {
        let mut answers = Vec::new();
        while let Ok((status, _)) = http_get(&a, "/readyz") {
            answers.push((status, stopped.elapsed()));
            assert!(stopped.elapsed() < Duration::from_secs(30), "HTTP still up 30 s after the stop: {answers:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        answers
    })
    .await
    .unwrap();
    let first =
        answers.iter().position(|(s, _)| *s == 503).unwrap_or_else(|| panic!("no 503 during shutdown: {answers:?}"));
    assert!(answers[first].1 < Duration::from_millis(1500), "the first 503 came late: {answers:?}");
    assert!(answers[first..].iter().all(|(s, _)| *s == 503), "ready again during shutdown: {answers:?}");
    let summary =
        tokio::time::timeout(Duration::from_secs(30), daemon).await.expect("shutdown within 30 s").unwrap().unwrap();
    assert_eq!(summary.open_lists_at_shutdown, 0);
    drop(cluster);
}
