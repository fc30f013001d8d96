// idx_images dataset plugin: pixel tokens by hand, quantisation, pooling,
// corrupt IDX files, and the installed Fashion-MNIST (skipped when absent).
#include <doctest/doctest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "growformer/config.hpp"
#include "growformer/data/data_stats.hpp"
#include "growformer/dataset.hpp"
#include "growformer/data/io.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;

namespace {

using gf_test::TempDir;

gf::DataSplits load(const std::string& yaml, uint64_t seed = 1) {
  gf::ConfigNode node = gf::ConfigNode::load_string("plugin: idx_images\n" + yaml);
  return gf_test::registry().create_dataset(node, gf::DatasetBuild{seed})->load();
}

using gf_test::error_of;

std::string be32(uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 255), char((v >> 8) & 255), char(v & 255)};
}

// n images of 4x4: pixel (r, c) of image i = 16 * i + 4 * r + c; label i % 3
std::string images(uint32_t n) {
  std::string s = be32(0x803) + be32(n) + be32(4) + be32(4);
  for (uint32_t i = 0; i < n; ++i) {
    for (uint32_t p = 0; p < 16; ++p) s.push_back(static_cast<char>(16 * i + p));
  }
  return s;
}
std::string labels(uint32_t n) {
  std::string s = be32(0x801) + be32(n);
  for (uint32_t i = 0; i < n; ++i) s.push_back(static_cast<char>(i % 3));
  return s;
}

struct Fixture {
  TempDir dir;
  Fixture() {
    gf::write_file(dir.file("tr-img.gz"), images(10), true);
    gf::write_file(dir.file("tr-lab"), labels(10));
    gf::write_file(dir.file("te-img"), images(4));
    gf::write_file(dir.file("te-lab.gz"), labels(4), true);
  }
  std::string cfg(const std::string& extra = "") const { return with("", "", extra); }
  // the config with option `key` pointing at `path` instead
  std::string with(const std::string& key, const std::string& path,
                   const std::string& extra = "") const {
    std::vector<std::pair<std::string, std::string>> kv{{"train_images", dir.file("tr-img.gz")},
                                                        {"train_labels", dir.file("tr-lab")},
                                                        {"test_images", dir.file("te-img")},
                                                        {"test_labels", dir.file("te-lab.gz")}};
    std::string s = "val_ratio: 0.2\n" + extra;
    for (const auto& p : kv) s += p.first + ": " + (p.first == key ? path : p.second) + "\n";
    return s;
  }
};

}  // namespace

TEST_CASE("idx_images: row-major pixel tokens, quantisation, pooling") {
  Fixture fx;
  auto d = load(fx.cfg());
  CHECK(d.vocab_size == 257);
  CHECK(d.train.size() == 8);
  CHECK(d.val.size() == 2);
  CHECK(d.test.size() == 4);
  CHECK(d.num_classes == 3);
  CHECK(d.max_len == 16);
  for (size_t i = 0; i < 4; ++i) {
    const auto& e = d.test[i];
    CHECK(e.label == static_cast<int32_t>(i % 3));
    for (int p = 0; p < 16; ++p) CHECK(e.tokens[p] == static_cast<int32_t>(16 * i + p) + 1);
  }
  auto q = load(fx.cfg("levels: 4\n"));  // 0..63 -> 0, 64..127 -> 1
  CHECK(q.vocab_size == 5);
  CHECK(q.test[3].tokens[0] == 1 + 48 * 4 / 256);
  CHECK(q.test[3].tokens[15] == 1 + 63 * 4 / 256);
  auto p = load(fx.cfg("downsample: 2\n"));
  CHECK(p.max_len == 4);
  // image 1, top-left block: 16, 17, 20, 21 -> mean 18.5 rounds to 19
  CHECK(p.test[1].tokens == std::vector<int32_t>{19 + 1, 21 + 1, 27 + 1, 29 + 1});
  auto n = load(fx.cfg("class_names: [a, b, c, d]\n"));
  CHECK(n.num_classes == 4);
  CHECK(n.class_names[2] == "c");
}

TEST_CASE("idx_images: max_train caps the images before val is carved out") {
  Fixture fx;
  // image i starts with pixel 16 * i, token 16 * i + 1
  auto ids = [](const std::vector<gf::Example>& ex) {
    std::vector<int> out;
    for (const auto& e : ex) out.push_back((e.tokens[0] - 1) / 16);
    return out;
  };
  auto d = load(fx.cfg("max_train: 5\n"));  // val_ratio 0.2 of 5 images
  CHECK(d.train.size() == 4);
  CHECK(d.val.size() == 1);
  std::vector<int> all = ids(d.train);
  for (int v : ids(d.val)) all.push_back(v);
  std::sort(all.begin(), all.end());
  CHECK(std::unique(all.begin(), all.end()) == all.end());  // disjoint
  for (int v : all) CHECK((v >= 0 && v < 10));
  // the cap takes a prefix of the same seeded order as the uncapped split
  auto full = load(fx.cfg());
  CHECK(full.train.size() == 8);
  CHECK(full.val.size() == 2);
  std::vector<int> order = ids(full.train);
  for (int v : ids(full.val)) order.push_back(v);
  std::vector<int> capped = ids(d.train);
  for (int v : ids(d.val)) capped.push_back(v);
  CHECK(capped == std::vector<int>(order.begin(), order.begin() + 5));
  // a cap at or above the file size changes nothing
  auto same = load(fx.cfg("max_train: 10\n"));
  CHECK(ids(same.train) == ids(full.train));
  CHECK(ids(same.val) == ids(full.val));
  // a cap too small to leave a val example is an error
  std::string msg = error_of([&] { load(fx.cfg("max_train: 2\n")); });
  CHECK(msg.find("`val` is empty") != std::string::npos);
}

TEST_CASE("idx_images: corrupt files name the file") {
  Fixture fx;
  gf::write_file(fx.dir.file("magic"), be32(0x801) + be32(1) + "x");  // labels as images
  std::string msg = error_of([&] { load(fx.with("train_images", fx.dir.file("magic"))); });
  CHECK(msg.find(fx.dir.file("magic")) == 0);
  CHECK(msg.find("wrong IDX magic number 0x00000801") != std::string::npos);

  std::string img = images(10);
  gf::write_file(fx.dir.file("short"), img.substr(0, img.size() - 5));
  msg = error_of([&] { load(fx.with("train_images", fx.dir.file("short"))); });
  CHECK(msg.find(fx.dir.file("short")) == 0);
  CHECK(msg.find("size mismatch") != std::string::npos);

  gf::write_file(fx.dir.file("lab9"), labels(9));
  msg = error_of([&] { load(fx.with("train_labels", fx.dir.file("lab9"))); });
  CHECK(msg.find("10 images") != std::string::npos);

  gf::write_file(fx.dir.file("full.gz"), images(200), true);
  fs::resize_file(fx.dir.file("full.gz"), fs::file_size(fx.dir.file("full.gz")) - 10);
  msg = error_of([&] { load(fx.with("train_images", fx.dir.file("full.gz"))); });
  CHECK(msg.find("truncated") != std::string::npos);
  msg = error_of([&] { load(fx.with("test_images", fx.dir.file("none"))); });
  CHECK(msg.find(fx.dir.file("none")) == 0);
}

TEST_CASE("idx_images: installed Fashion-MNIST") {
  if (!gf::file_exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) {
    MESSAGE("Fashion-MNIST not installed: check skipped");
    return;
  }
  auto t0 = std::chrono::steady_clock::now();
  auto d = load("val_ratio: 0.1\n");
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  MESSAGE("Fashion-MNIST: " << d.train.size() << " / " << d.val.size() << " / " << d.test.size()
                            << " in " << s << " s");
  CHECK(d.train.size() == 54000);
  CHECK(d.val.size() == 6000);
  CHECK(d.test.size() == 10000);
  CHECK(d.max_len == 784);
  CHECK(d.num_classes == 10);
  auto st = gf::compute_stats(d, 0);
  for (size_t c = 0; c < 10; ++c) CHECK(st.splits[2].class_counts[c] == 1000);
  auto small = load("val_ratio: 0.1\nmax_train: 6000\nmax_test: 1000\n");
  CHECK(small.train.size() == 5400);
  CHECK(small.val.size() == 600);
  CHECK(small.test.size() == 1000);
  CHECK(s < 30.0);
}
