// Turns SIGTERM and SIGINT into one call of a stop function, made on a thread of this object's
// own rather than inside the signal handler.
//
// Why not call the server's stop() from the handler: a signal can arrive on any thread at any
// time, including after main() returned and the server object is gone (a late SIGTERM during
// the process's exit was a call on a destroyed object), and before the server runs (its stop()
// is then a no-op and the signal was lost). The handler here only writes a byte to a pipe; the
// watcher thread retries the stop until the server runs, and the destructor ignores the signals
// and joins the watcher before the server can be destroyed.
#pragma once

#include <atomic>
#include <functional>
#include <thread>

namespace waste::serve {

class StopOnSignal {
 public:
  // try_stop is called on the watcher thread after a signal, again every retry interval until it
  // returns true (it returns false while the server is not running yet), then never again.
  explicit StopOnSignal(std::function<bool()> try_stop);
  ~StopOnSignal();
  StopOnSignal(const StopOnSignal&) = delete;
  StopOnSignal& operator=(const StopOnSignal&) = delete;

  // A signal arrived (the server may not have been stopped yet).
  bool requested() const { return requested_.load(); }

 private:
  void watch();

  std::function<bool()> try_stop_;
  std::atomic<bool> requested_{false};
  std::thread watcher_;
};

}  // namespace waste::serve
