#!/usr/bin/python3
"""Scatter of INCRT's observed head count K_obs against its predicted K_pred, one point per run,
from the `summary` event each finished run writes to events.jsonl (growth.K_obs, growth.K_pred).

  tools/kobs_kpred_plot.py --out docs/figures/incrt_kobs_kpred.svg \
      "synthetic, 3 clades=runs/sweep-incrt_kpred/c3__*" \
      "SARS-CoV-2 (I2)=runs/sweep-i2_sars_cov_2/incrt__seed*"

Each argument is LABEL=GLOB of run directories. Needs gnuplot (Debian gnuplot-nox).
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile


def summary(run_dir):
    path = os.path.join(run_dir, "events.jsonl")
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                ev = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{n}: not JSON ({e.msg})")
            if ev.get("type") == "summary":
                if "growth.K_obs" not in ev or "growth.K_pred" not in ev:
                    sys.exit(f"{path}:{n}: summary without growth.K_obs / growth.K_pred "
                             "(not an incrt_geometric run)")
                return float(ev["growth.K_pred"]), float(ev["growth.K_obs"])
    sys.exit(f"{path}: no summary event (the run did not finish)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("groups", nargs="+", metavar="LABEL=GLOB")
    ap.add_argument("--out", required=True, help="SVG to write")
    args = ap.parse_args()
    groups = []
    for g in args.groups:
        if "=" not in g:
            sys.exit(f"'{g}': expected LABEL=GLOB")
        label, pattern = g.split("=", 1)
        dirs = sorted(d for d in glob.glob(pattern) if os.path.isdir(d))
        if not dirs:
            sys.exit(f"'{pattern}': no run directory matches")
        groups.append((label, [summary(d) for d in dirs]))
    with tempfile.TemporaryDirectory() as tmp:
        plot(groups, args.out, tmp)
    for label, pts in groups:
        ratios = [ko / kp for kp, ko in pts]
        print(f"{label}: {len(pts)} runs, K_obs/K_pred {min(ratios):.3f}..{max(ratios):.3f}")


def plot(groups, out, tmp):
    plots = ['x with lines dt 2 lc rgb "#888888" title "K_obs = K_pred (the paper\'s law)"']
    marks = [7, 5, 9, 13, 11, 15]
    for i, (label, pts) in enumerate(groups):
        # a small vertical offset per group keeps equal head counts apart
        off = (i - (len(groups) - 1) / 2) * 0.06
        dat = os.path.join(tmp, f"g{i}.dat")
        with open(dat, "w") as f:
            for kp, ko in pts:
                f.write(f"{kp} {ko + off}\n")
        plots.append(f'"{dat}" u 1:2 w p pt {marks[i % len(marks)]} ps 1 title "{label}"')
    kmax = max(ko for _, pts in groups for _, ko in pts)
    xs = [kp for _, pts in groups for kp, _ in pts]
    script = "\n".join([
        'set terminal svg size 640,420 dynamic font "sans,11"',
        f'set output "{out}"',
        "set termoption noenhanced",
        "set logscale x",
        f"set xrange [{min(xs) / 1.5:.3g}:{max(xs) * 1.5:.3g}]",
        f"set yrange [0:{max(8, kmax + 2):.0f}]",
        'set xlabel "K_pred = kappa_T^2 log(1 + Gamma_res(0)/floor)  (log scale)"',
        'set ylabel "K_obs (heads at the end)"',
        "set key top right",
        "set grid",
        "plot " + ", \\\n     ".join(plots),
    ])
    gp = os.path.join(tmp, "plot.gp")
    with open(gp, "w") as f:
        f.write(script + "\n")
    subprocess.run(["gnuplot", gp], check=True)


if __name__ == "__main__":
    main()
