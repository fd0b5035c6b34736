//! `rankpulse eval`: offline evaluation of a TREC run, a complete
//! trec_eval 10.0: every measure, every option, the same report byte for
//! byte, and rankpulse's own measures and conventions beside them.
//!
//! Data flow: `trec` reads the judgments (qrels, prefs, qrels_prefs or
//! qrels_jg) and the run in parallel → topics are matched by id → per topic
//! the ranking is joined with its judgments once (`calc::ResRels`) and every
//! selected measure (`measures::Plan`) reads that join → optional z-scores
//! (`zscore`) → values are printed per topic (`-q`) and folded, in topic
//! order, into the `all` summary.
//!
//! trec_eval semantics reproduced on purpose: ranking by score then docno
//! (descending); `-c` averages over every judged topic, scoring a missing
//! topic as a ranking of one unjudged document; per-topic output in qid byte
//! order; measure parameters from the first `-m name.params`. Deliberate
//! differences, all where trec_eval crashes, aborts or prints garbage, are
//! listed in docs/metrics.md.

pub mod calc;
pub mod jg;
pub mod measures;
pub mod prefs;
pub mod trec;
pub mod zscore;

use crate::metrics::{self, GaucWeight, Grade, IdealScope, NoRelevant};
use calc::{Form, ResRels};
use measures::{Average, Id, Measure, MeasureError, Needs, Plan, Shape};
use serde_json::{Map, Value, json};
use std::io::Write;
use std::path::{Path, PathBuf};
use thiserror::Error;
use trec::{Qrels, Retrieved, Run, TrecError};
use zscore::{ZError, Zscores};

/// Format of the judgments file (`-R`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::EnumString, strum::IntoStaticStr, strum::Display)]
#[strum(serialize_all = "snake_case")]
pub enum RelFormat {
    /// `qid iter docno rel`.
    Qrels,
    /// `qid jg jsg docno rel`: preferences within judgment groups.
    Prefs,
    /// A qrels file read as preferences (jg = iter, one jsg).
    QrelsPrefs,
    /// `qid jg docno rel`: qrels from several judgment groups.
    QrelsJg,
}

/// Everything `rankpulse eval` can be told.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// `-c`: average over every topic in the judgments.
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
    pub relevance_level: i64,
    /// `-M`: evaluate only the first this many results of each topic.
    pub max_docs: usize,
    /// `-J`: drop unjudged documents from every ranking first.
    pub judged_only: bool,
    /// `-N`: number of documents in the collection (utility).
    pub num_docs_in_coll: i64,
    /// `-R`: format of the judgments file.
    pub rel_format: RelFormat,
    /// `-Z`: print z-scores against this file's per-topic means.
    pub zscores: Option<PathBuf>,
    /// `-D level.qid`: evaluate only this topic.
    pub only_topic: Option<String>,
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
            max_docs: usize::MAX,
            judged_only: false,
            num_docs_in_coll: 0,
            rel_format: RelFormat::Qrels,
            zscores: None,
            only_topic: None,
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
    #[error(transparent)]
    Zscores(#[from] ZError),
    #[error(transparent)]
    QrelsJg(#[from] jg::JgError),
    #[error(transparent)]
    Prefs(#[from] prefs::PrefsError),
    #[error("{path}:{line}: grade {grade} exceeds --max-grade {max_grade} (needed by err_cut)")]
    GradeAboveMax { path: PathBuf, line: u32, grade: Grade, max_grade: Grade },
    #[error("{0}: no result lines")]
    EmptyRun(PathBuf),
    #[error("{0}: no judgment lines")]
    EmptyQrels(PathBuf),
    #[error("no topic has both results in {run} and judgments in {qrels}")]
    NoTopics { qrels: PathBuf, run: PathBuf },
    #[error("topic {topic:?} (-D) is not among the topics evaluated")]
    NoSuchTopic { topic: String },
    #[error("--max-grade must be between 1 and 30, got {0}")]
    MaxGrade(Grade),
    #[error("-l must be 0 or more, got {0} (a negative level would count unjudged documents as relevant)")]
    RelevanceLevel(i64),
    #[error("measure {measure} needs {needs} judgments, but -R is {format}")]
    Format { measure: &'static str, needs: &'static str, format: RelFormat },
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
    /// Topics with no judged document at or above the relevance level:
    /// the `no_relevant` case of every measure but the graded ones.
    pub no_relevant: usize,
    /// Topics with no judged document of a positive grade: the
    /// `no_relevant` case of the graded measures (nDCG, ERR).
    pub no_positive_grade: usize,
    /// Topics without an AUC (only positives or only negatives retrieved).
    pub gauc_single_class: usize,
    pub notes: Vec<String>,
}

/// The judgments, in whichever format `-R` named.
enum RelInfo<'a> {
    Qrels(Qrels<'a>),
    Jg(jg::JgQrels<'a>),
    Prefs(prefs::PrefsQrels<'a>),
}

impl<'a> RelInfo<'a> {
    fn names(&self) -> &[&'a [u8]] {
        match self {
            RelInfo::Qrels(q) => &q.names,
            RelInfo::Jg(q) => q.qids(),
            RelInfo::Prefs(q) => &q.names,
        }
    }

    /// Judgment lines with grade > 0 over every topic (`num_rel` under -c;
    /// `num_rel` needs qrels, so the other formats never ask).
    fn positive_lines(&self) -> usize {
        match self {
            RelInfo::Qrels(q) => q.items.iter().filter(|j| j.grade > 0).count(),
            RelInfo::Jg(_) | RelInfo::Prefs(_) => 0,
        }
    }
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
    if opts.relevance_level < 0 {
        return Err(EvalError::RelevanceLevel(opts.relevance_level));
    }
    for m in &plan.measures {
        let needs = match (m.id.needs(), opts.rel_format) {
            (Needs::Nothing, _)
            | (Needs::Qrels, RelFormat::Qrels)
            | (Needs::Prefs, RelFormat::Prefs | RelFormat::QrelsPrefs)
            | (Needs::QrelsJg, RelFormat::QrelsJg) => continue,
            (Needs::Qrels, _) => "qrels",
            (Needs::Prefs, _) => "prefs or qrels_prefs",
            (Needs::QrelsJg, _) => "qrels_jg",
        };
        return Err(EvalError::Format { measure: m.id.name(), needs, format: opts.rel_format });
    }
    // Reading and parsing the two files are independent: one thread each.
    let (qrels_buf, run_buf) = std::thread::scope(|s| {
        let q = s.spawn(|| trec::read_input(qrels_path));
        let r = trec::read_input(run_path);
        (q.join().unwrap_or_else(|e| std::panic::resume_unwind(e)), r)
    });
    let (qrels_buf, run_buf) = (qrels_buf?, run_buf?);
    let (qrels_text, run_text) = (trec::without_bom(&qrels_buf), trec::without_bom(&run_buf));
    let (rel_info, run) = std::thread::scope(|s| {
        let q = s.spawn(|| parse_rel_info(opts.rel_format, qrels_path, qrels_text));
        let r = trec::parse_run(run_path, run_text);
        (q.join().unwrap_or_else(|e| std::panic::resume_unwind(e)), r)
    });
    let (rel_info, run) = (rel_info?, run?);
    let zscores = match &opts.zscores {
        Some(path) => Some(Zscores::read(path)?),
        None => None,
    };
    // Like trec_eval, an empty file is a mistake, not a run that found nothing.
    if rel_info.names().is_empty() {
        return Err(EvalError::EmptyQrels(qrels_path.to_path_buf()));
    }
    // A run of comments or blank lines only is a run that found nothing:
    // trec_eval evaluates it under -c (every measure 0).
    if run_text.is_empty() {
        return Err(EvalError::EmptyRun(run_path.to_path_buf()));
    }
    // Like trec_eval, a document retrieved twice is an error only where it
    // is evaluated: in a judged topic (the one `-D` names, if any), both
    // times among the first `-M` results.
    if let Some(e) = run.duplicates.iter().find_map(|d| {
        let name = run.topics.names[d.topic];
        let evaluated =
            rel_info.names().contains(&name) && opts.only_topic.as_deref().is_none_or(|q| q.as_bytes() == name);
        let ranked = run.topics.topic(d.topic);
        let within = ranked.iter().take(opts.max_docs).filter(|r| r.doc == d.first).count() > 1;
        (evaluated && within).then(|| d.to_error(run_path, &run_buf, name))
    }) {
        return Err(e.into());
    }
    if plan.get(Id::ErrCut).is_some()
        && let RelInfo::Qrels(qrels) = &rel_info
        && let Some(j) = qrels.items.iter().find(|j| j.grade > opts.max_grade)
    {
        return Err(EvalError::GradeAboveMax {
            path: qrels_path.to_path_buf(),
            line: trec::line_of(&qrels_buf, j.doc),
            grade: j.grade,
            max_grade: opts.max_grade,
        });
    }
    // Nothing is written before this is known: a script reading the
    // report must not get the start of one and an error.
    let mut summary = evaluate(opts, &plan, &rel_info, &run, zscores.as_ref(), out)?;
    if summary.topics == 0 {
        return Err(match &opts.only_topic {
            Some(topic) => EvalError::NoSuchTopic { topic: topic.clone() },
            None => EvalError::NoTopics { qrels: qrels_path.to_path_buf(), run: run_path.to_path_buf() },
        });
    }
    summary.notes.extend(plan.notes);
    Ok(summary)
}

fn parse_rel_info<'a>(format: RelFormat, path: &Path, buf: &'a [u8]) -> Result<RelInfo<'a>, EvalError> {
    Ok(match format {
        RelFormat::Qrels => RelInfo::Qrels(trec::parse_qrels(path, buf)?),
        RelFormat::QrelsJg => RelInfo::Jg(jg::parse_qrels_jg(path, buf)?),
        RelFormat::Prefs => RelInfo::Prefs(prefs::parse_prefs(path, buf)?),
        RelFormat::QrelsPrefs => RelInfo::Prefs(prefs::parse_qrels_prefs(path, buf)?),
    })
}

/// Where each measure's values sit in a topic's row.
struct Layout<'p> {
    measures: &'p [Measure],
    /// Start of each measure's values; the row has `len` values.
    start: Vec<usize>,
    len: usize,
    /// Every value's printed name, in row order.
    names: Vec<&'p str>,
}

impl<'p> Layout<'p> {
    fn new(plan: &'p Plan) -> Layout<'p> {
        let mut start = Vec::with_capacity(plan.measures.len());
        let mut names = Vec::new();
        for m in &plan.measures {
            start.push(names.len());
            names.extend(m.names.iter().map(String::as_str));
        }
        Layout { measures: &plan.measures, start, len: names.len(), names }
    }

    fn range(&self, i: usize) -> std::ops::Range<usize> {
        self.start[i]..self.start[i] + self.measures[i].names.len()
    }
}

/// One topic's values and how they enter the summary.
#[derive(Clone, Copy, Default)]
struct Weight {
    /// Whether the topic counts for this measure (false: skipped by
    /// `--no-relevant skip`, or gauc without an AUC).
    counted: bool,
    weight: f64,
}

/// What one worker computed for a contiguous range of topics (in output order).
#[derive(Default)]
struct Chunk {
    /// Per topic, the row of values.
    values: Vec<f64>,
    /// Per topic and measure.
    weights: Vec<Weight>,
    /// Per-query report lines (`-q` without `--json`); bytes, because ids
    /// are printed as the files spell them, UTF-8 or not.
    text: Vec<u8>,
    /// Per-query JSON objects (`-q --json`).
    json: Vec<(String, Value)>,
    no_relevant: usize,
    no_positive_grade: usize,
    gauc_single_class: usize,
}

/// Below this many topics a second thread costs more than it saves.
const TOPICS_PER_THREAD_MIN: usize = 2_000;

/// The ranking trec_eval scores for a judged topic missing from the run
/// under `-c`: one unjudged document.
const BOGUS_DOC: &[u8] = b"ceci_nest_pas_un_docno";

struct Context<'a> {
    opts: &'a EvalOptions,
    form: Form,
    layout: &'a Layout<'a>,
    rel_info: &'a RelInfo<'a>,
    run: &'a Run<'a>,
    zscores: Option<&'a Zscores>,
    needs_qrels: bool,
    /// (row index, index in `prefs::MEASURES`) of each selected preference
    /// measure, found once rather than by name per topic.
    prefs_slots: Vec<(usize, usize)>,
}

/// Scores a range of topics: `(judgments topic, run topic)` pairs.
fn score_chunk(cx: &Context, topics: &[(usize, Option<usize>)]) -> Chunk {
    let layout = cx.layout;
    let mut chunk = Chunk::default();
    let mut rr = ResRels::default();
    let mut row = vec![0.0; layout.len];
    let mut weights = vec![Weight::default(); layout.measures.len()];
    let mut relstring = String::new();
    let mut jg_scratch = jg::Scratch::new();
    let mut jg_cutoffs: Vec<usize> = Vec::new();
    let mut prefs_scratch = prefs::Scratch::new();
    let mut prefs_values = [0.0; prefs::N];
    let jg_options = jg::JgOptions {
        relevance_level: cx.opts.relevance_level,
        judged_docs_only: cx.opts.judged_only,
        max_docs: cx.opts.max_docs,
    };
    let bogus = [Retrieved { doc: BOGUS_DOC, key: trec::doc_key(BOGUS_DOC), score: 1.0 }];
    for &(t, r) in topics {
        let results = r.map_or(&bogus[..], |r| cx.run.topics.topic(r));
        let qid_bytes = cx.rel_info.names()[t];
        row.fill(0.0);
        relstring.clear();
        match cx.rel_info {
            RelInfo::Qrels(qrels) if cx.needs_qrels => rr.load(qrels.topic(t), results, &cx.form),
            RelInfo::Jg(qrels) => {
                let ranking = jg_scratch.rank(&qrels.topic(t), results, &jg_options);
                for (i, m) in layout.measures.iter().enumerate() {
                    let out = &mut row[layout.range(i)];
                    match m.id {
                        Id::MapAvgjg => out[0] = jg::map_avgjg(&ranking),
                        Id::PAvgjg => {
                            jg_cutoffs.clear();
                            jg_cutoffs.extend(m.params.longs().iter().map(|&k| k as usize));
                            jg::p_avgjg(&ranking, &jg_cutoffs, out);
                        }
                        Id::RprecMultAvgjg => jg::rprec_mult_avgjg(&ranking, m.params.doubles(), out),
                        _ => {}
                    }
                }
            }
            RelInfo::Prefs(judged) => {
                prefs::evaluate_topic(
                    judged.topic(t),
                    results,
                    cx.opts.max_docs,
                    &mut prefs_scratch,
                    &mut prefs_values,
                );
                for &(v, k) in &cx.prefs_slots {
                    row[v] = prefs_values[k];
                }
            }
            _ => {}
        }
        // What "nothing relevant" means depends on the measure's family
        // (`Id::is_graded`): a topic whose best grade is below the
        // relevance level still has an nDCG and an ERR.
        let no_relevant = cx.needs_qrels && rr.num_rel == 0;
        let no_positive_grade = cx.needs_qrels && rr.rel_levels.iter().skip(1).all(|&n| n == 0);
        let skip = cx.opts.no_relevant == NoRelevant::Skip;
        chunk.no_relevant += usize::from(no_relevant);
        chunk.no_positive_grade += usize::from(no_positive_grade);
        for (i, m) in layout.measures.iter().enumerate() {
            let out = &mut row[layout.range(i)];
            let mut weight = Weight { counted: true, weight: 1.0 };
            match m.id {
                Id::Runid => {}
                Id::NumQ => out[0] = 1.0,
                // Computed above, per judgment group or preference.
                _ if m.id.needs() != Needs::Qrels => {}
                Id::Relstring => {
                    calc::relstring(&rr, m.params.doubles().first().copied().unwrap_or(10.0), &mut relstring);
                }
                _ => match calc::calc(m, &mut rr, &cx.form, out) {
                    Some(w) => weight.weight = w,
                    None => {
                        weight.counted = false;
                        if m.id == Id::Gauc {
                            chunk.gauc_single_class += 1;
                        }
                    }
                },
            }
            let nothing_relevant = if m.id.is_graded() { no_positive_grade } else { no_relevant };
            if skip
                && nothing_relevant
                && matches!(m.id.average(), Average::Mean | Average::Geometric | Average::Weighted)
            {
                weight.counted = false;
            }
            if r.is_none() {
                // trec_eval's clean-up after scoring its stand-in ranking.
                // It matches printed names, so `utility_1,-1,0,0` or
                // `relstring_20` keep their stand-in values.
                for (v, name) in out.iter_mut().zip(&m.names) {
                    if matches!(name.as_str(), "num_ret" | "utility" | "rbp_resid") || name.starts_with("unj") {
                        *v = 0.0;
                    }
                }
                if m.names.first().is_some_and(|n| n == "relstring") {
                    relstring.clear();
                }
            }
            weights[i] = weight;
        }
        if let Some(z) = cx.zscores {
            z.convert(qid_bytes, &layout.names, &mut row);
        }
        if cx.opts.per_query {
            if cx.opts.json {
                // JSON keys are text: an id that is not UTF-8 gets U+FFFD.
                chunk.json.push((String::from_utf8_lossy(qid_bytes).into_owned(), topic_json(layout, &row, &weights)));
            } else {
                write_topic(&mut chunk.text, layout, qid_bytes, &row, &weights, &relstring, cx.zscores.is_some());
            }
        }
        chunk.values.extend_from_slice(&row);
        chunk.weights.extend_from_slice(&weights);
    }
    chunk
}

fn evaluate(
    opts: &EvalOptions,
    plan: &Plan,
    rel_info: &RelInfo,
    run: &Run,
    zscores: Option<&Zscores>,
    out: &mut dyn Write,
) -> Result<EvalSummary, EvalError> {
    let layout = Layout::new(plan);
    // Topic order: judged topics sorted by id bytes (C strcmp order); without
    // -c only those the run answered.
    let run_index: rustc_hash::FxHashMap<&[u8], usize> =
        run.topics.names.iter().enumerate().map(|(i, &n)| (n, i)).collect();
    let names = rel_info.names();
    let mut topics: Vec<(usize, Option<usize>)> = (0..names.len())
        .map(|t| (t, run_index.get(names[t]).copied()))
        .filter(|(_, r)| r.is_some() || opts.complete)
        .filter(|(t, _)| opts.only_topic.as_deref().is_none_or(|q| q.as_bytes() == names[*t]))
        .collect();
    topics.sort_unstable_by(|a, b| names[a.0].cmp(names[b.0]));
    if topics.is_empty() {
        // The caller reports the error; nothing is written.
        return Ok(EvalSummary::default());
    }

    let cx = Context {
        opts,
        form: Form {
            relevance_level: opts.relevance_level,
            max_docs: opts.max_docs,
            judged_only: opts.judged_only,
            ideal: opts.ideal,
            num_docs_in_coll: opts.num_docs_in_coll,
            max_grade: opts.max_grade,
            gauc_weight: opts.gauc_weight,
        },
        layout: &layout,
        rel_info,
        run,
        zscores,
        needs_qrels: plan.measures.iter().any(|m| m.id.needs() == Needs::Qrels),
        prefs_slots: layout
            .measures
            .iter()
            .enumerate()
            .filter_map(|(i, m)| Some((layout.start[i], prefs::MEASURES.iter().position(|&n| n == m.id.name())?)))
            .collect(),
    };
    // Score in parallel over contiguous ranges, then fold in topic order so
    // the sums are bit-identical to a sequential pass (and to trec_eval's).
    let threads =
        std::thread::available_parallelism().map_or(1, |n| n.get()).min(topics.len() / TOPICS_PER_THREAD_MIN).max(1);
    let per_thread = topics.len().div_ceil(threads).max(1);
    let chunks: Vec<Chunk> = std::thread::scope(|s| {
        let cx = &cx;
        let handles: Vec<_> = topics.chunks(per_thread).map(|range| s.spawn(move || score_chunk(cx, range))).collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))).collect()
    });

    let n_measures = layout.measures.len();
    let mut sums = vec![0.0; layout.len];
    let mut counts = vec![0usize; n_measures];
    let mut weight_sums = vec![0.0; n_measures];
    let mut summary = EvalSummary { topics: topics.len(), ..EvalSummary::default() };
    let mut per_query_json = Map::new();
    for chunk in chunks {
        summary.no_relevant += chunk.no_relevant;
        summary.no_positive_grade += chunk.no_positive_grade;
        summary.gauc_single_class += chunk.gauc_single_class;
        out.write_all(&chunk.text)?;
        per_query_json.extend(chunk.json);
        for (row, weights) in chunk.values.chunks(layout.len.max(1)).zip(chunk.weights.chunks(n_measures.max(1))) {
            for (i, m) in layout.measures.iter().enumerate() {
                let w = weights[i];
                if m.id.average() == Average::None || !w.counted {
                    continue;
                }
                counts[i] += 1;
                weight_sums[i] += w.weight;
                for (sum, v) in sums[layout.range(i)].iter_mut().zip(&row[layout.range(i)]) {
                    *sum += if m.id.average() == Average::Weighted { w.weight * v } else { *v };
                }
            }
        }
    }

    // trec_eval's averages: over the evaluated topics, or under -c over
    // every judged topic.
    let evaluated = topics.len();
    let num_queries = if opts.complete { names.len() } else { evaluated };
    let positive_lines = rel_info.positive_lines() as f64;
    let mut finals: Vec<Option<f64>> = vec![None; layout.len];
    for (i, m) in layout.measures.iter().enumerate() {
        let skip_policy = opts.no_relevant == NoRelevant::Skip;
        for v in layout.range(i) {
            let sum = sums[v];
            finals[v] = match m.id.average() {
                Average::None => None,
                Average::NumQ => Some(num_queries as f64),
                Average::NumRel if opts.complete => Some(positive_lines),
                Average::Sum | Average::NumRel => Some(sum),
                Average::Mean => {
                    let n = if skip_policy { counts[i] } else { num_queries };
                    (n > 0).then(|| sum / n as f64)
                }
                Average::Geometric => {
                    let n = if skip_policy { counts[i] } else { num_queries };
                    (n > 0).then(|| {
                        let patched = if opts.complete && !skip_policy {
                            sum + (num_queries - evaluated) as f64 * 0.00001f64.ln()
                        } else {
                            sum
                        };
                        (patched / n as f64).exp()
                    })
                }
                Average::Weighted => (weight_sums[i] > 0.0).then(|| sum / weight_sums[i]),
            };
        }
    }

    let run_id = String::from_utf8_lossy(run.run_id);
    if opts.json {
        let mut summary_json = Map::new();
        for (i, m) in layout.measures.iter().enumerate() {
            for v in layout.range(i) {
                let value = match finals[v] {
                    Some(x) if is_long(m) && zscores.is_none() => json!(x as i64),
                    Some(x) => json!(x),
                    None => Value::Null,
                };
                summary_json.insert(layout.names[v].to_string(), value);
            }
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
            json!({
                "no_relevant": summary.no_relevant,
                "no_positive_grade": summary.no_positive_grade,
                "gauc_single_class": summary.gauc_single_class,
            }),
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
        let mut text = Vec::new();
        let z = zscores.is_some();
        for (i, m) in layout.measures.iter().enumerate() {
            match m.id {
                Id::Runid => push_line(&mut text, "runid", b"all", run.run_id),
                Id::Relstring => {}
                _ => {
                    for v in layout.range(i) {
                        if let Some(x) = finals[v] {
                            push_value(&mut text, layout.names[v], b"all", x, is_long(m), z);
                        }
                    }
                }
            }
        }
        out.write_all(&text)?;
    }
    out.flush()?;
    Ok(summary)
}

fn is_long(m: &Measure) -> bool {
    m.id.shape() == Shape::Long
}

fn push_line(text: &mut Vec<u8>, name: &str, qid: &[u8], value: &[u8]) {
    // Writing to a Vec cannot fail.
    let _ = write!(text, "{name:<22}\t");
    text.extend_from_slice(qid);
    text.push(b'\t');
    text.extend_from_slice(value);
    text.push(b'\n');
}

/// A value as C's `printf("%6.4f")` prints it: Rust writes a NaN as `NaN`,
/// glibc as `nan`, or `-nan` when its sign bit is set (a z-score against a
/// `-nan` mean in a `-Z` file).
pub(crate) struct CFixed(pub f64);

impl std::fmt::Display for CFixed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            v if v.is_nan() => write!(f, "{:>6}", if v.is_sign_negative() { "-nan" } else { "nan" }),
            v => write!(f, "{v:6.4}"),
        }
    }
}

/// trec_eval's value line: `%ld` for counts, `%6.4f` otherwise; under `-Z`
/// every value is a `%6.4f` z-score and the name gets a `Z`.
fn push_value(text: &mut Vec<u8>, name: &str, qid: &[u8], value: f64, long: bool, z: bool) {
    let _ = if z { write!(text, "Z{name:<22}\t") } else { write!(text, "{name:<22}\t") };
    text.extend_from_slice(qid);
    let _ = if long && !z { writeln!(text, "\t{}", value as i64) } else { writeln!(text, "\t{}", CFixed(value)) };
}

fn write_topic(
    text: &mut Vec<u8>,
    layout: &Layout,
    qid: &[u8],
    row: &[f64],
    weights: &[Weight],
    relstring: &str,
    z: bool,
) {
    for (i, m) in layout.measures.iter().enumerate() {
        if !m.id.prints_per_topic() {
            continue;
        }
        // An undefined AUC has no per-topic line.
        if m.id == Id::Gauc && !weights[i].counted {
            continue;
        }
        if m.id == Id::Relstring {
            let _ = write!(text, "{:<22}\t", m.names[0]);
            text.extend_from_slice(qid);
            let _ = writeln!(text, "\t'{relstring}'");
            continue;
        }
        for v in layout.range(i) {
            push_value(text, layout.names[v], qid, row[v], is_long(m), z);
        }
    }
}

fn topic_json(layout: &Layout, row: &[f64], weights: &[Weight]) -> Value {
    let mut map = Map::new();
    for (i, m) in layout.measures.iter().enumerate() {
        if !m.id.prints_per_topic() || m.id == Id::Relstring {
            continue;
        }
        for v in layout.range(i) {
            let value = if is_long(m) {
                json!(row[v] as i64)
            } else if weights[i].counted {
                json!(row[v])
            } else {
                Value::Null
            };
            map.insert(layout.names[v].to_string(), value);
        }
    }
    Value::Object(map)
}
