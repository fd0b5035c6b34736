#!/usr/bin/env bash
# Time the reference tools (trec_eval 10.0, ranx) on one generated pair.
#
#   benches/eval/measure_refs.sh SIZE [trec_eval|ranx|all]
#
# SIZE is the topic count used with gen_trec_pair.py (10000, 100000), the
# pair is read from $BENCH_DIR/qrels_SIZE.txt and $BENCH_DIR/run_SIZE.txt.
# Env: BENCH_DIR (default /work/scratch/bench), TREC_EVAL (default
# /work/ext/trec_eval/trec_eval), PY (default /work/scratch/venv/bin/python).
# Each measurement appends to $BENCH_DIR/timings.log: date, uptime (load),
# and /usr/bin/time -v's wall clock and max RSS.  Outputs:
#   $BENCH_DIR/te_<k>.out             trec_eval output (k = 10k, 100k, ...)
#   $BENCH_DIR/ranx_<k>_cold.out      ranx, empty numba cache (JIT compiles)
#   $BENCH_DIR/ranx_<k>_warm.out      ranx, numba cache populated by the cold run
set -euo pipefail
SIZE=${1:?size}
WHAT=${2:-all}
BENCH_DIR=${BENCH_DIR:-/work/scratch/bench}
TREC_EVAL=${TREC_EVAL:-/work/ext/trec_eval/trec_eval}
PY=${PY:-/work/scratch/venv/bin/python}
HERE=$(cd "$(dirname "$0")" && pwd)
case $SIZE in
  *000) K=$((SIZE / 1000))k ;;
  *) K=$SIZE ;;
esac
Q=$BENCH_DIR/qrels_$SIZE.txt
R=$BENCH_DIR/run_$SIZE.txt
LOG=$BENCH_DIR/timings.log
cd "$BENCH_DIR"

measure() { # name outfile cmd...
  local name=$1 out=$2; shift 2
  {
    echo "=== $name"
    echo "date:   $(date -u '+%Y-%m-%dT%H:%M:%SZ')"
    echo "before: $(uptime)"
  } >>"$LOG"
  /usr/bin/time -v -o "$BENCH_DIR/time_$name.txt" "$@" >"$out" 2>"$BENCH_DIR/stderr_$name.txt"
  {
    echo "after:  $(uptime)"
    grep -E 'Elapsed \(wall|Maximum resident|User time|System time|Percent of CPU' "$BENCH_DIR/time_$name.txt" | sed 's/^\s*/        /'
    sed 's/^/  | /' "$BENCH_DIR/stderr_$name.txt"
  } >>"$LOG"
}

if [[ $WHAT == all || $WHAT == trec_eval ]]; then
  measure "te_$K" "$BENCH_DIR/te_$K.out" \
    "$TREC_EVAL" -c -m map -m recip_rank -m P.5,10 -m recall.10,100 -m ndcg -m ndcg_cut.10 "$Q" "$R"
fi
if [[ $WHAT == all || $WHAT == ranx ]]; then
  NCD=$(mktemp -d "$BENCH_DIR/numba_cache_$K.XXXX")
  NUMBA_CACHE_DIR=$NCD measure "ranx_${K}_cold" "$BENCH_DIR/ranx_${K}_cold.out" \
    "$PY" "$HERE/ranx_eval.py" "$Q" "$R" --repeat-eval
  NUMBA_CACHE_DIR=$NCD measure "ranx_${K}_warm" "$BENCH_DIR/ranx_${K}_warm.out" \
    "$PY" "$HERE/ranx_eval.py" "$Q" "$R" --repeat-eval
  rm -rf "$NCD"
fi
