//! Fencing: who owns a partition, ordered in the state topic itself (its
//! claims), so that the writer, its own restore and every hand-over agree
//! on where a new owner started.
//!
//! A former owner of a partition that still writes it after the group gave
//! it away (a zombie: cut off from the coordinator, not from the partition
//! leaders) must never win, or its counters would overlap the new owner's.
//! The broker's own fencing (group generations, transactions) cannot be
//! relied on — Tansu accepts a stale generation's offset commit and shows
//! aborted records to `read_committed` readers (docs/operations.md) — so
//! ownership is ordered in this topic, the one log every instance reads:
//!
//! - [`KafkaStore::hand_over`] appends a claim per assigned partition
//!   (acks=all), then reads the topic up to its claims. A claim's offset is
//!   the claimer's *epoch* for the partition, unique and ordered with every
//!   manifest without any counter to agree on; each manifest records the
//!   epoch under which its writer holds (or last held) each shard.
//! - A shard is a zombie's (`is_zombie`) when its writer owned it and
//!   its manifest comes after a claim of the partition by another writer
//!   newer than the shard's epoch: it went on past the point the claimer
//!   restored from. Readers never take it: a hand-over takes, among the
//!   other shards, one of the highest epoch (the latest owner's), the
//!   furthest of those; the instance's own restore (its revoke, a restart)
//!   takes the partition from its other slot, the checkpoint before the
//!   claim — the one the claimer restored from. Its counters thus stop
//!   exactly where the new owner's start.
//! - The writer checks what the topic got before writing and again once
//!   its manifest is acknowledged, up to that manifest: a partition it
//!   owns that another writer claimed since its own claim is fenced
//!   ([`StateError::Fenced`]); the daemon publishes and commits nothing of
//!   that checkpoint and gives the partitions up as at a revoke. After a
//!   write fenced that way the next write overwrites it, so the other slot
//!   (the checkpoint before the claim) stays until a checkpoint with the
//!   partitions given up replaces the fenced one. A fence found only by
//!   the check before a write (the check after the last one could not
//!   read) does the same when the newest checkpoint came after the claim.
//!   A fenced checkpoint is not withdrawn (tombstoned): its other shards
//!   may be what another instance restored from, and the instance's own
//!   revert of them must agree.
//!
//! Compaction keeps only the newest claim of a partition: a zombie's
//! manifest between an older claim and the newest is then excluded by the
//! epoch preference alone (the latest owner's shard wins once written),
//! and not at all by its own instance's restore; docs/operations.md states
//! this window. A
//! simpler rule — take the furthest shard written before one's claim —

use super::record::{Claim, Manifest, claim_key, claim_value};
use super::scan::Slots;
use super::{KafkaStore, Writer, poisoned};
use crate::state::{Checkpoint, ShardCheckpoint, StateError};
use std::collections::{BTreeMap, BTreeSet};
#[cfg(test)]
use std::sync::atomic::Ordering;

/// A claim as a read found it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct ClaimSeen {
    pub(super) offset: i64,
    pub(super) writer: u64,
}

/// Every claim a read found, per partition, oldest first.
pub(super) type Claims = BTreeMap<i32, Vec<ClaimSeen>>;
/// Per partition shard of a checkpoint, its epoch.
pub(super) type Epochs = BTreeMap<i32, i64>;

/// Whether a shard is a zombie's: owned by its writer under `epoch`, in a
/// checkpoint whose manifest (at `manifest`) comes after a claim of its
/// partition by another writer that is newer than that epoch. Such a
/// shard went on past the point the claimer restored from.
fn is_zombie(owned: bool, epoch: i64, writer: u64, manifest: i64, claims: &[ClaimSeen]) -> bool {
    owned && claims.iter().any(|c| c.writer != writer && c.offset > epoch && c.offset < manifest)
}

impl KafkaStore {
    /// `instance`'s newest complete checkpoint with its shards' epochs; a
    /// zombie's shard is replaced by the other slot's shard of the
    /// partition when that one is no zombie's, else left out.
    pub(super) fn checkpoint_of(
        &self,
        instance: &str,
        slots: &Slots,
        claims: &Claims,
    ) -> Result<Option<(Checkpoint, Epochs)>, StateError> {
        let (bytes, manifest, offset) = match slots.newest_complete() {
            Ok(Some(found)) => found,
            Ok(None) => return Ok(None),
            Err(reason) => return Err(StateError::Corrupt { at: self.origin(instance), reason }),
        };
        let mut c = self.decode(instance, &bytes, manifest)?;
        let zombie = |s: &ShardCheckpoint, m: &Manifest, at: i64| {
            is_zombie(s.owned, m.epoch(s.partition), m.writer, at, claims.get(&s.partition).map_or(&[], |c| c))
        };
        let mut epochs = BTreeMap::new();
        if !c.shards.iter().any(|s| zombie(s, manifest, offset)) {
            epochs.extend(c.shards.iter().map(|s| (s.partition, manifest.epoch(s.partition))));
            return Ok(Some((c, epochs)));
        }
        // The other slot holds the write before: the last one that
        // preceded the claim (the writer finds the claim when its next
        // write is acknowledged, and then overwrites the fenced one).
        let mut before: BTreeMap<i32, (ShardCheckpoint, i64)> = BTreeMap::new();
        if let Some((o, m)) = &slots.manifests[manifest.slot.other().index()]
            && *o < offset
            && let Ok(bytes) = slots.assemble(m)
            && let Ok(older) = self.decode(instance, &bytes, m)
        {
            for s in older.shards {
                if !zombie(&s, m, *o) {
                    let e = m.epoch(s.partition);
                    before.insert(s.partition, (s, e));
                }
            }
        }
        let shards = std::mem::take(&mut c.shards);
        for s in shards {
            let p = s.partition;
            if !zombie(&s, manifest, offset) {
                epochs.insert(p, manifest.epoch(p));
                c.shards.push(s);
            } else if let Some((s, e)) = before.remove(&p) {
                tracing::info!(
                    "partition {p} of instance {instance:?}: fenced; its checkpoint before the claim counts"
                );
                epochs.insert(p, e);
                c.shards.push(s);
            } else {
                tracing::warn!("partition {p} of instance {instance:?}: fenced, and no checkpoint before the claim");
            }
        }
        Ok(Some((c, epochs)))
    }

    /// Takes `partitions` over: appends a claim of each (acks=all), reads
    /// the topic up to the claims, and returns per partition the shard to
    /// restore: among the shards no zombie wrote, one of the highest
    /// epoch (the latest owner's), the furthest of those. A claim not
    /// written, or the topic not read: an error (the daemon holds the
    /// partitions and tries again).
    pub fn hand_over(&self, partitions: &BTreeSet<i32>) -> Result<BTreeMap<i32, ShardCheckpoint>, StateError> {
        #[cfg(test)]
        if self.failing_hand_overs.load(Ordering::Relaxed) > 0 {
            self.failing_hand_overs.fetch_sub(1, Ordering::Relaxed);
            return Err(self.kafka_error("a hand-over failed (test)"));
        }
        let (end, before) = {
            let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
            let before: Vec<(i32, Option<i64>)> = partitions.iter().map(|p| (*p, w.epochs.get(p).copied())).collect();
            (self.claim(&mut w, partitions)?, before)
        };
        // Unread, the checkpoints could not say where the partitions stand:
        // an error, not an empty hand-over (which would start them from
        // the committed offsets). Their shards stay as they were, under
        // their earlier epochs: written under the new claim's, a stale or
        // empty shard would outrank the latest owner's at the next
        // hand-over.
        match self.scan(None, end.map(|e| e + 1)) {
            Ok((scan, _)) => Ok(restore_points(self.checkpoints(&scan), partitions)),
            Err(e) => {
                let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
                for (p, epoch) in before {
                    match epoch {
                        Some(epoch) => w.epochs.insert(p, epoch),
                        None => w.epochs.remove(&p),
                    };
                }
                Err(e)
            }
        }
    }

    /// Makes the next `n` hand-overs fail, as with the state topic
    /// unreachable (tests).
    #[cfg(test)]
    pub(crate) fn fail_hand_overs(&self, n: u64) {
        self.failing_hand_overs.store(n, Ordering::Relaxed);
    }

    /// Appends a claim of each of `partitions` and waits for them: this
    /// process holds them from then on, under those offsets as epochs. The
    /// last claim's offset.
    pub(super) fn claim(&self, w: &mut Writer, partitions: &BTreeSet<i32>) -> Result<Option<i64>, StateError> {
        let mut records = Vec::new();
        for p in partitions {
            let claim = Claim {
                group: self.group.clone(),
                instance: self.instance.clone(),
                writer: self.writer_id,
                partition: *p,
            };
            records.push((claim_key(*p), Some(claim_value(&claim)?)));
            // A claim of an earlier tenure must not stand in for this one:
            // if this one fails, the partition counts as unclaimed (claimed
            // at the next write) rather than held under the old epoch,
            // which a claim by another writer since would fence.
            w.claims.remove(p);
        }
        let offsets = self.produce(w, records)?;
        let mut known = self.known.lock().map_err(|_| poisoned(&self.topic))?;
        for (p, o) in partitions.iter().zip(&offsets) {
            w.claims.insert(*p, *o);
            w.epochs.insert(*p, *o);
            note_claim(&mut known, *p, ClaimSeen { offset: *o, writer: self.writer_id });
        }
        Ok(offsets.iter().max().copied())
    }
}

/// The newest claim's offset per partition.
pub(super) fn latest_claims(claims: &Claims) -> BTreeMap<i32, i64> {
    claims.iter().filter_map(|(p, cs)| cs.iter().map(|c| c.offset).max().map(|o| (*p, o))).collect()
}

/// Keeps the newer of two claims of a partition.
pub(super) fn note_claim(known: &mut BTreeMap<i32, ClaimSeen>, partition: i32, claim: ClaimSeen) {
    let newest = known.entry(partition).or_insert(claim);
    if claim.offset > newest.offset {
        *newest = claim;
    }
}

/// The partitions of `checkpoint` its writer owns but must not write: a
/// claim among `claims_of` them, by another writer, is newer than this
/// writer's.
pub(super) fn fenced(
    w: &Writer,
    checkpoint: &Checkpoint,
    writer: u64,
    claims_of: impl Fn(i32) -> Vec<ClaimSeen>,
) -> Vec<i32> {
    let epoch = |p: i32| w.claims.get(&p).copied().unwrap_or(0);
    checkpoint
        .shards
        .iter()
        .filter(|s| is_zombie(s.owned, epoch(s.partition), writer, i64::MAX, &claims_of(s.partition)))
        .map(|s| s.partition)
        .collect()
}

/// Per partition of `partitions`, the shard to restore among the
/// checkpoints' (their zombie shards already left out): the highest epoch
/// (the latest owner's), then the furthest. A former owner's shard never
/// passes the point the latest owner restored from, unless a zombie's.
fn restore_points(
    checkpoints: Vec<(Checkpoint, Epochs)>,
    partitions: &BTreeSet<i32>,
) -> BTreeMap<i32, ShardCheckpoint> {
    let mut best: BTreeMap<i32, (i64, ShardCheckpoint)> = BTreeMap::new();
    for (c, epochs) in checkpoints {
        for s in c.shards {
            let e = epochs.get(&s.partition).copied().unwrap_or(0);
            if partitions.contains(&s.partition)
                && best.get(&s.partition).is_none_or(|(be, b)| (e, s.progress()) > (*be, b.progress()))
            {
                best.insert(s.partition, (e, s));
            }
        }
    }
    best.into_iter().map(|(p, (_, s))| (p, s)).collect()
}

#[cfg(test)]
mod tests {
    use super::super::testing::{checkpoint, cluster, config, slots, unowned};
    use super::*;
    use std::sync::atomic::Ordering;
    use std::sync::{Arc, Mutex};

    /// Partition 0's restore point (its offset on topic "t") as a reader
    /// that claims nothing picks it; `compacted`: as it would from the
    /// topic compacted (the newest claim of each partition only: manifests
    /// and chunks already count by their newest value).
    fn restore_point(store: &KafkaStore, compacted: bool) -> Option<i64> {
        let (mut scan, _) = store.scan(None, None).unwrap();
        if compacted {
            for claims in scan.claims.values_mut() {
                claims.drain(..claims.len() - 1);
            }
        }
        restore_points(store.checkpoints(&scan), &BTreeSet::from([0])).get(&0).map(|s| s.offsets["t"])
    }

    /// Partition 0 of `instance`'s own checkpoint, as a revoke or a restart
    /// restores it (counters included), from the topic as is or compacted.
    fn own_point(store: &KafkaStore, instance: &str, compacted: bool) -> Option<i64> {
        let (mut scan, _) = store.scan(None, None).unwrap();
        if compacted {
            for claims in scan.claims.values_mut() {
                claims.drain(..claims.len() - 1);
            }
        }
        let slots = scan.instances.remove(instance).unwrap();
        let (c, _) = store.checkpoint_of(instance, &slots, &scan.claims).unwrap().unwrap();
        c.shards.iter().find(|s| s.partition == 0).map(|s| s.offsets["t"])
    }

    fn fenced_partitions(e: &StateError) -> Vec<i32> {
        match e {
            StateError::Fenced { partitions, .. } => partitions.clone(),
            e => panic!("not fenced: {e}"),
        }
    }

    /// Issue #27: a former owner that still writes after losing the
    /// partition (a zombie) never wins. A owns partition 0 and checkpoints
    /// it at X = 20; B takes it over (claims it) while A, cut off from the
    /// group, writes it further to Y = 30. A's write reports the partition
    /// fenced; a reader choosing the restore point takes X (then B's own),
    /// never Y; A's own checkpoint, which its counters come back from at
    /// the revoke or a restart, has the partition at X: A counts up to X,
    /// B from X. The same holds on the topic as compaction leaves it
    /// (only the newest claim), and when A tries again before writing.
    #[test]
    fn a_zombie_never_wins_a_partition_claimed_by_its_new_owner() {
        let (_cluster, bootstrap) = cluster();
        let (ca, cb) = (config(&bootstrap, "a"), config(&bootstrap, "b"));
        let a = Arc::new(KafkaStore::connect(&ca, 2048).unwrap());
        let b = Arc::new(KafkaStore::connect(&cb, 2048).unwrap());
        let p0 = BTreeSet::from([0]);
        assert!(a.hand_over(&p0).unwrap().is_empty(), "nothing to restore in an empty topic");
        a.write(&checkpoint(&ca, 20, 1)).unwrap();
        assert_eq!(restore_point(&a, false), Some(20));

        // B claims partition 0 while A's next write is under way: after
        // A's check, before its chunks and manifest.
        let b_restored = Arc::new(Mutex::new(None));
        let (claimer, seen) = (b.clone(), b_restored.clone());
        *a.before_chunks.lock().unwrap() = Some(Box::new(move || {
            let found = claimer.hand_over(&BTreeSet::from([0])).unwrap();
            *seen.lock().unwrap() = found.get(&0).map(|s| s.offsets["t"]);
        }));
        let e = a.write(&checkpoint(&ca, 30, 2)).unwrap_err();
        assert_eq!(fenced_partitions(&e), [0], "the zombie's write reports the partition fenced");
        assert_eq!(*b_restored.lock().unwrap(), Some(20), "B took it over at X");
        // Y is in the topic (A's newest manifest), and never taken.
        assert_eq!(slots(&a, "a").newest_complete().unwrap().unwrap().1.seq, 2);
        for compacted in [false, true] {
            assert_eq!(restore_point(&a, compacted), Some(20), "compacted: {compacted}");
            assert_eq!(own_point(&a, "a", compacted), Some(20), "compacted: {compacted}");
        }
        assert_eq!(a.load_own().unwrap().unwrap().shards[0].offsets["t"], 20);
        let restarted = KafkaStore::connect(&ca, 2048).unwrap();
        assert_eq!(restarted.load_own().unwrap().unwrap().shards[0].offsets["t"], 20, "a restart of A too");

        // A gives the partition up at X (not owned); its writes go on,
        // overwriting Y first, then X's slot: X stays what counts.
        for written_ms in [3, 4] {
            a.write(&unowned(checkpoint(&ca, 20, written_ms))).unwrap();
            for compacted in [false, true] {
                assert_eq!(restore_point(&a, compacted), Some(20));
                assert_eq!(own_point(&a, "a", compacted), Some(20));
            }
        }
        // B's own checkpoint, of the newest epoch, is the restore point
        // from then on.
        b.write(&checkpoint(&cb, 25, 5)).unwrap();
        // A zombie again, its claim older than B's: fenced before writing.
        let e = a.write(&checkpoint(&ca, 40, 6)).unwrap_err();
        assert_eq!(fenced_partitions(&e), [0]);
        for compacted in [false, true] {
            assert_eq!(restore_point(&a, compacted), Some(25), "compacted: {compacted}");
            assert_eq!(own_point(&a, "a", compacted), Some(20));
        }
        assert_eq!(a.load_own().unwrap().unwrap().written_ms, 4, "nothing written");
        // Taking it back: A's new claim is the newest, B is fenced.
        assert_eq!(a.hand_over(&p0).unwrap()[&0].offsets["t"], 25);
        a.write(&checkpoint(&ca, 35, 7)).unwrap();
        assert_eq!(fenced_partitions(&b.write(&checkpoint(&cb, 45, 8)).unwrap_err()), [0]);
        assert_eq!(restore_point(&a, false), Some(35));
    }

    /// A zombie whose check after its manifest failed (Y, written after
    /// B's claim, stays its newest) learns of the fence at its next
    /// write's check: that write is refused and the one after goes to Y's
    /// slot, so a crash in the middle of it leaves X, the checkpoint before
    /// the claim, whole. Overwriting X instead would leave only Y, whose
    /// partition 0 no restore takes: A's counters of it would be lost.
    #[test]
    fn after_a_fence_found_late_the_next_write_spares_the_checkpoint_before_the_claim() {
        let (_cluster, bootstrap) = cluster();
        let (ca, cb) = (config(&bootstrap, "a"), config(&bootstrap, "b"));
        let a = Arc::new(KafkaStore::connect(&ca, 2048).unwrap());
        let b = Arc::new(KafkaStore::connect(&cb, 2048).unwrap());
        a.hand_over(&BTreeSet::from([0])).unwrap();
        a.write(&checkpoint(&ca, 20, 1)).unwrap();
        let claimer = b.clone();
        *a.before_chunks.lock().unwrap() = Some(Box::new(move || {
            claimer.hand_over(&BTreeSet::from([0])).unwrap();
        }));
        a.skip_post_check.store(true, Ordering::Relaxed);
        assert!(a.write(&checkpoint(&ca, 30, 2)).is_err(), "its check failed");
        a.skip_post_check.store(false, Ordering::Relaxed);
        assert_eq!(fenced_partitions(&a.write(&checkpoint(&ca, 35, 3)).unwrap_err()), [0]);
        // A gives partition 0 up at X and writes, killed mid-chunks.
        a.write_upto(&unowned(checkpoint(&ca, 20, 4)), Some(1)).unwrap();
        assert_eq!(own_point(&a, "a", false), Some(20), "X is whole");
        let restarted = KafkaStore::connect(&ca, 2048).unwrap();
        assert_eq!(restarted.load_own().unwrap().unwrap().shards[0].offsets["t"], 20);
    }
}
