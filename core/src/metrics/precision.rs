//! Precision@k, recall@k and average precision@k (seeds 000, 002, 004), with
//! trec_eval's denominators: P@k divides by k even when fewer results were
//! shown (`P`); R@k and AP@k divide by the number of relevant judged
//! documents, shown or not (`recall`, `map_cut`), so relevant documents the
//! ranker missed count as precision 0.

use super::{Grade, is_relevant};

/// P@k for each ascending cutoff. A `NO_CUTOFF` cutoff divides by the list length.
pub fn precision_at(shown: &[Grade], threshold: Grade, cutoffs: &[usize], out: &mut [f64]) {
    debug_assert_eq!(cutoffs.len(), out.len());
    let mut rel_so_far = 0u32;
    let mut i = 0usize;
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        while i < shown.len() && i < k {
            rel_so_far += u32::from(is_relevant(shown[i], threshold));
            i += 1;
        }
        let denominator = if k == super::NO_CUTOFF { shown.len() } else { k };
        *slot = if denominator == 0 { 0.0 } else { f64::from(rel_so_far) / denominator as f64 };
    }
}

/// R@k for each ascending cutoff; `None` when nothing relevant was judged.
pub fn recall_at(shown: &[Grade], threshold: Grade, num_relevant: u32, cutoffs: &[usize], out: &mut [Option<f64>]) {
    debug_assert_eq!(cutoffs.len(), out.len());
    if num_relevant == 0 {
        out.iter_mut().for_each(|o| *o = None);
        return;
    }
    let mut rel_so_far = 0u32;
    let mut i = 0usize;
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        while i < shown.len() && i < k {
            rel_so_far += u32::from(is_relevant(shown[i], threshold));
            i += 1;
        }
        *slot = Some(f64::from(rel_so_far) / f64::from(num_relevant));
    }
}

/// AP@k for each ascending cutoff: Σ over relevant results within k of
/// (precision at that rank), divided by the number of relevant judged
/// documents; `None` when nothing relevant was judged.
pub fn average_precision_at(
    shown: &[Grade],
    threshold: Grade,
    num_relevant: u32,
    cutoffs: &[usize],
    out: &mut [Option<f64>],
) {
    debug_assert_eq!(cutoffs.len(), out.len());
    if num_relevant == 0 {
        out.iter_mut().for_each(|o| *o = None);
        return;
    }
    let mut rel_so_far = 0u32;
    let mut sum = 0.0;
    let mut i = 0usize;
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        while i < shown.len() && i < k {
            if is_relevant(shown[i], threshold) {
                rel_so_far += 1;
                sum += f64::from(rel_so_far) / (i + 1) as f64;
            }
            i += 1;
        }
        *slot = Some(sum / f64::from(num_relevant));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::Moments;
    use crate::metrics::NO_CUTOFF;

    fn ap(shown: &[Grade], num_rel: u32) -> f64 {
        let mut out = [None];
        average_precision_at(shown, 1, num_rel, &[NO_CUTOFF], &mut out);
        out[0].unwrap()
    }

    /// Seed 002: query 1 has 4 relevant documents, retrieved at ranks 1, 2, 4,
    /// 7 → AP = (1/1 + 2/2 + 3/4 + 4/7)/4 = 0.83; query 2 has 5 relevant,
    /// retrieved at 1, 3, 5 → AP = (1 + 2/3 + 3/5)/5 = 0.45; MAP = 0.64.
    #[test]
    fn seed_ap_and_map() {
        let q1 = [1, 1, 0, 1, 0, 0, 1];
        let q2 = [1, 0, 1, 0, 1];
        let (ap1, ap2) = (ap(&q1, 4), ap(&q2, 5));
        assert_eq!((ap1 * 100.0).round() / 100.0, 0.83);
        assert_eq!((ap2 * 100.0).round() / 100.0, 0.45);
        let mut map = Moments::default();
        map.add(ap1, 1);
        map.add(ap2, 1);
        assert_eq!((map.mean().unwrap() * 100.0).round() / 100.0, 0.64);
    }

    /// Seed 004: relevant documents at 1, 3, 6 (all three relevant retrieved):
    /// AveP = (1/1 + 2/3 + 3/6) / 3.
    #[test]
    fn seed_avep_positions_1_3_6() {
        let shown = [1, 0, 1, 0, 0, 1];
        assert_eq!(ap(&shown, 3), (1.0 + 2.0 / 3.0 + 3.0 / 6.0) / 3.0);
    }

    #[test]
    fn precision_divides_by_k_and_recall_by_relevant() {
        let shown = [1, 0, 2];
        let mut p = [0.0; 3];
        precision_at(&shown, 1, &[1, 2, 10], &mut p);
        assert_eq!(p, [1.0, 0.5, 0.2]);
        let mut r = [None; 3];
        recall_at(&shown, 1, 4, &[1, 2, 10], &mut r);
        assert_eq!(r, [Some(0.25), Some(0.25), Some(0.5)]);
        recall_at(&shown, 1, 0, &[1, 2, 10], &mut r);
        assert_eq!(r, [None; 3]);
        // Threshold 2 makes grade 1 non-relevant.
        precision_at(&shown, 2, &[1, 2, 10], &mut p);
        assert_eq!(p, [0.0, 0.0, 0.1]);
    }

    #[test]
    fn ap_cut_counts_only_the_top_k() {
        let shown = [0, 1, 1];
        let mut out = [None; 2];
        average_precision_at(&shown, 1, 2, &[2, NO_CUTOFF], &mut out);
        assert_eq!(out, [Some(0.25), Some((0.5 + 2.0 / 3.0) / 2.0)]);
    }
}
