// The forward pass of the three families over shared layer code. A Model is immutable after
// create() (weights resolved once, by name, with shapes checked); all per-sequence state
// lives in a Session, so one Model can serve several sessions, also in one batched forward.
//
//   Model m = Model::create(weights, experts, config);
//   Session s = m.new_session(4096);
//   m.forward(s, prompt_ids, logits);           // prefill: logits of the last token
//   m.forward(s, {&next, 1}, logits);           // decode: one token
//   m.forward_batch(items);                     // several sessions in one pass (BatchItem)
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "compute/model/attn_res.h"
#include "compute/model/kda.h"
#include "compute/model/mla.h"
#include "compute/model/profile.h"
#include "shared/util/error.h"
#include "compute/model/moe.h"
#include "compute/model/rope.h"
#include "compute/model/session.h"
#include "compute/model/weights.h"
#include "shared/model/config.h"

namespace waste {

// None: no head at all (a prefill chunk whose logits nobody reads; logits may be null).
enum class LogitRows { Last, All, None };

// One session's part of a batched forward: its tokens (one to decode, a chunk to prefill),
// where its logits go, and which rows of them.
struct BatchItem {
  Session* session = nullptr;
  std::span<const int32_t> tokens;
  float* logits = nullptr;  // [vocab] (Last), [tokens.size(), vocab] (All), unused (None)
  LogitRows rows = LogitRows::Last;
  // Empty, or one entry per token: null takes the embedding table's row of the token, else
  // `hidden` floats that replace it (an image's positions get the vision tower's rows).
  std::span<const float* const> inputs;
};

class Model {
 public:
  // `weights` and `experts` must outlive the Model. Throws Error naming any missing tensor or
  // a tensor whose shape does not match the config.
  static Model create(const WeightSource& weights, ExpertSource& experts, const ModelConfig& config);

  const ModelConfig& config() const { return config_; }

  // A fresh sequence able to hold max_ctx tokens (the MLA cache grows up to that).
  Session new_session(int64_t max_ctx) const;
  // A session of max_ctx tokens holding `layers` at `position` (a saved state read back).
  // Throws Error naming the layer whose state does not have this model's shape.
  Session restore_session(int64_t max_ctx, int64_t position, std::vector<LayerState> layers) const;

  // Consumes `tokens` at the session's position: many tokens = prefill, one = decode.
  // logits gets [vocab] (Last) or [tokens.size(), vocab] (All). If layer_hidden is given it
  // receives [layers, tokens.size(), hidden]: the residual stream after each layer (K3: the
  // layer's running block sum), for finding which layer disagrees with a reference.
  void forward(Session& s, std::span<const int32_t> tokens, float* logits, LogitRows rows = LogitRows::Last,
               std::vector<float>* layer_hidden = nullptr) const;
  // The same with input rows replacing the table's where `inputs` (one per token) is not null.
  void forward(Session& s, std::span<const int32_t> tokens, std::span<const float* const> inputs, float* logits,
               LogitRows rows = LogitRows::Last) const;

  // Several sessions in one pass: the rows of all items form one residual stream [sum n, D].
  // Per layer, each session's attention runs on its own rows and state; the feed-forward block
  // runs on all rows at once (router per row, the union of the batch's experts fetched once,
  // each expert applied to all rows routed to it); the trunk matrices outside attention and the
  // output head are one matmul over all rows. Every item's logits are bit-identical to
  // forward() of that item alone (every kernel computes a row the same way whatever rows share
  // its call; the per-row expert sum runs in ascending expert id). Sessions must be distinct.
  // Everything is checked before any state changes; an error from the expert source mid-pass
  // leaves every session of the batch in an undefined state (start them afresh).
  // An expert whose record cannot be had (ExpertUnavailable) fails only the items with a row
  // routed to it: the result has one entry per item, empty for an exact one, else the reason
  // (that item's session is then in an undefined state; the others are exact).
  std::vector<std::string> forward_batch(std::span<const BatchItem> items) const;

  // Lookahead: after layer L's attention, layer L+1's router runs on the current hidden state
  // and its top `n` experts per token are sent to ExpertSource::prefetch (0: off). A hint
  // only; the real router still decides.
  void set_lookahead(int n) { lookahead_ = n; }
  // How sessions store the MLA cache: bf16 where the trunk's kv_b_proj is quantized, else f32.
  MlaCacheFormat mla_cache_format() const { return mla_cache_; }
  // Tests: the f32 cache on a quantized trunk, to measure what bf16 costs. Sessions made before
  // keep theirs.
  void set_mla_cache_format(MlaCacheFormat f) { mla_cache_ = f; }
  int lookahead() const { return lookahead_; }

  // How good the lookahead's guesses were: per MoE layer visit, the experts the batch really
  // routed to (needed), those the lookahead had named for it beforehand (hit), and how many it
  // named (predicted). recall = hit / needed, precision = hit / predicted.
  struct LookaheadStats {
    uint64_t visits = 0, predicted = 0, needed = 0, hit = 0;
    double recall() const { return needed ? double(hit) / double(needed) : 0.0; }
    double precision() const { return predicted ? double(hit) / double(predicted) : 0.0; }
    // The counts added since `before` (an earlier reading of the same Model).
    LookaheadStats since(const LookaheadStats& before) const {
      return {visits - before.visits, predicted - before.predicted, needed - before.needed, hit - before.hit};
    }
  };
  LookaheadStats lookahead_stats() const;
  // Tokens per chunk of KDA's chunked prefill form (kda.h); 1 (the default): the recurrence,
  // bit-identical to token-by-token decode whatever the prefill chunk size.
  // Throws Error outside [1, kMaxKdaChunk]: a value that is not run is refused, not clamped.
  void set_kda_chunk(int tokens) {
    require(tokens >= 1 && tokens <= kMaxKdaChunk,
            "KDA chunk " + std::to_string(tokens) + " is outside 1.." + std::to_string(kMaxKdaChunk));
    kda_chunk_ = tokens;
  }
  int kda_chunk() const { return kda_chunk_; }
  // Adds each forward's phase times to *p (nullptr: off).
  void set_profile(PhaseTimes* p) { profile_ = p; }

 private:
  struct Layer {
    bool is_mla = true;
    std::span<const float> input_norm, post_norm;
    AttnResWeights attn_res, mlp_res;  // K3 only
    MlaWeights mla;
    KdaWeights kda;
    bool is_moe = false;
    MlpWeights dense;
    MoeWeights moe;
  };

  Model(const WeightSource& w, ExpertSource& e, const ModelConfig& c) : weights_(&w), experts_(&e), config_(c), rope_(c) {}

  // A session's rows [row0, row0 + n) of a batched residual stream.
  struct SessionRows {
    Session* s = nullptr;
    int64_t row0 = 0, n = 0;
  };

  // The batch's rows whose expert could not be had go into *faults (nullptr: the first throws).
  void forward_rows(std::span<const BatchItem> items, std::vector<float>* layer_hidden,
                    std::vector<RowFault>* faults) const;

  // The token mixer of layer L on the normalised rows x [n, D] of every part, y [n, D]: the
  // projections are one matmul over all rows (each attention weight read once per step), the
  // attention proper runs per session on its own rows, state and cache.
  void attention_rows(int L, std::span<const SessionRows> parts, const float* x, float* y) const;
  void mla_rows(int L, std::span<const SessionRows> parts, const float* x, float* y) const;
  void kda_rows(int L, std::span<const SessionRows> parts, const float* x, float* y) const;
  // The feed-forward block of layer L on n normalised rows [n, D].
  void feed_forward(int L, const float* x, int64_t n, float* y) const;
  // Lookahead hint for layer L+1 from hidden rows h [n, D] (no-op when off or not MoE).
  void prefetch_next(int L, const float* h, int64_t n) const;

  // DeepSeek-V3 / K2 and Kimi-Linear: one pre-norm residual stream (residual_decoder.cpp).
  // h: [n, D] over all parts' rows.
  void run_residual_decoder(std::span<const SessionRows> parts, float* h, int64_t n,
                            std::vector<float>* layer_hidden) const;
  // K3: block attention residuals (kimi_k3.cpp). h: embeddings in, pre-norm output out. The
  // block sums are per row, so rows of different sessions never mix.
  void run_k3_decoder(std::span<const SessionRows> parts, float* h, int64_t n, std::vector<float>* layer_hidden) const;

  const WeightSource* weights_;
  ExpertSource* experts_;
  ModelConfig config_;
  Rope rope_;
  float softmax_scale_ = 1.0f;
  std::vector<Layer> layers_;
  std::span<const float> final_norm_;
  AttnResWeights output_res_;  // K3
  MatrixView lm_head_;
  int lookahead_ = 0;
  MlaCacheFormat mla_cache_ = MlaCacheFormat::F32;  // the sessions' MLA cache (shared/model/mla_cache.h)
  // Where feed_forward reports faulted rows during the forward in progress (one forward at a
  // time uses a Model); nullptr: a lost expert throws.
  mutable std::vector<RowFault>* faults_ = nullptr;
  // The lookahead's last guess per layer and the running tally (one forward at a time uses a
  // Model; the mutex keeps a stats() reader from another thread safe). Boxed: Model moves.
  struct LookaheadRecord {
    std::mutex mu;
    std::vector<std::vector<int>> guess;  // per layer, ascending ids; empty: no guess pending
    LookaheadStats stats;
  };
  std::unique_ptr<LookaheadRecord> lookahead_record_ = std::make_unique<LookaheadRecord>();
  void score_lookahead(int L, const std::vector<int>& routed) const;
  int kda_chunk_ = 1;
  PhaseTimes* profile_ = nullptr;
};

}  // namespace waste
