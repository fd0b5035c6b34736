//! `rankpulse-bench pipeline|memory|hot-key`: reproducible load measurements of the stream path.
//!
//! Beside the data flow, for measuring it: a seeded event mix shaped like
//! production traffic (one impression of 10 results, about 760 bytes, per
//! three judgments of about 160 bytes), and measurements over it: the
//! pipeline alone (decode → assemble → score → accumulate, one core),
//! resident memory per open list, end to end through a Kafka broker beside
//! a bare consumer, freshness under a paced production (see [`kafka`]),
//! and what a second instance adds (see [`scale`]).

use rankpulse::config::Config;
use rankpulse_core::pipeline::{Clock, Pipeline};
pub use rankpulse_testkit::{MixMessage, mean_sizes, mix};
use std::time::Instant;

/// Decoding alone, on one core: events per second.
pub fn decode_throughput(config: &Config, messages: &[MixMessage]) -> f64 {
    let limits = config.decode_limits();
    let started = Instant::now();
    let mut ok = 0u64;
    for m in messages {
        if rankpulse_core::event::decode(&m.payload, &limits).is_ok() {
            ok += 1;
        }
    }
    std::hint::black_box(ok);
    messages.len() as f64 / started.elapsed().as_secs_f64()
}

/// The pipeline alone, on one core: events per second.
pub fn pipeline_throughput(config: &Config, messages: &[MixMessage]) -> f64 {
    let mut pipeline = Pipeline::new(&config.pipeline_settings());
    let clock = Clock::replay();
    let started = Instant::now();
    // Lists past their gap are finalized inside `ingest`, as the
    // watermark moves on.
    for m in messages {
        let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
        let _ = pipeline.ingest(topic, &m.payload, clock, None);
    }
    pipeline.finalize_all();
    messages.len() as f64 / started.elapsed().as_secs_f64()
}

/// The same lists as OpenSearch UBI queries and events (two topics) and as
/// native events, through the pipeline alone on one core: lists per
/// second of each (native, UBI). Both runs finalize every list.
pub fn ubi_vs_native(config: &Config, traffic: &rankpulse_testkit::ubi::UbiTraffic) -> (f64, f64) {
    (traffic.lists as f64 / native_lists(config, traffic), traffic.lists as f64 / ubi_lists(config, traffic))
}

/// The native half of [`ubi_vs_native`], in seconds: a function of its
/// own so that a profiler can count it alone
/// (`valgrind --tool=callgrind --toggle-collect='rankpulse_bench::engine::native_lists'`).
#[inline(never)]
pub fn native_lists(config: &Config, traffic: &rankpulse_testkit::ubi::UbiTraffic) -> f64 {
    let mut pipeline = Pipeline::new(&config.pipeline_settings());
    let clock = Clock::replay();
    let started = Instant::now();
    for m in &traffic.native {
        let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
        let _ = pipeline.ingest(topic, &m.payload, clock, None);
    }
    pipeline.finalize_all();
    started.elapsed().as_secs_f64()
}

/// The UBI half of [`ubi_vs_native`], in seconds (`ubi_lists` for the
/// profiler).
#[inline(never)]
pub fn ubi_lists(config: &Config, traffic: &rankpulse_testkit::ubi::UbiTraffic) -> f64 {
    use rankpulse_core::event::Format;
    use rankpulse_testkit::ubi::UbiTopic;
    let mut settings = config.pipeline_settings();
    settings.formats = vec![("ubi_queries".into(), Format::UbiQueries), ("ubi_events".into(), Format::UbiEvents)];
    let mut pipeline = Pipeline::new(&settings);
    let clock = Clock::replay();
    let started = Instant::now();
    for m in &traffic.ubi {
        let topic = if m.topic == UbiTopic::Queries { "ubi_queries" } else { "ubi_events" };
        let _ = pipeline.ingest(topic, &m.payload, clock, None);
    }
    pipeline.finalize_all();
    started.elapsed().as_secs_f64()
}

/// Where the time of [`ubi_vs_native`]'s runs goes, per list (µs): each
/// format's messages decoded alone (the event built, then dropped), and
/// the UBI messages only validated by serde_json (`IgnoredAny`: every
/// message's whole structure read and checked, nothing built). What the
/// pipeline adds to decoding is the run's time less its decoding.
#[derive(Debug, Clone, Copy)]
pub struct UbiParts {
    pub native_decode: f64,
    pub ubi_decode: f64,
    pub ubi_validate: f64,
}

/// One round of [`UbiParts`] over `traffic`.
pub fn ubi_parts(config: &Config, traffic: &rankpulse_testkit::ubi::UbiTraffic) -> UbiParts {
    use rankpulse_core::event::{Format, decode_as};
    use rankpulse_testkit::ubi::UbiTopic;
    let limits = config.decode_limits();
    let per_list = |started: Instant| started.elapsed().as_secs_f64() * 1e6 / traffic.lists as f64;
    let mut ok = 0usize;
    let started = Instant::now();
    for m in &traffic.native {
        ok += usize::from(decode_as(Format::Rankpulse, &m.payload, &limits).is_ok());
    }
    let native_decode = per_list(started);
    let started = Instant::now();
    for m in &traffic.ubi {
        let format = if m.topic == UbiTopic::Queries { Format::UbiQueries } else { Format::UbiEvents };
        ok += usize::from(decode_as(format, &m.payload, &limits).is_ok());
    }
    let ubi_decode = per_list(started);
    let started = Instant::now();
    for m in &traffic.ubi {
        ok += usize::from(serde_json::from_slice::<serde::de::IgnoredAny>(&m.payload).is_ok());
    }
    let ubi_validate = per_list(started);
    std::hint::black_box(ok);
    UbiParts { native_decode, ubi_decode, ubi_validate }
}

/// The same lists as rankpulse's own events and as their `mapped` twins
/// (testkit's invented schema, read through `mapped_config`'s paths),
/// through the pipeline alone on one core: lists per second of each
/// (native, mapped). Both runs finalize every list.
pub fn mapped_vs_native(
    config: &Config,
    mapped_config: &Config,
    traffic: &rankpulse_testkit::mapped::MappedTraffic,
    lists: usize,
) -> (f64, f64) {
    let run = |config: &Config, messages: &[MixMessage], topics: [&str; 2]| {
        let mut pipeline = Pipeline::new(&config.pipeline_settings());
        let clock = Clock::replay();
        let started = Instant::now();
        for m in messages {
            let _ = pipeline.ingest(topics[usize::from(m.judgment)], &m.payload, clock, None);
        }
        pipeline.finalize_all();
        started.elapsed().as_secs_f64()
    };
    let native = run(config, &traffic.native, ["search-impressions", "search-judgments"]);
    let mapped = run(mapped_config, &traffic.mapped, ["hits", "clicks"]);
    (lists as f64 / native, lists as f64 / mapped)
}

/// What [`hot_key`] measured, in milliseconds of one core.
#[derive(Debug, Clone, Copy)]
pub struct HotKey {
    /// The hot list's 50 pages (10,000 results) and 10,000 judgments.
    pub open_ms: f64,
    /// 1,000 late judgments for it once final (`late.policy = "amend"`),
    /// and putting its amended values back into the windows.
    pub late_ms: f64,
    /// Events of the hot key that were rejected or counted as duplicates
    /// (0: every one was applied).
    pub refused: u64,
}

/// One hot key among normal traffic, through the whole pipeline (decode,
/// assemble, score, accumulate): a list of 10,000 results in 50 pages of
/// 200 and 10,000 judgments, then 500 normal lists that make it final,
/// then 1,000 late judgments for it. Only the hot key's events are timed.
pub fn hot_key(config: &Config) -> HotKey {
    let base = 1_763_780_000_000i64;
    let mut config = config.clone();
    config.late.policy = rankpulse::config::LatePolicy::Amend;
    // 11,050 events of one list: past the default bound of 10,000, which
    // would reject the last ones instead of timing them.
    config.input.max_events_per_list = config.input.max_events_per_list.max(20_000);
    let clock = Clock::replay();
    let hot = |i: usize, body: String| -> Vec<u8> {
        format!(r#"{{"event_id":"hot-{i}","session_id":"hot","query_id":"q",{body}}}"#).into_bytes()
    };
    let pages: Vec<Vec<u8>> = (0..50)
        .map(|page| {
            let results: Vec<String> = (0..200)
                .map(|i| {
                    let p = page * 200 + i + 1;
                    format!(r#"{{"doc_id":"doc-{p}","position":{p},"score":{}}}"#, 20_000 - p)
                })
                .collect();
            let body = format!(
                r#""type":"impression","timestamp":{},"results":[{}],"dimensions":{{"ranker":"control","market":"us"}}"#,
                base + page as i64 * 10,
                results.join(",")
            );
            hot(page, body)
        })
        .collect();
    let judgment = |i: usize, doc: usize, ts: i64| {
        hot(i, format!(r#""type":"judgment","doc_id":"doc-{doc}","grade":{},"timestamp":{ts}"#, 1 + i % 4))
    };
    let judgments: Vec<Vec<u8>> =
        (0..10_000).map(|i| judgment(100 + i, 1 + i * 7 % 12_000, base + 1_000 + i as i64)).collect();
    let normal = mix(0, 500, 3, base + 12_000, 100.0);
    // 5 s after the hot list's last event: late once the normal traffic
    // has moved the watermark past that event plus the gap.
    let late: Vec<Vec<u8>> = (0..1_000).map(|i| judgment(20_000 + i, 1 + i * 13 % 15_000, base + 16_000)).collect();
    let mut pipeline = Pipeline::new(&config.pipeline_settings());
    let mut refused = 0;
    let feed = |pipeline: &mut Pipeline, topic: &str, m: &[u8]| {
        let before = pipeline.counters().duplicates.values().sum::<u64>();
        let ok = pipeline.ingest(topic, m, clock, None).is_ok();
        u64::from(!ok) + pipeline.counters().duplicates.values().sum::<u64>() - before
    };
    let started = Instant::now();
    for m in &pages {
        refused += feed(&mut pipeline, "search-impressions", m);
    }
    for m in &judgments {
        refused += feed(&mut pipeline, "search-judgments", m);
    }
    let open_ms = started.elapsed().as_secs_f64() * 1e3;
    for m in &normal {
        let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
        feed(&mut pipeline, topic, &m.payload);
    }
    let amended = pipeline.counters().late_amended;
    let started = Instant::now();
    for m in &late {
        refused += feed(&mut pipeline, "search-judgments", m);
    }
    pipeline.finalize_expired(None);
    let late_ms = started.elapsed().as_secs_f64() * 1e3;
    refused += 1_000 - (pipeline.counters().late_amended - amended);
    std::hint::black_box(&pipeline);
    HotKey { open_ms, late_ms, refused }
}

/// Partitions of the consumer-order measurement (as in `bench kafka`).
pub const CONSUMER_ORDER_PARTITIONS: usize = 4;
/// Event time between two lists of `bench pipeline`'s mix (ms).
pub const PIPELINE_SPACING_MS: f64 = 4.0;
/// How far the judgments trail their impressions in the consumer-order
/// measurement, in event time (ms): up to `kafka.max_topic_drift`'s
/// default, 30 s, as a consumer catching up reads them; live clicks trail
/// by seconds to minutes too. Within the gap (30 s), so that every list
/// still takes its judgments open rather than as late amendments.
pub const CONSUMER_ORDER_LAG_MS: f64 = 25_000.0;

/// The mix as a consumer of the two topics reads it rather than list by
/// list: each message goes to a partition by its key (the session id, as
/// producers key them); impressions and judgments are two streams read in
/// turns of 256 impressions, the judgments `lag_lists` lists behind. A
/// judgment then finds its list cold in the caches, as in the daemon,
/// where in list order it comes right after its impression.
pub fn consumer_order(messages: &[MixMessage], partitions: usize, lag_lists: usize) -> Vec<(usize, &MixMessage)> {
    let partition = |m: &MixMessage| (xxhash_rust::xxh3::xxh3_64(m.key.as_bytes()) % partitions.max(1) as u64) as usize;
    let impressions: Vec<&MixMessage> = messages.iter().filter(|m| !m.judgment).collect();
    let judgments: Vec<&MixMessage> = messages.iter().filter(|m| m.judgment).collect();
    let per_list = judgments.len() / impressions.len().max(1);
    let mut order = Vec::with_capacity(messages.len());
    let (mut i, mut j) = (0, 0);
    while i < impressions.len() || j < judgments.len() {
        let end = (i + 256).min(impressions.len());
        order.extend(impressions[i..end].iter().map(|m| (partition(m), *m)));
        i = end;
        let through = if i == impressions.len() { judgments.len() } else { i.saturating_sub(lag_lists) * per_list };
        order.extend(judgments[j..through.max(j)].iter().map(|m| (partition(m), *m)));
        j = through.max(j);
    }
    order
}

/// The pipeline alone on one core, one shard per partition, on messages in
/// [`consumer_order`]: events per second, and the judgments that came
/// after their list was final (0 unless the lag exceeds the gap, which
/// would time the late-judgment path instead).
pub fn pipeline_throughput_in_order(config: &Config, order: &[(usize, &MixMessage)], partitions: usize) -> (f64, u64) {
    let mut shards: Vec<Pipeline> =
        (0..partitions.max(1)).map(|_| Pipeline::new(&config.pipeline_settings())).collect();
    let clock = Clock::replay();
    let started = Instant::now();
    // As the daemon reads: a batch decoded and its lists prefetched, then applied.
    let mut decoded = Vec::with_capacity(rankpulse_core::pipeline::PREFETCH_BATCH);
    for batch in order.chunks(rankpulse_core::pipeline::PREFETCH_BATCH) {
        decoded.clear();
        for (p, m) in batch {
            let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
            decoded.push(shards.get(*p).map(|shard| shard.prepare(topic, &m.payload)));
        }
        for ((p, m), event) in batch.iter().zip(&decoded) {
            let topic = if m.judgment { "search-judgments" } else { "search-impressions" };
            if let (Some(shard), Some(event)) = (shards.get_mut(*p), event) {
                let _ = shard.ingest_decoded(topic, event, clock, None);
            }
        }
    }
    shards.iter_mut().for_each(Pipeline::finalize_all);
    let rate = order.len() as f64 / started.elapsed().as_secs_f64();
    (rate, shards.iter().map(|s| s.counters().late_amended + s.counters().late_dropped).sum())
}

/// Resident memory of this process in bytes (Linux), 0 elsewhere.
pub fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

/// What [`open_list_memory`] measured.
#[derive(Debug, Clone, Copy)]
pub struct OpenListMemory {
    /// Resident bytes before and after opening the lists.
    pub before: u64,
    pub after: u64,
    pub per_list: f64,
    /// A tick's event-time expiry with every list open and none due (ms).
    pub tick_ms: f64,
    /// A walk of every list, as processing-time expiry does on idle
    /// partitions (and as every tick did before the expiry slots) (ms).
    pub walk_ms: f64,
}

/// Opens `lists` lists of 10 results (impressions only, none final),
/// measures resident memory per open list, then times a tick's expiry.
pub fn open_list_memory(config: &Config, lists: usize) -> OpenListMemory {
    let mut config = config.clone();
    config.session.gap = "1h".parse().unwrap_or(config.session.gap);
    let mut pipeline = Pipeline::new(&config.pipeline_settings());
    let clock = Clock::replay();
    // Generated in small chunks so that the input, freed after each, adds
    // next to nothing to the resident size.
    let before = rss_bytes();
    let chunk = 1_000;
    let mut done = 0;
    while done < lists {
        let n = chunk.min(lists - done);
        for (i, m) in mix(done, n, 7, 1_763_780_000_000, 0.01).iter().filter(|m| !m.judgment).enumerate() {
            // Each list holds its source offset, as in the daemon without
            // checkpoints (the at-least-once commit point).
            let source = rankpulse_core::assemble::Source { id: 0, offset: (done + i) as i64 };
            let _ = pipeline.ingest("search-impressions", &m.payload, clock, Some(source));
        }
        done += n;
    }
    let after = rss_bytes();
    let open = pipeline.open_lists().max(1);
    let per_list = after.saturating_sub(before) as f64 / open as f64;
    let started = Instant::now();
    pipeline.finalize_expired(None);
    let tick_ms = started.elapsed().as_secs_f64() * 1000.0;
    // Processing time far before the lists' arrivals: nothing closes.
    let started = Instant::now();
    pipeline.finalize_expired(Some(i64::MIN / 2));
    let walk_ms = started.elapsed().as_secs_f64() * 1000.0;
    assert_eq!(pipeline.open_lists(), open, "the timed ticks closed nothing");
    std::hint::black_box(&pipeline);
    OpenListMemory { before, after, per_list, tick_ms, walk_ms }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumer_order_reads_every_message_once_judgments_the_lag_behind() {
        let messages = mix(0, 1_000, 7, 0, 1.0);
        let order = consumer_order(&messages, 4, 100);
        assert_eq!(order.len(), messages.len());
        // Each message once; each stream in its own order.
        let position = |m: &MixMessage| messages.iter().position(|x| std::ptr::eq(x, m)).unwrap_or(usize::MAX);
        let read: Vec<usize> = order.iter().map(|(_, m)| position(m)).collect();
        let mut seen = read.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen.len(), messages.len());
        for judgment in [false, true] {
            let stream: Vec<usize> = read.iter().copied().filter(|&i| messages[i].judgment == judgment).collect();
            assert!(stream.windows(2).all(|w| w[0] < w[1]), "judgment stream {judgment} keeps its order");
        }
        // A judgment of list k (message 4k + 1..=3) comes once the
        // impressions of lists up to k + 100 are read (or all of them).
        let mut impressions_read = 0;
        for (_, m) in &order {
            let i = position(m);
            if m.judgment {
                assert!(impressions_read >= (i / 4 + 100 + 1).min(1_000), "judgment {i} after {impressions_read}");
            } else {
                impressions_read += 1;
            }
        }
        // Partitions by key: every message of a list in the same one.
        for (p, m) in &order {
            let first = order.iter().find(|(_, x)| x.key == m.key).map(|(q, _)| *q);
            assert_eq!(first, Some(*p));
        }
        assert!((0..4).all(|p| order.iter().any(|(q, _)| *q == p)));
    }

    #[test]
    fn in_the_benchs_consumer_order_every_judgment_finds_its_list_open() {
        let messages = mix(0, 20_000, 42, 1_763_780_000_000, PIPELINE_SPACING_MS);
        let order = consumer_order(&messages, 4, (CONSUMER_ORDER_LAG_MS / PIPELINE_SPACING_MS) as usize);
        let (_, late) = pipeline_throughput_in_order(&Config::default(), &order, 4);
        assert_eq!(late, 0);
        // Judgments a minute behind (past the 30 s gap) are late: the
        // count above is what tells.
        let order = consumer_order(&messages, 4, (60_000.0 / PIPELINE_SPACING_MS) as usize);
        let (_, late) = pipeline_throughput_in_order(&Config::default(), &order, 4);
        assert!(late > 10_000, "{late} late judgments");
    }
}
