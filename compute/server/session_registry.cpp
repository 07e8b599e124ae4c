// EngineService's sessions: open and close, admission and queueing of generate requests,
// cancel and reset.
#include "compute/server/engine_service.h"

#include <thread>

#include "compute/server/engine_service_state.h"
#include "shared/util/error.h"

namespace waste::server {

std::shared_ptr<EngineService::SessionState> EngineService::find(uint64_t id) const {
  for (const auto& s : sessions_)
    if (s->id == id) return s;
  throw Error("session " + std::to_string(id) + " is closed");
}

uint64_t EngineService::open(int64_t context) {
  if (context <= 0) context = options_.context;
  require_request(context <= options_.max_context, "a session context of " + std::to_string(context) +
                                               " tokens is more than this compute allows (" +
                                               std::to_string(options_.max_context) + ", --max-ctx)");
  require_request(context >= 2, "a session context must be at least 2 tokens");
  std::lock_guard lk(mu_);
  require_kind(int(sessions_.size()) < options_.max_sessions, ErrorKind::Overloaded,
          "too many sessions: " + std::to_string(sessions_.size()) + " open, the limit is " +
              std::to_string(options_.max_sessions) + " (--max-sessions)");
  auto s = std::make_shared<SessionState>();
  s->id = next_session_++;
  s->context = context;
  sessions_.push_back(s);
  return s->id;
}

void EngineService::close(uint64_t session) {
  std::shared_ptr<SessionState> s;
  {
    std::lock_guard lk(mu_);
    auto it = std::find_if(sessions_.begin(), sessions_.end(), [&](const auto& x) { return x->id == session; });
    if (it == sessions_.end()) return;
    s = *it;
    sessions_.erase(it);
    s->closed = true;
    if (s->cancel) s->cancel->store(true);
    // The state is freed on the worker (it may be mid-step); a running request still holds it
    // until it notices the cancel.
    control_.push_back([s] { s->forget(); });
  }
  wake_.notify_all();
}

int64_t EngineService::position(uint64_t session) const {
  std::lock_guard lk(mu_);
  return find(session)->position;
}

void EngineService::generate(uint64_t session, std::vector<int32_t> prompt, const SamplingParams& params,
                             ReplyOptions reply, std::shared_ptr<std::atomic<bool>> cancel, GenerateCallbacks cb,
                             std::string cache_scope, PromptImages images) {
  require(!reply.chat || engine_->has_tokenizer(), "generate: a chat reply needs the model's tokenizer");
  require_request(reply.top_logprobs <= 20, "top_logprobs must be at most 20");
  require_request(!prompt.empty(), "generate: empty prompt");
  for (int32_t id : prompt)
    require_request(id >= 0 && id < config_.vocab, "generate: token id " + std::to_string(id) + " is outside the vocabulary of " +
                                               std::to_string(config_.vocab));
  require_request(params.max_tokens >= 0, "generate: max_tokens must not be negative");
  require(images.runs.size() == images.images.size(), "generate: image runs and images differ in number");
  for (const ImageRun& r : images.runs)
    require(r.at >= 0 && r.tokens > 0 && r.at + r.tokens <= int64_t(prompt.size()), "generate: an image run is outside the prompt");
  require_request(images.runs.empty() || engine_->vision().available(), "generate: this model has no vision tower");
  auto j = std::make_shared<Job>();
  // Everything that can refuse the request is built here, on the caller's thread, so a bad
  // request fails alone and before it queues, never on the worker.
  Sampler check(params);
  if (reply.chat || reply.constraint.kind != ConstraintSpec::Kind::None) {
    require(engine_->has_tokenizer(), "generate: a chat reply needs the model's tokenizer");
    const tok::Tokenizer& t = engine_->tokenizer();
    if (reply.chat) {
      reply::ParserOptions po;
      po.format = t.config().chat_format;
      po.thinking = reply.thinking;
      po.call_id_prefix = reply.call_id_prefix;
      j->parser.emplace(t, po);
    }
    if (reply.constraint.kind != ConstraintSpec::Kind::None)
      j->constraint.emplace(t, grammar_vocabulary(), reply.thinking, reply.constraint);
  }
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    check_admission_locked(*s);
    // Room for the prompt (and the unfed last token) plus at least one generated token.
    const int64_t need = s->position + int64_t(prompt.size());
    require_kind(need < s->context, ErrorKind::ContextLength, "the prompt of " + std::to_string(prompt.size()) + " tokens does not fit the context of " +
                                   std::to_string(s->context) + " tokens (" + std::to_string(s->position) +
                                   " already used)");
    j->s = s;
    j->params = params;
    j->reply = std::move(reply);
    j->cache_scope = std::move(cache_scope);
    j->cancel = cancel;
    j->cb = std::move(cb);
    j->history = prompt;
    j->out.prompt_tokens = prompt.size();
    j->submitted = Clock::now();
    j->feed = std::move(prompt);  // the worker puts the session's unfed id in front
    j->images = std::move(images.runs);
    j->to_embed = std::move(images.images);
    for (size_t i = 0; i < j->images.size(); ++i) {
      j->images[i].hash = j->to_embed[i].hash;
      j->out.image_tokens += j->images[i].tokens;
    }
    s->busy = true;
    s->cancel = cancel;
    ++queued_;
    if (j->to_embed.empty()) {
      incoming_.push_back(j);
    } else {
      if (!vision_thread_.joinable()) vision_thread_ = std::thread([this] { vision_main(); });
      vision_queue_.push_back(j);
    }
  }
  wake_.notify_all();
  vision_wake_.notify_all();
}

void EngineService::check_admission(uint64_t session) const {
  std::lock_guard lk(mu_);
  check_admission_locked(*find(session));
}

void EngineService::check_admission_locked(const SessionState& s) const {
  require_kind(!s.busy, ErrorKind::Overloaded, "session " + std::to_string(s.id) + " is already generating (one request at a time)");
  require_kind(queued_ < options_.max_queued, ErrorKind::Overloaded, "compute is busy: " + std::to_string(queued_) +
                                             " requests queued or running, the limit is " +
                                             std::to_string(options_.max_queued));
}

void EngineService::cancel(uint64_t session) {
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    if (s->cancel) s->cancel->store(true);
  }
  wake_.notify_all();  // a worker held by the step gate ends the request now
}

void EngineService::reset(uint64_t session, std::function<void(std::exception_ptr)> done) {
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    require_request(!s->busy, "reset: session " + std::to_string(session) + " is generating (cancel it first)");
    control_.push_back([this, s, done] {
      s->forget();
      {
        std::lock_guard lk2(mu_);
        s->position = 0;
      }
      done(nullptr);
    });
  }
  wake_.notify_all();
}

}  // namespace waste::server
