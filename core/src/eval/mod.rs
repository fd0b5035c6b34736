//! `rankpulse eval`: offline evaluation of a TREC run against qrels with the
//! same metric engine as the daemon, printing trec_eval's report format.
//!
//! Data flow: `trec` reads both files (in parallel) → topics are matched →
//! per topic the run is scored by `crate::metrics` → values are printed per
//! query (`-q`) and averaged into the `all` summary.
//!
//! trec_eval 10.0 semantics reproduced on purpose: ranking by score then
//! docno (descending), unjudged and negatively judged documents are
//! non-relevant, `-c` averages over every judged topic (missing topics score
//! 0), topics only in the run are ignored, per-query output is sorted by qid
//! as bytes, and `num_rel` under `-c` counts grades > 0 whatever `-l` says.
//! One deliberate difference: without `-c`, trec_eval 10.0 aborts (exit 4)
//! when a judged topic has no results; rankpulse evaluates the topics that
//! have both, as trec_eval 9 and its own help text describe.

pub mod measures;
pub mod prefs;
pub mod trec;

use crate::metrics::{
    self, Gain, GaucWeight, Grade, IdealScope, NO_CUTOFF, NoRelevant, Scratch, auc, dcg, err, precision, rr,
};
use measures::{Kind, Measure, MeasureError, Plan};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;
use trec::{Qrels, Run, TrecError};

/// Everything `rankpulse eval` can be told.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// `-c`: average over every topic in the qrels.
    pub complete: bool,
    /// `-q`: print per-topic values too.
    pub per_query: bool,
    /// `-n`: do not print the `all` summary.
    pub no_summary: bool,
    /// `-m` arguments, trec_eval syntax.
    pub measures: Vec<String>,
    /// `--json`: machine-readable report with full f64 precision.
    pub json: bool,
    /// `-l`: minimum grade that counts as relevant.
    pub relevance_level: Grade,
    /// ERR's top grade (`err_cut`); qrels grades above it are refused.
    pub max_grade: Grade,
    pub gauc_weight: GaucWeight,
    /// Topics with nothing relevant judged: count as 0 (trec_eval) or skip.
    pub no_relevant: NoRelevant,
    /// Ideal ranking for the nDCG measures (trec_eval: judged).
    pub ideal: IdealScope,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            complete: false,
            per_query: false,
            no_summary: false,
            measures: Vec::new(),
            json: false,
            relevance_level: 1,
            max_grade: 4,
            gauc_weight: GaucWeight::Impressions,
            no_relevant: NoRelevant::Zero,
            ideal: IdealScope::Judged,
        }
    }
}

#[derive(Debug, Error)]
pub enum EvalError {
    #[error(transparent)]
    Input(#[from] TrecError),
    #[error(transparent)]
    Measure(#[from] MeasureError),
    #[error("{path}:{line}: grade {grade} exceeds --max-grade {max_grade} (needed by err_cut)")]
    GradeAboveMax { path: PathBuf, line: u32, grade: Grade, max_grade: Grade },
    #[error("{0}: no result lines")]
    EmptyRun(PathBuf),
    #[error("{0}: no judgment lines")]
    EmptyQrels(PathBuf),
    #[error("no topic has both results in {run} and judgments in {qrels}")]
    NoTopics { qrels: PathBuf, run: PathBuf },
    #[error("--max-grade must be between 1 and 30, got {0}")]
    MaxGrade(Grade),
    #[error("cannot write the report: {0}")]
    Output(std::io::Error),
}

// By hand rather than `#[from]`: the message already names the I/O error,
// and a `source()` would make a chain printer say it twice.
impl From<std::io::Error> for EvalError {
    fn from(e: std::io::Error) -> Self {
        EvalError::Output(e)
    }
}

impl EvalError {
    /// Bad input or arguments exit with 2; failing to write with 1.
    pub fn exit_code(&self) -> i32 {
        match self {
            EvalError::Output(_) => 1,
            _ => 2,
        }
    }
}

/// What the run leaves for the caller to tell the user on stderr.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct EvalSummary {
    pub topics: usize,
    /// Topics with no relevant judged document (the `no_relevant` case).
    pub no_relevant: usize,
    /// Topics without an AUC (only positives or only negatives retrieved).
    pub gauc_single_class: usize,
    pub notes: Vec<String>,
}

/// Reads both files, evaluates and writes the report to `out`.
pub fn run_files(
    opts: &EvalOptions,
    qrels_path: &Path,
    run_path: &Path,
    out: &mut dyn Write,
) -> Result<EvalSummary, EvalError> {
    let plan = Plan::parse(&opts.measures)?;
    if !(1..=30).contains(&opts.max_grade) {
        return Err(EvalError::MaxGrade(opts.max_grade));
    }
    // Reading and parsing the two files are independent: one thread each.
    let (qrels_buf, run_buf) = std::thread::scope(|s| {
        let q = s.spawn(|| trec::read_input(qrels_path));
        let r = trec::read_input(run_path);
        (q.join().unwrap_or_else(|e| std::panic::resume_unwind(e)), r)
    });
    let (qrels_buf, run_buf) = (qrels_buf?, run_buf?);
    let (qrels, run) = std::thread::scope(|s| {
        let q = s.spawn(|| trec::parse_qrels(qrels_path, &qrels_buf));
        let r = trec::parse_run(run_path, &run_buf);
        (q.join().unwrap_or_else(|e| std::panic::resume_unwind(e)), r)
    });
    let (qrels, run) = (qrels?, run?);
    // Like trec_eval, an empty file is a mistake, not a run that found nothing.
    if qrels.items.is_empty() {
        return Err(EvalError::EmptyQrels(qrels_path.to_path_buf()));
    }
    if run.topics.items.is_empty() {
        return Err(EvalError::EmptyRun(run_path.to_path_buf()));
    }
    if let Some(e) = run.duplicates.iter().find_map(|d| {
        let name = run.topics.names[d.topic];
        let evaluated = qrels.names.contains(&name);
        evaluated.then(|| d.to_error(run_path, &run_buf, name))
    }) {
        return Err(e.into());
    }
    if plan.get(Kind::ErrCut).is_some()
        && let Some(j) = qrels.items.iter().find(|j| j.grade > opts.max_grade)
    {
        return Err(EvalError::GradeAboveMax {
            path: qrels_path.to_path_buf(),
            line: trec::line_of(&qrels_buf, j.doc),
            grade: j.grade,
            max_grade: opts.max_grade,
        });
    }
    let mut summary = evaluate(opts, &plan, &qrels, &run, out)?;
    if summary.topics == 0 {
        return Err(EvalError::NoTopics { qrels: qrels_path.to_path_buf(), run: run_path.to_path_buf() });
    }
    summary.notes.extend(plan.notes);
    Ok(summary)
}

/// Per-topic values of one measure, reused across topics.
#[derive(Clone)]
struct Slot<'p> {
    measure: &'p Measure,
    names: Vec<String>,
    values: Vec<f64>,
    /// Whether this topic's values enter the mean (false when skipped or undefined).
    counted: bool,
    /// Weight of this topic in the mean (GAUC weights; 1 otherwise).
    weight: f64,
}

/// Buffers for one topic's ranked grades and the engine's outputs.
#[derive(Default)]
struct TopicBuffers {
    shown: Vec<Grade>,
    scores: Vec<f64>,
    judged: Vec<Grade>,
    options: Vec<Option<f64>>,
    scratch: Scratch,
}

/// What one worker computed for a contiguous range of topics (in output order).
#[derive(Default)]
struct Chunk {
    /// Per topic, every slot's values, flattened in slot order.
    values: Vec<f64>,
    /// Per topic and slot: (counted, weight).
    counted: Vec<(bool, f64)>,
    /// Per-query report lines (`-q` without `--json`).
    text: String,
    /// Per-query JSON objects (`-q --json`).
    json: Vec<(String, Value)>,
    no_relevant: usize,
    gauc_single_class: usize,
}

/// Below this many topics a second thread costs more than it saves.
const TOPICS_PER_THREAD_MIN: usize = 2_000;

fn new_slots(plan: &Plan) -> Vec<Slot<'_>> {
    plan.measures
        .iter()
        .map(|m| {
            let names = m.value_names();
            let n = names.len();
            Slot { measure: m, names, values: vec![0.0; n], counted: true, weight: 1.0 }
        })
        .collect()
}

/// Scores a range of topics: `(qrels topic, run topic)` pairs.
fn score_chunk(opts: &EvalOptions, plan: &Plan, qrels: &Qrels, run: &Run, topics: &[(usize, Option<usize>)]) -> Chunk {
    let mut slots = new_slots(plan);
    let mut buffers = TopicBuffers::default();
    let mut chunk = Chunk::default();
    for &(t, r) in topics {
        let results = r.map_or(&[][..], |r| run.topics.topic(r));
        buffers.load(qrels.topic(t), results);
        let num_rel = metrics::count_relevant(&buffers.judged, opts.relevance_level);
        chunk.no_relevant += usize::from(num_rel == 0);
        for slot in &mut slots {
            score_topic(opts, slot, &mut buffers, num_rel);
            if slot.measure.kind == Kind::Gauc && !slot.counted {
                chunk.gauc_single_class += 1;
            }
            chunk.values.extend_from_slice(&slot.values);
            chunk.counted.push((slot.counted, slot.weight));
        }
        if opts.per_query {
            let qid = String::from_utf8_lossy(qrels.names[t]);
            if opts.json {
                chunk.json.push((qid.into_owned(), topic_json(&slots)));
            } else {
                write_topic(&mut chunk.text, &qid, &slots);
            }
        }
    }
    chunk
}

fn evaluate(
    opts: &EvalOptions,
    plan: &Plan,
    qrels: &Qrels,
    run: &Run,
    out: &mut dyn Write,
) -> Result<EvalSummary, EvalError> {
    // Topic order: qrels topics sorted by id bytes (C strcmp order); without
    // -c only those the run answered.
    let run_index: rustc_hash::FxHashMap<&[u8], usize> =
        run.topics.names.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let mut topics: Vec<(usize, Option<usize>)> = (0..qrels.names.len())
        .map(|t| (t, run_index.get(qrels.names[t]).copied()))
        .filter(|(_, r)| r.is_some() || opts.complete)
        .collect();
    topics.sort_unstable_by(|a, b| qrels.names[a.0].cmp(qrels.names[b.0]));

    // Score in parallel over contiguous ranges, then fold in topic order so
    // the sums are bit-identical to a sequential pass (and to trec_eval's).
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(topics.len() / TOPICS_PER_THREAD_MIN).max(1);
    let per_thread = topics.len().div_ceil(threads).max(1);
    let chunks: Vec<Chunk> = std::thread::scope(|s| {
        let handles: Vec<_> = topics
            .chunks(per_thread)
            .map(|range| s.spawn(move || score_chunk(opts, plan, qrels, run, range)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });

    let slots = new_slots(plan);
    let mut sums: Vec<Vec<f64>> = slots.iter().map(|s| vec![0.0; s.names.len()]).collect();
    let mut weights = vec![0.0; slots.len()];
    let mut summary = EvalSummary { topics: topics.len(), ..EvalSummary::default() };
    let mut per_query_json = Map::new();
    for chunk in chunks {
        summary.no_relevant += chunk.no_relevant;
        summary.gauc_single_class += chunk.gauc_single_class;
        out.write_all(chunk.text.as_bytes())?;
        per_query_json.extend(chunk.json);
        let mut values = chunk.values.as_slice();
        for row in chunk.counted.chunks(slots.len()) {
            for (s, &(counted, weight)) in row.iter().enumerate() {
                let (here, rest) = values.split_at(sums[s].len());
                values = rest;
                if counted {
                    for (sum, v) in sums[s].iter_mut().zip(here) {
                        *sum += weight * v;
                    }
                    weights[s] += weight;
                }
            }
        }
    }
    let mut text = String::new();

    let num_q = summary.topics;
    let run_id = String::from_utf8_lossy(run.run_id);
    // `num_rel` under -c: trec_eval recounts grades > 0 over all qrels topics.
    let complete_num_rel = qrels.items.iter().filter(|j| j.grade > 0).count() as f64;
    let finals: Vec<(String, bool, Option<f64>)> = slots
        .iter()
        .zip(sums.iter().zip(&weights))
        .flat_map(|(slot, (sums, &weight))| {
            let kind = slot.measure.kind;
            slot.names.iter().zip(sums).map(move |(name, &sum)| {
                let value = match kind {
                    Kind::Runid => None,
                    Kind::NumQ => Some(num_q as f64),
                    Kind::NumRel if opts.complete => Some(complete_num_rel),
                    Kind::NumRet | Kind::NumRel | Kind::NumRelRet => Some(sum),
                    _ if weight > 0.0 => Some(sum / weight),
                    _ => None,
                };
                (name.clone(), kind.is_count(), value)
            })
        })
        .collect();

    if opts.json {
        let mut summary_json = Map::new();
        for (name, is_count, value) in &finals {
            if name == "runid" {
                continue;
            }
            let v = match value {
                Some(v) if *is_count => json!(*v as i64),
                Some(v) => json!(v),
                None => Value::Null,
            };
            summary_json.insert(name.clone(), v);
        }
        let mut doc = Map::new();
        doc.insert("runid".into(), json!(run_id));
        doc.insert(
            "conventions".into(),
            json!({
                "relevance_level": opts.relevance_level,
                "max_grade": opts.max_grade,
                "gauc_weight": metrics::setting_name(opts.gauc_weight),
                "no_relevant": metrics::setting_name(opts.no_relevant),
                "ideal": metrics::setting_name(opts.ideal),
                "complete": opts.complete,
            }),
        );
        doc.insert(
            "excluded".into(),
            json!({"no_relevant": summary.no_relevant, "gauc_single_class": summary.gauc_single_class}),
        );
        if !opts.no_summary {
            doc.insert("summary".into(), Value::Object(summary_json));
        }
        if opts.per_query {
            doc.insert("per_query".into(), Value::Object(per_query_json));
        }
        serde_json::to_writer_pretty(&mut *out, &Value::Object(doc)).map_err(std::io::Error::from)?;
        out.write_all(b"\n")?;
    } else if !opts.no_summary {
        for (name, is_count, value) in &finals {
            if name == "runid" {
                text.push_str(&format!("{:<22}\tall\t{}\n", "runid", run_id));
            } else if let Some(v) = value {
                push_value(&mut text, name, "all", *v, *is_count);
            }
        }
        out.write_all(text.as_bytes())?;
    }
    out.flush()?;
    Ok(summary)
}

impl TopicBuffers {
    /// Turns one topic's qrels and ranked results into the engine's slices.
    fn load(&mut self, judged: &[trec::Judgment], results: &[trec::Retrieved]) {
        self.judged.clear();
        self.judged.extend(judged.iter().map(|j| j.grade));
        self.shown.clear();
        self.scores.clear();
        for r in results {
            // Unjudged documents get -1
            // (trec_eval's "not in pool"), which no threshold makes relevant.
            let grade = Qrels::find(judged, r.key, r.doc).unwrap_or(-1);
            self.shown.push(grade);
            self.scores.push(r.score);
        }
    }
}

/// Computes one measure for the loaded topic into `slot.values`.
fn score_topic(opts: &EvalOptions, slot: &mut Slot, b: &mut TopicBuffers, num_rel: u32) {
    let threshold = opts.relevance_level;
    let skip_no_relevant = opts.no_relevant == NoRelevant::Skip && num_rel == 0;
    let cutoffs: &[usize] = &slot.measure.cutoffs;
    slot.weight = 1.0;
    slot.counted = true;
    let values = &mut slot.values;
    match slot.measure.kind {
        Kind::Runid | Kind::NumQ => {}
        Kind::NumRet => values[0] = b.shown.len() as f64,
        Kind::NumRel => values[0] = f64::from(num_rel),
        Kind::NumRelRet => values[0] = b.shown.iter().filter(|&&g| metrics::is_relevant(g, threshold)).count() as f64,
        Kind::Map | Kind::MapCut => {
            let cut: &[usize] = if slot.measure.kind == Kind::Map { &[NO_CUTOFF] } else { cutoffs };
            b.options.resize(cut.len(), None);
            precision::average_precision_at(&b.shown, threshold, num_rel, cut, &mut b.options);
            from_options(values, &b.options);
            slot.counted = !skip_no_relevant;
        }
        Kind::RecipRank => {
            rr::reciprocal_rank_at(&b.shown, threshold, &[NO_CUTOFF], values);
            slot.counted = !skip_no_relevant;
        }
        Kind::P => {
            precision::precision_at(&b.shown, threshold, cutoffs, values);
            slot.counted = !skip_no_relevant;
        }
        Kind::Recall => {
            b.options.resize(cutoffs.len(), None);
            precision::recall_at(&b.shown, threshold, num_rel, cutoffs, &mut b.options);
            from_options(values, &b.options);
            slot.counted = !skip_no_relevant;
        }
        Kind::Ndcg | Kind::NdcgCut | Kind::NdcgExpCut => {
            let gain = if slot.measure.kind == Kind::NdcgExpCut { Gain::Exp2 } else { Gain::Linear };
            let cut: &[usize] = if slot.measure.kind == Kind::Ndcg { &[NO_CUTOFF] } else { cutoffs };
            b.options.resize(cut.len(), None);
            let ideal = b.scratch.ideal(opts.ideal, &b.shown, &b.judged);
            dcg::ndcg_at(&b.shown, ideal, gain, cut, &mut b.options);
            let undefined = b.options.first().is_some_and(|o| o.is_none());
            from_options(values, &b.options);
            slot.counted = !(opts.no_relevant == NoRelevant::Skip && undefined);
        }
        Kind::ErrCut => {
            err::err_at(&b.shown, opts.max_grade, cutoffs, values);
            let no_gain = !b.judged.iter().any(|&g| g > 0);
            slot.counted = !(opts.no_relevant == NoRelevant::Skip && no_gain);
        }
        Kind::Gauc => match auc::auc_by_score(&b.shown, &b.scores, threshold, &mut b.scratch.auc) {
            Some(a) => {
                values[0] = a.auc;
                slot.weight = f64::from(a.weight(opts.gauc_weight));
            }
            None => {
                values[0] = 0.0;
                slot.counted = false;
            }
        },
    }
}

/// Undefined values (nothing relevant judged) print as 0, like trec_eval;
/// whether they enter the mean is decided by `counted`.
fn from_options(values: &mut [f64], options: &[Option<f64>]) {
    for (v, o) in values.iter_mut().zip(options) {
        *v = o.unwrap_or(0.0);
    }
}

fn push_value(text: &mut String, name: &str, qid: &str, value: f64, is_count: bool) {
    use std::fmt::Write as _;
    // Writing to a String cannot fail.
    let _ = if is_count {
        writeln!(text, "{name:<22}\t{qid}\t{}", value as i64)
    } else {
        writeln!(text, "{name:<22}\t{qid}\t{value:6.4}")
    };
}

fn write_topic(text: &mut String, qid: &str, slots: &[Slot]) {
    for slot in slots {
        match slot.measure.kind {
            // trec_eval prints these only in the summary.
            Kind::Runid | Kind::NumQ => continue,
            // An undefined AUC has no per-topic line.
            Kind::Gauc if !slot.counted => continue,
            _ => {}
        }
        for (name, &v) in slot.names.iter().zip(&slot.values) {
            push_value(text, name, qid, v, slot.measure.kind.is_count());
        }
    }
}

fn topic_json(slots: &[Slot]) -> Value {
    let mut m = Map::new();
    for slot in slots {
        let kind = slot.measure.kind;
        if matches!(kind, Kind::Runid | Kind::NumQ) {
            continue;
        }
        for (name, &v) in slot.names.iter().zip(&slot.values) {
            let value = if kind.is_count() {
                json!(v as i64)
            } else if slot.counted {
                json!(v)
            } else {
                Value::Null
            };
            m.insert(name.clone(), value);
        }
    }
    Value::Object(m)
}
