// The Python module growformer._core (re-exported by the package growformer): configs,
// experiments (train with a callback, evaluate, predict), checkpoints, parameters as numpy
// arrays, and a run directory's logs as lists of dicts. Its parts: module.hpp.
#include "module.hpp"

PYBIND11_MODULE(_core, m) {
  using namespace gfpy;
  m.doc() =
      "growformer: attention models that grow and prune their own heads (the C++ core; "
      "use it through the package growformer)";
  bind_errors(m);
  bind_config(m);
  py::class_<PyExperiment> experiment(
      m, "Experiment", R"doc(Everything a config builds: data, model, optimizer, growth and pruning.

Experiment(config, overrides=[], plugin_paths=[]) builds one to train (train() once, into a new
run directory); growformer.load(checkpoint) builds one from a checkpoint to evaluate and
predict. Arrays are numpy copies: the model's buffers are replaced by every optimizer step.)doc");
  bind_experiment_runs(experiment);
  bind_experiment_properties(experiment);
  bind_functions(m);
}
