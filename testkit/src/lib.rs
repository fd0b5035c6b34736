//! Test support shared by rankpulse's crates, beside the data flow: nothing
//! here is in the product binary.
//!
//! - [`Rng`]: the one seeded generator of test and benchmark inputs.
//! - [`mix`]: the production-shaped event mix (S1 of the benchmark), as
//!   Kafka keys and JSON payloads, so that no crate of the flow is needed
//!   to make it.
//! - [`ubi::ubi_mix`]: the same lists as OpenSearch UBI queries and events
//!   and as native events, for differential tests of UBI input.
//! - [`mapped::mapped_twin`]: native events rewritten in an invented
//!   schema, with the `[mapped]` section that reads them.
//! - [`traffic::Traffic`]: simulated sessions of searches over days, for
//!   the decision simulations.
//! - [`http_get`], [`sum_of`]: reading a daemon's `/metrics` the way a
//!   scraper does.

pub mod mapped;
pub mod traffic;
pub mod ubi;

use rand::{Rng as _, RngCore, SeedableRng};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

/// The seeded generator of every test and benchmark input: ChaCha8, whose
/// output for a seed is fixed across platforms and `rand` versions, so a
/// seed in a test or a benchmark's command line names the same input
/// everywhere.
pub struct Rng(rand_chacha::ChaCha8Rng);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(rand_chacha::ChaCha8Rng::seed_from_u64(seed))
    }

    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0.next_u64()
    }

    /// A value in 0..n (0 when n is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.0.random_range(0..n) }
    }

    /// A value in [0, 1).
    pub fn unit(&mut self) -> f64 {
        self.0.random::<f64>()
    }
}

/// One message of the mix.
#[derive(Debug, Clone)]
pub struct MixMessage {
    pub judgment: bool,
    /// The session id: the Kafka key.
    pub key: String,
    pub payload: Vec<u8>,
}

const RANKERS: [&str; 2] = ["control", "candidate"];
const MARKETS: [&str; 4] = ["us", "de", "jp", "br"];
const ACTIONS: [&str; 3] = ["click", "add_to_cart", "purchase"];

/// Lists `first..first + lists`, each an impression of 10 results followed
/// by 3 judgments, in event-time order from `base_ms` (one list per
/// `spacing_ms`); the same arguments give the same bytes.
pub fn mix(first: usize, lists: usize, seed: u64, base_ms: i64, spacing_ms: f64) -> Vec<MixMessage> {
    let mut rng = Rng::new(seed ^ (first as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut out = Vec::with_capacity(lists * 4);
    for i in first..first + lists {
        let t = base_ms + ((i - first) as f64 * spacing_ms) as i64;
        let session = format!("sess-{:010}-{:04x}", i, rng.below(0xffff));
        let query = format!("q-{:08}", rng.below(100_000_000));
        let ranker = RANKERS[rng.below(2) as usize];
        let market = MARKETS[rng.below(4) as usize];
        let docs: Vec<u64> = (0..10).map(|_| rng.below(10_000_000)).collect();
        let results: Vec<String> = docs
            .iter()
            .enumerate()
            .map(|(p, d)| {
                format!(r#"{{"doc_id":"doc-{d:010}","position":{},"score":{:.6}}}"#, p + 1, 30.0 - p as f64 * 1.37)
            })
            .collect();
        let impression = format!(
            r#"{{"type":"impression","event_id":"imp-{i:012}","session_id":"{session}","query_id":"{query}","timestamp":{t},"results":[{}],"dimensions":{{"ranker":"{ranker}","market":"{market}","device":"mobile"}}}}"#,
            results.join(",")
        );
        out.push(MixMessage { judgment: false, key: session.clone(), payload: impression.into_bytes() });
        for j in 0..3 {
            let doc = docs[rng.below(10) as usize];
            let action = ACTIONS[rng.below(3) as usize];
            let judgment = format!(
                r#"{{"type":"judgment","event_id":"jdg-{i:012}-{j}","session_id":"{session}","query_id":"{query}","doc_id":"doc-{doc:010}","action":"{action}","timestamp":{}}}"#,
                t + 500 + j * 700
            );
            out.push(MixMessage { judgment: true, key: session.clone(), payload: judgment.into_bytes() });
        }
    }
    out
}

/// Mean payload sizes (impressions, judgments).
pub fn mean_sizes(messages: &[MixMessage]) -> (f64, f64) {
    let mean = |judgment: bool| {
        let sizes: Vec<usize> = messages.iter().filter(|m| m.judgment == judgment).map(|m| m.payload.len()).collect();
        sizes.iter().sum::<usize>() as f64 / sizes.len().max(1) as f64
    };
    (mean(false), mean(true))
}

/// Milliseconds since the Unix epoch by the wall clock.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// A port free on loopback right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map_or(0, |a| a.port())
}

/// GET `path` from `addr` (HTTP/1.1, 5 s timeout); returns (status, body).
pub fn http_get(addr: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")?;
    let mut buf = String::new();
    s.read_to_string(&mut buf)?;
    let status = buf.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, body) = buf.split_once("\r\n\r\n").unwrap_or((buf.as_str(), ""));
    let chunked = head.lines().any(|l| {
        let l = l.to_ascii_lowercase();
        l.starts_with("transfer-encoding:") && l.contains("chunked")
    });
    Ok((status, if chunked { dechunk(body) } else { body.to_string() }))
}

/// Decodes an HTTP/1.1 chunked body.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].strip_prefix("\r\n").unwrap_or(&rest[n..]);
    }
    out
}

/// Sum of every sample of `name` in a Prometheus text exposition: a metric
/// name (any labels), or a name with the start of a label set
/// (`rankpulse_lists{window="1h"`).
pub fn sum_of(exposition: &str, name: &str) -> f64 {
    let partial_labels = name.contains('{');
    exposition
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with(name) && (partial_labels || matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' ')))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_names_one_mix() {
        let a = mix(0, 50, 42, 0, 4.0);
        let b = mix(0, 50, 42, 0, 4.0);
        assert!(a.iter().zip(&b).all(|(x, y)| x.payload == y.payload && x.key == y.key));
        assert_ne!(mix(0, 50, 43, 0, 4.0)[0].payload, a[0].payload);
        assert_eq!(a.len(), 200);
    }

    #[test]
    fn below_stays_below() {
        let mut rng = Rng::new(1);
        assert!((0..10_000).all(|_| rng.below(7) < 7));
        assert_eq!(rng.below(0), 0);
    }

    #[test]
    fn sums_name_labels_and_partial_label_sets() {
        let e = "# HELP x\nx_total{a=\"1\"} 2\nx_total{a=\"2\"} 3\nx_total_more 100\n";
        assert_eq!(sum_of(e, "x_total"), 5.0);
        assert_eq!(sum_of(e, "x_total{a=\"2\""), 3.0);
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk("3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"), "abcde");
    }
}
