// Training and resuming from Python: the callback, Ctrl-C the trainer's way, a run's result
// from its checkpoint and logs; growformer.load, growformer.resume and the run-log readers; the
// lock that lets one growformer operation run at a time.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <mutex>

#include <growformer/checkpoint.hpp>
#include <growformer/distributed.hpp>
#include <growformer/run_dir.hpp>
#include <growformer/run_events.hpp>
#include <growformer/trainer_state.hpp>

#include "module.hpp"

namespace fs = std::filesystem;

namespace gfpy {

namespace {
std::recursive_timed_mutex g_busy;
}  // namespace

Busy::Busy() {
  while (!g_busy.try_lock_for(std::chrono::milliseconds(50))) {
    py::gil_scoped_acquire gil;
    if (PyErr_CheckSignals() != 0) throw py::error_already_set();
  }
}
Busy::~Busy() { g_busy.unlock(); }

// Ctrl-C while training: the trainer's way (stop after the current step with a checkpoint),
// not Python's (a KeyboardInterrupt wherever Python code runs, which could be halfway through a
// policy's check). While a run goes on, SIGINT sets this flag instead of Python's; the step's
// end reads it. A SIGINT that was ignored (a background job) stays ignored.
namespace {
std::atomic<bool> g_sigint{false};
extern "C" void on_sigint(int) { g_sigint = true; }
}  // namespace

struct SigintDuringRun::Saved {
  struct sigaction old {};
  bool installed = false;
};

SigintDuringRun::SigintDuringRun() : saved_(std::make_unique<Saved>()) {
  g_sigint = false;
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGINT, nullptr, &saved_->old) != 0 || saved_->old.sa_handler == SIG_IGN) return;
  saved_->installed = sigaction(SIGINT, &sa, nullptr) == 0;
}

SigintDuringRun::~SigintDuringRun() {
  if (saved_->installed) sigaction(SIGINT, &saved_->old, nullptr);
}

// RunFlags for a run from Python: the callback every EVERY steps (and the last) with the mean
// training loss and accuracy since its previous call; Ctrl-C (SigintDuringRun's flag, and
// Python's for other signals, checked after every step) stops the run after that step with a
// checkpoint and raises KeyboardInterrupt once it is written; an exception in the callback does
// the same.
gf::RunFlags run_flags(const std::string& run_dir, py::object callback, long every, long stop_after,
                       bool quiet, std::vector<std::string> plugin_paths, RunWatch& w) {
  if (every < 1) throw py::value_error("every must be >= 1");
  // the module trains in one process: N copies under a launcher would share one run directory
  if (gf::launcher_size() > 1)
    throw gf::ConfigError("the growformer module trains in one process, but this is one of " +
                          std::to_string(gf::launcher_size()) + " processes a launcher started (" +
                          gf::launcher_variable() +
                          "); for a data-parallel run use `mpirun -np N "
                          "growformer train CONFIG` (Python policies run there as well)");
  gf::RunFlags f;
  f.run_dir = run_dir;
  f.quiet = quiet;
  f.stop_after = stop_after;
  f.plugin_paths = std::move(plugin_paths);
  f.on_step_every = 1;
  struct Acc {
    double loss = 0, correct = 0, steps = 0;
  };
  auto acc = std::make_shared<Acc>();
  // copies of the std::function (none are made, but a copy must not touch Python's counts
  // without the GIL) share the one reference to the callable
  auto cb = std::make_shared<py::object>(std::move(callback));
  f.on_step = [cb, every, acc, &w](const gf::StepReport& r) -> bool {
    py::gil_scoped_acquire gil;
    double n = static_cast<double>(std::max<size_t>(1, r.steps));
    acc->loss += r.loss * n;
    acc->correct += r.accuracy * n;
    acc->steps += n;
    try {
      if (g_sigint.exchange(false)) {
        PyErr_SetNone(PyExc_KeyboardInterrupt);
        throw py::error_already_set();
      }
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
      const py::object& callback = *cb;
      if (callback.is_none() || (r.step % every != 0 && r.step != r.total_steps)) return true;
      py::list heads;
      for (size_t h : r.heads) heads.append(h);
      py::dict m("step"_a = r.step, "total_steps"_a = r.total_steps,
                 "loss"_a = acc->loss / acc->steps, "accuracy"_a = acc->correct / acc->steps,
                 "steps"_a = static_cast<long>(acc->steps), "lr"_a = r.lr, "heads"_a = heads,
                 "val_step"_a =
                     r.val_step >= 0 ? py::object(py::int_(r.val_step)) : py::object(py::none()),
                 "val_loss"_a =
                     r.val_step >= 0 ? py::object(py::float_(r.val_loss)) : py::object(py::none()),
                 "val_accuracy"_a = r.val_step >= 0 ? py::object(py::float_(r.val_accuracy))
                                                    : py::object(py::none()));
      *acc = Acc{};
      py::object go = callback(m);
      if (go.is_none()) return true;
      if (!py::isinstance<py::bool_>(go))
        throw py::type_error("the train callback returned " + py::repr(go).cast<std::string>() +
                             " at step " + std::to_string(r.step) +
                             "; return True or None to go on, False to stop the run");
      return go.cast<bool>();
    } catch (...) {
      w.error = std::current_exception();
      return false;  // stop after this step, with a checkpoint
    }
  };
  return f;
}

namespace {
// Where a run stands after train() or resume(), from its last checkpoint: the step, whether it
// ended (its last step, or an early stop) and the best validation accuracy so far.
struct RunStand {
  long step = -1;
  bool ended = false;
  double best_val = -1;  // -1: not validated yet
};

RunStand stand_of(const std::string& run_dir) {
  RunStand s;
  const std::string ck = gf::RunDir(run_dir).last_checkpoint();
  std::error_code ec;
  if (!fs::exists(ck, ec)) return s;
  gf::Checkpoint c = gf::load_checkpoint(ck);
  auto trainer = c.metadata.find("trainer");
  auto config = c.metadata.find("config");
  if (trainer == c.metadata.end() || config == c.metadata.end())
    throw gf::RuntimeError(ck + ": not a training checkpoint (no trainer state or config)");
  gf::TrainerState st;
  st.from_json(trainer->second, ck);
  // the run's steps through the table of `train:` (the embedded config is the resolved one)
  const gf::ConfigNode train =
      gf::ConfigNode::load_string(config->second, ck + " (embedded config)").child("train");
  const long steps = gf::TrainSettings::table()
                         .read(gf::Options(train, gf::TrainSettings::options(), "train"))
                         .steps;
  s.step = st.step;
  s.best_val = st.best_val;
  s.ended = st.stopped_early || st.step >= steps;
  return s;
}

// A policy summary as events.jsonl's `summary` event holds it (whole numbers as ints).
py::dict summary_dict(const gf::Event& e, const std::string& prefix) {
  py::dict d;
  for (const auto& [k, v] : e.numbers)
    if (k.rfind(prefix, 0) == 0) d[py::str(k.substr(prefix.size()))] = whole_or_float(v);
  return d;
}
}  // namespace

// A run's end as one dict, the same keys for train(), resume() and a stopped run:
//   status, run_dir, finished, stopped_at (the step of a run that has not ended, else None),
//   best_val (the best validation accuracy so far, None before one), test (the final test:
//   loss, accuracy, examples, majority_class_accuracy, model, evaluated_on, heads; None until
//   the run ends, or without a test or validation split), growth_summary and pruning_summary
//   (the policies' end-of-run summaries; None until the run ends).
// The test line and the summaries come from the run's logs, which train and resume write alike.
py::dict run_result(int status, const std::string& run_dir) {
  RunStand st = stand_of(run_dir);
  bool finished = status == 0 && st.ended;
  py::dict d("status"_a = status, "run_dir"_a = run_dir, "finished"_a = finished,
             "stopped_at"_a =
                 finished || st.step < 0 ? py::object(py::none()) : py::object(py::int_(st.step)),
             "best_val"_a =
                 st.best_val >= 0 ? py::object(py::float_(st.best_val)) : py::object(py::none()));
  d["test"] = py::none();
  d["growth_summary"] = py::none();
  d["pruning_summary"] = py::none();
  if (!finished) return d;
  gf::RunDir dir(run_dir);
  for (const gf::MetricsLine& l : gf::read_metrics(dir.metrics()))
    if (l.split == "test") {
      py::dict t("loss"_a = number_or_none(l.number("loss").value_or(NAN)),
                 "accuracy"_a = number_or_none(l.number("accuracy").value_or(NAN)),
                 "examples"_a = static_cast<long>(l.number("examples").value_or(0)),
                 "majority_class_accuracy"_a =
                     number_or_none(l.number("majority_class_accuracy").value_or(NAN)),
                 "model"_a = l.text("model"), "evaluated_on"_a = l.text("evaluated_on"));
      py::list heads;
      for (double h : l.list("heads")) heads.append(static_cast<long>(h));
      t["heads"] = heads;
      d["test"] = t;
    }
  py::dict growth, pruning;
  std::error_code ec;
  if (fs::exists(dir.events(), ec))
    for (const gf::RunEvent& e : gf::read_run_events(dir.events()))
      if (e.event.type == "summary") {
        growth = summary_dict(e.event, "growth.");
        pruning = summary_dict(e.event, "pruning.");
      }
  d["growth_summary"] = growth;
  d["pruning_summary"] = pruning;
  return d;
}

// data: "lazy" (None from Python) reads no data now and a split when first asked for; "all",
// "train", "val" or "test" read that now; "none" reads none. Plugins come from PLUGIN_PATHS and
// the folders the checkpoint records.
std::unique_ptr<PyExperiment> load(py::object checkpoint_obj, py::object data_obj,
                                   py::object plugin_paths_obj, bool trust_plugins,
                                   py::object precision_obj) {
  const std::string checkpoint = gf::checkpoint_in(path_arg(checkpoint_obj, "load: checkpoint"));
  const std::vector<std::string> given = path_list(plugin_paths_obj, "load: plugin_paths");
  forget_policy_error();
  std::string data = data_obj.is_none()                  ? "lazy"
                     : py::isinstance<py::str>(data_obj) ? data_obj.cast<std::string>()
                                                         : "?";
  if (data != "lazy" && data != "all" && data != "none" && data != "train" && data != "val" &&
      data != "test")
    throw py::value_error(
        "load: data must be None (a split read when asked for), 'all', 'none', "
        "'train', 'val' or 'test', not " +
        py::repr(data_obj).cast<std::string>());
  std::string precision;
  if (!precision_obj.is_none()) {
    if (!py::isinstance<py::str>(precision_obj))
      throw py::type_error(
          "load: precision must be None (the model's own), 'float32', 'bf16' or "
          "'bf16_if_available', not " +
          py::repr(precision_obj).cast<std::string>());
    precision = precision_obj.cast<std::string>();
  }
  auto p = std::make_unique<PyExperiment>();
  py::gil_scoped_release nogil;  // a policy class of the checkpoint's config takes the GIL
  Busy busy;
  gf::Checkpoint ck = gf::load_checkpoint(checkpoint);
  auto cfg = ck.metadata.find("config");
  if (cfg == ck.metadata.end())
    throw gf::RuntimeError(checkpoint + ": not a growformer checkpoint (no embedded config)");
  auto record = ck.metadata.find("data");
  if (record == ck.metadata.end() && data == "lazy")
    data = "all";  // no saved tokenizer: read it all
  if (data != "all" && record == ck.metadata.end())
    throw gf::ConfigError(checkpoint +
                          ": the checkpoint has no saved tokenizer; load it with data='all'");
  const gf::CheckpointPlugins plugins =
      gf::checkpoint_plugin_paths(ck, checkpoint, given, trust_plugins);
  try {
    p->ex = gf::inference_from_checkpoint(ck, checkpoint, plugins.paths,
                                          data == "lazy" ? "none" : data, precision);
  } catch (const gf::ConfigError& e) {
    gf::rethrow_with_missing_plugins(e, checkpoint, plugins, "plugin_paths=[DIR]",
                                     "trust_plugins=True");
  }
  p->ex->load_weights(ck, checkpoint);
  p->data_need = data;
  p->source = checkpoint;
  p->plugin_paths = plugins.paths;
  if (record != ck.metadata.end()) p->record = record->second;
  return p;
}

namespace {
const char* kResumeDoc =
    R"doc(Continues the run in RUN_DIR (a str or pathlib.Path) from its last checkpoint, as `growformer resume`.

A run that has finished is tested again, as the program does. callback, every, stop_after and
quiet as in Experiment.train; plugin_paths: more plugin folders (the run's plugins.lock names
those it used). Returns the result dict of Experiment.train (the same keys).)doc";

const char* kLoadDoc =
    R"doc(An Experiment from CHECKPOINT (a str or pathlib.Path): its embedded config, saved tokenizer, classes and weights.

CHECKPOINT is a checkpoint file, or a run directory: its checkpoints/best.safetensors, else
checkpoints/last.safetensors. The checkpoint stands alone: predict() needs no data files.
DATA: None (the default) reads no data now; a split ('train', 'val', 'test') is read from the
files of the model's config when first evaluated or asked for (split_tokens), and a file that is
gone is an error naming it; 'all' reads every split now, 'train', 'val' or 'test' that one now,
'none' none ever. PLUGIN_PATHS: more plugin folders. The folders of plugins the run loaded from
outside the built-in ones are recorded in the checkpoint; they are searched only with
TRUST_PLUGINS=True (their libraries are native code: trust the checkpoint's source first).
Without it an error names the recorded libraries when a component is not found. The checkpoint's
growth and pruning policies are never built: the experiment predicts and evaluates, and a run
continues with growformer.resume. PRECISION: the products' precision for evaluate and predict
('float32', 'bf16', 'bf16_if_available'), instead of the model's own (None, the default); bf16
where the CPU lacks AVX512_BF16 is refused, bf16_if_available falls back to float32. Each
Experiment runs in its own precision, whatever others in the process use.)doc";
}  // namespace

/// load, resume and the run-log readers.
void bind_functions(py::module_& m) {
  m.def("load", &load, "checkpoint"_a, "data"_a = py::none(),
        "plugin_paths"_a = std::vector<std::string>{}, "trust_plugins"_a = false,
        "precision"_a = py::none(), kLoadDoc);
  m.def(
      "resume",
      [](py::object run_dir_obj, py::object callback, long every, long stop_after, bool quiet,
         py::object plugin_paths) {
        const std::string run_dir = path_arg(run_dir_obj, "resume: run_dir");
        std::vector<std::string> paths = path_list(plugin_paths, "resume: plugin_paths");
        RunWatch w;
        gf::RunFlags f = run_flags(run_dir, callback, every, stop_after, quiet, paths, w);
        forget_policy_error();
        int status = run_released(w, [&] { return gf::resume_run(run_dir, f); });
        return run_result(status, run_dir);
      },
      "run_dir"_a, "callback"_a = py::none(), "every"_a = 1, "stop_after"_a = -1, "quiet"_a = true,
      "plugin_paths"_a = std::vector<std::string>{}, kResumeDoc);
  m.def(
      "read_events",
      [](py::object path) { return events_list(path_arg(path, "read_events: run_dir")); },
      "run_dir"_a,
      "events.jsonl of a run directory (or the file; a str or pathlib.Path) as a list of "
      "dicts: step, type, block, head, then the event's numbers, strings and lists by name. "
      "Events store every number as a double: whole numbers come back as int (head counts, "
      "steps), the others as float, null as None.");
  m.def(
      "read_metrics",
      [](py::object path) { return metrics_list(path_arg(path, "read_metrics: run_dir")); },
      "run_dir"_a,
      "metrics.jsonl of a run directory (or the file; a str or pathlib.Path) as a list of "
      "dicts: step, split ('train', 'val' or 'test'), loss, accuracy, lr, heads (per block, "
      "ints), examples (int), timing, the test line's model, evaluated_on and "
      "majority_class_accuracy, and blocks (per-block diagnostics) where logged; null as None.");
}

}  // namespace gfpy
