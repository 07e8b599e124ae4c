// The gated MLP activations, defined once for the dense/shared MLPs (compute/model/ops) and
// the routed VQ3R experts (shared/rvq/kernels), so both compute exactly the same floats.
// SiLU: silu(g) * u. SiTU (K3, MODELS.md A.5): [b tanh(g/b) sigmoid(g)] * [bl tanh(u/bl)],
// both halves soft-capped by tanh so activations stay bounded.
#pragma once
#include <cmath>

#include "shared/kernels/elementwise.h"

namespace waste {

// e^x by exp_det: the array forms (elementwise.h) give these bits on every path.
inline float sigmoid(float x) { return 1.0f / (1.0f + exp_det(-x)); }
inline float silu(float x) { return x * sigmoid(x); }

inline float gated_silu(float gate, float up) { return silu(gate) * up; }

// beta: b (the gate's cap), beta_linear: bl (the up projection's cap).
inline float gated_situ(float gate, float up, float beta, float beta_linear) {
  return (beta * std::tanh(gate / beta) * sigmoid(gate)) * (beta_linear * std::tanh(up / beta_linear));
}

}  // namespace waste
