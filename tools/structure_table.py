#!/usr/bin/env python3
"""HKT structure across seeds (spec/EXPERIMENTS.md H6) from `growformer analyze --json` output.

    for s in 1 2 3; do
      build/bin/growformer analyze RUNS/hkt__seed$s/checkpoints/best.safetensors --json > a$s.json
    done
    tools/structure_table.py a1.json a2.json a3.json

Prints Markdown tables, mean +- sd (sample sd) over the files, per block and level: the
antisymmetric share ||M_a||_F / ||M||_F of M_l = W_Q^(l) W_K^(l)T (mean over heads), the smallest
eigenvalue of the symmetric part, the fusion weight lambda_l, the score kurtosis (excess,
Pearson, and Mardia's multivariate b_2,p over heads beside its Gaussian value p (p + 2)); per
block the hybrid heads' sigmoid(beta) and the fused score matrix's Gram rank against its bound;
and, per file, whether the antisymmetric share grows with the level in every block.
"""
import json
import math
import sys


def mean_sd(values, fmt="{:.3f}"):
    v = [x for x in values if x is not None and not (isinstance(x, float) and math.isnan(x))]
    if not v:
        return "-"
    m = sum(v) / len(v)
    if len(v) < 2:
        return fmt.format(m)
    sd = math.sqrt(sum((x - m) ** 2 for x in v) / (len(v) - 1))
    return (fmt + " +- " + fmt).format(m, sd)


def hkt_blocks(doc):
    return [b["analysis"] for b in doc["blocks"] if b.get("analysis", {}).get("levels") is not None]


def main(paths):
    if not paths:
        sys.exit(__doc__)
    docs = []
    for p in paths:
        try:
            with open(p) as f:
                docs.append(json.load(f))
        except (OSError, ValueError) as e:
            sys.exit(f"{p}: not a `growformer analyze --json` output ({e})")
    runs = [hkt_blocks(d) for d in docs]
    if any(not r for r in runs):
        sys.exit("every file must hold the analysis of an hkt model (no hkt block found)")
    nblocks = min(len(r) for r in runs)
    print(f"{len(paths)} checkpoints; mean +- sd over them\n")
    print("| block | level | antisym share | min eig sym | lambda_l | excess kurtosis | Pearson kurtosis "
          "| Mardia b_2,p (Gaussian) |")
    print("|---|---|---|---|---|---|---|---|")
    for b in range(nblocks):
        levels = runs[0][b]["levels"]
        for l in range(levels):
            def pick(f):
                out = []
                for r in runs:
                    try:
                        out.append(f(r[b], l))
                    except (KeyError, IndexError, TypeError):
                        out.append(None)
                return out
            anti = pick(lambda a, l: a["bilinear"][l]["antisym_ratio_mean"])
            mine = pick(lambda a, l: a["bilinear"][l]["min_eig_sym"])
            lam = pick(lambda a, l: a["lambda"][l])
            exk = pick(lambda a, l: a["score_kurtosis"][l]["excess_kurtosis"])
            pek = pick(lambda a, l: a["score_kurtosis"][l]["pearson_kurtosis"])
            mar = pick(lambda a, l: a["score_kurtosis"][l]["mardia_kurtosis"])
            gauss = pick(lambda a, l: a["score_kurtosis"][l]["mardia_normal_expectation"])
            g = ", ".join(sorted({str(x) for x in gauss if x is not None})) or "-"
            print(f"| {b} | {l} | {mean_sd(anti)} | {mean_sd(mine)} | {mean_sd(lam)} | "
                  f"{mean_sd(exk, '{:.2f}')} | {mean_sd(pek, '{:.2f}')} | {mean_sd(mar, '{:.1f}')} ({g}) |")
    print("\n| block | sigmoid(beta) per head (mean over checkpoints) | Gram rank per head | rank bound | tokens |")
    print("|---|---|---|---|---|")
    for b in range(nblocks):
        heads = runs[0][b].get("heads", [])
        gates = []
        for h in range(len(heads)):
            vals = [r[b]["heads"][h].get("gate") for r in runs if h < len(r[b].get("heads", []))]
            gates.append(mean_sd(vals, "{:.2f}"))
        ranks = [" ".join(str(x) for x in (r[b].get("gram_rank") or {}).get("rank_per_head", []))
                 for r in runs]
        bounds = {str((r[b].get("gram_rank") or {}).get("bound", "-")) for r in runs}
        tokens = {str((r[b].get("gram_rank") or {}).get("tokens", "-")) for r in runs}
        print(f"| {b} | {'; '.join(gates) or '-'} | {' / '.join(ranks)} | {', '.join(sorted(bounds))} "
              f"| {', '.join(sorted(tokens))} |")
    print("\n| checkpoint | antisymmetric share grows with the level in every block |")
    print("|---|---|")
    for p, r in zip(paths, runs):
        grows = all(
            all(a["bilinear"][l + 1]["antisym_ratio_mean"] > a["bilinear"][l]["antisym_ratio_mean"]
                for l in range(a["levels"] - 1))
            for a in r)
        print(f"| {p} | {'yes' if grows else 'no'} |")


if __name__ == "__main__":
    main(sys.argv[1:])
