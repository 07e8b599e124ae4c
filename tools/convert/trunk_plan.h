// How each trunk tensor of a checkpoint becomes a container tensor: which release tensor it
// reads and in which format it is stored. Built and checked before anything is written, so a
// checkpoint missing a tensor (or holding one of the wrong shape) is refused up front.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "shared/container/format.h"
#include "shared/hf/checkpoint.h"
#include "shared/model/tensors.h"
#include "shared/model/trunk_storage.h"

namespace waste {

// --trunk: q4g (default: q4g matrices, q8g embedding and head), q8g, bf16 or f32.
enum class TrunkChoice { Q4G, Q8G, BF16, F32 };
TrunkChoice trunk_choice_from_name(const std::string& name);
const char* trunk_choice_name(TrunkChoice t);

struct TrunkItem {
  TensorSpec spec;                // release name without prefix, shape from the config
  std::string source;             // full release name to read: a base name for read_weight or a full tensor name
  bool via_read_weight = false;   // true: Checkpoint::read_weight(source), else read_tensor(source)
  std::vector<uint64_t> shape;    // stored shape (differs from spec.shape only for padded tensors)
  TensorFormat format = TensorFormat::F32;
  uint32_t group = 0;
};

// The matrices' format of a --trunk choice (TrunkStorage::matrices).
TensorFormat trunk_choice_format(TrunkChoice choice);

// Every trunk tensor, in trunk_tensor_specs order, stored by shared/model/trunk_storage.h's
// rule. Throws Error naming the checkpoint directory and tensor when one is missing or has
// the wrong shape.
std::vector<TrunkItem> plan_trunk(const Checkpoint& ck, const TrunkStorage& storage);

// Checks every routed expert's gate/up/down exists with shape [I, H], [I, H], [H, I]
// (H = expert_hidden). Throws Error naming the first bad tensor.
void check_expert_tensors(const Checkpoint& ck);

}  // namespace waste
