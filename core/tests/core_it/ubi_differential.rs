//! UBI input against the native format, differentially: the same generated
//! lists, once as OpenSearch UBI 1.3 queries and events and once as
//! rankpulse's own impressions and judgments, through the same pipeline
//! stages, must leave identical accumulators (every window gauge and
//! since-start sum) and identical list counters. The oracle is the native
//! decoder, which the rest of the test suite pins down.

use proptest::prelude::*;
use rankpulse_core::event::{Format, IgnoreReason};
use rankpulse_core::pipeline::{Clock, OpsCounters, Pipeline, PipelineSettings};
use rankpulse_testkit::ubi::{UbiTopic, UbiTraffic, ubi_mix};

const BASE_MS: i64 = 1_763_780_000_000;

fn settings(ordinal_base: u32, formats: &[(&str, Format)]) -> PipelineSettings {
    let mut s = PipelineSettings::default();
    s.decode.ubi.ordinal_base = ordinal_base;
    s.formats = formats.iter().map(|(t, f)| (t.to_string(), *f)).collect();
    s
}

fn native(t: &UbiTraffic) -> Pipeline {
    let mut p = Pipeline::new(&settings(0, &[]));
    let clock = Clock::replay();
    for m in &t.native {
        let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
        assert_eq!(p.ingest(topic, &m.payload, clock, None), Ok(()), "{}", String::from_utf8_lossy(&m.payload));
    }
    p.finalize_all();
    p
}

/// Two topics (`ubi_queries`, `ubi_events`), or one of format `ubi`.
/// Rejections are left to the counters (asserted on by the callers).
fn ubi(t: &UbiTraffic, ordinal_base: u32, one_topic: bool) -> Pipeline {
    let formats: &[(&str, Format)] = if one_topic {
        &[("ubi", Format::Ubi)]
    } else {
        &[("ubi-queries", Format::UbiQueries), ("ubi-events", Format::UbiEvents)]
    };
    let mut p = Pipeline::new(&settings(ordinal_base, formats));
    let clock = Clock::replay();
    for m in &t.ubi {
        let topic = match (one_topic, m.topic) {
            (true, _) => "ubi",
            (false, UbiTopic::Queries) => "ubi-queries",
            (false, UbiTopic::Events) => "ubi-events",
        };
        let _ = p.ingest(topic, &m.payload, clock, None);
    }
    p.finalize_all();
    p
}

/// The counters of lists, which both forms must agree on (the per-topic
/// event counts differ by construction: a UBI list is several messages).
fn list_counters(c: &OpsCounters) -> OpsCounters {
    OpsCounters { events: Default::default(), ignored: Default::default(), ..c.clone() }
}

fn check(seed: u64, lists: usize, ordinal_base: u32, one_topic: bool) -> Result<(), TestCaseError> {
    let t = ubi_mix(lists, seed, BASE_MS, 700.0, ordinal_base);
    let (n, u) = (native(&t), ubi(&t, ordinal_base, one_topic));
    prop_assert_eq!(list_counters(u.counters()), list_counters(n.counters()));
    prop_assert!(u.accumulators() == n.accumulators(), "accumulators differ (seed {seed}, base {ordinal_base})");
    let ignored = u.counters().ignored.get(&IgnoreReason::UnmappedAction).copied().unwrap_or(0);
    prop_assert_eq!(ignored, t.ignored);
    prop_assert!(u.counters().rejected.is_empty(), "{:?}", u.counters().rejected);
    Ok(())
}

/// One fixed case large enough to hold every shape, and proof that it
/// does: the comparison is not between two empty pipelines.
#[test]
fn a_day_of_generated_ubi_equals_its_native_twin() {
    let t = ubi_mix(3_000, 11, BASE_MS, 700.0, 0);
    let n = native(&t);
    let lists: i64 = n.accumulators().series.values().map(|s| s.lists()).sum();
    assert!(lists > 2_500, "{lists} lists");
    assert!(
        n.counters().orphans > 0
            && n.counters().duplicates.get(&rankpulse_core::event::EventKind::Judgment).copied().unwrap_or(0) > 10,
        "{:?}",
        n.counters()
    );
    assert!(n.accumulators().series.keys().any(|d| d[0] == "unknown"), "lists without a query");
    for (base, one_topic) in [(0, false), (0, true)] {
        check(11, 3_000, base, one_topic).unwrap();
    }
    check(12, 3_000, 1, false).unwrap();
}

/// The mapping is what makes the forms agree: read with the other
/// ordinal base, the same UBI events give other lists.
#[test]
fn the_wrong_ordinal_base_is_seen() {
    let t = ubi_mix(500, 5, BASE_MS, 700.0, 0);
    let (n, u) = (native(&t), ubi(&t, 1, false));
    assert!(u.accumulators() != n.accumulators());
    assert!(u.counters().rejected.values().sum::<u64>() > 0, "ordinal 0 is invalid 1-based");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    #[test]
    fn generated_ubi_equals_its_native_twin(seed in any::<u64>(), lists in 1usize..300, base in 0u32..2, one_topic in any::<bool>()) {
        check(seed, lists, base, one_topic)?;
    }
}
