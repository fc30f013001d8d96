// The processes of a data-parallel run. A small communicator interface (rank, size, sums of
// float/double buffers, broadcast, an equality check across ranks, barrier) with a serial
// implementation, and an MPI one compiled in only when the build found MPI. mpi.h stays out of
// this header: plugins and apps never see it.
#pragma once
#include "growformer/export.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

GROWFORMER_API_BEGIN

namespace gf {

class Communicator {
 public:
  virtual ~Communicator();
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Ranks sharing this machine (they share its cores).
  virtual int local_size() const = 0;
  /// "serial" or the MPI library's name and version.
  virtual std::string backend() const = 0;
  /// Element-wise sums across ranks, in place; every rank gets the same result.
  virtual void allreduce_sum(float* data, size_t n) = 0;
  virtual void allreduce_sum(double* data, size_t n) = 0;
  /// BYTES bytes of ROOT's DATA to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  /// True on every rank when every rank passed the same VALUE, false on every rank otherwise.
  virtual bool all_equal(uint64_t value) = 0;
  virtual void barrier() = 0;
  /// Ends every rank at once with exit status CODE (after an error on some ranks, which others
  /// would otherwise wait for). Serial: std::exit(CODE).
  [[noreturn]] virtual void abort(int code) = 0;

  bool root() const { return rank() == 0; }
  /// ROOT's string on every rank.
  void broadcast(std::string& text, int root = 0);
  /// ROOT's flag on every rank.
  bool broadcast(bool flag, int root = 0);
};

/// True when the program was built with MPI.
bool mpi_built();

/// The number of processes a launcher (mpirun/mpiexec, srun) started for this job, read from
/// the environment (OMPI_COMM_WORLD_SIZE, PMI_SIZE, PMIX_SIZE, MV2_COMM_WORLD_SIZE,
/// SLURM_STEP_NUM_TASKS); 1 when none did.
long launcher_size();
/// This process's rank among them from the environment (OMPI_COMM_WORLD_RANK, PMI_RANK,
/// PMIX_RANK, MV2_COMM_WORLD_RANK, SLURM_PROCID); 0 when none is set.
long launcher_rank();
/// The launcher variable that gave launcher_size() (e.g. "OMPI_COMM_WORLD_SIZE=2"), "" for 1.
std::string launcher_variable();

/// The process's communicator. Started by a launcher with more than one process and built with
/// MPI: MPI's world (initialised on the first call). Otherwise the serial communicator; a
/// launcher with more than one process and no MPI in the build is a ConfigError, so that N
/// processes never run N independent copies of one job.
Communicator& world();
/// The serial communicator (rank 0 of 1), for work that is single-process by design.
Communicator& serial_communicator();
/// The machine's cores divided among world()'s processes on this machine (at least 1); all of
/// them when world() was not created or runs one process here.
size_t cores_per_process();
/// Finalises MPI if world() initialised it (call once, at a normal exit).
void finalize_distributed();
/// The size of world() when it was already created, else 1 (never initialises MPI).
int world_size_if_started();
/// World's rank when it was already created, else 0.
int world_rank_if_started();
/// Ends every rank with CODE when world() runs more than one process; returns otherwise.
void abort_if_distributed(int code);

}  // namespace gf

GROWFORMER_API_END
