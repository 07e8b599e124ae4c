// From decoded RGB to what enters a vision tower's patch embedding (Kimi K3 / waste src/image.c):
// a patch grid within a patch budget, a float32 bilinear resample onto it, normalization and
// patchification. See ../shared/vision/kimi-k3/README.md, "The pipeline, exactly", steps 1-4.
#pragma once
#include <array>
#include <vector>

#include "shared/image/image_decode.h"

namespace waste {

struct PatchGrid {
  int h_patches = 0;
  int w_patches = 0;
};

// s = min(1, sqrt(max_patches / (W*H / patch^2))); each side round(side*s/patch), at least 2,
// rounded down to even (the 2x2 merge needs it); while over the budget, 2 off the larger side
// (width on ties). Throws waste::Error on non-positive sizes or a budget below 2x2.
PatchGrid fit_patch_grid(int width, int height, int patch = 14, int max_patches = 1024);

// [h*w, 3, patch, patch] float32: the image resampled straight onto (w*patch) x (h*patch)
// (bilinear, half-pixel centres, edge clamp, no antialias, float32; no resample when the size
// already matches), then (v/255 - mean[c]) / std[c], patch p = row*w + col, each [c][y][x].
std::vector<float> image_pixels(const RgbImage& img, PatchGrid grid, int patch, std::array<float, 3> mean,
                                std::array<float, 3> std);

}  // namespace waste
