// Prediction from Python: class probabilities (or logits) of strings read as the dataset's
// records (Dataset::open_strings), of token id sequences, of data in memory the dataset stages
// (DataFormats: images, number sequences), and of a file of records.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include <growformer/autograd.hpp>
#include <growformer/precision.hpp>

#include "module.hpp"

namespace fs = std::filesystem;

namespace gfpy {

namespace {
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
    gf::kernels::PrecisionScope own(ex.precision());  // another experiment may have set its own
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
}  // namespace

// Strings as the dataset's records (Dataset::open_strings), so they are tokenised exactly as
// `growformer predict` tokenises a file's. Errors name the input's index.
std::vector<gf::Example> tokenize_strings(gf::Experiment& ex, const std::vector<std::string>& texts,
                                          const std::string& what) {
  for (size_t i = 0; i < texts.size(); ++i)
    if (texts[i].find_first_not_of(" \t\n\r") == std::string::npos)
      throw py::value_error(what + ": input " + std::to_string(i) + " is empty");
  std::unique_ptr<gf::RecordReader> reader;
  try {
    reader = ex.dataset().open_strings(texts);
  } catch (const gf::ConfigError& e) {  // a string that can be no record names its index
    throw py::value_error(what + ": " + e.what());
  }
  if (!reader)
    throw gf::ConfigError(what + ": strings are read as the records of a dataset that has a " +
                          "record format for them, which dataset `" + data_plugin(ex) +
                          "` has not; pass token id sequences, or a file of records to "
                          "predict_file");
  std::vector<gf::Example> rows;
  gf::Record r;
  while (reader->next(r)) {
    if (!r.error.empty())
      throw py::value_error(what + ": input " + std::to_string(rows.size()) + ": " + r.error);
    gf::Example e;
    e.tokens = std::move(r.tokens);
    rows.push_back(std::move(e));
  }
  if (rows.size() != texts.size())
    throw gf::RuntimeError(what + ": the record reader gave " + std::to_string(rows.size()) +
                           " records for " + std::to_string(texts.size()) + " strings");
  return rows;
}

namespace {
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

// Data in memory of a kind the model's dataset stages (images, number sequences): staged as
// its test split without labels and read back, so it is tokenised as the training data was.
std::vector<gf::Example> staged_rows(PyExperiment& p, py::handle normalized) {
  py::object tmp = py::module_::import("tempfile")
                       .attr("TemporaryDirectory")("prefix"_a = "growformer-predict-");
  std::string records;
  std::vector<std::string> options =
      stage_one_split(p, normalized, tmp.attr("name").cast<std::string>(),
                      gf::StagePurpose::predict, nullptr, &records);
  std::vector<gf::Example> rows;
  if (records.empty()) {
    rows = test_rows_with(p, options);
  } else {  // the dataset's records, as `growformer predict` reads a file of them
    std::unique_ptr<gf::RecordReader> reader = p.ex->dataset().open_records(records);
    gf::Record r;
    while (reader->next(r)) {
      if (!r.error.empty())
        throw py::value_error("predict: input " + std::to_string(rows.size()) + ": " + r.error);
      gf::Example e;
      e.tokens = std::move(r.tokens);
      rows.push_back(std::move(e));
    }
  }
  tmp.attr("cleanup")();
  return rows;
}
}  // namespace

// INPUTS are read once (a generator works): growformer._data.predict_inputs makes them a list
// (a DataFrame's input column, a Series' values; a string with a lone surrogate refused), or
// the one split of data in memory the model's dataset stages (images, number sequences).
py::object predict(PyExperiment& p, py::object inputs, long batch_size, bool logits) {
  if (py::isinstance<py::str>(inputs) || py::isinstance<py::bytes>(inputs))
    throw py::type_error(
        "predict takes a list of inputs (strings or token id sequences); "
        "wrap one string in a list");
  size_t B = batch_size > 0 ? size_t(batch_size) : size_t(p.ex->settings().batch_size);
  const gf::DataFormats* formats = formats_of(*p.ex);
  const gf::ConfigNode section = p.ex->config().child("data");
  py::dict columns = formats ? columns_dict(formats->columns(section, gf::StagePurpose::predict))
                             : columns_dict(gf::DataColumns{});
  const std::vector<std::string> kinds = formats ? formats->kinds() : std::vector<std::string>{};
  py::dict takers;  // the datasets that take each kind of data in memory, for messages
  for (const char* kind : {"texts", "ids", "numbers", "images"})
    takers[kind] = p.ex->registry().datasets_for(kind, false);
  py::tuple read = py::module_::import("growformer._data")
                       .attr("predict_inputs")(inputs, columns, kinds, data_plugin(*p.ex), takers);
  const std::string how = read[0].cast<std::string>();
  const size_t C = p.ex->data().num_classes;
  if (how == "staged") return probabilities(*p.ex, staged_rows(p, read[1]), B, logits);
  py::list rows = read[1];
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

}  // namespace gfpy
