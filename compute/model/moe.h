// Feed-forward blocks: the dense gated MLP (layer 0, shared experts) and the routed MoE with
// shared experts (MODELS.md 3, 4.5) and K3's latent MoE (A.5), where routed experts work in a
// narrower latent width between a down and an up projection.
#pragma once
#include <string>
#include <vector>
#include <cstdint>
#include <span>

#include "compute/model/profile.h"
#include "compute/model/router.h"
#include "compute/model/weights.h"
#include "shared/kernels/matvec.h"
#include "shared/model/config.h"

namespace waste {

struct MlpWeights {
  MatrixView gate, up, down;  // down( act(gate x, up x) )
};

struct MoeWeights {
  RouterWeights router;
  MlpWeights shared;                 // shared.gate.rows == 0 when there is no shared expert
  MatrixView latent_down, latent_up;  // K3: rows == 0 otherwise
  std::span<const float> latent_norm;
};

// x, y: [n, D].
void mlp_forward(const ModelConfig& c, const MlpWeights& w, const float* x, int64_t n, float* y);

// Routes all n tokens, then applies each chosen expert once to all of its tokens (one
// matmul per matrix and expert), accumulating the weighted outputs. x, y: [n, D].
// Experts come through ExpertSource's batch protocol (fetch the union once, apply in arrival
// order, sum in ascending expert order: bit-identical whatever the arrival order). prof, when
// given, collects router / fetch wait / expert kernel / other MLP time. routed, when given,
// gets the ascending ids of the experts the n tokens chose (the union fetched).
//
// faults, when given, gets a row for each (row, expert) whose expert could not be had
// (ExpertUnavailable): that expert adds nothing to the row, the rest of the batch is exact,
// and the caller must discard the faulted rows' sessions. Without it the first such expert
// throws.
struct RowFault {
  int64_t row;
  std::string reason;
};
void moe_forward(const ModelConfig& c, int layer, const MoeWeights& w, ExpertSource& experts, const float* x,
                 int64_t n, float* y, PhaseTimes* prof = nullptr, std::vector<int>* routed = nullptr,
                 std::vector<RowFault>* faults = nullptr);

}  // namespace waste
