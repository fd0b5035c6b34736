//! Reciprocal rank (seeds 000, 002, 004): 1 / rank of the first relevant
//! result within the cutoff, 0 when there is none. MRR is its mean over lists,
//! taken by the accumulators.

use super::{Grade, is_relevant};

/// RR@k for each ascending cutoff.
pub fn reciprocal_rank_at(shown: &[Grade], threshold: Grade, cutoffs: &[usize], out: &mut [f64]) {
    debug_assert_eq!(cutoffs.len(), out.len());
    let first = shown.iter().position(|&g| is_relevant(g, threshold));
    for (slot, &k) in out.iter_mut().zip(cutoffs) {
        *slot = match first {
            Some(i) if i < k => 1.0 / (i + 1) as f64,
            _ => 0.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accumulate::Moments;
    use crate::metrics::NO_CUTOFF;

    /// Seed 000: first relevant results at ranks 3, 1, 5 and none give
    /// MRR = (1/3 + 1 + 1/5 + 0) / 4 = 0.383.
    #[test]
    fn seed_mrr() {
        let lists: [&[Grade]; 4] = [&[0, 0, 1], &[1, 0], &[0, 0, 0, 0, 2, 1], &[0, 0, 0]];
        let mut mrr = Moments::default();
        for list in lists {
            let mut out = [0.0];
            reciprocal_rank_at(list, 1, &[NO_CUTOFF], &mut out);
            mrr.add(out[0], 1);
        }
        let mean = mrr.mean().unwrap();
        assert_eq!((mean * 1000.0).round() / 1000.0, 0.383);
    }

    #[test]
    fn cutoff_hides_late_relevant() {
        let mut out = [0.0; 3];
        reciprocal_rank_at(&[0, 0, 3], 2, &[1, 3, 10], &mut out);
        assert_eq!(out, [0.0, 1.0 / 3.0, 1.0 / 3.0]);
        reciprocal_rank_at(&[1, 1], 2, &[1, 3, 10], &mut out);
        assert_eq!(out, [0.0, 0.0, 0.0]);
    }
}
