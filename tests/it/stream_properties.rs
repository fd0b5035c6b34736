//! The stream must compute exactly what the metric engine computes on the
//! same lists in batch. Random scenarios (several lists per session,
//! impressions split into pages and re-delivered, duplicated judgments,
//! judgments before impressions, orphan judgments, a key reused after the
//! gap) are fed to the pipeline in a random arrival order, with lists swept
//! after every event; the pipeline's counters and window cells must equal
//! the batch computation exactly (the accumulators are fixed point, so
//! "equal" means bit for bit).

use proptest::prelude::*;
use rankpulse::config::Config;
use rankpulse_core::accumulate::{Accumulators, Cell};
use rankpulse_core::event::EventKind;
use rankpulse_core::metrics::Grade;
use rankpulse_core::metrics::list::{ListScore, ListScorer};
use rankpulse_core::pipeline::Pipeline;
use rankpulse_core::sessions::SessionLedger;
use rankpulse_core::window::window_cell;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use rankpulse_testkit::Rng;

/// Ground truth of one list, as the batch computation sees it.
struct TrueList {
    /// Its session: the unit of the session sums.
    session: String,
    dims: Arc<[String]>,
    impression_ms: i64,
    shown: Vec<Grade>,
    scores: Option<Vec<f64>>,
    judged: Vec<Grade>,
}

struct Scenario {
    /// (event time, JSON) in generation order.
    events: Vec<(i64, String)>,
    lists: Vec<TrueList>,
    orphans: usize,
    duplicates: BTreeMap<EventKind, u64>,
    impressions: u64,
    judgments: u64,
}

/// The session gap of the stream and of the scenario's timing.
const GAP_MS: i64 = 30_000;

fn scenario(seed: u64) -> Scenario {
    let mut rng = Rng::new(seed);
    let mut s = Scenario {
        events: Vec::new(),
        lists: Vec::new(),
        orphans: 0,
        duplicates: BTreeMap::new(),
        impressions: 0,
        judgments: 0,
    };
    let rankers = ["control", "candidate"];
    let n_lists = 1 + rng.below(12) as usize;
    let mut id = 0u64;
    let mut next_id = || {
        id += 1;
        format!("e{id}")
    };
    for l in 0..n_lists {
        // Lists start 7 s apart, so they overlap and each one's events are
        // interleaved with others'; a session holds several queries, and the
        // last list reuses the first list's key, well after its gap.
        let reuse = l + 1 == n_lists && n_lists > 2;
        let base = 1_700_000_000_000 + l as i64 * 7_000 + if reuse { GAP_MS + 15_000 } else { 0 };
        let session = if reuse { "s0".to_string() } else { format!("s{}", l / 3) };
        let query = if reuse { "q0".to_string() } else { format!("q{}", l % 3) };
        let ranker = rankers[rng.below(2) as usize];
        if rng.below(8) == 0 {
            // An orphan: judgments, no impression.
            let ev = format!(
                r#"{{"type":"judgment","event_id":"{}","session_id":"o{l}","query_id":"x","doc_id":"d1","grade":2,"timestamp":{base}}}"#,
                next_id()
            );
            s.events.push((base, ev));
            s.judgments += 1;
            s.orphans += 1;
            continue;
        }
        let n_shown = 1 + rng.below(8) as usize;
        let with_scores = rng.below(2) == 0;
        let docs: Vec<usize> = (0..n_shown).collect();
        let results: Vec<String> = docs
            .iter()
            .enumerate()
            .map(|(p, d)| {
                let score = if with_scores { format!(r#","score":{}"#, rng.below(5)) } else { String::new() };
                format!(r#"{{"doc_id":"d{d}","position":{}{score}}}"#, p + 1)
            })
            .collect();
        let scores: Option<Vec<f64>> = with_scores.then(|| {
            results
                .iter()
                .map(|r| r.split(r#""score":"#).nth(1).unwrap().trim_end_matches('}').parse().unwrap())
                .collect()
        });
        // Impression as one event or two pages; sometimes re-delivered.
        let split = if n_shown > 1 && rng.below(2) == 0 { 1 + rng.below(n_shown as u64 - 1) as usize } else { n_shown };
        let mut pages = vec![&results[..split]];
        if split < n_shown {
            pages.push(&results[split..]);
        }
        let t_imp = base + rng.below(3_000) as i64;
        for (i, page) in pages.iter().enumerate() {
            let ev = format!(
                r#"{{"type":"impression","event_id":"{}","session_id":"{session}","query_id":"{query}","timestamp":{},"results":[{}],"dimensions":{{"ranker":"{ranker}","market":"us"}}}}"#,
                next_id(),
                t_imp + i as i64,
                page.join(",")
            );
            if rng.below(4) == 0 {
                s.events.push((t_imp + i as i64, ev.clone()));
                *s.duplicates.entry(EventKind::Impression).or_default() += 1;
                s.impressions += 1;
            }
            s.events.push((t_imp + i as i64, ev));
            s.impressions += 1;
        }
        // Judgments: shown or not, some before the impression, some repeated.
        let mut grades: BTreeMap<usize, Grade> = BTreeMap::new();
        for _ in 0..rng.below(8) {
            let doc = rng.below(10) as usize;
            let (field, grade) = match rng.below(4) {
                0 => (r#""action":"click""#.to_string(), 1),
                1 => (r#""action":"purchase""#.to_string(), 3),
                _ => {
                    let g = rng.below(5) as Grade;
                    (format!(r#""grade":{g}"#), g)
                }
            };
            let t = base + rng.below(5_000) as i64;
            let ev = format!(
                r#"{{"type":"judgment","event_id":"{}","session_id":"{session}","query_id":"{query}","doc_id":"d{doc}",{field},"timestamp":{t}}}"#,
                next_id()
            );
            if rng.below(4) == 0 {
                s.events.push((t, ev.clone()));
                *s.duplicates.entry(EventKind::Judgment).or_default() += 1;
                s.judgments += 1;
            }
            s.events.push((t, ev));
            s.judgments += 1;
            let g = grades.entry(doc).or_insert(grade);
            *g = (*g).max(grade);
        }
        let shown = docs.iter().map(|d| grades.get(d).copied().unwrap_or(0)).collect();
        s.lists.push(TrueList {
            session: session.clone(),
            dims: vec![ranker.to_string(), "us".to_string()].into(),
            impression_ms: t_imp,
            shown,
            scores,
            judged: grades.values().copied().collect(),
        });
    }
    s
}

/// Arrival order: sorted by event time plus a jitter below 20 s (less than
/// the gap, as a partition's producers would reorder).
fn arrival_order(events: &[(i64, String)], seed: u64) -> Vec<&str> {
    let mut rng = Rng::new(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut keyed: Vec<(i64, u64, &str)> =
        events.iter().map(|(t, e)| (t + rng.below(20_000) as i64, rng.next(), e.as_str())).collect();
    keyed.sort();
    keyed.into_iter().map(|(_, _, e)| e).collect()
}

fn batch(config: &Config, lists: &[TrueList]) -> Accumulators {
    let cutoffs = config.sorted_cutoffs();
    let mut scorer = ListScorer::new(config.conventions(), cutoffs.clone());
    let mut score = ListScore::new(cutoffs.len());
    let mut acc = Accumulators::new(cutoffs.len(), config.windows.bucket.ms());
    // Session sums of the primary metric: a session's lists under one
    // ranker are one cluster (the scenario spans minutes: no timeout).
    let primary = config.pipeline_settings().primary;
    let mut ledger = SessionLedger::new(3_600_000, usize::MAX);
    for l in lists {
        scorer.score(&l.shown, l.scores.as_deref(), &l.judged, &mut score);
        let clusters = acc.fold(&l.dims, l.impression_ms, &score);
        if let Some(value) = primary.and_then(|i| score.values[i]) {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            l.session.hash(&mut h);
            let arm = u32::from(&*l.dims[0] == "candidate");
            ledger.add(h.finish(), arm, value, l.impression_ms, clusters);
        }
    }
    acc
}

fn windows(config: &Config, acc: &Accumulators, now_ms: i64) -> BTreeMap<(Arc<[String]>, String), Cell> {
    let mut out = BTreeMap::new();
    for (dims, series) in &acc.series {
        for span in &config.windows.spans {
            out.insert((dims.clone(), span.text.clone()), window_cell(acc, series, now_ms, span.ms()));
        }
    }
    out
}

fn config(variant: u64) -> Config {
    let mut c = Config::default();
    c.session.gap = format!("{}ms", GAP_MS).parse().unwrap();
    c.windows.spans = vec!["1m".parse().unwrap(), "5m".parse().unwrap(), "20m".parse().unwrap()];
    if variant % 2 == 1 {
        c.metrics.no_relevant = rankpulse_core::metrics::NoRelevant::Skip;
        c.metrics.gain = rankpulse_core::metrics::Gain::Linear;
        c.metrics.gauc_weight = rankpulse_core::metrics::GaucWeight::Positives;
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn stream_equals_batch(seed in any::<u64>(), order_seed in any::<u64>(), variant in 0u64..2) {
        let config = config(variant);
        let s = scenario(seed);
        let mut pipeline = Pipeline::new(&config.pipeline_settings());
        for message in arrival_order(&s.events, order_seed) {
            prop_assert!(pipeline.ingest("t", message.as_bytes(), rankpulse_core::pipeline::Clock::replay(), None).is_ok(), "{message}");
            pipeline.finalize_expired(None);
        }
        pipeline.finalize_all();
        prop_assert_eq!(pipeline.open_lists(), 0);

        let expected = batch(&config, &s.lists);
        prop_assert_eq!(pipeline.accumulators(), &expected);
        let now = s.events.iter().map(|(t, _)| *t).max().unwrap_or(0);
        prop_assert_eq!(windows(&config, pipeline.accumulators(), now), windows(&config, &expected, now));
        prop_assert_eq!(pipeline.counters().orphans as usize, s.orphans);
        prop_assert_eq!(&pipeline.counters().duplicates, &s.duplicates);
        let events = |kind| pipeline.counters().events.get(&("t".to_string(), kind)).copied().unwrap_or(0);
        prop_assert_eq!(events(EventKind::Impression), s.impressions);
        prop_assert_eq!(events(EventKind::Judgment), s.judgments);
    }
}
