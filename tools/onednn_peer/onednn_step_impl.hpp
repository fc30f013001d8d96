// The private half of the oneDNN step (onednn_step.hpp): MhaStep::Impl, the step's buffers,
// primitives and lists, and the helpers its two translation units share: onednn_step.cpp
// (buffers, primitive builders, the plain loops, MhaStep's members) and onednn_step_lists.cpp
// (the forward and backward lists a step executes). Included by those two files only.
#pragma once

#include "onednn_step.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <stdexcept>
#include <unordered_map>
#include <utility>

namespace gf_onednn {

namespace step_detail {

using dnnl::memory;
using Dims = memory::dims;
using dt = memory::data_type;
using Args = std::unordered_map<int, memory>;

/// Row-major descriptor (f32 unless TYPE says).
inline memory::desc dense(const Dims& dims, dt type = dt::f32) {
  Dims strides(dims.size());
  memory::dim s = 1;
  for (size_t i = dims.size(); i-- > 0;) {
    strides[i] = s;
    s *= dims[i];
  }
  return memory::desc(dims, type, strides);
}

/// A strided view (the same buffer read with other strides).
inline memory::desc view(const Dims& dims, const Dims& strides) {
  return memory::desc(dims, dt::f32, strides);
}

/// MD's dimensions and strides, in bf16 elements: the view of a buffer's bf16 copy.
inline memory::desc as_bf16(const memory::desc& md) {
  const auto& b = md.data.format_desc.blocking;
  return memory::desc(md.dims(), dt::bf16, Dims(b.strides, b.strides + md.data.ndims));
}

inline size_t aligned_bytes(size_t floats) { return (floats * sizeof(float) + 63) / 64 * 64; }
/// The bytes of N bf16 elements, allocated as whole floats.
inline size_t aligned_bytes_bf16(size_t n) { return aligned_bytes((n + 1) / 2); }

// Chunks of the attention (samples, heads): each chunk's block of the probabilities
// (samples x heads x T x T) is made, normalised and multiplied by V one after the other while it
// is in cache, and kept for the backward pass. A chunk holds at most
// s.attention_chunk_bytes (0: the L2 caches of the threads), at least one head of one sample;
// its heads divide the heads and, when all heads fit, its samples divide the batch.
std::pair<size_t, size_t> chunk_of(const StepShape& s, size_t threads);

struct FreeFloat {
  void operator()(float* p) const { std::free(p); }
};

}  // namespace step_detail

// the step's two translation units read these helpers unqualified
using namespace step_detail;

struct MhaStep::Impl {
  struct Param {
    std::string name;
    std::vector<size_t> shape;
    size_t n = 0;
    float *w = nullptr, *g = nullptr, *m = nullptr, *v = nullptr;
    bool decays = false;
  };
  /// A primitive with its bound arguments, or a plain loop.
  struct Op {
    dnnl::primitive prim;
    Args args;
    std::function<void()> loop;
  };
  /// A layer's parameters and the activations its backward pass reads.
  struct Layer {
    Param *ln1_g, *ln1_b, *wq, *bq, *wk, *bk, *wv, *bv, *wo, *bo, *ln2_g, *ln2_b, *w1, *b1, *w2,
        *b2;
    float *x, *h1, *mean1, *var1, *q, *k, *v, *p, *o, *x1, *h2, *mean2, *var2, *u, *act, *out;
  };
  /// One matmul: dst = scale * src x wei [+ bias] [+ dst (accumulate)] [+ residual]. BF16: a
  /// product of the bf16 step, src and wei read from the bf16 copies of A and B (shadow_of: the
  /// same elements), or from A16 where it is set; the list must have converted them before.
  struct MM {
    memory::desc src, wei, dst;
    float *a, *b, *c;
    float* bias = nullptr;
    float scale = 1.0f;
    bool accumulate = false;
    float* residual = nullptr;
    bool bf16 = false;
    uint16_t* a16 = nullptr;
  };
  /// The bf16 copy of a float buffer (n elements) that the bf16 products read.
  struct Shadow {
    uint16_t* h;
    size_t n;
  };

  dnnl::engine eng;
  dnnl::stream strm;
  StepShape s;
  AdamWSettings opt;
  size_t threads;
  size_t bytes = 0;
  std::vector<std::unique_ptr<float, FreeFloat>> bufs;
  std::vector<std::unique_ptr<Param>> params;
  std::vector<Layer> layers;
  Param *embed = nullptr, *pos = nullptr, *lnf_g = nullptr, *lnf_b = nullptr, *cls_w = nullptr,
        *cls_b = nullptr;
  float *x0 = nullptr, *z = nullptr, *meanf = nullptr, *varf = nullptr, *pooled = nullptr,
        *logits = nullptr, *dlogits = nullptr, *dpooled = nullptr, *ones = nullptr,
        *partial = nullptr, *lnf_shift_scratch = nullptr;
  size_t partial_size = 0;
  float *gx = nullptr, *gtmp = nullptr, *gh = nullptr, *gF = nullptr, *gz = nullptr, *dO = nullptr,
        *dQ = nullptr, *dK = nullptr, *dV = nullptr, *dP = nullptr;
  std::map<const float*, Shadow> shadows;  // float buffer -> its bf16 copy (under bf16)
  uint16_t* p16 = nullptr;                 // a chunk of the probabilities in bf16
  std::vector<Op> fwd, bwd;
  std::map<std::string, std::set<std::string>> impls;
  size_t matmuls_bf16 = 0, matmuls_f32 = 0;  // bound into the lists
  // the attention runs on chunks of CB samples x CH heads (one block of the probabilities)
  memory::dim cb = 1, ch = 1;
  long adam_t = 0;
  float loss = 0;
  const int32_t* ids = nullptr;
  const int32_t* labels = nullptr;

  Impl(const StepShape& shape, const AdamWSettings& a, size_t n_threads)
      : eng(dnnl::engine::kind::cpu, 0), strm(eng), s(shape), opt(a), threads(n_threads) {}

  memory::dim N() const { return static_cast<memory::dim>(s.batch * s.seq); }
  memory::dim D() const { return static_cast<memory::dim>(s.d_model); }

  float* alloc(size_t n) {
    const size_t nb = aligned_bytes(n);
    void* p = std::aligned_alloc(64, nb);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, nb);
    bufs.emplace_back(static_cast<float*>(p));
    bytes += nb;
    return static_cast<float*>(p);
  }
  Param* param(const std::string& name, std::vector<size_t> shape) {
    auto p = std::make_unique<Param>();
    p->name = name;
    p->n = 1;
    for (size_t e : shape) p->n *= e;
    p->shape = std::move(shape);
    p->w = alloc(p->n);
    p->g = alloc(p->n);
    p->m = alloc(p->n);
    p->v = alloc(p->n);
    p->decays = opt.decay == AdamWSettings::Decay::All ||
                (opt.decay == AdamWSettings::Decay::Matrices && p->shape.size() >= 2);
    params.push_back(std::move(p));
    return params.back().get();
  }
  /// A bf16 copy of F's N elements, read by shadow_of (under bf16; else null).
  uint16_t* shadow(float* f, size_t n) {
    if (!s.bf16) return nullptr;
    uint16_t* h = reinterpret_cast<uint16_t*>(alloc((n + 1) / 2));
    shadows[f] = {h, n};
    return h;
  }
  /// The element of a bf16 copy that holds P's value.
  uint16_t* shadow_of(const float* p) const {
    auto it = shadows.upper_bound(p);
    if (it != shadows.begin()) {
      --it;
      if (p < it->first + it->second.n) return it->second.h + (p - it->first);
    }
    throw std::logic_error("onednn peer: a bf16 product reads a buffer with no bf16 copy");
  }
  memory mem(const memory::desc& md, void* p) const { return memory(md, eng, p); }
  void note(const char* kind, const dnnl::primitive_desc_base& pd) {
    impls[kind].insert(pd.impl_info_str());
  }
  static void add(std::vector<Op>& list, dnnl::primitive p, Args args) {
    list.push_back(Op{std::move(p), std::move(args), {}});
  }
  static void add_loop(std::vector<Op>& list, std::function<void()> f) {
    list.push_back(Op{dnnl::primitive(), {}, std::move(f)});
  }

  void allocate();
  void build_forward();
  void build_backward();
  void build_layer_forward(const Layer& l);
  void build_layer_backward(const Layer& l);
  void matmul(std::vector<Op>& list, const MM& m);
  dnnl::primitive matmul_prim(const MM& m);
  void matmul_bind(std::vector<Op>& list, const dnnl::primitive& p, const MM& m);
  void choose_chunk();
  void attention_forward(const Layer& l);
  void attention_backward(const Layer& l);
  void column_sums(std::vector<Op>& list, float* src, memory::dim rows, memory::dim cols,
                   float* dst, float scale = 1.0f);
  void add_into(std::vector<Op>& list, const memory::desc& a_md, float* a, const memory::desc& b_md,
                float* b);
  void linear_fwd(float* x, memory::dim rows, Param* w, Param* b, float* y, float* residual);
  void linear_bwd(float* x, float* dy, memory::dim rows, Param* w, Param* b, float* dx,
                  bool accumulate_dx);
  dnnl::layer_normalization_forward::primitive_desc ln_pd() const;
  void ln_fwd(float* x, Param* g, Param* b, float* y, float* mean, float* var);
  void ln_bwd(float* x, float* mean, float* var, Param* g, Param* b, float* dy, float* dx,
              float* diff_shift = nullptr);
  void convert(std::vector<Op>& list, float* src, uint16_t* dst, size_t n);
  void round_in(std::vector<Op>& list, float* f);
  void round_weights();
  void gather();
  void scatter_embedding_grad();
  void cross_entropy();
  void run(std::vector<Op>& list);
};

}  // namespace gf_onednn
