//! Assembly: typed events → open lists → finalized lists.
//!
//! Second stage of the stream. A list is keyed by (session_id, query_id);
//! its impressions (pages, re-deliveries) merge by position, its judgments
//! keep the highest grade per document, and an event id seen twice counts
//! once. Judgments may arrive before their impression and wait for it.
//!
//! A list is final when no event of it arrived for `session.gap` in event
//! time: when the watermark passes its last event plus the gap, when an event of the same key arrives more than a gap after
//! the list's last event (a new list starts), or, for idle partitions, when
//! no event of it arrived for a gap of processing time (checked every
//! eighth of a gap, at most every 5 s: that check walks every list, while
//! event-time expiry finds the lists due by their expiry slot). Everything open is
//! finalized at shutdown and at the end of a replay.
//!
//! The watermark is the oldest of the newest event times of the shard's
//! lanes (its input topics): impressions and judgments of one partition are
//! consumed at different speeds, above all when catching up after a
//! restart, and a list must not close because the impressions ran ahead of
//! the judgments that belong to it. The daemon declares its lanes (the
//! topics assigned for the partition) up front: until each has delivered an
//! event, nothing closes on event time.
//!
//! Open lists are compact: keys and document ids are 128- and 64-bit
//! hashes, never copies of the strings, dimension values are interned, and
//! a resting list is one run of words in a per-shard arena ([`store`]).
//!
//! Why one file (about 1,170 lines before its tests): the [`Assembler`]'s
//! rules (lanes and watermark, expiry by slot and by processing time,
//! eviction, late amendments, the dimension budget an impression draws on)
//! each read and move the same open-list store and counters, and a rule
//! read apart from the others hides the order they run in per event. The
//! storage itself is in [`store`].

use crate::event::{Event, Impression, Judgment, MAX_DIMENSION_LABELS};
use crate::interleave::Team;
use crate::metrics::Grade;
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};
use store::{FrozenLists, JudgmentEdit, ListBounds, ListStore};
use xxhash_rust::xxh3::{xxh3_64, xxh3_128};

pub mod store;

/// Interned dimension values of a list: index into [`Dimensions::values()`].
pub type DimsId = u32;

/// Value used for a configured dimension label an impression did not send.
pub const MISSING_DIMENSION: &str = "unknown";

/// Value reported for a dimension value past `dimensions.max_values`.
pub const OTHER_DIMENSION: &str = "__other__";

/// The distinct values admitted per dimension label, and the distinct
/// combinations of them, shared by every shard of an instance: past
/// `max_values` new values of a label become [`OTHER_DIMENSION`], past
/// `max_combinations` new combinations become [`OTHER_DIMENSION`] on every
/// label, so neither series nor these sets grow without bound (each label
/// within its cap still multiplies out: 100 rankers × 100 markets).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DimensionBudget {
    max_values: usize,
    /// Admitted values, per label position.
    admitted: Vec<FxHashSet<String>>,
    max_combinations: usize,
    /// Admitted combinations, as 128-bit hashes of the value tuples.
    combinations: FxHashSet<u128>,
    /// Longer values are never admitted (0: no bound): a label value is
    /// repeated on every series of its combination, and one of a megabyte
    /// would make each scrape hundreds of megabytes. Not checkpointed: the
    /// bound is the configuration's.
    #[serde(skip)]
    max_value_bytes: usize,
}

impl DimensionBudget {
    pub fn new(labels: usize, max_values: usize, max_combinations: usize) -> Self {
        DimensionBudget {
            max_values,
            admitted: vec![FxHashSet::default(); labels],
            max_combinations,
            combinations: FxHashSet::default(),
            max_value_bytes: 0,
        }
    }

    /// With values longer than `bytes` never admitted (0: no bound).
    pub fn with_max_value_bytes(mut self, bytes: usize) -> Self {
        self.max_value_bytes = bytes;
        self
    }

    /// This budget's bounds with what `restored` had admitted: a restart
    /// keeps the series it had, under the configuration it restarts with
    /// (admitted beyond a smaller bound stay; nothing new is admitted
    /// until there is room).
    pub fn with_admitted_from(mut self, restored: DimensionBudget) -> Self {
        self.admitted = restored.admitted;
        self.combinations = restored.combinations;
        self
    }

    /// Whether the combination `values` may be a series; admits it if
    /// there is room. The all-`__other__` combination always may.
    fn admit_combination(&mut self, values: &[&str]) -> bool {
        if values.iter().all(|v| *v == OTHER_DIMENSION) {
            return true;
        }
        let mut hasher = xxhash_rust::xxh3::Xxh3::new();
        for v in values {
            hasher.update(v.as_bytes());
            hasher.update(&[0xff]);
        }
        let hash = hasher.digest128();
        if self.combinations.contains(&hash) {
            return true;
        }
        if self.combinations.len() < self.max_combinations {
            self.combinations.insert(hash);
            return true;
        }
        false
    }

    /// Whether `value` may appear as a label value at `label`; admits it if
    /// there is room.
    /// `unknown` (a value missing) and `__other__` are always admitted and
    /// take no slot: traffic without a label must not use up the room of
    /// an experiment's arms, so a label has at most `max_values` values
    /// besides these two.
    fn admit(&mut self, label: usize, value: &str) -> bool {
        if value == MISSING_DIMENSION || value == OTHER_DIMENSION {
            return true;
        }
        if self.max_value_bytes != 0 && value.len() > self.max_value_bytes {
            return false;
        }
        if self.admitted.len() <= label {
            self.admitted.resize_with(label + 1, FxHashSet::default);
        }
        let set = &mut self.admitted[label];
        if set.contains(value) {
            return true;
        }
        if set.len() < self.max_values {
            set.insert(value.to_string());
            return true;
        }
        false
    }
}

/// Interns the tuples of configured dimension values seen on impressions.
/// A tuple already seen is found by hash and compared in place: no
/// allocation per impression.
#[derive(Debug, Default)]
pub struct Dimensions {
    labels: Vec<String>,
    /// Private with `values`: an id is an index into `values`, found
    /// through `by_hash`; only interning adds to both.
    by_hash: FxHashMap<u64, Vec<DimsId>>,
    values: Vec<Arc<[String]>>,
    budget: Option<Arc<Mutex<DimensionBudget>>>,
}

impl Dimensions {
    /// The configured dimension labels, in order.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// Every tuple interned, indexed by its id.
    pub fn values(&self) -> &[Arc<[String]>] {
        &self.values
    }

    pub fn new(labels: Vec<String>) -> Self {
        Dimensions { labels, by_hash: FxHashMap::default(), values: Vec::new(), budget: None }
    }

    /// Rebuilds an interner from its values (checkpoint restore).
    pub fn from_values(labels: Vec<String>, values: Vec<Arc<[String]>>) -> Self {
        let mut d = Dimensions::new(labels);
        for v in values {
            let hash = tuple_hash(v.iter().map(String::as_str));
            let id = d.values.len() as DimsId;
            d.values.push(v);
            d.by_hash.entry(hash).or_default().push(id);
        }
        d
    }

    /// An empty value is a missing one: Prometheus reads `ranker=""` as
    /// no `ranker` label at all, so a series of its own would merge, in
    /// every query, with the series of lists that have no label.
    fn value<'e>(label: &str, impression: &'e Impression) -> &'e str {
        impression
            .dimensions
            .get(label)
            .map(|v| v.as_ref())
            .filter(|v: &&str| !v.is_empty())
            .unwrap_or(MISSING_DIMENSION)
    }

    /// Whether `impression`, which defines its list, disagrees with the
    /// impression that defined the list before (`held`: the rank and
    /// dimensions the list holds) on a label both sent: one list key under
    /// two rankers or markets. A label that one of them did not send
    /// ([`MISSING_DIMENSION`]) is no disagreement (later pages may repeat
    /// only the key), and UBI `impression` events, which define nothing
    /// (their dimensions are the query's), are never compared. Two values
    /// that both became [`OTHER_DIMENSION`] look alike and are not told
    /// apart.
    pub fn disagree(&self, held: Option<(i64, DimsId)>, impression: &Impression, dims: DimsId) -> bool {
        let Some((rank, held)) = held else { return false };
        if !impression.defines_list || rank & NOT_DEFINING != 0 || held == dims {
            return false;
        }
        match (self.values.get(held as usize), self.values.get(dims as usize)) {
            (Some(a), Some(b)) => {
                a.iter().zip(b.iter()).any(|(a, b)| a != b && a != MISSING_DIMENSION && b != MISSING_DIMENSION)
            }
            _ => false,
        }
    }

    fn find(&self, hash: u64, values: &[&str]) -> Option<DimsId> {
        let ids = self.by_hash.get(&hash)?;
        ids.iter().copied().find(|&id| self.values[id as usize].iter().zip(values).all(|(a, b)| a == b))
    }

    /// The id of an impression's configured dimension values; `overflow`
    /// is told of each label whose value was replaced by
    /// [`OTHER_DIMENSION`] ([`Notice::DimensionOverflow`]), and of a
    /// combination past the budget ([`Notice::CombinationOverflow`]).
    pub fn intern(&mut self, impression: &Impression, overflow: &mut impl FnMut(Notice<'static>)) -> DimsId {
        // Dimension labels are few; a small stack array avoids a Vec.
        let mut values: [&str; MAX_DIMENSION_LABELS] = [""; MAX_DIMENSION_LABELS];
        let n = self.labels.len().min(values.len());
        for (slot, label) in values.iter_mut().zip(&self.labels) {
            *slot = Self::value(label, impression);
        }
        let hash = tuple_hash(values[..n].iter().copied());
        if let Some(id) = self.find(hash, &values[..n]) {
            return id;
        }
        // A tuple not seen yet: every value must be admitted by the budget.
        if let Some(budget) = self.budget.clone()
            && let Ok(mut budget) = budget.lock()
        {
            let mut replaced = false;
            for (i, v) in values[..n].iter_mut().enumerate() {
                if !budget.admit(i, v) {
                    *v = OTHER_DIMENSION;
                    overflow(Notice::DimensionOverflow(i));
                    replaced = true;
                }
            }
            if !budget.admit_combination(&values[..n]) {
                values[..n].fill(OTHER_DIMENSION);
                overflow(Notice::CombinationOverflow);
                replaced = true;
            }
            if replaced {
                let hash = tuple_hash(values[..n].iter().copied());
                if let Some(id) = self.find(hash, &values[..n]) {
                    return id;
                }
                return self.insert(hash, &values[..n]);
            }
        }
        self.insert(hash, &values[..n])
    }

    fn insert(&mut self, hash: u64, values: &[&str]) -> DimsId {
        let tuple: Arc<[String]> = values.iter().map(|v| v.to_string()).collect();
        let id = self.values.len() as DimsId;
        self.values.push(tuple);
        self.by_hash.entry(hash).or_default().push(id);
        id
    }
}

fn tuple_hash<'a>(values: impl Iterator<Item = &'a str>) -> u64 {
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for v in values {
        hasher.update(v.as_bytes());
        hasher.update(&[0xff]);
    }
    hasher.digest()
}

/// Hash key of (session_id, query_id): the high 64 bits hash the session
/// alone ([`session_of`]: the session-clustered statistics need it at
/// finalization), the low 64 bits the pair. Two lists collide only when
/// both halves do: lists of one session on the low half (p ≈ q² / 2^65 for
/// q searches of a session), of different sessions on both (out of reach).
/// The store hashes the low bits.
pub type ListKey = u128;

/// The session part of a list's key.
pub fn session_of(key: ListKey) -> u64 {
    (key >> 64) as u64
}

pub fn list_key(session_id: &str, query_id: Option<&str>) -> ListKey {
    // One buffer on the stack for the common short ids; the separator byte
    // cannot occur in UTF-8, so ("a", "bc") and ("ab", "c") differ.
    let q = query_id.unwrap_or("");
    let len = session_id.len() + 2 + q.len();
    let mut stack = [0u8; 256];
    let mut heap;
    let buf: &mut [u8] = if len <= stack.len() {
        &mut stack[..len]
    } else {
        heap = vec![0u8; len];
        &mut heap
    };
    buf[..session_id.len()].copy_from_slice(session_id.as_bytes());
    buf[session_id.len()] = 0xff;
    buf[session_id.len() + 1] = u8::from(query_id.is_some());
    buf[session_id.len() + 2..].copy_from_slice(q.as_bytes());
    (u128::from(xxh3_64(session_id.as_bytes())) << 64) | u128::from(xxh3_128(buf) as u64)
}

fn doc_hash(doc_id: &str) -> u64 {
    xxh3_64(doc_id.as_bytes())
}

/// One shown result of an open list.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct ShownDoc {
    doc: u64,
    position: u32,
    /// NaN when the ranker sent no score.
    score: f64,
    /// Team-draft interleaving team: 0 none, 1 A, 2 B (see [`team_code`]).
    team: u8,
}

/// A result's team as stored: 0 none, 1 A, 2 B (two bits in a run).
fn team_code(team: Option<Team>) -> u8 {
    match team {
        None => 0,
        Some(Team::A) => 1,
        Some(Team::B) => 2,
    }
}

fn team_of(code: u8) -> Option<Team> {
    match code {
        1 => Some(Team::A),
        2 => Some(Team::B),
        _ => None,
    }
}

/// A list still collecting events (or, once final, kept for late
/// judgments), in its working form: what the assembler edits and what a
/// checkpoint stores. At rest, between events, it lives compactly in a
/// [`ListStore`].
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct OpenList {
    /// Newest event time of the list: it closes a gap after this.
    last_event_ms: i64,
    /// Processing time of the newest arrival, for partitions that go idle.
    last_arrival_ms: i64,
    /// Set by the impression that decides the list's time and dimensions:
    /// (its rank, see `impression_rank`; dimensions).
    impression: Option<(i64, DimsId)>,
    shown: Vec<ShownDoc>,
    /// Highest grade per judged document.
    judged: Vec<(u64, Grade)>,
    /// Hashes of the event ids already applied (duplicates count once).
    event_ids: Vec<u64>,
    /// Smallest input offset per source (Kafka topic-partition) among this
    /// list's events: offsets at or past it must not be committed while
    /// the list is open (without checkpoints).
    offsets: Vec<Source>,
    /// An impression of the list said its top results were shuffled
    /// uniformly (`randomized`): it feeds the position propensities.
    randomized: bool,
}

/// Where an event came from: a source id (the daemon numbers its Kafka
/// topic-partitions) and the message's offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub id: u32,
    pub offset: i64,
}

/// A list that will change no more, ready for the metric engine. It
/// borrows the assembler's buffers, reused for every list: finalizing
/// allocates nothing (three `Vec`s and a reference count per list were
/// 5% of the pipeline in a profile).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FinalList<'a> {
    /// The list's configured dimension values, in `dimensions.labels` order.
    pub dims: &'a Arc<[String]>,
    /// Their id in this assembler, and the hash of the list's session: a
    /// session's lists are one cluster of the session-clustered statistics.
    pub dims_id: DimsId,
    pub session: u64,
    /// Impression event time (ms): decides the time bucket.
    pub impression_ms: i64,
    /// Grades of the shown results in position order (unjudged = 0).
    pub shown: &'a [Grade],
    /// Model scores aligned with `shown`, when every result has one.
    pub scores: Option<&'a [f64]>,
    /// Interleaving teams aligned with `shown`, when any result has one.
    pub teams: Option<&'a [Option<Team>]>,
    /// The top results were shown in a uniformly random order.
    pub randomized: bool,
    /// Decided by an impression that did not say what it showed, and no
    /// result reached it: not scored (`no_results_known`).
    pub results_unknown: bool,
    /// Grades of every judged document, shown or not.
    pub judged: &'a [Grade],
}

/// The buffers a [`FinalList`] borrows, filled by [`finalize`].
#[derive(Debug, Default)]
struct FinalBuffers {
    dims: DimsId,
    impression_ms: i64,
    shown: Vec<Grade>,
    scores: Vec<f64>,
    /// Whether every shown result had a score.
    scored: bool,
    teams: Vec<Option<Team>>,
    /// Whether any shown result had a team.
    interleaved: bool,
    randomized: bool,
    results_unknown: bool,
    judged: Vec<Grade>,
    /// For lists past [`LINEAR_MAX`]: documents seen, grade per document.
    seen: FxHashSet<u64>,
    grades: FxHashMap<u64, Grade>,
}

/// Up to this many shown results or judged documents, finalizing looks
/// documents up by linear scans (quadratic, but faster than hashing for the
/// lists of a search page); past it, through hash tables, so that a list of
/// n results and judgments is finalized in O(n log n) (the sort by position).
const LINEAR_MAX: usize = 32;

impl FinalBuffers {
    fn view<'a>(&'a self, dimensions: &'a Dimensions, key: ListKey) -> Option<FinalList<'a>> {
        Some(FinalList {
            dims: dimensions.values.get(self.dims as usize)?,
            dims_id: self.dims,
            session: session_of(key),
            impression_ms: self.impression_ms,
            shown: &self.shown,
            scores: self.scored.then_some(&self.scores[..]),
            teams: self.interleaved.then_some(&self.teams[..]),
            randomized: self.randomized,
            results_unknown: self.results_unknown,
            judged: &self.judged,
        })
    }
}

/// What the assembler hands to the metric engine and the counters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Notice<'a> {
    /// A list became final (its gap elapsed, or shutdown).
    Final(FinalList<'a>),
    /// Finalized before its gap because `session.max_open_lists` was reached.
    Evicted(FinalList<'a>),
    /// Only judgments arrived: nothing was shown, nothing to score.
    Orphan,
    /// A final list is about to take late judgments (`late.policy =
    /// "amend"`): take its values out of the windows. It comes back as
    /// [`Notice::Reinstated`] at the next sweep, with every late judgment
    /// that came meanwhile: a burst of them on one list costs two scorings,
    /// not two per judgment.
    Withdrawn(FinalList<'a>),
    /// A withdrawn list, with its late judgments: put its values back.
    Reinstated(FinalList<'a>),
    /// A late judgment was applied to a final list (`late.policy = "amend"`).
    LateAmended,
    /// A late judgment was ignored (`late.policy = "drop"`).
    LateDropped,
    /// The value of the dimension label at this index was replaced by
    /// `__other__` (`dimensions.max_values`).
    DimensionOverflow(usize),
    /// A new combination of dimension values past
    /// `dimensions.max_combinations`: every label became `__other__`.
    CombinationOverflow,
    /// A result was dropped: its list already shows another document at
    /// its position. Two searches under one key (a producer that sends no
    /// `query_id`, or reuses one) merge into one list; this says so.
    PositionTaken,
    /// An impression that defines its list disagrees on a label with the
    /// impression the list holds, both having sent it (a ranker or market
    /// changed mid-list, or two searches under one key; see
    /// [`Dimensions::disagree`]); the earliest impression's values are kept.
    DimensionConflict,
    /// A final list was forgotten before `late.horizon` to keep final lists
    /// within `session.max_open_lists`: a late judgment of it will start a
    /// list of its own (an orphan).
    Forgotten,
}

/// What the assembler reports about one event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// Added to its list (a new list, or one still open).
    Added,
    /// Same event id already applied to this list.
    Duplicate,
    /// A judgment for a final list, handled by the late policy.
    Late,
    /// The list already holds `input.max_events_per_list` events: rejected.
    TooLarge,
}

/// What happens to a judgment for a list that is already final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatePolicy {
    /// Retract the list's contribution, apply the judgment, add it again.
    Amend,
    /// Ignore the judgment (counted).
    Drop,
}

/// Limits of one assembler (`session.*`, `late.*`,
/// `input.max_events_per_list`); the defaults are the configuration's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyLimits {
    pub gap_ms: i64,
    /// Open lists past which the oldest are finalized early.
    pub max_open_lists: usize,
    pub late_policy: LatePolicy,
    /// Final lists take late judgments this long after their last event.
    pub late_horizon_ms: i64,
    /// Events one list takes (`input.max_events_per_list`).
    pub max_events_per_list: usize,
    /// Results past which a list's impressions are refused
    /// (`input.max_results_per_list`); only a big list can reach it.
    pub max_results_per_list: usize,
}

impl Default for AssemblyLimits {
    fn default() -> Self {
        AssemblyLimits {
            gap_ms: 30_000,
            max_open_lists: 2_000_000,
            late_policy: LatePolicy::Amend,
            late_horizon_ms: 60_000,
            max_events_per_list: 10_000,
            max_results_per_list: 10_000,
        }
    }
}

impl AssemblyLimits {
    pub fn gap_only(gap_ms: i64) -> Self {
        AssemblyLimits {
            gap_ms,
            max_open_lists: usize::MAX,
            late_policy: LatePolicy::Drop,
            late_horizon_ms: 0,
            max_events_per_list: usize::MAX,
            max_results_per_list: usize::MAX,
        }
    }
}

/// The assembly stage for one shard of the key space.
#[derive(Debug)]
pub struct Assembler {
    pub limits: AssemblyLimits,
    pub dimensions: Dimensions,
    open_lists: ListStore,
    /// Final lists still inside the late horizon (for late judgments).
    closed_lists: ListStore,
    /// The list being edited: reused buffers, so that an event allocates
    /// nothing once they have grown to the usual list size.
    /// Boxed: handing it out and back moves a pointer, not the ~130-byte
    /// struct, several times per event.
    scratch: Option<Box<OpenList>>,
    /// What a final list is scored from, and for an amended list what it
    /// was scored from before (reused, like `scratch`).
    finals: Box<[FinalBuffers; 2]>,
    /// Newest event time per lane (input topic).
    lanes: Vec<(String, i64)>,
    /// The oldest of the lanes' newest event times.
    watermark_ms: i64,
    /// Set when restored from a checkpoint: processing-time expiry waits
    /// until input flows again, or restored lists would all expire while
    /// the consumer is still rejoining its group.
    clock_paused: bool,
    /// Processing time of the last walk of every list for processing-time
    /// expiry (idle partitions): it runs at most every
    /// [`processing_scan_interval`], not every tick.
    last_scan_ms: Option<i64>,
    /// Watermark at which [`Assembler::ingest`] next finalizes the lists
    /// whose gap has elapsed in event time. Event time closes a list as
    /// soon as the watermark passes it, whoever calls and however fast the
    /// input is read: a consumer catching up on a backlog (event time far
    /// ahead of the clock) would otherwise hold every list it read between
    /// two ticks open, and the outcome would depend on the tick.
    next_sweep_ms: i64,
    /// Final lists withdrawn from the windows for late judgments, put back
    /// at the next sweep (see [`Notice::Withdrawn`]).
    withdrawn: FxHashSet<ListKey>,
}

/// Event time between two finalizations from [`Assembler::ingest`]: the
/// width of an expiry slot, so that each sweep finds new lists due.
const SWEEP_EVERY_MS: i64 = store::EXPIRY_SLOT_MS;

/// How often lists of an idle partition are checked against processing
/// time: an eighth of the gap, at most 5 s. Event-time expiry needs no walk
/// (see [`ListStore::due`]); this one walks every list, so it is not done
/// every tick for millions of lists, and an idle list closes at most this
/// much later than a gap after its last arrival.
fn processing_scan_interval(gap_ms: i64) -> i64 {
    (gap_ms / 8).clamp(0, 5_000)
}

/// An assembler's state as a checkpoint stores it.
#[derive(Debug, Serialize, Deserialize)]
pub struct AssemblerState {
    pub dimension_values: Vec<Vec<String>>,
    pub open_lists: Vec<(ListKey, OpenList)>,
    pub closed_lists: Vec<(ListKey, OpenList)>,
    pub lanes: Vec<(String, i64)>,
    /// Final lists withdrawn from the checkpointed windows, not yet put back.
    #[serde(default)]
    pub withdrawn: Vec<ListKey>,
}

/// An assembler's state at one moment, not yet decoded into an
/// [`AssemblerState`] (see [`Assembler::snapshot`]).
#[derive(Debug)]
pub struct AssemblerSnapshot {
    dimension_values: Vec<Arc<[String]>>,
    open_lists: FrozenLists,
    closed_lists: FrozenLists,
    lanes: Vec<(String, i64)>,
    withdrawn: Vec<ListKey>,
}

impl AssemblerSnapshot {
    pub fn into_state(self) -> AssemblerState {
        AssemblerState {
            dimension_values: self.dimension_values.iter().map(|v| v.to_vec()).collect(),
            open_lists: self.open_lists.lists(),
            closed_lists: self.closed_lists.lists(),
            lanes: self.lanes,
            withdrawn: self.withdrawn,
        }
    }
}

impl Assembler {
    pub fn new(gap_ms: i64, dimension_labels: Vec<String>) -> Self {
        Self::with_limits(AssemblyLimits::gap_only(gap_ms), dimension_labels, None)
    }

    pub fn with_limits(
        limits: AssemblyLimits,
        dimension_labels: Vec<String>,
        budget: Option<Arc<Mutex<DimensionBudget>>>,
    ) -> Self {
        let mut dimensions = Dimensions::new(dimension_labels);
        dimensions.budget = budget;
        Assembler {
            limits,
            dimensions,
            open_lists: ListStore::default(),
            closed_lists: ListStore::default(),
            scratch: Some(Box::default()),
            finals: Box::default(),
            lanes: Vec::new(),
            watermark_ms: i64::MIN,
            clock_paused: false,
            last_scan_ms: None,
            next_sweep_ms: i64::MIN,
            withdrawn: FxHashSet::default(),
        }
    }

    /// The state to checkpoint (open and recently closed lists).
    pub fn state(&self) -> AssemblerState {
        self.snapshot().into_state()
    }

    /// The state to checkpoint, taken cheaply (see [`ListStore::freeze`]):
    /// [`AssemblerSnapshot::into_state`] does the decoding, on whichever
    /// thread holds it.
    pub fn snapshot(&self) -> AssemblerSnapshot {
        AssemblerSnapshot {
            dimension_values: self.dimensions.values.clone(),
            open_lists: self.open_lists.freeze(),
            closed_lists: self.closed_lists.freeze(),
            lanes: self.lanes.clone(),
            withdrawn: {
                let mut keys: Vec<ListKey> = self.withdrawn.iter().copied().collect();
                keys.sort_unstable();
                keys
            },
        }
    }

    /// Replaces this assembler's lists with a checkpointed state. Source
    /// offsets are dropped: source numbering is per process, and with
    /// checkpoints the commit point does not depend on open lists.
    pub fn restore(&mut self, state: AssemblerState) {
        let values = state.dimension_values.into_iter().map(Arc::from).collect();
        let budget = self.dimensions.budget.take();
        self.dimensions = Dimensions::from_values(self.dimensions.labels.clone(), values);
        self.dimensions.budget = budget;
        let fill = |lists: Vec<(ListKey, OpenList)>| {
            let mut store = ListStore::default();
            for (key, mut list) in lists {
                list.offsets.clear();
                // A list too large to store was finalized before it was
                // checkpointed; none can be here.
                let _ = store.store(key, &mut list);
            }
            store
        };
        self.open_lists = fill(state.open_lists);
        self.closed_lists = fill(state.closed_lists);
        self.withdrawn = state.withdrawn.into_iter().filter(|k| self.closed_lists.contains(*k)).collect();
        self.lanes = state.lanes;
        self.update_watermark();
        self.clock_paused = true;
        self.last_scan_ms = None;
    }

    /// Declares the lanes this assembler's input has (the daemon: the
    /// topics assigned for its partition). A lane that has delivered
    /// nothing yet holds the watermark back: otherwise the first batch of
    /// impressions fetched before the first judgments of the same partition
    /// would close their lists, and the judgments would start lists of
    /// their own.
    pub fn expect_lanes<'a>(&mut self, lanes: impl IntoIterator<Item = &'a str>) {
        for lane in lanes {
            if !self.lanes.iter().any(|(name, _)| name == lane) {
                self.lanes.push((lane.to_string(), i64::MIN));
            }
        }
        self.update_watermark();
    }

    /// The watermark is the oldest of the lanes' newest event times.
    fn update_watermark(&mut self) {
        self.watermark_ms = self.lanes.iter().map(|(_, t)| *t).min().unwrap_or(i64::MIN);
    }

    /// Input flows again after a restore: processing-time expiry restarts
    /// from `now_ms` for every restored list.
    pub fn resume_clock(&mut self, now_ms: i64) {
        if self.clock_paused {
            self.clock_paused = false;
            self.open_lists.set_arrivals(now_ms);
            self.closed_lists.set_arrivals(now_ms);
        }
    }

    pub fn open_lists(&self) -> usize {
        self.open_lists.len()
    }

    pub fn closed_lists(&self) -> usize {
        self.closed_lists.len()
    }

    /// Each lane (input topic) with its newest event time (`i64::MIN`:
    /// declared, nothing delivered yet).
    pub fn lanes(&self) -> &[(String, i64)] {
        &self.lanes
    }

    pub fn watermark_ms(&self) -> i64 {
        self.watermark_ms
    }

    /// Asks the CPU for the memory [`Self::ingest`] will read for `event`'s
    /// list, ahead of it: a consumer that prefetches the lists of a batch
    /// of decoded events before applying them overlaps their cache misses
    /// instead of stalling on each in turn.
    pub fn prefetch(&self, event: &Event) {
        let (session, query) = match event {
            Event::Impression(i) => (&i.session_id, &i.query_id),
            Event::Judgment(j) => (&j.session_id, &j.query_id),
            Event::Ignored(_) => return,
        };
        self.open_lists.prefetch(list_key(session, query.as_deref()));
    }

    /// Applies one event that came in on `lane` (its topic). Lists that it
    /// closes (same key, more than a gap later, unless it repeats one of
    /// the list's events; or evicted to make room) go
    /// to `sink` first; then, each time the watermark has moved on by
    /// [`SWEEP_EVERY_MS`], the lists whose gap has elapsed in event time.
    pub fn ingest(
        &mut self,
        event: &Event,
        lane: &str,
        arrival_ms: i64,
        source: Option<Source>,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        self.resume_clock(arrival_ms);
        let (session, query, ts, event_id) = match event {
            Event::Impression(i) => (&i.session_id, &i.query_id, i.timestamp_ms, &i.event_id),
            Event::Judgment(j) => (&j.session_id, &j.query_id, j.timestamp_ms, &j.event_id),
            // The pipeline counts these; they belong to no list.
            Event::Ignored(_) => return Applied::Added,
        };
        let key = list_key(session, query.as_deref());
        let event_hash = xxh3_64(event_id.as_bytes());
        let gap = self.limits.gap_ms;
        // The one hash lookup of the event: `at` stays valid until the
        // open lists change, and is cleared whenever they do before `apply`.
        let mut at = self.open_lists.locate(key);
        if let Some(start) = at
            && ts > self.open_lists.last_event_at(start).saturating_add(gap)
        {
            let mut old = self.scratch.take().unwrap_or_default();
            // A re-delivery of one of the list's events stamped anew (a
            // producer's retry that takes the time again) leaves the list
            // open: `apply` finds it a duplicate. Closing it would make
            // late the list's events still to come on a lane that is
            // behind (catching up, judgments trail impressions), which
            // the batch engine, reading in time order, applies to it.
            self.open_lists.load_at(start, &mut old);
            if !old.event_ids.contains(&event_hash) {
                // Decoded above: removed without decoding it again.
                self.open_lists.remove(key);
                self.close(key, &mut old, false, sink);
                at = None;
            }
            self.scratch = Some(old);
        }
        let late = match event {
            // Within a gap of its final list's last event, an impression
            // belongs to that list as a late judgment does, whether a UBI
            // `impression` event (one shown result) or a page of a native
            // list: read in time order, it would have been in the list.
            // A list of its own would count one search twice, a UBI one
            // with no query (`ranker="unknown"`), and take the clicks that
            // follow it.
            Event::Judgment(_) | Event::Impression(_) if at.is_none() => {
                self.late_event(key, event, ts, event_hash, arrival_ms, sink)
            }
            _ => None,
        };
        let applied = match late {
            Some(applied) => applied,
            // A re-delivery stamped anew (a producer's retry that takes the
            // time again), more than a gap after its list: the final list
            // counted it already. Judgments are asked in `late_event`.
            None if at.is_none() && matches!(event, Event::Impression(_)) && self.seen_in_final(key, event_hash) => {
                Applied::Duplicate
            }
            None => {
                if at.is_none() && self.open_lists.len() >= self.limits.max_open_lists {
                    self.evict_oldest(sink);
                }
                let mut list = self.scratch.take().unwrap_or_default();
                let applied = self.apply(key, &mut list, at, event, event_hash, ts, arrival_ms, source, sink);
                self.scratch = Some(list);
                applied
            }
        };
        // Only an event taken moves its lane's time: a re-delivery stamped
        // anew, or an event its list refuses, is discarded, and moving the
        // watermark on it would finalize other lists early. Nothing above
        // reads this event's own lane time (a late event's time is within
        // its list's gap, below any watermark that would make it too late).
        if !matches!(applied, Applied::Duplicate | Applied::TooLarge) {
            match self.lanes.iter_mut().find(|(name, _)| name == lane) {
                Some((_, newest)) => *newest = (*newest).max(ts),
                None => self.lanes.push((lane.to_string(), ts)),
            }
            self.update_watermark();
        }
        if self.watermark_ms > i64::MIN && self.watermark_ms >= self.next_sweep_ms {
            self.finalize_expired(None, sink);
        }
        applied
    }

    /// Applies an event to the open list of `key` (at `at`, from
    /// [`ListStore::locate`]; a new list when `None`), edited in `list`, and
    /// stores it back.
    #[allow(clippy::too_many_arguments)]
    fn apply(
        &mut self,
        key: ListKey,
        list: &mut OpenList,
        at: Option<u32>,
        event: &Event,
        event_hash: u64,
        ts: i64,
        arrival_ms: i64,
        source: Option<Source>,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let max_events = self.limits.max_events_per_list;
        if let (Some(start), Event::Judgment(j)) = (at, event) {
            let edit = JudgmentEdit {
                doc: doc_hash(&j.doc_id),
                grade: j.grade,
                event: event_hash,
                max_events,
                ts_ms: ts,
                arrival_ms,
                source,
            };
            if let Some(applied) = self.open_lists.judge_at(start, &edit) {
                return applied;
            }
        }
        if let (Some(start), Event::Impression(i)) = (at, event) {
            let bounds = ListBounds { events: max_events, results: self.limits.max_results_per_list };
            match self.open_lists.big_event(start, event_hash, ts, arrival_ms, source, bounds) {
                Some(Err(refused)) => return refused,
                Some(Ok(_)) => {
                    let dims = self.dimensions.intern(i, &mut |overflow| sink(overflow));
                    let held = self.open_lists.note_impression(start, impression_rank(i), dims, i.randomized);
                    if self.dimensions.disagree(held, i, dims) {
                        sink(Notice::DimensionConflict);
                    }
                    if let Some(big) = self.open_lists.big_mut(key) {
                        for r in &i.results {
                            if !big.show(
                                doc_hash(&r.doc_id),
                                r.position,
                                r.score.unwrap_or(f64::NAN),
                                team_code(r.team),
                            ) {
                                sink(Notice::PositionTaken);
                            }
                        }
                    }
                    return Applied::Added;
                }
                None => {}
            }
        }
        // Nothing below stores or removes a list before it is stored back.
        if let Some(start) = at {
            self.open_lists.load_at(start, list);
        } else {
            list.last_event_ms = ts;
            list.last_arrival_ms = arrival_ms;
            list.impression = None;
            list.randomized = false;
            list.shown.clear();
            list.judged.clear();
            list.event_ids.clear();
            list.offsets.clear();
        }
        if list.event_ids.contains(&event_hash) {
            return Applied::Duplicate;
        }
        if list.event_ids.len() >= max_events {
            return Applied::TooLarge;
        }
        if let Some(src) = source {
            match list.offsets.iter_mut().find(|o| o.id == src.id) {
                Some(o) => o.offset = o.offset.min(src.offset),
                None => list.offsets.push(src),
            }
        }
        list.event_ids.push(event_hash);
        list.last_event_ms = list.last_event_ms.max(ts);
        list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
        match event {
            Event::Impression(i) => {
                let dims = self.dimensions.intern(i, &mut |overflow| sink(overflow));
                if self.dimensions.disagree(list.impression, i, dims) {
                    sink(Notice::DimensionConflict);
                }
                for _ in 0..apply_impression(list, i, dims) {
                    sink(Notice::PositionTaken);
                }
            }
            Event::Judgment(j) => apply_judgment(list, j),
            Event::Ignored(_) => {}
        }
        if self.open_lists.store_at(key, at, list).is_err() {
            // The arena's 2^32 words are full, or the list has more sources
            // than a run records (see `store::MAX_SOURCES`): final now, like
            // an evicted list; later events of the key start a new one.
            self.open_lists.remove(key);
            self.close(key, list, true, sink);
        }
        Applied::Added
    }

    /// A judgment or an impression stamped `ts` whose list is final: within the horizon, the late policy decides; `None` when it
    /// is not late (it starts a new list).
    fn late_event(
        &mut self,
        key: ListKey,
        event: &Event,
        ts: i64,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Option<Applied> {
        let (gap, horizon) = (self.limits.gap_ms, self.limits.late_horizon_ms);
        let watermark = self.watermark_ms;
        let header = self.closed_lists.header(key)?;
        // It belongs to the final list only if, in event time, it falls
        // within a gap of the list's last event; past that it starts a new
        // list. And the list takes it only within the horizon after it
        // became final.
        let closed_at = header.last_event_ms.saturating_add(gap);
        if ts > closed_at || watermark > closed_at.saturating_add(horizon) {
            if self.seen_in_final(key, event_hash) {
                return Some(Applied::Duplicate);
            }
            self.forget_closed(key, sink);
            return None;
        }
        let mut list = self.scratch.take().unwrap_or_default();
        let applied = self.late_event_to(key, &mut list, event, event_hash, arrival_ms, sink);
        self.scratch = Some(list);
        Some(applied)
    }

    fn late_event_to(
        &mut self,
        key: ListKey,
        list: &mut OpenList,
        event: &Event,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let Some(start) = self.closed_lists.locate(key) else { return Applied::Late };
        let max_events = self.limits.max_events_per_list;
        let amend = self.limits.late_policy == LatePolicy::Amend;
        if amend && !self.withdrawn.contains(&key) {
            // The first late judgment since the last sweep: the list's
            // values leave the windows until then. One it refuses leaves
            // the list as it is, and is refused before the list is decoded.
            if let Some(refused) = self.closed_lists.refusal(start, event_hash, max_events) {
                return refused;
            }
            self.closed_lists.load_at(start, list);
            let buffers = &mut self.finals[0];
            if finalize(list, buffers)
                && let Some(old) = buffers.view(&self.dimensions, key)
            {
                sink(Notice::Withdrawn(old));
            }
            self.withdrawn.insert(key);
        }
        let applied = match event {
            Event::Impression(shown) if amend => self.late_shown(key, start, list, shown, event_hash, arrival_ms, sink),
            Event::Judgment(judgment) if amend => {
                self.late_judged(key, start, list, judgment, event_hash, arrival_ms, sink)
            }
            _ => self.late_dropped(key, start, list, event_hash, arrival_ms),
        };
        match applied {
            Applied::Added => {
                sink(if amend { Notice::LateAmended } else { Notice::LateDropped });
                Applied::Late
            }
            other => other,
        }
    }

    /// A late judgment amends its final list.
    #[allow(clippy::too_many_arguments)]
    fn late_judged(
        &mut self,
        key: ListKey,
        start: u32,
        list: &mut OpenList,
        judgment: &Judgment,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let max_events = self.limits.max_events_per_list;
        let edit = JudgmentEdit {
            doc: doc_hash(&judgment.doc_id),
            grade: judgment.grade,
            event: event_hash,
            max_events,
            // A late judgment does not make the list younger: it is final,
            // and its expiry follows its own events.
            ts_ms: i64::MIN,
            arrival_ms,
            source: None,
        };
        match self.closed_lists.judge_at(start, &edit) {
            Some(applied) => applied,
            None => {
                self.closed_lists.load_at(start, list);
                let applied = if list.event_ids.contains(&event_hash) {
                    Applied::Duplicate
                } else if list.event_ids.len() >= max_events {
                    Applied::TooLarge
                } else {
                    list.event_ids.push(event_hash);
                    list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
                    apply_judgment(list, judgment);
                    Applied::Added
                };
                if applied == Applied::Added && self.closed_lists.store_at(key, Some(start), list).is_err() {
                    // The arena is full: the list takes no more.
                    self.forget_closed(key, sink);
                }
                applied
            }
        }
    }

    /// A late impression (a UBI impression event, a page of a native list)
    /// shows its results in its final list, as it would have in the open
    /// one (the same steps as `apply`).
    #[allow(clippy::too_many_arguments)]
    fn late_shown(
        &mut self,
        key: ListKey,
        start: u32,
        list: &mut OpenList,
        shown: &Impression,
        event_hash: u64,
        arrival_ms: i64,
        sink: &mut impl FnMut(Notice),
    ) -> Applied {
        let bounds = ListBounds { events: self.limits.max_events_per_list, results: self.limits.max_results_per_list };
        match self.closed_lists.big_event(start, event_hash, i64::MIN, arrival_ms, None, bounds) {
            Some(Err(refused)) => return refused,
            Some(Ok(_)) => {
                let dims = self.dimensions.intern(shown, &mut |overflow| sink(overflow));
                let held = self.closed_lists.note_impression(start, impression_rank(shown), dims, shown.randomized);
                if self.dimensions.disagree(held, shown, dims) {
                    sink(Notice::DimensionConflict);
                }
                if let Some(big) = self.closed_lists.big_mut(key) {
                    for r in &shown.results {
                        let score = r.score.unwrap_or(f64::NAN);
                        if !big.show(doc_hash(&r.doc_id), r.position, score, team_code(r.team)) {
                            sink(Notice::PositionTaken);
                        }
                    }
                }
                return Applied::Added;
            }
            None => {}
        }
        self.closed_lists.load_at(start, list);
        if list.event_ids.contains(&event_hash) {
            return Applied::Duplicate;
        }
        if list.event_ids.len() >= bounds.events {
            return Applied::TooLarge;
        }
        list.event_ids.push(event_hash);
        list.last_arrival_ms = list.last_arrival_ms.max(arrival_ms);
        let dims = self.dimensions.intern(shown, &mut |overflow| sink(overflow));
        if self.dimensions.disagree(list.impression, shown, dims) {
            sink(Notice::DimensionConflict);
        }
        for _ in 0..apply_impression(list, shown, dims) {
            sink(Notice::PositionTaken);
        }
        if self.closed_lists.store_at(key, Some(start), list).is_err() {
            // The arena is full: the list takes no more.
            self.forget_closed(key, sink);
        }
        Applied::Added
    }

    /// A late event under `late.policy = "drop"`: not applied, but
    /// remembered, so that a re-delivery is a duplicate.
    fn late_dropped(
        &mut self,
        key: ListKey,
        start: u32,
        list: &mut OpenList,
        event_hash: u64,
        arrival_ms: i64,
    ) -> Applied {
        let max_events = self.limits.max_events_per_list;
        let bounds = ListBounds { events: max_events, results: usize::MAX };
        match self.closed_lists.big_event(start, event_hash, i64::MIN, arrival_ms, None, bounds) {
            Some(Ok(_)) => Applied::Added,
            Some(Err(refused)) => refused,
            None => {
                self.closed_lists.load_at(start, list);
                if list.event_ids.contains(&event_hash) {
                    Applied::Duplicate
                } else if list.event_ids.len() >= max_events {
                    Applied::TooLarge
                } else {
                    list.event_ids.push(event_hash);
                    if self.closed_lists.store_at(key, Some(start), list).is_err() {
                        self.closed_lists.remove(key);
                    }
                    Applied::Added
                }
            }
        }
    }

    /// Puts every withdrawn list back into the windows, with the late
    /// judgments it took (see [`Notice::Withdrawn`]): before the lists are
    /// dropped, or the windows would lack them for good.
    pub fn reinstate_withdrawn(&mut self, sink: &mut impl FnMut(Notice)) {
        if self.withdrawn.is_empty() {
            return;
        }
        let mut keys: Vec<ListKey> = self.withdrawn.drain().collect();
        keys.sort_unstable();
        for key in keys {
            self.reinstate(key, sink);
        }
    }

    fn reinstate(&mut self, key: ListKey, sink: &mut impl FnMut(Notice)) {
        let mut list = self.scratch.take().unwrap_or_default();
        if self.closed_lists.load(key, &mut list) {
            let buffers = &mut self.finals[0];
            if finalize(&mut list, buffers)
                && let Some(new) = buffers.view(&self.dimensions, key)
            {
                sink(Notice::Reinstated(new));
            }
        }
        self.scratch = Some(list);
    }

    /// Whether the final list of `key`, still remembered for late events,
    /// took the event `event_hash`.
    fn seen_in_final(&self, key: ListKey, event_hash: u64) -> bool {
        self.closed_lists
            .locate(key)
            .is_some_and(|start| self.closed_lists.refusal(start, event_hash, usize::MAX) == Some(Applied::Duplicate))
    }

    /// Forgets a final list, putting it back into the windows first if it
    /// was withdrawn.
    fn forget_closed(&mut self, key: ListKey, sink: &mut impl FnMut(Notice)) {
        if self.withdrawn.remove(&key) {
            self.reinstate(key, sink);
        }
        self.closed_lists.remove(key);
    }

    /// Finalizes the lists with the oldest last event, a batch at a time so
    /// that the scan is amortized over many insertions.
    fn evict_oldest(&mut self, sink: &mut impl FnMut(Notice)) {
        let mut list = self.scratch.take().unwrap_or_default();
        for (key, _) in oldest(&self.open_lists) {
            if self.open_lists.take(key, &mut list) {
                self.close(key, &mut list, true, sink);
            }
        }
        self.scratch = Some(list);
    }

    /// Finalizes lists whose last event is a gap older than the watermark
    /// (event time), or, when `now_ms` is given, whose last arrival is a gap
    /// older than that processing time (idle partitions; checked at most
    /// every eighth of the gap, at most 5 s). Final lists past the late
    /// horizon are forgotten.
    pub fn finalize_expired(&mut self, now_ms: Option<i64>, sink: &mut impl FnMut(Notice)) {
        // Before any final list is forgotten below.
        self.reinstate_withdrawn(sink);
        let gap = self.limits.gap_ms;
        let horizon = self.limits.late_horizon_ms;
        let watermark = self.watermark_ms;
        self.next_sweep_ms = watermark.saturating_add(SWEEP_EVERY_MS);
        let interval = processing_scan_interval(gap);
        let scan_at = now_ms
            .filter(|_| !self.clock_paused)
            .filter(|&now| self.last_scan_ms.is_none_or(|last| now >= last.saturating_add(interval) || now < last));
        // Event time: last event + gap ≤ watermark.
        let mut expired = match watermark {
            i64::MIN => Vec::new(),
            w => self.open_lists.due(w.saturating_sub(gap)),
        };
        if let Some(now) = scan_at {
            self.last_scan_ms = Some(now);
            expired.extend(
                self.open_lists.headers().filter(|l| l.last_arrival_ms.saturating_add(gap) <= now).map(|l| l.key),
            );
        }
        let mut list = self.scratch.take().unwrap_or_default();
        for key in expired {
            if self.open_lists.take(key, &mut list) {
                self.close(key, &mut list, false, sink);
            }
        }
        self.scratch = Some(list);
        // Final lists are forgotten once the horizon has passed too.
        if watermark > i64::MIN {
            for key in self.closed_lists.due(watermark.saturating_sub(gap).saturating_sub(horizon).saturating_sub(1)) {
                self.closed_lists.remove(key);
            }
        }
        if let Some(now) = scan_at {
            self.closed_lists.retain(|l| l.last_arrival_ms.saturating_add(gap).saturating_add(horizon) > now);
        }
    }

    /// For each source, the smallest offset still held by an open list:
    /// the at-least-once commit point is the lesser of this and the next
    /// offset to consume.
    pub fn min_open_offsets(&self) -> Vec<Source> {
        let mut min = Vec::new();
        for o in self.open_lists.sources() {
            store::fold_source(&mut min, o);
        }
        min
    }

    /// [`Self::min_open_offsets`] a slice of `lists` at a time, so that a
    /// million open lists do not hold the consumer at once: `None` until
    /// the walk is through, then never above what `min_open_offsets` would
    /// say at that moment (see [`store::ListStore::scan_sources`]).
    pub fn scan_min_open_offsets(&mut self, lists: usize) -> Option<Vec<Source>> {
        self.open_lists.scan_sources(lists)
    }

    /// Finalizes every open list (shutdown without checkpoints, end of replay).
    pub fn finalize_all(&mut self, sink: &mut impl FnMut(Notice)) {
        self.reinstate_withdrawn(sink);
        let mut list = self.scratch.take().unwrap_or_default();
        for key in self.open_lists.keys() {
            if self.open_lists.take(key, &mut list) {
                self.close(key, &mut list, false, sink);
            }
        }
        self.scratch = Some(list);
    }

    fn close(&mut self, key: ListKey, list: &mut OpenList, evicted: bool, sink: &mut impl FnMut(Notice)) {
        let buffers = &mut self.finals[0];
        match finalize(list, buffers).then(|| buffers.view(&self.dimensions, key)).flatten() {
            Some(f) => {
                sink(if evicted { Notice::Evicted(f) } else { Notice::Final(f) });
                if self.limits.late_horizon_ms > 0 {
                    if self.closed_lists.len() >= self.limits.max_open_lists {
                        // Bounded like the open lists: forget the oldest.
                        for (k, _) in oldest(&self.closed_lists) {
                            self.forget_closed(k, sink);
                            sink(Notice::Forgotten);
                        }
                    }
                    list.offsets.clear();
                    // A list too large to keep takes no late judgments.
                    let _ = self.closed_lists.store(key, list);
                }
            }
            None => sink(Notice::Orphan),
        }
    }
}

/// The keys of the 1/64 of `lists` with the oldest last event (at least
/// one): evicting a batch at a time amortizes the scan.
fn oldest(lists: &ListStore) -> Vec<(ListKey, i64)> {
    let batch = (lists.len() / 64).max(1);
    let mut ages: Vec<(i64, ListKey)> = lists.headers().map(|l| (l.last_event_ms, l.key)).collect();
    if batch < ages.len() {
        ages.select_nth_unstable(batch);
        ages.truncate(batch);
    }
    ages.sort_unstable();
    ages.into_iter().map(|(t, k)| (k, t)).collect()
}

/// Set on the rank of an impression that does not define its list (a UBI
/// `impression` event): event times are below 2^48 (year 9999), so any
/// impression that defines the list ranks before any that does not.
const NOT_DEFINING: i64 = 1 << 62;
/// Set on the rank of an impression that defines its list without saying
/// what it showed (a UBI query without hit ids): it ranks after those
/// that do, and a list decided by it that no result reaches is not scored.
const RESULTS_UNKNOWN: i64 = 1 << 61;

/// What decides which impression gives a list its time and dimensions:
/// the lowest rank, i.e. the earliest of those that define the list, else
/// the earliest of the others. Stored in place of the impression time;
/// [`impression_time`] reads the time back.
fn impression_rank(impression: &Impression) -> i64 {
    impression.timestamp_ms
        | match (impression.defines_list, impression.results_unknown) {
            (false, _) => NOT_DEFINING,
            (true, true) => RESULTS_UNKNOWN,
            (true, false) => 0,
        }
}

/// The impression time of a stored rank.
fn impression_time(rank: i64) -> i64 {
    rank & !(NOT_DEFINING | RESULTS_UNKNOWN)
}

/// Returns how many results were dropped because another document holds
/// their position.
fn apply_impression(list: &mut OpenList, impression: &Impression, dims: DimsId) -> usize {
    list.randomized |= impression.randomized;
    // The earliest impression of the list that defines it decides its time
    // and dimensions (see `impression_rank`).
    let rank = impression_rank(impression);
    match list.impression {
        Some((t, _)) if t <= rank => {}
        _ => list.impression = Some((rank, dims)),
    }
    // Sized once: growing by doubling would leave up to half of it unused
    // for the list's whole life.
    list.shown.reserve_exact(impression.results.len());
    let mut taken = 0;
    for r in &impression.results {
        let doc = doc_hash(&r.doc_id);
        // Pages and re-deliveries merge by position; the first document
        // seen at a position keeps it.
        if let Some(held) = list.shown.iter().find(|s| s.position == r.position) {
            taken += usize::from(held.doc != doc);
            continue;
        }
        list.shown.push(ShownDoc {
            doc,
            position: r.position,
            score: r.score.unwrap_or(f64::NAN),
            team: team_code(r.team),
        });
    }
    taken
}

fn apply_judgment(list: &mut OpenList, judgment: &Judgment) {
    let doc = doc_hash(&judgment.doc_id);
    match list.judged.iter_mut().find(|(d, _)| *d == doc) {
        Some((_, g)) => *g = (*g).max(judgment.grade),
        None => list.judged.push((doc, judgment.grade)),
    }
}

/// Fills `into` with what `list` is scored from; false when nothing was
/// shown (an orphan).
fn finalize(list: &mut OpenList, into: &mut FinalBuffers) -> bool {
    let Some((rank, dims)) = list.impression else { return false };
    into.dims = dims;
    into.impression_ms = impression_time(rank);
    into.randomized = list.randomized;
    into.results_unknown = rank & RESULTS_UNKNOWN != 0 && list.shown.is_empty();
    // In place: the order of `shown` means nothing else, and a final list
    // kept for late judgments is finalized again from the same state.
    list.shown.sort_unstable_by_key(|s| s.position);
    into.shown.clear();
    into.scores.clear();
    into.scored = true;
    into.teams.clear();
    into.interleaved = false;
    let linear = list.shown.len() <= LINEAR_MAX && list.judged.len() <= LINEAR_MAX;
    if !linear {
        into.seen.clear();
        into.grades.clear();
        into.grades.extend(list.judged.iter().copied());
    }
    for (i, s) in list.shown.iter().enumerate() {
        // A document shown at two positions counts at its first.
        let (first, grade) = if linear {
            (
                !list.shown[..i].iter().any(|earlier| earlier.doc == s.doc),
                list.judged.iter().find(|(d, _)| *d == s.doc).map_or(0, |(_, g)| *g),
            )
        } else {
            (into.seen.insert(s.doc), into.grades.get(&s.doc).copied().unwrap_or(0))
        };
        if !first {
            continue;
        }
        into.shown.push(grade);
        into.scored &= !s.score.is_nan();
        into.scores.push(s.score);
        into.interleaved |= s.team != 0;
        into.teams.push(team_of(s.team));
    }
    into.judged.clear();
    into.judged.extend(list.judged.iter().map(|(_, g)| *g));
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{DecodeLimits, decode};

    impl Assembler {
        fn ingest_t(
            &mut self,
            e: &Event,
            arrival: i64,
            source: Option<Source>,
            sink: &mut impl FnMut(Notice),
        ) -> Applied {
            self.ingest(e, "t", arrival, source, sink)
        }
    }

    /// A [`FinalList`] that outlives the assembler's buffers.
    #[derive(Debug, Clone, PartialEq)]
    struct Fin {
        dims: Arc<[String]>,
        impression_ms: i64,
        shown: Vec<Grade>,
        scores: Option<Vec<f64>>,
        judged: Vec<Grade>,
        randomized: bool,
    }

    impl From<FinalList<'_>> for Fin {
        fn from(f: FinalList<'_>) -> Fin {
            Fin {
                dims: f.dims.clone(),
                impression_ms: f.impression_ms,
                shown: f.shown.to_vec(),
                scores: f.scores.map(<[f64]>::to_vec),
                judged: f.judged.to_vec(),
                randomized: f.randomized,
            }
        }
    }

    /// [`Notice`], owned.
    #[derive(Debug, Clone, PartialEq)]
    enum Got {
        Final(Fin),
        Evicted(Fin),
        Orphan,
        Withdrawn(Fin),
        Reinstated(Fin),
        LateAmended,
        LateDropped,
        DimensionOverflow(usize),
        CombinationOverflow,
        PositionTaken,
        DimensionConflict,
        Forgotten,
    }

    impl From<Notice<'_>> for Got {
        fn from(c: Notice<'_>) -> Got {
            match c {
                Notice::Final(f) => Got::Final(f.into()),
                Notice::Evicted(f) => Got::Evicted(f.into()),
                Notice::Orphan => Got::Orphan,
                Notice::Withdrawn(f) => Got::Withdrawn(f.into()),
                Notice::Reinstated(f) => Got::Reinstated(f.into()),
                Notice::LateAmended => Got::LateAmended,
                Notice::LateDropped => Got::LateDropped,
                Notice::DimensionOverflow(label) => Got::DimensionOverflow(label),
                Notice::CombinationOverflow => Got::CombinationOverflow,
                Notice::PositionTaken => Got::PositionTaken,
                Notice::DimensionConflict => Got::DimensionConflict,
                Notice::Forgotten => Got::Forgotten,
            }
        }
    }

    fn ev(json: &str) -> Event<'_> {
        decode(json.as_bytes(), &DecodeLimits::default()).unwrap()
    }

    fn imp(id: &str, session: &str, ts: i64, docs: &[(&str, u32)]) -> String {
        let results: Vec<String> = docs
            .iter()
            .map(|(d, p)| format!(r#"{{"doc_id":"{d}","position":{p},"score":{}}}"#, 10u32.wrapping_sub(*p)))
            .collect();
        format!(
            r#"{{"type":"impression","event_id":"{id}","session_id":"{session}","query_id":"q","timestamp":{ts},"results":[{}],"dimensions":{{"ranker":"a"}}}}"#,
            results.join(",")
        )
    }

    /// A UBI `impression` event of list (s, q): `doc` shown at 0-based `ordinal`.
    fn shown(id: &str, ms: i64, doc: &str, ordinal: u32) -> String {
        format!(
            r#"{{"action_name":"impression","client_id":"s","query_id":"q","timestamp":{ms},"message":"{id}","event_attributes":{{"object":{{"object_id":"{doc}"}},"position":{{"ordinal":{ordinal}}}}}}}"#
        )
    }

    fn judg(id: &str, session: &str, ts: i64, doc: &str, grade: i32) -> String {
        format!(
            r#"{{"type":"judgment","event_id":"{id}","session_id":"{session}","query_id":"q","doc_id":"{doc}","grade":{grade},"timestamp":{ts}}}"#
        )
    }

    fn collect(asm: &mut Assembler, events: &[String]) -> Vec<Got> {
        let mut out = Vec::new();
        for e in events {
            asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.finalize_all(&mut |c| out.push(c.into()));
        out
    }

    fn final_of(c: &Got) -> Option<&Fin> {
        match c {
            Got::Final(f) | Got::Evicted(f) => Some(f),
            _ => None,
        }
    }

    #[test]
    fn judgments_before_impression_pages_merge_duplicates_once() {
        let mut asm = Assembler::new(30_000, vec!["ranker".into(), "market".into()]);
        let events = vec![
            judg("j1", "s", 1_000, "d2", 1),
            imp("i2", "s", 2_000, &[("d3", 3)]),
            imp("i1", "s", 1_500, &[("d1", 1), ("d2", 2)]),
            judg("j2", "s", 3_000, "d2", 3),
            judg("j2", "s", 3_000, "d2", 3),
            judg("j3", "s", 3_100, "d1", 0),
            judg("j4", "s", 3_200, "d9", 2),
        ];
        let out = collect(&mut asm, &events);
        assert_eq!(out.len(), 1);
        let f = final_of(&out[0]).unwrap().clone();
        assert_eq!(f.impression_ms, 1_500);
        assert_eq!(f.shown, [0, 3, 0]);
        assert_eq!(f.scores, Some(vec![9.0, 8.0, 7.0]));
        let mut judged = f.judged.clone();
        judged.sort();
        assert_eq!(judged, [0, 2, 3]);
        assert_eq!(&*f.dims, ["a", MISSING_DIMENSION]);
    }

    /// An event delivered again with a new time more than a gap after its
    /// list (a producer's retry that stamps the time anew) counts once
    /// while the final list is remembered (`late.horizon`): it is a
    /// duplicate of the final list's, not a list of its own (an
    /// impression) or an orphan (a judgment).
    #[test]
    fn a_redelivery_stamped_anew_after_the_gap_is_a_duplicate() {
        // Final lists are remembered for the late horizon (1m) only.
        let mut asm = Assembler::with_limits(AssemblyLimits::default(), vec!["ranker".into()], None);
        let mut out = Vec::new();
        let mut ingest = |asm: &mut Assembler, e: &str| asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(ingest(&mut asm, &imp("i1", "s", 1_000, &[("d1", 1), ("d2", 2)])), Applied::Added);
        assert_eq!(ingest(&mut asm, &judg("j1", "s", 3_000, "d2", 2)), Applied::Added);
        assert_eq!(ingest(&mut asm, &imp("i1", "s", 61_000, &[("d1", 1), ("d2", 2)])), Applied::Duplicate);
        assert_eq!(ingest(&mut asm, &judg("j1", "s", 62_000, "d2", 2)), Applied::Duplicate);
        // Another event of the key that late: a list of its own, as before.
        assert_eq!(ingest(&mut asm, &imp("i2", "s", 63_000, &[("d3", 1)])), Applied::Added);
        asm.finalize_all(&mut |c| out.push(c.into()));
        let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
        assert_eq!(finals.len(), 2, "{out:?}");
        assert_eq!(finals[0].shown.len(), 2);
        assert_eq!(finals[1].shown.len(), 1);
    }

    /// Catching up, the impressions topic runs ahead of the judgments
    /// topic: an impression re-sent with a new time more than a gap after
    /// its list comes before the list's judgments. It must not close the
    /// list, or those judgments become late amendments where the batch
    /// engine, in time order, applies them to the list.
    #[test]
    fn a_redelivery_stamped_anew_does_not_close_its_list_before_a_lane_behind() {
        let mut asm = Assembler::new(10_000, vec!["ranker".into()]);
        asm.expect_lanes(["impressions", "judgments"]);
        let mut out = Vec::new();
        let mut ingest =
            |asm: &mut Assembler, e: &str, lane: &str| asm.ingest(&ev(e), lane, 100, None, &mut |c| out.push(c.into()));
        let i1 = imp("i1", "s", 1_000, &[("d1", 1), ("d2", 2)]);
        assert_eq!(ingest(&mut asm, &i1, "impressions"), Applied::Added);
        let again = imp("i1", "s", 40_000, &[("d1", 1), ("d2", 2)]);
        assert_eq!(ingest(&mut asm, &again, "impressions"), Applied::Duplicate);
        assert_eq!(ingest(&mut asm, &judg("j1", "s", 2_000, "d2", 3), "judgments"), Applied::Added);
        asm.finalize_all(&mut |c| out.push(c.into()));
        assert_eq!(out.len(), 1, "one final list, nothing late: {out:?}");
        let f = final_of(&out[0]).unwrap();
        assert_eq!((f.shown.len(), f.judged.iter().filter(|&&g| g > 0).count()), (2, 1), "{f:?}");
    }

    #[test]
    fn an_empty_dimension_value_is_unknown() {
        let mut asm = Assembler::new(30_000, vec!["ranker".into()]);
        let events = [imp("i1", "s", 1_000, &[("d1", 1)]).replace(r#""ranker":"a""#, r#""ranker":"""#)];
        let out = collect(&mut asm, &events);
        assert_eq!(out.len(), 1);
        assert_eq!(&*final_of(&out[0]).unwrap().dims, [MISSING_DIMENSION]);
    }

    #[test]
    fn another_document_at_a_taken_position_is_dropped_and_counted() {
        // Compact lists, and lists past BIG_RUN_WORDS (250 results), which
        // index positions in a hash map: the same rule, the same count.
        for size in [2u32, 250] {
            let mut asm = Assembler::new(30_000, vec![]);
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            // Pages of at most 200 results (the decoder's limit).
            let (first, rest) = docs.split_at(docs.len().min(200));
            let events = vec![
                imp("i1", "s", 1_000, first),
                imp("i1b", "s", 1_000, rest),
                // A page sent again under a new event id: the same
                // documents at the same positions, nothing to count.
                imp("i2", "s", 1_100, first),
                // A second search of the session under the same key: two
                // positions taken by other documents, one new position.
                imp("i3", "s", 1_200, &[("x1", 1), ("x2", 2), ("x3", size + 1)]),
            ];
            let out = collect(&mut asm, &events);
            let taken = out.iter().filter(|c| **c == Got::PositionTaken).count();
            assert_eq!(taken, 2, "size {size}");
            let f = out.iter().find_map(final_of).unwrap();
            assert_eq!(f.shown.len(), size as usize + 1, "size {size}: the first document keeps each position");
        }
    }

    #[test]
    fn a_gap_splits_lists_and_orphans_are_reported() {
        let mut asm = Assembler::new(10_000, vec!["ranker".into()]);
        let events = vec![
            imp("i1", "s", 0, &[("d1", 1)]),
            judg("j1", "s", 5_000, "d1", 1),
            // 10.001 s after the last event: a new list.
            imp("i2", "s", 15_001, &[("d1", 1)]),
            judg("j9", "other", 0, "d1", 1),
        ];
        let out = collect(&mut asm, &events);
        let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
        assert_eq!(finals.len(), 2);
        assert_eq!(finals[0].shown, [1]);
        assert_eq!(out.iter().filter(|c| **c == Got::Orphan).count(), 1);
    }

    #[test]
    fn lists_close_as_the_watermark_passes_them_without_a_tick() {
        let mut asm = Assembler::new(10_000, vec![]);
        let mut out: Vec<Got> = Vec::new();
        asm.ingest_t(&ev(&imp("i1", "a", 0, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        asm.ingest_t(&ev(&imp("i2", "b", 5_000, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        assert!(out.is_empty());
        // The watermark reaches 10 s: list a's gap has elapsed, and the
        // event that moved it closes a, with no finalize_expired call.
        asm.ingest_t(&ev(&imp("i3", "c", 10_000, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 1, "list a closed by ingest");
        assert_eq!(asm.open_lists(), 2);
        // A backlog read fast (event time far ahead of the clock) keeps
        // only about a gap of lists open, not everything read since a tick.
        for i in 0..1_000i64 {
            let session = format!("s{i}");
            asm.ingest_t(&ev(&imp(&format!("j{i}"), &session, 11_000 + i * 100, &[("d", 1)])), 100, None, &mut |c| {
                out.push(c.into())
            });
        }
        assert_eq!(out.len(), 1 + 2 + 1_000 - asm.open_lists());
        assert!((100..=111).contains(&asm.open_lists()), "{} open", asm.open_lists());
    }

    #[test]
    fn expiry_by_watermark_and_by_processing_time() {
        let mut asm = Assembler::new(10_000, vec![]);
        let mut out: Vec<Got> = Vec::new();
        asm.ingest_t(&ev(&imp("i1", "a", 0, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        asm.ingest_t(&ev(&imp("i2", "b", 9_999, &[("d", 1)])), 100, None, &mut |c| out.push(c.into()));
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 0);
        asm.ingest_t(&ev(&imp("i3", "c", 10_000, &[("d", 1)])), 100, Some(Source { id: 7, offset: 42 }), &mut |c| {
            out.push(c.into())
        });
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 1, "list a closed by the watermark");
        assert_eq!(asm.open_lists(), 2);
        assert_eq!(asm.min_open_offsets(), [Source { id: 7, offset: 42 }]);
        asm.finalize_expired(Some(10_100), &mut |c| out.push(c.into()));
        assert_eq!(out.len(), 3, "idle: processing time closes the rest");
    }

    /// The daemon's startup: one fetch brought a partition's impressions
    /// (spanning more than a gap) before any of its judgments.
    #[test]
    fn a_lane_that_has_not_delivered_yet_holds_event_time_closing_back() {
        for expected in [false, true] {
            let mut asm = Assembler::new(3_000, vec![]);
            if expected {
                asm.expect_lanes(["impressions", "judgments"]);
            }
            let mut out = Vec::new();
            for (i, ts) in [0, 2_000, 4_000, 6_000].into_iter().enumerate() {
                let e = imp(&format!("i{i}"), &format!("s{i}"), ts, &[("d1", 1)]);
                asm.ingest(&ev(&e), "impressions", 100, None, &mut |c| out.push(c.into()));
            }
            // A tick between the two batches.
            asm.finalize_expired(None, &mut |c| out.push(c.into()));
            asm.ingest(&ev(&judg("j0", "s0", 1, "d1", 2)), "judgments", 100, None, &mut |c| out.push(c.into()));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let orphans = out.iter().filter(|c| **c == Got::Orphan).count();
            let s0 = out.iter().filter_map(final_of).find(|f| f.impression_ms == 0).map(|f| f.shown.clone());
            if expected {
                assert_eq!((orphans, s0), (0, Some(vec![2])), "the judgment joins its list");
            } else {
                // What happened before the daemon declared its lanes: the
                // impressions alone moved the watermark past s0's gap.
                assert_eq!((orphans, s0), (1, Some(vec![0])));
            }
        }
    }

    fn limits(policy: LatePolicy) -> AssemblyLimits {
        AssemblyLimits {
            gap_ms: 10_000,
            max_open_lists: 1_000,
            late_policy: policy,
            late_horizon_ms: 60_000,
            max_events_per_list: usize::MAX,
            max_results_per_list: usize::MAX,
        }
    }

    #[test]
    fn late_judgments_amend_or_drop_within_the_horizon() {
        for policy in [LatePolicy::Amend, LatePolicy::Drop] {
            let mut asm = Assembler::with_limits(limits(policy), vec![], None);
            let mut out = Vec::new();
            let mut feed = |asm: &mut Assembler, e: String| {
                asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
                asm.finalize_expired(None, &mut |c| out.push(c.into()));
            };
            feed(&mut asm, imp("i1", "s", 0, &[("d1", 1), ("d2", 2)]));
            feed(&mut asm, judg("j1", "s", 1_000, "d1", 1));
            // Another list moves the watermark past 1 s + gap: s is final.
            feed(&mut asm, imp("i2", "t", 20_000, &[("d1", 1)]));
            // Belongs to s in event time (within a gap of its last event), arrives late.
            feed(&mut asm, judg("j2", "s", 5_000, "d2", 3));
            // A re-delivery of it changes nothing.
            feed(&mut asm, judg("j2", "s", 5_000, "d2", 3));
            // More than a gap after s's last event: a new list (an orphan).
            feed(&mut asm, judg("j3", "s", 12_000, "d1", 1));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals[0].shown, [1, 0]);
            let amended = out.iter().filter(|c| **c == Got::LateAmended).count();
            let dropped = out.iter().filter(|c| **c == Got::LateDropped).count();
            let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
            match policy {
                LatePolicy::Amend => {
                    assert_eq!((amended, dropped), (1, 0));
                    let [Got::Withdrawn(old), Got::Reinstated(new)] = moved[..] else { panic!("{moved:?}") };
                    assert_eq!((old.shown.as_slice(), new.shown.as_slice()), ([1, 0].as_slice(), [1, 3].as_slice()));
                }
                LatePolicy::Drop => assert_eq!((amended, dropped, moved.len()), (0, 1, 0)),
            }
            assert_eq!(out.iter().filter(|c| **c == Got::Orphan).count(), 1, "{policy:?}");
        }
    }

    /// A page of a native list that arrives after its list is final, but
    /// stamped within a gap of the list's last event, belongs to that list
    /// as a late judgment does: amended into it (or dropped, by policy)
    /// exactly as the list would have been had it come in time order, not
    /// a second list of the same search. On a compact list and on a big
    /// one; a late page with other dimensions is a conflict, as in time.
    #[test]
    fn late_pages_of_a_native_list_amend_it_as_in_time_order() {
        let page = |id: &str, ts: i64, docs: &[(String, u32)], ranker: &str, randomized: bool| {
            let results: Vec<String> =
                docs.iter().map(|(d, p)| format!(r#"{{"doc_id":"{d}","position":{p},"score":1}}"#)).collect();
            format!(
                r#"{{"type":"impression","event_id":"{id}","session_id":"s","query_id":"q","timestamp":{ts},"results":[{}],"randomized":{randomized},"dimensions":{{"ranker":"{ranker}"}}}}"#,
                results.join(",")
            )
        };
        for (size, policy) in
            [(3u32, LatePolicy::Amend), (3, LatePolicy::Drop), (300, LatePolicy::Amend), (300, LatePolicy::Drop)]
        {
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            // Pages of at most 200 results (the decoder's limit); the late
            // one shows one more result, randomized, at 2 s.
            let mut pages = vec![page("p1", 0, &docs[..docs.len().min(200)], "a", false)];
            if size > 200 {
                pages.push(page("p1b", 0, &docs[200..], "a", false));
            }
            let late = page("p2", 2_000, &[(format!("d{}", size + 1), size + 1)], "a", true);
            let conflict = page("p3", 2_500, &[(format!("d{}", size + 2), size + 2)], "b", false);
            let click = judg("j1", "s", 1_000, "d1", 1);
            let other = imp("t1", "t", 20_000, &[("d1", 1)]);
            let run = |order: &[&String]| {
                let mut asm = Assembler::with_limits(limits(policy), vec!["ranker".into()], None);
                let mut out = Vec::new();
                for e in order {
                    asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
                    asm.finalize_expired(None, &mut |c| out.push(c.into()));
                }
                asm.finalize_all(&mut |c| out.push(c.into()));
                out
            };
            let mut arrived: Vec<&String> = pages.iter().collect();
            // `other` moves the watermark past 1 s + gap: s is final.
            arrived.extend([&click, &other, &late, &conflict, &late]);
            let out = run(&arrived);
            let mut in_time: Vec<&String> = pages.iter().collect();
            in_time.extend([&click, &late, &conflict, &other]);
            let expected = run(&in_time);
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals.len(), 2, "{size} {policy:?}: one list per search: {finals:?}");
            let count = |out: &[Got], g: Got| out.iter().filter(|c| **c == g).count();
            let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
            match policy {
                LatePolicy::Amend => {
                    // The two pages, not their re-delivery.
                    assert_eq!(count(&out, Got::LateAmended), 2, "{size}");
                    assert_eq!(count(&out, Got::DimensionConflict), 1, "{size}");
                    assert_eq!(count(&expected, Got::DimensionConflict), 1, "{size}");
                    let Some(Got::Reinstated(now)) = moved.last() else { panic!("{size}: {moved:?}") };
                    let in_order = expected.iter().filter_map(final_of).find(|f| f.shown.len() > 1).unwrap();
                    assert_eq!(now, in_order, "{size}: amended as in time order");
                    assert!(now.randomized && now.shown.len() == size as usize + 2, "{size}: {now:?}");
                }
                LatePolicy::Drop => {
                    assert_eq!((count(&out, Got::LateDropped), moved.len()), (2, 0), "{size}");
                    assert!(!finals[0].randomized && finals[0].shown.len() == size as usize, "{size}");
                }
            }
            assert_eq!(count(&out, Got::Orphan), 0, "{size} {policy:?}");
        }
    }

    /// A UBI impression event whose list is final belongs to it as a late
    /// judgment does: amended into it (or dropped, by policy), not a list
    /// of its own without a query that takes the clicks after it. On a
    /// compact list and on one past BIG_RUN_WORDS (250 results), which
    /// indexes its positions in a hash map.
    #[test]
    fn late_impression_events_amend_their_final_list() {
        for (size, policy) in
            [(2u32, LatePolicy::Amend), (2, LatePolicy::Drop), (300, LatePolicy::Amend), (300, LatePolicy::Drop)]
        {
            let mut asm = Assembler::with_limits(limits(policy), vec![], None);
            let mut out = Vec::new();
            let limits = DecodeLimits::default();
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            let extra = format!("d{}", size + 1);
            let mut feed = |asm: &mut Assembler, e: &Event| {
                asm.ingest_t(e, 0, None, &mut |c| out.push(c.into()));
                asm.finalize_expired(None, &mut |c| out.push(c.into()));
            };
            // Pages of at most 200 results (the decoder's limit).
            let (first, rest) = docs.split_at(docs.len().min(200));
            feed(&mut asm, &ev(&imp("i1", "s", 0, first)));
            if !rest.is_empty() {
                feed(&mut asm, &ev(&imp("i1b", "s", 0, rest)));
            }
            feed(&mut asm, &ev(&judg("j1", "s", 1_000, "d1", 1)));
            // Another list moves the watermark past 1 s + gap: s is final.
            feed(&mut asm, &ev(&imp("i2", "t", 20_000, &[("d1", 1)])));
            // One more result (0-based ordinal `size`), shown at 5 s, arrives
            // late; then a click on it.
            let late = shown("e1", 5_000, &extra, size);
            let late = crate::event::ubi::decode(crate::event::Format::UbiEvents, late.as_bytes(), &limits).unwrap();
            feed(&mut asm, &late);
            feed(&mut asm, &late);
            feed(&mut asm, &ev(&judg("j2", "s", 5_500, &extra, 3)));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals.len(), 2, "{size} {policy:?}: no list of its own: {finals:?}");
            let amended = out.iter().filter(|c| **c == Got::LateAmended).count();
            let dropped = out.iter().filter(|c| **c == Got::LateDropped).count();
            let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
            match policy {
                LatePolicy::Amend => {
                    // The re-delivery is a duplicate. The list leaves the
                    // windows and comes back at each sweep: with the extra
                    // result shown last, then with its grade.
                    assert_eq!((amended, dropped), (2, 0), "{size}");
                    let shown: Vec<&[Grade]> = moved
                        .iter()
                        .map(|g| match g {
                            Got::Withdrawn(f) | Got::Reinstated(f) => f.shown.as_slice(),
                            _ => unreachable!(),
                        })
                        .collect();
                    let grades = |n: usize, last: Grade| {
                        let mut g = vec![0; n];
                        g[0] = 1;
                        g[n - 1] = last.max(g[n - 1]);
                        g
                    };
                    let n = size as usize;
                    let expected = [grades(n, 0), grades(n + 1, 0), grades(n + 1, 0), grades(n + 1, 3)];
                    assert_eq!(shown, expected.iter().map(Vec::as_slice).collect::<Vec<_>>(), "{size}");
                }
                LatePolicy::Drop => assert_eq!((amended, dropped, moved.len()), (0, 2, 0), "{size}"),
            }
            assert_eq!(out.iter().filter(|c| **c == Got::Orphan).count(), 0, "{size} {policy:?}");
        }
    }

    #[test]
    fn a_flood_of_sessions_evicts_the_oldest_lists() {
        let mut l = limits(LatePolicy::Drop);
        l.max_open_lists = 4;
        l.late_horizon_ms = 0;
        let mut asm = Assembler::with_limits(l, vec![], None);
        let mut out = Vec::new();
        for n in 0..10 {
            asm.ingest_t(&ev(&imp(&format!("i{n}"), &format!("s{n}"), n, &[("d", 1)])), 0, None, &mut |c| {
                out.push(c.into())
            });
            assert!(asm.open_lists() <= 4);
        }
        let evicted: Vec<i64> = out
            .iter()
            .filter_map(|c| match c {
                Got::Evicted(f) => Some(f.impression_ms),
                _ => None,
            })
            .collect();
        assert_eq!(evicted, [0, 1, 2, 3, 4, 5], "oldest first");
        assert_eq!(asm.closed_lists(), 0, "no late horizon: nothing remembered");
    }

    /// A page of a list under another ranker than its first page is
    /// counted as a conflict, on a compact list and on a big one alike; the
    /// earliest page's ranker is kept. Pages that agree, a page that sends
    /// no ranker, and UBI `impression` events (which define nothing, and
    /// carry no ranker here) are not. An earlier page arriving second is
    /// counted, and its ranker taken.
    #[test]
    fn an_impression_under_other_dimensions_than_its_list_is_a_conflict() {
        for size in [2u32, 300] {
            let mut asm = Assembler::with_limits(limits(LatePolicy::Amend), vec!["ranker".into()], None);
            let mut out = Vec::new();
            let docs: Vec<(String, u32)> = (1..=size).map(|p| (format!("d{p}"), p)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            let (first, rest) = docs.split_at(docs.len().min(200));
            let mut events = vec![imp("i1", "s", 1_000, first)];
            if !rest.is_empty() {
                events.push(imp("i1b", "s", 1_000, rest));
            }
            let other = format!("d{}", size + 1);
            let b = imp("i1c", "s", 1_000, &[(&other, size + 1)]).replace(r#""ranker":"a""#, r#""ranker":"b""#);
            events.push(b);
            // A page that sends no ranker agrees with any.
            let quiet = format!("d{}", size + 3);
            events.push(imp("i1d", "s", 1_000, &[(&quiet, size + 3)]).replace(r#","dimensions":{"ranker":"a"}"#, ""));
            // List t: its earliest page, under ranker b, comes second: it
            // disagrees with the page held, and the list takes its ranker.
            events.push(imp("t2", "t", 2_000, &[("x", 2)]));
            events.push(imp("t1", "t", 1_500, &[("w", 1)]).replace(r#""ranker":"a""#, r#""ranker":"b""#));
            for e in &events {
                asm.ingest_t(&ev(e), 0, None, &mut |c| out.push(c.into()));
            }
            let limits = DecodeLimits::default();
            let ubi = shown("e1", 1_500, &format!("d{}", size + 2), size + 1);
            let ubi = crate::event::ubi::decode(crate::event::Format::UbiEvents, ubi.as_bytes(), &limits).unwrap();
            asm.ingest_t(&ubi, 0, None, &mut |c| out.push(c.into()));
            asm.finalize_all(&mut |c| out.push(c.into()));
            let conflicts = out.iter().filter(|c| **c == Got::DimensionConflict).count();
            assert_eq!(conflicts, 2, "{size} results");
            let finals: Vec<&Fin> = out.iter().filter_map(final_of).collect();
            assert_eq!(finals.len(), 2, "{size}");
            let s = finals.iter().find(|f| f.impression_ms == 1_000).expect("list s");
            assert_eq!(s.dims.as_ref(), ["a".to_string()], "{size}");
            assert_eq!(s.shown.len(), size as usize + 3, "{size}: every page and the UBI result shown");
            let t = finals.iter().find(|f| f.impression_ms == 1_500).expect("list t, at its earliest page");
            assert_eq!(t.dims.as_ref(), ["b".to_string()], "{size}");
        }
    }

    /// Lists kept for late judgments are bounded by `session.max_open_lists`
    /// as the open ones are: a flood of lists evicted within the horizon
    /// keeps at most that many, the oldest forgotten (a late judgment for
    /// one of them starts a list of its own), the newest still amended.
    #[test]
    fn lists_kept_for_late_judgments_are_capped_like_open_ones() {
        let mut l = limits(LatePolicy::Amend);
        l.max_open_lists = 4;
        let mut asm = Assembler::with_limits(l, vec![], None);
        let mut out = Vec::new();
        for n in 0..10 {
            asm.ingest_t(&ev(&imp(&format!("i{n}"), &format!("s{n}"), n, &[("d", 1)])), 0, None, &mut |c| {
                out.push(c.into())
            });
            assert!(asm.closed_lists() <= 4, "{} lists kept after {n}", asm.closed_lists());
        }
        assert_eq!(asm.closed_lists(), 4, "s2 to s5 kept, s0 and s1 forgotten");
        assert_eq!(out.iter().filter(|c| **c == Got::Forgotten).count(), 2, "each forgotten list is reported");
        let amended = |out: &[Got]| out.iter().filter(|c| **c == Got::LateAmended).count();
        let kept = asm.ingest_t(&ev(&judg("j5", "s5", 5, "d", 2)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!((kept, amended(&out)), (Applied::Late, 1));
        let forgotten = asm.ingest_t(&ev(&judg("j0", "s0", 0, "d", 2)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!((forgotten, amended(&out)), (Applied::Added, 1), "s0 was forgotten: a list of its own");
    }

    /// `input.max_events_per_list`, on a list small enough for its compact
    /// run and on one past it, open and (under both late policies) final.
    #[test]
    fn a_list_takes_at_most_max_events_per_list() {
        for (results, policy) in [(3, LatePolicy::Amend), (150, LatePolicy::Amend), (150, LatePolicy::Drop)] {
            let mut l = limits(policy);
            l.max_events_per_list = 50;
            let mut asm = Assembler::with_limits(l, vec![], None);
            let mut out = Vec::new();
            let docs: Vec<(String, u32)> = (0..results).map(|p| (format!("d{p}"), p + 1)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            let mut applied = Vec::new();
            applied.push(asm.ingest_t(&ev(&imp("i", "s", 0, &docs)), 0, None, &mut |c| out.push(c.into())));
            for n in 0..60 {
                let e = judg(&format!("j{n}"), "s", 1, &format!("d{}", n % results), 1);
                applied.push(asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into())));
            }
            let too_large = applied.iter().filter(|a| **a == Applied::TooLarge).count();
            assert_eq!(too_large, 11, "{results} results: 1 impression + 49 judgments fit");
            // A re-delivery is still a duplicate, not one too many.
            let again = asm.ingest_t(&ev(&judg("j3", "s", 1, "d0", 1)), 0, None, &mut |c| out.push(c.into()));
            assert_eq!(again, Applied::Duplicate);
            // Final: a late judgment is one too many as well.
            asm.ingest_t(&ev(&imp("x", "other", 20_000, &[("d", 1)])), 0, None, &mut |c| out.push(c.into()));
            asm.finalize_expired(None, &mut |c| out.push(c.into()));
            assert_eq!(asm.closed_lists(), 1);
            let late = asm.ingest_t(&ev(&judg("late", "s", 2, "d1", 4)), 0, None, &mut |c| out.push(c.into()));
            assert_eq!(late, Applied::TooLarge, "{results} {policy:?}");
            let f = out.iter().filter_map(final_of).next().unwrap();
            assert_eq!(f.shown.len(), results as usize);
            assert_eq!(f.shown.iter().filter(|g| **g == 1).count(), 49.min(results as usize));
        }
    }

    /// `input.max_results_per_list`: pages of 200 results of one list are
    /// taken until it holds 1,000, the page that finds it full is refused
    /// whole, open and final; a re-delivery stays a duplicate.
    #[test]
    fn a_list_holds_at_most_max_results_per_list() {
        let mut l = limits(LatePolicy::Amend);
        l.max_results_per_list = 1_000;
        let mut asm = Assembler::with_limits(l, vec![], None);
        let mut out = Vec::new();
        let page =
            |n: u32| -> Vec<(String, u32)> { (0..200).map(|p| (format!("d{n}-{p}"), n * 200 + p + 1)).collect() };
        let mut applied = Vec::new();
        for n in 0..7 {
            let docs = page(n);
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            applied.push(
                asm.ingest_t(&ev(&imp(&format!("i{n}"), "s", n as i64, &docs)), 0, None, &mut |c| out.push(c.into())),
            );
        }
        assert_eq!(applied[..5], [Applied::Added; 5]);
        assert_eq!(applied[5..], [Applied::TooLarge; 2]);
        let docs = page(0);
        let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
        let again = asm.ingest_t(&ev(&imp("i0", "s", 0, &docs)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(again, Applied::Duplicate);
        // Judgments are not results: still taken.
        let judged = asm.ingest_t(&ev(&judg("j", "s", 8, "d0-0", 3)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(judged, Applied::Added);
        asm.ingest_t(&ev(&imp("x", "other", 20_000, &[("d", 1)])), 0, None, &mut |c| out.push(c.into()));
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        let docs = page(9);
        let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
        let late = asm.ingest_t(&ev(&imp("late", "s", 9, &docs)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(late, Applied::TooLarge);
        let f = out.iter().filter_map(final_of).next().unwrap();
        assert_eq!(f.shown.len(), 1_000);
    }

    /// A hot key (10,000 results over 50 pages, 10,000 judgments, then
    /// 1,000 late judgments with re-deliveries) gives the same lists and
    /// values as the same events spread so that no list grows large.
    #[test]
    fn a_hot_key_is_assembled_like_any_list() {
        let mut asm = Assembler::with_limits(limits(LatePolicy::Amend), vec![], None);
        let mut out: Vec<Got> = Vec::new();
        let page = |n: u32| -> String {
            let docs: Vec<(String, u32)> =
                (0..200).map(|i| (format!("d{}", (n * 200 + i) % 9_000), n * 200 + i + 1)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            imp(&format!("p{n}"), "hot", n as i64, &docs)
        };
        for n in 0..50 {
            asm.ingest_t(&ev(&page(n)), 0, None, &mut |c| out.push(c.into()));
        }
        // A re-delivered page changes nothing.
        assert_eq!(asm.ingest_t(&ev(&page(7)), 0, None, &mut |c| out.push(c.into())), Applied::Duplicate);
        for n in 0..10_000 {
            let e = judg(&format!("j{n}"), "hot", 100, &format!("d{}", (n * 7) % 12_000), n % 5);
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.ingest_t(&ev(&imp("x", "other", 20_000, &[("d", 1)])), 0, None, &mut |c| out.push(c.into()));
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        let first = out.iter().filter_map(final_of).find(|f| f.shown.len() > 1).unwrap().clone();
        assert_eq!(first.shown.len(), 9_000, "documents repeat after 9,000 positions: first one counts");
        for n in 0..1_000 {
            let e = judg(&format!("late{}", n % 900), "hot", 200, &format!("d{}", n * 9), 4);
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.finalize_all(&mut |c| out.push(c.into()));
        let amended = out.iter().filter(|c| **c == Got::LateAmended).count();
        assert_eq!(amended, 900, "100 re-deliveries");
        let moved: Vec<&Got> = out.iter().filter(|c| matches!(c, Got::Withdrawn(_) | Got::Reinstated(_))).collect();
        let [Got::Withdrawn(old), Got::Reinstated(new)] = moved[..] else { panic!("{} moves", moved.len()) };
        assert_eq!(*old, first);
        // The reference: the grades by hand, from the events' definitions.
        let mut grade: FxHashMap<String, i32> = FxHashMap::default();
        for n in 0..10_000 {
            let g = grade.entry(format!("d{}", (n * 7) % 12_000)).or_default();
            *g = (*g).max(n % 5);
        }
        for n in 0..900 {
            grade.insert(format!("d{}", n * 9), 4);
        }
        let shown: Vec<Grade> = (0..9_000).map(|p| grade.get(&format!("d{p}")).copied().unwrap_or(0)).collect();
        assert_eq!(new.shown, shown);
        let mut judged = new.judged.clone();
        judged.sort_unstable();
        let mut want: Vec<Grade> = grade.values().copied().collect();
        want.sort_unstable();
        assert_eq!(judged, want);
    }

    #[test]
    fn dimension_values_past_the_budget_become_other() {
        let budget = Arc::new(Mutex::new(DimensionBudget::new(1, 2, 100)));
        let mut asm = Assembler::with_limits(limits(LatePolicy::Drop), vec!["ranker".into()], Some(budget.clone()));
        let mut out = Vec::new();
        for (n, ranker) in ["a", "b", "c", "a", "d"].iter().enumerate() {
            let e = imp(&format!("i{n}"), &format!("s{n}"), 0, &[("d", 1)])
                .replace(r#""ranker":"a""#, &format!(r#""ranker":"{ranker}""#));
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.finalize_all(&mut |c| out.push(c.into()));
        let mut dims: Vec<String> = out.iter().filter_map(final_of).map(|f| f.dims[0].clone()).collect();
        dims.sort();
        assert_eq!(dims, ["__other__", "__other__", "a", "a", "b"]);
        assert_eq!(out.iter().filter(|c| **c == Got::DimensionOverflow(0)).count(), 2);
        assert_eq!(budget.lock().unwrap().admitted[0].len(), 2);
    }

    /// Lists without the label (`unknown`) and a producer's own `__other__`
    /// come first and take none of the label's slots: the arms that follow
    /// keep their names (a cold audit saw `candidate` lost to `__other__`
    /// behind unlabelled traffic, so it was never compared).
    #[test]
    fn unlabelled_lists_take_no_dimension_slot() {
        let budget = Arc::new(Mutex::new(DimensionBudget::new(1, 2, 100)));
        let mut asm = Assembler::with_limits(limits(LatePolicy::Drop), vec!["ranker".into()], Some(budget.clone()));
        let mut out = Vec::new();
        let rankers = [None, Some(""), Some("__other__"), Some("control"), Some("candidate"), Some("third")];
        for (n, ranker) in rankers.iter().enumerate() {
            let e = imp(&format!("i{n}"), &format!("s{n}"), 0, &[("d", 1)]);
            let e = match ranker {
                None => e.replace(r#","dimensions":{"ranker":"a"}"#, ""),
                Some(r) => e.replace(r#""ranker":"a""#, &format!(r#""ranker":"{r}""#)),
            };
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.finalize_all(&mut |c| out.push(c.into()));
        let mut dims: Vec<String> = out.iter().filter_map(final_of).map(|f| f.dims[0].clone()).collect();
        dims.sort();
        assert_eq!(dims, ["__other__", "__other__", "candidate", "control", "unknown", "unknown"]);
        assert_eq!(out.iter().filter(|c| **c == Got::DimensionOverflow(0)).count(), 1, "only third");
        assert_eq!(budget.lock().unwrap().admitted[0].len(), 2);
    }

    /// Each label within its values, the combinations past their budget:
    /// every label of a new combination becomes `__other__`, and known
    /// combinations keep their values.
    #[test]
    fn combinations_past_the_budget_become_other_on_every_label() {
        let budget = Arc::new(Mutex::new(DimensionBudget::new(2, 100, 3)));
        let labels = vec!["ranker".to_string(), "market".to_string()];
        let mut asm = Assembler::with_limits(limits(LatePolicy::Drop), labels, Some(budget.clone()));
        let mut out = Vec::new();
        let pairs = [("a", "us"), ("a", "de"), ("b", "us"), ("b", "de"), ("a", "us"), ("c", "jp"), ("b", "us")];
        for (n, (ranker, market)) in pairs.iter().enumerate() {
            let e = imp(&format!("i{n}"), &format!("s{n}"), 0, &[("d", 1)])
                .replace(r#""ranker":"a""#, &format!(r#""ranker":"{ranker}","market":"{market}""#));
            asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into()));
        }
        asm.finalize_all(&mut |c| out.push(c.into()));
        let mut dims: Vec<String> = out.iter().filter_map(final_of).map(|f| f.dims.join("/")).collect();
        dims.sort();
        assert_eq!(dims, ["__other__/__other__", "__other__/__other__", "a/de", "a/us", "a/us", "b/us", "b/us"]);
        assert_eq!(out.iter().filter(|c| **c == Got::CombinationOverflow).count(), 2);
        assert_eq!(budget.lock().unwrap().combinations.len(), 3);
    }
}
