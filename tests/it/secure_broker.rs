//! The secured-broker tier: `rankpulse run` against a real broker over TLS,
//! mutual TLS and SASL (PLAIN, SCRAM-SHA-256/512, OAUTHBEARER through an
//! OIDC token endpoint), and reading topics written with every compression
//! codec, and the Kafka state backend (`state.backend = "kafka"`: its admin
//! client, producer and readers) over the same connections. Each accepted
//! case compares the daemon's counters with the batch engine (`replay` of
//! the same events); each refused case checks the error the user sees,
//! that `/readyz` says 503 and that the process stays up (with the Kafka
//! state backend, which needs its topic at start, that it exits with the
//! error).
//!
//! The setup, also documented in docs/testing.md:
//! - the broker: Tansu (memory storage) on a plain loopback port, advertising
//!   the outermost port of the chain below, so that metadata sends clients
//!   back through it;
//! - TLS: Debian's `stunnel4` in front, with a CA and certificates made by
//!   the `openssl` command for each test (Tansu 0.6.0 lists `--cert` and
//!   `--key` but does not use them);
//! - SASL: `tests/support/kafka_auth_gateway.py` between stunnel and the
//!   broker (Tansu 0.6.0's memory storage keeps no SCRAM credentials and its
//!   PLAIN handshake fails; see the script's header).
//!
//! The tests are `#[ignore]`d so that a plain `cargo test` reports them as
//! ignored instead of passing them without a broker; `.ci/run` runs them with
//! `--ignored`, where a missing tool is a failure.

use crate::common::{
    Guard, IMPRESSIONS, JUDGMENTS, consumed, counter_lines, events, free_port, http_get, metrics, now_ms, ready,
    sigterm, start_tansu, sum_of, wait_until,
};
use rankpulse::config::Config;
use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::ClientContext;
use rdkafka::client::DefaultClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const DEAD_LETTERS: &str = "rankpulse-dead-letters";
const PARTITIONS: i32 = 2;
const GAP: &str = "2s";

/// A tool the tier needs, or a failure naming it: this tier runs only when
/// asked for (`--ignored`), so a missing tool is an error, not a skip.
fn tool(env: &str, fallback: &str) -> String {
    let path = std::env::var(env).unwrap_or_else(|_| fallback.to_string());
    let found = Command::new("sh").args(["-c", &format!("command -v {path}")]).stdout(Stdio::null()).status();
    assert!(found.is_ok_and(|s| s.success()), "the secured-broker tier needs {path} (set {env})");
    path
}

/// A scratch directory for one test's certificates and logs.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rankpulse-secure-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new(tool("RANKPULSE_OPENSSL", "openssl")).current_dir(dir).args(args).output().unwrap();
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

/// A CA, a server certificate for 127.0.0.1 and localhost, a client
/// certificate (mutual TLS), and a second CA that signed none of them.
fn make_pki(dir: &Path) {
    let days = ["-days", "2"];
    openssl(
        dir,
        &[
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem"][..],
            &days,
            &["-subj", "/CN=rankpulse test CA"],
        ]
        .concat(),
    );
    openssl(
        dir,
        &[
            &["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "other-ca.key", "-out", "other-ca.pem"][..],
            &days,
            &["-subj", "/CN=another CA"],
        ]
        .concat(),
    );
    std::fs::write(dir.join("server.ext"), "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        .unwrap();
    std::fs::write(dir.join("client.ext"), "extendedKeyUsage=clientAuth\n").unwrap();
    for (name, cn) in [("server", "localhost"), ("client", "rankpulse")] {
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{name}.key"),
                "-out",
                &format!("{name}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
        openssl(
            dir,
            &[
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.pem",
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                ][..],
                &["-out", &format!("{name}.pem"), "-extfile", &format!("{name}.ext")],
                &days,
            ]
            .concat(),
        );
    }
}

fn wait_for_port(what: &str, port: u16) {
    wait_until(what, Duration::from_secs(20), || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
}

/// What sits in front of the broker.
#[derive(Clone, Copy, PartialEq)]
enum Tls {
    None,
    Server,
    /// The client must present a certificate signed by the test CA.
    Mutual,
}

/// A broker with, optionally, the SASL gateway and stunnel in front.
struct Stack {
    _processes: Vec<Guard>,
    /// What clients use: the outermost port.
    bootstrap: String,
    dir: PathBuf,
    /// The OAuth token endpoint, when the gateway serves one.
    token_url: Option<String>,
}

const USER: &str = "rankpulse";
const PASSWORD: &str = "pA55-w0rd-not-to-be-logged";
const OAUTH_CLIENT: &str = "rankpulse-client";
const OAUTH_SECRET: &str = "client-s3cret-not-to-be-logged";

impl Stack {
    fn start(name: &str, tls: Tls, sasl: bool) -> Stack {
        let dir = scratch(name);
        let tansu = crate::common::tansu_binary();
        let broker_port = free_port();
        let gateway_port = if sasl { Some(free_port()) } else { None };
        let tls_port = if tls == Tls::None { None } else { Some(free_port()) };
        let outer = tls_port.or(gateway_port).unwrap_or(broker_port);
        let mut processes =
            vec![start_tansu(&tansu, broker_port, outer, &[IMPRESSIONS, JUDGMENTS, DEAD_LETTERS], PARTITIONS)];
        let mut token_url = None;
        if let Some(port) = gateway_port {
            let token_port = free_port();
            let log = std::fs::File::create(dir.join("gateway.log")).unwrap();
            let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/support/kafka_auth_gateway.py");
            let credentials = format!("{USER}:{PASSWORD}");
            processes.push(Guard(
                Command::new(tool("RANKPULSE_PYTHON", "python3"))
                    .arg(script)
                    .args(["--listen", &port.to_string(), "--upstream", &format!("127.0.0.1:{broker_port}")])
                    .args(["--plain", &credentials, "--scram", &credentials])
                    .args(["--oauth-secret", "gateway-signing-key", "--token-port", &token_port.to_string()])
                    .args(["--oauth-client", &format!("{OAUTH_CLIENT}:{OAUTH_SECRET}")])
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("start the SASL gateway"),
            ));
            wait_for_port("the SASL gateway", port);
            wait_for_port("the token endpoint", token_port);
            token_url = Some(format!("http://127.0.0.1:{token_port}/token"));
        }
        if let Some(port) = tls_port {
            make_pki(&dir);
            let target = gateway_port.unwrap_or(broker_port);
            let mut conf = format!(
                "foreground = yes\npid =\ndebug = 4\n[kafka]\naccept = 127.0.0.1:{port}\nconnect = 127.0.0.1:{target}\ncert = {d}/server.pem\nkey = {d}/server.key\n",
                d = dir.display()
            );
            if tls == Tls::Mutual {
                conf += &format!("verifyChain = yes\nrequireCert = yes\nCAfile = {}/ca.pem\n", dir.display());
            }
            std::fs::write(dir.join("stunnel.conf"), conf).unwrap();
            let log = std::fs::File::create(dir.join("stunnel.log")).unwrap();
            processes.push(Guard(
                Command::new(tool("RANKPULSE_STUNNEL", "stunnel4"))
                    .arg(dir.join("stunnel.conf"))
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("start stunnel"),
            ));
            wait_for_port("stunnel", port);
        }
        Stack { _processes: processes, bootstrap: format!("127.0.0.1:{outer}"), dir, token_url }
    }

    fn path(&self, file: &str) -> String {
        self.dir.join(file).display().to_string()
    }
}

/// librdkafka properties for one way of connecting, as `(key, value)`.
type Properties = Vec<(&'static str, String)>;

fn tls_properties(stack: &Stack, ca: &str) -> Properties {
    vec![("security.protocol", "SSL".into()), ("ssl.ca.location", stack.path(ca))]
}

fn sasl_properties(stack: &Stack, mechanism: &str, password: &str) -> Properties {
    vec![
        ("security.protocol", "SASL_SSL".into()),
        ("ssl.ca.location", stack.path("ca.pem")),
        ("sasl.mechanism", mechanism.into()),
        ("sasl.username", USER.into()),
        ("sasl.password", password.into()),
    ]
}

/// Sends the events keyed by session with `compression` and the connection
/// `properties`, and waits for every acknowledgement. A failure shows what
/// the producer's librdkafka logged and the tail of the gateway's and
/// stunnel's logs: a stalled handshake is otherwise a bare timeout.
fn produce_through(stack: &Stack, properties: &Properties, compression: &str, evs: &[(String, String)]) {
    if let Err(e) = produce_to(&stack.bootstrap, properties, compression, evs) {
        let tail = |file: &str| {
            let text = std::fs::read_to_string(stack.dir.join(file)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(40)..].join("\n")
        };
        panic!("{e}\n-- gateway.log (tail):\n{}\n-- stunnel.log (tail):\n{}", tail("gateway.log"), tail("stunnel.log"));
    }
}

/// A producer's librdkafka log lines and failed deliveries, the last
/// [`Recorded::KEPT`] of them, for a failure to show.
#[derive(Default)]
struct Recorded(Mutex<VecDeque<String>>);

impl Recorded {
    const KEPT: usize = 200;

    fn push(&self, line: String) {
        let mut lines = self.0.lock().unwrap();
        if lines.len() == Self::KEPT {
            lines.pop_front();
        }
        lines.push_back(line);
    }
}

impl ClientContext for Recorded {
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        self.push(format!("{level:?} {fac}: {log_message}"));
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.push(format!("error {error}: {reason}"));
    }
}

impl ProducerContext for Recorded {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.push(format!("delivery failed: {e}"));
        }
    }
}

/// As [`produce`], to the broker at `bootstrap` (from another thread); a
/// timeout or a failed delivery is an error carrying the producer's log.
fn produce_to(
    bootstrap: &str,
    properties: &Properties,
    compression: &str,
    evs: &[(String, String)],
) -> Result<(), String> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", bootstrap).set("compression.type", compression).set("linger.ms", "20");
    // The connection's steps, for a failure to show.
    cc.set("debug", "broker,security").set_log_level(RDKafkaLogLevel::Debug);
    for (k, v) in properties {
        cc.set(*k, v);
    }
    let producer: BaseProducer<Recorded> = cc.create_with_context(Recorded::default()).expect("create the producer");
    let started = Instant::now();
    for (session, json) in evs {
        let topic = if json.contains(r#""type":"judgment""#) { JUDGMENTS } else { IMPRESSIONS };
        let mut record = BaseRecord::to(topic).key(session.as_str()).payload(json.as_str());
        while let Err((_, r)) = producer.send(record) {
            record = r;
            producer.poll(Duration::from_millis(10));
        }
    }
    let flushed = producer.flush(Duration::from_secs(60));
    // Log lines and delivery reports arrive through the queue poll serves.
    producer.poll(Duration::from_millis(100));
    let lines = producer.context().0.lock().unwrap();
    let failed = lines.iter().filter(|l| l.starts_with("delivery failed")).count();
    match flushed {
        Ok(()) if failed == 0 => Ok(()),
        outcome => Err(format!(
            "{} events to {bootstrap}: {outcome:?} after {:?}, {failed} deliveries failed; librdkafka's last lines:\n{}",
            evs.len(),
            started.elapsed(),
            lines.iter().cloned().collect::<Vec<_>>().join("\n")
        )),
    }
}

/// The events of `n` lists whose sessions and rankers carry `tag`, so that
/// lists of different batches never merge and a batch's counters show apart.
fn tagged_events(n: usize, base_ms: i64, seed: u64, tag: &str) -> Vec<(String, String)> {
    events(n, base_ms, seed)
        .into_iter()
        .map(|(session, json)| {
            let json = json
                .replace(r#""session_id":"s"#, &format!(r#""session_id":"{tag}-s"#))
                .replace(r#""ranker":""#, &format!(r#""ranker":"{tag}-"#));
            (format!("{tag}-{session}"), json)
        })
        .collect()
}

/// A `rankpulse run` process whose stderr goes to `stack.dir/<name>.log`;
/// properties are given through the environment, as a container would.
fn spawn_secured_daemon(
    stack: &Stack,
    name: &str,
    properties: &Properties,
    extra: &[(&str, &str)],
) -> (Guard, String, PathBuf) {
    let http = format!("127.0.0.1:{}", free_port());
    let log = stack.dir.join(format!("{name}.log"));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rankpulse"));
    cmd.arg("run")
        .env("RANKPULSE__KAFKA__BROKERS", &stack.bootstrap)
        .env("RANKPULSE__KAFKA__GROUP_ID", format!("{name}-{}", std::process::id()))
        .env("RANKPULSE__HTTP__LISTEN", &http)
        .env("RANKPULSE__SESSION__GAP", GAP)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap());
    for (key, value) in properties {
        cmd.env(format!("RANKPULSE__KAFKA__PROPERTIES__{}", key.replace('.', "_").to_uppercase()), value);
    }
    for (k, v) in extra {
        cmd.env(k, v);
    }
    (Guard(cmd.spawn().expect("start rankpulse")), http, log)
}

/// The batch engine's counters for the same events.
fn reference(evs: &[(String, String)]) -> Vec<String> {
    let mut config = Config::default();
    config.session.gap = GAP.parse().unwrap();
    let input: String = evs.iter().map(|(_, j)| format!("{j}\n")).collect();
    counter_lines(&rankpulse::replay::replay(&config, input.as_bytes()).unwrap())
}

/// Waits until the daemon's counters equal the batch engine's on `evs`
/// with no list left open, then checks it is ready and has said no secret.
fn assert_exact(daemon: &mut Guard, http: &str, log: &Path, evs: &[(String, String)], extra_messages: f64) {
    let expected = reference(evs);
    let total = evs.len() as f64 + extra_messages;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut m = String::new();
    while Instant::now() < deadline {
        assert!(daemon.0.try_wait().unwrap().is_none(), "rankpulse exited: {}", std::fs::read_to_string(log).unwrap());
        m = metrics(http);
        if consumed(&m) >= total && counter_lines(&m) == expected && sum_of(&m, "rankpulse_open_lists") == 0.0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(consumed(&m), total, "messages consumed; log:\n{}", std::fs::read_to_string(log).unwrap());
    assert_eq!(counter_lines(&m), expected, "counters differ from replay of the same events");
    assert_eq!(http_get(http, "/readyz").unwrap().0, 200);
    assert_no_secret(log);
}

fn assert_no_secret(log: &Path) {
    let text = std::fs::read_to_string(log).unwrap();
    for secret in [PASSWORD, OAUTH_SECRET] {
        assert!(!text.contains(secret), "the log shows a secret:\n{text}");
    }
}

/// A daemon that cannot connect: it stays up, `/readyz` says 503 (and
/// `/healthz` 200), its log says `expected` within 30 s, in a handful of
/// lines however often librdkafka retries, and never a secret.
fn assert_refused(daemon: &mut Guard, http: &str, log: &Path, expected: &str) {
    wait_until("the daemon to serve HTTP", Duration::from_secs(20), || http_get(http, "/healthz").is_ok());
    wait_until(&format!("the log to say {expected:?}"), Duration::from_secs(30), || {
        std::fs::read_to_string(log).unwrap().contains(expected)
    });
    // librdkafka retries about 20 times a second; what the user reads
    // should stay a handful of lines.
    std::thread::sleep(Duration::from_secs(5));
    assert!(daemon.0.try_wait().unwrap().is_none(), "rankpulse exited: {}", std::fs::read_to_string(log).unwrap());
    assert_eq!(http_get(http, "/readyz").unwrap().0, 503, "ready without a working connection");
    assert_eq!(http_get(http, "/healthz").unwrap().0, 200);
    let text = std::fs::read_to_string(log).unwrap();
    let lines = text.lines().count();
    assert!(lines <= 12, "{lines} log lines for one failing connection:\n{text}");
    assert_no_secret(log);
    sigterm(daemon);
}

/// The payloads in the dead-letter topic, read with `properties`; waits
/// until there is at least one (30 s at most).
fn read_dead_letters(stack: &Stack, properties: &Properties) -> Vec<Vec<u8>> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &stack.bootstrap).set("group.id", "dead-letter-reader");
    cc.set("enable.auto.commit", "false");
    for (k, v) in properties {
        cc.set(*k, v);
    }
    let consumer: BaseConsumer = cc.create().expect("create the dead-letter reader");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(DEAD_LETTERS, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut payloads = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline && payloads.is_empty() {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            payloads.push(message.payload().unwrap_or_default().to_vec());
        }
    }
    payloads
}

/// The acceptance case: TLS with a CA made here, SCRAM-SHA-512 credentials
/// from the environment, a zstd-compressed topic; the dead-letter producer
/// connects the same way.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn tls_and_scram_read_a_zstd_topic_exactly() {
    let stack = Stack::start("scram", Tls::Server, true);
    let properties = sasl_properties(&stack, "SCRAM-SHA-512", PASSWORD);
    let evs = events(400, now_ms() - 60_000, 7);
    produce_through(&stack, &properties, "zstd", &evs);
    produce_through(&stack, &properties, "zstd", &[("bad".into(), "\u{1}not json".into())]);
    let (mut daemon, http, log) =
        spawn_secured_daemon(&stack, "scram", &properties, &[("RANKPULSE__KAFKA__DEAD_LETTER_TOPIC", DEAD_LETTERS)]);
    assert_exact(&mut daemon, &http, &log, &evs, 1.0);
    // Counted as sent once the broker acknowledges the copy.
    wait_until("the dead-letter copy acknowledged", Duration::from_secs(30), || {
        sum_of(&metrics(&http), r#"rankpulse_dead_letters_total{outcome="sent"}"#) == 1.0
    });
    // The copy is in the dead-letter topic: the producer connected over
    // TLS + SCRAM too.
    assert_eq!(read_dead_letters(&stack, &properties), vec![b"\x01not json".to_vec()]);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("librdkafka") && text.contains("zstd") && text.contains("sasl_scram"), "{text}");
    sigterm(&mut daemon);
}

/// gzip, snappy, lz4 and zstd batches of one topic, each written by a real
/// producer with that codec, add up to the batch engine's counters.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn every_compression_codec_is_read_exactly() {
    let stack = Stack::start("codecs", Tls::None, false);
    let mut all = Vec::new();
    for (i, codec) in ["none", "gzip", "snappy", "lz4", "zstd"].iter().enumerate() {
        // Disjoint event times per batch: each batch's lists close on their own.
        let evs = tagged_events(200, now_ms() - 600_000 + i as i64 * 60_000, 11 + i as u64, codec);
        produce_through(&stack, &Vec::new(), codec, &evs);
        all.extend(evs);
    }
    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "codecs", &Vec::new(), &[]);
    assert_exact(&mut daemon, &http, &log, &all, 0.0);
    sigterm(&mut daemon);
}

/// Mutual TLS: with the client certificate it reads exactly; without one
/// the handshake is refused and the daemon says so, not ready.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn mutual_tls_reads_exactly_and_refuses_a_client_without_certificate() {
    let stack = Stack::start("mtls", Tls::Mutual, false);
    let mut properties = tls_properties(&stack, "ca.pem");
    properties.push(("ssl.certificate.location", stack.path("client.pem")));
    properties.push(("ssl.key.location", stack.path("client.key")));
    let evs = events(300, now_ms() - 60_000, 13);
    produce_through(&stack, &properties, "lz4", &evs);
    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "mtls", &properties, &[]);
    assert_exact(&mut daemon, &http, &log, &evs, 0.0);
    sigterm(&mut daemon);

    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "mtls-nocert", &tls_properties(&stack, "ca.pem"), &[]);
    // TLS 1.3: the server's alert comes when the client first reads.
    assert_refused(&mut daemon, &http, &log, "alert certificate required");
}

/// A broker certificate from a CA the daemon does not trust: a clear error
/// that names the certificate check, 503 on /readyz, no crash.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn an_untrusted_broker_certificate_is_a_clear_error_and_not_ready() {
    let stack = Stack::start("wrong-ca", Tls::Server, false);
    let (mut daemon, http, log) =
        spawn_secured_daemon(&stack, "wrong-ca", &tls_properties(&stack, "other-ca.pem"), &[]);
    assert_refused(&mut daemon, &http, &log, "certificate verify failed");
}

/// Wrong SCRAM and PLAIN passwords: the error names the mechanism, never
/// the password; the daemon stays up and not ready.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn bad_credentials_name_the_mechanism_and_never_the_password() {
    let stack = Stack::start("bad-password", Tls::Server, true);
    for mechanism in ["SCRAM-SHA-256", "PLAIN"] {
        let wrong = format!("{PASSWORD}-wrong");
        let name = format!("bad-{}", mechanism.to_lowercase());
        let (mut daemon, http, log) =
            spawn_secured_daemon(&stack, &name, &sasl_properties(&stack, mechanism, &wrong), &[]);
        assert_refused(&mut daemon, &http, &log, &format!("invalid credentials with SASL mechanism {mechanism}"));
        let text = std::fs::read_to_string(&log).unwrap();
        assert!(!text.contains(&wrong), "the log shows the password:\n{text}");
    }
}

/// SCRAM-SHA-256 and PLAIN with good credentials, and OAUTHBEARER with a
/// token librdkafka fetches from an OIDC client-credentials endpoint: each
/// reads exactly. A wrong client secret is refused by the token endpoint.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn plain_scram_256_and_oauthbearer_oidc_read_exactly() {
    let stack = Stack::start("sasl", Tls::Server, true);
    let token_url = stack.token_url.clone().unwrap();
    let oidc = |secret: &str| -> Properties {
        vec![
            ("security.protocol", "SASL_SSL".into()),
            ("ssl.ca.location", stack.path("ca.pem")),
            ("sasl.mechanism", "OAUTHBEARER".into()),
            ("sasl.oauthbearer.method", "oidc".into()),
            ("sasl.oauthbearer.client.id", OAUTH_CLIENT.into()),
            ("sasl.oauthbearer.client.secret", secret.into()),
            ("sasl.oauthbearer.token.endpoint.url", token_url.clone()),
        ]
    };
    let mut produced = Vec::new();
    for (i, (name, properties)) in [
        ("plain", sasl_properties(&stack, "PLAIN", PASSWORD)),
        ("scram256", sasl_properties(&stack, "SCRAM-SHA-256", PASSWORD)),
        ("oidc", oidc(OAUTH_SECRET)),
    ]
    .into_iter()
    .enumerate()
    {
        let evs = tagged_events(150, now_ms() - 600_000 + i as i64 * 60_000, 17 + i as u64, name);
        produce_through(&stack, &properties, "gzip", &evs);
        produced.extend(evs);
        // Each daemon is a new group: it reads everything produced so far.
        let (mut daemon, http, log) = spawn_secured_daemon(&stack, name, &properties, &[]);
        assert_exact(&mut daemon, &http, &log, &produced, 0.0);
        sigterm(&mut daemon);
    }
    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "oidc-bad", &oidc("wrong-secret"), &[]);
    assert_refused(&mut daemon, &http, &log, "invalid_client");
}

const STATE_TOPIC: &str = "rankpulse-state";

/// An admin client connected with `properties`.
fn admin(stack: &Stack, properties: &Properties) -> AdminClient<DefaultClientContext> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &stack.bootstrap);
    for (k, v) in properties {
        cc.set(*k, v);
    }
    cc.create().expect("create the admin client")
}

/// Waits for an admin request on this thread.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(future)
}

/// The keys of every record in the state topic, read with `properties`.
fn state_keys(stack: &Stack, properties: &Properties) -> Vec<String> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", &stack.bootstrap).set("group.id", "state-reader");
    cc.set("enable.auto.commit", "false").set("enable.partition.eof", "true");
    for (k, v) in properties {
        cc.set(*k, v);
    }
    let consumer: BaseConsumer = cc.create().expect("create the state reader");
    let (_, high) = consumer.fetch_watermarks(STATE_TOPIC, 0, Duration::from_secs(30)).unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(STATE_TOPIC, 0, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut keys = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while (keys.len() as i64) < high {
        assert!(Instant::now() < deadline, "read {} of {high} state records in 30 s", keys.len());
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(200)) {
            keys.push(String::from_utf8_lossy(m.key().unwrap_or_default()).into_owned());
        }
    }
    keys
}

/// Issue 27's state topic over a secured connection: `state.backend =
/// "kafka"` with mutual TLS and SCRAM-SHA-512, the state topic absent at
/// start. The daemon creates it (checked over the same connection: one
/// partition, compacted) and checkpoints into it; killed with `kill -9`
/// while events flow, it restarts under the same `state.instance`,
/// publishes the checkpointed counters at once, and ends, after more
/// events, with counters equal to `replay` of all of them. A third start,
/// over OAUTHBEARER (OIDC), restores the same checkpoint and writes its
/// own. The admin client, the idempotent producer and the readers of the
/// state store all pass through stunnel (which refuses a client without
/// the certificate) and the SASL gateway (which refuses every request
/// before a login), so each got the `ssl.*` and `sasl.*` properties.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn kafka_state_backend_over_mutual_tls_scram_and_oauthbearer_restarts_exactly() {
    let stack = Stack::start("state", Tls::Mutual, true);
    let mut properties = sasl_properties(&stack, "SCRAM-SHA-512", PASSWORD);
    properties.push(("ssl.certificate.location", stack.path("client.pem")));
    properties.push(("ssl.key.location", stack.path("client.key")));
    let listed = |admin: &AdminClient<DefaultClientContext>| {
        let metadata = admin.inner().fetch_metadata(None, Duration::from_secs(30)).expect("metadata");
        metadata.topics().iter().map(|t| (t.name().to_string(), t.partitions().len())).collect::<Vec<_>>()
    };
    let admin = admin(&stack, &properties);
    assert!(!listed(&admin).iter().any(|(t, _)| t == STATE_TOPIC), "the state topic exists before the daemon");

    let group = format!("state-{}", std::process::id());
    let env = [
        ("RANKPULSE__KAFKA__GROUP_ID", group.as_str()),
        ("RANKPULSE__KAFKA__PROPERTIES__SESSION_TIMEOUT_MS", "6000"),
        ("RANKPULSE__STATE__BACKEND", "kafka"),
        ("RANKPULSE__STATE__INSTANCE", "solo"),
        ("RANKPULSE__STATE__INTERVAL", "300ms"),
    ];
    let first = tagged_events(300, now_ms() - 600_000, 31, "first");
    produce_through(&stack, &properties, "lz4", &first);
    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "state-1", &properties, &env);
    // With checkpoints, /metrics shows what the last durable checkpoint
    // holds: counting all of `first` means a checkpoint in the topic does.
    wait_until("the first batch checkpointed", Duration::from_secs(120), || {
        assert!(daemon.0.try_wait().unwrap().is_none(), "rankpulse exited: {}", std::fs::read_to_string(&log).unwrap());
        consumed(&metrics(&http)) >= first.len() as f64
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains(&format!("created state.topic {STATE_TOPIC} (1 partition, compacted)")), "{text}");
    assert!(listed(&admin).contains(&(STATE_TOPIC.to_string(), 1)), "{:?}", listed(&admin));
    let described =
        block_on(admin.describe_configs([&ResourceSpecifier::Topic(STATE_TOPIC)], &AdminOptions::new())).unwrap();
    let described = described.into_iter().next().unwrap().unwrap();
    assert_eq!(described.get("cleanup.policy").and_then(|e| e.value.as_deref()), Some("compact"));

    // The second batch in steps while the daemon reads; it is killed
    // mid-stream, after a checkpoint beyond the first batch.
    let second = tagged_events(1_000, now_ms() - 300_000, 37, "second");
    let batches: Vec<Vec<(String, String)>> = second.chunks(100).map(|c| c.to_vec()).collect();
    let feeder = {
        let (bootstrap, properties) = (stack.bootstrap.clone(), properties.clone());
        std::thread::spawn(move || {
            for batch in batches {
                produce_to(&bootstrap, &properties, "lz4", &batch).expect("the second batch acknowledged");
                std::thread::sleep(Duration::from_millis(500));
            }
        })
    };
    let progress_wanted = first.len() as f64 + 200.0;
    wait_until("a checkpoint into the second batch", Duration::from_secs(120), || {
        consumed(&metrics(&http)) >= progress_wanted
    });
    let before = metrics(&http);
    let progress = consumed(&before);
    assert!(sum_of(&before, "rankpulse_checkpoints_total") >= 2.0, "{before}");
    assert_eq!(sum_of(&before, "rankpulse_checkpoint_failures_total"), 0.0, "{before}");
    eprintln!("kill -9 at {progress} of {} consumed", first.len() + second.len());
    daemon.0.kill().unwrap(); // SIGKILL
    daemon.0.wait().unwrap();
    assert_no_secret(&log);

    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "state-2", &properties, &env);
    wait_until("the restarted daemon to serve /metrics", Duration::from_secs(60), || !metrics(&http).is_empty());
    let after = metrics(&http);
    assert!(consumed(&after) >= progress, "counters went back across kill -9: {progress} then {}", consumed(&after));
    feeder.join().unwrap();
    let third = tagged_events(200, now_ms() - 60_000, 41, "third");
    produce_through(&stack, &properties, "lz4", &third);
    let all: Vec<(String, String)> = [first, second, third].concat();
    assert_exact(&mut daemon, &http, &log, &all, 0.0);
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(&format!(r#"restored 2 partition shard(s) from state.topic {STATE_TOPIC} (instance "solo")"#)),
        "{text}"
    );
    assert!(!text.contains("created state.topic"), "{text}");
    sigterm(&mut daemon);

    // The same instance over OAUTHBEARER, each state client with a token
    // from the OIDC endpoint: it restores the checkpoint, and its own
    // checkpoints are written.
    let token_url = stack.token_url.clone().unwrap();
    let mut oidc: Properties = vec![
        ("security.protocol", "SASL_SSL".into()),
        ("ssl.ca.location", stack.path("ca.pem")),
        ("ssl.certificate.location", stack.path("client.pem")),
        ("ssl.key.location", stack.path("client.key")),
        ("sasl.mechanism", "OAUTHBEARER".into()),
        ("sasl.oauthbearer.method", "oidc".into()),
        ("sasl.oauthbearer.client.id", OAUTH_CLIENT.into()),
        ("sasl.oauthbearer.client.secret", OAUTH_SECRET.into()),
    ];
    oidc.push(("sasl.oauthbearer.token.endpoint.url", token_url));
    let (mut daemon, http, log) = spawn_secured_daemon(&stack, "state-3", &oidc, &env);
    // The restored counters are already the final ones: wait for the
    // group too, which /readyz reports.
    wait_until("the third daemon to get its partitions", Duration::from_secs(60), || ready(&http));
    assert_exact(&mut daemon, &http, &log, &all, 0.0);
    let checkpoints = sum_of(&metrics(&http), "rankpulse_checkpoints_total");
    wait_until("a checkpoint over OAUTHBEARER", Duration::from_secs(30), || {
        sum_of(&metrics(&http), "rankpulse_checkpoints_total") > checkpoints
    });
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(
        text.contains(r#"restored 2 partition shard(s) from state.topic rankpulse-state (instance "solo")"#),
        "{text}"
    );
    sigterm(&mut daemon);

    // The records are the instance's (both slots' manifests are there) and
    // its claims of the two partitions, at each of its three starts.
    let keys = state_keys(&stack, &properties);
    assert!(keys.iter().any(|k| k == "solo/A") && keys.iter().any(|k| k == "solo/B"), "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("solo/") || k == "/claim/0" || k == "/claim/1"), "{keys:?}");
    assert!(keys.iter().filter(|k| k.starts_with("/claim/")).count() >= 3 * PARTITIONS as usize, "{keys:?}");
}

/// A wrong SCRAM password with the Kafka backend: the state topic is
/// needed at start, so `rankpulse run` exits (code 2) once the state
/// store's 30 s are up, with an error that names the state topic and the
/// mechanism the broker refused, never the password.
#[test]
#[ignore = "secured-broker tier: needs RANKPULSE_TANSU, stunnel4, python3 and openssl; .ci/run runs it"]
fn bad_credentials_with_the_kafka_backend_name_the_state_topic_and_the_mechanism() {
    let stack = Stack::start("state-bad-password", Tls::Server, true);
    let wrong = format!("{PASSWORD}-wrong");
    let env = [("RANKPULSE__STATE__BACKEND", "kafka"), ("RANKPULSE__STATE__INSTANCE", "solo")];
    let properties = sasl_properties(&stack, "SCRAM-SHA-256", &wrong);
    let (mut daemon, _http, log) = spawn_secured_daemon(&stack, "state-bad", &properties, &env);
    let started = Instant::now();
    let status = loop {
        if let Some(status) = daemon.0.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < Duration::from_secs(90), "still running after 90 s");
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(2), "{text}");
    let error = text.lines().find(|l| l.starts_with("rankpulse run:")).unwrap_or_else(|| panic!("no error:\n{text}"));
    assert!(error.contains(&format!("state.topic {STATE_TOPIC}")), "{error}");
    assert!(error.contains("invalid credentials with SASL mechanism SCRAM-SHA-256"), "{error}");
    assert!(!text.contains(&wrong) && !text.contains(PASSWORD), "the log shows the password:\n{text}");
}
