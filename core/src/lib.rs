//! rankpulse's core: the stages of the data flow that do no I/O, with no
//! async runtime and no Kafka client, so that the daemon, `replay`, the
//! evaluator, the fuzz targets and the benchmarks all run the same code.
//!
//! ```text
//! bytes → event::decode → assemble (open lists) → finalize
//!       → metrics (per-list values) → accumulate (dimensions × bucket) → window
//! TREC qrels + run → eval → metrics → trec_eval-format report
//! ```
//!
//! - [`event`]: the event schema, decoding and reject reasons.
//! - [`assemble`]: open lists per (session_id, query_id) and their
//!   finalization; [`assemble::store`] keeps them compact.
//! - [`metrics`]: the engine: pure per-list functions, one file per metric
//!   family, [`metrics::Conventions`] and [`metrics::list::ListScorer`].
//! - [`accumulate`]: exactly mergeable and retractable sums per dimension
//!   values × time bucket; [`window`]: rolling windows out of them.
//! - [`pipeline`]: the stages above as one shard, built from
//!   [`pipeline::PipelineSettings`].
//! - [`eval`]: `rankpulse eval`, trec_eval-compatible.

pub mod accumulate;
pub mod assemble;
pub mod eval;
pub mod event;
pub mod metrics;
pub mod pipeline;
pub mod window;
