#include "growformer/trainer.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "growformer/blas.hpp"
#include "growformer/checkpoint.hpp"
#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"
#include "growformer/version.hpp"

namespace gf {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
std::atomic<bool> g_interrupted{false};
void on_signal(int) { g_interrupted = true; }
}  // namespace

void install_interrupt_handler() {
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

// ---------------------------------------------------------------------------
OptionSpecs TrainSettings::options() {
  return {
      {"steps", OptType::Int, "1000", "optimizer steps in the run", 1, 1e12},
      {"batch_size", OptType::Int, "32", "examples per step", 1, 1 << 20},
      {"warmup", OptType::Int, "100", "linear warm-up steps of the learning rate", 0, 1e12},
      {"schedule", OptType::String, "cosine", "learning-rate schedule after warm-up", -INFINITY,
       INFINITY, {"cosine", "linear", "constant"}},
      {"min_lr_ratio", OptType::Float, "0", "final learning rate as a fraction of the peak", 0, 1},
      {"clip", OptType::Float, "1.0", "global gradient-norm clipping (0 = off)", 0, 1e9},
      {"eval_every", OptType::Int, "200", "validate every N steps (0 = only at the end)", 0, 1e12},
      {"eval_batches", OptType::Int, "0", "batches per validation (0 = the whole split)", 0,
       1e12},
      {"log_every", OptType::Int, "20", "log training metrics every N steps", 1, 1e12},
      {"test_batches", OptType::Int, "0", "batches of the final test (0 = the whole split)", 0,
       1e12},
      {"check_every", OptType::Int, "50", "call growth and pruning every N steps", 1, 1e12},
      {"checkpoint_every", OptType::Int, "0",
       "write checkpoints/last every N steps (0 = at each validation)", 0, 1e12},
      {"test_on", OptType::String, "best", "model the final test uses", -INFINITY, INFINITY,
       {"best", "last"}},
  };
}

TrainSettings::TrainSettings(const Options& o)
    : steps(o.get_int("steps")),
      batch_size(o.get_int("batch_size")),
      warmup(o.get_int("warmup")),
      eval_every(o.get_int("eval_every")),
      log_every(o.get_int("log_every")),
      check_every(o.get_int("check_every")),
      checkpoint_every(o.get_int("checkpoint_every")),
      eval_batches(o.get_int("eval_batches")),
      test_batches(o.get_int("test_batches")),
      clip(o.get_float("clip")),
      min_lr_ratio(o.get_float("min_lr_ratio")),
      schedule(o.get_string("schedule")),
      test_on(o.get_string("test_on")) {}

OptionSpecs Experiment::options() {
  return {
      {"name", OptType::String, "run", "run name (the run directory is runs/<name>)"},
      {"seed", OptType::Int, "1", "seed of every random stream", 0, 9.2e18},
      {"threads", OptType::Int, "0", "worker threads (0 = all cores)", 0, 4096},
      {"data", OptType::Component, "", "the dataset plugin and its options", 0, 0, {}, true},
      {"model", OptType::Component, "", "the model: width, depth, attention plugin", 0, 0, {},
       true},
      {"optimizer", OptType::Component, "{plugin: adamw}", "the optimizer plugin"},
      {"train", OptType::Component, "{}", "training loop settings"},
      {"growth", OptType::Component, "{plugin: none}", "growth policy plugin"},
      {"pruning", OptType::Component, "{plugin: none}", "pruning rule plugin"},
  };
}

// ---------------------------------------------------------------------------
struct Experiment::State {
  long step = 0;
  Rng dropout_rng, growth_rng, pruning_rng;
  double best_val = -1;
  long best_step = -1;
  // training window since the last log line
  double win_loss = 0, win_correct = 0, win_count = 0, win_tokens = 0;
  // data order cache
  long perm_epoch = -1;
  std::vector<size_t> perm;
};

namespace {

class JsonlSink : public EventSink {
 public:
  std::ofstream* out = nullptr;
  long step = 0;
  void emit(const Event& e) override {
    if (!out) return;
    json j;
    j["step"] = step;
    j["type"] = e.type;
    if (e.block >= 0) j["block"] = e.block;
    if (e.head >= 0) j["head"] = e.head;
    for (auto& [k, v] : e.numbers) j[k] = std::isfinite(v) ? json(v) : json(nullptr);
    for (auto& [k, v] : e.strings) j[k] = v;
    for (auto& [k, v] : e.lists) j[k] = v;
    *out << j.dump() << "\n";
    out->flush();
  }
};

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  std::ostringstream o;
  if (t >= 3600) o << t / 3600 << "h" << (t % 3600) / 60 << "m";
  else if (t >= 60) o << t / 60 << "m" << t % 60 << "s";
  else o << t << "s";
  return o.str();
}

std::string heads_str(const std::vector<size_t>& h) {
  std::string s = "[";
  for (size_t i = 0; i < h.size(); ++i) s += (i ? "," : "") + std::to_string(h[i]);
  return s + "]";
}

// Keeps only the lines whose "step" is <= max_step (resume rewinds the logs to the checkpoint).
void truncate_jsonl(const std::string& path, long max_step) {
  std::ifstream in(path);
  if (!in) return;
  std::vector<std::string> keep;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    try {
      json j = json::parse(line);
      if (j.value("step", 0L) <= max_step && j.value("split", "") != "test") keep.push_back(line);
    } catch (...) {
      // a torn last line from a crash: drop it
    }
  }
  in.close();
  std::ofstream out(path, std::ios::trunc);
  for (auto& l : keep) out << l << "\n";
}

}  // namespace

Experiment::Experiment(ConfigNode cfg, const std::vector<std::string>& plugin_paths)
    : cfg_(std::move(cfg)), registry_(std::make_unique<Registry>()), st_(std::make_unique<State>()) {
  Options top(cfg_, options(), "the configuration");
  name_ = top.get_string("name");
  if (name_.empty() || name_.find('/') != std::string::npos)
    top.fail("name", "a run name must be non-empty and contain no '/'");
  seed_ = static_cast<uint64_t>(top.get_int("seed"));
  threads_ = static_cast<size_t>(top.get_int("threads"));
  set_num_threads(threads_);
  registry_->load_directories(Registry::search_path(plugin_paths));

  // validate the cheap parts before the (possibly slow) data load
  ConfigNode train_node = top.get_node("train");
  Options to(train_node, TrainSettings::options(), "train");
  settings_ = TrainSettings(to);
  ConfigNode opt_node = top.get_node("optimizer");
  optimizer_ = registry_->create_optimizer(opt_node);
  lr_ = opt_node.has("lr") ? opt_node.child("lr").as_float() : 1e-3;
  growth_ = registry_->create_growth(top.get_node("growth"));
  pruning_ = registry_->create_pruning(top.get_node("pruning"));

  auto dataset = registry_->create_dataset(top.get_node("data"), DatasetBuild{seed_});
  data_ = dataset->load();
  if (data_.train.empty()) throw ConfigError("data: the training split is empty");
  if (data_.num_classes < 2)
    throw ConfigError("data: the dataset has " + std::to_string(data_.num_classes) +
                      " class(es); classification needs at least 2");
  model_ = std::make_shared<Model>(top.get_node("model"), data_.vocab_size, data_.num_classes,
                                   *registry_, seed_);
  cfg_.check_all_consumed();

  st_->dropout_rng = Rng(seed_, "dropout");
  st_->growth_rng = Rng(seed_, "growth");
  st_->pruning_rng = Rng(seed_, "pruning");
}

Experiment::~Experiment() = default;

Batch Experiment::make_batch(const std::vector<Example>& split,
                             const std::vector<size_t>& idx) const {
  Batch b;
  b.batch = idx.size();
  size_t cap = model_->max_tokens();
  size_t T = 1;
  for (size_t i : idx) T = std::max(T, std::min(cap, split[i].tokens.size()));
  b.seq = T;
  b.ids.assign(b.batch * T, data_.pad_id);
  b.valid.assign(b.batch * T, 0);
  b.labels.resize(b.batch);
  for (size_t r = 0; r < idx.size(); ++r) {
    const Example& e = split[idx[r]];
    size_t n = std::min(T, e.tokens.size());
    for (size_t t = 0; t < n; ++t) {
      b.ids[r * T + t] = e.tokens[t];
      b.valid[r * T + t] = 1;
    }
    if (n == 0) b.valid[r * T] = 1;  // an empty sequence still pools one (pad) position
    b.labels[r] = e.label;
  }
  return b;
}

EvalResult Experiment::evaluate(const std::vector<Example>& split, long max_batches) {
  NoGradGuard ng;
  EvalResult r;
  size_t B = static_cast<size_t>(settings_.batch_size);
  double loss = 0;
  size_t correct = 0;
  long batches = 0;
  for (size_t start = 0; start < split.size(); start += B) {
    if (max_batches > 0 && batches >= max_batches) break;
    if (g_interrupted)
      throw RuntimeError("interrupted during evaluation; checkpoints written so far are intact");
    std::vector<size_t> idx;
    for (size_t i = start; i < std::min(split.size(), start + B); ++i) idx.push_back(i);
    Batch b = make_batch(split, idx);
    Var logits = model_->forward(b, false, nullptr);
    Var l = ops::cross_entropy(logits, b.labels);
    loss += static_cast<double>(l.value()[0]) * idx.size();
    size_t C = logits.dim(1);
    for (size_t i = 0; i < idx.size(); ++i) {
      const float* row = logits.value().data() + i * C;
      size_t arg = static_cast<size_t>(std::max_element(row, row + C) - row);
      correct += static_cast<int32_t>(arg) == b.labels[i];
    }
    r.examples += idx.size();
    batches++;
  }
  clear_tape();
  if (r.examples) {
    r.loss = loss / r.examples;
    r.accuracy = static_cast<double>(correct) / r.examples;
  }
  return r;
}

void Experiment::save(const std::string& path, long step) {
  Checkpoint ck;
  for (auto& [n, p] : model_->named_parameters()) ck.tensors["model." + n] = p.value();
  for (auto& [n, t] : optimizer_->state_tensors()) ck.tensors["optim." + n] = t;
  json opt_scalars = optimizer_->state_scalars();
  json arch = json::array();
  for (auto* b : model_->blocks()) arch.push_back(b->save_structure());
  State& s = *st_;
  json trainer = {{"step", step},
                  {"best_val", s.best_val},
                  {"best_step", s.best_step},
                  {"win", {s.win_loss, s.win_correct, s.win_count, s.win_tokens}},
                  {"rng",
                   {{s.dropout_rng.state(), s.dropout_rng.increment()},
                    {s.growth_rng.state(), s.growth_rng.increment()},
                    {s.pruning_rng.state(), s.pruning_rng.increment()}}}};
  ck.metadata["format"] = "growformer-checkpoint-1";
  ck.metadata["growformer_version"] = GROWFORMER_VERSION;
  ck.metadata["config"] = cfg_.dump();
  ck.metadata["config_dir"] = cfg_.base_dir();
  ck.metadata["architecture"] = arch.dump();
  ck.metadata["heads"] = json(model_->heads_per_block()).dump();
  ck.metadata["optimizer_scalars"] = opt_scalars.dump();
  ck.metadata["trainer"] = trainer.dump();
  ck.metadata["growth_state"] = growth_->save_state();
  ck.metadata["pruning_state"] = pruning_->save_state();
  save_checkpoint(path, ck);
}

void Experiment::load_weights(const std::string& path) { load_weights(load_checkpoint(path), path); }

void Experiment::load_weights(const Checkpoint& ck, const std::string& path) {
  auto it = ck.metadata.find("architecture");
  if (it == ck.metadata.end()) throw RuntimeError(path + ": not a growformer checkpoint (no architecture)");
  json arch;
  try {
    arch = json::parse(it->second);
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": corrupt architecture record: " + e.what());
  }
  auto blocks = model_->blocks();
  if (!arch.is_array() || arch.size() != blocks.size())
    throw RuntimeError(path + ": the checkpoint has " + std::to_string(arch.size()) +
                       " blocks but the model has " + std::to_string(blocks.size()));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i]->restore_structure(arch[i].get<std::string>());
  auto params = model_->named_parameters();
  for (auto& [n, p] : params) {
    auto t = ck.tensors.find("model." + n);
    if (t == ck.tensors.end())
      throw RuntimeError(path + ": parameter `" + n + "` is missing from the checkpoint");
    if (t->second.shape() != p.value().shape())
      throw RuntimeError(path + ": parameter `" + n + "` has shape " + shape_str(t->second.shape()) +
                         " in the checkpoint but " + shape_str(p.value().shape()) + " in the model");
    std::copy(t->second.data(), t->second.data() + t->second.size(), const_cast<Var&>(p).value().data());
  }
  for (auto& [k, t] : ck.tensors)
    if (k.rfind("model.", 0) == 0) {
      bool found = false;
      for (auto& [n, p] : params) found = found || ("model." + n) == k;
      if (!found) throw RuntimeError(path + ": checkpoint tensor `" + k + "` matches no parameter");
    }
}

long Experiment::restore(const std::string& path) {
  Checkpoint ck = load_checkpoint(path);
  load_weights(ck, path);
  std::map<std::string, Tensor> ot;
  for (auto& [k, t] : ck.tensors)
    if (k.rfind("optim.", 0) == 0) ot[k.substr(6)] = t;
  std::map<std::string, double> os;
  json tj;
  try {
    json osj = json::parse(ck.metadata.at("optimizer_scalars"));
    for (auto it = osj.begin(); it != osj.end(); ++it) os[it.key()] = it->get<double>();
    tj = json::parse(ck.metadata.at("trainer"));
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": corrupt trainer state in checkpoint: " + e.what());
  }
  optimizer_->load_state(ot, os);
  State& s = *st_;
  s.step = tj.at("step").get<long>();
  s.best_val = tj.at("best_val").get<double>();
  s.best_step = tj.at("best_step").get<long>();
  auto w = tj.at("win");
  s.win_loss = w[0];
  s.win_correct = w[1];
  s.win_count = w[2];
  s.win_tokens = w[3];
  auto r = tj.at("rng");
  s.dropout_rng.restore(r[0][0], r[0][1]);
  s.growth_rng.restore(r[1][0], r[1][1]);
  s.pruning_rng.restore(r[2][0], r[2][1]);
  growth_->load_state(ck.metadata["growth_state"]);
  pruning_->load_state(ck.metadata["pruning_state"]);
  return s.step;
}

int Experiment::train(const RunFlags& flags) {
  std::string dir = flags.run_dir;
  if (dir.empty()) {
    dir = (fs::path("runs") / name_).string();
    if (fs::exists(dir)) {
      for (int i = 2;; ++i) {
        std::string cand = dir + "-" + std::to_string(i);
        if (!fs::exists(cand)) {
          dir = cand;
          break;
        }
      }
    }
  } else if (fs::exists(dir) && !fs::is_empty(dir)) {
    throw ConfigError(dir + ": the run directory exists and is not empty (choose another "
                      "--run-dir, or `growformer resume " + dir + "`)");
  }
  fs::create_directories(fs::path(dir) / "checkpoints");
  {
    std::ofstream out(fs::path(dir) / "config.resolved.yaml");
    out << "# resolved configuration (overrides applied); growformer " GROWFORMER_VERSION "\n";
    out << cfg_.dump();
  }
  {
    json lock = json::array();
    for (auto& l : registry_->libraries())
      lock.push_back({{"plugin", l.plugin}, {"version", l.version}, {"path", l.path},
                      {"checksum", l.sha256}});
    std::ofstream out(fs::path(dir) / "plugins.lock");
    out << lock.dump(2) << "\n";
  }
  std::ofstream(fs::path(dir) / "metrics.jsonl", std::ios::trunc);
  std::ofstream(fs::path(dir) / "events.jsonl", std::ios::trunc);
  return run_loop(dir, 0, flags);
}

int Experiment::resume(const std::string& dir, const RunFlags& flags) {
  std::string ck = (fs::path(dir) / "checkpoints" / "last.safetensors").string();
  long step = restore(ck);
  truncate_jsonl((fs::path(dir) / "metrics.jsonl").string(), step);
  truncate_jsonl((fs::path(dir) / "events.jsonl").string(), step);
  if (!flags.quiet) std::cout << "resuming " << dir << " at step " << step << "\n";
  return run_loop(dir, step, flags);
}

int Experiment::run_loop(const std::string& dir, long start_step, const RunFlags& flags) {
  State& s = *st_;
  const TrainSettings& ts = settings_;
  std::ofstream metrics((fs::path(dir) / "metrics.jsonl").string(), std::ios::app);
  std::ofstream events_out((fs::path(dir) / "events.jsonl").string(), std::ios::app);
  JsonlSink sink;
  sink.out = &events_out;
  std::string last_ck = (fs::path(dir) / "checkpoints" / "last.safetensors").string();
  std::string best_ck = (fs::path(dir) / "checkpoints" / "best.safetensors").string();
  bool tty = isatty(2) && !flags.quiet;
  auto blocks = model_->blocks();
  size_t B = static_cast<size_t>(ts.batch_size);
  size_t N = data_.train.size();

  auto lr_at = [&](long step) {
    double peak = lr_;
    if (ts.warmup > 0 && step <= ts.warmup) return peak * step / ts.warmup;
    if (ts.schedule == "constant") return peak;
    double span = std::max<long>(1, ts.steps - ts.warmup);
    double p = std::min(1.0, static_cast<double>(step - ts.warmup) / span);
    double lo = peak * ts.min_lr_ratio;
    if (ts.schedule == "linear") return lo + (peak - lo) * (1 - p);
    return lo + (peak - lo) * 0.5 * (1 + std::cos(M_PI * p));
  };
  auto view_for = [&](long step, Rng* rng) {
    TrainView v;
    v.step = static_cast<size_t>(step);
    v.total_steps = static_cast<size_t>(ts.steps);
    v.rng = rng;
    v.events = &sink;
    for (size_t i = 0; i < blocks.size(); ++i) {
      BlockView bv;
      bv.index = i;
      bv.block = blocks[i];
      v.blocks.push_back(bv);
    }
    return v;
  };

  if (start_step == 0) {
    TrainView v = view_for(0, &s.growth_rng);
    growth_->on_start(v);
    TrainView vp = view_for(0, &s.pruning_rng);
    pruning_->on_start(vp);
  }
  bool need_probe = growth_->needs_probe() || pruning_->needs_probe();
  bool need_masks = growth_->needs_head_mask_grads() || pruning_->needs_head_mask_grads();
  for (auto* b : blocks) b->set_head_masks(need_masks);

  auto t0 = std::chrono::steady_clock::now();
  auto win_t0 = t0;
  auto last_draw = t0;
  long steps_this_run = 0;
  if (!flags.quiet)
    std::cout << "training " << name_ << ": " << ts.steps << " steps, batch " << B << ", "
              << N << " training examples, " << model_->num_parameters() << " parameters, "
              << num_threads() << " threads, BLAS " << blas_kernel_name() << "\n  run directory "
              << dir << "\n";

  for (long step = start_step + 1; step <= ts.steps; ++step) {
    sink.step = step;
    // ---- batch (a pure function of the step: resume sees the same data) ----
    std::vector<size_t> idx(B);
    for (size_t i = 0; i < B; ++i) {
      size_t sample = static_cast<size_t>(step - 1) * B + i;
      long epoch = static_cast<long>(sample / N);
      if (epoch != s.perm_epoch) {
        s.perm.resize(N);
        for (size_t j = 0; j < N; ++j) s.perm[j] = j;
        Rng r(seed_, "data_order." + std::to_string(epoch));
        for (size_t j = N; j > 1; --j) std::swap(s.perm[j - 1], s.perm[r.below(j)]);
        s.perm_epoch = epoch;
      }
      idx[i] = s.perm[sample % N];
    }
    Batch batch = make_batch(data_.train, idx);
    bool check = step % ts.check_every == 0;
    for (auto* b : blocks) b->set_capture(check && need_probe);

    // ---- forward / backward ----
    auto params = model_->named_parameters();
    for (auto& [n, p] : params) const_cast<Var&>(p).zero_grad();
    Var logits = model_->forward(batch, true, &s.dropout_rng);
    Var loss = ops::cross_entropy(logits, batch.labels);
    float lv = loss.value()[0];
    if (!std::isfinite(lv)) {
      clear_tape();
      Event e;
      e.type = "nan_loss";
      e.numbers = {{"lr", lr_at(step)}};
      sink.emit(e);
      if (tty) std::cerr << "\n";
      throw RuntimeError("non-finite loss (" + std::to_string(lv) + ") at step " +
                         std::to_string(step) + " of " + dir +
                         (fs::exists(last_ck) ? "; the last good checkpoint is " + last_ck
                                              : "; no checkpoint was written yet") +
                         ". Lower optimizer.lr or set train.clip");
    }
    backward(loss);
    if (need_masks) {
      TrainView v = view_for(step, &s.growth_rng);
      if (growth_->needs_head_mask_grads()) growth_->after_backward(v);
      TrainView vp = view_for(step, &s.pruning_rng);
      if (pruning_->needs_head_mask_grads()) pruning_->after_backward(vp);
    }
    if (ts.clip > 0) {
      double sq = 0;
      for (auto& [n, p] : params)
        if (p.grad().defined())
          for (size_t i = 0; i < p.grad().size(); ++i) sq += double(p.grad()[i]) * p.grad()[i];
      double norm = std::sqrt(sq);
      if (norm > ts.clip) {
        float f = static_cast<float>(ts.clip / norm);
        for (auto& [n, p] : params)
          if (p.grad().defined()) {
            Tensor& g = const_cast<Var&>(p).grad_buf();
            for (size_t i = 0; i < g.size(); ++i) g[i] *= f;
          }
      }
    }
    float lr = static_cast<float>(lr_at(step));
    optimizer_->step(params, lr);

    // ---- statistics ----
    size_t C = logits.dim(1);
    for (size_t i = 0; i < B; ++i) {
      const float* row = logits.value().data() + i * C;
      s.win_correct += static_cast<int32_t>(std::max_element(row, row + C) - row) == batch.labels[i];
    }
    s.win_loss += lv * B;
    s.win_count += B;
    for (auto v : batch.valid) s.win_tokens += v;

    // ---- growth and pruning ----
    if (check) {
      // block inputs of this batch with their masks, built once for every policy and view
      std::vector<Tensor> probes(blocks.size());
      std::vector<std::vector<uint8_t>> probe_valid(blocks.size());
      for (size_t i = 0; need_probe && i < blocks.size(); ++i) {
        probes[i] = blocks[i]->captured_input();
        if (!probes[i].defined()) continue;
        size_t T = probes[i].dim(1);
        probe_valid[i].assign(batch.batch * T, 1);
        size_t off = T - batch.seq;  // 1 with a CLS slot
        for (size_t r = 0; r < batch.batch; ++r)
          for (size_t t = 0; t < batch.seq; ++t)
            probe_valid[i][r * T + t + off] = batch.valid[r * batch.seq + t];
      }
      auto fill = [&](TrainView& v) {
        for (size_t i = 0; i < blocks.size(); ++i)
          if (probes[i].defined()) {
            v.blocks[i].probe = &probes[i];
            v.blocks[i].probe_valid = &probe_valid[i];
          }
      };
      std::vector<std::string> before;
      for (auto& [n, p] : params) before.push_back(n);
      for (int which = 0; which < 2; ++which) {
        GrowthPolicy& pol = which == 0 ? *growth_ : *pruning_;
        Rng* rng = which == 0 ? &s.growth_rng : &s.pruning_rng;
        TrainView v = view_for(step, rng);
        fill(v);
        std::vector<Edit> edits = pol.check(v);
        for (Edit& e : edits) {
          if (e.block >= blocks.size())
            throw RuntimeError("a growth or pruning policy asked to edit block " +
                               std::to_string(e.block) + " of " + std::to_string(blocks.size()));
          AttentionBlock* blk = blocks[e.block];
          int new_id = -1;
          Event ev = e.cause;
          ev.block = static_cast<long>(e.block);
          if (e.kind == Edit::Kind::AddHead) {
            new_id = blk->add_head(e.init, *rng, static_cast<size_t>(step));
            ev.type = ev.type.empty() ? "grow" : ev.type;
            ev.head = new_id;
          } else {
            blk->remove_head(e.head_id);
            ev.type = ev.type.empty() ? "prune" : ev.type;
            ev.head = e.head_id;
          }
          auto hpb = model_->heads_per_block();
          ev.lists.push_back({"heads", std::vector<double>(hpb.begin(), hpb.end())});
          ev.strings.push_back({"policy", which == 0 ? "growth" : "pruning"});
          sink.emit(ev);
          // both policies hear of every edit (growth must know which heads pruning removed)
          for (int other = 0; other < 2; ++other) {
            GrowthPolicy& p2 = other == 0 ? *growth_ : *pruning_;
            TrainView v2 = view_for(step, other == 0 ? &s.growth_rng : &s.pruning_rng);
            fill(v2);
            p2.edited(e, new_id, v2);
          }
        }
      }
      // optimizer state follows the parameters by name
      std::vector<std::string> after;
      for (auto& [n, p] : model_->named_parameters()) after.push_back(n);
      std::vector<std::string> removed;
      for (auto& n : before)
        if (std::find(after.begin(), after.end(), n) == after.end()) removed.push_back(n);
      if (!removed.empty()) optimizer_->forget(removed);
      for (auto* b : blocks) b->set_capture(false);
    }

    // ---- logging, validation, checkpoints ----
    auto now = std::chrono::steady_clock::now();
    double elapsed = std::chrono::duration<double>(now - t0).count();
    steps_this_run++;
    auto heads = model_->heads_per_block();
    // terminal: a progress bar redrawn at most ten times a second from the current window
    if (tty && (std::chrono::duration<double>(now - last_draw).count() > 0.1 || step == ts.steps)) {
      last_draw = now;
      double rate = steps_this_run / std::max(1e-9, elapsed);
      double frac = static_cast<double>(step) / ts.steps;
      int filled = static_cast<int>(frac * 24);
      char buf[256];
      std::snprintf(buf, sizeof buf, "[%s%s] %ld/%ld | loss %.4f | acc %.3f | %.2f steps/s | heads %s | ETA %s",
                    std::string(filled, '#').c_str(), std::string(24 - filled, '.').c_str(), step,
                    ts.steps, s.win_loss / std::max(1.0, s.win_count),
                    s.win_correct / std::max(1.0, s.win_count), rate, heads_str(heads).c_str(),
                    fmt_duration((ts.steps - step) / std::max(1e-9, rate)).c_str());
      std::cerr << "\r\033[K" << buf << std::flush;
    }
    if (step % ts.log_every == 0 || step == ts.steps) {
      double wdt = std::chrono::duration<double>(now - win_t0).count();
      json j = {{"step", step},
                {"split", "train"},
                {"loss", s.win_loss / std::max(1.0, s.win_count)},
                {"accuracy", s.win_correct / std::max(1.0, s.win_count)},
                {"lr", lr},
                {"heads", heads},
                {"tokens_per_s", wdt > 0 ? s.win_tokens / wdt : 0.0},
                {"elapsed_s", elapsed}};
      metrics << j.dump() << "\n";
      metrics.flush();
      double rate = steps_this_run / std::max(1e-9, elapsed);
      std::ostringstream line;
      line << "step " << step << "/" << ts.steps << " | loss " << std::fixed;
      line.precision(4);
      line << j["loss"].get<double>() << " | acc ";
      line.precision(3);
      line << j["accuracy"].get<double>() << " | ";
      line.precision(2);
      line << rate << " steps/s | heads " << heads_str(heads) << " | ETA "
           << fmt_duration((ts.steps - step) / std::max(1e-9, rate));
      if (!tty && !flags.quiet) std::cout << line.str() << "\n" << std::flush;
      s.win_loss = s.win_correct = s.win_count = s.win_tokens = 0;
      win_t0 = now;
    }
    bool do_eval = (ts.eval_every > 0 && step % ts.eval_every == 0) || step == ts.steps;
    if (do_eval && !data_.val.empty()) {
      EvalResult r = evaluate(data_.val, ts.eval_batches);
      json j = {{"step", step},         {"split", "val"},      {"loss", r.loss},
                {"accuracy", r.accuracy}, {"examples", r.examples}, {"heads", heads},
                {"tokens_per_s", nullptr}, {"elapsed_s", elapsed}};
      metrics << j.dump() << "\n";
      metrics.flush();
      if (tty) std::cerr << "\r\033[K";
      if (!flags.quiet)
        std::cout << "  val @ " << step << ": loss " << r.loss << ", accuracy " << r.accuracy
                  << "\n" << std::flush;
      if (r.accuracy > s.best_val) {
        s.best_val = r.accuracy;
        s.best_step = step;
        save(best_ck, step);
      }
    }
    bool do_ck = (ts.checkpoint_every > 0 ? step % ts.checkpoint_every == 0 : do_eval) ||
                 step == ts.steps;
    bool stop = g_interrupted || (flags.stop_after >= 0 && step >= flags.stop_after);
    if (do_ck || stop) save(last_ck, step);
    if (stop && step < ts.steps) {
      if (tty) std::cerr << "\n";
      std::cout << "stopped at step " << step << "; checkpoint " << last_ck
                << "\ncontinue with: growformer resume " << dir << "\n";
      return g_interrupted ? 130 : 0;
    }
  }
  if (tty) std::cerr << "\n";

  // ---- final test ----
  std::string which = "last";
  if (settings_.test_on == "best" && fs::exists(best_ck)) {
    load_weights(best_ck);
    which = "best (step " + std::to_string(s.best_step) + ")";
  }
  const auto& test = data_.test.empty() ? data_.val : data_.test;
  std::string test_name = data_.test.empty() ? "val" : "test";
  if (!test.empty()) {
    EvalResult r = evaluate(test, settings_.test_batches);
    std::vector<size_t> counts(data_.num_classes, 0);
    for (auto& e : data_.train) counts[e.label]++;
    size_t major = std::max_element(counts.begin(), counts.end()) - counts.begin();
    size_t hit = 0, seen = std::min(test.size(), r.examples);
    for (size_t k = 0; k < seen; ++k) hit += static_cast<size_t>(test[k].label) == major;
    double majority = static_cast<double>(hit) / std::max<size_t>(1, seen);
    json j = {{"step", ts.steps},       {"split", "test"},        {"loss", r.loss},
              {"accuracy", r.accuracy}, {"examples", r.examples}, {"heads", model_->heads_per_block()},
              {"model", which},         {"majority_class_accuracy", majority},
              {"evaluated_on", test_name}, {"tokens_per_s", nullptr},
              {"elapsed_s", std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()}};
    metrics << j.dump() << "\n";
    if (!flags.quiet) {
      std::cout << "test (" << test_name << " split, " << which << " model): accuracy " << r.accuracy
                << ", loss " << r.loss << "; majority class " << majority << "\n";
    }
  }
  json summary_g = growth_->summary(), summary_p = pruning_->summary();
  if (!summary_g.empty() || !summary_p.empty()) {
    Event e;
    e.type = "summary";
    for (auto& [k, v] : growth_->summary()) e.numbers.push_back({"growth." + k, v});
    for (auto& [k, v] : pruning_->summary()) e.numbers.push_back({"pruning." + k, v});
    sink.step = ts.steps;
    sink.emit(e);
  }
  if (!flags.quiet) std::cout << "run directory: " << dir << "\n";
  return 0;
}

std::unique_ptr<Experiment> experiment_from_checkpoint(const std::string& path,
                                                       const std::vector<std::string>& plugin_paths) {
  return experiment_from_checkpoint(load_checkpoint(path), path, plugin_paths);
}

std::unique_ptr<Experiment> experiment_from_checkpoint(const Checkpoint& ck, const std::string& path,
                                                       const std::vector<std::string>& plugin_paths) {
  auto it = ck.metadata.find("config");
  if (it == ck.metadata.end())
    throw RuntimeError(path + ": not a growformer checkpoint (no embedded config)");
  auto dir = ck.metadata.find("config_dir");
  // relative data paths resolve against the original config's folder
  ConfigNode cfg = ConfigNode::load_string(it->second, path + " (embedded config)",
                                           dir == ck.metadata.end() ? "" : dir->second);
  return std::make_unique<Experiment>(cfg, plugin_paths);
}

}  // namespace gf
