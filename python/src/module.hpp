// The Python module growformer._core, in parts of one concept each (python/src/):
//   module.cpp        the module: its classes and functions bound
//   config.cpp        growformer.Config, and path and config arguments
//   runs.cpp          training and resuming: the callback, Ctrl-C, a run's result; load()
//   evaluate.cpp      evaluation as `growformer eval` reports it, of a split or other data
//   predict.cpp       class probabilities of strings, token ids, files and data in memory
//   staging.cpp       data given in memory, staged by its dataset (DataFormats) into its files
//   readers.cpp       a run's logs, parameters and heads as Python objects
//   experiment.cpp    growformer.Experiment's methods and properties
//   errors.cpp        ConfigError and RunError from the C++ exceptions
// The module never names a data plugin: what a dataset reads besides its files is its
// DataFormats (growformer/dataset.hpp).
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <growformer/config.hpp>
#include <growformer/dataset.hpp>
#include <growformer/trainer.hpp>

#include "py_convert.hpp"

namespace gfpy {

using namespace pybind11::literals;

// ---- configs (config.cpp) -----------------------------------------------------------------
// A config as its source (a file or YAML text) plus overrides: every Experiment gets a fresh
// parse, since building one marks keys consumed and writes defaults into the document.
struct Config {
  std::string path;  // a file, or
  std::string text;  // YAML text (a dict arrives as JSON, which is YAML)
  std::string name = "<config>";
  std::string base_dir;  // relative paths of a text config resolve against it
  std::vector<std::string> overrides;

  gf::ConfigNode node() const;
};

/// A path argument: a str, bytes or os.PathLike (pathlib.Path); else one TypeError naming WHAT.
std::string path_arg(py::handle h, const std::string& what);
/// A list of paths (plugin_paths); a lone path is refused (a str would be read letter by letter).
std::vector<std::string> path_list(py::handle h, const std::string& what);
/// SRC (a Config, a dict or a path) with OVERRIDES, parsed now; a dict's relative paths against
/// BASE_DIR (default the current folder).
Config config_from(py::handle src, const std::vector<std::string>& overrides,
                   const std::string& base_dir);
void bind_config(py::module_& m);

// ---- one operation at a time (runs.cpp) ---------------------------------------------------
// The core's thread pool, its kernel selection and the run's signal flags are the process's:
// two experiments built, trained, evaluated or predicting at once from two Python threads would
// share them (and hung in the pool). Every such operation holds this lock, taken with the GIL
// released (a thread holding the lock may need the GIL for a callback or a policy, so no thread
// waits for the lock while holding the GIL). Recursive: a callback or policy may call the
// module (predict on another model, say) from the thread that holds it. The wait is in slices,
// so Ctrl-C in the main thread ends it with KeyboardInterrupt.
class Busy {
 public:
  Busy();
  ~Busy();
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;
};

// ---- experiments --------------------------------------------------------------------------
/// Data given in memory as staged for an experiment's config (staging.cpp).
struct StagePlan {
  std::string plugin;       // the dataset that reads it
  bool set_plugin = false;  // the config names no data plugin: `data.plugin` is set
  gf::StagedData staged;
};

struct PyExperiment {
  std::unique_ptr<gf::Experiment> ex;
  // "none": built from a checkpoint alone (no splits); "lazy": the same, a split read from the
  // config's data files when first asked for (into `lazy`)
  std::string data_need = "all";
  std::string source;  // the checkpoint it was loaded from, if any
  std::string record;  // that checkpoint's data record (its tokenizer)
  std::map<std::string, std::vector<gf::Example>> lazy;
  std::vector<std::string> lazy_vocab;  // the vocabulary of the data read lazily
  bool trained = false;
  // data given in memory: the config as given, the staging folder (a
  // tempfile.TemporaryDirectory holding the dataset's files) and the plan that names them
  Config config;
  std::vector<std::string> plugin_paths;
  py::object staged = py::none();
  std::unique_ptr<StagePlan> plan;
};

// ---- runs (runs.cpp) ----------------------------------------------------------------------
/// What the callback raised (or a Ctrl-C), raised again once the run has stopped.
struct RunWatch {
  std::exception_ptr error;
};

/// Ctrl-C while training: the trainer's way (stop after the current step with a checkpoint),
/// not Python's. While one lives, SIGINT sets a flag the step's end reads instead of Python's.
struct SigintDuringRun {
  SigintDuringRun();
  ~SigintDuringRun();
  SigintDuringRun(const SigintDuringRun&) = delete;
  SigintDuringRun& operator=(const SigintDuringRun&) = delete;

 private:
  struct Saved;
  std::unique_ptr<Saved> saved_;
};

/// RunFlags for a run from Python: the callback every EVERY steps (and the last), Ctrl-C and the
/// callback's exceptions stopping the run after the step with a checkpoint (into W).
gf::RunFlags run_flags(const std::string& run_dir, py::object callback, long every, long stop_after,
                       bool quiet, std::vector<std::string> plugin_paths, RunWatch& w);
/// A run's end as one dict, the same keys for train(), resume() and a stopped run.
py::dict run_result(int status, const std::string& run_dir);

/// Runs BODY (the training loop) without the GIL, then raises what the callback raised.
template <class F>
int run_released(RunWatch& w, F&& body) {
  int status;
  {
    SigintDuringRun sigint;
    py::gil_scoped_release nogil;
    Busy busy;
    status = body();
  }
  if (w.error) std::rethrow_exception(w.error);
  return status;
}

/// growformer.load: an experiment from a checkpoint (DATA: None, 'all', 'none' or a split;
/// PRECISION: None, the model's own, or the products' precision to run in).
std::unique_ptr<PyExperiment> load(py::object checkpoint, py::object data, py::object plugin_paths,
                                   bool trust_plugins, py::object precision);
void bind_functions(py::module_& m);

// ---- evaluation (evaluate.cpp) ------------------------------------------------------------
/// The rows of SPLIT ('train', 'val' or 'test'), read when first asked for by a model loaded
/// with data=None.
const std::vector<gf::Example>& split_of(PyExperiment& p, const std::string& split);
/// The token texts by id (the data's, the saved tokenizer's, or the test split's read now).
std::vector<std::string> vocab_of(PyExperiment& p);
/// The tokenizer the dataset needs to read new data as the model's was read.
std::string saved_tokenizer(const PyExperiment& p);
/// The test split of the model's dataset built from its data options with OPTIONS set
/// ("KEY=VALUE") and its saved tokenizer.
std::vector<gf::Example> test_rows_with(PyExperiment& p, const std::vector<std::string>& options);
py::dict evaluate(PyExperiment& p, py::object data, long max_batches);

// ---- prediction (predict.cpp) -------------------------------------------------------------
py::object predict(PyExperiment& p, py::object inputs, long batch_size, bool logits);
py::tuple predict_file(PyExperiment& p, py::object path, long batch_size);
/// Strings as the dataset's records (Dataset::open_strings); errors name the input's index.
std::vector<gf::Example> tokenize_strings(gf::Experiment& ex, const std::vector<std::string>& texts,
                                          const std::string& what = "predict");

// ---- data in memory (staging.cpp) ---------------------------------------------------------
/// The config's (or the model's) data plugin; "" when it names none.
std::string data_plugin(const gf::Experiment& ex);
/// The formats of the model's dataset (null: it has none).
const gf::DataFormats* formats_of(gf::Experiment& ex);
/// COLUMNS as the dict growformer._data reads.
py::dict columns_dict(const gf::DataColumns& columns);
/// Stages DATA for P's config in a fresh staging folder (P.staged, P.plan).
void stage_data(PyExperiment& p, py::object data);
/// Builds P's experiment from its config, the options of its staged data (in FOLDER) added.
void build_experiment(PyExperiment& p, const std::string& folder);
/// Replaces P's data by DATA (train(data=...)); on an error P keeps what it had.
void restage(PyExperiment& p, py::object data);
/// Before training on staged data: the files into RUN_DIR/data/, the experiment built on them.
void data_into_run_dir(PyExperiment& p, const std::string& run_dir);
/// One split of data in memory (growformer._data.normalize's (kind, inputs, labels)) staged by
/// the model's dataset for PURPOSE (evaluate, predict) in FOLDER: the test split's data options
/// ("KEY=VALUE"), into LINE_FILES the staged files whose lines are rows, and into RECORDS the
/// file of records the dataset wrote instead (predict; "" when none).
std::vector<std::string> stage_one_split(PyExperiment& p, py::handle normalized,
                                         const std::string& folder, gf::StagePurpose purpose,
                                         std::vector<std::string>* line_files,
                                         std::string* records = nullptr);
/// MSG with the staged file FILE named as the data it holds: "FILE:N:" as "WHAT row N-1:" (line
/// N of the file holds row N-1), any other mention of FILE as WHAT.
std::string rows_not_lines(std::string msg, const std::string& file, const std::string& what);

// ---- readers (readers.cpp) ----------------------------------------------------------------
py::array_t<float> to_numpy(const gf::Tensor& t);
py::list events_list(const std::string& path);
py::list metrics_list(const std::string& path);
py::dict parameters(const PyExperiment& p);
py::list heads(const PyExperiment& p);

// ---- the class and the errors (experiment.cpp, errors.cpp) ---------------------------------
void bind_experiment_runs(py::class_<PyExperiment>& cls);
void bind_experiment_properties(py::class_<PyExperiment>& cls);
void bind_errors(py::module_& m);

}  // namespace gfpy
