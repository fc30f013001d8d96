#!/usr/bin/env python3
"""Per-seed and paired tables of a sweep whose arms share seeds (docs/results/hkt.md, H1 at 512).

    tools/paired_table.py runs/h1_listops_512 hkt mha mha_wide
    tools/paired_table.py runs/h2_listops_512 --also runs/h1_listops_512 \
        --pairs hkt-hkt_dot,mha_conv-mha,hkt_L2-mha_conv hkt hkt_dot mha_conv mha hkt_L2

--also DIR (repeatable): arms of another sweep with the same seeds join the table (an arm's name
must not occur in two of the directories). --pairs A-B,...: the paired differences to print
(default: the first arm against each of the others). --seeds 2,3,4: only these seeds.

For every arm (the job name without its `__seedN` suffix): test and best validation accuracy per
seed, the step of the best validation, the step the run ended at and its wall seconds, with
mean +- sample sd; then, for the first arm against each of the others, the paired difference of
test accuracy over the seeds both have finished, with its mean, sd and a 95 % t interval.
Unfinished jobs are left out and the seeds used are named.
"""
import json
import math
import os
import re
import sys

T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def job(path):
    res = json.load(open(os.path.join(path, "sweep_job.json"))).get("result")
    if not res or res.get("exit") != 0 or res.get("test_accuracy") is None:
        return None
    vals = []
    for line in open(os.path.join(path, "metrics.jsonl")):
        m = json.loads(line)
        if m.get("split") == "val":
            vals.append(m)
    best = max(vals, key=lambda m: m["accuracy"]) if vals else None
    return {"test": res["test_accuracy"], "val": res.get("best_val_accuracy"),
            "best_step": best["step"] if best else None, "end": vals[-1]["step"] if vals else None,
            "time": res.get("time_s"), "params": res.get("params")}


def mean_sd(v):
    m = sum(v) / len(v)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1)) if len(v) > 1 else float("nan")
    return m, sd


def main(argv):
    args, roots, pairs, seeds = argv[1:], [], None, None
    pos = []
    i = 0
    while i < len(args):
        if args[i] in ("--also", "--pairs", "--seeds") and i + 1 < len(args):
            if args[i] == "--also":
                roots.append(args[i + 1])
            elif args[i] == "--seeds":
                seeds = {int(x) for x in args[i + 1].split(",")}
            else:
                pairs = [tuple(p.split("-", 1)) for p in args[i + 1].split(",")]
            i += 2
        else:
            pos.append(args[i])
            i += 1
    if len(pos) < 2:
        sys.exit(__doc__)
    roots.insert(0, pos[0])
    first, others = pos[1], pos[2:]
    arms, where = {}, {}
    for root in roots:
        for name in sorted(os.listdir(root)):
            mt = re.match(r"(.+)__seed(\d+)$", name)
            if not mt or not os.path.exists(os.path.join(root, name, "sweep_job.json")):
                continue
            arm = mt.group(1)
            if where.setdefault(arm, root) != root:
                sys.exit(f"arm {arm} is in both {where[arm]} and {root}")
            r = job(os.path.join(root, name))
            if r and (seeds is None or int(mt.group(2)) in seeds):
                arms.setdefault(arm, {})[int(mt.group(2))] = r
    print("| arm | seed | test | best val (step) | ended at | wall s |")
    print("|---|---|---|---|---|---|")
    for arm in [first] + others:
        for seed, r in sorted(arms.get(arm, {}).items()):
            print(f"| {arm} | {seed} | {r['test']:.3f} | {r['val']:.3f} ({r['best_step']}) | {r['end']} | {r['time']:.0f} |")
    print()
    print("| arm | seeds | params | test mean +- sd | best val mean +- sd | wall s mean |")
    print("|---|---|---|---|---|---|")
    for arm in [first] + others:
        rs = arms.get(arm, {})
        if not rs:
            print(f"| {arm} | none finished | | | | |")
            continue
        t, v = mean_sd([r["test"] for r in rs.values()]), mean_sd([r["val"] for r in rs.values()])
        w = sum(r["time"] for r in rs.values()) / len(rs)
        params = next(iter(rs.values()))["params"]
        print(f"| {arm} | {','.join(map(str, sorted(rs)))} | {params} | {t[0]:.3f} +- {t[1]:.3f} | {v[0]:.3f} +- {v[1]:.3f} | {w:.0f} |")
    print()
    print("| paired test difference | seeds | mean | sd | 95 % t interval |")
    print("|---|---|---|---|---|")
    for first, other in pairs or [(first, o) for o in others]:
        common = sorted(set(arms.get(first, {})) & set(arms.get(other, {})))
        d = [arms[first][s]["test"] - arms[other][s]["test"] for s in common]
        if len(d) < 2:
            print(f"| {first} - {other} | {','.join(map(str, common)) or 'none'} | "
                  f"{d[0] if d else float('nan'):+.3f} | - | - |")
            continue
        m, sd = mean_sd(d)
        h = T95[len(d) - 1] * sd / math.sqrt(len(d))
        print(f"| {first} - {other} | {','.join(map(str, common))} | {m:+.3f} | {sd:.3f} | [{m - h:+.3f}, {m + h:+.3f}] |")


if __name__ == "__main__":
    main(sys.argv)
