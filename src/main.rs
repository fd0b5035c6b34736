//! The `rankpulse` command line. Only argument parsing and exit codes live
//! here; every command is a library entry point.

use clap::{Args, Parser, Subcommand};
use rankpulse::config::Config;
use rankpulse_core::eval::{self, EvalOptions, RelFormat};
use rankpulse_core::metrics::{GaucWeight, Grade, IdealScope, NoRelevant, parse_setting};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rankpulse",
    version,
    long_version = long_version(),
    about = "Live ranking-quality metrics for search, and a trec_eval-compatible evaluator"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Evaluate a TREC run against qrels (trec_eval-compatible output).
    Eval(EvalArgs),
    /// Try it: an in-process Kafka, a traffic generator (a control and a degrading candidate ranker) and the daemon.
    Demo(DemoArgs),
    /// Run the daemon: consume impressions and judgments from Kafka, serve /metrics.
    Run(RunArgs),
    /// Produce the demo's traffic to an external Kafka.
    Loadgen(LoadgenArgs),
    /// Exit 0 if the daemon's /healthz answers 200, else 1 (container health checks; no shell needed).
    Healthcheck(HealthcheckArgs),
    /// Run the stream pipeline over a file of JSON events (one per line) and print the final /metrics exposition.
    ///
    /// Invalid lines are counted in rankpulse_events_rejected_total, by reason, and each file with
    /// any is named in a warning on stderr with its first. A file in which no
    /// line is a valid event fails (exit 2, nothing printed), saying how many lines were rejected
    /// and why the first one was; so does an empty file (or one of blank lines only): an exposition
    /// of zeros would hide a wrong file.
    Replay(ReplayArgs),
    /// Inspect or clean the checkpoints in state.topic (state.backend = "kafka").
    #[command(subcommand)]
    State(StateCommand),
}

#[derive(Subcommand)]
enum StateCommand {
    /// Every instance's checkpoint in state.topic: when written, its records, the partitions it
    /// holds, and of which it is still the latest owner on record.
    List(StateArgs),
    /// Tombstone every record of an instance that left the group for good, so that compaction
    /// removes its checkpoint and hand-overs stop reading it. Refused while it is the latest owner
    /// on record of a partition, unless --force.
    Forget {
        /// The instance (its state.instance).
        instance: String,
        /// Forget it even if a partition would then resume from the committed offsets.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        args: StateArgs,
    },
}

#[derive(Args)]
struct StateArgs {
    /// Configuration file (TOML) of the daemons: kafka.* and state.*.
    #[arg(long, short = 'C', value_name = "PATH")]
    config: Option<PathBuf>,
}

#[derive(Args)]
struct DemoArgs {
    /// Address of the status page and /metrics.
    #[arg(long, default_value = "127.0.0.1:9464")]
    listen: String,
    /// Web configuration file (exporter-toolkit format): TLS and basic auth on the endpoint.
    #[arg(long = "web.config.file", value_name = "PATH")]
    web_config: Option<PathBuf>,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
    /// Seconds after which the candidate ranker degrades.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    degrade_after: u64,
    /// Searches (lists) per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds between summary lines.
    #[arg(long, value_name = "SECS", default_value_t = 5)]
    report_every: u64,
    /// The traffic's format: rankpulse, or ubi (OpenSearch UBI 1.3 queries and events on topics
    /// ubi_queries and ubi_events, consumed with [kafka.formats]).
    #[arg(long, default_value = "rankpulse", value_parser = parse_demo_format)]
    format: rankpulse_core::event::Format,
}

fn parse_demo_format(name: &str) -> Result<rankpulse_core::event::Format, String> {
    match name {
        "rankpulse" => Ok(rankpulse_core::event::Format::Rankpulse),
        "ubi" => Ok(rankpulse_core::event::Format::Ubi),
        _ => Err(format!("unknown format {name:?}, expected rankpulse or ubi")),
    }
}

#[derive(Args)]
struct LoadgenArgs {
    /// Kafka bootstrap servers.
    #[arg(long, default_value = "127.0.0.1:9092")]
    brokers: String,
    /// Impressions topic.
    #[arg(long, default_value = "search-impressions")]
    impressions_topic: String,
    /// Judgments topic.
    #[arg(long, default_value = "search-judgments")]
    judgments_topic: String,
    /// Searches (lists) per second.
    #[arg(long, default_value_t = 100.0)]
    rate: f64,
    /// Seconds after which the candidate ranker degrades.
    #[arg(long, value_name = "SECS", default_value_t = 180)]
    degrade_after: u64,
    /// Share of deliberately invalid messages.
    #[arg(long, default_value_t = 0.01)]
    invalid_share: f64,
    /// Stop after this many seconds (default: run until Ctrl-C or SIGTERM).
    #[arg(long, value_name = "SECS")]
    duration: Option<u64>,
}

#[derive(Args)]
struct RunArgs {
    /// Configuration file (TOML); defaults apply to every key it leaves out.
    #[arg(long, short = 'C', value_name = "PATH")]
    config: Option<PathBuf>,
    /// Print the effective configuration (secrets redacted) and exit.
    #[arg(long)]
    print_config: bool,
    /// Web configuration file (exporter-toolkit format): TLS and basic auth on /metrics and the
    /// status page. Sets http.web_config.
    #[arg(long = "web.config.file", value_name = "PATH")]
    web_config: Option<PathBuf>,
}

#[derive(Args)]
struct HealthcheckArgs {
    /// URL to GET (plain http); the default is /healthz at the default http.listen.
    #[arg(long, default_value_t = rankpulse::http::default_health_url())]
    url: String,
    /// Longest the whole check may take (connect, request, status line).
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    timeout: std::time::Duration,
}

#[derive(Args)]
struct ReplayArgs {
    /// Configuration file (TOML); defaults apply to every key it leaves out.
    #[arg(long, short = 'C', value_name = "PATH")]
    config: Option<PathBuf>,
    /// Format of the files: rankpulse (docs/event.schema.json), OpenSearch UBI 1.3: ubi
    /// (queries and events, _bulk NDJSON exports included), ubi_queries, ubi_events; or mapped
    /// (any JSON schema, read through the paths of [mapped] in the --config file).
    #[arg(long, default_value = "rankpulse", value_parser = parse_format)]
    format: rankpulse_core::event::Format,
    /// Also write the exposition at every --step of event time to FILE, as OpenMetrics text
    /// with timestamps ending `# EOF`, for `promtool tsdb create-blocks-from openmetrics FILE DIR`
    /// (backfilling Prometheus: docs/operations.md)
    #[arg(long, value_name = "FILE")]
    history: Option<PathBuf>,
    /// Event time between two expositions of --history (e.g. 15s, 1m)
    #[arg(long, value_name = "DURATION", default_value = "1m", value_parser = parse_step, requires = "history")]
    step: std::time::Duration,
    /// Events files, one JSON event per line, merged by event time into one pipeline
    /// (each file in its own order); `-` for stdin.
    #[arg(required = true, num_args = 1..)]
    files: Vec<PathBuf>,
}

fn parse_step(text: &str) -> Result<std::time::Duration, String> {
    let d = humantime::parse_duration(text).map_err(|e| format!("{text:?}: {e}"))?;
    if d < std::time::Duration::from_secs(1) {
        return Err(format!("{text:?}: a step must be at least 1s"));
    }
    Ok(d)
}

fn parse_format(name: &str) -> Result<rankpulse_core::event::Format, String> {
    rankpulse_core::event::Format::parse(name).ok_or_else(|| {
        let names: Vec<&str> = rankpulse_core::event::Format::NAMES.iter().map(|(n, _)| *n).collect();
        format!("unknown format {name:?}, expected one of {}", names.join(", "))
    })
}

#[derive(Args)]
// getopt_long, which trec_eval parses with, takes any unique prefix of a
// long option (`--query` for `--query_eval_wanted`).
#[command(args_override_self = true, infer_long_args = true)]
struct EvalArgs {
    /// Average over every topic in the judgments; a topic missing from the run is scored as
    /// trec_eval does (one unjudged document).
    #[arg(short = 'c', long = "complete_rel_info_wanted")]
    complete: bool,
    /// Print each topic's values before the summary.
    #[arg(short = 'q', long = "query_eval_wanted")]
    per_query: bool,
    /// Do not print the `all` summary.
    #[arg(short = 'n', long = "nosummary")]
    no_summary: bool,
    /// Measure or nickname, trec_eval syntax (repeatable): map, P.5,10, ndcg.1=3,2=9, official,
    /// all_trec, set, all_prefs, prefs, qrels_jg; rankpulse's own: ndcg_exp_cut.k, err_cut.k,
    /// gauc, extras. Parameters come from the first -m NAME.PARAMS. Default: official.
    #[arg(short = 'm', long = "measure", value_name = "MEASURE")]
    measures: Vec<String>,
    /// Minimum grade counted as relevant (0 or more).
    #[arg(short = 'l', long = "level_for_rel", value_name = "LEVEL", default_value = "1", allow_negative_numbers = true, value_parser = parse_atol)]
    relevance_level: i64,
    /// Evaluate only the first NUM results of each topic.
    #[arg(short = 'M', long = "Max_retrieved_per_topic", value_name = "NUM", allow_negative_numbers = true, value_parser = parse_atol)]
    max_docs: Option<i64>,
    /// Drop unjudged documents from every ranking before evaluating.
    #[arg(short = 'J', long = "Judged_docs_only")]
    judged_only: bool,
    /// Number of documents in the collection (used by utility).
    #[arg(short = 'N', long = "Number_docs_in_coll", value_name = "NUM", default_value = "0", allow_negative_numbers = true, value_parser = parse_atol)]
    num_docs_in_coll: i64,
    /// Judgments format: qrels, prefs, qrels_prefs, qrels_jg.
    #[arg(short = 'R', long = "Rel_info_format", value_name = "FORMAT", default_value = "qrels", value_parser = parse_rel_format)]
    rel_format: RelFormat,
    /// Results format; trec_results is the only one.
    #[arg(short = 'T', long = "Results_format", value_name = "FORMAT", default_value = "trec_results", value_parser = ["trec_results"])]
    results_format: String,
    /// Print z-scores against the `qid measure mean std_dev` lines of FILE.
    #[arg(short = 'Z', long = "Zscore", value_name = "FILE")]
    zscores: Option<PathBuf>,
    /// trec_eval's debug level, optionally `LEVEL.QID` to evaluate that topic only; rankpulse
    /// prints no debug traces.
    #[arg(short = 'D', long = "Debug_level", value_name = "LEVEL[.QID]")]
    debug: Option<String>,
    /// Obsolete trec_eval flag, accepted and ignored.
    #[arg(short = 'o', long = "Output_old_results_format", hide = true)]
    old_format: bool,
    /// Print the version and exit.
    #[arg(short = 'v', long = "version")]
    version: bool,
    /// Print a JSON report with full f64 precision instead of trec_eval's table.
    #[arg(long)]
    json: bool,
    /// ERR's top grade: R(g) = (2^g - 1) / 2^max_grade (err_cut).
    #[arg(long, value_name = "GRADE", default_value_t = 4)]
    max_grade: Grade,
    /// GAUC weight per topic: impressions (results retrieved), uniform, positives.
    #[arg(long, value_name = "WEIGHT", value_parser = parse_setting::<GaucWeight>, default_value_t = GaucWeight::Impressions)]
    gauc_weight: GaucWeight,
    /// Topics with nothing relevant: zero (counted as 0, trec_eval) or skip (left out of the means). For nDCG and ERR nothing relevant is no positive grade, for the others none at -l, as in the daemon.
    #[arg(long, value_name = "POLICY", value_parser = parse_setting::<NoRelevant>, default_value_t = NoRelevant::Zero)]
    no_relevant: NoRelevant,
    /// Ideal ranking for nDCG: judged (every judged document, trec_eval) or shown (the run's results).
    #[arg(long, value_name = "SCOPE", value_parser = parse_setting::<IdealScope>, default_value_t = IdealScope::Judged)]
    ideal: IdealScope,
    /// Judgments file (format per -R).
    #[arg(required_unless_present = "version")]
    qrels: Option<PathBuf>,
    /// TREC run file: `qid iter docno rank score run_id`, or `-` for stdin.
    #[arg(required_unless_present = "version")]
    run: Option<PathBuf>,
}

/// A number as trec_eval reads `-l`, `-M` and `-N` (C's `atol`): its leading
/// digits, so `1.5` is 1 and `2x` is 2; a value with no digits is refused
/// (trec_eval would read 0).
fn parse_atol(value: &str) -> Result<i64, String> {
    let v = value.trim_start();
    let sign = usize::from(v.starts_with(['+', '-']));
    let digits = v[sign..].bytes().take_while(u8::is_ascii_digit).count();
    if digits == 0 {
        return Err(format!("{value:?} is not a number"));
    }
    // Past the range, saturated as glibc's `atol` does.
    Ok(v[..sign + digits].parse().unwrap_or(if v.starts_with('-') { i64::MIN } else { i64::MAX }))
}

fn parse_rel_format(name: &str) -> Result<RelFormat, String> {
    name.parse().map_err(|_| format!("unknown format {name:?}, expected qrels, prefs, qrels_prefs or qrels_jg"))
}

/// `--version`: the crate's version, then librdkafka's version and the
/// features it was built with, so a user can see TLS, SASL and codecs.
fn long_version() -> &'static str {
    let text = format!("{}\n{}", env!("CARGO_PKG_VERSION"), rankpulse::kafka::librdkafka_build());
    Box::leak(text.into_boxed_str())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Eval(args) => eval_command(args),
        Command::Demo(args) => {
            rankpulse::logging::init(&Default::default());
            report("demo", demo_command(args))
        }
        Command::Loadgen(args) => {
            rankpulse::logging::init(&Default::default());
            report("loadgen", loadgen_command(args))
        }
        Command::Run(args) => match run_command(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rankpulse run: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Healthcheck(args) => match rankpulse::http::check_health(&args.url, args.timeout) {
            Ok(status_line) => {
                println!("rankpulse healthcheck: {}: {status_line}", args.url);
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("rankpulse healthcheck: {e}");
                ExitCode::from(1)
            }
        },
        Command::State(command) => match state_command(command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rankpulse state: {e:#}");
                ExitCode::from(2)
            }
        },
        Command::Replay(args) => match replay_command(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("rankpulse replay: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

fn report(command: &str, result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rankpulse {command}: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn demo_command(args: DemoArgs) -> anyhow::Result<()> {
    use rankpulse::demo::{DemoOptions, Traffic};
    let options = DemoOptions {
        listen: args.listen,
        web_config: args.web_config,
        duration: args.duration.map(std::time::Duration::from_secs),
        traffic: if args.format == rankpulse_core::event::Format::Rankpulse {
            Traffic {
                lists_per_second: args.rate,
                degrade_after: std::time::Duration::from_secs(args.degrade_after),
                ..Traffic::default()
            }
        } else {
            Traffic {
                impressions_topic: rankpulse::demo::UBI_QUERIES_TOPIC.into(),
                judgments_topic: rankpulse::demo::UBI_EVENTS_TOPIC.into(),
                lists_per_second: args.rate,
                degrade_after: std::time::Duration::from_secs(args.degrade_after),
                format: args.format,
                ..Traffic::default()
            }
        },
        report_every: std::time::Duration::from_secs(args.report_every.max(1)),
    };
    rankpulse::demo::demo(options, shutdown_signal())
}

fn loadgen_command(args: LoadgenArgs) -> anyhow::Result<()> {
    use rankpulse::demo::{Deliveries, Traffic, generate, producer};
    let traffic = Traffic {
        impressions_topic: args.impressions_topic,
        judgments_topic: args.judgments_topic,
        lists_per_second: args.rate,
        degrade_after: std::time::Duration::from_secs(args.degrade_after),
        invalid_share: args.invalid_share,
        ..Traffic::default()
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(async {
        let producer = producer(&args.brokers)?;
        tracing::info!("loadgen: {} lists/s to {} ({} / {})", traffic.lists_per_second, args.brokers, traffic.impressions_topic, traffic.judgments_topic);
        let duration = args.duration;
        let stop = async move {
            tokio::select! {
                _ = shutdown_signal() => {}
                _ = async { match duration { Some(d) => tokio::time::sleep(std::time::Duration::from_secs(d)).await, None => std::future::pending().await } } => {}
            }
        };
        let deliveries = std::sync::Arc::new(Deliveries::default());
        let lists = generate(&producer, &traffic, &deliveries, stop).await;
        // Deliver what is queued before exiting; then every report has come
        // (delivered or failed), unless the broker never answered. The
        // producer lives until the report: dropping it purges its queue,
        // which would turn "undelivered" into purge failures mid-count.
        let flushing = producer.clone();
        let flushed = tokio::task::spawn_blocking(move || {
            rdkafka::producer::Producer::flush(&flushing, std::time::Duration::from_secs(10))
        })
        .await?;
        // The tasks counting reports run on this runtime: let them finish.
        if flushed.is_ok() {
            let counted = tokio::time::timeout(std::time::Duration::from_secs(5), async {
                while deliveries.pending() > 0 {
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            });
            let _ = counted.await;
        }
        let (delivered, failed) = (
            deliveries.delivered.load(std::sync::atomic::Ordering::Relaxed),
            deliveries.failed.load(std::sync::atomic::Ordering::Relaxed),
        );
        let pending = deliveries.enqueued.load(std::sync::atomic::Ordering::Relaxed).saturating_sub(delivered + failed);
        tracing::info!("loadgen: produced {lists} lists: {delivered} messages delivered, {failed} failed, {pending} undelivered");
        if failed > 0 || pending > 0 {
            let first = deliveries.first_error.lock().map(|e| e.clone()).unwrap_or_default();
            let why = match (flushed, first) {
                (Err(e), _) => format!(" within 10 s of stopping ({e}): is the broker reachable?"),
                (Ok(()), Some(e)) => format!(" (first error: {e})"),
                (Ok(()), None) => String::new(),
            };
            anyhow::bail!("{} of {} messages not delivered to {}{why}", failed + pending, delivered + failed + pending, args.brokers);
        }
        drop(producer);
        anyhow::Ok(())
    })
}

fn state_command(command: StateCommand) -> anyhow::Result<()> {
    let args = match &command {
        StateCommand::List(args) | StateCommand::Forget { args, .. } => args,
    };
    let config = Config::load(args.config.as_deref())?;
    for warning in lookalike_warnings() {
        eprintln!("rankpulse state: warning: {warning}");
    }
    anyhow::ensure!(
        config.state.backend == rankpulse::config::StateBackend::Kafka,
        "state.backend is not \"kafka\": only the Kafka backend keeps checkpoints in state.topic"
    );
    let store = rankpulse::state::KafkaStore::inspect(&config)?;
    match command {
        StateCommand::List(_) => {
            let instances = store.instances()?;
            println!(
                "state.topic {} (group {:?}): {} instance(s)",
                config.state.topic,
                config.kafka.group_id,
                instances.len()
            );
            for i in instances {
                let partitions = |f: &dyn Fn(&rankpulse::state::ShardSummary) -> bool| {
                    i.shards.iter().filter(|s| f(s)).map(|s| s.partition).collect::<Vec<_>>()
                };
                let written = i.written_ms.map_or_else(
                    || "no complete checkpoint".to_string(),
                    |ms| {
                        let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
                        format!("written {}", humantime::format_rfc3339_millis(at))
                    },
                );
                println!(
                    "{}: {written}, {} records; owns {:?}, latest owner of {:?}, holds {:?}{}",
                    i.instance,
                    i.records,
                    partitions(&|s| s.owned),
                    partitions(&|s| s.latest_owner),
                    // Held: checkpointed for partitions it no longer owns (open lists
                    // that wait for their partition). Not the negative pseudo-partition
                    // that keeps the counters of partitions handed over.
                    partitions(&|s| !s.owned && s.partition >= 0),
                    i.error.map(|e| format!("; cannot be restored: {e}")).unwrap_or_default()
                );
            }
        }
        StateCommand::Forget { instance, force, .. } => {
            let n = store.forget(&instance, force)?;
            println!("instance {instance:?}: {n} records tombstoned in state.topic {}", config.state.topic);
        }
    }
    Ok(())
}

fn run_command(args: RunArgs) -> anyhow::Result<()> {
    let mut config = Config::load(args.config.as_deref())?;
    if let Some(path) = args.web_config {
        config.http.web_config = Some(path);
    }
    if args.print_config {
        // The command offered for checking a configuration: say what it
        // does not read, too, and read the web config as the daemon would.
        for warning in lookalike_warnings() {
            eprintln!("rankpulse run: warning: {warning}");
        }
        if let Some(path) = &config.http.web_config {
            rankpulse::http::web_config::WebConfig::load(path).map_err(|e| anyhow::anyhow!("http.web_config: {e}"))?;
        }
        print!("{}", config.redacted_toml());
        return Ok(());
    }
    rankpulse::logging::init(&config.log);
    for warning in lookalike_warnings() {
        tracing::warn!("{warning}");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let shutdown = {
        let _in_runtime = runtime.enter();
        shutdown_signal()
    };
    let result = runtime.block_on(rankpulse::daemon::run(config, shutdown));
    // Do not wait for a consumer close that the daemon already gave up on.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    let summary = result?;
    tracing::info!(
        "stopped after {} messages, {} lists finalized, offsets committed: {:?}",
        summary.messages,
        summary.lists_finalized,
        summary.committed
    );
    // When the messages came (Unix ms), for whoever measures the run from
    // outside, as `rankpulse-bench` does.
    if let (Some(first), Some(last)) = (summary.first_message_at, summary.last_message_at) {
        let unix_ms = |at: std::time::Instant| {
            let ago = at.elapsed();
            std::time::SystemTime::now()
                .checked_sub(ago)
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_millis())
        };
        tracing::info!("first message at {} ms, last at {} ms (Unix time)", unix_ms(first), unix_ms(last));
    }
    Ok(())
}

/// Whether SIGHUP is ignored by the process as started (`nohup`).
#[cfg(unix)]
fn sighup_ignored() -> bool {
    // SAFETY: a null new action only reads the current one into `old`,
    // a plain struct owned here.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(libc::SIGHUP, std::ptr::null(), &mut old) == 0 && old.sa_sigaction == libc::SIG_IGN
    }
}

/// What to say about environment variables that look like configuration
/// overrides but are not read (see `config::lookalike_overrides`).
fn lookalike_warnings() -> Vec<String> {
    rankpulse::config::lookalike_overrides(rankpulse::config::process_env().unwrap_or_default())
        .into_iter()
        .map(|var| {
            format!(
                "environment variable {var} is not read: overrides are named {}SECTION__KEY, upper case, two underscores between parts (for example {}SESSION__GAP)",
                rankpulse::config::ENV_PREFIX,
                rankpulse::config::ENV_PREFIX
            )
        })
        .collect()
}

/// Resolves on SIGINT, SIGTERM or SIGHUP: the daemon's one cancellation
/// path. SIGHUP too, because its default action ends the process at once
/// (no checkpoint, no commit) when a terminal closes or a supervisor sends
/// it; rankpulse has no configuration to reload. Unless it was started
/// with SIGHUP ignored (`nohup`): then it stays ignored.
///
/// Called within a runtime, the handlers are installed at once, not when
/// the future is first polled: the daemon serves `/healthz` before it
/// polls its shutdown, and a signal in between took the default action
/// (death, exit status 130 by signal) instead of the ordered shutdown.
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    let installed = tokio::runtime::Handle::try_current().is_ok().then(Handlers::install);
    async move {
        installed.unwrap_or_else(Handlers::install).first().await;
        tracing::info!("shutting down: stop fetching, finalize, commit");
    }
}

/// The signals [`shutdown_signal`] listens to (`None`: not listened to).
struct Handlers {
    #[cfg(unix)]
    signals: [Option<tokio::signal::unix::Signal>; 3],
}

impl Handlers {
    fn install() -> Handlers {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            // Started under `nohup` (SIGHUP ignored), a closed terminal must
            // not stop it: listening would replace the ignore.
            let hangup = (!sighup_ignored()).then(SignalKind::hangup);
            let listen = |kind: Option<SignalKind>| kind.and_then(|k| signal(k).ok());
            Handlers {
                signals: [listen(Some(SignalKind::interrupt())), listen(Some(SignalKind::terminate())), listen(hangup)],
            }
        }
        #[cfg(not(unix))]
        Handlers {}
    }

    async fn first(self) {
        #[cfg(unix)]
        {
            let [a, b, c] = self.signals;
            let recv = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                _ = recv(a) => {}
                _ = recv(b) => {}
                _ = recv(c) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Standard input copied to a temporary file, opened twice and then
/// unlinked: two readers of it, as a UBI file of both indices has, with
/// bounded memory.
fn spill_stdin() -> std::io::Result<(std::fs::File, std::fs::File)> {
    let path = std::env::temp_dir().join(format!("rankpulse-replay-{}.ndjson", std::process::id()));
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(&path)?;
    let opened = std::io::copy(&mut std::io::stdin().lock(), &mut file)
        .and_then(|_| Ok((std::fs::File::open(&path)?, std::fs::File::open(&path)?)));
    let removed = std::fs::remove_file(&path);
    let both = opened?;
    removed?;
    Ok(both)
}

fn replay_command(args: ReplayArgs) -> anyhow::Result<()> {
    use anyhow::Context;
    use rankpulse::replay::{ReplayError, Source, replay_sources};
    use std::io::{BufRead, Write};
    let config = Config::load(args.config.as_deref())?;
    for warning in lookalike_warnings() {
        eprintln!("rankpulse replay: warning: {warning}");
    }
    config.require_mapped(args.format)?;
    let is_stdin = |f: &PathBuf| f.as_os_str() == "-";
    let name = |f: &PathBuf| if is_stdin(f) { "standard input".to_string() } else { f.display().to_string() };
    // Two locks of standard input in one thread would wait on each other.
    anyhow::ensure!(
        args.files.iter().filter(|f| is_stdin(f)).count() <= 1,
        "`-` (standard input) is given more than once"
    );
    let reader = |f: std::fs::File| -> Box<dyn BufRead> { Box::new(std::io::BufReader::with_capacity(1 << 16, f)) };
    let mut inputs: Vec<Source<Box<dyn BufRead>>> = Vec::with_capacity(args.files.len());
    for file in &args.files {
        // A UBI file may hold both indices, queries first: it is read by
        // two readers, one per index (standard input is kept in a
        // temporary file for that, unlinked at once).
        let both = args.format == rankpulse_core::event::Format::Ubi;
        let open = || std::fs::File::open(file).with_context(|| format!("cannot open {}", file.display()));
        match (is_stdin(file), both) {
            (true, false) => inputs.push(Source::Stream(Box::new(std::io::stdin().lock()))),
            (true, true) => {
                let (queries, events) = spill_stdin().context("cannot keep standard input in a temporary file")?;
                inputs.push(Source::Indices { queries: reader(queries), events: reader(events) });
            }
            (false, false) => inputs.push(Source::Stream(reader(open()?))),
            (false, true) => inputs.push(Source::Indices { queries: reader(open()?), events: reader(open()?) }),
        }
    }
    let replayed = match &args.history {
        None => replay_sources(&config, args.format, inputs, None),
        Some(path) => {
            let file = std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
            let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
            let step_ms = i64::try_from(args.step.as_millis()).unwrap_or(i64::MAX);
            let mut history = rankpulse::replay::History::new(&mut out, step_ms);
            let replayed = replay_sources(&config, args.format, inputs, Some(&mut history));
            if let Err((rankpulse::replay::HISTORY_INPUT, ReplayError::Read(cause))) = &replayed {
                anyhow::bail!("cannot write {}: {cause}", path.display());
            }
            replayed
        }
    };
    let output = match replayed {
        Ok(output) => output,
        Err((at, e)) => {
            let name = args.files.get(at).map(name).unwrap_or_default();
            match e {
                ReplayError::Read(cause) => anyhow::bail!("cannot read {name}: {cause}"),
                e @ ReplayError::NoValidEvent { .. }
                    if args.format == rankpulse_core::event::Format::Rankpulse && config.mapped.is_some() =>
                {
                    anyhow::bail!("{name}: {e}; the configuration has a [mapped] section: is it --format mapped?")
                }
                e => anyhow::bail!("{name}: {e}"),
            }
        }
    };
    let at = |ms: i64| {
        let since_epoch = std::time::Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        humantime::format_rfc3339_millis(std::time::UNIX_EPOCH + since_epoch)
    };
    // Events behind in time are only worth a word when they cost something:
    // one within the gap of its list's other events joins it as if in time.
    for (file, input) in args.files.iter().zip(&output.inputs).filter(|_| output.lost > 0) {
        let Some((line, ms)) = input.behind_of else { continue };
        eprintln!(
            "rankpulse replay: warning: {}: {} event(s) more than session.gap ({}) older than an event before \
             them in the file, the first behind line {line} ({}); in the whole replay {} list(s) ended orphan or \
             had a judgment come late (dropped, or amended in the windows only: rankpulse_orphan_lists_total, \
             rankpulse_late_judgments_total). If line {line}'s clock is wrong, remove it; else sort the file by \
             timestamp",
            name(file),
            input.behind,
            humantime::format_duration(config.session.gap.duration),
            at(ms),
            output.lost,
        );
    }
    for (file, input) in args.files.iter().zip(&output.inputs) {
        if let Some((line, reason)) = input.first_reject {
            let (rejected, lines) = (input.rejected, input.lines);
            eprintln!(
                "rankpulse replay: warning: {}: {rejected} of {lines} line(s) rejected, the first (line {line}) as \
                 {reason}; rankpulse_events_rejected_total counts them by reason (docs/formats.md)",
                name(file),
            );
        }
    }
    if let Some((jump, jumps)) = output.jump {
        let after = std::time::Duration::from_secs(u64::try_from((jump.to_ms - jump.from_ms) / 1000).unwrap_or(0));
        let others = match jumps {
            1 => String::new(),
            n => format!(" ({n} events jumped so; this is the last)"),
        };
        let file = |input: usize| args.files.get(input).map(name).unwrap_or_default();
        eprintln!(
            "rankpulse replay: warning: the windows end at the newest event, and hold nothing before {} line {} \
             ({}){others}: it is {} after every event before it, the newest of which is {} line {} ({}); so the {} \
             event(s) before it are outside every window (the longest is {}). If the clock of one of these two \
             lines is wrong, remove that line",
            file(jump.input),
            jump.line,
            at(jump.to_ms),
            humantime::format_duration(after),
            file(jump.from.0),
            jump.from.1,
            at(jump.from_ms),
            jump.before,
            config
                .windows
                .spans
                .iter()
                .map(|s| s.duration)
                .max()
                .map(humantime::format_duration)
                .map(|d| d.to_string())
                .unwrap_or_default(),
        );
    }
    std::io::stdout().lock().write_all(output.exposition.as_bytes())?;
    Ok(())
}

fn eval_command(args: EvalArgs) -> ExitCode {
    if args.version {
        eprintln!("rankpulse eval {} (trec_eval 10.0 compatible)", env!("CARGO_PKG_VERSION"));
        return ExitCode::SUCCESS;
    }
    let (Some(qrels), Some(run)) = (args.qrels, args.run) else {
        unreachable!("clap requires both files unless -v");
    };
    let opts = EvalOptions {
        complete: args.complete,
        per_query: args.per_query,
        no_summary: args.no_summary,
        measures: args.measures,
        json: args.json,
        relevance_level: args.relevance_level,
        // A negative -M leaves nothing to evaluate (trec_eval: garbage).
        max_docs: args.max_docs.map_or(usize::MAX, |m| usize::try_from(m.max(0)).unwrap_or(usize::MAX)),
        judged_only: args.judged_only,
        num_docs_in_coll: args.num_docs_in_coll,
        rel_format: args.rel_format,
        zscores: args.zscores,
        only_topic: args.debug.and_then(|d| d.split_once('.').map(|(_, q)| q.to_string())),
        max_grade: args.max_grade,
        gauc_weight: args.gauc_weight,
        no_relevant: args.no_relevant,
        ideal: args.ideal,
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    match eval::run_files(&opts, &qrels, &run, &mut out) {
        Ok(summary) => {
            for note in &summary.notes {
                eprintln!("rankpulse eval: {note}");
            }
            // Either count can be the larger one: at -l 0 a topic judged
            // all 0 reaches the level but has no positive grade.
            if summary.no_relevant > 0 || summary.no_positive_grade > 0 {
                eprintln!(
                    "rankpulse eval: of {} topics, {} have no judged document at or above -l {}, and {} none of a positive grade \
                     (--no-relevant {}: {})",
                    summary.topics,
                    summary.no_relevant,
                    opts.relevance_level,
                    summary.no_positive_grade,
                    opts.no_relevant,
                    match opts.no_relevant {
                        NoRelevant::Zero => "counted as 0",
                        NoRelevant::Skip => "the former left out of the means, of nDCG's and ERR's the latter",
                    }
                );
            }
            if summary.gauc_single_class > 0 {
                eprintln!(
                    "rankpulse eval: {} of {} topics have no AUC (only relevant or only non-relevant results) and are left out of gauc",
                    summary.gauc_single_class, summary.topics
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("rankpulse eval: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
