//! Event-time traffic for the end-to-end alert simulations
//! (`bench/scripts/alert_backfill.py`): days of rankpulse events, in the
//! shape of [`rankpulse_testkit::traffic`], written as JSON lines for
//! `rankpulse replay - --history FILE`, whose history is backfilled into
//! Prometheus and evaluated with the shipped rules.
//!
//! The traffic model draws each list's nDCG@10 directly; an event stream
//! needs judgments that give it. A list's value `v` becomes a set of
//! relevant (grade 1) positions among its 10 results whose nDCG@10 is one
//! of the two achievable values around `v`, the upper with probability
//! `(v − lo)/(hi − lo)`: randomized rounding, so that the expected value
//! the engine computes is `v` and a drop in the model is the same drop in
//! the engine's mean. Every relevant result is shown, so the ideal ranking
//! is the same under `metrics.ideal` = judged or shown.
//!
//! The generator also prints, on stderr as one JSON object, each arm's
//! lists, sessions and sum of the values it encoded: replay's counters
//! must agree with them (the harness checks that before it reads a page).

use rankpulse_testkit::Rng;
use rankpulse_testkit::traffic::{MINUTES_PER_DAY, Traffic};
use std::collections::BTreeMap;
use std::io::{self, Write};

/// 2026-01-05T00:00:00Z, a Monday midnight: the model's week starts on
/// Mondays, and Prometheus needs the history in its past.
pub const START_MS: i64 = 1_767_571_200_000;

/// Results per list.
const RESULTS: usize = 10;

/// One stream of lists: a ranker in a market.
#[derive(Debug, Clone)]
pub struct Arm {
    pub market: String,
    pub ranker: String,
    /// Quality factor before `change_day` (1: the model's quality).
    pub factor: f64,
    /// From this day on (fractional), the factor is `after`.
    pub change_day: Option<f64>,
    pub after: f64,
    /// Team-draft interleaved lists of two equal rankers: each result's
    /// team is a fair coin per pair, and judgments are clicks.
    pub interleaved: bool,
    /// The arm's first day (fractional): an experiment launched then.
    pub start_day: f64,
}

impl std::str::FromStr for Arm {
    type Err = String;

    /// `market/ranker[*factor][@day*after][>start][~interleaved]`, e.g.
    /// `m1/control`, `d1/candidate*0.98>0.25`, `q/drop5@14.25*0.95`,
    /// `m1/interleaved~interleaved`.
    fn from_str(s: &str) -> Result<Self, String> {
        let (s, interleaved) = match s.strip_suffix("~interleaved") {
            Some(rest) => (rest, true),
            None => (s, false),
        };
        let (s, start_day) = match s.split_once('>') {
            Some((rest, day)) => (rest, day.parse::<f64>().map_err(|e| format!("{s}: start {day:?}: {e}"))?),
            None => (s, 0.0),
        };
        let (head, change) = match s.split_once('@') {
            Some((head, change)) => (head, Some(change)),
            None => (s, None),
        };
        let (name, factor) = match head.split_once('*') {
            Some((name, f)) => (name, f.parse::<f64>().map_err(|e| format!("{s}: factor {f:?}: {e}"))?),
            None => (head, 1.0),
        };
        let (market, ranker) = name.split_once('/').ok_or_else(|| format!("{s}: expected market/ranker"))?;
        let (change_day, after) = match change {
            None => (None, factor),
            Some(c) => {
                let (day, after) = c.split_once('*').ok_or_else(|| format!("{s}: expected @day*factor"))?;
                let day = day.parse::<f64>().map_err(|e| format!("{s}: day {day:?}: {e}"))?;
                let after = after.parse::<f64>().map_err(|e| format!("{s}: factor {after:?}: {e}"))?;
                (Some(day), after)
            }
        };
        Ok(Arm { market: market.into(), ranker: ranker.into(), factor, change_day, after, interleaved, start_day })
    }
}

/// What one arm produced: the harness's check of replay's counters.
#[derive(Debug, Default, serde::Serialize)]
struct Truth {
    lists: u64,
    sessions: u64,
    sum: f64,
}

/// The achievable nDCG@10 values of binary relevance over 10 shown
/// results, ascending, each with one relevance pattern (bit i: position
/// i + 1 relevant); 0 first (nothing relevant).
fn achievable() -> Vec<(f64, u16)> {
    let discount = |i: usize| 1.0 / ((i + 2) as f64).log2();
    let mut values: Vec<(f64, u16)> = (0u16..1 << RESULTS)
        .map(|pattern| {
            let relevant = pattern.count_ones() as usize;
            let dcg: f64 = (0..RESULTS).filter(|i| pattern >> i & 1 == 1).map(discount).sum();
            let ideal: f64 = (0..relevant).map(discount).sum();
            (if relevant == 0 { 0.0 } else { dcg / ideal }, pattern)
        })
        .collect();
    values.sort_by(|a, b| a.0.total_cmp(&b.0));
    values.dedup_by(|a, b| (a.0 - b.0).abs() < 1e-12);
    values
}

/// A pattern for `v` by randomized rounding, and its value.
fn pattern_for(table: &[(f64, u16)], v: f64, rng: &mut Rng) -> (f64, u16) {
    let i = table.partition_point(|&(x, _)| x < v);
    if i == 0 {
        return table[0];
    }
    if i == table.len() {
        return table[table.len() - 1];
    }
    let (lo, hi) = (table[i - 1], table[i]);
    if rng.unit() * (hi.0 - lo.0) < v - lo.0 { hi } else { lo }
}

/// Writes `days` of the arms' events to `out`, in event-time order, and
/// returns each arm's truth as JSON.
pub fn run(arms: &[Arm], days: f64, seed: u64, out: &mut impl Write) -> io::Result<String> {
    let table = achievable();
    let mut traffic: Vec<Traffic> = arms.iter().map(|_| Traffic::default()).collect();
    let mut rngs: Vec<Rng> =
        (0..arms.len()).map(|i| Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(i as u64))).collect();
    let mut truth: Vec<Truth> = arms.iter().map(|_| Truth::default()).collect();
    // One minute's events: (time, arm, line), sorted before writing.
    let mut minute: Vec<(i64, String)> = Vec::new();
    let minutes = (days * MINUTES_PER_DAY as f64).round() as usize;
    let mut event = 0u64;
    for t in 0..minutes {
        let day = t as f64 / MINUTES_PER_DAY as f64;
        for (a, arm) in arms.iter().enumerate().filter(|(_, arm)| day >= arm.start_day) {
            let factor = match arm.change_day {
                Some(d) if day >= d => arm.after,
                _ => arm.factor,
            };
            let rng = &mut rngs[a];
            // Draw the minute's lists first (the model's own draws), then
            // their times, teams and patterns from the same generator.
            let mut lists: Vec<(u64, f64)> = Vec::new();
            traffic[a].minute(rng, t, factor, |session, value| lists.push((session, value)));
            let mut previous = None;
            let mut at = 0i64;
            let mut query = 0u32;
            for (session, value) in lists {
                if previous != Some(session) {
                    previous = Some(session);
                    truth[a].sessions += 1;
                    // A session starts within the minute's first 50 s; its
                    // searches follow 500 ms apart (at most 10).
                    at = START_MS + t as i64 * 60_000 + rng.below(50_000) as i64;
                    query = 0;
                } else {
                    at += 500;
                    query += 1;
                }
                let (value, pattern) = pattern_for(&table, value, rng);
                truth[a].lists += 1;
                truth[a].sum += value;
                let session_id = format!("{}/{}/{session}", arm.market, arm.ranker);
                let mut results = String::with_capacity(40 * RESULTS);
                let mut a_first = false;
                for i in 0..RESULTS {
                    if i > 0 {
                        results.push(',');
                    }
                    if arm.interleaved {
                        // Team-draft: a coin decides which team picks first
                        // in each pair; the other picks second.
                        if i % 2 == 0 {
                            a_first = rng.below(2) == 0;
                        }
                        let team = if a_first == (i % 2 == 0) { "A" } else { "B" };
                        results.push_str(&format!("{{\"doc_id\":\"d{i}\",\"team\":\"{team}\"}}"));
                    } else {
                        results.push_str(&format!("{{\"doc_id\":\"d{i}\"}}"));
                    }
                }
                event += 1;
                minute.push((
                    at,
                    format!(
                        "{{\"type\":\"impression\",\"event_id\":\"e{event}\",\"session_id\":\"{session_id}\",\"query_id\":\"q{query}\",\"timestamp\":{at},\"results\":[{results}],\"dimensions\":{{\"market\":\"{}\",\"ranker\":\"{}\"}}}}",
                        arm.market, arm.ranker
                    ),
                ));
                for i in (0..RESULTS).filter(|i| pattern >> i & 1 == 1) {
                    event += 1;
                    let judged = if arm.interleaved { "\"action\":\"click\"" } else { "\"grade\":1" };
                    minute.push((
                        at + 1_000 + i as i64,
                        format!(
                            "{{\"type\":\"judgment\",\"event_id\":\"e{event}\",\"session_id\":\"{session_id}\",\"query_id\":\"q{query}\",\"doc_id\":\"d{i}\",{judged},\"timestamp\":{}}}",
                            at + 1_000 + i as i64
                        ),
                    ));
                }
            }
        }
        minute.sort_by_key(|&(at, _)| at);
        for (_, line) in minute.drain(..) {
            out.write_all(line.as_bytes())?;
            out.write_all(b"\n")?;
        }
    }
    out.flush()?;
    let by_arm: BTreeMap<String, &Truth> =
        arms.iter().zip(&truth).map(|(arm, t)| (format!("{}/{}", arm.market, arm.ranker), t)).collect();
    Ok(serde_json::to_string(&by_arm).expect("plain numbers serialize"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randomized_rounding_keeps_the_mean() {
        let table = achievable();
        assert_eq!(table[0], (0.0, 0));
        assert!((table.last().unwrap().0 - 1.0).abs() < 1e-12);
        let mut rng = Rng::new(7);
        for v in [0.05, 0.2, 0.3, 0.47, 0.8, 0.99] {
            let n = 200_000;
            let mean = (0..n).map(|_| pattern_for(&table, v, &mut rng).0).sum::<f64>() / n as f64;
            assert!((mean - v).abs() < 3e-3, "{v}: {mean}");
        }
    }

    #[test]
    fn arms_parse() {
        let a: Arm = "q/drop5@14.25*0.95".parse().unwrap();
        assert_eq!(
            (a.market.as_str(), a.ranker.as_str(), a.factor, a.change_day, a.after),
            ("q", "drop5", 1.0, Some(14.25), 0.95)
        );
        let c: Arm = "w/candidate*0.9>0.5".parse().unwrap();
        assert_eq!((c.factor, c.start_day, c.change_day), (0.9, 0.5, None));
        let b: Arm = "m1/il~interleaved".parse().unwrap();
        assert!(b.interleaved && b.factor == 1.0);
        assert!("nomarket".parse::<Arm>().is_err());
    }
}
