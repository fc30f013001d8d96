// growformer report on tiny real runs (an INCRT run that grows, an HKT run with hybrid heads, a
// sweep directory): the figures gnuplot drew, the page rendered in headless Chromium (charts
// laid out, screenshot not blank), and the refusals of bad input. Skips with a message where
// gnuplot or chromium is absent (CI installs both).
#include <doctest/doctest.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "testing.hpp"

namespace fs = std::filesystem;

namespace {

struct Cli {
  int status;
  std::string output;
};
Cli run(const std::string& cmd, const std::string& out_file) {
  int rc = std::system((cmd + " > " + out_file + " 2>&1").c_str());
  std::ifstream in(out_file);
  std::stringstream ss;
  ss << in.rdbuf();
  return {WEXITSTATUS(rc), ss.str()};
}
bool has(const std::string& s, const std::string& p) { return s.find(p) != std::string::npos; }
std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
bool have(const char* program) {
  return std::system((std::string("command -v ") + program + " > /dev/null 2>&1").c_str()) == 0;
}

const char* kData =
    "data: {plugin: listops, train_size: 300, val_size: 40, test_size: 40, min_length: 8, "
    "max_length: 40}\n";
const char* kIncrt =
    "name: incrt_tiny\nseed: 1\nthreads: 1\n"
    "model: {d_model: 32, layers: 1, max_len: 40, attention: {plugin: mha, heads: 1, d_k: 8, "
    "max_heads: 6, head: {plugin: dot_product}}}\n"
    "optimizer: {plugin: adamw, lr: 0.003}\n"
    "train: {steps: 80, batch_size: 16, warmup: 10, check_every: 2, eval_every: 40, log_every: "
    "10}\n"
    "growth: {plugin: incrt_geometric, criterion: energy, probe: batch, tracker: online, eta_plus: "
    "0.3, tracker_iters: "
    "20, calibration_checks: 5, theta_w: 0.1, dwell_checks: 2, init: directed, max_heads: 6}\n";
const char* kHkt =
    "name: hkt_tiny\nseed: 1\nthreads: 1\n"
    "model: {d_model: 32, layers: 1, max_len: 40, attention: {plugin: hkt, heads: 2, levels: 3, "
    "stride: 2, fusion: static, head: {plugin: hybrid_conv, kernel: 3}}}\n"
    "optimizer: {plugin: adamw, lr: 0.003}\n"
    "train: {steps: 40, batch_size: 16, warmup: 5, eval_every: 20, log_every: 10}\n";

size_t svg_count(const fs::path& dir) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(dir)) n += e.path().extension() == ".svg";
  return n;
}

// A PNG (8-bit RGB or RGBA, not interlaced) as RGB pixels.
struct Image {
  size_t w = 0, h = 0;
  std::vector<uint8_t> rgb;
};
uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]; }
Image read_png(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> f((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(f.size() > 8);
  REQUIRE(std::memcmp(f.data(), "\x89PNG\r\n\x1a\n", 8) == 0);
  Image img;
  int channels = 0;
  std::vector<uint8_t> z;
  for (size_t p = 8; p + 8 <= f.size();) {
    uint32_t len = be32(&f[p]);
    std::string type(reinterpret_cast<const char*>(&f[p + 4]), 4);
    const uint8_t* d = &f[p + 8];
    if (type == "IHDR") {
      img.w = be32(d);
      img.h = be32(d + 4);
      REQUIRE(d[8] == 8);   // bit depth
      REQUIRE(d[12] == 0);  // not interlaced
      channels = d[9] == 6 ? 4 : d[9] == 2 ? 3 : 0;
      REQUIRE(channels != 0);
    } else if (type == "IDAT") {
      z.insert(z.end(), d, d + len);
    }
    p += 12 + len;
  }
  size_t stride = img.w * channels;
  std::vector<uint8_t> raw((stride + 1) * img.h);
  uLongf out_len = raw.size();
  REQUIRE(uncompress(raw.data(), &out_len, z.data(), z.size()) == Z_OK);
  std::vector<uint8_t> cur(stride), prev(stride, 0);
  img.rgb.reserve(img.w * img.h * 3);
  for (size_t y = 0; y < img.h; ++y) {
    const uint8_t* line = &raw[y * (stride + 1)];
    int filter = line[0];
    for (size_t i = 0; i < stride; ++i) {
      int a = i >= size_t(channels) ? cur[i - channels] : 0, b = prev[i],
          c = i >= size_t(channels) ? prev[i - channels] : 0, x = line[1 + i];
      int pred = 0;
      if (filter == 1)
        pred = a;
      else if (filter == 2)
        pred = b;
      else if (filter == 3)
        pred = (a + b) / 2;
      else if (filter == 4) {
        int pp = a + b - c, pa = std::abs(pp - a), pb = std::abs(pp - b), pc = std::abs(pp - c);
        pred = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
      }
      cur[i] = static_cast<uint8_t>(x + pred);
    }
    for (size_t i = 0; i < img.w; ++i)
      for (int k = 0; k < 3; ++k) img.rgb.push_back(cur[i * channels + k]);
    prev = cur;
  }
  return img;
}

// Opens REPORT in headless Chromium: the page's own count of laid-out charts, and a screenshot
// that must show drawn figures (coloured curve pixels, not a blank page).
void check_in_browser(const fs::path& report, size_t charts, const fs::path& shot,
                      const std::string& tmp) {
  std::string url = "file://" + fs::absolute(report).string();
  // no sandbox (CI runs as root), no /dev/shm (small in containers), a profile of its own
  std::string flags =
      " --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
      "--hide-scrollbars --no-first-run --user-data-dir=" +
      (shot.parent_path() / "chromium-profile").string() + " ";
  Cli dom = run("timeout 120 chromium" + flags + "--dump-dom " + url, tmp);
  REQUIRE_MESSAGE(dom.status == 0, dom.output);
  std::string want = "data-charts=\"" + std::to_string(charts) + "\" data-rendered=\"" +
                     std::to_string(charts) + "\"";
  INFO(dom.output.substr(
      dom.output.find("render-check") == std::string::npos ? 0 : dom.output.find("render-check"),
      120));
  CHECK(has(dom.output, want));
  Cli s = run("timeout 120 chromium" + flags +
                  "--window-size=1320,1600 --screenshot=" + fs::absolute(shot).string() + " " + url,
              tmp);
  REQUIRE_MESSAGE(s.status == 0, s.output);
  Image img = read_png(shot.string());
  CHECK(img.w == 1320);
  size_t ink = 0, coloured = 0;
  std::set<uint32_t> colours;
  for (size_t i = 0; i + 2 < img.rgb.size(); i += 3) {
    uint8_t r = img.rgb[i], g = img.rgb[i + 1], b = img.rgb[i + 2];
    if (r < 235 || g < 235 || b < 235) ++ink;
    int mx = std::max({r, g, b}), mn = std::min({r, g, b});
    if (mx - mn > 60) ++coloured;  // curve colours, not text or grid grey
    colours.insert(uint32_t(r) << 16 | g << 8 | b);
  }
  double px = static_cast<double>(img.w * img.h);
  INFO("ink " << ink / px << ", coloured " << coloured / px << ", colours " << colours.size());
  CHECK(ink / px > 0.01);
  CHECK(coloured / px > 0.001);
  CHECK(colours.size() > 20);
}

}  // namespace

TEST_CASE("report: INCRT, HKT and sweep reports draw their figures and render in Chromium") {
  if (!have("gnuplot")) {
    MESSAGE("skipped: gnuplot is not installed (apt-get install gnuplot-nox)");
    return;
  }
  gf_test::TempDir dir;
  std::string tmp = dir.file("out.txt"), bin = GF_BIN;
  std::ofstream(dir.file("incrt.yaml")) << kIncrt << kData;
  std::ofstream(dir.file("hkt.yaml")) << kHkt << kData;
  Cli a = run(bin + " train " + dir.file("incrt.yaml") + " --run-dir " + dir.file("incrt"), tmp);
  REQUIRE_MESSAGE(a.status == 0, a.output);
  CHECK(has(a.output, "growformer report " + dir.file("incrt")));  // train ends with the command
  Cli b =
      run(bin + " train " + dir.file("hkt.yaml") + " --run-dir " + dir.file("hkt") + " -q", tmp);
  REQUIRE_MESSAGE(b.status == 0, b.output);
  std::ofstream(dir.file("sweep.yaml"))
      << "name: tiny\nbase: hkt.yaml\nseeds: [1, 2]\nset: [train.steps=20, train.eval_every=10]\n"
         "axes:\n  model.attention.heads: [1, 2]\n";
  Cli c =
      run(bin + " sweep " + dir.file("sweep.yaml") + " --out " + dir.file("sweep") + " -q", tmp);
  REQUIRE_MESSAGE(c.status == 0, c.output);

  // the INCRT run grew: the heads figure, the eigenvalue figure and the edit table
  Cli r1 = run(bin + " report " + dir.file("incrt"), tmp);
  REQUIRE_MESSAGE(r1.status == 0, r1.output);
  fs::path incrt = dir.file("incrt") + "/report";
  std::string page = read_text((incrt / "report.html").string());
  CHECK(has(page, "<td class=l>grow</td>"));
  CHECK(fs::exists(incrt / "figures/heads.svg"));
  CHECK(fs::exists(incrt / "figures/incrt_block0.svg"));
  CHECK(svg_count(incrt / "figures") == 6);  // loss, accuracy, wall time, lr, heads, INCRT
  CHECK(has(page, "against <b>"));           // test accuracy beside the majority class
  // the HKT run: fusion weights and beta logged while training, drawn per level and head
  Cli r2 = run(bin + " report " + dir.file("hkt") + " --out " + dir.file("hkt_report"), tmp);
  REQUIRE_MESSAGE(r2.status == 0, r2.output);
  fs::path hkt = dir.file("hkt_report");
  CHECK(fs::exists(hkt / "figures/hkt_lambda_block0.svg"));
  CHECK(fs::exists(hkt / "figures/hkt_beta.svg"));
  CHECK(svg_count(hkt / "figures") == 7);
  std::string lam = read_text((hkt / "figures/hkt_lambda_block0.svg").string());
  CHECK(has(lam, "lambda_2"));
  // the sweep: overlays and the table of two groups, mean +- sd over two seeds
  Cli r3 = run(bin + " report " + dir.file("sweep") + " --out " + dir.file("sweep_report"), tmp);
  REQUIRE_MESSAGE(r3.status == 0, r3.output);
  fs::path sweep = dir.file("sweep_report");
  std::string sp = read_text((sweep / "report.html").string());
  CHECK(svg_count(sweep / "figures") == 4);  // val accuracy against step and wall time, loss, heads
  CHECK(fs::exists(sweep / "figures/runs_val_accuracy_time.svg"));
  CHECK(has(sp, "model.attention.heads=1") == false);
  CHECK(has(sp, "<td class=l>1</td><td>2</td>"));  // group "1" (heads 1) with 2 runs
  CHECK(has(sp, "&plusmn;"));

  if (!have("chromium")) {
    MESSAGE("skipped the browser check: chromium is not installed (apt-get install chromium)");
    return;
  }
  check_in_browser(incrt / "report.html", 6, dir.file("incrt.png"), tmp);
  check_in_browser(hkt / "report.html", 7, dir.file("hkt.png"), tmp);
  check_in_browser(sweep / "report.html", 4, dir.file("sweep.png"), tmp);
}

TEST_CASE("report: a missing run directory and a corrupt metrics line get clear messages") {
  gf_test::TempDir dir;
  std::string tmp = dir.file("out.txt"), bin = GF_BIN;
  Cli m = run(bin + " report " + dir.file("nope"), tmp);
  CHECK(m.status == 2);
  CHECK(has(m.output, "nope: no such run directory"));
  fs::create_directories(dir.file("empty"));
  Cli e = run(bin + " report " + dir.file("empty"), tmp);
  CHECK(e.status == 2);
  CHECK(has(e.output, "neither a run directory"));
  fs::create_directories(dir.file("bad"));
  std::ofstream(dir.file("bad/metrics.jsonl"))
      << "{\"step\":10,\"split\":\"train\",\"loss\":1.0}\n\n{\"step\":20,\"split\":\"tra\n";
  Cli c = run(bin + " report " + dir.file("bad"), tmp);
  CHECK(c.status == 1);
  CHECK(has(c.output, "bad/metrics.jsonl:3: corrupt line"));
}

TEST_CASE("report: a report that fails on a full disk keeps the previous report.html") {
  if (!have("gnuplot")) {
    MESSAGE("skipped: gnuplot is not installed (apt-get install gnuplot-nox)");
    return;
  }
  gf_test::TempDir dir;
  std::string tmp = dir.file("out.txt"), bin = GF_BIN;
  std::ofstream(dir.file("tiny.yaml")) << "name: tiny\nseed: 1\nthreads: 1\nmodel: {d_model: 8, "
                                          "layers: 1, max_len: 40, attention: {plugin: mha, "
                                          "heads: 2}}\noptimizer: {plugin: adamw, lr: "
                                          "0.003}\ntrain: {steps: 20, batch_size: 8, warmup: 2, "
                                          "eval_every: 10, log_every: 5}\n"
                                       << kData;
  const std::string run_dir = dir.file("run");
  Cli t = run(bin + " train " + dir.file("tiny.yaml") + " --run-dir " + run_dir + " -q", tmp);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  Cli good = run(bin + " report " + run_dir, tmp);
  REQUIRE_MESSAGE(good.status == 0, good.output);
  const fs::path html = fs::path(run_dir) / "report" / "report.html";
  const std::string page = read_text(html);
  uintmax_t largest_figure = 0;
  for (auto& e : fs::directory_iterator(fs::path(run_dir) / "report" / "figures"))
    largest_figure = std::max(largest_figure, fs::file_size(e.path()));
  // a file-size limit stands in for a full disk: the figures fit, the page (which holds them) does
  // not
  const uintmax_t kib = largest_figure / 1024 + 2;
  REQUIRE(kib * 1024 < page.size());
  Cli full = run("bash -c \"trap '' XFSZ; ulimit -f " + std::to_string(kib) + "; exec " + bin +
                     " report " + run_dir + "\"",
                 tmp);
  INFO(full.output);
  CHECK(full.status == 1);
  CHECK(has(full.output, "report.html.tmp-"));
  CHECK(has(full.output, "write failed (disk full?)"));
  CHECK(has(full.output, "(the previous report.html is untouched)"));
  CHECK(read_text(html) == page);  // the good page, whole
  for (auto& e : fs::directory_iterator(html.parent_path()))
    CHECK(!has(e.path().filename().string(), ".tmp-"));  // no partial file left
}

TEST_CASE("report: the heads line steps at the edit, not at the next log point") {
  const fs::path dir = fs::temp_directory_path() / ("gf_report_steps_" + std::to_string(getpid()));
  fs::create_directories(dir / "fake" / "bin");
  fs::create_directories(dir / "dat");
  // a gnuplot that keeps the data files of each figure and writes an empty SVG
  std::ofstream(dir / "fake/bin/gnuplot")
      << "#!/bin/sh\n[ \"$1\" = --version ] && exit 0\n"
         "cp \"$(dirname \"$1\")\"/*.dat \"$GF_DAT_COPY\"/ 2>/dev/null\n"
         "out=$(sed -n 's/^set output \"\\(.*\\)\"$/\\1/p' \"$1\")\n"
         "echo \"<svg xmlns='http://www.w3.org/2000/svg'></svg>\" > \"$out\"\n";
  fs::permissions(dir / "fake/bin/gnuplot", fs::perms::owner_all);
  std::ofstream(dir / "run.yaml")
      << "name: s\nseed: 1\nthreads: 1\n"
         "data: {plugin: listops, train_size: 64, val_size: 16, test_size: 16, min_length: 4, "
         "max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 1, "
         "max_heads: 4}}\n"
         "optimizer: {plugin: adamw, lr: 0.003}\n"
         "train: {steps: 20, batch_size: 8, warmup: 1, eval_every: 0, log_every: 10, "
         "check_every: 3}\n"
         "growth: {plugin: fixed_schedule, every: 3, start: 3, max_heads: 2}\n";
  const std::string run_dir = (dir / "run").string(), out = (dir / "out.txt").string();
  Cli t = run(std::string(GF_BIN) + " train " + (dir / "run.yaml").string() + " --run-dir " +
                  run_dir + " --quiet",
              out);
  REQUIRE_MESSAGE(t.status == 0, t.output);
  Cli r =
      run("PATH=" + (dir / "fake/bin").string() + ":$PATH GF_DAT_COPY=" + (dir / "dat").string() +
              " " + GF_BIN + " report " + run_dir,
          out);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  // block 0: 2 heads from the growth at step 3, which lies before the first log point (10)
  std::string block0 = read_text(dir / "dat/heads_0.dat");
  INFO(block0);
  CHECK(has("\n" + block0, "\n3 2\n"));  // before: only the log points, 10 and 20
  fs::remove_all(dir);
}
