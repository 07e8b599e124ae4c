#include "shared/container/vision_check.h"

#include <unordered_map>

#include "shared/model/config_json.h"
#include "shared/model/preprocessor_config.h"
#include "shared/model/tensors.h"
#include "shared/model/vision_config.h"
#include "shared/util/error.h"

namespace waste {

VisionCheck check_vision(const std::vector<TensorInfo>& tensors, const std::string& config_json,
                         const std::string& preprocessor_config_json, const ModelConfig& text, const std::string& where) {
  VisionCheck out;
  const std::string pre_where = where + " (preprocessorConfigJson)";
  // Checked whenever present, so a damaged one is never handed on.
  if (!preprocessor_config_json.empty()) PreprocessorConfig::from_json(preprocessor_config_json, pre_where);

  std::vector<const TensorInfo*> vision;
  for (const TensorInfo& t : tensors)
    if (is_vision_tensor(t.name)) vision.push_back(&t);
  if (vision.empty()) return out;

  // Shapes come from the config only: without a vision_config nothing says what they must be.
  const nlohmann::json root = parse_config_object(config_json, where + " (config)");
  require(root.contains("vision_config") && root.at("vision_config").is_object(),
          where + ": tensor " + vision.front()->name + " belongs to a vision tower, but config.json has no vision_config");
  const VisionConfig v = VisionConfig::from_json(config_json, where + " (config)");
  const std::vector<TensorSpec> specs = vision_tensor_specs(v);
  std::unordered_map<std::string, const TensorSpec*> by_name;
  for (const TensorSpec& s : specs) by_name.emplace(s.name, &s);

  for (const TensorInfo* t : vision) {
    auto it = by_name.find(t->name);
    require(it != by_name.end(), where + ": tensor " + t->name + " is not a tensor of this vision tower (vision_config: " +
                                     std::to_string(v.n_layers) + " blocks)");
    const TensorSpec& spec = *it->second;
    require(t->shape == spec.shape, where + ": tensor " + t->name + " has shape " + shape_text(t->shape) +
                                        ", the vision config needs " + shape_text(spec.shape));
    // Norms and the position grid are read as f32 spans (the grid is interpolated, not
    // multiplied); matrices go through the trunk matmul, which reads every trunk format.
    if (spec.role == TensorRole::Vector)
      require(t->format == TensorFormat::F32, where + ": tensor " + t->name + " is stored " + format_name(t->format) +
                                                  "; the vision tower reads it as f32 only");
    out.bytes += t->bytes;
  }
  // Names are unique (checked before): equal counts mean every spec is present.
  if (vision.size() != specs.size())
    for (const TensorSpec& s : specs) {
      bool found = false;
      for (const TensorInfo* t : vision) found |= t->name == s.name;
      require(found, where + ": tensor " + s.name + " is missing (the manifest holds " + std::to_string(vision.size()) +
                         " of the " + std::to_string(specs.size()) + " vision tensors; they come all or none)");
    }

  require(!preprocessor_config_json.empty(),
          where + ": field preprocessorConfigJson is empty, but the container holds a vision tower (images need the "
                  "release's preprocessor_config.json)");
  const PreprocessorConfig p = PreprocessorConfig::from_json(preprocessor_config_json, pre_where);
  require(p.patch_size == v.patch_size, pre_where + ": field 'patch_size' = " + std::to_string(p.patch_size) +
                                            " disagrees with vision_config's patch_size = " + std::to_string(v.patch_size));
  require(p.merge_kernel_size == v.merge_h && p.merge_kernel_size == v.merge_w,
          pre_where + ": field 'merge_kernel_size' = " + std::to_string(p.merge_kernel_size) +
              " disagrees with vision_config's merge_kernel_size [" + std::to_string(v.merge_h) + ", " +
              std::to_string(v.merge_w) + "]");
  require(v.text_hidden == text.hidden,
          where + ": vision_config.text_hidden_size " + std::to_string(v.text_hidden) +
              " differs from the text model's hidden size " + std::to_string(text.hidden) +
              " (the projector's rows replace text embeddings)");
  require(v.media_placeholder_token_id >= 0 && v.media_placeholder_token_id < text.vocab,
          where + ": config.json media_placeholder_token_id " + std::to_string(v.media_placeholder_token_id) +
              " is not an id of the vocabulary of " + std::to_string(text.vocab));
  out.has_vision = true;
  return out;
}

}  // namespace waste
