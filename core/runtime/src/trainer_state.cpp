#include "growformer/trainer_state.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <nlohmann/json.hpp>

#include "growformer/errors.hpp"
#include "growformer/interrupt.hpp"
#include "growformer/json_text.hpp"
#include "growformer/registry.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/trainer.hpp"
#include "growformer/version.hpp"

namespace gf {

using json = nlohmann::json;

namespace {
// every model parameter is stored as "model.<name>"
const std::string kModel = "model.";
}  // namespace

void TrainWindow::add(const Var& logits, const Batch& batch, float mean_loss) {
  size_t C = logits.dim(1);
  for (size_t i = 0; i < batch.batch; ++i) {
    const float* row = logits.value().data() + i * C;
    correct += static_cast<int32_t>(std::max_element(row, row + C) - row) == batch.labels[i];
  }
  loss += mean_loss * batch.batch;
  count += batch.batch;
  for (auto v : batch.valid) tokens += v;
}

double TrainWindow::mean_loss() const { return loss / std::max(1.0, count); }
double TrainWindow::accuracy() const { return correct / std::max(1.0, count); }

TrainerState::TrainerState(uint64_t seed)
    : dropout_rng(seed, "dropout"), growth_rng(seed, "growth"), pruning_rng(seed, "pruning") {}

// JSON forms of the state's compound fields
void to_json(json& j, const TrainWindow& w) { j = {w.loss, w.correct, w.count, w.tokens}; }
void from_json(const json& j, TrainWindow& w) {
  w = TrainWindow{j.at(0).get<double>(), j.at(1).get<double>(), j.at(2).get<double>(),
                  j.at(3).get<double>()};
}
void to_json(json& j, const Rng& r) { j = {r.state(), r.increment()}; }
void from_json(const json& j, Rng& r) {
  r.restore(j.at(0).get<uint64_t>(), j.at(1).get<uint64_t>());
}

namespace {
/// The one list of the trainer state's fields and their names in the checkpoint; F(name,
/// value[, optional]): an optional field may be absent from an older checkpoint.
template <class State, class F>
void each_field(State& s, F&& f) {
  f("step", s.step);
  f("best_val", s.best_val);
  f("best_step", s.best_step);
  f("win", s.window);
  // added with the policies' RunMetrics; a checkpoint written before them loads with these
  // at their defaults (absent = not measured yet)
  f("chk", s.since_check, true);
  f("val_step", s.val_step, true);
  f("val_loss", s.val_loss, true);
  f("val_accuracy", s.val_accuracy, true);
  f("stopped_early", s.stopped_early, true);  // added with train.stop_patience
  f("rng", std::forward_as_tuple(s.dropout_rng, s.growth_rng, s.pruning_rng));
}
}  // namespace

std::string TrainerState::to_json() const {
  json j;
  each_field(*this, [&](const char* name, const auto& v, bool = false) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, std::tuple<const Rng&, const Rng&, const Rng&>>)
      j[name] = {std::get<0>(v), std::get<1>(v), std::get<2>(v)};
    else
      j[name] = v;
  });
  return j.dump();
}

void TrainerState::from_json(const std::string& text, const std::string& where) {
  try {
    json j = json::parse(text);
    each_field(*this, [&](const char* name, auto&& v, bool optional = false) {
      using V = std::decay_t<decltype(v)>;
      if (optional && !j.contains(name)) return;
      if constexpr (std::is_same_v<V, std::tuple<Rng&, Rng&, Rng&>>) {
        const json& r = j.at(name);
        std::get<0>(v) = r.at(0).get<Rng>();
        std::get<1>(v) = r.at(1).get<Rng>();
        std::get<2>(v) = r.at(2).get<Rng>();
      } else {
        const json& x = j.at(name);
        // a step of 10.5 would be read as 10: a whole number or nothing
        if constexpr (std::is_integral_v<V> && !std::is_same_v<V, bool>)
          if (!x.is_number_integer())
            throw std::runtime_error(std::string("`") + name + "` is " + x.dump().substr(0, 40) +
                                     ", not a whole number");
        x.get_to(v);
      }
    });
  } catch (const std::exception& e) {
    throw RuntimeError(where + ": corrupt trainer state in checkpoint: " + e.what());
  }
  // values a damaged or edited checkpoint could carry: refused, never trained on
  auto bad = [&](const std::string& what) {
    throw RuntimeError(where + ": invalid checkpoint: trainer " + what);
  };
  if (step < 0) bad("step " + std::to_string(step) + " is negative");
  if (best_step < -1 || best_step > step)
    bad("best_step " + std::to_string(best_step) + " is not in [-1, " + std::to_string(step) + "]");
  for (double v :
       {best_val, window.loss, window.correct, window.count, window.tokens, since_check.loss,
        since_check.correct, since_check.count, since_check.tokens, val_loss, val_accuracy})
    if (!std::isfinite(v)) bad("state holds a non-finite number");
  for (const TrainWindow* w : {&window, &since_check})
    if (w->count < 0 || w->correct < 0 || w->correct > w->count)
      bad("window counts are inconsistent");
  if (val_step < -1 || val_step > step)
    bad("val step " + std::to_string(val_step) + " is not in [-1, " + std::to_string(step) + "]");
}

// ---------------------------------------------------------------------------
namespace {
namespace fs = std::filesystem;

std::string folder_key(const std::string& dir) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(dir, ec), ec);
  return (ec ? fs::path(dir) : p).lexically_normal().string();
}

// The folders every process searches without being told (beside the program and the core
// library, the build's and the install's plugin folders): the search path without the
// GROWFORMER_PLUGIN_PATH entries, which a later process may not have.
std::set<std::string> builtin_plugin_folders() {
  std::set<std::string> env;
  if (const char* e = std::getenv("GROWFORMER_PLUGIN_PATH")) {
    std::stringstream ss(e);
    for (std::string part; std::getline(ss, part, ':');)
      if (!part.empty()) env.insert(folder_key(part));
  }
  std::set<std::string> out;
  for (const std::string& d : Registry::search_path({}))
    if (!env.count(folder_key(d))) out.insert(folder_key(d));
  return out;
}

// The libraries REGISTRY loaded from other folders than the built-in ones, as the checkpoint's
// "plugin_libraries" entry (a JSON list of {plugin, version, path, folder}); "" when none.
std::string recorded_plugin_libraries(const Registry& registry) {
  const std::set<std::string> builtin = builtin_plugin_folders();
  json out = json::array();
  for (const LoadedLibrary& l : registry.libraries()) {
    std::string folder = folder_key(fs::path(l.path).parent_path().string());
    if (builtin.count(folder)) continue;
    out.push_back(
        {{"plugin", l.plugin}, {"version", l.version}, {"path", l.path}, {"folder", folder}});
  }
  return out.empty() ? std::string() : dump_json(out);
}
}  // namespace

std::string checkpoint_in(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;
  RunDir dir(path);
  for (const std::string& ck : {dir.best_checkpoint(), dir.last_checkpoint()})
    if (fs::is_regular_file(ck, ec)) return ck;
  // a run's checkpoints/ folder itself
  for (const char* name : {"best.safetensors", "last.safetensors"})
    if (fs::is_regular_file(fs::path(path) / name, ec)) return (fs::path(path) / name).string();
  throw RuntimeError(path + ": a directory without a checkpoint: looked for " +
                     dir.best_checkpoint() + ", then " + dir.last_checkpoint() +
                     " (give a checkpoint file, or the "
                     "directory of a run that wrote one)");
}

namespace {
// One recorded library as the messages name it.
std::string recorded_line(const json& l, const std::string& lib) {
  return "plugin `" + printable(l.value("plugin", std::string("?"))) + "` " +
         printable(l.value("version", std::string())) + " from " + printable(lib);
}

// Why a recorded library is refused even with the opt-in ("" when it is not): a relative folder
// or path would be resolved against the working directory (where the checkpoint was put, say),
// and the folder searched is the one the library lies in.
std::string refused_library(const std::string& lib, const std::string& folder) {
  if (fs::path(folder).is_relative() || fs::path(lib).is_relative())
    return "a relative folder or path (never resolved against the working directory)";
  const std::string name = fs::path(lib).filename().string();
  if (name.rfind("libgf_", 0) != 0 || fs::path(name).extension() != ".so")
    return "not a plugin library's name (libgf_*.so)";
  if (folder_key(fs::path(lib).parent_path().string()) != folder_key(folder))
    return "the library does not lie in the recorded folder `" + printable(folder) + "`";
  return "";
}
}  // namespace

CheckpointPlugins checkpoint_plugin_paths(const Checkpoint& ck, const std::string& path,
                                          const std::vector<std::string>& given, bool trust) {
  CheckpointPlugins out;
  out.paths = given;
  auto it = ck.metadata.find("plugin_libraries");
  if (it == ck.metadata.end()) return out;
  json libs = json::parse(it->second, nullptr, false);
  if (!libs.is_array())
    throw RuntimeError(path + ": corrupt `plugin_libraries` record (not a JSON list)");
  std::error_code ec;
  for (const json& l : json_bytes_tree(libs)) {
    if (!l.is_object() || !l.value("path", json()).is_string() ||
        !l.value("folder", json()).is_string())
      throw RuntimeError(
          path + ": corrupt `plugin_libraries` record: " + printable(l.dump().substr(0, 120)));
    const std::string lib = l["path"].get<std::string>(), folder = l["folder"].get<std::string>();
    const std::string refused = refused_library(lib, folder);
    if (!trust) {
      out.untrusted.push_back(recorded_line(l, lib) +
                              (refused.empty() ? "" : " (refused: " + refused + ")"));
      continue;
    }
    if (!refused.empty())
      throw RuntimeError(path + ": records " + recorded_line(l, lib) + ": refused: " + refused);
    if (!fs::is_regular_file(lib, ec)) {
      out.missing.push_back(recorded_line(l, lib));
      continue;
    }
    if (std::find(out.paths.begin(), out.paths.end(), folder) == out.paths.end())
      out.paths.push_back(folder);
  }
  return out;
}

void rethrow_with_missing_plugins(const ConfigError& e, const std::string& path,
                                  const CheckpointPlugins& plugins, const std::string& flag,
                                  const std::string& trust_flag) {
  if (plugins.missing.empty() && plugins.untrusted.empty()) throw e;
  std::string msg = e.what();
  if (!plugins.untrusted.empty()) {
    msg += "\n  " + path +
           " records plugin libraries it was trained with; none was loaded (a checkpoint's "
           "libraries run native code, so they are used only when you ask):";
    for (const std::string& m : plugins.untrusted) msg += "\n    " + m;
    msg += "\n  if you trust this checkpoint and those files, give " + trust_flag + ", or give " +
           flag + " with the folder of the plugin you mean";
  }
  if (!plugins.missing.empty()) {
    msg += "\n  " + path +
           " was trained with plugin libraries that are missing now (moved or deleted?):";
    for (const std::string& m : plugins.missing) msg += "\n    " + m;
    msg += "\n  put the library back there, or give " + flag + " with the folder it is in now";
  }
  throw ConfigError(msg);
}

namespace {
void collect_files(const ConfigNode& node, const std::string& base, std::vector<std::string>* out) {
  if (node.is_map()) {
    for (const std::string& k : node.keys()) collect_files(node.child(k), base, out);
  } else if (node.is_sequence()) {
    for (const ConfigNode& c : node.items()) collect_files(c, base, out);
  } else if (node.is_scalar()) {
    const std::string v = node.as_string();
    if (v.empty() || v.size() > 4096) return;
    std::error_code ec;
    fs::path p = fs::path(v).is_absolute() || base.empty() ? fs::path(v) : fs::path(base) / v;
    if (fs::exists(p, ec)) out->push_back(p.lexically_normal().string());
  }
}
}  // namespace

std::vector<std::string> embedded_data_files(const ConfigNode& data,
                                             const std::set<std::string>& user_keys,
                                             const std::string& checkpoint) {
  std::vector<std::string> out;
  if (!data.valid() || !data.is_map()) return out;
  // a copy of the section: reading it here marks nothing of the real config consumed
  ConfigNode copy = ConfigNode::load_string(data.dump(), "<data>", data.base_dir());
  for (const std::string& k : copy.keys())
    if (!user_keys.count(k)) collect_files(copy.child(k), data.base_dir(), &out);
  for (const std::string& f : out) {
    std::error_code ec;
    fs::file_status st = fs::status(f, ec);
    if (!fs::is_regular_file(st) && !fs::is_directory(st))
      throw RuntimeError(checkpoint + ": its embedded config names `" + printable(f) +
                         "` as data, which is not a regular file (a device, a FIFO or a "
                         "socket): refused; give the data yourself with --set data.KEY=FILE");
  }
  return out;
}

std::string withhold_file_contents(const std::string& msg, const std::vector<std::string>& files,
                                   const std::string& hint) {
  for (const std::string& f : files) {
    size_t at = msg.find(f);
    if (at == std::string::npos) continue;
    size_t end = at + f.size();
    for (int field = 0; field < 2; ++field) {  // :LINE, :COLUMN
      size_t d = end + 1;
      while (d < msg.size() && std::isdigit(static_cast<unsigned char>(msg[d]))) ++d;
      if (end < msg.size() && msg[end] == ':' && d > end + 1) end = d;
    }
    if (msg.compare(end, 14, ": cannot open ") == 0) continue;
    return msg.substr(0, end) +
           ": cannot be read as this data set's file (the reason is withheld: the file was "
           "named by the checkpoint's embedded config, not by you, and the message could quote "
           "its contents; " +
           hint + ")";
  }
  return msg;
}

void rethrow_withholding(const std::vector<std::string>& files, const std::string& hint) {
  try {
    throw;
  } catch (const ConfigError& e) {
    const std::string msg = withhold_file_contents(e.what(), files, hint);
    if (msg == e.what()) throw;
    throw ConfigError(msg);
  } catch (const RuntimeError& e) {
    const std::string msg = withhold_file_contents(e.what(), files, hint);
    if (msg == e.what()) throw;
    throw RuntimeError(msg);
  }
}

Checkpoint make_training_checkpoint(const TrainingParts& p) {
  Checkpoint ck;
  for (auto& [n, v] : p.model->named_parameters()) ck.tensors[kModel + n] = v.value();
  for (auto& [n, t] : p.optimizer->state_tensors()) ck.tensors["optim." + n] = t;
  json arch = json::array();
  for (auto* b : p.model->blocks()) {
    std::optional<BlockStructure> st = b->structure();
    arch.push_back(st ? st->text() : std::string());
  }
  ck.metadata["format"] = kCheckpointFormat;
  ck.metadata["growformer_version"] = GROWFORMER_VERSION;
  ck.metadata["config"] = p.config->dump();
  ck.metadata["config_dir"] = p.config->base_dir();
  ck.metadata["architecture"] = dump_json(arch);
  ck.metadata["heads"] = json(p.model->heads_per_block()).dump();
  ck.metadata["optimizer_scalars"] = json(p.optimizer->state_scalars()).dump();
  ck.metadata["trainer"] = p.state->to_json();
  if (p.registry) {
    std::string libs = recorded_plugin_libraries(*p.registry);
    if (!libs.empty()) ck.metadata["plugin_libraries"] = libs;
  }
  {
    AbandonableCall c("the growth or pruning policy in save_state() (a checkpoint being made)");
    ck.metadata["growth_state"] = p.growth->save_state();
    ck.metadata["pruning_state"] = p.pruning->save_state();
  }
  return ck;
}

void check_checkpoint_format(const Checkpoint& ck, const std::string& path) {
  auto it = ck.metadata.find("format");
  if (it == ck.metadata.end())
    throw RuntimeError(path + ": not a growformer training checkpoint (no `format` entry)");
  if (it->second != kCheckpointFormat)
    throw RuntimeError(path + ": checkpoint format `" + printable(it->second.substr(0, 80)) +
                       "` is not the `" + kCheckpointFormat + "` this growformer " +
                       GROWFORMER_VERSION + " reads (written by another version?)");
}

namespace {
// "[0, 1, 4]" (the first 20 ids, then how many more)
std::string id_list(const std::vector<int>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < 20; ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  if (ids.size() > 20) out += ", ... " + std::to_string(ids.size() - 20) + " more";
  return out + "]";
}

// The heads each block's tensors hold ("layers.I" -> head ids, sorted).
std::map<std::string, std::vector<int>> tensor_heads(const Checkpoint& ck) {
  std::map<std::string, std::set<int>> held;
  for (auto& [k, t] : ck.tensors)
    if (k.rfind(kModel, 0) == 0) {
      ParamPlace place = Model::place_of(k.substr(kModel.size()));
      if (place.head.empty()) continue;
      // a name whose id is no number matches no parameter: restore_model names it
      const std::string id = place.head.substr(place.head.rfind('.') + 1);
      char* end = nullptr;
      const long v = std::strtol(id.c_str(), &end, 10);
      if (!id.empty() && *end == '\0' && v >= 0 && v <= INT32_MAX)
        held[place.block].insert(static_cast<int>(v));
    }
  std::map<std::string, std::vector<int>> out;
  for (auto& [b, ids] : held) out[b] = std::vector<int>(ids.begin(), ids.end());
  return out;
}

// The checkpoint's `heads` record (one count per block, written beside the structures for
// readers that do not parse them), or null when absent: an older checkpoint.
json heads_record(const Checkpoint& ck, const std::string& path, size_t blocks) {
  auto it = ck.metadata.find("heads");
  if (it == ck.metadata.end()) return json();
  json heads;
  try {
    heads = json::parse(it->second);
  } catch (const json::exception& e) {
    throw RuntimeError(path + ": corrupt `heads` record: " + e.what());
  }
  if (!heads.is_array() || heads.size() != blocks)
    throw RuntimeError(path + ": invalid checkpoint: the `heads` record is not a list of " +
                       std::to_string(blocks) + " head counts (one per block)");
  return heads;
}

// The checkpoint's architecture record: a JSON list, one structure text per block.
json architecture_record(const Checkpoint& ck, const std::string& path) {
  auto it = ck.metadata.find("architecture");
  if (it == ck.metadata.end())
    throw RuntimeError(path + ": not a growformer checkpoint (no architecture)");
  json arch = json::parse(it->second, nullptr, false);
  if (!arch.is_array())
    throw RuntimeError(path + ": corrupt architecture record (not a JSON list)");
  return arch;
}
}  // namespace

std::vector<std::optional<BlockStructure>> checked_structures(
    const Checkpoint& ck, const std::string& path, const std::vector<AttentionBlock*>* model) {
  const json arch = architecture_record(ck, path);
  if (model && arch.size() != model->size())
    throw RuntimeError(path + ": the checkpoint has " + std::to_string(arch.size()) +
                       " blocks but the model has " + std::to_string(model->size()));
  const json counts = heads_record(ck, path, arch.size());
  auto held = tensor_heads(ck);
  std::vector<std::optional<BlockStructure>> out;
  for (size_t i = 0; i < arch.size(); ++i) {
    const std::string block = "layers." + std::to_string(i);
    const std::string what = path + ": invalid checkpoint: block " + block + ".attn";
    if (!arch[i].is_string()) throw RuntimeError(what + ": its structure record is not a string");
    const std::string text = arch[i].get<std::string>();
    const AttentionBlock* b = model ? (*model)[i] : nullptr;
    // "" = a block without heads: the model's block says whether it has them
    if (b && text.empty() == b->structure().has_value())
      throw RuntimeError(what + ": the checkpoint records " +
                         (text.empty() ? "no structure for it, a block with heads ("
                                       : "a structure for a block without heads (") +
                         b->describe() + ")");
    std::optional<BlockStructure> s;
    if (!text.empty())
      s = BlockStructure::parse(text, what, b ? b->max_heads() : kMaxCheckpointHeads);
    // the one count, the structure's, against the summary and the tensors
    std::vector<int> ids = s ? s->ids() : std::vector<int>();
    const size_t n = ids.size();
    if (!counts.is_null() && (!counts[i].is_number_unsigned() || counts[i].get<uint64_t>() != n))
      throw RuntimeError(what + ": the `heads` record says " + counts[i].dump().substr(0, 40) +
                         " heads but its structure names " + std::to_string(n));
    std::sort(ids.begin(), ids.end());
    if (ids != held[block])
      throw RuntimeError(what + ": its structure names heads " + id_list(ids) + " (" +
                         std::to_string(n) + ") but the tensors hold heads " +
                         id_list(held[block]) + " (" + std::to_string(held[block].size()) + ")");
    out.push_back(std::move(s));
  }
  return out;
}

size_t checked_block_count(const Checkpoint& ck, const std::string& path) {
  const json arch = architecture_record(ck, path);
  if (arch.empty() || arch.size() > Model::kMaxBlocks)
    throw RuntimeError(path + ": invalid checkpoint: its architecture record lists " +
                       std::to_string(arch.size()) + " blocks (a model holds 1.." +
                       std::to_string(Model::kMaxBlocks) + ")");
  return arch.size();
}

void restore_model(const Checkpoint& ck, const std::string& path, Model& model) {
  check_checkpoint_format(ck, path);
  model.set_blocks(checked_block_count(ck, path));  // a depth edit: the run's number of blocks
  auto blocks = model.blocks();
  auto structures = checked_structures(ck, path, &blocks);
  for (size_t i = 0; i < blocks.size(); ++i)
    if (structures[i]) blocks[i]->restore_structure(*structures[i]);
  const std::vector<size_t> widths = checked_mlp_widths(ck, path, &model);
  const std::vector<Mlp*> mlps = model.mlps();
  for (size_t i = 0; i < mlps.size(); ++i)
    if (widths[i] && widths[i] != mlps[i]->width()) mlps[i]->resize(widths[i]);
  auto params = model.named_parameters();
  for (auto& [n, p] : params) {
    auto t = ck.tensors.find(kModel + n);
    if (t == ck.tensors.end())
      throw RuntimeError(path + ": parameter `" + n + "` is missing from the checkpoint");
    if (t->second.shape() != p.value().shape())
      throw RuntimeError(path + ": parameter `" + n + "` has shape " +
                         shape_str(t->second.shape()) + " in the checkpoint but " +
                         shape_str(p.value().shape()) + " in the model");
    for (size_t i = 0; i < t->second.size(); ++i)
      if (!std::isfinite(t->second[i]))
        throw RuntimeError(path + ": parameter `" + n + "` holds a non-finite value (" +
                           std::to_string(t->second[i]) + " at element " + std::to_string(i) + ")");
    Var v = p;
    std::copy(t->second.data(), t->second.data() + t->second.size(), v.value().data());
  }
  for (auto& [k, t] : ck.tensors)
    if (k.rfind(kModel, 0) == 0) {
      bool found = false;
      for (auto& [n, p] : params) found = found || (kModel + n) == k;
      if (!found) throw RuntimeError(path + ": checkpoint tensor `" + k + "` matches no parameter");
    }
}

CheckpointModel read_checkpoint_model(const Checkpoint& ck, const std::string& path) {
  CheckpointModel m;
  for (auto& [k, t] : ck.tensors)
    if (k.rfind(kModel, 0) == 0) {
      std::string name = k.substr(kModel.size());
      m.parameters.push_back({name, Model::place_of(name), t.size()});
    }
  auto entry = [&](const char* key, const char* absent) {
    auto it = ck.metadata.find(key);
    try {
      return json::parse(it == ck.metadata.end() ? absent : it->second);
    } catch (const json::exception& e) {
      throw RuntimeError(path + ": corrupt `" + key + "` record: " + e.what());
    }
  };
  check_checkpoint_format(ck, path);
  try {
    json step = entry("trainer", "{}").value("step", json(0));
    if (!step.is_number_integer())
      throw RuntimeError(path + ": corrupt trainer state in checkpoint: `step` is " +
                         step.dump().substr(0, 40) + ", not a whole number");
    m.step = step.get<long>();
  } catch (const json::exception& e) {
    throw RuntimeError(path + ": corrupt model record: " + e.what());
  }
  for (const auto& s : checked_structures(ck, path)) {
    m.heads_per_block.push_back(s ? s->heads.size() : 0);
    m.architecture.push_back(s ? s->text() : std::string());
  }
  m.mlp_width_per_block = checked_mlp_widths(ck, path);
  return m;
}

long restore_training(const Checkpoint& ck, const std::string& path, const TrainingParts& p) {
  restore_model(ck, path, *p.model);
  std::map<std::string, Tensor> ot;
  for (auto& [k, t] : ck.tensors)
    if (k.rfind("optim.", 0) == 0) ot[k.substr(6)] = t;
  std::map<std::string, double> os;
  auto entry = [&](const char* key) -> const std::string& {
    auto it = ck.metadata.find(key);
    if (it == ck.metadata.end())
      throw RuntimeError(path + ": corrupt trainer state in checkpoint: no `" + key + "` entry");
    return it->second;
  };
  try {
    json osj = json::parse(entry("optimizer_scalars"));
    for (auto it = osj.begin(); it != osj.end(); ++it) os[it.key()] = it->get<double>();
  } catch (const json::exception& e) {
    throw RuntimeError(path + ": corrupt trainer state in checkpoint: " + e.what());
  }
  p.state->from_json(entry("trainer"), path);
  const long steps = p.settings ? p.settings->steps : p.state->step;
  if (p.state->step > steps)
    throw RuntimeError(path + ": invalid checkpoint: trainer step " +
                       std::to_string(p.state->step) + " is beyond the run's " +
                       std::to_string(steps) + " steps");
  try {
    p.optimizer->load_state(ot, os, p.model->named_parameters());
  } catch (const RuntimeError& e) {
    throw RuntimeError(path + ": invalid checkpoint: " + e.what());
  }
  auto policy_state = [&](const char* key) {
    auto it = ck.metadata.find(key);
    return it == ck.metadata.end() ? std::string() : it->second;
  };
  p.growth->load_state(policy_state("growth_state"));
  p.pruning->load_state(policy_state("pruning_state"));
  return p.state->step;
}

}  // namespace gf
