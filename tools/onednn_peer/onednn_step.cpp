// The bench's training step in oneDNN primitives (onednn_step.hpp). Written as oneDNN's own
// examples recommend: every primitive is created once, with its arguments bound to buffers
// allocated once, and a step executes the two lists in order on one stream; oneDNN threads
// with its OpenMP runtime (omp_set_num_threads: the bench's thread count).
// - Linear layers: matmul on plain (row-major) layouts with the bias and, for the two residual
//   adds, a binary-add post-op fused; weight gradients are matmul on a transposed view of the
//   input, input gradients matmul on a transposed view of the weight (the three projections'
//   summed with a sum post-op), bias gradients matmul with a row of ones (column_sums).
// - Attention: the per-head products read and write the heads' columns of the projections in
//   place through strided 4-D views (B, H, T, d_head), so no transpose is copied; the scores are
//   scaled by an output-scale attribute; softmax forward and backward are oneDNN's. It runs on
//   chunks of samples x heads (attention_chunk) so that each chunk's probabilities are made,
//   normalised and multiplied by V while they are in cache; they are kept (B H T T floats per
//   layer) for the backward pass, which recomputes nothing.
// - Layer normalisation and the exact (erf) GELU are oneDNN's forward and backward primitives;
//   the position add and the residual gradient adds are binary primitives; the mean pooling is
//   a matmul with a row of ones per sample (forward) and a rank-1 matmul (backward); the
//   position table's gradient is column sums over the samples.
// - Plain loops, where oneDNN has no primitive: the embedding gather and its scatter-add
//   gradient, the cross-entropy loss and its gradient, and AdamW (OpenMP over elements).
// - bf16 (StepShape::bf16, growformer's `precision: bf16`): each product's matmul reads bf16
//   copies of its two inputs (shadow_of: a copy per float32 buffer, the same strides) and writes
//   float32 with the same bias and post-ops; reorders in the lists make the copies once the
//   float32 values are final (the weights at the head of the forward list, an attention
//   chunk's probabilities into one chunk-sized copy after its softmax and again in the backward
//   pass). Everything that is not a product of docs/NUMERICS.md's table stays float32.
// implementations() names what oneDNN chose for each kind (brg: BRGEMM, gemm:jit, jit:...).
#include "onednn_step_impl.hpp"

#include <omp.h>
#include <unistd.h>

namespace gf_onednn {

// declared, with what it does, in onednn_step_impl.hpp
std::pair<size_t, size_t> step_detail::chunk_of(const StepShape& s, size_t threads) {
  const size_t pair = s.seq * s.seq * sizeof(float);
  const long l2 = sysconf(_SC_LEVEL2_CACHE_SIZE);
  const size_t caches = (l2 > 0 ? static_cast<size_t>(l2) : size_t{1} << 20) * threads;
  const size_t budget = std::max(pair, s.attention_chunk_bytes ? s.attention_chunk_bytes : caches);
  size_t hc = 1, bc = 1;
  for (size_t h = 1; h <= s.heads; ++h)
    if (s.heads % h == 0 && h * pair <= budget) hc = h;
  if (hc == s.heads)
    for (size_t b = 1; b <= s.batch; ++b)
      if (s.batch % b == 0 && b * s.heads * pair <= budget) bc = b;
  return {bc, hc};
}

namespace {

// The rows of a block of column_sums: the largest divisor of ROWS up to 256.
size_t partial_block(size_t rows) {
  for (size_t r = std::min<size_t>(rows, 256); r > 1; --r)
    if (rows % r == 0) return r;
  return 1;
}

// The floats of column_sums' block sums: over the rows of the batch (the projections' and the
// MLP's bias gradients, the final norm's shift) and over the samples (the positions' gradient,
// the classifier's bias).
size_t partial_floats(const StepShape& s) {
  const size_t n = s.batch * s.seq, nb_rows = n / partial_block(n);
  const size_t nb_samples = s.batch / partial_block(s.batch);
  const size_t widest = std::max({s.d_model, s.heads * s.d_k, s.heads * s.d_v, s.hidden});
  size_t out = nb_rows > 1 ? nb_rows * widest : 0;
  if (nb_samples > 1) out = std::max(out, nb_samples * std::max(s.seq * s.d_model, s.classes));
  return std::max<size_t>(out, 1);
}

std::string isa_name(dnnl::cpu_isa isa) {
  switch (isa) {
    case dnnl::cpu_isa::sse41:
      return "sse41";
    case dnnl::cpu_isa::avx:
      return "avx";
    case dnnl::cpu_isa::avx2:
      return "avx2";
    case dnnl::cpu_isa::avx2_vnni:
      return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core:
      return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "isa " + std::to_string(static_cast<int>(isa));
  }
}

/// Caps oneDNN's instruction set to growformer's kernel set, once, before any primitive.
void cap_isa(const std::string& max_isa) {
  static bool done = false;
  if (done || max_isa.empty()) return;
  done = true;
  dnnl::cpu_isa isa = dnnl::cpu_isa::all;
  if (max_isa == "avx512_amx")
    isa = dnnl::cpu_isa::avx512_core_amx;
  else if (max_isa == "avx512_bf16")
    isa = dnnl::cpu_isa::avx512_core_bf16;
  else if (max_isa == "avx512")
    isa = dnnl::cpu_isa::avx512_core;
  else if (max_isa == "avx2")
    isa = dnnl::cpu_isa::avx2;
  else if (max_isa == "sse2")
    isa = dnnl::cpu_isa::sse41;  // oneDNN's narrowest set
  else
    throw std::invalid_argument("onednn peer: unknown instruction set `" + max_isa + "`");
  // fails (and changes nothing) once oneDNN has dispatched: the effective set is reported
  (void)dnnl::set_max_cpu_isa(isa);
}

}  // namespace

// ---- buffers -------------------------------------------------------------------------------

void MhaStep::Impl::allocate() {
  const size_t n = s.batch * s.seq, d = s.d_model, H = s.heads, qw = H * s.d_k, vw = H * s.d_v;
  const size_t F = s.hidden, probs = s.batch * H * s.seq * s.seq;
  embed = param("embed", {s.vocab, d});
  pos = param("pos", {s.max_len, d});
  x0 = alloc(n * d);
  float* x = x0;
  for (size_t i = 0; i < s.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer l{};
    l.ln1_g = param(p + "ln1.gamma", {d});
    l.ln1_b = param(p + "ln1.beta", {d});
    l.wq = param(p + "attn.w_q", {d, qw});
    l.bq = param(p + "attn.b_q", {qw});
    l.wk = param(p + "attn.w_k", {d, qw});
    l.bk = param(p + "attn.b_k", {qw});
    l.wv = param(p + "attn.w_v", {d, vw});
    l.bv = param(p + "attn.b_v", {vw});
    l.wo = param(p + "attn.w_o", {vw, d});
    l.bo = param(p + "attn.b_o", {d});
    l.ln2_g = param(p + "ln2.gamma", {d});
    l.ln2_b = param(p + "ln2.beta", {d});
    l.w1 = param(p + "mlp.fc1.w", {d, F});
    l.b1 = param(p + "mlp.fc1.b", {F});
    l.w2 = param(p + "mlp.fc2.w", {F, d});
    l.b2 = param(p + "mlp.fc2.b", {d});
    l.x = x;
    l.h1 = alloc(n * d), l.mean1 = alloc(n), l.var1 = alloc(n);
    l.q = alloc(n * qw), l.k = alloc(n * qw), l.v = alloc(n * vw);
    l.p = alloc(probs), l.o = alloc(n * vw), l.x1 = alloc(n * d);
    l.h2 = alloc(n * d), l.mean2 = alloc(n), l.var2 = alloc(n);
    l.u = alloc(n * F), l.act = alloc(n * F), l.out = alloc(n * d);
    x = l.out;
    layers.push_back(l);
  }
  for (const Layer& l : layers) {  // under bf16: the copies the layer's products read
    for (Param* w : {l.wq, l.wk, l.wv, l.wo, l.w1, l.w2}) shadow(w->w, w->n);
    shadow(l.h1, n * d), shadow(l.q, n * qw), shadow(l.k, n * qw), shadow(l.v, n * vw);
    shadow(l.o, n * vw), shadow(l.h2, n * d), shadow(l.act, n * F);
  }
  if (s.final_norm) {
    lnf_g = param("ln_f.gamma", {d});
    lnf_b = param("ln_f.beta", {d});
    z = alloc(n * d), meanf = alloc(n), varf = alloc(n), gz = alloc(n * d);
    lnf_shift_scratch = alloc(d);
  }
  cls_w = param("classifier.w", {d, s.classes});
  cls_b = param("classifier.b", {s.classes});
  pooled = alloc(s.batch * d), logits = alloc(s.batch * s.classes);
  dlogits = alloc(s.batch * s.classes), dpooled = alloc(s.batch * d), ones = alloc(n);
  partial_size = partial_floats(s);
  partial = alloc(partial_size);
  for (size_t i = 0; i < n; ++i) ones[i] = 1.0f;
  gx = alloc(n * d), gtmp = alloc(n * d), gh = alloc(n * d), gF = alloc(n * F);
  dO = alloc(n * vw), dQ = alloc(n * qw), dK = alloc(n * qw), dV = alloc(n * vw);
  const size_t chunk = static_cast<size_t>(cb * ch) * s.seq * s.seq;
  dP = alloc(chunk);
  if (s.bf16) {
    shadow(cls_w->w, cls_w->n), shadow(pooled, s.batch * d), shadow(dlogits, s.batch * s.classes);
    shadow(gx, n * d), shadow(gF, n * F), shadow(dO, n * vw), shadow(dQ, n * qw);
    shadow(dK, n * qw), shadow(dV, n * vw), shadow(dP, chunk);
    p16 = reinterpret_cast<uint16_t*>(alloc((chunk + 1) / 2));
  }
  // the layer-norm weights start at one, as growformer's do
  for (auto& p : params)
    if (p->name.size() > 6 && p->name.compare(p->name.size() - 6, 6, ".gamma") == 0)
      for (size_t i = 0; i < p->n; ++i) p->w[i] = 1.0f;
}

size_t MhaStep::bytes_needed(const StepShape& s, size_t threads) {
  const size_t n = s.batch * s.seq, d = s.d_model, H = s.heads, qw = H * s.d_k, vw = H * s.d_v;
  const size_t F = s.hidden, probs = s.batch * H * s.seq * s.seq, C = s.classes;
  auto b = [](size_t floats) { return aligned_bytes(floats); };
  auto par = [&](size_t floats) { return 4 * b(floats); };  // value, gradient, m, v
  size_t layer = 2 * par(d) + 2 * par(d * qw) + 2 * par(qw) + par(d * vw) + par(vw) + par(vw * d) +
                 par(d) + 2 * par(d) + par(d * F) + par(F) + par(F * d) + par(d);
  layer += 4 * b(n * d) + 4 * b(n) + 2 * b(n * qw) + 2 * b(n * vw) + b(probs) + 2 * b(n * F);
  size_t total = par(s.vocab * d) + par(s.max_len * d) + b(n * d) + s.layers * layer;
  if (s.final_norm) total += 2 * par(d) + 2 * b(n * d) + 2 * b(n);
  if (s.final_norm) total += b(d);
  total += par(d * C) + par(C) + 2 * b(s.batch * d) + 2 * b(s.batch * C) + b(n);
  total += b(partial_floats(s));
  const auto [bc, hc] = chunk_of(s, threads);
  const size_t chunk = bc * hc * s.seq * s.seq;
  total += 3 * b(n * d) + b(n * F) + 2 * b(n * vw) + 2 * b(n * qw) + b(chunk);
  if (!s.bf16) return total;
  auto h = [](size_t n16) { return aligned_bytes_bf16(n16); };
  const size_t weights = 2 * h(d * qw) + 2 * h(d * vw) + 2 * h(d * F);
  total += s.layers * (weights + 2 * h(n * d) + 2 * h(n * qw) + 2 * h(n * vw) + h(n * F));
  total += h(d * C) + h(s.batch * d) + h(s.batch * C);
  total += h(n * d) + h(n * F) + 2 * h(n * vw) + 2 * h(n * qw) + 2 * h(chunk);
  return total;
}

// ---- primitive builders --------------------------------------------------------------------

dnnl::primitive MhaStep::Impl::matmul_prim(const MM& m) {
  if (m.accumulate && m.residual)
    throw std::logic_error("onednn peer: one post-op per matmul (sum or residual add)");
  dnnl::primitive_attr attr;
  if (m.scale != 1.0f) attr.set_output_scales(0, {m.scale});
  dnnl::post_ops po;
  if (m.accumulate) po.append_sum(1.0f);
  if (m.residual) po.append_binary(dnnl::algorithm::binary_add, m.dst);
  attr.set_post_ops(po);
  const memory::desc src = m.bf16 ? as_bf16(m.src) : m.src, wei = m.bf16 ? as_bf16(m.wei) : m.wei;
  dnnl::matmul::primitive_desc pd =
      m.bias ? dnnl::matmul::primitive_desc(
                   dnnl::matmul::desc(src, wei, dense({1, m.dst.dims().back()}), m.dst), attr, eng)
             : dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, m.dst), attr, eng);
  note("matmul", pd);
  return dnnl::matmul(pd);
}

// P (made by matmul_prim from an MM of the same descriptors) on M's buffers
void MhaStep::Impl::matmul_bind(std::vector<Op>& list, const dnnl::primitive& p, const MM& m) {
  Args args{{DNNL_ARG_SRC,
             m.bf16 ? mem(as_bf16(m.src), m.a16 ? m.a16 : shadow_of(m.a)) : mem(m.src, m.a)},
            {DNNL_ARG_WEIGHTS, m.bf16 ? mem(as_bf16(m.wei), shadow_of(m.b)) : mem(m.wei, m.b)},
            {DNNL_ARG_DST, mem(m.dst, m.c)}};
  if (m.bias) args[DNNL_ARG_BIAS] = mem(dense({1, m.dst.dims().back()}), m.bias);
  if (m.residual) args[DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1] = mem(m.dst, m.residual);
  ++(m.bf16 ? matmuls_bf16 : matmuls_f32);
  add(list, p, std::move(args));
}

void MhaStep::Impl::matmul(std::vector<Op>& list, const MM& m) {
  matmul_bind(list, matmul_prim(m), m);
}

// dst (1 x cols) = scale * the column sums of src (rows x cols), as growformer sums them: in
// blocks of (at most) 256 rows, then the blocks' sums; each a product with a row of ones (oneDNN
// 2.6's reduction over the leading dimension is its reference implementation, and one product
// over all rows sums them in one chain: at 65,536 equal rows, the mean pooling's, its error
// alone reached 1e-4)
void MhaStep::Impl::column_sums(std::vector<Op>& list, float* src, memory::dim rows,
                                memory::dim cols, float* dst, float scale) {
  const memory::dim rb = static_cast<memory::dim>(partial_block(static_cast<size_t>(rows)));
  const memory::dim nb = rows / rb;
  if (nb == 1) {
    MM m{dense({1, rows}), dense({rows, cols}), dense({1, cols}), ones, src, dst};
    m.scale = scale;
    matmul(list, m);
    return;
  }
  if (static_cast<size_t>(nb * cols) > partial_size)
    throw std::logic_error("onednn peer: the column sums' partial buffer is too small");
  matmul(list,
         MM{dense({nb, 1, rb}), dense({nb, rb, cols}), dense({nb, 1, cols}), ones, src, partial});
  MM m{dense({1, nb}), dense({nb, cols}), dense({1, cols}), ones, partial, dst};
  m.scale = scale;
  matmul(list, m);
}

// dst[0..n) = src[0..n) rounded to bf16 (a reorder: round to nearest even, as growformer's
// vcvtne2ps2bf16)
void MhaStep::Impl::convert(std::vector<Op>& list, float* src, uint16_t* dst, size_t n) {
  const memory::desc f = dense({static_cast<memory::dim>(n)}),
                     h = dense({static_cast<memory::dim>(n)}, dt::bf16);
  dnnl::reorder::primitive_desc pd(eng, f, eng, h);
  note("reorder", pd);
  add(list, dnnl::reorder(pd), {{DNNL_ARG_FROM, mem(f, src)}, {DNNL_ARG_TO, mem(h, dst)}});
}

// under bf16: F's bf16 copy made from F as it stands at this point of the list
void MhaStep::Impl::round_in(std::vector<Op>& list, float* f) {
  if (!s.bf16) return;
  const Shadow& sh = shadows.at(f);
  convert(list, f, sh.h, sh.n);
}

// under bf16: the bf16 copies of the weights the products read, once a step (AdamW changed them)
void MhaStep::Impl::round_weights() {
  for (const Layer& l : layers)
    for (Param* w : {l.wq, l.wk, l.wv, l.wo, l.w1, l.w2}) round_in(fwd, w->w);
  round_in(fwd, cls_w->w);
}

// a += b (b broadcast where its dimensions are 1)
void MhaStep::Impl::add_into(std::vector<Op>& list, const memory::desc& a_md, float* a,
                             const memory::desc& b_md, float* b) {
  dnnl::binary::primitive_desc pd(dnnl::binary::desc(dnnl::algorithm::binary_add, a_md, b_md, a_md),
                                  eng);
  note("binary", pd);
  add(list, dnnl::binary(pd),
      {{DNNL_ARG_SRC_0, mem(a_md, a)},
       {DNNL_ARG_SRC_1, mem(b_md, b)},
       {DNNL_ARG_DST, mem(a_md, a)}});
}

// y = x W + b [+ residual]: x (rows, in), W (in, out)
void MhaStep::Impl::linear_fwd(float* x, memory::dim rows, Param* w, Param* b, float* y,
                               float* residual) {
  const auto in = static_cast<memory::dim>(w->shape[0]),
             out = static_cast<memory::dim>(w->shape[1]);
  MM m{dense({rows, in}), dense({in, out}), dense({rows, out}), x, w->w, y};
  m.bias = b->w;
  m.bf16 = s.bf16;
  m.residual = residual;
  matmul(fwd, m);
}

// dW = x^T dy, db = column sums of dy, dx (=|+=) dy W^T (skipped when DX is null)
void MhaStep::Impl::linear_bwd(float* x, float* dy, memory::dim rows, Param* w, Param* b, float* dx,
                               bool accumulate_dx) {
  const auto in = static_cast<memory::dim>(w->shape[0]),
             out = static_cast<memory::dim>(w->shape[1]);
  MM dw{view({in, rows}, {1, in}), dense({rows, out}), dense({in, out}), x, dy, w->g};
  dw.bf16 = s.bf16;
  matmul(bwd, dw);
  column_sums(bwd, dy, rows, out, b->g);
  if (!dx) return;
  MM m{dense({rows, out}), view({out, in}, {1, out}), dense({rows, in}), dy, w->w, dx};
  m.accumulate = accumulate_dx;
  m.bf16 = s.bf16;
  matmul(bwd, m);
}

dnnl::layer_normalization_forward::primitive_desc MhaStep::Impl::ln_pd() const {
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  return dnnl::layer_normalization_forward::primitive_desc(
      dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, dense({N(), D()}),
                                              s.ln_eps, flags),
      eng);
}

void MhaStep::Impl::ln_fwd(float* x, Param* g, Param* b, float* y, float* mean, float* var) {
  auto pd = ln_pd();
  note("layer_normalization", pd);
  const memory::desc md = dense({N(), D()}), pmd = dense({D()});
  add(fwd, dnnl::layer_normalization_forward(pd),
      {{DNNL_ARG_SRC, mem(md, x)},
       {DNNL_ARG_DST, mem(md, y)},
       {DNNL_ARG_MEAN, mem(pd.mean_desc(), mean)},
       {DNNL_ARG_VARIANCE, mem(pd.variance_desc(), var)},
       {DNNL_ARG_SCALE, mem(pmd, g->w)},
       {DNNL_ARG_SHIFT, mem(pmd, b->w)}});
}

// DIFF_SHIFT: where the shift's gradient goes (null: B's gradient)
void MhaStep::Impl::ln_bwd(float* x, float* mean, float* var, Param* g, Param* b, float* dy,
                           float* dx, float* diff_shift) {
  auto fpd = ln_pd();
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const memory::desc md = dense({N(), D()}), pmd = dense({D()});
  dnnl::layer_normalization_backward::primitive_desc pd(
      dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, md, md, s.ln_eps, flags),
      eng, fpd);
  note("layer_normalization", pd);
  add(bwd, dnnl::layer_normalization_backward(pd),
      {{DNNL_ARG_SRC, mem(md, x)},
       {DNNL_ARG_MEAN, mem(fpd.mean_desc(), mean)},
       {DNNL_ARG_VARIANCE, mem(fpd.variance_desc(), var)},
       {DNNL_ARG_DIFF_DST, mem(md, dy)},
       {DNNL_ARG_SCALE, mem(pmd, g->w)},
       {DNNL_ARG_SHIFT, mem(pmd, b->w)},
       {DNNL_ARG_DIFF_SRC, mem(md, dx)},
       {DNNL_ARG_DIFF_SCALE, mem(pmd, g->g)},
       {DNNL_ARG_DIFF_SHIFT, mem(pmd, diff_shift ? diff_shift : b->g)}});
}

// ---- the loops oneDNN has no primitive for -------------------------------------------------

void MhaStep::Impl::gather() {
  const long n = static_cast<long>(s.batch * s.seq);
  const size_t d = s.d_model;
  const float* E = embed->w;
  float* X = x0;
  const int32_t* id = ids;
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i)
    std::memcpy(X + static_cast<size_t>(i) * d, E + static_cast<size_t>(id[i]) * d,
                d * sizeof(float));
}

// d embed[id] += d x[token], tokens in order; each thread owns a slice of the columns
void MhaStep::Impl::scatter_embedding_grad() {
  const size_t n = s.batch * s.seq, d = s.d_model;
  float* G = embed->g;
  const float* gxs = gx;
  const int32_t* id = ids;
  std::memset(G, 0, embed->n * sizeof(float));
#pragma omp parallel
  {
    const size_t t = static_cast<size_t>(omp_get_thread_num()),
                 nt = static_cast<size_t>(omp_get_num_threads());
    const size_t c0 = d * t / nt, c1 = d * (t + 1) / nt;
    for (size_t i = 0; i < n; ++i) {
      float* row = G + static_cast<size_t>(id[i]) * d;
      const float* g = gxs + i * d;
      for (size_t c = c0; c < c1; ++c) row[c] += g[c];
    }
  }
}

// mean cross-entropy of the logits and its gradient, the per-row sums in double
void MhaStep::Impl::cross_entropy() {
  const size_t B = s.batch, C = s.classes;
  double total = 0;
  for (size_t b = 0; b < B; ++b) {
    const float* row = logits + b * C;
    float mx = row[0];
    for (size_t c = 1; c < C; ++c) mx = std::max(mx, row[c]);
    double sum = 0;
    for (size_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(row[c] - mx));
    const double lse = mx + std::log(sum);
    total += lse - row[labels[b]];
    const float g0 = 1.0f / static_cast<float>(B);
    for (size_t c = 0; c < C; ++c) {
      const float p = static_cast<float>(std::exp(row[c] - lse));
      dlogits[b * C + c] = g0 * (p - (static_cast<int32_t>(c) == labels[b] ? 1.0f : 0.0f));
    }
  }
  loss = static_cast<float>(total / static_cast<double>(B));
}

void MhaStep::Impl::run(std::vector<Op>& list) {
  for (Op& op : list) {
    if (op.loop) {
      strm.wait();
      op.loop();
    } else {
      op.prim.execute(strm, op.args);
    }
  }
  strm.wait();
}

// ---- MhaStep -------------------------------------------------------------------------------

MhaStep::MhaStep(const StepShape& shape, const AdamWSettings& adamw, size_t threads,
                 const std::string& max_isa) {
  const StepShape& s = shape;
  if (s.batch == 0 || s.seq == 0 || s.vocab == 0 || s.classes == 0 || s.d_model == 0 ||
      s.heads == 0 || s.d_k == 0 || s.d_v == 0 || s.hidden == 0 || s.max_len < s.seq)
    throw std::invalid_argument("onednn peer: an empty dimension or seq > max_len");
  if (threads == 0) throw std::invalid_argument("onednn peer: zero threads");
  cap_isa(max_isa);
  if (s.bf16 && !bf16_unavailable_reason().empty())
    throw std::runtime_error(bf16_unavailable_reason());
  omp_set_num_threads(static_cast<int>(threads));  // primitives partition for this count
  impl_ = std::make_unique<Impl>(shape, adamw, threads);
  impl_->choose_chunk();
  impl_->allocate();
  impl_->build_forward();
  impl_->build_backward();
}

MhaStep::~MhaStep() = default;

const StepShape& MhaStep::shape() const { return impl_->s; }

std::vector<StepParam> MhaStep::parameters() {
  std::vector<StepParam> out;
  for (auto& p : impl_->params) out.push_back({p->name, p->shape, p->w, p->g});
  return out;
}

float MhaStep::forward_backward(const int32_t* ids, const int32_t* labels) {
  Impl& m = *impl_;
  for (size_t i = 0; i < m.s.batch * m.s.seq; ++i)
    if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= m.s.vocab)
      throw std::invalid_argument("onednn peer: token id " + std::to_string(ids[i]) +
                                  " outside the vocabulary of " + std::to_string(m.s.vocab));
  for (size_t b = 0; b < m.s.batch; ++b)
    if (labels[b] < 0 || static_cast<size_t>(labels[b]) >= m.s.classes)
      throw std::invalid_argument("onednn peer: label " + std::to_string(labels[b]) +
                                  " outside [0, " + std::to_string(m.s.classes) + ")");
  omp_set_num_threads(static_cast<int>(m.threads));
  m.ids = ids;
  m.labels = labels;
  m.run(m.fwd);
  m.run(m.bwd);
  return m.loss;
}

// M = b1 M + (1 - b1) G; V = b2 V + (1 - b2) G^2; W = W decay - lr (M c1) / (sqrt(V c2) + eps),
// the expressions, in float, of the `adamw` optimizer
void MhaStep::adamw(float lr) {
  Impl& m = *impl_;
  omp_set_num_threads(static_cast<int>(m.threads));
  m.adam_t += 1;
  const float b1 = static_cast<float>(m.opt.beta1), b2 = static_cast<float>(m.opt.beta2);
  const float c1 = static_cast<float>(1.0 / (1.0 - std::pow(m.opt.beta1, m.adam_t)));
  const float c2 = static_cast<float>(1.0 / (1.0 - std::pow(m.opt.beta2, m.adam_t)));
  const float eps = static_cast<float>(m.opt.eps);
  for (auto& p : m.params) {
    const float decay = p->decays ? 1.0f - lr * static_cast<float>(m.opt.weight_decay) : 1.0f;
    float *W = p->w, *M = p->m, *V = p->v;
    const float* G = p->g;
    const long n = static_cast<long>(p->n);
#pragma omp parallel for schedule(static) if (n >= 16384)
    for (long i = 0; i < n; ++i) {
      M[i] = b1 * M[i] + (1.0f - b1) * G[i];
      V[i] = b2 * V[i] + (1.0f - b2) * G[i] * G[i];
      W[i] = W[i] * decay - lr * (M[i] * c1) / (std::sqrt(V[i] * c2) + eps);
    }
  }
}

void MhaStep::reset_optimizer() {
  impl_->adam_t = 0;
  for (auto& p : impl_->params) {
    std::memset(p->m, 0, p->n * sizeof(float));
    std::memset(p->v, 0, p->n * sizeof(float));
  }
}

float MhaStep::step(const int32_t* ids, const int32_t* labels, float lr) {
  const float l = forward_backward(ids, labels);
  adamw(lr);
  return l;
}

std::string MhaStep::implementations() const {
  std::ostringstream o;
  const char* sep = "";
  for (const auto& [kind, names] : impl_->impls) {
    o << sep << kind << " ";
    const char* s2 = "";
    for (const auto& n : names) o << s2 << n, s2 = "|";
    sep = "; ";
  }
  return o.str();
}

size_t MhaStep::threads() const { return impl_->threads; }

std::pair<size_t, size_t> MhaStep::matmul_counts() const {
  return {impl_->matmuls_bf16, impl_->matmuls_f32};
}

std::pair<size_t, size_t> MhaStep::attention_chunk() const {
  return {static_cast<size_t>(impl_->cb), static_cast<size_t>(impl_->ch)};
}

size_t MhaStep::bytes_allocated() const { return impl_->bytes; }

std::string MhaStep::library_note() {
  const dnnl::version_t* v = dnnl::version();
  std::string rt = v->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
                   : v->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                   : v->cpu_runtime == DNNL_RUNTIME_SEQ ? "sequential"
                                                        : "threadpool";
  return "oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) + "." +
         std::to_string(v->patch) + ", " + rt + " runtime, ISA " +
         isa_name(dnnl::get_effective_cpu_isa());
}

std::string MhaStep::bf16_unavailable_reason() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  const int bf16 = static_cast<int>(dnnl::cpu_isa::avx512_core_bf16);
  if ((static_cast<int>(isa) & bf16) == bf16) return "";
  return "oneDNN's bf16 matmul cannot run natively here: oneDNN's instruction set in this "
         "process is " +
         isa_name(isa) +
         ", and bf16 products need avx512_core_bf16 (a CPU with AVX512_BF16, oneDNN not capped "
         "below it)";
}

}  // namespace gf_onednn
