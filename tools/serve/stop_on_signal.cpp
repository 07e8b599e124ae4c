#include "stop_on_signal.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <fcntl.h>

#include "shared/util/error.h"

namespace waste::serve {
namespace {

// One pipe per process: the handler's only resource. Never closed: a handler that started just
// before the destructor ignored the signals may still write to it, and a closed (or reused)
// descriptor would take that byte elsewhere. The process's exit closes it.
int g_pipe[2] = {-1, -1};

constexpr char kSignalled = 's';
constexpr char kQuit = 'q';

extern "C" void on_stop_signal(int) {
  const int saved = errno;  // the interrupted code's errno is not the handler's to change
  const char b = kSignalled;
  [[maybe_unused]] const ssize_t n = ::write(g_pipe[1], &b, 1);  // full pipe: a stop is pending anyway
  errno = saved;
}

}  // namespace

StopOnSignal::StopOnSignal(std::function<bool()> try_stop) : try_stop_(std::move(try_stop)) {
  if (g_pipe[0] < 0 && ::pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK) != 0)
    throw Error(std::string("serve: cannot create the signal pipe: ") + std::strerror(errno));
  watcher_ = std::thread([this] { watch(); });
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGTERM, &sa, nullptr);
  ::sigaction(SIGINT, &sa, nullptr);
}

StopOnSignal::~StopOnSignal() {
  // From here a signal does nothing: the server is stopping or stopped, and after this object
  // it may be gone.
  std::signal(SIGTERM, SIG_IGN);
  std::signal(SIGINT, SIG_IGN);
  const char b = kQuit;
  while (::write(g_pipe[1], &b, 1) < 0 && errno == EINTR) {
  }
  watcher_.join();
}

void StopOnSignal::watch() {
  // How often a requested stop is tried again while the server is not running yet.
  constexpr int kRetryMs = 10;
  bool stopped = false;
  for (;;) {
    pollfd p{g_pipe[0], POLLIN, 0};
    const bool retrying = requested_.load() && !stopped;
    const int r = ::poll(&p, 1, retrying ? kRetryMs : -1);
    if (r < 0 && errno != EINTR) return;  // cannot happen with a valid pipe; nothing to wait on
    char buf[64];
    const ssize_t n = r > 0 ? ::read(g_pipe[0], buf, sizeof buf) : 0;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] == kQuit) return;
      if (buf[i] == kSignalled) requested_.store(true);
    }
    if (requested_.load() && !stopped) stopped = try_stop_();
  }
}

}  // namespace waste::serve
