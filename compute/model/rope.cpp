#include "compute/model/rope.h"

#include <algorithm>
#include <cmath>

namespace waste {

namespace {

// The dimension index at which a wavelength completes `rotations` turns over the original
// context: dim * ln(orig / (2 pi rotations)) / (2 ln base).
double correction_dim(double rotations, int dim, double base, double orig) {
  return dim * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(base));
}

double yarn_mscale(double factor, double mscale) { return factor <= 1.0 ? 1.0 : 0.1 * mscale * std::log(factor) + 1.0; }

}  // namespace

Rope::Rope(const ModelConfig& c) {
  if (!c.mla_rope || c.qk_rope == 0) return;
  const int dim = c.qk_rope, half = dim / 2;
  const double base = c.rope_theta;
  inv_freq_.resize(size_t(half));
  // The references build the base frequencies in f32; do the same so angles agree bit for bit.
  for (int i = 0; i < half; ++i) inv_freq_[size_t(i)] = float(1.0 / std::pow(base, double(2 * i) / dim));
  if (!c.yarn) return;
  // YaRN: high-frequency dims (i < low) keep their frequency, low-frequency dims (i > high)
  // are interpolated by `factor`, with a linear ramp between.
  const double orig = double(c.yarn_original_max_positions);
  double low = std::max(std::floor(correction_dim(c.yarn_beta_fast, dim, base, orig)), 0.0);
  double high = std::min(std::ceil(correction_dim(c.yarn_beta_slow, dim, base, orig)), double(dim - 1));
  if (low == high) high += 0.001;  // avoid a zero-width ramp
  for (int i = 0; i < half; ++i) {
    const double ramp = std::clamp((i - low) / (high - low), 0.0, 1.0);
    const double keep = 1.0 - ramp;  // share of the original (extrapolated) frequency
    const float f = inv_freq_[size_t(i)];
    inv_freq_[size_t(i)] = float(double(f / c.yarn_factor) * (1.0 - keep) + double(f) * keep);
  }
}

void Rope::apply(float* x, int64_t pos) const {
  for (size_t i = 0; i < inv_freq_.size(); ++i) {
    const float angle = float(pos) * inv_freq_[i];  // f32 angle, as the references compute it
    const float cs = std::cos(angle), sn = std::sin(angle);
    const float a = x[2 * i], b = x[2 * i + 1];
    x[2 * i] = a * cs - b * sn;
    x[2 * i + 1] = a * sn + b * cs;
  }
}

float mla_softmax_scale(const ModelConfig& c) {
  double tau = 1.0 / std::sqrt(double(c.qk_nope + c.qk_rope));
  if (c.mla_rope && c.yarn) {
    // MODELS.md 2.4 (HF, vLLM): m comes from mscale_all_dim; absent means 0, i.e. m = 1.
    // DeepSeek's model.py reads `mscale` instead; every release sets both to 1.0.
    const double m = yarn_mscale(c.yarn_factor, c.yarn_mscale_all_dim);
    tau *= m * m;
  }
  return float(tau);
}

}  // namespace waste
