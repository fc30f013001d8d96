// The map between a growformer model and its oneDNN peer step, and the correctness gate.
#include "onednn_peer.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <growformer/errors.hpp>
#include <growformer/kernels.hpp>
#include <growformer/multihead.hpp>
#include <growformer/ops.hpp>
#include <growformer/optimizer.hpp>
#include <growformer/precision.hpp>
#include <growformer/registry.hpp>

namespace gf_onednn {

namespace {

const char* kUnsupported = "bench --peer onednn computes the bench's mha step only: ";

[[noreturn]] void unsupported(const std::string& what) {
  throw gf::ConfigError(std::string(kUnsupported) + what);
}

/// "layers.I.attn.heads.ID.PART" -> (I, ID, PART); false for any other name.
bool head_param(const std::string& name, size_t* layer, std::string* id, std::string* part) {
  const std::string pre = "layers.", mid = ".attn.heads.";
  if (name.rfind(pre, 0) != 0) return false;
  const size_t m = name.find(mid);
  if (m == std::string::npos) return false;
  *layer = std::stoul(name.substr(pre.size(), m - pre.size()));
  const size_t d = name.find('.', m + mid.size());
  if (d == std::string::npos) return false;
  *id = name.substr(m + mid.size(), d - m - mid.size());
  *part = name.substr(d + 1);
  return true;
}

/// The model and attention options the peer depends on, read through the tables that declare
/// them (ModelSettings; MultiHeadSettings, which mha's options include) and, for causality, from
/// MODEL, built from MODEL_NODE; throws naming what it does not cover. The model's settings.
gf::ModelSettings check_options(const gf::ConfigNode& model_node, const gf::Model& model,
                                gf::Registry& reg) {
  const gf::ModelSettings ms =
      gf::ModelSettings::table().read(gf::Options(model_node, gf::Model::options(), "model"));
  if (ms.cls) unsupported("model.pool must be mean");
  if (ms.dropout != 0) unsupported("model.dropout must be 0");
  const std::string plugin = ms.attention.child("plugin").as_string();
  if (plugin != "mha") unsupported("model.attention.plugin is " + plugin + ", not mha");
  const gf::ComponentInfo* info = reg.find(gf::Kind::Attention, "mha");
  if (!info) unsupported("the mha plugin is not loaded");
  const gf::MultiHeadSettings mh = gf::MultiHeadSettings::table().read(
      gf::Options(ms.attention, info->spec.options, "attention `mha`"));
  for (const gf::AttentionBlock* b : model.blocks())
    if (b->causal()) unsupported("causal attention is not in the peer");
  if (mh.combine_mean) unsupported("model.attention.combine must be sum");
  const std::string head = mh.head.child("plugin").as_string();
  if (head != "dot_product") unsupported("heads must be dot_product, not " + head);
  return ms;
}

/// AdamW's settings from the optimizer's config (its declared defaults included).
AdamWSettings adamw_settings(const gf::ConfigNode& opt_node, gf::Registry& reg) {
  const std::string plugin = opt_node.child("plugin").as_string();
  if (plugin != "adamw") unsupported("the optimizer is " + plugin + ", not adamw");
  const gf::ComponentInfo* info = reg.find(gf::Kind::Optimizer, "adamw");
  if (!info) unsupported("the adamw optimizer is not loaded");
  const gf::Options o(opt_node, info->spec.options, "optimizer `adamw`");
  AdamWSettings a;
  a.beta1 = o.get_float("beta1");
  a.beta2 = o.get_float("beta2");
  a.eps = o.get_float("eps");
  a.weight_decay = o.get_float("weight_decay");
  const std::string decay = o.get_string("decay");
  a.decay = decay == "all"    ? AdamWSettings::Decay::All
            : decay == "none" ? AdamWSettings::Decay::None
                              : AdamWSettings::Decay::Matrices;
  return a;
}

/// The step's shape from the model's parameters (heads per block, widths, hidden, tables).
StepShape shape_of(const gf::Model& model, const gf::ModelSettings& settings, size_t batch,
                   size_t seq) {
  StepShape s;
  s.batch = batch, s.seq = seq;
  s.vocab = model.vocab_size(), s.classes = model.num_classes(), s.d_model = model.d_model();
  s.layers = model.blocks().size();
  s.final_norm = settings.final_norm;
  std::map<size_t, std::vector<std::string>> heads;  // layer -> head ids in order
  for (const auto& [name, p] : model.named_parameters()) {
    size_t layer = 0;
    std::string id, part;
    if (name == "pos") s.max_len = p.dim(0);
    if (name == "layers.0.mlp.fc1.w") s.hidden = p.dim(1);
    if (!head_param(name, &layer, &id, &part)) continue;
    if (part == "w_q" || part == "w_v") {
      size_t& w = part == "w_q" ? s.d_k : s.d_v;
      if (w != 0 && w != p.dim(1)) unsupported("heads of different widths");
      w = p.dim(1);
    }
    if (part == "w_q") heads[layer].push_back(id);
  }
  for (size_t i = 0; i < s.layers; ++i) {
    const size_t h = heads[i].size();
    if (h == 0 || (s.heads != 0 && h != s.heads))
      unsupported("every block must have the same heads");
    s.heads = h;
  }
  return s;
}

size_t numel(const std::vector<size_t>& shape) {
  size_t n = 1;
  for (size_t e : shape) n *= e;
  return n;
}

/// Refuses a step whose buffers would take more than 3/4 of the machine's memory.
void check_memory(const StepShape& s, size_t threads) {
  const double need = static_cast<double>(MhaStep::bytes_needed(s, threads));
  const double have =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
  if (have > 0 && need > 0.75 * have) {
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "the oneDNN step at batch %zu x seq %zu needs %.1f GB (its attention keeps "
                  "B x H x T x T probabilities), more than 3/4 of this machine's %.1f GB",
                  s.batch, s.seq, need / 1e9, have / 1e9);
    throw gf::RuntimeError(buf);
  }
}

/// The instruction sets growformer's kernels use in this process, as MhaStep's MAX_ISA names
/// them: the float32 set, and on avx512 the bf16 set where bf16 can run (whatever the
/// precision now: oneDNN's set is fixed once per process; its float32 primitives are the same
/// under the wider cap).
std::string peer_isa() {
  const std::string simd = gf::kernels::simd_name();
  if (simd != "avx512" || !gf::kernels::bf16_available()) return simd;
  return gf::kernels::bf16_kernels_name() == "amx" ? "avx512_amx" : "avx512_bf16";
}

double norm2(const gf::Tensor& t) {
  double s = 0;
  for (size_t i = 0; i < t.size(); ++i) s += static_cast<double>(t[i]) * t[i];
  return s;
}

}  // namespace

ModelPeer::ModelPeer(const gf::ConfigNode& model_node, const gf::ConfigNode& optimizer_node,
                     gf::Registry& registry, const gf::Model& model, size_t batch, size_t seq,
                     size_t threads, size_t attention_chunk_bytes) {
  const gf::ModelSettings settings = check_options(model_node, model, registry);
  const AdamWSettings adamw = adamw_settings(optimizer_node, registry);
  StepShape shape = shape_of(model, settings, batch, seq);
  shape.attention_chunk_bytes = attention_chunk_bytes;
  shape.bf16 = gf::kernels::product_precision() == gf::kernels::Precision::bf16;
  check_memory(shape, threads);
  try {
    step_ = std::make_unique<MhaStep>(shape, adamw, threads, peer_isa());
  } catch (const std::runtime_error& e) {
    if (!shape.bf16 || MhaStep::bf16_unavailable_reason().empty()) throw;
    throw gf::ConfigError("bench --peer onednn: precision: bf16 cannot run in the oneDNN peer: " +
                          std::string(e.what()) + "; run the peer with precision: float32");
  }
  peer_ = step_->parameters();
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < peer_.size(); ++i) index[peer_[i].name] = i;
  std::map<std::pair<size_t, std::string>, size_t> head_index;  // (layer, id) -> position
  std::map<size_t, size_t> heads_seen;                          // layer -> heads so far
  std::vector<size_t> covered(peer_.size(), 0);
  for (const auto& [name, p] : model.named_parameters()) {
    Place pl;
    pl.name = name;
    pl.shape = p.shape();
    pl.rows = p.shape().size() >= 2 ? p.dim(0) : 1;
    pl.cols = p.size() / pl.rows;
    size_t layer = 0;
    std::string id, part, peer_name = name;
    if (head_param(name, &layer, &id, &part)) {
      const auto key = std::make_pair(layer, id);
      if (!head_index.count(key)) head_index[key] = heads_seen[layer]++;
      const size_t h = head_index[key];
      peer_name = "layers." + std::to_string(layer) + ".attn." + part;
      if (part == "w_o")
        pl.row0 = h * shape.d_v;
      else
        pl.col0 = h * (part == "w_v" || part == "b_v" ? shape.d_v : shape.d_k);
    }
    auto it = index.find(peer_name);
    if (it == index.end())
      unsupported("the model's parameter " + name + " has no place in the peer");
    pl.peer = it->second;
    const StepParam& sp = peer_[pl.peer];
    const size_t pcols = sp.shape.size() >= 2 ? sp.shape[1] : sp.shape[0];
    if (pl.col0 + pl.cols > pcols || (pl.row0 + pl.rows) * pcols > numel(sp.shape))
      unsupported("the model's parameter " + name + " does not fit the peer's " + sp.name);
    covered[pl.peer] += pl.rows * pl.cols;
    places_.push_back(pl);
  }
  for (size_t i = 0; i < peer_.size(); ++i)
    if (covered[i] != numel(peer_[i].shape))
      unsupported("the peer's " + peer_[i].name + " is not covered by the model");
  load_parameters(model);
}

ModelPeer::~ModelPeer() = default;

template <class F>
void ModelPeer::for_each_element(const Place& p, F f) const {
  const StepParam& sp = peer_[p.peer];
  const size_t pcols = sp.shape.size() >= 2 ? sp.shape[1] : sp.shape[0];
  for (size_t r = 0; r < p.rows; ++r)
    for (size_t c = 0; c < p.cols; ++c) f(r * p.cols + c, (p.row0 + r) * pcols + p.col0 + c);
}

void ModelPeer::load_parameters(const gf::Model& model) {
  size_t i = 0;
  for (const auto& [name, v] : model.named_parameters()) {
    const Place& p = places_.at(i++);
    if (p.name != name) throw gf::RuntimeError("onednn peer: the model's parameters changed");
    float* dst = peer_[p.peer].value;
    const float* src = v.value().data();
    for_each_element(p, [&](size_t a, size_t b) { dst[b] = src[a]; });
  }
}

void ModelPeer::load_gradients(const gf::Model& model) {
  size_t i = 0;
  for (const auto& [name, v] : model.named_parameters()) {
    const Place& p = places_.at(i++);
    if (p.name != name) throw gf::RuntimeError("onednn peer: the model's parameters changed");
    float* dst = peer_[p.peer].grad;
    const gf::Tensor& g = v.grad();
    for_each_element(p, [&](size_t a, size_t b) { dst[b] = g.defined() ? g[a] : 0.0f; });
  }
}

std::map<std::string, gf::Tensor> ModelPeer::values() const {
  std::map<std::string, gf::Tensor> out;
  for (const Place& p : places_) {
    gf::Tensor t(p.shape);
    const float* src = peer_[p.peer].value;
    for_each_element(p, [&](size_t a, size_t b) { t[a] = src[b]; });
    out.emplace(p.name, t);
  }
  return out;
}

std::map<std::string, gf::Tensor> ModelPeer::gradients() const {
  std::map<std::string, gf::Tensor> out;
  for (const Place& p : places_) {
    gf::Tensor t(p.shape);
    const float* src = peer_[p.peer].grad;
    for_each_element(p, [&](size_t a, size_t b) { t[a] = src[b]; });
    out.emplace(p.name, t);
  }
  return out;
}

void ModelPeer::check_batch(const gf::Batch& b) const {
  const StepShape& s = step_->shape();
  if (b.batch != s.batch || b.seq != s.seq || b.ids.size() != s.batch * s.seq ||
      b.labels.size() != s.batch)
    throw gf::RuntimeError("onednn peer: a batch of " + std::to_string(b.batch) + " x " +
                           std::to_string(b.seq) + " for a step of " + std::to_string(s.batch) +
                           " x " + std::to_string(s.seq));
  for (uint8_t v : b.valid)
    if (!v) throw gf::RuntimeError("onednn peer: padded batches are not in the peer");
}

float ModelPeer::forward_backward(const gf::Batch& batch) {
  check_batch(batch);
  return step_->forward_backward(batch.ids.data(), batch.labels.data());
}

float ModelPeer::train_step(const gf::Batch& batch, float lr) {
  check_batch(batch);
  return step_->step(batch.ids.data(), batch.labels.data(), lr);
}

// ---- the gate ------------------------------------------------------------------------------

namespace {

// The norm-wise error of a parameter whose gradient is rounding noise is measured against a
// floor: the parameter's share of the whole gradient's norm, |g| sqrt(n_i / n), times
// kNoiseFloor. b_k's gradient is zero in exact arithmetic (the softmax does not change when a
// row's scores shift together), so both implementations return float noise there, unrelated.
// Under bf16 that noise is bf16 rounding's (up to 5e-4 of the share measured on the test's
// model, a 2^16 times coarser rounding than float32's): the floor is a tenth of the share,
// which reads it at most 5e-3, under kGateToleranceBf16.
constexpr double kNoiseFloor = 1e-2, kNoiseFloorBf16 = 1e-1;

struct Compared {
  std::vector<GateResult::Entry> entries;
  GateResult::Entry worst;
};

Compared compare(const std::map<std::string, gf::Tensor>& peer,
                 const std::map<std::string, gf::Tensor>& ref, double floor) {
  double total = 0;
  size_t count = 0;
  for (const auto& [n, t] : ref) total += norm2(t), count += t.size();
  Compared c;
  c.worst.error = -1;
  for (const auto& [n, r] : ref) {
    const gf::Tensor& p = peer.at(n);
    double diff = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      const double e = static_cast<double>(p[i]) - r[i];
      diff += e * e;
    }
    const double share =
        std::sqrt(total * static_cast<double>(r.size()) / std::max<size_t>(count, 1));
    const double denom = std::max(std::sqrt(norm2(r)), floor * share);
    const double err = denom > 0 ? std::sqrt(diff) / denom : (diff > 0 ? INFINITY : 0.0);
    c.entries.push_back({n, err});
    if (!(err <= c.worst.error)) c.worst = {n, err};
  }
  return c;
}

std::map<std::string, gf::Tensor> snapshot(const gf::Model& model, bool grads) {
  std::map<std::string, gf::Tensor> out;
  for (const auto& [n, p] : model.named_parameters())
    out.emplace(n, grads ? (p.grad().defined() ? p.grad().clone() : gf::Tensor(p.shape()))
                         : p.value().clone());
  return out;
}

std::map<std::string, gf::Tensor> minus(const std::map<std::string, gf::Tensor>& a,
                                        const std::map<std::string, gf::Tensor>& b) {
  std::map<std::string, gf::Tensor> out;
  for (const auto& [n, t] : a) {
    gf::Tensor d(t.shape());
    for (size_t i = 0; i < t.size(); ++i) d[i] = t[i] - b.at(n)[i];
    out.emplace(n, d);
  }
  return out;
}

void restore(gf::Model& model, const std::map<std::string, gf::Tensor>& values) {
  for (auto& [n, p] : model.named_parameters()) {
    const gf::Tensor& v = values.at(n);
    std::copy(v.data(), v.data() + v.size(), p.value().data());
    p.zero_grad();
  }
}

}  // namespace

GateResult run_gate(gf::Model& model, gf::Registry& registry, const gf::ConfigNode& optimizer_node,
                    ModelPeer& peer, const gf::Batch& batch, float lr, double tolerance) {
  GateResult r;
  r.bf16 = peer.bf16();
  if (r.bf16 != (gf::kernels::product_precision() == gf::kernels::Precision::bf16))
    throw gf::RuntimeError(std::string("onednn peer: a ") + (r.bf16 ? "bf16" : "float32") +
                           " peer gated against growformer's " +
                           gf::kernels::precision_name(gf::kernels::product_precision()) +
                           " products");
  r.tolerance = tolerance > 0 ? tolerance : r.bf16 ? kGateToleranceBf16 : kGateTolerance;
  r.update_tolerance = std::min(r.tolerance, kGateTolerance);
  const auto before = snapshot(model, false);
  auto params = model.named_parameters();
  for (auto& [n, p] : params) p.zero_grad();
  gf::Var loss = gf::ops::cross_entropy(model.forward(batch, true, nullptr), batch.labels);
  gf::backward(loss);
  r.loss_growformer = loss.value()[0];
  const auto grads = snapshot(model, true);
  r.loss_onednn = peer.forward_backward(batch);  // the peer as it stands: its own copy
  r.loss_error = std::fabs(static_cast<double>(r.loss_onednn) - r.loss_growformer) /
                 std::max(1e-30, std::fabs(static_cast<double>(r.loss_growformer)));
  Compared g = compare(peer.gradients(), grads, r.bf16 ? kNoiseFloorBf16 : kNoiseFloor);
  r.gradients = g.entries, r.worst_gradient = g.worst;
  // AdamW from the same (growformer's) gradients: a fresh optimizer against the peer's
  auto opt = registry.create_optimizer(optimizer_node);
  opt->step(params, lr);
  const auto gf_update = minus(snapshot(model, false), before);
  const auto peer_before = peer.values();
  peer.load_gradients(model);
  peer.step().reset_optimizer();
  peer.step().adamw(lr);
  Compared u = compare(minus(peer.values(), peer_before), gf_update, kNoiseFloor);
  r.updates = u.entries, r.worst_update = u.worst;
  restore(model, before);
  peer.load_parameters(model);
  peer.step().reset_optimizer();
  r.passed = r.loss_error <= r.tolerance && g.worst.error <= r.tolerance &&
             u.worst.error <= r.update_tolerance;
  return r;
}

std::string GateResult::summary() const {
  char buf[640];
  std::snprintf(buf, sizeof buf,
                "%s products: loss %.7g (growformer) vs %.7g (oneDNN), relative error %.2e; worst "
                "gradient error %.2e (%s); tolerance %.2g; worst AdamW update error %.2e (%s); "
                "tolerance %.0e: %s",
                bf16 ? "bf16" : "float32", loss_growformer, loss_onednn, loss_error,
                worst_gradient.error, worst_gradient.name.c_str(), tolerance, worst_update.error,
                worst_update.name.c_str(), update_tolerance, passed ? "passed" : "FAILED");
  return buf;
}

}  // namespace gf_onednn
