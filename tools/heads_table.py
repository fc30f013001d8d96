#!/usr/bin/env python3
"""Required-heads tables from sweep directories (docs/results/incrt.md, "Required heads").

    tools/heads_table.py runs/heads_variants_long runs/heads_variants_long_incrt

For every arm (the job name without its `__seedN` suffix) over its seeds: test accuracy and best
validation accuracy (mean +- sample sd), the head count at the last step and that of the tested
model (the best validation checkpoint, with its step), the tested model's parameter count, the training work in head-steps (the sum over steps of the heads per block, from the
train lines of metrics.jsonl; the work of one step grows linearly with its heads, so a ratio of
head-steps is the ratio of the heads' share of the compute) and the wall seconds per job; then,
per INCRT run, its structural events (grow / prune / round_rejected / growth_stop / reopen) with
their steps. Arms whose jobs have not finished are listed with the seeds done.
"""
import collections
import json
import math
import os
import re
import sys


def mean_sd(values, fmt="{:.3f}"):
    v = [x for x in values if x is not None]
    if not v:
        return "-"
    m = sum(v) / len(v)
    if len(v) < 2:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    return (fmt + " +- " + fmt).format(m, sd)


def last_train_heads(metrics_path):
    """The heads per block of the last train line (the model at the end of training)."""
    out = None
    with open(metrics_path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == "train" and "heads" in m:
                out = m["heads"]
    return out


def tested_model(metrics_path):
    """Which model the test line evaluated ("best (step N)" or "last")."""
    out = "-"
    with open(metrics_path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") == "test":
                out = m.get("model", "-")
    return out


def head_steps(metrics_path):
    """Sum over steps of the total head count, from the train lines (logged every log_every)."""
    total, last_step, last_heads = 0.0, 0, None
    with open(metrics_path) as f:
        for line in f:
            m = json.loads(line)
            if m.get("split") != "train" or "heads" not in m:
                continue
            heads = sum(m["heads"])
            step = m["step"]
            # the heads of a logged step stand for the steps since the previous train line
            total += heads * (step - last_step)
            last_step, last_heads = step, heads
    return total


def events(path):
    out = []
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("type") in ("grow", "prune", "round_rejected", "growth_stop", "reopen"):
                out.append(e)
    return out


def describe(evs):
    parts, grows = [], collections.Counter()
    for e in evs:
        t, step = e["type"], int(e.get("step", 0))
        if t == "grow":
            grows[step] += 1
            continue
        if t == "prune" and e.get("reason") == "round_rejected":
            continue  # counted by its round_rejected event
        parts.append((step, t if t != "prune" else "prune(%s)" % e.get("reason", e.get("policy", ""))))
    parts += [(s, "grow+%d" % n) for s, n in grows.items()]
    return ", ".join("%s@%d" % (t, s) for s, t in sorted(parts))


def main(dirs):
    if not dirs:
        sys.exit(__doc__)
    arms = collections.OrderedDict()
    for d in dirs:
        for name in sorted(os.listdir(d)):
            job = os.path.join(d, name)
            rec = os.path.join(job, "sweep_job.json")
            if not os.path.exists(rec):
                continue
            with open(rec) as f:
                r = json.load(f).get("result", {})
            if r.get("exit") != 0:
                continue
            arm = re.sub(r"__seed\d+$", "", name)
            seed = int(re.search(r"__seed(\d+)$", name).group(1))
            arms.setdefault((d, arm), []).append((seed, job, r))
    print("| sweep | arm | seeds | test accuracy | best val accuracy | heads at the last step | heads of the tested model (its step) | params of the tested model | head-steps | wall s per job |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    detail = []
    for (d, arm), jobs in arms.items():
        jobs.sort()
        acc = [r.get("test_accuracy") for _, _, r in jobs]
        val = [r.get("best_val_accuracy") for _, _, r in jobs]
        heads = ["/".join(str(h) for h in r.get("heads", [])) + " (%s)" % tested_model(os.path.join(j, "metrics.jsonl")).replace("best (step ", "").rstrip(")")
                 for _, j, r in jobs]
        final = ["/".join(str(h) for h in (last_train_heads(os.path.join(j, "metrics.jsonl")) or [])) for _, j, _ in jobs]
        params = [r.get("params") for _, _, r in jobs]
        hs = [head_steps(os.path.join(j, "metrics.jsonl")) for _, j, _ in jobs]
        wall = ["%.0f" % r.get("time_s", float("nan")) for _, _, r in jobs]
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s |" % (
            os.path.basename(d.rstrip("/")), arm, len(jobs), mean_sd(acc), mean_sd(val),
            ", ".join(final), ", ".join(heads), mean_sd(params, "{:.0f}"), mean_sd(hs, "{:.0f}"), ", ".join(wall)))
        for seed, j, _ in jobs:
            evs = events(os.path.join(j, "events.jsonl"))
            if evs:
                detail.append("- %s seed %d: %s" % (arm, seed, describe(evs)))
    if detail:
        print()
        print("\n".join(detail))


if __name__ == "__main__":
    main(sys.argv[1:])
