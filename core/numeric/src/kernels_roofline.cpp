// The roofline of a training step: its work counted from the model's shape, and the element
// rates measured in the process (the products' FMA peak is kernels::fma_peak_gflops).
#include <algorithm>
#include <chrono>
#include <thread>
#include <vector>

#include "growformer/kernels.hpp"

namespace gf {
namespace kernels {

// How the work of one training step is counted (docs/results/speed.md, "The roofline of a
// step"). n = batch x seq rows, d = d_model, F = hidden, qw = heads x d_k, vw = heads x d_v,
// B H T^2 = batch x heads x seq^2 attention scores a layer. Per layer:
//
// Products (2 m n k each), as growformer computes them:
//   forward  Q, K, V together 2 n d (2 qw + vw); scores 2 B H T^2 d_k; P V 2 B H T^2 d_v;
//            output map 2 n vw d; fc1 2 n d F; fc2 2 n F d
//   backward every linear map twice its forward (the input's and the weight's gradient);
//            attention 2 B H T^2 (3 d_k + 2 d_v): the scores recomputed (d_k), dV += P^T dO
//            (d_v), dP = dO V^T (d_v), dQ += dS K (d_k), dK += dS^T Q (d_k)
//   and once per step the classifier, 2 B d C forward and 4 B d C backward.
// Exps: B H T^2 in the forward softmax and B H T^2 again in the backward pass, which
// recomputes the probabilities from the kept row log-sum-exp. GELU: n F forward, n F
// derivatives backward. In-cache passes over the attention tiles: the forward's row maxima
// (B H T^2) and the backward's softmax row pass (B H T^2).
//
// Memory traffic, in floats read plus written, one pass per op over each activation-sized tensor
// it reads or writes (the ops of the tape, in order; tiles that stay in cache are not counted):
//   forward  layer norm 2 n d (x in, y out), twice; Q K V: n d in, n (2 qw + vw) out; K^T:
//            2 n qw; attention: q, K^T, v in, o out, n (2 qw + 2 vw); output map: n vw in, n d
//            out; residual adds 3 n d, twice; fc1 n d + n F; GELU 2 n F; fc2 n F + n d.
//            Sum: 14 n d + 6 n qw + 4 n vw + 4 n F.
//   backward residual adds 3 n d, twice; fc2 2 n d + 2 n F (dX: dY in, dX out; dW: X, dY in);
//            GELU 3 n F (x, dY in, dX out); fc1 2 n F + 2 n d; layer norm 6 n d (x, dY in, dX
//            read and written; x, dY again for gamma and beta), twice; output map 2 n d +
//            2 n vw; attention n (5 qw + 6 vw) (Q, K^T, K, V, O, dO in, V^T made, dQ, dK, dV
//            out); Q K V 4 n (2 qw + vw) + 2 n d (the gradients joined, dX, dW).
//            Sum: 26 n d + 13 n qw + 12 n vw + 7 n F.
//   and once per step: the embedding gather n d, the positions 2 n d, the final norm 2 n d,
//   the mean pool n d (forward); the pool n d, the final norm 6 n d, the positions' and the
//   embedding's gradients n d each (backward); 11 floats per parameter (read forward, read
//   backward, the gradient zeroed and written, AdamW's reads of value, gradient and two moments
//   and its three writes).
StepWork step_work(const StepShape& s) {
  const double B = static_cast<double>(s.batch), T = static_cast<double>(s.seq);
  const double n = B * T, d = static_cast<double>(s.d_model), F = static_cast<double>(s.hidden);
  const double H = static_cast<double>(s.heads), dk = static_cast<double>(s.d_k),
               dv = static_cast<double>(s.d_v), C = static_cast<double>(s.classes);
  const double L = static_cast<double>(s.layers), qw = H * dk, vw = H * dv;
  const double scores = B * H * T * T;  // one layer's attention scores
  StepWork w;
  const double linear_fwd = 2 * n * d * (2 * qw + vw) + 2 * n * vw * d + 4 * n * d * F;
  const double attn_fwd = 2 * scores * (dk + dv), attn_bwd = 2 * scores * (3 * dk + 2 * dv);
  w.product_flops = L * (3 * linear_fwd + attn_fwd + attn_bwd) + 6 * B * d * C;
  w.exp_elements = L * 2 * scores;
  w.gelu_elements = L * n * F;
  w.gelu_grad_elements = L * n * F;
  w.max_elements = L * scores;
  w.softmax_grad_elements = L * scores;
  const double layer = (14 + 26) * n * d + (6 + 13) * n * qw + (4 + 12) * n * vw + (4 + 7) * n * F;
  const double norm_f = s.final_norm ? 1.0 : 0.0;
  const double model = n * d * (1 + 2 + 2 * norm_f + 1) + n * d * (1 + 6 * norm_f + 1 + 1);
  w.memory_bytes = 4.0 * (L * layer + model + 11.0 * static_cast<double>(s.params));
  return w;
}

Roofline roofline(const StepWork& w, const ElementRates& r, double fma_gflops) {
  Roofline out;
  out.products_s = w.product_flops / (fma_gflops * 1e9);
  out.exp_gelu_s = w.exp_elements / r.exp + w.gelu_elements / r.gelu +
                   w.gelu_grad_elements / r.gelu_grad;
  out.in_cache_s = w.max_elements / r.max + w.softmax_grad_elements / r.softmax_grad;
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
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > 2 * seconds)
      break;
  }
  return best;
}

// One thread's rate of measurement KIND (0 exp, 1 GELU, 2 its derivative, 3 row max, 4 the
// softmax backward row pass: elements/s on a row in L1; 5 memory: bytes/s).
double thread_rate(int kind, double seconds, float* sink) {
  constexpr size_t kRow = 512;  // an attention tile's row at T 512: in L1
  constexpr size_t kBurst = 256;  // calls between clock reads: tens of microseconds
  std::vector<float> x(kRow), y(kRow, 0.5f), g(kRow);
  for (size_t j = 0; j < kRow; ++j) {
    x[j] = static_cast<float>(j % 97) / 97.0f;                // [0, 1): exp(x - 1) stays there
    g[j] = 0.1f + 0.4f * static_cast<float>(j % 31) / 31.0f;  // p in [0.1, 0.5]
  }
  double r = 0;
  switch (kind) {
    case 0: r = best_rate(kRow, seconds, kBurst, [&] { exp_shift(x.data(), kRow, 1.0f); }); break;
    case 1: r = best_rate(kRow, seconds, kBurst, [&] { gelu(g.data(), y.data(), kRow); }); break;
    case 2:
      r = best_rate(kRow, seconds, kBurst, [&] { gelu_grad(g.data(), x.data(), y.data(), kRow, false); });
      break;
    case 3: r = best_rate(kRow, seconds, kBurst, [&] { *sink += row_max(x.data(), kRow); }); break;
    case 4:  // ds = p (ds + 1): a fixed point below 1 for p <= 0.5, no subnormals
      r = best_rate(kRow, seconds, kBurst, [&] { softmax_grad_row(y.data(), g.data(), kRow, -1.0f, 1.0f); });
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
  double sum[6] = {0, 0, 0, 0, 0, 0};
  // each measurement on every thread at once (the memory's threads share the bandwidth), the
  // threads' rates summed
  for (int kind = 0; kind < 6; ++kind) {
    std::vector<double> rate(threads, 0.0);
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t)
      pool.emplace_back([&, t] { rate[t] = thread_rate(kind, seconds / 6, &sink[t]); });
    rate[0] = thread_rate(kind, seconds / 6, &sink[0]);
    for (auto& th : pool) th.join();
    for (double r : rate) sum[kind] += r;
  }
  volatile float keep = 0;
  for (float v : sink) keep = keep + v;
  (void)keep;
  ElementRates out;
  out.exp = sum[0], out.gelu = sum[1], out.gelu_grad = sum[2], out.max = sum[3];
  out.softmax_grad = sum[4], out.memory_bytes = sum[5];
  return out;
}

}  // namespace kernels
}  // namespace gf
