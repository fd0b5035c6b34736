//! `rankpulse-bench`: benchmarks of rankpulse measured as its users would
//! measure it (whole processes, a real broker, several traffic shapes),
//! kept out of the product. See docs/performance.md for the figures and
//! the commands that reproduce them.

mod bare;
mod process;
mod shapes;
mod traffic;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "rankpulse-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// `rankpulse run` against a bare consumer on three traffic shapes
    /// (S1 production mix, S2 judgment-heavy backlog, S3 live tail at 70%
    /// of S2's rate), through the broker at --brokers, alternating which
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
        /// Shapes to run, comma separated (S3 runs S2 first for its rate).
        #[arg(long, default_value = "s1,s2,s3", value_delimiter = ',')]
        shapes: Vec<String>,
        #[arg(long, default_value_t = 42)]
        seed: u64,
        /// The daemon's session.gap, seconds.
        #[arg(long, default_value_t = 30)]
        gap_seconds: u64,
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
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Bare { messages, delays } => bare::run(messages, delays),
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
        } => {
            let rankpulse = match rankpulse {
                Some(p) => p,
                None => std::env::current_exe()?.with_file_name("rankpulse"),
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
            };
            let reports = shapes::run(&opts)?;
            print!("{}", shapes::table(&reports));
            Ok(())
        }
    }
}
