// The io_uring engine's death path, driven directly: a read that never completes (a pipe with
// no writer data) is in flight when the ring fails; the engine must report it abandoned, hand
// back every other read, call EngineFailed, and leave queued jobs for another engine.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "iod/io/io_choice.h"
#include "iod/io/read_engine.h"
#include "iod/io/read_queue.h"
#include "tests/skip.h"
#include "tests/support/temp_dir.h"

using namespace waste::iod;

namespace {

struct Done {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<ReadJob, int64_t>> results;
  std::string failed_why;
  bool failed = false;
  // The engine's ReadDone: records each result and wakes a waiter.
  ReadDone recorder() {
    return [this](const ReadJob& j, int64_t r, uint64_t) {
      std::lock_guard lock(mu);
      results.push_back({j, r});
      cv.notify_all();
    };
  }
  // The engine's EngineFailed: records why and wakes a waiter.
  EngineFailed on_failed() {
    return [this](const std::string& why) {
      std::lock_guard lock(mu);
      failed = true;
      failed_why = why;
      cv.notify_all();
    };
  }
};

// A job reading slot_bytes from fd at offset into slot `slot` of the region at base.
ReadJob slot_job(uint8_t* base, uint64_t slot_bytes, uint32_t slot, int fd, uint64_t offset) {
  ReadJob j;
  j.slot = slot;
  j.generation = 1;
  j.fd = fd;
  j.offset = offset;
  j.bytes = uint32_t(slot_bytes);
  j.dst = base + slot * slot_bytes;
  return j;
}

// A file of `bytes` bytes, byte i = (i * 7 + 3) mod 256, open read-write, removed with its
// temporary directory at the end.
struct TempFile {
  waste::test::TempDir dir{"waste-uring-test"};
  std::string path = dir / "data";
  int fd = -1;
  explicit TempFile(size_t bytes) {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0);
    std::vector<uint8_t> data(bytes);
    for (size_t i = 0; i < bytes; ++i) data[i] = uint8_t(i * 7 + 3);
    REQUIRE_EQ(::write(fd, data.data(), bytes), ssize_t(bytes));
  }
  ~TempFile() { ::close(fd); }
};

}  // namespace

TEST_CASE("uring engine: a dead ring reaps, abandons what never completes, and leaves the queue") {
  constexpr uint32_t kSlots = 4;
  constexpr uint64_t kSlotBytes = 4096;
  void* mem = std::aligned_alloc(4096, kSlots * kSlotBytes);
  REQUIRE(mem != nullptr);
  std::unique_ptr<void, void (*)(void*)> hold(mem, std::free);
  auto* base = static_cast<uint8_t*>(mem);
  TempFile file(2 * kSlotBytes);
  int pipefd[2];
  REQUIRE(::pipe(pipefd) == 0);

  ReadQueue queue(kSlots);
  Done d;
  ReadDone done = d.recorder();
  auto job = [&](uint32_t slot, int fd, uint64_t offset) { return slot_job(base, kSlotBytes, slot, fd, offset); };
  // Slot 0 reads the pipe (never completes), slot 1 the file; both are submitted, then the ring
  // "dies" (test hook after 2 reads); slot 2's job is still queued.
  queue.push(job(0, pipefd[0], 0), true);
  queue.push(job(1, file.fd, kSlotBytes), true);
  UringFaults faults;
  faults.fail_after_records = 2;
  std::string why_not;
  SlotRegion region{base, kSlots * kSlotBytes, kSlotBytes};
  std::unique_ptr<ReadEngine> engine;
  // A build without io_uring has no make_uring_engine (iod/io/io_choice.h).
  if constexpr (kHaveUring)
    engine = make_uring_engine(queue, done, 4, kDefaultReadChunk, region, why_not, d.on_failed(), faults, 200);
  else
    why_not = "built without io_uring";
  if (!engine) {
    waste::test::skip_part("io_uring unavailable here (" + why_not + ")");
    ::close(pipefd[0]);
    ::close(pipefd[1]);
    return;
  }
  {
    std::unique_lock lock(d.mu);
    REQUIRE(d.cv.wait_for(lock, std::chrono::seconds(10), [&] { return d.failed; }));
  }
  queue.push(job(2, file.fd, 0), true);  // after the death: nobody takes it but a new engine
  std::lock_guard lock(d.mu);
  REQUIRE_EQ(d.results.size(), 2u);
  for (const auto& [j, r] : d.results) {
    if (j.slot == 1) {
      CHECK_FALSE(j.abandoned);
      CHECK_EQ(r, int64_t(kSlotBytes));
      CHECK_EQ(base[kSlotBytes], uint8_t(kSlotBytes * 7 + 3));
    } else {
      CHECK_EQ(j.slot, 0u);
      // The pipe read is cancelled by the kernel (a clean -ECANCELED/-EINTR completion) or, if
      // it would not cancel, abandoned; either way it is reported and never READY.
      CHECK_LT(r, 0);
    }
  }
  CHECK(d.failed_why.find("io_uring submit failed") != std::string::npos);
  CHECK_EQ(queue.queued(), 1u);
  ::close(pipefd[1]);
  ::close(pipefd[0]);
}

TEST_CASE("uring engine: a record longer than a chunk is read in chunks, whole, and reports what it read") {
  // Records of 5 pages read in chunks of 2 pages with 2 reads in flight, fewer than a record's
  // chunks: each record is submitted over several rounds of the ring. Record 0 reads the file's
  // start, record 1 starts a page in (every chunk lands at its own offset), record 2 runs past
  // the file's end (the total falls short, which the store reports as a short read).
  constexpr uint32_t kSlots = 3;
  constexpr uint64_t kPage = 4096, kSlotBytes = 5 * kPage, kChunk = 2 * kPage;
  void* mem = std::aligned_alloc(4096, kSlots * kSlotBytes);
  REQUIRE(mem != nullptr);
  std::unique_ptr<void, void (*)(void*)> hold(mem, std::free);
  auto* base = static_cast<uint8_t*>(mem);
  std::memset(base, 0xEE, kSlots * kSlotBytes);
  const uint64_t file_bytes = kSlotBytes + 3 * kPage;
  TempFile file(file_bytes);
  // Every 8 bytes hold their own file offset: a chunk read from the wrong place or landing at
  // the wrong place in its slot shows (the file's default pattern repeats every 256 bytes).
  auto byte_at = [](uint64_t pos) { return uint8_t((pos - pos % 8) >> (8 * (pos % 8))); };
  {
    std::vector<uint8_t> data(file_bytes);
    for (uint64_t i = 0; i < file_bytes; ++i) data[i] = byte_at(i);
    REQUIRE_EQ(::pwrite(file.fd, data.data(), file_bytes, 0), ssize_t(file_bytes));
  }
  ReadQueue queue(kSlots);
  Done d;
  ReadDone done = d.recorder();
  const uint64_t offsets[kSlots] = {0, kPage, kSlotBytes};
  for (uint32_t s = 0; s < kSlots; ++s) queue.push(slot_job(base, kSlotBytes, s, file.fd, offsets[s]), true);
  std::string why_not;
  SlotRegion region{base, kSlots * kSlotBytes, kSlotBytes};
  std::unique_ptr<ReadEngine> engine;
  if constexpr (kHaveUring) engine = make_uring_engine(queue, done, 2, kChunk, region, why_not);
  else why_not = "built without io_uring";
  if (!engine) {
    waste::test::skip_part("io_uring unavailable here (" + why_not + ")");
    return;
  }
  {
    std::unique_lock lock(d.mu);
    REQUIRE(d.cv.wait_for(lock, std::chrono::seconds(10), [&] { return d.results.size() == kSlots; }));
  }
  engine->stop();
  for (const auto& result : d.results) {
    // Not a structured binding: CAPTURE's lambda cannot name one before clang 16.
    const ReadJob& j = result.first;
    const int64_t r = result.second;
    CAPTURE(j.slot);
    CHECK_FALSE(j.abandoned);
    CHECK_GT(j.submitted_ns, 0);
    const uint64_t expect = std::min(kSlotBytes, file_bytes - offsets[j.slot]);
    CHECK_EQ(r, int64_t(expect));
    size_t wrong = 0;
    for (uint64_t i = 0; i < expect; ++i)
      wrong += base[j.slot * kSlotBytes + i] != byte_at(offsets[j.slot] + i);
    CHECK_EQ(wrong, 0u);
  }
}

TEST_CASE("uring engine: one that cannot start leaves the queue open for the pread pool") {
  // Without io_uring (qemu-user, seccomp, kernel.io_uring_disabled) init fails at the ring;
  // with it, at registering a buffer the kernel cannot pin (a null base: EFAULT). Either way
  // make_uring_engine gives up, and iod falls back to a pread pool on the same queue.
  constexpr uint32_t kSlots = 2;
  constexpr uint64_t kSlotBytes = 4096;
  ReadQueue queue(kSlots);
  [[maybe_unused]] std::string why_not;
  [[maybe_unused]] SlotRegion unregistrable{nullptr, kSlots * kSlotBytes, kSlotBytes};
  // A build without io_uring has no make_uring_engine (iod/io/io_choice.h): there iod starts on
  // the pread pool directly, which the rest of the case checks.
  if constexpr (kHaveUring) {
    auto engine =
        make_uring_engine(queue, [](const ReadJob&, int64_t, uint64_t) {}, 2, kDefaultReadChunk, unregistrable, why_not);
    REQUIRE(engine == nullptr);
    CHECK_FALSE(why_not.empty());
    MESSAGE("io_uring engine refused: " << why_not);
  }
  CHECK_FALSE(queue.closed());

  // The fallback pool reads a job pushed after the failure.
  void* mem = std::aligned_alloc(4096, kSlots * kSlotBytes);
  REQUIRE(mem != nullptr);
  std::unique_ptr<void, void (*)(void*)> hold(mem, std::free);
  auto* base = static_cast<uint8_t*>(mem);
  TempFile file(kSlotBytes);
  Done d;
  auto pool = make_pread_engine(queue, d.recorder(), 2);
  queue.push(slot_job(base, kSlotBytes, 1, file.fd, 0), true);
  {
    std::unique_lock lock(d.mu);
    REQUIRE(d.cv.wait_for(lock, std::chrono::seconds(30), [&] { return !d.results.empty(); }));
    CHECK_EQ(d.results[0].second, int64_t(kSlotBytes));
    CHECK_EQ(base[kSlotBytes + 5], uint8_t(5 * 7 + 3));
  }
  pool->stop();
  CHECK(queue.closed());  // stopping the engine that runs is what closes the queue
}

namespace {

// Slots of 5 pages read in 1-page chunks with 2 in flight, records queued over slots [0, n):
// the setting of the two mid-record cases below.
struct ChunkedRig {
  static constexpr uint64_t kPage = 4096, kSlotBytes = 5 * kPage;
  static constexpr uint32_t kSlots = 3;
  std::unique_ptr<void, void (*)(void*)> mem{std::aligned_alloc(4096, kSlots * kSlotBytes), std::free};
  uint8_t* base = static_cast<uint8_t*>(mem.get());  // checked in start_or_skip()
  TempFile file{kSlots * kSlotBytes};
  ReadQueue queue{kSlots};
  Done d;

  ChunkedRig() {
    push(0);
    push(1);
  }
  void push(uint32_t slot) { queue.push(slot_job(base, kSlotBytes, slot, file.fd, slot * kSlotBytes), true); }
  // The engine over the rig's queue, or nullptr after reporting the case's part skipped.
  std::unique_ptr<ReadEngine> start_or_skip(UringFaults faults) {
    REQUIRE(base != nullptr);
    std::memset(base, 0xEE, kSlots * kSlotBytes);
    SlotRegion region{base, kSlots * kSlotBytes, kSlotBytes};
    std::string why_not = "built without io_uring";
    std::unique_ptr<ReadEngine> engine;
    if constexpr (kHaveUring) engine = make_uring_engine(queue, d.recorder(), 2, kPage, region, why_not, d.on_failed(), faults, 2000);
    if (!engine) waste::test::skip_part("io_uring unavailable here (" + why_not + ")");
    return engine;
  }
  // Waits (at most 10 s) until `done` holds under the results' lock.
  bool wait_until(const std::function<bool()>& done) {
    std::unique_lock lock(d.mu);
    return d.cv.wait_for(lock, std::chrono::seconds(10), done);
  }
  // Whether slot s holds its whole record (TempFile's pattern at the record's offset).
  bool whole(uint32_t s) const {
    for (uint64_t i = 0; i < kSlotBytes; ++i)
      if (base[s * kSlotBytes + i] != uint8_t((s * kSlotBytes + i) * 7 + 3)) return false;
    return true;
  }
};

}  // namespace

TEST_CASE("uring engine: a chunk failing mid-record fails its record once, with the chunk's error, and no other") {
  // The second chunk of record 0 is read from a descriptor that is not open (fd -1, test hook):
  // the kernel completes it with -EBADF. Record 0 must be reported once, with that error (not
  // as a short read of the chunks that did land), and record 1 read whole; the ring lives on.
  ChunkedRig rig;  // records 0 and 1 queued
  auto engine = rig.start_or_skip({.bad_chunk = 1});
  if (!engine) return;
  REQUIRE(rig.wait_until([&] { return rig.d.results.size() == 2; }));
  engine->stop();  // every record taken has been reported by now: nothing more may come
  std::lock_guard lock(rig.d.mu);
  REQUIRE_EQ(rig.d.results.size(), 2u);
  for (const auto& result : rig.d.results) {
    const ReadJob& j = result.first;
    CAPTURE(j.slot);
    CHECK_FALSE(j.abandoned);
    if (j.slot == 0) {
      CHECK_EQ(result.second, -int64_t(EBADF));
    } else {
      CHECK_EQ(j.slot, 1u);
      CHECK_EQ(result.second, int64_t(ChunkedRig::kSlotBytes));
      CHECK(rig.whole(1));
    }
  }
  CHECK_FALSE(rig.d.failed);
}

TEST_CASE("uring engine: a ring dying half-way through a record reports that record once, failed, and leaves the queue") {
  // The ring dies after 3 of record 0's 5 chunks were submitted (test hook): the 3 are reaped,
  // but the record can never be whole, so it is reported failed (-ECANCELED), neither as a
  // short read nor abandoned (nothing of it is left in the kernel); record 1, still queued, is
  // left for the engine that takes over.
  ChunkedRig rig;  // records 0 and 1 queued
  auto engine = rig.start_or_skip({.fail_after_chunks = 3});
  if (!engine) return;
  REQUIRE(rig.wait_until([&] { return rig.d.failed; }));
  std::lock_guard lock(rig.d.mu);
  REQUIRE_EQ(rig.d.results.size(), 1u);
  CHECK_EQ(rig.d.results[0].first.slot, 0u);
  CHECK_FALSE(rig.d.results[0].first.abandoned);
  CHECK_EQ(rig.d.results[0].second, -int64_t(ECANCELED));
  CHECK(rig.d.failed_why.find("io_uring submit failed") != std::string::npos);
  CHECK_EQ(rig.queue.queued(), 1u);
}
