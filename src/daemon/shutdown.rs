//! The ordered shutdown, once the loop has stopped fetching: finalize (or
//! checkpoint) every open list → publish → commit → stop HTTP → leave the
//! group. Each step waits for the one before, bounded in time, so that
//! what is committed is always published (or durable) first.

use super::publisher::{JobOutcome, Publisher};
use super::{CONSUMER_CLOSE_TIMEOUT, Daemon, DaemonError, RunSummary};
use crate::http::Published;
use crate::kafka::Consumer;
use rdkafka::consumer::{CommitMode, Consumer as _};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// Longest a final synchronous commit may take at shutdown.
const FINAL_COMMIT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest HTTP connections may take to finish at shutdown.
const HTTP_DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// Longest the dead-letter copies may take to be acknowledged at shutdown.
const DEAD_LETTER_FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

impl Daemon {
    /// Dead-letter copies must be acknowledged before the offsets of their
    /// messages are committed.
    pub(super) fn dead_letters_flushed(&self) -> bool {
        match &self.dead_letters {
            Some(dl) => dl.flush(DEAD_LETTER_FLUSH_TIMEOUT).is_ok(),
            None => true,
        }
    }
}

/// Steps 2 to 5 of the ordered shutdown (step 1, to stop fetching, is the
/// loop's: it owns the streams), then leaving the group.
pub(super) async fn shut_down(
    mut daemon: Daemon,
    consumer: Arc<Consumer>,
    published: &Published,
    http_stop: tokio::sync::oneshot::Sender<()>,
    http: tokio::task::JoinHandle<std::io::Result<()>>,
    last_message_at: Option<std::time::Instant>,
) -> Result<RunSummary, DaemonError> {
    published.set_ready(false);
    daemon.apply_rebalances()?;
    // The job in flight first: its checkpoint is superseded by the last.
    if let Some(done) = daemon.publisher.wait() {
        daemon.note_done(done);
    }
    daemon.pending_commit = None;
    // Without checkpoints, dead-letter copies settle first: the last
    // exposition counts them (sent or failed), and the offsets covering
    // them are committed only if they did. A checkpoint waits for them
    // itself (its barrier), so it is not waited for twice.
    let dead_letters_settled = daemon.store.is_some() || daemon.dead_letters_flushed();
    // 2. Finalize every open list, or checkpoint it to continue after a
    // restart; 3. publish the result.
    daemon.update_health();
    let durable = if daemon.store.is_some() {
        daemon.request_checkpoint();
        let done = daemon.publisher.wait();
        let durable = matches!(done, Some(JobOutcome::Written { .. }));
        if let Some(done) = done {
            daemon.note_done(done);
        }
        durable
    } else {
        daemon.finalize_all();
        daemon.publish();
        daemon.publisher.wait();
        dead_letters_settled
    };
    // 4. Commit what is safe: everything consumed, now that nothing is open
    // (or everything open is checkpointed).
    let open_lists_at_shutdown = daemon.open_lists();
    let finalized_here = daemon.lists_finalized();
    let publisher = std::mem::replace(&mut daemon.publisher, Publisher::stopped());
    let published_total = publisher.finish();
    let mut summary = RunSummary {
        messages: daemon.messages,
        // Without state.dir the shards hand their accumulations to the
        // publisher, which holds the total.
        lists_finalized: if daemon.store.is_some() {
            finalized_here
        } else {
            published_total.series.values().map(|s| s.lists()).sum()
        },
        open_lists_at_shutdown,
        committed: BTreeMap::new(),
        final_exposition: String::new(),
        first_message_at: daemon.first_message_at,
        last_message_at,
        loop_gaps: daemon.loop_gaps.clone(),
    };
    if durable && let Some((tpl, moved)) = daemon.commit_points(true) {
        let c = consumer.clone();
        let commit = tokio::task::spawn_blocking(move || c.commit(&tpl, CommitMode::Sync));
        match tokio::time::timeout(FINAL_COMMIT_TIMEOUT, commit).await {
            Ok(Ok(Ok(()))) => daemon.mark_committed(&moved),
            Ok(Ok(Err(e))) => tracing::error!("final commit failed: {e}"),
            _ => tracing::error!("final commit timed out"),
        }
    }
    for s in daemon.sources.states() {
        if let Some(c) = s.committed {
            summary.committed.insert((s.topic.clone(), s.partition), c);
        }
    }
    for (tp, c) in &daemon.committed {
        summary.committed.insert(tp.clone(), *c);
    }
    summary.final_exposition = String::from_utf8_lossy(&published.exposition()).into_owned();
    // 5. Stop HTTP: requests in flight get a moment to finish, but a
    // client that never completes its request (or never closes) must not
    // hold the process: the server is dropped after that moment.
    let _ = http_stop.send(());
    let mut http = http;
    if tokio::time::timeout(HTTP_DRAIN_TIMEOUT, &mut http).await.is_err() {
        http.abort();
        tracing::warn!("HTTP connections still open {HTTP_DRAIN_TIMEOUT:?} after shutdown began; closed");
    }
    // Closing the consumer leaves the group; with the broker unreachable
    // librdkafka can block on it, so it gets a bounded time off the runtime.
    drop(daemon);
    let close = tokio::task::spawn_blocking(move || drop(consumer));
    if tokio::time::timeout(CONSUMER_CLOSE_TIMEOUT, close).await.is_err() {
        tracing::warn!("the Kafka consumer did not close in {CONSUMER_CLOSE_TIMEOUT:?}; exiting anyway");
    }
    Ok(summary)
}
