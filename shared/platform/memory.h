// What the operating system says about memory: how much RAM this process may use (the memory
// planner's input, shared/plan/memory_plan.h) and the huge-page hint for large buffers.
//
// Linux: /proc/meminfo and cgroup v1/v2 limits (linux/memory.cpp, linux/proc_memory.h),
// madvise(MADV_HUGEPAGE). What a macOS or Windows port supplies instead: docs/PORTING.md,
// "memory".
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace waste::platform {

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // e.g. "/sys/fs/cgroup/memory/a/memory.limit_in_bytes" or "/proc/meminfo MemTotal"
};

struct UsableMemory {
  uint64_t physical = 0;
  uint64_t usable = 0;
  std::string source;               // the limit that won
  std::vector<MemoryLimit> limits;  // every finite limit found, physical first
};

// How much RAM this process may use: the smallest of physical RAM and every limit the system
// puts on this process. Throws Error (naming the source) only when physical RAM is unknown.
UsableMemory usable_memory();

// A hint that [p, p + bytes) be backed by huge pages (the kernels stream records and tensors of
// MiBs; on 4 KiB pages every page is a TLB miss). Never fails: where the system has no such
// hint, or refuses it, the memory stays on normal pages.
void advise_huge_pages(void* p, size_t bytes);

// Maps every page of [p, p + bytes) of a shared mapping into this process's page tables now, as
// reads would, so that later reads take no page fault (the expert kernels read each record once
// per token: a fresh compute took ~40 faults a record, one per 64 KiB of fault-around, ~10% of
// the expert phase until every slot had been touched; docs/LEARNED.md).
// Pages not yet backed are allocated (shared memory's read faults do so). Returns false where
// the system has no such call (Linux before 5.14: MADV_POPULATE_READ) or refuses it; the
// mapping then faults on first use as before.
bool populate_for_read(const void* p, size_t bytes);

}  // namespace waste::platform
