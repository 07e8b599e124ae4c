// The xxh3-64 of a record's payload on every miss. The portable path is the system libxxhash
// (SSE2 at the x86-64 baseline, ~4-5 GB/s here); with AVX2 an inlined AVX2 build of the same
// function runs ~3x faster (15 GB/s measured), which keeps verification a small fraction of
// a core at full disk speed. Same function, same value: chosen at run time via simd_level().
#pragma once
#include <cstddef>
#include <cstdint>

namespace waste::iod {

uint64_t record_checksum(const void* data, size_t n);
uint64_t record_checksum_avx2(const void* data, size_t n);  // record_checksum_avx2.cpp, AVX2 CPUs only

}  // namespace waste::iod
