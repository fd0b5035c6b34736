//! The stream's core, without I/O: decode → assemble → finalize → metric
//! engine → accumulators, plus the operational counters `publish` exposes.
//!
//! `replay` drives one pipeline from a file; the Kafka consumer drives it
//! from messages. Nothing here touches Prometheus: values accumulate here
//! and are rendered at scrape time.

use crate::accumulate::Accumulators;
use crate::assemble::{Applied, Assembler, AssemblyLimits, Closed, DimensionBudget, Source};
use crate::config::Config;
use crate::event::{DecodeLimits, Event, RejectReason, decode};
use crate::metrics::list::{ListScore, ListScorer};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Messages a consumer decodes, and whose lists it prefetches, before it
/// applies any of them (see [`Pipeline::prepare`]): enough cache misses in
/// flight to keep the memory system busy, few enough that the lists asked
/// for first are still in cache when their event comes.
pub const PREFETCH_BATCH: usize = 32;

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
    /// Lists finalized before their gap (`session.max_open_lists`).
    pub evicted: u64,
    /// Judgments for final lists: amended lists and dropped judgments.
    pub late_amended: u64,
    pub late_dropped: u64,
    /// Impressions whose value of a dimension label became `__other__`, by label index.
    pub dimension_overflow: BTreeMap<usize, u64>,
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
        self.evicted += other.evicted;
        self.late_amended += other.late_amended;
        self.late_dropped += other.late_dropped;
        for (k, v) in &other.dimension_overflow {
            *self.dimension_overflow.entry(*k).or_default() += v;
        }
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
    /// Dimension values admitted so far, shared with the instance's other shards.
    budget: Arc<Mutex<DimensionBudget>>,
}

impl Pipeline {
    pub fn new(config: &Config) -> Self {
        let budget = DimensionBudget::new(config.dimensions.labels.len(), config.dimensions.max_values);
        Self::with_budget(config, Arc::new(Mutex::new(budget)))
    }

    /// A shard whose dimension values count against a budget shared with
    /// the instance's other shards.
    pub fn with_budget(config: &Config, budget: Arc<Mutex<DimensionBudget>>) -> Self {
        let cutoffs = config.sorted_cutoffs();
        let n = cutoffs.len();
        Pipeline {
            limits: DecodeLimits::from_config(config),
            assembler: Assembler::with_limits(
                AssemblyLimits::from_config(config),
                config.dimensions.labels.clone(),
                Some(budget.clone()),
            ),
            scorer: ListScorer::new(config.conventions(), cutoffs),
            score: ListScore::new(n),
            accumulators: Accumulators::new(n, config.windows.bucket.ms()),
            counters: OpsCounters::default(),
            budget,
        }
    }

    pub fn budget(&self) -> &Arc<Mutex<DimensionBudget>> {
        &self.budget
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
        // Even one event ahead, the list's miss overlaps the counting in apply.
        let decoded = self.prepare(payload);
        self.ingest_decoded(topic, &decoded, arrival_ms, source)
    }

    /// The first half of [`Self::ingest`]: decodes a message and asks the
    /// CPU for the memory its list lives in (see
    /// [`Assembler::prefetch`](crate::assemble::Assembler::prefetch)). A
    /// consumer prepares a batch of messages first, then applies them with
    /// [`Self::ingest_decoded`], so that their lists' cache misses overlap.
    pub fn prepare<'a>(&self, payload: &'a [u8]) -> Result<Event<'a>, RejectReason> {
        let decoded = decode(payload, &self.limits);
        if let Ok(event) = &decoded {
            self.assembler.prefetch(event);
        }
        decoded
    }

    /// The applying half of [`Self::ingest`]: a rejected message is
    /// counted and changes nothing else.
    pub fn ingest_decoded(
        &mut self,
        topic: &str,
        decoded: &Result<Event<'_>, RejectReason>,
        arrival_ms: i64,
        source: Option<Source>,
    ) -> Result<(), RejectReason> {
        match decoded {
            Ok(event) => {
                self.apply(topic, event, arrival_ms, source);
                Ok(())
            }
            Err(reason) => {
                *self.counters.rejected.entry(*reason).or_default() += 1;
                Err(*reason)
            }
        }
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
        let applied = assembler.ingest(event, topic, arrival_ms, source, &mut |closed| {
            fold(scorer, score, accumulators, counters, closed);
        });
        if applied == Applied::Duplicate {
            *self.counters.duplicates.entry(kind).or_default() += 1;
        }
    }

    /// Finalizes lists whose gap has elapsed (event time; and processing
    /// time when `now_ms` is given).
    pub fn finalize_expired(&mut self, now_ms: Option<i64>) {
        let Pipeline { assembler, scorer, score, accumulators, counters, .. } = self;
        assembler.finalize_expired(now_ms, &mut |closed| {
            fold(scorer, score, accumulators, counters, closed);
        });
    }

    /// Finalizes everything still open.
    pub fn finalize_all(&mut self) {
        let Pipeline { assembler, scorer, score, accumulators, counters, .. } = self;
        assembler.finalize_all(&mut |closed| {
            fold(scorer, score, accumulators, counters, closed);
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
    closed: Closed,
) {
    match closed {
        Closed::Final(list) => {
            scorer.score(list.shown, list.scores, list.judged, score);
            accumulators.fold(list.dims, list.impression_ms, score);
        }
        Closed::Evicted(list) => {
            counters.evicted += 1;
            scorer.score(list.shown, list.scores, list.judged, score);
            accumulators.fold(list.dims, list.impression_ms, score);
        }
        Closed::Amended { old, new } => {
            // The old values are recomputed from the same list: the engine is
            // deterministic, so the retraction is exact.
            counters.late_amended += 1;
            scorer.score(old.shown, old.scores, old.judged, score);
            accumulators.amend_window(old.dims, old.impression_ms, score, -1);
            scorer.score(new.shown, new.scores, new.judged, score);
            accumulators.amend_window(new.dims, new.impression_ms, score, 1);
        }
        Closed::Orphan => counters.orphans += 1,
        Closed::LateDropped => counters.late_dropped += 1,
        Closed::DimensionOverflow(label) => *counters.dimension_overflow.entry(label).or_default() += 1,
    }
}
