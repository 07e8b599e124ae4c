// libFuzzer target: untrusted text as a release's config.json through every parser that reads
// one (the text model's ModelConfig, the vision tower's VisionConfig) and as a
// preprocessor_config.json, as `waste convert` and Container::open read them. Contract checked:
// a config that parses has the shapes the rest of WASTE indexes by without checking again.
#include <cstddef>
#include <cstdint>
#include <string>

#include "shared/model/config.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const waste::ModelConfig c = waste::ModelConfig::from_json(text, "fuzz config.json");
    if (c.n_layers <= 0 || c.is_kda.size() != size_t(c.n_layers) || c.hidden <= 0 || c.vocab <= 0) __builtin_trap();
    for (int layer : c.moe_layers())
      if (layer < 0 || layer >= c.n_layers) __builtin_trap();
  } catch (const waste::Error&) {
  }
  try {
    const waste::VisionConfig v = waste::VisionConfig::from_json(text, "fuzz config.json");
    if (v.heads <= 0 || v.patch_size <= 0 || v.head_dim * v.heads != v.qkv_hidden) __builtin_trap();
  } catch (const waste::Error&) {
  }
  try {
    const waste::PreprocessorConfig p = waste::PreprocessorConfig::from_json(text, "fuzz preprocessor_config.json");
    if (p.patch_size <= 0 || p.merge_kernel_size <= 0) __builtin_trap();
  } catch (const waste::Error&) {
  }
  return 0;
}
