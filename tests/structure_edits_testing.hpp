// Shared by the structural-edit suites (test_mlp_edits.cpp, test_depth_edits.cpp,
// test_structure_rules.cpp): a scripted policy, an event recorder, a small model of any block
// kind, a batch, its logits, the structure editor over a model with one policy, and runs from a
// config text that stop, resume and are compared bit for bit.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "growformer/autograd.hpp"
#include "growformer/checkpoint.hpp"
#include "growformer/config.hpp"
#include "growformer/model.hpp"
#include "growformer/optimizer.hpp"
#include "growformer/structure_editor.hpp"
#include "growformer/trainer.hpp"
#include "testing.hpp"

namespace gf_test {

/// Returns the edits it was given at its first check, then none; records what it was told.
struct OncePolicy : gf::GrowthPolicy {
  struct Heard {
    gf::Edit::Kind kind;
    size_t block;
    int id;  // edited()'s id: a new head's or first unit's (-1: none)
  };
  std::vector<gf::Edit> edits;
  std::vector<Heard> heard;
  std::vector<gf::Edit> check(const gf::TrainView&) override { return std::exchange(edits, {}); }
  void edited(const gf::Edit& e, int id, const gf::TrainView&) override {
    heard.push_back({e.kind, e.block, id});
  }
};

struct Recorder : gf::EventSink {
  std::vector<gf::Event> events;
  void emit(const gf::Event& e) override { events.push_back(e); }
};

/// An edit of KIND (InsertBlock, RemoveBlock) at block INDEX.
inline gf::Edit block_edit(gf::Edit::Kind kind, size_t index) {
  gf::Edit e;
  e.kind = kind;
  e.block = index;
  return e;
}

/// A model of LAYERS blocks of ATTENTION, d_model 8, MLP 16 units (12 tokens, 3 classes).
inline std::unique_ptr<gf::Model> make_model(const std::string& attention, size_t layers = 2) {
  return std::make_unique<gf::Model>(
      gf::ConfigNode::load_string("d_model: 8\nlayers: " + std::to_string(layers) +
                                      "\nmlp_ratio: 2\nmax_len: 16\nattention: " + attention,
                                  "model.yaml"),
      12, 3, registry(), 5);
}

/// B sequences of T random tokens (the last position padded), labels i % 3.
inline gf::Batch batch_of(size_t B, size_t T, uint64_t seed) {
  gf::Batch b;
  b.batch = B, b.seq = T;
  gf::Rng rng(seed, 1);
  for (size_t i = 0; i < B * T; ++i) b.ids.push_back(static_cast<int32_t>(rng.next_u64() % 12));
  b.valid.assign(B * T, 1);
  b.valid[B * T - 1] = 0;  // a padded position
  for (size_t i = 0; i < B; ++i) b.labels.push_back(static_cast<int32_t>(i % 3));
  return b;
}

inline gf::Tensor logits_of(gf::Model& m, const gf::Batch& b) {
  gf::NoGradGuard ng;
  return m.forward(b, false, nullptr).value().clone();
}

inline double max_abs_diff(const gf::Tensor& a, const gf::Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
  return d;
}

/// The block kinds with an MLP that this build has, as `attention:` values.
inline std::vector<std::string> block_kinds() {
  std::vector<std::string> out = {"{plugin: mha, heads: 2, head: {plugin: dot_product}}"};
  const bool hybrid = registry().find(gf::Kind::Head, "hybrid_conv");
  if (hybrid) out.push_back("{plugin: mha, heads: 2, head: {plugin: hybrid_conv}}");
  if (registry().find(gf::Kind::Attention, "hkt")) {
    out.push_back("{plugin: hkt, heads: 2, head: {plugin: dot_product}}");
    if (hybrid) out.push_back("{plugin: hkt, heads: 2, head: {plugin: hybrid_conv}}");
  }
  return out;
}

/// The editor over MODEL with one growth policy P (its stream: RNG).
inline gf::StructureEditor editor_of(gf::Model& model, OncePolicy& p, gf::Rng& rng,
                                     gf::EventSink* sink, gf::Optimizer* opt = nullptr) {
  gf::StructureEditor ed(model.blocks(), {{&p, &rng, "growth", "scripted"}}, sink, 100);
  ed.set_model(&model, opt);
  return ed;
}

/// An empty folder for run NAME of SUITE under the temporary directory (this process's own).
inline std::string fresh_dir(const std::string& suite, const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() /
      ("gf_test_" + suite + "_" + name + "_" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  return p.string();
}

/// The file at PATH as text ("" when it cannot be read).
inline std::string text_of(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// Trains the config YAML (FILE names it in messages) into DIR, quietly; STOP_AFTER >= 0 stops
/// with a checkpoint after that step. The exit status.
inline int train_yaml(const std::string& yaml, const std::string& file, const std::string& dir,
                      long stop_after = -1) {
  gf::Experiment ex(gf::ConfigNode::load_string(yaml, file), {GF_PLUGIN_DIR});
  gf::RunFlags f;
  f.run_dir = dir;
  f.quiet = true;
  f.stop_after = stop_after;
  return ex.train(f);
}

/// Resumes the run in DIR from its last checkpoint, quietly. The exit status.
inline int resume_run(const std::string& dir) {
  auto ex = gf::experiment_from_checkpoint(dir + "/checkpoints/last.safetensors", {GF_PLUGIN_DIR});
  gf::RunFlags f;
  f.quiet = true;
  return ex->resume(dir, f);
}

/// Checks that the last checkpoints of the runs in A and B hold the same tensors (model and
/// optimizer), bit for bit.
inline void check_same_last_checkpoints(const std::string& a, const std::string& b) {
  const gf::Checkpoint x = gf::load_checkpoint(a + "/checkpoints/last.safetensors");
  const gf::Checkpoint y = gf::load_checkpoint(b + "/checkpoints/last.safetensors");
  REQUIRE(x.tensors.size() == y.tensors.size());
  for (const auto& [k, t] : x.tensors) {
    INFO(k);
    REQUIRE(y.tensors.count(k));
    REQUIRE(t.shape() == y.tensors.at(k).shape());
    CHECK(std::equal(t.data(), t.data() + t.size(), y.tensors.at(k).data()));
  }
}

}  // namespace gf_test
