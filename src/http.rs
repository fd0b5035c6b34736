//! HTTP: `/metrics` (Prometheus text), `/healthz`, `/readyz` and `/`.
//!
//! Serves what the daemon published last; no handler touches the pipeline,
//! so a scrape never slows consumption and never holds a lock for longer
//! than it takes to clone an `Arc`.

use crate::status::{History, render_page};
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// What the daemon publishes for the handlers.
#[derive(Debug, Default)]
pub struct Published {
    /// The latest exposition, replaced whole on every publish tick.
    exposition: RwLock<Arc<String>>,
    /// Consuming: partitions assigned and the broker reachable.
    ready: AtomicBool,
    /// Headline series over the last hour, for the status page.
    history: Mutex<History>,
}

impl Published {
    pub fn new(config: &crate::config::Config) -> Self {
        Published { history: Mutex::new(History::new(config)), ..Published::default() }
    }

    pub fn set_exposition(&self, text: String) {
        let text = Arc::new(text);
        match self.exposition.write() {
            Ok(mut guard) => *guard = text,
            Err(poisoned) => *poisoned.into_inner() = text,
        }
    }

    pub fn exposition(&self) -> Arc<String> {
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

    /// Runs `f` on the history (the daemon samples into it as it publishes).
    pub fn with_history<T>(&self, f: impl FnOnce(&mut History) -> T) -> T {
        match self.history.lock() {
            Ok(mut h) => f(&mut h),
            Err(poisoned) => f(&mut poisoned.into_inner()),
        }
    }
}

pub const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

pub fn router(published: Arc<Published>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .route("/", get(index))
        .with_state(published)
}

async fn metrics(State(p): State<Arc<Published>>) -> Response {
    ([(header::CONTENT_TYPE, METRICS_CONTENT_TYPE)], p.exposition().as_str().to_owned()).into_response()
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

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    published: Arc<Published>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(published)).with_graceful_shutdown(shutdown).await
}
