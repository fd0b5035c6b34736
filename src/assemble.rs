//! Assembly: typed events → open lists → finalized lists.
//!
//! Second stage of the stream. A list is keyed by (session_id, query_id);
//! its impressions (pages, re-deliveries) merge by position, its judgments
//! keep the highest grade per document, and an event id seen twice counts
//! once. Judgments may arrive before their impression and wait for it.
//!
//! A list is final when no event of it arrived for `session.gap` in event
//! time: when the watermark (newest event time seen) passes its last event
//! plus the gap, when an event of the same key arrives more than a gap after
//! the list's last event (a new list starts), or, for idle partitions, when
//! no event of it arrived for a gap of processing time. Everything open is
//! finalized at shutdown and at the end of a replay.
//!
//! Open lists are compact: keys and document ids are 128- and 64-bit
//! hashes, never copies of the strings, and dimension values are interned.

use crate::event::{Event, Impression, Judgment};
use crate::metrics::Grade;
use rustc_hash::FxHashMap;
use std::sync::Arc;
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

/// Interned dimension values of a list: index into [`Dimensions::values`].
pub type DimsId = u32;

/// Value used for a configured dimension label an impression did not send.
pub const MISSING_DIMENSION: &str = "unknown";

/// Interns the tuples of configured dimension values seen on impressions.
/// A tuple already seen is found by hash and compared in place: no
/// allocation per impression.
#[derive(Debug, Default)]
pub struct Dimensions {
    pub labels: Vec<String>,
    by_hash: FxHashMap<u64, Vec<DimsId>>,
    pub values: Vec<Arc<[String]>>,
}

impl Dimensions {
    pub fn new(labels: Vec<String>) -> Self {
        Dimensions { labels, by_hash: FxHashMap::default(), values: Vec::new() }
    }

    fn value<'e>(label: &str, impression: &'e Impression) -> &'e str {
        impression.dimensions.get(label).map_or(MISSING_DIMENSION, |v| v.as_ref())
    }

    /// The id of an impression's configured dimension values.
    pub fn intern(&mut self, impression: &Impression) -> DimsId {
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for label in &self.labels {
            hasher.update(Self::value(label, impression).as_bytes());
            hasher.update(&[0xff]);
        }
        let hash = hasher.digest();
        if let Some(ids) = self.by_hash.get(&hash) {
            for &id in ids {
                let stored = &self.values[id as usize];
                if self.labels.iter().zip(stored.iter()).all(|(l, v)| Self::value(l, impression) == v) {
                    return id;
                }
            }
        }
        let tuple: Arc<[String]> = self.labels.iter().map(|l| Self::value(l, impression).to_string()).collect();
        let id = self.values.len() as DimsId;
        self.values.push(tuple);
        self.by_hash.entry(hash).or_default().push(id);
        id
    }
}

/// Hash key of (session_id, query_id): 128 bits, so collisions between the
/// lists of a day are out of reach (p ≈ n² / 2^129).
pub type ListKey = u128;

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
    xxh3_128(buf)
}

fn doc_hash(doc_id: &str) -> u64 {
    xxh3_64(doc_id.as_bytes())
}

/// One shown result of an open list.
#[derive(Debug, Clone, Copy)]
struct ShownDoc {
    doc: u64,
    position: u32,
    /// NaN when the ranker sent no score.
    score: f64,
}

/// A list still collecting events.
#[derive(Debug)]
struct OpenList {
    /// Newest event time of the list: it closes a gap after this.
    last_event_ms: i64,
    /// Processing time of the newest arrival, for partitions that go idle.
    last_arrival_ms: i64,
    /// Set by the first impression: (impression time, dimensions).
    impression: Option<(i64, DimsId)>,
    shown: Vec<ShownDoc>,
    /// Highest grade per judged document.
    judged: Vec<(u64, Grade)>,
    /// Hashes of the event ids already applied (duplicates count once).
    event_ids: Vec<u64>,
    /// Smallest input offset per source (Kafka topic-partition) among this
    /// list's events: offsets at or past it must not be committed while
    /// the list is open.
    offsets: Vec<Source>,
}

/// Where an event came from: a source id (the daemon numbers its Kafka
/// topic-partitions) and the message's offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Source {
    pub id: u32,
    pub offset: i64,
}

/// A list that will change no more, ready for the metric engine.
#[derive(Debug, Clone, PartialEq)]
pub struct FinalList {
    /// The list's configured dimension values, in `dimensions.labels` order.
    pub dims: Arc<[String]>,
    /// Impression event time (ms): decides the time bucket.
    pub impression_ms: i64,
    /// Grades of the shown results in position order (unjudged = 0).
    pub shown: Vec<Grade>,
    /// Model scores aligned with `shown`, when every result has one.
    pub scores: Option<Vec<f64>>,
    /// Grades of every judged document, shown or not.
    pub judged: Vec<Grade>,
}

/// Why a list ended (for counters and tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Scored.
    Final,
    /// Only judgments arrived: nothing was shown, nothing to score.
    Orphan,
}

/// What the assembler reports about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Applied,
    /// Same event id already applied to this list.
    Duplicate,
}

/// The assembly stage for one shard of the key space.
#[derive(Debug)]
pub struct Assembler {
    gap_ms: i64,
    pub dimensions: Dimensions,
    open_lists: FxHashMap<ListKey, OpenList>,
    /// Newest event time seen by this shard.
    watermark_ms: i64,
}

impl Assembler {
    pub fn new(gap_ms: i64, dimension_labels: Vec<String>) -> Self {
        Assembler {
            gap_ms,
            dimensions: Dimensions::new(dimension_labels),
            open_lists: FxHashMap::default(),
            watermark_ms: i64::MIN,
        }
    }

    pub fn open_lists(&self) -> usize {
        self.open_lists.len()
    }

    pub fn watermark_ms(&self) -> i64 {
        self.watermark_ms
    }

    /// Applies one event. Lists that it closes (same key, more than a gap
    /// later) go to `sink` first.
    pub fn ingest(
        &mut self,
        event: &Event,
        arrival_ms: i64,
        source: Option<Source>,
        sink: &mut impl FnMut(Outcome, Option<FinalList>),
    ) -> Applied {
        let (session, query, ts, event_id) = match event {
            Event::Impression(i) => (&i.session_id, &i.query_id, i.timestamp_ms, &i.event_id),
            Event::Judgment(j) => (&j.session_id, &j.query_id, j.timestamp_ms, &j.event_id),
        };
        let key = list_key(session, query.as_deref());
        let event_hash = xxh3_64(event_id.as_bytes());
        self.watermark_ms = self.watermark_ms.max(ts);
        if let Some(list) = self.open_lists.get(&key)
            && ts > list.last_event_ms.saturating_add(self.gap_ms)
            && let Some(old) = self.open_lists.remove(&key)
        {
            self.emit(old, sink);
        }
        let list = self.open_lists.entry(key).or_insert_with(|| OpenList {
            last_event_ms: ts,
            last_arrival_ms: arrival_ms,
            impression: None,
            shown: Vec::new(),
            judged: Vec::new(),
            event_ids: Vec::new(),
            offsets: Vec::new(),
        });
        if list.event_ids.contains(&event_hash) {
            return Applied::Duplicate;
        }
        if let Some(src) = source {
            match list.offsets.iter_mut().find(|o| o.id == src.id) {
                Some(o) => o.offset = o.offset.min(src.offset),
                None => list.offsets.push(src),
            }
        }
        list.event_ids.push(event_hash);
        list.last_event_ms = list.last_event_ms.max(ts);
        list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
        match event {
            Event::Impression(i) => {
                let dims = self.dimensions.intern(i);
                apply_impression(list, i, dims);
            }
            Event::Judgment(j) => apply_judgment(list, j),
        }
        Applied::Applied
    }

    /// Finalizes lists whose last event is a gap older than the watermark
    /// (event time), or, when `now_ms` is given, whose last arrival is a gap
    /// older than that processing time (idle partitions).
    pub fn finalize_expired(&mut self, now_ms: Option<i64>, sink: &mut impl FnMut(Outcome, Option<FinalList>)) {
        let gap = self.gap_ms;
        let watermark = self.watermark_ms;
        let expired: Vec<ListKey> = self
            .open_lists
            .iter()
            .filter(|(_, l)| {
                l.last_event_ms.saturating_add(gap) <= watermark
                    || now_ms.is_some_and(|now| l.last_arrival_ms.saturating_add(gap) <= now)
            })
            .map(|(k, _)| *k)
            .collect();
        for key in expired {
            if let Some(list) = self.open_lists.remove(&key) {
                self.emit(list, sink);
            }
        }
    }

    /// For each source, the smallest offset still held by an open list:
    /// the at-least-once commit point is the lesser of this and the next
    /// offset to consume.
    pub fn min_open_offsets(&self) -> FxHashMap<u32, i64> {
        let mut min: FxHashMap<u32, i64> = FxHashMap::default();
        for list in self.open_lists.values() {
            for o in &list.offsets {
                let m = min.entry(o.id).or_insert(o.offset);
                *m = (*m).min(o.offset);
            }
        }
        min
    }

    /// Finalizes every open list (shutdown, end of replay).
    pub fn finalize_all(&mut self, sink: &mut impl FnMut(Outcome, Option<FinalList>)) {
        let lists: Vec<OpenList> = self.open_lists.drain().map(|(_, l)| l).collect();
        for list in lists {
            self.emit(list, sink);
        }
    }

    fn emit(&self, list: OpenList, sink: &mut impl FnMut(Outcome, Option<FinalList>)) {
        match finalize(list, &self.dimensions) {
            Some(f) => sink(Outcome::Final, Some(f)),
            None => sink(Outcome::Orphan, None),
        }
    }
}

fn apply_impression(list: &mut OpenList, impression: &Impression, dims: DimsId) {
    // The earliest impression of the list decides its time and dimensions.
    match list.impression {
        Some((t, _)) if t <= impression.timestamp_ms => {}
        _ => list.impression = Some((impression.timestamp_ms, dims)),
    }
    for r in &impression.results {
        // Pages and re-deliveries merge by position; the first document
        // seen at a position keeps it.
        if list.shown.iter().any(|s| s.position == r.position) {
            continue;
        }
        list.shown.push(ShownDoc {
            doc: doc_hash(&r.doc_id),
            position: r.position,
            score: r.score.unwrap_or(f64::NAN),
        });
    }
}

fn apply_judgment(list: &mut OpenList, judgment: &Judgment) {
    let doc = doc_hash(&judgment.doc_id);
    match list.judged.iter_mut().find(|(d, _)| *d == doc) {
        Some((_, g)) => *g = (*g).max(judgment.grade),
        None => list.judged.push((doc, judgment.grade)),
    }
}

fn finalize(mut list: OpenList, dimensions: &Dimensions) -> Option<FinalList> {
    let (impression_ms, dims) = list.impression?;
    let dims = dimensions.values.get(dims as usize)?.clone();
    list.shown.sort_unstable_by_key(|s| s.position);
    // A document shown at two positions counts at its first.
    let mut seen: Vec<u64> = Vec::with_capacity(list.shown.len());
    list.shown.retain(|s| {
        if seen.contains(&s.doc) {
            false
        } else {
            seen.push(s.doc);
            true
        }
    });
    let grade_of = |doc: u64| list.judged.iter().find(|(d, _)| *d == doc).map_or(0, |(_, g)| *g);
    let shown: Vec<Grade> = list.shown.iter().map(|s| grade_of(s.doc)).collect();
    let scores = list.shown.iter().all(|s| !s.score.is_nan()).then(|| list.shown.iter().map(|s| s.score).collect());
    let judged = list.judged.iter().map(|(_, g)| *g).collect();
    Some(FinalList { dims, impression_ms, shown, scores, judged })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{DecodeLimits, decode};

    fn ev(json: &str) -> Event<'_> {
        decode(json.as_bytes(), &DecodeLimits::from_config(&crate::config::Config::default())).unwrap()
    }

    fn imp(id: &str, session: &str, ts: i64, docs: &[(&str, u32)]) -> String {
        let results: Vec<String> =
            docs.iter().map(|(d, p)| format!(r#"{{"doc_id":"{d}","position":{p},"score":{}}}"#, 10 - p)).collect();
        format!(
            r#"{{"type":"impression","event_id":"{id}","session_id":"{session}","query_id":"q","timestamp":{ts},"results":[{}],"dimensions":{{"ranker":"a"}}}}"#,
            results.join(",")
        )
    }

    fn judg(id: &str, session: &str, ts: i64, doc: &str, grade: i32) -> String {
        format!(
            r#"{{"type":"judgment","event_id":"{id}","session_id":"{session}","query_id":"q","doc_id":"{doc}","grade":{grade},"timestamp":{ts}}}"#
        )
    }

    fn collect(asm: &mut Assembler, events: &[String]) -> Vec<(Outcome, Option<FinalList>)> {
        let mut out = Vec::new();
        for e in events {
            asm.ingest(&ev(e), 0, None, &mut |o, f| out.push((o, f)));
        }
        asm.finalize_all(&mut |o, f| out.push((o, f)));
        out
    }

    #[test]
    fn judgments_before_impression_pages_merge_duplicates_once() {
        let mut asm = Assembler::new(30_000, vec!["ranker".into(), "market".into()]);
        let events = vec![
            judg("j1", "s", 1_000, "d2", 1),
            imp("i2", "s", 2_000, &[("d3", 3)]),
            imp("i1", "s", 1_500, &[("d1", 1), ("d2", 2)]),
            judg("j2", "s", 3_000, "d2", 3),
            judg("j2", "s", 3_000, "d2", 3),
            judg("j3", "s", 3_100, "d1", 0),
            judg("j4", "s", 3_200, "d9", 2),
        ];
        let out = collect(&mut asm, &events);
        assert_eq!(out.len(), 1);
        let f = out[0].1.clone().unwrap();
        assert_eq!(f.impression_ms, 1_500);
        assert_eq!(f.shown, [0, 3, 0]);
        assert_eq!(f.scores, Some(vec![9.0, 8.0, 7.0]));
        let mut judged = f.judged.clone();
        judged.sort();
        assert_eq!(judged, [0, 2, 3]);
        assert_eq!(&*f.dims, ["a", MISSING_DIMENSION]);
    }

    #[test]
    fn a_gap_splits_lists_and_orphans_are_reported() {
        let mut asm = Assembler::new(10_000, vec!["ranker".into()]);
        let events = vec![
            imp("i1", "s", 0, &[("d1", 1)]),
            judg("j1", "s", 5_000, "d1", 1),
            // 10.001 s after the last event: a new list.
            imp("i2", "s", 15_001, &[("d1", 1)]),
            judg("j9", "other", 0, "d1", 1),
        ];
        let out = collect(&mut asm, &events);
        let finals: Vec<&FinalList> = out.iter().filter_map(|(_, f)| f.as_ref()).collect();
        assert_eq!(finals.len(), 2);
        assert_eq!(finals[0].shown, [1]);
        assert_eq!(out.iter().filter(|(o, _)| *o == Outcome::Orphan).count(), 1);
    }

    #[test]
    fn expiry_by_watermark_and_by_processing_time() {
        let mut asm = Assembler::new(10_000, vec![]);
        let mut out = Vec::new();
        asm.ingest(&ev(&imp("i1", "a", 0, &[("d", 1)])), 100, None, &mut |o, f| out.push((o, f)));
        asm.ingest(&ev(&imp("i2", "b", 9_999, &[("d", 1)])), 100, None, &mut |o, f| out.push((o, f)));
        asm.finalize_expired(None, &mut |o, f| out.push((o, f)));
        assert_eq!(out.len(), 0);
        asm.ingest(&ev(&imp("i3", "c", 10_000, &[("d", 1)])), 100, Some(Source { id: 7, offset: 42 }), &mut |o, f| {
            out.push((o, f))
        });
        asm.finalize_expired(None, &mut |o, f| out.push((o, f)));
        assert_eq!(out.len(), 1, "list a closed by the watermark");
        assert_eq!(asm.open_lists(), 2);
        assert_eq!(asm.min_open_offsets().get(&7), Some(&42));
        asm.finalize_expired(Some(10_100), &mut |o, f| out.push((o, f)));
        assert_eq!(out.len(), 3, "idle: processing time closes the rest");
    }
}
