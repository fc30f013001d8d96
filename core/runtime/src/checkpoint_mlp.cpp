// A checkpoint's MLP widths: each block's as its tensors hold it, checked before the model's
// MLPs are resized to it (restore_model) or a reader reports it (inspect).
#include "growformer/errors.hpp"
#include "growformer/trainer_state.hpp"

namespace gf {

namespace {
const Tensor* find_tensor(const Checkpoint& ck, const std::string& name) {
  auto it = ck.tensors.find(name);
  return it == ck.tensors.end() ? nullptr : &it->second;
}

// The width block I's tensors hold, checked; 0 when its fc1.w is not in CK.
size_t block_width(const Checkpoint& ck, const std::string& path, size_t i, const Model* model) {
  const std::string at = "model.layers." + std::to_string(i) + ".mlp.";
  const Tensor* w1 = find_tensor(ck, at + "fc1.w");
  if (!w1) return 0;
  const std::string what =
      path + ": invalid checkpoint: block layers." + std::to_string(i) + ".mlp";
  const Tensor* b1 = find_tensor(ck, at + "fc1.b");
  const Tensor* w2 = find_tensor(ck, at + "fc2.w");
  if (w1->shape().size() != 2) throw RuntimeError(what + ": fc1.w is not a matrix");
  const size_t d = w1->dim(0), h = w1->dim(1);
  const size_t most = model ? model->max_mlp_width() : 64 * d;
  if (h == 0 || h > most)
    throw RuntimeError(what + ": fc1.w holds " + std::to_string(h) +
                       " units; a block's MLP holds 1.." + std::to_string(most));
  if (model && d != model->d_model())
    throw RuntimeError(what + ": fc1.w has shape " + shape_str(w1->shape()) + " but the model's " +
                       "d_model is " + std::to_string(model->d_model()));
  if (!b1 || b1->shape() != Shape{h})
    throw RuntimeError(what + ": fc1.w holds " + std::to_string(h) + " units but fc1.b " +
                       (b1 ? "has shape " + shape_str(b1->shape()) : std::string("is missing")));
  if (!w2 || w2->shape() != Shape{h, d})
    throw RuntimeError(what + ": fc1.w holds " + std::to_string(h) + " units but fc2.w " +
                       (w2 ? "has shape " + shape_str(w2->shape()) : std::string("is missing")));
  return h;
}
}  // namespace

std::vector<size_t> checked_mlp_widths(const Checkpoint& ck, const std::string& path,
                                       const Model* model) {
  std::vector<size_t> out;
  const size_t blocks = model ? model->blocks().size() : static_cast<size_t>(-1);
  for (size_t i = 0; i < blocks; ++i) {
    const size_t h = block_width(ck, path, i, model);
    if (h == 0 && !model) break;
    out.push_back(h);  // 0 with a model: its parameters are missing, which restore_model names
  }
  return out;
}

}  // namespace gf
