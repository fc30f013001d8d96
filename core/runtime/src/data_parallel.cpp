#include "growformer/data_parallel.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "growformer/autograd.hpp"

namespace gf {

GradientSync::GradientSync(Communicator& comm, size_t bucket_bytes)
    : comm_(comm), bucket_elems_(std::max<size_t>(1, bucket_bytes / sizeof(float))) {}

void GradientSync::reduce(NamedParams& params, const std::vector<Var>& extra, double scale,
                          std::vector<double>& scalars) {
  auto t0 = std::chrono::steady_clock::now();
  if (measure_wait_) {
    comm_.barrier();
    auto t1 = std::chrono::steady_clock::now();
    wait_seconds_ += std::chrono::duration<double>(t1 - t0).count();
    t0 = t1;
  }
  std::vector<Var*> vars;
  for (auto& [n, p] : params) vars.push_back(&p);
  std::vector<Var> extras = extra;
  for (auto& v : extras) vars.push_back(&v);

  // one small sum first: the caller's scalars and which gradients exist anywhere
  size_t ns = scalars.size();
  flags_.assign(ns + vars.size(), 0.0);
  std::copy(scalars.begin(), scalars.end(), flags_.begin());
  for (size_t i = 0; i < vars.size(); ++i) flags_[ns + i] = vars[i]->grad().defined() ? 1.0 : 0.0;
  comm_.allreduce_sum(flags_.data(), flags_.size());
  std::copy(flags_.begin(), flags_.begin() + ns, scalars.begin());

  // then the gradients, packed into buckets; a tensor may straddle buckets
  struct Piece {
    float* grad;
    size_t at, n;  // at: offset in the bucket
  };
  std::vector<Piece> pieces;
  bucket_.resize(bucket_elems_);
  size_t fill = 0, total = 0, buckets = 0;
  const float s = static_cast<float>(scale);
  auto flush = [&] {
    if (fill == 0) return;
    comm_.allreduce_sum(bucket_.data(), fill);
    for (const Piece& p : pieces) std::memcpy(p.grad, bucket_.data() + p.at, p.n * sizeof(float));
    pieces.clear();
    total += fill;
    fill = 0;
    ++buckets;
  };
  for (size_t i = 0; i < vars.size(); ++i) {
    Var& v = *vars[i];
    if (flags_[ns + i] == 0.0) {
      if (v.grad().defined()) v.zero_grad();
      continue;
    }
    Tensor& g = v.grad_buf();  // zero-filled where this process computed none
    float* data = g.data();
    size_t n = g.size();
    for (size_t done = 0; done < n;) {
      size_t take = std::min(n - done, bucket_elems_ - fill);
      float* dst = bucket_.data() + fill;
      for (size_t k = 0; k < take; ++k) dst[k] = data[done + k] * s;
      pieces.push_back({data + done, fill, take});
      fill += take;
      done += take;
      if (fill == bucket_elems_) flush();
    }
  }
  flush();
  last_elements_ = total;
  last_buckets_ = buckets;
  ++calls_;
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Tensor gather_rows(Communicator& comm, const Tensor& local, size_t offset, size_t global_rows) {
  Shape shape = local.shape();
  size_t per_row = shape.empty() || shape[0] == 0 ? 0 : local.size() / shape[0];
  shape[0] = global_rows;
  Tensor out(shape, 0.0f);
  std::memcpy(out.data() + offset * per_row, local.data(), local.size() * sizeof(float));
  comm.allreduce_sum(out.data(), out.size());
  return out;
}

uint64_t parameters_hash(const NamedParams& params, bool values) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](const void* data, size_t n) {
    const unsigned char* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < n; ++i) {
      h ^= p[i];
      h *= 1099511628211ULL;
    }
  };
  for (const auto& [name, p] : params) {
    mix(name.data(), name.size() + 0);
    mix("\0", 1);
    for (size_t d : p.shape()) {
      uint64_t v = d;
      mix(&v, sizeof v);
    }
    if (values) mix(p.value().data(), p.size() * sizeof(float));
  }
  return h;
}

}  // namespace gf
