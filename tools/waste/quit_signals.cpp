#include "tools/waste/quit_signals.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "shared/util/error.h"

namespace waste::cli::quit {

std::atomic<bool> generating{false};
std::atomic<bool> cancel{false};
std::atomic<bool> requested{false};
std::atomic<int> signal_number{0};

namespace {

int g_wake[2] = {-1, -1};  // self-pipe: wakes chat's prompt poll()

void on_signal(int sig) {
  const int saved_errno = errno;  // write() below may change it under the interrupted code
  if (sig == SIGINT && generating.load()) {
    cancel.store(true);
    errno = saved_errno;
    return;
  }
  // A second quit signal while the first waits for a long step (loading the trunk, a prompt's
  // prefill, eval's forward) to end: the user means now. The default action ends the process
  // (a private iod follows through its parent-death signal); both calls are async-signal-safe.
  if (requested.load()) {
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    return;
  }
  signal_number.store(sig);
  requested.store(true);
  cancel.store(true);  // a SIGTERM during a reply ends the reply too
  if (g_wake[1] >= 0) {
    const char c = 1;
    if (::write(g_wake[1], &c, 1) < 0) {
    }  // the pipe is full: a wake-up is pending anyway
  }
  errno = saved_errno;
}

}  // namespace

int wake_fd() { return g_wake[0]; }

void install(Syscalls s) {
  if (g_wake[0] < 0) require(::pipe2(g_wake, O_CLOEXEC | O_NONBLOCK) == 0, "cannot create a pipe for signals");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = s == Syscalls::Restarted ? SA_RESTART : 0;
  // SIGHUP: the terminal closed, leave the same way. A signal the caller set to be ignored
  // stays ignored (nohup, or a shell's background job that must survive its Ctrl-C).
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    ::sigaction(sig, &sa, nullptr);
  }
}

void exit_by_signal(int sig) {
  std::fflush(stdout);
  std::fflush(stderr);
  ::signal(sig, SIG_DFL);
  ::raise(sig);
  std::_Exit(128 + sig);  // not reached: the default action of these signals ends the process
}

void run_until_signal(const std::function<void()>& body) {
  install(Syscalls::Restarted);
  try {
    body();
  } catch (...) {
    if (requested.load()) exit_by_signal(signal_number.load());
    throw;
  }
  if (requested.load()) exit_by_signal(signal_number.load());
}

}  // namespace waste::cli::quit
