#include "iod/io/record_checksum.h"

#include "shared/container/format.h"
#include "shared/util/cpu.h"

namespace waste::iod {

uint64_t record_checksum(const void* data, size_t n) {
#if defined(__x86_64__)
  static const bool avx2 = simd_level() >= SimdLevel::Avx2 && simd_level() != SimdLevel::Neon;
  if (avx2) return record_checksum_avx2(data, n);
#endif
  return checksum64(data, n);
}

}  // namespace waste::iod
