//! `rankpulse replay` end to end through the binary: a small event file
//! whose values are computed by hand below, checked on the exposition text.

use std::path::Path;
use std::process::Command;

fn replay(args: &[&str], file: &Path) -> (i32, String, String) {
    replay_env(&[], args, file)
}

/// [`replay`] with environment overrides (`RANKPULSE__…`).
fn replay_env(env: &[(&str, &str)], args: &[&str], file: &Path) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .arg("replay")
        .args(args)
        .arg(file)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn value(exposition: &str, series: &str) -> f64 {
    exposition
        .lines()
        .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no series {series} in\n{exposition}"))
        .parse()
        .unwrap()
}

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

/// A scratch file of `bytes`, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(name: &str, bytes: &[u8]) -> Scratch {
        let path = std::env::temp_dir().join(format!("rankpulse-replay-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        Scratch(path)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// An impression of `docs` (positions in order) for list `session` of
/// `ranker` in market us, at `ms`.
fn impression_line(id: &str, session: &str, ms: i64, docs: &[&str], ranker: &str) -> String {
    let results: Vec<String> = docs.iter().map(|d| format!(r#"{{"doc_id":"{d}"}}"#)).collect();
    format!(
        r#"{{"type":"impression","event_id":"{id}","session_id":"{session}","timestamp":{ms},"results":[{}],"dimensions":{{"ranker":"{ranker}","market":"us"}}}}"#,
        results.join(",")
    )
}

/// A judgment of `doc` in list `session` at `ms`: `judged` is
/// `"grade":N` or `"action":"click"`.
fn judgment_line(id: &str, session: &str, doc: &str, judged: &str, ms: i64) -> String {
    format!(
        r#"{{"type":"judgment","event_id":"{id}","session_id":"{session}","doc_id":"{doc}",{judged},"timestamp":{ms}}}"#
    )
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

/// `rankpulse replay FILE…` with the default configuration.
fn replay_files(files: &[&Path]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).arg("replay").args(files).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
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
    if !crate::common::in_a_fresh_process("replay::a_line_past_the_message_limit_is_skipped_without_holding_it") {
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

fn sum_rejected(exposition: &str) -> f64 {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("rankpulse_events_rejected_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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

/// Lists of two rankers over `minutes` of event time, one every 5 s, each
/// session of three searches: what `--history` is tested on.
fn minutes_of_lists(minutes: i64) -> String {
    let mut lines = String::new();
    let t0 = 1_700_000_000_000i64;
    for i in 0..minutes * 12 {
        let (ts, session, arm) =
            (t0 + i * 5_000, format!("s{}", i / 3), if i % 2 == 0 { "control" } else { "candidate" });
        lines += &format!(
            r#"{{"type":"impression","event_id":"i{i}","session_id":"{session}","query_id":"q{i}","timestamp":{ts},"results":[{{"doc_id":"a","position":1}},{{"doc_id":"b","position":2}}],"dimensions":{{"ranker":"{arm}","market":"us"}}}}"#
        );
        lines += "\n";
        let doc = if i % 3 == 0 { "b" } else { "a" };
        lines += &format!(
            r#"{{"type":"judgment","event_id":"j{i}","session_id":"{session}","query_id":"q{i}","doc_id":"{doc}","grade":{},"timestamp":{}}}"#,
            1 + i % 3,
            ts + 1_000
        );
        lines += "\n";
    }
    lines
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
