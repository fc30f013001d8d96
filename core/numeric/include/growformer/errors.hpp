// The two error types every layer throws. The program maps them to exit statuses:
// ConfigError -> 2 (configuration or usage), RuntimeError -> 1 (a failure the user can act on).
#pragma once
#include "growformer/export.hpp"

#include <stdexcept>

GROWFORMER_API_BEGIN

namespace gf {

/// A configuration or usage error: the program exits with status 2.
struct ConfigError : std::runtime_error {
  using std::runtime_error::runtime_error;
  ~ConfigError() override;  // out of line: the vtable lives in the core, not in each plugin
};

/// A runtime failure the user can act on (bad data, corrupt checkpoint, NaN): exit 1.
struct RuntimeError : std::runtime_error {
  using std::runtime_error::runtime_error;
  ~RuntimeError() override;
};

}  // namespace gf

GROWFORMER_API_END
