// The structure editor's block edits: a block inserted into the model (computing the identity
// at insertion: Model::insert_block) or removed, checked before anything changes, with the
// optimizer's state and the probes carried to the blocks' new indices.
#include <cstdlib>

#include "growformer/errors.hpp"
#include "growformer/structure_editor.hpp"

namespace gf {

namespace {
std::string policy_name(const StructureEditor::Policy& p) {
  return "the " + p.role + " policy" + (p.name.empty() ? "" : " `" + p.name + "`");
}

// KEY ("<kind>.<name>", an optimizer's state of parameter NAME) after the block edit E: its
// block's new index, or "" when E removed the block. Keys of no block are kept.
std::string moved_key(const std::string& key, const Edit& e) {
  static const std::string kLayers = "layers.";
  const size_t dot = key.find('.');
  if (dot == std::string::npos || key.compare(dot + 1, kLayers.size(), kLayers) != 0) return key;
  const size_t first = dot + 1 + kLayers.size();
  const size_t end = key.find('.', first);
  const std::string digits = key.substr(first, end == std::string::npos ? end : end - first);
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return key;
  const std::optional<size_t> to = block_after(e, std::strtoul(digits.c_str(), nullptr, 10));
  if (!to) return "";
  return key.substr(0, first) + std::to_string(*to) +
         (end == std::string::npos ? "" : key.substr(end));
}
}  // namespace

void StructureEditor::edit_blocks(const Edit& e, size_t p, Event* ev) {
  const bool insert = e.kind == Edit::Kind::InsertBlock;
  const std::string asked = policy_name(policies_[p]) + " asked to " +
                            (insert ? "insert a block at index " : "remove block ") +
                            std::to_string(e.block);
  if (!edited_model_)
    throw RuntimeError(asked +
                       ", but the trainer edits no blocks here (StructureEditor::set_model)");
  Model& model = *edited_model_;
  const std::string why =
      insert ? model.why_not_insert_block(e.block) : model.why_not_remove_block(e.block);
  if (!why.empty()) throw RuntimeError(asked + " of the model: " + why);
  const size_t before = blocks_.size();
  if (insert) {
    model.insert_block(e.block, *policies_[p].rng);
    model.blocks()[e.block]->set_head_masks(needs_head_mask_grads());
  } else {
    model.remove_block(e.block);
  }
  if (optimizer_) carry_block_state(*optimizer_, model, e);
  blocks_ = model.blocks();
  mlps_ = model.mlps();
  if (probes_) {
    if (probes_ != &moved_probes_) moved_probes_ = *probes_;
    moved_probes_.resize(before);  // one per block, as the probes were taken
    if (insert)
      moved_probes_.insert(moved_probes_.begin() + static_cast<long>(e.block), Probe());
    else
      moved_probes_.erase(moved_probes_.begin() + static_cast<long>(e.block));
    probes_ = &moved_probes_;
  }
  ev->type = ev->type.empty() ? (insert ? "grow" : "prune") : ev->type;
  ev->strings.push_back({"op", insert ? "insert" : "remove"});
  ev->numbers.push_back({"blocks", static_cast<double>(blocks_.size())});
  std::vector<double> widths;
  for (const Mlp* m : mlps_) widths.push_back(static_cast<double>(m->width()));
  ev->lists.push_back({"mlp_widths", widths});
}

void carry_block_state(Optimizer& optimizer, const Module& model, const Edit& e) {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, double> scalars;
  for (auto& [key, t] : optimizer.state_tensors()) {
    const std::string to = moved_key(key, e);
    if (!to.empty()) tensors[to] = t;
  }
  for (auto& [key, v] : optimizer.state_scalars()) {
    const std::string to = moved_key(key, e);
    if (!to.empty()) scalars[to] = v;
  }
  optimizer.load_state(tensors, scalars, model.named_parameters());
}

}  // namespace gf
