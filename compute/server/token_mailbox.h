// The engine worker's messages to the RPC thread (each generated token, then the request's end),
// in the order they were posted, without the worker waiting for the RPC thread.
//
// Why not kj::Executor::executeSync: it blocked the worker for one cross-thread round trip per
// token and session, and it orders the two threads with a futex inside uninstrumented libkj,
// so ThreadSanitizer saw every handoff as a data race (the event's result is written on the
// worker's stack by the RPC thread after the call's own code returns). Here the messages sit
// behind a std::mutex, which both the threads and TSan see; the RPC thread is woken by a
// cross-thread fulfiller (kj's, thread-safe), at most one per batch of messages.
//
// Bounded: at most `capacity` messages wait; a worker posting into a full mailbox waits until
// the RPC thread takes them (the same back-pressure executeSync gave, one batch later). Closed
// (the RPC side is gone): posts are dropped and never wait.
#pragma once
#include <kj/async.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>

namespace waste::server {

class TokenMailbox {
 public:
  using Message = std::function<void()>;  // runs on the RPC thread

  explicit TokenMailbox(size_t capacity);
  TokenMailbox(const TokenMailbox&) = delete;
  TokenMailbox& operator=(const TokenMailbox&) = delete;

  // Any thread but the RPC thread. False when closed (the message was dropped).
  bool post(Message m);

  // RPC thread: resolves once messages wait (at once if some do). One waiter at a time.
  kj::Promise<void> when_posted();
  // RPC thread: the waiting messages, oldest first; frees their room.
  std::deque<Message> take();
  // RPC thread: drops what waits and every later post; wakes a worker waiting for room.
  void close();

 private:
  const size_t capacity_;
  std::mutex mutex_;
  std::condition_variable room_;  // signalled by take() and close()
  std::deque<Message> queue_;     // guarded by mutex_
  bool closed_ = false;           // guarded by mutex_
  // Set while the RPC thread waits in when_posted() and nothing was posted since; guarded by mutex_.
  kj::Own<kj::CrossThreadPromiseFulfiller<void>> waiter_;
};

}  // namespace waste::server
