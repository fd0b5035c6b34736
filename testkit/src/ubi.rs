//! Generated UBI traffic with its native twin, for the differential tests
//! and the benchmark of UBI input: the same lists as OpenSearch UBI 1.3
//! queries and events, and as rankpulse's own impressions and judgments.
//! Nothing here comes from third-party data.
//!
//! The UBI form exercises what the wild has: lists whose ranked results
//! come only as per-result `impression` events (positions from
//! `position.ordinal`, 0- or 1-based), queries with `query_response_hit_ids`,
//! ISO 8601 times (with `Z`, with an offset, without a zone) and epoch
//! milliseconds, numeric object ids, events with `event_attributes: null`,
//! actions rankpulse does not score, impression events at the very
//! millisecond of their query, events ahead of their query, lists with no
//! query at all, and lists keyed by `session_id` where `client_id` is
//! absent. The native form states each list once, as a reader of the UBI
//! mapping (docs/formats.md) would write it by hand.

use crate::{MixMessage, Rng};

/// Which UBI topic a message belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UbiTopic {
    Queries,
    Events,
}

#[derive(Debug, Clone)]
pub struct UbiMessage {
    pub topic: UbiTopic,
    /// The Kafka key: the list's `client_id` (or `session_id`).
    pub key: String,
    pub payload: Vec<u8>,
}

/// The same lists in both forms. `ignored` UBI events are valid but
/// score nothing (unmapped actions); `native` is in list order, each
/// impression before its judgments; `ubi` is in list order, each list's
/// messages shuffled (events may come before their query).
#[derive(Debug, Clone, Default)]
pub struct UbiTraffic {
    pub native: Vec<MixMessage>,
    pub ubi: Vec<UbiMessage>,
    pub ignored: u64,
    pub lists: usize,
}

const RANKERS: [&str; 2] = ["control", "candidate"];
const MARKETS: [&str; 3] = ["us", "de", "jp"];
const ACTIONS: [&str; 3] = ["click", "add_to_cart", "purchase"];
const IGNORED: [&str; 4] = ["item_click", "search", "page_exit", "view"];

/// `ms` since the epoch as ISO 8601 UTC text, in one of the shapes seen in
/// UBI data: `…Z`, `…+00:00`, `…+0000` (OpenSearch's own rendering), or
/// with no zone (UTC by the mapping).
pub fn iso(ms: i64, shape: u64) -> String {
    let (days, rem) = (ms.div_euclid(86_400_000), ms.rem_euclid(86_400_000));
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let (h, m, s, milli) = (rem / 3_600_000, rem / 60_000 % 60, rem / 1_000 % 60, rem % 1_000);
    let zone = match shape % 4 {
        0 => "Z",
        1 => "+00:00",
        2 => "+0000",
        _ => "",
    };
    format!("{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{milli:03}{zone}")
}

/// A UBI `timestamp` value: ISO text or epoch milliseconds.
fn ubi_time(rng: &mut Rng, ms: i64) -> String {
    match rng.below(5) {
        4 => ms.to_string(),
        shape => format!("\"{}\"", iso(ms, shape)),
    }
}

/// `lists` lists from `base_ms`, one per `spacing_ms`, with positions in
/// impression events `ordinal_base`-based; the same arguments give the
/// same bytes.
pub fn ubi_mix(lists: usize, seed: u64, base_ms: i64, spacing_ms: f64, ordinal_base: u32) -> UbiTraffic {
    generate(lists, seed, base_ms, spacing_ms, ordinal_base, false)
}

/// As [`ubi_mix`], but every list has a query carrying
/// `query_response_hit_ids` (no impression events): the shape of a search
/// backend that logs its responses.
pub fn ubi_mix_hit_ids(lists: usize, seed: u64, base_ms: i64, spacing_ms: f64) -> UbiTraffic {
    generate(lists, seed, base_ms, spacing_ms, 0, true)
}

fn generate(
    lists: usize,
    seed: u64,
    base_ms: i64,
    spacing_ms: f64,
    ordinal_base: u32,
    hits_always: bool,
) -> UbiTraffic {
    let mut rng = Rng::new(seed);
    let mut t = UbiTraffic { lists, ..UbiTraffic::default() };
    for i in 0..lists {
        let start = base_ms + (i as f64 * spacing_ms) as i64;
        let id = format!("{i:08}-{:04x}", rng.below(0xffff));
        let query_id = format!("q-{id}");
        // Lists with no query are sometimes keyed by session_id alone.
        let with_query = hits_always || rng.below(10) != 0;
        let by_session = !with_query && rng.below(2) == 0;
        let key = if by_session { format!("s-{id}") } else { format!("c-{id}") };
        let ranker = RANKERS[rng.below(2) as usize];
        let market = MARKETS[rng.below(3) as usize];
        let numeric = rng.below(3) == 0;
        let n = 1 + rng.below(12) as usize;
        let docs: Vec<String> = (0..n)
            .map(|_| {
                if numeric {
                    (100_000 + rng.below(900_000)).to_string()
                } else {
                    format!("D{:07}", rng.below(5_000_000))
                }
            })
            .collect();
        let object = |d: &str| if numeric { d.to_string() } else { format!("\"{d}\"") };
        // Hit ids in the query, or per-result impression events (a few positions missing).
        let hit_ids = hits_always || (with_query && rng.below(2) == 0);
        let mut shown: Vec<usize> =
            if hit_ids { (0..n).collect() } else { (0..n).filter(|_| rng.below(8) != 0).collect() };
        // A query shown only through impression events has at least one:
        // with none, what it showed is unknown and it is not scored
        // (`no_results_known`), which the native twin cannot say. (Without
        // a query and impression events, the judgments are orphans.)
        if shown.is_empty() && with_query {
            shown.push(0);
        }
        let ids = if by_session {
            format!(r#""session_id":"{key}""#)
        } else {
            format!(r#""client_id":"{key}","session_id":"sess-{id}""#)
        };
        let mut list: Vec<UbiMessage> = Vec::new();
        let event = |body: String| UbiMessage { topic: UbiTopic::Events, key: key.clone(), payload: body.into_bytes() };
        // Impression events: at the query's millisecond or a little after.
        let mut first_shown = i64::MAX;
        if !hit_ids {
            for &p in &shown {
                let ts = start + if rng.below(2) == 0 { 0 } else { 1 + rng.below(300) as i64 };
                first_shown = first_shown.min(ts);
                list.push(event(format!(
                    r#"{{"application":"shop","action_name":"impression","query_id":"{query_id}",{ids},"timestamp":{},"user_query":"q","message_type":"IMPRESSION","message":null,"event_attributes":{{"object":{{"object_id":{},"object_id_field":"sku"}},"position":{{"ordinal":{}}}}}}}"#,
                    ubi_time(&mut rng, ts),
                    object(&docs[p]),
                    p as u32 + ordinal_base
                )));
            }
        }
        if with_query {
            let hits = if hit_ids {
                format!(
                    r#","query_response_id":"r-{id}","query_response_hit_ids":[{}]"#,
                    docs.iter().map(|d| format!("\"{d}\"")).collect::<Vec<_>>().join(",")
                )
            } else {
                String::new()
            };
            list.push(UbiMessage {
                topic: UbiTopic::Queries,
                key: key.clone(),
                payload: format!(
                    r#"{{"application":"shop","query_id":"{query_id}","client_id":"{key}","user_query":"q {i}","query_attributes":{{"ranker":"{ranker}","market":"{market}","filters":{{"brand":["a","b"]}},"page":1}},"object_id_field":"sku","timestamp":{}{hits}}}"#,
                    ubi_time(&mut rng, start)
                )
                .into_bytes(),
            });
        }
        // Judgments: distinct times, so that no two are the same message.
        let mut judgments = Vec::new();
        for j in 0..rng.below(4) {
            let doc = if rng.below(6) == 0 {
                format!("X{}", rng.below(1000))
            } else {
                docs[rng.below(n as u64) as usize].clone()
            };
            let doc_json = if doc.starts_with('X') { format!("\"{doc}\"") } else { object(&doc) };
            let action = ACTIONS[rng.below(3) as usize];
            let ts = start + 1_000 * (j as i64 + 1) + rng.below(500) as i64;
            list.push(event(format!(
                r#"{{"application":"shop","action_name":"{action}","query_id":"{query_id}",{ids},"timestamp":{},"event_attributes":{{"object":{{"object_id":{doc_json}}},"position":{{"ordinal":{}}},"browser":"x"}}}}"#,
                ubi_time(&mut rng, ts),
                rng.below(n as u64)
            )));
            judgments.push((doc, action, ts));
        }
        // Actions rankpulse does not score, some with null attributes.
        for _ in 0..rng.below(3) {
            let action = IGNORED[rng.below(4) as usize];
            let attributes =
                if rng.below(2) == 0 { "null".to_string() } else { r#"{"position":{"x":1,"y":2}}"#.to_string() };
            list.push(event(format!(
                r#"{{"action_name":"{action}","query_id":"{query_id}",{ids},"timestamp":{},"event_attributes":{attributes}}}"#,
                ubi_time(&mut rng, start + 50)
            )));
            t.ignored += 1;
        }
        // A re-delivered judgment now and then: counted once in both forms.
        let redeliver = !judgments.is_empty() && rng.below(10) == 0;
        if redeliver
            && let Some(again) = list
                .iter()
                .find(|m| {
                    m.payload.starts_with(b"{\"application\":\"shop\",\"action_name\":\"c")
                        || m.payload.starts_with(b"{\"application\":\"shop\",\"action_name\":\"a")
                        || m.payload.starts_with(b"{\"application\":\"shop\",\"action_name\":\"p")
                })
                .cloned()
        {
            list.push(again);
        }
        // Arrival order within the list: shuffled (events before their query).
        for k in (1..list.len()).rev() {
            list.swap(k, rng.below(k as u64 + 1) as usize);
        }
        t.ubi.extend(list);

        // The native twin.
        if !shown.is_empty() || with_query {
            let (ts, dims) = if with_query {
                (start, format!(r#","dimensions":{{"ranker":"{ranker}","market":"{market}"}}"#))
            } else {
                (first_shown, String::new())
            };
            let results: Vec<String> =
                shown.iter().map(|&p| format!(r#"{{"doc_id":"{}","position":{}}}"#, docs[p], p + 1)).collect();
            let query = format!(r#""query_id":"{query_id}""#);
            t.native.push(MixMessage {
                judgment: false,
                key: key.clone(),
                payload: format!(
                    r#"{{"type":"impression","event_id":"i-{id}","session_id":"{key}",{query},"timestamp":{ts},"results":[{}]{dims}}}"#,
                    results.join(",")
                )
                .into_bytes(),
            });
        }
        for (j, (doc, action, ts)) in judgments.iter().enumerate() {
            t.native.push(MixMessage {
                judgment: true,
                key: key.clone(),
                payload: format!(
                    r#"{{"type":"judgment","event_id":"j-{id}-{j}","session_id":"{key}","query_id":"{query_id}","doc_id":"{doc}","action":"{action}","timestamp":{ts}}}"#
                )
                .into_bytes(),
            });
        }
        if redeliver {
            // The UBI copy is of the first judgment in generation order.
            let first = t.native.iter().rposition(|m| {
                m.judgment && m.payload.ends_with(format!(r#""timestamp":{}}}"#, judgments[0].2).as_bytes())
            });
            if let Some(at) = first {
                let again = t.native[at].clone();
                t.native.push(again);
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_text_is_the_calendar_date() {
        // Reference values from `date -u -d @…` (GNU coreutils).
        assert_eq!(iso(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_733_788_889_378, 0), "2024-12-10T00:01:29.378Z");
        assert_eq!(iso(951_782_400_000, 1), "2000-02-29T00:00:00.000+00:00");
        assert_eq!(iso(4_107_542_399_999, 3), "2100-02-28T23:59:59.999");
        assert_eq!(iso(1_733_788_889_378, 2), "2024-12-10T00:01:29.378+0000");
    }
}
