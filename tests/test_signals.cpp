// Ctrl-C and SIGTERM: the program runs in a child process (fork/exec of bin/growformer), the test
// sends the signal at a chosen moment and checks the exit status (130, from exit(), not a death
// by the signal), how long the stop took, what it said and the checkpoint left behind.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "growformer/checkpoint.hpp"
#include "testing.hpp"

namespace fs = std::filesystem;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// bin/growformer ARGS in a child process, its stdout and stderr into OUT.
pid_t spawn(const std::vector<std::string>& args, const std::string& out) {
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
    std::vector<char*> argv{const_cast<char*>(GF_BIN)};
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(GF_BIN, argv.data());
    _exit(127);
  }
  return pid;
}

/// How a child ended: its exit status (or -1 when a signal killed it or it was still running
/// after the timeout, then killed), and the seconds from the call to its end.
struct End {
  int status = -1;
  bool killed_by_signal = false;
  double seconds = 0;
};
End wait_end(pid_t pid, double timeout_s) {
  const auto t0 = Clock::now();
  End e;
  for (;;) {
    int st = 0;
    if (::waitpid(pid, &st, WNOHANG) == pid) {
      e.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
      if (WIFEXITED(st)) e.status = WEXITSTATUS(st);
      e.killed_by_signal = WIFSIGNALED(st);
      return e;
    }
    if (std::chrono::duration<double>(Clock::now() - t0).count() > timeout_s) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &st, 0);
      e.seconds = timeout_s;
      return e;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

/// Waits (at most TIMEOUT_S) until READY holds; false on the timeout.
bool wait_for(const std::function<bool()>& ready, double timeout_s) {
  const auto t0 = Clock::now();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < timeout_s) {
    if (ready()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

/// The trainer step a checkpoint holds (-1 when it is absent or cannot be read yet).
long checkpoint_step(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return -1;
  try {
    gf::Checkpoint ck = gf::load_checkpoint(path);
    return json::parse(ck.metadata.at("trainer")).at("step").get<long>();
  } catch (const std::exception&) {
    return -1;
  }
}

std::string tiny_config(const std::string& train, const std::string& extra = "") {
  return "name: tiny\nseed: 3\nthreads: 1\n"
         "data: {plugin: listops, train_size: 64, val_size: 16, test_size: 16, min_length: 4, "
         "max_length: 12, max_depth: 2, max_args: 3}\n"
         "model: {d_model: 8, layers: 1, max_len: 16, attention: {plugin: mha, heads: 2}}\n"
         "optimizer: {plugin: adamw, lr: 0.003}\n"
         "train: {" +
         train + "}\n" + extra;
}

const std::string kHangPlugins = GF_SIGNAL_PLUGIN_DIR;

}  // namespace

TEST_CASE(
    "signals: SIGTERM while a growth policy hangs in its check ends the run in about a second, "
    "exit 130, the last checkpoint kept") {
  gf_test::TempDir d;
  std::ofstream(d.file("hang.yaml")) << tiny_config(
      "steps: 50, batch_size: 8, warmup: 1, eval_every: 0, log_every: 1, check_every: 1, "
      "checkpoint_every: 1",
      "growth: {plugin: hang, at_step: 4}\n");
  const std::string run = d.file("run"), last = run + "/checkpoints/last.safetensors";
  pid_t pid =
      spawn({"train", d.file("hang.yaml"), "--run-dir", run, "--plugin-path", kHangPlugins, "-q"},
            d.file("out.txt"));
  // steps 1..3 checkpointed, then the check of step 4 never returns
  const bool stuck = wait_for([&] { return checkpoint_step(last) == 3; }, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGTERM);
  const End e = wait_end(pid, 20);
  const std::string out = read_text(d.file("out.txt"));
  INFO(out);
  REQUIRE(stuck);
  CHECK(!e.killed_by_signal);
  CHECK(e.status == 130);
  CHECK(e.seconds < 3.0);  // the grace of a second, not the policy's pleasure
  CHECK(has(out, "interrupted: the growth policy `hang` in check() at step 4 did not return"));
  CHECK(has(out, "the last checkpoint " + last +
                     " (step 3) is kept: continue with `growformer resume " + run + "`"));
  CHECK(checkpoint_step(last) == 3);  // whole: it loads and its checksum holds
  for (auto& f : fs::directory_iterator(run + "/checkpoints"))
    CHECK(!has(f.path().string(), ".tmp-"));
}

TEST_CASE(
    "signals: Ctrl-C while a policy hangs as it is made (a module stuck at import) exits 130") {
  gf_test::TempDir d;
  std::ofstream(d.file("hang.yaml")) << tiny_config("steps: 5, batch_size: 8, warmup: 1",
                                                    "growth: {plugin: hang, in: construct}\n");
  const std::string run = d.file("run");
  pid_t pid =
      spawn({"train", d.file("hang.yaml"), "--run-dir", run, "--plugin-path", kHangPlugins, "-q"},
            d.file("out.txt"));
  // the plugins are probed and loaded first (a second or so); the handler is installed before
  std::this_thread::sleep_for(std::chrono::milliseconds(2500));
  ::kill(pid, SIGINT);
  const End e = wait_end(pid, 20);
  const std::string out = read_text(d.file("out.txt"));
  INFO(out);
  CHECK(!e.killed_by_signal);
  CHECK(e.status == 130);
  CHECK(e.seconds < 3.0);
  CHECK(has(out,
            "interrupted: the run's setup (its plugins, policies, data and model) did not return"));
  CHECK(!fs::exists(run));  // nothing was written
}

TEST_CASE(
    "signals: SIGTERM while a policy hangs saving its state for the first checkpoint exits 130") {
  gf_test::TempDir d;
  std::ofstream(d.file("hang.yaml")) << tiny_config(
      "steps: 50, batch_size: 8, warmup: 1, eval_every: 0, log_every: 1, checkpoint_every: 2",
      "growth: {plugin: hang, in: save_state}\n");
  const std::string run = d.file("run");
  pid_t pid =
      spawn({"train", d.file("hang.yaml"), "--run-dir", run, "--plugin-path", kHangPlugins, "-q"},
            d.file("out.txt"));
  // steps 1 and 2 are logged, then the checkpoint of step 2 waits for the policy's state
  const bool stuck =
      wait_for([&] { return has(read_text(run + "/metrics.jsonl"), "\"step\":2,"); }, 60);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ::kill(pid, SIGTERM);
  const End e = wait_end(pid, 20);
  const std::string out = read_text(d.file("out.txt"));
  INFO(out);
  REQUIRE(stuck);
  CHECK(!e.killed_by_signal);
  CHECK(e.status == 130);
  CHECK(e.seconds < 3.0);
  CHECK(has(out, "in save_state() (a checkpoint being made) did not return"));
  CHECK(has(out, "no checkpoint was written yet (a resume starts the run again)"));
  CHECK(!fs::exists(run + "/checkpoints/last.safetensors"));
}

TEST_CASE("signals: SIGTERM during the final test exits 130, and resume runs the test") {
  gf_test::TempDir d;
  // two short steps, then a final test of 200000 examples (20000 under ASan): seconds of
  // evaluation to interrupt
  const char* rows[] = {"[MAX 2 9 ]\t9", "( [MIN 3 4 ] )\t3", "[SM 1 2 ]\t3", "7\t7",
                        "[MED 1 5 9 ]\t5"};
  std::ofstream train(d.file("train.tsv")), test(d.file("test.tsv"));
  train << "Source\tTarget\n";
  test << "Source\tTarget\n";
  for (size_t i = 0; i < 64; ++i) train << rows[i % 5] << "\n";
#if defined(__SANITIZE_ADDRESS__)
  const size_t test_rows = 20000;  // evaluation is some ten times slower under ASan
#else
  const size_t test_rows = 200000;
#endif
  for (size_t i = 0; i < test_rows; ++i) test << rows[(i * 7) % 5] << "\n";
  train.close();
  test.close();
  std::ofstream(d.file("t.yaml"))
      << "name: t\nseed: 3\nthreads: 1\n"
         "data: {plugin: listops, source: files, train_file: train.tsv, val_file: train.tsv, "
         "test_file: test.tsv, max_length: 12}\n"
         "model: {d_model: 64, layers: 4, max_len: 16, attention: {plugin: mha, heads: 2}}\n"
         "optimizer: {plugin: adamw, lr: 0.003}\n"
         "train: {steps: 2, batch_size: 8, warmup: 1, eval_every: 0, log_every: 1}\n";
  const std::string run = d.file("run"), last = run + "/checkpoints/last.safetensors";
  pid_t pid = spawn({"train", d.file("t.yaml"), "--run-dir", run, "-q"}, d.file("out.txt"));
  const bool testing = wait_for([&] { return checkpoint_step(last) == 2; }, 120);
  ::kill(pid, SIGTERM);
  const End e = wait_end(pid, 60);
  const std::string out = read_text(d.file("out.txt"));
  INFO(out);
  REQUIRE(testing);
  CHECK(!e.killed_by_signal);
  CHECK(e.status == 130);  // not 1
  CHECK(has(out, "interrupted during the final test (the 2 steps are done); the last checkpoint " +
                     last + " (step 2) is kept"));
  CHECK(has(out, "continue with: growformer resume " + run + " (it runs the final test)"));
  CHECK(!has(read_text(run + "/metrics.jsonl"), "\"split\":\"test\""));

  const std::string rout = d.file("resume.txt");
  const End r = wait_end(spawn({"resume", run, "-q"}, rout), 600);
  INFO(read_text(rout));
  CHECK(r.status == 0);
  CHECK(has(read_text(run + "/metrics.jsonl"), "\"split\":\"test\""));
}

TEST_CASE(
    "signals: SIGTERM to a sweep stops its running job with a checkpoint; the sweep exits 130") {
  gf_test::TempDir d;
  std::ofstream(d.file("base.yaml"))
      << tiny_config("steps: 1000000, batch_size: 8, warmup: 1, eval_every: 0, log_every: 50");
  std::ofstream(d.file("sw.yaml")) << "name: s\nbase: " << d.file("base.yaml")
                                   << "\nseeds: [1]\naxes:\n  model.attention.heads: [1, 2]\n";
  const std::string out = d.file("sweep"), job = out + "/1__seed1";
  pid_t pid = spawn({"sweep", d.file("sw.yaml"), "--out", out, "--quiet"}, d.file("out.txt"));
  const bool running = wait_for(
      [&] {
        std::error_code ec;
        return fs::exists(job + "/metrics.jsonl", ec) &&
               fs::file_size(job + "/metrics.jsonl", ec) > 0;
      },
      120);
  ::kill(pid, SIGTERM);
  const End e = wait_end(pid, 60);
  const std::string text = read_text(d.file("out.txt"));
  INFO(text);
  REQUIRE(running);
  CHECK(!e.killed_by_signal);  // not 143
  CHECK(e.status == 130);
  CHECK(e.seconds < 10);
  CHECK(has(text,
            "[1/2] 1__seed1: interrupted (its last checkpoint is kept); run the same command "
            "again to continue"));
  CHECK(!has(text, "growformer resume"));  // a sweep continues by running it again
  CHECK(checkpoint_step(job + "/checkpoints/last.safetensors") > 0);  // the job's checkpoint
  CHECK(!fs::exists(job + "/sweep_job.json"));                        // not recorded as failed
  CHECK(!fs::exists(out + "/2__seed1"));                              // the next job never began
  CHECK(!fs::exists(out + "/summary.csv"));
}
