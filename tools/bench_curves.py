#!/usr/bin/python3
"""Step time, peak memory, evaluation throughput and the fraction of the FMA peak against
sequence length for growformer (mha, hkt) and the PyTorch reference, in one interleaved run;
with --widths, growformer's step against model width at one length as well.

  tools/bench_curves.py [--seqs 256,512,1024,2048,4096,8192] [--tokens 16384] [--repeats 3]
                        [--threads 2] [--torch-max-seq 4096] [--widths 64,128,256,512,768]
                        [--width-seq 512] [--width-tokens 4096] [--out docs/bench_curves]

The FMA-peak fraction is the step's matrix GFLOP/s (bench's count) against the register-loop
FMA peak of the kernel set in use, measured by the same bench process (per wall second, and
per CPU second of all threads). At each width d the model has d / 64 heads of d_k 64 (d 64:
one head), 2 layers as in bench_mha.yaml.

Batch = tokens / T (16 at T = 1024 with the default), so every point trains on the same
number of tokens per step. Each repeat runs every (T, model, implementation) once, one
after another, so machine load hits all of them alike; the table gives the median over
repeats of each run's median step. Peak memory is the process's max RSS. Writes
OUT.json, OUT.md (a table) and OUT.svg (gnuplot, when installed).
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out[out.index("{"):])


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seqs", default="256,512,1024,2048,4096,8192")
    p.add_argument("--widths", default="", help="model widths for the width curve (empty: none)")
    p.add_argument("--width-seq", type=int, default=512, help="T of the width curve")
    p.add_argument("--width-tokens", type=int, default=4096,
                   help="tokens per batch of the width curve (batch 8 at T 512)")
    p.add_argument("--tokens", type=int, default=16384, help="tokens per batch (batch = tokens / T)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--steps", type=int, default=3, help="timed steps per run")
    p.add_argument("--torch-max-seq", type=int, default=4096, help="skip PyTorch above this T")
    p.add_argument("--growformer", default=os.path.join(ROOT, "build", "bin", "growformer"))
    p.add_argument("--torch-ref", default=os.path.join(ROOT, "..", "shared", "bench", "torch_ref.py"))
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "bench_curves"))
    return p.parse_args()


def measure(a, seqs, widths, have_torch):
    """Every run, A.repeats times over SEQS (growformer and PyTorch) and WIDTHS (growformer):
    (T or ("d", d), model, impl) -> list of bench results."""
    runs = {}
    t_start = time.time()
    for rep in range(a.repeats):
        for T in seqs:
            B = max(1, a.tokens // T)
            for model in ("mha", "hkt"):
                cfg = os.path.join(ROOT, "configs", f"bench_{model}.yaml")
                g = run_json([a.growformer, "bench", cfg, "--json", "--seq", str(T), "--batch", str(B),
                              "--steps", str(a.steps), "--warmup", "1", "--set", f"model.max_len={T}",
                              "--set", f"threads={a.threads}"])
                runs.setdefault((T, model, "growformer"), []).append(g)
                if have_torch and T <= a.torch_max_seq:
                    t = run_json(["/usr/bin/python3", a.torch_ref, "--model", model, "--seq", str(T),
                                  "--batch", str(B), "--steps", str(a.steps), "--warmup", "1",
                                  "--threads", str(a.threads), "--blas-core", g["blas_core"]])
                    runs.setdefault((T, model, "torch"), []).append(t)
                print(f"repeat {rep + 1}/{a.repeats} T {T} {model} done ({time.time() - t_start:.0f} s)",
                      file=sys.stderr)
        for d in widths:
            T = a.width_seq
            B = max(1, a.width_tokens // T)
            for model in ("mha", "hkt"):
                cfg = os.path.join(ROOT, "configs", f"bench_{model}.yaml")
                g = run_json([a.growformer, "bench", cfg, "--json", "--seq", str(T), "--batch", str(B),
                              "--steps", str(a.steps), "--warmup", "1", "--set", f"model.max_len={T}",
                              "--set", f"model.d_model={d}", "--set", f"model.attention.heads={max(1, d // 64)}",
                              "--set", f"model.attention.d_k={min(d, 64)}", "--set", f"threads={a.threads}"])
                runs.setdefault((("d", d), model, "growformer"), []).append(g)
                print(f"repeat {rep + 1}/{a.repeats} d {d} {model} done ({time.time() - t_start:.0f} s)",
                      file=sys.stderr)
    return runs


def seq_rows(a, runs, seqs):
    """One row per T: the medians of its repeats."""
    rows = []
    for T in seqs:
        B = max(1, a.tokens // T)
        row = {"T": T, "batch": B}
        for model in ("mha", "hkt"):
            g = runs[(T, model, "growformer")]
            row[f"{model}_ms"] = statistics.median(r["ms_per_step_median"] for r in g)
            row[f"{model}_rss_mb"] = max(r["peak_rss_mb"] for r in g)
            row[f"{model}_eval_tok_s"] = statistics.median(r["eval_tokens_per_s"] for r in g)
            row[f"{model}_train_tok_s"] = statistics.median(r["tokens_per_s"] for r in g)
            row[f"{model}_pct_sgemm"] = statistics.median(r["percent_of_sgemm_peak"] for r in g)
            row[f"{model}_gflops"] = statistics.median(r["matmul_gflops"] for r in g)
            row[f"{model}_pct_fma"] = statistics.median(r["percent_of_fma_peak"] for r in g)
            row[f"{model}_pct_fma_cpu"] = statistics.median(r["percent_of_fma_peak_per_cpu_s"] for r in g)
            row["fma_peak_gflops"] = statistics.median(r["fma_peak_gflops"] for r in g)
            t = runs.get((T, model, "torch"))
            row[f"torch_{model}_ms"] = statistics.median(r["ms_per_step_median"] for r in t) if t else None
            row[f"torch_{model}_rss_mb"] = max(r["peak_rss_mb"] for r in t) if t else None
        rows.append(row)
    return rows


def width_rows(a, runs, widths):
    """One row per model width (growformer only)."""
    wrows = []
    for d in widths:
        row = {"d_model": d, "heads": max(1, d // 64), "d_k": min(d, 64), "T": a.width_seq,
               "batch": max(1, a.width_tokens // a.width_seq)}
        for model in ("mha", "hkt"):
            g = runs[(("d", d), model, "growformer")]
            row[f"{model}_ms"] = statistics.median(r["ms_per_step_median"] for r in g)
            row[f"{model}_gflops"] = statistics.median(r["matmul_gflops"] for r in g)
            row[f"{model}_pct_fma"] = statistics.median(r["percent_of_fma_peak"] for r in g)
            row[f"{model}_pct_fma_cpu"] = statistics.median(r["percent_of_fma_peak_per_cpu_s"] for r in g)
            row[f"{model}_params"] = g[0]["params"]
            row["fma_peak_gflops"] = statistics.median(r["fma_peak_gflops"] for r in g)
        wrows.append(row)
    return wrows


def fmt(x, spec="{:.0f}"):
    return "-" if x is None else spec.format(x)


def ratio(a_, b_):
    return None if a_ is None or b_ is None else a_ / b_


def markdown(a, meta, rows, wrows, load):
    """The tables as Markdown lines."""
    lines = [
        f"CPU {meta['cpu']}; BLAS {meta['blas']}; SIMD {meta['simd']}; {a.threads} threads; "
        f"{a.tokens} tokens per batch; median of {a.repeats} repeats x {a.steps} steps; "
        f"load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; took {meta['minutes']:.0f} min.",
        "",
        "| T | batch | mha ms | PyTorch mha ms | speed-up | hkt ms | PyTorch hkt ms | speed-up | hkt/mha "
        "| mha MB | PyTorch mha MB | hkt MB | PyTorch hkt MB | mha eval/train tok/s | hkt eval/train tok/s "
        "| mha GFLOP/s, % of FMA peak (wall / per CPU s) | hkt GFLOP/s, % of FMA peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['T']} | {r['batch']} | {fmt(r['mha_ms'])} | {fmt(r['torch_mha_ms'])} | "
            f"{fmt(ratio(r['torch_mha_ms'], r['mha_ms']), '{:.2f}x')} | {fmt(r['hkt_ms'])} | "
            f"{fmt(r['torch_hkt_ms'])} | {fmt(ratio(r['torch_hkt_ms'], r['hkt_ms']), '{:.2f}x')} | "
            f"{fmt(r['hkt_ms'] / r['mha_ms'], '{:.2f}')} | {fmt(r['mha_rss_mb'])} | "
            f"{fmt(r['torch_mha_rss_mb'])} | {fmt(r['hkt_rss_mb'])} | {fmt(r['torch_hkt_rss_mb'])} | "
            f"{fmt(r['mha_eval_tok_s'])} / {fmt(r['mha_train_tok_s'])} = "
            f"{fmt(r['mha_eval_tok_s'] / r['mha_train_tok_s'], '{:.1f}x')} | "
            f"{fmt(r['hkt_eval_tok_s'])} / {fmt(r['hkt_train_tok_s'])} = "
            f"{fmt(r['hkt_eval_tok_s'] / r['hkt_train_tok_s'], '{:.1f}x')} | "
            f"{r['mha_gflops']:.1f}, {r['mha_pct_fma']:.1f} % / {r['mha_pct_fma_cpu']:.1f} % | "
            f"{r['hkt_gflops']:.1f}, {r['hkt_pct_fma']:.1f} % / {r['hkt_pct_fma_cpu']:.1f} % |")
    lines.append("")
    lines.append(f"FMA peak of the run ({meta['simd']}, {a.threads} threads): "
                 + ", ".join(f"{r['fma_peak_gflops']:.0f}" for r in rows) + " GFLOP/s (per T row).")
    if wrows:
        lines += ["", f"Against width at T = {a.width_seq} (d / 64 heads of d_k 64; growformer only):", "",
                  "| d_model | heads | d_k | batch | mha params | mha ms | mha GFLOP/s | % of FMA peak (wall / per CPU s) "
                  "| hkt ms | hkt GFLOP/s | % of FMA peak (wall / per CPU s) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for r in wrows:
            lines.append(
                f"| {r['d_model']} | {r['heads']} | {r['d_k']} | {r['batch']} | {r['mha_params']} | "
                f"{r['mha_ms']:.0f} | {r['mha_gflops']:.1f} | {r['mha_pct_fma']:.1f} % / {r['mha_pct_fma_cpu']:.1f} % | "
                f"{r['hkt_ms']:.0f} | {r['hkt_gflops']:.1f} | {r['hkt_pct_fma']:.1f} % / {r['hkt_pct_fma_cpu']:.1f} % |")
    return lines


def plot(a, meta, rows):
    """The curves as an SVG through gnuplot."""
    dat = a.out + ".dat"
    with open(dat, "w") as f:
        f.write("# T mha torch_mha hkt torch_hkt mha_MB torch_mha_MB hkt_MB torch_hkt_MB mha_pct hkt_pct\n")
        for r in rows:
            vals = [r["T"], r["mha_ms"], r["torch_mha_ms"], r["hkt_ms"], r["torch_hkt_ms"],
                    r["mha_rss_mb"], r["torch_mha_rss_mb"], r["hkt_rss_mb"], r["torch_hkt_rss_mb"],
                    r["mha_pct_fma"], r["hkt_pct_fma"]]
            f.write(" ".join("NaN" if v is None else str(v) for v in vals) + "\n")
    script = f"""
set terminal svg size 1500,420 font "sans,12"
set output "{a.out}.svg"
set multiplot layout 1,3 title "{meta['cpu']}, {a.threads} threads, {a.tokens} tokens per batch"
set logscale xy 2
set xlabel "sequence length T"
set key top left
set grid
set ylabel "ms per training step"
plot "{dat}" u 1:2 w lp t "growformer mha", "" u 1:3 w lp t "PyTorch mha", \\
 "" u 1:4 w lp t "growformer hkt", "" u 1:5 w lp t "PyTorch hkt"
set ylabel "peak RSS (MB)"
plot "{dat}" u 1:6 w lp t "growformer mha", "" u 1:7 w lp t "PyTorch mha", \\
 "" u 1:8 w lp t "growformer hkt", "" u 1:9 w lp t "PyTorch hkt"
unset logscale y
set yrange [0:100]
set ylabel "% of the FMA peak (matrix GFLOP/s, wall)"
plot "{dat}" u 1:10 w lp t "growformer mha", "" u 1:11 w lp t "growformer hkt"
unset multiplot
"""
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
    os.remove(dat)
    print(f"plot: {a.out}.svg", file=sys.stderr)


def main():
    a = parse_args()
    seqs = [int(s) for s in a.seqs.split(",")]
    widths = [int(w) for w in a.widths.split(",") if w]
    have_torch = os.path.exists(a.torch_ref)
    if not have_torch:
        print(f"note: {a.torch_ref} not found; PyTorch columns stay empty", file=sys.stderr)
    version = subprocess.run([a.growformer, "--version"], capture_output=True, text=True).stdout
    t_start = time.time()
    runs = measure(a, seqs, widths, have_torch)
    load = os.getloadavg()
    rows = seq_rows(a, runs, seqs)
    wrows = width_rows(a, runs, widths)
    first = runs[(seqs[0], "mha", "growformer")][0]
    meta = {"version": version.strip(), "cpu": first["cpu"], "blas": first["blas_kernels"],
            "simd": first["simd"], "isa": first.get("isa"), "threads": a.threads, "tokens_per_batch": a.tokens,
            "repeats": a.repeats, "steps": a.steps, "loadavg_at_end": load,
            "minutes": (time.time() - t_start) / 60}
    with open(a.out + ".json", "w") as f:
        json.dump({"meta": meta, "rows": rows, "width_rows": wrows}, f, indent=1)
    lines = markdown(a, meta, rows, wrows, load)
    with open(a.out + ".md", "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))

    if shutil.which("gnuplot"):
        plot(a, meta, rows)


if __name__ == "__main__":
    main()
