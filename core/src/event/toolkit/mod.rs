//! The decoding toolkit: what the three decoders of the first stage
//! (Kafka message → **decode** → assemble → finalize → metric engine →
//! accumulators → publish) share, so that a string, a time or a failed
//! parse means the same in rankpulse's own events ([`super::native`]), in
//! UBI ([`super::ubi`]) and in mapped JSON ([`super::mapped`]).
//!
//! It owns the field values every schema reads ([`Text`], [`ScalarText`],
//! [`RawTimestamp`], [`RawGrade`]) and the rules that make them an event's
//! fields ([`present`], [`position`]), the refusal of a member given twice
//! ([`Seen`]), the reason a message that cannot be read gets ([`reject`]),
//! the serde pieces the hand-written readers are built from ([`visit`]),
//! and the byte cursor the fast readers run ahead of serde with
//! ([`cursor`], with its dispatch on member names, `known_member!`). All of
//! it is plain, generic or a macro: nothing here allocates or dispatches
//! dynamically per message beyond what the decoders did with their own
//! copies.

use super::RejectReason;
use crate::metrics::Grade;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::borrow::Cow;
use std::fmt;

pub(super) mod cursor;
mod iso;
mod reject;
pub(super) mod visit;

pub(super) use reject::{classify, message_text};
use visit::{null_is, str_is};

/// A JSON string borrowed from the message when it has no escapes (serde's
/// own `Option<Cow<str>>` always copies).
pub(super) struct Text<'a>(pub(super) Cow<'a, str>);

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            str_is!(Text);
            fn visit_string<E: de::Error>(self, v: String) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl PartialEq for Text<'_> {
    fn eq(&self, other: &Self) -> bool {
        self.0 == other.0
    }
}
impl Eq for Text<'_> {}
impl PartialOrd for Text<'_> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Text<'_> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.0.cmp(&other.0)
    }
}

/// A JSON scalar as text: strings as sent, numbers and booleans as their
/// JSON text, `null` as absent. Objects and arrays are a wrong type, or,
/// with `OPEN` (a member of an open object such as UBI's attributes, where
/// anything may stand), skipped as absent.
pub(super) struct ScalarText<const OPEN: bool>;

impl<'de, const OPEN: bool> Visitor<'de> for ScalarText<OPEN> {
    type Value = Option<Cow<'de, str>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(if OPEN { "any JSON value" } else { "a string, number, boolean or null" })
    }
    str_is!(Some);
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(if v { "true" } else { "false" })))
    }
    null_is!(None);
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        if !OPEN {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
    fn visit_map<A: de::MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        if !OPEN {
            return Err(de::Error::invalid_type(de::Unexpected::Map, &self));
        }
        while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
        Ok(None)
    }
}

/// Room for the results of a typical page at once: JSON gives no length
/// up front, and serde's own `Vec` grows from nothing (4, 8, then 16
/// entries for a page of 10). Each growth is a `realloc` that copies once
/// the heap is busy, as it is beside a consumer's message buffers: 2% of
/// the daemon's loop in a profile, next to nothing for a bare consumer.
pub(super) const RESULTS_CAPACITY: usize = 16;

/// The capacity of a `Vec` of results read through serde: a page, or
/// fewer when the reader knows the length.
pub(super) fn page_capacity(size_hint: Option<usize>) -> usize {
    size_hint.unwrap_or(RESULTS_CAPACITY).min(RESULTS_CAPACITY)
}

/// The members of one object already read, a bit each by the member's
/// index among those its reader knows (a few for the native and UBI
/// readers, a mapping's trie nodes for the mapped one). Every reader
/// refuses a member it reads given twice, as serde's derive does: keeping
/// the first, or the last as most JSON parsers do, would be a guess between
/// two grades or two sessions.
pub(super) struct Seen<const WORDS: usize = 1>([u64; WORDS]);

impl<const WORDS: usize> Default for Seen<WORDS> {
    fn default() -> Self {
        Seen([0; WORDS])
    }
}

impl<const WORDS: usize> Seen<WORDS> {
    /// Marks member `i` read: `false` if it was read before. A member past
    /// the set's bits is never refused.
    #[inline]
    pub(super) fn first(&mut self, i: usize) -> bool {
        let (word, bit) = (i / 64, 1u64 << (i % 64));
        match self.0.get_mut(word) {
            Some(w) if *w & bit != 0 => false,
            Some(w) => {
                *w |= bit;
                true
            }
            None => true,
        }
    }
}

/// A field's text, absent when empty: an empty id, session or action
/// names nothing, in every format.
pub(super) fn present(text: Option<Cow<'_, str>>) -> Option<Cow<'_, str>> {
    text.filter(|s| !s.is_empty())
}

/// The 1-based position of a result given as `ordinal` by a producer that
/// counts from `base` (0 or 1): `invalid_position` before the first, or
/// beyond what a position holds.
pub(super) fn position(ordinal: i64, base: u32) -> Result<u32, RejectReason> {
    ordinal
        .checked_sub(i64::from(base))
        .and_then(|p| p.checked_add(1))
        .filter(|p| *p >= 1)
        .and_then(|p| u32::try_from(p).ok())
        .ok_or(RejectReason::InvalidPosition)
}

/// The 1-based position of the `index`th (0-based) result of an array that
/// gives none: its place.
pub(super) fn array_position(index: usize) -> Result<u32, RejectReason> {
    u32::try_from(index + 1).map_err(|_| RejectReason::InvalidPosition)
}

/// A grade as sent: an integer, or a number with no fraction (`2.0`);
/// checked against the configured range by [`RawGrade::within`].
pub(super) struct RawGrade(i64);

impl RawGrade {
    pub(super) fn from_i64(v: i64) -> RawGrade {
        RawGrade(v)
    }

    /// Beyond `i64`: out of any range, as `i64::MAX` is.
    pub(super) fn from_u64(v: u64) -> RawGrade {
        RawGrade(i64::try_from(v).unwrap_or(i64::MAX))
    }

    /// `None` for a number with a fraction, or too large to be told from
    /// one: not a grade.
    pub(super) fn from_f64(v: f64) -> Option<RawGrade> {
        (v.fract() == 0.0 && v.abs() < 1e15).then_some(RawGrade(v as i64))
    }

    /// The grade, if within `0..=max`.
    pub(super) fn within(self, max: Grade) -> Result<Grade, RejectReason> {
        if !(0..=i64::from(max)).contains(&self.0) {
            return Err(RejectReason::GradeOutOfRange);
        }
        Ok(self.0 as Grade)
    }
}

impl<'de> Deserialize<'de> for RawGrade {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawGrade;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an integer grade")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawGrade::from_i64(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawGrade::from_u64(v))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                RawGrade::from_f64(v).ok_or_else(|| E::invalid_type(de::Unexpected::Float(v), &self))
            }
        }
        d.deserialize_any(V)
    }
}

/// `timestamp`: epoch milliseconds (integer or float) or an RFC 3339 string.
pub(super) enum RawTimestamp<'a> {
    Millis(f64),
    Text(Cow<'a, str>),
}

impl<'de: 'a, 'a> Deserialize<'de> for RawTimestamp<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = RawTimestamp<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("epoch milliseconds or an RFC 3339 string")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Millis(v as f64))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Millis(v as f64))
            }
            fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Millis(v))
            }
            str_is!(RawTimestamp::Text);
        }
        d.deserialize_any(V)
    }
}

/// An RFC 3339 time as epoch milliseconds, as a native event's text
/// `timestamp` is read; `None` if it is not one. For settings that name a
/// moment (`input.min_timestamp`).
pub fn rfc3339_ms(text: &str) -> Option<i64> {
    iso::millis(text, false).filter(|ms| (0..=MAX_TIMESTAMP_MS).contains(ms))
}

/// Latest accepted event time: year 9999, so arithmetic on it cannot overflow.
const MAX_TIMESTAMP_MS: i64 = 253_402_300_799_999;

impl RawTimestamp<'_> {
    pub(super) fn to_millis(&self) -> Result<i64, RejectReason> {
        self.to_millis_with(false)
    }

    /// `zoneless`: text without a zone or offset (`2018-11-13T20:20:39`,
    /// one of UBI's own examples) is UTC, rather than invalid.
    pub(super) fn to_millis_with(&self, zoneless: bool) -> Result<i64, RejectReason> {
        let ms = match self {
            // RFC 3339; with `zoneless`, an offset without a colon (`+0000`,
            // OpenSearch's own rendering) or no zone at all (UTC).
            RawTimestamp::Text(s) => iso::millis(s, zoneless).ok_or(RejectReason::InvalidTimestamp)? as f64,
            RawTimestamp::Millis(v) => {
                if !v.is_finite() {
                    return Err(RejectReason::NonFinite);
                }
                v.floor()
            }
        };
        if !(0.0..=MAX_TIMESTAMP_MS as f64).contains(&ms) {
            return Err(RejectReason::InvalidTimestamp);
        }
        Ok(ms as i64)
    }
}
