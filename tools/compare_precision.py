#!/usr/bin/env python3
"""bf16 against float32, seed by seed, from sweeps whose axis is `precision` (configs/experiments/
bf16_*.yaml): final test accuracy (mean +- sd over seeds, and whether bf16 is within
max(0.01, one sd) of float32), how far apart the validation loss curves are, and each seed's
structure decisions (growth, take-backs and prunes: step and heads) compared. The loss gap is
the largest difference of the two runs' validation losses at the same step, as a fraction of the
float32 run's first validation loss (the curve's scale: a relative gap of two losses near zero
would read large where the curves lie together).

    tools/compare_precision.py SWEEP_DIR [SWEEP_DIR ...] [--markdown]

A SWEEP_DIR holds jobs named <precision>__seed<N> (growformer sweep --out). Seeds that have not
finished in both precisions are left out and counted.
"""
import argparse
import json
import os
import re
import statistics
import sys


def lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def job(run):
    """Test accuracy, validation losses by step and the structure decisions of the run RUN."""
    metrics = lines(os.path.join(run, "metrics.jsonl"))
    test = [m for m in metrics if m.get("split") == "test"]
    if not test:
        return None
    val = {m["step"]: m["loss"] for m in metrics if m.get("split") == "val"}
    decisions = []
    for e in lines(os.path.join(run, "events.jsonl")):
        if e.get("type") in ("grow", "prune", "round_taken_back", "round_kept", "take_back"):
            heads = e.get("heads")
            decisions.append((int(e["step"]), e["type"], tuple(int(h) for h in heads) if heads else None))
    return {"test": test[-1]["accuracy"], "heads": test[-1].get("heads"), "val": val,
            "decisions": decisions}


def sweep(d):
    """{seed: {precision: job}} of the finished jobs in D."""
    out = {}
    for name in sorted(os.listdir(d)):
        m = re.fullmatch(r"(float32|bf16)__seed(\d+)", name)
        if m and os.path.isfile(os.path.join(d, name, "metrics.jsonl")):
            j = job(os.path.join(d, name))
            if j:
                out.setdefault(int(m.group(2)), {})[m.group(1)] = j
    return out


def mean_sd(xs):
    return statistics.mean(xs), (statistics.stdev(xs) if len(xs) > 1 else float("nan"))


def first_difference(a, b):
    """'same' or the first decision where two decision lists part."""
    for x, y in zip(a, b):
        if x != y:
            return f"differ from step {min(x[0], y[0])}"
    if len(a) != len(b):
        return f"the first {min(len(a), len(b))} the same, then only one run has more"
    return "same"


def compare(d):
    seeds = sweep(d)
    paired = {s: v for s, v in seeds.items() if "float32" in v and "bf16" in v}
    if not paired:
        return None
    f32 = [paired[s]["float32"]["test"] for s in sorted(paired)]
    b16 = [paired[s]["bf16"]["test"] for s in sorted(paired)]
    (mf, sf), (mb, sb) = mean_sd(f32), mean_sd(b16)
    tol = max(0.01, sf if sf == sf else 0.0)
    gap = 0.0
    per_seed = []
    for s in sorted(paired):
        a, b = paired[s]["float32"], paired[s]["bf16"]
        common = sorted(set(a["val"]) & set(b["val"]))
        # the gap at each validation, against the curve's scale (float32's first validation loss)
        scale = max(abs(a["val"][common[0]]), 1e-12) if common else 1.0
        gap = max([gap] + [abs(a["val"][k] - b["val"][k]) / scale for k in common])
        per_seed.append(f"seed {s}: {a['test']:.4f} / {b['test']:.4f}, heads {a['heads']} / {b['heads']}, "
                        f"decisions {first_difference(a['decisions'], b['decisions'])} "
                        f"({len(a['decisions'])} / {len(b['decisions'])})")
    return {"sweep": os.path.basename(os.path.normpath(d)), "seeds": len(paired),
            "unpaired": len(seeds) - len(paired), "float32": (mf, sf), "bf16": (mb, sb),
            "within": abs(mb - mf) <= tol, "tolerance": tol, "max_val_loss_gap": gap,
            "per_seed": per_seed}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--markdown", action="store_true", help="one table row per sweep, then the seeds")
    a = ap.parse_args()
    rows = [r for r in (compare(d) for d in a.sweeps) if r]
    if not rows:
        print("compare_precision: no seed finished in both precisions", file=sys.stderr)
        return 1
    if a.markdown:
        print("| sweep | seeds | float32 test | bf16 test | bf16 within max(0.01, sd) | "
              "largest gap of the validation losses (of float32's first) |")
        print("|---|---|---|---|---|---|")
    for r in rows:
        (mf, sf), (mb, sb) = r["float32"], r["bf16"]
        if a.markdown:
            print(f"| {r['sweep']} | {r['seeds']} | {mf:.4f} +- {sf:.4f} | {mb:.4f} +- {sb:.4f} | "
                  f"{'yes' if r['within'] else 'NO'} ({mb - mf:+.4f}, tolerance {r['tolerance']:.4f}) | "
                  f"{100 * r['max_val_loss_gap']:.1f} % |")
        else:
            print(f"{r['sweep']}: {r['seeds']} seeds ({r['unpaired']} unpaired): float32 {mf:.4f} +- {sf:.4f}, "
                  f"bf16 {mb:.4f} +- {sb:.4f}: {'within' if r['within'] else 'NOT within'} "
                  f"{r['tolerance']:.4f}; validation losses apart by at most {100 * r['max_val_loss_gap']:.1f} % of float32's first")
    for r in rows:
        print("")
        print(f"{r['sweep']} (float32 / bf16):")
        for line in r["per_seed"]:
            print(f"- {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
