//! `rankpulse-bench`: benchmarks of rankpulse measured as its users would
//! measure it (whole processes, a real broker, several traffic shapes),
//! kept out of the product. See docs/performance.md for the figures and
//! the commands that reproduce them.

use clap::{Args, Parser, Subcommand};
use rankpulse::config::Config;
use rankpulse_bench::{bare, engine, kafka, loop_gap, scale, shapes, state};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "rankpulse-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Decode → assemble → score → accumulate on one core, in list order and in the
    /// order a consumer of the two topics reads the mix.
    Pipeline(MixArgs),
    /// Resident bytes per open list, and the cost of a tick over them.
    Memory(MixArgs),
    /// Fill a broker, then a bare consumer and the daemon (in this process) on the same data.
    Kafka(MixArgs),
    /// The daemon reading live while the mix is produced at --rate.
    Freshness(MixArgs),
    /// One `rankpulse run` process, then two in one consumer group, on the same data.
    Scale(MixArgs),
    /// One list of 10,000 results and 10,000 judgments, then 1,000 late
    /// judgments for it, among normal traffic (5 rounds).
    HotKey(MixArgs),
    /// The longest time the consumer loop keeps fetched messages waiting, with 16
    /// partitions and 200 combinations per shard over a 1 h window (in-process mock
    /// cluster; --lists defaults to 16 × 200 × 360 there).
    LoopGap(MixArgs),
    /// `rankpulse run` against a bare consumer on three traffic shapes
    /// (S1 production mix, S2 judgment-heavy backlog, S3 live tail at 70%
    /// of S2's rate, and on request s3c, S3's lists read as a backlog
    /// afterwards), through the broker at --brokers, alternating which
    /// goes first, --rounds times; whole-process CPU of each.
    Shapes {
        /// Kafka bootstrap servers (a broker that lets the bench create topics).
        #[arg(long)]
        brokers: String,
        /// The rankpulse binary to measure (default: `rankpulse` beside this one).
        #[arg(long)]
        rankpulse: Option<PathBuf>,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        #[arg(long, default_value_t = 4)]
        partitions: i32,
        /// Lists of S1 (about 4 messages each).
        #[arg(long, default_value_t = 250_000)]
        s1_lists: usize,
        /// Lists of S2 (about 11.5 messages each).
        #[arg(long, default_value_t = 100_000)]
        s2_lists: usize,
        /// Seconds over which S3's lists start (its production lasts 20 s
        /// more, the judgments' delay; the rate holds from 20 s in).
        #[arg(long, default_value_t = 60.0)]
        live_seconds: f64,
        /// S3's rate, messages per second (default: 70% of the daemon's
        /// median S2 rate; given, S3 runs without S2).
        #[arg(long)]
        live_rate: Option<f64>,
        /// Shapes to run, comma separated: s1, s2, s3, s3c, ubi, ubi-hits
        /// (S3 and s3c run S2 first for their rate unless --live-rate is
        /// given; ubi and ubi-hits run the same lists as UBI and as native
        /// events, ubi-hits with every list's hit ids in its query).
        #[arg(long, default_value = "s1,s2,s3", value_delimiter = ',')]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// The daemon's session.gap, seconds.
        #[arg(long, default_value_t = 30)]
        gap_seconds: u64,
        /// Lists of the ubi shapes (about 2.6 native and 6.6 UBI messages each).
        #[arg(long, default_value_t = 200_000)]
        ubi_lists: usize,
    },
    /// UBI input against native input on the same generated lists
    /// (rankpulse_testkit::ubi), through the pipeline alone on one core:
    /// lists per second of each and their ratio, --rounds times.
    Ubi {
        #[arg(long, default_value_t = 200_000)]
        lists: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// Only lists whose query carries query_response_hit_ids (one message per list shown).
        #[arg(long)]
        hit_ids_only: bool,
    },
    /// The `mapped` format against native input on the same generated
    /// lists (rankpulse_testkit::mapped's invented schema), through the
    /// pipeline alone on one core: lists per second of each and their
    /// ratio, --rounds times.
    Mapped {
        #[arg(long, default_value_t = 200_000)]
        lists: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
    },
    /// The cost of checkpoints: one of --lists open lists written --writes
    /// times and restored, in the state topic on the broker at --brokers
    /// (`state.backend = "kafka"`) and in a temporary `state.dir`.
    State {
        /// Kafka bootstrap servers (a broker that lets the bench create topics).
        #[arg(long)]
        brokers: String,
        #[arg(long, default_value_t = 100_000)]
        lists: usize,
        #[arg(long, default_value_t = 10)]
        writes: usize,
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Days of simulated search traffic (rankpulse_testkit::traffic) as
    /// rankpulse events on stdout, in event-time order from 2026-01-05
    /// (a Monday); each arm's lists, sessions and sum of nDCG@10 as JSON
    /// on stderr. For bench/scripts/alert_backfill.py (docs/metrics.md).
    Simulate {
        #[arg(long)]
        days: f64,
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// `market/ranker[*factor][@day*factor][~interleaved]`, repeated:
        /// e.g. `m1/control`, `d1/candidate*0.98`, `q/r1@14.25*0.95`.
        #[arg(long = "arm", required = true)]
        arms: Vec<rankpulse_bench::simulate::Arm>,
    },
    /// The bare consumer (a process the shapes bench starts): reads
    /// --messages messages of the topics in RANKPULSE__KAFKA__* and decodes
    /// each with serde_json, then prints one JSON line.
    Bare {
        #[arg(long)]
        messages: u64,
        /// Also record each message's delay from its Kafka timestamp.
        #[arg(long)]
        delays: bool,
        /// What each message is decoded into.
        #[arg(long, value_enum, default_value = "native")]
        decode: bare::Decode,
    },
}

/// The options of the measurements on the seeded mix (S1). The daemon
/// runs with the defaults and any RANKPULSE__* environment overrides.
#[derive(Args)]
struct MixArgs {
    /// Lists in the mix (each: one impression of 10 results and 3 judgments).
    #[arg(long, default_value_t = 250_000)]
    lists: usize,
    /// Seed of the mix.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Kafka bootstrap servers (kafka, freshness, scale); `mock` (freshness): librdkafka's in-process mock cluster.
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    /// Skip producing (kafka, scale): the topics already hold the mix of these --lists and --seed.
    #[arg(long)]
    no_fill: bool,
    /// Messages per second produced (freshness).
    #[arg(long, default_value_t = 50_000.0)]
    rate: f64,
    /// Seconds of production (freshness).
    #[arg(long, default_value_t = 20.0)]
    seconds: f64,
    /// Rounds of ceiling then daemon on the same data (kafka): each round's
    /// ratio pairs measurements seconds apart, and the median over rounds is
    /// printed; a shared machine's noise moves single rounds by ±0.1.
    #[arg(long, default_value_t = 1)]
    rounds: usize,
    /// Holds each `rankpulse run` instance (scale), or the daemon
    /// (freshness, then a `rankpulse run` process), to this many cores, in a
    /// CPU cgroup of its own, as a container's CPU limit would (needs root):
    /// on a machine with fewer cores than the instances, the producer and
    /// the broker need, what keeps them off each other's cores.
    #[arg(long)]
    cpu_limit: Option<f64>,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Pipeline(args) => measure("pipeline", args),
        Command::Memory(args) => measure("memory", args),
        Command::Kafka(args) => measure("kafka", args),
        Command::Freshness(args) => measure("freshness", args),
        Command::Scale(args) => measure("scale", args),
        Command::HotKey(args) => measure("hot-key", args),
        Command::LoopGap(args) => measure("loop-gap", args),
        Command::Simulate { days, seed, arms } => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
            let truth = rankpulse_bench::simulate::run(&arms, days, seed, &mut out)?;
            eprintln!("{truth}");
            Ok(())
        }
        Command::Bare { messages, delays, decode } => bare::run(messages, delays, decode),
        Command::State { brokers, lists, writes, seed } => {
            let config = Config::load(None)?;
            print!("{}", state::run(&config, &state::Options { brokers, lists, writes, seed })?);
            Ok(())
        }
        Command::Ubi { lists, seed, rounds, hit_ids_only } => {
            let config = Config::load(None)?;
            let traffic = if hit_ids_only {
                rankpulse_testkit::ubi::ubi_mix_hit_ids(lists, seed, 1_763_780_000_000, 100.0)
            } else {
                rankpulse_testkit::ubi::ubi_mix(lists, seed, 1_763_780_000_000, 100.0, 0)
            };
            eprintln!(
                "{} lists: {} native messages, {} UBI messages",
                traffic.lists,
                traffic.native.len(),
                traffic.ubi.len()
            );
            let mut parts = Vec::new();
            format_rounds("UBI", rounds, || {
                let (native, ubi) = engine::ubi_vs_native(&config, &traffic);
                parts.push((1e6 / native, 1e6 / ubi, engine::ubi_parts(&config, &traffic)));
                (native, ubi)
            });
            print_ubi_parts(&parts);
            Ok(())
        }
        Command::Mapped { lists, seed, rounds } => {
            let config = Config::load(None)?;
            let path = std::env::temp_dir().join(format!("rankpulse-bench-mapped-{}.toml", std::process::id()));
            std::fs::write(&path, rankpulse_testkit::mapped::MAPPING_TOML)?;
            let mapped_config = Config::load_with_env(Some(&path), Vec::new());
            let _ = std::fs::remove_file(&path);
            let mapped_config = mapped_config?;
            let native = rankpulse_testkit::mix(0, lists, seed, 1_763_780_000_000, 100.0);
            let traffic = rankpulse_testkit::mapped::mapped_twin(&native, seed);
            eprintln!(
                "{lists} lists: {} native messages, {} mapped messages ({} of them unmapped actions)",
                traffic.native.len(),
                traffic.mapped.len(),
                traffic.ignored
            );
            format_rounds("mapped", rounds, || engine::mapped_vs_native(&config, &mapped_config, &traffic, lists));
            Ok(())
        }
        Command::Shapes {
            brokers,
            rankpulse,
            rounds,
            partitions,
            s1_lists,
            s2_lists,
            live_seconds,
            live_rate,
            shapes,
            seed,
            gap_seconds,
            ubi_lists,
        } => {
            let rankpulse = match rankpulse {
                Some(p) => p,
                None => rankpulse_bench::rankpulse_exe()?,
            };
            let opts = shapes::Options {
                brokers,
                rankpulse,
                rounds: rounds.max(1),
                partitions,
                s1_lists,
                s2_lists,
                live_seconds,
                live_rate,
                shapes: shapes.iter().map(|s| s.to_ascii_lowercase()).collect(),
                seed,
                gap_seconds,
                ubi_lists,
            };
            let reports = shapes::run(&opts)?;
            print!("{}", shapes::table(&reports));
            for tag in ["UBI", "UBIH"] {
                if let Some(ubi) = shapes::ubi_table(&reports, tag) {
                    print!("{ubi}");
                }
            }
            Ok(())
        }
    }
}

fn measure(what: &str, args: MixArgs) -> anyhow::Result<()> {
    // Defaults and RANKPULSE__* overrides, as `rankpulse run` without --config.
    let config = Config::load(None)?;
    if args.cpu_limit.is_some() && !matches!(what, "scale" | "freshness") {
        anyhow::bail!("--cpu-limit applies to `scale` and `freshness` (their daemons are processes of their own)");
    }
    if let Some(cores) = args.cpu_limit
        && !(cores.is_finite() && cores >= 0.01)
    {
        anyhow::bail!("--cpu-limit: {cores} is not a number of cores of at least 0.01");
    }
    match what {
        "pipeline" => {
            let messages =
                rankpulse_testkit::mix(0, args.lists, args.seed, 1_763_780_000_000, engine::PIPELINE_SPACING_MS);
            let (imp, jdg) = rankpulse_testkit::mean_sizes(&messages);
            eprintln!(
                "mix: {} messages ({} lists; impressions {imp:.0} B, judgments {jdg:.0} B on average)",
                messages.len(),
                args.lists
            );
            let partitions = engine::CONSUMER_ORDER_PARTITIONS;
            let lag = (engine::CONSUMER_ORDER_LAG_MS / engine::PIPELINE_SPACING_MS) as usize;
            let order = engine::consumer_order(&messages, partitions, lag);
            for run in 1..=3 {
                let decode = engine::decode_throughput(&config, &messages);
                let rate = engine::pipeline_throughput(&config, &messages);
                let (in_order, late) = engine::pipeline_throughput_in_order(&config, &order, partitions);
                if late > 0 {
                    eprintln!("warning: {late} judgments came after their list was final in the consumer's order");
                }
                println!(
                    "run {run}: decode only {decode:.0} events/s, full pipeline {rate:.0} events/s on one core ({:.2}); \
                     in a consumer's order ({partitions} partitions, judgments {:.0} s behind): {in_order:.0} events/s",
                    rate / decode,
                    engine::CONSUMER_ORDER_LAG_MS / 1000.0
                );
            }
        }
        "hot-key" => {
            let mut totals = Vec::new();
            for round in 1..=5 {
                let h = engine::hot_key(&config);
                if h.refused > 0 {
                    anyhow::bail!("{} events of the hot key were not applied", h.refused);
                }
                println!(
                    "round {round}: 50 pages (10,000 results) + 10,000 judgments {:.1} ms; \
                     1,000 late judgments (amend) {:.1} ms; total {:.1} ms",
                    h.open_ms,
                    h.late_ms,
                    h.open_ms + h.late_ms
                );
                totals.push(h.open_ms + h.late_ms);
            }
            totals.sort_by(f64::total_cmp);
            println!("median total {:.1} ms (decode, assemble, score, accumulate; one core)", totals[2]);
        }
        "memory" => {
            let m = engine::open_list_memory(&config, args.lists);
            println!(
                "{} open lists of 10 results: resident {:.1} MiB before, {:.1} MiB after: {:.0} bytes per open list",
                args.lists,
                m.before as f64 / 1048576.0,
                m.after as f64 / 1048576.0,
                m.per_list
            );
            println!(
                "tick with none due: {:.2} ms (event-time expiry); walk of every list (idle-partition expiry): {:.1} ms",
                m.tick_ms, m.walk_ms
            );
        }
        "freshness" => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            // `--brokers mock`: librdkafka's in-process mock cluster.
            let (_cluster, brokers) = match args.brokers.as_str() {
                "mock" => {
                    let (cluster, bootstrap) = kafka::mock_cluster()?;
                    (Some(cluster), bootstrap)
                }
                other => (None, other.to_string()),
            };
            let report = runtime.block_on(kafka::freshness(
                &config,
                &brokers,
                args.rate,
                args.seconds,
                args.seed,
                args.cpu_limit,
            ))?;
            println!("{report}");
        }
        "loop-gap" => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let lists = if args.lists == 250_000 { 16 * 200 * 360 } else { args.lists };
            println!(
                "loop gap: {lists} lists (an impression of 5 results and a click each) over the last hour, {} partitions, {} combinations per shard, windows {:?} at {} buckets",
                loop_gap::PARTITIONS,
                loop_gap::COMBINATIONS,
                config.windows.spans.iter().map(|w| w.text.as_str()).collect::<Vec<_>>(),
                config.windows.bucket.text
            );
            for report in runtime.block_on(loop_gap::run(&config, lists, args.seed))? {
                println!("{report}");
            }
        }
        "scale" => {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
            let report =
                runtime.block_on(scale::run(&args.brokers, args.lists, args.seed, !args.no_fill, args.cpu_limit))?;
            println!("{report}");
        }
        "kafka" => {
            let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?;
            let report = runtime.block_on(kafka::run(
                &config,
                &args.brokers,
                args.lists,
                args.seed,
                !args.no_fill,
                args.rounds,
            ))?;
            println!("{report}");
        }
        other => anyhow::bail!("no measurement named {other}"),
    }
    Ok(())
}

/// Medians of the rounds' parts, per list: what the UBI run's time is
/// made of, against the budget the 0.8 target leaves it. "The rest" is
/// the median run less the median decoding, each taken over the rounds.
fn print_ubi_parts(parts: &[(f64, f64, engine::UbiParts)]) {
    let median = |f: &dyn Fn(&(f64, f64, engine::UbiParts)) -> f64| {
        let mut v: Vec<f64> = parts.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let native = median(&|p| p.0);
    let ubi = median(&|p| p.1);
    let native_decode = median(&|p| p.2.native_decode);
    let ubi_decode = median(&|p| p.2.ubi_decode);
    let ubi_validate = median(&|p| p.2.ubi_validate);
    println!(
        "per list, medians (µs): native {native:.2} (decoding {native_decode:.2}, the rest {:.2}); UBI {ubi:.2} (decoding {ubi_decode:.2}, the rest {:.2}; serde_json only validating the UBI messages {ubi_validate:.2}); UBI within 0.8 of native: at most {:.2}",
        native - native_decode,
        ubi - ubi_decode,
        native / 0.8
    );
}

/// `rounds` rounds of (native, `format`) lists per second from `round`,
/// each printed with its ratio, then the median ratio (the `ubi` and
/// `mapped` commands).
fn format_rounds(format: &str, rounds: usize, mut round: impl FnMut() -> (f64, f64)) {
    let mut ratios = Vec::new();
    for n in 1..=rounds.max(1) {
        let (native, other) = round();
        println!(
            "round {n}: native {native:.0} lists/s, {format} {other:.0} lists/s, {format}/native {:.2}",
            other / native
        );
        ratios.push(other / native);
    }
    ratios.sort_by(f64::total_cmp);
    println!("median {format}/native: {:.2}", ratios[ratios.len() / 2]);
}
