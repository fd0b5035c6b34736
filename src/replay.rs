//! `rankpulse replay`: the stream pipeline over a file of events (one JSON
//! event per line), without Kafka. Deterministic: "now" for the windows is
//! the newest event time in the file, lists close on event time only, and
//! the output is the exposition `/metrics` would show at that moment.

use crate::config::Config;
use crate::pipeline::{Clock, Pipeline};
use crate::publish::{Snapshot, render};
use std::collections::BTreeMap;
use std::io::BufRead;

/// The `topic` label value of events read by a replay.
pub const REPLAY_TOPIC: &str = "replay";

/// Runs the pipeline over `input` and returns the final pipeline.
pub fn replay_pipeline(config: &Config, input: impl BufRead) -> std::io::Result<Pipeline> {
    let mut pipeline = Pipeline::new(&config.pipeline_settings());
    let clock = Clock::replay();
    let mut line = Vec::new();
    let mut input = input;
    loop {
        line.clear();
        if input.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        let message = trim_line(&line);
        if message.is_empty() {
            continue;
        }
        // Processing time is not used in a replay: it would make the result
        // depend on how fast the file is read. Lists past their gap in
        // event time are finalized by the ingest itself, as in the daemon.
        let _ = pipeline.ingest(REPLAY_TOPIC, message, clock, None);
    }
    pipeline.finalize_all();
    Ok(pipeline)
}

fn trim_line(line: &[u8]) -> &[u8] {
    let mut end = line.len();
    while end > 0 && matches!(line[end - 1], b'\n' | b'\r') {
        end -= 1;
    }
    &line[..end]
}

/// Runs a replay and renders the final exposition.
pub fn replay(config: &Config, input: impl BufRead) -> std::io::Result<String> {
    let pipeline = replay_pipeline(config, input)?;
    let now_ms = pipeline.assembler.watermark_ms().max(0);
    let partitions = BTreeMap::new();
    Ok(render(&Snapshot {
        config,
        now_ms,
        accumulators: &pipeline.accumulators,
        counters: &pipeline.counters,
        open_lists: pipeline.open_lists(),
        partitions: &partitions,
        health: None,
    }))
}
