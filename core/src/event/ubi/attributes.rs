//! The UBI attributes objects (`query_attributes`, `event_attributes`):
//! the dimension paths read through them, and the two members of
//! `event_attributes` an event is made of (`object.object_id`,
//! `position.ordinal`). Part of the UBI decoder (Kafka message → **decode**
//! → assemble → …), for its serde reader; the fast reader (`scan`) walks
//! the same [`Capture`] over the bytes.
//!
//! An attributes object is open (anything may stand in it) and often
//! large (filters, whole documents), so it is never built: [`Capture`]
//! descends only where a configured path goes and skips the rest unparsed.

use super::UbiPath;
use super::read::Id;
use crate::event::MAX_DIMENSION_LABELS;
use crate::event::toolkit::visit::{AnyValue, null_is};
use crate::event::toolkit::{ScalarText, Text};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// The dimension values found in a message, by the index of their label
/// in [`super::UbiSettings::dimensions`]: a fixed array, so that reading them
/// allocates nothing (values with escapes and numbers are copied, as
/// everywhere), made only once a value is found (most events carry none,
/// and the array is 16 values to clear and drop).
pub(super) type Slots<'a> = Option<[Option<Cow<'a, str>>; MAX_DIMENSION_LABELS]>;

/// Reads one open object (`query_attributes`, `event_attributes`, or a
/// member of one) for the dimension paths that pass through it: it
/// descends only into members on a path, skips the rest unparsed, and
/// stores a scalar where a path ends (strings as sent, numbers and
/// booleans as their JSON text; an object, array or `null` there leaves
/// the dimension absent). The paths are few (at most
/// [`MAX_DIMENSION_LABELS`]), so those still on the way are a bit mask,
/// not a trie: nothing is built per message.
pub(super) struct Capture<'s, 'l, 'de> {
    dims: &'l [(String, UbiPath)],
    /// `true` below `event_attributes`, `false` below `query_attributes`.
    event: bool,
    /// The paths through this value, as bits of their index in `dims`.
    mask: u32,
    /// Member names walked from the attributes object (0: the object
    /// itself, which must be an object or `null`).
    pub(super) depth: usize,
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

impl<'s, 'l, 'de> Capture<'s, 'l, 'de> {
    /// The reader of an attributes object, for the paths of `dims` below
    /// it (`mask`, [`super::UbiSettings`]'s mask of the object).
    pub(super) fn new(dims: &'l [(String, UbiPath)], event: bool, mask: u32, slots: &'s mut Slots<'de>) -> Self {
        Capture { dims, event, mask, depth: 0, slots }
    }

    fn names(&self, i: usize) -> &[String] {
        self.dims.get(i).and_then(|(_, p)| p.below(self.event)).unwrap_or_default()
    }

    /// The paths that go on through member `key` of this object.
    pub(super) fn through(&self, key: &str) -> u32 {
        bits(self.mask).filter(|&i| self.names(i).get(self.depth).is_some_and(|n| n == key)).fold(0, |m, i| m | 1 << i)
    }

    /// The reader of the value of member `key` (whose paths are `mask`).
    pub(super) fn member(&mut self, mask: u32) -> Capture<'_, '_, 'de> {
        Capture { dims: self.dims, event: self.event, mask, depth: self.depth + 1, slots: &mut *self.slots }
    }

    /// Reads the value of the member `key` that `map` is at.
    fn entry<A: MapAccess<'de>>(&mut self, map: &mut A, key: &str) -> Result<(), A::Error> {
        match self.through(key) {
            0 => map.next_value::<de::IgnoredAny>().map(drop),
            mask => map.next_value_seed(AnyValue(self.member(mask))),
        }
    }

    /// Stores `text` in the slots of the paths that end at this value.
    pub(super) fn store(&mut self, text: Option<Cow<'de, str>>) {
        for i in bits(self.mask) {
            if self.names(i).len() == self.depth
                && let Some(slot) = self.slots.get_or_insert_with(Default::default).get_mut(i)
            {
                *slot = text.clone();
            }
        }
    }

    /// Stores the value of member `K`, read by its own reader, in the
    /// slots of the paths that end at it (its text made only if one does).
    #[inline]
    pub(super) fn store_known<K: Known<'de>>(&mut self, value: &K) {
        let mask = self.through(K::NAME);
        if mask != 0 {
            self.member(mask).store(value.text());
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
    null_is!(());
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
pub(super) trait Known<'de>: Deserialize<'de> {
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
pub(super) enum Ordinal {
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
            null_is!(Ordinal::Absent);
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
    null_is!(None);
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
            self.capture.store_known(&value);
            known = Some(value);
        }
        Ok(known)
    }
}

/// `event_attributes`: the object id and position rankpulse reads (the
/// dimension paths through it are read into the message's slots on the
/// way).
#[derive(Default)]
pub(super) struct RawEventAttributes<'a> {
    pub(super) object_id: Option<Id<'a>>,
    pub(super) ordinal: Option<Ordinal>,
}

/// Reads `event_attributes` (`None` for `null`).
pub(super) struct EventAttributesSeed<'s, 'l, 'de>(pub(super) Capture<'s, 'l, 'de>);

impl<'de> Visitor<'de> for EventAttributesSeed<'_, '_, 'de> {
    type Value = Option<RawEventAttributes<'de>>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("an object")
    }
    null_is!(None);
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut out = RawEventAttributes::default();
        while let Some(key) = map.next_key::<Text<'de>>()? {
            let key = key.0.as_ref();
            match key {
                "object" | "position" => {
                    let capture = self.0.member(self.0.through(key));
                    if key == "object" {
                        out.object_id =
                            map.next_value_seed(AnyValue(Holder { capture, known: std::marker::PhantomData }))?;
                    } else {
                        out.ordinal =
                            map.next_value_seed(AnyValue(Holder { capture, known: std::marker::PhantomData }))?;
                    }
                }
                _ => self.0.entry(&mut map, key)?,
            }
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{UbiPath, decode};
    use crate::event::{DecodeLimits, Event, Format, RejectReason};

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
}
