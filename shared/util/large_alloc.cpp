#include "shared/util/large_alloc.h"

#include <cstdlib>

#include "shared/platform/memory.h"

namespace waste {

void* alloc_large(size_t bytes) {
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t size = (bytes + kHugePage - 1) / kHugePage * kHugePage;
  void* p = std::aligned_alloc(kHugePage, size == 0 ? kHugePage : size);
  platform::advise_huge_pages(p, size == 0 ? kHugePage : size);
  return p;
}

}  // namespace waste
