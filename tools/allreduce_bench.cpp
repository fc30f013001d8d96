// The gradient exchange alone: GradientSync::reduce on buffers of 2^10 .. 2^24 floats, timed
// after a barrier, median of REPEATS, in buckets of BUCKET_KIB (default: GradientSync's).
// Run: mpirun -np N build/bin/gf_allreduce_bench [REPEATS] [BUCKET_KIB]
// Prints one line per size on rank 0: floats, MiB, median ms, ns per float.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "growformer/autograd.hpp"
#include "growformer/data_parallel.hpp"
#include "growformer/distributed.hpp"

int main(int argc, char** argv) {
  int repeats = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  gf::Communicator& comm = gf::world();
  size_t bucket_kib = argc > 2 ? std::max(1, std::atoi(argv[2])) : 0;
  gf::GradientSync sync =
      bucket_kib ? gf::GradientSync(comm, bucket_kib << 10) : gf::GradientSync(comm);
  if (comm.root())
    std::printf("%d processes (%s), %d repeats, buckets of %s\nfloats,MiB,median_ms,ns_per_float\n",
                comm.size(), comm.backend().c_str(), repeats,
                bucket_kib ? (std::to_string(bucket_kib) + " KiB").c_str() : "the default size");
  for (size_t n = size_t(1) << 10; n <= (size_t(1) << 24); n <<= 2) {
    gf::NamedParams params = {{"w", gf::parameter(gf::Tensor({n}, 0.0f))}};
    std::vector<double> times, sums(1, 0.0);
    for (int r = 0; r < repeats + 1; ++r) {
      params[0].second.grad_buf() = gf::Tensor({n}, 1.0f);
      comm.barrier();
      auto t0 = std::chrono::steady_clock::now();
      sync.reduce(params, {}, 1.0, sums);
      double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (r > 0) times.push_back(ms);  // the first is a warm-up
      if (params[0].second.grad()[n - 1] != static_cast<float>(comm.size())) {
        std::fprintf(stderr, "wrong sum\n");
        comm.abort(1);
      }
    }
    std::sort(times.begin(), times.end());
    double med = times[times.size() / 2];
    if (comm.root())
      std::printf("%zu,%.3f,%.4f,%.3f\n", n, n * 4.0 / (1 << 20), med, 1e6 * med / n);
  }
  gf::finalize_distributed();
  return 0;
}
