// Evaluating an experiment on a split: loss, accuracy and per-row losses.
#include <cmath>
#include <vector>

#include "growformer/batch_sampler.hpp"
#include "growformer/ops.hpp"
#include "growformer/trainer.hpp"

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
}  // namespace

EvalResult Experiment::evaluate(const std::vector<Example>& split, long max_batches,
                                bool keep_examples) {
  NoGradGuard ng;
  EvalResult r;
  double loss = 0;
  size_t correct = 0;
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
    loss += static_cast<double>(l.value()[0]) * b.batch;
    if (keep_examples) append_row_losses(logits.value(), b.labels, r.example_losses);
    TrainWindow hits;
    hits.add(logits, b, 0.f);
    correct += static_cast<size_t>(hits.correct);
    r.examples += b.batch;
  }
  clear_tape();
  if (comm.size() > 1) {
    // counts are summed exactly (doubles hold integers to 2^53)
    double sums[3] = {loss, static_cast<double>(correct), static_cast<double>(r.examples)};
    comm.allreduce_sum(sums, 3);
    loss = sums[0];
    correct = static_cast<size_t>(sums[1]);
    r.examples = static_cast<size_t>(sums[2]);
  }
  if (r.examples) {
    r.loss = loss / r.examples;
    r.accuracy = static_cast<double>(correct) / r.examples;
  }
  return r;
}

}  // namespace gf
