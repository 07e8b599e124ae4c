// The raw-device reference's io_uring loop (raw_reads.h): READ_FIXED into registered buffers
// as iod reads, plain reads where the kernel refuses the registration (memlock limit). Compiled
// only in a build with io_uring (tools/iobench/meson.build).
#include <liburing.h>
#include <sys/uio.h>

#include <cstring>
#include <string>

#include "shared/util/error.h"
#include "tools/iobench/raw_reads.h"

namespace waste::iobench::raw {

Pass read_with_uring(const std::vector<Read>& reads, uint32_t qd, uint8_t* buffers, uint64_t buffer_bytes,
                     Clock::time_point deadline) {
  auto buf = [&](uint32_t i) { return buffers + uint64_t(i) * buffer_bytes; };
  Pass p;
  io_uring ring;
  int rc = io_uring_queue_init(qd, &ring, 0);
  if (rc < 0) throw Error(std::string("iobench: io_uring_queue_init: ") + std::strerror(-rc) + " (use --io pread)");
  // The ring is torn down on every way out, a throw included.
  struct RingExit {
    io_uring* r;
    ~RingExit() { io_uring_queue_exit(r); }
  } ring_exit{&ring};
  // Registered buffers (READ_FIXED), as iod reads: no per-read page pinning. If the kernel
  // refuses (memlock limit), plain reads; the report says which.
  std::vector<iovec> iov(qd);
  for (uint32_t i = 0; i < qd; ++i) iov[i] = {buf(i), size_t(buffer_bytes)};
  p.fixed_buffers = io_uring_register_buffers(&ring, iov.data(), qd) == 0;
  const auto t0 = Clock::now();  // the ring's set-up (pinning the buffers) is not read time
  std::vector<Clock::time_point> start(qd);
  std::vector<uint32_t> free_bufs;
  for (uint32_t i = 0; i < qd; ++i) free_bufs.push_back(i);
  size_t next = 0, done = 0;
  while (done < reads.size()) {
    while (next < reads.size() && !free_bufs.empty() && Clock::now() < deadline) {
      uint32_t i = free_bufs.back();
      free_bufs.pop_back();
      const Read& t = reads[next++];
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (p.fixed_buffers)
        io_uring_prep_read_fixed(sqe, t.fd, buf(i), unsigned(t.bytes), t.offset, int(i));
      else
        io_uring_prep_read(sqe, t.fd, buf(i), unsigned(t.bytes), t.offset);
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
      if (cqe->res < 0) throw Error(std::string("iobench: raw read failed: ") + std::strerror(-cqe->res));
      p.bytes += uint64_t(cqe->res);
      p.lat_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start[i]).count());
      free_bufs.push_back(i);
      ++done;
    }
    io_uring_cq_advance(&ring, seen);
  }
  p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  p.issued = next;
  return p;
}

}  // namespace waste::iobench::raw
