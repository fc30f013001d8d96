// A multi-head block's count of its work in one training step (AttentionBlock::step_work), for
// the roofline `growformer bench` reads the step against.
#include <string>
#include <vector>

#include "growformer/multihead.hpp"
#include "growformer/projections.hpp"

namespace gf {

WorkCount MultiHeadBlock::attend_work(size_t, size_t) const {
  return WorkCount::none("its scoring rule is not counted");
}

// How the part of a multi-head block's step that is the base's is counted (docs/results/
// speed.md, "The roofline of a step"); the scoring rule counts make_levels and attend
// (attend_work), each head what it computes beyond its projections (Head::step_work). Level l
// has n_l = batch x T_l rows (level_lengths; n = n_0 = batch x seq), d = d_model, qw = heads x
// d_k, vw = heads x d_v. The heads' projections are one product per level
// (QkvProjections::project_all), the output maps one product (ops::linear_sum):
//   products  Q K V of level 0 2 n d (2 qw + vw), Q K of level l > 0 2 n_l d 2 qw, the output
//             map 2 n vw d forward; each twice that backward (the input's and the weights'
//             gradients).
//   memory    forward: level 0 n d in, n (2 qw + vw) out; level l n_l d in, 2 n_l qw out; the
//             output map n vw in, n d out. Backward: level 0 4 n (2 qw + vw) + 2 n d (the
//             gradients joined, dX, dW), level l 4 n_l 2 qw + 2 n_l d; the output map 2 n d +
//             2 n vw.
// With the mha block's scores this is 6 n d + 19 n qw + 16 n vw floats a layer.
WorkCount MultiHeadBlock::step_work(size_t batch, size_t seq) const {
  const std::string head_plugin =
      head_cfg_.child("plugin").valid() ? head_cfg_.child("plugin").as_string() : "?";
  if (combine_mean_)
    return WorkCount::none(block_name() +
                           ": `combine: mean` (an output map a head) is not counted");
  const std::vector<HeadInfo> hs = heads();
  if (hs.empty()) return WorkCount::none(block_name() + ": no heads");
  for (const HeadInfo& h : hs) {
    const QkvProjections* p = h.head->projections();
    if (!p || !p->same_shape(*hs[0].head->projections()))
      return WorkCount::none(block_name() + ": heads `" + head_plugin +
                             "` without the core projections of one shape are not counted");
  }
  const WorkCount a = attend_work(batch, seq);
  if (!a.work) return WorkCount::none(block_name() + ": " + a.why_not);
  kernels::StepWork w = *a.work;
  for (const HeadInfo& h : hs) {
    const WorkCount c = h.head->step_work(batch, seq);
    if (!c.work)
      return WorkCount::none(block_name() + ": head `" + head_plugin + "`: " + c.why_not);
    w += *c.work;
  }
  const double B = static_cast<double>(batch), d = static_cast<double>(d_model_);
  const double H = static_cast<double>(hs.size());
  const double qw = H * static_cast<double>(shape_.d_k), vw = H * static_cast<double>(shape_.d_v);
  const std::vector<size_t> lengths = level_lengths(seq);
  double floats = 0;
  for (size_t l = 0; l < lengths.size(); ++l) {
    const double nl = B * static_cast<double>(lengths[l]);
    const double cols = l == 0 ? 2 * qw + vw : 2 * qw;  // values at level 0 only
    w.product_flops += 3 * (2 * nl * d * cols);
    floats += (nl * d + nl * cols) + (4 * nl * cols + 2 * nl * d);
  }
  const double n = B * static_cast<double>(seq);
  w.product_flops += 3 * (2 * n * vw * d);
  floats += (n * vw + n * d) + (2 * n * d + 2 * n * vw);
  w.memory_bytes += 4.0 * floats;
  return WorkCount::of(w);
}

}  // namespace gf
