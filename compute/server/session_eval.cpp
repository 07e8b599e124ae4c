// EngineService::eval: the logits of ids on a fresh state, beside a session (on the worker).
#include "compute/server/engine_service.h"

#include <spdlog/spdlog.h>

#include "compute/server/engine_service_state.h"
#include "shared/stats/arithmetic.h"
#include "shared/util/error.h"

namespace waste::server {

void EngineService::eval(uint64_t session, std::vector<int32_t> ids, bool stepwise,
                         std::function<void(std::exception_ptr, std::vector<float>)> done, PromptImages images,
                         std::vector<float> pad_rows) {
  require(!ids.empty(), "eval: no tokens");
  require(images.runs.size() == images.images.size(), "eval: image runs and images differ in number");
  require(images.runs.empty() || pad_rows.empty(), "eval: give images or pad embeddings, not both");
  if (!pad_rows.empty()) {
    require(engine_->vision().available(), "eval: pad embeddings need a model with a vision tower");
    images.runs = placeholder_rows(ids, int32_t(engine_->vision().placeholder_id()), pad_rows, config_.hidden,
                                   "eval: padEmbeddings");
  }
  for (size_t i = 0; i < ids.size(); ++i)
    require(ids[i] >= 0 && ids[i] < config_.vocab, "eval: token " + std::to_string(i) + " = " + std::to_string(ids[i]) +
                                                       " is outside the vocabulary of " + std::to_string(config_.vocab));
  const uint64_t V = uint64_t(config_.vocab);
  const uint64_t bytes = uint64_t(ids.size()) * V * sizeof(float);
  require(bytes <= kMaxEvalLogitsBytes,
          "eval: " + std::to_string(ids.size()) + " tokens make " + std::to_string(bytes) + " bytes of logits (" +
              std::to_string(ids.size()) + " x " + std::to_string(V) + " f32), more than the limit of " +
              std::to_string(kMaxEvalLogitsBytes) + " bytes (64 MiB: at most " +
              std::to_string(kMaxEvalLogitsBytes / (V * sizeof(float))) + " tokens per call)");
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    require(int64_t(ids.size()) <= s->context, "eval: " + std::to_string(ids.size()) +
                                                   " tokens are more than the session's context of " +
                                                   std::to_string(s->context) + " tokens");
    control_.push_back([this, s, ids = std::move(ids), stepwise, done = std::move(done),
                        images = std::make_shared<PromptImages>(std::move(images))] {
      {
        std::lock_guard lk2(mu_);
        if (s->closed) {
          done(std::make_exception_ptr(Error("eval: session " + std::to_string(s->id) + " is closed")), {});
          return;
        }
      }
      std::vector<float> logits;
      std::exception_ptr failure;
      charge_traffic();  // what came before is the running jobs', not this eval's
      try {
        // A state of its own, as `waste eval`: the session's conversation is not touched.
        Session fresh = engine_->new_session(s->context);
        for (size_t i = 0; i < images->images.size(); ++i)
          images->runs[i].rows = engine_->vision().embed(images->images[i]);
        logits.resize(ids.size() * size_t(config_.vocab));
        if (stepwise)
          engine_->step_all(fresh, ids, logits.data(), images->runs);
        else
          engine_->prefill(fresh, ids, logits.data(), LogitRows::All, images->runs);
      } catch (const std::exception& e) {
        spdlog::warn("compute: session {}: eval: {}", s->id, e.what());
        failure = std::make_exception_ptr(with_context("eval: ", e));
        logits = {};
      }
      const ExpertSourceStats delta = take_expert_traffic();
      {
        std::lock_guard lk2(mu_);
        stats::add(s->counters.experts, delta);
      }
      done(failure, std::move(logits));
    });
  }
  wake_.notify_all();
}

}  // namespace waste::server
