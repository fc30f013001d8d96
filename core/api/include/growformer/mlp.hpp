// A block's MLP (x -> fc2(gelu(fc1 x + b1)) + b2) as the structure editor edits it: its width
// in hidden units, units added with zero output weights (the model's function unchanged at the
// edit) and units removed. The parameters stay the block's (`layers.I.mlp.fc1.w`, ...): an edit
// changes their shapes, not their names.
#pragma once
#include "growformer/export.hpp"

#include <string>
#include <vector>

#include "growformer/autograd.hpp"
#include "growformer/rng.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// How new MLP units start (an AddMlpUnits edit carries one). Their output weights (rows of
/// fc2.w) are always zero, so the block computes what it computed before the edit.
struct MlpInit {
  /// Input weights of the new units, d_model x count row-major (column u feeds new unit u);
  /// empty: drawn as the model initialises fc1.w (uniform in +-1/sqrt(d_model)).
  std::vector<float> fc1_w;
  /// Input biases of the new units (count); empty: zero.
  std::vector<float> fc1_b;
};

/// T (a unit's parameter or its optimizer state: (d, H) with AXIS 1, (H) or (H, d) with AXIS 0)
/// with its units in the order SOURCE names them (an index of T's units, -1 for zeros); every
/// kept value bit for bit the one before.
Tensor gather_units(const Tensor& t, size_t axis, const std::vector<long>& source);

/// The parameters of a block's MLP whose shapes follow its width, with their unit axis.
struct MlpParam {
  const char* name;  // under the block: "mlp.fc1.w"
  size_t axis;
};
inline constexpr MlpParam kMlpUnitParams[] = {{"mlp.fc1.w", 1}, {"mlp.fc1.b", 0}, {"mlp.fc2.w", 0}};

class Mlp {
 public:
  /// The MLP over the parameters FC1_W (d, H), FC1_B (H), FC2_W (H, d) (handles sharing the
  /// owner's nodes, so an edit reshapes the owner's parameters); at most MAX_WIDTH units.
  Mlp(Var fc1_w, Var fc1_b, Var fc2_w, size_t max_width);

  size_t width() const { return fc1_b_.size(); }
  size_t d_model() const { return fc1_w_.dim(0); }
  size_t max_width() const { return max_width_; }
  const Var& fc1_w() const { return fc1_w_; }
  const Var& fc1_b() const { return fc1_b_; }
  const Var& fc2_w() const { return fc2_w_; }

  /// Why COUNT units with INIT cannot be added ("" when they can): none asked for, past
  /// max_width(), an initialisation of another size.
  std::string why_not_add(size_t count, const MlpInit& init) const;
  /// Why UNITS cannot be removed ("" when they can): none named, an index repeated or not
  /// below width(), or every unit.
  std::string why_not_remove(const std::vector<size_t>& units) const;
  /// Appends COUNT units (indices width() .. width() + COUNT - 1): input weights and biases
  /// from INIT, else drawn from RNG and zero; output weights zero. RuntimeError with
  /// why_not_add() when they cannot be added. Returns where each unit of the new layout was
  /// in the old one (-1: new), for gather_units.
  std::vector<long> add_units(size_t count, const MlpInit& init, Rng& rng);
  /// Removes the units at UNITS (indices of the current layout); the others keep their order.
  /// RuntimeError with why_not_remove() when they cannot be removed. Returns where each kept
  /// unit was, for gather_units.
  std::vector<long> remove_units(const std::vector<size_t>& units);
  /// Sets the width to WIDTH (1 .. max_width()) with every weight of the MLP zero, before a
  /// checkpoint's parameters are copied in.
  void resize(size_t width);

 private:
  Var fc1_w_, fc1_b_, fc2_w_;
  size_t max_width_;
};

}  // namespace gf

GROWFORMER_API_END
