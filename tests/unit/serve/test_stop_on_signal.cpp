// StopOnSignal (tools/serve/stop_on_signal.h): SIGTERM/SIGINT become calls of a stop function
// on a thread of its own, retried until it succeeds, and nothing at all once it is destroyed.
#include "tools/serve/stop_on_signal.h"

#include <doctest/doctest.h>

#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>

namespace {

// The test runner's own SIGTERM/SIGINT handlers (tests/test_main.cpp), put back when a case ends.
struct KeepSignalHandlers {
  struct sigaction term {}, intr {};
  KeepSignalHandlers() {
    ::sigaction(SIGTERM, nullptr, &term);
    ::sigaction(SIGINT, nullptr, &intr);
  }
  ~KeepSignalHandlers() {
    ::sigaction(SIGTERM, &term, nullptr);
    ::sigaction(SIGINT, &intr, nullptr);
  }
};

// try_stop's calls, counted; it succeeds from call number `succeed_at` on (0: never).
struct StopCalls {
  std::mutex mu;
  std::condition_variable cv;
  int calls = 0;
  int succeed_at = 0;
  std::function<bool()> fn() {
    return [this] {
      std::lock_guard lock(mu);
      ++calls;
      cv.notify_all();
      return succeed_at != 0 && calls >= succeed_at;
    };
  }
  bool wait_calls(int n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::seconds(10), [&] { return calls >= n; });
  }
  int count() {
    std::lock_guard lock(mu);
    return calls;
  }
};

bool ignored(int sig) {
  struct sigaction now {};
  ::sigaction(sig, nullptr, &now);
  return now.sa_handler == SIG_IGN;
}

}  // namespace

TEST_CASE("stop on signal: a stop that cannot succeed yet is retried until it does, then never called again") {
  KeepSignalHandlers keep;
  StopCalls calls;
  calls.succeed_at = 3;  // the server "starts running" at the third try
  {
    waste::serve::StopOnSignal stop(calls.fn());
    CHECK_FALSE(stop.requested());
    CHECK_EQ(calls.count(), 0);  // no signal, no call
    REQUIRE(std::raise(SIGTERM) == 0);
    REQUIRE(calls.wait_calls(3));
    CHECK(stop.requested());
    // Signals after the stop succeeded: seen, never another call.
    REQUIRE(std::raise(SIGINT) == 0);
    REQUIRE(std::raise(SIGTERM) == 0);
  }
  // The destructor joined the watcher: the count is final.
  CHECK_EQ(calls.count(), 3);
}

TEST_CASE("stop on signal: once destroyed, a signal neither ends the process nor calls the stop") {
  KeepSignalHandlers keep;
  StopCalls calls;
  calls.succeed_at = 1;
  { waste::serve::StopOnSignal stop(calls.fn()); }
  CHECK(ignored(SIGTERM));
  CHECK(ignored(SIGINT));
  REQUIRE(std::raise(SIGTERM) == 0);  // ignored: with the default action the runner would end here
  REQUIRE(std::raise(SIGINT) == 0);
  CHECK_EQ(calls.count(), 0);
}

TEST_CASE("stop on signal: the destructor ends a watcher that is still retrying") {
  KeepSignalHandlers keep;
  StopCalls calls;  // never succeeds: the server never ran
  {
    waste::serve::StopOnSignal stop(calls.fn());
    REQUIRE(std::raise(SIGINT) == 0);
    REQUIRE(calls.wait_calls(2));  // retrying
  }
  CHECK_GE(calls.count(), 2);  // reached only if the destructor returned
}
