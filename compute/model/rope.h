// Rotary position embedding of the MLA rope dims (DeepSeek-V3 / K2), with YaRN frequency
// interpolation, and the MLA softmax scale (which carries YaRN's mscale^2). MODELS.md 2.4-2.5.
#pragma once
#include <cstdint>
#include <vector>

#include "shared/model/config.h"

namespace waste {

class Rope {
 public:
  explicit Rope(const ModelConfig& c);
  bool enabled() const { return !inv_freq_.empty(); }
  // Rotates x[dim] in place for a token at `pos`, interleaved pairs (GPT-J style):
  // (x[2i], x[2i+1]) turns by angle pos * inv_freq[i].
  void apply(float* x, int64_t pos) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }

 private:
  std::vector<float> inv_freq_;  // empty for NoPE models (Kimi-Linear, K3)
};

// tau = (qk_nope + qk_rope)^-0.5 * m^2, m = 0.1 * mscale_all_dim * ln(factor) + 1 under YaRN.
float mla_softmax_scale(const ModelConfig& c);

}  // namespace waste
