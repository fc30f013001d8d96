// The forward and backward lists of the oneDNN step (onednn_step.hpp): which primitives a
// step executes, in order, on the buffers onednn_step.cpp allocated; the attention in chunks
// of samples x heads. The primitive builders they call are in onednn_step.cpp.
#include "onednn_step_impl.hpp"

namespace gf_onednn {

// ---- the step ------------------------------------------------------------------------------

void MhaStep::Impl::choose_chunk() {
  const auto [bc, hc] = chunk_of(s, threads);
  cb = static_cast<memory::dim>(bc), ch = static_cast<memory::dim>(hc);
}

void MhaStep::Impl::attention_forward(const Layer& l) {
  const memory::dim B = static_cast<memory::dim>(s.batch), T = static_cast<memory::dim>(s.seq),
                    H = static_cast<memory::dim>(s.heads), dk = static_cast<memory::dim>(s.d_k),
                    dv = static_cast<memory::dim>(s.d_v);
  // a chunk's (b, h, t, j) of a (B T, H w) buffer, its transpose (b, h, j, t), and where it starts
  auto heads = [&](memory::dim w) { return view({cb, ch, T, w}, {T * H * w, w, H * w, 1}); };
  auto heads_t = [&](memory::dim w) { return view({cb, ch, w, T}, {T * H * w, w, 1, H * w}); };
  auto at = [&](float* buf, memory::dim w, memory::dim b0, memory::dim h0) {
    return buf + (b0 * T * H + h0) * w;
  };
  const memory::desc probs = dense({cb, ch, T, T});
  MM scores{heads(dk), heads_t(dk), probs, l.q, l.k, l.p};
  scores.scale = 1.0f / std::sqrt(static_cast<float>(s.d_k));
  MM pv{probs, heads(dv), heads(dv), l.p, l.v, l.o};
  scores.bf16 = pv.bf16 = s.bf16;
  pv.a16 = p16;  // the chunk's probabilities, rounded after the softmax
  const dnnl::primitive scores_p = matmul_prim(scores), pv_p = matmul_prim(pv);
  dnnl::softmax_forward::primitive_desc spd(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, probs, 3), eng);
  note("softmax", spd);
  const dnnl::softmax_forward softmax(spd);
  for (memory::dim b0 = 0; b0 < B; b0 += cb)
    for (memory::dim h0 = 0; h0 < H; h0 += ch) {
      float* P = l.p + (b0 * H + h0) * T * T;  // the chunk's block: contiguous
      scores.a = at(l.q, dk, b0, h0), scores.b = at(l.k, dk, b0, h0), scores.c = P;
      matmul_bind(fwd, scores_p, scores);
      add(fwd, softmax, {{DNNL_ARG_SRC, mem(probs, P)}, {DNNL_ARG_DST, mem(probs, P)}});
      if (s.bf16) convert(fwd, P, p16, static_cast<size_t>(cb * ch * T * T));
      pv.a = P, pv.b = at(l.v, dv, b0, h0), pv.c = at(l.o, dv, b0, h0);
      matmul_bind(fwd, pv_p, pv);
    }
}

void MhaStep::Impl::build_layer_forward(const Layer& l) {
  const memory::dim F = static_cast<memory::dim>(s.hidden);
  // under bf16 each product's inputs are rounded (round_in) once they are final
  ln_fwd(l.x, l.ln1_g, l.ln1_b, l.h1, l.mean1, l.var1);
  round_in(fwd, l.h1);
  linear_fwd(l.h1, N(), l.wq, l.bq, l.q, nullptr);
  linear_fwd(l.h1, N(), l.wk, l.bk, l.k, nullptr);
  linear_fwd(l.h1, N(), l.wv, l.bv, l.v, nullptr);
  round_in(fwd, l.q), round_in(fwd, l.k), round_in(fwd, l.v);
  attention_forward(l);
  round_in(fwd, l.o);
  linear_fwd(l.o, N(), l.wo, l.bo, l.x1, l.x);  // x1 = x + attention
  ln_fwd(l.x1, l.ln2_g, l.ln2_b, l.h2, l.mean2, l.var2);
  round_in(fwd, l.h2);
  linear_fwd(l.h2, N(), l.w1, l.b1, l.u, nullptr);
  const memory::desc hid = dense({N(), F});
  dnnl::eltwise_forward::primitive_desc epd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                  dnnl::algorithm::eltwise_gelu_erf, hid, 0.0f, 0.0f),
      eng);
  note("eltwise", epd);
  add(fwd, dnnl::eltwise_forward(epd),
      {{DNNL_ARG_SRC, mem(hid, l.u)}, {DNNL_ARG_DST, mem(hid, l.act)}});
  round_in(fwd, l.act);
  linear_fwd(l.act, N(), l.w2, l.b2, l.out, l.x1);  // out = x1 + mlp
}

void MhaStep::Impl::build_forward() {
  const memory::dim B = static_cast<memory::dim>(s.batch), T = static_cast<memory::dim>(s.seq);
  if (s.bf16) round_weights();
  add_loop(fwd, [this] { gather(); });
  add_into(fwd, dense({B, T, D()}), x0, dense({1, T, D()}), pos->w);  // the first T positions
  for (const Layer& l : layers) build_layer_forward(l);
  float* last = layers.empty() ? x0 : layers.back().out;
  float* normed = last;
  if (s.final_norm) {
    ln_fwd(last, lnf_g, lnf_b, z, meanf, varf);
    normed = z;
  }
  // the mean over each sample's tokens: (1 x T) ones by (T x d) per sample, scaled by 1 / T
  MM pool{dense({B, 1, T}), dense({B, T, D()}), dense({B, 1, D()}), ones, normed, pooled};
  pool.scale = 1.0f / static_cast<float>(s.seq);
  matmul(fwd, pool);
  round_in(fwd, pooled);
  linear_fwd(pooled, B, cls_w, cls_b, logits, nullptr);
  add_loop(fwd, [this] { cross_entropy(); });
}

// per chunk: dP = dO V^T, dV = P^T dO, dS = softmax'(P, dP), dQ = scale dS K,
// dK = scale dS^T Q; dP and dS share one chunk-sized buffer
void MhaStep::Impl::attention_backward(const Layer& l) {
  const memory::dim B = static_cast<memory::dim>(s.batch), T = static_cast<memory::dim>(s.seq),
                    H = static_cast<memory::dim>(s.heads), dk = static_cast<memory::dim>(s.d_k),
                    dv = static_cast<memory::dim>(s.d_v);
  auto heads = [&](memory::dim w) { return view({cb, ch, T, w}, {T * H * w, w, H * w, 1}); };
  auto heads_t = [&](memory::dim w) { return view({cb, ch, w, T}, {T * H * w, w, 1, H * w}); };
  auto at = [&](float* buf, memory::dim w, memory::dim b0, memory::dim h0) {
    return buf + (b0 * T * H + h0) * w;
  };
  const memory::desc probs = dense({cb, ch, T, T}),
                     probs_t = view({cb, ch, T, T}, {ch * T * T, T * T, 1, T});
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.d_k));
  MM dp{heads(dv), heads_t(dv), probs, dO, l.v, dP},
      dv_{probs_t, heads(dv), heads(dv), l.p, dO, dV};
  MM dq{probs, heads(dk), heads(dk), dP, l.k, dQ}, dk_{probs_t, heads(dk), heads(dk), dP, l.q, dK};
  dq.scale = dk_.scale = scale;
  dp.bf16 = dv_.bf16 = dq.bf16 = dk_.bf16 = s.bf16;
  dv_.a16 = p16;  // the chunk's probabilities, rounded again here
  const dnnl::primitive dp_p = matmul_prim(dp), dv_p = matmul_prim(dv_), dq_p = matmul_prim(dq),
                        dk_p = matmul_prim(dk_);
  dnnl::softmax_forward::primitive_desc sfd(
      dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, probs, 3), eng);
  dnnl::softmax_backward::primitive_desc sbd(dnnl::softmax_backward::desc(probs, probs, 3), eng,
                                             sfd);
  note("softmax", sbd);
  const dnnl::softmax_backward softmax(sbd);
  for (memory::dim b0 = 0; b0 < B; b0 += cb)
    for (memory::dim h0 = 0; h0 < H; h0 += ch) {
      float* P = l.p + (b0 * H + h0) * T * T;
      dp.a = at(dO, dv, b0, h0), dp.b = at(l.v, dv, b0, h0);
      matmul_bind(bwd, dp_p, dp);
      if (s.bf16) convert(bwd, P, p16, static_cast<size_t>(cb * ch * T * T));
      dv_.a = P, dv_.b = at(dO, dv, b0, h0), dv_.c = at(dV, dv, b0, h0);
      matmul_bind(bwd, dv_p, dv_);
      add(bwd, softmax,
          {{DNNL_ARG_DST, mem(probs, P)},
           {DNNL_ARG_DIFF_DST, mem(probs, dP)},
           {DNNL_ARG_DIFF_SRC, mem(probs, dP)}});
      round_in(bwd, dP);  // dS
      dq.b = at(l.k, dk, b0, h0), dq.c = at(dQ, dk, b0, h0);
      matmul_bind(bwd, dq_p, dq);
      dk_.b = at(l.q, dk, b0, h0), dk_.c = at(dK, dk, b0, h0);
      matmul_bind(bwd, dk_p, dk_);
    }
}

void MhaStep::Impl::build_layer_backward(const Layer& l) {
  const memory::dim F = static_cast<memory::dim>(s.hidden);
  const memory::desc md = dense({N(), D()}), hid = dense({N(), F});
  // gx holds d loss / d out; the MLP branch (under bf16 each gradient a product reads is
  // rounded once it is final, as in the forward pass)
  round_in(bwd, gx);
  linear_bwd(l.act, gx, N(), l.w2, l.b2, gF, false);
  dnnl::eltwise_forward::primitive_desc epd(
      dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training,
                                  dnnl::algorithm::eltwise_gelu_erf, hid, 0.0f, 0.0f),
      eng);
  dnnl::eltwise_backward::primitive_desc ebd(
      dnnl::eltwise_backward::desc(dnnl::algorithm::eltwise_gelu_erf, hid, hid, 0.0f, 0.0f), eng,
      epd);
  note("eltwise", ebd);
  add(bwd, dnnl::eltwise_backward(ebd),
      {{DNNL_ARG_SRC, mem(hid, l.u)},
       {DNNL_ARG_DIFF_DST, mem(hid, gF)},
       {DNNL_ARG_DIFF_SRC, mem(hid, gF)}});
  round_in(bwd, gF);
  linear_bwd(l.h2, gF, N(), l.w1, l.b1, gh, false);
  ln_bwd(l.x1, l.mean2, l.var2, l.ln2_g, l.ln2_b, gh, gtmp);
  add_into(bwd, md, gx, md, gtmp);  // gx = d loss / d x1
  // the attention branch
  round_in(bwd, gx);
  linear_bwd(l.o, gx, N(), l.wo, l.bo, dO, false);
  round_in(bwd, dO);
  attention_backward(l);
  round_in(bwd, dQ), round_in(bwd, dK), round_in(bwd, dV);
  linear_bwd(l.h1, dQ, N(), l.wq, l.bq, gh, false);
  linear_bwd(l.h1, dK, N(), l.wk, l.bk, gh, true);
  linear_bwd(l.h1, dV, N(), l.wv, l.bv, gh, true);
  ln_bwd(l.x, l.mean1, l.var1, l.ln1_g, l.ln1_b, gh, gtmp);
  add_into(bwd, md, gx, md, gtmp);  // gx = d loss / d x
}

void MhaStep::Impl::build_backward() {
  const memory::dim B = static_cast<memory::dim>(s.batch), T = static_cast<memory::dim>(s.seq);
  float* dnormed = s.final_norm ? gz : gx;
  round_in(bwd, dlogits);
  linear_bwd(pooled, dlogits, B, cls_w, cls_b, dpooled, false);
  // d normed[b, t] = d pooled[b] / T: a rank-1 product per sample
  MM spread{dense({B, T, 1}), dense({B, 1, D()}), dense({B, T, D()}), ones, dpooled, dnormed};
  spread.scale = 1.0f / static_cast<float>(s.seq);
  matmul(bwd, spread);
  if (s.final_norm) {
    float* last = layers.empty() ? x0 : layers.back().out;
    // the shift's gradient (the sum of gz's rows, equal within a sample) from column_sums
    ln_bwd(last, meanf, varf, lnf_g, lnf_b, gz, gx, lnf_shift_scratch);
    column_sums(bwd, gz, N(), D(), lnf_b->g);
  }
  for (size_t i = layers.size(); i-- > 0;) build_layer_backward(layers[i]);
  // positions: the sum over the batch, into the first T rows (the rows past T stay zero)
  column_sums(bwd, gx, B, T * D(), pos->g);
  add_loop(bwd, [this] { scatter_embedding_grad(); });
}

}  // namespace gf_onednn
