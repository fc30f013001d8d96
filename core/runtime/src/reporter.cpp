#include "growformer/reporter.hpp"

#include "growformer/errors.hpp"
#include "growformer/json_text.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace gf {

using json = nlohmann::json;

namespace {
// Every log line is checked: a full disk or an unwritable file stops the run with the file's
// name instead of losing the lines silently.
void write_line(std::ofstream& out, const std::string& path, const std::string& line) {
  if (path.empty()) return;  // a muted reporter
  out << line << "\n";
  out.flush();
  if (!out) {
    // the logs sit in the run directory's root, beside checkpoints/
    RunDir dir(std::filesystem::path(path).parent_path().string());
    std::error_code ec;
    bool saved = std::filesystem::exists(dir.last_checkpoint(), ec);
    throw RuntimeError(
        path + ": cannot write the run log (disk full or not a writable file?); " +
        (saved ? "the last checkpoint " + dir.last_checkpoint() +
                     " is intact: free space and `growformer resume " + dir.root() + "`"
               : "no checkpoint was written yet: free space and `growformer resume " + dir.root() +
                     "` starts the run again"));
  }
}
std::ofstream open_log(const std::string& path) {
  std::ofstream out(path, std::ios::app);
  if (!out) throw RuntimeError(path + ": cannot open the run log for writing");
  return out;
}
}  // namespace

class Reporter::Sink : public EventSink {
  // The counts the editor writes (heads per block, heads asked for, MLP units, blocks) as JSON
  // integers; other numbers as they are (null when not finite).
  static json number(const std::string& key, double v) {
    if (!std::isfinite(v)) return json(nullptr);
    static const char* const kCounts[] = {"heads",      "requested",    "units", "width",
                                          "mlp_widths", "unit_indices", "blocks"};
    const bool count = std::any_of(std::begin(kCounts), std::end(kCounts),
                                   [&](const char* c) { return key == c; });
    if (count && v == std::floor(v) && std::fabs(v) < 9e15) return json(static_cast<long long>(v));
    return json(v);
  }

 public:
  explicit Sink(const std::string& path) : path(path) {
    if (!path.empty()) out = open_log(path);
  }
  std::ofstream out;
  std::string path;
  long step = 0;
  void emit(const Event& e) override {
    json j;
    j["step"] = step;
    j["type"] = e.type;
    if (e.block >= 0) j["block"] = e.block;
    if (e.head >= 0) j["head"] = e.head;
    for (auto& [k, v] : e.numbers) j[k] = number(k, v);
    for (auto& [k, v] : e.strings) j[k] = v;
    for (auto& [k, v] : e.lists) {
      json list = json::array();
      for (double x : v) list.push_back(number(k, x));
      j[k] = list;
    }
    write_line(out, path, dump_json(j));
  }
};

namespace {

std::string fmt_duration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  long t = static_cast<long>(s + 0.5);
  std::ostringstream o;
  if (t >= 3600)
    o << t / 3600 << "h" << (t % 3600) / 60 << "m";
  else if (t >= 60)
    o << t / 60 << "m" << t % 60 << "s";
  else
    o << t << "s";
  return o.str();
}

std::string heads_str(const std::vector<size_t>& h) {
  std::string s = "[";
  for (size_t i = 0; i < h.size(); ++i) s += (i ? "," : "") + std::to_string(h[i]);
  return s + "]";
}

}  // namespace

Reporter::Reporter(const RunDir& dir, long total_steps, bool quiet)
    : quiet_(quiet),
      tty_(isatty(2) && !quiet),
      total_steps_(total_steps),
      metrics_path_(dir.metrics()),
      metrics_(open_log(dir.metrics())),
      sink_(std::make_unique<Sink>(dir.events())) {
  t0_ = window_t0_ = last_draw_ = now_ = Clock::now();
}

Reporter::Reporter(long total_steps)
    : quiet_(true), tty_(false), total_steps_(total_steps), sink_(std::make_unique<Sink>("")) {
  writes_ = false;
  t0_ = window_t0_ = last_draw_ = now_ = Clock::now();
}

std::unique_ptr<Reporter> Reporter::muted(long total_steps) {
  return std::unique_ptr<Reporter>(new Reporter(total_steps));
}

Reporter::~Reporter() = default;

EventSink& Reporter::events() { return *sink_; }

void Reporter::start(const std::string& banner) {
  say(banner);
  t0_ = window_t0_ = last_draw_ = now_ = Clock::now();
}

void Reporter::begin_step(long step) { sink_->step = step; }

double Reporter::elapsed() const { return std::chrono::duration<double>(now_ - t0_).count(); }

void Reporter::end_step(long step, const TrainWindow& w, const std::vector<size_t>& heads) {
  now_ = Clock::now();
  steps_this_run_++;
  if (!tty_ ||
      !(std::chrono::duration<double>(now_ - last_draw_).count() > 0.1 || step == total_steps_))
    return;
  last_draw_ = now_;
  double rate = steps_this_run_ / std::max(1e-9, elapsed());
  int filled = static_cast<int>(static_cast<double>(step) / total_steps_ * 24);
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "[%s%s] %ld/%ld | loss %.4f | acc %.3f | %.2f steps/s | heads %s | ETA %s",
                std::string(filled, '#').c_str(), std::string(24 - filled, '.').c_str(), step,
                total_steps_, w.mean_loss(), w.accuracy(), rate, heads_str(heads).c_str(),
                fmt_duration((total_steps_ - step) / std::max(1e-9, rate)).c_str());
  std::cerr << "\r\033[K" << buf << std::flush;
}

void Reporter::train(long step, const TrainWindow& w, double lr, const std::vector<size_t>& heads,
                     const std::string& blocks) {
  double wdt = std::chrono::duration<double>(now_ - window_t0_).count();
  json j = {{"step", step},
            {"split", "train"},
            {"loss", w.mean_loss()},
            {"accuracy", w.accuracy()},
            {"lr", static_cast<float>(lr)},
            {"heads", heads},
            {"tokens_per_s", wdt > 0 ? w.tokens / wdt : 0.0},
            {"elapsed_s", elapsed()}};
  if (!blocks.empty()) j["blocks"] = json_bytes_tree(json::parse(blocks));  // written again below
  write_line(metrics_, metrics_path_, dump_json(j));
  window_t0_ = now_;
  if (tty_ || quiet_) return;
  double rate = steps_this_run_ / std::max(1e-9, elapsed());
  std::ostringstream line;
  line << "step " << step << "/" << total_steps_ << " | loss " << std::fixed;
  line.precision(4);
  line << w.mean_loss() << " | acc ";
  line.precision(3);
  line << w.accuracy() << " | ";
  line.precision(2);
  line << rate << " steps/s | heads " << heads_str(heads) << " | ETA "
       << fmt_duration((total_steps_ - step) / std::max(1e-9, rate));
  std::cout << line.str() << "\n" << std::flush;
}

namespace {
// An evaluation's metrics line (the keys print sorted, whatever the order they are added in)
json eval_record(long step, const char* split, const EvalResult& r,
                 const std::vector<size_t>& heads, double elapsed_s) {
  return {{"step", step},
          {"split", split},
          {"loss", r.loss},
          {"accuracy", r.accuracy},
          {"examples", r.examples},
          {"heads", heads},
          {"tokens_per_s", nullptr},
          {"elapsed_s", elapsed_s}};
}
}  // namespace

void Reporter::validation(long step, const EvalResult& r, const std::vector<size_t>& heads) {
  write_line(metrics_, metrics_path_, dump_json(eval_record(step, "val", r, heads, elapsed())));
  if (tty_) std::cerr << "\r\033[K";
  std::ostringstream line;
  line << "  val @ " << step << ": loss " << r.loss << ", accuracy " << r.accuracy << "\n";
  say(line.str());
}

void Reporter::test(long step, const TestReport& t, const std::vector<size_t>& heads) {
  const EvalResult& r = t.result;
  // the time since the start now, not at the last step (the test comes after training)
  json j = eval_record(step, "test", r, heads,
                       std::chrono::duration<double>(Clock::now() - t0_).count());
  j["model"] = t.model;
  j["majority_class_accuracy"] = t.majority_class_accuracy;
  j["evaluated_on"] = t.evaluated_on;
  write_line(metrics_, metrics_path_, dump_json(j));
  std::ostringstream line;
  line << "test (" << t.evaluated_on << " split, " << t.model << " model): accuracy " << r.accuracy
       << ", loss " << r.loss << "; majority class " << t.majority_class_accuracy << "\n";
  say(line.str());
}

void Reporter::summary(long step, const std::map<std::string, double>& growth,
                       const std::map<std::string, double>& pruning) {
  if (growth.empty() && pruning.empty()) return;
  Event e;
  e.type = "summary";
  for (auto& [k, v] : growth) e.numbers.push_back({"growth." + k, v});
  for (auto& [k, v] : pruning) e.numbers.push_back({"pruning." + k, v});
  sink_->step = step;
  sink_->emit(e);
}

void Reporter::say(const std::string& text, bool always) {
  if (!writes_ || (quiet_ && !always)) return;
  std::cout << text << std::flush;
}

void Reporter::end_bar() {
  if (tty_) std::cerr << "\n";
}

}  // namespace gf
