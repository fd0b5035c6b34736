//! `rankpulse eval` beyond trec_eval: the extra measures (ndcg_exp_cut,
//! err_cut, gauc), the explicit conventions (--no-relevant, --gauc-weight,
//! --max-grade) and the JSON report. Expected values are hand-computed in the
//! comments, or derived from trec_eval's own golden output.

use rankpulse_core::eval::{EvalOptions, run_files};
use rankpulse_core::metrics::{GaucWeight, NoRelevant};
use std::path::{Path, PathBuf};

struct TempPair {
    dir: PathBuf,
}

impl TempPair {
    fn new(name: &str, qrels: &str, run: &str) -> TempPair {
        let dir = std::env::temp_dir().join(format!("rankpulse-eval-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("q"), qrels).unwrap();
        std::fs::write(dir.join("r"), run).unwrap();
        TempPair { dir }
    }
    fn qrels(&self) -> PathBuf {
        self.dir.join("q")
    }
    fn run(&self) -> PathBuf {
        self.dir.join("r")
    }
}

impl Drop for TempPair {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn eval(opts: &EvalOptions, qrels: &Path, run: &Path) -> String {
    let mut out = Vec::new();
    run_files(opts, qrels, run, &mut out).expect("eval");
    String::from_utf8(out).unwrap()
}

fn opts(measures: &[&str]) -> EvalOptions {
    EvalOptions { measures: measures.iter().map(|s| s.to_string()).collect(), ..EvalOptions::default() }
}

/// Value of `measure` for `qid` in a trec_eval-format report.
fn value(report: &str, measure: &str, qid: &str) -> Option<f64> {
    report.lines().find_map(|l| {
        let mut f = l.split('\t');
        let (m, q, v) = (f.next()?.trim_end(), f.next()?, f.next()?);
        (m == measure && q == qid).then(|| v.parse().ok())?
    })
}

/// The issue's GAUC example as two TREC topics: labels [1,0,1,1,0] with
/// scores .9 .8 .7 .6 .5 (AUC 4/6) and [1,0,0,1] with .9 .8 .7 .6 (AUC 2/4).
fn gauc_pair() -> TempPair {
    let qrels = "a 0 a1 1\na 0 a2 0\na 0 a3 1\na 0 a4 1\na 0 a5 0\nb 0 b1 1\nb 0 b2 0\nb 0 b3 0\nb 0 b4 1\n";
    let run = "a Q0 a1 1 .9 r\na Q0 a2 2 .8 r\na Q0 a3 3 .7 r\na Q0 a4 4 .6 r\na Q0 a5 5 .5 r\n\
               b Q0 b1 1 .9 r\nb Q0 b2 2 .8 r\nb Q0 b3 3 .7 r\nb Q0 b4 4 .6 r\n";
    TempPair::new("gauc", qrels, run)
}

#[test]
fn gauc_weights_reproduce_the_worked_example() {
    let pair = gauc_pair();
    let mut o = opts(&["gauc"]);
    o.per_query = true;
    for (weight, expected) in
        [(GaucWeight::Impressions, "0.5926"), (GaucWeight::Uniform, "0.5833"), (GaucWeight::Positives, "0.6000")]
    {
        o.gauc_weight = weight;
        let report = eval(&o, &pair.qrels(), &pair.run());
        assert_eq!(
            report,
            format!(
                "gauc                  \ta\t0.6667\ngauc                  \tb\t0.5000\ngauc                  \tall\t{expected}\n"
            ),
            "{weight}"
        );
    }
}

#[test]
fn single_class_topics_have_no_auc() {
    // Topic c retrieves only relevant documents: no negatives, no AUC.
    let pair = TempPair::new(
        "gauc1",
        "c 0 x 1\nc 0 y 1\nd 0 p 1\n",
        "c Q0 x 1 2 r\nc Q0 y 2 1 r\nd Q0 p 1 3 r\nd Q0 n 2 1 r\n",
    );
    let mut o = opts(&["gauc"]);
    o.per_query = true;
    let mut out = Vec::new();
    let summary = run_files(&o, &pair.qrels(), &pair.run(), &mut out).unwrap();
    assert_eq!(summary.gauc_single_class, 1);
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "gauc                  \td\t1.0000\ngauc                  \tall\t1.0000\n"
    );
}

/// ERR with max grade 3 for grades 2,0,3,1 (R = 3/8, 0, 7/8, 1/8):
/// ERR@1 = 3/8; ERR@4 = 3/8 + (5/8)(7/8)/3 + (5/8)(1/8)(1/8)/4 = 0.559733.
#[test]
fn err_cut_hand_computed() {
    let pair = TempPair::new(
        "err",
        "1 0 a 2\n1 0 b 0\n1 0 c 3\n1 0 d 1\n",
        "1 Q0 a 1 4 r\n1 Q0 b 2 3 r\n1 Q0 c 3 2 r\n1 Q0 d 4 1 r\n",
    );
    let mut o = opts(&["err_cut.1,4"]);
    o.max_grade = 3;
    let report = eval(&o, &pair.qrels(), &pair.run());
    assert_eq!(report, "err_cut_1             \tall\t0.3750\nerr_cut_4             \tall\t0.5597\n");
}

#[test]
fn grade_above_max_grade_is_refused_for_err() {
    let pair = TempPair::new("errmax", "1 0 a 2\n1 0 b 5\n", "1 Q0 a 1 4 r\n");
    let mut o = opts(&["err_cut.3"]);
    o.max_grade = 4;
    let err = run_files(&o, &pair.qrels(), &pair.run(), &mut Vec::new()).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let msg = err.to_string();
    assert!(msg.ends_with("q:2: grade 5 exceeds --max-grade 4 (needed by err_cut)"), "{msg}");
    // Other measures do not care about the ERR scale.
    assert!(run_files(&opts(&["ndcg_cut.3"]), &pair.qrels(), &pair.run(), &mut Vec::new()).is_ok());
}

/// With grades 0/1, 2^g − 1 = g, so the exponential-gain nDCG must equal
/// trec_eval's linear one on the binary fixture, topic by topic.
#[test]
fn exp_gain_equals_linear_on_binary_grades() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trec");
    let mut o = opts(&["ndcg_cut.5,10,100", "ndcg_exp_cut.5,10,100"]);
    o.complete = true;
    o.per_query = true;
    let report = eval(&o, &dir.join("binary.qrels"), &dir.join("binary.run"));
    let lin: Vec<&str> = report.lines().filter(|l| l.starts_with("ndcg_cut_")).map(|l| &l[22..]).collect();
    let exp: Vec<&str> = report.lines().filter(|l| l.starts_with("ndcg_exp_cut_")).map(|l| &l[22..]).collect();
    assert_eq!(lin.len(), 91 * 3);
    assert_eq!(lin, exp);
}

/// `--no-relevant skip` leaves topics without relevant judgments out of the
/// means. Expected: the mean of trec_eval's own per-topic `map` over the
/// topics whose `num_rel` is positive (edge.cq.out).
#[test]
fn no_relevant_skip_averages_only_topics_with_relevant() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trec");
    let golden = std::fs::read_to_string(dir.join("edge.cq.out")).unwrap();
    let topics: Vec<&str> = golden
        .lines()
        .filter(|l| l.starts_with("num_rel "))
        .map(|l| l.split('\t').nth(1).unwrap())
        .filter(|&q| q != "all")
        .collect();
    let kept: Vec<f64> = topics
        .iter()
        .filter(|q| value(&golden, "num_rel", q).unwrap() > 0.0)
        .map(|q| value(&golden, "map", q).unwrap())
        .collect();
    assert!(kept.len() < topics.len(), "fixture must have topics without relevant documents");
    let expected = kept.iter().sum::<f64>() / kept.len() as f64;
    let mut o = opts(&["map"]);
    o.complete = true;
    o.no_relevant = NoRelevant::Skip;
    o.json = true;
    let mut out = Vec::new();
    let summary = run_files(&o, &dir.join("edge.qrels"), &dir.join("edge.run"), &mut out).unwrap();
    assert_eq!(summary.no_relevant, topics.len() - kept.len());
    let doc: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let got = doc["summary"]["map"].as_f64().unwrap();
    // Golden per-topic values carry 4 decimals.
    assert!((got - expected).abs() < 1e-4, "{got} vs {expected}");
    assert_eq!(doc["excluded"]["no_relevant"], topics.len() - kept.len());
}

/// The JSON report carries the same numbers as the table, unrounded.
#[test]
fn json_matches_table() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trec");
    let mut o = opts(&["num_q", "num_rel", "map", "P.5,10", "ndcg_cut.10", "gauc"]);
    o.complete = true;
    o.per_query = true;
    let (q, r) = (dir.join("random.qrels"), dir.join("random.run"));
    let table = eval(&o, &q, &r);
    o.json = true;
    let doc: serde_json::Value = serde_json::from_str(&eval(&o, &q, &r)).unwrap();
    assert_eq!(doc["runid"], "rp_random");
    assert_eq!(doc["summary"]["num_q"], 280);
    for name in ["map", "P_5", "P_10", "ndcg_cut_10", "gauc", "num_rel"] {
        let json = doc["summary"][name].as_f64().unwrap();
        let printed = value(&table, name, "all").unwrap();
        assert_eq!(format!("{json:.4}"), format!("{printed:.4}"), "{name}");
    }
    let per_query = doc["per_query"].as_object().unwrap();
    assert_eq!(per_query.len(), 280);
    let q43 = &per_query["43"];
    assert_eq!(format!("{:.4}", q43["map"].as_f64().unwrap()), format!("{:.4}", value(&table, "map", "43").unwrap()));
}

/// The rankpulse-only flags of `rankpulse eval`, through the binary: each
/// gives exactly the report of the options it names (`run_files`), and
/// each changes the report on these files, so a flag that parsed but did
/// nothing fails here. Topic a is graded and misses a9 (grade 3, never
/// retrieved: the ideal differs when it is "shown"); b has nothing
/// relevant (skipped or counted as 0); a and c both have an AUC, of
/// different sizes (the GAUC weight matters); grades reach 3 (ERR's top
/// grade matters).
#[test]
fn the_extra_flags_reach_the_evaluator() {
    let qrels = "a 0 a1 1\na 0 a2 0\na 0 a3 2\na 0 a4 1\na 0 a5 0\na 0 a9 3\n\
                 b 0 b1 0\nb 0 b2 0\nc 0 c1 0\nc 0 c2 1\nc 0 c3 0\n";
    let run = "a Q0 a1 1 .9 r\na Q0 a2 2 .8 r\na Q0 a3 3 .7 r\na Q0 a4 4 .6 r\na Q0 a5 5 .5 r\n\
               b Q0 b1 1 .9 r\nb Q0 b2 2 .8 r\nc Q0 c1 1 .9 r\nc Q0 c2 2 .8 r\nc Q0 c3 3 .7 r\n";
    let files = TempPair::new("flags", qrels, run);
    let measures = ["ndcg_cut.5", "err_cut.5", "gauc", "recip_rank"];
    let cli = |flags: &[&str]| {
        let mut args: Vec<String> = vec!["eval".into(), "-q".into()];
        for m in measures {
            args.extend(["-m".to_string(), m.to_string()]);
        }
        args.extend(flags.iter().map(|f| f.to_string()));
        args.extend([files.qrels().display().to_string(), files.run().display().to_string()]);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankpulse")).args(&args).output().unwrap();
        assert!(out.status.success(), "{args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let base_opts = EvalOptions { per_query: true, ..opts(&measures) };
    let base = cli(&[]);
    assert_eq!(base, eval(&base_opts, &files.qrels(), &files.run()));
    let cases: [(&[&str], EvalOptions); 5] = [
        (&["--json"], EvalOptions { json: true, ..base_opts.clone() }),
        (&["--max-grade", "3"], EvalOptions { max_grade: 3, ..base_opts.clone() }),
        (&["--gauc-weight", "uniform"], EvalOptions { gauc_weight: GaucWeight::Uniform, ..base_opts.clone() }),
        (&["--no-relevant", "skip"], EvalOptions { no_relevant: NoRelevant::Skip, ..base_opts.clone() }),
        (&["--ideal", "shown"], EvalOptions { ideal: rankpulse_core::metrics::IdealScope::Shown, ..base_opts.clone() }),
    ];
    for (flags, options) in cases {
        let report = cli(flags);
        assert_eq!(report, eval(&options, &files.qrels(), &files.run()), "{flags:?}");
        assert_ne!(report, base, "{flags:?} changed nothing");
    }
}

/// `-v` and `-T` as trec_eval reads them (trec_eval.c: `-v` prints its
/// version on stderr and exits 0; `-T` names the results format, of which
/// trec_results is the only one rankpulse reads).
#[test]
fn eval_version_and_results_format_flags() {
    let bin = env!("CARGO_BIN_EXE_rankpulse");
    // -v needs no files and writes nothing on stdout.
    let out = std::process::Command::new(bin).args(["eval", "-v"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(out.stdout.is_empty(), "{}", String::from_utf8_lossy(&out.stdout));
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(stderr.contains(env!("CARGO_PKG_VERSION")) && stderr.contains("trec_eval"), "{stderr}");

    // Files of its own: gauc_pair()'s directory is removed by the test
    // that uses it, maybe while this one runs.
    let pair = TempPair::new("flags-t", "a 0 a1 1\na 0 a2 0\n", "a Q0 a1 1 .9 r\na Q0 a2 2 .8 r\n");
    let run = |flags: &[&str]| {
        let mut args = vec!["eval".to_string()];
        args.extend(flags.iter().map(|f| f.to_string()));
        args.extend([pair.qrels().display().to_string(), pair.run().display().to_string()]);
        std::process::Command::new(bin).args(&args).output().unwrap()
    };
    let base = run(&[]);
    assert!(base.status.success());
    for flags in [&["-T", "trec_results"][..], &["--Results_format", "trec_results"]] {
        let out = run(flags);
        assert!(out.status.success(), "{flags:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, base.stdout, "{flags:?}");
    }
    // Any other results format is refused before reading, naming it.
    let out = run(&["-T", "trec_other"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("trec_other"));
}

/// A UTF-8 byte order mark at the start of the judgments or the run is
/// skipped: the report is the one without it (trec_eval would read it into
/// the first topic id, and that topic would drop out of the means).
#[test]
fn a_byte_order_mark_at_the_start_changes_nothing() {
    let qrels = "a 0 a1 1\na 0 a2 0\na 0 a3 1\nb 0 b1 1\nb 0 b2 0\n";
    let run = "a Q0 a1 1 .9 r\na Q0 a2 2 .8 r\na Q0 a3 3 .7 r\nb Q0 b2 1 .9 r\nb Q0 b1 2 .8 r\n";
    let o = EvalOptions { per_query: true, ..opts(&["map", "num_q"]) };
    let plain = TempPair::new("bom-plain", qrels, run);
    let want = eval(&o, &plain.qrels(), &plain.run());
    assert!(want.contains("num_q                 \tall\t2\n"), "{want}");
    for (name, q, r) in [
        ("bom-qrels", format!("\u{feff}{qrels}"), run.to_string()),
        ("bom-run", qrels.to_string(), format!("\u{feff}{run}")),
        ("bom-both", format!("\u{feff}{qrels}"), format!("\u{feff}{run}")),
    ] {
        let pair = TempPair::new(name, &q, &r);
        assert_eq!(eval(&o, &pair.qrels(), &pair.run()), want, "{name}");
    }
}
