//! The UBI serde reader: a query or event message → [`RawUbi`], every
//! field optional, for the UBI decoder (Kafka message → **decode** →
//! assemble → …) to check into an event. It decides whatever the fast
//! reader (`scan`) leaves to it (escapes, unusual numbers, errors), and
//! the two fill the same [`RawUbi`] and dimension slots, so that both give
//! the same result on any input.

use super::UbiPath;
use super::attributes::{Capture, EventAttributesSeed, RawEventAttributes, Slots};
use crate::event::toolkit::visit::{AnyValue, ArrayOrNull, null_is};
use crate::event::toolkit::{self, RawTimestamp, ScalarText, Text, page_capacity};
use crate::event::{RejectReason, Shown};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;

/// A UBI identifier: a string or an integer (`object_id` may be either);
/// `null` as absent.
pub(super) struct Id<'a>(pub(super) Option<Cow<'a, str>>);

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
            null_is!(Id(None));
        }
        d.deserialize_any(V)
    }
}

/// A UBI query or event, every field optional so that a missing one is
/// reported as `missing_field`; unknown fields are ignored.
#[derive(Default)]
pub(super) struct RawUbi<'a> {
    pub(super) action_name: Option<Text<'a>>,
    /// `action_name` is there, even as `null`: the message is an event.
    pub(super) action_key: bool,
    /// A `user_query` that is not `null` (required of a UBI query): with
    /// hit ids, what tells a query from any other object (a native event
    /// read as UBI by mistake).
    pub(super) user_query: bool,
    /// As any dimension value: strings as sent, numbers and booleans as
    /// their text; objects and arrays as absent (docs/formats.md).
    pub(super) application: Option<Cow<'a, str>>,
    pub(super) query_id: Option<Id<'a>>,
    pub(super) client_id: Option<Id<'a>>,
    pub(super) session_id: Option<Id<'a>>,
    pub(super) timestamp: Option<RawTimestamp<'a>>,
    pub(super) query_response_hit_ids: Option<Result<Vec<Shown<'a>>, RejectReason>>,
    pub(super) event_attributes: Option<RawEventAttributes<'a>>,
}

/// Reads a [`RawUbi`], and stops at an `action_name` that names an action
/// rankpulse does not score: such an event is ignored whatever else it
/// holds, so the rest of it is not parsed (UBI streams carry many of them:
/// searches, views, hovers). Written by hand for that early stop only; a
/// field given twice is refused as serde's derive refuses it.
pub(super) struct RawUbiSeed<'l, 'de> {
    pub(super) settings: &'l Settings<'l>,
    /// Set when the read stopped at an unmapped action.
    pub(super) unmapped: &'l std::cell::Cell<bool>,
    /// Where the dimensions' values go: beside the [`RawUbi`], not in it,
    /// so that the array is not moved with it.
    pub(super) slots: &'l mut Slots<'de>,
}

/// What reading a message needs besides its bytes, for both readers.
pub(super) struct Settings<'l> {
    /// `[judgments.actions]`; `None` reads every field (queries).
    pub(super) stop_unless_in: Option<&'l BTreeMap<String, crate::metrics::Grade>>,
    /// `[ubi.dimensions]`, read below the attributes.
    pub(super) dims: &'l [(String, UbiPath)],
    /// The dimensions read below `query_attributes`, `event_attributes`.
    pub(super) query_mask: u32,
    pub(super) event_mask: u32,
    /// `input.max_results`, for `query_response_hit_ids`.
    pub(super) max_results: usize,
}

impl Settings<'_> {
    /// Whether `action` (an `action_name`) makes the message one to ignore
    /// unread: an event naming an action rankpulse does not score.
    pub(super) fn ignores(&self, action: &Text<'_>) -> bool {
        let a = action.0.as_ref();
        self.stop_unless_in.is_some_and(|actions| !a.is_empty() && a != "impression" && !actions.contains_key(a))
    }
}

impl<'de> de::DeserializeSeed<'de> for RawUbiSeed<'_, 'de> {
    type Value = RawUbi<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

/// Refuses a field seen before.
fn first<E: de::Error>(seen: &mut u16, bit: u16, name: &'static str) -> Result<(), E> {
    if *seen & bit != 0 {
        return Err(E::duplicate_field(name));
    }
    *seen |= bit;
    Ok(())
}

/// The next value of `map`, refused if its field was seen before.
fn once<'de, A: MapAccess<'de>, T: Deserialize<'de>>(
    map: &mut A,
    seen: &mut u16,
    bit: u16,
    name: &'static str,
) -> Result<Option<T>, A::Error> {
    first(seen, bit, name)?;
    map.next_value()
}

impl<'de> Visitor<'de> for RawUbiSeed<'_, 'de> {
    type Value = RawUbi<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a UBI query or event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut raw = RawUbi::default();
        let mut seen = 0u16;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match key.0.as_ref() {
                "action_name" => {
                    raw.action_key = true;
                    raw.action_name = once(&mut map, &mut seen, 1, "action_name")?;
                    if raw.action_name.as_ref().is_some_and(|a| self.settings.ignores(a)) {
                        self.unmapped.set(true);
                        return Err(de::Error::custom("unmapped action"));
                    }
                }
                "application" => {
                    first(&mut seen, 1 << 1, "application")?;
                    raw.application = map.next_value_seed(AnyValue(ScalarText::<true>))?;
                }
                "query_id" => raw.query_id = once(&mut map, &mut seen, 1 << 2, "query_id")?,
                "client_id" => raw.client_id = once(&mut map, &mut seen, 1 << 3, "client_id")?,
                "session_id" => raw.session_id = once(&mut map, &mut seen, 1 << 4, "session_id")?,
                "timestamp" => raw.timestamp = once(&mut map, &mut seen, 1 << 5, "timestamp")?,
                "query_response_hit_ids" => {
                    first(&mut seen, 1 << 6, "query_response_hit_ids")?;
                    raw.query_response_hit_ids =
                        map.next_value_seed(ArrayOrNull(HitsSeed { max: self.settings.max_results }))?;
                }
                "query_attributes" => {
                    first(&mut seen, 1 << 7, "query_attributes")?;
                    let (dims, mask) = (self.settings.dims, self.settings.query_mask);
                    map.next_value_seed(AnyValue(Capture {
                        dims,
                        event: false,
                        mask,
                        depth: 0,
                        slots: &mut *self.slots,
                    }))?;
                }
                "event_attributes" => {
                    first(&mut seen, 1 << 8, "event_attributes")?;
                    let (dims, mask) = (self.settings.dims, self.settings.event_mask);
                    let capture = Capture { dims, event: true, mask, depth: 0, slots: &mut *self.slots };
                    raw.event_attributes = map.next_value_seed(AnyValue(EventAttributesSeed(capture)))?;
                }
                // Not refused twice, as any member rankpulse does not read.
                "user_query" => raw.user_query |= map.next_value::<Option<de::IgnoredAny>>()?.is_some(),
                _ => {
                    map.next_value::<de::IgnoredAny>()?;
                }
            }
        }
        Ok(raw)
    }
}

/// Reads `query_response_hit_ids` straight into the shown results
/// (positions 1, 2, … in array order), in a `Vec` sized for a page up
/// front as the native decoder's `results`; `null` as none. A hit that
/// cannot be a result does not stop the read: the value is the reason,
/// given once the message is read (more than `max` hits is
/// `too_many_results`, before any missing id).
struct HitsSeed {
    max: usize,
}

impl<'de> Visitor<'de> for HitsSeed {
    type Value = Result<Vec<Shown<'de>>, RejectReason>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of ids")
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let mut results = Vec::with_capacity(page_capacity(seq.size_hint()).min(self.max));
        let (mut count, mut fault) = (0usize, None);
        while let Some(hit) = seq.next_element::<Id<'de>>()? {
            count += 1;
            if count > self.max || fault.is_some() {
                continue;
            }
            let Some(doc_id) = present(Some(hit)) else {
                fault = Some(RejectReason::MissingField);
                continue;
            };
            match u32::try_from(count) {
                Ok(position) => results.push(Shown { doc_id, position, score: None, team: None }),
                Err(_) => fault = Some(RejectReason::InvalidPosition),
            }
        }
        Ok(match fault {
            _ if count > self.max => Err(RejectReason::TooManyResults),
            Some(reason) => Err(reason),
            None => Ok(results),
        })
    }
}

/// An id's text, absent when `null` or empty.
pub(super) fn present(id: Option<Id<'_>>) -> Option<Cow<'_, str>> {
    toolkit::present(id.and_then(|i| i.0))
}
