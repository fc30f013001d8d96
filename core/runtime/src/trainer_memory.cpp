// The up-front memory check: what the process may allocate, and whether a model and batch fit.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "growformer/model.hpp"
#include "trainer_impl.hpp"

namespace gf {

namespace trainer_detail {

MemoryLimit memory_limit() {
  MemoryLimit m;
  m.bytes =
      static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGESIZE));
  m.from = "physical memory";
  for (const char* f :
       {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    double v = 0;
    if (in >> v && v > 0 && v < m.bytes) {
      m.bytes = v;
      m.from = std::string("the cgroup limit in ") + f;
    }
  }
  struct rlimit as {};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY &&
      static_cast<double>(as.rlim_cur) < m.bytes) {
    m.bytes = static_cast<double>(as.rlim_cur);
    m.from = "the address-space limit (ulimit -v)";
    m.address_space = true;
  }
  return m;
}

// What this process holds now, as LIMIT counts it: its address space or its resident memory.
double process_memory(const MemoryLimit& limit) {
  std::ifstream in("/proc/self/statm");
  double size = 0, resident = 0;
  if (!(in >> size >> resident)) return 0;
  return (limit.address_space ? size : resident) * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string gib(double bytes) {
  char b[32];
  if (bytes < double(1u << 30))
    std::snprintf(b, sizeof b, "%.0f MiB", std::ceil(bytes / double(1u << 20)));
  else
    std::snprintf(b, sizeof b, "%.1f GiB", bytes / double(1u << 30));
  return b;
}

// Refuses, before the model is built, a run whose parameters (with gradients and optimizer
// state) or, when TRAINING, one step's activations cannot fit in memory. Both estimates are
// lower bounds measured on mha: parameters vocab x d + positions x d + layers x (4 + 2 x
// mlp_ratio) x d^2 + d x classes, 16 bytes each; activations kept for the backward pass about
// 16 x d floats per token and layer, plus one layer's worth for the embedding and the head,
// for batch x length tokens (length: the data's longest sequence, cut at model.max_len).
void check_memory(const ModelSettings& m, const DataSplits& data, long batch, bool training) {
  double d = static_cast<double>(m.d_model), layers = static_cast<double>(m.layers);
  double max_len = static_cast<double>(m.max_len);
  double length = data.max_len > 0 ? std::min(max_len, static_cast<double>(data.max_len)) : max_len;
  length += m.cls;
  double params = static_cast<double>(data.vocab_size) * d + max_len * d +
                  layers * (4 + 2 * m.mlp_ratio) * d * d +
                  d * static_cast<double>(data.num_classes);
  double param_bytes = 16 * params;
  double act_bytes =
      training ? 4.0 * static_cast<double>(batch) * length * (layers + 1) * 16 * d : 0;
  const MemoryLimit lim = memory_limit();
  const double limit = lim.bytes;
  const std::string& from = lim.from;
  if (param_bytes + act_bytes <= limit) return;
  std::ostringstream what;
  what.precision(6);
  if (act_bytes > param_bytes)
    what << "train.batch_size: a training step needs about " << gib(param_bytes + act_bytes)
         << " (batch " << batch << " x " << length << " tokens x d_model " << d << " x " << layers
         << " layer(s) of activations, and " << gib(param_bytes)
         << " of parameters and optimizer state)";
  else
    what << "model: the parameters with their gradients and optimizer state need about "
         << gib(param_bytes) << " (d_model " << d << ", " << layers << " layer(s), mlp_ratio "
         << m.mlp_ratio << ", max_len " << max_len << ")";
  throw ConfigError(what.str() + ", more than the " + gib(limit) + " of " + from + "; lower " +
                    (act_bytes > param_bytes ? "train.batch_size, model.max_len or the model's size"
                                             : "model.d_model, model.layers or model.mlp_ratio"));
}

double head_step_bytes(const Model& model, size_t b, double tokens) {
  const std::vector<AttentionBlock*> blocks = model.blocks();
  if (b >= blocks.size()) return 0;
  std::vector<HeadInfo> heads = blocks[b]->heads();
  if (heads.empty()) return 0;  // nothing to measure a head by: the step itself will tell
  const std::string prefix =
      "layers." + std::to_string(b) + ".attn.heads." + std::to_string(heads.back().id) + ".";
  double params = 0;
  for (auto& [n, v] : model.named_parameters())
    if (n.rfind(prefix, 0) == 0) params += static_cast<double>(v.value().size());
  const double d = static_cast<double>(std::max<size_t>(1, model.d_model()));
  return 16 * params + 4 * tokens * 2 * params / d;
}

double mlp_unit_step_bytes(const Model& model, double tokens) {
  const double d = static_cast<double>(model.d_model());
  return 16 * (2 * d + 1) + 4 * tokens * 4;
}

double block_step_bytes(const Model& model, double peak) {
  double params = 0;
  for (auto& [n, v] : model.named_parameters())
    if (n.rfind("layers.0.", 0) == 0) params += static_cast<double>(v.value().size());
  const double blocks = static_cast<double>(std::max<size_t>(1, model.blocks().size()));
  return 16 * params + peak / blocks;
}

std::string out_of_memory_message(const Model& model, const std::string& where,
                                  const std::string& root, const std::string& last) {
  std::string heads, widths;
  for (size_t h : model.heads_per_block()) heads += (heads.empty() ? "" : ", ") + std::to_string(h);
  for (size_t w : model.mlp_widths()) widths += (widths.empty() ? "" : ", ") + std::to_string(w);
  return "out of memory " + where + " of " + root + " (heads per block: " + heads +
         "; MLP units per block: " + widths +
         "); lower train.batch_size or model.max_len, or the structure growth may add "
         "(max_heads, the policy's most units or blocks), or give the process more memory. " +
         (!last.empty() ? "The last checkpoint " + last +
                              " is kept: continue with `growformer resume " + root + "`"
                        : std::string("No checkpoint was written yet"));
}

}  // namespace trainer_detail

}  // namespace gf
