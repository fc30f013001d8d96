// Private to the trainer's sources: the helpers the experiment, its memory check, its run files
// and the training loop share.
#pragma once

#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/data_parallel.hpp"
#include "growformer/dataset.hpp"
#include "growformer/model.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/trainer.hpp"

namespace gf {
namespace trainer_detail {

// ---- memory (trainer_memory.cpp)
// What this process may allocate: the smallest of physical memory, a cgroup's limit and the
// address-space limit (ulimit -v), with where it comes from (memory_limit()).
struct MemoryLimit {
  double bytes = 0;
  std::string from;
  bool address_space = false;  // ulimit -v: it counts the address space, not resident memory
};

MemoryLimit memory_limit();
// What this process holds now, as LIMIT counts it: its address space or its resident memory.
double process_memory(const MemoryLimit& limit);
// BYTES as "12 MiB" or "1.2 GiB".
std::string gib(double bytes);
// What growth adds to a training step of TOKENS tokens (the admission of a growth edit): one
// more head like block B's newest (its parameters, 16 bytes each: value, gradient, two
// optimizer moments; per token 2 x params / d_model floats, its projections, output and their
// gradients; measured on mha, the pool's peak with 1 and 9 heads, d_k 8 to 256, lengths 15 to
// 199: 1.3 to 1.5 x params / d_model per token; the fused attention keeps no score rows); one
// more MLP unit (2 d_model + 1 parameters, per token 4 floats: its pre-activation, activation
// and their gradients); one more block like the first (its parameters, and the step's largest
// tensor memory so far, PEAK, divided among the blocks: a new block starts from the model's
// starting structure, so this over-estimates once the first block has grown past it).
double head_step_bytes(const Model& model, size_t b, double tokens);
double mlp_unit_step_bytes(const Model& model, double tokens);
double block_step_bytes(const Model& model, double peak);
// The message of a run out of memory WHERE ("at step 12") in the run folder ROOT: the structure
// (heads, MLP units per block), what to lower, and the last checkpoint LAST ("" = none yet).
std::string out_of_memory_message(const Model& model, const std::string& where,
                                  const std::string& root, const std::string& last);
// Refuses, before the model is built, a run whose parameters or one step's activations cannot
// fit in memory (the estimate is written beside the definition).
void check_memory(const ModelSettings& model, const DataSplits& data, long batch, bool training);

// ---- run files (experiment_checkpoint.cpp)
// The line of config.resolved.yaml that names the config's folder.
constexpr const char* kConfigDirLine = "# config_dir: ";
// The config's folder as that line writes it (a JSON string: any bytes), and read back.
std::string config_dir_text(const std::string& dir);
std::string config_dir_of(const std::string& text);
// "crc32:xxxxxxxx" of TEXT.
std::string text_crc(const std::string& text);
// config.resolved.yaml as text (bounded); RuntimeError when missing or not a regular file.
std::string read_resolved_config(const RunDir& dir);
// The first line of the record config.resolved.yaml ends with once the run's heads differ from
// those its configuration builds (structure_record). YAML comments: the file still trains as
// the configuration it is, and a `heads` read from it is still the start.
constexpr const char* kStructureLine = "# structure:";
// TEXT (config.resolved.yaml) without its structure record: the configuration itself, which the
// run's checkpoints name by checksum (resolved_config_crc).
std::string resolved_configuration(const std::string& text);
// Each block's head ids, in the model's order of blocks and each block's order of heads.
std::vector<std::vector<int>> head_ids(const Model& model);
// The record of HEADS (head_ids) at STEP, the step of checkpoints/last.safetensors, with each
// block's MLP width (MLP_WIDTHS) when one differs from START_WIDTH, where every block starts.
std::string structure_record(const std::vector<std::vector<int>>& heads,
                             const std::vector<size_t>& mlp_widths, size_t start_width, long step);
// Whether one of WIDTHS differs from START_WIDTH (an MLP was edited).
bool mlp_grown(const std::vector<size_t>& widths, size_t start_width);

// ---- where the loop's time went (trainer_timing.cpp)
// Wall seconds per phase of the training loop since this process started (or resumed) the run.
struct PhaseTimes {
  double train = 0, probe = 0, policy = 0, validation = 0, checkpoint = 0;
  double twin = 0;  // the twin's training steps (GrowthPolicy::twin_without); its probes: probe
};
// CPU seconds of this process, all threads.
double process_cpu_seconds();
// What the structure decisions cost (the validation probes the policies asked for, their
// muted and twin evaluations included, the policies' checks and the twin's training steps)
// against the training steps' time:
// the console line, and decision_cost.json's text (FROM_STEP: where this process began).
std::string decision_cost_line(const PhaseTimes& t);
std::string decision_cost_json(const PhaseTimes& t, long from_step);
// The timing line (GROWFORMER_DP_TIMING=1: wall and CPU time per step and each phase's share)
// over STEPS steps that took TOTAL_S wall and CPU_S CPU seconds, when PER_PHASE; with several
// PROCESSES, the exchange's line from SYNC. "" when there is nothing to say.
std::string timing_lines(const PhaseTimes& t, long steps, double total_s, double cpu_s,
                         bool per_phase, int processes, const GradientSync& sync);

// ---- evaluation (experiment_eval.cpp)
// Majority-class accuracy on the first SEEN examples of TEST, the class counted on TRAIN.
double majority_class_accuracy(const std::vector<Example>& train, const std::vector<Example>& test,
                               size_t num_classes, size_t seen);
// The sample sd over every process's examples (COMM) of OTHER[i] - BASE[i]: a probe with heads
// muted, or the twin's, against the model's probe, example by example. NaN under 2 examples.
double paired_sd(const std::vector<double>& other, const std::vector<double>& base,
                 Communicator& comm);

// ---- the configuration (experiment.cpp)
// The plugin the component KEY of TOP names ("" when it names none).
std::string plugin_of(const ConfigNode& top, const std::string& key);
}  // namespace trainer_detail
}  // namespace gf
