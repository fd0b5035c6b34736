//! Position-debiased clicks through replay: propensities, IPS values and their standard errors, computed by hand.

use super::*;

/// Position-debiased clicks through the binary, with debias.max_rank = 2
/// and cutoffs 1 and 2. Randomized lists (top 2 shuffled), clicks:
///   rank 1, rank 1, rank 2, none → CTR 2/4 and 1/4: θ₂ = 0.25/0.5 = 0.5.
/// Lists in production order, clicks → clicks@2 unweighted / IPS
/// (each click weighted by 1/θ of its rank):
///   P1: ranks 1, 2 → 2 / 1 + 2 = 3;  P2: rank 2 → 1 / 2
///   P3: none → 0 / 0;                 P4: rank 1 → 1 / 1
/// clicks@2 = 4/4 = 1, IPS 6/4 = 1.5 with a variance from click sampling
/// of ((3−1.5)² + (2−1.5)² + 1.5² + (1−1.5)²)/4 / 3 = 1.25/3, and one from
/// the estimated θ₂ = p₂/p₁ (delta method, docs/metrics.md): p₁ = 1/2,
/// p₂ = 1/4 over n = 4 lists, m₂ = 2/4, b₂ = m₂·(−1/θ₂²) = −2, gradient
/// G₂ = b₂/p₁ = −4, G₁ = −b₂·θ₂/p₁ = 2; Var p̂₁ = 1/16, Var p̂₂ = 3/64,
/// Cov = (S₁₂ − p₂·D₁₂ − p₁·C₂ + p₁p₂n)/n² = (0 − 0.5 − 0.5 + 0.5)/16 =
/// −1/32; GᵀΣG = 4/16 + 16·3/64 + 2·2·(−4)·(−1/32) = 3/2. The standard
/// error is sqrt(1.25/3 + 3/2) = sqrt(23/12).
/// IPS click-DCG@2: P1 1 + 2/log2(3), P2 2/log2(3), P4 1:
/// (2 + 4/log2(3)) / 4.
#[test]
fn clicks_are_weighted_by_estimated_or_configured_propensities() {
    let t0 = 1_700_000_000_000i64;
    let mut lines = Vec::new();
    let mut list = |s: &str, randomized: bool, clicked: &[&str]| {
        lines.push(format!(
            r#"{{"type":"impression","event_id":"i{s}","session_id":"{s}","timestamp":{t0},"randomized":{randomized},"results":[{{"doc_id":"a"}},{{"doc_id":"b"}}],"dimensions":{{"ranker":"v2","market":"us"}}}}"#
        ));
        for d in clicked {
            lines.push(format!(
                r#"{{"type":"judgment","event_id":"j{s}{d}","session_id":"{s}","doc_id":"{d}","action":"click","timestamp":{}}}"#,
                t0 + 1000
            ));
        }
    };
    list("R1", true, &["a"]);
    list("R2", true, &["a"]);
    list("R3", true, &["b"]);
    list("R4", true, &[]);
    list("P1", false, &["a", "b"]);
    list("P2", false, &["b"]);
    list("P3", false, &[]);
    list("P4", false, &["a"]);
    let dir = std::env::temp_dir();
    let file = dir.join(format!("rankpulse-ips-{}.jsonl", std::process::id()));
    let config = dir.join(format!("rankpulse-ips-{}.toml", std::process::id()));
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    std::fs::write(&config, "[metrics]\ncutoffs = [1, 2]\n[debias]\nmax_rank = 2\n").unwrap();
    let (code, out, err) = replay(&["--config", config.to_str().unwrap()], &file);
    let _ = (std::fs::remove_file(&file), std::fs::remove_file(&config));
    assert_eq!(code, 0, "{err}");
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert_eq!(value(&out, r#"rankpulse_position_propensity{rank="1"}"#), 1.0, "{out}");
    assert_eq!(value(&out, r#"rankpulse_position_propensity{rank="2"}"#), 0.5);
    assert_eq!(value(&out, r#"rankpulse_randomized_clicks_total{rank="2"}"#), 1.0);
    let v2 = r#"ranker="v2",market="us"}"#;
    let g = |name: &str, k: u32| value(&out, &format!(r#"rankpulse_{name}{{k="{k}",window="1h",{v2}"#));
    assert_eq!(g("clicks", 2), 1.0);
    assert_eq!(g("clicks_ips", 2), 1.5);
    assert!(close(g("clicks_ips_stderr", 2), (23.0f64 / 12.0).sqrt()), "{}", g("clicks_ips_stderr", 2));
    assert_eq!(g("clicks_ips", 1), 0.5);
    assert!(close(g("click_dcg_ips", 2), (2.0 + 4.0 / 3f64.log2()) / 4.0));
    assert_eq!(value(&out, &format!(r#"rankpulse_click_lists_total{{{v2}"#)), 4.0);
    assert_eq!(value(&out, &format!(r#"rankpulse_rank_clicks_total{{rank="2",{v2}"#)), 2.0);
    // Configured propensities replace the estimate: θ = (1, 0.25), so a
    // click at rank 2 weighs 4. clicks_ips@2: P1 1 + 4, P2 4, P3 0, P4 1 →
    // 10/4 = 2.5, standard error sqrt(((2.5² + 1.5² + 2.5² + 1.5²)/4) / 3);
    // click-DCG@2: (1 + 4/log2 3 + 4/log2 3 + 1)/4. With min_propensity 0.4
    // the weight is at most 1/0.4 = 2.5: (1 + 2.5 + 2.5 + 0 + 1)/4 = 1.75
    // (the estimate would give 1.5, no clipping 2.5).
    let events = Scratch::new("ips-set.jsonl", (lines.join("\n") + "\n").as_bytes());
    let set = |toml: &str| {
        let config = Scratch::new(&format!("ips-set-{}.toml", toml.len()), toml.as_bytes());
        let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
        assert_eq!(code, 0, "{toml}: {err}");
        out
    };
    let base = "[metrics]\ncutoffs = [1, 2]\n[debias]\nmax_rank = 2\npropensities = [1.0, 0.25]\n";
    let out = set(base);
    let g = |out: &str, name: &str, k: u32| value(out, &format!(r#"rankpulse_{name}{{k="{k}",window="1h",{v2}"#));
    assert_eq!(value(&out, r#"rankpulse_position_propensity{rank="2"}"#), 0.25, "{out}");
    assert_eq!(g(&out, "clicks_ips", 2), 2.5);
    assert!(close(g(&out, "clicks_ips_stderr", 2), (4.25f64 / 3.0).sqrt()));
    assert!(close(g(&out, "click_dcg_ips", 2), (2.0 + 8.0 / 3f64.log2()) / 4.0));
    assert_eq!(g(&out, "clicks_ips", 1), 0.5);
    // Configured propensities are read relative to rank 1 (as estimates
    // are): (0.5, 0.125) is the same θ = (1, 0.25).
    let halved = set(&base.replace("[1.0, 0.25]", "[0.5, 0.125]"));
    assert_eq!(value(&halved, r#"rankpulse_position_propensity{rank="1"}"#), 1.0, "{halved}");
    for (name, k) in [("clicks_ips", 2), ("clicks_ips_stderr", 2), ("click_dcg_ips", 2), ("clicks_ips", 1)] {
        assert_eq!(g(&halved, name, k), g(&out, name, k), "{name}@{k}");
    }
    let out = set(&format!("{base}min_propensity = 0.4\n"));
    assert_eq!(g(&out, "clicks_ips", 2), 1.75, "{out}");
    assert_eq!(g(&out, "clicks", 2), 1.0);
    // Off by default: none of it.
    let file = dir.join(format!("rankpulse-ips-off-{}.jsonl", std::process::id()));
    std::fs::write(&file, lines.join("\n") + "\n").unwrap();
    let (code, out, _) = replay(&[], &file);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 0);
    assert!(!out.contains("rankpulse_clicks") && !out.contains("propensity"), "{out}");
}

/// A rank shown in randomized lists and never clicked there has an
/// estimated propensity of 0: with debias.min_propensity = 0.2 it weighs
/// 1/0.2 = 5 like any rank below the floor (it had no weight and the IPS
/// gauges through it were absent, from the statistics review).
/// Randomized lists (top 3 shuffled), clicks: rank 1, 1, 2, 1 and 2, none:
/// CTR 3/5, 2/5, 0 → θ = (1, 2/3, 0), weights (1, 1.5, 5).
/// Production lists, clicks → clicks@3 IPS: rank 1 → 1; rank 3 → 5;
/// ranks 1, 2 → 2.5; none → 0: mean 8.5/4 = 2.125. Unclipped, θ₃ = 0 has
/// no weight: the gauge is absent.
///
/// Its standard error (docs/metrics.md) adds two variances. Click sampling:
/// values 1, 5, 2.5, 0, variance 32.25/4 − 2.125² = 227/64, over N − 1 = 3:
/// 227/192. The estimated propensities, by the delta method: θ₂ = p₂/p₁
/// with p₁ = 3/5, p₂ = 2/5 over n = 5 full lists; rank 3 is clipped, so
/// only θ₂ moves the mean, b₂ = m₂·(−1/θ₂²) = (1/4)(−9/4) = −9/16, gradient
/// G₂ = b₂/p₁ = −15/16, G₁ = −b₂·θ₂/p₁ = 5/8. Var p̂₁ = Var p̂₂ = 0.6·0.4/5 =
/// 6/125; Cov = (S₁₂ − p₂·D₁₂ − p₁·C₂ + p₁p₂n)/n² = (1 − 1.2 − 1.2 + 1.2)/25
/// = −1/125. GᵀΣG = (25/64 + 225/256)·6/125 + 2·(5/8)(−15/16)(−1/125) =
/// 9/128. In all 227/192 + 9/128 = 481/384.
#[test]
fn an_estimated_zero_propensity_is_clipped_by_min_propensity() {
    let t0 = 1_700_000_000_000i64;
    let mut lines = Vec::new();
    let docs = ["a", "b", "c"];
    let mut list = |s: &str, randomized: bool, clicked: &[usize]| {
        lines.push(format!(
            r#"{{"type":"impression","event_id":"i{s}","session_id":"{s}","timestamp":{t0},"randomized":{randomized},"results":[{{"doc_id":"a"}},{{"doc_id":"b"}},{{"doc_id":"c"}}],"dimensions":{{"ranker":"v2","market":"us"}}}}"#
        ));
        for &r in clicked {
            let d = docs[r - 1];
            lines.push(format!(
                r#"{{"type":"judgment","event_id":"j{s}{d}","session_id":"{s}","doc_id":"{d}","action":"click","timestamp":{}}}"#,
                t0 + 1000
            ));
        }
    };
    for (i, clicks) in [&[1][..], &[1], &[2], &[1, 2], &[]].iter().enumerate() {
        list(&format!("R{i}"), true, clicks);
    }
    for (i, clicks) in [&[1][..], &[3], &[1, 2], &[]].iter().enumerate() {
        list(&format!("P{i}"), false, clicks);
    }
    let events = Scratch::new("ips-zero.jsonl", (lines.join("\n") + "\n").as_bytes());
    let run = |toml: &str| {
        let config = Scratch::new(&format!("ips-zero-{}.toml", toml.len()), toml.as_bytes());
        let (code, out, err) = replay(&["--config", config.0.to_str().unwrap()], &events.0);
        assert_eq!(code, 0, "{toml}: {err}");
        out
    };
    let base = "[metrics]\ncutoffs = [3]\n[debias]\nmax_rank = 3\n";
    let ips = r#"rankpulse_clicks_ips{k="3",window="1h",ranker="v2",market="us"}"#;
    let out = run(&format!("{base}min_propensity = 0.2\n"));
    assert_eq!(value(&out, r#"rankpulse_position_propensity{rank="3"}"#), 0.0, "{out}");
    assert!((value(&out, r#"rankpulse_position_propensity{rank="2"}"#) - 2.0 / 3.0).abs() < 1e-12);
    assert!((value(&out, ips) - 2.125).abs() < 1e-12, "{out}");
    let se = value(&out, &ips.replace("clicks_ips{", "clicks_ips_stderr{"));
    assert!((se - (481.0f64 / 384.0).sqrt()).abs() < 1e-12, "{se}");
    let out = run(base);
    assert!(!out.contains("rankpulse_clicks_ips{"), "{out}");
    assert_eq!(value(&out, r#"rankpulse_clicks{k="3",window="1h",ranker="v2",market="us"}"#), 1.0, "{out}");
    // The randomized lists are not the ranker's order: they are left out
    // of its quality means (counted), not of its lists. MRR@3 of the four
    // production lists (first click at rank 1, 3, 1; none): (1 + 1/3 + 1
    // + 0)/4 = 7/12; with the five shuffled ones (1, 1, 1/2, 1, 0) it
    // would be 7/12·4/9 + 3.5/9 = 0.6481.
    let v2 = r#"ranker="v2",market="us"}"#;
    assert_eq!(value(&out, &format!(r#"rankpulse_lists_finalized_total{{{v2}"#)), 9.0, "{out}");
    // Nothing relevant in one production list and one randomized one: both
    // counted, whatever the list (README: under either policy).
    assert_eq!(value(&out, &format!(r#"rankpulse_lists_no_relevant_total{{kind="binary",{v2}"#)), 2.0, "{out}");
    assert_eq!(value(&out, &format!(r#"rankpulse_mrr_count{{k="3",{v2}"#)), 4.0, "{out}");
    assert!((value(&out, &format!(r#"rankpulse_mrr{{k="3",window="1h",{v2}"#)) - 7.0 / 12.0).abs() < 1e-12, "{out}");
    for metric in ["ndcg", "mrr", "err", "precision", "recall", "map", "gauc"] {
        let excluded = format!(r#"rankpulse_lists_excluded_total{{metric="{metric}",reason="randomized",{v2}"#);
        assert_eq!(value(&out, &excluded), 5.0, "{metric}: {out}");
    }
}
