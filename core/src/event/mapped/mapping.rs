//! The `[mapped]` settings and what they compile to: the configured paths
//! (dotted or RFC 6901 pointers) merged by common prefix into the tries the
//! mapped decoder walks (Kafka message → **decode** → assemble → …).
//! Built once, at start; a setting it cannot take is named by its key, so
//! that the configuration's error points at it.

use crate::event::MAX_DIMENSION_LABELS;
use crate::event::toolkit;
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
pub(super) enum Target {
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
pub(super) const MESSAGE_SLOTS: usize = 7;
/// Dimension labels a mapping may read (the assembler's limit).
pub(super) const MAX_DIMENSIONS: usize = MAX_DIMENSION_LABELS;
/// Slots of a result: doc, position, score.
pub(super) const RESULT_SLOTS: usize = 3;
/// Members the paths of one trie may name (its nodes): each message keeps
/// one bit per node on the stack, to find a member given twice.
const MAX_NODES: usize = 512;
/// The bits of [`MAX_NODES`].
pub(super) type Seen = toolkit::Seen<{ MAX_NODES / 64 }>;

impl Target {
    pub(super) fn slot(self) -> usize {
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
pub(super) struct Node {
    segment: Option<Segment>,
    children: Vec<u32>,
    /// The targets read from this node's value, with the alternative's rank.
    pub(super) slots: Vec<(Target, u8)>,
    /// The `results` alternative this node is, if it is one.
    pub(super) results: Option<u8>,
}

/// The paths of one JSON object (a message, or a result), merged by
/// common prefix: node 0 is the object itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Trie {
    pub(super) nodes: Vec<Node>,
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

    pub(super) fn child_by_key(&self, at: usize, key: &str) -> Option<usize> {
        self.nodes[at]
            .children
            .iter()
            .map(|&c| c as usize)
            .find(|&c| self.nodes[c].segment.as_ref().is_some_and(|s| s.key == key))
    }

    pub(super) fn child_by_index(&self, at: usize, index: usize) -> Option<usize> {
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
    pub(super) message: Trie,
    pub(super) result: Trie,
    pub(super) position_base: u32,
    /// Dimension labels, in slot order.
    pub(super) labels: Vec<String>,
    /// Whether `id` is mapped (else the message is its own id).
    pub(super) has_id: bool,
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

#[cfg(test)]
mod tests {
    use super::super::tests::{paths, spec};
    use super::*;

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
}
