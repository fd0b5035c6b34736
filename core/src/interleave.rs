//! Team-draft interleaving (Radlinski, Kurup and Joachims, CIKM 2008, "How
//! does clickthrough data reflect retrieval quality?"): two rankers A and B
//! are compared on live traffic by showing one list that mixes their results,
//! each result credited to the ranker ("team") that contributed it, and
//! counting whose results got more clicks.
//!
//! Where it sits in the flow: an impression taking part in an interleaving
//! experiment marks each result with its [`Team`] (`"team": "A"` or `"B"`
//! in the event). When the list is final, [`credit`] turns its clicks into a
//! win for A, a win for B or a tie, one outcome per list; the accumulators
//! count outcomes per series (the experiment is a dimension value).
//! [`team_draft`] builds interleaved lists for the demo's traffic and the
//! tests: rankpulse monitors rankings, it does not serve them.
//!
//! Both functions are pure: the coin is passed in, so that a caller chooses
//! its randomness and a test can enumerate every coin sequence.
//!
//! Two choices, both the paper's:
//!
//! - [`team_draft`] stops as soon as *either* ranking has no result left
//!   that is not already shown (the paper's loop condition), not when both
//!   have. Results that only the longer ranking still has are not appended.
//!   When a ranking runs out before the list is full, where the list ends
//!   depends on the coin, and the teams can end one apart in a way the coin
//!   does not balance: even clicks blind to the results can then favour one
//!   side (the test `a_ranking_running_out_can_tilt_indiscriminate_clicks`
//!   shows the smallest case). When both rankings hold at least `length`
//!   distinct results, the usual case, neither runs out, and flipping every
//!   coin swaps the teams at every position, so such clicks favour neither.
//! - [`credit`] compares click counts only. A list without a click on any
//!   team's result says nothing about either ranker, so it yields no outcome
//!   at all rather than a tie; callers count only lists with clicks, as
//!   Chapelle, Joachims, Radlinski and Yue (TOIS 2012) do.

/// The ranker that contributed a result to an interleaved list.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Team {
    A,
    B,
}

/// What one interleaved list with clicks says about A against B.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Outcome {
    AWins,
    BWins,
    Tie,
}

/// Interleaves rankings `a` and `b` by team draft into `out`, at most
/// `length` results, each with the team that picked it.
///
/// `out` is cleared first, so one buffer can be reused across lists. In each
/// round the team with fewer picks so far picks next; when both have as many,
/// `coin()` decides, `true` meaning A picks first (the paper's
/// `RandBit() == 1`). `coin` is called exactly once per tied round that is
/// played, and never for a round not played (length reached or a ranking
/// used up), so a fixed sequence of bits replays one interleaving exactly.
///
/// A team picks its highest-ranked result not already in `out`. The list
/// ends at `length` results or as soon as either ranking has nothing left
/// that is not already shown (see the module doc). A result repeated within
/// one ranking is shown once, like any result already shown.
pub fn team_draft<T: Eq + Clone>(
    a: &[T],
    b: &[T],
    length: usize,
    mut coin: impl FnMut() -> bool,
    out: &mut Vec<(T, Team)>,
) {
    out.clear();
    // Every result before a cursor is already in `out`, and `out` only
    // grows, so cursors only move forward: each ranking is walked once, at
    // the cost of a scan of `out` per step (lists are short; T need not hash).
    let (mut next_a, mut next_b) = (0, 0);
    let (mut picks_a, mut picks_b) = (0usize, 0usize);
    while out.len() < length {
        let shown = |doc: &T, out: &[(T, Team)]| out.iter().any(|(d, _)| d == doc);
        while a.get(next_a).is_some_and(|doc| shown(doc, out)) {
            next_a += 1;
        }
        while b.get(next_b).is_some_and(|doc| shown(doc, out)) {
            next_b += 1;
        }
        let (Some(doc_a), Some(doc_b)) = (a.get(next_a), b.get(next_b)) else {
            break;
        };
        if picks_a < picks_b || (picks_a == picks_b && coin()) {
            out.push((doc_a.clone(), Team::A));
            picks_a += 1;
            next_a += 1;
        } else {
            out.push((doc_b.clone(), Team::B));
            picks_b += 1;
            next_b += 1;
        }
    }
}

/// The outcome of one interleaved list: each shown result as (its team,
/// whether it was clicked). A wins with more clicks on A's results than on
/// B's, B with more on B's, and equal counts are a tie.
///
/// `None` when no result of either team was clicked: such a list is not a
/// tie but no evidence, and is left out of the experiment. Results with no
/// team (e.g. inserted by neither ranker) are ignored, clicked or not.
pub fn credit(teams: impl IntoIterator<Item = (Option<Team>, bool)>) -> Option<Outcome> {
    // u64: a count cannot wrap before the iterator would take centuries.
    let (mut clicks_a, mut clicks_b) = (0u64, 0u64);
    for (team, clicked) in teams {
        match (team, clicked) {
            (Some(Team::A), true) => clicks_a += 1,
            (Some(Team::B), true) => clicks_b += 1,
            _ => {}
        }
    }
    if clicks_a == 0 && clicks_b == 0 {
        return None;
    }
    Some(match clicks_a.cmp(&clicks_b) {
        std::cmp::Ordering::Greater => Outcome::AWins,
        std::cmp::Ordering::Less => Outcome::BWins,
        std::cmp::Ordering::Equal => Outcome::Tie,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every sequence of distinct docs from {0, 1, 2, 3} of length 1..=3:
    /// 4 + 4·3 + 4·3·2 = 40 rankings, overlapping each other in every way.
    fn rankings() -> Vec<Vec<u8>> {
        let mut all = Vec::new();
        let mut frontier: Vec<Vec<u8>> = vec![Vec::new()];
        for _ in 0..3 {
            frontier = frontier
                .iter()
                .flat_map(|r| {
                    (0..4u8).filter(|d| !r.contains(d)).map(move |d| {
                        let mut longer = r.clone();
                        longer.push(d);
                        longer
                    })
                })
                .collect();
            all.extend(frontier.iter().cloned());
        }
        assert_eq!(all.len(), 40);
        all
    }

    /// A run of `team_draft`: the coin bits it consumed and what it built.
    struct Run {
        bits: Vec<bool>,
        out: Vec<(u8, Team)>,
    }

    /// Every run of `team_draft(a, b, length)`, one per distinct coin
    /// sequence: a prefix of bits that the run outgrew is extended by each
    /// bit in turn, so every sequence is exactly as long as the run needs.
    fn all_runs(a: &[u8], b: &[u8], length: usize) -> Vec<Run> {
        let mut runs = Vec::new();
        let mut pending = vec![Vec::new()];
        while let Some(bits) = pending.pop() {
            let mut calls = 0;
            let mut out = Vec::new();
            team_draft(
                a,
                b,
                length,
                || {
                    let bit = bits.get(calls).copied().unwrap_or(false);
                    calls += 1;
                    bit
                },
                &mut out,
            );
            if calls > bits.len() {
                for bit in [false, true] {
                    let mut longer = bits.clone();
                    longer.push(bit);
                    pending.push(longer);
                }
            } else {
                assert_eq!(calls, bits.len(), "a run used fewer bits than the prefix it was given");
                runs.push(Run { bits, out });
            }
        }
        runs
    }

    fn unused<'r>(ranking: &'r [u8], shown: &[(u8, Team)]) -> impl Iterator<Item = &'r u8> {
        ranking.iter().filter(|d| !shown.iter().any(|(s, _)| s == *d))
    }

    /// The paper's algorithm, checked pick by pick from its definition
    /// rather than by re-running the implementation.
    fn check_run(a: &[u8], b: &[u8], length: usize, run: &Run) {
        let Run { bits, out } = run;
        let ctx = || format!("a={a:?} b={b:?} length={length} bits={bits:?} out={out:?}");
        assert!(out.len() <= length, "{}", ctx());
        let (mut n_a, mut n_b, mut bit) = (0usize, 0usize, 0);
        for (i, &(doc, team)) in out.iter().enumerate() {
            let before = &out[..i];
            assert!(!before.iter().any(|(d, _)| *d == doc), "duplicate at {i}: {}", ctx());
            // The loop went on, so both rankings still had an unused doc.
            assert!(unused(a, before).next().is_some() && unused(b, before).next().is_some(), "{}", ctx());
            let expected_team = match n_a.cmp(&n_b) {
                std::cmp::Ordering::Less => Team::A,
                std::cmp::Ordering::Greater => Team::B,
                std::cmp::Ordering::Equal => {
                    let heads = bits[bit];
                    bit += 1;
                    if heads { Team::A } else { Team::B }
                }
            };
            assert_eq!(team, expected_team, "team at {i}: {}", ctx());
            let own = if team == Team::A { a } else { b };
            assert_eq!(unused(own, before).next(), Some(&doc), "pick at {i} is not its team's best unused: {}", ctx());
            match team {
                Team::A => n_a += 1,
                Team::B => n_b += 1,
            }
            assert!(n_a.abs_diff(n_b) <= 1, "{}", ctx());
        }
        // A coin is consumed by each tied round played, and by nothing else.
        assert_eq!(bit, bits.len(), "{}", ctx());
        // It stopped only because it had to.
        assert!(
            out.len() == length || unused(a, out).next().is_none() || unused(b, out).next().is_none(),
            "stopped early: {}",
            ctx()
        );
    }

    /// 40 × 40 ranking pairs × lengths 0..=5 (5 exceeds the 4-doc universe,
    /// so every way of running out is reached) × every coin sequence.
    #[test]
    fn every_small_interleaving_follows_the_algorithm() {
        let rankings = rankings();
        let (mut pairs, mut runs) = (0, 0);
        for a in &rankings {
            for b in &rankings {
                pairs += 1;
                for length in 0..=5 {
                    for run in all_runs(a, b, length) {
                        check_run(a, b, length, &run);
                        runs += 1;
                    }
                }
            }
        }
        assert_eq!(pairs, 1600);
        // Observed, not derived: pins the enumeration's size so that a
        // change shrinking it does not go unnoticed (likewise below).
        assert_eq!(runs, 23_360);
    }

    fn draft<'d>(a: &[&'d str], b: &[&'d str], length: usize, bits: &[bool]) -> (Vec<(&'d str, Team)>, usize) {
        let mut calls = 0;
        let mut out = Vec::new();
        team_draft(
            a,
            b,
            length,
            || {
                let bit = bits[calls];
                calls += 1;
                bit
            },
            &mut out,
        );
        (out, calls)
    }

    #[test]
    fn hand_derived_interleavings() {
        use Team::{A, B};
        // A = [a b c d], B = [b d e a], length 4, coins true, false.
        //   round 1: 0–0 tie, coin true  → A's best unused: a
        //   round 2: A 1 > B 0           → B's best unused: b
        //   round 3: 1–1 tie, coin false → B: b shown, so d
        //   round 4: A 1 < B 2           → A: a, b shown, so c
        //   length 4 reached; two coins consumed.
        let (out, calls) = draft(&["a", "b", "c", "d"], &["b", "d", "e", "a"], 4, &[true, false]);
        assert_eq!(out, [("a", A), ("b", B), ("d", B), ("c", A)]);
        assert_eq!(calls, 2);

        // The same rankings, coins false, false, length 5:
        //   round 1: tie, false → B: b      round 2: A fewer → A: a
        //   round 3: tie, false → B: d      round 4: A fewer → A: c (a, b shown)
        //   A's a, b, c, d are all shown: stop at 4 of 5, though B still
        //   has e, and without the coin round 5 would have flipped.
        let (out, calls) = draft(&["a", "b", "c", "d"], &["b", "d", "e", "a"], 5, &[false, false]);
        assert_eq!(out, [("b", B), ("a", A), ("d", B), ("c", A)]);
        assert_eq!(calls, 2);

        // Identical rankings [a b c], coins false, true, length 10:
        //   round 1: tie, false → B: a      round 2: A fewer → A: b (a shown)
        //   round 3: tie, true  → A: c
        //   then B has nothing unused: stop at 3 of 10, no third coin.
        let (out, calls) = draft(&["a", "b", "c"], &["a", "b", "c"], 10, &[false, true]);
        assert_eq!(out, [("a", B), ("b", A), ("c", A)]);
        assert_eq!(calls, 2);

        // The paper's stop rule: A = [x y z], B = [z y w], coins true, false.
        //   round 1: tie, true  → A: x      round 2: B fewer → B: z
        //   round 3: tie, false → B: y
        //   A's x, y, z are all shown: stop, though B still has w unused.
        let (out, calls) = draft(&["x", "y", "z"], &["z", "y", "w"], 10, &[true, false]);
        assert_eq!(out, [("x", A), ("z", B), ("y", B)]);
        assert_eq!(calls, 2);

        // Length 0 plays no round and flips no coin.
        let (out, calls) = draft(&["a"], &["b"], 0, &[]);
        assert!(out.is_empty());
        assert_eq!(calls, 0);
        // An empty ranking ends the list before it starts.
        let (out, calls) = draft(&[], &["b"], 3, &[]);
        assert!(out.is_empty());
        assert_eq!(calls, 0);
    }

    #[test]
    fn reused_buffer_is_cleared() {
        let mut out = vec![(9u8, Team::B)];
        team_draft(&[9], &[9], 5, || true, &mut out);
        assert_eq!(out, [(9, Team::A)]);
    }

    /// The outcome, counted a second way: a signed score plus whether any
    /// team result was clicked.
    fn expected_outcome(teams: &[(Option<Team>, bool)]) -> Option<Outcome> {
        let mut score = 0i32;
        let mut any = false;
        for &(team, clicked) in teams {
            if clicked && let Some(team) = team {
                any = true;
                score += if team == Team::A { 1 } else { -1 };
            }
        }
        any.then_some(match score.signum() {
            1 => Outcome::AWins,
            -1 => Outcome::BWins,
            _ => Outcome::Tie,
        })
    }

    /// Every interleaving of the enumeration above (all of length ≤ 4) ×
    /// every set of clicked positions × every set of positions whose team
    /// is taken away (a result from neither ranker).
    #[test]
    fn credit_counts_clicks_per_team() {
        let rankings = rankings();
        let mut checked = 0u64;
        for a in &rankings {
            for b in &rankings {
                for length in 0..=5 {
                    for run in all_runs(a, b, length) {
                        let n = run.out.len();
                        assert!(n <= 4);
                        for clicks in 0u32..1 << n {
                            for foreign in 0u32..1 << n {
                                let teams: Vec<_> = (0..n)
                                    .map(|i| {
                                        let team = ((foreign >> i) & 1 == 0).then_some(run.out[i].1);
                                        (team, (clicks >> i) & 1 == 1)
                                    })
                                    .collect();
                                assert_eq!(credit(teams.iter().copied()), expected_outcome(&teams), "{teams:?}");
                                checked += 1;
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 1_048_256);
    }

    #[test]
    fn hand_derived_credit() {
        use Team::{A, B};
        let list = [Some(A), Some(B), Some(B), Some(A)];
        let with = |clicked: [bool; 4]| credit(list.into_iter().zip(clicked));
        assert_eq!(with([false, true, true, false]), Some(Outcome::BWins));
        assert_eq!(with([true, false, false, false]), Some(Outcome::AWins));
        assert_eq!(with([true, true, false, false]), Some(Outcome::Tie));
        assert_eq!(with([false; 4]), None);
        // A click on a result from neither ranker is no evidence.
        assert_eq!(credit([(None, true), (Some(A), false)]), None);
        assert_eq!(credit([(None, true), (None, true), (Some(B), true)]), Some(Outcome::BWins));
        assert_eq!(credit(std::iter::empty()), None);
    }

    /// Wins of A and of B over every coin sequence for one click pattern
    /// (bit i: position i clicked), each sequence weighted by its
    /// probability, scaled to integers by 2^(longest sequence).
    fn weighted_wins(runs: &[Run], clicks: u32) -> (u64, u64) {
        let longest = runs.iter().map(|r| r.bits.len()).max().unwrap_or(0);
        let (mut a_wins, mut b_wins) = (0, 0);
        for run in runs {
            let weight = 1u64 << (longest - run.bits.len());
            let teams = run.out.iter().enumerate().map(|(i, &(_, t))| (Some(t), (clicks >> i) & 1 == 1));
            match credit(teams) {
                Some(Outcome::AWins) => a_wins += weight,
                Some(Outcome::BWins) => b_wins += weight,
                _ => {}
            }
        }
        (a_wins, b_wins)
    }

    /// The paper's fairness: when A and B are the same ranker, no click
    /// pattern favours either. All 40 rankings × lengths 0..=5 × every
    /// click pattern on the min(length, |r|) positions shown: per ranking of
    /// length 1, 2, 3 that is 11, 19, 31 patterns, so 4·11 + 12·19 + 24·31.
    #[test]
    fn identical_rankers_win_equally_often() {
        let mut patterns = 0;
        for r in rankings() {
            for length in 0..=5 {
                let runs = all_runs(&r, &r, length);
                let n = length.min(r.len());
                assert!(runs.iter().all(|run| run.out.len() == n));
                for clicks in 0u32..1 << n {
                    let (a_wins, b_wins) = weighted_wins(&runs, clicks);
                    assert_eq!(a_wins, b_wins, "r={r:?} length={length} clicks={clicks:b}");
                    patterns += 1;
                }
            }
        }
        assert_eq!(patterns, 1_016);
    }

    /// Clicks that depend only on position (a user clicking at random,
    /// blind to the results) favour neither ranker, whatever A and B are,
    /// provided neither runs out before `length`: then every list has
    /// `length` results and flipping every coin swaps the teams at every
    /// position. Every pair and length where that holds × every click
    /// pattern. The count below is observed, as in the first test.
    #[test]
    fn position_only_clicks_favour_neither_ranker() {
        let rankings = rankings();
        let mut patterns = 0;
        for a in &rankings {
            for b in &rankings {
                for length in 0..=5 {
                    let runs = all_runs(a, b, length);
                    if runs.iter().any(|run| run.out.len() < length) {
                        continue;
                    }
                    for clicks in 0u32..1 << length {
                        let (a_wins, b_wins) = weighted_wins(&runs, clicks);
                        assert_eq!(a_wins, b_wins, "a={a:?} b={b:?} length={length} clicks={clicks:b}");
                        patterns += 1;
                    }
                }
            }
        }
        assert_eq!(patterns, 18_048);
    }

    /// The cost of the paper's stop rule, in its smallest case: A = [x],
    /// B = [y z], length 2. (With B = [y] the coin would not matter: B too
    /// is used up after one pick, and the lists x and y mirror each other.)
    ///   coin true  → x (A); A is used up: the list is x alone.
    ///   coin false → y (B), then x (A); A is used up: the list is y x.
    /// A user who clicks every result shown: A wins, then a tie. One who
    /// clicks only the second: no evidence, then A wins. Clicks blind to the
    /// results favour A, whose running out ended the list while it was ahead.
    #[test]
    fn a_ranking_running_out_can_tilt_indiscriminate_clicks() {
        let runs = all_runs(&[0], &[1, 2], 2);
        assert_eq!(runs.len(), 2);
        assert_eq!(weighted_wins(&runs, 0b11), (1, 0));
        assert_eq!(weighted_wins(&runs, 0b10), (1, 0));
        assert_eq!(weighted_wins(&runs, 0b01), (1, 1));
    }
}
