//! OpenSearch `_bulk` exports of the UBI indexes: which lines are action
//! lines, and which index a document belongs to. Read before the UBI
//! decoder (replayed file → **decode** → assemble → …): `rankpulse replay`
//! skips an action line and decodes the document after it in the format
//! of the index the line names.

use crate::event::Format;
use crate::event::toolkit::Text;
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use std::fmt;

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
/// by the rule [`super::decode`] tells them apart with: a top-level
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
}
