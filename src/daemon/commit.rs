//! Offsets back to `kafka`: what the shards cover becomes the group's
//! committed offsets. With `state.dir`, the next offsets of the last
//! durable checkpoint; without, at-least-once: never past the first offset
//! of an open list (found by a walk spread over ticks), and only once the
//! dead-letter copies below the point are acknowledged. Only partitions
//! assigned to this instance are committed.

use super::Daemon;
use super::publisher::JobOutcome;
use crate::kafka::{Consumer, Hold};
use rankpulse_core::assemble::Source;
use rankpulse_core::assemble::store::fold_source;
use rdkafka::consumer::{CommitMode, Consumer as _};
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

/// Without checkpoints, how often offsets are committed: finding the commit
/// point reads every open list, and once per two seconds is as good for
/// at-least-once as every tick (a restart re-reads at most that much more).
pub(super) const COMMIT_INTERVAL: Duration = Duration::from_secs(2);

/// Ticks a walk of the open lists for the commit point takes (see
/// [`Daemon::walk_open_lists`]): 8 s at the 500 ms tick, so the commit
/// point trails the oldest open list by up to that much more. Walked at
/// once, 157k open lists held the consumer for 25 to 46 ms every
/// [`COMMIT_INTERVAL`] (S3 of `rankpulse-bench shapes`), most of a tick's
/// time and about an eighth of the daemon's CPU on that shape.
const COMMIT_WALK_TICKS: usize = 16;

/// Fewest lists a shard walks per tick: a small shard's walk ends in a
/// tick or two.
const MIN_COMMIT_WALK_SLICE: usize = 1024;

/// A (topic, partition) and the offset committed for it.
pub(super) type CommitPoint = ((String, i32), i64);

impl Daemon {
    /// Commits what became committable: with `state.dir` the offsets of
    /// the last durable checkpoint, without it those noted at an earlier
    /// tick once the dead-letter copies they cover settled, then notes the
    /// current point (every [`COMMIT_INTERVAL`]). Never waits.
    pub(super) fn commit(&mut self, consumer: &Consumer) {
        let written = matches!(self.unhandled_done.take(), Some(JobOutcome::Written { .. }));
        let tracker = self.dead_letters.as_ref().map(|dl| dl.tracker.clone());
        let settled = |barrier: &Option<u64>| match (barrier, &tracker) {
            (Some(b), Some(t)) => t.settled_before(*b),
            _ => true,
        };
        let ready = match &self.pending_commit {
            Some((_, _, barrier)) => {
                if self.store.is_some() {
                    written
                } else {
                    settled(barrier)
                }
            }
            None => false,
        };
        if ready && let Some((tpl, moved, _)) = self.pending_commit.take() {
            // Async: a failed commit is retried with a later point.
            if consumer.commit(&tpl, CommitMode::Async).is_ok() {
                self.mark_committed(&moved);
            }
        }
        if self.store.is_none()
            && self.pending_commit.is_none()
            && self.last_commit.is_none_or(|t| t.elapsed() >= COMMIT_INTERVAL)
        {
            self.last_commit = Some(tokio::time::Instant::now());
            let barrier = self.dead_letters.as_ref().map(|dl| dl.barrier());
            if let Some((tpl, moved)) = self.commit_points(false) {
                if settled(&barrier) {
                    if consumer.commit(&tpl, CommitMode::Async).is_ok() {
                        self.mark_committed(&moved);
                    }
                } else {
                    self.pending_commit = Some((tpl, moved, barrier));
                }
            }
        }
    }

    /// Offsets that became safe to commit (`all`: every point, not only
    /// those that moved). With checkpoints: the checkpointed next offsets of
    /// owned shards. Without: min(next offset, first offset of an open list).
    pub(super) fn commit_points(&self, all: bool) -> Option<(TopicPartitionList, Vec<CommitPoint>)> {
        // Before the first tick the assignment is not known yet: nothing is
        // committed then.
        let owned = |topic: &str, partition: i32| self.assigned.contains(&(topic.to_string(), partition));
        if self.store.is_some() {
            let mut tpl = TopicPartitionList::new();
            let mut moved = Vec::new();
            for (p, shard) in &self.shards {
                for (topic, next) in &shard.next_offsets {
                    let tp = (topic.clone(), *p);
                    if shard.owned
                        && owned(topic, *p)
                        && (all || self.committed.get(&tp).is_none_or(|c| next > c))
                        && tpl.add_partition_offset(topic, *p, Offset::Offset(*next)).is_ok()
                    {
                        moved.push((tp, *next));
                    }
                }
            }
            return (!moved.is_empty()).then_some((tpl, moved));
        }
        let mut held: BTreeMap<u32, i64> = BTreeMap::new();
        // Sources of a partition that its walk's floor does not name: first
        // read after that walk ended, so lists they opened since are in no
        // floor. Committing their next offset would pass those lists.
        let mut unknown: BTreeSet<u32> = BTreeSet::new();
        for (p, shard) in &self.shards {
            let walked;
            let floor: &[Source] = match &shard.commit_floor {
                Some(floor) if !all => {
                    for (id, s) in self.sources.states().iter().enumerate() {
                        let id = id as u32;
                        if s.partition == *p && !floor.iter().any(|f| f.id == id) {
                            unknown.insert(id);
                        }
                    }
                    floor
                }
                _ => {
                    walked = shard.pipeline.assembler().min_open_offsets();
                    &walked
                }
            };
            for &Source { id, offset } in floor {
                let e = held.entry(id).or_insert(offset);
                *e = (*e).min(offset);
            }
        }
        let hold = |id| match held.get(&id) {
            Some(&offset) => Hold::From(offset),
            None if unknown.contains(&id) => Hold::Unknown,
            None => Hold::Free,
        };
        let (tpl, moved) = self.sources.commit_list(&hold, &owned, all)?;
        let moved = moved
            .into_iter()
            .filter_map(|(id, point)| {
                self.sources.states().get(id as usize).map(|s| ((s.topic.clone(), s.partition), point))
            })
            .collect();
        Some((tpl, moved))
    }

    pub(super) fn mark_committed(&mut self, moved: &[CommitPoint]) {
        for (tp, point) in moved {
            self.committed.insert(tp.clone(), *point);
            if let Some(s) = self.sources.states_mut().iter_mut().find(|s| s.topic == tp.0 && s.partition == tp.1) {
                s.committed = Some(*point);
            }
        }
    }

    /// Walks a slice of each owned shard's open lists for the commit point
    /// (no `state.dir`): about a sixteenth per tick, so that a full walk
    /// takes [`COMMIT_WALK_TICKS`] ticks and no tick holds the stream for
    /// all of them. A walk's result is never above the open lists' lowest
    /// offsets at its end; the positions then are folded in, since lists
    /// opened later start at or after them.
    pub(super) fn walk_open_lists(&mut self) {
        if self.store.is_some() {
            return;
        }
        for (p, shard) in self.shards.iter_mut().filter(|(_, s)| s.owned) {
            let slice = (shard.pipeline.open_lists() / COMMIT_WALK_TICKS).max(MIN_COMMIT_WALK_SLICE);
            if let Some(mut floor) = shard.pipeline.scan_min_open_offsets(slice) {
                for (id, source) in self.sources.states().iter().enumerate() {
                    if source.partition == *p
                        && let Some(next) = source.next_offset
                    {
                        fold_source(&mut floor, Source { id: id as u32, offset: next });
                    }
                }
                shard.commit_floor = Some(floor);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{IMPRESSIONS, JUDGMENTS, NOW_MS, impression, judgment, message};
    use super::*;
    use crate::config::Config;
    use std::collections::BTreeSet;

    fn offsets(tpl: &TopicPartitionList) -> Vec<(String, i32, Offset)> {
        tpl.elements().iter().map(|e| (e.topic().to_string(), e.partition(), e.offset())).collect()
    }

    fn tp(p: i32) -> (String, i32) {
        (IMPRESSIONS.to_string(), p)
    }

    /// Two lists open at offsets 10 and 11 of partition 0, one at 5 of
    /// partition 1; only partition 0 is assigned.
    fn daemon() -> Daemon {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 10, &impression("s1")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 0, 11, &impression("s2")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 1, 5, &impression("s3")), None, NOW_MS);
        d
    }

    /// Without `state.dir`, at-least-once: the commit point is the first
    /// offset of a list still open, else the next offset; only assigned
    /// partitions are committed (the rest are another member's).
    #[test]
    fn without_state_dir_the_commit_point_is_the_oldest_open_list_or_the_next_offset() {
        let mut d = daemon();
        assert!(d.commit_points(false).is_none(), "before the first tick nothing is known to be assigned");
        d.assigned = BTreeSet::from([tp(0)]);
        let (tpl, moved) = d.commit_points(false).unwrap();
        assert_eq!(moved, [(tp(0), 10)]);
        assert_eq!(offsets(&tpl), [(IMPRESSIONS.to_string(), 0, Offset::Offset(10))]);
        d.finalize_all();
        let (_, moved) = d.commit_points(false).unwrap();
        assert_eq!(moved, [(tp(0), 12)]);
        d.mark_committed(&moved);
        assert_eq!(d.committed[&tp(0)], 12);
        assert_eq!(d.sources.states()[0].committed, Some(12));
        assert!(d.commit_points(false).is_none(), "nothing moved since the last commit");
        let (_, all) = d.commit_points(true).unwrap();
        assert_eq!(all, [(tp(0), 12)], "the final commit repeats every point");
    }

    /// Once a walk of the open lists has ended, commits use its floor:
    /// lists closed since hold the point back until the next walk ends,
    /// never the other way round.
    #[test]
    fn commits_use_the_floor_of_the_last_complete_walk() {
        let mut d = daemon();
        d.assigned = BTreeSet::from([tp(0)]);
        for _ in 0..4 {
            d.walk_open_lists();
        }
        assert!(d.shards[&0].commit_floor.is_some(), "a small shard's walk ends within a few ticks");
        d.finalize_all();
        assert_eq!(d.commit_points(false).unwrap().1, [(tp(0), 10)]);
        d.shards.get_mut(&0).unwrap().commit_floor = None;
        for _ in 0..4 {
            d.walk_open_lists();
        }
        assert_eq!(d.commit_points(false).unwrap().1, [(tp(0), 12)]);
    }

    /// A topic-partition first read after the last walk ended is in no
    /// floor: its open lists must hold its commit back until a walk covers
    /// it. (The daemon's first walk ends at once on empty shards; a backlog
    /// of more lists than a tick walks then committed every offset read,
    /// open lists and all, and a kill -9 lost them.)
    #[test]
    fn a_source_read_after_the_walk_is_not_committed_past_its_open_lists() {
        let mut d = daemon();
        d.assigned = BTreeSet::from([tp(0), (JUDGMENTS.to_string(), 0)]);
        for _ in 0..4 {
            d.walk_open_lists();
        }
        // A judgment of a list not seen yet opens it at offset 3.
        d.handle(&message(JUDGMENTS, 0, 3, &judgment("s9", "d1", 2)), None, NOW_MS);
        let (_, moved) = d.commit_points(false).unwrap();
        assert_eq!(moved, [(tp(0), 10)], "the judgments' partition waits for a walk");
        d.shards.get_mut(&0).unwrap().commit_floor = None;
        for _ in 0..4 {
            d.walk_open_lists();
        }
        let (_, moved) = d.commit_points(false).unwrap();
        assert!(moved.contains(&((JUDGMENTS.to_string(), 0), 3)), "{moved:?}");
        // Once it is final, the point moves past it.
        d.finalize_all();
        d.shards.get_mut(&0).unwrap().commit_floor = None;
        for _ in 0..4 {
            d.walk_open_lists();
        }
        let (_, moved) = d.commit_points(false).unwrap();
        assert!(moved.contains(&((JUDGMENTS.to_string(), 0), 4)), "{moved:?}");
    }
}
