// growformer.Experiment: built from a config (with data in memory) or loaded from a checkpoint;
// train, evaluate, predict, tokenize; its parameters, heads and what it holds.
#include <growformer/precision.hpp>

#include "module.hpp"

namespace gfpy {

namespace {
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

DATA (optional) is data in memory, read by the config's dataset (data.plugin), else by the
dataset for its kind (text_tsv for texts and token ids, idx_images for images), with the config's
data options (tokenizer, max_len, val_ratio, ...; the config names no data files then); a
dataset plugin says what it takes (DataFormats), so one written out of tree takes data too:
  {'train': split, 'val': split, 'test': split}  (val and test optional: carved from train by
                                                  data.val_ratio / data.test_ratio), or one split
                                                  (the training data);
  a split: (inputs, labels), or a pandas DataFrame with a text column (data.text_column, else
           'text' or 'sentence') and a label column (data.label_column, else 'label');
  inputs:  a list (or Series, or 1-D array) of str, or of token id sequences, or a 2-D int numpy
           array (examples x positions) of token ids (read with tokenizer: ids); for a dataset
           that takes number sequences, sequences or a 2-D array of numbers (a DataFrame: its
           number columns, as the dataset says);
  labels:  str or int (all of one kind), a list, Series or numpy array;
  images:  for the idx_images dataset, inputs are a uint8 array (N, H, W) (or growformer.Images
           of flat pixels with a shape) and labels ints 0..255; give 'train' and 'test' (val is
           carved by data.val_ratio); written as IDX files the config's data options name.
The dataset writes the data as its own files (text_tsv: JSON lines, one {text, label} object per
row) to a temporary folder, and train() copies them into RUN_DIR/data/ before the run starts: the run's config names those files,
so growformer.resume, `growformer resume`, `eval` and growformer.load read them as any data file.
Errors name the split and the row (data['train'] row 7).)doc";

const char* kEvaluateDoc =
    R"doc(Evaluates the model as `growformer eval` does, on DATA: a split ('train', 'val' or 'test'), a file (a str or pathlib.Path that is not a split's name) of the labelled kind its dataset reads as a test split (text_tsv: TSV, CSV or JSON lines with the model's text and label columns; the format from its extension or sniffed), or labelled data in memory of a kind its dataset takes, as Experiment's DATA takes one split ((inputs, labels), a DataFrame). Other data than the splits is tokenised with the model's saved tokenizer and mapped to its classes (a label it does not know is refused with its row). A model loaded with growformer.load reads a split's files when first evaluated (a file that is gone is an error naming it).

Returns {loss, accuracy, macro_f1, examples, classes: [{name, precision, recall, f1, support}] in
class order, confusion: [[count]] (rows: true class, columns: predicted class), split: the
split's name or 'data'}; over the first MAX_BATCHES batches of train.batch_size (0: all).)doc";

const char* kPredictDoc =
    R"doc(Class probabilities, an (N, classes) float64 numpy array, of INPUTS: a list (any iterable, read once: a generator works) of strings or of token id sequences (lists or 1-D arrays of ints), a 2-D int numpy array, a pandas Series of strings, a DataFrame (its input column), or data in memory of a kind the model's dataset takes (images for an idx_images model: a uint8 array (N, H, W), or growformer.Images; number sequences). Strings are read as the dataset's records, tokenised as `growformer predict` does (datasets with a record format for strings: text_tsv, listops); a string that cannot be one (a lone surrogate, empty) is a ValueError naming its index. In batches of BATCH_SIZE (0: train.batch_size). LOGITS=True gives the model's outputs before the softmax instead (its float32 values).)doc";
}  // namespace

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
            if (p.plan) data_into_run_dir(p, run_dir);
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
            const gf::DataFormats* f = formats_of(*p.ex);
            py::tuple read = py::module_::import("growformer._data")
                                 .attr("predict_inputs")(
                                     texts,
                                     columns_dict(f ? f->columns(p.ex->config().child("data"),
                                                                 gf::StagePurpose::predict)
                                                    : gf::DataColumns{}),
                                     std::vector<std::string>{}, data_plugin(*p.ex), py::dict());
            py::list rows = read[1];
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
          "precision",
          [](const PyExperiment& p) { return gf::kernels::precision_name(p.ex->precision()); },
          "The products' precision this experiment runs in ('float32' or 'bf16'; its config's "
          "`precision:`, or load's precision=, after bf16_if_available's fallback).")
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

}  // namespace gfpy
