//! Golden parity with trec_eval 10.0: `rankpulse eval` must print exactly
//! what trec_eval printed for the fixtures in `tests/fixtures/trec/` (made by
//! `make_fixtures.sh` with the real trec_eval; see the README there), and
//! must refuse malformed input with exit code 2 and a message naming file and
//! line. Runs the real binary, so the command line is under test too.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CQ_MEASURES: &[&str] = &[
    "-m",
    "runid",
    "-m",
    "num_q",
    "-m",
    "num_ret",
    "-m",
    "num_rel",
    "-m",
    "num_rel_ret",
    "-m",
    "map",
    "-m",
    "recip_rank",
    "-m",
    "P.1,3,5,10,20,100,1000",
    "-m",
    "recall.1,5,10,100,1000",
    "-m",
    "ndcg",
    "-m",
    "ndcg_cut.1,3,5,10,20,100,1000",
    "-m",
    "map_cut.5,10,100,1000",
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/trec")
}

fn rankpulse_eval(args: &[&str], qrels: &Path, run: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .arg("eval")
        .args(args)
        .arg(qrels)
        .arg(run)
        .output()
        .expect("run rankpulse")
}

/// The five trec_eval command lines of the fixture README, by output suffix.
fn variants() -> Vec<(&'static str, Vec<&'static str>)> {
    let with = |flags: &[&'static str], measures: &[&'static str]| -> Vec<&'static str> {
        flags.iter().chain(measures).copied().collect()
    };
    vec![
        ("cq", with(&["-c", "-q"], CQ_MEASURES)),
        ("c", with(&["-c"], CQ_MEASURES)),
        ("defaults", vec!["-c", "-q", "-m", "P", "-m", "recall", "-m", "ndcg_cut", "-m", "map_cut"]),
        (
            "l2",
            vec![
                "-c",
                "-q",
                "-l",
                "2",
                "-m",
                "num_rel",
                "-m",
                "num_rel_ret",
                "-m",
                "map",
                "-m",
                "recip_rank",
                "-m",
                "P.5,10",
                "-m",
                "recall.10",
                "-m",
                "ndcg_cut.10",
            ],
        ),
        ("cqn", vec!["-c", "-q", "-n", "-m", "map", "-m", "P.5"]),
    ]
}

fn assert_same(name: &str, out: &Output, expected_path: &Path) {
    let expected = std::fs::read(expected_path).expect("golden file");
    assert!(out.status.success(), "{name}: exit {:?}, stderr {}", out.status, String::from_utf8_lossy(&out.stderr));
    if out.stdout != expected {
        let got = String::from_utf8_lossy(&out.stdout);
        let want = String::from_utf8_lossy(&expected);
        let (i, (g, w)) = got
            .lines()
            .zip(want.lines())
            .enumerate()
            .find(|(_, (g, w))| g != w)
            .unwrap_or((got.lines().count().min(want.lines().count()), ("<end>", "<end>")));
        panic!("{name}: first difference at line {}:\n  rankpulse: {g}\n  trec_eval: {w}", i + 1);
    }
}

#[test]
fn main_pairs_match_trec_eval_byte_for_byte() {
    let dir = fixtures();
    for pair in ["edge", "random", "binary"] {
        for (suffix, args) in variants() {
            let out = rankpulse_eval(&args, &dir.join(format!("{pair}.qrels")), &dir.join(format!("{pair}.run")));
            assert_same(&format!("{pair}.{suffix}"), &out, &dir.join(format!("{pair}.{suffix}.out")));
        }
    }
}

/// Odd-but-valid inputs on which trec_eval behaves sensibly: CRLF line ends,
/// vertical tab and form feed as separators, a topic judged only with -1,
/// runs over 1000 results (no truncation), run ids that change mid-file (the
/// last wins), a duplicate in a topic that is never evaluated, a judged
/// topic missing from the run whose judgments name trec_eval's placeholder
/// document (so `-c` scores it as trec_eval does).
#[test]
fn probes_match_trec_eval() {
    let dir = fixtures().join("probes");
    let cq: Vec<&str> = ["-c", "-q"].iter().chain(CQ_MEASURES).copied().collect();
    for probe in [
        "crlf",
        "vt_ff_whitespace",
        "all_negative_topic",
        "over_1000",
        "mixed_runid",
        "dup_run_unjudged_topic",
        "placeholder_docno",
    ] {
        let out = rankpulse_eval(&cq, &dir.join(format!("{probe}.qrels")), &dir.join(format!("{probe}.run")));
        assert_same(probe, &out, &dir.join(format!("{probe}.cq.out")));
    }
}

/// The whole measure table: `-q -c -m all_trec` on every pair and probe,
/// its option variants, the default set, parameter syntax and selection
/// rules, `-Z`, and `-R qrels_jg` (commands as in `make_fixtures.sh`).
#[test]
fn every_measure_and_option_matches_trec_eval_byte_for_byte() {
    let dir = fixtures();
    let all = ["-q", "-c", "-m", "all_trec"];
    // The argument list is `&'static str`; one small leak per test run.
    let zscores: &'static str = Box::leak(dir.join("edge.zscores").to_str().expect("utf-8 path").into());
    let with = |extra: &[&'static str]| -> Vec<&'static str> { all.iter().chain(extra).copied().collect() };
    let params = [
        "-q",
        "-c",
        "-m",
        "P.5,7,3",
        "-m",
        "ndcg.1=3,2=9,4=4.5",
        "-m",
        "ndcg_cut.10,20,23.4",
        "-m",
        "Rprec_mult.5.0,0.2",
        "-m",
        "success.2,5",
        "-m",
        "iprec_at_recall..10,.5",
        "-m",
        "utility.2,-1,0,0",
        "-m",
        "rbp.p=0.5",
    ];
    let jg = ["-q", "-c", "-R", "qrels_jg", "-m", "qrels_jg"];
    let jg_with = |extra: &[&'static str]| -> Vec<&'static str> { jg.iter().chain(extra).copied().collect() };
    let cases: Vec<(&str, &str, Vec<&str>)> = vec![
        ("edge", "all", with(&[])),
        ("random", "all", with(&[])),
        ("binary", "all", with(&[])),
        ("pool", "all", with(&[])),
        ("mixed", "all", with(&[])),
        ("pool", "allnoc", vec!["-m", "all_trec"]),
        ("pool", "allM10", with(&["-M", "10"])),
        ("pool", "allJ", with(&["-J"])),
        ("pool", "alll2", with(&["-l", "2"])),
        ("pool", "allN5000", with(&["-N", "5000"])),
        ("pool", "nom", vec!["-q", "-c"]),
        ("edge", "nom", vec!["-q", "-c"]),
        ("pool", "params", params.to_vec()),
        ("edge", "params", params.to_vec()),
        ("pool", "utilN", vec!["-q", "-c", "-N", "5000", "-m", "utility.1,-1,-0.5,0.001"]),
        ("pool", "selP", vec!["-q", "-c", "-m", "P", "-m", "P.10"]),
        ("pool", "selndcgcut", vec!["-q", "-c", "-m", "ndcg_cut", "-m", "ndcg_cut.3"]),
        ("pool", "seloff", vec!["-q", "-c", "-m", "official", "-m", "P.2"]),
        ("pool", "selrecall", vec!["-q", "-c", "-m", "recall", "-m", "recall.4"]),
        ("edge", "allZ", with(&["-Z", zscores])),
    ];
    for (pair, suffix, args) in &cases {
        let out = rankpulse_eval(args, &dir.join(format!("{pair}.qrels")), &dir.join(format!("{pair}.run")));
        assert_same(&format!("{pair}.{suffix}"), &out, &dir.join(format!("{pair}.{suffix}.out")));
    }
    let jg_cases: Vec<(&str, Vec<&str>)> = vec![
        ("jg", jg_with(&[])),
        ("jgJ", jg_with(&["-J"])),
        ("jgM10", jg_with(&["-M", "10"])),
        ("jgl2", jg_with(&["-l", "2"])),
        ("jgl0", jg_with(&["-l", "0"])),
        ("jgparams", jg_with(&["-m", "P_avgjg.7,1,3,2000", "-m", "Rprec_mult_avgjg.1.5,0.5,-1,3.25,0.333"])),
    ];
    for (suffix, args) in &jg_cases {
        let out = rankpulse_eval(args, &dir.join("judgegroups.qrels_jg"), &dir.join("judgegroups.run"));
        assert_same(&format!("judgegroups.{suffix}"), &out, &dir.join(format!("judgegroups.{suffix}.out")));
    }
    let probes = dir.join("probes");
    for probe in [
        "crlf",
        "vt_ff_whitespace",
        "all_negative_topic",
        "over_1000",
        "mixed_runid",
        "dup_run_unjudged_topic",
        "grade_above_9",
        "judged_only_nan",
        "placeholder_docno",
    ] {
        let out = rankpulse_eval(&all, &probes.join(format!("{probe}.qrels")), &probes.join(format!("{probe}.run")));
        assert_same(&format!("probes/{probe}.all"), &out, &probes.join(format!("{probe}.all.out")));
    }
}

/// Preference judgments (`-R prefs`, `-R qrels_prefs`), commands as in
/// `prefs/make.sh`.
#[test]
fn preference_measures_match_trec_eval_byte_for_byte() {
    let dir = fixtures().join("prefs");
    let cases: [(&str, &[&str], &str, &str); 7] = [
        ("multi.q.out", &["-q", "-m", "all_prefs", "-R", "prefs"], "multi.prefs", "multi.run"),
        ("multi.c.out", &["-q", "-c", "-m", "all_prefs", "-R", "prefs"], "multi.prefs", "multi_partial.run"),
        ("multi.M5.out", &["-q", "-M", "5", "-m", "all_prefs", "-R", "prefs"], "multi.prefs", "multi.run"),
        ("graded.q.out", &["-q", "-m", "all_prefs", "-R", "qrels_prefs"], "graded.qrels", "graded.run"),
        ("graded.c.out", &["-q", "-c", "-m", "all_prefs", "-R", "qrels_prefs"], "graded.qrels", "graded_partial.run"),
        ("graded.M5.out", &["-q", "-M", "5", "-m", "all_prefs", "-R", "qrels_prefs"], "graded.qrels", "graded.run"),
        ("edge.c.out", &["-q", "-c", "-m", "all_prefs", "-R", "prefs"], "edge.prefs", "edge.run"),
    ];
    for (expected, args, judgments, run) in cases {
        let out = rankpulse_eval(args, &dir.join(judgments), &dir.join(run));
        assert_same(&format!("prefs/{expected}"), &out, &dir.join(expected));
    }
    // A measure that needs another format is refused before reading.
    let out = rankpulse_eval(&["-R", "prefs", "-m", "map"], &dir.join("multi.prefs"), &dir.join("multi.run"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("measure map needs qrels judgments"));
}

/// Topics whose judgments are all negative make trec_eval exit 4 (when the
/// topic sorts first) or crash (otherwise; `errors/*.expected`). rankpulse
/// evaluates them as topics with nothing judged: their values are 0 and the
/// other topic's lines are exactly what it gets alone.
#[test]
fn all_negative_topics_are_evaluated_where_trec_eval_fails() {
    let dir = fixtures().join("errors");
    let args = ["-q", "-c", "-m", "all_trec"];
    for (case, bad, good) in [
        ("first_topic_all_unjudged", "1", "2"),
        ("first_topic_below_minus1", "1", "2"),
        ("later_topic_below_minus1", "2", "1"),
    ] {
        let expected: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{case}.expected"))).unwrap()).unwrap();
        assert_ne!(expected["exit_code"], 0, "{case}: trec_eval no longer fails here");
        let qrels = dir.join(format!("{case}.qrels"));
        let run = dir.join(format!("{case}.run"));
        let out = rankpulse_eval(&args, &qrels, &run);
        assert!(out.status.success(), "{case}: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8(out.stdout).unwrap();
        let lines_of = |text: &str, qid: &str| -> Vec<String> {
            text.lines().filter(|l| l.split('\t').nth(1) == Some(qid)).map(str::to_string).collect()
        };
        for line in lines_of(&text, bad) {
            let value = line.rsplit('\t').next().unwrap();
            assert!(value == "0" || value == "0.0000" || value == "''", "{case}: {line}");
        }
        // The good topic alone, in a file of its own.
        let tmp = std::env::temp_dir().join(format!("rankpulse-{case}-{}", std::process::id()));
        std::fs::create_dir_all(&tmp).unwrap();
        let keep = |path: &Path| -> String {
            std::fs::read_to_string(path)
                .unwrap()
                .lines()
                .filter(|l| l.split_whitespace().next() == Some(good))
                .map(|l| format!("{l}\n"))
                .collect()
        };
        std::fs::write(tmp.join("q"), keep(&qrels)).unwrap();
        std::fs::write(tmp.join("r"), keep(&run)).unwrap();
        let alone = rankpulse_eval(&args, &tmp.join("q"), &tmp.join("r"));
        std::fs::remove_dir_all(&tmp).unwrap();
        let alone = String::from_utf8(alone.stdout).unwrap();
        assert!(!lines_of(&alone, good).is_empty(), "{case}");
        assert_eq!(lines_of(&text, good), lines_of(&alone, good), "{case}");
    }
}

/// trec_eval's command line as its users type it: long options, repeated
/// flags (the last value wins), `atol` numbers; ids printed as the files
/// spell them, UTF-8 or not; a document retrieved twice refused only where
/// it is evaluated (both times within `-M`).
#[test]
fn command_line_and_ids_as_trec_eval() {
    let dir = fixtures();
    let (qrels, run) = (dir.join("edge.qrels"), dir.join("edge.run"));
    let short = rankpulse_eval(&["-q", "-m", "map", "-m", "P.5", "-l", "1", "-M", "3", "-N", "7"], &qrels, &run);
    assert!(short.status.success());
    for long in [
        vec![
            "--query_eval_wanted",
            "--measure",
            "map",
            "--measure=P.5",
            "--level_for_rel",
            "1",
            "--Max_retrieved_per_topic=3",
        ],
        vec!["-q", "-q", "-m", "map", "-m", "P.5", "-l", "2", "-l", "1.5", "-M", "3x", "-N", "7.9"],
    ] {
        let out = rankpulse_eval(&long, &qrels, &run);
        assert!(out.status.success(), "{long:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout, short.stdout, "{long:?}");
    }

    let tmp = std::env::temp_dir().join(format!("rankpulse-cli-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    std::fs::write(tmp.join("q"), b"\xff1 0 a 1\n\xff1 0 b 0\nq 0 a 1\n").unwrap();
    // Topic \xff1 retrieves `a` twice, the second time at rank 3.
    std::fs::write(
        tmp.join("r"),
        b"\xff1 Q0 a 1 3 r\xfe\n\xff1 Q0 b 2 2 r\xfe\n\xff1 Q0 a 3 1 r\xfe\nq Q0 a 1 1 r\xfe\n",
    )
    .unwrap();
    std::fs::write(tmp.join("r1"), b"\xff1 Q0 a 1 3 r\xfe\n\xff1 Q0 b 2 2 r\xfe\nq Q0 a 1 1 r\xfe\n").unwrap();
    let cut = rankpulse_eval(&["-q", "-M", "2", "-m", "runid", "-m", "map"], &tmp.join("q"), &tmp.join("r"));
    let once = rankpulse_eval(&["-q", "-M", "2", "-m", "runid", "-m", "map"], &tmp.join("q"), &tmp.join("r1"));
    let whole = rankpulse_eval(&["-q", "-m", "map"], &tmp.join("q"), &tmp.join("r"));
    let other = rankpulse_eval(&["-q", "-D", "0.q", "-m", "map"], &tmp.join("q"), &tmp.join("r"));
    std::fs::remove_dir_all(&tmp).unwrap();
    assert!(cut.status.success(), "{}", String::from_utf8_lossy(&cut.stderr));
    assert_eq!(cut.stdout, once.stdout);
    // trec_eval 10.0 prints exactly these bytes for `-q -M 2 -m runid -m map`
    // on these files: topics in byte order ("q" < 0xff), runid before map.
    let expected: &[u8] = b"map                   \tq\t1.0000\nmap                   \t\xff1\t1.0000\n\
runid                 \tall\tr\xfe\nmap                   \tall\t1.0000\n";
    assert_eq!(cut.stdout, expected, "{}", String::from_utf8_lossy(&cut.stdout));
    assert_eq!(whole.status.code(), Some(2), "the duplicate is within the ranking trec_eval evaluates");
    assert!(String::from_utf8_lossy(&whole.stderr).contains("retrieved twice"));
    assert!(other.status.success(), "-D names the other topic: {}", String::from_utf8_lossy(&other.stderr));
}

/// Where trec_eval divides 0 by 0 (an empty ranking under `-J` or `-M 0`)
/// it prints `-nan`, per topic and in the summary; rankpulse prints a number
/// there (0 per topic) and every other line exactly as trec_eval.
#[test]
fn empty_rankings_give_numbers_where_trec_eval_prints_nan() {
    let probes = fixtures().join("probes");
    for (suffix, extra) in [("allJ", "-J"), ("allM0", "-M0")] {
        let out = rankpulse_eval(
            &["-q", "-c", "-m", "all_trec", extra],
            &probes.join("judged_only_nan.qrels"),
            &probes.join("judged_only_nan.run"),
        );
        assert!(out.status.success(), "{suffix}: {}", String::from_utf8_lossy(&out.stderr));
        let ours = String::from_utf8(out.stdout).unwrap();
        let theirs = std::fs::read_to_string(probes.join(format!("judged_only_nan.{suffix}.out"))).unwrap();
        assert_eq!(ours.lines().count(), theirs.lines().count(), "{suffix}");
        let mut nan_lines = 0;
        for (o, t) in ours.lines().zip(theirs.lines()) {
            if t.ends_with("nan") {
                nan_lines += 1;
                let (o_key, o_value) = o.rsplit_once('\t').unwrap();
                assert_eq!(o_key, t.rsplit_once('\t').unwrap().0, "{suffix}");
                let value: f64 = o_value.trim().parse().unwrap();
                assert!(value.is_finite(), "{suffix}: {o}");
                if !o_key.ends_with("\tall") {
                    assert_eq!(value, 0.0, "{suffix}: {o}");
                }
            } else {
                assert_eq!(o, t, "{suffix}");
            }
        }
        assert!(nan_lines > 0, "{suffix}: the probe no longer exercises trec_eval's nan");
    }
}

/// Inputs trec_eval also refuses; rankpulse says which file and line.
#[test]
fn malformed_input_exits_2_naming_file_and_line() {
    let dir = fixtures().join("errors");
    let cases: &[(&str, &str)] = &[
        ("dup_run", "dup_run.run:"),
        ("dup_qrels", "dup_qrels.qrels:"),
        ("dup_qrels_unrun", "dup_qrels_unrun.qrels:"),
        ("run_5col", "run_5col.run:"),
        ("qrels_3col", "qrels_3col.qrels:"),
        ("qrels_5col", "qrels_5col.qrels:"),
        ("empty_run", "empty_run.run: no result lines"),
        ("empty_qrels", "empty_qrels.qrels: no judgment lines"),
    ];
    let cq: Vec<&str> = ["-c", "-q"].iter().chain(CQ_MEASURES).copied().collect();
    for (case, needle) in cases {
        let out = rankpulse_eval(&cq, &dir.join(format!("{case}.qrels")), &dir.join(format!("{case}.run")));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
        assert!(stderr.contains(needle), "{case}: stderr {stderr:?} lacks {needle:?}");
        if !needle.contains("no ") {
            // "path:LINE: message"
            let after = stderr.split(needle).nth(1).unwrap_or("");
            assert!(after.chars().next().is_some_and(|c| c.is_ascii_digit()), "{case}: no line number in {stderr:?}");
        }
    }
}

#[test]
fn missing_file_and_bad_measure_exit_2() {
    let dir = fixtures();
    let out = rankpulse_eval(&["-m", "map"], &dir.join("nope.qrels"), &dir.join("edge.run"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nope.qrels"));
    let out = rankpulse_eval(&["-m", "bpreff"], &dir.join("edge.qrels"), &dir.join("edge.run"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown measure \"bpreff\""));
}

/// Inputs trec_eval scores that rankpulse once refused or printed
/// differently: a run of comments only under `-c` (every topic 0); `-Z`
/// against means of `nan` and `-nan` and an infinite deviation, one line
/// split by a vertical tab (printed `nan` / `-nan` as glibc does); options
/// and parameters as getopt_long, atol and atof read them.
#[test]
fn odd_but_valid_command_lines_and_inputs_match_trec_eval() {
    let dir = fixtures();
    let nothing = [
        "-c",
        "-q",
        "-m",
        "num_q",
        "-m",
        "num_ret",
        "-m",
        "num_rel",
        "-m",
        "num_rel_ret",
        "-m",
        "map",
        "-m",
        "P.5",
        "-m",
        "ndcg_cut.10",
        "-m",
        "recip_rank",
    ];
    let out = rankpulse_eval(&nothing, &dir.join("nothing.qrels"), &dir.join("nothing.run"));
    assert_same("nothing.nothing", &out, &dir.join("nothing.nothing.out"));
    let zscores = dir.join("znan.zscores");
    let z = ["-q", "-c", "-m", "map", "-m", "P.5", "-Z", zscores.to_str().unwrap()];
    let out = rankpulse_eval(&z, &dir.join("znan.qrels"), &dir.join("znan.run"));
    assert_same("znan.Z", &out, &dir.join("znan.Z.out"));
    // Long options by unique prefix, -M past i64 (saturated, as atol),
    // hexadecimal parameters (as atof).
    let hex = [
        "--query",
        "--complete",
        "-M",
        "99999999999999999999",
        "-m",
        "ndcg.1=0x10,2=0x1p3",
        "-m",
        "set_F.0x0.8p1",
        "-m",
        "iprec_at_recall.0x0.8p0,0x.4",
        "-m",
        "Rprec_mult.0x2",
        "-m",
        "P.5",
    ];
    let out = rankpulse_eval(&hex, &dir.join("edge.qrels"), &dir.join("edge.run"));
    assert_same("edge.hex", &out, &dir.join("edge.hex.out"));
}

/// When no topic is left to evaluate, nothing reaches stdout: a script
/// reading the report gets no partial one beside the error (trec_eval
/// prints nothing either).
#[test]
fn no_topic_to_evaluate_prints_no_report() {
    let dir = fixtures();
    for (args, needle) in [
        (&["-c", "-m", "map", "-D", "0.99"][..], "topic \"99\" (-D) is not among the topics evaluated"),
        (&["-D", "0.99"][..], "topic \"99\" (-D)"),
        (&[][..], "no topic has both results"),
    ] {
        let run = if args.is_empty() { "nothing.run" } else { "edge.run" };
        let qrels = if args.is_empty() { "nothing.qrels" } else { "edge.qrels" };
        let out = rankpulse_eval(args, &dir.join(qrels), &dir.join(run));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "", "{args:?}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
    }
}
