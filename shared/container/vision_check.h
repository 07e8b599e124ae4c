// The vision part of a manifest, checked when a container opens (Container::open): the K3
// vision tower's and projector's tensors come all or none; each has the shape config.json's
// vision_config gives (vision_tensor_specs) and a format the tower can read (norms and the
// position grid f32, matrices any trunk format); and a container holding them has a
// preprocessor config that parses and agrees with the vision config on patch and merge size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "shared/container/reader.h"

namespace waste {

struct VisionCheck {
  bool has_vision = false;
  uint64_t bytes = 0;  // stored bytes of the vision tensors
};

// `where` names the manifest in errors, which name the tensor or field at fault. Tensors must
// already have passed the per-tensor checks (shape bounds, bytes, offsets).
// `text` is the text model's config: the projector's output must be its hidden size and the
// media placeholder one of its ids.
VisionCheck check_vision(const std::vector<TensorInfo>& tensors, const std::string& config_json,
                         const std::string& preprocessor_config_json, const ModelConfig& text, const std::string& where);

}  // namespace waste
