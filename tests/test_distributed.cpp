// The parts of data-parallel training that one process can check: the random stream's jump
// ahead, batch shards, dropout on a shard, the launcher environment, the serial gradient sum,
// and (in a build without MPI) the refusal to run N copies under a launcher.
#include <sys/wait.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "growformer/batch_sampler.hpp"
#include "growformer/data_parallel.hpp"
#include "growformer/distributed.hpp"
#include "growformer/ops.hpp"
#include "testing.hpp"

using namespace gf;

TEST_CASE("Rng::discard(n) leaves the stream where n draws leave it") {
  for (uint64_t n : {0ull, 1ull, 2ull, 7ull, 64ull, 1000ull, 123457ull}) {
    Rng a(42, "dropout"), b(42, "dropout");
    for (uint64_t i = 0; i < n; ++i) a.next_u64();
    b.discard(n);
    CHECK(a.state() == b.state());
    CHECK(a.next_u64() == b.next_u64());
  }
}

TEST_CASE("shard_range: contiguous, in rank order, covering the batch, sizes within one") {
  for (size_t n : {1, 5, 16, 17, 32}) {
    for (int size : {1, 2, 3, 4}) {
      if (static_cast<size_t>(size) > n) continue;
      size_t next = 0, lo = n, hi = 0;
      for (int r = 0; r < size; ++r) {
        auto [b, e] = shard_range(n, r, size);
        CHECK(b == next);
        next = e;
        lo = std::min(lo, e - b);
        hi = std::max(hi, e - b);
      }
      CHECK(next == n);
      CHECK(hi - lo <= 1);
    }
  }
  CHECK(shard_range(5, 0, 2) == std::make_pair<size_t, size_t>(0, 3));
  CHECK(shard_range(5, 1, 2) == std::make_pair<size_t, size_t>(3, 5));
}

TEST_CASE("shard_rows keeps the whole batch's padded length and marks the shard") {
  std::vector<Example> split(3);
  split[0].tokens = {1, 2};
  split[1].tokens = {3, 4, 5, 6, 7};
  split[2].tokens = {8};
  for (int i = 0; i < 3; ++i) split[i].label = i;
  Batch whole = make_batch(split, {0, 1, 2}, 64, 0);
  REQUIRE(whole.seq == 5);
  Batch s = shard_rows(whole, 2, 3);  // the short example alone: still padded to 5
  CHECK(s.batch == 1);
  CHECK(s.seq == 5);
  CHECK(s.ids == std::vector<int32_t>{8, 0, 0, 0, 0});
  CHECK(s.valid == std::vector<uint8_t>{1, 0, 0, 0, 0});
  CHECK(s.labels == std::vector<int32_t>{2});
  CHECK(s.row_offset == 2);
  CHECK(s.global_rows == 3);
}

TEST_CASE("dropout on shards equals dropout on the whole batch, rows for rows") {
  Tensor x = gf_test::randn({5, 3, 4}, 11);
  Rng whole_rng(9, "dropout");
  Tensor whole = ops::dropout(constant(x), 0.3f, whole_rng).value();
  Rng shard_rng(9, "dropout");
  size_t per_row = 12;
  size_t at = 0;
  for (auto [b, e] : {std::pair<size_t, size_t>{0, 2}, {2, 5}}) {
    Rng r = shard_rng;  // each process starts from the same stream state
    Tensor part({e - b, 3, 4});
    std::copy(x.data() + b * per_row, x.data() + e * per_row, part.data());
    Tensor y = ops::dropout(constant(part), 0.3f, r, b, 5 - e).value();
    for (size_t i = 0; i < y.size(); ++i) CHECK(y[i] == whole[at + i]);
    at += y.size();
    // and every process's stream ends where the whole batch's did
    CHECK(r.state() == whole_rng.state());
  }
}

namespace {
struct EnvVar {
  std::string name;
  EnvVar(const std::string& n, const std::string& v) : name(n) { setenv(n.c_str(), v.c_str(), 1); }
  ~EnvVar() { unsetenv(name.c_str()); }
};
}  // namespace

TEST_CASE("the launcher's process count and rank come from the environment") {
  CHECK(launcher_size() == 1);
  {
    EnvVar v("SLURM_STEP_NUM_TASKS", "4"), r("SLURM_PROCID", "3");
    CHECK(launcher_size() == 4);
    CHECK(launcher_rank() == 3);
    CHECK(launcher_variable() == "SLURM_STEP_NUM_TASKS=4");
  }
  {
    EnvVar v("PMI_SIZE", "1");  // one process: nothing to share
    CHECK(launcher_size() == 1);
  }
  {
    EnvVar v("OMPI_COMM_WORLD_SIZE", "two");  // not a number: ignored
    CHECK(launcher_size() == 1);
  }
  {
    EnvVar v("SLURM_NTASKS", "8");  // a batch script outside srun runs once
    CHECK(launcher_size() == 1);
  }
}

TEST_CASE("serial GradientSync: gradients scaled, undefined ones stay undefined, scalars kept") {
  Communicator& serial = serial_communicator();
  GradientSync sync(serial, 3 * sizeof(float));  // buckets of 3 values: tensors straddle them
  NamedParams params = {{"a", parameter(Tensor({2, 2}, 1.0f))},
                        {"b", parameter(Tensor({3}, 1.0f))},
                        {"c", parameter(Tensor({2}, 1.0f))}};
  params[0].second.grad_buf() = Tensor({2, 2}, 2.0f);
  params[2].second.grad_buf() = Tensor({2}, -4.0f);
  std::vector<Var> masks = {parameter(Tensor::scalar(1.0f))};
  masks[0].grad_buf() = Tensor::scalar(8.0f);
  std::vector<double> sums = {1.5, 7};
  sync.reduce(params, masks, 0.5, sums);
  for (size_t i = 0; i < 4; ++i) CHECK(params[0].second.grad()[i] == 1.0f);
  CHECK_FALSE(params[1].second.grad().defined());
  CHECK(params[2].second.grad()[1] == -2.0f);
  CHECK(masks[0].grad()[0] == 4.0f);
  CHECK(sums == std::vector<double>{1.5, 7});
  CHECK(sync.last_elements() == 4 + 2 + 1);
  CHECK(sync.last_buckets() == 3);
}

TEST_CASE("parameters_hash tells names, shapes and values apart") {
  NamedParams a = {{"w", parameter(Tensor({2, 3}, 1.0f))}};
  NamedParams b = {{"w", parameter(Tensor({3, 2}, 1.0f))}};
  NamedParams c = {{"v", parameter(Tensor({2, 3}, 1.0f))}};
  NamedParams d = {{"w", parameter(Tensor({2, 3}, 1.0f))}};
  d[0].second.value()[4] = 1.0001f;
  CHECK(parameters_hash(a, true) != parameters_hash(b, true));
  CHECK(parameters_hash(a, true) != parameters_hash(c, true));
  CHECK(parameters_hash(a, false) == parameters_hash(d, false));
  CHECK(parameters_hash(a, true) != parameters_hash(d, true));
}

TEST_CASE("a build without MPI refuses to train as one of N launched processes") {
  if (mpi_built()) {
    MESSAGE("skipped: this build has MPI (the refusal is for builds without it)");
    return;
  }
  gf_test::TempDir dir;
  std::string out = dir.file("out.txt");
  std::string cmd = "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=0 " + std::string(GF_BIN) +
                    " train " + GF_SOURCE_DIR + "/configs/quickstart.yaml --run-dir " +
                    dir.file("run") + " > " + out + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream in(out);
  std::stringstream text;
  text << in.rdbuf();
  CHECK(WEXITSTATUS(rc) == 2);
  CHECK(text.str().find("built without MPI") != std::string::npos);
  CHECK(text.str().find("OMPI_COMM_WORLD_SIZE=2") != std::string::npos);
  CHECK_FALSE(std::filesystem::exists(dir.file("run")));
}
