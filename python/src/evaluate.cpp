// Evaluation from Python as `growformer eval` reports it (the runtime's one evaluation,
// Experiment::evaluate): of a split (a model loaded with data=None reads it when first asked
// for), of a labelled file its dataset reads as a test split, or of labelled data in memory
// its dataset stages (DataFormats).
#include <filesystem>

#include <nlohmann/json.hpp>

#include <growformer/json_text.hpp>
#include <growformer/trainer_state.hpp>

#include "module.hpp"

namespace fs = std::filesystem;

namespace gfpy {

namespace {
// How to evaluate a model whose own data files cannot be read: what its dataset takes.
std::string other_data_hint(gf::Experiment& ex) {
  const gf::DataFormats* f = formats_of(ex);
  std::vector<std::string> ways;
  if (f && !f->test_file_options("FILE").empty())
    ways.push_back("evaluate(data=PATH) (" + f->test_file_kind() + ")");
  if (f)
    for (const std::string& kind : f->kinds())
      ways.push_back("evaluate(data=(" + kind + ", labels))");
  if (f && !f->columns(ex.config().child("data"), gf::StagePurpose::evaluate).input.empty() &&
      !ways.empty())
    ways.push_back("evaluate(data=DataFrame)");
  if (ways.empty())
    return "evaluate other data with `growformer eval CHECKPOINT --set data.KEY=FILE`";
  std::string s = "evaluate other labelled data with ";
  for (size_t i = 0; i < ways.size(); ++i)
    s += (i == 0 ? "" : i + 1 == ways.size() ? " or " : ", ") + ways[i];
  return s;
}

// MSG (an error reading the data files a checkpoint's config names) without what it could quote
// of them (gf::withhold_file_contents).
std::string withheld(const PyExperiment& p, const std::string& msg) {
  return gf::withhold_file_contents(
      msg, gf::embedded_data_files(p.ex->config().child("data"), {}, p.source),
      "evaluate the file yourself with evaluate(data=...) to see it");
}

// SPLIT of a model loaded with data=None: read from the files of its config when first asked
// for, with the checkpoint's saved tokenizer (only that split's file, where the dataset can),
// and kept. The checkpoint holds no data: a file that is gone is one error naming it and the
// ways to evaluate without it.
const std::vector<gf::Example>& lazy_split(PyExperiment& p, const std::string& split) {
  auto it = p.lazy.find(split);
  if (it != p.lazy.end()) return it->second;
  gf::embedded_data_files(p.ex->config().child("data"), {}, p.source);  // refuses a device
  gf::ConfigNode node = gf::ConfigNode::load_string(p.ex->config().child("data").dump(), "<data>",
                                                    p.ex->config().base_dir());
  auto unreadable = [&](const char* what) {
    return gf::ConfigError("the " + split + " split of " + p.source +
                           " is read from the data "
                           "files the model trained on, which cannot be read now: " +
                           what +
                           "\n  the checkpoint holds the model, its tokenizer and classes, but no "
                           "data: " +
                           other_data_hint(*p.ex) +
                           "; predict() needs no data "
                           "(growformer.load(checkpoint, data='none') reads none)");
  };
  gf::DataSplits d;
  try {
    std::shared_ptr<gf::Dataset> ds = p.ex->registry().create_dataset(
        node, gf::DatasetBuild{p.ex->seed(), saved_tokenizer(p), split});
    py::gil_scoped_release nogil;
    Busy busy;
    d = ds->load();
  } catch (const gf::ConfigError& e) {
    throw unreadable(withheld(p, e.what()).c_str());
  } catch (const gf::RuntimeError& e) {
    throw unreadable(withheld(p, e.what()).c_str());
  }
  const gf::DataSplits& mine = p.ex->data();
  if (d.num_classes != mine.num_classes || d.vocab_size != mine.vocab_size)
    throw gf::RuntimeError(
        p.source + ": its " + split + " split, read now, has " + std::to_string(d.num_classes) +
        " classes and " + std::to_string(d.vocab_size) + " token ids, the model " +
        std::to_string(mine.num_classes) + " and " + std::to_string(mine.vocab_size));
  if (p.lazy_vocab.empty()) p.lazy_vocab = d.vocab;
  std::vector<gf::Example>& rows = split == "train" ? d.train : split == "val" ? d.val : d.test;
  return p.lazy[split] = std::move(rows);
}

}  // namespace

const std::vector<gf::Example>& split_of(PyExperiment& p, const std::string& split) {
  if (split != "train" && split != "val" && split != "test")
    throw py::value_error("split must be 'train', 'val' or 'test', not '" + split + "'");
  if (p.data_need == "none")
    throw gf::ConfigError("this experiment was loaded from " + p.source +
                          " with data='none' (no data read): load it with data=None (a split read "
                          "when asked for) or the split to evaluate it");
  if (p.data_need == "lazy") return lazy_split(p, split);
  const gf::DataSplits& d = p.ex->data();
  if (split == "train") return d.train;
  if (split == "val") return d.val;
  return d.test;
}

// The token texts by id: the data's, else (a model loaded with data=None) the saved tokenizer's
// vocabulary when it holds one, else the vocabulary of the test split read now.
std::vector<std::string> vocab_of(PyExperiment& p) {
  if (p.data_need != "lazy" || !p.ex->data().vocab.empty()) return p.ex->data().vocab;
  if (p.lazy_vocab.empty()) {
    nlohmann::json r = nlohmann::json::parse(p.record, nullptr, false);
    if (r.is_object()) r = gf::json_bytes_tree(r);
    nlohmann::json tok =
        r.is_object() && r.contains("tokenizer") ? r["tokenizer"] : nlohmann::json();
    if (tok.is_string()) tok = nlohmann::json::parse(tok.get<std::string>(), nullptr, false);
    if (tok.is_object() && tok.contains("vocab") && tok["vocab"].is_array()) {
      for (const auto& v : tok["vocab"])
        if (v.is_string()) p.lazy_vocab.push_back(v.get<std::string>());
    } else {
      lazy_split(p, "test");
    }
  }
  return p.lazy_vocab;
}

// From the checkpoint's data record the model was loaded with, else from the experiment's own.
std::string saved_tokenizer(const PyExperiment& p) {
  const std::string record = p.record.empty() ? p.ex->data_record() : p.record;
  nlohmann::json r = nlohmann::json::parse(record, nullptr, false);
  if (r.is_discarded() || !r.is_object())
    throw gf::RuntimeError("the model's data record is corrupt");
  r = gf::json_bytes_tree(r);
  const nlohmann::json& tok = r.contains("tokenizer") ? r["tokenizer"] : nlohmann::json();
  if (tok.is_null()) return "";
  return tok.is_string() ? tok.get<std::string>() : tok.dump();
}

std::vector<gf::Example> test_rows_with(PyExperiment& p, const std::vector<std::string>& options) {
  gf::ConfigNode node = gf::ConfigNode::load_string(p.ex->config().child("data").dump(), "<data>",
                                                    p.ex->config().base_dir());
  for (const std::string& o : options) node.apply_override(o);
  std::shared_ptr<gf::Dataset> ds = p.ex->registry().create_dataset(
      node, gf::DatasetBuild{p.ex->seed(), saved_tokenizer(p), "test"});
  py::gil_scoped_release nogil;
  Busy busy;
  return std::move(ds->load().test);
}

namespace {
// ---- evaluation as `growformer eval` reports it -------------------------------------------
// The experiment's evaluation (Experiment::evaluate: loss, accuracy, macro-F1, per-class
// precision, recall and F1, the confusion matrix) of ROWS, in the batches of `growformer eval`
// (the first MAX_BATCHES; 0: all), as a dict with the keys of `eval --json`.
py::dict eval_report(gf::Experiment& ex, const std::vector<gf::Example>& rows, long max_batches) {
  gf::EvalResult r;
  {
    py::gil_scoped_release nogil;
    Busy busy;
    r = ex.evaluate(rows, max_batches);
  }
  const std::vector<std::string> names = ex.class_names();
  py::list classes;
  for (size_t c = 0; c < r.classes.classes.size(); ++c) {
    const gf::ClassFigures& f = r.classes.classes[c];
    classes.append(py::dict("name"_a = names[c], "precision"_a = f.precision, "recall"_a = f.recall,
                            "f1"_a = f.f1, "support"_a = f.support));
  }
  return py::dict("loss"_a = r.loss, "accuracy"_a = r.accuracy, "macro_f1"_a = r.classes.macro_f1,
                  "examples"_a = r.examples, "classes"_a = classes,
                  "confusion"_a = py::cast(r.classes.confusion));
}

// Labelled data other than the experiment's splits, tokenised with its saved tokenizer and
// mapped to its classes: a file (PATH) its dataset reads as a test split, or data in memory
// (growformer._data) staged by its dataset into its files. Errors name the data's rows.
std::vector<gf::Example> other_data(PyExperiment& p, py::object data) {
  const std::string plugin = data_plugin(*p.ex);
  const gf::DataFormats* formats = formats_of(*p.ex);
  const bool file = py::isinstance<py::str>(data) || py::hasattr(data, "__fspath__");
  std::vector<std::string> options, line_files;
  py::object tmp = py::none();
  if (file) {
    const std::string path = path_arg(data, "evaluate: data");
    options = formats ? formats->test_file_options(fs::absolute(path).string())
                      : std::vector<std::string>{};
    if (options.empty())
      throw gf::ConfigError("evaluate: `" + path + "` is not a split ('train', 'val' or 'test'), " +
                            "and this model's dataset `" + plugin +
                            "` reads no labelled file as a test split; " + other_data_hint(*p.ex));
    if (!fs::exists(path))
      throw gf::ConfigError("evaluate: `" + path +
                            "` is neither a split ('train', 'val' or 'test') "
                            "nor a data file");
  } else {
    if (!formats || formats->kinds().empty())
      throw gf::ConfigError("evaluate: this model's dataset `" + plugin +
                            "` takes no data in memory; " + other_data_hint(*p.ex));
    const gf::ConfigNode section = p.ex->config().child("data");
    py::object normalized =
        py::module_::import("growformer._data")
            .attr("normalize_one")(
                data, columns_dict(formats->columns(section, gf::StagePurpose::evaluate)),
                formats->kinds(), plugin, "evaluate");
    tmp =
        py::module_::import("tempfile").attr("TemporaryDirectory")("prefix"_a = "growformer-eval-");
    options = stage_one_split(p, normalized, tmp.attr("name").cast<std::string>(),
                              gf::StagePurpose::evaluate, &line_files);
  }
  std::vector<gf::Example> rows;
  try {
    rows = test_rows_with(p, options);
  } catch (const gf::ConfigError& e) {
    if (line_files.empty()) throw;
    std::string msg = e.what();
    for (const std::string& f : line_files) msg = rows_not_lines(msg, f, "data");
    throw gf::ConfigError("evaluate: " + msg);
  }
  const size_t C = p.ex->data().num_classes;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].label < 0 || static_cast<size_t>(rows[i].label) >= C)
      throw gf::ConfigError("evaluate: data row " + std::to_string(i) + ": label " +
                            std::to_string(rows[i].label) + " is not one of the model's " +
                            std::to_string(C) + " classes (0.." + std::to_string(C - 1) + ")");
  return rows;
}
}  // namespace

py::dict evaluate(PyExperiment& p, py::object data, long max_batches) {
  if (py::isinstance<py::str>(data)) {
    const std::string name = data.cast<std::string>();
    if (name == "train" || name == "val" || name == "test") {
      const auto& rows = split_of(p, name);
      if (rows.empty()) throw gf::RuntimeError("the " + name + " split is empty");
      py::dict d = eval_report(*p.ex, rows, max_batches);
      d["split"] = name;
      return d;
    }
  }
  std::vector<gf::Example> rows = other_data(p, data);
  py::dict d = eval_report(*p.ex, rows, max_batches);
  d["split"] = "data";
  return d;
}

}  // namespace gfpy
