#!/usr/bin/env python3
"""growformer's training step against the oneDNN peer (`bench --peer onednn`) on the shapes of
the speed table, at 1 and 2 threads; one JSON per shape and thread count in OUT (a shape whose
JSON is there is not run again; a shape the peer refused or that failed is recorded as such and
rerun only with --retry-failed), then a Markdown table of the medians and ratios with the CPU,
the kernels and the load average before and after each run.

    tools/peer_table.py BUILD/bin/growformer OUT [--only NAME] [--threads 1,2] [--retry-failed]
                        [--steps N] [--repeats N]   (every shape; default: each its own)
                        [--precision bf16]          (both steps' products in bf16; the JSON
                                                     files are then NAME_tN_bf16.json)
    tools/peer_table.py BUILD/bin/growformer OUT --print      # the table from OUT, nothing run
    tools/peer_table.py BUILD/bin/growformer OUT --estimate   # the expected wall time, nothing run

The shapes: the bench shape; d 512 with 8 heads at batch 8; d 64 with 16 heads; T 2,048 and
T 8,192 at batch 1, 2, 4 and 8 with the bench width; HKT (configs/bench_hkt.yaml) timed against
the peer's mha step of the same shape (the gate checks mha against mha; the HKT row is time
only). Each shape has its own timed steps, untimed steps and repeats, fewer for the large ones,
so that the whole table at 1 and 2 threads takes about 15 minutes on a quiet Zen 5 machine of
2 vCPUs (--estimate prints the sum of the per-shape estimates).

Time it on a quiet machine: the 2-thread oneDNN step waits at OpenMP barriers whenever another
process holds a core, its threads spinning (and slowing growformer's interleaved steps); with
OMP_WAIT_POLICY=passive they sleep there instead (on a machine at load 10, the bench shape's
2-thread float32 step of oneDNN took 487 ms so against 2,581 ms spinning; docs/results/speed.md).
"""
import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MHA = "configs/bench_mha.yaml"
HKT = "configs/bench_hkt.yaml"


def seq(t, b):
    return ["--seq", str(t), "--set", f"model.max_len={t}", "--batch", str(b)]


# tag, name, config, extra bench arguments, (timed steps, untimed steps, repeats),
# estimated seconds of one growformer step + one oneDNN step at 1 thread (quiet Zen 5)
SHAPES = [
    ("bench", "bench (B 32, T 512, d 64, 4 heads)", MHA, [], (10, 2, 3), 0.48),
    ("d512", "d 512, 8 heads (B 8, T 512)", MHA,
     ["--set", "model.d_model=512", "--set", "model.attention.heads=8", "--batch", "8"], (4, 1, 2), 2.2),
    ("h16", "d 64, 16 heads (B 32, T 512)", MHA, ["--set", "model.attention.heads=16"], (6, 1, 2), 1.0),
    ("t2048b1", "T 2,048, B 1", MHA, seq(2048, 1), (6, 1, 2), 0.2),
    ("t2048b2", "T 2,048, B 2", MHA, seq(2048, 2), (6, 1, 2), 0.4),
    ("t2048b4", "T 2,048, B 4", MHA, seq(2048, 4), (4, 1, 2), 0.8),
    ("t2048b8", "T 2,048, B 8", MHA, seq(2048, 8), (4, 1, 2), 1.6),
    ("t8192b1", "T 8,192, B 1", MHA, seq(8192, 1), (3, 1, 1), 2.8),
    ("t8192b2", "T 8,192, B 2", MHA, seq(8192, 2), (2, 1, 1), 5.6),
    ("t8192b4", "T 8,192, B 4", MHA, seq(8192, 4), (2, 1, 1), 11.2),
    ("t8192b8", "T 8,192, B 8", MHA, seq(8192, 8), (2, 1, 1), 22.4),
    ("hkt", "HKT (B 32, T 512, d 64, 4 heads) against oneDNN mha", HKT, [], (10, 2, 3), 0.55),
]


def load():
    return os.getloadavg()[0]


def estimate(pair_s, steps, warmup, repeats, threads):
    """Seconds of one bench run: per repeat, the bench's own growformer steps (training, then
    evaluation at about a third) and the interleaved pairs; the gate (about two pairs); start-up
    and the peaks (about 3 s). Two threads take about 0.6 of one thread's time."""
    gf = 0.5 * pair_s
    per_repeat = (warmup + steps) * (gf + gf / 3 + pair_s)
    return (3 + 2 * pair_s + repeats * per_repeat) * (1.0 if threads == 1 else 0.6)


def run_one(a, tag, config, extra, plan, threads, f):
    steps, warmup, repeats = plan
    before = load()
    cmd = [a.program, "bench", str(ROOT / config), "--peer", "onednn", "--json",
           "--steps", str(steps), "--warmup", str(warmup), "--repeats", str(repeats),
           "--set", f"threads={threads}", "--set", f"precision={a.precision}"] + extra
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.time() - t0
    if r.returncode != 0:
        err = r.stderr.strip().splitlines()
        d = {"failed": True, "exit": r.returncode, "error": err[-1] if err else "",
             "command": cmd, "wall_s": wall}
        print(f"{tag}: exit {r.returncode}: {d['error']}", file=sys.stderr)
    else:
        d = json.loads(r.stdout)
        d["wall_s"] = wall
    d["load_before"], d["load_after"] = before, load()
    f.write_text(json.dumps(d, indent=1))
    print(f"{tag}: {wall:.0f} s", file=sys.stderr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("out")
    ap.add_argument("--only", default="", help="run the shapes whose tag contains this")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--print", action="store_true", help="print the table from OUT, run nothing")
    ap.add_argument("--estimate", action="store_true", help="print the expected wall time, run nothing")
    ap.add_argument("--retry-failed", action="store_true")
    ap.add_argument("--steps", type=int, default=0, help="timed steps of every shape (default: its own)")
    ap.add_argument("--repeats", type=int, default=0, help="repeats of every shape (default: its own)")
    ap.add_argument("--precision", default="float32", choices=["float32", "bf16"],
                    help="the products' precision of both steps (precision: bf16: oneDNN's bf16 matmuls)")
    a = ap.parse_args()

    def plan_of(plan):
        steps, warmup, repeats = plan
        return (a.steps or steps, warmup, a.repeats or repeats)
    out = Path(a.out)
    threads_list = [int(t) for t in a.threads.split(",")]
    if a.estimate:
        total = 0.0
        for tag, name, config, extra, plan, pair in SHAPES:
            for t in threads_list:
                if a.only and a.only not in tag:
                    continue
                e = estimate(pair, *plan_of(plan), t)
                total += e
                print(f"{tag}_t{t}: about {e:.0f} s")
        print(f"in all: about {total / 60:.1f} minutes")
        return 0
    if not a.print:
        out.mkdir(parents=True, exist_ok=True)
    rows = []
    for tag, name, config, extra, plan, pair in SHAPES:
        for threads in threads_list:
            key = f"{tag}_t{threads}" + ("" if a.precision == "float32" else "_" + a.precision)
            if a.only and a.only not in tag:
                continue
            f = out / f"{key}.json"
            if not a.print:
                stale = f.exists() and a.retry_failed and json.loads(f.read_text()).get("failed")
                if not f.exists() or stale:
                    run_one(a, key, config, extra, plan_of(plan), threads, f)
            if f.exists():
                rows.append((name, threads, json.loads(f.read_text())))
    done = [d for _, _, d in rows if not d.get("failed")]
    if not done:
        print("no results in " + str(out), file=sys.stderr)
        return 1
    d0 = done[0]
    products = d0.get("precision", "float32")
    if products == "bf16":
        products += f" (growformer's bf16 kernels {d0['bf16_kernels']}; oneDNN's bf16 matmuls)"
    print(f"CPU {d0['cpu']}; growformer kernels {d0['simd']}, OpenBLAS {d0['blas_core']}; "
          f"{d0['onednn_library']}; products {products}\n")
    print("| shape | threads | steps x repeats | growformer ms (median) | oneDNN ms (median) | "
          "growformer / oneDNN | gate (worst gradient error) | load before, after | wall s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, threads, d in rows:
        if d.get("failed"):
            print(f"| {name} | {threads} | - | - | - | - | not run: {d.get('error', '')[:160]} | "
                  f"{d['load_before']:.2f}, {d['load_after']:.2f} | {d.get('wall_s', 0):.0f} |")
            continue
        gate = f"{d['onednn_gate']['worst_gradient_error']:.1e}"
        if d.get("onednn_growformer_attention", "mha") != "mha":
            gate += f" (mha; {d['onednn_growformer_attention']} time only)"
        print(f"| {name} | {threads} | {d['steps']} x {d['repeats']} | "
              f"{d['onednn_growformer_ms_per_step_median']:.1f} | "
              f"{d['onednn_ms_per_step_median']:.1f} | {d['ratio_to_onednn']:.3f} | {gate} | "
              f"{d['load_before']:.2f}, {d['load_after']:.2f} | {d.get('wall_s', 0):.0f} |")
    print_roofline(rows)
    return 0


def print_roofline(rows):
    """Both libraries' steps against the one roofline bench measured in the run: its ms over
    growformer's and oneDNN's interleaved medians (the ratio's own times), and over the bench's
    own growformer steps (timed alone before the pairs: the spread of the two growformer
    fractions is the run's noise)."""
    print("\n| shape | threads | roofline ms | growformer of the roofline | oneDNN of the roofline | "
          "growformer of the roofline, bench's own steps | FMA peak GFLOP/s in the run |")
    print("|---|---|---|---|---|---|---|")
    for name, threads, d in rows:
        r = d.get("roofline", {})
        if d.get("failed") or "roofline_ms" not in r:
            continue
        rm = r["roofline_ms"]
        # against another attention oneDNN runs MHA's step: this roofline is not its work
        peer = (f"{100 * rm / d['onednn_ms_per_step_median']:.0f} %"
                if d.get("onednn_growformer_attention", "mha") == "mha" else "- (runs mha)")
        print(f"| {name} | {threads} | {rm:.1f} | "
              f"{100 * rm / d['onednn_growformer_ms_per_step_median']:.0f} % | {peer} | "
              f"{100 * rm / d['ms_per_step_median']:.0f} % | {d['fma_peak_gflops']:.0f} |")


if __name__ == "__main__":
    sys.exit(main())
