//! The `mapped` format: any JSON schema → typed [`Event`], by a declarative
//! field mapping (`[mapped]`, docs/formats.md).
//!
//! First stage of the stream, beside the native and UBI decoders: a topic
//! (or a replayed file) whose format is `mapped` is decoded here into the
//! same [`Event`]s, so that assembly, scoring and windows are the native
//! ones. Each rankpulse field is read from a configured path (a dotted
//! path `a.b.0.c` or an RFC 6901 pointer `/a/b/0/c`), or from the first of
//! several alternatives that is present; a message whose `results` path
//! holds an array is an impression, any other message a judgment.
//!
//! Why it is built this way: a mapped topic carries whatever else its
//! producer logs (request headers, feature vectors, whole documents), and
//! the decoder runs once per message on the consumer's hot path. Building
//! a `serde_json::Value` of every message would allocate a node for each
//! of those fields only to drop them. Instead the configured paths are
//! compiled once, at start, into a small trie ([`Mapping`]); one serde
//! visitor walks the message, descends only into keys and indices on a
//! path, skips everything else with [`serde::de::IgnoredAny`], and borrows
//! strings from the message where JSON allows it, as the other decoders
//! do. What it captures is a handful of scalars in fixed slots, and the
//! results of an impression are converted as they are read, into the one
//! `Vec` the event keeps (strings with escapes and integer ids are copied,
//! as in the other decoders).
//!
//! Every way a message can be wrong maps to one [`RejectReason`], the same
//! ones the UBI decoder gives for the same fault; an action missing from
//! `[judgments.actions]` is ignored ([`IgnoreReason::UnmappedAction`]) as
//! in UBI. A mapping without an `id` path makes the message its own id, as
//! UBI does, so a re-delivered message counts once.
//!
//! The settings and their tries are in `mapping`, the visitor that walks
//! a message in `walk`; this module turns what the walk captured into an
//! event.

use super::toolkit::{RawGrade, RawTimestamp, array_position, classify, message_text, position, present};
use super::{DecodeLimits, Event, IgnoreReason, Impression, Judgment, RejectReason, Shown};
use crate::metrics::Grade;
use mapping::{MAX_DIMENSIONS, MESSAGE_SLOTS, RESULT_SLOTS, Seen, Target};
use serde::de::DeserializeSeed;
use std::borrow::Cow;
use std::collections::BTreeMap;
use walk::{Context, Found, Scalar, Slot, Walk};

mod mapping;
mod walk;

pub use mapping::{Mapping, MappingError, MappingSpec, PathError};

/// Decodes one message with the mapping of `limits` (`Format::Mapped`).
/// Without a mapping (the configuration requires one for this format)
/// nothing can be read: `missing_field`. Never panics on any input.
pub fn decode<'a>(bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    let text = message_text(bytes, limits)?;
    let Some(mapping) = limits.mapped.as_ref() else { return Err(RejectReason::MissingField) };
    let cx = Context { mapping, max_results: limits.max_results };
    let mut slots: [Slot<'a>; MESSAGE_SLOTS + MAX_DIMENSIONS] = Default::default();
    let mut results = None;
    let mut overflow = false;
    let mut seen: Seen = Default::default();
    let walk = Walk {
        cx: &cx,
        trie: &mapping.message,
        node: 0,
        slots: &mut slots,
        results: &mut results,
        overflow: &mut overflow,
        seen: &mut seen,
        root: true,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    walk.deserialize(&mut de).and_then(|()| de.end()).map_err(|e| classify(&e, text))?;
    let take = |t: Target, slots: &mut [Slot<'a>]| slots[t.slot()].take().map(|(_, v)| v);
    match results {
        Some((_, Found::Array(shown, failed))) => {
            if overflow {
                return Err(RejectReason::TooManyResults);
            }
            let session_id = id_text(take(Target::Session, &mut slots))?.ok_or(RejectReason::MissingField)?;
            let timestamp_ms = time(take(Target::Time, &mut slots))?;
            let query_id = id_text(take(Target::Query, &mut slots))?;
            let event_id = event_id(mapping, text, take(Target::Id, &mut slots))?;
            if let Some(reason) = failed {
                return Err(reason);
            }
            let mut dimensions = BTreeMap::new();
            for (i, label) in mapping.labels.iter().enumerate() {
                if let Some(v) = dimension(take(Target::Dimension(i as u8), &mut slots)) {
                    dimensions.insert(Cow::Owned(label.clone()), v);
                }
            }
            Ok(Event::Impression(Impression {
                event_id,
                session_id,
                query_id,
                timestamp_ms,
                results: shown,
                dimensions,
                defines_list: true,
                randomized: false,
                results_unknown: false,
            }))
        }
        _ => {
            // As in UBI, an action rankpulse does not score says nothing
            // else about the message: ignored before anything is checked.
            let grade = match (take(Target::Grade, &mut slots), take(Target::Action, &mut slots)) {
                (Some(g), _) => grade(g, limits.max_grade)?,
                // Empty is absent, as for every required field (and as
                // UBI's `action_name`).
                (None, Some(Scalar::Str(action))) if action.is_empty() => return Err(RejectReason::MissingField),
                (None, Some(Scalar::Str(action))) => match limits.actions.get(action.as_ref()) {
                    Some(g) => *g,
                    None => return Ok(Event::Ignored(IgnoreReason::UnmappedAction)),
                },
                (None, Some(_)) => return Err(RejectReason::WrongType),
                (None, None) => return Err(RejectReason::MissingField),
            };
            let session_id = id_text(take(Target::Session, &mut slots))?.ok_or(RejectReason::MissingField)?;
            let timestamp_ms = time(take(Target::Time, &mut slots))?;
            let doc_id = id_text(take(Target::JudgedDoc, &mut slots))?.ok_or(RejectReason::MissingField)?;
            let query_id = id_text(take(Target::Query, &mut slots))?;
            let event_id = event_id(mapping, text, take(Target::Id, &mut slots))?;
            Ok(Event::Judgment(Judgment { event_id, session_id, query_id, doc_id, grade, timestamp_ms }))
        }
    }
}

/// The result read into `slots`, the `index`th of its array.
fn shown(slots: [Slot<'_>; RESULT_SLOTS], index: usize, base: u32) -> Result<Shown<'_>, RejectReason> {
    let [doc, position_at, score] = slots.map(|s| s.map(|(_, v)| v));
    let doc_id = id_text(doc)?.ok_or(RejectReason::MissingField)?;
    let position = match position_at {
        None => array_position(index)?,
        Some(p) => position(ordinal(p)?, base)?,
    };
    let score = match score {
        None => None,
        Some(Scalar::I64(v)) => Some(v as f64),
        Some(Scalar::U64(v)) => Some(v as f64),
        Some(Scalar::F64(v)) => Some(v),
        Some(_) => return Err(RejectReason::WrongType),
    };
    Ok(Shown { doc_id, position, score, team: None })
}

/// An identifier: a string or an integer; empty or absent is none.
fn id_text(value: Option<Scalar<'_>>) -> Result<Option<Cow<'_, str>>, RejectReason> {
    match value {
        None => Ok(None),
        Some(Scalar::Str(s)) => Ok(present(Some(s))),
        Some(Scalar::I64(v)) => Ok(Some(Cow::Owned(v.to_string()))),
        Some(Scalar::U64(v)) => Ok(Some(Cow::Owned(v.to_string()))),
        Some(_) => Err(RejectReason::WrongType),
    }
}

/// The event id: the mapped one (required when mapped, as the native
/// `event_id` is), else the message itself.
fn event_id<'a>(mapping: &Mapping, text: &'a str, value: Option<Scalar<'a>>) -> Result<Cow<'a, str>, RejectReason> {
    if !mapping.has_id {
        return Ok(Cow::Borrowed(text));
    }
    id_text(value)?.ok_or(RejectReason::MissingField)
}

/// Event time: ISO 8601 text by UBI's rules, or epoch milliseconds.
fn time(value: Option<Scalar<'_>>) -> Result<i64, RejectReason> {
    let raw = match value.ok_or(RejectReason::MissingField)? {
        Scalar::Str(s) => RawTimestamp::Text(s),
        Scalar::I64(v) => RawTimestamp::Millis(v as f64),
        Scalar::U64(v) => RawTimestamp::Millis(v as f64),
        Scalar::F64(v) => RawTimestamp::Millis(v),
        Scalar::Bool(_) | Scalar::Compound => return Err(RejectReason::WrongType),
    };
    raw.to_millis_with(true)
}

/// A result's mapped position as the integer it was sent as (`base`-based,
/// made 1-based by [`position`]).
fn ordinal(value: Scalar<'_>) -> Result<i64, RejectReason> {
    match value {
        Scalar::I64(v) => Ok(v),
        Scalar::U64(v) => i64::try_from(v).map_err(|_| RejectReason::InvalidPosition),
        _ => Err(RejectReason::WrongType),
    }
}

/// A grade: an integer, or a number with no fraction, within the range.
fn grade(value: Scalar<'_>, max: Grade) -> Result<Grade, RejectReason> {
    let g = match value {
        Scalar::I64(v) => RawGrade::from_i64(v),
        Scalar::U64(v) => RawGrade::from_u64(v),
        Scalar::F64(v) => RawGrade::from_f64(v).ok_or(RejectReason::WrongType)?,
        _ => return Err(RejectReason::WrongType),
    };
    g.within(max)
}

/// A dimension value: strings as sent, numbers and booleans as their JSON
/// text; objects and arrays, like `null` and absence, are `unknown` (as
/// UBI's attributes are: a producer's field of another shape must not
/// reject its impression).
fn dimension(value: Option<Scalar<'_>>) -> Option<Cow<'_, str>> {
    match value? {
        Scalar::Str(s) => Some(s),
        Scalar::I64(v) => Some(Cow::Owned(v.to_string())),
        Scalar::U64(v) => Some(Cow::Owned(v.to_string())),
        Scalar::F64(v) => Some(Cow::Owned(v.to_string())),
        Scalar::Bool(b) => Some(Cow::Borrowed(if b { "true" } else { "false" })),
        Scalar::Compound => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    /// An invented schema: impressions and clicks with different names
    /// for time and doc, nested session, a pointer with escapes.
    pub(super) fn spec() -> MappingSpec {
        MappingSpec {
            session: paths(&["user.session_id", "/ctx/sid"]),
            query: paths(&["query_id"]),
            time: paths(&["ts", "clicked_at"]),
            id: Vec::new(),
            results: paths(&["hits"]),
            result_doc: paths(&["doc.id", "doc_id"]),
            result_position: paths(&["rank"]),
            result_score: paths(&["score"]),
            position_base: 1,
            judged_doc: paths(&["doc"]),
            grade: paths(&["label"]),
            action: paths(&["event_type"]),
            dimensions: vec![
                ("ranker".into(), paths(&["/exp~1arm/a~0b"])),
                ("market".into(), paths(&["geo.markets.1", "geo.market"])),
            ],
        }
    }

    fn limits_with(spec: &MappingSpec) -> DecodeLimits {
        DecodeLimits { mapped: Some(Mapping::new(spec).unwrap()), ..DecodeLimits::default() }
    }

    fn decode_with<'a>(spec: &MappingSpec, json: &'a str) -> Result<Event<'a>, RejectReason> {
        decode(json.as_bytes(), &limits_with(spec))
    }

    fn event(json: &str) -> Result<Event<'_>, RejectReason> {
        decode_with(&spec(), json)
    }

    #[test]
    fn an_impression_reads_every_path() {
        let imp = r#"{"user":{"session_id":"s1","agent":{"deep":[1,2,{"x":null}]}},"query_id":7,"ts":"2023-11-14T22:13:20Z",
            "exp/arm":{"a~b":"v2"},"geo":{"markets":["us","de"]},
            "hits":[{"doc":{"id":"d1"},"rank":1,"score":12.5},{"doc_id":42,"rank":3,"score":2},{"doc_id":"d3","rank":2}]}"#;
        let Ok(Event::Impression(i)) = event(imp) else { panic!("{:?}", event(imp)) };
        assert_eq!((i.session_id.as_ref(), i.query_id.as_deref()), ("s1", Some("7")));
        assert_eq!(i.timestamp_ms, 1_700_000_000_000);
        assert_eq!(i.event_id, imp, "no id path: the message is its id");
        assert_eq!(
            i.results,
            [
                Shown { doc_id: "d1".into(), position: 1, score: Some(12.5), team: None },
                Shown { doc_id: "42".into(), position: 3, score: Some(2.0), team: None },
                Shown { doc_id: "d3".into(), position: 2, score: None, team: None },
            ]
        );
        assert_eq!(i.dimensions.get("ranker").map(|v| v.as_ref()), Some("v2"));
        assert_eq!(i.dimensions.get("market").map(|v| v.as_ref()), Some("de"), "array index 1");
        assert!(i.defines_list);
        assert!(matches!(i.session_id, Cow::Borrowed(_)), "borrowed, not copied");
    }

    #[test]
    fn alternatives_take_the_first_present_whatever_the_order() {
        // `/ctx/sid` only where `user.session_id` is absent or null; `geo.market` where `geo.markets.1` is.
        let imp = |user: &str| {
            format!(
                r#"{{"geo":{{"market":"jp","markets":["us"]}},"ctx":{{"sid":"c9"}},{user}"ts":1,"hits":[{{"doc_id":"a"}}]}}"#
            )
        };
        for (user, want) in
            [("", "c9"), (r#""user":{"session_id":null},"#, "c9"), (r#""user":{"session_id":"s"},"#, "s")]
        {
            let json = imp(user);
            let Ok(Event::Impression(i)) = event(&json) else { panic!("{json}") };
            assert_eq!(i.session_id, want, "{json}");
            assert_eq!(i.dimensions.get("market").map(|v| v.as_ref()), Some("jp"));
            assert_eq!(i.dimensions.get("ranker"), None, "unmapped value: unknown");
        }
        // Later in the message, but the first alternative: it wins.
        let late = r#"{"ctx":{"sid":"c9"},"ts":1,"hits":[],"user":{"session_id":"s"}}"#;
        let Ok(Event::Impression(i)) = event(late) else { panic!() };
        assert_eq!(i.session_id, "s");
        // The second time path, for a click.
        let click = r#"{"user":{"session_id":"s"},"clicked_at":1700000000000,"doc":5,"event_type":"click"}"#;
        let Ok(Event::Judgment(j)) = event(click) else { panic!("{:?}", event(click)) };
        assert_eq!((j.doc_id.as_ref(), j.grade, j.timestamp_ms), ("5", 1, 1_700_000_000_000));
    }

    #[test]
    fn positions_given_or_in_array_order_from_the_base() {
        let mut s = spec();
        let imp = r#"{"ctx":{"sid":"c"},"ts":1,"hits":[{"doc_id":"a"},{"doc_id":"b","rank":0},{"doc_id":"c"}]}"#;
        s.position_base = 0;
        let Ok(Event::Impression(i)) = decode_with(&s, imp) else { panic!() };
        assert_eq!(i.results.iter().map(|r| r.position).collect::<Vec<_>>(), [1, 1, 3], "rank 0 is first, 0-based");
        s.position_base = 1;
        assert_eq!(decode_with(&s, imp), Err(RejectReason::InvalidPosition), "rank 0 is below base 1");
        s.result_position.clear();
        let Ok(Event::Impression(i)) = decode_with(&s, imp) else { panic!() };
        assert_eq!(
            i.results.iter().map(|r| r.position).collect::<Vec<_>>(),
            [1, 2, 3],
            "no position path: array order"
        );
        // The element itself as the doc id.
        s.result_doc = paths(&[""]);
        let ids = r#"{"ctx":{"sid":"c"},"ts":1,"hits":["x",17,"z"]}"#;
        let Ok(Event::Impression(i)) = decode_with(&s, ids) else { panic!() };
        let docs: Vec<(&str, u32)> = i.results.iter().map(|r| (r.doc_id.as_ref(), r.position)).collect();
        assert_eq!(docs, [("x", 1), ("17", 2), ("z", 3)]);
        assert_eq!(decode_with(&s, r#"{"ctx":{"sid":"c"},"ts":1,"hits":["x",1.5]}"#), Err(RejectReason::WrongType));
    }

    #[test]
    fn grade_wins_over_action_and_unmapped_actions_are_ignored() {
        let j = |rest: &str| format!(r#"{{"ctx":{{"sid":"s"}},"clicked_at":1,"doc":"d"{rest}}}"#);
        let grade_of = |json: &str| match event(json) {
            Ok(Event::Judgment(j)) => Ok(j.grade),
            Ok(other) => panic!("{other:?}"),
            Err(r) => Err(r),
        };
        assert_eq!(grade_of(&j(r#","label":2,"event_type":"purchase""#)), Ok(2));
        assert_eq!(grade_of(&j(r#","label":null,"event_type":"purchase""#)), Ok(3));
        assert_eq!(grade_of(&j(r#","label":3.0"#)), Ok(3));
        assert_eq!(event(&j(r#","event_type":"hover""#)), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        // Ignored before anything else is looked at, as UBI's unmapped actions are.
        assert_eq!(event(r#"{"event_type":"hover"}"#), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        assert_eq!(grade_of(&j(r#","label":9"#)), Err(RejectReason::GradeOutOfRange));
        assert_eq!(grade_of(&j(r#","label":-1"#)), Err(RejectReason::GradeOutOfRange));
        assert_eq!(grade_of(&j(r#","label":"2""#)), Err(RejectReason::WrongType));
        assert_eq!(grade_of(&j(r#","label":2.5"#)), Err(RejectReason::WrongType));
        assert_eq!(grade_of(&j(r#","event_type":1"#)), Err(RejectReason::WrongType));
        assert_eq!(grade_of(&j("")), Err(RejectReason::MissingField));
        assert_eq!(grade_of(&j(r#","event_type":"""#)), Err(RejectReason::MissingField));
    }

    /// A member that a path reaches, given twice, at any depth, is
    /// `wrong_type`: which of the two is meant cannot be known. Members no
    /// path reaches may repeat, as the message's own business.
    #[test]
    fn a_member_given_twice_on_a_path_is_wrong_type() {
        let imp = r#""user":{"session_id":"s"},"ts":1700000000000,"hits":[{"doc_id":"a"}]"#;
        let judg = r#""user":{"session_id":"s"},"ts":1700000000000,"doc":"a""#;
        assert!(event(&format!("{{{imp}}}")).is_ok());
        assert!(event(&format!(r#"{{{judg},"label":0}}"#)).is_ok());
        for twice in [
            format!(r#"{{{judg},"label":0,"label":3}}"#),
            format!(r#"{{"user":{{"session_id":"s2"}},{judg},"label":3}}"#),
            format!(r#"{{{judg},"label":3,"geo":{{"market":"us","market":"de"}}}}"#),
            format!(r#"{{{imp},"hits":[{{"doc_id":"b"}}]}}"#),
            r#"{"user":{"session_id":"s"},"ts":1700000000000,"hits":[{"doc_id":"a","doc_id":"b"}]}"#.to_string(),
        ] {
            assert_eq!(event(&twice).map(|_| ()), Err(RejectReason::WrongType), "{twice}");
        }
        // Wherever the second one stands, whatever its value, and for a
        // parent object given twice.
        for twice in [
            format!(r#"{{{judg},"label":null,"label":3}}"#),
            format!(r#"{{{judg},"label":3,"geo":{{"markets":["x","de"],"market":"us","markets":[]}}}}"#),
            r#"{"user":{"session_id":"s"},"user":{},"ts":1700000000000,"doc":"a","label":3}"#.to_string(),
        ] {
            assert_eq!(event(&twice).map(|_| ()), Err(RejectReason::WrongType), "{twice}");
        }
        // Two alternatives of one field, each once: the first wins.
        assert!(event(&format!(r#"{{{judg},"label":3,"geo":{{"market":"us","markets":["x","de"]}}}}"#)).is_ok());
        assert!(event(&format!(r#"{{{judg},"label":3,"other":1,"other":2}}"#)).is_ok());
    }

    #[test]
    fn an_id_path_deduplicates_by_its_value() {
        let mut s = spec();
        s.id = paths(&["meta.event_id"]);
        let j = r#"{"meta":{"event_id":"e1"},"ctx":{"sid":"s"},"clicked_at":1,"doc":"d","label":1}"#;
        let Ok(Event::Judgment(ok)) = decode_with(&s, j) else { panic!() };
        assert_eq!(ok.event_id, "e1");
        let no_id = r#"{"ctx":{"sid":"s"},"clicked_at":1,"doc":"d","label":1}"#;
        assert_eq!(decode_with(&s, no_id), Err(RejectReason::MissingField), "mapped, so required");
    }

    #[test]
    fn every_reject_reason_a_mapping_can_give() {
        let imp = |hits: &str| format!(r#"{{"ctx":{{"sid":"s"}},"ts":1,"hits":{hits}}}"#);
        let j = |rest: &str| format!(r#"{{"ctx":{{"sid":"s"}},"label":1{rest}}}"#);
        for (json, want) in [
            ("{", RejectReason::InvalidJson),
            (r#"{"ts":1} x"#, RejectReason::InvalidJson),
            ("[1]", RejectReason::WrongType),
            ("7", RejectReason::WrongType),
            ("null", RejectReason::WrongType),
            ("1e999", RejectReason::NonFinite),
            (r#"{"ts":1e999}"#, RejectReason::NonFinite),
            (r#"{"ts":1,"hits":[]}"#, RejectReason::MissingField),
            (r#"{"ctx":{"sid":""},"ts":1,"hits":[]}"#, RejectReason::MissingField),
            (r#"{"ctx":{"sid":true},"ts":1,"hits":[]}"#, RejectReason::WrongType),
            (r#"{"ctx":{"sid":{"a":1}},"ts":1,"hits":[]}"#, RejectReason::WrongType),
            (r#"{"ctx":{"sid":"s"},"hits":[]}"#, RejectReason::MissingField),
            (r#"{"ctx":{"sid":"s"},"ts":"yesterday","hits":[]}"#, RejectReason::InvalidTimestamp),
            (r#"{"ctx":{"sid":"s"},"ts":-5,"hits":[]}"#, RejectReason::InvalidTimestamp),
            (r#"{"ctx":{"sid":"s"},"ts":[1],"hits":[]}"#, RejectReason::WrongType),
            (&imp(r#"[{"rank":1}]"#), RejectReason::MissingField),
            (&imp(r#"[{"doc_id":"a","rank":0}]"#), RejectReason::InvalidPosition),
            (&imp(r#"[{"doc_id":"a","rank":99999999999}]"#), RejectReason::InvalidPosition),
            (&imp(r#"[{"doc_id":"a","rank":"1"}]"#), RejectReason::WrongType),
            (&imp(r#"[{"doc_id":"a","score":"high"}]"#), RejectReason::WrongType),
            (&imp(r#"[{"doc_id":"a","score":1e999}]"#), RejectReason::NonFinite),
            (&imp(r#"[{"doc_id":1.5}]"#), RejectReason::WrongType),
            (&j(r#","clicked_at":1"#), RejectReason::MissingField),
            (&j(r#","clicked_at":1,"doc":null"#), RejectReason::MissingField),
            (&j(r#","clicked_at":1,"doc":[]"#), RejectReason::WrongType),
            (&j(r#","doc":"d""#), RejectReason::MissingField),
        ] {
            assert_eq!(event(json), Err(want), "{json}");
        }
        // `hits` not an array: the message is a judgment, and a judgment needs a grade or action.
        assert_eq!(event(&imp("null")), Err(RejectReason::MissingField));
        assert_eq!(event(&imp(r#"{"doc_id":"a"}"#)), Err(RejectReason::MissingField));
        let mut l = limits_with(&spec());
        l.max_results = 2;
        let three = imp(r#"[{"doc_id":"a"},{"doc_id":"b"},{"doc_id":"c"}]"#);
        assert_eq!(decode(three.as_bytes(), &l), Err(RejectReason::TooManyResults));
        let bad_then_many = imp(r#"[{"doc_id":"a","rank":0},{"doc_id":"b"},{"doc_id":"c"}]"#);
        assert_eq!(
            decode(bad_then_many.as_bytes(), &l),
            Err(RejectReason::TooManyResults),
            "as native: the count first"
        );
        let bad_first = imp(r#"[{"doc_id":"a","rank":0},{"doc_id":"b"}]"#);
        assert_eq!(decode(bad_first.as_bytes(), &l), Err(RejectReason::InvalidPosition));
        let no_session = r#"{"ts":1,"hits":[{"doc_id":"a","rank":0}]}"#;
        assert_eq!(
            decode(no_session.as_bytes(), &l),
            Err(RejectReason::MissingField),
            "the message's own fields first"
        );
        assert!(decode(imp(r#"[{"doc_id":"a"},{"doc_id":"b"}]"#).as_bytes(), &l).is_ok());
        l.max_message_bytes = 16;
        assert_eq!(decode(three.as_bytes(), &l), Err(RejectReason::TooLarge));
        assert_eq!(decode(b"{\"ts\":\"\xff\"}", &limits_with(&spec())), Err(RejectReason::InvalidUtf8));
        assert_eq!(
            decode(imp("[]").as_bytes(), &DecodeLimits::default()),
            Err(RejectReason::MissingField),
            "no mapping"
        );
    }

    proptest::proptest! {
        /// Nothing input can reach panics: generated messages of the
        /// invented schema with bytes overwritten or cut short.
        #[test]
        fn no_input_panics(seed in 0u64..1_000, edits in proptest::collection::vec((0usize..512, 0u8..=255), 0..8), cut in 0usize..512) {
            let mut l = limits_with(&spec());
            l.max_results = 3;
            let messages = [
                format!(r#"{{"user":{{"session_id":"s{seed}"}},"ts":{seed},"exp/arm":{{"a~b":[1]}},"hits":[{{"doc":{{"id":"d"}},"rank":{seed}}},{{"doc_id":{seed},"score":1.5}},"x",null,{{"doc_id":"z"}}]}}"#),
                format!(r#"{{"ctx":{{"sid":{seed}}},"clicked_at":"2023-11-14T22:13:20","doc":"d","label":{},"event_type":"click"}}"#, seed % 5),
            ];
            for m in &messages {
                let mut bytes = m.clone().into_bytes();
                for &(at, b) in &edits {
                    let n = bytes.len();
                    if n > 0 {
                        bytes[at % n] = b;
                    }
                }
                bytes.truncate(cut.max(bytes.len() / 2));
                let _ = decode(&bytes, &l);
            }
        }
    }
}
