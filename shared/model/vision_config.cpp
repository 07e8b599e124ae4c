#include "shared/model/vision_config.h"

#include <nlohmann/json.hpp>

#include "shared/model/config_json.h"
#include "shared/util/error.h"
#include "shared/util/file.h"

namespace waste {

using nlohmann::json;

namespace {

// Bounds on every size, so that a corrupt config cannot ask for absurd allocations. The
// release is 1024 hidden, 12 heads, 1536 qkv, 4096 MLP, 27 layers, a 64 x 64 grid.
constexpr int64_t kMaxWidth = 1 << 16;
constexpr int64_t kMaxHeads = 1024;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxGrid = 4096;

struct VisionFields {
  const json& j;
  std::string where;

  bool has(const char* key) const { return j.contains(key) && !j.at(key).is_null(); }

  int64_t integer(const char* key) const {
    if (!has(key)) throw Error(where + ": missing field '" + key + "'");
    const json& v = j.at(key);
    if (!v.is_number_integer()) throw Error(where + ": field '" + key + "' must be an integer");
    return v.get<int64_t>();
  }
  int dim(const char* key, int64_t lo, int64_t hi) const {
    const int64_t v = integer(key);
    if (v < lo || v > hi)
      throw Error(where + ": field '" + key + "' = " + std::to_string(v) + " is outside [" + std::to_string(lo) + ", " +
                  std::to_string(hi) + "]");
    return int(v);
  }
};

}  // namespace

VisionConfig VisionConfig::from_json(const std::string& json_text, const std::string& source) {
  const json root = parse_config_object(json_text, source);
  if (!root.contains("vision_config") || !root["vision_config"].is_object())
    throw Error(source + ": missing field 'vision_config'");

  VisionConfig c;
  const VisionFields top{root, source};
  if (top.has("media_placeholder_token_id"))
    c.media_placeholder_token_id = top.dim("media_placeholder_token_id", 0, (int64_t(1) << 31) - 1);

  const VisionFields r{root["vision_config"], source + " (vision_config)"};
  c.hidden = r.dim("vt_hidden_size", 1, kMaxWidth);
  c.heads = r.dim("vt_num_attention_heads", 1, kMaxHeads);
  c.qkv_hidden = r.dim("qkv_hidden_size", 1, kMaxWidth);
  if (c.qkv_hidden % c.heads != 0)
    throw Error(r.where + ": field 'qkv_hidden_size' = " + std::to_string(c.qkv_hidden) +
                " is not a multiple of vt_num_attention_heads = " + std::to_string(c.heads));
  c.head_dim = c.qkv_hidden / c.heads;
  // 2D RoPE rotates head_dim/4 frequencies on each axis: head_dim must split into 4 equal parts.
  if (c.head_dim % 4 != 0)
    throw Error(r.where + ": field 'qkv_hidden_size' gives head_dim " + std::to_string(c.head_dim) +
                ", which 2D RoPE needs to be a multiple of 4");
  c.intermediate = r.dim("vt_intermediate_size", 1, 4 * kMaxWidth);
  c.n_layers = r.dim("vt_num_hidden_layers", 1, kMaxLayers);
  c.pos_emb_height = r.dim("init_pos_emb_height", 1, kMaxGrid);
  c.pos_emb_width = r.dim("init_pos_emb_width", 1, kMaxGrid);
  c.patch_size = r.dim("patch_size", 1, kMaxVisionPatch);
  c.text_hidden = r.dim("text_hidden_size", 1, kMaxWidth);
  if (r.has("merge_kernel_size")) {
    const json& m = r.j.at("merge_kernel_size");
    if (!m.is_array() || m.size() != 2 || !m[0].is_number_integer() || !m[1].is_number_integer())
      throw Error(r.where + ": field 'merge_kernel_size' must be a list of two integers");
    const int64_t mh = m[0].get<int64_t>(), mw = m[1].get<int64_t>();
    if (mh < 1 || mh > kMaxVisionMerge || mw < 1 || mw > kMaxVisionMerge)
      throw Error(r.where + ": field 'merge_kernel_size' is outside [1, " + std::to_string(kMaxVisionMerge) + "]");
    c.merge_h = int(mh);
    c.merge_w = int(mw);
  }
  if (int64_t(c.merge_h) * c.merge_w * c.hidden > 16 * kMaxWidth)
    throw Error(r.where + ": merged width merge_kernel_size x vt_hidden_size is too large");
  if (r.has("projector_ln_eps")) {
    const json& e = r.j.at("projector_ln_eps");
    if (!e.is_number()) throw Error(r.where + ": field 'projector_ln_eps' must be a number");
    const double v = e.get<double>();
    if (!(v > 0 && v < 1)) throw Error(r.where + ": field 'projector_ln_eps' = " + std::to_string(v) + " is outside (0, 1)");
    c.projector_eps = float(v);
  }
  return c;
}

VisionConfig VisionConfig::load(const std::string& config_json_path) {
  return from_json(read_file_text(config_json_path, 16 << 20), config_json_path);
}

}  // namespace waste
