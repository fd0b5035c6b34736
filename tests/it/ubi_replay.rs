//! `rankpulse replay --format ubi FILE…` end to end through the binary,
//! differentially: generated lists as OpenSearch UBI files (an `_bulk`
//! NDJSON export whose action lines name the index, then plain NDJSON told
//! apart by fields) give the exposition their native twin gives through
//! `rankpulse replay`, but for the per-topic event counts (a UBI list is
//! several messages) and the counts of ignored lines.

use crate::common::lists_only;
use rankpulse_testkit::sum_of;
use rankpulse_testkit::ubi::{UbiTopic, ubi_mix};
use std::path::{Path, PathBuf};

const BASE_MS: i64 = 1_763_780_000_000;

fn replay(args: &[&str], files: &[&Path]) -> (i32, String, String) {
    crate::common::replay_files(args, files)
}

fn temp(name: &str, lines: &[Vec<u8>]) -> PathBuf {
    crate::common::temp_lines("ubi-replay", name, lines)
}

#[test]
fn a_ubi_export_replays_like_its_native_twin() {
    let t = ubi_mix(2_000, 21, BASE_MS, 900.0, 0);
    let split = t.ubi.len() * 3 / 5;
    // An _bulk export: an action line before each document; now and then
    // one naming another index, after which the document is told by its fields.
    // Deletes (no document follows) and updates (a partial document
    // follows, here holding a click) change nothing and reject nothing.
    let mut bulk = Vec::new();
    let (mut deletes, mut updates) = (0, 0);
    for (i, m) in t.ubi[..split].iter().enumerate() {
        let index = match (i % 17, m.topic) {
            (0, _) => "archive",
            (_, UbiTopic::Queries) => "ubi_queries",
            (_, UbiTopic::Events) => "ubi_events",
        };
        if i % 23 == 0 {
            bulk.push(format!(r#"{{"delete": {{"_index": "ubi_events", "_id": "id-{i}"}}}}"#).into_bytes());
            deletes += 1;
        }
        if i % 29 == 0 {
            bulk.push(format!(r#"{{"update": {{"_index": "ubi_events", "_id": "id-{i}"}}}}"#).into_bytes());
            let click = r#"{"action_name":"click","client_id":"c-upd","query_id":"q-upd","timestamp":1763780000000,"event_attributes":{"object":{"object_id":"d"}}}"#;
            bulk.push(format!(r#"{{"doc": {click}}}"#).into_bytes());
            updates += 1;
        }
        bulk.push(format!(r#"{{"index": {{"_index": "{index}", "_id": "id-{i}"}}}}"#).into_bytes());
        bulk.push(m.payload.clone());
    }
    let plain: Vec<Vec<u8>> = t.ubi[split..].iter().map(|m| m.payload.clone()).collect();
    let native: Vec<Vec<u8>> = t.native.iter().map(|m| m.payload.clone()).collect();
    let (bulk_file, plain_file, native_file) =
        (temp("bulk.ndjson", &bulk), temp("plain.ndjson", &plain), temp("native.jsonl", &native));

    let (code, ubi, err) = replay(&["--format", "ubi"], &[&bulk_file, &plain_file]);
    assert_eq!(code, 0, "{err}");
    let (code, twin, err) = replay(&[], &[&native_file]);
    assert_eq!(code, 0, "{err}");
    for f in [&bulk_file, &plain_file, &native_file] {
        let _ = std::fs::remove_file(f);
    }

    assert!(sum_of(&twin, "rankpulse_lists{") > 1_000.0, "the lists are there to compare");
    assert_eq!(lists_only(&ubi), lists_only(&twin));
    assert!(deletes > 10 && updates > 10);
    let action_lines = (split + deletes + updates) as f64;
    assert_eq!(sum_of(&ubi, r#"rankpulse_events_ignored_total{reason="bulk_action_line"}"#), action_lines);
    assert_eq!(sum_of(&ubi, r#"rankpulse_events_ignored_total{reason="bulk_update"}"#), updates as f64);
    assert_eq!(sum_of(&ubi, r#"rankpulse_events_ignored_total{reason="unmapped_action"}"#), t.ignored as f64);
    assert_eq!(sum_of(&ubi, "rankpulse_events_rejected_total{"), 0.0);
}

/// Two exported indices, one file each (every query, then every event,
/// over 15 minutes of event time): read one after the other, every list
/// would close long before its clicks came. Merged by event time, in
/// either order given, they replay like the native twin.
#[test]
fn a_queries_file_and_an_events_file_are_merged_by_event_time() {
    let t = ubi_mix(2_000, 23, BASE_MS, 900.0, 0);
    let of = |topic: UbiTopic| -> Vec<Vec<u8>> {
        t.ubi.iter().filter(|m| m.topic == topic).map(|m| m.payload.clone()).collect()
    };
    let native: Vec<Vec<u8>> = t.native.iter().map(|m| m.payload.clone()).collect();
    let (queries, events, native_file) = (
        temp("merge-queries.ndjson", &of(UbiTopic::Queries)),
        temp("merge-events.ndjson", &of(UbiTopic::Events)),
        temp("merge-native.jsonl", &native),
    );
    let (code, twin, err) = replay(&[], &[&native_file]);
    assert_eq!(code, 0, "{err}");
    assert!(sum_of(&twin, "rankpulse_lists{") > 1_000.0, "the lists are there to compare");
    for files in [[queries.as_path(), events.as_path()], [events.as_path(), queries.as_path()]] {
        let (code, ubi, err) = replay(&["--format", "ubi"], &files);
        assert_eq!(code, 0, "{err}");
        assert_eq!(lists_only(&ubi), lists_only(&twin), "{files:?}");
        assert_eq!(sum_of(&ubi, "rankpulse_orphan_lists_total"), sum_of(&twin, "rankpulse_orphan_lists_total"));
    }
    for f in [&queries, &events, &native_file] {
        let _ = std::fs::remove_file(f);
    }
}

/// The file users have: one `_bulk` export of both indices, every query
/// first, then every event, over three days (600 lists, one every 7.2
/// minutes). Read as one stream each query would close, alone, long
/// before its events came. Each index is its own stream of the file, so
/// it replays like the native twin: with action lines, without them
/// (each document told by its fields), and piped through standard input.
#[test]
fn a_one_file_export_of_both_indices_replays_like_its_native_twin() {
    let t = ubi_mix(600, 29, BASE_MS, 432_000.0, 0);
    let of = |topic: UbiTopic| t.ubi.iter().filter(move |m| m.topic == topic);
    let mut bulk = Vec::new();
    let mut plain = Vec::new();
    for (i, m) in of(UbiTopic::Queries).chain(of(UbiTopic::Events)).enumerate() {
        let index = if m.topic == UbiTopic::Queries { "ubi_queries" } else { "ubi_events" };
        bulk.push(format!(r#"{{"index":{{"_index":"{index}","_id":"{i}"}}}}"#).into_bytes());
        bulk.push(m.payload.clone());
        plain.push(m.payload.clone());
    }
    let native: Vec<Vec<u8>> = t.native.iter().map(|m| m.payload.clone()).collect();
    let (bulk_file, plain_file, native_file) =
        (temp("export.ndjson", &bulk), temp("export-plain.ndjson", &plain), temp("export-native.jsonl", &native));
    let (code, twin, err) = replay(&[], &[&native_file]);
    assert_eq!(code, 0, "{err}");
    assert!(sum_of(&twin, "rankpulse_lists_finalized_total") > 590.0, "the lists are there to compare");
    for file in [&bulk_file, &plain_file] {
        let (code, ubi, err) = replay(&["--format", "ubi"], &[file]);
        assert_eq!(code, 0, "{err}");
        assert_eq!(lists_only(&ubi), lists_only(&twin), "{file:?}");
        assert!(!err.contains("older than an event before them"), "{file:?}: {err}");
    }
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["replay", "--format", "ubi", "-"])
        .stdin(std::fs::File::open(&bulk_file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(lists_only(&String::from_utf8_lossy(&out.stdout)), lists_only(&twin), "standard input");
    // The action lines are counted once, not once per index's reader.
    let (_, ubi, _) = replay(&["--format", "ubi"], &[&bulk_file]);
    assert_eq!(sum_of(&ubi, r#"rankpulse_events_ignored_total{reason="bulk_action_line"}"#), t.ubi.len() as f64);
    // One index alone in the file is read as before.
    let queries: Vec<Vec<u8>> = of(UbiTopic::Queries).map(|m| m.payload.clone()).collect();
    let queries_file = temp("export-queries.ndjson", &queries);
    let (code, alone, err) = replay(&["--format", "ubi_queries"], &[&queries_file]);
    assert_eq!(code, 0, "{err}");
    let (code, as_ubi, err) = replay(&["--format", "ubi"], &[&queries_file]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(lists_only(&alone), lists_only(&as_ubi));
    for f in [&bulk_file, &plain_file, &native_file, &queries_file] {
        let _ = std::fs::remove_file(f);
    }
}

/// A UBI query without hit ids showed what its `impression` events say;
/// when none come, what it showed is unknown: not scored as a list that
/// showed nothing, but counted. A query with hit ids `[]` did show
/// nothing, and is scored 0.
#[test]
fn a_query_whose_results_are_unknown_is_counted_not_scored() {
    let lines: Vec<Vec<u8>> = [
        r#"{"query_id":"qa","client_id":"c1","user_query":"a","timestamp":1763780000000,"query_response_hit_ids":["d1","d2"]}"#,
        r#"{"query_id":"qb","client_id":"c2","user_query":"b","timestamp":1763780000000}"#,
        r#"{"query_id":"qc","client_id":"c3","user_query":"c","timestamp":1763780000000}"#,
        r#"{"query_id":"qd","client_id":"c4","user_query":"d","timestamp":1763780000000,"query_response_hit_ids":[]}"#,
        r#"{"action_name":"impression","query_id":"qb","client_id":"c2","timestamp":1763780000100,"event_attributes":{"object":{"object_id":"d9"},"position":{"ordinal":0}}}"#,
        r#"{"action_name":"click","query_id":"qb","client_id":"c2","timestamp":1763780001000,"event_attributes":{"object":{"object_id":"d9"}}}"#,
        r#"{"action_name":"click","query_id":"qa","client_id":"c1","timestamp":1763780001000,"event_attributes":{"object":{"object_id":"d2"}}}"#,
    ]
    .iter()
    .map(|l| l.as_bytes().to_vec())
    .collect();
    let file = temp("unknown-results.ndjson", &lines);
    let (code, out, err) = replay(&["--format", "ubi"], &[&file]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(code, 0, "{err}");
    assert_eq!(sum_of(&out, "rankpulse_lists_finalized_total"), 4.0, "{out}");
    // qa (clicked at 2: 1/log2(3)), qb (clicked at 1: 1) and qd (0), not qc.
    assert_eq!(sum_of(&out, r#"rankpulse_ndcg_count{k="10""#), 3.0, "{out}");
    let expected = 1.0 + 1.0 / 3f64.log2();
    assert!((sum_of(&out, r#"rankpulse_ndcg_sum{k="10""#) - expected).abs() < 1e-12, "{out}");
    assert_eq!(sum_of(&out, r#"rankpulse_lists_excluded_total{metric="ndcg",reason="no_results_known""#), 1.0, "{out}");
    // Only qd found nothing relevant among what it showed.
    assert_eq!(sum_of(&out, r#"rankpulse_lists_no_relevant_total{kind="graded""#), 1.0, "{out}");
}

/// Read with the wrong format, the same files are rejected line by line,
/// and a file of nothing but rejects fails naming itself.
#[test]
fn the_format_is_what_reads_the_file() {
    let t = ubi_mix(50, 3, BASE_MS, 900.0, 0);
    let lines: Vec<Vec<u8>> = t.ubi.iter().map(|m| m.payload.clone()).collect();
    let file = temp("as-native.ndjson", &lines);
    let (code, _, err) = replay(&[], &[&file]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no line is a valid event") && err.contains(file.to_str().unwrap()), "{err}");
    let (code, _, err) = replay(&["--format", "ubi_event"], &[&file]);
    assert_ne!(code, 0);
    assert!(err.contains("ubi_events"), "{err}");
    // rankpulse's own events read as UBI are no queries: rejected, not
    // scored as empty lists.
    let native: Vec<Vec<u8>> = t.native.iter().map(|m| m.payload.clone()).collect();
    let native_file = temp("native-as-ubi.ndjson", &native);
    let (code, _, err) = replay(&["--format", "ubi"], &[&native_file]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no line is a valid event") && err.contains("missing_field"), "{err}");
    // Beside a good file, a file of rejects still fails, naming itself; an
    // empty one (an hour without traffic) does not.
    let empty = temp("empty.ndjson", &[]);
    for files in [[file.as_path(), native_file.as_path()], [native_file.as_path(), file.as_path()]] {
        let (code, _, err) = replay(&["--format", "ubi"], &files);
        assert_eq!(code, 2, "{files:?}: {err}");
        let (wrong, good) = (native_file.to_str().unwrap(), file.to_str().unwrap());
        assert!(err.contains(wrong) && !err.contains(good) && err.contains("missing_field"), "{err}");
    }
    let (code, alone, err) = replay(&["--format", "ubi"], &[&file]);
    assert_eq!(code, 0, "{err}");
    let (code, beside_empty, err) = replay(&["--format", "ubi"], &[&file, &empty]);
    assert_eq!((code, lists_only(&beside_empty)), (0, lists_only(&alone)), "{err}");
    for f in [&file, &native_file, &empty] {
        let _ = std::fs::remove_file(f);
    }
}

/// Dimensions nested in `query_attributes` (as teams log experiment info)
/// are read through `[ubi.dimensions]` paths of any depth: the generated
/// lists with their ranker moved to `experiment.arm.name` and their market
/// to `geo.market` give the exposition their native twin gives, and so
/// they do with the values as numbers (their JSON text).
#[test]
fn nested_query_attributes_are_dimensions_at_any_depth() {
    let t = ubi_mix(1_000, 8, BASE_MS, 900.0, 0);
    let nest = |payload: &[u8], numbers: bool| {
        let mut text = String::from_utf8(payload.to_vec()).unwrap();
        for ranker in ["control", "candidate"] {
            let value =
                if numbers { if ranker == "control" { "0" } else { "1" }.to_string() } else { format!("\"{ranker}\"") };
            text = text.replace(
                &format!(r#""query_attributes":{{"ranker":"{ranker}","#),
                &format!(
                    r#""query_attributes":{{"ranker":{{"x":1}},"experiment":{{"id":7,"arm":{{"name":{value}}}}},"#
                ),
            );
        }
        for market in ["us", "de", "jp"] {
            text = text.replace(&format!(r#""market":"{market}""#), &format!(r#""geo":{{"market":"{market}"}}"#));
        }
        text.into_bytes()
    };
    let config = temp(
        "nested.toml",
        &[b"[ubi.dimensions]\nranker = \"query_attributes.experiment.arm.name\"\nmarket = \"query_attributes.geo.market\"\n"
            .to_vec()],
    );
    let native = |numbers: bool| -> Vec<Vec<u8>> {
        let rename = |p: &[u8]| {
            let text = String::from_utf8(p.to_vec()).unwrap();
            if numbers {
                text.replace(r#""ranker":"control""#, r#""ranker":"0""#)
                    .replace(r#""ranker":"candidate""#, r#""ranker":"1""#)
            } else {
                text
            }
            .into_bytes()
        };
        t.native.iter().map(|m| rename(&m.payload)).collect()
    };
    for numbers in [false, true] {
        let ubi: Vec<Vec<u8>> = t.ubi.iter().map(|m| nest(&m.payload, numbers)).collect();
        assert!(
            ubi.iter().any(|l| l.windows(10).any(|w| w == br#""geo":{"ma"#)),
            "the generator's attributes were nested"
        );
        let (ubi_file, native_file) = (temp("nested.ndjson", &ubi), temp("nested-native.jsonl", &native(numbers)));
        let (code, out, err) = replay(&["--format", "ubi", "--config", config.to_str().unwrap()], &[&ubi_file]);
        assert_eq!(code, 0, "{err}");
        let (code, twin, err) = replay(&[], &[&native_file]);
        assert_eq!(code, 0, "{err}");
        for f in [&ubi_file, &native_file] {
            let _ = std::fs::remove_file(f);
        }
        let arm = if numbers { r#"ranker="1""# } else { r#"ranker="candidate""# };
        assert!(
            twin.lines().any(|l| l.starts_with("rankpulse_lists{") && l.contains(arm) && l.contains(r#"market="jp""#))
        );
        assert_eq!(lists_only(&out), lists_only(&twin), "numbers: {numbers}");
        assert_eq!(sum_of(&out, "rankpulse_events_rejected_total{"), 0.0);
    }
    let _ = std::fs::remove_file(&config);
}

/// The merge against the batch engine on a stream it was not written for:
/// the production-shaped mix (3,000 lists over 5 minutes, judgments
/// trailing their impressions) cut into files as Kafka would cut it, by
/// key into 4 partitions, and by topic into impressions and judgments.
/// Each cut, merged by event time, gives the exposition of the one file,
/// byte for byte. Early in the stream sits an event of a broken clock (the
/// year 2100): rejected in the one file, it must not hold the rest of its
/// file back until the other files are read.
#[test]
fn a_stream_cut_by_key_or_by_topic_replays_like_the_whole() {
    let mut messages = rankpulse_testkit::mix(0, 3_000, 31, BASE_MS, 100.0);
    let broken = r#"{"type":"impression","event_id":"broken","session_id":"broken","timestamp":4102444800000,"results":[{"doc_id":"d"}],"dimensions":{"ranker":"control","market":"us"}}"#;
    messages.insert(
        10,
        rankpulse_testkit::MixMessage { judgment: false, key: "broken".into(), payload: broken.as_bytes().to_vec() },
    );
    let whole: Vec<Vec<u8>> = messages.iter().map(|m| m.payload.clone()).collect();
    let whole_file = temp("cut-whole.jsonl", &whole);
    let (code, want, err) = replay(&[], &[&whole_file]);
    assert_eq!(code, 0, "{err}");
    assert!(sum_of(&want, "rankpulse_lists_finalized_total{") > 2_900.0, "{want}");
    assert_eq!(sum_of(&want, r#"rankpulse_events_rejected_total{reason="future_timestamp"}"#), 1.0);
    let partition = |key: &str| key.bytes().fold(0usize, |h, b| h.wrapping_mul(31).wrapping_add(usize::from(b))) % 4;
    let cuts: [(&str, Vec<usize>); 2] = [
        ("key", messages.iter().map(|m| partition(&m.key)).collect()),
        ("topic", messages.iter().map(|m| usize::from(m.judgment)).collect()),
    ];
    for (name, part) in cuts {
        let parts = part.iter().max().unwrap() + 1;
        let files: Vec<PathBuf> = (0..parts)
            .map(|p| {
                let lines: Vec<Vec<u8>> =
                    messages.iter().zip(&part).filter(|(_, q)| **q == p).map(|(m, _)| m.payload.clone()).collect();
                temp(&format!("cut-{name}-{p}.jsonl"), &lines)
            })
            .collect();
        let paths: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let (code, got, err) = replay(&[], &paths);
        assert_eq!(code, 0, "{err}");
        assert_eq!(got, want, "cut by {name}");
        for f in &files {
            let _ = std::fs::remove_file(f);
        }
    }
    let _ = std::fs::remove_file(&whole_file);
}
