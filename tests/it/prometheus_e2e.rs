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
//! The secured endpoint (`http.web_config`) against the same Prometheus and
//! its promtool: the shipped scrape job (`deploy/prometheus/prometheus.yml`:
//! https, a CA, basic auth) scrapes data, and jobs with a client
//! certificate, a wrong password, plain HTTP or another CA's certificate
//! get the answer they should; rankpulse and exporter-toolkit (promtool
//! check web-config) accept and refuse the same web configs, where
//! rankpulse does not refuse on purpose.
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

/// Prometheus on `addr` with `dir/prometheus.yml`, its data in `dir/data`.
fn start_prometheus(dir: &Path, addr: &str) -> Guard {
    Guard(
        Command::new("prometheus")
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    )
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
    let _prometheus = start_prometheus(&dir, &prom_addr);

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

/// Prometheus's view of each target of `job`: (health, lastError).
fn target_health(addr: &str, job: &str) -> Option<(String, String)> {
    let v = prometheus_json(addr, "/api/v1/targets");
    let target = v["data"]["activeTargets"].as_array()?.iter().find(|t| t["labels"]["job"] == job)?.clone();
    Some((target["health"].as_str()?.to_string(), target["lastError"].as_str().unwrap_or("").to_string()))
}

#[test]
#[ignore = "Prometheus tier: needs prometheus on PATH, run with --ignored (.ci/run does)"]
fn the_shipped_scrape_job_scrapes_over_tls_with_a_password_and_strangers_are_refused() {
    use crate::secured_http::{Pki, temp_dir};
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pki = Pki::new();
    let dir = temp_dir("prom-secured");
    pki.write(&dir);
    let certs = dir.join("current");
    std::fs::write(certs.join("ca.crt"), &pki.ca).unwrap();
    std::fs::write(certs.join("password"), "scrape-secret").unwrap();
    std::fs::write(certs.join("wrong"), "guess").unwrap();
    let stranger = dir.join("stranger");
    std::fs::create_dir_all(&stranger).unwrap();
    std::fs::write(stranger.join("client.crt"), &pki.stranger.cert).unwrap();
    std::fs::write(stranger.join("client.key"), &pki.stranger.key).unwrap();
    std::fs::write(
        dir.join("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: current/server.pem\n  key_file: current/server.key\n  \
             client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: current/ca.pem\n\
             basic_auth_users:\n  prometheus: {}\n",
            bcrypt::hash("scrape-secret", 10).unwrap()
        ),
    )
    .unwrap();
    let demo_addr = format!("127.0.0.1:{}", free_port());
    let prom_addr = format!("127.0.0.1:{}", free_port());

    // The shipped configuration, its paths and target pointed here, its
    // intervals shortened; the rules beside it as it expects them.
    let shipped = std::fs::read_to_string(root.join("deploy/prometheus/prometheus.yml")).unwrap();
    std::fs::copy(root.join("deploy/prometheus/rankpulse-rules.yml"), dir.join("rankpulse-rules.yml")).unwrap();
    let here = shipped
        .replace("/etc/prometheus/rankpulse/", &format!("{}/", certs.display()))
        .replace("rankpulse:9464", &demo_addr)
        .replace("15s", "2s")
        .replace("scrape_timeout: 10s", "scrape_timeout: 2s");
    let (head, job) = here.split_once("scrape_configs:\n").expect("the shipped file has scrape_configs last");
    assert!(job.contains("scheme: https") && job.contains("basic_auth:") && job.contains("tls_config:"), "{job}");
    let variant = |name: &str, edit: &dyn Fn(String) -> String| {
        edit(job.replace("job_name: rankpulse", &format!("job_name: {name}")))
    };
    let mtls = |j: String| {
        j.replace("# cert_file: ", "cert_file: ")
            .replace("# key_file: ", "key_file: ")
            .replace("client.crt", "client.pem")
    };
    let jobs = [
        job.to_string(),
        variant("mtls", &mtls),
        variant("wrong-password", &|j| j.replace("/password", "/wrong")),
        variant("plain-http", &|j| j.replace("scheme: https", "scheme: http")),
        variant("stranger", &|j| {
            mtls(j)
                .replace(&format!("{}/client.pem", certs.display()), &format!("{}/client.crt", stranger.display()))
                .replace(&format!("{}/client.key", certs.display()), &format!("{}/client.key", stranger.display()))
        }),
    ];
    std::fs::write(dir.join("prometheus.yml"), format!("{head}scrape_configs:\n{}", jobs.concat())).unwrap();
    let check = Command::new("promtool").arg("check").arg("config").arg(dir.join("prometheus.yml")).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&[check.stdout, check.stderr].concat()));

    let _demo = Guard(
        Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .args(["demo", "--listen", &demo_addr, "--duration", "300", "--report-every", "60"])
            .arg("--web.config.file")
            .arg(dir.join("web.yml"))
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let _prometheus = start_prometheus(&dir, &prom_addr);
    let expected = [
        ("rankpulse", "up", ""),
        ("mtls", "up", ""),
        ("wrong-password", "down", "401 Unauthorized"),
        ("plain-http", "down", "400 Bad Request"),
        ("stranger", "down", "tls"),
    ];
    let mut seen = Vec::new();
    crate::common::wait_until("every job scraped as expected", Duration::from_secs(120), || {
        seen = expected.iter().map(|(job, ..)| target_health(&prom_addr, job)).collect();
        expected.iter().zip(&seen).all(|((_, health, error), got)| {
            got.as_ref().is_some_and(|(h, e)| h == health && e.to_lowercase().contains(&error.to_lowercase()))
        })
    });
    for ((job, ..), got) in expected.iter().zip(&seen) {
        eprintln!("secured scrape: job {job}: {got:?}");
    }
    // The data came through the shipped job.
    let q = "rankpulse_lists_finalized_total{job=\"rankpulse\"}";
    let mut n = 0;
    crate::common::wait_until("the shipped job's data in Prometheus", Duration::from_secs(60), || {
        let v = prometheus_json(&prom_addr, &format!("/api/v1/query?query={}", url_encode(q)));
        n = v["data"]["result"].as_array().map_or(0, Vec::len);
        n > 0
    });
    let _ = std::fs::remove_dir_all(&dir);
}

/// `promtool check web-config` (exporter-toolkit, the reference reader of
/// the format) and rankpulse on the same files: each accepts or refuses
/// alike, except where rankpulse refuses on purpose (a restriction it does
/// not implement, a TLS version rustls does not speak), listed here. The
/// web config in deploy/kubernetes/rankpulse.yaml is one of the files.
#[test]
#[ignore = "Prometheus tier: needs prometheus on PATH, run with --ignored (.ci/run does)"]
fn rankpulse_reads_web_configs_as_exporter_toolkit_does() {
    use crate::secured_http::{Pki, temp_dir};
    use rankpulse::http::web_config::WebConfig;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let pki = Pki::new();
    let dir = temp_dir("web-config-parity");
    for (name, text) in [("tls.crt", &pki.server.cert), ("tls.key", &pki.server.key), ("ca.crt", &pki.ca)] {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let hash = bcrypt::hash("pw", 10).unwrap();
    let tls = "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n";
    let manifest = std::fs::read_to_string(root.join("deploy/kubernetes/rankpulse.yaml")).unwrap();
    let shipped: String = manifest
        .split_once("  web.yml: |\n")
        .expect("the manifest's web.yml")
        .1
        .lines()
        .take_while(|l| l.starts_with("    "))
        .map(|l| format!("{}\n", &l[4..]))
        .collect();
    // (file, whether rankpulse refuses it on purpose, whatever
    // exporter-toolkit does)
    let cases: Vec<(String, bool)> = vec![
        (shipped, false),
        (String::new(), false),
        (format!("basic_auth_users:\n  alice: {hash}\n"), false),
        ("basic_auth_users:\n  alice: plain\n".into(), false),
        (tls.into(), false),
        (format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n"), false),
        (format!("{tls}  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: ca.crt\n"), false),
        (format!("{tls}  client_auth_type: RequireAnyClientCert\n"), false),
        (format!("{tls}  client_auth_type: Sometimes\n"), false),
        (format!("{tls}  client_ca_file: ca.crt\n"), false),
        (format!("{tls}  min_version: TLS13\n"), false),
        (format!("{tls}  min_version: TLS14\n"), false),
        // Go takes it and then fails every handshake.
        (format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"), true),
        ("tls_server_config:\n  cert_file: tls.crt\n".into(), false),
        ("tls_server_config:\n  cert_file: missing.crt\n  key_file: tls.key\n".into(), false),
        ("tls_server_config:\n  cert_file: tls.crt\n  key_file: ca.crt\n".into(), false),
        (format!("{tls}  unknown_key: 1\n"), false),
        ("http_server_config:\n  headers:\n    X-Frame-Options: deny\n".into(), false),
        ("http_server_config:\n  headers:\n    X-Frame-Options: always\n".into(), false),
        ("http_server_config:\n  headers:\n    Server: me\n".into(), false),
        ("nonsense: 1\n".into(), false),
        (format!("{tls}  min_version: TLS10\n"), true),
        (format!("{tls}  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256]\n"), true),
        (format!("{tls}  curve_preferences: [X25519]\n"), true),
        // Newer than the exporter-toolkit of Debian's promtool 2.42, which
        // refuses it as unknown.
        (
            format!(
                "{tls}  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n  client_allowed_sans: [a]\n"
            ),
            true,
        ),
    ];
    let mut differ = Vec::new();
    for (i, (text, on_purpose)) in cases.iter().enumerate() {
        let path = dir.join(format!("web{i}.yml"));
        std::fs::write(&path, text).unwrap();
        let promtool = Command::new("promtool").arg("check").arg("web-config").arg(&path).output().unwrap();
        let theirs = promtool.status.success();
        let ours = WebConfig::load(&path);
        let want_ours = theirs && !on_purpose;
        if ours.is_ok() != want_ours {
            differ.push(format!(
                "{text}→ promtool {}: {}rankpulse {:?}",
                if theirs { "accepts" } else { "refuses" },
                String::from_utf8_lossy(&promtool.stdout),
                ours.map(|_| "accepts").map_err(|e| e.to_string())
            ));
        }
    }
    assert!(differ.is_empty(), "rankpulse and exporter-toolkit disagree:\n{}", differ.join("\n"));
    let _ = std::fs::remove_dir_all(&dir);
}
