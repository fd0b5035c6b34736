//! What is done to the state topic as a whole rather than to one
//! checkpoint: creating it or checking an existing one (compacted, one
//! partition) before the store opens it, and `rankpulse state`'s view of
//! it (every instance's checkpoint, and forgetting an instance that left).

use super::fencing::latest_claims;
use super::record::{MAX_CHUNK_BYTES, Slot, chunk_key, manifest_key};
use super::{KafkaStore, StateContext, TIMEOUT, client_config, poisoned, serve_events};
use crate::config::Config;
use crate::state::StateError;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::RDKafkaErrorCode;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};

/// Settings of a state topic rankpulse creates, besides compaction: its
/// active segment (never compacted) rolls at 64 MiB or after 10 minutes,
/// so what a restore reads beyond the live checkpoints stays bounded.
const CREATE_CONFIG: &[(&str, &str)] =
    &[("cleanup.policy", "compact"), ("segment.bytes", "67108864"), ("segment.ms", "600000")];

impl KafkaStore {
    /// The state topic of `config`, as `rankpulse state` reads it: under
    /// an instance name of its own (it must not take any instance's
    /// records for its own), never creating the topic.
    pub fn inspect(config: &Config) -> Result<KafkaStore, StateError> {
        // A topic that does not exist: said so, not as the reader's
        // "Unknown partition".
        let topic = &config.state.topic;
        let metadata = Probe::new(&client_config(config), topic)?.metadata()?;
        if let Some(e) = metadata.topics().iter().find(|t| t.name() == topic).and_then(|t| t.error()) {
            let cause = match RDKafkaErrorCode::from(e) {
                RDKafkaErrorCode::UnknownTopicOrPartition => {
                    "no such topic (`rankpulse run` with state.backend = \"kafka\" creates it)".to_string()
                }
                code => code.to_string(),
            };
            return Err(StateError::Kafka { topic: topic.clone(), cause });
        }
        let mut config = config.clone();
        config.state.instance = format!("rankpulse-state-cli-{}", std::process::id());
        KafkaStore::connect(&config, MAX_CHUNK_BYTES)
    }

    /// Every instance's checkpoint in the topic, as `rankpulse state list`
    /// shows them: what a hand-over reads, and which of them are still
    /// the latest owner's of a partition.
    pub fn instances(&self) -> Result<Vec<InstanceSummary>, StateError> {
        let (scan, _) = self.scan(None, None)?;
        let latest = latest_claims(&scan.claims);
        let mut out = Vec::new();
        for (instance, slots) in &scan.instances {
            let mut summary = InstanceSummary {
                instance: instance.clone(),
                records: slots.manifests.iter().flatten().count() as u64
                    + slots.chunks.iter().map(|c| c.len() as u64).sum::<u64>(),
                ..InstanceSummary::default()
            };
            // Only tombstones left: forgotten.
            if summary.records == 0 {
                continue;
            }
            match self.checkpoint_of(instance, slots, &scan.claims) {
                Ok(Some((c, epochs))) => {
                    summary.written_ms = Some(c.written_ms);
                    for s in &c.shards {
                        let epoch = epochs.get(&s.partition).copied().unwrap_or(0);
                        summary.shards.push(ShardSummary {
                            partition: s.partition,
                            owned: s.owned,
                            latest_owner: s.owned && latest.get(&s.partition).is_none_or(|c| *c <= epoch),
                        });
                    }
                }
                Ok(None) => {}
                Err(e) => summary.error = Some(e.to_string()),
            }
            out.push(summary);
        }
        Ok(out)
    }

    /// Tombstones every record of `instance` (an instance that left the
    /// group for good), so that compaction removes its checkpoint and
    /// hand-overs stop reading it. Refused for this store's own instance,
    /// for an instance with nothing in the topic, and, unless `force`, for
    /// one still the latest owner on record of a partition (its checkpoint
    /// is where that partition would resume). The records tombstoned.
    pub fn forget(&self, instance: &str, force: bool) -> Result<usize, StateError> {
        let refuse =
            |why: String| StateError::Forget { instance: instance.to_string(), topic: self.topic.clone(), why };
        if instance == self.instance {
            return Err(refuse("it is this process's own instance".into()));
        }
        let summary = self.instances()?.into_iter().find(|s| s.instance == instance);
        let Some(summary) = summary else {
            return Err(refuse("it has no records there".into()));
        };
        let latest: Vec<i32> = summary.shards.iter().filter(|s| s.latest_owner).map(|s| s.partition).collect();
        if !latest.is_empty() && !force {
            return Err(refuse(format!(
                "it is the latest owner on record of partitions {latest:?} (they would resume from the committed offsets instead of its checkpoint); --force forgets it anyway"
            )));
        }
        let (scan, _) = self.scan(Some(instance), None)?;
        let slots = scan.instances.get(instance).map(|s| [s.extent(Slot::A), s.extent(Slot::B)]).unwrap_or([0, 0]);
        let mut records = Vec::new();
        for slot in [Slot::A, Slot::B] {
            records.push((manifest_key(instance, slot), None));
            records.extend((0..slots[slot.index()]).map(|i| (chunk_key(instance, slot, i), None)));
        }
        let mut w = self.writer.lock().map_err(|_| poisoned(&self.topic))?;
        self.produce(&mut w, records).map(|r| r.len())
    }
}

/// One instance's checkpoint as `rankpulse state list` shows it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct InstanceSummary {
    pub instance: String,
    /// Its manifest and chunk records, as compaction will leave them.
    pub records: u64,
    /// When the checkpoint a restore would take was written (none: no
    /// complete checkpoint).
    pub written_ms: Option<i64>,
    pub shards: Vec<ShardSummary>,
    /// Why no checkpoint of it can be restored (corrupt, other settings).
    pub error: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardSummary {
    pub partition: i32,
    pub owned: bool,
    /// No claim of the partition is newer than this shard's: a hand-over
    /// would resume the partition from it.
    pub latest_owner: bool,
}

/// Creates the state topic if missing (1 partition, compacted, the
/// configured replication), then checks it whether created or found:
/// compacted and one partition, else a typed error naming the topic. The
/// topic's `max.message.bytes` when the broker reports it. A request that
/// fails says what the brokers reported last.
pub(super) fn ensure_topic(base: &ClientConfig, topic: &str, replication: i32) -> Result<Option<usize>, StateError> {
    // The admin client serves none of librdkafka's events (its errors stay
    // queued): a consumer with the same settings reaches the brokers
    // first, and the events it serves say why it cannot.
    let probe = Probe::new(base, topic)?;
    let kafka = |cause: String| probe.error(cause);
    probe.metadata()?;
    let admin: AdminClient<DefaultClientContext> = base.create().map_err(|e| kafka(crate::kafka::error_text(&e)))?;
    let opts = AdminOptions::new().request_timeout(Some(TIMEOUT)).operation_timeout(Some(TIMEOUT));
    let mut new = NewTopic::new(topic, 1, TopicReplication::Fixed(replication));
    for (key, value) in CREATE_CONFIG {
        new = new.set(key, value);
    }
    match block_on(admin.create_topics([&new], &opts)) {
        Ok(results) => match results.into_iter().next() {
            Some(Ok(_)) => tracing::info!("created state.topic {topic} (1 partition, compacted)"),
            Some(Err((_, RDKafkaErrorCode::TopicAlreadyExists))) => {}
            // Not allowed to create topics: it may exist, which is checked next.
            Some(Err((
                _,
                RDKafkaErrorCode::TopicAuthorizationFailed | RDKafkaErrorCode::ClusterAuthorizationFailed,
            ))) => {}
            Some(Err((_, code))) => return Err(kafka(format!("cannot create it: {code}"))),
            None => {}
        },
        Err(e) => return Err(kafka(format!("cannot create it: {}", crate::kafka::error_text(&e)))),
    }
    let metadata =
        admin.inner().fetch_metadata(Some(topic), TIMEOUT).map_err(|e| kafka(crate::kafka::error_text(&e)))?;
    let Some(t) = metadata.topics().iter().find(|t| t.name() == topic) else {
        return Err(kafka("the broker does not list it".into()));
    };
    if let Some(e) = t.error() {
        return Err(kafka(format!("it does not exist and could not be created: {}", RDKafkaErrorCode::from(e))));
    }
    if t.partitions().len() != 1 {
        return Err(StateError::Partitions { topic: topic.to_string(), partitions: t.partitions().len() });
    }
    let resource = ResourceSpecifier::Topic(topic);
    let described = block_on(admin.describe_configs([&resource], &opts))
        .map_err(|e| kafka(format!("cannot read its configuration: {}", crate::kafka::error_text(&e))))?;
    let configs = match described.into_iter().next() {
        Some(Ok(c)) => c,
        Some(Err(code)) => return Err(kafka(format!("cannot read its configuration: {code}"))),
        None => return Err(kafka("cannot read its configuration: no answer".into())),
    };
    let value = |name: &str| configs.get(name).and_then(|e| e.value.clone());
    let policy = value("cleanup.policy");
    match policy.as_deref() {
        Some(p) if p.split(',').any(|p| p.trim() == "compact") => {
            if p.contains("delete") {
                tracing::warn!(
                    "state.topic {topic} has cleanup.policy={p}: a checkpoint older than its retention.ms is \
                     deleted (an instance stopped that long restarts from the committed offsets)"
                );
            }
        }
        _ => {
            return Err(StateError::NotCompacted {
                topic: topic.to_string(),
                policy: policy.unwrap_or_else(|| "(not reported: the broker's default)".into()),
            });
        }
    }
    Ok(value("max.message.bytes").and_then(|v| v.parse().ok()))
}

/// A consumer that asks the brokers about `topic` before anything else
/// does: the events it serves say why they cannot answer.
struct Probe {
    consumer: BaseConsumer<StateContext>,
    context: StateContext,
    topic: String,
}

impl Probe {
    fn new(base: &ClientConfig, topic: &str) -> Result<Probe, StateError> {
        let context = StateContext::default();
        let consumer = base
            .create_with_context(context.clone())
            .map_err(|e| StateError::Kafka { topic: topic.to_string(), cause: crate::kafka::error_text(&e) })?;
        Ok(Probe { consumer, context, topic: topic.to_string() })
    }

    /// `cause`, with what the brokers reported last.
    fn error(&self, cause: String) -> StateError {
        serve_events(&self.consumer);
        StateError::Kafka { topic: self.topic.clone(), cause: self.context.0.explain(cause) }
    }

    /// The brokers' metadata of the topic (its error, if it has none).
    fn metadata(&self) -> Result<rdkafka::metadata::Metadata, StateError> {
        self.consumer
            .fetch_metadata(Some(&self.topic), TIMEOUT)
            .map_err(|e| self.error(format!("cannot reach the brokers: {}", crate::kafka::error_text(&e))))
    }
}

/// Waits for an admin request's answer on this thread: librdkafka's own
/// thread completes the future, which needs no runtime.
fn block_on<F: Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(v) = future.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{checkpoint, cluster, config, slots, unowned};
    use super::*;
    use std::collections::BTreeSet;

    /// An instance gone for good is forgotten: its records are tombstoned
    /// and hand-overs no longer read it. Refused for the store's own
    /// instance, an unknown one, and (without force) one that is still the
    /// latest owner on record of a partition.
    #[test]
    fn a_departed_instance_is_forgotten_unless_it_is_the_latest_owner() {
        let (_cluster, bootstrap) = cluster();
        let (ca, cb, cc) = (config(&bootstrap, "a"), config(&bootstrap, "b"), config(&bootstrap, "ops"));
        let a = KafkaStore::connect(&ca, 2048).unwrap();
        let b = KafkaStore::connect(&cb, 2048).unwrap();
        a.hand_over(&BTreeSet::from([0])).unwrap();
        a.write(&checkpoint(&ca, 300, 1)).unwrap();
        a.write(&unowned(checkpoint(&ca, 300, 2))).unwrap();
        b.hand_over(&BTreeSet::from([0])).unwrap();
        b.write(&checkpoint(&cb, 310, 3)).unwrap();
        let ops = KafkaStore::connect(&cc, 2048).unwrap();
        let listed = ops.instances().unwrap();
        let names: Vec<&str> = listed.iter().map(|s| s.instance.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(listed[0].records > 2, "a's chunks of both slots, and its manifests");
        assert_eq!(listed[0].written_ms, Some(2));
        assert_eq!(listed[1].shards, [ShardSummary { partition: 0, owned: true, latest_owner: true }]);
        assert!(!listed[0].shards[0].latest_owner);

        let refused = |e: StateError| match e {
            StateError::Forget { why, .. } => why,
            e => panic!("not refused: {e}"),
        };
        assert!(refused(ops.forget("ops", false).unwrap_err()).contains("own instance"));
        assert!(refused(ops.forget("nobody", false).unwrap_err()).contains("no records"));
        assert!(refused(ops.forget("b", false).unwrap_err()).contains("latest owner on record of partitions [0]"));
        assert!(ops.forget("a", false).unwrap() > 2);
        assert_eq!(ops.instances().unwrap().len(), 1, "a is gone");
        assert!(slots(&ops, "a").manifests.iter().all(Option::is_none));
        assert_eq!(ops.load_all().len(), 1);
        assert_eq!(b.hand_over(&BTreeSet::from([0])).unwrap()[&0].offsets["t"], 310);
        assert!(ops.forget("b", true).unwrap() > 0, "forced");
        assert!(ops.instances().unwrap().is_empty());
    }
}
