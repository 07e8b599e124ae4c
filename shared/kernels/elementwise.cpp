// The scalar definition of elementwise.h and the choice of path.
#include "shared/kernels/elementwise.h"

#include "shared/kernels/elementwise_math.h"
#include "shared/kernels/matvec_paths.h"

namespace waste {

using elementwise_detail::ScalarLanes;

float exp_det(float x) { return elementwise_detail::exp_lanes<ScalarLanes>(x); }
float softplus_det(float x) { return elementwise_detail::softplus_lanes<ScalarLanes>(x); }

const ElementwiseKernels kElementwiseScalar = elementwise_detail::kernels_of<ScalarLanes>("scalar");

const ElementwiseKernels* elementwise_for(KernelPath path) {
  switch (path) {
    case KernelPath::Scalar: return &kElementwiseScalar;
#if defined(__x86_64__)
    case KernelPath::Avx2: return &kElementwiseAvx2;
    case KernelPath::Avx512: return &kElementwiseAvx512;
#elif defined(__aarch64__)
    case KernelPath::Neon:
    case KernelPath::NeonDotprod:
    case KernelPath::NeonI8mm: return &kElementwiseNeon;
#endif
    default: return nullptr;
  }
}

const ElementwiseKernels& elementwise() {
  static const ElementwiseKernels& chosen = *elementwise_for(best_kernel_path());
  return chosen;
}

}  // namespace waste
