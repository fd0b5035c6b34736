//! The stream's core, without I/O: decode → assemble → finalize → metric
//! engine → accumulators, plus the operational counters `publish` exposes.
//!
//! `replay` drives one pipeline from a file; the Kafka consumer drives it
//! from messages. Nothing here touches Prometheus: values accumulate here
//! and are rendered at scrape time.
//!
//! Past 600 lines only with its tests, which drive hostile clocks and
//! accumulations taken and merged through the whole stage chain.

use crate::accumulate::{Accumulators, BucketRange};
use crate::assemble::{Applied, Assembler, AssemblerState, AssemblyLimits, DimensionBudget, FinalList, Notice, Source};
use crate::event::{DecodeLimits, Event, EventKind, Format, IgnoreReason, RejectReason, decode_as};
use crate::metrics::Conventions;
use crate::metrics::list::{ListScore, ListScorer};
use crate::sessions::SessionLedger;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Messages a consumer decodes, and whose lists it prefetches, before it
/// applies any of them (see [`Pipeline::prepare`]): enough cache misses in
/// flight to keep the memory system busy, few enough that the lists asked
/// for first are still in cache when their event comes.
pub const PREFETCH_BATCH: usize = 32;

/// The time a message is judged against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Clock {
    /// The daemon: `now_ms` is the message's arrival (wall clock), which
    /// closes idle lists and ends the windows; `message_ms` its Kafka
    /// timestamp. An event may claim a time at most `input.max_future_skew`
    /// past the earlier of the two: the Kafka timestamp catches an event
    /// stamped ahead of when it was produced even in a backlog read hours
    /// later, and the wall clock bounds a producer whose own clock (hence
    /// its CreateTime) is broken.
    Live { now_ms: i64, message_ms: Option<i64> },
    /// A replay (or a benchmark): no processing time, windows end at the
    /// newest accepted event, and event times are checked against the wall
    /// clock when the replay started. Not the newest event so far plus the
    /// skew: a file with a quiet spell longer than the skew would reject
    /// everything after it.
    Replay { started_ms: i64 },
}

impl Clock {
    /// A replay starting now.
    pub fn replay() -> Clock {
        Clock::Replay { started_ms: wall_ms() }
    }

    /// Processing time for the assembler (0: not used).
    fn arrival_ms(self) -> i64 {
        match self {
            Clock::Live { now_ms, .. } => now_ms,
            Clock::Replay { .. } => 0,
        }
    }

    /// The latest event time a message can truthfully carry, before the skew.
    fn reference_ms(self) -> i64 {
        match self {
            Clock::Live { now_ms, message_ms } => message_ms.map_or(now_ms, |m| m.min(now_ms)),
            Clock::Replay { started_ms } => started_ms,
        }
    }
}

/// `input.min_timestamp`'s default, 2000-01-01T00:00:00Z in epoch ms: any
/// epoch in seconds up to the year 2286, read as milliseconds, is earlier.
pub const MIN_TIMESTAMP_MS: i64 = 946_684_800_000;

/// Everything a pipeline is built from: the part of the configuration the
/// stages without I/O read. The daemon's configuration makes one
/// (`Config::pipeline_settings`); the defaults are the configuration's.
#[derive(Debug, Clone, PartialEq)]
pub struct PipelineSettings {
    pub decode: DecodeLimits,
    pub assembly: AssemblyLimits,
    /// `dimensions.labels`, in their configured order.
    pub dimension_labels: Vec<String>,
    /// `dimensions.max_values`, `dimensions.max_combinations` and
    /// `dimensions.max_value_bytes`.
    pub max_dimension_values: usize,
    pub max_combinations: usize,
    pub max_dimension_value_bytes: usize,
    pub conventions: Conventions,
    /// `metrics.cutoffs`, ascending.
    pub cutoffs: Vec<usize>,
    /// `windows.bucket`, ms.
    pub bucket_ms: i64,
    /// The longest of `windows.spans`, ms.
    pub longest_window_ms: i64,
    /// `input.max_future_skew`, ms.
    pub max_future_skew_ms: i64,
    /// `input.min_timestamp`, epoch ms: earlier events are rejected.
    pub min_timestamp_ms: i64,
    /// `[kafka.formats]`: the topics whose format is not rankpulse's own.
    pub formats: Vec<(String, Format)>,
    /// `debias.max_rank`: ranks of the position-debiased click metrics (0: off).
    pub click_ranks: usize,
    /// `compare.primary`: the index in [`ListScore::values`] of the metric
    /// whose session sums are kept (`None`: none).
    pub primary: Option<usize>,
    /// `compare.session_timeout`, ms, and this shard's share of
    /// `compare.max_sessions` (see [`SessionLedger`]).
    pub session_timeout_ms: i64,
    pub max_sessions: usize,
}

impl Default for PipelineSettings {
    fn default() -> Self {
        PipelineSettings {
            decode: DecodeLimits::default(),
            assembly: AssemblyLimits::default(),
            dimension_labels: vec!["ranker".into(), "market".into()],
            max_dimension_values: 100,
            max_combinations: 500,
            max_dimension_value_bytes: 256,
            conventions: Conventions::default(),
            cutoffs: vec![1, 3, 5, 10],
            bucket_ms: 10_000,
            longest_window_ms: 3_600_000,
            max_future_skew_ms: 300_000,
            min_timestamp_ms: MIN_TIMESTAMP_MS,
            formats: Vec::new(),
            click_ranks: 0,
            // nDCG@10: Ndcg is the first family, 10 the fourth cutoff.
            primary: Some(3),
            session_timeout_ms: 1_800_000,
            max_sessions: 1_000_000,
        }
    }
}

impl PipelineSettings {
    /// The buckets a shard keeps: back to the longest window and one bucket
    /// (what `prune` always kept), ahead by the future skew.
    pub fn bucket_range(&self) -> BucketRange {
        BucketRange::new(self.longest_window_ms + self.bucket_ms, self.max_future_skew_ms)
    }

    /// An empty budget of dimension values for an instance's shards.
    pub fn dimension_budget(&self) -> DimensionBudget {
        DimensionBudget::new(self.dimension_labels.len(), self.max_dimension_values, self.max_combinations)
            .with_max_value_bytes(self.max_dimension_value_bytes)
    }
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Counters of what went through the pipeline (the operation metrics).
/// Shards' counters add up with [`OpsCounters::merge`]; checkpoints hold
/// them as they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpsCounters {
    /// Accepted events by (topic, type).
    pub events: BTreeMap<(String, EventKind), u64>,
    /// Rejected messages by reason.
    pub rejected: BTreeMap<RejectReason, u64>,
    /// Valid messages that say nothing scored (UBI actions not mapped,
    /// `_bulk` action lines), by reason.
    pub ignored: BTreeMap<IgnoreReason, u64>,
    /// Events whose event id was already applied to their list, by type.
    pub duplicates: BTreeMap<EventKind, u64>,
    /// Lists that ended with judgments but no impression.
    pub orphans: u64,
    /// Lists finalized before their gap (`session.max_open_lists`).
    pub evicted: u64,
    /// Judgments for final lists: amended lists and dropped judgments.
    pub late_amended: u64,
    pub late_dropped: u64,
    /// Impressions whose value of a dimension label became `__other__`, by label index.
    pub dimension_overflow: BTreeMap<usize, u64>,
    /// Impressions of a new combination past `dimensions.max_combinations`.
    pub combination_overflow: u64,
    /// Results dropped because their list showed another document at
    /// their position ([`Notice::PositionTaken`]). Since the process
    /// started: not in checkpoints, whose format it would change.
    #[serde(skip)]
    pub positions_taken: u64,
    /// Impressions whose dimension values differed from an earlier one of
    /// their list ([`Notice::DimensionConflict`]). Since the process
    /// started, as `positions_taken`.
    #[serde(skip)]
    pub dimension_conflicts: u64,
    /// Final lists forgotten before `late.horizon` ([`Notice::Forgotten`]).
    /// Since the process started, as `positions_taken`.
    #[serde(skip)]
    pub forgotten: u64,
    /// Sessions forgotten before `compare.session_timeout` to stay within
    /// `compare.max_sessions` ([`SessionLedger`]).
    pub sessions_evicted: u64,
}

impl OpsCounters {
    pub fn merge(&mut self, other: &OpsCounters) {
        for (k, v) in &other.events {
            *self.events.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &other.rejected {
            *self.rejected.entry(*k).or_default() += v;
        }
        for (k, v) in &other.ignored {
            *self.ignored.entry(*k).or_default() += v;
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
        self.combination_overflow += other.combination_overflow;
        self.positions_taken += other.positions_taken;
        self.dimension_conflicts += other.dimension_conflicts;
        self.forgotten += other.forgotten;
        self.sessions_evicted += other.sessions_evicted;
    }
}

/// One shard of the stream.
#[derive(Debug)]
pub struct Pipeline {
    limits: DecodeLimits,
    /// `[kafka.formats]`; empty (every topic rankpulse's own) by default,
    /// so that the native path looks nothing up.
    formats: Vec<(String, Format)>,
    assembler: Assembler,
    scorer: ListScorer,
    score: ListScore,
    accumulators: Accumulators,
    counters: OpsCounters,
    /// `compare.primary`'s index in the list values, and the running sums
    /// of the sessions its values join.
    primary: Option<usize>,
    sessions: SessionLedger,
    /// Dimension values admitted so far, shared with the instance's other shards.
    budget: Arc<Mutex<DimensionBudget>>,
    /// `input.max_future_skew`, ms.
    max_future_skew_ms: i64,
    /// `input.min_timestamp`, epoch ms.
    min_timestamp_ms: i64,
    /// Newest event time accepted: where a replay's windows end.
    newest_event_ms: i64,
    /// The last event applied was discarded (a duplicate, or refused by
    /// its list): a replay does not count its time as the input's.
    last_discarded: bool,
}

impl Pipeline {
    pub fn new(settings: &PipelineSettings) -> Self {
        Self::with_budget(settings, Arc::new(Mutex::new(settings.dimension_budget())))
    }

    /// A shard whose dimension values count against a budget shared with
    /// the instance's other shards.
    pub fn with_budget(settings: &PipelineSettings, budget: Arc<Mutex<DimensionBudget>>) -> Self {
        let n = settings.cutoffs.len();
        let mut limits = settings.decode.clone();
        limits.ubi.resolve(&settings.dimension_labels);
        Pipeline {
            limits,
            formats: settings.formats.clone(),
            assembler: Assembler::with_limits(
                settings.assembly,
                settings.dimension_labels.clone(),
                Some(budget.clone()),
            ),
            scorer: ListScorer::new(settings.conventions, settings.cutoffs.clone())
                .with_click_ranks(settings.click_ranks),
            score: ListScore::new(n),
            accumulators: {
                let mut a = Accumulators::new(n, settings.bucket_ms);
                a.range = settings.bucket_range();
                a
            },
            counters: OpsCounters::default(),
            primary: settings.primary,
            sessions: SessionLedger::new(settings.session_timeout_ms, settings.max_sessions),
            budget,
            max_future_skew_ms: settings.max_future_skew_ms,
            min_timestamp_ms: settings.min_timestamp_ms,
            newest_event_ms: i64::MIN,
            last_discarded: false,
        }
    }

    pub fn budget(&self) -> &Arc<Mutex<DimensionBudget>> {
        &self.budget
    }

    /// The open and final lists, read-only: what a checkpoint or a commit
    /// point reads of them.
    pub fn assembler(&self) -> &Assembler {
        &self.assembler
    }

    /// What was accumulated (since the last [`Self::take_accumulated`]).
    pub fn accumulators(&self) -> &Accumulators {
        &self.accumulators
    }

    pub fn counters(&self) -> &OpsCounters {
        &self.counters
    }

    /// The sessions whose lists may still come (a checkpoint holds them).
    pub fn sessions(&self) -> &SessionLedger {
        &self.sessions
    }

    /// This shard's share of `compare.max_sessions`.
    pub fn set_max_sessions(&mut self, max: usize) {
        self.sessions.set_max_sessions(max);
    }

    /// Puts back the lists of a checkpoint; with `sums`, its series and
    /// counters too. The cutoffs, bucket width and range stay this
    /// pipeline's: they come from its settings, never from a file (a
    /// corrupt one could claim any bucket width; the fuzz target
    /// `checkpoint` found one asking for 40 GB).
    pub fn restore(
        &mut self,
        lists: AssemblerState,
        sessions: SessionLedger,
        sums: Option<(Accumulators, OpsCounters)>,
    ) {
        if let Some((accumulators, counters)) = sums {
            self.accumulators.series = accumulators.series;
            self.counters = counters;
        }
        self.assembler.restore(lists);
        // Session keys name the assembler's dimension ids, restored above
        // in the same order.
        self.sessions.restore(sessions);
    }

    /// Takes `from`'s counters that checkpoints do not hold (counted since
    /// the process started): a shard rebuilt from a checkpoint keeps them,
    /// or they would go back.
    pub fn keep_process_counters(&mut self, from: &Pipeline) {
        self.counters.positions_taken = from.counters.positions_taken;
        self.counters.dimension_conflicts = from.counters.dimension_conflicts;
        self.counters.forgotten = from.counters.forgotten;
    }

    /// Adds another pipeline's sums (accumulators and counters) to this
    /// one's: a retired partition's shard keeps what it counted.
    pub fn merge_sums(&mut self, other: &Pipeline) {
        self.accumulators.merge(&other.accumulators);
        self.counters.merge(&other.counters);
    }

    /// This shard's part of the instance's `session.max_open_lists`.
    pub fn set_max_open_lists(&mut self, max: usize) {
        self.assembler.limits.max_open_lists = max;
    }

    /// See [`Assembler::expect_lanes`].
    pub fn expect_lanes<'a>(&mut self, lanes: impl IntoIterator<Item = &'a str>) {
        self.assembler.expect_lanes(lanes);
    }

    /// See [`Assembler::resume_clock`].
    pub fn resume_clock(&mut self, now_ms: i64) {
        self.assembler.resume_clock(now_ms);
    }

    /// See [`Assembler::scan_min_open_offsets`].
    pub fn scan_min_open_offsets(&mut self, lists: usize) -> Option<Vec<Source>> {
        self.assembler.scan_min_open_offsets(lists)
    }

    /// Drops buckets older than the windows, a `part` of `parts` of the
    /// series at a time (see [`Accumulators::prune_part`]).
    pub fn prune_part(&mut self, now_ms: i64, part: usize, parts: usize) {
        self.accumulators.prune_part(now_ms, part, parts);
    }

    /// Drops the buckets no window reaches from the newest event time, the
    /// `now` of a pipeline that keeps event time only (a replay, whose
    /// input can span days: kept, its buckets would grow with the span).
    /// Their lists stay in the since-start totals.
    /// Whether the last event applied was discarded: a duplicate, or one
    /// its list refused. Its time moved no clock.
    pub fn last_discarded(&self) -> bool {
        self.last_discarded
    }

    pub fn prune_to_newest_event(&mut self) {
        if self.newest_event_ms > i64::MIN {
            self.accumulators.prune(self.newest_event_ms);
        }
    }

    /// Decodes and applies one message from `topic`. A rejected message is
    /// counted and changes nothing else.
    pub fn ingest(
        &mut self,
        topic: &str,
        payload: &[u8],
        clock: Clock,
        source: Option<Source>,
    ) -> Result<(), RejectReason> {
        // Even one event ahead, the list's miss overlaps the counting in apply.
        let decoded = self.prepare(topic, payload);
        self.ingest_decoded(topic, &decoded, clock, source)
    }

    /// The format of `topic` (`[kafka.formats]`; rankpulse's own if not listed).
    pub fn format_of(&self, topic: &str) -> Format {
        match self.formats.iter().find(|(t, _)| t == topic) {
            Some((_, f)) => *f,
            None => Format::Rankpulse,
        }
    }

    /// Counts a message skipped as valid but not scored (a `_bulk` action
    /// line in a replay).
    pub fn count_ignored(&mut self, reason: IgnoreReason) {
        *self.counters.ignored.entry(reason).or_default() += 1;
    }

    /// The first half of [`Self::ingest`]: decodes a message and asks the
    /// CPU for the memory its list lives in (see
    /// [`Assembler::prefetch`](crate::assemble::Assembler::prefetch)). A
    /// consumer prepares a batch of messages first, then applies them with
    /// [`Self::ingest_decoded`], so that their lists' cache misses overlap.
    pub fn prepare<'a>(&self, topic: &str, payload: &'a [u8]) -> Result<Event<'a>, RejectReason> {
        self.prepare_as(self.format_of(topic), payload)
    }

    /// [`Self::prepare`] of a message whose format is known.
    pub fn prepare_as<'a>(&self, format: Format, payload: &'a [u8]) -> Result<Event<'a>, RejectReason> {
        let decoded = decode_as(format, payload, &self.limits);
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
        clock: Clock,
        source: Option<Source>,
    ) -> Result<(), RejectReason> {
        let result = match decoded {
            Ok(event) => self.apply(topic, event, clock, source),
            Err(reason) => Err(*reason),
        };
        if let Err(reason) = result {
            *self.counters.rejected.entry(reason).or_default() += 1;
        }
        result
    }

    /// Applies an already decoded event; a rejected one (its time or its
    /// list past a bound) changes nothing and is not counted here.
    /// Whether an event stamped `ts` passes the event-time guards: not
    /// past `input.max_future_skew` after the clock's reference, not before
    /// `input.min_timestamp`. A replay merging files asks before it lets an
    /// event's time decide when the event is applied.
    pub fn time_verdict(&self, ts: i64, clock: Clock) -> Result<(), RejectReason> {
        if ts > clock.reference_ms().saturating_add(self.max_future_skew_ms) {
            return Err(RejectReason::FutureTimestamp);
        }
        // Far in the past is valid (a backfill), but not before any search
        // log: an epoch in seconds would stretch every session gap and
        // window a thousandfold, silently.
        if ts < self.min_timestamp_ms {
            return Err(RejectReason::PastTimestamp);
        }
        Ok(())
    }

    fn apply(&mut self, topic: &str, event: &Event, clock: Clock, source: Option<Source>) -> Result<(), RejectReason> {
        if let Event::Ignored(reason) = event {
            self.count_ignored(*reason);
            return Ok(());
        }
        self.last_discarded = false;
        let ts = event.timestamp_ms();
        // Before anything sees the event: a broken clock must move no
        // watermark, open no list and create no bucket.
        self.time_verdict(ts, clock)?;
        let previous_newest = self.newest_event_ms;
        self.newest_event_ms = self.newest_event_ms.max(ts);
        let window_now = match clock {
            Clock::Live { now_ms, .. } => now_ms,
            Clock::Replay { .. } => self.newest_event_ms,
        };
        self.accumulators.set_now(window_now);
        let kind = event.kind();
        let Pipeline { assembler, scorer, score, accumulators, counters, primary, sessions, .. } = self;
        let mut sessions = Sessions { primary: *primary, ledger: sessions };
        let applied = assembler.ingest(event, topic, clock.arrival_ms(), source, &mut |closed| {
            fold(scorer, score, accumulators, counters, &mut sessions, closed);
        });
        self.last_discarded = matches!(applied, Applied::Duplicate | Applied::TooLarge);
        if self.last_discarded && previous_newest > i64::MIN {
            // A discarded event (a re-delivery stamped anew, one its list
            // refuses) moves no clock: the assembler's watermark stayed, so
            // nothing was finalized on it, and the windows' "now" of a
            // replay goes back to where it was.
            self.newest_event_ms = previous_newest;
            if let Clock::Replay { .. } = clock {
                self.accumulators.set_now(previous_newest);
            }
        }
        match applied {
            Applied::Duplicate => *self.counters.duplicates.entry(kind).or_default() += 1,
            Applied::TooLarge => return Err(RejectReason::ListTooLarge),
            Applied::Added | Applied::Late => {}
        }
        // Looked up by borrowed parts: no String per event.
        match self.counters.events.iter_mut().find(|((t, k), _)| *k == kind && t == topic) {
            Some((_, n)) => *n += 1,
            None => {
                self.counters.events.insert((topic.to_string(), kind), 1);
            }
        }
        Ok(())
    }

    /// Finalizes lists whose gap has elapsed (event time; and processing
    /// time when `now_ms` is given).
    pub fn finalize_expired(&mut self, now_ms: Option<i64>) {
        let Pipeline { assembler, scorer, score, accumulators, counters, primary, sessions, .. } = self;
        let mut sessions = Sessions { primary: *primary, ledger: sessions };
        assembler.finalize_expired(now_ms, &mut |closed| {
            fold(scorer, score, accumulators, counters, &mut sessions, closed);
        });
    }

    /// Finalizes everything still open.
    pub fn finalize_all(&mut self) {
        let Pipeline { assembler, scorer, score, accumulators, counters, primary, sessions, .. } = self;
        let mut sessions = Sessions { primary: *primary, ledger: sessions };
        assembler.finalize_all(&mut |closed| {
            fold(scorer, score, accumulators, counters, &mut sessions, closed);
        });
    }

    pub fn open_lists(&self) -> usize {
        self.assembler.open_lists()
    }

    /// What was accumulated since the last call, leaving empty
    /// accumulators on the same bucket range. Accumulators are mergeable
    /// sums, so the takes merged in order equal what one never taken would
    /// hold: the daemon hands them to its publisher this way, paying for
    /// the buckets that changed rather than for every bucket it holds.
    pub fn take_accumulated(&mut self) -> Accumulators {
        let mut empty = Accumulators::new(self.accumulators.cutoffs, self.accumulators.bucket_ms);
        empty.range = self.accumulators.range;
        std::mem::replace(&mut self.accumulators, empty)
    }

    /// Forgets every open and final list without scoring any (their
    /// partition went to another instance); the accumulators and counters
    /// stay.
    pub fn drop_lists(&mut self) {
        // Final lists taken out of the windows for late judgments go back
        // first: they were counted here.
        let Pipeline { assembler, scorer, score, accumulators, counters, primary, sessions, .. } = self;
        let mut sessions = Sessions { primary: *primary, ledger: sessions };
        assembler.reinstate_withdrawn(&mut |closed| fold(scorer, score, accumulators, counters, &mut sessions, closed));
        self.assembler = Assembler::with_limits(
            self.assembler.limits,
            self.assembler.dimensions.labels().to_vec(),
            Some(self.budget.clone()),
        );
        // Their sessions go too: the partition's new owner has them.
        self.sessions.clear();
    }
}

/// What [`fold`] needs for the session sums: the primary metric's index
/// and the shard's ledger.
struct Sessions<'a> {
    primary: Option<usize>,
    ledger: &'a mut SessionLedger,
}

impl Sessions<'_> {
    /// A list's first finalization: its primary value joins its session.
    /// Randomized lists are in no quality mean, so in no session sum.
    fn add(
        &mut self,
        list: &FinalList,
        score: &ListScore,
        clusters: &mut crate::accumulate::Clusters,
        counters: &mut OpsCounters,
    ) {
        let Some(i) = self.primary else { return };
        if score.randomized || score.results_unknown {
            return;
        }
        if let Some(Some(value)) = score.values.get(i) {
            let before = self.ledger.evicted;
            self.ledger.add(list.session, list.dims_id, *value, list.impression_ms, clusters);
            counters.sessions_evicted += self.ledger.evicted - before;
        }
    }
}

fn fold(
    scorer: &mut ListScorer,
    score: &mut ListScore,
    accumulators: &mut Accumulators,
    counters: &mut OpsCounters,
    sessions: &mut Sessions,
    closed: Notice,
) {
    let mut score_list = |list: &FinalList, score: &mut ListScore| {
        scorer.score(list.shown, list.scores, list.judged, score);
        score.interleaving = scorer.interleaving(list.shown, list.teams);
        (score.click_ranks, score.clicks) = scorer.click_mask(list.shown);
        score.shown = u32::try_from(list.shown.len()).unwrap_or(u32::MAX);
        score.randomized = list.randomized;
        score.results_unknown = list.results_unknown;
    };
    match closed {
        Notice::Final(list) => {
            score_list(&list, score);
            let clusters = accumulators.fold(list.dims, list.impression_ms, score);
            sessions.add(&list, score, clusters, counters);
        }
        Notice::Evicted(list) => {
            counters.evicted += 1;
            score_list(&list, score);
            let clusters = accumulators.fold(list.dims, list.impression_ms, score);
            sessions.add(&list, score, clusters, counters);
        }
        // The withdrawn values are recomputed from the same list as when it
        // was folded in: the engine is deterministic, so the retraction is
        // exact.
        Notice::Withdrawn(old) => {
            score_list(&old, score);
            accumulators.amend_window(old.dims, old.impression_ms, score, -1);
        }
        Notice::Reinstated(new) => {
            score_list(&new, score);
            accumulators.amend_window(new.dims, new.impression_ms, score, 1);
        }
        Notice::LateAmended => counters.late_amended += 1,
        Notice::Orphan => counters.orphans += 1,
        Notice::LateDropped => counters.late_dropped += 1,
        Notice::DimensionOverflow(label) => *counters.dimension_overflow.entry(label).or_default() += 1,
        Notice::CombinationOverflow => counters.combination_overflow += 1,
        Notice::PositionTaken => counters.positions_taken += 1,
        Notice::DimensionConflict => counters.dimension_conflicts += 1,
        Notice::Forgotten => counters.forgotten += 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankpulse_testkit::mix;

    const BASE_MS: i64 = 1_763_780_000_000;

    /// A complete list (impression and judgment) of the ranker "skewed" at `ts`.
    fn skewed(id: usize, ts: i64) -> [(&'static str, String); 2] {
        let session = format!("skewed-{id}-{ts}");
        [
            (
                "search-impressions",
                format!(
                    r#"{{"type":"impression","event_id":"si-{session}","session_id":"{session}","timestamp":{ts},"results":[{{"doc_id":"d","position":1}}],"dimensions":{{"ranker":"skewed","market":"us"}}}}"#
                ),
            ),
            (
                "search-judgments",
                format!(
                    r#"{{"type":"judgment","event_id":"sj-{session}","session_id":"{session}","doc_id":"d","grade":1,"timestamp":{ts}}}"#
                ),
            ),
        ]
    }

    /// 3,000 lists over ten minutes, read live (each message a second or two
    /// after its event), with or without events of broken clocks in both
    /// topics: year 9999, microseconds, ten minutes ahead, seconds and 2001, at the
    /// start and every 500 messages. (An event within the skew moves the
    /// watermark like any other: that is what the skew allows.)
    fn run(hostile: bool) -> Pipeline {
        let config = PipelineSettings::default();
        let mut p = Pipeline::new(&config);
        let normal = mix(0, 3_000, 5, BASE_MS, 200.0);
        for (i, m) in normal.iter().enumerate() {
            let now = BASE_MS + (i / 4) as i64 * 200 + 2_000;
            let clock = Clock::Live { now_ms: now, message_ms: Some(now) };
            if hostile && i % 500 == 0 {
                for ts in [253_402_300_799_000, now * 1_000, now + 10 * 60_000, now / 1_000, 1_000_000_000_000] {
                    for (topic, e) in skewed(i, ts) {
                        let _ = p.ingest(topic, e.as_bytes(), clock, None);
                    }
                }
            }
            let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
            assert_eq!(p.ingest(topic, &m.payload, clock, None), Ok(()));
            if i % 100 == 0 {
                p.finalize_expired(Some(now));
                p.accumulators.prune(now);
            }
        }
        p.finalize_all();
        p
    }

    #[test]
    fn broken_clocks_change_nothing_of_the_normal_traffic() {
        let (clean, hostile) = (run(false), run(true));
        let normal = |p: &Pipeline| -> Vec<(Arc<[String]>, crate::accumulate::Series)> {
            p.accumulators
                .series
                .iter()
                .filter(|(d, _)| d[0] != "skewed")
                .map(|(d, s)| (d.clone(), crate::accumulate::Series::clone(s)))
                .collect()
        };
        let (a, b) = (normal(&clean), normal(&hostile));
        assert!(!a.is_empty());
        assert_eq!(a.len(), b.len());
        for ((da, sa), (db, sb)) in a.iter().zip(&b) {
            assert_eq!(da, db);
            assert!(
                sa == sb,
                "{da:?}: {} lists in {} buckets, with broken clocks {} in {}",
                sa.lists(),
                sa.buckets.len(),
                sb.lists(),
                sb.buckets.len()
            );
        }
        for c in [&clean.counters, &hostile.counters] {
            assert_eq!(c.orphans + c.late_amended + c.late_dropped + c.evicted, 0, "{c:?}");
        }
        // 24 rounds (12,000 messages) of 2 events each of year 9999 and ten
        // minutes ahead, of microseconds (past what the decoder takes as
        // epoch milliseconds), and of seconds (before input.min_timestamp).
        assert_eq!(
            hostile.counters.rejected,
            BTreeMap::from([
                (RejectReason::InvalidTimestamp, 48),
                (RejectReason::FutureTimestamp, 96),
                (RejectReason::PastTimestamp, 48)
            ])
        );
        // The 2001 lists count since start, in no window: no bucket.
        let skewed = hostile.accumulators.series.iter().find(|(d, _)| d[0] == "skewed").map(|(_, s)| s).unwrap();
        assert_eq!(skewed.lists(), 24);
        assert!(skewed.buckets.is_empty(), "{:?}", skewed.buckets.keys());
    }

    /// The daemon publishes by taking each shard's accumulations every tick
    /// and merging them into one total: that total is what the shard would
    /// hold had nothing been taken, through late amendments, withdrawn
    /// lists, broken clocks and pruning.
    #[test]
    fn accumulations_taken_and_merged_equal_those_kept() {
        let mut config = PipelineSettings::default();
        config.assembly.late_policy = crate::assemble::LatePolicy::Amend;
        let (mut kept, mut taken) = (Pipeline::new(&config), Pipeline::new(&config));
        let mut total = Accumulators::new(kept.accumulators.cutoffs, kept.accumulators.bucket_ms);
        let normal = mix(0, 3_000, 11, BASE_MS, 200.0);
        let mut rng = rankpulse_testkit::Rng::new(7);
        for (i, m) in normal.iter().enumerate() {
            let now = BASE_MS + (i / 4) as i64 * 200 + 2_000;
            let clock = Clock::Live { now_ms: now, message_ms: Some(now) };
            let mut messages = vec![(m.judgment, m.payload.clone())];
            // A judgment of a list from about a minute ago: late, amended.
            if i % 97 == 0 && i >= 1_200 {
                let old = normal[i - 1_200..].iter().find(|m| m.judgment).unwrap();
                let text = String::from_utf8(old.payload.clone()).unwrap().replacen(
                    r#""event_id":""#,
                    r#""event_id":"late-"#,
                    1,
                );
                messages.push((true, text.into_bytes()));
            }
            if i % 500 == 0 {
                messages.extend(skewed(i, now * 1_000).map(|(t, e)| (t == "search-judgments", e.into_bytes())));
                messages.extend(skewed(i, 0).map(|(t, e)| (t == "search-judgments", e.into_bytes())));
            }
            for (judgment, payload) in &messages {
                let topic = if *judgment { "search-judgments" } else { "search-impressions" };
                let (a, b) = (kept.ingest(topic, payload, clock, None), taken.ingest(topic, payload, clock, None));
                assert_eq!(a, b);
            }
            if i % 100 == 0 {
                for p in [&mut kept, &mut taken] {
                    p.finalize_expired(Some(now));
                    p.accumulators.prune(now);
                }
                total.prune(now);
            }
            if rng.below(40) == 0 {
                total.merge(&taken.take_accumulated());
            }
        }
        kept.finalize_all();
        taken.finalize_all();
        total.merge(&taken.take_accumulated());
        assert!(kept.counters.late_amended > 10, "{:?}", kept.counters);
        assert_eq!(kept.counters, taken.counters);
        assert_eq!(total, kept.accumulators);
        assert!(taken.accumulators.series.is_empty());
    }

    /// Dropping the lists of a partition handed over puts back the final
    /// lists withdrawn for late judgments: the windows keep what was
    /// counted here.
    #[test]
    fn dropped_lists_leave_the_windows_as_counted() {
        let config = PipelineSettings::default();
        let mut p = Pipeline::new(&config);
        let clock = Clock::replay();
        let [(it, i), (jt, j)] = skewed(1, BASE_MS);
        p.ingest(it, i.as_bytes(), clock, None).unwrap();
        p.ingest(jt, j.as_bytes(), clock, None).unwrap();
        // A later list moves the watermark past the first's gap: final.
        for (topic, e) in skewed(2, BASE_MS + 40_000) {
            p.ingest(topic, e.as_bytes(), clock, None).unwrap();
        }
        let lists = |p: &Pipeline| {
            p.accumulators.series.values().flat_map(|s| s.buckets.values()).map(|c| c.lists).sum::<i64>()
        };
        assert_eq!(lists(&p), 1);
        // A late judgment for it: withdrawn until the next sweep.
        let late = j.replace("sj-", "late-").replace(r#""grade":1"#, r#""grade":2"#);
        p.ingest(jt, late.as_bytes(), clock, None).unwrap();
        assert_eq!((lists(&p), p.counters.late_amended), (0, 1));
        p.drop_lists();
        assert_eq!(lists(&p), 1);
        assert_eq!(p.open_lists(), 0);
    }

    /// A re-delivery stamped anew (a producer's retry that takes the time
    /// again) is counted once and moves no clock: not the watermark, which
    /// would finalize the other open lists early, nor a replay's window
    /// "now", which would move every window past the lists in it. The
    /// same holds for an event its list refuses (past
    /// `input.max_events_per_list`).
    #[test]
    fn a_discarded_event_moves_no_clock() {
        let topic = "replay";
        let clock = Clock::replay();
        let feed = |p: &mut Pipeline, extra: &[String]| {
            for id in 0..2 {
                for (_, e) in skewed(id, BASE_MS + 10_000 * id as i64) {
                    p.ingest(topic, e.as_bytes(), clock, None).unwrap();
                }
            }
            for e in extra {
                p.ingest(topic, e.as_bytes(), clock, None).unwrap();
            }
        };
        let mut plain = Pipeline::new(&PipelineSettings::default());
        feed(&mut plain, &[]);
        let [_, (_, judged)] = skewed(0, BASE_MS);
        let again =
            judged.replace(&format!(r#""timestamp":{BASE_MS}"#), &format!(r#""timestamp":{}"#, BASE_MS + 100_000));
        assert_ne!(again, judged);
        let mut settings = PipelineSettings::default();
        settings.assembly.max_events_per_list = 2;
        // A new judgment for list 1, which holds its two events already,
        // 20 s after them (within the gap: it is list 1's).
        let refused = skewed(1, BASE_MS + 10_000)[1]
            .1
            .replace("sj-", "sj2-")
            .replace(&format!(r#""timestamp":{}"#, BASE_MS + 10_000), &format!(r#""timestamp":{}"#, BASE_MS + 30_000));
        let mut p = Pipeline::new(&settings);
        feed(&mut p, std::slice::from_ref(&again));
        assert!(p.last_discarded());
        assert_eq!(p.counters.duplicates.values().sum::<u64>(), 1);
        assert_eq!(p.ingest(topic, refused.as_bytes(), clock, None), Err(RejectReason::ListTooLarge));
        assert!(p.last_discarded());
        for q in [&p, &plain] {
            assert_eq!(q.open_lists(), 2, "a list was finalized on a discarded event's time");
            assert_eq!(q.newest_event_ms, BASE_MS + 10_000);
        }
        // The windows' "now" (a replay's: the newest event time) is the same.
        assert_eq!(p.accumulators.range, plain.accumulators.range);
        p.finalize_all();
        plain.finalize_all();
        let lists = |p: &Pipeline| {
            p.accumulators.series.values().flat_map(|s| s.buckets.values()).map(|c| c.lists).sum::<i64>()
        };
        assert_eq!((lists(&p), lists(&plain)), (2, 2));
    }

    /// An epoch in seconds (now, and the year 2286) read as milliseconds
    /// falls before 2000 and is rejected before it moves the watermark; a
    /// backfill of 2001 is valid, and a configured bound moves the edge.
    #[test]
    fn events_before_min_timestamp_are_rejected_and_change_nothing() {
        let mut config = PipelineSettings::default();
        let mut p = Pipeline::new(&config);
        let clock = Clock::replay();
        for (ts, want) in [
            (1_763_780_000, Err(RejectReason::PastTimestamp)),
            (9_999_999_999, Err(RejectReason::PastTimestamp)),
            (MIN_TIMESTAMP_MS - 1, Err(RejectReason::PastTimestamp)),
            (MIN_TIMESTAMP_MS, Ok(())),
            (1_000_000_000_000, Ok(())),
        ] {
            let [(topic, e), _] = skewed(0, ts);
            assert_eq!(p.ingest(topic, e.as_bytes(), clock, None), want, "{ts}");
            if want.is_err() {
                assert_eq!((p.open_lists(), p.newest_event_ms), (0, i64::MIN), "{ts} changed something");
            }
        }
        assert_eq!(p.counters.rejected[&RejectReason::PastTimestamp], 3);
        assert_eq!(p.newest_event_ms, 1_000_000_000_000);
        config.min_timestamp_ms = BASE_MS;
        let mut p = Pipeline::new(&config);
        let [(topic, e), _] = skewed(0, BASE_MS - 1);
        assert_eq!(p.ingest(topic, e.as_bytes(), clock, None), Err(RejectReason::PastTimestamp));
        let [(topic, e), _] = skewed(0, BASE_MS);
        assert_eq!(p.ingest(topic, e.as_bytes(), clock, None), Ok(()));
    }

    /// Past `input.max_events_per_list` a list's events are rejected as
    /// `list_too_large`, counted, and the list is scored on what it took.
    #[test]
    fn a_list_past_its_event_bound_rejects_more_as_list_too_large() {
        let mut config = PipelineSettings::default();
        config.assembly.max_events_per_list = 3;
        let mut p = Pipeline::new(&config);
        let clock = Clock::replay();
        let [(it, i), (jt, j)] = skewed(1, BASE_MS);
        p.ingest(it, i.as_bytes(), clock, None).unwrap();
        for n in 0..5 {
            let judgment = j.replace("sj-", &format!("sj{n}-"));
            let want = if n < 2 { Ok(()) } else { Err(RejectReason::ListTooLarge) };
            assert_eq!(p.ingest(jt, judgment.as_bytes(), clock, None), want, "judgment {n}");
        }
        assert_eq!(p.counters.rejected.get(&RejectReason::ListTooLarge), Some(&3));
        assert_eq!(p.counters.events.values().sum::<u64>(), 3, "{:?}", p.counters.events);
        p.finalize_all();
        let lists: i64 = p.accumulators.series.values().flat_map(|s| s.buckets.values()).map(|c| c.lists).sum();
        assert_eq!(lists, 1);
    }

    #[test]
    fn a_replay_rejects_events_ahead_of_the_wall_clock() {
        let config = PipelineSettings::default();
        let mut p = Pipeline::new(&config);
        let clock = Clock::replay();
        let now = wall_ms();
        for (ts, ok) in [(BASE_MS, true), (now + 60_000, true), (now + 6 * 60_000, false), (253_402_300_799_000, false)]
        {
            let [(topic, e), _] = skewed(0, ts);
            let want = if ok { Ok(()) } else { Err(RejectReason::FutureTimestamp) };
            assert_eq!(p.ingest(topic, e.as_bytes(), clock, None), want, "{ts}");
        }
    }
}
