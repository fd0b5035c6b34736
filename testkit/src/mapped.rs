//! Native events rewritten in an invented JSON schema, for the
//! differential tests of the `mapped` format: the same lists once as
//! rankpulse's own impressions and judgments and once as a producer with
//! its own field names would log them, with [`MAPPING_TOML`] the
//! `[mapped]` section that reads them back. Nothing here comes from
//! third-party data.
//!
//! The invented schema has what mappings meet: nested session and query
//! (one read by a dotted path, one by a JSON pointer), different names for
//! an impression's and a click's time (`served_at`, `clicked_at`), ISO 8601
//! text (with and without a zone) beside epoch milliseconds, integer doc
//! ids, 0-based ranks, ranks left out where they are the array order,
//! grades beside action names, actions rankpulse does not score, and
//! fields no path reads.

use crate::{MixMessage, Rng};
use serde_json::{Value, json};

/// The `[mapped]` section (and the formats of two topics, `hits` and
/// `clicks`) that reads [`mapped_twin`]'s messages.
pub const MAPPING_TOML: &str = r#"[kafka]
topics = ["hits", "clicks"]

[kafka.formats]
hits = "mapped"
clicks = "mapped"

[mapped]
session = "ctx.user.sid"
query = "/search/qid"
time = ["served_at", "clicked_at"]
id = "meta.uuid"
results = "page.hits"
result_doc = "item.sku"
result_position = "rank"
position_base = 0
result_score = "relevance"
judged_doc = ["target.sku", "/target/sku~1legacy"]
grade = "label"
action = "what"

[mapped.dimensions]
ranker = "exp.arm"
market = ["/geo/market", "market"]
"#;

/// The same events both ways; `mapped` has `ignored` more messages
/// (actions not in `[judgments.actions]`).
#[derive(Debug, Clone, Default)]
pub struct MappedTraffic {
    pub native: Vec<MixMessage>,
    pub mapped: Vec<MixMessage>,
    pub ignored: u64,
}

/// An id as the invented schema writes it: digits as a JSON integer.
fn id(text: &str) -> Value {
    match text.parse::<u64>() {
        Ok(n) if n.to_string() == text => json!(n),
        _ => json!(text),
    }
}

/// `ms` as a time field: epoch milliseconds or ISO 8601 text.
fn time(rng: &mut Rng, ms: i64) -> Value {
    match rng.below(3) {
        0 => json!(ms),
        _ => json!(crate::ubi::iso(ms, rng.below(4))),
    }
}

/// The grade `[judgments.actions]` gives by default.
fn default_grade(action: &str) -> Option<u64> {
    match action {
        "click" => Some(1),
        "add_to_cart" => Some(2),
        "purchase" => Some(3),
        _ => None,
    }
}

/// `native` (rankpulse's own events, in order) and their twins in the
/// invented schema; the same arguments give the same bytes.
pub fn mapped_twin(native: &[MixMessage], seed: u64) -> MappedTraffic {
    let mut rng = Rng::new(seed);
    let mut t = MappedTraffic { native: native.to_vec(), ..MappedTraffic::default() };
    for m in native {
        let Ok(e) = serde_json::from_slice::<Value>(&m.payload) else { continue };
        let mut out = json!({
            "ctx": {"user": {"sid": e["session_id"].clone(), "agent": "Mozilla/5.0"}},
            "meta": {"uuid": e["event_id"].clone(), "schema": 3},
        });
        if let Some(q) = e.get("query_id") {
            out["search"] = json!({"qid": q.clone(), "text": "red shoes", "filters": [{"k": "size", "v": [40, 41]}]});
        }
        let ms = e["timestamp"].as_i64().unwrap_or_default();
        if m.judgment {
            out["kind"] = json!("interaction");
            out["clicked_at"] = time(&mut rng, ms);
            let doc = id(e["doc_id"].as_str().unwrap_or_default());
            // Now and then under the second, legacy name.
            if rng.below(8) == 0 {
                out["target"] = json!({"sku/legacy": doc});
            } else {
                out["target"] = json!({"sku": doc});
            }
            let action = e["action"].as_str().unwrap_or_default();
            match (e.get("grade"), default_grade(action)) {
                (Some(g), _) => out["label"] = g.clone(),
                (None, Some(g)) if rng.below(2) == 0 => out["label"] = json!(g),
                _ => out["what"] = json!(action),
            }
        } else {
            out["kind"] = json!("serp");
            out["served_at"] = time(&mut rng, ms);
            let results = e["results"].as_array().cloned().unwrap_or_default();
            let in_order = results.iter().enumerate().all(|(i, r)| r["position"].as_u64() == Some(i as u64 + 1));
            let omit_ranks = in_order && rng.below(2) == 0;
            let hits: Vec<Value> = results
                .iter()
                .map(|r| {
                    let mut hit = json!({"item": {"sku": id(r["doc_id"].as_str().unwrap_or_default()), "title": "…"}});
                    if !omit_ranks {
                        hit["rank"] = json!(r["position"].as_u64().unwrap_or(1) - 1);
                    }
                    if let Some(s) = r.get("score") {
                        hit["relevance"] = s.clone();
                    }
                    hit
                })
                .collect();
            out["page"] = json!({"hits": hits, "total": 1000});
            let dims = &e["dimensions"];
            if let Some(r) = dims.get("ranker") {
                out["exp"] = json!({"arm": r.clone(), "since": "2025-01-01"});
            }
            if let Some(mk) = dims.get("market") {
                if rng.below(2) == 0 {
                    out["geo"] = json!({"market": mk.clone()});
                } else {
                    out["market"] = mk.clone();
                }
            }
        }
        t.mapped.push(MixMessage { judgment: m.judgment, key: m.key.clone(), payload: out.to_string().into_bytes() });
        if m.judgment && rng.below(5) == 0 {
            let hover = json!({
                "kind": "interaction", "ctx": {"user": {"sid": e["session_id"].clone()}},
                "meta": {"uuid": format!("hover-{}", t.ignored)}, "clicked_at": ms, "what": "hover",
            });
            t.mapped.push(MixMessage { judgment: true, key: m.key.clone(), payload: hover.to_string().into_bytes() });
            t.ignored += 1;
        }
    }
    t
}
