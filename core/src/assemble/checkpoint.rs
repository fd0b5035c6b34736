//! Checkpoints of an assembler: its open lists, the final lists kept for
//! late events, its dimension values and lanes, taken and restored.
//!
//! In the assembly flow: beside it. The daemon takes an [`AssemblerSnapshot`]
//! at each checkpoint (cheap, on the consumer's task) and decodes it into an
//! [`AssemblerState`] elsewhere; a restart restores that state before input
//! flows again, with processing-time expiry paused until it does (`close`).

use super::Assembler;
use super::list::{ListKey, OpenList};
use super::store::{FrozenLists, ListStore};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// An assembler's state as a checkpoint stores it.
#[derive(Debug, Serialize, Deserialize)]
pub struct AssemblerState {
    pub dimension_values: Vec<Vec<String>>,
    pub open_lists: Vec<(ListKey, OpenList)>,
    pub closed_lists: Vec<(ListKey, OpenList)>,
    pub lanes: Vec<(String, i64)>,
    /// Final lists withdrawn from the checkpointed windows, not yet put back.
    #[serde(default)]
    pub withdrawn: Vec<ListKey>,
}

/// An assembler's state at one moment, not yet decoded into an
/// [`AssemblerState`] (see [`Assembler::snapshot`]).
#[derive(Debug)]
pub struct AssemblerSnapshot {
    dimension_values: Vec<Arc<[String]>>,
    open_lists: FrozenLists,
    closed_lists: FrozenLists,
    lanes: Vec<(String, i64)>,
    withdrawn: Vec<ListKey>,
}

impl AssemblerSnapshot {
    pub fn into_state(self) -> AssemblerState {
        AssemblerState {
            dimension_values: self.dimension_values.iter().map(|v| v.to_vec()).collect(),
            open_lists: self.open_lists.lists(),
            closed_lists: self.closed_lists.lists(),
            lanes: self.lanes,
            withdrawn: self.withdrawn,
        }
    }
}

impl Assembler {
    /// The state to checkpoint (open and recently closed lists).
    pub fn state(&self) -> AssemblerState {
        self.snapshot().into_state()
    }

    /// The state to checkpoint, taken cheaply (see [`ListStore::freeze`]):
    /// [`AssemblerSnapshot::into_state`] does the decoding, on whichever
    /// thread holds it.
    pub fn snapshot(&self) -> AssemblerSnapshot {
        AssemblerSnapshot {
            dimension_values: self.dimensions.values().to_vec(),
            open_lists: self.open_lists.freeze(),
            closed_lists: self.closed_lists.freeze(),
            lanes: self.lanes.clone(),
            withdrawn: {
                let mut keys: Vec<ListKey> = self.withdrawn.iter().copied().collect();
                keys.sort_unstable();
                keys
            },
        }
    }

    /// Replaces this assembler's lists with a checkpointed state. Source
    /// offsets are dropped: source numbering is per process, and with
    /// checkpoints the commit point does not depend on open lists.
    pub fn restore(&mut self, state: AssemblerState) {
        let values = state.dimension_values.into_iter().map(Arc::from).collect();
        self.dimensions.restore_values(values);
        let fill = |lists: Vec<(ListKey, OpenList)>| {
            let mut store = ListStore::default();
            for (key, mut list) in lists {
                list.offsets.clear();
                // A list too large to store was finalized before it was
                // checkpointed; none can be here.
                let _ = store.store(key, &mut list);
            }
            store
        };
        self.open_lists = fill(state.open_lists);
        self.closed_lists = fill(state.closed_lists);
        self.withdrawn = state.withdrawn.into_iter().filter(|k| self.closed_lists.contains(*k)).collect();
        self.lanes = state.lanes;
        self.update_watermark();
        self.clock_paused = true;
        self.last_scan_ms = None;
    }
}
