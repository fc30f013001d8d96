// Classification figures from a confusion matrix: accuracy, per-class precision, recall and F1,
// macro-F1. Used by `growformer eval`.
#pragma once
#include "growformer/export.hpp"

#include <cstddef>
#include <string>
#include <vector>

GROWFORMER_API_BEGIN

namespace gf {

struct ClassFigures {
  size_t support = 0;                        // examples whose true class this is
  size_t predicted = 0;                      // examples predicted as this class
  double precision = 0, recall = 0, f1 = 0;  // 0 where the denominator is 0
};

struct ClassificationReport {
  std::vector<std::vector<size_t>> confusion;  // [true][predicted]
  std::vector<ClassFigures> classes;
  size_t examples = 0;
  double accuracy = 0;
  /// Mean F1 over the classes that occur as a true or a predicted class (scikit-learn's
  /// default label set).
  double macro_f1 = 0;
};

/// Figures of a square confusion matrix (rows: true class, columns: predicted class).
ClassificationReport classification_report(const std::vector<std::vector<size_t>>& confusion);

}  // namespace gf

GROWFORMER_API_END
