// Modules own named parameters and named children. Names are stable dotted
// paths ("layers.0.attn.heads.3.w_q") that optimizers, checkpoints and
// structural edits agree on.
#pragma once
#include "growformer/export.hpp"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "growformer/autograd.hpp"

GROWFORMER_API_BEGIN

namespace gf {

using NamedParams = std::vector<std::pair<std::string, Var>>;

class Module {
 public:
  virtual ~Module() = default;

  /// Every parameter below this module, depth-first, with dotted names.
  NamedParams named_parameters(const std::string& prefix = "") const;
  size_t num_parameters() const;

 public:
  /// Returns a handle sharing the parameter's node (keep it; it stays valid).
  Var register_parameter(const std::string& name, Tensor init);
  void register_module(const std::string& name, std::shared_ptr<Module> m);
  void unregister_module(const std::string& name);
  Var* find_parameter(const std::string& name);

 private:
  std::vector<std::pair<std::string, Var>> params_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace gf

GROWFORMER_API_END
