//! What replay does with its input: files, standard input, order, clocks, limits and what it rejects.

use super::*;

#[test]
fn replay_is_deterministic_and_reads_stdin() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (code, first, err) = replay(&[], &file);
    assert_eq!(code, 0, "{err}");
    assert!(first.contains("rankpulse_lists_finalized_total"), "{first}");
    let (code, second, err) = replay(&[], &file);
    assert_eq!(code, 0, "{err}");
    assert_eq!(first, second);
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["replay", "-"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout), first);
}

/// A binary file, or any file of something else, is not an exposition of
/// zeros: the replay fails, saying how many lines were rejected and why
/// the first one was.
#[test]
fn a_file_without_a_valid_event_fails_with_its_first_reject() {
    let mut bytes = vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, b'\n', b'\n'];
    bytes.extend_from_slice(b"{\"type\":\"click\"}\r\nnot json\n");
    let file = Scratch::new("binary", &bytes);
    let (code, out, err) = replay(&[], &file.0);
    assert_eq!(code, 2, "{err}");
    assert_eq!(out, "", "nothing printed");
    assert!(err.contains(file.0.to_str().unwrap()), "{err}");
    assert!(err.contains("no line is a valid event: 3 line(s) rejected, the first (line 1) as invalid_utf8"), "{err}");
    // One valid event among them is enough: the rest are counted.
    let valid =
        r#"{"type":"judgment","event_id":"e","session_id":"s","doc_id":"d","grade":1,"timestamp":1700000000000}"#;
    bytes.extend_from_slice(valid.as_bytes());
    let file = Scratch::new("one-valid", &bytes);
    let (code, out, err) = replay(&[], &file.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="invalid_utf8"}"#), 1.0);
    assert_eq!(value(&out, r#"rankpulse_events_total{topic="replay",type="judgment"}"#), 1.0);
}

/// A file out of time order by more than the gap (an index exported shard
/// by shard) is replayed, with a warning that says how many events came
/// behind, what it cost and what to do, when it cost something (a list
/// orphan, a late judgment dropped, or amended in the windows only). One
/// behind by less than the gap joins its list: no warning then.
#[test]
fn a_file_out_of_time_order_is_warned_about() {
    let t = 1_700_000_000_000;
    let lines = |second_list_ms: i64| {
        [
            impression_line("i1", "a", t, &["d1", "d2"], "v1"),
            impression_line("i2", "b", second_list_ms, &["d1"], "v1"),
            judgment_line("j1", "a", "d2", r#""grade":1"#, t + 1_000),
        ]
        .join("\n")
    };
    for (name, second_list_ms, outcome) in [("dropped", t + 200_000, "dropped"), ("amended", t + 60_000, "amended")] {
        let behind = Scratch::new(name, lines(second_list_ms).as_bytes());
        let (code, out, err) = replay(&[], &behind.0);
        assert_eq!(code, 0, "{err}");
        assert!(err.contains("warning") && err.contains("1 event(s) more than session.gap (30s) older"), "{err}");
        assert!(err.contains("the first behind line 2 (2023-11-14T22:1"), "{err}");
        assert!(err.contains("in the whole replay 1 list(s) ended orphan or had a judgment come late"), "{err}");
        assert!(err.contains(behind.0.to_str().unwrap()) && err.contains("sort the file by timestamp"), "{err}");
        let late = format!(r#"rankpulse_late_judgments_total{{outcome="{outcome}"}}"#);
        assert_eq!(value(&out, "rankpulse_orphan_lists_total") + value(&out, &late), 1.0, "{out}");
    }
    let within = Scratch::new("within", lines(t + 20_000).as_bytes());
    let (code, out, err) = replay(&[], &within.0);
    assert_eq!((code, err.as_str()), (0, ""));
    // List a scored with its judgment: d2 at rank 2.
    let ndcg = value(&out, r#"rankpulse_ndcg_sum{k="10",ranker="v1",market="us"}"#);
    assert!((ndcg - 1.0 / 3f64.log2()).abs() < 1e-12, "{out}");
}

/// One event stamped more than the longest window (1h) after every event
/// before it leaves them all outside the windows, which end at the newest
/// event: the replay says which line did it. An event within the longest
/// window of the others says nothing.
#[test]
fn an_event_past_the_windows_of_all_before_it_is_named() {
    let t = 1_700_000_000_000;
    let lines = |last_ms: i64| {
        [
            impression_line("i1", "a", t, &["d1", "d2"], "v1"),
            judgment_line("j1", "a", "d2", r#""grade":1"#, t + 1_000),
            impression_line("i2", "b", t + 60_000, &["d1"], "v1"),
            judgment_line("j2", "c", "d1", r#""grade":1"#, last_ms),
        ]
        .join("\n")
    };
    let jump = Scratch::new("jump", lines(t + 60_000 + 3_600_001).as_bytes());
    let (code, out, err) = replay(&[], &jump.0);
    assert_eq!(code, 0, "{err}");
    let name = jump.0.display();
    assert!(
        err.contains(&format!("hold nothing before {name} line 4 (2023-11-14T23:14:20.001Z): it is 1h after")),
        "{err}"
    );
    assert!(err.contains(&format!("the newest of which is {name} line 3 (2023-11-14T22:14:20.000Z)")), "{err}");
    assert!(err.contains("so the 3 event(s) before it are outside every window (the longest is 1h)"), "{err}");
    // What the warning is about: both lists were scored, no window holds them.
    assert_eq!(value(&out, r#"rankpulse_lists_finalized_total{ranker="v1",market="us"}"#), 2.0);
    assert!(!out.contains(r#"rankpulse_ndcg{k="10",window="1h",ranker="v1""#), "{out}");
    let within = Scratch::new("within-window", lines(t + 60_000 + 3_600_000).as_bytes());
    let (code, out, err) = replay(&[], &within.0);
    assert_eq!((code, err.as_str()), (0, ""));
    assert!(out.contains(r#"rankpulse_ndcg{k="10",window="1h",ranker="v1""#), "{out}");
}

/// A clock running ahead: one event two hours after every event around
/// it. At the head of a judgments file it holds that file back in the
/// merge until the impressions file has gone past it, and the lists end
/// orphan; in one file, the lists it passes close early. Neither can be
/// told apart from a file out of order or a quiet spell ended by it (a
/// rule that tried rejected good events of unsorted files), so the replay
/// names the line every later event was behind, and a quiet spell, whose
/// events stay after it, says nothing.
#[test]
fn an_event_of_a_clock_running_ahead_of_its_file_is_named() {
    let t = 1_700_000_000_000;
    let imps: Vec<String> = (0..4)
        .map(|i| impression_line(&format!("i{i}"), &format!("s{i}"), t + i * 60_000, &["d1", "d2"], "v1"))
        .collect();
    let judged =
        |extra: Option<String>| {
            let mut lines: Vec<String> = extra.into_iter().collect();
            lines.extend((0..4).map(|i| {
                judgment_line(&format!("j{i}"), &format!("s{i}"), "d2", r#""grade":2"#, t + i * 60_000 + 5_000)
            }));
            lines.join("\n")
        };
    let imps = Scratch::new("ahead-imps", imps.join("\n").as_bytes());
    let clean = Scratch::new("ahead-clean", judged(None).as_bytes());
    let ahead = judged(Some(judgment_line("bad", "s0", "d1", r#""grade":3"#, t + 2 * 3_600_000)));
    let ahead = Scratch::new("ahead-bad", ahead.as_bytes());
    let (code, expected, err) = replay_files(&[&imps.0, &clean.0]);
    assert_eq!((code, err.as_str()), (0, ""));
    let ndcg = r#"rankpulse_ndcg_sum{k="10",ranker="v1",market="us"}"#;
    // d2 at rank 2 in every list: 1 / log2 3 each.
    assert!((value(&expected, ndcg) - 4.0 / 3f64.log2()).abs() < 1e-12, "{expected}");
    let (code, out, err) = replay_files(&[&imps.0, &ahead.0]);
    assert_eq!(code, 0, "{err}");
    let name = ahead.0.display();
    assert!(
        err.contains(&format!("{name}: 4 event(s) more than session.gap (30s) older than an event before them in the file, the first behind line 1 (2023-11-15T00:13:20.000Z)")),
        "{err}"
    );
    assert!(err.contains("If line 1's clock is wrong, remove it"), "{err}");
    assert!(value(&out, "rankpulse_orphan_lists_total") > 0.0, "{out}");
    // In one file, in the middle: the same line named.
    let mut one: Vec<String> = (0..4)
        .flat_map(|i| {
            [
                impression_line(&format!("i{i}"), &format!("s{i}"), t + i * 60_000, &["d1", "d2"], "v1"),
                judgment_line(&format!("j{i}"), &format!("s{i}"), "d2", r#""grade":2"#, t + i * 60_000 + 5_000),
            ]
        })
        .collect();
    one.insert(3, judgment_line("bad", "s1", "d1", r#""grade":3"#, t + 2 * 3_600_000));
    let ahead_one = Scratch::new("ahead-one", one.join("\n").as_bytes());
    let (code, _, err) = replay(&[], &ahead_one.0);
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("5 event(s) more than session.gap (30s) older than an event before them in the file, the first behind line 4"), "{err}");
    // A quiet spell of half an hour: every event after it stays after it.
    let spell: Vec<String> = (0..4)
        .flat_map(|i| {
            let at = t + i * 60_000 + if i >= 2 { 1_800_000 } else { 0 };
            [
                impression_line(&format!("i{i}"), &format!("s{i}"), at, &["d1", "d2"], "v1"),
                judgment_line(&format!("j{i}"), &format!("s{i}"), "d2", r#""grade":2"#, at + 5_000),
            ]
        })
        .collect();
    let spell = Scratch::new("quiet-spell", spell.join("\n").as_bytes());
    let (code, out, err) = replay(&[], &spell.0);
    assert_eq!((code, err.as_str()), (0, ""));
    assert_eq!(value(&out, ndcg), value(&expected, ndcg), "{out}");
}

/// An empty input (a file, blank lines, an empty pipe) is refused too.
#[test]
fn an_empty_input_fails() {
    for (name, bytes) in [
        ("empty", &b""[..]),
        ("blank", &b"\n\r\n\n"[..]),
        ("spaces", &b" \t\n  \r\n\t"[..]),
        ("bom", &b"\xef\xbb\xbf\r\n"[..]),
    ] {
        let file = Scratch::new(name, bytes);
        let (code, out, err) = replay(&[], &file.0);
        assert_eq!((code, out.as_str()), (2, ""), "{name}: {err}");
        assert!(err.contains("no event to replay: the input is empty or holds only blank lines"), "{name}: {err}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["replay", "-"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("standard input: no event to replay"), "{err}");
}

/// A 64 MiB line (a log file, a dump without newlines) between two valid
/// events: rejected as `too_large`, the events around it counted, and the
/// replay's peak memory far below the line's size: it is read past, not
/// into memory.
#[test]
fn a_line_past_the_message_limit_is_skipped_without_holding_it() {
    use std::io::{Read, Write};
    if !crate::common::in_a_fresh_process("replay::input::a_line_past_the_message_limit_is_skipped_without_holding_it")
    {
        return;
    }
    let judgment = |id: &str| {
        format!(
            r#"{{"type":"judgment","event_id":"{id}","session_id":"s","doc_id":"d","grade":1,"timestamp":1700000000000}}"#
        )
    };
    let file = Scratch::new("long-line", b"");
    {
        let mut out = std::io::BufWriter::new(std::fs::File::create(&file.0).unwrap());
        writeln!(out, "{}", judgment("before")).unwrap();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..64 {
            out.write_all(&chunk).unwrap();
        }
        writeln!(out, "\n{}", judgment("after")).unwrap();
        out.flush().unwrap();
    }
    #[allow(clippy::zombie_processes, reason = "reaped by wait4 below, which reports its peak memory")]
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .arg("replay")
        .arg(&file.0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (String::new(), String::new());
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    // wait4 rather than Child::wait: it reports this child's own peak
    // resident size, whatever other tests' children used (and, in a fresh
    // process, not this executable's; see `in_a_fresh_process`).
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: the pid is this test's own unreaped child; status and usage are valid, writable.
    let reaped = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    assert_eq!(reaped, child.id() as libc::pid_t);
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "{err}");
    assert_eq!(value(&out, r#"rankpulse_events_total{topic="replay",type="judgment"}"#), 2.0);
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="too_large"}"#), 1.0);
    assert_eq!(sum_rejected(&out), 1.0, "{out}");
    let peak_mib = usage.ru_maxrss as f64 / 1024.0;
    assert!(peak_mib < 32.0, "peak resident {peak_mib:.1} MiB while skipping a 64 MiB line");
    eprintln!("peak resident {peak_mib:.1} MiB");
}

/// `input.max_future_skew` through the environment: an impression 10
/// minutes ahead of the wall clock is `future_timestamp` under the default
/// (5m) and under 9m, taken under 11m; one a minute old is taken always.
#[test]
fn input_max_future_skew_decides_how_far_ahead_an_event_may_be() {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let lines = [
        impression_line("i1", "L1", now - 60_000, &["a"], "control"),
        impression_line("i2", "L2", now + 600_000, &["a"], "control"),
    ];
    let events = Scratch::new("future-skew.jsonl", (lines.join("\n") + "\n").as_bytes());
    let future = r#"rankpulse_events_rejected_total{reason="future_timestamp"}"#;
    let lists = r#"rankpulse_lists_finalized_total{ranker="control",market="us"}"#;
    for (skew, rejected) in [(None, 1.0), (Some("9m"), 1.0), (Some("11m"), 0.0)] {
        let env: Vec<(&str, &str)> = skew.map(|s| ("RANKPULSE__INPUT__MAX_FUTURE_SKEW", s)).into_iter().collect();
        let (code, out, err) = replay_env(&env, &[], &events.0);
        assert_eq!(code, 0, "{skew:?}: {err}");
        assert_eq!(value(&out, future), rejected, "{skew:?}: {out}");
        assert_eq!(value(&out, lists), 2.0 - rejected, "{skew:?}: {out}");
    }
}

/// `input.max_results` through the environment: at 2, small.jsonl's
/// control impression (3 results) is rejected as too many results, the
/// candidate's (2) is not.
#[test]
fn input_max_results_rejects_longer_impressions() {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let (code, text, err) = replay_env(&[("RANKPULSE__INPUT__MAX_RESULTS", "2")], &[], &file);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&text, r#"rankpulse_events_rejected_total{reason="too_many_results"}"#), 1.0, "{text}");
    assert_eq!(value(&text, r#"rankpulse_lists{window="1h",ranker="candidate",market="us"}"#), 1.0);
    assert!(!text.contains(r#"rankpulse_lists{window="1h",ranker="control""#), "{text}");
}

/// Timestamps in epoch seconds where the contract says milliseconds: read
/// as milliseconds they fall in January 1970, before `input.min_timestamp`
/// (2000-01-01), and are rejected as `past_timestamp` rather than
/// stretching every gap and window a thousandfold. A file of nothing else
/// fails, naming the reason; `input.min_timestamp` set earlier takes them.
#[test]
fn timestamps_in_seconds_are_rejected_as_past() {
    let seconds = 1_700_000_000i64;
    let lines = [
        impression_line("i1", "L1", seconds, &["a", "b"], "control"),
        judgment_line("j1", "L1", "b", r#""grade":1"#, seconds + 1),
    ];
    let events = Scratch::new("seconds.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (code, out, err) = replay(&[], &events.0);
    assert_eq!((code, out.as_str()), (2, ""), "{err}");
    assert!(err.contains("2 line(s) rejected, the first (line 1) as past_timestamp"), "{err}");
    // Among valid events they are counted, and no list of theirs exists.
    let valid = impression_line("i2", "L2", 1_700_000_000_000, &["a"], "candidate");
    let mixed = Scratch::new("seconds-mixed.jsonl", (lines.join("\n") + "\n" + &valid + "\n").as_bytes());
    let (code, out, err) = replay(&[], &mixed.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="past_timestamp"}"#), 2.0, "{out}");
    assert!(!out.contains(r#"ranker="control""#), "{out}");
    // Moved back to the epoch, the bound takes them (as 1970 events).
    let (code, text, err) = replay_env(&[("RANKPULSE__INPUT__MIN_TIMESTAMP", "1970-01-01T00:00:00Z")], &[], &events.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&text, r#"rankpulse_lists_finalized_total{ranker="control",market="us"}"#), 1.0, "{text}");
}

/// A UTF-8 byte order mark at the start of a file (as editors on Windows
/// write one) is its encoding, not part of the first event: the file
/// replays as without it, and so does a `_bulk` export whose first line
/// is an action line. Elsewhere it is content, and the line is rejected.
#[test]
fn a_byte_order_mark_at_the_start_is_skipped() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let text = std::fs::read(&fixture).unwrap();
    let (code, plain, err) = replay(&[], &fixture);
    assert_eq!(code, 0, "{err}");
    let with_bom = Scratch::new("bom.jsonl", &[&b"\xef\xbb\xbf"[..], &text].concat());
    let (code, out, err) = replay(&[], &with_bom.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out, plain);
    let query = r#"{"query_id":"q1","client_id":"c1","user_query":"tv","timestamp":"2023-11-14T22:13:20Z","query_response_hit_ids":["d1","d2"]}"#;
    let bulk = format!("\u{feff}{{\"index\":{{\"_index\":\"ubi_queries\"}}}}\n{query}\n");
    let bulk = Scratch::new("bom-bulk.ndjson", bulk.as_bytes());
    let (code, out, err) = replay(&["--format", "ubi"], &bulk.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, r#"rankpulse_events_ignored_total{reason="bulk_action_line"}"#), 1.0, "{out}");
    assert_eq!(sum_rejected(&out), 0.0, "{out}");
    // Not at the start of the file: the line is not JSON (3 rejects: it,
    // and the fixture's own invalid line in each copy).
    let inner = Scratch::new("bom-inner.jsonl", &[&text[..], &b"\xef\xbb\xbf"[..], &text].concat());
    let (code, out, err) = replay(&[], &inner.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="invalid_json"}"#), 3.0, "{out}");
    // The mark is not part of the first message's size: a first event of
    // exactly input.max_message_bytes is taken with or without it, one
    // byte more is too large with or without it.
    let first = std::str::from_utf8(&text).unwrap().lines().next().unwrap();
    let limit = first.len().to_string();
    let env = [("RANKPULSE__INPUT__MAX_MESSAGE_BYTES", limit.as_str())];
    for (name, bom) in [("bom-limit.jsonl", &b"\xef\xbb\xbf"[..]), ("no-bom-limit.jsonl", &b""[..])] {
        let exact = Scratch::new(name, &[bom, first.as_bytes(), b"\n"].concat());
        let (code, out, err) = replay_env(&env, &[], &exact.0);
        assert_eq!(code, 0, "{name}: {err}");
        assert_eq!(sum_rejected(&out), 0.0, "{name}: {out}");
        let over = Scratch::new(name, &[bom, first.as_bytes(), b" \n"].concat());
        let (code, _, err) = replay_env(&env, &[], &over.0);
        assert_eq!(code, 2, "{name}: {err}");
        assert!(err.contains("1 line(s) rejected, the first (line 1) as too_large"), "{name}: {err}");
    }
}

/// The one-file path and the merge of several files read a file the same
/// way (rejected lines, a byte order mark, blank lines, `_bulk` action
/// lines and first-reject reports included): a file alone, and the same
/// file beside an empty one, give the same exposition and the same error.
#[test]
fn one_file_alone_or_beside_an_empty_one_replays_the_same() {
    let fixture =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl")).unwrap();
    let native = Scratch::new("same-native.jsonl", &[&b"\xef\xbb\xbf\n \n"[..], &fixture].concat());
    let query = r#"{"query_id":"q1","client_id":"c1","user_query":"tv","timestamp":1700000000000,"query_response_hit_ids":["d1","d2"]}"#;
    let click = r#"{"action_name":"click","query_id":"q1","client_id":"c1","timestamp":1700000001000,"event_attributes":{"object":{"object_id":"d2"}}}"#;
    let bulk = format!(
        "{{\"index\":{{\"_index\":\"ubi_queries\"}}}}\n{query}\nnot json\n{{\"create\":{{\"_index\":\"ubi_events\"}}}}\n\n{click}\n"
    );
    let ubi = Scratch::new("same-ubi.ndjson", bulk.as_bytes());
    let rejects = Scratch::new("same-rejects.jsonl", b"\n{\"type\":\"click\"}\nnot json\n");
    let empty = Scratch::new("same-empty.jsonl", b"");
    let run = |args: &[&str], files: &[&Path]| {
        let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).arg("replay").args(args).args(files).output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    for (args, file) in [(&[][..], &native), (&["--format", "ubi"][..], &ubi), (&[][..], &rejects)] {
        let alone = run(args, &[&file.0]);
        let beside = run(args, &[&file.0, &empty.0]);
        assert_eq!(alone, beside, "{:?}", file.0);
    }
    let (code, out, _) = run(&["--format", "ubi"], &[&ubi.0]);
    assert_eq!(code, Some(0));
    assert_eq!(value(&out, r#"rankpulse_events_ignored_total{reason="bulk_action_line"}"#), 2.0, "{out}");
    assert_eq!(value(&out, r#"rankpulse_events_rejected_total{reason="invalid_json"}"#), 1.0);
    let (code, _, err) = run(&[], &[&rejects.0]);
    assert_eq!(code, Some(2));
    assert!(err.contains("the first (line 2) as unknown_type"), "{err}");
}

/// Two searches of one session sent without `query_id` are one list (the
/// key is the session alone): the second search's results at positions
/// the first one holds are dropped and counted, so the merge is visible.
/// With a `query_id` each they are two lists and nothing is counted.
#[test]
fn a_second_search_under_one_key_is_counted_as_position_conflicts() {
    let lines = [
        impression_line("i1", "S", 1_700_000_000_000, &["a", "b"], "control"),
        impression_line("i2", "S", 1_700_000_005_000, &["x", "y", "z"], "control"),
    ];
    let merged = Scratch::new("conflicts.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (code, out, err) = replay(&[], &merged.0);
    assert_eq!(code, 0, "{err}");
    // x and y find positions 1 and 2 taken; z takes position 3.
    assert_eq!(value(&out, "rankpulse_position_conflicts_total"), 2.0, "{out}");
    assert_eq!(value(&out, r#"rankpulse_lists_finalized_total{ranker="control",market="us"}"#), 1.0, "{out}");
    let keyed: Vec<String> = lines
        .iter()
        .zip(["q1", "q2"])
        .map(|(l, q)| l.replacen(r#""session_id":"S","#, &format!(r#""session_id":"S","query_id":"{q}","#), 1))
        .collect();
    let apart = Scratch::new("conflicts-keyed.jsonl", (keyed.join("\n") + "\n").as_bytes());
    let (code, out, err) = replay(&[], &apart.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, "rankpulse_position_conflicts_total"), 0.0, "{out}");
    assert_eq!(value(&out, r#"rankpulse_lists_finalized_total{ranker="control",market="us"}"#), 2.0, "{out}");
}

/// A read error names the input that failed, whichever of several it is;
/// standard input given twice is refused (two locks of it in one thread
/// waited on each other for ever).
#[test]
fn a_read_error_names_its_input_and_stdin_is_read_once() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/events/small.jsonl");
    let dir = std::env::temp_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).arg("replay").arg(&fixture).arg(&dir).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("cannot read {}: Is a directory", dir.display())), "{err}");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["replay", "-", "-"])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("`replay - -` still running after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("`-` (standard input) is given more than once"), "{err}");
}

/// A list whose second page comes under another ranker (an experiment
/// reassigned mid-list, or two searches under one key): counted in
/// `rankpulse_dimension_conflicts_total`, and the list counts once, under
/// the ranker of its earliest page.
#[test]
fn a_page_under_another_ranker_is_counted_as_a_dimension_conflict() {
    let lines = [
        impression_line("i1", "S", 1_700_000_000_000, &["a", "b"], "control"),
        impression_line("i2", "S", 1_700_000_001_000, &["a", "b"], "candidate"),
        impression_line("i3", "T", 1_700_000_002_000, &["a", "b"], "control"),
        impression_line("i4", "T", 1_700_000_003_000, &["a", "b"], "control"),
    ];
    let file = Scratch::new("dimension-conflicts.jsonl", (lines.join("\n") + "\n").as_bytes());
    let (code, out, err) = replay(&[], &file.0);
    assert_eq!(code, 0, "{err}");
    assert_eq!(value(&out, "rankpulse_dimension_conflicts_total"), 1.0, "{out}");
    assert_eq!(value(&out, r#"rankpulse_lists_finalized_total{ranker="control",market="us"}"#), 2.0, "{out}");
    assert!(!out.contains(r#"rankpulse_lists_finalized_total{ranker="candidate""#), "{out}");
}
