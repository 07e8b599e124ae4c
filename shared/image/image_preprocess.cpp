#include "shared/image/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "shared/util/error.h"

namespace waste {

PatchGrid fit_patch_grid(int width, int height, int patch, int max_patches) {
  require(width > 0 && height > 0, "fit_patch_grid: image size " + std::to_string(width) + "x" +
                                       std::to_string(height) + " is not positive");
  require(patch > 0 && max_patches >= 4, "fit_patch_grid: patch " + std::to_string(patch) + " and max_patches " +
                                             std::to_string(max_patches) + " leave no room for 2x2 patches");
  const double area_patches = double(width) * double(height) / (double(patch) * patch);
  const double s = std::min(1.0, std::sqrt(double(max_patches) / area_patches));
  auto side = [&](int px) {
    int n = int(px * s / patch + 0.5);
    n = std::max(n, 2);
    return n & ~1;  // the 2x2 merge needs even sides
  };
  PatchGrid g{side(height), side(width)};
  while (g.w_patches * g.h_patches > max_patches) {
    if (g.w_patches >= g.h_patches)
      g.w_patches -= 2;
    else
      g.h_patches -= 2;
  }
  return g;
}

namespace {

// One axis of the resample: for each destination index the two source indices and the weight
// of the second. Float32 throughout, like src/image.c, so the stored pixels are reproduced
// bit for bit (a double coordinate drifts by up to ~1e-4 at large x).
struct Taps {
  std::vector<int> i0, i1;
  std::vector<float> f;
};

Taps axis_taps(int src, int dst) {
  Taps t;
  t.i0.resize(dst), t.i1.resize(dst), t.f.resize(dst);
  const float scale = float(src) / float(dst);
  for (int d = 0; d < dst; ++d) {
    float x = (float(d) + 0.5f) * scale - 0.5f;
    if (x < 0.0f) x = 0.0f;
    int x0 = int(x);
    if (x0 > src - 1) x0 = src - 1;
    t.i0[d] = x0;
    t.i1[d] = std::min(x0 + 1, src - 1);
    t.f[d] = x - float(x0);
  }
  return t;
}

}  // namespace

std::vector<float> image_pixels(const RgbImage& img, PatchGrid grid, int patch, std::array<float, 3> mean,
                                std::array<float, 3> std) {
  require(img.width > 0 && img.height > 0 && img.rgb.size() == size_t(img.width) * img.height * 3,
          "image_pixels: RGB buffer does not match its " + std::to_string(img.width) + "x" +
              std::to_string(img.height) + " size");
  require(grid.h_patches > 0 && grid.w_patches > 0 && patch > 0,
          "image_pixels: empty patch grid " + std::to_string(grid.h_patches) + "x" + std::to_string(grid.w_patches));
  for (int c = 0; c < 3; ++c) require(std[c] != 0.0f, "image_pixels: image_std[" + std::to_string(c) + "] is 0");
  const int dw = grid.w_patches * patch, dh = grid.h_patches * patch;
  const int W = img.width;
  const uint8_t* px = img.rgb.data();

  // The resampled image, planar [c][y][x], before normalization.
  std::vector<float> plane(size_t(3) * dw * dh);
  if (dw == img.width && dh == img.height) {
    for (int y = 0; y < dh; ++y)
      for (int x = 0; x < dw; ++x)
        for (int c = 0; c < 3; ++c) plane[(size_t(c) * dh + y) * dw + x] = float(px[(size_t(y) * W + x) * 3 + c]);
  } else {
    const Taps tx = axis_taps(img.width, dw), ty = axis_taps(img.height, dh);
    for (int y = 0; y < dh; ++y) {
      const uint8_t* r0 = px + size_t(ty.i0[y]) * W * 3;
      const uint8_t* r1 = px + size_t(ty.i1[y]) * W * 3;
      const float fy = ty.f[y];
      for (int x = 0; x < dw; ++x) {
        const int a = tx.i0[x] * 3, b = tx.i1[x] * 3;
        const float fx = tx.f[x];
        for (int c = 0; c < 3; ++c) {
          const float top = float(r0[a + c]) * (1.0f - fx) + float(r0[b + c]) * fx;
          const float bot = float(r1[a + c]) * (1.0f - fx) + float(r1[b + c]) * fx;
          plane[(size_t(c) * dh + y) * dw + x] = top * (1.0f - fy) + bot * fy;
        }
      }
    }
  }

  const int pp = patch * patch;
  std::vector<float> out(size_t(grid.h_patches) * grid.w_patches * 3 * pp);
  float* o = out.data();
  for (int pr = 0; pr < grid.h_patches; ++pr)
    for (int pc = 0; pc < grid.w_patches; ++pc)
      for (int c = 0; c < 3; ++c)
        for (int y = 0; y < patch; ++y)
          for (int x = 0; x < patch; ++x) {
            const float v = plane[(size_t(c) * dh + pr * patch + y) * dw + pc * patch + x];
            *o++ = (v / 255.0f - mean[c]) / std[c];
          }
  return out;
}

}  // namespace waste
