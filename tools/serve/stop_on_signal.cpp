#include "tools/serve/stop_on_signal.h"

#include <fcntl.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>

#include "shared/util/error.h"

namespace waste::serve {
namespace {

// One pipe per process: the handler's only resource. Never closed: a handler that started just
// before the destructor ignored the signals may still write to it, and a closed (or reused)
// descriptor would take that byte elsewhere. The process's exit closes it. The write end is an
// atomic because the handler reads it on whatever thread the signal lands on.
int g_read_end = -1;
std::atomic<int> g_write_end{-1};
static_assert(std::atomic<int>::is_always_lock_free, "the handler may only touch lock-free atomics");

void on_stop_signal(int) {
  const int saved = errno;  // the interrupted code's errno is not the handler's to change
  const char b = 0;
  // A full pipe already holds a wake-up for the watcher: the byte is not needed.
  [[maybe_unused]] const ssize_t n = ::write(g_write_end.load(), &b, 1);
  errno = saved;
}

void set_handler(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  // SA_RESTART is load-bearing: httplib's listen loop takes any accept() error but EMFILE as
  // the end of listening (serve would exit 1, "listening failed"), and the signal may land on
  // its thread; restarted, accept() never sees EINTR.
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

// Reads what the pipe holds without waiting; returns whether it held anything. A byte is only a
// wake-up: a handler's or the destructor's (which sets quit_ first), told apart by quit_.
bool drain_pipe() {
  bool signalled = false;
  char buf[64];
  for (ssize_t n; (n = ::read(g_read_end, buf, sizeof buf)) != 0;) {
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // EAGAIN: empty
    }
    signalled = true;
  }
  return signalled;
}

}  // namespace

StopOnSignal::StopOnSignal(std::function<bool()> try_stop) : try_stop_(std::move(try_stop)) {
  if (g_read_end < 0) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0)
      throw Error(std::string("serve: cannot create the pipe for SIGTERM/SIGINT: ") + std::strerror(errno));
    g_read_end = fds[0];
    g_write_end.store(fds[1]);
  }
  drain_pipe();  // a byte a late handler wrote for an earlier instance is not this one's signal
  watcher_ = std::thread([this] { watch(); });
  set_handler(on_stop_signal);
}

StopOnSignal::~StopOnSignal() {
  // From here a signal does nothing: the server is stopping or stopped, and after this object
  // it may be gone.
  set_handler(SIG_IGN);
  quit_.store(true);
  // Wakes the watcher. A full pipe (EAGAIN) wakes it as well; it then sees quit_.
  const char b = 0;
  while (::write(g_write_end.load(), &b, 1) < 0 && errno == EINTR) {
  }
  watcher_.join();
}

void StopOnSignal::watch() {
  bool stopped = false;
  while (!quit_.load()) {
    pollfd p{g_read_end, POLLIN, 0};
    const bool retrying = requested_.load() && !stopped;
    const int r = ::poll(&p, 1, retrying ? kRetryMs : -1);
    if (r < 0 && errno != EINTR) {
      spdlog::error("serve: waiting for SIGTERM/SIGINT failed ({}): the signals no longer stop the server",
                    std::strerror(errno));
      return;
    }
    if (r > 0 && drain_pipe() && !quit_.load()) requested_.store(true);
    if (requested_.load() && !stopped && !quit_.load()) stopped = try_stop_();
  }
}

}  // namespace waste::serve
