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
//! One data flow, one stage per module:
//!
//! ```text
//! online:  Kafka message → decode → assemble → finalize → metrics → accumulate → publish
//! offline: TREC qrels + run ─────────────────────────────→ metrics → eval report
//! ```
//!
//! - [`metrics`]: the engine. Pure per-list functions, one file per metric
//!   family, and [`metrics::Conventions`], every convention as a typed setting.
//! - [`accumulate`]: [`accumulate::Moments`], exactly mergeable and retractable
//!   sums of per-list values (fixed point, so shards merge bit-identically).
//! - [`eval`]: `rankpulse eval`, trec_eval-compatible reading, scoring and
//!   reporting.
//!
//! `src/main.rs` is only the command line.

pub mod accumulate;
pub mod assemble;
pub mod config;
pub mod daemon;
pub mod eval;
pub mod event;
pub mod http;
pub mod kafka;
pub mod metrics;
pub mod pipeline;
pub mod publish;
pub mod replay;
pub mod window;
