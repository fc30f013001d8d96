// The MPI communicator (compiled only when CMake found MPI): MPI_COMM_WORLD, initialised with
// MPI_THREAD_FUNNELED (only the main thread calls MPI; the worker pool never does).
#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <memory>
#include <string>

#include "growformer/distributed.hpp"
#include "growformer/errors.hpp"

namespace gf {

namespace {

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw RuntimeError(std::string("MPI: ") + what + " failed: " + std::string(msg, len));
}

// MPI counts are int: long buffers go in pieces of at most 2^30 elements.
constexpr size_t kMaxCount = size_t(1) << 30;

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator() {
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    }
    // errors come back as codes (and become exceptions) instead of aborting inside MPI
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    MPI_Comm local;
    check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
          "MPI_Comm_split_type");
    MPI_Comm_size(local, &local_size_);
    MPI_Comm_free(&local);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, len);
    backend_ = "MPI (" + v.substr(0, v.find_first_of(",\n")) + ")";
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int local_size() const override { return local_size_; }
  std::string backend() const override { return backend_; }

  void allreduce_sum(float* data, size_t n) override {
    for (size_t off = 0; off < n; off += kMaxCount)
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kMaxCount, n - off)),
                          MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  }
  void allreduce_sum(double* data, size_t n) override {
    for (size_t off = 0; off < n; off += kMaxCount)
      check(MPI_Allreduce(MPI_IN_PLACE, data + off, static_cast<int>(std::min(kMaxCount, n - off)),
                          MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD),
            "MPI_Allreduce");
  }
  void broadcast(void* data, size_t bytes, int root) override {
    char* p = static_cast<char*>(data);
    for (size_t off = 0; off < bytes; off += kMaxCount)
      check(MPI_Bcast(p + off, static_cast<int>(std::min(kMaxCount, bytes - off)), MPI_BYTE, root,
                      MPI_COMM_WORLD),
            "MPI_Bcast");
  }
  bool all_equal(uint64_t value) override {
    uint64_t lo = value, hi = value;
    check(MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD),
          "MPI_Allreduce");
    check(MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD),
          "MPI_Allreduce");
    return lo == hi;
  }
  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  int rank_ = 0, size_ = 1, local_size_ = 1;
  std::string backend_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() {
  return std::make_unique<MpiCommunicator>();
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace gf
