// What waste-serve counts itself, since it started (its /metrics, after compute's
// engine_stats.h): the images of the requests it answered and its HTTP connections; a list of
// stat.h. Nothing carries them over Cap'n Proto (no field names); the JSON pointers place them
// should a JSON form be wanted.
#pragma once
#include <cstdint>

#include "shared/stats/stat.h"

#define WASTE_SERVE_STATS(X, G)                                                                                      \
  X(uint64_t, images, "", "/images", Counter, "images", "waste_images_total", 1,                                      \
    "Images in answered requests (counted by this waste-serve since it started).")                                    \
  X(uint64_t, image_tokens, "", "/image_tokens", Counter, "tokens", "waste_image_tokens_total", 1,                    \
    "Prompt positions those images took (counted in prompt tokens).")                                                 \
  X(double, image_seconds, "", "/image_seconds", Counter, "seconds", "waste_vision_seconds_total", 1,                 \
    "Seconds compute's vision tower ran on those images.")                                                            \
  X(uint64_t, http_connections, "", "/http/connections", Gauge, "connections", "waste_http_connections", 1,           \
    "HTTP connections open (queued or served).")                                                                      \
  X(uint64_t, http_refused, "", "/http/refused", Counter, "connections", "waste_http_connections_refused_total", 1,   \
    "HTTP connections refused: over --max-connections-per-client.")                                                   \
  X(uint64_t, http_read_timeouts, "", "/http/read_timeouts", Counter, "connections",                                  \
    "waste_http_request_read_timeouts_total", 1,                                                                      \
    "HTTP connections closed: a request not read whole within --request-read-timeout.")                               \
  X(uint64_t, http_abandoned, "", "/http/abandoned", Counter, "requests", "waste_http_abandoned_total", 1,             \
    "Non-streaming requests cancelled because their client closed the connection.")

namespace waste::stats {

struct ServeStats {
  WASTE_STATS(WASTE_SERVE_STATS)
};

}  // namespace waste::stats
