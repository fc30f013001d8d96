#include "growformer/distributed.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "growformer/errors.hpp"

namespace gf {

#ifdef GROWFORMER_HAVE_MPI
// core/src/mpi/communicator_mpi.cpp: MPI_Init_thread on creation, MPI_Finalize on finalize().
std::unique_ptr<Communicator> make_mpi_communicator();
void finalize_mpi();
#endif

Communicator::~Communicator() = default;

void Communicator::broadcast(std::string& text, int root) {
  uint64_t n = text.size();
  broadcast(&n, sizeof n, root);
  text.resize(n);
  if (n) broadcast(text.data(), n, root);
}

bool Communicator::broadcast(bool flag, int root) {
  uint8_t v = flag ? 1 : 0;
  broadcast(&v, 1, root);
  return v != 0;
}

namespace {

class SerialCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int local_size() const override { return 1; }
  std::string backend() const override { return "serial"; }
  void allreduce_sum(float*, size_t) override {}
  void allreduce_sum(double*, size_t) override {}
  void broadcast(void*, size_t, int) override {}
  bool all_equal(uint64_t) override { return true; }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

// The variables launchers set to the number of processes of the job. SLURM_NTASKS is not one
// of them: a batch script sees it once, outside any `srun`; srun sets SLURM_STEP_NUM_TASKS.
const char* const kSizeVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE",
                                      "MV2_COMM_WORLD_SIZE", "SLURM_STEP_NUM_TASKS"};

std::mutex g_mutex;
std::unique_ptr<Communicator> g_world;
bool g_mpi_started = false;

}  // namespace

bool mpi_built() {
#ifdef GROWFORMER_HAVE_MPI
  return true;
#else
  return false;
#endif
}

std::string launcher_variable() {
  for (const char* name : kSizeVariables) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    long n = std::strtol(v, &end, 10);
    if (end && *end == '\0' && n > 1) return std::string(name) + "=" + v;
  }
  return "";
}

long launcher_rank() {
  for (const char* name :
       {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "MV2_COMM_WORLD_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    long r = std::strtol(v, &end, 10);
    if (end && *end == '\0' && r >= 0) return r;
  }
  return 0;
}

long launcher_size() {
  std::string var = launcher_variable();
  if (var.empty()) return 1;
  return std::strtol(var.c_str() + var.find('=') + 1, nullptr, 10);
}

Communicator& serial_communicator() {
  static SerialCommunicator serial;
  return serial;
}

Communicator& world() {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world) return *g_world;
  long n = launcher_size();
  if (n > 1) {
#ifdef GROWFORMER_HAVE_MPI
    g_world = make_mpi_communicator();
    g_mpi_started = true;
    return *g_world;
#else
    throw ConfigError("started as one of " + std::to_string(n) + " processes (" +
                      launcher_variable() +
                      ") but this growformer was built without MPI, so the processes would run " +
                      std::to_string(n) +
                      " independent copies of the same job. Install MPI (Debian: apt-get install "
                      "libopenmpi-dev openmpi-bin), configure and build again, or run one process");
#endif
  }
  g_world = std::make_unique<SerialCommunicator>();
  return *g_world;
}

size_t cores_per_process() {
  size_t cores = std::max(1u, std::thread::hardware_concurrency());
  std::lock_guard<std::mutex> lock(g_mutex);
  size_t local = g_world ? static_cast<size_t>(std::max(1, g_world->local_size())) : 1;
  return std::max<size_t>(1, cores / local);
}

int world_size_if_started() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_world ? g_world->size() : 1;
}

int world_rank_if_started() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_world ? g_world->rank() : 0;
}

void abort_if_distributed(int code) {
  Communicator* w = nullptr;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    w = g_world.get();
  }
  if (w && w->size() > 1) w->abort(code);
}

void finalize_distributed() {
#ifdef GROWFORMER_HAVE_MPI
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_mpi_started) finalize_mpi();
  g_mpi_started = false;
#endif
}

}  // namespace gf
