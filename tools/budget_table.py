#!/usr/bin/env python3
"""INCRT at the user's budget against the fixed curve (issue 43; docs/results/incrt.md).

    tools/budget_table.py runs/learn_listops runs/learn_sst2 ... [--markdown]

Each sweep directory holds jobs named BUDGET__ARM__seedN (arms k1, k2, k4, k8 fixed, and
`learning`, INCRT from one head). Per family and budget, over the seeds: every fixed arm's test
accuracy (mean +- sample sd) and wall seconds; the best fixed model (highest mean); K*, the
fewest fixed heads whose mean is within max(0.02, the best's sd) of the best; INCRT's test
accuracy, heads at the end per seed, and wall seconds; and the three goals:
- acc: INCRT's mean within max(0.02, the best fixed model's sd) of the best fixed mean,
- heads: every seed ends with at most 2 x K* heads,
- wall: INCRT's mean wall at most 1.5 x the best fixed model's, and under the sweep over 1, 2, 4, 8
  heads (the sum of the fixed arms' mean walls).
Arms with unfinished seeds are shown with the count done; goals need all three seeds.
"""
import collections
import json
import math
import os
import re
import sys


def mean_sd(v):
    if not v:
        return None, None
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else 0.0
    return m, sd


def fmt(v, digits=3):
    m, sd = mean_sd(v)
    if m is None:
        return "-"
    return f"{m:.{digits}f}" if len(v) < 2 else f"{m:.{digits}f} +- {sd:.{digits}f}"


def load(sweep):
    jobs = collections.defaultdict(dict)  # (budget, arm) -> seed -> result
    for name in sorted(os.listdir(sweep)):
        m = re.fullmatch(r"(\w+?)__(\w+?)__seed(\d+)", name)
        path = os.path.join(sweep, name, "sweep_job.json")
        if not m or not os.path.exists(path):
            continue
        with open(path) as f:
            res = json.load(f).get("result")
        if not res or res.get("exit") != 0 or res.get("test_accuracy") is None:
            continue
        jobs[(m.group(1), m.group(2))][int(m.group(3))] = res
    return jobs


def rows(sweep):
    jobs = load(sweep)
    family = os.path.basename(sweep.rstrip("/")).replace("learn_", "")
    out = []
    for budget in ("short", "long"):
        fixed = {}
        for k in (1, 2, 4, 8):
            r = jobs.get((budget, f"k{k}"), {})
            if r:
                fixed[k] = ([x["test_accuracy"] for x in r.values()], [x["time_s"] for x in r.values()])
        inc = jobs.get((budget, "learning"), {})
        if not fixed and not inc:
            continue
        complete = len(fixed) == 4 and all(len(a) == 3 for a, _ in fixed.values()) and len(inc) == 3
        best_k = max(fixed, key=lambda k: mean_sd(fixed[k][0])[0]) if fixed else None
        best_m, best_sd = mean_sd(fixed[best_k][0]) if best_k else (None, None)
        tol = max(0.02, best_sd or 0.0)
        kstar = min((k for k in fixed if mean_sd(fixed[k][0])[0] >= best_m - tol), default=None) if fixed else None
        acc = [x["test_accuracy"] for x in inc.values()]
        heads = [sum(x["heads"]) for _, x in sorted(inc.items())]
        wall = [x["time_s"] for x in inc.values()]
        sweep_wall = sum(mean_sd(t)[0] for _, t in fixed.values()) if fixed else None
        goals = "-"
        if complete and acc:
            ok_acc = mean_sd(acc)[0] >= best_m - tol
            ok_heads = all(h <= 2 * kstar for h in heads)
            best_wall = mean_sd(fixed[best_k][1])[0]
            ok_wall = mean_sd(wall)[0] <= 1.5 * best_wall and mean_sd(wall)[0] < sweep_wall
            goals = " ".join(f"{n} {'yes' if ok else 'NO'}" for n, ok in
                             (("acc", ok_acc), ("heads", ok_heads), ("wall", ok_wall)))
        out.append({
            "family": family, "budget": budget,
            "fixed": " / ".join(f"{fmt(fixed[k][0])}" if k in fixed else "-" for k in (1, 2, 4, 8)),
            "best": f"{best_k} heads" if best_k else "-", "kstar": str(kstar) if kstar else "-",
            "incrt": fmt(acc) + ("" if len(acc) == 3 else f" ({len(acc)} seeds)"),
            "heads": " / ".join(str(h) for h in heads) or "-",
            "wall": (f"{fmt(wall, 1)} (best fixed {mean_sd(fixed[best_k][1])[0]:.1f}, sweep {sweep_wall:.1f})"
                     if fixed and wall else "-"),
            "goals": goals,
        })
    return out


def main(argv):
    dirs = [a for a in argv if not a.startswith("--")]
    print("| family | budget | fixed 1 / 2 / 4 / 8 heads (test) | best | K* | INCRT test | INCRT heads per seed | wall s: INCRT (best fixed, sweep 1-8) | goals |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        for r in rows(d):
            print(f"| {r['family']} | {r['budget']} | {r['fixed']} | {r['best']} | {r['kstar']} | {r['incrt']} | "
                  f"{r['heads']} | {r['wall']} | {r['goals']} |")


if __name__ == "__main__":
    main(sys.argv[1:])
