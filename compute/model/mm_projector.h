// The Kimi K3 multimodal projector (README of shared/vision/kimi-k3, steps 9-10): the tower's
// [h w, D] rows merged 2x2 (token (a, b) = patches (2a, 2b), (2a, 2b+1), (2a+1, 2b),
// (2a+1, 2b+1) concatenated: dy outer, dx inner), then
//   e = RMSNorm(proj.2(gelu_erf(proj.0(merged))), post_norm, projector_ln_eps)
// with the exact erf GELU (not the tower's tanh one). One row per image token.
#pragma once
#include <vector>

#include "compute/model/vision_tower.h"

namespace waste {

class ThreadPool;

// tower: [h w, D] from vision_tower(); h and w must be multiples of the merge kernel.
// Returns [(h/2)(w/2), text_hidden].
std::vector<float> mm_projector(const VisionConfig& c, const VisionWeights& w, const float* tower, int h_patches,
                                int w_patches, ThreadPool* pool);

// The 2x2 merge alone: [(h/2)(w/2), 4D].
std::vector<float> vision_merge(const VisionConfig& c, const float* tower, int h_patches, int w_patches);

}  // namespace waste
