// growformer eval and predict: a trained checkpoint on its own data, on other data tokenised
// with the checkpoint's saved tokenizer, or on unlabelled records.
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include <growformer/autograd.hpp>
#include <growformer/checkpoint.hpp>
#include <growformer/json_text.hpp>
#include <growformer/classification.hpp>
#include <growformer/ops.hpp>
#include <growformer/parallel.hpp>
#include <growformer/registry.hpp>
#include <growformer/trainer.hpp>
#include <growformer/trainer_state.hpp>

#include "commands.hpp"

namespace po = boost::program_options;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace gfapp {

namespace {

// `--set data.KEY=VALUE` that switches the data set's mode (`source: files` for a model
// trained on generated data, say) drops the embedded options of the mode left: the
// checkpoint's resolved config spells them all out, and the dataset refuses them in the other
// mode. An option is another mode's when its spec says `mode: "KEY=VALUE"` and the data's KEY,
// set on the command line, now has another value; options set on the command line stay.
void drop_other_mode_options(const gf::ConfigNode& cfg, const std::set<std::string>& set_keys,
                             const std::vector<std::string>& plugin_paths) {
  gf::ConfigNode data = cfg.child("data");
  if (set_keys.empty() || !data.is_map() || !data.has("plugin") ||
      !data.child("plugin").is_scalar())
    return;
  gf::Registry reg;
  reg.load_directories(gf::Registry::search_path(plugin_paths));
  const gf::ComponentInfo* info = reg.find(gf::Kind::Dataset, data.child("plugin").as_string());
  if (!info) return;  // the experiment names the unknown plugin
  for (const gf::OptionSpec& spec : info->spec.options) {
    size_t eq = spec.mode.find('=');
    if (eq == std::string::npos || set_keys.count(spec.name) || !data.has(spec.name)) continue;
    std::string key = spec.mode.substr(0, eq), value = spec.mode.substr(eq + 1);
    if (set_keys.count(key) && data.has(key) && data.child(key).is_scalar() &&
        data.child(key).as_string() != value)
      data.remove(spec.name);
  }
}

// A `data:` section given with `eval --data CONFIG` for the checkpoint's own dataset plugin
// takes the options it leaves out that the plugin requires (a training file, say) from the
// checkpoint's: with the saved tokenizer only the evaluated split's file is read, so a section
// naming just `test: FILE` evaluates FILE, the training files gone.
void fill_required_from_checkpoint(gf::ConfigNode data, const gf::ConfigNode& saved,
                                   const std::vector<std::string>& plugin_paths) {
  if (!data.is_map() || !saved.is_map() || !data.has("plugin") || !saved.has("plugin") ||
      !data.child("plugin").is_scalar() || !saved.child("plugin").is_scalar() ||
      data.child("plugin").as_string() != saved.child("plugin").as_string())
    return;
  gf::Registry reg;
  reg.load_directories(gf::Registry::search_path(plugin_paths));
  const gf::ComponentInfo* info = reg.find(gf::Kind::Dataset, data.child("plugin").as_string());
  if (!info) return;  // the experiment names the unknown plugin
  for (const gf::OptionSpec& spec : info->spec.options)
    if (spec.required && !data.has(spec.name) && saved.has(spec.name))
      data.apply_override(spec.name + "=" + saved.child(spec.name).dump());
}

// The checkpoint's embedded config (relative paths against BASE), its data section replaced by
// the `data` section of the config DATA_CONFIG when one is given.
gf::ConfigNode embedded_config(const std::string& text, const std::string& path, std::string base,
                               const std::string& data_config,
                               const std::vector<std::string>& plugin_paths) {
  if (data_config.empty())
    return gf::ConfigNode::load_string(text, path + " (embedded config)", base);
  gf::ConfigNode other = gf::ConfigNode::load_file(data_config);
  gf::ConfigNode data_node = other.has("data") ? other.child("data") : other;
  if (!data_node.is_map() || !data_node.has("plugin"))
    throw gf::ConfigError(data_config +
                          ": expected a `data:` section (or a data mapping) with a "
                          "`plugin` key");
  gf::ConfigNode saved = gf::ConfigNode::load_string(text, path + " (embedded config)", base);
  base = fs::absolute(data_config).parent_path().string();  // its relative paths
  gf::ConfigNode cfg = gf::ConfigNode::load_string(text, path + " (embedded config)", base);
  cfg.apply_override("data=" + data_node.dump());
  fill_required_from_checkpoint(cfg.child("data"), saved.child("data"), plugin_paths);
  return cfg;
}

// Applies `--set data.KEY=VALUE` (a relative path that exists: against the current folder) to
// CFG; returns the KEY of each.
std::set<std::string> apply_data_sets(gf::ConfigNode& cfg, const std::vector<std::string>& sets) {
  std::set<std::string> set_keys;
  for (const std::string& s : sets) {
    if (s.rfind("data.", 0) != 0)
      throw UsageError("--set " + s +
                       ": only data.KEY=VALUE can change (the model is the checkpoint's)");
    set_keys.insert(s.substr(5, s.find_first_of(".=", 5) - 5));
    auto eq = s.find('=');
    std::string value = eq == std::string::npos ? "" : s.substr(eq + 1);
    if (!value.empty() && fs::path(value).is_relative() && fs::exists(value))
      cfg.apply_override(s.substr(0, eq + 1) + fs::absolute(value).string());
    else
      cfg.apply_override(s);
  }
  return set_keys;
}

const char* kGiveFileHint = "give the file yourself with --set data.KEY=FILE to see it";

// `--precision` of eval and predict: the products' precision instead of the model's own (its
// config's `precision:`); empty: the model's.
std::string g_precision;
const char* kPrecisionDoc =
    "float32 | bf16 | bf16_if_available: the products' precision (default: the model's, "
    "docs/NUMERICS.md)";

// The checkpoint's experiment, its data changed by `--set data.KEY=VALUE` or replaced by the
// `data` section of another config; the dataset tokenises with the checkpoint's tokenizer.
// With that tokenizer only the data named by `need` is read (Experiment's data_need): "none"
// for predict, the evaluated split for eval, so files of other splits need not exist. Plugins
// come from --plugin-path, and with TRUST (--trust-checkpoint-plugins) from the folders the
// checkpoint records (the libraries of a run that were found outside the built-in folders); a
// component not found names the recorded libraries (and how to opt in, or those gone). The data
// files only the embedded config names (into EMBEDDED) must be regular files, and an error
// reading one does not quote it (gf::withhold_file_contents).
std::unique_ptr<gf::Experiment> checkpoint_experiment(
    const gf::Checkpoint& ck, const std::string& path, const std::vector<std::string>& given_paths,
    bool trust, const std::vector<std::string>& data_sets, const std::string& data_config,
    const std::string& need, std::vector<std::string>* embedded = nullptr) {
  gf::check_checkpoint_format(ck, path);  // before its config builds anything
  auto cfg_text = ck.metadata.find("config");
  if (cfg_text == ck.metadata.end())
    throw gf::RuntimeError(path + ": not a growformer checkpoint (no embedded config)");
  auto record = ck.metadata.find("data");
  bool changed = !data_sets.empty() || !data_config.empty();
  if (changed && record == ck.metadata.end())
    throw gf::ConfigError(path +
                          ": the checkpoint has no saved tokenizer (it was written before "
                          "tokenizers were saved), so other data cannot be tokenised as in "
                          "training; `growformer resume` it once, or re-train");
  const gf::CheckpointPlugins plugins = gf::checkpoint_plugin_paths(ck, path, given_paths, trust);
  const std::vector<std::string>& plugin_paths = plugins.paths;
  auto dir = ck.metadata.find("config_dir");
  std::vector<std::string> files;  // named by the embedded config alone
  try {
    gf::ConfigNode cfg =
        embedded_config(cfg_text->second, path, dir == ck.metadata.end() ? "" : dir->second,
                        data_config, plugin_paths);
    std::set<std::string> set_keys = apply_data_sets(cfg, data_sets);
    drop_other_mode_options(cfg, set_keys, plugin_paths);
    if (!g_precision.empty()) cfg.apply_override("precision=" + g_precision);
    if (data_config.empty() && need != "none")
      files = gf::embedded_data_files(cfg.child("data"), set_keys, path);
    if (embedded) *embedded = files;
    auto ex = std::make_unique<gf::Experiment>(cfg, plugin_paths,
                                               record == ck.metadata.end() ? "" : record->second,
                                               need, gf::ExperimentUse::inference);
    ex->load_weights(ck, path);
    return ex;
  } catch (const gf::ConfigError& e) {
    gf::rethrow_with_missing_plugins(
        gf::ConfigError(gf::withhold_file_contents(e.what(), files, kGiveFileHint)), path, plugins,
        "`--plugin-path DIR`", "`--trust-checkpoint-plugins`");
  } catch (const gf::RuntimeError&) {
    gf::rethrow_withholding(files, kGiveFileHint);
  }
}

// `eval --data VALUE`: a config whose `data:` section replaces the checkpoint's, or, for a
// model whose dataset reads a labelled file as its test split (DataFormats::test_file_options)
// and a file not named .yaml or .yml, that data file evaluated as its test split.
bool is_config_file(const std::string& path) {
  std::string ext = fs::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".yaml" || ext == ".yml";
}

std::string embedded_data_plugin(const gf::Checkpoint& ck, const std::string& path) {
  auto cfg = ck.metadata.find("config");
  if (cfg == ck.metadata.end()) return "";
  gf::ConfigNode data =
      gf::ConfigNode::load_string(cfg->second, path + " (embedded config)").child("data");
  return data.valid() && data.is_map() && data.has("plugin") && data.child("plugin").is_scalar()
             ? data.child("plugin").as_string()
             : "";
}

std::string known_datasets(const gf::Registry& reg) {
  std::string s;
  for (const gf::ComponentInfo& c : reg.components())
    if (c.kind == gf::Kind::Dataset) s += (s.empty() ? "" : ", ") + c.spec.name;
  return s.empty() ? "none" : s;
}

// The data options with which the dataset of checkpoint CK (read from PATH) reads FILE as its
// test split; none when it reads no single labelled file. Plugins as checkpoint_experiment
// finds them.
std::vector<std::string> test_file_options(const gf::Checkpoint& ck, const std::string& path,
                                           const std::vector<std::string>& given, bool trust,
                                           const std::string& file) {
  const std::string plugin = embedded_data_plugin(ck, path);
  if (plugin.empty()) return {};
  const gf::CheckpointPlugins plugins = gf::checkpoint_plugin_paths(ck, path, given, trust);
  gf::Registry reg;
  reg.load_directories(gf::Registry::search_path(plugins.paths));
  if (!reg.find(gf::Kind::Dataset, plugin))
    gf::rethrow_with_missing_plugins(
        gf::ConfigError(path + ": its dataset `" + plugin + "`, which reads --data " + file +
                        ", is not found\n  known dataset components: " + known_datasets(reg)),
        path, plugins, "`--plugin-path DIR`", "`--trust-checkpoint-plugins`");
  const gf::DataFormats* formats = reg.data_formats(plugin);
  if (!formats) return {};
  return formats->test_file_options(fs::absolute(file).string());
}

// Logits of a batch of examples as class probabilities (row-major, n x C).
std::vector<double> probabilities(const gf::Var& logits) {
  size_t n = logits.dim(0), C = logits.dim(1);
  std::vector<double> p(n * C);
  for (size_t i = 0; i < n; ++i) {
    const float* row = logits.value().data() + i * C;
    double mx = *std::max_element(row, row + C), sum = 0;
    for (size_t c = 0; c < C; ++c) sum += p[i * C + c] = std::exp(double(row[c]) - mx);
    for (size_t c = 0; c < C; ++c) p[i * C + c] /= sum;
  }
  return p;
}

std::string fixed(double v, int digits) {
  char b[32];
  std::snprintf(b, sizeof b, "%.*f", digits, v);
  return b;
}

/// The text report of `eval`: the figures, per-class precision/recall/F1, the confusion matrix.
void print_eval(const std::string& split, const gf::EvalResult& e,
                const std::vector<std::string>& names) {
  const gf::ClassificationReport& r = e.classes;
  const std::vector<std::vector<size_t>>& confusion = r.confusion;
  const size_t C = confusion.size();
  std::cout << split << ": accuracy " << fixed(e.accuracy, 4) << ", loss " << fixed(e.loss, 4)
            << ", macro-F1 " << fixed(r.macro_f1, 4) << " on " << e.examples << " examples\n";
  size_t w = 5;
  for (auto& n : names) w = std::max(w, n.size());
  std::cout << "\n" << std::string(w - 5, ' ') << "class  precision  recall      f1  support\n";
  for (size_t c = 0; c < C; ++c) {
    std::printf("%*s  %9.4f  %6.4f  %6.4f  %7zu\n", static_cast<int>(w), names[c].c_str(),
                r.classes[c].precision, r.classes[c].recall, r.classes[c].f1, r.classes[c].support);
  }
  std::fflush(stdout);
  std::cout
      << "\nconfusion matrix (rows: true class, columns: predicted class, in the order above)\n";
  for (size_t t = 0; t < C; ++t) {
    std::printf("%*s ", static_cast<int>(w), names[t].c_str());
    for (size_t q = 0; q < C; ++q) std::printf(" %6zu", confusion[t][q]);
    std::printf("\n");
  }
  std::fflush(stdout);
}

/// The lines of one batch of predictions: PROB holds C probabilities per record.
void write_predictions(std::ostream& out, const std::string& format,
                       const std::vector<std::string>& names,
                       const std::vector<gf::Record>& pending, const std::vector<double>& prob,
                       size_t C) {
  char buf[32];
  for (size_t i = 0; i < pending.size(); ++i) {
    const double* row = prob.data() + i * C;
    size_t arg = static_cast<size_t>(std::max_element(row, row + C) - row);
    if (format == "tsv") {
      std::string id = pending[i].id;
      std::replace(id.begin(), id.end(), '\t', ' ');
      out << id << "\t" << names[arg];
      for (size_t c = 0; c < C; ++c) {
        std::snprintf(buf, sizeof buf, "%.6g", row[c]);
        out << "\t" << buf;
      }
      out << "\n";
    } else {
      json pr = json::object();
      for (size_t c = 0; c < C; ++c) pr[names[c]] = row[c];
      // ids and class names are bytes: written as json_text.hpp describes
      out << gf::dump_json(json({{"id", pending[i].id},
                                 {"line", pending[i].line},
                                 {"predicted", names[arg]},
                                 {"probabilities", pr}}))
          << "\n";
    }
  }
}

/// The class probabilities of a batch of RECORDS (their tokens are moved out).
std::vector<double> predict_batch(gf::Experiment& ex, std::vector<gf::Record>& records) {
  std::vector<gf::Example> chunk;
  std::vector<size_t> idx;
  for (size_t i = 0; i < records.size(); ++i) {
    gf::Example e;
    e.tokens = std::move(records[i].tokens);
    chunk.push_back(std::move(e));
    idx.push_back(i);
  }
  gf::NoGradGuard ng;
  gf::Batch b = ex.make_batch(chunk, idx);
  std::vector<double> prob = probabilities(ex.model().forward(b, false, nullptr));
  gf::clear_tape();
  return prob;
}

/// --threads at most this machine's cores (with a warning).
long clamp_threads(long threads) {
  size_t cores = std::max(1u, std::thread::hardware_concurrency());
  if (threads <= 0 || static_cast<unsigned long>(threads) <= cores) return threads;
  std::cerr << "warning: --threads " << threads << " is more than the " << cores
            << " cores of this machine; using " << cores << "\n";
  return static_cast<long>(cores);
}

}  // namespace

// ---------------------------------------------------------------------------
int cmd_eval(const std::vector<std::string>& args) {
  po::options_description o("eval options");
  std::string ck, split = "test", data_config;
  std::vector<std::string> paths, sets;
  o.add_options()(
      "checkpoint", po::value(&ck)->required(),
      "checkpoint (.safetensors), or a run directory (its best checkpoint, else its last)")(
      "split", po::value(&split), "val | test | train | all")(
      "set", po::value(&sets)->composing(),
      "change the data: data.KEY=VALUE (repeatable; e.g. data.test=FILE)")(
      "data", po::value(&data_config),
      "evaluate on the `data:` section of this config, or (a file not named .yaml/.yml, for "
      "datasets that read one labelled file, as text_tsv does: TSV, CSV or JSON lines) on this "
      "data file as the test split")("json", "print JSON")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder")(
      "precision", po::value(&g_precision), kPrecisionDoc)(kTrustOption, kTrustDoc);
  bool help;
  auto vm = parse(
      "growformer eval CHECKPOINT|RUN_DIR [--split val|test|train|all] [--set data.KEY=VALUE]... "
      "[--data CONFIG|FILE] [--json]",
      o, {{"checkpoint", 1}}, args, &help);
  if (help) return 0;
  if (split != "val" && split != "test" && split != "train" && split != "all")
    throw UsageError("--split must be val, test, train or all");
  std::string label = split;
  ck = gf::checkpoint_in(ck);
  gf::Checkpoint loaded = gf::load_checkpoint(ck);
  const bool trust = vm.count(kTrustOption) > 0;
  if (!data_config.empty() && !is_config_file(data_config)) {
    const std::vector<std::string> options =
        test_file_options(loaded, ck, paths, trust, data_config);
    if (!options.empty()) {
      if (!fs::exists(data_config))
        throw gf::ConfigError("--data " + data_config + ": no such file");
      if (vm.count("split") && split != "test")
        throw UsageError("--data FILE is evaluated as the test split; drop --split " + split);
      for (const std::string& o : options) sets.push_back("data." + o);
      label = data_config;  // the output names the file, not the split it stands in for
      data_config.clear();
    }
  }
  std::unique_ptr<gf::Experiment> ex;
  std::vector<std::string> embedded;
  try {
    ex = checkpoint_experiment(loaded, ck, paths, trust, sets, data_config, split, &embedded);
  } catch (const gf::ConfigError& e) {
    const std::string what = e.what();
    bool unreadable = what.find("cannot open") != std::string::npos ||
                      what.find("No such file") != std::string::npos;
    if (!sets.empty() || !data_config.empty() || !unreadable) throw;
    // the run's own data files, gone: the checkpoint alone evaluates other data
    throw gf::ConfigError(std::string(e.what()) + "\n  (the " + split +
                          " split is read from the "
                          "files the model trained on; evaluate other labelled data with --data "
                          "FILE or --set data.test=FILE; `growformer predict` needs no data)");
  }
  const gf::DataSplits& d = ex->data();
  std::vector<gf::Example> all;
  for (auto* s : {&d.train, &d.val, &d.test}) {
    const char* name = s == &d.train ? "train" : s == &d.val ? "val" : "test";
    if (split == "all" || split == name) all.insert(all.end(), s->begin(), s->end());
  }
  if (all.empty()) throw gf::RuntimeError("the " + split + " split is empty");
  const gf::EvalResult r = ex->evaluate(all);
  if (vm.count("json")) {
    json j = gf::json_bytes_tree(json::parse(ex->evaluation_json(r)));
    j["checkpoint"] = ck;
    j["split"] = split;
    j["heads"] = ex->model().heads_per_block();
    std::cout << gf::dump_json(j) << "\n";
    return 0;
  }
  if (!embedded.empty()) {
    std::cerr << "data files named by " << ck << "'s embedded config:";
    for (const std::string& f : embedded) std::cerr << " " << f;
    std::cerr << "\n";
  }
  print_eval(label, r, ex->class_names());
  return 0;
}

// ---------------------------------------------------------------------------
namespace {
/// The command line of `predict`.
struct PredictArgs {
  std::string ck, input, out_path, format = "tsv", bad = "fail";
  std::vector<std::string> paths;
  long batch = 0, threads = -1;
  bool quiet = false, help = false, trust = false;
};

PredictArgs parse_predict_args(const std::vector<std::string>& args) {
  po::options_description o("predict options");
  PredictArgs a;
  o.add_options()(
      "checkpoint", po::value(&a.ck)->required(),
      "checkpoint (.safetensors), or a run directory (its best checkpoint, else its last)")(
      "input", po::value(&a.input)->required(),
      "records: TSV with the text column (text_tsv), FASTA (fasta_variants), expressions "
      "(listops)")("out", po::value(&a.out_path), "output file (default: standard output)")(
      "format", po::value(&a.format), "tsv | jsonl")(
      "bad-records", po::value(&a.bad),
      "fail: stop at the first bad record; skip: report and go on")(
      "batch-size", po::value(&a.batch), "records per batch (default: the training batch size)")(
      "threads", po::value(&a.threads),
      "worker threads (default: the run's setting; 0 = all cores)")(
      "quiet,q", "no progress output")("plugin-path", po::value(&a.paths)->composing(),
                                       "extra plugin folder")(
      "precision", po::value(&g_precision), kPrecisionDoc)(kTrustOption, kTrustDoc);
  auto vm = parse(
      "growformer predict CHECKPOINT|RUN_DIR INPUT [--out FILE] [--format tsv|jsonl] "
      "[--bad-records fail|skip]",
      o, {{"checkpoint", 1}, {"input", 1}}, args, &a.help);
  if (a.help) return a;
  if (a.format != "tsv" && a.format != "jsonl") throw UsageError("--format must be tsv or jsonl");
  if (a.bad != "fail" && a.bad != "skip") throw UsageError("--bad-records must be fail or skip");
  if (a.batch < 0) throw UsageError("--batch-size must be positive");
  if (!fs::exists(a.input)) throw gf::ConfigError(a.input + ": no such input file");
  a.quiet = vm.count("quiet") > 0;
  a.trust = vm.count(kTrustOption) > 0;
  return a;
}
}  // namespace

int cmd_predict(const std::vector<std::string>& cli) {
  const PredictArgs a = parse_predict_args(cli);
  if (a.help) return 0;
  const std::string &input = a.input, &out_path = a.out_path, &format = a.format, &bad = a.bad;
  const std::vector<std::string>& paths = a.paths;
  const long batch = a.batch;
  long threads = a.threads;
  const std::string ck = gf::checkpoint_in(a.ck);
  gf::Checkpoint loaded = gf::load_checkpoint(ck);
  auto record = loaded.metadata.find("data");
  if (record == loaded.metadata.end())
    throw gf::ConfigError(ck +
                          ": the checkpoint has no saved tokenizer (it was written before "
                          "tokenizers were saved); `growformer resume` it once, or re-train");
  // the checkpoint alone: model, saved tokenizer and classes; no training data is read
  auto ex = checkpoint_experiment(loaded, ck, paths, a.trust, {}, "", "none");
  threads = clamp_threads(threads);
  if (threads >= 0) gf::set_num_threads(static_cast<size_t>(threads));
  auto reader = ex->dataset().open_records(input);

  const gf::DataSplits& d = ex->data();
  size_t C = d.num_classes, B = batch > 0 ? static_cast<size_t>(batch)
                                          : static_cast<size_t>(ex->settings().batch_size);
  const std::vector<std::string> names = ex->class_names();
  std::ofstream file;
  if (!out_path.empty()) {
    file.open(out_path);
    if (!file) throw gf::RuntimeError(out_path + ": cannot write");
  }
  std::ostream& out = out_path.empty() ? std::cout : file;
  if (format == "tsv") {
    out << "id\tpredicted";
    for (auto& n : names) out << "\tp_" << n;
    out << "\n";
  }
  bool progress = !a.quiet && isatty(2);
  auto t0 = std::chrono::steady_clock::now();
  auto last_draw = t0;
  size_t done = 0, skipped = 0;
  std::vector<gf::Record> pending;
  auto flush = [&]() {
    if (pending.empty()) return;
    write_predictions(out, format, names, pending, predict_batch(*ex, pending), C);
    done += pending.size();
    pending.clear();
    auto now = std::chrono::steady_clock::now();
    if (progress && std::chrono::duration<double>(now - last_draw).count() > 0.1) {
      last_draw = now;
      double secs = std::chrono::duration<double>(now - t0).count();
      std::fprintf(stderr, "\r\033[Kpredict: %zu records, %.1f records/s%s", done,
                   done / std::max(1e-9, secs),
                   skipped ? (", " + std::to_string(skipped) + " bad skipped").c_str() : "");
    }
  };
  gf::Record r;
  while (reader->next(r)) {
    if (!r.error.empty()) {
      // a reader's message may already start with where the record is (FASTA's k-mer errors)
      std::string where = input + ":" + std::to_string(r.line) + ": record `" + r.id + "`";
      std::string msg = r.error.rfind(where, 0) == 0 ? r.error : where + ": " + r.error;
      if (bad == "fail") throw gf::ConfigError(msg + " (--bad-records skip to go on without it)");
      if (progress) std::cerr << "\r\033[K";
      std::cerr << "skipped: " << msg << "\n";
      ++skipped;
      continue;
    }
    pending.push_back(std::move(r));
    if (pending.size() >= B) flush();
  }
  flush();
  out.flush();
  if (!out)
    throw gf::RuntimeError((out_path.empty() ? "standard output" : out_path) + ": write failed");
  if (progress) std::cerr << "\r\033[K";
  if (!a.quiet)
    std::cerr << "predict: " << done << " records"
              << (skipped ? ", " + std::to_string(skipped) + " bad skipped" : "")
              << (out_path.empty() ? "" : " -> " + out_path) << "\n";
  return 0;
}

}  // namespace gfapp
