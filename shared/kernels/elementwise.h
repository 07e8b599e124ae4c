// Elementwise functions the model runs on long arrays (SiLU and sigmoid gates, KDA's softplus
// decay, softmax's exponentials), with one definition that every path computes to the same
// bits (NaN results: NaN on every path, not necessarily the same NaN) (elementwise_math.h): the scalar functions below, and the arrays on AVX2, AVX-512 or
// NEON where simd_level() allows. libm's expf / log1pf were a tenth of a prefill's scalar
// time and give no vector form with their bits.
#pragma once
#include <cstdint>

namespace waste {

enum class KernelPath;

// e^x, <= 2 ulp; 0 below -87.33 and +inf above 88.37 (elementwise_math.h); NaN stays NaN.
float exp_det(float x);
// ln(1 + e^x), x itself above 20.
float softplus_det(float x);

// The array forms (outputs may alias inputs), on one path.
struct ElementwiseKernels {
  const char* name;
  void (*exp)(const float* x, float* y, int64_t n);                          // y = e^x
  void (*softplus)(const float* x, float* y, int64_t n);                     // y = softplus(x)
  void (*silu)(const float* x, float* y, int64_t n);                         // y = x sigmoid(x)
  void (*mul_sigmoid)(float* x, const float* g, int64_t n);                  // x *= sigmoid(g)
  void (*gated_silu)(const float* gate, const float* up, float* out, int64_t n);  // silu(gate) up
};
// The table of a kernel path (matvec_paths.h's one list): the NEON int8 variants share the
// NEON table, a path of another architecture has none (nullptr).
const ElementwiseKernels* elementwise_for(KernelPath path);
// The table of best_kernel_path(): the path simd_level() chooses.
const ElementwiseKernels& elementwise();

extern const ElementwiseKernels kElementwiseScalar;
#if defined(__x86_64__)
extern const ElementwiseKernels kElementwiseAvx2, kElementwiseAvx512;
#elif defined(__aarch64__)
extern const ElementwiseKernels kElementwiseNeon;
#endif

}  // namespace waste
