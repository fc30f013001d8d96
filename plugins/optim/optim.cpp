// optimizers `sgd` (momentum, Nesterov) and `adamw` (decoupled weight decay).
// State is kept per parameter name, so it survives structural edits exactly.
#include <growformer/fields.hpp>
#include <growformer/parallel.hpp>
#include <growformer/plugin.hpp>

#include <cmath>
#include <map>

namespace {

using namespace gf;

bool decays(const std::string& filter, const std::string& name, const Var& p) {
  if (filter == "all") return true;
  if (filter == "none") return false;
  (void)name;
  return p.shape().size() >= 2;  // "matrices": weights, not biases/norms/vectors
}

// A saved state tensor must belong to a parameter of the model, with its shape, and be finite.
void check_state_tensor(const char* opt, const std::string& key, const Tensor& t,
                        const NamedParams& params, const std::string& param) {
  const Var* p = nullptr;
  for (const auto& [n, v] : params)
    if (n == param) p = &v;
  if (!p)
    throw RuntimeError(std::string(opt) + " state `" + key + "` names no parameter of the model");
  if (t.shape() != p->value().shape())
    throw RuntimeError(std::string(opt) + " state `" + key + "` has shape " + shape_str(t.shape()) +
                       " but parameter `" + param + "` has shape " + shape_str(p->value().shape()));
  for (size_t i = 0; i < t.size(); ++i)
    if (!std::isfinite(t[i]))
      throw RuntimeError(std::string(opt) + " state `" + key + "` holds a non-finite value");
}

/// `decay`: which parameters weight decay applies to (both optimizers offer it).
template <class S>
void add_decay(OptionTable<S>& t) {
  t.choice("decay", &S::decay, "matrices", "which parameters weight decay applies to",
           {{"matrices", std::string("matrices")},
            {"all", std::string("all")},
            {"none", std::string("none")}});
}

/// The options of `sgd`, each declared once.
struct SgdSettings {
  double momentum = 0.9;
  bool nesterov = false;
  double weight_decay = 0.0;
  std::string decay = "matrices";
  static const OptionTable<SgdSettings>& table() {
    using S = SgdSettings;
    static const auto t = [] {
      OptionTable<S> t;
      t.add("momentum", &S::momentum, "0.9", "momentum coefficient (0 = plain SGD)", 0, 0.9999)
          .add("nesterov", &S::nesterov, "false", "Nesterov momentum")
          .add("weight_decay", &S::weight_decay, "0", "L2 penalty coefficient", 0, 10);
      add_decay(t);
      return t;
    }();
    return t;
  }
};

/// The options of `adamw`, each declared once.
struct AdamWSettings {
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.01;
  std::string decay = "matrices";
  static const OptionTable<AdamWSettings>& table() {
    using S = AdamWSettings;
    static const auto t = [] {
      OptionTable<S> t;
      t.add("beta1", &S::beta1, "0.9", "first-moment decay", 0, 0.99999)
          .add("beta2", &S::beta2, "0.999", "second-moment decay", 0, 0.999999)
          .add("eps", &S::eps, "1e-8", "denominator epsilon", 0, 1)
          .add("weight_decay", &S::weight_decay, "0.01", "decoupled weight decay", 0, 10);
      add_decay(t);
      return t;
    }();
    return t;
  }
};

class Sgd : public Optimizer {
 public:
  explicit Sgd(const Options& o) : Sgd(o, SgdSettings::table().read(o)) {}
  Sgd(const Options& o, const SgdSettings& s)
      : momentum_(s.momentum), nesterov_(s.nesterov), wd_(s.weight_decay), filter_(s.decay) {
    if (nesterov_ && momentum_ <= 0) o.fail("nesterov", "Nesterov needs momentum > 0");
  }
  void step(NamedParams& params, float lr) override {
    for (auto& [name, p] : params) {
      if (!p.grad().defined()) continue;
      Tensor& w = p.value();
      const Tensor& g = p.grad();
      float wd = decays(filter_, name, p) ? static_cast<float>(wd_) : 0.0f;
      if (momentum_ > 0) {
        auto it = buf_.find(name);
        if (it == buf_.end()) it = buf_.emplace(name, Tensor(w.shape(), 0.0f)).first;
        Tensor& b = it->second;
        float mu = static_cast<float>(momentum_);
        for (size_t i = 0; i < w.size(); ++i) {
          float gi = g[i] + wd * w[i];
          b[i] = mu * b[i] + gi;
          w[i] -= lr * (nesterov_ ? gi + mu * b[i] : b[i]);
        }
      } else {
        for (size_t i = 0; i < w.size(); ++i) w[i] -= lr * (g[i] + wd * w[i]);
      }
    }
  }
  void forget(const std::vector<std::string>& removed) override {
    for (const auto& n : removed) buf_.erase(n);
  }
  std::map<std::string, Tensor> state_tensors() const override {
    std::map<std::string, Tensor> out;
    for (const auto& [n, t] : buf_) out["momentum." + n] = t;
    return out;
  }
  std::map<std::string, double> state_scalars() const override { return {}; }
  void load_state(const std::map<std::string, Tensor>& t, const std::map<std::string, double>&,
                  const NamedParams& params) override {
    buf_.clear();
    std::map<std::string, Tensor> loaded;
    for (const auto& [k, v] : t) {
      if (k.rfind("momentum.", 0) != 0)
        throw RuntimeError("sgd state: unknown entry `" + k + "` in the checkpoint");
      check_state_tensor("sgd", k, v, params, k.substr(9));
      loaded[k.substr(9)] = v.clone();
    }
    buf_ = std::move(loaded);
  }

 private:
  double momentum_;
  bool nesterov_;
  double wd_;
  std::string filter_;
  std::map<std::string, Tensor> buf_;
};

class AdamW : public Optimizer {
 public:
  explicit AdamW(const Options& o) : AdamW(AdamWSettings::table().read(o)) {}
  explicit AdamW(const AdamWSettings& s)
      : b1_(s.beta1), b2_(s.beta2), eps_(s.eps), wd_(s.weight_decay), filter_(s.decay) {}

  void step(NamedParams& params, float lr) override {
    for (auto& [name, p] : params) {
      if (!p.grad().defined()) continue;
      auto it = st_.find(name);
      Tensor& w = p.value();
      if (it == st_.end())
        it = st_.emplace(name, State{Tensor(w.shape(), 0.0f), Tensor(w.shape(), 0.0f), 0}).first;
      State& s = it->second;
      s.t += 1;
      const Tensor& g = p.grad();
      float b1 = static_cast<float>(b1_), b2 = static_cast<float>(b2_);
      float c1 = static_cast<float>(1.0 / (1.0 - std::pow(b1_, s.t)));
      float c2 = static_cast<float>(1.0 / (1.0 - std::pow(b2_, s.t)));
      float eps = static_cast<float>(eps_);
      float decay = decays(filter_, name, p) ? 1.0f - lr * static_cast<float>(wd_) : 1.0f;
      float* W = w.data();
      float* M = s.m.data();
      float* V = s.v.data();
      const float* G = g.data();
      // elementwise, so split over the pool with the same bits
      gf::parallel_elementwise(w.size(), [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) {
          M[i] = b1 * M[i] + (1.0f - b1) * G[i];
          V[i] = b2 * V[i] + (1.0f - b2) * G[i] * G[i];
          W[i] = W[i] * decay - lr * (M[i] * c1) / (std::sqrt(V[i] * c2) + eps);
        }
      });
    }
  }
  void forget(const std::vector<std::string>& removed) override {
    for (const auto& n : removed) st_.erase(n);
  }
  std::map<std::string, Tensor> state_tensors() const override {
    std::map<std::string, Tensor> out;
    for (const auto& [n, s] : st_) {
      out["m." + n] = s.m;
      out["v." + n] = s.v;
    }
    return out;
  }
  std::map<std::string, double> state_scalars() const override {
    std::map<std::string, double> out;
    for (const auto& [n, s] : st_) out["t." + n] = static_cast<double>(s.t);
    return out;
  }
  void load_state(const std::map<std::string, Tensor>& t, const std::map<std::string, double>& sc,
                  const NamedParams& params) override {
    st_.clear();
    std::map<std::string, State> loaded;
    for (const auto& [k, v] : sc) {
      if (k.rfind("t.", 0) != 0)
        throw RuntimeError("adamw state: unknown scalar `" + k + "` in the checkpoint");
      std::string n = k.substr(2);
      auto m = t.find("m." + n), vv = t.find("v." + n);
      if (m == t.end() || vv == t.end())
        throw RuntimeError("adamw state for `" + n + "` is incomplete in the checkpoint");
      if (!(v >= 1 && v <= 1e15) || std::floor(v) != v)
        throw RuntimeError("adamw state for `" + n + "`: step count " + std::to_string(v) +
                           " is not a positive integer");
      check_state_tensor("adamw", m->first, m->second, params, n);
      check_state_tensor("adamw", vv->first, vv->second, params, n);
      for (size_t i = 0; i < vv->second.size(); ++i)
        if (vv->second[i] < 0)
          throw RuntimeError("adamw state `" + vv->first + "` has a negative second moment");
      loaded[n] = State{m->second.clone(), vv->second.clone(), static_cast<long>(v)};
    }
    for (const auto& [k, v] : t) {
      bool known = (k.rfind("m.", 0) == 0 || k.rfind("v.", 0) == 0) && loaded.count(k.substr(2));
      if (!known) throw RuntimeError("adamw state: unexpected entry `" + k + "` in the checkpoint");
    }
    st_ = std::move(loaded);
  }

 private:
  struct State {
    Tensor m, v;
    long t = 0;
  };
  double b1_, b2_, eps_, wd_;
  std::string filter_;
  std::map<std::string, State> st_;
};

void register_components(Registry& r) {
  r.add_optimizer({"sgd", "stochastic gradient descent with optional (Nesterov) momentum",
                   SgdSettings::table().specs()},
                  [](const Options& o) { return std::make_unique<Sgd>(o); });
  r.add_optimizer({"adamw", "Adam with decoupled weight decay (Loshchilov & Hutter)",
                   AdamWSettings::table().specs()},
                  [](const Options& o) { return std::make_unique<AdamW>(o); });
}

}  // namespace

GROWFORMER_PLUGIN("optim", "0.1.0", register_components)
