// The bounded queue between the store (which decides what to read) and a read engine (which
// reads it). Two priorities: demand reads always leave before prefetch reads. Each slot has at
// most one read outstanding and sits in each ring at most once, so both rings hold at most
// slot_count entries and are sized once at start-up. A prefetch that a demand joins is promoted
// (queued again at demand priority; its copy left in the prefetch ring is skipped when popped,
// or reused if the slot is prefetched again before that).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <vector>

namespace waste::iod {

struct ReadJob {
  uint32_t slot = 0;
  uint64_t generation = 0;
  int fd = -1;
  uint64_t offset = 0;  // in the bank file (4 KiB aligned)
  uint32_t bytes = 0;   // the record stride (4 KiB multiple)
  uint8_t* dst = nullptr;
  uint32_t layer = 0, expert = 0;
  // When the engine submitted the read (CLOCK_MONOTONIC ns, the timeline's clock, from the same
  // clock read as its latency; 0 from an engine that does not say): the read's span starts there (its completion may be handled later, after other records'
  // checks, so "handled minus latency" would place it late).
  int64_t submitted_ns = 0;
  // Set by an engine that gave up on a read the kernel may still complete (a dead io_uring):
  // the slot is failed for its waiters but must never be reused, or a late DMA would land in
  // another record.
  bool abandoned = false;
};

class ReadQueue {
 public:
  explicit ReadQueue(uint32_t slot_count);
  void push(const ReadJob& job, bool demand);
  // Raises a queued prefetch of (slot, generation) to demand priority; false when it already left.
  bool promote(uint32_t slot, uint64_t generation);
  // Next job, demand first; blocks until one is there or the queue is closed (then nullopt).
  std::optional<ReadJob> pop_wait();
  std::optional<ReadJob> try_pop();
  void close();
  bool closed() const;
  size_t queued() const;
  // Called (outside the lock) after every push/close: the io_uring engine wakes its ring with it.
  void set_notify(std::function<void()> fn) { notify_ = std::move(fn); }

 private:
  enum class Mark : uint8_t { None, Prefetch, Demand, Taken };
  struct Ring {
    std::vector<uint32_t> slots;
    size_t head = 0, size = 0;
    void push(uint32_t s);
    uint32_t pop();
  };
  std::optional<ReadJob> pop_locked();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<ReadJob> jobs_;   // per slot: the job waiting to leave
  std::vector<Mark> mark_;      // per slot
  // Per slot: a copy sits in the prefetch ring (live, or left behind by a promotion). Under
  // steady demand the prefetch ring is not popped, so without this a slot prefetched and
  // promoted again and again would pile up copies until the ring overflowed.
  std::vector<bool> in_prefetch_ring_;
  Ring demand_, prefetch_;
  size_t waiting_ = 0;
  bool closed_ = false;
  std::function<void()> notify_;
};

}  // namespace waste::iod
