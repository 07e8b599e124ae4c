// Everything one sequence carries from token to token. MLA layers keep the absorbed latent
// cache (kv_lora_rank + qk_rope values per token, MODELS.md 2.3); KDA layers keep a fixed
// fp32 recurrent state per head and the short-conv windows. Nothing else survives a token:
// K3's block attention-residual sums run over the layers of one token (MODELS.md, AttnRes) and
// are rebuilt for every token, so they are not state.
//
// A Session is a value: copying it is a checkpoint, and a copy continues bit-identically to the
// original (the forward pass reads nothing else). session_file.h writes and reads one.
#pragma once
#include <cstdint>
#include <vector>

#include "shared/model/mla_cache.h"

namespace waste {

// The rows are f32 or bf16 as the model says (shared/model/mla_cache.h); the other vector stays
// empty.
struct MlaCache {
  int width = 0;                   // kv_lora_rank + qk_rope: [c ; k^R] of one token
  MlaCacheFormat format = MlaCacheFormat::F32;
  std::vector<float> rows;         // f32: [tokens so far, width], grows per token up to max_ctx
  std::vector<uint16_t> rows_bf16; // bf16: the same rows, each value rounded to nearest even
  // Values held (width x tokens so far).
  size_t values() const { return format == MlaCacheFormat::BF16 ? rows_bf16.size() : rows.size(); }
  uint64_t bytes() const { return uint64_t(rows.size()) * sizeof(float) + uint64_t(rows_bf16.size()) * sizeof(uint16_t); }
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

  // Bytes of state held (MLA rows in use, KDA states and windows): what a checkpoint costs.
  uint64_t state_bytes() const {
    uint64_t bytes = 0;
    for (const LayerState& l : layers_)
      bytes += l.mla.bytes() +
               (l.kda.state.size() + l.kda.conv_q.size() + l.kda.conv_k.size() + l.kda.conv_v.size()) * sizeof(float);
    return bytes;
  }

  // The same state in a session that may grow to max_ctx tokens (>= position(); the caller
  // checks). How a checkpoint becomes a live session of another request's context.
  Session with_context(int64_t max_ctx) const {
    Session s = *this;
    s.max_ctx_ = max_ctx;
    return s;
  }

  // Per layer, in layer order; for the session file (compute/model/session_file.cpp), which
  // checks every size against a fresh session of the same model before it assigns any.
  const std::vector<LayerState>& layers() const { return layers_; }

 private:
  friend class Model;
  int64_t position_ = 0;
  int64_t max_ctx_ = 0;
  std::vector<LayerState> layers_;
};

}  // namespace waste
