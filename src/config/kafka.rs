//! `[kafka]`: where the input comes from (brokers, group, topics and each
//! topic's wire format, the first stage of the data flow: Kafka message →
//! decode), where invalid messages go, and the properties passed to
//! librdkafka as text (`kafka_properties` says which of them rankpulse
//! manages itself).

use super::Span;
use super::values::span;
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;

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

/// What a Kafka topic name may hold, for error messages.
pub(super) const TOPIC_NAME: &str = "1 to 249 of a-z A-Z 0-9 . _ -";

/// Whether the broker accepts `t` as a topic's name.
pub(super) fn is_topic_name(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::testing::{env, from_toml};

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
}
