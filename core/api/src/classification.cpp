#include "growformer/classification.hpp"

#include "growformer/config.hpp"

namespace gf {

ClassificationReport classification_report(const std::vector<std::vector<size_t>>& confusion) {
  ClassificationReport r;
  r.confusion = confusion;
  size_t C = confusion.size();
  for (auto& row : confusion)
    if (row.size() != C)
      throw RuntimeError("classification_report: the confusion matrix is not square");
  r.classes.resize(C);
  size_t correct = 0;
  for (size_t t = 0; t < C; ++t)
    for (size_t p = 0; p < C; ++p) {
      r.examples += confusion[t][p];
      r.classes[t].support += confusion[t][p];
      r.classes[p].predicted += confusion[t][p];
      if (t == p) correct += confusion[t][p];
    }
  r.accuracy = r.examples ? static_cast<double>(correct) / r.examples : 0.0;
  double f1_sum = 0;
  size_t present = 0;
  for (size_t c = 0; c < C; ++c) {
    ClassFigures& f = r.classes[c];
    double tp = static_cast<double>(confusion[c][c]);
    f.precision = f.predicted ? tp / f.predicted : 0.0;
    f.recall = f.support ? tp / f.support : 0.0;
    f.f1 = f.precision + f.recall > 0 ? 2 * f.precision * f.recall / (f.precision + f.recall) : 0.0;
    if (f.support || f.predicted) {
      f1_sum += f.f1;
      ++present;
    }
  }
  r.macro_f1 = present ? f1_sum / present : 0.0;
  return r;
}

}  // namespace gf
