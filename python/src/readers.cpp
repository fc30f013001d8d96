// A run's logs (events.jsonl, metrics.jsonl) as lists of dicts, and a model's parameters and
// heads as numpy arrays: copies of the model's tensors (the model's buffers are pooled and
// replaced by every optimizer step, so a view into them would not stay valid).
#include <algorithm>
#include <filesystem>

#include <growformer/run_dir.hpp>
#include <growformer/run_events.hpp>

#include "module.hpp"

namespace fs = std::filesystem;

namespace gfpy {

py::array_t<float> to_numpy(const gf::Tensor& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  py::array_t<float> a(shape);
  std::copy(t.data(), t.data() + t.size(), a.mutable_data());
  return a;
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

namespace {
// The counts of a metrics line (the trainer writes them as JSON integers): examples, and heads
// per block; the rest are measurements.
bool is_count(const std::string& key) { return key == "examples" || key == "heads"; }
}  // namespace

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

}  // namespace gfpy
