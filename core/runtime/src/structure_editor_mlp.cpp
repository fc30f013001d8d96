// The structure editor's MLP edits: units added to or removed from a block's MLP (mlp.hpp),
// checked against the block before anything changes, with the optimizer's state of the
// reshaped parameters carried unit by unit.
#include <map>

#include "growformer/errors.hpp"
#include "growformer/structure_editor.hpp"

namespace gf {

namespace {
std::string policy_name(const StructureEditor::Policy& p) {
  return "the " + p.role + " policy" + (p.name.empty() ? "" : " `" + p.name + "`");
}

// "[a, b, c]" of V.
template <class T>
std::vector<double> as_list(const std::vector<T>& v) {
  return std::vector<double>(v.begin(), v.end());
}
}  // namespace

int StructureEditor::edit_mlp(const Edit& e, size_t p, Event* ev) {
  const bool add = e.kind == Edit::Kind::AddMlpUnits;
  const std::string asked =
      policy_name(policies_[p]) + " asked to " +
      (add ? "add " + std::to_string(e.units) + " MLP units to"
           : "remove " + std::to_string(e.unit_indices.size()) + " MLP units from") +
      " block " + std::to_string(e.block);
  if (e.block >= mlps_.size() || !mlps_[e.block])
    throw RuntimeError(asked + ", but the trainer edits no MLP here (StructureEditor::set_model)");
  Mlp& mlp = *mlps_[e.block];
  const std::string why =
      add ? mlp.why_not_add(e.units, e.mlp_init) : mlp.why_not_remove(e.unit_indices);
  if (add && !why.empty() && e.units > 0 && mlp.width() + e.units > mlp.max_width()) {
    Event r;  // past the most a block may hold: refused, as heads past the memory are
    r.type = "growth_refused";
    r.block = static_cast<long>(e.block);
    r.numbers = {{"width", static_cast<double>(mlp.width())},
                 {"requested", static_cast<double>(e.units)}};
    r.strings = {{"reason", why}, {"policy", policies_[p].role}, {"what", "mlp_units"}};
    if (events_) events_->emit(r);
    return kRefused;
  }
  if (!why.empty())
    throw RuntimeError(asked + " (layers." + std::to_string(e.block) + ".mlp, " +
                       std::to_string(mlp.width()) + " units): " + why);
  const size_t before = mlp.width();
  const std::vector<long> source = add ? mlp.add_units(e.units, e.mlp_init, *policies_[p].rng)
                                       : mlp.remove_units(e.unit_indices);
  if (model_ && optimizer_)
    carry_unit_state(*optimizer_, *model_, "layers." + std::to_string(e.block) + ".", source);
  ev->type = ev->type.empty() ? (add ? "grow" : "prune") : ev->type;
  ev->numbers.push_back({"units", static_cast<double>(add ? e.units : e.unit_indices.size())});
  ev->numbers.push_back({"width", static_cast<double>(mlp.width())});
  if (!add) ev->lists.push_back({"unit_indices", as_list(e.unit_indices)});
  std::vector<size_t> widths;
  for (const Mlp* m : mlps_) widths.push_back(m ? m->width() : 0);
  ev->lists.push_back({"mlp_widths", as_list(widths)});
  return add ? static_cast<int>(before) : -1;
}

void carry_unit_state(Optimizer& optimizer, const Module& model, const std::string& prefix,
                      const std::vector<long>& source) {
  std::map<std::string, Tensor> tensors = optimizer.state_tensors();
  const std::map<std::string, double> scalars = optimizer.state_scalars();
  bool changed = false;
  for (auto& [key, t] : tensors)
    for (const MlpParam& mp : kMlpUnitParams) {
      const std::string name = prefix + mp.name;  // "<kind>.<name>": the state of NAME
      if (key.size() <= name.size() + 1 || key.compare(key.size() - name.size(), name.size(), name))
        continue;
      if (key[key.size() - name.size() - 1] != '.' || key.find('.') != key.size() - name.size() - 1)
        continue;
      t = gather_units(t, mp.axis, source);
      changed = true;
    }
  if (changed) optimizer.load_state(tensors, scalars, model.named_parameters());
}

}  // namespace gf
