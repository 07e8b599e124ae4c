#include "tools/convert/vision_plan.h"

#include <cstdio>
#include <filesystem>

#include "shared/model/config_json.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {

VisionChoice vision_choice_from_name(const std::string& name) {
  if (name == "none") return VisionChoice::None;
  if (name == "f32") return VisionChoice::F32;
  if (name == "bf16") return VisionChoice::BF16;
  if (name == "q8g") return VisionChoice::Q8G;
  throw Error("--vision must be q8g, bf16, f32 or none, not '" + name + "'");
}

const char* vision_choice_name(VisionChoice v) {
  switch (v) {
    case VisionChoice::None: return "none";
    case VisionChoice::F32: return "f32";
    case VisionChoice::BF16: return "bf16";
    case VisionChoice::Q8G: return "q8g";
  }
  return "?";
}

uint32_t vision_q8g_group(uint64_t cols) {
  if (cols % kTrunkGroup == 0) return kTrunkGroup;
  // Even and at least 8: what the reader accepts for a group (shared/container/reader.cpp).
  for (uint32_t g = kTrunkGroup; g >= 8; g -= 2)
    if (cols % g == 0) return g;
  return 0;
}

VisionStorage vision_storage(const TensorSpec& spec, VisionChoice choice) {
  if (spec.role == TensorRole::Vector || choice == VisionChoice::F32) return {TensorFormat::F32, 0};
  if (choice == VisionChoice::BF16) return {TensorFormat::BF16, 0};
  require(choice == VisionChoice::Q8G, "vision_storage: no storage for --vision none");
  const uint64_t cols = spec.elements() / spec.shape[0];
  const uint32_t group = vision_q8g_group(cols);
  if (group == 0) return {TensorFormat::BF16, 0};
  return {TensorFormat::Q8G, group};
}

VisionPlan plan_vision(const Checkpoint& ck, VisionChoice choice) {
  VisionPlan plan;
  if (choice == VisionChoice::None) return plan;
  std::string first_vision;
  for (const std::string& n : ck.names())
    if (is_vision_tensor(n)) {
      first_vision = n;
      break;
    }
  const nlohmann::json root = parse_config_object(ck.config_json(), ck.dir() + "/config.json");
  const bool has_config = root.contains("vision_config") && root.at("vision_config").is_object();
  if (first_vision.empty()) {
    if (has_config)
      std::fprintf(stderr, "waste convert: note: config.json has a vision_config but %s holds no vision tensors; "
                           "the container has no vision tower\n", ck.dir().c_str());
    return plan;
  }
  if (!has_config) {
    std::fprintf(stderr, "waste convert: warning: %s holds vision tensors (%s) but config.json has no vision_config; "
                         "they are left out\n", ck.dir().c_str(), first_vision.c_str());
    return plan;
  }
  const VisionConfig v = VisionConfig::from_json(ck.config_json(), ck.dir() + "/config.json");
  for (const TensorSpec& spec : vision_tensor_specs(v)) {
    require(ck.has(spec.name), ck.dir() + ": checkpoint lacks vision tensor '" + spec.name + "' (shape " +
                                   shape_text(spec.shape) + " expected from vision_config; --vision none converts "
                                   "without the tower)");
    const std::vector<uint64_t> shape = ck.shape(spec.name);
    require(shape == spec.shape, ck.dir() + ": vision tensor '" + spec.name + "' has shape " + shape_text(shape) +
                                     ", vision_config needs " + shape_text(spec.shape));
    TrunkItem item;
    item.spec = spec;
    item.source = spec.name;  // the release name is the full name: no prefix to add
    item.shape = shape;
    const VisionStorage s = vision_storage(spec, choice);
    item.format = s.format;
    item.group = s.group;
    plan.items.push_back(std::move(item));
  }
  const std::string pre_path = (std::filesystem::path(ck.dir()) / "preprocessor_config.json").string();
  require(path_exists(pre_path), ck.dir() + ": has a vision tower but no preprocessor_config.json (the image "
                                            "normalization comes from it; --vision none converts without the tower)");
  plan.preprocessor_config_json = read_file_text(pre_path, kMaxPreprocessorConfigBytes);
  const PreprocessorConfig p = PreprocessorConfig::from_json(plan.preprocessor_config_json, pre_path);
  // The container's reader refuses a mismatch too; say it here, before anything is written.
  require(p.patch_size == v.patch_size && p.merge_kernel_size == v.merge_h && p.merge_kernel_size == v.merge_w,
          pre_path + ": patch_size " + std::to_string(p.patch_size) + " / merge_kernel_size " +
              std::to_string(p.merge_kernel_size) + " disagree with config.json's vision_config (patch_size " +
              std::to_string(v.patch_size) + ", merge_kernel_size [" + std::to_string(v.merge_h) + ", " +
              std::to_string(v.merge_w) + "])");
  return plan;
}

}  // namespace waste
