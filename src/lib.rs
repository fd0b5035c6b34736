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
//! - [`config`]: typed settings, environment overrides, validation.
//! - [`event`]: the event schema, decoding and reject reasons.
//! - [`assemble`]: open lists per (session_id, query_id) and their finalization;
//!   [`assemble::store`] keeps them compact (one run of words per list in a
//!   per-shard arena).
//! - [`metrics`]: the engine. Pure per-list functions, one file per metric
//!   family, [`metrics::Conventions`] and [`metrics::list::ListScorer`].
//! - [`accumulate`]: [`accumulate::Moments`], exactly mergeable and
//!   retractable sums, kept per dimension values × time bucket.
//! - [`window`]: rolling windows out of the buckets.
//! - [`pipeline`]: the stages above without I/O, one shard.
//! - [`kafka`], [`daemon`], [`http`]: `rankpulse run`; [`align`] holds back a
//!   topic of a partition that runs ahead of the others in event time.
//! - [`state`]: checkpoints of the daemon's state with the offsets they
//!   cover (exact restarts and partition hand-overs).
//! - [`publish`]: the only place Prometheus metrics are defined.
//! - [`replay`]: `rankpulse replay`.
//! - [`eval`]: `rankpulse eval`, trec_eval-compatible.
//!
//! Benchmarks live in the `rankpulse-bench` crate, test support in
//! `rankpulse-testkit`: neither is in the product.
//!
//! `src/main.rs` is only the command line.

pub mod accumulate;
pub mod align;
pub mod assemble;
pub mod config;
pub mod daemon;
pub mod demo;
pub mod eval;
pub mod event;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod pipeline;
pub mod publish;
pub mod replay;
pub mod state;
pub mod status;
pub mod window;
