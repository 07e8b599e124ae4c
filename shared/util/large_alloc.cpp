#include "shared/util/large_alloc.h"

#include <cstdlib>
#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace waste {

void* alloc_large(size_t bytes) {
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, size == 0 ? kHugePage : size);
#if defined(MADV_HUGEPAGE)
  // A hint: without THP (or with it off) the memory is simply 4 KiB pages.
  if (p) ::madvise(p, size == 0 ? kHugePage : size, MADV_HUGEPAGE);
#endif
  return p;
}

}  // namespace waste
