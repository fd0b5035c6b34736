#!/usr/bin/env bash
# `rankpulse eval` beside trec_eval 10.0 per measure set, at one size, in one
# run, with the outputs compared byte for byte.
#
#   TREC_EVAL=/path/to/trec_eval benches/eval/measure_sets.sh [TOPICS] [ROUNDS]
#
# TOPICS defaults to 50000, ROUNDS to 3. The pair is generated (seed 42) into
# $BENCH_DIR (default target/bench-eval) when missing. Each round runs, for
# every measure set, rankpulse then trec_eval; the table gives the median
# wall time of each and the ratio of the medians. Sets: `-c -m all_trec`
# (every qrels measure), `-c -m ndcg_cut.10` (one cheap measure: the cost
# is reading and matching), and `-c` alone (the default, official set).
set -euo pipefail
cd "$(dirname "$0")/../.."
N=${1:-50000}
ROUNDS=${2:-3}
BENCH_DIR=${BENCH_DIR:-target/bench-eval}
TREC_EVAL=${TREC_EVAL:?set TREC_EVAL to a trec_eval 10.0 binary}
mkdir -p "$BENCH_DIR"
cargo build --release --quiet
RP=target/release/rankpulse
Q=$BENCH_DIR/qrels_$N.txt R=$BENCH_DIR/run_$N.txt
[[ -f $Q && -f $R ]] || python3 benches/eval/gen_trec_pair.py --topics "$N" --seed 42 --out-dir "$BENCH_DIR" >/dev/null

wall() { # prints wall seconds of "$@", stdout to $OUT
  local start end
  start=$(date +%s.%N)
  "$@" >"$OUT" 2>/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

SETS=("-m all_trec" "-m ndcg_cut.10" "")
NAMES=(all_trec ndcg_cut.10 default)
declare -A RPT TET
echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')  load: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)  topics: $N  rounds: $ROUNDS"
for round in $(seq "$ROUNDS"); do
  for i in "${!SETS[@]}"; do
    # shellcheck disable=SC2086  # the set is a list of flags
    OUT=$BENCH_DIR/rp_${NAMES[$i]}.out; RPT[$i]+="$(wall "$RP" eval -c ${SETS[$i]} "$Q" "$R") "
    # shellcheck disable=SC2086
    OUT=$BENCH_DIR/te_${NAMES[$i]}.out; TET[$i]+="$(wall "$TREC_EVAL" -c ${SETS[$i]} "$Q" "$R") "
  done
  echo "round $round done" >&2
done
printf '%-12s %8s %12s %12s %8s %s\n' set lines rankpulse trec_eval te/rp identical
for i in "${!SETS[@]}"; do
  rp=$(tr ' ' '\n' <<<"${RPT[$i]}" | grep . | median)
  te=$(tr ' ' '\n' <<<"${TET[$i]}" | grep . | median)
  same=$(cmp -s "$BENCH_DIR/rp_${NAMES[$i]}.out" "$BENCH_DIR/te_${NAMES[$i]}.out" && echo yes || echo NO)
  printf '%-12s %8s %11.3fs %11.3fs %8.1f %s\n' "${NAMES[$i]}" "$(wc -l <"$BENCH_DIR/te_${NAMES[$i]}.out")" "$rp" "$te" "$(echo "$te / $rp" | bc -l)" "$same"
  echo "  rankpulse rounds: ${RPT[$i]} trec_eval rounds: ${TET[$i]}"
done
