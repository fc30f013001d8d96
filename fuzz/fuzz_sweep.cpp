// The sweep file: its options, axes (lists, labelled mappings, the `set` axis), seeds, the
// job count bounded before expansion, and the jobs' overrides applied to a small config.
// Invariants beyond a clean answer: at most kMaxJobs jobs, distinct job names, every
// override KEY=VALUE.
#include <set>

#include "fuzz_common.hpp"
#include "sweep_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  gf_fuzz::expect_clean([&] {
    gfapp::SweepPlan plan =
        gfapp::plan_sweep(gf::ConfigNode::load_string(text, "fuzz_sweep.yaml", gf_fuzz::scratch()),
                          {"train.steps=1"});
    if (plan.jobs.size() > gfapp::kMaxJobs) std::abort();
    std::set<std::string> names;
    for (const gfapp::Job& j : plan.jobs) {
      if (!names.insert(j.name).second) std::abort();
      for (const std::string& kv : j.overrides)
        if (kv.find('=') == std::string::npos) std::abort();
    }
    for (size_t i = 0; i < plan.jobs.size() && i < 8; ++i) {
      gf::ConfigNode cfg = gf::ConfigNode::load_string("train: {steps: 2}\nmodel: {d_model: 8}\n");
      gf_fuzz::expect_clean([&] {
        for (const std::string& kv : plan.jobs[i].overrides) cfg.apply_override(kv);
        (void)cfg.dump();
      });
    }
  });
  return 0;
}
