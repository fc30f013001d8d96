// Shared pieces of the command-line program.
#pragma once

#include <growformer/config.hpp>

#include <boost/program_options.hpp>

#include <stdexcept>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace gfapp {

/// Wrong command-line usage: exit status 2.
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Parses args; prints help and sets *help when --help was given.
boost::program_options::variables_map parse(
    const std::string& usage, boost::program_options::options_description& opts,
    boost::program_options::positional_options_description& pos,
    const std::vector<std::string>& args, bool* help);
/// The same with the positional arguments named in order ({"config", 1}; -1 = all the rest).
boost::program_options::variables_map parse(
    const std::string& usage, boost::program_options::options_description& opts,
    std::initializer_list<std::pair<const char*, int>> positional,
    const std::vector<std::string>& args, bool* help);
/// `--trust-checkpoint-plugins` of eval, predict and analyze: the plugin folders a checkpoint
/// records are searched (and their libraries loaded) only with it.
inline constexpr const char* kTrustOption = "trust-checkpoint-plugins";
inline constexpr const char* kTrustDoc =
    "load the plugin libraries the checkpoint records (native code: only for a checkpoint you "
    "trust; --plugin-path DIR names one folder instead)";
/// Loads a config file and applies --set overrides.
gf::ConfigNode load_config(const std::string& path, const std::vector<std::string>& sets);

int cmd_bench(const std::vector<std::string>& args);
int cmd_analyze(const std::vector<std::string>& args);
int cmd_sweep(const std::vector<std::string>& args);
int cmd_eval(const std::vector<std::string>& args);
int cmd_predict(const std::vector<std::string>& args);
int cmd_report(const std::vector<std::string>& args);

}  // namespace gfapp
