//! The UBI serde reader: a query or event message → [`RawUbi`], every
//! field optional, for the UBI decoder (Kafka message → **decode** →
//! assemble → …) to check into an event. It decides whatever the fast
//! reader (`scan`) leaves to it (escapes, unusual numbers, errors), and
//! the two fill the same [`RawUbi`] and dimension slots, so that both give
//! the same result on any input.

use super::UbiPath;
use super::attributes::{Capture, EventAttributesSeed, RawEventAttributes, Slots};
use crate::event::toolkit::visit::{AnyValue, ArrayOrNull, null_is, str_is};
use crate::event::toolkit::{self, RawTimestamp, ScalarText, Seen, Text, page_capacity};
use crate::event::{DecodeLimits, Format, RejectReason, Shown};
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
            str_is!(|text| Id(Some(text)));
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
    stop_unless_in: Option<&'l BTreeMap<String, crate::metrics::Grade>>,
    /// `[ubi.dimensions]`, read below the attributes.
    dims: &'l [(String, UbiPath)],
    /// The dimensions read below `query_attributes`, `event_attributes`.
    query_mask: u32,
    event_mask: u32,
    /// `input.max_results`, for `query_response_hit_ids`.
    pub(super) max_results: usize,
}

impl<'l> Settings<'l> {
    pub(super) fn new(format: Format, limits: &'l DecodeLimits) -> Settings<'l> {
        Settings {
            stop_unless_in: (format != Format::UbiQueries).then_some(&limits.actions),
            dims: &limits.ubi.dimensions,
            query_mask: limits.ubi.mask(false),
            event_mask: limits.ubi.mask(true),
            max_results: limits.max_results,
        }
    }

    /// Whether `action` (an `action_name`) makes the message one to ignore
    /// unread: an event naming an action rankpulse does not score.
    pub(super) fn ignores(&self, action: &Text<'_>) -> bool {
        let a = action.0.as_ref();
        self.stop_unless_in.is_some_and(|actions| !a.is_empty() && a != "impression" && !actions.contains_key(a))
    }

    /// The reader of `event_attributes` (`event`) or `query_attributes`
    /// for the dimension paths below it, into `slots`.
    pub(super) fn capture<'s, 'de>(&self, event: bool, slots: &'s mut Slots<'de>) -> Capture<'s, 'l, 'de> {
        Capture::new(self.dims, event, if event { self.event_mask } else { self.query_mask }, slots)
    }
}

/// A member of a UBI message that rankpulse reads, as both readers name
/// it; the discriminant is its bit among the members seen, so that both
/// refuse the same member given twice.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Member {
    ActionName,
    Application,
    QueryId,
    ClientId,
    SessionId,
    Timestamp,
    HitIds,
    QueryAttributes,
    EventAttributes,
    /// Only whether it is `null` is read; not refused twice, as any member
    /// rankpulse does not read.
    UserQuery,
    /// Any other name: skipped.
    Other,
}

impl Member {
    /// The member named `name`, as the serde reader meets it (the fast
    /// reader tells the names by their bytes, `Scan::member`).
    fn named(name: &str) -> Member {
        match name {
            "action_name" => Member::ActionName,
            "application" => Member::Application,
            "query_id" => Member::QueryId,
            "client_id" => Member::ClientId,
            "session_id" => Member::SessionId,
            "timestamp" => Member::Timestamp,
            "query_response_hit_ids" => Member::HitIds,
            "query_attributes" => Member::QueryAttributes,
            "event_attributes" => Member::EventAttributes,
            "user_query" => Member::UserQuery,
            _ => Member::Other,
        }
    }

    /// Its name, for serde's `duplicate_field` error.
    fn name(self) -> &'static str {
        match self {
            Member::ActionName => "action_name",
            Member::Application => "application",
            Member::QueryId => "query_id",
            Member::ClientId => "client_id",
            Member::SessionId => "session_id",
            Member::Timestamp => "timestamp",
            Member::HitIds => "query_response_hit_ids",
            Member::QueryAttributes => "query_attributes",
            Member::EventAttributes => "event_attributes",
            Member::UserQuery => "user_query",
            Member::Other => "",
        }
    }

    /// Whether it is read once per message, seen again or not (`seen`):
    /// `false` for a member given twice that rankpulse reads.
    pub(super) fn first_in(self, seen: &mut Seen) -> bool {
        matches!(self, Member::UserQuery | Member::Other) || seen.first(self as usize)
    }
}

impl<'de> de::DeserializeSeed<'de> for RawUbiSeed<'_, 'de> {
    type Value = RawUbi<'de>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for RawUbiSeed<'_, 'de> {
    type Value = RawUbi<'de>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a UBI query or event object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut raw = RawUbi::default();
        let mut seen: Seen = Seen::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let member = Member::named(&key.0);
            if !member.first_in(&mut seen) {
                return Err(de::Error::duplicate_field(member.name()));
            }
            match member {
                Member::ActionName => {
                    raw.action_key = true;
                    raw.action_name = map.next_value()?;
                    if raw.action_name.as_ref().is_some_and(|a| self.settings.ignores(a)) {
                        self.unmapped.set(true);
                        return Err(de::Error::custom("unmapped action"));
                    }
                }
                Member::Application => raw.application = map.next_value_seed(AnyValue(ScalarText::<true>))?,
                Member::QueryId => raw.query_id = map.next_value()?,
                Member::ClientId => raw.client_id = map.next_value()?,
                Member::SessionId => raw.session_id = map.next_value()?,
                Member::Timestamp => raw.timestamp = map.next_value()?,
                Member::HitIds => {
                    raw.query_response_hit_ids =
                        map.next_value_seed(ArrayOrNull(HitsSeed { max: self.settings.max_results }))?
                }
                Member::QueryAttributes => {
                    map.next_value_seed(AnyValue(self.settings.capture(false, &mut *self.slots)))?
                }
                Member::EventAttributes => {
                    let capture = self.settings.capture(true, &mut *self.slots);
                    raw.event_attributes = map.next_value_seed(AnyValue(EventAttributesSeed(capture)))?;
                }
                Member::UserQuery => raw.user_query |= map.next_value::<Option<de::IgnoredAny>>()?.is_some(),
                Member::Other => {
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
        let mut hits = Hits::new(self.max, page_capacity(seq.size_hint()));
        while let Some(hit) = seq.next_element::<Id<'de>>()? {
            hits.push(hit);
        }
        Ok(hits.end())
    }
}

/// `query_response_hit_ids` as either reader meets them, one hit at a
/// time: the shown results, positions 1, 2, … in array order. A hit that
/// cannot be a result does not stop the read: its reason is given by
/// [`Hits::end`] (more than `max` hits is `too_many_results`, before any
/// missing id).
pub(super) struct Hits<'a> {
    results: Vec<Shown<'a>>,
    max: usize,
    /// Hits met, kept or not.
    count: usize,
    /// Why the first hit that could not be a result could not.
    fault: Option<RejectReason>,
}

impl<'a> Hits<'a> {
    /// Room for `capacity` results, `max` at most (`input.max_results`).
    pub(super) fn new(max: usize, capacity: usize) -> Hits<'a> {
        Hits { results: Vec::with_capacity(capacity.min(max)), max, count: 0, fault: None }
    }

    #[inline]
    pub(super) fn push(&mut self, hit: Id<'a>) {
        self.count += 1;
        if self.count > self.max || self.fault.is_some() {
            return;
        }
        match (present(Some(hit)), u32::try_from(self.count)) {
            (None, _) => self.fault = Some(RejectReason::MissingField),
            (Some(doc_id), Ok(position)) => self.results.push(Shown { doc_id, position, score: None, team: None }),
            (Some(_), Err(_)) => self.fault = Some(RejectReason::InvalidPosition),
        }
    }

    #[inline]
    pub(super) fn end(self) -> Result<Vec<Shown<'a>>, RejectReason> {
        match self.fault {
            _ if self.count > self.max => Err(RejectReason::TooManyResults),
            Some(reason) => Err(reason),
            None => Ok(self.results),
        }
    }
}

/// An id's text, absent when `null` or empty.
pub(super) fn present(id: Option<Id<'_>>) -> Option<Cow<'_, str>> {
    toolkit::present(id.and_then(|i| i.0))
}
