// The fallback engine: a fixed pool of threads, each doing one blocking pread at a time into
// the slot (the bank is opened for direct I/O, so the pool size is the queue depth). The only
// engine of a build without io_uring, and the one a port starts from (docs/PORTING.md).
#include <chrono>
#include <thread>
#include <vector>

#include "iod/io/read_engine.h"
#include "shared/platform/direct_io.h"

namespace waste::iod {

namespace {

class PreadEngine final : public ReadEngine {
 public:
  PreadEngine(ReadQueue& q, ReadDone done, uint32_t threads) : queue_(q), done_(std::move(done)) {
    for (uint32_t i = 0; i < threads; ++i) threads_.emplace_back([this] { run(); });
  }
  ~PreadEngine() override { stop(); }
  std::string name() const override { return "pread"; }
  void stop() override {
    queue_.close();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void run() {
    while (auto job = queue_.pop_wait()) {
      // One clock read for the latency and the span's start (steady_clock is CLOCK_MONOTONIC on
      // Linux, the timeline's clock).
      auto t0 = std::chrono::steady_clock::now();
      job->submitted_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count();
      const int64_t got = platform::read_at(job->fd, job->dst, job->bytes, job->offset);
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
      done_(*job, got, uint64_t(ns));
    }
  }

  ReadQueue& queue_;
  ReadDone done_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::unique_ptr<ReadEngine> make_pread_engine(ReadQueue& queue, ReadDone done, uint32_t threads) {
  return std::make_unique<PreadEngine>(queue, std::move(done), threads == 0 ? 1 : threads);
}

}  // namespace waste::iod
