// The YAML configuration loader: parse, duplicate/alias checks, a strict read of a few typed
// options, the unconsumed-key walk, and the dump written to run directories.
#include "fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  gf_fuzz::expect_clean([&] {
    gf::ConfigNode n = gf::ConfigNode::load_string(text, "fuzz.yaml");
    gf::OptionSpecs specs{
        gf::make_option("seed", gf::OptType::Int, "1", "seed", 0),
        gf::make_option("lr", gf::OptType::Float, "0.1", "lr", 0, 10),
        gf::make_option("name", gf::OptType::String, "x", "name"),
        gf::make_option("flag", gf::OptType::Bool, "false", "flag"),
        gf::make_option("sizes", gf::OptType::IntList, "[]", "sizes"),
        gf::make_option("model", gf::OptType::Component, "{}", "model"),
    };
    for (const auto& key : n.keys()) {
      gf::ConfigNode c = n.child(key);
      if (c.is_map()) (void)c.keys();
    }
    (void)n.dump();
    gf::Options o(n, specs, "fuzz");
    (void)o.get_node("model").dump();
    n.check_all_consumed();
  });
  return 0;
}
