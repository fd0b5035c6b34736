//! The state's librdkafka clients (the readers, the producer, the admin
//! client's probe): their common settings, and the contexts that note what
//! the brokers reported, so that a request that only timed out says why.

use super::TIMEOUT;
use crate::config::Config;
use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::ProducerContext;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The state clients' common settings: the consumer's connection and
/// security settings (`kafka.properties`), and never a topic created by
/// asking for it (it would get the broker's default policy, not compact).
pub(super) fn client_config(config: &Config) -> ClientConfig {
    let mut cc = crate::kafka::connection_config(config, "rankpulse-state");
    cc.set("allow.auto.create.topics", "false");
    cc
}

/// What the state clients' librdkafka last reported going wrong with the
/// brokers: a refused login, a failed TLS handshake, a broker down.
/// librdkafka retries these on its own, so the request that waited on the
/// connection only times out; its error then adds why. (The consumer's
/// errors are logged by its own context; these clients log none.)
#[derive(Debug, Default)]
pub struct BrokerErrors {
    last: Mutex<Option<(Instant, String)>>,
}

impl BrokerErrors {
    fn note(&self, error: &KafkaError, reason: &str) {
        // The end of the topic reached while reading it: not an error.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::PartitionEOF) {
            return;
        }
        let Ok(mut last) = self.last.lock() else { return };
        // "All brokers are down" follows every failed connection; it must
        // not hide what made it fail.
        if error.rdkafka_error_code() == Some(RDKafkaErrorCode::AllBrokersDown)
            && last.as_ref().is_some_and(|(at, _)| at.elapsed() < RECENT)
        {
            return;
        }
        *last = Some((Instant::now(), format!("{error}: {reason}")));
    }

    /// `cause`, with the brokers' last error if one came within [`RECENT`]
    /// (while the failed request could have been waiting on it).
    pub(super) fn explain(&self, cause: String) -> String {
        let last = self.last.lock().ok().and_then(|l| l.clone());
        match last {
            Some((at, text)) if at.elapsed() < RECENT && !cause.contains(&text) => {
                format!("{cause} (last error from the brokers: {text})")
            }
            _ => cause,
        }
    }
}

/// How long a broker error explains a failed request: the longest a
/// request waits ([`TIMEOUT`], plus the acknowledgements' 5 s).
const RECENT: Duration = Duration::from_secs(TIMEOUT.as_secs() + 5);

/// The readers' context: notes the broker errors their polls serve.
#[derive(Clone, Default)]
pub struct StateContext(pub(super) Arc<BrokerErrors>);

impl ClientContext for StateContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.note(&error, reason);
    }
}

impl ConsumerContext for StateContext {}

/// Where the state producer's acknowledgements go: per record number, its
/// offset or its error; its broker errors are noted as the other clients'.
#[derive(Default)]
pub struct Acks {
    pub(super) results: Mutex<BTreeMap<usize, Result<i64, String>>>,
    pub(super) errors: Arc<BrokerErrors>,
}

impl ClientContext for Acks {
    fn error(&self, error: KafkaError, reason: &str) {
        self.errors.note(&error, reason);
    }
}

impl ProducerContext for Acks {
    type DeliveryOpaque = usize;
    fn delivery(&self, result: &DeliveryResult<'_>, n: usize) {
        let r = match result {
            Ok(m) => Ok(m.offset()),
            Err((e, _)) => Err(e.to_string()),
        };
        if let Ok(mut results) = self.results.lock() {
            results.insert(n, r);
        }
    }
}

/// Serves what librdkafka queued for `consumer` (errors, log lines), so
/// that its context has noted the errors. A poll without waiting serves
/// at most one event: a bounded number of them, more than 30 s of
/// reconnection attempts queue.
pub(super) fn serve_events(consumer: &BaseConsumer<StateContext>) {
    for _ in 0..10_000 {
        let _ = consumer.poll(Duration::ZERO);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A request that timed out says what the brokers reported, and the
    /// "all brokers are down" that follows a refused login does not hide
    /// it (the message librdkafka gives for a wrong SCRAM password, as
    /// `tests/it/secure_broker.rs` gets it from its gateway).
    #[test]
    fn a_failed_request_says_what_the_brokers_reported() {
        let errors = BrokerErrors::default();
        assert_eq!(errors.explain("timed out".into()), "timed out");
        let refused = "sasl_ssl://127.0.0.1:9093/bootstrap: SASL authentication error: Authentication failed \
                       during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-256";
        errors.note(&KafkaError::Global(RDKafkaErrorCode::Authentication), refused);
        errors.note(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        let text = errors.explain("timed out".into());
        assert!(text.starts_with("timed out (last error from the brokers: "), "{text}");
        assert!(text.ends_with(&format!("{refused})")), "{text}");
        // A cause that already says it is left as it is.
        assert_eq!(errors.explain(text.clone()), text);
        // Without an earlier error, "all brokers are down" is the news.
        let errors = BrokerErrors::default();
        errors.note(&KafkaError::Global(RDKafkaErrorCode::AllBrokersDown), "1/1 brokers are down");
        assert!(errors.explain("timed out".into()).ends_with("1/1 brokers are down)"));
    }
}
