#!/usr/bin/env python3
"""Throughput where users feel it: `growformer predict` and `growformer eval` in sequences per
second at batch 64, beside the training step's rate on the same model (`growformer bench` at
batch 64 and the data's sequence length), on SST-2 (text_tsv) and on SARS-CoV-2 genomes
(fasta_variants), with each process's peak memory on a short and a long input (predict reads
its input record by record: the peak should not grow with the input).

    tools/throughput.py BUILD/bin/growformer OUT [--threads 2] [--only sst2|genomes]
                        [--precision float32|bf16] [--print]

The data are read where they lie (../shared/data from the project root, never copied); where
that folder is absent the script writes generated data of the same shape into OUT (SST-2: the
same row count, word-length distribution and two labels; genomes: 1,952 random genomes of
29,903 bases with a class motif in the S-gene region, labelled in 11 classes) and the report
says which it used. Each data set: a model of the bench's width (d 64, 2 layers, 4 heads) is
trained 30 steps at batch 64 (for a checkpoint; its accuracy is not the point), then timed:
  train    growformer bench RUN.yaml --batch 64 --seq MAX_LEN --json (median step: 64 / s)
  eval     growformer eval CKPT --split all --json (batches of 64; wall time of the process)
  predict  growformer predict CKPT INPUT --batch-size 64 (short input, then long input)
with the peak RSS of each process (wait4). --precision bf16 times the same float32-trained
checkpoint with bf16 products (bench --set precision=bf16, eval and predict --precision bf16).
One JSON per --threads and --precision value in OUT (a set run again replaces its row), then a
Markdown table. About 3 minutes with the real data on a quiet
machine of 2 vCPUs (about 4 at --threads 1).
"""
import argparse
import gzip
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHARED = (ROOT / ".." / "shared" / "data").resolve()
BATCH = 64


def timed(cmd, stdout=subprocess.DEVNULL):
    """Runs CMD; returns (wall seconds, peak RSS MB, stdout text or None)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE if stdout is None else stdout,
                         stderr=subprocess.PIPE, text=True)
    out = p.stdout.read() if stdout is None else None
    err = p.stderr.read()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.time() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))}: exit {p.returncode}\n{err[-2000:]}")
    return wall, ru.ru_maxrss / 1024.0, out


def count_rows(path, fasta=False):
    op = gzip.open if str(path).endswith(".gz") else open
    with op(path, "rt") as f:
        if fasta:
            return sum(1 for line in f if line.startswith(">"))
        return sum(1 for _ in f) - 1  # the header


# ---- the data: real where present, else generated of the same shape ----------------------

def sst2_data(out):
    d = SHARED / "sst2"
    if (d / "train.tsv.gz").exists() and (d / "dev.tsv.gz").exists():
        return {"source": f"real: {d}", "train": d / "train.tsv.gz", "test": d / "dev.tsv.gz"}
    rng = random.Random(7)
    words = [f"w{i}" for i in range(14000)]

    def write(path, n):
        with gzip.open(path, "wt") as f:
            f.write("sentence\tlabel\n")
            for _ in range(n):
                k = min(52, max(1, int(rng.lognormvariate(2.0, 0.8))))  # SST-2's phrase lengths
                f.write(" ".join(rng.choice(words) for _ in range(k)) + f"\t{rng.randint(0, 1)}\n")
    g = out / "generated_sst2"
    g.mkdir(parents=True, exist_ok=True)
    write(g / "train.tsv.gz", 67349)
    write(g / "dev.tsv.gz", 872)
    return {"source": "generated (no ../shared/data/sst2): 67,349 + 872 rows of random words",
            "train": g / "train.tsv.gz", "test": g / "dev.tsv.gz"}


def genome_data(out):
    d = SHARED / "sars-cov-2"
    if (d / "sequences_2021.fasta.gz").exists() and (d / "metadata_2021.tsv").exists():
        return {"source": f"real: {d}", "fasta": d / "sequences_2021.fasta.gz",
                "metadata": d / "metadata_2021.tsv", "gff": d / "annotation.gff"}
    rng = random.Random(11)
    g = out / "generated_genomes"
    g.mkdir(parents=True, exist_ok=True)
    classes = [f"c{i}" for i in range(11)]
    with gzip.open(g / "genomes.fasta.gz", "wt") as f, open(g / "metadata.tsv", "w") as m:
        m.write("strain\twho_variant\n")
        for i in range(1952):
            seq = [rng.choice("ACGT") for _ in range(29903)]
            c = rng.randrange(len(classes))
            at = 21563 + 30 * rng.randrange(100)
            seq[at:at + 12] = list("ACGT"[c % 4] * 6 + "ACGT"[c // 4] * 6)
            s = "".join(seq)
            f.write(f">g{i}\n" + "\n".join(s[j:j + 80] for j in range(0, len(s), 80)) + "\n")
            m.write(f"g{i}\t{classes[c]}\n")
    return {"source": "generated (no ../shared/data/sars-cov-2): 1,952 random genomes of 29,903 "
                      "bases, a class motif in the S region, 11 classes",
            "fasta": g / "genomes.fasta.gz", "metadata": g / "metadata.tsv", "gff": None}


def sst2_config(data):
    return {"max_len": 64, "data": {
        "plugin": "text_tsv", "train": str(data["train"]), "test": str(data["test"]),
        "val_ratio": 0.05, "text_column": "sentence", "label_column": "label",
        "tokenizer": "word", "min_freq": 2, "max_len": 64},
        "short": data["test"], "long": data["train"], "fasta": False}


def genome_config(data):
    dd = {"plugin": "fasta_variants", "fasta": str(data["fasta"]), "metadata": str(data["metadata"]),
          "label_column": "who_variant", "k": 3, "stride": 3, "max_len": 512}
    if data["gff"]:
        dd.update({"gene": "S", "gff": str(data["gff"])})
    else:
        dd.update({"region_start": 21563, "region_end": 25384})
    return {"max_len": 512, "data": dd, "short": data["fasta"], "long": None, "fasta": True}


def long_fasta(src, out, copies=4):
    """SRC's genomes COPIES times over (renamed), in OUT: a longer input of the same records."""
    dst = out / f"genomes_x{copies}.fasta.gz"
    if dst.exists():
        return dst
    with gzip.open(src, "rt") as f:
        text = f.read()
    with gzip.open(dst, "wt") as f:
        for c in range(copies):
            f.write(text.replace(">", f">x{c}_"))
    return dst


def run_set(a, name, cfg, out, source):
    d = out / name
    d.mkdir(parents=True, exist_ok=True)
    run_yaml = d / "run.yaml"
    conf = {"name": f"throughput_{name}", "seed": 1, "threads": a.threads, "data": cfg["data"],
            "model": {"d_model": 64, "layers": 2, "max_len": cfg["max_len"], "pool": "mean",
                      "attention": {"plugin": "mha", "heads": 4, "head": {"plugin": "dot_product"}}},
            "optimizer": {"plugin": "adamw", "lr": 0.001},
            "train": {"steps": 30, "batch_size": BATCH, "warmup": 2, "eval_every": 30},
            "growth": {"plugin": "none"}, "pruning": {"plugin": "none"}}
    run_yaml.write_text(json.dumps(conf, indent=1))  # JSON is YAML
    rd = d / "run"
    ckpt = rd / "checkpoints" / "best.safetensors"
    if not ckpt.exists():
        timed([a.program, "train", str(run_yaml), "--run-dir", str(rd), "-q"])
    res = {"data": name, "source": source, "threads": a.threads, "batch": BATCH,
           "max_len": cfg["max_len"], "precision": a.precision}
    # the training step (and bench's forward-only pass) on the same model, full-length rows
    _, rss, txt = timed([a.program, "bench", str(run_yaml), "--batch", str(BATCH), "--seq",
                         str(cfg["max_len"]), "--steps", "10", "--warmup", "2", "--json",
                         "--set", f"precision={a.precision}"], None)
    b = json.loads(txt)
    res["train_seq_per_s"] = BATCH * 1e3 / b["ms_per_step_median"]
    res["bench_eval_seq_per_s"] = BATCH * 1e3 / b["eval_ms_per_batch_median"]
    res["bench_peak_rss_mb"] = rss
    # eval over every split (batches of the training batch size, 64)
    wall, rss, txt = timed([a.program, "eval", str(ckpt), "--split", "all", "--json",
                            "--precision", a.precision], None)
    ej = json.loads(txt)
    res["eval_sequences"] = ej["examples"]
    res["eval_s"] = wall
    res["eval_seq_per_s"] = ej["examples"] / wall
    res["eval_peak_rss_mb"] = rss
    # predict: the short input, then the long one
    long_in = cfg["long"] or long_fasta(cfg["short"], d)
    for key, path in (("short", cfg["short"]), ("long", long_in)):
        n = count_rows(path, cfg["fasta"])
        wall, rss, _ = timed([a.program, "predict", str(ckpt), str(path), "--batch-size", str(BATCH),
                              "--out", os.devnull, "-q", "--precision", a.precision])
        res[f"predict_{key}_records"] = n
        res[f"predict_{key}_s"] = wall
        res[f"predict_{key}_seq_per_s"] = n / wall
        res[f"predict_{key}_peak_rss_mb"] = rss
    res["predict_to_train"] = res["predict_long_seq_per_s"] / res["train_seq_per_s"]
    res["eval_to_train"] = res["eval_seq_per_s"] / res["train_seq_per_s"]
    return res


def print_table(results):
    print("| data | source | train step seq/s (bench, batch 64) | eval seq/s (all splits; x train) | "
          "predict seq/s, short input (records; peak RSS) | predict seq/s, long input (records; "
          "peak RSS) | long / train |")
    print("|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['data']} (T {r['max_len']}, {r['threads']} threads, "
              f"{r.get('precision', 'float32')}) | {r['source']} | "
              f"{r['train_seq_per_s']:.0f} | {r['eval_seq_per_s']:.0f} ({r['eval_sequences']}; "
              f"{r['eval_to_train']:.1f}x; {r['eval_peak_rss_mb']:.0f} MB) | "
              f"{r['predict_short_seq_per_s']:.0f} ({r['predict_short_records']}; "
              f"{r['predict_short_peak_rss_mb']:.0f} MB) | {r['predict_long_seq_per_s']:.0f} "
              f"({r['predict_long_records']}; {r['predict_long_peak_rss_mb']:.0f} MB) | "
              f"{r['predict_to_train']:.1f}x |")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("out")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--only", default="")
    ap.add_argument("--precision", choices=["float32", "bf16"], default="float32",
                    help="the products' precision of bench, eval and predict (the checkpoint is "
                         "trained in float32 either way)")
    ap.add_argument("--print", action="store_true", help="print the table from OUT, run nothing")
    a = ap.parse_args()
    out = Path(a.out).resolve()
    suffix = "" if a.precision == "float32" else "_" + a.precision
    f = out / f"throughput_t{a.threads}{suffix}.json"
    if a.print:
        print_table(json.loads(f.read_text()))
        return 0
    out.mkdir(parents=True, exist_ok=True)
    # the sets run before (--only) are kept; a set run again replaces its row
    results = json.loads(f.read_text()) if f.exists() else []
    for name, make, conf in (("sst2", sst2_data, sst2_config), ("genomes", genome_data, genome_config)):
        if a.only and a.only != name:
            continue
        data = make(out)
        print(f"{name}: {data['source']}", file=sys.stderr)
        r = run_set(a, name, conf(data), out, data["source"])
        results = [x for x in results if x["data"] != name] + [r]
        f.write_text(json.dumps(results, indent=1))
    print_table(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
