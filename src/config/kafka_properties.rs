//! The librdkafka properties policy: of `kafka.properties`, which keys
//! rankpulse sets itself and refuses, which values of the keys it depends
//! on it accepts, and which carry secrets that `--print-config`, the
//! start-up line and errors must never show.

use super::Config;

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
pub(super) fn check_property(key: &str, value: &str) -> Result<(), String> {
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

/// librdkafka properties that carry secrets.
pub fn is_secret_property(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    ["password", "secret", "token", "key.pem", "private", "jaas", "oauthbearer.config"].iter().any(|s| k.contains(s))
}

impl Config {
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

#[cfg(test)]
mod tests {
    use crate::config::Config;
    use crate::config::testing::{env, from_toml};

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
