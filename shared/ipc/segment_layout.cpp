#include "shared/ipc/segment_layout.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <climits>

#include "shared/container/format.h"

namespace waste::ipc {

static_assert(std::endian::native == std::endian::little, "futex on the low half of the state word");

const char* state_name(SlotState s) {
  switch (s) {
    case SlotState::Free: return "FREE";
    case SlotState::Loading: return "LOADING";
    case SlotState::Ready: return "READY";
    case SlotState::Failed: return "FAILED";
  }
  return "?";
}

SegmentLayout segment_layout(uint32_t slot_count, uint64_t record_bytes) {
  SegmentLayout l;
  l.slot_count = slot_count;
  l.slot_bytes = round_up(record_bytes == 0 ? 1 : record_bytes, kSlotAlign);
  l.slot_table_offset = kSegmentHeaderBytes;
  l.slots_offset = round_up(l.slot_table_offset + uint64_t(slot_count) * sizeof(SlotEntry), kSlotAlign);
  l.total_bytes = l.slots_offset + uint64_t(slot_count) * l.slot_bytes;
  return l;
}

namespace {
uint32_t* low_half(const std::atomic<uint64_t>& word) {
  return reinterpret_cast<uint32_t*>(const_cast<std::atomic<uint64_t>*>(&word));
}
}  // namespace

bool futex_wait_word(const std::atomic<uint64_t>& word, uint64_t expected, int64_t timeout_ns) {
  timespec ts{}, *tp = nullptr;
  if (timeout_ns >= 0) {
    ts.tv_sec = time_t(timeout_ns / 1000000000);
    ts.tv_nsec = long(timeout_ns % 1000000000);
    tp = &ts;
  }
  long r = ::syscall(SYS_futex, low_half(word), FUTEX_WAIT, uint32_t(expected), tp, nullptr, 0);
  return !(r == -1 && errno == ETIMEDOUT);
}

void futex_wake_word(std::atomic<uint64_t>& word) {
  ::syscall(SYS_futex, low_half(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

}  // namespace waste::ipc
