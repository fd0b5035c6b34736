//! The sections of assembly and the metric engine: how lists are closed
//! (`[session]`, `[late]`), how they are scored (`[metrics]`,
//! `[judgments]`), and which series and windows the accumulators keep
//! (`[dimensions]`, `[windows]`).

use super::values::span;
use super::{LatePolicy, Span};
use rankpulse_core::metrics::{Conventions, Gain, GaucWeight, Grade, IdealScope, NoRelevant};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionConfig {
    /// A list is final once no event of it arrived for this long (event time).
    pub gap: Span,
    /// Most lists open at once (per instance); past it the lists with the
    /// oldest last event are finalized early and counted, so a flood of new
    /// sessions cannot grow memory without bound.
    pub max_open_lists: usize,
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig { gap: span("30s"), max_open_lists: 2_000_000 }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LateConfig {
    pub policy: LatePolicy,
    /// How long after a list became final (event time: its last event plus
    /// the gap) it still takes late judgments; final lists are remembered
    /// this long.
    pub horizon: Span,
}

impl Default for LateConfig {
    fn default() -> Self {
        LateConfig { policy: LatePolicy::Amend, horizon: span("1m") }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MetricsConfig {
    /// The k of every @k metric; one series per cutoff.
    pub cutoffs: Vec<usize>,
    pub gain: Gain,
    pub ideal: IdealScope,
    pub no_relevant: NoRelevant,
    pub relevance_threshold: Grade,
    pub max_grade: Grade,
    pub gauc_weight: GaucWeight,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        let c = Conventions::default();
        MetricsConfig {
            cutoffs: vec![1, 3, 5, 10],
            gain: c.gain,
            ideal: c.ideal,
            no_relevant: c.no_relevant,
            relevance_threshold: c.relevance_threshold,
            max_grade: c.max_grade,
            gauc_weight: c.gauc_weight,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct JudgmentsConfig {
    /// Grade given to a judgment that carries an `action` instead of a
    /// `grade`. What a configuration sets is laid over the defaults, one
    /// action at a time, and `"ignore"` removes one: adding `item_click`
    /// must not silently stop `click` from counting (UBI counts an action
    /// it does not know as ignored, not rejected, so nothing would show it).
    #[serde(deserialize_with = "actions_over_defaults", serialize_with = "actions_with_removed")]
    pub actions: BTreeMap<String, Grade>,
}

impl Default for JudgmentsConfig {
    fn default() -> Self {
        JudgmentsConfig { actions: DEFAULT_ACTIONS.iter().map(|(a, g)| (a.to_string(), *g)).collect() }
    }
}

/// The default actions' grades.
pub(super) const DEFAULT_ACTIONS: [(&str, Grade); 3] = [("click", 1), ("add_to_cart", 2), ("purchase", 3)];

/// A value of `[judgments.actions]`: a grade, or `"ignore"`.
enum ActionValue {
    Grade(Grade),
    Ignore,
}

impl<'de> Deserialize<'de> for ActionValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = ActionValue;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a grade, or \"ignore\" to remove a default action")
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<ActionValue, E> {
                Grade::try_from(v)
                    .map(ActionValue::Grade)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<ActionValue, E> {
                Grade::try_from(v)
                    .map(ActionValue::Grade)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Unsigned(v), &self))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<ActionValue, E> {
                match v {
                    "ignore" => Ok(ActionValue::Ignore),
                    _ => Err(E::invalid_value(serde::de::Unexpected::Str(v), &self)),
                }
            }
        }
        d.deserialize_any(Visitor)
    }
}

fn actions_over_defaults<'de, D: serde::Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Grade>, D::Error> {
    let set: BTreeMap<String, ActionValue> = Deserialize::deserialize(d)?;
    let mut actions: BTreeMap<String, Grade> = DEFAULT_ACTIONS.iter().map(|(a, g)| (a.to_string(), *g)).collect();
    for (action, value) in set {
        match value {
            ActionValue::Grade(g) => {
                actions.insert(action, g);
            }
            ActionValue::Ignore => {
                actions.remove(&action);
            }
        }
    }
    Ok(actions)
}

/// The actions as set, with each default action that was removed written
/// as `"ignore"`, so that a printed configuration reads back the same.
fn actions_with_removed<S: serde::Serializer>(actions: &BTreeMap<String, Grade>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let removed = DEFAULT_ACTIONS.iter().filter(|(a, _)| !actions.contains_key(*a));
    let mut map = s.serialize_map(None)?;
    for (action, grade) in actions {
        map.serialize_entry(action, grade)?;
    }
    for (action, _) in removed {
        map.serialize_entry(action, "ignore")?;
    }
    map.end()
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DimensionsConfig {
    /// Keys of an impression's `dimensions` that become Prometheus labels.
    pub labels: Vec<String>,
    /// Most distinct values per label (per instance); later new values are
    /// replaced by `__other__` and counted, so series stay bounded.
    pub max_values: usize,
    /// Most distinct combinations of values (per instance): each label
    /// alone within `max_values` still multiplies out (100 rankers × 100
    /// markets). Later new combinations report `__other__` on every label.
    pub max_combinations: usize,
    /// Longest value a label takes, in bytes; a longer one is reported as
    /// `__other__` and counted: a value is repeated on every series of its
    /// combination (about 239), so one of a megabyte is a scrape of hundreds.
    pub max_value_bytes: usize,
}

impl Default for DimensionsConfig {
    fn default() -> Self {
        DimensionsConfig {
            labels: vec!["ranker".into(), "market".into()],
            max_values: 100,
            max_combinations: 500,
            max_value_bytes: 256,
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowsConfig {
    /// Rolling windows exposed as gauges (`window` label).
    pub spans: Vec<Span>,
    /// Time-bucket width: windows are exact up to one bucket at their old edge.
    pub bucket: Span,
}

impl Default for WindowsConfig {
    fn default() -> Self {
        WindowsConfig { spans: vec![span("1m"), span("5m"), span("1h")], bucket: span("10s") }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;
    use crate::config::testing::{env, from_toml};

    /// A configuration adds and changes actions one at a time; only
    /// `"ignore"` takes a default away; a printed configuration reads back
    /// the same.
    #[test]
    fn judgment_actions_are_laid_over_the_defaults() {
        let c = from_toml("[judgments.actions]\nitem_click = 1\npurchase = 4\nadd_to_cart = \"ignore\"\n").unwrap();
        let got: Vec<(&str, Grade)> = c.judgments.actions.iter().map(|(a, g)| (a.as_str(), *g)).collect();
        assert_eq!(got, [("click", 1), ("item_click", 1), ("purchase", 4)]);
        let printed = toml::to_string(&c).unwrap();
        assert!(printed.contains("add_to_cart = \"ignore\""), "{printed}");
        let again = from_toml(&printed).unwrap();
        assert_eq!(again.judgments.actions, c.judgments.actions);

        let c = Config::load_with_env(None, env(&[("RANKPULSE__JUDGMENTS__ACTIONS__ITEM_CLICK", "2")])).unwrap();
        assert_eq!(c.judgments.actions.len(), 4, "{:?}", c.judgments.actions);
        assert_eq!((c.judgments.actions["click"], c.judgments.actions["item_click"]), (1, 2));
        let c = Config::load_with_env(None, env(&[("RANKPULSE__JUDGMENTS__ACTIONS__CLICK", "ignore")])).unwrap();
        assert!(!c.judgments.actions.contains_key("click"), "{:?}", c.judgments.actions);

        let e = from_toml("[judgments.actions]\nclick = \"often\"\n").unwrap_err().to_string();
        assert!(e.contains("judgments.actions") && e.contains("\"ignore\""), "{e}");
        // A default outside a lower max_grade names itself as the default.
        let e = from_toml("[metrics]\nmax_grade = 2\n").unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.purchase: grade 3 is outside 0..=2"), "{e}");
        assert!(e.contains("a default action") && e.contains("\"ignore\""), "{e}");
        let c = from_toml("[metrics]\nmax_grade = 2\n[judgments.actions]\npurchase = \"ignore\"\n").unwrap();
        assert!(!c.judgments.actions.contains_key("purchase"));
        // UBI reads `impression` as a shown result: a grade for it is refused.
        let e = from_toml("[judgments.actions]\nimpression = 1\n").unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.impression: `impression` cannot be"), "{e}");
        let e = Config::load_with_env(None, env(&[("RANKPULSE__JUDGMENTS__ACTIONS__IMPRESSION", "0")])).unwrap_err();
        assert!(e.to_string().contains("judgments.actions.impression"), "{e}");
    }
}
