#include "compute/model/mm_projector.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "compute/model/ops.h"
#include "shared/util/error.h"
#include "shared/util/thread_pool.h"

namespace waste {

namespace {

inline float gelu_erf(float z) { return 0.5f * z * (1.0f + std::erf(z * 0.7071067811865476f)); }

void product(const MatrixView& w, const float* x, int64_t n, float* y, ThreadPool* pool) {
  if (pool)
    matmul(w, x, n, y, *pool);
  else
    matmul(w, x, n, y);
}

}  // namespace

std::vector<float> vision_merge(const VisionConfig& c, const float* tower, int h, int w) {
  const int mh = c.merge_h, mw = c.merge_w;
  require(h > 0 && w > 0 && h % mh == 0 && w % mw == 0,
          "vision projector: patch grid " + std::to_string(h) + " x " + std::to_string(w) +
              " is not a multiple of the merge kernel " + std::to_string(mh) + " x " + std::to_string(mw));
  const int64_t D = c.hidden, hm = h / mh, wm = w / mw, M = c.merged_width();
  std::vector<float> out(size_t(hm * wm * M));
  for (int64_t a = 0; a < hm; ++a)
    for (int64_t b = 0; b < wm; ++b) {
      float* dst = &out[size_t((a * wm + b) * M)];
      for (int dy = 0; dy < mh; ++dy)      // rows of the kernel outer,
        for (int dx = 0; dx < mw; ++dx) {  // columns inner: (dy, dx)
          const int64_t p = (a * mh + dy) * w + (b * mw + dx);
          std::copy_n(tower + p * D, D, dst);
          dst += D;
        }
    }
  return out;
}

std::vector<float> mm_projector(const VisionConfig& c, const VisionWeights& w, const float* tower, int h, int wd,
                                ThreadPool* pool) {
  const std::vector<float> merged = vision_merge(c, tower, h, wd);
  const int64_t M = c.merged_width(), T = c.text_hidden;
  const int64_t n = int64_t(merged.size()) / M;
  std::vector<float> mid(size_t(n * M));
  product(w.proj0, merged.data(), n, mid.data(), pool);
  for (float& v : mid) v = gelu_erf(v);
  std::vector<float> out(size_t(n * T));
  product(w.proj2, mid.data(), n, out.data(), pool);
  for (int64_t t = 0; t < n; ++t)
    rmsnorm(&out[size_t(t * T)], w.post_norm.data(), int(T), c.projector_eps, &out[size_t(t * T)]);
  return out;
}

}  // namespace waste
