//! An assembler's limits: the gap that closes a list, how many lists it
//! keeps open, how long and how final lists take late events, and the
//! bounds of one list.
//!
//! In the assembly flow: read by every rule; the configuration builds them
//! (`session.*`, `late.*`, `input.max_*_per_list`). The tests here hold the
//! per-list bounds against lists open and final, compact and big.

use serde::{Deserialize, Serialize};

/// What happens to a judgment for a list that is already final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LatePolicy {
    /// Retract the list's contribution, apply the judgment, add it again.
    Amend,
    /// Ignore the judgment (counted).
    Drop,
}

/// Limits of one assembler (`session.*`, `late.*`,
/// `input.max_events_per_list`); the defaults are the configuration's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssemblyLimits {
    pub gap_ms: i64,
    /// Open lists past which the oldest are finalized early.
    pub max_open_lists: usize,
    pub late_policy: LatePolicy,
    /// Final lists take late judgments this long after their last event.
    pub late_horizon_ms: i64,
    /// Events one list takes (`input.max_events_per_list`).
    pub max_events_per_list: usize,
    /// Results past which a list's impressions are refused
    /// (`input.max_results_per_list`); only a big list can reach it.
    pub max_results_per_list: usize,
}

impl Default for AssemblyLimits {
    fn default() -> Self {
        AssemblyLimits {
            gap_ms: 30_000,
            max_open_lists: 2_000_000,
            late_policy: LatePolicy::Amend,
            late_horizon_ms: 60_000,
            max_events_per_list: 10_000,
            max_results_per_list: 10_000,
        }
    }
}

impl AssemblyLimits {
    pub fn gap_only(gap_ms: i64) -> Self {
        AssemblyLimits {
            gap_ms,
            max_open_lists: usize::MAX,
            late_policy: LatePolicy::Drop,
            late_horizon_ms: 0,
            max_events_per_list: usize::MAX,
            max_results_per_list: usize::MAX,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::testing::{ev, final_of, imp, judg, limits};
    use crate::assemble::{Applied, Assembler};

    /// `input.max_events_per_list`, on a list small enough for its compact
    /// run and on one past it, open and (under both late policies) final.
    #[test]
    fn a_list_takes_at_most_max_events_per_list() {
        for (results, policy) in [(3, LatePolicy::Amend), (150, LatePolicy::Amend), (150, LatePolicy::Drop)] {
            let mut l = limits(policy);
            l.max_events_per_list = 50;
            let mut asm = Assembler::with_limits(l, vec![], None);
            let mut out = Vec::new();
            let docs: Vec<(String, u32)> = (0..results).map(|p| (format!("d{p}"), p + 1)).collect();
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            let mut applied = Vec::new();
            applied.push(asm.ingest_t(&ev(&imp("i", "s", 0, &docs)), 0, None, &mut |c| out.push(c.into())));
            for n in 0..60 {
                let e = judg(&format!("j{n}"), "s", 1, &format!("d{}", n % results), 1);
                applied.push(asm.ingest_t(&ev(&e), 0, None, &mut |c| out.push(c.into())));
            }
            let too_large = applied.iter().filter(|a| **a == Applied::TooLarge).count();
            assert_eq!(too_large, 11, "{results} results: 1 impression + 49 judgments fit");
            // A re-delivery is still a duplicate, not one too many.
            let again = asm.ingest_t(&ev(&judg("j3", "s", 1, "d0", 1)), 0, None, &mut |c| out.push(c.into()));
            assert_eq!(again, Applied::Duplicate);
            // Final: a late judgment is one too many as well.
            asm.ingest_t(&ev(&imp("x", "other", 20_000, &[("d", 1)])), 0, None, &mut |c| out.push(c.into()));
            asm.finalize_expired(None, &mut |c| out.push(c.into()));
            assert_eq!(asm.closed_lists(), 1);
            let late = asm.ingest_t(&ev(&judg("late", "s", 2, "d1", 4)), 0, None, &mut |c| out.push(c.into()));
            assert_eq!(late, Applied::TooLarge, "{results} {policy:?}");
            let f = out.iter().filter_map(final_of).next().unwrap();
            assert_eq!(f.shown.len(), results as usize);
            assert_eq!(f.shown.iter().filter(|g| **g == 1).count(), 49.min(results as usize));
        }
    }

    /// `input.max_results_per_list`: pages of 200 results of one list are
    /// taken until it holds 1,000, the page that finds it full is refused
    /// whole, open and final; a re-delivery stays a duplicate.
    #[test]
    fn a_list_holds_at_most_max_results_per_list() {
        let mut l = limits(LatePolicy::Amend);
        l.max_results_per_list = 1_000;
        let mut asm = Assembler::with_limits(l, vec![], None);
        let mut out = Vec::new();
        let page =
            |n: u32| -> Vec<(String, u32)> { (0..200).map(|p| (format!("d{n}-{p}"), n * 200 + p + 1)).collect() };
        let mut applied = Vec::new();
        for n in 0..7 {
            let docs = page(n);
            let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
            applied.push(
                asm.ingest_t(&ev(&imp(&format!("i{n}"), "s", n as i64, &docs)), 0, None, &mut |c| out.push(c.into())),
            );
        }
        assert_eq!(applied[..5], [Applied::Added; 5]);
        assert_eq!(applied[5..], [Applied::TooLarge; 2]);
        let docs = page(0);
        let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
        let again = asm.ingest_t(&ev(&imp("i0", "s", 0, &docs)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(again, Applied::Duplicate);
        // Judgments are not results: still taken.
        let judged = asm.ingest_t(&ev(&judg("j", "s", 8, "d0-0", 3)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(judged, Applied::Added);
        asm.ingest_t(&ev(&imp("x", "other", 20_000, &[("d", 1)])), 0, None, &mut |c| out.push(c.into()));
        asm.finalize_expired(None, &mut |c| out.push(c.into()));
        let docs = page(9);
        let docs: Vec<(&str, u32)> = docs.iter().map(|(d, p)| (d.as_str(), *p)).collect();
        let late = asm.ingest_t(&ev(&imp("late", "s", 9, &docs)), 0, None, &mut |c| out.push(c.into()));
        assert_eq!(late, Applied::TooLarge);
        let f = out.iter().filter_map(final_of).next().unwrap();
        assert_eq!(f.shown.len(), 1_000);
    }
}
