//! `rankpulse replay` end to end through the binary, a module per
//! behaviour it proves; the helpers they share are here.

mod compare;
mod config;
mod debias;
mod exposition;
mod input;

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

/// `rankpulse replay FILE…` with the default configuration.
fn replay_files(files: &[&Path]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).arg("replay").args(files).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into(),
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

fn sum_rejected(exposition: &str) -> f64 {
    exposition
        .lines()
        .filter_map(|l| l.strip_prefix("rankpulse_events_rejected_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
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
