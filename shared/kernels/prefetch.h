// Software prefetch of a byte range, for the streaming kernels (int8 trunk matvec, RVQ
// lookups). __builtin_prefetch is a hint on every target GCC and clang build for (x86 and
// ARM64 alike) and never faults, so the kernels of every ISA share this one helper.
#pragma once
#include <cstdint>

namespace waste {

// How far ahead the int8 trunk matvec prefetches: the row this many rows below the one being
// computed (its weights and its f16 scales). A decode matvec waited ~60 cycles per 512
// weights for its data: perf put a quarter of q4g_row's samples on the conversion right
// after the scales' load (a second stream, 1/8 of the weights' bytes, whose lines the
// hardware prefetcher did not have in time), and the next rows' weights also missed. Measured
// with waste-bench-trunk (docs/LEARNED.md): 1, 2, 4 and 8 rows ahead; 4 was best on both the
// 4096x2304 projections and the 163840x2304 head.
constexpr int64_t kTrunkPrefetchRows = 4;

// One prefetch per 64-byte line of [p, p + bytes), into every cache level (read, locality 3).
inline void prefetch_range(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

}  // namespace waste
