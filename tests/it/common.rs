//! Helpers shared by the Kafka integration tests: brokers, counters,
//! signals and a deterministic event generator; the HTTP GET and the
//! exposition reader come from `rankpulse-testkit`.
#![allow(dead_code)] // each test uses some of them

use rankpulse::config::Config;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, FutureProducer, FutureRecord, Producer};
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
        "the standalone-broker tier needs RANKPULSE_TANSU=/path/to/tansu (.ci/run installs it; see docs/testing.md)",
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
    signal(&mut daemon.0, "TERM", Duration::from_secs(15));
}

/// Sends `SIG{signal}` to `child` and waits for its exit ([`exited_within`]).
pub fn signal(child: &mut Child, signal: &str, within: Duration) -> std::process::ExitStatus {
    let ok = Command::new("kill").args([&format!("-{signal}"), &child.id().to_string()]).status().unwrap();
    assert!(ok.success());
    exited_within(child, within, &format!("of SIG{signal}"))
}

/// The exit status of `child` once it exits; if it is still running after
/// `within`, kills it and fails, so that a process that does not stop
/// fails the test instead of hanging it. `after` says since what.
pub fn exited_within(child: &mut Child, within: Duration, after: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() >= within {
            let _ = child.kill();
            let _ = child.wait();
            panic!("rankpulse did not exit within {within:?} {after}");
        }
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
            // The primary metric's session sums share the lifecycle of
            // `_sum` and `_count`.
            (name.ends_with("_sum")
                || name.ends_with("_count")
                || name.starts_with("rankpulse_primary_session")
                || name.starts_with("rankpulse_lists_")
                || name == "rankpulse_orphan_lists_total")
                && name.starts_with("rankpulse_")
                // The daemon's freshness and loop histograms have _sum and
                // _count too.
                && !name.starts_with("rankpulse_ingest_delay_seconds")
                && !name.starts_with("rankpulse_consumer_loop_gap_seconds")
                && !name.starts_with("rankpulse_consumer_tick_seconds")
        })
        .map(str::to_string)
        .collect();
    v.sort();
    v
}

/// `evs` in `parts` batches of about equal size, each cut where a list
/// ends (the next event is another session's): a test that pauses between
/// batches (a restart, a rebalance, an outage) must not split a list. Live,
/// a list that hears nothing for `session.gap` on an idle partition is
/// final in processing time, and its counters keep that first
/// finalization (a late judgment amends only the windows); `replay`, the
/// reference, sees the whole list in event time.
#[allow(dead_code)] // not every test file pauses between batches
pub fn split_at_lists(evs: &[(String, String)], parts: usize) -> Vec<Vec<(String, String)>> {
    let mut out = Vec::new();
    let mut start = 0;
    for i in 1..=parts {
        let mut end = (evs.len() * i / parts).max(start);
        while end < evs.len() && end > 0 && evs[end].0 == evs[end - 1].0 {
            end += 1;
        }
        out.push(evs[start..end].to_vec());
        start = end;
    }
    out
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

/// Produces every (topic, key, payload) through a real client, waiting out
/// a full queue, and returns once each is acknowledged: how many.
pub async fn send_all<T: AsRef<str>, K: AsRef<[u8]>, P: AsRef<[u8]>>(
    producer: &FutureProducer,
    messages: impl Iterator<Item = (T, K, P)>,
) -> usize {
    let mut deliveries = Vec::new();
    for (topic, key, payload) in messages {
        let mut record = FutureRecord::to(topic.as_ref()).key(key.as_ref()).payload(payload.as_ref());
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

/// Runs an in-process daemon on `config` (its brokers, topics and formats
/// set by the caller) until it has seen `total` messages, accepted,
/// rejected or ignored, then stops it and returns its final exposition.
pub async fn consume_all(mut config: Config, total: f64) -> String {
    config.kafka.properties.insert("fetch.wait.max.ms".into(), "10".into());
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

/// What two input forms of the same lists must agree on: the since-start
/// counters of lists and metrics, duplicates and rejects, and the 1h window
/// gauges (differential tests keep every list 20 to 40 minutes old, so no
/// window edge moves while they run).
pub fn compared(exposition: &str) -> Vec<String> {
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

/// Asserts that two expositions agree on [`compared`], showing the first
/// differences.
pub fn assert_same(want: &str, have: &str) {
    let (want, have) = (compared(want), compared(have));
    let diff: Vec<_> = want.iter().zip(&have).filter(|(a, b)| a != b).take(5).collect();
    assert!(want == have, "{} vs {} lines; first differences {diff:#?}", want.len(), have.len());
}

/// `rankpulse replay ARGS FILES…` through the binary: (exit code, stdout,
/// stderr).
pub fn replay_files(args: &[&str], files: &[&std::path::Path]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).arg("replay").args(args).args(files).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

/// Writes `lines` to a file in the temporary directory named after this
/// process, `prefix` and `name`.
pub fn temp_lines(prefix: &str, name: &str, lines: &[Vec<u8>]) -> std::path::PathBuf {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!("rankpulse-{prefix}-{}-{name}", std::process::id()));
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    for l in lines {
        f.write_all(l).unwrap();
        f.write_all(b"\n").unwrap();
    }
    f.flush().unwrap();
    path
}

/// The exposition without the series that count messages rather than
/// lists (a UBI or mapped list is several messages, some ignored).
pub fn lists_only(exposition: &str) -> Vec<&str> {
    exposition
        .lines()
        .filter(|l| !l.starts_with("rankpulse_events_total") && !l.starts_with("rankpulse_events_ignored_total"))
        .collect()
}

/// Whether this is the fresh process a test asked for: when not, runs
/// `test` (its module path, e.g. `replay::name`) again alone in a new
/// process of this executable, asserts that it passed, and returns false.
///
/// For a test that measures a child's peak memory: spawned from this
/// executable, where other tests run at the same time, a child's
/// `ru_maxrss` starts at this process's high-water mark (Linux records the
/// spawning address space's peak at exec), which says nothing of the child.
pub fn in_a_fresh_process(test: &str) -> bool {
    const FRESH: &str = "RANKPULSE_TEST_FRESH_PROCESS";
    if std::env::var_os(FRESH).is_some() {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", test, "--nocapture", "--test-threads", "1"])
        .env(FRESH, "1")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && stdout.contains("1 passed"), "{test} alone:\n{stdout}\n{stderr}");
    eprint!("{stderr}");
    false
}
