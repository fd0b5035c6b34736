//! The `mapped` format: any JSON schema → typed [`Event`], by a declarative
//! field mapping (`[mapped]`, docs/formats.md).
//!
//! First stage of the stream, beside the native and UBI decoders: a topic
//! (or a replayed file) whose format is `mapped` is decoded here into the
//! same [`Event`]s, so that assembly, scoring and windows are the native
//! ones. Each rankpulse field is read from a configured path (a dotted
//! path `a.b.0.c` or an RFC 6901 pointer `/a/b/0/c`), or from the first of
//! several alternatives that is present; a message whose `results` path
//! holds an array is an impression, any other message a judgment.
//!
//! Why it is built this way: a mapped topic carries whatever else its
//! producer logs (request headers, feature vectors, whole documents), and
//! the decoder runs once per message on the consumer's hot path. Building
//! a `serde_json::Value` of every message would allocate a node for each
//! of those fields only to drop them. Instead the configured paths are
//! compiled once, at start, into a small trie ([`Mapping`]); one serde
//! visitor walks the message, descends only into keys and indices on a
//! path, skips everything else with [`IgnoredAny`], and borrows strings
//! from the message where JSON allows it, as the other decoders do. What
//! it captures is a handful of scalars in fixed slots, and the results of
//! an impression are converted as they are read, into the one `Vec` the
//! event keeps (strings with escapes and integer ids are copied, as in
//! the other decoders).
//!
//! Every way a message can be wrong maps to one [`RejectReason`], the same
//! ones the UBI decoder gives for the same fault; an action missing from
//! `[judgments.actions]` is ignored ([`IgnoreReason::UnmappedAction`]) as
//! in UBI. A mapping without an `id` path makes the message its own id, as
//! UBI does, so a re-delivered message counts once.
//!
//! One file for one format, as `ubi.rs`: the mapping, its trie and the
//! visitor that walks it belong together. It passes 600 lines only with
//! the tests that walk every path form and every reject reason.

use super::toolkit::{RawTimestamp, Text, classify, message_text};
use super::{DecodeLimits, Event, IgnoreReason, Impression, Judgment, RejectReason, Shown};
use crate::metrics::Grade;
use serde::de::{self, DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use thiserror::Error;

/// The configured paths, as written (`[mapped]`): each key a list of
/// alternatives, the first present one winning; an empty list is a key
/// not given. The default is the configuration's: nothing mapped,
/// positions 1-based.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MappingSpec {
    pub session: Vec<String>,
    pub query: Vec<String>,
    pub time: Vec<String>,
    pub id: Vec<String>,
    pub results: Vec<String>,
    pub result_doc: Vec<String>,
    pub result_position: Vec<String>,
    pub result_score: Vec<String>,
    /// The position the first result has in `result_position` (0 or 1).
    pub position_base: u32,
    pub judged_doc: Vec<String>,
    pub grade: Vec<String>,
    pub action: Vec<String>,
    /// Dimension label → its paths.
    pub dimensions: Vec<(String, Vec<String>)>,
}

impl Default for MappingSpec {
    fn default() -> Self {
        MappingSpec {
            session: Vec::new(),
            query: Vec::new(),
            time: Vec::new(),
            id: Vec::new(),
            results: Vec::new(),
            result_doc: Vec::new(),
            result_position: Vec::new(),
            result_score: Vec::new(),
            position_base: 1,
            judged_doc: Vec::new(),
            grade: Vec::new(),
            action: Vec::new(),
            dimensions: Vec::new(),
        }
    }
}

/// Why one path does not parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Error)]
pub enum PathError {
    #[error("a path must not be empty")]
    Empty,
    #[error("a dotted path has no empty segment (write keys with dots or empty keys as a JSON pointer, `/a.b`)")]
    EmptySegment,
    #[error("`~` in a JSON pointer must be followed by 0 (`~`) or 1 (`/`)")]
    BadEscape,
}

/// A `[mapped]` setting rankpulse cannot decode with; `key` is the
/// setting's name below `mapped` (`time`, `dimensions.ranker`).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum MappingError {
    #[error("is required by the mapped format")]
    Required { key: String },
    #[error("one of grade or action is required by the mapped format")]
    GradeOrAction { key: String },
    #[error("`{path}` is not a path: {reason}")]
    Path { key: String, path: String, reason: PathError },
    #[error(
        "`{path}` leads into results (`{results}`): a result's fields are result_doc, result_position and result_score, relative to the result"
    )]
    IntoResults { key: String, path: String, results: String },
    #[error("{base} is neither 0 nor 1 (the result_position of the first result)")]
    PositionBase { key: String, base: u32 },
    #[error("{count} labels, more than the {MAX_DIMENSIONS} a list can carry")]
    Dimensions { key: String, count: usize },
    #[error("the paths name {count} distinct members, more than the {MAX_NODES} a message is checked for")]
    TooManyMembers { key: String, count: usize },
}

impl MappingError {
    /// The setting, below `mapped`.
    pub fn key(&self) -> &str {
        match self {
            MappingError::Required { key }
            | MappingError::GradeOrAction { key }
            | MappingError::Path { key, .. }
            | MappingError::IntoResults { key, .. }
            | MappingError::PositionBase { key, .. }
            | MappingError::Dimensions { key, .. }
            | MappingError::TooManyMembers { key, .. } => key,
        }
    }
}

/// One segment of a path: an object key, and the array index it names
/// when it is all digits without a leading zero (RFC 6901's rule, kept
/// for dotted paths too, so that both forms of a path mean the same).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Segment {
    key: String,
    index: Option<usize>,
}

/// The segments of `path`: an RFC 6901 pointer when it starts with `/`,
/// else a dotted path. `""` is the value itself (no segment).
fn parse_path(path: &str) -> Result<Vec<Segment>, PathError> {
    let segment = |key: String| {
        let digits =
            !key.is_empty() && key.bytes().all(|b| b.is_ascii_digit()) && (key.len() == 1 || !key.starts_with('0'));
        let index = if digits { key.parse().ok() } else { None };
        Segment { key, index }
    };
    if path.is_empty() {
        return Ok(Vec::new());
    }
    if let Some(pointer) = path.strip_prefix('/') {
        return pointer
            .split('/')
            .map(|raw| {
                let mut key = String::with_capacity(raw.len());
                let mut chars = raw.chars();
                while let Some(c) = chars.next() {
                    if c != '~' {
                        key.push(c);
                        continue;
                    }
                    match chars.next() {
                        Some('0') => key.push('~'),
                        Some('1') => key.push('/'),
                        _ => return Err(PathError::BadEscape),
                    }
                }
                Ok(segment(key))
            })
            .collect();
    }
    path.split('.')
        .map(|key| if key.is_empty() { Err(PathError::EmptySegment) } else { Ok(segment(key.to_string())) })
        .collect()
}

/// What a captured value becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Session,
    Query,
    Time,
    Id,
    JudgedDoc,
    Grade,
    Action,
    /// `dimensions.labels` entry `i` of the mapping's own list.
    Dimension(u8),
    /// Inside a result.
    Doc,
    Position,
    Score,
}

/// Fixed slots of the message's targets (dimensions after them).
const MESSAGE_SLOTS: usize = 7;
/// Dimension labels a mapping may read (the assembler's limit).
const MAX_DIMENSIONS: usize = super::MAX_DIMENSION_LABELS;
/// Slots of a result: doc, position, score.
const RESULT_SLOTS: usize = 3;
/// Members the paths of one trie may name (its nodes): each message keeps
/// one bit per node on the stack, to find a member given twice.
const MAX_NODES: usize = 512;
/// The bits of [`MAX_NODES`].
type Seen = [u64; MAX_NODES / 64];

impl Target {
    fn slot(self) -> usize {
        match self {
            Target::Session | Target::Doc => 0,
            Target::Query | Target::Position => 1,
            Target::Time | Target::Score => 2,
            Target::Id => 3,
            Target::JudgedDoc => 4,
            Target::Grade => 5,
            Target::Action => 6,
            Target::Dimension(i) => MESSAGE_SLOTS + usize::from(i),
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Node {
    segment: Option<Segment>,
    children: Vec<u32>,
    /// The targets read from this node's value, with the alternative's rank.
    slots: Vec<(Target, u8)>,
    /// The `results` alternative this node is, if it is one.
    results: Option<u8>,
}

/// The paths of one JSON object (a message, or a result), merged by
/// common prefix: node 0 is the object itself.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Trie {
    nodes: Vec<Node>,
}

impl Trie {
    fn new() -> Self {
        Trie { nodes: vec![Node::default()] }
    }

    /// The node of `segments`, created if needed.
    fn node(&mut self, segments: &[Segment]) -> usize {
        let mut at = 0;
        for s in segments {
            let found = self.nodes[at]
                .children
                .iter()
                .map(|&c| c as usize)
                .find(|&c| self.nodes[c].segment.as_ref() == Some(s));
            at = match found {
                Some(c) => c,
                None => {
                    self.nodes.push(Node { segment: Some(s.clone()), ..Node::default() });
                    let c = self.nodes.len() - 1;
                    self.nodes[at].children.push(c as u32);
                    c
                }
            };
        }
        at
    }

    fn child_by_key(&self, at: usize, key: &str) -> Option<usize> {
        self.nodes[at]
            .children
            .iter()
            .map(|&c| c as usize)
            .find(|&c| self.nodes[c].segment.as_ref().is_some_and(|s| s.key == key))
    }

    fn child_by_index(&self, at: usize, index: usize) -> Option<usize> {
        self.nodes[at]
            .children
            .iter()
            .map(|&c| c as usize)
            .find(|&c| self.nodes[c].segment.as_ref().is_some_and(|s| s.index == Some(index)))
    }
}

/// A `[mapped]` mapping compiled for decoding: built once, at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mapping {
    message: Trie,
    result: Trie,
    position_base: u32,
    /// Dimension labels, in slot order.
    labels: Vec<String>,
    /// Whether `id` is mapped (else the message is its own id).
    has_id: bool,
}

impl Mapping {
    /// Compiles `spec`, or names the first setting that is wrong.
    pub fn new(spec: &MappingSpec) -> Result<Mapping, MappingError> {
        let required = |key: &str, paths: &[String]| {
            if paths.is_empty() { Err(MappingError::Required { key: key.to_string() }) } else { Ok(()) }
        };
        required("session", &spec.session)?;
        required("time", &spec.time)?;
        required("results", &spec.results)?;
        required("result_doc", &spec.result_doc)?;
        required("judged_doc", &spec.judged_doc)?;
        if spec.grade.is_empty() && spec.action.is_empty() {
            return Err(MappingError::GradeOrAction { key: "grade".to_string() });
        }
        if spec.position_base > 1 {
            return Err(MappingError::PositionBase { key: "position_base".to_string(), base: spec.position_base });
        }
        if spec.dimensions.len() > MAX_DIMENSIONS {
            return Err(MappingError::Dimensions { key: "dimensions".to_string(), count: spec.dimensions.len() });
        }
        let parse = |key: &str, path: &str, empty_ok: bool| {
            let err = |reason| MappingError::Path { key: key.to_string(), path: path.to_string(), reason };
            let segments = parse_path(path).map_err(err)?;
            if segments.is_empty() && !empty_ok {
                return Err(err(PathError::Empty));
            }
            Ok(segments)
        };
        let mut message = Trie::new();
        let mut results = Vec::new();
        for (alt, path) in spec.results.iter().enumerate() {
            let segments = parse("results", path, false)?;
            let at = message.node(&segments);
            message.nodes[at].results.get_or_insert(alt.min(255) as u8);
            results.push((path.clone(), segments));
        }
        let mut fields: Vec<(String, Target, &[String])> = vec![
            ("session".into(), Target::Session, spec.session.as_slice()),
            ("query".into(), Target::Query, spec.query.as_slice()),
            ("time".into(), Target::Time, spec.time.as_slice()),
            ("id".into(), Target::Id, spec.id.as_slice()),
            ("judged_doc".into(), Target::JudgedDoc, spec.judged_doc.as_slice()),
            ("grade".into(), Target::Grade, spec.grade.as_slice()),
            ("action".into(), Target::Action, spec.action.as_slice()),
        ];
        for (i, (label, paths)) in spec.dimensions.iter().enumerate() {
            fields.push((format!("dimensions.{label}"), Target::Dimension(i as u8), paths.as_slice()));
        }
        for (key, target, paths) in fields {
            for (alt, path) in paths.iter().enumerate() {
                let segments = parse(&key, path, false)?;
                // The results array is read element by element with the
                // result's own paths; a path into it would never be reached.
                if let Some((results, _)) =
                    results.iter().find(|(_, r)| segments.len() > r.len() && segments.starts_with(r))
                {
                    return Err(MappingError::IntoResults { key, path: path.clone(), results: results.clone() });
                }
                let at = message.node(&segments);
                message.nodes[at].slots.push((target, alt.min(255) as u8));
            }
        }
        let mut result = Trie::new();
        for (key, target, paths, empty_ok) in [
            ("result_doc", Target::Doc, &spec.result_doc, true),
            ("result_position", Target::Position, &spec.result_position, false),
            ("result_score", Target::Score, &spec.result_score, false),
        ] {
            for (alt, path) in paths.iter().enumerate() {
                let segments = parse(key, path, empty_ok)?;
                let at = result.node(&segments);
                result.nodes[at].slots.push((target, alt.min(255) as u8));
            }
        }
        for (key, trie) in [("dimensions", &message), ("result_doc", &result)] {
            if trie.nodes.len() > MAX_NODES {
                return Err(MappingError::TooManyMembers { key: key.to_string(), count: trie.nodes.len() - 1 });
            }
        }
        Ok(Mapping {
            message,
            result,
            position_base: spec.position_base,
            labels: spec.dimensions.iter().map(|(l, _)| l.clone()).collect(),
            has_id: !spec.id.is_empty(),
        })
    }
}

/// A JSON value where a path ends: a scalar as sent, or only the fact that
/// an object or array stood there (`null` is never captured: absent).
#[derive(Debug, Clone, PartialEq)]
enum Scalar<'a> {
    Str(Cow<'a, str>),
    I64(i64),
    U64(u64),
    F64(f64),
    Bool(bool),
    Compound,
}

/// A captured value with the rank of the alternative it came from.
type Slot<'a> = Option<(u8, Scalar<'a>)>;

/// The results array, where one was found.
enum Found<'a> {
    /// Its results, converted as they are read, and the first result that
    /// could not be (reported only once the message's own fields are
    /// checked, so that a message gets the reason it would get whatever
    /// the order of its fields).
    Array(Vec<Shown<'a>>, Option<RejectReason>),
    /// Present, but not an array: the message is a judgment.
    Other,
}

/// What decoding carries down the walk.
struct Context<'m> {
    mapping: &'m Mapping,
    max_results: usize,
}

/// Where a walk records: the slots of the object walked, and (for a
/// message) its results.
struct Walk<'c, 'm, 's, 'de> {
    cx: &'c Context<'m>,
    trie: &'m Trie,
    node: usize,
    slots: &'s mut [Slot<'de>],
    results: &'s mut Option<(u8, Found<'de>)>,
    /// Results past `max_results`: not kept, only noticed.
    overflow: &'s mut bool,
    /// The nodes of `trie` met so far in this object (message or result).
    seen: &'s mut Seen,
    root: bool,
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
    /// formats), whatever its values (`null` too) and wherever it stands:
    /// keeping the first, or the last as most JSON parsers do, would be a
    /// guess between two grades or two sessions.
    fn meet<E: de::Error>(&mut self, node: usize) -> Result<(), E> {
        let (word, bit) = (node / 64, 1u64 << (node % 64));
        match self.seen.get_mut(word) {
            Some(w) if *w & bit != 0 => Err(E::custom("a member given twice")),
            Some(w) => {
                *w |= bit;
                Ok(())
            }
            None => Ok(()),
        }
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
            let mut found = Vec::with_capacity(seq.size_hint().unwrap_or(16).min(16));
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

/// Decodes one message with the mapping of `limits` (`Format::Mapped`).
/// Without a mapping (the configuration requires one for this format)
/// nothing can be read: `missing_field`. Never panics on any input.
pub fn decode<'a>(bytes: &'a [u8], limits: &DecodeLimits) -> Result<Event<'a>, RejectReason> {
    let text = message_text(bytes, limits)?;
    let Some(mapping) = limits.mapped.as_ref() else { return Err(RejectReason::MissingField) };
    let cx = Context { mapping, max_results: limits.max_results };
    let mut slots: [Slot<'a>; MESSAGE_SLOTS + MAX_DIMENSIONS] = Default::default();
    let mut results = None;
    let mut overflow = false;
    let mut seen: Seen = Default::default();
    let walk = Walk {
        cx: &cx,
        trie: &mapping.message,
        node: 0,
        slots: &mut slots,
        results: &mut results,
        overflow: &mut overflow,
        seen: &mut seen,
        root: true,
    };
    let mut de = serde_json::Deserializer::from_str(text);
    walk.deserialize(&mut de).and_then(|()| de.end()).map_err(|e| classify(&e, text))?;
    let take = |t: Target, slots: &mut [Slot<'a>]| slots[t.slot()].take().map(|(_, v)| v);
    match results {
        Some((_, Found::Array(shown, failed))) => {
            if overflow {
                return Err(RejectReason::TooManyResults);
            }
            let session_id = id_text(take(Target::Session, &mut slots))?.ok_or(RejectReason::MissingField)?;
            let timestamp_ms = time(take(Target::Time, &mut slots))?;
            let query_id = id_text(take(Target::Query, &mut slots))?;
            let event_id = event_id(mapping, text, take(Target::Id, &mut slots))?;
            if let Some(reason) = failed {
                return Err(reason);
            }
            let mut dimensions = BTreeMap::new();
            for (i, label) in mapping.labels.iter().enumerate() {
                if let Some(v) = dimension(take(Target::Dimension(i as u8), &mut slots)) {
                    dimensions.insert(Cow::Owned(label.clone()), v);
                }
            }
            Ok(Event::Impression(Impression {
                event_id,
                session_id,
                query_id,
                timestamp_ms,
                results: shown,
                dimensions,
                defines_list: true,
                randomized: false,
                results_unknown: false,
            }))
        }
        _ => {
            // As in UBI, an action rankpulse does not score says nothing
            // else about the message: ignored before anything is checked.
            let grade = match (take(Target::Grade, &mut slots), take(Target::Action, &mut slots)) {
                (Some(g), _) => grade(g, limits.max_grade)?,
                // Empty is absent, as for every required field (and as
                // UBI's `action_name`).
                (None, Some(Scalar::Str(action))) if action.is_empty() => return Err(RejectReason::MissingField),
                (None, Some(Scalar::Str(action))) => match limits.actions.get(action.as_ref()) {
                    Some(g) => *g,
                    None => return Ok(Event::Ignored(IgnoreReason::UnmappedAction)),
                },
                (None, Some(_)) => return Err(RejectReason::WrongType),
                (None, None) => return Err(RejectReason::MissingField),
            };
            let session_id = id_text(take(Target::Session, &mut slots))?.ok_or(RejectReason::MissingField)?;
            let timestamp_ms = time(take(Target::Time, &mut slots))?;
            let doc_id = id_text(take(Target::JudgedDoc, &mut slots))?.ok_or(RejectReason::MissingField)?;
            let query_id = id_text(take(Target::Query, &mut slots))?;
            let event_id = event_id(mapping, text, take(Target::Id, &mut slots))?;
            Ok(Event::Judgment(Judgment { event_id, session_id, query_id, doc_id, grade, timestamp_ms }))
        }
    }
}

/// The result read into `slots`, the `index`th of its array.
fn shown(slots: [Slot<'_>; RESULT_SLOTS], index: usize, base: u32) -> Result<Shown<'_>, RejectReason> {
    let [doc, position_at, score] = slots.map(|s| s.map(|(_, v)| v));
    let doc_id = id_text(doc)?.ok_or(RejectReason::MissingField)?;
    let position = match position_at {
        None => u32::try_from(index + 1).map_err(|_| RejectReason::InvalidPosition)?,
        Some(p) => position(p, base)?,
    };
    let score = match score {
        None => None,
        Some(Scalar::I64(v)) => Some(v as f64),
        Some(Scalar::U64(v)) => Some(v as f64),
        Some(Scalar::F64(v)) => Some(v),
        Some(_) => return Err(RejectReason::WrongType),
    };
    Ok(Shown { doc_id, position, score, team: None })
}

/// An identifier: a string or an integer; empty or absent is none.
fn id_text(value: Option<Scalar<'_>>) -> Result<Option<Cow<'_, str>>, RejectReason> {
    match value {
        None => Ok(None),
        Some(Scalar::Str(s)) => Ok(Some(s).filter(|s| !s.is_empty())),
        Some(Scalar::I64(v)) => Ok(Some(Cow::Owned(v.to_string()))),
        Some(Scalar::U64(v)) => Ok(Some(Cow::Owned(v.to_string()))),
        Some(_) => Err(RejectReason::WrongType),
    }
}

/// The event id: the mapped one (required when mapped, as the native
/// `event_id` is), else the message itself.
fn event_id<'a>(mapping: &Mapping, text: &'a str, value: Option<Scalar<'a>>) -> Result<Cow<'a, str>, RejectReason> {
    if !mapping.has_id {
        return Ok(Cow::Borrowed(text));
    }
    id_text(value)?.ok_or(RejectReason::MissingField)
}

/// Event time: ISO 8601 text by UBI's rules, or epoch milliseconds.
fn time(value: Option<Scalar<'_>>) -> Result<i64, RejectReason> {
    let raw = match value.ok_or(RejectReason::MissingField)? {
        Scalar::Str(s) => RawTimestamp::Text(s),
        Scalar::I64(v) => RawTimestamp::Millis(v as f64),
        Scalar::U64(v) => RawTimestamp::Millis(v as f64),
        Scalar::F64(v) => RawTimestamp::Millis(v),
        Scalar::Bool(_) | Scalar::Compound => return Err(RejectReason::WrongType),
    };
    raw.to_millis_with(true)
}

/// A result's 1-based position from the mapped one (`base`-based).
fn position(value: Scalar<'_>, base: u32) -> Result<u32, RejectReason> {
    let p = match value {
        Scalar::I64(v) => v,
        Scalar::U64(v) => i64::try_from(v).map_err(|_| RejectReason::InvalidPosition)?,
        _ => return Err(RejectReason::WrongType),
    };
    p.checked_sub(i64::from(base))
        .and_then(|p| p.checked_add(1))
        .filter(|p| *p >= 1)
        .and_then(|p| u32::try_from(p).ok())
        .ok_or(RejectReason::InvalidPosition)
}

/// A grade: an integer, or a number with no fraction, within the range.
fn grade(value: Scalar<'_>, max: Grade) -> Result<Grade, RejectReason> {
    let g = match value {
        Scalar::I64(v) => v,
        Scalar::U64(v) => i64::try_from(v).unwrap_or(i64::MAX),
        Scalar::F64(v) if v.fract() == 0.0 && v.abs() < 1e15 => v as i64,
        _ => return Err(RejectReason::WrongType),
    };
    if !(0..=i64::from(max)).contains(&g) {
        return Err(RejectReason::GradeOutOfRange);
    }
    Ok(g as Grade)
}

/// A dimension value: strings as sent, numbers and booleans as their JSON
/// text; objects and arrays, like `null` and absence, are `unknown` (as
/// UBI's attributes are: a producer's field of another shape must not
/// reject its impression).
fn dimension(value: Option<Scalar<'_>>) -> Option<Cow<'_, str>> {
    match value? {
        Scalar::Str(s) => Some(s),
        Scalar::I64(v) => Some(Cow::Owned(v.to_string())),
        Scalar::U64(v) => Some(Cow::Owned(v.to_string())),
        Scalar::F64(v) => Some(Cow::Owned(v.to_string())),
        Scalar::Bool(b) => Some(Cow::Borrowed(if b { "true" } else { "false" })),
        Scalar::Compound => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths(p: &[&str]) -> Vec<String> {
        p.iter().map(|s| s.to_string()).collect()
    }

    /// An invented schema: impressions and clicks with different names
    /// for time and doc, nested session, a pointer with escapes.
    fn spec() -> MappingSpec {
        MappingSpec {
            session: paths(&["user.session_id", "/ctx/sid"]),
            query: paths(&["query_id"]),
            time: paths(&["ts", "clicked_at"]),
            id: Vec::new(),
            results: paths(&["hits"]),
            result_doc: paths(&["doc.id", "doc_id"]),
            result_position: paths(&["rank"]),
            result_score: paths(&["score"]),
            position_base: 1,
            judged_doc: paths(&["doc"]),
            grade: paths(&["label"]),
            action: paths(&["event_type"]),
            dimensions: vec![
                ("ranker".into(), paths(&["/exp~1arm/a~0b"])),
                ("market".into(), paths(&["geo.markets.1", "geo.market"])),
            ],
        }
    }

    fn limits_with(spec: &MappingSpec) -> DecodeLimits {
        DecodeLimits { mapped: Some(Mapping::new(spec).unwrap()), ..DecodeLimits::default() }
    }

    fn decode_with<'a>(spec: &MappingSpec, json: &'a str) -> Result<Event<'a>, RejectReason> {
        decode(json.as_bytes(), &limits_with(spec))
    }

    fn event(json: &str) -> Result<Event<'_>, RejectReason> {
        decode_with(&spec(), json)
    }

    #[test]
    fn paths_parse_as_dotted_or_pointer() {
        let keys = |p: &str| parse_path(p).map(|s| s.into_iter().map(|s| (s.key, s.index)).collect::<Vec<_>>());
        assert_eq!(keys("a.b.0"), Ok(vec![("a".into(), None), ("b".into(), None), ("0".into(), Some(0))]));
        assert_eq!(keys("/a~1b/~0c/12"), Ok(vec![("a/b".into(), None), ("~c".into(), None), ("12".into(), Some(12))]));
        assert_eq!(keys("/x.y"), Ok(vec![("x.y".into(), None)]));
        // A leading zero is a key, never an index (RFC 6901).
        assert_eq!(keys("a.01./0"), Ok(vec![("a".into(), None), ("01".into(), None), ("/0".into(), None)]));
        // RFC 6901: `~01` is `~1`, not `/`; `/` is the empty key.
        assert_eq!(keys("/~01"), Ok(vec![("~1".into(), None)]));
        assert_eq!(keys("/"), Ok(vec![(String::new(), None)]));
        assert_eq!(keys(""), Ok(vec![]));
        assert_eq!(keys("a..b"), Err(PathError::EmptySegment));
        assert_eq!(keys(".a"), Err(PathError::EmptySegment));
        assert_eq!(keys("/a~2"), Err(PathError::BadEscape));
        assert_eq!(keys("/a~"), Err(PathError::BadEscape));
    }

    #[test]
    fn an_impression_reads_every_path() {
        let imp = r#"{"user":{"session_id":"s1","agent":{"deep":[1,2,{"x":null}]}},"query_id":7,"ts":"2023-11-14T22:13:20Z",
            "exp/arm":{"a~b":"v2"},"geo":{"markets":["us","de"]},
            "hits":[{"doc":{"id":"d1"},"rank":1,"score":12.5},{"doc_id":42,"rank":3,"score":2},{"doc_id":"d3","rank":2}]}"#;
        let Ok(Event::Impression(i)) = event(imp) else { panic!("{:?}", event(imp)) };
        assert_eq!((i.session_id.as_ref(), i.query_id.as_deref()), ("s1", Some("7")));
        assert_eq!(i.timestamp_ms, 1_700_000_000_000);
        assert_eq!(i.event_id, imp, "no id path: the message is its id");
        assert_eq!(
            i.results,
            [
                Shown { doc_id: "d1".into(), position: 1, score: Some(12.5), team: None },
                Shown { doc_id: "42".into(), position: 3, score: Some(2.0), team: None },
                Shown { doc_id: "d3".into(), position: 2, score: None, team: None },
            ]
        );
        assert_eq!(i.dimensions.get("ranker").map(|v| v.as_ref()), Some("v2"));
        assert_eq!(i.dimensions.get("market").map(|v| v.as_ref()), Some("de"), "array index 1");
        assert!(i.defines_list);
        assert!(matches!(i.session_id, Cow::Borrowed(_)), "borrowed, not copied");
    }

    #[test]
    fn alternatives_take_the_first_present_whatever_the_order() {
        // `/ctx/sid` only where `user.session_id` is absent or null; `geo.market` where `geo.markets.1` is.
        let imp = |user: &str| {
            format!(
                r#"{{"geo":{{"market":"jp","markets":["us"]}},"ctx":{{"sid":"c9"}},{user}"ts":1,"hits":[{{"doc_id":"a"}}]}}"#
            )
        };
        for (user, want) in
            [("", "c9"), (r#""user":{"session_id":null},"#, "c9"), (r#""user":{"session_id":"s"},"#, "s")]
        {
            let json = imp(user);
            let Ok(Event::Impression(i)) = event(&json) else { panic!("{json}") };
            assert_eq!(i.session_id, want, "{json}");
            assert_eq!(i.dimensions.get("market").map(|v| v.as_ref()), Some("jp"));
            assert_eq!(i.dimensions.get("ranker"), None, "unmapped value: unknown");
        }
        // Later in the message, but the first alternative: it wins.
        let late = r#"{"ctx":{"sid":"c9"},"ts":1,"hits":[],"user":{"session_id":"s"}}"#;
        let Ok(Event::Impression(i)) = event(late) else { panic!() };
        assert_eq!(i.session_id, "s");
        // The second time path, for a click.
        let click = r#"{"user":{"session_id":"s"},"clicked_at":1700000000000,"doc":5,"event_type":"click"}"#;
        let Ok(Event::Judgment(j)) = event(click) else { panic!("{:?}", event(click)) };
        assert_eq!((j.doc_id.as_ref(), j.grade, j.timestamp_ms), ("5", 1, 1_700_000_000_000));
    }

    #[test]
    fn positions_given_or_in_array_order_from_the_base() {
        let mut s = spec();
        let imp = r#"{"ctx":{"sid":"c"},"ts":1,"hits":[{"doc_id":"a"},{"doc_id":"b","rank":0},{"doc_id":"c"}]}"#;
        s.position_base = 0;
        let Ok(Event::Impression(i)) = decode_with(&s, imp) else { panic!() };
        assert_eq!(i.results.iter().map(|r| r.position).collect::<Vec<_>>(), [1, 1, 3], "rank 0 is first, 0-based");
        s.position_base = 1;
        assert_eq!(decode_with(&s, imp), Err(RejectReason::InvalidPosition), "rank 0 is below base 1");
        s.result_position.clear();
        let Ok(Event::Impression(i)) = decode_with(&s, imp) else { panic!() };
        assert_eq!(
            i.results.iter().map(|r| r.position).collect::<Vec<_>>(),
            [1, 2, 3],
            "no position path: array order"
        );
        // The element itself as the doc id.
        s.result_doc = paths(&[""]);
        let ids = r#"{"ctx":{"sid":"c"},"ts":1,"hits":["x",17,"z"]}"#;
        let Ok(Event::Impression(i)) = decode_with(&s, ids) else { panic!() };
        let docs: Vec<(&str, u32)> = i.results.iter().map(|r| (r.doc_id.as_ref(), r.position)).collect();
        assert_eq!(docs, [("x", 1), ("17", 2), ("z", 3)]);
        assert_eq!(decode_with(&s, r#"{"ctx":{"sid":"c"},"ts":1,"hits":["x",1.5]}"#), Err(RejectReason::WrongType));
    }

    #[test]
    fn grade_wins_over_action_and_unmapped_actions_are_ignored() {
        let j = |rest: &str| format!(r#"{{"ctx":{{"sid":"s"}},"clicked_at":1,"doc":"d"{rest}}}"#);
        let grade_of = |json: &str| match event(json) {
            Ok(Event::Judgment(j)) => Ok(j.grade),
            Ok(other) => panic!("{other:?}"),
            Err(r) => Err(r),
        };
        assert_eq!(grade_of(&j(r#","label":2,"event_type":"purchase""#)), Ok(2));
        assert_eq!(grade_of(&j(r#","label":null,"event_type":"purchase""#)), Ok(3));
        assert_eq!(grade_of(&j(r#","label":3.0"#)), Ok(3));
        assert_eq!(event(&j(r#","event_type":"hover""#)), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        // Ignored before anything else is looked at, as UBI's unmapped actions are.
        assert_eq!(event(r#"{"event_type":"hover"}"#), Ok(Event::Ignored(IgnoreReason::UnmappedAction)));
        assert_eq!(grade_of(&j(r#","label":9"#)), Err(RejectReason::GradeOutOfRange));
        assert_eq!(grade_of(&j(r#","label":-1"#)), Err(RejectReason::GradeOutOfRange));
        assert_eq!(grade_of(&j(r#","label":"2""#)), Err(RejectReason::WrongType));
        assert_eq!(grade_of(&j(r#","label":2.5"#)), Err(RejectReason::WrongType));
        assert_eq!(grade_of(&j(r#","event_type":1"#)), Err(RejectReason::WrongType));
        assert_eq!(grade_of(&j("")), Err(RejectReason::MissingField));
        assert_eq!(grade_of(&j(r#","event_type":"""#)), Err(RejectReason::MissingField));
    }

    /// A member that a path reaches, given twice, at any depth, is
    /// `wrong_type`: which of the two is meant cannot be known. Members no
    /// path reaches may repeat, as the message's own business.
    #[test]
    fn a_member_given_twice_on_a_path_is_wrong_type() {
        let imp = r#""user":{"session_id":"s"},"ts":1700000000000,"hits":[{"doc_id":"a"}]"#;
        let judg = r#""user":{"session_id":"s"},"ts":1700000000000,"doc":"a""#;
        assert!(event(&format!("{{{imp}}}")).is_ok());
        assert!(event(&format!(r#"{{{judg},"label":0}}"#)).is_ok());
        for twice in [
            format!(r#"{{{judg},"label":0,"label":3}}"#),
            format!(r#"{{"user":{{"session_id":"s2"}},{judg},"label":3}}"#),
            format!(r#"{{{judg},"label":3,"geo":{{"market":"us","market":"de"}}}}"#),
            format!(r#"{{{imp},"hits":[{{"doc_id":"b"}}]}}"#),
            r#"{"user":{"session_id":"s"},"ts":1700000000000,"hits":[{"doc_id":"a","doc_id":"b"}]}"#.to_string(),
        ] {
            assert_eq!(event(&twice).map(|_| ()), Err(RejectReason::WrongType), "{twice}");
        }
        // Wherever the second one stands, whatever its value, and for a
        // parent object given twice.
        for twice in [
            format!(r#"{{{judg},"label":null,"label":3}}"#),
            format!(r#"{{{judg},"label":3,"geo":{{"markets":["x","de"],"market":"us","markets":[]}}}}"#),
            r#"{"user":{"session_id":"s"},"user":{},"ts":1700000000000,"doc":"a","label":3}"#.to_string(),
        ] {
            assert_eq!(event(&twice).map(|_| ()), Err(RejectReason::WrongType), "{twice}");
        }
        // Two alternatives of one field, each once: the first wins.
        assert!(event(&format!(r#"{{{judg},"label":3,"geo":{{"market":"us","markets":["x","de"]}}}}"#)).is_ok());
        assert!(event(&format!(r#"{{{judg},"label":3,"other":1,"other":2}}"#)).is_ok());
    }

    #[test]
    fn an_id_path_deduplicates_by_its_value() {
        let mut s = spec();
        s.id = paths(&["meta.event_id"]);
        let j = r#"{"meta":{"event_id":"e1"},"ctx":{"sid":"s"},"clicked_at":1,"doc":"d","label":1}"#;
        let Ok(Event::Judgment(ok)) = decode_with(&s, j) else { panic!() };
        assert_eq!(ok.event_id, "e1");
        let no_id = r#"{"ctx":{"sid":"s"},"clicked_at":1,"doc":"d","label":1}"#;
        assert_eq!(decode_with(&s, no_id), Err(RejectReason::MissingField), "mapped, so required");
    }

    #[test]
    fn every_reject_reason_a_mapping_can_give() {
        let imp = |hits: &str| format!(r#"{{"ctx":{{"sid":"s"}},"ts":1,"hits":{hits}}}"#);
        let j = |rest: &str| format!(r#"{{"ctx":{{"sid":"s"}},"label":1{rest}}}"#);
        for (json, want) in [
            ("{", RejectReason::InvalidJson),
            (r#"{"ts":1} x"#, RejectReason::InvalidJson),
            ("[1]", RejectReason::WrongType),
            ("7", RejectReason::WrongType),
            ("null", RejectReason::WrongType),
            ("1e999", RejectReason::NonFinite),
            (r#"{"ts":1e999}"#, RejectReason::NonFinite),
            (r#"{"ts":1,"hits":[]}"#, RejectReason::MissingField),
            (r#"{"ctx":{"sid":""},"ts":1,"hits":[]}"#, RejectReason::MissingField),
            (r#"{"ctx":{"sid":true},"ts":1,"hits":[]}"#, RejectReason::WrongType),
            (r#"{"ctx":{"sid":{"a":1}},"ts":1,"hits":[]}"#, RejectReason::WrongType),
            (r#"{"ctx":{"sid":"s"},"hits":[]}"#, RejectReason::MissingField),
            (r#"{"ctx":{"sid":"s"},"ts":"yesterday","hits":[]}"#, RejectReason::InvalidTimestamp),
            (r#"{"ctx":{"sid":"s"},"ts":-5,"hits":[]}"#, RejectReason::InvalidTimestamp),
            (r#"{"ctx":{"sid":"s"},"ts":[1],"hits":[]}"#, RejectReason::WrongType),
            (&imp(r#"[{"rank":1}]"#), RejectReason::MissingField),
            (&imp(r#"[{"doc_id":"a","rank":0}]"#), RejectReason::InvalidPosition),
            (&imp(r#"[{"doc_id":"a","rank":99999999999}]"#), RejectReason::InvalidPosition),
            (&imp(r#"[{"doc_id":"a","rank":"1"}]"#), RejectReason::WrongType),
            (&imp(r#"[{"doc_id":"a","score":"high"}]"#), RejectReason::WrongType),
            (&imp(r#"[{"doc_id":"a","score":1e999}]"#), RejectReason::NonFinite),
            (&imp(r#"[{"doc_id":1.5}]"#), RejectReason::WrongType),
            (&j(r#","clicked_at":1"#), RejectReason::MissingField),
            (&j(r#","clicked_at":1,"doc":null"#), RejectReason::MissingField),
            (&j(r#","clicked_at":1,"doc":[]"#), RejectReason::WrongType),
            (&j(r#","doc":"d""#), RejectReason::MissingField),
        ] {
            assert_eq!(event(json), Err(want), "{json}");
        }
        // `hits` not an array: the message is a judgment, and a judgment needs a grade or action.
        assert_eq!(event(&imp("null")), Err(RejectReason::MissingField));
        assert_eq!(event(&imp(r#"{"doc_id":"a"}"#)), Err(RejectReason::MissingField));
        let mut l = limits_with(&spec());
        l.max_results = 2;
        let three = imp(r#"[{"doc_id":"a"},{"doc_id":"b"},{"doc_id":"c"}]"#);
        assert_eq!(decode(three.as_bytes(), &l), Err(RejectReason::TooManyResults));
        let bad_then_many = imp(r#"[{"doc_id":"a","rank":0},{"doc_id":"b"},{"doc_id":"c"}]"#);
        assert_eq!(
            decode(bad_then_many.as_bytes(), &l),
            Err(RejectReason::TooManyResults),
            "as native: the count first"
        );
        let bad_first = imp(r#"[{"doc_id":"a","rank":0},{"doc_id":"b"}]"#);
        assert_eq!(decode(bad_first.as_bytes(), &l), Err(RejectReason::InvalidPosition));
        let no_session = r#"{"ts":1,"hits":[{"doc_id":"a","rank":0}]}"#;
        assert_eq!(
            decode(no_session.as_bytes(), &l),
            Err(RejectReason::MissingField),
            "the message's own fields first"
        );
        assert!(decode(imp(r#"[{"doc_id":"a"},{"doc_id":"b"}]"#).as_bytes(), &l).is_ok());
        l.max_message_bytes = 16;
        assert_eq!(decode(three.as_bytes(), &l), Err(RejectReason::TooLarge));
        assert_eq!(decode(b"{\"ts\":\"\xff\"}", &limits_with(&spec())), Err(RejectReason::InvalidUtf8));
        assert_eq!(
            decode(imp("[]").as_bytes(), &DecodeLimits::default()),
            Err(RejectReason::MissingField),
            "no mapping"
        );
    }

    #[test]
    fn a_mapping_names_the_setting_it_cannot_take() {
        let err = |edit: &dyn Fn(&mut MappingSpec)| {
            let mut s = spec();
            edit(&mut s);
            Mapping::new(&s).unwrap_err()
        };
        let e = err(&|s| s.time.clear());
        assert_eq!((e.key(), e.to_string().as_str()), ("time", "is required by the mapped format"));
        assert_eq!(err(&|s| s.session.clear()).key(), "session");
        assert_eq!(err(&|s| s.results.clear()).key(), "results");
        assert_eq!(err(&|s| s.result_doc.clear()).key(), "result_doc");
        assert_eq!(err(&|s| s.judged_doc.clear()).key(), "judged_doc");
        assert_eq!(
            err(&|s| {
                s.grade.clear();
                s.action.clear()
            })
            .key(),
            "grade"
        );
        let e = err(&|s| s.query = paths(&["a..b"]));
        assert_eq!(e.key(), "query");
        assert!(e.to_string().contains("`a..b` is not a path"), "{e}");
        let e = err(&|s| s.dimensions[1].1 = paths(&["ok", "/bad~"]));
        assert_eq!(e.key(), "dimensions.market");
        assert!(e.to_string().contains("`/bad~`"), "{e}");
        assert_eq!(err(&|s| s.time = paths(&[""])).key(), "time", "empty only for result_doc");
        assert_eq!(err(&|s| s.result_score = paths(&[""])).key(), "result_score");
        let e = err(&|s| s.session = paths(&["hits.0.sid"]));
        assert!(matches!(e, MappingError::IntoResults { .. }) && e.key() == "session", "{e}");
        assert_eq!(err(&|s| s.position_base = 2).key(), "position_base");
        let mut s = spec();
        s.grade.clear();
        assert!(Mapping::new(&s).is_ok(), "action alone");
    }

    proptest::proptest! {
        /// Nothing input can reach panics: generated messages of the
        /// invented schema with bytes overwritten or cut short.
        #[test]
        fn no_input_panics(seed in 0u64..1_000, edits in proptest::collection::vec((0usize..512, 0u8..=255), 0..8), cut in 0usize..512) {
            let mut l = limits_with(&spec());
            l.max_results = 3;
            let messages = [
                format!(r#"{{"user":{{"session_id":"s{seed}"}},"ts":{seed},"exp/arm":{{"a~b":[1]}},"hits":[{{"doc":{{"id":"d"}},"rank":{seed}}},{{"doc_id":{seed},"score":1.5}},"x",null,{{"doc_id":"z"}}]}}"#),
                format!(r#"{{"ctx":{{"sid":{seed}}},"clicked_at":"2023-11-14T22:13:20","doc":"d","label":{},"event_type":"click"}}"#, seed % 5),
            ];
            for m in &messages {
                let mut bytes = m.clone().into_bytes();
                for &(at, b) in &edits {
                    let n = bytes.len();
                    if n > 0 {
                        bytes[at % n] = b;
                    }
                }
                bytes.truncate(cut.max(bytes.len() / 2));
                let _ = decode(&bytes, &l);
            }
        }
    }
}
