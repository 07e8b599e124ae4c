// The scalar definition of elementwise.h and the choice of path.
#include "shared/kernels/elementwise.h"

#include "shared/kernels/elementwise_math.h"
#include "shared/kernels/matvec_paths.h"
#include "shared/util/cpu.h"

namespace waste {

using elementwise_detail::ScalarLanes;

float exp_det(float x) { return elementwise_detail::exp_lanes<ScalarLanes>(x); }
float softplus_det(float x) { return elementwise_detail::softplus_lanes<ScalarLanes>(x); }

const ElementwiseKernels kElementwiseScalar = elementwise_detail::kernels_of<ScalarLanes>("scalar");

const ElementwiseKernels& elementwise() {
  static const ElementwiseKernels& chosen = [] () -> const ElementwiseKernels& {
    switch (simd_level()) {
#if defined(__x86_64__)
      case SimdLevel::Avx512: return kElementwiseAvx512;
      case SimdLevel::Avx2: return kElementwiseAvx2;
#elif defined(__aarch64__)
      case SimdLevel::Neon: return kElementwiseNeon;
#endif
      default: return kElementwiseScalar;
    }
  }();
  return chosen;
}

const ElementwiseKernels* const* elementwise_paths(int* count) {
  static const ElementwiseKernels* paths[3];
  static const int n = [] {
    int k = 0;
    paths[k++] = &kElementwiseScalar;
#if defined(__x86_64__)
    if (kernel_path_available(KernelPath::Avx2)) paths[k++] = &kElementwiseAvx2;
    if (kernel_path_available(KernelPath::Avx512)) paths[k++] = &kElementwiseAvx512;
#elif defined(__aarch64__)
    if (kernel_path_available(KernelPath::Neon)) paths[k++] = &kElementwiseNeon;
#endif
    return k;
  }();
  *count = n;
  return paths;
}

}  // namespace waste
