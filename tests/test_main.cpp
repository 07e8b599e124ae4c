// The main of every doctest binary. A part of a test that cannot run here (no io_uring, not
// root, no npm client) calls waste::test::skip_part(why) instead of passing quietly: after the
// run the binary lists what was skipped and exits 77, so meson reports the suite as SKIP (never
// as a pass) unless something failed, which still fails it.
#define DOCTEST_CONFIG_IMPLEMENT
// doctest's own handlers for fatal signals allocate and format inside the handler (TSan reports
// each as a signal-unsafe call), and for SIGINT/SIGTERM they stand in front of ours below, which
// undo the outside resources. Without them a crash is reported by the kernel's exit status (and
// a sanitizer's own report); a stop signal reaches watch_stop_signals directly.
#define DOCTEST_CONFIG_NO_POSIX_SIGNALS
#include <doctest/doctest.h>

#include <signal.h>
#include <unistd.h>

#include <fcntl.h>

#include <cerrno>
#include <cstdio>
#include <map>
#include <mutex>
#include <thread>

#include "tests/skip.h"
#include "tests/teardown.h"

namespace waste::test {

std::vector<std::string>& skipped_parts() {
  static std::vector<std::string> parts;
  return parts;
}

void skip_part(const std::string& why) {
  skipped_parts().push_back(why);
  std::fprintf(stderr, "SKIPPED PART: %s\n", why.c_str());
}

namespace {

std::mutex teardown_mu;
std::map<uint64_t, std::function<void()>>& teardowns() {
  static std::map<uint64_t, std::function<void()>> t;
  return t;
}
uint64_t next_teardown = 1;
int signal_pipe[2] = {-1, -1};

// Async-signal-safe: only the write. The watcher thread does the rest.
extern "C" void on_stop_signal(int sig) {
  const unsigned char b = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = ::write(signal_pipe[1], &b, 1);
}

// A handler rather than a blocked mask and sigwait: a mask is inherited by every child the
// tests start (the supervisor could then never be stopped), a handler is reset by exec.
void watch_stop_signals() {
  if (::pipe2(signal_pipe, O_CLOEXEC) != 0) return;
  std::thread([] {
    unsigned char sig = 0;
    while (::read(signal_pipe[0], &sig, 1) != 1)
      if (errno != EINTR) return;
    std::map<uint64_t, std::function<void()>> undo;
    {
      std::lock_guard lk(teardown_mu);
      undo.swap(teardowns());
    }
    std::fprintf(stderr, "\ninterrupted by signal %d: undoing %zu outside resource(s) first\n", int(sig), undo.size());
    for (auto& [id, f] : undo) f();
    ::signal(sig, SIG_DFL);
    ::raise(sig);
    ::_exit(128 + sig);
  }).detach();
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  ::sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
}

}  // namespace

uint64_t register_teardown(std::function<void()> undo) {
  std::lock_guard lk(teardown_mu);
  const uint64_t id = next_teardown++;
  teardowns()[id] = std::move(undo);
  return id;
}

void unregister_teardown(uint64_t handle) {
  std::lock_guard lk(teardown_mu);
  teardowns().erase(handle);
}

}  // namespace waste::test

int main(int argc, char** argv) {
  waste::test::watch_stop_signals();
  doctest::Context ctx(argc, argv);
  const int failed = ctx.run();
  if (failed != 0 || ctx.shouldExit()) return failed;
  const auto& parts = waste::test::skipped_parts();
  if (parts.empty()) return 0;
  std::fprintf(stderr, "SKIP: %zu part(s) of this suite could not run here:\n", parts.size());
  for (const auto& p : parts) std::fprintf(stderr, "  - %s\n", p.c_str());
  return 77;
}
