//! The shipped monitoring against a real Prometheus: `rankpulse demo` (a
//! candidate ranker that degrades) is scraped by Prometheus with the alert
//! rules of `deploy/prometheus/rankpulse-rules.yml`. Proves: the quality-drop
//! alert fires for the degraded ranker, no alert fires for the ranker that
//! did not degrade, and every query of the shipped Grafana dashboard
//! (`deploy/grafana/queries.txt`, extracted from the dashboard JSON) returns
//! data.
//!
//! The rules are the shipped expressions with their time ranges, offsets,
//! `for` durations and evaluation interval scaled down (15m → 30s, the
//! quality drop's hour against the same hour one and two weeks before →
//! 20 s against 60 s and 90 s before, …) so that a regression shows within
//! two minutes; the thresholds are unchanged, the quality drop's list
//! guards scaled with its windows (500 lists an hour → 100 in 20 s).
//!
//! The Prometheus tier: ignored by a plain `cargo test`; with `--ignored` it
//! needs Prometheus (`prometheus` on PATH, Debian's package) and fails
//! without it.

use crate::common::{Guard, free_port, http_get};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The shipped rules with durations scaled for a two-minute test.
fn scaled_rules(shipped: &str) -> String {
    let mut s = shipped.to_string();
    for (from, to) in [
        ("[15m]", "[30s]"),
        ("[10m]", "[20s]"),
        ("[1d]", "[4m]"),
        ("[5m]", "[20s]"),
        ("[1h]", "[20s]"),
        ("[6h]", "[40s]"),
        (" offset 1w", " offset 60s"),
        (" offset 2w", " offset 90s"),
        ("increase1h >= 500", "increase1h >= 100"),
        ("last_weeks_1h >= 1000", "last_weeks_1h >= 200"),
        ("increase6h >= 2000", "increase6h >= 200"),
        ("last_weeks_6h >= 4000", "last_weeks_6h >= 400"),
        ("for: 15m", "for: 10s"),
        ("for: 10m", "for: 10s"),
        ("for: 5m", "for: 10s"),
        ("interval: 1m", "interval: 2s"),
    ] {
        s = s.replace(from, to);
    }
    s
}

fn url_encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn prometheus_json(addr: &str, path: &str) -> serde_json::Value {
    match http_get(addr, path) {
        Ok((200, body)) => serde_json::from_str(&body).unwrap_or(serde_json::Value::Null),
        _ => serde_json::Value::Null,
    }
}

/// Firing alerts as (alertname, labels).
fn firing(addr: &str) -> Vec<(String, serde_json::Value)> {
    let v = prometheus_json(addr, "/api/v1/alerts");
    v["data"]["alerts"]
        .as_array()
        .map(|alerts| {
            alerts
                .iter()
                .filter(|a| a["state"] == "firing")
                .map(|a| (a["labels"]["alertname"].as_str().unwrap_or("").to_string(), a["labels"].clone()))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[ignore = "Prometheus tier: needs prometheus on PATH, run with --ignored (.ci/run does)"]
fn regression_alert_fires_for_the_degraded_ranker_and_dashboards_have_data() {
    if let Err(e) = Command::new("prometheus").arg("--version").output() {
        panic!("the Prometheus tier needs `prometheus` on PATH (apt-get install prometheus): {e}");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("rankpulse-prom-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let demo_addr = format!("127.0.0.1:{}", free_port());
    let prom_addr = format!("127.0.0.1:{}", free_port());
    let shipped = std::fs::read_to_string(root.join("deploy/prometheus/rankpulse-rules.yml")).unwrap();
    std::fs::write(dir.join("rules.yml"), scaled_rules(&shipped)).unwrap();
    std::fs::write(
        dir.join("prometheus.yml"),
        format!(
            "global:\n  scrape_interval: 2s\n  evaluation_interval: 2s\nrule_files:\n  - rules.yml\n\
             scrape_configs:\n  - job_name: rankpulse\n    static_configs:\n      - targets: ['{demo_addr}']\n"
        ),
    )
    .unwrap();

    let _demo = Guard(
        Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .args(["demo", "--listen", &demo_addr, "--rate", "300", "--degrade-after", "60", "--duration", "400"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _prometheus = Guard(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={prom_addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );

    let started = Instant::now();
    let deadline = started + Duration::from_secs(240);
    let mut control_alerts = Vec::new();
    let fired = loop {
        let alerts = firing(&prom_addr);
        control_alerts.extend(alerts.iter().filter(|(_, l)| l["ranker"] == "control").cloned());
        if let Some(a) = alerts.iter().find(|(name, l)| name == "RankpulseQualityDrop" && l["ranker"] == "candidate") {
            break a.clone();
        }
        assert!(Instant::now() < deadline, "no RankpulseQualityDrop for the candidate after 240 s; firing: {alerts:?}");
        std::thread::sleep(Duration::from_secs(2));
    };
    eprintln!("RankpulseQualityDrop fired for {} after {:?}", fired.1, started.elapsed());
    // Let the comparison alert catch up, then check nothing fires for control.
    let compare_deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let alerts = firing(&prom_addr);
        control_alerts.extend(alerts.iter().filter(|(_, l)| l["ranker"] == "control").cloned());
        if alerts.iter().any(|(n, _)| n == "RankpulseCandidateWorseThanControl") || Instant::now() > compare_deadline {
            assert!(
                alerts.iter().any(|(n, _)| n == "RankpulseCandidateWorseThanControl"),
                "candidate vs control did not fire; firing: {alerts:?}"
            );
            break;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
    assert!(control_alerts.is_empty(), "alerts fired for the control ranker: {control_alerts:?}");

    // Every dashboard query returns data from this Prometheus.
    let queries = std::fs::read_to_string(root.join("deploy/grafana/queries.txt")).unwrap();
    let mut empty = Vec::new();
    for q in queries.lines().map(str::trim).filter(|q| !q.is_empty() && !q.starts_with('#')) {
        let v = prometheus_json(&prom_addr, &format!("/api/v1/query?query={}", url_encode(q)));
        let n = v["data"]["result"].as_array().map_or(0, Vec::len);
        if v["status"] != "success" || n == 0 {
            empty.push(format!("{q}\n    -> {}", v.to_string().chars().take(200).collect::<String>()));
        }
    }
    assert!(empty.is_empty(), "dashboard queries without data:\n{}", empty.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
