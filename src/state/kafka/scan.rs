//! Reading the state topic back: a scan from its start takes every record
//! into the slots of its instance (the newest value of each key, as
//! compaction will leave it) and notes every claim. A reader takes, per
//! instance, the slot whose manifest is later in the log and whose chunks
//! all carry that manifest's writer and sequence number and add up to its
//! length and checksum, else the other slot; the bytes are then checked as
//! a file's are (header, checksum, decode, metric settings). A restore at
//! start, a hand-over and `rankpulse state` all read through here.

use super::fencing::{ClaimSeen, Claims, Epochs, note_claim};
use super::record::{Key, Manifest, Slot, parse_chunk, parse_claim, parse_key, parse_manifest};
use super::{KafkaStore, StateContext, TIMEOUT, poisoned};
use crate::state::{Checkpoint, StateError, parse};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use std::collections::BTreeMap;
#[cfg(test)]
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use xxhash_rust::xxh3::xxh3_64;

/// A slot's checkpoint bytes, with its manifest and the manifest's offset.
type Complete<'a> = (Vec<u8>, &'a Manifest, i64);

#[derive(Debug)]
pub(super) struct Chunk {
    writer: u64,
    seq: u64,
    data: Vec<u8>,
}

/// One instance's records as a scan left them: the newest value of each
/// manifest and chunk key (a tombstone removes it), manifests with their
/// offsets.
#[derive(Debug, Default)]
pub(super) struct Slots {
    pub(super) manifests: [Option<(i64, Manifest)>; 2],
    pub(super) chunks: [BTreeMap<u32, Chunk>; 2],
}

impl Slots {
    /// The newest checkpoint whose chunks are all there and add up, with
    /// its manifest; `Ok(None)` without any manifest; `Err` with why each
    /// slot failed when none is whole.
    pub(super) fn newest_complete(&self) -> Result<Option<Complete<'_>>, String> {
        let mut candidates: Vec<&(i64, Manifest)> = self.manifests.iter().flatten().collect();
        candidates.sort_by_key(|(offset, _)| std::cmp::Reverse(*offset));
        let mut why = Vec::new();
        for (offset, m) in candidates.iter().copied() {
            match self.assemble(m) {
                Ok(bytes) => return Ok(Some((bytes, m, *offset))),
                Err(e) => why.push(format!("slot {} (write {}): {e}", m.slot.name(), m.seq)),
            }
        }
        if why.is_empty() { Ok(None) } else { Err(why.join("; ")) }
    }

    pub(super) fn assemble(&self, m: &Manifest) -> Result<Vec<u8>, String> {
        let chunks = &self.chunks[m.slot.index()];
        let mut total = 0u64;
        for i in 0..m.chunks {
            let c = chunks.get(&i).ok_or_else(|| format!("chunk {i} of {} is missing", m.chunks))?;
            if (c.writer, c.seq) != (m.writer, m.seq) {
                return Err(format!("chunk {i} is of another write (being overwritten?)"));
            }
            total += c.data.len() as u64;
        }
        if total != m.len {
            return Err(format!("its chunks hold {total} bytes, the manifest says {}", m.len));
        }
        // `total` is what the chunks hold, already in memory: no allocation
        // a crafted manifest could inflate.
        let mut bytes = Vec::with_capacity(total as usize);
        for i in 0..m.chunks {
            if let Some(c) = chunks.get(&i) {
                bytes.extend_from_slice(&c.data);
            }
        }
        if xxh3_64(&bytes) != m.checksum {
            return Err("checksum mismatch".into());
        }
        Ok(bytes)
    }

    /// One past the highest chunk index of `slot` that holds a value.
    pub(super) fn extent(&self, slot: Slot) -> u32 {
        self.chunks[slot.index()].keys().next_back().map_or(0, |i| i.saturating_add(1))
    }
}

/// The topic read up to its end.
#[derive(Debug, Default)]
pub(super) struct SlotScan {
    /// The group whose claims count (others' are skipped).
    group: String,
    pub(super) instances: BTreeMap<String, Slots>,
    /// Every claim found per partition, oldest first (compaction keeps the
    /// newest only).
    pub(super) claims: Claims,
    /// Records that are no checkpoint record (another format, or another
    /// program's): skipped.
    foreign: u64,
}

impl SlotScan {
    /// Takes one record into the scan; records of instances other than
    /// `only` (when given) are passed over without keeping their bytes.
    fn add(&mut self, key: Option<&[u8]>, value: Option<&[u8]>, offset: i64, only: Option<&str>) {
        let Some(key) = key.and_then(parse_key) else {
            self.foreign += 1;
            return;
        };
        let instance = match key {
            Key::Manifest { instance, .. } | Key::Chunk { instance, .. } => instance,
            Key::Claim { partition } => {
                match value.and_then(parse_claim) {
                    Some(c) if c.partition == partition && c.group == self.group => {
                        self.claims.entry(partition).or_default().push(ClaimSeen { offset, writer: c.writer });
                    }
                    Some(_) => {}
                    None => self.foreign += u64::from(value.is_some()),
                }
                return;
            }
        };
        if only.is_some_and(|o| o != instance) {
            return;
        }
        // The newest value of a key replaces what it held, as compaction
        // will: a tombstone or a value of no known shape leaves it empty.
        let slots = self.instances.entry(instance.to_string()).or_default();
        match key {
            Key::Manifest { instance, slot } => {
                let m = value.and_then(parse_manifest).filter(|m| m.slot == slot && m.instance == instance);
                self.foreign += u64::from(value.is_some() && m.is_none());
                slots.manifests[slot.index()] = m.map(|m| (offset, m));
            }
            Key::Claim { .. } => {}
            Key::Chunk { slot, index, .. } => {
                let chunk = value.and_then(parse_chunk).filter(|(_, _, i, _)| *i == index);
                self.foreign += u64::from(value.is_some() && chunk.is_none());
                match chunk {
                    Some((writer, seq, _, data)) => {
                        slots.chunks[slot.index()].insert(index, Chunk { writer, seq, data: data.to_vec() });
                    }
                    None => {
                        slots.chunks[slot.index()].remove(&index);
                    }
                }
            }
        }
    }
}

impl KafkaStore {
    /// This instance's newest complete checkpoint, if it has one, each
    /// shard a zombie's (see `fencing`) taken from the other slot's
    /// checkpoint instead: the one preceding the claim that fenced it.
    /// Corrupt (no slot whole), another group's, or of other metric
    /// settings: an error, as a file's would be.
    pub fn load_own(&self) -> Result<Option<Checkpoint>, StateError> {
        let opened = self.opened.lock().map_err(|_| poisoned(&self.topic))?.take();
        let (slots, claims) = match opened {
            Some(opened) => opened,
            None => {
                let mut scan = self.scan(Some(&self.instance), None)?.0;
                (scan.instances.remove(&self.instance).unwrap_or_default(), scan.claims)
            }
        };
        Ok(self.checkpoint_of(&self.instance, &slots, &claims)?.map(|(c, _)| c))
    }

    /// Decodes the checkpoint a slot's manifest describes, checking group
    /// and metric settings.
    pub(super) fn decode(&self, instance: &str, bytes: &[u8], manifest: &Manifest) -> Result<Checkpoint, StateError> {
        let at = self.origin(instance);
        if manifest.group != self.group {
            return Err(StateError::ForeignGroup { at, group: manifest.group.clone() });
        }
        let c = parse(bytes, &at)?;
        if c.fingerprint != self.fingerprint {
            return Err(StateError::Incompatible { at, theirs: c.fingerprint, ours: self.fingerprint.clone() });
        }
        Ok(c)
    }

    /// Every instance's checkpoint of this group and these metric settings
    /// as [`Self::checkpoint_of`] makes it; the others are reported and
    /// skipped. A topic that cannot be read is reported too: the
    /// partitions then start from the group's committed offsets, as without
    /// checkpoints.
    pub fn load_all(&self) -> Vec<Checkpoint> {
        match self.scan(None, None) {
            Ok((scan, _)) => self.checkpoints(&scan).into_iter().map(|(c, _)| c).collect(),
            Err(e) => {
                tracing::error!("cannot read the checkpoints to hand partitions over: {e}");
                Vec::new()
            }
        }
    }

    pub(super) fn checkpoints(&self, scan: &SlotScan) -> Vec<(Checkpoint, Epochs)> {
        let mut out = Vec::new();
        for (instance, slots) in &scan.instances {
            match self.checkpoint_of(instance, slots, &scan.claims) {
                Ok(Some(c)) => out.push(c),
                Ok(None) => {}
                Err(e) => tracing::warn!("ignoring checkpoint: {e}"),
            }
        }
        out
    }

    /// Makes the next `n` reads of the whole topic fail (tests: a
    /// hand-over whose claim is written and whose read fails).
    #[cfg(test)]
    pub(crate) fn fail_scans(&self, n: u64) {
        self.failing_scans.store(n, Ordering::Relaxed);
    }

    /// Reads the topic from its start to `to` (exclusive), else to its end
    /// (the high watermark when the read starts): the scan, and that end.
    pub(super) fn scan(&self, only: Option<&str>, to: Option<i64>) -> Result<(SlotScan, i64), StateError> {
        #[cfg(test)]
        if self.failing_scans.load(Ordering::Relaxed) > 0 {
            self.failing_scans.fetch_sub(1, Ordering::Relaxed);
            return Err(self.kafka_error("a read failed (test)"));
        }
        let consumer: BaseConsumer<StateContext> = self
            .reader
            .create_with_context(self.context.clone())
            .map_err(|e| self.kafka_error(crate::kafka::error_text(&e)))?;
        let mut scan = SlotScan { group: self.group.clone(), ..SlotScan::default() };
        let (low, high) =
            consumer.fetch_watermarks(&self.topic, 0, TIMEOUT).map_err(|e| self.reader_error(&consumer, &e))?;
        let high = to.map_or(high, |to| to.min(high));
        read_range(&consumer, &self.topic, low, high, |m| {
            scan.add(m.key(), m.payload(), m.offset(), only);
            true
        })
        .map_err(|e| self.kafka_error(e))?;
        if scan.foreign > 0 {
            tracing::warn!(
                "state.topic {}: skipped {} records that are no checkpoint records",
                self.topic,
                scan.foreign
            );
        }
        if let Ok(mut known) = self.known.lock() {
            for (p, claims) in &scan.claims {
                for c in claims {
                    note_claim(&mut known, *p, *c);
                }
            }
        }
        Ok((scan, high))
    }
}

/// Reads `topic`'s partition 0 from `from` until `to` (exclusive, a high
/// watermark read before), handing each record to `each` until it says
/// stop. Gives up when the broker sends nothing for [`TIMEOUT`].
pub(super) fn read_range(
    consumer: &BaseConsumer<StateContext>,
    topic: &str,
    from: i64,
    to: i64,
    mut each: impl FnMut(&rdkafka::message::BorrowedMessage<'_>) -> bool,
) -> Result<(), String> {
    if from >= to {
        return Ok(());
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(from)).map_err(|e| e.to_string())?;
    consumer.assign(&tpl).map_err(|e| e.to_string())?;
    let mut last_progress = Instant::now();
    let position = || {
        let tpl = consumer.position().ok()?;
        tpl.find_partition(topic, 0).and_then(|e| e.offset().to_raw())
    };
    loop {
        match consumer.poll(Duration::from_millis(100)) {
            None => {
                if last_progress.elapsed() > TIMEOUT {
                    return Err(format!("nothing read for {} s (at offset {from} of {to})", TIMEOUT.as_secs()));
                }
            }
            // The end as the broker saw it when answering: done once the
            // position is at `to` (the end of an earlier read may still
            // be reported as the read starts).
            Some(Err(KafkaError::PartitionEOF(_))) => {
                if position().is_some_and(|p| p >= to) {
                    return Ok(());
                }
            }
            // A connection dropped or a leader moving: librdkafka
            // reconnects and fetches again by itself; only a read that
            // stays without progress for TIMEOUT fails.
            Some(Err(KafkaError::MessageConsumption(
                RDKafkaErrorCode::AllBrokersDown
                | RDKafkaErrorCode::BrokerTransportFailure
                | RDKafkaErrorCode::RequestTimedOut
                | RDKafkaErrorCode::NotLeaderForPartition
                | RDKafkaErrorCode::LeaderNotAvailable,
            ))) => {
                if last_progress.elapsed() > TIMEOUT {
                    return Err(format!("nothing read for {} s (at offset {from} of {to})", TIMEOUT.as_secs()));
                }
            }
            Some(Err(e)) => return Err(crate::kafka::error_text(&e)),
            Some(Ok(m)) => {
                last_progress = Instant::now();
                if !each(&m) || m.offset() + 1 >= to {
                    return Ok(());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::manifest_value;
    use super::super::testing::{TOPIC, checkpoint, cluster, config};
    use super::*;
    use rdkafka::config::ClientConfig;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    /// Every instance's checkpoint is found; one of other metric settings
    /// or of another group is skipped by load_all and refused as one's own,
    /// as is an instance none of whose slots is whole; records of any other
    /// shape are skipped without a panic.
    #[test]
    fn load_all_skips_what_load_own_refuses() {
        let (_cluster, bootstrap) = cluster();
        for instance in ["a", "b"] {
            let cfg = config(&bootstrap, instance);
            KafkaStore::connect(&cfg, 2048).unwrap().write(&checkpoint(&cfg, 50, 1)).unwrap();
        }
        let mut other_settings = config(&bootstrap, "c");
        other_settings.metrics.cutoffs = vec![1, 2];
        KafkaStore::connect(&other_settings, 2048).unwrap().write(&checkpoint(&other_settings, 5, 1)).unwrap();
        let mut other_group = config(&bootstrap, "d");
        other_group.kafka.group_id = "elsewhere".into();
        KafkaStore::connect(&other_group, 2048).unwrap().write(&checkpoint(&other_group, 5, 1)).unwrap();

        // Garbage: unknown keys, bad values, a manifest without chunks.
        let producer: BaseProducer = ClientConfig::new().set("bootstrap.servers", &bootstrap).create().unwrap();
        let mut rng = rankpulse_testkit::Rng::new(5);
        let mut junk: Vec<(Vec<u8>, Vec<u8>)> = vec![
            (b"e/A".to_vec(), b"RPSTMF01".to_vec()),
            (b"e/A/0".to_vec(), b"RPSTCK01\x01".to_vec()),
            (b"/A".to_vec(), b"x".to_vec()),
            (b"e/C/0".to_vec(), b"x".to_vec()),
            (b"e/A/-1".to_vec(), b"x".to_vec()),
            (b"e/A/0/1".to_vec(), b"x".to_vec()),
            (vec![0xff, 0xfe], b"x".to_vec()),
        ];
        let missing = Manifest {
            group: cfg_group(&bootstrap),
            instance: "e".into(),
            writer: 9,
            seq: 1,
            slot: Slot::A,
            chunks: 3,
            len: 10,
            checksum: 0,
            epochs: BTreeMap::new(),
        };
        junk.push((b"e/A".to_vec(), manifest_value(&missing).unwrap()));
        for _ in 0..200 {
            let key: Vec<u8> = (0..rng.below(12)).map(|_| b"xy/AB01\xff"[rng.below(8) as usize]).collect();
            let mut value: Vec<u8> = if rng.below(2) == 0 { b"RPSTMF01".to_vec() } else { b"RPSTCK01".to_vec() };
            value.extend((0..rng.below(40)).map(|_| rng.below(256) as u8));
            junk.push((key, value));
        }
        for (k, v) in &junk {
            producer.send(BaseRecord::<[u8], [u8]>::to(TOPIC).partition(0).key(k).payload(v)).unwrap();
        }
        producer.flush(Duration::from_secs(10)).unwrap();

        let reader = KafkaStore::connect(&config(&bootstrap, "a"), 2048).unwrap();
        let mut found: Vec<String> = reader.load_all().into_iter().map(|c| c.instance).collect();
        found.sort();
        assert_eq!(found, ["a", "b"]);
        let incompatible = KafkaStore::connect(&config(&bootstrap, "c"), 2048).unwrap().load_own().unwrap_err();
        assert!(matches!(incompatible, StateError::Incompatible { .. }), "{incompatible}");
        let foreign = KafkaStore::connect(&config(&bootstrap, "d"), 2048).unwrap().load_own().unwrap_err();
        assert!(matches!(foreign, StateError::ForeignGroup { .. }), "{foreign}");
        let corrupt = KafkaStore::connect(&config(&bootstrap, "e"), 2048).unwrap().load_own().unwrap_err();
        assert!(
            matches!(&corrupt, StateError::Corrupt { reason, .. } if reason.contains("chunk 0 of 3 is missing")),
            "{corrupt}"
        );
    }

    fn cfg_group(bootstrap: &str) -> String {
        config(bootstrap, "x").kafka.group_id
    }
}
