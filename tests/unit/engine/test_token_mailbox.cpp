// compute/server/token_mailbox: the worker's messages reach the RPC thread in order, woken through
// the eventfd its event loop watches; a full mailbox holds the poster back until the RPC thread
// takes; closing drops and releases.
#include <doctest/doctest.h>
#include <kj/async-io.h>
#include <kj/async-unix.h>

#include <atomic>
#include <thread>
#include <vector>

#include "compute/server/token_mailbox.h"

using waste::server::TokenMailbox;

namespace {

// What the RPC thread's delivery loop does (rpc_server.cpp): take, run, wait for the next edge.
kj::Promise<void> deliver(TokenMailbox& box, kj::UnixEventPort::FdObserver& observer, std::vector<int>& seen,
                          size_t& batches, size_t& largest, int until) {
  auto batch = box.take();
  if (!batch.empty()) ++batches;
  largest = std::max(largest, batch.size());
  for (auto& m : batch) m();
  if (int(seen.size()) >= until) return kj::READY_NOW;
  return observer.whenBecomesReadable().then(
      [&box, &observer, &seen, &batches, &largest, until] { return deliver(box, observer, seen, batches, largest, until); });
}

}  // namespace

TEST_CASE("token mailbox: messages from another thread run on the loop in the order posted") {
  auto io = kj::setupAsyncIo();
  constexpr int kMessages = 2000;
  TokenMailbox box(8);
  kj::UnixEventPort::FdObserver observer(io.unixEventPort, box.wake_fd(), kj::UnixEventPort::FdObserver::OBSERVE_READ);
  std::vector<int> seen;  // this thread only
  std::thread worker([&] {
    for (int i = 0; i < kMessages; ++i) CHECK(box.post([&seen, i] { seen.push_back(i); }));
  });
  size_t batches = 0, largest = 0;
  // Resolves only when the loop was woken for every batch: a lost wake-up leaves it waiting, and
  // the test's timeout fails it.
  deliver(box, observer, seen, batches, largest, kMessages).wait(io.waitScope);
  worker.join();
  REQUIRE(seen.size() == size_t(kMessages));
  for (int i = 0; i < kMessages; ++i) CHECK(seen[size_t(i)] == i);
  CHECK(largest <= 8);  // never more than the capacity waited
  CHECK(batches >= kMessages / 8);
  CHECK(box.take().empty());
}

TEST_CASE("token mailbox: a full mailbox holds the poster until take() makes room") {
  TokenMailbox box(2);
  std::thread filler([&] {
    CHECK(box.post([] {}));
    CHECK(box.post([] {}));
  });
  filler.join();
  std::atomic<bool> third_posted{false};
  std::thread worker([&] {
    CHECK(box.post([] {}));
    third_posted.store(true);
  });
  // The worker cannot finish while the mailbox stays full; take() is what lets it.
  auto first = box.take();
  CHECK(first.size() == 2);
  worker.join();
  CHECK(third_posted.load());
  CHECK(box.take().size() == 1);
}

TEST_CASE("token mailbox: the RPC thread's own post never waits for room") {
  TokenMailbox box(1);
  CHECK(box.post([] {}));
  CHECK(box.post([] {}));  // made on this thread: over capacity rather than waiting for itself
  CHECK(box.take().size() == 2);
}

TEST_CASE("token mailbox: close drops what waits, refuses later posts and releases a waiting poster") {
  TokenMailbox box(1);
  int ran = 0;
  std::thread filler([&] { CHECK(box.post([&ran] { ++ran; })); });
  filler.join();
  std::atomic<int> result{-1};
  std::thread worker([&] { result.store(box.post([&ran] { ++ran; }) ? 1 : 0); });  // full: waits
  box.close();
  worker.join();
  CHECK(result.load() == 0);  // released by close, message dropped
  std::thread late([&] { CHECK(!box.post([&ran] { ++ran; })); });
  late.join();
  CHECK(box.take().empty());
  CHECK(ran == 0);  // nothing posted ever ran
}

TEST_CASE("token mailbox: capacity 0 is refused") { CHECK_THROWS(TokenMailbox(0)); }
