// Turns SIGTERM and SIGINT into a call of a stop function, made on a thread of this object's own
// rather than inside the signal handler, and repeated until it succeeds.
//
// Why not call the server's stop() from the handler: a signal can arrive on any thread at any
// time, including after main() returned and the server object is gone (a late SIGTERM during
// the process's exit was a call on a destroyed object), and before the server runs (its stop()
// is then a no-op and the signal was lost); and stop() closes a socket, which takes the
// connection guard's lock (connection_guard.cpp), which a handler must never wait on. The
// handler here only writes a byte to a pipe; the watcher thread retries the stop until the
// server runs, and the destructor ignores the signals and joins the watcher before the server
// can be destroyed. One instance at a time in a process (the handler's pipe is the process's).
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace waste::serve {

class StopOnSignal {
 public:
  // try_stop is called on the watcher thread after a signal, again every kRetryMs until it
  // returns true (it returns false while the server is not running yet), then never again.
  // Throws Error when the pipe cannot be made (no descriptors left).
  explicit StopOnSignal(std::function<bool()> try_stop);
  // From its first statement SIGTERM and SIGINT are ignored; returns once the watcher ended.
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  // The watcher has seen a signal (the server may not have been stopped yet; a signal whose
  // byte it has not read yet is not counted, and its retry ends the server all the same).
  bool requested() const { return requested_.load(); }

  static constexpr int kRetryMs = 10;

 private:
  void watch();

  std::function<bool()> try_stop_;
  std::atomic<bool> requested_{false};
  std::atomic<bool> quit_{false};
  std::thread watcher_;
};

}  // namespace waste::serve
