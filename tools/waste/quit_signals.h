// How `waste chat`, `waste run` and `waste bench` leave on SIGINT, SIGTERM and SIGHUP. The
// handler only sets the flags below (and writes to a self-pipe that chat's prompt polls); the
// command notices them between tokens, returns, and its destructors stop what it started (a
// private instance or iod, the run directory, shared memory, timeline parts). Only then does it
// end the way the signal would have (exit_by_signal: the shell sees 128 + signal). Dying at
// once, the default action, would leave all of that behind.
#pragma once
#include <atomic>
#include <functional>

namespace waste::cli::quit {

extern std::atomic<bool> generating;  // chat: a reply streams, so SIGINT cancels it instead of leaving
extern std::atomic<bool> cancel;      // end the reply being generated (chat: polled by Session::generate)
extern std::atomic<bool> requested;   // leave: SIGTERM, SIGHUP, or SIGINT outside a chat reply
extern std::atomic<int> signal_number;  // which, to re-raise after cleaning up

// The read end of the self-pipe the handler writes a byte to on a quit (-1 before install()).
int wake_fd();

// Interrupted: a blocking call returns EINTR, so chat's prompt sees the flags at once.
// Restarted (SA_RESTART): the engine's socket reads to iod carry on unharmed; the command looks
// at the flags between tokens instead.
enum class Syscalls { Interrupted, Restarted };
void install(Syscalls s);

// After cleaning up: ends this process by `sig` with its default action.
[[noreturn]] void exit_by_signal(int sig);

// For a command that does not read stdin (run, bench): installs the handlers (Restarted), runs
// `body`, and when a quit signal arrived meanwhile ends by it once body has returned or thrown
// (its destructors have then cleaned up; an error it threw because of the signal is not shown).
void run_until_signal(const std::function<void()>& body);

}  // namespace waste::cli::quit
