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
//! - dimensions come from the paths of `[ubi.dimensions]`, of any depth
//!   (`query_attributes.experiment.arm`), read on the way through the
//!   message into a fixed array (`attributes::Capture`), nothing built
//!   per message.
//!
//! The usual message is read by `scan`, straight from its bytes; the
//! serde reader (`read`) decides whatever that one leaves to it
//! (escapes, unusual numbers, errors), so both give the same result on any
//! input. This module turns what either read into an event; the
//! attributes' reader is in `attributes`, the `[ubi]` settings in
//! `paths`, the lines of a `_bulk` export in `bulk`.
//!
//! UBI has no event id: the message itself is its id, so a re-delivered
//! message counts once and two messages that differ in any byte both count.

use super::toolkit::{self, RawTimestamp, classify, message_text, position};
use super::{DecodeLimits, Event, Format, IgnoreReason, Impression, Judgment, RejectReason, Shown};
use attributes::{Ordinal, Slots};
use read::{Id, RawUbi, RawUbiSeed, Settings, present};
use serde::de;
use std::borrow::Cow;
use std::collections::BTreeMap;

mod attributes;
mod bulk;
mod paths;
mod read;
mod scan;

pub use bulk::{BulkTarget, bulk_action, document_kind};
pub use paths::{UbiPath, UbiPathError, UbiSettings};

/// Decodes one UBI message of `format` (`Rankpulse` and `Mapped` are not
/// UBI: they are decoded as `Ubi`). Never panics on any input.
pub fn decode<'a>(format: Format, bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    decode_with(format, bytes, limits, true)
}

/// [`decode`] through the serde reader alone, which decides whatever the
/// fast reader ([`scan`]) leaves to it: for the tests and the fuzz target
/// that hold the two to the same results.
#[doc(hidden)]
pub fn decode_by_serde<'a>(format: Format, bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    decode_with(format, bytes, limits, false)
}

fn decode_with<'a>(
    format: Format,
    bytes: &'a [u8],
    limits: &DecodeLimits,
    fast: bool,
) -> Result<Event<'a>, RejectReason> {
    let text = message_text(bytes, limits)?;
    let settings = Settings::new(format, limits);
    let mut slots: Slots = None;
    let fast = if fast { scan::read(text, &settings, &mut slots) } else { None };
    let raw = match fast {
        Some(scan::Read::Raw(raw)) => raw,
        Some(scan::Read::Unmapped) => return Ok(Event::Ignored(IgnoreReason::UnmappedAction)),
        None => {
            slots = None;
            let unmapped = std::cell::Cell::new(false);
            let seed = RawUbiSeed { settings: &settings, unmapped: &unmapped, slots: &mut slots };
            let mut de = serde_json::Deserializer::from_str(text);
            match de::DeserializeSeed::deserialize(seed, &mut de).and_then(|raw| de.end().map(|()| raw)) {
                Ok(raw) => raw,
                Err(_) if unmapped.get() => return Ok(Event::Ignored(IgnoreReason::UnmappedAction)),
                Err(e) => return Err(classify(&e, text)),
            }
        }
    };
    let is_event = match format {
        // An event on the queries' topic: not a query, whatever else it holds.
        Format::UbiQueries if raw.action_key => return Err(RejectReason::UnknownType),
        Format::UbiQueries => false,
        Format::UbiEvents => true,
        Format::Ubi | Format::Rankpulse | Format::Mapped => raw.action_key,
    };
    if is_event {
        decode_event(text, raw, &mut slots, limits)
    } else {
        decode_query(text, raw, &mut slots, limits).map(Event::Impression)
    }
}

/// The list's session: `client_id`, else `session_id`.
fn session<'a>(client_id: Option<Id<'a>>, session_id: Option<Id<'a>>) -> Result<Cow<'a, str>, RejectReason> {
    present(client_id).or_else(|| present(session_id)).ok_or(RejectReason::MissingField)
}

fn timestamp(raw: Option<RawTimestamp<'_>>) -> Result<i64, RejectReason> {
    raw.ok_or(RejectReason::MissingField)?.to_millis_with(true)
}

fn decode_query<'a>(
    text: &'a str,
    raw: RawUbi<'a>,
    slots: &mut Slots<'a>,
    limits: &DecodeLimits,
) -> Result<Impression<'a>, RejectReason> {
    // A query says what was searched (`user_query`) or what was found:
    // anything else read as a query would be an empty list, scored as zeros.
    if !raw.user_query && raw.query_response_hit_ids.is_none() {
        return Err(RejectReason::MissingField);
    }
    let session_id = session(raw.client_id, raw.session_id)?;
    let timestamp_ms = timestamp(raw.timestamp)?;
    let results_unknown = raw.query_response_hit_ids.is_none();
    let results = raw.query_response_hit_ids.transpose()?.unwrap_or_default();
    let dimensions = dimensions(limits, raw.application, slots, false);
    Ok(Impression {
        event_id: Cow::Borrowed(text),
        session_id,
        query_id: present(raw.query_id),
        timestamp_ms,
        results,
        dimensions,
        defines_list: true,
        randomized: false,
        results_unknown,
    })
}

/// The dimensions of a query (`event` false) or an `impression` event:
/// `application`, and the paths below its own attributes.
fn dimensions<'a>(
    limits: &DecodeLimits,
    application: Option<Cow<'a, str>>,
    slots: &mut Slots<'a>,
    event: bool,
) -> BTreeMap<Cow<'a, str>, Cow<'a, str>> {
    let mut dimensions = BTreeMap::new();
    for (i, (label, path)) in limits.ubi.dimensions.iter().enumerate() {
        let value = match path {
            UbiPath::Application => application.clone(),
            _ if path.below(event).is_some() => slots.as_mut().and_then(|s| s.get_mut(i)).and_then(Option::take),
            _ => None,
        };
        if let Some(v) = value {
            dimensions.insert(Cow::Owned(label.clone()), v);
        }
    }
    dimensions
}

fn decode_event<'a>(
    text: &'a str,
    raw: RawUbi<'a>,
    slots: &mut Slots<'a>,
    limits: &DecodeLimits,
) -> Result<Event<'a>, RejectReason> {
    let action = toolkit::present(raw.action_name.map(|a| a.0)).ok_or(RejectReason::MissingField)?;
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
    let doc_id = present(attributes.object_id).ok_or(RejectReason::MissingField)?;
    let query_id = present(raw.query_id);
    let event_id = Cow::Borrowed(text);
    if let Some(grade) = grade {
        return Ok(Event::Judgment(Judgment { event_id, session_id, query_id, doc_id, grade, timestamp_ms }));
    }
    let ordinal = match attributes.ordinal {
        Some(Ordinal::At(ordinal)) => ordinal,
        Some(Ordinal::Unreadable) => return Err(RejectReason::WrongType),
        Some(Ordinal::Absent) | None => return Err(RejectReason::MissingField),
    };
    let position = position(ordinal, limits.ubi.ordinal_base)?;
    let dimensions = dimensions(limits, raw.application, slots, true);
    Ok(Event::Impression(Impression {
        event_id,
        session_id,
        query_id,
        timestamp_ms,
        results: vec![Shown { doc_id, position, score: None, team: None }],
        dimensions,
        defines_list: false,
        randomized: false,
        results_unknown: false,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_document_is_an_event_by_its_action_name_as_decode_reads_it() {
        for (line, kind) in [
            (r#"{"client_id":"c","user_query":"tv","timestamp":1}"#, BulkTarget::Queries),
            (r#"{"action_name":"click","client_id":"c","timestamp":1}"#, BulkTarget::Events),
            (r#"{"client_id":"c","timestamp":1,"action_name":null}"#, BulkTarget::Events),
            (r#"{"client_id":"c","act\u0069on_name":"click","timestamp":1}"#, BulkTarget::Events),
            (r#"{"user_query":"action_name","query_attributes":{"action_name":"x"}}"#, BulkTarget::Queries),
            (r#"not json"#, BulkTarget::Queries),
            (r#"{"action_name":"click","#, BulkTarget::Queries),
            (r#"[1]"#, BulkTarget::Queries),
        ] {
            assert_eq!(document_kind(line.as_bytes()), kind, "{line}");
            // The decoder agrees wherever it reads a kind at all.
            if let Ok(event) = decode(Format::Ubi, line.as_bytes(), &limits()) {
                assert_eq!(
                    matches!(event, Event::Impression(ref i) if i.defines_list),
                    kind == BulkTarget::Queries,
                    "{line}"
                );
            }
        }
    }

    fn limits() -> DecodeLimits {
        let mut l = DecodeLimits::default();
        l.ubi.dimensions = vec![
            ("ranker".into(), UbiPath::QueryAttribute(vec!["ranker".into()])),
            ("app".into(), UbiPath::Application),
            ("arm".into(), UbiPath::EventAttribute(vec!["arm".into()])),
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
            let q = format!(r#"{{"client_id":"c1","user_query":"tv","timestamp":"{text}"}}"#);
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

    /// A judgment's position is not read (docs/formats.md): a click whose
    /// client sends its ordinal as text, a float or an array still judges
    /// its document; an impression event, whose ordinal is its position,
    /// refuses the same values as a wrong type. Both entry points are asked
    /// (the fast reader leaves all of these to serde's).
    #[test]
    fn only_an_impression_reads_its_ordinal() {
        for position in
            [r#"{"ordinal":"3"}"#, r#"{"ordinal":1.5}"#, r#"{"ordinal":[1]}"#, r#"{"ordinal":{}}"#, r#""x""#, "[]", "7"]
        {
            let message = |action: &str| {
                format!(
                    r#"{{"action_name":"{action}","query_id":"q1","client_id":"c1","timestamp":1700000000000,"event_attributes":{{"object":{{"object_id":"d2"}},"position":{position}}}}}"#
                )
            };
            for read in [decode, decode_by_serde] {
                let click = message("click");
                match read(Format::UbiEvents, click.as_bytes(), &limits()) {
                    Ok(Event::Judgment(j)) => assert_eq!((j.doc_id.as_ref(), j.grade), ("d2", 1), "{position}"),
                    other => panic!("{position}: {other:?}"),
                }
                let impression = message("impression");
                assert_eq!(
                    read(Format::UbiEvents, impression.as_bytes(), &limits()).err(),
                    Some(RejectReason::WrongType),
                    "{position}"
                );
            }
        }
    }

    /// `application` is read as any dimension value: a number as its text,
    /// an object or array as absent, never a reason to refuse the message
    /// (events other than impressions do not read it at all).
    #[test]
    fn application_is_read_as_a_dimension_value() {
        let mut l = limits();
        l.ubi.dimensions = vec![("app".into(), UbiPath::Application)];
        for (value, expected) in
            [("5", Some("5")), ("true", Some("true")), (r#""shop""#, Some("shop")), ("{\"n\":1}", None), ("[1]", None)]
        {
            let query = format!(
                r#"{{"query_id":"q","client_id":"c","user_query":"x","timestamp":1700000000000,"query_response_hit_ids":["d1"],"application":{value}}}"#
            );
            let click = format!(
                r#"{{"action_name":"click","query_id":"q","client_id":"c","timestamp":1700000000000,"application":{value},"event_attributes":{{"object":{{"object_id":"d1"}}}}}}"#
            );
            for read in [decode, decode_by_serde] {
                match read(Format::UbiQueries, query.as_bytes(), &l) {
                    Ok(Event::Impression(i)) => {
                        assert_eq!(i.dimensions.get("app").map(|v| v.as_ref()), expected, "{value}")
                    }
                    other => panic!("{value}: {other:?}"),
                }
                assert!(matches!(read(Format::UbiEvents, click.as_bytes(), &l), Ok(Event::Judgment(_))), "{value}");
            }
        }
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
        // Hit ids: past input.max_results (200 here) before a missing one, read to the end either way.
        let q = |hits: &str| format!(r#"{{"client_id":"c","timestamp":1,"query_response_hit_ids":[{hits}],"x":1}}"#);
        let many = vec!["\"d\""; 201].join(",");
        assert_eq!(event(&q(&format!(r#"null,{many}"#))), Err(RejectReason::TooManyResults));
        for missing in [r#""a","",1"#, r#"null"#, r#""a",null"#] {
            assert_eq!(event(&q(missing)), Err(RejectReason::MissingField), "{missing}");
        }
        assert_eq!(event(&q(r#""a",{"id":1}"#)), Err(RejectReason::WrongType));
        assert_eq!(
            event(r#"{"client_id":"c","timestamp":1,"query_response_hit_ids":"a"}"#),
            Err(RejectReason::WrongType)
        );
        let Ok(Event::Impression(i)) =
            event(r#"{"client_id":"c","user_query":"q","timestamp":1,"query_response_hit_ids":null}"#)
        else {
            panic!()
        };
        assert!(i.results.is_empty());
        // Neither what was searched nor what was found is no query: a
        // native event, or any object with a client and a time.
        for no_query in [
            r#"{"client_id":"c","timestamp":1,"query_response_hit_ids":null}"#,
            r#"{"client_id":"c","timestamp":1,"user_query":null}"#,
            r#"{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":[{"doc_id":"d","position":1}]}"#,
            r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":1}"#,
        ] {
            for format in [Format::Ubi, Format::UbiQueries] {
                assert_eq!(
                    decode(format, no_query.as_bytes(), &limits()),
                    Err(RejectReason::MissingField),
                    "{no_query}"
                );
            }
        }
        // An `action_name` of null is an event without its action, not a query.
        let null_action = r#"{"action_name":null,"client_id":"c","user_query":"q","timestamp":1}"#;
        assert_eq!(decode(Format::Ubi, null_action.as_bytes(), &limits()), Err(RejectReason::MissingField));
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
        // An event on a query topic is not a query, whatever action it names.
        for action in ["hover", "click", "null"] {
            let q = format!(r#"{{"action_name":{action:?},"client_id":"c","user_query":"tv","timestamp":1}}"#);
            let q = q.replace("\"null\"", "null");
            assert_eq!(decode(Format::UbiQueries, q.as_bytes(), &limits()), Err(RejectReason::UnknownType), "{q}");
        }
        // A field given twice is refused, as the derived reader refused it.
        let twice = r#"{"action_name":"click","client_id":"c","client_id":"d","timestamp":1}"#;
        assert_eq!(event(twice), Err(RejectReason::WrongType));
        assert_eq!(event("[]"), Err(RejectReason::WrongType), "not an object");
        assert_eq!(event(r#"{"action_name":"hover"} x"#), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        assert_eq!(event(r#"{"action_name":"click"} x"#), Err(RejectReason::InvalidJson), "trailing characters");
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
