// The run log readers `report` and `analyze` use: events.jsonl lines as typed records, and a
// whole run directory (metrics.jsonl, events.jsonl, config.resolved.yaml, plugins.lock) cut
// from the input at "\n%%\n".
#include "fuzz_common.hpp"
#include "growformer/run_dir.hpp"
#include "growformer/run_events.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string whole(reinterpret_cast<const char*>(data), size);
  std::string events = gf_fuzz::put("events.jsonl", whole);
  gf_fuzz::expect_clean([&] { (void)gf::read_run_events(events); });
  std::vector<std::string> parts = gf_fuzz::split(data, size, 4);
  std::string dir = gf_fuzz::scratch() + "/run";
  std::filesystem::create_directories(dir);
  gf_fuzz::put("run/metrics.jsonl", parts[0]);
  gf_fuzz::put("run/events.jsonl", parts[1]);
  gf_fuzz::put("run/config.resolved.yaml", parts[2]);
  gf_fuzz::put("run/plugins.lock", parts[3]);
  gf_fuzz::expect_clean([&] { (void)gf::read_run_log(gf::RunDir(dir)); });
  return 0;
}
