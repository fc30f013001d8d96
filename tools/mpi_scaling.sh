#!/usr/bin/env bash
# Data-parallel throughput on this machine: 1 process x 1 thread, 1 process x 2 threads and
# 2 processes x 1 thread (mpirun) at the same global batch, REPEATS times each, interleaved.
# Prints each run's ms per step (steps 5..STEPS, after the first log window) and, for the
# 2-process runs, rank 0's allreduce ms per step, then the medians.
# Usage: tools/mpi_scaling.sh [REPEATS=3] [CONFIG=configs/bench_data_parallel.yaml] [--set ...]
set -euo pipefail
cd "$(dirname "$0")/.."
repeats="${1:-3}"
config="${2:-configs/bench_data_parallel.yaml}"
shift $(( $# >= 2 ? 2 : $# ))
bin=build/bin/growformer
mpirun="$(command -v mpirun)"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT

# ms per step between the first and the last train line of RUN's metrics
ms_per_step() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
train = [r for r in rows if r["split"] == "train"]
a, b = train[0], train[-1]
print("%.1f" % (1e3 * (b["elapsed_s"] - a["elapsed_s"]) / (b["step"] - a["step"])))
PY
}

declare -A all
for r in $(seq "$repeats"); do
  for setting in 1x1 1x2 2x1; do
    run="$out/$setting-$r"
    case $setting in
      1x1) GROWFORMER_DP_TIMING=1 "$bin" train "$config" --run-dir "$run" --set threads=1 "$@" > "$run.log" 2>&1 ;;
      1x2) GROWFORMER_DP_TIMING=1 "$bin" train "$config" --run-dir "$run" --set threads=2 "$@" > "$run.log" 2>&1 ;;
      2x1) GROWFORMER_DP_TIMING=1 "$mpirun" -x GROWFORMER_DP_TIMING --oversubscribe --allow-run-as-root -np 2 "$bin" train "$config" \
             --run-dir "$run" --set threads=1 "$@" > "$run.log" 2>&1 ;;
    esac
    ms=$(ms_per_step "$run")
    ar=$(sed -n 's/.*allreduce \([0-9.e+-]*\) ms after.*/\1/p' "$run.log")
    wt=$(sed -n 's/.*waiting \([0-9.e+-]*\) ms for.*/\1/p' "$run.log")
    cpu=$(sed -n 's/.*ms wall, \([0-9.e+-]*\) ms CPU.*/\1/p' "$run.log")
    all[$setting]+="$ms "
    all[cpu$setting]+="$cpu "
    [ -n "$ar" ] && all[allreduce]+="$ar " && all[wait]+="$wt "
    echo "repeat $r $setting: $ms ms/step, rank 0 CPU $cpu ms/step${ar:+, allreduce $ar ms/step, waiting $wt ms/step}; load $(cut -d' ' -f1 /proc/loadavg)"
  done
done
grep -h "data-parallel:" "$out"/2x1-1.log || true
median() { tr ' ' '\n' | sed '/^$/d' | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
for k in 1x1 1x2 2x1 allreduce wait cpu1x1 cpu1x2 cpu2x1; do
  echo "median $k: $(echo "${all[$k]}" | median) ms/step"
done
