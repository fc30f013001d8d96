// growformer bench: training-step throughput of a config's model on random
// tokens (the shape of torch_ref.py), optionally beside the PyTorch reference,
// beside the same model with another attention block, and beside the same step
// in oneDNN primitives (--peer onednn; tools/onednn_peer, when built with oneDNN).
#include <sys/resource.h>

#include <algorithm>
#include <ctime>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include <growformer/autograd.hpp>
#include <growformer/blas.hpp>
#include <growformer/kernels.hpp>
#include <growformer/model.hpp>
#include <growformer/ops.hpp>
#include <growformer/parallel.hpp>
#include <growformer/registry.hpp>
#include <growformer/tensor.hpp>
#include <growformer/trainer.hpp>

#include "bench_report.hpp"
#include "commands.hpp"
#if GROWFORMER_ONEDNN_PEER
#include "onednn_peer.hpp"
#endif

namespace po = boost::program_options;
using json = nlohmann::json;

namespace gfapp {

namespace {

struct BenchResult {
  double median_ms = 0, min_ms = 0, max_ms = 0, tokens_per_s = 0;
  double matmul_gflop_per_step = 0;           // matrix-product work of one training step
  double eval_ms = 0, eval_tokens_per_s = 0;  // forward only, no tape
  double cpu_ms = 0;  // median CPU time of the process per training step (all threads)
  size_t params = 0;
  double final_loss = 0;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The bench's model: MODEL_NODE built with SEED and, with GROW_TO > 0, heads added by the
/// growth machinery (function-preserving, as INCRT grows) until every block has GROW_TO.
std::unique_ptr<gf::Model> make_bench_model(const gf::ConfigNode& model_node, gf::Registry& reg,
                                            size_t vocab, size_t classes, size_t seq, uint64_t seed,
                                            size_t grow_to) {
  auto model = std::make_unique<gf::Model>(model_node, vocab, classes, reg, seed);
  if (grow_to > 0) {
    gf::Rng grng(seed + 2, "bench.grow");
    gf::HeadInit init;
    init.preserve_function = true;
    for (gf::AttentionBlock* blk : model->blocks()) {
      if (!blk->can_edit_heads())
        throw gf::ConfigError("bench --grow-to: the block cannot add heads");
      for (size_t step = 1; blk->num_heads() < grow_to; ++step) blk->add_head(init, grng, step);
    }
  }
  if (seq > model->max_tokens())
    throw gf::ConfigError("bench: --seq " + std::to_string(seq) + " exceeds model.max_len");
  return model;
}

/// Four batches of random tokens (every token valid) and labels from SEED.
std::vector<gf::Batch> make_batches(size_t vocab, size_t classes, size_t batch, size_t seq,
                                    uint64_t seed) {
  gf::Rng rng(seed + 1, "bench.data");
  std::vector<gf::Batch> pool(4);
  for (auto& b : pool) {
    b.batch = batch;
    b.seq = seq;
    b.ids.resize(batch * seq);
    b.valid.assign(batch * seq, 1);
    b.labels.resize(batch);
    for (auto& id : b.ids) id = static_cast<int32_t>(rng.below(vocab));
    for (auto& l : b.labels) l = static_cast<int32_t>(rng.below(classes));
  }
  return pool;
}

/// One training step of growformer: forward, cross-entropy, backward, the optimizer. The loss.
float train_step(gf::Model& model, gf::Optimizer& opt, const gf::Batch& b) {
  auto params = model.named_parameters();
  for (auto& [n, p] : params) p.zero_grad();
  gf::Var logits = model.forward(b, true, nullptr);
  gf::Var loss = gf::ops::cross_entropy(logits, b.labels);
  gf::backward(loss);
  opt.step(params, 1e-3f);
  return loss.value()[0];
}

BenchResult run_bench(const gf::ConfigNode& model_node, const gf::ConfigNode& opt_node,
                      gf::Registry& reg, size_t vocab, size_t classes, size_t batch, size_t seq,
                      long warmup, long steps, uint64_t seed, size_t grow_to = 0) {
  std::unique_ptr<gf::Model> model_p =
      make_bench_model(model_node, reg, vocab, classes, seq, seed, grow_to);
  gf::Model& model = *model_p;
  auto opt = reg.create_optimizer(opt_node);
  const std::vector<gf::Batch> pool = make_batches(vocab, classes, batch, seq, seed);
  std::vector<double> times, cpu_times;
  auto process_cpu_ms = [] {
    timespec ts{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return 1e3 * static_cast<double>(ts.tv_sec) + 1e-6 * static_cast<double>(ts.tv_nsec);
  };
  float loss_v = 0;
  uint64_t flops0 = 0;
  for (long i = 0; i < warmup + steps; ++i) {
    if (i == warmup) flops0 = gf::matmul_flops();
    auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_ms();
    loss_v = train_step(model, *opt, pool[i % pool.size()]);
    double ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (i >= warmup) times.push_back(ms), cpu_times.push_back(process_cpu_ms() - c0);
  }
  BenchResult r;
  r.cpu_ms = median(cpu_times);
  r.matmul_gflop_per_step = static_cast<double>(gf::matmul_flops() - flops0) / steps / 1e9;
  // Evaluation throughput: the same batches, forward only, no tape.
  std::vector<double> etimes;
  {
    gf::NoGradGuard no_grad;
    for (long i = 0; i < warmup + steps; ++i) {
      auto t0 = std::chrono::steady_clock::now();
      gf::Var logits = model.forward(pool[i % pool.size()], false, nullptr);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (i >= warmup) etimes.push_back(ms);
    }
  }
  r.eval_ms = median(etimes);
  r.eval_tokens_per_s = batch * seq / (r.eval_ms / 1e3);
  r.median_ms = median(times);
  r.min_ms = *std::min_element(times.begin(), times.end());
  r.max_ms = *std::max_element(times.begin(), times.end());
  r.tokens_per_s = batch * seq / (r.median_ms / 1e3);
  r.params = model.num_parameters();
  r.final_loss = loss_v;
  return r;
}

json run_torch_ref(const std::string& script, const std::string& model, size_t vocab,
                   size_t classes, size_t seq, size_t d, size_t heads, size_t layers, size_t batch,
                   long steps, long warmup, size_t threads, const std::string& core,
                   size_t levels) {
  std::ostringstream cmd;
  cmd << "/usr/bin/python3 '" << script << "' --model " << model << " --vocab " << vocab
      << " --classes " << classes << " --seq " << seq << " --d " << d << " --heads " << heads
      << " --layers " << layers << " --batch " << batch << " --steps " << steps << " --warmup "
      << warmup << " --threads " << threads;
  if (model == "hkt") cmd << " --levels " << levels;
  if (!core.empty()) cmd << " --blas-core " << core;
  cmd << " 2>/dev/null";
  FILE* f = popen(cmd.str().c_str(), "r");
  if (!f) throw gf::RuntimeError("cannot run " + script);
  std::string out;
  char buf[4096];
  while (fgets(buf, sizeof buf, f)) out += buf;
  int rc = pclose(f);
  if (rc != 0 || out.empty())
    throw gf::RuntimeError("the PyTorch reference failed (" + cmd.str() +
                           "); is python3-torch installed?");
  return json::parse(out.substr(out.find('{')));
}

// The PyTorch build's BLAS and CPU capability (torch.__config__), e.g. "torch 1.13.1,
// BLAS_INFO=generic, CPU capability usage: AVX2"; empty when it cannot be asked.
std::string torch_build() {
  // show() has lines "  - CPU capability usage: AVX2" and "  - Build settings: BLAS_INFO=generic,
  // ..."
  FILE* f = popen(
      "/usr/bin/python3 -c \"import torch, re\n"
      "c = torch.__config__.show()\n"
      "b = re.search(r'BLAS_INFO=([^,\\\\s]+)', c)\n"
      "u = re.search(r'CPU capability usage: *(\\\\S+)', c)\n"
      "print('torch ' + torch.__version__ + (', BLAS_INFO=' + b.group(1) if b else '') + "
      "(', CPU capability ' + u.group(1) if u else ''))\" 2>/dev/null",
      "r");
  if (!f) return "";
  std::string out;
  char buf[512];
  while (fgets(buf, sizeof buf, f)) out += buf;
  pclose(f);
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

/// The command line of `bench`.
struct BenchArgs {
  std::string config, torch_ref, compare, peer;
  std::vector<std::string> sets, paths;
  long steps = 10, warmup = 3, repeats = 1;
  size_t vocab = 20, classes = 10, batch = 0, seq = 0, grow_to = 0;
  bool json = false, help = false;
};

/// The anchors a step's matrix throughput is read against, measured in the same run (GFLOP/s).
struct Peaks {
  double fma;                        // the multiply-add peak of the kernel set in use
  double sgemm;                      // OpenBLAS's SGEMM 1024^3
  gf::kernels::ElementRates rates;   // exp, GELU, in-cache passes, memory bandwidth
  double bf16;                       // vdpbf16ps's peak (0: bf16 cannot run here)
  gf::kernels::Precision precision;  // the products' (precision:)
  /// The peak the step's products are read against: bf16's under precision: bf16.
  double product() const { return precision == gf::kernels::Precision::bf16 ? bf16 : fma; }
};

/// The roofline of the step (the work COUNT, Model::step_work: the model's and each block's,
/// at the rates measured in this run) beside the measured step: each kind of work at its rate,
/// one after another.
json roofline_json(const gf::WorkCount& count, const Peaks& peaks, const BenchResult& r) {
  if (!count.work) return {{"counted", false}, {"why_not", count.why_not}};
  const gf::kernels::StepWork& w = *count.work;
  const gf::kernels::ElementRates& er = peaks.rates;
  const gf::kernels::Roofline rf = gf::kernels::roofline(w, er, peaks.product());
  return {{"counted", true},
          {"product_gflop", w.product_flops / 1e9},
          {"product_gflop_counted_by_kernels", r.matmul_gflop_per_step},
          {"exp_m", w.exp_elements / 1e6},
          {"gelu_m", w.gelu_elements / 1e6},
          {"gelu_grad_m", w.gelu_grad_elements / 1e6},
          {"max_m", w.max_elements / 1e6},
          {"softmax_grad_m", w.softmax_grad_elements / 1e6},
          {"add_m", w.add_elements / 1e6},
          {"memory_mb", w.memory_bytes / 1e6},
          {"fma_gflops", peaks.fma},
          {"product_gflops", peaks.product()},
          {"exp_g_per_s", er.exp / 1e9},
          {"gelu_g_per_s", er.gelu / 1e9},
          {"gelu_grad_g_per_s", er.gelu_grad / 1e9},
          {"max_g_per_s", er.max / 1e9},
          {"softmax_grad_g_per_s", er.softmax_grad / 1e9},
          {"add_g_per_s", er.add / 1e9},
          {"memory_gb_per_s", er.memory_bytes / 1e9},
          {"products_ms", 1e3 * rf.products_s},
          {"exp_gelu_ms", 1e3 * rf.exp_gelu_s},
          {"in_cache_ms", 1e3 * rf.in_cache_s},
          {"memory_ms", 1e3 * rf.memory_s},
          {"roofline_ms", 1e3 * rf.total_s()},
          {"percent_of_roofline", 100.0 * 1e3 * rf.total_s() / r.median_ms},
          // against the step's CPU time a thread (the rates are per CPU second): on a shared
          // machine, what the cycles the step got did
          {"percent_of_roofline_per_cpu_s",
           100.0 * 1e3 * rf.total_s() / (r.cpu_ms / static_cast<double>(gf::num_threads()))}};
}

/// The measurement of the main model as the JSON that `bench --json` prints.
json bench_json(const BenchArgs& a, const std::string& attn, size_t heads,
                const BenchResult& main_r, const Peaks& peaks) {
  const double peak = peaks.sgemm, fma_peak = peaks.fma;
  const double gflops = main_r.matmul_gflop_per_step / (main_r.median_ms / 1e3);
  // per second of CPU time (all threads): on a shared machine, what the cycles the step got did
  const double gflops_cpu = main_r.matmul_gflop_per_step / (main_r.cpu_ms / 1e3);
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return {{"tool", "growformer bench"},
          {"config", a.config},
          {"attention", attn},
          {"heads", heads},
          {"grow_to", a.grow_to},
          {"batch", a.batch},
          {"seq", a.seq},
          {"vocab", a.vocab},
          {"classes", a.classes},
          {"threads", gf::num_threads()},
          {"blas_kernels", gf::blas_selection_note()},
          {"blas_core", gf::blas_kernel_name()},
          {"cpu", gf::cpu_model_name()},
          {"simd", gf::kernels::simd_name()},
          {"isa", gf::kernels::simd_note()},
          {"fma_peak_gflops", fma_peak},
          {"percent_of_fma_peak", 100.0 * gflops / fma_peak},
          {"precision", gf::kernels::precision_name(peaks.precision)},
          {"bf16_kernels", gf::kernels::bf16_kernels_name()},
          {"bf16_peak_gflops", peaks.bf16},
          {"percent_of_product_peak", 100.0 * gflops / peaks.product()},
          {"sgemm_peak_gflops", peak},
          {"sgemm_percent_of_fma_peak", 100.0 * peak / fma_peak},
          {"matmul_gflop_per_step", main_r.matmul_gflop_per_step},
          {"matmul_gflops", gflops},
          {"cpu_ms_per_step_median", main_r.cpu_ms},
          {"matmul_gflops_per_cpu_s", gflops_cpu},
          {"percent_of_fma_peak_per_cpu_s", 100.0 * gflops_cpu / (fma_peak / gf::num_threads())},
          {"percent_of_sgemm_peak", 100.0 * gflops / peak},
          {"eval_ms_per_batch_median", main_r.eval_ms},
          {"eval_tokens_per_s", main_r.eval_tokens_per_s},
          {"eval_to_train_tokens_ratio", main_r.eval_tokens_per_s / main_r.tokens_per_s},
          {"steps", a.steps},
          {"warmup", a.warmup},
          {"repeats", a.repeats},
          {"ms_per_step_median", main_r.median_ms},
          {"ms_per_step_min", main_r.min_ms},
          {"ms_per_step_max", main_r.max_ms},
          {"steps_per_s", 1e3 / main_r.median_ms},
          {"tokens_per_s", main_r.tokens_per_s},
          {"params", main_r.params},
          {"peak_rss_mb", ru.ru_maxrss / 1024.0},
          {"final_loss", main_r.final_loss}};
}

/// The PyTorch reference's figures (medians TMS, and TM2 of its mha with TORCH_COMPARE; LAST:
/// its last report) beside the main run's.
void add_torch(json& out, const BenchResult& main_r, const std::vector<double>& tms,
               const std::vector<double>& tm2, const json& last, bool torch_compare) {
  double tmed = median(tms);
  out["torch_ms_per_step_median"] = tmed;
  out["torch_openblas_core"] = last.value("openblas_core", "");
  out["torch_build"] = torch_build();
  out["ratio_to_torch"] = main_r.median_ms / tmed;
  if (torch_compare) {
    out["torch_compare_ms_per_step_median"] = median(tm2);
    out["torch_ratio_hkt_to_mha"] = tmed / median(tm2);
    out["compare_ratio_to_torch"] = out["compare_ms_per_step_median"].get<double>() / median(tm2);
  }
}

BenchArgs parse_bench_args(const std::vector<std::string>& args) {
  po::options_description o("bench options");
  BenchArgs a;
  o.add_options()("config", po::value(&a.config)->required(), "YAML config (its model: section)")(
      "set", po::value(&a.sets)->composing(), "override KEY=VALUE")(
      "steps", po::value(&a.steps), "timed steps (default 10)")("warmup", po::value(&a.warmup),
                                                                "untimed steps first (default 3)")(
      "repeats", po::value(&a.repeats),
      "repeat the whole measurement (every model once per repeat, interleaved); report the median")(
      "vocab", po::value(&a.vocab), "vocabulary of the random tokens (default 20)")(
      "classes", po::value(&a.classes), "classes (default 10)")(
      "batch", po::value(&a.batch), "batch size (default train.batch_size or 32)")(
      "seq", po::value(&a.seq), "sequence length (default model.max_len)")(
      "compare-attention", po::value(&a.compare),
      "also time the same model with this attention plugin (e.g. mha) and report the ratio")(
      "torch-ref", po::value(&a.torch_ref),
      "path of torch_ref.py: run the PyTorch reference on the same shape in the same run")(
      "grow-to", po::value(&a.grow_to),
      "add heads to every block through the growth machinery (function-preserving) until it "
      "has this many, then time it; with --compare-attention, the same attention fixed at that "
      "many heads is the comparison")(
      "peer", po::value(&a.peer),
      "also time the same training step in another library, interleaved step by step with "
      "growformer's, once it is checked to compute growformer's loss and gradients: onednn "
      "(oneDNN primitives)")("json", "print JSON")("plugin-path", po::value(&a.paths)->composing(),
                                                   "extra plugin folder");
  auto vm = parse(
      "growformer bench CONFIG [--steps N] [--torch-ref PATH] [--compare-attention mha] "
      "[--peer onednn]",
      o, {{"config", 1}}, args, &a.help);
  if (a.help) return a;
  if (a.steps < 1 || a.warmup < 0 || a.repeats < 1)
    throw UsageError("--steps/--repeats must be >= 1");
  if (!a.peer.empty() && a.peer != "onednn")
    throw UsageError("--peer: unknown peer `" + a.peer + "` (the one peer is onednn)");
#if !GROWFORMER_ONEDNN_PEER
  if (!a.peer.empty())
    throw UsageError(
        "--peer onednn: this growformer was built without oneDNN; install it "
        "(apt-get install libdnnl-dev) and configure and build again (cmake -S . -B "
        "build && cmake --build build; -DGROWFORMER_ONEDNN=ON insists on it)");
#endif
  a.json = vm.count("json") > 0;
  return a;
}

/// What `bench` reads of the config. Threads, seed, train.batch_size, the model's settings and
/// the optimizer come through the tables the experiment, the training loop and the model
/// declare (defaults included), as in `train`; A's batch and seq are filled when not given.
struct BenchConfig {
  gf::ConfigNode model, optimizer;
  gf::ModelSettings model_settings;
  uint64_t seed = 1;
};

BenchConfig read_bench_config(BenchArgs& a) {
  gf::ConfigNode cfg = load_config(a.config, a.sets);
  BenchConfig out;
  out.model = cfg.child("model");
  if (!out.model.valid()) throw gf::ConfigError(a.config + ": no `model:` section");
  const gf::Options top_opts(cfg, gf::Experiment::options(), "");
  const gf::ExperimentSettings top = gf::ExperimentSettings::table().read(top_opts);
  gf::set_num_threads(top.threads);
  std::string note;  // bf16_if_available's fallback, said on stderr
  gf::apply_precision(top.precision, top_opts, &note);
  if (gf::kernels::product_precision() != gf::kernels::Precision::bf16 && !note.empty())
    std::cerr << note << "\n";
  out.seed = top.seed;
  out.model_settings =
      gf::ModelSettings::table().read(gf::Options(out.model, gf::Model::options(), "model"));
  if (a.batch == 0) {
    const gf::Options train(top.train, gf::TrainSettings::options(), "train");
    a.batch = static_cast<size_t>(gf::TrainSettings::table().read(train).batch_size);
  }
  if (a.seq == 0) a.seq = out.model_settings.max_len;
  out.optimizer = top.optimizer;
  return out;
}

/// The run of median time per step.
BenchResult median_run(std::vector<BenchResult> rs) {
  std::sort(rs.begin(), rs.end(),
            [](const BenchResult& a, const BenchResult& b) { return a.median_ms < b.median_ms; });
  return rs[rs.size() / 2];
}

#if GROWFORMER_ONEDNN_PEER
/// Milliseconds since T0.
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

/// `--peer onednn`: the bench's model and its step in oneDNN primitives (tools/onednn_peer),
/// built from the same parameters, checked against each other before anything is timed, then
/// timed step by step interleaved (growformer's step, the peer's, growformer's, ...).
class PeerBench {
 public:
  /// A model whose attention is not mha (hkt) is timed against the peer's step of the same
  /// model with mha blocks of HEADS heads: the gate checks that mha model against the peer, and
  /// the timed model is the bench's own (time only: the peer computes no other block). The
  /// peer's products take growformer's precision (`precision: bf16`: oneDNN's bf16 matmuls).
  PeerBench(const BenchArgs& a, const BenchConfig& bc, gf::Registry& reg, size_t heads) {
    if (a.peer.empty()) return;
    attention_ = bc.model_settings.attention.child("plugin").as_string();
    gf::ConfigNode gate_node = bc.model;
    size_t grow_to = a.grow_to;
    if (attention_ != "mha") {
      gf::ConfigNode cfg = load_config(a.config, a.sets);
      cfg.apply_override("model.attention={plugin: mha, heads: " +
                         std::to_string(a.grow_to > 0 ? a.grow_to : heads) + "}");
      gate_node = cfg.child("model");
      grow_to = 0;
    }
    model_ = make_bench_model(gate_node, reg, a.vocab, a.classes, a.seq, bc.seed, grow_to);
    opt_ = reg.create_optimizer(bc.optimizer);
    pool_ = make_batches(a.vocab, a.classes, a.batch, a.seq, bc.seed);
    peer_ = std::make_unique<gf_onednn::ModelPeer>(gate_node, bc.optimizer, reg, *model_, a.batch,
                                                   a.seq, gf::num_threads());
    gate_ = gf_onednn::run_gate(*model_, reg, bc.optimizer, *peer_, pool_[0], 1e-3f);
    if (!gate_.passed)
      throw gf::RuntimeError(
          "bench --peer onednn: the oneDNN step does not compute growformer's "
          "step, so neither is timed: " +
          gate_.summary());
    if (attention_ != "mha") {  // the bench's own model is the one timed
      model_ = make_bench_model(bc.model, reg, a.vocab, a.classes, a.seq, bc.seed, a.grow_to);
      opt_ = reg.create_optimizer(bc.optimizer);
    }
    tokens_ = static_cast<double>(a.batch * a.seq);
  }

  /// One repeat: WARMUP + STEPS steps of each, interleaved; the last STEPS are kept.
  void time(long warmup, long steps) {
    if (!peer_) return;
    for (long i = 0; i < warmup + steps; ++i) {
      const gf::Batch& b = pool_[i % pool_.size()];
      auto t0 = std::chrono::steady_clock::now();
      gf_loss_ = train_step(*model_, *opt_, b);
      const double a_ms = ms_since(t0);
      t0 = std::chrono::steady_clock::now();
      peer_loss_ = peer_->train_step(b, 1e-3f);
      const double b_ms = ms_since(t0);
      if (i >= warmup) gf_ms_.push_back(a_ms), peer_ms_.push_back(b_ms);
    }
  }

  /// The gate and the medians (over every timed step of every repeat) with their spread.
  void report(json& out) const {
    if (!peer_) return;
    const gf_onednn::GateResult& g = gate_;
    out["peer"] = "onednn";
    // the growformer step timed against the peer's mha step; the gate ran on mha
    out["onednn_growformer_attention"] = attention_;
    out["onednn_gate_attention"] = "mha";
    out["onednn_library"] = gf_onednn::MhaStep::library_note();
    out["onednn_threads"] = peer_->step().threads();
    out["onednn_precision"] = peer_->bf16() ? "bf16" : "float32";
    // its buffers stay allocated through the whole bench: peak_rss_mb includes them
    out["onednn_buffers_mb"] = static_cast<double>(peer_->step().bytes_allocated()) / (1 << 20);
    out["onednn_primitives"] = peer_->step().implementations();
    out["onednn_gate"] = {{"passed", g.passed},
                          {"tolerance", g.tolerance},
                          {"update_tolerance", g.update_tolerance},
                          {"loss_growformer", g.loss_growformer},
                          {"loss_onednn", g.loss_onednn},
                          {"loss_error", g.loss_error},
                          {"worst_gradient", g.worst_gradient.name},
                          {"worst_gradient_error", g.worst_gradient.error},
                          {"worst_update", g.worst_update.name},
                          {"worst_update_error", g.worst_update.error},
                          {"summary", g.summary()}};
    const auto [gmin, gmax] = std::minmax_element(gf_ms_.begin(), gf_ms_.end());
    const auto [pmin, pmax] = std::minmax_element(peer_ms_.begin(), peer_ms_.end());
    out["onednn_steps_timed"] = peer_ms_.size();
    out["onednn_ms_per_step_median"] = median(peer_ms_);
    out["onednn_ms_per_step_min"] = *pmin;
    out["onednn_ms_per_step_max"] = *pmax;
    out["onednn_tokens_per_s"] = tokens_ / (median(peer_ms_) / 1e3);
    out["onednn_growformer_ms_per_step_median"] = median(gf_ms_);
    out["onednn_growformer_ms_per_step_min"] = *gmin;
    out["onednn_growformer_ms_per_step_max"] = *gmax;
    out["ratio_to_onednn"] = median(gf_ms_) / median(peer_ms_);
    out["onednn_final_loss"] = peer_loss_;
    out["onednn_growformer_final_loss"] = gf_loss_;
  }

 private:
  std::unique_ptr<gf::Model> model_;
  std::shared_ptr<gf::Optimizer> opt_;
  std::vector<gf::Batch> pool_;
  std::unique_ptr<gf_onednn::ModelPeer> peer_;
  gf_onednn::GateResult gate_;
  std::string attention_;
  std::vector<double> gf_ms_, peer_ms_;
  float gf_loss_ = 0, peer_loss_ = 0;
  double tokens_ = 0;
};
#else
/// Built without oneDNN: parse_bench_args refuses --peer, so there is nothing to time.
class PeerBench {
 public:
  PeerBench(const BenchArgs&, const BenchConfig&, gf::Registry&, size_t) {}
  void time(long, long) {}
  void report(json&) const {}
};
#endif

/// The anchors, measured in this run, and the roofline's rates: the exp and GELU kernels and the
/// in-cache passes on a row in L1, memory bandwidth on arrays far past the caches, all threads
/// at once (about half a second).
Peaks measure_peaks() {
  return {gf::kernels::fma_peak_gflops(gf::num_threads()), gf::sgemm_peak_gflops(),
          gf::kernels::element_rates(gf::num_threads()),
          gf::kernels::bf16_peak_gflops(gf::num_threads()), gf::kernels::product_precision()};
}

/// The roofline of the step as timed (grown heads included) beside the main run R.
json step_roofline(const BenchArgs& a, const BenchConfig& bc, gf::Registry& reg, const Peaks& peaks,
                   const BenchResult& r) {
  const std::unique_ptr<gf::Model> timed =
      make_bench_model(bc.model, reg, a.vocab, a.classes, a.seq, bc.seed, a.grow_to);
  return roofline_json(timed->step_work(a.batch, a.seq), peaks, r);
}

}  // namespace

int cmd_bench(const std::vector<std::string>& cli) {
  BenchArgs a = parse_bench_args(cli);
  if (a.help) return 0;
  const std::string& config = a.config;
  const std::string &torch_ref = a.torch_ref, &compare = a.compare;
  const long steps = a.steps, warmup = a.warmup, repeats = a.repeats;
  const size_t vocab = a.vocab, classes = a.classes;
  const std::vector<std::string>& sets = a.sets;
  const BenchConfig bc = read_bench_config(a);
  const size_t batch = a.batch, seq = a.seq;
  const gf::ConfigNode &model_node = bc.model, &opt_node = bc.optimizer;
  const uint64_t seed = bc.seed;
  gf::Registry reg;
  reg.load_directories(gf::Registry::search_path(a.paths));
  // the shape facts come from the built model, never from re-reading its options
  const std::string attn = bc.model_settings.attention.child("plugin").as_string();
  const gf::Model shape(model_node, vocab, classes, reg, seed);
  const gf::AttentionBlock& block = *shape.blocks().at(0);
  const size_t heads = block.num_heads(), levels = block.score_levels();
  const bool hierarchical = levels > 1;
  gf::ConfigNode cmp;
  if (!compare.empty()) {
    cmp = load_config(config, sets);
    if (a.grow_to > 0)  // the grown model against the same block built with K heads
      cmp.apply_override("model.attention.heads=" + std::to_string(a.grow_to));
    else
      cmp.apply_override("model.attention={plugin: " + compare +
                         ", heads: " + std::to_string(heads) + "}");
  }
  const bool torch_compare = !compare.empty() && hierarchical;
  auto torch_run = [&](const std::string& kind) {
    return run_torch_ref(torch_ref, kind, vocab, classes, seq, shape.d_model(), heads,
                         shape.blocks().size(), batch, steps, warmup, gf::num_threads(),
                         gf::blas_kernel_name(), levels);
  };

  // Each repeat runs every model once, one after another, so load on a shared machine
  // hits all of them alike; each reported figure is the median over repeats.
  // The anchors, measured in this run: the multiply-add peak of the kernel set in use (a
  // register-only loop on every thread at once) and OpenBLAS's SGEMM with the kernels this
  // process loaded (OPENBLAS_CORETYPE, when set, chooses them).
  PeerBench peer(a, bc, reg, heads);  // --peer onednn: its gate runs before anything is timed
  const Peaks peaks = measure_peaks();
  std::vector<BenchResult> mains, cmps;
  std::vector<double> tms, tm2;
  json last;
  for (long r = 0; r < repeats; ++r) {
    mains.push_back(run_bench(model_node, opt_node, reg, vocab, classes, batch, seq, warmup, steps,
                              seed, a.grow_to));
    if (!compare.empty())
      cmps.push_back(run_bench(cmp.child("model"), opt_node, reg, vocab, classes, batch, seq,
                               warmup, steps, seed));
    if (!torch_ref.empty()) {
      last = torch_run(hierarchical ? "hkt" : "mha");
      tms.push_back(last.value("ms_per_step_median", 0.0));
      if (torch_compare) tm2.push_back(torch_run("mha").value("ms_per_step_median", 0.0));
    }
    peer.time(warmup, steps);
  }
  BenchResult main_r = median_run(mains);
  json out = bench_json(a, attn, heads, main_r, peaks);
  out["roofline"] = step_roofline(a, bc, reg, peaks, main_r);
  if (!compare.empty()) {
    BenchResult c = median_run(cmps);
    out["compare_attention"] = compare;
    out["compare_ms_per_step_median"] = c.median_ms;
    out["ratio_to_compare"] = main_r.median_ms / c.median_ms;
    if (hierarchical) out["analytic_score_cost_ratio"] = block.score_cost_ratio();
  }
  if (!torch_ref.empty()) add_torch(out, main_r, tms, tm2, last, torch_compare);
  peer.report(out);
  if (a.json) {
    std::cout << out.dump() << "\n";
    return 0;
  }
  print_bench(out, compare);
  return 0;
}

}  // namespace gfapp
