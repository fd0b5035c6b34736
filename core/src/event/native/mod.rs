//! rankpulse's own events (format `rankpulse`, `docs/event.schema.json`):
//! message bytes → typed [`Event`].
//!
//! The decode stage for the native schema (Kafka message → **decode** →
//! assemble → finalize → …). The usual message is read by [`scan`] straight
//! from its bytes; the serde reader here (the derived [`RawEvent`]) decides
//! whatever that one leaves to it, so both give the same result on any
//! input. Either fills a [`RawEvent`], every field optional, which is then
//! checked into an impression or a judgment, or the [`RejectReason`] its
//! first fault maps to. Unknown fields are ignored, so producers can add
//! fields without breaking consumers.

use super::toolkit::visit::ArrayOrNull;
use super::toolkit::{
    RawGrade, RawTimestamp, ScalarText, Text, array_position, classify, message_text, page_capacity, position, present,
};
use super::{DecodeLimits, Event, Impression, Judgment, RejectReason, Shown};
use crate::interleave::Team;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

mod scan;

/// A dimension value: strings as sent, numbers and booleans as their JSON
/// text (producers often send `"experiment": 42`), `null` as absent.
/// Objects and arrays are a wrong type.
struct DimValue<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for DimValue<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarText::<false>).map(DimValue)
    }
}

/// The wire shape, every field optional so that a missing one is reported
/// as `missing_field` rather than as a JSON error. Unknown fields are
/// ignored, so producers can add fields without breaking consumers.
#[derive(Deserialize, Default)]
struct RawEvent<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Text<'a>>,
    #[serde(borrow, default)]
    event_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    session_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    query_id: Option<Text<'a>>,
    #[serde(borrow, default)]
    timestamp: Option<RawTimestamp<'a>>,
    #[serde(borrow, default, deserialize_with = "results_sized")]
    results: Option<Vec<RawShown<'a>>>,
    #[serde(borrow, default)]
    dimensions: Option<BTreeMap<Text<'a>, DimValue<'a>>>,
    #[serde(borrow, default)]
    doc_id: Option<Text<'a>>,
    #[serde(default)]
    grade: Option<RawGrade>,
    #[serde(borrow, default)]
    action: Option<Text<'a>>,
    #[serde(default)]
    randomized: Option<bool>,
}

#[derive(Deserialize)]
struct RawShown<'a> {
    #[serde(borrow, default)]
    doc_id: Option<Text<'a>>,
    #[serde(default)]
    position: Option<i64>,
    #[serde(default)]
    score: Option<f64>,
    #[serde(borrow, default)]
    team: Option<Text<'a>>,
}

/// `results`, read into a `Vec` sized for a page up front.
fn results_sized<'de: 'a, 'a, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<RawShown<'a>>>, D::Error> {
    struct Results<'a>(std::marker::PhantomData<RawShown<'a>>);
    impl<'de: 'a, 'a> Visitor<'de> for Results<'a> {
        type Value = Vec<RawShown<'a>>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an array of results")
        }
        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut results = Vec::with_capacity(page_capacity(seq.size_hint()));
            while let Some(r) = seq.next_element()? {
                results.push(r);
            }
            Ok(results)
        }
    }
    de::DeserializeSeed::deserialize(ArrayOrNull(Results(std::marker::PhantomData)), d)
}

fn required<'a>(field: Option<Text<'a>>) -> Result<Cow<'a, str>, RejectReason> {
    optional(field).ok_or(RejectReason::MissingField)
}

fn optional<'a>(field: Option<Text<'a>>) -> Option<Cow<'a, str>> {
    present(field.map(|t| t.0))
}

/// Decodes one message of rankpulse's own format. Never panics on any input.
pub fn decode<'a>(bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    decode_with(bytes, limits, true)
}

/// [`decode`] through the serde reader alone, which decides whatever the
/// fast reader ([`scan`]) leaves to it: for the tests and the fuzz target
/// that hold the two to the same results.
#[doc(hidden)]
pub fn decode_by_serde<'a>(bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    decode_with(bytes, limits, false)
}

fn decode_with<'a>(bytes: &'a [u8], limits: &DecodeLimits, fast: bool) -> Result<Event<'a>, RejectReason> {
    let text = message_text(bytes, limits)?;
    let raw = match fast.then(|| scan::read(text)).flatten() {
        Some(raw) => raw,
        None => serde_json::from_str::<RawEvent<'a>>(text).map_err(|e| classify(&e, text))?,
    };
    let kind = raw.kind.as_ref().map(|t| t.0.as_ref()).ok_or(RejectReason::MissingField)?;
    match kind {
        "impression" => decode_impression(raw, limits).map(Event::Impression),
        "judgment" => decode_judgment(raw, limits).map(Event::Judgment),
        _ => Err(RejectReason::UnknownType),
    }
}

fn decode_impression<'a>(raw: RawEvent<'a>, limits: &DecodeLimits) -> Result<Impression<'a>, RejectReason> {
    let event_id = required(raw.event_id)?;
    let session_id = required(raw.session_id)?;
    let timestamp_ms = raw.timestamp.ok_or(RejectReason::MissingField)?.to_millis()?;
    let raw_results = raw.results.ok_or(RejectReason::MissingField)?;
    if raw_results.len() > limits.max_results {
        return Err(RejectReason::TooManyResults);
    }
    let mut results = Vec::with_capacity(raw_results.len());
    for (i, r) in raw_results.into_iter().enumerate() {
        let doc_id = required(r.doc_id)?;
        let position = match r.position {
            None => array_position(i)?,
            Some(p) => position(p, 1)?,
        };
        if r.score.is_some_and(|s| !s.is_finite()) {
            return Err(RejectReason::NonFinite);
        }
        let team = match r.team.as_ref().map(|t| t.0.as_ref()) {
            None => None,
            Some("A") => Some(Team::A),
            Some("B") => Some(Team::B),
            Some(_) => return Err(RejectReason::InvalidTeam),
        };
        results.push(Shown { doc_id, position, score: r.score, team });
    }
    Ok(Impression {
        event_id,
        session_id,
        query_id: optional(raw.query_id),
        timestamp_ms,
        results,
        dimensions: raw.dimensions.unwrap_or_default().into_iter().filter_map(|(k, v)| Some((k.0, v.0?))).collect(),
        defines_list: true,
        randomized: raw.randomized.unwrap_or(false),
        results_unknown: false,
    })
}

fn decode_judgment<'a>(raw: RawEvent<'a>, limits: &DecodeLimits) -> Result<Judgment<'a>, RejectReason> {
    let event_id = required(raw.event_id)?;
    let session_id = required(raw.session_id)?;
    let doc_id = required(raw.doc_id)?;
    let timestamp_ms = raw.timestamp.ok_or(RejectReason::MissingField)?.to_millis()?;
    let grade = match (raw.grade, raw.action) {
        (Some(g), _) => g.within(limits.max_grade)?,
        (None, Some(action)) => *limits.actions.get(action.0.as_ref()).ok_or(RejectReason::UnknownAction)?,
        (None, None) => return Err(RejectReason::MissingField),
    };
    Ok(Judgment { event_id, session_id, query_id: optional(raw.query_id), doc_id, grade, timestamp_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> DecodeLimits {
        DecodeLimits::default()
    }

    fn reason(json: &str) -> RejectReason {
        decode(json.as_bytes(), &limits()).unwrap_err()
    }

    #[test]
    fn decodes_the_contract_examples() {
        let imp = r#"{"type":"impression","event_id":"e1","session_id":"s1","query_id":"q1","timestamp":1700000000000,
            "results":[{"doc_id":"d1","position":1,"score":12.5},{"doc_id":"d2","position":2}],
            "dimensions":{"ranker":"v2","market":"us"}}"#;
        let Event::Impression(i) = decode(imp.as_bytes(), &limits()).unwrap() else { panic!() };
        assert_eq!(i.timestamp_ms, 1_700_000_000_000);
        assert_eq!(i.results[0], Shown { doc_id: "d1".into(), position: 1, score: Some(12.5), team: None });
        assert_eq!(i.results[1].score, None);
        assert_eq!(i.dimensions["ranker"], "v2");
        assert!(matches!(i.session_id, Cow::Borrowed(_)), "plain strings are borrowed, not copied");

        let j = r#"{"type":"judgment","event_id":"e2","session_id":"s1","query_id":"q1","doc_id":"d1","grade":2,"timestamp":"2023-11-14T22:13:20Z"}"#;
        let Event::Judgment(j) = decode(j.as_bytes(), &limits()).unwrap() else { panic!() };
        assert_eq!(j.grade, 2);
        assert_eq!(j.timestamp_ms, 1_700_000_000_000);

        let c = r#"{"type":"judgment","event_id":"e3","session_id":"s1","doc_id":"d1","action":"purchase","timestamp":"2023-11-14T23:13:20.5+01:00"}"#;
        let Event::Judgment(c) = decode(c.as_bytes(), &limits()).unwrap() else { panic!() };
        assert_eq!((c.grade, c.query_id, c.timestamp_ms), (3, None, 1_700_000_000_500));
    }

    #[test]
    fn lenient_where_the_meaning_is_clear() {
        let imp = r#"{"type":"impression","event_id":"e","session_id":"s","timestamp":1.9,"results":[],
            "dimensions":{"ranker":"v2","arm":7,"beta":true,"gone":null}}"#;
        let Event::Impression(i) = decode(imp.as_bytes(), &limits()).unwrap() else { panic!() };
        assert_eq!(i.timestamp_ms, 1);
        assert_eq!(i.dimensions.get("arm").map(|v| v.as_ref()), Some("7"));
        assert_eq!(i.dimensions.get("beta").map(|v| v.as_ref()), Some("true"));
        assert!(!i.dimensions.contains_key("gone"));
        let j = r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":2.0,"timestamp":1}"#;
        let Event::Judgment(j) = decode(j.as_bytes(), &limits()).unwrap() else { panic!() };
        assert_eq!(j.grade, 2);
        let bad = r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":2.5,"timestamp":1}"#;
        assert_eq!(reason(bad), RejectReason::WrongType);
        let bad = r#"{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":[],"dimensions":{"a":[1]}}"#;
        assert_eq!(reason(bad), RejectReason::WrongType);
    }

    #[test]
    fn positions_default_to_array_order() {
        let imp = r#"{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":[{"doc_id":"a"},{"doc_id":"b"}]}"#;
        let Event::Impression(i) = decode(imp.as_bytes(), &limits()).unwrap() else { panic!() };
        assert_eq!(i.results.iter().map(|r| r.position).collect::<Vec<_>>(), [1, 2]);
        // Past the room reserved for a page (16): every result, in order.
        let page: Vec<String> = (0..40).map(|i| format!(r#"{{"doc_id":"d{i}"}}"#)).collect();
        let imp = format!(
            r#"{{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":[{}]}}"#,
            page.join(",")
        );
        let Event::Impression(i) = decode(imp.as_bytes(), &limits()).unwrap() else { panic!("not an impression") };
        let docs: Vec<&str> = i.results.iter().map(|r| r.doc_id.as_ref()).collect();
        assert_eq!(docs, (0..40).map(|i| format!("d{i}")).collect::<Vec<_>>());
        assert_eq!(i.results.last().map(|r| r.position), Some(40));
    }

    #[test]
    fn every_reject_reason() {
        let ok_j = |extra: &str| {
            format!(r#"{{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","timestamp":1{extra}}}"#)
        };
        assert_eq!(reason("{"), RejectReason::InvalidJson);
        assert_eq!(decode(b"{\"type\":\"\xff\"}", &limits()).unwrap_err(), RejectReason::InvalidUtf8);
        assert_eq!(reason(r#"{"type":"click"}"#), RejectReason::UnknownType);
        assert_eq!(reason(r#"{"event_id":"e"}"#), RejectReason::MissingField);
        assert_eq!(reason(&ok_j("")), RejectReason::MissingField, "no grade and no action");
        assert_eq!(
            reason(r#"{"type":"judgment","event_id":"e","doc_id":"d","grade":1,"timestamp":1}"#),
            RejectReason::MissingField
        );
        assert_eq!(
            reason(r#"{"type":"judgment","event_id":"","session_id":"s","doc_id":"d","grade":1,"timestamp":1}"#),
            RejectReason::MissingField
        );
        assert_eq!(reason(&ok_j(r#","grade":"2""#)), RejectReason::WrongType);
        assert_eq!(reason(&ok_j(r#","grade":9"#)), RejectReason::GradeOutOfRange);
        assert_eq!(reason(&ok_j(r#","grade":-1"#)), RejectReason::GradeOutOfRange);
        assert_eq!(reason(&ok_j(r#","action":"stare""#)), RejectReason::UnknownAction);
        assert_eq!(
            reason(
                r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":"yesterday"}"#
            ),
            RejectReason::InvalidTimestamp
        );
        assert_eq!(
            reason(r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":-5}"#),
            RejectReason::InvalidTimestamp
        );
        assert_eq!(
            reason(r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":true}"#),
            RejectReason::WrongType
        );
        let imp = |results: &str| {
            format!(r#"{{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":{results}}}"#)
        };
        assert_eq!(reason(&imp(r#"[{"doc_id":"a","position":0}]"#)), RejectReason::InvalidPosition);
        assert_eq!(reason(&imp(r#"[{"doc_id":"a","score":1e999}]"#)), RejectReason::NonFinite);
        assert_eq!(reason(&imp(r#"[{"position":1}]"#)), RejectReason::MissingField);
        assert_eq!(reason(&imp(r#"{"doc_id":"a"}"#)), RejectReason::WrongType);
        assert_eq!(reason(&imp("null")), RejectReason::MissingField);
        assert_eq!(reason(&imp(r#""d1""#)), RejectReason::WrongType);
        let many: Vec<String> = (0..201).map(|i| format!(r#"{{"doc_id":"d{i}"}}"#)).collect();
        assert_eq!(reason(&imp(&format!("[{}]", many.join(",")))), RejectReason::TooManyResults);
        let mut small = limits();
        small.max_message_bytes = 64;
        assert_eq!(decode(imp("[]").repeat(3).as_bytes(), &small).unwrap_err(), RejectReason::TooLarge);
    }
}
