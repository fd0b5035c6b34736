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
    #[error("{path}:{line}: expected \"qid measure mean std_dev\"")]
    Line { path: PathBuf, line: usize },
}

/// Means and standard deviations per (topic, measure name).
#[derive(Debug, Default)]
pub struct Zscores {
    by_topic: FxHashMap<Vec<u8>, FxHashMap<String, (f64, f64)>>,
}

impl Zscores {
    pub fn read(path: &Path) -> Result<Zscores, ZError> {
        let buf = std::fs::read(path).map_err(|source| ZError::Read { path: path.to_path_buf(), source })?;
        Zscores::parse(path, &buf)
    }

    pub fn parse(path: &Path, buf: &[u8]) -> Result<Zscores, ZError> {
        let mut z = Zscores::default();
        for (i, line) in buf.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let bad = || ZError::Line { path: path.to_path_buf(), line: i + 1 };
            let fields: Vec<&[u8]> = line.split(u8::is_ascii_whitespace).filter(|f| !f.is_empty()).collect();
            let [qid, measure, mean, stddev] = fields[..] else {
                return Err(bad());
            };
            let number = |f: &[u8]| std::str::from_utf8(f).ok().and_then(|s| s.parse::<f64>().ok());
            let (mean, stddev) = (number(mean).ok_or_else(bad)?, number(stddev).ok_or_else(bad)?);
            let measure = String::from_utf8_lossy(measure).into_owned();
            z.by_topic.entry(qid.to_vec()).or_default().insert(measure, (mean, stddev));
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
            *v = match topic.get(*name) {
                None => MISSING,
                Some(&(mean, stddev)) if stddev != 0.0 => (*v - mean) / stddev,
                Some(&(mean, _)) if *v == mean => 0.0,
                Some(_) => MISSING,
            };
        }
    }
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
    }
}
