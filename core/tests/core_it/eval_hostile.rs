//! Hostile input for `rankpulse eval`: generated judgments (every `-R`
//! format), runs, z-score files and option sets, none designed to be valid.
//! Whatever the input, evaluation returns a report or a typed error: it never
//! panics, and a report never holds NaN or an infinity.

use proptest::prelude::*;
use rankpulse_core::eval::{EvalOptions, RelFormat, run_files};
use rankpulse_core::metrics::{IdealScope, NoRelevant};
use std::path::PathBuf;

fn field() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-c0-2]{1,2}",
        1 => Just("ceci_nest_pas_un_docno".to_string()),
        1 => Just("#".to_string()),
        1 => "[!-~]{1,3}",
    ]
}

fn grade() -> impl Strategy<Value = String> {
    prop_oneof![
        400 => (-3i64..6).prop_map(|g| g.to_string()),
        4 => Just("65535".to_string()),
        1 => Just("65536".to_string()),
        1 => Just("99999999999".to_string()),
        1 => Just("1.5".to_string()),
        1 => Just("x".to_string()),
    ]
}

fn score() -> impl Strategy<Value = String> {
    prop_oneof![
        300 => (-3.0f64..3.0).prop_map(|s| format!("{s:.2}")),
        100 => Just("1".to_string()),
        50 => Just("-0".to_string()),
        50 => Just("1e308".to_string()),
        1 => Just("nan".to_string()),
        1 => Just("".to_string()),
    ]
}

/// Document ids: enough of them that a topic rarely names one twice.
fn doc_id() -> impl Strategy<Value = String> {
    prop_oneof![30 => "[a-z0-9]{1,4}", 1 => field()]
}

/// Lines of a judgments file in the given format, with some malformed ones.
fn judgments(format: RelFormat) -> impl Strategy<Value = String> {
    let line = (field(), field(), field(), doc_id(), grade(), 0u16..600).prop_map(move |(q, jg, jsg, doc, g, odd)| {
        match (format, odd) {
            (_, 0) => format!("{q} {doc}\n"),
            (_, 1) => "\n".to_string(),
            (_, 2) => format!("# {q}\n"),
            (RelFormat::Prefs, _) => format!("{q} {jg} {jsg} {doc} {g}\n"),
            (RelFormat::QrelsJg, _) => format!("{q} {jg} {doc} {g}\n"),
            _ => format!("{q} 0 {doc} {g}\n"),
        }
    });
    prop::collection::vec(line, 0..40).prop_map(|l| l.concat())
}

fn run() -> impl Strategy<Value = String> {
    let line = (field(), doc_id(), score(), field(), 0u16..600).prop_map(|(q, doc, s, id, odd)| match odd {
        0 => format!("{q} Q0 {doc}\n"),
        1 => format!("{q} Q0 {doc} 1 {s} {id} extra\n"),
        _ => format!("{q} Q0 {doc} 1 {s} {id}\n"),
    });
    prop::collection::vec(line, 0..60).prop_map(|l| l.concat())
}

fn zscores() -> impl Strategy<Value = Option<String>> {
    let line = (field(), prop::sample::select(vec!["map", "P_5", "num_ret", "bpref", "gm_map", "x"]), score(), score())
        .prop_map(|(q, m, mean, sd)| format!("{q} {m} {mean} {sd}\n"));
    prop::option::of(prop::collection::vec(line, 0..10).prop_map(|l| l.concat()))
}

/// Measures that fit the format, with now and then one that does not or
/// one with bad parameters.
fn measures(format: RelFormat) -> impl Strategy<Value = Vec<String>> {
    let fitting: Vec<&'static str> = match format {
        RelFormat::Qrels => vec![
            "all_trec",
            "official",
            "set",
            "extras",
            "P.1,3",
            "P",
            "ndcg.1=3,2=0.5,-1=2,4=4.4",
            "G.0=1,3=0.2",
            "G.-1=5",
            "G.1=-2,2=0.5",
            "ndcg_rel.0=-3",
            "rbp.p=0.5,1=-1",
            "Rndcg.2=0",
            "iprec_at_recall..5,1",
            "Rprec_mult.0,0.5,3",
            "11pt_avg.0",
            "utility.1,-1,2,0.5",
            "relstring.3",
            "relstring.-2",
            "success.1",
            "unj.1",
            "set_F.0",
            "map_cut.1,2",
            "ndcg_cut.1,23.4",
            "err_cut.1",
            "ndcg_exp_cut.1",
            "gauc",
            "dcg",
            "ideal_dcg",
            "yaap",
        ],
        RelFormat::Prefs | RelFormat::QrelsPrefs => vec!["all_prefs", "prefs", "runid", "num_q"],
        RelFormat::QrelsJg => vec!["qrels_jg", "P_avgjg.1", "Rprec_mult_avgjg.0.5,-1", "num_q"],
    };
    let misfit = prop::sample::select(vec!["nope", "P.0", "ndcg.1", "map", "prefs_pair", "map_avgjg"]);
    let one = prop_oneof![40 => prop::sample::select(fitting), 1 => misfit];
    // No -m means `official`, which needs qrels.
    let least = usize::from(format != RelFormat::Qrels);
    prop::collection::vec(one.prop_map(str::to_string), least..4)
}

#[derive(Debug, Clone)]
struct Case {
    format: RelFormat,
    judgments: String,
    run: String,
    zscores: Option<String>,
    measures: Vec<String>,
    complete: bool,
    per_query: bool,
    judged_only: bool,
    max_docs: usize,
    relevance_level: i64,
    skip: bool,
    shown: bool,
    json: bool,
}

fn case() -> impl Strategy<Value = Case> {
    prop::sample::select(vec![RelFormat::Qrels, RelFormat::Prefs, RelFormat::QrelsPrefs, RelFormat::QrelsJg])
        .prop_flat_map(|format| {
            (
                judgments(format),
                run(),
                zscores(),
                measures(format),
                any::<(bool, bool, bool, bool, bool, bool)>(),
                prop::sample::select(vec![0usize, 1, 3, usize::MAX]),
                prop_oneof![30 => 0i64..4, 1 => Just(-1i64)],
            )
                .prop_map(
                    move |(
                        judgments,
                        run,
                        zscores,
                        measures,
                        (complete, per_query, judged_only, skip, shown, json),
                        max_docs,
                        relevance_level,
                    )| Case {
                        format,
                        judgments,
                        run,
                        zscores,
                        measures,
                        complete,
                        per_query,
                        judged_only,
                        max_docs,
                        relevance_level,
                        skip,
                        shown,
                        json,
                    },
                )
        })
}

fn temp(name: &str, text: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rankpulse-eval-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// Runs 512 generated cases (a fixed seed); every one must give a report
/// or an error, and enough of them a report that the evaluation itself, not
/// just the parsers, is under test.
#[test]
fn any_input_gives_a_report_or_an_error() {
    let config = ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() };
    let mut runner = proptest::test_runner::TestRunner::new_with_rng(
        config,
        proptest::test_runner::TestRng::deterministic_rng(proptest::test_runner::RngAlgorithm::ChaCha),
    );
    let reports = std::cell::Cell::new(0usize);
    let result = runner.run(&case(), |c| {
        let judgments = temp("judgments", &c.judgments);
        let run = temp("run", &c.run);
        let zscores = c.zscores.as_ref().map(|z| temp("zscores", z));
        let opts = EvalOptions {
            complete: c.complete,
            per_query: c.per_query,
            measures: c.measures.clone(),
            json: c.json,
            relevance_level: c.relevance_level,
            max_docs: c.max_docs,
            judged_only: c.judged_only,
            rel_format: c.format,
            zscores,
            no_relevant: if c.skip { NoRelevant::Skip } else { NoRelevant::Zero },
            ideal: if c.shown { IdealScope::Shown } else { IdealScope::Judged },
            ..EvalOptions::default()
        };
        let mut out = Vec::new();
        if run_files(&opts, &judgments, &run, &mut out).is_ok() {
            reports.set(reports.get() + 1);
            let text = String::from_utf8(out).expect("the report is UTF-8");
            if !c.json {
                for line in text.lines() {
                    let value = line.rsplit('\t').next().unwrap_or("");
                    let bad = value.contains("NaN") || value.contains("inf") || value.contains("nan");
                    prop_assert!(!bad || line.starts_with("runid") || line.starts_with("relstring"), "{line}");
                }
            }
        }
        Ok(())
    });
    if let Err(e) = result {
        panic!("{e}");
    }
    assert!(reports.get() >= 512 / 4, "only {} of 512 cases gave a report", reports.get());
}
