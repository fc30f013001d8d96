// The Python module growformer._core (re-exported by the package growformer): configs,
// experiments (train with a callback, evaluate, predict), checkpoints, parameters as numpy
// arrays, and a run directory's logs as lists of dicts. Arrays are copies of the model's
// tensors (the model's buffers are pooled and replaced by every optimizer step, so a view
// into them would not stay valid).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include <growformer/autograd.hpp>
#include <growformer/batch_sampler.hpp>
#include <growformer/checkpoint.hpp>
#include <growformer/classification.hpp>
#include <growformer/config.hpp>
#include <growformer/distributed.hpp>
#include <growformer/errors.hpp>
#include <growformer/json_text.hpp>
#include <growformer/ops.hpp>
#include <growformer/run_dir.hpp>
#include <growformer/run_events.hpp>
#include <growformer/trainer.hpp>
#include <growformer/trainer_state.hpp>

#include "py_convert.hpp"

namespace fs = std::filesystem;
using namespace pybind11::literals;

namespace gfpy {
namespace {

// ---- configs ---------------------------------------------------------------------------
// A config as its source (a file or YAML text) plus overrides: every Experiment gets a fresh
// parse, since building one marks keys consumed and writes defaults into the document.
struct Config {
  std::string path;  // a file, or
  std::string text;  // YAML text (a dict arrives as JSON, which is YAML)
  std::string name = "<config>";
  std::string base_dir;  // relative paths of a text config resolve against it
  std::vector<std::string> overrides;

  gf::ConfigNode node() const {
    gf::ConfigNode n = path.empty() ? gf::ConfigNode::load_string(text, name, base_dir)
                                    : gf::ConfigNode::load_file(path);
    for (const std::string& o : overrides) n.apply_override(o);
    return n;
  }
};

// ---- arguments ---------------------------------------------------------------------------
// A path argument: a str, bytes or os.PathLike (pathlib.Path); else one TypeError naming WHAT.
std::string path_arg(py::handle h, const std::string& what) {
  if (py::isinstance<py::str>(h)) return h.cast<std::string>();
  if (py::isinstance<py::bytes>(h) || py::hasattr(h, "__fspath__")) {
    py::module_ os = py::module_::import("os");
    return os.attr("fsdecode")(os.attr("fspath")(h)).cast<std::string>();
  }
  throw py::type_error(what + " is a path (a str or an os.PathLike such as pathlib.Path), not " +
                       py::repr(h).cast<std::string>());
}

// A list of paths (plugin_paths); a lone path is refused (a str would be read letter by letter).
std::vector<std::string> path_list(py::handle h, const std::string& what) {
  std::vector<std::string> out;
  if (h.is_none()) return out;
  if (py::isinstance<py::str>(h) || py::isinstance<py::bytes>(h) || py::hasattr(h, "__fspath__") ||
      !py::isinstance<py::iterable>(h))
    throw py::type_error(what + " is a list of paths, not " + py::repr(h).cast<std::string>() +
                         " (wrap one path in a list)");
  size_t i = 0;
  for (auto x : h) out.push_back(path_arg(x, what + "[" + std::to_string(i++) + "]"));
  return out;
}

// A config dict as JSON text (growformer._convert: policy classes given as class objects,
// numpy numbers, paths; one ConfigError naming the key of anything else).
std::string config_json(py::handle d) {
  return py::module_::import("growformer._convert").attr("config_json")(d).cast<std::string>();
}

Config config_from(py::handle src, const std::vector<std::string>& overrides,
                   const std::string& base_dir) {
  Config c;
  if (py::isinstance<Config>(src)) {
    c = src.cast<Config>();
  } else if (py::isinstance<py::dict>(src)) {
    c.text = config_json(src);
    c.name = "<dict>";
    c.base_dir = base_dir.empty() ? fs::current_path().string() : base_dir;
  } else if (py::isinstance<py::str>(src) || py::hasattr(src, "__fspath__")) {
    c.path = path_arg(src, "config");
    if (!fs::exists(c.path)) throw gf::ConfigError(c.path + ": no such config file");
  } else {
    throw py::type_error("a config is a growformer.Config, a path to a YAML file or a dict, not " +
                         py::repr(src).cast<std::string>());
  }
  for (const std::string& o : overrides) c.overrides.push_back(o);
  c.node();  // parse now: a malformed document or override fails here, with its location
  return c;
}

// ---- one operation at a time ------------------------------------------------------------
// The core's thread pool, its kernel selection and the run's signal flags are the process's:
// two experiments built, trained, evaluated or predicting at once from two Python threads would
// share them (and hung in the pool). Every such operation holds this lock, taken with the GIL
// released (a thread holding the lock may need the GIL for a callback or a policy, so no thread
// waits for the lock while holding the GIL). Recursive: a callback or policy may call the
// module (predict on another model, say) from the thread that holds it. The wait is in slices,
// so Ctrl-C in the main thread ends it with KeyboardInterrupt.
std::recursive_timed_mutex g_busy;

class Busy {
 public:
  Busy() {
    while (!g_busy.try_lock_for(std::chrono::milliseconds(50))) {
      py::gil_scoped_acquire gil;
      if (PyErr_CheckSignals() != 0) throw py::error_already_set();
    }
  }
  ~Busy() { g_busy.unlock(); }
  Busy(const Busy&) = delete;
  Busy& operator=(const Busy&) = delete;
};

// ---- experiments -----------------------------------------------------------------------
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
  // data given in memory (growformer._data): the config as given, the staging folder (a
  // tempfile.TemporaryDirectory holding SPLIT.jsonl) and the plan that names them in the config
  Config config;
  std::vector<std::string> plugin_paths;
  py::object staged = py::none(), plan = py::none();
};

// What the callback raised (or a Ctrl-C), raised again once the run has stopped.
struct RunWatch {
  std::exception_ptr error;
};

// Ctrl-C while training: the trainer's way (stop after the current step with a checkpoint),
// not Python's (a KeyboardInterrupt wherever Python code runs, which could be halfway through a
// policy's check). While a run goes on, SIGINT sets this flag instead of Python's; the step's
// end reads it. A SIGINT that was ignored (a background job) stays ignored.
std::atomic<bool> g_sigint{false};
extern "C" void on_sigint(int) { g_sigint = true; }

struct SigintDuringRun {
  struct sigaction old {};
  bool installed = false;
  SigintDuringRun() {
    g_sigint = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGINT, nullptr, &old) != 0 || old.sa_handler == SIG_IGN) return;
    installed = sigaction(SIGINT, &sa, nullptr) == 0;
  }
  ~SigintDuringRun() {
    if (installed) sigaction(SIGINT, &old, nullptr);
  }
};

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

// Runs BODY (the training loop) without the GIL, then raises what the callback raised.
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

std::string data_plugin(const gf::Experiment& ex);
std::string saved_tokenizer(const PyExperiment& p);

// How to evaluate a model whose own data files cannot be read, by its data plugin.
std::string other_data_hint(const std::string& plugin) {
  if (plugin == "text_tsv")
    return "evaluate other labelled data with evaluate(data=PATH) (a TSV, CSV or JSON lines file), "
           "evaluate(data=(texts, labels)) or evaluate(data=DataFrame)";
  if (plugin == "idx_images")
    return "evaluate other labelled images with evaluate(data=(images, labels)) (a uint8 array "
           "(N, H, W) and int labels)";
  return "evaluate other data with `growformer eval CHECKPOINT --set data.KEY=FILE`";
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
  const std::string plugin = data_plugin(*p.ex);
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
                           other_data_hint(plugin) +
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

py::array_t<float> to_numpy(const gf::Tensor& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array_t<float> a(shape);
  std::copy(t.data(), t.data() + t.size(), a.mutable_data());
  return a;
}

// Class probabilities of token sequences, (N, C) float64, in batches of B; with LOGITS the
// model's outputs before the softmax (float32 values, as float64).
py::array_t<double> probabilities(gf::Experiment& ex, std::vector<gf::Example> rows, size_t B,
                                  bool logits = false) {
  const size_t C = ex.data().num_classes, N = rows.size();
  py::array_t<double> out({py::ssize_t(N), py::ssize_t(C)});
  double* o = out.mutable_data();
  {
    py::gil_scoped_release nogil;
    Busy busy;
    gf::NoGradGuard ng;
    for (size_t start = 0; start < N; start += B) {
      const size_t n = std::min(B, N - start);
      std::vector<size_t> idx(n);
      for (size_t i = 0; i < n; ++i) idx[i] = start + i;
      gf::Batch b = ex.make_batch(rows, idx);
      gf::Var out_logits = ex.model().forward(b, false, nullptr);
      for (size_t i = 0; i < n; ++i) {
        const float* row = out_logits.value().data() + i * C;
        double* p = o + (start + i) * C;
        if (logits) {
          for (size_t c = 0; c < C; ++c) p[c] = row[c];
          continue;
        }
        double mx = *std::max_element(row, row + C), sum = 0;
        for (size_t c = 0; c < C; ++c) sum += p[c] = std::exp(double(row[c]) - mx);
        for (size_t c = 0; c < C; ++c) p[c] /= sum;
      }
      gf::clear_tape();
    }
  }
  return out;
}

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

// MSG with the staged file FILE named as the data it holds: "FILE:N:" as "WHAT row N-1:" (line
// N of the file holds row N-1), any other mention of FILE as WHAT.
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

// The tokenizer a dataset of EX's data plugin needs to read new data as EX's was read: from the
// checkpoint's data record it was loaded with, else from EX's own.
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

std::string data_option(const gf::Experiment& ex, const std::string& key,
                        const std::string& fallback) {
  gf::ConfigNode d = ex.config().child("data");
  gf::ConfigNode v = d.valid() ? d.child(key) : gf::ConfigNode();
  return v.valid() ? v.as_string() : fallback;
}

// The rows of a dataset of EX's data plugin built from EX's data options with OPTIONS set
// ("KEY=VALUE") and the saved tokenizer, only the test split wanted: its test split.
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

// Images (a uint8 array (N, H, W)) with LABELS (a uint8 array, or None) as idx_images rows of
// P's model: written as IDX files and read by its dataset with its options (levels, downsample),
// so they are tokenised as its training images were.
std::vector<gf::Example> image_rows(PyExperiment& p, py::object pixels, py::object labels) {
  py::object tmp =
      py::module_::import("tempfile").attr("TemporaryDirectory")("prefix"_a = "growformer-images-");
  std::vector<std::string> options =
      py::module_::import("growformer._data")
          .attr("stage_images_for_eval")(pixels, labels, tmp.attr("name"))
          .cast<std::vector<std::string>>();
  std::vector<gf::Example> rows = test_rows_with(p, options);
  tmp.attr("cleanup")();
  return rows;
}

// Labelled data other than the experiment's splits, tokenised with its saved tokenizer and
// mapped to its classes: a file (PATH, read as a text_tsv file of any format) or data in memory
// (growformer._data: texts and token ids written to a temporary JSON lines file for text_tsv,
// images to IDX files for idx_images).
std::vector<gf::Example> other_data(PyExperiment& p, py::object data) {
  const std::string plugin = data_option(*p.ex, "plugin", "");
  const bool file = py::isinstance<py::str>(data) || py::hasattr(data, "__fspath__");
  if (plugin != "text_tsv" && !(plugin == "idx_images" && !file))
    throw gf::ConfigError(
        "evaluate: other data than the splits is read for models of text_tsv data "
        "(files and data in memory) and of idx_images data (images in memory); "
        "this model's dataset is `" +
        plugin +
        "` (evaluate a file of it with "
        "`growformer eval CHECKPOINT --set data.KEY=FILE`)");
  std::vector<std::string> options;
  py::object tmp = py::none();
  if (file) {
    const std::string path = path_arg(data, "evaluate: data");
    if (!fs::exists(path))
      throw gf::ConfigError("evaluate: `" + path +
                            "` is neither a split ('train', 'val' or 'test') "
                            "nor a data file");
    options = {"format=auto", "test=" + nlohmann::json(fs::absolute(path).string()).dump()};
  } else {
    tmp =
        py::module_::import("tempfile").attr("TemporaryDirectory")("prefix"_a = "growformer-eval-");
    py::object staged =
        py::module_::import("growformer._data")
            .attr("stage_for_eval")(data, tmp.attr("name"),
                                    data_option(*p.ex, "text_column", "sentence"),
                                    data_option(*p.ex, "label_column", "label"), plugin);
    if (plugin == "idx_images")
      options = staged.cast<std::vector<std::string>>();
    else
      options = {"format=jsonl", "test=" + nlohmann::json(staged.cast<std::string>()).dump()};
  }
  std::vector<gf::Example> rows;
  try {
    rows = test_rows_with(p, options);
  } catch (const gf::ConfigError& e) {
    if (tmp.is_none() || plugin != "text_tsv") throw;
    throw gf::ConfigError(
        "evaluate: " +
        rows_not_lines(e.what(), tmp.attr("name").cast<std::string>() + "/test.jsonl", "data"));
  }
  const size_t C = p.ex->data().num_classes;
  for (size_t i = 0; i < rows.size(); ++i)
    if (rows[i].label < 0 || static_cast<size_t>(rows[i].label) >= C)
      throw gf::ConfigError("evaluate: data row " + std::to_string(i) + ": label " +
                            std::to_string(rows[i].label) + " is not one of the model's " +
                            std::to_string(C) + " classes (0.." + std::to_string(C - 1) + ")");
  return rows;
}

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

std::string data_plugin(const gf::Experiment& ex) {
  gf::ConfigNode d = ex.config().child("data");
  return d.valid() && d.has("plugin") ? d.child("plugin").as_string() : "";
}

// A temporary file removed at scope exit.
struct TempFile {
  std::string path;
  explicit TempFile(const std::string& suffix) {
    std::string tmpl = (fs::temp_directory_path() / "growformer_predict_XXXXXX").string() + suffix;
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    int fd = mkstemps(buf.data(), static_cast<int>(suffix.size()));
    if (fd < 0)
      throw gf::RuntimeError("predict: cannot create a temporary file in " +
                             fs::temp_directory_path().string());
    close(fd);
    path = buf.data();
  }
  ~TempFile() { std::remove(path.c_str()); }
};

// Strings as the dataset's records, written to a temporary file and read back through its
// record reader, so they are tokenised exactly as `growformer predict` does: text_tsv's as JSON
// lines (any text), listops' one per line. Errors name the input's index.
std::vector<gf::Example> tokenize_strings(gf::Experiment& ex, const std::vector<std::string>& texts,
                                          const std::string& what = "predict") {
  const std::string plugin = data_plugin(ex);
  if (plugin != "text_tsv" && plugin != "listops")
    throw gf::ConfigError(what + ": strings need a one-line record format, which dataset `" +
                          plugin +
                          "` has not here (listops and text_tsv have); pass token id sequences, or "
                          "a file of records to predict_file");
  const bool jsonl = plugin == "text_tsv";
  const std::string key = data_option(ex, "text_column", "sentence");
  TempFile tmp(jsonl ? ".jsonl" : ".txt");
  {
    std::ofstream f(tmp.path, std::ios::binary);
    for (size_t i = 0; i < texts.size(); ++i) {
      if (!jsonl && texts[i].find_first_of("\n\r") != std::string::npos)
        throw py::value_error(what + ": input " + std::to_string(i) + " holds a line break; a " +
                              plugin + " record is one line");
      if (texts[i].find_first_not_of(" \t\n\r") == std::string::npos)
        throw py::value_error(what + ": input " + std::to_string(i) + " is empty");
      f << (jsonl ? gf::dump_json(nlohmann::json{{key, texts[i]}}) : texts[i]) << "\n";
    }
    if (!f) throw gf::RuntimeError(what + ": cannot write " + tmp.path);
  }
  std::vector<gf::Example> rows;
  try {
    auto reader = ex.dataset().open_records(tmp.path);
    gf::Record r;
    while (reader->next(r)) {
      if (!r.error.empty())
        throw py::value_error(what + ": input " + std::to_string(rows.size()) + ": " + r.error);
      gf::Example e;
      e.tokens = std::move(r.tokens);
      rows.push_back(std::move(e));
    }
  } catch (const gf::ConfigError& e) {
    throw py::value_error(what + ": " + rows_not_lines(e.what(), tmp.path, "the inputs"));
  }
  if (rows.size() != texts.size())
    throw gf::RuntimeError(what + ": the record reader gave " + std::to_string(rows.size()) +
                           " records for " + std::to_string(texts.size()) + " strings");
  return rows;
}

std::vector<gf::Example> token_rows(const gf::Experiment& ex, py::handle inputs) {
  const gf::DataSplits& d = ex.data();
  std::vector<gf::Example> rows;
  size_t i = 0;
  for (auto seq : inputs) {
    py::array_t<long long, py::array::c_style | py::array::forcecast> a;
    try {
      a = py::array_t<long long, py::array::c_style | py::array::forcecast>::ensure(seq);
    } catch (...) {
    }
    if (!a || a.ndim() != 1 || py::isinstance<py::str>(seq))
      throw py::type_error("predict: input " + std::to_string(i) +
                           " is not a sequence of token ids (or all inputs strings)");
    py::array_t<double> as_f = py::array_t<double>::ensure(seq);
    gf::Example e;
    for (py::ssize_t k = 0; k < a.size(); ++k) {
      long long t = a.at(k);
      if (as_f && as_f.at(k) != static_cast<double>(t))
        throw py::value_error("predict: input " + std::to_string(i) + ": token " +
                              std::to_string(k) + " is not an integer");
      if (t < 0 || static_cast<size_t>(t) >= d.vocab_size || t == d.pad_id)
        throw py::value_error("predict: input " + std::to_string(i) + ": token " +
                              std::to_string(k) + " = " + std::to_string(t) +
                              " is not a token id (0 <= id < " + std::to_string(d.vocab_size) +
                              ", not the pad id " + std::to_string(d.pad_id) + ")");
      e.tokens.push_back(static_cast<int32_t>(t));
    }
    if (e.tokens.empty())
      throw py::value_error("predict: input " + std::to_string(i) + " is empty");
    rows.push_back(std::move(e));
    ++i;
  }
  return rows;
}

// INPUTS are read once (a generator works): growformer._data.predict_texts makes them a list,
// a DataFrame's text column, a Series' values, and refuses a string with a lone surrogate.
py::object predict(PyExperiment& p, py::object inputs, long batch_size, bool logits) {
  if (py::isinstance<py::str>(inputs) || py::isinstance<py::bytes>(inputs))
    throw py::type_error(
        "predict takes a list of inputs (strings or token id sequences); "
        "wrap one string in a list");
  size_t B = batch_size > 0 ? size_t(batch_size) : size_t(p.ex->settings().batch_size);
  py::object images = py::module_::import("growformer._data").attr("as_images")(inputs);
  if (!images.is_none()) {
    if (data_plugin(*p.ex) != "idx_images")
      throw gf::ConfigError(
          "predict: images are read for models of idx_images data; this model's "
          "dataset is `" +
          data_plugin(*p.ex) + "`");
    return probabilities(*p.ex, image_rows(p, images, py::none()), B, logits);
  }
  py::list rows = py::module_::import("growformer._data")
                      .attr("predict_texts")(inputs, data_option(*p.ex, "text_column", "sentence"));
  const size_t C = p.ex->data().num_classes;
  if (rows.empty()) return py::array_t<double>(std::vector<py::ssize_t>{0, py::ssize_t(C)});
  bool strings = true;
  for (auto x : rows) strings = strings && py::isinstance<py::str>(x);
  std::vector<gf::Example> examples;
  if (strings) {
    std::vector<std::string> texts;
    for (auto x : rows) texts.push_back(x.cast<std::string>());
    examples = tokenize_strings(*p.ex, texts);
  } else {
    examples = token_rows(*p.ex, rows);
  }
  return probabilities(*p.ex, std::move(examples), B, logits);
}

py::tuple predict_file(PyExperiment& p, py::object path_obj, long batch_size) {
  const std::string path = path_arg(path_obj, "predict_file: path");
  if (!fs::exists(path)) throw gf::ConfigError(path + ": no such input file");
  size_t B = batch_size > 0 ? size_t(batch_size) : size_t(p.ex->settings().batch_size);
  auto reader = p.ex->dataset().open_records(path);
  std::vector<gf::Example> rows;
  py::list ids;
  gf::Record r;
  while (reader->next(r)) {
    if (!r.error.empty())
      throw gf::ConfigError(path + ":" + std::to_string(r.line) + ": record `" + r.id +
                            "`: " + r.error);
    ids.append(r.id);
    gf::Example e;
    e.tokens = std::move(r.tokens);
    rows.push_back(std::move(e));
  }
  return py::make_tuple(ids, probabilities(*p.ex, std::move(rows), B));
}

py::dict parameters(const PyExperiment& p) {
  py::dict out;
  for (auto& [name, v] : p.ex->model().named_parameters()) out[py::str(name)] = to_numpy(v.value());
  return out;
}

// Per block, per head: its id, birth step and tensors by full name (its own parameters and the
// block's output map W_O of the head).
py::list heads(const PyExperiment& p) {
  gf::NamedParams all = p.ex->model().named_parameters();
  py::list blocks;
  size_t b = 0;
  for (gf::AttentionBlock* blk : p.ex->model().blocks()) {
    py::list hs;
    const std::string prefix = "layers." + std::to_string(b) + ".attn.heads.";
    for (const gf::HeadInfo& h : blk->heads()) {
      py::dict tensors;
      const std::string mine = prefix + std::to_string(h.id) + ".";
      for (auto& [name, v] : all) {
        bool own = name.rfind(mine, 0) == 0;
        bool w_o = h.w_o && h.w_o->value().defined() && v.value().data() == h.w_o->value().data();
        if (own || w_o) tensors[py::str(name)] = to_numpy(v.value());
      }
      hs.append(py::dict("id"_a = h.id, "born"_a = h.born_step, "tensors"_a = tensors));
    }
    blocks.append(hs);
    ++b;
  }
  return blocks;
}

// data: "lazy" (None from Python) reads no data now and a split when first asked for; "all",
// "train", "val" or "test" read that now; "none" reads none. Plugins come from PLUGIN_PATHS and
// the folders the checkpoint records.
std::unique_ptr<PyExperiment> load(py::object checkpoint_obj, py::object data_obj,
                                   py::object plugin_paths_obj, bool trust_plugins) {
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
                                          data == "lazy" ? "none" : data);
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

py::list events_list(const std::string& path) {
  std::string file = fs::is_directory(path) ? gf::RunDir(path).events() : path;
  std::vector<gf::RunEvent> evs = gf::read_run_events(file);
  py::list out;
  for (const gf::RunEvent& e : evs) {
    py::dict d = event_to_dict(e.event);
    py::dict row("step"_a = e.step);
    for (auto kv : d) row[kv.first] = kv.second;
    out.append(row);
  }
  return out;
}

// The counts of a metrics line (the trainer writes them as JSON integers): examples, and heads
// per block; the rest are measurements.
bool is_count(const std::string& key) { return key == "examples" || key == "heads"; }

py::list metrics_list(const std::string& path) {
  std::string file = fs::is_directory(path) ? gf::RunDir(path).metrics() : path;
  std::vector<gf::MetricsLine> lines = gf::read_metrics(file);
  py::list out;
  for (const gf::MetricsLine& l : lines) {
    py::dict d("step"_a = l.step, "split"_a = l.split);
    for (const auto& [k, v] : l.numbers)
      d[py::str(k)] = is_count(k) ? whole_or_float(v) : number_or_none(v);
    for (const auto& [k, v] : l.strings) d[py::str(k)] = v;
    for (const auto& [k, v] : l.lists) {
      py::list xs;
      for (double x : v) xs.append(is_count(k) ? whole_or_float(x) : number_or_none(x));
      d[py::str(k)] = xs;
    }
    if (!l.blocks.empty()) {
      py::list bl;
      for (const gf::BlockDiagnostics& b : l.blocks) {
        py::dict heads;
        for (const auto& [id, m] : b.heads) heads[py::int_(id)] = m;
        bl.append(py::dict("lists"_a = b.lists, "heads"_a = heads));
      }
      d["blocks"] = bl;
    }
    out.append(d);
  }
  return out;
}

/// growformer.Config: a YAML file or a dict, plus overrides.
void bind_config(py::module_& m) {
  py::class_<Config>(
      m, "Config",
      R"doc(A configuration: a YAML file, YAML text or a dict, plus KEY=VALUE overrides.

Experiment() takes one (or a path or a dict directly). Each Experiment parses it afresh, so one
Config can build several. Errors are ConfigError naming the file, line and key.)doc")
      .def_static(
          "load",
          [](py::object path, const std::vector<std::string>& overrides) {
            return config_from(py::str(path_arg(path, "Config.load: path")), overrides, "");
          },
          "path"_a, "overrides"_a = std::vector<std::string>{},
          "A YAML config file (a str or pathlib.Path) with OVERRIDES (\"train.steps=300\", "
          "...); relative data paths resolve against the file's folder.")
      .def_static(
          "from_dict",
          [](py::dict d, const std::vector<std::string>& overrides, py::object base_dir) {
            return config_from(d, overrides,
                               base_dir.is_none()
                                   ? std::string()
                                   : path_arg(base_dir, "Config.from_dict: base_dir"));
          },
          "config"_a, "overrides"_a = std::vector<std::string>{}, "base_dir"_a = "",
          "A config as nested dicts (values: str, numbers, bools, None, lists, dicts; also "
          "numpy numbers, paths, and a policy class given as the class object, recorded as "
          "module.Class with its module's folder in `path`); relative paths resolve "
          "against BASE_DIR (default the current folder).")
      .def_static(
          "from_yaml",
          [](const std::string& text, const std::vector<std::string>& overrides,
             py::object base_dir) {
            Config c;
            c.text = text;
            c.name = "<yaml>";
            std::string dir = base_dir.is_none() ? std::string()
                                                 : path_arg(base_dir, "Config.from_yaml: base_dir");
            c.base_dir = dir.empty() ? fs::current_path().string() : dir;
            return config_from(py::cast(c), overrides, "");
          },
          "text"_a, "overrides"_a = std::vector<std::string>{}, "base_dir"_a = "",
          "A config from YAML TEXT; relative paths resolve against BASE_DIR (default the "
          "current folder).")
      .def(
          "set",
          [](Config& c, const std::string& assignment) {
            Config next = c;
            next.overrides.push_back(assignment);
            next.node();
            c = next;
            return c;
          },
          "assignment"_a,
          "Adds a KEY=VALUE override (dotted key, YAML value), checked now; returns the config.")
      .def_readonly("overrides", &Config::overrides,
                    "The KEY=VALUE overrides, in order (list of str).")
      .def(
          "yaml", [](const Config& c) { return c.node().dump(); },
          "The document with the overrides applied, as YAML text.")
      .def(
          "to_dict", [](const Config& c) { return config_to_py(c.node()); },
          "The document with the overrides applied, as nested dicts and lists (scalars as int, "
          "float, bool, None or str).")
      .def("__repr__", [](const Config& c) {
        return "growformer.Config(" + (c.path.empty() ? c.name : c.path) +
               ", overrides=" + py::repr(py::cast(c.overrides)).cast<std::string>() + ")";
      });
}

// ---- data given in memory ------------------------------------------------------------------
// Builds P's experiment from its config, the data options of its staged data (read from
// FOLDER) added, with the GIL released and the lock held. A reader's error about a staged file
// names the data's split and row instead.
void build_experiment(PyExperiment& p, const std::string& folder) {
  Config c = p.config;
  std::vector<std::string> splits;
  if (!p.plan.is_none()) {
    for (const std::string& o : py::module_::import("growformer._data")
                                    .attr("overrides")(p.plan, folder)
                                    .cast<std::vector<std::string>>())
      c.overrides.push_back(o);
    splits = p.plan["splits"].cast<std::vector<std::string>>();
  }
  gf::ConfigNode node = c.node();
  forget_policy_error();
  try {
    py::gil_scoped_release nogil;  // a Python policy class takes the GIL itself
    Busy busy;
    auto ex = std::make_unique<gf::Experiment>(node, p.plugin_paths);
    p.ex = std::move(ex);  // the previous one (data staged before) stays until this one stands
  } catch (const gf::ConfigError& e) {
    if (splits.empty()) throw;
    std::string msg = e.what();
    for (const std::string& split : splits)
      msg = rows_not_lines(msg,
                           (fs::absolute(folder) / (split + ".jsonl")).lexically_normal().string(),
                           "data['" + split + "']");
    throw gf::ConfigError(msg);
  }
}

// Stages DATA (growformer._data.prepare) in a fresh temporary folder for P's config.
void stage_data(PyExperiment& p, py::object data) {
  py::object section = p.config.node().has("data") ? config_to_py(p.config.node().child("data"))
                                                   : py::object(py::dict());
  if (!py::isinstance<py::dict>(section))
    throw gf::ConfigError("data: the config's `data` is not a mapping");
  p.staged =
      py::module_::import("tempfile").attr("TemporaryDirectory")("prefix"_a = "growformer-data-");
  p.plan =
      py::module_::import("growformer._data").attr("prepare")(section, data, p.staged.attr("name"));
}

// Replaces P's data by DATA (train(data=...)): staged and the experiment built (its data checked)
// before anything reaches a run directory; on an error P keeps what it had.
void restage(PyExperiment& p, py::object data) {
  py::object staged = p.staged, plan = p.plan;
  try {
    stage_data(p, data);
    build_experiment(p, p.staged.attr("name").cast<std::string>());
  } catch (...) {
    p.staged = staged;
    p.plan = plan;
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
  for (const std::string& name : p.plan["files"].cast<std::vector<std::string>>())
    fs::copy_file(fs::path(from) / name, target / name, fs::copy_options::overwrite_existing);
  build_experiment(p, target.string());
}

const char* kTrainDoc =
    R"doc(Trains into RUN_DIR (a str or pathlib.Path; new or empty) and returns the run's result.

callback(metrics) runs every EVERY steps and at the last, with a dict: step, total_steps, loss and
accuracy (means over the steps since its previous call), steps (how many), lr, heads (per block,
ints), val_step, val_loss, val_accuracy (the latest validation, None before one). Returning False
stops the run after that step with a checkpoint (resume() continues it); an exception in it, or
Ctrl-C, does the same and is raised once the checkpoint is written. stop_after=N stops after step
N. quiet=False prints the program's progress lines.

The result (the same keys as resume()'s): status (0), run_dir, finished (the run reached its last
step or stopped early), stopped_at (the step of a run that has not ended, else None), best_val
(the best validation accuracy so far, None before one), test (once finished: loss, accuracy,
examples, majority_class_accuracy, model, evaluated_on, heads; None before, or without a test or
validation split), growth_summary and pruning_summary (once finished: the policies' summaries as
{name: number}; None before). After the final test the model holds the weights it tested
(train.test_on: best loads the best).

DATA: data in memory, as Experiment's DATA (it replaces what the experiment was built with);
with data in memory, RUN_DIR/data/ receives it before the run starts.)doc";

const char* kInitDoc =
    R"doc(Builds everything CONFIG names (a Config, a path to a YAML file, or a dict) with OVERRIDES ("train.steps=300", ...): data, model, optimizer, growth and pruning policies; PLUGIN_PATHS: more plugin folders. Nothing is written until train().

DATA (optional) is data in memory, read by the text_tsv dataset with the config's data options
(tokenizer, max_len, val_ratio, ...; the config names no data files then):
  {'train': split, 'val': split, 'test': split}  (val and test optional: carved from train by
                                                  data.val_ratio / data.test_ratio), or one split
                                                  (the training data);
  a split: (inputs, labels), or a pandas DataFrame with a text column (data.text_column, else
           'text' or 'sentence') and a label column (data.label_column, else 'label');
  inputs:  a list (or Series, or 1-D array) of str, or of token id sequences, or a 2-D int numpy
           array (examples x positions) of token ids (read with tokenizer: ids);
  labels:  str or int (all of one kind), a list, Series or numpy array;
  images:  for the idx_images dataset, inputs are a uint8 array (N, H, W) (or growformer.Images
           of flat pixels with a shape) and labels ints 0..255; give 'train' and 'test' (val is
           carved by data.val_ratio); written as IDX files the config's data options name.
The data is written as JSON lines (one {text, label} object per row) to a temporary folder, and
train() copies it into RUN_DIR/data/ before the run starts: the run's config names those files,
so growformer.resume, `growformer resume`, `eval` and growformer.load read them as any data file.
Errors name the split and the row (data['train'] row 7).)doc";

const char* kEvaluateDoc =
    R"doc(Evaluates the model as `growformer eval` does, on DATA: a split ('train', 'val' or 'test'), a file (a str or pathlib.Path that is not a split's name: TSV, CSV or JSON lines with the model's text and label columns; the format from its extension or sniffed), or labelled data in memory, as Experiment's DATA takes one split ((inputs, labels), a DataFrame). Other data than the splits is tokenised with the model's saved tokenizer and mapped to its classes (a label it does not know is refused with its row); models of text_tsv data (files, data in memory) and of idx_images data (images in memory: (images, labels)). A model loaded with growformer.load reads a split's files when first evaluated (a file that is gone is an error naming it).

Returns {loss, accuracy, macro_f1, examples, classes: [{name, precision, recall, f1, support}] in
class order, confusion: [[count]] (rows: true class, columns: predicted class), split: the
split's name or 'data'}; over the first MAX_BATCHES batches of train.batch_size (0: all).)doc";

const char* kPredictDoc =
    R"doc(Class probabilities, an (N, classes) float64 numpy array, of INPUTS: a list (any iterable, read once: a generator works) of strings or of token id sequences (lists or 1-D arrays of ints), a 2-D int numpy array, a pandas Series of strings, a DataFrame (its text column), or images for an idx_images model (a uint8 array (N, H, W), or growformer.Images). Strings are tokenised as `growformer predict` does (datasets with one-line records: text_tsv, listops); a string that cannot be one (a lone surrogate, empty) is a ValueError naming its index. In batches of BATCH_SIZE (0: train.batch_size). LOGITS=True gives the model's outputs before the softmax instead (its float32 values).)doc";

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
continues with growformer.resume.)doc";

/// growformer.Experiment: building, training, evaluation and prediction.
void bind_experiment_runs(py::class_<PyExperiment>& cls) {
  cls.def(py::init([](py::object config, const std::vector<std::string>& overrides,
                      py::object plugin_paths, py::object data) {
            auto p = std::make_unique<PyExperiment>();
            p->config = config_from(config, overrides, "");
            p->plugin_paths = path_list(plugin_paths, "Experiment: plugin_paths");
            if (!data.is_none()) stage_data(*p, data);
            build_experiment(*p,
                             p->staged.is_none() ? "" : p->staged.attr("name").cast<std::string>());
            return p;
          }),
          "config"_a, "overrides"_a = std::vector<std::string>{},
          "plugin_paths"_a = std::vector<std::string>{}, "data"_a = py::none(), kInitDoc)
      .def(
          "train",
          [](PyExperiment& p, py::object run_dir_obj, py::object callback, long every,
             long stop_after, bool quiet, py::object data) {
            const std::string run_dir = path_arg(run_dir_obj, "train: run_dir");
            if (p.data_need != "all" || !p.source.empty())
              throw gf::ConfigError(
                  "an experiment loaded from a checkpoint trains with "
                  "growformer.resume(run_dir), not train");
            if (p.trained)
              throw gf::ConfigError(
                  "this experiment has trained already; build a new Experiment "
                  "for another run");
            if (run_dir.empty()) throw py::value_error("train needs a run directory");
            if (!data.is_none()) restage(p, data);
            if (!p.plan.is_none()) data_into_run_dir(p, run_dir);
            RunWatch w;
            gf::RunFlags f = run_flags(run_dir, callback, every, stop_after, quiet, {}, w);
            p.trained = true;
            forget_policy_error();
            int status = run_released(w, [&] { return p.ex->train(f); });
            return run_result(status, run_dir);
          },
          "run_dir"_a, "callback"_a = py::none(), "every"_a = 1, "stop_after"_a = -1,
          "quiet"_a = true, "data"_a = py::none(), kTrainDoc)
      .def("evaluate", &evaluate, "data"_a = "val", "max_batches"_a = 0, kEvaluateDoc)
      .def("predict", &predict, "inputs"_a, "batch_size"_a = 0, "logits"_a = false, kPredictDoc)
      .def(
          "tokenize",
          [](PyExperiment& p, py::object texts) {
            py::list rows =
                py::module_::import("growformer._data")
                    .attr("predict_texts")(texts, data_option(*p.ex, "text_column", "sentence"));
            std::vector<std::string> strs;
            size_t i = 0;
            for (auto x : rows) {
              if (!py::isinstance<py::str>(x))
                throw py::type_error("tokenize: input " + std::to_string(i) + " is not a str");
              strs.push_back(x.cast<std::string>());
              ++i;
            }
            py::list out;
            for (gf::Example& e : tokenize_strings(*p.ex, strs, "tokenize"))
              out.append(py::cast(e.tokens));
            return out;
          },
          "texts"_a,
          "The token ids of TEXTS (strings, read once), as predict tokenises them (before "
          "truncation to the model's positions): a list of int lists, the inputs of to_torch's "
          "module (its encode pads them).")
      .def("predict_file", &predict_file, "path"_a, "batch_size"_a = 0,
           "(ids, probabilities) of a file of records (a str or pathlib.Path), as `growformer "
           "predict` reads it: the records' ids and an (N, classes) float64 array.")
      .def("parameters", &parameters,
           "Every parameter by dotted name (layers.0.attn.heads.3.w_q, ...), as numpy float32 "
           "copies.")
      .def("heads", &heads,
           "Per block, per head: {id, born (its birth step), tensors: {name: numpy copy}}, the "
           "tensors with the block's output map W_O of the head.");
}

/// growformer.Experiment: what it holds (names, sizes, the resolved config, token splits).
void bind_experiment_properties(py::class_<PyExperiment>& cls) {
  cls.def_property_readonly(
         "name", [](const PyExperiment& p) { return p.ex->name(); }, "The config's `name` (str).")
      .def_property_readonly(
          "classes",
          [](const PyExperiment& p) {
            std::vector<std::string> n = p.ex->data().class_names;
            for (size_t c = n.size(); c < p.ex->data().num_classes; ++c)
              n.push_back(std::to_string(c));
            return n;
          },
          "The class names by class index (list of str; the index as text where the data names "
          "none).")
      .def_property_readonly(
          "vocab", [](PyExperiment& p) { return vocab_of(p); },
          "Token text by id (list of str): the data's; loaded with data=None, the "
          "saved tokenizer's (else the test split's, read now); empty with "
          "data='none' and for tokenizer: ids (strings are still tokenised).")
      .def_property_readonly(
          "vocab_size", [](const PyExperiment& p) { return p.ex->data().vocab_size; },
          "How many token ids there are (int).")
      .def_property_readonly(
          "pad_id", [](const PyExperiment& p) { return p.ex->data().pad_id; },
          "The padding token's id (int), which is no input token.")
      .def_property_readonly(
          "heads_per_block", [](const PyExperiment& p) { return p.ex->model().heads_per_block(); },
          "The model's head count per block now (list of int).")
      .def_property_readonly(
          "num_parameters", [](const PyExperiment& p) { return p.ex->model().num_parameters(); },
          "How many scalar parameters the model has now (int).")
      .def_property_readonly(
          "config", [](const PyExperiment& p) { return p.ex->config().dump(); },
          "The resolved config (every default spelled out) as YAML text.")
      .def_property_readonly(
          "data_sizes",
          [](const PyExperiment& p) {
            const gf::DataSplits& d = p.ex->data();
            auto size = [&](const char* split, const std::vector<gf::Example>& rows) {
              auto it = p.lazy.find(split);
              return it == p.lazy.end() ? rows.size() : it->second.size();
            };
            return py::dict("train"_a = size("train", d.train), "val"_a = size("val", d.val),
                            "test"_a = size("test", d.test));
          },
          "Examples per split: {train, val, test} (ints; 0 for a split not read: a model loaded "
          "with data=None reads a split when asked for).")
      .def(
          "split_tokens",
          [](PyExperiment& p, const std::string& split) {
            py::list toks, labels;
            for (const gf::Example& e : split_of(p, split)) {
              toks.append(py::cast(e.tokens));
              labels.append(e.label);
            }
            return py::make_tuple(toks, labels);
          },
          "split"_a,
          "(token id lists, labels) of SPLIT ('train', 'val' or 'test'), as the model reads it.");
}

/// load, resume and the run-log readers.
void bind_functions(py::module_& m) {
  m.def("load", &load, "checkpoint"_a, "data"_a = py::none(),
        "plugin_paths"_a = std::vector<std::string>{}, "trust_plugins"_a = false, kLoadDoc);
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

// ConfigError and RunError from the C++ exceptions; a policy's Python exception, kept by the
// policy bridge, becomes the __cause__ of the error whose message reports it.
py::handle g_config_error, g_run_error;

// WHAT as a Python str: bytes that are not UTF-8 (a corrupt line quoted from a binary file, a
// file name) as \xHH escapes, so the message is never lost.
py::str message_text(const char* what) {
  PyObject* s =
      PyUnicode_DecodeUTF8(what, static_cast<Py_ssize_t>(std::strlen(what)), "backslashreplace");
  if (!s) {
    PyErr_Clear();
    return py::str("(an error message that could not be decoded)");
  }
  return py::reinterpret_steal<py::str>(s);
}

void raise_with_cause(py::handle type, const char* what) {
  py::object cause = take_policy_error(what);
  if (cause.is_none()) {
    PyErr_SetObject(type.ptr(), message_text(what).ptr());
    return;
  }
  py::object err = py::reinterpret_borrow<py::object>(type)(message_text(what));
  PyException_SetCause(err.ptr(), cause.release().ptr());  // steals the reference
  PyErr_SetObject(type.ptr(), err.ptr());
}

void bind_errors(py::module_& m) {
  static py::exception<gf::ConfigError> config_error(m, "ConfigError", PyExc_ValueError);
  static py::exception<gf::RuntimeError> run_error(m, "RunError", PyExc_RuntimeError);
  config_error.attr("__doc__") =
      "A configuration the program refuses (a ValueError): a malformed config, an unknown key, "
      "plugin or option, a bad value, a policy class that cannot be made; the message names "
      "the file, line and key. A policy's own exception is its __cause__.";
  run_error.attr("__doc__") =
      "A run that failed (a RuntimeError): unreadable data or checkpoints, a policy that raised "
      "or answered wrongly, a non-finite loss; the message names what and where. A policy's own "
      "exception is its __cause__.";
  g_config_error = config_error;
  g_run_error = run_error;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const gf::ConfigError& e) {
      raise_with_cause(g_config_error, e.what());
    } catch (const gf::RuntimeError& e) {
      raise_with_cause(g_run_error, e.what());
    }
  });
}

}  // namespace
}  // namespace gfpy

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
