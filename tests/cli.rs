//! The command line as a user meets it, through the real binary: what its
//! error messages say, and how often.

use std::process::Command;

fn rankpulse(args: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse")).args(args).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// An error whose message already quotes its OS error must not also hand
/// it on as its `source()`: main prints the whole chain, and the cause
/// would then be said twice ("…: No such file or directory (os error 2):
/// No such file or directory (os error 2)").
#[test]
fn a_missing_file_says_its_os_error_once() {
    let missing = std::env::temp_dir().join(format!("rankpulse-cli-{}-missing", std::process::id()));
    let missing = missing.to_str().unwrap();
    // "No such file or directory (os error 2)", as the binary will see it.
    let os_error = std::fs::File::open(missing).unwrap_err().to_string();
    for args in
        [vec!["run", "--config", missing], vec!["replay", "--config", missing, missing], vec!["replay", missing]]
    {
        let (code, stderr) = rankpulse(&args);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.matches(&os_error).count(), 1, "{args:?} should say {os_error:?} once: {stderr}");
        assert!(stderr.contains(missing), "{args:?} should name the file: {stderr}");
    }
}

/// An environment override's unknown key says that it came from the
/// environment, and from which variable.
#[test]
fn an_unknown_environment_key_names_its_variable() {
    let out = Command::new(env!("CARGO_BIN_EXE_rankpulse"))
        .args(["run", "--print-config"])
        .env("RANKPULSE__KAFKA__NOPE", "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.starts_with(
            "rankpulse run: environment variable RANKPULSE__KAFKA__NOPE: config key kafka.nope: unknown field"
        ),
        "{stderr}"
    );
}
