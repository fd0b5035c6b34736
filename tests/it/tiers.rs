//! The test tiers as the README names them: every `#[ignore]`d test in the
//! workspace says which tier it belongs to, and every tier of the README's
//! table is one that `.ci/run` runs. A test that names no tier, or a tier
//! nobody runs, is a test that silently never runs.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The tiers in README's "Running the tests" table (first column, split
/// at commas).
fn readme_tiers() -> Vec<String> {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let section = readme.split("## Running the tests").nth(1).expect("README has 'Running the tests'");
    let section = section.split("\n## ").next().unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| ") && !l.starts_with("| tier"))
        .flat_map(|l| l.split('|').nth(1).unwrap().split(',').map(|t| t.trim().to_string()).collect::<Vec<_>>())
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn every_ignored_test_names_a_tier_of_the_readme_and_ci_runs_every_tier() {
    let tiers = readme_tiers();
    assert!(tiers.len() >= 7, "{tiers:?}");
    let mut files = Vec::new();
    for dir in ["src", "tests", "core/src", "core/tests", "bench/src", "bench/tests", "testkit/src"] {
        rust_files(&root().join(dir), &mut files);
    }
    let mut ignored = 0;
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        for (i, line) in text.lines().enumerate() {
            let Some(rest) = line.trim_start().strip_prefix("#[ignore") else { continue };
            ignored += 1;
            let reason = rest.trim_start_matches(" = \"");
            let named = tiers.iter().any(|t| reason.starts_with(&format!("{t} tier")));
            assert!(named, "{}:{}: `{line}` names none of the README's tiers {tiers:?}", file.display(), i + 1);
        }
    }
    assert!(ignored >= 30, "found only {ignored} ignored tests: is the scan looking in the right places?");
    // Each tier has a section of .ci/run that says its name.
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap().to_lowercase();
    for tier in &tiers {
        let words = tier.to_lowercase().replace('-', " ");
        assert!(
            ci.lines().any(|l| l.starts_with("section ") && l.replace('-', " ").contains(&words)),
            "no `section` of .ci/run names the {tier} tier"
        );
    }
}
