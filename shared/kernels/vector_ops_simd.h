// Internal: the SIMD reductions of vector_ops.h, written once over an instruction set `Isa`
// (shared/kernels/simd_traits.h). Include only from per-ISA files (internal linkage, see
// simd_traits.h): vector_ops_avx2.cpp, and the attention kernels' MLA scores.
#pragma once
#include <cstdint>

namespace waste::simd {
namespace {

// sum_i a[i] * b[i]: four accumulators of kLanes (4 kLanes elements per step, which hides
// the FMA latency), then whole vectors into the first, a masked tail into the second, and
// the fixed-order reduction ((0 + 1) + (2 + 3)), then Isa::sum. The order depends only on n
// and the ISA, not on the thread.
template <class Isa>
float dot(const float* a, const float* b, int64_t n) {
  constexpr int L = Isa::kLanes;
  auto acc0 = Isa::zero(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
  int64_t i = 0;
  for (; i + 4 * L <= n; i += 4 * L) {
    acc0 = Isa::fma(Isa::load(a + i), Isa::load(b + i), acc0);
    acc1 = Isa::fma(Isa::load(a + i + L), Isa::load(b + i + L), acc1);
    acc2 = Isa::fma(Isa::load(a + i + 2 * L), Isa::load(b + i + 2 * L), acc2);
    acc3 = Isa::fma(Isa::load(a + i + 3 * L), Isa::load(b + i + 3 * L), acc3);
  }
  for (; i + L <= n; i += L) acc0 = Isa::fma(Isa::load(a + i), Isa::load(b + i), acc0);
  if (i < n) acc1 = Isa::fma(Isa::load_tail(a + i, n - i), Isa::load_tail(b + i, n - i), acc1);
  return Isa::sum(Isa::add(Isa::add(acc0, acc1), Isa::add(acc2, acc3)));
}

}  // namespace
}  // namespace waste::simd
