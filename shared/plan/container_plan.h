// The memory plan's inputs read off a container: its config, the resident trunk (every text
// trunk tensor but the embedding table, which stays on disk), the vision tower when it has one
// (its stored weights and one image's activations, vision_activation_bytes) and the expert
// slot size (the largest record). One definition for `waste plan MODEL_DIR`, libwaste's
// waste_plan_container and iod's budget.
#pragma once
#include <string>

#include "shared/plan/memory_plan.h"

namespace waste {
class Container;
}

namespace waste::plan {

// Throws Error naming `dir` when it is not a container or has no expert layers. Fills config,
// trunk_bytes, trunk_source, the vision fields and record_stride; the caller sets context,
// sessions and budget.
PlanRequest plan_request_of_container(const std::string& dir, uint64_t image_patches = kDefaultVisionPatches);
PlanRequest plan_request_of(const Container& c, uint64_t image_patches = kDefaultVisionPatches);

// Sets r.vision_weight_bytes (the container's stored vision tensors), r.vision_activation_bytes
// (at kDefaultVisionPatches) and r.vision_source when the container has a vision tower; leaves
// them 0 otherwise.
void count_vision(const Container& c, PlanRequest& r, uint64_t image_patches = kDefaultVisionPatches);

}  // namespace waste::plan
