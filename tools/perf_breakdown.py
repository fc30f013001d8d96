#!/usr/bin/python3
"""Groups a `perf record` profile of a training step into the categories of
docs/results/speed.md (GEMMs, attention, softmax, layer norm, GELU, optimizer, tape,
allocation, other) by symbol name.

  perf record -F 499 -o step.data -- build/bin/growformer bench configs/bench_mha.yaml --steps 4
  tools/perf_breakdown.py step.data
"""
import re
import subprocess
import sys

RULES = [  # first match wins
    ("GEMM (OpenBLAS)", r"sgemm|cblas_|gemm_rows"),
    ("linear layers forward (register kernels, gemm_bias)", r"gemm_bias"),
    ("other products in register kernels (attention; linear backward)",
     r"short_k|acc_tile|gemm_short|gemm_acc|acc_product|fma_tile|product_rows"),
    ("softmax / exp (and the coarse scores' add)", r"softmax|exp_shift|exp_add|add_max|k_max|k_scale|__expf|fast_exp|k_softmax|k_dot"),
    ("attention (other: masks, block maps, HKT levels)", r"attention|attn_|hkt_attend|tile_scores|expand|fold|k_axpy|transpose"),
    ("depthwise convolution", r"depthwise|mul_add_rows|dot_rows"),
    ("GELU", r"gelu|erf"),
    ("layer norm", r"layer_norm"),
    ("optimizer", r"optim|Adam|adam"),
    ("kernel: thread waits, syscalls, page faults", r"pvm_|sched_yield|futex|\[k\]"),
    ("allocation / zeroing / page faults", r"page|memset|clear_page|malloc|free|_int_|mmap|Tensor::Tensor|grad_buf|pool|alloc|charge|fault"),
    ("tape, copies, elementwise", r"add_|memmove|memcpy|ops::|Function_handler|autograd|backward|record|Tensor|lerp"),
]


def main():
    data = sys.argv[1] if len(sys.argv) > 1 else "perf.data"
    out = subprocess.run(["perf", "report", "-i", data, "--no-children", "--sort", "symbol",
                          "--stdio"], capture_output=True, text=True).stdout
    totals = {}
    for line in out.splitlines():
        m = re.match(r"\s*([0-9.]+)%\s+\[[.k]\]\s+(.*)", line)
        if not m:
            continue
        pct, sym = float(m.group(1)), m.group(2)
        cat = next((c for c, rx in RULES if re.search(rx, sym)), "other")
        totals[cat] = totals.get(cat, 0.0) + pct
    for cat, pct in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| {cat} | {pct:.1f} % |")


if __name__ == "__main__":
    main()
