//! An open list: its key, its working form, and what one event does to it.
//!
//! In the assembly flow: [`Assembler::ingest`](super::Assembler::ingest)
//! finds an event's list by its [`ListKey`], loads it from the store
//! (`store`) into an [`OpenList`] and applies the event to it
//! (`apply_impression`, `apply_judgment`); `finalize` reads the same form
//! when the list closes. Which impression decides a list's time and
//! dimensions is a rank (`impression_rank`), stored in place of its time.

use super::dimensions::DimsId;
use crate::event::{Impression, Judgment};
use crate::interleave::Team;
use crate::metrics::Grade;
use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// Hash key of (session_id, query_id): the high 64 bits hash the session
/// alone ([`session_of`]: the session-clustered statistics need it at
/// finalization), the low 64 bits the pair. Two lists collide only when
/// both halves do: lists of one session on the low half (p ≈ q² / 2^65 for
/// q searches of a session), of different sessions on both (out of reach).
/// The store hashes the low bits.
pub type ListKey = u128;

/// The session part of a list's key.
pub fn session_of(key: ListKey) -> u64 {
    (key >> 64) as u64
}

pub fn list_key(session_id: &str, query_id: Option<&str>) -> ListKey {
    // One buffer on the stack for the common short ids; the separator byte
    // cannot occur in UTF-8, so ("a", "bc") and ("ab", "c") differ.
    let q = query_id.unwrap_or("");
    let len = session_id.len() + 2 + q.len();
    let mut stack = [0u8; 256];
    let mut heap;
    let buf: &mut [u8] = if len <= stack.len() {
        &mut stack[..len]
    } else {
        heap = vec![0u8; len];
        &mut heap
    };
    buf[..session_id.len()].copy_from_slice(session_id.as_bytes());
    buf[session_id.len()] = 0xff;
    buf[session_id.len() + 1] = u8::from(query_id.is_some());
    buf[session_id.len() + 2..].copy_from_slice(q.as_bytes());
    (u128::from(xxh3_64(session_id.as_bytes())) << 64) | u128::from(xxh3_128(buf) as u64)
}

pub(super) fn doc_hash(doc_id: &str) -> u64 {
    xxh3_64(doc_id.as_bytes())
}

/// One shown result of an open list.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ShownDoc {
    pub(super) doc: u64,
    pub(super) position: u32,
    /// NaN when the ranker sent no score.
    pub(super) score: f64,
    /// Team-draft interleaving team: 0 none, 1 A, 2 B (see [`team_code`]).
    pub(super) team: u8,
}

/// A result's team as stored: 0 none, 1 A, 2 B (two bits in a run).
pub(super) fn team_code(team: Option<Team>) -> u8 {
    match team {
        None => 0,
        Some(Team::A) => 1,
        Some(Team::B) => 2,
    }
}

pub(super) fn team_of(code: u8) -> Option<Team> {
    match code {
        1 => Some(Team::A),
        2 => Some(Team::B),
        _ => None,
    }
}

/// A list still collecting events (or, once final, kept for late
/// judgments), in its working form: what the assembler edits and what a
/// checkpoint stores. At rest, between events, it lives compactly in a
/// [`ListStore`](super::store::ListStore).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpenList {
    /// Newest event time of the list: it closes a gap after this.
    pub(super) last_event_ms: i64,
    /// Processing time of the newest arrival, for partitions that go idle.
    pub(super) last_arrival_ms: i64,
    /// Set by the impression that decides the list's time and dimensions:
    /// (its rank, see `impression_rank`; dimensions).
    pub(super) impression: Option<(i64, DimsId)>,
    pub(super) shown: Vec<ShownDoc>,
    /// Highest grade per judged document.
    pub(super) judged: Vec<(u64, Grade)>,
    /// Hashes of the event ids already applied (duplicates count once).
    pub(super) event_ids: Vec<u64>,
    /// Smallest input offset per source (Kafka topic-partition) among this
    /// list's events: offsets at or past it must not be committed while
    /// the list is open (without checkpoints).
    pub(super) offsets: Vec<Source>,
    /// An impression of the list said its top results were shuffled
    /// uniformly (`randomized`): it feeds the position propensities.
    pub(super) randomized: bool,
}

/// Where an event came from: a source id (the daemon numbers its Kafka
/// topic-partitions) and the message's offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub id: u32,
    pub offset: i64,
}

/// Set on the rank of an impression that does not define its list (a UBI
/// `impression` event): event times are below 2^48 (year 9999), so any
/// impression that defines the list ranks before any that does not.
pub(super) const NOT_DEFINING: i64 = 1 << 62;
/// Set on the rank of an impression that defines its list without saying
/// what it showed (a UBI query without hit ids): it ranks after those
/// that do, and a list decided by it that no result reaches is not scored.
pub(super) const RESULTS_UNKNOWN: i64 = 1 << 61;

/// What decides which impression gives a list its time and dimensions:
/// the lowest rank, i.e. the earliest of those that define the list, else
/// the earliest of the others. Stored in place of the impression time;
/// [`impression_time`] reads the time back.
pub(super) fn impression_rank(impression: &Impression) -> i64 {
    impression.timestamp_ms
        | match (impression.defines_list, impression.results_unknown) {
            (false, _) => NOT_DEFINING,
            (true, true) => RESULTS_UNKNOWN,
            (true, false) => 0,
        }
}

/// The impression time of a stored rank.
pub(super) fn impression_time(rank: i64) -> i64 {
    rank & !(NOT_DEFINING | RESULTS_UNKNOWN)
}

/// Returns how many results were dropped because another document holds
/// their position.
pub(super) fn apply_impression(list: &mut OpenList, impression: &Impression, dims: DimsId) -> usize {
    list.randomized |= impression.randomized;
    // The earliest impression of the list that defines it decides its time
    // and dimensions (see `impression_rank`).
    let rank = impression_rank(impression);
    match list.impression {
        Some((t, _)) if t <= rank => {}
        _ => list.impression = Some((rank, dims)),
    }
    // Sized once: growing by doubling would leave up to half of it unused
    // for the list's whole life.
    list.shown.reserve_exact(impression.results.len());
    let mut taken = 0;
    for r in &impression.results {
        let doc = doc_hash(&r.doc_id);
        // Pages and re-deliveries merge by position; the first document
        // seen at a position keeps it.
        if let Some(held) = list.shown.iter().find(|s| s.position == r.position) {
            taken += usize::from(held.doc != doc);
            continue;
        }
        list.shown.push(ShownDoc {
            doc,
            position: r.position,
            score: r.score.unwrap_or(f64::NAN),
            team: team_code(r.team),
        });
    }
    taken
}

pub(super) fn apply_judgment(list: &mut OpenList, judgment: &Judgment) {
    let doc = doc_hash(&judgment.doc_id);
    match list.judged.iter_mut().find(|(d, _)| *d == doc) {
        Some((_, g)) => *g = (*g).max(judgment.grade),
        None => list.judged.push((doc, judgment.grade)),
    }
}
