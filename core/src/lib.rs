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
//! - [`compare`]: candidate against baseline (Welch), lists needed, the
//!   sign test of interleaving: read-time statistics of merged sums.
//! - [`sessions`]: each session's running sums, so that sessions, not
//!   lists, are the unit of analysis; [`sequential`]: the anytime-valid
//!   comparison of arms and of interleaving built on them.
//! - [`pipeline`]: the stages above as one shard, built from
//!   [`pipeline::PipelineSettings`].
//! - [`debias`]: position-debiased click metrics under the position-based
//!   model: propensities from randomized lists, IPS-weighted click moments,
//!   both exactly mergeable.
//! - [`eval`]: `rankpulse eval`, trec_eval-compatible.
//! - [`interleave`]: team-draft interleaving of two rankers and the credit
//!   of one interleaved list's clicks to either.
//!
//! # Glossary
//!
//! Words the code uses in one sense each (the binary crate's too):
//!
//! - **list**: one search's ranked results with their judgments, keyed by
//!   (session, query); open while events may still come, then final.
//! - **session**: a user's run of searches (`session_id`), the unit of the
//!   session-clustered statistics ([`sessions`]).
//! - **shard**: one [`pipeline::Pipeline`]: the open lists and the
//!   accumulators of one partition number (the daemon keeps one per
//!   partition it holds, so a partition moves between instances whole).
//! - **source**: where events come from within a shard, a topic-partition
//!   (or a replayed file), numbered densely; the assembler orders what it
//!   applies per source.
//! - **lane**: the daemon's read queue of one assigned topic-partition,
//!   which can be held back when its topic runs ahead in event time.
//! - **series**: one combination of dimension label values (`ranker`,
//!   `market`, …): what a gauge's labels name.
//! - **bucket**: a fixed span of impression time (`windows.bucket`) of one
//!   series' mergeable sums ([`accumulate`]).
//! - **window**: the buckets from now − span to now, merged at read time
//!   ([`window`]).
//! - **slot** means three things, always qualified: an *expiry slot* of
//!   the open-list store (a span of event time whose lists are due
//!   together), a *state slot* (A or B) of a checkpoint in the state topic,
//!   an HTTP *connection slot* (of the server's bounded connections).

/// Serializes a unit enum by its stable name (strum's), not by its
/// variant index: checkpoints hold these as map keys, and a name survives a
/// variant added or reordered where an index would silently mean another.
macro_rules! serde_by_name {
    ($($ty:ty),+ $(,)?) => {$(
        impl serde::Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(<&'static str>::from(*self))
            }
        }
        impl<'de> serde::Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                <$ty as strum::VariantArray>::VARIANTS
                    .iter()
                    .copied()
                    .find(|v| <&'static str>::from(*v) == name)
                    .ok_or_else(|| serde::de::Error::custom(format!("unknown {} {name:?}", stringify!($ty))))
            }
        }
    )+};
}

pub mod accumulate;
pub mod assemble;
pub mod compare;
pub mod debias;
pub mod eval;
pub mod event;
pub mod interleave;
pub mod metrics;
pub mod pipeline;
pub mod sequential;
pub mod sessions;
pub mod window;
