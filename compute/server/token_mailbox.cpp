#include "compute/server/token_mailbox.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>

#include "shared/util/error.h"

namespace waste::server {

namespace {

int new_wake_fd() {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  require(fd >= 0, std::string("token mailbox: eventfd: ") + std::strerror(errno));
  return fd;
}

}  // namespace

TokenMailbox::TokenMailbox(size_t capacity)
    : capacity_(capacity), wake_fd_(new_wake_fd()), rpc_thread_(std::this_thread::get_id()) {
  if (capacity == 0) {
    ::close(wake_fd_);
    throw Error("token mailbox: capacity 0");
  }
}

TokenMailbox::~TokenMailbox() { ::close(wake_fd_); }

bool TokenMailbox::post(Message m) {
  bool was_empty = false;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (std::this_thread::get_id() != rpc_thread_)
      room_.wait(lock, [&] { return closed_ || queue_.size() < capacity_; });
    if (closed_) return false;
    was_empty = queue_.empty();
    queue_.push_back(std::move(m));
  }
  // Only the first message of a batch wakes the RPC thread: a later one is in the queue the
  // RPC thread has yet to take. The counter cannot overflow (one write per take at most), and a
  // full counter would only fail with EAGAIN while the fd is readable anyway.
  if (was_empty) {
    const uint64_t one = 1;
    ssize_t n;
    do n = ::write(wake_fd_, &one, sizeof one);
    while (n < 0 && errno == EINTR);
  }
  return true;
}

std::deque<TokenMailbox::Message> TokenMailbox::take() {
  // Empty the eventfd before taking, so that a post after this take makes it readable again
  // (the edge the RPC thread's watcher waits for). A read of an eventfd takes the whole counter.
  uint64_t count;
  ssize_t n;
  do n = ::read(wake_fd_, &count, sizeof count);
  while (n < 0 && errno == EINTR);
  std::deque<Message> out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    out.swap(queue_);
  }
  room_.notify_all();
  return out;
}

size_t TokenMailbox::waiting() {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size();
}

bool TokenMailbox::wake_pending() const {
  pollfd p{wake_fd_, POLLIN, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

void TokenMailbox::close() {
  std::deque<Message> dropped;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    closed_ = true;
    dropped.swap(queue_);
  }
  room_.notify_all();
  // `dropped` ends here, outside the lock (a message's captures may take locks).
}

}  // namespace waste::server
