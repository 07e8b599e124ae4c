// xxh3-64 inlined from xxhash.h and compiled with -mavx2 (XXH_VECTOR picks the AVX2 loop).
// Only called when simd_level() says the CPU has AVX2.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "iod/io/record_checksum.h"

namespace waste::iod {

uint64_t record_checksum_avx2(const void* data, size_t n) { return XXH3_64bits(data, n); }

}  // namespace waste::iod
