//! The traffic shapes the benchmark produces: S1 is `rankpulse::bench::mix`
//! (an impression of 10 results, three judgments 0.5–1.9 s after it), S2 is
//! the judgment-heavy shape written here from its description in the
//! performance issue, so that the product is measured on traffic it was
//! not tuned on:
//!
//! - lists of 1 to 50 results, 10 in most;
//! - about ten judgments per impression (5 to 15): clicks and graded labels,
//!   15% of them for documents the list never showed, about 5% delivered
//!   twice (same event id);
//! - judgments trail their impression by 0 to 20 s;
//! - a list every `spacing_ms` of event time (two hours for 100,000 lists);
//! - events in near time order: each is emitted at its event time plus up
//!   to 0.5 s, so they are out of order by at most that;
//! - three rankers, four markets.

use rankpulse_testkit::Rng;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// One message to produce: its topic (`judgment` or not), key and payload.
#[derive(Debug, Clone)]
pub struct Message {
    pub judgment: bool,
    pub key: String,
    pub payload: String,
    /// When it is emitted (event time plus its delivery jitter, ms): the
    /// order of the stream, and in a live tail the moment to produce it.
    pub emit_ms: i64,
}

const RANKERS: [&str; 3] = ["control", "candidate", "explore"];
const MARKETS: [&str; 4] = ["us", "de", "jp", "br"];
/// Latest a judgment comes after its impression, event time (ms).
pub const MAX_JUDGMENT_DELAY_MS: i64 = 20_000;
/// Most a message is emitted after its event time (ms).
const MAX_JITTER_MS: i64 = 500;

/// S2: `lists` lists from `base_ms`, one every `spacing_ms`, in emission
/// order. Generated lazily, so a live tail of any length costs no memory.
pub struct JudgmentHeavy {
    rng: Rng,
    next_list: usize,
    lists: usize,
    base_ms: i64,
    spacing_ms: f64,
    /// Generated but not yet emitted, by emission time (then sequence).
    pending: BinaryHeap<Reverse<(i64, u64, Pending)>>,
    seq: u64,
}

#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Pending {
    judgment: bool,
    key: String,
    payload: String,
}

impl JudgmentHeavy {
    pub fn new(lists: usize, seed: u64, base_ms: i64, spacing_ms: f64) -> Self {
        JudgmentHeavy {
            rng: Rng::new(seed),
            next_list: 0,
            lists,
            base_ms,
            spacing_ms,
            pending: BinaryHeap::new(),
            seq: 0,
        }
    }

    fn push(&mut self, emit_ms: i64, judgment: bool, key: &str, payload: String) {
        self.seq += 1;
        self.pending.push(Reverse((emit_ms, self.seq, Pending { judgment, key: key.to_string(), payload })));
    }

    /// Generates list `i` into `pending`; returns its impression's event time.
    fn generate(&mut self, i: usize) -> i64 {
        let rng = &mut self.rng;
        let t = self.base_ms + (i as f64 * self.spacing_ms) as i64;
        let session = format!("s2-{i:09}-{:04x}", rng.below(0xffff));
        let query = format!("q-{:07}", rng.below(5_000_000));
        let ranker = RANKERS[rng.below(3) as usize];
        let market = MARKETS[rng.below(4) as usize];
        let results = if rng.below(10) < 6 { 10 } else { 1 + rng.below(50) as usize };
        let docs: Vec<u64> = (0..results).map(|_| rng.below(20_000_000)).collect();
        let shown: Vec<String> = docs
            .iter()
            .enumerate()
            .map(|(p, d)| {
                format!(r#"{{"doc_id":"d{d:08}","position":{},"score":{:.4}}}"#, p + 1, 50.0 - p as f64 * 0.9)
            })
            .collect();
        let impression = format!(
            r#"{{"type":"impression","event_id":"i{i:09}","session_id":"{session}","query_id":"{query}","timestamp":{t},"results":[{}],"dimensions":{{"ranker":"{ranker}","market":"{market}"}}}}"#,
            shown.join(",")
        );
        let jitter = rng.below(MAX_JITTER_MS as u64 + 1) as i64;
        let mut out = vec![(t + jitter, false, impression)];
        for j in 0..5 + rng.below(11) {
            let doc =
                if rng.below(100) < 15 { rng.below(20_000_000) } else { docs[rng.below(results as u64) as usize] };
            let at = t + rng.below(MAX_JUDGMENT_DELAY_MS as u64 + 1) as i64;
            let label = if rng.below(2) == 0 {
                r#""action":"click""#.to_string()
            } else {
                format!(r#""grade":{}"#, rng.below(5))
            };
            let judgment = format!(
                r#"{{"type":"judgment","event_id":"j{i:09}-{j}","session_id":"{session}","query_id":"{query}","doc_id":"d{doc:08}",{label},"timestamp":{at}}}"#
            );
            let emit = at + rng.below(MAX_JITTER_MS as u64 + 1) as i64;
            if rng.below(100) < 5 {
                let again = emit + rng.below(MAX_JITTER_MS as u64 + 1 - (emit - at) as u64) as i64;
                out.push((again, true, judgment.clone()));
            }
            out.push((emit, true, judgment));
        }
        for (emit, judgment, payload) in out {
            self.push(emit, judgment, &session, payload);
        }
        t
    }
}

impl Iterator for JudgmentHeavy {
    type Item = Message;

    fn next(&mut self) -> Option<Message> {
        loop {
            // A list not generated yet has its every event at or after its
            // impression's time: what is pending before it is emitted first.
            let next_start =
                (self.next_list < self.lists).then(|| self.base_ms + (self.next_list as f64 * self.spacing_ms) as i64);
            match (self.pending.peek(), next_start) {
                (Some(Reverse((emit, _, _))), Some(start)) if *emit >= start => {}
                (Some(_), _) => {
                    let Reverse((emit_ms, _, p)) = self.pending.pop()?;
                    return Some(Message { judgment: p.judgment, key: p.key, payload: p.payload, emit_ms });
                }
                (None, None) => return None,
                (None, Some(_)) => {}
            }
            let i = self.next_list;
            self.next_list += 1;
            self.generate(i);
        }
    }
}

/// S1: the mix `rankpulse-bench kafka` measures, as [`Message`]s, one list
/// per ms of event time ending now.
pub fn production_mix(lists: usize, seed: u64, now_ms: i64) -> Vec<Message> {
    rankpulse_testkit::mix(0, lists, seed, now_ms - lists as i64, 1.0)
        .into_iter()
        .map(|m| Message {
            judgment: m.judgment,
            key: m.key,
            payload: String::from_utf8_lossy(&m.payload).into_owned(),
            emit_ms: 0,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape holds what its description says, for a seed not tuned to it.
    #[test]
    fn judgment_heavy_has_its_described_shape() {
        let lists = 2_000;
        let msgs: Vec<Message> = JudgmentHeavy::new(lists, 7, 1_000_000, 72.0).collect();
        let impressions: Vec<&Message> = msgs.iter().filter(|m| !m.judgment).collect();
        let judgments = msgs.len() - impressions.len();
        assert_eq!(impressions.len(), lists);
        let per_list = judgments as f64 / lists as f64;
        assert!((9.5..11.5).contains(&per_list), "{per_list} judgments per impression");
        // Emission order; event time out of order by at most the jitter.
        let ts = |m: &Message| -> i64 {
            let v: serde_json::Value = serde_json::from_str(&m.payload).unwrap();
            v["timestamp"].as_i64().unwrap()
        };
        let mut newest = i64::MIN;
        for w in msgs.windows(2) {
            assert!(w[0].emit_ms <= w[1].emit_ms);
        }
        for m in &msgs {
            let t = ts(m);
            assert!(newest.saturating_sub(t) <= MAX_JITTER_MS, "{} ms out of order", newest - t);
            assert!((0..=MAX_JITTER_MS).contains(&(m.emit_ms - t)));
            newest = newest.max(t);
        }
        // Sizes of 1 to 50 results, most of 10.
        let sizes: Vec<usize> = impressions.iter().map(|m| m.payload.matches("\"position\"").count()).collect();
        assert!(sizes.iter().all(|s| (1..=50).contains(s)));
        let tens = sizes.iter().filter(|s| **s == 10).count() as f64 / lists as f64;
        assert!((0.55..0.7).contains(&tens), "{tens} of lists with 10 results");
        // About 5% duplicates.
        let mut ids: Vec<String> = msgs
            .iter()
            .filter(|m| m.judgment)
            .map(|m| serde_json::from_str::<serde_json::Value>(&m.payload).unwrap()["event_id"].to_string())
            .collect();
        ids.sort_unstable();
        let distinct = {
            let mut d = ids.clone();
            d.dedup();
            d.len()
        };
        let dup = 1.0 - distinct as f64 / judgments as f64;
        assert!((0.03..0.07).contains(&dup), "{dup} duplicated");
    }
}
