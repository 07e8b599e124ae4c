// compute/server/token_mailbox: the worker's messages reach the RPC thread in order, a full
// mailbox holds the poster back until the RPC thread takes, and closing drops and releases.
#include <doctest/doctest.h>
#include <kj/async.h>

#include <atomic>
#include <thread>
#include <vector>

#include "compute/server/token_mailbox.h"

using waste::server::TokenMailbox;

TEST_CASE("token mailbox: messages from another thread run in the order posted, woken by the post") {
  kj::EventLoop loop;
  kj::WaitScope ws(loop);
  TokenMailbox box(8);
  std::vector<int> seen;  // RPC thread only
  constexpr int kMessages = 1000;
  std::thread worker([&] {
    for (int i = 0; i < kMessages; ++i) CHECK(box.post([&seen, i] { seen.push_back(i); }));
  });
  while (int(seen.size()) < kMessages) {
    box.when_posted().wait(ws);  // resolves only once something was posted
    auto batch = box.take();
    CHECK(!batch.empty());
    CHECK(batch.size() <= 8);  // never more than the capacity waits
    for (auto& m : batch) m();
  }
  worker.join();
  REQUIRE(seen.size() == size_t(kMessages));
  for (int i = 0; i < kMessages; ++i) CHECK(seen[size_t(i)] == i);
  CHECK(box.take().empty());
}

TEST_CASE("token mailbox: a full mailbox holds the poster until take() makes room") {
  TokenMailbox box(2);
  CHECK(box.post([] {}));
  CHECK(box.post([] {}));
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

TEST_CASE("token mailbox: close drops what waits, refuses later posts and releases a waiting poster") {
  TokenMailbox box(1);
  int ran = 0;
  CHECK(box.post([&ran] { ++ran; }));
  std::atomic<int> result{-1};
  std::thread worker([&] { result.store(box.post([&ran] { ++ran; }) ? 1 : 0); });  // full: waits
  box.close();
  worker.join();
  CHECK(result.load() == 0);  // released by close, message dropped
  CHECK(!box.post([&ran] { ++ran; }));
  CHECK(box.take().empty());
  CHECK(ran == 0);  // nothing posted ever ran
}

TEST_CASE("token mailbox: capacity 0 is refused") { CHECK_THROWS(TokenMailbox(0)); }
