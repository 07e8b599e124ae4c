// What compute knows of its iod, for Engine.health and /health: the worker's calls to iod
// write it (ReattachingExperts), any thread reads it. A call that has waited longer than the
// caller's threshold means a daemon that stopped answering even before the call's own deadline
// ends it; a failed call means iod is down until a later call (a request's, or the idle ping)
// gets an answer.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace waste::server {

class IodHealth {
 public:
  enum class State { Ok, NotAnswering, Down };
  struct Snapshot {
    State state = State::Ok;
    std::string detail;           // NotAnswering: how long; Down: the last call's error
    double since_answer = -1;     // seconds since iod last answered (-1: never)
    double waiting = 0;           // seconds the call in progress has waited (0: none)
  };

  void call_started() { call_started_ns_.store(now_ns(), std::memory_order_relaxed); }
  void answered() {
    answered_ns_.store(now_ns(), std::memory_order_relaxed);
    std::lock_guard lk(mu_);
    error_.clear();
  }
  void failed(std::string why) {
    std::lock_guard lk(mu_);
    error_ = std::move(why);
  }
  void call_ended() { call_started_ns_.store(0, std::memory_order_relaxed); }
  // Seconds since iod last answered (-1: never).
  double since_answer() const {
    const int64_t a = answered_ns_.load(std::memory_order_relaxed);
    return a == 0 ? -1 : double(now_ns() - a) / 1e9;
  }

  Snapshot snapshot(double not_answering_after_seconds) const {
    Snapshot s;
    const int64_t now = now_ns();
    s.since_answer = since_answer();
    const int64_t started = call_started_ns_.load(std::memory_order_relaxed);
    if (started != 0) s.waiting = double(now - started) / 1e9;
    std::lock_guard lk(mu_);
    if (!error_.empty()) {
      s.state = State::Down;
      s.detail = error_;
    } else if (s.waiting > not_answering_after_seconds) {
      s.state = State::NotAnswering;
      s.detail = "a call has waited " + std::to_string(int64_t(s.waiting * 1000)) + " ms for iod";
    }
    return s;
  }

 private:
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  std::atomic<int64_t> call_started_ns_{0}, answered_ns_{0};
  mutable std::mutex mu_;
  std::string error_;  // of the last failed call; empty once a call is answered
};

}  // namespace waste::server
