//! Helpers shared by the Kafka integration tests: brokers, counters,
//! signals and a deterministic event generator; the HTTP GET and the
//! exposition reader come from `rankpulse-testkit`.
#![allow(dead_code)] // each test uses some of them

use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::BTreeMap;
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child process killed when the test ends, however it ends.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The Tansu binary of the standalone-broker tier (`RANKPULSE_TANSU`). The
/// tier's tests are `#[ignore]`d, so a plain `cargo test` lists them as
/// ignored; run with `--ignored`, a missing broker fails them.
pub fn tansu_binary() -> String {
    std::env::var("RANKPULSE_TANSU").expect(
        "the standalone-broker tier needs RANKPULSE_TANSU=/path/to/tansu (.ci/run installs it; see docs/operations.md)",
    )
}

/// Adds the counter lines of several expositions (name{labels} → value).
pub fn add_counters(expositions: &[&str]) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for e in expositions {
        for line in counter_lines(e) {
            if let Some((series, value)) = line.rsplit_once(' ') {
                *out.entry(series.to_string()).or_default() += value.parse::<f64>().unwrap();
            }
        }
    }
    out
}

/// Whether counters added up over several expositions (`got`) equal the
/// single-pass ones (`want`): the same series, counts equal, and each `_sum`
/// within 4 ulps. An exposition prints an exact fixed-point sum as the
/// nearest f64 (half an ulp off), and adding two such prints rounds once
/// more: one and a half ulps of the total at most. The series that differ
/// otherwise (at most `show` of them) are the error.
pub fn counters_add_up(got: &BTreeMap<String, f64>, want: &BTreeMap<String, f64>, show: usize) -> Result<(), String> {
    let mut differing = Vec::new();
    for (series, w) in want {
        let ok = match got.get(series) {
            Some(g) if series.contains("_sum") => (g - w).abs() <= 4.0 * f64::EPSILON * w.abs().max(1.0),
            Some(g) => g == w,
            None => false,
        };
        if !ok {
            differing.push(format!("{series}: {:?}, single pass {w}", got.get(series)));
        }
    }
    differing.extend(got.keys().filter(|k| !want.contains_key(*k)).map(|k| format!("{k}: not in the single pass")));
    if differing.is_empty() {
        return Ok(());
    }
    differing.truncate(show);
    Err(differing.join("; "))
}

/// SIGTERM, then waits for the exit; fails if it takes over 15 s.
pub fn sigterm(daemon: &mut Guard) {
    let ok = Command::new("kill").args(["-TERM", &daemon.0.id().to_string()]).status().unwrap();
    assert!(ok.success());
    let started = Instant::now();
    while daemon.0.try_wait().unwrap().is_none() {
        assert!(started.elapsed() < Duration::from_secs(15), "rankpulse did not exit within 15 s of SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Polls `ready` every 100 ms until it holds; fails after `timeout`.
pub fn wait_until(what: &str, timeout: Duration, mut ready: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !ready() {
        assert!(Instant::now() < deadline, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts a Tansu broker (memory storage) listening on `listen_port` and
/// advertising `advertised_port` (a proxy's, or its own), and creates
/// `topics` with `partitions` partitions each.
pub fn start_tansu(tansu: &str, listen_port: u16, advertised_port: u16, topics: &[&str], partitions: i32) -> Guard {
    let listen = format!("tcp://127.0.0.1:{listen_port}");
    let advertised = format!("tcp://127.0.0.1:{advertised_port}");
    let process = Guard(
        Command::new(tansu)
            .args(["broker", "--listener-url", &listen, "--advertised-listener-url", &advertised])
            .args(["--storage-engine", "memory://tansu/"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu"),
    );
    wait_until("the broker to listen", Duration::from_secs(20), || {
        TcpStream::connect(("127.0.0.1", listen_port)).is_ok()
    });
    for topic in topics {
        let status = Command::new(tansu)
            .args(["topic", "create", topic, "--partitions", &partitions.to_string(), "--broker", &listen])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "tansu topic create {topic}");
    }
    process
}

/// The topics every Kafka test produces to, as the default configuration names them.
pub const IMPRESSIONS: &str = "search-impressions";
pub const JUDGMENTS: &str = "search-judgments";

#[allow(unused_imports)] // each test uses some of them
pub use rankpulse_testkit::wall_ms as now_ms;

/// A producer for the tests' events: small batches, a deep queue, and
/// messages up to 2 MB (the oversized-message cases).
pub fn producer(bootstrap: &str) -> BaseProducer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("linger.ms", "5")
        .set("queue.buffering.max.messages", "1000000")
        .set("message.max.bytes", "2000000")
        .create()
        .unwrap()
}

/// Sends (key, json) events to their topic (by type), to `partition` when
/// given, else by key; waits for every acknowledgement.
pub fn produce(producer: &BaseProducer, evs: &[(String, String)], partition: Option<i32>) {
    for (key, json) in evs {
        let topic = if json.contains(r#""type":"judgment""#) { JUDGMENTS } else { IMPRESSIONS };
        let mut record = BaseRecord::to(topic).key(key.as_str()).payload(json.as_str());
        if let Some(p) = partition {
            record = record.partition(p);
        }
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, r)) => {
                    record = r;
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(120)).expect("every event acknowledged by the broker");
}

/// A `rankpulse run` process configured through the environment, as a
/// container would be; `env` comes last and overrides.
pub fn spawn_daemon(broker: &str, http: &str, group: &str, gap: &str, env: &[(&str, &str)]) -> Guard {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rankpulse"));
    cmd.arg("run")
        .env("RANKPULSE__KAFKA__BROKERS", broker)
        .env("RANKPULSE__KAFKA__GROUP_ID", group)
        .env("RANKPULSE__HTTP__LISTEN", http)
        .env("RANKPULSE__SESSION__GAP", gap)
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    for (k, v) in env {
        cmd.env(k, v);
    }
    Guard(cmd.spawn().expect("start rankpulse"))
}

/// The daemon's exposition, or empty while it does not answer.
pub fn metrics(http: &str) -> String {
    http_get(http, "/metrics").map(|(_, b)| b).unwrap_or_default()
}

/// Messages the exposition says were consumed: accepted or rejected.
pub fn consumed(exposition: &str) -> f64 {
    sum_of(exposition, "rankpulse_events_total") + sum_of(exposition, "rankpulse_events_rejected_total")
}

pub fn ready(http: &str) -> bool {
    http_get(http, "/readyz").is_ok_and(|(s, _)| s == 200)
}

/// Shared with the benchmarks: one HTTP GET, one exposition reader.
#[allow(unused_imports)] // each test uses some of them
pub use rankpulse_testkit::{free_port, http_get, sum_of};

/// The lines of an exposition that do not depend on time or on the input
/// path: the since-start counters of the quality metrics.
pub fn counter_lines(exposition: &str) -> Vec<String> {
    let mut v: Vec<String> = exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            let name = l.split(['{', ' ']).next().unwrap_or("");
            // Orphans too: a list closed before its judgments came shows up
            // as judgments-only lists.
            (name.ends_with("_sum")
                || name.ends_with("_count")
                || name.starts_with("rankpulse_lists_")
                || name == "rankpulse_orphan_lists_total")
                && name.starts_with("rankpulse_")
                // The daemon's freshness and loop histograms have _sum and
                // _count too.
                && !name.starts_with("rankpulse_ingest_delay_seconds")
                && !name.starts_with("rankpulse_consumer_loop_gap_seconds")
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// `n` lists of events (impression, then 0..3 judgments), as
/// (session_id, json) pairs, with event times starting at `base_ms`.
pub fn events(n: usize, base_ms: i64, seed: u64) -> Vec<(String, String)> {
    let mut rng = rankpulse_testkit::Rng::new(seed);
    let mut out = Vec::new();
    for i in 0..n {
        let session = format!("s{i}");
        let ranker = if rng.below(2) == 0 { "control" } else { "candidate" };
        let t = base_ms + i as i64 * 10;
        let results: Vec<String> =
            (0..5).map(|p| format!(r#"{{"doc_id":"d{p}","position":{},"score":{}}}"#, p + 1, 10 - p)).collect();
        out.push((
            session.clone(),
            format!(
                r#"{{"type":"impression","event_id":"i{i}","session_id":"{session}","query_id":"q","timestamp":{t},"results":[{}],"dimensions":{{"ranker":"{ranker}","market":"us"}}}}"#,
                results.join(",")
            ),
        ));
        for j in 0..rng.below(4) {
            let doc = rng.below(7);
            let grade = rng.below(5);
            out.push((
                session.clone(),
                format!(
                    r#"{{"type":"judgment","event_id":"j{i}-{j}","session_id":"{session}","query_id":"q","doc_id":"d{doc}","grade":{grade},"timestamp":{}}}"#,
                    t + 1 + j as i64
                ),
            ));
        }
    }
    out
}
