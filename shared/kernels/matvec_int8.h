// Internal to shared/kernels (and its tests and benchmark): the int8-activation path of the
// Q8G/Q4G matvec/matmul (as llama.cpp does for q4_0/q8_0). The f32 input of each token is
// quantized once per call to int8 per weight group (one f32 scale per group), then every row
// is an integer dot product per 32 columns, scaled by (weight scale x activation scale) and
// accumulated in f32. Weights stream at memory speed because nothing is widened to f32.
//
// The result is defined exactly (every path computes the same bits):
//  - a "unit" is 32 columns when the weight group is a multiple of 32, else one group.
//  - activations are quantized per unit k of token t (so a weight group of 128 still gets an
//    activation scale per 32 inputs): amax = max |x|; if amax is 0, xs = 0 and q = 0; if the
//    unit holds a non-finite value, xs = NaN and q = 0 (the output is NaN); else
//    xs = amax / 127, q_i = nearbyint(x_i * (127 / amax)) clamped to +-127.
//  - usum_k = sum over unit k of w_i * q_i (exact integers; w = the int8 value, or the
//    nibble - 8 for Q4G).
//  - 16 f32 lane accumulators a[0..15] = +0; for units k in order,
//    a[k % 16] = fma(float(usum_k), float(f16 scale of k's group) * xs_k, a[k % 16]).
//  - y = ((a[i] + a[i+8]) then + [i+4], then + [i+2], then + [i+1]): a fixed pairwise tree.
// The SIMD paths hold the 16 lanes in one zmm, two ymm or four NEON q registers and reduce
// the integer sums of 16 units at a time, so scalar, AVX2, AVX-512 and the NEON paths (plain,
// SDOT, SMMLA) agree bit for bit, for any thread split and token count (matmul of n tokens
// equals n matvecs).
#pragma once
#include <cstdint>
#include <vector>

#include "shared/kernels/matvec.h"

namespace waste {

class ThreadPool;

// Which activations the Q8G/Q4G kernels multiply: int8 (the default) or f32 (the exact
// dequantize-to-f32 path, for comparison). Process-wide, from WASTE_TRUNK_ACT=int8|f32 read
// on first use (any other value is refused with a waste::Error naming the variable).
enum class ActivationMode { F32 = 0, Int8 = 1 };
ActivationMode activation_mode();
const char* activation_mode_name(ActivationMode mode);

// Layout of the int8 activations a path reads: natural column order, or (the Q4G SIMD paths,
// whose low and high nibbles are the even and odd columns) per 128 columns the 64 even
// columns then the 64 odd ones; a last block of m < 4 units holds 16m even then 16m odd.
enum class Int8Layout { Natural, EvenOdd };

// Activations of n tokens, quantized as above. Per-unit arrays are padded with zeros to a
// whole number of 16-unit blocks so SIMD paths can load 16 units at a time.
struct Int8Activations {
  int64_t n = 0, cols = 0, group = 0, unit = 0;
  int64_t units = 0, padded_units = 0;  // per token
  std::vector<int8_t> q;                // [n][cols] in `layout`
  std::vector<float> unit_scale;        // [n][padded_units]: xs of the unit (0 in padding)
  std::vector<int32_t> unit_sum;        // [n][padded_units]: sum of the unit's q (0 in padding)
};

// One token's units quantized: q[units * unit] in natural order, the unit scales and sums (0
// for a zero unit; scale NaN, q and sum 0 for a unit holding inf or NaN). The scalar form is
// the definition; a path's form must give the same bits for every input (the tests compare).
using QuantizeUnitsFn = void (*)(const float* xt, int64_t units, int64_t unit, int8_t* q, float* unit_scale,
                                 int32_t* unit_sum);
void quantize_units_scalar(const float* xt, int64_t units, int64_t unit, int8_t* q, float* unit_scale,
                           int32_t* unit_sum);
#if defined(__x86_64__)
void quantize_units_avx512(const float* xt, int64_t units, int64_t unit, int8_t* q, float* unit_scale,
                           int32_t* unit_sum);
#endif

// Quantizes x[n][cols] for weights of group size `group` (cols % group == 0) with `units_fn`
// per token, the tokens split over `pool` when it is given and there are enough of them (a
// prefill chunk's activations were quantized on one thread while the other idled). Reuses
// out's buffers (no allocation once they are large enough).
void quantize_activations(const float* x, int64_t n, int64_t cols, int64_t group, Int8Layout layout,
                          Int8Activations& out, QuantizeUnitsFn units_fn = quantize_units_scalar,
                          ThreadPool* pool = nullptr);

// x[n][w.cols] quantized for w in the calling thread's own buffers, reused from call to call:
// a matvec runs dozens of times per token, and this keeps the heap off that path. Valid until
// this thread's next call.
const Int8Activations& quantize_for(const MatrixView& w, const float* x, int64_t n, Int8Layout layout,
                                    QuantizeUnitsFn units_fn = quantize_units_scalar, ThreadPool* pool = nullptr);

// True when the SIMD int8 paths handle this matrix: group 32 times a power of two (units
// line up with 16-unit blocks); else the int8 path runs on the scalar implementation (same
// result).
bool int8_simd_handles(const MatrixView& w);

// The per-path int8 implementations (validated Q8G/Q4G input). pool may be null.
void matmul_int8_scalar(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_int8_avx2(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_int8_avx512(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_int8_neon(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_int8_neon_dotprod(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);
void matmul_int8_neon_i8mm(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool);

// The fixed 16-lane accumulation of the definition above, shared by the scalar path.
float int8_lane_tree(const float* a);

}  // namespace waste
