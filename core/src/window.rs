//! Rolling windows: reads the time buckets of [`crate::accumulate`] into the
//! mean over the lists whose impression time lies in (now − span, now].
//!
//! Exact up to one bucket at the window's old edge: a window holds the
//! buckets that start at or after `now − span` and at or before `now`. With
//! the default 10 s buckets a 5 m window covers between 4 m 50 s and 5 m of
//! impressions. Because buckets are merged exactly (fixed point), a window
//! equals the batch mean of the lists it holds.

use crate::accumulate::{Accumulators, Cell, Series};
use std::collections::BTreeMap;

/// The merged cell of `series` for the window of `span_ms` ending at `now_ms`.
pub fn window_cell(acc: &Accumulators, series: &Series, now_ms: i64, span_ms: i64) -> Cell {
    let mut cell = Cell::new(acc.cutoffs);
    let (first_start, last_start) = window_bounds(acc.bucket_ms, now_ms, span_ms);
    let (first, last) = (acc.bucket_of(first_start), acc.bucket_of(last_start));
    if first > last {
        return cell;
    }
    for (_, bucket) in series.buckets.range(first..=last) {
        cell.merge(bucket);
    }
    cell
}

/// The window of every value of dimension label `label` (an index into
/// the dimension tuple), merged over the other labels' values: the arms of
/// a comparison, each over all markets. Exact, like every merge of cells.
pub fn window_cells_by(acc: &Accumulators, label: usize, now_ms: i64, span_ms: i64) -> BTreeMap<String, Cell> {
    let mut by: BTreeMap<String, Cell> = BTreeMap::new();
    for (dims, series) in &acc.series {
        let Some(value) = dims.get(label) else { continue };
        let cell = window_cell(acc, series, now_ms, span_ms);
        match by.get_mut(value.as_str()) {
            Some(merged) => merged.merge(&cell),
            None => {
                by.insert(value.clone(), cell);
            }
        }
    }
    by
}

/// Which buckets a window holds, as (first bucket start, last bucket start) in ms.
pub fn window_bounds(bucket_ms: i64, now_ms: i64, span_ms: i64) -> (i64, i64) {
    let old_edge = now_ms.saturating_sub(span_ms);
    let first = old_edge.div_euclid(bucket_ms) + i64::from(old_edge.rem_euclid(bucket_ms) != 0);
    (first * bucket_ms, now_ms.div_euclid(bucket_ms) * bucket_ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::list::ListScore;
    use std::sync::Arc;

    fn score(v: f64) -> ListScore {
        let mut s = ListScore::new(1);
        s.values.iter_mut().for_each(|x| *x = Some(v));
        s.gauc = Some((v, 1));
        s
    }

    #[test]
    fn window_holds_buckets_starting_after_the_old_edge() {
        let mut acc = Accumulators::new(1, 10_000);
        let dims: Arc<[String]> = vec!["a".to_string()].into();
        for (t, v) in [(5_000, 0.0), (15_000, 1.0), (25_000, 1.0), (59_000, 0.25)] {
            acc.fold(&dims, t, &score(v));
        }
        let series = &acc.series[&dims];
        // now = 60 000, span 50 000: old edge 10 000 → buckets 10 000 .. 50 000.
        let cell = window_cell(&acc, series, 60_000, 50_000);
        assert_eq!(cell.lists, 3);
        assert_eq!(cell.gauc().mean(), Some(0.75));
        // The old-edge bucket counts only when it starts at or after the edge.
        assert_eq!(window_cell(&acc, series, 60_000, 55_000).lists, 3);
        assert_eq!(window_cell(&acc, series, 60_000, 60_000).lists, 4);
        assert_eq!(window_cell(&acc, series, 60_000, 9_000).lists, 0);
        assert_eq!(window_cell(&acc, series, 60_000, 10_000).lists, 1);
        assert_eq!(window_bounds(10_000, 60_000, 55_000), (10_000, 60_000));
    }

    #[test]
    fn cells_by_a_label_merge_the_other_labels() {
        let mut acc = Accumulators::new(1, 10_000);
        let dim = |r: &str, m: &str| -> Arc<[String]> { vec![r.to_string(), m.to_string()].into() };
        acc.fold(&dim("control", "us"), 15_000, &score(0.5));
        acc.fold(&dim("control", "fr"), 15_000, &score(1.0));
        acc.fold(&dim("control", "fr"), 25_000, &score(0.0));
        acc.fold(&dim("v2", "us"), 25_000, &score(0.25));
        let arms = window_cells_by(&acc, 0, 30_000, 30_000);
        assert_eq!(arms.keys().collect::<Vec<_>>(), ["control", "v2"]);
        assert_eq!((arms["control"].lists, arms["control"].gauc().mean()), (3, Some(0.5)));
        assert_eq!((arms["v2"].lists, arms["v2"].gauc().mean()), (1, Some(0.25)));
        let markets = window_cells_by(&acc, 1, 30_000, 30_000);
        assert_eq!((markets["fr"].lists, markets["us"].lists), (2, 2));
        assert!(window_cells_by(&acc, 2, 30_000, 30_000).is_empty());
    }
}
