//! rankpulse: live ranking-quality metrics for search.
//!
//! A search engine shows ranked result lists (impressions); users and raters
//! say how relevant the results were (judgments). rankpulse assembles every
//! list with its judgments, scores it with nDCG, MRR, ERR, GAUC, P@k, R@k and
//! AP, and keeps mergeable, windowed means. The same engine evaluates TREC
//! files offline (`rankpulse eval`), so online and offline numbers agree.
//!
//! # Layout
//!
//! One data flow, one stage per module, each changing one representation
//! into the next:
//!
//! ```text
//! online:  Kafka message → event::decode → assemble (open lists) → finalize
//!          → metrics (per-list values) → accumulate (dimensions × bucket)
//!          → window → publish (exposition) → http
//! offline: TREC qrels + run → eval → metrics → trec_eval-format report
//! replay:  JSON lines → the online pipeline without Kafka
//! ```
//!
//! The stages without I/O (`event`, `assemble`, `metrics`, `accumulate`,
//! `window`, `pipeline`, `eval`) are the `rankpulse-core` crate, imported
//! by that name. This crate is what does I/O around them:
//!
//! - [`config`]: typed settings, environment overrides, validation; it
//!   makes the core's [`rankpulse_core::pipeline::PipelineSettings`].
//! - [`kafka`], [`daemon`], [`http`]: `rankpulse run`; [`align`] holds back a
//!   topic of a partition that runs ahead of the others in event time.
//! - [`state`]: checkpoints of the daemon's state with the offsets they
//!   cover (exact restarts and partition hand-overs).
//! - [`publish`]: the only place Prometheus metrics are defined;
//!   [`status`]: the status page.
//! - [`logging`]: text or JSON log lines through `tracing`.
//! - [`replay`]: `rankpulse replay`; [`demo`]: `rankpulse demo` and `loadgen`.
//!
//! Benchmarks live in the `rankpulse-bench` crate, test support in
//! `rankpulse-testkit`: neither is in the product.
//!
//! `src/main.rs` is only the command line.

pub mod align;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod health;
pub mod http;
pub mod kafka;
pub mod logging;
pub mod publish;
pub mod replay;
pub mod series;
pub mod state;
pub mod status;
