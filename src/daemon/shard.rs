//! One pipeline shard per partition number (see `kafka`): what the
//! consumer task keeps of a partition between messages, and the
//! [`RETIRED`] shard that keeps the published counters of partitions this
//! instance no longer holds. `consume` feeds shards, `rebalance` creates,
//! freezes and drops them, `commit` reads their positions and `tick`
//! snapshots them for checkpoints.

use super::publisher::ShardSnapshot;
use crate::align::Alignment;
use crate::config::Config;
use crate::state::ShardCheckpoint;
use rankpulse_core::assemble::{DimensionBudget, Source};
use rankpulse_core::pipeline::Pipeline;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// The key of the shard that holds what dropped shards accumulated: their
/// counters were published and must never go back. It has no partition,
/// lists or offsets; it is published and checkpointed like any shard.
pub(super) const RETIRED: i32 = -1;

/// One partition number's pipeline and the input positions it covers.
pub(super) struct Shard {
    pub(super) pipeline: Pipeline,
    /// Next offset per topic: every message before it is in this shard's
    /// state, so one below it (re-delivered after a restart or rebalance)
    /// is skipped.
    pub(super) next_offsets: BTreeMap<String, i64>,
    /// Assigned to this instance now. A shard that is not keeps its
    /// counters (they were published) but its open lists are frozen: the
    /// partition's new owner continues them.
    pub(super) owned: bool,
    /// The partition's end was reached and nothing came since: only then
    /// may its lists close on processing time. A backlog or a broker outage
    /// is not idleness.
    pub(super) idle: bool,
    /// Which of the partition's topics are held back for running ahead in
    /// event time (`kafka.max_topic_drift`).
    pub(super) alignment: Alignment,
    /// Without `state.dir`: the lowest offset per source that the last
    /// complete walk of the open lists found, with the positions at the
    /// walk's end folded in (see
    /// [`Daemon::walk_open_lists`](super::Daemon::walk_open_lists)).
    /// Commits use it; `None` until a walk ends after the last rebalance,
    /// and then a commit walks the lists at once.
    pub(super) commit_floor: Option<Vec<Source>>,
}

impl Shard {
    pub(super) fn new(config: &Config, budget: &Arc<Mutex<DimensionBudget>>) -> Shard {
        Shard {
            pipeline: Pipeline::with_budget(&config.pipeline_settings(), budget.clone()),
            next_offsets: BTreeMap::new(),
            owned: true,
            idle: false,
            alignment: Alignment::default(),
            commit_floor: None,
        }
    }

    /// Takes a checkpointed shard's open lists and offsets, and with
    /// `whole` its sums too (its own restart, not another's hand-over).
    /// [`crate::state::decode`] refused whatever numbers no stream makes.
    pub(super) fn restore(&mut self, c: ShardCheckpoint, whole: bool) {
        let sums = whole.then_some((c.accumulators, c.counters));
        self.pipeline.restore(c.assembler, c.sessions, sums);
        self.next_offsets = c.offsets;
    }

    /// Holds back or releases this partition's topics (see
    /// [`Alignment::check`]), counting the holds onto `holds`.
    pub(super) fn align(&mut self, drift_ms: i64, now_ms: i64, holds: &mut u64) {
        self.alignment.check(self.pipeline.assembler().lanes(), drift_ms, now_ms, &mut |_, hold| {
            *holds += u64::from(hold);
        });
    }

    /// What a checkpoint of this shard holds, taken on the consumer task
    /// and encoded by the publisher. The accumulators are shared, not
    /// copied (see [`rankpulse_core::accumulate::Accumulators::series`]).
    pub(super) fn snapshot(&self, partition: i32) -> ShardSnapshot {
        ShardSnapshot {
            partition,
            owned: self.owned,
            offsets: self.next_offsets.clone(),
            assembler: self.pipeline.assembler().snapshot(),
            sessions: self.pipeline.sessions().clone(),
            accumulators: self.pipeline.accumulators().clone(),
            counters: self.pipeline.counters().clone(),
        }
    }
}
