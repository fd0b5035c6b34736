//! `rankpulse-bench loop-gap`: how long the consumer loop keeps the stream
//! waiting while the state is large. 16 partitions, 200 dimension
//! combinations in every partition's shard, lists spread over the last hour
//! so that each shard holds a cell in every 10 s bucket of the 1 h window
//! for each combination (16 × 200 × 360 cells once caught up), produced to
//! librdkafka's in-process mock cluster as the daemon consumes them, a
//! backlog of about [`LEAD`] messages ahead of it throughout. The
//! daemon measures the gaps itself (`daemon::loop_gaps`: between two
//! messages handled while more were already fetched), with and without
//! `state.dir`.

use crate::kafka::{BenchError, bulk_producer, consumed, scrape_path};
use rankpulse::config::Config;
use rankpulse_testkit::Rng;
use rdkafka::producer::{BaseRecord, Producer};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";
pub const PARTITIONS: i32 = 16;
/// 10 rankers × 20 markets.
pub const COMBINATIONS: usize = 200;
const HOUR_MS: i64 = 3_600_000;

/// One variant's figures.
#[derive(Debug)]
pub struct LoopGapReport {
    pub variant: &'static str,
    pub messages: u64,
    pub seconds: f64,
    pub gaps: u64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub over_50ms: u64,
}

impl std::fmt::Display for LoopGapReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:<10} {:>9} messages in {:>5.1} s ({:>7.0}/s); {:>7} gaps: p99 {:>6.1} ms, p99.9 {:>6.1} ms, max {:>6.1} ms, {} over 50 ms",
            self.variant,
            self.messages,
            self.seconds,
            self.messages as f64 / self.seconds.max(1e-9),
            self.gaps,
            self.p99_ms,
            self.p999_ms,
            self.max_ms,
            self.over_50ms
        )
    }
}

/// At most this many messages produced and not yet consumed: librdkafka's
/// mock cluster keeps only the last 5 MB (or 100,000 messages) of each
/// partition, so the backlog is produced as the daemon consumes, kept
/// deep enough that the loop always has messages waiting.
const LEAD: u64 = 150_000;

/// Produces `lists` lists (an impression of 5 results and one judgment)
/// over the hour before now, in time order: list `i` has combination
/// `i % 200` and goes to partition `(i / 200) % 16`, so every shard sees
/// every combination in every bucket once `lists` ≥ 16 × 200 × 360. Stays
/// at most [`LEAD`] messages ahead of `consumed`.
fn fill(brokers: &str, lists: usize, seed: u64, consumed: &AtomicU64) -> Result<u64, BenchError> {
    let producer = bulk_producer(brokers)?;
    let mut rng = Rng::new(seed);
    let start_ms = wall_ms() - HOUR_MS;
    let spacing = (HOUR_MS - 60_000) as f64 / lists.max(1) as f64;
    let mut sent = 0;
    for i in 0..lists {
        while sent > consumed.load(Ordering::Relaxed) + LEAD {
            producer.poll(Duration::from_millis(10));
        }
        let t = start_ms + (i as f64 * spacing) as i64;
        let combination = i % COMBINATIONS;
        let partition = ((i / COMBINATIONS) % PARTITIONS as usize) as i32;
        let session = format!("s-{i:09}");
        let results: Vec<String> =
            (0..5).map(|p| format!(r#"{{"doc_id":"d{}","position":{}}}"#, rng.below(100_000), p + 1)).collect();
        let impression = format!(
            r#"{{"type":"impression","event_id":"i-{i}","session_id":"{session}","timestamp":{t},"results":[{}],"dimensions":{{"ranker":"r{}","market":"m{:02}"}}}}"#,
            results.join(","),
            combination % 10,
            combination / 10
        );
        let clicked = rng.below(5) as usize;
        let doc = &results[clicked];
        let doc_id = doc.split('"').nth(3).unwrap_or("d0");
        let judgment = format!(
            r#"{{"type":"judgment","event_id":"j-{i}","session_id":"{session}","doc_id":"{doc_id}","action":"click","timestamp":{}}}"#,
            t + 800
        );
        for (topic, payload) in [(IMPRESSIONS, impression), (JUDGMENTS, judgment)] {
            let mut record = BaseRecord::to(topic).key(session.as_str()).payload(payload.as_str()).partition(partition);
            while let Err((_, r)) = producer.send(record) {
                record = r;
                producer.poll(Duration::from_millis(1));
            }
            sent += 1;
        }
    }
    producer.flush(Duration::from_secs(300))?;
    Ok(sent)
}

fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Has the daemon consume `lists` lists from a fresh mock cluster with
/// `config` (defaults: windows 1m, 5m, 1h at 10 s buckets) as they are
/// produced, without and with `state.dir`.
pub async fn run(config: &Config, lists: usize, seed: u64) -> Result<Vec<LoopGapReport>, BenchError> {
    let mut reports = Vec::new();
    for variant in ["default", "state.dir"] {
        let cluster = rdkafka::mocking::MockCluster::new(1)?;
        for topic in [IMPRESSIONS, JUDGMENTS] {
            cluster.create_topic(topic, PARTITIONS, 1)?;
        }
        let brokers = cluster.bootstrap_servers();
        let mut config = config.clone();
        config.kafka.brokers = brokers.clone();
        config.kafka.group_id = format!("rankpulse-bench-loop-gap-{}-{variant}", std::process::id());
        config.kafka.properties.insert("auto.offset.reset".into(), "earliest".into());
        let dir = std::env::temp_dir().join(format!("rankpulse-bench-loop-gap-{}", std::process::id()));
        if variant == "state.dir" {
            let _ = std::fs::remove_dir_all(&dir);
            config.state.dir = dir.display().to_string();
        }
        let consumed = Arc::new(AtomicU64::new(0));
        let c = consumed.clone();
        let producer = tokio::task::spawn_blocking(move || fill(&brokers, lists, seed, &c));
        reports.push(measure(config, 2 * lists as u64, variant, &consumed).await?);
        producer.await.map_err(|e| std::io::Error::other(e.to_string()))??;
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(reports)
}

/// Longest the consumed count may stand still before messages count as
/// lost (the mock cluster dropped what the producer ran ahead with).
const STALL: Duration = Duration::from_secs(60);

async fn measure(
    config: Config,
    total: u64,
    variant: &'static str,
    progress: &AtomicU64,
) -> Result<LoopGapReport, BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Handle::current();
    // On a thread of its own, as `rankpulse run` drives it (see `bench::kafka`).
    let task = tokio::task::spawn_blocking(move || {
        runtime.block_on(rankpulse::daemon::run_on(config, listener, async move {
            let _ = stopped.await;
        }))
    });
    let mut last = (0, Instant::now());
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let body = scrape_path(addr, "/metrics").await.unwrap_or_default();
        let done = consumed(&body);
        progress.store(done, Ordering::Relaxed);
        if done >= total {
            break;
        }
        if done != last.0 {
            last = (done, Instant::now());
        } else if last.1.elapsed() > STALL {
            let _ = stop.send(());
            return Err(BenchError::Timeout { what: "the daemon", secs: STALL.as_secs(), done, total });
        }
    }
    let _ = stop.send(());
    let summary = task.await.map_err(|e| std::io::Error::other(e.to_string()))??;
    let gaps = &summary.loop_gaps;
    let ms = |d: Option<Duration>| d.map_or(0.0, |d| d.as_secs_f64() * 1000.0);
    let seconds = match (summary.first_message_at, summary.last_message_at) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
        _ => 0.0,
    };
    Ok(LoopGapReport {
        variant,
        messages: summary.messages,
        seconds,
        gaps: gaps.count(),
        p99_ms: ms(gaps.quantile(0.99)),
        p999_ms: ms(gaps.quantile(0.999)),
        max_ms: gaps.max().as_secs_f64() * 1000.0,
        over_50ms: gaps.count_over(Duration::from_millis(50)),
    })
}
