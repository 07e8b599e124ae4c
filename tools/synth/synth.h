// `waste synth`: writes a valid container with random weights for any shape, fast enough
// that a 20 GB Kimi-Linear-shaped container is written at disk speed (random codes go
// straight to disk; nothing is encoded).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "shared/container/format.h"
#include "shared/model/presets.h"
#include "shared/model/trunk_storage.h"
#include "tools/convert/vision_plan.h"

namespace waste {

struct SynthOptions {
  std::string preset;
  PresetOverrides overrides;
  std::string out;
  TensorFormat expert_format = TensorFormat::VQ3R;
  // --trunk, --head, --trunk-group, --router (nullopt: not given), stored by the converter's
  // rule (shared/model/trunk_storage.h, trunk_storage_for).
  TensorFormat trunk_format = TensorFormat::Q4G;
  std::optional<TensorFormat> head;
  std::optional<uint32_t> trunk_group;
  std::optional<TensorFormat> router;
  // The K3 presets' vision tower (stored as `waste convert --vision` stores it); ignored by
  // presets without a vision_config. None leaves the tower out.
  VisionChoice vision = VisionChoice::Q8G;
  uint64_t seed = 1;
  bool progress = true;
};

// Standard deviation of the e_score_correction_bias that skews expert popularity: with it,
// about 150-170 of 256 experts are touched by 8-of-256 routing over 128 random tokens, as
// on the real Kimi-Linear trace (uniform routing would touch ~250).
constexpr double kSynthRouterBiasStd = 0.08;

void synthesize(const SynthOptions& options);

}  // namespace waste
