#!/usr/bin/env python3
"""Growth settling per group of sweep jobs (docs/results/archive/incrt.md, "Settling").

    tools/settle_table.py [--label NAME=SWEEP_DIR]... SWEEP_DIR...

A job is a finished sweep job directory (sweep_job.json present) of SWEEP_DIR; its group is its
name without the `__seedN` suffix. Per group: seeds, how many settled (no `grow` or `prune`
event after 60 % of the job's training steps), K_obs and K_pred (mean +- sample sd over
seeds), K_obs / K_pred, test accuracy, the calibration end and the growth steps per seed, and
the wall time per job. Groups without K_obs (no INCRT growth policy) are left out. Prints one
Markdown table.
"""
import glob
import json
import math
import os
import re
import sys


def mean_sd(values, fmt):
    if not values:
        return "-"
    m = sum(values) / len(values)
    if len(values) < 2:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in values) / (len(values) - 1))
    return (fmt + " +- " + fmt).format(m, sd)


def job_steps(job_dir):
    text = open(os.path.join(job_dir, "config.resolved.yaml")).read()
    m = re.search(r"\n\s+steps:\s*(\d+)", text)
    if not m:
        raise SystemExit(f"{job_dir}: no train.steps in config.resolved.yaml")
    return int(m.group(1))


def read_job(job_dir):
    result = json.load(open(os.path.join(job_dir, "sweep_job.json")))["result"]
    steps = job_steps(job_dir)
    grows, prunes, calib = [], [], []
    with open(os.path.join(job_dir, "events.jsonl")) as f:
        for line in f:
            if not line.strip():
                continue
            e = json.loads(line)
            kind = e.get("type")
            if kind == "grow":
                grows.append(int(e["step"]))
            elif kind == "prune":
                prunes.append(int(e["step"]))
            elif kind == "calibrate":
                calib.append(int(e["step"]))
    late = [s for s in grows + prunes if s > 0.6 * steps]
    return {"result": result, "steps": steps, "grows": grows, "prunes": prunes,
            "calib": calib, "settled": not late}


def main(argv):
    labels, dirs = {}, []
    i = 0
    while i < len(argv):
        if argv[i] == "--label":
            name, _, d = argv[i + 1].partition("=")
            labels[os.path.normpath(d)] = name
            dirs.append(d)
            i += 2
        else:
            dirs.append(argv[i])
            i += 1
    if not dirs:
        raise SystemExit(__doc__)
    print("| group | seeds | settled | K_obs | K_pred | K_obs / K_pred | test acc | "
          "calibration end | growth steps per seed | wall s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        groups = {}
        for job in sorted(glob.glob(os.path.join(d, "*", "sweep_job.json"))):
            job_dir = os.path.dirname(job)
            name = os.path.basename(job_dir)
            group = re.sub(r"__seed\d+$", "", name)
            groups.setdefault(group, []).append(read_job(job_dir))
        prefix = labels.get(os.path.normpath(d))
        for group, jobs in groups.items():
            res = [j["result"] for j in jobs]
            kobs = [r["K_obs"] for r in res if "K_obs" in r]
            if not kobs:
                continue  # no growth policy that reports K_obs (a fixed arm)
            kpred = [r["K_pred"] for r in res if r.get("K_pred")]
            ratio = [r["K_obs"] / r["K_pred"] for r in res if r.get("K_pred")]
            acc = [r["test_accuracy"] for r in res if "test_accuracy" in r]
            wall = [r["time_s"] for r in res if "time_s" in r]
            label = f"{prefix} {group}" if prefix else group
            print(f"| {label} | {len(jobs)} | {sum(j['settled'] for j in jobs)}/{len(jobs)} | "
                  f"{mean_sd(kobs, '{:.2f}')} | {mean_sd(kpred, '{:.2f}')} | "
                  f"{mean_sd(ratio, '{:.3f}')} | {mean_sd(acc, '{:.3f}')} | "
                  f"{' '.join(str(j['calib'][0]) if j['calib'] else '-' for j in jobs)} | "
                  f"{'; '.join(','.join(map(str, j['grows'])) or '-' for j in jobs)} | "
                  f"{mean_sd(wall, '{:.0f}')} |")


if __name__ == "__main__":
    main(sys.argv[1:])
