//! `rankpulse-bench kafka`: end to end through a real broker, side by side
//! with a ceiling measured in the same run.
//!
//! 1. Fill: the seeded mix is produced to `search-impressions` and
//!    `search-judgments`, keyed by session id.
//! 2. Ceiling: a bare consumer (same librdkafka settings, its own group)
//!    reads every message and only decodes it.
//! 3. The daemon (`daemon::run_on`, its own group, `/metrics` scraped every
//!    second) consumes the same messages: decode, assemble, score,
//!    accumulate, commit.
//!
//! Throughput is counted from the first to the last message (group joins
//! excluded); CPU is the process's user + system time over the same span,
//! read from /proc, so "per core" is events per CPU-second. The daemon's
//! CPU is sampled every 20 ms and read at its first and last message; its
//! shutdown, which finalizes the lists still open at the end, is added. It
//! leaves out the bench's driver thread, which scrapes `/metrics` as
//! Prometheus would from another process; serving the scrape is counted.

use rankpulse::config::Config;
use rankpulse_core::event::decode;
use rankpulse_testkit::{MixMessage, mean_sizes, mix};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::fmt;
use std::time::{Duration, Instant};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error(transparent)]
    Kafka(#[from] KafkaError),
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Daemon(#[from] rankpulse::daemon::DaemonError),
    #[error("{what} did not finish in {secs} s ({done} of {total} messages)")]
    Timeout { what: &'static str, secs: u64, done: u64, total: u64 },
    #[error("{0}")]
    Window(String),
    #[error("--cpu-limit: {0}")]
    CpuLimit(String),
    #[error("the daemon's process exited ({0}); `rankpulse run` with the same RANKPULSE__* environment shows why")]
    Exited(String),
}

/// What one run measured.
#[derive(Debug, Clone)]
pub struct KafkaReport {
    pub messages: u64,
    pub impression_bytes: f64,
    pub judgment_bytes: f64,
    pub fill_per_second: Option<f64>,
    /// One entry per round: the ceiling, then the daemon, on the same data.
    pub rounds: Vec<Round>,
}

/// The bare consumer, then the daemon, each in a consumer group of its own.
#[derive(Debug, Clone, Copy)]
pub struct Round {
    pub bare: Measured,
    pub daemon: Measured,
    /// The daemon's most open lists in a scrape, and its topic pauses
    /// (`kafka.max_topic_drift`): how far judgments ran ahead of their
    /// impressions.
    pub daemon_open_lists_peak: u64,
    pub daemon_topic_pauses: u64,
}

impl Round {
    /// Daemon / ceiling: (events/s, events/s per core).
    pub fn ratios(&self, n: u64) -> (f64, f64) {
        (self.daemon.rate(n) / self.bare.rate(n).max(1e-9), self.daemon.per_core(n) / self.bare.per_core(n).max(1e-9))
    }
}

#[derive(Debug, Clone, Copy)]
pub struct Measured {
    pub seconds: f64,
    /// CPU time spent on the messages, `shutdown_cpu_seconds` included.
    pub cpu_seconds: f64,
    /// Of `cpu_seconds`, the daemon's shutdown: finalizing the lists still
    /// open after the last message, the final commit and leaving the group
    /// (0 for the bare consumer).
    pub shutdown_cpu_seconds: f64,
    /// Whether the CPU samples cover the first and the last message and
    /// show CPU used between them, and the shutdown's CPU was read.
    pub cpu_measured: bool,
}

impl Measured {
    fn rate(&self, n: u64) -> f64 {
        n as f64 / self.seconds.max(1e-9)
    }
    fn per_core(&self, n: u64) -> f64 {
        n as f64 / self.cpu_seconds.max(1e-9)
    }
}

/// The median of `values` (the mean of the middle two for an even count).
pub fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

impl fmt::Display for KafkaReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.messages;
        writeln!(
            f,
            "mix: {n} messages, 1 impression ({:.0} B) : 3 judgments ({:.0} B)",
            self.impression_bytes, self.judgment_bytes
        )?;
        if let Some(r) = self.fill_per_second {
            writeln!(f, "fill: {r:.0} messages/s produced")?;
        }
        let many = self.rounds.len() > 1;
        for (i, round) in self.rounds.iter().enumerate() {
            if many {
                writeln!(f, "round {}:", i + 1)?;
            }
            for (name, m) in [("bare consumer (decode only)", &round.bare), ("daemon (full pipeline)", &round.daemon)] {
                writeln!(
                    f,
                    "{name}: {:.0} events/s over {:.2} s, {:.2} CPU-s ({:.2} cores): {:.0} events/s per core",
                    m.rate(n),
                    m.seconds,
                    m.cpu_seconds,
                    m.cpu_seconds / m.seconds.max(1e-9),
                    m.per_core(n)
                )?;
            }
            writeln!(
                f,
                "daemon: of its CPU, {:.2} CPU-s at shutdown (finalizing the lists still open after the last message, the final commit, leaving the group)",
                round.daemon.shutdown_cpu_seconds
            )?;
            writeln!(
                f,
                "daemon: at most {} lists open in a scrape; {} topic pauses",
                round.daemon_open_lists_peak, round.daemon_topic_pauses
            )?;
            let (rate, per_core) = round.ratios(n);
            write!(f, "daemon / ceiling: {rate:.2} (events/s), {per_core:.2} (events/s per core)")?;
            if !round.daemon.cpu_measured {
                write!(
                    f,
                    "\nwarning: the daemon's CPU was not measured (the samples do not cover its first and last message, or show no CPU between them): its CPU figures mean nothing"
                )?;
            }
            if many {
                writeln!(f)?;
            }
        }
        if many {
            // Each round's ratio pairs a ceiling and a daemon measured
            // seconds apart; the median of those pairs is what a shared,
            // noisy machine can tell.
            // A round whose daemon CPU was not measured has no per-core
            // figures: it is left out of every median, not counted as
            // whatever its arithmetic gave.
            let measured: Vec<&Round> = self.rounds.iter().filter(|r| r.daemon.cpu_measured).collect();
            let mut per_core: Vec<f64> = measured.iter().map(|r| r.ratios(n).1).collect();
            let mut rate: Vec<f64> = measured.iter().map(|r| r.ratios(n).0).collect();
            let mut daemon: Vec<f64> = measured.iter().map(|r| r.daemon.per_core(n)).collect();
            let mut bare: Vec<f64> = measured.iter().map(|r| r.bare.per_core(n)).collect();
            let left_out = self.rounds.len() - measured.len();
            if left_out > 0 {
                writeln!(f, "{left_out} round(s) left out of the medians: the daemon's CPU was not measured")?;
            }
            let range =
                |v: &[f64]| (v.iter().copied().fold(f64::INFINITY, f64::min), v.iter().copied().fold(0.0, f64::max));
            let (lo, hi) = range(&per_core);
            let (dlo, dhi) = range(&daemon);
            write!(
                f,
                "median of {} rounds: daemon {:.0} events/s per core ({dlo:.0}–{dhi:.0}), bare {:.0}; daemon / ceiling {:.2} (events/s), {:.2} (events/s per core; rounds {lo:.2}–{hi:.2})",
                measured.len(),
                median(&mut daemon),
                median(&mut bare),
                median(&mut rate),
                median(&mut per_core),
            )?;
        }
        Ok(())
    }
}

/// User + system CPU time of this process, seconds (Linux).
pub fn cpu_seconds() -> f64 {
    cpu_seconds_at("/proc/self/stat")
}

/// The process's CPU time but the calling thread's, seconds (Linux): the
/// daemon's share while the bench's own driver (the scrape client, which
/// stands in for Prometheus, and the /proc sampling) runs on that thread.
/// Its first scrape alone cost 0.15 CPU-s in a profile: reading the body
/// grew a buffer into a heap the bare consumer had just freed, and glibc
/// consolidated it. `None` when either read of /proc failed: a reading
/// taken as 0 for one of them would be off by the whole run's CPU.
fn cpu_seconds_but_this_thread() -> Option<f64> {
    Some(read_cpu_seconds("/proc/self/stat")? - read_cpu_seconds("/proc/thread-self/stat")?)
}

/// User + system CPU time of process `pid`, seconds (Linux).
pub fn cpu_seconds_of(pid: u32) -> f64 {
    cpu_seconds_at(&format!("/proc/{pid}/stat"))
}

fn cpu_seconds_at(path: &str) -> f64 {
    read_cpu_seconds(path).unwrap_or(0.0)
}

fn read_cpu_seconds(path: &str) -> Option<f64> {
    let stat = std::fs::read_to_string(path).ok()?;
    // Fields after the command name (which may contain spaces): utime is the
    // 14th field overall, stime the 15th; clock ticks are 100 per second.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

const IMPRESSIONS: &str = "search-impressions";
const JUDGMENTS: &str = "search-judgments";

/// Queues one message of the mix on its topic, keyed by session, waiting
/// for room when the producer's queue is full.
fn send(producer: &BaseProducer, m: &MixMessage) {
    let topic = if m.judgment { JUDGMENTS } else { IMPRESSIONS };
    let mut record = BaseRecord::to(topic).key(m.key.as_str()).payload(m.payload.as_slice());
    while let Err((_, r)) = producer.send(record) {
        record = r;
        producer.poll(Duration::from_millis(1));
    }
}

/// A producer for filling a backlog as fast as the broker takes it: large
/// batches and a queue deep enough that `send` rarely waits.
pub(crate) fn bulk_producer(brokers: &str) -> Result<BaseProducer, BenchError> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "2000000")
        .set("queue.buffering.max.kbytes", "2097151")
        .create()?)
}

fn fill(brokers: &str, messages: &[MixMessage]) -> Result<f64, BenchError> {
    let producer = bulk_producer(brokers)?;
    let started = Instant::now();
    for m in messages {
        send(&producer, m);
    }
    producer.flush(Duration::from_secs(300))?;
    Ok(messages.len() as f64 / started.elapsed().as_secs_f64())
}

/// The daemon's consumer defaults, then the `[kafka.properties]` of `config`.
fn consumer_settings(cc: &mut ClientConfig, config: &Config) {
    for (key, value) in rankpulse::kafka::CONSUMER_DEFAULTS {
        cc.set(*key, *value);
    }
    for (key, value) in &config.kafka.properties {
        cc.set(key, value);
    }
}

/// A bare consumer of both topics in its own group `rankpulse-bench-<name>`,
/// with the daemon's consumer settings: what it measures differs from the
/// daemon by the pipeline only.
fn bare_consumer(config: &Config, brokers: &str, name: &str, reset: &str) -> Result<BaseConsumer, BenchError> {
    let mut cc = ClientConfig::new();
    cc.set("bootstrap.servers", brokers)
        .set("group.id", format!("rankpulse-bench-{name}-{}", std::process::id()))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", reset);
    consumer_settings(&mut cc, config);
    let consumer: BaseConsumer = cc.create()?;
    consumer.subscribe(&[IMPRESSIONS, JUDGMENTS])?;
    Ok(consumer)
}

fn bare(config: Config, brokers: &str, total: u64, round: usize) -> Result<Measured, BenchError> {
    let limits = config.decode_limits();
    let consumer = bare_consumer(&config, brokers, &format!("bare-{round}"), "earliest")?;
    let deadline = Instant::now() + Duration::from_secs(600);
    let (mut seen, mut decoded) = (0u64, 0u64);
    let mut first: Option<(Instant, f64)> = None;
    while seen < total {
        // The deadline is checked when nothing came and every 4,096
        // messages, not per message: the ceiling reads no clock of its own
        // per message (that was 3% of its thread in a perf profile).
        let polled = consumer.poll(Duration::from_millis(100));
        if (polled.is_none() || seen % 4096 == 0) && Instant::now() > deadline {
            return Err(BenchError::Timeout { what: "the bare consumer", secs: 600, done: seen, total });
        }
        if let Some(Ok(m)) = polled {
            if first.is_none() {
                first = Some((Instant::now(), cpu_seconds()));
            }
            seen += 1;
            if decode(m.payload().unwrap_or(b""), &limits).is_ok() {
                decoded += 1;
            }
        }
    }
    let (t0, c0) = first.unwrap_or((Instant::now(), cpu_seconds()));
    std::hint::black_box(decoded);
    Ok(Measured {
        seconds: t0.elapsed().as_secs_f64(),
        cpu_seconds: cpu_seconds() - c0,
        shutdown_cpu_seconds: 0.0,
        cpu_measured: true,
    })
}

/// How often the bench samples the daemon's CPU time: often enough that
/// the CPU at its first and last message is read to within a few ms of
/// work, on the bench's own thread (left out of the daemon's CPU).
const CPU_SAMPLE: Duration = Duration::from_millis(20);
/// Scrape period, as a Prometheus scrape interval.
const SCRAPE_EVERY: Duration = Duration::from_secs(1);

/// Two clock ticks: the process's and the thread's CPU are read at two
/// instants, each rounded down to a 10 ms tick.
const TICK_SLACK_SECONDS: f64 = 0.02;

/// Appends a (time, CPU) sample unless it is lower than the last one kept
/// (beyond the ticks' rounding): CPU time never goes back, so such a
/// reading, or the one before it, is wrong, and the later samples tell
/// which. The earlier one is dropped when the new one is higher than the
/// one before it, else the new one is.
fn keep_sample(samples: &mut Vec<(Instant, f64)>, at: Instant, cpu: f64) {
    while let Some(&(_, last)) = samples.last() {
        if cpu >= last - TICK_SLACK_SECONDS {
            break;
        }
        // `last` is above the new reading: wrong if the reading before it
        // agrees with the new one (or there is none: the later samples
        // tell), else the new one is.
        match samples.len().checked_sub(2).map(|i| samples[i].1) {
            Some(before) if cpu < before - TICK_SLACK_SECONDS => return,
            _ => {
                samples.pop();
            }
        }
    }
    samples.push((at, cpu));
}

/// The CPU time at `at`, linearly between the (time, CPU) samples around
/// it; `None` outside the samples.
fn cpu_at(samples: &[(Instant, f64)], at: Instant) -> Option<f64> {
    let after = samples.iter().position(|s| s.0 >= at)?;
    let (t1, c1) = samples[after];
    if after == 0 {
        return (t1 == at).then_some(c1);
    }
    let (t0, c0) = samples[after - 1];
    let span = t1.duration_since(t0).as_secs_f64();
    let part = if span > 0.0 { at.duration_since(t0).as_secs_f64() / span } else { 1.0 };
    Some(c0 + (c1 - c0) * part)
}

/// The daemon's measurement, its peak open lists and its topic pauses.
///
/// Its CPU is what the process (the bench's driver thread aside) used from
/// its first message to its last, plus its shutdown: stopping finalizes,
/// scores and accumulates the lists still open at the end, work that
/// running on would have done within the span. Group joins and the idle
/// tail before the stop are left out, as the bare consumer's are.
async fn daemon(base: &Config, brokers: &str, total: u64, round: usize) -> Result<(Measured, u64, u64), BenchError> {
    let mut config = base.clone();
    config.kafka.brokers = brokers.to_string();
    config.kafka.group_id = format!("rankpulse-bench-daemon-{}-{round}", std::process::id());
    let (addr, stop, task) = start_daemon(config).await?;
    // Scraped every second, as Prometheus would; done when every message is
    // counted. This future is awaited, not spawned: it runs on the thread
    // that `cpu_seconds_but_this_thread` leaves out.
    let deadline = Instant::now() + Duration::from_secs(600);
    let mut samples: Vec<(Instant, f64)> = Vec::new();
    let (mut open_peak, mut pauses) = (0u64, 0u64);
    let mut next_scrape = Instant::now() + SCRAPE_EVERY;
    loop {
        tokio::time::sleep(CPU_SAMPLE).await;
        let now = Instant::now();
        if let Some(cpu) = cpu_seconds_but_this_thread() {
            keep_sample(&mut samples, now, cpu);
        }
        if now < next_scrape {
            continue;
        }
        next_scrape += SCRAPE_EVERY;
        let body = scrape(addr).await.unwrap_or_default();
        let consumed = consumed(&body);
        open_peak = open_peak.max(sum(&body, "rankpulse_open_lists") as u64);
        pauses = pauses.max(sum(&body, "rankpulse_topic_pauses_total") as u64);
        if consumed >= total {
            break;
        }
        if Instant::now() > deadline {
            let _ = stop.send(());
            return Err(BenchError::Timeout { what: "the daemon", secs: 600, done: consumed, total });
        }
    }
    let stopping_cpu = cpu_seconds_but_this_thread();
    let _ = stop.send(());
    let summary = task.await.map_err(|e| std::io::Error::other(e.to_string()))??;
    let shutdown_cpu = stopping_cpu.zip(cpu_seconds_but_this_thread()).map(|(before, after)| after - before);
    let (Some(first), Some(last)) = (summary.first_message_at, summary.last_message_at) else {
        return Ok((
            Measured { seconds: 0.0, cpu_seconds: 0.0, shutdown_cpu_seconds: 0.0, cpu_measured: false },
            open_peak,
            pauses,
        ));
    };
    let span = (cpu_at(&samples, first), cpu_at(&samples, last));
    let (consuming_cpu, shutdown_cpu, cpu_measured) = match (span, shutdown_cpu) {
        // Consuming millions of messages takes CPU: nothing or less is a
        // measurement gone wrong, not a fast daemon.
        ((Some(a), Some(b)), Some(shutdown)) if b > a => (b - a, shutdown, true),
        _ => (0.0, 0.0, false),
    };
    let measured = Measured {
        seconds: last.duration_since(first).as_secs_f64(),
        cpu_seconds: consuming_cpu + shutdown_cpu,
        shutdown_cpu_seconds: shutdown_cpu,
        cpu_measured,
    };
    Ok((measured, open_peak, pauses))
}

async fn scrape(addr: std::net::SocketAddr) -> std::io::Result<String> {
    scrape_path(addr, "/metrics").await
}

/// Wall-clock time, epoch milliseconds (Kafka timestamps' clock).
fn wall_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Messages a daemon consumed, valid or not, according to its exposition.
pub(crate) fn consumed(exposition: &str) -> u64 {
    (sum(exposition, "rankpulse_events_total") + sum(exposition, "rankpulse_events_rejected_total")) as u64
}

type DaemonTask = tokio::task::JoinHandle<Result<rankpulse::daemon::RunSummary, rankpulse::daemon::DaemonError>>;

/// An in-process daemon on a free loopback port: its /metrics address, the
/// sender that stops it, and its task.
///
/// The daemon's loop runs on a thread of its own, driven by `block_on`, as
/// `rankpulse run` drives it on the main thread (its HTTP server goes to
/// the runtime's workers in both). Spawned as a task instead, it moved
/// between the two workers whenever librdkafka woke it (perf: 3,648 and
/// 2,504 samples on two threads), its open lists and accumulators
/// following it from one core's cache to the other's: a cost the deployed
/// daemon does not have.
async fn start_daemon(
    config: Config,
) -> Result<(std::net::SocketAddr, tokio::sync::oneshot::Sender<()>, DaemonTask), BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Handle::current();
    let task = tokio::task::spawn_blocking(move || {
        runtime.block_on(rankpulse::daemon::run_on(config, listener, async move {
            let _ = stopped.await;
        }))
    });
    Ok((addr, stop, task))
}

pub(crate) fn sum(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' ')))
        .filter_map(|l| l.rsplit(' ').next()?.trim().parse::<f64>().ok())
        .sum()
}

/// Puts the mix of `lists` and `seed` on the topics (unless `fill` is
/// false: they hold it already). Returns (messages, mean impression and
/// judgment sizes, messages/s produced).
pub(crate) async fn fill_topics(
    brokers: &str,
    lists: usize,
    seed: u64,
    fill_them: bool,
) -> Result<(u64, (f64, f64), Option<f64>), BenchError> {
    let now_ms = wall_ms();
    // Event times in the last minutes, 1 ms apart: windows and gaps behave as live.
    let messages = mix(0, lists, seed, now_ms - lists as i64, 1.0);
    let sizes = mean_sizes(&messages);
    let total = messages.len() as u64;
    let fill_per_second = if fill_them {
        let b = brokers.to_string();
        Some(
            tokio::task::spawn_blocking(move || fill(&b, &messages))
                .await
                .map_err(|e| std::io::Error::other(e.to_string()))??,
        )
    } else {
        None
    };
    Ok((total, sizes, fill_per_second))
}

/// Fills (unless `fill` is false), then measures the ceiling and the daemon.
/// `config`: the daemon's configuration (brokers and group aside); its
/// `[kafka.properties]` apply to the bare consumer too.
pub async fn run(
    config: &Config,
    brokers: &str,
    lists: usize,
    seed: u64,
    fill: bool,
    rounds: usize,
) -> Result<KafkaReport, BenchError> {
    let (total, (impression_bytes, judgment_bytes), fill_per_second) = fill_topics(brokers, lists, seed, fill).await?;
    let mut measured = Vec::new();
    for round in 0..rounds.max(1) {
        let b = brokers.to_string();
        let c = config.clone();
        let bare = tokio::task::spawn_blocking(move || bare(c, &b, total, round))
            .await
            .map_err(|e| std::io::Error::other(e.to_string()))??;
        let (daemon, daemon_open_lists_peak, daemon_topic_pauses) = daemon(config, brokers, total, round).await?;
        measured.push(Round { bare, daemon, daemon_open_lists_peak, daemon_topic_pauses });
    }
    Ok(KafkaReport { messages: total, impression_bytes, judgment_bytes, fill_per_second, rounds: measured })
}

/// What a paced run measured: the delay from each message's Kafka
/// timestamp to the moment the daemon applied it.
#[derive(Debug, Clone)]
pub struct FreshnessReport {
    /// The same paced production read by a bare consumer (no pipeline),
    /// just before: the broker's and the Kafka client's share of the delay.
    pub bare: Option<BareFreshness>,
    pub target_rate: f64,
    pub achieved_rate: f64,
    pub messages: u64,
    pub p50_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
    pub max_bucket_seconds: Option<f64>,
    /// (upper bound, cumulative count) of the daemon's histogram.
    pub buckets: Vec<(f64, f64)>,
    /// The daemon's topic pauses (`kafka.max_topic_drift`): none expected
    /// when both topics are produced live.
    pub topic_pauses: u64,
    /// Held to a CPU quota: (cores it used from the start of production to
    /// its last message, its quota), how close to its maximum it ran.
    pub cores_used: Option<(f64, f64)>,
}

/// What the bare consumer saw of a paced run.
#[derive(Debug, Clone)]
pub struct BareFreshness {
    pub achieved_rate: f64,
    pub messages: u64,
    pub p50_seconds: Option<f64>,
    pub p99_seconds: Option<f64>,
}

impl fmt::Display for FreshnessReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |v: Option<f64>| v.map_or("n/a".to_string(), |s| format!("{:.1} ms", s * 1000.0));
        if let Some(b) = &self.bare {
            writeln!(
                f,
                "bare consumer (decode only), same pacing: {} messages at {:.0}/s; delay p50 {}, p99 {}",
                b.messages,
                b.achieved_rate,
                ms(b.p50_seconds),
                ms(b.p99_seconds)
            )?;
        }
        write!(
            f,
            "daemon, paced: {} messages at {:.0}/s (target {:.0}/s); ingest delay p50 {}, p99 {}, slowest message within {}",
            self.messages,
            self.achieved_rate,
            self.target_rate,
            ms(self.p50_seconds),
            ms(self.p99_seconds),
            ms(self.max_bucket_seconds)
        )?;
        write!(f, "; {} topic pauses", self.topic_pauses)?;
        if let Some((used, quota)) = self.cores_used {
            write!(
                f,
                "\ndaemon: a `rankpulse run` process held to {quota} cores (CPU cgroup); it used {used:.2} of them"
            )?;
        }
        let cumulative: Vec<String> = self.buckets.iter().map(|(le, n)| format!("≤{le}s: {n}")).collect();
        write!(f, "\ncumulative delay buckets: {}", cumulative.join(", "))
    }
}

/// The cumulative buckets of `rankpulse_ingest_delay_seconds` in an exposition.
fn delay_buckets(exposition: &str) -> Vec<(f64, f64)> {
    let prefix = "rankpulse_ingest_delay_seconds_bucket{le=\"";
    exposition
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(prefix)?;
            let (le, value) = rest.split_once("\"} ")?;
            let le = if le == "+Inf" { f64::INFINITY } else { le.parse().ok()? };
            Some((le, value.trim().parse().ok()?))
        })
        .collect()
}

/// histogram_quantile over cumulative buckets.
fn quantile(buckets: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = buckets.last()?.1;
    let rank = q * total;
    let (mut lower, mut below) = (0.0, 0.0);
    for &(le, cumulative) in buckets {
        if cumulative >= rank && cumulative > below {
            if le.is_infinite() {
                return None;
            }
            return Some(lower + (le - lower) * (rank - below) / (cumulative - below));
        }
        lower = if le.is_finite() { le } else { lower };
        below = cumulative;
    }
    None
}

/// librdkafka's in-process mock cluster with both topics (4 partitions):
/// a broker that adds next to no latency, so that a freshness run shows
/// rankpulse's own delay. Keep it alive for the run.
pub fn mock_cluster()
-> Result<(rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>, String), BenchError> {
    let cluster = rdkafka::mocking::MockCluster::new(1)?;
    for topic in [IMPRESSIONS, JUDGMENTS] {
        cluster.create_topic(topic, 4, 1)?;
    }
    let bootstrap = cluster.bootstrap_servers();
    Ok((cluster, bootstrap))
}

/// The paced mix of a freshness run (event times from now).
fn paced_mix(rate: f64, seconds: f64, seed: u64) -> Vec<MixMessage> {
    let lists = ((rate * seconds) / 4.0).ceil() as usize;
    let now_ms = wall_ms();
    mix(0, lists, seed, now_ms, 4000.0 / rate.max(1.0))
}

/// A bare consumer (the daemon's consumer settings, decode only) reads
/// from the end of the topics while the mix is produced at `rate`: the
/// delay from each message's Kafka timestamp to its decoding.
fn bare_freshness(
    config: Config,
    brokers: &str,
    rate: f64,
    seconds: f64,
    seed: u64,
) -> Result<BareFreshness, BenchError> {
    let limits = config.decode_limits();
    let consumer = bare_consumer(&config, brokers, "fresh-bare", "latest")?;
    // Assigned, and positioned at the end, before producing.
    let deadline = Instant::now() + Duration::from_secs(120);
    while consumer.assignment().map_or(0, |a| a.count()) == 0 {
        let _ = consumer.poll(Duration::from_millis(100));
        if Instant::now() > deadline {
            return Err(BenchError::Timeout { what: "the bare consumer's group join", secs: 120, done: 0, total: 0 });
        }
    }
    let settle = Instant::now() + Duration::from_secs(2);
    while Instant::now() < settle {
        let _ = consumer.poll(Duration::from_millis(100));
    }
    let messages = paced_mix(rate, seconds, seed);
    let total = messages.len() as u64;
    let started_ms = wall_ms();
    let b = brokers.to_string();
    let producer = std::thread::spawn(move || paced(&b, &messages, rate));
    let mut delays = rankpulse::health::DelayHistogram::default();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds + 120.0);
    while delays.count < total && Instant::now() < deadline {
        if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
            let now = wall_ms();
            // Older messages (the broker's "latest" can lag its log end) are not this run's.
            if let Some(t) = m.timestamp().to_millis().filter(|t| *t >= started_ms) {
                std::hint::black_box(decode(m.payload().unwrap_or(b""), &limits).is_ok());
                delays.observe(now - t);
            }
        }
    }
    let achieved_rate = producer.join().map_err(|_| std::io::Error::other("the producer thread panicked"))??;
    Ok(BareFreshness {
        achieved_rate,
        messages: delays.count,
        p50_seconds: delays.quantile(0.5),
        p99_seconds: delays.quantile(0.99),
    })
}

/// The daemon of a freshness run.
enum FreshDaemon {
    /// In this process, on the bench's runtime.
    InProcess { addr: std::net::SocketAddr, stop: tokio::sync::oneshot::Sender<()>, task: DaemonTask },
    /// A `rankpulse run` child held to a CPU quota: the producer and the
    /// broker (outside its cgroup) cannot take its cores, as they would on
    /// a machine of its own.
    Limited { instance: crate::scale::Instance, cores: f64 },
}

impl FreshDaemon {
    fn addr(&self) -> std::net::SocketAddr {
        match self {
            FreshDaemon::InProcess { addr, .. } => *addr,
            FreshDaemon::Limited { instance, .. } => instance.http,
        }
    }

    /// CPU seconds the daemon has used (a child only: in this process the
    /// producer's share cannot be told apart).
    fn cpu_seconds(&self) -> Option<f64> {
        match self {
            FreshDaemon::InProcess { .. } => None,
            FreshDaemon::Limited { instance, .. } => Some(cpu_seconds_of(instance.child.id())),
        }
    }

    /// A child that is gone (a bad setting, a port taken): fail now rather
    /// than wait out the deadline.
    fn exited(&mut self) -> Option<String> {
        match self {
            FreshDaemon::InProcess { .. } => None,
            FreshDaemon::Limited { instance, .. } => match instance.child.try_wait() {
                Ok(Some(status)) => Some(status.to_string()),
                Ok(None) => None,
                Err(e) => Some(e.to_string()),
            },
        }
    }

    /// Stops it; its last exposition: in this process, the one published
    /// after the ordered shutdown; of a child, `last_scrape` (taken once it
    /// had consumed every message: the counters and the delay histogram are
    /// published together).
    async fn finish(self, last_scrape: String) -> Result<String, BenchError> {
        match self {
            FreshDaemon::InProcess { stop, task, .. } => {
                let _ = stop.send(());
                let summary = task.await.map_err(|e| std::io::Error::other(e.to_string()))??;
                Ok(summary.final_exposition)
            }
            FreshDaemon::Limited { instance, .. } => {
                drop(instance);
                Ok(last_scrape)
            }
        }
    }
}

/// Produces the mix at `rate` messages/s for `seconds` while a bare
/// consumer, then the daemon (each reading from the end of the topics)
/// consume it, and reads the daemon's ingest-delay histogram. With
/// `cpu_limit`, the daemon is a `rankpulse run` process held to that many
/// cores in a CPU cgroup (see [`crate::scale`]).
pub async fn freshness(
    base: &Config,
    brokers: &str,
    rate: f64,
    seconds: f64,
    seed: u64,
    cpu_limit: Option<f64>,
) -> Result<FreshnessReport, BenchError> {
    let (b, c) = (brokers.to_string(), base.clone());
    let bare = tokio::task::spawn_blocking(move || bare_freshness(c, &b, rate, seconds, seed))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    let group = format!("rankpulse-bench-fresh-{}", std::process::id());
    let mut daemon = match cpu_limit {
        None => {
            let mut config = base.clone();
            config.kafka.brokers = brokers.to_string();
            config.kafka.group_id = group;
            config.kafka.properties.insert("auto.offset.reset".into(), "latest".into());
            let (addr, stop, task) = start_daemon(config).await?;
            FreshDaemon::InProcess { addr, stop, task }
        }
        Some(cores) => {
            let env = [("RANKPULSE__KAFKA__PROPERTIES__AUTO_OFFSET_RESET", "latest")];
            let instance = crate::scale::start(brokers, &group, Some((cores, group.clone())), &env)?;
            FreshDaemon::Limited { instance, cores }
        }
    };
    let addr = daemon.addr();
    // Assigned (ready) before producing, so nothing is read as a backlog.
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let ready = scrape_path(addr, "/readyz").await.is_ok_and(|b| b.starts_with("HTTP/1.1 200"));
        if ready {
            break;
        }
        if let Some(status) = daemon.exited() {
            return Err(BenchError::Exited(status));
        }
        if Instant::now() > deadline {
            let _ = daemon.finish(String::new()).await;
            return Err(BenchError::Timeout { what: "the daemon's group join", secs: 120, done: 0, total: 0 });
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let messages = paced_mix(rate, seconds, seed);
    let total = messages.len() as u64;
    let b = brokers.to_string();
    let (cpu_before, started) = (daemon.cpu_seconds(), Instant::now());
    let produced = tokio::task::spawn_blocking(move || paced(&b, &messages, rate))
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))??;
    let deadline = Instant::now() + Duration::from_secs(120);
    let last_scrape = loop {
        let body = scrape(addr).await.unwrap_or_default();
        let consumed = consumed(&body);
        if consumed >= total {
            break body;
        }
        if let Some(status) = daemon.exited() {
            return Err(BenchError::Exited(status));
        }
        if Instant::now() > deadline {
            let _ = daemon.finish(String::new()).await;
            return Err(BenchError::Timeout { what: "the paced run", secs: 120, done: consumed, total });
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    let cores_used = match (cpu_before, daemon.cpu_seconds(), &daemon) {
        (Some(before), Some(after), FreshDaemon::Limited { cores, .. }) => {
            Some(((after - before) / started.elapsed().as_secs_f64(), *cores))
        }
        _ => None,
    };
    let exposition = daemon.finish(last_scrape).await?;
    // Messages from before the run (Tansu's "latest" offset can lag the
    // log end by a few thousand) are older than the whole run: left out.
    let run_seconds = seconds + 120.0;
    let buckets: Vec<(f64, f64)> =
        delay_buckets(&exposition).into_iter().filter(|(le, _)| *le <= run_seconds).collect();
    let max_bucket_seconds = buckets
        .windows(2)
        .rev()
        .find(|w| w[1].1 > w[0].1)
        .map(|w| w[1].0)
        .or_else(|| buckets.iter().find(|b| b.1 > 0.0).map(|b| b.0));
    Ok(FreshnessReport {
        bare: Some(bare),
        target_rate: rate,
        achieved_rate: produced,
        messages: total,
        p50_seconds: quantile(&buckets, 0.5),
        p99_seconds: quantile(&buckets, 0.99),
        max_bucket_seconds,
        buckets,
        topic_pauses: sum(&exposition, "rankpulse_topic_pauses_total") as u64,
        cores_used,
    })
}

/// Sends `messages` at `rate` per second in 10 ms slices; returns the rate achieved.
fn paced(brokers: &str, messages: &[MixMessage], rate: f64) -> Result<f64, BenchError> {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "1")
        .set("queue.buffering.max.messages", "2000000")
        .create()?;
    let started = Instant::now();
    for (i, m) in messages.iter().enumerate() {
        // Ahead of schedule: wait for the slice this message belongs to.
        let due = Duration::from_secs_f64(i as f64 / rate);
        let elapsed = started.elapsed();
        if due > elapsed + Duration::from_millis(10) {
            std::thread::sleep(due - elapsed);
        }
        send(&producer, m);
        if i % 1024 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    let rate = messages.len() as f64 / started.elapsed().as_secs_f64();
    producer.flush(Duration::from_secs(60))?;
    Ok(rate)
}

pub(crate) async fn scrape_path(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    Ok(String::from_utf8_lossy(&buf).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measured(seconds: f64, cpu_seconds: f64) -> Measured {
        Measured { seconds, cpu_seconds, shutdown_cpu_seconds: 0.0, cpu_measured: true }
    }

    #[test]
    fn a_cpu_sample_that_goes_back_is_dropped_and_so_is_one_that_jumped() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let kept = |readings: &[f64]| {
            let mut samples = Vec::new();
            for (i, &c) in readings.iter().enumerate() {
                keep_sample(&mut samples, at(20 * i as u64), c);
            }
            samples.iter().map(|s| s.1).collect::<Vec<f64>>()
        };
        assert_eq!(kept(&[1.0, 1.02, 1.05]), [1.0, 1.02, 1.05]);
        // Within the ticks' rounding: kept.
        assert_eq!(kept(&[1.0, 1.02, 1.01]), [1.0, 1.02, 1.01]);
        // A reading off by the whole run (one of the two reads of /proc
        // taken as 0): high, then the next one agrees with the one before.
        assert_eq!(kept(&[1.0, 1.02, 6.0, 1.06, 1.08]), [1.0, 1.02, 1.06, 1.08]);
        // Low: below the last two kept.
        assert_eq!(kept(&[1.0, 1.02, -4.0, 1.06]), [1.0, 1.02, 1.06]);
    }

    #[test]
    fn cpu_at_an_instant_is_read_between_the_samples_around_it() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let samples = [(at(0), 1.0), (at(20), 1.02), (at(40), 1.06)];
        assert_eq!(cpu_at(&samples, at(0)), Some(1.0));
        let mid = cpu_at(&samples, at(30)).unwrap();
        assert!((mid - 1.04).abs() < 1e-9, "{mid}");
        assert_eq!(cpu_at(&samples, at(40)), Some(1.06));
        // Outside the samples nothing is known.
        assert_eq!(cpu_at(&samples, at(41)), None);
        assert_eq!(cpu_at(&samples[1..], at(10)), None);
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&mut [4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median(&mut []).is_nan());
    }

    #[test]
    fn rounds_pair_a_ceiling_with_a_daemon_and_report_the_median_ratio() {
        // 1,000 messages; per core: bare 1000/1, 1000/2, 1000/1 events per
        // CPU-second; daemon 1000/2, 1000/2, 1000/4: ratios 0.5, 1.0, 0.25.
        let round = |bare_cpu: f64, daemon_cpu: f64| Round {
            bare: measured(1.0, bare_cpu),
            daemon: measured(2.0, daemon_cpu),
            daemon_open_lists_peak: 0,
            daemon_topic_pauses: 0,
        };
        let report = KafkaReport {
            messages: 1_000,
            impression_bytes: 800.0,
            judgment_bytes: 180.0,
            fill_per_second: None,
            rounds: vec![round(1.0, 2.0), round(2.0, 2.0), round(1.0, 4.0)],
        };
        assert_eq!(report.rounds[0].ratios(1_000), (0.5, 0.5));
        let text = report.to_string();
        assert!(text.contains("round 3:"), "{text}");
        assert!(
            text.ends_with(
                "median of 3 rounds: daemon 500 events/s per core (250–500), bare 1000; daemon / ceiling 0.50 (events/s), 0.50 (events/s per core; rounds 0.25–1.00)"
            ),
            "{text}"
        );
        // A fourth round whose daemon CPU was not measured (its arithmetic
        // would say 1000/0.01 per core): left out, not the new maximum.
        let mut unmeasured = round(1.0, 0.01);
        unmeasured.daemon.cpu_measured = false;
        let mut rounds = report.rounds.clone();
        rounds.push(unmeasured);
        let text = KafkaReport { rounds, ..report.clone() }.to_string();
        assert!(text.contains("warning: the daemon's CPU was not measured"), "{text}");
        assert!(
            text.ends_with(
                "1 round(s) left out of the medians: the daemon's CPU was not measured\n\
                 median of 3 rounds: daemon 500 events/s per core (250–500), bare 1000; daemon / ceiling 0.50 (events/s), 0.50 (events/s per core; rounds 0.25–1.00)"
            ),
            "{text}"
        );
        let single = KafkaReport { rounds: vec![round(1.0, 2.0)], ..report };
        assert!(single.to_string().ends_with("daemon / ceiling: 0.50 (events/s), 0.50 (events/s per core)"));
    }
}
