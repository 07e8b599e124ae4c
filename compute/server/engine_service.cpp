#include "compute/server/engine_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <filesystem>

#include "compute/model/session_file.h"
#include "compute/server/reattaching_experts.h"
#include "shared/plan/memory_plan.h"
#include "shared/stats/arithmetic.h"
#include "shared/util/error.h"
#include "shared/util/progress.h"

namespace waste::server {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }
int64_t steady_ns() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

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

// A session's state. `model`, `fed` and `unfed` are touched by the worker only; the rest
// under the service mutex.
struct EngineService::SessionState {
  uint64_t id = 0;
  int64_t context = 0;
  std::optional<Session> model;
  std::vector<int32_t> fed;      // ids in the model state, in order
  std::optional<int32_t> unfed;  // the last sampled id, fed before the next prompt
  bool empty() const { return fed.empty() && !unfed; }
  void forget() {
    model.reset();
    fed.clear();
    unfed.reset();
  }
  // under mu_
  int64_t position = 0;          // fed + unfed
  bool busy = false, closed = false;
  std::shared_ptr<std::atomic<bool>> cancel;  // of the running request
  SessionCounters counters;
};

namespace {

// What a session reports: its state and counters, its rate as of now.
SessionSnapshot snapshot_of(const EngineService::SessionState& s) {
  SessionSnapshot out{s.id, s.position, s.context, s.busy, s.counters};
  out.counters.tok_per_s = stats::tokens_per_second(out.counters.tokens, out.counters.decode_seconds);
  return out;
}

}  // namespace

struct EngineService::Job {
  std::shared_ptr<SessionState> s;
  std::vector<int32_t> feed;  // unfed id + prompt
  size_t fed = 0;
  std::string cache_scope;    // whose prompt-cache checkpoints it may start from and adds to
  bool fresh = false;         // the session held nothing: the prompt cache was asked, and gets its checkpoint
  SamplingParams params;
  std::shared_ptr<std::atomic<bool>> cancel;
  GenerateCallbacks cb;
  bool decoding = false;
  std::optional<Sampler> sampler;
  std::optional<StopMatcher> stops;
  std::optional<tok::DecodeStream> text;
  ReplyOptions reply;
  std::optional<reply::ReplyParser> parser;
  std::optional<ReplyConstraint> constraint;
  std::vector<float> masked;     // the logits with the constraint's mask applied
  size_t generated_from = 0;     // history[generated_from..] is what this request generated
  std::vector<int32_t> history;  // this request's prompt + generated (the sampler's penalty window)
  std::vector<float> logits;     // of the last token fed: what the next sample reads
  int32_t next = 0;              // the token fed in this step (decoding)
  std::vector<uint32_t> test_reply;  // ServiceOptions::test_reply's ids
  size_t test_reply_at = 0;
  size_t pending = 0;            // tokens fed in this step
  std::vector<ImageRun> images;  // positions in `feed` that take the tower's rows
  std::vector<PreparedImage> to_embed;  // the images' pixels until the vision thread ran them
  std::vector<const float*> inputs;     // this step's input rows (BatchItem::inputs points here)
  std::string vision_error;             // the tower failed: the worker ends the job with this
  Clock::time_point submitted, started, decode_started;
  bool has_started = false;
  GenerateOutcome out;
};

EngineService::EngineService(const ServiceOptions& o) : options_(o), started_(Clock::now()) {
  require(options_.max_sessions >= 1, "--max-sessions must be at least 1");
  require(options_.max_queued >= 1, "max queued requests must be at least 1");
  require(options_.context >= 2, "--ctx must be at least 2 tokens");
  require(options_.max_batch >= 0, "--max-batch must not be negative");
  if (options_.max_context <= 0) options_.max_context = options_.context;
  auto ready = std::make_shared<std::promise<void>>();
  auto f = ready->get_future();
  worker_ = std::thread([this, ready] { worker_main(ready); });
  try {
    f.get();
  } catch (...) {
    worker_.join();
    throw;
  }
}

EngineService::~EngineService() {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  vision_wake_.notify_all();
  // The vision thread uses the engine, which the worker made: it goes first.
  if (vision_thread_.joinable()) vision_thread_.join();
  if (worker_.joinable()) worker_.join();
}

void EngineService::vision_main() {
  for (;;) {
    std::shared_ptr<Job> j;
    {
      std::unique_lock lk(mu_);
      vision_wake_.wait(lk, [&] { return stopping_ || !vision_queue_.empty(); });
      if (stopping_) break;
      j = std::move(vision_queue_.front());
      vision_queue_.pop_front();
    }
    const Clock::time_point t0 = Clock::now();
    try {
      for (size_t i = 0; i < j->to_embed.size() && !j->cancel->load(); ++i)
        j->images[i].rows = engine_->vision().embed(j->to_embed[i], nullptr, j->cancel.get());
    } catch (const std::exception& e) {
      // A cancel that stopped the tower ends as a cancel (plan() sees the flag first).
      if (!j->cancel->load()) j->vision_error = std::string("vision tower: ") + e.what();
    }
    j->out.image_seconds = seconds_between(t0, Clock::now());
    j->to_embed.clear();
    {
      // Every job goes to the worker, which finishes failed and cancelled ones too: finish()
      // touches session state that only the worker may. After stopping_ nobody would take it.
      std::lock_guard lk(mu_);
      if (!stopping_) {
        incoming_.push_back(j);
        j.reset();
      }
    }
    if (!j) {
      wake_.notify_all();
      continue;
    }
    finish(*j, "compute is shutting down", ErrorKind::Unavailable, "compute");
  }
  std::deque<std::shared_ptr<Job>> left;
  {
    std::lock_guard lk(mu_);
    left.swap(vision_queue_);
  }
  for (auto& j : left) finish(*j, "compute is shutting down", ErrorKind::Unavailable, "compute");
}

int64_t EngineService::max_context() const { return options_.max_context; }

void EngineService::worker_main(std::shared_ptr<std::promise<void>> ready) {
  // The engine and any iod connection are made here: the iod client's RPC runs on the kj event
  // loop of the thread that created it.
  try {
    EngineOptions eo;
    eo.model = options_.model;
    eo.context = options_.context;
    eo.prefill_chunk = options_.prefill_chunk;
    eo.image_patches = options_.image_patches;
    eo.progress = false;
    eo.in_process_cache_bytes = options_.in_process_cache_bytes;
    if (!options_.iod_socket.empty()) {
      expert_container_ = std::make_unique<Container>(Container::open(options_.model));
      // iod may be restarting (a supervisor restarts each process on its own): wait for it up
      // to --iod-wait rather than exiting into a restart loop.
      const auto give_up = Clock::now() + std::chrono::milliseconds(options_.iod_wait_ms);
      for (bool said = false; !iod_;) {
        try {
          iod_ = std::make_unique<ReattachingExperts>(*expert_container_, options_.iod_socket, options_.iod_timeout_ms,
                                                      iod_health_);
        } catch (const Error& e) {
          if (e.kind() != ErrorKind::Unavailable || Clock::now() >= give_up) throw;
          if (!said) spdlog::info("compute: waiting for iod at {} ({})", options_.iod_socket, e.what());
          said = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(200));  // a retry interval, bounded by give_up
        }
      }
      eo.experts = iod_.get();
      budget_bytes_ = uint64_t(iod_->slot_count()) * iod_->slot_bytes();
      expert_path_ = "iod at " + options_.iod_socket + ", " + std::to_string(iod_->slot_count()) + " slots";
    } else {
      budget_bytes_ = options_.in_process_cache_bytes;
      expert_path_ = "in-process reads (no iod), record cache " + format_bytes(double(budget_bytes_));
    }
    engine_ = std::make_unique<Engine>(eo);
    config_ = engine_->config();
    prompt_cache_ = std::make_unique<PromptCache>(
        options_.prompt_cache_bytes ? *options_.prompt_cache_bytes
                                    : plan::default_prompt_cache_bytes(config_, uint64_t(options_.context)));
    trunk_bytes_ = engine_->trunk_resident_bytes();
    if (!options_.step_gate.empty())
      step_gate_ = std::make_unique<StepGate>(options_.step_gate, [this] {
        { std::lock_guard lk(mu_); }  // a wake-up between the worker's check and its wait is not lost
        wake_.notify_all();
      });
    if (!options_.test_reply.empty()) {
      require(engine_->has_tokenizer(), "WASTE_COMPUTE_TEST_REPLY needs a model with a tokenizer");
      test_reply_ids_ = engine_->tokenizer().encode_markup(options_.test_reply);
    }
  } catch (...) {
    iod_.reset();
    ready->set_exception(std::current_exception());
    return;
  }
  ready->set_value();

  std::vector<std::shared_ptr<Job>> jobs;
  size_t gate = options_.start_gate;
  for (;;) {
    std::deque<std::function<void()>> control;
    {
      std::unique_lock lk(mu_);
      // The step gate (a test hook) holds the steps; a cancel still ends its request then.
      auto gate_holds = [&] { return step_gate_ && !step_gate_->open(); };
      auto any_cancelled = [&] { return std::any_of(jobs.begin(), jobs.end(), [](const auto& j) { return j->cancel->load(); }); };
      auto has_work = [&] {
        return stopping_ || !incoming_.empty() || !control_.empty() ||
               (!jobs.empty() && gate == 0 && (!gate_holds() || any_cancelled()));
      };
      if (jobs.empty() || gate > 0 || gate_holds()) {
        // Idle: wake now and then to ask iod whether it is there (ping_iod_if_idle).
        if (iod_ && options_.idle_ping_ms > 0) {
          if (!wake_.wait_for(lk, std::chrono::milliseconds(options_.idle_ping_ms), has_work)) {
            lk.unlock();
            ping_iod_if_idle();
            continue;
          }
        } else {
          wake_.wait(lk, has_work);
        }
      } else {
        // Every running request waits on a slow client: nothing to step until one catches up.
        bool all_behind = std::all_of(jobs.begin(), jobs.end(), [](const auto& j) {
          return !j->cancel->load() && j->cb.backed_up && j->cb.backed_up();
        });
        if (all_behind) wake_.wait_for(lk, std::chrono::milliseconds(2), has_work);
      }
      if (stopping_) break;
      for (auto& j : incoming_) jobs.push_back(std::move(j));
      incoming_.clear();
      control.swap(control_);
      running_ = int(jobs.size());
      if (gate > 0 && jobs.size() >= gate) gate = 0;
    }
    busy_since_ns_.store(steady_ns(), std::memory_order_relaxed);
    for (auto& f : control) f();  // session control runs while the gate holds the steps
    if (gate == 0 && !jobs.empty()) {
      if (!step_gate_ || step_gate_->take())
        run_round(jobs);
      else
        end_cancelled(jobs);
    }
    busy_since_ns_.store(0, std::memory_order_relaxed);
  }
  step_gate_.reset();  // its reader thread wakes this worker: gone before the worker is
  for (auto& j : jobs) finish(*j, "compute is shutting down", ErrorKind::Unavailable, "compute");
  {
    std::lock_guard lk(mu_);
    for (auto& j : incoming_) {
      j->out.error = "compute is shutting down";
      j->out.error_kind = ErrorKind::Unavailable;
      j->out.error_param = "compute";
      j->cb.done(j->out);
    }
    incoming_.clear();
  }
  // The iod connection belongs to this thread's event loop: close it here.
  try {
    iod_.reset();
  } catch (...) {
  }
  std::function<void()> stopped;
  {
    std::lock_guard lk(mu_);
    stopped = std::move(on_stopped_);
  }
  if (stopped) stopped();
}

void EngineService::stop(std::function<void()> stopped) {
  {
    std::lock_guard lk(mu_);
    stopping_ = true;
    on_stopped_ = std::move(stopped);
  }
  wake_.notify_all();
}

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
    const ExpertSourceStats before = engine_->experts().stats();
    std::string error;                // the whole step failed (iod lost, ...): every item
    ErrorKind error_kind = ErrorKind::Internal;
    std::string error_param;
    std::vector<std::string> faulted;  // per item: an expert of its rows could not be had
    try {
      faulted = engine_->model().forward_batch(items);
    } catch (const std::exception& e) {
      error = e.what();
      error_kind = kind_of(e);
      if (const auto* w = dynamic_cast<const Error*>(&e)) error_param = w->param();
    }
    const ExpertSourceStats delta = stats::minus(engine_->experts().stats(), before);
    {
      std::lock_guard lk(mu_);
      ++batches_;
      batched_sessions_ += items.size();
      max_batch_ = std::max(max_batch_, uint32_t(items.size()));
      expert_stats_ = engine_->experts().stats();
    }
    // The step's expert traffic is shared: each request is charged its share by rows fed (the
    // global counters stay exact).
    uint64_t rows = 0;
    for (const BatchItem& it : items) rows += it.tokens.size();
    for (size_t k = 0; k < in_batch.size(); ++k) {
      Job& j = *jobs[in_batch[k]];
      const uint64_t r = items[k].tokens.size();
      const ExpertSourceStats share = stats::share(delta, r, rows);
      stats::add(j.out.experts, share);
      {
        std::lock_guard lk(mu_);
        stats::add(j.s->counters.experts, share);
      }
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

std::shared_ptr<const constrain::TokenVocabulary> EngineService::grammar_vocabulary() const {
  std::call_once(vocab_once_, [&] { vocab_ = std::make_shared<const constrain::TokenVocabulary>(engine_->tokenizer()); });
  return vocab_;
}

void EngineService::ensure_model_session(SessionState& s) {
  if (!s.model) s.model.emplace(engine_->new_session(s.context));
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
    ensure_model_session(s);
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
      else if (j.out.tokens >= j.params.max_tokens) j.out.stop_reason = "max_tokens";
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
  j.out.cached_tokens = int64_t(c->ids.size());
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
    s.counters.prompt_tokens += uint64_t(j.out.prompt_tokens);
    s.counters.tokens += uint64_t(j.out.tokens);
    s.counters.decode_seconds += j.out.decode_seconds;
    --queued_;
    ++requests_;
    if (!j.out.error.empty()) ++failed_;
    prompt_tokens_ += uint64_t(j.out.prompt_tokens);
    tokens_ += uint64_t(j.out.tokens);
  }
  if (!j.out.error.empty()) spdlog::warn("compute: session {}: {}", j.s->id, j.out.error);
  j.cb.done(j.out);
}

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

SessionSnapshot EngineService::snapshot(uint64_t session) const {
  std::lock_guard lk(mu_);
  auto s = find(session);
  return snapshot_of(*s);
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
    j->out.prompt_tokens = int64_t(prompt.size());
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

void EngineService::save(uint64_t session, const std::string& path, std::function<void(std::exception_ptr, FileResult)> done) {
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    require_request(!s->busy, "save: session " + std::to_string(session) + " is generating");
    control_.push_back([this, s, path, done] {
      try {
        const Clock::time_point t0 = Clock::now();
        ensure_model_session(*s);
        FileResult r;
        r.bytes = write_session_file(path, engine_->model(), engine_->container().container_id(), *s->model, s->fed, s->unfed);
        r.tokens = s->fed.size() + (s->unfed ? 1 : 0);
        r.seconds = seconds_between(t0, Clock::now());
        done(nullptr, r);
      } catch (...) {
        done(std::current_exception(), {});
      }
    });
  }
  wake_.notify_all();
}

void EngineService::load(uint64_t session, const std::string& path, std::function<void(std::exception_ptr, FileResult)> done) {
  {
    std::lock_guard lk(mu_);
    auto s = find(session);
    require_request(!s->busy, "load: session " + std::to_string(session) + " is generating");
    control_.push_back([this, s, path, done] {
      try {
        const Clock::time_point t0 = Clock::now();
        // Read whole before anything changes: a refused file leaves the session as it was.
        SessionFileContents f = read_session_file(path, engine_->model(), engine_->container().container_id(), s->context);
        FileResult r;
        r.bytes = std::filesystem::file_size(path);
        s->model.emplace(std::move(f.state));
        s->fed = std::move(f.ids);
        s->unfed = f.unfed;
        r.tokens = s->fed.size() + (s->unfed ? 1 : 0);
        {
          std::lock_guard lk2(mu_);
          s->position = int64_t(r.tokens);
        }
        r.seconds = seconds_between(t0, Clock::now());
        done(nullptr, r);
      } catch (...) {
        done(std::current_exception(), {});
      }
    });
  }
  wake_.notify_all();
}

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
      const ExpertSourceStats before = engine_->experts().stats();
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
      const ExpertSourceStats delta = stats::minus(engine_->experts().stats(), before);
      {
        std::lock_guard lk2(mu_);
        stats::add(s->counters.experts, delta);
        expert_stats_ = engine_->experts().stats();
      }
      done(failure, std::move(logits));
    });
  }
  wake_.notify_all();
}

void EngineService::ping_iod_if_idle() {
  // Steps talk to iod all the time; only a quiet worker needs to ask.
  const double since = iod_health_.since_answer();
  if (since >= 0 && since * 1000 < options_.idle_ping_ms) return;
  try {
    iod_->ping();
  } catch (const std::exception&) {
    // Recorded in iod_health_ (and the connection dropped, to attach afresh on the next ping).
  }
}

ServiceHealth EngineService::health(double not_answering_after) const {
  ServiceHealth h;
  h.has_iod = !options_.iod_socket.empty();
  if (h.has_iod) h.iod = iod_health_.snapshot(not_answering_after);
  const int64_t busy = busy_since_ns_.load(std::memory_order_relaxed);
  if (busy != 0) h.busy_seconds = double(steady_ns() - busy) / 1e9;
  h.reattaches = iod_ ? iod_->reattaches() : 0;
  return h;
}

ServiceStats EngineService::stats() const {
  std::lock_guard lk(mu_);
  ServiceStats st;
  st.uptime_seconds = seconds_between(started_, Clock::now());
  st.sessions = uint32_t(sessions_.size());
  st.max_sessions = uint32_t(options_.max_sessions);
  st.queued = uint32_t(queued_);
  st.running = uint32_t(running_);
  st.max_queued = uint32_t(options_.max_queued);
  st.requests = requests_;
  st.failed = failed_;
  st.prompt_tokens = prompt_tokens_;
  st.tokens = tokens_;
  st.decode_seconds = decode_seconds_;
  st.tok_per_s = stats::tokens_per_second(st.tokens, st.decode_seconds);
  st.experts = expert_stats_;
  st.reattaches = iod_ ? iod_->reattaches() : 0;
  st.batches = batches_;
  st.batched_sessions = batched_sessions_;
  st.max_batch = max_batch_;
  st.prompt_cache = prompt_cache_ ? prompt_cache_->stats() : PromptCacheStats{};
  for (const auto& s : sessions_) st.sessions_detail.push_back(snapshot_of(*s));
  return st;
}

}  // namespace waste::server
