// The compute engine as a library: one opened container (trunk resident, embedding on disk,
// tokenizer, model), sessions, chunked prefill and streaming generation. `waste eval/run/bench`
// and the tests drive it in-process; the routed experts come either from the container
// directly (ContainerExperts) or from a running iod (IodExperts, compute/experts/).
//
//   Engine e(EngineOptions{.model = "m.waste"});
//   Session s = e.new_session();
//   GenerateStats st = e.generate(s, e.encode("Hello"), params, [](int32_t, std::string_view t) {
//     fputs(std::string(t).c_str(), stdout); return true; });
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/model/model.h"
#include "compute/sampler.h"
#include "compute/vision/media_prompt.h"
#include "compute/vision/vision_encoder.h"
#include "shared/chat/render.h"
#include "shared/container/reader.h"
#include "shared/stats/generate_stats.h"
#include "shared/tokenizer/tokenizer.h"

namespace waste {

class TrunkWeights;

struct EngineOptions {
  std::string model;                  // container directory
  int64_t context = 4096;             // default session context (tokens)
  bool progress = true;               // progress bar while the trunk loads
  bool verify_checksums = true;       // trunk tensor checksums at load (beside the read: about free)
  int prefill_chunk = 128;            // tokens per forward during prefill (>= 1)
  int kda_chunk = 1;                  // KDA's chunked prefill form (kda.h); 1: the recurrence
  int image_patches = kDefaultImagePatches;  // patch budget per image (each image token costs a text token's prefill)
  int lookahead = -1;                 // experts prefetched per token for the next layer; -1: top_k / 2 (measured best, docs/MEASUREMENTS.md), 0: off
  // Routed experts: nullptr = read from the container in-process (a record cache of
  // in_process_cache_bytes); else this source (e.g. IodExperts), which must outlive the Engine.
  ExpertSource* experts = nullptr;
  uint64_t in_process_cache_bytes = 1ull << 30;
};

// What a generate call did: a request's statistics (one definition: shared/stats/generate_stats.h;
// in process there is no queue, tool-call parsing, prompt cache or image accounting, so those
// stay 0; experts: during this call) and how it ended.
struct GenerateStats : stats::GenerateStats {
  double seconds() const { return prefill_seconds + decode_seconds; }
  std::string stop_reason;                 // max_tokens, stop_token, stop_string, context, callback
};

// Gets each generated token and the text it completes (may be empty: a partial UTF-8
// character or a held-back possible stop string). Return false to stop.
using TokenCallback = std::function<bool(int32_t id, std::string_view text)>;

class Engine {
 public:
  explicit Engine(const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return options_; }
  const Container& container() const { return container_; }
  const ModelConfig& config() const { return container_.config(); }
  const Model& model() const { return *model_; }
  Model& model() { return *model_; }
  ExpertSource& experts() { return *experts_; }
  uint64_t trunk_resident_bytes() const;

  bool has_tokenizer() const { return tokenizer_.has_value(); }
  const tok::Tokenizer& tokenizer() const;  // throws when the container has none

  Session new_session(int64_t context = 0) const;  // 0: options().context

  // Plain text (never produces special tokens) and chat messages (template markup + the
  // generation prompt), as model ids.
  std::vector<int32_t> encode(std::string_view text) const;
  std::vector<int32_t> encode_chat(const chat::ChatRequest& request) const;

  // The vision tower of the container (available() false without one); its weights load on
  // the first image.
  VisionEncoder& vision() { return *vision_; }
  const VisionEncoder& vision() const { return *vision_; }
  // A prompt's ids with its images (encoded files, one per media placeholder in order) run
  // through the tower and expanded into their positions. `field` names the images in errors.
  MediaPrompt with_images(std::span<const int32_t> ids, std::span<const std::vector<uint8_t>> images,
                          const std::string& field, int max_patches = 0);

  // Feeds ids through the model in chunks of options().prefill_chunk. logits: [vocab] (Last) or
  // [ids.size(), vocab] (All). Positions covered by `images` take the tower's rows.
  void prefill(Session& s, std::span<const int32_t> ids, float* logits, LogitRows rows = LogitRows::Last,
               std::span<const ImageRun> images = {}) const;
  // One token at a time through the decode path; logits [ids.size(), vocab].
  void step_all(Session& s, std::span<const int32_t> ids, float* logits, std::span<const ImageRun> images = {}) const;

  // Prefills `prompt`, then samples up to params.max_tokens tokens, stopping at the
  // tokenizer's stop ids, a stop string, a full context or when `on_token` returns false.
  GenerateStats generate(Session& s, std::span<const int32_t> prompt, const SamplingParams& params,
                         const TokenCallback& on_token, std::span<const ImageRun> images = {});

 private:
  EngineOptions options_;
  Container container_;
  std::unique_ptr<Trunk> trunk_;
  std::unique_ptr<TrunkWeights> weights_;
  std::unique_ptr<ExpertSource> own_experts_;
  ExpertSource* experts_ = nullptr;
  std::unique_ptr<Model> model_;
  std::optional<tok::Tokenizer> tokenizer_;
  std::unique_ptr<VisionEncoder> vision_;
};

}  // namespace waste
