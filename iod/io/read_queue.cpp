#include "iod/io/read_queue.h"

#include "shared/util/error.h"

namespace waste::iod {

void ReadQueue::Ring::push(uint32_t s) {
  // Capacity is the slot count and each slot sits in a ring at most once.
  require(size < slots.size(), "iod read queue: ring overflow");
  slots[(head + size) % slots.size()] = s;
  ++size;
}

uint32_t ReadQueue::Ring::pop() {
  uint32_t s = slots[head];
  head = (head + 1) % slots.size();
  --size;
  return s;
}

ReadQueue::ReadQueue(uint32_t slot_count)
    : jobs_(slot_count), mark_(slot_count, Mark::None), in_prefetch_ring_(slot_count, false) {
  demand_.slots.assign(slot_count, 0);
  prefetch_.slots.assign(slot_count, 0);
}

void ReadQueue::push(const ReadJob& job, bool demand) {
  {
    std::lock_guard lock(mu_);
    require(job.slot < jobs_.size(), "iod read queue: slot out of range");
    require(mark_[job.slot] != Mark::Prefetch && mark_[job.slot] != Mark::Demand,
            "iod read queue: slot " + std::to_string(job.slot) + " already has a queued read");
    jobs_[job.slot] = job;
    mark_[job.slot] = demand ? Mark::Demand : Mark::Prefetch;
    if (demand) {
      demand_.push(job.slot);
    } else if (!in_prefetch_ring_[job.slot]) {  // else the copy a promotion left behind serves
      prefetch_.push(job.slot);
      in_prefetch_ring_[job.slot] = true;
    }
    ++waiting_;
  }
  cv_.notify_one();
  if (notify_) notify_();
}

bool ReadQueue::promote(uint32_t slot, uint64_t generation) {
  {
    std::lock_guard lock(mu_);
    if (slot >= jobs_.size() || mark_[slot] != Mark::Prefetch || jobs_[slot].generation != generation) return false;
    mark_[slot] = Mark::Demand;
    demand_.push(slot);  // the copy left in the prefetch ring is skipped when popped
  }
  if (notify_) notify_();
  return true;
}

std::optional<ReadJob> ReadQueue::pop_locked() {
  while (demand_.size > 0 || prefetch_.size > 0) {
    bool from_demand = demand_.size > 0;
    uint32_t s = from_demand ? demand_.pop() : prefetch_.pop();
    if (!from_demand) in_prefetch_ring_[s] = false;
    Mark want = from_demand ? Mark::Demand : Mark::Prefetch;
    if (mark_[s] != want) continue;  // the other copy of a promoted prefetch
    mark_[s] = Mark::Taken;
    --waiting_;
    return jobs_[s];
  }
  return std::nullopt;
}

std::optional<ReadJob> ReadQueue::pop_wait() {
  std::unique_lock lock(mu_);
  for (;;) {
    if (closed_) return std::nullopt;
    if (auto j = pop_locked()) return j;
    cv_.wait(lock);
  }
}

std::optional<ReadJob> ReadQueue::try_pop() {
  std::lock_guard lock(mu_);
  if (closed_) return std::nullopt;
  return pop_locked();
}

void ReadQueue::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (notify_) notify_();
}

bool ReadQueue::closed() const {
  std::lock_guard lock(mu_);
  return closed_;
}

size_t ReadQueue::queued() const {
  std::lock_guard lock(mu_);
  return waiting_;
}

}  // namespace waste::iod
