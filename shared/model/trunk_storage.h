// How a trunk tensor is stored, by role: the one rule `waste convert` and `waste synth` share
// (docs/FORMAT.md). Routers and vectors are always f32 (routing decisions and norms are
// sensitive and small). A quantized trunk (q4g or q8g matrices) keeps the embedding at q8g and
// the output head at q8g unless the head is chosen apart (--head): the head is the largest
// matrix every decoded token reads in full (vocab x hidden), so its bytes are a decode cost of
// their own, while its error shows directly in the logits (docs/MEASUREMENTS.md has both for
// q4g). A quantized format falls back to bf16 when the columns are not a multiple of the group.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "shared/container/format.h"
#include "shared/model/tensors.h"

namespace waste {

// Columns per quantization group of the trunk's q4g/q8g matrices.
constexpr uint32_t kTrunkGroup = 32;

struct TrunkStorage {
  TensorFormat matrices = TensorFormat::Q4G;  // --trunk
  std::optional<TensorFormat> head;           // --head; nullopt: q8g for a quantized trunk, else as the matrices
};

TensorFormat trunk_storage_format(TensorRole role, uint64_t cols, const TrunkStorage& storage);
// --head's value: q8g, q4g, bf16 or f32; anything else is an Error naming --head.
TensorFormat head_format_from_name(const std::string& name);

}  // namespace waste
