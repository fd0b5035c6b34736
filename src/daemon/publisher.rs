//! The daemon's publisher: the last stage of the flow, on a thread of its
//! own. The consumer task hands it, once per tick, what it needs to render
//! `/metrics` (and, with `state.dir`, a checkpoint to write), and goes back
//! to the stream: rendering, merging shards, encoding, writing and fsyncing
//! never hold up the loop.
//!
//! Without `state.dir`, a job carries only the accumulations each shard
//! made since the last job ([`Pipeline::take_accumulated`]): the publisher
//! keeps their merged total, so a tick costs the consumer the buckets that
//! changed, not every bucket of every series of every shard. With
//! `state.dir`, a job carries a snapshot of every shard (the accumulators
//! shared copy-on-write, so taking it costs the consumer a reference per
//! series, plus a copy of the open lists), which the publisher encodes; it
//! waits until the dead-letter copies it covers are settled, writes it,
//! and only then publishes what it holds, so that what Prometheus has seen
//! is always restorable.
//!
//! One job is in flight at a time: while the publisher is busy the shards
//! keep accumulating, and the next job carries both ticks' worth. Nothing
//! queues up when rendering is slower than the tick.
//!
//! [`Pipeline::take_accumulated`]: rankpulse_core::pipeline::Pipeline::take_accumulated

use crate::config::Config;
use crate::health::DaemonHealth;
use crate::http::Published;
use crate::kafka::DeliveryTracker;
use crate::kafka::PartitionState;
use crate::publish::{Snapshot, render};
use crate::state::{Checkpoint, ShardCheckpoint, StateError, StateStore};
use rankpulse_core::accumulate::Accumulators;
use rankpulse_core::assemble::AssemblerSnapshot;
use rankpulse_core::pipeline::OpsCounters;
use rankpulse_core::sessions::SessionLedger;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::thread::JoinHandle;
use std::time::Duration;

/// Longest the publisher waits for the dead-letter copies a checkpoint
/// covers before giving up on that checkpoint (the next tick tries again).
const DEAD_LETTER_SETTLE_TIMEOUT: Duration = Duration::from_secs(5);

/// What an exposition shows besides the accumulators, as of the job.
#[derive(Clone)]
pub(super) struct View {
    pub now_ms: i64,
    pub counters: OpsCounters,
    pub open_lists: usize,
    pub partitions: BTreeMap<(String, i32), PartitionState>,
    pub health: DaemonHealth,
}

pub(super) enum Job {
    /// No `state.dir`: the shards' accumulations since the last job.
    Publish { taken: Vec<Accumulators>, view: View },
    /// `state.dir`: a checkpoint to make durable, then publish; its
    /// shards come as snapshots, encoded here. The barrier: dead-letter
    /// copies below it must settle first.
    Checkpoint {
        checkpoint: Box<Checkpoint>,
        shards: Vec<ShardSnapshot>,
        barrier: Option<(Arc<DeliveryTracker>, u64)>,
        view: View,
    },
    /// A checkpoint was due but cannot be taken (shards wait for the last
    /// one to be read back): counted as failed, the health published.
    Unwritable { view: View },
}

/// One shard as a checkpoint holds it, before encoding.
pub(super) struct ShardSnapshot {
    pub partition: i32,
    pub owned: bool,
    pub offsets: BTreeMap<String, i64>,
    pub assembler: AssemblerSnapshot,
    pub sessions: SessionLedger,
    pub accumulators: Accumulators,
    pub counters: OpsCounters,
}

/// What became of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum JobOutcome {
    Published,
    /// The checkpoint is durable (written at `written_ms`) and published.
    Written {
        written_ms: i64,
    },
    /// It could not be made durable: nothing was published or may be committed.
    NotWritten,
    /// Not written, or written but not to be taken (see `state::kafka`):
    /// these partitions were taken over by another instance, and this one
    /// must give them up. Nothing was published or may be committed.
    Fenced {
        partitions: Vec<i32>,
    },
}

/// The consumer's end of the publisher.
pub(super) struct Publisher {
    jobs: Option<Sender<Job>>,
    done: Receiver<JobOutcome>,
    thread: Option<JoinHandle<Accumulators>>,
    /// A job was sent and its [`Done`] not yet received.
    busy: bool,
}

impl Publisher {
    pub fn start(config: Config, published: Arc<Published>, store: Option<Arc<StateStore>>) -> std::io::Result<Self> {
        let (jobs, inbox) = channel();
        let (outbox, done) = channel();
        let thread = std::thread::Builder::new()
            .name("rankpulse-publish".into())
            .spawn(move || Worker::new(config, published, store).run(inbox, outbox))?;
        Ok(Publisher { jobs: Some(jobs), done, thread: Some(thread), busy: false })
    }

    /// Whether a job may be sent now; collects what finished meanwhile.
    pub fn poll(&mut self) -> Option<JobOutcome> {
        match self.done.try_recv() {
            Ok(done) => {
                self.busy = false;
                Some(done)
            }
            Err(TryRecvError::Empty) => None,
            // The thread is gone (it panicked): publishing stopped; the
            // loop goes on and shutdown reports it.
            Err(TryRecvError::Disconnected) => None,
        }
    }

    /// A publisher without a thread, in place of one [`Self::finish`]ed.
    pub fn stopped() -> Self {
        let (_, done) = channel();
        Publisher { jobs: None, done, thread: None, busy: false }
    }

    pub fn busy(&self) -> bool {
        self.busy
    }

    pub fn send(&mut self, job: Job) {
        if let Some(jobs) = &self.jobs
            && jobs.send(job).is_ok()
        {
            self.busy = true;
        }
    }

    /// Waits for the job in flight (shutdown, and a revoke with
    /// `state.dir`, which must not read a checkpoint being written).
    pub fn wait(&mut self) -> Option<JobOutcome> {
        if !self.busy {
            return None;
        }
        self.busy = false;
        self.done.recv().ok()
    }

    /// Stops the thread after its last job; the merged total (no
    /// `state.dir`) or the last checkpoint's accumulators.
    pub fn finish(mut self) -> Accumulators {
        self.wait();
        self.jobs = None;
        self.thread.take().and_then(|t| t.join().ok()).unwrap_or_else(|| Accumulators::new(0, 1))
    }
}

struct Worker {
    config: Config,
    published: Arc<Published>,
    store: Option<Arc<StateStore>>,
    /// Without `state.dir`: every accumulation taken from the shards,
    /// merged. With it: what the last durable checkpoint holds.
    total: Accumulators,
    /// Checkpoints written and failed, and the last one's time: the
    /// consumer's health snapshot predates the write.
    checkpoints: u64,
    checkpoint_failures: u64,
    last_checkpoint_seconds: Option<f64>,
    /// What the last durable checkpoint's exposition showed besides the
    /// accumulators (see [`Worker::publish_health`]).
    durable_view: Option<View>,
}

impl Worker {
    fn new(config: Config, published: Arc<Published>, store: Option<Arc<StateStore>>) -> Self {
        let mut total = Accumulators::new(config.sorted_cutoffs().len(), config.windows.bucket.ms());
        total.range = config.pipeline_settings().bucket_range();
        Worker {
            config,
            published,
            store,
            total,
            checkpoints: 0,
            checkpoint_failures: 0,
            last_checkpoint_seconds: None,
            durable_view: None,
        }
    }

    fn run(mut self, inbox: Receiver<Job>, outbox: Sender<JobOutcome>) -> Accumulators {
        while let Ok(job) = inbox.recv() {
            let done = match job {
                Job::Publish { taken, view } => {
                    for a in &taken {
                        self.total.merge(a);
                    }
                    if self.store.is_some() {
                        // With a store this is the state restored at start:
                        // durable, what a failed checkpoint keeps showing.
                        self.durable_view = Some(view.clone());
                    }
                    self.publish(view);
                    JobOutcome::Published
                }
                Job::Checkpoint { checkpoint, shards, barrier, view } => {
                    self.checkpoint(*checkpoint, shards, barrier, view)
                }
                Job::Unwritable { view } => {
                    self.checkpoint_failures += 1;
                    self.publish_health(view);
                    JobOutcome::NotWritten
                }
            };
            if outbox.send(done).is_err() {
                break;
            }
        }
        self.total
    }

    fn checkpoint(
        &mut self,
        mut checkpoint: Checkpoint,
        shards: Vec<ShardSnapshot>,
        barrier: Option<(Arc<DeliveryTracker>, u64)>,
        view: View,
    ) -> JobOutcome {
        let Some(store) = &self.store else { return JobOutcome::NotWritten };
        // A checkpoint covers the offsets of invalid messages: their
        // dead-letter copies must be settled first.
        if let Some((tracker, seq)) = barrier
            && !tracker.wait_settled_before(seq, DEAD_LETTER_SETTLE_TIMEOUT)
        {
            tracing::warn!("dead-letter copies not acknowledged; checkpoint postponed");
            self.checkpoint_failures += 1;
            self.publish_health(view);
            return JobOutcome::NotWritten;
        }
        let mut total = Accumulators::new(self.total.cutoffs, self.total.bucket_ms);
        total.range = self.total.range;
        checkpoint.shards = shards
            .into_iter()
            .map(|s| {
                total.merge(&s.accumulators);
                ShardCheckpoint {
                    partition: s.partition,
                    owned: s.owned,
                    offsets: s.offsets,
                    assembler: s.assembler.into_state(),
                    sessions: s.sessions,
                    accumulators: s.accumulators,
                    counters: s.counters,
                }
            })
            .collect();
        match store.write(&checkpoint) {
            Ok(_) => {}
            // Logged by the store.
            Err(StateError::Fenced { partitions, .. }) => return JobOutcome::Fenced { partitions },
            Err(e) => {
                tracing::error!("{e}");
                self.checkpoint_failures += 1;
                self.publish_health(view);
                return JobOutcome::NotWritten;
            }
        }
        self.checkpoints += 1;
        self.last_checkpoint_seconds = Some(checkpoint.written_ms as f64 / 1000.0);
        self.total = total;
        self.durable_view = Some(view.clone());
        self.publish(view);
        JobOutcome::Written { written_ms: checkpoint.written_ms }
    }

    /// After a checkpoint that was not written: the exposition keeps what
    /// the last durable one showed (counters must not run ahead of what a
    /// restart restores), with the health of now, so that an outage of the
    /// state topic shows (`rankpulse_kafka_connected`,
    /// `rankpulse_checkpoint_failures_total`) and its alerts can fire.
    fn publish_health(&mut self, view: View) {
        // Lag and freshness per partition are of now (no checkpoint holds
        // them); counters and open lists are the durable ones.
        let durable = match &self.durable_view {
            Some(d) => View { now_ms: view.now_ms, health: view.health, partitions: view.partitions, ..d.clone() },
            None => View {
                now_ms: view.now_ms,
                counters: OpsCounters::default(),
                open_lists: 0,
                partitions: view.partitions,
                health: view.health,
            },
        };
        self.publish(durable);
    }

    fn publish(&mut self, mut view: View) {
        if self.store.is_some() {
            view.health.checkpoints = self.checkpoints;
            view.health.checkpoint_failures = self.checkpoint_failures;
            view.health.last_checkpoint_seconds = self.last_checkpoint_seconds;
        }
        view.health.http_timed_out = self.published.timed_out.load(std::sync::atomic::Ordering::Relaxed);
        view.health.http_slots_full = self.published.slots_full.load(std::sync::atomic::Ordering::Relaxed);
        view.health.http_refused = crate::http::Refusal::ALL.map(|r| (r.label(), self.published.refused(r)));
        view.health.web_config_reload_failures =
            self.published.web_config_reload_failures.load(std::sync::atomic::Ordering::Relaxed);
        self.total.prune(view.now_ms);
        let text = render(&Snapshot {
            config: &self.config,
            now_ms: view.now_ms,
            accumulators: &self.total,
            counters: &view.counters,
            open_lists: view.open_lists,
            partitions: &view.partitions,
            health: Some(&view.health),
        });
        self.published.set_exposition(text);
        self.published.with_history(|h| h.sample(&self.config, &self.total, view.now_ms));
    }
}
