//! Assignment changes, between `kafka` (whose rebalance callback queues
//! them) and the shards: revoked partitions' shards are frozen (and, with
//! `state.dir`, rolled back to their last checkpoint), assigned ones are
//! created or taken over from the checkpoint that got furthest in them
//! (with the Kafka backend, after claiming them: the latest owner's, never
//! a zombie's; see `state::kafka`; a failed hand-over holds them, see
//! `takeover`), partitions a checkpoint found fenced are given up as
//! revoked ones,
//! and shards of partitions that went elsewhere are retired into the
//! [`RETIRED`] shard, their counters kept. Also the restore at start.

use super::consume::ready_now;
use super::shard::{RETIRED, Shard};
use super::{Daemon, DaemonError, takeover};
use crate::kafka::{Consumer, RebalanceEvent};
use crate::state::ShardCheckpoint;
use rdkafka::consumer::Consumer as _;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

/// Committed offsets of the group, asked for off the consumer task.
pub(super) type HandOverQuery = tokio::task::JoinHandle<Vec<((String, i32), i64)>>;

/// "topic[0,1] topic2[0,1]" for logs.
pub(super) fn describe(tps: &[(String, i32)]) -> String {
    let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for (t, p) in tps {
        by_topic.entry(t).or_default().push(*p);
    }
    by_topic.iter().map(|(t, ps)| format!("{t}{ps:?}")).collect::<Vec<_>>().join(" ")
}

impl Daemon {
    /// Acts on the rebalances librdkafka reported since the last call.
    pub(super) fn apply_rebalances(&mut self) -> Result<(), DaemonError> {
        // The flag is set after the event is queued: a rebalance queued
        // after this check is seen by the next one.
        // Checked before every message: a plain load first, the swap (a
        // locked instruction) only when a rebalance is pending.
        let Some(events) = self.signals.take_rebalances() else { return Ok(()) };
        // Offsets may go back (the group's committed ones): a floor found
        // before is no longer known to hold.
        for shard in self.shards.values_mut() {
            shard.commit_floor = None;
        }
        for event in events {
            match &event {
                // The assignment as the events leave it, before the next
                // tick reads it from the consumer: a partition fenced now is
                // held again only while still assigned.
                RebalanceEvent::Revoked(tps) => {
                    tracing::info!("partitions revoked: {}", describe(tps));
                    self.health.partitions_revoked += tps.len() as u64;
                    self.assigned.retain(|tp| !tps.contains(tp));
                    self.revoke(tps.iter().map(|(_, p)| *p).collect())?
                }
                RebalanceEvent::Assigned(tps) => {
                    tracing::info!("partitions assigned: {}", describe(tps));
                    self.health.partitions_assigned += tps.len() as u64;
                    self.assigned.extend(tps.iter().cloned());
                    self.assign(tps)
                }
            }
            self.lane_events.push(event);
        }
        Ok(())
    }

    /// `session.max_open_lists` is per instance: each shard gets an equal
    /// share (rounded up).
    pub(super) fn share_open_list_cap(&mut self) {
        // Frozen shards hold no more lists than when they were frozen (and
        // without checkpoints lose them at the next assignment): the cap is
        // shared by the shards that can grow.
        let owned = self.shards.values().filter(|s| s.owned).count();
        let share = self.config.session.max_open_lists.div_ceil(owned.max(1)).max(1);
        // compare.max_sessions is shared the same way.
        let sessions = self.config.compare.max_sessions.div_ceil(owned.max(1)).max(1);
        for shard in self.shards.values_mut() {
            shard.pipeline.set_max_open_lists(share);
            shard.pipeline.set_max_sessions(sessions);
        }
    }

    /// With checkpoints, revoked shards go back to their last checkpoint:
    /// what they did since was never published nor committed, and the new
    /// owner redoes it from there.
    pub(super) fn revoke(&mut self, partitions: BTreeSet<i32>) -> Result<(), DaemonError> {
        // Offsets noted for a later commit may be the revoked partitions':
        // committed after the new owner's, they would move it back.
        self.pending_commit = None;
        // The checkpoint read below must not be one being written: a
        // rebalance waits for the publisher's write in flight.
        if self.store.is_some()
            && let Some(done) = self.publisher.wait()
        {
            self.note_done(done);
        }
        // Partitions a checkpoint found fenced go back as revoked ones do:
        // the store's last checkpoint has them as they were before the
        // claim that fenced them.
        let revoked = partitions.clone();
        let fenced = std::mem::take(&mut self.fenced);
        let mut partitions = partitions;
        partitions.extend(fenced.iter().copied());
        // `None`: the checkpoint could not be read back (the state topic
        // unreachable): the shards wait for it (`restore_pending`).
        // Without checkpoints the shards stay as they are.
        let own: Option<BTreeMap<i32, ShardCheckpoint>> = match &self.store {
            Some(store) => match store.load_own() {
                Ok(c) => Some(c.map(|c| c.shards.into_iter().map(|s| (s.partition, s)).collect()).unwrap_or_default()),
                Err(e) if e.is_transient() => {
                    tracing::error!(
                        "cannot read this instance's checkpoint back for partitions {partitions:?} \
                         (their shards stay frozen, and no checkpoint is written, until a retry succeeds): {e}"
                    );
                    None
                }
                Err(e) => return Err(e.into()),
            },
            None => Some(BTreeMap::new()),
        };
        match own {
            _ if self.store.is_none() => {}
            Some(own) => {
                // Shards that waited for this read get it too.
                let waiting = std::mem::take(&mut self.restore_pending);
                self.restore_shards(own, partitions.iter().chain(&waiting).copied());
            }
            None => {
                self.restore_pending.extend(partitions.iter().copied());
                if self.restore_retry.is_none() {
                    let first = takeover::FIRST_RETRY;
                    self.restore_retry = Some((std::time::Instant::now() + first, first));
                }
            }
        }
        for p in partitions {
            // A held partition revoked: its pause is lifted, its shard
            // frozen as any revoked one.
            self.taking_over.release(p, None);
            if self.store.is_some() && !self.shards.contains_key(&p) {
                self.shards.insert(p, Shard::new(&self.config, &self.budget));
            }
            if let Some(shard) = self.shards.get_mut(&p) {
                shard.owned = false;
                shard.idle = false;
                shard.alignment.reset();
            }
        }
        // Fenced partitions still assigned here: the claim that fenced them
        // came late (an evicted member's), or this instance's own rebalance
        // is on its way. Claimed again after an interval, they go on from
        // the newest owner's checkpoint instead of stopping (`takeover`).
        let tps: Vec<(String, i32)> =
            self.assigned.iter().filter(|(_, p)| fenced.contains(p) && !revoked.contains(p)).cloned().collect();
        let still: BTreeSet<i32> = tps.iter().map(|(_, p)| *p).collect();
        if !still.is_empty() {
            tracing::warn!(
                "partitions {still:?} are still assigned here: claimed again in {}",
                self.config.state.interval.text
            );
            self.hold(&still, &tps, self.config.state.interval.duration);
        }
        self.share_open_list_cap();
        Ok(())
    }

    /// Puts the shards of `partitions` back to `own`, this instance's last
    /// checkpoint: what they did since was never published nor committed.
    fn restore_shards(&mut self, mut own: BTreeMap<i32, ShardCheckpoint>, partitions: impl Iterator<Item = i32>) {
        for p in partitions {
            let mut shard = Shard::new(&self.config, &self.budget);
            if let Some(c) = own.remove(&p) {
                shard.restore(c, true);
            }
            if let Some(old) = self.shards.get(&p) {
                shard.pipeline.keep_process_counters(&old.pipeline);
            }
            shard.owned = false;
            self.shards.insert(p, shard);
        }
        self.restore_pending.clear();
        self.restore_retry = None;
        // A read still in flight is of a checkpoint no newer than this one:
        // taken later, it could put shards waiting by then back to it.
        self.restore_read = None;
    }

    /// Puts the shards waiting for the last checkpoint back to it now, if
    /// any wait: before a hand-over, whose `take` goes on from a shard's
    /// own state (a waiting one is ahead of anything durable). False when
    /// they still wait (the checkpoint is still unreadable).
    pub(super) fn restore_now(&mut self) -> bool {
        if self.restore_pending.is_empty() {
            return true;
        }
        let Some(store) = self.store.clone() else { return true };
        match store.load_own() {
            Ok(c) => {
                let own = c.map(|c| c.shards.into_iter().map(|s| (s.partition, s)).collect()).unwrap_or_default();
                let waiting = self.restore_pending.clone();
                self.restore_shards(own, waiting.into_iter());
                true
            }
            Err(e) => {
                tracing::error!("cannot read this instance's checkpoint back: {e}");
                if !e.is_transient() {
                    // The retry's read meets it again and stops the daemon,
                    // as the revoke's own read would have.
                    self.restore_retry = Some((std::time::Instant::now(), takeover::FIRST_RETRY));
                }
                false
            }
        }
    }

    /// Reads the checkpoint back for shards a revoke could not restore
    /// (`restore_pending`), when its retry is due: doubling delays from
    /// 1 s, at most `state.interval`. The read runs on a thread of its own
    /// (it waits up to 30 s on an unreachable state topic) and its result
    /// is taken at a later tick: the loop and the ticks go on meanwhile.
    pub(super) fn retry_restore(&mut self) -> Result<(), DaemonError> {
        if let Some(read) = self.restore_read.take_if(|r| r.is_finished()) {
            let delay = self.restore_retry.map_or(takeover::FIRST_RETRY, |(_, d)| d);
            match read.join() {
                // Nothing waits any more: a revoke or an assignment read
                // the checkpoint meanwhile.
                _ if self.restore_pending.is_empty() => {}
                Ok(Ok(c)) => {
                    let own = c.map(|c| c.shards.into_iter().map(|s| (s.partition, s)).collect()).unwrap_or_default();
                    let waiting = self.restore_pending.clone();
                    tracing::info!("partitions {waiting:?}: back to this instance's last checkpoint");
                    self.restore_shards(own, waiting.into_iter());
                    self.share_open_list_cap();
                }
                Ok(Err(e)) if !e.is_transient() => return Err(e.into()),
                outcome => {
                    let next = (delay * 2).min(self.config.state.interval.duration.max(takeover::FIRST_RETRY));
                    let why = match outcome {
                        Ok(Err(e)) => e.to_string(),
                        _ => "the read panicked".to_string(),
                    };
                    tracing::warn!("checkpoint still unreadable (next try in {next:?}): {why}");
                    self.restore_retry = Some((std::time::Instant::now() + next, next));
                }
            }
        }
        let Some((at, _)) = self.restore_retry else { return Ok(()) };
        if self.restore_pending.is_empty() || self.restore_read.is_some() || std::time::Instant::now() < at {
            return Ok(());
        }
        let Some(store) = self.store.clone() else { return Ok(()) };
        match std::thread::Builder::new().name("rankpulse-restore".into()).spawn(move || store.load_own()) {
            Ok(read) => self.restore_read = Some(read),
            Err(e) => tracing::warn!("cannot start the checkpoint read (tried again later): {e}"),
        }
        Ok(())
    }

    /// Assigned shards take their open lists from the checkpoint, among all
    /// instances' (in `state.dir` or `state.topic`), that got furthest in
    /// the partition; with `state.topic`, after claiming them there, which
    /// fences their former owners (see `state::kafka`).
    pub(super) fn assign(&mut self, tps: &[(String, i32)]) {
        let partitions: BTreeSet<i32> = tps.iter().map(|(_, p)| *p).collect();
        // A checkpoint snapshotted before this assignment must be written
        // before the claims below: written after them, it would carry their
        // epoch on shards from before (a stale copy of a partition this
        // instance held earlier would then outrank its later owner's).
        if self.store.is_some()
            && let Some(done) = self.publisher.wait()
        {
            self.note_done(done);
            // Fenced partitions assigned again are claimed anew below; the
            // others are given up now, as `settle` would.
            self.fenced.retain(|p| !partitions.contains(p));
            if !self.fenced.is_empty()
                && let Err(e) = self.revoke(BTreeSet::new())
            {
                tracing::error!("cannot give fenced partitions up: {e}");
            }
        }
        let mut candidates: BTreeMap<i32, ShardCheckpoint> = BTreeMap::new();
        if !self.restore_now() {
            tracing::error!("partitions {partitions:?} are held until the checkpoint is read back");
            self.hold(&partitions, tps, takeover::FIRST_RETRY);
            return;
        }
        if let Some(store) = &self.store {
            match store.hand_over(&partitions) {
                Ok(found) => candidates = found,
                // Started from the committed offsets, they would count
                // again what their former owner counted after them: they
                // wait until a hand-over succeeds (`takeover`).
                Err(e) => {
                    tracing::error!(
                        "cannot take partitions over from the checkpoints (they are held until a retry succeeds): {e}"
                    );
                    self.hold(&partitions, tps, takeover::FIRST_RETRY);
                    return;
                }
            }
        }
        if self.store.is_none() {
            // Without checkpoints, a partition revoked and not given back
            // went to another instance, which reads it again from the
            // committed offset (at most the oldest open list's first event):
            // its open lists are that instance's to finish, not this one's.
            // The counters of the lists finished here stay.
            for (p, shard) in self.shards.iter_mut().filter(|(p, s)| !s.owned && !partitions.contains(p)) {
                if shard.pipeline.open_lists() > 0 || !shard.next_offsets.is_empty() {
                    tracing::info!(
                        "partition {p} is no longer assigned here (another instance has it, or its topics are gone): \
                         its {} open list(s) are left to its next owner",
                        shard.pipeline.open_lists()
                    );
                }
                shard.pipeline.drop_lists();
                shard.next_offsets.clear();
            }
            // Where this instance read and committed them is no longer
            // known to hold: their next owner commits from its own reading.
            // Kept, a partition given back later would commit its old next
            // offset before reading again, past the lists its owner left
            // open meanwhile.
            for s in self.sources.states_mut().iter_mut() {
                if s.partition != RETIRED
                    && !partitions.contains(&s.partition)
                    && self.shards.get(&s.partition).is_none_or(|shard| !shard.owned)
                {
                    s.next_offset = None;
                    s.committed = None;
                }
            }
            let gone: Vec<i32> = self
                .shards
                .iter()
                .filter(|(p, s)| **p != RETIRED && !s.owned && !partitions.contains(p))
                .map(|(p, _)| *p)
                .collect();
            for p in gone {
                self.retire(p);
            }
        }
        for p in partitions {
            self.take(p, candidates.remove(&p), tps);
        }
        self.share_open_list_cap();
    }

    /// Starts owning partition `p` (of the topic-partitions `tps`), from
    /// `candidate`, its hand-over's checkpoint, when that got further than
    /// the shard's own.
    pub(super) fn take(&mut self, p: i32, candidate: Option<ShardCheckpoint>, tps: &[(String, i32)]) {
        let (config, budget) = (&self.config, &self.budget);
        let shard = self.shards.entry(p).or_insert_with(|| Shard::new(config, budget));
        if let Some(c) = candidate
            && c.progress() >= shard.next_offsets.values().sum::<i64>()
        {
            shard.restore(c, false);
        }
        // Every topic of the partition is a lane: event time closes
        // lists only once each has delivered.
        let topics = tps.iter().filter(|(_, tp)| *tp == p).map(|(t, _)| t.as_str());
        shard.pipeline.expect_lanes(topics);
        shard.owned = true;
        // Its end was reached before, perhaps; since this assignment
        // the messages from the committed offset on are a backlog
        // until the partition's end is reported again. Idle now, the
        // next tick would close its lists on processing time before
        // what the broker kept during an outage arrives.
        shard.idle = false;
        shard.alignment.reset();
    }

    /// Drops the shard of `p`, keeping what it accumulated in the
    /// [`RETIRED`] shard: a partition that went to another instance leaves
    /// no state behind here, nor a share of `session.max_open_lists`.
    pub(super) fn retire(&mut self, p: i32) {
        let Some(shard) = self.shards.remove(&p) else { return };
        let (config, budget) = (&self.config, &self.budget);
        let retired = self.shards.entry(RETIRED).or_insert_with(|| Shard::new(config, budget));
        retired.owned = false;
        retired.pipeline.merge_sums(&shard.pipeline);
    }

    /// The frozen shards that the group's `committed` offsets show to be
    /// durably handed over (see [`Self::retire_handed_over`]).
    fn handed_over(&self, committed: &BTreeMap<(String, i32), i64>) -> Vec<i32> {
        self.shards
            .iter()
            // A shard waiting for its checkpoint holds what nothing
            // durable covers: not merged into RETIRED, which every
            // checkpoint writes.
            .filter(|(p, s)| {
                **p != RETIRED && !s.owned && !self.taking_over.contains(**p) && !self.restore_pending.contains(p)
            })
            .filter(|(p, s)| {
                let c = |t: &String| committed.get(&(t.clone(), **p)).copied().unwrap_or(-1);
                // Past this shard on one topic at least: committed by
                // the new owner, not what this instance committed
                // before the partition was revoked.
                s.next_offsets.iter().all(|(t, next)| c(t) >= *next)
                    && s.next_offsets.iter().any(|(t, next)| c(t) > *next)
            })
            .map(|(p, _)| *p)
            .collect()
    }

    /// With `state.dir`, a revoked partition's shard keeps its last
    /// checkpoint's open lists: the partition may come back, or its new
    /// owner may read them from a shared `state.dir`. Once the group's
    /// committed offsets reach the shard's on every topic and pass it on
    /// one, the new owner has made its own state durable past it (it
    /// commits only what a checkpoint of its covers), and the shard is
    /// dropped.
    /// The committed offsets are asked of the broker off the consumer task
    /// (every `state.interval` while such shards exist); their answer is
    /// acted on at a later tick.
    pub(super) fn retire_handed_over(&mut self, consumer: &Arc<Consumer>) {
        if self.store.is_none() {
            return;
        }
        if let Some(query) = self.hand_over.take_if(|q| q.is_finished()) {
            let committed: BTreeMap<(String, i32), i64> =
                ready_now(query).and_then(Result::ok).unwrap_or_default().into_iter().collect();
            for p in self.handed_over(&committed) {
                tracing::info!("partition {p} is durably handed over: its shard is dropped");
                self.retire(p);
            }
            self.share_open_list_cap();
        }
        if self.hand_over.is_some() || !self.checkpoint_due() {
            return;
        }
        let mut tpl = TopicPartitionList::new();
        for (p, shard) in self.shards.iter().filter(|(p, s)| **p != RETIRED && !s.owned) {
            for topic in shard.next_offsets.keys() {
                tpl.add_partition(topic, *p);
            }
        }
        if tpl.count() == 0 {
            return;
        }
        let consumer = consumer.clone();
        self.hand_over = Some(tokio::task::spawn_blocking(move || {
            let Ok(committed) = consumer.committed_offsets(tpl, Duration::from_secs(10)) else { return Vec::new() };
            committed
                .elements()
                .iter()
                .filter_map(|e| match e.offset() {
                    Offset::Offset(o) => Some(((e.topic().to_string(), e.partition()), o)),
                    _ => None,
                })
                .collect()
        }));
    }

    /// Loads this instance's last checkpoint: counters continue from it;
    /// open lists wait until their partition is assigned again.
    pub(super) fn restore_own(&mut self) -> Result<(), DaemonError> {
        let Some(store) = &self.store else { return Ok(()) };
        let Some(checkpoint) = store.load_own()? else { return Ok(()) };
        if let Ok(mut b) = self.budget.lock() {
            // The values admitted are the checkpoint's; every bound is this
            // configuration's, whatever the checkpoint's were: the budget
            // is built as at start, then given what was admitted.
            *b = self.config.pipeline_settings().dimension_budget().with_admitted_from(checkpoint.budget);
        }
        for c in checkpoint.shards {
            let mut shard = Shard::new(&self.config, &self.budget);
            let p = c.partition;
            shard.restore(c, true);
            shard.owned = false;
            self.shards.insert(p, shard);
        }
        tracing::info!("restored {} partition shard(s) from {}", self.shards.len(), store.location());
        self.share_open_list_cap();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{IMPRESSIONS, JUDGMENTS, NOW_MS, impression, judgment, message};
    use super::*;
    use crate::config::Config;

    fn caps(d: &Daemon) -> Vec<usize> {
        d.shards.values().map(|s| s.pipeline.assembler().limits.max_open_lists).collect()
    }

    fn events(shard: &Shard) -> u64 {
        shard.pipeline.counters().events.values().sum()
    }

    /// `session.max_open_lists` is per instance: each owned shard gets an
    /// equal share, rounded up; frozen shards do not take a share.
    #[test]
    fn max_open_lists_is_shared_equally_among_owned_shards_rounded_up() {
        let mut config = Config::default();
        config.session.max_open_lists = 10;
        let mut d = Daemon::for_tests(config);
        for p in 0..3 {
            d.handle(&message(IMPRESSIONS, p, 0, &impression("s1")), None, NOW_MS);
        }
        assert_eq!(caps(&d), [4, 4, 4]);
        d.revoke(BTreeSet::from([2])).unwrap();
        assert_eq!(caps(&d), [5, 5, 5]);
        d.assign(&[(IMPRESSIONS.to_string(), 2)]);
        assert_eq!(caps(&d), [4, 4, 4]);
    }

    /// A dropped shard's counters were published and must never go back:
    /// the RETIRED shard keeps them, owning nothing and holding no lists.
    #[test]
    fn retire_keeps_what_a_dropped_shard_accumulated() {
        let mut d = Daemon::for_tests(Config::default());
        for p in [1, 2] {
            d.handle(&message(IMPRESSIONS, p, 0, &impression("s1")), None, NOW_MS);
            d.handle(&message(JUDGMENTS, p, 0, &judgment("s1", "d1", 2)), None, NOW_MS);
        }
        d.finalize_all();
        let finalized = d.lists_finalized();
        assert!(finalized > 0);
        d.retire(1);
        assert!(!d.shards.contains_key(&1));
        let retired = &d.shards[&RETIRED];
        assert!(!retired.owned);
        assert!(retired.next_offsets.is_empty());
        assert_eq!(retired.pipeline.open_lists(), 0);
        assert_eq!(events(retired), 2);
        assert_eq!(d.lists_finalized(), finalized);
        d.retire(2);
        assert_eq!(events(&d.shards[&RETIRED]), 4, "a second retirement adds to the first");
        assert_eq!(d.lists_finalized(), finalized);
        assert_eq!(d.shards.keys().copied().collect::<Vec<_>>(), [RETIRED]);
    }

    /// With checkpoints, a frozen shard is dropped only once the group's
    /// committed offsets reach it on every topic and pass it on one (its
    /// new owner's checkpoint covers more); offsets equal to its own (what
    /// this instance committed), behind on a topic, or an owned shard, keep
    /// it.
    #[test]
    fn a_frozen_shard_is_handed_over_once_the_group_commits_past_it() {
        let mut d = Daemon::for_tests(Config::default());
        for p in 0..5 {
            d.handle(&message(IMPRESSIONS, p, 4, &impression("s1")), None, NOW_MS);
            d.handle(&message(JUDGMENTS, p, 6, &judgment("s1", "d1", 2)), None, NOW_MS);
        }
        d.finalize_all();
        for p in 0..4 {
            d.shards.get_mut(&p).unwrap().owned = false;
        }
        let (i, j) = (IMPRESSIONS.to_string(), JUDGMENTS.to_string());
        let committed = BTreeMap::from([
            // Its own offsets: this instance committed them before the revoke.
            ((i.clone(), 0), 5),
            ((j.clone(), 0), 7),
            // Past on one topic, reached on the other: handed over.
            ((i.clone(), 1), 9),
            ((j.clone(), 1), 7),
            // Past on one, behind on the other.
            ((i.clone(), 2), 9),
            ((j.clone(), 2), 6),
            // Past on the one topic the group committed; none on the other.
            ((i.clone(), 3), 9),
            // Owned (partition 4): never.
            ((i.clone(), 4), 9),
            ((j.clone(), 4), 9),
        ]);
        assert_eq!(d.handed_over(&committed), [1]);
        d.restore_pending.insert(1);
        assert_eq!(d.handed_over(&committed), Vec::<i32>::new(), "a shard waiting for its checkpoint stays");
        d.restore_pending.clear();
        // Held for a hand-over of its own (`takeover`): it stays too.
        d.taking_over.hold(1, vec![i.clone(), j.clone()], Duration::from_secs(1), std::time::Instant::now());
        assert_eq!(d.handed_over(&committed), Vec::<i32>::new(), "a partition held for its hand-over stays");
    }

    /// Without checkpoints, a partition revoked and not given back went to
    /// another instance, which reads it again from the committed offset:
    /// its open lists are that instance's to finish, its counters stay.
    #[test]
    fn assign_without_state_dir_drops_the_lists_of_partitions_gone_elsewhere() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.handle(&message(IMPRESSIONS, 1, 0, &impression("s2")), None, NOW_MS);
        d.revoke(BTreeSet::from([0, 1])).unwrap();
        d.assign(&[(IMPRESSIONS.to_string(), 1), (JUDGMENTS.to_string(), 1)]);
        assert!(!d.shards.contains_key(&0));
        assert_eq!(d.shards[&RETIRED].pipeline.open_lists(), 0);
        assert_eq!(events(&d.shards[&RETIRED]), 1);
        let kept = &d.shards[&1];
        assert!(kept.owned);
        assert!(!kept.idle, "a new assignment starts as a backlog");
        assert_eq!(kept.pipeline.open_lists(), 1, "a partition given back continues its lists");
        assert_eq!(kept.next_offsets[IMPRESSIONS], 1);
        assert_eq!(d.open_lists(), 1);
    }

    /// Without checkpoints, a partition that went elsewhere and comes back
    /// commits nothing of its former reading: its next owner may have
    /// committed less (lists it left open), and the old next offset would
    /// pass them before anything was read again.
    #[test]
    fn a_partition_given_back_commits_nothing_of_its_former_reading() {
        let mut d = Daemon::for_tests(Config::default());
        d.assigned = BTreeSet::from([(IMPRESSIONS.to_string(), 0)]);
        for offset in 0..10 {
            d.handle(&message(IMPRESSIONS, 0, offset, &impression(&format!("s{offset}"))), None, NOW_MS);
        }
        // Every list is open: committed at the first, read up to 10.
        let (_, moved) = d.commit_points(false).unwrap();
        assert_eq!(moved, [((IMPRESSIONS.to_string(), 0), 0)]);
        d.mark_committed(&moved);
        // To another member, then back.
        d.revoke(BTreeSet::from([0])).unwrap();
        d.assign(&[(JUDGMENTS.to_string(), 1)]);
        d.revoke(BTreeSet::from([1])).unwrap();
        d.assign(&[(IMPRESSIONS.to_string(), 0)]);
        d.assigned = BTreeSet::from([(IMPRESSIONS.to_string(), 0)]);
        assert!(d.commit_points(false).is_none(), "nothing read since it came back");
        // Read again from its owner's commit, 4: a list open at 4 holds it.
        d.handle(&message(IMPRESSIONS, 0, 4, &impression("s4")), None, NOW_MS);
        let (_, moved) = d.commit_points(false).unwrap();
        assert_eq!(moved, [((IMPRESSIONS.to_string(), 0), 4)]);
    }

    /// Offsets noted for a later commit may be a revoked partition's:
    /// committed after the new owner's, they would move it back.
    #[test]
    fn revoke_drops_the_pending_commit() {
        let mut d = Daemon::for_tests(Config::default());
        d.pending_commit = Some((TopicPartitionList::new(), vec![((IMPRESSIONS.to_string(), 0), 1)], None));
        d.revoke(BTreeSet::from([0])).unwrap();
        assert!(d.pending_commit.is_none());
    }

    /// The callback only queues (the queue and its flag together); the
    /// loop applies the events, forgets commit floors (offsets may go back)
    /// and passes the events on to the partition queues, each once.
    #[test]
    fn queued_rebalances_are_applied_once_and_passed_on_to_the_lanes() {
        let mut d = Daemon::for_tests(Config::default());
        d.handle(&message(IMPRESSIONS, 0, 0, &impression("s1")), None, NOW_MS);
        d.shards.get_mut(&0).unwrap().commit_floor = Some(Vec::new());
        let revoked = RebalanceEvent::Revoked(vec![(IMPRESSIONS.to_string(), 0)]);
        assert!(d.shards[&0].owned);
        assert!(d.signals.queue_rebalance(revoked.clone()));
        assert!(d.signals.rebalance_pending());
        d.apply_rebalances().unwrap();
        assert!(!d.shards[&0].owned);
        assert!(d.shards[&0].commit_floor.is_none());
        assert_eq!(d.lane_events, [revoked]);
        assert!(!d.signals.rebalance_pending());
        assert_eq!(d.signals.take_rebalances(), None);
        assert_eq!((d.health.partitions_assigned, d.health.partitions_revoked), (0, 1));
        let assigned = RebalanceEvent::Assigned(vec![(IMPRESSIONS.to_string(), 0), (JUDGMENTS.to_string(), 0)]);
        assert!(d.signals.queue_rebalance(assigned));
        d.apply_rebalances().unwrap();
        assert_eq!((d.health.partitions_assigned, d.health.partitions_revoked), (2, 1));
        // Applied once: nothing is left to apply again.
        d.apply_rebalances().unwrap();
        assert_eq!((d.health.partitions_assigned, d.health.partitions_revoked), (2, 1));
    }

    /// A daemon checkpointing into `topic` on the mock cluster.
    fn kafka_daemon(
        cluster: &rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
        topic: &str,
        instance: &str,
    ) -> Daemon {
        let mut c = Config::default();
        c.kafka.brokers = cluster.bootstrap_servers();
        c.state.backend = crate::config::StateBackend::Kafka;
        c.state.topic = topic.into();
        c.state.instance = instance.into();
        Daemon::for_tests_with_kafka_store(c)
    }

    /// librdkafka's mock cluster with the state topic `topic`.
    fn state_cluster(topic: &str) -> rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext> {
        let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
        cluster.create_topic(topic, 1, 1).unwrap();
        cluster
    }

    /// A holds partition 0 up to 5, checkpoints and gives it up; B takes
    /// it over, gets to 10 and checkpoints.
    fn a_to_5_then_b_to_10(a: &mut Daemon, b: &mut Daemon) {
        use super::super::publisher::JobOutcome;
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        a.assign(&p0);
        feed(a, 0..5);
        assert!(matches!(checkpoint(a), JobOutcome::Written { .. }));
        a.revoke(BTreeSet::from([0])).unwrap();
        b.assign(&p0);
        feed(b, 0..10);
        assert!(matches!(checkpoint(b), JobOutcome::Written { .. }));
    }

    /// One impression per offset of partition 0, each its own list.
    fn feed(d: &mut Daemon, offsets: std::ops::Range<i64>) {
        for i in offsets {
            d.handle(&message(IMPRESSIONS, 0, i, &impression(&format!("s{i}"))), None, NOW_MS);
        }
    }

    /// A checkpoint now, waited for and settled.
    fn checkpoint(d: &mut Daemon) -> super::super::publisher::JobOutcome {
        d.request_checkpoint();
        let done = d.publisher.wait().expect("a job was sent");
        d.settle(done.clone()).unwrap();
        done
    }

    /// Issue #27 at the daemon: A checkpoints partition 0 after 5 events
    /// (X); B takes the partition over from X while A, cut off from the
    /// group, goes on with 5 more (a zombie). A's checkpoint is fenced: A
    /// gives the partition up at X, as its late revoke does again, and
    /// nothing of the 5 is published or committed; B counts them from X.
    /// A's and B's counters add up to the 10 events, each counted once.
    #[test]
    fn a_fenced_zombie_gives_the_partition_up_where_its_new_owner_took_it() {
        use super::super::publisher::JobOutcome;
        let cluster = state_cluster("rankpulse-state-fencing");
        let daemon = |instance: &str| kafka_daemon(&cluster, "rankpulse-state-fencing", instance);
        let total = |d: &Daemon| d.shards.values().map(events).sum::<u64>();
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        let (mut a, mut b) = (daemon("a"), daemon("b"));
        a.assign(&p0);
        feed(&mut a, 0..5);
        assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
        b.assign(&p0);
        assert_eq!(b.shards[&0].next_offsets[IMPRESSIONS], 5, "B takes over at X");
        feed(&mut a, 5..10);
        assert_eq!(total(&a), 10);
        assert_eq!(checkpoint(&mut a), JobOutcome::Fenced { partitions: vec![0] });
        assert_eq!(a.health.state_fenced, 1);
        assert!(!a.shards[&0].owned, "given up");
        assert_eq!(total(&a), 5, "back at X");
        a.revoke(BTreeSet::from([0])).unwrap();
        assert_eq!(total(&a), 5, "the late revoke restores X too");
        feed(&mut b, 0..10);
        assert_eq!(b.health.skipped_covered, 5);
        assert_eq!(total(&a) + total(&b), 10, "each event counted once");
        assert!(matches!(checkpoint(&mut b), JobOutcome::Written { .. }));
        assert_eq!(b.shards[&0].pipeline.open_lists(), 10);
    }

    /// A checkpoint snapshotted before an assignment is written before
    /// its claims: A holds partition 0 until 5, B takes it over and gets to
    /// 10, A's tick snapshots its stale copy (5) just before the partition
    /// comes back to A. Stamped with A's new claim, that copy would outrank
    /// B's 10 at the next hand-over; a third owner must take 10.
    #[test]
    fn a_checkpoint_snapshotted_before_an_assignment_keeps_its_epoch() {
        let cluster = state_cluster("rankpulse-state-epochs");
        let daemon = |instance: &str| kafka_daemon(&cluster, "rankpulse-state-epochs", instance);
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        let (mut a, mut b, mut c) = (daemon("a"), daemon("b"), daemon("c"));
        a_to_5_then_b_to_10(&mut a, &mut b);
        // A's stale copy is snapshotted, and the partition comes back.
        a.request_checkpoint();
        a.assign(&p0);
        assert_eq!(a.shards[&0].next_offsets[IMPRESSIONS], 10, "A takes B's 10");
        c.assign(&p0);
        assert_eq!(c.shards[&0].next_offsets[IMPRESSIONS], 10, "not A's stale 5");
    }

    fn kafka_store(d: &Daemon) -> &crate::state::KafkaStore {
        match d.store.as_deref() {
            Some(crate::state::StateStore::Kafka(s)) => s,
            _ => panic!("a Kafka store"),
        }
    }

    /// A hand-over that fails (the state topic unreachable) holds the
    /// partition: paused, its shard frozen, the messages that slipped
    /// through skipped; the retry takes it over from A's checkpoint (5)
    /// and seeks there. Started from the committed offsets instead, B
    /// would count 0..5 again (15 events in all).
    #[test]
    fn a_failed_hand_over_holds_the_partition_until_a_retry_takes_it_over() {
        use super::super::publisher::JobOutcome;
        let cluster = state_cluster("rankpulse-state-held");
        let daemon = |instance: &str| kafka_daemon(&cluster, "rankpulse-state-held", instance);
        let total = |d: &Daemon| d.shards.values().map(events).sum::<u64>();
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        let (mut a, mut b) = (daemon("a"), daemon("b"));
        a.assign(&p0);
        feed(&mut a, 0..5);
        assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
        a.revoke(BTreeSet::from([0])).unwrap();
        kafka_store(&b).fail_hand_overs(2);
        b.assign(&p0);
        assert!(!b.shards[&0].owned, "held");
        let ops = b.taking_over.consumer_ops();
        assert_eq!(ops.pause, p0);
        feed(&mut b, 0..3);
        assert_eq!(total(&b), 0, "nothing of a held partition is counted");
        b.taking_over.retry_now();
        b.retry_hand_over().unwrap();
        assert!(!b.shards[&0].owned, "the second attempt fails too");
        b.taking_over.retry_now();
        b.retry_hand_over().unwrap();
        assert!(b.shards[&0].owned, "taken over");
        assert_eq!(b.shards[&0].next_offsets[IMPRESSIONS], 5, "from A's checkpoint");
        let ops = b.taking_over.consumer_ops();
        assert_eq!((ops.resume, ops.seek), (p0.to_vec(), vec![(IMPRESSIONS.to_string(), 0, 5)]));
        feed(&mut b, 5..10);
        assert_eq!(total(&a) + total(&b), 10, "each event counted once");
        assert!(matches!(checkpoint(&mut b), JobOutcome::Written { .. }));
        assert_eq!(b.shards[&0].pipeline.open_lists(), 10);
    }

    /// A revoke whose read of the checkpoint back fails (the state topic
    /// unreachable: a broker outage) does not stop the daemon: the shard
    /// stays frozen as it was, ahead of the checkpoint (8 events, 5
    /// durable), no checkpoint is written meanwhile (it would make the 3
    /// look durable), and a retry puts the shard back to the checkpoint's 5.
    /// Assigned again while waiting, the shard goes back to the checkpoint
    /// before the hand-over, not on from its frozen state.
    #[test]
    fn a_revoke_that_cannot_read_the_checkpoint_back_waits_for_it() {
        use super::super::publisher::JobOutcome;
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        for assigned_again in [false, true] {
            let cluster = state_cluster("rankpulse-state-unreadable");
            let mut a = kafka_daemon(&cluster, "rankpulse-state-unreadable", "a");
            a.assign(&p0);
            feed(&mut a, 0..5);
            assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
            feed(&mut a, 5..8);
            // The revoke's read fails, and the first retry's.
            kafka_store(&a).fail_scans(if assigned_again { 1 } else { 2 });
            a.revoke(BTreeSet::from([0])).expect("an unreachable state topic is not fatal");
            assert!(!a.shards[&0].owned);
            assert_eq!(events(&a.shards[&0]), 8, "frozen as it was");
            assert!(matches!(checkpoint(&mut a), JobOutcome::NotWritten), "nothing written while it waits");
            if assigned_again {
                // Back to the checkpoint first, then taken from the
                // hand-over: 5 durable events, going on from offset 5.
                a.assign(&p0);
                assert!(a.shards[&0].owned);
                assert_eq!(a.shards[&0].next_offsets[IMPRESSIONS], 5);
                assert_eq!(events(&a.shards[&0]), 5);
            } else {
                // Each retry reads on a thread; its result is taken at a
                // later tick.
                let retry = |a: &mut Daemon| {
                    a.restore_retry = Some((std::time::Instant::now(), takeover::FIRST_RETRY));
                    a.retry_restore().unwrap();
                    let read = a.restore_read.as_ref().expect("a read started");
                    while !read.is_finished() {
                        std::thread::yield_now();
                    }
                    a.retry_restore().unwrap();
                };
                retry(&mut a);
                assert_eq!(events(&a.shards[&0]), 8, "the second read fails too");
                retry(&mut a);
                assert_eq!(events(&a.shards[&0]), 5, "back to the checkpoint");
                assert!(!a.shards[&0].owned);
            }
            assert!(a.restore_pending.is_empty());
            assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
        }
    }

    /// A hand-over whose claim is written but whose read fails leaves the
    /// partition held with A's stale copy (5), under A's earlier epoch:
    /// written under the new claim's, that copy would outrank B's 10 at
    /// the next owner's hand-over.
    #[test]
    fn a_read_that_fails_after_the_claim_leaves_the_stale_shard_its_old_epoch() {
        use super::super::publisher::JobOutcome;
        let cluster = state_cluster("rankpulse-state-failed-read");
        let daemon = |instance: &str| kafka_daemon(&cluster, "rankpulse-state-failed-read", instance);
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        let (mut a, mut b, mut c) = (daemon("a"), daemon("b"), daemon("c"));
        a_to_5_then_b_to_10(&mut a, &mut b);
        b.revoke(BTreeSet::from([0])).unwrap();
        kafka_store(&a).fail_scans(1);
        a.assign(&p0);
        assert!(a.taking_over.contains(0), "held");
        assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
        c.assign(&p0);
        assert_eq!(c.shards[&0].next_offsets[IMPRESSIONS], 10, "B's, not A's stale 5");
    }

    /// A claim that arrives late (B's, evicted from the group and gone)
    /// fences A, which the group still assigns partition 0. A gives it up
    /// at its checkpoint (5), claims it again after `state.interval` and
    /// goes on from there, sought back to 5 on impressions and to the first
    /// judgment it read (its checkpoint has no position on judgments); left
    /// frozen, it would count nothing until the next rebalance.
    #[test]
    fn a_partition_fenced_while_still_assigned_is_claimed_again() {
        use super::super::publisher::JobOutcome;
        let cluster = state_cluster("rankpulse-state-reclaim");
        let daemon = |instance: &str| kafka_daemon(&cluster, "rankpulse-state-reclaim", instance);
        let total = |d: &Daemon| d.shards.values().map(events).sum::<u64>();
        let p0 = [(IMPRESSIONS.to_string(), 0)];
        let (mut a, mut b) = (daemon("a"), daemon("b"));
        a.assign(&p0);
        a.assigned = [(IMPRESSIONS.to_string(), 0), (JUDGMENTS.to_string(), 0)].into_iter().collect();
        feed(&mut a, 0..5);
        assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
        b.assign(&p0);
        b.revoke(BTreeSet::from([0])).unwrap();
        feed(&mut a, 5..8);
        // Judgments, a topic A's checkpoint has no position on yet.
        let judge = |d: &mut Daemon| {
            for i in 0..2 {
                d.handle(&message(JUDGMENTS, 0, i, &judgment(&format!("s{i}"), "d1", 2)), None, NOW_MS);
            }
        };
        judge(&mut a);
        assert_eq!(checkpoint(&mut a), JobOutcome::Fenced { partitions: vec![0] });
        assert!(!a.shards[&0].owned && a.taking_over.contains(0), "held, not frozen for good");
        assert_eq!(total(&a), 5, "back at its checkpoint");
        assert_eq!(a.taking_over.consumer_ops().pause.len(), 2, "both topics paused");
        assert!(a.taking_over.due(std::time::Instant::now()).is_empty(), "not before state.interval");
        a.taking_over.retry_now();
        a.retry_hand_over().unwrap();
        assert!(a.shards[&0].owned);
        assert_eq!(
            a.taking_over.consumer_ops().seek,
            [(IMPRESSIONS.to_string(), 0, 5), (JUDGMENTS.to_string(), 0, 0)],
            "back to its checkpoint's impressions, and to the first judgment it read"
        );
        feed(&mut a, 5..10);
        judge(&mut a);
        assert_eq!(total(&a) + total(&b), 12);
        assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }), "its new claim is the newest");
    }

    /// With checkpoints, a message of a partition not assigned here (a
    /// leftover of an assignment gone, its shard retired) is not counted,
    /// and the next checkpoint claims nothing: the partition's owner is not
    /// fenced. Counted and claimed, it would be counted twice.
    #[test]
    fn a_message_of_a_partition_not_assigned_here_is_neither_counted_nor_claimed() {
        use super::super::publisher::JobOutcome;
        let cluster = state_cluster("rankpulse-state-stray");
        let daemon = |instance: &str| kafka_daemon(&cluster, "rankpulse-state-stray", instance);
        let total = |d: &Daemon| d.shards.values().map(events).sum::<u64>();
        let (mut a, mut b) = (daemon("a"), daemon("b"));
        b.assign(&[(IMPRESSIONS.to_string(), 0)]);
        feed(&mut b, 0..3);
        feed(&mut a, 0..3);
        assert_eq!(total(&a), 0, "not counted");
        assert!(matches!(checkpoint(&mut a), JobOutcome::Written { .. }));
        assert!(matches!(checkpoint(&mut b), JobOutcome::Written { .. }), "the owner is not fenced");
        assert_eq!(total(&b), 3);
    }

    /// Logs name the partitions per topic, in topic order.
    #[test]
    fn describe_groups_partitions_by_topic() {
        let tps = [("b".to_string(), 1), ("a".to_string(), 2), ("a".to_string(), 0)];
        assert_eq!(describe(&tps), "a[2, 0] b[1]");
        assert_eq!(describe(&[]), "");
    }
}
