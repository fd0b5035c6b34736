//! The exposition replay prints: values computed by hand, promtool, `--history`, and agreement with `rankpulse eval`.

use super::*;

/// small.jsonl holds two lists and one invalid line.
/// List (s1, q1), ranker control: shown a, b, c with scores 3, 2, 1; b is
/// clicked (grade 1) and then graded 3, so its grade is 3.
///   nDCG@3 (exp2) = (7 / log2 3) / 7 = 0.6309298; nDCG@1 = 0
///   MRR@1 = 0, MRR@3 = 1/2; ERR@3 = (1/2)(7/16) = 0.21875
///   P@3 = 1/3, R@3 = 1, AP@3 = 1/2; AUC: b (2) beats c (1), loses to a (3) → 1/2, weight 3
/// List (s2, no query), ranker candidate: shown a, b without scores; a graded 2.
///   nDCG@1 = 1, MRR@1 = 1, AUC by position = 1, weight 2
#[test]
fn hand_computed_replay() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (code, out, err) = replay(&[], &file);
    assert_eq!(code, 0, "{err}");
    let control = r#"ranker="control",market="us"}"#;
    let candidate = r#"ranker="candidate",market="us"}"#;
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(value(&out, &format!(r#"rankpulse_ndcg{{k="3",window="5m",{control}"#)), 1.0 / 3f64.log2()));
    assert_eq!(value(&out, &format!(r#"rankpulse_ndcg{{k="1",window="5m",{control}"#)), 0.0);
    assert_eq!(value(&out, &format!(r#"rankpulse_mrr{{k="3",window="1h",{control}"#)), 0.5);
    assert_eq!(value(&out, &format!(r#"rankpulse_err{{k="3",window="1m",{control}"#)), 0.21875);
    assert!(close(value(&out, &format!(r#"rankpulse_precision{{k="3",window="1m",{control}"#)), 1.0 / 3.0));
    assert_eq!(value(&out, &format!(r#"rankpulse_recall{{k="3",window="1m",{control}"#)), 1.0);
    assert_eq!(value(&out, &format!(r#"rankpulse_map{{k="3",window="1m",{control}"#)), 0.5);
    assert_eq!(value(&out, &format!(r#"rankpulse_gauc{{window="1m",{control}"#)), 0.5);
    assert_eq!(value(&out, &format!(r#"rankpulse_gauc_sum{{{control}"#)), 1.5);
    assert_eq!(value(&out, &format!(r#"rankpulse_gauc_count{{{control}"#)), 3.0);
    // Σ w·v² = 3 · 0.5².
    assert_eq!(value(&out, &format!(r#"rankpulse_gauc_sum_squares{{{control}"#)), 0.75);
    // nDCG@3 squared: (1 / log2 3)².
    assert!(close(
        value(&out, &format!(r#"rankpulse_ndcg_sum_squares{{k="3",{control}"#)),
        (1.0 / 3f64.log2()).powi(2)
    ));
    assert_eq!(value(&out, &format!(r#"rankpulse_ndcg{{k="1",window="1m",{candidate}"#)), 1.0);
    assert_eq!(value(&out, &format!(r#"rankpulse_gauc{{window="1m",{candidate}"#)), 1.0);
    assert_eq!(value(&out, &format!(r#"rankpulse_lists{{window="1h",{candidate}"#)), 1.0);
    assert_eq!(value(&out, &format!(r#"rankpulse_lists_finalized_total{{{control}"#)), 1.0);
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="invalid_json"}"#), 1.0);
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="too_large"}"#), 0.0);
    assert_eq!(value(&out, r#"rankpulse_events_total{topic="replay",type="judgment"}"#), 3.0);
    assert_eq!(value(&out, "rankpulse_open_lists"), 0.0);
    // A reject beside valid events is said, not only counted: judgments
    // stamped in seconds would otherwise zero every metric in silence.
    assert!(err.contains("small.jsonl: 1 of 6 line(s) rejected, the first (line 4) as invalid_json"), "{err}");
    // One list per window: no standard error yet.
    assert!(!out.contains("rankpulse_ndcg_stderr"), "{out}");
}

/// The exposition parses and lints clean with Prometheus's own checker,
/// except for the `_sum`/`_count` counter names the contract fixes (promtool
/// would like counters to end in `_total`). The Prometheus tier: needs
/// `promtool` on PATH (`.ci/run` installs it).
#[test]
#[ignore = "Prometheus tier: needs promtool on PATH, run with --ignored (.ci/run does)"]
fn exposition_passes_promtool() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (_, text, _) = replay(&[], &file);
    let child = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(c) => c,
        Err(e) => panic!("the Prometheus tier needs `promtool` on PATH (apt-get install prometheus): {e}"),
    };
    use std::io::Write;
    child.stdin.take().unwrap().write_all(text.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let unexpected: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| {
            let contract_name = l
                .split(' ')
                .next()
                .is_some_and(|n| n.ends_with("_sum") || n.ends_with("_count") || n.ends_with("_sum_squares"));
            let naming_lint = l.contains("should have \"_total\" suffix") || l.contains("should not have \"_");
            !(contract_name && naming_lint)
        })
        .collect();
    assert!(unexpected.is_empty(), "promtool check metrics:\n{}", unexpected.join("\n"));
    assert!(report.contains("rankpulse_ndcg_sum"), "the lint should have seen the contract names: {report}");
}

/// Online and offline agree (README): the same lists, replayed as events
/// and evaluated as a TREC run with `rankpulse eval`, give the same means,
/// under each relevance threshold and each `no_relevant` policy. The lists
/// hold every case of "nothing relevant": L2 has no positive grade, L4's
/// best grade (1) is below threshold 2, so at 2 it has an nDCG and an ERR
/// but no binary relevance.
#[test]
fn replay_and_eval_agree_on_every_no_relevant_case() {
    let t0 = 1_700_000_000_000i64;
    // (list, [(document, grade, if judged)]), in the order shown.
    type List<'a> = (&'a str, &'a [(&'a str, Option<u32>)]);
    let lists: [List; 4] = [
        ("L1", &[("a", Some(1)), ("b", Some(0)), ("c", Some(2))]),
        ("L2", &[("x", Some(0)), ("y", None)]),
        ("L3", &[("p", Some(1)), ("q", Some(0)), ("r", Some(4)), ("s", Some(1))]),
        ("L4", &[("u", Some(1)), ("v", Some(0))]),
    ];
    let (mut events, mut qrels, mut run) = (Vec::new(), String::new(), String::new());
    for (i, (list, docs)) in lists.iter().enumerate() {
        let at = t0 + i as i64 * 1_000;
        let shown: Vec<&str> = docs.iter().map(|(d, _)| *d).collect();
        events.push(impression_line(&format!("i{list}"), list, at, &shown, "control"));
        for (rank, (doc, grade)) in docs.iter().enumerate() {
            run.push_str(&format!("{list} Q0 {doc} {} {} agree\n", rank + 1, 100 - rank));
            if let Some(g) = grade {
                events.push(judgment_line(&format!("j{list}{doc}"), list, doc, &format!(r#""grade":{g}"#), at + 100));
                qrels.push_str(&format!("{list} 0 {doc} {g}\n"));
            }
        }
    }
    let events = Scratch::new("agree.jsonl", (events.join("\n") + "\n").as_bytes());
    let qrels = Scratch::new("agree.qrels", qrels.as_bytes());
    let run = Scratch::new("agree.run", run.as_bytes());
    for threshold in ["1", "2"] {
        for policy in ["zero", "skip"] {
            let env = [
                ("RANKPULSE__METRICS__GAIN", "linear"),
                ("RANKPULSE__METRICS__CUTOFFS", "[3]"),
                ("RANKPULSE__METRICS__RELEVANCE_THRESHOLD", threshold),
                ("RANKPULSE__METRICS__NO_RELEVANT", policy),
            ];
            let (code, online, err) = replay_env(&env, &[], &events.0);
            assert_eq!(code, 0, "{err}");
            let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
                .args(["eval", "--json", "-l", threshold, "--no-relevant", policy])
                .args(["-m", "ndcg_cut.3", "-m", "err_cut.3", "-m", "P.3", "-m", "recall.3", "-m", "map_cut.3"])
                .args(["-m", "recip_rank"])
                .arg(&qrels.0)
                .arg(&run.0)
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
            let offline: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            for (family, measure) in [
                ("ndcg", "ndcg_cut_3"),
                ("err", "err_cut_3"),
                ("precision", "P_3"),
                ("recall", "recall_3"),
                ("map", "map_cut_3"),
                ("mrr", "recip_rank"),
            ] {
                let on =
                    value(&online, &format!(r#"rankpulse_{family}{{k="3",window="1h",ranker="control",market="us"}}"#));
                let off = offline["summary"][measure].as_f64().unwrap_or_else(|| panic!("{measure}: {offline}"));
                assert!(
                    (on - off).abs() < 1e-9,
                    "-l {threshold}, {policy}: {family} {on} online, {measure} {off} offline"
                );
            }
        }
    }
}

/// `replay --history FILE --step D` (the contract): OpenMetrics text, every
/// sample stamped at a step boundary of event time, steps in order, ending
/// `# EOF`; the last step is the final exposition (what stdout prints).
#[test]
fn history_writes_the_exposition_at_every_step() {
    let file = Scratch::new("history-in.jsonl", minutes_of_lists(10).as_bytes());
    let history = std::env::temp_dir().join(format!("rankpulse-replay-{}-history.om", std::process::id()));
    let (code, out, err) = replay(&["--history", history.to_str().unwrap(), "--step", "1m"], &file.0);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&history).unwrap();
    std::fs::remove_file(&history).ok();
    assert!(text.ends_with("# EOF\n"), "{}", &text[text.len().saturating_sub(200)..]);
    assert_eq!(text.matches("# EOF").count(), 1);
    assert!(!text.contains("# HELP"));
    let mut stamps = Vec::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (sample, stamp) = line.rsplit_once(' ').unwrap();
        let stamp: f64 = stamp.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
        assert_eq!(stamp % 60.0, 0.0, "{line}: not at a step boundary");
        assert!(sample.rsplit_once(' ').is_some(), "{line}: no value");
        stamps.push(stamp);
    }
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]), "steps out of order");
    // Events from 1_700_000_000 s (20 s past a minute) to 1_700_000_596 s
    // (the last judgment): boundaries from 1_700_000_040 every minute to
    // the first at or after the newest event, 1_700_000_640: 11 steps.
    let steps: std::collections::BTreeSet<u64> = stamps.iter().map(|s| *s as u64).collect();
    assert_eq!(steps.first(), Some(&1_700_000_040));
    assert_eq!(steps.last(), Some(&1_700_000_640));
    assert_eq!(steps.len(), 11, "{steps:?}");
    // The last step holds what stdout holds, but for the windows, which end
    // at the step (stdout's end at the newest event).
    let last = *steps.last().unwrap();
    let stamp = format!(" {last}.000");
    let since_start = |l: &&str| !l.starts_with('#') && !l.contains("window=");
    let last_step: Vec<&str> =
        text.lines().filter_map(|l| l.strip_suffix(stamp.as_str())).filter(since_start).collect();
    let final_samples: Vec<&str> = out.lines().filter(since_start).collect();
    let differing: Vec<_> = last_step.iter().zip(&final_samples).filter(|(a, b)| a != b).take(3).collect();
    assert!(differing.is_empty() && last_step.len() == final_samples.len(), "{differing:?}");
    assert!(last_step.len() > 100, "{}", last_step.len());
    // An earlier step counts fewer lists than the last.
    let finalized = |step: u64| -> f64 {
        let stamp = format!(" {step}.000");
        text.lines()
            .filter(|l| l.starts_with("rankpulse_lists_finalized_total{") && l.ends_with(&stamp))
            .map(|l| l.split(' ').nth(1).unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let first = *steps.first().unwrap();
    assert!(finalized(first) > 0.0 && finalized(first) < finalized(last), "{} {}", finalized(first), finalized(last));
    assert_eq!(finalized(last), 120.0);
    // A step below a second is refused, and --step alone is an error.
    let (code, _, err) = replay(&["--history", "/dev/null", "--step", "10ms"], &file.0);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("at least 1s"), "{err}");
    let (code, _, err) = replay(&["--step", "1m"], &file.0);
    assert_eq!(code, 2, "{err}");
}

/// The Prometheus tier: `promtool tsdb create-blocks-from openmetrics`
/// takes the history, and the blocks hold every sample of it.
#[test]
#[ignore = "Prometheus tier: needs promtool on PATH, run with --ignored (.ci/run does)"]
fn history_backfills_with_promtool() {
    let file = Scratch::new("history-promtool.jsonl", minutes_of_lists(30).as_bytes());
    let dir = std::env::temp_dir().join(format!("rankpulse-replay-{}-backfill", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    let history = dir.join("history.om");
    let (code, _, err) = replay(&["--history", history.to_str().unwrap(), "--step", "15s"], &file.0);
    assert_eq!(code, 0, "{err}");
    let samples = std::fs::read_to_string(&history).unwrap().lines().filter(|l| !l.starts_with('#')).count();
    let blocks = dir.join("blocks");
    let run = |args: &[&str]| {
        let out = Command::new("promtool").args(args).output().unwrap_or_else(|e| {
            panic!("the Prometheus tier needs `promtool` on PATH (apt-get install prometheus): {e}")
        });
        assert!(out.status.success(), "promtool {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    run(&["tsdb", "create-blocks-from", "openmetrics", history.to_str().unwrap(), blocks.to_str().unwrap()]);
    // `tsdb dump` reads a database directory, which has a write-ahead log.
    std::fs::create_dir_all(blocks.join("wal")).unwrap();
    let dump = run(&["tsdb", "dump", blocks.to_str().unwrap()]);
    assert_eq!(dump.lines().count(), samples, "every sample of the history is in the blocks");
    std::fs::remove_dir_all(&dir).ok();
}
