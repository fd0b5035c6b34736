//! Configuration keys as replay applies them: each decides what its documentation says.

use super::*;

#[test]
fn bad_config_is_refused_naming_the_key() {
    let dir = std::env::temp_dir().join(format!("rankpulse-replay-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("bad.toml");
    std::fs::write(&config, "[windows]\nbucket = \"ten seconds\"\n").unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (code, _, err) = replay(&["--config", config.to_str().unwrap()], &file);
    assert_eq!(code, 2);
    assert!(err.contains("config key windows.bucket"), "{err}");
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["replay", file.to_str().unwrap()])
        .env("RANKPULSE__METRICS__GAIN", "quadratic")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("config key metrics.gain"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// `metrics.relevance_threshold` set through the environment, on
/// small.jsonl (values of `hand_computed_replay`). At 3, the candidate's
/// one judged document (grade 2) is no longer relevant for the binary
/// metrics: its MRR@1 falls from 1 to 0 (`no_relevant = "zero"`: counted
/// as 0) and the list counts as having nothing relevant (binary); its
/// nDCG@1, from grades, stays 1. The control list's b (grade 3) still
/// counts: MRR@3 stays 1/2.
#[test]
fn the_relevance_threshold_decides_what_binary_metrics_count() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let run = |threshold: &str| {
        let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
            .args(["replay", file.to_str().unwrap()])
            .env("RANKPULSE__METRICS__RELEVANCE_THRESHOLD", threshold)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let control = r#"ranker="control",market="us"}"#;
    let candidate = r#"ranker="candidate",market="us"}"#;
    // Lists with nothing relevant at the threshold, over every ranker.
    let binary_none =
        |exposition: &str| rankpulse_testkit::sum_of(exposition, r#"rankpulse_lists_no_relevant_total{kind="binary","#);
    let (code, at1, err) = run("1");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(value(&at1, &format!(r#"rankpulse_mrr{{k="1",window="1h",{candidate}"#)), 1.0);
    assert_eq!(binary_none(&at1), 0.0);
    let (code, at3, err) = run("3");
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(value(&at3, &format!(r#"rankpulse_mrr{{k="1",window="1h",{candidate}"#)), 0.0);
    assert_eq!(value(&at3, &format!(r#"rankpulse_precision{{k="1",window="1h",{candidate}"#)), 0.0);
    assert_eq!(value(&at3, &format!(r#"rankpulse_ndcg{{k="1",window="1h",{candidate}"#)), 1.0);
    assert_eq!(value(&at3, &format!(r#"rankpulse_mrr{{k="3",window="1h",{control}"#)), 0.5);
    assert_eq!(binary_none(&at3), 1.0);
    assert_eq!(value(&at3, &format!(r#"rankpulse_lists_no_relevant_total{{kind="binary",{candidate}"#)), 1.0);
    // Outside 1..=metrics.max_grade (4 by default): refused, naming the key.
    for refused in ["0", "5"] {
        let (code, _, err) = run(refused);
        assert_eq!(code, Some(2), "{refused}");
        assert!(err.contains("metrics.relevance_threshold"), "{err}");
    }
}

/// `late.policy` and `late.horizon` through a config file. List L1
/// (control) shows a, b; a is judged not relevant (grade 0) at once.
/// A list of another ranker 40 s later, and a click on it, move both
/// topics' event time past L1's gap (30 s): L1 is final. Then a click on
/// L1's b (2 s after its impression) arrives late.
///   amend (the default): L1's MRR@3 = 1/2 (b at rank 2), one amended;
///   drop: L1 keeps MRR@3 = 0 (nothing relevant, counted as 0), one dropped;
///   horizon 0s: nothing remembered, neither counted, L1 keeps 0.
#[test]
fn late_judgments_are_amended_or_dropped_as_configured() {
    let t0 = 1_700_000_000_000i64;
    let lines = [
        impression_line("i1", "L1", t0, &["a", "b"], "control"),
        judgment_line("j1", "L1", "a", r#""grade":0"#, t0 + 1_000),
        impression_line("i2", "L2", t0 + 40_000, &["x"], "candidate"),
        judgment_line("j2", "L2", "x", r#""action":"click""#, t0 + 41_000),
        judgment_line("j3", "L1", "b", r#""action":"click""#, t0 + 2_000),
    ];
    let events = Scratch::new("late.jsonl", (lines.join("\n") + "\n").as_bytes());
    let control = r#"rankpulse_mrr{k="3",window="1h",ranker="control",market="us"}"#;
    let late = |outcome: &str| format!(r#"rankpulse_late_judgments_total{{outcome="{outcome}"}}"#);
    let with = |toml: &str| {
        let config = Scratch::new(&format!("late-{}.toml", toml.len()), toml.as_bytes());
        let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
        assert_eq!(code, 0, "{toml}: {err}");
        out
    };
    let amend = with("");
    assert_eq!(value(&amend, control), 0.5, "{amend}");
    assert_eq!(value(&amend, &late("amended")), 1.0);
    let drop = with("[late]\npolicy = \"drop\"\n");
    assert_eq!(value(&drop, control), 0.0, "{drop}");
    assert_eq!(value(&drop, &late("dropped")), 1.0);
    let forget = with("[late]\nhorizon = \"0s\"\n");
    assert_eq!(value(&forget, control), 0.0, "{forget}");
    assert!(!forget.contains(&late("amended")) || value(&forget, &late("amended")) == 0.0, "{forget}");
    assert!(!forget.contains(&late("dropped")) || value(&forget, &late("dropped")) == 0.0, "{forget}");
    // A horizon that ends before the click comes. L1 closed at t0 + 31 s
    // (its last event at t0 + 1 s, then the 30 s gap); the click is read
    // with event time at t0 + 41 s, 10 s later: a horizon of 10 s takes
    // it, one a millisecond shorter has forgotten L1, and the click starts
    // a list of its own that ends orphan.
    let within = with("[late]\nhorizon = \"10s\"\n");
    assert_eq!(value(&within, control), 0.5, "{within}");
    assert_eq!(value(&within, &late("amended")), 1.0, "{within}");
    let past = with("[late]\nhorizon = \"9999ms\"\n");
    assert_eq!(value(&past, control), 0.0, "{past}");
    assert_eq!(value(&past, &late("amended")), 0.0, "{past}");
    assert_eq!(value(&past, "rankpulse_orphan_lists_total"), 1.0, "{past}");
}

/// `dimensions.labels` and `windows.spans` other than the defaults, end
/// to end: the labels are the configured ones (an event's other
/// dimensions are not labels), the windows are the configured spans,
/// labelled as written. L1 (control, jp) shows a, b, b clicked: MRR@1 0,
/// MRR@3 1/2; L2 an hour later shows x, clicked: 1 and 1. The 90s window
/// (ending at the newest event) holds L2 alone, the 3h window both:
/// MRR@1 (0 + 1)/2, MRR@3 (1/2 + 1)/2.
#[test]
fn configured_labels_and_windows_are_the_exposed_ones() {
    let t0 = 1_700_000_000_000i64;
    let impression = |id: &str, s: &str, t: i64, docs: &str, dims: &str| {
        format!(
            r#"{{"type":"impression","event_id":"{id}","session_id":"{s}","timestamp":{t},"results":[{docs}],"dimensions":{{{dims}}}}}"#
        )
    };
    let lines = [
        impression("i1", "L1", t0, r#"{"doc_id":"a"},{"doc_id":"b"}"#, r#""ranker":"control","country":"jp""#),
        judgment_line("j1", "L1", "b", r#""action":"click""#, t0 + 1_000),
        impression(
            "i2",
            "L2",
            t0 + 3_600_000,
            r#"{"doc_id":"x"}"#,
            r#""ranker":"control","country":"jp","market":"us""#,
        ),
        judgment_line("j2", "L2", "x", r#""action":"click""#, t0 + 3_601_000),
    ];
    let events = Scratch::new("labels-windows.jsonl", (lines.join("\n") + "\n").as_bytes());
    let config = Scratch::new(
        "labels-windows.toml",
        b"[dimensions]\nlabels = [\"ranker\", \"country\"]\n[windows]\nspans = [\"90s\", \"3h\"]\n",
    );
    let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
    assert_eq!(code, 0, "{err}");
    let g = |name: &str, window: &str| {
        value(&out, &format!(r#"rankpulse_{name}{{window="{window}",ranker="control",country="jp"}}"#))
    };
    let mrr = |k: u32, window: &str| {
        value(&out, &format!(r#"rankpulse_mrr{{k="{k}",window="{window}",ranker="control",country="jp"}}"#))
    };
    assert_eq!(g("lists", "90s"), 1.0, "{out}");
    assert_eq!(g("lists", "3h"), 2.0, "{out}");
    assert_eq!((mrr(1, "90s"), mrr(3, "90s")), (1.0, 1.0));
    assert_eq!((mrr(1, "3h"), mrr(3, "3h")), (0.5, 0.75));
    for absent in [r#"window="1h""#, r#"window="5m""#, "market="] {
        assert!(!out.contains(absent), "{absent}: {out}");
    }
}

/// `metrics.gain`, `metrics.no_relevant`, `metrics.max_grade` and
/// `metrics.gauc_weight` through the environment, each against values
/// derived by hand (docs/metrics.md's conventions), so that a key that was
/// read and then ignored fails here. Three control lists, positions as
/// shown, grades as judged (unjudged: 0):
///   L1: a 1, b 0, c 2.  L2: x 0, y (nothing relevant).  L3: p 1, q 0, r 4, s 1.
/// nDCG@3, exp2: L1 (1 + 3/2) / (3 + 1/log2 3); L3 (1 + 15/2) / (15 +
///   1/log2 3 + 1/2); linear: L1 (1 + 2/2) / (2 + 1/log2 3), L3 (1 + 4/2) /
///   (4 + 1/log2 3 + 1/2). no_relevant zero: mean of 3 (L2 is 0); skip: of 2.
/// ERR@3, R(g) = (2^g − 1)/2^max: max 4: L1 1/16 + (15/16)(3/16)/3, L3
///   1/16 + (15/16)(15/16)/3; max 3: r's grade 4 is rejected, L1 1/8 +
///   (7/8)(3/8)/3, L3 1/8.
/// AUC (display order): L1 a>b, c<b: 1/2; L3 p>q, r<q, s<q: 1/3 (with r
///   rejected: 1/2). GAUC: impressions (3, 4): (3/2 + 4/3)/7; uniform (1/2
///   + 1/3)/2; positives (2, 3): (1 + 1)/5; max 3, impressions: 1/2.
#[test]
fn metric_conventions_are_the_configured_ones() {
    let t0 = 1_700_000_000_000i64;
    let grade = |id: &str, s: &str, d: &str, g: u32, t: i64| judgment_line(id, s, d, &format!(r#""grade":{g}"#), t);
    let lines = [
        impression_line("i1", "L1", t0, &["a", "b", "c"], "control"),
        grade("ja", "L1", "a", 1, t0 + 100),
        grade("jb", "L1", "b", 0, t0 + 100),
        grade("jc", "L1", "c", 2, t0 + 100),
        impression_line("i2", "L2", t0 + 1_000, &["x", "y"], "control"),
        grade("jx", "L2", "x", 0, t0 + 1_100),
        impression_line("i3", "L3", t0 + 2_000, &["p", "q", "r", "s"], "control"),
        grade("jp", "L3", "p", 1, t0 + 2_100),
        grade("jq", "L3", "q", 0, t0 + 2_200),
        grade("jr", "L3", "r", 4, t0 + 2_200),
        grade("js", "L3", "s", 1, t0 + 2_200),
    ];
    let events = Scratch::new("conventions.jsonl", (lines.join("\n") + "\n").as_bytes());
    let run = |key: Option<(&str, &str)>| {
        let (code, out, err) = replay_env(&key.into_iter().collect::<Vec<_>>(), &[], &events.0);
        assert_eq!(code, 0, "{key:?}: {err}");
        let g = |name: &str| value(&out, &format!(r#"rankpulse_{name}window="1h",ranker="control",market="us"}}"#));
        (g(r#"ndcg{k="3","#), g(r#"err{k="3","#), g("gauc{"))
    };
    let l3 = 1f64 / 3f64.log2();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    let (ndcg_exp2, err4, gauc_impressions) = run(None);
    let (exp2_l1, exp2_l3) = (2.5 / (3.0 + l3), 8.5 / (15.0 + l3 + 0.5));
    assert!(close(ndcg_exp2, (exp2_l1 + exp2_l3) / 3.0), "{ndcg_exp2}");
    let (err4_l1, err4_l3) =
        (1.0 / 16.0 + (15.0 / 16.0) * (3.0 / 16.0) / 3.0, 1.0 / 16.0 + (15.0 / 16.0) * (15.0 / 16.0) / 3.0);
    assert!(close(err4, (err4_l1 + err4_l3) / 3.0), "{err4}");
    assert!(close(gauc_impressions, (1.5 + 4.0 / 3.0) / 7.0), "{gauc_impressions}");
    let (ndcg_linear, _, _) = run(Some(("RANKPULSE__METRICS__GAIN", "linear")));
    assert!(close(ndcg_linear, (2.0 / (2.0 + l3) + 3.0 / (4.0 + l3 + 0.5)) / 3.0), "{ndcg_linear}");
    let (ndcg_skip, _, _) = run(Some(("RANKPULSE__METRICS__NO_RELEVANT", "skip")));
    assert!(close(ndcg_skip, (exp2_l1 + exp2_l3) / 2.0), "{ndcg_skip}");
    let (_, err3, gauc3) = run(Some(("RANKPULSE__METRICS__MAX_GRADE", "3")));
    assert!(close(err3, (0.125 + (7.0 / 8.0) * (3.0 / 8.0) / 3.0 + 0.125) / 3.0), "{err3}");
    assert!(close(gauc3, 0.5), "{gauc3}");
    let (_, _, uniform) = run(Some(("RANKPULSE__METRICS__GAUC_WEIGHT", "uniform")));
    assert!(close(uniform, (0.5 + 1.0 / 3.0) / 2.0), "{uniform}");
    let (_, _, positives) = run(Some(("RANKPULSE__METRICS__GAUC_WEIGHT", "positives")));
    assert!(close(positives, 0.4), "{positives}");
}

/// `metrics.ideal` through a config file. One list shows a, b; b is
/// graded 1 and z, never shown, 3. nDCG@3 (exp2 gain):
///   DCG = (2¹ − 1) / log2 3 = 0.6309298;
///   judged ideal (3, 1): 7 + 1 / log2 3 → nDCG = 0.6309298 / 7.6309298;
///   shown ideal (b first): 1 → nDCG = 0.6309298.
#[test]
fn metrics_ideal_decides_what_ndcg_is_measured_against() {
    let t0 = 1_700_000_000_000i64;
    let lines = [
        impression_line("i1", "L1", t0, &["a", "b"], "control"),
        judgment_line("j1", "L1", "b", r#""grade":1"#, t0 + 1_000),
        judgment_line("j2", "L1", "z", r#""grade":3"#, t0 + 2_000),
    ];
    let events = Scratch::new("ideal.jsonl", (lines.join("\n") + "\n").as_bytes());
    let series = r#"rankpulse_ndcg{k="3",window="1h",ranker="control",market="us"}"#;
    let dcg = 1.0 / 3f64.log2();
    for (toml, want) in [("", dcg / (7.0 + dcg)), ("[metrics]\nideal = \"shown\"\n", dcg)] {
        let config = Scratch::new(&format!("ideal-{}.toml", toml.len()), toml.as_bytes());
        let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
        assert_eq!(code, 0, "{toml}: {err}");
        let got = value(&out, series);
        assert!((got - want).abs() < 1e-12, "{toml:?}: {got} != {want}");
    }
}

/// `windows.bucket` decides where a window's old edge falls. Lists at
/// T + 50 s and T + 100 s (T a whole minute), so "now" is T + 100 s and the
/// 1m window holds the buckets starting at or after T + 40 s (README):
///   10 s buckets: T + 50 s and T + 100 s → 2 lists;
///   1 m buckets:  T (before the edge) and T + 60 s → 1 list.
/// The 5m window (edge T − 200 s) holds both either way.
#[test]
fn windows_bucket_decides_the_windows_old_edge() {
    let t = 1_699_999_980_000i64;
    assert_eq!(t % 60_000, 0);
    let lines = [
        impression_line("i1", "A", t + 50_000, &["a"], "control"),
        impression_line("i2", "B", t + 100_000, &["a"], "control"),
    ];
    let events = Scratch::new("bucket.jsonl", (lines.join("\n") + "\n").as_bytes());
    let lists = |window: &str| format!(r#"rankpulse_lists{{window="{window}",ranker="control",market="us"}}"#);
    for (toml, one_minute) in [("", 2.0), ("[windows]\nbucket = \"1m\"\n", 1.0)] {
        let config = Scratch::new(&format!("bucket-{}.toml", toml.len()), toml.as_bytes());
        let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
        assert_eq!(code, 0, "{toml}: {err}");
        assert_eq!(value(&out, &lists("1m")), one_minute, "{toml:?}\n{out}");
        assert_eq!(value(&out, &lists("5m")), 2.0, "{toml:?}");
    }
}

/// `dimensions.max_combinations = 2`: rankers r1, r2 and r3 in one market
/// are three combinations; the third list is reported as `__other__` on
/// every label and counted once.
#[test]
fn dimensions_max_combinations_folds_new_combinations_into_other() {
    let t0 = 1_700_000_000_000i64;
    let lines: Vec<String> = ["r1", "r2", "r3"]
        .iter()
        .enumerate()
        .map(|(i, r)| impression_line(&format!("i{i}"), &format!("L{i}"), t0 + i as i64 * 1_000, &["a"], r))
        .collect();
    let events = Scratch::new("combinations.jsonl", (lines.join("\n") + "\n").as_bytes());
    let config = Scratch::new("combinations.toml", b"[dimensions]\nmax_combinations = 2\n");
    let finalized = |labels: &str| format!("rankpulse_lists_finalized_total{{{labels}}}");
    let overflow = "rankpulse_dimension_combinations_overflow_total";
    let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, overflow), 1.0, "{out}");
    assert_eq!(value(&out, &finalized(r#"ranker="__other__",market="__other__""#)), 1.0);
    assert_eq!(value(&out, &finalized(r#"ranker="r1",market="us""#)), 1.0);
    assert_eq!(value(&out, &finalized(r#"ranker="r2",market="us""#)), 1.0);
    assert!(!out.contains(r#"ranker="r3""#), "{out}");
    // The default (500) holds all three.
    let (code, out, err) = replay(&[], &events.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, overflow), 0.0, "{out}");
    assert_eq!(value(&out, &finalized(r#"ranker="r3",market="us""#)), 1.0);
}

/// `dimensions.max_value_bytes`: a ranker name of 257 bytes (past the
/// default 256) is reported as `__other__` and counted on its label; one
/// of 256 bytes is kept. At 300 (environment) both are kept.
#[test]
fn a_label_value_past_max_value_bytes_is_reported_as_other() {
    let t0 = 1_700_000_000_000i64;
    let (long, longest) = ("r".repeat(256), "r".repeat(257));
    let lines =
        [impression_line("i1", "L1", t0, &["a"], &long), impression_line("i2", "L2", t0 + 1_000, &["a"], &longest)];
    let events = Scratch::new("long-value.jsonl", (lines.join("\n") + "\n").as_bytes());
    let finalized = |ranker: &str| format!(r#"rankpulse_lists_finalized_total{{ranker="{ranker}",market="us"}}"#);
    let (code, out, err) = replay(&[], &events.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, r#"rankpulse_dimension_overflow_total{label="ranker"}"#), 1.0, "{out}");
    assert_eq!(value(&out, &finalized(&long)), 1.0);
    assert_eq!(value(&out, &finalized("__other__")), 1.0);
    assert!(!out.contains(&longest), "{out}");
    let (code, text, err) = replay_env(&[("RANKPULSE__DIMENSIONS__MAX_VALUE_BYTES", "300")], &[], &events.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&text, &finalized(&longest)), 1.0, "{text}");
    assert_eq!(value(&text, r#"rankpulse_dimension_overflow_total{label="ranker"}"#), 0.0);
}

/// An override with one underscore is not read; replay says so on stderr
/// rather than running silently with the default.
#[test]
fn a_lookalike_override_is_named_on_stderr() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (code, plain, _) = replay(&[], &fixture);
    assert_eq!(code, 0);
    let (code, out, err) = replay_env(&[("RANKPULSE_SESSION_GAP", "1s")], &[], &fixture);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain, "the variable changes nothing");
    assert!(
        err.contains("warning: environment variable RANKPULSE_SESSION_GAP is not read: overrides are named RANKPULSE__SECTION__KEY"),
        "{err}"
    );
    // So does `run --print-config`, the command offered for checking a
    // configuration.
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["run", "--print-config"])
        .env("RANKPULSE_SESSION_GAP", "1s")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("warning: environment variable RANKPULSE_SESSION_GAP is not read"), "{err}");
}

/// The series one combination of dimension values costs, and one compared
/// arm, as docs/operations.md sizes them ("Bounded memory") from the
/// configuration: with C cutoffs, W windows and the six cut metrics plus
/// GAUC (M = 6C + 1 metric-cutoff pairs), a combination has M × W window
/// gauges and as many standard errors, M × 3 since-start counters
/// (`_sum`, `_count`, `_sum_squares`), W `rankpulse_lists` gauges,
/// `lists_finalized_total`, two `lists_no_relevant_total` and the
/// exclusions (7 metrics: randomized; GAUC: single class; with
/// `no_relevant = "skip"`, the six cut metrics: no relevant); a compared
/// arm has M × W of each of the four `rankpulse_compare_*` gauges. The
/// stream has every grade, lists with nothing relevant and randomized
/// lists, so that every series that can exist does.
#[test]
fn series_per_combination_and_per_compared_arm_are_as_documented() {
    let mut lines = String::new();
    for (arm, prefix) in [("control", "c"), ("candidate", "x")] {
        for i in 0..200 {
            let (session, ts) = (format!("{prefix}{i}"), 1_700_000_000_000i64 + i * 1000);
            let results: Vec<String> =
                (0..10).map(|j| format!(r#"{{"doc_id":"d{j}","position":{},"score":{}}}"#, j + 1, 10 - j)).collect();
            let randomized = if i % 7 == 0 { r#","randomized":true"# } else { "" };
            lines += &format!(
                r#"{{"type":"impression","event_id":"{session}","session_id":"{session}","query_id":"q","timestamp":{ts},"results":[{}],"dimensions":{{"ranker":"{arm}","market":"us"}}{randomized}}}"#,
                results.join(",")
            );
            lines.push('\n');
            // Every third list also has a relevant document it did not show
            // (recall below 1 at every cutoff); the arms grade differently.
            for j in 0..if i % 3 == 0 { 11 } else { 10 } {
                let step = if arm == "control" { 1 } else { 3 };
                let grade = if i % 5 == 0 { 0 } else { (i + j * step) % 4 };
                lines += &format!(
                    r#"{{"type":"judgment","event_id":"{session}-{j}","session_id":"{session}","query_id":"q","doc_id":"d{j}","grade":{grade},"timestamp":{}}}"#,
                    ts + 100
                );
                lines.push('\n');
            }
        }
    }
    let file = Scratch::new("series.jsonl", lines.as_bytes());
    let config = rankpulse::config::Config::default();
    let (cutoffs, windows) = (config.metrics.cutoffs.len(), config.windows.spans.len());
    let pairs = 6 * cutoffs + 1;
    // The 4: compare.primary's session sums.
    let per_combination =
        |skip: bool| 2 * pairs * windows + 3 * pairs + windows + 1 + 2 + 8 + 4 + if skip { 6 } else { 0 };
    for (skip, env) in [(false, vec![]), (true, vec![("RANKPULSE__METRICS__NO_RELEVANT", "skip")])] {
        let (code, out, err) = replay_env(&env, &[], &file.0);
        assert_eq!(code, 0, "{err}");
        let series = |pattern: &str| out.lines().filter(|l| !l.starts_with('#') && l.contains(pattern)).count();
        assert_eq!(series(r#"ranker="control",market="us""#), per_combination(skip), "no_relevant skip: {skip}\n{out}");
        let compared = out.lines().filter(|l| l.starts_with("rankpulse_compare_")).count();
        // Welch per metric and window; the anytime-valid five on compare.primary.
        assert_eq!(compared, 4 * pairs * windows + 5, "{out}");
        assert!(
            out.lines().filter(|l| l.starts_with("rankpulse_compare_")).all(|l| l.contains(r#"ranker="candidate""#))
        );
    }
    // The figures docs/operations.md and config/default.toml give.
    assert_eq!((per_combination(false), per_combination(true), 4 * pairs * windows + 5), (243, 249, 305));
}
