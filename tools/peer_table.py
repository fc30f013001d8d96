#!/usr/bin/env python3
"""growformer's training step against the oneDNN peer (`bench --peer onednn`) on the shapes of
the speed table, at 1 and 2 threads; one JSON per shape and thread count in OUT (a shape whose
JSON is there is not run again), then a Markdown table of the medians and ratios with the CPU,
the kernels and the load average before and after each run.

    tools/peer_table.py BUILD/bin/growformer OUT [--steps N] [--repeats N] [--only NAME]

Time it on a quiet machine: the 2-thread oneDNN step waits at OpenMP barriers whenever another
process holds a core.
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# name, extra bench arguments, steps divisor (large shapes time fewer steps)
SHAPES = [
    ("bench (B 32, T 512, d 64, 4 heads)", [], 1),
    ("d 512, 8 heads (B 32, T 512)", ["--set", "model.d_model=512", "--set", "model.attention.heads=8"], 2),
    ("d 64, 16 heads (B 32, T 512)", ["--set", "model.attention.heads=16"], 1),
    ("T 2,048, B 4", ["--seq", "2048", "--set", "model.max_len=2048", "--batch", "4"], 2),
    ("T 8,192, B 1", ["--seq", "8192", "--set", "model.max_len=8192", "--batch", "1"], 2),
]


def load():
    return os.getloadavg()[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("out")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (name, extra, div) in enumerate(SHAPES):
        for threads in (1, 2):
            tag = f"shape{i}_t{threads}"
            if a.only and a.only not in tag:
                continue
            f = out / f"{tag}.json"
            if not f.exists():
                before = load()
                cmd = [a.program, "bench", str(ROOT / "configs/bench_mha.yaml"), "--peer", "onednn",
                       "--json", "--steps", str(max(2, a.steps // div)), "--warmup", "2",
                       "--repeats", str(a.repeats), "--set", f"threads={threads}"] + extra
                r = subprocess.run(cmd, capture_output=True, text=True)
                if r.returncode != 0:
                    print(f"{tag}: exit {r.returncode}\n{r.stderr[-2000:]}", file=sys.stderr)
                    continue
                d = json.loads(r.stdout)
                d["load_before"], d["load_after"] = before, load()
                f.write_text(json.dumps(d, indent=1))
            d = json.loads(f.read_text())
            rows.append((name, threads, d))
    if not rows:
        return 1
    d0 = rows[0][2]
    print(f"CPU {d0['cpu']}; growformer kernels {d0['simd']}, OpenBLAS {d0['blas_core']}; "
          f"{d0['onednn_library']}\n")
    print("| shape | threads | growformer ms (median) | oneDNN ms (median) | growformer / oneDNN | "
          "gate (worst gradient error) | load before, after |")
    print("|---|---|---|---|---|---|---|")
    for name, threads, d in rows:
        print(f"| {name} | {threads} | {d['onednn_growformer_ms_per_step_median']:.1f} | "
              f"{d['onednn_ms_per_step_median']:.1f} | {d['ratio_to_onednn']:.3f} | "
              f"{d['onednn_gate']['worst_gradient_error']:.1e} | "
              f"{d['load_before']:.2f}, {d['load_after']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
