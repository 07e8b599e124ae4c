// What one generate request did: Session.generate's reply (GenerateStats in
// proto/engine.capnp, docs/PROTOCOL.md), which compute fills (compute/server) and the client
// library reads back (client::Result); the in-process Engine::generate reports the same
// (compute/engine.h). A list of stat.h. Per request, so /metrics shows none of it: the totals
// over all requests are engine_stats.h's.
#pragma once
#include <cstdint>

#include "shared/stats/expert_stats.h"
#include "shared/stats/stat.h"

// The token counts a request and a session (its requests summed, engine_stats.h) both report.
#define WASTE_TOKEN_STATS(X, G)                                                                                      \
  X(uint64_t, prompt_tokens, "promptTokens", "/prompt_tokens", Counter, "tokens", "", 1, "Prompt tokens fed.")        \
  X(uint64_t, tokens, "tokens", "/tokens", Counter, "tokens", "", 1, "Tokens generated.")                             \
  X(double, decode_seconds, "decodeSeconds", "/decode_seconds", Counter, "seconds", "", 1, "Seconds decoding.")       \
  X(double, tok_per_s, "tokPerSecond", "/tok_per_s", Gauge, "tokens/s", "", 1, "Generated tokens per second decoding.")

// A request's prompt tokens include its cached and image positions (cached_tokens, image_tokens).
#define WASTE_GENERATE_STATS(X, G)                                                                                   \
  WASTE_TOKEN_STATS(X, G)                                                                                             \
  X(double, prefill_seconds, "prefillSeconds", "/prefill_seconds", Counter, "seconds", "", 1,                         \
    "Seconds prefilling the prompt.")                                                                                 \
  X(double, queue_seconds, "queueSeconds", "/queue_seconds", Counter, "seconds", "", 1,                               \
    "Seconds waited before the first step.")                                                                          \
  G(ExpertSourceStats, experts)                                                                                       \
  X(uint32_t, tool_calls, "toolCalls", "/tool_calls", Counter, "calls", "", 1,                                        \
    "Tool calls in the reply of a chat (finish_reason tool_calls).")                                                  \
  X(uint64_t, cached_tokens, "cachedTokens", "/cached_tokens", Counter, "tokens", "", 1,                              \
    "Of the prompt tokens, restored from a prompt-cache checkpoint (not prefilled).")                                 \
  X(uint64_t, image_tokens, "imageTokens", "/image_tokens", Counter, "tokens", "", 1,                                 \
    "Of the prompt tokens, the positions images expanded into.")                                                      \
  X(double, image_seconds, "imageSeconds", "/image_seconds", Counter, "seconds", "", 1,                               \
    "Seconds the vision tower ran on the request's images.")

namespace waste::stats {

// The request's statistics; its stop reason (text, not a statistic) is kept beside them by
// whoever holds one (GenerateOutcome, client::Result, waste::GenerateStats).
struct GenerateStats {
  WASTE_STATS(WASTE_GENERATE_STATS)
};

}  // namespace waste::stats
