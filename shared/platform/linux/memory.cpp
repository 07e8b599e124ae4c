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

}  // namespace waste::platform
