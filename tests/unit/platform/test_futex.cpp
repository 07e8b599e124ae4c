// shared/platform/futex.h: a wait returns at once when the word differs, times out when nobody
// changes it, and is woken by another *process* (the futex must not be process-private: iod
// wakes compute through a word in the shared segment).
#include <doctest/doctest.h>

#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "shared/platform/futex.h"
#include "tests/support/child_process.h"

using namespace waste::platform;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

TEST_CASE("futex_wait_shared: a differing word returns at once, an unchanged one times out") {
  uint32_t word = 7;
  auto t0 = Clock::now();
  CHECK(futex_wait_shared(&word, 8, 5'000'000'000));  // 7 != 8: no sleep at all
  CHECK_LT(seconds_since(t0), 1.0);
  t0 = Clock::now();
  CHECK_FALSE(futex_wait_shared(&word, 7, 20'000'000));  // 20 ms, nobody wakes it
  CHECK_GE(seconds_since(t0), 0.015);
}

TEST_CASE("futex_wake_shared from another process wakes a waiter on a shared mapping") {
  void* mem = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  REQUIRE(mem != MAP_FAILED);
  auto* word = static_cast<uint32_t*>(mem);
  *word = 0;
  waste::test::OwnedPid child(::fork());  // killed and reaped should a check below throw first
  REQUIRE(child.get() >= 0);
  if (child.get() == 0) {
    // Late enough that the parent is most likely asleep in the kernel by then.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    std::atomic_ref<uint32_t>(*word).store(1, std::memory_order_release);
    futex_wake_shared(word);
    ::_exit(0);
  }
  // Bounded: 10 s in all. A wake that does not cross processes leaves the parent asleep until
  // then, which the elapsed-time check catches.
  const auto t0 = Clock::now();
  while (std::atomic_ref<uint32_t>(*word).load(std::memory_order_acquire) == 0 && seconds_since(t0) < 10.0)
    futex_wait_shared(word, 0, 10'000'000'000);
  const double waited = seconds_since(t0);
  int status = 0;
  REQUIRE(child.reap(&status));
  CHECK(WIFEXITED(status));
  CHECK_EQ(std::atomic_ref<uint32_t>(*word).load(), 1u);
  CHECK_LT(waited, 5.0);
  ::munmap(mem, 4096);
}
