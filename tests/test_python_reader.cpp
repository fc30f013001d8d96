// examples/python/read_checkpoint.py (numpy only) against the C++ checkpoint code: a checkpoint
// written here with known tensors, and a real run's last.safetensors. Skips with a message where
// no python3 with numpy exists (CI installs python3-numpy).
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "growformer/checkpoint.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string python_with_numpy() {
  for (const char* py : {"python3", "/usr/bin/python3"})
    if (std::system((std::string(py) + " -c 'import numpy' > /dev/null 2>&1").c_str()) == 0)
      return py;
  return "";
}

json read_with_python(const std::string& py, const std::string& ck, const std::string& out) {
  std::string script = std::string(GF_SOURCE_DIR) + "/examples/python/read_checkpoint.py";
  int rc = std::system((py + " " + script + " " + ck + " --json > " + out + " 2>&1").c_str());
  std::ifstream in(out);
  std::stringstream ss;
  ss << in.rdbuf();
  INFO(ss.str());
  REQUIRE(WEXITSTATUS(rc) == 0);
  return json::parse(ss.str());
}

}  // namespace

TEST_CASE("python reader: tensors, shapes, values and architecture as the C++ code wrote them") {
  std::string py = python_with_numpy();
  if (py.empty()) {
    MESSAGE("skipped: no python3 with numpy (apt-get install python3-numpy)");
    return;
  }
  gf_test::TempDir dir;
  gf::Checkpoint ck;
  ck.tensors["model.embed.weight"] = gf_test::randn({5, 3}, 1);
  ck.tensors["model.layers.0.attn.heads.2.w_q"] = gf_test::randn({3, 2}, 2);
  ck.tensors["optim.m.embed.weight"] = gf_test::randn({5, 3}, 3);
  ck.tensors["model.bias"] = gf_test::randn({4}, 4);
  ck.metadata["architecture"] = "[\"{\\\"heads\\\":[2]}\"]";
  ck.metadata["heads"] = "[1]";
  ck.metadata["trainer"] = "{\"step\":17}";
  ck.metadata["data"] = "{\"class_names\":[\"a\",\"b\"],\"vocab_size\":5}";
  gf::save_checkpoint(dir.file("c.safetensors"), ck);
  json j = read_with_python(py, dir.file("c.safetensors"), dir.file("out.json"));
  CHECK(j["step"] == 17);
  CHECK(j["heads_per_block"] == json::array({1}));
  CHECK(j["architecture"][0] == "{\"heads\":[2]}");
  CHECK(j["classes"] == json::array({"a", "b"}));
  CHECK(j["parameters"] == 15 + 6 + 4);
  REQUIRE(j["tensors"].size() == ck.tensors.size());
  for (auto& [name, t] : ck.tensors) {
    INFO(name);
    REQUIRE(j["tensors"].contains(name));
    json shape = json::array();
    for (size_t d : t.shape()) shape.push_back(d);
    CHECK(j["tensors"][name]["shape"] == shape);
    CHECK(j["tensors"][name]["dtype"] == "float32");
    double sum = 0;
    for (size_t i = 0; i < t.size(); ++i) sum += t[i];
    CHECK(j["tensors"][name]["sum"].get<double>() == doctest::Approx(sum).epsilon(1e-9));
  }
}

TEST_CASE("python reader: a real run's checkpoint") {
  std::string py = python_with_numpy();
  if (py.empty()) {
    MESSAGE("skipped: no python3 with numpy (apt-get install python3-numpy)");
    return;
  }
  gf_test::TempDir dir;
  std::ofstream(dir.file("run.yaml"))
      << "name: p\nseed: 1\nthreads: 1\n"
         "data: {plugin: listops, train_size: 60, val_size: 10, test_size: 10, min_length: 4, "
         "max_length: 20}\n"
         "model: {d_model: 16, layers: 2, max_len: 20, attention: {plugin: mha, heads: 2, head: "
         "{plugin: dot_product}}}\ntrain: {steps: 4, batch_size: 8, warmup: 1, eval_every: 2}\n";
  std::string cmd = std::string(GF_BIN) + " train " + dir.file("run.yaml") + " --run-dir " +
                    dir.file("run") + " -q > " + dir.file("log") + " 2>&1";
  REQUIRE(std::system(cmd.c_str()) == 0);
  std::string path = dir.file("run/checkpoints/last.safetensors");
  json j = read_with_python(py, path, dir.file("out.json"));
  gf::Checkpoint ck = gf::load_checkpoint(path);
  CHECK(j["step"] == 4);
  CHECK(j["heads_per_block"] == json::array({2, 2}));
  CHECK(j["architecture"].size() == 2);
  CHECK(j["classes"].size() == 10);
  CHECK(j["tensors"].size() == ck.tensors.size());
  for (auto& [name, t] : ck.tensors) {
    double sum = 0;
    for (size_t i = 0; i < t.size(); ++i) sum += t[i];
    CHECK(j["tensors"][name]["sum"].get<double>() == doctest::Approx(sum).epsilon(1e-9));
  }
}

TEST_CASE("python reader: verifies the checksum as the C++ reader does") {
  std::string py = python_with_numpy();
  if (py.empty()) {
    MESSAGE("skipped: no python3 with numpy (apt-get install python3-numpy)");
    return;
  }
  gf_test::TempDir dir;
  std::string script = std::string(GF_SOURCE_DIR) + "/examples/python/read_checkpoint.py";
  auto status = [&](const std::string& path, std::string* out) {
    int rc =
        std::system((py + " " + script + " " + path + " > " + dir.file("o.txt") + " 2>&1").c_str());
    std::ifstream in(dir.file("o.txt"));
    std::stringstream ss;
    ss << in.rdbuf();
    *out = ss.str();
    return WEXITSTATUS(rc);
  };
  // the checksum entry alone, first and last among the metadata; text that JSON escapes
  for (int variant = 0; variant < 3; ++variant) {
    gf::Checkpoint ck;
    ck.tensors["model.w"] = gf_test::randn({7, 3}, 5 + variant);
    if (variant >= 1) ck.metadata["zz_last"] = "tab\there \"quoted\" \xc3\xa9 line\nbreak \\ end";
    if (variant >= 2) ck.metadata["aa_first"] = "{\"step\":3}";
    std::string path = dir.file("v" + std::to_string(variant) + ".safetensors");
    gf::save_checkpoint(path, ck);
    std::string out;
    INFO("variant " << variant);
    CHECK(status(path, &out) == 0);
    // one changed byte in the data section, then one in the header: both refused, with the
    // C++ reader's words
    std::ifstream f(path, std::ios::binary);
    const std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    const auto size = static_cast<std::streamoff>(bytes.size());
    const auto name = static_cast<std::streamoff>(bytes.find("model.w") + 6);  // model.w -> model.s
    for (std::streamoff at : {size - 5, name}) {
      std::string copy = dir.file("bad.safetensors");
      fs::copy_file(path, copy, fs::copy_options::overwrite_existing);
      std::fstream g(copy, std::ios::in | std::ios::out | std::ios::binary);
      g.seekg(at);
      char c;
      g.get(c);
      g.seekp(at);
      g.put(static_cast<char>(c ^ 0x04));
      g.close();
      INFO("byte " << at);
      CHECK(status(copy, &out) == 1);
      CHECK(out.find("checksum mismatch") != std::string::npos);
      CHECK_THROWS_WITH_AS(gf::load_checkpoint(copy), doctest::Contains("checksum mismatch"),
                           gf::RuntimeError);
    }
  }
}
