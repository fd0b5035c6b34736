//! Configuration: the first thing `run` and `replay` read, validated once
//! before any event is touched.
//!
//! Sources, later ones winning: built-in defaults (the same values as
//! `config/default.toml`), the TOML file given with `--config`, then
//! environment variables `RANKPULSE__SECTION__KEY` (for example
//! `RANKPULSE__SESSION__GAP=45s` or `RANKPULSE__METRICS__CUTOFFS=[1,3,10]`;
//! a value is read as a TOML value when it parses as one, else as a string).
//! Unknown keys and bad values are refused with a message naming the key,
//! and for an environment override the variable that set it.
//!
//! Why the layering is written here and not taken from the `config` crate:
//! tried with `config` 0.15 (file + `Environment::with_prefix("RANKPULSE")`,
//! separator `__`, `try_parsing`, the same `deny_unknown_fields` structs),
//! an unknown key gives the same message whether the file or the
//! environment set it ("unknown field `gapp`, expected `gap` or
//! `max_open_lists` for key `session`"), naming neither the file nor the
//! variable; a bad value says "in the environment" but not which variable;
//! a list needs its key registered beforehand and a separator
//! (`a,b`), so `RANKPULSE__METRICS__CUTOFFS=[1,3,10]` is not TOML there.
//! What this module gives instead ("environment variable
//! RANKPULSE__SESSION__GAPP: config key session.gapp: unknown field …",
//! values typed by their key) is what the tests below hold it to. The
//! layering is about 120 lines (`load_with_env`, `apply_env` and its
//! helpers); the rest is the typed sections with their defaults and their
//! validation, one place for every key, which is why the file stays whole.

use rankpulse_core::metrics::list::Family;
use rankpulse_core::metrics::{Conventions, Gain, GaucWeight, Grade, IdealScope, NoRelevant};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;
use thiserror::Error;

/// Prefix of environment overrides; sections and keys are separated by `__`.
pub const ENV_PREFIX: &str = "RANKPULSE__";

use rankpulse_core::assemble::AssemblyLimits;
/// Most dimension labels (the assembler keeps a tuple of them on the stack).
pub use rankpulse_core::assemble::LatePolicy;
use rankpulse_core::event::DecodeLimits;
pub use rankpulse_core::event::MAX_DIMENSION_LABELS;
use rankpulse_core::pipeline::PipelineSettings;

#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {cause}")]
    Read { path: PathBuf, cause: std::io::Error },
    #[error("config file {path}: {message}")]
    Syntax { path: PathBuf, message: String },
    #[error("config key {key}: {message}")]
    Key { key: String, message: String },
    #[error("config key {key}: {message} (config file {path})")]
    FileKey { path: PathBuf, key: String, message: String },
    #[error("environment variable {var}: {message}")]
    Env { var: String, message: String },
    #[error("environment variable {var}: config key {key}: {message}")]
    EnvKey { var: String, key: String, message: String },
}

impl ConfigError {
    fn key(key: &str, message: impl Into<String>) -> Self {
        ConfigError::Key { key: key.to_string(), message: message.into() }
    }
}

/// The longest duration a setting takes: 1000 years of 365.25 days, far
/// beyond any window or horizon ("100y" turns a check off) and far from
/// overflowing an epoch millisecond.
const MAX_DURATION: Duration = Duration::from_secs(31_557_600_000);

/// A duration written as text ("30s", "5m", "1h30m"); the text is kept
/// because window spans are also label values.
#[derive(Clone, PartialEq, Eq)]
pub struct Span {
    pub text: String,
    pub duration: Duration,
}

impl Span {
    pub fn ms(&self) -> i64 {
        i64::try_from(self.duration.as_millis()).unwrap_or(i64::MAX)
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Span {
    type Err = String;
    fn from_str(s: &str) -> Result<Span, String> {
        let duration = humantime::parse_duration(s.trim())
            .map_err(|e| format!("{s:?} is not a duration like \"30s\", \"5m\" or \"1h\" ({e})"))?;
        // Time is kept in whole milliseconds: "500us" would be 0 (a gap of
        // nothing; a drift of 0 means "never hold", the opposite).
        if duration.subsec_nanos() % 1_000_000 != 0 {
            return Err(format!("{s:?} is not a whole number of milliseconds"));
        }
        // Event times are epoch milliseconds; a longer duration added to
        // one could overflow, and no window or horizon needs it.
        if duration > MAX_DURATION {
            return Err(format!("{s:?} is longer than 1000 years"));
        }
        Ok(Span { text: s.trim().to_string(), duration })
    }
}

impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Span, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Span {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A moment, written in RFC 3339 (`"2000-01-01T00:00:00Z"`): the text as
/// written, for `--print-config`, and its epoch milliseconds.
#[derive(Clone, PartialEq, Eq)]
pub struct Moment {
    pub text: String,
    pub ms: i64,
}

impl fmt::Debug for Moment {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Moment {
    type Err = String;
    fn from_str(s: &str) -> Result<Moment, String> {
        let text = s.trim();
        let ms = rankpulse_core::event::rfc3339_ms(text).ok_or_else(|| {
            format!("{s:?} is not an RFC 3339 time between 1970 and 9999 like \"2000-01-01T00:00:00Z\"")
        })?;
        Ok(Moment { text: text.to_string(), ms })
    }
}

impl<'de> Deserialize<'de> for Moment {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Moment, D::Error> {
        // Quoted, or a TOML date-time written bare (`2000-01-01T00:00:00Z`).
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Toml(toml::value::Datetime),
            // Epoch milliseconds, as events carry them: refused with what
            // to write instead, not serde's "no variant matched".
            Number(i64),
        }
        let text = match Written::deserialize(d)? {
            Written::Text(text) => text,
            Written::Toml(t) => t.to_string(),
            Written::Number(n) => {
                return Err(serde::de::Error::custom(format!(
                    "{n} is a number: write a date-time (RFC 3339), e.g. \"2000-01-01T00:00:00Z\""
                )));
            }
        };
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl Serialize for Moment {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// A table of text values in which a bare number or boolean stands for its
/// text (`10` for `"10"`); anything else is refused.
fn scalars_as_text<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Scalar {
        Text(String),
        Integer(i64),
        Float(f64),
        Bool(bool),
        Table(#[allow(dead_code)] BTreeMap<String, serde::de::IgnoredAny>),
        Other(serde::de::IgnoredAny),
    }
    let table = BTreeMap::<String, Scalar>::deserialize(d)?;
    table
        .into_iter()
        .map(|(k, v)| {
            let text = match v {
                Scalar::Text(s) => s,
                Scalar::Integer(i) => i.to_string(),
                Scalar::Float(f) => f.to_string(),
                Scalar::Bool(b) => b.to_string(),
                // Most often an unquoted dotted name, which TOML reads as
                // nested tables: `ssl.ca.location = "…"` is `ssl = { ca = … }`.
                Scalar::Table(_) => {
                    return Err(serde::de::Error::custom(format!(
                        "{k:?} is not text, a number or a boolean; quote a property name with dots \
                         (\"{k}.….…\" = \"…\", not {k}.….… = \"…\")"
                    )));
                }
                Scalar::Other(_) => {
                    return Err(serde::de::Error::custom(format!(
                        "{k:?} is not text, a number or a boolean (librdkafka takes a list as one \
                         comma-separated text)"
                    )));
                }
            };
            Ok((k, text))
        })
        .collect()
}

fn span(s: &str) -> Span {
    // Only called with the literals below, which parse.
    s.parse().unwrap_or(Span { text: s.to_string(), duration: Duration::from_secs(30) })
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub kafka: KafkaConfig,
    pub session: SessionConfig,
    pub metrics: MetricsConfig,
    pub judgments: JudgmentsConfig,
    pub dimensions: DimensionsConfig,
    pub windows: WindowsConfig,
    pub http: HttpConfig,
    pub input: InputConfig,
    pub late: LateConfig,
    pub state: StateConfig,
    pub log: LogConfig,
    pub ubi: UbiConfig,
    pub compare: CompareConfig,
    pub debias: DebiasConfig,
    /// The paths of the `mapped` format; required when a topic (or a
    /// replay) is mapped, absent by default.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mapped: Option<MappedConfig>,
}

/// The wire format of a consumed topic (`[kafka.formats]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TopicFormat {
    /// rankpulse's own events (docs/event.schema.json).
    Rankpulse,
    /// OpenSearch UBI 1.3 queries.
    UbiQueries,
    /// OpenSearch UBI 1.3 events.
    UbiEvents,
    /// UBI queries and events in one topic, told apart by `action_name`.
    Ubi,
    /// Any JSON schema, read through the paths of `[mapped]`.
    Mapped,
}

impl TopicFormat {
    /// The name a configuration gives it.
    pub fn name(self) -> &'static str {
        match self {
            TopicFormat::Rankpulse => "rankpulse",
            TopicFormat::UbiQueries => "ubi_queries",
            TopicFormat::UbiEvents => "ubi_events",
            TopicFormat::Ubi => "ubi",
            TopicFormat::Mapped => "mapped",
        }
    }

    pub fn core(self) -> rankpulse_core::event::Format {
        use rankpulse_core::event::Format;
        match self {
            TopicFormat::Rankpulse => Format::Rankpulse,
            TopicFormat::UbiQueries => Format::UbiQueries,
            TopicFormat::UbiEvents => Format::UbiEvents,
            TopicFormat::Ubi => Format::Ubi,
            TopicFormat::Mapped => Format::Mapped,
        }
    }
}

/// Every arm against the baseline arm (`[compare]`, docs/metrics.md).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct CompareConfig {
    /// The dimension label whose values are the arms. Unset: `ranker` when
    /// that is one of `dimensions.labels`, else no comparison; `""`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dimension: Option<String>,
    /// The arm every other arm is compared with.
    pub baseline: String,
    /// Values of the arm label that are not A/B arms: their lists are
    /// interleaved traffic (a mix of rankers), which a difference against
    /// the baseline would not describe. (Randomized lists enter no
    /// comparison whatever their arm.)
    pub exclude: Vec<String>,
    /// Significance level: the status page colours a difference only below
    /// it, and `rankpulse_compare_lists_needed` is for a test at this level.
    pub alpha: f64,
    /// Probability of detecting `effect` that `lists_needed` is sized for.
    pub power: f64,
    /// Smallest absolute difference of means worth detecting (metric units).
    pub effect: f64,
    /// Standard deviation of the normal mixture over differences of the
    /// anytime-valid test (metric units): it finds differences near this
    /// size soonest; smaller finds small ones sooner and large ones later.
    pub mixture_sd: f64,
    /// The metric and cutoff that decide (`"ndcg@10"`, `"mrr@5"`): the
    /// anytime-valid comparison, its alert and the status page's lead use
    /// it alone. Unset: nDCG at 10, or at the largest cutoff when 10 is not
    /// one; `""`: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary: Option<String>,
    /// A session with no list for this long (event time) is over: a later
    /// list of its id starts a new cluster (docs/metrics.md).
    pub session_timeout: Span,
    /// Most sessions held for their running sums (per instance); past it
    /// the oldest go early and are counted.
    pub max_sessions: usize,
    /// Interleaving: the scale of preference the anytime-valid test of the
    /// win rate is tuned for, in units of P(candidate wins) − P(it loses).
    pub interleaving_effect: f64,
}

impl Default for CompareConfig {
    fn default() -> Self {
        CompareConfig {
            dimension: None,
            baseline: "control".into(),
            exclude: Vec::new(),
            alpha: 0.05,
            power: 0.8,
            effect: 0.01,
            mixture_sd: 0.02,
            primary: None,
            session_timeout: span("30m"),
            max_sessions: 1_000_000,
            interleaving_effect: 0.1,
        }
    }
}

impl CompareConfig {
    /// Whether `arm` is compared with the baseline. Lists that sent no arm
    /// label (`unknown`) and arms past `dimensions.max_values` merged into
    /// `__other__` are no arm of the experiment: a difference or p-value
    /// of such a mix would be read as one arm's.
    pub fn compares(&self, arm: &str) -> bool {
        arm != self.baseline
            && arm != rankpulse_core::assemble::MISSING_DIMENSION
            && arm != rankpulse_core::assemble::OTHER_DIMENSION
            && !self.exclude.iter().any(|x| x == arm)
    }

    /// The index in `dimensions.labels` of the arm label, when comparing.
    pub fn arm_index(&self, labels: &[String]) -> Option<usize> {
        let name = self.dimension.as_deref().unwrap_or("ranker");
        labels.iter().position(|l| l == name)
    }
}

/// Position-debiased click metrics (`[debias]`, docs/metrics.md).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct DebiasConfig {
    /// Ranks tracked (at most 64); 0: off. Each time bucket of each series
    /// then holds (K + K(K+1)/2 + 2K) counters: about 700 bytes at K = 10.
    pub max_rank: usize,
    /// Examination propensities of ranks 1…K under the position-based
    /// model, read relative to rank 1 (divided by the first value, as
    /// estimates are); empty: estimated from randomized lists (θ₁ = 1).
    pub propensities: Vec<f64>,
    /// Weights are at most 1 / this (clipping trades bias for variance);
    /// 0: no clipping.
    pub min_propensity: f64,
}

/// How OpenSearch UBI input maps to rankpulse's events (docs/formats.md).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct UbiConfig {
    /// `event_attributes.position.ordinal` of the first result: 0
    /// (OpenSearch's generator and click models) or 1 (the spec's examples).
    pub ordinal_base: u32,
    /// Dimension label → UBI path (`application`, `query_attributes.<name>`,
    /// `event_attributes.<name>`, nested members one per dot at any depth:
    /// `query_attributes.experiment.arm`). A label of `dimensions.labels`
    /// not listed is read from `query_attributes.<label>`.
    pub dimensions: BTreeMap<String, String>,
}

/// One `[mapped]` path or a list of alternatives (the first present one
/// wins): `time = "ts"` or `time = ["ts", "clicked_at"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Paths(pub Vec<String>);

impl Paths {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for Paths {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Paths, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Paths;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a path (\"a.b\" or \"/a/b\") or a list of paths")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Paths, E> {
                Ok(Paths(vec![v.to_string()]))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Paths, A::Error> {
                let mut out = Vec::new();
                while let Some(p) = seq.next_element::<String>()? {
                    out.push(p);
                }
                Ok(Paths(out))
            }
        }
        d.deserialize_any(V)
    }
}

impl Serialize for Paths {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.0.as_slice() {
            [one] => s.serialize_str(one),
            many => many.serialize(s),
        }
    }
}

/// How a `mapped` topic's JSON maps to rankpulse's events
/// (docs/formats.md): each key a path (dotted, or a JSON pointer starting
/// with `/`) or a list of alternatives. Parsed and checked at load
/// ([`rankpulse_core::event::mapped::Mapping`]).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct MappedConfig {
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub session: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub query: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub time: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub id: Paths,
    /// Where this holds an array the message is an impression; otherwise a judgment.
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub results: Paths,
    /// Inside a result; `""` is the result itself.
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub result_doc: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub result_position: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub result_score: Paths,
    /// `result_position` of the first result: 1 or 0.
    pub position_base: u32,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub judged_doc: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub grade: Paths,
    #[serde(skip_serializing_if = "Paths::is_empty")]
    pub action: Paths,
    /// Label of `dimensions.labels` → its paths; labels not listed are `unknown`.
    pub dimensions: BTreeMap<String, Paths>,
}

impl Default for MappedConfig {
    fn default() -> Self {
        MappedConfig {
            session: Paths::default(),
            query: Paths::default(),
            time: Paths::default(),
            id: Paths::default(),
            results: Paths::default(),
            result_doc: Paths::default(),
            result_position: Paths::default(),
            result_score: Paths::default(),
            position_base: 1,
            judged_doc: Paths::default(),
            grade: Paths::default(),
            action: Paths::default(),
            dimensions: BTreeMap::new(),
        }
    }
}

impl MappedConfig {
    /// The core's form of these settings.
    pub fn spec(&self) -> rankpulse_core::event::mapped::MappingSpec {
        rankpulse_core::event::mapped::MappingSpec {
            session: self.session.0.clone(),
            query: self.query.0.clone(),
            time: self.time.0.clone(),
            id: self.id.0.clone(),
            results: self.results.0.clone(),
            result_doc: self.result_doc.0.clone(),
            result_position: self.result_position.0.clone(),
            result_score: self.result_score.0.clone(),
            position_base: self.position_base,
            judged_doc: self.judged_doc.0.clone(),
            grade: self.grade.0.clone(),
            action: self.action.0.clone(),
            dimensions: self.dimensions.iter().map(|(l, p)| (l.clone(), p.0.clone())).collect(),
        }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma separated.
    pub brokers: String,
    /// Consumer group: instances sharing it share the partitions.
    pub group_id: String,
    /// Impression and judgment topics, co-partitioned by session id.
    pub topics: Vec<String>,
    /// Topic → its format; topics not listed are rankpulse's own format.
    pub formats: BTreeMap<String, TopicFormat>,
    /// Passed to librdkafka unchanged (TLS, SASL, tuning). librdkafka
    /// takes every value as text; a number or boolean written bare
    /// (`"fetch.wait.max.ms" = 10`) is taken as its text.
    #[serde(deserialize_with = "scalars_as_text")]
    pub properties: BTreeMap<String, String>,
    /// Invalid messages are copied here with the reason in a header, so they
    /// can be inspected and replayed; empty: not forwarded (still counted).
    pub dead_letter_topic: String,
    /// How far (event time) one topic of a partition may run ahead of the
    /// partition's slowest topic before it is held back (its queue not read)
    /// until the others catch up ("0s": never). Catching up on a backlog, judgments otherwise run
    /// far ahead of their impressions and wait in open lists (see `align`).
    pub max_topic_drift: Span,
}

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

/// The default actions' grades.
const DEFAULT_ACTIONS: [(&str, Grade); 3] = [("click", 1), ("add_to_cart", 2), ("purchase", 3)];

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

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct WindowsConfig {
    /// Rolling windows exposed as gauges (`window` label).
    pub spans: Vec<Span>,
    /// Time-bucket width: windows are exact up to one bucket at their old edge.
    pub bucket: Span,
}

/// How the daemon logs (to stderr).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// A `tracing` filter: a level (`error`, `warn`, `info`, `debug`,
    /// `trace`) or per-module directives (`info,rankpulse::daemon=debug`).
    /// `RUST_LOG`, when set, takes precedence.
    pub level: String,
    /// `text`, one human-readable line per event, or `json`, one JSON
    /// object per line for a log pipeline.
    pub format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogFormat {
    Text,
    Json,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig { level: "info".into(), format: LogFormat::Text }
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Address of `/metrics`, `/healthz`, `/readyz` and the status page.
    pub listen: String,
    /// A web configuration file in the format of Prometheus's
    /// exporter-toolkit (`--web.config.file`): TLS, client certificates,
    /// basic-auth users, response headers. Unset: plain HTTP, no password.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub web_config: Option<std::path::PathBuf>,
    /// With `web_config`: `/healthz` and `/readyz` answer without a
    /// password (TLS still applies), so that probes need no credentials.
    pub open_probes: bool,
    /// bcrypt verifications run at once, off the runtime's workers: a
    /// flood of wrong passwords costs at most this many threads of CPU.
    pub max_password_checks: usize,
    /// A second address serving only `/healthz` and `/readyz` over plain
    /// HTTP, for probes that cannot meet `web_config` (a kubelet presents
    /// no client certificate). Unset: none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probe_listen: Option<String>,
}

/// The least `input.max_results_per_list`: a list is only counted once
/// it outgrows its compact form (256 words), which holds fewer results.
pub const MIN_RESULTS_PER_LIST: usize = 256;

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct InputConfig {
    /// Larger messages are rejected (`too_large`) without being parsed.
    pub max_message_bytes: usize,
    /// Impressions with more results are rejected (`too_many_results`).
    pub max_results: usize,
    /// Events stamped more than this ahead of their reference time (the
    /// Kafka message timestamp, or the wall clock if that is earlier or
    /// absent) are rejected (`future_timestamp`): one producer with a
    /// broken clock must not move a watermark or create a time bucket.
    pub max_future_skew: Span,
    /// Events stamped earlier are rejected (`past_timestamp`): an epoch in
    /// seconds, read as milliseconds, falls in January 1970 and would
    /// otherwise stretch every session gap and window a thousandfold.
    pub min_timestamp: Moment,
    /// Events one list takes; further events of it are rejected
    /// (`list_too_large`), so one hot key cannot hold unbounded memory.
    pub max_events_per_list: usize,
    /// Results one list holds: an impression finding its list holding
    /// this many is rejected (`list_too_large`). Without it one list could
    /// hold `max_events_per_list × max_results` results (2,000,000, about
    /// 270 MB); at 10,000 a list holds at most 10,199, about 1.4 MB.
    pub max_results_per_list: usize,
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

/// Where checkpoints are kept (`state.backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StateBackend {
    /// One file per instance in `state.dir`; off while `state.dir` is empty.
    Dir,
    /// Records in the compacted topic `state.topic` (`state::kafka`): no
    /// shared volume needed.
    Kafka,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct StateConfig {
    /// Where checkpoints go: "dir" (`dir`, off while it is empty) or
    /// "kafka" (`topic`).
    pub backend: StateBackend,
    /// Checkpoint directory (backend "dir"); empty: no checkpoints
    /// (at-least-once only: a restart or rebalance may count a list twice).
    /// Instances of one group share it so that partitions hand their open
    /// lists over.
    pub dir: String,
    /// The compacted topic of backend "kafka", created at start if missing
    /// (one partition); one per consumer group. Ignored by backend "dir".
    pub topic: String,
    /// Replication factor when rankpulse creates `topic`; -1: the broker's
    /// default. Ignored by backend "dir" and for an existing topic.
    pub replication: i32,
    /// This instance's name in `dir` (its checkpoint file and lock) or in
    /// `topic` (its records' keys); unique among the group's instances.
    /// Empty: the host name.
    pub instance: String,
    /// Checkpoint period. With checkpoints on, `/metrics` shows the state as
    /// of the last checkpoint, so counters never go back after a restart.
    pub interval: Span,
}

impl StateConfig {
    /// Whether the daemon checkpoints at all: backend "kafka", or backend
    /// "dir" with a directory.
    pub fn enabled(&self) -> bool {
        match self.backend {
            StateBackend::Dir => !self.dir.is_empty(),
            StateBackend::Kafka => true,
        }
    }
}

impl Default for LateConfig {
    fn default() -> Self {
        LateConfig { policy: LatePolicy::Amend, horizon: span("1m") }
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            backend: StateBackend::Dir,
            dir: String::new(),
            topic: "rankpulse-state".into(),
            replication: -1,
            instance: String::new(),
            interval: span("1s"),
        }
    }
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            group_id: "rankpulse".into(),
            topics: vec!["search-impressions".into(), "search-judgments".into()],
            formats: BTreeMap::new(),
            properties: BTreeMap::new(),
            dead_letter_topic: String::new(),
            max_topic_drift: span("30s"),
        }
    }
}

impl Default for SessionConfig {
    fn default() -> Self {
        SessionConfig { gap: span("30s"), max_open_lists: 2_000_000 }
    }
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

impl Default for JudgmentsConfig {
    fn default() -> Self {
        JudgmentsConfig { actions: DEFAULT_ACTIONS.iter().map(|(a, g)| (a.to_string(), *g)).collect() }
    }
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

impl Default for WindowsConfig {
    fn default() -> Self {
        WindowsConfig { spans: vec![span("1m"), span("5m"), span("1h")], bucket: span("10s") }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:9464".into(),
            web_config: None,
            open_probes: true,
            max_password_checks: 1,
            probe_listen: None,
        }
    }
}

impl Default for InputConfig {
    fn default() -> Self {
        InputConfig {
            max_message_bytes: 1 << 20,
            max_results: 200,
            max_future_skew: span("5m"),
            min_timestamp: Moment {
                text: "2000-01-01T00:00:00Z".into(),
                ms: rankpulse_core::pipeline::MIN_TIMESTAMP_MS,
            },
            max_events_per_list: 10_000,
            max_results_per_list: 10_000,
        }
    }
}

#[allow(clippy::derivable_impls)]
impl Default for Config {
    fn default() -> Self {
        Config {
            kafka: KafkaConfig::default(),
            session: SessionConfig::default(),
            metrics: MetricsConfig::default(),
            judgments: JudgmentsConfig::default(),
            dimensions: DimensionsConfig::default(),
            windows: WindowsConfig::default(),
            http: HttpConfig::default(),
            input: InputConfig::default(),
            late: LateConfig::default(),
            state: StateConfig::default(),
            log: LogConfig::default(),
            ubi: UbiConfig::default(),
            compare: CompareConfig::default(),
            debias: DebiasConfig::default(),
            mapped: None,
        }
    }
}

impl Config {
    /// Loads defaults, then `path` (if any), then the process environment.
    pub fn load(path: Option<&Path>) -> Result<Config, ConfigError> {
        Self::load_with_env(path, process_env()?)
    }

    /// As [`Config::load`], with the environment given explicitly (tests).
    pub fn load_with_env(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let mut table = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|cause| ConfigError::Read { path: path.to_path_buf(), cause })?;
                text.parse::<toml::Table>()
                    .map_err(|e| ConfigError::Syntax { path: path.to_path_buf(), message: syntax_error(&text, &e) })?
            }
            None => toml::Table::new(),
        };
        // Which keys the file set, for errors that name it.
        let from_file = path.map(|path| (path, table.clone()));
        // The built-in defaults tell which keys hold text (see `apply_env`).
        let defaults = toml::Table::try_from(Config::default()).unwrap_or_default();
        // The file is to blame for a key it set, and for a key without a
        // default left out of a section it set (`mapped.time`, required).
        let blame = |key: String, message: String| match &from_file {
            Some((path, file))
                if sets(file, &key)
                    || (!sets(&defaults, &key)
                        && key.rsplit_once('.').is_some_and(|(parent, _)| sets(file, parent))) =>
            {
                ConfigError::FileKey { path: path.to_path_buf(), key, message }
            }
            _ => ConfigError::Key { key, message },
        };
        let mut overrides: Vec<(String, String)> =
            env.into_iter().filter(|(var, _)| var.starts_with(ENV_PREFIX)).collect();
        // A whole table (`RANKPULSE__KAFKA__PROPERTIES='{…}'`) first, then
        // the keys below it, whatever the environment's order: a key set
        // alone is not lost to the table.
        overrides.sort_by_key(|(var, _)| env_path(&var[ENV_PREFIX.len()..]).len());
        for (var, value) in &overrides {
            apply_env(&mut table, &defaults, var, &var[ENV_PREFIX.len()..], value)?;
        }
        let config: Config = deserialize(table).map_err(|(key, message)| {
            // Merged, a key has lost where it came from: an override that
            // is wrong on its own says it is one, and which.
            overrides
                .iter()
                .find_map(|(var, value)| env_key_error(&defaults, var, value))
                .unwrap_or_else(|| blame(key, message))
        })?;
        config.validate().map_err(|e| match e {
            // A bad value an override set is the override's.
            ConfigError::Key { key, message } => match overrides.iter().find(|(var, _)| sets_key(var, &key)) {
                Some((var, _)) => ConfigError::EnvKey { var: var.clone(), key, message },
                None => {
                    // A key nobody set, refused because of another one that
                    // was (a default action above a lowered
                    // metrics.max_grade): the message names that key; say
                    // where it was set.
                    let cause = message
                        .split(|c: char| !(c.is_ascii_lowercase() || c == '_' || c == '.'))
                        .filter(|word| word.contains('.') && !word.starts_with('.') && !word.ends_with('.'))
                        .find_map(|word| {
                            if let Some((var, _)) = overrides.iter().find(|(var, _)| sets_key(var, word)) {
                                Some(format!("{word} is set by environment variable {var}"))
                            } else {
                                let (path, file) = from_file.as_ref()?;
                                sets(file, word).then(|| format!("{word} is set in config file {}", path.display()))
                            }
                        });
                    let file_sets_key = from_file.as_ref().is_some_and(|(_, file)| sets(file, &key));
                    match cause {
                        Some(cause) if !file_sets_key => {
                            ConfigError::Key { key, message: format!("{message}; {cause}") }
                        }
                        _ => blame(key, message),
                    }
                }
            },
            other => other,
        })?;
        Ok(config)
    }

    /// Checks that `[mapped]` is there for a replay of `--format mapped`
    /// (a topic's format is checked by [`Config::validate`]).
    pub fn require_mapped(&self, format: rankpulse_core::event::Format) -> Result<(), ConfigError> {
        if format == rankpulse_core::event::Format::Mapped && self.mapped.is_none() {
            return Err(ConfigError::key(
                "mapped",
                "missing: --format mapped reads each field from the paths of [mapped] in the --config file (docs/formats.md)",
            ));
        }
        Ok(())
    }

    /// What `rankpulse run` warns of at start: settings that are valid
    /// but read by nothing it consumes, which usually means a format was
    /// meant and not set (every topic then rejects its events as
    /// `invalid_json` or `missing_field`, which says nothing of why).
    pub fn unused_sections(&self) -> Vec<String> {
        let mut unused = Vec::new();
        if self.mapped.is_some() && !self.kafka.formats.values().any(|f| *f == TopicFormat::Mapped) {
            unused.push(format!(
                "[mapped] is set but no topic is read with it: kafka.topics {:?} are read as {}; \
                 to read a topic through [mapped], set kafka.formats.<topic> = \"mapped\" (docs/formats.md)",
                self.kafka.topics,
                match self.kafka.formats.is_empty() {
                    true => "rankpulse events".to_string(),
                    false => {
                        let set: Vec<String> =
                            self.kafka.formats.iter().map(|(t, f)| format!("{t} = {:?}", f.name())).collect();
                        format!("kafka.formats says ({}), the others as rankpulse events", set.join(", "))
                    }
                }
            ));
        }
        unused
    }

    /// The metric conventions these settings select.
    pub fn conventions(&self) -> Conventions {
        let m = &self.metrics;
        Conventions {
            gain: m.gain,
            ideal: m.ideal,
            no_relevant: m.no_relevant,
            relevance_threshold: m.relevance_threshold,
            max_grade: m.max_grade,
            gauc_weight: m.gauc_weight,
        }
    }

    /// `[state]`. With backend "kafka", `state.dir` must be empty (it
    /// would be silently unused); with backend "dir", `state.topic` and
    /// `state.replication` are ignored: they have defaults, so "set" cannot
    /// be told from "left alone", and switching backends stays one key.
    fn validate_state(&self) -> Result<(), ConfigError> {
        let s = &self.state;
        if s.enabled() && s.interval.duration < Duration::from_millis(100) {
            return Err(ConfigError::key("state.interval", "must be at least 100ms"));
        }
        if s.backend != StateBackend::Kafka {
            return Ok(());
        }
        if !s.dir.is_empty() {
            return Err(ConfigError::key(
                "state.dir",
                format!("{:?} is for state.backend = \"dir\"; with \"kafka\" checkpoints go to state.topic", s.dir),
            ));
        }
        if !is_topic_name(&s.topic) {
            return Err(ConfigError::key(
                "state.topic",
                format!("{:?} is not a Kafka topic name ({TOPIC_NAME})", s.topic),
            ));
        }
        if self.kafka.topics.contains(&s.topic) || self.kafka.dead_letter_topic == s.topic {
            return Err(ConfigError::key(
                "state.topic",
                format!("{:?} is also an input or dead-letter topic (kafka.topics, kafka.dead_letter_topic)", s.topic),
            ));
        }
        if s.replication != -1 && !(1..=i32::from(i16::MAX)).contains(&s.replication) {
            return Err(ConfigError::key(
                "state.replication",
                format!("must be -1 (the broker's default) or between 1 and 32767, got {}", s.replication),
            ));
        }
        Ok(())
    }

    /// Checks everything types alone cannot; each message names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.brokers.trim().is_empty() {
            return Err(ConfigError::key("kafka.brokers", "must name at least one broker"));
        }
        if k.group_id.trim().is_empty() {
            return Err(ConfigError::key("kafka.group_id", "must not be empty"));
        }
        if k.topics.is_empty() || k.topics.iter().any(|t| t.trim().is_empty()) {
            return Err(ConfigError::key("kafka.topics", "must list one or more non-empty topic names"));
        }
        // librdkafka subscribes to a name starting with '^' as a pattern,
        // which the checks below (the dead-letter and state topics are not
        // input topics) cannot see through: a pattern matching the
        // dead-letter topic would read back every copy, reject it and copy
        // it again, for ever. Lists are also joined across topics by
        // partition number, so the set of topics must be known.
        if let Some(t) = k.topics.iter().find(|t| !is_topic_name(t)) {
            return Err(ConfigError::key(
                "kafka.topics",
                format!("{t:?} is not a Kafka topic name ({TOPIC_NAME}; patterns are not supported)"),
            ));
        }
        if !k.dead_letter_topic.is_empty() && !is_topic_name(&k.dead_letter_topic) {
            return Err(ConfigError::key(
                "kafka.dead_letter_topic",
                format!("{:?} is not a Kafka topic name ({TOPIC_NAME})", k.dead_letter_topic),
            ));
        }
        for (key, why) in MANAGED_PROPERTIES {
            if k.properties.contains_key(*key) {
                return Err(ConfigError::key(
                    &format!("kafka.properties.{key}"),
                    format!("is managed by rankpulse ({why})"),
                ));
            }
        }
        for (key, value) in &k.properties {
            check_property(key, value)
                .map_err(|message| ConfigError::key(&format!("kafka.properties.{key}"), message))?;
        }
        if self.session.gap.duration.is_zero() {
            return Err(ConfigError::key("session.gap", "must be longer than 0s"));
        }
        if self.session.max_open_lists == 0 {
            return Err(ConfigError::key("session.max_open_lists", "must be at least 1"));
        }
        if self.dimensions.max_values == 0 {
            return Err(ConfigError::key("dimensions.max_values", "must be at least 1"));
        }
        if k.topics.contains(&k.dead_letter_topic) {
            return Err(ConfigError::key(
                "kafka.dead_letter_topic",
                format!("{:?} is also an input topic in kafka.topics", k.dead_letter_topic),
            ));
        }
        if let Err(message) = crate::logging::valid_filter(&self.log.level) {
            return Err(ConfigError::key("log.level", format!("{:?} is not a log filter: {message}", self.log.level)));
        }
        self.validate_state()?;
        if self.state.instance.contains(['/', '\\']) || self.state.instance.starts_with('.') {
            return Err(ConfigError::key(
                "state.instance",
                "must be a plain file name (no '/', not starting with '.')",
            ));
        }
        let m = &self.metrics;
        if m.cutoffs.is_empty() {
            return Err(ConfigError::key("metrics.cutoffs", "must list at least one cutoff"));
        }
        let mut sorted = m.cutoffs.clone();
        sorted.sort_unstable();
        if sorted[0] == 0 || sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(ConfigError::key("metrics.cutoffs", "cutoffs must be positive and distinct"));
        }
        if !(1..=30).contains(&m.max_grade) {
            return Err(ConfigError::key(
                "metrics.max_grade",
                format!("must be between 1 and 30, got {}", m.max_grade),
            ));
        }
        if !(1..=m.max_grade).contains(&m.relevance_threshold) {
            return Err(ConfigError::key(
                "metrics.relevance_threshold",
                format!("must be between 1 and metrics.max_grade ({}), got {}", m.max_grade, m.relevance_threshold),
            ));
        }
        // A UBI `impression` event is a shown result, whatever this table
        // says: a grade for it would be silently unused there.
        if self.judgments.actions.contains_key("impression") {
            return Err(ConfigError::key(
                "judgments.actions.impression",
                "`impression` cannot be a judgment action: a UBI event with it is a shown result (its position.ordinal places it in the list)",
            ));
        }
        for (action, &grade) in &self.judgments.actions {
            if !(0..=m.max_grade).contains(&grade) {
                // A default the configuration never wrote: say where it
                // comes from and how to be rid of it.
                let default = DEFAULT_ACTIONS.contains(&(action.as_str(), grade));
                let hint = if default {
                    " (a default action: set it to a grade within range, or to \"ignore\")".to_string()
                } else {
                    String::new()
                };
                return Err(ConfigError::key(
                    &format!("judgments.actions.{action}"),
                    format!("grade {grade} is outside 0..={} (metrics.max_grade){hint}", m.max_grade),
                ));
            }
        }
        if self.dimensions.labels.len() > MAX_DIMENSION_LABELS {
            return Err(ConfigError::key(
                "dimensions.labels",
                format!("at most {MAX_DIMENSION_LABELS} labels (each multiplies the series count)"),
            ));
        }
        let mut seen = std::collections::BTreeSet::new();
        // Every label of rankpulse's own series (crate::series): one of the
        // same name would duplicate it, and Prometheus refuses the whole
        // scrape.
        let reserved = crate::series::reserved_labels();
        for label in &self.dimensions.labels {
            let valid = label.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !label.starts_with("__");
            if !valid {
                return Err(ConfigError::key(
                    "dimensions.labels",
                    format!("{label:?} is not a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"),
                ));
            }
            if reserved.contains(label.as_str()) {
                let names: Vec<&str> = reserved.iter().copied().collect();
                return Err(ConfigError::key(
                    "dimensions.labels",
                    format!("{label:?} is reserved for rankpulse's own labels ({})", names.join(", ")),
                ));
            }
            if !seen.insert(label) {
                return Err(ConfigError::key("dimensions.labels", format!("{label:?} is listed twice")));
            }
        }
        let w = &self.windows;
        if w.bucket.duration < Duration::from_secs(1) {
            return Err(ConfigError::key("windows.bucket", "must be at least 1s"));
        }
        if w.spans.is_empty() {
            return Err(ConfigError::key("windows.spans", "must list at least one window"));
        }
        for s in &w.spans {
            if s.duration < w.bucket.duration {
                return Err(ConfigError::key(
                    "windows.spans",
                    format!("window {} is shorter than windows.bucket ({})", s.text, w.bucket.text),
                ));
            }
        }
        let mut texts: Vec<&str> = w.spans.iter().map(|s| s.text.as_str()).collect();
        texts.sort_unstable();
        if texts.windows(2).any(|p| p[0] == p[1]) {
            return Err(ConfigError::key("windows.spans", "windows must be distinct"));
        }
        if self.http.listen.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::key(
                "http.listen",
                format!("{:?} is not an address like \"127.0.0.1:9464\"", self.http.listen),
            ));
        }
        if let Some(probe) = &self.http.probe_listen
            && probe.parse::<SocketAddr>().is_err()
        {
            return Err(ConfigError::key(
                "http.probe_listen",
                format!("{probe:?} is not an address like \"0.0.0.0:9465\""),
            ));
        }
        if !(1..=64).contains(&self.http.max_password_checks) {
            return Err(ConfigError::key("http.max_password_checks", "must be from 1 to 64"));
        }
        if self.input.max_results == 0 {
            return Err(ConfigError::key("input.max_results", "must be at least 1"));
        }
        if self.input.max_results_per_list < self.input.max_results.max(MIN_RESULTS_PER_LIST) {
            return Err(ConfigError::key(
                "input.max_results_per_list",
                format!(
                    "must be at least input.max_results ({}) and {MIN_RESULTS_PER_LIST} (a list's compact form holds \
                     fewer, unchecked)",
                    self.input.max_results
                ),
            ));
        }
        if self.input.max_events_per_list == 0 {
            return Err(ConfigError::key("input.max_events_per_list", "must be at least 1"));
        }
        if self.dimensions.max_combinations == 0 {
            return Err(ConfigError::key("dimensions.max_combinations", "must be at least 1"));
        }
        if self.dimensions.max_value_bytes == 0 {
            return Err(ConfigError::key("dimensions.max_value_bytes", "must be at least 1"));
        }
        if self.input.max_message_bytes < 64 {
            return Err(ConfigError::key("input.max_message_bytes", "must be at least 64"));
        }
        for topic in self.kafka.formats.keys() {
            if !self.kafka.topics.contains(topic) {
                return Err(ConfigError::key(
                    &format!("kafka.formats.{topic}"),
                    format!("{topic:?} is not one of kafka.topics {:?}", self.kafka.topics),
                ));
            }
        }
        if self.ubi.ordinal_base > 1 {
            return Err(ConfigError::key(
                "ubi.ordinal_base",
                format!("{} is neither 0 nor 1 (the position.ordinal of the first result)", self.ubi.ordinal_base),
            ));
        }
        for (label, path) in &self.ubi.dimensions {
            let key = format!("ubi.dimensions.{label}");
            if !self.dimensions.labels.contains(label) {
                return Err(ConfigError::key(
                    &key,
                    format!("{label:?} is not one of dimensions.labels {:?}", self.dimensions.labels),
                ));
            }
            rankpulse_core::event::ubi::UbiPath::parse(path).map_err(|e| ConfigError::key(&key, e.to_string()))?;
        }
        let c = &self.compare;
        if let Some(d) = c.dimension.as_deref().filter(|d| !d.is_empty())
            && !self.dimensions.labels.iter().any(|l| l == d)
        {
            return Err(ConfigError::key(
                "compare.dimension",
                format!(
                    "{d:?} is not one of dimensions.labels {:?} (\"\" turns comparison off)",
                    self.dimensions.labels
                ),
            ));
        }
        if c.baseline.is_empty() {
            return Err(ConfigError::key("compare.baseline", "must name the baseline arm"));
        }
        for (key, value) in [("compare.alpha", c.alpha), ("compare.power", c.power)] {
            if !(value > 0.0 && value < 1.0) {
                return Err(ConfigError::key(key, format!("must be between 0 and 1 (exclusive), got {value}")));
            }
        }
        if !(c.effect > 0.0 && c.effect.is_finite()) {
            return Err(ConfigError::key("compare.effect", format!("must be above 0, got {}", c.effect)));
        }
        if !(c.mixture_sd > 0.0 && c.mixture_sd.is_finite()) {
            return Err(ConfigError::key("compare.mixture_sd", format!("must be above 0, got {}", c.mixture_sd)));
        }
        if !(c.interleaving_effect > 0.0 && c.interleaving_effect <= 1.0) {
            return Err(ConfigError::key(
                "compare.interleaving_effect",
                format!("must be above 0 and at most 1, got {}", c.interleaving_effect),
            ));
        }
        if let Some(primary) = c.primary.as_deref().filter(|p| !p.is_empty())
            && self.primary_metric().is_none()
        {
            return Err(ConfigError::key(
                "compare.primary",
                format!(
                    "{primary:?} is not a metric at one of metrics.cutoffs {:?}: write family@k with family one of {}",
                    self.metrics.cutoffs,
                    Family::ALL.iter().map(|f| f.name()).collect::<Vec<_>>().join(", ")
                ),
            ));
        }
        if c.session_timeout.ms() < 2 {
            return Err(ConfigError::key("compare.session_timeout", "must be at least 2ms"));
        }
        if c.max_sessions == 0 {
            return Err(ConfigError::key("compare.max_sessions", "must be at least 1"));
        }
        let d = &self.debias;
        if d.max_rank > rankpulse_core::debias::MAX_RANK {
            return Err(ConfigError::key(
                "debias.max_rank",
                format!("at most {}, got {}", rankpulse_core::debias::MAX_RANK, d.max_rank),
            ));
        }
        if !d.propensities.is_empty() && d.propensities.len() != d.max_rank {
            return Err(ConfigError::key(
                "debias.propensities",
                format!("lists {} values for debias.max_rank = {} ranks", d.propensities.len(), d.max_rank),
            ));
        }
        if let Some(p) = d.propensities.iter().find(|p| !(**p > 0.0 && **p <= 1.0)) {
            return Err(ConfigError::key("debias.propensities", format!("{p} is not in (0, 1]")));
        }
        if !(0.0..1.0).contains(&d.min_propensity) {
            return Err(ConfigError::key(
                "debias.min_propensity",
                format!("must be in [0, 1), got {}", d.min_propensity),
            ));
        }
        match &self.mapped {
            Some(m) => {
                for label in m.dimensions.keys() {
                    if !self.dimensions.labels.contains(label) {
                        return Err(ConfigError::key(
                            &format!("mapped.dimensions.{label}"),
                            format!("{label:?} is not one of dimensions.labels {:?}", self.dimensions.labels),
                        ));
                    }
                }
                rankpulse_core::event::mapped::Mapping::new(&m.spec())
                    .map_err(|e| ConfigError::key(&format!("mapped.{}", e.key()), e.to_string()))?;
            }
            None => {
                if let Some((topic, _)) = self.kafka.formats.iter().find(|(_, f)| **f == TopicFormat::Mapped) {
                    return Err(ConfigError::key(
                        "mapped",
                        format!(
                            "missing: kafka.formats.{topic} is mapped, which reads each field from the paths of [mapped] (docs/formats.md)"
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The cutoffs in ascending order (the engine's one-pass functions need that).
    /// What decoding needs.
    pub fn decode_limits(&self) -> DecodeLimits {
        DecodeLimits {
            max_message_bytes: self.input.max_message_bytes,
            max_results: self.input.max_results,
            max_grade: self.metrics.max_grade,
            actions: self.judgments.actions.clone(),
            ubi: rankpulse_core::event::ubi::UbiSettings {
                ordinal_base: self.ubi.ordinal_base,
                // Validated at load; a path that does not parse is left out.
                dimensions: self
                    .ubi
                    .dimensions
                    .iter()
                    .filter_map(|(label, path)| {
                        Some((label.clone(), rankpulse_core::event::ubi::UbiPath::parse(path).ok()?))
                    })
                    .collect(),
            },
            // Validated at load.
            mapped: self.mapped.as_ref().and_then(|m| rankpulse_core::event::mapped::Mapping::new(&m.spec()).ok()),
        }
    }

    /// What the core's stages are built from.
    pub fn pipeline_settings(&self) -> PipelineSettings {
        PipelineSettings {
            decode: self.decode_limits(),
            assembly: AssemblyLimits {
                gap_ms: self.session.gap.ms(),
                max_open_lists: self.session.max_open_lists,
                late_policy: self.late.policy,
                late_horizon_ms: self.late.horizon.ms(),
                max_events_per_list: self.input.max_events_per_list,
                max_results_per_list: self.input.max_results_per_list,
            },
            dimension_labels: self.dimensions.labels.clone(),
            max_dimension_values: self.dimensions.max_values,
            max_combinations: self.dimensions.max_combinations,
            max_dimension_value_bytes: self.dimensions.max_value_bytes,
            conventions: self.conventions(),
            cutoffs: self.sorted_cutoffs(),
            bucket_ms: self.windows.bucket.ms(),
            longest_window_ms: self.windows.spans.iter().map(|s| s.ms()).max().unwrap_or(0),
            max_future_skew_ms: self.input.max_future_skew.ms(),
            min_timestamp_ms: self.input.min_timestamp.ms,
            formats: self
                .kafka
                .formats
                .iter()
                .filter(|(_, f)| **f != TopicFormat::Rankpulse)
                .map(|(t, f)| (t.clone(), f.core()))
                .collect(),
            click_ranks: self.debias.max_rank,
            primary: self.primary_metric().map(|(family, i)| family as usize * self.metrics.cutoffs.len() + i),
            session_timeout_ms: self.compare.session_timeout.ms(),
            max_sessions: self.compare.max_sessions,
        }
    }

    /// `compare.primary` as (family, index in the sorted cutoffs); `None`
    /// when `""` or not a configured metric.
    pub fn primary_metric(&self) -> Option<(Family, usize)> {
        let Some(primary) = self.compare.primary.as_deref() else {
            let cutoffs = self.sorted_cutoffs();
            let i = cutoffs.iter().position(|&k| k == 10).or(cutoffs.len().checked_sub(1))?;
            return Some((Family::Ndcg, i));
        };
        let (name, k) = primary.split_once('@')?;
        let family = *Family::ALL.iter().find(|f| f.name() == name)?;
        let k: usize = k.parse().ok()?;
        let i = self.sorted_cutoffs().iter().position(|&c| c == k)?;
        Some((family, i))
    }

    pub fn sorted_cutoffs(&self) -> Vec<usize> {
        let mut c = self.metrics.cutoffs.clone();
        c.sort_unstable();
        c
    }

    /// A TOML dump with secrets (passwords, keys, tokens in kafka.properties) redacted.
    pub fn redacted_toml(&self) -> String {
        let mut copy = self.clone();
        for (key, value) in copy.kafka.properties.iter_mut() {
            if is_secret_property(key) {
                *value = "<redacted>".into();
            }
        }
        toml::to_string(&copy).unwrap_or_else(|e| format!("# cannot render config: {e}\n"))
    }
}

/// librdkafka properties that carry secrets.
pub fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "token", "key.pem", "private", "jaas", "oauthbearer.config"].iter().any(|s| k.contains(s))
}

/// Sets `RANKPULSE__A__B__C=value` at path a.b.c. Keys are lower-cased
/// (environment variables are conventionally upper case), except below
/// `kafka.properties`, whose keys use dots: `RANKPULSE__KAFKA__PROPERTIES__SASL_MECHANISM`
/// sets `sasl.mechanism`.
/// A key whose default is text takes the value as it is, so that a group id
/// `1234` or an instance name `true` stays text; other keys read it as a
/// TOML value when it is one (numbers, booleans, lists), else as text.
fn apply_env(
    table: &mut toml::Table,
    defaults: &toml::Table,
    var: &str,
    rest: &str,
    value: &str,
) -> Result<(), ConfigError> {
    let parts = env_path(rest);
    if parts.len() < 2 || parts.iter().any(|p| p.is_empty()) {
        return Err(ConfigError::Env { var: var.to_string(), message: "expected RANKPULSE__SECTION__KEY".to_string() });
    }
    // A TOML literal when it is one ("45", "true", "[1, 3]", "\"x\""), else a plain string.
    let parsed = format!("v = {value}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    // kafka.properties values are strings for librdkafka; the whole table
    // (`RANKPULSE__KAFKA__PROPERTIES='{ "sasl.mechanism" = "PLAIN" }'`) is TOML.
    let properties = parts[0] == "kafka" && parts[1] == "properties";
    let text_key = (properties && parts.len() > 2) || is_text_key(defaults, &parts);
    let parsed = if text_key { toml::Value::String(value.to_string()) } else { parsed };
    // Meant as a list or a table but not TOML ("[1, x]"): taken as text,
    // the key would only say it expected a sequence.
    if let toml::Value::String(text) = &parsed
        && !text_key
        && let Some(open) = text.trim_start().chars().next().filter(|c| matches!(c, '[' | '{'))
        && let Err(e) = format!("v = {value}").parse::<toml::Table>()
    {
        let what = if open == '[' { "an array" } else { "an inline table" };
        // The properties may hold secrets: their text is not repeated.
        let shown = if properties { "the value".to_string() } else { format!("{value:?}") };
        return Err(ConfigError::Env {
            var: var.to_string(),
            message: format!("{shown} is not {what} in TOML: {}", e.message()),
        });
    }
    let mut node = table;
    for part in &parts[..parts.len() - 1] {
        let entry = node.entry(part.clone()).or_insert_with(|| toml::Value::Table(toml::Table::new()));
        node = entry
            .as_table_mut()
            .ok_or_else(|| ConfigError::Env { var: var.to_string(), message: format!("{part} is not a section") })?;
    }
    node.insert(parts[parts.len() - 1].clone(), parsed);
    Ok(())
}

/// The key path an override (`RANKPULSE__` left out) sets: sections and
/// keys lower-cased, and below `kafka.properties` one key whose `_` are dots.
fn env_path(rest: &str) -> Vec<String> {
    let parts: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
    if parts.len() >= 3 && parts[0] == "kafka" && parts[1] == "properties" {
        vec!["kafka".into(), "properties".into(), parts[2..].join("__").replace('_', ".")]
    } else {
        parts
    }
}

/// librdkafka properties of the consumer that rankpulse sets itself and
/// depends on, with why, for the error refusing them in `kafka.properties`.
pub const MANAGED_PROPERTIES: &[(&str, &str)] = &[
    ("group.id", "use kafka.group_id"),
    ("bootstrap.servers", "use kafka.brokers"),
    // librdkafka's alias of bootstrap.servers: the consumer would take one
    // list or the other, while the dead-letter and state clients, and the
    // logs, use kafka.brokers.
    ("metadata.broker.list", "use kafka.brokers"),
    ("enable.auto.commit", "offsets are committed by rankpulse once accounted for"),
    ("enable.auto.offset.store", "offsets are committed by rankpulse once accounted for"),
    ("enable.partition.eof", "a restored shard learns from it that its partition is live"),
];

/// librdkafka properties rankpulse depends on that a user may still set,
/// each with the values that keep rankpulse working and why.
fn check_property(key: &str, value: &str) -> Result<(), String> {
    match key {
        // The statistics are how rankpulse knows it is connected (/readyz)
        // and which brokers have answered (closing idle lists on
        // processing time); a longer interval delays both.
        "statistics.interval.ms" if !value.trim().parse::<u32>().is_ok_and(|ms| ms > 0) => Err(format!(
            "must be a positive number of milliseconds, got {value:?} (/readyz and the close of idle lists depend on \
             librdkafka's statistics)"
        )),
        // Lists are joined across topics by partition number: only the
        // range assignor gives partition p of every topic to the same
        // instance (librdkafka's default, "range,roundrobin", picks it).
        "partition.assignment.strategy" if value.trim() != "range" => Err(format!(
            "must be \"range\", got {value:?} (lists are joined across topics by partition number, which needs the \
             range assignor)"
        )),
        _ => Ok(()),
    }
}

/// A TOML syntax error as its place and message, without the line itself,
/// which toml's own rendering quotes (it may set a password).
fn syntax_error(text: &str, e: &toml::de::Error) -> String {
    match e.span() {
        Some(span) => {
            let before = text.get(..span.start).unwrap_or(text);
            let line = before.matches('\n').count() + 1;
            let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
            format!("line {line}, column {column}: {}", e.message())
        }
        None => e.message().to_string(),
    }
}

/// What a Kafka topic name may hold, for error messages.
const TOPIC_NAME: &str = "1 to 249 of a-z A-Z 0-9 . _ -";

/// Whether the broker accepts `t` as a topic's name.
fn is_topic_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// The process environment as text. `std::env::vars` panics on a variable
/// that is not UTF-8, and any process may inherit one: such a variable is
/// left out, unless its name is an override's (`RANKPULSE…`), which is an
/// error naming it.
pub fn process_env() -> Result<Vec<(String, String)>, ConfigError> {
    let mut vars = Vec::new();
    for (name, value) in std::env::vars_os() {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => vars.push((name, value)),
            (name, _) => {
                let name = name.unwrap_or_else(|n| n.to_string_lossy().into_owned());
                if name.to_ascii_uppercase().starts_with("RANKPULSE") {
                    return Err(ConfigError::Env { var: name, message: "is not valid UTF-8".into() });
                }
            }
        }
    }
    Ok(vars)
}

/// Environment variables that look meant for the configuration but are not
/// read, because only `RANKPULSE__SECTION__KEY` is: one underscore
/// (`RANKPULSE_SESSION_GAP`) or a lower-case prefix (`rankpulse__session__gap`)
/// followed by a section's name. Reported, not refused: a deployment may
/// keep variables of its own under the same prefix (`RANKPULSE_IMAGE`), and
/// only a section's name tells a meant override from those.
pub fn lookalike_overrides(env: impl IntoIterator<Item = (String, String)>) -> Vec<String> {
    let defaults = toml::Table::try_from(Config::default()).unwrap_or_default();
    let mut found: Vec<String> = env
        .into_iter()
        .map(|(var, _)| var)
        .filter(|var| {
            let upper = var.to_ascii_uppercase();
            if var.starts_with(ENV_PREFIX) || !upper.starts_with("RANKPULSE_") {
                return false;
            }
            let rest = upper["RANKPULSE_".len()..].trim_start_matches('_').to_ascii_lowercase();
            // `mapped` has no default, so no key in the defaults.
            defaults.keys().map(String::as_str).chain(["mapped"]).any(|section| {
                rest.strip_prefix(section).is_some_and(|after| after.starts_with('_') || after.is_empty())
            })
        })
        .collect();
    found.sort();
    found
}

/// Whether `table` (a config file's) sets `key` (`session.gap`,
/// `metrics.cutoffs[1]`), a key below it or the section holding it.
/// A key may itself hold dots (`kafka.properties."sasl.mechanism"`,
/// `kafka.formats."search.events"`), so each level tries the rest whole
/// before splitting it.
fn sets(table: &toml::Table, key: &str) -> bool {
    let key = key.trim_start_matches('.');
    if key.is_empty() {
        return true;
    }
    let whole = key.split('[').next().unwrap_or(key);
    if table.contains_key(whole) {
        return true;
    }
    key.match_indices('.').any(|(at, _)| {
        let part = key[..at].split('[').next().unwrap_or(&key[..at]);
        match table.get(part) {
            Some(toml::Value::Table(t)) => sets(t, &key[at + 1..]),
            Some(_) => true,
            None => false,
        }
    })
}

/// Whether the override `var` sets `key` (`mapped.time`), a key below it
/// or the section holding it.
fn sets_key(var: &str, key: &str) -> bool {
    let Some(rest) = var.strip_prefix(ENV_PREFIX) else { return false };
    let path = env_path(rest).join(".");
    let key = key.to_ascii_lowercase();
    path == key || key.starts_with(&format!("{path}.")) || path.starts_with(&format!("{key}."))
}

/// The typed configuration in `table`, or the failing key and why.
fn deserialize(table: toml::Table) -> Result<Config, (String, String)> {
    serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
        let key = e.path().to_string();
        let mut message = e.into_inner().message().to_string();
        // serde quotes the offending text ("invalid type: string \"…\"");
        // under kafka.properties that text may be a password.
        if key == "kafka.properties" || (key.starts_with("kafka.properties.") && is_secret_property(&key)) {
            message = redact_quoted(&message);
        }
        (key, message)
    })
}

/// serde's `invalid type: string "…", expected …` with the string
/// replaced by `<redacted>`; any other message as it is.
fn redact_quoted(message: &str) -> String {
    const OPEN: &str = "string \"";
    const CLOSE: &str = "\", expected";
    match (message.find(OPEN), message.rfind(CLOSE)) {
        (Some(open), Some(close)) if open + OPEN.len() <= close => {
            format!("{}<redacted>{}", &message[..open + OPEN.len()], &message[close..])
        }
        _ => message.to_string(),
    }
}

/// The error of the override `var=value` on the defaults alone, if any.
fn env_key_error(defaults: &toml::Table, var: &str, value: &str) -> Option<ConfigError> {
    let mut table = defaults.clone();
    let rest = var.strip_prefix(ENV_PREFIX)?;
    if let Err(e) = apply_env(&mut table, defaults, var, rest, value) {
        return Some(e);
    }
    let (key, message) = deserialize(table).err()?;
    Some(ConfigError::EnvKey { var: var.to_string(), key, message })
}

/// Whether the built-in default at `path` is text.
fn is_text_key(defaults: &toml::Table, path: &[String]) -> bool {
    let Some((last, sections)) = path.split_last() else { return false };
    let mut node = defaults;
    for section in sections {
        match node.get(section) {
            Some(toml::Value::Table(t)) => node = t,
            _ => return false,
        }
    }
    matches!(node.get(last), Some(toml::Value::String(_)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The core's defaults (what its tests and fuzz targets run with) are
    /// the configuration's: a default changed on one side only fails here.
    #[test]
    fn the_cores_defaults_are_the_configurations() {
        assert_eq!(Config::default().pipeline_settings(), PipelineSettings::default());
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    fn from_toml(text: &str) -> Result<Config, ConfigError> {
        // A file per call: tests run in parallel, and two texts of one
        // length used to share a name (one test read the other's file).
        static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("rankpulse-config-{}-{n}", std::process::id()));
        std::fs::write(&dir, text).unwrap();
        let r = Config::load_with_env(Some(&dir), env(&[]));
        let _ = std::fs::remove_file(&dir);
        r
    }

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

    #[test]
    fn shipped_default_file_equals_built_in_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
        let from_file = Config::load_with_env(Some(&path), env(&[])).unwrap();
        assert_eq!(toml::to_string(&from_file).unwrap(), toml::to_string(&Config::default()).unwrap());
    }

    /// Backend "kafka" needs no directory and refuses one; its topic must
    /// be a topic name that no input or dead-letter topic uses.
    #[test]
    fn state_settings_name_their_key() {
        let c = Config::default();
        assert!(!c.state.enabled() && c.state.backend == StateBackend::Dir, "off by default");
        assert_eq!((c.state.topic.as_str(), c.state.replication), ("rankpulse-state", -1));
        let c = from_toml("[state]\nbackend = \"kafka\"\n").unwrap();
        assert!(c.state.enabled());
        let c = from_toml("[state]\ndir = \"/var/lib/rankpulse\"\ntopic = \"ignored\"\n").unwrap();
        assert!(c.state.enabled() && c.state.backend == StateBackend::Dir);
        for (text, key, value) in [
            ("[state]\nbackend = \"kafka\"\ndir = \"/tmp/x\"\n", "state.dir", "/tmp/x"),
            ("[state]\nbackend = \"kafka\"\ntopic = \"a b\"\n", "state.topic", "a b"),
            ("[state]\nbackend = \"kafka\"\ntopic = \"\"\n", "state.topic", "not a Kafka topic"),
            ("[state]\nbackend = \"kafka\"\ntopic = \"search-judgments\"\n", "state.topic", "input"),
            ("[state]\nbackend = \"kafka\"\nreplication = 0\n", "state.replication", "got 0"),
            ("[state]\nbackend = \"kafka\"\ninterval = \"50ms\"\n", "state.interval", "100ms"),
            ("[state]\nbackend = \"s3\"\n", "state.backend", "s3"),
        ] {
            let e = from_toml(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("config key {key}:")) && e.contains(value), "{text}: {e}");
        }
    }

    #[test]
    fn debias_settings_name_their_key() {
        assert_eq!(Config::default().pipeline_settings().click_ranks, 0, "off by default");
        let c = from_toml("[debias]\nmax_rank = 3\npropensities = [1.0, 0.5, 0.25]\n").unwrap();
        assert_eq!(c.pipeline_settings().click_ranks, 3);
        for (text, key, value) in [
            ("[debias]\nmax_rank = 65\n", "debias.max_rank", "65"),
            ("[debias]\nmax_rank = 3\npropensities = [1.0, 0.5]\n", "debias.propensities", "2 values"),
            ("[debias]\nmax_rank = 2\npropensities = [1.0, 0.0]\n", "debias.propensities", "0 is not"),
            ("[debias]\nmin_propensity = 1.0\n", "debias.min_propensity", "1"),
        ] {
            let e = from_toml(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("config key {key}:")) && e.contains(value), "{text}: {e}");
        }
    }

    #[test]
    fn variables_that_look_like_overrides_are_named() {
        let vars = env(&[
            ("RANKPULSE_SESSION_GAP", "45s"),
            ("rankpulse__kafka__brokers", "b:9092"),
            ("RANKPULSE_METRICS", "x"),
            // Read, or not meant for the configuration.
            ("RANKPULSE__SESSION__GAP", "45s"),
            ("RANKPULSE_TANSU", "/bin/tansu"),
            ("RANKPULSE_SESSIONS", "3"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(
            lookalike_overrides(vars),
            ["RANKPULSE_METRICS", "RANKPULSE_SESSION_GAP", "rankpulse__kafka__brokers"]
        );
    }

    /// Only arms of the experiment are compared: not the baseline, not
    /// `compare.exclude`, not lists without the label, not `__other__`.
    #[test]
    fn compares_only_arms_of_the_experiment() {
        let c = CompareConfig { exclude: vec!["tdi-v3".into()], ..CompareConfig::default() };
        let compared: Vec<&str> = ["candidate", "control", "tdi-v3", "unknown", "__other__", "v2"]
            .into_iter()
            .filter(|a| c.compares(a))
            .collect();
        assert_eq!(compared, ["candidate", "v2"]);
    }

    #[test]
    fn compare_settings_name_their_key_and_source() {
        let labels = |c: &Config| c.compare.arm_index(&c.dimensions.labels);
        assert_eq!(labels(&Config::default()), Some(0), "ranker is the default arm label");
        let c = from_toml("[dimensions]\nlabels = [\"market\"]\n").unwrap();
        assert_eq!(labels(&c), None, "no ranker label: no comparison, and no error");
        let c = from_toml("[dimensions]\nlabels = [\"market\", \"arm\"]\n[compare]\ndimension = \"arm\"\n").unwrap();
        assert_eq!(labels(&c), Some(1));
        let c = from_toml("[compare]\ndimension = \"\"\n").unwrap();
        assert_eq!(labels(&c), None, "\"\" turns comparison off");
        for (text, key, value) in [
            ("[compare]\ndimension = \"arm\"\n", "compare.dimension", "\"arm\""),
            ("[compare]\nalpha = 1.5\n", "compare.alpha", "1.5"),
            ("[compare]\npower = 0\n", "compare.power", "0"),
            ("[compare]\neffect = -0.01\n", "compare.effect", "-0.01"),
            ("[compare]\nbaseline = \"\"\n", "compare.baseline", ""),
        ] {
            let e = from_toml(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("config key {key}:")) && e.contains(value), "{text}: {e}");
        }
        let e = Config::load_with_env(None, env(&[("RANKPULSE__COMPARE__ALPHA", "2")])).unwrap_err().to_string();
        assert!(e.starts_with("environment variable RANKPULSE__COMPARE__ALPHA: config key compare.alpha:"), "{e}");
    }

    /// `input.min_timestamp` is a moment in RFC 3339, from a file or the
    /// environment; anything else is refused naming the key.
    #[test]
    fn min_timestamp_reads_rfc3339_and_refuses_anything_else() {
        assert_eq!(Config::default().input.min_timestamp.ms, 946_684_800_000);
        let c = from_toml("[input]\nmin_timestamp = \"1990-06-01T12:00:00+02:00\"\n").unwrap();
        assert_eq!(c.pipeline_settings().min_timestamp_ms, 644_234_400_000);
        // A TOML date-time written bare is the same moment.
        let c = from_toml("[input]\nmin_timestamp = 1990-06-01T12:00:00+02:00\n").unwrap();
        assert_eq!(c.input.min_timestamp.ms, 644_234_400_000);
        let c =
            Config::load_with_env(None, env(&[("RANKPULSE__INPUT__MIN_TIMESTAMP", "1970-01-01T00:00:00Z")])).unwrap();
        assert_eq!(c.input.min_timestamp.ms, 0);
        for bad in ["\"2000-01-01\"", "2000-01-01", "\"yesterday\"", "946684800000", "\"1969-12-31T23:59:59Z\""] {
            let e = from_toml(&format!("[input]\nmin_timestamp = {bad}\n")).unwrap_err().to_string();
            assert!(e.starts_with("config key input.min_timestamp:"), "{bad}: {e}");
        }
        // Epoch milliseconds say what to write instead.
        let e = from_toml("[input]\nmin_timestamp = 946684800000\n").unwrap_err().to_string();
        assert!(e.contains("946684800000 is a number: write a date-time (RFC 3339)"), "{e}");
    }

    /// librdkafka properties written as bare numbers or booleans, as users
    /// write them, reach librdkafka as their text; a table is refused.
    #[test]
    fn kafka_properties_take_bare_numbers_and_booleans() {
        let c = from_toml(
            "[kafka.properties]\n\"fetch.wait.max.ms\" = 10\n\"socket.keepalive.enable\" = false\n\"security.protocol\" = \"ssl\"\n",
        )
        .unwrap();
        let p = &c.kafka.properties;
        assert_eq!(p["fetch.wait.max.ms"], "10");
        assert_eq!(p["socket.keepalive.enable"], "false");
        assert_eq!(p["security.protocol"], "ssl");
        let e = from_toml("[kafka.properties]\nssl.ca.location = \"/ca.pem\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key kafka.properties") && e.contains("quote a property name with dots"), "{e}");
        let c = Config::load_with_env(None, env(&[("RANKPULSE__KAFKA__PROPERTIES__FETCH_WAIT_MAX_MS", "10")])).unwrap();
        assert_eq!(c.kafka.properties["fetch.wait.max.ms"], "10");
    }

    #[test]
    fn unknown_keys_and_bad_values_name_the_key() {
        let e = from_toml("[session]\ngapp = \"30s\"\n").unwrap_err().to_string();
        assert!(e.contains("session") && e.contains("unknown field `gapp`"), "{e}");
        let e = from_toml("[metrics]\ngain = \"exp\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key metrics.gain:"), "{e}");
        // A key the file set names the file; a bad value set by the
        // environment names the variable instead.
        assert!(e.ends_with(")") && e.contains("(config file ") && e.contains("rankpulse-config-"), "{e}");
        assert_eq!(e.matches("metrics.gain").count(), 1, "{e}");
        let e = from_toml("[session]\ngap = \"30s\"\n[metrics]\ncutoffs = [0]\n").unwrap_err().to_string();
        assert!(e.starts_with("config key metrics.cutoffs") && e.contains("(config file "), "{e}");
        let e = Config::load_with_env(None, env(&[("RANKPULSE__METRICS__GAIN", "exp")])).unwrap_err().to_string();
        assert!(!e.contains("config file"), "{e}");
        // The key once: not again on a second line ("in `metrics.gain`").
        assert_eq!(e.matches("metrics.gain").count(), 1, "{e}");
        // A list that is not TOML says so, not "expected a sequence".
        let e = Config::load_with_env(None, env(&[("RANKPULSE__METRICS__CUTOFFS", "[1, x]")])).unwrap_err().to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__METRICS__CUTOFFS: \"[1, x]\" is not an array in TOML"),
            "{e}"
        );
        let e = from_toml("[session]\ngap = \"soon\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key session.gap:"), "{e}");
        let e = from_toml("[metrics]\ncutoffs = [3, 3]\n").unwrap_err().to_string();
        assert!(e.starts_with("config key metrics.cutoffs:"), "{e}");
        // The labels of rankpulse's own series, old and new (`rank` of the
        // click metrics, `outcome` of interleaving): a dimension label of
        // the same name would duplicate it and Prometheus would refuse the
        // whole scrape.
        for label in ["k", "rank", "outcome", "kind", "window", "le", "instance"] {
            let e = from_toml(&format!("[dimensions]\nlabels = [\"{label}\"]\n")).unwrap_err().to_string();
            assert!(e.contains("reserved"), "{label}: {e}");
        }
        let e = from_toml("[judgments.actions]\nclick = 9\n").unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.click:"), "{e}");
        let e = from_toml("[kafka.formats]\nsearch-judgments = \"ubi_event\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key kafka.formats.search-judgments:") && e.contains("ubi_events"), "{e}");
        let e = from_toml("[kafka.formats]\nubi-events = \"ubi_events\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key kafka.formats.ubi-events:") && e.contains("not one of kafka.topics"), "{e}");
        let e = from_toml("[ubi]\nordinal_base = 2\n").unwrap_err().to_string();
        assert!(e.starts_with("config key ubi.ordinal_base:"), "{e}");
        let e = from_toml("[ubi.dimensions]\nranker = \"query_attributes\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key ubi.dimensions.ranker:") && e.contains("query_attributes.<name>"), "{e}");
        let e = from_toml("[ubi.dimensions]\nranker = \"query_attributes.experiment..arm\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key ubi.dimensions.ranker:") && e.contains("experiment..arm"), "{e}");
        let e = from_toml("[ubi.dimensions]\narm = \"application\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key ubi.dimensions.arm:") && e.contains("dimensions.labels"), "{e}");
        let ok = "[kafka]\ntopics = [\"q\", \"e\"]\n[kafka.formats]\nq = \"ubi_queries\"\ne = \"ubi_events\"\n\
                  [ubi]\nordinal_base = 1\n[ubi.dimensions]\nranker = \"application\"\n\
                  market = \"event_attributes.context.geo.market\"\n";
        let settings = from_toml(ok).unwrap().pipeline_settings();
        use rankpulse_core::event::Format;
        assert_eq!(settings.formats, [("e".to_string(), Format::UbiEvents), ("q".to_string(), Format::UbiQueries)]);
        assert_eq!(settings.decode.ubi.ordinal_base, 1);
        let market = settings.decode.ubi.dimensions.iter().find(|(l, _)| l == "market").map(|(_, p)| p.to_string());
        assert_eq!(market.as_deref(), Some("event_attributes.context.geo.market"));
        let e = from_toml("[http]\nlisten = \"localhost\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key http.listen:"), "{e}");
    }

    const MAPPED: &str = "[kafka]\ntopics = [\"hits\", \"clicks\"]\n[kafka.formats]\nhits = \"mapped\"\nclicks = \"mapped\"\n\
                          [mapped]\nsession = \"user.sid\"\ntime = [\"ts\", \"/clicked~1at\"]\nresults = \"hits\"\n\
                          result_doc = \"\"\njudged_doc = \"doc\"\naction = \"what\"\n[mapped.dimensions]\nranker = \"exp.arm\"\n";

    /// `[mapped]` with no topic of format mapped is valid (a replay may use
    /// it) but `run` warns of it; with a mapped topic it does not.
    #[test]
    fn an_unused_mapped_section_is_named() {
        let unused = MAPPED.replace("hits = \"mapped\"\nclicks = \"mapped\"\n", "hits = \"ubi_queries\"\n");
        let c = from_toml(&unused).unwrap();
        let warnings = c.unused_sections();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert_eq!(
            warnings[0],
            "[mapped] is set but no topic is read with it: kafka.topics [\"hits\", \"clicks\"] are read as \
             kafka.formats says (hits = \"ubi_queries\"), the others as rankpulse events; to read a topic \
             through [mapped], set kafka.formats.<topic> = \"mapped\" (docs/formats.md)"
        );
        // The names are those a configuration writes (serde's).
        for f in [
            TopicFormat::Rankpulse,
            TopicFormat::UbiQueries,
            TopicFormat::UbiEvents,
            TopicFormat::Ubi,
            TopicFormat::Mapped,
        ] {
            assert_eq!(serde_json::to_string(&f).unwrap(), format!("{:?}", f.name()));
        }
        assert_eq!(from_toml(MAPPED).unwrap().unused_sections(), Vec::<String>::new());
        assert_eq!(Config::default().unused_sections(), Vec::<String>::new());
    }

    /// Every `[mapped]` error names its key, and the variable that set it
    /// when an override did; a mapped topic or replay without `[mapped]`
    /// names the section.
    #[test]
    fn mapped_errors_name_their_key_and_source() {
        let c = from_toml(MAPPED).unwrap();
        let settings = c.pipeline_settings();
        use rankpulse_core::event::Format;
        assert_eq!(settings.formats, [("clicks".to_string(), Format::Mapped), ("hits".to_string(), Format::Mapped)]);
        assert!(settings.decode.mapped.is_some());
        assert_eq!(c.mapped.as_ref().map(|m| m.time.0.len()), Some(2), "a list of alternatives");
        assert_eq!(c.mapped.as_ref().map(|m| m.position_base), Some(1), "1-based by default");
        let core_default = rankpulse_core::event::mapped::MappingSpec::default();
        assert_eq!(MappedConfig::default().spec(), core_default, "the core's defaults are the configuration's");
        // Printed and read back, the same mapping.
        let printed = c.redacted_toml();
        let again = from_toml(&printed).unwrap();
        assert_eq!(again.pipeline_settings(), settings, "{printed}");

        let with = |edit: &str| from_toml(&format!("{MAPPED}{edit}")).unwrap_err().to_string();
        let without =
            |key: &str| from_toml(&MAPPED.replace(&format!("\n{key} ="), "\nx_unused =")).unwrap_err().to_string();
        for key in ["session", "time", "results", "result_doc", "judged_doc"] {
            let e = from_toml(&MAPPED.replace(&format!("\n{key} = "), "\n# ")).unwrap_err().to_string();
            assert!(e.starts_with(&format!("config key mapped.{key}: is required")), "{key}: {e}");
            // Left out of the file's [mapped]: the file is named.
            assert!(e.contains("(config file "), "{key}: {e}");
        }
        let e = from_toml(&MAPPED.replace("\naction = ", "\n# ")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.grade: one of grade or action"), "{e}");
        let e = without("time");
        assert!(e.starts_with("config key mapped.x_unused: unknown field `x_unused`"), "{e}");
        let e =
            from_toml(&MAPPED.replace("session = \"user.sid\"", "session = \"user..sid\"")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.session: `user..sid` is not a path"), "{e}");
        let e = from_toml(&MAPPED.replace("/clicked~1at", "/clicked~2at")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.time: `/clicked~2at` is not a path"), "{e}");
        let e = from_toml(&MAPPED.replace("judged_doc = \"doc\"", "judged_doc = \"\"")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.judged_doc: `` is not a path: a path must not be empty"), "{e}");
        let e = from_toml(&MAPPED.replace("session = \"user.sid\"", "session = 7")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.session:") && e.contains("a list of paths"), "{e}");
        let e =
            from_toml(&MAPPED.replace("session = \"user.sid\"", "session = \"hits.0.sid\"")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.session: `hits.0.sid` leads into results"), "{e}");
        let e = with("arm = \"exp.arm\"\n");
        assert!(e.starts_with("config key mapped.dimensions.arm:") && e.contains("dimensions.labels"), "{e}");
        let e = with("ranker_x = [\"a\", \"b..c\"]\n");
        assert!(e.starts_with("config key mapped.dimensions.ranker_x:"), "{e}");
        let e = from_toml(&MAPPED.replace("[mapped]\n", "[mapped]\nposition_base = 2\n")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.position_base: 2 is neither 0 nor 1"), "{e}");
        let e = from_toml(&MAPPED.replace("[mapped]\n", "[mapped]\nsesion = \"s\"\n")).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped.sesion: unknown field `sesion`"), "{e}");
        // A mapped topic, or a mapped replay, without [mapped].
        let bare = MAPPED.split("[mapped]").next().unwrap_or_default();
        let e = from_toml(bare).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped: missing: kafka.formats.clicks is mapped"), "{e}");
        let e = Config::default().require_mapped(Format::Mapped).unwrap_err().to_string();
        assert!(e.starts_with("config key mapped: missing: --format mapped"), "{e}");
        assert!(Config::default().require_mapped(Format::Ubi).is_ok());
        assert!(c.require_mapped(Format::Mapped).is_ok());
        // From the environment: the variable, then the key.
        let path = std::env::temp_dir().join(format!("rankpulse-config-mapped-{}", std::process::id()));
        std::fs::write(&path, MAPPED).unwrap();
        let load = |pairs: &[(&str, &str)]| Config::load_with_env(Some(&path), env(pairs));
        let e = load(&[("RANKPULSE__MAPPED__TIME", "a..b")]).unwrap_err().to_string();
        let e2 = load(&[("RANKPULSE__MAPPED__DIMENSIONS__MARKET", "geo..x")]).unwrap_err().to_string();
        let ok = load(&[("RANKPULSE__MAPPED__QUERY", "[\"q\", \"/query/id\"]")]);
        let _ = std::fs::remove_file(&path);
        assert!(e.starts_with("environment variable RANKPULSE__MAPPED__TIME: config key mapped.time: `a..b`"), "{e}");
        assert!(
            e2.starts_with(
                "environment variable RANKPULSE__MAPPED__DIMENSIONS__MARKET: config key mapped.dimensions.market:"
            ),
            "{e2}"
        );
        assert_eq!(ok.unwrap().mapped.map(|m| m.query.0), Some(vec!["q".to_string(), "/query/id".to_string()]));
    }

    #[test]
    fn environment_overrides_file_and_defaults() {
        let c = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__SESSION__GAP", "45s"),
                ("RANKPULSE__METRICS__CUTOFFS", "[1, 10]"),
                ("RANKPULSE__METRICS__GAIN", "linear"),
                ("RANKPULSE__KAFKA__BROKERS", "a:9092,b:9092"),
                ("RANKPULSE__KAFKA__PROPERTIES__SASL_MECHANISM", "PLAIN"),
                ("RANKPULSE__JUDGMENTS__ACTIONS__LIKE", "2"),
                ("OTHER", "x"),
            ]),
        )
        .unwrap();
        assert_eq!(c.session.gap.duration, Duration::from_secs(45));
        assert_eq!(c.metrics.cutoffs, [1, 10]);
        assert_eq!(c.metrics.gain, Gain::Linear);
        assert_eq!(c.kafka.brokers, "a:9092,b:9092");
        assert_eq!(c.kafka.properties["sasl.mechanism"], "PLAIN");
        assert_eq!(c.judgments.actions["like"], 2);
        let e = Config::load_with_env(None, env(&[("RANKPULSE__METRICS__MAX_GRADE", "many")])).unwrap_err();
        let e = e.to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__METRICS__MAX_GRADE: config key metrics.max_grade:"),
            "{e}"
        );
    }

    /// An override's unknown key or bad value names the key and the
    /// variable it came from; a file's bad key is still the file's.
    #[test]
    fn environment_errors_name_their_variable() {
        let e = Config::load_with_env(None, env(&[("RANKPULSE__KAFKA__NOPE", "1")])).unwrap_err().to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__KAFKA__NOPE: config key kafka.nope: unknown field `nope`"),
            "{e}"
        );
        let e = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__SESSION__GAP", "45s"),
                ("RANKPULSE__NOPE__GAP", "1"),
                ("RANKPULSE__KAFKA__BROKERS", "b:1"),
            ]),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.starts_with("environment variable RANKPULSE__NOPE__GAP: config key nope: unknown field `nope`"),
            "{e}"
        );
        let dir = std::env::temp_dir().join(format!("rankpulse-config-env-{}", std::process::id()));
        std::fs::write(&dir, "[session]\ngapp = \"30s\"\n").unwrap();
        let e = Config::load_with_env(Some(&dir), env(&[("RANKPULSE__SESSION__GAP", "45s")])).unwrap_err().to_string();
        let _ = std::fs::remove_file(&dir);
        assert!(e.starts_with("config key session.gapp: unknown field `gapp`"), "{e}");
    }

    /// A text key takes a value that looks like a number or a boolean as
    /// text; numbers and durations are still checked, naming the key.
    #[test]
    fn environment_values_are_typed_by_their_key() {
        let c = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__KAFKA__GROUP_ID", "1234"),
                ("RANKPULSE__STATE__INSTANCE", "true"),
                ("RANKPULSE__KAFKA__DEAD_LETTER_TOPIC", "2.5"),
                ("RANKPULSE__METRICS__MAX_GRADE", "3"),
            ]),
        )
        .unwrap();
        assert_eq!(c.kafka.group_id, "1234");
        assert_eq!(c.state.instance, "true");
        assert_eq!(c.kafka.dead_letter_topic, "2.5");
        assert_eq!(c.metrics.max_grade, 3);
        let e = Config::load_with_env(None, env(&[("RANKPULSE__SESSION__GAP", "soon")])).unwrap_err();
        let e = e.to_string();
        assert!(e.starts_with("environment variable RANKPULSE__SESSION__GAP: config key session.gap:"), "{e}");
    }

    #[test]
    fn secrets_are_redacted() {
        let c = Config::load_with_env(
            None,
            env(&[
                ("RANKPULSE__KAFKA__PROPERTIES__SASL_PASSWORD", "hunter2"),
                ("RANKPULSE__KAFKA__PROPERTIES__SASL_USERNAME", "bob"),
            ]),
        )
        .unwrap();
        let dump = c.redacted_toml();
        assert!(!dump.contains("hunter2"), "{dump}");
        assert!(dump.contains("bob"));
        // Every kind of secret librdkafka takes, by the patterns of
        // `is_secret_property`; names that only look alike are kept.
        let secrets = [
            "ssl.key.password",
            "sasl.oauthbearer.client.secret",
            "sasl.oauthbearer.token.endpoint.url.token",
            "ssl.key.pem",
            "ssl.certificate.pem.private",
            "sasl.jaas.config",
            "sasl.oauthbearer.config",
        ];
        let mut c = Config::default();
        for (i, key) in secrets.iter().enumerate() {
            c.kafka.properties.insert(key.to_string(), format!("s3cret-{i}"));
        }
        c.kafka.properties.insert("sasl.username".into(), "visible-user".into());
        c.kafka.properties.insert("ssl.ca.location".into(), "/visible/ca.pem".into());
        let dump = c.redacted_toml();
        assert!(!dump.contains("s3cret"), "{dump}");
        assert_eq!(dump.matches("<redacted>").count(), secrets.len(), "{dump}");
        assert!(dump.contains("visible-user") && dump.contains("/visible/ca.pem"), "{dump}");
    }

    /// The whole property table may come from one variable, as TOML; an
    /// error about it never repeats its text (it may hold a password), and
    /// a list value is not mistaken for an unquoted dotted name.
    #[test]
    fn property_errors_keep_secrets_and_say_what_is_wrong() {
        let c = Config::load_with_env(
            None,
            env(&[("RANKPULSE__KAFKA__PROPERTIES", r#"{ "sasl.username" = "bob", "sasl.password" = "hunter2" }"#)]),
        )
        .unwrap();
        assert_eq!(c.kafka.properties["sasl.password"], "hunter2");
        assert_eq!(c.kafka.properties["sasl.username"], "bob");
        for value in [r#"{ "sasl.password" = "hunter2" "#, r#"sasl.password=hunter2"#] {
            let e =
                Config::load_with_env(None, env(&[("RANKPULSE__KAFKA__PROPERTIES", value)])).unwrap_err().to_string();
            assert!(e.starts_with("environment variable RANKPULSE__KAFKA__PROPERTIES:"), "{e}");
            assert!(!e.contains("hunter2"), "{e}");
        }
        let e = from_toml("[kafka]\nproperties = \"sasl.password=hunter2\"\n").unwrap_err().to_string();
        assert!(
            e.starts_with("config key kafka.properties: invalid type: string \"<redacted>\"") && !e.contains("hunter2"),
            "{e}"
        );
        let e = from_toml("[kafka.properties]\n\"sasl.password\" = [\"hunter2\"]\n").unwrap_err().to_string();
        assert!(e.contains("\"sasl.password\" is not text, a number or a boolean (librdkafka takes a list"), "{e}");
        assert!(!e.contains("hunter2") && !e.contains("quote a property name"), "{e}");
        let e = from_toml("[kafka.properties]\nssl.ca.location = \"/ca.pem\"\n").unwrap_err().to_string();
        assert!(e.contains("quote a property name with dots"), "{e}");
        // A syntax error says where, not what the line holds.
        let e = from_toml("[kafka.properties]\n\"sasl.password\" = hunter2\n").unwrap_err().to_string();
        assert!(e.contains(": line 2, column ") && !e.contains("hunter2"), "{e}");
        // The whole table and a key of it, in either order: both apply.
        let table = ("RANKPULSE__KAFKA__PROPERTIES", r#"{ "sasl.username" = "bob" }"#);
        let key = ("RANKPULSE__KAFKA__PROPERTIES__SASL_MECHANISM", "PLAIN");
        for pairs in [[table, key], [key, table]] {
            let c = Config::load_with_env(None, env(&pairs)).unwrap();
            assert_eq!(
                (c.kafka.properties["sasl.username"].as_str(), c.kafka.properties["sasl.mechanism"].as_str()),
                ("bob", "PLAIN")
            );
        }
    }

    /// Values a careless or hostile configuration holds, each refused with
    /// its key and the file that set it, rather than run with a meaning
    /// nobody wanted.
    #[test]
    fn hostile_values_are_refused_naming_the_key() {
        for (text, key, says) in [
            // librdkafka would subscribe to a pattern, which could match
            // the dead-letter topic and read back every copy for ever.
            ("[kafka]\ntopics = [\"^search-.*\"]\n", "kafka.topics", "patterns are not supported"),
            ("[kafka]\ntopics = [\"a b\"]\n", "kafka.topics", "is not a Kafka topic name"),
            ("[kafka]\ndead_letter_topic = \"dead letters\"\n", "kafka.dead_letter_topic", "is not a Kafka topic name"),
            // An empty filter would log errors only.
            ("[log]\nlevel = \"\"\n", "log.level", "empty"),
            // Sub-millisecond durations would run as 0.
            ("[session]\ngap = \"500us\"\n", "session.gap", "whole number of milliseconds"),
            ("[kafka]\nmax_topic_drift = \"1ns\"\n", "kafka.max_topic_drift", "whole number of milliseconds"),
            // A window this long overflowed event time and emptied every window.
            ("[windows]\nspans = [\"1h\", \"292000000y\"]\n", "windows.spans", "longer than 1000 years"),
            ("[late]\nhorizon = \"1001y\"\n", "late.horizon", "longer than 1000 years"),
            // Unchecked below the compact form's capacity, and one page must fit.
            (
                "[input]\nmax_results_per_list = 255\n",
                "input.max_results_per_list",
                "at least input.max_results (200) and 256",
            ),
            (
                "[input]\nmax_results = 500\nmax_results_per_list = 400\n",
                "input.max_results_per_list",
                "at least input.max_results (500)",
            ),
            // Values rankpulse depends on, of properties a user may set.
            (
                "[kafka.properties]\n\"statistics.interval.ms\" = 0\n",
                "kafka.properties.statistics.interval.ms",
                "positive",
            ),
            (
                "[kafka.properties]\n\"partition.assignment.strategy\" = \"roundrobin\"\n",
                "kafka.properties.partition.assignment.strategy",
                "range",
            ),
            // A topic name with dots in [kafka.formats]: the file is still named.
            (
                "[kafka]\ntopics = [\"search.events\"]\n[kafka.formats]\n\"search.events\" = \"nope\"\n",
                "kafka.formats.search.events",
                "",
            ),
        ] {
            let e = from_toml(text).unwrap_err().to_string();
            assert!(e.starts_with(&format!("config key {key}")) && e.contains(says), "{text}: {e}");
            assert!(e.contains("(config file "), "{text}: {e}");
        }
        let c = from_toml(
            "[windows]\nspans = [\"1m\", \"1000y\"]\n[session]\ngap = \"1500ms\"\n[input]\nmax_future_skew = \"100y\"\n\
             [kafka.properties]\n\"statistics.interval.ms\" = 5000\n\"partition.assignment.strategy\" = \"range\"\n",
        )
        .unwrap();
        assert_eq!(c.session.gap.ms(), 1500);
        assert_eq!(c.windows.spans[1].duration, MAX_DURATION);
    }

    /// A default refused because of a key that was set says where that key
    /// was set: the default itself is nobody's.
    #[test]
    fn a_default_refused_because_of_another_key_names_that_keys_source() {
        let e = Config::load_with_env(None, env(&[("RANKPULSE__METRICS__MAX_GRADE", "2")])).unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.purchase: grade 3 is outside 0..=2"), "{e}");
        assert!(e.ends_with("; metrics.max_grade is set by environment variable RANKPULSE__METRICS__MAX_GRADE"), "{e}");
        let e = from_toml("[metrics]\nmax_grade = 2\n").unwrap_err().to_string();
        assert!(e.contains("; metrics.max_grade is set in config file "), "{e}");
        // A key the file set itself is the file's, as before.
        let e = from_toml("[metrics]\nmax_grade = 2\n[judgments.actions]\npurchase = 3\n").unwrap_err().to_string();
        assert!(e.starts_with("config key judgments.actions.purchase:") && e.contains("(config file "), "{e}");
    }

    /// Properties whose values rankpulse decides (its commits, its group)
    /// are refused, whether from the file or the environment.
    #[test]
    fn managed_kafka_properties_are_refused() {
        for key in [
            "group.id",
            "bootstrap.servers",
            "metadata.broker.list",
            "enable.auto.commit",
            "enable.auto.offset.store",
            "enable.partition.eof",
        ] {
            let e = from_toml(&format!("[kafka.properties]\n\"{key}\" = \"true\"\n")).unwrap_err().to_string();
            assert!(e.starts_with(&format!("config key kafka.properties.{key}: is managed by rankpulse")), "{e}");
            // The key holds dots; the file that set it is named all the same.
            assert!(e.contains("(config file "), "{e}");
            let var = format!("RANKPULSE__KAFKA__PROPERTIES__{}", key.replace('.', "_").to_ascii_uppercase());
            let e = Config::load_with_env(None, env(&[(&var, "true")])).unwrap_err().to_string();
            assert!(e.contains(&var) && e.contains("is managed by rankpulse"), "{e}");
        }
    }
}
