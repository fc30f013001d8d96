// Ctrl-C and SIGTERM. The handlers set a flag that the training loop reads at the end of a step
// (it writes the step's checkpoint and stops, exit status 130) and evaluation reads before each
// batch (it throws `Interrupted`). A call into a plugin can hang where no flag is read: a growth
// policy stuck in its check, a Python module stuck at import. Such calls run inside an
// `AbandonableCall`; once the flag has been set for a second (kInterruptGrace) while one is still
// running, a watchdog thread ends the process: it prints what did not return and the run's
// `interrupt_note` (the checkpoint a resume continues from) and exits with status 130. Nothing is
// lost that a step-end stop would have kept: the call was part of a step that had no checkpoint
// yet, and every checkpoint and log line already written is whole (each is written in one piece).
#pragma once
#include "growformer/export.hpp"

#include <chrono>
#include <string>

#include "growformer/errors.hpp"

GROWFORMER_API_BEGIN

namespace gf {

/// Installs the SIGINT and SIGTERM handlers (and the watchdog thread, once).
void install_interrupt_handler();

/// Whether SIGINT or SIGTERM arrived since the handler was installed.
bool interrupted();

/// Sets the flag as the handlers do (tests, and a caller that stops a run on its own terms).
void request_interrupt();

/// How long a call may go on after the flag is set before the watchdog ends the process.
constexpr std::chrono::milliseconds kInterruptGrace{1000};

/// What evaluation throws when the flag is set: the caller stops with status 130.
class Interrupted : public RuntimeError {
 public:
  explicit Interrupted(const std::string& where);
  ~Interrupted() override;
};

/// While it lives, the calling thread is in a call the watchdog may abandon; WHAT names it
/// ("the growth policy `python` in check() at step 12").
class AbandonableCall {
 public:
  explicit AbandonableCall(std::string what);
  ~AbandonableCall();
  AbandonableCall(const AbandonableCall&) = delete;
  AbandonableCall& operator=(const AbandonableCall&) = delete;

 private:
  size_t id_;
};

/// The sentence the watchdog adds about the run (the last checkpoint and how to resume); "" for
/// none.
void set_interrupt_note(std::string note);

}  // namespace gf

GROWFORMER_API_END
