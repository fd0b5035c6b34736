//! Against librdkafka's in-process mock cluster, which has no admin
//! API: the topic is made by the cluster, the store opened past
//! `admin::ensure_topic` (checked against a real broker by
//! `tests/it/broker_e2e.rs`).
//!
//! What the store's tests share: a cluster with the state topic, a
//! configuration of the Kafka backend, and checkpoints to write.

use super::KafkaStore;
use super::scan::Slots;
use crate::config::{Config, StateBackend};
use crate::state::{Checkpoint, fingerprint, instance_name};
use rankpulse_core::pipeline::{Clock, Pipeline};
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use std::collections::BTreeMap;

pub(super) const TOPIC: &str = "rankpulse-state-test";

pub(super) fn cluster() -> (MockCluster<'static, DefaultProducerContext>, String) {
    let cluster = MockCluster::new(1).expect("mock cluster");
    cluster.create_topic(TOPIC, 1, 1).unwrap();
    let bootstrap = cluster.bootstrap_servers();
    (cluster, bootstrap)
}

pub(super) fn config(bootstrap: &str, instance: &str) -> Config {
    let mut c = Config::default();
    c.kafka.brokers = bootstrap.to_string();
    c.state.backend = StateBackend::Kafka;
    c.state.topic = TOPIC.to_string();
    c.state.instance = instance.to_string();
    c
}

/// A checkpoint of one shard holding `lists` open lists of 10 results
/// each, its offset `lists` and its time `written_ms`.
pub(super) fn checkpoint(config: &Config, lists: usize, written_ms: i64) -> Checkpoint {
    let mut p = Pipeline::new(&config.pipeline_settings());
    let results: Vec<String> =
        (1..=10).map(|r| format!(r#"{{"doc_id":"doc-{r}","position":{r},"score":{}}}"#, 20 - r)).collect();
    let results = results.join(",");
    for i in 0..lists {
        let e = format!(
            r#"{{"type":"impression","event_id":"i{i}","session_id":"session-{i}","timestamp":{},"results":[{results}],"dimensions":{{"ranker":"r{}"}}}}"#,
            1_700_000_000_000i64 + i as i64,
            i % 3
        );
        let _ = p.ingest("t", e.as_bytes(), Clock::replay(), None);
    }
    let budget = std::mem::take(&mut *p.budget().lock().unwrap());
    Checkpoint {
        fingerprint: fingerprint(config),
        instance: instance_name(config),
        written_ms,
        budget,
        shards: vec![crate::state::ShardCheckpoint {
            partition: 0,
            owned: true,
            offsets: BTreeMap::from([("t".to_string(), lists as i64)]),
            assembler: p.assembler().state(),
            sessions: p.sessions().clone(),
            accumulators: p.accumulators().clone(),
            counters: p.counters().clone(),
        }],
    }
}

/// The instance's records as a fresh reader finds them.
pub(super) fn slots(store: &KafkaStore, instance: &str) -> Slots {
    store.scan(Some(instance), None).unwrap().0.instances.remove(instance).unwrap_or_default()
}

pub(super) fn unowned(mut c: Checkpoint) -> Checkpoint {
    c.shards[0].owned = false;
    c
}
