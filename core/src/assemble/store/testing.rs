//! Test support for the store's modules: lists of every layout from a
//! seed, list equality as the store keeps it, and the general way of
//! applying a judgment, against which the in-place way is held.

use super::{JudgmentEdit, ListStore};
use crate::assemble::{Applied, ListKey, OpenList, ShownDoc, Source};

/// A list of `shown` results at `positions`, with scores (but on every
/// fourth) when `scores`, and `judged` judgments; the seed picks its
/// values and its rarer shapes (teams, randomized, sources of two words).
pub(super) fn list(seed: u64, shown: usize, positions: impl Fn(usize) -> u32, scores: bool, judged: usize) -> OpenList {
    let mut rng = rankpulse_testkit::Rng::new(seed);
    OpenList {
        last_event_ms: rng.next() as i64,
        last_arrival_ms: -(rng.below(1 << 40) as i64),
        impression: (!seed.is_multiple_of(3)).then(|| (rng.next() as i64, rng.below(1000) as u32)),
        shown: (0..shown)
            .map(|i| ShownDoc {
                doc: rng.next(),
                position: positions(i),
                score: if scores && i % 4 != 3 { rng.next() as f64 / 7.0 } else { f64::NAN },
                // Seeds ≡ 1 (mod 4): an interleaved list (teams 0 to 2).
                team: if seed % 4 == 1 { rng.below(3) as u8 } else { 0 },
            })
            .collect(),
        randomized: seed % 7 == 3,
        judged: (0..judged).map(|_| (rng.next(), rng.below(31) as i32 - 1)).collect(),
        event_ids: (0..judged + 1).map(|_| rng.next()).collect(),
        // Seeds ≡ 2 (mod 3): sources whose offsets need two words.
        offsets: (0..(seed % 3) as usize)
            .map(|i| Source { id: i as u32 * 7, offset: (rng.next() >> (16 * (seed % 3 == 1) as u32)) as i64 })
            .collect(),
    }
}

fn sorted(ids: &[u64]) -> Vec<u64> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids
}

/// Equal lists (event ids in any order: a big list keeps them hashed).
pub(super) fn same(a: &OpenList, b: &OpenList) -> bool {
    let bits = |l: &OpenList| -> Vec<(u64, u32, u64, u8)> {
        l.shown.iter().map(|s| (s.doc, s.position, s.score.to_bits(), s.team)).collect()
    };
    a.last_event_ms == b.last_event_ms
        && a.last_arrival_ms == b.last_arrival_ms
        && a.impression == b.impression
        && a.randomized == b.randomized
        && bits(a) == bits(b)
        && a.judged == b.judged
        && sorted(&a.event_ids) == sorted(&b.event_ids)
        && a.offsets == b.offsets
}

/// The general way of applying a judgment, as the assembler does it
/// when [`ListStore::judge_at`] declines: load, edit, store back.
pub(super) fn judge_by_decoding(store: &mut ListStore, key: ListKey, e: &JudgmentEdit) -> Applied {
    let mut l = OpenList::default();
    let at = store.locate(key);
    store.load_at(at.unwrap(), &mut l);
    if l.event_ids.contains(&e.event) {
        return Applied::Duplicate;
    }
    if let Some(src) = e.source {
        match l.offsets.iter_mut().find(|o| o.id == src.id) {
            Some(o) => o.offset = o.offset.min(src.offset),
            None => l.offsets.push(src),
        }
    }
    l.event_ids.push(e.event);
    l.last_event_ms = l.last_event_ms.max(e.ts_ms);
    l.last_arrival_ms = l.last_arrival_ms.max(e.arrival_ms);
    match l.judged.iter_mut().find(|(d, _)| *d == e.doc) {
        Some((_, g)) => *g = (*g).max(e.grade),
        None => l.judged.push((e.doc, e.grade)),
    }
    store.store_at(key, at, &mut l).unwrap();
    Applied::Added
}
