//! `rankpulse-bench shapes`: `rankpulse run` against the bare consumer on
//! three traffic shapes, through a real broker, as a user would measure it.
//! The `ubi` and `ubi-hits` shapes put UBI input beside its native twin
//! the same way (see [`ubi`]).
//!
//! - S1, the production-shaped mix, and S2, the judgment-heavy shape (see
//!   `traffic`), are produced once as a backlog; then, each round, the bare
//!   consumer and `rankpulse run` (alternating which goes first) each read
//!   all of it in a consumer group of their own.
//! - S3, a live tail: S2 with event times of now, produced at 70% of the
//!   daemon's median S2 rate while it (then the bare consumer) consumes.
//! - S3's catch-up (`s3c`): the same lists at the same rate of event time,
//!   ending now, produced as a backlog and read afterwards, as by a reader
//!   that was down for the whole tail and restarts behind it. Its lists
//!   are as dense in event time as S3's (thousands a second against S2's
//!   14), so the gap holds two orders of magnitude more of them open.
//!
//! Both are processes of their own, measured alike from outside: CPU is
//! utime + stime of all their threads (`/proc/PID/stat`, sampled every
//! 10 ms) between the first and the last message each reports having
//! read; memory is their peak resident set (`VmHWM`). The daemon's open
//! lists and topic pauses are read from its `/metrics`.

use crate::kafka::median;
use crate::process::{CpuSampler, peak_rss, unix_ms};
use crate::traffic::{JudgmentHeavy, MAX_JUDGMENT_DELAY_MS, Message, production_mix};
use anyhow::{Context, bail};
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What the shapes bench is told.
#[derive(Debug, Clone)]
pub struct Options {
    pub brokers: String,
    /// The `rankpulse` binary to measure.
    pub rankpulse: PathBuf,
    pub rounds: usize,
    pub partitions: i32,
    pub s1_lists: usize,
    pub s2_lists: usize,
    /// Length of the live tail (S3).
    pub live_seconds: f64,
    /// S3's rate, messages per second; `None`: 70% of the daemon's median
    /// S2 rate.
    pub live_rate: Option<f64>,
    /// Which shapes to run ("s1", "s2", "s3", "s3c", "ubi", "ubi-hits"; S3 and its catch-up
    /// need S2's rate unless `live_rate` is given).
    pub shapes: Vec<String>,
    pub seed: u64,
    /// `session.gap` of the daemon, seconds.
    pub gap_seconds: u64,
    /// Lists of the `ubi` shapes.
    pub ubi_lists: usize,
}

/// One process's reading of the same messages.
#[derive(Debug, Clone, Copy, Default)]
pub struct Reading {
    pub messages: u64,
    pub seconds: f64,
    pub cpu_seconds: f64,
    pub peak_rss: u64,
    /// The daemon's most open lists in a scrape (0 for the bare consumer).
    pub open_lists_peak: f64,
    /// The share of the messages the daemon had read at that scrape: where
    /// in the read the peak was (the start, before every topic has
    /// delivered, or the steady part).
    pub open_lists_peak_at: f64,
    /// The most open lists in a scrape after the first tenth of the
    /// messages was read: the steady part of a catch-up.
    pub open_lists_peak_late: f64,
    pub topic_pauses: f64,
    /// Live tail: p99 delay from the Kafka timestamp to the message read
    /// (the bare consumer) or applied (the daemon), ms.
    pub p99_delay_ms: Option<f64>,
    /// The bare consumer's p99 delay from every delay it saw (the one
    /// above is interpolated in the daemon's histogram buckets, as the
    /// daemon's is).
    pub p99_delay_exact_ms: Option<f64>,
    /// Live tail: how often the daemon's consumer loop kept fetched
    /// messages waiting more than 50 ms and more than 100 ms
    /// (`rankpulse_consumer_loop_gap_seconds`), to tell its own stalls
    /// from delays the producer and the broker add to both readers.
    pub loop_gaps_over_ms: Option<(f64, f64)>,
    /// Live tail: the daemon's ticks over 50 ms and over 100 ms
    /// (`rankpulse_consumer_tick_seconds`): the loop reads nothing during
    /// a tick, and an idle loop's wait is not a loop gap.
    pub ticks_over_ms: Option<(f64, f64)>,
}

impl Reading {
    pub fn per_cpu_second(&self) -> f64 {
        self.messages as f64 / self.cpu_seconds.max(1e-9)
    }
    pub fn rate(&self) -> f64 {
        self.messages as f64 / self.seconds.max(1e-9)
    }
}

/// A shape's rounds: the bare consumer's and the daemon's readings.
#[derive(Debug, Clone, Default)]
pub struct ShapeReport {
    pub name: String,
    pub description: String,
    pub messages: u64,
    /// Lists of the shape: UBI and its native twin compare per list.
    pub lists: usize,
    /// Lists open at once that the gap alone needs at the shape's rate of
    /// lists in event time (gap plus the longest judgment delay, times
    /// lists per second).
    pub open_lists_needed: f64,
    pub rounds: Vec<(Reading, Reading)>,
    /// UBI shapes: the bare consumer not decoding at all, each round.
    pub floors: Vec<Reading>,
}

/// Topics of one shape, made for this run.
struct Topics {
    impressions: String,
    judgments: String,
}

/// The wire format of a shape's two topics, and what the readers make of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Feed {
    /// rankpulse's own events; the bare consumer types them.
    Native,
    /// OpenSearch UBI queries (the first topic) and events (the second):
    /// the daemon reads them through `[kafka.formats]`, the bare consumer
    /// types them as UBI.
    Ubi,
}

impl Feed {
    fn bare_decode(self) -> &'static str {
        match self {
            Feed::Native => "native",
            Feed::Ubi => "ubi",
        }
    }

    /// The daemon's config file for `topics`, if the feed needs one.
    fn config(self, topics: &Topics) -> anyhow::Result<Option<PathBuf>> {
        if self == Feed::Native {
            return Ok(None);
        }
        let path = std::env::temp_dir().join(format!("rankpulse-bench-{}.toml", topics.impressions));
        std::fs::write(
            &path,
            format!(
                "[kafka.formats]\n\"{}\" = \"ubi_queries\"\n\"{}\" = \"ubi_events\"\n",
                topics.impressions, topics.judgments
            ),
        )?;
        Ok(Some(path))
    }
}

fn create_topics(brokers: &str, tag: &str, partitions: i32) -> anyhow::Result<Topics> {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new().set("bootstrap.servers", brokers).create()?;
    let suffix = format!("{}-{}", std::process::id(), unix_ms() % 1_000_000);
    let topics = Topics {
        impressions: format!("bench-{tag}-impressions-{suffix}"),
        judgments: format!("bench-{tag}-judgments-{suffix}"),
    };
    let new: Vec<NewTopic> = [&topics.impressions, &topics.judgments]
        .iter()
        .map(|t| NewTopic::new(t, partitions, TopicReplication::Fixed(1)))
        .collect();
    let created = futures_block_on(
        admin.create_topics(&new, &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)))),
    );
    for result in created? {
        if let Err((topic, code)) = result {
            bail!("creating topic {topic}: {code}");
        }
    }
    Ok(topics)
}

/// Drives a future to completion on this thread (the admin client's
/// futures complete on librdkafka's threads).
fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context as TaskContext, Poll, Wake, Waker};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = TaskContext::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(50));
    }
}

fn producer(brokers: &str) -> anyhow::Result<BaseProducer> {
    Ok(ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("queue.buffering.max.messages", "1000000")
        .set("queue.buffering.max.kbytes", "1048576")
        .create()?)
}

fn send(producer: &BaseProducer, topics: &Topics, m: &Message) {
    let topic = if m.judgment { &topics.judgments } else { &topics.impressions };
    let mut record = BaseRecord::to(topic).key(m.key.as_str()).payload(m.payload.as_str());
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, r)) => {
                record = r;
                producer.poll(Duration::from_millis(5));
            }
        }
    }
}

/// Produces every message of `messages` as fast as the broker takes them.
fn fill(brokers: &str, topics: &Topics, messages: impl Iterator<Item = Message>) -> anyhow::Result<u64> {
    let producer = producer(brokers)?;
    let mut n = 0;
    for m in messages {
        send(&producer, topics, &m);
        n += 1;
        if n % 10_000 == 0 {
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(300))?;
    Ok(n)
}

/// Produces `messages` at their emission times (Unix ms, paced by the
/// wall clock), on a thread of its own; returns how many.
fn produce_live(
    brokers: String,
    topics: Topics,
    messages: impl Iterator<Item = Message> + Send + 'static,
) -> std::thread::JoinHandle<anyhow::Result<u64>> {
    std::thread::spawn(move || {
        let producer = producer(&brokers)?;
        let mut n = 0;
        for m in messages {
            let wait = m.emit_ms - unix_ms();
            if wait > 0 {
                producer.poll(Duration::ZERO);
                std::thread::sleep(Duration::from_millis(wait as u64));
            }
            send(&producer, &topics, &m);
            n += 1;
        }
        producer.flush(Duration::from_secs(300))?;
        Ok(n)
    })
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

fn http_get(addr: &str, path: &str) -> Option<String> {
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut body = String::new();
    s.read_to_string(&mut body).ok()?;
    Some(body.split_once("\r\n\r\n")?.1.to_string())
}

fn sum(exposition: &str, name: &str) -> f64 {
    exposition
        .lines()
        .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{' | b' ')))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// A Prometheus histogram's cumulative buckets (`name_bucket{le=...}`
/// summed over series) as (upper bound, count), sorted by bound, +Inf
/// last; `None` when a bucket line cannot be read.
fn histogram_buckets(exposition: &str, name: &str) -> Option<Vec<(f64, f64)>> {
    let prefix = format!("{name}_bucket{{");
    let mut buckets: std::collections::BTreeMap<String, f64> = Default::default();
    for line in exposition.lines().filter(|l| l.starts_with(&prefix)) {
        let le = line.split("le=\"").nth(1)?.split('"').next()?.to_string();
        let v: f64 = line.rsplit(' ').next()?.parse().ok()?;
        *buckets.entry(le).or_default() += v;
    }
    let mut b: Vec<(f64, f64)> = buckets
        .into_iter()
        .map(|(le, v)| (if le == "+Inf" { f64::INFINITY } else { le.parse().unwrap_or(f64::NAN) }, v))
        .collect();
    b.sort_by(|x, y| x.0.total_cmp(&y.0));
    Some(b)
}

/// The quantile `q` of a Prometheus histogram, by linear interpolation.
fn histogram_quantile(exposition: &str, name: &str, q: f64) -> Option<f64> {
    quantile_of_buckets(&histogram_buckets(exposition, name)?, q)
}

/// How many observations of the histogram `name` were above `bound` (one
/// of its bucket bounds): its count less the bucket at `bound`.
fn histogram_above(exposition: &str, name: &str, bound: f64) -> Option<f64> {
    let b = histogram_buckets(exposition, name)?;
    let total = b.iter().find(|(le, _)| le.is_infinite())?.1;
    let within = b.iter().find(|(le, _)| *le == bound)?.1;
    Some(total - within)
}

/// The quantile `q` of cumulative buckets (upper bound, count), sorted by
/// bound and ending with +Inf, interpolated linearly within a bucket as
/// Prometheus's `histogram_quantile` does.
pub fn quantile_of_buckets(b: &[(f64, f64)], q: f64) -> Option<f64> {
    let total = b.last()?.1;
    let rank = q * total;
    let mut prev = (0.0, 0.0);
    for &(le, count) in b {
        if count >= rank {
            if le.is_infinite() {
                return Some(prev.0);
            }
            let frac = if count > prev.1 { (rank - prev.1) / (count - prev.1) } else { 1.0 };
            return Some(prev.0 + (le - prev.0) * frac);
        }
        prev = (le, count);
    }
    None
}

fn topics_env(topics: &Topics) -> String {
    format!(r#"["{}","{}"]"#, topics.impressions, topics.judgments)
}

/// The bare consumer reads `total` messages of `topics`.
/// `decode`: what it makes of each message (`rankpulse-bench bare --decode`).
fn measure_bare(
    opts: &Options,
    topics: &Topics,
    total: u64,
    group: &str,
    delays: bool,
    decode: &str,
) -> anyhow::Result<Reading> {
    let exe = std::env::current_exe()?;
    let mut cmd = Command::new(exe);
    cmd.args(["bare", "--messages", &total.to_string(), "--decode", decode])
        .env("RANKPULSE__KAFKA__BROKERS", &opts.brokers)
        .env("RANKPULSE__KAFKA__GROUP_ID", group)
        .env("RANKPULSE__KAFKA__TOPICS", topics_env(topics))
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if delays {
        cmd.arg("--delays");
    }
    let mut child = cmd.spawn()?;
    let pid = child.id();
    let sampler = CpuSampler::start(pid);
    let mut rss = 0;
    let mut out = String::new();
    let mut stdout = std::io::BufReader::new(child.stdout.take().context("bare consumer's stdout")?);
    // Its one line comes after its last message; its peak memory is read
    // then, before it exits.
    stdout.read_line(&mut out)?;
    rss = rss.max(peak_rss(pid).unwrap_or(0));
    let status = child.wait()?;
    if !status.success() {
        bail!("the bare consumer failed ({status})");
    }
    let v: serde_json::Value =
        serde_json::from_str(out.trim()).with_context(|| format!("bare consumer said {out:?}"))?;
    let (first, last) = (v["first_ms"].as_i64().context("first_ms")?, v["last_ms"].as_i64().context("last_ms")?);
    // A typed UBI reader that failed on some messages would have read
    // less of them: its figure would not be the baseline's.
    if decode == "ubi" && v["decoded"].as_u64() != Some(total) {
        bail!("the bare consumer decoded {} of {total} UBI messages", v["decoded"]);
    }
    reading(&sampler, first, last, total, rss).map(|r| Reading {
        p99_delay_ms: v["p99_delay_ms_bucketed"].as_f64(),
        p99_delay_exact_ms: v["p99_delay_ms"].as_f64(),
        ..r
    })
}

fn reading(sampler: &CpuSampler, first: i64, last: i64, messages: u64, peak_rss: u64) -> anyhow::Result<Reading> {
    let (Some(c0), Some(c1)) = (sampler.at(first), sampler.at(last)) else {
        bail!("the CPU samples do not cover the first and last message ({first}..{last} ms)");
    };
    Ok(Reading {
        messages,
        seconds: (last - first) as f64 / 1000.0,
        cpu_seconds: c1 - c0,
        peak_rss,
        ..Reading::default()
    })
}

/// `rankpulse run` reads `total` messages of `topics`, then is stopped.
/// `config`: a config file for it (the formats of a UBI feed).
fn measure_daemon(
    opts: &Options,
    topics: &Topics,
    total: u64,
    group: &str,
    config: Option<&std::path::Path>,
) -> anyhow::Result<Reading> {
    let http = format!("127.0.0.1:{}", free_port()?);
    let log_path = std::env::temp_dir().join(format!("rankpulse-bench-{}-{group}.log", std::process::id()));
    let log = std::fs::File::create(&log_path)?;
    let mut command = Command::new(&opts.rankpulse);
    command.arg("run");
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let mut child = command
        .env("RANKPULSE__KAFKA__BROKERS", &opts.brokers)
        .env("RANKPULSE__KAFKA__GROUP_ID", group)
        .env("RANKPULSE__KAFKA__TOPICS", topics_env(topics))
        .env("RANKPULSE__HTTP__LISTEN", &http)
        .env("RANKPULSE__SESSION__GAP", format!("{}s", opts.gap_seconds))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {}", opts.rankpulse.display()))?;
    let pid = child.id();
    let sampler = CpuSampler::start(pid);
    let deadline = Instant::now() + Duration::from_secs(900);
    let (mut open_peak, mut open_peak_at, mut open_peak_late) = (0.0f64, 0.0f64, 0.0f64);
    let (pauses, delay, gaps, ticks) = loop {
        if let Some(status) = child.try_wait()? {
            bail!("rankpulse run exited ({status}); see {}", log_path.display());
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            bail!("rankpulse run did not read {total} messages in 900 s; see {}", log_path.display());
        }
        if let Some(m) = http_get(&http, "/metrics") {
            // Every message, whatever became of it (UBI's unscored actions too).
            let consumed = sum(&m, "rankpulse_messages_total");
            let open = sum(&m, "rankpulse_open_lists");
            if open > open_peak {
                (open_peak, open_peak_at) = (open, consumed / total.max(1) as f64);
            }
            if consumed * 10.0 >= total as f64 {
                open_peak_late = open_peak_late.max(open);
            }
            if consumed >= total as f64 {
                let delay = histogram_quantile(&m, "rankpulse_ingest_delay_seconds", 0.99).map(|s| s * 1000.0);
                let over = |name: &str| histogram_above(&m, name, 0.05).zip(histogram_above(&m, name, 0.1));
                let gaps = over("rankpulse_consumer_loop_gap_seconds");
                let ticks = over("rankpulse_consumer_tick_seconds");
                break (sum(&m, "rankpulse_topic_pauses_total"), delay, gaps, ticks);
            }
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let rss = peak_rss(pid).unwrap_or(0);
    // SAFETY: kill(2) with a pid we spawned and still own (not reaped).
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let status = child.wait()?;
    if !status.success() {
        bail!("rankpulse run exited with {status} at SIGTERM; see {}", log_path.display());
    }
    let log = std::fs::read_to_string(&log_path)?;
    let line = log
        .lines()
        .find_map(|l| l.split_once("first message at ").map(|(_, rest)| rest))
        .with_context(|| format!("no first/last message line in {}", log_path.display()))?;
    let numbers: Vec<i64> = line.split(' ').filter_map(|w| w.parse().ok()).collect();
    let [first, last] = numbers[..] else { bail!("cannot read {line:?}") };
    if std::env::var_os("RANKPULSE_BENCH_KEEP_LOGS").is_none() {
        let _ = std::fs::remove_file(&log_path);
    }
    let r = reading(&sampler, first, last, total, rss)?;
    Ok(Reading {
        open_lists_peak: open_peak,
        open_lists_peak_at: open_peak_at,
        open_lists_peak_late: open_peak_late,
        topic_pauses: pauses,
        p99_delay_ms: delay,
        loop_gaps_over_ms: gaps,
        ticks_over_ms: ticks,
        ..r
    })
}

/// A catch-up shape: produced once, then read `rounds` times by each.
/// `max_delay_ms`: the latest a judgment of the shape comes after its
/// impression (event time), for the open lists the gap needs.
#[allow(clippy::too_many_arguments)]
fn backlog(
    opts: &Options,
    tag: &str,
    description: &str,
    feed: Feed,
    messages: Vec<Message>,
    lists: usize,
    event_span_ms: f64,
    max_delay_ms: i64,
) -> anyhow::Result<ShapeReport> {
    let topics = create_topics(&opts.brokers, tag, opts.partitions)?;
    let config = feed.config(&topics)?;
    eprintln!("{tag}: producing {} messages to {} and {}", messages.len(), topics.impressions, topics.judgments);
    let total = fill(&opts.brokers, &topics, messages.into_iter())?;
    let lists_per_second = lists as f64 / (event_span_ms / 1000.0);
    let gap_s = opts.gap_seconds as f64;
    let mut report = ShapeReport {
        name: tag.to_uppercase(),
        description: description.to_string(),
        messages: total,
        lists,
        open_lists_needed: lists_per_second * (gap_s + max_delay_ms as f64 / 1000.0),
        rounds: Vec::new(),
        floors: Vec::new(),
    };
    for round in 0..opts.rounds {
        let group = |who: &str| format!("bench-{tag}-{who}-{round}-{}", std::process::id());
        let bare = || measure_bare(opts, &topics, total, &group("bare"), false, feed.bare_decode());
        let daemon = || measure_daemon(opts, &topics, total, &group("daemon"), config.as_deref());
        let (bare, daemon) = if round % 2 == 0 {
            let b = bare()?;
            (b, daemon()?)
        } else {
            let d = daemon()?;
            (bare()?, d)
        };
        eprintln!("{tag} round {}: {}", round + 1, line(&bare, &daemon));
        if tag.starts_with("ubi") {
            let floor = measure_bare(opts, &topics, total, &group("floor"), false, "none")?;
            eprintln!(
                "{tag} round {}: reading alone (no decoding) {:.0}/CPU-s ({:.2} CPU-s)",
                round + 1,
                floor.per_cpu_second(),
                floor.cpu_seconds
            );
            report.floors.push(floor);
        }
        report.rounds.push((bare, daemon));
    }
    Ok(report)
}

fn line(bare: &Reading, daemon: &Reading) -> String {
    format!(
        "bare {:.0}/CPU-s ({:.2} CPU-s, {:.2} s), daemon {:.0}/CPU-s ({:.2} CPU-s, {:.2} s, {:.0} open lists at most, with {:.0}% read, {:.0} after the first tenth, {:.0} pauses): ratio {:.2}",
        bare.per_cpu_second(),
        bare.cpu_seconds,
        bare.seconds,
        daemon.per_cpu_second(),
        daemon.cpu_seconds,
        daemon.seconds,
        daemon.open_lists_peak,
        100.0 * daemon.open_lists_peak_at,
        daemon.open_lists_peak_late,
        daemon.topic_pauses,
        daemon.per_cpu_second() / bare.per_cpu_second().max(1e-9)
    )
}

/// S1's judgments come 0.5, 1.2 and 1.9 s after their impression.
const S1_MAX_JUDGMENT_DELAY_MS: i64 = 1_900;

/// How many lists S3 starts, and how far apart in event time (ms), for
/// `rate` messages per second over `live_seconds`.
fn live_lists(opts: &Options, rate: f64) -> (usize, f64) {
    // About 11.5 messages per list in S2.
    let per_list = {
        let sample: Vec<Message> = JudgmentHeavy::new(2_000, opts.seed, 0, 72.0).collect();
        sample.len() as f64 / 2_000.0
    };
    ((rate * opts.live_seconds / per_list) as usize, 1000.0 * per_list / rate)
}

/// The live tail: S2 with event times of now at `rate` messages per
/// second, for each reader in turn (alternating), `rounds` times. Lists
/// start during `live_seconds`; since judgments trail their impression by
/// up to 20 s, the rate ramps up over the first 20 s, holds, and ramps
/// down over the last 20 s after the last list.
fn live(opts: &Options, rate: f64) -> anyhow::Result<ShapeReport> {
    let (lists, spacing_ms) = live_lists(opts, rate);
    let mut report = ShapeReport {
        name: "S3".into(),
        description: format!(
            "live tail: S2 with event times of now, lists starting over {:.0} s, {rate:.0} messages/s once their judgments overlap",
            opts.live_seconds
        ),
        open_lists_needed: (1000.0 / spacing_ms) * (opts.gap_seconds as f64 + MAX_JUDGMENT_DELAY_MS as f64 / 1000.0),
        ..ShapeReport::default()
    };
    for round in 0..opts.rounds {
        let mut pair = (Reading::default(), Reading::default());
        let order: [bool; 2] = if round % 2 == 0 { [false, true] } else { [true, false] };
        for daemon in order {
            let topics = create_topics(&opts.brokers, "s3", opts.partitions)?;
            let count = JudgmentHeavy::new(lists, opts.seed + round as u64, 0, spacing_ms).count() as u64;
            let group = format!("bench-s3-{}-{round}-{}", if daemon { "daemon" } else { "bare" }, std::process::id());
            // The reader joins first; production starts a few seconds later.
            let start = unix_ms() + 5_000;
            let traffic = JudgmentHeavy::new(lists, opts.seed + round as u64, start, spacing_ms);
            let producer_topics =
                Topics { impressions: topics.impressions.clone(), judgments: topics.judgments.clone() };
            let producing = produce_live(opts.brokers.clone(), producer_topics, traffic);
            let r = if daemon {
                measure_daemon(opts, &topics, count, &group, None)
            } else {
                measure_bare(opts, &topics, count, &group, true, Feed::Native.bare_decode())
            };
            let produced = producing.join().map_err(|_| anyhow::anyhow!("the live producer panicked"))??;
            let r = r?;
            anyhow::ensure!(produced == count, "produced {produced} of {count}");
            if daemon {
                pair.1 = r;
            } else {
                pair.0 = r;
            }
        }
        report.messages = pair.0.messages;
        eprintln!(
            "s3 round {}: {}; p99 delay (histogram buckets) bare {:?} ms (exact {:?} ms), daemon {:?} ms; daemon loop gaps over 50 / 100 ms: {:?}, ticks over 50 / 100 ms: {:?}",
            round + 1,
            line(&pair.0, &pair.1),
            pair.0.p99_delay_ms,
            pair.0.p99_delay_exact_ms,
            pair.1.p99_delay_ms,
            pair.1.loop_gaps_over_ms,
            pair.1.ticks_over_ms
        );
        report.rounds.push(pair);
    }
    Ok(report)
}

pub fn run(opts: &Options) -> anyhow::Result<Vec<ShapeReport>> {
    let mut reports = Vec::new();
    let now = unix_ms();
    let wants = |s: &str| opts.shapes.iter().any(|x| x == s);
    if wants("s1") {
        let messages = production_mix(opts.s1_lists, opts.seed, now);
        let span = opts.s1_lists as f64;
        reports.push(backlog(
            opts,
            "s1",
            &format!("production mix: {} lists of 10 results and 3 judgments, 1 ms apart", opts.s1_lists),
            Feed::Native,
            messages,
            opts.s1_lists,
            span,
            S1_MAX_JUDGMENT_DELAY_MS,
        )?);
    }
    let mut s2_rate = None;
    if wants("s2") || (wants("s3") || wants("s3c")) && opts.live_rate.is_none() {
        let span = 7_200_000.0;
        let spacing = span / opts.s2_lists as f64;
        let messages: Vec<Message> = JudgmentHeavy::new(opts.s2_lists, opts.seed, now - span as i64, spacing).collect();
        let r = backlog(
            opts,
            "s2",
            &format!("judgment-heavy: {} lists over two hours of event time", opts.s2_lists),
            Feed::Native,
            messages,
            opts.s2_lists,
            span,
            MAX_JUDGMENT_DELAY_MS,
        )?;
        let mut rates: Vec<f64> = r.rounds.iter().map(|(_, d)| d.rate()).collect();
        s2_rate = Some(median(&mut rates));
        if wants("s2") {
            reports.push(r);
        }
    }
    let live_rate = || {
        let rate = opts.live_rate.unwrap_or(0.7 * s2_rate.unwrap_or(f64::NAN));
        if !rate.is_finite() || rate <= 0.0 {
            bail!("no S2 rate to pace the live tail by");
        }
        Ok(rate)
    };
    if wants("s3c") {
        let rate = live_rate()?;
        let (lists, spacing_ms) = live_lists(opts, rate);
        let span = lists as f64 * spacing_ms;
        let start = unix_ms() - span as i64 - MAX_JUDGMENT_DELAY_MS;
        let messages: Vec<Message> = JudgmentHeavy::new(lists, opts.seed, start, spacing_ms).collect();
        reports.push(backlog(
            opts,
            "s3c",
            &format!(
                "S3's catch-up: S3's {lists} lists ({rate:.0} messages/s of event time), ending now, read as a backlog"
            ),
            Feed::Native,
            messages,
            lists,
            span,
            MAX_JUDGMENT_DELAY_MS,
        )?);
    }
    if wants("s3") {
        reports.push(live(opts, live_rate()?)?);
    }
    if wants("ubi") {
        reports.extend(ubi(opts, now, false)?);
    }
    if wants("ubi-hits") {
        reports.extend(ubi(opts, now, true)?);
    }
    Ok(reports)
}

/// The same lists (`rankpulse_testkit::ubi`: half of them shown only by
/// per-result `impression` events, or with `hits`, every one by its
/// query's `query_response_hit_ids`) as rankpulse's own events (UBI-N,
/// UBIH-N) and as UBI queries and events (UBI, UBIH), each a backlog read
/// by the bare consumer (typing its format), by the bare consumer not
/// decoding, and by `rankpulse run`. They compare per list: the UBI form
/// of a list is more messages.
fn ubi(opts: &Options, now: i64, hits: bool) -> anyhow::Result<[ShapeReport; 2]> {
    // Lists 50 ms apart; a list's judgments come up to 3.5 s after it.
    let spacing = 50.0;
    let span = opts.ubi_lists as f64 * spacing;
    let start = now - span as i64 - 5_000;
    let traffic = if hits {
        rankpulse_testkit::ubi::ubi_mix_hit_ids(opts.ubi_lists, opts.seed, start, spacing)
    } else {
        rankpulse_testkit::ubi::ubi_mix(opts.ubi_lists, opts.seed, start, spacing, 0)
    };
    let text = |payload: Vec<u8>| String::from_utf8(payload).context("generated traffic is UTF-8");
    let native = traffic
        .native
        .into_iter()
        .map(|m| Ok(Message { judgment: m.judgment, key: m.key, payload: text(m.payload)?, emit_ms: 0 }))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let ubi = traffic
        .ubi
        .into_iter()
        .map(|m| {
            let judgment = m.topic == rankpulse_testkit::ubi::UbiTopic::Events;
            Ok(Message { judgment, key: m.key, payload: text(m.payload)?, emit_ms: 0 })
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    let lists = opts.ubi_lists;
    let shown = if hits { "every one's query with hit ids" } else { "half shown only by impression events" };
    let what = |form: &str| format!("{lists} lists, {shown}, as {form}");
    let tag = if hits { "ubih" } else { "ubi" };
    Ok([
        backlog(opts, &format!("{tag}-n"), &what("rankpulse's events"), Feed::Native, native, lists, span, 3_500)?,
        backlog(opts, tag, &what("UBI queries and events"), Feed::Ubi, ubi, lists, span, 3_500)?,
    ])
}

/// UBI against its native twin, per list: each reader's lists per
/// CPU-second (medians over rounds), the daemon's UBI/native ratio, and
/// the most any reader of the UBI messages could reach against the
/// daemon on the native form: the bare consumer not decoding them.
pub fn ubi_table(reports: &[ShapeReport], tag: &str) -> Option<String> {
    let native = reports.iter().find(|r| r.name == format!("{tag}-N"))?;
    let ubi = reports.iter().find(|r| r.name == tag)?;
    let per_list = |r: &ShapeReport, f: &dyn Fn(usize) -> Option<f64>| {
        let mut v: Vec<f64> = (0..r.rounds.len()).filter_map(f).map(|cpu| r.lists as f64 / cpu).collect();
        (!v.is_empty()).then(|| median(&mut v))
    };
    let typed = |r: &ShapeReport| per_list(r, &|i| Some(r.rounds[i].0.cpu_seconds));
    let daemon = |r: &ShapeReport| per_list(r, &|i| Some(r.rounds[i].1.cpu_seconds));
    let floor = |r: &ShapeReport| per_list(r, &|i| r.floors.get(i).map(|f| f.cpu_seconds));
    let k = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{:.1}k", v / 1e3));
    let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map_or("-".to_string(), |(a, b)| format!("{:.2}", a / b));
    let mut out = String::from(
        "| form | messages per list | bare, typed: lists per CPU-s | bare, not decoding | rankpulse run |\n|---|---|---|---|---|\n",
    );
    for r in [native, ubi] {
        out.push_str(&format!(
            "| {} | {:.2} | {} | {} | {} |\n",
            r.name,
            r.messages as f64 / r.lists.max(1) as f64,
            k(typed(r)),
            k(floor(r)),
            k(daemon(r))
        ));
    }
    out.push_str(&format!(
        "rankpulse run, UBI / native per list: {}; against rankpulse run on native, the bare consumer typing UBI: {}, not decoding UBI: {} (medians over rounds)\n",
        ratio(daemon(ubi), daemon(native)),
        ratio(typed(ubi), daemon(native)),
        ratio(floor(ubi), daemon(native)),
    ));
    Some(out)
}

/// The report's table: medians and ranges over rounds.
pub fn table(reports: &[ShapeReport]) -> String {
    let mut out = String::from(
        "| shape | messages | bare consumer, events per CPU-s | rankpulse run, events per CPU-s | ratio | rankpulse open lists, peak (gap needs) | peak RSS, bare / rankpulse | p99 delay (in the daemon's histogram buckets), bare / rankpulse |\n|---|---|---|---|---|---|---|---|\n",
    );
    for r in reports {
        let stat = |f: &dyn Fn(&(Reading, Reading)) -> f64| {
            let mut v: Vec<f64> = r.rounds.iter().map(f).collect();
            let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            (median(&mut v), lo, hi)
        };
        let (b, blo, bhi) = stat(&|(b, _)| b.per_cpu_second());
        let (d, dlo, dhi) = stat(&|(_, d)| d.per_cpu_second());
        let (q, qlo, qhi) = stat(&|(b, d)| d.per_cpu_second() / b.per_cpu_second().max(1e-9));
        let (open, _, open_hi) = stat(&|(_, d)| d.open_lists_peak);
        let (brss, _, _) = stat(&|(b, _)| b.peak_rss as f64 / 1048576.0);
        let (drss, _, _) = stat(&|(_, d)| d.peak_rss as f64 / 1048576.0);
        let delays = if r.rounds.iter().any(|(b, _)| b.p99_delay_ms.is_some()) {
            let (bd, _, _) = stat(&|(b, _)| b.p99_delay_ms.unwrap_or(f64::NAN));
            let (dd, _, _) = stat(&|(_, d)| d.p99_delay_ms.unwrap_or(f64::NAN));
            format!("{bd:.0} / {dd:.0} ms")
        } else {
            "".into()
        };
        out.push_str(&format!(
            "| {} ({}) | {} | {:.0}k ({:.0}k–{:.0}k) | {:.0}k ({:.0}k–{:.0}k) | **{q:.2}** ({qlo:.2}–{qhi:.2}) | {open:.0} (max {open_hi:.0}; {:.0}) | {brss:.0} / {drss:.0} MiB | {delays} |\n",
            r.name,
            r.description,
            r.messages,
            b / 1e3,
            blo / 1e3,
            bhi / 1e3,
            d / 1e3,
            dlo / 1e3,
            dhi / 1e3,
            r.open_lists_needed,
        ));
    }
    out.push_str(&format!(
        "medians over {} rounds; ranges in parentheses\n",
        reports.first().map_or(0, |r| r.rounds.len())
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_interpolate_within_a_bucket_as_prometheus_does() {
        // 100 observations: 50 up to 0.1 s, 40 more up to 0.25 s, 10 more up
        // to 0.5 s. The 0.99 rank (99) lies 9/10 of the way into the
        // (0.25, 0.5] bucket: 0.25 + 0.25 * 0.9 = 0.475.
        let b = [(0.1, 50.0), (0.25, 90.0), (0.5, 100.0), (f64::INFINITY, 100.0)];
        assert!((quantile_of_buckets(&b, 0.99).unwrap() - 0.475).abs() < 1e-12);
        // The median is the first bucket's bound: rank 50 is its count.
        assert!((quantile_of_buckets(&b, 0.5).unwrap() - 0.1).abs() < 1e-12);
        // Past the last finite bound: that bound, as histogram_quantile.
        let tail = [(0.1, 10.0), (f64::INFINITY, 100.0)];
        assert_eq!(quantile_of_buckets(&tail, 0.99), Some(0.1));
        // The exposition form gives the same answer as the buckets.
        let text =
            "d_bucket{le=\"0.1\"} 50\nd_bucket{le=\"0.25\"} 90\nd_bucket{le=\"0.5\"} 100\nd_bucket{le=\"+Inf\"} 100\n";
        assert_eq!(histogram_quantile(text, "d", 0.99), quantile_of_buckets(&b, 0.99));
    }

    #[test]
    fn ubi_and_its_native_twin_compare_per_list_not_per_message() {
        // 1,000 lists: the daemon reads their 2,500 native messages in
        // 1 CPU-s (1,000 lists per CPU-s) and their 6,500 UBI messages in
        // 2.5 CPU-s (400 lists per CPU-s).
        let read = |messages, cpu_seconds| Reading { messages, cpu_seconds, ..Reading::default() };
        let report = |name: &str, messages, bare, floor, daemon| ShapeReport {
            name: name.into(),
            messages,
            lists: 1_000,
            rounds: vec![(read(messages, bare), read(messages, daemon))],
            floors: vec![read(messages, floor)],
            ..ShapeReport::default()
        };
        let reports = [report("UBI-N", 2_500, 0.8, 0.4, 1.0), report("UBI", 6_500, 2.0, 1.0, 2.5)];
        let table = ubi_table(&reports, "UBI").expect("both forms are there");
        assert!(table.contains("| UBI-N | 2.50 | 1.2k | 2.5k | 1.0k |"), "{table}");
        assert!(table.contains("| UBI | 6.50 | 0.5k | 1.0k | 0.4k |"), "{table}");
        // Per message the daemon reads UBI faster (2,600/s against
        // 2,500/s); per list it is 0.40 of native.
        assert!(table.contains("UBI / native per list: 0.40;"), "{table}");
        assert!(table.contains("the bare consumer typing UBI: 0.50, not decoding UBI: 1.00"), "{table}");
        assert_eq!(ubi_table(&reports, "UBIH"), None);
    }

    #[test]
    fn observations_above_a_bound_are_summed_over_series() {
        // Two series: 7 of 10 and 1 of 5 observations above 0.05 s.
        let text = "g_bucket{p=\"0\",le=\"0.05\"} 3\ng_bucket{p=\"0\",le=\"0.1\"} 8\ng_bucket{p=\"0\",le=\"+Inf\"} 10\n\
                    g_bucket{p=\"1\",le=\"0.05\"} 4\ng_bucket{p=\"1\",le=\"0.1\"} 5\ng_bucket{p=\"1\",le=\"+Inf\"} 5\n";
        assert_eq!(histogram_above(text, "g", 0.05), Some(8.0));
        assert_eq!(histogram_above(text, "g", 0.1), Some(2.0));
        // A bound that is not one of the histogram's: no answer.
        assert_eq!(histogram_above(text, "g", 0.07), None);
        assert_eq!(histogram_above(text, "missing", 0.05), None);
    }
}
