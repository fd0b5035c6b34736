//! The state topic's records, as `write` writes them and `scan` reads
//! them back: their keys and values, and nothing of when they are written
//! or which one wins.
//! An instance's checkpoint, the same bytes as a checkpoint file (header,
//! postcard payload, checksum), goes in as records keyed (`/` cannot occur
//! in an instance name):
//!
//! - `<instance>/<slot>/<i>`: chunk `i` of the checkpoint, at most
//!   [`MAX_CHUNK_BYTES`] (less if the topic's `max.message.bytes` is
//!   smaller), value `RPSTCK01`, writer id, sequence number, chunk index
//!   (u64, u64, u32 LE), then the bytes;
//! - `<instance>/<slot>`: the slot's manifest, written only after every
//!   chunk is acknowledged, value `RPSTMF02` then postcard [`Manifest`]:
//!   group, instance, writer id, sequence number, slot, chunk count, length
//!   and xxh3 checksum of the whole checkpoint, and each partition shard's
//!   epoch (see `fencing`; an `RPSTMF01` manifest, of before, has none: 0);
//! - `/claim/<partition>`: a claim, value `RPSTCL01` then postcard
//!   [`Claim`]: group, instance, writer id, partition.

use crate::state::StateError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Largest chunk of a checkpoint in one record: well under the 1 MB that
/// brokers and clients accept by default (`max.message.bytes`,
/// `message.max.bytes`), header and batch overhead included.
pub const MAX_CHUNK_BYTES: usize = 512 * 1024;
/// What a record needs besides its value, kept free below the topic's
/// `max.message.bytes` (batch header, record header, key).
pub(super) const RECORD_OVERHEAD: usize = 1024;
const MANIFEST_MAGIC: &[u8; 8] = b"RPSTMF02";
/// Manifests of before fencing: no epochs (read as epoch 0).
const MANIFEST_MAGIC_V1: &[u8; 8] = b"RPSTMF01";
const CHUNK_MAGIC: &[u8; 8] = b"RPSTCK01";
const CLAIM_MAGIC: &[u8; 8] = b"RPSTCL01";
/// Claim keys start with `/`, which no instance name holds.
const CLAIM_PREFIX: &str = "/claim/";
/// Chunk value header: magic, writer, sequence number, index.
pub(super) const CHUNK_HEADER: usize = 8 + 8 + 8 + 4;

/// One of the two places an instance's checkpoint alternates between.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Slot {
    A,
    B,
}

impl Slot {
    pub(super) fn other(self) -> Slot {
        match self {
            Slot::A => Slot::B,
            Slot::B => Slot::A,
        }
    }

    pub(super) fn index(self) -> usize {
        self as usize
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Slot::A => "A",
            Slot::B => "B",
        }
    }

    fn parse(s: &str) -> Option<Slot> {
        match s {
            "A" => Some(Slot::A),
            "B" => Some(Slot::B),
            _ => None,
        }
    }
}

/// What a slot's manifest record says about the checkpoint in its chunks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// The consumer group (`kafka.group_id`) of the writer: another group's
    /// checkpoints are never restored.
    pub group: String,
    pub instance: String,
    /// The writing process's random id.
    pub writer: u64,
    /// The writer's write count; every chunk carries it too.
    pub seq: u64,
    pub slot: Slot,
    pub chunks: u32,
    /// Length and xxh3-64 of the whole checkpoint (header included).
    pub len: u64,
    pub checksum: u64,
    /// Per partition shard of the checkpoint, the epoch under which the
    /// writer holds (or last held) it: the offset of the claim it restored
    /// the partition after; 0 without one.
    pub epochs: BTreeMap<i32, i64>,
}

impl Manifest {
    pub(super) fn epoch(&self, partition: i32) -> i64 {
        self.epochs.get(&partition).copied().unwrap_or(0)
    }
}

/// A manifest as written before fencing (`RPSTMF01`).
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct ManifestV1 {
    group: String,
    instance: String,
    writer: u64,
    seq: u64,
    slot: Slot,
    chunks: u32,
    len: u64,
    checksum: u64,
}

/// A claim record's value: who took a partition over. Its offset in the
/// topic is the epoch of the partition's new owner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claim {
    pub group: String,
    pub instance: String,
    pub writer: u64,
    pub partition: i32,
}

pub(super) fn claim_key(partition: i32) -> String {
    format!("{CLAIM_PREFIX}{partition}")
}

pub(super) fn claim_value(c: &Claim) -> Result<Vec<u8>, StateError> {
    let mut v = CLAIM_MAGIC.to_vec();
    postcard::to_io(c, &mut v).map_err(|e| StateError::Encode(e.to_string()))?;
    Ok(v)
}

pub(super) fn parse_claim(value: &[u8]) -> Option<Claim> {
    postcard::from_bytes(value.strip_prefix(CLAIM_MAGIC)?).ok()
}

pub(super) fn manifest_key(instance: &str, slot: Slot) -> String {
    format!("{instance}/{}", slot.name())
}

pub(super) fn chunk_key(instance: &str, slot: Slot, index: u32) -> String {
    format!("{instance}/{}/{index}", slot.name())
}

/// What a key names: a slot's manifest or one of its chunks, or a
/// partition's claim.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Key<'a> {
    Manifest { instance: &'a str, slot: Slot },
    Chunk { instance: &'a str, slot: Slot, index: u32 },
    Claim { partition: i32 },
}

pub(super) fn parse_key(key: &[u8]) -> Option<Key<'_>> {
    let key = std::str::from_utf8(key).ok()?;
    if let Some(p) = key.strip_prefix(CLAIM_PREFIX) {
        return p.parse().ok().filter(|p| *p >= 0).map(|partition| Key::Claim { partition });
    }
    let mut parts = key.split('/');
    let instance = parts.next().filter(|i| !i.is_empty())?;
    let slot = Slot::parse(parts.next()?)?;
    let key = match parts.next() {
        None => Key::Manifest { instance, slot },
        Some(i) => Key::Chunk { instance, slot, index: i.parse().ok()? },
    };
    parts.next().is_none().then_some(key)
}

pub(super) fn manifest_value(m: &Manifest) -> Result<Vec<u8>, StateError> {
    let mut v = MANIFEST_MAGIC.to_vec();
    postcard::to_io(m, &mut v).map_err(|e| StateError::Encode(e.to_string()))?;
    Ok(v)
}

pub(super) fn parse_manifest(value: &[u8]) -> Option<Manifest> {
    if let Some(body) = value.strip_prefix(MANIFEST_MAGIC) {
        return postcard::from_bytes(body).ok();
    }
    let v1: ManifestV1 = postcard::from_bytes(value.strip_prefix(MANIFEST_MAGIC_V1)?).ok()?;
    Some(Manifest {
        group: v1.group,
        instance: v1.instance,
        writer: v1.writer,
        seq: v1.seq,
        slot: v1.slot,
        chunks: v1.chunks,
        len: v1.len,
        checksum: v1.checksum,
        epochs: BTreeMap::new(),
    })
}

pub(super) fn chunk_value(writer: u64, seq: u64, index: u32, data: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(CHUNK_HEADER + data.len());
    v.extend_from_slice(CHUNK_MAGIC);
    v.extend_from_slice(&writer.to_le_bytes());
    v.extend_from_slice(&seq.to_le_bytes());
    v.extend_from_slice(&index.to_le_bytes());
    v.extend_from_slice(data);
    v
}

/// A chunk record's value: (writer, seq, index, bytes).
pub(super) fn parse_chunk(value: &[u8]) -> Option<(u64, u64, u32, &[u8])> {
    let body = value.strip_prefix(CHUNK_MAGIC)?;
    let writer = u64::from_le_bytes(body.get(0..8)?.try_into().ok()?);
    let seq = u64::from_le_bytes(body.get(8..16)?.try_into().ok()?);
    let index = u32::from_le_bytes(body.get(16..20)?.try_into().ok()?);
    Some((writer, seq, index, body.get(20..)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Manifests written before fencing (`RPSTMF01`) still read, their
    /// shards of epoch 0; an unknown claim value is no claim.
    #[test]
    fn manifests_of_before_fencing_read_with_epoch_zero() {
        let v1 = ManifestV1 {
            group: "g".into(),
            instance: "i".into(),
            writer: 3,
            seq: 4,
            slot: Slot::B,
            chunks: 2,
            len: 5,
            checksum: 6,
        };
        let mut value = MANIFEST_MAGIC_V1.to_vec();
        value.extend(postcard::to_stdvec(&v1).unwrap());
        let m = parse_manifest(&value).unwrap();
        assert_eq!((m.writer, m.seq, m.slot, m.chunks, m.len, m.checksum), (3, 4, Slot::B, 2, 5, 6));
        assert!(m.epochs.is_empty());
        assert_eq!(m.epoch(7), 0);
        assert_eq!(parse_manifest(&manifest_value(&m).unwrap()), Some(m));
        let claim = Claim { group: "g".into(), instance: "i".into(), writer: 1, partition: 2 };
        assert_eq!(parse_claim(&claim_value(&claim).unwrap()), Some(claim));
        assert_eq!(parse_claim(b"RPSTCL01"), None);
        assert_eq!(parse_key(b"/claim/12"), Some(Key::Claim { partition: 12 }));
        for bad in [&b"/claim/"[..], b"/claim/-1", b"/claim/x", b"/claims/1"] {
            assert_eq!(parse_key(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn keys_name_a_slot_and_a_chunk_or_nothing() {
        assert_eq!(parse_key(b"pod-1/A"), Some(Key::Manifest { instance: "pod-1", slot: Slot::A }));
        assert_eq!(parse_key(b"pod-1/B/12"), Some(Key::Chunk { instance: "pod-1", slot: Slot::B, index: 12 }));
        for bad in [&b""[..], b"pod", b"pod/C", b"/A", b"pod/A/x", b"pod/A/1/2", b"pod/A/99999999999"] {
            assert_eq!(parse_key(bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(parse_chunk(&chunk_value(7, 8, 9, b"data")), Some((7, 8, 9, &b"data"[..])));
        assert_eq!(parse_chunk(b"RPSTCK01short"), None);
    }
}
