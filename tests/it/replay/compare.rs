//! Comparing arms through replay: A/B against the baseline, and interleaving's credit.

use super::*;

/// Arms compared with the baseline through the binary. Per arm and market,
/// 20 lists of one result, the first `hits` of them clicked, so P@1 per
/// list is 0 or 1:
///   control: us 12/20, fr 10/20 → 22/40 = 0.55
///   v2:      us  6/20, fr  8/20 → 14/40 = 0.35
/// Each arm merges its markets. Per arm, V = p(1 − p) and
/// se² = V / (n − 1): control 0.2475/39, v2 0.2275/39, so the difference
/// −0.2 has standard error sqrt(0.475/39) = 0.110361….
#[test]
fn arms_are_compared_with_the_baseline_over_all_markets() {
    let mut lines = String::new();
    let t0 = 1_700_000_000_000i64;
    for (arm, market, hits) in [("control", "us", 12), ("control", "fr", 10), ("v2", "us", 6), ("v2", "fr", 8)] {
        for i in 0..20 {
            let s = format!("{arm}-{market}-{i}");
            let t = t0 + i64::from(i) * 1000;
            lines += &format!(
                r#"{{"type":"impression","event_id":"i{s}","session_id":"{s}","timestamp":{t},"results":[{{"doc_id":"d","position":1}}],"dimensions":{{"ranker":"{arm}","market":"{market}"}}}}"#
            );
            lines.push('\n');
            if i < hits {
                lines += &format!(
                    r#"{{"type":"judgment","event_id":"j{s}","session_id":"{s}","doc_id":"d","action":"click","timestamp":{}}}"#,
                    t + 500
                );
                lines.push('\n');
            }
        }
    }
    let file = std::env::temp_dir().join(format!("rankpulse-arms-{}.jsonl", std::process::id()));
    std::fs::write(&file, &lines).unwrap();
    let (code, out, err) = replay(&[], &file);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 0, "{err}");
    let series =
        |name: &str| format!(r#"rankpulse_compare_{name}{{ranker="v2",metric="precision",k="1",window="1h"}}"#);
    assert!((value(&out, &series("difference")) + 0.2).abs() < 1e-12, "{out}");
    let se = (0.475f64 / 39.0).sqrt();
    assert!((value(&out, &series("stderr")) - se).abs() < 1e-12);
    let p = value(&out, &series("p_value"));
    assert!(p > 0.05 && p < 0.1, "t = -1.81 on about 78 degrees of freedom: p = {p}");
    // Per-list variances s² = V · n/(n − 1): (1.959964 + 0.841621)² ·
    // (0.2475 + 0.2275) · 40/39 / 0.01² = 38,238.1… → 38,239.
    assert_eq!(value(&out, &series("lists_needed")), 38_239.0);
    // One result per list: no AUC, so no GAUC comparison either.
    assert!(!out.contains(r#"rankpulse_compare_difference{ranker="v2",metric="gauc""#), "{out}");
    assert!(
        !out.contains(r#"rankpulse_compare_difference{ranker="control""#),
        "the baseline is not compared with itself"
    );
    // Another baseline, level, power and effect (config file): control is
    // now compared with v2, +0.2 with the same standard error, and
    //   lists_needed = ⌈(z₀.₉₅ + z₀.₅)² · (s²a + s²b) / 0.1²⌉
    //                = ⌈1.6448536² · 0.475 · 40/39 / 0.01⌉ = ⌈131.81⌉ = 132
    // (alpha ignored: 188; power ignored: 302; effect ignored: 13,181).
    let settings =
        Scratch::new("arms-settings.toml", b"[compare]\nbaseline = \"v2\"\nalpha = 0.1\npower = 0.5\neffect = 0.1\n");
    let events = Scratch::new("arms-settings.jsonl", lines.as_bytes());
    let (code, out, err) = replay(&["--config", settings.0.to_str().unwrap()], &events.0);
    assert_eq!(code, 0, "{err}");
    let series =
        |name: &str| format!(r#"rankpulse_compare_{name}{{ranker="control",metric="precision",k="1",window="1h"}}"#);
    assert!((value(&out, &series("difference")) - 0.2).abs() < 1e-12, "{out}");
    assert!((value(&out, &series("stderr")) - se).abs() < 1e-12);
    assert_eq!(value(&out, &series("lists_needed")), 132.0);
    assert!(!out.contains(r#"rankpulse_compare_difference{ranker="v2""#), "the baseline is not compared with itself");
    // An excluded arm (interleaved traffic) is not compared.
    let excluded = std::env::temp_dir().join(format!("rankpulse-arms-x-{}.toml", std::process::id()));
    let file = std::env::temp_dir().join(format!("rankpulse-arms-x-{}.jsonl", std::process::id()));
    std::fs::write(&excluded, "[compare]\nexclude = [\"v2\"]\n").unwrap();
    std::fs::write(&file, &lines).unwrap();
    let (code, out, err) = replay(&["--config", excluded.to_str().unwrap()], &file);
    let _ = (std::fs::remove_file(&excluded), std::fs::remove_file(&file));
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("rankpulse_ndcg{") && !out.contains("rankpulse_compare_"), "{out}");
    // Off: no comparison gauges at all.
    let config = std::env::temp_dir().join(format!("rankpulse-arms-{}.toml", std::process::id()));
    std::fs::write(&config, "[compare]\ndimension = \"\"\n").unwrap();
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (code, out, err) = replay(&["--config", config.to_str().unwrap()], &file);
    let _ = std::fs::remove_file(&config);
    assert_eq!(code, 0, "{err}");
    assert!(!out.contains("rankpulse_compare_"), "{out}");
}

/// Team-draft interleaving through the binary: teams on the results,
/// clicks as judgments (grade 1 reaches the default relevance threshold).
///   L1: a(A) b(B) c(A), b clicked        → B wins
///   L2: a(A) b(B), a clicked             → A wins; a late click on b
///       (after the list is final, within late.horizon) makes it a tie
///   L3: a(B) b(A), both clicked          → tie
///   L4: a(A) b(B), no click              → no outcome (not counted)
///   L5: a(A) b(B), a clicked             → A wins
///   L7: a(B) b(A), b clicked             → A wins
/// Windows (amended): A 2 (L5, L7), B 1 (L1), ties 2 (L2, L3), 5 lists:
/// Δ = (2 + 2/2) / 5 − 1/2 = 0.1; sign test of 2 against 1:
/// 2 · P(X ≤ 1 | n = 3, ½) = 2 · 4/8 = 1. The since-start counters are
/// Prometheus counters and keep each list's first outcome (README): A 3
/// (L2, L5, L7), B 1, ties 1.
#[test]
fn interleaved_lists_are_credited_to_their_teams() {
    let t0 = 1_700_000_000_000i64;
    let imp = |s: &str, results: &[(&str, &str)]| {
        let r: Vec<String> = results.iter().map(|(d, team)| format!(r#"{{"doc_id":"{d}","team":"{team}"}}"#)).collect();
        format!(
            r#"{{"type":"impression","event_id":"i{s}","session_id":"{s}","timestamp":{t0},"results":[{}],"dimensions":{{"ranker":"tdi","market":"us"}}}}"#,
            r.join(",")
        )
    };
    let click = |s: &str, d: &str, dt: i64| {
        format!(
            r#"{{"type":"judgment","event_id":"j{s}{d}","session_id":"{s}","doc_id":"{d}","action":"click","timestamp":{}}}"#,
            t0 + dt
        )
    };
    let lines = [
        imp("L1", &[("a", "A"), ("b", "B"), ("c", "A")]),
        click("L1", "b", 1000),
        imp("L2", &[("a", "A"), ("b", "B")]),
        click("L2", "a", 1000),
        imp("L3", &[("a", "B"), ("b", "A")]),
        click("L3", "a", 1000),
        click("L3", "b", 2000),
        imp("L4", &[("a", "A"), ("b", "B")]),
        imp("L5", &[("a", "A"), ("b", "B")]),
        click("L5", "a", 1000),
        imp("L7", &[("a", "B"), ("b", "A")]),
        click("L7", "b", 1000),
        // Moves event time 40 s on: L1–L5 are final (session.gap 30 s).
        format!(
            r#"{{"type":"impression","event_id":"later","session_id":"later","timestamp":{},"results":[{{"doc_id":"x"}}],"dimensions":{{"ranker":"control","market":"us"}}}}"#,
            t0 + 40_000
        ),
        click("L2", "b", 3000),
        // Not a team: rejected, changes nothing.
        imp("L6", &[("a", "C")]),
    ];
    let file = std::env::temp_dir().join(format!("rankpulse-tdi-{}.jsonl", std::process::id()));
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let (code, out, err) = replay(&[], &file);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 0, "{err}");
    let tdi = r#"ranker="tdi",market="us"}"#;
    assert_eq!(value(&out, r#"rankpulse_late_judgments_total{outcome="amended"}"#), 1.0, "{out}");
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="invalid_team"}"#), 1.0);
    for (outcome, n) in [("a_wins", 3.0), ("b_wins", 1.0), ("tie", 1.0)] {
        assert_eq!(
            value(&out, &format!(r#"rankpulse_interleaving_outcomes_total{{outcome="{outcome}",{tdi}"#)),
            n,
            "{outcome}"
        );
    }
    assert_eq!(value(&out, &format!(r#"rankpulse_interleaving_lists{{window="1h",{tdi}"#)), 5.0);
    assert!((value(&out, &format!(r#"rankpulse_interleaving_delta{{window="1h",{tdi}"#)) - 0.1).abs() < 1e-12);
    assert_eq!(value(&out, &format!(r#"rankpulse_interleaving_p_value{{window="1h",{tdi}"#)), 1.0);
    assert_eq!(
        value(&out, &format!(r#"rankpulse_lists_finalized_total{{{tdi}"#)),
        6.0,
        "L4 is a list, without an outcome"
    );
    // Lists without teams have no interleaving series.
    assert!(!out.contains(r#"rankpulse_interleaving_outcomes_total{outcome="a_wins",ranker="control""#), "{out}");
}
