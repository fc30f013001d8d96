#include "growformer/structure_editor.hpp"

#include <algorithm>
#include <map>
#include <set>

#include "growformer/errors.hpp"
#include "growformer/interrupt.hpp"

namespace gf {

namespace {
// A policy's hook as the interrupt watchdog names it when the hook hangs (interrupt.hpp).
AbandonableCall policy_call(const StructureEditor::Policy& p, const char* hook, size_t step) {
  return AbandonableCall("the " + p.role + " policy" + (p.name.empty() ? "" : " `" + p.name + "`") +
                         " in " + hook + "() at step " + std::to_string(step));
}
}  // namespace

StructureEditor::StructureEditor(std::vector<AttentionBlock*> blocks, std::vector<Policy> policies,
                                 EventSink* events, size_t total_steps)
    : blocks_(std::move(blocks)),
      policies_(std::move(policies)),
      events_(events),
      total_steps_(total_steps) {}

void StructureEditor::set_optimizer(const Module* model, Optimizer* optimizer) {
  model_ = model;
  optimizer_ = optimizer;
}

void StructureEditor::set_model(Model* model, Optimizer* optimizer) {
  set_optimizer(model, optimizer);
  edited_model_ = model;
  mlps_ = model ? model->mlps() : std::vector<Mlp*>();
}

bool StructureEditor::needs_probe() const {
  return std::any_of(policies_.begin(), policies_.end(),
                     [](const Policy& p) { return p.policy->needs_probe(); });
}

size_t StructureEditor::validation_probe(size_t step) const {
  size_t n = 0;
  for (const Policy& p : policies_) {
    AbandonableCall c = policy_call(p, "validation_probe", step);
    n = std::max(n, p.policy->validation_probe(step));
  }
  return n;
}

namespace {
std::vector<HeadRef> canonical(std::vector<HeadRef> heads) {
  std::sort(heads.begin(), heads.end(), [](const HeadRef& a, const HeadRef& b) {
    return a.block != b.block ? a.block < b.block : a.head < b.head;
  });
  heads.erase(std::unique(heads.begin(), heads.end()), heads.end());
  return heads;
}
}  // namespace

const Ablation* RunMetrics::ablation(std::vector<HeadRef> heads) const {
  heads = canonical(std::move(heads));
  for (const Ablation& a : ablations)
    if (canonical(a.heads) == heads) return &a;
  return nullptr;
}

const TwinProbe* RunMetrics::twin_without(std::vector<HeadRef> heads) const {
  if (twin.heads.empty()) return nullptr;
  return canonical(twin.heads) == canonical(std::move(heads)) ? &twin : nullptr;
}

namespace {
// Refuses a head of HEADS that BLOCKS do not hold: muting it would change nothing, and an
// "ablation" of it would report the unmuted loss. WHAT: what policy P asked to do with it.
void check_heads(const std::vector<AttentionBlock*>& blocks, const std::vector<HeadRef>& heads,
                 const StructureEditor::Policy& p, const char* what) {
  for (const HeadRef& h : heads) {
    const std::string asked =
        "the " + p.role + " policy" + (p.name.empty() ? "" : " `" + p.name + "`") + " asked to " +
        what + " head " + std::to_string(h.head) + " of block " + std::to_string(h.block);
    if (h.block >= blocks.size())
      throw RuntimeError(asked + ", but the model has " + std::to_string(blocks.size()) +
                         " block(s)");
    if (h.head == HeadRef::kWholeBlock) {
      if (std::string(what) == "ablate") continue;
      throw RuntimeError("the " + p.role + " policy" + (p.name.empty() ? "" : " `" + p.name + "`") +
                         " asked to " + what + " the whole block " + std::to_string(h.block) +
                         " (head " + std::to_string(HeadRef::kWholeBlock) +
                         "): only an ablation leaves a whole block out");
    }
    std::string ids;
    bool held = false;
    for (const HeadInfo& info : blocks[h.block]->heads()) {
      held = held || info.id == h.head;
      ids += (ids.empty() ? "" : ", ") + std::to_string(info.id);
    }
    if (!held)
      throw RuntimeError(
          asked + ", which has no such head (its heads: " + (ids.empty() ? "none" : ids) + ")");
  }
}
}  // namespace

std::vector<std::vector<HeadRef>> StructureEditor::probe_ablations(size_t step) const {
  std::vector<std::vector<HeadRef>> out;
  for (size_t p = 0; p < policies_.size(); ++p) {
    std::vector<std::vector<HeadRef>> sets;
    {
      AbandonableCall c = policy_call(policies_[p], "probe_ablations", step);
      sets = policies_[p].policy->probe_ablations(view(step, p));
    }
    for (auto& set : sets) {
      check_heads(blocks_, set, policies_[p], "ablate");
      std::vector<HeadRef> c = canonical(set);
      if (!c.empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
    }
  }
  return out;
}

void mute_in_model(Model& model, const std::vector<HeadRef>& set, const char* what) {
  if (set.empty()) return;
  std::vector<AttentionBlock*> blocks = model.blocks();
  std::vector<size_t> left_out;
  for (const HeadRef& h : set) {
    if (h.block >= blocks.size())
      throw RuntimeError(std::string("a policy asked to ") + what + " a head of block " +
                         std::to_string(h.block) + " of " + std::to_string(blocks.size()));
    if (h.head == HeadRef::kWholeBlock) {
      left_out.push_back(h.block);
      continue;
    }
    std::vector<int> ids = blocks[h.block]->muted();
    ids.push_back(h.head);
    blocks[h.block]->set_muted(ids);
  }
  model.set_left_out(left_out);
}

void unmute_model(Model& model) {
  for (AttentionBlock* b : model.blocks()) {
    b->set_muted({});
    b->set_muted_examples({}, {});
  }
  model.set_left_out({});
}

void mute_examples_in_model(Model& model, const GrowthPolicy::ExampleMute& m, size_t step,
                            size_t first, size_t batch) {
  if (m.heads.empty() || m.share <= 0.0) return;
  std::vector<AttentionBlock*> blocks = model.blocks();
  std::vector<uint8_t> rows(batch);
  for (size_t i = 0; i < batch; ++i) {
    const double n = static_cast<double>(first + i + step);
    rows[i] = std::floor((n + 1.0) * m.share) > std::floor(n * m.share) ? 1 : 0;
  }
  std::map<size_t, std::vector<int>> ids;
  for (const HeadRef& h : m.heads) {
    if (h.block >= blocks.size() || h.head == HeadRef::kWholeBlock)
      throw RuntimeError("a policy asked to mute on part of a batch block " +
                         std::to_string(h.block) + " (" + std::to_string(blocks.size()) +
                         " blocks; only heads can sit out on part of a batch)");
    ids[h.block].push_back(h.head);
  }
  for (auto& [b, heads] : ids) blocks[b]->set_muted_examples(heads, rows);
}

std::vector<HeadRef> StructureEditor::union_of_heads(
    size_t step, const char* hook, const char* what,
    std::vector<HeadRef> (GrowthPolicy::*ask)(size_t) const) const {
  std::vector<HeadRef> out;
  for (const Policy& p : policies_) {
    std::vector<HeadRef> heads;
    {
      AbandonableCall c = policy_call(p, hook, step);
      heads = (p.policy->*ask)(step);
    }
    check_heads(blocks_, heads, p, what);
    out.insert(out.end(), heads.begin(), heads.end());
  }
  return canonical(out);  // sorted, each once
}

std::vector<HeadRef> StructureEditor::muted_in_training(size_t step) const {
  return union_of_heads(step, "muted_in_training", "mute in training",
                        &GrowthPolicy::muted_in_training);
}

std::vector<HeadRef> StructureEditor::twin_without(size_t step) const {
  return union_of_heads(step, "twin_without", "keep a twin without", &GrowthPolicy::twin_without);
}

GrowthPolicy::ExampleMute StructureEditor::muted_on_examples(size_t step) const {
  GrowthPolicy::ExampleMute out;
  for (const Policy& p : policies_) {
    GrowthPolicy::ExampleMute m;
    {
      AbandonableCall c = policy_call(p, "muted_on_examples", step);
      m = p.policy->muted_on_examples(step);
    }
    if (m.heads.empty()) continue;
    if (!(m.share >= 0.0 && m.share <= 1.0))
      throw RuntimeError("the " + p.role + " policy `" + p.name +
                         "` asked heads to sit out a share " + std::to_string(m.share) +
                         " of a batch (a share is 0 to 1)");
    check_heads(blocks_, m.heads, p, "mute on part of a batch");
    out.heads.insert(out.heads.end(), m.heads.begin(), m.heads.end());
    out.share = std::max(out.share, m.share);
  }
  out.heads = canonical(out.heads);
  return out;
}

bool StructureEditor::on_trial(size_t step) const {
  return std::any_of(policies_.begin(), policies_.end(), [step](const Policy& p) {
    AbandonableCall c = policy_call(p, "on_trial", step);
    return p.policy->on_trial(step);
  });
}

bool StructureEditor::needs_head_mask_grads() const {
  return std::any_of(policies_.begin(), policies_.end(),
                     [](const Policy& p) { return p.policy->needs_head_mask_grads(); });
}

TrainView StructureEditor::view(size_t step, size_t p) const {
  TrainView v;
  v.step = step;
  v.total_steps = total_steps_;
  v.rng = policies_[p].rng;
  v.events = events_;
  if (metrics_) v.metrics = *metrics_;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    BlockView bv;
    bv.index = i;
    bv.block = blocks_[i];
    bv.mlp = i < mlps_.size() ? mlps_[i] : nullptr;
    if (probes_ && i < probes_->size() && (*probes_)[i].input.defined()) bv.probe = &(*probes_)[i];
    v.blocks.push_back(bv);
  }
  return v;
}

void StructureEditor::on_start() {
  for (size_t p = 0; p < policies_.size(); ++p) {
    AbandonableCall c = policy_call(policies_[p], "on_start", 0);
    policies_[p].policy->on_start(view(0, p));
  }
}

void StructureEditor::after_backward(size_t step) {
  for (size_t p = 0; p < policies_.size(); ++p)
    if (policies_[p].policy->needs_head_mask_grads()) {
      AbandonableCall c = policy_call(policies_[p], "after_backward", step);
      policies_[p].policy->after_backward(view(step, p));
    }
}

std::vector<Edit> StructureEditor::check(size_t step) {
  std::vector<std::string> before;
  if (model_ && optimizer_)
    for (auto& [n, p] : model_->named_parameters()) before.push_back(n);
  std::vector<Edit> applied;
  for (size_t p = 0; p < policies_.size(); ++p) {
    std::vector<Edit> edits;
    {
      AbandonableCall c = policy_call(policies_[p], "check", step);
      edits = policies_[p].policy->check(view(step, p));
    }
    // the heads asked for in each block, admitted (or refused as one event) before any is added
    std::map<size_t, size_t> adds;
    for (const Edit& e : edits)
      if (e.kind == Edit::Kind::AddHead && e.block < blocks_.size()) ++adds[e.block];
    std::set<size_t> refused;
    for (const auto& [block, count] : adds)
      if (refuse_heads(block, count, p)) refused.insert(block);
    for (Edit& e : edits) {
      if (e.kind == Edit::Kind::AddHead && refused.count(e.block)) continue;
      if (edit(e, p, step) != kRefused) applied.push_back(std::move(e));
    }
  }
  if (model_ && optimizer_) forget_removed(*optimizer_, before, *model_);
  return applied;
}

int StructureEditor::apply(const Edit& e, size_t p, size_t step) {
  if (e.kind == Edit::Kind::AddHead && e.block < blocks_.size() && refuse_heads(e.block, 1, p))
    return kRefused;
  return edit(e, p, step);
}

int StructureEditor::edit(const Edit& e, size_t p, size_t step) {
  if (!e.edits_blocks() && e.block >= blocks_.size()) {
    const Policy& pol = policies_[p];
    throw RuntimeError("the " + pol.role + " policy" +
                       (pol.name.empty() ? "" : " `" + pol.name + "`") + " asked to edit block " +
                       std::to_string(e.block) + ", but the model has " +
                       std::to_string(blocks_.size()) + " block(s)");
  }
  if ((e.kind == Edit::Kind::AddMlpUnits || e.kind == Edit::Kind::InsertBlock) &&
      refuse_growth(e, p))
    return kRefused;
  int new_id = -1;
  Event ev = e.cause;
  ev.block = static_cast<long>(e.block);
  if (e.edits_blocks()) {
    edit_blocks(e, p, &ev);
  } else if (!e.edits_heads()) {
    new_id = edit_mlp(e, p, &ev);
    if (new_id == kRefused) return kRefused;
  } else if (e.kind == Edit::Kind::AddHead) {
    new_id = blocks_[e.block]->add_head(e.init, *policies_[p].rng, step);
    ev.type = ev.type.empty() ? "grow" : ev.type;
    ev.head = new_id;
  } else {
    blocks_[e.block]->remove_head(e.head_id);
    ev.type = ev.type.empty() ? "prune" : ev.type;
    ev.head = e.head_id;
  }
  std::vector<double> heads;
  for (auto* b : blocks_) heads.push_back(static_cast<double>(b->num_heads()));
  ev.lists.push_back({"heads", heads});
  ev.strings.push_back({"policy", policies_[p].role});
  ev.strings.push_back({"what", e.edits_heads()    ? "head"
                                : e.edits_blocks() ? "block"
                                                   : "mlp_units"});
  if (events_) events_->emit(ev);
  // every policy hears of every edit (growth must know which heads pruning removed)
  for (size_t q = 0; q < policies_.size(); ++q) {
    AbandonableCall c = policy_call(policies_[q], "edited", step);
    policies_[q].policy->edited(e, new_id, view(step, q));
  }
  return new_id;
}

bool StructureEditor::refuse_heads(size_t block, size_t count, size_t p) {
  if (!admit_head_) return false;
  const std::string why = admit_head_(block, count);
  if (why.empty()) return false;
  Event ev;
  ev.type = "growth_refused";
  ev.block = static_cast<long>(block);
  ev.numbers = {{"heads", static_cast<double>(blocks_[block]->num_heads())},
                {"requested", static_cast<double>(count)}};
  ev.strings = {{"reason", why}, {"policy", policies_[p].role}};
  if (events_) events_->emit(ev);
  return true;
}

bool StructureEditor::refuse_growth(const Edit& e, size_t p) {
  if (!admit_growth_) return false;
  const std::string why = admit_growth_(e);
  if (why.empty()) return false;
  Event ev;
  ev.type = "growth_refused";
  ev.block = static_cast<long>(e.block);
  const bool units = e.kind == Edit::Kind::AddMlpUnits;
  ev.numbers = {{"blocks", static_cast<double>(blocks_.size())}};
  if (units) ev.numbers.push_back({"requested", static_cast<double>(e.units)});
  ev.strings = {
      {"reason", why}, {"policy", policies_[p].role}, {"what", units ? "mlp_units" : "block"}};
  if (events_) events_->emit(ev);
  return true;
}

void forget_removed(Optimizer& optimizer, const std::vector<std::string>& before,
                    const Module& model) {
  std::vector<std::string> after;
  for (auto& [n, p] : model.named_parameters()) after.push_back(n);
  std::vector<std::string> removed;
  for (auto& n : before)
    if (std::find(after.begin(), after.end(), n) == after.end()) removed.push_back(n);
  if (!removed.empty()) optimizer.forget(removed);
}

}  // namespace gf

namespace gf {

Probe make_probe(const Tensor& captured, const std::vector<uint8_t>& token_valid, size_t seq) {
  Probe p;
  p.input = captured;
  if (!captured.defined()) return p;
  size_t B = captured.dim(0), T = captured.dim(1);
  size_t off = T - seq;  // 1 with a CLS slot
  p.valid.assign(B * T, 1);
  for (size_t r = 0; r < B; ++r)
    for (size_t t = 0; t < seq; ++t) p.valid[r * T + t + off] = token_valid[r * seq + t];
  return p;
}

}  // namespace gf
