//! Decoding and assembly on arbitrary bytes: the input is a sequence of
//! messages separated by b'\n', fed in turn to an impressions topic, a
//! judgments topic (rankpulse's format), a `mapped` topic (short paths, so
//! that the fuzzer finds them) and a `ubi` topic, through one `Pipeline`,
//! with small limits so eviction, dimension overflow, late amendments, the
//! click counts of `[debias]` and a state round trip are exercised. Each
//! message is also decoded as UBI and as rankpulse's own format by both
//! readers of each, which must agree (the fast one leaves to serde
//! whatever it cannot read exactly); scores to the bit.

#![no_main]

use libfuzzer_sys::fuzz_target;
use rankpulse::config::{Config, Span};
use rankpulse_core::event::{self, DecodeLimits, Event, Format, ubi};
use rankpulse_core::pipeline::{Clock, Pipeline};
use std::sync::LazyLock;
use std::time::Duration;

/// Messages beyond this are ignored (keeps every run short).
const MAX_MESSAGES: usize = 256;
const TOPICS: [&str; 4] = ["search-impressions", "search-judgments", "mapped", "ubi"];

/// The formats of the last two topics and the paths of `mapped`.
const FORMATS: &str = r#"[kafka]
topics = ["search-impressions", "search-judgments", "mapped", "ubi"]
[kafka.formats]
mapped = "mapped"
ubi = "ubi"
[mapped]
session = "s"
query = "/q"
time = ["t", "ts"]
id = "i"
results = "r"
result_doc = "d"
result_position = "p"
position_base = 0
result_score = "v"
judged_doc = ["d", "o.d"]
grade = "g"
action = "a"
[mapped.dimensions]
ranker = "x.r"
[ubi.dimensions]
ranker = "query_attributes.r"
market = "event_attributes.object.m"
"#;
const START_MS: i64 = 1_700_000_000_000;
/// Processing time between two messages.
const STEP_MS: i64 = 250;

static CONFIG: LazyLock<Config> = LazyLock::new(|| {
    let path = std::env::temp_dir().join(format!("rankpulse-fuzz-{}.toml", std::process::id()));
    std::fs::write(&path, FORMATS).expect("temporary directory is writable");
    let config = Config::load_with_env(Some(&path), Vec::new());
    let _ = std::fs::remove_file(&path);
    let mut config = config.expect("fuzz formats are valid");
    // A small gap, so lists close during a run (event and processing time).
    config.session.gap = Span { text: "1s".to_string(), duration: Duration::from_secs(1) };
    // Small bounds, so eviction, `__other__` and late amendments happen.
    config.session.max_open_lists = 8;
    config.dimensions.max_values = 2;
    config.dimensions.max_combinations = 3;
    config.input.max_events_per_list = 40;
    config.debias.max_rank = 4;
    config.validate().expect("fuzz config is valid");
    config
});

static LIMITS: LazyLock<DecodeLimits> = LazyLock::new(|| CONFIG.decode_limits());

fuzz_target!(|data: &[u8]| {
    for payload in data.split(|&b| b == b'\n').take(MAX_MESSAGES) {
        for format in [Format::Ubi, Format::UbiEvents, Format::UbiQueries] {
            assert_eq!(
                ubi::decode(format, payload, &LIMITS),
                ubi::decode_by_serde(format, payload, &LIMITS),
                "the UBI readers differ on {format:?} {:?}",
                String::from_utf8_lossy(payload)
            );
        }
        let (fast, serde) = (event::decode(payload, &LIMITS), event::decode_by_serde(payload, &LIMITS));
        let scores = |e: &Result<Event<'_>, _>| match e {
            Ok(Event::Impression(i)) => i.results.iter().map(|r| r.score.map(f64::to_bits)).collect(),
            _ => Vec::new(),
        };
        assert!(
            fast == serde && scores(&fast) == scores(&serde),
            "the native readers differ on {:?}: {fast:?} against {serde:?}",
            String::from_utf8_lossy(payload)
        );
    }
    let mut pipeline = Pipeline::new(&CONFIG.pipeline_settings());
    let mut fed: u64 = 0;
    let mut arrival_ms = START_MS;
    for (i, payload) in data.split(|&b| b == b'\n').take(MAX_MESSAGES).enumerate() {
        arrival_ms += STEP_MS;
        // Kafka timestamps from the input too: a message may claim any time.
        let message_ms = payload.first().map(|b| START_MS + (i64::from(*b) - 128) * 60_000);
        let clock = Clock::Live { now_ms: arrival_ms, message_ms };
        let _ = pipeline.ingest(TOPICS[i % TOPICS.len()], payload, clock, None);
        fed += 1;
        if fed % 16 == 0 {
            pipeline.finalize_expired(Some(arrival_ms));
        }
        if fed == 64 {
            // A checkpoint round trip in the middle must not change anything observable.
            let (state, sessions) = (pipeline.assembler().state(), pipeline.sessions().clone());
            pipeline.restore(state, sessions, None);
        }
    }
    pipeline.finalize_all();

    assert_eq!(pipeline.open_lists(), 0, "lists left open after finalize_all");

    let rejected: u64 = pipeline.counters().rejected.values().sum();
    let accepted: u64 = pipeline.counters().events.values().sum();
    let ignored: u64 = pipeline.counters().ignored.values().sum();
    assert_eq!(
        rejected + accepted + ignored,
        fed,
        "rejected {:?} + accepted {:?} + ignored {:?} != messages fed",
        pipeline.counters().rejected,
        pipeline.counters().events,
        pipeline.counters().ignored
    );

    for (dims, series) in &pipeline.accumulators().series {
        let total = series.total();
        let cells = std::iter::once((None, &total)).chain(series.buckets.iter().map(|(b, c)| (Some(b), &**c)));
        for (bucket, cell) in cells {
            for (i, moments) in cell.metrics.iter().enumerate() {
                if let Some(mean) = moments.mean() {
                    assert!(
                        (0.0..=1.0).contains(&mean),
                        "mean {mean} outside [0, 1]: dims {dims:?}, bucket {bucket:?}, metric index {i}, {moments:?}"
                    );
                }
            }
        }
    }
});
