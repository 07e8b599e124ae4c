// What compute reports of itself (Engine.stats, docs/PROTOCOL.md): the engine's totals, its
// prompt cache, and each session's counters; lists of stat.h.
#pragma once
#include <cstdint>

#include "shared/stats/expert_stats.h"
#include "shared/stats/generate_stats.h"  // WASTE_TOKEN_STATS
#include "shared/stats/stat.h"

#define WASTE_ENGINE_STATS(X, G)                                                                                     \
  X(double, uptime_seconds, "uptimeSeconds", "/uptime_seconds", Gauge, "seconds", "waste_uptime_seconds", 1,         \
    "Seconds since compute started.")                                                                                 \
  X(uint32_t, sessions, "sessions", "/sessions", Gauge, "sessions", "waste_sessions", 1, "Open sessions.")            \
  X(uint32_t, max_sessions, "maxSessions", "/max_sessions", Gauge, "sessions", "waste_sessions_max", 1,               \
    "The most sessions open at once (--max-sessions).")                                                               \
  X(uint32_t, live_sessions, "liveSessions", "/live_sessions", Gauge, "sessions", "waste_sessions_live", 1,           \
    "Session states in memory (the rest are parked on disk or empty).")                                               \
  X(uint32_t, max_live_sessions, "maxLiveSessions", "/max_live_sessions", Gauge, "sessions", "waste_sessions_live_max", \
    1, "The most session states in memory at once (--sessions; the memory plan counts them).")                       \
  X(uint64_t, parked, "parked", "/parked", Counter, "states", "waste_sessions_parked_total", 1,                       \
    "Idle sessions' states written to disk to make room for another's.")                                             \
  X(uint64_t, unparked, "unparked", "/unparked", Counter, "states", "waste_sessions_unparked_total", 1,               \
    "Parked states read back for their session's next request.")                                                     \
  X(uint32_t, queued, "queued", "/queued", Gauge, "requests", "waste_requests_queued", 1,                             \
    "Generate requests queued or running.")                                                                           \
  X(uint32_t, running, "running", "/running", Gauge, "requests", "waste_requests_running", 1,                         \
    "Generate requests being stepped now.")                                                                           \
  X(uint32_t, max_queued, "maxQueued", "/max_queued", Gauge, "requests", "waste_requests_queued_max", 1,              \
    "The most generate requests queued or running at once.")                                                          \
  X(uint64_t, requests, "requests", "/requests", Counter, "requests", "waste_requests_total", 1,                      \
    "Generate requests finished.")                                                                                    \
  X(uint64_t, failed, "failed", "/failed", Counter, "requests", "waste_requests_failed_total", 1,                     \
    "Generate requests that failed.")                                                                                 \
  X(uint64_t, prompt_tokens, "promptTokens", "/prompt_tokens", Counter, "tokens", "waste_prompt_tokens_total", 1,     \
    "Prompt tokens fed.")                                                                                             \
  X(uint64_t, tokens, "tokens", "/tokens", Counter, "tokens", "waste_tokens_generated_total", 1,                      \
    "Tokens generated, all sessions.")                                                                                \
  X(double, decode_seconds, "decodeSeconds", "/decode_seconds", Counter, "seconds", "waste_decode_seconds_total", 1,  \
    "Wall time with at least one session decoding.")                                                                  \
  X(double, tok_per_s, "tokPerSecond", "/tok_per_s", Gauge, "tokens/s", "waste_tokens_per_second", 1,                 \
    "Generated tokens per second of decoding wall time (aggregate).")                                                 \
  G(ExpertSourceStats, experts)                                                                                       \
  X(uint32_t, reattaches, "reattaches", "/reattaches", Counter, "reattaches", "waste_iod_reattaches_total", 1,        \
    "Times compute reconnected to a restarted iod.")                                                                  \
  X(uint64_t, batches, "batches", "/batches", Counter, "steps", "waste_batches_total", 1,                             \
    "Batched forward steps run (each: every decoding session and at most one prefill chunk).")                        \
  X(uint64_t, batched_sessions, "batchedSessions", "/batched_sessions", Counter, "sessions",                          \
    "waste_batched_sessions_total", 1, "Sessions in those steps, summed (/ batches: the mean batch size).")           \
  X(uint32_t, max_batch, "maxBatch", "/max_batch", Gauge, "sessions", "waste_batch_max", 1,                           \
    "The most sessions in one step.")

// A session's own work (its requests' token counts summed: generate_stats.h); /metrics shows
// only the totals (WASTE_ENGINE_STATS).
#define WASTE_SESSION_STATS(X, G)                                                                                    \
  X(uint64_t, requests, "requests", "/requests", Counter, "requests", "", 1, "Generate requests finished.")           \
  WASTE_TOKEN_STATS(X, G)                                                                                             \
  G(ExpertSourceStats, experts)

#define WASTE_PROMPT_CACHE_STATS(X, G)                                                                               \
  X(uint64_t, budget_bytes, "budgetBytes", "/budget_bytes", Gauge, "bytes", "waste_prompt_cache_budget_bytes", 1,     \
    "Bytes the prompt cache may hold (0: off).")                                                                      \
  X(uint64_t, bytes, "bytes", "/bytes", Gauge, "bytes", "waste_prompt_cache_bytes", 1,                                \
    "Bytes held by prompt-cache checkpoints.")                                                                        \
  X(uint64_t, entries, "entries", "/entries", Gauge, "checkpoints", "waste_prompt_cache_entries", 1,                  \
    "Prompt-cache checkpoints held.")                                                                                 \
  X(uint64_t, lookups, "lookups", "/lookups", Counter, "prompts", "waste_prompt_cache_lookups_total", 1,              \
    "Prompts of fresh sessions looked up in the prompt cache.")                                                       \
  X(uint64_t, hits, "hits", "/hits", Counter, "prompts", "waste_prompt_cache_hits_total", 1,                          \
    "Prompts that started from a prompt-cache checkpoint.")                                                           \
  X(uint64_t, cached_tokens, "cachedTokens", "/cached_tokens", Counter, "tokens",                                     \
    "waste_prompt_cache_cached_tokens_total", 1, "Prompt tokens restored from checkpoints, not prefilled.")           \
  X(uint64_t, inserted, "inserted", "/inserted", Counter, "checkpoints", "waste_prompt_cache_inserted_total", 1,      \
    "Checkpoints added to the prompt cache.")                                                                         \
  X(uint64_t, evicted, "evicted", "/evicted", Counter, "checkpoints", "waste_prompt_cache_evictions_total", 1,        \
    "Checkpoints dropped to stay in the budget.")                                                                     \
  X(uint64_t, too_large, "tooLarge", "/too_large", Counter, "checkpoints", "waste_prompt_cache_too_large_total", 1,   \
    "Checkpoints not kept: one alone exceeds the budget.")

namespace waste::stats {

struct EngineStats {
  WASTE_STATS(WASTE_ENGINE_STATS)
};

struct SessionStats {
  WASTE_STATS(WASTE_SESSION_STATS)
};

struct PromptCacheStats {
  WASTE_STATS(WASTE_PROMPT_CACHE_STATS)
};

// tok_per_s of the engine and of a session: tokens over the seconds spent decoding them.
inline double tokens_per_second(uint64_t tokens, double decode_seconds) {
  return decode_seconds > 0 ? double(tokens) / decode_seconds : 0.0;
}

}  // namespace waste::stats
