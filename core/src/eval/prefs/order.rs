//! The preference graph of one partial-order JG (one with several JSGs):
//! its strongly connected components and its transitive closure.
//!
//! In the prefs flow: used twice, one JG at a time in reused buffers.
//! `parse` builds the graph of each partial-order JG and refuses the file
//! if two documents are each preferred to the other; `evaluate` builds it
//! again, closes it, and counts each preference it holds.

use super::{PrefJudgment, run_end};
use std::ops::Range;

/// The preferences of one partial-order JG as a graph linear in its lines,
/// and their transitive closure: trec_eval's preference array, rebuilt for
/// one JG at a time in reusable buffers.
///
/// Nodes `0..docs` are the JG's documents (local indices). Within one JSG,
/// whose levels are `t = 0, 1, …` from the highest, a node `V_t` (`t >= 1`)
/// stands for "every document at level `t` or below": edges go from `V_t`
/// to each document at level `t` and to `V_{t+1}`, and from each document
/// at level `t - 1` to `V_t`. A document then reaches exactly the documents
/// it is preferred to, closed under transitivity (itself too when it is at
/// two levels of one JSG: trec_eval sets that bit and never reads it). Two
/// documents are each preferred to the other when they are in one strongly
/// connected component.
#[derive(Debug, Default)]
pub(super) struct Order {
    /// The number of documents, the first nodes.
    docs: usize,
    /// (from, to), while building.
    edges: Vec<(u32, u32)>,
    /// The edges out of node `v`: `targets[start[v]..start[v + 1]]`.
    start: Vec<u32>,
    targets: Vec<u32>,
    /// Tarjan's algorithm: per node its visit number and low link; the
    /// nodes not yet in a component; the call stack (node, next edge).
    index: Vec<u32>,
    low: Vec<u32>,
    stack: Vec<u32>,
    calls: Vec<(u32, u32)>,
    /// Per node, its component. Components are numbered as found, which is
    /// reverse topological order: a component's successors come first.
    comp: Vec<u32>,
    /// The nodes of component `c`: `members[comp_start[c]..comp_start[c + 1]]`.
    members: Vec<u32>,
    comp_start: Vec<u32>,
    /// The closure: per component, `words` u64 of the documents it reaches.
    words: usize,
    reach: Vec<u64>,
}

impl Order {
    /// Builds the graph of a JG's `lines` (sorted by jsg, then level
    /// descending) holding `docs` documents; `local(k)` is the local index
    /// of the document of `lines[k]`.
    pub(super) fn build(&mut self, lines: &[PrefJudgment], local: impl Fn(usize) -> u32, docs: usize) {
        self.docs = docs;
        self.edges.clear();
        let mut nodes = docs as u32;
        let mut s = 0;
        while s < lines.len() {
            let jsg = lines[s].jsg;
            let e = run_end(lines, s, |j| j.jsg == jsg);
            // Per level [lo, hi) after the highest, its node V.
            let (mut above, mut above_v) = (None::<Range<usize>>, None::<u32>);
            let mut lo = s;
            while lo < e {
                let rel = lines[lo].rel;
                let hi = run_end(&lines[..e], lo, |j| j.rel == rel);
                if let Some(above) = above {
                    let v = nodes;
                    nodes += 1;
                    if let Some(above_v) = above_v {
                        self.edges.push((above_v, v));
                    }
                    self.edges.extend(above.map(|k| (local(k), v)));
                    self.edges.extend((lo..hi).map(|k| (v, local(k))));
                    above_v = Some(v);
                }
                above = Some(lo..hi);
                lo = hi;
            }
            s = e;
        }
        // Adjacency lists, by counting sort of the edges on their origin.
        let nodes = nodes as usize;
        self.start.clear();
        self.start.resize(nodes + 1, 0);
        for &(u, _) in &self.edges {
            self.start[u as usize + 1] += 1;
        }
        for v in 0..nodes {
            self.start[v + 1] += self.start[v];
        }
        self.targets.clear();
        self.targets.resize(self.edges.len(), 0);
        for &(u, w) in &self.edges {
            let next = &mut self.start[u as usize];
            self.targets[*next as usize] = w;
            *next += 1;
        }
        // Each start[v] is now where v's edges end, i.e. v + 1's begin.
        self.start.copy_within(0..nodes, 1);
        self.start[0] = 0;
    }

    /// Finds the strongly connected components (Tarjan, without recursion).
    pub(super) fn components(&mut self) {
        const NONE: u32 = u32::MAX;
        let nodes = self.start.len() - 1;
        self.index.clear();
        self.index.resize(nodes, NONE);
        self.low.clear();
        self.low.resize(nodes, 0);
        self.comp.clear();
        self.comp.resize(nodes, NONE);
        self.members.clear();
        self.comp_start.clear();
        self.comp_start.push(0);
        self.stack.clear();
        self.calls.clear();
        let mut visited = 0u32;
        let mut visit = |o: &mut Order, v: u32| {
            o.index[v as usize] = visited;
            o.low[v as usize] = visited;
            visited += 1;
            o.stack.push(v);
            o.calls.push((v, o.start[v as usize]));
        };
        for root in 0..nodes as u32 {
            if self.index[root as usize] != NONE {
                continue;
            }
            visit(self, root);
            while let Some(&(v, e)) = self.calls.last() {
                let v = v as usize;
                if e < self.start[v + 1] {
                    let top = self.calls.len() - 1;
                    self.calls[top].1 += 1;
                    let w = self.targets[e as usize];
                    if self.index[w as usize] == NONE {
                        visit(self, w);
                    } else if self.comp[w as usize] == NONE {
                        // On the stack: in the component being built.
                        self.low[v] = self.low[v].min(self.index[w as usize]);
                    }
                    continue;
                }
                self.calls.pop();
                if let Some(&(u, _)) = self.calls.last() {
                    self.low[u as usize] = self.low[u as usize].min(self.low[v]);
                }
                if self.low[v] == self.index[v] {
                    let c = (self.comp_start.len() - 1) as u32;
                    while let Some(w) = self.stack.pop() {
                        self.comp[w as usize] = c;
                        self.members.push(w);
                        if w as usize == v {
                            break;
                        }
                    }
                    self.comp_start.push(self.members.len() as u32);
                }
            }
        }
    }

    fn members(&self, c: usize) -> &[u32] {
        &self.members[self.comp_start[c] as usize..self.comp_start[c + 1] as usize]
    }

    /// After [`Order::components`]: the first pair (i, j), i < j, of
    /// documents each preferred to the other, in local index order (as a
    /// scan of the closed preference matrix row by row finds it).
    pub(super) fn first_contradiction(&self) -> Option<(u32, u32)> {
        let mut first: Option<(u32, u32)> = None;
        for c in 0..self.comp_start.len() - 1 {
            let (mut a, mut b) = (u32::MAX, u32::MAX);
            for &m in self.members(c).iter().filter(|&&m| (m as usize) < self.docs) {
                if m < a {
                    (a, b) = (m, a);
                } else if m < b {
                    b = m;
                }
            }
            if b != u32::MAX && first.is_none_or(|(i, _)| a < i) {
                first = Some((a, b));
            }
        }
        first
    }

    /// After [`Order::components`]: the transitive closure, per component
    /// the documents it reaches, successors first.
    pub(super) fn close(&mut self) {
        let words = self.docs.div_ceil(64);
        let comps = self.comp_start.len() - 1;
        self.words = words;
        self.reach.clear();
        self.reach.resize(comps * words, 0);
        for c in 0..comps {
            let (done, rest) = self.reach.split_at_mut(c * words);
            let row = &mut rest[..words];
            for &u in &self.members[self.comp_start[c] as usize..self.comp_start[c + 1] as usize] {
                let u = u as usize;
                for &w in &self.targets[self.start[u] as usize..self.start[u + 1] as usize] {
                    let w = w as usize;
                    if w < self.docs {
                        row[w / 64] |= 1 << (w % 64);
                    }
                    let cw = self.comp[w] as usize;
                    if cw != c {
                        for (x, y) in row.iter_mut().zip(&done[cw * words..][..words]) {
                            *x |= y;
                        }
                    }
                }
            }
        }
    }

    /// After [`Order::close`]: calls `f(i, j)` for each document `i`
    /// preferred to another `j`, by `i` then `j` (local indices).
    pub(super) fn for_each_pair(&self, mut f: impl FnMut(u32, u32)) {
        for i in 0..self.docs {
            let row = &self.reach[self.comp[i] as usize * self.words..][..self.words];
            for (w, &bits) in row.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    let j = w * 64 + bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    if j != i {
                        f(i as u32, j as u32);
                    }
                }
            }
        }
    }

    #[cfg(test)]
    pub(super) fn heap_bytes(&self) -> usize {
        8 * (self.edges.capacity() + self.calls.capacity())
            + 4 * (self.start.capacity()
                + self.targets.capacity()
                + self.index.capacity()
                + self.low.capacity()
                + self.stack.capacity()
                + self.comp.capacity()
                + self.members.capacity()
                + self.comp_start.capacity())
            + 8 * self.reach.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator (xorshift64*), for the randomized tests.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) % n
        }
    }

    /// The closed preference matrix of a partial-order JG the plain way:
    /// direct preferences within each JSG, then Warshall's closure.
    fn closed_matrix(lines: &[PrefJudgment], local: &[u32], n: usize) -> Vec<Vec<bool>> {
        let mut m = vec![vec![false; n]; n];
        for (a, ja) in lines.iter().enumerate() {
            for (b, jb) in lines.iter().enumerate() {
                if ja.jsg == jb.jsg && ja.rel > jb.rel {
                    m[local[a] as usize][local[b] as usize] = true;
                }
            }
        }
        for k in 0..n {
            let via = m[k].clone();
            for row in m.iter_mut().filter(|row| row[k]) {
                for (x, &y) in row.iter_mut().zip(&via) {
                    *x |= y;
                }
            }
        }
        m
    }

    /// The preference graph gives the same closed preferences and the same
    /// first contradiction as the closed matrix, on random JGs: few docs,
    /// few levels, docs at two levels of one JSG, repeated lines; half of
    /// them consistent (levels derived from one utility per doc).
    #[test]
    fn order_graph_equals_closed_matrix() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let jsgs: [&[u8]; 4] = [b"s1", b"s2", b"s3", b"s4"];
        let names: Vec<Vec<u8>> = (0..12).map(|d| format!("d{d}").into_bytes()).collect();
        let (mut contradictions, mut pairs_seen) = (0, 0);
        let mut order = Order::default();
        for _ in 0..4000 {
            let mut lines = Vec::new();
            let num_docs = 1 + rng.below(12) as usize;
            let consistent = rng.below(2) == 0;
            let utility: Vec<u64> = (0..num_docs).map(|_| rng.below(6)).collect();
            for jsg in &jsgs[..2 + rng.below(3) as usize] {
                let coarse = 1 + rng.below(3);
                for _ in 0..1 + rng.below(8) {
                    let d = rng.below(num_docs as u64) as usize;
                    let doc = &names[d];
                    let rel = if consistent { utility[d] / coarse } else { rng.below(5) } as f64 - 1.0;
                    lines.push(PrefJudgment { jg: b"g", jsg, doc, rel });
                }
            }
            lines.sort_by(|a, b| a.jsg.cmp(b.jsg).then_with(|| b.rel.total_cmp(&a.rel)).then_with(|| a.doc.cmp(b.doc)));
            // Local indices in first-seen order, as `order` numbers them.
            let mut seen: Vec<&[u8]> = Vec::new();
            let local: Vec<u32> = lines
                .iter()
                .map(|j| match seen.iter().position(|d| *d == j.doc) {
                    Some(l) => l as u32,
                    None => {
                        seen.push(j.doc);
                        seen.len() as u32 - 1
                    }
                })
                .collect();
            let n = seen.len();
            let m = closed_matrix(&lines, &local, n);
            order.build(&lines, |k| local[k], n);
            order.components();
            let first = (0..n).flat_map(|i| (i + 1..n).map(move |j| (i, j))).find(|&(i, j)| m[i][j] && m[j][i]);
            let got = order.first_contradiction().map(|(i, j)| (i as usize, j as usize));
            assert_eq!(got, first, "{lines:?}");
            if first.is_some() {
                contradictions += 1;
                continue;
            }
            order.close();
            let mut pairs = Vec::new();
            order.for_each_pair(|i, j| pairs.push((i as usize, j as usize)));
            let want: Vec<(usize, usize)> =
                (0..n).flat_map(|i| (0..n).map(move |j| (i, j))).filter(|&(i, j)| i != j && m[i][j]).collect();
            assert_eq!(pairs, want, "{lines:?}");
            pairs_seen += pairs.len();
        }
        assert!(contradictions > 1000 && contradictions < 3000, "{contradictions} of 4000 contradict");
        assert!(pairs_seen > 10_000, "{pairs_seen} pairs");
    }
}
