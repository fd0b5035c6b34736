//! Test support for the daemon's modules: a [`Daemon`] without a broker
//! and messages as librdkafka would hand them to the loop, so that each
//! stage of the flow (consume, rebalance, commit, tick) can be driven one
//! call at a time, deterministically.

use super::Daemon;
use super::publisher::Publisher;
use crate::config::Config;
use crate::http::Published;
use crate::state::{KafkaStore, StateStore};
use rdkafka::message::{OwnedMessage, Timestamp};
use std::sync::Arc;

/// The default configuration's topics.
pub const IMPRESSIONS: &str = "search-impressions";
pub const JUDGMENTS: &str = "search-judgments";

/// The wall clock the tests hand to [`Daemon::handle`] (ms).
pub const NOW_MS: i64 = 1_700_000_100_000;
/// Every message's Kafka timestamp: 2 s before [`NOW_MS`], so each applied
/// message adds exactly 2 s to the ingest delay.
pub const KAFKA_MS: i64 = NOW_MS - 2_000;
/// The events' own time, before their Kafka timestamp (the event-time
/// guard rejects events stamped ahead of it).
pub const EVENT_MS: i64 = KAFKA_MS - 1_000;

impl Daemon {
    /// As [`Self::for_tests`], checkpointing into `config`'s state topic
    /// (which must exist: librdkafka's mock cluster has no admin API).
    pub(super) fn for_tests_with_kafka_store(config: Config) -> Daemon {
        let store = KafkaStore::connect(&config, 2048).expect("the state topic");
        let store = Arc::new(StateStore::Kafka(Box::new(store)));
        let published = Arc::new(Published::new(&config));
        let publisher =
            Publisher::start(config.clone(), published, Some(store.clone())).expect("the publisher thread starts");
        Daemon::new(config, Some(store), publisher, Arc::default(), None)
    }

    /// As `run_with` builds it, without a consumer, a state directory or
    /// dead letters: the publisher thread needs no broker.
    pub(super) fn for_tests(config: Config) -> Daemon {
        let published = Arc::new(Published::new(&config));
        let publisher = Publisher::start(config.clone(), published, None).expect("the publisher thread starts");
        Daemon::new(config, None, publisher, Arc::default(), None)
    }
}

/// A consumed message, keyed by session like the real topics.
pub fn message(topic: &str, partition: i32, offset: i64, payload: &[u8]) -> OwnedMessage {
    OwnedMessage::new(
        Some(payload.to_vec()),
        Some(b"session".to_vec()),
        topic.to_string(),
        Timestamp::CreateTime(KAFKA_MS),
        partition,
        offset,
        None,
    )
}

/// An impression of two results for `session`'s query q1 (README, Events).
pub fn impression(session: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"impression","event_id":"i-{session}","session_id":"{session}","query_id":"q1","timestamp":{EVENT_MS},"results":[{{"doc_id":"d1","position":1,"score":12.5}},{{"doc_id":"d2","position":2,"score":9.1}}],"dimensions":{{"ranker":"v2","market":"us"}}}}"#
    )
    .into_bytes()
}

/// A graded judgment of `doc` in `session`'s query q1.
pub fn judgment(session: &str, doc: &str, grade: u32) -> Vec<u8> {
    format!(
        r#"{{"type":"judgment","event_id":"j-{session}-{doc}","session_id":"{session}","query_id":"q1","doc_id":"{doc}","grade":{grade},"timestamp":{EVENT_MS}}}"#
    )
    .into_bytes()
}

/// A one-broker mock cluster whose topic `topic` holds `messages` records
/// (payloads "0", "1", …) in its one partition, and the default
/// configuration pointed at it: what the tests of librdkafka's behaviour
/// under the daemon (pause, queues kept apart) start from.
pub fn mock_topic(
    topic: &str,
    messages: usize,
) -> (rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>, Config) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let cluster = rdkafka::mocking::MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(topic, 1, 1).expect("a topic");
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", cluster.bootstrap_servers())
        .create()
        .expect("a producer");
    for i in 0..messages {
        let payload = i.to_string();
        producer.send(BaseRecord::<(), str>::to(topic).partition(0).payload(&payload)).expect("queued");
    }
    producer.flush(std::time::Duration::from_secs(10)).expect("produced");
    let mut config = Config::default();
    config.kafka.brokers = cluster.bootstrap_servers();
    (cluster, config)
}
