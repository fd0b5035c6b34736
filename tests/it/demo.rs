//! `rankpulse demo` as a new user runs it: the real binary, its in-process
//! Kafka, generator and daemon. Proves the first-minute promise: windowed
//! gauges for both rankers on /metrics within 30 s, a status page with
//! charts, the candidate's degradation decided on it while the A/A arm
//! stays quiet, reject counters with data, and a clean stop: on Ctrl-C (SIGINT),
//! as the demo's banner says, and after `--duration`.

use crate::common::{exited_within, free_port, http_get, signal, sum_of, wait_until};
use std::io::Read;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// One demo at a time: two at once on a small shared machine slow each
/// other past the first-minute promise.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn demo_shows_windowed_metrics_within_30_seconds() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let addr = format!("127.0.0.1:{}", free_port());
    let mut demo = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        // --duration only as a backstop: the test stops it with Ctrl-C.
        .args(["demo", "--listen", &addr, "--duration", "120", "--degrade-after", "10", "--report-every", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let started = Instant::now();
    // Every windowed family for both rankers, not the first exposition
    // with nDCG: a list whose shown results are all relevant or all not
    // has no AUC, so GAUC may trail nDCG by a few lists.
    let ready = |body: &str| {
        body.contains(r#"rankpulse_ndcg{k="10",window="1m",ranker="control""#)
            && body.contains(r#"rankpulse_ndcg{k="10",window="1m",ranker="candidate""#)
            && body.contains(r#"rankpulse_gauc{window="1m",ranker="control""#)
            && body.contains(r#"rankpulse_gauc{window="1m",ranker="candidate""#)
    };
    let mut found = None;
    while started.elapsed() < Duration::from_secs(30) {
        if let Ok((200, body)) = http_get(&addr, "/metrics")
            && ready(&body)
        {
            found = Some(body);
            break;
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    let body = found.unwrap_or_else(|| {
        let _ = demo.kill();
        panic!("no windowed nDCG and GAUC for both rankers within 30 s")
    });
    eprintln!("windowed gauges after {:?}", started.elapsed());
    assert!(sum_of(&body, "rankpulse_events_rejected_total") > 0.0, "the demo sends some invalid events");
    assert!(sum_of(&body, "rankpulse_gauc") > 0.0);
    // The status page charts what the daemon samples every 10 s: a line
    // (an SVG path) once a sample is in.
    let mut page = String::new();
    wait_until("a charted line on the status page", Duration::from_secs(20), || {
        page = match http_get(&addr, "/") {
            Ok((200, body)) => body,
            _ => String::new(),
        };
        page.contains("<path d=\"M")
    });
    assert!(page.contains("<svg") && page.contains("candidate") && page.contains("control"), "{page}");
    // The decision: the candidate degrades 20 s in, and the status page
    // says so in words, valid at any time; the A/A arm (the control under
    // another name), compared at the same moment, is not coloured.
    wait_until("the status page to say the candidate is worse", Duration::from_secs(90), || {
        page = match http_get(&addr, "/") {
            Ok((200, body)) => body,
            _ => String::new(),
        };
        page.contains(r#"<span class="worse">candidate worse than control: nDCG@10 "#)
    });
    assert!(page.contains("control-aa"), "{page}");
    // Position-debiased clicks: propensities estimated from the randomized
    // searches (rank 2 examined less than rank 1), IPS clicks per arm.
    wait_until("debiased clicks on the status page", Duration::from_secs(30), || {
        page = match http_get(&addr, "/") {
            Ok((200, body)) => body,
            _ => String::new(),
        };
        page.contains("<h2>Clicks, position-debiased</h2>")
            && page.contains(", 2:&nbsp;0.")
            && page.contains("<tr><td>candidate</td><td>")
            && !page.contains("no propensity yet")
    });
    assert!(
        !page.contains(r#"<span class="worse">control-aa"#) && !page.contains(r#"<span class="better">control-aa"#),
        "the A/A arm is coloured: {page}"
    );
    let body = http_get(&addr, "/metrics").unwrap().1;
    assert!(sum_of(&body, r#"rankpulse_compare_sequential_upper{ranker="candidate",metric="ndcg",k="10"}"#) < 0.0);
    // Every family the demo exposes (quality, comparisons, interleaving,
    // debiased clicks, the daemon's health) as docs/metrics.md's reference
    // (src/series.rs) defines it.
    if let Err(problems) = rankpulse::series::check(&body, &["ranker", "market"], Some("ranker")) {
        panic!("{problems:#?}");
    }
    // Ctrl-C: the ordered stop, well before the backstop.
    let (status, stdout) = interrupted(demo);
    assert!(status.success(), "{status:?}");
    assert!(stdout.contains("status page  http://"), "{stdout}");
    assert!(stdout.contains("candidate:") && stdout.contains("nDCG@10"), "{stdout}");
}

/// `rankpulse demo --format ubi`: the same searches as OpenSearch UBI
/// queries and events on topics of those formats give windowed gauges for
/// both rankers, and the page views the UBI traffic carries are counted as
/// ignored, not rejected.
#[test]
fn the_ubi_demo_shows_windowed_metrics() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let addr = format!("127.0.0.1:{}", free_port());
    let demo = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        // --duration only as a backstop: the test stops it with Ctrl-C.
        .args(["demo", "--format", "ubi", "--listen", &addr, "--duration", "120", "--report-every", "5"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut body = String::new();
    wait_until("windowed nDCG of both rankers from UBI topics", Duration::from_secs(30), || {
        body = match http_get(&addr, "/metrics") {
            Ok((200, b)) => b,
            _ => String::new(),
        };
        body.contains(r#"rankpulse_ndcg{k="10",window="1m",ranker="control""#)
            && body.contains(r#"rankpulse_ndcg{k="10",window="1m",ranker="candidate""#)
            && sum_of(&body, "rankpulse_events_ignored_total") > 0.0
    });
    assert!(body.contains(r#"topic="ubi_events""#) && body.contains(r#"topic="ubi_queries""#), "{body}");
    assert!(sum_of(&body, r#"rankpulse_events_ignored_total{reason="unmapped_action"}"#) > 0.0);
    let (status, stdout) = interrupted(demo);
    assert!(status.success(), "{status:?}");
    assert!(stdout.contains(r#"topics ["ubi_queries", "ubi_events"]"#), "{stdout}");
}

/// `--duration` stops the demo by itself: it exits 0, with its banner
/// printed, no sooner than the duration and well within 20 s.
#[test]
fn the_demo_stops_by_itself_after_its_duration() {
    let addr = format!("127.0.0.1:{}", free_port());
    let started = Instant::now();
    let mut demo = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["demo", "--listen", &addr, "--duration", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let status = exited_within(&mut demo, Duration::from_secs(20), "of its start with --duration 3");
    assert!(status.success(), "{status:?}");
    assert!(started.elapsed() >= Duration::from_secs(3), "stopped after {:?}", started.elapsed());
    let stdout = stdout_of(demo);
    assert!(stdout.contains("status page  http://"), "{stdout}");
}

/// Ctrl-C (SIGINT), as the banner says: the demo's ordered stop, well
/// within 10 s. Its exit status and what it printed.
fn interrupted(mut demo: Child) -> (ExitStatus, String) {
    let status = signal(&mut demo, "INT", Duration::from_secs(10));
    (status, stdout_of(demo))
}

/// All the exited `demo` printed (a few lines: the pipe never fills).
fn stdout_of(mut demo: Child) -> String {
    let mut stdout = String::new();
    demo.stdout.take().unwrap().read_to_string(&mut stdout).unwrap();
    stdout
}
