// The model's twin (GrowthPolicy::twin_without): forked from the model, trained beside it on the
// same batches with some heads muted, evaluated on the policies' validation probe, saved in the
// run's checkpoints and, when the model's edits take exactly those heads back, copied into it.
#include "trainer_twin.hpp"

#include "trainer_impl.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <set>

#include "growformer/autograd.hpp"
#include "growformer/json_text.hpp"
#include "growformer/ops.hpp"
#include "growformer/structure_editor.hpp"
#include "growformer/trainer_state.hpp"

namespace gf {
namespace {
using json = nlohmann::json;
const std::string kTwin = "twin.";

// The twin's experiment: MAIN's configuration and data record, no data read.
std::unique_ptr<Experiment> twin_experiment(const Checkpoint& ck, const std::string& path,
                                            const std::vector<std::string>& plugin_paths) {
  auto at = [&](const char* key) -> const std::string& {
    auto it = ck.metadata.find(key);
    if (it == ck.metadata.end())
      throw RuntimeError(path + ": the model's twin cannot be built: no `" + key + "` entry");
    return it->second;
  };
  auto dir = ck.metadata.find("config_dir");
  ConfigNode cfg = ConfigNode::load_string(at("config"), path + " (embedded config)",
                                           dir == ck.metadata.end() ? "" : dir->second);
  // the twin only trains: no policy of its own (a Python policy's class is not built twice)
  cfg.apply_override("growth={plugin: none}");
  cfg.apply_override("pruning={plugin: none}");
  return std::make_unique<Experiment>(cfg, plugin_paths, at("data"), "none");
}

// CK without the model's policy states (the twin has none).
Checkpoint without_policies(Checkpoint ck) {
  ck.metadata.erase("growth_state");
  ck.metadata.erase("pruning_state");
  return ck;
}

// "b:h,b:h" of HEADS, and back.
std::string heads_text(const std::vector<HeadRef>& heads) {
  std::string out;
  for (const HeadRef& h : heads)
    out += (out.empty() ? "" : ",") + std::to_string(h.block) + ":" + std::to_string(h.head);
  return out;
}
}  // namespace

Experiment::Twin::Twin(Experiment& main, std::vector<HeadRef> heads, long step,
                       const std::vector<std::string>& plugin_paths)
    : heads_(std::move(heads)), since_(step) {
  Checkpoint ck = make_training_checkpoint(main.parts());
  ck.metadata["data"] = main.data_record();
  ex_ = twin_experiment(ck, "the model's twin", plugin_paths);
  ex_->comm_ = main.comm_;
  restore_training(without_policies(std::move(ck)), "the model's twin", ex_->parts());
}

std::unique_ptr<Experiment::Twin> Experiment::Twin::restore(
    Experiment& main, const Checkpoint& ck, const std::string& path,
    const std::vector<std::string>& plugin_paths) {
  auto meta = ck.metadata.find("twin");
  if (meta == ck.metadata.end()) return nullptr;
  auto heads = ck.metadata.find("twin_heads");
  auto since = ck.metadata.find("twin_since");
  if (heads == ck.metadata.end() || since == ck.metadata.end())
    throw RuntimeError(path + ": invalid checkpoint: its twin has no `twin_heads` or `twin_since`");
  std::unique_ptr<Twin> t(new Twin());
  Checkpoint own;
  try {
    const json m = json::parse(meta->second);
    for (auto it = m.begin(); it != m.end(); ++it) own.metadata[it.key()] = it->get<std::string>();
    t->since_ = std::stol(since->second);
    std::string text = heads->second;
    for (size_t at = 0; at < text.size();) {
      size_t end = text.find(',', at);
      if (end == std::string::npos) end = text.size();
      const std::string ref = text.substr(at, end - at);
      const size_t colon = ref.find(':');
      if (colon == std::string::npos) throw std::invalid_argument("`" + ref + "` is no block:head");
      t->heads_.push_back({std::stoul(ref.substr(0, colon)), std::stoi(ref.substr(colon + 1))});
      at = end + 1;
    }
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": invalid checkpoint: its twin's record is corrupt (" + e.what() +
                       ")");
  }
  if (t->heads_.empty()) throw RuntimeError(path + ": invalid checkpoint: its twin names no heads");
  for (const auto& [k, v] : ck.tensors)
    if (k.rfind(kTwin, 0) == 0) own.tensors[k.substr(kTwin.size())] = v;
  const std::string where = path + " (the model's twin)";
  t->ex_ = twin_experiment(ck, where, plugin_paths);  // the run's configuration and data record
  t->ex_->comm_ = main.comm_;
  restore_training(own, where, t->ex_->parts());
  return t;
}

double Experiment::Twin::step(const Batch& batch, size_t global, float lr, double clip,
                              GradientSync& sync, bool several) {
  Model& m = *ex_->model_;
  NamedParams params = m.named_parameters();
  for (auto& [n, p] : params) p.zero_grad();
  mute_in_model(m, heads_, "keep a twin without");
  double mean = 0;
  try {
    Var logits = m.forward(batch, true, &ex_->state_.dropout_rng);
    Var loss = ops::cross_entropy(logits, batch.labels);
    mean = loss.value()[0];
    backward(loss);
  } catch (...) {
    unmute_model(m);
    throw;
  }
  unmute_model(m);
  if (several) {
    std::vector<double> sums = {mean * static_cast<double>(batch.batch)};
    sync.reduce(params, {}, static_cast<double>(batch.batch) / static_cast<double>(global), sums);
    mean = sums[0] / static_cast<double>(global);
  }
  if (!std::isfinite(mean)) return mean;  // no update: the trainer drops the twin
  clip_gradients(params, clip);
  ex_->optimizer_->step(params, lr);
  ++ex_->state_.step;
  return mean;
}

TwinProbe Experiment::Twin::probe(const std::vector<Example>& val, long batches,
                                  std::vector<double>* losses) {
  mute_in_model(*ex_->model_, heads_, "keep a twin without");
  EvalResult r;
  try {
    r = ex_->evaluate(val, batches, true);
  } catch (...) {
    unmute_model(*ex_->model_);
    throw;
  }
  unmute_model(*ex_->model_);
  TwinProbe p;
  p.heads = heads_;
  p.since = static_cast<size_t>(since_);
  p.loss = r.loss;
  p.accuracy = r.accuracy;
  *losses = std::move(r.example_losses);
  return p;
}

void Experiment::Twin::adopt(Experiment& main) const {
  NamedParams mine = ex_->model_->named_parameters();
  std::map<std::string, Var> by_name(mine.begin(), mine.end());
  NamedParams theirs = main.model_->named_parameters();
  std::set<std::string> names;
  for (auto& [n, p] : theirs) {
    auto it = by_name.find(n);
    if (it == by_name.end() || it->second.value().shape() != p.value().shape())
      throw RuntimeError("the model's twin has no parameter `" + n +
                         "` of the model's shape: it cannot take the model's place");
    const Tensor& from = it->second.value();
    Var to = p;
    std::copy(from.data(), from.data() + from.size(), to.value().data());
    names.insert(n);
  }
  // the optimizer's state of the parameters the model keeps ("m.<param>", "t.<param>", ...)
  auto kept = [&](const std::string& key) {
    const size_t dot = key.find('.');
    return dot != std::string::npos && names.count(key.substr(dot + 1)) > 0;
  };
  std::map<std::string, Tensor> state;
  for (auto& [k, t] : ex_->optimizer_->state_tensors())
    if (kept(k)) state[k] = t;
  std::map<std::string, double> scalars;
  for (auto& [k, v] : ex_->optimizer_->state_scalars())
    if (kept(k)) scalars[k] = v;
  main.optimizer_->load_state(state, scalars, theirs);
}

void Experiment::Twin::event(const Twin& twin, const char* what, long step, const std::string& why,
                             EventSink& events) {
  Event e;
  e.type = "twin";
  e.numbers = {{"step", double(step)}, {"since", double(twin.since())}};
  std::vector<double> heads;  // block, head id, block, head id, ...
  for (const HeadRef& h : twin.heads())
    heads.insert(heads.end(), {double(h.block), double(h.head)});
  e.lists = {{"heads", heads}};
  e.strings = {{"what", what}};
  if (!why.empty()) e.strings.push_back({"why", why});
  events.emit(e);
}

void Experiment::Twin::end(std::unique_ptr<Twin>& twin, const char* what, long step,
                           const std::string& why, EventSink& events) {
  event(*twin, what, step, why, events);
  twin.reset();
}

void Experiment::Twin::after_check(std::unique_ptr<Twin>& twin, Experiment& main,
                                   const trainer_detail::ModelShape& before,
                                   const std::vector<HeadRef>& want, long step,
                                   const std::vector<std::string>& plugin_paths,
                                   EventSink& events) {
  using trainer_detail::TwinFate;
  if (twin) {
    const TwinFate f = twin_fate(before, trainer_detail::shape_of(*main.model_), twin->heads());
    if (f == TwinFate::adopt) twin->adopt(main);
    if (f == TwinFate::adopt) end(twin, "adopted", step, "its heads were taken back", events);
    if (f == TwinFate::drop) end(twin, "dropped", step, "the model was edited otherwise", events);
  }
  if (twin && want != twin->heads()) end(twin, "dropped", step, "no policy asks for it", events);
  if (twin || want.empty()) return;
  twin.reset(new Twin(main, want, step, plugin_paths));
  event(*twin, "fork", step, "", events);
}

Checkpoint Experiment::Twin::saved() const {
  Checkpoint own = make_training_checkpoint(ex_->parts());
  Checkpoint out;
  for (auto& [k, t] : own.tensors) out.tensors[kTwin + k] = t;
  json meta = json::object();
  for (auto& [k, v] : own.metadata)
    if (k != "config" && k != "data" && k != "config_dir") meta[k] = v;
  out.metadata["twin"] = dump_json(meta);
  out.metadata["twin_heads"] = heads_text(heads_);
  out.metadata["twin_since"] = std::to_string(since_);
  return out;
}

}  // namespace gf

namespace gf {
namespace trainer_detail {

ModelShape shape_of(const Model& model) {
  ModelShape s;
  s.heads = head_ids(model);
  for (const Mlp* m : model.mlps()) s.widths.push_back(m ? m->width() : 0);
  return s;
}

TwinFate twin_fate(const ModelShape& before, const ModelShape& after,
                   const std::vector<HeadRef>& heads) {
  if (before == after) return TwinFate::keep;
  if (before.widths != after.widths || before.heads.size() != after.heads.size())
    return TwinFate::drop;
  ModelShape without = before;
  for (const HeadRef& h : heads) {
    if (h.block >= without.heads.size()) return TwinFate::drop;
    auto& ids = without.heads[h.block];
    auto it = std::find(ids.begin(), ids.end(), h.head);
    if (it == ids.end()) return TwinFate::drop;
    ids.erase(it);
  }
  return without == after ? TwinFate::adopt : TwinFate::drop;
}

}  // namespace trainer_detail
}  // namespace gf
