#include "growformer/errors.hpp"

namespace gf {

ConfigError::~ConfigError() = default;
RuntimeError::~RuntimeError() = default;

}  // namespace gf
