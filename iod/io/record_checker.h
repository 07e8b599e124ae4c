// The thread that checks and publishes what the io_uring thread reaped. Checking a record
// (the xxh3 of 12.4 MB at K3 widths, ~0.2-0.5 ms) on the ring's own thread stopped it from
// submitting while it hashed: with records read in chunks (--read-chunk) the disk ran dry
// under every check. Here the ring thread only reaps and submits; completions wait in a ring
// sized at start to the slot count (a slot has at most one read outstanding, so it never
// fills) and are handed to `done` in the order they were reaped.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "iod/io/read_engine.h"

namespace waste::iod {

class RecordChecker {
 public:
  RecordChecker(uint32_t slot_count, ReadDone done);
  ~RecordChecker();
  RecordChecker(const RecordChecker&) = delete;
  RecordChecker& operator=(const RecordChecker&) = delete;

  // What the engine calls instead of `done` (any thread).
  void landed(const ReadJob& job, int64_t result, uint64_t latency_ns);
  // Hands over every completion already landed, then ends the thread (idempotent). Call it
  // after the engines that feed it have stopped.
  void stop();

 private:
  struct Landed {
    ReadJob job;
    int64_t result = 0;
    uint64_t latency_ns = 0;
  };
  void run();

  ReadDone done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Landed> ring_;  // slot_count entries
  size_t head_ = 0, size_ = 0;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace waste::iod
