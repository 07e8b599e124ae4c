#include "compute/server/step_gate.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <spdlog/spdlog.h>

#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste::server {

StepGate::StepGate(const std::string& fifo, std::function<void()> changed) : changed_(std::move(changed)) {
  fd_ = open_own_fifo(fifo, "WASTE_COMPUTE_TEST_STEP_GATE");
  stop_fd_ = ::eventfd(0, EFD_CLOEXEC);
  if (stop_fd_ < 0) {
    ::close(fd_);
    throw Error(std::string("WASTE_COMPUTE_TEST_STEP_GATE: eventfd: ") + std::strerror(errno));
  }
  reader_ = std::thread([this] { read_loop(); });
}

StepGate::~StepGate() {
  const uint64_t one = 1;
  [[maybe_unused]] auto n = ::write(stop_fd_, &one, sizeof one);
  reader_.join();
  ::close(stop_fd_);
  ::close(fd_);
}

bool StepGate::open() const {
  std::lock_guard lk(mu_);
  return free_ || permits_ > 0;
}

bool StepGate::take() {
  std::lock_guard lk(mu_);
  if (free_) return true;
  if (permits_ == 0) return false;
  --permits_;
  return true;
}

void StepGate::read_loop() {
  pollfd fds[2] = {{fd_, POLLIN, 0}, {stop_fd_, POLLIN, 0}};
  for (;;) {
    // No deadline: this thread only waits for the test or for the destructor's eventfd.
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      spdlog::error("compute: step gate: poll: {}", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    char bytes[64];
    const ssize_t n = ::read(fd_, bytes, sizeof bytes);
    if (n <= 0) continue;  // EAGAIN: another wake-up took nothing
    bool may_step = false;
    {
      std::lock_guard lk(mu_);
      for (ssize_t i = 0; i < n; ++i) {
        switch (bytes[i]) {
          case 's': ++permits_; may_step = true; break;
          case 'o': free_ = true; may_step = true; break;
          case 'c': free_ = false; permits_ = 0; break;
          case '\n': break;
          default: spdlog::warn("compute: step gate: ignored byte {:#04x}", unsigned(uint8_t(bytes[i])));
        }
      }
    }
    if (may_step) changed_();
  }
}

}  // namespace waste::server
