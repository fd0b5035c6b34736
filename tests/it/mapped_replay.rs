//! `rankpulse replay --format mapped --config FILE DATA…` end to end
//! through the binary, differentially: generated lists rewritten in an
//! invented schema (testkit's `mapped_twin`, read back by its
//! `MAPPING_TOML`) give the exposition their native twin gives through
//! `rankpulse replay`, but for the event counts (the mapped files hold
//! messages rankpulse ignores).

use crate::common::lists_only;
use rankpulse_testkit::mapped::{MAPPING_TOML, mapped_twin};
use rankpulse_testkit::sum_of;
use std::path::{Path, PathBuf};

const BASE_MS: i64 = 1_763_780_000_000;

fn replay(args: &[&str], files: &[&Path]) -> (i32, String, String) {
    crate::common::replay_files(args, files)
}

fn temp(name: &str, lines: &[Vec<u8>]) -> PathBuf {
    crate::common::temp_lines("mapped-replay", name, lines)
}

#[test]
fn mapped_files_replay_like_their_native_twin() {
    let mut events = rankpulse_testkit::ubi::ubi_mix(1_500, 31, BASE_MS, 900.0, 0).native;
    events.extend(rankpulse_testkit::mix(0, 500, 31, BASE_MS + 1_500 * 900 + 120_000, 600.0));
    let t = mapped_twin(&events, 31);
    let split = t.mapped.len() * 3 / 5;
    let lines = |m: &[rankpulse_testkit::MixMessage]| m.iter().map(|m| m.payload.clone()).collect::<Vec<_>>();
    let (first, second, native) = (
        temp("a.ndjson", &lines(&t.mapped[..split])),
        temp("b.ndjson", &lines(&t.mapped[split..])),
        temp("native.jsonl", &lines(&t.native)),
    );
    let config = temp("mapping.toml", &[MAPPING_TOML.as_bytes().to_vec()]);

    let (code, mapped, err) = replay(&["--format", "mapped", "--config", config.to_str().unwrap()], &[&first, &second]);
    assert_eq!(code, 0, "{err}");
    let (code, twin, err) = replay(&[], &[&native]);
    assert_eq!(code, 0, "{err}");
    for f in [&first, &second, &native, &config] {
        let _ = std::fs::remove_file(f);
    }

    assert!(sum_of(&twin, "rankpulse_lists{") > 1_000.0, "the lists are there to compare");
    assert_eq!(lists_only(&mapped), lists_only(&twin));
    assert_eq!(sum_of(&mapped, r#"rankpulse_events_ignored_total{reason="unmapped_action"}"#), t.ignored as f64);
    assert!(t.ignored > 0);
    assert_eq!(sum_of(&mapped, "rankpulse_events_rejected_total{"), 0.0);
}

/// Without `[mapped]` there is nothing to read the files with: the error
/// names the key before any file is read; read as native events the same
/// files are rejected line by line.
#[test]
fn a_mapped_replay_needs_its_mapping() {
    let t = mapped_twin(&rankpulse_testkit::mix(0, 20, 3, BASE_MS, 500.0), 3);
    let file = temp("no-mapping.ndjson", &t.mapped.iter().map(|m| m.payload.clone()).collect::<Vec<_>>());
    let (code, _, err) = replay(&["--format", "mapped"], &[&file]);
    assert_ne!(code, 0);
    assert!(err.contains("config key mapped: missing: --format mapped"), "{err}");
    let bare = temp("bare.toml", &[b"[session]\ngap = \"30s\"\n".to_vec()]);
    let (code, _, err) = replay(&["--format", "mapped", "--config", bare.to_str().unwrap()], &[&file]);
    assert_ne!(code, 0);
    assert!(err.contains("config key mapped: missing"), "{err}");
    let (code, _, err) = replay(&[], &[&file]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no line is a valid event"), "{err}");
    assert!(!err.contains("--format mapped?"), "{err}");
    // The same with a mapping configured: the error asks about the flag.
    let config = temp("hint.toml", &[MAPPING_TOML.as_bytes().to_vec()]);
    let (code, _, err) = replay(&["--config", config.to_str().unwrap()], &[&file]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("the configuration has a [mapped] section: is it --format mapped?"), "{err}");
    for f in [&file, &bare, &config] {
        let _ = std::fs::remove_file(f);
    }
}

/// The example of docs/formats.md, as written there: its two messages
/// through its configuration make one list, the click's add_to_cart
/// (grade 2) on the second of two results.
#[test]
fn the_documented_example_reads_as_documented() {
    let doc = include_str!("../../docs/formats.md");
    let example = doc.split("Example: search logs").nth(1).and_then(|s| s.split("Produce both topics").next());
    let example = example.expect("docs/formats.md has the mapped example");
    // Indented blocks: messages (a line starting with `{` begins one), then the TOML.
    let mut messages: Vec<String> = Vec::new();
    let mut toml = String::new();
    for line in example.lines().filter_map(|l| l.strip_prefix("    ")) {
        if line.starts_with('{') {
            messages.push(line.to_string());
        } else if line.starts_with(' ') {
            if let Some(last) = messages.last_mut() {
                last.push_str(line.trim_start());
            }
        } else {
            toml.push_str(line);
            toml.push('\n');
        }
    }
    assert_eq!(messages.len(), 2, "{messages:?}");
    let data = temp("doc-example.ndjson", &messages.iter().map(|m| m.clone().into_bytes()).collect::<Vec<_>>());
    let config = temp("doc-example.toml", &[toml.into_bytes()]);
    let (code, out, err) = replay(&["--format", "mapped", "--config", config.to_str().unwrap()], &[&data]);
    for f in [&data, &config] {
        let _ = std::fs::remove_file(f);
    }
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum_of(&out, "rankpulse_lists_finalized_total"), 1.0, "{out}");
    assert_eq!(sum_of(&out, "rankpulse_events_rejected_total{"), 0.0);
    // MRR@10 of a list whose only relevant result is second: 1/2, in the
    // series of the ranker and market the impression names.
    let mrr = out.lines().find(|l| l.starts_with("rankpulse_mrr_sum{") && l.contains(r#"k="10""#));
    let mrr = mrr.unwrap_or_default();
    assert!(mrr.contains(r#"ranker="v2""#) && mrr.contains(r#"market="us""#) && mrr.ends_with(" 0.5"), "{out}");
}
