// The Kimi K3 vision tower and projector's shape (MoonViT + patch-merger MLP), read from the
// release's config.json: its `vision_config` object and the top-level media placeholder id.
// The tower is a pre-norm ViT with 2D RoPE over a learned position grid; the projector merges
// 2x2 patches and maps them to the text hidden size (see compute/model/vision_tower.h).
#pragma once
#include <cstdint>
#include <string>

namespace waste {

// Bounds on the patch size and the merge kernel, which the tower's config and the
// preprocessor's both name: a corrupt file must not ask for absurd grids (the release has 14
// and 2).
inline constexpr int64_t kMaxVisionPatch = 64;
inline constexpr int64_t kMaxVisionMerge = 8;

struct VisionConfig {
  int hidden = 0;             // vt_hidden_size (D)
  int heads = 0;              // vt_num_attention_heads
  int qkv_hidden = 0;         // qkv_hidden_size (heads x head_dim; != hidden in the release)
  int head_dim = 0;           // qkv_hidden / heads
  int intermediate = 0;       // vt_intermediate_size (MLP width)
  int n_layers = 0;           // vt_num_hidden_layers
  int pos_emb_height = 0;     // init_pos_emb_height (H0 of the learned [H0, W0, D] grid)
  int pos_emb_width = 0;      // init_pos_emb_width (W0)
  int patch_size = 0;         // patch_size (14): a patch is [3, patch, patch]
  int text_hidden = 0;        // text_hidden_size: the projector's output width
  int merge_h = 2, merge_w = 2;  // merge_kernel_size
  float tower_eps = 1.1920928955078125e-07f;  // finfo(float32).eps: every tower RMSNorm
  float projector_eps = 1e-5f;                // projector_ln_eps: mm_projector.post_norm
  int64_t media_placeholder_token_id = -1;    // top level; -1 when the config has none

  int patch_values() const { return 3 * patch_size * patch_size; }  // 588
  int merged_width() const { return merge_h * merge_w * hidden; }   // projector input (4D)

  // Parses the top-level config.json text; `source` names it in errors, which name the field
  // that is missing, mistyped or out of range.
  static VisionConfig from_json(const std::string& json_text, const std::string& source);
  static VisionConfig load(const std::string& config_json_path);
};

}  // namespace waste
