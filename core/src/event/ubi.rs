//! OpenSearch UBI 1.3 decoding: a UBI query or event → typed [`Event`].
//!
//! First stage of the stream, beside the native decoder: a topic (or a
//! replayed file) whose format is `ubi_queries`, `ubi_events` or `ubi`
//! is decoded here into the same [`Event`]s, so that assembly, scoring and
//! windows are the native ones. Like the native decoder it borrows strings
//! from the message where JSON allows it, and every way a message can be
//! wrong maps to one [`RejectReason`]. The mapping, field by field, is
//! documented in `docs/formats.md`:
//!
//! - a list is (`client_id`, `query_id`); `session_id` stands in for a
//!   missing `client_id` (UBI queries carry no `session_id`);
//! - a query is an impression that defines the list (its time and
//!   dimensions), with `query_response_hit_ids` as its results in array
//!   order (positions 1, 2, …), or none;
//! - an `impression` event adds one shown result,
//!   `event_attributes.object.object_id` at `event_attributes.position.ordinal`
//!   (0-based unless `ubi.ordinal_base = 1`);
//! - an event whose `action_name` is in `[judgments.actions]` is a
//!   judgment of `event_attributes.object.object_id` with that grade;
//! - any other action is ignored ([`IgnoreReason::UnmappedAction`]), not
//!   rejected;
//! - dimensions come from the paths of `[ubi.dimensions]`.
//!
//! UBI has no event id: the message itself is its id, so a re-delivered
//! message counts once and two messages that differ in any byte both count.
//!
//! One file for one published schema (past 600 lines only with the tests
//! that walk it field by field against the native twin).

use super::{
    DecodeLimits, Event, Format, IgnoreReason, Impression, Judgment, RawTimestamp, RejectReason, ScalarText, Shown,
    classify, message_text,
};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

/// Where a dimension's value is read from in UBI input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UbiPath {
    /// `application`, of a query or an event.
    Application,
    /// `query_attributes.<name>` of a query (a string, number or boolean).
    QueryAttribute(String),
    /// `event_attributes.<name>` of an `impression` event.
    EventAttribute(String),
}

/// A `[ubi.dimensions]` path that names no field rankpulse can read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "`{0}` is not a UBI dimension path (expected `application`, `query_attributes.<name>` or `event_attributes.<name>`)"
)]
pub struct UbiPathError(pub String);

impl UbiPath {
    pub fn parse(path: &str) -> Result<UbiPath, UbiPathError> {
        let err = || UbiPathError(path.to_string());
        if path == "application" {
            return Ok(UbiPath::Application);
        }
        let (head, name) = path.split_once('.').ok_or_else(err)?;
        if name.is_empty() || name.contains('.') {
            return Err(err());
        }
        match head {
            "query_attributes" => Ok(UbiPath::QueryAttribute(name.to_string())),
            "event_attributes" => Ok(UbiPath::EventAttribute(name.to_string())),
            _ => Err(err()),
        }
    }
}

impl fmt::Display for UbiPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UbiPath::Application => f.write_str("application"),
            UbiPath::QueryAttribute(n) => write!(f, "query_attributes.{n}"),
            UbiPath::EventAttribute(n) => write!(f, "event_attributes.{n}"),
        }
    }
}

/// How UBI input maps to events (`[ubi]`); the defaults are the
/// configuration's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UbiSettings {
    /// The `position.ordinal` of the first result: 0 (OpenSearch's own
    /// generator and click models) or 1 (the UBI spec's examples).
    pub ordinal_base: u32,
    /// Dimension label → where its value is read. A configured label
    /// (`dimensions.labels`) without an entry is read from
    /// `query_attributes.<label>` (experiment arms, rankers).
    pub dimensions: Vec<(String, UbiPath)>,
}

impl UbiSettings {
    /// Every label of `labels` with its path: the configured one, else
    /// `query_attributes.<label>`.
    pub fn resolve(&mut self, labels: &[String]) {
        for label in labels {
            if !self.dimensions.iter().any(|(l, _)| l == label) {
                self.dimensions.push((label.clone(), UbiPath::QueryAttribute(label.clone())));
            }
        }
    }
}

/// A UBI identifier: a string or an integer (`object_id` may be either);
/// `null` as absent.
struct Id<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for Id<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Id<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string or an integer")
            }
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Id(Some(Cow::Borrowed(v))))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Id(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(Id(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(Id(Some(Cow::Owned(v.to_string()))))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Id(None))
            }
            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(Id(None))
            }
        }
        d.deserialize_any(V)
    }
}

/// The scalar members of an open object (`query_attributes`, the rest of
/// `event_attributes`): strings, numbers and booleans as text; objects,
/// arrays and `null` skipped. Nothing is allocated for an empty object.
#[derive(Default)]
struct Scalars<'a>(Vec<(Cow<'a, str>, Cow<'a, str>)>);

impl<'a> Scalars<'a> {
    fn get(&self, name: &str) -> Option<&Cow<'a, str>> {
        self.0.iter().find(|(k, _)| k == name).map(|(_, v)| v)
    }
}

/// A member of an open object: a scalar's text, or nothing.
struct AnyScalar<'a>(Option<Cow<'a, str>>);

impl<'de: 'a, 'a> Deserialize<'de> for AnyScalar<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ScalarText::<true>).map(AnyScalar)
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Scalars<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Scalars<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Scalars::default();
                while let Some((k, v)) = map.next_entry::<super::Text<'de>, AnyScalar<'de>>()? {
                    if let Some(v) = v.0 {
                        out.0.push((k.0, v));
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

#[derive(Deserialize)]
struct RawObject<'a> {
    #[serde(borrow, default)]
    object_id: Option<Id<'a>>,
}

#[derive(Deserialize)]
struct RawPosition {
    #[serde(default)]
    ordinal: Option<i64>,
}

/// `event_attributes`: the object and position rankpulse reads, and the
/// other scalar members (for dimensions).
#[derive(Default)]
struct RawEventAttributes<'a> {
    object: Option<RawObject<'a>>,
    position: Option<RawPosition>,
    rest: Scalars<'a>,
}

impl<'de: 'a, 'a> Deserialize<'de> for RawEventAttributes<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawEventAttributes<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = RawEventAttributes::default();
                while let Some(key) = map.next_key::<super::Text<'de>>()? {
                    match key.0.as_ref() {
                        "object" => out.object = map.next_value()?,
                        "position" => out.position = map.next_value()?,
                        _ => {
                            if let Some(v) = map.next_value::<AnyScalar<'de>>()?.0 {
                                out.rest.0.push((key.0, v));
                            }
                        }
                    }
                }
                Ok(out)
            }
        }
        d.deserialize_map(V)
    }
}

/// A UBI query or event, every field optional so that a missing one is
/// reported as `missing_field`; unknown fields are ignored.
#[derive(Default)]
struct RawUbi<'a> {
    action_name: Option<super::Text<'a>>,
    application: Option<super::Text<'a>>,
    query_id: Option<Id<'a>>,
    client_id: Option<Id<'a>>,
    session_id: Option<Id<'a>>,
    timestamp: Option<RawTimestamp<'a>>,
    query_response_hit_ids: Option<Vec<Id<'a>>>,
    query_attributes: Option<Scalars<'a>>,
    event_attributes: Option<RawEventAttributes<'a>>,
}

/// Reads a [`RawUbi`], and stops at an `action_name` that names an action
/// rankpulse does not score: such an event is ignored whatever else it
/// holds, so the rest of it is not parsed (UBI streams carry many of them:
/// searches, views, hovers). Written by hand for that early stop only; a
/// field given twice is refused as serde's derive refuses it.
struct RawUbiSeed<'l> {
    /// `[judgments.actions]`; `None` reads every field (queries).
    stop_unless_in: Option<&'l BTreeMap<String, crate::metrics::Grade>>,
    /// Set when the read stopped at an unmapped action.
    unmapped: &'l std::cell::Cell<bool>,
}

impl<'de> de::DeserializeSeed<'de> for RawUbiSeed<'_> {
    type Value = RawUbi<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

/// The next value of `map`, refused if its field was seen before.
fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    seen: &mut u16,
    bit: u16,
    name: &'static str,
) -> Result<Option<T>, A::Error> {
    if *seen & bit != 0 {
        return Err(de::Error::duplicate_field(name));
    }
    *seen |= bit;
    map.next_value()
}

impl<'de> Visitor<'de> for RawUbiSeed<'_> {
    type Value = RawUbi<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a UBI query or event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut raw = RawUbi::default();
        let mut seen = 0u16;
        while let Some(key) = map.next_key::<super::Text<'de>>()? {
            match key.0.as_ref() {
                "action_name" => {
                    raw.action_name = once(&mut map, &mut seen, 1, "action_name")?;
                    if let (Some(actions), Some(action)) = (self.stop_unless_in, &raw.action_name) {
                        let a = action.0.as_ref();
                        if !a.is_empty() && a != "impression" && !actions.contains_key(a) {
                            self.unmapped.set(true);
                            return Err(de::Error::custom("unmapped action"));
                        }
                    }
                }
                "application" => raw.application = once(&mut map, &mut seen, 1 << 1, "application")?,
                "query_id" => raw.query_id = once(&mut map, &mut seen, 1 << 2, "query_id")?,
                "client_id" => raw.client_id = once(&mut map, &mut seen, 1 << 3, "client_id")?,
                "session_id" => raw.session_id = once(&mut map, &mut seen, 1 << 4, "session_id")?,
                "timestamp" => raw.timestamp = once(&mut map, &mut seen, 1 << 5, "timestamp")?,
                "query_response_hit_ids" => {
                    raw.query_response_hit_ids = once(&mut map, &mut seen, 1 << 6, "query_response_hit_ids")?
                }
                "query_attributes" => raw.query_attributes = once(&mut map, &mut seen, 1 << 7, "query_attributes")?,
                "event_attributes" => raw.event_attributes = once(&mut map, &mut seen, 1 << 8, "event_attributes")?,
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(raw)
    }
}

fn present(id: Option<Id<'_>>) -> Option<Cow<'_, str>> {
    id.and_then(|i| i.0).filter(|s| !s.is_empty())
}

/// Decodes one UBI message of `format` (`Rankpulse` and `Mapped` are not
/// UBI: they are decoded as `Ubi`). Never panics on any input.
pub fn decode<'a>(format: Format, bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    let text = message_text(bytes, limits)?;
    let unmapped = std::cell::Cell::new(false);
    let seed =
        RawUbiSeed { stop_unless_in: (format != Format::UbiQueries).then_some(&limits.actions), unmapped: &unmapped };
    let mut de = serde_json::Deserializer::from_str(text);
    let raw = match de::DeserializeSeed::deserialize(seed, &mut de).and_then(|raw| de.end().map(|()| raw)) {
        Ok(raw) => raw,
        Err(_) if unmapped.get() => return Ok(Event::Ignored(IgnoreReason::UnmappedAction)),
        Err(e) => return Err(classify(&e, text)),
    };
    let is_event = match format {
        Format::UbiQueries => false,
        Format::UbiEvents => true,
        Format::Ubi | Format::Rankpulse | Format::Mapped => raw.action_name.is_some(),
    };
    if is_event { decode_event(text, raw, limits) } else { decode_query(text, raw, limits).map(Event::Impression) }
}

/// The list's session: `client_id`, else `session_id`.
fn session<'a>(client_id: Option<Id<'a>>, session_id: Option<Id<'a>>) -> Result<Cow<'a, str>, RejectReason> {
    present(client_id).or_else(|| present(session_id)).ok_or(RejectReason::MissingField)
}

fn timestamp(raw: Option<RawTimestamp<'_>>) -> Result<i64, RejectReason> {
    raw.ok_or(RejectReason::MissingField)?.to_millis_with(true)
}

fn decode_query<'a>(text: &'a str, raw: RawUbi<'a>, limits: &DecodeLimits) -> Result<Impression<'a>, RejectReason> {
    let session_id = session(raw.client_id, raw.session_id)?;
    let timestamp_ms = timestamp(raw.timestamp)?;
    let hits = raw.query_response_hit_ids.unwrap_or_default();
    if hits.len() > limits.max_results {
        return Err(RejectReason::TooManyResults);
    }
    let mut results = Vec::with_capacity(hits.len());
    for (i, hit) in hits.into_iter().enumerate() {
        let doc_id = present(Some(hit)).ok_or(RejectReason::MissingField)?;
        let position = u32::try_from(i + 1).map_err(|_| RejectReason::InvalidPosition)?;
        results.push(Shown { doc_id, position, score: None, team: None });
    }
    let mut dimensions = BTreeMap::new();
    let attributes = raw.query_attributes.unwrap_or_default();
    for (label, path) in &limits.ubi.dimensions {
        let value = match path {
            UbiPath::Application => raw.application.as_ref().map(|a| &a.0),
            UbiPath::QueryAttribute(name) => attributes.get(name),
            UbiPath::EventAttribute(_) => None,
        };
        if let Some(v) = value {
            dimensions.insert(Cow::Owned(label.clone()), v.clone());
        }
    }
    Ok(Impression {
        event_id: Cow::Borrowed(text),
        session_id,
        query_id: present(raw.query_id),
        timestamp_ms,
        results,
        dimensions,
        defines_list: true,
        randomized: false,
    })
}

fn decode_event<'a>(text: &'a str, raw: RawUbi<'a>, limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    let action = raw.action_name.map(|a| a.0).filter(|a| !a.is_empty()).ok_or(RejectReason::MissingField)?;
    let grade = match action.as_ref() {
        "impression" => None,
        other => match limits.actions.get(other) {
            Some(g) => Some(*g),
            None => return Ok(Event::Ignored(IgnoreReason::UnmappedAction)),
        },
    };
    let session_id = session(raw.client_id, raw.session_id)?;
    let timestamp_ms = timestamp(raw.timestamp)?;
    let attributes = raw.event_attributes.ok_or(RejectReason::MissingField)?;
    let doc_id = present(attributes.object.and_then(|o| o.object_id)).ok_or(RejectReason::MissingField)?;
    let query_id = present(raw.query_id);
    let event_id = Cow::Borrowed(text);
    if let Some(grade) = grade {
        return Ok(Event::Judgment(Judgment { event_id, session_id, query_id, doc_id, grade, timestamp_ms }));
    }
    let ordinal = attributes.position.and_then(|p| p.ordinal).ok_or(RejectReason::MissingField)?;
    let position = ordinal
        .checked_sub(i64::from(limits.ubi.ordinal_base))
        .and_then(|p| p.checked_add(1))
        .filter(|p| *p >= 1)
        .and_then(|p| u32::try_from(p).ok())
        .ok_or(RejectReason::InvalidPosition)?;
    let mut dimensions = BTreeMap::new();
    for (label, path) in &limits.ubi.dimensions {
        let value = match path {
            UbiPath::Application => raw.application.as_ref().map(|a| &a.0),
            UbiPath::EventAttribute(name) => attributes.rest.get(name),
            UbiPath::QueryAttribute(_) => None,
        };
        if let Some(v) = value {
            dimensions.insert(Cow::Owned(label.clone()), v.clone());
        }
    }
    Ok(Event::Impression(Impression {
        event_id,
        session_id,
        query_id,
        timestamp_ms,
        results: vec![Shown { doc_id, position, score: None, team: None }],
        dimensions,
        defines_list: false,
        randomized: false,
    }))
}

/// Which UBI index a `_bulk` action line addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkTarget {
    /// `_index` holds `queries` (`ubi_queries`, `my_ubi_queries-2025`).
    Queries,
    /// `_index` holds `events`.
    Events,
    /// Another index, or none named.
    Unknown,
}

impl BulkTarget {
    /// The format of the document that follows the action line.
    pub fn format(self) -> Format {
        match self {
            BulkTarget::Queries => Format::UbiQueries,
            BulkTarget::Events => Format::UbiEvents,
            BulkTarget::Unknown => Format::Ubi,
        }
    }
}

#[derive(Deserialize)]
struct BulkMeta<'a> {
    #[serde(borrow, default)]
    _index: Option<super::Text<'a>>,
}

/// A `_bulk` action line: exactly one of the action keys, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkLine<'a> {
    #[serde(borrow, default)]
    index: Option<BulkMeta<'a>>,
    #[serde(borrow, default)]
    create: Option<BulkMeta<'a>>,
}

/// Whether `line` is an OpenSearch `_bulk` action line (`{"index":{…}}`
/// or `{"create":{…}}`), and which index it addresses. A UBI document is
/// not one: it fails at its first member.
pub fn bulk_action(line: &[u8]) -> Option<BulkTarget> {
    let trimmed = line.trim_ascii_start();
    if !trimmed.starts_with(b"{") {
        return None;
    }
    let parsed: BulkLine = serde_json::from_slice(line).ok()?;
    let meta = match (parsed.index, parsed.create) {
        (Some(m), None) | (None, Some(m)) => m,
        _ => return None,
    };
    Some(match meta._index.as_ref().map(|t| t.0.as_ref()) {
        Some(i) if i.contains("queries") => BulkTarget::Queries,
        Some(i) if i.contains("events") => BulkTarget::Events,
        _ => BulkTarget::Unknown,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> DecodeLimits {
        let mut l = DecodeLimits::default();
        l.ubi.dimensions = vec![
            ("ranker".into(), UbiPath::QueryAttribute("ranker".into())),
            ("app".into(), UbiPath::Application),
            ("arm".into(), UbiPath::EventAttribute("arm".into())),
        ];
        l
    }

    fn event(json: &str) -> Result<Event<'_>, RejectReason> {
        decode(Format::Ubi, json.as_bytes(), &limits())
    }

    #[test]
    fn a_query_with_hit_ids_is_an_impression_in_array_order() {
        let q = r#"{"application":"shop","query_id":"q1","client_id":"c1","user_query":"tv",
            "query_attributes":{"ranker":"v2","filters":{"brand":"x"},"page":2},
            "timestamp":"2024-12-10T00:01:29.378Z","query_response_id":"r","query_response_hit_ids":["a","b",7]}"#;
        let Ok(Event::Impression(i)) = event(q) else { panic!("{:?}", event(q)) };
        assert_eq!((i.session_id.as_ref(), i.query_id.as_deref()), ("c1", Some("q1")));
        assert_eq!(i.timestamp_ms, 1_733_788_889_378);
        let docs: Vec<(&str, u32)> = i.results.iter().map(|r| (r.doc_id.as_ref(), r.position)).collect();
        assert_eq!(docs, [("a", 1), ("b", 2), ("7", 3)]);
        assert_eq!(i.dimensions.get("ranker").map(|v| v.as_ref()), Some("v2"));
        assert_eq!(i.dimensions.get("app").map(|v| v.as_ref()), Some("shop"));
        assert!(i.defines_list);
        assert!(matches!(i.session_id, Cow::Borrowed(_)), "borrowed, not copied");
        // Without hit ids: the list's time and dimensions, nothing shown yet.
        for (text, ms) in [
            ("2024-12-10T00:01:29.378+0000", 1_733_788_889_378),
            ("2024-12-10T01:01:29.378+01:00", 1_733_788_889_378),
            ("2024-12-10T00:01:29", 1_733_788_889_000),
        ] {
            let q = format!(r#"{{"client_id":"c1","timestamp":"{text}"}}"#);
            let Ok(Event::Impression(i)) = decode(Format::UbiQueries, q.as_bytes(), &limits()) else { panic!("{q}") };
            assert_eq!(i.timestamp_ms, ms, "{text}");
        }
        let q = r#"{"query_id":"q1","client_id":"c1","user_query":"tv","timestamp":1733788889378}"#;
        let Ok(Event::Impression(i)) = decode(Format::UbiQueries, q.as_bytes(), &limits()) else { panic!() };
        assert!(i.results.is_empty() && i.defines_list);
        assert_eq!(i.dimensions.len(), 0);
    }

    #[test]
    fn impression_events_add_one_result_at_their_ordinal() {
        let e = |ordinal: i64, base: u32| {
            let mut l = limits();
            l.ubi.ordinal_base = base;
            let json = format!(
                r#"{{"action_name":"impression","query_id":"q1","session_id":"s1","timestamp":"2018-11-13T20:20:39",
                "event_attributes":{{"object":{{"object_id":42,"object_id_field":"sku"}},"position":{{"ordinal":{ordinal}}},"arm":"b"}}}}"#
            );
            match decode(Format::UbiEvents, json.as_bytes(), &l) {
                Ok(Event::Impression(i)) => {
                    assert_eq!((i.session_id.as_ref(), i.timestamp_ms), ("s1", 1_542_140_439_000));
                    assert!(!i.defines_list);
                    assert_eq!(i.dimensions.get("arm").map(|v| v.as_ref()), Some("b"));
                    Ok((i.results[0].doc_id.to_string(), i.results[0].position))
                }
                Ok(other) => panic!("{other:?}"),
                Err(r) => Err(r),
            }
        };
        assert_eq!(e(0, 0), Ok(("42".to_string(), 1)));
        assert_eq!(e(4, 0), Ok(("42".to_string(), 5)));
        assert_eq!(e(1, 1), Ok(("42".to_string(), 1)));
        assert_eq!(e(0, 1), Err(RejectReason::InvalidPosition));
        assert_eq!(e(-1, 0), Err(RejectReason::InvalidPosition));
        assert_eq!(e(i64::MAX, 0), Err(RejectReason::InvalidPosition));
    }

    #[test]
    fn mapped_actions_are_judgments_and_others_are_ignored() {
        let e = |action: &str, attributes: &str| {
            format!(
                r#"{{"action_name":"{action}","query_id":"q1","client_id":"c1","session_id":"s9","timestamp":1733788889378,"event_attributes":{attributes}}}"#
            )
        };
        let click = e("add_to_cart", r#"{"object":{"object_id":"d1"},"position":{"ordinal":3}}"#);
        let Ok(Event::Judgment(j)) = event(&click) else { panic!() };
        assert_eq!((j.session_id.as_ref(), j.doc_id.as_ref(), j.grade), ("c1", "d1", 2));
        for ignored in [e("item_click", "null"), e("search", r#"{"position":{}}"#), e("page_exit", "{}")] {
            assert_eq!(event(&ignored), Ok(Event::Ignored(IgnoreReason::UnmappedAction)), "{ignored}");
        }
        // What a mapped action cannot do without: rejected, naming the field by its reason.
        assert_eq!(event(&e("click", "null")), Err(RejectReason::MissingField), "no event_attributes");
        assert_eq!(event(&e("click", r#"{"object":{"object_id":null}}"#)), Err(RejectReason::MissingField));
        assert_eq!(
            event(&e("impression", r#"{"object":{"object_id":"d"},"position":{"xy":{"x":1,"y":2}}}"#)),
            Err(RejectReason::MissingField)
        );
        assert_eq!(event(&e("click", r#"{"object":{"object_id":1.5}}"#)), Err(RejectReason::WrongType));
        assert_eq!(
            event(r#"{"action_name":"click","timestamp":1,"event_attributes":{"object":{"object_id":"d"}}}"#),
            Err(RejectReason::MissingField),
            "no client_id nor session_id"
        );
        assert_eq!(
            event(
                r#"{"action_name":"click","client_id":"c","timestamp":"yesterday","event_attributes":{"object":{"object_id":"d"}}}"#
            ),
            Err(RejectReason::InvalidTimestamp)
        );
        assert_eq!(decode(Format::UbiEvents, br#"{"client_id":"c"}"#, &limits()), Err(RejectReason::MissingField));
        assert_eq!(event("{"), Err(RejectReason::InvalidJson));
        assert_eq!(
            event(r#"{"client_id":"c","timestamp":1,"query_response_hit_ids":[1e999]}"#),
            Err(RejectReason::NonFinite)
        );
    }

    #[test]
    fn an_unmapped_action_stops_the_read_and_only_an_events_action_does() {
        // Nothing after an unmapped action is read, so nothing after it can
        // be wrong (docs/formats.md: "nothing else is checked").
        let rest = r#","client_id":"c","timestamp":"yesterday","event_attributes":{"object":"#;
        for format in [Format::UbiEvents, Format::Ubi] {
            let m = format!(r#"{{"application":"shop","action_name":"hover"{rest}"#);
            assert_eq!(decode(format, m.as_bytes(), &limits()), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        }
        // A mapped action, an impression or an empty action reads on.
        for action in ["click", "impression", ""] {
            let m = format!(r#"{{"action_name":"{action}"{rest}"#);
            assert_eq!(decode(Format::UbiEvents, m.as_bytes(), &limits()), Err(RejectReason::InvalidJson), "{action}");
        }
        // A query topic's message is a query whatever action it names.
        let q = r#"{"action_name":"hover","client_id":"c","timestamp":1}"#;
        assert!(matches!(decode(Format::UbiQueries, q.as_bytes(), &limits()), Ok(Event::Impression(_))));
        // A field given twice is refused, as the derived reader refused it.
        let twice = r#"{"action_name":"click","client_id":"c","client_id":"d","timestamp":1}"#;
        assert_eq!(event(twice), Err(RejectReason::WrongType));
        assert_eq!(event("[]"), Err(RejectReason::WrongType), "not an object");
        assert_eq!(event(r#"{"action_name":"hover"} x"#), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        assert_eq!(event(r#"{"action_name":"click"} x"#), Err(RejectReason::InvalidJson), "trailing characters");
    }

    #[test]
    fn bulk_action_lines_are_told_from_documents() {
        assert_eq!(bulk_action(br#"{"index": {"_index": "ubi_queries", "_id": "e7"}}"#), Some(BulkTarget::Queries));
        assert_eq!(bulk_action(br#"{"create":{"_index":"ubi_events"}}"#), Some(BulkTarget::Events));
        assert_eq!(bulk_action(br#"{"index":{}}"#), Some(BulkTarget::Unknown));
        assert_eq!(bulk_action(br#"{"application":"a","index":{}}"#), None);
        assert_eq!(bulk_action(br#"{"index":{},"create":{}}"#), None);
        assert_eq!(bulk_action(br#"{"action_name":"click"}"#), None);
        assert_eq!(bulk_action(b"not json"), None);
    }

    #[test]
    fn dimension_paths_parse_or_name_themselves() {
        assert_eq!(UbiPath::parse("application"), Ok(UbiPath::Application));
        assert_eq!(UbiPath::parse("query_attributes.arm"), Ok(UbiPath::QueryAttribute("arm".into())));
        assert_eq!(UbiPath::parse("event_attributes.arm").map(|p| p.to_string()), Ok("event_attributes.arm".into()));
        for bad in ["", "user_query", "query_attributes.", "query_attributes.a.b", "attributes.x"] {
            assert_eq!(UbiPath::parse(bad), Err(UbiPathError(bad.to_string())));
        }
    }

    proptest::proptest! {
        /// Nothing input can reach panics: generated UBI messages with
        /// bytes overwritten, cut short or spliced, in every format, and
        /// as `_bulk` action lines.
        #[test]
        fn no_input_panics(seed in 0u64..1_000, edits in proptest::collection::vec((0usize..4096, 0u8..=255), 0..8), cut in 0usize..4096) {
            let t = rankpulse_testkit::ubi::ubi_mix(3, seed, 1_700_000_000_000, 500.0, (seed % 2) as u32);
            let mut l = limits();
            l.max_results = 3;
            for m in &t.ubi {
                let mut bytes = m.payload.clone();
                for &(at, b) in &edits {
                    let n = bytes.len();
                    if n > 0 {
                        bytes[at % n] = b;
                    }
                }
                bytes.truncate(cut.max(bytes.len() / 2));
                for format in [Format::Ubi, Format::UbiQueries, Format::UbiEvents] {
                    let _ = decode(format, &bytes, &l);
                }
                let _ = bulk_action(&bytes);
            }
        }
    }
}
