// Waiting on a 32-bit word in shared memory until another process changes it: compute waits on
// a cache slot's state word until iod has read the record into it (shared/ipc/segment_layout.h),
// with no RPC round trip per expert. The word is in memory both processes map, so the wait must
// work across processes (a process-private wait would never be woken by iod).
//
// Linux: futex(2) FUTEX_WAIT / FUTEX_WAKE without FUTEX_PRIVATE_FLAG (linux/futex.cpp).
// What a macOS or Windows port supplies instead: docs/PORTING.md, "futex".
#pragma once
#include <cstdint>

namespace waste::platform {

// Sleeps while *word == expected, at most timeout_ns (< 0: no limit). Returns false when the
// time ran out; true when woken, when *word already differed, or on a spurious wake-up: the
// caller re-reads the word and decides (and bounds its own total wait).
bool futex_wait_shared(const uint32_t* word, uint32_t expected, int64_t timeout_ns);

// Wakes every waiter on `word`, in any process.
void futex_wake_shared(uint32_t* word);

}  // namespace waste::platform
