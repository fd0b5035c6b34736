//! `rankpulse demo` and `rankpulse loadgen`: realistic search traffic.
//!
//! The generator simulates a search engine running an A/B test: two rankers
//! ("control" and "candidate", and the control again as [`AA_ARM`], an A/A
//! check whose comparison must stay quiet) order candidate documents whose true
//! relevance is hidden, users click with a position bias (the higher a
//! result, the likelier it is examined; examined results are clicked with
//! probability R(g) = (2^g − 1)/16) and sometimes buy, and raters grade a
//! share of lists. After `degrade_after` the candidate's ranking gets much
//! noisier, so its quality visibly drops. One search in five runs a
//! team-draft interleaving experiment of the same two rankers instead
//! (`ranker = "interleaved"`, team A the candidate), which shows the
//! degradation as the candidate losing. A small share of messages is
//! invalid, so the reject counters have data too. Events go through the real
//! Kafka producer API.
//!
//! The demo runs librdkafka's in-process mock cluster, this generator, and
//! the daemon consuming through its real Kafka path, all in one process.
//! The mock cluster keeps the newest 5 MiB of each partition's log (its
//! own limit; it has no retention setting and no DeleteRecords), so the
//! demo's memory grows by up to [`DEMO_BROKER_BYTES`] over its first
//! minutes at 100 lists/s and then stays flat: that bound is why the demo
//! topics have [`DEMO_PARTITIONS`] partitions.

use crate::config::Config;
use crate::http::Published;
use rand::seq::{IndexedRandom, SliceRandom};
use rand::{Rng as _, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rand_distr::StandardNormal;
use rankpulse_core::event::Format;
use rankpulse_core::interleave::{Team, team_draft};
use rdkafka::ClientConfig;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::DefaultProducerContext;
use rdkafka::producer::{FutureProducer, FutureRecord};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// What the generator produces.
#[derive(Debug, Clone)]
pub struct Traffic {
    pub impressions_topic: String,
    pub judgments_topic: String,
    /// Lists (searches) per second, all rankers together.
    pub lists_per_second: f64,
    /// When the candidate ranker starts to degrade.
    pub degrade_after: Duration,
    /// Share of messages that are deliberately invalid.
    pub invalid_share: f64,
    pub seed: u64,
    /// The same searches as OpenSearch UBI 1.3 (`ubi`): queries to the
    /// impressions topic, impression events (0-based ordinals), clicks,
    /// purchases and raters' grades (`rated_<g>` actions) to the judgments
    /// topic; else rankpulse's own events.
    pub format: Format,
}

impl Default for Traffic {
    fn default() -> Self {
        Traffic {
            impressions_topic: "search-impressions".into(),
            judgments_topic: "search-judgments".into(),
            lists_per_second: 100.0,
            degrade_after: Duration::from_secs(180),
            invalid_share: 0.01,
            seed: 42,
            format: Format::Rankpulse,
        }
    }
}

/// The `ranker` value of the demo's third arm: the control ranker under
/// another name, so that the status page shows an A/A comparison staying
/// quiet beside the candidate's.
pub const AA_ARM: &str = "control-aa";

/// The `ranker` value of the demo's team-draft interleaved searches.
pub const INTERLEAVED: &str = "interleaved";

/// The traffic's random source: seeded, so a demo is reproducible.
type Rng = ChaCha8Rng;

const MARKETS: [&str; 3] = ["us", "de", "jp"];
const CANDIDATES_PER_QUERY: usize = 30;
const SHOWN: usize = 10;
const MAX_GRADE: i32 = 4;

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Topics of the demo in UBI form.
pub const UBI_QUERIES_TOPIC: &str = "ubi_queries";
pub const UBI_EVENTS_TOPIC: &str = "ubi_events";

/// The rater grades of the UBI demo as actions (`[judgments.actions]`
/// `rated_0` = 0 … `rated_4` = 4): UBI events carry actions, not grades.
pub fn ubi_rating_actions(config: &mut Config) {
    for g in 0..=MAX_GRADE {
        config.judgments.actions.insert(format!("rated_{g}"), g);
    }
}

/// One simulated search: (session key, impression JSON, judgment JSONs);
/// with `ubi`, (client id, UBI query, UBI events: impressions of each
/// shown result, then clicks, purchases, ratings and a page view). The
/// same random draws either way: the same searches.
/// One search in [`RANDOMIZED_EVERY`] (not interleaved) is shown with its
/// top results shuffled uniformly (RandTop-K) and flagged `randomized`:
/// the clicks on those estimate the position propensities that debias the
/// others (`[debias]`). UBI has no such flag: its demo shuffles nothing.
const RANDOMIZED_EVERY: u64 = 10;

fn simulate(rng: &mut Rng, n: u64, degraded: bool, ts: i64, ubi: bool) -> (String, String, Vec<String>) {
    simulate_as(rng, n, degraded, ts, ubi, !ubi)
}

/// [`simulate`], with the randomized searches on or off.
fn simulate_as(
    rng: &mut Rng,
    n: u64,
    degraded: bool,
    ts: i64,
    ubi: bool,
    randomize: bool,
) -> (String, String, Vec<String>) {
    let session = format!("sess-{n}");
    let query = format!("q{}", n % 7);
    let market = MARKETS.choose(rng).copied().unwrap_or("us");
    let interleaved = n.is_multiple_of(5);
    let ranker = match rng.random_range(0..3) {
        _ if interleaved => INTERLEAVED,
        0 => "control",
        1 => "candidate",
        _ => AA_ARM,
    };
    // Hidden true relevance of the candidates: mostly irrelevant.
    let grades: Vec<i32> = (0..CANDIDATES_PER_QUERY)
        .map(|_| match rng.random::<f64>() {
            u if u < 0.55 => 0,
            u if u < 0.75 => 1,
            u if u < 0.88 => 2,
            u if u < 0.96 => 3,
            _ => 4,
        })
        .collect();
    let candidate_noise = if degraded { 3.5 } else { 1.0 };
    let noise = if ranker == "candidate" { candidate_noise } else { 1.2 };
    let rank = |rng: &mut Rng, noise: f64| {
        let mut ranked: Vec<(f64, usize)> = grades
            .iter()
            .enumerate()
            .map(|(i, &g)| (f64::from(g) + noise * rng.sample::<f64, _>(StandardNormal), i))
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
        ranked
    };
    let mut ranked = rank(rng, noise);
    // Interleaved: the candidate's (team A) and the control's (team B, the
    // ranking above) drafted into one list; then the control's others, for
    // the raters. Scores of two rankers do not compare: none are sent.
    let mut teams = Vec::new();
    if interleaved {
        let candidate: Vec<usize> = rank(rng, candidate_noise).into_iter().map(|(_, d)| d).collect();
        let control: Vec<usize> = ranked.iter().map(|&(_, d)| d).collect();
        let mut drafted = Vec::with_capacity(SHOWN);
        team_draft(&candidate, &control, SHOWN, || rng.random_bool(0.5), &mut drafted);
        let rest = ranked.iter().filter(|(_, d)| !drafted.iter().any(|(x, _)| x == d)).copied();
        ranked = drafted.iter().map(|&(d, _)| (f64::NAN, d)).chain(rest).collect();
        teams = drafted.into_iter().map(|(_, team)| team).collect();
    }
    // A shuffle of its own generator: the searches' draws stay the same
    // with randomization on or off.
    let randomized = randomize && !interleaved && n % RANDOMIZED_EVERY == 3;
    if randomized {
        ranked[..SHOWN].shuffle(&mut Rng::seed_from_u64(n));
    }
    let shown = &ranked[..SHOWN];
    let results: Vec<String> = shown
        .iter()
        .enumerate()
        .map(|(p, (score, doc))| match teams.get(p) {
            Some(team) => format!(
                r#"{{"doc_id":"doc-{query}-{doc}","position":{},"team":"{}"}}"#,
                p + 1,
                if *team == Team::A { "A" } else { "B" }
            ),
            None => format!(r#"{{"doc_id":"doc-{query}-{doc}","position":{},"score":{:.4}}}"#, p + 1, score),
        })
        .collect();
    let impression = if ubi {
        format!(
            r#"{{"application":"demo","query_id":"{query}","client_id":"{session}","user_query":"{query}","query_attributes":{{"ranker":"{ranker}","market":"{market}"}},"timestamp":{ts}}}"#
        )
    } else {
        format!(
            r#"{{"type":"impression","event_id":"imp-{n}","session_id":"{session}","query_id":"{query}","timestamp":{ts},"results":[{}],"randomized":{randomized},"dimensions":{{"ranker":"{ranker}","market":"{market}"}}}}"#,
            results.join(",")
        )
    };
    let mut judgments = Vec::new();
    if ubi {
        for (p, (_, doc)) in shown.iter().enumerate() {
            judgments.push(format!(
                r#"{{"application":"demo","action_name":"impression","query_id":"{query}","client_id":"{session}","timestamp":{ts},"event_attributes":{{"object":{{"object_id":"doc-{query}-{doc}"}},"position":{{"ordinal":{p}}}}}}}"#
            ));
        }
        judgments.push(format!(
            r#"{{"application":"demo","action_name":"view_search_results","query_id":"{query}","client_id":"{session}","timestamp":{ts},"event_attributes":null}}"#
        ));
    }
    let mut j = 0;
    let mut judge = |doc: usize, field: String, dt: i64| {
        j += 1;
        if ubi {
            // `"action":"click"` → click; `"grade":3` → rated_3.
            let action = field.rsplit(':').next().unwrap_or("").trim_matches('"');
            let action = if field.starts_with(r#""grade""#) { format!("rated_{action}") } else { action.to_string() };
            return format!(
                r#"{{"application":"demo","action_name":"{action}","query_id":"{query}","client_id":"{session}","timestamp":{},"event_attributes":{{"object":{{"object_id":"doc-{query}-{doc}"}}}}}}"#,
                ts + dt
            );
        }
        format!(
            r#"{{"type":"judgment","event_id":"j-{n}-{j}","session_id":"{session}","query_id":"{query}","doc_id":"doc-{query}-{doc}",{field},"timestamp":{}}}"#,
            ts + dt
        )
    };
    // Users: position-biased examination, clicks by relevance, some purchases.
    for (p, (_, doc)) in shown.iter().enumerate() {
        let examined = 1.0 / ((p + 1) as f64).powf(0.6);
        let g = grades[*doc];
        let attractive = (f64::from(g).exp2() - 1.0) / f64::from(MAX_GRADE).exp2();
        if rng.random::<f64>() < examined * attractive {
            judgments.push(judge(*doc, r#""action":"click""#.into(), 500 + 300 * p as i64));
            if g >= 3 && rng.random_bool(0.3) {
                judgments.push(judge(*doc, r#""action":"purchase""#.into(), 5_000));
            }
        }
    }
    // Raters grade one list in five: every shown result and a few unshown.
    if rng.random_ratio(1, 5) {
        for &(_, doc) in shown.iter().chain(ranked[SHOWN..SHOWN + 5].iter()) {
            judgments.push(judge(doc, format!(r#""grade":{}"#, grades[doc]), 1_000));
        }
    }
    (session, impression, judgments)
}

/// A deliberately invalid message (the reject counters need data too).
fn invalid(rng: &mut Rng, n: u64) -> String {
    match rng.random_range(0..4u8) {
        0 => "{\"type\":\"impression\",\"event_id\":".to_string(),
        1 => format!(r#"{{"type":"judgment","event_id":"bad-{n}","doc_id":"d","grade":1,"timestamp":1}}"#),
        2 => format!(
            r#"{{"type":"judgment","event_id":"bad-{n}","session_id":"x","doc_id":"d","grade":9,"timestamp":1}}"#
        ),
        _ => format!(r#"{{"type":"pageview","event_id":"bad-{n}"}}"#),
    }
}

/// What became of the messages [`generate`] enqueued, as librdkafka
/// reports each one: a producer that cannot reach its broker must say so,
/// not report the lists it generated as produced.
#[derive(Debug, Default)]
pub struct Deliveries {
    pub enqueued: AtomicU64,
    pub delivered: AtomicU64,
    pub failed: AtomicU64,
    /// The first failure, for the report.
    pub first_error: Mutex<Option<String>>,
}

impl Deliveries {
    fn fail(&self, error: String) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        let mut first = self.first_error.lock().unwrap_or_else(|e| e.into_inner());
        first.get_or_insert(error);
    }

    /// Enqueued messages not yet delivered or failed.
    pub fn pending(&self) -> u64 {
        let done = self.delivered.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed);
        self.enqueued.load(Ordering::Relaxed).saturating_sub(done)
    }
}

/// Produces traffic until `stop` resolves, counting what becomes of each
/// message in `deliveries`. Returns the lists generated.
pub async fn generate(
    producer: &FutureProducer,
    traffic: &Traffic,
    deliveries: &Arc<Deliveries>,
    stop: impl Future<Output = ()>,
) -> u64 {
    let mut rng = Rng::seed_from_u64(traffic.seed);
    let started = Instant::now();
    let period = Duration::from_millis(100);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let per_tick = traffic.lists_per_second * period.as_secs_f64();
    let mut owed = 0.0;
    let mut n = 0u64;
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {}
        }
        owed += per_tick;
        let degraded = started.elapsed() >= traffic.degrade_after;
        while owed >= 1.0 {
            owed -= 1.0;
            n += 1;
            let ubi = traffic.format != Format::Rankpulse;
            let (session, impression, judgments) = simulate(&mut rng, n, degraded, now_ms(), ubi);
            send(producer, deliveries, &traffic.impressions_topic, &session, impression);
            for j in judgments {
                send(producer, deliveries, &traffic.judgments_topic, &session, j);
            }
            if rng.random::<f64>() < traffic.invalid_share {
                send(producer, deliveries, &traffic.judgments_topic, &session, invalid(&mut rng, n));
            }
        }
    }
    n
}

/// Enqueues without waiting for delivery (librdkafka batches and
/// retries); a task counts the delivery report when it comes.
fn send(producer: &FutureProducer, deliveries: &Arc<Deliveries>, topic: &str, key: &str, payload: String) {
    let record = FutureRecord::to(topic).key(key).payload(&payload);
    deliveries.enqueued.fetch_add(1, Ordering::Relaxed);
    match producer.send_result(record) {
        Ok(report) => {
            let deliveries = deliveries.clone();
            tokio::spawn(async move {
                match report.await {
                    Ok(Ok(_)) => {
                        deliveries.delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    Ok(Err((e, _))) => deliveries.fail(e.to_string()),
                    Err(_) => deliveries.fail("the producer was dropped before delivery".into()),
                }
            });
        }
        Err((e, _)) => {
            tracing::warn!("produce to {topic} failed: {e}");
            deliveries.fail(e.to_string());
        }
    }
}

pub fn producer(brokers: &str) -> Result<FutureProducer, rdkafka::error::KafkaError> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("linger.ms", "20")
        .set("client.id", "rankpulse-loadgen")
        .create()
}

/// Reads `name{labels} value` samples out of an exposition.
fn samples<'a>(exposition: &'a str, name: &str) -> Vec<(BTreeMap<&'a str, &'a str>, f64)> {
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(crate::series::sample)
        .filter(|(metric, _, _)| *metric == name)
        .filter_map(|(_, labels, value)| Some((labels.into_iter().collect(), value.parse().ok()?)))
        .collect()
}

/// One line per ranker: lists/s since the last line, nDCG@10 and MRR@10 over 1m.
pub fn summary_lines(exposition: &str, previous: &mut BTreeMap<String, f64>, elapsed: Duration) -> Vec<String> {
    let mut by_ranker: BTreeMap<String, (f64, f64, f64, f64)> = BTreeMap::new();
    for (labels, v) in samples(exposition, "rankpulse_lists_finalized_total") {
        by_ranker.entry(labels.get("ranker").unwrap_or(&"?").to_string()).or_default().0 += v;
    }
    let window_lists: Vec<_> =
        samples(exposition, "rankpulse_lists").into_iter().filter(|(l, _)| l.get("window") == Some(&"1m")).collect();
    for (metric, slot) in [("rankpulse_ndcg", 1), ("rankpulse_mrr", 2)] {
        for (labels, mean) in samples(exposition, metric) {
            if labels.get("window") != Some(&"1m") || labels.get("k") != Some(&"10") {
                continue;
            }
            let lists = window_lists
                .iter()
                .find(|(l, _)| l.get("ranker") == labels.get("ranker") && l.get("market") == labels.get("market"))
                .map_or(0.0, |(_, n)| *n);
            let e = by_ranker.entry(labels.get("ranker").unwrap_or(&"?").to_string()).or_default();
            if slot == 1 {
                e.1 += mean * lists;
                e.3 += lists;
            } else {
                e.2 += mean * lists;
            }
        }
    }
    by_ranker
        .into_iter()
        .map(|(ranker, (total, ndcg, mrr, lists))| {
            let before = previous.insert(ranker.clone(), total).unwrap_or(total);
            let rate = (total - before) / elapsed.as_secs_f64().max(1e-3);
            if lists > 0.0 {
                format!(
                    "{ranker:>10}: {rate:6.1} lists/s   nDCG@10 {:.4}   MRR@10 {:.4}   (1m, {lists} lists)",
                    ndcg / lists,
                    mrr / lists
                )
            } else {
                format!("{ranker:>10}: {rate:6.1} lists/s   (no lists in the last minute yet)")
            }
        })
        .collect()
}

/// The most the demo's in-process broker may hold: a demo left running
/// must not take more than a few tens of MiB in all.
pub const DEMO_BROKER_BYTES: u64 = 20 << 20;

/// What librdkafka's mock cluster keeps of a partition's log before it
/// drops the oldest batches (`max_size` in rdkafka_mock.c, fixed at 5 MiB).
pub const MOCK_PARTITION_LOG_BYTES: u64 = 5 << 20;

/// Partitions of each demo topic: two, so that the daemon still runs a
/// pipeline shard per partition, and no more: each holds up to
/// [`MOCK_PARTITION_LOG_BYTES`], and two topics of two fill
/// [`DEMO_BROKER_BYTES`].
pub const DEMO_PARTITIONS: i32 = 2;

/// The demo's in-process Kafka, with the traffic's two topics.
fn demo_cluster(traffic: &Traffic) -> anyhow::Result<MockCluster<'static, DefaultProducerContext>> {
    use anyhow::Context;
    let cluster = MockCluster::new(1).context("start the in-process Kafka mock cluster")?;
    for topic in [&traffic.impressions_topic, &traffic.judgments_topic] {
        cluster.create_topic(topic, DEMO_PARTITIONS, 1).with_context(|| format!("create topic {topic}"))?;
    }
    Ok(cluster)
}

/// Options of `rankpulse demo`.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    pub listen: String,
    /// `--web.config.file`: TLS and passwords on the demo's endpoint, to
    /// try the secured setup (and to test it against a real Prometheus).
    pub web_config: Option<std::path::PathBuf>,
    pub duration: Option<Duration>,
    pub traffic: Traffic,
    /// How often a summary line is printed.
    pub report_every: Duration,
}

/// Runs the demo until `stop` resolves or the duration ends.
pub fn demo(options: DemoOptions, stop: impl Future<Output = ()>) -> anyhow::Result<()> {
    use anyhow::Context;
    // The mock cluster is not Send: it lives on this thread for the whole demo.
    let cluster = demo_cluster(&options.traffic)?;
    let bootstrap = cluster.bootstrap_servers();
    let mut config = Config::default();
    config.kafka.brokers = bootstrap.clone();
    config.kafka.group_id = "rankpulse-demo".into();
    config.kafka.topics = vec![options.traffic.impressions_topic.clone(), options.traffic.judgments_topic.clone()];
    // The interleaved searches mix both rankers: not an A/B arm.
    config.compare.exclude = vec![INTERLEAVED.into()];
    if options.traffic.format != Format::Rankpulse {
        use crate::config::TopicFormat;
        config.kafka.formats.insert(options.traffic.impressions_topic.clone(), TopicFormat::UbiQueries);
        config.kafka.formats.insert(options.traffic.judgments_topic.clone(), TopicFormat::UbiEvents);
        ubi_rating_actions(&mut config);
    }
    // Position-debiased clicks over the top 10, propensities estimated
    // from the randomized searches.
    config.debias.max_rank = SHOWN;
    config.http.listen = options.listen.clone();
    config.http.web_config = options.web_config.clone();
    // Short gap: demo lists are complete within seconds.
    config.session.gap = "5s".parse().map_err(anyhow::Error::msg)?;
    config.validate()?;

    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let result = runtime.block_on(async {
        let listener = tokio::net::TcpListener::bind(&options.listen)
            .await
            .with_context(|| format!("cannot listen on {}", options.listen))?;
        let addr = listener.local_addr()?;
        println!("rankpulse demo: in-process Kafka at {bootstrap}, topics {:?}", config.kafka.topics);
        println!("  status page  http://{addr}/");
        println!("  metrics      http://{addr}/metrics");
        println!(
            "  traffic      {} lists/s, rankers control, candidate and control-aa (the control again: an A/A check), one search in five interleaved (team A the candidate); the candidate degrades after {} s",
            options.traffic.lists_per_second,
            options.traffic.degrade_after.as_secs()
        );
        println!("  stop         Ctrl-C{}", options.duration.map_or(String::new(), |d| format!(" (or after {} s)", d.as_secs())));
        let published = Arc::new(Published::new(&config));
        let producer = producer(&bootstrap)?;
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let generator = {
            let traffic = options.traffic.clone();
            let mut rx = stop_rx.clone();
            tokio::spawn(async move {
                generate(&producer, &traffic, &Arc::new(Deliveries::default()), async move {
                    let _ = rx.wait_for(|s| *s).await;
                })
                .await
            })
        };
        let reporter = {
            let published = published.clone();
            let every = options.report_every;
            let mut rx = stop_rx.clone();
            tokio::spawn(async move {
                let mut previous = BTreeMap::new();
                let mut tick = tokio::time::interval(every);
                tick.tick().await;
                loop {
                    tokio::select! {
                        _ = rx.wait_for(|s| *s) => break,
                        _ = tick.tick() => {
                            let text = published.exposition();
                            for line in summary_lines(&String::from_utf8_lossy(&text), &mut previous, every) {
                                println!("{line}");
                            }
                        }
                    }
                }
            })
        };
        let duration = options.duration;
        let shutdown = async move {
            tokio::select! {
                _ = stop => {}
                _ = async { match duration { Some(d) => tokio::time::sleep(d).await, None => std::future::pending().await } } => {}
            }
            let _ = stop_tx.send(true);
        };
        let summary = crate::daemon::run_with(config, listener, shutdown, published).await?;
        let lists = generator.await.unwrap_or(0);
        let _ = reporter.await;
        println!(
            "rankpulse demo: generated {lists} lists; the daemon consumed {} messages and finalized {} lists",
            summary.messages, summary.lists_finalized
        );
        anyhow::Ok(())
    });
    runtime.shutdown_timeout(Duration::from_millis(200));
    drop(cluster);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simulated_events_decode_and_candidate_degrades() {
        let limits = Config::default().decode_limits();
        let mut rng = Rng::seed_from_u64(3);
        let mut clicks = 0;
        for n in 0..200 {
            let (_, imp, judgments) = simulate(&mut rng, n, n >= 100, 1_700_000_000_000, false);
            assert!(rankpulse_core::event::decode(imp.as_bytes(), &limits).is_ok(), "{imp}");
            for j in &judgments {
                assert!(rankpulse_core::event::decode(j.as_bytes(), &limits).is_ok(), "{j}");
            }
            clicks += judgments.len();
            assert!(rankpulse_core::event::decode(invalid(&mut rng, n).as_bytes(), &limits).is_err());
        }
        assert!(clicks > 100, "users click and raters grade: {clicks}");
    }

    /// The UBI demo is the same searches: through the pipeline, the same
    /// lists with the same sums of every metric as the native demo's (not AUC:
    /// UBI sends no scores, so AUC reads positions), nothing rejected, one
    /// page view per search ignored.
    #[test]
    fn the_ubi_demo_is_the_same_searches() {
        use rankpulse_core::pipeline::{Clock, Pipeline};
        let run = |ubi: bool| {
            let mut config = Config::default();
            let settings = if ubi {
                ubi_rating_actions(&mut config);
                let mut s = config.pipeline_settings();
                s.formats = vec![("q".into(), Format::UbiQueries), ("e".into(), Format::UbiEvents)];
                s
            } else {
                config.pipeline_settings()
            };
            let mut p = Pipeline::new(&settings);
            let mut rng = Rng::seed_from_u64(9);
            for n in 0..300 {
                let ts = 1_700_000_000_000 + n as i64 * 1_000;
                let (_, first, rest) = simulate_as(&mut rng, n, n >= 150, ts, ubi, false);
                p.ingest("q", first.as_bytes(), Clock::replay(), None).unwrap();
                for m in rest {
                    p.ingest("e", m.as_bytes(), Clock::replay(), None).unwrap();
                }
            }
            p.finalize_all();
            p
        };
        let (native, ubi) = (run(false), run(true));
        assert_eq!(ubi.counters().ignored.values().sum::<u64>(), 300);
        let sums = |p: &Pipeline| -> Vec<(Vec<String>, i64, String)> {
            p.accumulators()
                .series
                .iter()
                .map(|(d, s)| {
                    // Every family but GAUC, the last.
                    let t = s.total();
                    (d.to_vec(), s.lists(), format!("{:?}", &t.metrics[..t.metrics.len().saturating_sub(1)]))
                })
                .collect()
        };
        assert!(native.accumulators().series.values().map(|s| s.lists()).sum::<i64>() == 300);
        assert_eq!(sums(&ubi), sums(&native));
    }

    /// The interleaved searches: before the candidate degrades it is the
    /// slightly better ranker (noise 1.0 against 1.2) and must not lose;
    /// after, it loses clearly (exact sign test).
    #[test]
    fn the_interleaved_experiment_shows_the_degradation() {
        use rankpulse_core::pipeline::{Clock, Pipeline};
        let outcomes = |degraded: bool| {
            let config = Config::default();
            let mut p = Pipeline::new(&config.pipeline_settings());
            let mut rng = Rng::seed_from_u64(17);
            for n in 0..5_000 {
                let ts = 1_700_000_000_000 + n as i64 * 100;
                let (_, first, rest) = simulate(&mut rng, n, degraded, ts, false);
                p.ingest("q", first.as_bytes(), Clock::replay(), None).unwrap();
                for m in rest {
                    p.ingest("e", m.as_bytes(), Clock::replay(), None).unwrap();
                }
            }
            p.finalize_all();
            let key: Vec<&str> = vec!["interleaved", "us"];
            let (_, series) = p
                .accumulators()
                .series
                .iter()
                .find(|(d, _)| d.iter().map(String::as_str).eq(key.iter().copied()))
                .unwrap();
            series.total().interleaving
        };
        let before = outcomes(false);
        let after = outcomes(true);
        assert!(before.lists() > 200, "{before:?}");
        assert!(before.a_wins >= before.b_wins, "{before:?}");
        assert!(after.b_wins > after.a_wins, "{after:?}");
        let p = rankpulse_core::compare::sign_test(after.a_wins as u64, after.b_wins as u64).unwrap();
        assert!(p < 1e-6, "{after:?}: p = {p}");
    }

    /// The demo's broker holds at most DEMO_BROKER_BYTES however long it
    /// runs: filled with three times that, evenly over every partition of
    /// both topics, it has dropped the oldest records of each and keeps at
    /// most the mock cluster's limit per partition.
    #[test]
    fn the_demo_broker_keeps_a_bounded_log() {
        use rdkafka::producer::{BaseRecord, Producer};
        let traffic = Traffic::default();
        let cluster = demo_cluster(&traffic).unwrap();
        let producer: rdkafka::producer::BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", cluster.bootstrap_servers())
            .set("linger.ms", "5")
            .create()
            .unwrap();
        const SIZE: usize = 64 << 10;
        let payload = vec![b'x'; SIZE];
        let topics = [&traffic.impressions_topic, &traffic.judgments_topic];
        let per_partition = 3 * DEMO_BROKER_BYTES as usize / SIZE / topics.len() / DEMO_PARTITIONS as usize;
        for _ in 0..per_partition {
            for topic in topics {
                for partition in 0..DEMO_PARTITIONS {
                    let mut record = BaseRecord::<(), [u8]>::to(topic).partition(partition).payload(&payload);
                    // A full queue: deliver some, then try again.
                    while let Err((_, r)) = producer.send(record) {
                        record = r;
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
        producer.flush(Duration::from_secs(30)).unwrap();
        let mut kept = 0;
        for topic in topics {
            for partition in 0..DEMO_PARTITIONS {
                let (low, high) =
                    producer.client().fetch_watermarks(topic, partition, Duration::from_secs(10)).unwrap();
                assert_eq!(high, per_partition as i64, "{topic} [{partition}]: every record was appended");
                assert!(low > 0, "{topic} [{partition}]: the oldest records were dropped");
                let bytes = (high - low) as u64 * SIZE as u64;
                assert!(bytes <= MOCK_PARTITION_LOG_BYTES, "{topic} [{partition}] keeps {bytes} bytes");
                kept += bytes;
            }
        }
        assert!(kept <= DEMO_BROKER_BYTES, "the broker keeps {kept} bytes");
    }

    #[test]
    fn summary_reads_the_exposition() {
        let text = "rankpulse_lists_finalized_total{ranker=\"control\",market=\"us\"} 50\n\
                    rankpulse_lists{window=\"1m\",ranker=\"control\",market=\"us\"} 10\n\
                    rankpulse_ndcg{k=\"10\",window=\"1m\",ranker=\"control\",market=\"us\"} 0.5\n\
                    rankpulse_mrr{k=\"10\",window=\"1m\",ranker=\"control\",market=\"us\"} 0.25\n";
        let mut prev = BTreeMap::from([("control".to_string(), 40.0)]);
        let lines = summary_lines(text, &mut prev, Duration::from_secs(5));
        assert_eq!(lines.len(), 1);
        assert!(
            lines[0].contains("2.0 lists/s")
                && lines[0].contains("nDCG@10 0.5000")
                && lines[0].contains("MRR@10 0.2500"),
            "{}",
            lines[0]
        );
    }
}
