// The raw-device reference of `waste iobench`: whole expert records read with O_DIRECT at a
// fixed number in flight, with no cache, no RPC and no checksum, so the ratio iod / raw is
// what the daemon costs. The page cache plays no part (O_DIRECT); which records are read (cold
// ones, see record_ages.h) is the caller's choice.
#include <fcntl.h>
#include <liburing.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "shared/container/reader.h"
#include "shared/util/error.h"
#include "tools/iobench/replay.h"

namespace waste::iobench {

namespace {

struct Bank {
  int fd = -1;
  uint64_t stride = 0;
  uint32_t experts = 0;
};

struct Target {
  uint32_t bank = 0;
  uint64_t offset = 0;
};

using Clock = std::chrono::steady_clock;

double percentile(std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t i = std::min(v.size() - 1, size_t(q * double(v.size())));
  std::nth_element(v.begin(), v.begin() + long(i), v.end());
  return v[i];
}

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
  Container c = Container::open(model);
  std::vector<Bank> banks;
  uint64_t max_stride = 0;
  auto close_all = [&] {
    for (auto& b : banks) ::close(b.fd);
  };
  for (const auto& l : c.expert_layers()) {
    int fd = ::open(l.bank_path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
      std::string why = std::strerror(errno);
      close_all();
      throw Error(l.bank_path + ": cannot open with O_DIRECT: " + why);
    }
    banks.push_back({fd, l.layout.stride, l.expert_count});
    max_stride = std::max(max_stride, l.layout.stride);
  }
  qd = std::max<uint32_t>(1, qd);
  std::vector<Target> targets;
  targets.reserve(records.size());
  for (const RecordRef& r : records) {
    if (r.bank >= banks.size() || r.expert >= banks[r.bank].experts) {
      close_all();
      throw Error("iobench: raw read of record " + std::to_string(r.bank) + "/" + std::to_string(r.expert) +
                  " outside " + model);
    }
    targets.push_back({r.bank, uint64_t(r.expert) * banks[r.bank].stride});
  }
  // No new read starts after the deadline (0 = none); the ones in flight finish and count.
  const auto deadline = max_seconds > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                            std::chrono::duration<double>(max_seconds))
                                        : Clock::time_point::max();
  void* mem = std::aligned_alloc(4096, size_t(qd) * max_stride);
  if (mem == nullptr) {
    close_all();
    throw Error("iobench: cannot allocate " + std::to_string(qd) + " raw-read buffers");
  }
  std::unique_ptr<void, void (*)(void*)> hold(mem, std::free);
  // Touched before the clock starts: iod's slots are resident before its reads, so the raw
  // reads should not pay first-touch page faults either.
  std::memset(mem, 0, size_t(qd) * max_stride);
  auto buf = [&](uint32_t i) { return static_cast<uint8_t*>(mem) + uint64_t(i) * max_stride; };

  std::vector<double> lat_us;
  lat_us.reserve(targets.size());
  RawResult r;
  r.depth = qd;
  size_t issued = 0;
  auto t0 = Clock::now();
  if (io == "uring") {
    io_uring ring;
    int rc = io_uring_queue_init(qd, &ring, 0);
    if (rc < 0) {
      close_all();
      throw Error(std::string("iobench: io_uring_queue_init: ") + std::strerror(-rc) + " (use --io pread)");
    }
    // Registered buffers (READ_FIXED), as iod reads: no per-read page pinning. If the kernel
    // refuses (memlock limit), plain reads; the report says which.
    std::vector<iovec> iov(qd);
    for (uint32_t i = 0; i < qd; ++i) iov[i] = {buf(i), size_t(max_stride)};
    r.fixed_buffers = io_uring_register_buffers(&ring, iov.data(), qd) == 0;
    t0 = Clock::now();  // the ring's set-up (pinning the buffers) is not read time
    std::vector<Clock::time_point> start(qd);
    std::vector<uint32_t> free_bufs;
    for (uint32_t i = 0; i < qd; ++i) free_bufs.push_back(i);
    size_t next = 0, done = 0;
    while (done < targets.size()) {
      while (next < targets.size() && !free_bufs.empty() && Clock::now() < deadline) {
        uint32_t i = free_bufs.back();
        free_bufs.pop_back();
        const Target& t = targets[next++];
        io_uring_sqe* sqe = io_uring_get_sqe(&ring);
        if (r.fixed_buffers)
          io_uring_prep_read_fixed(sqe, banks[t.bank].fd, buf(i), unsigned(banks[t.bank].stride), t.offset, int(i));
        else
          io_uring_prep_read(sqe, banks[t.bank].fd, buf(i), unsigned(banks[t.bank].stride), t.offset);
        io_uring_sqe_set_data64(sqe, i);
        start[i] = Clock::now();
      }
      if (done == next) break;  // deadline passed with nothing in flight
      io_uring_submit_and_wait(&ring, 1);
      io_uring_cqe* cqe;
      unsigned head, seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        uint32_t i = uint32_t(io_uring_cqe_get_data64(cqe));
        if (cqe->res < 0) {
          io_uring_queue_exit(&ring);
          close_all();
          throw Error(std::string("iobench: raw read failed: ") + std::strerror(-cqe->res));
        }
        r.bytes += uint64_t(cqe->res);
        lat_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start[i]).count());
        free_bufs.push_back(i);
        ++done;
      }
      io_uring_cq_advance(&ring, seen);
    }
    io_uring_queue_exit(&ring);
    issued = next;
  } else {
    std::atomic<size_t> next{0};
    std::atomic<uint64_t> total{0};
    std::atomic<bool> failed{false};
    std::vector<std::vector<double>> lats(qd);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < qd; ++i) {
      threads.emplace_back([&, i] {
        for (size_t k; Clock::now() < deadline && (k = next.fetch_add(1)) < targets.size();) {
          const Target& t = targets[k];
          auto s = Clock::now();
          ssize_t n = ::pread(banks[t.bank].fd, buf(i), banks[t.bank].stride, off_t(t.offset));
          lats[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - s).count());
          if (n > 0) total += uint64_t(n);
          if (n != ssize_t(banks[t.bank].stride)) failed = true;
        }
      });
    }
    for (auto& t : threads) t.join();
    if (failed) {
      close_all();
      throw Error("iobench: a raw pread of " + model + " failed or came back short");
    }
    r.bytes = total;
    issued = std::min(next.load(), targets.size());
    for (auto& l : lats) lat_us.insert(lat_us.end(), l.begin(), l.end());
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  close_all();
  r.reads = issued;
  r.gb_per_s = r.seconds > 0 ? double(r.bytes) / r.seconds / 1e9 : 0;
  r.p50_us = percentile(lat_us, 0.50);
  r.p99_us = percentile(lat_us, 0.99);
  return r;
}

}  // namespace waste::iobench

namespace waste::iobench {

std::string drop_page_cache() {
  // No sync first: drop_caches drops clean pages only, and a sync would wait on other
  // processes' writes; the expert banks are read-only here, so theirs are all clean.
  int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return std::string("cannot open /proc/sys/vm/drop_caches: ") + std::strerror(errno);
  ssize_t n = ::write(fd, "3\n", 2);
  std::string why = n == 2 ? "" : std::string("cannot write /proc/sys/vm/drop_caches: ") + std::strerror(errno);
  ::close(fd);
  return why;
}

}  // namespace waste::iobench
