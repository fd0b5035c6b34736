//! The write protocol, the publisher thread's use of the store (it hands
//! each checkpoint here before the offsets it covers are committed): the
//! checkpoint into the slot that does not hold the newest complete one,
//! chunk by chunk, then that slot's manifest, each record acknowledged by
//! all in-sync replicas before the next step; the fencing checks before
//! and after (see `fencing`).
//!
//! Two processes with one `state.instance` would overwrite each other:
//! each process draws a random writer id, and before every write it reads
//! what the topic got since its own last manifest (nothing but its own
//! records in a one-instance group; other instances' writes otherwise). A
//! manifest of its instance by another writer there means another process
//! took the name over: it stops writing ([`StateError::Displaced`]) and
//! the daemon exits. The process whose manifest is later in the log wins;
//! until the loser's next write, their checkpoints may overwrite each
//! other, so a hand-over in that window may restore the other process's
//! state. It is a tripwire for a misconfiguration, not a lock: a process
//! restarted after `kill -9` takes its name over at once, which a lease
//! would delay.

use super::fencing::{ClaimSeen, fenced, note_claim};
use super::record::{
    Key, Manifest, Slot, chunk_key, chunk_value, manifest_key, manifest_value, parse_claim, parse_key, parse_manifest,
};
use super::scan::read_range;
use super::{KafkaStore, TIMEOUT, Writer, poisoned};
use crate::state::{Checkpoint, StateError, encode};
use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, Producer};
use std::collections::BTreeSet;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

impl KafkaStore {
    /// Whether another process has taken this instance over (see the
    /// module's documentation): then this one must stop.
    pub fn still_ours(&self) -> Result<(), StateError> {
        match self.displaced_by.load(Ordering::Relaxed) {
            0 => Ok(()),
            writer => Err(self.displaced(writer)),
        }
    }

    fn displaced(&self, writer: u64) -> StateError {
        StateError::Displaced { instance: self.instance.clone(), topic: self.topic.clone(), writer }
    }

    /// Writes `checkpoint` into the slot not holding the newest complete
    /// one, then that slot's manifest; returns once every record is
    /// acknowledged (acks=all), with the checkpoint's size.
    pub fn write(&self, checkpoint: &Checkpoint) -> Result<usize, StateError> {
        self.write_upto(checkpoint, None)
    }

    /// As [`Self::write`]; with `crash_after` set, stops after that many
    /// chunks and writes no manifest, as a process killed mid-write would.
    pub(super) fn write_upto(&self, checkpoint: &Checkpoint, crash_after: Option<usize>) -> Result<usize, StateError> {
        let bytes = encode(checkpoint)?;
        let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
        self.still_ours()?;
        self.check_tail(&mut w, None)?;
        // Owned partitions without a claim of this process (the one at
        // their hand-over could not be written) are claimed now.
        let unclaimed: BTreeSet<i32> = checkpoint
            .shards
            .iter()
            .filter(|s| s.owned && !w.claims.contains_key(&s.partition))
            .map(|s| s.partition)
            .collect();
        if !unclaimed.is_empty() {
            self.claim(&mut w, &unclaimed)?;
        }
        // Fenced before writing: claimed by another writer since.
        let known = self.known.lock().map_err(|_| poisoned(&self.topic))?.clone();
        let lost = fenced(&w, checkpoint, self.writer_id, |p| known.get(&p).copied().into_iter().collect());
        if !lost.is_empty() {
            // The newest checkpoint came after the claim (its own check
            // could not read the topic, or its acknowledgement was lost):
            // a zombie's, so the next write overwrites it and spares the
            // one before the claim, which a crash mid-write would need.
            let claimed = lost.iter().filter_map(|p| known.get(p).map(|c| c.offset)).min();
            if let (Some(claimed), Some(at)) = (claimed, w.current_at)
                && claimed < at
            {
                w.current = w.current.map(Slot::other);
                w.current_at = None;
            }
            return Err(self.fenced(lost));
        }
        #[cfg(test)]
        if let Some(hook) = self.before_chunks.lock().ok().and_then(|mut h| h.take()) {
            hook();
        }
        if let Ok(mut opened) = self.opened.lock() {
            *opened = None;
        }
        let slot = w.current.map_or(Slot::A, Slot::other);
        // A number per attempt: chunks of an attempt that failed never
        // pass for this one's.
        w.seq += 1;
        let seq = w.seq;
        let count = bytes.len().div_ceil(self.chunk_bytes);
        let chunks = u32::try_from(count).map_err(|_| StateError::Encode(format!("{count} chunks")))?;
        let records: Vec<(String, Option<Vec<u8>>)> = bytes
            .chunks(self.chunk_bytes)
            .enumerate()
            .take(crash_after.unwrap_or(usize::MAX))
            .map(|(i, data)| {
                let i = i as u32;
                (chunk_key(&self.instance, slot, i), Some(chunk_value(self.writer_id, seq, i, data)))
            })
            .collect();
        // Chunks written (or half written) now: whatever becomes of this
        // write, the slot's extent covers them.
        w.extent[slot.index()] = w.extent[slot.index()].max(records.len() as u32);
        self.produce(&mut w, records)?;
        if crash_after.is_some() {
            return Ok(0);
        }
        let manifest = Manifest {
            group: self.group.clone(),
            instance: self.instance.clone(),
            writer: self.writer_id,
            seq,
            slot,
            chunks,
            len: bytes.len() as u64,
            checksum: xxh3_64(&bytes),
            epochs: checkpoint
                .shards
                .iter()
                .map(|s| (s.partition, w.epochs.get(&s.partition).copied().unwrap_or(0)))
                .collect(),
        };
        let offsets =
            self.produce(&mut w, vec![(manifest_key(&self.instance, slot), Some(manifest_value(&manifest)?))])?;
        w.current = Some(slot);
        w.current_at = offsets.last().copied();
        let manifest_at = offsets.last().copied().unwrap_or(w.tail_from);
        // Chunks of a larger checkpoint before: tombstones, so that
        // compaction frees them (best effort: they are never read).
        let extent = w.extent[slot.index()];
        if extent > chunks {
            let tombstones = (chunks..extent).map(|i| (chunk_key(&self.instance, slot, i), None)).collect();
            match self.produce(&mut w, tombstones) {
                Ok(_) => w.extent[slot.index()] = chunks,
                Err(e) => tracing::warn!("leftover chunks of slot {} stay: {e}", slot.name()),
            }
        }
        // Fenced while writing: a claim between the check above and the
        // manifest. The claimer restored from this instance's checkpoint
        // before (the other slot, which readers now take for those
        // partitions); the next write overwrites this one.
        #[cfg(test)]
        if self.skip_post_check.load(Ordering::Relaxed) {
            return Err(self.kafka_error("the check after the manifest failed (test)"));
        }
        let seen = self.check_tail(&mut w, Some(manifest_at + 1))?;
        let fenced =
            fenced(&w, checkpoint, self.writer_id, |p| seen.iter().filter(|(q, _)| *q == p).map(|(_, c)| *c).collect());
        if !fenced.is_empty() {
            w.current = Some(slot.other());
            w.current_at = None;
            return Err(self.fenced(fenced));
        }
        Ok(bytes.len())
    }

    fn fenced(&self, partitions: Vec<i32>) -> StateError {
        let e = StateError::Fenced { instance: self.instance.clone(), topic: self.topic.clone(), partitions };
        tracing::error!("{e}");
        e
    }

    /// Reads what the topic got since the last read, up to `to` (else its
    /// end): a manifest of this instance by another writer, not followed by
    /// one of its own, displaces this one; one of its own (a write whose
    /// acknowledgement was lost) is taken as the newest. The claims found,
    /// which are also noted.
    fn check_tail(&self, w: &mut Writer, to: Option<i64>) -> Result<Vec<(i32, ClaimSeen)>, StateError> {
        let (_, high) = w.tail.fetch_watermarks(&self.topic, 0, TIMEOUT).map_err(|e| self.reader_error(&w.tail, &e))?;
        let high = to.map_or(high, |to| to.min(high));
        if w.tail_from >= high {
            return Ok(Vec::new());
        }
        let mut seen: Option<(Manifest, i64)> = None;
        let mut other: Option<u64> = None;
        let mut claims = Vec::new();
        read_range(&w.tail, &self.topic, w.tail_from, high, |m| {
            if let Some(Key::Claim { partition }) = m.key().and_then(parse_key)
                && let Some(c) = m.payload().and_then(parse_claim)
                && c.group == self.group
                && c.partition == partition
            {
                claims.push((partition, ClaimSeen { offset: m.offset(), writer: c.writer }));
            }
            if let Some(Key::Manifest { instance, .. }) = m.key().and_then(parse_key)
                && instance == self.instance
                && let Some(manifest) = m.payload().and_then(parse_manifest)
            {
                // The later manifest wins: another writer's before this
                // one's own (read back after a write) displaces nothing.
                if manifest.writer != self.writer_id {
                    other = Some(manifest.writer);
                } else {
                    other = None;
                    seen = Some((manifest, m.offset()));
                }
            }
            true
        })
        .map_err(|e| self.kafka_error(e))?;
        if let Some(writer) = other {
            self.displaced_by.store(writer.max(1), Ordering::Relaxed);
            tracing::error!("{}", self.displaced(writer));
            return Err(self.displaced(writer));
        }
        if let Some((m, at)) = seen {
            w.seq = w.seq.max(m.seq);
            w.current = Some(m.slot);
            w.current_at = Some(at);
        }
        w.tail_from = high;
        let mut known = self.known.lock().map_err(|_| poisoned(&self.topic))?;
        for (p, c) in &claims {
            note_claim(&mut known, *p, *c);
        }
        Ok(claims)
    }

    /// Produces `records` (key, value or tombstone) to the topic's
    /// partition and waits until each is acknowledged: their offsets.
    pub(super) fn produce(
        &self,
        w: &mut Writer,
        records: Vec<(String, Option<Vec<u8>>)>,
    ) -> Result<Vec<i64>, StateError> {
        let first = w.next_record;
        w.next_record += records.len();
        if let Ok(mut results) = self.producer.context().results.lock() {
            // Acknowledgements of records an earlier write gave up on.
            results.clear();
        }
        for (n, (key, value)) in records.iter().enumerate() {
            let mut record =
                BaseRecord::<str, [u8], usize>::with_opaque_to(&self.topic, first + n).partition(0).key(key.as_str());
            if let Some(v) = value {
                record = record.payload(v.as_slice());
            }
            let started = Instant::now();
            loop {
                match self.producer.send(record) {
                    Ok(()) => break,
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r))
                        if started.elapsed() < TIMEOUT =>
                    {
                        record = r;
                        self.producer.poll(Duration::from_millis(10));
                    }
                    Err((e, _)) => return Err(self.kafka_error(crate::kafka::error_text(&e))),
                }
            }
        }
        // Not `flush`: it polls in steps of 100 ms, which was most of a
        // small checkpoint's write. The acknowledgements are served here.
        let deadline = Instant::now() + TIMEOUT + Duration::from_secs(5);
        let acknowledged = || {
            let results = self.producer.context().results.lock();
            results.is_ok_and(|r| r.range(first..first + records.len()).count() == records.len())
        };
        while !acknowledged() {
            if Instant::now() > deadline {
                return Err(self.kafka_error(format!("not acknowledged within {} s", TIMEOUT.as_secs() + 5)));
            }
            self.producer.poll(Duration::from_millis(1));
        }
        let results = self.producer.context().results.lock().map_err(|_| poisoned(&self.topic))?;
        (first..first + records.len())
            .map(|n| match results.get(&n) {
                Some(Ok(offset)) => Ok(*offset),
                Some(Err(e)) => Err(self.kafka_error(format!("a record was not written: {e}"))),
                None => Err(self.kafka_error("a record was not acknowledged")),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::MAX_CHUNK_BYTES;
    use super::super::testing::{checkpoint, cluster, config, slots, unowned};
    use super::*;
    use std::sync::Arc;

    /// The bytes a reader would restore for `instance`.
    fn restorable(store: &KafkaStore, instance: &str) -> Vec<u8> {
        slots(store, instance).newest_complete().unwrap().expect("a complete checkpoint").0
    }

    /// A checkpoint of many chunks reads back byte for byte; a write that
    /// dies between its chunks and its manifest (after some chunks, or
    /// after all) leaves the previous checkpoint readable, and the next
    /// process writes into the other slot.
    #[test]
    fn chunks_reassemble_and_a_write_cut_before_its_manifest_leaves_the_last_checkpoint() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "a");
        let first = checkpoint(&cfg, 300, 1);
        let first_bytes = encode(&first).unwrap();
        let chunk = 4096;
        assert!(first_bytes.len() > 5 * chunk, "{} bytes", first_bytes.len());
        let store = KafkaStore::connect(&cfg, chunk).unwrap();
        assert!(store.load_own().unwrap().is_none(), "an empty topic has no checkpoint");
        assert_eq!(store.write(&first).unwrap(), first_bytes.len());
        assert_eq!(restorable(&store, "a"), first_bytes);
        let loaded = store.load_own().unwrap().unwrap();
        assert_eq!((loaded.written_ms, loaded.shards[0].offsets["t"]), (1, 300));

        let second = checkpoint(&cfg, 400, 2);
        let second_bytes = encode(&second).unwrap();
        let chunks = second_bytes.len().div_ceil(chunk);
        for cut in [2, chunks] {
            store.write_upto(&second, Some(cut)).unwrap();
            let s = slots(&store, "a");
            assert_eq!(s.chunks[Slot::B.index()].len(), cut, "the cut write's chunks are in slot B");
            assert_eq!(restorable(&store, "a"), first_bytes, "cut after {cut} of {chunks} chunks");
            let restarted = KafkaStore::connect(&cfg, chunk).unwrap();
            assert_eq!(restarted.load_own().unwrap().unwrap().written_ms, 1);
        }
        // A restarted process finishes the job: slot B, then A again.
        let restarted = KafkaStore::connect(&cfg, chunk).unwrap();
        restarted.write(&second).unwrap();
        let s = slots(&restarted, "a");
        assert_eq!(s.manifests.iter().flatten().map(|(_, m)| m.slot).collect::<Vec<_>>(), [Slot::A, Slot::B]);
        assert_eq!(restorable(&restarted, "a"), second_bytes);
        assert_eq!(restarted.load_own().unwrap().unwrap().written_ms, 2);
        let third = checkpoint(&cfg, 10, 3);
        restarted.write(&third).unwrap();
        assert_eq!(restarted.load_own().unwrap().unwrap().written_ms, 3);
        assert_eq!(slots(&restarted, "a").newest_complete().unwrap().unwrap().1.slot, Slot::A);
        // A smaller checkpoint leaves no stale chunks behind in its slot.
        assert_eq!(slots(&restarted, "a").extent(Slot::A), encode(&third).unwrap().len().div_ceil(chunk) as u32);
    }

    /// At the default chunk size, a checkpoint several chunks long.
    #[test]
    fn a_checkpoint_several_times_a_chunk_round_trips() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "big");
        let big = checkpoint(&cfg, 12_000, 7);
        let bytes = encode(&big).unwrap();
        assert!(bytes.len() > 3 * MAX_CHUNK_BYTES, "{} bytes", bytes.len());
        let store = KafkaStore::connect(&cfg, MAX_CHUNK_BYTES).unwrap();
        store.write(&big).unwrap();
        store.write(&big).unwrap();
        assert_eq!(restorable(&store, "big"), bytes);
        let loaded = KafkaStore::connect(&cfg, MAX_CHUNK_BYTES).unwrap().load_own().unwrap().unwrap();
        assert_eq!(loaded.shards[0].assembler.open_lists.len(), big.shards[0].assembler.open_lists.len());
        assert_eq!(loaded.shards[0].offsets["t"], 12_000);
    }

    /// A second process with the same instance name takes it over; the
    /// first finds that out before its next write and stops.
    #[test]
    fn a_second_process_with_the_same_instance_displaces_the_first() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "same");
        let first = KafkaStore::connect(&cfg, 2048).unwrap();
        first.write(&checkpoint(&cfg, 20, 1)).unwrap();
        first.write(&checkpoint(&cfg, 20, 2)).unwrap();
        let second = KafkaStore::connect(&cfg, 2048).unwrap();
        assert_eq!(second.load_own().unwrap().unwrap().written_ms, 2, "it takes over the last checkpoint");
        second.write(&checkpoint(&cfg, 20, 3)).unwrap();
        assert!(first.still_ours().is_ok(), "not known before the first's next write");
        let e = first.write(&checkpoint(&cfg, 20, 4)).unwrap_err();
        assert!(matches!(&e, StateError::Displaced { instance, .. } if instance == "same"), "{e}");
        assert!(first.still_ours().is_err());
        assert!(first.write(&checkpoint(&cfg, 20, 5)).is_err(), "it stays stopped");
        second.write(&checkpoint(&cfg, 20, 6)).unwrap();
        assert!(second.still_ours().is_ok());
        let reader = KafkaStore::connect(&cfg, 2048).unwrap();
        assert_eq!(reader.load_own().unwrap().unwrap().written_ms, 6);
    }

    /// Two processes of one name writing at once: the one whose manifest is
    /// later in the log keeps the name, even though it reads the other's
    /// manifest back when checking after its own write; the other stops.
    #[test]
    fn of_two_interleaved_writes_under_one_name_the_later_manifest_wins() {
        let (_cluster, bootstrap) = cluster();
        let cfg = config(&bootstrap, "same");
        // Of no partition it owns: no claim, no fencing, only the name.
        let first = KafkaStore::connect(&cfg, 2048).unwrap();
        let second = Arc::new(KafkaStore::connect(&cfg, 2048).unwrap());
        let (writer, c) = (second.clone(), cfg.clone());
        // The second's write lands between the first's check and its chunks.
        *first.before_chunks.lock().unwrap() = Some(Box::new(move || {
            writer.write(&unowned(checkpoint(&c, 20, 1))).unwrap();
        }));
        first.write(&unowned(checkpoint(&cfg, 20, 2))).unwrap();
        assert!(first.still_ours().is_ok());
        let e = second.write(&unowned(checkpoint(&cfg, 20, 3))).unwrap_err();
        assert!(matches!(e, StateError::Displaced { .. }), "{e}");
        first.write(&unowned(checkpoint(&cfg, 20, 4))).unwrap();
        assert_eq!(first.load_own().unwrap().unwrap().written_ms, 4);
    }
}
