//! The serde pieces the decoders' hand-written readers are built from
//! (Kafka message → **decode** → assemble → …): the reading of JSON's
//! `null` and of strings, a visitor handed to serde as the seed of one
//! value, and an array that may be `null`. Each is a macro or generic, so
//! a reader built from them compiles to what it wrote out before: no
//! allocation, no dynamic dispatch per message.

use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use std::fmt;

/// `visit_unit` and `visit_none` of a [`Visitor`], both giving `$value`:
/// JSON's `null`, which serde_json visits as unit where a value is read
/// whole (`deserialize_any`) and as none through `deserialize_option`.
/// Every decoder reads it as absent, whichever way it is visited.
macro_rules! null_is {
    ($value:expr) => {
        fn visit_unit<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}
pub(in crate::event) use null_is;

/// `visit_borrowed_str` and `visit_str` of a [`Visitor`], giving the
/// string as `$wrap(Cow)`: borrowed from the message where serde_json can
/// (no escapes), copied where it cannot, as every decoder keeps strings.
macro_rules! str_is {
    ($wrap:expr) => {
        fn visit_borrowed_str<E: serde::de::Error>(self, v: &'de str) -> Result<Self::Value, E> {
            Ok(($wrap)(std::borrow::Cow::Borrowed(v)))
        }
        fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
            Ok(($wrap)(std::borrow::Cow::Owned(v.to_string())))
        }
    };
}
pub(in crate::event) use str_is;

/// A visitor as the seed of one value of any type (`deserialize_any`):
/// serde hands state down a walk (the dimension paths, the mapped trie)
/// only to a seed.
pub(in crate::event) struct AnyValue<V>(pub(in crate::event) V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for AnyValue<V> {
    type Value = V::Value;
    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<V::Value, D::Error> {
        d.deserialize_any(self.0)
    }
}

/// An array read by `V`, or `null` as none: the results of a list, which
/// `V` reads into a `Vec` sized for a page up front (serde's own
/// `Option<Vec<_>>` grows it from nothing).
pub(in crate::event) struct ArrayOrNull<V>(pub(in crate::event) V);

impl<'de, V: Visitor<'de>> DeserializeSeed<'de> for ArrayOrNull<V> {
    type Value = Option<V::Value>;
    #[inline]
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_option(self)
    }
}

impl<'de, V: Visitor<'de>> Visitor<'de> for ArrayOrNull<V> {
    type Value = Option<V::Value>;
    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        self.0.expecting(f)
    }
    null_is!(None);
    #[inline]
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_seq(self)
    }
    #[inline]
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Self::Value, A::Error> {
        self.0.visit_seq(seq).map(Some)
    }
}
