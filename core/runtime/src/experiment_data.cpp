// An experiment's data: the record a checkpoint keeps of it (tokenizer, vocabulary, classes),
// the splits read and checked against that record, and a task switch's second dataset.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "growformer/json_text.hpp"
#include "trainer_impl.hpp"

namespace gf {

using json = nlohmann::json;

namespace {
uint64_t vocab_fingerprint(const std::vector<std::string>& vocab) {
  std::string all;
  for (auto& v : vocab) all += v + '\n';
  return hash_name(all);
}

std::string join_names(const std::vector<std::string>& v) {
  std::string s;
  for (auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}
}  // namespace

std::string Experiment::data_record() const {
  json tok = data_.tokenizer.empty() ? json(nullptr) : json::parse(data_.tokenizer, nullptr, false);
  if (tok.is_discarded()) tok = data_.tokenizer;
  // class names and tokenizer state may hold any bytes: written losslessly (json_text.hpp)
  return dump_json(json({{"plugin", data_plugin_},
                         {"vocab_size", data_.vocab_size},
                         {"vocab_fingerprint", std::to_string(vocab_fingerprint(data_.vocab))},
                         {"pad_id", data_.pad_id},
                         {"num_classes", data_.num_classes},
                         {"class_names", data_.class_names},
                         {"tokenizer", tok}}));
}

namespace {
/// The checkpoint's data record as JSON (null when there is none), its plugin checked.
json parse_data_record(const std::string& record, const std::string& data_plugin) {
  if (record.empty()) return json();
  json saved = json::parse(record, nullptr, false);
  if (saved.is_discarded() || !saved.is_object())
    throw RuntimeError("the checkpoint's data record is corrupt");
  saved = json_bytes_tree(saved);  // the bytes data_record() was given
  if (saved.value("plugin", "") != data_plugin)
    throw ConfigError("data: the checkpoint was trained on dataset `" +
                      saved.value("plugin", std::string("?")) + "`, not `" + data_plugin +
                      "`: its tokens and classes cannot match");
  return saved;
}

/// The plugin's tokenizer text as data_record() was given it: a string, or JSON whose strings
/// were valid UTF-8 when the plugin wrote them (its own escapes, if any, are its own to read).
std::string tokenizer_text(const json& tok) {
  if (tok.is_string()) return tok.get<std::string>();
  try {
    return tok.dump();
  } catch (const json::exception& e) {
    throw RuntimeError(std::string("the checkpoint's data record is corrupt: its tokenizer: ") +
                       e.what());
  }
}

/// The model's shape and the class names from a checkpoint's data record, no data read.
DataSplits splits_from_record(const json& saved) {
  DataSplits d;
  try {
    d.vocab_size = saved.at("vocab_size").get<size_t>();
    d.pad_id = saved.at("pad_id").get<int32_t>();
    d.num_classes = saved.at("num_classes").get<size_t>();
    d.class_names = saved.at("class_names").get<std::vector<std::string>>();
  } catch (const json::exception& e) {
    throw RuntimeError(std::string("the checkpoint's data record is corrupt: ") + e.what());
  }
  return d;
}

/// Refuses data whose classes or vocabulary differ from the checkpoint's record.
void check_data_against_record(const DataSplits& d, const json& saved) {
  auto names = saved.value("class_names", std::vector<std::string>{});
  if (saved.value("num_classes", size_t(0)) != d.num_classes || names != d.class_names)
    throw ConfigError("data: the data has " + std::to_string(d.num_classes) + " classes (" +
                      join_names(d.class_names) + ") but the checkpoint was trained on " +
                      std::to_string(saved.value("num_classes", size_t(0))) + " (" +
                      join_names(names) + ")");
  if (saved.value("vocab_size", size_t(0)) != d.vocab_size ||
      saved.value("vocab_fingerprint", std::string()) != std::to_string(vocab_fingerprint(d.vocab)))
    throw ConfigError("data: the data's vocabulary (" + std::to_string(d.vocab_size) +
                      " tokens) is not the checkpoint's (" +
                      std::to_string(saved.value("vocab_size", size_t(0))) +
                      " tokens): tokenizer options differ");
}
}  // namespace

void Experiment::load_data(ConfigNode data_node, const std::string& data_record,
                           const std::string& data_need) {
  data_plugin_ = data_node.has("plugin") ? data_node.child("plugin").as_string() : "";
  json saved = parse_data_record(data_record, data_plugin_);
  DatasetBuild build{seed_, ""};
  if (!saved.is_null() && saved.contains("tokenizer") && !saved["tokenizer"].is_null())
    build.tokenizer = tokenizer_text(saved["tokenizer"]);
  if (data_need != "all" && data_need != "none" && data_need != "train" && data_need != "val" &&
      data_need != "test")
    throw std::invalid_argument("Experiment: data_need must be all, none, train, val or test");
  bool all = saved.is_null() || data_need == "all";
  if (!all && data_need != "none") build.only = data_need;
  dataset_ = registry_->create_dataset(data_node, build);
  // "none": the checkpoint alone gives the model's shape and the class names
  data_ = !all && data_need == "none" ? splits_from_record(saved) : dataset_->load();
  if (!saved.is_null() && data_need != "none") check_data_against_record(data_, saved);
  if (all && data_.train.empty()) throw ConfigError("data: the training split is empty");
  if (data_.num_classes < 2)
    throw ConfigError("data: the dataset has " + std::to_string(data_.num_classes) +
                      " class(es); classification needs at least 2");
  if (settings_.switch_at > 0 && all && use_ == ExperimentUse::training) load_switch_data();
}

void Experiment::check_without_data(ConfigNode data_node) {
  data_plugin_ = data_node.has("plugin") ? data_node.child("plugin").as_string() : "";
  dataset_ = registry_->create_dataset(data_node, DatasetBuild{seed_, ""});
  if (settings_.switch_at > 0) {
    try {
      switch_dataset_ = registry_->create_dataset(settings_.switch_data, DatasetBuild{seed_, ""});
    } catch (const ConfigError& e) {
      throw ConfigError(std::string("train.switch.data: ") + e.what());
    }
  }
  // a stand-in shape: the model's options are checked by building it, no data is read
  data_.vocab_size = 16;
  data_.num_classes = 2;
}

void Experiment::load_switch_data() {
  const char* where = "train.switch.data";
  // the first data's tokenizer state, so both tasks share one vocabulary and label map
  try {
    switch_dataset_ =
        registry_->create_dataset(settings_.switch_data, {seed_, data_.tokenizer, ""});
    switch_data_ = switch_dataset_->load();
  } catch (const ConfigError& e) {
    throw ConfigError(std::string(where) +
                      " (read with the first data's vocabulary and classes): " + e.what());
  }
  if (switch_data_.vocab_size != data_.vocab_size ||
      vocab_fingerprint(switch_data_.vocab) != vocab_fingerprint(data_.vocab) ||
      switch_data_.pad_id != data_.pad_id) {
    std::string plugin = settings_.switch_data.has("plugin")
                             ? settings_.switch_data.child("plugin").as_string()
                             : std::string();
    std::string differ =
        switch_data_.vocab_size != data_.vocab_size
            ? "its vocabulary (" + std::to_string(switch_data_.vocab_size) +
                  " tokens) is not the first data's (" + std::to_string(data_.vocab_size) +
                  " tokens)"
            : "its vocabulary holds other tokens than the first data's (" +
                  std::to_string(data_.vocab_size) + " tokens each" +
                  (switch_data_.pad_id != data_.pad_id ? ", another padding token" : "") + ")";
    throw ConfigError(std::string(where) + ": " + differ +
                      (plugin != data_plugin_
                           ? ": it is read by dataset `" + plugin + "`, the first data by `" +
                                 data_plugin_ +
                                 "`; both tasks share the first data's tokenizer, "
                                 "so use one dataset plugin with the same tokenizer options"
                           : ": give both the same tokenizer options"));
  }
  if (switch_data_.num_classes != data_.num_classes)
    throw ConfigError(std::string(where) + ": it has " + std::to_string(switch_data_.num_classes) +
                      " classes (" + join_names(switch_data_.class_names) +
                      ") but the first data has " + std::to_string(data_.num_classes) + " (" +
                      join_names(data_.class_names) +
                      "): the classifier cannot change its outputs");
  if (switch_data_.train.empty())
    throw ConfigError(std::string(where) + ": the training split is empty");
}

}  // namespace gf
