//! Dimension values: the configured labels' values of each list, interned
//! per shard, and the budget that bounds them per instance.
//!
//! In the assembly flow: each impression an assembler applies is interned
//! here ([`Dimensions::intern`]) into the [`DimsId`] its list keeps; values
//! past the shared [`DimensionBudget`] become [`OTHER_DIMENSION`], and
//! [`Dimensions::disagree`] tells when an impression disagrees with the one
//! that defined its list. A final list carries its tuple to the metric
//! engine ([`FinalList::dims`](super::FinalList::dims)), which makes it the
//! series' labels.

use super::list::NOT_DEFINING;
use super::notice::Notice;
use crate::event::{Impression, MAX_DIMENSION_LABELS};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Mutex};

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

    /// With the tuples not seen yet admitted by `budget` (shared by the
    /// instance's shards), if any.
    pub(super) fn with_budget(mut self, budget: Option<Arc<Mutex<DimensionBudget>>>) -> Self {
        self.budget = budget;
        self
    }

    /// Replaces every interned tuple with `values` (checkpoint restore),
    /// keeping the labels and the budget.
    pub(super) fn restore_values(&mut self, values: Vec<Arc<[String]>>) {
        let budget = self.budget.take();
        *self = Dimensions::from_values(std::mem::take(&mut self.labels), values).with_budget(budget);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::testing::{Fin, Got, collect, ev, final_of, imp, limits, shown};
    use crate::assemble::{Assembler, LatePolicy};
    use crate::event::DecodeLimits;

    #[test]
    fn an_empty_dimension_value_is_unknown() {
        let mut asm = Assembler::new(30_000, vec!["ranker".into()]);
        let events = [imp("i1", "s", 1_000, &[("d1", 1)]).replace(r#""ranker":"a""#, r#""ranker":"""#)];
        let out = collect(&mut asm, &events);
        assert_eq!(out.len(), 1);
        assert_eq!(&*final_of(&out[0]).unwrap().dims, [MISSING_DIMENSION]);
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
