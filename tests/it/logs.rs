//! The daemon's log as an operator sees it: against a broker port nobody
//! listens on, librdkafka retries several times a second, and each retry
//! is an error it reports; the log must stay a handful of lines, with the
//! outage said once. With `log.format = "json"` every line is one JSON
//! object. These need no broker: the port is closed.

use crate::common::{Guard, free_port, metrics, sum_of, wait_until};
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `rankpulse run` against a closed port, its stderr piped.
fn daemon_against_a_closed_port(extra_env: &[(&str, &str)]) -> Guard {
    let closed = free_port();
    let http = free_port();
    Guard(
        Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .arg("run")
            .env("RANKPULSE__KAFKA__BROKERS", format!("127.0.0.1:{closed}"))
            .env("RANKPULSE__HTTP__LISTEN", format!("127.0.0.1:{http}"))
            .env_remove("RUST_LOG")
            .envs(extra_env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rankpulse run"),
    )
}

/// SIGTERM, the exit within 10 s, then everything the daemon logged.
fn stop_and_read_log(daemon: &mut Guard) -> String {
    signal_and_read_log(daemon, "TERM").1
}

/// `signal`, the exit within 10 s, its status and everything the daemon logged.
fn signal_and_read_log(daemon: &mut Guard, signal: &str) -> (std::process::ExitStatus, String) {
    let status = crate::common::signal(&mut daemon.0, signal, Duration::from_secs(10));
    let mut log = String::new();
    daemon.0.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    (status, log)
}

#[test]
fn twenty_seconds_against_a_closed_port_log_a_handful_of_lines() {
    let mut daemon = daemon_against_a_closed_port(&[]);
    // The span is what is measured, not a wait for something to happen.
    std::thread::sleep(Duration::from_secs(20));
    let log = stop_and_read_log(&mut daemon);
    let lines: Vec<&str> = log.lines().collect();
    // Startup (version, what it consumes), librdkafka's two alternating
    // errors once each, the outage, its reminder at 10 s, the shutdown
    // and its summary.
    assert!(lines.len() <= 11, "{} lines in 20 s:\n{log}", lines.len());
    // Someone who started it without a broker is told, within seconds and
    // once in 20 s, what it waits for and how to check.
    let waiting: Vec<&&str> = lines.iter().filter(|l| l.contains("still waiting for a Kafka broker at")).collect();
    assert_eq!(waiting.len(), 1, "the reminder at 10 s, once:\n{log}");
    assert!(waiting[0].contains("after 10 s") && waiting[0].contains("/readyz"), "{log}");
    let refused: Vec<&&str> = lines.iter().filter(|l| l.contains("Connection refused")).collect();
    assert_eq!(refused.len(), 1, "librdkafka's error is shown, once:\n{log}");
    assert!(refused[0].contains("WARN"), "a failed connection is a warning:\n{log}");
    let outage: Vec<&&str> = lines.iter().filter(|l| l.contains("no Kafka broker reachable")).collect();
    assert_eq!(outage.len(), 1, "the outage, which began before any connection, is said once:\n{log}");
    assert!(outage[0].contains("WARN"), "an outage is a warning:\n{log}");
}

#[test]
fn json_logs_are_one_object_per_line() {
    let mut daemon = daemon_against_a_closed_port(&[("RANKPULSE__LOG__FORMAT", "json")]);
    // Until librdkafka's first failed connection is logged.
    let started = Instant::now();
    let mut stderr = daemon.0.stderr.take().unwrap();
    let mut log = String::new();
    let mut buf = [0u8; 4096];
    while !log.contains("Connection refused") {
        assert!(started.elapsed() < Duration::from_secs(30), "no failed connection logged in 30 s:\n{log}");
        let n = stderr.read(&mut buf).unwrap();
        assert!(n > 0, "stderr closed early:\n{log}");
        log.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    daemon.0.stderr = Some(stderr);
    log.push_str(&stop_and_read_log(&mut daemon));
    let mut levels = Vec::new();
    for line in log.lines() {
        let object: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON object ({e}): {line}"));
        levels.push(object["level"].as_str().unwrap_or_else(|| panic!("no level: {line}")).to_string());
        assert!(object["fields"]["message"].is_string(), "no message: {line}");
    }
    assert!(levels.iter().any(|l| l == "WARN") && levels.iter().any(|l| l == "INFO"), "{levels:?}\n{log}");
}

/// `log.level` decides what is logged, and `RUST_LOG`, when set, wins over
/// it (docs/operations.md). Against a closed port at `error`: once the
/// outage is counted (its warning, and librdkafka's failed connection
/// before it, would have been logged by then), the log holds no INFO or
/// WARN line; the same run with `RUST_LOG=info` holds both. A `RUST_LOG`
/// that is no filter leaves `log.level` in charge (at `warn`: WARN lines,
/// no INFO) and says so.
#[test]
fn log_level_filters_the_log_and_rust_log_wins() {
    for (level, rust_log) in [("error", None), ("error", Some("info")), ("warn", Some("[{bad"))] {
        let addr = format!("127.0.0.1:{}", free_port());
        let mut env = vec![("RANKPULSE__LOG__LEVEL", level), ("RANKPULSE__HTTP__LISTEN", addr.as_str())];
        env.extend(rust_log.map(|r| ("RUST_LOG", r)));
        let mut daemon = daemon_against_a_closed_port(&env);
        wait_until("the outage counted", Duration::from_secs(60), || {
            sum_of(&metrics(&addr), "rankpulse_kafka_outages_total") >= 1.0
        });
        let log = stop_and_read_log(&mut daemon);
        let has = |level: &str| log.lines().any(|l| l.contains(level));
        match rust_log {
            None => assert!(!has("INFO") && !has("WARN"), "log.level = error let more through:\n{log}"),
            Some("info") => assert!(has("INFO") && has("WARN"), "RUST_LOG=info did not win over log.level:\n{log}"),
            Some(_) => {
                assert!(!has("INFO") && has("WARN"), "log.level = warn did not apply:\n{log}");
                assert!(has("RUST_LOG is not a log filter; log.level applies"), "{log}");
            }
        }
    }
}

/// SIGINT (Ctrl-C in a terminal) is the same ordered shutdown as SIGTERM.
#[test]
fn sigint_is_the_ordered_shutdown() {
    let http = free_port();
    let mut daemon = Guard(
        Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .arg("run")
            .env("RANKPULSE__KAFKA__BROKERS", format!("127.0.0.1:{}", free_port()))
            .env("RANKPULSE__HTTP__LISTEN", format!("127.0.0.1:{http}"))
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rankpulse run"),
    );
    // Its handlers are installed once it serves.
    let addr = format!("127.0.0.1:{http}");
    wait_until("/healthz to answer", Duration::from_secs(30), || {
        crate::common::http_get(&addr, "/healthz").is_ok_and(|(status, _)| status == 200)
    });
    let (status, log) = signal_and_read_log(&mut daemon, "INT");
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("shutting down"), "{log}");
}

/// SIGHUP (a closed terminal, a supervisor) is the ordered shutdown, not
/// the instant death that is its default action; and an HTTP client that
/// never finishes its request does not hold the exit: the server is given
/// a moment, then dropped.
#[test]
fn sighup_with_a_half_sent_request_still_exits_in_order() {
    use std::io::Write;
    use std::os::unix::process::CommandExt;
    let http = free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_rankpulse"));
    command
        .arg("run")
        .env("RANKPULSE__KAFKA__BROKERS", format!("127.0.0.1:{}", free_port()))
        .env("RANKPULSE__HTTP__LISTEN", format!("127.0.0.1:{http}"))
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SIGHUP as a terminal's child gets it, whatever this test inherited
    // (under `nohup` it is ignored, and rankpulse then keeps ignoring it).
    // SAFETY: only resets a signal disposition between fork and exec.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut daemon = Guard(command.spawn().expect("start rankpulse run"));
    let addr = format!("127.0.0.1:{http}");
    wait_until("/healthz to answer", Duration::from_secs(30), || {
        crate::common::http_get(&addr, "/healthz").is_ok_and(|(status, _)| status == 200)
    });
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
    let (status, log) = signal_and_read_log(&mut daemon, "HUP");
    assert!(status.success(), "{status:?}\n{log}");
    assert!(log.contains("shutting down"), "{log}");
    assert!(log.contains("HTTP connections still open"), "{log}");
    drop(slow);
}
