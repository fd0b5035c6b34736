//! `rankpulse replay`: the stream pipeline over a file of events (one JSON
//! event per line), without Kafka. Deterministic: "now" for the windows is
//! the newest event time in the file, lists close on event time only, and
//! the output is the exposition `/metrics` would show at that moment.
//!
//! A line longer than `input.max_message_bytes` is rejected (`too_large`)
//! as it is read, without being held in memory whole.
//!
//! With `--history FILE --step D` ([`History`]) the exposition is also
//! written at every step D of event time, as OpenMetrics text with
//! timestamps ending `# EOF`: `promtool tsdb create-blocks-from openmetrics`
//! turns it into Prometheus blocks, so a day of logs can be backfilled and
//! looked at in Grafana, and the alert rules evaluated over it.
//!
//! `rankpulse replay` ([`replay_events`]) refuses an input whose every line
//! is rejected, each of several on its own, and inputs that hold no event
//! at all: an exposition of zeros (or of half the data) would hide a wrong
//! file (a binary file, another format, an empty pipe).

use crate::config::Config;
use crate::publish::{Snapshot, render};
use rankpulse_core::event::ubi::{BulkTarget, bulk_action, document_kind};
use rankpulse_core::event::{Event, Format, IgnoreReason, RejectReason};
use rankpulse_core::pipeline::{Clock, Pipeline};
use std::collections::BTreeMap;
use std::io::{BufRead, Write};
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
         (expected one JSON event per line of the format given, see docs/formats.md)"
    )]
    NoValidEvent { rejected: u64, first_line: u64, first_reason: RejectReason },
    #[error("no event to replay: the input is empty or holds only blank lines (or `_bulk` action lines)")]
    Empty,
}

/// A replay's final pipeline, and what its inputs held.
pub struct Replayed {
    pub pipeline: Pipeline,
    /// Each input's count, in the order given.
    pub inputs: Vec<InputCount>,
    /// See [`ReplayOutput::jump`].
    pub jump: Option<(WindowJump, u64)>,
}

/// What one input of a replay held.
#[derive(Debug, Clone, Copy)]
pub struct InputCount {
    /// Lines other than blank ones.
    pub lines: u64,
    /// Lines the pipeline took as events (duplicates included).
    pub accepted: u64,
    /// Lines rejected (not `_bulk` action lines, which are skipped).
    pub rejected: u64,
    /// The first rejected line (1-based, blank lines counted) and why.
    pub first_reject: Option<(u64, RejectReason)>,
    /// Events more than `session.gap` older than an event before them in
    /// this input: their lists were likely final already (a file in the
    /// order of an index's shards, not of time).
    pub behind: u64,
    /// The event the first of them was behind (its line and time): the
    /// whole file's order, or that one event's clock, is wrong.
    pub behind_of: Option<(u64, i64)>,
    /// The newest event time read so far, and its line.
    newest_ms: i64,
    newest_line: u64,
}

/// What `rankpulse replay` shows, and what it should tell on the side.
pub struct ReplayOutput {
    pub exposition: String,
    /// Lists that ended orphan, and late judgments: what events behind
    /// their time cost, if anything (an amended list is right in the
    /// windows, but the since-start counters keep its first values).
    pub lost: u64,
    /// Per input: its lines, rejected ones and the first of them. An
    /// input with valid events and rejected ones still replays, but the
    /// rejects can be every judgment (times in seconds, say): silent
    /// zeros unless said.
    pub inputs: Vec<InputCount>,
    /// The last event that left every event before it outside the
    /// windows, and how many did so.
    pub jump: Option<(WindowJump, u64)>,
}

/// An event stamped more than the longest window after every event before
/// it. The windows end at the newest event, so from there on they hold
/// nothing older: one event of a broken clock would empty every window of
/// the replay, with no other sign than gauges at zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowJump {
    /// The input it is in (index in the order given) and its line.
    pub input: usize,
    pub line: u64,
    /// The newest event time before it, and its own.
    pub from_ms: i64,
    pub to_ms: i64,
    /// Where the newest event before it is (input, line): the one of the
    /// two with a broken clock can be either.
    pub from: (usize, u64),
    /// Events accepted before it, of every input.
    pub before: u64,
}

/// One input of a replay: a stream read in its own order, or a UBI file
/// holding both indices (an OpenSearch `_bulk` export of `ubi_queries`
/// then `ubi_events`, or their documents without action lines), read
/// through two readers of the same bytes: one takes the queries, the
/// other the events, and the two are merged by event time as two files
/// are. Read as one stream, such a file's queries would all come days
/// before their clicks and impressions, and close as lists of their own.
pub enum Source<R> {
    Stream(R),
    Indices { queries: R, events: R },
}

/// Runs the pipeline over `input` (rankpulse's own format) and returns the final pipeline.
pub fn replay_pipeline(config: &Config, input: impl BufRead) -> std::io::Result<Replayed> {
    replay_inputs(config, Format::Rankpulse, [input]).map_err(|(_, e)| e)
}

/// Runs one pipeline over `inputs`, each line a message of `format`. In
/// the UBI formats, OpenSearch `_bulk` action lines
/// (`{"index":{"_index":"ubi_queries",…}}`) are skipped and counted
/// (`rankpulse_events_ignored_total{reason="bulk_action_line"}`); with
/// `ubi`, the `_index` of an action line (holding `queries` or `events`)
/// says what the next line is, and a line after none is told by its
/// fields (an event has an `action_name`).
///
/// Several inputs are merged by event time, as the daemon aligns its
/// topics: the next event applied is always the oldest of the inputs'
/// next events. A queries file followed by an events file (two exported
/// indices) read one after the other would close every list before its
/// clicks came. Each input is read in its own order, as a Kafka partition
/// is: disorder within `session.gap` is absorbed, more is late.
///
/// A read error comes with the index of the input that failed.
pub fn replay_inputs<R: BufRead>(
    config: &Config,
    format: Format,
    inputs: impl IntoIterator<Item = R>,
) -> Result<Replayed, (usize, std::io::Error)> {
    replay_observed(config, format, inputs.into_iter().map(Source::Stream), None)
}

/// [`replay_inputs`], writing `history` as event time passes.
fn replay_observed<R: BufRead>(
    config: &Config,
    format: Format,
    sources: impl IntoIterator<Item = Source<R>>,
    mut history: Option<&mut History<'_>>,
) -> Result<Replayed, (usize, std::io::Error)> {
    // A history write error ends the replay as a read error would, with
    // the index HISTORY_INPUT.
    let mut step = |pipeline: &mut Pipeline, decoded: &Result<Event<'_>, RejectReason>, clock: Clock| {
        let Some(h) = history.as_deref_mut() else { return Ok(()) };
        match decoded {
            Ok(event)
                if !matches!(event, Event::Ignored(_))
                    && pipeline.time_verdict(event.timestamp_ms(), clock).is_ok() =>
            {
                h.before(config, pipeline, event.timestamp_ms()).map_err(|e| (HISTORY_INPUT, e))
            }
            _ => Ok(()),
        }
    };
    let settings = config.pipeline_settings();
    let mut pipeline = Pipeline::new(&settings);
    let mut run = Run {
        clock: Clock::replay(),
        gap_ms: config.session.gap.ms(),
        longest_window_ms: settings.longest_window_ms,
        inputs: Vec::new(),
        newest_ms: i64::MIN,
        newest_at: (0, 0),
        bucket_ms: config.windows.bucket.ms().max(1),
        pruned_bucket: i64::MIN,
        events: 0,
        jumps: 0,
        jump: None,
    };
    // One more byte than a message may have: the `\r` of a CRLF line.
    let limit = config.input.max_message_bytes.saturating_add(1);
    let input = |reader, index, stream| Input {
        reader,
        index,
        stream,
        number: 0,
        pending: None,
        update_body: false,
        line: Vec::new(),
        line_format: format,
        head: None,
    };
    let mut files = 0;
    let mut inputs: Vec<Input<R>> = Vec::new();
    for (index, source) in sources.into_iter().enumerate() {
        files += 1;
        match source {
            Source::Stream(reader) => inputs.push(input(reader, index, None)),
            Source::Indices { queries, events } => {
                inputs.push(input(queries, index, Some(BulkTarget::Queries)));
                inputs.push(input(events, index, Some(BulkTarget::Events)));
            }
        }
    }
    let fresh = InputCount {
        lines: 0,
        accepted: 0,
        rejected: 0,
        first_reject: None,
        behind: 0,
        behind_of: None,
        newest_ms: i64::MIN,
        newest_line: 0,
    };
    run.inputs = vec![fresh; files];
    if let [only] = inputs.as_mut_slice() {
        // One input: its order is the order; each line decoded once.
        let at = only.index;
        while let Some(number) = only.advance(format, limit, &mut pipeline, &mut run).map_err(|e| (at, e))? {
            let decoded = pipeline.prepare_as(only.line_format, trim_line(&only.line));
            step(&mut pipeline, &decoded, run.clock)?;
            run.ingest(&mut pipeline, &decoded, only.index, number);
        }
    } else {
        // Each input's next event, decoded for its time (and decoded again
        // when applied: an event borrows its line).
        for input in &mut inputs {
            input.fill(format, limit, &mut pipeline, &mut run).map_err(|e| (input.index, e))?;
        }
        // At one time, a file's query before its events: it opens the list.
        while let Some(input) = inputs
            .iter_mut()
            .filter(|i| i.head.is_some())
            .min_by_key(|i| (i.head, i.index, i.stream == Some(BulkTarget::Events)))
        {
            let decoded = pipeline.prepare_as(input.line_format, trim_line(&input.line));
            let number = input.number;
            step(&mut pipeline, &decoded, run.clock)?;
            run.ingest(&mut pipeline, &decoded, input.index, number);
            input.fill(format, limit, &mut pipeline, &mut run).map_err(|e| (input.index, e))?;
        }
    }
    pipeline.finalize_all();
    if let Some(h) = history {
        h.finish(config, &pipeline).map_err(|e| (HISTORY_INPUT, e))?;
    }
    Ok(Replayed { pipeline, inputs: run.inputs, jump: run.jump.map(|j| (j, run.jumps)) })
}

/// The input index a failure to write the history comes with.
pub const HISTORY_INPUT: usize = usize::MAX;

/// `rankpulse replay --history FILE --step D`: the exposition at every
/// step of event time, as OpenMetrics text with timestamps.
///
/// The exposition at a step boundary T shows every event stamped up to T
/// (it is written before the first event past T is applied), with windows
/// ending at T; the last one, after the input ends and every list is
/// final, at the first boundary at or after the newest event. Lists close
/// on event time as in any replay: one whose gap ends between the newest
/// event before T and T is final at the next event. Steps without events
/// are written like any other (the windows move on); a gap of more than
/// [`History::MAX_EMPTY_STEPS`] steps (a broken clock, a day without
/// traffic) is skipped to its end, so that no input can make the output
/// grow without bound. `# HELP` lines are left out: promtool takes none
/// from a backfill.
pub struct History<'a> {
    out: &'a mut dyn Write,
    step_ms: i64,
    /// The next boundary to write (None: before the first event).
    next_ms: Option<i64>,
    /// Steps written.
    pub steps: u64,
}

impl<'a> History<'a> {
    /// Empty steps written in a row at most.
    pub const MAX_EMPTY_STEPS: i64 = 10_000;

    pub fn new(out: &'a mut dyn Write, step_ms: i64) -> History<'a> {
        History { out, step_ms: step_ms.max(1), next_ms: None, steps: 0 }
    }

    /// Before an event stamped `ts` is applied: writes every boundary it passes.
    fn before(&mut self, config: &Config, pipeline: &Pipeline, ts: i64) -> std::io::Result<()> {
        let step = self.step_ms;
        let next = *self.next_ms.get_or_insert_with(|| ts.div_euclid(step).saturating_add(1).saturating_mul(step));
        if ts <= next {
            return Ok(());
        }
        // Every boundary below ts, but not more than MAX_EMPTY_STEPS of them.
        let last = (ts - 1).div_euclid(step).saturating_mul(step);
        let mut at = next.max(last.saturating_sub(Self::MAX_EMPTY_STEPS.saturating_mul(step)));
        // Counted, not compared: near the end of i64 a saturating step
        // would never pass `last`.
        let steps = last.saturating_sub(at).div_euclid(step).saturating_add(1);
        for _ in 0..steps.clamp(0, Self::MAX_EMPTY_STEPS + 1) {
            self.write(config, pipeline, at)?;
            at = at.saturating_add(step);
        }
        self.next_ms = Some(at);
        Ok(())
    }

    /// After the input: the final state, and the end marker.
    fn finish(&mut self, config: &Config, pipeline: &Pipeline) -> std::io::Result<()> {
        let newest = pipeline.assembler().watermark_ms();
        if let Some(next) = self.next_ms {
            let step = self.step_ms;
            let at = next.max(
                newest.div_euclid(step).saturating_add(i64::from(newest.rem_euclid(step) != 0)).saturating_mul(step),
            );
            self.write(config, pipeline, at)?;
        }
        self.out.write_all(b"# EOF\n")?;
        self.out.flush()
    }

    fn write(&mut self, config: &Config, pipeline: &Pipeline, at_ms: i64) -> std::io::Result<()> {
        let text = exposition_at(config, pipeline, at_ms);
        let stamp = format!(" {}.{:03}", at_ms.div_euclid(1000), at_ms.rem_euclid(1000));
        for line in text.lines() {
            if line.starts_with("# HELP") || line.is_empty() {
                continue;
            }
            self.out.write_all(line.as_bytes())?;
            if !line.starts_with('#') {
                self.out.write_all(stamp.as_bytes())?;
            }
            self.out.write_all(b"\n")?;
        }
        self.steps += 1;
        Ok(())
    }
}

/// `rankpulse replay`: the sources given, writing `history` if asked;
/// an error comes with the index of the source it is about.
pub fn replay_sources<R: BufRead>(
    config: &Config,
    format: Format,
    sources: impl IntoIterator<Item = Source<R>>,
    history: Option<&mut History<'_>>,
) -> Result<ReplayOutput, (usize, ReplayError)> {
    let replayed = replay_observed(config, format, sources, history).map_err(|(at, e)| (at, ReplayError::Read(e)))?;
    output(config, replayed)
}

/// What a replay has counted so far.
struct Run {
    /// Taken once: future times are checked against the wall clock when
    /// the replay started (docs/operations.md).
    clock: Clock,
    /// `session.gap`: disorder beyond it makes events late.
    gap_ms: i64,
    /// Per input: a file of another format beside good ones must not pass
    /// unseen in the good ones' counts.
    inputs: Vec<InputCount>,
    /// The longest of `windows.spans`: a jump past it empties the windows.
    longest_window_ms: i64,
    /// The newest event time of every input so far, and where it is
    /// (input, line).
    newest_ms: i64,
    newest_at: (usize, u64),
    /// `windows.bucket`, and the bucket of the newest event time when old
    /// buckets were last pruned.
    bucket_ms: i64,
    pruned_bucket: i64,
    /// Events accepted so far (not ignored ones), every input.
    events: u64,
    /// Events that jumped past the windows, and the last of them.
    jumps: u64,
    jump: Option<WindowJump>,
}

impl Run {
    /// Applies one decoded line (input `index`, line `number`).
    fn ingest(
        &mut self,
        pipeline: &mut Pipeline,
        decoded: &Result<Event<'_>, RejectReason>,
        index: usize,
        number: u64,
    ) {
        // Processing time is not used in a replay: it would make the result
        // depend on how fast the file is read. Lists past their gap in
        // event time are finalized by the ingest itself, as in the daemon.
        let result = pipeline.ingest_decoded(REPLAY_TOPIC, decoded, self.clock, None);
        let Some(count) = self.inputs.get_mut(index) else { return };
        if let (Ok(()), Ok(event)) = (result, decoded)
            && !matches!(event, Event::Ignored(_))
            && !pipeline.last_discarded()
        {
            let ts = event.timestamp_ms();
            if ts < count.newest_ms.saturating_sub(self.gap_ms) {
                count.behind += 1;
                count.behind_of.get_or_insert((count.newest_line, count.newest_ms));
            }
            if ts > count.newest_ms {
                (count.newest_ms, count.newest_line) = (ts, number);
            }
            if self.newest_ms > i64::MIN && ts > self.newest_ms.saturating_add(self.longest_window_ms) {
                self.jumps += 1;
                let before = self.events;
                self.jump = Some(WindowJump {
                    input: index,
                    line: number,
                    from_ms: self.newest_ms,
                    to_ms: ts,
                    from: self.newest_at,
                    before,
                });
            }
            if ts > self.newest_ms {
                (self.newest_ms, self.newest_at) = (ts, (index, number));
                // As the daemon's ticks do, on event time: once per bucket.
                let bucket = ts.div_euclid(self.bucket_ms);
                if bucket != self.pruned_bucket {
                    self.pruned_bucket = bucket;
                    pipeline.prune_to_newest_event();
                }
            }
            self.events += 1;
        }
        match result {
            Ok(()) => count.accepted += 1,
            Err(reason) => {
                count.rejected += 1;
                count.first_reject.get_or_insert((number, reason));
            }
        }
    }

    /// Counts a line of input `index` that is not blank.
    fn line(&mut self, index: usize) {
        if let Some(count) = self.inputs.get_mut(index) {
            count.lines += 1;
        }
    }
}

/// One input of a replay, read a line at a time.
struct Input<R> {
    reader: R,
    /// Position among the inputs given: reports name it, and it breaks ties.
    index: usize,
    /// Of a file holding both UBI indices ([`Source::Indices`]), the
    /// documents this reader takes (`Queries` or `Events`); lines of no
    /// index (action lines, an update's body, a line too long) are counted
    /// by the queries' reader alone. `None`: every line.
    stream: Option<BulkTarget>,
    /// Lines read so far, blank ones included (the last one's number).
    number: u64,
    /// What the last `_bulk` action line said the next line is.
    pending: Option<Format>,
    /// The last line was a `_bulk` `update`: the next is its partial
    /// document, not an event.
    update_body: bool,
    /// The message last read.
    line: Vec<u8>,
    /// The format `line` is read in: the replay's, or what an action line chose.
    line_format: Format,
    /// The event time of `line` when it is an event waiting to be applied
    /// (merging only); `None` once the input is exhausted.
    head: Option<i64>,
}

impl<R: BufRead> Input<R> {
    /// Reads up to the next line that is a message: blank lines are
    /// skipped, `_bulk` action lines counted and skipped, a line too long
    /// rejected at once. Returns its line number, `None` at the end.
    fn advance(
        &mut self,
        format: Format,
        limit: usize,
        pipeline: &mut Pipeline,
        run: &mut Run,
    ) -> std::io::Result<Option<u64>> {
        let ubi = format.is_ubi();
        loop {
            // The first line may carry a byte order mark, which is not part
            // of its message and so not of the limit.
            let room = if self.number == 0 { limit.saturating_add(BOM.len()) } else { limit };
            let mut too_long = match read_line(&mut self.reader, &mut self.line, room)? {
                Line::End => return Ok(None),
                Line::Read => false,
                Line::TooLong => true,
            };
            self.number += 1;
            // A byte order mark is the file's encoding, not its first
            // event (editors on Windows write one).
            if self.number == 1 && self.line.starts_with(BOM) {
                self.line.drain(..BOM.len());
            }
            too_long |= self.line.len() > limit;
            // Whether this reader counts the lines that are no index's.
            let counts = self.stream != Some(BulkTarget::Events);
            if too_long {
                self.pending = None;
                let update_body = std::mem::take(&mut self.update_body);
                if !counts {
                    continue;
                }
                run.line(self.index);
                if update_body {
                    // An update's body (a large script) is no event either.
                    pipeline.count_ignored(IgnoreReason::BulkUpdate);
                } else {
                    run.ingest(pipeline, &Err(RejectReason::TooLarge), self.index, self.number);
                }
                continue;
            }
            let message = trim_line(&self.line);
            // Blank: nothing but spaces, tabs or the `\r` of a CRLF.
            if message.trim_ascii().is_empty() {
                continue;
            }
            if ubi && std::mem::take(&mut self.update_body) {
                if counts {
                    run.line(self.index);
                    pipeline.count_ignored(IgnoreReason::BulkUpdate);
                }
                continue;
            }
            if ubi && let Some(target) = bulk_action(message) {
                if counts {
                    run.line(self.index);
                    pipeline.count_ignored(IgnoreReason::BulkActionLine);
                }
                self.pending = target.format().filter(|_| format == Format::Ubi);
                self.update_body = target == BulkTarget::Update;
                continue;
            }
            self.line_format = self.pending.take().unwrap_or(format);
            if let Some(stream) = self.stream {
                let kind = match self.line_format {
                    Format::UbiQueries => BulkTarget::Queries,
                    Format::UbiEvents => BulkTarget::Events,
                    _ => document_kind(message),
                };
                if kind != stream {
                    continue;
                }
            }
            run.line(self.index);
            return Ok(Some(self.number));
        }
    }

    /// Reads up to the next event with a time: what cannot be merged (a
    /// rejected line, an ignored event, an event whose time the guards
    /// refuse) is applied as it is read. A broken clock's event of the year
    /// 2100 must not hold the rest of its file back until every other file
    /// is read.
    fn fill(&mut self, format: Format, limit: usize, pipeline: &mut Pipeline, run: &mut Run) -> std::io::Result<()> {
        self.head = None;
        while let Some(number) = self.advance(format, limit, pipeline, run)? {
            let decoded = pipeline.prepare_as(self.line_format, trim_line(&self.line));
            match &decoded {
                Ok(event)
                    if !matches!(event, Event::Ignored(_))
                        && pipeline.time_verdict(event.timestamp_ms(), run.clock).is_ok() =>
                {
                    self.head = Some(event.timestamp_ms());
                    return Ok(());
                }
                _ => run.ingest(pipeline, &decoded, self.index, number),
            }
        }
        Ok(())
    }
}

/// UTF-8's byte order mark.
const BOM: &[u8] = b"\xef\xbb\xbf";

/// What [`read_line`] found.
#[derive(Debug, PartialEq, Eq)]
enum Line {
    /// The input has no more lines.
    End,
    /// A line, in the buffer without its `\n`.
    Read,
    /// A line longer than the limit: skipped, the buffer left empty.
    TooLong,
}

/// Reads the next line into `line`, without its `\n`. A line of more than
/// `limit` bytes is read past, up to its newline, in pieces of the input's
/// buffer: a file of one endless line must not be held in memory whole.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>, limit: usize) -> std::io::Result<Line> {
    line.clear();
    let (mut any, mut too_long) = (false, false);
    loop {
        let buffer = match input.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            break;
        }
        any = true;
        let newline = memchr::memchr(b'\n', buffer);
        let piece = &buffer[..newline.unwrap_or(buffer.len())];
        if !too_long && line.len() + piece.len() > limit {
            too_long = true;
            line.clear();
        }
        if !too_long {
            line.extend_from_slice(piece);
        }
        let used = newline.map_or(buffer.len(), |at| at + 1);
        input.consume(used);
        if newline.is_some() {
            break;
        }
    }
    Ok(match (any, too_long) {
        (false, _) => Line::End,
        (true, false) => Line::Read,
        (true, true) => Line::TooLong,
    })
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
    replay_events_as(config, Format::Rankpulse, [input]).map(|o| o.exposition).map_err(|(_, e)| e)
}

/// `rankpulse replay --format F FILE…`: as [`replay_events`] over several
/// inputs of one format; an error comes with the index of the input it
/// is about.
pub fn replay_events_as<R: BufRead>(
    config: &Config,
    format: Format,
    inputs: impl IntoIterator<Item = R>,
) -> Result<ReplayOutput, (usize, ReplayError)> {
    let replayed = replay_inputs(config, format, inputs).map_err(|(at, e)| (at, ReplayError::Read(e)))?;
    output(config, replayed)
}

/// What `rankpulse replay` prints of a finished replay, or why it prints nothing.
fn output(config: &Config, replayed: Replayed) -> Result<ReplayOutput, (usize, ReplayError)> {
    // Every input on its own: a gzipped or wrong file beside a good one
    // would otherwise leave its half of the data out, silently. An empty
    // one beside others is an hour without traffic, an empty index.
    for (at, count) in replayed.inputs.iter().enumerate() {
        if let (0, Some((first_line, first_reason))) = (count.accepted, count.first_reject) {
            return Err((at, ReplayError::NoValidEvent { rejected: count.rejected, first_line, first_reason }));
        }
    }
    if replayed.inputs.iter().all(|c| c.accepted == 0) {
        return Err((0, ReplayError::Empty));
    }
    let counters = replayed.pipeline.counters();
    let lost = counters.orphans + counters.late_dropped + counters.late_amended;
    Ok(ReplayOutput {
        exposition: exposition(config, &replayed.pipeline),
        lost,
        inputs: replayed.inputs,
        jump: replayed.jump,
    })
}

/// The exposition `/metrics` would show once `pipeline` has read everything.
fn exposition(config: &Config, pipeline: &Pipeline) -> String {
    exposition_at(config, pipeline, pipeline.assembler().watermark_ms().max(0))
}

/// The exposition with windows ending at `now_ms`.
fn exposition_at(config: &Config, pipeline: &Pipeline, now_ms: i64) -> String {
    let partitions = BTreeMap::new();
    render(&Snapshot {
        config,
        now_ms,
        accumulators: pipeline.accumulators(),
        counters: pipeline.counters(),
        open_lists: pipeline.open_lists(),
        partitions: &partitions,
        health: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufReader;

    /// Every line of `input` as `read_line` sees it through a buffer of
    /// `capacity` bytes, with a limit of 5.
    fn lines(input: &[u8], capacity: usize) -> Vec<(Line, String)> {
        let mut reader = BufReader::with_capacity(capacity, input);
        let mut line = Vec::new();
        let mut out = Vec::new();
        loop {
            let found = read_line(&mut reader, &mut line, 5).unwrap();
            if found == Line::End {
                return out;
            }
            out.push((found, String::from_utf8_lossy(&line).into_owned()));
        }
    }

    /// Lines at, below and above the limit, split over the reader's buffer
    /// in every way: a long line is skipped up to its newline, and the
    /// lines around it are read whole.
    #[test]
    fn lines_past_the_limit_are_skipped_to_their_newline() {
        let input = b"abcde\nabcdef\n\nxy\r\n0123456789abcdef\nlast";
        let want = vec![
            (Line::Read, "abcde".to_string()),
            (Line::TooLong, String::new()),
            (Line::Read, String::new()),
            (Line::Read, "xy\r".to_string()),
            (Line::TooLong, String::new()),
            (Line::Read, "last".to_string()),
        ];
        for capacity in [1, 2, 3, 5, 7, 64] {
            assert_eq!(lines(input, capacity), want, "buffer of {capacity}");
        }
        assert_eq!(lines(b"0123456789", 4), vec![(Line::TooLong, String::new())], "a long last line");
        assert_eq!(lines(b"", 4), vec![]);
    }

    /// Six hours of event time, some judgments late: a replay keeps only
    /// the buckets its windows reach (the longest, 1 h, is 360 of 10 s),
    /// and shows what the same pipeline shows with every bucket kept.
    #[test]
    fn a_long_replay_keeps_only_the_buckets_its_windows_reach() {
        let config = Config::default();
        let mut input = String::new();
        let mix = rankpulse_testkit::mix(0, 20_000, 5, 1_700_000_000_000, 1_100.0);
        for (i, m) in mix.iter().enumerate() {
            input.push_str(std::str::from_utf8(&m.payload).unwrap());
            input.push('\n');
            // A judgment with its own time, 44 s back: its list closed (gap
            // 30 s) about 14 s ago, so the judgment is late and amends it.
            if i % 101 == 0 && i >= 160 && mix[i - 160].judgment {
                let old = std::str::from_utf8(&mix[i - 160].payload).unwrap();
                input.push_str(&old.replacen(r#""event_id":""#, r#""event_id":"late-"#, 1));
                input.push('\n');
            }
        }
        let replayed = replay_pipeline(&config, input.as_bytes()).unwrap();
        let mut kept = Pipeline::new(&config.pipeline_settings());
        for line in input.lines() {
            let _ = kept.ingest(REPLAY_TOPIC, line.as_bytes(), Clock::replay(), None);
        }
        kept.finalize_all();
        let most = |p: &Pipeline| p.accumulators().series.values().map(|s| s.buckets.len()).max().unwrap();
        assert!(most(&kept) > 1_000, "{}", most(&kept));
        assert!(most(&replayed.pipeline) <= 362, "{}", most(&replayed.pipeline));
        assert!(kept.counters().late_amended > 10, "{:?}", kept.counters());
        assert_eq!(exposition(&config, &replayed.pipeline), exposition(&config, &kept));
    }

    /// Every label rankpulse itself puts on a series beside the dimension
    /// labels is reserved: a dimension label of the same name would
    /// duplicate it, and Prometheus refuses the whole scrape for one such
    /// line (`kind` of `lists_no_relevant_total` once was not). The input
    /// reaches every series that carries dimension labels: interleaved,
    /// randomized and production lists, clicks and a list with nothing
    /// relevant, every metric excluded somewhere.
    #[test]
    fn no_series_repeats_a_label_a_dimension_may_take() {
        let config: Config = toml::from_str("[dimensions]\nlabels = [\"ranker\"]\n[debias]\nmax_rank = 3\n").unwrap();
        config.validate().unwrap();
        let t = 1_763_800_000_000i64;
        let mut lines = Vec::new();
        for i in 0..40 {
            let ts = t + i * 1_000;
            let team = |d: usize| match i % 3 {
                0 => format!(r#","team":"{}""#, if d.is_multiple_of(2) { "A" } else { "B" }),
                _ => String::new(),
            };
            let results: Vec<String> =
                (0..3).map(|d| format!(r#"{{"doc_id":"d{d}","position":{}{}}}"#, d + 1, team(d))).collect();
            let randomized = if i % 3 == 1 { r#","randomized":true"# } else { "" };
            let ranker = if i % 2 == 0 { "control" } else { "candidate" };
            lines.push(format!(
                r#"{{"type":"impression","event_id":"i{i}","session_id":"s{i}","query_id":"q","timestamp":{ts},"results":[{}]{randomized},"dimensions":{{"ranker":"{ranker}"}}}}"#,
                results.join(",")
            ));
            // Every fifth list gets no judgment: nothing relevant.
            if i % 5 != 4 {
                lines.push(format!(
                    r#"{{"type":"judgment","event_id":"j{i}","session_id":"s{i}","query_id":"q","doc_id":"d{}","action":"click","timestamp":{}}}"#,
                    i % 3,
                    ts + 100
                ));
            }
        }
        let replayed = replay_pipeline(&config, lines.join("\n").as_bytes()).unwrap();
        let text = exposition(&config, &replayed.pipeline);
        // Every family and label as src/series.rs defines them (the
        // dimension label `ranker` included, and no label twice).
        if let Err(problems) = crate::series::check(&text, &["ranker"], Some("ranker")) {
            panic!("{problems:#?}");
        }
        let mut names_seen = std::collections::BTreeSet::new();
        for line in text.lines().filter(|l| !l.starts_with('#') && l.contains(r#"ranker=""#)) {
            let (_, labels, _) = crate::series::sample(line).unwrap();
            names_seen.extend(labels.into_iter().map(|(n, _)| n));
        }
        // The input did reach the series that carry labels of their own.
        for name in ["k", "window", "metric", "reason", "rank", "outcome", "kind"] {
            assert!(names_seen.contains(name), "no series with {name}: {names_seen:?}");
        }
    }

    /// A line too long to read is a `too_large` reject like a message over
    /// `input.max_message_bytes`, at the same length: a line of exactly
    /// the limit is read, with or without a CRLF's `\r`.
    #[test]
    fn a_line_too_long_is_rejected_as_too_large() {
        let mut config = Config::default();
        config.input.max_message_bytes = 256;
        let valid =
            r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":1700000000000}"#;
        // JSON allows trailing spaces: the same event, exactly as long as a message may be.
        let at_limit = format!("{valid:<256}");
        let input = format!("{}\n{at_limit}\r\n{at_limit} \n{at_limit}\n", "a".repeat(10_000));
        let replayed = replay_pipeline(&config, input.as_bytes()).unwrap();
        let [input] = replayed.inputs.as_slice() else { panic!("one input") };
        assert_eq!((input.lines, input.accepted), (4, 2));
        assert_eq!(input.first_reject, Some((1, RejectReason::TooLarge)));
        assert_eq!(replayed.pipeline.counters().rejected.get(&RejectReason::TooLarge), Some(&2));
        assert_eq!(replayed.pipeline.counters().rejected.len(), 1);
    }
}
