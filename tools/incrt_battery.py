#!/usr/bin/env python3
"""The INCRT battery (issue 59): families with a known fixed-head curve, INCRT against it.

    tools/incrt_battery.py run BIN [--out runs/battery] [--only NAME,...]
    tools/incrt_battery.py table SWEEP_DIR... [--heldout NAME,...]
    tools/incrt_battery.py verdicts SWEEP_DIR...

`run` runs every sweep of configs/experiments/battery/ (or those named) with BIN (`growformer`),
one family at a time, as two one-thread shards under nice; a rerun skips the jobs that finished.
Each family's jobs are ARM__seedN: fixed arms kN (N heads of equal width, d_k 16) and INCRT arms
(any other name: INCRT from one head).

`table` prints one markdown row per family and INCRT arm, over the seeds: the fixed curve's test
accuracy (mean +- sample sd), the best fixed model (highest mean), K* (the fewest fixed heads
within max(0.02, the best's sd) of the best), INCRT's test accuracy, its heads per seed, the
wall ratio (INCRT's mean wall seconds over the best fixed model's), what its decisions cost
(decision_cost.json: validation probes and policy checks over the training steps' time; mean
over seeds) and the goals:
- acc: INCRT's mean within max(0.02, the best fixed model's sd) of the best fixed mean,
- heads: every seed ends with at most 2 x K* heads,
- wall: INCRT's mean wall at most 1.2 x the best fixed model's,
- cost: the decisions at most 10 % of the training time (mean over seeds).
Goals need every arm's three seeds; a row with fewer says how many finished.

`verdicts` prints one markdown row per family and INCRT arm: each seed's test accuracy and heads,
and the growth rule's decisions from its events.jsonl (grown rounds: step, evidence and heads
after; verdicts: step, event, evidence and stage), in order.
"""
import json
import math
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BATTERY = os.path.join(HERE, "..", "configs", "experiments", "battery")
sys.path.insert(0, HERE)
from budget_table import fmt, mean_sd  # noqa: E402  (the same statistics as issue 43's table)


def load(sweep):
    """arm -> seed -> (result, decision share or None) of the finished jobs of SWEEP."""
    jobs = {}
    for name in sorted(os.listdir(sweep)):
        m = re.fullmatch(r"(\w+?)__seed(\d+)", name)
        path = os.path.join(sweep, name, "sweep_job.json")
        if not m or not os.path.exists(path):
            continue
        with open(path) as f:
            res = json.load(f).get("result")
        if not res or res.get("exit") != 0 or res.get("test_accuracy") is None:
            continue
        cost = None
        cpath = os.path.join(sweep, name, "run", "decision_cost.json")
        if not os.path.exists(cpath):
            cpath = os.path.join(sweep, name, "decision_cost.json")
        if os.path.exists(cpath):
            with open(cpath) as f:
                cost = json.load(f).get("decision_share")
        jobs.setdefault(m.group(1), {})[int(m.group(2))] = (res, cost)
    return jobs


def rows(sweep, heldout):
    jobs = load(sweep)
    family = os.path.basename(sweep.rstrip("/"))
    fixed = {}
    for arm, seeds in jobs.items():
        m = re.fullmatch(r"k(\d+)", arm)
        if m:
            fixed[int(m.group(1))] = ([r["test_accuracy"] for r, _ in seeds.values()],
                                      [r["time_s"] for r, _ in seeds.values()])
    out = []
    if not fixed:
        return out
    best_k = max(fixed, key=lambda k: mean_sd(fixed[k][0])[0])
    best_m, best_sd = mean_sd(fixed[best_k][0])
    tol = max(0.02, best_sd or 0.0)
    kstar = min(k for k in fixed if mean_sd(fixed[k][0])[0] >= best_m - tol)
    fixed_done = all(len(fixed[k][0]) == 3 for k in fixed)
    for arm in sorted(a for a in jobs if not re.fullmatch(r"k\d+", a)):
        seeds = jobs[arm]
        acc = [r["test_accuracy"] for r, _ in seeds.values()]
        heads = [sum(r["heads"]) for _, (r, _) in sorted(seeds.items())]
        wall = [r["time_s"] for r, _ in seeds.values()]
        costs = [c for _, c in seeds.values() if c is not None]
        best_wall = mean_sd(fixed[best_k][1])[0]
        ratio = mean_sd(wall)[0] / best_wall if wall and best_wall else None
        goals = "-"
        if fixed_done and len(acc) == 3:
            checks = (("acc", mean_sd(acc)[0] >= best_m - tol),
                      ("heads", all(h <= 2 * kstar for h in heads)),
                      ("wall", ratio is not None and ratio <= 1.2),
                      ("cost", None if not costs else mean_sd(costs)[0] <= 0.10))
            goals = ", ".join(f"{n} {'n/a' if ok is None else 'yes' if ok else 'NO'}"
                              for n, ok in checks)
        name = f"**{family}**" if family in heldout else family
        out.append("| " + " | ".join([
            name + ("" if arm == "learning" else f" ({arm})"),
            " / ".join(f"{k}: {fmt(fixed[k][0])}" for k in sorted(fixed)),
            f"{best_k} heads", str(kstar),
            fmt(acc) + ("" if len(acc) == 3 else f" ({len(acc)} seeds)"),
            " / ".join(str(h) for h in heads) or "-",
            f"{ratio:.2f} ({mean_sd(wall)[0]:.0f} / {best_wall:.0f} s)" if ratio else "-",
            f"{100 * mean_sd(costs)[0]:.1f} %" if costs else "-",
            goals]) + " |")
    return out


def decisions(run_dir):
    """The growth rule's decisions in RUN_DIR/events.jsonl, in words, in order."""
    out, last_grow = [], None
    path = os.path.join(run_dir, "events.jsonl")
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            t, step = e.get("type"), int(e.get("step", -1))
            if t == "grow" and e.get("policy") == "growth":
                key = (step, e.get("evidence") or "onset")
                if last_grow and last_grow[0] == key:
                    last_grow[1] = sum(e.get("heads", []))
                    out[-1] = f"{key[0]} grow ({key[1]}) -> {last_grow[1]}"
                else:
                    last_grow = [key, sum(e.get("heads", []))]
                    out.append(f"{key[0]} grow ({key[1]}) -> {last_grow[1]}")
            elif t == "growth_stop":
                out.append(f"{step} stop")
            elif t in ("round_kept", "round_rejected"):
                verdict = "kept" if t == "round_kept" else "taken back"
                out.append(f"{step} {verdict} `{e.get('evidence', '')}`"
                           + (" (review)" if e.get("stage") == "review" else ""))
    return out


def verdicts(argv):
    print("| family | seeds: test (heads) | decisions per seed |")
    print("|---|---|---|")
    for sweep in argv:
        family = os.path.basename(sweep.rstrip("/"))
        for arm, seeds in sorted(load(sweep).items()):
            if re.fullmatch(r"k\d+", arm):
                continue
            accs = " / ".join(f"{r['test_accuracy']:.3f} ({sum(r['heads'])})"
                              for _, (r, _) in sorted(seeds.items()))
            per = []
            for seed in sorted(seeds):
                job = os.path.join(sweep, f"{arm}__seed{seed}")
                run_dir = os.path.join(job, "run") if os.path.isdir(os.path.join(job, "run")) \
                    else job
                per.append(f"s{seed}: " + ("; ".join(decisions(run_dir)) or "none"))
            name = family + ("" if arm == "learning" else f" ({arm})")
            print(f"| {name} | {accs} | {'<br>'.join(per)} |")


def run(argv):
    if not argv:
        sys.exit("usage: incrt_battery.py run BIN [--out DIR] [--only NAME,...]")
    binary, out, only = argv[0], "runs/battery", None
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        sys.exit(f"incrt_battery.py run: {binary}: not an executable file (the growformer binary "
                 "comes first: run BIN [--out DIR] [--only NAME,...])")
    rest = argv[1:]
    while rest:
        if len(rest) < 2:
            sys.exit(f"incrt_battery.py run: {rest[0]} needs a value")
        flag, value, rest = rest[0], rest[1], rest[2:]
        if flag == "--out":
            out = value
        elif flag == "--only":
            only = set(value.split(","))
        else:
            sys.exit(f"incrt_battery.py run: unknown option {flag}")
    families = {f[:-5] for f in os.listdir(BATTERY) if f.endswith(".yaml")}
    if only and only - families:
        sys.exit(f"incrt_battery.py run: no family {', '.join(sorted(only - families))} in "
                 f"{BATTERY}")
    os.makedirs(out, exist_ok=True)
    failed = []
    for f in sorted(os.listdir(BATTERY)):
        name = f[:-5]
        if not f.endswith(".yaml") or (only and name not in only):
            continue
        procs = []
        for i in range(2):  # two one-thread shards of the family's jobs, logs appended
            log = open(os.path.join(out, f"{name}_{i}.log"), "a")
            procs.append(subprocess.Popen(
                ["nice", binary, "sweep", os.path.join(BATTERY, f), "--set", "threads=1", "--out",
                 os.path.join(out, name), "--shard", f"{i}/2", "-q"],
                stdout=log, stderr=subprocess.STDOUT))
            log.close()
        codes = [p.wait() for p in procs]
        if any(codes):
            failed.append(name)
        print(f"{name}: {'done' if not any(codes) else 'a shard failed (see its log)'}",
              flush=True)
    if failed:
        sys.exit(f"incrt_battery.py run: shards failed in {', '.join(failed)}")


def table(argv):
    heldout = set()
    dirs = []
    while argv:
        if argv[0] == "--heldout":
            heldout = set(argv[1].split(","))
            argv = argv[2:]
        else:
            dirs.append(argv[0])
            argv = argv[1:]
    print("| family | fixed heads: test | best | K* | INCRT test | INCRT heads per seed "
          "| wall: INCRT / best fixed | decisions | goals |")
    print("|---|---|---|---|---|---|---|---|---|")
    for d in dirs:
        for r in rows(d, heldout):
            print(r)


if __name__ == "__main__":
    commands = {"run": run, "table": table, "verdicts": verdicts}
    if len(sys.argv) < 2 or sys.argv[1] not in commands:
        sys.exit(__doc__)
    commands[sys.argv[1]](sys.argv[2:])
