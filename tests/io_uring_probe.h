// Can this process set up an io_uring? Not under qemu-user (no io_uring syscalls), in a
// container whose seccomp profile blocks them, or with kernel.io_uring_disabled; iod then reads
// with its pread pool. A test of something only io_uring does asks first and skips that part
// (tests/skip.h) instead of failing. The probe runs in the test's own process: the children it
// starts (waste-iod, waste iobench) share its kernel, emulator and seccomp filter.
#pragma once
#include <liburing.h>

#include <cstring>
#include <string>

namespace waste::test {

// Empty when io_uring works here, else why not.
inline std::string io_uring_unavailable() {
  io_uring ring;
  const int r = io_uring_queue_init(2, &ring, 0);
  if (r < 0) return std::string("io_uring unavailable here (io_uring_queue_init: ") + std::strerror(-r) + ")";
  io_uring_queue_exit(&ring);
  return "";
}

}  // namespace waste::test
