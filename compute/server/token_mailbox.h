// The engine worker's messages to the RPC thread (each generated token, then the request's end),
// in the order they were posted, without the worker waiting for the RPC thread.
//
// Why not kj's cross-thread calls (Executor::executeSync, CrossThreadPromiseFulfiller): executeSync
// blocked the worker for one round trip to the RPC thread per token and session; and both hand
// their result over in kj's header code, ordered by a futex inside uninstrumented libkj-async, so
// ThreadSanitizer reported every handoff as a data race. Here the messages sit behind a
// std::mutex, which both threads and TSan see, and the RPC thread is woken through an eventfd
// (a system call: no memory is shared through it), watched by its event loop.
//
// Bounded: at most `capacity` messages wait; a worker posting into a full mailbox waits until
// the RPC thread takes them (the back-pressure executeSync gave, one batch later). Closed (the RPC
// side is gone): posts are dropped and never wait.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace waste::server {

class TokenMailbox {
 public:
  using Message = std::function<void()>;  // runs on the RPC thread

  // Made on the RPC thread (the one that takes). Throws if no eventfd can be made.
  explicit TokenMailbox(size_t capacity);
  ~TokenMailbox();
  TokenMailbox(const TokenMailbox&) = delete;
  TokenMailbox& operator=(const TokenMailbox&) = delete;

  // False when closed (the message was dropped). From the RPC thread itself it never waits for
  // room (only that thread makes room: it would wait for ever).
  bool post(Message m);

  // Non-blocking eventfd that becomes readable when a message is posted into an empty mailbox.
  // Watch it edge-triggered (kj::UnixEventPort::FdObserver): take() reads it empty first.
  int wake_fd() const { return wake_fd_; }
  // RPC thread: the waiting messages, oldest first; frees their room.
  std::deque<Message> take();
  // Messages waiting now (for a diagnostic: a lost wake-up).
  size_t waiting();
  // Whether the eventfd is readable (a wake-up is on its way).
  bool wake_pending() const;
  // RPC thread: drops what waits and every later post; wakes a worker waiting for room.
  void close();

 private:
  const size_t capacity_;
  const int wake_fd_;
  const std::thread::id rpc_thread_;
  std::mutex mutex_;
  std::condition_variable room_;  // signalled by take() and close()
  std::deque<Message> queue_;     // guarded by mutex_
  bool closed_ = false;           // guarded by mutex_
};

}  // namespace waste::server
