// The read loops behind `waste iobench`'s raw-device reference (raw_device.cpp): reads of whole
// records into qd buffers of one stride each, qd in flight. The io_uring loop (raw_uring.cpp)
// exists only in a build with io_uring (iod/io/io_choice.h); the pread loop everywhere.
#pragma once
#include <chrono>
#include <cstdint>
#include <vector>

namespace waste::iobench::raw {

using Clock = std::chrono::steady_clock;

struct Read {
  int fd = -1;          // opened for direct I/O (shared/platform/direct_io.h)
  uint64_t bytes = 0;   // the bank's record stride
  uint64_t offset = 0;
};

struct Pass {
  uint64_t bytes = 0;
  size_t issued = 0;            // reads started (the deadline may stop the rest)
  double seconds = 0;           // from the first read's start, set-up excluded
  std::vector<double> lat_us;   // one per completed read
  bool fixed_buffers = false;   // io_uring READ_FIXED into registered buffers
  bool failed = false;          // pread: a read failed or came back short
};

// `buffers` holds qd buffers of `buffer_bytes` each (kDirectIoAlign-aligned). No read starts
// after `deadline`. The pread loop reports a failed or short read in Pass::failed; the io_uring
// loop throws waste::Error naming the errno (and counts a short read's bytes).
Pass read_with_pread(const std::vector<Read>& reads, uint32_t qd, uint8_t* buffers, uint64_t buffer_bytes,
                     Clock::time_point deadline);
// Defined only where iod::kHaveUring: callers guard the call with `if constexpr`.
Pass read_with_uring(const std::vector<Read>& reads, uint32_t qd, uint8_t* buffers, uint64_t buffer_bytes,
                     Clock::time_point deadline);

}  // namespace waste::iobench::raw
