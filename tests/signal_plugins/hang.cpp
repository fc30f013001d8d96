// A growth policy that never returns, as a policy stuck in its check (or a module stuck at its
// import) does: the interrupt tests (test_signals) stop runs that hang here with SIGINT or
// SIGTERM. `at_step: N` hangs in check() at step N; `in: construct` hangs while the policy is
// made (the run's setup); `in: save_state` when the first checkpoint is made. Built into its own
// folder, never on the plugin search path.
#include <growformer/growth.hpp>
#include <growformer/plugin.hpp>
#include <growformer/registry.hpp>

#include <unistd.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

namespace {

[[noreturn]] void hang() {
  for (;;) ::pause();  // a signal's handler returns here, and the call goes on
}

class Hang : public gf::GrowthPolicy {
 public:
  Hang(long at_step, std::string in) : at_step_(at_step), in_(std::move(in)) {
    if (in_ == "construct") hang();
  }
  std::vector<gf::Edit> check(const gf::TrainView& view) override {
    if (in_ == "check" && static_cast<long>(view.step) == at_step_) hang();
    return {};
  }
  std::string save_state() const override {
    if (in_ == "save_state") hang();
    return "";
  }

 private:
  long at_step_;
  std::string in_;
};

void reg(gf::Registry& r) {
  r.add_growth({"hang",
                "never returns from check() at step `at_step` (or while made, or in save_state)",
                {{"at_step", gf::OptType::Int, "1", "the step whose check hangs", 0, 1e9},
                 {"in",
                  gf::OptType::String,
                  "check",
                  "where it hangs",
                  -INFINITY,
                  INFINITY,
                  {"check", "construct", "save_state"}}}},
               [](const gf::Options& o) {
                 return std::make_unique<Hang>(o.get_int("at_step"), o.get_string("in"));
               });
}

}  // namespace

GROWFORMER_PLUGIN("hang", "1.0.0", reg)
