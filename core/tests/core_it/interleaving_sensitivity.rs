//! Simulation tier for issue #25: a degraded candidate is detected by
//! team-draft interleaving with fewer lists than by an A/B comparison of
//! nDCG@10 on clicks, both figures reported.
//!
//! Reproduce (prints the figures):
//!
//! ```text
//! cargo test -p rankpulse-core --profile testing --test core_it -- --nocapture interleaving_sensitivity::
//! cargo test -p rankpulse-core --profile testing --test core_it -- --nocapture --ignored interleaving_sensitivity::
//! ```
//!
//! The second line adds the larger variant (more repetitions).
//!
//! # The simulated world (every number used)
//!
//! - A query is a fresh pool of [`POOL`] = 30 documents with true grades
//!   0..=3 drawn independently: P(0) = 0.70, P(1) = 0.15, P(2) = 0.10,
//!   P(3) = 0.05 ([`GRADE_CDF`]). Each list is a new query.
//! - Users follow the position-based click model (Craswell et al., WSDM
//!   2008): rank r of the [`SHOWN`] = 10 shown is examined with probability
//!   θ_r = r^−0.8 (θ_1 = 1, θ_10 ≈ 0.16), and an examined result is clicked
//!   with its attractiveness γ(grade) = 0.05, 0.3, 0.6, 0.9 for grades 0..=3
//!   ([`GAMMA`]). Every examination and click is an independent draw.
//! - Rankers sort the pool by grade + σ·z, z standard normal (Box–Muller
//!   on the testkit RNG), one draw per document per ranking, ties broken by
//!   document index. Control: σ = 0.5 ([`SIGMA_CONTROL`]). Degraded
//!   candidate: σ = 0.6 ([`SIGMA_CANDIDATE`]). Its true loss is measured,
//!   not assumed: mean nDCG@10 on true grades (exp2 gain, ideal over the
//!   whole pool of 30, `Conventions::default()`) of both rankers on the same
//!   20,000 queries ([`TRUE_DELTA_QUERIES`], seed [`TRUE_DELTA_SEED`]),
//!   reported with its standard error. It comes out near −0.026, on a
//!   control nDCG@10 near 0.95: a modest loss.
//!
//! # The two procedures
//!
//! - A/B: lists alternate control, candidate, control, …, each a fresh
//!   query served by that arm alone. What a live monitor sees per list is
//!   nDCG@10 computed from click judgments, as rankpulse scores them: a
//!   clicked result has grade 1 (`judgments.actions` click = 1), every other
//!   shown result is unjudged (grade 0), and the judged set is the clicked
//!   results. It is computed by `metrics::list::ListScorer` with
//!   `Conventions::default()`: exp2 gain (2^1 − 1 = 1 per click, so the
//!   choice does not matter for 0/1 grades), ideal over the judged (= the
//!   clicked) results, and `no_relevant = zero`: a list without a click
//!   counts, with nDCG 0. Each arm's per-list values go into a `Moments`;
//!   after every 50 lists per arm ([`CHECK_EVERY`]), `welch(candidate,
//!   control)`; detection is the first check with p < 0.05 ([`ALPHA`]) and
//!   a negative difference. Lists needed = lists of both arms at detection
//!   (a multiple of 100).
//! - Interleaving: each list is a fresh query ranked by both rankers, and
//!   `team_draft(candidate, control, 10, coin)` (team A = candidate, B =
//!   control; the coin is a fair bit from the run's RNG). Neither ranking
//!   (30 distinct documents) can run out before 10, so the tilt the
//!   interleave module documents cannot arise. Clicks come from the same
//!   PBM on the interleaved list, by position and true grade; `credit` gives
//!   a win, a loss, a tie or (no click) nothing. After every 50 lists,
//!   `sign_test(a_wins, b_wins)` (ties and click-less lists left out, as
//!   Chapelle et al., TOIS 2012); detection is the first check with
//!   p < 0.05 and B (control) ahead. Lists needed = lists shown at
//!   detection, click-less ones included, so both figures count the same
//!   thing: impressions of traffic.
//!
//! Both rules peek: they test after every batch and stop at the first
//! p < 0.05, which finds real differences earlier than a fixed-horizon test
//! but also fires on no difference far more often than 5% (Armitage,
//! McPherson and Rowe 1969: about 37% two-sided over 100 looks, so about
//! 19% for one direction). The same kind of rule on both sides keeps the
//! comparison fair; the false-alarm test below measures what it costs.
//! (A/B checks every 100 lists of traffic, interleaving every 50: the
//! schedule of the brief; interleaving's extra looks inflate its false
//! alarms a little, which the false-alarm test includes.)
//!
//! # Repetitions and what is asserted
//!
//! [`RUNS`] = 41 independent runs per procedure (seeds `AB_SEED + i` and
//! `IL_SEED + i`), each capped at [`CAP`] = 200,000 lists; a run that never
//! detects counts as the cap, and their number is printed. The figures
//! are the median and the quartiles (nearest rank) of lists needed. Asserted:
//! interleaving's median is below A/B's by at least a factor 2 (several-fold
//! is expected: Chapelle et al. report interleaving about 10–100× more
//! sensitive than absolute click metrics on real traffic; this simple PBM
//! world gives about 3–4×), and no run hits the cap.
//!
//! False alarms: candidate = control (both σ = 0.5, independent noise) over
//! 41 runs of a fixed budget of [`FALSE_ALARM_BUDGET`] = 5,000 lists each:
//! the sequential interleaving rule above (one direction, 100 looks) must
//! fire in at most 30% of runs (about 19% expected from peeking alone; a
//! bias towards either team would show as more), and one two-sided sign test
//! at the end of the budget in at most 20% (5% expected). A/B's rates are
//! printed beside them for comparison, not asserted.
//!
//! Runtime in the testing profile: about 3 s for the two default tests
//! (run in parallel), about 7 s more for the ignored variant
//! ([`RUNS_LARGE`] = 201 runs).

use rankpulse_core::accumulate::Moments;
use rankpulse_core::compare::{sign_test, welch};
use rankpulse_core::interleave::{Outcome, credit, team_draft};
use rankpulse_core::metrics::list::{Family, ListScore, ListScorer};
use rankpulse_core::metrics::{Conventions, Grade};
use rankpulse_testkit::Rng;

/// Documents per query.
const POOL: usize = 30;
/// Results shown per list, and the nDCG cutoff.
const SHOWN: usize = 10;
/// Cumulative P(grade ≤ g) for g = 0, 1, 2; grade 3 takes the remaining 0.05.
const GRADE_CDF: [f64; 3] = [0.70, 0.85, 0.95];
/// Click probability of an examined result, by true grade 0..=3.
const GAMMA: [f64; 4] = [0.05, 0.3, 0.6, 0.9];
/// Examination probability at rank r is r^−EXAMINATION_EXPONENT.
const EXAMINATION_EXPONENT: f64 = 0.8;
/// Noise sd of the control ranker's scores (grades are 1 apart).
const SIGMA_CONTROL: f64 = 0.5;
/// Noise sd of the degraded candidate.
const SIGMA_CANDIDATE: f64 = 0.6;
const TRUE_DELTA_QUERIES: u64 = 20_000;
const TRUE_DELTA_SEED: u64 = 0x25_0000;
/// Lists per arm (A/B) or lists (interleaving) between two tests.
const CHECK_EVERY: u64 = 50;
const ALPHA: f64 = 0.05;
const RUNS: u64 = 41;
const RUNS_LARGE: u64 = 201;
const CAP: u64 = 200_000;
const AB_SEED: u64 = 0x25_1000;
const IL_SEED: u64 = 0x25_2000;
const FALSE_ALARM_BUDGET: u64 = 5_000;
const FA_AB_SEED: u64 = 0x25_3000;
const FA_IL_SEED: u64 = 0x25_4000;

/// One run's random world: the current query's pool, the rankers and the
/// users, all drawn from one seeded generator so a run replays exactly.
struct Sim {
    rng: Rng,
    theta: [f64; SHOWN],
    pool: Vec<Grade>,
    keyed: Vec<(f64, usize)>,
    scorer: ListScorer,
    score: ListScore,
}

impl Sim {
    fn new(seed: u64) -> Sim {
        Sim {
            rng: Rng::new(seed),
            theta: std::array::from_fn(|i| ((i + 1) as f64).powf(-EXAMINATION_EXPONENT)),
            pool: Vec::with_capacity(POOL),
            keyed: Vec::with_capacity(POOL),
            // The scorer the stream uses, so the A/B figure is what the
            // monitor would report, conventions included.
            scorer: ListScorer::new(Conventions::default(), vec![SHOWN]),
            score: ListScore::new(1),
        }
    }

    fn new_query(&mut self) {
        self.pool.clear();
        for _ in 0..POOL {
            let u = self.rng.unit();
            let grade = GRADE_CDF.iter().take_while(|&&c| u >= c).count();
            self.pool.push(grade as Grade);
        }
    }

    /// A standard normal draw (Box–Muller, one of the pair: the other would
    /// save a draw but complicate replaying a run).
    fn normal(&mut self) -> f64 {
        // 1 − unit() is in (0, 1]: ln never sees 0.
        let u1 = 1.0 - self.rng.unit();
        let u2 = self.rng.unit();
        (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()
    }

    /// The pool's documents, best first by grade + σ·noise.
    fn rank(&mut self, sigma: f64, out: &mut Vec<usize>) {
        self.keyed.clear();
        for doc in 0..POOL {
            let key = f64::from(self.pool[doc]) + sigma * self.normal();
            self.keyed.push((key, doc));
        }
        // The index breaks (measure-zero) ties so the order is a function of
        // the draws alone.
        self.keyed.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        out.clear();
        out.extend(self.keyed.iter().map(|&(_, doc)| doc));
    }

    /// One user's click on `doc` shown at 0-based `position`, under the PBM.
    fn clicked(&mut self, position: usize, doc: usize) -> bool {
        let examined = self.rng.unit() < self.theta[position];
        // Both draws always happen, so a run's stream of draws does not
        // depend on which results were examined.
        let attracted = self.rng.unit() < GAMMA[self.pool[doc] as usize];
        examined && attracted
    }

    fn ndcg10(&mut self, shown: &[Grade], judged: &[Grade]) -> f64 {
        self.scorer.score(shown, None, judged, &mut self.score);
        // With no_relevant = zero every list has a value; n = 1 cutoff puts
        // nDCG@10 at the family's index.
        self.score.values[Family::Ndcg as usize].expect("no_relevant = zero scores every list")
    }

    /// nDCG@10 on true grades, the ideal over the whole pool.
    fn true_ndcg10(&mut self, ranking: &[usize]) -> f64 {
        let shown: [Grade; SHOWN] = std::array::from_fn(|p| self.pool[ranking[p]]);
        let judged = std::mem::take(&mut self.pool);
        let value = self.ndcg10(&shown, &judged);
        self.pool = judged;
        value
    }

    /// nDCG@10 as the monitor sees it: clicked = grade 1, judged = clicked.
    fn click_ndcg10(&mut self, ranking: &[usize]) -> f64 {
        let clicks: [Grade; SHOWN] = std::array::from_fn(|p| Grade::from(self.clicked(p, ranking[p])));
        self.ndcg10(&clicks, &clicks)
    }
}

/// Mean true nDCG@10 of control, and mean and standard error of candidate
/// minus control, paired on the same queries.
fn true_delta(sigma_candidate: f64) -> (f64, f64, f64) {
    let mut sim = Sim::new(TRUE_DELTA_SEED);
    let (mut control, mut candidate) = (Vec::new(), Vec::new());
    let (mut level, mut delta) = (Moments::default(), Moments::default());
    for _ in 0..TRUE_DELTA_QUERIES {
        sim.new_query();
        sim.rank(SIGMA_CONTROL, &mut control);
        sim.rank(sigma_candidate, &mut candidate);
        let c = sim.true_ndcg10(&control);
        let t = sim.true_ndcg10(&candidate);
        level.add(c, 1);
        delta.add(t - c, 1);
    }
    let mean = |m: &Moments| m.mean().expect("TRUE_DELTA_QUERIES > 0");
    (mean(&level), mean(&delta), delta.stderr().expect("TRUE_DELTA_QUERIES > 1"))
}

/// How far a run goes once its rule has fired.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Sensitivity runs need only the detection.
    AtDetection,
    /// False-alarm runs go on to the end of their budget, for `final_p`.
    AtBudget,
}

/// How one run of a procedure went.
struct Run {
    /// Lists at the first check that fired, if any did within the cap.
    detected_at: Option<u64>,
    /// Two-sided p-value of the last test made (with `Stop::AtBudget`, the
    /// one at the end of the budget).
    final_p: Option<f64>,
}

/// A/B: alternate arms, Welch on per-list nDCG@10 from clicks.
fn ab_run(seed: u64, sigma_candidate: f64, cap: u64, stop: Stop) -> Run {
    let mut sim = Sim::new(seed);
    let mut ranking = Vec::with_capacity(POOL);
    let (mut control, mut candidate) = (Moments::default(), Moments::default());
    let (mut lists, mut detected_at, mut final_p) = (0, None, None);
    while lists < cap {
        for _ in 0..CHECK_EVERY {
            for (sigma, arm) in [(SIGMA_CONTROL, &mut control), (sigma_candidate, &mut candidate)] {
                sim.new_query();
                sim.rank(sigma, &mut ranking);
                arm.add(sim.click_ndcg10(&ranking), 1);
            }
        }
        lists += 2 * CHECK_EVERY;
        let Some(c) = welch(&candidate, &control) else { continue };
        final_p = c.p_value;
        if detected_at.is_none() && c.p_value.is_some_and(|p| p < ALPHA) && c.difference < 0.0 {
            detected_at = Some(lists);
            if stop == Stop::AtDetection {
                break;
            }
        }
    }
    Run { detected_at, final_p }
}

/// Interleaving: team draft of candidate (A) and control (B), sign test.
fn il_run(seed: u64, sigma_candidate: f64, cap: u64, stop: Stop) -> Run {
    let mut sim = Sim::new(seed);
    let (mut control, mut candidate) = (Vec::with_capacity(POOL), Vec::with_capacity(POOL));
    let mut shown = Vec::with_capacity(SHOWN);
    let (mut a_wins, mut b_wins) = (0u64, 0u64);
    let (mut lists, mut detected_at, mut final_p) = (0, None, None);
    while lists < cap {
        for _ in 0..CHECK_EVERY {
            sim.new_query();
            sim.rank(SIGMA_CONTROL, &mut control);
            sim.rank(sigma_candidate, &mut candidate);
            team_draft(&candidate, &control, SHOWN, || sim.rng.below(2) == 1, &mut shown);
            let mut teams = [(None, false); SHOWN];
            for (slot, (position, &(doc, team))) in teams.iter_mut().zip(shown.iter().enumerate()) {
                *slot = (Some(team), sim.clicked(position, doc));
            }
            match credit(teams) {
                Some(Outcome::AWins) => a_wins += 1,
                Some(Outcome::BWins) => b_wins += 1,
                Some(Outcome::Tie) | None => {}
            }
        }
        lists += CHECK_EVERY;
        final_p = sign_test(a_wins, b_wins);
        if detected_at.is_none() && b_wins > a_wins && final_p.is_some_and(|p| p < ALPHA) {
            detected_at = Some(lists);
            if stop == Stop::AtDetection {
                break;
            }
        }
    }
    Run { detected_at, final_p }
}

/// Nearest-rank quantile of sorted values.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// (median, q1, q3, runs that hit the cap) of lists needed, the cap
/// standing in for a run that never detected.
fn summary(runs: &[Run]) -> (u64, u64, u64, usize) {
    let mut needed: Vec<u64> = runs.iter().map(|r| r.detected_at.unwrap_or(CAP)).collect();
    needed.sort_unstable();
    let censored = runs.iter().filter(|r| r.detected_at.is_none()).count();
    (quantile(&needed, 0.5), quantile(&needed, 0.25), quantile(&needed, 0.75), censored)
}

fn sensitivity(runs: u64) {
    let started = std::time::Instant::now();
    let (level, delta, delta_se) = true_delta(SIGMA_CANDIDATE);
    // The premise: the candidate really is worse, by a modest amount.
    assert!(delta < -5.0 * delta_se && delta > -0.05, "true ΔnDCG@10 = {delta} ± {delta_se}");
    let ab: Vec<Run> = (0..runs).map(|i| ab_run(AB_SEED + i, SIGMA_CANDIDATE, CAP, Stop::AtDetection)).collect();
    let il: Vec<Run> = (0..runs).map(|i| il_run(IL_SEED + i, SIGMA_CANDIDATE, CAP, Stop::AtDetection)).collect();
    let (ab_median, ab_q1, ab_q3, ab_censored) = summary(&ab);
    let (il_median, il_q1, il_q3, il_censored) = summary(&il);
    eprintln!(
        "{runs} runs: interleaving: median {il_median} lists ({il_q1}–{il_q3}), \
         A/B nDCG@10 on clicks: median {ab_median} lists ({ab_q1}–{ab_q3}), \
         ratio {:.1}×, true ΔnDCG@10 = {delta:.4} ± {delta_se:.4} (control {level:.4}); \
         undetected within {CAP}: interleaving {il_censored}, A/B {ab_censored}; {:.2?}",
        ab_median as f64 / il_median as f64,
        started.elapsed()
    );
    assert_eq!((il_censored, ab_censored), (0, 0), "a run hit the cap of {CAP} lists");
    assert!(
        2 * il_median <= ab_median,
        "interleaving median {il_median} lists is not several-fold below A/B's {ab_median}"
    );
}

#[test]
fn interleaving_detects_a_degraded_candidate_with_fewer_lists_than_ab() {
    sensitivity(RUNS);
}

#[test]
#[ignore = "simulation tier: run with --ignored (.ci/run does)"]
fn interleaving_detects_a_degraded_candidate_with_fewer_lists_than_ab_large() {
    sensitivity(RUNS_LARGE);
}

#[test]
fn identical_rankers_rarely_raise_a_false_alarm() {
    let started = std::time::Instant::now();
    let rate = |runs: &[Run], fired: fn(&Run) -> bool| runs.iter().filter(|r| fired(r)).count() as f64 / RUNS as f64;
    let sequential = |r: &Run| r.detected_at.is_some();
    let fixed = |r: &Run| r.final_p.is_some_and(|p| p < ALPHA);
    let il: Vec<Run> =
        (0..RUNS).map(|i| il_run(FA_IL_SEED + i, SIGMA_CONTROL, FALSE_ALARM_BUDGET, Stop::AtBudget)).collect();
    let ab: Vec<Run> =
        (0..RUNS).map(|i| ab_run(FA_AB_SEED + i, SIGMA_CONTROL, FALSE_ALARM_BUDGET, Stop::AtBudget)).collect();
    let (il_sequential, il_fixed) = (rate(&il, sequential), rate(&il, fixed));
    let (ab_sequential, ab_fixed) = (rate(&ab, sequential), rate(&ab, fixed));
    eprintln!(
        "candidate = control, {RUNS} runs of {FALSE_ALARM_BUDGET} lists: false alarms, \
         sequential rule (one-sided, every {CHECK_EVERY}): interleaving {:.0}%, A/B {:.0}%; \
         one two-sided test at the budget: interleaving {:.0}%, A/B {:.0}%; {:.2?}",
        100.0 * il_sequential,
        100.0 * ab_sequential,
        100.0 * il_fixed,
        100.0 * ab_fixed,
        started.elapsed()
    );
    assert!(il_sequential <= 0.30, "sequential interleaving rule fired in {:.0}% of runs", 100.0 * il_sequential);
    assert!(il_fixed <= 0.20, "fixed-horizon sign test fired in {:.0}% of runs", 100.0 * il_fixed);
}
