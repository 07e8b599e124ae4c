#include "tools/synth/synth_vision.h"

#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "shared/container/writer.h"
#include "shared/model/config_json.h"
#include "shared/model/tensors.h"
#include "shared/util/progress.h"
#include "shared/util/random.h"
#include "tools/synth/random_weights.h"

namespace waste {

namespace {

// Rows and columns as stored: a vector is one row; the conv kernel [D, 3, p, p] is [D, 3 p p].
void stored_dims(const TensorSpec& s, uint64_t& rows, uint64_t& cols) {
  rows = s.shape.size() == 1 ? 1 : s.shape[0];
  cols = s.elements() / rows;
}

}  // namespace

bool config_has_vision(const std::string& config_json) {
  const nlohmann::json root = parse_config_object(config_json, "synth config");
  return root.contains("vision_config") && root.at("vision_config").is_object();
}

uint64_t synth_vision_bytes(const VisionConfig& v, VisionChoice choice) {
  uint64_t total = 0;
  for (const TensorSpec& s : vision_tensor_specs(v)) {
    uint64_t rows, cols;
    stored_dims(s, rows, cols);
    const VisionStorage st = vision_storage(s, choice);
    total += trunk_tensor_bytes(st.format, rows, cols, st.group).total;
  }
  return total;
}

void write_synth_vision(ContainerWriter& w, const VisionConfig& v, VisionChoice choice, uint64_t seed,
                        Progress& progress) {
  // Its own stream: the text trunk's bytes do not depend on whether a tower follows.
  Rng rng(seed, 2);
  for (const TensorSpec& s : vision_tensor_specs(v)) {
    uint64_t rows, cols;
    stored_dims(s, rows, cols);
    const VisionStorage st = vision_storage(s, choice);
    const uint64_t n = s.elements();
    if (st.format == TensorFormat::Q8G) {
      const std::vector<uint8_t> bytes = random_quantized(st.format, rows, cols, st.group, 1.0 / std::sqrt(double(cols)), rng);
      w.add_tensor_bytes(s.name, s.shape, st.format, st.group, bytes.data(), bytes.size());
      progress.add(bytes.size());
      continue;
    }
    std::vector<float> values(n);
    if (s.role == TensorRole::Vector && s.name.ends_with("pos_emb.weight")) {
      for (float& x : values) x = float(0.1 * rng.normal());
    } else if (s.role == TensorRole::Vector) {
      for (float& x : values) x = 1.0f;  // RMSNorm weights
    } else {
      const double std_dev = 1.0 / std::sqrt(double(cols));
      for (float& x : values) x = float(std_dev * rng.normal());
    }
    w.add_tensor(s.name, s.shape, values.data(), st.format, st.group);
    progress.add(trunk_tensor_bytes(st.format, rows, cols, st.group).total);
  }
}

std::string synth_preprocessor_config_json(const VisionConfig& v) {
  const nlohmann::json j = {{"media_proc_cfg",
                             {{"image_mean", {0.5, 0.5, 0.5}},
                              {"image_std", {0.5, 0.5, 0.5}},
                              {"in_patch_limit", 65536},
                              {"merge_kernel_size", v.merge_h},
                              {"patch_limit_on_one_side", 512},
                              {"patch_size", v.patch_size}}}};
  return j.dump(1) + "\n";
}

}  // namespace waste
