// What one HTTP connection may hold of waste-serve: a deadline for reading each request whole,
// a bound on the connections of one client address, and a way for a request's handler to see
// that its client went away.
//
// Why here and not in cpp-httplib: the library is Debian's compiled libcpp-httplib.so (0.11.4),
// so its CPPHTTPLIB_* macros do nothing in our sources, and its only read bound is a timeout per
// read() (a client sending a byte every few seconds holds a worker thread forever: eight of them
// held every worker and /health took 49 s). It hands the server no connection handle either.
// What it does: its listener thread calls libc accept() (an undefined symbol of the .so, so a
// definition in this executable takes its place) and then, on the same thread, TaskQueue::enqueue
// for that connection; it closes connections with libc close(). So this file defines accept()
// and close(): each accepted connection of the HTTP listener is registered with its peer address
// and a read deadline, the pool's enqueue binds the task to that fd (a thread-local hand-off), the
// worker knows its connection (connection_fd), and a watchdog thread shuts down connections whose
// request was not read by the deadline. close() retires the entry under the watchdog's mutex
// before the real close, so an fd number reused by a later accept is never shut down by a stale
// entry.
#pragma once
#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace waste::serve {

struct GuardOptions {
  // From the moment a worker starts on a connection (or the end of its previous response plus
  // keep_alive_idle) until the request's headers and body are read whole; 0: no deadline. Time
  // in the queue, waiting for a worker, does not count: that wait is the server's.
  std::chrono::milliseconds request_read_timeout{10000};
  // How long httplib waits for a keep-alive connection's next request (set_keep_alive_timeout):
  // the next request's deadline starts after it.
  std::chrono::milliseconds keep_alive_idle{5000};
  // Open connections (queued or served) per client IP address; over it a new one gets a 503
  // and is closed at once. 0: no bound.
  size_t max_connections_per_client = 8;
};

// Guards the connections accepted on listen_fd from now on. Call once, before the server listens.
void guard_connections(int listen_fd, const GuardOptions& options);

// svr.new_task_queue: a pool of `threads` workers that run each connection with its fd known.
httplib::TaskQueue* new_guarded_pool(size_t threads);

// The connection of the request this thread serves (-1: not a guarded worker).
int connection_fd();
// The request this thread serves was read whole: its deadline no longer applies (a handler's
// first call; generation and streaming take as long as they take).
void request_read();
// The response went out: the connection's next keep-alive request gets a deadline of its own,
// or, after close_after_response, the connection ends.
void response_sent();
// The response this thread is sending is the connection's last (a refused body left unread on
// the wire: nothing after it can be parsed as a request). httplib's "Connection: close"
// response header alone does not end its keep-alive loop. Each request starts with false (a
// response whose write failed may not have reached response_sent).
void close_after_response(bool yes = true);
// The client of this thread's connection closed it (or shut down its sending side): nobody will
// read the reply. Cheap (one poll with no wait), for a generation's token callback.
bool client_gone();

struct GuardCounts {
  uint64_t open = 0;       // connections open now
  uint64_t refused = 0;    // refused: over max_connections_per_client
  uint64_t timed_out = 0;  // shut down: a request not read by its deadline
};
GuardCounts guard_counts();

}  // namespace waste::serve
