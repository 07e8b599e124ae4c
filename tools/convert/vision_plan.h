// How a K3 checkpoint's vision tower and projector become container tensors (`--vision`):
// which release tensors are read, and in which format each is stored. Built and checked
// before anything is written, like the text trunk's plan (trunk_plan.h). The tensors go into
// trunk.bin after the text model's, under their release names (they have no prefix).
//
// Storage: norms and the position grid always f32; matrices in the chosen format. 8 bits is
// the least: in the original engine's measurements on the real tower, 4 bits lost 17.9% of the
// packed QKV and 12.6% of the position grid, so it requantized the whole tower to int8.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shared/hf/checkpoint.h"
#include "tools/convert/trunk_plan.h"

namespace waste {

// --vision: none (drop the tower), f32, bf16 or q8g (the default).
enum class VisionChoice { None, F32, BF16, Q8G };
VisionChoice vision_choice_from_name(const std::string& name);
const char* vision_choice_name(VisionChoice v);

// The q8g group of a vision matrix with `cols` columns: 32 when it divides them, else the
// largest even divisor of cols in [8, 32] (the patch embedding's 588 = 21 x 28 gets 28); 0
// when there is none (then the matrix is stored bf16). Groups that are not a multiple of 32
// run the scalar kernels on every path (shared/kernels: same results, tested for 48 and 96);
// for the patch embedding, one product per image, that costs nothing that matters.
uint32_t vision_q8g_group(uint64_t cols);

struct VisionStorage {
  TensorFormat format = TensorFormat::F32;
  uint32_t group = 0;  // q8g only
};
// Vector-role tensors (norms, the position grid) f32; matrices as `choice` says.
VisionStorage vision_storage(const TensorSpec& spec, VisionChoice choice);

struct VisionPlan {
  std::vector<TrunkItem> items;          // empty: no vision tower in the container
  std::string preprocessor_config_json;  // the release's file, verbatim (when items is not empty)
};

// The tower when the checkpoint's config.json has a vision_config and the checkpoint holds
// vision tensors (and choice is not None). Throws Error naming the checkpoint and tensor when
// one is missing or mis-shaped, and when preprocessor_config.json is missing or does not parse
// (--vision none converts such a checkpoint without its tower). A checkpoint with only one of
// vision_config and vision tensors has no usable tower: a warning, and none.
VisionPlan plan_vision(const Checkpoint& ck, VisionChoice choice);

}  // namespace waste
