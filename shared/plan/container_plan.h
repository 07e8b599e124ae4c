// The memory plan's inputs read off a container: its config, the resident trunk (every trunk
// tensor but the embedding table, which stays on disk) and the expert slot size (the largest
// record). One definition for `waste plan MODEL_DIR` and libwaste's waste_plan_container.
#pragma once
#include <string>

#include "shared/plan/memory_plan.h"

namespace waste::plan {

// Throws Error naming `dir` when it is not a container or has no expert layers. Fills config,
// trunk_bytes, trunk_source and record_stride; the caller sets context, sessions and budget.
PlanRequest plan_request_of_container(const std::string& dir);

}  // namespace waste::plan
