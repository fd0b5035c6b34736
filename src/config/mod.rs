//! Configuration: the first thing `run` and `replay` read, validated once
//! before any event is touched. It is the binary crate's; the core sees only
//! what [`Config::pipeline_settings`] makes of it for decode, assemble, the
//! metric engine and the accumulators.
//!
//! Sources, later ones winning: built-in defaults (the same values as
//! `config/default.toml`), the TOML file given with `--config`, then
//! environment variables `RANKPULSE__SECTION__KEY` (for example
//! `RANKPULSE__SESSION__GAP=45s` or `RANKPULSE__METRICS__CUTOFFS=[1,3,10]`;
//! a value is read as a TOML value when it parses as one, else as a string).
//! Unknown keys and bad values are refused with a message naming the key,
//! and for an environment override the variable that set it.
//!
//! This module owns the whole [`Config`], its error, and what reads across
//! sections (a replay's `[mapped]`, the sections nothing reads). The rest:
//!
//! - `layering`: defaults, file and environment into one table, and whom to
//!   blame for a bad key; the variables that look meant but are not read.
//! - `values`: the value types keys share (durations, moments, paths).
//! - the sections, one module per group: `kafka` (`[kafka]`), `input`
//!   (`[input]`, `[ubi]`, `[mapped]`), `metrics` (`[session]`, `[late]`,
//!   `[metrics]`, `[judgments]`, `[dimensions]`, `[windows]`),
//!   `experiments` (`[compare]`, `[debias]`), `state`, `log`, `http`.
//! - `validate`: every check types alone cannot make, section by section.
//! - `kafka_properties`: which librdkafka properties rankpulse manages,
//!   depends on, or must never print.
//! - `core_settings`: the core crate's settings made from these.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use thiserror::Error;

mod core_settings;
mod experiments;
mod http;
mod input;
mod kafka;
mod kafka_properties;
mod layering;
mod log;
mod metrics;
mod state;
mod validate;
mod values;

pub use experiments::{CompareConfig, DebiasConfig};
pub use http::HttpConfig;
pub use input::{InputConfig, MIN_RESULTS_PER_LIST, MappedConfig, UbiConfig};
pub use kafka::{KafkaConfig, TopicFormat};
pub use kafka_properties::{MANAGED_PROPERTIES, is_secret_property};
pub use layering::{ENV_PREFIX, lookalike_overrides, process_env};
pub use log::{LogConfig, LogFormat};
pub use metrics::{DimensionsConfig, JudgmentsConfig, LateConfig, MetricsConfig, SessionConfig, WindowsConfig};
pub use rankpulse_core::assemble::LatePolicy;
/// Most dimension labels (the assembler keeps a tuple of them on the stack).
pub use rankpulse_core::event::MAX_DIMENSION_LABELS;
pub use state::{StateBackend, StateConfig};
pub use values::{Moment, Paths, Span};

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
}

/// What the submodules' tests load configurations with.
#[cfg(test)]
mod testing {
    use super::{Config, ConfigError};

    pub(super) fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    }

    pub(super) fn from_toml(text: &str) -> Result<Config, ConfigError> {
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
}

#[cfg(test)]
mod tests {
    use super::testing::{env, from_toml};
    use super::*;
    use std::path::Path;

    #[test]
    fn shipped_default_file_equals_built_in_defaults() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("config/default.toml");
        let from_file = Config::load_with_env(Some(&path), env(&[])).unwrap();
        assert_eq!(toml::to_string(&from_file).unwrap(), toml::to_string(&Config::default()).unwrap());
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
        let e = from_toml("[http]\nprobe_listen = \"9465\"\n").unwrap_err().to_string();
        assert!(e.starts_with("config key http.probe_listen:"), "{e}");
        let e = from_toml("[http]\nmax_password_checks = 0\n").unwrap_err().to_string();
        assert!(e.starts_with("config key http.max_password_checks:"), "{e}");
        let http = from_toml("[http]\nweb_config = \"web.yml\"\nprobe_listen = \"0.0.0.0:9465\"\n").unwrap().http;
        assert_eq!(http.web_config.as_deref(), Some(std::path::Path::new("web.yml")));
        assert!(http.open_probes && http.max_password_checks == 1);
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
}
