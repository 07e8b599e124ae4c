// The MLA latent cache's element type, one rule for compute (compute/model/session.h, the
// Model) and the memory planner (shared/plan/memory_plan.h): the cache is stored as bf16 when
// the attention weights that read it (kv_b_proj, W_UK / W_UV) are stored quantized (q4g/q8g),
// else f32. Rounding each cached [c ; k^R] value to bf16 moves the fixtures' logits by at most
// 0.01-0.04 against their independent references (docs/LEARNED.md, 2026-12-05), a tenth of
// what the q4g trunk itself moves them, for half the cache (K3: 55,296 -> 27,648 B a token, 3.4
// GiB less at 128K context); a lossless trunk (the reference checks) keeps the cache lossless.
#pragma once
#include <cstdint>

#include "shared/container/format.h"

namespace waste {

enum class MlaCacheFormat : uint8_t { F32, BF16 };

// `kv_b` is the stored format of an MLA layer's kv_b_proj.
constexpr MlaCacheFormat mla_cache_format(TensorFormat kv_b) {
  return kv_b == TensorFormat::Q4G || kv_b == TensorFormat::Q8G ? MlaCacheFormat::BF16 : MlaCacheFormat::F32;
}
constexpr uint64_t mla_cache_value_bytes(MlaCacheFormat f) { return f == MlaCacheFormat::BF16 ? 2 : 4; }
constexpr const char* mla_cache_format_name(MlaCacheFormat f) { return f == MlaCacheFormat::BF16 ? "bf16" : "f32"; }

}  // namespace waste
