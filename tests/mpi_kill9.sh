#!/usr/bin/env bash
# kill -9 of one process of a 2-process run: mpirun must end with an error (never hang), and
# the last checkpoint must stay loadable. Usage: mpi_kill9.sh MPIRUN GROWFORMER
# Run once killing rank 1, once killing rank 0 (the writer, often in the middle of a write).
set -u
mpirun="$1"
bin="$2"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
cat > "$dir/cfg.yaml" <<'YAML'
name: kill9
seed: 1
threads: 1
data: {plugin: listops, train_size: 256, val_size: 32, test_size: 32, min_length: 4, max_length: 24}
model: {d_model: 16, layers: 1, max_len: 32, attention: {plugin: mha, heads: 2}}
train: {steps: 1000000, batch_size: 16, eval_every: 0, log_every: 50, checkpoint_every: 1}
YAML

fail() { echo "FAIL: $*"; exit 1; }

for victim in 1 0; do
  run="$dir/run$victim"
  timeout 60 "$mpirun" --oversubscribe --allow-run-as-root --mca btl_vader_single_copy_mechanism none \
    -np 2 "$bin" train "$dir/cfg.yaml" \
    --run-dir "$run" -q > "$dir/out$victim.txt" 2>&1 &
  launcher=$!
  for _ in $(seq 300); do
    [ -f "$run/checkpoints/last.safetensors" ] && break
    sleep 0.1
  done
  [ -f "$run/checkpoints/last.safetensors" ] || fail "no checkpoint within 30 s"
  sleep 0.5
  target=""
  for p in $(pgrep -P "$(pgrep -P "$launcher")"); do  # timeout -> mpirun -> the ranks
    if tr '\0' '\n' < "/proc/$p/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim"; then
      target=$p
    fi
  done
  [ -n "$target" ] || fail "rank $victim's process not found among mpirun's children"
  kill -9 "$target"
  wait "$launcher"
  rc=$?
  [ "$rc" -ne 124 ] || fail "mpirun still running 60 s after rank $victim was killed (a hang)"
  [ "$rc" -ne 0 ] || fail "mpirun exited 0 after rank $victim was killed"
  echo "rank $victim killed: mpirun exited with $rc"
  "$bin" inspect "$run/checkpoints/last.safetensors" > "$dir/inspect.txt" 2>&1 ||
    fail "the last checkpoint does not load after killing rank $victim: $(cat "$dir/inspect.txt")"
  head -1 "$dir/inspect.txt"
done
echo "PASS"
