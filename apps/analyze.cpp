// growformer analyze: per-block analysis of a trained checkpoint (each attention
// plugin reports what its mechanism claims: HKT levels, INCRT geometry, ...),
// plus the growth and pruning summary recorded in the run's events.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>

#include <growformer/json_text.hpp>
#include <growformer/linalg.hpp>
#include <growformer/run_events.hpp>
#include <growformer/trainer.hpp>
#include <growformer/trainer_state.hpp>

#include "commands.hpp"

namespace po = boost::program_options;
using json = nlohmann::json;
namespace fs = std::filesystem;

namespace gfapp {

namespace {
void print_json_table(const json& j, const std::string& indent) {
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i) {
      if (j[i].is_object() || j[i].is_array()) {
        std::cout << indent << "[" << i << "]\n";
        print_json_table(j[i], indent + "  ");
      } else {
        std::cout << indent << "[" << i << "] " << gf::dump_json(j[i]) << "\n";
      }
    }
    return;
  }
  for (auto it = j.begin(); it != j.end(); ++it) {
    const json& v = *it;
    std::string key = j.is_object() ? it.key() : "";
    if (v.is_object()) {
      std::cout << indent << key << ":\n";
      print_json_table(v, indent + "  ");
    } else if (v.is_array() && !v.empty() && v[0].is_object()) {
      std::cout << indent << key << ":\n";
      for (size_t i = 0; i < v.size(); ++i) {
        std::cout << indent << "  [" << i << "]\n";
        print_json_table(v[i], indent + "    ");
      }
    } else {
      std::cout << indent << key << ": " << gf::dump_json(v) << "\n";
    }
  }
}

/// The first BATCHES batches of SPLIT, padded to one length so that they stack.
std::vector<gf::Batch> probe_batches(gf::Experiment& ex, const std::vector<gf::Example>& split,
                                     long batches) {
  size_t B = static_cast<size_t>(ex.settings().batch_size);
  size_t max_t = 0;
  std::vector<gf::Batch> bs;
  for (long bi = 0; bi < batches; ++bi) {
    std::vector<size_t> idx;
    for (size_t i = bi * B; i < std::min(split.size(), (bi + 1) * B); ++i) idx.push_back(i);
    if (idx.empty()) break;
    bs.push_back(ex.make_batch(split, idx));
    max_t = std::max(max_t, bs.back().seq);
  }
  for (auto& b : bs) {
    if (b.seq == max_t) continue;
    gf::Batch nb = b;
    nb.seq = max_t;
    nb.ids.assign(b.batch * max_t, ex.data().pad_id);
    nb.valid.assign(b.batch * max_t, 0);
    for (size_t r = 0; r < b.batch; ++r)
      for (size_t t = 0; t < b.seq; ++t) {
        nb.ids[r * max_t + t] = b.ids[r * b.seq + t];
        nb.valid[r * max_t + t] = b.valid[r * b.seq + t];
      }
    b = nb;
  }
  return bs;
}

/// Each block's inputs on the probe batches, concatenated along the batch.
struct BlockProbes {
  std::vector<std::vector<float>> data;
  std::vector<std::vector<uint8_t>> valid;
  std::vector<size_t> T, B;

  BlockProbes(gf::Experiment& ex, const std::vector<gf::AttentionBlock*>& blocks,
              const std::vector<gf::Batch>& bs)
      : data(blocks.size()), valid(blocks.size()), T(blocks.size(), 0), B(blocks.size(), 0) {
    for (const auto& b : bs) {
      for (auto* blk : blocks) blk->set_capture(true);
      {
        gf::NoGradGuard ng;
        ex.model().forward(b, false, nullptr);
      }
      gf::clear_tape();
      for (size_t i = 0; i < blocks.size(); ++i) {
        gf::Probe probe = gf::make_probe(blocks[i]->captured_input(), b.valid, b.seq);
        const gf::Tensor& t = probe.input;
        T[i] = t.dim(1);
        B[i] += b.batch;
        data[i].insert(data[i].end(), t.data(), t.data() + t.size());
        valid[i].insert(valid[i].end(), probe.valid.begin(), probe.valid.end());
      }
    }
  }
};

/// Generic per-head geometry: output-map norm and the antisymmetric share of M = W_Q W_K^T.
json heads_json(const gf::AttentionBlock& block) {
  json heads = json::array();
  for (auto& h : block.heads()) {
    json hj = {{"id", h.id}, {"born_step", h.born_step}};
    if (h.w_o) {
      double n = 0;
      for (size_t k = 0; k < h.w_o->size(); ++k) n += double(h.w_o->value()[k]) * h.w_o->value()[k];
      hj["w_o_norm"] = std::sqrt(n);
    }
    const gf::Var* wq = h.head->w_q(0);
    const gf::Var* wk = h.head->w_k(0);
    if (wq && wk)
      hj["antisymmetric_share"] =
          gf::linalg::bilinear_stats(gf::linalg::bilinear_form(wq->value(), &wk->value()), false)
              .antisym_ratio;
    for (auto& [k, v] : h.head->diagnostics()) hj[k] = v;
    heads.push_back(hj);
  }
  return heads;
}

/// The growth and pruning summary from the run's EVENTS file.
json run_json(const fs::path& events) {
  json summary, grows = json::array(), prunes = json::array(), trace = json::array();
  for (const gf::RunEvent& e : gf::read_run_events(events.string())) {
    const std::string& type = e.event.type;
    if (type == "summary") {
      summary = {{"step", e.step}, {"type", type}};
      for (auto& [k, v] : e.event.numbers) summary[k] = v;
    }
    // INCRT's Lyapunov functional W_t at every growth check
    auto w = e.number("W_t");
    if (type == "check" && w && std::isfinite(*w))
      trace.push_back({e.step, *w, e.number("heads").value_or(0.0)});
    const std::string policy = e.text("policy");
    if (policy == "growth" && type != "check") grows.push_back(e.step);
    if (policy == "pruning" && type != "check") prunes.push_back(e.step);
  }
  json run = {{"events", events.string()}, {"growth_steps", grows}, {"prune_steps", prunes}};
  if (!trace.empty()) {
    // at most 40 evenly spaced points of [step, W_t, heads]
    json thin = json::array();
    size_t every = (trace.size() + 39) / 40;
    for (size_t k = 0; k < trace.size(); k += every) thin.push_back(trace[k]);
    if ((trace.size() - 1) % every) thin.push_back(trace.back());
    run["lyapunov_trace_step_W_heads"] = thin;
  }
  if (!summary.is_null()) run["summary"] = summary;
  return run;
}
}  // namespace

int cmd_analyze(const std::vector<std::string>& args) {
  po::options_description o("analyze options");
  std::string ck;
  std::vector<std::string> paths;
  long batches = 1;
  o.add_options()("checkpoint", po::value(&ck)->required(), "checkpoint (.safetensors)")(
      "data-batches", po::value(&batches), "validation batches used as probes (default 1)")(
      "json", "print JSON")("plugin-path", po::value(&paths)->composing(), "extra plugin folder")(
      kTrustOption, kTrustDoc);
  bool help;
  auto vm = parse("growformer analyze CHECKPOINT [--data-batches N] [--json]", o,
                  {{"checkpoint", 1}}, args, &help);
  if (help) return 0;
  if (batches < 1) throw UsageError("--data-batches must be >= 1");
  ck = gf::checkpoint_in(ck);  // a run directory: its best checkpoint, else its last
  gf::Checkpoint loaded = gf::load_checkpoint(ck);
  const gf::CheckpointPlugins plugins =
      gf::checkpoint_plugin_paths(loaded, ck, paths, vm.count(kTrustOption) > 0);
  std::unique_ptr<gf::Experiment> ex;
  try {
    ex = gf::inference_from_checkpoint(loaded, ck, plugins.paths);
  } catch (const gf::ConfigError& e) {
    gf::rethrow_with_missing_plugins(e, ck, plugins, "`--plugin-path DIR`",
                                     "`--trust-checkpoint-plugins`");
  }
  ex->load_weights(loaded, ck);
  const auto& split = ex->data().val.empty() ? ex->data().train : ex->data().val;
  auto blocks = ex->model().blocks();
  json out = {{"checkpoint", ck}, {"blocks", json::array()}};
  const std::vector<gf::Batch> bs = probe_batches(*ex, split, batches);
  BlockProbes probes(*ex, blocks, bs);
  for (size_t i = 0; i < blocks.size(); ++i) {
    json bj;
    bj["block"] = i;
    bj["describe"] = blocks[i]->describe();
    gf::Tensor probe;
    if (!probes.data[i].empty())
      probe = gf::Tensor::from({probes.B[i], probes.T[i], ex->model().d_model()}, probes.data[i]);
    bj["heads"] = heads_json(*blocks[i]);
    std::string a = blocks[i]->analyze_json(probe.defined() ? &probe : nullptr,
                                            probe.defined() ? &probes.valid[i] : nullptr);
    try {
      bj["analysis"] = json::parse(a.empty() ? "{}" : a);
    } catch (const std::exception& e) {
      throw gf::RuntimeError("block " + std::to_string(i) +
                             " returned malformed analysis: " + e.what());
    }
    out["blocks"].push_back(bj);
  }
  // growth and pruning summary from the run's events (checkpoints/ sits in the run directory)
  fs::path events = gf::RunDir::of_checkpoint(ck).events();
  if (fs::exists(events)) out["run"] = run_json(events);
  if (vm.count("json")) {
    std::cout << gf::dump_json(out, 2) << "\n";
    return 0;
  }
  std::cout << "analysis of " << ck << " (probe: " << bs.size() << " validation batch"
            << (bs.size() == 1 ? "" : "es") << ")\n";
  print_json_table(out["blocks"], "");
  if (out.contains("run")) {
    std::cout << "run:\n";
    print_json_table(out["run"], "  ");
  }
  return 0;
}

}  // namespace gfapp
