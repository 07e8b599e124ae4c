// The K3 vision tower and projector of a synthetic container: random weights at the shapes of
// config.json's vision_config, stored as `waste convert --vision` would store them
// (tools/convert/vision_plan.h), and a preprocessor config in the release's layout.
#pragma once
#include <cstdint>
#include <string>

#include "shared/model/vision_config.h"
#include "tools/convert/vision_plan.h"

namespace waste {

class ContainerWriter;
class Progress;

// True when the config.json text has a vision_config object (a K3 preset).
bool config_has_vision(const std::string& config_json);

// Stored bytes of the tower in trunk.bin (for the progress bar).
uint64_t synth_vision_bytes(const VisionConfig& v, VisionChoice choice);

// Adds every vision tensor (vision_tensor_specs order) to the trunk being written, from the
// random stream (seed, 2): norm weights 1, the position grid N(0, 0.1^2) beside the patch
// embedding's output of about 0.5 rms, matrices N(0, 1/cols) so that each product keeps
// RMS-normalised activations at unit scale.
void write_synth_vision(ContainerWriter& w, const VisionConfig& v, VisionChoice choice, uint64_t seed,
                        Progress& progress);

// media_proc_cfg as the release ships it: mean = std = 0.5, the tower's patch and merge
// size, in_patch_limit 65536, patch_limit_on_one_side 512.
std::string synth_preprocessor_config_json(const VisionConfig& v);

}  // namespace waste
