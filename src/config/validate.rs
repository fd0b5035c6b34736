//! Validation: every check types alone cannot make, run once after the
//! layers are merged and typed, before any event is touched. Each message
//! names its key; `layering` adds the file or variable that set it.
//!
//! One function per section (`[kafka]`, `[dimensions]` and `[input]` in
//! parts), called in a fixed order: with several keys wrong, the first of
//! them here is the one reported.

use super::kafka::{TOPIC_NAME, is_topic_name};
use super::kafka_properties::{MANAGED_PROPERTIES, check_property};
use super::metrics::DEFAULT_ACTIONS;
use super::{Config, ConfigError, MAX_DIMENSION_LABELS, MIN_RESULTS_PER_LIST, StateBackend, TopicFormat};
use rankpulse_core::metrics::list::Family;
use std::net::SocketAddr;
use std::time::Duration;

impl Config {
    /// Checks everything types alone cannot; each message names its key.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_kafka()?;
        self.validate_session()?;
        self.validate_dimension_values()?;
        self.validate_dead_letter_topic()?;
        self.validate_log()?;
        self.validate_state()?;
        self.validate_metrics()?;
        self.validate_judgments()?;
        self.validate_dimension_labels()?;
        self.validate_windows()?;
        self.validate_http()?;
        self.validate_list_limits()?;
        self.validate_dimension_limits()?;
        self.validate_message_size()?;
        self.validate_topic_formats()?;
        self.validate_ubi()?;
        self.validate_compare()?;
        self.validate_debias()?;
        self.validate_mapped()
    }

    /// `[kafka]`: the brokers, the group, the topics' names and the
    /// properties passed to librdkafka.
    fn validate_kafka(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[session]`.
    fn validate_session(&self) -> Result<(), ConfigError> {
        if self.session.gap.duration.is_zero() {
            return Err(ConfigError::key("session.gap", "must be longer than 0s"));
        }
        if self.session.max_open_lists == 0 {
            return Err(ConfigError::key("session.max_open_lists", "must be at least 1"));
        }
        Ok(())
    }

    /// `dimensions.max_values`.
    fn validate_dimension_values(&self) -> Result<(), ConfigError> {
        if self.dimensions.max_values == 0 {
            return Err(ConfigError::key("dimensions.max_values", "must be at least 1"));
        }
        Ok(())
    }

    /// `kafka.dead_letter_topic`: not one of the input topics.
    fn validate_dead_letter_topic(&self) -> Result<(), ConfigError> {
        let k = &self.kafka;
        if k.topics.contains(&k.dead_letter_topic) {
            return Err(ConfigError::key(
                "kafka.dead_letter_topic",
                format!("{:?} is also an input topic in kafka.topics", k.dead_letter_topic),
            ));
        }
        Ok(())
    }

    /// `[log]`.
    fn validate_log(&self) -> Result<(), ConfigError> {
        if let Err(message) = crate::logging::valid_filter(&self.log.level) {
            return Err(ConfigError::key("log.level", format!("{:?} is not a log filter: {message}", self.log.level)));
        }
        Ok(())
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
        if s.backend == StateBackend::Kafka {
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
                    format!(
                        "{:?} is also an input or dead-letter topic (kafka.topics, kafka.dead_letter_topic)",
                        s.topic
                    ),
                ));
            }
            if s.replication != -1 && !(1..=i32::from(i16::MAX)).contains(&s.replication) {
                return Err(ConfigError::key(
                    "state.replication",
                    format!("must be -1 (the broker's default) or between 1 and 32767, got {}", s.replication),
                ));
            }
        }
        if self.state.instance.contains(['/', '\\']) || self.state.instance.starts_with('.') {
            return Err(ConfigError::key(
                "state.instance",
                "must be a plain file name (no '/', not starting with '.')",
            ));
        }
        Ok(())
    }

    /// `[metrics]`.
    fn validate_metrics(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[judgments]`: every action's grade within `metrics.max_grade`.
    fn validate_judgments(&self) -> Result<(), ConfigError> {
        let m = &self.metrics;
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
        Ok(())
    }

    /// `dimensions.labels`.
    fn validate_dimension_labels(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[windows]`.
    fn validate_windows(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[http]`.
    fn validate_http(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[input]`'s limits of an impression and of a list.
    fn validate_list_limits(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `dimensions.max_combinations` and `dimensions.max_value_bytes`.
    fn validate_dimension_limits(&self) -> Result<(), ConfigError> {
        if self.dimensions.max_combinations == 0 {
            return Err(ConfigError::key("dimensions.max_combinations", "must be at least 1"));
        }
        if self.dimensions.max_value_bytes == 0 {
            return Err(ConfigError::key("dimensions.max_value_bytes", "must be at least 1"));
        }
        Ok(())
    }

    /// `input.max_message_bytes`.
    fn validate_message_size(&self) -> Result<(), ConfigError> {
        if self.input.max_message_bytes < 64 {
            return Err(ConfigError::key("input.max_message_bytes", "must be at least 64"));
        }
        Ok(())
    }

    /// `[kafka.formats]`: formats of topics that are read.
    fn validate_topic_formats(&self) -> Result<(), ConfigError> {
        for topic in self.kafka.formats.keys() {
            if !self.kafka.topics.contains(topic) {
                return Err(ConfigError::key(
                    &format!("kafka.formats.{topic}"),
                    format!("{topic:?} is not one of kafka.topics {:?}", self.kafka.topics),
                ));
            }
        }
        Ok(())
    }

    /// `[ubi]`.
    fn validate_ubi(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[compare]`.
    fn validate_compare(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[debias]`.
    fn validate_debias(&self) -> Result<(), ConfigError> {
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
        Ok(())
    }

    /// `[mapped]`, which a mapped topic needs.
    fn validate_mapped(&self) -> Result<(), ConfigError> {
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
}

#[cfg(test)]
mod tests {
    use crate::config::testing::{env, from_toml};
    use crate::config::values::MAX_DURATION;
    use crate::config::{Config, StateBackend};

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
}
