//! `-Z`: per-topic values as z-scores against reference means, the last
//! step before a topic's values are printed and folded into the summary.
//!
//! The file has lines `qid measure_name mean std_dev`, as trec_eval's
//! `get_zscores.c` reads them. A value whose topic or measure the file lacks
//! becomes −1000000 (trec_eval's `MISSING_ZSCORE_VALUE`); so does a value
//! different from its mean when the standard deviation is 0.

use rustc_hash::FxHashMap;
use std::path::{Path, PathBuf};
use thiserror::Error;

const MISSING: f64 = -1_000_000.0;

#[derive(Debug, Error)]
pub enum ZError {
    #[error("cannot read z-score file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{path}:{line}: expected \"qid measure mean std_dev\" with two numbers, found {found:?}")]
    Line { path: PathBuf, line: usize, found: String },
}

/// Means and standard deviations per topic: (measure name, mean, std_dev)
/// sorted by name, lines of one name in file order, searched the way
/// trec_eval searches them (so a name listed twice picks the same line).
#[derive(Debug, Default)]
pub struct Zscores {
    by_topic: FxHashMap<Vec<u8>, Vec<(String, f64, f64)>>,
}

impl Zscores {
    pub fn read(path: &Path) -> Result<Zscores, ZError> {
        let buf = std::fs::read(path).map_err(|source| ZError::Read { path: path.to_path_buf(), source })?;
        Zscores::parse(path, super::trec::without_bom(&buf))
    }

    pub fn parse(path: &Path, buf: &[u8]) -> Result<Zscores, ZError> {
        let mut z = Zscores::default();
        for (i, line) in buf.split(|&b| b == b'\n').enumerate() {
            // C's isspace, as trec_eval splits (a vertical tab included).
            let is_space = |b: &u8| super::trec::is_space(*b);
            if line.iter().all(is_space) {
                continue;
            }
            let bad = || ZError::Line {
                path: path.to_path_buf(),
                line: i + 1,
                found: String::from_utf8_lossy(line).trim().to_string(),
            };
            let fields: Vec<&[u8]> = line.split(is_space).filter(|f| !f.is_empty()).collect();
            let [qid, measure, mean, stddev] = fields[..] else {
                return Err(bad());
            };
            let number = |f: &[u8]| std::str::from_utf8(f).ok().and_then(|s| s.parse::<f64>().ok());
            let (mean, stddev) = (number(mean).ok_or_else(bad)?, number(stddev).ok_or_else(bad)?);
            let measure = String::from_utf8_lossy(measure).into_owned();
            z.by_topic.entry(qid.to_vec()).or_default().push((measure, mean, stddev));
        }
        for lines in z.by_topic.values_mut() {
            // Stable, as glibc's merge-sort `qsort` that trec_eval calls.
            lines.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
        }
        Ok(z)
    }

    /// Converts one topic's values in place; `names` are the values' printed names.
    pub fn convert(&self, qid: &[u8], names: &[&str], values: &mut [f64]) {
        let Some(topic) = self.by_topic.get(qid) else {
            values.fill(MISSING);
            return;
        };
        for (v, name) in values.iter_mut().zip(names) {
            *v = match find(topic, name) {
                None => MISSING,
                Some((mean, stddev)) if stddev != 0.0 => (*v - mean) / stddev,
                Some((mean, _)) if *v == mean => 0.0,
                Some(_) => MISSING,
            };
        }
    }
}

/// trec_eval's `find_meas`: a binary search whose upper end starts one
/// past the last line. Where trec_eval then reads past the array, the
/// measure counts as missing.
fn find(lines: &[(String, f64, f64)], name: &str) -> Option<(f64, f64)> {
    let (mut start, mut end) = (0i64, lines.len() as i64);
    while start <= end {
        let current = (start + end) / 2;
        let (line, mean, stddev) = lines.get(current as usize)?;
        match name.as_bytes().cmp(line.as_bytes()) {
            std::cmp::Ordering::Less => end = current - 1,
            std::cmp::Ordering::Greater => start = current + 1,
            std::cmp::Ordering::Equal => return Some((*mean, *stddev)),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_and_marks_missing() {
        let z = Zscores::parse(Path::new("z"), b"1 map 0.5 0.25\n1 P_5 0.2 0\n").unwrap();
        let mut v = [1.0, 0.2, 0.3, 7.0];
        z.convert(b"1", &["map", "P_5", "P_10", "num_q"], &mut v[..]);
        assert_eq!(v, [2.0, 0.0, MISSING, MISSING]);
        let mut v = [1.0];
        z.convert(b"2", &["map"], &mut v);
        assert_eq!(v, [MISSING]);
        assert!(Zscores::parse(Path::new("z"), b"1 map 0.5\n").is_err());
        // A name listed three times: trec_eval's search lands on the middle line.
        let z = Zscores::parse(Path::new("z"), b"1 map 0 1\n1 map 0.5 1\n1 map 0.7 1\n").unwrap();
        let mut v = [1.0];
        z.convert(b"1", &["map"], &mut v);
        assert_eq!(v, [0.5]);
    }
}
