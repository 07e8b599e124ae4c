// Internal: exp, softplus, sigmoid and SiLU written once over a lane type `L` (a float, or a
// vector of them), so every path computes the same bits for every non-NaN result (a NaN
// input gives NaN on every path; its sign and payload may differ: hardware multiplies pass
// on either operand's NaN and compilers may swap them): libm's expf and log1pf differ from
// library to library and cannot be run several lanes at a time with the same results. Include
// only from elementwise.cpp and the per-ISA files (internal linkage, as simd_traits.h).
//
// What L provides (V: floats, I: int32s, M: a mask of lanes):
//   kLanes, load, store, set1, set1_i, add, sub, mul (never fused with an add), div, neg (the
//   sign flipped), lt / gt / eq (false on NaN), is_nan, or_m, select(m, a, b) = m ? a : b,
//   round_i (to nearest, ties to even: the default rounding mode), to_f, bits / from_bits,
//   add_i, sub_i, and_i, or_i, shl_i<k>, shr_i<k> (logical).
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "shared/kernels/elementwise.h"

namespace waste::elementwise_detail {
namespace {

// e^x = 2^n e^r with n = round(x log2 e) and |r| <= ln2 / 2 (r from the two-part ln 2 of
// Cephes' expf: n * kLn2Hi is exact), e^r by Cephes' polynomial (<= 2 ulp measured). Inputs
// are kept where 2^n is a normal float built from its bits: below kExpMin the result is 0
// (e^x < 1.2e-38 there: the subnormals, and [FLT_MIN, 1.2e-38) flushed), above kExpMax +inf
// (e^x within 30% of FLT_MAX there). So sigmoid(x) is 0 below -88.37 (libm: subnormals).
constexpr float kExpMax = 88.37f;   // round(88.37 log2 e) = 127
constexpr float kExpMin = -87.33f;  // round(-87.33 log2 e) = -126
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f;
constexpr float kLn2Lo = -2.12194440e-4f;
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

template <class L>
typename L::V exp_lanes(typename L::V x) {
  using V = typename L::V;
  const auto nan = L::is_nan(x), over = L::gt(x, L::set1(kExpMax)), under = L::lt(x, L::set1(kExpMin));
  const V xc = L::select(L::or_m(L::or_m(nan, over), under), L::set1(0.0f), x);
  const auto n = L::round_i(L::mul(xc, L::set1(kLog2e)));
  const V fn = L::to_f(n);
  const V r = L::sub(L::sub(xc, L::mul(fn, L::set1(kLn2Hi))), L::mul(fn, L::set1(kLn2Lo)));
  V p = L::set1(kExpP[0]);
  for (int i = 1; i < 6; ++i) p = L::add(L::mul(p, r), L::set1(kExpP[i]));
  const V y = L::add(L::add(L::mul(p, L::mul(r, r)), r), L::set1(1.0f));
  const V scale = L::from_bits(L::template shl_i<23>(L::add_i(n, L::set1_i(127))));
  V e = L::mul(y, scale);
  e = L::select(under, L::set1(0.0f), e);
  e = L::select(over, L::set1(std::numeric_limits<float>::infinity()), e);
  return L::select(nan, x, e);
}

// ln w for finite w >= 1: w = 2^k m with m in [sqrt(1/2), sqrt 2), ln m = 2 atanh(s),
// s = (m - 1) / (m + 1), |s| <= 0.1716, by its series to s^11 (the next term is under 1e-10).
constexpr float kSqrt2 = 1.41421356237f;
constexpr float kLn2HiLog = 0.693359375f, kLn2LoLog = -2.12194440e-4f;
constexpr float kAtanh[5] = {1.0f / 11.0f, 1.0f / 9.0f, 1.0f / 7.0f, 1.0f / 5.0f, 1.0f / 3.0f};

template <class L>
typename L::V log_at_least_one(typename L::V w) {
  using V = typename L::V;
  const auto b = L::bits(w);
  const auto k = L::sub_i(L::template shr_i<23>(b), L::set1_i(127));
  V m = L::from_bits(L::or_i(L::and_i(b, L::set1_i(0x007fffff)), L::set1_i(0x3f800000)));
  const auto big = L::gt(m, L::set1(kSqrt2));
  m = L::select(big, L::mul(m, L::set1(0.5f)), m);
  V kf = L::to_f(k);
  kf = L::select(big, L::add(kf, L::set1(1.0f)), kf);
  const V s = L::div(L::sub(m, L::set1(1.0f)), L::add(m, L::set1(1.0f)));
  const V s2 = L::mul(s, s);
  V p = L::set1(kAtanh[0]);
  for (int i = 1; i < 5; ++i) p = L::add(L::mul(p, s2), L::set1(kAtanh[i]));
  const V two_s = L::add(s, s);
  const V ln_m = L::add(two_s, L::mul(two_s, L::mul(p, s2)));
  return L::add(L::mul(kf, L::set1(kLn2HiLog)), L::add(L::mul(kf, L::set1(kLn2LoLog)), ln_m));
}

// softplus(x) = ln(1 + e^x), x itself above 20 (as torch). ln(1 + y) = ln(w) y / (w - 1) with
// w = 1 + y rounded (Goldberg's form: as accurate as ln w, also for tiny y); y where w is 1.
template <class L>
typename L::V softplus_lanes(typename L::V x) {
  using V = typename L::V;
  const auto big = L::gt(x, L::set1(20.0f));
  const V y = exp_lanes<L>(L::select(big, L::set1(0.0f), x));
  const V w = L::add(L::set1(1.0f), y);
  const auto one = L::eq(w, L::set1(1.0f));
  const V lw = log_at_least_one<L>(L::select(one, L::set1(2.0f), w));
  const V r = L::select(one, y, L::mul(lw, L::div(y, L::sub(w, L::set1(1.0f)))));
  return L::select(big, x, r);
}

template <class L>
typename L::V sigmoid_lanes(typename L::V x) {
  return L::div(L::set1(1.0f), L::add(L::set1(1.0f), exp_lanes<L>(L::neg(x))));
}

template <class L>
typename L::V silu_lanes(typename L::V x) {
  return L::mul(x, sigmoid_lanes<L>(x));
}

// One float as a lane type: the definition the vector lanes reproduce, and every path's tail.
struct ScalarLanes {
  using V = float;
  using I = int32_t;
  using M = bool;
  static constexpr int kLanes = 1;
  static V load(const float* p) { return *p; }
  static void store(float* p, V v) { *p = v; }
  static V set1(float a) { return a; }
  static I set1_i(int32_t a) { return a; }
  static V add(V a, V b) { return a + b; }
  static V sub(V a, V b) { return a - b; }
  static V mul(V a, V b) {
    V p = a * b;
    // The product kept apart from a following add (compilers contract a * b + c into an FMA
    // where the target has one; the vector lanes round the product, then the sum).
#if defined(__x86_64__)
    asm("" : "+x"(p));
#elif defined(__aarch64__)
    asm("" : "+w"(p));
#endif
    return p;
  }
  static V div(V a, V b) { return a / b; }
  static V neg(V a) { return -a; }
  static M lt(V a, V b) { return a < b; }
  static M gt(V a, V b) { return a > b; }
  static M eq(V a, V b) { return a == b; }
  static M is_nan(V a) { return a != a; }
  static M or_m(M a, M b) { return a || b; }
  static V select(M m, V a, V b) { return m ? a : b; }
  static I round_i(V a) { return int32_t(std::nearbyint(a)); }
  static V to_f(I a) { return float(a); }
  static I bits(V a) {
    I b;
    std::memcpy(&b, &a, 4);
    return b;
  }
  static V from_bits(I b) {
    V a;
    std::memcpy(&a, &b, 4);
    return a;
  }
  static I add_i(I a, I b) { return int32_t(uint32_t(a) + uint32_t(b)); }
  static I sub_i(I a, I b) { return int32_t(uint32_t(a) - uint32_t(b)); }
  static I and_i(I a, I b) { return a & b; }
  static I or_i(I a, I b) { return a | b; }
  template <int k>
  static I shl_i(I a) { return int32_t(uint32_t(a) << k); }
  template <int k>
  static I shr_i(I a) { return int32_t(uint32_t(a) >> k); }
};

// The array forms: whole vectors of L, then the tail one float at a time (the same bits).
// Op::run<M>(a) or Op::run<M>(a, b) on lanes M.
template <class L, class Op>
void map_unary(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + L::kLanes <= n; i += L::kLanes) L::store(y + i, Op::template run<L>(L::load(x + i)));
  for (; i < n; ++i) y[i] = Op::template run<ScalarLanes>(x[i]);
}

template <class L, class Op>
void map_binary(const float* a, const float* b, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + L::kLanes <= n; i += L::kLanes) L::store(y + i, Op::template run<L>(L::load(a + i), L::load(b + i)));
  for (; i < n; ++i) y[i] = Op::template run<ScalarLanes>(a[i], b[i]);
}

struct Exp {
  template <class M> static typename M::V run(typename M::V x) { return exp_lanes<M>(x); }
};
struct Softplus {
  template <class M> static typename M::V run(typename M::V x) { return softplus_lanes<M>(x); }
};
struct Silu {
  template <class M> static typename M::V run(typename M::V x) { return silu_lanes<M>(x); }
};
struct MulSigmoid {  // x sigmoid(g)
  template <class M> static typename M::V run(typename M::V x, typename M::V g) { return M::mul(x, sigmoid_lanes<M>(g)); }
};
struct GatedSilu {  // silu(gate) up
  template <class M> static typename M::V run(typename M::V g, typename M::V u) { return M::mul(silu_lanes<M>(g), u); }
};

// A path's table of elementwise.h: the array forms on lanes L.
template <class L>
constexpr ElementwiseKernels kernels_of(const char* name) {  // constant-initialized tables
  return {name, map_unary<L, Exp>, map_unary<L, Softplus>, map_unary<L, Silu>,
          [](float* x, const float* g, int64_t n) { map_binary<L, MulSigmoid>(x, g, x, n); },
          map_binary<L, GatedSilu>};
}

}  // namespace
}  // namespace waste::elementwise_detail
