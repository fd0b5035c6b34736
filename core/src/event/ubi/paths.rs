//! Where UBI dimensions are read from (`[ubi.dimensions]`) and the rest of
//! `[ubi]`: the configuration's side of the UBI decoder (Kafka message →
//! **decode** → assemble → …), parsed once at start and read by both of
//! its readers on every message.

use crate::event::MAX_DIMENSION_LABELS;
use std::fmt;
use thiserror::Error;

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
    pub(super) fn below(&self, event: bool) -> Option<&[String]> {
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
    pub(super) fn mask(&self, event: bool) -> u32 {
        let dims = self.dimensions.iter().take(MAX_DIMENSION_LABELS).enumerate();
        dims.filter(|(_, (_, p))| p.below(event).is_some()).fold(0, |m, (i, _)| m | 1 << i)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
