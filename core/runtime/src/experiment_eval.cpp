// Evaluating an experiment on a split: loss, accuracy, the confusion matrix with the per-class
// figures and macro-F1, and per-row losses. The one evaluation validation, the final test,
// `growformer eval` and the Python module's evaluate report.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include <nlohmann/json.hpp>

#include "growformer/batch_sampler.hpp"
#include "growformer/json_text.hpp"
#include "growformer/ops.hpp"
#include "growformer/precision.hpp"
#include "growformer/trainer.hpp"
#include "trainer_impl.hpp"

namespace gf {

namespace {
// Each row's cross-entropy of LOGITS ([B, C]) against LABELS, in double, appended to OUT.
void append_row_losses(const Tensor& logits, const std::vector<int32_t>& labels,
                       std::vector<double>& out) {
  const size_t b = logits.dim(0), c = logits.dim(1);
  const float* x = logits.data();
  for (size_t i = 0; i < b; ++i) {
    const float* row = x + i * c;
    double m = row[0];
    for (size_t j = 1; j < c; ++j) m = std::max(m, double(row[j]));
    double sum = 0;
    for (size_t j = 0; j < c; ++j) sum += std::exp(double(row[j]) - m);
    out.push_back(m + std::log(sum) - double(row[size_t(labels[i])]));
  }
}

// Counts each row of LOGITS ([B, C]) in CONFUSION (C x C, [true][predicted]): the predicted
// class is the first largest logit.
void add_to_confusion(const Tensor& logits, const std::vector<int32_t>& labels,
                      std::vector<double>& confusion) {
  const size_t b = logits.dim(0), c = logits.dim(1);
  for (size_t i = 0; i < b; ++i) {
    const float* row = logits.data() + i * c;
    const size_t predicted = static_cast<size_t>(std::max_element(row, row + c) - row);
    if (labels[i] < 0 || static_cast<size_t>(labels[i]) >= c)
      throw RuntimeError("evaluate: label " + std::to_string(labels[i]) + " is not one of the " +
                         std::to_string(c) + " classes");
    confusion[static_cast<size_t>(labels[i]) * c + predicted] += 1;
  }
}
}  // namespace

EvalResult Experiment::evaluate(const std::vector<Example>& split, long max_batches,
                                bool keep_examples) {
  NoGradGuard ng;
  // this experiment's products, whatever another experiment of the process set since
  kernels::PrecisionScope own_precision(precision_);
  EvalResult r;
  const size_t C = data_.num_classes;
  // the loss, the example count, then the confusion counts: one reduction across processes
  // (doubles hold the counts exactly up to 2^53)
  std::vector<double> sums(2 + C * C, 0.0);
  std::vector<double> confusion(C * C, 0.0);
  Communicator& comm = *comm_;
  for (const auto& idx : sequential_batches(split.size(), settings_.batch_size, max_batches)) {
    if (interrupted()) throw Interrupted("during evaluation");
    Batch b = make_batch(split, idx);
    if (comm.size() > 1) {
      // this process's rows of the batch, padded as the whole batch is
      auto [first, last] = shard_range(b.batch, comm.rank(), comm.size());
      if (first == last) continue;
      b = shard_rows(b, first, last);
    }
    Var logits = model_->forward(b, false, nullptr);
    Var l = ops::cross_entropy(logits, b.labels);
    sums[0] += static_cast<double>(l.value()[0]) * b.batch;
    sums[1] += static_cast<double>(b.batch);
    if (keep_examples) append_row_losses(logits.value(), b.labels, r.example_losses);
    add_to_confusion(logits.value(), b.labels, confusion);
  }
  clear_tape();
  std::copy(confusion.begin(), confusion.end(), sums.begin() + 2);
  if (comm.size() > 1) comm.allreduce_sum(sums.data(), sums.size());
  std::vector<std::vector<size_t>> counts(C, std::vector<size_t>(C, 0));
  for (size_t t = 0; t < C; ++t)
    for (size_t p = 0; p < C; ++p) counts[t][p] = static_cast<size_t>(sums[2 + t * C + p]);
  r.classes = classification_report(counts);
  r.examples = static_cast<size_t>(sums[1]);
  if (r.examples) {
    r.loss = sums[0] / r.examples;
    r.accuracy = r.classes.accuracy;
  }
  return r;
}

std::vector<std::string> Experiment::class_names() const {
  std::vector<std::string> names = data_.class_names;
  for (size_t c = names.size(); c < data_.num_classes; ++c) names.push_back(std::to_string(c));
  return names;
}

std::string Experiment::evaluation_json(const EvalResult& r) const {
  const std::vector<std::string> names = class_names();
  nlohmann::json classes = nlohmann::json::array();
  for (size_t c = 0; c < r.classes.classes.size(); ++c) {
    const ClassFigures& f = r.classes.classes[c];
    classes.push_back({{"name", names[c]},
                       {"precision", f.precision},
                       {"recall", f.recall},
                       {"f1", f.f1},
                       {"support", f.support}});
  }
  return dump_json(nlohmann::json({{"loss", r.loss},
                                   {"accuracy", r.accuracy},
                                   {"macro_f1", r.classes.macro_f1},
                                   {"examples", r.examples},
                                   {"classes", classes},
                                   {"confusion", r.classes.confusion}}));
}

namespace trainer_detail {

double majority_class_accuracy(const std::vector<Example>& train, const std::vector<Example>& test,
                               size_t num_classes, size_t seen) {
  std::vector<size_t> counts(num_classes, 0);
  for (auto& e : train) counts[e.label]++;
  size_t major = std::max_element(counts.begin(), counts.end()) - counts.begin();
  size_t hit = 0;
  seen = std::min(test.size(), seen);
  for (size_t k = 0; k < seen; ++k) hit += static_cast<size_t>(test[k].label) == major;
  return static_cast<double>(hit) / std::max<size_t>(1, seen);
}

double paired_sd(const std::vector<double>& other, const std::vector<double>& base,
                 Communicator& comm) {
  if (other.size() != base.size())
    throw RuntimeError("the probe has " + std::to_string(other.size()) +
                       " examples against the model's " + std::to_string(base.size()));
  double sums[3] = {0, 0, double(other.size())};
  for (size_t i = 0; i < other.size(); ++i) {
    const double d = other[i] - base[i];
    sums[0] += d;
    sums[1] += d * d;
  }
  if (comm.size() > 1) comm.allreduce_sum(sums, 3);
  const double n = sums[2];
  if (n < 2) return std::numeric_limits<double>::quiet_NaN();
  const double mean = sums[0] / n;
  return std::sqrt(std::max(0.0, (sums[1] - n * mean * mean) / (n - 1)));
}

}  // namespace trainer_detail
}  // namespace gf
