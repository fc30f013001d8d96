// The text report of `growformer bench`, from its JSON (apps/bench.cpp measures and builds it).
#include "bench_report.hpp"

#include <cstdio>

namespace gfapp {

using json = nlohmann::json;

namespace {

/// The oneDNN peer's lines of the text report.
void print_peer(const json& out) {
  auto num = [&](const char* k) { return out[k].get<double>(); };
  std::printf(
      "  oneDNN peer (%s, %zu threads, %.0f MB of buffers, in the peak RSS above): gate %s\n",
      out["onednn_library"].get<std::string>().c_str(), out["onednn_threads"].get<size_t>(),
      num("onednn_buffers_mb"), out["onednn_gate"]["summary"].get<std::string>().c_str());
  const std::string ga = out.value("onednn_growformer_attention", "mha");
  if (ga != "mha")
    std::printf(
        "    growformer's %s step timed against the peer's mha step (the gate checked "
        "growformer's mha model of the same shape)\n",
        ga.c_str());
  std::printf(
      "    interleaved, %zu steps each: growformer median %.1f ms (min %.1f, max %.1f), "
      "oneDNN median %.1f ms (min %.1f, max %.1f); growformer / oneDNN = %.3f\n",
      out["onednn_steps_timed"].get<size_t>(), num("onednn_growformer_ms_per_step_median"),
      num("onednn_growformer_ms_per_step_min"), num("onednn_growformer_ms_per_step_max"),
      num("onednn_ms_per_step_median"), num("onednn_ms_per_step_min"),
      num("onednn_ms_per_step_max"), num("ratio_to_onednn"));
  std::printf("    final loss growformer %.5f, oneDNN %.5f; oneDNN primitives: %s\n",
              num("onednn_growformer_final_loss"), num("onednn_final_loss"),
              out["onednn_primitives"].get<std::string>().c_str());
}

/// The roofline lines of the text report, from its JSON RL.
void print_roofline(const json& rl) {
  if (rl.value("counted", false)) {
    auto r = [&](const char* k) { return rl[k].get<double>(); };
    std::printf(
        "  roofline of the step (rates measured in this run: products %.0f GFLOP/s, exp "
        "%.2f G/s, GELU %.2f / %.2f G/s, in-cache passes %.1f / %.1f / %.1f G/s, memory "
        "%.1f GB/s):\n",
        r("product_gflops"), r("exp_g_per_s"), r("gelu_g_per_s"), r("gelu_grad_g_per_s"),
        r("max_g_per_s"), r("softmax_grad_g_per_s"), r("add_g_per_s"), r("memory_gb_per_s"));
    std::printf(
        "    products %.2f GFLOP (the kernels counted %.2f) %.1f ms + exp %.1f M, GELU "
        "%.1f M + %.1f M %.1f ms + in-cache %.1f M %.1f ms + memory %.0f MB %.1f ms = "
        "%.1f ms; the step is %.0f%% of its roofline (%.0f%% per CPU second a thread)\n",
        r("product_gflop"), r("product_gflop_counted_by_kernels"), r("products_ms"), r("exp_m"),
        r("gelu_m"), r("gelu_grad_m"), r("exp_gelu_ms"),
        r("max_m") + r("softmax_grad_m") + r("add_m"), r("in_cache_ms"), r("memory_mb"),
        r("memory_ms"), r("roofline_ms"), r("percent_of_roofline"),
        r("percent_of_roofline_per_cpu_s"));
  } else {
    std::printf("  roofline: not counted (%s)\n", rl.value("why_not", "").c_str());
  }
}

/// The text report of `bench` (without --json), from the JSON.
}  // namespace

void print_bench(const json& out, const std::string& compare) {
  auto num = [&](const char* k) { return out[k].get<double>(); };
  const std::string attn = out["attention"].get<std::string>();
  const size_t threads = out["threads"].get<size_t>();
  std::printf("bench %s: attention %s, batch %zu x seq %zu, %zu threads, precision %s\n",
              out["config"].get<std::string>().c_str(), attn.c_str(), out["batch"].get<size_t>(),
              out["seq"].get<size_t>(), threads, out["precision"].get<std::string>().c_str());
  std::printf("  CPU: %s; BLAS kernels: %s; SIMD kernels: %s\n",
              out["cpu"].get<std::string>().c_str(), out["blas_kernels"].get<std::string>().c_str(),
              out["isa"].get<std::string>().c_str());
  std::printf("  training step: median %.1f ms (min %.1f, max %.1f) over %ld steps x %ld repeats\n",
              num("ms_per_step_median"), num("ms_per_step_min"), num("ms_per_step_max"),
              out["steps"].get<long>(), out["repeats"].get<long>());
  std::printf("  %.0f tokens/s, %zu parameters, peak RSS %.0f MB\n", num("tokens_per_s"),
              out["params"].get<size_t>(), num("peak_rss_mb"));
  std::printf(
      "  matrix work %.2f GFLOP/step = %.1f GFLOP/s = %.0f%% of the %s multiply-add peak "
      "(%.0f GFLOP/s, %zu threads, register-only loop)\n",
      num("matmul_gflop_per_step"), num("matmul_gflops"), num("percent_of_fma_peak"),
      out["simd"].get<std::string>().c_str(), num("fma_peak_gflops"), threads);
  std::printf(
      "  per CPU second (%.1f ms CPU a step, all threads): %.1f GFLOP/s = %.0f%% of one "
      "thread's peak\n",
      num("cpu_ms_per_step_median"), num("matmul_gflops_per_cpu_s"),
      num("percent_of_fma_peak_per_cpu_s"));
  if (num("bf16_peak_gflops") > 0)
    std::printf(
        "  bf16 products' peak (%s, register-only loop): %.0f GFLOP/s = %.2fx the "
        "multiply-add peak; the step's products are %.0f%% of the %s peak\n",
        out["bf16_kernels"].get<std::string>().c_str(), num("bf16_peak_gflops"),
        num("bf16_peak_gflops") / num("fma_peak_gflops"), num("percent_of_product_peak"),
        out["precision"].get<std::string>().c_str());
  std::printf(
      "  OpenBLAS SGEMM 1024^3 (%s kernels): %.0f GFLOP/s = %.0f%% of that peak; the step "
      "is %.0f%% of it\n",
      out["blas_core"].get<std::string>().c_str(), num("sgemm_peak_gflops"),
      num("sgemm_percent_of_fma_peak"), num("percent_of_sgemm_peak"));
  print_roofline(out["roofline"]);
  std::printf(
      "  evaluation (forward, no tape): median %.1f ms per batch, %.0f tokens/s = %.1fx "
      "the training step's\n",
      num("eval_ms_per_batch_median"), num("eval_tokens_per_s"), num("eval_to_train_tokens_ratio"));
  if (out.contains("ratio_to_compare")) {
    std::printf("  %s step: median %.1f ms; ratio %s / %s = %.3f\n", compare.c_str(),
                num("compare_ms_per_step_median"), attn.c_str(), compare.c_str(),
                num("ratio_to_compare"));
    if (out.contains("analytic_score_cost_ratio"))
      std::printf("  analytic score-cost ratio sum s^-2l = %.4f\n",
                  num("analytic_score_cost_ratio"));
  }
  if (out.contains("ratio_to_torch")) {
    std::printf(
        "  PyTorch reference (%s; OpenBLAS %s kernels): median %.1f ms; growformer / "
        "PyTorch = %.3f\n",
        out["torch_build"].get<std::string>().c_str(),
        out["torch_openblas_core"].get<std::string>().c_str(), num("torch_ms_per_step_median"),
        num("ratio_to_torch"));
    if (out.contains("torch_ratio_hkt_to_mha"))
      std::printf(
          "  PyTorch mha step: median %.1f ms; PyTorch hkt / mha = %.3f; growformer mha / "
          "PyTorch mha = %.3f\n",
          num("torch_compare_ms_per_step_median"), num("torch_ratio_hkt_to_mha"),
          num("compare_ratio_to_torch"));
  }
  if (out.contains("ratio_to_onednn")) print_peer(out);
}

}  // namespace gfapp
