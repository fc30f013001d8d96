// An experiment: its parts built from the configuration, and train, restart and resume into a
// run directory.
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "growformer/batch_sampler.hpp"
#include "growformer/distributed.hpp"
#include "growformer/json_text.hpp"
#include "growformer/parallel.hpp"
#include "growformer/precision.hpp"
#include "growformer/version.hpp"
#include "growformer/run_events.hpp"
#include "trainer_impl.hpp"

namespace gf {

namespace fs = std::filesystem;
using json = nlohmann::json;
using trainer_detail::check_memory;
using trainer_detail::config_dir_text;
using trainer_detail::kConfigDirLine;
using trainer_detail::read_resolved_config;
using trainer_detail::resolved_configuration;
using trainer_detail::text_crc;

namespace trainer_detail {
std::string plugin_of(const ConfigNode& top, const std::string& key) {
  ConfigNode node = top.child(key);
  if (!node.valid() || !node.is_map() || !node.has("plugin") || !node.child("plugin").is_scalar())
    return "";
  return node.child("plugin").as_string();
}
}  // namespace trainer_detail

namespace {
using trainer_detail::plugin_of;

// The head width of a block that a growth policy grows, when the config leaves d_k unset: that
// of a fixed 4-head model (d_model / 4), at most 64. The block's own default, d_model / heads,
// would make every head grown from one head as wide as the whole model. Written into CFG (so
// config.resolved.yaml and checkpoints carry it); returns the line that says so, "" when the
// config names the width, grows nothing, or its attention block has no per-head width.
std::string default_growing_width(ConfigNode& cfg, const Registry& registry) {
  const std::string growth = plugin_of(cfg, "growth");
  if (growth.empty() || growth == "none") return "";
  const ConfigNode model = cfg.child("model");
  if (!model.valid() || !model.is_map()) return "";
  const std::string attention = plugin_of(model, "attention");
  if (attention.empty() || model.child("attention").has("d_k")) return "";
  const ComponentInfo* info = registry.find(Kind::Attention, attention);
  if (!info) return "";  // named when the model is built
  bool has_dk = false, has_heads = false;
  for (const OptionSpec& o : info->spec.options) {
    has_dk = has_dk || o.name == "d_k";
    has_heads = has_heads || o.name == "heads";
  }
  if (!has_dk || !has_heads) return "";
  size_t d_model = ModelSettings{}.d_model;
  if (model.has("d_model") && model.child("d_model").is_scalar()) {
    const long long d = model.child("d_model").as_int();  // a bad value is named by the model
    if (d > 0) d_model = static_cast<size_t>(d);
  }
  const size_t width = std::min<size_t>(kGrowingHeadWidthMax, std::max<size_t>(1, d_model / 4));
  cfg.apply_override("model.attention.d_k=" + std::to_string(width));
  return "model.attention.d_k: " + std::to_string(width) +
         " (unset; a growing block's heads are as wide as a fixed 4-head model's, d_model / 4 "
         "at most " +
         std::to_string(kGrowingHeadWidthMax) +
         ", not d_model / heads; compare with fixed models of this d_k, or set d_k)";
}
}  // namespace

kernels::Precision apply_precision(const std::string& want, const Options& top, std::string* note) {
  using kernels::Precision;
  if (want == "float32") {
    kernels::set_product_precision(Precision::float32);
    return Precision::float32;
  }
  const std::string why = kernels::bf16_unavailable_reason();
  if (why.empty()) {
    kernels::set_product_precision(Precision::bf16);
    *note =
        "precision: bf16 (the products' inputs rounded to bf16, their sums in float32; "
        "weights, optimizer, softmax, norms and losses in float32)";
    return Precision::bf16;
  }
  if (want == "bf16")
    top.fail("precision",
             "bf16 needs AVX512_BF16 and the avx512 kernel set, and cannot run here: " + why +
                 "; use precision: float32, or bf16_if_available to fall back to "
                 "float32 where bf16 cannot run");
  kernels::set_product_precision(Precision::float32);
  *note = "precision: float32 (bf16_if_available fell back: " + why + ")";
  return Precision::float32;
}

Experiment::Experiment(ConfigNode cfg, const std::vector<std::string>& plugin_paths,
                       const std::string& data_record, const std::string& data_need,
                       ExperimentUse use)
    : cfg_(std::move(cfg)), registry_(std::make_unique<Registry>()), use_(use) {
  // plugins, a policy's import and the data load may take long or hang: Ctrl-C ends them
  AbandonableCall setup("the run's setup (its plugins, policies, data and model)");
  const Options top(cfg_, options(), "the configuration");
  ExperimentSettings es = ExperimentSettings::table().read(top);
  name_ = es.name;
  if (name_.empty() || name_.find('/') != std::string::npos)
    top.fail("name", "a run name must be non-empty and contain no '/'");
  seed_ = es.seed;
  threads_ = es.threads;
  size_t cores = std::max(1u, std::thread::hardware_concurrency());
  if (threads_ > cores) {      // more threads than cores only contend (results do not change)
    if (data_need != "check")  // a sweep checks every job's config: once per job would be noise
      std::cerr << "warning: threads: " << threads_ << " is more than the " << cores
                << " cores of this machine; using " << cores << "\n";
    threads_ = cores;
  }
  // threads: 0 = this machine's cores, shared among the processes of an MPI job running on it
  set_num_threads(threads_ ? threads_ : cores_per_process());
  std::string precision_note;
  precision_ = apply_precision(es.precision, top, &precision_note);
  if (!precision_note.empty()) notes_.push_back(precision_note);
  registry_->load_directories(Registry::search_path(plugin_paths));
  // a new run's defaults that depend on other parts (a checkpoint's config has them written)
  if (data_record.empty() && use_ == ExperimentUse::training) {
    const std::string width = default_growing_width(cfg_, *registry_);
    if (!width.empty()) {
      notes_.push_back(width);
      es = ExperimentSettings::table().read(Options(cfg_, options(), "the configuration"));
    }
  }

  // validate the cheap parts before the (possibly slow) data load
  build_training_parts(es);
  if (data_need == "check")
    check_without_data(es.data);
  else
    load_data(es.data, data_record, data_need);
  // the model's options, read once: for the memory check and the model
  const Options model_opts(es.model, Model::options(), "model");
  const ModelSettings model = ModelSettings::table().read(model_opts);
  if (data_need != "check") check_memory(model, data_, settings_.batch_size, data_need == "all");
  model_ = std::make_shared<Model>(model_opts, model, data_.vocab_size, data_.num_classes,
                                   *registry_, seed_);
  start_heads_ = trainer_detail::head_ids(*model_);
  cfg_.check_all_consumed();
  state_ = TrainerState(seed_);
}

void Experiment::build_training_parts(const ExperimentSettings& top) {
  Options to(top.train, TrainSettings::options(), "train");
  settings_ = TrainSettings(to);
  if (use_ == ExperimentUse::inference) {
    // the model needs none of them: a policy named by a checkpoint's config is never built
    for (const ConfigNode* n : {&top.optimizer, &top.growth, &top.pruning})
      if (n->valid()) n->mark_consumed();
    if (settings_.switch_at > 0 && settings_.switch_data.valid())
      settings_.switch_data.mark_consumed();
    return;
  }
  optimizer_ = registry_->create_optimizer(top.optimizer);
  schedule_.peak = optimizer_->peak_lr();
  schedule_.warmup = settings_.warmup;
  schedule_.steps = settings_.steps;
  schedule_.kind = settings_.schedule;
  schedule_.min_ratio = settings_.min_lr_ratio;
  growth_ = registry_->create_growth(top.growth);
  pruning_ = registry_->create_pruning(top.pruning);
}

Experiment::~Experiment() = default;

void Experiment::require_training(const char* what) const {
  if (use_ == ExperimentUse::training) return;
  throw ConfigError(std::string(what) +
                    ": this experiment was built for inference from a checkpoint (no growth or "
                    "pruning policy, no optimizer); continue a run with `growformer resume "
                    "RUN_DIR` (growformer.resume), or train a new one from its config");
}

Batch Experiment::make_batch(const std::vector<Example>& split,
                             const std::vector<size_t>& idx) const {
  return gf::make_batch(split, idx, model_->max_tokens(), data_.pad_id);
}

void Experiment::use_communicator(const RunFlags& flags) {
  comm_ = flags.comm ? flags.comm : &serial_communicator();
  if (comm_->size() > 1 && settings_.batch_size < comm_->size())
    throw ConfigError("train.batch_size: " + std::to_string(settings_.batch_size) +
                      " examples per step cannot be shared by " + std::to_string(comm_->size()) +
                      " processes (each needs at least one); use a batch of at least " +
                      std::to_string(comm_->size()) + " or fewer processes");
}

namespace {
// Every process of a data-parallel run must be given the same run directory (rank 0 alone
// writes it); otherwise each process stops naming its own, instead of ignoring it.
void check_same_on_every_process(Communicator& comm, const char* what, const std::string& value) {
  if (comm.size() == 1 || comm.all_equal(hash_name(value))) return;
  throw ConfigError(std::string(what) +
                    ": the processes of this run were given different ones "
                    "(rank " +
                    std::to_string(comm.rank()) + ": `" + printable(value.substr(0, 300)) +
                    "`); give every process the same");
}
}  // namespace

int Experiment::train(const RunFlags& flags) {
  require_training("train");
  use_communicator(flags);
  check_same_on_every_process(*comm_, "--run-dir", flags.run_dir);
  std::string root_dir;
  if (!comm_->root()) {
    // rank 0 picks and creates the run directory; the others learn its name
    comm_->broadcast(root_dir);
    return run_loop(RunDir(root_dir), 0, flags);
  }
  RunDir dir = RunDir::create(flags.run_dir, name_);
  dir.lock();
  std::string resolved =
      "# resolved configuration (overrides applied); growformer " GROWFORMER_VERSION "\n";
  resolved += std::string(kConfigDirLine) + config_dir_text(cfg_.base_dir()) + "\n" + cfg_.dump();
  dir.write(dir.resolved_config(), resolved);
  resolved_config_ = resolved;
  resolved_config_crc_ = text_crc(resolved);
  if (comm_->size() > 1) {
    root_dir = fs::absolute(dir.root()).string();  // a process may have another working folder
    comm_->broadcast(root_dir);
  }
  {
    nlohmann::json lock = nlohmann::json::array();
    for (auto& l : registry_->libraries())
      lock.push_back(
          {{"plugin", l.plugin}, {"version", l.version}, {"path", l.path}, {"checksum", l.sha256}});
    dir.write(dir.plugins_lock(), dump_json(lock, 2) + "\n");
  }
  dir.reset_logs();
  return run_loop(dir, 0, flags);
}

int Experiment::restart(const std::string& run_dir, const RunFlags& flags) {
  require_training("restart");
  use_communicator(flags);
  check_same_on_every_process(*comm_, "the run directory", run_dir);
  RunDir dir(run_dir);
  resolved_config_ = resolved_configuration(read_resolved_config(dir));
  resolved_config_crc_ = text_crc(resolved_config_);
  if (!comm_->root()) return run_loop(dir, 0, flags);
  dir.lock();
  fs::create_directories(dir.checkpoints());
  dir.reset_logs();
  if (!flags.quiet)
    std::cout << dir.root() << ": no checkpoint yet; starting the run again from step 0 with its "
              << "config.resolved.yaml\n";
  return run_loop(dir, 0, flags);
}

int Experiment::resume(const std::string& run_dir, const RunFlags& flags) {
  require_training("resume");
  use_communicator(flags);
  check_same_on_every_process(*comm_, "the run directory", run_dir);
  RunDir dir(run_dir);
  if (comm_->root()) dir.lock();
  std::string ck = dir.last_checkpoint();
  Checkpoint loaded = load_checkpoint(ck);
  // the run continues as it was configured: an edited resolved config would be silently ignored
  // (its structure record is the run's own writing, not configuration)
  resolved_config_ = resolved_configuration(read_resolved_config(dir));
  std::string actual = text_crc(resolved_config_);
  auto want = loaded.metadata.find("resolved_config_crc");
  if (want != loaded.metadata.end() && want->second != actual)
    throw RuntimeError(dir.resolved_config() +
                       ": changed since the run started (it no longer matches the checkpoint). "
                       "`resume` continues the run exactly as configured: restore the file, or "
                       "start a new run with `growformer train` on the edited configuration");
  resolved_config_crc_ = actual;
  long step = restore_training(loaded, ck, parts());
  // the record names this checkpoint's heads even if a kill came between it and the record
  record_structure(dir, step);
  if (comm_->root()) dir.rewind_logs(step);
  if (!flags.quiet && comm_->root())
    std::cout << "resuming " << dir.root() << " at step " << step << "\n";
  return run_loop(dir, step, flags);
}

}  // namespace gf
