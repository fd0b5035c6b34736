#!/usr/bin/env python3
"""Deterministic generator of a synthetic TREC qrels + run pair for benchmarks.

Usage:
    python3 gen_trec_pair.py --topics 100000 --seed 42 --out-dir /work/scratch/bench

Writes DIR/qrels_<N>.txt (4 columns: ``qid 0 docno grade``) and
DIR/run_<N>.txt (6 columns: ``qid Q0 docno rank score runid``), or the names
given by --qrels-name / --run-name.  Python 3 standard library only; the same
(--topics, --seed, options) always gives byte-identical files (only
``random.Random(seed)`` is used, never hash() or set iteration order).
Output is streamed topic by topic, so memory stays small.

Shape of the data (defaults; tuned so that N=100000 gives ~2.0M qrels lines,
~1.7M run lines and ~92 MB for both files together):

* qids are numeric strings "1".."N", written in increasing numeric order;
  all lines of one topic are contiguous in both files.
* qrels: on average 20 judged docs per topic (1..100), grades drawn from
  0 (~62%), 1 (~16%), 2 (~10%), 3 (~6%), 4 (~4%) and -1 (~2%, "in pool but
  unjudged" for trec_eval).  Some topics end up with no relevant doc at all.
* run: on average 17 docs per topic (1..50).  About half of the retrieved
  docs are judged docs of the topic (relevant ones tend to score higher),
  the rest are unjudged.  Scores are written with 4 decimals, decreasing with
  rank; ~8% of the docs repeat the score of the doc before them (ties), and
  tied docs are written in random order (not in trec_eval's docno
  tie-break order), ranks 1..n in file order.
* edge cases for ``trec_eval -c``: ~1% of topics have qrels but no run lines,
  ~0.5% of topics have run lines but no qrels.
* docnos are "D" + a decimal number < 2,000,000 without padding (2..8
  chars; ~50% have 8, ~45% have 7), unique within a topic, shared between
  topics.
"""

import argparse
import os
import random
import sys
import time

# grade distribution for qrels (cumulative thresholds)
GRADES = (0, 1, 2, 3, 4, -1)
GRADE_P = (0.62, 0.16, 0.10, 0.06, 0.04, 0.02)


def cumulative(ps):
    out, acc = [], 0.0
    for p in ps:
        acc += p
        out.append(acc)
    out[-1] = 1.0
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, required=True, help="number of topics N")
    ap.add_argument("--seed", type=int, required=True, help="RNG seed")
    ap.add_argument("--out-dir", required=True, help="output directory")
    ap.add_argument("--qrels-name", default=None, help="default qrels_<N>.txt")
    ap.add_argument("--run-name", default=None, help="default run_<N>.txt")
    ap.add_argument("--runid", default="rpb1", help="run tag (6th column)")
    ap.add_argument("--qrels-mean", type=float, default=20.1,
                    help="~mean judged docs per topic that has qrels")
    ap.add_argument("--run-mean", type=float, default=17.2,
                    help="~mean retrieved docs per topic that has a run")
    ap.add_argument("--run-max", type=int, default=50)
    ap.add_argument("--docs", type=int, default=2_000_000,
                    help="collection size: docnos are D0..D<docs-1>")
    ap.add_argument("--tie-prob", type=float, default=0.08)
    ap.add_argument("--judged-frac", type=float, default=0.5,
                    help="fraction of run docs taken from the judged docs")
    ap.add_argument("--qrels-only-frac", type=float, default=0.01,
                    help="fraction of topics with qrels but no run lines")
    ap.add_argument("--run-only-frac", type=float, default=0.005,
                    help="fraction of topics with run lines but no qrels")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)

    n_topics = args.topics
    rng = random.Random(args.seed)
    rnd = rng.random
    randrange = rng.randrange
    gauss = rng.gauss
    gammavariate = rng.gammavariate
    grade_cum = cumulative(GRADE_P)
    n_docs = args.docs
    runid = args.runid
    run_max = args.run_max
    tie_prob = args.tie_prob
    judged_frac = args.judged_frac
    qonly = args.qrels_only_frac
    ronly = args.run_only_frac
    # gamma(shape k, scale) + 1, clipped; scale chosen so the mean is ~target
    q_shape, r_shape = 2.0, 2.0
    # (offsets measured empirically: int()+1 adds ~0.5, clipping removes some)
    q_scale = (args.qrels_mean - 0.45) / q_shape
    r_scale = (args.run_mean - 0.38) / r_shape

    os.makedirs(args.out_dir, exist_ok=True)
    qname = args.qrels_name or "qrels_%d.txt" % n_topics
    rname = args.run_name or "run_%d.txt" % n_topics
    qpath = os.path.join(args.out_dir, qname)
    rpath = os.path.join(args.out_dir, rname)

    n_qlines = n_rlines = 0
    t0 = time.time()
    with open(qpath, "w", encoding="ascii", newline="\n", buffering=1 << 20) as fq, \
         open(rpath, "w", encoding="ascii", newline="\n", buffering=1 << 20) as fr:
        qbuf, rbuf = [], []
        for t in range(1, n_topics + 1):
            qid = str(t)
            u = rnd()
            has_run = u >= qonly
            has_qrels = u < qonly or u >= qonly + ronly

            # ---- pick docs: judged pool + unjudged retrieved docs ----------
            nq = 0
            if has_qrels:
                nq = int(gammavariate(q_shape, q_scale)) + 1
                if nq > 100:
                    nq = 100
            nr = 0
            if has_run:
                nr = int(gammavariate(r_shape, r_scale)) + 1
                if nr > run_max:
                    nr = run_max
            # number of run docs drawn from the judged docs
            nj = 0
            if nq and nr:
                nj = sum(1 for _ in range(nr) if rnd() < judged_frac)
                if nj > nq:
                    nj = nq
            n_unj = nr - nj
            # unique docnos for this topic (rejection sampling, deterministic)
            seen = {}
            docs = []
            while len(docs) < nq + n_unj:
                d = randrange(n_docs)
                if d not in seen:
                    seen[d] = True
                    docs.append("D%d" % d)

            # ---- qrels ------------------------------------------------------
            judged = []  # (key, docno, grade)
            for i in range(nq):
                x = rnd()
                g = 0
                for gi, c in enumerate(grade_cum):
                    if x < c:
                        g = GRADES[gi]
                        break
                docno = docs[i]
                qbuf.append("%s 0 %s %d\n" % (qid, docno, g))
                # noisy "system belief" used to decide what gets retrieved
                judged.append((g + gauss(0.0, 1.6), docno, g))
            n_qlines += nq

            # ---- run --------------------------------------------------------
            if nr:
                judged.sort(reverse=True)
                cand = []
                for key, docno, g in judged[:nj]:
                    cand.append((10.0 + 1.2 * key + gauss(0.0, 1.0), docno))
                for docno in docs[nq:]:
                    cand.append((10.0 + gauss(0.0, 1.6), docno))
                cand.sort(reverse=True)
                # scores with 4 decimals, strictly positive, ties injected
                scores = []
                prev = None
                for s, _ in cand:
                    if s < 0.05:
                        s = 0.05 + rnd() * 0.01
                    if prev is not None:
                        if s > prev:
                            s = prev
                        if rnd() < tie_prob:
                            s = prev
                    s = round(s, 4)
                    if prev is not None and s > prev:
                        s = prev
                    scores.append(s)
                    prev = s
                # shuffle docs inside each tie group (file order != docno order)
                names = [d for _, d in cand]
                i = 0
                while i < nr:
                    j = i + 1
                    while j < nr and scores[j] == scores[i]:
                        j += 1
                    if j - i > 1:
                        grp = names[i:j]
                        rng.shuffle(grp)
                        names[i:j] = grp
                    i = j
                for rank in range(nr):
                    rbuf.append("%s Q0 %s %d %.4f %s\n"
                                % (qid, names[rank], rank + 1, scores[rank], runid))
                n_rlines += nr

            if len(rbuf) > 20000 or len(qbuf) > 20000:
                fq.write("".join(qbuf))
                fr.write("".join(rbuf))
                qbuf.clear()
                rbuf.clear()
        fq.write("".join(qbuf))
        fr.write("".join(rbuf))

    if not args.quiet:
        qb, rb = os.path.getsize(qpath), os.path.getsize(rpath)
        sys.stderr.write(
            "topics=%d seed=%d\n%s: %d lines, %d bytes\n%s: %d lines, %d bytes\n"
            "total: %d lines, %d bytes (%.2f MB, %.2f MiB) in %.1f s\n"
            % (n_topics, args.seed, qpath, n_qlines, qb, rpath, n_rlines, rb,
               n_qlines + n_rlines, qb + rb, (qb + rb) / 1e6, (qb + rb) / 2**20,
               time.time() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
