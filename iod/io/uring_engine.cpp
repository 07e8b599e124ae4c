// The io_uring engine: one thread owns the ring. The slot region is registered as fixed
// buffers (in chunks of whole slots, each at most kMaxRegisteredBuffer), and every record is
// read with READ_FIXED straight into its slot, cut into reads of at most chunk_bytes that are
// submitted in queue order, with up to queue_depth of them in flight (iod's default,
// kDefaultReadChunk, says what was measured).
//
// Why cut records: a deep queue of whole records (K3's are 12.4 MB) lets the device share its
// rate among all of them, so a layer's records land together at the end and their checks and
// kernels all start then. Reads of a bounded size, submitted record by record, keep as many
// requests at the device while records land one after another, so each record's check and
// kernel run under the reads of the next ones, and a demand waits behind at most queue_depth
// chunks and the rest of the record being submitted, instead of queue_depth whole records
// (docs/LEARNED.md, session 27). The reads of one record are counted in chunks (in_flight_);
// what is reported, and abandoned when the ring dies, is records.
//
// An eventfd read sits in the ring so a newly queued job (or close) wakes the thread out of its
// wait. If the ring dies (a submit error other than a retryable one), the engine reaps what the
// kernel still holds, reports every record it held, tells its owner (EngineFailed) and ends.
#include <liburing.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#include "iod/io/read_engine.h"

namespace waste::iod {

namespace {

constexpr uint64_t kWakeTag = ~0ull;

class UringEngine final : public ReadEngine {
 public:
  UringEngine(ReadQueue& q, ReadDone done, uint32_t qd, uint64_t chunk_bytes, EngineFailed failed, UringFaults faults,
              uint32_t reap_ms)
      : queue_(q),
        done_(std::move(done)),
        failed_(std::move(failed)),
        faults_(faults),
        reap_ms_(reap_ms),
        qd_(qd),
        chunk_bytes_(chunk_bytes) {}
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
    records_.assign(slots, {});
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
  // A record taken from the queue and not yet reported: its chunks [0, next) are submitted,
  // `in_kernel` of them not yet completed.
  struct Record {
    ReadJob job;
    std::chrono::steady_clock::time_point start;  // its first chunk's submission
    uint64_t next = 0;         // bytes of the record submitted so far
    uint32_t in_kernel = 0;    // chunks submitted and not completed
    int64_t read = 0;          // bytes the completed chunks read, or the first -errno
    bool active = false;
  };

  void arm_wake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof wake_value_, 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  // Takes the next job from the queue as the record being submitted; false when none is there
  // (or the test hook's count of jobs is reached).
  bool take_job() {
    if (jobs_taken_ >= faults_.fail_after_records) return false;
    auto job = queue_.try_pop();
    if (!job) return false;
    Record& rec = records_[job->slot];
    rec = {*job, {}, 0, 0, 0, true};
    submitting_ = job->slot;
    ++jobs_taken_;
    return true;
  }

  // Prepares the next chunk of the record being submitted; it stops being that once its last
  // chunk is prepared or a chunk before failed (the rest would not make it whole).
  void prepare_chunk() {
    Record& rec = records_[*submitting_];
    const ReadJob& job = rec.job;
    const uint64_t n = chunk_bytes_ == 0 ? job.bytes : std::min<uint64_t>(chunk_bytes_, job.bytes - rec.next);
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);  // never null: the ring has qd + 1 entries
    uint64_t off = uint64_t(job.dst - base_);
    int buf_index = int(off / slot_bytes_ / slots_per_buffer_);
    const int fd = chunks_prepared_ == faults_.bad_chunk ? -1 : job.fd;  // test hook: -EBADF
    io_uring_prep_read_fixed(sqe, fd, job.dst + rec.next, unsigned(n), job.offset + rec.next, buf_index);
    io_uring_sqe_set_data64(sqe, job.slot);
    if (rec.next == 0) {
      // One clock read for both: steady_clock is CLOCK_MONOTONIC on Linux, the timeline's clock.
      rec.start = std::chrono::steady_clock::now();
      rec.job.submitted_ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(rec.start.time_since_epoch()).count();
    }
    rec.next += n;
    ++rec.in_kernel;
    ++in_flight_;
    ++chunks_prepared_;
    if (rec.next >= job.bytes) submitting_.reset();
  }

  // Hands every record whose last chunk completed to done_; returns whether the wake read
  // completed.
  bool drain_completions() {
    io_uring_cqe* cqe;
    unsigned head, seen = 0;
    bool woke = false;
    // Every completion in the ring had landed by now: one clock for all of them, or each later
    // one's latency would include the time done_ took for the ones before it.
    const auto landed = std::chrono::steady_clock::now();
    io_uring_for_each_cqe(&ring_, head, cqe) {
      ++seen;
      uint64_t tag = io_uring_cqe_get_data64(cqe);
      if (tag == kWakeTag) {
        woke = true;
        continue;
      }
      Record& rec = records_[tag];
      --rec.in_kernel;
      --in_flight_;
      // The first error stands; a short chunk leaves the total below the record's size, which
      // done_ reports as a short read.
      if (rec.read >= 0) rec.read = cqe->res < 0 ? int64_t(cqe->res) : rec.read + cqe->res;
      if (rec.read < 0 && submitting_ == tag) submitting_.reset();  // no more chunks of a failed record
      if (rec.in_kernel == 0 && !(submitting_ == tag)) {
        rec.active = false;
        auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(landed - rec.start).count();
        done_(rec.job, rec.read, uint64_t(ns));
      }
    }
    io_uring_cq_advance(&ring_, seen);
    return woke;
  }

  void run() {
    arm_wake();
    bool closing = false;
    for (;;) {
      // A record taken is read to its end even once the queue closes: stop() waits for every
      // record taken, and one left half-submitted would never be reported.
      while (in_flight_ < qd_ && chunks_prepared_ < faults_.fail_after_chunks) {
        if (!submitting_ && (closing || !take_job())) break;
        prepare_chunk();
      }
      if (queue_.closed()) closing = true;
      if (closing && in_flight_ == 0) break;
      int r;
      const bool hook_fires = (jobs_taken_ >= faults_.fail_after_records && !submitting_) ||
                              chunks_prepared_ >= faults_.fail_after_chunks;
      if (hook_fires) {
        // Test hook: the ring dies as a submit fails, the reads prepared so far having reached
        // the kernel (so die() has reads to reap), or with abandon_in_flight never reaching it.
        if (!faults_.abandon_in_flight) io_uring_submit(&ring_);
        r = -EIO;
      } else {
        r = io_uring_submit_and_wait(&ring_, 1);
      }
      if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) {
        die(std::string("io_uring submit failed: ") + std::strerror(-r));
        return;
      }
      if (drain_completions() && !closing) arm_wake();
    }
  }

  // The ring cannot submit any more. Reads the kernel holds are reaped (bounded wait); a record
  // with a chunk that does not complete is reported abandoned (its slot is failed and never
  // reused), one cut short with nothing left in the kernel is reported failed. Then the owner
  // is told, so it can serve the queue another way; this thread ends.
  void die(const std::string& why) {
    const bool half_submitted = submitting_.has_value();
    if (submitting_) {
      // What this record still lacks will not be read: it fails even if its chunks in the
      // kernel complete (or it would be reported as a short read).
      Record& rec = records_[*submitting_];
      if (rec.read >= 0) rec.read = -ECANCELED;
      submitting_.reset();
    }
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
    uint32_t abandoned = 0, cut_short = 0;
    for (Record& rec : records_) {
      if (!rec.active) continue;
      rec.active = false;
      in_flight_ -= rec.in_kernel;
      ReadJob j = rec.job;
      j.abandoned = rec.in_kernel > 0;
      ++(j.abandoned ? abandoned : cut_short);
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - rec.start).count();
      done_(j, -ECANCELED, uint64_t(ns));
    }
    spdlog::error(
        "iod: {}; {} reads were in flight; {} records abandoned with a read the kernel still held (their slots are "
        "quarantined), {} cut short (failed){}",
        why, held, abandoned, cut_short,
        half_submitted ? "; the record being submitted failed (not all of it was read)" : "");
    if (failed_) failed_(why);
  }

  ReadQueue& queue_;
  ReadDone done_;
  EngineFailed failed_;
  UringFaults faults_;
  uint32_t reap_ms_;
  uint32_t qd_;
  uint64_t chunk_bytes_;  // 0: a record is one read
  io_uring ring_{};
  bool ring_ok_ = false;
  int event_fd_ = -1;
  uint64_t wake_value_ = 0;
  uint8_t* base_ = nullptr;
  uint64_t slot_bytes_ = 0, slots_per_buffer_ = 1;
  std::vector<Record> records_;           // per slot
  std::optional<uint32_t> submitting_;    // the slot whose record has chunks left to submit
  uint32_t in_flight_ = 0;                // chunks in the kernel
  uint64_t jobs_taken_ = 0;
  uint64_t chunks_prepared_ = 0;          // counted for the test hooks
  std::thread thread_;
};

}  // namespace

std::unique_ptr<ReadEngine> make_uring_engine(ReadQueue& queue, ReadDone done, uint32_t queue_depth,
                                              uint64_t chunk_bytes, const SlotRegion& region, std::string& why_not,
                                              EngineFailed failed, UringFaults faults, uint32_t reap_timeout_ms) {
  auto e = std::make_unique<UringEngine>(queue, std::move(done), queue_depth == 0 ? 1 : queue_depth, chunk_bytes,
                                         std::move(failed), faults, reap_timeout_ms);
  why_not = e->init(region);
  if (!why_not.empty()) return nullptr;
  return e;
}

}  // namespace waste::iod
