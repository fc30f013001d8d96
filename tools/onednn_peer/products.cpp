// gf_peer_products (benchmark only): the products of one linear layer of a training step,
// growformer's kernels against oneDNN's matmul on the same buffers, one primitive at a time,
// so that a gap in `bench --peer onednn` can be named. One thread (the kernels are called as
// the ops call them on each thread; oneDNN with one OpenMP thread):
//   forward    C = X W + b                      kernels::gemm_bias       matmul with a bias
//   dX         C = G W^T                        kernels::gemm_short_k    matmul, W^T a view
//   dW         C += X^T G, 512 rows a call      kernels::gemm_acc_tnd    matmul, sum post-op
//              (X over 1,024 wide: each span's X^T, then gemm_acc_nd, as ops::linear)
// Each pair runs interleaved (growformer, then oneDNN) ROUNDS times after one untimed run;
// the medians, GFLOP/s, the ratio and the fraction of the FMA peak measured in this run.
//
// With --attention D (repeatable), the products of one tile of ops::attention instead, for heads
// D wide: a tile of R query rows (kernels::attention_block_rows()) against --keys keys, on
// buffers that stay in cache, as the attention's tiles are (each timed run repeats the product
// until it has done about 5 MFLOP):
//   scores     S = Q K^T / sqrt(D)   R x D x T   kernels::gemm_short_k   matmul, output scale
//   output     O += P V              R x T x D   kernels::gemm_acc_nd    matmul, sum post-op
//   key grad   dK += dS^T Q          T x R x D   kernels::gemm_acc_tnd   matmul, sum post-op
// (dP = dO V^T is the scores' product with D = d_v; dQ += dS K and dV += P^T dO the other two's.)
//
//   gf_peer_products [--tokens N] [--in K] [--out N] [--rounds R]   (default: d 512's layers)
//   gf_peer_products --attention D [--attention D ...] [--keys T] [--rounds R]
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "growformer/kernels.hpp"

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Pair {
  double gf, dnnl;
};

// ROUNDS interleaved runs of A then B after one of each untimed: the medians
Pair interleaved(const std::function<void()>& a, const std::function<void()>& b, int rounds) {
  a();
  b();
  std::vector<double> ta, tb;
  for (int r = 0; r < rounds; ++r) {
    const double t0 = now();
    a();
    const double t1 = now();
    b();
    const double t2 = now();
    ta.push_back(t1 - t0);
    tb.push_back(t2 - t1);
  }
  std::sort(ta.begin(), ta.end());
  std::sort(tb.begin(), tb.end());
  return {ta[ta.size() / 2], tb[tb.size() / 2]};
}

std::vector<float> filled(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<float>((i * 2654435761u + seed) % 1000) * 1e-3f - 0.5f;
  return v;
}

// max |a - b| over max |b|: the two libraries' outputs of one product
double disagreement(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, top = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    top = std::max(top, std::fabs(static_cast<double>(b[i])));
  }
  return top > 0 ? diff / top : diff;
}

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;
dnnl::memory::desc md(long r, long c, tag t) { return dnnl::memory::desc({r, c}, dt::f32, t); }

struct Options {
  long m = 4096, k = 512, keys = 512;
  std::vector<long> outs, heads;
  int rounds = 15;
};

// the command line into O; 0, or the exit status (2) after a message
int parse_options(int argc, char** argv, Options& o) {
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const long v = std::atol(argv[i + 1]);
    if (a == "--tokens")
      o.m = v;
    else if (a == "--in")
      o.k = v;
    else if (a == "--out")
      o.outs.push_back(v);
    else if (a == "--rounds")
      o.rounds = static_cast<int>(v);
    else if (a == "--attention" && v > 0)
      o.heads.push_back(v);
    else if (a == "--keys")
      o.keys = v;
    else {
      std::fprintf(stderr, "gf_peer_products: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if ((argc - 1) % 2 != 0 || o.m <= 0 || o.k <= 0 || o.keys <= 0 || o.rounds <= 0) {
    std::fprintf(stderr,
                 "usage: gf_peer_products [--tokens N] [--in K] [--out N ...] [--rounds R]\n"
                 "       gf_peer_products --attention D [--attention D ...] [--keys T] "
                 "[--rounds R]\n");
    return 2;
  }
  if (o.outs.empty())
    o.outs = {3 * o.k, 4 * o.k, o.k};  // the joined projections, the MLP's, the output map
  return 0;
}

// what every timed product shares: oneDNN's engine and stream, the FMA peak of this run, the
// rounds, and the table's time unit (a tile's products take microseconds, a layer's milliseconds)
struct Bench {
  double peak;
  int rounds;
  double per_s;
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream s{eng};

  // one row of the table: the medians P of an M x K x N product
  void row(const char* what, long M, long K, long N, Pair p) const {
    const double fl = 2.0 * M * K * N;
    std::printf("| %s | %ld x %ld x %ld | %.2f | %.2f | %.3f | %.0f %% | %.0f %% |\n", what, M, K,
                N, p.gf * per_s, p.dnnl * per_s, p.gf / p.dnnl, 100 * fl / p.gf / 1e9 / peak,
                100 * fl / p.dnnl / 1e9 / peak);
  }
};

// the buffers of one attention tile of heads D wide: R query rows against T keys
struct Tile {
  long R, T, D;
  std::vector<float> Q, KT, V, P, S, S2, O, O2, dK, dK2;
  long reps;  // each timed run repeats a product until it has done about 5 MFLOP
  Tile(long r, long t, long d)
      : R(r),
        T(t),
        D(d),
        Q(filled(r * d, 1)),
        KT(filled(d * t, 2)),
        V(filled(t * d, 3)),
        P(filled(r * t, 4)),
        S(r * t),
        S2(r * t),
        O(r * d, 0.0f),
        O2(r * d, 0.0f),
        dK(t * d, 0.0f),
        dK2(t * d, 0.0f),
        reps(std::max(1L, 5000000L / (2 * r * t * d))) {}
};

// One product of a tile: growformer's call GF against oneDNN's matmul C (M x N) = [C +]
// out_scale A B (A: M x K in layout TA, B: K x N) on the same buffers, REPS calls a timed run;
// then MINE against THEIRS into WORST
void tile_product(Bench& b, const Tile& t, const char* what, long M, long K, long N, tag ta,
                  float* a, float* bm, float* c, bool sum, float out_scale,
                  const std::function<void()>& gf, const std::vector<float>& mine,
                  const std::vector<float>& theirs, double& worst) {
  dnnl::primitive_attr attr;
  if (out_scale != 1.0f) attr.set_output_scales(0, {out_scale});
  if (sum) {
    dnnl::post_ops po;
    po.append_sum(1.0f);
    attr.set_post_ops(po);
  }
  const auto da = md(M, K, ta), db = md(K, N, tag::ab), dc = md(M, N, tag::ab);
  dnnl::matmul mm(dnnl::matmul::primitive_desc(dnnl::matmul::desc(da, db, dc), attr, b.eng));
  dnnl::memory ma(da, b.eng, a), mb(db, b.eng, bm), mc(dc, b.eng, c);
  const long reps = t.reps;
  auto repeated = [reps](const std::function<void()>& f) {
    return [reps, f] {
      for (long i = 0; i < reps; ++i) f();
    };
  };
  char label[64];
  std::snprintf(label, sizeof label, "d %ld: %s", t.D, what);
  const Pair p = interleaved(
      repeated(gf), repeated([&] {
        mm.execute(b.s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
        b.s.wait();
      }),
      b.rounds);
  b.row(label, M, K, N, Pair{p.gf / reps, p.dnnl / reps});
  worst = std::max(worst, disagreement(mine, theirs));
}

// the three products of one tile of ops::attention for heads D wide, the buffers in cache
void tile_products(Bench& b, long R, long T, long D, double& worst) {
  Tile t(R, T, D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));  // as the attention scales
  // S = Q K^T / sqrt(D), K^T stored D x T as the attention keeps it
  tile_product(
      b, t, "scores S = Q K^T / sqrt(d)", R, D, T, tag::ab, t.Q.data(), t.KT.data(), t.S2.data(),
      false, scale,
      [&] {
        gf::kernels::gemm_short_k(R, T, D, scale, t.Q.data(), D, t.KT.data(), T, t.S.data(), T);
      },
      t.S, t.S2, worst);
  // O += P V (both outputs summed over the same number of runs)
  tile_product(
      b, t, "output O += P V", R, T, D, tag::ab, t.P.data(), t.V.data(), t.O2.data(), true, 1.0f,
      [&] { gf::kernels::gemm_acc_nd(R, T, D, 1.0f, t.P.data(), T, t.V.data(), D, t.O.data(), D); },
      t.O, t.O2, worst);
  // dK += dS^T Q (dS: P's buffer, read transposed), summed over the tile's R rows
  tile_product(
      b, t, "key grad dK += dS^T Q", T, R, D, tag::ba, t.P.data(), t.Q.data(), t.dK2.data(), true,
      1.0f,
      [&] {
        gf::kernels::gemm_acc_tnd(R, T, D, 1.0f, t.P.data(), T, t.Q.data(), D, t.dK.data(), D);
      },
      t.dK, t.dK2, worst);
}

// --attention: the tiles' products for every head width; 1 where the libraries disagree
int run_tiles(Bench& b, const Options& o) {
  // one tile of ops::attention: R query rows against T keys, the buffers in cache
  const long R = static_cast<long>(std::max<size_t>(1, gf::kernels::attention_block_rows()));
  double worst = 0;  // the outputs checked against oneDNN's after each product's runs
  for (long D : o.heads) tile_products(b, R, o.keys, D, worst);
  std::printf("\noutputs against oneDNN's: largest difference %.1e of the largest value\n", worst);
  if (worst > 1e-4) {
    std::fprintf(stderr, "gf_peer_products: the two libraries' products disagree (%.1e)\n", worst);
    return 1;
  }
  return 0;
}

// the buffers of one linear layer's products: X (m x K), W (K x N), G (m x N), b (N), the
// output C, W^T and the two weight gradients
struct Layer {
  long m, K, N;
  std::vector<float> X, W, G, b, C, Wt, D, D2;
  Layer(long m_, long k, long n)
      : m(m_),
        K(k),
        N(n),
        X(filled(m_ * k, 1)),
        W(filled(k * n, 2)),
        G(filled(m_ * n, 3)),
        b(filled(n, 4)),
        C(std::max({m_ * n, m_ * k, k * n})),
        Wt(k * n),
        D(k * n, 0.0f),
        D2(k * n, 0.0f) {
    gf::kernels::transpose_tiled(W.data(), K, N, N, Wt.data(), K);
  }
};

// as ops::linear calls them on one thread (core/numeric/src/ops_linear.cpp): rows of X (G for
// dX) longer than 1,024 floats in spans of 512, the weight packed once a call for them all
void spans(long rows, long len, const std::function<void(long, long)>& fn) {
  const long span = len > 1024 ? 512 : rows;
  for (long r0 = 0; r0 < rows; r0 += span) fn(r0, std::min(span, rows - r0));
}

// forward: C = X W + b
void time_forward(Bench& bn, Layer& l) {
  const long m = l.m, K = l.K, N = l.N;
  dnnl::matmul mm(
      dnnl::matmul::primitive_desc(dnnl::matmul::desc(md(m, K, tag::ab), md(K, N, tag::ab),
                                                      md(1, N, tag::ab), md(m, N, tag::ab)),
                                   bn.eng));
  dnnl::memory a(md(m, K, tag::ab), bn.eng, l.X.data()), w(md(K, N, tag::ab), bn.eng, l.W.data()),
      bb(md(1, N, tag::ab), bn.eng, l.b.data()), c(md(m, N, tag::ab), bn.eng, l.C.data());
  bn.row(
      "forward X W + b", m, K, N,
      interleaved(
          [&] {
            const gf::kernels::Panels pw =
                K > 1024 ? gf::kernels::pack_panels(m, K, N, l.W.data(), N) : gf::kernels::Panels();
            spans(m, K, [&](long r0, long r) {
              gf::kernels::gemm_bias(r, N, K, l.X.data() + r0 * K, K, l.W.data(), N, l.b.data(),
                                     l.C.data() + r0 * N, N, &pw);
            });
          },
          [&] {
            mm.execute(
                bn.s,
                {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_BIAS, bb}, {DNNL_ARG_DST, c}});
            bn.s.wait();
          },
          bn.rounds));
}

// input gradient: C = G W^T
void time_input_grad(Bench& bn, Layer& l) {
  const long m = l.m, K = l.K, N = l.N;
  dnnl::matmul mm(dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(md(m, N, tag::ab), md(N, K, tag::ba), md(m, K, tag::ab)), bn.eng));
  dnnl::memory a(md(m, N, tag::ab), bn.eng, l.G.data()), w(md(N, K, tag::ba), bn.eng, l.W.data()),
      c(md(m, K, tag::ab), bn.eng, l.C.data());
  bn.row("dX = G W^T", m, N, K,
         interleaved(
             [&] {
               const gf::kernels::Panels pwt =
                   N > 1024 ? gf::kernels::pack_panels(m, N, K, l.Wt.data(), K, true)
                            : gf::kernels::Panels();
               spans(m, N, [&](long r0, long r) {
                 gf::kernels::gemm_short_k(r, K, N, 1.0f, l.G.data() + r0 * N, N, l.Wt.data(), K,
                                           l.C.data() + r0 * K, K, &pwt);
               });
             },
             [&] {
               mm.execute(bn.s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, w}, {DNNL_ARG_DST, c}});
               bn.s.wait();
             },
             bn.rounds));
}

// weight gradient, accumulated as ops::linear's backward pass accumulates it: D += X^T G
void time_weight_grad(Bench& bn, Layer& l) {
  const long m = l.m, K = l.K, N = l.N;
  dnnl::primitive_attr attr;
  dnnl::post_ops po;
  po.append_sum(1.0f);
  attr.set_post_ops(po);
  dnnl::matmul mm(dnnl::matmul::primitive_desc(
      dnnl::matmul::desc(md(K, m, tag::ba), md(m, N, tag::ab), md(K, N, tag::ab)), attr, bn.eng));
  dnnl::memory a(md(K, m, tag::ba), bn.eng, l.X.data()), g(md(m, N, tag::ab), bn.eng, l.G.data()),
      c(md(K, N, tag::ab), bn.eng, l.D2.data());
  constexpr long kSpan = 512;
  std::vector<float> Xt(K * kSpan);
  bn.row("dW += X^T G", K, m, N,
         interleaved(
             [&] {
               // X wider than 1,024: each span transposed first, then read along X^T's rows
               for (long r0 = 0; r0 < m; r0 += kSpan) {
                 const long rows = std::min(kSpan, m - r0);
                 if (K > 1024) {
                   gf::kernels::transpose_tiled(l.X.data() + r0 * K, rows, K, K, Xt.data(), rows);
                   gf::kernels::gemm_acc_nd(K, rows, N, 1.0f, Xt.data(), rows, l.G.data() + r0 * N,
                                            N, l.D.data(), N);
                 } else {
                   gf::kernels::gemm_acc_tnd(rows, K, N, 1.0f, l.X.data() + r0 * K, K,
                                             l.G.data() + r0 * N, N, l.D.data(), N);
                 }
               }
             },
             [&] {
               mm.execute(bn.s, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, g}, {DNNL_ARG_DST, c}});
               bn.s.wait();
             },
             bn.rounds));
}

// the layer's products for every output width: the shapes as the layer sees them (forward and dX
// are M = tokens rows; dW is (in x out) summed over the tokens); for each output width both
// directions of the map (in -> out, and out -> in: the MLP's second layer)
void run_layers(Bench& b, const Options& o) {
  std::vector<std::pair<long, long>> maps;
  for (long n : o.outs) {
    maps.push_back({o.k, n});
    if (n == 4 * o.k) maps.push_back({n, o.k});
  }
  for (const auto& kn : maps) {
    Layer l(o.m, kn.first, kn.second);
    time_forward(b, l);
    time_input_grad(b, l);
    time_weight_grad(b, l);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  if (const int status = parse_options(argc, argv, o)) return status;
  omp_set_num_threads(1);
  const double peak = gf::kernels::fma_peak_gflops(1);
  // a tile's products take microseconds, a layer's milliseconds
  const bool tile = !o.heads.empty();
  const char* unit = tile ? "us" : "ms";
  Bench b{peak, o.rounds, tile ? 1e6 : 1e3};
  std::printf(
      "one thread; SIMD kernels %s; FMA peak %.0f GFLOP/s (measured now); oneDNN %d.%d.%d\n",
      gf::kernels::simd_name().c_str(), peak, dnnl_version()->major, dnnl_version()->minor,
      dnnl_version()->patch);
  std::printf(
      "| product | M x K x N | growformer %s | oneDNN %s | growformer / oneDNN | "
      "growformer %% of peak | oneDNN %% of peak |\n|---|---|---|---|---|---|---|\n",
      unit, unit);
  if (tile) return run_tiles(b, o);
  run_layers(b, o);
  return 0;
}
