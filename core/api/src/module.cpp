#include "growformer/module.hpp"

#include <stdexcept>

namespace gf {

NamedParams Module::named_parameters(const std::string& prefix) const {
  NamedParams out;
  auto join = [&](const std::string& n) { return prefix.empty() ? n : prefix + "." + n; };
  for (const auto& p : params_) out.emplace_back(join(p.first), p.second);
  for (const auto& c : children_) {
    std::string cp = c.first.empty() ? prefix : join(c.first);
    auto sub = c.second->named_parameters(cp);
    out.insert(out.end(), sub.begin(), sub.end());
  }
  return out;
}

size_t Module::num_parameters() const {
  size_t n = 0;
  for (const auto& p : named_parameters()) n += p.second.size();
  return n;
}

Var Module::register_parameter(const std::string& name, Tensor init) {
  for (auto& p : params_)
    if (p.first == name) throw std::logic_error("parameter `" + name + "` registered twice");
  params_.emplace_back(name, parameter(std::move(init)));
  return params_.back().second;  // a copy of the handle
}

void Module::register_module(const std::string& name, std::shared_ptr<Module> m) {
  for (auto& c : children_)
    if (c.first == name && !name.empty())
      throw std::logic_error("module `" + name + "` registered twice");
  children_.emplace_back(name, std::move(m));
}

void Module::unregister_module(const std::string& name) {
  for (auto it = children_.begin(); it != children_.end(); ++it)
    if (it->first == name) {
      children_.erase(it);
      return;
    }
  throw std::logic_error("no module `" + name + "` to remove");
}

Var* Module::find_parameter(const std::string& name) {
  for (auto& p : params_)
    if (p.first == name) return &p.second;
  return nullptr;
}

}  // namespace gf
