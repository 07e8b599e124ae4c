// EngineService's threads: the worker that opens the engine and runs the steps and control
// calls, the vision thread, stopping; and health, which never waits on either.
#include "compute/server/engine_service.h"

#include <spdlog/spdlog.h>

#include <thread>

#include "compute/server/engine_service_state.h"
#include "compute/server/reattaching_experts.h"
#include "shared/plan/memory_plan.h"
#include "shared/stats/arithmetic.h"
#include "shared/util/error.h"
#include "shared/util/progress.h"

namespace waste::server {

EngineService::EngineService(const ServiceOptions& o) : options_(o), started_(Clock::now()) {
  require(options_.max_sessions >= 1, "--max-sessions must be at least 1");
  require(options_.max_queued >= 1, "max queued requests must be at least 1");
  require(options_.live_sessions >= 1 && options_.live_sessions <= options_.max_sessions,
          "--sessions " + std::to_string(options_.live_sessions) + " must be from 1 to --max-sessions (" +
              std::to_string(options_.max_sessions) + ")");
  require(options_.context >= 2, "--ctx must be at least 2 tokens");
  // The start gate waits for that many requests running at once: each needs a state in memory.
  require(options_.start_gate <= size_t(options_.live_sessions),
          "WASTE_COMPUTE_TEST_START_GATE " + std::to_string(options_.start_gate) + " needs --sessions " +
              std::to_string(options_.start_gate) + " or more (it is " + std::to_string(options_.live_sessions) + ")");
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

ExpertSourceStats EngineService::take_expert_traffic() {
  traffic_taken_ = Clock::now();
  const ExpertSourceStats now = engine_->experts().stats();
  std::lock_guard lk(mu_);
  const ExpertSourceStats delta = stats::minus(now, expert_stats_);
  expert_stats_ = now;
  return delta;
}

void EngineService::charge_traffic() {
  ExpertSourceStats delta;
  try {
    delta = take_expert_traffic();
  } catch (const std::exception& e) {
    // Never a request's failure (this runs as one ends, and on a failed step's way out): the
    // rows stay uncharged until the next charge. (iod's sources report a lost daemon without
    // throwing; this guards any other source.)
    spdlog::warn("compute: expert traffic not charged yet: {}", e.what());
    return;
  }
  uint64_t rows = 0;
  for (const auto& j : uncharged_) rows += j->uncharged_rows;
  for (const auto& j : uncharged_) {
    const ExpertSourceStats share = stats::share(delta, j->uncharged_rows, rows);
    stats::add(j->out.experts, share);
    {
      std::lock_guard lk(mu_);
      stats::add(j->s->counters.experts, share);
    }
    j->uncharged_rows = 0;
  }
  uncharged_.clear();
}

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
    expert_stats_ = engine_->experts().stats();  // the base of the first charge's traffic
    prompt_cache_ = std::make_unique<PromptCache>(
        options_.prompt_cache_bytes ? *options_.prompt_cache_bytes
                                    : plan::default_prompt_cache_bytes(config_, engine_->model().mla_cache_format(), uint64_t(options_.context)));
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
      auto cancelled = [](const auto& j) { return j->cancel->load(); };
      auto any_cancelled = [&] {
        return std::any_of(jobs.begin(), jobs.end(), cancelled) || std::any_of(waiting_.begin(), waiting_.end(), cancelled);
      };
      auto has_work = [&] {
        return stopping_ || !incoming_.empty() || !control_.empty() ||
               (!jobs.empty() && gate == 0 && (!gate_holds() || any_cancelled())) || (!waiting_.empty() && any_cancelled());
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
      for (auto& j : incoming_) waiting_.push_back(std::move(j));
      incoming_.clear();
      control.swap(control_);
    }
    busy_since_ns_.store(steady_ns(), std::memory_order_relaxed);
    for (auto& f : control) {  // session control runs while the gate holds the steps
      f();
      enforce_live_limit(jobs);  // a load or a save of a parked session brought a state in
    }
    // The waiting requests start while their sessions can have a state (session_parking.cpp).
    admit(jobs);
    if (gate > 0 && jobs.size() >= gate) gate = 0;
    if (gate == 0 && !jobs.empty()) {
      if (!step_gate_ || step_gate_->take())
        run_round(jobs);
      else
        end_cancelled(jobs);
    }
    // A request that ended may have freed the state a waiting one needs: admitted now, the
    // loop steps it instead of sleeping with it queued.
    if (!waiting_.empty()) admit(jobs);
    busy_since_ns_.store(0, std::memory_order_relaxed);
  }
  step_gate_.reset();  // its reader thread wakes this worker: gone before the worker is
  for (auto& j : waiting_) finish(*j, "compute is shutting down", ErrorKind::Unavailable, "compute");
  waiting_.clear();
  for (auto& j : jobs) finish(*j, "compute is shutting down", ErrorKind::Unavailable, "compute");
  park_dir_.reset();  // every parked file with it (also of a session closed during the stop)
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

std::shared_ptr<const constrain::TokenVocabulary> EngineService::grammar_vocabulary() const {
  std::call_once(vocab_once_, [&] { vocab_ = std::make_shared<const constrain::TokenVocabulary>(engine_->tokenizer()); });
  return vocab_;
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

}  // namespace waste::server
