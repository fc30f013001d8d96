// One run of the training loop: the parts it drives and the named stages of a step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "growformer/batch_sampler.hpp"
#include "growformer/blas.hpp"
#include "growformer/checkpoint.hpp"
#include "growformer/data_parallel.hpp"
#include "growformer/interrupt.hpp"
#include "growformer/json_text.hpp"
#include "growformer/ops.hpp"
#include "growformer/parallel.hpp"
#include "growformer/precision.hpp"
#include "growformer/run_events.hpp"
#include "growformer/structure_editor.hpp"
#include "trainer_impl.hpp"
#include "trainer_twin.hpp"

namespace gf {

namespace fs = std::filesystem;
using json = nlohmann::json;
using trainer_detail::block_step_bytes;
using trainer_detail::gib;
using trainer_detail::head_step_bytes;
using trainer_detail::memory_limit;
using trainer_detail::MemoryLimit;
using trainer_detail::mlp_unit_step_bytes;
using trainer_detail::out_of_memory_message;
using trainer_detail::plugin_of;
using trainer_detail::process_memory;

// ---------------------------------------------------------------------------
// One run of the training loop: the parts it drives and the named stages of a step.
class Experiment::Loop {
 public:
  Loop(Experiment& ex, const RunDir& dir, const RunFlags& flags)
      : ex_(ex),
        ts_(ex.settings_),
        st_(ex.state_),
        dir_(dir),
        flags_(flags),
        comm_(*ex.comm_),
        report_(comm_.root() ? std::make_unique<Reporter>(dir, ts_.steps, flags.quiet)
                             : Reporter::muted(ts_.steps)),
        sync_(comm_),
        sampler_(ex.seed_, ex.data_.train.size(), static_cast<size_t>(ts_.batch_size),
                 static_cast<size_t>(ts_.bucket),
                 ts_.bucket > 0 ? padded_lengths(ex.data_.train, ex.model_->max_tokens())
                                : std::vector<size_t>{}),
        switch_sampler_(
            ex.seed_ ^ hash_name("train.switch"), std::max<size_t>(1, ex.switch_data_.train.size()),
            static_cast<size_t>(ts_.batch_size),
            ex.switch_data_.train.empty() ? 0 : static_cast<size_t>(ts_.bucket),
            ts_.bucket > 0 ? padded_lengths(ex.switch_data_.train, ex.model_->max_tokens())
                           : std::vector<size_t>{}),
        editor_(ex.model_->blocks(),
                {{ex.growth_.get(), &st_.growth_rng, "growth", plugin_of(ex.cfg_, "growth")},
                 {ex.pruning_.get(), &st_.pruning_rng, "pruning", plugin_of(ex.cfg_, "pruning")}},
                &report_->events(), static_cast<size_t>(ts_.steps)) {
    editor_.set_model(ex.model_.get(), ex.optimizer_.get());
    editor_.set_head_admission(
        [this](size_t block, size_t count) { return admit_heads(block, count); });
    editor_.set_growth_admission([this](const Edit& e) { return admit_growth(e); });
    need_probe_ = editor_.needs_probe();
    need_masks_ = editor_.needs_head_mask_grads();
    const char* timing = std::getenv("GROWFORMER_DP_TIMING");
    sync_.set_measure_wait(timing && std::string(timing) == "1");
    for (auto* b : editor_.blocks()) b->set_head_masks(need_masks_);
  }
  ~Loop() { set_interrupt_note(""); }  // the note names this run

  /// Trains from START_STEP + 1 to the end or a stop; returns the exit status: 130 after
  /// Ctrl-C or SIGTERM, at the end of a step or in an evaluation (validation, final test).
  int run(long start_step) {
    saved_step_ = start_step > 0 ? start_step : -1;  // a resume starts from its checkpoint
    note_checkpoint();
    try {
      return run_steps(start_step);
    } catch (const Interrupted&) {
      return stopped_in_evaluation();
    }
  }

  /// The message and status of an evaluation that Ctrl-C or SIGTERM stopped; the checkpoints
  /// written so far are kept as they are.
  int stopped_in_evaluation() {
    clear_tape();
    report_->end_bar();
    const std::string where =
        step_ < 0 ? "the final test (the " + std::to_string(ts_.steps) + " steps are done)"
                  : "an evaluation in step " + std::to_string(step_);
    if (flags_.announce_stop)
      report_->say("interrupted during " + where + "; " + saved_text() +
                       "\ncontinue with: growformer resume " + dir_.root() +
                       (step_ < 0 ? " (it runs the final test)" : "") + "\n",
                   true);
    return 130;
  }

  /// The last checkpoint this run has, in words.
  std::string saved_text() const {
    if (saved_step_ < 0) return "no checkpoint was written yet (a resume starts the run again)";
    return "the last checkpoint " + dir_.last_checkpoint() + " (step " +
           std::to_string(saved_step_) + ") is kept";
  }

  /// What the interrupt watchdog says about this run when it abandons a hung call.
  void note_checkpoint() const {
    set_interrupt_note("Of run " + dir_.root() + ", " + saved_text() + ": " +
                       (flags_.announce_stop
                            ? "continue with `growformer resume " + dir_.root() + "`."
                            : std::string("run the same command again to continue.")));
  }

  int run_steps(long start_step) {
    if (start_step == 0) editor_.on_start();
    if (start_step > 0)  // the twin the last checkpoint holds, if any
      twin_ = Experiment::Twin::restore(ex_, load_checkpoint(dir_.last_checkpoint()),
                                        dir_.last_checkpoint(), flags_.plugin_paths);
    verify_same_model(start_step, "at the start");
    report_->start(banner());
    auto t0 = std::chrono::steady_clock::now();
    double cpu0 = trainer_detail::process_cpu_seconds();
    for (long step = start_step + 1; step <= ts_.steps && !st_.stopped_early; ++step) {
      step_ = step;
      report_->begin_step(step);
      Batch whole = training_batch(step);
      Batch shard;
      size_t first_row = 0;
      if (comm_.size() > 1) {
        auto [first, last] = shard_range(whole.batch, comm_.rank(), comm_.size());
        shard = shard_rows(whole, first, last);
        first_row = first;
      }
      const Batch& batch = comm_.size() > 1 ? shard : whole;
      bool check = step % ts_.check_every == 0;
      capture_probes(check && need_probe_);
      NamedParams params = ex_.model_->named_parameters();
      const std::vector<HeadRef> sit_out = editor_.muted_in_training(static_cast<size_t>(step));
      mute(sit_out, "mute in training");
      const GrowthPolicy::ExampleMute part = editor_.muted_on_examples(static_cast<size_t>(step));
      mute_examples_in_model(*ex_.model_, part, static_cast<size_t>(step), first_row, batch.batch);
      Clock::time_point tp = Clock::now();
      Var logits = forward_backward(batch, whole.batch, params, step);
      if (!sit_out.empty() || !part.heads.empty()) unmute();
      float lr = update(params, step);
      phase_.train += since(tp);
      if (twin_) twin_step(batch, whole.batch, lr, step);
      if (check) check_structure(batch, whole, step);
      report_->end_step(step, st_.window, ex_.model_->heads_per_block());
      tp = Clock::now();
      log_and_validate(step, lr);
      phase_.validation += since(tp);
      if (validated_) stop_early_when_due(step);
      if (step == ts_.switch_at) switch_task(step);
      report_step(step, lr);
      tp = Clock::now();
      const bool stop = checkpoint_or_stop(step);
      phase_.checkpoint += since(tp);
      if (stop) return interrupted_status();
    }
    report_->end_bar();
    if (comm_.size() > 1 || sync_.measure_wait()) say_timing(start_step, t0, cpu0);
    step_ = -1;  // the final test
    final_test();
    RunOutcome& out = ex_.outcome_;
    out.best_val = st_.best_val;
    {
      AbandonableCall c("the growth or pruning policy in summary()");
      out.growth_summary = ex_.growth_->summary(editor_.view(st_.step, 0));
      out.pruning_summary = ex_.pruning_->summary(editor_.view(st_.step, 1));
      out.growth_columns = ex_.growth_->summary_columns();
      out.pruning_columns = ex_.pruning_->summary_columns();
    }
    report_->summary(st_.step, out.growth_summary, out.pruning_summary);
    write_decision_cost(start_step);
    report_->say("run directory: " + dir_.root() + "\nsee it: growformer report " + dir_.root() +
                 "\n");
    return 0;
  }

  /// std::bad_alloc out of run(): the tape and the pool's cache go back to the system, then one
  /// error names where memory ran out and the checkpoint a resume continues from (no checkpoint
  /// is written here: the model may be half-way through a step).
  [[noreturn]] void fail_out_of_memory() {
    clear_tape();
    pool_release_cached();
    report_->end_bar();
    std::string where = step_ > 0   ? "at step " + std::to_string(step_)
                        : step_ < 0 ? std::string("in the final test")
                                    : std::string("before the first step");
    const std::string last = dir_.last_checkpoint();
    std::error_code ec;
    throw RuntimeError(
        out_of_memory_message(*ex_.model_, where, dir_.root(), fs::exists(last, ec) ? last : ""));
  }

 private:
  std::string banner() const {
    std::ostringstream o;
    o << "training " << ex_.name_ << ": " << ts_.steps << " steps, batch " << ts_.batch_size << ", "
      << ex_.data_.train.size() << " training examples, " << ex_.model_->num_parameters()
      << " parameters, " << num_threads() << " threads, BLAS " << blas_kernel_name();
    if (comm_.size() > 1)
      o << "\n  data-parallel: " << comm_.size() << " processes (" << comm_.backend() << "), "
        << shard_range(ts_.batch_size, 0, comm_.size()).second << " examples each per step";
    for (const std::string& n : ex_.notes_) o << "\n  " << n;
    o << "\n  run directory " << dir_.root() << "\n";
    return o.str();
  }

  /// Whether STEP trains on train.switch's data (after the switch step).
  bool switched(long step) const { return ts_.switch_at > 0 && step > ts_.switch_at; }
  const DataSplits& task(long step) const { return switched(step) ? ex_.switch_data_ : ex_.data_; }

  /// The training batch of STEP (a pure function of the seed and the step, on either task).
  Batch training_batch(long step) {
    if (switched(step))
      return ex_.make_batch(ex_.switch_data_.train, switch_sampler_.indices(step - ts_.switch_at));
    return ex_.make_batch(ex_.data_.train, sampler_.indices(step));
  }

  /// After the last step of the first task: a `task_switch` event, and the best validation
  /// starts again (the best model is then the best on the second task).
  void switch_task(long step) {
    Event e;
    e.type = "task_switch";
    const DataSplits& next = ex_.switch_data_;
    e.numbers = {{"train_examples", static_cast<double>(next.train.size())},
                 {"val_examples", static_cast<double>(next.val.size())},
                 {"best_val_before", st_.best_val}};
    e.strings = {{"data", ex_.switch_dataset_->describe()}};
    report_->events().emit(e);
    report_->say("task switch after step " + std::to_string(step) + ": training on " +
                 ex_.switch_dataset_->describe() + "\n");
    st_.best_val = -1;
    st_.best_step = -1;
    st_.val_step = -1;  // the latest validation was the first task's
  }

  void capture_probes(bool on) {
    for (auto* b : editor_.blocks()) b->set_capture(on);
  }

  /// Zeroes the gradients, runs the forward and backward passes, adds the step to the
  /// training window; RuntimeError (after a "nan_loss" event) on a non-finite loss.
  /// With several processes, BATCH is this process's shard of a global batch of GLOBAL rows:
  /// the gradients, head-mask gradients and the step's counts are summed across processes
  /// (each shard's mean-loss gradient weighted by its share), so every process holds the
  /// gradient of the global batch's mean loss before the update.
  Var forward_backward(const Batch& batch, size_t global, NamedParams& params, long step) {
    for (auto& [n, p] : params) p.zero_grad();
    Var logits = ex_.model_->forward(batch, true, &st_.dropout_rng);
    Var loss = ops::cross_entropy(logits, batch.labels);
    float lv = loss.value()[0];
    if (comm_.size() == 1) {
      if (!std::isfinite(lv)) fail_non_finite(lv, step);
      backward(loss);
      if (need_masks_) editor_.after_backward(static_cast<size_t>(step));
      st_.window.add(logits, batch, lv);
      st_.since_check.add(logits, batch, lv);
      if (flags_.on_step) since_report_.add(logits, batch, lv);
      return logits;
    }
    backward(loss);
    TrainWindow local;
    local.add(logits, batch, lv);
    std::vector<double> sums = {local.loss, local.correct, local.count, local.tokens,
                                interrupted() ? 1.0 : 0.0};
    std::vector<Var> masks;
    if (need_masks_)
      for (AttentionBlock* b : editor_.blocks())
        for (Var& m : b->head_mask_vars()) masks.push_back(m);
    sync_.reduce(params, masks, static_cast<double>(batch.batch) / static_cast<double>(global),
                 sums);
    TrainWindow all;
    all.loss = sums[0];
    all.correct = sums[1];
    all.count = sums[2];
    all.tokens = sums[3];
    interrupt_requested_ = sums[4] > 0;
    double mean = all.loss / std::max(1.0, all.count);
    if (!std::isfinite(mean)) fail_non_finite(static_cast<float>(mean), step);
    if (need_masks_) editor_.after_backward(static_cast<size_t>(step));
    st_.window.merge(all);
    st_.since_check.merge(all);
    if (flags_.on_step) since_report_.merge(all);
    return logits;
  }

  /// Stops every process with a clear message when their models differ (names, shapes or
  /// values of the parameters): after a structure edit every process must hold the same model.
  void verify_same_model(long step, const char* when) {
    if (comm_.size() == 1) return;
    if (comm_.all_equal(parameters_hash(ex_.model_->named_parameters(), true))) return;
    std::string last = dir_.last_checkpoint();
    throw RuntimeError("the " + std::to_string(comm_.size()) +
                       " processes of this data-parallel run hold different models " + when +
                       " (step " + std::to_string(step) +
                       "): their parameter names, shapes or values differ, so their growth or "
                       "pruning decisions diverged. The run stops here" +
                       (fs::exists(last) ? "; the last checkpoint is " + last : "") + "");
  }

  /// What the structure decisions cost since this process started the run (or resumed it),
  /// said in a line and written (rank 0) to decision_cost.json, not to events.jsonl, whose
  /// every line a resumed run repeats exactly. Nothing when no policy can change the structure.
  void write_decision_cost(long start_step) {
    auto none = [this](const char* key) {
      const std::string p = plugin_of(ex_.cfg_, key);
      return p.empty() || p == "none";
    };
    if ((none("growth") && none("pruning")) || !(phase_.train > 0)) return;
    report_->say(trainer_detail::decision_cost_line(phase_));
    if (comm_.root())
      dir_.write(dir_.decision_cost(), trainer_detail::decision_cost_json(phase_, start_step));
  }

  /// Rank 0's line on where the time of the steps went (GROWFORMER_DP_TIMING=1, or several
  /// processes).
  void say_timing(long start_step, std::chrono::steady_clock::time_point t0, double cpu0) {
    const long steps = ts_.steps - start_step;
    if (steps <= 0) return;
    const double total = since(t0);
    const std::string text = trainer_detail::timing_lines(
        phase_, steps, total, trainer_detail::process_cpu_seconds() - cpu0, sync_.measure_wait(),
        comm_.size(), sync_);
    if (!text.empty()) report_->say(text);
  }

  [[noreturn]] void fail_non_finite(float lv, long step) {
    clear_tape();
    Event e;
    e.type = "nan_loss";
    e.numbers = {{"lr", ex_.schedule_.at(step)}};
    report_->events().emit(e);
    report_->end_bar();
    std::string last = dir_.last_checkpoint();
    throw RuntimeError("non-finite loss (" + std::to_string(lv) + ") at step " +
                       std::to_string(step) + " of " + dir_.root() +
                       (fs::exists(last) ? "; the last good checkpoint is " + last
                                         : "; no checkpoint was written yet") +
                       ". Lower optimizer.lr or set train.clip");
  }

  /// Clips the gradients and takes one optimizer step at the schedule's rate; returns the rate.
  float update(NamedParams& params, long step) {
    clip_gradients(params, ts_.clip);
    float lr = static_cast<float>(ex_.schedule_.at(step));
    ex_.optimizer_->step(params, lr);
    return lr;
  }

  /// Growth and pruning on this step's probes; the edits are applied before the next step.
  /// With several processes the probes are the whole batch's (every shard's rows gathered),
  /// so every process's policies see the same statistics and make the same edits; the models
  /// are then compared across processes.
  void check_structure(const Batch& batch, const Batch& whole, long step) {
    std::vector<Probe> probes(editor_.blocks().size());
    for (size_t i = 0; need_probe_ && i < editor_.blocks().size(); ++i) {
      Tensor in = editor_.blocks()[i]->captured_input();
      if (comm_.size() > 1 && in.defined())
        in = gather_rows(comm_, in, batch.row_offset, whole.batch);
      probes[i] = make_probe(in, whole.valid, whole.seq);
    }
    capture_probes(false);
    Clock::time_point tp = Clock::now();
    RunMetrics metrics = run_metrics(step);
    phase_.probe += since(tp);
    tp = Clock::now();
    editor_.set_probes(&probes);
    editor_.set_metrics(&metrics);
    admitted_bytes_ = 0;
    const trainer_detail::ModelShape before = trainer_detail::shape_of(*ex_.model_);
    editor_.check(static_cast<size_t>(step));
    phase_.policy += since(tp);
    tp = Clock::now();
    Experiment::Twin::after_check(twin_, ex_, before,
                                  editor_.twin_without(static_cast<size_t>(step)), step,
                                  flags_.plugin_paths, report_->events());
    phase_.twin += since(tp);
    editor_.set_probes(nullptr);
    editor_.set_metrics(nullptr);
    st_.since_check.clear();
    verify_same_model(step, "after the structure check");
  }

  /// Whether a step still fits in memory with COUNT more heads in block B: "" when it does (the
  /// heads are added), else why not (the growth is refused with one event, training goes on).
  std::string admit_heads(size_t b, size_t count) {
    const std::string what = count == 1 ? "one more head" : std::to_string(count) + " more heads";
    return admit_bytes(head_bytes(b) * static_cast<double>(count),
                       what + " in block " + std::to_string(b),
                       count == 1 ? "the head" : "the heads",
                       std::to_string(editor_.blocks()[b]->num_heads()) + " heads there",
                       "lower train.batch_size or max_heads",
                       count == 1 ? "a head is" : std::to_string(count) + " heads are");
  }

  /// The same for MLP units and blocks (StructureEditor::GrowthAdmission).
  std::string admit_growth(const Edit& e) {
    if (e.kind == Edit::Kind::AddMlpUnits) {
      const std::vector<size_t> widths = ex_.model_->mlp_widths();
      const size_t width = e.block < widths.size() ? widths[e.block] : 0;
      return admit_bytes(
          unit_bytes() * static_cast<double>(e.units),
          std::to_string(e.units) + " more MLP units in block " + std::to_string(e.block),
          "the units", std::to_string(width) + " units there",
          "lower train.batch_size or the policy's most units",
          std::to_string(e.units) + " MLP units are");
    }
    const size_t blocks = editor_.blocks().size();
    return admit_bytes(block_bytes(), "one more block (index " + std::to_string(e.block) + ")",
                       "the block", std::to_string(blocks) + " blocks",
                       "lower train.batch_size or the policy's most blocks", "a block is");
  }

  /// Whether a step still fits in memory with BYTES more (WHAT, the growth asked for; THEM, its
  /// parts in the message; NOW, the structure kept when refused; FIX, what the user can do;
  /// REFUSED, the console's subject). What the process holds besides tensors, the largest
  /// tensor memory a step has taken so far, the growth admitted earlier in this check, and the
  /// new parameters (with gradients and optimizer state) and activations, against the limit the
  /// up-front estimate used. Every process of a data-parallel run decides alike.
  std::string admit_bytes(double bytes, const std::string& what, const std::string& them,
                          const std::string& now, const std::string& fix,
                          const std::string& refused) {
    const MemoryLimit lim = memory_limit();
    const PoolStats ps = pool_stats();
    const double other =
        std::max(0.0, process_memory(lim) - static_cast<double>(ps.bytes_live + ps.bytes_cached));
    // The pool's cached buffers count beside the step's peak: a step with one more head asks for
    // larger tensors than the cached ones, which then stay mapped beside the new ones (measured:
    // counting the peak alone let a 350 MB address space run out one head after the last
    // admitted one).
    const double need = other + static_cast<double>(ps.bytes_cached) +
                        static_cast<double>(ps.bytes_peak) + admitted_bytes_ + bytes;
    const std::string kept =
        "training goes on with " + now + " (" + fix + ", or give the process more memory)";
    double over = need > lim.bytes ? 1.0 : 0.0;
    if (comm_.size() > 1) {  // every process decides alike: growth everywhere or nowhere
      comm_.allreduce_sum(&over, 1);
      if (over > 0 && need <= lim.bytes)
        return "another process of this data-parallel run has no memory for " + what + "; " + kept;
    }
    if (over == 0) {
      admitted_bytes_ += bytes;
      return "";
    }
    const std::string why = "a training step with " + what + " would need about " + gib(need) +
                            " (" + gib(bytes) + " for " + them + "), more than the " +
                            gib(lim.bytes) + " of " + lim.from + "; " + kept;
    if (!said_refused_)  // once on the console; every refusal is a `growth_refused` event
      report_->say("\nstep " + std::to_string(step_) + ": " + refused + " refused: " + why + "\n");
    said_refused_ = true;
    return why;
  }

  /// Tokens in a training batch at the longest length the data holds.
  double batch_tokens() const {
    const double length = static_cast<double>(
        std::min(ex_.model_->max_tokens(), std::max<size_t>(1, ex_.data_.max_len)));
    return static_cast<double>(ts_.batch_size) * length;
  }
  double head_bytes(size_t b) const { return head_step_bytes(*ex_.model_, b, batch_tokens()); }
  double unit_bytes() const { return mlp_unit_step_bytes(*ex_.model_, batch_tokens()); }
  double block_bytes() const {
    return block_step_bytes(*ex_.model_, static_cast<double>(pool_stats().bytes_peak));
  }

  /// What the policies see at the check of STEP: the training window since the last check, the
  /// latest validation, and the validation probe when a policy asks for one (every process
  /// evaluates its rows of it, so all see the same numbers).
  RunMetrics run_metrics(long step) {
    RunMetrics m;
    if (st_.since_check.count > 0) {
      m.train_loss = st_.since_check.mean_loss();
      m.train_accuracy = st_.since_check.accuracy();
      m.train_steps = static_cast<size_t>(std::llround(st_.since_check.count)) /
                      std::max<size_t>(1, static_cast<size_t>(ts_.batch_size));
    }
    if (st_.val_step >= 0) {
      m.val_step = st_.val_step;
      m.val_loss = st_.val_loss;
      m.val_accuracy = st_.val_accuracy;
    }
    const size_t want = editor_.validation_probe(static_cast<size_t>(step));
    const auto& val = task(step).val;
    if (want > 0 && !val.empty()) {
      const size_t bs = std::max<size_t>(1, static_cast<size_t>(ts_.batch_size));
      const long batches = static_cast<long>((want + bs - 1) / bs);
      const std::vector<std::vector<HeadRef>> sets =
          editor_.probe_ablations(static_cast<size_t>(step));
      EvalResult r = ex_.evaluate(val, batches, !sets.empty() || twin_);
      m.probe_examples = r.examples;
      m.probe_loss = r.loss;
      m.probe_accuracy = r.accuracy;
      for (const std::vector<HeadRef>& set : sets)
        m.ablations.push_back(ablate(set, val, batches, r.example_losses));
      if (twin_) {
        std::vector<double> losses;
        m.twin = twin_->probe(val, batches, &losses);
        m.twin.diff_sd = trainer_detail::paired_sd(losses, r.example_losses, comm_);
      }
    }
    return m;
  }

  /// The twin's training step on the step's BATCH (of a batch of GLOBAL rows) at LR.
  void twin_step(const Batch& batch, size_t global, float lr, long step) {
    Clock::time_point tp = Clock::now();
    const double loss = twin_->step(batch, global, lr, ts_.clip, sync_, comm_.size() > 1);
    phase_.twin += since(tp);
    if (!std::isfinite(loss))
      Experiment::Twin::end(twin_, "dropped", step, "its training loss is not finite",
                            report_->events());
  }

  /// Mutes the heads of SET and leaves out its whole blocks (a policy asked to WHAT them).
  void mute(const std::vector<HeadRef>& set, const char* what) {
    mute_in_model(*ex_.model_, set, what);
  }
  void unmute() { unmute_model(*ex_.model_); }

  /// The probe (BATCHES of VAL) with the heads of SET muted, paired with the unmuted probe's
  /// per-example losses BASE (this process's rows, in the same order).
  Ablation ablate(const std::vector<HeadRef>& set, const std::vector<Example>& val, long batches,
                  const std::vector<double>& base) {
    unmute();
    mute(set, "ablate");
    EvalResult r;
    try {
      r = ex_.evaluate(val, batches, true);
    } catch (...) {
      unmute();
      throw;
    }
    unmute();
    Ablation a;
    a.heads = set;
    a.loss = r.loss;
    a.accuracy = r.accuracy;
    a.diff_sd = trainer_detail::paired_sd(r.example_losses, base, comm_);
    return a;
  }

  // Each block's diagnostics (HKT: fusion weights `lambda`) and its heads' (hybrid: `beta`) as
  // a JSON array for the train line; "" when no block has any.
  std::string block_diagnostics() const {
    json out = json::array();
    bool any = false;
    for (AttentionBlock* b : ex_.model_->blocks()) {
      json bj = json::object();
      for (auto& [k, v] : b->diagnostics()) bj[k] = v;
      json hj = json::object();
      for (const HeadInfo& h : b->heads()) {
        auto d = h.head->diagnostics();
        if (!d.empty()) hj[std::to_string(h.id)] = d;
      }
      if (!hj.empty()) bj["heads"] = hj;
      any = any || !bj.empty();
      out.push_back(bj);
    }
    return any ? dump_json(out) : "";
  }

  void log_and_validate(long step, float lr) {
    auto heads = ex_.model_->heads_per_block();
    if (step % ts_.log_every == 0 || step == ts_.steps) {
      report_->train(step, st_.window, lr, heads, block_diagnostics());
      st_.window.clear();
    }
    validated_ = (ts_.eval_every > 0 && step % ts_.eval_every == 0) || step == ts_.steps;
    on_trial_ = false;
    if (!validated_ || task(step).val.empty()) return;
    // asked once a validation: a structure on trial (heads a policy may still take back) is no
    // candidate for the best model, so the tested model's structure is one the policies settled
    // on, and no early stop is made while it lasts
    on_trial_ = editor_.on_trial(static_cast<size_t>(step));
    EvalResult r = ex_.evaluate(task(step).val, ts_.eval_batches);
    report_->validation(step, r, heads);
    st_.val_step = step;
    st_.val_loss = r.loss;
    st_.val_accuracy = r.accuracy;
    if (r.accuracy > st_.best_val && !on_trial_) {
      st_.best_val = r.accuracy;
      st_.best_step = step;
      best_due_ = true;  // written at the end of the step, in checkpoint_or_stop
    }
  }

  /// train.stop_patience: at a validation `stop_patience` validations after the best (of the
  /// current task, and after the switch when there is one), the run ends here: an
  /// "early_stop" event, and the checkpoint of this step says so for a resume.
  void stop_early_when_due(long step) {
    if (ts_.stop_patience <= 0 || st_.best_step < 0 || step == ts_.steps) return;
    if (ts_.switch_at > 0 && step <= ts_.switch_at) return;
    if (step - st_.best_step < ts_.stop_patience * ts_.eval_every) return;
    if (on_trial_) return;  // a round still waits for its test
    st_.stopped_early = true;
    Event e;
    e.type = "early_stop";
    e.numbers = {{"best_step", static_cast<double>(st_.best_step)},
                 {"best_val_accuracy", st_.best_val},
                 {"patience", static_cast<double>(ts_.stop_patience)}};
    report_->events().emit(e);
    report_->say("early stop after step " + std::to_string(step) +
                 ": no better validation since step " + std::to_string(st_.best_step) + "\n");
  }

  /// RunFlags::on_step after STEP when it is due; a false answer (from any process) stops the
  /// run after this step.
  void report_step(long step, float lr) {
    if (!flags_.on_step) return;
    if (step % std::max(1L, flags_.on_step_every) != 0 && step != ts_.steps) return;
    StepReport r;
    r.step = step;
    r.total_steps = ts_.steps;
    r.loss = since_report_.mean_loss();
    r.accuracy = since_report_.accuracy();
    r.steps = static_cast<size_t>(std::llround(since_report_.count)) /
              std::max<size_t>(1, static_cast<size_t>(ts_.batch_size));
    r.lr = lr;
    r.heads = ex_.model_->heads_per_block();
    r.val_step = st_.val_step;
    r.val_loss = st_.val_loss;
    r.val_accuracy = st_.val_accuracy;
    since_report_.clear();
    double stop = flags_.on_step(r) ? 0.0 : 1.0;
    if (comm_.size() > 1) comm_.allreduce_sum(&stop, 1);
    stop_requested_ = stop_requested_ || stop > 0;
  }

  /// Writes checkpoints/best after a better validation, then checkpoints/last when due or
  /// stopping; true when the run stops here. Both are written at the end of the step, so they
  /// are the same checkpoint: a kill between the two leaves a best that `resume` continues from
  /// (RunDir::recover_last_from_best), or an older last that repeats the steps since.
  bool checkpoint_or_stop(long step) {
    bool due = (ts_.checkpoint_every > 0 ? step % ts_.checkpoint_every == 0 : validated_) ||
               step == ts_.steps || st_.stopped_early;
    bool signalled = comm_.size() > 1 ? interrupt_requested_ : interrupted();
    bool stop =
        signalled || stop_requested_ || (flags_.stop_after >= 0 && step >= flags_.stop_after);
    st_.step = step;
    if (best_due_) ex_.save(dir_.best_checkpoint());
    best_due_ = false;
    if (due || stop) {
      const bool twin = twin_ && comm_.root();  // rank 0 alone writes
      const Checkpoint with_twin = twin ? twin_->saved() : Checkpoint{};
      ex_.save(dir_.last_checkpoint(), twin ? &with_twin : nullptr);
      ex_.record_structure(dir_, step);
      saved_step_ = step;
      note_checkpoint();
    }
    if (!stop || step >= ts_.steps || st_.stopped_early) return false;
    report_->end_bar();
    if (flags_.announce_stop)
      report_->say("stopped at step " + std::to_string(step) + "; checkpoint " +
                       dir_.last_checkpoint() + "\ncontinue with: growformer resume " +
                       dir_.root() + "\n",
                   true);
    return true;
  }

  int interrupted_status() const {
    return (comm_.size() > 1 ? interrupt_requested_ : interrupted()) ? 130 : 0;
  }

  void final_test() {
    std::string which = "last";
    bool best = ts_.test_on == "best" && fs::exists(dir_.best_checkpoint());
    if (comm_.size() > 1) {
      comm_.barrier();  // rank 0 has written the checkpoints
      best = comm_.broadcast(best);
    }
    if (best) {
      ex_.load_weights(dir_.best_checkpoint());
      which = "best (step " + std::to_string(st_.best_step) + ")";
    }
    const DataSplits& d = task(ts_.steps);
    const auto& test = d.test.empty() ? d.val : d.test;
    if (test.empty()) return;
    TestReport t;
    t.result = ex_.evaluate(test, ts_.test_batches);
    t.model = which;
    t.evaluated_on = d.test.empty() ? "val" : "test";
    t.majority_class_accuracy =
        trainer_detail::majority_class_accuracy(d.train, test, d.num_classes, t.result.examples);
    report_->test(st_.step, t, ex_.model_->heads_per_block());
    ex_.outcome_.tested = true;
    ex_.outcome_.test = t;
  }

  Experiment& ex_;
  const TrainSettings& ts_;
  TrainerState& st_;
  const RunDir& dir_;
  const RunFlags& flags_;
  Communicator& comm_;
  std::unique_ptr<Reporter> report_;
  GradientSync sync_;
  bool interrupt_requested_ = false;  // a process was interrupted (several processes)
  TrainWindow since_report_;          // the steps since RunFlags::on_step was last called
  bool stop_requested_ = false;       // RunFlags::on_step answered false
  BatchSampler sampler_, switch_sampler_;
  StructureEditor editor_;
  bool need_probe_ = false, need_masks_ = false, validated_ = false;
  bool on_trial_ = false;      // the last validation found the structure on trial
  long step_ = 0;              // the step being trained (-1: the final test)
  bool best_due_ = false;      // this step's validation is the best so far: checkpoints/best is due
  long saved_step_ = -1;       // the step of checkpoints/last (-1: none yet)
  double admitted_bytes_ = 0;  // the growth admitted in this check (admit_bytes)
  bool said_refused_ = false;  // a refused head was reported on the console
  trainer_detail::PhaseTimes phase_;        // wall seconds per phase (trainer_timing.cpp)
  std::unique_ptr<Experiment::Twin> twin_;  // the model's twin, while a policy asks for one
  using Clock = std::chrono::steady_clock;
  static double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  }
};

int Experiment::run_loop(const RunDir& dir, long start_step, const RunFlags& flags) {
  kernels::PrecisionScope own_precision(precision_);  // whatever another experiment set since
  Loop loop(*this, dir, flags);
  try {
    return loop.run(start_step);
  } catch (const std::bad_alloc&) {
    loop.fail_out_of_memory();
  }
}

}  // namespace gf
