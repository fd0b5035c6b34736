//! The stream's core, without I/O: decode → assemble → finalize → metric
//! engine → accumulators, plus the operational counters `publish` exposes.
//!
//! `replay` drives one pipeline from a file; the Kafka consumer drives it
//! from messages. Nothing here touches Prometheus: values accumulate here
//! and are rendered at scrape time.

use crate::accumulate::Accumulators;
use crate::assemble::{Applied, Assembler, FinalList, Outcome, Source};
use crate::config::Config;
use crate::event::{DecodeLimits, Event, RejectReason, decode};
use crate::metrics::list::{ListScore, ListScorer};
use std::collections::BTreeMap;

/// Counters of what went through the pipeline (the operation metrics).
/// Shards' counters add up with [`OpsCounters::merge`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpsCounters {
    /// Accepted events by (topic, type).
    pub events: BTreeMap<(String, &'static str), u64>,
    /// Rejected messages by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Events whose event id was already applied to their list, by type.
    pub duplicates: BTreeMap<&'static str, u64>,
    /// Lists that ended with judgments but no impression.
    pub orphans: u64,
}

impl OpsCounters {
    pub fn merge(&mut self, other: &OpsCounters) {
        for (k, v) in &other.events {
            *self.events.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.rejected {
            *self.rejected.entry(*k).or_default() += v;
        }
        for (k, v) in &other.duplicates {
            *self.duplicates.entry(*k).or_default() += v;
        }
        self.orphans += other.orphans;
    }
}

/// One shard of the stream.
#[derive(Debug)]
pub struct Pipeline {
    limits: DecodeLimits,
    pub assembler: Assembler,
    scorer: ListScorer,
    score: ListScore,
    pub accumulators: Accumulators,
    pub counters: OpsCounters,
}

impl Pipeline {
    pub fn new(config: &Config) -> Self {
        let cutoffs = config.sorted_cutoffs();
        let n = cutoffs.len();
        Pipeline {
            limits: DecodeLimits::from_config(config),
            assembler: Assembler::new(config.session.gap.ms(), config.dimensions.labels.clone()),
            scorer: ListScorer::new(config.conventions(), cutoffs),
            score: ListScore::new(n),
            accumulators: Accumulators::new(n, config.windows.bucket.ms()),
            counters: OpsCounters::default(),
        }
    }

    /// Decodes and applies one message from `topic`. A rejected message is
    /// counted and changes nothing else.
    pub fn ingest(
        &mut self,
        topic: &str,
        payload: &[u8],
        arrival_ms: i64,
        source: Option<Source>,
    ) -> Result<(), RejectReason> {
        let event = match decode(payload, &self.limits) {
            Ok(e) => e,
            Err(reason) => {
                *self.counters.rejected.entry(reason).or_default() += 1;
                return Err(reason);
            }
        };
        self.apply(topic, &event, arrival_ms, source);
        Ok(())
    }

    /// Applies an already decoded event.
    pub fn apply(&mut self, topic: &str, event: &Event, arrival_ms: i64, source: Option<Source>) {
        let kind = event.kind();
        // Looked up by borrowed parts: no String per event.
        match self.counters.events.iter_mut().find(|((t, k), _)| *k == kind && t == topic) {
            Some((_, n)) => *n += 1,
            None => {
                self.counters.events.insert((topic.to_string(), kind), 1);
            }
        }
        let Pipeline { assembler, scorer, score, accumulators, counters, .. } = self;
        let applied = assembler.ingest(event, arrival_ms, source, &mut |outcome, list| {
            fold(scorer, score, accumulators, counters, outcome, list);
        });
        if applied == Applied::Duplicate {
            *self.counters.duplicates.entry(kind).or_default() += 1;
        }
    }

    /// Finalizes lists whose gap has elapsed (event time; and processing
    /// time when `now_ms` is given).
    pub fn finalize_expired(&mut self, now_ms: Option<i64>) {
        let Pipeline { assembler, scorer, score, accumulators, counters, .. } = self;
        assembler.finalize_expired(now_ms, &mut |outcome, list| {
            fold(scorer, score, accumulators, counters, outcome, list);
        });
    }

    /// Finalizes everything still open.
    pub fn finalize_all(&mut self) {
        let Pipeline { assembler, scorer, score, accumulators, counters, .. } = self;
        assembler.finalize_all(&mut |outcome, list| {
            fold(scorer, score, accumulators, counters, outcome, list);
        });
    }

    pub fn open_lists(&self) -> usize {
        self.assembler.open_lists()
    }
}

fn fold(
    scorer: &mut ListScorer,
    score: &mut ListScore,
    accumulators: &mut Accumulators,
    counters: &mut OpsCounters,
    outcome: Outcome,
    list: Option<FinalList>,
) {
    match (outcome, list) {
        (Outcome::Final, Some(list)) => {
            scorer.score(&list.shown, list.scores.as_deref(), &list.judged, score);
            accumulators.fold(&list.dims, list.impression_ms, score);
        }
        _ => counters.orphans += 1,
    }
}
