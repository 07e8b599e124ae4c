// The io_uring engine: one thread owns the ring. The slot region is registered as fixed
// buffers (in chunks of whole slots, each at most kMaxRegisteredBuffer), every record is read
// with READ_FIXED straight into its slot, and up to queue_depth reads are in flight. An eventfd
// read sits in the ring so a newly queued job (or close) wakes the thread out of its wait.
// If the ring dies (a submit error other than a retryable one), the engine reaps what the
// kernel still holds, reports every read it held, tells its owner (EngineFailed) and ends.
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "iod/io/read_engine.h"

namespace waste::iod {

namespace {

constexpr uint64_t kWakeTag = ~0ull;

class UringEngine final : public ReadEngine {
 public:
  UringEngine(ReadQueue& q, ReadDone done, uint32_t qd, EngineFailed failed, UringFaults faults, uint32_t reap_ms)
      : queue_(q), done_(std::move(done)), failed_(std::move(failed)), faults_(faults), reap_ms_(reap_ms), qd_(qd) {}
  ~UringEngine() override {
    stop();
    if (ring_ok_) io_uring_queue_exit(&ring_);
    if (event_fd_ >= 0) ::close(event_fd_);
  }
  std::string name() const override { return "io_uring"; }

  // Sets up ring, eventfd and buffers; returns an empty string or why it cannot.
  std::string init(const SlotRegion& region) {
    int r = io_uring_queue_init(qd_ + 1, &ring_, 0);
    if (r < 0) return std::string("io_uring_queue_init: ") + std::strerror(-r);
    ring_ok_ = true;
    event_fd_ = ::eventfd(0, EFD_CLOEXEC);
    if (event_fd_ < 0) return std::string("eventfd: ") + std::strerror(errno);
    base_ = region.base;
    slot_bytes_ = region.slot_bytes;
    uint64_t slots = region.bytes / region.slot_bytes;
    slots_per_buffer_ = std::max<uint64_t>(1, kMaxRegisteredBuffer / region.slot_bytes);
    std::vector<iovec> iov;
    for (uint64_t s = 0; s < slots; s += slots_per_buffer_) {
      uint64_t n = std::min(slots_per_buffer_, slots - s);
      iov.push_back({region.base + s * region.slot_bytes, size_t(n * region.slot_bytes)});
    }
    r = io_uring_register_buffers(&ring_, iov.data(), unsigned(iov.size()));
    if (r < 0)
      return "registering " + std::to_string(iov.size()) + " fixed buffers (" + std::to_string(region.bytes) +
             " bytes): " + std::strerror(-r) + (r == -ENOMEM ? " (RLIMIT_MEMLOCK?)" : "");
    inflight_.assign(slots, {});
    queue_.set_notify([this] {
      uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(event_fd_, &one, sizeof one);
    });
    thread_ = std::thread([this] { run(); });
    return "";
  }

  void stop() override {
    // An engine whose init failed never took jobs, and its owner reads the same queue with the
    // pread pool instead: closing the queue here (the destructor runs when make_uring_engine
    // gives up) ended every pread thread at once, and no read ever completed.
    if (!thread_.joinable()) return;
    queue_.close();
    thread_.join();
  }

 private:
  struct InFlight {
    ReadJob job;
    std::chrono::steady_clock::time_point start;
    bool active = false;
  };

  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // Hands every completion in the ring to done_; returns whether the wake read completed.
  bool drain_completions() {
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    bool woke = false;
    // Every completion in the ring had landed by now: one clock for all of them, or each later
    // one's latency would include the checks done_ ran for the ones before it.
    const auto landed = std::chrono::steady_clock::now();
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kWakeTag) {
        woke = true;
        continue;
      }
      InFlight& f = inflight_[tag];
      f.active = false;
      --in_flight_;
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(landed - f.start).count();
      done_(f.job, int64_t(cqe->res), uint64_t(ns));
    }
    io_uring_cq_advance(&ring_, seen);
    return woke;
  }

  void run() {
    arm_wake();
    bool closing = false;
    for (;;) {
      while (!closing && in_flight_ < qd_ && submitted_ < faults_.fail_submit_after_reads) {
        auto job = queue_.try_pop();
        if (!job) break;
        io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
        if (!sqe) break;  // cannot happen: the ring has qd + 1 entries
        uint64_t off = uint64_t(job->dst - base_);
        int buf_index = int(off / slot_bytes_ / slots_per_buffer_);
        io_uring_prep_read_fixed(sqe, job->fd, job->dst, job->bytes, job->offset, buf_index);
        io_uring_sqe_set_data64(sqe, job->slot);
        // One clock read for both: steady_clock is CLOCK_MONOTONIC on Linux, the timeline's clock.
        const auto now = std::chrono::steady_clock::now();
        job->submitted_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
        inflight_[job->slot] = {*job, now, true};
        ++in_flight_;
        ++submitted_;
        reads_unsubmitted_ = true;
      }
      if (queue_.closed()) closing = true;
      if (closing && in_flight_ == 0) break;
      int r;
      if (submitted_ >= faults_.fail_submit_after_reads && (faults_.abandon_in_flight || !reads_unsubmitted_)) {
        // Test hook: the ring dies once the reads prepared so far are submitted. (Not "the
        // submission queue is empty": a re-armed wake read sits there, and waiting on it with
        // the queue's jobs never taken would hang every client.)
        r = -EIO;
      } else {
        r = io_uring_submit_and_wait(&ring_, 1);
        if (r >= 0) reads_unsubmitted_ = false;
      }
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
        die(std::string("io_uring submit failed: ") + std::strerror(-r));
        return;
      }
      if (drain_completions() && !closing) arm_wake();
    }
  }

  // The ring cannot submit any more. Reads the kernel holds are reaped (bounded wait); those
  // that do not complete are reported abandoned (their slots are failed and never reused).
  // Then the owner is told, so it can serve the queue another way; this thread ends.
  void die(const std::string& why) {
    const uint32_t held = in_flight_;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(reap_ms_);
    while (in_flight_ > 0 && !faults_.abandon_in_flight) {
      auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      __kernel_timespec ts{left.count() / 1'000'000'000, left.count() % 1'000'000'000};
      io_uring_cqe* cqe = nullptr;
      int r = io_uring_wait_cqe_timeout(&ring_, &cqe, &ts);
      if (r == -EINTR) continue;
      if (r < 0) break;  // timed out, or the ring cannot even wait
      drain_completions();
    }
    if (in_flight_ > 0 && !faults_.abandon_in_flight) {
      // Ask the kernel to cancel what is left, synchronously (kernel 6.0+; a read already at
      // the device may refuse), then take the completions that produced.
      io_uring_sync_cancel_reg reg{};
      reg.flags = IORING_ASYNC_CANCEL_ANY | IORING_ASYNC_CANCEL_ALL;
      reg.timeout = {0, 200'000'000};
      [[maybe_unused]] int rc = io_uring_register_sync_cancel(&ring_, &reg);
      drain_completions();
    }
    const uint32_t abandoned = in_flight_;
    for (InFlight& f : inflight_) {
      if (!f.active) continue;
      f.active = false;
      --in_flight_;
      ReadJob j = f.job;
      j.abandoned = true;
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - f.start).count();
      done_(j, -ECANCELED, uint64_t(ns));
    }
    spdlog::error("iod: {}; {} reads were in flight, {} completed, {} abandoned (their slots are quarantined)", why,
                  held, held - abandoned, abandoned);
    if (failed_) failed_(why);
  }

  ReadQueue& queue_;
  ReadDone done_;
  EngineFailed failed_;
  UringFaults faults_;
  uint32_t reap_ms_;
  uint32_t qd_;
  io_uring ring_{};
  bool ring_ok_ = false;
  int event_fd_ = -1;
  uint64_t wake_value_ = 0;
  uint8_t* base_ = nullptr;
  uint64_t slot_bytes_ = 0, slots_per_buffer_ = 1;
  std::vector<InFlight> inflight_;  // per slot
  uint32_t in_flight_ = 0;
  uint64_t submitted_ = 0;
  bool reads_unsubmitted_ = false;  // reads prepared since the last successful submit
  std::thread thread_;
};

}  // namespace

std::unique_ptr<ReadEngine> make_uring_engine(ReadQueue& queue, ReadDone done, uint32_t queue_depth,
                                              const SlotRegion& region, std::string& why_not,
                                              EngineFailed failed, UringFaults faults, uint32_t reap_timeout_ms) {
  auto e = std::make_unique<UringEngine>(queue, std::move(done), queue_depth == 0 ? 1 : queue_depth,
                                         std::move(failed), faults, reap_timeout_ms);
  why_not = e->init(region);
  if (!why_not.empty()) return nullptr;
  return e;
}

}  // namespace waste::iod
