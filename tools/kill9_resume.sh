#!/usr/bin/env bash
# Crash safety: kill -9 a tiny training run at random moments (training steps, validation,
# checkpoint writes) KILLS times, continuing it each time with `growformer resume` (or `train`
# again when it died before writing its configuration), and checks that every run ends with
# exactly the metrics of an uninterrupted run. A few minutes on 2 cores.
#   tools/kill9_resume.sh [KILLS (50)] [PROGRAM (build/bin/growformer)]
set -euo pipefail
kills=${1:-50}
bin=$(realpath "${2:-build/bin/growformer}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/tiny.yaml" <<'EOF'
name: kill9
seed: 5
threads: 1
data: {plugin: listops, train_size: 256, val_size: 64, test_size: 64, min_length: 4,
       max_length: 24, max_depth: 3, max_args: 4}
model: {d_model: 16, layers: 1, max_len: 32, dropout: 0.1, attention: {plugin: mha, heads: 2}}
optimizer: {plugin: adamw, lr: 0.003}
train: {steps: 60, batch_size: 16, warmup: 5, eval_every: 10, log_every: 5, check_every: 10,
        checkpoint_every: 5}
EOF
metrics() {  # metrics.jsonl without the timing fields
  python3 -c 'import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l); j.pop("tokens_per_s",None); j.pop("elapsed_s",None); print(json.dumps(j,sort_keys=True))' "$1"
}
t0=$(date +%s%N)
"$bin" train "$work/tiny.yaml" --run-dir "$work/ref" --quiet > /dev/null
span_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
metrics "$work/ref/metrics.jsonl" > "$work/ref.txt"
echo "uninterrupted run: ${span_ms} ms, $(wc -l < "$work/ref.txt") metric lines"

done_kills=0 runs=0 bad=0 resumes=0 retrains=0
run="$work/run"
while (( done_kills < kills )); do
  if [[ -f "$run/config.resolved.yaml" || -f "$run/checkpoints/last.safetensors" ]]; then
    cmd=(resume "$run" --quiet); resumes=$((resumes + 1))
  else
    cmd=(train "$work/tiny.yaml" --run-dir "$run" --quiet); retrains=$((retrains + 1))
  fi
  "$bin" "${cmd[@]}" > "$work/out.txt" 2>&1 &
  pid=$!
  delay_ms=$(( RANDOM % (span_ms + span_ms / 5 + 1) ))
  sleep "$(printf '%d.%03d' $((delay_ms / 1000)) $((delay_ms % 1000)))"
  if kill -9 "$pid" 2>/dev/null; then
    wait "$pid" 2>/dev/null || true
    done_kills=$((done_kills + 1))
    continue
  fi
  status=0
  wait "$pid" || status=$?
  if (( status != 0 )); then
    echo "FAIL: ${cmd[*]} exited $status:"; cat "$work/out.txt"; exit 1
  fi
  runs=$((runs + 1))
  if ! cmp -s <(metrics "$run/metrics.jsonl") "$work/ref.txt"; then
    bad=$((bad + 1)); echo "FAIL: run $runs ended with different metrics"
    diff <(metrics "$run/metrics.jsonl") "$work/ref.txt" | head -5
  fi
  rm -rf "$run"
done
# finish the last interrupted run
while true; do
  if [[ -f "$run/config.resolved.yaml" || -f "$run/checkpoints/last.safetensors" ]]; then
    "$bin" resume "$run" --quiet > "$work/out.txt" 2>&1 || { cat "$work/out.txt"; exit 1; }
  else
    rm -rf "$run"; "$bin" train "$work/tiny.yaml" --run-dir "$run" --quiet > /dev/null
  fi
  break
done
runs=$((runs + 1))
cmp -s <(metrics "$run/metrics.jsonl") "$work/ref.txt" || { bad=$((bad + 1)); echo "FAIL: last run differs"; }
leftover=$(find "$work" -name '*.tmp-*' | wc -l)
echo "$done_kills kills, $resumes resumes, $retrains fresh starts, $runs finished runs, $bad with different metrics, $leftover temporary files left"
(( bad == 0 ))
