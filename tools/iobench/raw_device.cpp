// The raw-device reference of `waste iobench`: whole expert records read with direct I/O at a
// fixed number in flight, with no cache, no RPC and no checksum, so the ratio iod / raw is
// what the daemon costs. The page cache plays no part (direct I/O, no fallback); which records
// are read (cold ones, see record_ages.h) is the caller's choice.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "iod/io/io_choice.h"
#include "shared/container/reader.h"
#include "shared/platform/direct_io.h"
#include "shared/util/error.h"
#include "tools/iobench/raw_reads.h"
#include "tools/iobench/percentile.h"
#include "tools/iobench/replay.h"

namespace waste::iobench {

namespace {

struct Bank {
  int fd = -1;
  uint64_t stride = 0;
  uint32_t experts = 0;
};

using Clock = raw::Clock;

}  // namespace

RawResult measure_raw_device(const std::string& model, uint32_t qd, const std::string& io, uint64_t bytes) {
  Container c = Container::open(model);
  // Same random sequence every run: uniform over layers, then experts.
  std::mt19937_64 rng(12345);
  std::vector<RecordRef> records;
  uint64_t planned = 0;
  const auto& layers = c.expert_layers();
  require(!layers.empty(), "iobench: " + model + " has no expert banks");
  while (planned < bytes) {
    uint32_t b = uint32_t(rng() % layers.size());
    records.push_back({b, uint32_t(rng() % layers[b].expert_count)});
    planned += layers[b].layout.stride;
  }
  return measure_raw_records(model, records, qd, io, 0);
}

RawResult measure_raw_records(const std::string& model, const std::vector<RecordRef>& records, uint32_t qd,
                              const std::string& io, double max_seconds) {
  const std::string bad_io = iod::io_choice_problem(io);
  require(bad_io.empty(), "iobench: --io: " + bad_io);
  Container c = Container::open(model);
  // Closes every bank on every way out, a throw included.
  struct Banks {
    std::vector<Bank> list;
    ~Banks() {
      for (auto& b : list) platform::close_file(b.fd);
    }
  } banks;
  uint64_t max_stride = 0;
  for (const auto& l : c.expert_layers()) {
    // No page-cache fallback: a cached read would measure RAM, not the device.
    const platform::DirectFile f = platform::open_direct_read(l.bank_path, platform::DirectFallback::Refuse);
    if (f.fd < 0)
      throw Error(l.bank_path + ": cannot open with " + platform::kDirectIoName + ": " + std::strerror(f.error));
    banks.list.push_back({f.fd, l.layout.stride, l.expert_count});
    max_stride = std::max(max_stride, l.layout.stride);
  }
  qd = std::max<uint32_t>(1, qd);
  std::vector<raw::Read> reads;
  reads.reserve(records.size());
  for (const RecordRef& r : records) {
    if (r.bank >= banks.list.size() || r.expert >= banks.list[r.bank].experts)
      throw Error("iobench: raw read of record " + std::to_string(r.bank) + "/" + std::to_string(r.expert) +
                  " outside " + model);
    const Bank& b = banks.list[r.bank];
    reads.push_back({b.fd, b.stride, uint64_t(r.expert) * b.stride});
  }
  // No new read starts after the deadline (0 = none); the ones in flight finish and count.
  const auto deadline = max_seconds > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(max_seconds))
                                        : Clock::time_point::max();
  void* mem = std::aligned_alloc(platform::kDirectIoAlign, size_t(qd) * max_stride);
  if (mem == nullptr) throw Error("iobench: cannot allocate " + std::to_string(qd) + " raw-read buffers");
  std::unique_ptr<void, void (*)(void*)> hold(mem, std::free);
  // Touched before the clock starts: iod's slots are resident before its reads, so the raw
  // reads should not pay first-touch page faults either.
  std::memset(mem, 0, size_t(qd) * max_stride);

  raw::Pass pass;
  if (io == "uring") {
    // A build without io_uring has refused "uring" above (and has no read_with_uring).
    if constexpr (iod::kHaveUring)
      pass = raw::read_with_uring(reads, qd, static_cast<uint8_t*>(mem), max_stride, deadline);
  } else {
    pass = raw::read_with_pread(reads, qd, static_cast<uint8_t*>(mem), max_stride, deadline);
    if (pass.failed) throw Error("iobench: a raw pread of " + model + " failed or came back short");
  }
  RawResult r;
  r.depth = qd;
  r.fixed_buffers = pass.fixed_buffers;
  r.seconds = pass.seconds;
  r.bytes = pass.bytes;
  r.reads = std::min(pass.issued, reads.size());
  r.gb_per_s = r.seconds > 0 ? double(r.bytes) / r.seconds / 1e9 : 0;
  r.p50_us = percentile(pass.lat_us, 0.50);
  r.p99_us = percentile(pass.lat_us, 0.99);
  return r;
}

namespace raw {

Pass read_with_pread(const std::vector<Read>& reads, uint32_t qd, uint8_t* buffers, uint64_t buffer_bytes,
                     Clock::time_point deadline) {
  std::atomic<size_t> next{0};
  std::atomic<uint64_t> total{0};
  std::atomic<bool> failed{false};
  std::vector<std::vector<double>> lats(qd);
  std::vector<std::thread> threads;
  const auto t0 = Clock::now();
  for (uint32_t i = 0; i < qd; ++i) {
    threads.emplace_back([&, i] {
      uint8_t* buf = buffers + uint64_t(i) * buffer_bytes;
      for (size_t k; Clock::now() < deadline && (k = next.fetch_add(1)) < reads.size();) {
        const Read& t = reads[k];
        auto s = Clock::now();
        const int64_t n = platform::read_at(t.fd, buf, t.bytes, t.offset);
        lats[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
        if (n > 0) total += uint64_t(n);
        if (n != int64_t(t.bytes)) failed = true;
      }
    });
  }
  for (auto& t : threads) t.join();
  Pass p;
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  p.failed = failed;
  p.bytes = total;
  p.issued = std::min(next.load(), reads.size());
  for (auto& l : lats) p.lat_us.insert(p.lat_us.end(), l.begin(), l.end());
  return p;
}

}  // namespace raw

}  // namespace waste::iobench
