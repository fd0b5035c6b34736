//! `mapped` input against the native format, differentially: the same
//! generated lists, once as rankpulse's own impressions and judgments and
//! once rewritten in an invented schema (testkit's `mapped_twin`: nested
//! session, a pointer, different time fields for impressions and clicks,
//! ISO text beside epoch milliseconds, integer doc ids, 0-based or absent
//! ranks, grades beside actions), through the same pipeline stages, must
//! leave identical accumulators and identical list counters. The oracle
//! is the native decoder, which the rest of the test suite pins down.

use proptest::prelude::*;
use rankpulse_core::event::mapped::{Mapping, MappingSpec};
use rankpulse_core::event::{EventKind, Format, IgnoreReason};
use rankpulse_core::pipeline::{Clock, OpsCounters, Pipeline, PipelineSettings};
use rankpulse_testkit::MixMessage;
use rankpulse_testkit::mapped::{MappedTraffic, mapped_twin};

const BASE_MS: i64 = 1_763_780_000_000;

/// testkit's `MAPPING_TOML`, as the configuration would compile it.
fn spec(position_base: u32) -> MappingSpec {
    let p = |paths: &[&str]| paths.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    MappingSpec {
        session: p(&["ctx.user.sid"]),
        query: p(&["/search/qid"]),
        time: p(&["served_at", "clicked_at"]),
        id: p(&["meta.uuid"]),
        results: p(&["page.hits"]),
        result_doc: p(&["item.sku"]),
        result_position: p(&["rank"]),
        result_score: p(&["relevance"]),
        position_base,
        judged_doc: p(&["target.sku", "/target/sku~1legacy"]),
        grade: p(&["label"]),
        action: p(&["what"]),
        dimensions: vec![("ranker".into(), p(&["exp.arm"])), ("market".into(), p(&["/geo/market", "market"]))],
    }
}

fn native(messages: &[MixMessage]) -> Pipeline {
    let mut p = Pipeline::new(&PipelineSettings::default());
    let clock = Clock::replay();
    for m in messages {
        let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
        assert_eq!(p.ingest(topic, &m.payload, clock, None), Ok(()), "{}", String::from_utf8_lossy(&m.payload));
    }
    p.finalize_all();
    p
}

/// Two mapped topics, `hits` and `clicks`; rejections are left to the
/// counters (asserted on by the callers).
fn mapped(t: &MappedTraffic, position_base: u32) -> Pipeline {
    let mut s = PipelineSettings {
        formats: vec![("hits".into(), Format::Mapped), ("clicks".into(), Format::Mapped)],
        ..PipelineSettings::default()
    };
    s.decode.mapped = Some(Mapping::new(&spec(position_base)).unwrap());
    let mut p = Pipeline::new(&s);
    let clock = Clock::replay();
    for m in &t.mapped {
        let _ = p.ingest(if m.judgment { "clicks" } else { "hits" }, &m.payload, clock, None);
    }
    p.finalize_all();
    p
}

/// The counters of lists, which both forms must agree on (the event
/// counts differ by topic name and by the ignored messages).
fn list_counters(c: &OpsCounters) -> OpsCounters {
    OpsCounters { events: Default::default(), ignored: Default::default(), ..c.clone() }
}

/// Lists with orphans, duplicates, gaps in positions, lists without
/// dimensions (testkit's UBI twin), then production-shaped lists with
/// scores (testkit's mix).
fn traffic(seed: u64, lists: usize) -> MappedTraffic {
    let mut events = rankpulse_testkit::ubi::ubi_mix(lists, seed, BASE_MS, 700.0, 0).native;
    let after = BASE_MS + lists as i64 * 700 + 120_000;
    events.extend(rankpulse_testkit::mix(0, lists / 2 + 1, seed, after, 500.0));
    mapped_twin(&events, seed)
}

fn check(seed: u64, lists: usize) -> Result<(), TestCaseError> {
    let t = traffic(seed, lists);
    let (n, m) = (native(&t.native), mapped(&t, 0));
    prop_assert!(m.counters().rejected.is_empty(), "{:?}", m.counters().rejected);
    prop_assert_eq!(list_counters(m.counters()), list_counters(n.counters()));
    prop_assert!(m.accumulators() == n.accumulators(), "accumulators differ (seed {seed})");
    let ignored = m.counters().ignored.get(&IgnoreReason::UnmappedAction).copied().unwrap_or(0);
    prop_assert_eq!(ignored, t.ignored);
    Ok(())
}

/// One fixed case large enough to hold every shape, and proof that it
/// does: the comparison is not between two empty pipelines.
#[test]
fn generated_mapped_events_equal_their_native_twin() {
    let t = traffic(11, 2_000);
    let n = native(&t.native);
    let lists: i64 = n.accumulators().series.values().map(|s| s.lists()).sum();
    assert!(lists > 2_500, "{lists} lists");
    assert!(
        n.counters().orphans > 0 && n.counters().duplicates.get(&EventKind::Judgment).copied().unwrap_or(0) > 10,
        "{:?}",
        n.counters()
    );
    assert!(n.accumulators().series.keys().any(|d| d[0] == "unknown"), "lists without dimensions");
    assert!(t.ignored > 100, "{} ignored", t.ignored);
    let text = t.mapped.iter().map(|m| String::from_utf8_lossy(&m.payload)).collect::<Vec<_>>().join("\n");
    assert!((1..=9).any(|d| text.contains(&format!(r#""sku":{d}"#))), "integer doc ids");
    for shape in [r#""sku/legacy""#, r#""label":"#, r#""what":"#, r#""rank":0"#, r#"Z""#, r#"+0000""#] {
        assert!(text.contains(shape), "no {shape} in the mapped messages");
    }
    check(11, 2_000).unwrap();
}

/// The mapping is what makes the forms agree: read 1-based, the same
/// 0-based ranks give other lists (and rank 0 is rejected).
#[test]
fn the_wrong_position_base_is_seen() {
    let t = traffic(5, 300);
    let (n, m) = (native(&t.native), mapped(&t, 1));
    assert!(m.accumulators() != n.accumulators());
    assert!(m.counters().rejected.values().sum::<u64>() > 0, "rank 0 is invalid 1-based");
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    #[test]
    fn generated_mapped_equals_its_native_twin(seed in any::<u64>(), lists in 1usize..300) {
        check(seed, lists)?;
    }
}
