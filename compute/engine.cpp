#include "compute/engine.h"

#include <algorithm>
#include <chrono>

#include "compute/model/container_weights.h"
#include "shared/stats/arithmetic.h"
#include "shared/stats/engine_stats.h"  // tokens_per_second
#include "shared/util/error.h"
#include "shared/util/progress.h"
#include "shared/util/thread_pool.h"

namespace waste {

namespace {

// Trunk takes a plain function pointer for progress; the one load in flight reports here.
thread_local Progress* g_trunk_progress = nullptr;
void trunk_progress(uint64_t done, uint64_t total) {
  if (g_trunk_progress) g_trunk_progress->set(done);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

}  // namespace

Engine::Engine(const EngineOptions& options) : options_(options), container_(Container::open(options.model)) {
  require(options_.prefill_chunk >= 1, "prefill chunk must be at least 1 token");
  require(options_.context >= 1, "context must be at least 1 token");
  const ModelConfig& c = container_.config();
  {
    // The embedding table stays on disk: one row is read per token.
    // The embedding table stays on disk (a row is read per token) and the vision tower loads on
    // the first image: neither is part of this load.
    uint64_t total = container_.trunk_bytes() - std::min(container_.trunk_bytes(), container_.vision_bytes());
    if (const TensorInfo* e = container_.find_tensor("model.embed_tokens.weight")) total -= std::min(total, e->bytes);
    Progress bar("loading trunk", total, "B", options_.progress);
    g_trunk_progress = &bar;
    try {
      trunk_ = std::make_unique<Trunk>(container_, std::vector<std::string>{"model.embed_tokens.weight"},
                                       options_.verify_checksums, &trunk_progress);
    } catch (...) {
      g_trunk_progress = nullptr;
      throw;
    }
    g_trunk_progress = nullptr;
    bar.finish();
  }
  weights_ = std::make_unique<TrunkWeights>(container_, *trunk_);
  if (options_.experts) {
    experts_ = options_.experts;
  } else {
    own_experts_ = std::make_unique<ContainerExperts>(container_, options_.in_process_cache_bytes);
    experts_ = own_experts_.get();
  }
  model_ = std::make_unique<Model>(Model::create(*weights_, *experts_, c));
  // top_k / 2: when decode is disk-bound every wrong guess is a read the token waits behind;
  // on the Kimi-Linear shape half of top_k beat both more (top_k, top_k + 2) and none.
  model_->set_lookahead(options_.lookahead < 0 ? std::max(1, c.top_k / 2) : options_.lookahead);
  model_->set_kda_chunk(options_.kda_chunk);
  if (!container_.tokenizer_path().empty()) {
    require(!container_.tokenizer_config_path().empty(),
            container_.dir() + ": has tokenizer.model but no tokenizer_config.json");
    tokenizer_.emplace(tok::Tokenizer::load(container_.tokenizer_path(), container_.tokenizer_config_path()));
    require(tokenizer_->vocab_size() <= uint32_t(c.vocab),
            container_.dir() + ": the tokenizer has " + std::to_string(tokenizer_->vocab_size()) +
                " ids, more than the model's vocabulary of " + std::to_string(c.vocab));
  }
  VisionOptions vo;
  vo.verify_checksums = options_.verify_checksums;
  vo.threads = ThreadPool::global().size();  // --threads / WASTE_THREADS size both pools
  vision_ = std::make_unique<VisionEncoder>(container_, vo);
  if (vision_->available() && tokenizer_) {
    // The renderer writes <|media_pad|> as markup: it must be the id the tower's rows replace.
    const std::vector<uint32_t> pad = tokenizer_->encode_markup(kMediaPadMarkup);
    require(pad.size() == 1 && int64_t(pad[0]) == vision_->placeholder_id(),
            container_.dir() + ": the tokenizer's <|media_pad|> is not config.json's media_placeholder_token_id " +
                std::to_string(vision_->placeholder_id()));
  }
  if (vision_->available()) vision_->patch_budget(options_.image_patches);  // refuses a bad default early
}

MediaPrompt Engine::with_images(std::span<const int32_t> ids, std::span<const std::vector<uint8_t>> images,
                                const std::string& field, int max_patches) {
  // Without a tower the placeholder is an ordinary id; with one it always stands for an image.
  if (!vision_->available()) {
    require(images.empty(), field + ": this model has no vision tower (convert it with --vision)");
    return expand_media(ids, int32_t(-1), {}, field);
  }
  std::vector<PreparedImage> prepared;
  std::vector<int64_t> counts;
  for (size_t i = 0; i < images.size(); ++i) {
    prepared.push_back(vision_->prepare(images[i], field + "[" + std::to_string(i) + "]",
                                        max_patches ? max_patches : options_.image_patches));
    counts.push_back(prepared.back().tokens());
  }
  MediaPrompt p = expand_media(ids, int32_t(vision_->placeholder_id()), counts, field);
  for (size_t i = 0; i < prepared.size(); ++i)
    p.images[i].rows = vision_->embed(prepared[i]);
  return p;
}

Engine::~Engine() = default;

uint64_t Engine::trunk_resident_bytes() const { return trunk_->resident_bytes(); }

const tok::Tokenizer& Engine::tokenizer() const {
  require(tokenizer_.has_value(), container_.dir() + ": the container has no tokenizer (give token ids instead)");
  return *tokenizer_;
}

Session Engine::new_session(int64_t context) const { return model_->new_session(context > 0 ? context : options_.context); }

std::vector<int32_t> Engine::encode(std::string_view text) const {
  const std::vector<uint32_t> ids = tokenizer().encode(text);
  return {ids.begin(), ids.end()};
}

std::vector<int32_t> Engine::encode_chat(const chat::ChatRequest& request) const {
  const std::vector<uint32_t> ids = chat::encode_prompt(tokenizer(), request);
  return {ids.begin(), ids.end()};
}

void Engine::prefill(Session& s, std::span<const int32_t> ids, float* logits, LogitRows rows,
                     std::span<const ImageRun> images) const {
  require(!ids.empty(), "prefill: no tokens");
  const size_t V = size_t(config().vocab), chunk = size_t(options_.prefill_chunk);
  std::vector<const float*> inputs;
  for (size_t at = 0; at < ids.size(); at += chunk) {
    const size_t n = std::min(chunk, ids.size() - at);
    const bool last = at + n == ids.size();
    image_inputs(images, int64_t(at), int64_t(n), config().hidden, inputs);
    if (rows == LogitRows::All)
      model_->forward(s, ids.subspan(at, n), inputs, logits + at * V, LogitRows::All);
    else if (last)
      model_->forward(s, ids.subspan(at, n), inputs, logits, LogitRows::Last);
    else
      model_->forward(s, ids.subspan(at, n), inputs, nullptr, LogitRows::None);  // no head for inner chunks
  }
}

void Engine::step_all(Session& s, std::span<const int32_t> ids, float* logits, std::span<const ImageRun> images) const {
  const size_t V = size_t(config().vocab);
  std::vector<const float*> inputs;
  for (size_t i = 0; i < ids.size(); ++i) {
    image_inputs(images, int64_t(i), 1, config().hidden, inputs);
    model_->forward(s, ids.subspan(i, 1), inputs, logits + i * V, LogitRows::Last);
  }
}

GenerateStats Engine::generate(Session& s, std::span<const int32_t> prompt, const SamplingParams& params,
                               const TokenCallback& on_token, std::span<const ImageRun> images) {
  require(!prompt.empty(), "generate: empty prompt");
  require(s.position() + int64_t(prompt.size()) < s.max_context(),
          "generate: the prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context of " +
              std::to_string(s.max_context()) + " (" + std::to_string(s.position()) + " used)");
  GenerateStats st;
  st.prompt_tokens = prompt.size();
  const ExpertSourceStats before = experts_->stats();
  std::vector<float> logits(size_t(config().vocab));
  auto t0 = std::chrono::steady_clock::now();
  prefill(s, prompt, logits.data(), LogitRows::Last, images);
  st.prefill_seconds = seconds_since(t0);

  t0 = std::chrono::steady_clock::now();
  Sampler sampler(params);
  StopMatcher stops(params.stop);
  std::optional<tok::DecodeStream> text;
  if (tokenizer_) text.emplace(*tokenizer_);
  std::vector<int32_t> history(prompt.begin(), prompt.end());
  st.stop_reason = "max_tokens";
  while (int64_t(st.tokens) < params.max_tokens) {
    const int32_t id = sampler.sample(logits, history);
    history.push_back(id);
    ++st.tokens;
    if (tokenizer_ && tokenizer_->is_stop(uint32_t(id))) {
      st.stop_reason = "stop_token";
      break;
    }
    std::string piece;
    if (text && uint32_t(id) < tokenizer_->vocab_size()) piece = text->push(uint32_t(id));
    const std::string shown = stops.push(piece);
    const bool go_on = on_token(id, shown);
    if (stops.stopped()) {
      st.stop_reason = "stop_string";
      break;
    }
    if (!go_on) {
      st.stop_reason = "callback";
      break;
    }
    if (int64_t(st.tokens) >= params.max_tokens) break;
    if (s.position() >= s.max_context()) {
      st.stop_reason = "context";
      break;
    }
    model_->forward(s, std::span<const int32_t>(&history.back(), 1), logits.data());
  }
  // Whatever text was held back (a partial character, a tail that did not become a stop).
  if (!stops.stopped()) {
    std::string rest = stops.push(text ? text->flush() : std::string());
    rest += stops.flush();
    if (!rest.empty()) on_token(-1, rest);
  }
  st.decode_seconds = seconds_since(t0);
  st.tok_per_s = stats::tokens_per_second(st.tokens, st.decode_seconds);
  st.experts = stats::minus(experts_->stats(), before);
  return st;
}

}  // namespace waste
