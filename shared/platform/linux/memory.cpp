// Linux memory: usable RAM from /proc and the cgroup files (proc_memory.h), transparent huge
// pages through madvise.
#include "shared/platform/memory.h"

#include <sys/mman.h>

#include "shared/platform/linux/proc_memory.h"

namespace waste::platform {

UsableMemory usable_memory() { return usable_memory_from(SystemRoots{}); }

void advise_huge_pages(void* p, size_t bytes) {
  // A hint: with THP off ("never") or the range refused, the memory stays on 4 KiB pages.
  if (p != nullptr && bytes > 0) (void)::madvise(p, bytes, MADV_HUGEPAGE);
}

bool populate_for_read(const void* p, size_t bytes) {
#ifdef MADV_POPULATE_READ
  if (p == nullptr || bytes == 0) return true;
  return ::madvise(const_cast<void*>(p), bytes, MADV_POPULATE_READ) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

}  // namespace waste::platform
