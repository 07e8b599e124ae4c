// The connection guard (connection_guard.h says why it interposes accept() and close()).
#include "tools/serve/connection_guard.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace waste::serve {
namespace {

using Clock = std::chrono::steady_clock;

struct Conn {
  std::string client;  // the peer's IP address, the key of the per-client count
  Clock::time_point deadline;
  // Whether the deadline applies: not while the connection waits in the queue (waiting for a
  // worker is the server's doing, not the client's: a client queued behind slow ones must not
  // get a 408 for it), nor while a handler runs or its response is written.
  bool armed = false;
};

// A refused connection stays open for reading a moment after its 503 (a "lingering close"):
// closing it with the client's request unread, or with the request still on its way, makes the
// kernel answer with a reset, and the client's next send fails (EPIPE) before it reads why.
// Bounded: beyond kMaxLingering a refused connection is closed at once.
constexpr size_t kMaxLingering = 64;
constexpr auto kLinger = std::chrono::seconds(2);
struct Lingering {
  int fd;
  Clock::time_point until;
};

struct State {
  State() { lingering.reserve(kMaxLingering); }
  int listen_fd = -1;
  GuardOptions options;
  std::mutex mu;  // conns and per_client; close() and the watchdog's shutdown() hold it
  std::condition_variable wake;
  std::unordered_map<int, Conn> conns;
  std::unordered_map<std::string, size_t> per_client;
  std::vector<Lingering> lingering;  // refused connections drained until the peer closes (under mu)
  std::atomic<uint64_t> refused{0}, timed_out{0};
  std::atomic<int64_t> last_refusal_log{0};
};

// Set once by guard_connections and never freed: close() runs until the process ends (static
// destructors, other threads), and must never see a destroyed state.
std::atomic<State*> g_state{nullptr};

// The listener thread: the fd accept() just returned, taken by the pool's enqueue that follows.
thread_local int t_accepted = -1;
// A worker thread: the connection it serves.
thread_local int t_conn = -1;
// The response in progress ends its connection (close_after_response).
thread_local bool t_close_after = false;

int real_close(int fd) { return int(::syscall(SYS_close, fd)); }

std::string peer_address(const sockaddr_storage& a) {
  char buf[INET6_ADDRSTRLEN] = "";
  if (a.ss_family == AF_INET) {
    ::inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(a).sin_addr, buf, sizeof buf);
  } else if (a.ss_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6&>(a).sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(&v6)) {  // ::ffff:1.2.3.4 is the same client as 1.2.3.4
      ::inet_ntop(AF_INET, &v6.s6_addr[12], buf, sizeof buf);
    } else {
      ::inet_ntop(AF_INET6, &v6, buf, sizeof buf);
    }
  } else {
    return "local";
  }
  return buf;
}

// A short reply written without blocking (the socket's send buffer is empty or nearly so):
// the client learns why rather than seeing a bare close. 4xx: the client's doing
// (invalid_request_error), 5xx: the server's (server_error), as in every other error body.
void send_short(int fd, int status, const char* reason, const std::string& message, const char* code) {
  const char* type = status < 500 ? "invalid_request_error" : "server_error";
  const std::string body = "{\"error\":{\"message\":\"" + message + "\",\"type\":\"" + type +
                           "\",\"param\":null,\"code\":\"" + code + "\"}}";
  const std::string reply = "HTTP/1.1 " + std::to_string(status) + " " + reason +
                            "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                            std::to_string(body.size()) + "\r\n\r\n" + body;
  (void)::send(fd, reply.data(), reply.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
}

// A new connection counts against its client; false (nothing registered) when the client
// already has its share.
bool admit(State& s, int fd, const std::string& client) {
  std::lock_guard<std::mutex> lock(s.mu);
  size_t& n = s.per_client[client];
  if (s.options.max_connections_per_client > 0 && n >= s.options.max_connections_per_client) return false;
  ++n;
  s.conns[fd] = Conn{client, Clock::time_point::max(), false};
  return true;
}

// Reads and drops what the peer sent so far, without blocking; true when it is done sending
// (end of stream or an error). At most 64 KiB a call: a flood cannot hold the caller.
bool drain(int fd) {
  char buf[4096];
  for (int i = 0; i < 16; ++i) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n > 0) continue;
    if (n == 0) return true;
    return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
  }
  return false;
}

// Ends a connection whose client may still be sending a body this server refused: the reply
// and a FIN go first (SHUT_WR), then what the client still sends is read and dropped for a
// bounded while, so the close does not answer it with a reset that would reach the client
// before it read the reply. Then SHUT_RD ends httplib's keep-alive loop at its next read.
void linger_close(int fd) {
  constexpr int kLingerMs = 1000;                 // a client mid-upload on a local link finishes in far less
  constexpr size_t kLingerBytes = size_t(8) << 20;  // and one that sends more is cut, reset or not
  ::shutdown(fd, SHUT_WR);
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(kLingerMs);
  char buf[16384];
  for (size_t dropped = 0; dropped < kLingerBytes;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now()).count();
    if (left <= 0) break;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, int(left));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
    if (n <= 0) break;  // the client closed its side (or an error): nothing more to drop
    dropped += size_t(n);
  }
  ::shutdown(fd, SHUT_RD);
}

void refuse(State& s, int fd, const std::string& client) {
  ++s.refused;
  send_short(fd, 503, "Service Unavailable",
             "too many connections from this address (waste-serve --max-connections-per-client " +
                 std::to_string(s.options.max_connections_per_client) + ")",
             "too_many_connections");
  ::shutdown(fd, SHUT_WR);
  bool closed_now = drain(fd);
  if (!closed_now) {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.lingering.size() < kMaxLingering) {
      s.lingering.push_back({fd, Clock::now() + kLinger});  // the watchdog drains and closes it
    } else {
      closed_now = true;
    }
  }
  if (closed_now) real_close(fd);
  // One line a second at most: a flood of refusals must not become a flood of log lines.
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(Clock::now().time_since_epoch()).count();
  int64_t last = s.last_refusal_log.load();
  if (now != last && s.last_refusal_log.compare_exchange_strong(last, now))
    spdlog::warn("serve: refused a connection from {}: it has {} open ({} refused so far)", client,
                 s.options.max_connections_per_client, s.refused.load());
}

// Removes fd's entry (caller holds s.mu).
void retire(State& s, std::unordered_map<int, Conn>::iterator it) {
  auto pc = s.per_client.find(it->second.client);
  if (pc != s.per_client.end() && --pc->second == 0) s.per_client.erase(pc);
  s.conns.erase(it);
}

// Shuts down the connections whose request was not read in time; httplib's worker then sees the
// end of the stream and closes the connection itself (the fd stays httplib's to close). Also
// drains and closes the refused connections that linger.
void watchdog(State& s) {
  std::unique_lock<std::mutex> lock(s.mu);
  for (;;) {
    // A tenth of a second is precise enough for deadlines of seconds, and cheap.
    s.wake.wait_for(lock, std::chrono::milliseconds(100));
    const auto now = Clock::now();
    for (size_t i = 0; i < s.lingering.size();) {
      if (drain(s.lingering[i].fd) || s.lingering[i].until <= now) {
        real_close(s.lingering[i].fd);
        s.lingering[i] = s.lingering.back();
        s.lingering.pop_back();
      } else {
        ++i;
      }
    }
    for (auto& [fd, c] : s.conns) {
      if (!c.armed || c.deadline > now) continue;
      c.armed = false;
      ++s.timed_out;
      send_short(fd, 408, "Request Timeout",
                 "the request was not read whole within " + std::to_string(s.options.request_read_timeout.count() / 1000.0) +
                     " s (waste-serve --request-read-timeout)",
                 "request_timeout");
      ::shutdown(fd, SHUT_RDWR);
      spdlog::warn("serve: closed a connection from {}: its request was not read within {} ms", c.client,
                   s.options.request_read_timeout.count());
    }
  }
}

// Runs f on the entry of this worker thread's connection, under the mutex (nothing when none).
void with_conn(const std::function<void(State&, Conn&)>& f) {
  State* s = g_state.load();
  if (s == nullptr || t_conn < 0) return;
  std::lock_guard<std::mutex> lock(s->mu);
  auto it = s->conns.find(t_conn);
  if (it != s->conns.end()) f(*s, it->second);
}

// The deadline of the request a worker starts reading now (after `extra`: a keep-alive wait).
void start_reading(std::chrono::milliseconds extra = std::chrono::milliseconds(0)) {
  with_conn([extra](State& s, Conn& c) {
    c.deadline = Clock::now() + extra + s.options.request_read_timeout;
    c.armed = s.options.request_read_timeout.count() > 0;
  });
}

class GuardedPool : public httplib::TaskQueue {
 public:
  explicit GuardedPool(size_t threads) : pool_(threads) {}
  void enqueue(std::function<void()> fn) override {
    // Same thread as the accept() that returned this connection (httplib's listen loop).
    const int fd = std::exchange(t_accepted, -1);
    pool_.enqueue([fd, fn = std::move(fn)] {
      t_conn = fd;
      start_reading();  // a worker reads it from now: the request's deadline runs
      fn();
      t_conn = -1;
    });
  }
  void shutdown() override { pool_.shutdown(); }

 private:
  httplib::ThreadPool pool_;
};

}  // namespace

void guard_connections(int listen_fd, const GuardOptions& options) {
  auto* s = new State;
  s->listen_fd = listen_fd;
  s->options = options;
  std::thread(watchdog, std::ref(*s)).detach();  // runs as long as the process
  g_state.store(s);
}

httplib::TaskQueue* new_guarded_pool(size_t threads) { return new GuardedPool(threads); }

int connection_fd() { return t_conn; }

void request_read() {
  with_conn([](State&, Conn& c) { c.armed = false; });
}

void response_sent() {
  if (t_close_after) {
    t_close_after = false;
    // The response is queued whole before this (httplib logs after writing): SHUT_WR sends it
    // and then the FIN, SHUT_RD ends httplib's keep-alive loop at its next read (no request is
    // parsed out of an unread body).
    if (t_conn >= 0) {
      linger_close(t_conn);
      return;
    }
  }
  State* s = g_state.load();
  if (s != nullptr) start_reading(s->options.keep_alive_idle);
}

void close_after_response(bool yes) { t_close_after = yes; }

bool client_gone() {
  if (t_conn < 0) return false;
  pollfd p{t_conn, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

GuardCounts guard_counts() {
  GuardCounts c;
  State* s = g_state.load();
  if (s == nullptr) return c;
  std::lock_guard<std::mutex> lock(s->mu);
  c.open = s->conns.size();
  c.refused = s->refused.load();
  c.timed_out = s->timed_out.load();
  return c;
}

}  // namespace waste::serve

using waste::serve::g_state;

// httplib's accept() (see the header): the real accept4, then, for the HTTP listener, the
// connection is registered (or refused, and the next one accepted).
extern "C" int accept(int fd, sockaddr* addr, socklen_t* len) {
  for (;;) {
    sockaddr_storage peer{};
    socklen_t peer_len = sizeof peer;
    const int c = ::accept4(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len, 0);
    if (c < 0) return c;
    if (addr != nullptr && len != nullptr) {
      std::memcpy(addr, &peer, std::min<size_t>(*len, peer_len));
      *len = peer_len;
    }
    waste::serve::State* s = g_state.load();
    if (s == nullptr || fd != s->listen_fd) return c;
    const std::string client = waste::serve::peer_address(peer);
    if (waste::serve::admit(*s, c, client)) {
      waste::serve::t_accepted = c;
      return c;
    }
    waste::serve::refuse(*s, c, client);
  }
}

// Every close() of the process: a guarded connection's entry goes first, under the mutex the
// watchdog shuts connections down with, so a reused fd number is never a stale entry's.
// Not noexcept: glibc declares close without __THROW (it is a cancellation point), and the
// definition must match that declaration (clang enforces it).
extern "C" int close(int fd) {
  waste::serve::State* s = g_state.load();
  if (s == nullptr) return waste::serve::real_close(fd);
  std::unique_lock<std::mutex> lock(s->mu);
  auto it = s->conns.find(fd);
  if (it == s->conns.end()) {
    // Not a guarded connection, and it cannot become one before the real close below: accept
    // cannot return an fd number that is still open.
    lock.unlock();
    return waste::serve::real_close(fd);
  }
  waste::serve::retire(*s, it);
  return waste::serve::real_close(fd);
}
