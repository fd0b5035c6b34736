//! The web configuration file (`http.web_config`, `run --web.config.file`):
//! TLS and basic authentication on the HTTP endpoint, in the format of
//! Prometheus's exporter-toolkit, so that one file and one habit serve
//! node_exporter and rankpulse alike.
//!
//! Read at start (an error stops the daemon, naming the file and the key),
//! then watched: every connection asks for the [`WebConfig::current`] state,
//! which looks at the files' modification times at most once a second and
//! re-reads them all when one changed. A certificate rotated by a
//! Kubernetes Secret or cert-manager, a new client CA or a new password
//! takes effect on the next connection without a restart. A file that no
//! longer reads is logged once and counted, and the last good state stays
//! in force: a half-written certificate must not lock the scraper out.
//!
//! Supported from the exporter-toolkit format: `tls_server_config`
//! (`cert_file`/`cert`, `key_file`/`key`, `client_ca_file`/`client_ca`,
//! `client_auth_type`, `min_version`, `max_version`),
//! `http_server_config` (`headers`, `http2`) and `basic_auth_users`.
//! Keys of that format which rankpulse does not implement
//! (`client_allowed_sans`, `cipher_suites`, `curve_preferences`,
//! `prefer_server_cipher_suites`, `rate_limit`) are refused by name rather
//! than ignored: a file that asks for a restriction must not be served
//! without it. Any other key is refused as unknown.

use axum::http::{HeaderName, HeaderValue};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ServerConfig, WebPkiClientVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};
use thiserror::Error;

/// How often the files' modification times are looked at: often enough
/// that a rotation is in force within a scrape interval, rarely enough
/// that a flood of connections does not become a flood of `stat` calls.
const RECHECK: Duration = Duration::from_secs(1);

/// The headers `http_server_config.headers` may set, with the values each
/// accepts (`None`: any), as exporter-toolkit allows them.
const HEADERS: &[(&str, Option<&[&str]>)] = &[
    ("Content-Security-Policy", None),
    ("X-Frame-Options", Some(&["deny", "sameorigin"])),
    ("X-Content-Type-Options", Some(&["nosniff"])),
    ("X-XSS-Protection", None),
    ("Strict-Transport-Security", None),
];

#[derive(Debug, Error)]
pub enum WebConfigError {
    #[error("web config {path}: cannot read: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// YAML that does not fit the format; `message` names the key.
    #[error("web config {path}: {message}")]
    Format { path: PathBuf, message: String },
    /// A key whose value is wrong, or that rankpulse does not implement.
    #[error("web config {path}: {key}: {message}")]
    Invalid { path: PathBuf, key: String, message: String },
}

/// The file as written. Every section is optional, as in exporter-toolkit:
/// an empty file serves plain HTTP without authentication.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileFormat {
    tls_server_config: Option<TlsFormat>,
    http_server_config: Option<HttpFormat>,
    /// User name → bcrypt hash.
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFormat {
    cert: Option<String>,
    key: Option<String>,
    client_ca: Option<String>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    client_ca_file: Option<PathBuf>,
    client_auth_type: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    client_allowed_sans: Option<serde_norway::Value>,
    cipher_suites: Option<serde_norway::Value>,
    prefer_server_cipher_suites: Option<serde_norway::Value>,
    curve_preferences: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HttpFormat {
    /// Accepted for files written for exporter-toolkit; rankpulse answers
    /// HTTP/1.1 either way (it offers only `http/1.1` in ALPN, so a client
    /// that would speak HTTP/2 falls back), which is all a scrape needs.
    #[allow(dead_code)]
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// What the file says, ready to serve with.
#[derive(Debug)]
pub struct Loaded {
    /// Present when `tls_server_config` is: every connection is TLS.
    pub tls: Option<Arc<ServerConfig>>,
    /// User name → bcrypt hash; empty means no authentication.
    pub users: HashMap<String, String>,
    /// Added to every answer to a request.
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// The highest bcrypt cost among the users: an unknown user costs as
    /// much as a known one, so the timing does not tell which exist.
    pub decoy_cost: u32,
    mode: Mode,
}

/// The web configuration in force, re-read when its files change.
#[derive(Debug)]
pub struct WebConfig {
    path: PathBuf,
    /// What connections and requests are served with: a clone of the
    /// `Arc` is all they take, so a slow disk never holds a connection.
    loaded: RwLock<Arc<Loaded>>,
    /// The files and what they looked like when last read (or when a read
    /// failed, so that a broken file is reported once, not every second).
    /// Only the watcher touches them.
    stamps: Mutex<Vec<(PathBuf, Option<Stamp>)>>,
    /// Changes that were not taken: the file or a certificate did not
    /// read, or the change would weaken the mode (see [`Mode`]).
    reload_failures: AtomicU64,
}

/// What a running server does not change on a re-read: whether it speaks
/// TLS, how it treats client certificates, whether it asks for a
/// password. A file caught half-written can parse (cut after
/// `basic_auth_users:`, or before `client_auth_type:`), and taking it
/// would open the endpoint; a restart takes a deliberate change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Mode {
    tls: bool,
    client_auth: ClientAuth,
    passwords: bool,
}

/// What tells a file changed: its modification time and length, read
/// through symbolic links (a Kubernetes Secret volume swaps a link).
type Stamp = (SystemTime, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

impl WebConfig {
    /// Reads the file and starts a thread that looks for changes every
    /// [`RECHECK`] while the returned `Arc` lives. Its stat calls and
    /// re-reads never run on the runtime: a hung mount delays a rotation,
    /// not an accept.
    pub fn watch(path: &Path) -> Result<Arc<WebConfig>, WebConfigError> {
        let config = Arc::new(WebConfig::load(path)?);
        let weak = Arc::downgrade(&config);
        let spawned = std::thread::Builder::new().name("rankpulse-web-config".into()).spawn(move || {
            loop {
                std::thread::sleep(RECHECK);
                match weak.upgrade() {
                    Some(config) => config.check(),
                    None => break,
                }
            }
        });
        if let Err(e) = spawned {
            tracing::warn!("web config {}: no thread to watch it ({e}); changes take a restart", path.display());
        }
        Ok(config)
    }

    /// Reads the file once, without watching it.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        // Stamps before reading: a change during the read is seen again.
        let before = stamp(path);
        let (loaded, files) = read(path)?;
        let stamps = files.into_iter().map(|f| (f.clone(), if f == path { before } else { stamp(&f) })).collect();
        Ok(WebConfig {
            path: path.to_path_buf(),
            loaded: RwLock::new(Arc::new(loaded)),
            stamps: Mutex::new(stamps),
            reload_failures: AtomicU64::new(0),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The state to serve with.
    pub fn current(&self) -> Arc<Loaded> {
        match self.loaded.read() {
            Ok(loaded) => loaded.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    /// Re-reads everything if any watched file changed since it was read.
    pub(crate) fn check(&self) {
        let mut stamps = match self.stamps.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let now: Vec<Option<Stamp>> = stamps.iter().map(|(file, _)| stamp(file)).collect();
        if stamps.iter().zip(&now).all(|((_, seen), now)| seen == now) {
            return;
        }
        // Recorded before reading: whatever changes after this is seen by
        // the next check, so a renewal that lands mid-read is not lost.
        for ((_, seen), now) in stamps.iter_mut().zip(now) {
            *seen = now;
        }
        let mode = self.current().mode;
        let outcome = read(&self.path).and_then(|(loaded, files)| {
            if loaded.mode != mode {
                let key = if loaded.mode.tls != mode.tls {
                    "tls_server_config"
                } else if loaded.mode.client_auth != mode.client_auth {
                    "tls_server_config.client_auth_type"
                } else {
                    "basic_auth_users"
                };
                return Err(WebConfigError::Invalid {
                    path: self.path.clone(),
                    key: key.into(),
                    message: format!(
                        "a re-read may not change whether TLS is on ({} → {}), the client_auth_type ({:?} → {:?}) \
                         or whether a password is asked ({} → {}): a file caught half-written would open the \
                         endpoint; restart to change them. The file in force is kept",
                        mode.tls,
                        loaded.mode.tls,
                        mode.client_auth,
                        loaded.mode.client_auth,
                        mode.passwords,
                        loaded.mode.passwords
                    ),
                });
            }
            Ok((loaded, files))
        });
        match outcome {
            Ok((loaded, files)) => {
                // A file named anew (another cert_file) is watched from now.
                for file in files {
                    if !stamps.iter().any(|(f, _)| *f == file) {
                        let seen = stamp(&file);
                        stamps.push((file, seen));
                    }
                }
                match self.loaded.write() {
                    Ok(mut guard) => *guard = Arc::new(loaded),
                    Err(poisoned) => *poisoned.into_inner() = Arc::new(loaded),
                }
                tracing::info!("web config {} re-read: its files changed", self.path.display());
            }
            Err(e) => {
                self.reload_failures.fetch_add(1, Ordering::Relaxed);
                tracing::warn!("{e}; serving with the web config read before");
            }
        }
    }

    pub fn reload_failures(&self) -> u64 {
        self.reload_failures.load(Ordering::Relaxed)
    }
}

/// Reads the file and every file it names: the state, and the paths to
/// watch for changes (the file's own first).
fn read(path: &Path) -> Result<(Loaded, Vec<PathBuf>), WebConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| WebConfigError::Read { path: path.into(), source })?;
    let format: FileFormat = if text.trim().is_empty() {
        FileFormat::default()
    } else {
        let deserializer = serde_norway::Deserializer::from_str(&text);
        serde_path_to_error::deserialize(deserializer).map_err(|e| WebConfigError::Format {
            path: path.into(),
            message: match e.path().to_string() {
                p if p == "." => e.inner().to_string(),
                p => format!("{p}: {}", e.inner()),
            },
        })?
    };
    let invalid = |key: &str, message: String| WebConfigError::Invalid { path: path.into(), key: key.into(), message };
    if format.rate_limit.is_some() {
        return Err(invalid("rate_limit", "not implemented by rankpulse; rate-limit in front of it".into()));
    }
    // Relative paths are relative to the file's directory, as in
    // exporter-toolkit: the file and its certificates move together.
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut files = vec![path.to_path_buf()];
    let (tls, client_auth) = match format.tls_server_config {
        Some(tls) => {
            let (config, client_auth) = server_config(tls, dir, &mut files, &invalid)?;
            (Some(Arc::new(config)), client_auth)
        }
        None => (None, ClientAuth::NoClientCert),
    };
    let mut users = HashMap::new();
    let mut decoy_cost = None;
    for (user, hash) in format.basic_auth_users.unwrap_or_default() {
        let Ok(parts) = hash.parse::<bcrypt::HashParts>() else {
            return Err(invalid(
                &format!("basic_auth_users.{user}"),
                "not a bcrypt hash (make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)".into(),
            ));
        };
        decoy_cost = decoy_cost.max(Some(parts.get_cost()));
        users.insert(user, hash);
    }
    let mode = Mode { tls: tls.is_some(), client_auth, passwords: !users.is_empty() };
    let mut headers = Vec::new();
    for (name, value) in format.http_server_config.and_then(|h| h.headers).unwrap_or_default() {
        let key = format!("http_server_config.headers.{name}");
        let Some((known, allowed)) = HEADERS.iter().find(|(known, _)| known.eq_ignore_ascii_case(&name)) else {
            let names: Vec<&str> = HEADERS.iter().map(|(n, _)| *n).collect();
            return Err(invalid(&key, format!("not a header the web config may set; expected one of {names:?}")));
        };
        if value.is_empty() {
            continue;
        }
        if let Some(allowed) = allowed
            && !allowed.iter().any(|a| a.eq_ignore_ascii_case(&value))
        {
            return Err(invalid(&key, format!("{value:?} is not one of {allowed:?}")));
        }
        let value =
            HeaderValue::from_str(&value).map_err(|_| invalid(&key, format!("{value:?} is not a header value")))?;
        headers.push((HeaderName::from_static(lowercase(known)), value));
    }
    Ok((Loaded { tls, users, headers, decoy_cost: decoy_cost.unwrap_or(10), mode }, files))
}

/// The header names of [`HEADERS`] as `HeaderName::from_static` takes them.
fn lowercase(name: &str) -> &'static str {
    match name {
        "Content-Security-Policy" => "content-security-policy",
        "X-Frame-Options" => "x-frame-options",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "strict-transport-security",
    }
}

/// Go's `tls.ClientAuthType`, by the names exporter-toolkit reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientAuth {
    NoClientCert,
    RequestClientCert,
    RequireAnyClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

const CLIENT_AUTH: [(&str, ClientAuth); 5] = [
    ("NoClientCert", ClientAuth::NoClientCert),
    ("RequestClientCert", ClientAuth::RequestClientCert),
    ("RequireAnyClientCert", ClientAuth::RequireAnyClientCert),
    ("VerifyClientCertIfGiven", ClientAuth::VerifyClientCertIfGiven),
    ("RequireAndVerifyClientCert", ClientAuth::RequireAndVerifyClientCert),
];

fn server_config(
    tls: TlsFormat,
    dir: &Path,
    files: &mut Vec<PathBuf>,
    invalid: &dyn Fn(&str, String) -> WebConfigError,
) -> Result<(ServerConfig, ClientAuth), WebConfigError> {
    const SUITES: &str = "not implemented by rankpulse (rustls offers only its own safe suites and curves); remove it";
    for (key, given, why) in [
        (
            "client_allowed_sans",
            tls.client_allowed_sans.is_some(),
            "not implemented by rankpulse; give the clients certificates of their own CA instead",
        ),
        ("cipher_suites", tls.cipher_suites.is_some(), SUITES),
        ("prefer_server_cipher_suites", tls.prefer_server_cipher_suites.is_some(), SUITES),
        ("curve_preferences", tls.curve_preferences.is_some(), SUITES),
    ] {
        if given {
            return Err(invalid(&format!("tls_server_config.{key}"), why.into()));
        }
    }
    let mut pem = |inline: Option<String>, file: Option<PathBuf>, key: &str, required: bool| match (inline, file) {
        (Some(_), Some(_)) => {
            Err(invalid(&format!("tls_server_config.{key}"), format!("give {key} or {key}_file, not both")))
        }
        (Some(text), None) => Ok(Some(text.into_bytes())),
        (None, Some(file)) => {
            let file = dir.join(file);
            let bytes = std::fs::read(&file).map_err(|e| {
                invalid(&format!("tls_server_config.{key}_file"), format!("cannot read {}: {e}", file.display()))
            })?;
            files.push(file);
            Ok(Some(bytes))
        }
        (None, None) if required => {
            Err(invalid(&format!("tls_server_config.{key}_file"), format!("missing: {key}_file or {key} is required")))
        }
        (None, None) => Ok(None),
    };
    let cert = pem(tls.cert, tls.cert_file, "cert", true)?.unwrap_or_default();
    let key = pem(tls.key, tls.key_file, "key", true)?.unwrap_or_default();
    let client_ca = pem(tls.client_ca, tls.client_ca_file, "client_ca", false)?;

    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid("tls_server_config.cert_file", format!("not PEM certificates: {e}")))?;
    if chain.is_empty() {
        return Err(invalid("tls_server_config.cert_file", "holds no PEM certificate".into()));
    }
    let key = PrivateKeyDer::from_pem_slice(&key)
        .map_err(|e| invalid("tls_server_config.key_file", format!("no PEM private key: {e}")))?;

    let auth = match tls.client_auth_type.as_deref() {
        None | Some("") => ClientAuth::NoClientCert,
        Some(name) => CLIENT_AUTH.iter().find(|(n, _)| *n == name).map(|(_, a)| *a).ok_or_else(|| {
            let names: Vec<&str> = CLIENT_AUTH.iter().map(|(n, _)| *n).collect();
            invalid("tls_server_config.client_auth_type", format!("{name:?} is not one of {names:?}"))
        })?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier: Arc<dyn ClientCertVerifier> = match (auth, client_ca) {
        (ClientAuth::NoClientCert, Some(_)) => {
            return Err(invalid(
                "tls_server_config.client_ca_file",
                "a client CA without a client_auth_type that verifies against it".into(),
            ));
        }
        (ClientAuth::NoClientCert, None) => WebPkiClientVerifier::no_client_auth(),
        (ClientAuth::RequestClientCert | ClientAuth::RequireAnyClientCert, _) => {
            Arc::new(AnyCertificate { mandatory: auth == ClientAuth::RequireAnyClientCert, provider: provider.clone() })
        }
        (ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert, None) => {
            return Err(invalid("tls_server_config.client_ca_file", "required to verify client certificates".into()));
        }
        (ClientAuth::VerifyClientCertIfGiven | ClientAuth::RequireAndVerifyClientCert, Some(ca)) => {
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&ca) {
                let cert = cert.map_err(|e| invalid("tls_server_config.client_ca_file", format!("not PEM: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| invalid("tls_server_config.client_ca_file", format!("not a CA certificate: {e}")))?;
            }
            if roots.is_empty() {
                return Err(invalid("tls_server_config.client_ca_file", "holds no PEM certificate".into()));
            }
            let builder = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let builder =
                if auth == ClientAuth::VerifyClientCertIfGiven { builder.allow_unauthenticated() } else { builder };
            builder.build().map_err(|e| invalid("tls_server_config.client_ca_file", e.to_string()))?
        }
    };
    let versions = versions(tls.min_version.as_deref(), tls.max_version.as_deref(), invalid)?;
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| invalid("tls_server_config.min_version", e.to_string()))?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(|e| invalid("tls_server_config.key_file", format!("does not go with the certificate: {e}")))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok((config, auth))
}

/// The protocol versions between `min_version` (default TLS12, as in
/// exporter-toolkit) and `max_version` (default TLS13). rustls speaks no
/// version before 1.2, so TLS10 and TLS11 are refused rather than raised.
fn versions(
    min: Option<&str>,
    max: Option<&str>,
    invalid: &dyn Fn(&str, String) -> WebConfigError,
) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, WebConfigError> {
    let rank = |key: &str, value: Option<&str>, default: u8| match value {
        None | Some("") => Ok(default),
        Some("TLS12") => Ok(2),
        Some("TLS13") => Ok(3),
        Some(v @ ("TLS10" | "TLS11")) => {
            Err(invalid(key, format!("{v} is not offered: rankpulse speaks TLS 1.2 and 1.3 (TLS12, TLS13)")))
        }
        Some(v) => Err(invalid(key, format!("{v:?} is not one of TLS12, TLS13"))),
    };
    let min = rank("tls_server_config.min_version", min, 2)?;
    let max = rank("tls_server_config.max_version", max, 3)?;
    if min > max {
        return Err(invalid("tls_server_config.max_version", "is below min_version".into()));
    }
    let mut versions = Vec::new();
    if min <= 2 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 3 {
        versions.push(&rustls::version::TLS13);
    }
    Ok(versions)
}

/// `RequestClientCert` and `RequireAnyClientCert`: a certificate is asked
/// for (and, for the second, required), and any is taken unverified, as
/// Go does. The handshake still proves the client holds its key.
#[derive(Debug)]
struct AnyCertificate {
    mandatory: bool,
    provider: Arc<rustls::crypto::CryptoProvider>,
}

impl ClientCertVerifier for AnyCertificate {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rankpulse-webconfig-{tag}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn error(dir: &Path, text: &str) -> String {
        let path = write(dir, "web.yml", text);
        WebConfig::load(&path).unwrap_err().to_string()
    }

    /// A self-signed certificate and its key, in PEM.
    fn self_signed() -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    #[test]
    fn an_empty_file_serves_plain_http_without_authentication() {
        let dir = temp_dir("empty");
        let loaded = WebConfig::load(&write(&dir, "web.yml", "")).unwrap().current();
        assert!(loaded.tls.is_none() && loaded.users.is_empty() && loaded.headers.is_empty());
        let loaded = WebConfig::load(&write(&dir, "web.yml", "basic_auth_users:\n")).unwrap().current();
        assert!(loaded.users.is_empty());
    }

    #[test]
    fn unknown_and_unimplemented_keys_are_refused_by_name() {
        let dir = temp_dir("keys");
        let e = error(&dir, "tls_server_config:\n  cert_file: a\n  key_file: b\n  sni: x\n");
        assert!(e.contains("tls_server_config") && e.contains("unknown field `sni`"), "{e}");
        let e = error(&dir, "basic_auth_user:\n  a: b\n");
        assert!(e.contains("unknown field `basic_auth_user`"), "{e}");
        let e = error(&dir, "rate_limit:\n  interval: 1s\n");
        assert!(e.contains("rate_limit: not implemented"), "{e}");
        let (cert, key) = self_signed();
        write(&dir, "cert.pem", &cert);
        write(&dir, "key.pem", &key);
        for extra in
            ["client_allowed_sans: [a]", "cipher_suites: [TLS_AES_128_GCM_SHA256]", "curve_preferences: [X25519]"]
        {
            let e =
                error(&dir, &format!("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  {extra}\n"));
            let key = extra.split(':').next().unwrap();
            assert!(e.contains(&format!("tls_server_config.{key}: not implemented")), "{e}");
        }
    }

    #[test]
    fn values_are_checked_and_named() {
        let dir = temp_dir("values");
        let (cert, key) = self_signed();
        write(&dir, "cert.pem", &cert);
        write(&dir, "key.pem", &key);
        let tls = "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n";
        let cases = [
            (format!("{tls}  min_version: TLS11\n"), "tls_server_config.min_version: TLS11 is not offered"),
            (format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"), "max_version: is below min_version"),
            (format!("{tls}  client_auth_type: Require\n"), "client_auth_type: \"Require\" is not one of"),
            (format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"), "client_ca_file: required"),
            (format!("{tls}  client_ca_file: cert.pem\n"), "client_ca_file: a client CA without"),
            ("tls_server_config:\n  key_file: key.pem\n".into(), "cert_file: missing"),
            ("tls_server_config:\n  cert_file: nowhere.pem\n  key_file: key.pem\n".into(), "cert_file: cannot read"),
            ("tls_server_config:\n  cert_file: key.pem\n  key_file: key.pem\n".into(), "cert_file: holds no PEM"),
            ("basic_auth_users:\n  alice: secret\n".into(), "basic_auth_users.alice: not a bcrypt hash"),
            ("http_server_config:\n  headers:\n    X-Frame-Options: always\n".into(), "\"always\" is not one of"),
            ("http_server_config:\n  headers:\n    Server: me\n".into(), "headers.Server: not a header"),
        ];
        for (text, expected) in cases {
            let e = error(&dir, &text);
            assert!(e.contains(expected), "{text}\n→ {e}\nexpected {expected:?}");
        }
    }

    #[test]
    fn a_valid_file_gives_tls_users_and_headers() {
        let dir = temp_dir("valid");
        let (cert, key) = self_signed();
        write(&dir, "cert.pem", &cert);
        write(&dir, "key.pem", &key);
        let hash = bcrypt::hash("pw", 4).unwrap();
        let text = format!(
            "tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n  client_auth_type: VerifyClientCertIfGiven\n  client_ca_file: cert.pem\n  min_version: TLS13\n\
             http_server_config:\n  http2: true\n  headers:\n    x-frame-options: deny\n    Content-Security-Policy: \"\"\n\
             basic_auth_users:\n  alice: {hash}\n"
        );
        let loaded = WebConfig::load(&write(&dir, "web.yml", &text)).unwrap().current();
        let tls = loaded.tls.as_ref().unwrap();
        assert_eq!(tls.alpn_protocols, vec![b"http/1.1".to_vec()]);
        assert_eq!(loaded.users["alice"], hash);
        assert_eq!(loaded.headers.len(), 1, "a blank header is unset");
        assert_eq!(loaded.headers[0].0.as_str(), "x-frame-options");
    }

    /// A changed password file is in force after a check; a broken one,
    /// or one that would drop the passwords, is counted and the state
    /// before it kept.
    #[test]
    fn changes_are_read_and_broken_or_weakening_files_keep_the_state_in_force() {
        let dir = temp_dir("reload");
        let path = write(&dir, "web.yml", &format!("basic_auth_users:\n  alice: {}\n", bcrypt::hash("a", 4).unwrap()));
        let config = WebConfig::load(&path).unwrap();
        assert!(config.current().users.contains_key("alice"));
        config.check();
        assert_eq!(config.reload_failures(), 0, "nothing changed, nothing read");
        let bob = bcrypt::hash("b", 5).unwrap();
        std::fs::write(&path, format!("basic_auth_users:\n  bob: {bob}\n  carol: {bob}\n")).unwrap();
        config.check();
        let now = config.current();
        assert!(now.users.contains_key("bob") && !now.users.contains_key("alice"));
        assert_eq!(now.decoy_cost, 5);
        for (broken, failures) in [("basic_auth_users: [", 1), ("basic_auth_users:\n", 2), ("", 3)] {
            std::fs::write(&path, broken).unwrap();
            config.check();
            assert!(config.current().users.contains_key("bob"), "{broken:?}");
            assert_eq!(config.reload_failures(), failures, "{broken:?}");
            // Not re-read until it changes again.
            config.check();
            assert_eq!(config.reload_failures(), failures);
        }
    }
}
