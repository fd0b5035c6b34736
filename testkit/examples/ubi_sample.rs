//! Prints generated UBI traffic (`rankpulse_testkit::ubi`) as NDJSON, one
//! message per line prefixed by its topic and a tab, so that CI can check
//! docs/ubi_query.schema.json and docs/ubi_event.schema.json accept every
//! query and event rankpulse's own tests feed it.
//!
//!     cargo run -p rankpulse-testkit --example ubi_sample -- LISTS SEED

use rankpulse_testkit::ubi::{UbiTopic, ubi_mix, ubi_mix_hit_ids};
use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1).map(|a| a.parse::<u64>().expect("LISTS SEED are numbers"));
    let (lists, seed) = (args.next().unwrap_or(1_000) as usize, args.next().unwrap_or(7));
    let out = std::io::stdout();
    let mut out = out.lock();
    for traffic in [
        ubi_mix(lists, seed, 1_763_780_000_000, 100.0, 0),
        ubi_mix(lists, seed + 1, 1_763_780_000_000, 100.0, 1),
        ubi_mix_hit_ids(lists, seed + 2, 1_763_780_000_000, 100.0),
    ] {
        for m in &traffic.ubi {
            let topic = if m.topic == UbiTopic::Queries { "queries" } else { "events" };
            out.write_all(topic.as_bytes())
                .and_then(|()| out.write_all(b"\t"))
                .and_then(|()| out.write_all(&m.payload))
                .and_then(|()| out.write_all(b"\n"))
                .expect("stdout");
        }
    }
}
