#!/usr/bin/env python3
"""The head-count law K* = c kappa_T^2 log(Gamma_res(0) / theta) against a theta_w sweep.

    tools/law_fit.py runs/incrt_law

Reads every finished job of the sweep directory (axis labels `t<theta_w>`): K_obs (heads at the
end), kappa_T and Gamma_res(0) from the job's `calibrate` event, the growth steps, and whether the
run hit its head cap or grew in its last 30 %. Prints one row per theta_w (mean +- sd over seeds),
then the least-squares slope of K_obs against log(1 / theta_w) over all jobs with its standard
error, beside the mean kappa_T^2 (the law's slope for c = 1) and the c it implies.
"""
import collections
import json
import math
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import heads_table  # noqa: E402  (mean +- sample sd)


def mean_sd(v, fmt="{:.2f}"):
    return heads_table.mean_sd(v, fmt)


def main(d):
    rows = collections.defaultdict(list)
    for name in sorted(os.listdir(d)):
        m = re.match(r"t([0-9.]+)__seed(\d+)$", name)
        job = os.path.join(d, name)
        if not m or not os.path.exists(os.path.join(job, "sweep_job.json")):
            continue
        with open(os.path.join(job, "sweep_job.json")) as f:
            res = json.load(f).get("result", {})
        if res.get("exit") != 0:
            continue
        theta = float(m.group(1))
        cal, grows, total = None, [], None
        with open(os.path.join(job, "events.jsonl")) as f:
            for line in f:
                e = json.loads(line)
                if e.get("type") == "calibrate" and cal is None:
                    cal = e
                if e.get("type") == "grow":
                    grows.append(int(e["step"]))
        with open(os.path.join(job, "config.resolved.yaml")) as f:
            txt = f.read()
        total = int(re.search(r"\n  steps: (\d+)", txt).group(1))
        cap = int(re.search(r"max_heads: (\d+)", txt).group(1))
        # the heads grown by the end of the run (the policy's K_obs), not those of the tested
        # best-validation model, which can be an earlier, smaller one
        k = res["K_obs"] if "K_obs" in res else sum(res.get("heads", [0]))
        rows[theta].append({
            "k": k, "acc": res.get("test_accuracy"), "kappa": cal.get("kappa_T") if cal else None,
            "gamma0": cal.get("gamma_res0") if cal else None, "grows": grows,
            "late": any(s > 0.7 * total for s in grows), "capped": k >= cap,
        })
    if not rows:
        sys.exit("no finished jobs under " + d)
    print("| theta_w | seeds | K_obs | per seed | test accuracy | kappa_T | grew in the last 30 % | at the cap |")
    print("|---|---|---|---|---|---|---|---|")
    xs, ys, kappas = [], [], []
    for theta in sorted(rows, reverse=True):
        r = rows[theta]
        print("| %g | %d | %s | %s | %s | %s | %d | %d |" % (
            theta, len(r), mean_sd([x["k"] for x in r]), " / ".join(str(x["k"]) for x in r),
            mean_sd([x["acc"] for x in r], "{:.3f}"), mean_sd([x["kappa"] for x in r]),
            sum(x["late"] for x in r), sum(x["capped"] for x in r)))
        for x in r:
            xs.append(math.log(1.0 / theta))
            ys.append(x["k"])
            if x["kappa"] is not None:
                kappas.append(x["kappa"])
    n = len(xs)
    if len(rows) < 2:
        print()
        print("one theta_w finished: no slope")
        return
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    resid = [y - (my + slope * (x - mx)) for x, y in zip(xs, ys)]
    se = math.sqrt(sum(e * e for e in resid) / max(n - 2, 1) / sxx)
    k2 = sum(k * k for k in kappas) / len(kappas) if kappas else float("nan")
    print()
    print("slope dK_obs / dlog(1/theta_w) = %.3f +- %.3f (%d jobs); mean kappa_T^2 = %.1f; "
          "implied c = %.4f" % (slope, se, n, k2, slope / k2 if k2 == k2 and k2 > 0 else float("nan")))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
