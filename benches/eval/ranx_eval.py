#!/usr/bin/env python3
"""Reference timing/values with ranx for a TREC qrels + run pair.

Usage:
    python ranx_eval.py QRELS RUN [--repeat-eval] [--compare TREC_EVAL_OUT]
                                  [--trec-ties] [--threads N]

Loads the pair from the files with ranx (Qrels.from_file / Run.from_file,
kind="trec") and evaluates the metrics equivalent to

    trec_eval -c -m map -m recip_rank -m P.5,10 -m recall.10,100 \
              -m ndcg -m ndcg_cut.10 QRELS RUN

(-c  <=>  make_comparable=True: average over every qrels topic, a topic
without run lines scores 0, run topics without qrels are dropped).

Prints, on stdout, the mean values in trec_eval's layout (measure, "all",
value with 4 decimals) and, on stderr, wall times of: import, load, first
evaluate (includes numba JIT compilation, or loading it from numba's on-disk
cache when that cache is warm), load+evaluate, and optionally a second
evaluate call in the same process (--repeat-eval; JIT already done).

ranx's numba functions use cache=True: the very first run on a machine
compiles and writes the cache, later fresh processes load it.  To measure a
cold first run set NUMBA_CACHE_DIR to an empty directory.

--trec-ties (value comparison only, not for timing): after loading, re-score
every topic so that ties are broken like trec_eval does (score descending,
then docno descending, strcmp order).  ranx otherwise orders tied docs by
numba's argsort (file order for short lists, arbitrary for long ones).

--compare FILE: read trec_eval's output FILE and print each measure's
difference at 4 decimals.
"""

import argparse
import os
import sys
import time

T_START = time.perf_counter()

# ranx metric name  ->  trec_eval measure name
METRICS = [
    ("map", "map"),
    ("mrr", "recip_rank"),
    ("precision@5", "P_5"),
    ("precision@10", "P_10"),
    ("recall@10", "recall_10"),
    ("recall@100", "recall_100"),
    ("ndcg", "ndcg"),
    ("ndcg@10", "ndcg_cut_10"),
]


def log(msg):
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


def trec_tie_break(run):
    """Return a new ranx.Run whose scores encode trec_eval's tie-break."""
    from ranx import Run

    d = {}
    for q_id in run.keys():
        docs = dict(run[q_id])
        # trec_eval: sim descending, then strcmp(docno) descending
        order = sorted(docs.items(),
                       key=lambda kv: (kv[1], kv[0].encode()), reverse=True)
        n = len(order)
        d[q_id] = {doc: float(n - i) for i, (doc, _) in enumerate(order)}
    return Run(d, name=run.name)


def read_trec_eval(path):
    vals = {}
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 3 and parts[1] == "all":
                try:
                    vals[parts[0]] = float(parts[2])
                except ValueError:
                    pass
    return vals


def main():
    ap = argparse.ArgumentParser(description="ranx reference evaluation")
    ap.add_argument("qrels")
    ap.add_argument("run")
    ap.add_argument("--repeat-eval", action="store_true",
                    help="time a second evaluate call in the same process")
    ap.add_argument("--compare", metavar="TREC_EVAL_OUT")
    ap.add_argument("--trec-ties", action="store_true")
    ap.add_argument("--threads", type=int, default=0,
                    help="numba threads (0 = all cores, ranx default)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    import numba
    from ranx import Qrels, Run, evaluate
    t_import = time.perf_counter() - t0
    from importlib.metadata import version
    log("ranx %s numba %s numba_threads=%d NUMBA_CACHE_DIR=%s"
        % (version("ranx"), numba.__version__, numba.config.NUMBA_NUM_THREADS,
           os.environ.get("NUMBA_CACHE_DIR", "(default: __pycache__)")))

    metrics = [m for m, _ in METRICS]

    t1 = time.perf_counter()
    qrels = Qrels.from_file(args.qrels, kind="trec")
    run = Run.from_file(args.run, kind="trec")
    t_load = time.perf_counter() - t1

    if args.trec_ties:
        t = time.perf_counter()
        run = trec_tie_break(run)
        log("trec tie-break re-scoring: %.3f s (not part of timings)"
            % (time.perf_counter() - t))

    t2 = time.perf_counter()
    res = evaluate(qrels, run, metrics, make_comparable=True,
                   threads=args.threads)
    t_eval = time.perf_counter() - t2

    log("topics: qrels=%d run(after make_comparable)=%d"
        % (len(qrels), len(run)))
    log("import ranx:            %8.3f s" % t_import)
    log("load (qrels+run):       %8.3f s" % t_load)
    log("evaluate (1st call):    %8.3f s" % t_eval)
    log("load+evaluate:          %8.3f s" % (t_load + t_eval))

    if args.repeat_eval:
        t3 = time.perf_counter()
        res2 = evaluate(qrels, run, metrics, make_comparable=True,
                        threads=args.threads)
        t_eval2 = time.perf_counter() - t3
        log("evaluate (2nd call):    %8.3f s" % t_eval2)
        # ranx re-sorts the (already sorted) run on every evaluate call; numba's
        # argsort is not stable for lists > 15 docs, so tied docs can be
        # reordered and the values can move slightly between calls.
        for m, te_name in METRICS:
            if res[m] != res2[m]:
                log("  2nd call %s differs: %.6f vs %.6f (tie reordering)"
                    % (te_name, res2[m], res[m]))

    log("process total so far:   %8.3f s" % (time.perf_counter() - T_START))

    for m, te_name in METRICS:
        print("%-22s\tall\t%.4f" % (te_name, res[m]))

    if args.compare:
        te = read_trec_eval(args.compare)
        log("\nmeasure         trec_eval   ranx      diff(4dp)")
        n_diff = 0
        for m, te_name in METRICS:
            tv = te.get(te_name)
            rv = float("%.4f" % res[m])
            if tv is None:
                log("%-14s  (missing)  %.4f" % (te_name, rv))
                continue
            d = rv - tv
            n_diff += abs(d) > 1e-9
            log("%-14s  %.4f     %.4f    %+.4f%s"
                % (te_name, tv, rv, d, "" if abs(d) < 1e-9 else "  <-- differs"))
        log("%d of %d measures differ at 4 decimals" % (n_diff, len(METRICS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
