// The memory planner shared by iod (how many cache slots), compute (how many sessions and how
// much context) and `waste plan`. Everything is in bytes.
//
//   floor  = trunk resident bytes
//          + session state   sessions x per-session state at the configured context:
//                            MLA latent cache, f32 (the engine keeps it in f32): (kv_lora_rank
//                            + qk_rope) x 4 B per token per MLA layer; KDA recurrent state
//                            heads x K x V x 4 B per KDA layer plus the conv windows, 3 (q, k, v)
//                            x heads x K x (conv_kernel - 1) x 4 B per KDA layer. The K3 AttnRes
//                            block history lives for one step only and is counted in scratch.
//          + scratch         per session: logits (vocab x 4), one MLA layer's attention scores
//                            (heads x context x 4), 16 activation vectors of the widest
//                            projection x 4, the AttnRes history (layers/block + 2 vectors of
//                            hidden x 4); plus one prefill chunk's rows (prefill_row_bytes: the
//                            MoE step's buffers, kept at their largest, and the layers' own);
//                            plus per compute thread kThreadExpertRows rows of an expert's own
//                            buffers (the experts of a batch run side by side);
//                            plus process_base_bytes() for the processes themselves (code,
//                            libraries, tokenizer, thread stacks, allocator): compute's and
//                            iod's, and waste-serve's when the instance runs it (--http).
//          + experts in flight: one layer's top_k records (top_k x record stride).
//          + prompt cache    checkpoints of session states (compute/server/prompt_cache.h);
//                            default: two full-context session states (the turn a conversation
//                            is at and the one before it), at least kMinPromptCacheBytes.
//          + vision          K3 containers with a vision tower: its stored weights (loaded once
//                            an image is used, then kept) and the tower's activations for one
//                            image at the default budget of kDefaultVisionPatches patches
//                            (vision_activation_bytes); 0 without a tower.
//   working set (per token) = MoE layers x top_k x record stride.
//   default cache = the largest whole number of working sets, 3, 2 or 1, such that floor + cache
//          stays under 7/8 of usable RAM (the rest is for the OS page cache: an expert cache the
//          OS pages out is 8x slower than one that fits); else no cache beyond the floor.
// An explicit budget under the floor is refused with the breakdown (waste::Error).
#pragma once
#include <cstdint>
#include <optional>
#include <string>

#include "shared/image/image_budget.h"
#include "shared/model/config.h"
#include "shared/model/mla_cache.h"
#include "shared/platform/memory.h"
#include "shared/util/thread_pool.h"
#include "shared/util/option_limits.h"

namespace waste {
struct VisionConfig;
}

namespace waste::plan {

// Usable RAM, as the platform reports it (shared/platform/memory.h).
using platform::UsableMemory;

// The processes' own memory besides the buffers counted apart (code, libraries, tokenizer,
// thread stacks, allocator arenas), measured with tools/bench/footprint (docs/MEASUREMENTS.md,
// 2026-12-03/05): compute 13-19 MiB on synthetic models, ~20 with a real tokenizer; iod
// 10.2-11.8 MiB; waste-serve ~15.6 MiB. Each rounded up, plus a margin for allocator arenas
// that grow with load (the soak benchmark's compute grew 0.68% after warm-up over 10 minutes
// of 16 sessions, ~3 MiB; docs/MEASUREMENTS.md). waste-serve is counted only where the instance runs it (waste up
// --http): `waste bench`, `waste run` and a front end of the user's own do not start one, and
// counting it there put the plan 4% above the footprint for nothing. (The fixed part was 256
// MiB, then 96, then 64 for all three; each cut checked against the peak footprint.)
constexpr uint64_t kComputeBaseBytes = 20ull << 20;
constexpr uint64_t kIodBaseBytes = 12ull << 20;
constexpr uint64_t kHttpFrontEndBaseBytes = 16ull << 20;
constexpr uint64_t kArenaMarginBytes = 4ull << 20;
// The fixed part of scratch: compute, iod and the margin, and waste-serve when it runs.
constexpr uint64_t process_base_bytes(bool http_front_end) {
  return kComputeBaseBytes + kIodBaseBytes + kArenaMarginBytes + (http_front_end ? kHttpFrontEndBaseBytes : 0);
}
// Rows of one prefill forward: compute's default prefill chunk (EngineOptions::prefill_chunk).
constexpr uint64_t kPrefillChunkRows = 128;
// Bytes one prompt row of a prefill chunk holds at the peak (an upper bound, checked against the
// measured footprint on three shapes, docs/MEASUREMENTS.md): the RVQ lookup tables of the
// row's expert input (gate and up: expert_hidden / 8 groups x 3 stages x 256 bytes each) and its
// three copies, the down tables and expert activations of the experts it routes to, the
// experts' weighted outputs (top_k x expert_hidden), the MoE sums, the int8 copy of the widest
// product input (1.375 bytes a value) and four widest vectors of the attention layers' own.
uint64_t prefill_row_bytes(const ModelConfig& c);
// Of those, an expert's own buffers per row it is applied to (down tables, gate, up, h, out);
// each compute thread also keeps kThreadExpertRows rows of them (shared/rvq/kernels.h).
uint64_t expert_scratch_row_bytes(const ModelConfig& c);
constexpr int kMaxDefaultWorkingSets = 3;

struct SessionState {
  MlaCacheFormat mla_format = MlaCacheFormat::F32;
  uint64_t mla_bytes_per_token = 0;  // all MLA layers, in mla_format
  uint64_t kda_state_bytes = 0;      // all KDA layers: recurrent state
  uint64_t kda_conv_bytes = 0;       // all KDA layers: conv windows
  uint64_t bytes(uint64_t context) const { return mla_bytes_per_token * context + kda_state_bytes + kda_conv_bytes; }
};
// The MLA cache in `mla` (shared/model/mla_cache.h: bf16 where the trunk's kv_b_proj is quantized).
SessionState session_state(const ModelConfig& c, MlaCacheFormat mla);
constexpr uint64_t kMinPromptCacheBytes = 64ull << 20;
uint64_t default_prompt_cache_bytes(const ModelConfig& c, MlaCacheFormat mla, uint64_t context);
uint64_t scratch_bytes(const ModelConfig& c, uint64_t context, uint32_t sessions, bool http_front_end,
                       uint32_t threads);

// The per-image patch budget the vision encoder uses by default (256 image tokens).
constexpr uint64_t kDefaultVisionPatches = uint64_t(kDefaultImagePatches);  // shared/image/image_budget.h
// Bytes the vision tower and projector hold while encoding one image of `patches` patches
// (compute/model/vision_tower.cpp, mm_projector.cpp), all f32: the pixels [L, 3 p p]; the
// residual x, its norm y, the block output z and the interpolated position grid [L, D] each;
// qkv [L, 3 Q]; the attention output [L, Q]; the MLP [L, I]; one head's q, k and v^T
// [L, head_dim] each and the RoPE tables [L, head_dim]; the scores of one block of at most 256
// queries [min(L, 256), L] and their output; plus the int8 copy of the widest product's input
// the quantized kernels keep (L x widest x 1.375 bytes: values and per-32 scales and sums) and
// the image's rows for the prompt [L / merge, text_hidden]. The projector's own buffers
// ([L / merge, 4 D] twice) come after the tower's are freed and are smaller. Weights are not
// included (PlanRequest::vision_weight_bytes).
uint64_t vision_activation_bytes(const VisionConfig& v, uint64_t patches = kDefaultVisionPatches);
// What a vision tower in use holds besides its weights: one image's activations at the
// largest patch budget a request may ask for (waste-compute --image-patches) and the encoder's
// embedding cache (kImageEmbeddingCacheBytes). PlanRequest::vision_activation_bytes.
uint64_t vision_runtime_bytes(const VisionConfig& v, uint64_t patches = kDefaultVisionPatches);

struct PlanRequest {
  ModelConfig config;
  uint64_t trunk_bytes = 0;     // resident trunk (embedding excluded)
  std::string trunk_source;     // "manifest" or "as stored: <the storage rule's formats>" (a preset)
  MlaCacheFormat mla_cache = MlaCacheFormat::F32;  // mla_cache_format() of the trunk's kv_b_proj
  uint64_t record_stride = 0;   // bytes of one expert record (slot size)
  uint64_t context = uint64_t(limits::kDefaultContextTokens);  // compute's default --ctx
  uint32_t sessions = uint32_t(limits::kDefaultLiveSessions);  // session states in memory at once
  // compute's threads (its --threads; default: this machine's, ThreadPool::global_size): each
  // keeps kThreadExpertRows rows of an expert's buffers (the experts of a batch run side by side)
  uint32_t threads = ThreadPool::global_size();
  bool http_front_end = false;     // the instance runs waste-serve (waste up --http): its base counts
  std::optional<uint64_t> budget;  // total bytes; nullopt = auto
  std::optional<uint64_t> prompt_cache;  // bytes; nullopt = default_prompt_cache_bytes
  uint64_t vision_weight_bytes = 0;      // stored vision tower + projector (0: no tower)
  uint64_t vision_activation_bytes = 0;  // vision_activation_bytes() at the default budget
  std::string vision_source;             // "manifest" or an estimate's description
};

struct MemoryPlan {
  uint64_t trunk = 0, session_state = 0, scratch = 0, experts_in_flight = 0, prompt_cache = 0, floor = 0;
  // The floor without the prompt cache and the vision line: trunk + session state + scratch +
  // experts in flight, what an engine with neither (the original C engine's floor: resident
  // trunk, state, scratch, its minimum expert cache) holds, so the two compare line for line.
  uint64_t comparable_floor = 0;
  uint64_t vision = 0;  // vision_weights + vision_activations, part of the floor (0: no tower)
  uint64_t vision_weights = 0, vision_activations = 0;
  std::string vision_source;
  uint64_t record_stride = 0, working_set_records = 0, working_set_bytes = 0;
  uint64_t cache = 0, total = 0;
  uint64_t slots = 0;                 // expert slots in iod's segment (in flight + cache)
  double cache_working_sets = 0;      // cache / working set
  uint64_t budget_limit = 0;          // 7/8 of usable (auto) or the explicit budget
  bool auto_budget = true;
  bool fits = true;                   // total <= usable RAM
  UsableMemory memory;
  SessionState state_per_session;
  uint64_t context = 0;
  uint32_t sessions = 0;
  uint32_t threads = 0;  // compute's, as requested
  bool http_front_end = false;
  std::string trunk_source;
};

MemoryPlan make_plan(const PlanRequest& request, const UsableMemory& memory);

// "12G", "900M", "1.5GiB", "4096", "auto" is handled by the caller. K/M/G/T are binary (1024).
uint64_t parse_size(const std::string& text);
std::string format_bytes(uint64_t bytes);  // "2.53 GiB", "900.0 MiB" (JSON output carries exact bytes)

}  // namespace waste::plan
