// Software prefetch of a byte range, for the streaming kernels (int8 trunk matvec, RVQ
// lookups). __builtin_prefetch is a hint on every target GCC and clang build for (x86 and
// ARM64 alike) and never faults, so the kernels of every ISA share this one helper.
#pragma once
#include <cstdint>

namespace waste {

// How far ahead the int8 trunk matvec prefetches its two streams, the weights and their f16
// scales (1/8 of the weights' bytes, which the hardware prefetcher did not have in time: a
// decode matvec waited for its data, perf putting a quarter of the kernel's samples on the
// scales' conversion). Two forms, measured with waste-bench-trunk on the AVX-512 path
// (docs/LEARNED.md):
//  - a short row (at most kTrunkPrefetchSpreadAboveAvx512 bytes): the whole row kTrunkPrefetchRows
//    rows ahead, as one burst at the row's start. 1, 2, 4 and 8 rows were tried on 2304-column
//    rows (Kimi-Linear); 4 was best on the projections and the head.
//  - a longer row: each block's lines kTrunkPrefetchBytes ahead, spread over the row. The
//    burst form ran K3's 7168- to 33792-column rows at 0.5-0.9 of this (264 hints at the
//    start of a 33792-column row); 4, 8 and 16 KiB were tried, 8 best. On 2304-column q8g rows
//    the spread form was 0.85-0.9 of the burst at one thread, hence the two forms. The bound
//    between them, 48 lines, lies between those rows (36 lines) and K3's q4g 7168-column
//    rows (56 lines), which gained from the spread form (1.1-1.3x). Why a long burst loses is
//    not measured here (no hardware counters on this guest); a likely cause is a core's limit
//    on outstanding L2 misses (48 on recent Intel cores), past which hints are dropped.
constexpr int64_t kTrunkPrefetchRows = 4;
constexpr int64_t kTrunkPrefetchBytes = 8192;
// Each path's Ops says which forms it uses (kPrefetchBurst, and kPrefetchSpreadAbove: the row
// bytes above which it spreads). AVX-512 both, split at 48 lines (above). AVX2, whose
// int8 kernel is likely compute-bound on short rows: no burst (it gained nothing on
// 2304-column rows, docs/LEARNED.md 2026-12-04), and the spread form only above
// kTrunkPrefetchSpreadAboveAvx2: on 33792-column rows (16.5 KiB q4g, 33 KiB q8g) it ran
// 1.12-1.85x, on 7168-column rows (3.5-7 KiB) 0.82-1.01x in three of four rounds, on
// 12288-column rows (6-12 KiB) 0.91-1.46x, no clear effect (waste-bench-trunk, alternated,
// docs/MEASUREMENTS.md 2026-12-07 10:12). Any bound between 12 and 16.5 KiB fits that; K3's
// 33792-column q4g rows clear this one by 3%.
// NEON neither, until measured on a real ARM core (qemu only here).
constexpr int64_t kTrunkPrefetchSpreadAboveAvx512 = 48 * 64;
constexpr int64_t kTrunkPrefetchSpreadAboveAvx2 = 256 * 64;
constexpr int64_t kTrunkPrefetchSpreadNever = INT64_MAX;  // a path that never spreads

// One prefetch per 64-byte line of [base + offset, base + offset + Bytes), Bytes a
// compile-time multiple of 64 (an unrolled handful of hints inside a kernel's loop). The
// address is formed as an integer: a fixed distance ahead runs past the end of the last
// rows' array, where pointer arithmetic would be undefined; a hint there never faults.
template <int64_t Bytes>
inline void prefetch_lines(const void* base, int64_t offset) {
  static_assert(Bytes % 64 == 0 && Bytes > 0, "whole lines");
  const uintptr_t at = reinterpret_cast<uintptr_t>(base) + uintptr_t(offset);
#pragma GCC unroll 8
  for (int64_t off = 0; off < Bytes; off += 64) __builtin_prefetch(reinterpret_cast<const void*>(at + uintptr_t(off)), 0, 3);
}

// One prefetch per 64-byte line of [p, p + bytes), into every cache level (read, locality 3).
inline void prefetch_range(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t off = 0; off < bytes; off += 64) __builtin_prefetch(c + off, 0, 3);
}

}  // namespace waste
