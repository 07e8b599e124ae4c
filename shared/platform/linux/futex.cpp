// Linux: the futex system call on the word itself. Not FUTEX_PRIVATE: the word is in a segment
// two processes map, and a private futex is keyed by (mm, address) so iod's wake would never
// reach compute's wait.
#include "shared/platform/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace waste::platform {

bool futex_wait_shared(const uint32_t* word, uint32_t expected, int64_t timeout_ns) {
  timespec ts{}, *tp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = time_t(timeout_ns / 1000000000);
    ts.tv_nsec = long(timeout_ns % 1000000000);
    tp = &ts;  // FUTEX_WAIT takes a relative timeout
  }
  long r = ::syscall(SYS_futex, word, FUTEX_WAIT, expected, tp, nullptr, 0);
  return !(r == -1 && errno == ETIMEDOUT);
}

void futex_wake_shared(uint32_t* word) { ::syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0); }

}  // namespace waste::platform
