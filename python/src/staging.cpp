// Data given in memory (Python lists, numpy arrays, DataFrames), staged by its dataset into the
// dataset's own files (DataFormats::stage) in a temporary folder to build the experiment;
// train() copies them into RUN_DIR/data/, so the run's configuration names files inside the run
// directory: `growformer resume`, `eval` and growformer.load read them as any data file.
// growformer._data reads the Python objects into one kind of inputs per data (texts, token ids,
// number sequences, images) and checks them, naming the split and row; the dataset says which
// kinds it takes, where a table holds its inputs and labels, and writes the files.
#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include <growformer/registry.hpp>

#include "module.hpp"

namespace fs = std::filesystem;

namespace gfpy {

std::string data_plugin(const gf::Experiment& ex) {
  gf::ConfigNode d = ex.config().child("data");
  return d.valid() && d.has("plugin") ? d.child("plugin").as_string() : "";
}

const gf::DataFormats* formats_of(gf::Experiment& ex) {
  return ex.registry().data_formats(data_plugin(ex));
}

py::dict columns_dict(const gf::DataColumns& c) {
  return py::dict("input"_a = c.input, "label"_a = c.label, "input_option"_a = c.input_option,
                  "label_option"_a = c.label_option, "input_set"_a = c.input_set,
                  "label_set"_a = c.label_set);
}

std::string rows_not_lines(std::string msg, const std::string& file, const std::string& what) {
  for (size_t at; (at = msg.find(file)) != std::string::npos;) {
    size_t end = at + file.size(), digits = end + 1;
    while (digits < msg.size() && std::isdigit(static_cast<unsigned char>(msg[digits]))) ++digits;
    if (end < msg.size() && msg[end] == ':' && digits > end + 1 && digits < msg.size() &&
        msg[digits] == ':') {
      long line = std::stol(msg.substr(end + 1, digits - end - 1));
      msg.replace(at, digits - at, what + " row " + std::to_string(line - 1));
    } else {
      msg.replace(at, file.size(), what);
    }
  }
  return msg;
}

namespace {
// One split of growformer._data.normalize ((kind, inputs, labels); labels None to predict on) as
// a MemorySplit named NAME, its kind and label type into DATA.
gf::MemorySplit memory_split(py::handle normalized, const std::string& name, gf::MemoryData& data) {
  py::tuple t = py::reinterpret_borrow<py::tuple>(normalized);
  data.kind = t[0].cast<std::string>();
  gf::MemorySplit s;
  s.name = name;
  if (data.kind == "texts") {
    s.texts = t[1].cast<std::vector<std::string>>();
  } else if (data.kind == "images") {
    auto a = py::array_t<uint8_t, py::array::c_style | py::array::forcecast>::ensure(t[1]);
    if (!a || a.ndim() != 3) throw gf::RuntimeError("staging: images are not an (N, H, W) array");
    s.height = static_cast<size_t>(a.shape(1));
    s.width = static_cast<size_t>(a.shape(2));
    s.pixels.assign(a.data(), a.data() + a.size());
  } else {
    s.sequences = t[1].cast<std::vector<std::vector<double>>>();
  }
  if (!t[2].is_none()) {
    data.int_labels = true;
    for (auto y : t[2]) {
      if (py::isinstance<py::str>(y)) {
        data.int_labels = false;
        s.labels.push_back(y.cast<std::string>());
      } else {
        s.labels.push_back(std::to_string(y.cast<long long>()));
      }
    }
  }
  return s;
}

// The datasets that take data of KIND in memory, for messages: those that are its dataset when
// a config names none, else any.
std::string takers(const gf::Registry& reg, const std::string& kind) {
  std::vector<std::string> names = reg.datasets_for(kind, true);
  if (names.empty()) names = reg.datasets_for(kind, false);
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i ? " or " : "") + names[i];
  return s.empty() ? "no dataset" : s;
}

std::string kind_words(const std::string& kind) {
  if (kind == "images") return "images";
  if (kind == "numbers") return "number sequences with labels";
  return "texts or token ids with labels";
}

// The option "data.KEY=\"FOLDER/NAME\"" of each staged file, then the other options.
std::vector<std::string> plan_overrides(const StagePlan& plan, const std::string& folder) {
  std::vector<std::string> out;
  if (plan.set_plugin) out.push_back("data.plugin=" + plan.plugin);
  for (const auto& [key, value] : plan.staged.options) out.push_back("data." + key + "=" + value);
  for (const gf::StagedFile& f : plan.staged.files)
    out.push_back(
        "data." + f.option + "=" +
        nlohmann::json((fs::absolute(folder) / f.name).lexically_normal().string()).dump());
  return out;
}

// The dataset that reads DATA (growformer._data's splits) for the data section SECTION: the one
// it names, else the dataset for the data's kind; ConfigError when that dataset takes no such
// data. FORMATS: that dataset's.
std::string reader_of(const gf::Registry& reg, const gf::ConfigNode& section,
                      const std::string& kind, const gf::DataFormats*& formats) {
  const std::string named =
      section.valid() && section.has("plugin") ? section.child("plugin").as_string() : "";
  std::string plugin = named;
  if (plugin.empty()) {
    const std::vector<std::string> names = reg.datasets_for(kind, true);
    if (names.empty())
      throw gf::ConfigError("data: no dataset takes data given in memory as " + kind +
                            "; name one with data.plugin");
    plugin = names.front();
  }
  formats = reg.data_formats(plugin);
  const std::vector<std::string> kinds = formats ? formats->kinds() : std::vector<std::string>{};
  if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end())
    throw gf::ConfigError("data: data given in memory as " + kind_words(kind) + " is read by the " +
                          takers(reg, kind) + " dataset, but the config's data.plugin is `" +
                          named + "`; set it to " + takers(reg, kind) + " or drop it");
  return plugin;
}
}  // namespace

// Stages DATA (growformer._data.normalize) for P's config in a fresh temporary folder: read by
// the config's dataset (or the one for the data's kind), which must take it and whose file
// options the config must leave unset.
void stage_data(PyExperiment& p, py::object data) {
  const gf::ConfigNode root = p.config.node();
  const gf::ConfigNode section = root.has("data") ? root.child("data") : gf::ConfigNode();
  if (section.valid() && !section.is_map())
    throw gf::ConfigError("data: the config's `data` is not a mapping");
  gf::Registry reg;
  {
    py::gil_scoped_release nogil;
    reg.load_directories(gf::Registry::search_path(p.plugin_paths));
  }
  const std::string named =
      section.valid() && section.has("plugin") ? section.child("plugin").as_string() : "";
  // the dataset whose columns a table is read with: the named one, else the one for texts
  const std::vector<std::string> text_readers = reg.datasets_for("texts", true);
  const std::string columns_of = !named.empty()         ? named
                                 : text_readers.empty() ? std::string()
                                                        : text_readers.front();
  const gf::DataFormats* first = reg.data_formats(columns_of);
  if (!named.empty() && (!first || first->kinds().empty()))
    throw gf::ConfigError("data: data given in memory is read by a dataset that takes it (" +
                          takers(reg, "texts") + " for texts or token ids, " +
                          takers(reg, "images") +
                          " for images), but the config's data.plugin is `" + named +
                          "`; set it to one of them or drop it");
  // each split checked by the dataset that will read it, as soon as it is read
  auto check = py::cpp_function(
      [&](py::handle normalized, const std::string& split, const std::string& where) {
        gf::MemoryData md;
        gf::MemorySplit s = memory_split(normalized, split, md);
        std::vector<std::string> readers = reg.datasets_for(md.kind, named.empty());
        if (!named.empty())  // data of a kind the named dataset does not take is refused below
          readers.erase(std::remove_if(readers.begin(), readers.end(),
                                       [&](const std::string& n) { return n != named; }),
                        readers.end());
        if (!readers.empty()) reg.data_formats(readers.front())->check_split(md, s, where);
      });
  py::dict splits =
      py::module_::import("growformer._data")
          .attr("normalize")(data,
                             columns_dict(first ? first->columns(section, gf::StagePurpose::train)
                                                : gf::DataColumns{}),
                             first ? first->kinds() : std::vector<std::string>{}, true, check);
  gf::MemoryData md;
  for (auto [name, split] : splits)
    md.splits.push_back(memory_split(split, name.cast<std::string>(), md));
  const gf::DataFormats* formats = nullptr;
  auto plan = std::make_unique<StagePlan>();
  plan->plugin = reader_of(reg, section, md.kind, formats);
  plan->set_plugin = named.empty();
  std::vector<std::string> given;
  for (const std::string& key : formats->file_options())
    if (section.valid() && section.has(key) &&
        (section.child(key).is_scalar() || section.child(key).is_sequence() ||
         section.child(key).is_map()))  // a null (`~`) names none
      given.push_back("data." + key);
  if (!given.empty()) {
    std::string list;
    for (const std::string& g : given) list += (list.empty() ? "" : ", ") + g;
    throw gf::ConfigError("data: the config names data files (" + list +
                          ") and data is given in memory too; drop one");
  }
  py::object staged =
      py::module_::import("tempfile").attr("TemporaryDirectory")("prefix"_a = "growformer-data-");
  plan->staged =
      formats->stage(md, section, staged.attr("name").cast<std::string>(), gf::StagePurpose::train);
  p.staged = staged;
  p.plan = std::move(plan);
}

// Builds P's experiment from its config, the data options of its staged data (read from
// FOLDER) added, with the GIL released and the lock held. A reader's error about a staged file
// names the data's split and row instead.
void build_experiment(PyExperiment& p, const std::string& folder) {
  Config c = p.config;
  if (p.plan)
    for (const std::string& o : plan_overrides(*p.plan, folder)) c.overrides.push_back(o);
  gf::ConfigNode node = c.node();
  forget_policy_error();
  try {
    py::gil_scoped_release nogil;  // a Python policy class takes the GIL itself
    Busy busy;
    auto ex = std::make_unique<gf::Experiment>(node, p.plugin_paths);
    p.ex = std::move(ex);  // the previous one (data staged before) stays until this one stands
  } catch (const gf::ConfigError& e) {
    if (!p.plan) throw;
    std::string msg = e.what();
    for (const gf::StagedFile& f : p.plan->staged.files)
      if (f.line_per_row)
        msg = rows_not_lines(msg, (fs::absolute(folder) / f.name).lexically_normal().string(),
                             "data['" + f.split + "']");
    throw gf::ConfigError(msg);
  }
}

// Replaces P's data by DATA (train(data=...)): staged and the experiment built (its data checked)
// before anything reaches a run directory; on an error P keeps what it had.
void restage(PyExperiment& p, py::object data) {
  py::object staged = p.staged;
  std::unique_ptr<StagePlan> plan = std::move(p.plan);
  try {
    stage_data(p, data);
    build_experiment(p, p.staged.attr("name").cast<std::string>());
  } catch (...) {
    p.staged = staged;
    p.plan = std::move(plan);
    throw;
  }
}

// Before training on staged data: RUN_DIR must be new or empty (as a run directory must); the
// staged files are copied into RUN_DIR/data/ and the experiment is built again reading them
// there, so the run's configuration names files inside the run (resume, eval and load find them).
void data_into_run_dir(PyExperiment& p, const std::string& run_dir) {
  std::error_code ec;
  if (fs::exists(run_dir, ec) && !fs::is_directory(run_dir, ec))
    throw gf::ConfigError(run_dir + ": the run directory is a file; choose another run_dir");
  if (fs::is_directory(run_dir, ec))
    for (const auto& e : fs::directory_iterator(run_dir, ec)) {
      const std::string n = e.path().filename().string();
      bool empty_dir = e.is_directory(ec) && fs::is_empty(e.path(), ec);
      if (n == ".lock" || (n == "checkpoints" && empty_dir) || (n == "data" && e.is_directory(ec)))
        continue;
      throw gf::ConfigError(run_dir +
                            ": the run directory exists and is not empty (choose another "
                            "run_dir, or growformer.resume(\"" +
                            run_dir + "\"))");
    }
  const fs::path target = fs::absolute(fs::path(run_dir) / "data").lexically_normal();
  fs::create_directories(target);
  const std::string from = p.staged.attr("name").cast<std::string>();
  for (const gf::StagedFile& f : p.plan->staged.files)
    fs::copy_file(fs::path(from) / f.name, target / f.name, fs::copy_options::overwrite_existing);
  build_experiment(p, target.string());
}

std::vector<std::string> stage_one_split(PyExperiment& p, py::handle normalized,
                                         const std::string& folder, gf::StagePurpose purpose,
                                         std::vector<std::string>* line_files,
                                         std::string* records) {
  const gf::DataFormats* formats = formats_of(*p.ex);
  if (!formats) throw gf::ConfigError("this model's dataset takes no data in memory");
  gf::MemoryData md;
  md.splits.push_back(memory_split(normalized, "test", md));
  if (purpose == gf::StagePurpose::predict) md.splits.back().labels.clear();
  const gf::StagedData staged = formats->stage(md, p.ex->config().child("data"), folder, purpose);
  if (records && !staged.records.empty())
    *records = (fs::absolute(folder) / staged.records).lexically_normal().string();
  std::vector<std::string> options;
  for (const auto& [key, value] : staged.options) options.push_back(key + "=" + value);
  for (const gf::StagedFile& f : staged.files) {
    const std::string path = (fs::absolute(folder) / f.name).lexically_normal().string();
    options.push_back(f.option + "=" + nlohmann::json(path).dump());
    if (f.line_per_row && line_files) line_files->push_back(path);
  }
  return options;
}

}  // namespace gfpy
