// An experiment's checkpoints and run files: saving, loading weights, the resolved config's
// folder line and checksum, and an experiment rebuilt from a checkpoint.
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "growformer/checkpoint.hpp"
#include "growformer/json_text.hpp"
#include "growformer/trainer_state.hpp"
#include "trainer_impl.hpp"

namespace gf {

namespace fs = std::filesystem;
using json = nlohmann::json;

TrainingParts Experiment::parts() {
  return {&cfg_,          model_.get(), optimizer_.get(), growth_.get(),
          pruning_.get(), &state_,      registry_.get(),  &settings_};
}

void Experiment::save(const std::string& path, const Checkpoint* extra) {
  if (!comm_->root()) return;  // rank 0 alone writes
  Checkpoint ck = make_training_checkpoint(parts());
  if (extra) {
    for (const auto& [k, t] : extra->tensors) ck.tensors[k] = t;
    for (const auto& [k, v] : extra->metadata) ck.metadata[k] = v;
  }
  ck.metadata["data"] = data_record();  // the tokenizer, so eval and predict tokenise as training
  if (!resolved_config_crc_.empty()) ck.metadata["resolved_config_crc"] = resolved_config_crc_;
  save_checkpoint(path, ck);
}

namespace trainer_detail {

// The config's folder on the `# config_dir:` line: a JSON string (any bytes, json_text.hpp;
// a control character or a non-UTF-8 byte would make the YAML file unreadable).
std::string config_dir_text(const std::string& dir) { return dump_json(json(dir)); }
std::string config_dir_of(const std::string& text) {
  if (text.empty() || text[0] != '"') return text;  // written before the line was JSON
  json j = json::parse(text, nullptr, false);
  return j.is_string() ? json_bytes(j.get<std::string>()) : text;
}

std::string text_crc(const std::string& text) {
  uLong crc =
      crc32_z(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(text.data()), text.size());
  char buf[24];
  std::snprintf(buf, sizeof buf, "crc32:%08lx", static_cast<unsigned long>(crc));
  return buf;
}

// config.resolved.yaml as text (bounded); RuntimeError when missing or not a regular file.
std::string read_resolved_config(const RunDir& dir) {
  std::string path = dir.resolved_config();
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw RuntimeError(path +
                       ": missing (or not a file): the run directory is incomplete; start "
                       "a new run with `growformer train`");
  if (fs::file_size(path, ec) > (16u << 20))
    throw RuntimeError(path + ": larger than 16 MiB: not the run's resolved configuration");
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string resolved_configuration(const std::string& text) {
  const size_t at = text.find(std::string("\n") + kStructureLine);
  return at == std::string::npos ? text : text.substr(0, at + 1);
}

std::vector<std::vector<int>> head_ids(const Model& model) {
  std::vector<std::vector<int>> out;
  for (const AttentionBlock* b : model.blocks()) {
    out.emplace_back();
    for (const HeadInfo& h : b->heads()) out.back().push_back(h.id);
  }
  return out;
}

bool mlp_grown(const std::vector<size_t>& widths, size_t start_width) {
  return std::any_of(widths.begin(), widths.end(), [&](size_t w) { return w != start_width; });
}

std::string structure_record(const std::vector<std::vector<int>>& heads,
                             const std::vector<size_t>& mlp_widths, size_t start_width, long step) {
  auto list = [](const auto& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  std::vector<int> counts;
  for (const auto& b : heads) counts.push_back(static_cast<int>(b.size()));
  std::string r = std::string(kStructureLine) +
                  "  # written by the run at each checkpoint; not read as configuration\n"
                  "#   step: " +
                  std::to_string(step) +
                  "  # of checkpoints/last.safetensors\n"
                  "#   blocks: " +
                  std::to_string(heads.size()) +
                  "  # model.layers above is the start\n"
                  "#   final_heads: " +
                  list(counts) + "  # per block (model.attention.heads above is the start)\n";
  if (mlp_grown(mlp_widths, start_width))
    r += "#   mlp_widths: " + list(mlp_widths) +
         "  # units per block (model.mlp_ratio above: " + std::to_string(start_width) + ")\n";
  r += "#   head_ids:\n";
  for (size_t i = 0; i < heads.size(); ++i)
    r += "#     layers." + std::to_string(i) + ".attn: " + list(heads[i]) + "\n";
  return r;
}

}  // namespace trainer_detail

void Experiment::record_structure(const RunDir& dir, long step) {
  if (!comm_->root() || resolved_config_.empty()) return;  // rank 0 alone writes
  const auto heads = trainer_detail::head_ids(*model_);
  const auto widths = model_->mlp_widths();
  const size_t start = model_->initial_mlp_width();
  // the structure the configuration builds: the configuration alone (a record of heads grown
  // earlier and taken back since would no longer match the checkpoint)
  dir.write(dir.resolved_config(),
            heads == start_heads_ && !trainer_detail::mlp_grown(widths, start)
                ? resolved_config_
                : resolved_config_ + trainer_detail::structure_record(heads, widths, start, step));
}

void Experiment::load_weights(const std::string& path) {
  load_weights(load_checkpoint(path), path);
}

void Experiment::load_weights(const Checkpoint& ck, const std::string& path) {
  restore_model(ck, path, *model_);
}

std::unique_ptr<Experiment> experiment_from_checkpoint(
    const std::string& path, const std::vector<std::string>& plugin_paths) {
  return experiment_from_checkpoint(load_checkpoint(path), path, plugin_paths);
}

namespace {
// The embedded config of checkpoint CK (relative data paths against the original config's
// folder) and its data record ("" in checkpoints written before it was saved).
ConfigNode embedded_config(const Checkpoint& ck, const std::string& path, std::string* record) {
  check_checkpoint_format(ck, path);  // before its config builds anything
  auto it = ck.metadata.find("config");
  if (it == ck.metadata.end())
    throw RuntimeError(path + ": not a growformer checkpoint (no embedded config)");
  auto dir = ck.metadata.find("config_dir");
  auto data = ck.metadata.find("data");
  *record = data == ck.metadata.end() ? "" : data->second;
  return ConfigNode::load_string(it->second, path + " (embedded config)",
                                 dir == ck.metadata.end() ? "" : dir->second);
}
}  // namespace

std::unique_ptr<Experiment> experiment_from_checkpoint(
    const Checkpoint& ck, const std::string& path, const std::vector<std::string>& plugin_paths) {
  std::string record;
  ConfigNode cfg = embedded_config(ck, path, &record);
  return std::make_unique<Experiment>(cfg, plugin_paths, record);
}

std::unique_ptr<Experiment> inference_from_checkpoint(const Checkpoint& ck, const std::string& path,
                                                      const std::vector<std::string>& plugin_paths,
                                                      const std::string& data_need,
                                                      const std::string& precision) {
  std::string record;
  ConfigNode cfg = embedded_config(ck, path, &record);
  if (!precision.empty()) cfg.apply_override("precision=" + precision);
  // the data files only the checkpoint names: regular files, and errors that do not quote them
  const std::vector<std::string> files = data_need == "none" && !record.empty()
                                             ? std::vector<std::string>()
                                             : embedded_data_files(cfg.child("data"), {}, path);
  const char* hint = "give the file yourself (a data config, or --set data.KEY=FILE) to see it";
  try {
    return std::make_unique<Experiment>(cfg, plugin_paths, record, data_need,
                                        ExperimentUse::inference);
  } catch (...) {
    rethrow_withholding(files, hint);
  }
}

}  // namespace gf
