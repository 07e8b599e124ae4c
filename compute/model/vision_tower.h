// The Kimi K3 vision tower (MoonViT), from patch pixels to one D-wide row per patch, and the
// weights it and the projector (compute/model/mm_projector.h) read. Per image of h x w patches
// (L = h w, D = hidden, README of shared/vision/kimi-k3, steps 5-8):
//   x   = P W_pe^T + interp(pos_emb)           P [L, 3*14*14], pos grid bilinear to (h, w)
//   per block:  y = RMSNorm(x, norm0)
//               q, k, v = y wqkv^T              [L, heads, head_dim] each; 2D RoPE on q and k
//               x += softmax(q k^T / sqrt(head_dim)) v  wo^T     (all patches, both ways)
//               x += fc1(gelu_tanh(fc0(RMSNorm(x, norm1))))
//   out = RMSNorm(x, final_layernorm)
// Every tower RMSNorm uses eps = finfo(float32).eps. No biases anywhere.
#pragma once
#include <atomic>
#include <span>
#include <vector>

#include "compute/model/weights.h"
#include "shared/kernels/matvec.h"
#include "shared/model/vision_config.h"

namespace waste {

class ThreadPool;

struct VisionBlockWeights {
  std::span<const float> norm0;  // [D]
  MatrixView wqkv;               // [3 qkv_hidden, D]: rows [q | k | v][head][head_dim]
  MatrixView wo;                 // [D, qkv_hidden]
  std::span<const float> norm1;  // [D]
  MatrixView fc0;                // [intermediate, D]
  MatrixView fc1;                // [D, intermediate]
};

struct VisionWeights {
  MatrixView patch_embed;          // Conv2d kernel [D, 3, p, p] as the matrix [D, 3 p p]
  std::span<const float> pos_emb;  // learned grid [H0][W0][D]
  std::vector<VisionBlockWeights> blocks;
  std::span<const float> final_norm;  // [D]
  MatrixView proj0;                   // [4D, 4D]
  MatrixView proj2;                   // [text_hidden, 4D]
  std::span<const float> post_norm;   // [text_hidden]

  // Resolves every vision_tower.* / mm_projector.* tensor by its release name and checks its
  // shape against `c`; throws Error naming the tensor that is absent or mis-shaped.
  static VisionWeights load(const WeightSource& w, const VisionConfig& c);
};

// The position grid resized to (h, w) like F.interpolate(mode="bilinear",
// align_corners=False, antialias=False): [h w, D], row-major over the patch grid.
std::vector<float> vision_pos_embedding(const VisionConfig& c, const VisionWeights& w, int h_patches, int w_patches);

// The tower on one image: pixels [h w, 3, p, p] (patch p = row w + col, channel-major
// inside), returns [h w, D] after the final norm. `pool` splits every product and the
// attention over its threads; null means matmul's default (the global pool for large ones).
std::vector<float> vision_tower(const VisionConfig& c, const VisionWeights& w, const float* pixels, int h_patches,
                                int w_patches, ThreadPool* pool);

// The same, also writing the stages the fixture checks: embed [L, D] (patch embedding plus
// position grid, the input of block 0) and layers [n_layers, L, D] (the residual stream after
// each block); either may be null.
// `cancel`, when given and set, ends the run between blocks with Error "cancelled" (a tower
// takes seconds at the release's width; a client that left should not hold it).
std::vector<float> vision_tower(const VisionConfig& c, const VisionWeights& w, const float* pixels, int h_patches,
                                int w_patches, ThreadPool* pool, std::vector<float>* embed,
                                std::vector<float>* layers, const std::atomic<bool>* cancel = nullptr);

}  // namespace waste
