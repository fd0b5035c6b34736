//! The one serde visitor the mapped decoder (Kafka message → **decode** →
//! assemble → …) reads a message with: it walks the message along the
//! mapping's trie, captures the scalars where paths end into fixed slots,
//! converts the results of an impression as they are read, and skips
//! every member no path names unparsed.

use super::mapping::{Mapping, RESULT_SLOTS, Seen, Trie};
use super::shown;
use crate::event::toolkit::{Text, page_capacity};
use crate::event::{RejectReason, Shown};
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::fmt;

/// A JSON value where a path ends: a scalar as sent, or only the fact that
/// an object or array stood there (`null` is never captured: absent).
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Scalar<'a> {
    Str(Cow<'a, str>),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Compound,
}

/// A captured value with the rank of the alternative it came from.
pub(super) type Slot<'a> = Option<(u8, Scalar<'a>)>;

/// The results array, where one was found.
pub(super) enum Found<'a> {
    /// Its results, converted as they are read, and the first result that
    /// could not be (reported only once the message's own fields are
    /// checked, so that a message gets the reason it would get whatever
    /// the order of its fields).
    Array(Vec<Shown<'a>>, Option<RejectReason>),
    /// Present, but not an array: the message is a judgment.
    Other,
}

/// What decoding carries down the walk.
pub(super) struct Context<'m> {
    pub(super) mapping: &'m Mapping,
    pub(super) max_results: usize,
}

/// Where a walk records: the slots of the object walked, and (for a
/// message) its results.
pub(super) struct Walk<'c, 'm, 's, 'de> {
    pub(super) cx: &'c Context<'m>,
    pub(super) trie: &'m Trie,
    pub(super) node: usize,
    pub(super) slots: &'s mut [Slot<'de>],
    pub(super) results: &'s mut Option<(u8, Found<'de>)>,
    /// Results past `max_results`: not kept, only noticed.
    pub(super) overflow: &'s mut bool,
    /// The nodes of `trie` met so far in this object (message or result).
    pub(super) seen: &'s mut Seen,
    pub(super) root: bool,
}

impl<'c, 'm, 's, 'de> Walk<'c, 'm, 's, 'de> {
    fn put(&mut self, value: Scalar<'de>) {
        for &(target, alt) in &self.trie.nodes[self.node].slots {
            let slot = &mut self.slots[target.slot()];
            if slot.as_ref().is_none_or(|(a, _)| alt < *a) {
                *slot = Some((alt, value.clone()));
            }
        }
    }

    /// Whether alternative `alt` of `results` beats what was found so far.
    fn results_wanted(&self) -> Option<u8> {
        let alt = self.trie.nodes[self.node].results?;
        match &*self.results {
            Some((a, _)) if *a <= alt => None,
            _ => Some(alt),
        }
    }

    fn scalar<E: de::Error>(mut self, value: Scalar<'de>) -> Result<(), E> {
        if self.root {
            return Err(E::invalid_type(de::Unexpected::Other("a scalar"), &"an object"));
        }
        if let Some(alt) = self.results_wanted() {
            *self.results = Some((alt, Found::Other));
        }
        self.put(value);
        Ok(())
    }

    /// Marks member `node` met. A member a path reaches, given twice in
    /// its object, is `wrong_type` (as serde rejects it in the other
    /// formats), whatever its values (`null` too) and wherever it stands.
    fn meet<E: de::Error>(&mut self, node: usize) -> Result<(), E> {
        if self.seen.first(node) { Ok(()) } else { Err(E::custom("a member given twice")) }
    }

    fn child(&mut self, node: usize) -> Walk<'_, 'm, '_, 'de> {
        Walk {
            cx: self.cx,
            trie: self.trie,
            node,
            slots: &mut *self.slots,
            results: &mut *self.results,
            overflow: &mut *self.overflow,
            seen: &mut *self.seen,
            root: false,
        }
    }
}

// A seed of its own rather than the toolkit's `AnyValue`: through the
// wrapper, the walk's recursion inlined differently and decoding a mapped
// message cost 1.5% more instructions (callgrind).
impl<'de> DeserializeSeed<'de> for Walk<'_, '_, '_, 'de> {
    type Value = ();
    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Walk<'_, '_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(if self.root { "an object" } else { "any JSON value" })
    }
    fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<(), E> {
        self.scalar(Scalar::Str(Cow::Borrowed(v)))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.scalar(Scalar::Str(Cow::Owned(v.to_string())))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<(), E> {
        self.scalar(Scalar::Str(Cow::Owned(v)))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.scalar(Scalar::I64(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.scalar(Scalar::U64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.scalar(Scalar::F64(v))
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.scalar(Scalar::Bool(v))
    }
    fn visit_unit<E: de::Error>(self) -> Result<(), E> {
        if self.root {
            return Err(E::invalid_type(de::Unexpected::Unit, &"an object"));
        }
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if let Some(alt) = self.results_wanted() {
            *self.results = Some((alt, Found::Other));
        }
        self.put(Scalar::Compound);
        while let Some(key) = map.next_key::<Text<'de>>()? {
            match self.trie.child_by_key(self.node, &key.0) {
                Some(c) => {
                    self.meet(c)?;
                    map.next_value_seed(self.child(c))?
                }
                None => map.next_value::<IgnoredAny>().map(|_| ())?,
            }
        }
        Ok(())
    }
    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if self.root {
            return Err(de::Error::invalid_type(de::Unexpected::Seq, &"an object"));
        }
        self.put(Scalar::Compound);
        if let Some(alt) = self.results_wanted() {
            let mut found = Vec::with_capacity(page_capacity(seq.size_hint()));
            let mut failed = None;
            // Elements read, kept or not: more than `max_results` is
            // `too_many_results` whatever else is wrong with them.
            let mut count = 0usize;
            let mapping = self.cx.mapping;
            let mut none: Option<(u8, Found<'de>)> = None;
            loop {
                if count >= self.cx.max_results || failed.is_some() {
                    if seq.next_element::<IgnoredAny>()?.is_none() {
                        break;
                    }
                    count = count.saturating_add(1);
                    *self.overflow |= count > self.cx.max_results;
                    continue;
                }
                let mut slots: [Slot<'de>; RESULT_SLOTS] = [None, None, None];
                let mut seen: Seen = Default::default();
                let element = Walk {
                    cx: self.cx,
                    trie: &mapping.result,
                    node: 0,
                    slots: &mut slots,
                    results: &mut none,
                    overflow: &mut *self.overflow,
                    seen: &mut seen,
                    root: false,
                };
                if seq.next_element_seed(element)?.is_none() {
                    break;
                }
                match shown(slots, count, mapping.position_base) {
                    Ok(s) => found.push(s),
                    Err(reason) => failed = Some(reason),
                }
                count += 1;
            }
            *self.results = Some((alt, Found::Array(found, failed)));
            return Ok(());
        }
        let mut index = 0usize;
        loop {
            let more = match self.trie.child_by_index(self.node, index) {
                Some(c) => seq.next_element_seed(self.child(c))?.is_some(),
                None => seq.next_element::<IgnoredAny>()?.is_some(),
            };
            if !more {
                return Ok(());
            }
            index = index.saturating_add(1);
        }
    }
}
