//! Test support for the assembler's modules: events written as JSON, an
//! assembler fed them on one lane, and its notices kept as owned values
//! ([`Got`]), so that each module's tests read as the events and what
//! came of them.

use super::{Applied, Assembler, AssemblyLimits, FinalList, LatePolicy, Notice, Source};
use crate::event::{DecodeLimits, Event, decode};
use crate::metrics::Grade;
use std::sync::Arc;

impl Assembler {
    /// [`Assembler::ingest`] on the one lane `t`.
    pub(super) fn ingest_t(
        &mut self,
        e: &Event,
        arrival: i64,
        source: Option<Source>,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        self.ingest(e, "t", arrival, source, sink)
    }
}

/// A [`FinalList`] that outlives the assembler's buffers.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Fin {
    pub(super) dims: Arc<[String]>,
    pub(super) impression_ms: i64,
    pub(super) shown: Vec<Grade>,
    pub(super) scores: Option<Vec<f64>>,
    pub(super) judged: Vec<Grade>,
    pub(super) randomized: bool,
}

impl From<FinalList<'_>> for Fin {
    fn from(f: FinalList<'_>) -> Fin {
        Fin {
            dims: f.dims.clone(),
            impression_ms: f.impression_ms,
            shown: f.shown.to_vec(),
            scores: f.scores.map(<[f64]>::to_vec),
            judged: f.judged.to_vec(),
            randomized: f.randomized,
        }
    }
}

/// [`Notice`], owned.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Got {
    Final(Fin),
    Evicted(Fin),
    Orphan,
    Withdrawn(Fin),
    Reinstated(Fin),
    LateAmended,
    LateDropped,
    DimensionOverflow(usize),
    CombinationOverflow,
    PositionTaken,
    DimensionConflict,
    Forgotten,
}

impl From<Notice<'_>> for Got {
    fn from(c: Notice<'_>) -> Got {
        match c {
            Notice::Final(f) => Got::Final(f.into()),
            Notice::Evicted(f) => Got::Evicted(f.into()),
            Notice::Orphan => Got::Orphan,
            Notice::Withdrawn(f) => Got::Withdrawn(f.into()),
            Notice::Reinstated(f) => Got::Reinstated(f.into()),
            Notice::LateAmended => Got::LateAmended,
            Notice::LateDropped => Got::LateDropped,
            Notice::DimensionOverflow(label) => Got::DimensionOverflow(label),
            Notice::CombinationOverflow => Got::CombinationOverflow,
            Notice::PositionTaken => Got::PositionTaken,
            Notice::DimensionConflict => Got::DimensionConflict,
            Notice::Forgotten => Got::Forgotten,
        }
    }
}

/// Decodes an event written as JSON.
pub(super) fn ev(json: &str) -> Event<'_> {
    decode(json.as_bytes(), &DecodeLimits::default()).unwrap()
}

/// A native impression of list (`session`, q) showing `docs` (document,
/// position), under ranker a.
pub(super) fn imp(id: &str, session: &str, ts: i64, docs: &[(&str, u32)]) -> String {
    let results: Vec<String> = docs
        .iter()
        .map(|(d, p)| format!(r#"{{"doc_id":"{d}","position":{p},"score":{}}}"#, 10u32.wrapping_sub(*p)))
        .collect();
    format!(
        r#"{{"type":"impression","event_id":"{id}","session_id":"{session}","query_id":"q","timestamp":{ts},"results":[{}],"dimensions":{{"ranker":"a"}}}}"#,
        results.join(",")
    )
}

/// A UBI `impression` event of list (s, q): `doc` shown at 0-based `ordinal`.
pub(super) fn shown(id: &str, ms: i64, doc: &str, ordinal: u32) -> String {
    format!(
        r#"{{"action_name":"impression","client_id":"s","query_id":"q","timestamp":{ms},"message":"{id}","event_attributes":{{"object":{{"object_id":"{doc}"}},"position":{{"ordinal":{ordinal}}}}}}}"#
    )
}

/// A judgment of list (`session`, q).
pub(super) fn judg(id: &str, session: &str, ts: i64, doc: &str, grade: i32) -> String {
    format!(
        r#"{{"type":"judgment","event_id":"{id}","session_id":"{session}","query_id":"q","doc_id":"{doc}","grade":{grade},"timestamp":{ts}}}"#
    )
}

/// Feeds `events` in order, then finalizes every list: all that came of them.
pub(super) fn collect(asm: &mut Assembler, events: &[String]) -> Vec<Got> {
    let mut out = Vec::new();
    for e in events {
        asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
    }
    asm.finalize_all(&mut |c| out.push(c.into()));
    out
}

/// The list a notice says became final (in time, or evicted).
pub(super) fn final_of(c: &Got) -> Option<&Fin> {
    match c {
        Got::Final(f) | Got::Evicted(f) => Some(f),
        _ => None,
    }
}

/// A 10 s gap, 1,000 open lists, a 60 s late horizon under `policy`, and
/// no bound per list.
pub(super) fn limits(policy: LatePolicy) -> AssemblyLimits {
    AssemblyLimits {
        gap_ms: 10_000,
        max_open_lists: 1_000,
        late_policy: policy,
        late_horizon_ms: 60_000,
        max_events_per_list: usize::MAX,
        max_results_per_list: usize::MAX,
    }
}
