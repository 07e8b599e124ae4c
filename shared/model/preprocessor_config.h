// The image preprocessing constants of a K3 release, read from its preprocessor_config.json
// (the `media_proc_cfg` object): the normalization mean and std, the patch size and the patch
// limits. The container keeps the file verbatim (manifest field preprocessorConfigJson), so
// the constants are always the release's own and never assumed: K3 uses mean = std = 0.5, and
// CLIP's constants moved the fixture's embeddings by 1.6-2.1 (shared/vision/kimi-k3/README.md).
#pragma once
#include <array>
#include <cstdint>
#include <string>

namespace waste {

// Bound on the file's size: the release's is 224 bytes; anything near this is not one.
constexpr uint64_t kMaxPreprocessorConfigBytes = 1ull << 20;

struct PreprocessorConfig {
  std::array<float, 3> image_mean{};  // per RGB channel: pixel = (v / 255 - mean) / std
  std::array<float, 3> image_std{};
  int patch_size = 0;                 // 14
  int64_t in_patch_limit = 0;         // most patches per image the release's processor allows (65536)
  int patch_limit_on_one_side = 0;    // most patches along one side (512)
  int merge_kernel_size = 0;          // patches merged per side into one image token (2)

  // Parses the file's text; `source` names it in errors, which name the field that is
  // missing, mistyped or out of range (std > 0 and finite, mean finite, patch 1..64, ...).
  static PreprocessorConfig from_json(const std::string& text, const std::string& source);
};

}  // namespace waste
