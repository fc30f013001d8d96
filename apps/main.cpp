// growformer: the command-line program. Each subcommand parses its own options
// (Boost.program_options) and calls into libgrowformer. Exit status: 0 success,
// 2 usage or configuration error, 1 runtime failure.
#include <growformer/blas.hpp>
#include <growformer/checkpoint.hpp>
#include <growformer/json_text.hpp>
#include <growformer/config.hpp>
#include <growformer/data/data_stats.hpp>
#include <growformer/data/listops.hpp>
#include <growformer/distributed.hpp>
#include <growformer/trainer.hpp>
#include <growformer/trainer_state.hpp>
#include <growformer/kernels.hpp>
#include <growformer/precision.hpp>
#include <growformer/version.hpp>

#include <boost/program_options.hpp>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <thread>
#include <map>
#include <new>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "commands.hpp"

namespace po = boost::program_options;
using json = nlohmann::json;

namespace gfapp {

po::variables_map parse(const std::string& usage, po::options_description& opts,
                        po::positional_options_description& pos,
                        const std::vector<std::string>& args, bool* help) {
  opts.add_options()("help,h", "show this help");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).positional(pos).run(), vm);
    if (vm.count("help")) {
      std::cout << "usage: " << usage << "\n\n" << opts << "\n";
      *help = true;
      return vm;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    throw UsageError(std::string(e.what()) + "\nusage: " + usage + "\n(see --help)");
  }
  *help = false;
  return vm;
}

po::variables_map parse(const std::string& usage, po::options_description& opts,
                        std::initializer_list<std::pair<const char*, int>> positional,
                        const std::vector<std::string>& args, bool* help) {
  po::positional_options_description pos;
  for (auto& [name, count] : positional) pos.add(name, count);
  return parse(usage, opts, pos, args, help);
}

gf::ConfigNode load_config(const std::string& path, const std::vector<std::string>& sets) {
  gf::ConfigNode cfg = gf::ConfigNode::load_file(path);
  for (const auto& s : sets) cfg.apply_override(s);
  return cfg;
}

// ---------------------------------------------------------------------------
int cmd_train(const std::vector<std::string>& args) {
  po::options_description o("train options");
  std::string config, run_dir;
  std::vector<std::string> sets, paths;
  long stop_after = -1;
  o.add_options()("config", po::value(&config)->required(), "YAML config")(
      "set", po::value(&sets)->composing(), "override KEY=VALUE (repeatable)")(
      "run-dir", po::value(&run_dir), "run directory (default runs/<name>)")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder (repeatable)")(
      "stop-after", po::value(&stop_after),
      "stop with a checkpoint after this step (resume later)")("quiet,q", "no progress output");
  bool help;
  auto vm = parse("growformer train CONFIG [--set KEY=VALUE]... [--run-dir DIR] [--plugin-path P]",
                  o, {{"config", 1}}, args, &help);
  if (help) return 0;
  gf::Communicator& comm = gf::world();  // before any work: refuses N copies
  gf::install_interrupt_handler();
  gf::Experiment ex(load_config(config, sets), paths);
  gf::RunFlags f;
  f.comm = &comm;
  f.run_dir = run_dir;
  f.plugin_paths = paths;
  f.stop_after = stop_after;
  f.quiet = vm.count("quiet") > 0;
  return ex.train(f);
}

int cmd_resume(const std::vector<std::string>& args) {
  po::options_description o("resume options");
  std::string dir;
  std::vector<std::string> paths;
  long stop_after = -1;
  o.add_options()("run-dir", po::value(&dir)->required(), "run directory to continue")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder (repeatable)")(
      "stop-after", po::value(&stop_after), "stop again after this step")("quiet,q",
                                                                          "no progress output");
  bool help;
  auto vm = parse("growformer resume RUN_DIR", o, {{"run-dir", 1}}, args, &help);
  if (help) return 0;
  gf::Communicator& comm = gf::world();
  gf::install_interrupt_handler();
  gf::RunFlags f;
  f.comm = &comm;
  f.plugin_paths = paths;
  f.stop_after = stop_after;
  f.quiet = vm.count("quiet") > 0;
  return gf::resume_run(dir, f);
}

int cmd_inspect(const std::vector<std::string>& args) {
  po::options_description o("inspect options");
  std::string ck;
  std::vector<std::string> paths;
  o.add_options()("checkpoint", po::value(&ck)->required(),
                  "checkpoint (.safetensors), or a run directory (its best checkpoint, else its "
                  "last)")("plugin-path", po::value(&paths)->composing(), "extra plugin folder")(
      "json", "print JSON");
  bool help;
  auto vm = parse("growformer inspect CHECKPOINT|RUN_DIR", o, {{"checkpoint", 1}}, args, &help);
  if (help) return 0;
  ck = gf::checkpoint_in(ck);  // a run directory: its best checkpoint, else its last
  gf::CheckpointModel m = gf::read_checkpoint_model(gf::load_checkpoint(ck), ck);
  // parameter counts straight from the file: blocks and heads as the model names them
  std::map<std::string, size_t> per_block, per_head;
  size_t total = 0;
  for (const auto& p : m.parameters) {
    total += p.size;
    per_block[p.place.block] += p.size;
    if (!p.place.head.empty()) per_head[p.place.head] += p.size;
  }
  if (vm.count("json")) {
    std::cout << gf::dump_json(json({{"checkpoint", ck},
                                     {"parameters", total},
                                     {"blocks", per_block},
                                     {"heads", per_head},
                                     {"num_blocks", m.heads_per_block.size()},
                                     {"heads_per_block", m.heads_per_block},
                                     {"mlp_width_per_block", m.mlp_width_per_block},
                                     {"step", m.step}}),
                               2)
              << "\n";
    return 0;
  }
  std::cout << ck << "\n  step " << m.step << ", " << total << " parameters, "
            << m.heads_per_block.size() << " blocks, heads per block "
            << json(m.heads_per_block).dump() << ", MLP width per block "
            << json(m.mlp_width_per_block).dump() << "\n  architecture:\n";
  for (size_t i = 0; i < m.architecture.size(); ++i)
    std::cout << "    layers." << i << ".attn: " << m.architecture[i] << "\n";
  std::cout << "  parameters per block:\n";
  for (auto& [b, n] : per_block) std::cout << "    " << b << ": " << n << "\n";
  std::cout << "  parameters per head:\n";
  for (auto& [h, n] : per_head) std::cout << "    " << h << ": " << n << "\n";
  return 0;
}

int cmd_config(const std::vector<std::string>& args) {
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << "usage: growformer config check CONFIG [--set KEY=VALUE]...\n";
    return 0;
  }
  if (args.empty() || args[0] != "check")
    throw UsageError("usage: growformer config check CONFIG [--set KEY=VALUE]...");
  po::options_description o("config check options");
  std::string config;
  std::vector<std::string> sets, paths;
  o.add_options()("config", po::value(&config)->required(), "YAML config")(
      "set", po::value(&sets)->composing(), "override KEY=VALUE")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder");
  bool help;
  parse("growformer config check CONFIG [--set KEY=VALUE]...", o, {{"config", 1}},
        std::vector<std::string>(args.begin() + 1, args.end()), &help);
  if (help) return 0;
  gf::Experiment ex(load_config(config, sets), paths);
  std::cout << config << ": OK\n";
  for (const std::string& n : ex.notes()) std::cout << n << "\n";
  std::cout << ex.model().describe();
  std::cout << "data: " << ex.data().train.size() << " train / " << ex.data().val.size()
            << " val / " << ex.data().test.size() << " test, vocabulary " << ex.data().vocab_size
            << ", " << ex.data().num_classes << " classes\n";
  return 0;
}

int cmd_data(const std::vector<std::string>& args) {
  std::string usage =
      "growformer data listops-check FILE\n       growformer data stats CONFIG [--set "
      "KEY=VALUE]... [--json]";
  if (args.empty()) throw UsageError("usage: " + usage);
  if (args[0] == "--help" || args[0] == "-h") {
    std::cout << "usage: " << usage << "\n";
    return 0;
  }
  std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "listops-check") {
    po::options_description o("listops-check options");
    std::string file;
    o.add_options()("file", po::value(&file)->required(), "ListOps TSV (either column order)");
    bool help;
    parse("growformer data listops-check FILE", o, {{"file", 1}}, rest, &help);
    if (help) return 0;
    size_t bad = gf::listops::check_file(file, std::cout);
    return bad == 0 ? 0 : 1;
  }
  if (args[0] == "stats") {
    po::options_description o("stats options");
    std::string config;
    std::vector<std::string> sets, paths;
    o.add_options()("config", po::value(&config)->required(), "YAML config")(
        "set", po::value(&sets)->composing(), "override KEY=VALUE")("json", "print JSON")(
        "plugin-path", po::value(&paths)->composing(), "extra plugin folder");
    bool help;
    auto vm = parse("growformer data stats CONFIG [--json]", o, {{"config", 1}}, rest, &help);
    if (help) return 0;
    gf::ConfigNode cfg = load_config(config, sets);
    gf::Registry reg;
    reg.load_directories(gf::Registry::search_path(paths));
    // the seed and the model's positions as the run reads them, defaults included (a config
    // without model.max_len cuts at the model's 512 tokens, which the table counts)
    const gf::ExperimentSettings es = gf::ExperimentSettings::table().read(
        gf::Options(cfg, gf::Experiment::options(), "the configuration"));
    const size_t max_len = gf::ModelSettings::table()
                               .read(gf::Options(es.model, gf::Model::options(), "model"))
                               .max_len;
    auto ds = reg.create_dataset(es.data, gf::DatasetBuild{es.seed});
    gf::DataSplits s = ds->load();
    gf::DataStats st = gf::compute_stats(s, max_len);
    std::cout << (vm.count("json") ? gf::stats_json(st) + "\n" : gf::format_stats_table(st));
    return 0;
  }
  throw UsageError("unknown data command `" + args[0] + "`\nusage: " + usage);
}

namespace {

// A component's kind, name, documentation, library and options, for `plugins --json`.
json component_json(const gf::ComponentInfo& c) {
  json opts = json::array();
  for (auto& s : c.spec.options) {
    json j = {{"name", s.name},
              {"type", gf::opt_type_name(s.type)},
              {"default", s.default_value},
              {"doc", s.doc}};
    if (std::isfinite(s.min)) j["min"] = s.min;
    if (std::isfinite(s.max)) j["max"] = s.max;
    if (!s.choices.empty()) j["choices"] = s.choices;
    if (s.required) j["required"] = true;
    opts.push_back(j);
  }
  return json{{"kind", gf::kind_name(c.kind)},
              {"name", c.spec.name},
              {"doc", c.spec.doc},
              {"plugin", c.plugin},
              {"library", c.library},
              {"options", opts}};
}

// `plugins list`: every component by kind, the libraries loaded and those that failed.
void list_plugins(const gf::Registry& reg, bool as_json) {
  if (as_json) {
    json out = {
        {"components", json::array()}, {"libraries", json::array()}, {"failed", json::array()}};
    for (auto& c : reg.components()) out["components"].push_back(component_json(c));
    for (auto& l : reg.libraries())
      out["libraries"].push_back({{"plugin", l.plugin}, {"version", l.version}, {"path", l.path}});
    for (auto& f : reg.failures()) out["failed"].push_back({{"path", f.path}, {"error", f.error}});
    std::cout << gf::dump_json(out, 2) << "\n";
    return;
  }
  for (auto kind : {gf::Kind::Attention, gf::Kind::Head, gf::Kind::Growth, gf::Kind::Pruning,
                    gf::Kind::Dataset, gf::Kind::Optimizer}) {
    std::cout << gf::kind_name(kind) << ":\n";
    for (auto& c : reg.components())
      if (c.kind == kind)
        std::cout << "  " << c.spec.name
                  << std::string(c.spec.name.size() < 22 ? 22 - c.spec.name.size() : 1, ' ')
                  << c.spec.doc.substr(0, c.spec.doc.find('\n')) << "  [" << c.plugin << "]\n";
  }
  std::cout << "libraries:\n";
  for (auto& l : reg.libraries())
    std::cout << "  " << l.plugin << " " << l.version << "  " << l.path << "\n";
  if (!reg.failures().empty()) {
    std::cout << "failed to load:\n";
    for (auto& f : reg.failures()) std::cout << "  " << f.path << ": " << f.error << "\n";
  }
}

// The error for a component WANT that no library registered: NAME registered by a library that
// then failed, or a library named after it, is named with its error; else every library that
// failed to load (NAME may be in one of them), after the closest of NAMES.
[[noreturn]] void no_such_component(const gf::Registry& reg, const std::string& want,
                                    const std::vector<std::string>& names) {
  std::string own, others;
  for (auto& f : reg.failures()) {
    std::string stem = std::filesystem::path(f.path).stem().string();
    bool its = std::find(f.components.begin(), f.components.end(), want) != f.components.end() ||
               stem == "libgf_" + want || stem.find(want) != std::string::npos;
    (its ? own : others) += "\n  " + f.path + ": " + f.error;
  }
  if (!own.empty())
    throw gf::ConfigError("`" + want + "` is not available: its library failed to load:" + own);
  std::string dym = gf::did_you_mean(want, names);
  throw gf::ConfigError(
      "no component named `" + want + "`" + (dym.empty() ? "" : "; did you mean `" + dym + "`?") +
      " (see `growformer plugins list`)" +
      (others.empty() ? "" : "\nlibraries that failed to load (it may be in one):" + others));
}

// One component's documentation and options, as `plugins describe` prints them.
void print_component(const gf::ComponentInfo& c) {
  std::cout << gf::kind_name(c.kind) << " `" << c.spec.name << "`: " << c.spec.doc << "\n  from "
            << c.library << "\n  options:\n";
  if (c.spec.options.empty()) std::cout << "    (none)\n";
  for (auto& s : c.spec.options) {
    std::cout << "    " << s.name << " (" << gf::opt_type_name(s.type);
    if (s.required)
      std::cout << ", required";
    else
      std::cout << ", default " << (s.default_value.empty() ? "\"\"" : s.default_value);
    std::cout << ")";
    if (!s.choices.empty()) {
      std::cout << " one of:";
      for (auto& ch : s.choices) std::cout << " " << ch;
    }
    std::cout << "\n        " << s.doc << "\n";
  }
}

// `plugins describe NAME`: every component of that name (one per kind at most).
void describe_plugin(const gf::Registry& reg, const std::string& want, bool as_json) {
  std::vector<const gf::ComponentInfo*> hits;
  auto all = reg.components();
  std::vector<std::string> names;
  for (auto& c : all) {
    names.push_back(c.spec.name);
    if (c.spec.name == want) hits.push_back(&c);
  }
  if (hits.empty()) no_such_component(reg, want, names);
  for (auto* c : hits) {
    if (as_json)
      std::cout << gf::dump_json(component_json(*c), 2) << "\n";
    else
      print_component(*c);
  }
}

// A table cell: one line, `|` escaped.
std::string md_cell(std::string s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n')
      out += ' ';
    else
      out += c;
  }
  return out;
}

// A bound as the option's type shows it (an int option's 1, a float's 0.5).
std::string md_bound(double v, gf::OptType t) {
  std::ostringstream o;
  if (t == gf::OptType::Int)
    o << static_cast<long long>(v);
  else
    o << v;
  return o.str();
}

// A table of option specs SPECS, as docs/OPTIONS.md shows them.
void markdown_options(const gf::OptionSpecs& specs) {
  std::cout << "| option | type | default | values | what it does |\n|---|---|---|---|---|\n";
  for (auto& s : specs) {
    std::string values;
    for (auto& ch : s.choices) values += (values.empty() ? "" : ", ") + ch;
    if (values.empty() && (std::isfinite(s.min) || std::isfinite(s.max)))
      values = (std::isfinite(s.min) ? md_bound(s.min, s.type) : "") + " .. " +
               (std::isfinite(s.max) ? md_bound(s.max, s.type) : "");
    std::string def = s.required ? "required" : s.default_value.empty() ? "\"\"" : s.default_value;
    if (!s.mode.empty()) values += (values.empty() ? "" : "; ") + std::string("when ") + s.mode;
    std::cout << "| `" << s.name << "` | " << gf::opt_type_name(s.type) << " | `" << md_cell(def)
              << "` | " << md_cell(values) << " | " << md_cell(s.doc) << " |\n";
  }
}

// The run's own tables (the config's top level, `train:`, `train.switch:`, `model:`), read by
// the trainer rather than a plugin: the first sections of docs/OPTIONS.md.
void markdown_run_tables() {
  const std::pair<const char*, gf::OptionSpecs> tables[] = {
      {"the config's top level", gf::Experiment::options()},
      {"`train:`", gf::TrainSettings::options()},
      {"`train.switch:`", gf::TrainSettings::switch_options()},
      {"`model:`", gf::Model::options()}};
  for (const auto& [what, specs] : tables) {
    std::cout << "## run: " << what << "\n\nRead by the trainer (core/runtime).\n\n";
    markdown_options(specs);
    std::cout << "\n";
  }
}

// `plugins describe --markdown [NAME]`: each component (of NAME, or every one) as a section of
// docs/OPTIONS.md: its kind, name, library and documentation, then a table of its options. The
// file is made from this output and a test (options_doc) checks it against the built plugins.
void markdown_components(const gf::Registry& reg, const std::string& want) {
  if (want.empty()) markdown_run_tables();
  auto all = reg.components();
  std::vector<std::string> names;
  bool any = false;
  for (auto& c : all) names.push_back(c.spec.name);
  for (auto kind : {gf::Kind::Attention, gf::Kind::Head, gf::Kind::Growth, gf::Kind::Pruning,
                    gf::Kind::Dataset, gf::Kind::Optimizer})
    for (auto& c : all) {
      if (c.kind != kind || (!want.empty() && c.spec.name != want)) continue;
      any = true;
      std::cout << "## " << gf::kind_name(c.kind) << " `" << c.spec.name << "`\n\n"
                << md_cell(c.spec.doc.substr(0, c.spec.doc.find('\n'))) << " (plugin library `"
                << c.plugin << "`)\n\n";
      if (c.spec.options.empty()) {
        std::cout << "No options.\n\n";
        continue;
      }
      markdown_options(c.spec.options);
      std::cout << "\n";
    }
  if (!any) no_such_component(reg, want, names);
}

}  // namespace

int cmd_plugins(const std::vector<std::string>& args) {
  po::options_description o("plugins options");
  std::vector<std::string> words, paths;
  o.add_options()("words", po::value(&words)->composing(), "list | describe NAME")(
      "json", "print JSON")("markdown",
                            "describe: the option tables of docs/OPTIONS.md (NAME optional)")(
      "plugin-path", po::value(&paths)->composing(), "extra plugin folder");
  bool help;
  auto vm = parse("growformer plugins [list | describe NAME] [--json] | describe [NAME] --markdown",
                  o, {{"words", -1}}, args, &help);
  if (help) return 0;
  gf::Registry reg;
  reg.load_directories(gf::Registry::search_path(paths));
  bool as_json = vm.count("json") > 0;
  std::string verb = words.empty() ? "list" : words[0];
  if (verb == "list") {
    if (words.size() > 1) throw UsageError("usage: growformer plugins list");
    list_plugins(reg, as_json);
    return 0;
  }
  if (verb == "describe" && vm.count("markdown")) {
    if (words.size() > 2 || as_json)
      throw UsageError("usage: growformer plugins describe [NAME] --markdown");
    markdown_components(reg, words.size() == 2 ? words[1] : "");
    return 0;
  }
  if (verb == "describe") {
    if (words.size() != 2) throw UsageError("usage: growformer plugins describe NAME");
    describe_plugin(reg, words[1], as_json);
    return 0;
  }
  throw UsageError("unknown plugins command `" + verb + "` (list | describe NAME)");
}

}  // namespace gfapp

namespace {
const char* kTopUsage =
    "growformer " GROWFORMER_VERSION
    " - attention models that decide their own structure\n\n"
    "usage: growformer COMMAND [options]   (growformer COMMAND --help for details)\n\n"
    "commands:\n"
    "  train CONFIG [--set KEY=VALUE]... [--run-dir DIR] [--plugin-path P]\n"
    "  resume RUN_DIR\n"
    "  eval CHECKPOINT [--split val|test|train|all] [--set data.KEY=VALUE]... [--data CONFIG] "
    "[--json]\n"
    "  predict CHECKPOINT INPUT [--out FILE] [--format tsv|jsonl] [--bad-records fail|skip]\n"
    "  plugins [list | describe NAME] [--json]\n"
    "  config check CONFIG [--set KEY=VALUE]...\n"
    "  report RUN_DIR... [--out DIR]\n"
    "  inspect CHECKPOINT|RUN_DIR\n"
    "  analyze CHECKPOINT [--data-batches N] [--json]\n"
    "  bench CONFIG [--steps N] [--torch-ref PATH]\n"
    "  sweep SWEEP.yaml\n"
    "  data listops-check FILE | data stats CONFIG [--json]\n\n"
    "exit status: 0 success, 2 usage, configuration or input-data error, 1 runtime failure,\n"
    "130 training stopped by Ctrl-C or SIGTERM (with a checkpoint to resume from)\n";
}

using CommandFn = int (*)(const std::vector<std::string>&);
const std::map<std::string, CommandFn>& commands() {
  static const std::map<std::string, CommandFn> table = {
      {"train", gfapp::cmd_train},     {"resume", gfapp::cmd_resume},
      {"eval", gfapp::cmd_eval},       {"inspect", gfapp::cmd_inspect},
      {"config", gfapp::cmd_config},   {"data", gfapp::cmd_data},
      {"plugins", gfapp::cmd_plugins}, {"bench", gfapp::cmd_bench},
      {"analyze", gfapp::cmd_analyze}, {"sweep", gfapp::cmd_sweep},
      {"predict", gfapp::cmd_predict}, {"report", gfapp::cmd_report},
  };
  return table;
}

// The command's exit status; its errors printed as one line. In a data-parallel run every
// process may fail alike: rank 0 reports at once, the others after a pause, so that usually
// rank 0's message alone is seen before the job ends; a failure of another rank alone still
// shows, naming the rank.
int run_command(const std::string& cmd, int (*fn)(const std::vector<std::string>&),
                const std::vector<std::string>& rest, bool* raised) {
  *raised = true;
  auto report = [&](const std::string& text) {
    // the rank from the launcher's environment when the error came before MPI started
    int rank = gf::world_size_if_started() > 1 ? gf::world_rank_if_started()
                                               : static_cast<int>(gf::launcher_rank());
    // N copies of a program built without MPI all refuse alike: the launcher's rank 0 speaks
    if (!gf::mpi_built() && gf::launcher_rank() > 0) return;
    if (rank > 0) {
      std::this_thread::sleep_for(std::chrono::seconds(2));
      std::cerr << "[rank " << rank << "] ";
    }
    std::cerr << "growformer " << gf::printable(cmd) << ": " << text << "\n" << std::flush;
  };
  try {
    if (!fn) {
      std::vector<std::string> names;
      for (auto& [k, v] : commands()) names.push_back(k);
      std::string dym = gf::did_you_mean(cmd, names);
      std::cerr << "growformer: unknown command `" << gf::printable(cmd) << "`"
                << (dym.empty() ? "" : "; did you mean `" + dym + "`?") << "\n\n"
                << kTopUsage;
      return 2;
    }
    int status = fn(rest);
    *raised = false;
    return status;
  } catch (const gfapp::UsageError& e) {
    report(gf::printable(e.what()));
    return 2;
  } catch (const gf::ConfigError& e) {
    report("configuration error: " + gf::printable(e.what()));
    return 2;
  } catch (const gf::RuntimeError& e) {
    report("error: " + gf::printable(e.what()));
    return 1;
  } catch (const std::bad_alloc&) {  // a training step names its step and checkpoint itself
    report(
        "error: out of memory: the command needs more memory than this process may allocate "
        "(the machine's memory, a cgroup limit or ulimit -v)");
    return 1;
  } catch (const std::exception& e) {
    report("error: " + gf::printable(e.what()));
    return 1;
  }
}

int main(int argc, char** argv) {
  gf::select_blas_kernels(argc, argv);  // may re-execute the program; see blas.hpp
  try {
    gf::kernels::simd_name();          // a GROWFORMER_ISA that names no kernel set stops here
    gf::kernels::bf16_kernels_name();  // and a GROWFORMER_BF16 that names no bf16 set
  } catch (const std::exception& e) {
    std::cerr << "growformer: error: " << e.what() << "\n";
    return 2;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kTopUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "growformer " GROWFORMER_VERSION "\nCPU: " << gf::cpu_model_name()
              << "\nBLAS kernels: " << gf::blas_selection_note()
              << "\nSIMD kernels: " << gf::kernels::simd_note() << "\nbf16 products: "
              << (gf::kernels::bf16_available() ? gf::kernels::bf16_kernels_name()
                                                : gf::kernels::bf16_unavailable_reason())
              << "\nABI " << GROWFORMER_ABI_VERSION << ", " << GROWFORMER_FINGERPRINT << "\n";
    return 0;
  }
  std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  const auto& table = commands();
  auto it = table.find(cmd);
  bool raised = false;
  int status = run_command(cmd, it == table.end() ? nullptr : it->second, rest, &raised);
  // after an error the other processes may be waiting for this one; a status a command returned
  // (an interruption, a sweep with failed jobs) is one every process agreed on
  if (raised) gf::abort_if_distributed(status);
  gf::finalize_distributed();
  return status;
}
