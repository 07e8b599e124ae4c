#include "compute/server/token_mailbox.h"

#include <utility>

#include "shared/util/error.h"

namespace waste::server {

TokenMailbox::TokenMailbox(size_t capacity) : capacity_(capacity) {
  require(capacity > 0, "token mailbox: capacity 0");
}

bool TokenMailbox::post(Message m) {
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> wake;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    room_.wait(lock, [&] { return closed_ || queue_.size() < capacity_; });
    if (closed_) return false;
    queue_.push_back(std::move(m));
    wake = std::move(waiter_);
  }
  // Outside the lock: fulfilling takes the RPC thread's executor lock, and the RPC thread may be
  // about to take mutex_ in when_posted().
  if (wake.get() != nullptr) wake->fulfill();
  return true;
}

kj::Promise<void> TokenMailbox::when_posted() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (closed_) return kj::NEVER_DONE;
  if (!queue_.empty()) return kj::READY_NOW;
  auto paf = kj::newPromiseAndCrossThreadFulfiller<void>();
  waiter_ = kj::mv(paf.fulfiller);
  return kj::mv(paf.promise);
}

std::deque<TokenMailbox::Message> TokenMailbox::take() {
  std::deque<Message> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(queue_);
  }
  room_.notify_all();
  return out;
}

void TokenMailbox::close() {
  std::deque<Message> dropped;
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> waiter;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    dropped.swap(queue_);
    waiter = std::move(waiter_);
  }
  room_.notify_all();
  // `dropped` and `waiter` end here, outside the lock (a message's captures may take locks).
}

}  // namespace waste::server
