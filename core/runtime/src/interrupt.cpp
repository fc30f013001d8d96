#include "growformer/interrupt.hpp"

#include <semaphore.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <map>
#include <mutex>
#include <thread>

namespace gf {

namespace {
using Clock = std::chrono::steady_clock;

std::atomic<bool> g_interrupted{false};
std::atomic<bool> g_installed{false};
sem_t g_wake;  // posted by the handler (sem_post is async-signal-safe); the watchdog waits on it

struct Call {
  std::string what;
  Clock::time_point since;
};
struct Calls {
  std::mutex mu;
  std::map<size_t, Call> running;  // by id: calls may come from several threads
  size_t next = 0;
  std::string note;
};
Calls& calls() {
  static Calls* c = new Calls;  // never destroyed: the watchdog may read it while exit runs
  return *c;
}

void on_signal(int) {
  g_interrupted = true;
  if (g_installed) sem_post(&g_wake);
}

[[noreturn]] void abandon(const Call& c, const std::string& note) {
  std::string msg = "growformer: interrupted: " + c.what + " did not return within " +
                    std::to_string(kInterruptGrace.count()) +
                    " ms of the signal, so the process stops without it (exit status 130)." +
                    (note.empty() ? std::string() : " " + note) + "\n";
  for (size_t at = 0; at < msg.size();) {
    ssize_t n = ::write(STDERR_FILENO, msg.data() + at, msg.size() - at);
    if (n <= 0) break;
    at += static_cast<size_t>(n);
  }
  ::_exit(130);
}

// Waits for the first signal, then ends the process once a call has gone on for the grace
// period after it (or after the call began, for a call begun later).
void watchdog() {
  while (sem_wait(&g_wake) != 0) {
  }
  const Clock::time_point seen = Clock::now();
  for (;;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Calls& c = calls();
    std::lock_guard<std::mutex> lock(c.mu);
    for (const auto& [id, call] : c.running)
      if (Clock::now() - std::max(seen, call.since) >= kInterruptGrace) abandon(call, c.note);
  }
}
}  // namespace

void install_interrupt_handler() {
  static std::once_flag once;
  std::call_once(once, [] {
    sem_init(&g_wake, 0, 0);
    std::thread(watchdog).detach();
    g_installed = true;
  });
  std::signal(SIGINT, on_signal);
  std::signal(SIGTERM, on_signal);
}

bool interrupted() { return g_interrupted.load(); }

void request_interrupt() { on_signal(0); }

Interrupted::Interrupted(const std::string& where)
    : RuntimeError("interrupted (Ctrl-C or SIGTERM) " + where) {}
Interrupted::~Interrupted() = default;

AbandonableCall::AbandonableCall(std::string what) {
  Calls& c = calls();
  std::lock_guard<std::mutex> lock(c.mu);
  id_ = c.next++;
  c.running.emplace(id_, Call{std::move(what), Clock::now()});
}

AbandonableCall::~AbandonableCall() {
  Calls& c = calls();
  std::lock_guard<std::mutex> lock(c.mu);
  c.running.erase(id_);
}

void set_interrupt_note(std::string note) {
  Calls& c = calls();
  std::lock_guard<std::mutex> lock(c.mu);
  c.note = std::move(note);
}

}  // namespace gf
