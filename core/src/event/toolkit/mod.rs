//! The decoding toolkit: what the three decoders of the first stage
//! (Kafka message → **decode** → assemble → finalize → metric engine →
//! accumulators → publish) share, so that a string, a time or a failed
//! parse means the same in rankpulse's own events ([`super::native`]), in
//! UBI ([`super::ubi`]) and in mapped JSON ([`super::mapped`]).
//!
//! It owns the field values every schema reads ([`Text`], [`ScalarText`],
//! [`RawTimestamp`]), the reason a message that cannot be read gets
//! ([`reject`]), and the byte cursor the fast readers run ahead of serde
//! with ([`cursor`]). All of it is plain or generic code: nothing here
//! allocates or dispatches dynamically per message beyond what the
//! decoders did with their own copies.

use super::RejectReason;
use serde::Deserialize;
use serde::de::{self, Deserializer, Visitor};
use std::borrow::Cow;
use std::fmt;

pub(super) mod cursor;
mod iso;
mod reject;

pub(super) use reject::{classify, message_text};

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
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
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
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
        Ok(Some(Cow::Owned(v.to_string())))
    }
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
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
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
            fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(RawTimestamp::Text(Cow::Owned(v.to_string())))
            }
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
