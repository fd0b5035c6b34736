//! HTTP: `/metrics` (Prometheus text), `/healthz`, `/readyz` and `/`.
//!
//! Serves what the daemon published last; no handler touches the pipeline,
//! so a scrape never slows consumption and never holds a lock for longer
//! than it takes to clone an `Arc`.
//!
//! The accept loop is hyper's, not `axum::serve`'s, for bounds that
//! `axum::serve` cannot set ([`Bounds`]): a request head within 30 s
//! (hyper's own default, inert without the timer axum does not give it), a
//! connection lifetime, and at most 256 connections at once. Without them,
//! clients that connect and send nothing, or half a request, or never read
//! their answer, each hold a file descriptor for ever; the descriptors are
//! the process's, so enough of them starve librdkafka's broker connections
//! and the checkpoint files, not only the metrics endpoint.
//!
//! `/metrics` is gzip-compressed for clients that accept it, as Prometheus
//! does by default: the text of many series compresses about tenfold. Each
//! published exposition is compressed once, by the first such request, and
//! shared by the answers after it; nothing is compressed while no client
//! asks.
//!
//! With `http.web_config` ([`web_config`]) connections are TLS and requests
//! need a password ([`auth`]); [`Access`] says which. A second, plain
//! listener (`http.probe_listen`) may answer only `/healthz` and `/readyz`,
//! for probes that cannot present what the main one asks.
//!
//! [`check_health`] is the other end of `/healthz`: `rankpulse healthcheck`,
//! for container health checks in images without a shell's `/dev/tcp` or
//! an HTTP client.

pub mod auth;
pub mod web_config;

use crate::status::{History, render_page};
use auth::{Authenticator, Verdict};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use thiserror::Error;
use web_config::{Loaded, WebConfig};

/// What the daemon publishes for the handlers.
#[derive(Debug, Default)]
pub struct Published {
    /// The latest exposition, replaced whole on every publish tick. Each
    /// answer shares it: a copy per request made every client that does
    /// not read its answer hold a whole exposition until dropped.
    exposition: RwLock<Bytes>,
    /// The gzip form of `exposition`, made by the first request that
    /// accepts it, with the exposition it was made from (the same buffer:
    /// a new publish is a new buffer).
    gzipped: Mutex<Option<(Bytes, Bytes)>>,
    /// Consuming: partitions assigned and the broker reachable.
    ready: AtomicBool,
    /// Headline series over the last hour, for the status page.
    history: Mutex<History>,
    /// Connections closed by a bound: no request within the header
    /// timeout, or an answer not taken within the grace of a closing one.
    pub timed_out: AtomicU64,
    /// Times every connection slot was taken: the next connection waits
    /// in the listen backlog until one is free.
    pub slots_full: AtomicU64,
    /// Connections and requests refused under `http.web_config`, by
    /// [`Refusal`].
    refused: [AtomicU64; Refusal::ALL.len()],
    /// Changes of the web configuration's files that were not taken.
    pub web_config_reload_failures: AtomicU64,
}

/// Why the secured endpoint turned a client away (the `reason` label of
/// `rankpulse_http_refused_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Plain HTTP to the TLS port: answered 400, as Go's servers do.
    PlainHttp,
    /// A TLS handshake that failed: no client certificate where one is
    /// required, one from another CA, an expired one, no common version.
    TlsHandshake,
    /// 401: no `Authorization: Basic` header.
    NoCredentials,
    /// 401: an unknown user or a wrong password.
    BadCredentials,
    /// 503: every password check stayed busy for 5 s.
    Busy,
}

impl Refusal {
    pub const ALL: [Refusal; 5] =
        [Refusal::PlainHttp, Refusal::TlsHandshake, Refusal::NoCredentials, Refusal::BadCredentials, Refusal::Busy];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::PlainHttp => "plain_http",
            Refusal::TlsHandshake => "tls_handshake",
            Refusal::NoCredentials => "no_credentials",
            Refusal::BadCredentials => "bad_credentials",
            Refusal::Busy => "busy",
        }
    }
}

impl Published {
    pub fn new(config: &crate::config::Config) -> Self {
        Published { history: Mutex::new(History::new(config)), ..Published::default() }
    }

    pub fn set_exposition(&self, text: String) {
        let text = Bytes::from(text);
        match self.exposition.write() {
            Ok(mut guard) => *guard = text,
            Err(poisoned) => *poisoned.into_inner() = text,
        }
    }

    /// The latest exposition (UTF-8, as [`Self::set_exposition`] took it).
    pub fn exposition(&self) -> Bytes {
        match self.exposition.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set_ready(&self, ready: bool) {
        self.ready.store(ready, Ordering::Relaxed);
    }

    pub fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Relaxed)
    }

    /// The latest exposition, gzip-compressed: compressed once per
    /// publish, by the first caller, under a lock so that concurrent
    /// callers wait for that one instead of each compressing it.
    pub fn exposition_gzip(&self) -> Bytes {
        let text = self.exposition();
        let mut cache = match self.gzipped.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some((source, gz)) = cache.as_ref()
            && source.as_ptr() == text.as_ptr()
            && source.len() == text.len()
        {
            return gz.clone();
        }
        let gz = Bytes::from(gzip(&text));
        *cache = Some((text, gz.clone()));
        gz
    }

    fn refuse(&self, why: Refusal) {
        self.refused[why as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// How many clients were refused for `why`.
    pub fn refused(&self, why: Refusal) -> u64 {
        self.refused[why as usize].load(Ordering::Relaxed)
    }

    /// Runs `f` on the history (the daemon samples into it as it publishes).
    pub fn with_history<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        match self.history.lock() {
            Ok(mut h) => f(&mut h),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The probes alone, for `http.probe_listen`.
pub fn probe_router(published: Arc<Published>) -> Router {
    Router::new().route("/healthz", get(|| async { "ok\n" })).route("/readyz", get(readyz)).with_state(published)
}

pub fn router(published: Arc<Published>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/", get(index))
        .with_state(published)
}

async fn metrics(State(p): State<Arc<Published>>, headers: HeaderMap) -> Response {
    if !accepts_gzip(&headers) {
        return ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE), (header::VARY, "accept-encoding")], p.exposition())
            .into_response();
    }
    // Compressing a large exposition takes milliseconds: off the runtime's
    // workers, which also serve the health checks.
    match tokio::task::spawn_blocking(move || p.exposition_gzip()).await {
        Ok(gz) => (
            [
                (header::CONTENT_TYPE, METRICS_CONTENT_TYPE),
                (header::CONTENT_ENCODING, "gzip"),
                (header::VARY, "accept-encoding"),
            ],
            gz,
        )
            .into_response(),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

/// Whether `Accept-Encoding` accepts gzip (RFC 9110 12.5.3): listed, or
/// `*`, with a weight above zero.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut any = None;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for item in value.split(',') {
            let mut parts = item.split(';');
            let coding = parts.next().unwrap_or("").trim();
            let weight = parts
                .filter_map(|p| p.trim().strip_prefix("q=").or_else(|| p.trim().strip_prefix("Q=")))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            if coding.eq_ignore_ascii_case("gzip") || coding.eq_ignore_ascii_case("x-gzip") {
                gzip = Some(weight > 0.0);
            } else if coding == "*" {
                any = Some(weight > 0.0);
            }
        }
    }
    gzip.or(any).unwrap_or(false)
}

/// `text` gzip-compressed at the fast level: a scrape's text compresses
/// about tenfold even so, and the slower levels cost several times more
/// CPU for a few percent.
fn gzip(text: &[u8]) -> Vec<u8> {
    use flate2::Compression;
    use flate2::write::GzEncoder;
    let mut encoder = GzEncoder::new(Vec::with_capacity(text.len() / 8), Compression::fast());
    // Writing to a Vec cannot fail.
    let _ = encoder.write_all(text);
    encoder.finish().unwrap_or_default()
}

async fn readyz(State(p): State<Arc<Published>>) -> Response {
    if p.is_ready() {
        (StatusCode::OK, "ready\n").into_response()
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: no partitions assigned or broker unreachable\n").into_response()
    }
}

async fn index(State(p): State<Arc<Published>>) -> Html<String> {
    let ready = p.is_ready();
    Html(p.with_history(|h| render_page(h, ready)))
}

/// The bounds of [`serve`] on its clients.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// How long a connection may take to send a request's head, counted
    /// from when the server starts reading it (an idle keep-alive
    /// connection is closed after this too; a scraper reconnects).
    header_read: Duration,
    /// How long a connection lives: then it is closed once its request in
    /// flight is answered, so that a client re-sending a request every few
    /// seconds holds a slot no longer than this.
    lifetime: Duration,
    /// How long a closing connection gets to finish its answer before it
    /// is dropped: a client that never reads its `/metrics` would hold its
    /// slot for ever on a blocked write.
    grace: Duration,
    /// Connections served at once; more wait in the listen backlog.
    /// Scrapers, probes and a browser need a handful.
    max_connections: usize,
}

const BOUNDS: Bounds = Bounds {
    header_read: Duration::from_secs(30),
    lifetime: Duration::from_secs(60),
    grace: Duration::from_secs(5),
    max_connections: 256,
};

/// How the endpoint admits clients: `http.web_config`, `http.open_probes`,
/// `http.max_password_checks`. The default is the open endpoint.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// TLS and users; `None` serves plain HTTP to anyone.
    pub web_config: Option<Arc<WebConfig>>,
    /// `/healthz` and `/readyz` answer without a password: they say only
    /// whether the process is alive and consuming, and Kubernetes probes
    /// carry no credentials.
    pub open_probes: bool,
    /// bcrypt verifications at once (see [`auth`]).
    pub max_password_checks: usize,
}

/// What [`serve`] answers: everything, or only the probes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Routes {
    All,
    /// `/healthz` and `/readyz`, for `http.probe_listen`.
    Probes,
}

/// Serves until `shutdown` resolves, then lets requests in flight finish
/// (the caller bounds how long it waits for that).
pub async fn serve(
    listener: tokio::net::TcpListener,
    published: Arc<Published>,
    routes: Routes,
    access: Access,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_bounded(listener, published, routes, access, shutdown, BOUNDS).await
}

/// [`serve`] on `listener` with `access`, and on `probes` (if any) the
/// probes alone over plain HTTP, until `stop` fires or its sender is gone.
pub async fn serve_with_probes(
    listener: tokio::net::TcpListener,
    probes: Option<tokio::net::TcpListener>,
    published: Arc<Published>,
    access: Access,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> std::io::Result<()> {
    let (stopping, stopped) = tokio::sync::watch::channel(false);
    let until_stopped = |mut stopped: tokio::sync::watch::Receiver<bool>| async move {
        let _ = stopped.wait_for(|s| *s).await;
    };
    let main = serve(listener, published.clone(), Routes::All, access, until_stopped(stopped.clone()));
    let probes = async {
        match probes {
            Some(l) => serve(l, published, Routes::Probes, Access::default(), until_stopped(stopped)).await,
            None => Ok(()),
        }
    };
    let relay = async {
        let _ = stop.await;
        let _ = stopping.send(true);
        Ok(())
    };
    tokio::try_join!(main, probes, relay).map(|_| ())
}

/// What every connection of one server shares.
struct Server {
    router: Router,
    published: Arc<Published>,
    access: Access,
    /// Present when a web config is.
    auth: Option<Authenticator>,
    bounds: Bounds,
}

async fn serve_bounded(
    listener: tokio::net::TcpListener,
    published: Arc<Published>,
    routes: Routes,
    access: Access,
    shutdown: impl Future<Output = ()> + Send + 'static,
    bounds: Bounds,
) -> std::io::Result<()> {
    let router = match routes {
        Routes::All => router(published.clone()),
        Routes::Probes => probe_router(published.clone()),
    };
    let auth = access.web_config.as_ref().map(|_| Authenticator::new(access.max_password_checks));
    let server = Arc::new(Server { router, published: published.clone(), access, auth, bounds });
    let permits = Arc::new(tokio::sync::Semaphore::new(bounds.max_connections));
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        let permit = match permits.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                published.slots_full.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    () = &mut shutdown => break,
                    permit = permits.clone().acquire_owned() => match permit {
                        Ok(permit) => permit,
                        Err(_) => break,
                    },
                }
            }
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    // Out of descriptors, or a connection reset before it
                    // was accepted: neither ends the server.
                    tracing::debug!("HTTP accept: {e}");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        // The certificate in force when the connection came serves it; a
        // rotated one serves the connections after it.
        let tls = server.access.web_config.as_ref().and_then(|w| {
            published.web_config_reload_failures.store(w.reload_failures(), Ordering::Relaxed);
            w.current().tls.clone()
        });
        connections.spawn(accepted(stream, server.clone(), tls, closed.clone(), permit));
        // Reap the finished ones so the set holds only live connections.
        while connections.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = closing.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// What Go's servers answer to plain HTTP on a TLS port, so that a
/// scrape configured with `scheme: http` says why in Prometheus's target
/// page instead of a bare connection reset.
const PLAIN_HTTP_ANSWER: &[u8] =
    b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// The TLS record type of a handshake: the first byte of every TLS
/// client's first message.
const TLS_HANDSHAKE: u8 = 0x16;

/// Completes a TLS handshake if the web config asks for one, then serves.
async fn accepted(
    mut stream: tokio::net::TcpStream,
    server: Arc<Server>,
    tls: Option<Arc<rustls::ServerConfig>>,
    closed: tokio::sync::watch::Receiver<bool>,
    permit: tokio::sync::OwnedSemaphorePermit,
) {
    let Some(tls) = tls else {
        return connection(stream, server, closed, permit).await;
    };
    // The handshake is bounded like a request head: a client that
    // connects and says nothing holds its slot no longer.
    let handshake = async {
        let mut first = [0u8; 1];
        match stream.peek(&mut first).await {
            Ok(1) if first[0] == TLS_HANDSHAKE => {}
            Ok(1) => {
                use tokio::io::AsyncWriteExt;
                let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
                let _ = stream.shutdown().await;
                return Err(Some(Refusal::PlainHttp));
            }
            _ => return Err(None),
        }
        tokio_rustls::TlsAcceptor::from(tls).accept(stream).await.map_err(|e| {
            tracing::debug!("TLS handshake refused: {e}");
            Some(Refusal::TlsHandshake)
        })
    };
    // Pinned here, not moved into the timeout, so that a handshake cut
    // short keeps its connection open until it is counted: a client that
    // sees the close then sees the count, as on the plain port.
    let mut handshake = std::pin::pin!(handshake);
    match tokio::time::timeout(server.bounds.header_read, handshake.as_mut()).await {
        Ok(Ok(stream)) => connection(stream, server, closed, permit).await,
        Ok(Err(Some(why))) => server.published.refuse(why),
        Ok(Err(None)) => {}
        Err(_) => {
            server.published.timed_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The paths [`Access::open_probes`] opens.
fn is_probe(path: &str) -> bool {
    path == "/healthz" || path == "/readyz"
}

/// Serves one connection within the server's bounds until it ends, is
/// too old, or the server closes; `_permit` is its slot.
async fn connection<S>(
    stream: S,
    server: Arc<Server>,
    mut closed: tokio::sync::watch::Receiver<bool>,
    _permit: tokio::sync::OwnedSemaphorePermit,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let bounds = server.bounds;
    // Whether a request came: a keep-alive connection closed idle by the
    // header timeout served its client and is not counted.
    let served = Arc::new(AtomicBool::new(false));
    let service = {
        let served = served.clone();
        let server = server.clone();
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            served.store(true, Ordering::Relaxed);
            let server = server.clone();
            // Users and headers as they are now: a removed password stops
            // working on open keep-alive connections too.
            let loaded = server.access.web_config.as_ref().map(|w| w.current());
            async move {
                let mut answer = answer(&server, loaded.as_deref(), request).await;
                if let Some(loaded) = &loaded {
                    for (name, value) in &loaded.headers {
                        answer.headers_mut().insert(name.clone(), value.clone());
                    }
                }
                Ok::<_, std::convert::Infallible>(answer)
            }
        })
    };
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(bounds.header_read);
    let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => Some(ended),
        _ = closed.wait_for(|closing| *closing) => None,
        () = tokio::time::sleep(bounds.lifetime) => None,
    };
    let timed_out = match ended {
        Some(ended) => ended.is_err_and(|e| e.is_timeout()) && !served.load(Ordering::Relaxed),
        None => {
            connection.as_mut().graceful_shutdown();
            tokio::time::timeout(bounds.grace, connection).await.is_err()
        }
    };
    if timed_out {
        server.published.timed_out.fetch_add(1, Ordering::Relaxed);
    }
}

/// One request's answer: refused for its head or its credentials, else
/// the router's.
async fn answer(server: &Server, loaded: Option<&Loaded>, request: hyper::Request<hyper::body::Incoming>) -> Response {
    // RFC 9112 §3.2: an HTTP/1.1 request without exactly one Host field
    // gets 400 (hyper leaves that to the server).
    if request.version() == hyper::Version::HTTP_11 && request.headers().get_all(header::HOST).iter().count() != 1 {
        return (StatusCode::BAD_REQUEST, "HTTP/1.1 requests need one Host header\n").into_response();
    }
    if let (Some(loaded), Some(auth)) = (loaded, &server.auth)
        && !loaded.users.is_empty()
        && !(server.access.open_probes && is_probe(request.uri().path()))
    {
        let given = request.headers().get(header::AUTHORIZATION).map(|v| v.as_bytes());
        let refused = match auth.check(&loaded.users, loaded.decoy_cost, given).await {
            Verdict::Allowed => None,
            Verdict::NoCredentials => Some(Refusal::NoCredentials),
            Verdict::BadCredentials => Some(Refusal::BadCredentials),
            Verdict::Busy => Some(Refusal::Busy),
        };
        if let Some(why) = refused {
            server.published.refuse(why);
            return if why == Refusal::Busy {
                (StatusCode::SERVICE_UNAVAILABLE, [(header::RETRY_AFTER, "5")], "password checks are busy\n")
                    .into_response()
            } else {
                (
                    StatusCode::UNAUTHORIZED,
                    [(header::WWW_AUTHENTICATE, "Basic realm=\"rankpulse\", charset=\"UTF-8\"")],
                    "Unauthorized\n",
                )
                    .into_response()
            };
        }
    }
    // Router is always ready: no poll_ready needed before call.
    let mut router = server.router.clone();
    match tower_service::Service::call(&mut router, request).await {
        Ok(answer) => answer,
        Err(never) => match never {},
    }
}

/// `rankpulse healthcheck`'s URL unless told otherwise: `/healthz` at the
/// daemon's default `http.listen`.
pub fn default_health_url() -> String {
    format!("http://{}/healthz", crate::config::HttpConfig::default().listen)
}

/// Why a health check failed. I/O causes are quoted in the message, not
/// returned as a `source()`, so that a chain printer says them once.
#[derive(Debug, Error)]
pub enum HealthError {
    #[error("{url:?} is not an http://HOST:PORT/PATH URL")]
    Url { url: String },
    #[error("{url}: cannot resolve {authority}: {cause}")]
    Resolve { url: String, authority: String, cause: std::io::Error },
    #[error("{url}: cannot connect to {addr}: {cause}")]
    Connect { url: String, addr: SocketAddr, cause: std::io::Error },
    #[error("{url}: no answer within {}", humantime::format_duration(*.timeout))]
    Timeout { url: String, timeout: Duration },
    #[error("{url}: {cause}")]
    Exchange { url: String, cause: std::io::Error },
    #[error("{url}: the answer is not HTTP: {answer:?}")]
    NotHttp { url: String, answer: String },
    #[error("{url}: answered {status_line:?}, not 200")]
    Status { url: String, status: u16, status_line: String },
}

/// Longest status line read: the rest of the answer is not needed.
const STATUS_LINE_MAX: usize = 1024;

/// GETs `url` (plain `http://HOST[:PORT][/PATH]`) within `timeout` for the
/// whole exchange, and returns the status line of a 200 answer.
pub fn check_health(url: &str, timeout: Duration) -> Result<String, HealthError> {
    let deadline = Instant::now() + timeout;
    let bad_url = || HealthError::Url { url: url.to_string() };
    let rest = url.strip_prefix("http://").ok_or_else(bad_url)?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |at| rest.split_at(at));
    if authority.is_empty() || authority.contains(['@', '?', '#']) {
        return Err(bad_url());
    }
    // A port is what follows the last ':', unless that ':' is inside an IPv6 address's brackets.
    let has_port = authority.rsplit_once(':').is_some_and(|(host, _)| !host.contains(':') || host.ends_with(']'));
    let target = if has_port { authority.to_string() } else { format!("{authority}:80") };
    let resolve_error = |cause| HealthError::Resolve { url: url.to_string(), authority: authority.to_string(), cause };
    let addrs: Vec<SocketAddr> = target.to_socket_addrs().map_err(resolve_error)?.collect();
    let timed_out = || HealthError::Timeout { url: url.to_string(), timeout };
    let remaining = || deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero()).ok_or_else(timed_out);
    let mut stream = None;
    let mut failure = None;
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, remaining()?) {
            Ok(s) => {
                stream = Some(s);
                break;
            }
            Err(e) if is_timeout(&e) => return Err(timed_out()),
            Err(cause) => failure = Some(HealthError::Connect { url: url.to_string(), addr, cause }),
        }
    }
    let Some(mut stream) = stream else {
        return Err(failure.unwrap_or_else(|| resolve_error(std::io::ErrorKind::NotFound.into())));
    };
    let exchange = |cause: std::io::Error| {
        if is_timeout(&cause) { timed_out() } else { HealthError::Exchange { url: url.to_string(), cause } }
    };
    stream.set_write_timeout(Some(remaining()?)).map_err(exchange)?;
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: {authority}\r\nUser-Agent: rankpulse-healthcheck\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).map_err(exchange)?;
    let mut answer = Vec::with_capacity(256);
    let mut buffer = [0u8; 256];
    while !answer.windows(2).any(|w| w == b"\r\n") && answer.len() < STATUS_LINE_MAX {
        stream.set_read_timeout(Some(remaining()?)).map_err(exchange)?;
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(exchange(e)),
        }
    }
    let answer = String::from_utf8_lossy(&answer);
    let status_line = answer.split("\r\n").next().unwrap_or_default().to_string();
    let mut words = status_line.split(' ');
    let status = match (words.next(), words.next().map(str::parse::<u16>)) {
        (Some(version), Some(Ok(status))) if version.starts_with("HTTP/") => status,
        _ => return Err(HealthError::NotHttp { url: url.to_string(), answer: status_line }),
    };
    if status != 200 {
        return Err(HealthError::Status { url: url.to_string(), status, status_line });
    }
    Ok(status_line)
}

/// How a socket timeout shows: `WouldBlock` for reads and writes on Unix.
fn is_timeout(e: &std::io::Error) -> bool {
    matches!(e.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A server within `bounds` on a loopback port, its runtime's one
    /// worker serving while the test's thread is the client.
    struct Running {
        runtime: tokio::runtime::Runtime,
        addr: SocketAddr,
        stop: tokio::sync::oneshot::Sender<()>,
        server: tokio::task::JoinHandle<std::io::Result<()>>,
    }

    impl Running {
        fn start(published: Arc<Published>, bounds: Bounds) -> Running {
            Running::start_with(published, bounds, Access::default())
        }

        fn start_with(published: Arc<Published>, bounds: Bounds, access: Access) -> Running {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
            let listener = runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            let addr = listener.local_addr().unwrap();
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let shutdown = async move {
                let _ = stopped.await;
            };
            let server = runtime.spawn(serve_bounded(listener, published, Routes::All, access, shutdown, bounds));
            Running { runtime, addr, stop, server }
        }

        fn stop(self) {
            let _ = self.stop.send(());
            self.runtime.block_on(self.server).unwrap().unwrap();
        }
    }

    /// The health check speaks the daemon's own server's HTTP: `/healthz`
    /// is 200, a path it does not serve is not.
    #[test]
    fn the_health_check_reads_the_daemons_healthz() {
        // The daemon's bounds, as `serve` passes them.
        let running = Running::start(Arc::new(Published::new(&crate::config::Config::default())), BOUNDS);
        let addr = running.addr;
        let ok = check_health(&format!("http://{addr}/healthz"), Duration::from_secs(5));
        let missing = check_health(&format!("http://{addr}/nope"), Duration::from_secs(5));
        assert_eq!(ok.unwrap(), "HTTP/1.1 200 OK");
        assert!(matches!(missing, Err(HealthError::Status { status: 404, .. })), "{missing:?}");
        running.stop();
    }

    /// `http.probe_listen` answers the probes alone, without TLS or a
    /// password, while the main port asks for both; `http.open_probes =
    /// false` puts the main port's probes behind the password.
    #[test]
    fn probes_have_their_own_plain_port_and_close_with_open_probes_off() {
        let dir = std::env::temp_dir().join(format!("rankpulse-probes-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        let hash = bcrypt::hash("pw", 4).unwrap();
        std::fs::write(
            dir.join("tls.yml"),
            format!("tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\nbasic_auth_users:\n  u: {hash}\n"),
        )
        .unwrap();
        std::fs::write(dir.join("auth.yml"), format!("basic_auth_users:\n  u: {hash}\n")).unwrap();
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let serve = |file: &str, open_probes: bool, probes: bool| {
            let access = Access {
                web_config: Some(Arc::new(WebConfig::load(&dir.join(file)).unwrap())),
                open_probes,
                max_password_checks: 1,
            };
            let bind = || runtime.block_on(tokio::net::TcpListener::bind("127.0.0.1:0")).unwrap();
            let (main, probe) = (bind(), probes.then(bind));
            let addrs = (main.local_addr().unwrap(), probe.as_ref().map(|p| p.local_addr().unwrap()));
            let published = Arc::new(Published::new(&crate::config::Config::default()));
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let server = runtime.spawn(serve_with_probes(main, probe, published, access, stopped));
            (addrs, stop, server)
        };
        let health = |url: String| check_health(&url, Duration::from_secs(5));

        let ((main, probe), stop, server) = serve("tls.yml", true, true);
        let probe = probe.unwrap();
        assert_eq!(health(format!("http://{probe}/healthz")).unwrap(), "HTTP/1.1 200 OK");
        assert!(matches!(health(format!("http://{probe}/readyz")), Err(HealthError::Status { status: 503, .. })));
        assert!(matches!(health(format!("http://{probe}/metrics")), Err(HealthError::Status { status: 404, .. })));
        assert!(matches!(health(format!("http://{main}/healthz")), Err(HealthError::Status { status: 400, .. })));
        let _ = stop.send(());
        runtime.block_on(server).unwrap().unwrap();

        for (open, want) in [(true, 200), (false, 401)] {
            let ((main, _), stop, server) = serve("auth.yml", open, false);
            let got = match health(format!("http://{main}/healthz")) {
                Ok(_) => 200,
                Err(HealthError::Status { status, .. }) => status,
                Err(e) => panic!("{e}"),
            };
            assert_eq!(got, want, "open_probes = {open}");
            let _ = stop.send(());
            runtime.block_on(server).unwrap().unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// RFC 9112 §3.2: HTTP/1.1 without one Host field is a bad request;
    /// HTTP/1.0 has no Host to require.
    #[test]
    fn http_1_1_needs_one_host() {
        let running = Running::start(Arc::new(Published::new(&crate::config::Config::default())), BOUNDS);
        let status = |request: &[u8]| {
            let mut s = TcpStream::connect(running.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
            s.write_all(request).unwrap();
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer).lines().next().unwrap_or_default().to_string()
        };
        assert_eq!(status(b"GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n"), "HTTP/1.1 400 Bad Request");
        assert_eq!(
            status(b"GET /healthz HTTP/1.1\r\nHost: a\r\nHost: b\r\nConnection: close\r\n\r\n"),
            "HTTP/1.1 400 Bad Request"
        );
        assert_eq!(status(b"GET /healthz HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"), "HTTP/1.1 200 OK");
        assert_eq!(status(b"GET /healthz HTTP/1.0\r\n\r\n"), "HTTP/1.0 200 OK");
        running.stop();
    }

    /// Clients that connect and send half a request are closed after the
    /// header timeout; while they hold every connection, a new one waits in
    /// the backlog and is answered once they are gone.
    #[test]
    fn half_sent_requests_are_closed_and_do_not_hold_the_server() {
        let published = Arc::new(Published::new(&crate::config::Config::default()));
        let timeout = Duration::from_millis(1000);
        let running = Running::start(published.clone(), Bounds { header_read: timeout, max_connections: 2, ..BOUNDS });
        let addr = running.addr;
        let started = Instant::now();
        let slow: Vec<TcpStream> = (0..2)
            .map(|_| {
                let mut s = TcpStream::connect(addr).unwrap();
                s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                s
            })
            .collect();
        // Both slots are taken (or about to be); this one is served after.
        let answered = check_health(&format!("http://{addr}/healthz"), Duration::from_secs(20));
        assert_eq!(answered.unwrap(), "HTTP/1.1 200 OK");
        for mut s in slow {
            // Closed by the server: end of stream, or a reset; never the
            // read timeout, and never a response to the half request.
            let mut rest = Vec::new();
            match s.read_to_end(&mut rest) {
                Ok(_) => assert!(!rest.starts_with(b"HTTP/1.1 200"), "{:?}", String::from_utf8_lossy(&rest)),
                Err(e) => assert!(!is_timeout(&e), "the half-sent request was not closed: {e}"),
            }
        }
        assert!(started.elapsed() >= timeout, "closed before the timeout: {:?}", started.elapsed());
        // The health check's own connection ended with its answer.
        assert_eq!(published.timed_out.load(Ordering::Relaxed), 2);
        // Full after the second slow client, and perhaps again once the
        // health check took the first one's slot before the second left.
        assert!(published.slots_full.load(Ordering::Relaxed) >= 1);
        running.stop();
    }

    /// On the TLS port, a client that sends nothing, or the first byte of
    /// a handshake and no more, is closed by the request-head bound and
    /// counted, like a half-sent request on the plain port.
    #[test]
    fn silent_and_half_handshaking_tls_clients_are_closed_and_counted() {
        let dir = std::env::temp_dir().join(format!("rankpulse-tls-silent-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["localhost".into()]).unwrap().self_signed(&key).unwrap();
        std::fs::write(dir.join("tls.crt"), cert.pem()).unwrap();
        std::fs::write(dir.join("tls.key"), key.serialize_pem()).unwrap();
        std::fs::write(dir.join("web.yml"), "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n").unwrap();
        let access = Access {
            web_config: Some(Arc::new(WebConfig::load(&dir.join("web.yml")).unwrap())),
            open_probes: true,
            max_password_checks: 1,
        };
        let published = Arc::new(Published::new(&crate::config::Config::default()));
        let timeout = Duration::from_millis(500);
        let running = Running::start_with(published.clone(), Bounds { header_read: timeout, ..BOUNDS }, access);
        let started = Instant::now();
        let clients: Vec<TcpStream> = [&b""[..], &[TLS_HANDSHAKE][..]]
            .iter()
            .map(|sent| {
                let mut s = TcpStream::connect(running.addr).unwrap();
                s.write_all(sent).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
                s
            })
            .collect();
        for mut s in clients {
            let mut rest = Vec::new();
            match s.read_to_end(&mut rest) {
                Ok(_) => assert!(rest.is_empty(), "{:?}", String::from_utf8_lossy(&rest)),
                Err(e) => assert!(!is_timeout(&e), "the silent TLS client was not closed: {e}"),
            }
        }
        assert!(started.elapsed() >= timeout, "closed before the bound: {:?}", started.elapsed());
        assert_eq!(published.timed_out.load(Ordering::Relaxed), 2);
        assert_eq!(published.refused(Refusal::TlsHandshake), 0);
        running.stop();
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Every `/metrics` answer shares the published exposition: a copy per
    /// request made each client that never reads its answer hold a whole
    /// exposition for up to a minute (300 of them: 28 MB to 88 MB).
    #[tokio::test]
    async fn metrics_answers_share_the_published_exposition() {
        let published = Arc::new(Published::new(&crate::config::Config::default()));
        published.set_exposition("rankpulse_up 1\n".repeat(1_000));
        let response = metrics(State(published.clone()), HeaderMap::new()).await;
        // Bytes alone would answer application/octet-stream.
        assert_eq!(response.headers()[header::CONTENT_TYPE], METRICS_CONTENT_TYPE);
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        assert_eq!(body, published.exposition());
        assert_eq!(body.as_ptr(), published.exposition().as_ptr(), "the answer is a copy");
    }

    fn accept(value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT_ENCODING, value.parse().unwrap());
        h
    }

    #[test]
    fn gzip_is_accepted_as_rfc_9110_weighs_it() {
        for yes in ["gzip", "gzip, deflate", "deflate, GZIP;q=0.5", "*", "br, *;q=0.1", "x-gzip", "gzip;q=1, *;q=0"] {
            assert!(accepts_gzip(&accept(yes)), "{yes}");
        }
        // Prometheus's own header.
        assert!(accepts_gzip(&accept("gzip")));
        for no in ["identity", "br", "gzip;q=0", "gzip; q=0.0", "*;q=0", "gzip;q=0, *", "gzipped", ""] {
            assert!(!accepts_gzip(&accept(no)), "{no}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    /// A scraper that accepts gzip gets the exposition compressed, made
    /// once per publish and shared; any other client gets the text.
    #[tokio::test]
    async fn metrics_is_gzipped_once_per_publish_for_clients_that_accept_it() {
        use std::io::Read as _;
        let published = Arc::new(Published::new(&crate::config::Config::default()));
        let gunzip = |b: &[u8]| {
            let mut text = Vec::new();
            flate2::read::GzDecoder::new(b).read_to_end(&mut text).unwrap();
            text
        };
        let ask = |published: &Arc<Published>, encoding: Option<&str>| {
            let (p, headers) = (published.clone(), encoding.map(accept).unwrap_or_default());
            async move {
                let response = metrics(State(p), headers).await;
                let h = response.headers().clone();
                (h, axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap())
            }
        };
        published.set_exposition("rankpulse_events_total{kind=\"judgment\"} 12345\n".repeat(2_000));
        let (h, first) = ask(&published, Some("gzip")).await;
        assert_eq!(h[header::CONTENT_ENCODING], "gzip");
        assert_eq!(h[header::CONTENT_TYPE], METRICS_CONTENT_TYPE);
        assert_eq!(h[header::VARY], "accept-encoding");
        assert_eq!(gunzip(&first), published.exposition());
        assert!(first.len() * 20 < published.exposition().len(), "{} bytes", first.len());
        let (_, second) = ask(&published, Some("deflate, gzip")).await;
        assert_eq!(second.as_ptr(), first.as_ptr(), "compressed again for the same publish");

        published.set_exposition("rankpulse_up 1\n".to_string());
        let (_, third) = ask(&published, Some("gzip")).await;
        assert_eq!(gunzip(&third), b"rankpulse_up 1\n");

        for other in [None, Some("identity"), Some("gzip;q=0")] {
            let (h, text) = ask(&published, other).await;
            assert!(h.get(header::CONTENT_ENCODING).is_none(), "{other:?}");
            assert_eq!(h[header::VARY], "accept-encoding");
            assert_eq!(text, published.exposition(), "{other:?}");
        }
    }

    /// A client that asks for `/metrics` and never reads the answer holds
    /// its slot until the connection's lifetime and grace are over, then
    /// the server drops it and serves the next one.
    #[test]
    fn a_client_that_never_reads_is_dropped_after_its_lifetime() {
        let published = Arc::new(Published::new(&crate::config::Config::default()));
        // Far more than the socket buffers hold.
        published.set_exposition("x".repeat(64 << 20));
        let bounds = Bounds {
            lifetime: Duration::from_millis(500),
            grace: Duration::from_millis(500),
            max_connections: 1,
            ..BOUNDS
        };
        let running = Running::start(published.clone(), bounds);
        let addr = running.addr;
        let started = Instant::now();
        let mut stuck = TcpStream::connect(addr).unwrap();
        stuck.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        let answered = check_health(&format!("http://{addr}/healthz"), Duration::from_secs(20));
        assert_eq!(answered.unwrap(), "HTTP/1.1 200 OK");
        assert!(started.elapsed() >= Duration::from_secs(1), "served before the stuck one was dropped");
        assert_eq!(published.timed_out.load(Ordering::Relaxed), 1);
        drop(stuck);
        running.stop();
    }

    #[test]
    fn only_plain_http_urls_are_checked() {
        for url in ["https://127.0.0.1:9464/healthz", "127.0.0.1:9464", "http://", "http://user@host/healthz"] {
            assert!(matches!(check_health(url, Duration::from_secs(1)), Err(HealthError::Url { .. })), "{url}");
        }
    }
}
