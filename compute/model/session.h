// Everything one sequence carries from token to token. MLA layers keep the absorbed latent
// cache (kv_lora_rank + qk_rope values per token, MODELS.md 2.3); KDA layers keep a fixed
// fp32 recurrent state per head and the short-conv windows. Nothing else survives a token
// (AttnRes block sums are per token and recomputed).
#pragma once
#include <cstdint>
#include <vector>

namespace waste {

struct MlaCache {
  int width = 0;             // kv_lora_rank + qk_rope: [c ; k^R] of one token
  std::vector<float> rows;   // [tokens so far, width], grows per token up to max_ctx
};

struct KdaState {
  std::vector<float> state;               // [heads, head_dim (k), head_dim (v)], zero at start
  std::vector<float> conv_q, conv_k, conv_v;  // [channels, kernel - 1]: last pre-conv inputs, oldest first
};

struct LayerState {
  MlaCache mla;  // used by MLA layers
  KdaState kda;  // used by KDA layers
};

class Session {
 public:
  int64_t position() const { return position_; }  // tokens consumed so far
  int64_t max_context() const { return max_ctx_; }

 private:
  friend class Model;
  int64_t position_ = 0;
  int64_t max_ctx_ = 0;
  std::vector<LayerState> layers_;
};

}  // namespace waste
