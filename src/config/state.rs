//! `[state]`: where the daemon's checkpoints go (`crate::state`), beside
//! the data flow rather than in it, and how often.

use super::Span;
use super::values::span;
use serde::{Deserialize, Serialize};

/// Where checkpoints are kept (`state.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateBackend {
    /// One file per instance in `state.dir`; off while `state.dir` is empty.
    Dir,
    /// Records in the compacted topic `state.topic` (`state::kafka`): no
    /// shared volume needed.
    Kafka,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Where checkpoints go: "dir" (`dir`, off while it is empty) or
    /// "kafka" (`topic`).
    pub backend: StateBackend,
    /// Checkpoint directory (backend "dir"); empty: no checkpoints
    /// (at-least-once only: a restart or rebalance may count a list twice).
    /// Instances of one group share it so that partitions hand their open
    /// lists over.
    pub dir: String,
    /// The compacted topic of backend "kafka", created at start if missing
    /// (one partition); one per consumer group. Ignored by backend "dir".
    pub topic: String,
    /// Replication factor when rankpulse creates `topic`; -1: the broker's
    /// default. Ignored by backend "dir" and for an existing topic.
    pub replication: i32,
    /// This instance's name in `dir` (its checkpoint file and lock) or in
    /// `topic` (its records' keys); unique among the group's instances.
    /// Empty: the host name.
    pub instance: String,
    /// Checkpoint period. With checkpoints on, `/metrics` shows the state as
    /// of the last checkpoint, so counters never go back after a restart.
    pub interval: Span,
}

impl StateConfig {
    /// Whether the daemon checkpoints at all: backend "kafka", or backend
    /// "dir" with a directory.
    pub fn enabled(&self) -> bool {
        match self.backend {
            StateBackend::Dir => !self.dir.is_empty(),
            StateBackend::Kafka => true,
        }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            backend: StateBackend::Dir,
            dir: String::new(),
            topic: "rankpulse-state".into(),
            replication: -1,
            instance: String::new(),
            interval: span("1s"),
        }
    }
}
