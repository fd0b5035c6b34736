//! The summary (`all`) and printing: how each measure's values add up over
//! topics, and how trec_eval prints them.
//!
//! In the prefs flow: last. The caller prints each evaluated topic's
//! values with [`format_value`], adds them up with [`accumulate`], and
//! prints the summary from [`summarize`].

use super::{N, NUM_PREFS_FUL_RET};

/// Whether measure `i` is a count: printed as an integer (`%ld`) and summed,
/// not averaged, in the summary. The others print as `%6.4f` and average.
pub fn is_count(i: usize) -> bool {
    i <= NUM_PREFS_FUL_RET
}

/// Adds one topic's values to the running sums (`te_acc_meas_s`): call it
/// once per evaluated topic, in topic order.
pub fn accumulate(sums: &mut [f64; N], topic: &[f64; N]) {
    for (s, v) in sums.iter_mut().zip(topic) {
        *s += v;
    }
}

/// The summary values: counts stay sums; the others are divided by
/// `num_topics` (the number of topics evaluated, or with `-c` the number of
/// topics in the judgments), unless it is 0.
pub fn summarize(sums: &[f64; N], num_topics: usize) -> [f64; N] {
    let mut out = *sums;
    for (i, v) in out.iter_mut().enumerate() {
        if !is_count(i) && num_topics > 0 {
            *v /= num_topics as f64;
        }
    }
    out
}

/// Measure `i`'s value as trec_eval prints it, per topic and in the
/// summary: `%ld` of the value truncated for counts, `%6.4f` otherwise.
pub fn format_value(i: usize, value: f64) -> String {
    if is_count(i) { format!("{}", value as i64) } else { crate::eval::CFixed(value).to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::prefs::MEASURES;

    #[test]
    fn measure_list_is_trec_evals() {
        assert_eq!(N, 14);
        assert_eq!(MEASURES[0], "prefs_num_prefs_poss");
        assert_eq!(MEASURES[13], "prefs_avgjg_imp");
        assert!((0..N).filter(|&i| is_count(i)).eq(0..3));
        assert_eq!(format_value(0, 66130.0), "66130");
        assert_eq!(format_value(3, 8.0 / 13.0), "0.6154");
        assert_eq!(format_value(4, 1.0), "1.0000");
    }
}
