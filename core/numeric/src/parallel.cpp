#include "growformer/parallel.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace gf {

namespace {

// Waits of up to kSpinUs are spent awake, polling, before a thread blocks on a condition
// variable: on this project's 2-core VMs a wake-up from the condition variable took about
// 20 us, and a step runs some 400 parallel calls.
constexpr auto kSpinUs = std::chrono::microseconds(50);

// Polls done() (pausing between polls) for up to kSpinUs; true when it held.
template <class F>
bool spin_until(F done) {
  const auto t0 = std::chrono::steady_clock::now();
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    if (i % 64 == 0 && std::chrono::steady_clock::now() - t0 > kSpinUs) return false;
  }
}

// A fixed pool; parallel_for hands out indices through an atomic counter and
// the calling thread works too. Nested calls run serially.
class Pool {
 public:
  ~Pool() { stop(); }

  void resize(size_t n) {
    stop();
    size_ = std::max<size_t>(1, n);
    quit_ = false;
    // New workers start at the current generation: one that started at 0 took the last
    // (finished) job's generation for a new one, ran an extra pass and decremented active_
    // twice in the next run, which then waited forever (seen after set_num_threads).
    const size_t gen = generation_;
    for (size_t i = 1; i < size_; ++i) workers_.emplace_back([this, gen] { loop(gen); });
  }
  size_t size() const { return size_; }

  void run(size_t n, const std::function<void(size_t)>& fn) {
    if (n == 0) return;
    if (size_ <= 1 || n == 1 || in_parallel_) {
      for (size_t i = 0; i < n; ++i) fn(i);
      return;
    }
    std::unique_lock<std::mutex> lock(mu_);
    job_ = &fn;
    n_ = n;
    next_.store(0);
    active_ = workers_.size();
    error_ = nullptr;
    generation_++;
    lock.unlock();
    cv_.notify_all();
    work();
    // the workers' last tasks usually end within microseconds of the caller's
    spin_until([this] { return active_.load(std::memory_order_acquire) == 0; });
    lock.lock();
    done_cv_.wait(lock, [this] { return active_.load() == 0; });
    job_ = nullptr;
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void work() {
    in_parallel_ = true;
    for (;;) {
      size_t i = next_.fetch_add(1);
      if (i >= n_) break;
      try {
        (*job_)(i);
      } catch (...) {
        std::lock_guard<std::mutex> g(err_mu_);
        if (!error_) error_ = std::current_exception();
      }
    }
    in_parallel_ = false;
  }
  void loop(size_t seen) {
    for (;;) {
      // the next call usually comes within microseconds
      spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || generation_ != seen; });
      if (quit_) return;
      seen = generation_;
      lock.unlock();
      work();
      lock.lock();
      if (active_.fetch_sub(1) == 1) done_cv_.notify_all();
    }
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
  }

  size_t size_ = 1;
  std::vector<std::thread> workers_;
  std::mutex mu_, err_mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<void(size_t)>* job_ = nullptr;
  size_t n_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> active_{0};
  std::atomic<size_t> generation_{0};
  bool quit_ = false;
  std::exception_ptr error_;
  static thread_local bool in_parallel_;
};

thread_local bool Pool::in_parallel_ = false;

Pool& pool() {
  static Pool* p = [] {
    auto* q = new Pool();
    q->resize(std::max(1u, std::thread::hardware_concurrency()));
    return q;
  }();
  return *p;
}

}  // namespace

void set_num_threads(size_t n) {
  if (n == 0) n = std::max(1u, std::thread::hardware_concurrency());
  if (n != pool().size()) pool().resize(n);
}

size_t num_threads() { return pool().size(); }

void parallel_for(size_t n, const std::function<void(size_t)>& fn) { pool().run(n, fn); }

void parallel_elementwise(size_t n, const std::function<void(size_t, size_t)>& fn) {
  constexpr size_t kSerial = size_t{1} << 16;  // below this one thread is faster
  if (n < kSerial) {
    if (n) fn(0, n);
    return;
  }
  parallel_chunks(n, kSerial / 4, fn);
}

namespace {
// Chunks of whole grains (callers choose the grain as their kernels' unit), PER_THREAD of
// them per thread, handed out in turn.
void run_chunks(size_t n, size_t grain, size_t per_thread,
                const std::function<void(size_t, size_t)>& fn) {
  if (n == 0) return;
  grain = std::max<size_t>(1, grain);
  const size_t nt = num_threads();
  size_t chunks = std::min(nt > 1 ? per_thread * nt : 1, (n + grain - 1) / grain);
  chunks = std::max<size_t>(1, chunks);
  const size_t per = ((n + chunks - 1) / chunks + grain - 1) / grain * grain;
  chunks = (n + per - 1) / per;
  pool().run(chunks, [&](size_t c) {
    size_t b = c * per, e = std::min(n, b + per);
    if (b < e) fn(b, e);
  });
}
}  // namespace

// Four chunks per thread: the two cores of these VMs often ran at different speeds (one
// busy on the host), and with one fixed half each the faster thread waited for the slower
// at the end of every call (the caller's waits in a 20-step hkt bench: 178..674 ms in two
// runs of the old split, 56..330 ms with four chunks a thread).
void parallel_chunks(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  run_chunks(n, grain, 4, fn);
}

void parallel_chunks_even(size_t n, size_t grain, const std::function<void(size_t, size_t)>& fn) {
  run_chunks(n, grain, 1, fn);
}

}  // namespace gf
