#!/usr/bin/env python3
"""Baselines for the SARS-CoV-2 WHO-variant task (issue 10, I2): how much of the label a region
of the genome carries, measured with two models that need no training schedule.

For each region (reference coordinates applied to every record as the fasta_variants plugin
does, so records with upstream deletions are shifted), and each seed's stratified 80/10/10
split (per class: shuffle, round(0.1 n) val, round(0.1 n) test, the rest train; the same
shape as the plugin's split, not the same random stream), it reports the test accuracy of
  - 1-NN: the training genome with the fewest differing nucleotides (first one on ties);
  - logistic regression on one-hot nucleotides at the sites that vary (Adam lr 1e-2, weight
    decay 1e-4, 300 full-batch steps; torch, one thread).
Usage: /usr/bin/python3 tools/genome_baselines.py [--data ../shared/data/sars-cov-2]
       [--regions first512,spike] [--seeds 1,2,3]
"""
import argparse
import collections
import gzip
import os
import random
import sys

import numpy as np

REGIONS = {  # 0-based half-open reference coordinates (spike: MN908947 21563..25384, 1-based)
    "first512": (21562, 21562 + 3 * 512),
    "spike": (21562, 25384),
    "genome": (0, 29903),
}


def read(data):
    meta = {}
    path = os.path.join(data, "metadata_2021.tsv")
    with open(path) as f:
        hdr = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(hdr, line.rstrip("\n").split("\t")))
            meta[r["strain"]] = r["who_variant"]
    seqs, name, buf = {}, None, []
    with gzip.open(os.path.join(data, "sequences_2021.fasta.gz"), "rt") as f:
        for line in f:
            if line.startswith(">"):
                if name:
                    seqs[name] = "".join(buf)
                name, buf = line[1:].split()[0], []
            else:
                buf.append(line.strip())
    if name:
        seqs[name] = "".join(buf)
    names = [n for n in seqs if n in meta]
    return names, [meta[n] for n in names], seqs


def region_matrix(names, seqs, a, b):
    X = np.zeros((len(names), b - a), dtype=np.uint8)
    for i, n in enumerate(names):
        X[i] = np.frombuffer(seqs[n][a:b].ljust(b - a, "N").encode(), dtype=np.uint8)
    return X


def split(labels, seed):
    by = collections.defaultdict(list)
    for i, l in enumerate(labels):
        by[l].append(i)
    rng = random.Random(seed)
    tr, va, te = [], [], []
    for _, idx in sorted(by.items()):
        rng.shuffle(idx)
        nv = nt = round(len(idx) * 0.1)
        va += idx[:nv]
        te += idx[nv:nv + nt]
        tr += idx[nv + nt:]
    return tr, va, te


def one_nn(X, labels, tr, te):
    Xtr = X[tr]
    ok = 0
    for i in te:
        j = tr[int(np.argmin((Xtr != X[i]).sum(1)))]
        ok += labels[j] == labels[i]
    return ok / len(te)


def logreg(X, y, tr, te, seed, classes):
    import torch
    torch.set_num_threads(1)
    var = np.where((X != X[0]).any(0))[0]
    Xv = X[:, var]
    Xt = torch.tensor(np.concatenate([(Xv == c).astype(np.float32) for c in b"ACGT"], 1))
    torch.manual_seed(seed)
    lin = torch.nn.Linear(Xt.shape[1], classes)
    opt = torch.optim.Adam(lin.parameters(), lr=1e-2, weight_decay=1e-4)
    for _ in range(300):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(lin(Xt[tr]), y[tr]).backward()
        opt.step()
    with torch.no_grad():
        return (lin(Xt[te]).argmax(1) == y[te]).float().mean().item(), len(var)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default=os.path.join(os.path.dirname(__file__), "../../shared/data/sars-cov-2"))
    ap.add_argument("--regions", default="first512,spike,genome")
    ap.add_argument("--seeds", default="1,2,3")
    args = ap.parse_args()
    if not os.path.isdir(args.data):
        sys.exit(f"genome_baselines: no data folder {args.data}")
    names, labels, seqs = read(args.data)
    classes = sorted(set(labels))
    seeds = [int(s) for s in args.seeds.split(",")]
    print(f"{len(names)} genomes, {len(classes)} classes; seeds {seeds}", flush=True)
    print("| region | nucleotides | 1-NN test accuracy | logistic regression test accuracy |")
    print("|---|---|---|---|", flush=True)
    for rn in args.regions.split(","):
        if rn not in REGIONS:
            sys.exit(f"genome_baselines: unknown region {rn!r} (one of {', '.join(REGIONS)})")
        a, b = REGIONS[rn]
        X = region_matrix(names, seqs, a, b)
        import torch
        y = torch.tensor([classes.index(l) for l in labels])
        nn, lr = [], []
        for s in seeds:
            tr, _, te = split(labels, s)
            nn.append(one_nn(X, labels, tr, te))
            lr.append(logreg(X, y, tr, te, s, len(classes))[0])
        fmt = lambda v: f"{np.mean(v):.4f} +- {np.std(v, ddof=1):.4f} ({', '.join(f'{x:.3f}' for x in v)})"
        print(f"| {rn} | {b - a} | {fmt(nn)} | {fmt(lr)} |", flush=True)


if __name__ == "__main__":
    main()
