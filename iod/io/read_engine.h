// Read engines: take jobs from the ReadQueue and read records straight into their slots with
// direct I/O (shared/platform/direct_io.h), calling `done` on completion (on the engine's own
// thread). Two implementations behind one interface: io_uring (READ_FIXED into the registered
// slot region; only in a build with it, io_choice.h) and a bounded pool of pread threads. A
// macOS port runs the pread pool on F_NOCACHE descriptors, a Windows port would add an
// overlapped-I/O engine here (docs/PORTING.md); only Linux is built here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "iod/io/read_queue.h"

namespace waste::iod {

// result: bytes read (may be short) or -errno; latency from submission to completion.
using ReadDone = std::function<void(const ReadJob& job, int64_t result, uint64_t latency_ns)>;

class ReadEngine {
 public:
  virtual ~ReadEngine() = default;
  virtual std::string name() const = 0;  // "io_uring" or "pread"
  // Stops taking jobs once the queue is closed; waits for reads in flight, joins its threads.
  virtual void stop() = 0;
};

// The memory reads land in: [base, base + bytes), cut into slots of slot_bytes.
struct SlotRegion {
  uint8_t* base = nullptr;
  uint64_t bytes = 0;
  uint64_t slot_bytes = 0;
};

// Called once, on the engine's thread, when a running engine dies (the ring fails): every read
// it held has been reported through ReadDone by then (completed, or `abandoned`), jobs still in
// the queue are untouched, and the engine takes no more. The owner starts another engine on
// the same queue (iod falls back to the pread pool).
using EngineFailed = std::function<void(const std::string& why)>;

// Test hooks of the io_uring engine (all off by default).
struct UringFaults {
  // Once this many records (jobs) were taken and all their reads prepared, the ring fails as
  // if its submit had failed (-EIO), right after submitting what was prepared: the dying engine
  // reaps those reads.
  uint64_t fail_after_records = UINT64_MAX;
  // With the above or fail_after_chunks: the ring dies as soon as those reads are prepared,
  // before they are submitted, and reports every record it holds abandoned at once (no
  // reaping, no cancel), as when the kernel would neither finish nor cancel them. Which records
  // are abandoned is then deterministic when each is one read within queue_depth (the tests'
  // records): exactly the first fail_after_records jobs taken from the queue.
  bool abandon_in_flight = false;
  // Once this many chunks (reads) were prepared, the ring fails (-EIO) after submitting them,
  // as fail_after_records does, but wherever that falls: also half-way through a record.
  uint64_t fail_after_chunks = UINT64_MAX;
  // The chunk with this index (every chunk prepared counts, from 0) is read from a descriptor
  // that is not open, so the kernel completes it with -EBADF: one chunk failing mid-record.
  uint64_t bad_chunk = UINT64_MAX;
};

// How long a dying io_uring engine waits for the reads it submitted before it abandons them.
constexpr uint32_t kDefaultReapTimeoutMs = 2000;

// Returns nullptr and sets why_not when io_uring or buffer registration is unavailable. Defined
// only where kHaveUring (io_choice.h): callers guard the call with `if constexpr (kHaveUring)`.
// queue_depth bounds the reads in flight; a record longer than chunk_bytes (a 4 KiB multiple;
// 0 = no limit) is read as several reads of at most chunk_bytes, and is done when all are.
std::unique_ptr<ReadEngine> make_uring_engine(ReadQueue& queue, ReadDone done, uint32_t queue_depth,
                                              uint64_t chunk_bytes, const SlotRegion& region, std::string& why_not,
                                              EngineFailed failed = {}, UringFaults faults = {},
                                              uint32_t reap_timeout_ms = kDefaultReapTimeoutMs);
std::unique_ptr<ReadEngine> make_pread_engine(ReadQueue& queue, ReadDone done, uint32_t threads);

// What iod reads a record in by default with io_uring (iod --read-chunk): 2 MiB. K3's 12.4 MB
// records then land one after another, each checked (on the checker thread) and used under the
// reads of the next, and a layer's end follows its last read by 4 ms instead of 8; decode
// 1.00-1.14x whole records in nine alternated pairs, neutral on 2.67 MB Kimi-Linear records.
// 1 MiB (more requests, fewer bytes in flight) read slower on this host's disk, 4 MiB staggered
// less (docs/LEARNED.md and MEASUREMENTS.md, session 27).
constexpr uint64_t kDefaultReadChunk = 2ull << 20;
// A chunk above this is no chunk: it bounds the flag, not a record.
constexpr uint64_t kMaxReadChunk = 1ull << 30;

// Largest registered buffer the engine asks the kernel for (it limits one buffer's size).
constexpr uint64_t kMaxRegisteredBuffer = 1ull << 30;

}  // namespace waste::iod
