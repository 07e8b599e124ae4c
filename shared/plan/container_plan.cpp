#include "shared/plan/container_plan.h"

#include <algorithm>
#include <vector>

#include "shared/container/reader.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"

namespace waste::plan {

PlanRequest plan_request_of_container(const std::string& dir, uint64_t image_patches) {
  return plan_request_of(Container::open(dir), image_patches);
}

PlanRequest plan_request_of(const Container& c, uint64_t image_patches) {
  PlanRequest r;
  r.config = c.config();
  std::vector<std::string> embedding;
  for (const TensorSpec& s : trunk_tensor_specs(r.config))
    if (s.role == TensorRole::Embedding) embedding.push_back(s.name);
  bool saw_kv_b = false;
  for (const TensorInfo& t : c.tensors()) {
    // The vision tower is counted apart (count_vision): it is loaded only once an image is used.
    bool skip = is_vision_tensor(t.name);
    for (const std::string& e : embedding) skip |= t.name == e || t.name == r.config.tensor_prefix + e;
    if (!skip) r.trunk_bytes += t.bytes;
    // The first MLA layer's kv_b_proj says how the cache is stored (shared/model/mla_cache.h),
    // as the Model decides it from the same tensor.
    const std::string kv_b = "self_attn.kv_b_proj.weight";
    if (!saw_kv_b && t.name.size() >= kv_b.size() && t.name.compare(t.name.size() - kv_b.size(), kv_b.size(), kv_b) == 0) {
      r.mla_cache = mla_cache_format(t.format);
      saw_kv_b = true;
    }
  }
  r.trunk_source = "manifest";
  count_vision(c, r, image_patches);
  for (const ExpertLayerInfo& l : c.expert_layers()) r.record_stride = std::max(r.record_stride, l.layout.stride);
  require(r.record_stride > 0, c.dir() + ": the container has no expert layers");
  return r;
}

void count_vision(const Container& c, PlanRequest& r, uint64_t image_patches) {
  if (!c.has_vision()) return;
  const VisionConfig v = VisionConfig::from_json(c.config_json(), c.dir() + " (config)");
  r.vision_weight_bytes = c.vision_bytes();
  r.vision_activation_bytes = vision_runtime_bytes(v, image_patches);
  r.vision_source = "manifest";
}

}  // namespace waste::plan
