#!/usr/bin/env bash
# Bit-identity check for refactors: trains a fixed set of short runs (standard attention, INCRT
# growth and pruning with both criteria and a task switch, HKT, the baseline growth and pruning
# rules, the INCRT gate head) with one thread, and writes one digest per run: metrics.jsonl and
# events.jsonl without their wall-clock fields, and the sha256 of every checkpoint and of the
# resolved config. With a reference folder it compares the digests and exits 1 on a difference.
#
#   tools/identity_check.sh BUILD_DIR OUT_DIR [REF_OUT_DIR] [RUN ...]
#
# e.g. before a refactor: tools/identity_check.sh build /tmp/ref
#      after it:          tools/identity_check.sh build /tmp/new /tmp/ref
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:?usage: identity_check.sh BUILD_DIR OUT_DIR [REF_OUT_DIR] [RUN ...]}" && pwd)
out=${2:?usage: identity_check.sh BUILD_DIR OUT_DIR [REF_OUT_DIR] [RUN ...]}
ref=${3:-}
shift $(( $# < 3 ? $# : 3 ))
gf="$build/bin/growformer"
mkdir -p "$out"

# name | config | overrides
runs=(
  "quickstart|configs/quickstart.yaml|train.steps=150 train.eval_every=50"
  "variants|configs/incrt_synthetic_variants.yaml|train.steps=300"
  "switch_gain|configs/incrt_task_switch.yaml|train.steps=700"
  "switch_energy|configs/incrt_task_switch.yaml|train.steps=700 growth.criterion=energy"
  "hkt|configs/hkt_listops.yaml|train.steps=30 train.eval_every=15 data.max_length=128 model.max_len=128"
  "fixed_importance|configs/quickstart.yaml|train.steps=150 train.eval_every=50 train.check_every=10 model.attention.max_heads=8 growth.plugin=fixed_schedule growth.every=30 pruning.plugin=head_importance pruning.grace=20"
  "random_ablation|configs/quickstart.yaml|train.steps=150 train.eval_every=50 train.check_every=10 model.attention.max_heads=8 growth.plugin=random growth.probability=0.3 pruning.plugin=ablation pruning.grace=20 pruning.probe_every=2 pruning.max_cost=0.2"
  "gate_magnitude|configs/quickstart.yaml|train.steps=100 train.eval_every=50 train.check_every=10 model.attention.head.plugin=incrt_gate pruning.plugin=magnitude pruning.grace=20 pruning.relative=true pruning.threshold=0.9"
)

# A run's digest: its log lines with the wall-clock fields removed, and checkpoint hashes.
digest() {
  local dir=$1
  python3 - "$dir" <<'EOF'
import hashlib, json, os, re, sys
d = sys.argv[1]
clock = re.compile(r"(time|wall|elapsed|seconds|per_s|_ms$|^ms$|date|host|pid|eta)", re.I)
def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in v.items() if not clock.search(k)}
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v
for name in ("metrics.jsonl", "events.jsonl"):
    p = os.path.join(d, name)
    if not os.path.exists(p):
        print(name, "missing"); continue
    for i, line in enumerate(open(p)):
        print(name, i, json.dumps(strip(json.loads(line)), sort_keys=True))
for sub, _, files in sorted(os.walk(d)):
    for f in sorted(files):
        if f.endswith(".safetensors") or f == "config.resolved.yaml":
            p = os.path.join(sub, f)
            print("sha256", os.path.relpath(p, d), hashlib.sha256(open(p, "rb").read()).hexdigest())
EOF
}

status=0
for entry in "${runs[@]}"; do
  IFS='|' read -r name config sets <<<"$entry"
  if [ $# -gt 0 ] && [[ " $* " != *" $name "* ]]; then continue; fi
  args=()
  for s in $sets; do args+=(--set "$s"); done
  rm -rf "$out/run_$name"
  start=$(date +%s)
  (cd "$root" && "$gf" train "$config" --run-dir "$out/run_$name" --set threads=1 "${args[@]}") \
    >"$out/$name.log" 2>&1 || { echo "$name: train failed (see $out/$name.log)"; status=1; continue; }
  digest "$out/run_$name" >"$out/$name.digest"
  line="$name: $(( $(date +%s) - start )) s, $(wc -l <"$out/$name.digest") digest lines"
  if [ -n "$ref" ]; then
    if cmp -s "$ref/$name.digest" "$out/$name.digest"; then
      line="$line, identical"
    else
      line="$line, DIFFERS: diff $ref/$name.digest $out/$name.digest"
      status=1
    fi
  fi
  echo "$line"
done
exit $status
