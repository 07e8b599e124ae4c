// Large, long-lived buffers (the trunk, resident experts) on transparent huge pages where the
// kernel allows them (THP "madvise" mode, as on many distributions): the kernels stream whole
// tensors and records of MiBs, and with 4 KiB pages every page costs a TLB miss (measured:
// --resident expert kernels 19.4 -> 12.4 ms per token on the Kimi-Linear shape).
#pragma once
#include <cstddef>
#include <cstdint>

namespace waste {

// 2 MiB-aligned memory of at least `bytes` (rounded up), advised for huge pages; nullptr when
// out of memory. Release with std::free.
void* alloc_large(size_t bytes);

}  // namespace waste
