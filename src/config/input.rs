//! The sections of decoding, the stage after the Kafka message: `[input]`
//! (what a message, an impression and a list may hold before they are
//! rejected), `[ubi]` (how OpenSearch UBI maps to rankpulse's events) and
//! `[mapped]` (the paths of the `mapped` format).

use super::values::span;
use super::{Moment, Paths, Span};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The least `input.max_results_per_list`: a list is only counted once
/// it outgrows its compact form (256 words), which holds fewer results.
pub const MIN_RESULTS_PER_LIST: usize = 256;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputConfig {
    /// Larger messages are rejected (`too_large`) without being parsed.
    pub max_message_bytes: usize,
    /// Impressions with more results are rejected (`too_many_results`).
    pub max_results: usize,
    /// Events stamped more than this ahead of their reference time (the
    /// Kafka message timestamp, or the wall clock if that is earlier or
    /// absent) are rejected (`future_timestamp`): one producer with a
    /// broken clock must not move a watermark or create a time bucket.
    pub max_future_skew: Span,
    /// Events stamped earlier are rejected (`past_timestamp`): an epoch in
    /// seconds, read as milliseconds, falls in January 1970 and would
    /// otherwise stretch every session gap and window a thousandfold.
    pub min_timestamp: Moment,
    /// Events one list takes; further events of it are rejected
    /// (`list_too_large`), so one hot key cannot hold unbounded memory.
    pub max_events_per_list: usize,
    /// Results one list holds: an impression finding its list holding
    /// this many is rejected (`list_too_large`). Without it one list could
    /// hold `max_events_per_list × max_results` results (2,000,000, about
    /// 270 MB); at 10,000 a list holds at most 10,199, about 1.4 MB.
    pub max_results_per_list: usize,
}

impl Default for InputConfig {
    fn default() -> Self {
        InputConfig {
            max_message_bytes: 1 << 20,
            max_results: 200,
            max_future_skew: span("5m"),
            min_timestamp: Moment {
                text: "2000-01-01T00:00:00Z".into(),
                ms: rankpulse_core::pipeline::MIN_TIMESTAMP_MS,
            },
            max_events_per_list: 10_000,
            max_results_per_list: 10_000,
        }
    }
}

/// How OpenSearch UBI input maps to rankpulse's events (docs/formats.md).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UbiConfig {
    /// `event_attributes.position.ordinal` of the first result: 0
    /// (OpenSearch's generator and click models) or 1 (the spec's examples).
    pub ordinal_base: u32,
    /// Dimension label → UBI path (`application`, `query_attributes.<name>`,
    /// `event_attributes.<name>`, nested members one per dot at any depth:
    /// `query_attributes.experiment.arm`). A label of `dimensions.labels`
    /// not listed is read from `query_attributes.<label>`.
    pub dimensions: BTreeMap<String, String>,
}

/// How a `mapped` topic's JSON maps to rankpulse's events
/// (docs/formats.md): each key a path (dotted, or a JSON pointer starting
/// with `/`) or a list of alternatives. Parsed and checked at load
/// ([`rankpulse_core::event::mapped::Mapping`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MappedConfig {
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub session: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub query: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub time: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub id: Paths,
    /// Where this holds an array the message is an impression; otherwise a judgment.
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub results: Paths,
    /// Inside a result; `""` is the result itself.
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub result_doc: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub result_position: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub result_score: Paths,
    /// `result_position` of the first result: 1 or 0.
    pub position_base: u32,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub judged_doc: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub grade: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub action: Paths,
    /// Label of `dimensions.labels` → its paths; labels not listed are `unknown`.
    pub dimensions: BTreeMap<String, Paths>,
}

impl Default for MappedConfig {
    fn default() -> Self {
        MappedConfig {
            session: Paths::default(),
            query: Paths::default(),
            time: Paths::default(),
            id: Paths::default(),
            results: Paths::default(),
            result_doc: Paths::default(),
            result_position: Paths::default(),
            result_score: Paths::default(),
            position_base: 1,
            judged_doc: Paths::default(),
            grade: Paths::default(),
            action: Paths::default(),
            dimensions: BTreeMap::new(),
        }
    }
}

impl MappedConfig {
    /// The core's form of these settings.
    pub fn spec(&self) -> rankpulse_core::event::mapped::MappingSpec {
        rankpulse_core::event::mapped::MappingSpec {
            session: self.session.0.clone(),
            query: self.query.0.clone(),
            time: self.time.0.clone(),
            id: self.id.0.clone(),
            results: self.results.0.clone(),
            result_doc: self.result_doc.0.clone(),
            result_position: self.result_position.0.clone(),
            result_score: self.result_score.0.clone(),
            position_base: self.position_base,
            judged_doc: self.judged_doc.0.clone(),
            grade: self.grade.0.clone(),
            action: self.action.0.clone(),
            dimensions: self.dimensions.iter().map(|(l, p)| (l.clone(), p.0.clone())).collect(),
        }
    }
}
