//! trec_eval's preference measures against trec_eval 10.0 itself: every
//! per-topic and summary line of `-m all_prefs` recorded in
//! `tests/fixtures/trec/prefs/` (see its README) must come out of
//! `eval::prefs` byte for byte, formatted as trec_eval prints them.
//!
//! `trec_eval_own_test_data` (ignored: run it with `--ignored`) does the
//! same on the test files shipped with trec_eval's source, which are not in
//! this repository: set `TREC_EVAL_TEST_DIR` to its `test/` folder
//! (default `/work/exp/te/test`).

use rankpulse_core::eval::prefs::{self, MEASURES, N, PrefsQrels, Scratch};
use rankpulse_core::eval::trec::{self, Retrieved};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/trec/prefs")
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Prefs,
    QrelsPrefs,
}

/// One trec_eval command: its inputs, options and recorded output.
struct Case<'p> {
    judgments: &'p Path,
    run: &'p Path,
    expected: &'p Path,
    format: Format,
    complete: bool,
    max_docs: usize,
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// The lines `rankpulse` would print for the prefs measures, per topic then
/// the summary, computed the way the caller of `eval::prefs` does.
fn our_lines(case: &Case) -> Vec<String> {
    let jbuf = read(case.judgments);
    let rbuf = read(case.run);
    let qrels: PrefsQrels = match case.format {
        Format::Prefs => prefs::parse_prefs(case.judgments, &jbuf),
        Format::QrelsPrefs => prefs::parse_qrels_prefs(case.judgments, &jbuf),
    }
    .unwrap_or_else(|e| panic!("{e}"));
    let run = trec::parse_run(case.run, &rbuf).unwrap_or_else(|e| panic!("{e}"));
    let by_name: HashMap<&[u8], usize> = run.topics.names.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let placeholder = [Retrieved { doc: b"ceci_nest_pas_un_docno", key: 0, score: 1.0 }];

    let mut scratch = Scratch::new();
    let mut lines = Vec::new();
    let mut sums = [0.0; N];
    let mut evaluated = 0;
    for t in 0..qrels.len() {
        let topic = qrels.topic(t);
        let results = match by_name.get(topic.name()) {
            Some(&r) => run.topics.topic(r),
            None if case.complete => &placeholder[..],
            None => panic!(
                "{}: topic {:?} has no results: trec_eval would exit 4 without -c",
                case.run.display(),
                String::from_utf8_lossy(topic.name())
            ),
        };
        let mut values = [0.0; N];
        prefs::evaluate_topic(topic, results, case.max_docs, &mut scratch, &mut values);
        prefs::accumulate(&mut sums, &values);
        evaluated += 1;
        let qid = String::from_utf8_lossy(topic.name());
        for (i, v) in values.iter().enumerate() {
            lines.push(format!("{:<22}\t{qid}\t{}", MEASURES[i], prefs::format_value(i, *v)));
        }
    }
    let num_q = if case.complete { qrels.len() } else { evaluated };
    lines.push(format!("{:<22}\tall\t{num_q}", "num_q"));
    for (i, v) in prefs::summarize(&sums, num_q).iter().enumerate() {
        lines.push(format!("{:<22}\tall\t{}", MEASURES[i], prefs::format_value(i, *v)));
    }
    lines
}

/// trec_eval's lines for the prefs measures (and `num_q`), in its order.
fn their_lines(path: &Path) -> Vec<String> {
    let text = String::from_utf8(read(path)).expect("trec_eval output is ASCII");
    let lines: Vec<String> = text
        .lines()
        .filter(|l| {
            let name = l.split('\t').next().unwrap_or("").trim_end();
            name == "num_q" || MEASURES.contains(&name)
        })
        .map(str::to_string)
        .collect();
    assert!(!lines.is_empty(), "{}: no prefs measure lines", path.display());
    lines
}

/// Compares every line; returns how many matched, panics listing the
/// first differences otherwise.
fn compare(case: &Case) -> usize {
    let ours = our_lines(case);
    let theirs = their_lines(case.expected);
    let mut bad: Vec<String> = ours
        .iter()
        .zip(&theirs)
        .filter(|(o, t)| o != t)
        .map(|(o, t)| format!("  trec_eval: {t:?}\n  rankpulse: {o:?}"))
        .collect();
    if ours.len() != theirs.len() {
        bad.push(format!("  {} lines from trec_eval, {} from rankpulse", theirs.len(), ours.len()));
    }
    let shown: Vec<&str> = bad.iter().take(20).map(String::as_str).collect();
    assert!(bad.is_empty(), "{}: {} differences:\n{}", case.expected.display(), bad.len(), shown.join("\n"));
    ours.len()
}

/// The commands of `make.sh`: (output, judgments, run, format, -c, -M).
const COMMANDS: [(&str, &str, &str, Format, bool, usize); 7] = [
    ("multi.q.out", "multi.prefs", "multi.run", Format::Prefs, false, usize::MAX),
    ("multi.c.out", "multi.prefs", "multi_partial.run", Format::Prefs, true, usize::MAX),
    ("multi.M5.out", "multi.prefs", "multi.run", Format::Prefs, false, 5),
    ("graded.q.out", "graded.qrels", "graded.run", Format::QrelsPrefs, false, usize::MAX),
    ("graded.c.out", "graded.qrels", "graded_partial.run", Format::QrelsPrefs, true, usize::MAX),
    ("graded.M5.out", "graded.qrels", "graded.run", Format::QrelsPrefs, false, 5),
    ("edge.c.out", "edge.prefs", "edge.run", Format::Prefs, true, usize::MAX),
];

#[test]
fn fixtures_match_trec_eval() {
    let dir = fixtures();
    let mut lines = 0;
    for (out, judgments, run, format, complete, max_docs) in COMMANDS {
        lines += compare(&Case {
            judgments: &dir.join(judgments),
            run: &dir.join(run),
            expected: &dir.join(out),
            format,
            complete,
            max_docs,
        });
    }
    // Every output file of the folder is checked (a new one must be listed).
    let outs = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter(|e| e.as_ref().is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".out")))
        .count();
    assert_eq!(outs, COMMANDS.len(), "every .out file is in COMMANDS");
    assert!(lines > 2000, "only {lines} lines compared");
}

/// Judgments on which trec_eval exits 4 or aborts are refused when read,
/// naming the file and a line.
#[test]
fn inconsistent_judgments_are_refused() {
    let dir = fixtures().join("refused");
    let mut cases = 0;
    for entry in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.extension().is_none_or(|e| e != "prefs") {
            continue;
        }
        let expected = String::from_utf8(read(&path.with_extension("expected"))).expect("ASCII");
        assert!(!expected.contains("\"exit_code\": 0"), "{expected}");
        let buf = read(&path);
        match prefs::parse_prefs(&path, &buf) {
            Err(e @ prefs::PrefsError::Inconsistent { .. }) => {
                let message = e.to_string();
                assert!(message.starts_with(&format!("{}:", path.display())), "{message}");
            }
            other => panic!("{}: expected a refusal, got {other:?}", path.display()),
        }
        cases += 1;
    }
    assert_eq!(cases, 4, "refused/ cases");
}

#[test]
#[ignore = "trec_eval-suite tier: needs trec_eval's own test files (TREC_EVAL_TEST_DIR), run with --ignored (.ci/run does)"]
fn trec_eval_own_test_data() {
    // Run with `cargo test --test core_it -- --ignored eval_prefs::`; fails (rather
    // than passes) when the files are missing.
    let dir = PathBuf::from(std::env::var("TREC_EVAL_TEST_DIR").unwrap_or_else(|_| "/work/exp/te/test".into()));
    let prefs = compare(&Case {
        judgments: &dir.join("prefs.test"),
        run: &dir.join("prefs.results.test"),
        expected: &dir.join("out.test.prefs"),
        format: Format::Prefs,
        complete: false,
        max_docs: usize::MAX,
    });
    let comment = compare(&Case {
        judgments: &dir.join("prefs.comment.test"),
        run: &dir.join("prefs.results.test"),
        expected: &dir.join("out.test.prefs"),
        format: Format::Prefs,
        complete: false,
        max_docs: usize::MAX,
    });
    let qrels = compare(&Case {
        judgments: &dir.join("qrels.test"),
        run: &dir.join("results.test"),
        expected: &dir.join("out.test.qrels_prefs"),
        format: Format::QrelsPrefs,
        complete: false,
        max_docs: usize::MAX,
    });
    eprintln!("matched {prefs} + {comment} + {qrels} lines");
}
