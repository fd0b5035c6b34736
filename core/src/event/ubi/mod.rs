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
//!   message into a fixed array ([`Capture`]), nothing built per message.
//!
//! The usual message is read by [`scan`], straight from its bytes; the
//! serde reader here decides whatever that one leaves to it (escapes,
//! unusual numbers, errors), so both give the same result on any input.
//!
//! UBI has no event id: the message itself is its id, so a re-delivered
//! message counts once and two messages that differ in any byte both count.
//!
//! One file for one published schema: past 600 lines with the attributes'
//! reader ([`Capture`] and the readers of `object` and `position` it runs
//! inside, about 250 lines that serve only this schema) and the tests that
//! walk it field by field against the native twin.

use super::toolkit::{RESULTS_CAPACITY, RawTimestamp, ScalarText, Text, classify, message_text};
use super::{
    DecodeLimits, Event, Format, IgnoreReason, Impression, Judgment, MAX_DIMENSION_LABELS, RejectReason, Shown,
};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

mod scan;

/// Where a dimension's value is read from in UBI input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UbiPath {
    /// `application`, of a query or an event.
    Application,
    /// `query_attributes.<name>[.<name>…]` of a query: the member names,
    /// outermost first (teams nest experiment info:
    /// `query_attributes.experiment.arm`).
    QueryAttribute(Vec<String>),
    /// `event_attributes.<name>[.<name>…]` of an `impression` event.
    EventAttribute(Vec<String>),
}

/// A `[ubi.dimensions]` path that names no field rankpulse can read.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error(
    "`{0}` is not a UBI dimension path (expected `application`, `query_attributes.<name>` or `event_attributes.<name>`, \
     with nested members as `query_attributes.<name>.<name>`, no member name empty)"
)]
pub struct UbiPathError(pub String);

impl UbiPath {
    pub fn parse(path: &str) -> Result<UbiPath, UbiPathError> {
        let err = || UbiPathError(path.to_string());
        if path == "application" {
            return Ok(UbiPath::Application);
        }
        let (head, names) = path.split_once('.').ok_or_else(err)?;
        let names: Vec<String> = names.split('.').map(str::to_string).collect();
        if names.iter().any(String::is_empty) {
            return Err(err());
        }
        match head {
            "query_attributes" => Ok(UbiPath::QueryAttribute(names)),
            "event_attributes" => Ok(UbiPath::EventAttribute(names)),
            _ => Err(err()),
        }
    }

    /// The member names below `query_attributes` (`event` false) or
    /// `event_attributes` (`event` true); none for another root.
    fn below(&self, event: bool) -> Option<&[String]> {
        match (self, event) {
            (UbiPath::QueryAttribute(names), false) | (UbiPath::EventAttribute(names), true) => Some(names),
            _ => None,
        }
    }
}

impl fmt::Display for UbiPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UbiPath::Application => f.write_str("application"),
            UbiPath::QueryAttribute(n) => write!(f, "query_attributes.{}", n.join(".")),
            UbiPath::EventAttribute(n) => write!(f, "event_attributes.{}", n.join(".")),
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
    /// `query_attributes.<label>` (experiment arms, rankers). Only the
    /// first [`MAX_DIMENSION_LABELS`] are read (the assembler's limit,
    /// which the configuration enforces on `dimensions.labels`).
    pub dimensions: Vec<(String, UbiPath)>,
}

impl UbiSettings {
    /// Every label of `labels` with its path: the configured one, else
    /// `query_attributes.<label>`.
    pub fn resolve(&mut self, labels: &[String]) {
        for label in labels {
            if !self.dimensions.iter().any(|(l, _)| l == label) {
                self.dimensions.push((label.clone(), UbiPath::QueryAttribute(vec![label.clone()])));
            }
        }
    }

    /// The dimensions read below `query_attributes` (`event` false) or
    /// `event_attributes`, as bits of their index.
    fn mask(&self, event: bool) -> u32 {
        let dims = self.dimensions.iter().take(MAX_DIMENSION_LABELS).enumerate();
        dims.filter(|(_, (_, p))| p.below(event).is_some()).fold(0, |m, (i, _)| m | 1 << i)
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

/// The dimension values found in a message, by the index of their label
/// in [`UbiSettings::dimensions`]: a fixed array, so that reading them
/// allocates nothing (values with escapes and numbers are copied, as
/// everywhere), made only once a value is found (most events carry none,
/// and the array is 16 values to clear and drop).
type Slots<'a> = Option<[Option<Cow<'a, str>>; MAX_DIMENSION_LABELS]>;

/// Reads one open object (`query_attributes`, `event_attributes`, or a
/// member of one) for the dimension paths that pass through it: it
/// descends only into members on a path, skips the rest unparsed, and
/// stores a scalar where a path ends (strings as sent, numbers and
/// booleans as their JSON text; an object, array or `null` there leaves
/// the dimension absent). The paths are few (at most
/// [`MAX_DIMENSION_LABELS`]), so those still on the way are a bit mask,
/// not a trie: nothing is built per message.
struct Capture<'s, 'l, 'de> {
    dims: &'l [(String, UbiPath)],
    /// `true` below `event_attributes`, `false` below `query_attributes`.
    event: bool,
    /// The paths through this value, as bits of their index in `dims`.
    mask: u32,
    /// Member names walked from the attributes object (0: the object
    /// itself, which must be an object or `null`).
    depth: usize,
    slots: &'s mut Slots<'de>,
}

/// The indices set in `mask`.
fn bits(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        let i = mask.trailing_zeros() as usize;
        mask &= mask.wrapping_sub(1);
        (i < 32).then_some(i)
    })
}

impl<'de> Capture<'_, '_, 'de> {
    fn names(&self, i: usize) -> &[String] {
        self.dims.get(i).and_then(|(_, p)| p.below(self.event)).unwrap_or_default()
    }

    /// The paths that go on through member `key` of this object.
    fn through(&self, key: &str) -> u32 {
        bits(self.mask).filter(|&i| self.names(i).get(self.depth).is_some_and(|n| n == key)).fold(0, |m, i| m | 1 << i)
    }

    /// The reader of the value of member `key` (whose paths are `mask`).
    fn member(&mut self, mask: u32) -> Capture<'_, '_, 'de> {
        Capture { dims: self.dims, event: self.event, mask, depth: self.depth + 1, slots: &mut *self.slots }
    }

    /// Reads the value of the member `key` that `map` is at.
    fn entry<A: MapAccess<'de>>(&mut self, map: &mut A, key: &str) -> Result<(), A::Error> {
        match self.through(key) {
            0 => map.next_value::<de::IgnoredAny>().map(drop),
            mask => map.next_value_seed(self.member(mask)),
        }
    }

    /// Stores `text` in the slots of the paths that end at this value.
    fn store(&mut self, text: Option<Cow<'de, str>>) {
        for i in bits(self.mask) {
            if self.names(i).len() == self.depth
                && let Some(slot) = self.slots.get_or_insert_with(Default::default).get_mut(i)
            {
                *slot = text.clone();
            }
        }
    }

    fn scalar<E: de::Error>(mut self, text: Option<Cow<'de, str>>, what: de::Unexpected) -> Result<(), E> {
        if self.depth == 0 {
            return Err(E::invalid_type(what, &self));
        }
        self.store(text);
        Ok(())
    }
}

impl<'de> de::DeserializeSeed<'de> for Capture<'_, '_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Capture<'_, '_, 'de> {
    type Value = ();
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(if self.depth == 0 { "an object" } else { "any JSON value" })
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        self.scalar(Some(Cow::Borrowed(v)), de::Unexpected::Str(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(Some(Cow::Owned(v.to_string())), de::Unexpected::Str(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(ScalarText::<true>.visit_i64(v)?, de::Unexpected::Signed(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(ScalarText::<true>.visit_u64(v)?, de::Unexpected::Unsigned(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(ScalarText::<true>.visit_f64(v)?, de::Unexpected::Float(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(ScalarText::<true>.visit_bool(v)?, de::Unexpected::Bool(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_none<E: de::Error>(self) -> Result<(), E> {
        Ok(())
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        if self.depth == 0 {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &self));
        }
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key::<Text<'de>>()? {
            self.entry(&mut map, &key.0)?;
        }
        Ok(())
    }
}

/// A member of `event_attributes` rankpulse reads itself, through the
/// object that holds it (`object.object_id`, `position.ordinal`), which a
/// dimension path may also name.
trait Known<'de>: Deserialize<'de> {
    /// The member's name in its object.
    const NAME: &'static str;
    /// Its value as a dimension.
    fn text(&self) -> Option<Cow<'de, str>>;
    /// What a value of another type stands for, when such a value is not
    /// an error of the whole message (`None`: it is).
    fn unreadable() -> Option<Self> {
        None
    }
}

impl<'de> Known<'de> for Id<'de> {
    const NAME: &'static str = "object_id";
    fn text(&self) -> Option<Cow<'de, str>> {
        self.0.clone()
    }
}

/// `position.ordinal`: an integer, `null` as absent. Anything else is
/// [`Ordinal::Unreadable`], not an error of the message: a judgment's
/// position is not read (docs/formats.md), and a click whose client sends
/// `"ordinal":"3"` must still count; an `impression` event refuses it.
enum Ordinal {
    Absent,
    At(i64),
    Unreadable,
}

impl<'de> Deserialize<'de> for Ordinal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Ordinal;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Ordinal, E> {
                Ok(Ordinal::At(v))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Ordinal, E> {
                Ok(i64::try_from(v).map_or(Ordinal::Unreadable, Ordinal::At))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Ordinal, E> {
                Ok(Ordinal::Absent)
            }
            fn visit_none<E: de::Error>(self) -> Result<Ordinal, E> {
                Ok(Ordinal::Absent)
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Ordinal, E> {
                Ok(Ordinal::Unreadable)
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Ordinal, E> {
                Ok(Ordinal::Unreadable)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Ordinal, E> {
                Ok(Ordinal::Unreadable)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Ordinal, A::Error> {
                while seq.next_element::<de::IgnoredAny>()?.is_some() {}
                Ok(Ordinal::Unreadable)
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Ordinal, A::Error> {
                while map.next_entry::<de::IgnoredAny, de::IgnoredAny>()?.is_some() {}
                Ok(Ordinal::Unreadable)
            }
        }
        d.deserialize_any(V)
    }
}

impl<'de> Known<'de> for Ordinal {
    const NAME: &'static str = "ordinal";
    fn text(&self) -> Option<Cow<'de, str>> {
        match self {
            Ordinal::At(o) => Some(Cow::Owned(o.to_string())),
            _ => None,
        }
    }
    fn unreadable() -> Option<Self> {
        Some(Ordinal::Unreadable)
    }
}

/// Reads `object` or `position` of `event_attributes` for its [`Known`]
/// member (`None` for `null`, or when the member is absent), and the rest
/// of it for the dimension paths through it.
struct Holder<'s, 'l, 'de, K> {
    capture: Capture<'s, 'l, 'de>,
    known: std::marker::PhantomData<K>,
}

impl<'de, K: Known<'de>> de::DeserializeSeed<'de> for Holder<'_, '_, 'de, K> {
    type Value = Option<K>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<K>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, K: Known<'de>> Holder<'_, '_, 'de, K> {
    /// A value that is neither an object nor `null`: what `K` makes of it
    /// ([`Known::unreadable`]), else a wrong type.
    fn other<E: de::Error>(&self, unexpected: de::Unexpected<'_>) -> Result<Option<K>, E> {
        K::unreadable().map(Some).ok_or_else(|| E::invalid_type(unexpected, self))
    }
}

impl<'de, K: Known<'de>> Visitor<'de> for Holder<'_, '_, 'de, K> {
    type Value = Option<K>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with {}", K::NAME)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Option<K>, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Option<K>, E> {
        Ok(None)
    }
    // `position` as a scalar or an array: its ordinal is unreadable (an
    // error only of an impression event); `object` so is a wrong type.
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Option<K>, E> {
        self.other(de::Unexpected::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Option<K>, E> {
        self.other(de::Unexpected::Signed(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Option<K>, E> {
        self.other(de::Unexpected::Unsigned(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Option<K>, E> {
        self.other(de::Unexpected::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Option<K>, E> {
        self.other(de::Unexpected::Str(v))
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Option<K>, A::Error> {
        let value = self.other(de::Unexpected::Seq)?;
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(value)
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Option<K>, A::Error> {
        let mut known: Option<K> = None;
        while let Some(key) = map.next_key::<Text<'de>>()? {
            if key.0 != K::NAME {
                self.capture.entry(&mut map, &key.0)?;
                continue;
            }
            if known.is_some() {
                return Err(de::Error::duplicate_field(K::NAME));
            }
            let value: K = map.next_value()?;
            let mask = self.capture.through(K::NAME);
            if mask != 0 {
                self.capture.member(mask).store(value.text());
            }
            known = Some(value);
        }
        Ok(known)
    }
}

/// `event_attributes`: the object id and position rankpulse reads (the
/// dimension paths through it are read into the message's slots on the
/// way).
#[derive(Default)]
struct RawEventAttributes<'a> {
    object_id: Option<Id<'a>>,
    ordinal: Option<Ordinal>,
}

/// Reads `event_attributes` (`None` for `null`).
struct EventAttributesSeed<'s, 'l, 'de>(Capture<'s, 'l, 'de>);

impl<'de> de::DeserializeSeed<'de> for EventAttributesSeed<'_, '_, 'de> {
    type Value = Option<RawEventAttributes<'de>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for EventAttributesSeed<'_, '_, 'de> {
    type Value = Option<RawEventAttributes<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = RawEventAttributes::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let key = key.0.as_ref();
            match key {
                "object" | "position" => {
                    let capture = self.0.member(self.0.through(key));
                    if key == "object" {
                        out.object_id = map.next_value_seed(Holder { capture, known: std::marker::PhantomData })?;
                    } else {
                        out.ordinal = map.next_value_seed(Holder { capture, known: std::marker::PhantomData })?;
                    }
                }
                _ => self.0.entry(&mut map, key)?,
            }
        }
        Ok(Some(out))
    }
}

/// A UBI query or event, every field optional so that a missing one is
/// reported as `missing_field`; unknown fields are ignored.
#[derive(Default)]
struct RawUbi<'a> {
    action_name: Option<Text<'a>>,
    /// `action_name` is there, even as `null`: the message is an event.
    action_key: bool,
    /// A `user_query` that is not `null` (required of a UBI query): with
    /// hit ids, what tells a query from any other object (a native event
    /// read as UBI by mistake).
    user_query: bool,
    /// As any dimension value: strings as sent, numbers and booleans as
    /// their text; objects and arrays as absent (docs/formats.md).
    application: Option<Cow<'a, str>>,
    query_id: Option<Id<'a>>,
    client_id: Option<Id<'a>>,
    session_id: Option<Id<'a>>,
    timestamp: Option<RawTimestamp<'a>>,
    query_response_hit_ids: Option<Result<Vec<Shown<'a>>, RejectReason>>,
    event_attributes: Option<RawEventAttributes<'a>>,
}

/// Reads a [`RawUbi`], and stops at an `action_name` that names an action
/// rankpulse does not score: such an event is ignored whatever else it
/// holds, so the rest of it is not parsed (UBI streams carry many of them:
/// searches, views, hovers). Written by hand for that early stop only; a
/// field given twice is refused as serde's derive refuses it.
struct RawUbiSeed<'l, 'de> {
    settings: &'l Settings<'l>,
    /// Set when the read stopped at an unmapped action.
    unmapped: &'l std::cell::Cell<bool>,
    /// Where the dimensions' values go: beside the [`RawUbi`], not in it,
    /// so that the array is not moved with it.
    slots: &'l mut Slots<'de>,
}

/// What reading a message needs besides its bytes, for both readers.
struct Settings<'l> {
    /// `[judgments.actions]`; `None` reads every field (queries).
    stop_unless_in: Option<&'l BTreeMap<String, crate::metrics::Grade>>,
    /// `[ubi.dimensions]`, read below the attributes.
    dims: &'l [(String, UbiPath)],
    /// The dimensions read below `query_attributes`, `event_attributes`.
    query_mask: u32,
    event_mask: u32,
    /// `input.max_results`, for `query_response_hit_ids`.
    max_results: usize,
}

impl Settings<'_> {
    /// Whether `action` (an `action_name`) makes the message one to ignore
    /// unread: an event naming an action rankpulse does not score.
    fn ignores(&self, action: &Text<'_>) -> bool {
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

/// A member of an open object read as a dimension value
/// ([`ScalarText`], objects and arrays as absent).
struct OpenScalar;

impl<'de> de::DeserializeSeed<'de> for OpenScalar {
    type Value = Option<Cow<'de, str>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ScalarText::<true>)
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
                    raw.application = map.next_value_seed(OpenScalar)?;
                }
                "query_id" => raw.query_id = once(&mut map, &mut seen, 1 << 2, "query_id")?,
                "client_id" => raw.client_id = once(&mut map, &mut seen, 1 << 3, "client_id")?,
                "session_id" => raw.session_id = once(&mut map, &mut seen, 1 << 4, "session_id")?,
                "timestamp" => raw.timestamp = once(&mut map, &mut seen, 1 << 5, "timestamp")?,
                "query_response_hit_ids" => {
                    first(&mut seen, 1 << 6, "query_response_hit_ids")?;
                    raw.query_response_hit_ids = map.next_value_seed(HitsSeed { max: self.settings.max_results })?;
                }
                "query_attributes" => {
                    first(&mut seen, 1 << 7, "query_attributes")?;
                    let (dims, mask) = (self.settings.dims, self.settings.query_mask);
                    map.next_value_seed(Capture { dims, event: false, mask, depth: 0, slots: &mut *self.slots })?;
                }
                "event_attributes" => {
                    first(&mut seen, 1 << 8, "event_attributes")?;
                    let (dims, mask) = (self.settings.dims, self.settings.event_mask);
                    let capture = Capture { dims, event: true, mask, depth: 0, slots: &mut *self.slots };
                    raw.event_attributes = map.next_value_seed(EventAttributesSeed(capture))?;
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

impl<'de> de::DeserializeSeed<'de> for HitsSeed {
    type Value = Option<Result<Vec<Shown<'de>>, RejectReason>>;
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de> Visitor<'de> for HitsSeed {
    type Value = Option<Result<Vec<Shown<'de>>, RejectReason>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an array of ids")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
        Ok(None)
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        let capacity = seq.size_hint().unwrap_or(RESULTS_CAPACITY).min(RESULTS_CAPACITY);
        let mut results = Vec::with_capacity(capacity.min(self.max));
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
        Ok(Some(match fault {
            _ if count > self.max => Err(RejectReason::TooManyResults),
            Some(reason) => Err(reason),
            None => Ok(results),
        }))
    }
}

fn present(id: Option<Id<'_>>) -> Option<Cow<'_, str>> {
    id.and_then(|i| i.0).filter(|s| !s.is_empty())
}

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
    let settings = Settings {
        stop_unless_in: (format != Format::UbiQueries).then_some(&limits.actions),
        dims: &limits.ubi.dimensions,
        query_mask: limits.ubi.mask(false),
        event_mask: limits.ubi.mask(true),
        max_results: limits.max_results,
    };
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
    let position = ordinal
        .checked_sub(i64::from(limits.ubi.ordinal_base))
        .and_then(|p| p.checked_add(1))
        .filter(|p| *p >= 1)
        .and_then(|p| u32::try_from(p).ok())
        .ok_or(RejectReason::InvalidPosition)?;
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

/// Which UBI index a `_bulk` action line addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BulkTarget {
    /// `_index` holds `queries` (`ubi_queries`, `my_ubi_queries-2025`).
    Queries,
    /// `_index` holds `events`.
    Events,
    /// Another index, or none named.
    Unknown,
    /// `delete`: no document follows.
    Delete,
    /// `update`: what follows is a partial document (`doc`, `script`),
    /// not an event; rankpulse has no document to apply it to.
    Update,
}

impl BulkTarget {
    /// The format of the document that follows the action line, if an
    /// event follows it.
    pub fn format(self) -> Option<Format> {
        match self {
            BulkTarget::Queries => Some(Format::UbiQueries),
            BulkTarget::Events => Some(Format::UbiEvents),
            BulkTarget::Unknown => Some(Format::Ubi),
            BulkTarget::Delete | BulkTarget::Update => None,
        }
    }
}

#[derive(Deserialize)]
struct BulkMeta<'a> {
    #[serde(borrow, default)]
    _index: Option<Text<'a>>,
}

/// A `_bulk` action line: exactly one of the action keys, nothing else.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BulkLine<'a> {
    #[serde(borrow, default)]
    index: Option<BulkMeta<'a>>,
    #[serde(borrow, default)]
    create: Option<BulkMeta<'a>>,
    #[serde(borrow, default)]
    delete: Option<BulkMeta<'a>>,
    #[serde(borrow, default)]
    update: Option<BulkMeta<'a>>,
}

/// Whether `line` is an OpenSearch `_bulk` action line (`{"index":{…}}`,
/// `{"create":{…}}`, `{"delete":{…}}` or `{"update":{…}}`), and which
/// index it addresses. A UBI document is
/// not one: it fails at its first member.
pub fn bulk_action(line: &[u8]) -> Option<BulkTarget> {
    let trimmed = line.trim_ascii_start();
    if !trimmed.starts_with(b"{") {
        return None;
    }
    let parsed: BulkLine = serde_json::from_slice(line).ok()?;
    let meta = match (parsed.index, parsed.create, parsed.delete, parsed.update) {
        (Some(m), None, None, None) | (None, Some(m), None, None) => m,
        (None, None, Some(_), None) => return Some(BulkTarget::Delete),
        (None, None, None, Some(_)) => return Some(BulkTarget::Update),
        _ => return None,
    };
    Some(match meta._index.as_ref().map(|t| t.0.as_ref()) {
        Some(i) if i.contains("queries") => BulkTarget::Queries,
        Some(i) if i.contains("events") => BulkTarget::Events,
        _ => BulkTarget::Unknown,
    })
}

/// Which index a UBI document read without an action line belongs to,
/// by the rule [`decode`] tells them apart with: a top-level
/// `action_name` member, even `null`, makes it an event; anything else,
/// a line that is no JSON object included, is the queries' (to be
/// decoded, or rejected, once). A one-file export is replayed as two
/// streams by this, one per index.
pub fn document_kind(line: &[u8]) -> BulkTarget {
    /// Whether a key is `action_name` (escaped or not).
    struct IsAction(bool);
    impl<'de> Deserialize<'de> for IsAction {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl Visitor<'_> for V {
                type Value = IsAction;
                fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                    f.write_str("a key")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<IsAction, E> {
                    Ok(IsAction(v == "action_name"))
                }
            }
            d.deserialize_str(V)
        }
    }
    struct HasAction;
    impl<'de> Visitor<'de> for HasAction {
        type Value = bool;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
            let mut found = false;
            while let Some(IsAction(is)) = map.next_key()? {
                found |= is;
                map.next_value::<de::IgnoredAny>()?;
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    match de.deserialize_map(HasAction) {
        Ok(true) => BulkTarget::Events,
        _ => BulkTarget::Queries,
    }
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

    #[test]
    fn bulk_action_lines_are_told_from_documents() {
        assert_eq!(bulk_action(br#"{"index": {"_index": "ubi_queries", "_id": "e7"}}"#), Some(BulkTarget::Queries));
        assert_eq!(bulk_action(br#"{"create":{"_index":"ubi_events"}}"#), Some(BulkTarget::Events));
        assert_eq!(bulk_action(br#"{"index":{}}"#), Some(BulkTarget::Unknown));
        assert_eq!(bulk_action(br#"{"application":"a","index":{}}"#), None);
        assert_eq!(bulk_action(br#"{"index":{},"create":{}}"#), None);
        assert_eq!(bulk_action(br#"{"delete":{"_index":"ubi_events","_id":"1"}}"#), Some(BulkTarget::Delete));
        assert_eq!(bulk_action(br#"{"update":{"_index":"ubi_events","_id":"1"}}"#), Some(BulkTarget::Update));
        assert_eq!(bulk_action(br#"{"doc":{"action_name":"click"}}"#), None, "an update's body is no action line");
        assert_eq!(bulk_action(br#"{"delete":{},"update":{}}"#), None);
        assert_eq!(bulk_action(br#"{"action_name":"click"}"#), None);
        assert_eq!(bulk_action(b"not json"), None);
    }

    #[test]
    fn dimension_paths_parse_or_name_themselves() {
        assert_eq!(UbiPath::parse("application"), Ok(UbiPath::Application));
        assert_eq!(UbiPath::parse("query_attributes.arm"), Ok(UbiPath::QueryAttribute(vec!["arm".into()])));
        assert_eq!(
            UbiPath::parse("query_attributes.experiment.arm"),
            Ok(UbiPath::QueryAttribute(vec!["experiment".into(), "arm".into()]))
        );
        for path in ["event_attributes.arm", "event_attributes.a.b.c", "query_attributes.a.b.c.d.e"] {
            assert_eq!(UbiPath::parse(path).map(|p| p.to_string()), Ok(path.to_string()));
        }
        for bad in ["", "user_query", "query_attributes", "query_attributes.", "query_attributes.a..b", "a.b", ".x"] {
            assert_eq!(UbiPath::parse(bad), Err(UbiPathError(bad.to_string())));
        }
    }

    /// Decodes `json` as `format` with dimension `label` read from each
    /// path, and gives each label's value.
    fn dims_of(format: Format, json: &str, paths: &[&str]) -> Result<Vec<Option<String>>, RejectReason> {
        let mut l = DecodeLimits::default();
        l.ubi.dimensions =
            paths.iter().enumerate().map(|(i, p)| (format!("d{i}"), UbiPath::parse(p).unwrap())).collect();
        let dims = match decode(format, json.as_bytes(), &l)? {
            Event::Impression(i) => i.dimensions,
            other => panic!("{other:?}"),
        };
        Ok((0..paths.len()).map(|i| dims.get(format!("d{i}").as_str()).map(|v| v.to_string())).collect())
    }

    #[test]
    fn nested_paths_read_scalars_at_any_depth() {
        let q = r#"{"client_id":"c","user_query":"q","timestamp":1,"application":"shop","query_attributes":{
            "experiment":{"id":7,"arm":"b","on":true,"ratio":0.25,"cfg":{"x":{"y":"deep"}},"list":[1],"none":null,"o":{}},
            "experiment.arm":"dotted","ranker":"v2","skipped":{"arm":"no"}}}"#;
        let paths = [
            "query_attributes.experiment.arm",
            "query_attributes.experiment.id",
            "query_attributes.experiment.on",
            "query_attributes.experiment.ratio",
            "query_attributes.experiment.cfg.x.y",
            "query_attributes.experiment.cfg.x",
            "query_attributes.experiment.list",
            "query_attributes.experiment.none",
            "query_attributes.experiment.o",
            "query_attributes.experiment.absent",
            "query_attributes.experiment.arm.deeper",
            "query_attributes.ranker",
            "query_attributes.ranker.x",
            "query_attributes.experiment",
            "application",
            "event_attributes.experiment.arm",
        ];
        let want: Vec<Option<String>> = [
            Some("b"),
            Some("7"),
            Some("true"),
            Some("0.25"),
            Some("deep"),
            None, // an object
            None, // an array
            None, // null
            None, // an empty object
            None, // absent
            None, // below a string
            Some("v2"),
            None,
            None, // an object, though paths go on below it
            Some("shop"),
            None, // a query has no event_attributes
        ]
        .iter()
        .map(|v| v.map(str::to_string))
        .collect();
        assert_eq!(dims_of(Format::UbiQueries, q, &paths), Ok(want));
        // A member name with a dot is not reachable by a dotted path.
        assert_eq!(dims_of(Format::Ubi, q, &["query_attributes.experiment.arm"]), Ok(vec![Some("b".into())]));
        // Escaped strings are copied, and still found.
        let escaped =
            r#"{"client_id":"c","user_query":"q","timestamp":1,"query_attributes":{"e\u0078p":{"arm":"a\"b"}}}"#;
        assert_eq!(dims_of(Format::UbiQueries, escaped, &["query_attributes.exp.arm"]), Ok(vec![Some("a\"b".into())]));
        // Attributes that are not an object are a wrong type; null is none.
        for bad in [r#""x""#, "[1]", "3", "true"] {
            let q = format!(r#"{{"client_id":"c","user_query":"q","timestamp":1,"query_attributes":{bad}}}"#);
            assert_eq!(
                dims_of(Format::UbiQueries, &q, &["query_attributes.a.b"]),
                Err(RejectReason::WrongType),
                "{bad}"
            );
        }
        let q = r#"{"client_id":"c","user_query":"q","timestamp":1,"query_attributes":null}"#;
        assert_eq!(dims_of(Format::UbiQueries, q, &["query_attributes.a.b"]), Ok(vec![None]));
    }

    #[test]
    fn nested_event_paths_read_through_object_and_position() {
        let e = r#"{"action_name":"impression","client_id":"c","timestamp":1,"query_attributes":{"arm":"q"},
            "event_attributes":{"object":{"object_id":42,"object_id_field":"sku","detail":{"brand":"x"}},
            "position":{"ordinal":3,"page_depth":2},"experiment":{"arm":"e","n":-1},"object_id":"top"}}"#;
        let paths = [
            "event_attributes.experiment.arm",
            "event_attributes.experiment.n",
            "event_attributes.object.object_id_field",
            "event_attributes.object.detail.brand",
            "event_attributes.object.object_id",
            "event_attributes.position.ordinal",
            "event_attributes.position.page_depth",
            "event_attributes.object_id",
            "query_attributes.arm",
        ];
        let want = ["e", "-1", "sku", "x", "42", "3", "2", "top"].map(|v| Some(v.to_string())).into_iter();
        assert_eq!(dims_of(Format::UbiEvents, e, &paths), Ok(want.chain([None]).collect()));
        // Reading the dimensions takes nothing from the event itself.
        let Ok(Event::Impression(i)) = decode(Format::UbiEvents, e.as_bytes(), &DecodeLimits::default()) else {
            panic!()
        };
        assert_eq!((i.results[0].doc_id.as_ref(), i.results[0].position), ("42", 4));
        // A known member given twice is refused, as before; elsewhere the last one wins.
        let twice = r#"{"action_name":"impression","client_id":"c","timestamp":1,
            "event_attributes":{"object":{"object_id":1,"object_id":2},"position":{"ordinal":0}}}"#;
        assert_eq!(dims_of(Format::UbiEvents, twice, &[]), Err(RejectReason::WrongType));
        let twice = r#"{"action_name":"impression","client_id":"c","timestamp":1,
            "event_attributes":{"object":{"object_id":1},"position":{"ordinal":0},"a":{"b":"x"},"a":{"b":"y"}}}"#;
        assert_eq!(dims_of(Format::UbiEvents, twice, &["event_attributes.a.b"]), Ok(vec![Some("y".into())]));
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
