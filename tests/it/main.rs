//! The binary crate's integration tests, one executable: each module is a
//! behaviour proven through the real binary or the daemon's entry points.
//! One executable rather than one per file, because each links librdkafka
//! and the whole crate (about 70 MB apiece; see docs/performance.md, "The
//! test suite's build").
//!
//! Tiers (README, "Running the tests"; docs/testing.md): the default run
//! takes everything not `#[ignore]`d. An ignored test names its tier, and
//! `.ci/run` selects a tier by module path, e.g.
//! `cargo test --profile testing --test it -- --ignored broker_e2e::`.

mod common;

// Offline: replay, evaluation, the command line.
mod cli;
mod eval_extras;
mod mapped_replay;
mod replay;
mod trec_parity;
mod ubi_replay;

// Properties of the engine and the stream.
mod engine_properties;
mod stream_properties;

// Kafka in-process (librdkafka's mock cluster), the demo, the log.
mod demo;
mod kafka_mock;
mod logs;
mod mapped_kafka;
mod secured_http;
mod ubi_kafka;

// Tiers that need more than cargo: a standalone broker, TLS tools, Prometheus.
mod broker_e2e;
mod fault_injection;
mod hostile_input;
mod prometheus_e2e;
mod secure_broker;

// The tiers themselves, as README names them.
mod tiers;
