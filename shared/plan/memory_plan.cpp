#include "shared/plan/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "shared/model/vision_config.h"
#include "shared/rvq/kernels.h"
#include "shared/util/error.h"
#include "shared/util/option_limits.h"
#include "shared/util/thread_pool.h"

namespace waste::plan {

SessionState session_state(const ModelConfig& c, MlaCacheFormat mla) {
  SessionState s;
  s.mla_format = mla;
  for (int l = 0; l < c.n_layers; ++l) {
    bool kda = l < int(c.is_kda.size()) && c.is_kda[size_t(l)];
    if (kda) {
      uint64_t p = uint64_t(c.kda_heads) * uint64_t(c.kda_head_dim);
      s.kda_state_bytes += p * uint64_t(c.kda_head_dim) * 4;  // heads x K x V, K == V
      s.kda_conv_bytes += 3 * p * uint64_t(std::max(c.conv_kernel - 1, 0)) * 4;
    } else {
      s.mla_bytes_per_token += uint64_t(c.kv_lora_rank + c.qk_rope) * mla_cache_value_bytes(mla);
    }
  }
  return s;
}

uint64_t default_prompt_cache_bytes(const ModelConfig& c, MlaCacheFormat mla, uint64_t context) {
  return std::max(kMinPromptCacheBytes, 2 * session_state(c, mla).bytes(context));
}

namespace {

uint64_t widest_projection(const ModelConfig& c) {
  return std::max<uint64_t>({uint64_t(c.hidden), uint64_t(c.kda_heads) * uint64_t(c.kda_head_dim),
                             uint64_t(c.n_heads) * uint64_t(c.kv_lora_rank + c.qk_rope),
                             uint64_t(c.dense_intermediate), uint64_t(c.top_k) * uint64_t(c.moe_intermediate)});
}

// Floats one row holds in the attention layer of each kind at its peak (the MLA step's
// buffers in compute/model/mla.cpp, the KDA step's in kda.cpp), the larger of the two.
uint64_t attention_row_floats(const ModelConfig& c) {
  const uint64_t H = uint64_t(c.n_heads), r = uint64_t(c.kv_lora_rank), width = r + uint64_t(c.qk_rope);
  const uint64_t qk = uint64_t(c.qk_nope + c.qk_rope), dv = uint64_t(c.v_head);
  // q, the kv_a row, the gate (K3), the absorbed queries, the latent sums, the attention
  // output, one head's latent and output, and the q_a row.
  const uint64_t mla = H * qk + width + (c.mla_output_gate ? H * dv : 0) + H * width + H * r + H * dv + r + dv +
                       uint64_t(c.q_lora_rank);
  // q, k, v, f, g and the output (heads x K each), beta, and the f_a / g_a low-rank rows
  // (at most K each).
  const uint64_t P = uint64_t(c.kda_heads) * uint64_t(c.kda_head_dim);
  const uint64_t kda = 6 * P + uint64_t(c.kda_heads) + 2 * uint64_t(c.kda_head_dim);
  return std::max(mla, kda);
}

}  // namespace

uint64_t prefill_row_bytes(const ModelConfig& c) {
  const uint64_t z = uint64_t(c.expert_hidden()), k = uint64_t(c.top_k);
  const uint64_t widest = widest_projection(c);
  const uint64_t tables = 2 * (z / 8) * 3 * 256 + 3 * z * 4;  // gate + up tables, x copies
  const uint64_t contrib = k * z * 4;                         // weighted outputs per routed expert
  const uint64_t sums = 3 * z * 4;                            // in, out, acc
  const uint64_t int8 = widest * 11 / 8;
  // The attention layer's own buffers, and the residual stream, its norm and the layer's
  // output (hidden each). (Was four widest vectors: 295 KB a row on Kimi-Linear where the MLA
  // step holds 185.)
  const uint64_t layers = (attention_row_floats(c) + 3 * uint64_t(c.hidden)) * 4;
  return tables + expert_scratch_row_bytes(c) + contrib + sums + int8 + layers;
}

uint64_t expert_scratch_row_bytes(const ModelConfig& c) {
  const uint64_t z = uint64_t(c.expert_hidden()), i = uint64_t(c.moe_intermediate);
  const uint64_t down = (i / 8) * 3 * 256 + i * 4;  // down tables of the row's input
  const uint64_t experts = (3 * i + z) * 4;         // gate, up, h; out
  return down + experts;
}

uint64_t scratch_bytes(const ModelConfig& c, uint64_t context, uint32_t sessions, bool http_front_end,
                       uint32_t threads) {
  const uint64_t widest = widest_projection(c);
  uint64_t per_session = uint64_t(c.vocab) * 4 + uint64_t(c.n_heads) * context * 4 + 16 * widest * 4;
  if (c.attn_res_block > 0) per_session += uint64_t(c.n_layers / c.attn_res_block + 2) * uint64_t(c.hidden) * 4;
  // Each compute thread's own expert buffers for experts it applies alone (kThreadExpertRows).
  const uint64_t per_thread = uint64_t(kThreadExpertRows) * expert_scratch_row_bytes(c);
  return process_base_bytes(http_front_end) + kPrefillChunkRows * prefill_row_bytes(c) + per_thread * threads +
         per_session * sessions;
}

uint64_t vision_activation_bytes(const VisionConfig& v, uint64_t patches) {
  const uint64_t L = patches, D = uint64_t(v.hidden), Q = uint64_t(v.qkv_hidden), I = uint64_t(v.intermediate);
  const uint64_t hd = uint64_t(v.head_dim), QB = std::min<uint64_t>(L, 256);
  const uint64_t merge = uint64_t(std::max(1, v.merge_h * v.merge_w));
  const uint64_t floats = L * uint64_t(v.patch_values())  // pixels
                          + 4 * L * D                      // x, y, z, position grid
                          + L * 3 * Q + L * Q + L * I      // qkv, attention output, MLP
                          + 4 * L * hd                     // q, k, v^T of one head; RoPE cos + sin
                          + QB * L + QB * hd               // one query block's scores and output
                          + L / merge * uint64_t(v.text_hidden);  // the image's rows
  // The int8 activations of the largest product input the quantized kernels see (a buffer of
  // the calling thread, kept at its largest; matvec_int8.h): one byte per value plus an f32
  // group scale, unit scale and unit sum per 32 values. The tower's products read L rows of
  // at most the widest of 3 p p, D, Q and I; the projector's L / 4 rows of 4 D are no more.
  const uint64_t widest = std::max<uint64_t>({uint64_t(v.patch_values()), D, Q, I});
  return floats * 4 + L * widest * 11 / 8;
}

uint64_t vision_runtime_bytes(const VisionConfig& v, uint64_t patches) {
  return vision_activation_bytes(v, patches) + kImageEmbeddingCacheBytes;
}

namespace {

std::string breakdown(const MemoryPlan& p) {
  return "trunk " + format_bytes(p.trunk) + " + session state " + format_bytes(p.session_state) + " + scratch " +
         format_bytes(p.scratch) + " + experts in flight " + format_bytes(p.experts_in_flight) + " + prompt cache " +
         format_bytes(p.prompt_cache) + (p.vision > 0 ? " + vision " + format_bytes(p.vision) : std::string()) +
         " = floor " + format_bytes(p.floor);
}

}  // namespace

MemoryPlan make_plan(const PlanRequest& r, const UsableMemory& memory) {
  const ModelConfig& c = r.config;
  require(r.record_stride > 0, "plan: record stride is 0");
  require(c.top_k > 0 && c.n_moe_layers() > 0, "plan: the model has no routed experts");
  // The ranges waste up and waste-compute accept (option_limits.h): a plan for a context or a
  // session count no instance would start with describes nothing.
  require(r.sessions >= 1 && r.sessions <= uint64_t(limits::kMaxSessions),
          "plan: sessions must be 1.." + std::to_string(limits::kMaxSessions));
  require(r.context >= 1 && r.context <= uint64_t(limits::kMaxContextTokens),
          "plan: context must be 1.." + std::to_string(limits::kMaxContextTokens) + " tokens (--ctx)");
  MemoryPlan p;
  p.memory = memory;
  p.context = r.context;
  p.sessions = r.sessions;
  p.threads = r.threads;
  p.trunk_source = r.trunk_source;
  p.state_per_session = session_state(c, r.mla_cache);
  p.trunk = r.trunk_bytes;
  p.session_state = p.state_per_session.bytes(r.context) * r.sessions;
  require(r.threads >= 1 && r.threads <= uint32_t(limits::kMaxThreads),
          "memory plan: compute threads must be in 1.." + std::to_string(limits::kMaxThreads) + ", not " +
              std::to_string(r.threads));
  p.scratch = scratch_bytes(c, r.context, r.sessions, r.http_front_end, r.threads);
  p.http_front_end = r.http_front_end;
  p.record_stride = r.record_stride;
  p.experts_in_flight = uint64_t(c.top_k) * r.record_stride;
  p.prompt_cache = r.prompt_cache ? *r.prompt_cache : default_prompt_cache_bytes(c, r.mla_cache, r.context);
  p.vision_weights = r.vision_weight_bytes;
  p.vision_activations = r.vision_activation_bytes;
  p.vision = p.vision_weights + p.vision_activations;
  p.vision_source = r.vision_source;
  p.comparable_floor = p.trunk + p.session_state + p.scratch + p.experts_in_flight;
  p.floor = p.comparable_floor + p.prompt_cache + p.vision;
  p.working_set_records = uint64_t(c.n_moe_layers()) * uint64_t(c.top_k);
  p.working_set_bytes = p.working_set_records * r.record_stride;

  if (r.budget) {
    p.auto_budget = false;
    p.budget_limit = *r.budget;
    if (*r.budget < p.floor)
      throw Error("plan: budget " + format_bytes(*r.budget) + " is under the floor: " + breakdown(p) +
                  " (context " + std::to_string(r.context) + ", sessions " + std::to_string(r.sessions) + ")");
    // Whole slots only.
    p.cache = (*r.budget - p.floor) / r.record_stride * r.record_stride;
  } else {
    p.budget_limit = memory.usable / 8 * 7;
    for (int n = kMaxDefaultWorkingSets; n >= 1; --n) {
      uint64_t cache = uint64_t(n) * p.working_set_bytes;
      if (p.floor + cache <= p.budget_limit) {
        p.cache = cache;
        break;
      }
    }
  }
  p.total = p.floor + p.cache;
  p.slots = uint64_t(c.top_k) + p.cache / r.record_stride;
  p.cache_working_sets = double(p.cache) / double(p.working_set_bytes);
  p.fits = p.total <= memory.usable;
  return p;
}

uint64_t parse_size(const std::string& text) {
  std::string s = text;
  while (!s.empty() && (s.back() == ' ')) s.pop_back();
  require(!s.empty(), "size: empty");
  size_t i = 0;
  while (i < s.size() && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.')) ++i;
  require(i > 0, "size '" + text + "': expected a number with an optional K, M, G or T suffix");
  double v = 0;
  try {
    v = std::stod(s.substr(0, i));
  } catch (...) {
    throw Error("size '" + text + "': not a number");
  }
  std::string unit = s.substr(i);
  for (char& ch : unit) ch = char(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();   // "GB", "GiB" -> "G", "Gi"
  if (unit.size() == 2 && unit[1] == 'I') unit.pop_back();      // "Gi" -> "G"
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K") mult = 1024.0;
  else if (unit == "M") mult = 1024.0 * 1024;
  else if (unit == "G") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T") mult = 1024.0 * 1024 * 1024 * 1024;
  else throw Error("size '" + text + "': unknown unit '" + s.substr(i) + "' (use K, M, G or T)");
  double bytes = v * mult;
  require(std::isfinite(bytes) && bytes >= 0 && bytes < 9.2e18, "size '" + text + "': out of range");
  return uint64_t(std::llround(bytes));
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  double gib = double(bytes) / double(1ull << 30);
  if (bytes >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", gib);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / double(1ull << 20));
  return buf;
}

}  // namespace waste::plan
