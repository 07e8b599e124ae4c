#include "iod/io/check_gate.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "shared/util/file.h"

namespace waste::iod {

CheckGate::CheckGate(const std::string& fifo) : path_(fifo) {
  fd_ = open_own_fifo(fifo, "WASTE_IOD_TEST_CHECK_GATE");
}

CheckGate::~CheckGate() { ::close(fd_); }

void CheckGate::pass() {
  std::lock_guard lock(mu_);
  if (open_) return;
  const auto deadline = std::chrono::steady_clock::now() + kHoldLimit;
  for (;;) {
    char c = 0;
    const ssize_t n = ::read(fd_, &c, 1);
    if (n == 1) {
      if (c == 'o') open_ = true;
      if (c == 'o' || c == 'l') return;
      spdlog::warn("iod: test hook: check gate {}: byte {:#04x} is not a word of the gate ('l' or 'o'); ignored",
                   path_, static_cast<unsigned char>(c));
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      spdlog::warn("iod: test hook: check gate {}: {}; checks no longer wait", path_, std::strerror(errno));
      open_ = true;
      return;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      spdlog::warn("iod: test hook: check gate {} held a check {} s; it opens for good", path_, kHoldLimit.count());
      open_ = true;
      return;
    }
    pollfd p{fd_, POLLIN, 0};
    ::poll(&p, 1, int(left.count()));
  }
}

}  // namespace waste::iod
