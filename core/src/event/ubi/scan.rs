//! The usual UBI message read straight from its bytes, ahead of the serde
//! reader: the first half of [`super::decode`].
//!
//! Why by hand: a list shown through `impression` events is one message
//! per result, so the same lists are 2.6 times the native format's
//! messages and 2.9 times its bytes in UBI, and decoding was two thirds of
//! the pipeline's cost of UBI input. Much of that is serde's per-member
//! machinery (a visitor call, an `Option` and a `Result` per member), not
//! the bytes. This reader walks the bytes once and fills the same
//! [`RawUbi`] and dimension slots. Its two habits that matter: a member
//! name the reader knows is recognised by one fixed-length compare up to
//! its closing quote ([`Scan::member`]), not scanned and then matched; a
//! string's end is found eight bytes at a time (the cursor's `special_at`). Measured
//! on `rankpulse-bench ubi` (lists from `rankpulse_testkit::ubi`, half of
//! them shown by impression events; callgrind, `--lists 10000 --rounds
//! 1`), decoding a message, the event built too, costs 4.3k instructions
//! against the serde reader's 6.9k; lists per second in
//! `docs/performance.md`.
//!
//! It reads only what it can read exactly as serde_json does, and answers
//! `None` at anything else: an escape in a string it reads (skipped
//! strings may hold escapes), a control character, a negative, fractional,
//! exponent or beyond-`u64` number where a value is read (an exponent
//! anywhere), a member of the message, `object_id` or `ordinal` given
//! twice, nesting deeper than [`MAX_NESTING`], any syntax error. The serde
//! reader then reads the message from the start and decides (its error,
//! or its value). So this
//! reader is never different from serde (a message it leaves is read
//! twice): `same_as_serde` (proptest,
//! hostile variants of every member) and the `decode_assemble` fuzz target
//! compare the two on every input they make.

use super::attributes::{Capture, Known, Ordinal, RawEventAttributes, Slots};
use super::read::{Hits, Id, Member, RawUbi, Settings};
use crate::event::toolkit::cursor::{MAX_NESTING, Scan, known_member};
use crate::event::toolkit::{RESULTS_CAPACITY, Seen};
use crate::event::{RejectReason, Shown};
use std::borrow::Cow;

/// What the fast read found. Moved once per message; boxing the large
/// variant would allocate once per message instead.
#[allow(clippy::large_enum_variant)]
pub(super) enum Read<'a> {
    Raw(RawUbi<'a>),
    /// `action_name` named an action rankpulse does not score: the message
    /// is ignored, read no further (as the serde reader stops there).
    Unmapped,
}

/// Reads `text` as a UBI query or event, or `None` where the serde reader
/// must decide. `slots` may hold values when it answers `None`.
pub(super) fn read<'a>(text: &'a str, settings: &Settings<'_>, slots: &mut Slots<'a>) -> Option<Read<'a>> {
    let mut s = Scan { text, at: 0 };
    let mut raw = RawUbi::default();
    let mut seen: Seen = Seen::default();
    let mut unmapped = false;
    let read = s.members(|s| {
        let member = s.member()?;
        if !member.first_in(&mut seen) {
            return None;
        }
        match member {
            Member::ActionName => {
                raw.action_key = true;
                raw.action_name = s.optional(Scan::text)?;
                // Read no further: the message is ignored.
                unmapped = raw.action_name.as_ref().is_some_and(|a| settings.ignores(a));
                if unmapped {
                    return None;
                }
            }
            Member::Application => raw.application = s.optional(Scan::text)?.map(|t| t.0),
            Member::QueryId => raw.query_id = s.optional(Scan::id)?,
            Member::ClientId => raw.client_id = s.optional(Scan::id)?,
            Member::SessionId => raw.session_id = s.optional(Scan::id)?,
            Member::Timestamp => raw.timestamp = s.optional(Scan::timestamp)?,
            Member::HitIds => raw.query_response_hit_ids = s.optional(|s| s.hits(settings.max_results))?,
            Member::QueryAttributes => s.capture(settings.capture(false, &mut *slots), 1)?,
            Member::EventAttributes => {
                raw.event_attributes = s.event_attributes(settings.capture(true, &mut *slots))?
            }
            Member::UserQuery => raw.user_query |= s.optional(|s| s.skip(1))?.is_some(),
            Member::Other => s.skip(1)?,
        }
        Some(())
    });
    if unmapped {
        return Some(Read::Unmapped);
    }
    read?;
    s.ws();
    (s.at == text.len()).then_some(Read::Raw(raw))
}

impl<'a> Scan<'a> {
    /// A member name of the message and its colon ([`known_member`]).
    /// Inlined into the member loop of [`read`]: out of line it cost 2% of
    /// decoding a UBI message (callgrind).
    #[inline(always)]
    fn member(&mut self) -> Option<Member> {
        known_member!(self, {
            b'a' "action_name" => Member::ActionName,
            b'a' "application" => Member::Application,
            b'q' "query_id" => Member::QueryId,
            b'q' "query_attributes" => Member::QueryAttributes,
            b'q' "query_response_hit_ids" => Member::HitIds,
            b'c' "client_id" => Member::ClientId,
            b's' "session_id" => Member::SessionId,
            b't' "timestamp" => Member::Timestamp,
            b'e' "event_attributes" => Member::EventAttributes,
            // The spec's other members: names told without a scan, values skipped.
            b'u' "user_query" => Member::UserQuery,
            b'u' "user_id" => Member::Other,
            b'm' "message_type" => Member::Other,
            b'm' "message" => Member::Other,
            b'q' "query_response_id" => Member::Other,
            b'o' "object_id_field" => Member::Other,
        } else Member::Other)
    }

    /// [`Id`]: a string, an integer, `null` as absent.
    fn id(&mut self) -> Option<Id<'a>> {
        match self.peek()? {
            b'"' => self.string().map(|s| Id(Some(Cow::Borrowed(s)))),
            b'n' => self.literal("null").map(|()| Id(None)),
            _ => self.uint().map(|(digits, _)| Id(Some(Cow::Owned(digits.to_string())))),
        }
    }

    /// [`Ordinal`]: an integer, `null` as absent.
    fn ordinal(&mut self) -> Option<Ordinal> {
        match self.peek()? {
            b'n' => self.literal("null").map(|()| Ordinal::Absent),
            _ => self.uint().and_then(|(_, v)| i64::try_from(v).ok()).map(Ordinal::At),
        }
    }

    /// `query_response_hit_ids` as the serde reader reads them ([`Hits`]).
    fn hits(&mut self, max: usize) -> Option<Result<Vec<Shown<'a>>, RejectReason>> {
        let mut hits = Hits::new(max, RESULTS_CAPACITY);
        self.elements(|s| s.id().map(|hit| hits.push(hit)))?;
        Some(hits.end())
    }

    /// A value below `query_attributes` or `event_attributes` (or one of
    /// them) as [`Capture`] reads it: descends where a dimension path goes,
    /// stores a scalar where one ends, skips the rest.
    fn capture(&mut self, mut capture: Capture<'_, '_, 'a>, nesting: u32) -> Option<()> {
        let b = self.peek()?;
        if b == b'n' {
            return self.literal("null");
        }
        if b == b'{' {
            if nesting >= MAX_NESTING {
                return None;
            }
            return self.members(|s| {
                let key = s.key()?;
                s.capture_member(&mut capture, key, nesting + 1)
            });
        }
        if capture.depth == 0 {
            return None;
        }
        match b {
            b'"' => {
                let s = self.string()?;
                capture.store(Some(Cow::Borrowed(s)));
            }
            b't' => {
                self.literal("true")?;
                capture.store(Some(Cow::Borrowed("true")));
            }
            b'f' => {
                self.literal("false")?;
                capture.store(Some(Cow::Borrowed("false")));
            }
            b'[' => self.skip(nesting)?,
            _ => {
                let (digits, _) = self.uint()?;
                capture.store(Some(Cow::Owned(digits.to_string())));
            }
        }
        Some(())
    }

    /// The value of member `key` of an object `capture` reads, at
    /// `nesting`: read for the paths through it, else skipped.
    fn capture_member(&mut self, capture: &mut Capture<'_, '_, 'a>, key: &str, nesting: u32) -> Option<()> {
        match capture.through(key) {
            0 => self.skip(nesting),
            mask => self.capture(capture.member(mask), nesting),
        }
    }

    /// `event_attributes` as [`super::attributes::EventAttributesSeed`]
    /// reads it.
    fn event_attributes(&mut self, mut capture: Capture<'_, '_, 'a>) -> Option<Option<RawEventAttributes<'a>>> {
        self.optional(|s| {
            let mut out = RawEventAttributes::default();
            s.members(|s| {
                let key = s.key_among(&["object", "position"])?;
                match key {
                    "object" => out.object_id = s.holder(capture.member(capture.through(key)), Scan::id)?,
                    "position" => out.ordinal = s.holder(capture.member(capture.through(key)), Scan::ordinal)?,
                    _ => s.capture_member(&mut capture, key, 2)?,
                }
                Some(())
            })?;
            Some(out)
        })
    }

    /// `object` or `position` as `attributes::Holder` reads it:
    /// its known member `K`, and the rest for the dimension paths through
    /// it.
    fn holder<K: Known<'a>>(
        &mut self,
        mut capture: Capture<'_, '_, 'a>,
        known_value: fn(&mut Self) -> Option<K>,
    ) -> Option<Option<K>> {
        let mut known: Option<K> = None;
        self.optional(|s| {
            s.members(|s| {
                let key = s.key_among(&[K::NAME, "object_id_field"])?;
                if key != K::NAME {
                    return s.capture_member(&mut capture, key, 3);
                }
                if known.is_some() {
                    return None;
                }
                let value = known_value(s)?;
                capture.store_known(&value);
                known = Some(value);
                Some(())
            })
        })?;
        Some(known)
    }
}

#[cfg(test)]
mod tests {
    use super::super::{UbiPath, decode, decode_by_serde};
    use super::*;
    use crate::event::toolkit::cursor::strategies::{self, Words};
    use crate::event::{DecodeLimits, Format};
    use proptest::prelude::*;

    /// Dimension paths of every kind the readers walk: a member of each
    /// attributes object, one below a known member, one two deep.
    fn limits() -> DecodeLimits {
        let mut l = DecodeLimits { max_results: 3, ..DecodeLimits::default() };
        let path = |p: &str| UbiPath::parse(p).expect("a valid path");
        l.ubi.dimensions = [
            ("ranker", "query_attributes.ranker"),
            ("app", "application"),
            ("arm", "event_attributes.arm"),
            ("oid", "event_attributes.object.object_id"),
            ("ord", "event_attributes.position.ordinal"),
            ("deep", "query_attributes.x.y"),
            ("side", "event_attributes.object.x"),
        ]
        .into_iter()
        .map(|(label, p)| (label.to_string(), path(p)))
        .collect();
        l
    }

    fn settings(l: &DecodeLimits, format: Format) -> Settings<'_> {
        Settings::new(format, l)
    }

    /// Scalars as producers send them; the edges every reader is tried
    /// on are drawn too ([`strategies::EDGES`]).
    const SCALARS: &[&str] = &[
        r#""impression""#,
        r#""click""#,
        r#""purchase""#,
        r#""search""#,
        r#""c1""#,
        r#""2024-12-10T00:01:29.378Z""#,
        "1733788889378",
    ];
    /// Members of the messages and of their attributes.
    const KEYS: &[&str] = &[
        "action_name",
        "application",
        "query_id",
        "client_id",
        "session_id",
        "timestamp",
        "query_response_hit_ids",
        "query_attributes",
        "event_attributes",
        "object",
        "position",
        "object_id",
        "ordinal",
        "ranker",
        "arm",
        "x",
        "y",
        "message",
        r"m\u0031",
        // Names read without a scan, and names one byte away from known
        // ones, or a known one escaped: all must be told apart exactly.
        "message_type",
        "user_query",
        "user_id",
        "query_response_id",
        "object_id_field",
        "query_idx",
        "query_i",
        "ordinals",
        "objec",
        "application ",
        r"query\u005fid",
        r"ordin\u0061l",
        r"user\u005fquery",
        "user_querys",
    ];

    const WORDS: Words = Words { scalars: SCALARS, keys: KEYS };

    /// A member of `event_attributes.object` or `.position`, or of the
    /// attributes themselves.
    fn attribute_members(known: &'static str, typical: &'static [&'static str]) -> impl Strategy<Value = String> {
        let members = vec![
            WORDS.member(known, typical),
            WORDS.member("object_id_field", &[r#""sku""#]),
            WORDS.member("x", &[r#""s""#, "3", "true"]),
        ];
        WORDS.object(members)
    }

    /// A UBI query or event as producers write it, each member kept or
    /// not and sometimes any value instead, then perhaps cut, or with one
    /// byte put in.
    fn message() -> impl Strategy<Value = String> {
        let ids: &'static [&'static str] = &[r#""d1""#, "42", r#""D0000007""#];
        let event_attributes = WORDS.object(vec![
            attribute_members("object_id", ids).prop_map(|v| format!("\"object\":{v}")).boxed(),
            attribute_members("ordinal", &["0", "1", "3"]).prop_map(|v| format!("\"position\":{v}")).boxed(),
            WORDS.member("arm", &[r#""b""#, "2"]),
        ]);
        let query_attributes = WORDS.object(vec![
            WORDS.member("ranker", &[r#""v2""#, "5"]),
            WORDS.member("x", &[r#"{"y":"deep"}"#, r#"{"y":{"z":1}}"#]),
            Just(r#""filters":{"brand":["a","b"]},"page":1,"score":0.5"#.to_string()).boxed(),
        ]);
        let top = WORDS.object(vec![
            WORDS.member("action_name", &[r#""impression""#, r#""click""#, r#""purchase""#, r#""hover""#]),
            WORDS.member("application", &[r#""shop""#]),
            WORDS.member("query_id", &[r#""q-1""#, "9"]),
            WORDS.member("client_id", &[r#""c-1""#]),
            WORDS.member("session_id", &[r#""s-1""#]),
            WORDS.member("timestamp", &["1763780000000", r#""2025-11-22T02:53:20.017Z""#]),
            WORDS.member("query_response_hit_ids", &[r#"["a","b",7]"#, "[]", r#"["a",null]"#, r#"["a","b","c","d"]"#]),
            prop_oneof![4 => query_attributes.boxed(), 1 => WORDS.value().boxed()]
                .prop_map(|v| format!("\"query_attributes\":{v}"))
                .boxed(),
            prop_oneof![4 => event_attributes.boxed(), 1 => WORDS.value().boxed()]
                .prop_map(|v| format!("\"event_attributes\":{v}"))
                .boxed(),
            WORDS.member("user_query", &[r#""q""#, "null"]),
        ]);
        strategies::damaged(top)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4096))]

        /// Whatever the fast reader decides is what the serde reader
        /// decides, in every format (for an event, a query, either).
        #[test]
        fn same_as_serde(text in message()) {
            let l = limits();
            for format in [Format::Ubi, Format::UbiEvents, Format::UbiQueries] {
                prop_assert_eq!(
                    decode(format, text.as_bytes(), &l),
                    decode_by_serde(format, text.as_bytes(), &l),
                    "{:?} {}", format, text
                );
            }
        }
    }

    /// Nesting beyond [`MAX_NESTING`] is left to serde (which refuses
    /// more than 127 levels where it reads, none where it skips), in every
    /// value this reader reads or skips.
    #[test]
    fn deep_nesting_is_left_to_serde() {
        let l = limits();
        for depth in [MAX_NESTING as usize, 200] {
            let deep = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            let deep_object = format!("{}1{}", r#"{"x":"#.repeat(depth), "}".repeat(depth));
            for text in [
                format!(r#"{{"message":{deep},"action_name":"click"}}"#),
                format!(r#"{{"event_attributes":{{"arm":{deep}}},"action_name":"click"}}"#),
                format!(r#"{{"query_attributes":{deep_object}}}"#),
                format!(r#"{{"event_attributes":{{"object":{{"x":{deep_object}}}}}}}"#),
            ] {
                for format in [Format::Ubi, Format::UbiQueries] {
                    assert!(read(&text, &settings(&l, format), &mut None).is_none(), "{depth} {text}");
                    assert_eq!(decode(format, text.as_bytes(), &l), decode_by_serde(format, text.as_bytes(), &l));
                }
            }
        }
    }

    /// Integers at the edges of `i64` and `u64` in every place a number is
    /// read: the same result as serde's, and read here while they fit (an
    /// `i64` for an ordinal, a `u64` elsewhere).
    #[test]
    fn integers_at_the_limits_are_read_as_serde_reads_them() {
        let l = limits();
        for n in ["9223372036854775807", "9223372036854775808", "18446744073709551615", "18446744073709551616"] {
            for (place, text) in [
                (
                    "ordinal",
                    format!(
                        r#"{{"action_name":"impression","client_id":"c","timestamp":1,"event_attributes":{{"object":{{"object_id":"d"}},"position":{{"ordinal":{n}}}}}}}"#
                    ),
                ),
                (
                    "object_id",
                    format!(
                        r#"{{"action_name":"click","client_id":"c","timestamp":1,"event_attributes":{{"object":{{"object_id":{n}}}}}}}"#
                    ),
                ),
                ("timestamp", format!(r#"{{"client_id":"c","timestamp":{n}}}"#)),
                ("dimension", format!(r#"{{"client_id":"c","timestamp":1,"query_attributes":{{"ranker":{n}}}}}"#)),
                ("hit id", format!(r#"{{"client_id":"c","timestamp":1,"query_response_hit_ids":[{n}]}}"#)),
            ] {
                let fast = read(&text, &settings(&l, Format::Ubi), &mut None).is_some();
                // An ordinal is an i64 in serde's reader.
                let fits = if place == "ordinal" { n.parse::<i64>().is_ok() } else { n.parse::<u64>().is_ok() };
                assert_eq!(fast, fits, "{place} {n}");
                assert_eq!(
                    decode(Format::Ubi, text.as_bytes(), &l),
                    decode_by_serde(Format::Ubi, text.as_bytes(), &l),
                    "{place} {n}"
                );
            }
        }
    }

    /// Escapes in skipped strings are checked as serde_json checks them.
    #[test]
    fn escapes_in_skipped_strings_are_checked() {
        for (body, ok) in [
            (r"\u00e9\ud800", true),
            (r#"\/\b\f\n\r\t\\\""#, true),
            (r"\u12", false),
            (r"\x", false),
            (r"\u00g0", false),
        ] {
            let text = format!(r#""{body}""#);
            let mut scan = Scan { text: &text, at: 0 };
            assert_eq!(scan.skip_string().is_some(), ok, "{body}");
            assert_eq!(serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok(), ok, "serde on {body}");
        }
    }

    /// A member whose name begins like a known one, or is a known one with
    /// one byte escaped, is told apart as serde tells it: the near misses
    /// are skipped members (read here), the escaped ones left to serde.
    #[test]
    fn names_near_known_ones_are_told_apart() {
        let l = limits();
        let near = [
            "query_idx",
            "query_i",
            "action_names",
            "timestam",
            "client_id_",
            "event_attribute",
            "object_ids",
            "ordinals",
            "positio",
        ];
        let escaped = [r"query\u005fid", r"action_nam\u0065", r"ordin\u0061l", r"obj\u0065ct"];
        for (name, fast) in near.iter().map(|n| (n, true)).chain(escaped.iter().map(|n| (n, false))) {
            for (name_at, value) in
                [("top", r#""q-2""#), ("attributes", r#"{"object_id":"D2"}"#), ("position", "5"), ("object", r#""D3""#)]
            {
                let member = format!(r#""{name}":{value}"#);
                let (top, attributes, position, object) = match name_at {
                    "top" => (format!("{member},"), String::new(), String::new(), String::new()),
                    "attributes" => (String::new(), format!("{member},"), String::new(), String::new()),
                    "position" => (String::new(), String::new(), format!("{member},"), String::new()),
                    _ => (String::new(), String::new(), String::new(), format!("{member},")),
                };
                let text = format!(
                    r#"{{{top}"action_name":"impression","query_id":"q-1","client_id":"c-1","timestamp":1763780000000,"event_attributes":{{{attributes}"object":{{{object}"object_id":"D1"}},"position":{{{position}"ordinal":3}}}}}}"#
                );
                for format in [Format::Ubi, Format::UbiEvents] {
                    assert_eq!(
                        decode(format, text.as_bytes(), &l),
                        decode_by_serde(format, text.as_bytes(), &l),
                        "{text}"
                    );
                    let mut slots = None;
                    assert_eq!(read(&text, &settings(&l, format), &mut slots).is_some(), fast, "{text}");
                }
            }
        }
    }

    /// The messages UBI producers send are read here, not left to serde,
    /// so that `same_as_serde` compares two readers, not one with itself.
    #[test]
    fn the_usual_messages_are_read_without_serde() {
        let l = limits();
        for text in [
            r#"{"application":"shop","action_name":"impression","query_id":"q-1","client_id":"c-1","session_id":"s-1","timestamp":1763780000000,"user_query":"q","message_type":"IMPRESSION","message":null,"event_attributes":{"object":{"object_id":"D0000001","object_id_field":"sku"},"position":{"ordinal":3}}}"#,
            r#"{"application":"shop","action_name":"click","query_id":"q-1","session_id":"s-1","timestamp":"2025-11-22T02:53:20.017Z","event_attributes":{"object":{"object_id":123456},"position":{"ordinal":0},"browser":"x","arm":"b"}}"#,
            r#"{"action_name":"hover","query_id":"q-1","client_id":"c-1","timestamp":1763780000050,"event_attributes":null}"#,
            r#"{"application":"shop","query_id":"q-1","client_id":"c-1","user_query":"q 1","query_attributes":{"ranker":"v2","market":"de","filters":{"brand":["a","b"]},"page":1,"score":0.5},"object_id_field":"sku","timestamp":1763780000000,"query_response_id":"r-1","query_response_hit_ids":["a","b",7]}"#,
        ] {
            for format in [Format::Ubi, Format::UbiEvents] {
                let mut slots = None;
                assert!(read(text, &settings(&l, format), &mut slots).is_some(), "{format:?} {text}");
            }
        }
    }
}
