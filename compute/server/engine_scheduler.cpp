// EngineService's scheduler (on the worker): one batched forward step over the running jobs,
// what each job feeds and samples, and how a job ends.
#include "compute/server/engine_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "compute/server/engine_service_state.h"
#include "shared/stats/arithmetic.h"
#include "shared/util/error.h"

namespace waste::server {

namespace {

// log softmax at temperature 1 of the model's logits: the generated id's and the best `top`.
TokenLogprob logprob_of(const std::vector<float>& logits, int32_t id, int top) {
  float m = -INFINITY;
  for (float l : logits) m = std::max(m, l);
  double sum = 0;
  for (float l : logits) sum += std::exp(double(l) - double(m));
  const double lse = double(m) + std::log(sum);
  TokenLogprob out;
  out.logprob = float(double(logits[size_t(id)]) - lse);
  if (top > 0) {
    // Reused between tokens (it runs on the worker for every token of a logprobs request).
    static thread_local std::vector<int32_t> order;
    order.resize(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = int32_t(i);
    const size_t n = std::min(order.size(), size_t(top));
    std::partial_sort(order.begin(), order.begin() + ptrdiff_t(n), order.end(), [&](int32_t a, int32_t b) {
      return logits[size_t(a)] > logits[size_t(b)] || (logits[size_t(a)] == logits[size_t(b)] && a < b);
    });
    for (size_t i = 0; i < n; ++i) out.top.push_back({order[i], float(double(logits[size_t(order[i])]) - lse)});
  }
  return out;
}

}  // namespace

void EngineService::run_round(std::vector<std::shared_ptr<Job>>& jobs) {
  const Clock::time_point t0 = Clock::now();
  // Plan every job; those that feed this step go into one batch.
  std::vector<size_t> in_batch;  // indices into jobs
  std::vector<BatchItem> items;
  std::vector<bool> ended(jobs.size(), false);
  bool prefill_taken = false, decoded = false;
  // --max-batch caps the sessions per step; then the step after starts where this one stopped,
  // so every session gets its turn (1: one session per step, the unbatched round robin).
  const size_t cap = options_.max_batch > 0 ? size_t(options_.max_batch) : jobs.size();
  size_t start = 0;
  for (size_t i = 0; i < jobs.size(); ++i)
    if (jobs[i].get() == resume_) start = i;
  resume_ = nullptr;
  // A prefill chunk runs in the same forward as the decoders' tokens, so a long chunk delays
  // each of their tokens: beside decoders the chunk is shorter (fewer tokens share each
  // expert read, but nobody stalls for seconds).
  step_prefill_chunk_ = size_t(options_.prefill_chunk);
  for (const auto& j : jobs)
    if (j->decoding)
      step_prefill_chunk_ = size_t(std::min(options_.prefill_chunk, options_.prefill_chunk_beside_decoders));
  for (size_t k = 0; k < jobs.size(); ++k) {
    const size_t i = (start + k) % jobs.size();
    Job& j = *jobs[i];
    if (!j.cancel->load() && j.cb.backed_up && j.cb.backed_up()) continue;
    if (items.size() >= cap) {
      if (!resume_) resume_ = &j;
      continue;
    }
    decoded |= j.decoding;
    BatchItem item;
    const Plan p = plan(j, prefill_taken, item);
    if (p == Plan::Ended) ended[i] = true;
    if (p != Plan::Feed) continue;
    in_batch.push_back(i);
    items.push_back(item);
  }

  if (!items.empty()) {
    std::string error;                // the whole step failed (iod lost, ...): every item
    ErrorKind error_kind = ErrorKind::Internal;
    std::string error_param;
    std::vector<std::string> faulted;  // per item: an expert of its rows could not be had
    // A request's share starts with its first step: the traffic before it is the others'.
    bool newcomer = false;
    for (size_t i : in_batch) newcomer |= !jobs[i]->ever_fed;
    if (newcomer && !uncharged_.empty()) charge_traffic();
    try {
      faulted = engine_->model().forward_batch(items);
    } catch (const std::exception& e) {
      error = e.what();
      error_kind = kind_of(e);
      if (const auto* w = dynamic_cast<const Error*>(&e)) error_param = w->param();
    }
    {
      std::lock_guard lk(mu_);
      ++batches_;
      batched_sessions_ += items.size();
      max_batch_ = std::max(max_batch_, uint32_t(items.size()));
    }
    // The step's expert traffic is shared: each request is charged its share by rows fed, at
    // most every kTrafficInterval and before it finishes (charge_traffic).
    for (size_t k = 0; k < in_batch.size(); ++k) {
      const std::shared_ptr<Job>& j = jobs[in_batch[k]];
      j->ever_fed = true;
      if (items[k].tokens.empty()) continue;
      if (j->uncharged_rows == 0) uncharged_.push_back(j);
      j->uncharged_rows += items[k].tokens.size();
    }
    if (!error.empty() || Clock::now() - traffic_taken_ >= kTrafficInterval) charge_traffic();
    for (size_t k = 0; k < in_batch.size(); ++k) {
      Job& j = *jobs[in_batch[k]];
      if (!error.empty()) {
        // Every session of the failed step is half-updated (the layers ran for all of them).
        const size_t others = in_batch.size() - 1;
        fail(j, error + (others > 0 ? " (in a step batched with " + std::to_string(others) + " other session" +
                                          (others > 1 ? "s)" : ")")
                                    : std::string()),
             error_kind, error_param);
        ended[in_batch[k]] = true;
      } else if (!faulted[k].empty()) {
        // Only this session routed to the lost expert: the others of the step are exact.
        fail(j, faulted[k]);
        ended[in_batch[k]] = true;
      } else if (!fed(j)) {
        ended[in_batch[k]] = true;
      }
    }
  }

  size_t keep = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (ended[i] && jobs[i].get() == resume_) resume_ = nullptr;
    if (!ended[i]) jobs[keep++] = std::move(jobs[i]);
  }
  jobs.resize(keep);
  if (decoded) {
    std::lock_guard lk(mu_);
    decode_seconds_ += seconds_between(t0, Clock::now());
  }
}

int32_t EngineService::next_id(Job& j) {
  if (j.test_reply_at < j.test_reply.size()) return int32_t(j.test_reply[j.test_reply_at++]);
  // With a truncating filter (top-k, top-p, min-p), sampling first and masking only on a refusal
  // would favour allowed ids inside the unmasked nucleus: mask first then.
  const SamplingParams& sp = j.sampler->params();
  const bool filtered = sp.temperature > 0 && (sp.top_k > 1 || sp.top_p < 1.0f || sp.min_p > 0.0f);
  if (j.constraint && filtered && !j.constraint->done()) {
    j.masked = j.logits;
    j.constraint->mask(j.masked);
    return j.sampler->sample(j.masked, j.history, j.generated_from);
  }
  int32_t id = j.sampler->sample(j.logits, j.history, j.generated_from);
  if (j.constraint && !j.constraint->allows(uint32_t(id))) {
    j.masked = j.logits;
    j.constraint->mask(j.masked);
    id = j.sampler->sample(j.masked, j.history, j.generated_from);
  }
  return id;
}

void EngineService::ensure_model_session(SessionState& s) {
  if (s.model) return;
  if (!s.parked.empty())
    unpark(s);
  else
    s.model.emplace(engine_->new_session(s.context));
}

void EngineService::fail(Job& j, const std::string& error, ErrorKind kind, std::string param) {
  j.s->forget();
  finish(j, error + " (the session's state was reset)", kind, std::move(param));
}

void EngineService::failed_with(Job& j, const std::exception& e) {
  const auto* w = dynamic_cast<const Error*>(&e);
  fail(j, e.what(), kind_of(e), w ? w->param() : "");
}

bool EngineService::end_if_cancelled(Job& j) {
  if (!j.cancel->load()) return false;
  j.out.stop_reason = "cancelled";
  finish(j, "");
  return true;
}

void EngineService::end_cancelled(std::vector<std::shared_ptr<Job>>& jobs) {
  std::erase_if(jobs, [&](const std::shared_ptr<Job>& j) {
    if (!end_if_cancelled(*j)) return false;
    if (j.get() == resume_) resume_ = nullptr;
    return true;
  });
}

EngineService::Plan EngineService::plan(Job& j, bool& prefill_taken, BatchItem& item) {
  SessionState& s = *j.s;
  const tok::Tokenizer* tk = engine_->has_tokenizer() ? &engine_->tokenizer() : nullptr;
  try {
    if (end_if_cancelled(j)) return Plan::Ended;
    if (!j.vision_error.empty()) {
      finish(j, j.vision_error);  // the session was never touched: nothing to reset
      return Plan::Ended;
    }
    if (!j.decoding && !j.has_started && prefill_taken) return Plan::Wait;  // not started: keeps its queue time
    try {
      ensure_model_session(s);
    } catch (const std::exception& e) {
      if (s.parked.empty()) throw;
      // A parked state that cannot be read back (EIO, the file removed by someone) fails this
      // request alone, and the file stays: the session is as it was, and the next request
      // tries again. (fail() would forget the conversation for a transient error.)
      const auto* w = dynamic_cast<const Error*>(&e);
      finish(j, "reading back session " + std::to_string(s.id) + "'s parked state: " + e.what(), kind_of(e),
             w ? w->param() : "");
      return Plan::Ended;
    }
    if (!j.has_started) {
      j.has_started = true;
      j.started = Clock::now();
      if (s.unfed) {
        j.feed.insert(j.feed.begin(), *s.unfed);
        shift_images(j.images, 1);
      }
      s.unfed.reset();
      j.out.queue_seconds = seconds_between(j.submitted, j.started);
      j.logits.resize(size_t(config_.vocab));
      if (s.empty()) {
        j.fresh = true;
        restore_from_cache(j);
        if (j.fed == j.feed.size() && !start_decoding(j)) return Plan::Ended;  // the whole prompt was cached
      }
    }
    if (!j.decoding) {
      // One prefill chunk per step, the oldest request's first: the others wait their turn.
      if (prefill_taken) return Plan::Wait;
      prefill_taken = true;
      const size_t n = std::min(step_prefill_chunk_, j.feed.size() - j.fed);
      const bool last = j.fed + n == j.feed.size();
      // Inner chunks need no logits: the output head runs only for the prompt's last token.
      image_inputs(j.images, int64_t(j.fed), int64_t(n), config_.hidden, j.inputs);
      item = {&*s.model, std::span<const int32_t>(j.feed.data() + j.fed, n), j.logits.data(),
              last ? LogitRows::Last : LogitRows::None, j.inputs};
      j.pending = n;
      return Plan::Feed;
    }
    // One token: sample from the last logits, hand it out, feed it unless generation ends.
    const int32_t id = next_id(j);
    j.history.push_back(id);
    ++j.out.tokens;
    if (j.constraint) j.constraint->accept(uint32_t(id));
    if (tk && tk->is_stop(uint32_t(id))) {
      j.out.stop_reason = "stop_token";
    } else {
      TokenEvent ev;
      ev.id = id;
      if (j.reply.top_logprobs >= 0) ev.logprob = logprob_of(j.logits, id, j.reply.top_logprobs);
      std::string piece;
      if (j.parser) {
        reply::ReplyDelta d = j.parser->push(uint32_t(id));
        piece = std::move(d.content);
        ev.reasoning = std::move(d.reasoning);
        if (!j.reply.no_tool_calls) ev.tool_calls = std::move(d.tool_calls);
      } else if (j.text && uint32_t(id) < tk->vocab_size() && !tk->is_special(uint32_t(id))) {
        // Special ids are never text: markup of a raw completion is not shown.
        piece = j.text->push(uint32_t(id));
      }
      ev.text = j.stops->push(piece);
      j.cb.token(std::move(ev));
      if (j.stops->stopped()) j.out.stop_reason = "stop_string";
      else if (!j.test_reply.empty() && j.test_reply_at >= j.test_reply.size()) j.out.stop_reason = "stop_token";
      else if (j.cancel->load()) j.out.stop_reason = "cancelled";
      else if (int64_t(j.out.tokens) >= j.params.max_tokens) j.out.stop_reason = "max_tokens";
      else if (s.model->position() >= s.model->max_context()) j.out.stop_reason = "context";
    }
    if (!j.out.stop_reason.empty()) {
      s.unfed = id;  // fed in front of the next prompt, so a continuing session sees it
      {
        std::lock_guard lk(mu_);
        s.position = int64_t(s.fed.size()) + 1;
      }
      finish(j, "");
      return Plan::Ended;
    }
    j.next = id;
    item = {&*s.model, std::span<const int32_t>(&j.next, 1), j.logits.data(), LogitRows::Last};
    j.pending = 1;
    return Plan::Feed;
  } catch (const std::exception& e) {
    failed_with(j, e);
    return Plan::Ended;
  }
}

bool EngineService::fed(Job& j) {
  try {
    return fed_unguarded(j);
  } catch (const std::exception& e) {
    // Nothing a request brings may end the worker (every session would die with it).
    failed_with(j, e);
    return false;
  }
}

bool EngineService::fed_unguarded(Job& j) {
  SessionState& s = *j.s;
  bool go_on = true;
  if (!j.decoding) {
    s.fed.insert(s.fed.end(), j.feed.begin() + ptrdiff_t(j.fed), j.feed.begin() + ptrdiff_t(j.fed + j.pending));
    j.fed += j.pending;
  } else {
    s.fed.push_back(j.next);
  }
  j.pending = 0;
  {
    std::lock_guard lk(mu_);
    s.position = int64_t(s.fed.size()) + (s.unfed ? 1 : 0);
  }
  if (!j.decoding && j.fed == j.feed.size()) go_on = start_decoding(j);
  return go_on;
}

void EngineService::restore_from_cache(Job& j) {
  SessionState& s = *j.s;
  // Image positions are compared by the image (cache_key), not by the placeholder id.
  std::shared_ptr<const PromptCache::Checkpoint> c =
      prompt_cache_->match(j.cache_scope, j.images.empty() ? j.feed : cache_key(j.feed, j.images));
  if (!c) return;
  // A copy: the checkpoint stays as it is for the next request that shares the prefix.
  s.model.emplace(c->state.with_context(s.context));
  s.fed.assign(j.feed.begin(), j.feed.begin() + ptrdiff_t(c->ids.size()));
  j.fed = c->ids.size();
  j.out.cached_tokens = c->ids.size();
  if (j.fed == j.feed.size()) j.logits = c->logits;  // nothing left to prefill: its logits are the prompt's
  std::lock_guard lk(mu_);
  s.position = int64_t(s.fed.size());
}

bool EngineService::start_decoding(Job& j) {
  SessionState& s = *j.s;
  // Taken before the first sample: the next turn re-renders this reply after the prompt, so
  // its prompt starts with exactly these ids. Only for sessions that started empty (as every
  // HTTP request's does): a continuing session holds its own state, and copying its whole
  // history every turn would cost for nothing.
  if (j.fresh)
    prompt_cache_->insert(j.cache_scope, j.images.empty() ? s.fed : cache_key(s.fed, j.images), *s.model, j.logits);
  j.decoding = true;
  j.decode_started = Clock::now();
  j.out.prefill_seconds = seconds_between(j.started, j.decode_started);
  j.sampler.emplace(j.params);
  j.stops.emplace(j.params.stop);
  if (engine_->has_tokenizer()) j.text.emplace(engine_->tokenizer());
  j.generated_from = j.history.size();
  j.test_reply.assign(test_reply_ids_.begin(), test_reply_ids_.end());
  if (j.params.max_tokens <= 0) {
    j.out.stop_reason = "max_tokens";
    finish(j, "");
    return false;
  }
  return true;
}

void EngineService::finish(Job& j, std::string error, ErrorKind kind, std::string param) {
  // Its share of the traffic, before its outcome goes. (Only the worker feeds rows: a job the
  // vision thread finishes at shutdown never fed any, so that thread makes no iod call here.)
  if (j.uncharged_rows > 0) charge_traffic();
  if (error.empty() && j.stops && !j.stops->stopped()) {
    // Whatever was held back (a partial character, an open element, a tail that did not become
    // a stop).
    TokenEvent ev;
    ev.id = -1;
    std::string rest;
    if (j.parser) {
      reply::ReplyDelta d = j.parser->finish();
      rest = std::move(d.content);
      ev.reasoning = std::move(d.reasoning);
      if (!j.reply.no_tool_calls) ev.tool_calls = std::move(d.tool_calls);
    } else if (j.text) {
      rest = j.text->flush();
    }
    ev.text = j.stops->push(rest);
    ev.text += j.stops->flush();
    if (!ev.text.empty() || !ev.reasoning.empty() || !ev.tool_calls.empty()) j.cb.token(std::move(ev));
  }
  if (j.parser && !j.reply.no_tool_calls) j.out.tool_calls = uint32_t(j.parser->reply().tool_calls.size());
  if (j.decoding) j.out.decode_seconds = seconds_between(j.decode_started, Clock::now());
  j.out.error = std::move(error);
  j.out.error_kind = kind;
  j.out.error_param = std::move(param);
  if (!j.out.error.empty()) j.out.stop_reason = "error";
  {
    std::lock_guard lk(mu_);
    SessionState& s = *j.s;
    s.busy = false;
    s.cancel.reset();
    s.position = int64_t(s.fed.size()) + (s.unfed ? 1 : 0);
    s.counters.requests += 1;
    s.counters.prompt_tokens += j.out.prompt_tokens;
    s.counters.tokens += j.out.tokens;
    s.counters.decode_seconds += j.out.decode_seconds;
    --queued_;
    ++requests_;
    if (!j.out.error.empty()) ++failed_;
    prompt_tokens_ += j.out.prompt_tokens;
    tokens_ += j.out.tokens;
  }
  if (!j.out.error.empty()) spdlog::warn("compute: session {}: {}", j.s->id, j.out.error);
  j.cb.done(j.out);
}

}  // namespace waste::server
