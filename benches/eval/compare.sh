#!/usr/bin/env bash
# Side-by-side timing of `rankpulse eval` against trec_eval 10.0 and ranx on
# the generated 10k- and 100k-topic pairs, in one run, with the outputs
# compared byte for byte.
#
#   TREC_EVAL=/path/to/trec_eval [PY=/path/to/venv/bin/python] benches/eval/compare.sh [SIZES...]
#
# SIZES default to "10000 100000". Data is generated (seed 42) into
# $BENCH_DIR (default target/bench-eval) when missing. PY must have ranx
# installed (pip install ranx); without PY the ranx column is skipped. The
# trec_eval binary is not built by this script: pass one built from
# usnistgov/trec_eval at its 10.0 release (commit f425365).
#
# Timings are wall clock: rankpulse is the median of 5 runs, trec_eval the
# median of 3 runs at 10k and one run at 100k (about 70 s), ranx one fresh
# process (its own load+evaluate timer, numba cache warm after a first run).
set -euo pipefail
cd "$(dirname "$0")/../.."
SIZES=${*:-10000 100000}
BENCH_DIR=${BENCH_DIR:-target/bench-eval}
TREC_EVAL=${TREC_EVAL:?set TREC_EVAL to a trec_eval 10.0 binary}
PY=${PY:-}
MEASURES=(-m map -m recip_rank -m P.5,10 -m recall.10,100 -m ndcg -m ndcg_cut.10)
mkdir -p "$BENCH_DIR"
cargo build --release --quiet
RP=target/release/rankpulse

wall() { # prints wall seconds of "$@" (stdout to $OUT)
  local start end
  start=$(date +%s.%N)
  "$@" >"$OUT" 2>/dev/null
  end=$(date +%s.%N)
  echo "$end - $start" | bc -l
}
median() { sort -g | awk '{a[NR]=$1} END {print (NR % 2) ? a[(NR+1)/2] : (a[NR/2] + a[NR/2+1]) / 2}'; }

echo "date: $(date -u '+%Y-%m-%dT%H:%M:%SZ')  load: $(cut -d' ' -f1-3 /proc/loadavg)  cores: $(nproc)"
printf '%-8s %12s %12s %12s %10s %10s %s\n' topics rankpulse trec_eval ranx te/rp ranx/rp identical
for n in $SIZES; do
  Q=$BENCH_DIR/qrels_$n.txt R=$BENCH_DIR/run_$n.txt
  [[ -f $Q && -f $R ]] || python3 benches/eval/gen_trec_pair.py --topics "$n" --seed 42 --out-dir "$BENCH_DIR" >/dev/null
  OUT=$BENCH_DIR/rp_$n.out
  rp=$(for _ in 1 2 3 4 5; do wall "$RP" eval -c "${MEASURES[@]}" "$Q" "$R"; done | median)
  OUT=$BENCH_DIR/te_$n.out
  reps=3; [[ $n -gt 20000 ]] && reps=1
  te=$(for _ in $(seq $reps); do wall "$TREC_EVAL" -c "${MEASURES[@]}" "$Q" "$R"; done | median)
  same=$(cmp -s "$BENCH_DIR/rp_$n.out" "$BENCH_DIR/te_$n.out" && echo yes || echo NO)
  ranx=-; ratio_ranx=-
  if [[ -n $PY ]]; then
    ranx=$("$PY" benches/eval/ranx_eval.py "$Q" "$R" 2>&1 >/dev/null | awk '/load\+evaluate/ {print $2}')
    ratio_ranx=$(echo "$ranx / $rp" | bc -l | xargs printf '%.0f')
  fi
  printf '%-8s %11.3fs %11.3fs %11ss %10.0f %10s %s\n' "$n" "$rp" "$te" "$ranx" "$(echo "$te / $rp" | bc -l)" "$ratio_ranx" "$same"
done
