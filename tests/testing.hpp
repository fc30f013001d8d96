// Shared helpers for the doctest suites: finite-difference gradient checks and
// the registry loaded from the build tree's plugin folder.
#pragma once

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "growformer/autograd.hpp"
#include "growformer/registry.hpp"
#include "growformer/rng.hpp"

namespace gf_test {

/// A random tensor with entries N(0, std^2).
inline gf::Tensor randn(gf::Shape shape, uint64_t seed, float std = 1.0f) {
  gf::Tensor t(shape);
  gf::Rng rng(seed, 7);
  rng.fill_normal(t, std);
  return t;
}

/// Checks d f / d inputs against central differences in double-ish precision.
/// f must build a scalar from the inputs (it is called many times).
/// Compares max |analytic - numeric| / max(1, |numeric|) <= tol on every input.
inline void check_gradients(const std::function<gf::Var(const std::vector<gf::Var>&)>& f,
                            std::vector<gf::Tensor> inputs, double eps = 1e-2, double tol = 2e-2,
                            size_t max_checks_per_input = 64) {
  std::vector<gf::Var> vars;
  for (auto& t : inputs) vars.push_back(gf::parameter(t.clone()));
  gf::Var out = f(vars);
  REQUIRE(out.size() == 1);
  gf::backward(out);
  for (size_t i = 0; i < vars.size(); ++i) {
    gf::Tensor g =
        vars[i].grad().defined() ? vars[i].grad().clone() : gf::Tensor(inputs[i].shape());
    size_t n = inputs[i].size();
    size_t step = n > max_checks_per_input ? n / max_checks_per_input : 1;
    for (size_t j = 0; j < n; j += step) {
      auto eval = [&](float delta) {
        std::vector<gf::Var> vs;
        for (size_t k = 0; k < inputs.size(); ++k) {
          gf::Tensor t = inputs[k].clone();
          if (k == i) t[j] += delta;
          vs.push_back(gf::constant(t));
        }
        gf::NoGradGuard ng;
        return static_cast<double>(f(vs).value().item());
      };
      double num = (eval(static_cast<float>(eps)) - eval(static_cast<float>(-eps))) / (2 * eps);
      double ana = g[j];
      double err = std::fabs(ana - num) / std::max(1.0, std::fabs(num));
      INFO("input " << i << " element " << j << " analytic " << ana << " numeric " << num);
      CHECK(err <= tol);
    }
  }
}

/// A scalar that depends on every element of y with distinct weights (so that
/// gradient checks see each output): sum(y * w) for a fixed random w.
gf::Var weighted_sum(const gf::Var& y, uint64_t seed = 99);

/// A fresh temporary folder, removed with everything in it at scope exit.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("gf_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

/// The message of the E that f throws ("(no NAME)" when it throws none).
template <class E>
std::string message_of(const std::function<void()>& f, const char* name) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return std::string("(no ") + name + ")";
}
/// The message of the ConfigError that f throws ("(no ConfigError)" when it throws none).
inline std::string error_of(const std::function<void()>& f) {
  return message_of<gf::ConfigError>(f, "ConfigError");
}

/// The message of the gf::RuntimeError that f throws ("(no RuntimeError)" when it throws none).
inline std::string runtime_error_of(const std::function<void()>& f) {
  return message_of<gf::RuntimeError>(f, "RuntimeError");
}

/// The records of RUN_DIR/metrics.jsonl without their wall-clock fields, for comparing runs.
inline std::vector<nlohmann::json> metrics_without_timing(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    j.erase("tokens_per_s");
    j.erase("elapsed_s");
    out.push_back(j);
  }
  return out;
}

/// The records of RUN_DIR/events.jsonl, in order.
inline std::vector<nlohmann::json> events_of(const std::string& dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(dir + "/events.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line));
  return out;
}

/// What a shell command printed (stdout and stderr together) and its exit status.
struct Shell {
  int status;
  std::string output;
};
/// Runs COMMAND with sh, its output captured through a temporary file.
inline Shell run_shell(const std::string& command) {
  static int counter = 0;
  std::filesystem::path out =
      std::filesystem::temp_directory_path() /
      ("gf_shell_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  int rc = std::system((command + " > " + out.string() + " 2>&1").c_str());
  std::ifstream in(out);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(out);
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc), text};
}

/// The registry with every plugin of the build tree loaded.
gf::Registry& registry();

}  // namespace gf_test
