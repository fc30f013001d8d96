// Data set statistics for `growformer data stats` (see data_stats.hpp).
#include "growformer/data/data_stats.hpp"

#include "growformer/json_text.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gf {

namespace {

size_t nearest_rank(const std::vector<size_t>& sorted, double pct) {
  if (sorted.empty()) return 0;
  size_t rank = static_cast<size_t>(std::ceil(pct / 100.0 * static_cast<double>(sorted.size())));
  rank = std::max<size_t>(rank, 1);
  return sorted[std::min(rank, sorted.size()) - 1];
}

SplitStats split_stats(const std::string& name, const std::vector<Example>& ex, size_t num_classes,
                       size_t max_len) {
  SplitStats s;
  s.name = name;
  s.size = ex.size();
  s.class_counts.assign(num_classes, 0);
  std::vector<size_t> lens;
  lens.reserve(ex.size());
  for (const auto& e : ex) {
    if (e.label >= 0 && static_cast<size_t>(e.label) < num_classes) {
      ++s.class_counts[static_cast<size_t>(e.label)];
    }
    lens.push_back(e.tokens.size());
    s.tokens += e.tokens.size();
    if (max_len > 0 && e.tokens.size() > max_len) ++s.truncated;
  }
  std::sort(lens.begin(), lens.end());
  if (!lens.empty()) {
    s.len_min = lens.front();
    s.len_max = lens.back();
    s.len_mean = static_cast<double>(s.tokens) / static_cast<double>(lens.size());
  }
  s.len_p50 = nearest_rank(lens, 50);
  s.len_p90 = nearest_rank(lens, 90);
  s.len_p95 = nearest_rank(lens, 95);
  s.len_p99 = nearest_rank(lens, 99);
  return s;
}

}  // namespace

DataStats compute_stats(const DataSplits& d, size_t max_len) {
  DataStats st;
  st.vocab_size = d.vocab_size;
  st.num_classes = d.num_classes;
  st.max_len = max_len;
  st.dataset_max_len = d.max_len;
  for (size_t c = 0; c < d.num_classes; ++c) {
    st.class_names.push_back(c < d.class_names.size() ? d.class_names[c] : std::to_string(c));
  }
  st.splits.push_back(split_stats("train", d.train, d.num_classes, max_len));
  st.splits.push_back(split_stats("val", d.val, d.num_classes, max_len));
  st.splits.push_back(split_stats("test", d.test, d.num_classes, max_len));
  return st;
}

std::string format_stats_table(const DataStats& st) {
  std::ostringstream os;
  os << "vocabulary size " << st.vocab_size << ", " << st.num_classes << " classes, "
     << "longest sequence emitted " << st.dataset_max_len;
  if (st.max_len > 0) os << ", model max_len " << st.max_len;
  os << "\n\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-6s %8s %9s %6s %6s %6s %6s %6s %6s %9s %10s\n", "split",
                "examples", "tokens/1k", "min", "p50", "p90", "p95", "p99", "max", "mean",
                "truncated");
  os << buf;
  for (const auto& s : st.splits) {
    std::snprintf(buf, sizeof buf, "%-6s %8zu %9zu %6zu %6zu %6zu %6zu %6zu %6zu %9.1f %10zu\n",
                  s.name.c_str(), s.size, (s.tokens + 500) / 1000, s.len_min, s.len_p50, s.len_p90,
                  s.len_p95, s.len_p99, s.len_max, s.len_mean, s.truncated);
    os << buf;
  }
  // Val is usually carved out of a source file's training set: train+val is that file's size.
  size_t total = 0, train_val = 0;
  for (size_t i = 0; i < st.splits.size(); ++i) {
    total += st.splits[i].size;
    if (st.splits[i].name != "test") train_val += st.splits[i].size;
  }
  std::snprintf(buf, sizeof buf, "%-6s %8zu  (train+val %zu)\n", "total", total, train_val);
  os << buf;
  os << "\nclass counts\n";
  size_t w = 5;
  for (const auto& n : st.class_names) w = std::max(w, n.size());
  std::snprintf(buf, sizeof buf, "%-*s %8s %8s %8s %8s\n", static_cast<int>(w), "class", "train",
                "val", "test", "total");
  os << buf;
  size_t col[4] = {0, 0, 0, 0};
  for (size_t c = 0; c < st.num_classes; ++c) {
    size_t n[3] = {0, 0, 0};
    for (size_t i = 0; i < st.splits.size() && i < 3; ++i) {
      if (c < st.splits[i].class_counts.size()) n[i] = st.splits[i].class_counts[c];
    }
    size_t row = n[0] + n[1] + n[2];
    for (size_t i = 0; i < 3; ++i) col[i] += n[i];
    col[3] += row;
    std::snprintf(buf, sizeof buf, "%-*s %8zu %8zu %8zu %8zu\n", static_cast<int>(w),
                  st.class_names[c].c_str(), n[0], n[1], n[2], row);
    os << buf;
  }
  std::snprintf(buf, sizeof buf, "%-*s %8zu %8zu %8zu %8zu\n", static_cast<int>(w), "total", col[0],
                col[1], col[2], col[3]);
  os << buf;
  return os.str();
}

// a split's JSON object: its fields by their names (the name itself is the key above it)
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(SplitStats, size, tokens, class_counts, len_min, len_p50,
                                   len_p90, len_p95, len_p99, len_max, len_mean, truncated)

std::string stats_json(const DataStats& st) {
  nlohmann::json j;
  j["vocab_size"] = st.vocab_size;
  j["num_classes"] = st.num_classes;
  j["class_names"] = st.class_names;
  j["max_len"] = st.max_len;
  j["dataset_max_len"] = st.dataset_max_len;
  nlohmann::json splits = nlohmann::json::object();
  for (const auto& s : st.splits) splits[s.name] = s;
  j["splits"] = splits;
  size_t total = 0, train_val = 0;
  std::vector<size_t> class_totals(st.num_classes, 0);
  for (const auto& s : st.splits) {
    total += s.size;
    if (s.name != "test") train_val += s.size;
    for (size_t c = 0; c < class_totals.size() && c < s.class_counts.size(); ++c) {
      class_totals[c] += s.class_counts[c];
    }
  }
  j["total_examples"] = total;
  j["train_val_examples"] = train_val;
  j["class_totals"] = class_totals;
  return dump_json(j, 2);  // class names are bytes (json_text.hpp)
}

}  // namespace gf
