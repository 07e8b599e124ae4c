// EngineService's statistics: the totals (shared/stats/engine_stats.h) and each session's.
#include "compute/server/engine_service.h"

#include "compute/server/engine_service_state.h"
#include "compute/server/reattaching_experts.h"

namespace waste::server {

namespace {

// What a session reports: its state and counters, its rate as of now.
SessionSnapshot snapshot_of(const EngineService::SessionState& s) {
  SessionSnapshot out{s.id, s.position, s.context, s.busy, s.counters};
  out.counters.tok_per_s = stats::tokens_per_second(out.counters.tokens, out.counters.decode_seconds);
  return out;
}

}  // namespace

SessionSnapshot EngineService::snapshot(uint64_t session) const {
  std::lock_guard lk(mu_);
  auto s = find(session);
  return snapshot_of(*s);
}

ServiceStats EngineService::stats() const {
  std::lock_guard lk(mu_);
  ServiceStats st;
  st.uptime_seconds = seconds_between(started_, Clock::now());
  st.sessions = uint32_t(sessions_.size());
  st.max_sessions = uint32_t(options_.max_sessions);
  st.live_sessions = live_;
  st.max_live_sessions = uint32_t(options_.live_sessions);
  st.parked = parked_;
  st.unparked = unparked_;
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
