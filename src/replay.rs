//! `rankpulse replay`: the stream pipeline over a file of events (one JSON
//! event per line), without Kafka. Deterministic: "now" for the windows is
//! the newest event time in the file, lists close on event time only, and
//! the output is the exposition `/metrics` would show at that moment.
//!
//! `rankpulse replay` ([`replay_events`]) refuses an input in which no line
//! is a valid event: an exposition of zeros would hide a wrong file (a
//! binary file, another format, an empty pipe).

use crate::config::Config;
use crate::event::RejectReason;
use crate::pipeline::{Clock, Pipeline};
use crate::publish::{Snapshot, render};
use std::collections::BTreeMap;
use std::io::BufRead;
use thiserror::Error;

/// The `topic` label value of events read by a replay.
pub const REPLAY_TOPIC: &str = "replay";

/// Why `rankpulse replay` has nothing to show.
#[derive(Debug, Error)]
pub enum ReplayError {
    // No `source()`: the message already quotes the OS error, and a chain
    // printer would say it twice.
    #[error("{0}")]
    Read(std::io::Error),
    #[error(
        "no line is a valid event: {rejected} line(s) rejected, the first (line {first_line}) as {first_reason} \
         (expected one JSON event per line, see docs/event.schema.json)"
    )]
    NoValidEvent { rejected: u64, first_line: u64, first_reason: RejectReason },
    #[error("no event to replay: the input is empty or holds only blank lines")]
    Empty,
}

/// A replay's final pipeline, and what its input held.
pub struct Replayed {
    pub pipeline: Pipeline,
    /// Lines other than blank ones.
    pub lines: u64,
    /// Lines the pipeline took as events (duplicates included).
    pub accepted: u64,
    /// The first rejected line (1-based, blank lines counted) and why.
    pub first_reject: Option<(u64, RejectReason)>,
}

/// Runs the pipeline over `input` and returns the final pipeline.
pub fn replay_pipeline(config: &Config, input: impl BufRead) -> std::io::Result<Replayed> {
    let mut pipeline = Pipeline::new(config);
    let clock = Clock::replay();
    let mut line = Vec::new();
    let mut input = input;
    let (mut number, mut lines, mut accepted, mut first_reject) = (0, 0, 0, None);
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        number += 1;
        let message = trim_line(&line);
        if message.is_empty() {
            continue;
        }
        lines += 1;
        // Processing time is not used in a replay: it would make the result
        // depend on how fast the file is read. Lists past their gap in
        // event time are finalized by the ingest itself, as in the daemon.
        match pipeline.ingest(REPLAY_TOPIC, message, clock, None) {
            Ok(()) => accepted += 1,
            Err(reason) => {
                first_reject.get_or_insert((number, reason));
            }
        }
    }
    pipeline.finalize_all();
    Ok(Replayed { pipeline, lines, accepted, first_reject })
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// Runs a replay and renders the final exposition, whatever the input held.
pub fn replay(config: &Config, input: impl BufRead) -> std::io::Result<String> {
    Ok(exposition(config, &replay_pipeline(config, input)?.pipeline))
}

/// `rankpulse replay`: as [`replay`], but an input without a single valid
/// event is an error rather than an exposition of zeros.
pub fn replay_events(config: &Config, input: impl BufRead) -> Result<String, ReplayError> {
    let replayed = replay_pipeline(config, input).map_err(ReplayError::Read)?;
    match replayed.first_reject {
        _ if replayed.accepted > 0 => Ok(exposition(config, &replayed.pipeline)),
        Some((first_line, first_reason)) => {
            Err(ReplayError::NoValidEvent { rejected: replayed.lines, first_line, first_reason })
        }
        None => Err(ReplayError::Empty),
    }
}

/// The exposition `/metrics` would show once `pipeline` has read everything.
fn exposition(config: &Config, pipeline: &Pipeline) -> String {
    let now_ms = pipeline.assembler.watermark_ms().max(0);
    let partitions = BTreeMap::new();
    render(&Snapshot {
        config,
        now_ms,
        accumulators: &pipeline.accumulators,
        counters: &pipeline.counters,
        open_lists: pipeline.open_lists(),
        partitions: &partitions,
        health: None,
    })
}
