//! The endpoint behind `http.web_config` (exporter-toolkit's format) as
//! clients meet it: a real TLS client with and without certificates of
//! several issuers, passwords right and wrong, plain HTTP on the TLS port,
//! and files rotated under the running process.
//!
//! The certificates are made here ([`Pki`]), so each run has its own CA
//! and none is committed. The other tiers use the same helpers: the
//! hostile-input tier's password flood and the Prometheus tier's secured
//! scrape.

use crate::common::{Guard, free_port, sum_of, wait_until};
use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

/// A certificate and its key, in PEM.
#[derive(Clone)]
pub struct Pair {
    pub cert: String,
    pub key: String,
}

/// A CA, the server's certificate from it, and client certificates: one
/// from the CA, one from it that has expired, one from another CA.
pub struct Pki {
    pub ca: String,
    pub server: Pair,
    pub client: Pair,
    pub expired_client: Pair,
    pub stranger: Pair,
    /// Issues more certificates from the CA.
    issuer: rcgen::Issuer<'static, rcgen::KeyPair>,
}

fn new_ca(name: &str) -> (String, rcgen::Issuer<'static, rcgen::KeyPair>) {
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, name);
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params.key_usages = vec![rcgen::KeyUsagePurpose::KeyCertSign, rcgen::KeyUsagePurpose::CrlSign];
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.self_signed(&key).unwrap();
    (cert.pem(), rcgen::Issuer::new(params, key))
}

/// `expired`: valid in 2020 only.
fn leaf(issuer: &rcgen::Issuer<'static, rcgen::KeyPair>, server: bool, expired: bool) -> Pair {
    let names = if server { ["localhost", "127.0.0.1", "rankpulse"].map(String::from).to_vec() } else { vec![] };
    let mut params = rcgen::CertificateParams::new(names).unwrap();
    params.distinguished_name.push(rcgen::DnType::CommonName, if server { "rankpulse" } else { "scraper" });
    params.extended_key_usages = vec![if server {
        rcgen::ExtendedKeyUsagePurpose::ServerAuth
    } else {
        rcgen::ExtendedKeyUsagePurpose::ClientAuth
    }];
    if expired {
        params.not_before = rcgen::date_time_ymd(2020, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 12, 31);
    }
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, issuer).unwrap();
    Pair { cert: cert.pem(), key: key.serialize_pem() }
}

impl Pki {
    pub fn new() -> Pki {
        let (ca, issuer) = new_ca("rankpulse test CA");
        let (_, other) = new_ca("another CA");
        Pki {
            server: leaf(&issuer, true, false),
            client: leaf(&issuer, false, false),
            expired_client: leaf(&issuer, false, true),
            stranger: leaf(&other, false, false),
            ca,
            issuer,
        }
    }

    /// A new server certificate from the CA, valid now or expired.
    pub fn server_cert(&self, expired: bool) -> Pair {
        leaf(&self.issuer, true, expired)
    }

    /// Writes ca.pem, server.pem, server.key, client.pem, client.key into
    /// `dir/current`.
    pub fn write(&self, dir: &Path) {
        publish_files(
            dir,
            "v0",
            &[
                ("ca.pem", &self.ca),
                ("server.pem", &self.server.cert),
                ("server.key", &self.server.key),
                ("client.pem", &self.client.cert),
                ("client.key", &self.client.key),
            ],
        );
    }
}

/// Writes `files` into `dir/version` and points the link `dir/current` at
/// it in one rename, as a Kubernetes Secret volume updates its files: a
/// reader never sees a new certificate beside an old key.
pub fn publish_files(dir: &Path, version: &str, files: &[(&str, &str)]) {
    let versioned = dir.join(version);
    std::fs::create_dir_all(&versioned).unwrap();
    if let Ok(current) = std::fs::read_link(dir.join("current")) {
        for entry in std::fs::read_dir(dir.join(current)).unwrap() {
            let entry = entry.unwrap();
            if !versioned.join(entry.file_name()).exists() {
                std::fs::copy(entry.path(), versioned.join(entry.file_name())).unwrap();
            }
        }
    }
    for (name, text) in files {
        std::fs::write(versioned.join(name), text).unwrap();
    }
    let link = dir.join("current.new");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(version, &link).unwrap();
    std::fs::rename(&link, dir.join("current")).unwrap();
}

/// A fresh directory for one test's files.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rankpulse-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// An answer: status, head (lower-cased field names), body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// GET `path` over TLS, trusting `ca`, presenting `client` if given, with
/// basic auth if given. `Err` is the TLS or I/O error the client met.
pub fn https_get(
    addr: &str,
    path: &str,
    ca: &str,
    client: Option<&Pair>,
    auth: Option<(&str, &str)>,
) -> Result<Answer, String> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(cert.unwrap()).unwrap();
    }
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let config = match client {
        Some(pair) => {
            let chain = CertificateDer::pem_slice_iter(pair.cert.as_bytes()).map(Result::unwrap).collect();
            builder.with_client_auth_cert(chain, PrivateKeyDer::from_pem_slice(pair.key.as_bytes()).unwrap()).unwrap()
        }
        None => builder.with_no_client_auth(),
    };
    let connection = rustls::ClientConnection::new(Arc::new(config), ServerName::try_from("localhost").unwrap())
        .map_err(|e| e.to_string())?;
    let tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    let authorization = match auth {
        Some((user, password)) => format!(
            "Authorization: Basic {}\r\n",
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        ),
        None => String::new(),
    };
    tls.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{authorization}Connection: close\r\n\r\n").as_bytes(),
    )
    .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    match tls.read_to_end(&mut raw) {
        Ok(_) => {}
        // A server that closes without close_notify after a whole answer.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => {}
        Err(e) => return Err(e.to_string()),
    }
    parse(&raw).ok_or_else(|| format!("not an HTTP answer: {:?}", String::from_utf8_lossy(&raw)))
}

/// GET over plain TCP: what a scraper with `scheme: http` sends.
pub fn plain_get(addr: &str, path: &str) -> Result<String, String> {
    let mut tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    tcp.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    Ok(String::from_utf8_lossy(&raw).into_owned())
}

fn parse(raw: &[u8]) -> Option<Answer> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.split(' ').nth(1)?.parse().ok()?;
    Some(Answer { status, head: head.to_ascii_lowercase(), body: body.to_string() })
}

/// The web config of these tests: TLS from `pki`, client certificates
/// verified if given, one user.
pub fn web_config(dir: &Path, user: &str, password: &str) -> PathBuf {
    let hash = bcrypt::hash(password, 10).unwrap();
    let path = dir.join("web.yml");
    std::fs::write(
        &path,
        format!(
            "tls_server_config:\n  cert_file: current/server.pem\n  key_file: current/server.key\n  \
             client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: current/ca.pem\n\
             http_server_config:\n  headers:\n    X-Frame-Options: deny\n\
             basic_auth_users:\n  {user}: {hash}\n"
        ),
    )
    .unwrap();
    path
}

/// The secured demo: everything a scraper, a stranger and an operator
/// rotating files would meet, against the real binary.
#[test]
fn the_secured_endpoint_refuses_strangers_and_takes_rotated_files_without_a_restart() {
    let pki = Pki::new();
    let dir = temp_dir("secured-demo");
    pki.write(&dir);
    let web = web_config(&dir, "prometheus", "scrape-secret");
    let addr = format!("127.0.0.1:{}", free_port());
    let _demo = Guard(
        Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .args(["demo", "--listen", &addr, "--duration", "300", "--report-every", "60"])
            .arg("--web.config.file")
            .arg(&web)
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let get =
        |path: &str, client: Option<&Pair>, auth: Option<(&str, &str)>| https_get(&addr, path, &pki.ca, client, auth);
    let right = Some(("prometheus", "scrape-secret"));

    // Probes answer without a password (http.open_probes), over TLS.
    wait_until("the demo answers /healthz over TLS", Duration::from_secs(60), || {
        get("/healthz", None, None).is_ok_and(|a| a.status == 200)
    });

    // No password, a wrong one, an unknown user: 401 with a challenge.
    for auth in [None, Some(("prometheus", "wrong")), Some(("root", "scrape-secret"))] {
        let a = get("/metrics", None, auth).unwrap();
        assert_eq!(a.status, 401, "{auth:?}: {a:?}");
        assert!(a.head.contains("www-authenticate: basic realm=\"rankpulse\""), "{a:?}");
        assert!(!a.body.contains("rankpulse_"), "{a:?}");
    }
    // The status page is behind the password too.
    assert_eq!(get("/", None, None).unwrap().status, 401);

    // The user: with or without a client certificate from the CA.
    wait_until("the demo publishes its first lists", Duration::from_secs(60), || {
        get("/metrics", None, right).is_ok_and(|a| sum_of(&a.body, "rankpulse_lists_finalized_total") > 0.0)
    });
    let a = get("/metrics", Some(&pki.client), right).unwrap();
    assert_eq!(a.status, 200);
    assert!(a.head.contains("x-frame-options: deny"), "the configured header: {}", a.head);
    assert_eq!(get("/", Some(&pki.client), right).unwrap().status, 200);

    // Certificates the CA did not sign, or that expired: the handshake
    // fails, whatever the password.
    for (what, pair) in [("another CA's", &pki.stranger), ("an expired", &pki.expired_client)] {
        let e = get("/metrics", Some(pair), right).unwrap_err();
        assert!(e.contains("alert"), "{what} client certificate: {e}");
    }

    // Plain HTTP to the TLS port: Go's answer, so a scrape with the wrong
    // scheme says why.
    let plain = plain_get(&addr, "/metrics").unwrap();
    assert!(plain.starts_with("HTTP/1.0 400 Bad Request"), "{plain}");
    assert!(plain.contains("Client sent an HTTP request to an HTTPS server."), "{plain}");

    // Rotation: an expired server certificate written in place is served
    // to the next connections (and refused by the client); a new valid
    // one replaces it, all without a restart.
    let expired = pki.server_cert(true);
    publish_files(&dir, "v1", &[("server.pem", &expired.cert), ("server.key", &expired.key)]);
    let mut refused = String::new();
    wait_until("the expired server certificate is served", Duration::from_secs(20), || {
        match get("/healthz", None, None) {
            Err(e) => {
                refused = e;
                true
            }
            Ok(_) => false,
        }
    });
    assert!(refused.to_lowercase().contains("expired"), "{refused}");
    let renewed = pki.server_cert(false);
    publish_files(&dir, "v2", &[("server.pem", &renewed.cert), ("server.key", &renewed.key)]);
    wait_until("the renewed server certificate is served", Duration::from_secs(20), || {
        get("/metrics", None, right).is_ok_and(|a| a.status == 200)
    });

    // A new password file: the old password stops working, the new one
    // works, without a restart.
    web_config(&dir, "prometheus", "rotated-secret");
    wait_until("the new password is in force", Duration::from_secs(20), || {
        get("/metrics", None, Some(("prometheus", "rotated-secret"))).is_ok_and(|a| a.status == 200)
    });
    assert_eq!(get("/metrics", None, right).unwrap().status, 401);

    // Every refusal is counted by reason; the plain request exactly once.
    let new = Some(("prometheus", "rotated-secret"));
    let mut exposition = String::new();
    wait_until("the refusals are published", Duration::from_secs(20), || {
        exposition = get("/metrics", None, new).map(|a| a.body).unwrap_or_default();
        sum_of(&exposition, "rankpulse_http_refused_total{reason=\"bad_credentials\"}") >= 3.0
    });
    let refused = |reason: &str| sum_of(&exposition, &format!("rankpulse_http_refused_total{{reason=\"{reason}\"}}"));
    assert_eq!(refused("plain_http"), 1.0, "{exposition}");
    assert!(refused("no_credentials") >= 2.0, "{exposition}");
    assert!(refused("tls_handshake") >= 3.0, "two client certificates and the expired server's: {exposition}");
    assert_eq!(refused("busy"), 0.0);
    assert_eq!(sum_of(&exposition, "rankpulse_web_config_reload_failures_total"), 0.0);
    let _ = std::fs::remove_dir_all(&dir);
}
