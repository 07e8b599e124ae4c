#include "iod/io/record_checker.h"

#include <spdlog/spdlog.h>

namespace waste::iod {

RecordChecker::RecordChecker(uint32_t slot_count, ReadDone done)
    : done_(std::move(done)), ring_(slot_count == 0 ? 1 : slot_count) {
  thread_ = std::thread([this] { run(); });
}

RecordChecker::~RecordChecker() { stop(); }

void RecordChecker::landed(const ReadJob& job, int64_t result, uint64_t latency_ns) {
  bool stopped;
  {
    std::lock_guard lock(mu_);
    stopped = stopping_;
    if (size_ < ring_.size() && !stopped) {
      ring_[(head_ + size_) % ring_.size()] = {job, result, latency_ns};
      ++size_;
      cv_.notify_one();
      return;
    }
  }
  // A slot has at most one read outstanding, so the ring holds every one: a full ring is a
  // defect in the store (logged), and a stopped checker one that outlived its engines. Either
  // way the record is still checked and published, here.
  if (!stopped) spdlog::error("iod: the record checker's ring is full ({} completions): checked inline", ring_.size());
  done_(job, result, latency_ns);
}

void RecordChecker::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void RecordChecker::run() {
  for (;;) {
    Landed l;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return size_ > 0 || stopping_; });
      if (size_ == 0) return;  // stopping, and everything landed was handed over
      l = ring_[head_];
      head_ = (head_ + 1) % ring_.size();
      --size_;
    }
    done_(l.job, l.result, l.latency_ns);
  }
}

}  // namespace waste::iod
