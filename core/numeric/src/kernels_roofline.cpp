// The roofline of a training step: its work counted from the model's shape, and the element
// rates measured in the process (the products' FMA peak is kernels::fma_peak_gflops).
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "growformer/kernels.hpp"

namespace gf {
namespace kernels {

StepWork& StepWork::operator+=(const StepWork& o) {
  product_flops += o.product_flops;
  exp_elements += o.exp_elements;
  gelu_elements += o.gelu_elements;
  gelu_grad_elements += o.gelu_grad_elements;
  max_elements += o.max_elements;
  softmax_grad_elements += o.softmax_grad_elements;
  add_elements += o.add_elements;
  memory_bytes += o.memory_bytes;
  return *this;
}

// How the model's own work in one training step is counted (docs/results/speed.md, "The
// roofline of a step"); each attention block counts its own (AttentionBlock::step_work: the
// multi-head base in core/api/src/block_work.cpp, the scoring rules in their plugins).
// n = batch x seq rows, d = d_model, F = hidden. Per layer:
//
// Products (2 m n k each), as growformer computes them:
//   forward  fc1 2 n d F; fc2 2 n F d; backward twice that (the input's and the weight's
//   gradient); and once per step the classifier, 2 B d C forward and 4 B d C backward.
// GELU: n F forward, n F derivatives backward.
//
// Memory traffic, in floats read plus written, one pass per op over each activation-sized tensor
// it reads or writes (the ops of the tape, in order; tiles that stay in cache are not counted):
//   forward  layer norm 2 n d (x in, y out), twice; residual adds 3 n d, twice; fc1 n d + n F;
//            GELU 2 n F; fc2 n F + n d. Sum: 12 n d + 4 n F.
//   backward residual adds 3 n d, twice; fc2 2 n d + 2 n F (dX: dY in, dX out; dW: X, dY in);
//            GELU 3 n F (x, dY in, dX out); fc1 2 n F + 2 n d; layer norm 6 n d (x, dY in, dX
//            read and written; x, dY again for gamma and beta), twice. Sum: 22 n d + 7 n F.
//   and once per step: the embedding gather n d, the positions 2 n d, the final norm 2 n d,
//   the mean pool n d (forward); the pool n d, the final norm 6 n d, the positions' and the
//   embedding's gradients n d each (backward); 11 floats per parameter, the blocks' included
//   (read forward, read backward, the gradient zeroed and written, AdamW's reads of value,
//   gradient and two moments and its three writes).
StepWork model_work(const ModelShape& s) {
  const double B = static_cast<double>(s.batch), T = static_cast<double>(s.seq);
  const double n = B * T, d = static_cast<double>(s.d_model), F = static_cast<double>(s.hidden);
  const double C = static_cast<double>(s.classes), L = static_cast<double>(s.layers);
  StepWork w;
  w.product_flops = L * 3 * (4 * n * d * F) + 6 * B * d * C;
  w.gelu_elements = L * n * F;
  w.gelu_grad_elements = L * n * F;
  const double layer = (12 + 22) * n * d + (4 + 7) * n * F;
  const double norm_f = s.final_norm ? 1.0 : 0.0;
  const double model = n * d * (1 + 2 + 2 * norm_f + 1) + n * d * (1 + 6 * norm_f + 1 + 1);
  w.memory_bytes = 4.0 * (L * layer + model + 11.0 * static_cast<double>(s.params));
  return w;
}

Roofline roofline(const StepWork& w, const ElementRates& r, double fma_gflops) {
  Roofline out;
  out.products_s = w.product_flops / (fma_gflops * 1e9);
  out.exp_gelu_s =
      w.exp_elements / r.exp + w.gelu_elements / r.gelu + w.gelu_grad_elements / r.gelu_grad;
  out.in_cache_s = w.max_elements / r.max + w.softmax_grad_elements / r.softmax_grad;
  if (w.add_elements > 0) out.in_cache_s += w.add_elements / r.add;
  out.memory_s = w.memory_bytes / r.memory_bytes;
  return out;
}

namespace {

// The best rate of F (which handles ELEMS elements a call) over rounds of about SECONDS / 5 of
// the calling thread's CPU time each (preemption on a shared machine does not lower it); the
// clock is read every BURST calls (a read costs more than a call on a row in L1).
template <class F>
double best_rate(double elems, double seconds, size_t burst, F&& f) {
  f();  // warm up
  double best = 0;
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0; round < 5; ++round) {
    size_t calls = 0;
    const double t0 = thread_cpu_seconds();
    double el = 0;
    do {
      for (size_t b = 0; b < burst; ++b) f();
      calls += burst;
      el = thread_cpu_seconds() - t0;
    } while (el < seconds / 5);
    best = std::max(best, static_cast<double>(calls) * elems / el);
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() >
        2 * seconds)
      break;
  }
  return best;
}

// One thread's rate of measurement KIND (0 exp, 1 GELU, 2 its derivative, 3 row max, 4 the
// softmax backward row pass, 5 y += a x: elements/s on a row in L1; 6 memory: bytes/s).
double thread_rate(int kind, double seconds, float* sink) {
  constexpr size_t kRow = 512;    // an attention tile's row at T 512: in L1
  constexpr size_t kBurst = 256;  // calls between clock reads: tens of microseconds
  std::vector<float> x(kRow), y(kRow, 0.5f), g(kRow), a(kRow);
  for (size_t j = 0; j < kRow; ++j) {
    x[j] = static_cast<float>(j % 97) / 97.0f;                // [0, 1): exp(x - 1) stays there
    g[j] = 0.1f + 0.4f * static_cast<float>(j % 31) / 31.0f;  // p in [0.1, 0.5]
    // GELU's inputs spread over [-4, 4) like a layer's pre-activations, every register mixing
    // signs and magnitudes (a kernel with a branch per range would be timed on all of them)
    a[j] = -4.0f + 8.0f * static_cast<float>((j * 37) % 101) / 101.0f;
  }
  double r = 0;
  switch (kind) {
    case 0:
      r = best_rate(kRow, seconds, kBurst, [&] { exp_shift(x.data(), kRow, 1.0f); });
      break;
    case 1:
      r = best_rate(kRow, seconds, kBurst, [&] { gelu(a.data(), y.data(), kRow); });
      break;
    case 2:
      r = best_rate(kRow, seconds, kBurst,
                    [&] { gelu_grad(a.data(), x.data(), y.data(), kRow, false); });
      break;
    case 3:
      r = best_rate(kRow, seconds, kBurst, [&] { *sink += row_max(x.data(), kRow); });
      break;
    case 4:  // ds = p (ds + 1): a fixed point below 1 for p <= 0.5, no subnormals
      r = best_rate(kRow, seconds, kBurst,
                    [&] { softmax_grad_row(y.data(), g.data(), kRow, -1.0f, 1.0f); });
      break;
    case 5:  // y += 1e-7 x: y grows by under 1 in 10^7 calls
      r = best_rate(kRow, seconds, kBurst, [&] { axpy(y.data(), x.data(), kRow, 1e-7f); });
      break;
    default: {  // y += a x over 2 x 64 MiB a thread, 12 bytes an element (two reads, one write)
      constexpr size_t kBig = size_t{16} << 20;
      std::vector<float> a(kBig, 1.0f), b(kBig, 0.0f);
      r = best_rate(12.0 * kBig, seconds, 1, [&] { axpy(b.data(), a.data(), kBig, 1e-7f); });
      *sink += b[7];
    }
  }
  *sink += x[3] + y[5];
  return r;
}

}  // namespace

ElementRates element_rates(size_t threads, double seconds) {
  if (threads == 0) threads = 1;
  std::vector<float> sink(threads, 0.0f);
  constexpr int kKinds = 7;
  double sum[kKinds] = {0, 0, 0, 0, 0, 0, 0};
  // each measurement on every thread at once (the memory's threads share the bandwidth), the
  // threads' rates summed
  for (int kind = 0; kind < kKinds; ++kind) {
    std::vector<double> rate(threads, 0.0);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t)
      pool.emplace_back([&, t] { rate[t] = thread_rate(kind, seconds / kKinds, &sink[t]); });
    rate[0] = thread_rate(kind, seconds / kKinds, &sink[0]);
    for (auto& th : pool) th.join();
    for (double r : rate) sum[kind] += r;
  }
  volatile float keep = 0;
  for (float v : sink) keep = keep + v;
  (void)keep;
  ElementRates out;
  out.exp = sum[0], out.gelu = sum[1], out.gelu_grad = sum[2], out.max = sum[3];
  out.softmax_grad = sum[4], out.add = sum[5], out.memory_bytes = sum[6];
  return out;
}

}  // namespace kernels
}  // namespace gf
