// Can this process set up an io_uring? Not in a build without liburing (-During=disabled), not
// under qemu-user (no io_uring syscalls), in a container whose seccomp profile blocks them, or with
// kernel.io_uring_disabled; iod then reads with its pread pool. A test of something only io_uring
// does asks first and skips that part (tests/skip.h) instead of failing. The probe runs in the
// test's own process: the children it starts (waste-iod, waste iobench) share its kernel, emulator
// and seccomp filter.
#pragma once
#include <cstring>
#include <string>

#include "iod/io/io_choice.h"
#if WASTE_HAVE_IO_URING
#include <liburing.h>
#endif

namespace waste::test {

// Whether the kernel here refuses an io_uring: empty when it gives one, else why not. Only
// meaningful in a build with io_uring (iod::kHaveUring).
inline std::string kernel_refuses_io_uring() {
#if WASTE_HAVE_IO_URING
  io_uring ring;
  const int r = io_uring_queue_init(2, &ring, 0);
  if (r < 0) return std::string("io_uring unavailable here (io_uring_queue_init: ") + std::strerror(-r) + ")";
  io_uring_queue_exit(&ring);
#endif
  return "";
}

// Empty when iod can read with io_uring here, else why not (the build, or the kernel).
inline std::string io_uring_unavailable() {
  if (!iod::kHaveUring) return "built without io_uring";
  return kernel_refuses_io_uring();
}

}  // namespace waste::test
