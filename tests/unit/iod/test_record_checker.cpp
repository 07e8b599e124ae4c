// The record checker: what the io_uring thread reaped reaches `done` on another thread, in the
// order it landed, all of it by stop(); a completion after stop() is still handed over.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

#include "iod/io/record_checker.h"

using namespace waste::iod;

TEST_CASE("record checker: completions reach done off the caller's thread, in order, all of them by stop()") {
  constexpr uint32_t kSlots = 8;
  std::mutex mu;
  std::condition_variable cv;
  std::vector<uint32_t> order;
  std::vector<int64_t> results;
  std::atomic<int> on_caller{0};
  const auto caller = std::this_thread::get_id();
  RecordChecker checker(kSlots, [&](const ReadJob& j, int64_t r, uint64_t ns) {
    if (std::this_thread::get_id() == caller) ++on_caller;
    std::lock_guard lock(mu);
    order.push_back(j.slot);
    results.push_back(r + int64_t(ns));
    cv.notify_all();
  });
  // Three rounds of every slot (a slot is read again only after its last read was handed over
  // in the store; the checker's ring holds one entry a slot, so rounds may overlap here only
  // as far as that bound allows: wait until a round is drained before the next).
  for (int round = 0; round < 3; ++round) {
    for (uint32_t s = 0; s < kSlots; ++s) {
      ReadJob j;
      j.slot = s;
      checker.landed(j, 100 * round + s, 1);
    }
    std::unique_lock lock(mu);
    REQUIRE(cv.wait_for(lock, std::chrono::seconds(10), [&] { return order.size() == size_t(kSlots) * (round + 1); }));
  }
  checker.stop();
  REQUIRE_EQ(order.size(), size_t(3 * kSlots));
  for (size_t i = 0; i < order.size(); ++i) {
    CHECK_EQ(order[i], uint32_t(i % kSlots));
    CHECK_EQ(results[i], int64_t(100 * (i / kSlots) + i % kSlots + 1));
  }
  CHECK_EQ(on_caller.load(), 0);
  // After stop() (an engine that outlived it): handed over at once, on the caller's thread.
  ReadJob late;
  late.slot = 3;
  checker.landed(late, 7, 0);
  REQUIRE_EQ(order.size(), size_t(3 * kSlots + 1));
  CHECK_EQ(order.back(), 3u);
  CHECK_EQ(on_caller.load(), 1);
}

TEST_CASE("record checker: stop() hands over what is still queued before the thread ends") {
  // done blocks on the first completion until all are queued, so stop() finds a full ring.
  constexpr uint32_t kSlots = 4;
  std::mutex gate;
  gate.lock();
  std::vector<uint32_t> order;
  RecordChecker checker(kSlots, [&](const ReadJob& j, int64_t, uint64_t) {
    if (order.empty()) {
      gate.lock();  // held until every completion is queued
      gate.unlock();
    }
    order.push_back(j.slot);
  });
  for (uint32_t s = 0; s < kSlots; ++s) {
    ReadJob j;
    j.slot = s;
    checker.landed(j, 0, 0);
  }
  gate.unlock();
  checker.stop();
  REQUIRE_EQ(order.size(), size_t(kSlots));
  for (uint32_t s = 0; s < kSlots; ++s) CHECK_EQ(order[s], s);
}
