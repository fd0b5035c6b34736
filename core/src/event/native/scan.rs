//! rankpulse's own event read straight from its bytes, ahead of the serde
//! reader: the first half of [`super::decode`].
//!
//! Why by hand: decoding was half of the pipeline's instructions on
//! rankpulse's own events (`rankpulse-bench ubi`'s native run under
//! callgrind: 199M of 345M for 10,000 lists), and most of it is serde's
//! per-member machinery (a visitor call, an `Option` and a `Result` per
//! member and per result), not the bytes. The bare consumer the daemon is
//! measured against decodes the same messages with serde_json, so that
//! machinery was most of what the daemon spent beyond it on a judgment.
//! This reader walks the bytes once with [`Scan`] and fills the same
//! [`RawEvent`], which [`super::decode`] then checks as before.
//!
//! It reads only what it can read exactly as serde_json does and answers
//! `None` at anything else: an escape in a string it reads (skipped
//! strings may hold escapes), a control character, a number where serde
//! might round differently or visit another type (a negative integer
//! where an unsigned one is read, an exponent anywhere, a `score` with
//! more than 2^53 in its digits or 22 after its point), a member of the
//! event or of a result given twice (a dimension or an unknown member
//! given twice is read: the later one wins, as in serde's map and as
//! serde skips), an object read as an array, nesting deeper than the cursor's
//! limit, any syntax error. The serde reader then reads the message from
//! the start and decides. `same_as_serde` (proptest, hostile variants of
//! every member) and the `decode_assemble` fuzz target compare the two on
//! every input they make.

use super::{DimValue, RawEvent, RawShown};
use crate::event::toolkit::cursor::{Scan, known_member};
use crate::event::toolkit::{RESULTS_CAPACITY, RawGrade, Seen, Text};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// Reads `text` as a rankpulse event, or `None` where the serde reader
/// must decide.
pub(super) fn read(text: &str) -> Option<RawEvent<'_>> {
    let mut s = Scan { text, at: 0 };
    let mut raw = RawEvent::default();
    let mut seen: Seen = Seen::default();
    s.members(|s| {
        let member = s.native_member()?;
        if member != Member::Other && !seen.first(member as usize) {
            return None;
        }
        match member {
            Member::Type => raw.kind = s.optional(Scan::text)?,
            Member::EventId => raw.event_id = s.optional(Scan::text)?,
            Member::SessionId => raw.session_id = s.optional(Scan::text)?,
            Member::QueryId => raw.query_id = s.optional(Scan::text)?,
            Member::Timestamp => raw.timestamp = s.optional(Scan::timestamp)?,
            Member::Results => raw.results = s.optional(Scan::results)?,
            Member::Dimensions => raw.dimensions = s.optional(Scan::dimensions)?,
            Member::DocId => raw.doc_id = s.optional(Scan::text)?,
            Member::Grade => raw.grade = s.optional(Scan::grade)?,
            Member::Action => raw.action = s.optional(Scan::text)?,
            Member::Randomized => raw.randomized = s.optional(Scan::boolean)?,
            Member::Other => s.skip(1)?,
        }
        Some(())
    })?;
    s.ws();
    (s.at == text.len()).then_some(raw)
}

/// A member of the event, as [`Scan::native_member`] names it; the
/// discriminant is its bit among the members seen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Member {
    Type,
    EventId,
    SessionId,
    QueryId,
    Timestamp,
    Results,
    Dimensions,
    DocId,
    Grade,
    Action,
    Randomized,
    /// Any other name: skipped.
    Other,
}

/// A member of a result, as [`Scan::result_member`] names it; the
/// discriminant is its bit among the members seen.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ResultMember {
    DocId,
    Position,
    Score,
    Team,
    Other,
}

/// `10^k` for the `k` digits after a point that [`Scan::score`] reads:
/// each exact in an `f64` (as in serde_json's own table).
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20,
    1e21, 1e22,
];

impl<'a> Scan<'a> {
    /// A member name of the event and its colon ([`known_member`]).
    fn native_member(&mut self) -> Option<Member> {
        known_member!(self, {
            b't' "type" => Member::Type,
            b't' "timestamp" => Member::Timestamp,
            b'e' "event_id" => Member::EventId,
            b's' "session_id" => Member::SessionId,
            b'q' "query_id" => Member::QueryId,
            b'r' "results" => Member::Results,
            b'r' "randomized" => Member::Randomized,
            b'd' "doc_id" => Member::DocId,
            b'd' "dimensions" => Member::Dimensions,
            b'g' "grade" => Member::Grade,
            b'a' "action" => Member::Action,
        } else Member::Other)
    }

    fn boolean(&mut self) -> Option<bool> {
        match self.peek()? {
            b't' => self.literal("true").map(|()| true),
            _ => self.literal("false").map(|()| false),
        }
    }

    /// [`RawGrade`] from an unsigned integer, as its `visit_u64` takes it.
    fn grade(&mut self) -> Option<RawGrade> {
        self.uint().map(|(_, v)| RawGrade::from_u64(v))
    }

    /// `results`: an array of result objects.
    fn results(&mut self) -> Option<Vec<RawShown<'a>>> {
        let mut results = Vec::with_capacity(RESULTS_CAPACITY);
        self.elements(|s| s.result().map(|r| results.push(r)))?;
        Some(results)
    }

    fn result(&mut self) -> Option<RawShown<'a>> {
        let mut r = RawShown { doc_id: None, position: None, score: None, team: None };
        let mut seen: Seen = Seen::default();
        self.members(|s| {
            let member = s.result_member()?;
            if member != ResultMember::Other && !seen.first(member as usize) {
                return None;
            }
            match member {
                ResultMember::DocId => r.doc_id = s.optional(Scan::text)?,
                // serde's i64 takes a u64 up to i64::MAX.
                ResultMember::Position => {
                    r.position = s.optional(|s| s.uint().and_then(|(_, v)| i64::try_from(v).ok()))?
                }
                ResultMember::Score => r.score = s.optional(Scan::score)?,
                ResultMember::Team => r.team = s.optional(Scan::text)?,
                ResultMember::Other => s.skip(3)?,
            }
            Some(())
        })?;
        Some(r)
    }

    /// A member name of a result and its colon ([`known_member`]).
    fn result_member(&mut self) -> Option<ResultMember> {
        known_member!(self, {
            b'd' "doc_id" => ResultMember::DocId,
            b'p' "position" => ResultMember::Position,
            b's' "score" => ResultMember::Score,
            b't' "team" => ResultMember::Team,
        } else ResultMember::Other)
    }

    /// A score as serde_json reads an `f64`, where that is exact for any
    /// of its float parsers: digits whose value is at most 2^53 (exact in
    /// an `f64`) and at most 22 of them after the point (10^k exact), so
    /// one division rounds once, correctly; an integer as the `u64` or
    /// `i64` it visits (`-0` included: serde gives -0.0 there).
    fn score(&mut self) -> Option<f64> {
        self.ws();
        let negative = self.byte() == Some(b'-');
        self.at += usize::from(negative);
        let first = self.byte()?;
        if !first.is_ascii_digit() {
            return None;
        }
        let mut significand = 0u64;
        let mut digits = 0usize;
        while let Some(b) = self.byte().filter(u8::is_ascii_digit) {
            significand = significand.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            digits += 1;
            self.at += 1;
        }
        if first == b'0' && digits > 1 {
            return None;
        }
        let mut after_point = 0usize;
        if self.byte() == Some(b'.') {
            self.at += 1;
            while let Some(b) = self.byte().filter(u8::is_ascii_digit) {
                significand = significand.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
                after_point += 1;
                self.at += 1;
            }
            if after_point == 0 {
                return None;
            }
        }
        if matches!(self.byte(), Some(b'e' | b'E')) || significand > 1 << 53 {
            return None;
        }
        let magnitude = significand as f64 / *POW10.get(after_point)?;
        Some(if negative { -magnitude } else { magnitude })
    }

    /// `dimensions`: an object of scalars, as [`DimValue`] reads them
    /// (a later member of the same name replaces the earlier's value, as
    /// in serde's map).
    fn dimensions(&mut self) -> Option<BTreeMap<Text<'a>, DimValue<'a>>> {
        let mut dimensions = BTreeMap::new();
        self.members(|s| {
            let key = s.key()?;
            let value = match s.peek()? {
                b'"' => Some(Cow::Borrowed(s.string()?)),
                b't' => s.literal("true").map(|()| Some(Cow::Borrowed("true")))?,
                b'f' => s.literal("false").map(|()| Some(Cow::Borrowed("false")))?,
                b'n' => s.literal("null").map(|()| None)?,
                // A u64's text is its digits (no leading zeros in JSON).
                _ => Some(Cow::Owned(s.uint()?.0.to_string())),
            };
            dimensions.insert(Text(Cow::Borrowed(key)), DimValue(value));
            Some(())
        })?;
        Some(dimensions)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{decode, decode_by_serde};
    use super::*;
    use crate::event::toolkit::cursor::strategies::{self, Words};
    use crate::event::{DecodeLimits, Event, RejectReason};
    use proptest::prelude::*;

    /// Scalars as producers send them; the edges every reader is tried
    /// on are drawn too ([`strategies::EDGES`]).
    const SCALARS: &[&str] = &[
        r#""impression""#,
        r#""judgment""#,
        r#""click""#,
        r#""s1""#,
        r#""A""#,
        r#""B""#,
        r#""2024-12-10T00:01:29.378Z""#,
        "1733788889378",
    ];
    /// Members of the event and of its results, names near them, and
    /// known ones escaped.
    const KEYS: &[&str] = &[
        "type",
        "event_id",
        "session_id",
        "query_id",
        "timestamp",
        "results",
        "dimensions",
        "doc_id",
        "grade",
        "action",
        "randomized",
        "position",
        "score",
        "team",
        "ranker",
        "x",
        "typ",
        "types",
        "doc_ids",
        "scor",
        r"t\u0079pe",
        r"doc\u005fid",
        r"sc\u006fre",
    ];

    const WORDS: Words = Words { scalars: SCALARS, keys: KEYS };

    /// An impression or judgment as producers write it, each member kept
    /// or not and sometimes any value instead, then perhaps cut, or with
    /// one byte put in.
    fn message() -> impl Strategy<Value = String> {
        let result = WORDS.object(vec![
            WORDS.member("doc_id", &[r#""d1""#, r#""d2""#]),
            WORDS.member("position", &["1", "2", "0"]),
            WORDS.member("score", &["0.5", "12", "-1.25", "3.14159"]),
            WORDS.member("team", &[r#""A""#, r#""B""#]),
        ]);
        let results = prop_oneof![
            4 => prop::collection::vec(result, 0..4).prop_map(|v| format!("[{}]", v.join(","))).boxed(),
            1 => WORDS.value().boxed(),
        ];
        let dimensions = WORDS.object(vec![
            WORDS.member("ranker", &[r#""v2""#, "5", "true", "null"]),
            WORDS.member("market", &[r#""de""#]),
        ]);
        let top = WORDS.object(vec![
            WORDS.member("type", &[r#""impression""#, r#""judgment""#, r#""other""#]),
            WORDS.member("event_id", &[r#""e1""#]),
            WORDS.member("session_id", &[r#""s1""#]),
            WORDS.member("query_id", &[r#""q1""#, "null"]),
            WORDS.member("timestamp", &["1763780000000", r#""2025-11-22T02:53:20.017Z""#]),
            results.prop_map(|v| format!("\"results\":{v}")).boxed(),
            prop_oneof![4 => dimensions.boxed(), 1 => WORDS.value().boxed()]
                .prop_map(|v| format!("\"dimensions\":{v}"))
                .boxed(),
            WORDS.member("doc_id", &[r#""d1""#]),
            WORDS.member("grade", &["2", "0", "4", "2.0"]),
            WORDS.member("action", &[r#""click""#, r#""purchase""#, r#""hover""#]),
            WORDS.member("randomized", &["true", "false"]),
        ]);
        strategies::damaged(top)
    }

    /// The scores of an impression's results, as bits (`==` on `f64`
    /// cannot tell -0.0 from 0.0).
    fn score_bits(event: &Result<Event<'_>, RejectReason>) -> Vec<Option<u64>> {
        match event {
            Ok(Event::Impression(i)) => i.results.iter().map(|r| r.score.map(f64::to_bits)).collect(),
            _ => Vec::new(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Whatever the fast reader decides is what the serde reader decides.
        #[test]
        fn same_as_serde(text in message()) {
            let l = DecodeLimits { max_results: 3, ..DecodeLimits::default() };
            let (fast, serde) = (decode(text.as_bytes(), &l), decode_by_serde(text.as_bytes(), &l));
            prop_assert_eq!(&fast, &serde, "{}", text);
            prop_assert_eq!(score_bits(&fast), score_bits(&serde), "{}", text);
        }

        /// Any decimal a producer may write as a score is the `f64` serde
        /// reads, to the bit, whether this reader reads it or leaves it.
        #[test]
        fn scores_are_read_as_serde_reads_them(
            negative in any::<bool>(),
            int in "(0|[1-9][0-9]{0,19})",
            fraction in proptest::option::of("[0-9]{1,25}"),
        ) {
            let number = format!("{}{int}{}", if negative { "-" } else { "" }, fraction.map(|f| format!(".{f}")).unwrap_or_default());
            let text = format!(r#"{{"type":"impression","event_id":"e","session_id":"s","timestamp":1,"results":[{{"doc_id":"d","score":{number}}}]}}"#);
            let l = DecodeLimits::default();
            let (fast, serde) = (decode(text.as_bytes(), &l), decode_by_serde(text.as_bytes(), &l));
            prop_assert_eq!(&fast, &serde, "{}", number);
            prop_assert_eq!(score_bits(&fast), score_bits(&serde), "{}", number);
        }
    }

    /// Every number a slot may hold, at the edges of what this reader
    /// reads (`i64`, `u64`, 2^53, 22 digits after the point) and just
    /// beyond, in every slot that reads one: the same event as serde's.
    #[test]
    fn numbers_in_every_slot_are_read_as_serde_reads_them() {
        let l = DecodeLimits::default();
        let numbers = [
            "0",
            "1",
            "-0",
            "-1",
            "01",
            "1.",
            "1.5",
            "-1.5",
            "0.1",
            "2.0",
            "1e3",
            "1E-3",
            "-",
            "9007199254740992",
            "9007199254740993",
            "9007199254740992.5",
            "0.1234567890123456789012",
            "0.12345678901234567890123",
            "9223372036854775807",
            "9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
        ];
        for n in numbers {
            for text in [
                format!(
                    r#"{{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{{"doc_id":"d","score":{n}}}]}}"#
                ),
                format!(
                    r#"{{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{{"doc_id":"d","position":{n}}}]}}"#
                ),
                format!(
                    r#"{{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[],"dimensions":{{"x":{n}}}}}"#
                ),
                format!(
                    r#"{{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","timestamp":1,"grade":{n}}}"#
                ),
                format!(
                    r#"{{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","action":"click","timestamp":{n}}}"#
                ),
                format!(
                    r#"{{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","action":"click","timestamp":1,"other":{n}}}"#
                ),
            ] {
                let (fast, serde) = (decode(text.as_bytes(), &l), decode_by_serde(text.as_bytes(), &l));
                assert_eq!(fast, serde, "{text}");
                assert_eq!(score_bits(&fast), score_bits(&serde), "{text}");
            }
        }
    }

    /// Where JSON or serde's types leave room, the fast reader takes the
    /// same way: bytes after the event, a dimension given twice (the later
    /// value wins), a result member given twice.
    #[test]
    fn edges_of_the_grammar_are_read_as_serde_reads_them() {
        let l = DecodeLimits::default();
        let judgment =
            r#"{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","action":"click","timestamp":1}"#;
        for text in [
            format!("{judgment} "),
            format!("{judgment}x"),
            format!("{judgment}}}"),
            format!("{judgment},"),
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[],"dimensions":{"x":"a","x":"b"}}"#.to_string(),
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[],"dimensions":{"x":"a","x":null}}"#.to_string(),
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{"doc_id":"d","doc_id":"e"}]}"#.to_string(),
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{"doc_id":"d"},]}"#.to_string(),
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{"doc_id":"d",}]}"#.to_string(),
        ] {
            assert_eq!(decode(text.as_bytes(), &l), decode_by_serde(text.as_bytes(), &l), "{text}");
        }
    }

    /// The events producers send are read here, not left to serde, so that
    /// `same_as_serde` compares two readers, not one with itself.
    #[test]
    fn the_usual_events_are_read_without_serde() {
        for text in [
            r#"{"type":"impression","event_id":"i-1","session_id":"s-1","query_id":"q-1","timestamp":1763780000000,"results":[{"doc_id":"d1","position":1,"score":0.93},{"doc_id":"d2","position":2,"score":-1.5,"team":"A"}],"dimensions":{"ranker":"v2","market":"de","experiment":42,"beta":true,"off":null},"randomized":false}"#,
            r#"{"type":"judgment","event_id":"j-1","session_id":"s-1","query_id":"q-1","doc_id":"d1","action":"click","timestamp":1763780001000}"#,
            r#"{ "type" : "judgment", "event_id" : "j-2", "session_id" : "s-1", "doc_id" : "d1", "grade" : 3, "timestamp" : "2025-11-22T02:53:20.017Z", "rater" : {"id": 7, "notes": ["caf\u00e9"]} }"#,
        ] {
            assert!(read(text).is_some(), "{text}");
        }
    }

    /// What is left to serde, each for the reason the module names.
    #[test]
    fn the_unusual_is_left_to_serde() {
        for text in [
            r#"{"type":"judgment","event_id":"j\u002d1","session_id":"s","doc_id":"d","grade":1,"timestamp":1}"#,
            r#"{"type":"judgment","type":"judgment","event_id":"j","session_id":"s","doc_id":"d","grade":1,"timestamp":1}"#,
            r#"{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","grade":-1,"timestamp":1}"#,
            r#"{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","grade":2.0,"timestamp":1}"#,
            r#"{"type":"judgment","event_id":"j","session_id":"s","doc_id":"d","grade":1,"timestamp":1.5e12}"#,
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{"doc_id":"d","score":1e-3}]}"#,
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[{"doc_id":"d","score":0.12345678901234567890123}]}"#,
            r#"{"type":"impression","event_id":"i","session_id":"s","timestamp":1,"results":[["d",1]]}"#,
            r#"["judgment","j","s"]"#,
        ] {
            assert!(read(text).is_none(), "{text}");
            let l = DecodeLimits::default();
            assert_eq!(decode(text.as_bytes(), &l), decode_by_serde(text.as_bytes(), &l), "{text}");
        }
    }
}
