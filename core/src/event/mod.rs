//! Event schema and decoding: Kafka message bytes → typed [`Event`].
//!
//! First stage of the stream (Kafka message → **decode** → assemble →
//! finalize → metric engine → accumulators → publish). Decoding borrows
//! strings from the message where JSON allows it (no escapes), and every
//! way a message can be wrong maps to one [`RejectReason`], a small fixed
//! set that becomes the `reason` label of `rankpulse_events_rejected_total`.
//! A rejected message is counted, never fatal, and never changes a metric.
//! The schema is documented in `docs/event.schema.json`.
//!
//! This module owns what every format decodes into (the events, the
//! reasons, the [`DecodeLimits`]) and the choice of decoder by [`Format`].
//! Each wire format has its own decoder: rankpulse's schema in `native`,
//! the UBI formats in [`ubi`], the declarative mapping of any other JSON
//! schema in [`mapped`]; what they share (field values, serde visitors,
//! member dispatch, the reason of a failed read, the fast readers' cursor)
//! is one toolkit, `toolkit`.

use crate::interleave::Team;
use crate::metrics::Grade;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// Dimension labels a configuration may declare. Defined by the events,
/// which carry at most this many values each (the decoders gather them on
/// the stack), and read by the assembler and the configuration: each
/// label also multiplies the series count.
pub const MAX_DIMENSION_LABELS: usize = 16;

pub mod mapped;
mod native;
mod toolkit;
pub mod ubi;

pub use native::{decode, decode_by_serde};
pub use toolkit::rfc3339_ms;

/// What an accepted event was: the `type` label of the event counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum EventKind {
    Impression,
    Judgment,
    Ignored,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

serde_by_name!(EventKind, RejectReason, IgnoreReason);

/// Why a message was rejected. The names are label values: stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum RejectReason {
    TooLarge,
    InvalidUtf8,
    InvalidJson,
    UnknownType,
    MissingField,
    WrongType,
    InvalidTimestamp,
    InvalidPosition,
    GradeOutOfRange,
    UnknownAction,
    NonFinite,
    TooManyResults,
    /// A result's `team` is neither "A" nor "B".
    InvalidTeam,
    /// Event time too far ahead of the message's reference time
    /// (`input.max_future_skew`): decided by the pipeline, not the decoder.
    FutureTimestamp,
    /// The event's list already holds `input.max_events_per_list` events:
    /// decided by the assembler.
    ListTooLarge,
    /// Event time before `input.min_timestamp`: an epoch in seconds (read
    /// as milliseconds it falls in January 1970) or a clock reset to its
    /// epoch. Decided by the pipeline, not the decoder.
    PastTimestamp,
}

impl RejectReason {
    pub const ALL: &'static [RejectReason] = <RejectReason as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Why a message that is valid but says nothing rankpulse scores was
/// skipped: counted (`rankpulse_events_ignored_total{reason}`), never
/// rejected. The names are label values: stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, strum::IntoStaticStr, strum::VariantArray)]
#[strum(serialize_all = "snake_case")]
pub enum IgnoreReason {
    /// A UBI event whose `action_name` is neither `impression` nor one of
    /// `[judgments.actions]` (`search`, `item_click`, `page_exit`, …).
    UnmappedAction,
    /// A `_bulk` action line (`{"index":{…}}`) in a replayed export.
    BulkActionLine,
    /// The partial document after a `_bulk` `update` action line: there is
    /// no document to apply it to, so it is no event.
    BulkUpdate,
}

impl IgnoreReason {
    pub const ALL: &'static [IgnoreReason] = <IgnoreReason as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl fmt::Display for IgnoreReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One shown result of an impression.
#[derive(Debug, Clone, PartialEq)]
pub struct Shown<'a> {
    pub doc_id: Cow<'a, str>,
    /// 1-based display position.
    pub position: u32,
    /// The ranker's score, when it sent one (AUC uses it).
    pub score: Option<f64>,
    /// In a team-draft interleaved list, the ranker that contributed the
    /// result (`"team": "A"` or `"B"`; A is the candidate).
    pub team: Option<Team>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Impression<'a> {
    pub event_id: Cow<'a, str>,
    pub session_id: Cow<'a, str>,
    pub query_id: Option<Cow<'a, str>>,
    /// Event time, epoch milliseconds.
    pub timestamp_ms: i64,
    pub results: Vec<Shown<'a>>,
    /// All dimensions sent; the configured labels are picked later.
    pub dimensions: BTreeMap<Cow<'a, str>, Cow<'a, str>>,
    /// Whether this impression speaks for the whole list (a native
    /// impression, a UBI query): its time and dimensions are the list's.
    /// A UBI `impression` event (one shown result) only adds its result;
    /// its time and dimensions are the list's only while no impression
    /// that defines the list has arrived, whatever the order of arrival.
    pub defines_list: bool,
    /// The search engine shuffled the top results uniformly at random
    /// (`"randomized": true`): the list estimates position propensities.
    pub randomized: bool,
    /// What was shown is not known from this impression: a UBI query
    /// without `query_response_hit_ids` (its `impression` events may say).
    /// A list it defines that no result reaches is not scored as one that
    /// showed nothing; it is counted (`no_results_known`). A native
    /// impression with `"results": []` did show nothing.
    pub results_unknown: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Judgment<'a> {
    pub event_id: Cow<'a, str>,
    pub session_id: Cow<'a, str>,
    pub query_id: Option<Cow<'a, str>>,
    pub doc_id: Cow<'a, str>,
    pub grade: Grade,
    pub timestamp_ms: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Event<'a> {
    Impression(Impression<'a>),
    Judgment(Judgment<'a>),
    /// Valid, but nothing rankpulse scores (see [`IgnoreReason`]): counted,
    /// applied to no list.
    Ignored(IgnoreReason),
}

impl Event<'_> {
    /// Event time, epoch ms (0 for an ignored event: it has none that matters).
    pub fn timestamp_ms(&self) -> i64 {
        match self {
            Event::Impression(i) => i.timestamp_ms,
            Event::Judgment(j) => j.timestamp_ms,
            Event::Ignored(_) => 0,
        }
    }

    pub fn kind(&self) -> EventKind {
        match self {
            Event::Impression(_) => EventKind::Impression,
            Event::Judgment(_) => EventKind::Judgment,
            Event::Ignored(_) => EventKind::Ignored,
        }
    }
}

/// The wire format of a consumed topic (`[kafka.formats]`) or of a
/// replayed file (`replay --format`). Resolved once per topic, not per
/// message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Format {
    /// rankpulse's own events (`docs/event.schema.json`).
    #[default]
    Rankpulse,
    /// OpenSearch UBI 1.3 queries (`query.request.schema.json`).
    UbiQueries,
    /// OpenSearch UBI 1.3 events (`event.schema.json`).
    UbiEvents,
    /// Either, told apart per message: an event has an `action_name`.
    Ubi,
    /// Any JSON schema, read through the paths of `[mapped]`
    /// ([`DecodeLimits::mapped`]).
    Mapped,
}

impl Format {
    /// The configuration's names of the formats.
    pub const NAMES: [(&'static str, Format); 5] = [
        ("rankpulse", Format::Rankpulse),
        ("ubi_queries", Format::UbiQueries),
        ("ubi_events", Format::UbiEvents),
        ("ubi", Format::Ubi),
        ("mapped", Format::Mapped),
    ];

    /// Whether this is one of the OpenSearch UBI formats (whose files may
    /// be `_bulk` exports).
    pub fn is_ubi(self) -> bool {
        matches!(self, Format::UbiQueries | Format::UbiEvents | Format::Ubi)
    }

    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(_, f)| *f == self).map_or("rankpulse", |(n, _)| n)
    }

    pub fn parse(name: &str) -> Option<Format> {
        Self::NAMES.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
    }
}

/// What decoding needs from the configuration (`input.*`,
/// `metrics.max_grade`, `judgments.actions`); the defaults are the
/// configuration's.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeLimits {
    pub max_message_bytes: usize,
    pub max_results: usize,
    pub max_grade: Grade,
    /// `action` name → grade.
    pub actions: BTreeMap<String, Grade>,
    /// How UBI input maps to events (`[ubi]`).
    pub ubi: ubi::UbiSettings,
    /// How `mapped` input maps to events (`[mapped]`); none when no topic
    /// is mapped.
    pub mapped: Option<mapped::Mapping>,
}

impl Default for DecodeLimits {
    fn default() -> Self {
        let actions = [("click", 1), ("add_to_cart", 2), ("purchase", 3)];
        DecodeLimits {
            max_message_bytes: 1 << 20,
            max_results: 200,
            max_grade: crate::metrics::Conventions::default().max_grade,
            actions: actions.into_iter().map(|(a, g)| (a.to_string(), g)).collect(),
            ubi: ubi::UbiSettings::default(),
            mapped: None,
        }
    }
}

/// Decodes one message of `format`. Never panics on any input.
pub fn decode_as<'a>(format: Format, bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    match format {
        Format::Rankpulse => decode(bytes, limits),
        Format::UbiQueries | Format::UbiEvents | Format::Ubi => ubi::decode(format, bytes, limits),
        Format::Mapped => mapped::decode(bytes, limits),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Checkpoints hold these as map keys by name: a name survives a
    /// variant added or reordered, and a name no variant has is refused.
    #[test]
    fn reasons_and_kinds_serialize_by_name() {
        assert_eq!(serde_json::to_string(&RejectReason::InvalidUtf8).unwrap(), r#""invalid_utf8""#);
        assert_eq!(serde_json::to_string(&IgnoreReason::BulkActionLine).unwrap(), r#""bulk_action_line""#);
        assert_eq!(serde_json::from_str::<EventKind>(r#""judgment""#).unwrap(), EventKind::Judgment);
        for &r in RejectReason::ALL {
            let text = serde_json::to_string(&r).unwrap();
            assert_eq!(serde_json::from_str::<RejectReason>(&text).unwrap(), r);
        }
        let e = serde_json::from_str::<RejectReason>(r#""too_late""#).unwrap_err().to_string();
        assert!(e.contains(r#"unknown RejectReason "too_late""#), "{e}");
    }

    /// The `reason` label values are a public contract: the list in
    /// docs/formats.md, derived here from the variant names.
    #[test]
    fn reject_reason_labels_are_the_documented_ones() {
        let formats = include_str!("../../../docs/formats.md");
        let documented: Vec<&str> = formats
            .split("The reasons, in every format:")
            .nth(1)
            .and_then(|s| s.split("\n\n").next())
            .expect("docs/formats.md lists the reject reasons")
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|w| !w.contains('.'))
            .collect();
        let mut ours: Vec<&str> = RejectReason::ALL.iter().map(|r| r.as_str()).collect();
        let mut theirs = documented.clone();
        ours.sort_unstable();
        theirs.sort_unstable();
        assert_eq!(ours, theirs, "docs/formats.md lists {documented:?}");
        assert_eq!(RejectReason::InvalidUtf8.to_string(), "invalid_utf8");
        assert!(RejectReason::ALL.iter().enumerate().all(|(i, r)| r.index() == i));
    }
}
